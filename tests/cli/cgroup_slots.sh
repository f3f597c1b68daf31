#!/usr/bin/env bash
# cgroup_slots.sh - a server's budget holds its slots and its prefix cache (issue 40 item 6).
#   tests/cli/cgroup_slots.sh BUILD_DIR
# `serve --mem 160M --parallel 8 -c 1024 --kv f32 --prompt-cache-mem 24M` on a 104 MiB MoE (its experts stream:
# the budget also holds eight sessions and the memory prefix cache, serve.c's load_model) runs inside a cgroup v1
# memory limit of the budget + 256 MiB while eight requests fill every slot to its full context (768 prompt
# tokens, 256 generated, ignore_eos), the prefix cache storing their prompts: every answer is complete, /slots
# showed all eight busy at once, the cgroup never hit its limit and the server's peak RSS stayed within the
# budget. A --parallel the budget cannot hold is refused at start naming the --parallel it holds; that one
# starts, one more does not.
set -u
B=${1:-build}
D="$B/deltafin"
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
command -v curl > /dev/null && command -v jq > /dev/null || { echo "SKIPPED: curl or jq not found"; exit 0; }
cgroup_setup slots
MiB=$((1 << 20))
"$B/mkmodel" -o "$T/moe.gguf" --preset qwen3moe-tiny --type q8_0 --n-embd 256 --experts 32 --n-ff-exp 512 \
    --n-layer 8 2> /dev/null || { echo "mkmodel failed"; exit 1; }
SP=""
trap '[ -n "$SP" ] && kill -9 "$SP" 2>/dev/null; [ -d "$CG" ] && rmdir "$CG" 2>/dev/null; rm -rf "$T"' EXIT
budget=$((160 * MiB)); limit=$((budget + 256 * MiB))
mkdir "$CG" || { echo "cannot create $CG"; exit 1; }
echo "$limit" > "$CG/memory.limit_in_bytes"
( echo "$BASHPID" > "$CG/cgroup.procs" &&
    exec "$D" serve --port 0 -m "$T/moe.gguf" --mem 160M --parallel 8 -c 1024 --kv f32 --prompt-cache-mem 24M \
        > "$T/serve.log" 2>&1 ) &
SP=$!
port=""
for _ in $(seq 1 100); do
    port=$(sed -n 's/.*http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$T/serve.log" 2> /dev/null)
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || { echo "the server did not start:"; cat "$T/serve.log"; exit 1; }
U="http://127.0.0.1:$port"
cs=()
for i in 1 2 3 4 5 6 7 8; do
    ids=$(seq 1 768 | awk -v s="$i" '{ printf "%s%d", (NR > 1 ? "," : ""), ($1 * 7919 + s * 131) % 300 + 3 }')
    curl -s -m 600 "$U/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\":[$ids],\"max_tokens\":4096,\"ignore_eos\":true,\"temperature\":0}" > "$T/c.$i" &
    cs+=($!)
done
most=0
while kill -0 "${cs[0]}" 2> /dev/null; do
    b=$(curl -s -m 5 "$U/slots" | jq '[.[] | select(.is_processing)] | length' 2> /dev/null)
    [ "${b:-0}" -gt "$most" ] && most=$b
    sleep 0.2
done
wait "${cs[@]}"
full=0
for i in 1 2 3 4 5 6 7 8; do
    [ "$(jq -c '[.usage.prompt_tokens, .usage.completion_tokens, .choices[0].finish_reason]' "$T/c.$i" 2> /dev/null)" = \
        '[768,256,"length"]' ] && full=$((full + 1))
done
m=$(curl -s "$U/metrics")
rss=$(awk '/^deltafin_memory_peak_rss_bytes /{ print $2 }' <<< "$m")
pcb=$(awk '/^deltafin_prefix_cache_memory_bytes /{ print $2 }' <<< "$m")
kill -INT "$SP"; wait "$SP"; rc=$?; SP=""
failcnt=$(cat "$CG/memory.failcnt"); peak=$(cat "$CG/memory.max_usage_in_bytes")
rmdir "$CG"
echo "serve --mem 160M --parallel 8 -c 1024: $full/8 slots filled to the context, at most $most busy at once;" \
     "peak RSS $((rss / MiB)) MiB, prefix cache $((pcb / MiB)) MiB, cgroup peak $((peak / MiB)) MiB of $((limit / MiB)), failcnt $failcnt"
check "every slot filled to its full context (768 + 256 tokens, $full/8)" test "$full" = 8
check "/slots: all eight busy at once" test "$most" = 8
check "the prefix cache kept prompts" test "${pcb:-0}" -gt 0
check "the cgroup's limit (budget + 256 MiB) was never hit (failcnt $failcnt)" test "$failcnt" -eq 0
check "peak RSS $((rss / MiB)) MiB within the budget of $((budget / MiB)) MiB" test "${rss:-999999999999}" -le "$budget"
check "the server stops cleanly" test "$rc" -eq 0

# a --parallel the budget cannot hold: refused at start, naming the one it holds
"$D" serve --port 0 -m "$T/moe.gguf" --mem 160M --parallel 64 -c 1024 --kv f32 --prompt-cache-mem 24M > /dev/null \
    2> "$T/err" && { echo "--parallel 64 started"; cat "$T/err"; }
fit=$(sed -n 's/.*this budget holds --parallel \([0-9]*\).*/\1/p' "$T/err")
check "--parallel 64: refused, naming the --parallel this budget holds (${fit:-none})" test -n "$fit"
starts() { # PARALLEL: does the server start (and answer /health) with that many slots?
    "$D" serve --port 0 -m "$T/moe.gguf" --mem 160M --parallel "$1" -c 1024 --kv f32 --prompt-cache-mem 24M \
        > "$T/s.log" 2>&1 &
    local pid=$! up=1
    for _ in $(seq 1 100); do
        grep -q 'serving' "$T/s.log" && break
        kill -0 "$pid" 2> /dev/null || { up=0; break; }
        sleep 0.1
    done
    kill "$pid" 2> /dev/null; wait "$pid" 2> /dev/null
    return $((1 - up))
}
if [ -n "$fit" ]; then
    check "... --parallel $fit starts" starts "$fit"
    refused() { ! starts "$1"; }
    check "... --parallel $((fit + 1)) does not" refused $((fit + 1))
fi
finish
