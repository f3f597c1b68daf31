#!/usr/bin/env bash
# cli.sh - end-to-end checks of the deltafin and mkmodel command-line tools.
#   tests/cli/cli.sh BUILD_DIR
# Checks real output, not just exit codes: the greedy story of stories260K,
# the token ids of a prompt, the info summary, and clear errors for bad input.
set -euo pipefail
B=${1:-build}
D="$B/deltafin"
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
T=$(mktemp -d /tmp/deltafin-cli-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"

# run: greedy generation of the real model is the known story
out=$("$D" run -m "$S" -p "Once upon a time" -n 40 --temp 0 -t 2 2>"$T/err")
check "run prints the greedy story" contains "$out" "Once upon a time, there was a little girl named Lily. She loved to play outside"
check "run reports speeds on stderr" grep -q "generation:.*tokens/s" "$T/err"
check "run reports peak memory" grep -q "peak memory" "$T/err"
# the same seed gives the same sampled text, another seed another text
a=$("$D" run -m "$S" -p "Once upon a time" -n 30 --temp 0.9 --seed 7 2>/dev/null)
b=$("$D" run -m "$S" -p "Once upon a time" -n 30 --temp 0.9 --seed 7 2>/dev/null)
c=$("$D" run -m "$S" -p "Once upon a time" -n 30 --temp 0.9 --seed 8 2>/dev/null)
check "same seed, same text" test "$a" = "$b"
check "other seed, other text" test "$a" != "$c"

# tokenize
ids=$("$D" tokenize -m "$S" -p "Once upon a time" | tr '\n' ' ')
check "tokenize ids" test "$ids" = "1 403 407 261 378 "
check "tokenize --pieces" contains "$("$D" tokenize -m "$S" -p "Once" --pieces)" "' Once'"

# info reads metadata only
info=$("$D" info -m "$S")
check "info architecture" contains "$info" "architecture:  llama"
check "info tokenizer" contains "$info" "tokenizer:     llama, 512 tokens"

# logits: top-k text and the full float32 dump
"$D" logits -m "$S" --tokens "1 403 407" --top 3 --out "$T/l.bin" > "$T/l.txt"
check "logits top line" grep -q "^0 403:17.02" "$T/l.txt"
check "logits --out size" test "$(stat -c %s "$T/l.bin")" -eq $((3 * 512 * 4))

# mkmodel makes a model that runs
"$B/mkmodel" -o "$T/m.gguf" --arch qwen3 --type q4_K 2>/dev/null
check "mkmodel model runs" bash -c "'$D' run -m '$T/m.gguf' -p 'hello world' -n 8 --temp 0 >/dev/null 2>&1"
check "mkmodel is deterministic" bash -c "'$B/mkmodel' -o '$T/m2.gguf' --arch qwen3 --type q4_K 2>/dev/null && cmp -s '$T/m.gguf' '$T/m2.gguf'"
# --expert-type: routed experts in their own type, the rest in --type
"$B/mkmodel" -o "$T/e.gguf" --preset qwen3moe-tiny --type q8_0 --expert-type mxfp4 2>/dev/null
info=$("$D" info -m "$T/e.gguf")
check "mkmodel --expert-type" bash -c "grep -q 'one expert:.* mxfp4' <<< \"\$1\" && grep -q 'q8_0 ' <<< \"\$1\"" _ "$info"

# bad input: clear errors, exit 1 or 2, never a crash
err() { "$D" "$@" 2>&1 >/dev/null; echo "rc=$?"; }
set +e
e=$(err run -m "$T/missing.gguf" -p x);        check "missing file" contains "$e" "cannot open"
head -c 1000 "$S" > "$T/trunc.gguf"
e=$(err info -m "$T/trunc.gguf");             check "truncated file" contains "$e" "impossible for a file of 1000 bytes"
head -c 4096 /dev/urandom | base64 > "$T/text.gguf"
e=$(err run -m "$T/text.gguf" -p x);           check "not gguf" contains "$e" "not a GGUF file"
e=$(err run -m "$S" -p x -n abc);              check "bad number" contains "$e" "expects an integer"
e=$(err frobnicate -m "$S");                   check "unknown command" contains "$e" "unknown command"
e=$(err logits -m "$S" --tokens "1 99999");     check "token out of range" contains "$e" "outside the vocabulary"
e=$(err run -m "$S" -p "$(head -c 3000 /dev/zero | tr '\0' a)" -c 64); check "prompt too long" contains "$e" "does not fit"
e=$(err run -m "$S" -p x -ngl 99);              check "-ngl: refused, saying why ($e)" contains "$e" "computes on the CPU"
check "-ngl: exit 2" contains "$e" "rc=2"
w=$("$D" run -m "$S" -p x -n 1 -t 512 2>&1 >/dev/null)
check "-t above the cores: a warning" contains "$w" "more than this machine's"
p=$("$D" plan -m "$S" --probe-seconds 0.2 2>&1); rc=$?
check "plan without --mem: exit 0 ($rc)" test "$rc" -eq 0
check "... planning for what this machine can give now" contains "$p" "planning for the"
w=$("$D" plan -m "$S" --mem 1000T --probe-seconds 0.2 2>&1 >/dev/null)
check "--mem above the machine: a warning" contains "$w" "more than the"
# llama.cpp's -n -1: to the end of the context
g=$("$D" run -m "$S" -p "Once" -n -1 -c 64 --temp 0 --ignore-eos 2>&1 | grep '^generation:')
check "-n -1 generates to the end of the context ($g)" contains "$g" "63 tokens"
# info: counts and sizes in units people read, and whether this build runs the file
i=$("$D" info -m "$S")
check "info: parameters in K/M/B ($(grep parameters <<< "$i"))" contains "$i" "(292.8 K)"
check "info: tensor bytes in MiB" contains "$i" "(1.1 MiB,"
check "info: runnable: yes" contains "$i" "runnable:      yes"
"$B/mkmodel" -o "$T/noconv.gguf" --preset kimi-linear-tiny --drop-key ssm.conv_kernel 2> /dev/null
i=$("$D" info -m "$T/noconv.gguf")
check "info of a file this build refuses: runnable: no, and why" contains "$i" "runnable:      no: "
set -e
finish
