#!/usr/bin/env bash
# make-fixtures.sh - produce llama.cpp reference outputs for every model in
# tests/data/ref/models.txt.
#
#   scripts/make-fixtures.sh BUILD_DIR OUT_DIR
#
# For each NAME it writes into OUT_DIR:
#   NAME.tokens   the prompt token ids (one line, space separated)
#   NAME.logits   llama.cpp's float32 logits for every position (positions x n_vocab)
#   NAME.greedy   llama.cpp's 200 (stories260K) or 32 greedy continuation ids, one per line
#   NAME.sha256   checksum of the model file, so a stale fixture is recognised
#   NAME.variant  the llama.cpp CPU variant that computed them (ref/llama_ref.c pins the AVX2
#                 "haswell" variant for fidelity; $LLAMA_REF_CPU_VARIANT overrides it)
# The NextN/MTP fixtures (tests/test_spec.c) are listed below the loop: NAME.mtp holds the
# float32 logits of the model's MTP block for the pending token after the prompt
# (llama_ref mtp), NAME.tokens the prompt and the pending token, NAME.sha256 the model's.
# Models from mkmodel are written to a temporary folder and removed afterwards
# (mkmodel rebuilds them bit for bit from the same arguments).
# FIXTURES_ONLY=REGEX (an extended regex on NAME) remakes only those fixtures.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:?usage: make-fixtures.sh BUILD_DIR OUT_DIR}
OUT=${2:?usage: make-fixtures.sh BUILD_DIR OUT_DIR}
SHARED=${DELTAFIN_SHARED:-$ROOT/../shared}
REF="$ROOT/scripts/llama-ref.sh"
MODELS=$(mktemp -d /tmp/deltafin-fixture-models-XXXXXX)
trap 'rm -rf "$MODELS"' EXIT
mkdir -p "$OUT"

# deterministic pseudo-random ids in [1, vocab): an LCG, the same in tests/test_model.c's docs
random_tokens() { # N VOCAB BOS
    local n=$1 v=$2 x=12345 out="$3"
    for ((i = 0; i < n; i++)); do
        x=$(( (x * 1103515245 + 12345) % 2147483648 ))
        out+=" $(( 1 + (x / 65536) % (v - 3) ))"
    done
    echo "$out"
}

grep -v '^#' "$ROOT/tests/data/ref/models.txt" | while IFS='|' read -r name src prompt; do
    name=$(echo "$name" | xargs); src=$(echo "$src" | sed 's/^ *//; s/ *$//'); prompt=$(echo "$prompt" | sed 's/^ *//')
    [ -n "$name" ] || continue
    [ -z "${FIXTURES_ONLY:-}" ] || [[ "$name" =~ ^(${FIXTURES_ONLY})$ ]] || continue
    case "$src" in
        shared:*) model="$SHARED/models/${src#shared:}" ;;
        mkmodel:*) model="$MODELS/$name.gguf"; "$BUILD/mkmodel" -o "$model" ${src#mkmodel:} 2>/dev/null ;;
        *) echo "bad source for $name" >&2; exit 1 ;;
    esac
    case "$prompt" in
        text:*) printf '%s' "${prompt#text:}" > "$OUT/$name.txt"
                toks=$("$REF" -m "$model" --vocab-only tokenize "$OUT/$name.txt" 2> >(grep -v '^llama_ref: cpu variant ' >&2 || true) | tr '\n' ' ' | sed 's/ *$//')
                ngen=200 ;;
        random:*) vocab=$("$BUILD/deltafin" info -m "$model" | sed -n 's/^tokenizer:.*, \([0-9]*\) tokens,.*/\1/p')
                  bos=$((vocab - 2))
                  toks=$(random_tokens "${prompt#random:}" "$vocab" "$bos" | sed 's/^ *//')
                  ngen=32 ;;
    esac
    echo "$toks" > "$OUT/$name.tokens"
    "$REF" -m "$model" logits --tokens "$toks" --out "$OUT/$name.logits" --top 1 2> "$MODELS/stderr" > /dev/null \
        || { cat "$MODELS/stderr" >&2; exit 1; }
    grep '^llama_ref: cpu variant ' "$MODELS/stderr" | sed 's/^llama_ref: //' > "$OUT/$name.variant"
    [ -s "$OUT/$name.variant" ] || { echo "the reference did not say which CPU variant it ran" >&2; exit 1; }
    "$REF" -m "$model" generate --tokens "$toks" -n "$ngen" 2> "$MODELS/stderr" > "$OUT/$name.greedy" \
        || { cat "$MODELS/stderr" >&2; exit 1; }
    grep -qxF "llama_ref: $(cat "$OUT/$name.variant")" "$MODELS/stderr" \
        || { echo "logits and greedy of $name came from different CPU variants" >&2; exit 1; }
    sha256sum "$model" | cut -d' ' -f1 > "$OUT/$name.sha256"
    echo "fixture $name: $(wc -w < "$OUT/$name.tokens") tokens, $(cat "$OUT/$name.variant")"
done

# NextN/MTP: the block's first guess after a prompt (tests/test_spec.c, test_mtp_llama)
while IFS='|' read -r name args toks; do
    [ -z "${FIXTURES_ONLY:-}" ] || [[ "$name" =~ ^(${FIXTURES_ONLY})$ ]] || continue
    model="$MODELS/$name.gguf"
    "$BUILD/mkmodel" -o "$model" $args 2>/dev/null
    echo "$toks" > "$OUT/$name.tokens"
    "$REF" -m "$model" mtp --tokens "$toks" --out "$OUT/$name.mtp" --top 1 2> "$MODELS/stderr" > /dev/null \
        || { cat "$MODELS/stderr" >&2; exit 1; }
    sha256sum "$model" | cut -d' ' -f1 > "$OUT/$name.sha256"
    echo "fixture $name: MTP logits after $(wc -w < "$OUT/$name.tokens") tokens"
done <<'LIST'
glm4moe-mtp-f32|--preset glm4moe-tiny --type f32|1 8 15 22 1 8 15 22 5
deepseek-v3-mtp-f32|--preset deepseek-v3-tiny --nextn 1 --type f32|1 8 15 22 1 8 15 22 5
LIST
