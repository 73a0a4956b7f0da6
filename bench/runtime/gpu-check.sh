#!/usr/bin/env bash
# gpu-check.sh: the one prepared check that the runtime works on a GPU, built
# from nothing in three stages, each after the one before it passed and each
# with a time budget of its own. Every step runs under `timeout`, its log goes
# to $OUT/logs, one line per step goes to $OUT/gpu-check.txt ("PASS", "FAIL"
# or "SKIP": a skipped step is never a passed one), and a failed step never
# stops the independent ones after it.
#
#   stage 1  the NCCL communicator alone (ARYL_COMM_ONLY: CUDA and NCCL, no
#            libtorch, nothing carried): configure, build and run gpu_check
#            (bench/runtime/gpu_check.cc: world 1 with Abort() and re-init, a
#            lonely rank's timeout, whether NCCL takes several ranks on one
#            GPU, and where it does or there are GPUs enough, init, grow,
#            shrink through ncclCommShrink and a SIGKILL mid-all-reduce);
#   stage 2  the C++ elastic runtime on the machine's libtorch, with the
#            carried packages: configure, build elastic_mlp and aryl-rt-launch,
#            run the C++ example's scenarios (below);
#   stage 3  the Python module (pybind11 from pip): configure, build, run the
#            Python example's scenarios.
# A stage whose stage before did not pass is SKIP, and so is every step past
# its stage's budget. The last lines give each stage's verdict: PASS (every
# step passed), FAIL (a step failed), INCOMPLETE (none failed, some skipped)
# or SKIP (not run). Exit status: 0 when every stage asked for passed, 1 when
# a step failed, 3 when none failed but something was skipped.
#
#   bench/runtime/gpu-check.sh carry DIR
#       On the Debian development machine: copies what the GPU machine's
#       image lacks (ZeroMQ, cppzmq, spdlog, fmt, cxxopts, nlohmann-json,
#       SQLite, GoogleTest, prometheus-cpp, cpp-httplib, OpenSSL headers,
#       Eigen, pkgconf) from the installed Debian packages into DIR for the
#       device run (stages 2 and 3; stage 1 needs none of it).
#   bench/runtime/gpu-check.sh [--carry DIR] [--stages 1,2,3] [--build-only]
#       On the GPU machine (CUDA, PyTorch with its nvidia-nccl wheel, CMake,
#       ninja, Python with pybind11 from pip): the three stages. --build-only
#       configures and builds every stage and runs nothing: `./dev
#       gpu-rehearse` runs it in a root file system with what the image has.
#   bench/runtime/gpu-check.sh --backend gloo --build DIR --skip-build [--api cpp|py]
#       The scenarios of stages 2 and 3 on CPU with Gloo against an existing
#       build (ctest runtime_gpu_check_logic.cpp and .py): the script's logic.
#
# $OUT gets gpu-check.txt and gpu-check-logs.tar.gz (KEEP_LOGS=1 keeps logs/).
#
# Scenarios of stages 2 and 3, for the C++ example (examples/elastic_mlp) and
# the Python one (examples/python/elastic_mlp.py), under aryl-rt-launch:
#   solo   1 worker (the runtime's NCCL path in a world of one);
#   fixed  2 workers throughout (the reference);
#   grow   2 -> 3 at step $RESIZE_AT (planned: a fresh group);
#   shrink 3 -> 2 at step $RESIZE_AT (planned: ncclCommShrink with NCCL);
#   kill   3 workers, SIGKILL of w2 at step $RESIZE_AT while its peers wait in
#          the all-reduce: survivors must see a retryable error within the
#          collective timeout + 2 s and form a fresh communicator;
# each must finish, and end with parameters (sum of |w|) equal to the fixed
# run's within $RTOL. With NCCL, fixed, grow, shrink and kill need a GPU per
# worker or NCCL's support of several ranks on one GPU (stage 1 finds out);
# without either they are SKIP. Environment: OUT (default ./gpu-check-out),
# STAGE1_S, STAGE2_S, STAGE3_S (each stage's budget, default 100, 150 and 90 s),
# RANKS (gpu_check's, default 3), STEPS, RESIZE_AT, SLEEP_MS (per step: a
# joiner must start before the run ends), TIMEOUT_MS, RTOL.
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
    /usr/include/eigen3/Eigen/Core /usr/bin/pkgconf; do
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

BACKEND=nccl BUILD="" SKIP_BUILD=0 BUILD_ONLY=0 CARRY="" APIS="cpp py" STAGES=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --backend) BACKEND=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --skip-build) SKIP_BUILD=1; shift ;;
    --build-only) BUILD_ONLY=1; shift ;;
    --carry) CARRY=$2; shift 2 ;;
    --api) APIS=$2; shift 2 ;;
    --stages) STAGES=${2//,/ }; shift 2 ;;
    *) echo "gpu-check.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [[ -z "$STAGES" ]]; then
  STAGES="1 2 3"
  # Gloo on CPU: no stage 1 (no NCCL); --api picks the stages.
  [[ "$BACKEND" == gloo ]] && STAGES=$(for a in $APIS; do [[ $a == cpp ]] && echo 2; [[ $a == py ]] && echo 3; done | xargs)
fi
OUT=${OUT:-$PWD/gpu-check-out}
BUILD=${BUILD:-$ROOT/build-gpu}
STAGE1_S=${STAGE1_S:-100}
STAGE2_S=${STAGE2_S:-150}
STAGE3_S=${STAGE3_S:-90}
RANKS=${RANKS:-3}
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
: >"$SUMMARY"

note() { echo "$*" | tee -a "$SUMMARY"; }
asked() { [[ " $STAGES " == *" $1 "* ]]; }

# Each stage counts its own steps against its own budget.
STAGE=0 STAGE_START=0 STAGE_BUDGET=0 STAGE_FAILS=0 STAGE_SKIPS=0 STAGE_PASSES=0 SKIPPED=""
declare -A VERDICT=()
TOTAL_FAILS=0 TOTAL_SKIPS=0
stage_begin() {  # stage_begin N BUDGET_S TITLE
  STAGE=$1 STAGE_BUDGET=$2 STAGE_START=$(date +%s) STAGE_FAILS=0 STAGE_SKIPS=0 STAGE_PASSES=0
  note "== stage $1: $3 (budget ${2}s)"
}
stage_end() {
  local v=PASS
  ((STAGE_SKIPS > 0)) && v=INCOMPLETE
  ((STAGE_FAILS > 0)) && v=FAIL
  VERDICT[$STAGE]=$v
  note "== stage $STAGE $v: $STAGE_PASSES passed, $STAGE_FAILS failed, $STAGE_SKIPS skipped, $(( $(date +%s) - STAGE_START ))s"
}
# A stage that does not run at all.
stage_skip() {  # stage_skip N WHY
  VERDICT[$1]=SKIP
  TOTAL_SKIPS=$((TOTAL_SKIPS + 1))
  note "== stage $1 SKIP: $2"
}
result() {  # result NAME PASS|FAIL|SKIP DETAIL (a skipped step is not failed too)
  [[ "$2" == FAIL && "$1" == "$SKIPPED" ]] && return 0
  [[ "$2" == SKIP ]] && SKIPPED=$1
  note "$(printf '%-4s %-22s %s' "$2" "$1" "$3")"
  case "$2" in
    PASS) STAGE_PASSES=$((STAGE_PASSES + 1)) ;;
    FAIL) STAGE_FAILS=$((STAGE_FAILS + 1)) TOTAL_FAILS=$((TOTAL_FAILS + 1)) ;;
    SKIP) STAGE_SKIPS=$((STAGE_SKIPS + 1)) TOTAL_SKIPS=$((TOTAL_SKIPS + 1)) ;;
  esac
  return 0
}
left() { echo $((STAGE_BUDGET - ($(date +%s) - STAGE_START))); }
# step NAME SECONDS CMD...: runs CMD under timeout (at most what is left of
# the stage's budget) with its output in $LOGS/NAME.log; the status is what
# the caller checks next. Past the budget: SKIP, status 124.
step() {
  local name=$1 secs=$2 rest
  shift 2
  rest=$(left)
  if ((rest < 5)); then
    result "$name" SKIP "stage $STAGE's budget of ${STAGE_BUDGET}s spent"
    return 124
  fi
  ((secs > rest)) && secs=$rest
  local t0=$SECONDS
  timeout -k 5 "$secs" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $((SECONDS - t0))s (limit ${secs}s)" >>"$LOGS/$name.log"
  return $rc
}
first_error() { grep -m1 -E 'error|Error|FAILED' "$LOGS/$1.log" | cut -c1-200; }

note "== gpu-check $(date -u +%FT%TZ) backend=$BACKEND stages=$STAGES on $(hostname)"
if [[ "$BACKEND" == nccl ]] && ((BUILD_ONLY == 0)); then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | sed 's/^/gpu: /' | tee -a "$SUMMARY"
fi
HAVE_TORCH=1
"$PY" -c 'import torch; print("torch:", torch.__version__, "cuda:", torch.version.cuda, "nccl:",
  torch.cuda.nccl.version() if torch.cuda.is_available() else "-")' 2>&1 | tee -a "$SUMMARY"
"$PY" -c 'import torch' >/dev/null 2>&1 || HAVE_TORCH=0

# The NCCL of the machine's nvidia-nccl wheel (the one torch loads: a second
# NCCL in the process would not do); else CMake's search (/usr/local/cuda).
NCCL_ARGS=()
NCCL_DIR=$("$PY" -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
NCCL_LIB=$(ls "$NCCL_DIR"/lib/libnccl.so* 2>/dev/null | head -1)
if [[ -n "$NCCL_LIB" ]]; then
  # The wheel's library (nvidia/nccl/lib, for cu13 too); its header where
  # the wheel has one, else CMake's search (the CUDA toolkit's include/).
  NCCL_ARGS=("-DNCCL_LIBRARY=$NCCL_LIB")
  header="CMake's search"
  if [[ -f "$NCCL_DIR/include/nccl.h" ]]; then
    NCCL_ARGS+=("-DNCCL_INCLUDE_DIR=$NCCL_DIR/include")
    header=$NCCL_DIR/include
  fi
  note "nccl: $NCCL_LIB (the nvidia-nccl wheel), nccl.h: $header"
else
  note "nccl: no nvidia-nccl wheel in $PY; CMake looks for nccl.h and libnccl"
fi
export NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}
MULTI=1  # several workers can run (Gloo; or NCCL with a GPU each or its consent)

# --- stage 1: the NCCL communicator alone ------------------------------------
if asked 1; then
  stage_begin 1 "$STAGE1_S" "the NCCL communicator alone (CUDA and NCCL only)"
  B1=$BUILD-stage1
  built=0
  if step stage1-configure 60 cmake -S "$ROOT" -B "$B1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DARYL_COMM_ONLY=ON \
    "${NCCL_ARGS[@]}"; then
    result stage1-configure PASS "$(grep -m1 'NCCL' "$LOGS/stage1-configure.log" | sed 's/^-- *//')"
    if step stage1-build 90 cmake --build "$B1" --target gpu_check -j "$(nproc)"; then
      result stage1-build PASS "gpu_check ($(ldd "$B1/bench/runtime/gpu_check" | awk '/nccl|cudart/ {print $3}' | xargs))"
      built=1
    else
      result stage1-build FAIL "$(first_error stage1-build)"
    fi
  else
    result stage1-configure FAIL "$(first_error stage1-configure)"
  fi
  if ((BUILD_ONLY)); then
    result stage1-run SKIP "--build-only (no GPU here)"
  elif ((built)); then
    step stage1-gpu_check 120 "$B1/bench/runtime/gpu_check" --ranks "$RANKS" --timeout-ms "$TIMEOUT_MS"
    rc=$?
    n_before=$STAGE_FAILS
    while read -r verdict name detail; do
      result "stage1-$name" "$verdict" "$detail"
    done < <(grep -E '^(PASS|FAIL|SKIP) ' "$LOGS/stage1-gpu_check.log" 2>/dev/null | grep -v ' gpu_check:' |
      awk '!seen[$1" "$2]++')
    if ((rc != 0 && STAGE_FAILS == n_before)); then
      result stage1-gpu_check FAIL "exit $rc with no FAIL line (logs/stage1-gpu_check.log)"
    fi
    grep -q '^SKIP init ' "$LOGS/stage1-gpu_check.log" 2>/dev/null && MULTI=0
    grep -h '^INFO probe' "$LOGS/stage1-gpu_check.log" 2>/dev/null | tee -a "$SUMMARY"
  fi
  stage_end
fi
if [[ "$BACKEND" == nccl ]] && ! asked 1 && ((BUILD_ONLY == 0)); then
  # Without stage 1's probe: several workers only with a GPU each.
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  if ((gpus < 3)); then
    MULTI=0
    note "stage 1 not asked: $gpus GPU(s), so the runs with several workers are skipped (stage 1's probe asks NCCL)"
  fi
fi

# Stage N+1 goes on after stage N passed, or ran with skips but no failure
# (on one GPU some of stage 1 cannot run; the stage says which).
after() {  # after N: may the stage after stage N run?
  ! asked "$1" || [[ "${VERDICT[$1]:-}" == PASS || "${VERDICT[$1]:-}" == INCOMPLETE ]]
}

# --- the elastic runs (stages 2 and 3) ---------------------------------------
export ARYL_COLLECTIVE_TIMEOUT_MS=$TIMEOUT_MS ARYL_FAULT_SETTLE_MS=1000 ARYL_RENDEZVOUS_TIMEOUT_MS=60000
MODEL=(--steps "$STEPS" --log-every 10 --dataset 2048 --global-batch 48 --features 16 --hidden 32 --sleep-ms "$SLEEP_MS")
LAUNCH=$BUILD/runtime/aryl-rt-launch
MLP=$BUILD/examples/elastic_mlp

# run API SCENARIO: one elastic run; leaves its logs in $LOGS/API-SCENARIO*.
run() {
  local api=$1 scenario=$2 workers=2 extra=()
  case "$scenario" in
    solo) workers=1 ;;
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
    -- "${prog[@]}" "${MODEL[@]}"
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

scenarios() {  # scenarios API: the elastic runs of one example
  local api=$1 list=(solo fixed grow shrink kill) scenario
  for scenario in "${list[@]}"; do
    local name=$api-$scenario
    if [[ "$scenario" != solo ]] && ((MULTI == 0)); then
      result "$name" SKIP "needs several workers on the GPU, which NCCL refused (stage 1)"
      continue
    fi
    run "$api" "$scenario"
    local rc=$?
    if ((rc != 0)); then
      local why
      why=$(grep -h -m1 -iE 'error|fail|terminate|abort' "$LOGS/$name"/*.log 2>/dev/null | head -1 | cut -c1-160)
      result "$name" FAIL "exit $rc (logs/$name.log, logs/$name/): $why"
      continue
    fi
    local d ref w
    d=$(digest "$name") ref=$(digest "$api-fixed") w=$(world_at_end "$name")
    if [[ -z "$d" ]]; then
      result "$name" FAIL "no 'done ... params=' line from rank 0"
      continue
    fi
    local want=2
    [[ "$scenario" == grow ]] && want=3
    [[ "$scenario" == solo ]] && want=1
    local detail="params=$d world=$w" ok=1
    [[ "$w" == "$want" ]] || { ok=0; detail+=" (want world $want)"; }
    if [[ "$scenario" != fixed && "$scenario" != solo ]]; then
      if [[ -n "$ref" ]] && close "$d" "$ref" "$RTOL"; then detail+=" = fixed within $RTOL"; else ok=0; detail+=" != fixed $ref"; fi
    fi
    if [[ "$scenario" == shrink && "$BACKEND" == nccl ]] && grep -qh 'shrink failed' "$LOGS/$name"/*.log; then
      ok=0 detail+=" (ncclCommShrink failed: fresh group instead)"
    fi
    if [[ "$scenario" == kill ]]; then
      local s limit=$(( TIMEOUT_MS / 1000 + 2 ))
      s=$(detect_seconds "$name") || s=""
      if [[ -z "$s" ]]; then
        ok=0 detail+=" (no abandoned step after the SIGKILL)"
      elif "$PY" -c "import sys; sys.exit(0 if 0 <= $s <= $limit else 1)"; then
        detail+=" detected in ${s}s <= ${limit}s"
      else
        ok=0 detail+=" detected in ${s}s > ${limit}s"
      fi
      grep -qh 'survivors .* form gen' "$LOGS/$name"/*.log || { ok=0; detail+=" (no fresh group)"; }
    fi
    if ((ok)); then result "$name" PASS "$detail"; else result "$name" FAIL "$detail"; fi
  done
}

# The carried packages serve the build of stages 2 and 3 (pkgconf, headers,
# CMake packages); the programs find the carried libraries through an RPATH
# (DT_RPATH, which also serves libzmq's own dependencies), so the machine's
# own libraries stay first for torch and Python. CARRY_LD=1 also puts them on
# LD_LIBRARY_PATH.
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
TORCH_PREFIX=$("$PY" -c 'import torch, os; p = torch.utils.cmake_prefix_path; print(p if os.path.isdir(p) else "")' 2>/dev/null)
CONFIG=(-S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DARYL_WITH_TORCH=ON
  "-DARYL_PYTHON=$(command -v "$PY")" "-DCMAKE_PREFIX_PATH=${CARRY:+$CARRY/usr;}$TORCH_PREFIX"
  ${CARRY:+"-DOPENSSL_ROOT_DIR=$CARRY/usr"} "${LINK_FLAGS[@]}")
[[ "$BACKEND" == nccl ]] && CONFIG+=(-DARYL_WITH_CUDA=ON -DARYL_WITH_NCCL=ON "${NCCL_ARGS[@]}")

# stage_build N PYTHON_ON_OFF TARGETS...: configure and build for stage N.
stage_build() {
  local n=$1 python=$2 extra=()
  shift 2
  if ((SKIP_BUILD)); then
    note "stage $n: prebuilt $BUILD (--skip-build)"
    return 0
  fi
  if [[ "$python" == ON ]]; then
    local pybind
    pybind=$("$PY" -m pybind11 --cmakedir 2>/dev/null)
    [[ -n "$pybind" ]] && extra+=("-Dpybind11_DIR=$pybind")
  fi
  if step "stage$n-configure" 90 env "${BUILD_ENV[@]}" cmake "${CONFIG[@]}" "-DARYL_WITH_PYTHON=$python" "${extra[@]}"; then
    result "stage$n-configure" PASS "torch ${TORCH_PREFIX:-?}$( [[ $python == ON ]] && echo ", pybind11 ${extra[*]#-Dpybind11_DIR=}")"
  else
    result "stage$n-configure" FAIL "$(first_error "stage$n-configure")"
    return 1
  fi
  if step "stage$n-build" 240 env "${BUILD_ENV[@]}" cmake --build "$BUILD" --target "$@" -j "$(nproc)"; then
    result "stage$n-build" PASS "$* ($(grep -c 'Building' "$LOGS/stage$n-build.log") objects)"
  else
    result "stage$n-build" FAIL "$(first_error "stage$n-build")"
    return 1
  fi
}

# --- stage 2: the C++ elastic runtime on libtorch -----------------------------
if asked 2; then
  if ! after 1; then
    stage_skip 2 "stage 1 did not pass (${VERDICT[1]})"
  elif ((HAVE_TORCH == 0 && BUILD_ONLY)); then
    # A rehearsal without torch: what can be proven is that the carried
    # packages configure the project (ZeroMQ, Eigen, GoogleTest, ...).
    stage_begin 2 "$STAGE2_S" "the C++ elastic runtime (no torch here: configure only)"
    if step stage2-configure 90 env "${BUILD_ENV[@]}" cmake "${CONFIG[@]}" -DARYL_WITH_TORCH=OFF -DARYL_WITH_PYTHON=OFF; then
      result stage2-configure PASS "without torch: the carried packages ($(grep -m1 -oE 'Eigen .*' "$LOGS/stage2-configure.log" | tr -s ' '))"
    else
      result stage2-configure FAIL "$(first_error stage2-configure)"
    fi
    result stage2-build SKIP "no torch in $PY: elastic_mlp and aryl-rt-launch need libtorch"
    stage_end
  elif ((HAVE_TORCH == 0)); then
    stage_skip 2 "no torch in $PY"
  else
    stage_begin 2 "$STAGE2_S" "the C++ elastic runtime on libtorch"
    if stage_build 2 OFF elastic_mlp aryl-rt-launch; then
      if ((BUILD_ONLY)); then result stage2-runs SKIP "--build-only"; else scenarios cpp; fi
    fi
    stage_end
  fi
fi

# --- stage 3: the Python module ----------------------------------------------
if asked 3; then
  if ! after 1 || ! after 2; then
    stage_skip 3 "an earlier stage did not pass (1: ${VERDICT[1]:-not asked}, 2: ${VERDICT[2]:-not asked})"
  elif ((HAVE_TORCH == 0)); then
    stage_skip 3 "no torch in $PY"
  else
    stage_begin 3 "$STAGE3_S" "the Python module"
    if stage_build 3 ON aryl_python; then
      export PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH}
      if ((BUILD_ONLY)); then
        result stage3-runs SKIP "--build-only"
      elif ! "$PY" -c 'import aryl' >"$LOGS/stage3-import.log" 2>&1; then
        result stage3-import FAIL "import aryl: $(tail -1 "$LOGS/stage3-import.log")"
      else
        scenarios py
      fi
    fi
    stage_end
  fi
fi

line="== verdict:"
for n in $STAGES; do line+=" stage $n ${VERDICT[$n]:-SKIP},"; done
note "${line%,}; $TOTAL_FAILS failed, $TOTAL_SKIPS skipped, $(( $(date +%s) - START ))s"
# A device run brings back at most 8 files: the logs travel as one archive.
if tar czf "$OUT/gpu-check-logs.tar.gz" -C "$OUT" logs && [[ "${KEEP_LOGS:-0}" != 1 ]]; then rm -rf "$LOGS"; fi
((TOTAL_FAILS > 0)) && exit 1
((TOTAL_SKIPS > 0)) && exit 3
exit 0
