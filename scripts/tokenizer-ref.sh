#!/usr/bin/env bash
# tokenizer-ref.sh - recompute the expected ids of tests/data/tokenizer-ref.txt with the
# llama.cpp reference program (scripts/llama-ref.sh), in place.
#
#   scripts/tokenizer-ref.sh [--check] [BUILD_DIR [VOCAB...]]
#
# Why: the file's ids are llama.cpp's answers; after a llama.cpp upgrade, or to add cases
# (write a line with the input and no ids, then run this), they are recomputed here rather
# than by hand. For every case line (only those of the given VOCABs, if any) the input bytes
# go into a file and the last column becomes the output of
#   scripts/llama-ref.sh -m MODEL --vocab-only --cpu-variant haswell tokenize [--no-special] [--no-parse-special] FILE
# MODEL is .cache/llama/llama.cpp/models/ggml-vocab-VOCAB.gguf, the shared stories260K.gguf,
# or, for VOCAB mkmodel-PRE, the vocabulary BUILD_DIR/mkmodel writes with
#   --preset deepseek-v3-tiny --multilingual --vocab 1024 --pre PRE
# (as tests/test_tokenizer.c does). --check rewrites nothing and fails if an id differs.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CHECK=0
if [[ "${1:-}" == "--check" ]]; then CHECK=1; shift; fi
BUILD=${1:-build}
[[ $# -gt 0 ]] && shift
ONLY=" $* "
DATA=tests/data/tokenizer-ref.txt
SHARED=${DELTAFIN_SHARED:-$ROOT/../shared}
MKVOCAB_ARGS="--preset deepseek-v3-tiny --multilingual --vocab 1024 --pre"

TMP=$(mktemp -d /tmp/deltafin-tokref-XXXXXX)
trap 'rm -rf "$TMP"' EXIT

model() { # VOCAB -> path
    case "$1" in
    stories260K) echo "$SHARED/models/stories260K.gguf" ;;
    mkmodel-*)
        if [[ ! -f "$TMP/$1.gguf" ]]; then
            # shellcheck disable=SC2086
            "$BUILD/mkmodel" -o "$TMP/$1.gguf" $MKVOCAB_ARGS "${1#mkmodel-}" 2>/dev/null
        fi
        echo "$TMP/$1.gguf" ;;
    *) echo ".cache/llama/llama.cpp/models/ggml-vocab-$1.gguf" ;;
    esac
}

./scripts/llama-ref.sh build
n=0; changed=0
while IFS= read -r line || [[ -n "$line" ]]; do
    if [[ -z "$line" || "$line" == \#* ]]; then printf '%s\n' "$line"; continue; fi
    IFS=$'\t' read -r vocab add parse hex _ <<<"$line"
    if [[ "$ONLY" != "  " && "$ONLY" != *" $vocab "* ]]; then printf '%s\n' "$line"; continue; fi
    printf '%s' "$hex" | xxd -r -p >"$TMP/input"
    flags=()
    [[ "$add" == 0 ]] && flags+=(--no-special)
    [[ "$parse" == 0 ]] && flags+=(--no-parse-special)
    ids=$(./scripts/llama-ref.sh -m "$(model "$vocab")" --vocab-only --cpu-variant haswell tokenize "${flags[@]}" "$TMP/input" \
          2>"$TMP/err" | tr '\n' ' ' | sed 's/ $//') || { cat "$TMP/err" >&2; exit 1; }
    new=$(printf '%s\t%s\t%s\t%s\t%s' "$vocab" "$add" "$parse" "$hex" "$ids")
    n=$((n + 1))
    if [[ "$new" != "$line" ]]; then
        changed=$((changed + 1))
        [[ $CHECK == 1 ]] && echo "differs: $line" >&2
    fi
    printf '%s\n' "$new"
done <"$DATA" >"$TMP/out"
echo "tokenizer-ref.sh: $n cases, $changed changed" >&2
if [[ $CHECK == 1 ]]; then
    [[ $changed == 0 ]]
    exit
fi
cp "$TMP/out" "$DATA"
