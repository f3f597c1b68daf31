#!/usr/bin/env bash
# install-deps.sh - install Deltafin's build and test dependencies on Debian/Ubuntu (run as root).
# Used by the README's first command and by .ci/run.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
# arm64 multiarch: the aarch64 (NEON) build links against Debian's arm64 libraries
# and its tests run under qemu-user.
$SUDO dpkg --add-architecture arm64
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends \
    build-essential make pkg-config ca-certificates git \
    libpcre2-dev libutf8proc-dev libcmocka-dev liburing-dev libsqlite3-dev \
    libmicrohttpd-dev libcjson-dev libedit-dev libcurl4-openssl-dev curl jq \
    clang llvm libclang-rt-14-dev \
    gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user \
    libc6:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libcmocka-dev:arm64 liburing-dev:arm64 libsqlite3-dev:arm64 \
    libmicrohttpd-dev:arm64 libcjson-dev:arm64 libedit-dev:arm64 libcurl4-openssl-dev:arm64 \
    gnuplot-nox
# npm fetches llama.cpp's prebuilt library (the test reference); install Node.js only where missing.
command -v npm >/dev/null || $SUDO apt-get install -y --no-install-recommends nodejs npm
