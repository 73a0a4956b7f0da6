#!/usr/bin/env bash
# run.sh BUILD_DIR SOURCE_DIR WORK_DIR: installs BUILD_DIR, moves the prefix
# (the package must be relocatable), builds the consumer against it with
# CMAKE_CXX_STANDARD 17 and runs it.
set -euo pipefail
build="$1" src="$2" work="$3"
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/staged" >"$work/install.log"
mv "$work/staged" "$work/moved"
if grep -rq "$work/staged" "$work/moved/lib/cmake/Aryl"; then
  echo "the installed package names its install prefix:"; grep -rn "$work/staged" "$work/moved/lib/cmake/Aryl"; exit 1
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$work/moved" \
  "${launcher[@]}" >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/consumer" >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
grep -q -- "-std=c++20\|-std=gnu++20" "$work/consumer/compile_commands.json" 2>/dev/null ||
  grep -rq -- "-std=c++20\|-std=gnu++20" "$work/consumer/build.ninja" ||
  { echo "consumer not compiled as C++20"; exit 1; }
env -u ARYL_STORE_ENDPOINT "$work/consumer/consumer"
