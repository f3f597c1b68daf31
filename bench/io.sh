#!/usr/bin/env bash
# io.sh - the two reading engines side by side: pread threads vs io_uring,
# streaming the same model under the same budget.
#
#   bench/io.sh [-g GB] [-n TOKENS] [-r ROUNDS] [-t THREADS] [-d "DEPTHS"]
#
# On the DeepSeek-shaped q8_0 model of bench/stream-model.sh (default 12 GB)
# with --mem a tenth of the file, `deltafin bench` generates TOKENS tokens
# (default 16, after a 16-token prompt and one warm-up round) with
# --io pread and --io uring at each concurrency in DEPTHS (pread threads /
# io_uring reads in flight; default "4 8 16"). The engines alternate, in
# a different order each round (the shared disk's speed drifts between
# minutes), page cache dropped before every run. For each engine and depth
# it prints the median tokens/s, disk throughput during generation and CPU
# seconds (user + system, whole process) per generated token, and the ratio
# io_uring / pread; appends the table to bench/RESULTS.md. Needs root
# (drop_caches).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
GB=12; N=16; R=3; T=2; D="4 8 16"
while getopts "g:n:r:t:d:" o; do
    case $o in g) GB=$OPTARG ;; n) N=$OPTARG ;; r) R=$OPTARG ;; t) T=$OPTARG ;; d) D=$OPTARG ;; *) exit 2 ;; esac
done
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/deltafin" >/dev/null
M=$(./bench/stream-model.sh "$GB")
BUDGET=$(( $(stat -c %s "$M") / 10 ))
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
j() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" <<< "$1"; }
for r in $(seq 1 "$R"); do
    engines="pread uring"; [ $((r % 2)) -eq 0 ] && engines="uring pread"
    for d in $D; do
        for e in $engines; do
            sync; echo 3 > /proc/sys/vm/drop_caches
            res=$( { /usr/bin/time -f "cpu %U %S" ./"$BUILD"/deltafin bench -m "$M" --mem "$BUDGET" -t "$T" -p 16 \
                -n "$N" -r 1 --json --hot none --io "$e" --io-threads "$d"; } 2>"$OUT/err" )
            cpu=$(awk '/^cpu/ { print $2 + $3 }' "$OUT/err")
            # the process ran a warm-up round and a measured round of 16 + N tokens each
            echo "$e $d $(j "$res" tg_tps) $(j "$res" tg_disk_bytes_per_s) $cpu" >> "$OUT/runs"
            echo "round $r: $e depth $d: $(j "$res" tg_tps) tokens/s, $(awk -v b="$(j "$res" tg_disk_bytes_per_s)" 'BEGIN { printf "%.0f", b / 2^20 }') MiB/s, cpu $cpu s" >&2
        done
    done
done
report=$(awk -v N="$N" -v D="$D" '
    function median(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
    { k = $1 " " $2; n[k]++; tps[k, n[k]] = $3; bw[k, n[k]] = $4; cpu[k, n[k]] = $5; keys[k] = 1 }
    END {
        nd = split(D, depth, " ")
        printf "%-8s %5s %10s %10s %14s\n", "engine", "depth", "tokens/s", "MiB/s", "cpu s/token"
        for (di = 1; di <= nd; di++) for (e = 0; e < 2; e++) {
            d = depth[di]
            k = (e ? "uring" : "pread") " " d
            if (!(k in keys)) continue
            for (i = 1; i <= n[k]; i++) { a[i] = tps[k, i]; b[i] = bw[k, i]; c[i] = cpu[k, i] }
            mt = median(a, n[k]); mb = median(b, n[k]); mc = median(c, n[k])
            # cpu per token: the whole process (2 rounds of 16 + N tokens) over its 2 * (16 + N) tokens
            printf "%-8s %5d %10.2f %10.0f %14.3f\n", (e ? "io_uring" : "pread"), d, mt, mb / 2^20, mc / (2 * (16 + N))
            m[e, d] = mt
        }
        for (di = 1; di <= nd; di++) if (m[0, d = depth[di]] > 0) printf "depth %d: io_uring / pread tokens/s = %.2f\n", d, m[1, d] / m[0, d]
    }' "$OUT/runs")
echo "$report"
{
    echo
    echo "## $(date -u +%F) — reading engines: pread threads vs io_uring (bench/io.sh -g $GB -n $N -r $R -t $T -d \"$D\")"
    echo
    echo "Commit $(git rev-parse --short HEAD), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $T compute threads," \
        "model $(basename "$M") ($(awk -v s="$(stat -c %s "$M")" 'BEGIN { printf "%.1f GiB", s / 2^30 }')), --mem $(awk -v b="$BUDGET" 'BEGIN { printf "%.2f GiB", b / 2^30 }'), medians of $R rounds."
    echo
    echo '```'
    echo "$report"
    echo '```'
} >> bench/RESULTS.md
