#!/usr/bin/env bash
# build-llama-ref.sh - build the llama.cpp reference program ref/llama_ref.c into
# .cache/llama/llama_ref (fetching the pinned llama.cpp first via scripts/fetch-llama.sh).
#
# Why: tests and benchmarks compare Deltafin against llama.cpp through this one small C
# program; see docs/reference.md. It links the prebuilt libraries in .cache/llama/lib by
# their SONAMEs (libllama.v0.4.0.so, libggml.v0.4.0.so, libggml-base.so) with an
# RUNPATH of $ORIGIN/lib, so the binary runs from anywhere without LD_LIBRARY_PATH.
# Skips the build when the binary is newer than its inputs. -f forces a rebuild.
# Uses $CC (default cc); one compiler process, no parallel jobs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE="$ROOT/.cache/llama"
SRC="$ROOT/ref/llama_ref.c"
BIN="$CACHE/llama_ref"
CC=${CC:-cc}
FORCE=0
[[ "${1:-}" == "-f" ]] && FORCE=1

"$ROOT/scripts/fetch-llama.sh"

if [[ $FORCE == 0 && -x "$BIN" && "$BIN" -nt "$SRC" && "$BIN" -nt "${BASH_SOURCE[0]}" \
      && "$BIN" -nt "$CACHE/.fetch-stamp" ]]; then
    exit 0
fi

exec 9>"$CACHE/.build.lock"
if command -v flock >/dev/null 2>&1; then flock 9; fi
if [[ $FORCE == 0 && -x "$BIN" && "$BIN" -nt "$SRC" && "$BIN" -nt "${BASH_SOURCE[0]}" \
      && "$BIN" -nt "$CACHE/.fetch-stamp" ]]; then
    exit 0   # built by someone else while we waited
fi

command -v "$CC" >/dev/null 2>&1 || { echo "build-llama-ref.sh: error: C compiler '$CC' not found" >&2; exit 1; }

LIB="$CACHE/lib"
TMP="$BIN.tmp.$$"
trap 'rm -f "$TMP"' EXIT
# llama.cpp's headers are included as system headers so that -Werror applies to our code only.
"$CC" -std=c11 -O2 -g -Wall -Wextra -Werror \
    -isystem "$CACHE/llama.cpp/include" -isystem "$CACHE/llama.cpp/ggml/include" \
    -o "$TMP" "$SRC" \
    -L"$LIB" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so -ldl -lm \
    -Wl,-rpath,'$ORIGIN/lib' -Wl,--enable-new-dtags
mv -f "$TMP" "$BIN"
echo "build-llama-ref.sh: built $BIN" >&2
