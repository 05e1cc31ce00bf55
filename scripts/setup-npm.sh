#!/usr/bin/env bash
# Installs the pinned npm tools the tests use into .deps/node (Node 22 for the OpenAI clients and the
# MCP conformance suite and Inspector). Quick when done.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/.deps/node"
stamp="$dir/.installed-v3"
[ -f "$stamp" ] && exit 0
mkdir -p "$dir"
cp "$root/scripts/npm-tools.json" "$dir/package.json"
echo "setup-npm: installing pinned npm tools into $dir" >&2
(cd "$dir" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
touch "$stamp"
