#!/usr/bin/env bash
# cmake --install into DESTDIR=SCRATCH with prefix /usr: every binary, the
# headers, the CMake package, the docs, the completion files, /etc/aryl and
# the systemd units are there, the units point at the installed binaries and
# pass systemd-analyze; every installed binary answers --version.
#   install_test.sh BUILD_DIR SCRATCH
set -euo pipefail
build="$1"; scratch="$2"
rm -rf "$scratch"; mkdir -p "$scratch"
fail() { echo "FAIL: $*" >&2; exit 1; }
DESTDIR="$scratch" cmake --install "$build" --prefix /usr >"$scratch.log" 2>&1 || { tail -20 "$scratch.log"; fail "cmake --install"; }
root="$scratch"
expect=(
  usr/bin/aryl usr/bin/aryl-run usr/bin/aryl-scheduler usr/bin/aryl-agent usr/bin/aryl-sim
  usr/share/doc/aryl/README.md usr/share/doc/aryl/operations.md usr/share/doc/aryl/LICENSE
  usr/share/bash-completion/completions/aryl usr/share/zsh/vendor-completions/_aryl
  usr/lib/systemd/system/aryl-scheduler.service usr/lib/systemd/system/aryl-agent.service
  usr/lib/sysusers.d/aryl.conf usr/share/aryl/grafana/aryl-cluster.json
  etc/aryl/aryl.toml etc/aryl/scheduler.env etc/aryl/agent.env
)
if [ -x "$build/runtime/aryl-rt-launch" ]; then  # the libtorch runtime was built
  expect+=(usr/bin/aryl-rt-launch usr/include/aryl/runtime.h usr/include/aryl/status.h usr/include/aryl/version.h)
  [ -n "$(find "$root/usr/lib" -path '*/cmake/Aryl/ArylConfig.cmake' -print -quit)" ] ||
    fail "no ArylConfig.cmake under usr/lib"
fi
for f in "${expect[@]}"; do [ -e "$root/$f" ] || fail "missing $f"; done
grep -q '^ExecStart=/usr/bin/aryl-scheduler ' "$root/usr/lib/systemd/system/aryl-scheduler.service" || fail "scheduler unit ExecStart"
grep -q '^ExecStart=/usr/bin/aryl-agent ' "$root/usr/lib/systemd/system/aryl-agent.service" || fail "agent unit ExecStart"
for u in aryl-scheduler aryl-agent; do
  for opt in StateDirectory=aryl LogsDirectory=aryl ConfigurationDirectory=aryl NoNewPrivileges=yes ProtectSystem= \
             CapabilityBoundingSet= EnvironmentFile=-/etc/aryl/; do
    grep -q "^$opt" "$root/usr/lib/systemd/system/$u.service" || fail "$u.service lacks $opt"
  done
done
# systemd's own check of the unit syntax and its exposure score (lower is safer).
if command -v systemd-analyze >/dev/null; then
  for u in aryl-scheduler aryl-agent; do
    out="$(systemd-analyze security --offline=yes --root="$root" "$root/usr/lib/systemd/system/$u.service" 2>&1)" ||
      true
    score="$(printf '%s\n' "$out" | sed -n 's/.*Overall exposure level for .*: \([0-9.]*\).*/\1/p')"
    if [ -z "$score" ]; then printf '%s\n' "$out" | tail -5; fail "systemd-analyze security $u"; fi
    echo "$u.service exposure $score"
    # 10 is fully exposed; the scheduler is sandboxed tightly, the agent less (GPUs, JIT).
    limit=$([ $u = aryl-scheduler ] && echo 3.0 || echo 6.0)
    awk -v s="$score" -v l="$limit" 'BEGIN { exit !(s <= l) }' || fail "$u.service exposure $score > $limit"
  done
fi
# Unit syntax: verify against this host's systemd; the binaries are not
# installed here, so "is not executable" is the only complaint allowed.
if command -v systemd-analyze >/dev/null; then
  for u in aryl-scheduler aryl-agent; do
    problems="$(systemd-analyze verify --man=no "$root/usr/lib/systemd/system/$u.service" 2>&1 |
      grep -v "Command /usr/bin/$u is not executable" || true)"
    [ -z "$problems" ] || fail "systemd-analyze verify $u.service: $problems"
  done
fi
for b in aryl aryl-run aryl-scheduler aryl-agent aryl-sim aryl-rt-launch; do
  [ -x "$root/usr/bin/$b" ] || continue
  v="$(ARYL_CONFIG=/dev/null "$root/usr/bin/$b" --version)" || fail "$b --version exited $?"
  # No pipes into grep -q under pipefail: an early exit of grep would fail the pipeline.
  first="${v%%$'\n'*}"
  grep -Eq "^$b [0-9]+\.[0-9]+\.[0-9]+ \(commit ([0-9a-f]+(\+dirty)?|unknown)\)$" <<<"$first" ||
    fail "$b --version printed: $v"
  grep -Eq '^build: torch (on|off), cuda (on|off), nccl (on|off)$' <<<"$v" || fail "$b --version build line: $v"
done
bash -n "$root/usr/share/bash-completion/completions/aryl" || fail "bash completion has a syntax error"
# The Python module (built when torch's Python and pybind11 were found): in
# Debian's dist-packages for prefix /usr; for any other prefix in that
# prefix's site-packages, so a virtualenv at the prefix imports it with no
# PYTHONPATH anywhere, and a job under the installed aryl-run that does
# `import aryl` runs.
if ls "$build"/python/aryl/_aryl*.so >/dev/null 2>&1; then
  ls "$root"/usr/lib/python3/dist-packages/aryl/_aryl*.so >/dev/null 2>&1 || fail "no _aryl module in dist-packages"
  [ -f "$root/usr/lib/python3/dist-packages/aryl/__init__.py" ] || fail "no aryl/__init__.py in dist-packages"
  venv="$scratch/venv"
  /usr/bin/python3 -m venv --without-pip --system-site-packages "$venv" || fail "python3 -m venv"
  cmake --install "$build" --prefix "$venv" >"$scratch.venv.log" 2>&1 || { tail -20 "$scratch.venv.log"; fail "cmake --install --prefix venv"; }
  where="$(env -u PYTHONPATH "$venv/bin/python" -c 'import aryl; print(aryl.__file__)')" || fail "venv python: import aryl"
  [[ "$where" == "$venv/lib/python"*"/site-packages/aryl/__init__.py" ]] || fail "import aryl found $where"
  job="import aryl, sys; print('aryl from', aryl.__file__); sys.exit(0 if aryl.__file__.startswith('$venv/') else 9)"
  out="$(cd "$scratch" && env -u PYTHONPATH ARYL_CONFIG=/dev/null timeout 100 "$venv/bin/aryl-run" --standalone \
           --nproc-per-node 1 --work-dir "$scratch/run" -- "$venv/bin/python" -c "$job" 2>&1)" ||
    { printf '%s\n' "$out" | tail -20; fail "a job that imports aryl under the installed aryl-run"; }
  grep -q "aryl from $venv/" <<<"$out" || grep -rq "aryl from $venv/" "$scratch/run/logs" ||
    { printf '%s\n' "$out" | tail -20; fail "the job's output does not show the venv's aryl"; }
  echo "python module OK: $where"
  # pip, for a Python of one's own (runtime/python/pyproject.toml), here reusing this build tree.
  pipvenv="$scratch/pipvenv"
  /usr/bin/python3 -m venv --system-site-packages "$pipvenv" || fail "python3 -m venv (with pip)"
  ARYL_BUILD_DIR="$build" timeout 100 "$pipvenv/bin/pip" install --no-build-isolation --no-index \
    "$(dirname "$0")/../../runtime/python" >"$scratch.pip.log" 2>&1 || { tail -20 "$scratch.pip.log"; fail "pip install runtime/python"; }
  where="$(cd "$scratch" && env -u PYTHONPATH "$pipvenv/bin/python" -c 'import aryl; print(aryl.__file__, aryl.DistributedSampler.__name__)')" ||
    fail "pip venv: import aryl"
  [[ "$where" == "$pipvenv/lib/python"*"/site-packages/aryl/__init__.py DistributedSampler" ]] || fail "pip: import aryl found $where"
  # Read pip's whole answer first: grep -q would close the pipe early and pip fails on the broken pipe.
  shown="$("$pipvenv/bin/pip" show aryl 2>&1)" || fail "pip show aryl: $shown"
  grep -q "^Requires: torch" <<<"$shown" || fail "pip: the aryl package does not require torch: $shown"
  "$pipvenv/bin/pip" uninstall -y aryl >/dev/null || fail "pip uninstall aryl"
  echo "pip install OK: $where"
  # Units of a non-/usr prefix read the env files installed under it.
  grep -q "^EnvironmentFile=-$venv/etc/aryl/scheduler.env\$" "$venv/lib/systemd/system/aryl-scheduler.service" ||
    fail "the prefix's scheduler unit does not read $venv/etc/aryl/scheduler.env"
  [ -f "$venv/etc/aryl/scheduler.env" ] || fail "no $venv/etc/aryl/scheduler.env"
fi
echo "install tree OK: ${#expect[@]} paths checked"
