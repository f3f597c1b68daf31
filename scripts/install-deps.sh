#!/usr/bin/env bash
# install-deps.sh - install what Deltafin needs on Debian/Ubuntu (as root, or with sudo).
#
#   scripts/install-deps.sh           building and running: a compiler and the libraries
#   scripts/install-deps.sh --test    the test suite's too: sanitizer runtimes and clang (the fuzzers), the aarch64
#                                     cross compiler, its libraries and qemu-user, curl and jq, gnuplot, Node.js
#                                     (llama.cpp's reference library and the real clients come from npm), Chromium
#                                     (the chat page's test drives it with puppeteer-core)
# The README's first command uses the first form, its test command and .ci/run the second.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
TEST=0
case "${1:-}" in
    "") ;;
    --test) TEST=1 ;;
    *) echo "usage: scripts/install-deps.sh [--test]" >&2; exit 2 ;;
esac
# `make` builds the unit tests beside the program, so cmocka is a build dependency; Open MPI builds the plugin
# that runs one model over several machines (docs/cluster.md; the program itself never needs it).
BUILD_PKGS=(build-essential make pkg-config ca-certificates
    libpcre2-dev libutf8proc-dev libcmocka-dev liburing-dev libsqlite3-dev
    libmicrohttpd-dev libcjson-dev libedit-dev libcurl4-openssl-dev libssl-dev openmpi-bin libopenmpi-dev)
TEST_PKGS=(git curl jq clang llvm libclang-rt-14-dev man-db
    gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user
    libc6:arm64 libpcre2-dev:arm64 libutf8proc-dev:arm64 libcmocka-dev:arm64 liburing-dev:arm64 libsqlite3-dev:arm64
    libmicrohttpd-dev:arm64 libcjson-dev:arm64 libedit-dev:arm64 libcurl4-openssl-dev:arm64 libssl-dev:arm64
    gnuplot-nox tmux python3 python3-pytest python3-venv python3-setuptools python3-wheel chromium fonts-dejavu-core)
if [ $TEST = 1 ]; then
    # arm64 multiarch: the aarch64 (NEON) build links against Debian's arm64 libraries and its tests run under
    # qemu-user.
    $SUDO dpkg --add-architecture arm64
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends "${BUILD_PKGS[@]}" "${TEST_PKGS[@]}"
    # npm fetches llama.cpp's prebuilt library (the test reference); install Node.js only where missing.
    command -v npm > /dev/null || $SUDO apt-get install -y --no-install-recommends nodejs npm
else
    $SUDO apt-get update
    $SUDO apt-get install -y --no-install-recommends "${BUILD_PKGS[@]}"
fi
