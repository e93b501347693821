#!/usr/bin/env bash
# The GPU checks, as one prepared script for a lent GPU machine (one H200, 16 cores, nothing
# reachable from it, a few minutes): build weft with CUDA there, then
#   backend-ops  every op of the CUDA backend against the CPU reference (test_backend_ops cuda)
#   parity       the FLUX.1 parity suite on cuda:0 (WEFT_TEST_KERNELS=cuda): forward, loop, tp,
#                cp, pp, pipeline, VAE against Diffusers' golden data, f32 within 1e-4, bf16
#                within 1e-2, parallel layouts against one device (the tests' own bounds)
#   cluster      weft generate and `weft run` with two workers sharing the GPU (tp 2, Ulysses
#                2, ring 2) against the CPU's image (cluster_device, WEFT_TEST_DEVICE=cuda:0)
#   bench        weft bench flux on a FLUX.1-dev-shaped model (3072 wide, 24 heads, 4096 + 512
#                tokens, 2 double + 4 single blocks, bf16), beside Diffusers on torch when it
#                imports; then the same in f32 if time is left
# Everything goes under $OUT (default ./gpu-out), at most 8 files: summary.txt (one line per
# step: result and seconds), env.txt, and one log per step. Every step is bounded by its own
# limit and by the whole budget (WEFT_GPU_BUDGET, default 460 s, under 8 minutes), so the
# script ends in time whatever hangs; a step that does not fit is reported as skipped.
#
# Run HERE first: tests/gpu/fetch-deps.sh --torch (Debian packages and wheels into
# tests/gpu/deps/, which the device run carries: the GPU image has CUDA, gcc, meson, ninja and
# torch, but not weft's libraries). Then, on the GPU machine, from the repository's root:
#   tests/gpu/run.sh
# It also runs on a machine without a GPU: the GPU steps then report "skipped" (exit 77).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out}
BUDGET=${WEFT_GPU_BUDGET:-460}
BUILD=${WEFT_GPU_BUILD:-$ROOT/build-gpu}
START=$(date +%s)
mkdir -p "$OUT"
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
FAILED=0

say() { echo "$*" | tee -a "$SUMMARY"; }
left() { echo $((BUDGET - ($(date +%s) - START))); }

# step NAME MAX CMD...: CMD's output to $OUT/NAME.log, killed after MAX seconds or when the
# budget (less 15 s for what follows) runs out; one line in the summary.
step() {
    local name=$1 max=$2
    shift 2
    local t=$(( $(left) - 15 ))
    [ "$t" -gt "$max" ] && t=$max
    if [ "$t" -lt 10 ]; then
        say "$(printf '%-12s %-28s' "$name" "skipped: no time left")"
        return 1
    fi
    local t0
    t0=$(date +%s)
    timeout --kill-after=5 "$t" "$@" >"$OUT/$name.log" 2>&1
    local rc=$? result
    case $rc in
    0) result=ok ;;
    77) result="skipped (exit 77)" ;;
    124 | 137) result="TIMEOUT after ${t} s" ;;
    *) result="FAILED (exit $rc)" ;;
    esac
    case $rc in 0 | 77) ;; *) FAILED=1 ;; esac
    say "$(printf '%-12s %-28s %4d s' "$name" "$result" $(( $(date +%s) - t0 )))"
    return $rc
}

# ---- the machine, and weft's libraries unpacked from the carried Debian packages -----------
{
    echo "date: $(date -u +%FT%TZ)  budget: $BUDGET s  cores: $(nproc)"
    uname -a
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1
    nvcc --version 2>&1 | tail -2
    gcc --version 2>&1 | head -1
    echo "meson $(meson --version 2>&1), ninja $(ninja --version 2>&1)"
    python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.is_available())' 2>&1
    git -C "$ROOT" log --oneline -1 2>&1
} >"$OUT/env.txt" 2>&1

DEPS=$ROOT/tests/gpu/deps
LLHTTP=()
if ls "$DEPS"/*.deb >/dev/null 2>&1; then
    P=/tmp/weft-deps
    rm -rf "$P" && mkdir -p "$P"
    for f in "$DEPS"/*.deb; do
        if command -v dpkg-deb >/dev/null; then
            dpkg-deb -x "$f" "$P"
        else # no dpkg: a .deb is an ar archive holding data.tar.*
            (d=$(mktemp -d) && cd "$d" && ar x "$f" && tar -xf data.tar.* -C "$P"; rm -rf "$d")
        fi
    done
    L=$P/usr/lib/x86_64-linux-gnu
    # only the unpacked .pc files, their paths under the unpack folder
    export PKG_CONFIG_LIBDIR=$L/pkgconfig:$P/usr/share/pkgconfig
    export PKG_CONFIG_PATH=$PKG_CONFIG_LIBDIR
    export PKG_CONFIG_SYSROOT_DIR=$P
    command -v pkg-config >/dev/null || export PKG_CONFIG=$P/usr/bin/pkgconf
    export LD_LIBRARY_PATH=$L:$P/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export LIBRARY_PATH=$L
    export CPATH=$P/usr/include:$P/usr/include/x86_64-linux-gnu
    export UCX_MODULE_DIR=$L/ucx
    LLHTTP=(-Dllhttp_prefix="$P/usr/share")
    echo "weft's libraries: $(ls "$DEPS"/*.deb | wc -l) packages unpacked under $P" >>"$OUT/env.txt"
else
    echo "weft's libraries: no carried packages (tests/gpu/deps): the system's" >>"$OUT/env.txt"
fi
PYTHON=python3
if ls "$DEPS"/wheels/*.whl >/dev/null 2>&1 &&
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/weft-site "$DEPS"/wheels/*.whl >>"$OUT/env.txt" 2>&1; then
    export PYTHONPATH=/tmp/weft-site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -c 'import diffusers; print("diffusers", diffusers.__version__)' >>"$OUT/env.txt" 2>&1
# the GPU's own clock and memory, for the benchmark's reader
nvidia-smi -q -d CLOCK,MEMORY 2>/dev/null | grep -E 'SM|Used|Total' | head -8 >>"$OUT/env.txt"

# ---- build: CUDA on (sm_80, sm_90), every core ------------------------------------------------
# (a carried, configured build folder is reused)
export BUILD
export LLHTTP_OPT="${LLHTTP[*]}"
# shellcheck disable=SC2016 # expanded by the inner shell
if ! step build "${WEFT_GPU_BUILD_S:-240}" bash -c '
    if [ ! -f "$BUILD/build.ninja" ]; then
        meson setup "$BUILD" -Dcuda=enabled $LLHTTP_OPT || exit 1
    fi
    ninja -C "$BUILD" -j "$(nproc)"'; then
    say "the build failed: nothing else can run (see build.log)"
    exit 1
fi

# ---- the checks ---------------------------------------------------------------------------------
step backend-ops 60 "$BUILD/tests/kernels/test_backend_ops" cuda 24

# the parity suite's tests, each on the GPU (the _devmem twins are the CPU's, left out)
mapfile -t PARITY < <(meson test -C "$BUILD" --list --suite parity 2>/dev/null |
    sed -n 's|^weft:parity / ||p' | grep -v '_devmem$')
echo "${#PARITY[@]} parity tests" >>"$OUT/env.txt"
step parity 150 env WEFT_TEST_KERNELS=cuda meson test -C "$BUILD" --no-rebuild --verbose \
    --num-processes 4 "${PARITY[@]}"

step cluster 75 env WEFT_TEST_DEVICE=cuda:0 meson test -C "$BUILD" --no-rebuild --verbose \
    cluster_device

# FLUX.1-dev-shaped: 3072 wide (24 x 128), 4096 image + 512 text tokens, a few blocks
FLUX_DEV=(--heads 24 --head-dim 128 --tokens 4096 --text 512 --double 2 --single 4
    --rounds 5 --device cuda:0 --python "$PYTHON")
step bench 120 "$BUILD/weft" bench flux "${FLUX_DEV[@]}" --dtype bf16
[ "$(left)" -gt 110 ] && step bench-f32 90 "$BUILD/weft" bench flux "${FLUX_DEV[@]}" --dtype f32

say "total $(( $(date +%s) - START )) s of a $BUDGET s budget; $([ $FAILED = 0 ] && echo 'no failures' || echo 'FAILURES above')"
exit $FAILED
