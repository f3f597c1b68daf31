#!/usr/bin/env bash
# stream-model.sh - make (once) and print the path of the DeepSeek-shaped
# q8_0 MoE model of about GB gigabytes used by bench/stream.sh and bench/io.sh:
# MLA, sigmoid routing with 8 groups (4 used) and bias, a shared expert, a
# dense first layer; 64 experts of 3 x 2048 x 1024 weights (6.4 MiB), 8 used.
# Cached in bench/results/models/ (gitignored).
#
#   bench/stream-model.sh GB     (BUILD=build by default)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
GB=${1:?usage: stream-model.sh GB}
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/mkmodel" >/dev/null
mkdir -p bench/results/models
# 64 experts of 6.7 MB per layer: layers for GB
LAYERS=$(awk -v g="$GB" 'BEGIN { l = int(g * 1024 / (64 * 6.7)) + 2; print l }')
M=bench/results/models/deepseek-${GB}g-q8_0.gguf
[ -f "$M" ] || ./"$BUILD"/mkmodel -o "$M" --preset deepseek-v3-tiny --type q8_0 --n-embd 2048 --n-head 16 \
    --q-lora 512 --kv-lora 256 --experts 64 --experts-used 8 --n-ff-exp 1024 --groups 8:4 --n-layer "$LAYERS" \
    --vocab 4096 >&2
echo "$M"
