#!/bin/sh
# Short fixed-seed libFuzzer run: run_fuzzer.sh FUZZER SEED_CORPUS RUNS
# New inputs go to a temporary corpus so the committed seeds stay as they are.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# libFuzzer exits 77 on a crash by default, which meson reads as a skip: 1 makes it a failure
"$1" -seed=1 -runs="$3" -max_len=65536 -timeout=10 -error_exitcode=1 -timeout_exitcode=1 \
    "$tmp" "$2"
