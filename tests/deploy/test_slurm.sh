#!/bin/sh
# deploy/slurm/weft.sbatch in a faked Slurm allocation on loopback: SLURM_* set as sbatch sets
# them for 2 tasks on one node ("localhost"), srun replaced by tests/deploy/fake_srun. The script
# must start the coordinator and two tensor-parallel workers that find it from the node list,
# serve a job, report the Slurm launcher, and stop everything on scancel's SIGTERM.
# usage: test_slurm.sh WEFT_BINARY SOURCE_ROOT
set -eu
weft=$1
src=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/weft-slurm-XXXXXX")
job=
cleanup() {
    [ -n "$job" ] && kill -TERM "$job" 2>/dev/null && wait "$job" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM
mkdir "$tmp/bin"
cp "$src/tests/deploy/fake_srun" "$tmp/bin/srun"
free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
api=$(free_port)
wport=$(free_port)
(
    cd "$tmp"
    PATH=$tmp/bin:$PATH SLURM_JOB_ID=42 SLURM_JOB_NODELIST=localhost SLURM_NTASKS=2 \
    SLURM_NNODES=1 SLURM_SUBMIT_DIR=$tmp WEFT=$weft WEFT_SLURM_BIND=127.0.0.1 WEFT_SLURM_API_PORT=$api \
    WEFT_SLURM_WORKER_PORT=$wport WEFT_PARALLEL_TP_DEGREE=2 WEFT_KERNELS_THREADS=1 \
    exec bash "$src/deploy/slurm/weft.sbatch"
) >"$tmp/job.log" 2>&1 &
job=$!
i=0
until "$weft" status --server "127.0.0.1:$api" >/dev/null 2>&1; do
    i=$((i + 1))
    [ $i -lt 300 ] || { cat "$tmp/job.log"; echo "the coordinator did not listen"; exit 1; }
    sleep 0.1
done
# weft submit waits in the queue until the workers have joined
if ! timeout 120 "$weft" submit --server "127.0.0.1:$api" --prompt red-fox --height 64 \
        --width 64 --steps 2 --seed 1 -o "$tmp/out" --progress none >"$tmp/submit.log" 2>&1; then
    cat "$tmp/submit.log" "$tmp/job.log"
    echo "the job did not complete on the Slurm-started cluster"
    exit 1
fi
head -c 8 "$tmp/out/0.png" | od -An -tx1 | grep -q '89 50 4e 47' || { echo "no PNG"; exit 1; }
"$weft" status --json --server "127.0.0.1:$api" >"$tmp/status.json"
[ "$(grep -o '"launcher": *"slurm"' "$tmp/status.json" | wc -l)" = 2 ] ||
    { cat "$tmp/status.json"; echo "the workers did not report Slurm as their launcher"; exit 1; }
grep -q '"tp": *2' "$tmp/status.json" || { echo "not the tp 2 mesh"; exit 1; }
[ -f "$tmp/weft-state/journal/journal" ] || { echo "the journal is not in the state folder"; exit 1; }
# scancel: SIGTERM to the batch script; everything stops
kill -TERM "$job"
rc=0
wait "$job" || rc=$?
job=
[ "$rc" = 143 ] || { cat "$tmp/job.log"; echo "the batch script exited $rc, not 143"; exit 1; }
sleep 0.5
if pgrep -f "$tmp" >/dev/null 2>&1 || pgrep -f "127.0.0.1:$wport" >/dev/null; then
    echo "processes were left running"; exit 1
fi
echo "slurm: coordinator + 2 srun workers from SLURM_*, a tp 2 job served, all stopped on SIGTERM"
