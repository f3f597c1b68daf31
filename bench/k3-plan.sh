#!/usr/bin/env bash
# k3-plan.sh - what `deltafin plan` says about the real Kimi K3 (2.8T) on
# laptops of 32, 64 and 128 GB and on this machine, from a shape-only file.
#
#   bench/k3-plan.sh [-c CTX] [-s SKEW]
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
# Two more tables:
# - the same K3 with 1-bit experts (IQ1_S, as the 1-2-bit files published for
#   the giant models have them; the dense weights stay Q8_0);
# - -s SKEW (default 0.6; 0: skip): routing as skewed as bench/stream.sh's
#   scaled K3 with skewed routers (stream-model.sh 4 kimi-k3 SKEW): that model
#   generates 96 tokens under a budget and its learned hot file's popularity,
#   layer by layer sorted, is stretched by quantile over K3's 896 experts
#   (the assumption: K3's trained routers are as skewed, as a curve, as the
#   scaled model's), and plan reads it (--hot): the hit rate of the best
#   static set of each budget's slots instead of the cached fraction.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
CTX=4096; SKEW=0.6
while getopts "c:s:" o; do case $o in c) CTX=$OPTARG ;; s) SKEW=$OPTARG ;; *) exit 2 ;; esac; done
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/deltafin" "$BUILD/mkmodel" >/dev/null
mkdir -p bench/results/models
M=bench/results/models/kimi-k3-shape.gguf
SCHED=$(awk 'BEGIN { for (i = 0; i < 93; i++) printf "%s", (i % 4 == 3) ? "M" : "K" }')
K3=(--preset kimi-k3-tiny --shape-only --pre kimi-k2 --schedule "$SCHED" --n-embd 7168 --n-head 64 --n-head-kv 64
    --kda-head-dim 128 --q-lora 1536 --kv-lora 512 --qk-nope 128 --qk-rope 64 --v-head 128 --experts 896
    --experts-used 16 --n-ff-exp 3584 --latent 3072 --n-ff 18432 --shared 1 --dense-lead 1 --type q8_0 --vocab 163840
    --ctx 262144)
[ -f "$M" ] || "$BUILD/mkmodel" -o "$M" "${K3[@]}" --expert-type mxfp4 >&2
M1=bench/results/models/kimi-k3-shape-iq1_s.gguf
[ -f "$M1" ] || "$BUILD/mkmodel" -o "$M1" "${K3[@]}" --expert-type iq1_s >&2
"$BUILD/deltafin" info -m "$M" | grep -E "^(parameters|tensor bytes|experts|active|one expert)"
echo "file: $(stat -c %s "$M") bytes, $(($(stat -c %b "$M") * 512)) on disk"
. bench/plan-table.sh
plan_table "$M" "$CTX" 32G 64G 128G
echo
echo "the same with IQ1_S experts ($M1):"
"$BUILD/deltafin" info -m "$M1" | grep -E "^(tensor bytes|one expert)"
plan_table "$M1" "$CTX" 32G 64G 128G
if [ "$SKEW" != 0 ]; then
    S=$(BUILD="$BUILD" ./bench/stream-model.sh 4 kimi-k3 "$SKEW")
    T=$(mktemp -d /tmp/deltafin-k3plan-XXXXXX)
    trap 'rm -rf "$T"' EXIT
    "$BUILD/deltafin" bench -m "$S" --mem $(($(stat -c %s "$S") / 10)) -t 2 -p 16 -n 96 -r 1 --hot "$T/small.hot" \
        > /dev/null
    # each K3 MoE layer (1..92) takes a scaled layer's sorted popularity (cycling through them), stretched
    # over 896 ranks by linear interpolation; a floor of 1e-4 of the layer's top keeps every expert counted
    # (the counts only: the header is copied, and the last line, the lookahead's recall, is not a count)
    awk -v X=896 -v L=93 'NR == 1 { print; next } $1 !~ /^[0-9]+$/ { next } { c[$1, $2] = $3; if ($1 > nl) nl = $1; if ($2 + 1 > nx) nx = $2 + 1 }
        END {
            for (l = 1; l < L; l++) {
                sl = (l - 1) % nl + 1; n = 0
                for (e = 0; e < nx; e++) v[n++] = ((sl, e) in c) ? c[sl, e] : 0
                for (i = 1; i < n; i++) for (k = i; k > 0 && v[k - 1] < v[k]; k--) { t = v[k]; v[k] = v[k - 1]; v[k - 1] = t }
                for (r = 0; r < X; r++) {
                    q = r * (n - 1) / (X - 1); i0 = int(q); f = q - i0
                    w = v[i0] * (1 - f) + (i0 + 1 < n ? v[i0 + 1] : v[i0]) * f
                    printf "%d %d %.6f\n", l, r, (w > v[0] * 1e-4) ? w : v[0] * 1e-4
                }
            }
        }' "$T/small.hot" > "$T/k3.hot"
    for b in 32G 64G 128G; do
        r=$("$BUILD/deltafin" plan -m "$M" --mem "$b" -c "$CTX" --json --disk-gbps 5 --mem-gbps 400 --hot "$T/k3.hot")
        r1=$("$BUILD/deltafin" plan -m "$M1" --mem "$b" -c "$CTX" --json --disk-gbps 5 --mem-gbps 400 --hot "$T/k3.hot")
        printf "skewed routing (the scaled K3 at skew %s), %s, 5 GB/s, 400 GB/s: MXFP4 experts hit %.1f%%, %.3f tokens/s; IQ1_S experts hit %.1f%%, %.3f tokens/s\n" \
            "$SKEW" "$b" "$(awk -v h="$(j "$r" expected_hit_rate)" 'BEGIN { print 100 * h }')" "$(j "$r" predicted_tokens_per_s)" \
            "$(awk -v h="$(j "$r1" expected_hit_rate)" 'BEGIN { print 100 * h }')" "$(j "$r1" predicted_tokens_per_s)"
    done
fi
echo "(the founding story: Kimi K3 out of core on a 64 GB laptop at 0.0687 tokens/s)"
