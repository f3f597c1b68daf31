#!/usr/bin/env bash
# run-ref.sh - check the llama.cpp reference itself (tests/ref-variant.sh: it runs the CPU
# variant it is asked for), then regenerate every llama.cpp reference live
# (scripts/make-fixtures.sh) into a temporary folder and run the logits tests (test_model,
# and test_spec for the MTP block's guesses) against it,
# so the committed fixtures can never drift from what llama.cpp actually computes; the same
# for the chat templates' reference outputs (@huggingface/jinja, tests/jinja/make-fixtures.sh);
# last, the tokenizer cases of tests/data/tokenizer-ref.txt recomputed by llama.cpp
# (scripts/tokenizer-ref.sh --check), quantized models against their float truth
# (tests/truth.sh), and random configurations and dropped optional keys of every family
# (tests/sweep.sh).
#
#   tests/run-ref.sh BUILD_DIR
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-build}
cd "$ROOT"
TMP=$(mktemp -d /tmp/deltafin-ref-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
pass=0; failn=0
result() { if [ "$1" -eq 0 ]; then pass=$((pass + 1)); else failn=$((failn + 1)); echo "FAILED: $2"; fi; }

./tests/ref-variant.sh
result $? "tests/ref-variant.sh (the reference's CPU variant)"

if ./scripts/make-fixtures.sh "$BUILD" "$TMP" > "$TMP/make.log"; then
    echo "fixtures: $(sed -n 's/^fixture [^:]*: [0-9]* tokens, //p' "$TMP/make.log" | sort | uniq -c | sed 's/^ *//')"
    # the committed fixtures must match the live ones bit for bit (same llama.cpp, same
    # inputs, same CPU variant)
    stale=0
    for f in tests/data/ref/*.tokens tests/data/ref/*.greedy tests/data/ref/*.sha256 tests/data/ref/*.variant; do
        cmp -s "$f" "$TMP/$(basename "$f")" || { echo "stale fixture: $f"; stale=1; }
    done
    [ "$stale" -eq 0 ] || echo "run scripts/make-fixtures.sh $BUILD tests/data/ref to refresh"
    result $stale "committed fixtures match the live ones"
    DELTAFIN_BUILD="$BUILD" DELTAFIN_REF_DIR="$TMP" "$BUILD/test_model"
    result $? "test_model against the live references"
    DELTAFIN_BUILD="$BUILD" DELTAFIN_REF_DIR="$TMP" "$BUILD/test_spec" > "$TMP/spec.log" 2>&1
    rc=$?
    [ "$rc" -eq 0 ] || tail -20 "$TMP/spec.log"
    result $rc "test_spec (the MTP block's guesses) against the live references"
else
    cat "$TMP/make.log"
    result 1 "scripts/make-fixtures.sh"
fi
# Chat templates: Hugging Face's Jinja (npm @huggingface/jinja) renders every template and
# conversation live; the committed fixtures must be what it renders, and the engine must match it.
if ./tests/jinja/make-fixtures.sh "$TMP/jinja" > "$TMP/jinja.log" 2>&1; then
    diff -rq tests/data/jinja/expected "$TMP/jinja" > /dev/null ||
        echo "stale chat-template fixtures: run tests/jinja/make-fixtures.sh to refresh"
    diff -rq tests/data/jinja/expected "$TMP/jinja" > /dev/null
    result $? "committed chat-template fixtures match @huggingface/jinja"
    DELTAFIN_JINJA_REF_DIR="$TMP/jinja" "$BUILD/test_jinja" > "$TMP/jinja-test.log" 2>&1
    rc=$?; [ $rc -eq 0 ] || tail -20 "$TMP/jinja-test.log"
    result $rc "test_jinja against the live @huggingface/jinja outputs"
else
    cat "$TMP/jinja.log"
    result 1 "tests/jinja/make-fixtures.sh"
fi

./scripts/tokenizer-ref.sh --check "$BUILD"
result $? "scripts/tokenizer-ref.sh --check (tokenizer cases against llama.cpp, live)"

./tests/truth.sh "$BUILD"
result $? "tests/truth.sh (quantized models against their float truth)"

# Random configurations and dropped optional keys of every family against llama.cpp (issue 32; make test-sweep
# runs more of them)
./tests/sweep.sh "$BUILD" --seeds 3 --keys 3 --quant 1 > "$TMP/sweep.log" 2>&1
rc=$?
grep -E '^(FAIL|TIE|sweep:)|pooled|^truth:' "$TMP/sweep.log"
[ $rc -eq 0 ] || cat "$TMP/sweep.log"
result $rc "tests/sweep.sh (random configurations and optional keys against llama.cpp)"
# ... and once more with the kernel table capped at AVX2 (the path of an AVX2-only machine), on machines with more
if grep -qw avx512f /proc/cpuinfo 2> /dev/null; then
    DELTAFIN_ISA=avx2 ./tests/sweep.sh "$BUILD" --seeds 1 --keys 0 --quant 1 > "$TMP/sweep2.log" 2>&1
    rc=$?
    grep -E '^(FAIL|TIE|sweep:)|pooled|^truth:' "$TMP/sweep2.log"
    [ $rc -eq 0 ] || cat "$TMP/sweep2.log"
    result $rc "tests/sweep.sh at DELTAFIN_ISA=avx2"
fi
echo "$pass passed, $failn failed"
[ "$failn" -eq 0 ]
