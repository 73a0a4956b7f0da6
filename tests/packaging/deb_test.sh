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
deb="$(ls "$scratch"/*.deb | head -1)"
[ -f "$deb" ] || fail "no .deb in $scratch"
echo "package $(basename "$deb"), $(stat -c %s "$deb") bytes"
info="$(dpkg-deb -I "$deb")"
grep -q '^ Package: aryl$' <<<"$info" || fail "Package field: $info"
grep -Eq '^ Version: [0-9]+\.[0-9]+\.[0-9]+' <<<"$info" || fail "Version field"
grep -q 'conffiles' <<<"$info" || fail "no conffiles"
grep -q 'postinst' <<<"$info" || fail "no postinst"
if grep -q '^CPACK_DEBIAN_PACKAGE_SHLIBDEPS "ON"' "$build/CPackConfig.cmake"; then
  grep -q '^ Depends:.*libzmq5' <<<"$info" || fail "Depends lacks libzmq5: $info"
fi
list="$(dpkg-deb -c "$deb")"
files="$(awk '{print $6}' <<<"$list")"
for f in ./usr/bin/aryl ./usr/bin/aryl-scheduler ./usr/bin/aryl-agent ./usr/bin/aryl-run ./usr/bin/aryl-sim \
         ./usr/lib/systemd/system/aryl-scheduler.service ./usr/lib/systemd/system/aryl-agent.service \
         ./etc/aryl/aryl.toml ./etc/aryl/scheduler.env ./etc/aryl/agent.env ./usr/share/doc/aryl/operations.md \
         ./usr/share/bash-completion/completions/aryl ./usr/lib/sysusers.d/aryl.conf; do
  grep -qx "$f" <<<"$files" || fail "package lacks $f"
done
grep -q '^\./usr/local' <<<"$files" && fail "package has files under /usr/local"
if ls "$build"/python/aryl/_aryl*.so >/dev/null 2>&1; then
  grep -qx './usr/lib/python3/dist-packages/aryl/__init__.py' <<<"$files" || fail "package lacks the Python module"
  grep -Eq '^\./usr/lib/python3/dist-packages/aryl/_aryl.*\.so$' <<<"$files" || fail "package lacks _aryl*.so"
fi
dpkg-deb -x "$deb" "$scratch/root"
v="$(ARYL_CONFIG=/dev/null "$scratch/root/usr/bin/aryl" --version)" || fail "installed aryl --version failed"
printf '%s\n' "$v"
grep -Eq '^aryl [0-9]+\.[0-9]+\.[0-9]+ \(commit ' <<<"${v%%$'\n'*}" || fail "aryl --version: $v"
for b in aryl-scheduler aryl-agent aryl-run aryl-sim; do
  "$scratch/root/usr/bin/$b" --version >/dev/null || fail "installed $b --version failed"
done
echo "deb OK: $(printf '%s\n' "$list" | wc -l) entries"
