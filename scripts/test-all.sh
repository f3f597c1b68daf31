#!/usr/bin/env bash
# test-all.sh - `make test`: every suite, each to its end, then one summary.
#
#   scripts/test-all.sh
#
# The suites: the optimized build (tests/run.sh build, with the lower x86
# tiers it runs capped), the same under ASan+UBSan, the threading contract
# under ThreadSanitizer (make tsan) and the aarch64 build under qemu-user
# (make test-cross). A failing suite does not stop the others: each one's
# wall time and result is printed, the failed ones are named at the end, and
# the exit status is non-zero if any failed (so CI still fails).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
MAKE=${MAKE:-make}
names=(); results=(); failed=()
suite() { # NAME CMD...
    local name=$1; shift
    local t0=$SECONDS
    echo "=== $name"
    "$@"
    local rc=$?
    names+=("$name")
    results+=("$(printf '%-34s %-6s %5ds' "$name" "$([ $rc -eq 0 ] && echo ok || echo FAILED)" $((SECONDS - t0)))")
    [ $rc -eq 0 ] || failed+=("$name")
}
suite "llama.cpp vocabularies (npm)" ./scripts/llama-ref.sh build
suite "optimized (tests/run.sh build)" ./tests/run.sh build
suite "ASan+UBSan build" $MAKE MODE=debug BUILD=build-debug all
if [ -x build-debug/deltafin ]; then
    suite "ASan+UBSan (tests/run.sh build-debug)" env DELTAFIN_SANITIZED=1 ./tests/run.sh build-debug
fi
suite "ThreadSanitizer (make tsan)" $MAKE tsan
suite "aarch64 under qemu (make test-cross)" $MAKE test-cross
echo
echo "make test, suite by suite:"
printf '  %s\n' "${results[@]}"
[ ${#failed[@]} -eq 0 ] || echo "failed suites: ${failed[*]}"
echo "suites: $((${#names[@]} - ${#failed[@]})) passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
