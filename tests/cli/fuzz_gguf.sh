#!/usr/bin/env bash
# fuzz_gguf.sh - run the GGUF reader's fuzzer briefly as part of `make test`.
#
#   tests/cli/fuzz_gguf.sh BUILD_DIR      (tests/run.sh passes the build directory)
#
# `make test` runs the suite twice, on the optimized build and on the sanitizer
# build (build-debug). The fuzzer is always built with its own sanitizers by
# tests/fuzz.sh, so it runs once: with the optimized build's pass, and is
# skipped (exit 0, "SKIPPED: ...") for a sanitizer build directory
# (named build-debug*, or DELTAFIN_SANITIZED set as `make test` does). Its objects
# and working corpus go to BUILD_DIR/fuzz, so concurrent test runs of different
# build directories do not share them. FUZZ_SECONDS (default 30) sets the time.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-build}
if [ -n "${DELTAFIN_SANITIZED:-}" ] || [[ "$(basename "$BUILD")" == build-debug* ]]; then
    echo "SKIPPED: $BUILD is a sanitizer build; the GGUF fuzzer (itself ASan+UBSan) runs once, with the optimized build's tests"
    exit 0
fi
case "$BUILD" in /*) ;; *) BUILD="$PWD/$BUILD" ;; esac
FUZZ_SECONDS=${FUZZ_SECONDS:-30} FUZZ_BUILD="$BUILD/fuzz" exec "$ROOT/tests/fuzz.sh"
