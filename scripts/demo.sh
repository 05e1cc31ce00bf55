#!/usr/bin/env bash
# make demo: a mentat cluster on loopback (one daemon, two agents each
# running an enginesim model with a management MCP, the router) and the
# mortred stack beside it (fresh tokens, the supervisor with the gateway and
# the PP-OCR model servers). It waits until everything serves, runs every
# line it prints once to prove it works as printed, then waits for Ctrl-C
# and stops everything it started.
#
# Environment:
#   BIN_DIR                 binaries (default: bin/ of the repository)
#   DEMO_DIR                logs, tokens, config copy, images (default .deps/demo)
#   DEMO_EXIT_AFTER_READY=1 stop and exit 0 once everything is proven (CI, tests)
#   DEMO_FREE_PORTS=1       never take the default ports, pick free ones
#   MORTRED_ORT_LIB, MORTRED_MODEL_DIR  as `make` exports them
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN_DIR=${BIN_DIR:-$ROOT/bin}
DEMO_DIR=${DEMO_DIR:-$ROOT/.deps/demo}
export MORTRED_ORT_LIB=${MORTRED_ORT_LIB:-$ROOT/.deps/onnxruntime/libonnxruntime.so.1}
export MORTRED_MODEL_DIR=${MORTRED_MODEL_DIR:-$ROOT/.deps/models}

die() { echo "demo: $*" >&2; exit 1; }

for b in mentatd mentatd-serve enginesim mortred-supervisor mortred-gateway mortred-server mortredctl; do
  [ -x "$BIN_DIR/$b" ] || die "$BIN_DIR/$b is missing; run \`make build\` (or set BIN_DIR to where the binaries are)"
done
BIN_DIR=$(cd "$BIN_DIR" && pwd)
for c in curl jq ss setsid go base64; do
  command -v "$c" >/dev/null || die "$c is not installed; run \`make setup\`"
done
[ -r "$MORTRED_ORT_LIB" ] || die "ONNX Runtime not found at $MORTRED_ORT_LIB; run \`make setup-models\`"
[ -d "$MORTRED_MODEL_DIR/ppocr" ] || die "PP-OCR models not found under $MORTRED_MODEL_DIR; run \`make setup-models\`"

mkdir -p "$DEMO_DIR"
DEMO_DIR=$(cd "$DEMO_DIR" && pwd)
LOGS=$DEMO_DIR/logs
rm -rf "$LOGS" "$DEMO_DIR/conf" "$DEMO_DIR/img"
mkdir -p "$LOGS" "$DEMO_DIR/img"

# ---- process lifecycle -----------------------------------------------------
# Every long-running process is started with setsid, so it leads its own
# process group and a terminal's Ctrl-C reaches only this script; cleanup
# then stops the groups in reverse start order (SIGTERM, SIGKILL after a
# grace period). Engines run in their agents' care (the agent passes SIGTERM
# on); their pids are recorded too, in case an agent cannot.
PIDS=() NAMES=() EXTRA_PIDS=() SLEEP_PID=""

launch() { # NAME COMMAND...
  local name=$1; shift
  setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  PIDS+=("$!") NAMES+=("$name")
}

group_alive() { kill -0 -- "-$1" 2>/dev/null; }

stop_group() { # PGID NAME
  local pg=$1 name=$2 i
  group_alive "$pg" || return 0
  kill -TERM -- "-$pg" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do
    group_alive "$pg" || return 0
    sleep 0.1
  done
  echo "demo: $name did not stop within 15 s of SIGTERM; killing it" >&2
  kill -KILL -- "-$pg" 2>/dev/null || true
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  [ -n "$SLEEP_PID" ] && kill "$SLEEP_PID" 2>/dev/null
  if [ ${#PIDS[@]} -gt 0 ]; then
    echo "demo: stopping ${NAMES[*]}" >&2
    local i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop_group "${PIDS[i]}" "${NAMES[i]}"; done
    for p in "${EXTRA_PIDS[@]}"; do stop_group "$p" "engine $p"; done
    wait 2>/dev/null || true
    echo "demo: stopped; logs in $LOGS" >&2
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- ports -----------------------------------------------------------------
# Random picks stay below the kernel's ephemeral range, where the loopback
# connections of whatever else runs here take their local ports; a port is
# busy when any socket (listening or not) has it.
TAKEN=" "
read -r EPHEMERAL_LOW _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || EPHEMERAL_LOW=32768
[ "$EPHEMERAL_LOW" -gt 12000 ] || EPHEMERAL_LOW=32768
port_busy() { ss -Htuan "( sport = :$1 )" 2>/dev/null | grep -q .; }
assign() { # VAR DEFAULT → VAR is a port nobody listens on (DEFAULT when free)
  local p=$2
  if [ "${DEMO_FREE_PORTS:-}" = 1 ] || port_busy "$p" || [[ $TAKEN == *" $p "* ]]; then
    while :; do
      p=$((10000 + RANDOM % (EPHEMERAL_LOW - 10000)))
      port_busy "$p" || [[ $TAKEN == *" $p "* ]] || break
    done
  fi
  TAKEN+="$p "
  printf -v "$1" %s "$p"
}
assign DAEMON_PORT 6380
assign SERVE_PORT 6381
assign UDP_PORT 6382
assign ALPHA_PORT 8101
assign ALPHA_MCP 8111
assign BETA_PORT 8102
assign BETA_MCP 8112
assign SUP_PORT 8787
assign GW_PORT 8080

wait_for() { # WHAT SECONDS COMMAND... — polls COMMAND, fails when a process died
  local what=$1 secs=$2 i j; shift 2
  for ((i = 0; i < secs * 4; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    for j in "${!PIDS[@]}"; do
      if ! kill -0 "${PIDS[j]}" 2>/dev/null; then
        echo "demo: ${NAMES[j]} exited while waiting for $what; its log ($LOGS/${NAMES[j]}.log) ends:" >&2
        tail -n 20 "$LOGS/${NAMES[j]}.log" >&2
        exit 1
      fi
    done
    sleep 0.25
  done
  die "$what not ready after ${secs} s; logs in $LOGS"
}

# ---- the mentat cluster ----------------------------------------------------
echo "demo: starting the mentat cluster (logs in $LOGS)"
# The daemon ranks only lo and never broadcasts: it unicasts its
# announcements to the router's UDP port on 127.0.0.1.
launch daemon env MENTAT_HTTP_HOST=127.0.0.1 MENTAT_HTTP_PORT="$DAEMON_PORT" \
  MENTAT_ANNOUNCE_IFACES=lo MENTAT_ANNOUNCE_PORT=0 MENTAT_ANNOUNCE_ADDR="127.0.0.1:$UDP_PORT" \
  MENTAT_ANNOUNCE_INTERVAL_S=2 "$BIN_DIR/mentatd" daemon
wait_for "the daemon" 30 curl -sf "http://127.0.0.1:$DAEMON_PORT/status"

# alpha announces the port form, beta the URL form; both with an MCP.
launch agent-alpha env MENTAT_DAEMON="127.0.0.1:$DAEMON_PORT" MENTAT_GROUP=alpha MENTAT_CONTAINER=alpha \
  MENTAT_OPENAI_API="$ALPHA_PORT/v1" MENTAT_MCP_API="$ALPHA_MCP/mcp" MENTAT_MODEL_PROVIDER=vllm \
  "$BIN_DIR/mentatd" agent -- "$BIN_DIR/enginesim" --model alpha-7b --host 127.0.0.1 --port "$ALPHA_PORT" \
  --mcp-port "$ALPHA_MCP" --ttft 80ms --itl 40ms
launch agent-beta env MENTAT_DAEMON="127.0.0.1:$DAEMON_PORT" MENTAT_GROUP=beta MENTAT_CONTAINER=beta \
  MENTAT_OPENAI_API="http://127.0.0.1:$BETA_PORT/v1" MENTAT_MCP_API="http://127.0.0.1:$BETA_MCP/mcp" \
  MENTAT_MODEL_PROVIDER=vllm \
  "$BIN_DIR/mentatd" agent -- "$BIN_DIR/enginesim" --model beta-1b --host 127.0.0.1 --port "$BETA_PORT" \
  --mcp-port "$BETA_MCP" --ttft 50ms --itl 20ms
launch router env SERVE_PORT="$SERVE_PORT" MENTAT_DAEMONS="127.0.0.1:$DAEMON_PORT" \
  MENTAT_ANNOUNCE_PORT="$UDP_PORT" POLL_INTERVAL_S=2 PROBE_INTERVAL_S=1 "$BIN_DIR/mentatd-serve"

two_models() { [ "$(curl -sf "http://127.0.0.1:$SERVE_PORT/v1/models" | jq '.data | length')" = 2 ]; }
wait_for "both models to route" 60 two_models
while read -r pid; do EXTRA_PIDS+=("$pid"); done < <(curl -sf "http://127.0.0.1:$DAEMON_PORT/status" |
  jq -r '.groups[].actors[] | select(.state == "running") | .pid')

# ---- the mortred stack -----------------------------------------------------
echo "demo: starting the mortred stack (PP-OCR models load in a few seconds)"
"$BIN_DIR/mortredctl" init-trust --out "$DEMO_DIR/mortred.env" --force >/dev/null
API_TOKEN=$(sed -n 's/^MORTRED_API_TOKEN=//p' "$DEMO_DIR/mortred.env")
[ -n "$API_TOKEN" ] || die "mortredctl init-trust wrote no MORTRED_API_TOKEN to $DEMO_DIR/mortred.env"

# A copy of conf/ with this demo's ports and log directory; everything else
# (TESTMODEL not autostarted, the PP-OCR servers) as the repository has it.
cp -r "$ROOT/conf" "$DEMO_DIR/conf"
sed -i -e "s|^api_port = .*|api_port = $SUP_PORT|" -e "s|^port = 8080\b.*|port = $GW_PORT|" \
  -e "s|^log_dir = .*|log_dir = \"$LOGS/mortred\"|" "$DEMO_DIR/conf/mortred.toml"
for f in "$DEMO_DIR"/conf/server/*.toml; do
  p=$(sed -n 's/^port = \([0-9]*\).*/\1/p' "$f")
  [ -n "$p" ] || continue
  assign np "$p"
  sed -i "s|^port = $p\b|port = $np|" "$f"
done

# Tokens reach the supervisor through its environment only.
(
  set -a; . "$DEMO_DIR/mortred.env"; set +a
  exec setsid "$BIN_DIR/mortred-supervisor" --config "$DEMO_DIR/conf/mortred.toml" \
    --server-bin "$BIN_DIR/mortred-server" --gateway-bin "$BIN_DIR/mortred-gateway"
) >"$LOGS/supervisor.log" 2>&1 </dev/null &
PIDS+=("$!") NAMES+=(supervisor)

ppocr_ready() {
  curl -sf -H "Authorization: Bearer $API_TOKEN" "http://127.0.0.1:$SUP_PORT/api/v1/servers/PPOCR" |
    jq -e '.ready == true'
}
wait_for "PPOCR" 240 ppocr_ready
go run "$ROOT/mortred/model/ppocr/textimg/gen" -out "$DEMO_DIR/img" >/dev/null \
  || die "could not render the OCR sample images (go run ./mortred/model/ppocr/textimg/gen)"
IMG=$DEMO_DIR/img/page.png
printf '{"req_id":"demo","images":["%s"]}' "$(base64 -w0 "$IMG")" >"$DEMO_DIR/ppocr-request.json"

# ---- prove every printed line ----------------------------------------------
R="http://127.0.0.1:$SERVE_PORT"
JSON="-H 'content-type: application/json'"
MCPH="-H 'content-type: application/json' -H 'accept: application/json, text/event-stream'"
INIT='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}'

LINES=(
  "curl -s $R/v1/models | jq -c '.data[] | {id, owned_by}'"
  "curl -s $R/status.json | jq '.groups | map_values({healthy, openai, provider, mcp, why_not})'"
  "curl -sN $R/v1/chat/completions $JSON -d '{\"model\":\"alpha-7b\",\"stream\":true,\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}'"
  "curl -s $R/v1/responses/input_tokens $JSON -d '{\"model\":\"alpha-7b\",\"input\":\"hello world\"}'"
  "S=\$(curl -s -o /dev/null -D - $R/mcp $MCPH -d '$INIT' | tr -d '\\r' | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p')
curl -s -o /dev/null $R/mcp $MCPH -H \"mcp-session-id: \$S\" -d '{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}'
curl -s $R/mcp $MCPH -H \"mcp-session-id: \$S\" -d '{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/list\"}' | sed -n 's/^data: //p' | jq -r '.result.tools[].name'"
)
CHECKS=( # what each line's output must contain
  '"id":"alpha-7b"'
  '"healthy": true'
  'data: [DONE]'
  '"input_tokens":'
  'alpha__'
)
MORTRED_LINES=(
  "$BIN_DIR/mortredctl --addr 127.0.0.1:$SUP_PORT --gateway 127.0.0.1:$GW_PORT --token $API_TOKEN infer PPOCR --image $IMG"
  "curl -s http://127.0.0.1:$GW_PORT/v1/models/PPOCR/infer -H 'Authorization: Bearer $API_TOKEN' $JSON -d @$DEMO_DIR/ppocr-request.json | jq -r '.results[0].data[].text'"
)
MORTRED_CHECKS=('status 0' 'HELLO WORLD 2026')

prove() { # LINE MUST-CONTAIN
  local out
  if ! out=$(bash -o pipefail -c "$1" 2>&1) || [[ $out != *"$2"* ]]; then
    printf '\ndemo: this line did not work as printed:\n%s\n--- its output:\n%s\n' "$1" "$out" >&2
    exit 1
  fi
  printf '%s\n' "$out" | head -n 12 | cut -c1-200 || true # head may cut printf off
}

echo
echo "================ mentat: router on $R ================"
for i in "${!LINES[@]}"; do
  printf '\n$ %s\n' "${LINES[i]}"
  prove "${LINES[i]}" "${CHECKS[i]}"
done
# (Read whole before matching: grep -q would cut curl off with SIGPIPE.)
page=$(curl -sf -H 'accept: text/html' "$R/") && [[ ${page,,} == *"<html"* ]] \
  || die "the status page at $R/ did not answer with HTML; see $LOGS/router.log"
echo
echo "Status page: $R/  (in a browser)"

echo
echo "================ mortred: supervisor on http://127.0.0.1:$SUP_PORT ================"
echo "Web UI:  http://127.0.0.1:$SUP_PORT/"
echo "Token to paste: $API_TOKEN"
echo "(all tokens: $DEMO_DIR/mortred.env)"
for i in "${!MORTRED_LINES[@]}"; do
  printf '\n$ %s\n' "${MORTRED_LINES[i]}"
  prove "${MORTRED_LINES[i]}" "${MORTRED_CHECKS[i]}"
done

echo
echo "demo: ready — ports: daemon $DAEMON_PORT, router $SERVE_PORT (UDP $UDP_PORT), engines $ALPHA_PORT/$BETA_PORT (MCP $ALPHA_MCP/$BETA_MCP), supervisor $SUP_PORT, gateway $GW_PORT"
if [ "${DEMO_EXIT_AFTER_READY:-}" = 1 ]; then
  echo "demo: DEMO_EXIT_AFTER_READY=1, stopping"
  exit 0
fi
echo "demo: press Ctrl-C to stop everything"
sleep infinity &
SLEEP_PID=$!
wait "$SLEEP_PID"
