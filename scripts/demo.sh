#!/usr/bin/env bash
# The standalone Aryl demo (./dev demo): on this one machine, a scheduler, a
# "training" agent with 2 slots and an "inference" agent with 4 slots whose
# availability follows a compressed daily demand curve (a day in 40 s). The
# elastic MLP example grows onto the loaned slots and shrinks when inference
# reclaims them, while it trains to completion. Every socket uses CURVE with
# key pairs made for the demo. About a minute, then a summary.
#
#   BUILD=build bash scripts/demo.sh      (STEPS=..., DAY_SECONDS=... to vary)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD:-$ROOT/build}"
STEPS="${STEPS:-3500}"
DAY_SECONDS="${DAY_SECONDS:-40}"
SCHED="$BUILD/scheduler/aryl-scheduler"
AGENT="$BUILD/agent/aryl-agent"
ARYL="$BUILD/cli/aryl"
RUN="$BUILD/cli/aryl-run"
MLP="$BUILD/examples/elastic_mlp"
for b in "$SCHED" "$AGENT" "$ARYL" "$RUN" "$MLP"; do
  [ -x "$b" ] || { echo "demo: $b is missing; run ./dev build first" >&2; exit 1; }
done

WORK="$(mktemp -d /tmp/aryl-demo.XXXXXX)"
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT="$(free_port)"
HTTP="$(free_port)"
EP="tcp://127.0.0.1:$PORT"

# CURVE: one pair for the scheduler, one shared by the agents and the clients.
"$ARYL" keygen "$WORK/keys" scheduler >/dev/null
"$ARYL" keygen "$WORK/keys" member >/dev/null
mkdir -p "$WORK/allow" && cp "$WORK/keys/member.pub" "$WORK/allow/"
export ARYL_SCHEDULER="$EP"
export ARYL_CURVE_KEY="$WORK/keys/member.key"
export ARYL_CURVE_SERVER_KEY="$WORK/keys/scheduler.pub"
CURVE_AGENT=(--curve-key "$ARYL_CURVE_KEY" --curve-server-key "$ARYL_CURVE_SERVER_KEY")

# A day in DAY_SECONDS: inference needs its server from ~08:00 to ~20:00.
SCALE="$(python3 -c "print(86400/$DAY_SECONDS)")"
echo "Aryl demo: scheduler on $EP (CURVE), http://127.0.0.1:$HTTP/status, work dir $WORK"
echo "  training agent: 2 slots; inference agent: 4 slots, demand daily:peak=0.9,trough=0.1 (a day in ${DAY_SECONDS}s)"
"$SCHED" --endpoint "tcp://127.0.0.1:$PORT" --state "$WORK/state.db" --http-port "$HTTP" \
  --curve-key "$WORK/keys/scheduler.key" --curve-allow "$WORK/allow" \
  --heartbeat 0.2 --agent-timeout 2 --rescale-pause 1 --restart-pause 3 \
  --inference-demand "daily:peak=0.9,trough=0.1,peak_hour=14,noise=0,step=300" \
  --demand-time-scale "$SCALE" >"$WORK/scheduler.log" 2>&1 &
PIDS+=($!)
"$AGENT" --scheduler "$EP" --id train-0 --host 127.0.0.1 --pool training --slots 2 --gpu-type cpu --log-dir "$WORK/logs" \
  "${CURVE_AGENT[@]}" >"$WORK/agent-train.log" 2>&1 &
PIDS+=($!)
"$AGENT" --scheduler "$EP" --id infer-0 --host 127.0.0.1 --pool inference --slots 4 --gpu-type cpu --log-dir "$WORK/logs" \
  "${CURVE_AGENT[@]}" >"$WORK/agent-infer.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 50); do
  "$ARYL" nodes --json 2>/dev/null | grep -c '"connected": true' | grep -q 2 && break
  sleep 0.2
done

# The job: elastic between 1 and 6 workers (2 training slots + 4 loanable).
"$RUN" --name mlp --min 1 --max 6 --checkpoint-dir "$WORK/ckpt" --follow-logs "$WORK/logs" -- \
  "$MLP" --steps "$STEPS" --hidden 256 --log-every 250 >"$WORK/job.out" 2>"$WORK/job.err" &
RUN_PID=$!
PIDS+=($RUN_PID)

# The live view, refreshed every 2 s while the job runs.
START=$(date +%s)
while kill -0 "$RUN_PID" 2>/dev/null; do
  sleep 4
  printf '\n--- t=%ss ---\n' "$(( $(date +%s) - START ))"
  "$ARYL" top --once 2>/dev/null | sed -n '1,40p' | grep -v '^$' || true
done
wait "$RUN_PID" && RC=0 || RC=$?

echo
echo "================ summary ================"
# Rank 0 may move between workers across resizes: read every worker's output.
OUTS=("$WORK"/logs/job-1/worker-*.out)
DONE="$(cat "${OUTS[@]}" 2>/dev/null | grep -h '^done ' | tail -1 || true)"
echo "job exit code : $RC"
echo "final         : ${DONE:-no 'done' line (see $WORK/logs/job-1)}"
echo "wall time     : $(( $(date +%s) - START )) s"
echo "rescales (each pause as the runtime measured it):"
cat "${OUTS[@]}" 2>/dev/null | grep -h '^aryl: resize' | sort -t= -k3 -n | sed -E 's/.*from_world=([0-9]+) to_world=([0-9]+) step=([0-9]+) planned=([01]).*total_s=([0-9.]+).*/  step \3: \1 -> \2 workers, pause \5 s/' || echo "  none"
curl_status() { python3 - "$HTTP" <<'PY'
import json, sys, urllib.request
s = json.load(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/status", timeout=3))
lat = s.get("reclaim_latency", {})
print(f"reclaims      : {int(s.get('reclaims', 0))} (late: {int(s.get('reclaims_late', 0))}), slowest {lat.get('max_seconds', 0):.2f} s")
print(f"rescales      : {int(s.get('rescales', 0))}, preemptions {int(s.get('preemptions', 0))}")
r = s.get("rounds", {})
print(f"sched rounds  : {r.get('count', 0)}, max {1000 * r.get('max_seconds', 0):.2f} ms")
PY
}
curl_status || echo "(scheduler status unavailable)"
echo "logs          : $WORK"
exit "$RC"
