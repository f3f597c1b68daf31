#!/usr/bin/env bash
# truth.sh - quantized models against their float truth: Deltafin must be at
# least as close to it as llama.cpp on the same file (run by tests/run-ref.sh).
#
#   tests/truth.sh BUILD_DIR [LIST]      (LIST: default tests/data/ref/truth.txt)
#
# For each line NAME | MKMODEL ARGS | POSITIONS [| PROMPTS]: mkmodel writes the
# quantized model; build/dequant writes the same weights dequantized to F32;
# llama.cpp (pinned CPU variant) computes the truth on that file, and both
# engines compute logits on the quantized file for the same POSITIONS
# deterministic token ids (K/V cache in f32 in both, as the reference program
# runs), PROMPTS times with different ids (1, or 16 for the recurrent families:
# below); build/logitcmp gives each engine's mean KL divergence from the truth
# over every position and its top-1 agreement.
#
# The rule, and why it is what it is: on dense models both engines quantize
# activations the same way, so their distances to the truth are nearly equal
# and the per-model check is tight: Deltafin's mean KL <= 1.10 x llama.cpp's
# (+1e-6). On tiny MoE models with random routers, a near-tie in the router
# flips an expert on the slightest perturbation, and a flipped expert moves a
# position's KL by 0.1-2.5 nats either way: which engine lands closer to the
# truth on one model is then a matter of which few positions flipped
# (measured: each engine is closer on about half of them). So MoE models are
# judged pooled, per family (kimi's recurrent models, whose state carries a
# flip to every later position, apart from the other MoE models), on the
# trimmed mean KL (logitcmp's kl_trim: each engine's worst 2% of positions
# left out, so that two flips of one engine do not decide a family; measured:
# deepseek-v3-tiny --random-config 1052256116 with one expert per token and
# IQ1_S experts, Deltafin's flips at 2 of 160 positions made its mean KL
# 0.0238 against llama.cpp's 0.00124, trimmed 0.00126 against 0.00117): the
# sum of Deltafin's trimmed KLs over a family <= 1.10 x llama.cpp's sum, and
# for every model top-1 agreement >= llama.cpp's - 0.05 and trimmed KL <= 2 x
# llama.cpp's + 1e-3 (a real bug breaks every position, or many).
#
# The recurrent families (kimi's KDA, qwen35's delta net) carry anything to
# every later position, and on quantized files the two engines part without a
# bug: both quantize the activations to Q8 with the same rounding, so a value
# a float from a rounding boundary, which the engines' last-bit differences
# put on the two sides, changes one code, and the state keeps it (measured:
# kimi-k3-tiny --random-config 1517682 with Q8_0 weights and IQ4_XS experts:
# the engines agree within 1e-7 at positions 0-22, part at 23 and never
# agree again (1e-2 to 0.3); with F32 weights they agree within 2e-6 to the
# end, with only the Q8_0 dense part or only the IQ4_XS experts at 1 and 6
# isolated positions). Of 200 random kimi models, 196 parted before position
# 160 and 116 before position 20; over all of them Deltafin's summed trimmed
# KL was 0.995x llama.cpp's, but on one prompt each engine was worse by over
# 10% on about 20 models, and a pool of two models failed the 1.10 rule 14%
# of the time. What follows a parting is a draw, not a property of either
# engine's kernels, so a recurrent model is judged on PROMPTS independent
# prompts of POSITIONS tokens each (16 unless the line gives a fourth field),
# every position of every prompt pooled: the draws average out, while a
# kernel bug is in every draw (measured on the 4 worst of 62 random kimi and
# qwen35 models, 6 sets of 16 prompts each: the log of Deltafin's ratio has a
# spread of 0.05 around 0; prompts of 40 tokens instead of 160 do no better).
# The tail is still there (one kimi model in 32 came out at 1.19x on its 16
# prompts, 0.98x on 64), so a family whose pool fails the rule, or one of
# whose models fails its own bound, is judged again, every model on four
# times its prompts (at least 8: the one-prompt MoE families too), and that
# second look's verdict stands. (A model's own bound is a draw too: qwen3moe-tiny
# with IQ1_S experts, --random-config 320458669, one prompt: trimmed KL 0.00888
# against llama.cpp's 0.00323, over the 2x + 1e-3 bound, with the AVX2, AVX-512
# and AMX tables alike and 0.00325 with the scalar one; on 8 prompts 0.0493
# against 0.0494.)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
B=${1:-build}
LIST=${2:-$ROOT/tests/data/ref/truth.txt}
cd "$ROOT"
REF=./scripts/llama-ref.sh
T=$(mktemp -d /tmp/deltafin-truth-XXXXXX)
trap 'rm -rf "$T"' EXIT
fails=0
declare -A pool_df=() pool_ll=() pool_fails=() pool_lines=() pool_np=() # per family: kimi, qwen35, other MoE
# judge NAME ARGS NPOS NPROMPT: one model's row; a MoE model's trimmed KLs go to its family's pool
judge() {
    local name=$1 args=$2 npos=$3 nprompt=$4 ok=1 k toks j verdict moe fam V kll trll t1ll kdf trdf t1df
    # shellcheck disable=SC2086
    "$B/mkmodel" -o "$T/q.gguf" $args 2>/dev/null || { echo "FAIL $name: mkmodel $args"; fails=$((fails + 1)); return; }
    "$B/dequant" -i "$T/q.gguf" -o "$T/t.gguf" 2>/dev/null || { echo "FAIL $name: dequant"; fails=$((fails + 1)); return; }
    V=$("$B/deltafin" info -m "$T/q.gguf" | sed -n 's/^tokenizer:.*, \([0-9]*\) tokens,.*/\1/p')
    : > "$T/truth.f32"; : > "$T/ll.f32"; : > "$T/df.f32"
    for ((k = 0; k < nprompt && ok; k++)); do
        toks=$(awk -v n="$npos" -v v="$V" -v s=$((12345 + 7919 * k)) 'BEGIN { x = s; for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%d ", 1 + int(x / 65536) % (v - 3) } }')
        { $REF -m "$T/t.gguf" logits --tokens "$toks" --out "$T/p-truth.f32" --top 0 2>/dev/null \
          && $REF -m "$T/q.gguf" logits --tokens "$toks" --out "$T/p-ll.f32" --top 0 2>/dev/null \
          && "$B/deltafin" logits -m "$T/q.gguf" --tokens "$toks" --kv f32 --out "$T/p-df.f32" --top 1 > /dev/null \
          && cat "$T/p-truth.f32" >> "$T/truth.f32" && cat "$T/p-ll.f32" >> "$T/ll.f32" \
          && cat "$T/p-df.f32" >> "$T/df.f32"; } < /dev/null || ok=0
    done
    [ "$ok" = 1 ] || { echo "FAIL $name: an engine failed"; fails=$((fails + 1)); return; }
    j=$("$B/logitcmp" --vocab "$V" "$T/truth.f32" "$T/ll.f32" "$T/df.f32") || { echo "FAIL $name: logitcmp"; fails=$((fails + 1)); return; }
    read -r kll trll t1ll kdf trdf t1df < <(sed 's/},{/}\n{/g' <<< "$j" |
        sed -n 's/.*"mean_kl":\([^,]*\),.*"kl_trim":\([^,]*\),.*"top1":\([^,}]*\)[,}].*/\1 \2 \3/p' | tr '\n' ' ')
    moe=0; case "$args" in *--experts*|*preset*moe*|*mixtral*|*deepseek*|*glm-dsa*|*kimi*|*minimax*|*gpt-oss*|*qwen3next*) moe=1 ;; esac
    if [ "$moe" = 1 ]; then
        verdict=$(awk -v d="$trdf" -v l="$trll" -v td="$t1df" -v tl="$t1ll" \
            'BEGIN { print (d <= 2 * l + 1e-3 && td >= tl - 0.05) ? "ok (pooled below)" : "FAIL" }')
        fam=moe; case "$args" in *kimi*) fam=kimi ;; *qwen35*|*qwen3next*) fam=qwen35 ;; esac
        pool_df[$fam]=$(awk -v a="${pool_df[$fam]:-0}" -v b="$trdf" 'BEGIN { print a + b }')
        pool_ll[$fam]=$(awk -v a="${pool_ll[$fam]:-0}" -v b="$trll" 'BEGIN { print a + b }')
        pool_lines[$fam]+="$name|$args|$npos|$nprompt"$'\n'
        pool_np[$fam]=$nprompt
        [ "${verdict:0:2}" = ok ] || pool_fails[$fam]=$((${pool_fails[$fam]:-0} + 1))
    else
        verdict=$(awk -v d="$kdf" -v l="$kll" 'BEGIN { print (d <= 1.10 * l + 1e-6) ? "ok" : "FAIL" }')
    fi
    printf '%-20s %12.3g %12.3g %10.3g %10.3g %8.3f %8.3f  %s\n' "$name" "$kll" "$kdf" "$trll" "$trdf" "$t1ll" "$t1df" \
        "$verdict$([ "$nprompt" -gt 1 ] && echo " ($nprompt prompts)")"
    [ "${verdict:0:2}" = ok ] || fails=$((fails + 1))
}
printf '%-20s %12s %12s %10s %10s %8s %8s  %s\n' model "KL llama" "KL deltafin" "trim ll" "trim df" "top1 ll" \
    "top1 df" verdict
while IFS='|' read -r name args npos nprompt; do
    [[ "$name" =~ ^[[:space:]]*(#|$) ]] && continue # comments (which may hold a quote) and blank lines
    name=$(echo "$name" | xargs); args=$(echo "$args" | xargs); npos=$(echo "$npos" | xargs)
    nprompt=$(echo "${nprompt:-}" | xargs)
    [ -n "$name" ] && [ "${name:0:1}" != "#" ] || continue
    case "$args" in *kimi*|*qwen35*|*qwen3next*) nprompt=${nprompt:-16} ;; *) nprompt=${nprompt:-1} ;; esac
    judge "$name" "$args" "$npos" "$nprompt"
done < "$LIST"
# pool_verdict FAM: "ok" or "FAIL"
pool_verdict() { awk -v d="${pool_df[$1]}" -v l="${pool_ll[$1]}" 'BEGIN { print (d <= 1.10 * l) ? "ok" : "FAIL" }'; }
for fam in "${!pool_ll[@]}"; do
    pooled=$(pool_verdict "$fam")
    printf '%s models pooled: trimmed mean KL llama.cpp %.4g, Deltafin %.4g (%.3fx): %s\n' "$fam" "${pool_ll[$fam]}" \
        "${pool_df[$fam]}" "$(awk -v d="${pool_df[$fam]}" -v l="${pool_ll[$fam]}" 'BEGIN { print d / l }')" "$pooled"
    if [ "$pooled" != ok ] || [ "${pool_fails[$fam]:-0}" -gt 0 ]; then # the second look, on four times the prompts (at least 8): its verdict stands
        again=$((4 * ${pool_np[$fam]})); [ "$again" -ge 8 ] || again=8
        echo "$fam models: judged again on $again prompts each"
        fails=$((fails - ${pool_fails[$fam]:-0})); pool_fails[$fam]=0; pool_df[$fam]=0; pool_ll[$fam]=0
        while IFS='|' read -r name args npos nprompt; do
            [ -n "$name" ] && judge "$name" "$args" "$npos" "$again"
        done <<< "${pool_lines[$fam]}"
        pooled=$(pool_verdict "$fam")
        printf '%s models pooled, second look: trimmed mean KL llama.cpp %.4g, Deltafin %.4g (%.3fx): %s\n' "$fam" \
            "${pool_ll[$fam]}" "${pool_df[$fam]}" \
            "$(awk -v d="${pool_df[$fam]}" -v l="${pool_ll[$fam]}" 'BEGIN { print d / l }')" "$pooled"
    fi
    [ "$pooled" = ok ] || fails=$((fails + 1))
done
[ "$fails" -eq 0 ] && echo "truth: every model within the rules above (dense: per model; MoE: pooled per family, with the ratio printed)" || echo "truth: $fails failure(s)"
[ "$fails" -eq 0 ]
