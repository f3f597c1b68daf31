#!/usr/bin/env bash
# k3-plan.sh - what `deltafin plan` says about the real Kimi K3 (2.8T) on
# laptops of 32, 64 and 128 GB and on this machine, from a shape-only file.
#
#   bench/k3-plan.sh [-c CTX]
#
# mkmodel --shape-only writes a GGUF with Kimi K3's shape: the header, the
# metadata and the tensor directory are real, the tensor data are holes (1.39
# TiB of file on a few MiB of disk). The shape, from the issue and llama.cpp's
# kimi-k3 converter: 93 layers, three KDA (linear attention) layers to one
# NoPE MLA layer, hidden 7168; 896 routed experts of 3 x 3584 x 3072 weights
# (MXFP4) behind a latent down/up projection (3072 of the 7168), 16 used per
# token, one shared expert at full width, one leading dense layer (18432),
# a 163840-token vocabulary; dense weights in Q8_0. Not published in llama.cpp
# and so assumed here: 64 heads, KDA head size 128, q LoRA 1536, kv LoRA 512,
# key/value heads 128 + 64 / 128 (Kimi K2's sizes).
# Then plan runs for each budget three times: with --disk-gbps 5 --mem-gbps 400 (an
# M1 Max-class laptop: ~5 GB/s SSD, 400 GB/s memory), the same with the dense
# weights requantized to q4_K at load (--resident-type q4_K), and measuring this
# machine (the disk through a scratch file, the model being holes).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CTX=4096
while getopts "c:" o; do case $o in c) CTX=$OPTARG ;; *) exit 2 ;; esac; done
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/deltafin" "$BUILD/mkmodel" >/dev/null
mkdir -p bench/results/models
M=bench/results/models/kimi-k3-shape.gguf
SCHED=$(awk 'BEGIN { for (i = 0; i < 93; i++) printf "%s", (i % 4 == 3) ? "M" : "K" }')
[ -f "$M" ] || "$BUILD/mkmodel" -o "$M" --preset kimi-k3-tiny --shape-only --pre kimi-k2 --schedule "$SCHED" \
    --n-embd 7168 --n-head 64 --n-head-kv 64 --kda-head-dim 128 --q-lora 1536 --kv-lora 512 --qk-nope 128 \
    --qk-rope 64 --v-head 128 --experts 896 --experts-used 16 --n-ff-exp 3584 --latent 3072 --n-ff 18432 \
    --shared 1 --dense-lead 1 --type q8_0 --expert-type mxfp4 --vocab 163840 --ctx 262144 >&2
"$BUILD/deltafin" info -m "$M" | grep -E "^(parameters|tensor bytes|experts|active|one expert)"
echo "file: $(stat -c %s "$M") bytes, $(($(stat -c %b "$M") * 512)) on disk"
. bench/plan-table.sh
plan_table "$M" "$CTX" 32G 64G 128G
echo "(the founding story: Kimi K3 out of core on a 64 GB laptop at 0.0687 tokens/s)"
