#!/bin/sh
# weft run and weft submit as a user runs them: --out DIR/<i>.png, checked before any work;
# progress in steps with elapsed time and ETA, one line every few seconds without a terminal;
# short options; SIGINT stops the coordinator and the workers and removes the temporary folder,
# which is under $TMPDIR. usage: test_run_cli.sh WEFT_BINARY
set -eu
weft=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-run-cli-XXXXXX")
run_pid=
cleanup() {
    [ -n "$run_pid" ] && kill -KILL "$run_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
fail() { echo "$*"; [ -f "$tmp/run.log" ] && cat "$tmp/run.log"; exit 1; }

# a folder: DIR/<i>.png, with plain progress lines in steps
"$weft" run --tp 2 --height 64 --width 64 --steps 3 -n 2 -o "$tmp/out" --progress plain \
    --seed 5 >"$tmp/run.log" 2>&1 || fail "weft run failed"
for i in 0 1; do
    head -c 8 "$tmp/out/$i.png" | od -An -tx1 | grep -q '89 50 4e 47' || fail "no $tmp/out/$i.png"
done
grep -q '^generate: step 6/6 (100%), 0:0[0-9] elapsed, ETA 0:00$' "$tmp/run.log" ||
    fail "no plain progress line in steps"
# an --out that cannot be written: refused before anything starts
touch "$tmp/file"
if "$weft" run --height 64 --width 64 --steps 1 -o "$tmp/file/sub" >"$tmp/bad.log" 2>&1; then
    fail "an unwritable --out was accepted"
fi
grep -q -- "--out $tmp/file/sub" "$tmp/bad.log" || fail "the refusal does not name --out"
# the same for a FILE.png in a folder that is not there, and for weft generate (it once ran the
# whole pipeline and then failed on its temporary file)
for cmd in run generate; do
    if "$weft" $cmd --height 64 --width 64 --steps 1 --prompt "a red circle" \
            --out "$tmp/none/x.png" >"$tmp/bad.log" 2>&1; then
        fail "weft $cmd took an --out in a missing folder"
    fi
    grep -q -- "--out $tmp/none/x.png: $tmp/none is not a folder" "$tmp/bad.log" ||
        fail "weft $cmd: the refusal does not name --out and its folder"
done
grep -q "worker(s)" "$tmp/bad.log" && fail "processes were started before --out was checked"
# -h
"$weft" run -h | grep -q -- '--progress' || fail "weft run -h"
"$weft" submit -h | grep -q -- '-o, --out DIR' || fail "weft submit -h"

# SIGINT: the coordinator and the workers stop, the temporary folder (under TMPDIR) goes
mkdir "$tmp/t"
TMPDIR=$tmp/t "$weft" run --tp 2 --height 512 --width 512 --steps 100 -o "$tmp/sig.png" \
    >"$tmp/run.log" 2>&1 &
run_pid=$!
i=0
until [ "$(ls "$tmp/t" | wc -l)" = 1 ] && [ "$(pgrep -P "$run_pid" | wc -l)" = 3 ]; do
    i=$((i + 1))
    [ $i -lt 300 ] || fail "weft run did not start its coordinator and two workers"
    sleep 0.1
done
children=$(pgrep -P "$run_pid" | tr '\n' ' ')
sleep 1
kill -INT "$run_pid"
rc=0
wait "$run_pid" || rc=$?
run_pid=
[ "$rc" = 130 ] || fail "weft run exited $rc after SIGINT, not 130"
for c in $children; do
    kill -0 "$c" 2>/dev/null && fail "child $c outlived weft run"
done
[ -z "$(ls "$tmp/t")" ] || fail "the temporary folder was left: $(ls "$tmp/t")"
[ ! -e "$tmp/sig.png" ] || fail "an image was written after SIGINT"
# SIGKILL, which weft run cannot catch: the kernel stops its children (PR_SET_PDEATHSIG)
TMPDIR=$tmp/t "$weft" run --tp 2 --height 512 --width 512 --steps 100 -o "$tmp/sig.png" \
    >"$tmp/run.log" 2>&1 &
run_pid=$!
i=0
until [ "$(pgrep -P "$run_pid" | wc -l)" = 3 ]; do
    i=$((i + 1))
    [ $i -lt 300 ] || fail "weft run did not start its processes"
    sleep 0.1
done
children=$(pgrep -P "$run_pid" | tr '\n' ' ')
kill -KILL "$run_pid"
wait "$run_pid" 2>/dev/null || true
run_pid=
i=0
for c in $children; do
    while kill -0 "$c" 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 100 ] || fail "child $c outlived a SIGKILLed weft run"
        sleep 0.1
    done
done
rm -rf "$tmp/t"/weft_run_* # what SIGKILL could not let it remove
echo "run: -o DIR/<i>.png, plain progress in steps, --out checked first, SIGINT and SIGKILL stop all"
