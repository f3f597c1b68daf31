#!/usr/bin/env bash
# stream.sh - a model ten times larger than its memory budget: Deltafin
# streaming experts vs llama.cpp's mmap, both inside the same cgroup.
#
#   bench/stream.sh [-g GB] [-n TOKENS] [-t THREADS] [-a deepseek|kimi-k3|deepseek4] [-d DIV] [-s SKEW] [-e ETYPE]
#   BEFORE=OLD/build/deltafin [ROUNDS=3] bench/stream.sh ...   (before/after against an older build)
#
# The budget is the model's size / DIV (default 10); -d 20 is the ratio of
# the real Kimi K3 (1.39 TiB) to a 64 GB laptop. -s SKEW makes the model's
# routers skewed like trained ones (stream-model.sh), where the expert cache
# matters; BEFORE names another deltafin binary (an older commit's build): it
# and this build then run ROUNDS more times each, alternating, in the same
# cgroup, and the medians give a before/after line. -e ETYPE gives the
# DeepSeek shape's routed experts another type (e.g. iq1_s).
#
# 1. Makes a DeepSeek-shaped MoE model of about GB gigabytes (default 12) in
#    q8_0 (bench/stream-model.sh: MLA, sigmoid routing with groups and bias,
#    a shared expert, a dense first layer; 64 experts, 8 used), cached in
#    bench/results/models/.
# 2. `deltafin plan --json` with --mem = a tenth of the file, right before
#    Deltafin's run: the prediction a user sees, and the disk throughput
#    measured now (decode-shaped reads through the weight store, 5 s).
# 3. Deltafin (`deltafin bench --mem`) and llama.cpp (the reference program,
#    mmap) each generate TOKENS tokens inside a cgroup v1 memory limit of the
#    budget + 256 MiB, page cache included. The page cache is dropped before
#    each run so neither starts warm. plan runs again right after Deltafin.
# 4. Prints tokens/s of both and the ratio, Deltafin's bytes read per token
#    and the disk throughput it achieved, its fraction of the disk bound
#    (mean of the two probes / bytes read per token), and plan's prediction
#    beside the measurement; appends to bench/RESULTS.md.
# Needs root (cgroups, drop_caches).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
GB=12; N=16; T=2; SHAPE=deepseek; DIV=10; SKEW=""; ETYPE=q8_0
while getopts "g:n:t:a:d:s:e:" o; do
    case $o in g) GB=$OPTARG ;; n) N=$OPTARG ;; t) T=$OPTARG ;; a) SHAPE=$OPTARG ;; d) DIV=$OPTARG ;; s) SKEW=$OPTARG ;; e) ETYPE=$OPTARG ;; *) exit 2 ;; esac
done
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/deltafin" >/dev/null
./scripts/llama-ref.sh build >/dev/null
M=$(BUILD="$BUILD" ./bench/stream-model.sh "$GB" "$SHAPE" "${SKEW:--}" "$ETYPE")
BEFORE=${BEFORE:-}
[ -z "$BEFORE" ] || [ -x "$BEFORE" ] || { echo "stream.sh: BEFORE=$BEFORE is not an executable" >&2; exit 2; }
[ -z "$BEFORE" ] || BEFORE="$BEFORE (commit $(git -C "$(dirname "$BEFORE")" rev-parse --short HEAD 2>/dev/null || echo unknown))"
SIZE=$(stat -c %s "$M")
BUDGET=$((SIZE / DIV))
LIMIT=$((BUDGET + 256 * 1024 * 1024))
CTX=$((16 + N + 1))
. bench/cgroup.sh
cgroup_make bench
echo "$LIMIT" > "$CG/memory.limit_in_bytes"

# the prediction and the disk measured right before and right after Deltafin's
# run (the shared virtual disk drifts over minutes: measuring close in time)
drop
plan=$(./"$BUILD"/deltafin plan -m "$M" --mem "$BUDGET" -c "$CTX" -t "$T" --json)
drop
df=$(in_cgroup ./"$BUILD"/deltafin bench -m "$M" --mem "$BUDGET" -t "$T" -p 16 -n "$N" -r 1 --json --hot none)
df_peak=$(cat "$CG/memory.max_usage_in_bytes"); df_fail=$(cat "$CG/memory.failcnt")
drop
plan2=$(./"$BUILD"/deltafin plan -m "$M" --mem "$BUDGET" -c "$CTX" -t "$T" --json)
# before/after: the older build and this one alternate ROUNDS times more
# (the disk's speed drifts over minutes; alternating spreads it over both)
old_peak=0; pairs=""
if [ -n "$BEFORE" ]; then
    for ((r = 1; r <= ${ROUNDS:-3}; r++)); do
        for who in before after; do
            bin=./"$BUILD"/deltafin; [ "$who" = after ] || bin="${BEFORE%% (commit*}"
            echo 0 > "$CG/memory.max_usage_in_bytes"
            drop
            out=$(in_cgroup "$bin" bench -m "$M" --mem "$BUDGET" -t "$T" -p 16 -n "$N" -r 1 --json --hot none || echo '{"tg_tps":0}')
            [ "$who" = after ] || old_peak=$(cat "$CG/memory.max_usage_in_bytes")
            pairs+="$who $(j "$out" tg_tps) $(j "$out" tg_disk_bytes_per_token) $(j "$out" tg_hit_rate)"$'\n'
        done
    done
fi
echo 0 > "$CG/memory.max_usage_in_bytes"
drop
llama=$(in_cgroup timeout 600 ./scripts/llama-ref.sh -m "$M" bench -t "$T" -p 16 -n "$N" -r 1 || echo '{"tg_tps":0}')
ll_peak=$(cat "$CG/memory.max_usage_in_bytes")
# llama.cpp as a user runs it repacks some weight types (e.g. MXFP4) into
# anonymous memory at load, which no budget holds: when that run dies (the
# cgroup's OOM killer), say so and run it again with --no-repack (mmap only)
ll_note="default settings"
if [ "$(j "$llama" tg_tps)" = 0 ] || [ -z "$(j "$llama" tg_tps)" ]; then
    ll_note="default settings were killed in the cgroup (peak $((ll_peak >> 20)) MiB); this is --no-repack"
    echo 0 > "$CG/memory.max_usage_in_bytes"
    drop
    llama=$(in_cgroup timeout 900 ./scripts/llama-ref.sh -m "$M" bench -t "$T" -p 16 -n "$N" -r 1 --no-repack || echo '{"tg_tps":0}')
    ll_peak=$(cat "$CG/memory.max_usage_in_bytes")
fi

df_tps=$(j "$df" tg_tps); ll_tps=$(j "$llama" tg_tps)
ll_variant=$(sed -n 's/.*"cpu_variant":"\([^"]*\)".*/\1/p' <<< "$llama")   # the user's default variant
hit=$(j "$df" tg_hit_rate)
bpt=$(j "$df" tg_disk_bytes_per_token); got=$(j "$df" tg_disk_bytes_per_s); eng=$(sed -n 's/.*"io_engine":"\([a-z_]*\)".*/\1/p' <<< "$df")
disk1=$(j "$plan" disk_bytes_per_s); disk2=$(j "$plan2" disk_bytes_per_s)
pred=$(j "$plan" predicted_tokens_per_s); pred2=$(j "$plan2" predicted_tokens_per_s)
report=$(awk -v d="$df_tps" -v l="$ll_tps" -v b="$bpt" -v g="$got" -v k1="$disk1" -v k2="$disk2" -v p="$pred" -v p2="$pred2" \
    -v s="$SIZE" -v bu="$BUDGET" -v dp="$df_peak" -v lp="$ll_peak" -v lim="$LIMIT" -v f="$df_fail" -v e="$eng" -v lv="${ll_variant:-unknown}" -v ln="$ll_note" \
    -v h="${hit:-0}" -v ob="$BEFORE" -v pairs="$pairs" -v op="$old_peak" '
function med(a, n,   i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t } return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
BEGIN {
    k = (k1 + k2) / 2
    bound = (b > 0) ? k / b : 0
    printf "model %.1f GiB, budget %.2f GiB, cgroup limit %.2f GiB\n", s / 2^30, bu / 2^30, lim / 2^30
    printf "deltafin (%s): %.3f tokens/s, %.1f MiB read per token at %.0f MiB/s, expert cache hit rate %.1f%%, cgroup peak %.0f MiB, failcnt %d\n", e, d, b / 2^20, g / 2^20, 100 * h, dp / 2^20, f
    if (ob != "") {
        n = split(pairs, line, "\n"); nb = na = 0
        for (i = 1; i <= n; i++) {
            if (split(line[i], f4, " ") < 4) continue
            if (f4[1] == "before") { nb++; bt[nb] = f4[2]; bb[nb] = f4[3]; bh[nb] = f4[4]; lb = lb sprintf(" %.3f", f4[2]) }
            else { na++; at[na] = f4[2]; ab[na] = f4[3]; ah[na] = f4[4]; la = la sprintf(" %.3f", f4[2]) }
        }
        mbt = med(bt, nb); mbb = med(bb, nb); mbh = med(bh, nb); mat = med(at, na); mab = med(ab, na); mah = med(ah, na)
        printf "before/after, %d alternating runs each in the same cgroup (medians): before %s: %.3f tokens/s (runs:%s), %.1f MiB read per token, hit rate %.1f%%, cgroup peak %.0f MiB\n", nb, ob, mbt, lb, mbb / 2^20, 100 * mbh, op / 2^20
        printf "  after: %.3f tokens/s (runs:%s), %.1f MiB read per token, hit rate %.1f%%; after/before %.2fx tokens/s, %.2fx bytes read per token\n", mat, la, mab / 2^20, 100 * mah, (mbt > 0) ? mat / mbt : 0, (mbb > 0) ? mab / mbb : 0
    }
    printf "llama.cpp (mmap, CPU variant %s, %s): %.3f tokens/s, cgroup peak %.0f MiB\n", lv, ln, l, lp / 2^20
    printf "ratio deltafin / llama.cpp: %s\n", (l > 0) ? sprintf("%.2f", d / l) : "n/a (llama.cpp produced nothing)"
    printf "disk (plan probe) %.0f MiB/s before, %.0f after -> disk bound %.3f tokens/s; deltafin at %.0f%% of it\n", k1 / 2^20, k2 / 2^20, bound, (bound > 0) ? 100 * d / bound : 0
    printf "plan predicted %.3f tokens/s before the run (%.3f after); measured/predicted %.2f (%.2f)\n", p, p2, (p > 0) ? d / p : 0, (p2 > 0) ? d / p2 : 0 }')
echo "$report"
. bench/results.sh
results_add "streaming under a memory budget (bench/stream.sh -g $GB -n $N -t $T -a $SHAPE -d $DIV${SKEW:+ -s $SKEW}$([ "$SHAPE" != deepseek ] || echo " -e $ETYPE"))${BEFORE:+, before = $BEFORE}" "$T" "$report"
