#!/usr/bin/env bash
# cache.sh - the expert cache on routing that looks trained, against what any
# policy could achieve on the same routing.
#
#   bench/cache.sh [-n GEN] [-m MEM] [-s SKEW] [-a CORR] [-k TOPICS] [-r RUNS]
#
# Makes (once, into bench/results/models/) a Qwen3-MoE-shaped q8_0 model with
# 12 layers x 128 experts, 4 used per token, whose routers are skewed
# (mkmodel --router-skew SKEW --router-corr CORR, default 0.6 / 0.5: see
# tools/mkmodel.c's router_row for what they imitate; -k TOPICS adds text
# that stays on a subject, mkmodel --topics: consecutive tokens route alike
# and the popular experts drift), about 1.2 GiB. Then it
# runs Deltafin under --mem MEM (default 160M: ~146 expert slots, 9.5% of the
# 1536 experts) RUNS times (default 3) generating GEN tokens (default 96) at
# temperature 0.8, seed 1: run 1 starts with no hot file, each later run
# starts from the hot file the previous ones left. Every run writes its
# routing trace, and tools/cachesim replays run 1's trace through LRU, the
# best static set in hindsight and Belady's clairvoyant optimum with the same
# number of slots, and through the best static set that holds what it
# computes (static_held: with fewer slots than a step names, the fair bar;
# see tools/cachesim.c). Prints the table and appends it to bench/RESULTS.md.
# Hit rates are counts of lookups that needed no read (an expert a guess read
# ahead is a miss, as in cachesim), but guesses are read only while they pay
# (wstore.c's guesses_pay, a timing) and take slots, so they vary a little
# with the disk's speed.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
N=96; MEM=160M; SKEW=0.6; CORR=0.5; TOPICS=0; RUNS=3
while getopts "n:m:s:a:k:r:" o; do
    case $o in n) N=$OPTARG ;; m) MEM=$OPTARG ;; s) SKEW=$OPTARG ;; a) CORR=$OPTARG ;; k) TOPICS=$OPTARG ;; r) RUNS=$OPTARG ;; *) exit 2 ;; esac
done
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/deltafin" "$BUILD/mkmodel" "$BUILD/cachesim" >/dev/null
mkdir -p bench/results/models
TOP=(); [ "$TOPICS" = 0 ] || TOP=(--topics "$TOPICS")
M=bench/results/models/skew-$SKEW-$CORR${TOP:+-topics$TOPICS}.gguf
[ -f "$M" ] || "$BUILD/mkmodel" -o "$M" --preset qwen3moe-tiny --n-layer 12 --experts 128 --experts-used 4 \
    --n-embd 512 --n-ff-exp 512 --type q8_0 --router-skew "$SKEW" --router-corr "$CORR" "${TOP[@]}"
TMP=$(mktemp -d /tmp/deltafin-cache-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
PROMPT="Once upon a time there was a little"
slots=$("$BUILD/deltafin" plan -m "$M" --mem "$MEM" -c 256 --json --probe-seconds 1 | sed -n 's/.*"expert_slots":\([0-9]*\).*/\1/p')
[ -n "$slots" ] || { echo "cache.sh: plan did not report the expert slots" >&2; exit 1; }
rows=()
for ((r = 1; r <= RUNS; r++)); do
    "$BUILD/deltafin" run -m "$M" --mem "$MEM" -c 256 -p "$PROMPT" -n "$N" --temp 0.8 --seed 1 --ignore-eos \
        --hot "$TMP/hot" --trace-experts "$TMP/trace$r.bin" > /dev/null 2> "$TMP/run$r.err"
    hit=$(sed -n 's/^io: expert cache hit rate \([0-9.]*\)%.*/\1/p' "$TMP/run$r.err")
    mpt=$(sed -n 's/^io: .* read from disk, \([0-9.]*\) MiB per token.*/\1/p' "$TMP/run$r.err")
    pre=$(sed -n 's/^io: expert cache hit rate .*prefetched \([0-9]*\), of which used \([0-9]*\).*/\1 \2/p' "$TMP/run$r.err")
    rows+=("$r $hit $mpt $pre")
done
sim=$("$BUILD/cachesim" "$TMP/trace1.bin" --slots "$slots" --json)
j() { sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" <<< "$1"; }
lru=$(j "$sim" lru); st=$(j "$sim" static); bel=$(j "$sim" belady); fr=$(j "$sim" freq); stc=$(j "$sim" static_cold); ov=$(j "$sim" overlap)
sth=$(j "$sim" static_held)
report=$(
    printf "model: %s (12 layers x 128 experts, 4 used; router skew %s, layer correlation %s, topics %s), --mem %s = %d expert slots\n" "$M" "$SKEW" "$CORR" "$TOPICS" "$MEM" "$slots"
    printf "replay of run 1's trace (tools/cachesim): LRU %.1f%%, best static in hindsight %.1f%% (started empty: %.1f%%; holding what it computes: %.1f%%), Belady %.1f%% (Deltafin's rule without guesses: %.1f%%); consecutive tokens share %.1f%% of a layer's experts\n" \
        "$(awk -v v="$lru" 'BEGIN{print 100*v}')" "$(awk -v v="$st" 'BEGIN{print 100*v}')" "$(awk -v v="$stc" 'BEGIN{print 100*v}')" "$(awk -v v="$sth" 'BEGIN{print 100*v}')" "$(awk -v v="$bel" 'BEGIN{print 100*v}')" "$(awk -v v="$fr" 'BEGIN{print 100*v}')" "$(awk -v v="$ov" 'BEGIN{print 100*v}')"
    printf "%-4s %9s %11s %11s %14s %12s %13s %10s %13s\n" run hit_rate MiB/token guesses guesses_used "of static" "(from empty)" "(holding)" "of Belady"
    for row in "${rows[@]}"; do
        read -r r hit mpt issued used <<< "$row"
        printf "%-4s %8.1f%% %11.2f %11d %14d %11.0f%% %12.0f%% %9.0f%% %12.0f%%\n" "$r" "$hit" "$mpt" "$issued" "$used" \
            "$(awk -v h="$hit" -v s="$st" 'BEGIN{print h/s}')" "$(awk -v h="$hit" -v s="$stc" 'BEGIN{print h/s}')" \
            "$(awk -v h="$hit" -v s="$sth" 'BEGIN{print h/s}')" "$(awk -v h="$hit" -v b="$bel" 'BEGIN{print h/b}')"
    done
)
echo "$report"
{
    echo
    echo "## $(date -u +%F) — expert cache on skewed routing (bench/cache.sh -n $N -m $MEM -s $SKEW -a $CORR -k $TOPICS -r $RUNS)"
    echo
    echo "Commit $(git rev-parse --short HEAD)$(git diff --quiet -- src tools 2>/dev/null || echo "+dirty"), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs). Run 1 starts cold (no hot file); later runs start from the hot file the earlier ones left."
    echo
    echo '```'
    echo "$report"
    echo '```'
} >> bench/RESULTS.md
