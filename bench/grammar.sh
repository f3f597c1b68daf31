#!/usr/bin/env bash
# grammar.sh - what constrained sampling costs a token: Deltafin's grammar engine beside llama.cpp's, on the same
# grammar (llama.cpp's grammars/json.gbnf), the same 151,936-token vocabulary (Qwen2's, llama.cpp's
# models/ggml-vocab-qwen2.gguf) and the same prefixes (issue 35 item 1).
#
#   bench/grammar.sh [BUILD_DIR] [REPS]
#
# For each prefix (a value expected, inside a string, inside an array of numbers): Deltafin's full mask
# (bench/grammar.c: gram_mask) beside llama.cpp's llama_sampler_apply of its grammar sampler over the whole
# vocabulary (ref/llama_ref.c's grammar command, the haswell variant), both after the same prefix tokens, the
# tokens each allows (control tokens: llama.cpp lets their text into a string, Deltafin never), and Deltafin's
# whole sampling step without a grammar, with one the model complies with, and with one it does not (a mask and
# a second pick). Medians of REPS (default 20). Run on a quiet machine.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
B=${1:-build}
REPS=${2:-20}
V=.cache/llama/llama.cpp/models/ggml-vocab-qwen2.gguf
G=.cache/llama/llama.cpp/grammars/json.gbnf
[ -f "$V" ] || ./scripts/fetch-llama.sh > /dev/null
make -s -j2 all
cc -O2 -Iinclude $(printf -- '-I%s ' src/[a-z]*) bench/grammar.c "$B/libdeltafin-internal.a" \
    -lpcre2-8 -lutf8proc -luring -lcjson -lm -pthread -o "$B/grammar-bench"
T=$(mktemp -d /tmp/deltafin-grammar-bench-XXXXXX)
trap 'rm -rf "$T"' EXIT
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD), $(date -u +%F)"
printf '%-22s %10s %10s %7s %9s %9s %9s %9s %9s\n' prefix "df mask" "llama" ratio "df ok" "llama ok" "plain us" \
    "comply us" "refuse us"
for prefix in '{"name": ' '{"name": "Jo' '{"a": [1, 2'; do
    printf '%s' "$prefix" > "$T/p"
    ids=$("$B/deltafin" tokenize -m "$V" --no-bos -f "$T/p" 2> /dev/null | tr -s ' \n' ' ' | sed 's/ $//')
    d=$("$B/grammar-bench" "$V" "$G" "$ids" "$REPS")
    l=$(./scripts/llama-ref.sh -m "$V" --vocab-only grammar --grammar-file "$G" --tokens "$ids" -r "$REPS" 2> /dev/null)
    dm=$(jq .mask_ms <<< "$d"); lm=$(jq .apply_ms <<< "$l")
    printf '%-22s %8.2fms %8.2fms %6.2fx %9d %9d %9.1f %9.1f %9.1f\n' "$prefix" "$dm" "$lm" \
        "$(awk -v a="$lm" -v b="$dm" 'BEGIN { print a / b }')" "$(jq .allowed <<< "$d")" "$(jq .allowed <<< "$l")" \
        "$(jq .plain_us <<< "$d")" "$(jq .comply_us <<< "$d")" "$(jq .refuse_us <<< "$d")"
done
echo "(ratio: llama.cpp's time / Deltafin's; the first grammar of a model also sorts its vocabulary:" \
     "$(jq .first_grammar_ms <<< "$d") ms)"
