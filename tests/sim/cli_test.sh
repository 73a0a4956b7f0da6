#!/usr/bin/env bash
# aryl-sim end to end: byte-identical JSON for the same inputs and seed (apart
# from sim_wall_s), exit code 2 for bad flags, 1 with file:line for a bad trace
# row, --skip-bad-rows counting, the timeline CSV header, boolean flags, stray
# arguments, the per-job CSV, and exit 2 for bad values found before the run
# (unknown GPU type, demand generator, unwritable outputs); --queues' per-queue
# JSON and its file errors.
# Usage: cli_test.sh ARYL_SIM SOURCE_DIR
set -euo pipefail
SIM="$1"
SRC="$2"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

TRACE="$SRC/data/traces/itp/cluster10.csv"
ARGS=(--trace "$TRACE" --training 2x8xA100 --inference 2x8xT4 --elastic-fraction 0.5 --seed 7
      --inference-demand daily:noise=0.1 --policy baseline,aryl --no-progress)

# 1. Determinism: two runs, identical JSON once sim_wall_s is blanked.
"$SIM" "${ARGS[@]}" --json "$TMP/a.json" --timeline "$TMP/t.csv" >/dev/null
"$SIM" "${ARGS[@]}" --json "$TMP/b.json" >/dev/null
sed -E 's/"sim_wall_s": [0-9.e+-]+/"sim_wall_s": 0/' "$TMP/a.json" >"$TMP/a0.json"
sed -E 's/"sim_wall_s": [0-9.e+-]+/"sim_wall_s": 0/' "$TMP/b.json" >"$TMP/b0.json"
cmp -s "$TMP/a0.json" "$TMP/b0.json" || fail "JSON differs between identical runs"
grep -q '"jobs_completed": 260' "$TMP/a.json" || fail "not every job completed"
head -1 "$TMP/t.csv" | grep -q '^policy,time_s,queued_jobs,running_jobs,busy_training_gpus' || fail "timeline header"

# 2. A bad flag value is a usage error: exit 2.
set +e
"$SIM" "${ARGS[@]}" --training 64x8 >/dev/null 2>"$TMP/err"; rc=$?
set -e
[ $rc -eq 2 ] || fail "bad --training gave exit $rc, want 2"
grep -q "aryl-sim: error: --training" "$TMP/err" || fail "usage error message: $(cat "$TMP/err")"

# 3. A bad row is fatal (exit 1, file:line and reason) unless --skip-bad-rows.
{ cat "$TRACE"; printf '\nbad-row,12,-5,1\n'; } >"$TMP/bad.csv"
set +e
"$SIM" --trace "$TMP/bad.csv" --training 2x8xA100 --inference none --policy baseline --no-progress \
  >/dev/null 2>"$TMP/err"; rc=$?
set -e
[ $rc -eq 1 ] || fail "bad row gave exit $rc, want 1"
grep -q "bad.csv:262: duration: must be > 0" "$TMP/err" || fail "bad row message: $(cat "$TMP/err")"
"$SIM" --trace "$TMP/bad.csv" --training 2x8xA100 --inference none --policy baseline --no-progress \
  --skip-bad-rows --json "$TMP/s.json" >/dev/null 2>"$TMP/err"
grep -q '"skipped_rows": 1' "$TMP/s.json" || fail "skipped row not counted"
grep -q "skipped .*bad.csv:262" "$TMP/err" || fail "skipped row not reported"
# 4. Boolean flags: `--flag false` and --no-flag reach the config; a stray
#    positional argument is a usage error (exit 2), not silently ignored.
SMALL=(--trace "$TRACE" --training 2x8xA100 --inference 2x8xT4 --policy baseline --no-progress)
"$SIM" "${SMALL[@]}" --inelastic-on-loaned false --json "$TMP/f1.json" >/dev/null
grep -q '"inelastic_on_loaned": false' "$TMP/f1.json" || fail "--inelastic-on-loaned false ignored"
"$SIM" "${SMALL[@]}" --no-inelastic-on-loaned --json "$TMP/f2.json" >/dev/null
grep -q '"inelastic_on_loaned": false' "$TMP/f2.json" || fail "--no-inelastic-on-loaned ignored"
"$SIM" "${SMALL[@]}" --fifo=false --json "$TMP/f3.json" >/dev/null
grep -q '"fifo": false' "$TMP/f3.json" || fail "--fifo=false read as true"
"$SIM" "${SMALL[@]}" --hetero-dp --json "$TMP/f4.json" >/dev/null
grep -q '"hetero_dp": true' "$TMP/f4.json" || fail "--hetero-dp ignored"
grep -q '"throughput_row": "usual"' "$TMP/f4.json" || fail "the default throughput row is not usual"
set +e
"$SIM" "${SMALL[@]}" stray >/dev/null 2>"$TMP/err"; rc=$?
set -e
[ $rc -eq 2 ] || fail "stray argument gave exit $rc, want 2"
grep -q "unexpected argument 'stray'" "$TMP/err" || fail "stray argument message: $(cat "$TMP/err")"

# 5. --jobs-csv: the documented header and one row per policy and job.
"$SIM" "${SMALL[@]}" --jobs-csv "$TMP/jobs.csv" >/dev/null
head -1 "$TMP/jobs.csv" | grep -qx 'policy,job_id,submit_s,first_start_s,finish_s,waiting_s,preemptions,rescales,gpu_types' \
  || fail "jobs CSV header: $(head -1 "$TMP/jobs.csv")"
[ "$(wc -l <"$TMP/jobs.csv")" -eq 261 ] || fail "jobs CSV rows: $(wc -l <"$TMP/jobs.csv")"

# 6. --speed-knowledge: oracle (the default) writes exactly what no flag does;
#    learned records itself in the config; a bad value is a usage error.
"$SIM" "${SMALL[@]}" --json "$TMP/s0.json" >/dev/null
"$SIM" "${SMALL[@]}" --speed-knowledge oracle --json "$TMP/s1.json" >/dev/null
sed 's/"sim_wall_s": [0-9.e+-]*/W/' "$TMP/s0.json" >"$TMP/s0.cmp"
sed 's/"sim_wall_s": [0-9.e+-]*/W/' "$TMP/s1.json" >"$TMP/s1.cmp"
cmp -s "$TMP/s0.cmp" "$TMP/s1.cmp" || fail "--speed-knowledge oracle differs from the default"
"$SIM" "${SMALL[@]}" --policy aryl --speed-knowledge learned --json "$TMP/s2.json" >/dev/null
grep -q '"speed_knowledge": "learned"' "$TMP/s2.json" || fail "--speed-knowledge learned not in the config"
set +e
"$SIM" "${SMALL[@]}" --speed-knowledge psychic >/dev/null 2>"$TMP/err"; rc=$?
set -e
[ $rc -eq 2 ] || fail "--speed-knowledge psychic gave exit $rc, want 2"

# 7. Bad values of --training (a GPU type without tables: the known types are
#    listed), --inference-demand (a generator's keys and ranges, a missing
#    file) and the outputs (--plot, --json) are usage errors, found before
#    the simulation runs: exit 2 naming the flag.
expect_usage() {  # expect_usage "MESSAGE PART" ARGS...
  local want="$1"; shift
  set +e
  "$SIM" "$@" >/dev/null 2>"$TMP/err"; local rc=$?
  set -e
  [ $rc -eq 2 ] || fail "$* gave exit $rc, want 2: $(cat "$TMP/err")"
  grep -qF -- "$want" "$TMP/err" || fail "$*: message '$(cat "$TMP/err")' lacks '$want'"
}
BASE=(--trace "$TRACE" --inference 2x8xT4 --policy baseline --no-progress)
expect_usage "--training '8x8xZ': no throughput tables for GPU type 'Z'" "${BASE[@]}" --training 8x8xZ
expect_usage "(known: A100, T4)" "${BASE[@]}" --training 8x8xZ
expect_usage "--inference-demand: peak must be in [0,1], got 2" "${SMALL[@]}" --inference-demand daily:peak=2
expect_usage "--inference-demand: unknown key 'peek'" "${SMALL[@]}" --inference-demand daily:peek=0.5
expect_usage "--inference-demand '$TMP/none.csv': no such file" "${SMALL[@]}" --inference-demand "$TMP/none.csv"
expect_usage "--plot '/proc/nope'" "${SMALL[@]}" --plot /proc/nope
expect_usage "--json '$TMP/no/dir/x.json': no directory" "${SMALL[@]}" --json "$TMP/no/dir/x.json"
# A demand FILE with a bad row is input data: exit 1, file:line.
printf 'time_s,servers\n0,x\n' >"$TMP/demand.csv"
set +e
"$SIM" "${SMALL[@]}" --inference-demand "$TMP/demand.csv" >/dev/null 2>"$TMP/err"; rc=$?
set -e
[ $rc -eq 1 ] || fail "bad demand row gave exit $rc, want 1"
grep -q "demand.csv:2" "$TMP/err" || fail "bad demand row message: $(cat "$TMP/err")"
# 5. Teams: --queues adds a per-queue array to every run; a bad file is a
#    usage error naming the file, line and field.
printf 'queue,quota_gpus,weight,jobs_share,priority_mix\na,8,1,0.5,0:1:0\nb,4,2,0.5,0.5:0:0.5\n' >"$TMP/q.csv"
"$SIM" "${ARGS[@]}" --queues "$TMP/q.csv" --json "$TMP/q.json" >"$TMP/q.out"
python3 - "$TMP/q.json" <<'PY' || fail "queues in the JSON"
import json, sys
doc = json.load(open(sys.argv[1]))
assert doc["config"]["queues"].endswith("q.csv"), doc["config"]
for run in doc["runs"]:
    qs = run["queues"]
    assert [q["queue"] for q in qs] == ["a", "b"], qs
    assert sum(q["jobs"] for q in qs) == 260, qs
    for q in qs:
        for k in ("quota_gpus", "gpu_hours", "borrowed_gpu_hours", "avg_queue_s", "avg_jct_s", "quota_held_fraction"):
            assert k in q, (k, q)
        assert 0 <= q["quota_held_fraction"] <= 1, q
PY
grep -q "quota held" "$TMP/q.out" || fail "no per-queue table"
grep -q '"queues"' "$TMP/a.json" && fail "a run without --queues has a queues array"
printf 'queue,quota_gpus,weight,jobs_share\na,8,x,1\n' >"$TMP/bad_q.csv"
expect_usage "--queues: $TMP/bad_q.csv:2: field 'weight': value 'x': not a number" "${SMALL[@]}" --queues "$TMP/bad_q.csv"
printf 'queue,quota_gpus,weight,jobs_share\na,17,1,1\n' >"$TMP/big_q.csv"
expect_usage "big_q.csv:2: field 'quota_gpus': value '17': above the cluster's 16 A100 training GPUs" "${SMALL[@]}" --queues "$TMP/big_q.csv"
expect_usage "--queues: $TMP/none.csv: cannot read" "${SMALL[@]}" --queues "$TMP/none.csv"
echo "cli_test: ok"
