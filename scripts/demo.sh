#!/usr/bin/env bash
# The standalone Aryl demo (./dev demo): on this one machine, a scheduler, a
# "training" agent with 2 slots and an "inference" agent with 4 slots whose
# availability follows a compressed daily demand curve (a day in 40 s). The
# elastic MLP example grows onto the loaned slots and shrinks when inference
# reclaims them, while it trains to completion. Every socket uses CURVE with
# key pairs made for the demo. The live view says why the job has the size it
# has (the speed the scheduler measured and predicts for each size); about 40 s,
# then a summary and a plot (demo.png in the work dir, with gnuplot).
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

# Ports: the scheduler binds free ones and logs them.
wait_log() {  # wait_log FILE REGEX -> first match
  for _ in $(seq 100); do
    local m; m="$(grep -o -E "$2" "$1" 2>/dev/null | head -1 || true)"
    [ -n "$m" ] && { echo "$m"; return 0; }
    sleep 0.1
  done
  echo "demo: no '$2' in $1" >&2; return 1
}

# CURVE with roles (docs/security.md): a pair for the scheduler, one per agent
# (its name is the agent id it may use) and one for the demo's operator.
for k in scheduler train-0 infer-0 demo; do "$ARYL" keygen "$WORK/keys" "$k" >/dev/null; done
mkdir -p "$WORK/agents" "$WORK/operators"
cp "$WORK/keys/train-0.pub" "$WORK/keys/infer-0.pub" "$WORK/agents/"
cp "$WORK/keys/demo.pub" "$WORK/operators/"
export ARYL_CURVE_KEY="$WORK/keys/demo.key"
export ARYL_CURVE_SERVER_KEY="$WORK/keys/scheduler.pub"
curve_agent() { echo --curve-key "$WORK/keys/$1.key" --curve-server-key "$ARYL_CURVE_SERVER_KEY"; }

# A day in DAY_SECONDS: inference needs its server from ~08:00 to ~20:00.
SCALE="$(awk "BEGIN { print 86400 / $DAY_SECONDS }")"
"$SCHED" --endpoint "tcp://127.0.0.1:*" --state "$WORK/state.db" --http-port 0 \
  --curve-key "$WORK/keys/scheduler.key" --curve-agents "$WORK/agents" --curve-operators "$WORK/operators" \
  --heartbeat 0.2 --agent-timeout 2 --rescale-pause 1 --restart-pause 3 \
  --inference-demand "daily:peak=0.9,trough=0.1,peak_hour=14,noise=0,step=300" \
  --demand-time-scale "$SCALE" >"$WORK/scheduler.log" 2>&1 &
PIDS+=($!)
EP="$(wait_log "$WORK/scheduler.log" 'tcp://127\.0\.0\.1:[0-9]+')"
HTTP="$(wait_log "$WORK/scheduler.log" 'http on 127\.0\.0\.1:[0-9]+' | sed 's/.*://')"
export ARYL_SCHEDULER="$EP"
echo "Aryl demo: scheduler on $EP (CURVE), http://127.0.0.1:$HTTP/status, work dir $WORK"
echo "  training agent: 2 slots; inference agent: 4 slots, demand daily:peak=0.9,trough=0.1 (a day in ${DAY_SECONDS}s)"
"$AGENT" --scheduler "$EP" --id train-0 --host 127.0.0.1 --pool training --slots 2 --gpu-type cpu --log-dir "$WORK/logs" \
  $(curve_agent train-0) >"$WORK/agent-train.log" 2>&1 &
PIDS+=($!)
"$AGENT" --scheduler "$EP" --id infer-0 --host 127.0.0.1 --pool inference --slots 4 --gpu-type cpu --log-dir "$WORK/logs" \
  $(curve_agent infer-0) >"$WORK/agent-infer.log" 2>&1 &
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

# One sample a second for the plot (t, workers, loaned slots, steps/s) and,
# every 4 s, the live view and why the job has its size: the scheduler grows
# a job onto loaned slots only where its speed model (measured online) says
# the job gets faster by more than the resize costs (docs/scheduler.md).
sample() {  # sample T PRINT_WHY
  local job nodes
  job="$("$ARYL" describe job 1 -o json 2>/dev/null || true)"
  nodes="$("$ARYL" nodes -o json 2>/dev/null || true)"
  [ -n "$job" ] && [ -n "$nodes" ] || return 0
  JOB="$job" NODES="$nodes" python3 - "$1" "$2" "$WORK/demo.dat" <<'PY'
import json, os, sys
t, why, dat = float(sys.argv[1]), sys.argv[2] == "1", sys.argv[3]
job, nodes = json.loads(os.environ["JOB"]), json.loads(os.environ["NODES"])["nodes"]
row = job["row"]
loaned = sum(n["slots"] for n in nodes if n["pool"] == "inference" and n["state"] == "loaned")
own = sum(n["slots"] for n in nodes if n["pool"] == "training" and n["connected"])
workers = row["workers"] if row["state"] == "running" else 0
with open(dat, "a") as f:
    f.write(f"{t:.1f} {workers} {loaned} {own} {row['steps_per_second']:.2f}\n")
predicted = {p["workers"]: p["steps_per_second"] for p in (job.get("speed") or {}).get("predicted", [])}
if why and workers and predicted:
    cap = min(row["max_workers"], own + loaned)
    best = max((n for n in predicted if n <= cap), key=lambda n: predicted[n], default=workers)
    at = lambda n: f"{predicted[n]:.0f} steps/s at {n}" if n in predicted else f"? at {n}"
    if loaned and workers < cap:
        print(f"why: {loaned} loaned slots, yet {workers} workers: the speed measured here predicts "
              f"{at(workers)} vs {at(cap)} workers (on this machine the workers share its CPU cores), "
              f"so growing would slow the job")
    elif loaned:
        print(f"why: {workers} workers on own and loaned slots: predicted {at(workers)}, best {at(best)}")
    else:
        print(f"why: nothing loaned (inference needs its server), {workers} workers on the {own} own slots: "
              f"predicted {at(workers)}")
PY
}

START=$(date +%s.%N)
SHOWN=0
while kill -0 "$RUN_PID" 2>/dev/null; do
  sleep 0.5
  T="$(awk -v a="$START" -v b="$(date +%s.%N)" 'BEGIN { printf("%.1f", b - a) }')"
  if (( ${T%.*} - SHOWN >= 4 )); then
    SHOWN=${T%.*}
    printf '\n--- t=%ss ---\n' "${T%.*}"
    "$ARYL" top --once 2>/dev/null | sed -n '1,40p' | grep -v '^$' || true
    sample "$T" 1 || true
  else
    sample "$T" 0 || true
  fi
done
wait "$RUN_PID" && RC=0 || RC=$?

echo
echo "================ summary ================"
# Rank 0 may move between workers across resizes: read every worker's output.
OUTS=("$WORK"/logs/job-1/worker-*.out)
DONE="$(cat "${OUTS[@]}" 2>/dev/null | grep -h '^done ' | tail -1 || true)"
echo "job exit code : $RC"
echo "final         : ${DONE:-no 'done' line (see $WORK/logs/job-1)}"
echo "wall time     : $(awk -v a="$START" -v b="$(date +%s.%N)" 'BEGIN { printf("%.0f", b - a) }') s"
echo "rescales (each pause as the runtime measured it):"
cat "${OUTS[@]}" 2>/dev/null | grep -h '^aryl: resize' | sort -t= -k3 -n | sed -E 's/.*from_world=([0-9]+) to_world=([0-9]+) step=([0-9]+) planned=([01]).*total_s=([0-9.]+).*/  step \3: \1 -> \2 workers, pause \5 s/' || echo "  none"
# The scheduler's own account (the JSON summary behind aryl top and /status).
SUMMARY="$("$ARYL" top --once --json 2>/dev/null || true)"
# Counts print as integers, seconds with three decimals.
num() { awk -v x="$1" -v d="$2" 'BEGIN { if (x == "") print "?"; else printf("%.*f\n", d, x) }'; }
field() { num "$(echo "$SUMMARY" | grep -o -E "\"$1\":[^,}]*" | head -1 | sed 's/.*://')" 0; }
sub() { num "$(echo "$SUMMARY" | grep -o -E "\"$1\":\{[^}]*\}" | grep -o -E "\"$2\":[^,}]*" | sed 's/.*://')" "${3:-0}"; }
if [ -n "$SUMMARY" ]; then
  echo "reclaims      : $(field reclaims) (late: $(field reclaims_late)), slowest emptied in $(sub reclaim_latency max_seconds 3) s"
  echo "rescales      : $(field rescales), preemptions $(field preemptions)"
  echo "sched rounds  : $(sub rounds count), slowest $(sub rounds max_seconds 4) s"
else
  echo "(scheduler status unavailable)"
fi
if command -v gnuplot >/dev/null 2>&1 && [ -s "$WORK/demo.dat" ]; then
  (cd "$WORK" && gnuplot >"$WORK/gnuplot.log" 2>&1 <<'GP'
set terminal pngcairo size 1100,500 font 'DejaVu Sans,11' noenhanced
set output 'demo.png'
set title 'aryl demo: the elastic job on own and loaned slots'
set xlabel 'seconds'
set ylabel 'slots / workers'
set y2label 'steps per second'
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set offsets 0, 0, graph 0.1, 0
set key outside right top vertical Left reverse box opaque
set grid lc rgb '#d0d0d0'
plot 'demo.dat' using 1:($4+$3) with fillsteps fs transparent solid 0.35 noborder fc rgb '#a0a0a0' title 'own + loaned slots (shaded)', \
     'demo.dat' using 1:4 with steps lc rgb '#606060' dt 2 lw 2 title 'own slots', \
     'demo.dat' using 1:2 with steps lc rgb '#1b4f8a' lw 3 title 'workers', \
     'demo.dat' using 1:5 axes x1y2 with lines lc rgb '#b2182b' lw 2 title 'steps/s (right axis)'
GP
  ) && echo "plot          : $WORK/demo.png" || echo "plot          : gnuplot failed (see $WORK/gnuplot.log)"
else
  echo "plot          : none (gnuplot is not installed, or no samples); the samples are in $WORK/demo.dat"
fi
echo "logs          : $WORK"
exit "$RC"
