#!/usr/bin/env bash
# cgroup.sh - a memory budget holds under a real limit.
#   tests/cli/cgroup.sh BUILD_DIR
# Makes a DeepSeek-shaped MoE model of ~470 MiB, then runs `deltafin run
# --mem 64M` inside a cgroup v1 memory limit of 64 MiB + 256 MiB slack: the
# run must complete (not be killed), the cgroup's peak usage (RSS and page
# cache) must stay under the limit without ever hitting it (failcnt 0), and
# the text must equal the unbudgeted run's. Skipped, saying why, where the
# cgroup v1 memory controller is not writable or under the sanitizers (ASan's
# shadow memory is not part of Deltafin's budget).
set -u
B=${1:-build}
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
cgroup_setup cgroup
"$B/mkmodel" -o "$T/m.gguf" --preset deepseek-v3-tiny --type q8_0 --n-embd 512 --experts 64 --n-ff-exp 512 \
    --n-layer 10 2>/dev/null || { echo "mkmodel failed"; exit 1; }
size=$(stat -c %s "$T/m.gguf")
mkdir "$CG" || { echo "cannot create $CG"; exit 1; }
limit=$(( (64 + 256) * 1024 * 1024 ))
echo "$limit" > "$CG/memory.limit_in_bytes"
args=(run -m "$T/m.gguf" -p "Once upon a time" -n 48 --temp 0 --ignore-eos -c 256 --hot none)
"$B/deltafin" "${args[@]}" > "$T/free.txt" 2>/dev/null
( echo "$BASHPID" > "$CG/cgroup.procs" && exec "$B/deltafin" "${args[@]}" --mem 64M > "$T/capped.txt" 2> "$T/err.txt" )
rc=$?
peak=$(cat "$CG/memory.max_usage_in_bytes")
failcnt=$(cat "$CG/memory.failcnt")
echo "model $((size >> 20)) MiB, budget 64 MiB, cgroup limit $((limit >> 20)) MiB: exit $rc, cgroup peak $((peak >> 20)) MiB, failcnt $failcnt"
grep -E "peak memory|io:" "$T/err.txt"
fails=0
[ "$rc" -eq 0 ] || { echo "FAIL: the budgeted run did not complete"; fails=1; }
[ "$peak" -le "$limit" ] || { echo "FAIL: peak above the limit"; fails=1; }
[ "$failcnt" -eq 0 ] || { echo "FAIL: the cgroup hit its limit $failcnt times"; fails=1; }
[ "$size" -gt "$limit" ] || { echo "FAIL: the model should be larger than the limit"; fails=1; }
cmp -s "$T/free.txt" "$T/capped.txt" || { echo "FAIL: the budgeted text differs"; fails=1; }
echo "$((1 - fails)) passed, $fails failed"
exit "$fails"
