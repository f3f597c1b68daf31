#!/usr/bin/env bash
# stages.sh - a pipeline's stages overlapping (--split layers, docs/cluster.md): prompt and generation speed of
# one process and of 2 and 4 ranks on this machine, each pass whole (DELTAFIN_PIPE_CHUNKS=0) or in chunks that
# follow each other through the stages (the default), side by side.
#
#   bench/stages.sh [-r ROUNDS] [-p PROMPT_TOKENS]
#
# Two models, all in memory, one thread a rank: a dense llama-shaped one (mkmodel tiny, 768 wide, 8 layers,
# q8_0) and bench/cluster.sh's MoE (12 x 128 experts). ROUNDS times (default 3) every configuration runs
# `deltafin bench -p PROMPT_TOKENS -n 32 -r 1 -t 1` in turn (alternated against the machine's drift); it prints
# the medians and appends them to bench/RESULTS.md. On one machine the ranks share its cores: overlapping
# stages can gain only as far as the cores run at once.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
ROUNDS=3; PP=512
while getopts "r:p:" o; do
    case $o in r) ROUNDS=$OPTARG ;; p) PP=$OPTARG ;; *) exit 2 ;; esac
done
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/deltafin" "$BUILD/mkmodel" "$BUILD/libdeltafin-mpi.so" > /dev/null
mkdir -p bench/results/models
DENSE=bench/results/models/dense-768x8-q8_0.gguf
MOE=bench/results/models/skew-0.6-0.5.gguf
[ -f "$DENSE" ] || "$BUILD/mkmodel" -o "$DENSE" --preset tiny --n-embd 768 --n-layer 8 --type q8_0 > /dev/null
[ -f "$MOE" ] || "$BUILD/mkmodel" -o "$MOE" --preset qwen3moe-tiny --n-layer 12 --experts 128 --experts-used 4 \
    --n-embd 512 --n-ff-exp 512 --type q8_0 --router-skew 0.6 --router-corr 0.5 > /dev/null
TMP=$(mktemp -d /tmp/deltafin-stages-XXXXXX)
trap 'rm -rf "$TMP"' EXIT
B=("$BUILD/deltafin" bench -p "$PP" -n 32 -r 1 -t 1 --json)
one() { # MODEL CONFIG: one run, its JSON line appended to $TMP/CONFIG.MODEL
    local np=${2%%-*} chunks=${2#*-}
    if [ "$np" = 1 ]; then
        "${B[@]}" -m "$1" 2> /dev/null | tail -1
    else
        DELTAFIN_PIPE_CHUNKS=$([ "$chunks" = whole ] && echo 0 || echo "") timeout 900 mpirun --allow-run-as-root \
            --oversubscribe --quiet -x DELTAFIN_PIPE_CHUNKS -np "$np" "${B[@]}" -m "$1" --split layers 2> /dev/null | tail -1
    fi >> "$TMP/$2.$(basename "$1")"
}
CONFIGS="1-whole 2-whole 2-chunks 4-whole 4-chunks"
for r in $(seq 1 "$ROUNDS"); do
    for M in "$DENSE" "$MOE"; do for c in $CONFIGS; do one "$M" "$c"; done; done
done
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
    echo
    echo "### Pipeline stages overlapping: prompts in chunks ($(date -u +%F), commit $(git rev-parse --short HEAD))"
    echo
    echo "\`bench/stages.sh -r $ROUNDS -p $PP\`: \`deltafin bench -p $PP -n 32 -r 1 -t 1\`, all in memory, one thread a rank;"
    echo "$cpu, $(nproc) cores shared by all ranks. Medians of $ROUNDS alternated runs. whole: DELTAFIN_PIPE_CHUNKS=0"
    echo "(the stages take turns); chunks: the default (a pass of many rows cut into 2 x ranks chunks)."
    echo
    echo "| model | ranks | prompt tok/s whole | prompt tok/s chunks | chunks / whole | generation tok/s whole | chunks |"
    echo "|---|---|---|---|---|---|---|"
    for M in "$DENSE" "$MOE"; do
        b=$(basename "$M")
        for np in 1 2 4; do
            pw=$(jq .pp_tps "$TMP/$np-whole.$b" | median); tw=$(jq .tg_tps "$TMP/$np-whole.$b" | median)
            if [ "$np" = 1 ]; then
                printf "| %s | 1 (alone) | %.1f | - | - | %.1f | - |\n" "$b" "$pw" "$tw"
            else
                pc=$(jq .pp_tps "$TMP/$np-chunks.$b" | median); tc=$(jq .tg_tps "$TMP/$np-chunks.$b" | median)
                printf "| %s | %d | %.1f | %.1f | %.2fx | %.1f | %.1f |\n" "$b" "$np" "$pw" "$pc" \
                    "$(awk -v a="$pc" -v b="$pw" 'BEGIN { print a / b }')" "$tw" "$tc"
            fi
        done
    done
} | tee -a bench/RESULTS.md
