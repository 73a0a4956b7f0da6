#!/usr/bin/env bash
# scripts/demo.sh with fewer steps: exit 0, a summary with the final step, a
# "why:" line in the live view, and demo.png.
set -euo pipefail
ROOT="$1" BUILD="$2"
out="$(mktemp /tmp/aryl-demo-test.XXXXXX)"
trap 'rm -f "$out"' EXIT
fail() { echo "demo_script_test: $*" >&2; tail -40 "$out" >&2; exit 1; }
BUILD="$BUILD" STEPS=1500 DAY_SECONDS=20 timeout 150 bash "$ROOT/scripts/demo.sh" >"$out" 2>&1 || fail "demo.sh exited $?"
grep -q '^final         : done steps=1500 ' "$out" || fail "no final line with steps=1500"
grep -q '^why: ' "$out" || fail "no why: line"
png="$(sed -n 's/^plot          : \(.*demo\.png\)$/\1/p' "$out")"
[ -n "$png" ] && [ -s "$png" ] || fail "no plot"
[ "$(head -c 4 "$png" | tail -c 3)" = PNG ] || fail "$png is not a PNG"
work="$(sed -n 's/^logs          : //p' "$out")"
case "$work" in /tmp/aryl-demo.*) rm -rf "$work" ;; esac
echo "demo_script_test: OK"
