#!/bin/sh
# Installs the Debian 12 packages weft builds and tests with (the CUDA toolkit is separate:
# nvcc, cuBLAS; without it the CUDA backend is simply not built). OpenBLAS, BLIS and oneDNN are
# only for weft bench gemm's comparison; the kernels use none of them.
set -eu
SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends \
    gcc g++ clang clang-tidy meson ninja-build pkg-config \
    libucx-dev ucx-utils libuv1-dev libinih-dev libopenblas-dev libspng-dev libcjson-dev \
    libjpeg62-turbo-dev libwebp-dev libutf8proc-dev libsentencepiece-dev \
    python3 python3-jsonschema python3-yaml yamllint prometheus systemd man-db \
    chromium chromium-driver python3-selenium \
    libhwloc-dev libibverbs-dev \
    openmpi-bin libopenmpi-dev \
    libdnnl-dev libblis-dev \
    node-llhttp iproute2 procps
