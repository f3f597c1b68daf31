#!/usr/bin/env bash
# ref-variant.sh - the llama.cpp reference loads the CPU variant it is asked for, never a
# silent substitute (run by tests/run-ref.sh, i.e. `make test-ref`).
#
# Why: llama.cpp loads the best CPU backend variant for the processor by default, and on
# Intel machines with AMX that variant aborts on some of our models and computes wrong
# logits on others. ref/llama_ref.c pins the AVX2 "haswell" variant (armv8.0_1 on aarch64)
# for fidelity work and uses the user's default ("best") for bench; see requested_variant()
# there. This test checks, on whatever processor it runs:
#   - the default for logits/info is the pinned variant, whatever better one the CPU offers,
#     judged both by the library's name and by the ISA features compiled into it;
#   - $LLAMA_REF_CPU_VARIANT and --cpu-variant choose another one (the flag wins);
#   - bench names the variant it ran, and by default it is ggml's own choice;
#   - an unknown variant is an error, not a fallback;
#   - the feature check itself catches a library that is not what its name says (a
#     backend folder where "haswell" is really the x64 build): the check must fail there.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
REF=./scripts/llama-ref.sh
MODEL=${DELTAFIN_SHARED:-$ROOT/../shared}/models/stories260K.gguf
TMP=$(mktemp -d /tmp/deltafin-refvariant-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
$REF build
unset LLAMA_REF_CPU_VARIANT

case "$(uname -m)" in
    x86_64) PINNED=haswell; OTHERS="x64 sse42" ;;
    aarch64) PINNED=armv8.0_1; OTHERS="" ;;
    *) echo "ref-variant: no pinned variant for $(uname -m)"; exit 0 ;;
esac

field() { sed -n "s/^$1: //p" "$2"; }

# The features a variant's library must (+) and must not (-) have been compiled with.
expect_features() { # VARIANT FEATURES -> 0 if they fit
    local v=$1 f=" $2 "
    case "$v" in
        x64) [[ $f != *" SSE3 "* && $f != *" AVX2 "* ]] ;;
        sse42) [[ $f == *" SSSE3 "* && $f != *" AVX "* && $f != *" AVX2 "* ]] ;;
        haswell) [[ $f == *" AVX2 "* && $f == *" FMA "* && $f == *" F16C "* && $f != *" AVX512 "* \
                    && $f != *" AMX_INT8 "* ]] ;;
        armv8.0_1) [[ $f == *" NEON "* && $f != *" SVE "* && $f != *" MATMUL_INT8 "* ]] ;;
        *) return 0 ;;
    esac
}

check_info() { # WHAT WANT-VARIANT INFO-FILE
    local what=$1 want=$2 got features lib
    got=$(field "cpu variant" "$3"); features=$(field "cpu features" "$3"); lib=$(field "cpu library" "$3")
    [ "$got" = "$want" ] || { echo "$what: asked for $want, the reference reports $got"; return 1; }
    [ "$(basename "$lib")" = "libggml-cpu-$want.so" ] || { echo "$what: library $lib is not $want's"; return 1; }
    expect_features "$want" "$features" \
        || { echo "$what: $lib claims to be $want but was compiled for: $features"; return 1; }
    echo "ok   $what: $got ($features)"
}

# 1. the default for fidelity work is the pinned variant, whatever this CPU offers
$REF -m "$MODEL" info > "$TMP/default" || fail "info failed"
check_info "default" "$PINNED" "$TMP/default" || fail "the default variant is not the pinned one"
$REF -m "$MODEL" --cpu-variant best info > "$TMP/best" || fail "info --cpu-variant best failed"
best=$(field "cpu variant" "$TMP/best")
echo "info this CPU's best variant is $best ($(field "cpu features" "$TMP/best"))"

# logits and generate say which variant computed them
$REF -m "$MODEL" logits --tokens "1 2 3" --top 1 2> "$TMP/err" > /dev/null || fail "logits failed"
grep -qx "llama_ref: cpu variant $PINNED (.*)" "$TMP/err" || fail "logits did not report the pinned variant: $(cat "$TMP/err")"
echo "ok   logits reports: $(cat "$TMP/err")"

# 2. the environment and the flag choose others; the flag wins
for v in $OTHERS; do
    LLAMA_REF_CPU_VARIANT=$v $REF -m "$MODEL" info > "$TMP/$v" || fail "info with LLAMA_REF_CPU_VARIANT=$v failed"
    check_info "LLAMA_REF_CPU_VARIANT=$v" "$v" "$TMP/$v" || fail "the environment's variant was not loaded"
done
if [ -n "$OTHERS" ]; then
    LLAMA_REF_CPU_VARIANT=x64 $REF -m "$MODEL" --cpu-variant sse42 info > "$TMP/flag" || fail "info --cpu-variant failed"
    check_info "--cpu-variant over the environment" sse42 "$TMP/flag" || fail "--cpu-variant did not win"
fi

# 3. bench names its variant: by default the user's (ggml's best), else the one asked for
$REF -m "$MODEL" bench -p 4 -n 2 -r 1 > "$TMP/bench" || fail "bench failed"
grep -q "\"cpu_variant\":\"$best\"" "$TMP/bench" || fail "bench did not run (or name) the default variant $best: $(cat "$TMP/bench")"
echo "ok   bench by default: $best"
$REF -m "$MODEL" bench -p 4 -n 2 -r 1 --cpu-variant "$PINNED" > "$TMP/bench" || fail "bench --cpu-variant failed"
grep -q "\"cpu_variant\":\"$PINNED\"" "$TMP/bench" || fail "bench --cpu-variant $PINNED: $(cat "$TMP/bench")"
echo "ok   bench --cpu-variant $PINNED"

# 4. an unknown variant is an error that names it, not a silent fallback
if $REF -m "$MODEL" --cpu-variant no-such-cpu info > "$TMP/out" 2> "$TMP/err"; then
    fail "an unknown variant was accepted: $(cat "$TMP/out")"
fi
grep -q "could not load CPU variant 'no-such-cpu'" "$TMP/err" || fail "unclear error: $(cat "$TMP/err")"
echo "ok   unknown variant refused: $(head -1 "$TMP/err")"

# 5. negative control: a backend folder whose "$PINNED" library is really another build.
# The reference believes the name; the feature check above must not.
if [ -n "$OTHERS" ]; then
    LIB=$ROOT/.cache/llama/lib
    mkdir "$TMP/lib"
    for f in "$LIB"/libggml-cpu-*.so; do ln -s "$f" "$TMP/lib/"; done
    ln -sf "$LIB/libggml-cpu-x64.so" "$TMP/lib/libggml-cpu-$PINNED.so"
    LLAMA_REF_BACKEND_DIR=$TMP/lib $REF -m "$MODEL" info > "$TMP/fake" || fail "info with a substituted library failed"
    if check_info "substituted library" "$PINNED" "$TMP/fake" > "$TMP/msg"; then
        fail "the check did not notice an x64 library posing as $PINNED"
    fi
    echo "ok   a substituted library is caught: $(cat "$TMP/msg")"
fi
echo "ref-variant: all checks passed"
