#!/usr/bin/env bash
# Builds the portal's islands bundle (README "Portal islands") into OUT_DIR
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
wasm-bindgen --target web --no-typescript --out-dir "$OUT" "$WASM"
if command -v wasm-opt >/dev/null 2>&1; then
  wasm-opt -Oz --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
    --enable-mutable-globals --enable-reference-types --enable-multivalue \
    -o "$OUT/bizrq_islands_bg.wasm" "$OUT/bizrq_islands_bg.wasm"
fi
ls -l "$OUT"
