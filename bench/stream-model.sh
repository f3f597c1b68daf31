#!/usr/bin/env bash
# stream-model.sh - make (once) and print the path of the MoE model of about
# GB gigabytes used by bench/stream.sh and bench/io.sh. Two shapes:
#   deepseek (default): DeepSeek-shaped q8_0: MLA, sigmoid routing with 8
#     groups (4 used) and bias, a shared expert, a dense first layer; 64
#     experts of 3 x 2048 x 1024 weights (6.4 MiB), 8 used (with ETYPE
#     below 6 bits: 128, below 3 bits: 256, so experts keep their share).
#   kimi-k3: Kimi-K3-shaped, scaled down: three KDA layers to one NoPE MLA
#     layer, cross-layer residual attention, a latent MoE (experts at 1024 of
#     the 2048 width), SiTU, a shared expert, a dense first layer; 128 MXFP4
#     experts of 3 x 1024 x 1024 (1.6 MiB), 8 used; q8_0 elsewhere (K3's
#     published files: MXFP4 experts, 8-bit dense weights).
#   deepseek4: DeepSeek-V4-Flash-shaped, scaled down: its layer schedule (two
#     sliding-window-only layers, then ratio-4 compressed attention with the
#     indexer and ratio-128 alternating), four hyper-connection streams,
#     hash routing in the first 3 layers, sqrt-softplus routing, one shared
#     expert, heads of 512 with one shared KV vector, a 128-token window, the
#     grouped low-rank output; 128 MXFP4 experts of 3 x 2048 x 1024 (3.2 MiB),
#     6 used (V4 Flash: 256 of 3 x 4096 x 2048, 6 used); q8_0 elsewhere (the
#     published V4 files: FP4 experts, FP8 elsewhere).
# SKEW (optional, e.g. 0.6) makes the routers skewed as trained routers are
# (mkmodel --router-skew SKEW --router-corr 0.5: a minority of experts takes
# most tokens, adjacent layers correlate), for the expert cache's benchmarks;
# without it routing is nearly uniform. Cached in bench/results/models/
# (gitignored).
#
# ETYPE (deepseek shape only, default q8_0) is the routed experts' type, e.g.
# iq1_s as in the 1-bit files published for the giant models; GB then counts
# the experts (the dense weights stay q8_0); i-quant experts repeat 64
# distinct rows per tensor (mkmodel --row-pool: their quantizers are slow).
#
#   bench/stream-model.sh GB [deepseek|kimi-k3|deepseek4] [SKEW|-] [ETYPE]    (BUILD=build by default)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
GB=${1:?usage: stream-model.sh GB}
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/mkmodel" >/dev/null
mkdir -p bench/results/models
SHAPE=${2:-deepseek}
SKEW=${3:-}; [ "$SKEW" != - ] || SKEW=""
ETYPE=${4:-q8_0}
ROUTER=(); SUFFIX=""
[ -z "$SKEW" ] || { ROUTER=(--router-skew "$SKEW" --router-corr 0.5); SUFFIX="-skew$SKEW"; }
case "$SHAPE" in
deepseek)
    # experts of 3 x 2048 x 1024 weights (6.7 MB in q8_0): 64 per layer, or as many more as keep the
    # experts' share of a layer when they are smaller (256 in 1-2 bit types, as DeepSeek V3 has): layers for GB
    BPW=$(case "$ETYPE" in q8_0) echo 8.5 ;; q4_K|iq4_xs) echo 4.5 ;; mxfp4) echo 4.25 ;; q2_K) echo 2.625 ;;
        iq3_s) echo 3.4375 ;; iq3_xxs) echo 3.0625 ;; iq2_xxs) echo 2.0625 ;; iq2_xs) echo 2.3125 ;; iq2_s) echo 2.5625 ;;
        iq1_s) echo 1.5625 ;; iq1_m) echo 1.75 ;; *) echo "stream-model.sh: no size for expert type $ETYPE" >&2; exit 2 ;; esac)
    NEXP=$(awk -v b="$BPW" 'BEGIN { print (b < 3) ? 256 : (b < 6) ? 128 : 64 }')
    LAYERS=$(awk -v g="$GB" -v b="$BPW" -v x="$NEXP" 'BEGIN { l = int(g * 1024 / (x * 6.7 * b / 8.5)) + 2; print l }')
    # the grid i-quants' quantizers search their grids: a pool of 64 quantized rows per tensor, repeated
    ET=(); [ "$ETYPE" = q8_0 ] || ET=(--expert-type "$ETYPE"); case "$ETYPE" in iq*) ET+=(--row-pool 64) ;; esac
    M=bench/results/models/deepseek-${GB}g-q8_0${ET:+-$ETYPE-exps}$SUFFIX.gguf
    [ -f "$M" ] || ./"$BUILD"/mkmodel -o "$M" --preset deepseek-v3-tiny --type q8_0 "${ET[@]}" --n-embd 2048 --n-head 16 \
        --q-lora 512 --kv-lora 256 --experts "$NEXP" --experts-used 8 --n-ff-exp 1024 --groups 8:4 --n-layer "$LAYERS" \
        --vocab 4096 "${ROUTER[@]}" >&2 ;;
kimi-k3)
    # 128 experts of 1.7 MB per layer: layers for GB, scheduled KKKM...
    LAYERS=$(awk -v g="$GB" 'BEGIN { l = int(g * 1024 / (128 * 1.67)) + 2; print (l > 127 ? 127 : l) }')
    SCHED=$(awk -v n="$LAYERS" 'BEGIN { for (i = 0; i < n; i++) printf "%s", (i % 4 == 3) ? "M" : "K" }')
    M=bench/results/models/kimi-k3-${GB}g-mxfp4$SUFFIX.gguf
    [ -f "$M" ] || ./"$BUILD"/mkmodel -o "$M" --preset kimi-k3-tiny --type q8_0 --expert-type mxfp4 --n-embd 2048 \
        --n-head 16 --n-head-kv 16 --kda-head-dim 128 --q-lora 512 --kv-lora 256 --qk-nope 128 --qk-rope 64 --v-head 128 \
        --experts 128 --experts-used 8 --n-ff-exp 1024 --latent 1024 --n-ff 4096 --schedule "$SCHED" --vocab 4096 "${ROUTER[@]}" >&2 ;;
deepseek4)
    # 128 experts of 3.2 MiB (MXFP4) per layer: layers for GB; V4 Flash's schedule SS then C/H alternating
    LAYERS=$(awk -v g="$GB" 'BEGIN { l = int(g * 1024 / (128 * 3.25)) + 1; print (l > 127 ? 127 : l) }')
    SCHED=$(awk -v n="$LAYERS" 'BEGIN { for (i = 0; i < n; i++) printf "%s", (i < 2) ? "S" : (i % 2 == 0) ? "C" : "H" }')
    M=bench/results/models/deepseek4-${GB}g-mxfp4$SUFFIX.gguf
    [ -f "$M" ] || ./"$BUILD"/mkmodel -o "$M" --preset deepseek4-tiny --type q8_0 --expert-type mxfp4 --n-embd 2048 \
        --n-head 8 --head-dim 512 --rope-dims 64 --q-lora 512 --o-groups 4:512 --swa 128 --idx-heads 16 --idx-head-dim 128 \
        --idx-top-k 64 --hash-layers 3 --experts 128 --experts-used 6 --n-ff-exp 1024 --ds4-layers "$SCHED" \
        --swiglu-limit 10 --vocab 4096 "${ROUTER[@]}" >&2 ;;
*) echo "stream-model.sh: unknown shape '$SHAPE' (deepseek, kimi-k3, deepseek4)" >&2; exit 2 ;;
esac
echo "$M"
