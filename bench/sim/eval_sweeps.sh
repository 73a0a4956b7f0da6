#!/usr/bin/env bash
# The sweeps of docs/evaluation.md: how aryl's gains over the baseline change with
# load, the elastic fraction, the reclaim deadline and the inference GPU type.
# Each point is one aryl-sim invocation (baseline + aryl) on the 21 busiest days
# of the merged ITP traces (days 25-46); results go to OUT/*.json and a summary
# table on stdout.
# Usage: bench/sim/eval_sweeps.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:-$ROOT/build}"
OUT="${2:-/tmp/aryl-sweeps}"
SIM="$BUILD/scheduler/aryl-sim"
mkdir -p "$OUT"
TRACES=$(ls "$ROOT"/data/traces/itp/cluster*.csv | paste -sd, -)
COMMON=(--trace "$TRACES" --window 2160000:3974400 --training 56x8xA100
        --inference-demand daily:peak=0.9,trough=0.3,peak_hour=14,weekend=0.6,noise=0.05,step=300
        --seed 1 --policy baseline,aryl --no-progress)

run() {  # run NAME FLAGS...
  local name="$1"; shift
  "$SIM" "${COMMON[@]}" --json "$OUT/$name.json" "$@" >/dev/null
}

for load in 0.8 1.0 1.2 1.5; do
  run "load-$load" --inference 48x8xT4 --elastic-fraction 0.5 --reclaim-deadline 300 --load "$load"
done
for ef in 0 0.25 0.5 0.75 1; do
  run "elastic-$ef" --inference 48x8xT4 --elastic-fraction "$ef" --reclaim-deadline 300
done
for dl in 0 60 300 3600; do
  run "deadline-$dl" --inference 48x8xT4 --elastic-fraction 0.5 --reclaim-deadline "$dl"
done
for type in T4 A100; do
  run "type-$type" --inference "48x8x$type" --elastic-fraction 0.5 --reclaim-deadline 300
done

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
print(f"{'point':<16} {'base util':>9} {'wait x':>7} {'1st start x':>11} {'JCT x':>7} {'p99 JCT x':>9} "
      f"{'overall +%':>10} {'loaned GPU-h':>12} {'wasted GPU-h':>12} {'lost GPU-h':>10} {'preempt':>8} {'late':>5}")
def key(n):
    a, b = n[:-5].split('-', 1)
    try: return (a, float(b))
    except ValueError: return (a, b)
def gain(b, a):
    return b / a if a > 0 else float('inf')
for name in sorted((f for f in os.listdir(out) if f.endswith('.json')), key=key):
    runs = {r['policy']: r for r in json.load(open(os.path.join(out, name)))['runs']}
    b, a = runs['baseline'], runs['aryl']
    print(f"{name[:-5]:<16} {b['training_usage']*100:8.1f}% {gain(b['avg_wait_s'], a['avg_wait_s']):6.2f}x "
          f"{gain(b['avg_queue_s'], a['avg_queue_s']):10.2f}x {b['avg_jct_s']/a['avg_jct_s']:6.2f}x "
          f"{b['p99_jct_s']/a['p99_jct_s']:8.2f}x {(a['overall_usage']/b['overall_usage']-1)*100:9.1f}% "
          f"{a['loaned_gpu_hours']:12.0f} {a['wasted_gpu_hours']:12.0f} {a['lost_gpu_hours']:10.0f} {a['preemptions']:8d} "
          f"{a['reclaims_late']:5d}")
PY
