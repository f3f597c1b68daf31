#!/usr/bin/env bash
# messages.sh - the CLI says what is wrong, accepts what it should, and never
# loses output silently.
#   tests/cli/messages.sh BUILD_DIR
# Covers the hardening issue's items 3 (session error path), 6 (no spurious
# limits), 7 (write errors), 11 (messages), 13 (prompts from files) and 14
# (vocabulary-only GGUF files).
set -u
B=${1:-build}
D="$B/deltafin"
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
V=${DELTAFIN_LLAMA_DIR:-.cache/llama}/llama.cpp/models
T=$(mktemp -d /tmp/deltafin-msg-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
err() { "$D" "$@" 2>&1 >/dev/null; echo "rc=$?"; }   # stderr and the exit status
"$B/mkmodel" -o "$T/moe.gguf" --preset qwen3moe-tiny --type q8_0 2>/dev/null || { echo "mkmodel failed"; exit 1; }
"$B/mkmodel" -o "$T/bpe.gguf" --arch qwen3 --type q8_0 2>/dev/null || { echo "mkmodel failed"; exit 1; }

# 11. messages
e=$(err run -m "$S" -p hi stray);                 check "stray argument: named as such" contains "$e" "unexpected argument 'stray'"
check "stray argument: exit 2" contains "$e" "rc=2"
e=$(err run -m "$S" -p hi --frobnicate);          check "unknown option: named as such" contains "$e" "unknown option '--frobnicate'"
out=$("$D" run -m "$S" -p hi --n-predict=4 --temp=0 2>/dev/null); rc=$?
check "--n-predict=4 (the = form) is understood" test "$rc" -eq 0
a=$("$D" run -m "$S" -p hi -n 4 --temp 0 2>/dev/null)
check "--n-predict=4 means -n 4" test "$out" = "$a"
"$D" --help > "$T/help" 2>/dev/null; rc=$?
check "--help exits 0" test "$rc" -eq 0
check "--help prints the usage on stdout" grep -q "usage: deltafin" "$T/help"
"$D" run --help > /dev/null 2>&1; check "run --help exits 0" test $? -eq 0
# every command answers --help with its own usage, exit 0 (issue 37)
for c in run plan info tokenize logits bench models pull config serve chat submit jobs job cancel requeue worker; do
    h=$("$D" $c --help 2>&1); rc=$?
    check "$c --help: exit 0 ($rc)" test "$rc" -eq 0
    check "... its own usage, naming '$c'" bash -c "head -n 3 <<< \"\$1\" | grep -qw -- '$c'" _ "$h"
done
check "run --help is run's, not the whole list" bash -c "! \"\$1\" run --help | grep -q '^  serve'" _ "$D"
e=$(err run -m "$S");                             check "run without a prompt says so" contains "$e" "run needs a prompt"
check "run without a prompt: exit 2" contains "$e" "rc=2"
e=$(err run -m "$T/moe.gguf" -p hi --mem 1K);      check "--mem 1K is reported as 1.0 KiB" contains "$e" "a budget of 1.0 KiB"
check "--mem 1K: not 0 MiB" lacks "$e" " 0 MiB"
for bad in "--top-p 2" "--min-p 5" "--repeat-penalty 0" "--temp inf" "--temp nan" "--temp -1" "--top-p=-0.5"; do
    # shellcheck disable=SC2086
    e=$(err run -m "$S" -p hi $bad);               check "$bad is refused (exit 2)" contains "$e" "rc=2"
done
e=$(DELTAFIN_ISA=avx9000 "$D" run -m "$S" -p hi -n 1 2>&1 >/dev/null; echo "rc=$?")
check "unknown DELTAFIN_ISA is refused" contains "$e" "DELTAFIN_ISA='avx9000'"
check "unknown DELTAFIN_ISA: exit 2" contains "$e" "rc=2"
e=$(DELTAFIN_ISA=scalar "$D" run -m "$S" -p hi -n 1 2>&1 >/dev/null; echo "rc=$?")
check "DELTAFIN_ISA=scalar is accepted" contains "$e" "rc=0"
e=$(DELTAFIN_AMX=tiles "$D" run -m "$S" -p hi -n 1 2>&1 >/dev/null; echo "rc=$?")
check "unknown DELTAFIN_AMX is refused (exit 2)" contains "$e" "DELTAFIN_AMX='tiles'"
check "unknown DELTAFIN_AMX: exit 2" contains "$e" "rc=2"
e=$(err run -m "$S" -p hi -n 1 -c 4096);          check "-c beyond the trained context: a warning" contains "$e" "beyond the model's trained context of 2048"
e=$(err run -m "$S" -p hi -n 1 -c 1024);          check "-c within the trained context: no warning" lacks "$e" "warning"
e=$(err info -m "$S" --mem 64M);                  check "--mem where it means nothing: refused" contains "$e" "rc=2"
if [ -f "$V/ggml-vocab-llama-spm.gguf" ]; then
    # a malformed file (no tensors at all) under a budget: its defect first, not "budget too small"
    e=$(err run -m "$V/ggml-vocab-llama-spm.gguf" -p hi --mem 1K)
    check "--mem with a model without tensors: the real defect" contains "$e" "missing tensor 'token_embd.weight'"
    # 10. plan approves only what run can run
    out=$("$D" plan -m "$V/ggml-vocab-llama-spm.gguf" --mem 64M --probe-seconds 0.1 2>&1; echo "rc=$?")
    check "plan of a model without tensors: an error (exit 1)" contains "$out" "rc=1"
    check "plan of a model without tensors: no prediction" lacks "$out" "predicted"
fi

# 3. the session constructor's error path (out of memory) reports the context it was asked for
if [ -z "${DELTAFIN_SANITIZED:-}" ]; then # ASan reserves terabytes of address space: no ulimit -v there
    e=$( (ulimit -v 700000; "$D" run -m "$S" -p hi -n 1 -c 16000000) 2>&1 >/dev/null)
else # ...but it can fail large allocations, and then sees a use after free itself
    e=$(ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1:max_allocation_size_mb=256" \
        "$D" run -m "$S" -p hi -n 1 -c 16000000 2>&1 >/dev/null)
fi
check "session out of memory: the right context in the message" contains "$e" "a session of 16000000 tokens"
check "session out of memory: no use after free" lacks "$e" "use-after-free"

# 6. no spurious limits without --mem
"$D" bench -m "$S" -p 513 -n 2 -r 1 > "$T/bench" 2> "$T/bench.err"; rc=$?
check "bench -p 513 runs" test "$rc" -eq 0
check "bench -p 513 reports pp513" grep -q "pp513" "$T/bench"
toks=$(seq 1 2100 | awk '{ printf "%d ", ($1 * 7) % 500 + 3 }')
"$D" logits -m "$S" --tokens "$toks" --top 1 > "$T/l.txt" 2> "$T/l.err"; rc=$?
check "logits with more tokens than the default context (2048): runs" test "$rc" -eq 0
check "logits: one line per token" test "$(wc -l < "$T/l.txt")" -eq 2100
check "logits: no memory plan was asked for, none is mentioned" lacks "$(cat "$T/l.err")" "plan"
"$D" logits -m "$S" --tokens "${toks:0:3000}" --top 2 > "$T/l1.txt" 2>/dev/null
"$D" logits -m "$S" --tokens "${toks:0:3000}" --top 2 --mem 256M > "$T/l2.txt" 2>/dev/null; rc=$?
check "logits --mem with 700 tokens runs" test "$rc" -eq 0
check "logits --mem gives the same logits" cmp -s "$T/l1.txt" "$T/l2.txt"
"$D" bench -m "$T/moe.gguf" -p 513 -n 2 -r 1 --mem 128M > /dev/null 2>&1
check "bench -p 513 --mem runs" test $? -eq 0

# 7. output that cannot be written is an error
e=$("$D" run -m "$S" -p hi -n 8 --temp 0 2>&1 > /dev/full; echo "rc=$?")
check "run > /dev/full: exit 1" contains "$e" "rc=1"
check "run > /dev/full: says so" contains "$e" "writing the output failed"
for cmd in "info -m $S" "tokenize -m $S -p hello" "logits -m $S --tokens 1"; do
    # shellcheck disable=SC2086
    e=$("$D" $cmd 2>&1 > /dev/full; echo "rc=$?");  check "${cmd%% *} > /dev/full: exit 1" contains "$e" "rc=1"
done
e=$(err run -m "$T/moe.gguf" -p hi -n 64 --ignore-eos --trace-experts /dev/full)
check "--trace-experts /dev/full: exit 1" contains "$e" "rc=1"
check "--trace-experts /dev/full: says so" contains "$e" "expert trace"
e=$(err logits -m "$S" --tokens "1 2 3" --out /dev/full); check "logits --out /dev/full: exit 1" contains "$e" "rc=1"

# 13. prompts from a file or stdin, with any bytes
printf 'Once upon a time' > "$T/p.txt"
want=$("$D" tokenize -m "$S" -p "Once upon a time" | tr '\n' ' ')
check "-f FILE" test "$("$D" tokenize -m "$S" -f "$T/p.txt" 2>&1 | tr '\n' ' ')" = "$want"
check "--file FILE" test "$("$D" tokenize -m "$S" --file "$T/p.txt" 2>&1 | tr '\n' ' ')" = "$want"
check "-f - (stdin)" test "$(printf 'Once upon a time' | "$D" tokenize -m "$S" -f - 2>&1 | tr '\n' ' ')" = "$want"
printf 'a\0b' > "$T/nul.txt"
check "-f FILE keeps NUL bytes (a, <0x00> = token 3, b)" test "$("$D" tokenize -m "$S" -f "$T/nul.txt" --no-bos 2>&1 | tr '\n' ' ')" = "261 3 430 "
head -c 300000 /dev/zero | tr '\0' a > "$T/big.txt"
n=$("$D" tokenize -m "$S" -f "$T/big.txt" 2>/dev/null | wc -l)
check "-f with a 300 KB prompt (beyond the argument limit)" test "$n" -gt 1000
out=$("$D" run -m "$S" -f "$T/p.txt" -n 8 --temp 0 2>/dev/null)
check "run -f FILE echoes and continues the prompt" contains "$out" "Once upon a time, there was"
out=$(printf 'Once upon a time' | "$D" run -m "$S" -f - -n 8 --temp 0 2>/dev/null)
check "run -f - reads the prompt from stdin, echoes and continues it" contains "$out" "Once upon a time, there was"
e=$(err logits -m "$S" -f "$T/big.txt" --mem 1M); check "-f under --mem: a prompt file beyond a quarter of the budget is refused" contains "$e" "larger than"
e=$(err run -m "$S" -p hi -f "$T/p.txt");          check "-p and -f together: refused" contains "$e" "rc=2"
e=$(err run -m "$S" -f "$T/missing.txt");          check "-f MISSING: says so" contains "$e" "missing.txt: No such file"
# 13. the overlong NUL (C0 80) is malformed UTF-8, not a NUL token (byte-level BPE model)
printf 'a\xc0\x80b' > "$T/ol.txt"; printf 'a\xef\xbf\xbd\xef\xbf\xbdb' > "$T/fffd.txt"; printf 'a\0b' > "$T/nulb.txt"
ol=$("$D" tokenize -m "$T/bpe.gguf" -f "$T/ol.txt" 2>&1 | tr '\n' ' ')
check "C0 80 tokenizes as two malformed bytes (U+FFFD each)" test "$ol" = "$("$D" tokenize -m "$T/bpe.gguf" -f "$T/fffd.txt" | tr '\n' ' ')"
check "C0 80 is not the NUL token" test "$ol" != "$("$D" tokenize -m "$T/bpe.gguf" -f "$T/nulb.txt" | tr '\n' ' ')"

# 14. vocabulary-only GGUF files (llama.cpp's ggml-vocab-*.gguf): tokenize and info work
if [ -f "$V/ggml-vocab-llama-bpe.gguf" ]; then
    out=$("$D" tokenize -m "$V/ggml-vocab-llama-bpe.gguf" -p "Hello world" 2>&1 | tr '\n' ' ')
    check "tokenize a vocabulary-only file (llama-bpe)" test "$out" = "128000 9906 1917 "
    out=$("$D" tokenize -m "$V/ggml-vocab-gpt-2.gguf" -p "Hello world" 2>&1 | tr '\n' ' ')
    check "tokenize a vocabulary-only file of another architecture (gpt-2)" test "$out" = "15496 995 "
    out=$("$D" info -m "$V/ggml-vocab-llama-spm.gguf" 2>&1); rc=$?
    check "info on a vocabulary-only file" test "$rc" -eq 0
    check "info shows its tokenizer" contains "$out" "32000 tokens"
    e=$(err run -m "$V/ggml-vocab-llama-spm.gguf" -p hi); check "run on it names what is missing" contains "$e" "missing tensor 'token_embd.weight'"
else
    echo "skip vocabulary-only files: $V not fetched (scripts/llama-ref.sh)"
fi
e=$("$D" logits -m "$S" --tokens "1 -5" 2>&1 >/dev/null; echo "rc=$?")
check "logits --tokens with a negative id: a usage error (exit 2)" contains "$e" "rc=2"
finish
