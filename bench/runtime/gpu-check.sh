#!/usr/bin/env bash
# gpu-check.sh: one prepared check that the runtime resizes a data-parallel
# job on a GPU by rebuilding NCCL communicators. Every step runs under
# `timeout`, its log goes to $OUT/logs, one line per step goes to
# $OUT/gpu-check.txt, and a failed step never stops the ones after it.
#
#   bench/runtime/gpu-check.sh carry DIR
#       On the Debian development machine: copies what the GPU machine's
#       image lacks (ZeroMQ, cppzmq, spdlog, fmt, cxxopts, nlohmann-json,
#       SQLite, GoogleTest, prometheus-cpp, cpp-httplib, OpenSSL headers, pkgconf)
#       from the installed Debian packages into DIR (34 MiB) for the device run.
#   bench/runtime/gpu-check.sh [--carry DIR]
#       On the GPU machine (one GPU, PyTorch with its NCCL wheel, CMake,
#       ninja, nvcc, pybind11): builds the runtime, the elastic example, the
#       Python module and gpu_check against that torch and that NCCL, then
#       runs the scenarios below with ARYL_BACKEND=nccl, several ranks on the
#       one GPU (a distinct NCCL_HOSTID each, sockets on loopback).
#   bench/runtime/gpu-check.sh --backend gloo --carry DIR --configure-only
#       Here: configures against the carried packages (they come first on
#       CMake's search path) and Debian's libtorch, to prove the carry.
#   bench/runtime/gpu-check.sh --backend gloo --build DIR --skip-build [--api cpp|py]
#       The same scenarios on CPU with Gloo against an existing build (ctest
#       runtime_gpu_check_logic.cpp and .py): the script's logic without a GPU.
#
# $OUT gets gpu-check.txt and gpu-check-logs.tar.gz (KEEP_LOGS=1 keeps logs/).
#
# Scenarios, for the C++ example (examples/elastic_mlp) and the Python one
# (examples/python/elastic_mlp.py) each, under aryl-rt-launch:
#   fixed  2 workers throughout (the reference);
#   grow   2 -> 3 at step $RESIZE_AT (planned: a fresh group);
#   shrink 3 -> 2 at step $RESIZE_AT (planned: ncclCommShrink with NCCL);
#   kill   3 workers, SIGKILL of w2 at step $RESIZE_AT while its peers wait in
#          the all-reduce: survivors must see a retryable error within the
#          collective timeout + 2 s and form a fresh communicator;
# each must finish, and end with parameters (sum of |w|) equal to the fixed
# run's within $RTOL. Environment: OUT (default ./gpu-check-out), BUDGET_S
# (default 450: steps past it are skipped), STEPS, RESIZE_AT, SLEEP_MS (per
# step: a joiner must start before the run ends), TIMEOUT_MS, RTOL.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

carry() {
  local dir=$1 pkgs=() libs=() p
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  # The -dev packages, found by a file each, then the shared libraries their
  # libraries need (glibc and the compiler's runtime are on every machine).
  for f in /usr/include/zmq.h /usr/include/zmq.hpp /usr/include/cxxopts.hpp /usr/include/nlohmann/json.hpp \
    /usr/include/spdlog/spdlog.h /usr/include/fmt/core.h /usr/include/sqlite3.h /usr/include/gtest/gtest.h \
    /usr/include/gmock/gmock.h /usr/include/prometheus/registry.h /usr/include/openssl/hmac.h /usr/include/httplib.h \
    /usr/bin/pkgconf; do
    p=$(dpkg -S "$f" 2>/dev/null | head -1 | cut -d: -f1) || true
    [[ -n "$p" ]] && pkgs+=("$p")
  done
  local sos
  sos=$({ dpkg -L "${pkgs[@]}" 2>/dev/null | grep -E '\.so$'; echo /usr/bin/pkgconf; } | xargs -r readlink -f | sort -u)
  mapfile -t libs < <({ echo "$sos"; echo "$sos" | xargs -r ldd 2>/dev/null | awk '/=> \//{print $3}'; } |
    xargs -r readlink -f | sort -u | xargs -r dpkg -S 2>/dev/null | cut -d: -f1 | sort -u |
    grep -vE '^(libc6|libstdc\+\+6|libgcc-s1)$')
  pkgs+=("${libs[@]}" pkgconf)
  # pkg-config --cflags also reads the .pc files of Requires.private (libzmq
  # names krb5-gssapi, libsodium, ...): their -dev packages come too, without
  # the libraries they link (not needed to link or run Aryl).
  local dev
  for ((i = 0; i < ${#pkgs[@]}; i++)); do
    for dev in $(dpkg-query -W -f '${Depends}' "${pkgs[$i]}" 2>/dev/null | tr ',|' '\n\n' | awk '{print $1}' |
      grep -E '(-dev|multidev)$' | grep -vE '^(libc6-dev|linux-libc-dev|libicu-dev)$'); do
      [[ " ${pkgs[*]} " == *" $dev "* ]] || ! dpkg-query -W "$dev" >/dev/null 2>&1 || pkgs+=("$dev")
    done
  done
  mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
  # Static archives stay behind, but GoogleTest's (Debian ships no other).
  dpkg -L "${pkgs[@]}" | grep -vE '/share/(doc|man|locale|lintian)/' | grep -vP '/lib(?!g(test|mock))[^/]*\.a$' |
    while read -r f; do
      [[ -f "$f" || -L "$f" ]] && cp -P --parents "$f" "$dir"
    done
  # Every file the carried CMake packages name must be there (CMake checks):
  # a static archive or a program of a package not carried whole.
  grep -ohE '\$\{_IMPORT_PREFIX\}/[^" ]+' "$dir"/usr/lib/x86_64-linux-gnu/cmake/*/*.cmake 2>/dev/null |
    sed 's#^${_IMPORT_PREFIX}#/usr#' | sort -u | while read -r f; do
      [[ -e "$dir$f" || ! -e "$f" ]] || cp -P --parents "$f" "$dir"
    done
  ln -sf pkgconf "$dir/usr/bin/pkg-config"
  dpkg-query -W -f '${Package} ${Version}\n' "${pkgs[@]}" >"$dir/PACKAGES"
  echo "carry: $(du -sh "$dir" | cut -f1) in $dir from ${#pkgs[@]} Debian packages (see $dir/PACKAGES)"
}

if [[ "${1:-}" == carry ]]; then
  carry "${2:?usage: gpu-check.sh carry DIR}"
  exit $?
fi

BACKEND=nccl BUILD="" SKIP_BUILD=0 CONFIGURE_ONLY=0 CARRY="" APIS="cpp py"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --backend) BACKEND=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --skip-build) SKIP_BUILD=1; shift ;;
    --configure-only) CONFIGURE_ONLY=1; shift ;;
    --carry) CARRY=$2; shift 2 ;;
    --api) APIS=$2; shift 2 ;;
    *) echo "gpu-check.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$PWD/gpu-check-out}
BUILD=${BUILD:-$ROOT/build-gpu}
BUDGET_S=${BUDGET_S:-450}
STEPS=${STEPS:-200}
SLEEP_MS=${SLEEP_MS:-30}
RESIZE_AT=${RESIZE_AT:-20}
TIMEOUT_MS=${TIMEOUT_MS:-8000}
RTOL=${RTOL:-1e-4}
PY=${PYTHON:-python3}
DEVICE=cpu
[[ "$BACKEND" == nccl ]] && DEVICE=cuda
rm -rf "$OUT/logs"
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
LOGS=$OUT/logs
SUMMARY=$OUT/gpu-check.txt
WORK=$(mktemp -d "${TMPDIR:-/tmp}/aryl-gpu-check.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
START=$(date +%s)
FAILED=0
: >"$SUMMARY"

note() { echo "$*" | tee -a "$SUMMARY"; }
SKIPPED=""
result() {  # result NAME PASS|FAIL|SKIP DETAIL (a skipped step is not failed too)
  [[ "$2" == FAIL && "$1" == "$SKIPPED" ]] && return 0
  [[ "$2" == SKIP ]] && SKIPPED=$1
  note "$(printf '%-4s %-22s %s' "$2" "$1" "$3")"
  [[ "$2" == FAIL ]] && FAILED=$((FAILED + 1))
  return 0
}
left() { echo $((BUDGET_S - ($(date +%s) - START))); }
# step NAME SECONDS CMD...: runs CMD under timeout with its output in
# $LOGS/NAME.log; the status is what the caller checks next.
step() {
  local name=$1 secs=$2 rest
  shift 2
  rest=$(left)
  if ((rest < 10)); then
    result "$name" SKIP "budget of ${BUDGET_S}s spent"
    return 124
  fi
  ((secs > rest)) && secs=$rest
  local t0=$SECONDS
  timeout -k 5 "$secs" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $((SECONDS - t0))s" >>"$LOGS/$name.log"
  return $rc
}

note "== gpu-check $(date -u +%FT%TZ) backend=$BACKEND on $(hostname)"
if [[ "$BACKEND" == nccl ]]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$SUMMARY"
fi
"$PY" -c 'import torch; print("torch:", torch.__version__, "cuda:", torch.version.cuda, "nccl:",
  torch.cuda.nccl.version() if torch.cuda.is_available() else "-")' 2>&1 | tee -a "$SUMMARY"

# --- build ------------------------------------------------------------------
# The carried packages serve the build (pkgconf, headers, CMake packages);
# the programs find the carried libraries through an RPATH (DT_RPATH, which
# also serves libzmq's own dependencies), so the machine's own libraries stay
# first for torch and Python. CARRY_LD=1 also puts them on LD_LIBRARY_PATH.
BUILD_ENV=()
LINK_FLAGS=()
if [[ -n "$CARRY" ]]; then
  CARRY=$(cd "$CARRY" && pwd)
  lib=$CARRY/usr/lib/x86_64-linux-gnu
  BUILD_ENV=("PATH=$CARRY/usr/bin:$PATH" "LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "PKG_CONFIG_PATH=$lib/pkgconfig:$CARRY/usr/share/pkgconfig" "PKG_CONFIG_SYSROOT_DIR=$CARRY"
    "CPATH=$CARRY/usr/include/x86_64-linux-gnu")
  for kind in EXE SHARED MODULE; do LINK_FLAGS+=("-DCMAKE_${kind}_LINKER_FLAGS=-Wl,--disable-new-dtags"); done
  [[ "${CARRY_LD:-0}" == 1 ]] && export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
if ((SKIP_BUILD == 0)); then
  # The machine's torch, and the NCCL of its nvidia-nccl wheel (the one torch
  # loads; a second NCCL in the process would not do). With --backend gloo
  # (a CPU machine): Debian's libtorch, and NCCL only if CMake finds it.
  TORCH_PREFIX=$("$PY" -c 'import torch, os; p = torch.utils.cmake_prefix_path; print(p if os.path.isdir(p) else "")')
  NCCL_DIR=$("$PY" -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
  NCCL_LIB=$(ls "$NCCL_DIR"/lib/libnccl.so* 2>/dev/null | head -1)
  args=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DARYL_WITH_TORCH=ON -DARYL_WITH_PYTHON=ON
    "-DARYL_PYTHON=$(command -v "$PY")" "-DCMAKE_PREFIX_PATH=${CARRY:+$CARRY/usr;}$TORCH_PREFIX"
    ${CARRY:+"-DOPENSSL_ROOT_DIR=$CARRY/usr"} "${LINK_FLAGS[@]}")
  if [[ "$BACKEND" == nccl ]]; then
    args+=(-DARYL_WITH_CUDA=ON -DARYL_WITH_NCCL=ON "-DNCCL_INCLUDE_DIR=$NCCL_DIR/include" "-DNCCL_LIBRARY=$NCCL_LIB")
  fi
  if step configure 150 env "${BUILD_ENV[@]}" cmake "${args[@]}"; then
    result configure PASS "torch $TORCH_PREFIX, nccl $NCCL_LIB"
  else
    result configure FAIL "see logs/configure.log"
  fi
  targets=(elastic_mlp aryl-rt-launch aryl_python)
  [[ "$BACKEND" == nccl ]] && targets+=(gpu_check)
  if ((CONFIGURE_ONLY)); then
    :
  elif step build 330 env "${BUILD_ENV[@]}" cmake --build "$BUILD" --target "${targets[@]}" -j "$(nproc)"; then
    result build PASS "$(grep -c 'Building' "$LOGS/build.log") objects"
  else
    result build FAIL "$(grep -m1 -E 'error|Error' "$LOGS/build.log")"
  fi
fi
if ((CONFIGURE_ONLY)); then
  note "== $FAILED failed (configure only), $(( $(date +%s) - START ))s"
  exit $((FAILED > 0))
fi
LAUNCH=$BUILD/runtime/aryl-rt-launch
MLP=$BUILD/examples/elastic_mlp
export PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH}

# --- gpu_check: the communicator alone --------------------------------------
if [[ "$BACKEND" == nccl ]]; then
  if step gpu_check 90 env NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_DEBUG=WARN "$BUILD/bench/runtime/gpu_check" --ranks 3; then
    result gpu_check PASS "$(grep -c '^PASS' "$LOGS/gpu_check.log") checks"
  else
    result gpu_check FAIL "$(grep -m1 '^FAIL' "$LOGS/gpu_check.log")"
  fi
fi

# --- the elastic runs ---------------------------------------------------------
# Every worker gets a host id of its own: NCCL refuses two ranks of one host
# on one GPU, and ranks of different "hosts" talk over sockets on loopback.
cat >"$WORK/worker.sh" <<'EOF'
#!/bin/sh
export NCCL_HOSTID="aryl-gpu-check-${ARYL_WORKER_ID:-$$}"
exec "$@"
EOF
chmod +x "$WORK/worker.sh"
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
export ARYL_COLLECTIVE_TIMEOUT_MS=$TIMEOUT_MS ARYL_FAULT_SETTLE_MS=1000 ARYL_RENDEZVOUS_TIMEOUT_MS=60000
MODEL=(--steps "$STEPS" --log-every 10 --dataset 2048 --global-batch 48 --features 16 --hidden 32 --sleep-ms "$SLEEP_MS")

# run API SCENARIO: one elastic run; leaves its logs in $LOGS/API-SCENARIO*.
run() {
  local api=$1 scenario=$2 workers=2 extra=()
  case "$scenario" in
    grow) extra=(--schedule "$RESIZE_AT:3") ;;
    shrink) workers=3 extra=(--schedule "$RESIZE_AT:2") ;;
    kill) workers=3 extra=(--kill "$RESIZE_AT:w2") ;;
  esac
  local prog=("$MLP" --device "$DEVICE")
  [[ "$api" == py ]] && prog=("$PY" "$ROOT/examples/python/elastic_mlp.py" --device "$DEVICE")
  local dir=$LOGS/$api-$scenario
  rm -rf "$dir"
  mkdir -p "$dir"
  # The launcher's lines get a wall-clock stamp (the kill's time).
  step "$api-$scenario" 120 bash -c 'set -o pipefail; "$@" | while IFS= read -r l; do echo "$(date +%s.%N) $l"; done' _ \
    "$LAUNCH" --workers "$workers" --backend "$BACKEND" --timeout 110 --log-dir "$dir" "${extra[@]}" \
    -- "$WORK/worker.sh" "${prog[@]}" "${MODEL[@]}"
}

# The final parameters' digest: rank 0's "done ... params=X" line.
digest() { grep -h -o 'done steps=[0-9]* .*params=[-+0-9.e]*' "$LOGS/$1"/*.log 2>/dev/null | tail -1 | sed 's/.*params=//'; }
world_at_end() { grep -h -o 'done steps=[0-9]* .*world=[0-9]*' "$LOGS/$1"/*.log 2>/dev/null | tail -1 | sed 's/.*world=//'; }
close() { "$PY" -c 'import sys; a, b, r = map(float, sys.argv[1:]); sys.exit(0 if abs(a - b) <= r * abs(b) else 1)' "$@"; }

# Seconds from the SIGKILL to the first survivor's abandoned step.
detect_seconds() {
  local killed abandoned
  killed=$(grep -m1 'SIGKILL w2' "$LOGS/$1.log" | cut -d' ' -f1)
  abandoned=$(grep -h 'step abandoned' "$LOGS/$1"/*.log 2>/dev/null | sed -E 's/^\[([^]]*)\].*/\1/' | sort | head -1)
  [[ -z "$killed" || -z "$abandoned" ]] && return 1
  "$PY" -c 'import sys, datetime as d; k = float(sys.argv[1]); a = d.datetime.strptime(sys.argv[2], "%Y-%m-%d %H:%M:%S.%f").timestamp()
print(f"{a - k:.2f}")' "$killed" "$abandoned"
}

for api in $APIS; do
  if [[ "$api" == py ]] && ! "$PY" -c 'import aryl' >/dev/null 2>&1; then
    result "py" SKIP "the Python module is not built (import aryl failed)"
    continue
  fi
  for scenario in fixed grow shrink kill; do
    name=$api-$scenario
    run "$api" "$scenario"
    rc=$?
    if ((rc != 0)); then
      why=$(grep -h -m1 -iE 'error|fail|terminate|abort' "$LOGS/$name"/*.log 2>/dev/null | head -1 | cut -c1-160)
      result "$name" FAIL "exit $rc (logs/$name.log, logs/$name/): $why"
      continue
    fi
    d=$(digest "$name") ref=$(digest "$api-fixed") w=$(world_at_end "$name")
    if [[ -z "$d" ]]; then
      result "$name" FAIL "no 'done ... params=' line from rank 0"
      continue
    fi
    want=2
    [[ "$scenario" == grow ]] && want=3
    detail="params=$d world=$w"
    ok=1
    [[ "$w" == "$want" ]] || { ok=0; detail+=" (want world $want)"; }
    if [[ "$scenario" != fixed ]]; then
      if [[ -n "$ref" ]] && close "$d" "$ref" "$RTOL"; then detail+=" = fixed within $RTOL"; else ok=0; detail+=" != fixed $ref"; fi
    fi
    if [[ "$scenario" == shrink && "$BACKEND" == nccl ]] && grep -qh 'shrink failed' "$LOGS/$name"/*.log; then
      ok=0 detail+=" (ncclCommShrink failed: fresh group instead)"
    fi
    if [[ "$scenario" == kill ]]; then
      s=$(detect_seconds "$name") || s=""
      limit=$(( TIMEOUT_MS / 1000 + 2 ))
      if [[ -z "$s" ]]; then
        ok=0 detail+=" (no abandoned step after the SIGKILL)"
      elif "$PY" -c "import sys; sys.exit(0 if 0 <= $s <= $limit else 1)"; then
        detail+=" detected in ${s}s <= ${limit}s"
      else
        ok=0 detail+=" detected in ${s}s > ${limit}s"
      fi
      grep -qh 'survivors .* form gen' "$LOGS/$name"/*.log || { ok=0; detail+=" (no fresh group)"; }
    fi
    ((ok)) && result "$name" PASS "$detail" || result "$name" FAIL "$detail"
  done
done

note "== $FAILED failed, $(( $(date +%s) - START ))s"
# A device run brings back at most 8 files: the logs travel as one archive.
if tar czf "$OUT/gpu-check-logs.tar.gz" -C "$OUT" logs && [[ "${KEEP_LOGS:-0}" != 1 ]]; then rm -rf "$LOGS"; fi
exit $((FAILED > 0))
