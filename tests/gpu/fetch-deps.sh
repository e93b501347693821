#!/bin/sh
# Run HERE, on a Debian 12 machine with the network, before tests/gpu/run.sh goes to a GPU
# machine that reaches nothing: fetches what weft needs to build and run there into
# tests/gpu/deps/ (ignored by git; name it in the device run's carry):
#   - the Debian 12 packages of weft's libraries (UCX, libuv, inih, libspng, cJSON,
#     libjpeg-turbo, libwebp, the tokenizers' utf8proc and SentencePiece, the llhttp sources)
#     with their headers and pkg-config files, and pkgconf: run.sh unpacks them under
#     /tmp/weft-deps (nothing is installed into /). text/'s C++ (SentencePiece's API) builds
#     with the image's g++, nvcc's host compiler. oneDNN and BLIS are left out: only
#     `weft bench gemm` uses them, each when it is there;
#   - with --torch, the wheels of Diffusers (pure Python) and what it needs beyond the GPU
#     image's torch, for the torch column of the benchmark (Python 3.12 there).
# About 20 MB of packages (3 MB more with --torch). usage: tests/gpu/fetch-deps.sh [--torch]
set -eu
cd "$(dirname "$0")"
mkdir -p deps
cd deps
rm -f ./*.deb
apt-get download \
    libucx0 libucx-dev libnuma1 libnuma-dev libibverbs1 librdmacm1 libnl-3-200 \
    libnl-route-3-200 libuv1 libuv1-dev libinih1 libinih-dev \
    libspng0 libspng-dev \
    libcjson1 libcjson-dev libjpeg62-turbo libjpeg62-turbo-dev libwebp7 libwebp-dev \
    libwebpdemux2 libwebpmux3 libutf8proc2 libutf8proc-dev libsentencepiece0 \
    libsentencepiece-dev node-llhttp pkgconf pkgconf-bin libpkgconf3 \
    zlib1g zlib1g-dev libibverbs-dev librdmacm-dev libnl-3-dev libnl-route-3-dev
if [ "${1:-}" = --torch ]; then
    rm -rf wheels
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_17_x86_64 --platform any -d wheels \
        diffusers==0.42.1 importlib_metadata==8.7.0
fi
du -sh .
