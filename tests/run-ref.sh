#!/usr/bin/env bash
# run-ref.sh - regenerate every llama.cpp reference live (scripts/make-fixtures.sh)
# into a temporary folder and run the logits tests against it, so the committed
# fixtures can never drift from what llama.cpp actually computes.
#
#   tests/run-ref.sh BUILD_DIR
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-build}
cd "$ROOT"
TMP=$(mktemp -d /tmp/deltafin-ref-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
./scripts/make-fixtures.sh "$BUILD" "$TMP" > "$TMP/make.log"
# the committed fixtures must match the live ones bit for bit (same llama.cpp, same inputs)
stale=0
for f in tests/data/ref/*.tokens tests/data/ref/*.greedy tests/data/ref/*.sha256; do
    cmp -s "$f" "$TMP/$(basename "$f")" || { echo "stale fixture: $f"; stale=1; }
done
DELTAFIN_BUILD="$BUILD" DELTAFIN_REF_DIR="$TMP" "$BUILD/test_model"
rc=$?
if [ "$stale" -ne 0 ]; then echo "run scripts/make-fixtures.sh $BUILD tests/data/ref to refresh"; exit 1; fi
echo "1 passed, 0 failed"
exit $rc
