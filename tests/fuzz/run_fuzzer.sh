#!/bin/sh
# Short fixed-seed libFuzzer run: run_fuzzer.sh FUZZER SEED_CORPUS RUNS
# New inputs go to a temporary corpus so the committed seeds stay as they are.
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$1" -seed=1 -runs="$3" -max_len=65536 -timeout=10 "$tmp" "$2"
