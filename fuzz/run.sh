#!/usr/bin/env bash
# Fuzzes bizrq's input edges with libFuzzer (cargo-fuzz) for SECONDS per
# target (default 60), each from its committed seeds in corpus/<target>/.
# Fails on the first crash; the input is left in artifacts/<target>/.
#
#   fuzz/run.sh [SECONDS] [TARGET...]
#
# Works on a stable toolchain: without a sanitizer (-s none) cargo-fuzz
# needs no -Z flag. FUZZ_SANITIZER=address adds ASan (stable ships its
# runtime; the -Z flag then needs RUSTC_BOOTSTRAP=1, set here). The build
# goes to fuzz/target, apart from the main workspace's target/.
set -euo pipefail
cd "$(dirname "$0")"

seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(quantity admission_review api_bodies)
sanitizer="${FUZZ_SANITIZER:-none}"

command -v c++ >/dev/null 2>&1 || {
  echo "libFuzzer is C++: installing g++" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
}
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz

# fuzz/target whatever the caller's CARGO_TARGET_DIR: the fuzz build's
# flags differ, and must not touch the main workspace's build.
export CARGO_TARGET_DIR="$PWD/target"
if [ "$sanitizer" != none ]; then
  export RUSTC_BOOTSTRAP=1
fi

for t in "${targets[@]}"; do
  echo "== fuzz $t for ${seconds}s (sanitizer: $sanitizer)"
  cargo fuzz build -s "$sanitizer" "$t"
  # New inputs go to a scratch corpus; the committed seeds stay as they are.
  work="target/corpus/$t"
  mkdir -p "$work"
  cargo fuzz run -s "$sanitizer" "$t" "$work" "corpus/$t" -- \
    -max_total_time="$seconds" -dict=dict/json.dict -print_final_stats=1 \
    2>&1 | tee "target/$t.log" | grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|stat::|Done |==[0-9]+==|thread .* panicked)' || true
  # tee hides the fuzzer's status: a crash leaves an artifact and no DONE.
  if ! grep -q '^Done ' "target/$t.log"; then
    echo "FUZZ FAILURE in $t: see fuzz/target/$t.log and fuzz/artifacts/$t/" >&2
    grep -m1 -A25 -E 'panicked|ERROR: libFuzzer' "target/$t.log" >&2 || tail -40 "target/$t.log" >&2
    exit 1
  fi
done
