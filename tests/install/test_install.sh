#!/bin/sh
# `meson install` into a temporary root, then what a user of the installed tree does: build the
# README's C client example through pkg-config (weft.pc, <weft.h>, libweft), run it against the
# installed `weft serve`, read the man pages, verify the systemd units (systemd-analyze).
# usage: test_install.sh BUILD_DIR SOURCE_ROOT
set -eu
build=$1
src=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-install-XXXXXX")
serve_pid=
cleanup() {
    [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
dest=$tmp/root
meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log"; exit 1; }

weft=$(find "$dest" -path '*/bin/weft' -type f | head -n 1)
pc=$(find "$dest" -name weft.pc | head -n 1)
[ -x "$weft" ] || { echo "no installed weft binary"; exit 1; }
[ -n "$pc" ] || { echo "no installed weft.pc"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
mandir=$(dirname "$(find "$dest" -name weft-serve.1 | head -n 1)")
for page in weft weft-serve weft-submit weft-run weft-worker weft-status weft-cancel \
            weft-generate weft-inspect weft-plan weft-bench; do
    [ -s "$mandir/$page.1" ] || { echo "no man page $page.1"; exit 1; }
done
grep -q -- 'listen' "$mandir/weft-serve.1" || { echo "weft-serve.1 lacks --listen"; exit 1; }
[ -f "$(dirname "$pc")/../../../share/weft/models/flux-tiny/model_index.json" ] ||
    find "$dest" -path '*share/weft/models/flux-tiny/model_index.json' | grep -q . ||
    { echo "the default model is not installed"; exit 1; }
find "$dest" -name weft.example.ini | grep -q . || { echo "no example configuration"; exit 1; }

# the README's example, exactly as it is written there
awk '/<!-- c-example -->/ {on = 1; next} on && /^```c/ {grab = 1; next}
     grab && /^```/ {exit} grab {print}' "$src/README.md" >"$tmp/example.c"
[ -s "$tmp/example.c" ] || { echo "README.md has no C example after <!-- c-example -->"; exit 1; }
prefix=$(sed -n 's/^prefix=//p' "$pc")
flags=$(PKG_CONFIG_PATH="$(dirname "$pc")" \
        pkg-config --define-variable=prefix="$dest$prefix" --cflags --libs weft)
# a sanitizer build's library needs its runtime in the program too
san=
ldd "$libdir/libweft.so" | grep -q libasan && san="-fsanitize=address,undefined"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror $san -o "$tmp/example" "$tmp/example.c" $flags

env -u WEFT_MODEL_PATH "$weft" serve --listen 127.0.0.1:0 --port-file "$tmp/port" --api.state_dir="$tmp/state" \
    --kernels.threads=1 >"$tmp/serve.log" 2>&1 &
serve_pid=$!
i=0
while [ ! -s "$tmp/port" ]; do
    i=$((i + 1))
    [ $i -lt 300 ] || { cat "$tmp/serve.log"; echo "weft serve did not listen"; exit 1; }
    sleep 0.1
done
addr=$(cat "$tmp/port")
(cd "$tmp" && WEFT_SERVER=$addr LD_LIBRARY_PATH=$libdir timeout 120 ./example) ||
    { cat "$tmp/serve.log"; echo "the example failed"; exit 1; }
head -c 8 "$tmp/ring.png" | od -An -tx1 | grep -q '89 50 4e 47 0d 0a 1a 0a' ||
    { echo "the example did not write a PNG"; exit 1; }
[ "$(LD_LIBRARY_PATH=$libdir ldd "$tmp/example" | grep -c "$libdir/libweft.so")" = 1 ] ||
    { ldd "$tmp/example"; echo "the example is not linked with the installed libweft"; exit 1; }

# the installed systemd units, with the installed binary in place of their ExecStart path
if command -v systemd-analyze >/dev/null 2>&1; then
    units=$tmp/units
    mkdir "$units"
    for u in weft-serve.service weft-worker@.service; do
        f=$(find "$dest" -name "$u" | head -n 1)
        [ -n "$f" ] || { echo "$u is not installed"; exit 1; }
        sed "s|^ExecStart=[^ ]*/weft|ExecStart=$weft|" "$f" >"$units/$u"
    done
    cp "$units/weft-worker@.service" "$units/weft-worker@0.service"
    MANPATH=$(dirname "$mandir") systemd-analyze verify "$units/weft-serve.service" \
        "$units/weft-worker@0.service"
fi
echo "install: libweft, <weft.h>, weft.pc, the README's example run, 11 man pages, the units verified"
