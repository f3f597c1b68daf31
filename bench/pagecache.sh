#!/usr/bin/env bash
# pagecache.sh - the second tier (--page-cache, issue 39 item 2): a model ten times its budget read with O_DIRECT
# and through the kernel's page cache, where the memory beyond the budget can hold the model and where it cannot.
#
#   bench/pagecache.sh [-g GB] [-n TOKENS] [-t THREADS] [-s SKEW]
#
# The DeepSeek-shaped model of bench/stream-model.sh (GB gigabytes, default 4; SKEW: trained-like routers),
# budget = its size / 10. Two settings, each a cgroup v1 memory limit that counts the page cache:
#   room:  budget + the model's size + 1 GiB (the page cache can keep the whole file);
#   tight: budget + a quarter of the model (it can keep a quarter, and the kernel must reclaim);
# and in each, three runs of `deltafin bench --mem BUDGET -p 16 -n TOKENS`, the page cache dropped before the
# first two: O_DIRECT (the default); --page-cache cold; --page-cache again, warm with what the previous run left
# (a second run, or a long one, is where the tier pays). Before them, `plan --page-cache --json` in the same
# cgroup (df_memory_room sees its limit): its predictions without and with the tier. Prints tokens/s, bytes
# read per token, the cgroup's peak and failcnt; appends to bench/RESULTS.md. Needs root (cgroups, drop_caches).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
GB=4; N=32; T=2; SKEW=""
while getopts "g:n:t:s:" o; do
    case $o in g) GB=$OPTARG ;; n) N=$OPTARG ;; t) T=$OPTARG ;; s) SKEW=$OPTARG ;; *) exit 2 ;; esac
done
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/deltafin" > /dev/null
M=$(BUILD="$BUILD" ./bench/stream-model.sh "$GB" deepseek "${SKEW:--}" q8_0)
SIZE=$(stat -c %s "$M")
BUDGET=$((SIZE / 10))
. bench/cgroup.sh
cgroup_make pagecache
report=$(printf 'model %.2f GiB, budget %.2f GiB, %s tokens, %s threads\n' "$(awk -v s="$SIZE" 'BEGIN { print s / 2^30 }')" \
    "$(awk -v s="$BUDGET" 'BEGIN { print s / 2^30 }')" "$N" "$T")
for setting in room tight; do
    if [ $setting = room ]; then limit=$((BUDGET + SIZE + (1 << 30))); else limit=$((BUDGET + SIZE / 4)); fi
    echo "$limit" > "$CG/memory.limit_in_bytes"
    drop
    plan=$(in_cgroup ./"$BUILD"/deltafin plan -m "$M" --mem "$BUDGET" -t "$T" --page-cache --json)
    line="$setting (cgroup limit $((limit >> 20)) MiB): plan $(j "$plan" predicted_tokens_per_s) tokens/s without the tier,"
    line+=" $(j "$plan" page_cache_tokens_per_s) with it (room $(( $(j "$plan" page_cache_room_bytes | cut -d. -f1) >> 20 )) MiB)"
    report+=$'\n'"$line"
    for run in direct cold warm; do
        [ $run = warm ] || drop
        echo 0 > "$CG/memory.max_usage_in_bytes"
        echo 0 > "$CG/memory.failcnt"
        flag=(); [ $run = direct ] || flag=(--page-cache)
        out=$(in_cgroup ./"$BUILD"/deltafin bench -m "$M" --mem "$BUDGET" -t "$T" -p 16 -n "$N" -r 1 --json --hot none \
            "${flag[@]}" || echo '{"tg_tps":0}')
        report+=$'\n'"$(printf '  %-6s %-14s %8.3f tokens/s, %7.1f MiB read per token, hit rate %5.1f%%, cgroup peak %6.0f MiB, failcnt %s' \
            "$run" "$([ $run = direct ] && echo O_DIRECT || echo --page-cache)" "$(j "$out" tg_tps)" \
            "$(awk -v b="$(j "$out" tg_disk_bytes_per_token)" 'BEGIN { print b / 2^20 }')" \
            "$(awk -v h="$(j "$out" tg_hit_rate)" 'BEGIN { print 100 * h }')" \
            "$(( $(cat "$CG/memory.max_usage_in_bytes") >> 20 ))" "$(cat "$CG/memory.failcnt")")"
    done
done
echo "$report"
. bench/results.sh
results_add "the page cache as a second tier (bench/pagecache.sh -g $GB -n $N -t $T${SKEW:+ -s $SKEW})" "$T" "$report"
