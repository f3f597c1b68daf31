#!/usr/bin/env bash
# ds4-plan.sh - what `deltafin plan` says about the real DeepSeek V4 Flash
# (284B) and V4 Pro (1.6T) on laptop-class machines and on this one, from
# shape-only files.
#
#   bench/ds4-plan.sh [-c CTX] [flash|pro ...]
#
# mkmodel --shape-only writes a GGUF with the real shape: header, metadata and
# tensor directory are real, the tensor data are holes (a sparse file). The
# shapes (the models' config.json as published; llama.cpp's deepseek4
# converter maps them to the GGUF keys):
#   V4 Flash: 43 layers, hidden 4096, 64 heads of 512 (one shared KV vector,
#     64 of it rotated), q LoRA 1024, output in 8 groups of rank 1024, a
#     128-token window on every layer; layers 0-1 window only, then ratio-4
#     compressed attention with the indexer (64 heads of 128, top 512) and
#     ratio-128 alternating; 4 hyper-connection streams; 256 routed experts
#     of 3 x 4096 x 2048 (FP4 -> MXFP4), 6 used, one shared; hash routing in
#     the first 3 layers; one MTP block (recognised, not run); vocabulary
#     129280; dense weights FP8 -> Q8_0.
#   V4 Pro: 61 layers, hidden 7168, 128 heads of 512, q LoRA 1536, output in
#     16 groups of rank 1024; layers 0-1 ratio 128, then ratio 4 (indexer top
#     1024) and 128 alternating; 384 routed experts of 3 x 7168 x 3072, 6
#     used, one shared; the rest as Flash. Assumed: the indexer's 64 heads of
#     128 and the parity of the alternation (as Flash's).
# Each budget is planned three ways (bench/plan-table.sh): a laptop (5 GB/s
# SSD, 400 GB/s memory), the same with the dense weights requantized to q4_K
# at load, and this machine (its disk measured on a scratch file).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CTX=4096
while getopts "c:" o; do case $o in c) CTX=$OPTARG ;; *) exit 2 ;; esac; done
shift $((OPTIND - 1))
WHICH=("${@:-flash}"); [ $# -gt 0 ] || WHICH=(flash pro)
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/deltafin" "$BUILD/mkmodel" >/dev/null
mkdir -p bench/results/models
. bench/plan-table.sh
# schedule LAYERS FIRST: FIRST for layers 0-1, then C (ratio 4) on even and H (ratio 128) on odd layers
schedule() { awk -v n="$1" -v f="$2" 'BEGIN { for (i = 0; i < n; i++) printf "%s", (i < 2) ? f : (i % 2 == 0) ? "C" : "H" }'; }
for which in "${WHICH[@]}"; do
    case $which in
        flash) M=bench/results/models/deepseek4-flash-shape.gguf; budgets=(32G 64G 128G)
               shape=(--n-embd 4096 --n-head 64 --q-lora 1024 --o-groups 8:1024 --idx-top-k 512 --experts 256
                      --n-ff-exp 2048 --ds4-layers "$(schedule 43 S)") ;;
        pro)   M=bench/results/models/deepseek4-pro-shape.gguf; budgets=(64G 128G 256G)
               shape=(--n-embd 7168 --n-head 128 --q-lora 1536 --o-groups 16:1024 --idx-top-k 1024 --experts 384
                      --n-ff-exp 3072 --ds4-layers "$(schedule 61 H)") ;;
        *) echo "ds4-plan.sh: flash or pro, not '$which'" >&2; exit 2 ;;
    esac
    [ -f "$M" ] || "$BUILD/mkmodel" -o "$M" --preset deepseek4-tiny --shape-only "${shape[@]}" --head-dim 512 --rope-dims 64 \
        --swa 128 --idx-heads 64 --idx-head-dim 128 --hash-layers 3 --experts-used 6 --shared 1 --nextn 1 \
        --swiglu-limit 10 --type q8_0 --expert-type mxfp4 --vocab 129280 --ctx 1048576 >&2
    echo "## DeepSeek V4 ${which^} ($M, context $CTX)"
    "$BUILD/deltafin" info -m "$M" -c "$CTX" | grep -E "^(parameters|tensor bytes|experts|active|one expert|compressed)"
    echo "file: $(stat -c %s "$M") bytes, $(($(stat -c %b "$M") * 512)) on disk"
    plan_table "$M" "$CTX" "${budgets[@]}"
    echo
done
