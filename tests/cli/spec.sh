#!/usr/bin/env bash
# spec.sh - `deltafin run --prompt-cache` and speculative decoding from the CLI.
#   tests/cli/spec.sh BUILD_DIR
# A second run with the same prompt evaluates one prompt token (the rest comes
# from the cache) and prints the same text; a cache of another model or a
# damaged one is refused with a message and ignored. Greedy output with
# --spec lookup, with a draft model (-md), and under --mem is the plain
# output; a draft with another vocabulary is refused; recurrent models
# (kimi-linear, qwen3next) speculate too, rolling rejected guesses back, with
# lookup, with a recurrent draft and under --mem, and their output is the
# plain output. --spec mtp (the model's own NextN block: glm4moe-tiny,
# deepseek-v3-tiny --nextn 1) prints the plain text, in memory and under a
# --mem that streams experts (and for deepseek its dense layers), and a file
# without the block is refused saying so. On models whose next token the
# block can foresee (mkmodel --chain) it guesses right: 95% or more of its
# guesses are kept, at a fixed k and adaptively, in memory and under --mem
# (random weights never reach the path that keeps a guess).
set -u
B=${1:-build}
D="$B/deltafin"
T=$(mktemp -d /tmp/deltafin-spec-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
mk() { "$B/mkmodel" -o "$T/$1.gguf" "${@:2}" 2>/dev/null || { echo "mkmodel $1 failed"; exit 1; }; }
mk dense --arch llama --type f32 --seed 3
mk other --arch llama --type f32 --seed 4
mk vocab --arch llama --type f32 --vocab 400
mk moe --preset qwen3moe-tiny --type q8_0
mk kimi --preset kimi-linear-tiny --type q8_0
mk kimi4 --preset kimi-linear-tiny --type q4_0
mk qnext --preset qwen3next-tiny --type q8_0
mk glm --preset glm4moe-tiny --type q8_0
mk ds3n --preset deepseek-v3-tiny --nextn 1 --type q8_0
mk glmc --preset glm4moe-tiny --type q8_0 --chain
mk ds3c --preset deepseek-v3-tiny --nextn 1 --type q4_K --chain
P="the cat sat on the mat and the cat sat on the mat and the dog sat on the log and the cat"
run() { "$D" run -p "$P" -n 48 --temp 0 --hot none "$@"; }

# prompt cache: created, then reused; same text as without a cache
n=$("$D" tokenize -m "$T/dense.gguf" -p "$P" | wc -w)
run -m "$T/dense.gguf" > "$T/plain" 2>/dev/null
run -m "$T/dense.gguf" --prompt-cache "$T/pc" > "$T/o1" 2> "$T/e1"; rc1=$?
run -m "$T/dense.gguf" --prompt-cache "$T/pc" > "$T/o2" 2> "$T/e2"; rc2=$?
check "cache: runs succeed" test "$rc1$rc2" = 00
check "cache: first run reuses nothing" grep -q "prompt cache: 0 of" "$T/e1"
check "cache: second run evaluates one prompt token" grep -qE "^prompt: +1 tokens" "$T/e2"
check "cache: second run reuses the rest" grep -q "prompt cache: $((n - 1)) of $n" "$T/e2"
check "cache: same output both runs" cmp -s "$T/o1" "$T/o2"
check "cache: same output as without a cache" cmp -s "$T/plain" "$T/o1"
# a longer prompt that shares the cached one's start
"$D" run -m "$T/dense.gguf" -p "$P and more" -n 4 --temp 0 --hot none --prompt-cache "$T/pc" > /dev/null 2> "$T/e3"
check "cache: a longer prompt reuses the shared prefix" grep -q "prompt cache: $((n - 1)) of" "$T/e3"
# another model's cache: refused, ignored, the run's output is that model's own
run -m "$T/other.gguf" > "$T/oplain" 2>/dev/null
cp "$T/pc" "$T/pc-other"
run -m "$T/other.gguf" --prompt-cache "$T/pc-other" > "$T/o4" 2> "$T/e4"; rc=$?
check "cache: another model's cache refused" grep -q "prompt cache refused, ignoring it: .*another model" "$T/e4"
check "cache: ...and ignored" test "$rc" -eq 0
check "cache: ...the output is the model's own" cmp -s "$T/oplain" "$T/o4"
# a damaged cache
cp "$T/pc" "$T/pc-bad"
printf 'X' | dd of="$T/pc-bad" bs=1 seek=200 conv=notrunc status=none
run -m "$T/dense.gguf" --prompt-cache "$T/pc-bad" > "$T/o5" 2> "$T/e5"; rc=$?
check "cache: a damaged cache refused" grep -q "prompt cache refused, ignoring it: .*damaged" "$T/e5"
check "cache: ...and ignored" test "$rc" -eq 0
check "cache: ...same output" cmp -s "$T/plain" "$T/o5"

# speculative decoding: greedy output is the plain output
run -m "$T/dense.gguf" --spec lookup > "$T/s1" 2> "$T/f1"
check "lookup: same output" cmp -s "$T/plain" "$T/s1"
check "lookup: the report says what it chose and why" grep -q "speculation: why: " "$T/f1"
run -m "$T/dense.gguf" --spec lookup --spec-k 3 > "$T/s2" 2> "$T/f2"
check "lookup k=3: same output" cmp -s "$T/plain" "$T/s2"
check "lookup k=3: guesses kept" grep -qE "speculation: prompt lookup, k=3 \(fixed, at most 4\): [1-9]" "$T/f2"
run -m "$T/dense.gguf" -md "$T/dense.gguf" --spec-k 4 > "$T/s3" 2> "$T/f3"
check "draft (itself): same output" cmp -s "$T/plain" "$T/s3"
run -m "$T/dense.gguf" -md "$T/other.gguf" > "$T/s4" 2>/dev/null
check "draft (another model): same output" cmp -s "$T/plain" "$T/s4"
run -m "$T/dense.gguf" -md "$T/vocab.gguf" > /dev/null 2> "$T/f5"; rc=$?
check "draft with another vocabulary: refused" test "$rc" -eq 1
check "...saying why" grep -q "vocabulary" "$T/f5"
run -m "$T/moe.gguf" > "$T/mplain" 2>/dev/null
run -m "$T/moe.gguf" --spec lookup --spec-k 2 --mem 64M > "$T/s6" 2> "$T/f6"
check "lookup under --mem (MoE): same output" cmp -s "$T/mplain" "$T/s6"
run -m "$T/kimi.gguf" > "$T/kplain" 2>/dev/null
run -m "$T/kimi.gguf" --spec lookup --spec-k 4 > "$T/s7" 2> "$T/f7"
check "recurrent: same output" cmp -s "$T/kplain" "$T/s7"
check "recurrent: speculation on (not off for the recurrent layers)" grep -q "speculation: why: k fixed at 4" "$T/f7"
run -m "$T/kimi.gguf" -md "$T/kimi4.gguf" --spec-k 3 > "$T/s7d" 2> "$T/f7d"
check "recurrent draft (its q4_0 twin): same output" cmp -s "$T/kplain" "$T/s7d"
check "...guesses kept and rejected" \
    awk '/^speculation: draft model/ { for (i = 1; i <= NF; i++) if ($i == "of") { k = $(i-1); g = $(i+1) } }
         END { exit !(k > 0 && g > k) }' "$T/f7d"
run -m "$T/qnext.gguf" > "$T/qplain" 2>/dev/null
run -m "$T/qnext.gguf" --spec lookup --spec-k 2 --mem 64M > "$T/s7q" 2> "$T/f7q"
check "recurrent under --mem (qwen3next): same output" cmp -s "$T/qplain" "$T/s7q"
# the draft inside --mem: its share is said and taken from the model's budget
run -m "$T/moe.gguf" -md "$T/moe.gguf" --spec-k 2 --mem 80M > "$T/s8" 2> "$T/f8"
dshare=$(sed -n 's/^draft: \(.*\) of --mem .*/\1/p' "$T/f8")
check "draft under --mem: same output" cmp -s "$T/mplain" "$T/s8"
check "draft under --mem: its share said ($dshare)" test -n "$dshare"
pb=$(sed -n 's/^plan: budget \([0-9.]*\) MiB:.*/\1/p' "$T/f8")
check "draft under --mem: the model is planned with 80 MiB less the draft's share ($pb MiB)" \
    awk -v b="$pb" -v d="${dshare% MiB}" 'BEGIN { x = 80 - d - b; exit !(b > 0 && x < 0.15 && x > -0.15) }'
run -m "$T/moe.gguf" -md "$T/moe.gguf" --mem 1M > /dev/null 2> "$T/f9"; rc=$?
check "a --mem the draft alone fills: refused (exit 1), saying so" test "$rc" -eq 1
check "...saying so" grep -q "the draft model alone needs" "$T/f9"
# the model's own MTP block
for f in glm ds3n; do
    run -m "$T/$f.gguf" > "$T/${f}plain" 2>/dev/null
    run -m "$T/$f.gguf" --spec mtp > "$T/${f}s1" 2> "$T/${f}f1"
    check "mtp ($f): same output" cmp -s "$T/${f}plain" "$T/${f}s1"
    check "mtp ($f): the report names the MTP block" grep -q "speculation: MTP block" "$T/${f}f1"
    run -m "$T/$f.gguf" --spec mtp --spec-k 3 --mem 40M > "$T/${f}s2" 2> "$T/${f}f2"
    check "mtp ($f) k=3 under --mem: same output" cmp -s "$T/${f}plain" "$T/${f}s2"
    check "mtp ($f) k=3 under --mem: guesses made" \
        grep -qE "speculation: MTP block, k=3 \(fixed, at most 4\): [0-9]+ of [1-9][0-9]* guesses" "$T/${f}f2"
done
# random weights: the block's guesses fail, so the adaptive choice stops it (and its upkeep) for the session
"$D" run -m "$T/glm.gguf" -p "$P" -n 200 --temp 0 --hot none --ignore-eos > "$T/glmlong" 2>/dev/null
"$D" run -m "$T/glm.gguf" -p "$P" -n 200 --temp 0 --hot none --ignore-eos --spec mtp > "$T/glmlongs" 2> "$T/glmlongf"
check "mtp (glm, 200 tokens): same output" cmp -s "$T/glmlong" "$T/glmlongs"
check "mtp (glm, 200 tokens): a block whose guesses fail is stopped, saying so" \
    grep -q "speculation: why: the MTP block's guesses were kept 0 of [0-9]* times: it is stopped" "$T/glmlongf"
# a block that foresees the text (mkmodel --chain): its guesses are kept
kept_most() { # FILE: the report's "A of B guesses kept" with B >= 20 and A >= 0.95 B
    sed -n 's/^speculation: MTP block, k=[0-9]* ([a-z]*, at most [0-9]*): \([0-9]*\) of \([0-9]*\) guesses kept.*/\1 \2/p' "$1" |
        awk '{ ok = $2 >= 20 && $1 >= 0.95 * $2 } END { exit !(NR == 1 && ok) }'
}
for f in glmc ds3c; do
    "$D" run -m "$T/$f.gguf" -p "$P" -n 64 --temp 0 --hot none --ignore-eos > "$T/${f}plain" 2>/dev/null
    for a in "--spec-k 3" "--spec-k 2 --mem 40M" ""; do
        # shellcheck disable=SC2086
        "$D" run -m "$T/$f.gguf" -p "$P" -n 64 --temp 0 --hot none --ignore-eos --spec mtp $a > "$T/${f}o" 2> "$T/${f}e"
        check "mtp ($f, foreseeable text, ${a:-adaptive}): same output" cmp -s "$T/${f}plain" "$T/${f}o"
        check "mtp ($f, foreseeable text, ${a:-adaptive}): 95% of 20+ guesses kept" kept_most "$T/${f}e"
    done
done
out=$("$B/mkmodel" -o "$T/x.gguf" --preset glm4moe-tiny --chain --tied 2>&1); rc=$?
check "mkmodel --chain with a tied head: refused" test "$rc" -ne 0
run -m "$T/moe.gguf" --spec mtp > /dev/null 2> "$T/f10"; rc=$?
check "mtp without a NextN block: refused (exit 1)" test "$rc" -eq 1
check "...saying why" grep -q "has no NextN/MTP block" "$T/f10"
out=$("$D" run -m "$T/dense.gguf" -p hi --spec draft 2>&1); rc=$?
check "--spec draft without -md: usage error" test "$rc" -eq 2
finish
