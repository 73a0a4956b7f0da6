#!/usr/bin/env bash
# The Debian package of this build (CPack, as ./dev package makes it): its
# control data and file list (dpkg-deb -I/-c), and the binaries extracted with
# dpkg-deb -x into a scratch root answering --version.
#   deb_test.sh BUILD_DIR SCRATCH
set -euo pipefail
build="$1"; scratch="$2"
rm -rf "$scratch"; mkdir -p "$scratch"
fail() { echo "FAIL: $*" >&2; exit 1; }
(cd "$scratch" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$scratch" >cpack.log 2>&1) ||
  { tail -30 "$scratch/cpack.log"; fail "cpack"; }
# One package per part (cmake/ArylInstall.cmake): a head node installs
# aryl-scheduler and aryl without libtorch.
declare -A want=(
  [aryl]="./usr/bin/aryl ./usr/bin/aryl-run ./etc/aryl/aryl.toml ./usr/share/doc/aryl/operations.md ./usr/share/bash-completion/completions/aryl"
  [aryl-scheduler]="./usr/bin/aryl-scheduler ./usr/bin/aryl-sim ./usr/lib/systemd/system/aryl-scheduler.service ./etc/aryl/scheduler.env ./usr/lib/sysusers.d/aryl.conf"
  [aryl-agent]="./usr/bin/aryl-agent ./usr/lib/systemd/system/aryl-agent.service ./etc/aryl/agent.env"
  [aryl-runtime]="./usr/bin/aryl-rt-launch"
  [aryl-dev]="./usr/include/aryl/aryl.h ./usr/lib/cmake/Aryl/ArylConfig.cmake"
)
shlibdeps=0
grep -q '^set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS "ON")' "$build/CPackConfig.cmake" && shlibdeps=1
entries=0
for pkg in "${!want[@]}"; do
  deb="$(ls "$scratch/${pkg}_"*.deb 2>/dev/null | head -1)"
  [ -f "$deb" ] || fail "no $pkg package in $scratch: $(ls "$scratch")"
  echo "package $(basename "$deb"), $(stat -c %s "$deb") bytes"
  info="$(dpkg-deb -I "$deb")"
  grep -q "^ Package: $pkg\$" <<<"$info" || fail "$pkg: Package field: $info"
  grep -Eq '^ Version: [0-9]+\.[0-9]+\.[0-9]+' <<<"$info" || fail "$pkg: Version field"
  case "$pkg" in
    aryl|aryl-scheduler|aryl-agent) grep -q 'conffiles' <<<"$info" || fail "$pkg: no conffiles" ;;
  esac
  case "$pkg" in
    aryl-scheduler|aryl-agent) grep -q 'postinst' <<<"$info" || fail "$pkg: no postinst" ;;
  esac
  if [ "$shlibdeps" = 1 ]; then
    case "$pkg" in
      aryl-scheduler|aryl)
        grep -q '^ Depends:.*libzmq5' <<<"$info" || fail "$pkg: Depends lacks libzmq5: $info"
        grep -q '^ Depends:.*torch' <<<"$info" && fail "$pkg depends on libtorch: $info" ;;
    esac
  fi
  list="$(dpkg-deb -c "$deb")"
  entries=$((entries + $(printf '%s\n' "$list" | wc -l)))
  files="$(awk '{print $6}' <<<"$list")"
  for f in ${want[$pkg]}; do
    grep -qx "$f" <<<"$files" || fail "$pkg lacks $f"
  done
  grep -q '^\./usr/local' <<<"$files" && fail "$pkg has files under /usr/local"
  if [ "$pkg" = aryl-runtime ] && ls "$build"/python/aryl/_aryl*.so >/dev/null 2>&1; then
    grep -qx './usr/lib/python3/dist-packages/aryl/__init__.py' <<<"$files" || fail "aryl-runtime lacks the Python module"
    grep -Eq '^\./usr/lib/python3/dist-packages/aryl/_aryl.*\.so$' <<<"$files" || fail "aryl-runtime lacks _aryl*.so"
  fi
  dpkg-deb -x "$deb" "$scratch/root"
done
v="$(ARYL_CONFIG=/dev/null "$scratch/root/usr/bin/aryl" --version)" || fail "installed aryl --version failed"
printf '%s\n' "$v"
grep -Eq '^aryl [0-9]+\.[0-9]+\.[0-9]+ \(commit ' <<<"${v%%$'\n'*}" || fail "aryl --version: $v"
for b in aryl-scheduler aryl-agent aryl-run aryl-sim; do
  "$scratch/root/usr/bin/$b" --version >/dev/null || fail "installed $b --version failed"
done
echo "deb OK: ${#want[@]} packages, $entries entries"
