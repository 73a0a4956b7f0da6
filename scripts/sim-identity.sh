#!/usr/bin/env bash
# Whether two aryl-sim binaries make the same decisions: runs both on the
# workloads of docs/performance.md (issue 39, "Decisions unchanged") and
# compares their JSON (sim_wall_s aside), --timeline CSV and --jobs-csv byte
# for byte. About 12 minutes on two busy cores; exit status 1 on a difference.
# Usage: scripts/sim-identity.sh BEFORE_ARYL_SIM AFTER_ARYL_SIM [OUT_DIR]
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -ge 2 ] || { echo "usage: $0 BEFORE_ARYL_SIM AFTER_ARYL_SIM [OUT_DIR]" >&2; exit 2; }
A=$1 B=$2
OUT=${3:-$(mktemp -d /tmp/aryl-sim-identity.XXXXXX)}
mkdir -p "$OUT"
T="$ROOT/data/traces/itp"
ALL=$(ls "$T"/cluster*.csv | paste -sd, -)
P7=baseline,aryl,loan-only,elastic-only,optimus,afs,tiresias
WORKLOADS=(
  "two-types|--trace $ALL --training 125x8xA100 --inference 64x8xT4 --elastic-fraction 0.5 --seed 1 --load 2 --policy $P7"
  "one-type|--trace $ALL --training 64x8xA100 --inference 32x8xA100 --elastic-fraction 0.5 --seed 1 --load 2 --policy $P7"
  "small|--trace $T/cluster01.csv,$T/cluster10.csv --training 16x8xA100 --inference 8x8xT4 --elastic-fraction 0.5 --seed 3 --policy $P7"
  "hetero-dp|--trace $ALL --training 125x8xA100 --inference 64x8xT4 --elastic-fraction 0.5 --seed 1 --policy aryl --hetero-dp"
  "learned|--trace $T/cluster01.csv,$T/cluster05.csv --training 32x8xA100 --inference 16x8xT4 --elastic-fraction 0.5 --seed 2 --speed-knowledge learned --policy aryl,baseline"
)
fail=0
check() { if "$@"; then r=same; else r=DIFFERENT; fail=1; fi; }
for w in "${WORKLOADS[@]}"; do
  name=${w%%|*}
  read -r -a args <<< "${w#*|}"
  for side in a b; do
    bin=$A
    [ $side = b ] && bin=$B
    nice "$bin" --no-progress "${args[@]}" --json "$OUT/$name.$side.json" --timeline "$OUT/$name.$side.timeline.csv" \
      --jobs-csv "$OUT/$name.$side.jobs.csv" > "$OUT/$name.$side.log" 2>&1 &
  done
  wait
  check python3 - "$OUT/$name.a.json" "$OUT/$name.b.json" <<'PY'
import json, sys
def strip(o):
    if isinstance(o, dict): return {k: strip(v) for k, v in o.items() if k != 'sim_wall_s'}
    if isinstance(o, list): return [strip(v) for v in o]
    return o
sys.exit(0 if strip(json.load(open(sys.argv[1]))) == strip(json.load(open(sys.argv[2]))) else 1)
PY
  json=$r
  check cmp -s "$OUT/$name.a.timeline.csv" "$OUT/$name.b.timeline.csv"
  timeline=$r
  check cmp -s "$OUT/$name.a.jobs.csv" "$OUT/$name.b.jobs.csv"
  jobs=$r
  echo "$name: json $json, timeline $timeline, jobs-csv $jobs ($(($(wc -l < "$OUT/$name.a.jobs.csv") - 1)) job rows)"
done
echo "outputs in $OUT"
exit $fail
