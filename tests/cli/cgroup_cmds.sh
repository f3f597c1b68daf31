#!/usr/bin/env bash
# cgroup_cmds.sh - every command that takes --mem keeps to it under a real limit.
#   tests/cli/cgroup_cmds.sh BUILD_DIR
# run, logits, bench and plan each run with --mem 64M inside their own cgroup
# v1 memory limit of 64 MiB + 256 MiB (as tests/cli/cgroup.sh does for run):
# each must complete without the cgroup ever hitting its limit, and its peak
# (RSS and page cache) must stay within the budget plus 32 MiB for the binary,
# its libraries and the page cache (hardening issue item 5: plan allocated a
# fixed 256 MiB for its memory probe; logits held tokens x vocabulary floats
# outside the budget). Skipped, saying why, where the cgroup v1 memory
# controller is not writable or under the sanitizers.
set -u
B=${1:-build}
CGROOT=/sys/fs/cgroup/memory
if [ -n "${DELTAFIN_SANITIZED:-}" ]; then echo "SKIPPED: sanitizer build"; exit 0; fi
if [ ! -w "$CGROOT" ]; then echo "SKIPPED: $CGROOT is not writable (cgroup v1 memory controller needed)"; exit 0; fi
T=$(mktemp -d /tmp/deltafin-cgcmd-XXXXXX)
CG="$CGROOT/deltafin-cmds-$$"
cleanup() { [ -d "$CG" ] && rmdir "$CG" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
MiB=$((1024 * 1024))
budget=$((64 * MiB))
limit=$((budget + 256 * MiB))
"$B/mkmodel" -o "$T/moe.gguf" --preset qwen3moe-tiny --type q8_0 2>/dev/null || { echo "mkmodel failed"; exit 1; }
"$B/mkmodel" -o "$T/dense.gguf" --arch llama --type q8_0 --vocab 4096 --n-embd 64 --n-layer 1 --ctx 8192 2>/dev/null ||
    { echo "mkmodel failed"; exit 1; }
fails=0
# in_cgroup NAME CMD...: run CMD in a fresh cgroup; sets rc, peak, failcnt
in_cgroup() {
    local name=$1; shift
    mkdir "$CG" || { echo "cannot create $CG"; exit 1; }
    echo "$limit" > "$CG/memory.limit_in_bytes"
    ( echo "$BASHPID" > "$CG/cgroup.procs" && exec "$@" > "$T/$name.out" 2> "$T/$name.err" )
    rc=$?
    peak=$(cat "$CG/memory.max_usage_in_bytes")
    failcnt=$(cat "$CG/memory.failcnt")
    rmdir "$CG"
    echo "$name: exit $rc, cgroup peak $((peak / MiB)) MiB (budget $((budget / MiB)) MiB, limit $((limit / MiB)) MiB), failcnt $failcnt"
    [ "$rc" -eq 0 ] || { echo "FAIL $name did not complete"; tail -3 "$T/$name.err"; fails=$((fails + 1)); }
    [ "$failcnt" -eq 0 ] || { echo "FAIL $name hit the cgroup's limit"; fails=$((fails + 1)); }
    [ "$peak" -le $((budget + 32 * MiB)) ] || { echo "FAIL $name used more than its budget + 32 MiB"; fails=$((fails + 1)); }
}
D="$B/deltafin"
toks=$(seq 1 6000 | awk '{ printf "%d ", ($1 * 7919) % 4096 }')
in_cgroup run "$D" run -m "$T/moe.gguf" -p "Once upon a time" -n 32 --ignore-eos -c 256 --hot none --mem 64M
in_cgroup logits "$D" logits -m "$T/dense.gguf" --tokens "$toks" -c 6000 --top 1 --mem 64M
[ "$(wc -l < "$T/logits.out")" -eq 6000 ] || { echo "FAIL logits printed $(wc -l < "$T/logits.out") lines, not 6000"; fails=$((fails + 1)); }
in_cgroup bench "$D" bench -m "$T/moe.gguf" -p 64 -n 8 -r 1 --mem 64M
in_cgroup plan "$D" plan -m "$T/moe.gguf" -c 256 --probe-seconds 0.5 --mem 64M
grep -q "predicted:" "$T/plan.out" || { echo "FAIL plan printed no prediction"; fails=$((fails + 1)); }
# the plain disk test's buffers (readers x chunk) are within the budget too
in_cgroup plan64 "$D" plan -m "$T/moe.gguf" -c 256 --probe-seconds 0.5 --io-threads 64 --mem 64M
echo "$((fails == 0 ? 1 : 0)) passed, $((fails > 0 ? 1 : 0)) failed"
[ "$fails" -eq 0 ]
