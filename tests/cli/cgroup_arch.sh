#!/usr/bin/env bash
# cgroup_arch.sh - issue 13's families keep their budget under a real limit.
#   tests/cli/cgroup_arch.sh BUILD_DIR
# For each of qwen35moe (delta-net states), deepseek32 and glm-dsa (the DSA
# indexer's key cache, top-k below the context so that it selects), gpt-oss
# (an 8-token window: its KV ring, window + batch rounded up, is smaller than
# the 1024-token context and wraps in 640 tokens; MXFP4 experts), glm4moe and
# minimax-m2: a model over twice the 64 MiB budget computes the logits of 96
# tokens (gpt-oss: 640) with `deltafin logits --mem 64M` inside a cgroup v1 memory
# limit of 64 MiB + 256 MiB. Each run must complete (no OOM kill), never hit
# the limit (failcnt 0), and give logits bit-identical to the unbudgeted
# run's. Skipped where cgroups are unavailable or under the sanitizers.
set -u
B=${1:-build}
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
cgroup_setup cgroup-arch
MiB=$((1024 * 1024))
budget=$((64 * MiB))
limit=$((budget + 256 * MiB))
tokens() { seq 1 "$1" | awk '{ printf "%d ", (NR * 7919) % 300 + 5 }'; }
big="--n-embd 512 --n-layer 6 --experts 64 --n-ff-exp 512"
# name | tokens context | mkmodel arguments
FAMILIES=(
    "qwen35moe|96 256|--preset qwen35moe-tiny --type q8_0 --expert-type q4_K $big"
    "deepseek32|96 256|--preset deepseek32-tiny --type q8_0 --idx-top-k 16 $big"
    "glm-dsa|96 256|--preset glm-dsa-tiny --type q8_0 --expert-type mxfp4 --idx-types 110101 --idx-top-k 16 $big"
    "gpt-oss|640 1024|--preset gpt-oss-tiny --type q8_0 --expert-type mxfp4 --swa 8 $big"
    "glm4moe|96 256|--preset glm4moe-tiny --type q8_0 --expert-type mxfp4 $big"
    "minimax-m2|96 256|--preset minimax-m2-tiny --type q8_0 $big --n-layer 12"
)
for e in "${FAMILIES[@]}"; do
    IFS='|' read -r name len mk <<< "$e"
    read -r ntok ctx <<< "$len"
    m="$T/$name.gguf"
    # shellcheck disable=SC2086
    "$B/mkmodel" -o "$m" $mk 2>/dev/null || { check "$name: mkmodel" false; continue; }
    size=$(stat -c %s "$m")
    args=(logits -m "$m" --tokens "$(tokens "$ntok")" -c "$ctx" --hot none)
    if [ "$name" = gpt-oss ]; then
        ring=$("$B/deltafin" plan -m "$m" --mem 64M -c "$ctx" --probe-seconds 0.2 2>&1 |
            sed -n 's/.*keeps a ring of \([0-9]*\) positions.*/\1/p')
        echo "gpt-oss: KV ring of ${ring:-no} positions, context $ctx, $ntok tokens"
        check "gpt-oss: the window's ring is smaller than the tokens run (it wraps)" test "${ring:-$ctx}" -lt "$ntok"
    fi
    "$B/deltafin" "${args[@]}" --out "$T/free.f32" > /dev/null 2>&1
    mkdir "$CG" || { echo "cannot create $CG"; exit 1; }
    echo "$limit" > "$CG/memory.limit_in_bytes"
    ( echo "$BASHPID" > "$CG/cgroup.procs" && exec "$B/deltafin" "${args[@]}" --mem 64M --out "$T/capped.f32" \
        > /dev/null 2> "$T/err.txt" )
    rc=$?
    peak=$(cat "$CG/memory.max_usage_in_bytes")
    failcnt=$(cat "$CG/memory.failcnt")
    rmdir "$CG"
    echo "$name: model $((size / MiB)) MiB, budget 64 MiB, cgroup limit $((limit / MiB)) MiB: exit $rc," \
         "cgroup peak $((peak / MiB)) MiB, failcnt $failcnt"
    check "$name: the model is over twice the budget" test "$size" -gt $((2 * budget))
    check "$name: the budgeted run completes" test "$rc" -eq 0 || tail -3 "$T/err.txt"
    check "$name: never hits the cgroup's limit" test "$failcnt" -eq 0
    check "$name: logits identical to the unbudgeted run's" cmp -s "$T/free.f32" "$T/capped.f32"
    check "$name: logits written" test -s "$T/capped.f32"
    rm -f "$m" "$T/free.f32" "$T/capped.f32"
done
finish
