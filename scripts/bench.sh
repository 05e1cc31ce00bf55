#!/usr/bin/env bash
# Side-by-side benchmarks, written to docs/benchmarks.md. `make bench` runs
# this after `make setup build` (binaries in bin/, wrk and nginx installed,
# ONNX Runtime and the PP-OCR models in .deps/). Run it on a quiet machine:
# the report records the load average at the start.
#
#   BENCH_DURATION      duration of each measurement (default 5s; wrk takes whole seconds)
#   BENCH_ROUNDS        repetitions of each router/gateway measurement, paths interleaved (default 2)
#   BENCH_ONLY          comma-separated sections (default: all):
#                       router,streams,scale,enginesim,routing,flow,ppocr,gateway,mortredserver,
#                       mortredhosts (needs root for its part with network namespaces)
#   BENCH_IDLE_STREAMS  idle SSE streams held through the router (default 10000)
#   BENCH_ROUTING_REPLICAS  cluster sizes of the routing section (default 2,4)
#   BENCH_ROUTING_WORKLOADS workloads of the routing section (default: all):
#                       shared,distinct,preloaded
#   BENCH_ROUTING_POLICIES  policies of the routing section (default: all):
#                       prefix,least-loaded,round-robin,session,first,fleet,prefix-flow
#                       (fleet: 3 prefix routers behind Nginx, shared workload;
#                       prefix-flow: a prefix router with FLOW_CONTROL=on, shared workload)
#                       (a target whose workload or policies were left out
#                       reads "not measured")
#   BENCH_OUT           report file (default docs/benchmarks.md)
#   BENCH_BIN           directory of the built binaries (default bin/)
set -euo pipefail
cd "$(dirname "$0")/.."

export MORTRED_ORT_LIB="${MORTRED_ORT_LIB:-$PWD/.deps/onnxruntime/libonnxruntime.so.1}"
export MORTRED_MODEL_DIR="${MORTRED_MODEL_DIR:-$PWD/.deps/models}"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/" ./bench/report ./bench/ppocr

args=(-bin "${BENCH_BIN:-$PWD/bin}" -d "${BENCH_DURATION:-5s}" -rounds "${BENCH_ROUNDS:-2}"
      -idle-streams "${BENCH_IDLE_STREAMS:-10000}" -ppocr "$tmp/ppocr"
      -out "${BENCH_OUT:-docs/benchmarks.md}")
if [ -n "${BENCH_ROUTING_REPLICAS:-}" ]; then
	args+=(-routing-replicas "$BENCH_ROUTING_REPLICAS")
fi
if [ -n "${BENCH_ROUTING_WORKLOADS:-}" ]; then
	args+=(-routing-workloads "$BENCH_ROUTING_WORKLOADS")
fi
if [ -n "${BENCH_ROUTING_POLICIES:-}" ]; then
	args+=(-routing-policies "$BENCH_ROUTING_POLICIES")
fi
if [ -n "${BENCH_ONLY:-}" ]; then
	args+=(-only "$BENCH_ONLY")
fi
"$tmp/report" "${args[@]}"
