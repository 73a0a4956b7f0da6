#!/usr/bin/env bash
# run.sh BUILD_DIR SOURCE_DIR WORK_DIR: installs BUILD_DIR, moves the prefix
# (the package must be relocatable), builds the consumer against it with
# CMAKE_CXX_STANDARD 17 and runs it. The CPU-only consumer must not depend on
# libnccl or libcudart (readelf -d, ldd) even when the runtime was built with
# NCCL; then, if it was, a second consumer asks for COMPONENTS nccl, links
# them and finds the "nccl" backend at run time.
set -euo pipefail
build="$1" src="$2" work="$3"
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
cmake --install "$build" --prefix "$work/staged" >"$work/install.log"
mv "$work/staged" "$work/moved"
if grep -rq "$work/staged" "$work/moved/lib/cmake/Aryl"; then
  echo "the installed package names its install prefix:"; grep -rn "$work/staged" "$work/moved/lib/cmake/Aryl"; exit 1
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
consumer() {  # consumer DIR [cmake args]: configure and build the consumer project in DIR
  local dir="$1"; shift
  cmake -S "$src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/moved" \
    "${launcher[@]}" "$@" >"$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; fail "configure $dir"; }
  cmake --build "$dir" >"$dir.build.log" 2>&1 || { tail -40 "$dir.build.log"; fail "build $dir"; }
}
consumer "$work/consumer"
grep -q -- "-std=c++20\|-std=gnu++20" "$work/consumer/compile_commands.json" 2>/dev/null ||
  grep -rq -- "-std=c++20\|-std=gnu++20" "$work/consumer/build.ninja" ||
  fail "consumer not compiled as C++20"
env -u ARYL_STORE_ENDPOINT "$work/consumer/consumer"

# No CUDA or NCCL in the CPU-only consumer: neither a direct dependency nor one
# pulled in by another library.
needed="$(readelf -d "$work/consumer/consumer" | grep NEEDED || true)"
printf '%s\n' "$needed" | grep -Eq 'libnccl|libcudart' && fail "the CPU-only consumer needs CUDA/NCCL: $needed"
ldd "$work/consumer/consumer" | grep -Eq 'libnccl|libcudart' && fail "ldd: $(ldd "$work/consumer/consumer")"
grep -q 'nccl\|CUDA' "$work/consumer/build.ninja" && fail "the CPU-only consumer's link names CUDA/NCCL"
echo "CPU-only consumer: no libnccl, no libcudart ($(printf '%s\n' "$needed" | wc -l) NEEDED entries)"
# Asking it for the NCCL backend is an error that says what to link.
err="$(env -u ARYL_STORE_ENDPOINT ARYL_BACKEND=nccl "$work/consumer/consumer" 2>&1)" && fail "ARYL_BACKEND=nccl ran"
printf '%s\n' "$err" | grep -q 'does not link that communicator (link Aryl::runtime_nccl' ||
  fail "ARYL_BACKEND=nccl without the component: $err"

if [ ! -f "$work/moved/lib/cmake/Aryl/ArylNcclTargets.cmake" ]; then
  echo "the runtime was built without NCCL: no nccl component to check"
  exit 0
fi
consumer "$work/consumer-nccl" -DARYL_CONSUMER_NCCL=ON
grep -q 'NEEDED.*libnccl' <<<"$(readelf -d "$work/consumer-nccl/consumer")" ||
  fail "the nccl consumer does not need libnccl: $(readelf -d "$work/consumer-nccl/consumer" | grep NEEDED)"
env -u ARYL_STORE_ENDPOINT "$work/consumer-nccl/consumer"  # gloo by default: trains as the CPU one
# The backend is registered: the error is now about the missing store, not the link.
err="$(env -u ARYL_STORE_ENDPOINT ARYL_BACKEND=nccl "$work/consumer-nccl/consumer" 2>&1)" && fail "nccl alone ran"
printf '%s\n' "$err" | grep -q 'ARYL_BACKEND=nccl needs the job store' || fail "nccl consumer, ARYL_BACKEND=nccl: $err"
echo "nccl consumer: links libnccl, backend nccl registered"
