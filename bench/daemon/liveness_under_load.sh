#!/usr/bin/env bash
# How often healthy agents are declared dead on a loaded machine: a scheduler
# with --agent-timeout T and N agents (2 slots each, each running a job of two
# sleeping workers) beside B busy loops (CPU hogs at the same priority) for D
# seconds; prints the "stopped heartbeating" declarations and the machine's
# load average. Used to choose the --agent-timeout default (docs/performance.md).
#   bench/daemon/liveness_under_load.sh [BUILD] [T] [AGENTS] [BUSY] [SECONDS]
set -euo pipefail
build="${1:-build}" timeout_s="${2:-3}" agents="${3:-4}" busy="${4:-24}" dur="${5:-90}"
dir="$(mktemp -d /tmp/aryl-liveness.XXXXXX)"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
"$build/scheduler/aryl-scheduler" --endpoint "tcp://127.0.0.1:*" --insecure --state "$dir/state.db" --http-port -1 \
  --agent-timeout "$timeout_s" >"$dir/scheduler.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q -o -E 'tcp://127\.0\.0\.1:[0-9]+' "$dir/scheduler.log" 2>/dev/null && break; sleep 0.1; done
ep="$(grep -o -E 'tcp://127\.0\.0\.1:[0-9]+' "$dir/scheduler.log" | head -1)"
for i in $(seq "$agents"); do
  "$build/agent/aryl-agent" --scheduler "$ep" --id "a$i" --host 127.0.0.1 --slots 2 --gpu-type cpu \
    --log-dir "$dir/logs-$i" >"$dir/agent-$i.log" 2>&1 &
  pids+=($!)
done
sleep 2
for i in $(seq "$agents"); do
  timeout 10 "$build/cli/aryl" --scheduler "$ep" submit --workers 2 -- sleep "$((dur + 30))" >/dev/null
done
for _ in $(seq "$busy"); do (while :; do :; done) & pids+=($!); done
sleep "$dur"
load="$(cut -d' ' -f1-3 /proc/loadavg)"
dead="$(grep -c 'stopped heartbeating' "$dir/scheduler.log" || true)"
echo "agent-timeout ${timeout_s}s, $agents agents, $busy busy loops, ${dur}s: $dead declared dead; load $load"
