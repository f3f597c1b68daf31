#!/usr/bin/env bash
# llama-ref.sh - run the llama.cpp reference program, fetching and building it first if needed.
#
# Why: tests call `scripts/llama-ref.sh -m MODEL logits --tokens "1 2 3" ...` without caring
# whether llama.cpp has been downloaded or the program built yet. The first call runs
# scripts/fetch-llama.sh and scripts/build-llama-ref.sh (a few seconds, needs npm and the
# npm registry); later calls only check timestamps and exec .cache/llama/llama_ref.
# Quiet on success: fetch/build output goes to .cache/llama/setup.log and is printed only
# if something fails. All arguments are passed through; see docs/reference.md.
# `llama-ref.sh build` only fetches and builds (used by `make test-ref`).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE="$ROOT/.cache/llama"
BIN="$CACHE/llama_ref"
LOG="$CACHE/setup.log"

mkdir -p "$CACHE"
if ! { "$ROOT/scripts/build-llama-ref.sh" >"$LOG" 2>&1; }; then
    echo "llama-ref.sh: setting up the llama.cpp reference failed; log ($LOG):" >&2
    cat "$LOG" >&2
    exit 1
fi
if [[ $# -eq 1 && "$1" == "build" ]]; then
    exit 0
fi
exec "$BIN" "$@"
