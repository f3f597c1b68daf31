#!/usr/bin/env bash
# python.sh - the Python bindings (python/deltafin, ctypes over libdeltafin.so) under pytest
# (python/tests; issue 36 item 2): structures as the header has them, generation identical to
# `run --temp 0`, plan, errors as exceptions with the library's status, sessions in threads, no
# leak over 1,000 sessions.
#   tests/cli/python.sh BUILD_DIR
set -uo pipefail
B=${1:-build}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3 || true)
[ -n "$PY" ] && "$PY" -c 'import pytest' 2> /dev/null || { echo "SKIPPED: python3 with pytest not found"; exit 0; }
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
# a sanitized library needs its runtime loaded before python: the bindings are tested on the optimized build
[ "$B" = build ] || { echo "SKIPPED: the bindings are tested on build/ (this is $B)"; exit 0; }
DELTAFIN_LIB="$B/libdeltafin.so.0" DELTAFIN_BIN="$B/deltafin" DELTAFIN_MODEL="$S" PYTHONPATH=python \
    "$PY" -m pytest -q -p no:cacheprovider python/tests 2>&1 | tail -n 20
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi
exit "$rc"
