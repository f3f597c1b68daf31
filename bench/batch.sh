#!/usr/bin/env bash
# batch.sh - continuous batching: aggregate generation tokens/s of 1, 4 and
# 16 sequences decoded together, Deltafin beside llama.cpp decoding the same
# number of sequences in one llama_batch a step.
#
#   bench/batch.sh [-t THREADS] [-n GEN] [-N "1 4 16"]
#
# Models (made once with tools/mkmodel into bench/results/models/, gitignored):
#   dense-medium-q8_0   llama-shaped, mkmodel's medium preset
#   moe-0.9g-q8_0       qwen3moe-shaped: 8 layers of 64 experts (4 used) of 512, 1024 wide (~0.9 GB)
#   moe8-1.8g-q8_0      Mixtral-shaped: 24 layers of 8 experts (2 used) of 2816, 1024 wide (~1.8 GB)
# Rows: the dense and the qwen3moe-shaped model in memory, and both MoE
# models under --mem at a tenth of their file size (their experts stream
# through the cache). What batching saves under --mem is set by the
# routing: N sequences read the union of their experts once a step. With 4
# of 64 experts a token the union of 16 sequences is about 25 experts a
# layer (16 x 4 = 64 picks), 2.6x fewer expert bytes a token than one
# sequence reads; with 2 of 8 (Mixtral) it is about 5.3 of 8 (6x fewer).
#
# Deltafin: `deltafin run --batch-file` with N prompts ("tale i of ..."),
# --parallel N, GEN tokens each (--ignore-eos), the report's "generation:
# ... tokens/s (all sequences)" (the steps after each prompt's prefill).
# llama.cpp: the reference program's `bench -p 0 -n GEN --seqs N -r 3`
# (ggml's best CPU variant, f16 KV cache, flash attention off): N
# sequences from an empty cache, one token of each in one llama_batch a
# step, median of 3. Both with THREADS threads.
#
# Output: a table on stdout and a dated entry appended to bench/RESULTS.md.
# Run it under the CPU lock: flock /tmp/deltafin-cpu.lock bench/batch.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
ARGS="$*"
T=2; NG=16; NS="1 4 16"
while getopts "t:n:N:" o; do
    case $o in t) T=$OPTARG ;; n) NG=$OPTARG ;; N) NS=$OPTARG ;; *) exit 2 ;; esac
done
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/deltafin" "$BUILD/mkmodel" >/dev/null
./scripts/llama-ref.sh build >/dev/null
OUT=bench/results
mkdir -p "$OUT/models"
MODELS=(
    "dense-medium-q8_0|--preset medium --type q8_0"
    "moe-0.9g-q8_0|--preset qwen3moe-tiny --n-embd 1024 --n-layer 8 --n-head 8 --n-head-kv 2 --experts 64 --experts-used 4 --n-ff-exp 512 --vocab 2048 --type q8_0"
    "moe8-1.8g-q8_0|--preset mixtral-tiny --n-embd 1024 --n-layer 24 --n-head 8 --n-head-kv 2 --n-ff 2816 --n-ff-exp 2816 --vocab 2048 --type q8_0"
)
for e in "${MODELS[@]}"; do
    f="$OUT/models/${e%%|*}.gguf"
    if [ ! -f "$f" ]; then
        echo "making $f (once)..." >&2
        # shellcheck disable=SC2086
        "$BUILD/mkmodel" -o "$f.tmp" ${e#*|} >&2 && mv "$f.tmp" "$f"
    fi
done
TMP=$(mktemp -d /tmp/deltafin-bench-batch-XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# deltafin MODEL N [--mem SIZE]: aggregate generation tokens/s (the better of two runs: the first
# warms the machine, as llama.cpp's warm-up round does), expert union a step, expert MiB a token
deltafin() {
    local m=$1 n=$2 best="0 - -" r; shift 2
    for i in $(seq 1 "$n"); do echo "tale $i of $((i * 7))"; done > "$TMP/p.txt"
    for _ in 1 2; do
        "$BUILD/deltafin" run -m "$m" --batch-file "$TMP/p.txt" --parallel "$n" -n "$NG" --ignore-eos --temp 0 \
            -t "$T" -c $((NG + 32)) "$@" > /dev/null 2> "$TMP/err" || { tail -1 "$TMP/err" >&2; continue; }
        r=$(awk '/^generation:/ { for (i = 1; i <= NF; i++) if ($(i) == "tokens/s") tps = $(i - 1) }
             /^steps: expert union/ { u = $4 }
             /MiB of experts read per generated token/ { b = $2; d = $(NF - 3) }
             END { printf "%s %s %s\n", tps, u == "" ? "-" : u, b == "" ? "-" : b "/" d }' "$TMP/err")
        best=$(printf "%s\n%s\n" "$best" "$r" | sort -g -r | head -1)
    done
    echo "$best"
}
llama() { # MODEL N
    local j
    j=$(./scripts/llama-ref.sh -m "$1" -t "$T" --kv-f16 --cpu-variant best bench -p 0 -n "$NG" --seqs "$2" -r 3 2>/dev/null) ||
        { echo 0; return; }
    sed -n 's/.*"tg_tps":\([0-9.]*\).*/\1/p' <<< "$j"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

COMMIT=$(git rev-parse --short HEAD)$(git diff --quiet -- src include tools 2>/dev/null || echo "+dirty")
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
TABLE="$TMP/table"
printf "| model | memory | N | Deltafin tok/s | llama.cpp tok/s | ratio | vs N=1 | expert union a step | expert MiB a token (disk) |\n" > "$TABLE"
printf "|---|---|---|---|---|---|---|---|---|\n" >> "$TABLE"
row() { # NAME FILE MEMLABEL [--mem SIZE]
    local name=$1 f=$2 label=$3 one=""; shift 3
    for n in $NS; do
        read -r tps uni bytes <<< "$(deltafin "$f" "$n" "$@")"
        ref=$(llama "$f" "$n")
        [ "$n" = 1 ] && one=$tps
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n" "$name" "$label" "$n" "$tps" "$ref" \
            "$(ratio "$tps" "$ref")" "$(ratio "$tps" "$one")" "$uni" "$bytes" | tee -a "$TABLE"
    done
}
for name in dense-medium-q8_0 moe-0.9g-q8_0; do
    row "$name" "$OUT/models/$name.gguf" "in memory"
done
for name in moe-0.9g-q8_0 moe8-1.8g-q8_0; do
    moe="$OUT/models/$name.gguf"
    budget=$(( $(stat -c %s "$moe") / 10 >> 20 ))M
    row "$name" "$moe" "--mem $budget (1/10)" --mem "$budget"
done
echo
cat "$TABLE"
{
    echo
    echo "## Continuous batching: aggregate tokens/s of N sequences ($(date -u +%F))"
    echo
    echo "Command: \`flock /tmp/deltafin-cpu.lock bench/batch.sh $ARGS\` (commit $COMMIT, $CPU, $T threads, $NG tokens"
    echo "a sequence). llama.cpp: the reference program, N sequences in one llama_batch a step (ggml's best CPU"
    echo "variant); under --mem llama.cpp runs in memory (it has no budget), as the reference line."
    echo
    cat "$TABLE"
} >> bench/RESULTS.md
