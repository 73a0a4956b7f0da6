#!/usr/bin/env bash
# The headline comparison of docs/evaluation.md, shortened to run in about
# 20 seconds on two cores: aryl against the baseline, the two ablations and the
# peers on the shipped ITP traces, with a daily inference cycle.
# Usage: scripts/sim-demo.sh [BUILD_DIR] [extra aryl-sim flags...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build}"
shift || true
SIM="$BUILD/scheduler/aryl-sim"
[ -x "$SIM" ] || { echo "sim-demo: $SIM not built (run ./dev build)" >&2; exit 1; }
OUT="$(mktemp -d /tmp/aryl-sim-demo.XXXXXX)"
TRACES=$(ls "$ROOT"/data/traces/itp/cluster*.csv | paste -sd, -)

echo "Aryl simulator: 8 ITP production traces merged, days 25-46 (the busiest three weeks, --window), training 56x8xA100,"
echo "inference 48x8xT4 with a daily cycle; 50% of jobs elastic. Full experiment: docs/evaluation.md."
echo
"$SIM" --trace "$TRACES" \
  --window 2160000:3974400 \
  --training 56x8xA100 --inference 48x8xT4 \
  --inference-demand daily:peak=0.9,trough=0.3,peak_hour=14,weekend=0.6,noise=0.05,step=300 \
  --reclaim-deadline 300 --elastic-fraction 0.5 --elastic-range 0.5:2 --seed 1 \
  --policy baseline,aryl,loan-only,elastic-only,optimus,afs,tiresias \
  --json "$OUT/results.json" --plot "$OUT/plots" "$@"
echo
echo "JSON: $OUT/results.json   plots: $OUT/plots/timeline.png $OUT/plots/jct_cdf.png"
