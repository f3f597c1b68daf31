#!/usr/bin/env bash
# plan-error.sh - how close `deltafin plan`'s tokens/s is to the run's (issue 39 item 3), on the scaled
# models of bench/stream.sh: every shape, uniform and skewed routing, budgets of 1/10 and 1/20 of the file.
#
#   bench/plan-error.sh [-g GB] [-n TOKENS] [-t THREADS] [-a "deepseek kimi-k3 deepseek4"] [-s SKEW] [-d "10 20"]
#                       [-r MIBPS] [-H]
#
# For each model (bench/stream-model.sh: GB gigabytes, uniform routing and SKEW-skewed routers) and each
# budget (the file's size / DIV):
#   1. `plan --json` right before the run, with the page cache dropped: the prediction a user sees (its
#      disk measured now by 5 s of decode-shaped reads through the weight store, guessing ahead with the
#      lookahead's typical recall: no hot file), and the range plan gives over the probe's windows;
#   2. `deltafin bench --mem` generating TOKENS tokens in a cgroup v1 memory limit of the budget + 256 MiB,
#      the page cache dropped before (no hot file: a cold start, as plan assumes without one): the
#      measurement;
#   3. plan again right after it (a second probe), then once more given the mean of the two probes'
#      disks and the first's memory (--disk-gbps, --mem-gbps): the tokens/s model's own error, with the
#      disk's drift over the run taken out as far as two probes around it can.
# -r MIBPS caps the disk's reads at MIBPS MiB/s for every plan and run (bench/cgroup.sh's disk_limit): a disk
# whose speed moves between the plan and the run (this machine's virtual disk: 1.0-4.0 GB/s within an hour)
# cannot tell the model's error from the disk's drift; capped below its slowest, the disk is one speed, and
# the table measures the model. Without -r, the disk as it is (what a user meets).
# The cap is a token bucket (blk-throttle's time slices): a run that leaves the disk idle for a few
# milliseconds while it computes may read faster than the cap afterwards, which a real disk of that speed
# cannot. So the table gives the run's disk idle time per token (no read in flight: what the compute did
# not hide) beside the plan's, and with -r the measured / plan a disk steady at the cap would give (its
# bytes at the cap, plus that idle time).
# -H plans and runs from a hot file, as a user's second run does: a first run on other tokens (--seed 7, in
# the same cgroup) learns it, then every plan and the run read it (--hot FILE): the hit rate predicted from
# its popularity, the lookahead's recall its measured one, the run's cache filled from it at load. Without
# -H, no hot file (--hot none): a cold start, with the typical recall.
# Prints one line per (model, budget) and appends the table to bench/RESULTS.md (PLAN_ERROR_LOG=FILE also
# appends each pair's name and the JSON of the plan, the run and the second plan, tab-separated). Needs root (cgroups,
# drop_caches); run on a quiet machine (no build or test beside it).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
GB=4; N=16; T=2; SHAPES="deepseek kimi-k3 deepseek4"; SKEW=0.6; DIVS="10 20"; RATE=""; WARM=""
while getopts "g:n:t:a:s:d:r:H" o; do
    case $o in g) GB=$OPTARG ;; n) N=$OPTARG ;; t) T=$OPTARG ;; a) SHAPES=$OPTARG ;; s) SKEW=$OPTARG ;;
        d) DIVS=$OPTARG ;; r) RATE=$OPTARG ;; H) WARM=1 ;; *) exit 2 ;; esac
done
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/deltafin" >/dev/null
D=./"$BUILD"/deltafin
. bench/cgroup.sh
cgroup_make planerr
CTX=$((16 + N + 1))
mkdir -p bench/results/models # where bench/stream-model.sh writes them
[ -z "$RATE" ] || disk_limit bench/results/models "$RATE"
HOTDIR=$(mktemp -d)
trap 'cgroup_remove; rm -rf "$HOTDIR"' EXIT

rows=""
for shape in $SHAPES; do
    for skew in - "$SKEW"; do
        M=$(BUILD="$BUILD" ./bench/stream-model.sh "$GB" "$shape" "$skew")
        SIZE=$(stat -c %s "$M")
        for div in $DIVS; do
            BUDGET=$((SIZE / div))
            echo $((BUDGET + 256 * 1024 * 1024)) > "$CG/memory.limit_in_bytes"
            HOT=none
            if [ -n "$WARM" ]; then
                HOT=$HOTDIR/$(basename "$M" .gguf)-$div.hot
                drop
                in_cgroup $D bench -m "$M" --mem "$BUDGET" -t "$T" -p 16 -n "$N" -r 1 --json --hot "$HOT" --seed 7 >/dev/null
            fi
            drop
            plan=$(in_disk $D plan -m "$M" --mem "$BUDGET" -c "$CTX" -t "$T" --json --hot "$HOT")
            drop
            run=$(in_cgroup $D bench -m "$M" --mem "$BUDGET" -t "$T" -p 16 -n "$N" -r 1 --json --hot "$HOT")
            tps=$(j "$run" tg_tps); bpt=$(j "$run" tg_disk_bytes_per_token); rate=$(j "$run" tg_disk_bytes_per_s)
            wait=$(j "$run" tg_io_wait_fraction); hit=$(j "$run" tg_hit_rate); rec=$(j "$run" tg_lookahead_recall)
            idle=$(j "$run" tg_disk_idle_fraction); pidle=$(j "$plan" disk_idle_seconds)
            pred=$(j "$plan" predicted_tokens_per_s); lo=$(j "$plan" predicted_tokens_per_s_low)
            hi=$(j "$plan" predicted_tokens_per_s_high); memr=$(j "$plan" memory_bytes_per_s)
            pbpt=$(j "$plan" disk_bytes_per_token); phit=$(j "$plan" expected_hit_rate); prec=$(j "$plan" lookahead_recall)
            drop
            plan2=$(in_disk $D plan -m "$M" --mem "$BUDGET" -c "$CTX" -t "$T" --json --hot "$HOT")
            achieved=$(awk -v a="$(j "$plan" disk_bytes_per_s)" -v b="$(j "$plan2" disk_bytes_per_s)" \
                'BEGIN { printf "%.0f", (a + b) / 2 }')
            model=$($D plan -m "$M" --mem "$BUDGET" -c "$CTX" -t "$T" --json --hot "$HOT" \
                --disk-gbps "$(awk -v a="$achieved" 'BEGIN { printf "%.4f", a / 1e9 }')" \
                --mem-gbps "$(awk -v a="$memr" 'BEGIN { printf "%.4f", a / 1e9 }')")
            mpred=$(j "$model" predicted_tokens_per_s)
            name="$(basename "$M" .gguf) 1/$div"
            [ -z "${PLAN_ERROR_LOG:-}" ] || printf '%s\t%s\t%s\t%s\n' "$name" "$plan" "$run" "$plan2" >> "$PLAN_ERROR_LOG"
            row=$(awk -v n="$name" -v p="$pred" -v lo="$lo" -v hi="$hi" -v m="$tps" -v mp="$mpred" -v b="$bpt" \
                -v pb="$pbpt" -v h="$hit" -v ph="$phit" -v w="$wait" -v a="$achieved" -v r="$rec" -v pr="$prec" -v i="$idle" -v pidle="$pidle" -v cap="${RATE:-0}" 'BEGIN {
                idle = (m > 0) ? i / m : 0
                steady = (cap > 0 && p > 0) ? sprintf("%.2f", 1 / (b / (cap * 2^20) + idle) / p) : "-"
                printf "| %s | %.3f | %.3f-%.3f | %.3f | %.2f | %.0f | %.3f | %.2f | %.1f / %.1f | %.1f%% / %.1f%% | %.0f%% / %.0f%% | %.0f%% | %.0f / %.0f | %s |",
                    n, p, lo, hi, m, (p > 0) ? m / p : 0, a / 2^20, mp, (mp > 0) ? m / mp : 0, b / 2^20, pb / 2^20,
                    100 * h, 100 * ph, 100 * r, 100 * pr, 100 * w, 1000 * idle, 1000 * pidle, steady }')
            echo "$row"
            rows+="$row"$'\n'
        done
    done
done
head='| model, budget | plan t/s | over the probe'"'"'s spread | measured t/s | measured / plan | disk around the run MiB/s (mean of 2 probes) | model t/s at that disk | measured / model | MiB/token run / plan | hit rate run / plan | lookahead recall run / plan | waiting on disk | disk idle ms/token run / plan | measured / plan at a steady disk |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
report="$head"$'\n'"${rows%$'\n'}"
. bench/results.sh
results_add "the plan's error (bench/plan-error.sh -g $GB -n $N -t $T -a \"$SHAPES\" -s $SKEW -d \"$DIVS\"${RATE:+ -r $RATE}${WARM:+ -H})" "$T" "$report"
