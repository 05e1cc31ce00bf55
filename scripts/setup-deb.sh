#!/usr/bin/env bash
# Installs the Debian packages the build, tests, demo and benchmarks need.
# Quick when done: only missing packages are installed.
set -euo pipefail
# python3-onnx + python3-numpy run the model converter (scripts/tfjs2onnx);
# python3-skimage ships the photographs of the golden model tests.
pkgs=(nginx-light chromium iproute2 openssl wrk curl jq ca-certificates procps python3-onnx python3-numpy python3-skimage)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "setup-deb: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian starts nginx on install; our tests run their own instances.
if command -v systemctl >/dev/null 2>&1; then $sudo systemctl disable --now nginx >/dev/null 2>&1 || true; fi
$sudo pkill -x nginx >/dev/null 2>&1 || true
