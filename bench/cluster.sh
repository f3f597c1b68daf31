#!/usr/bin/env bash
# cluster.sh - one MoE model over 1, 2 and 4 ranks (mpirun, docs/cluster.md),
# each rank with the same --mem, side by side.
#
#   bench/cluster.sh [-n GEN] [-m MEM] [-r ROUNDS] [-t THREADS] [-s experts|layers]
#
# Makes (once, into bench/results/models/) cache.sh's model: Qwen3-MoE-shaped,
# q8_0, 12 layers x 128 experts, 4 used per token, with routers that look
# trained (mkmodel --router-skew 0.6 --router-corr 0.5), about 1.2 GiB: about
# ten times the default budget of 120M a rank. Then, ROUNDS times (default 3),
# it runs 1, 2 and 4 ranks in turn (alternated, so that a drift of the machine
# hits all alike): `deltafin run` of GEN tokens (default 64), greedy, no hot
# -t THREADS (default 1) a rank, each run from a copy of the hot set learned by
# a run on another text (so that every run starts alike, warm). It prints, per rank count, the median
# generation tokens/s, every rank's disk bytes per generated token and cache
# hit rate, and the network bytes and messages per token through rank 0,
# beside `plan --ranks N --one-machine`'s prediction from the disk and memory
# speeds plan measures. It appends the table to bench/RESULTS.md.
#
# What one machine can measure: the ranks share its disk and its cores, so
# this shows the pooled cache (bytes read per token per rank fall as ranks are
# added) and the cost of the messages; it cannot show several disks reading at
# once, nor several machines' memory and cores, which is where separate
# machines gain their speed (plan --ranks without --one-machine predicts that).
# -s layers splits by layers instead of sharing experts (--split layers: each
# rank a range of the 12 layers, the stages taking turns), planned by
# plan --ranks N --split layers.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
N=64; MEM=120M; ROUNDS=3; THREADS=1; SPLIT=experts
while getopts "n:m:r:t:s:" o; do
    case $o in n) N=$OPTARG ;; m) MEM=$OPTARG ;; r) ROUNDS=$OPTARG ;; t) THREADS=$OPTARG ;; s) SPLIT=$OPTARG ;; *) exit 2 ;; esac
done
case $SPLIT in experts | layers) ;; *) echo "cluster.sh: -s is experts or layers" >&2; exit 2 ;; esac
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/deltafin" "$BUILD/mkmodel" "$BUILD/libdeltafin-mpi.so" > /dev/null
mkdir -p bench/results/models
M=bench/results/models/skew-0.6-0.5.gguf
[ -f "$M" ] || "$BUILD/mkmodel" -o "$M" --preset qwen3moe-tiny --n-layer 12 --experts 128 --experts-used 4 \
    --n-embd 512 --n-ff-exp 512 --type q8_0 --router-skew 0.6 --router-corr 0.5 > /dev/null
TMP=$(mktemp -d /tmp/deltafin-cluster-bench-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
PROMPT="Once upon a time there was a little"
# the learned hot set, from another text: every measured run starts from a copy of it (and may not change it)
"$BUILD/deltafin" run -m "$M" --mem "$MEM" -c 256 -p "The old man walked to the river and" -n "$N" --temp 0.8 \
    --seed 7 --ignore-eos --hot "$TMP/learned.hot" -t "$THREADS" > /dev/null 2>&1
run() { # RANKS ROUND
    cp "$TMP/learned.hot" "$TMP/run.hot"
    timeout 900 mpirun --allow-run-as-root --oversubscribe --quiet -np "$1" "$BUILD/deltafin" run -m "$M" --mem "$MEM" \
        -c 256 -p "$PROMPT" -n "$N" --temp 0 --hot "$TMP/run.hot" --ignore-eos -t "$THREADS" --split "$SPLIT" > "$TMP/out.$1.$2" \
        2> "$TMP/err.$1.$2"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# the disk, as plan measures it, once a round between the runs (on a shared disk one probe moves by a third)
for r in $(seq 1 "$ROUNDS"); do
    for np in 1 2 4; do run "$np" "$r"; done
    "$BUILD/deltafin" plan -m "$M" --mem "$MEM" -c 256 --json --probe-seconds 3 --hot "$TMP/learned.hot" |
        jq .disk_bytes_per_s >> "$TMP/disks"
done
for np in 2 4; do cmp -s "$TMP/out.1.1" "$TMP/out.$np.1" || { echo "cluster.sh: $np ranks printed another text"; exit 1; }; done
disk=$(median < "$TMP/disks")
# memory: plan's probe reads a buffer of at most half the budget, which at 120M stays in this machine's last-level
# cache; a budget of 1G gives it 256 MiB, the speed a rank reads its weights at
mem=$("$BUILD/deltafin" plan -m "$M" --mem 1G -c 256 --json --disk-gbps 1 | jq .memory_bytes_per_s)
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
    echo
    echo "### Cluster: 1, 2 and 4 ranks on one machine, --split $SPLIT ($(date -u +%F), commit $(git rev-parse --short HEAD))"
    echo
    echo "\`bench/cluster.sh -n $N -m $MEM -r $ROUNDS -t $THREADS -s $SPLIT\`: $M ($(($(stat -c %s "$M") >> 20)) MiB, 12 x 128"
    echo "experts, 4 used), --mem $MEM per rank, greedy, from a learned hot file; $cpu, $(nproc) cores shared by all ranks, one disk"
    echo "(plan measures $(awk -v d="$disk" 'BEGIN { printf "%.0f", d / 1048576 }') MiB/s: the median of a probe a round, $(awk '{ printf "%s%.0f", (NR > 1 ? " " : ""), $1 / 1048576 }' "$TMP/disks")). Medians of $ROUNDS alternated runs; the text is the"
    echo "same at every rank count. Predicted: \`plan --ranks N --split $SPLIT --one-machine --net-latency-us 50 -t THREADS\` with the learned hot"
    echo "file and the disk and memory speeds plan measured (memory with a 256 MiB buffer); at 1 rank, plain \`plan\`."
    echo "A rank's disk figure counts all it read over the run's tokens, the cache's first fill from the hot file included."
    echo "50 us a message: between two ranks of one machine a collective costs a few us, but a rank waiting for one sleeps"
    echo "in steps of up to 50 us (docs/cluster.md, the seam), so each of a MoE layer's three waits ends up to 50 us late."
    echo
    echo "| ranks | tokens/s | vs 1 rank | predicted | disk MiB/token, each rank | hit rate, each rank | network MiB/token | messages/token |"
    echo "|---|---|---|---|---|---|---|---|"
    base=""
    for np in 1 2 4; do
        tps=$(for r in $(seq 1 "$ROUNDS"); do sed -n 's/^generation: .* \([0-9.]*\) tokens\/s$/\1/p' "$TMP/err.$np.$r"; done | median)
        base=${base:-$tps}
        if [ "$np" = 1 ]; then
            bytes=$(sed -n 's/^io: .* read from disk, \([0-9.]*\) MiB per token.*/\1/p' "$TMP/err.1.1")
            hits=$(sed -n 's/^io: expert cache hit rate \([0-9.]*%\).*/\1/p' "$TMP/err.1.1")
            net="-"; msgs="-"
            pred=$("$BUILD/deltafin" plan -m "$M" --mem "$MEM" -c 256 --json --hot "$TMP/learned.hot" --disk-gbps "$(awk -v d="$disk" 'BEGIN { print d / 1e9 }')" \
                --mem-gbps "$(awk -v d="$mem" 'BEGIN { print d / 1e9 }')" | jq .predicted_tokens_per_s)
        else
            bytes=$(sed -n 's/^cluster: rank [0-9]*: .*read (\([0-9.]*\) MiB per token.*/\1/p' "$TMP/err.$np.1" | paste -sd' ')
            hits=$(sed -n 's/^cluster: rank [0-9]*: .*hit rate \([0-9.]*%\).*/\1/p' "$TMP/err.$np.1" | paste -sd' ')
            net=$(sed -n 's/^cluster: network: rank 0 sent \([0-9.]*\) MiB and received \([0-9.]*\) MiB per token.*/\1 + \2/p' "$TMP/err.$np.1")
            msgs=$(sed -n 's/^cluster: network: .* \([0-9.]*\) messages per token$/\1/p' "$TMP/err.$np.1")
            pred=$("$BUILD/deltafin" plan -m "$M" --mem "$MEM" -c 256 --json --hot "$TMP/learned.hot" --ranks "$np" --one-machine -t "$THREADS" --split "$SPLIT" \
                --net-gbps 100 --net-latency-us 50 --disk-gbps "$(awk -v d="$disk" 'BEGIN { print d / 1e9 }')" \
                --mem-gbps "$(awk -v d="$mem" 'BEGIN { print d / 1e9 }')" | jq .cluster_tokens_per_s)
        fi
        printf "| %d | %.2f | %.2fx | %.2f | %s | %s | %s | %s |\n" "$np" "$tps" "$(awk -v a="$tps" -v b="$base" 'BEGIN { print a / b }')" \
            "$pred" "$bytes" "$hits" "$net" "$msgs"
    done
} | tee -a bench/RESULTS.md
