#!/bin/sh
# deploy/systemd's units as configured by this build, checked by systemd-analyze verify (their
# syntax, every directive known to this systemd, the binary executable, the man pages they name
# found), with this build's weft in place of the installed path. Skipped without systemd.
# usage: test_systemd.sh BUILD_DIR
set -eu
build=$1
command -v systemd-analyze >/dev/null 2>&1 || { echo "no systemd-analyze: skipped"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-systemd-XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$tmp/man/man1"
cp "$build"/*.1 "$tmp/man/man1/"
for u in weft-serve.service weft-worker@.service; do
    sed "s|^ExecStart=[^ ]*/weft|ExecStart=$build/weft|" "$build/deploy/$u" >"$tmp/$u"
done
cp "$tmp/weft-worker@.service" "$tmp/weft-worker@0.service"
MANPATH=$tmp/man systemd-analyze verify "$tmp/weft-serve.service" "$tmp/weft-worker@0.service"
grep -q '^StateDirectory=weft' "$tmp/weft-serve.service"
grep -q '^KillSignal=SIGTERM' "$tmp/weft-serve.service"
echo "systemd: weft-serve.service and weft-worker@.service verified"
