#!/usr/bin/env bash
# cgroup_ds4.sh - a DeepSeek-V4-shaped model ten times its budget, inside a real limit.
#   tests/cli/cgroup_ds4.sh BUILD_DIR
# Makes a DeepSeek-V4-shaped model of ~700 MiB (sliding-window, ratio-4 with
# the indexer and ratio-128 compressed attention layers, hyper-connections,
# hash routing on the first layers, 64 MXFP4 experts, q8_0 elsewhere), then
# computes the logits of 300 tokens (past the sliding window and the first
# ratio-128 block) with `deltafin logits --mem 64M` inside a cgroup v1 memory
# limit of 64 MiB + 256 MiB: the run must complete, never hit the limit
# (failcnt 0), and give logits bit-identical to the unbudgeted run's (the
# window caches, the compressed caches, the compressor states, the indexer
# keys and the streamed MXFP4 experts are all in the budget). Skipped where
# cgroups are unavailable or under the sanitizers.
set -u
B=${1:-build}
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
cgroup_setup cgroup-ds4
"$B/mkmodel" -o "$T/ds4.gguf" --preset deepseek4-tiny --type q8_0 --expert-type mxfp4 --n-embd 512 --experts 64 \
    --experts-used 8 --n-ff-exp 1024 --ds4-layers SCHCSCHCSCHCSC 2>/dev/null || { echo "mkmodel failed"; exit 1; }
size=$(stat -c %s "$T/ds4.gguf")
mkdir "$CG" || { echo "cannot create $CG"; exit 1; }
limit=$(( (64 + 256) * 1024 * 1024 ))
echo "$limit" > "$CG/memory.limit_in_bytes"
toks=$(seq 1 300 | awk "{ printf \"%d \", (NR * 7919) % 300 + 5 }")
"$B/deltafin" logits -m "$T/ds4.gguf" --tokens "$toks" --out "$T/free.f32" --hot none > /dev/null 2>&1
( echo "$BASHPID" > "$CG/cgroup.procs" && exec "$B/deltafin" logits -m "$T/ds4.gguf" --tokens "$toks" --mem 64M \
    --out "$T/capped.f32" --hot none > /dev/null 2> "$T/err.txt" )
rc=$?
peak=$(cat "$CG/memory.max_usage_in_bytes")
failcnt=$(cat "$CG/memory.failcnt")
echo "model $((size >> 20)) MiB, budget 64 MiB, cgroup limit $((limit >> 20)) MiB: exit $rc, cgroup peak $((peak >> 20)) MiB, failcnt $failcnt"
check "the budgeted run completes" test "$rc" -eq 0
check "the model is ten times the budget" test "$size" -gt $((640 << 20))
check "the cgroup never hit its limit" test "$failcnt" -eq 0
check "peak within the limit" test "$peak" -le "$limit"
check "both runs wrote their logits" test -s "$T/free.f32" -a -s "$T/capped.f32"
check "logits bit-identical to the unbudgeted run" cmp -s "$T/free.f32" "$T/capped.f32"
[ "$rc" -eq 0 ] || cat "$T/err.txt"
finish
