#!/usr/bin/env bash
# Builds the portal's islands bundle (docs/portal.md "Portal islands") into OUT_DIR
# (default target/islands-pkg): bizrq_islands.js and bizrq_islands_bg.wasm,
# for `bizrq serve --islands-dir OUT_DIR`.
#
# rustup may not have the wasm32 target; Debian's rustc-web, cargo-web and
# rust-web-src build std for it from source, linked with rustup's rust-lld
# (or Debian's wasm-ld). A target dir of its own keeps the host build warm.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-target/islands-pkg}"
export RUSTC="${ISLANDS_RUSTC:-/usr/bin/rustc}"
if [ -z "${CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER:-}" ]; then
  LLD="$(ls "${RUSTUP_HOME:-$HOME/.rustup}"/toolchains/*/lib/rustlib/x86_64-unknown-linux-gnu/bin/rust-lld 2>/dev/null | head -1 || true)"
  [ -n "$LLD" ] || LLD="$(command -v wasm-ld || true)"
  [ -n "$LLD" ] || { echo "no wasm linker: rustup's rust-lld or Debian's lld (wasm-ld)" >&2; exit 1; }
  export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER="$LLD"
fi
RUSTC_BOOTSTRAP=1 /usr/bin/cargo build --profile wasm-release --target wasm32-unknown-unknown \
  -Zbuild-std=std,panic_abort -p islands --features hydrate --target-dir target/wasm
WASM=target/wasm/wasm32-unknown-unknown/wasm-release/bizrq_islands.wasm
mkdir -p "$OUT"
# The function names (a custom section the browser never needs) were
# 385 KB of the 644 KB bundle: left out.
wasm-bindgen --target web --no-typescript --remove-name-section --remove-producers-section \
  --out-dir "$OUT" "$WASM"
# No wasm-opt: Debian bookworm's binaryen (108) predates the WASM features
# rustc 1.96 emits and its output fails to instantiate (tried: -Oz with the
# features listed, and --all-features). The bundle is about 300 KB (about
# 115 KB gzipped); binaryen 108's -Oz made 230 KB that did not instantiate.
ls -l "$OUT"
