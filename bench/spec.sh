#!/usr/bin/env bash
# spec.sh - tokens/s with and without speculative decoding, and the prompt
# cache's time to first token (issue 16). Prints a markdown table for
# bench/RESULTS.md. Run it under the CPU lock:
#   flock /tmp/deltafin-cpu.lock bench/spec.sh [BUILD_DIR]
# Models (mkmodel, synthetic, in bench/results/models/):
#   dense  llama 768 wide, 8 layers, GQA 12/2, FFN 4096, f32; its draft: the same weights in q8_0
#          (same seed and vocabulary: a draft that mostly agrees, ~3.8x fewer bytes)
#   moe    qwen3moe-tiny made 512 wide, 8 layers, 64 experts (8 used) of 512, q8_0, on a repetitive prompt (prompt lookup), in
#          memory and under --mem (experts streamed)
#   glm    glm4moe-tiny made the same size, with its NextN block: --spec mtp (random weights: its guesses
#          are almost never right, where the adaptive choice must turn speculation off)
#   chain  deepseek-v3-tiny made the same size, with its NextN block, on text it foresees (mkmodel
#          --chain: every guess is right, and consecutive tokens route independently), in memory and
#          under --mem 160M
# SPEC_GROUPS="mtpc mtpmem" runs those groups only (dense lookup moe mem mtp mtpc mtpmem; default all).
# ROUNDS=R runs every configuration R times, alternating, and reports each run and the median; per
# group, the adaptive choice against the best fixed one (speculation off included).
# Each configuration generates N tokens greedily (--ignore-eos); the table has
# generation tokens/s, the guesses kept and the k the run chose. Speculative
# output is checked byte-identical to the plain run's.
set -u
B=${1:-build}
D="$B/deltafin"
M=bench/results/models
N=${N:-128}
mkdir -p "$M"
mk() { [ -f "$M/$1.gguf" ] || "$B/mkmodel" -o "$M/$1.gguf" "${@:2}" >/dev/null 2>&1 || { echo "mkmodel $1 failed"; exit 1; }; }
mk spec-dense --arch llama --type f32 --n-embd 768 --n-layer 8 --n-head 12 --n-head-kv 2 --n-ff 4096 --seed 11
mk spec-draft --arch llama --type q8_0 --n-embd 768 --n-layer 8 --n-head 12 --n-head-kv 2 --n-ff 4096 --seed 11
mk spec-moe --preset qwen3moe-tiny --type q8_0 --n-embd 512 --n-layer 8 --experts 64 --experts-used 8 --n-ff-exp 512 --seed 12
mk spec-glm --preset glm4moe-tiny --type q8_0 --n-embd 512 --n-layer 8 --experts 64 --experts-used 8 --n-ff-exp 512 --seed 13
mk spec-ds3-chain --preset deepseek-v3-tiny --nextn 1 --type q8_0 --n-embd 512 --n-layer 8 --experts 64 --experts-used 8 \
    --n-ff-exp 512 --chain --seed 14
P="def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n\ndef div(a, b):\n    return a / b\n\n"
P=$(printf "$P$P$P")
T=$(mktemp -d /tmp/deltafin-benchspec-XXXXXX)
trap 'rm -rf "$T"' EXIT
# Configurations, in groups (a group: one model and guess source; its first
# row is without speculation, then the adaptive choice, then fixed k).
CONF=(
    "dense|dense f32, no speculation|spec-dense|"
    "dense|dense f32, draft q8_0, adaptive|spec-dense|-md $M/spec-draft.gguf"
    "dense|dense f32, draft q8_0, k=1|spec-dense|-md $M/spec-draft.gguf --spec-k 1"
    "dense|dense f32, draft q8_0, k=2|spec-dense|-md $M/spec-draft.gguf --spec-k 2"
    "dense|dense f32, draft q8_0, k=4|spec-dense|-md $M/spec-draft.gguf --spec-k 4"
    "lookup|dense f32, no speculation|spec-dense|"
    "lookup|dense f32, lookup, adaptive|spec-dense|--spec lookup"
    "moe|moe q8_0, no speculation|spec-moe|"
    "moe|moe q8_0, lookup, adaptive|spec-moe|--spec lookup"
    "moe|moe q8_0, lookup, k=1|spec-moe|--spec lookup --spec-k 1"
    "moe|moe q8_0, lookup, k=2|spec-moe|--spec lookup --spec-k 2"
    "moe|moe q8_0, lookup, k=4|spec-moe|--spec lookup --spec-k 4"
    "mem|moe q8_0 --mem 160M, no speculation|spec-moe|--mem 160M"
    "mem|moe q8_0 --mem 160M, lookup, adaptive|spec-moe|--mem 160M --spec lookup"
    "mem|moe q8_0 --mem 160M, lookup, k=1|spec-moe|--mem 160M --spec lookup --spec-k 1"
    "mem|moe q8_0 --mem 160M, lookup, k=2|spec-moe|--mem 160M --spec lookup --spec-k 2"
    "mem|moe q8_0 --mem 160M, lookup, k=4|spec-moe|--mem 160M --spec lookup --spec-k 4"
    "mtp|glm4moe q8_0, no speculation|spec-glm|"
    "mtp|glm4moe q8_0, MTP block, adaptive|spec-glm|--spec mtp"
    "mtp|glm4moe q8_0, MTP block, k=1|spec-glm|--spec mtp --spec-k 1"
    "mtp|glm4moe q8_0, MTP block, k=2|spec-glm|--spec mtp --spec-k 2"
    "mtpc|deepseek-v3 q8_0 chain, no speculation|spec-ds3-chain|"
    "mtpc|deepseek-v3 q8_0 chain, MTP block, adaptive|spec-ds3-chain|--spec mtp"
    "mtpc|deepseek-v3 q8_0 chain, MTP block, k=1|spec-ds3-chain|--spec mtp --spec-k 1"
    "mtpc|deepseek-v3 q8_0 chain, MTP block, k=2|spec-ds3-chain|--spec mtp --spec-k 2"
    "mtpc|deepseek-v3 q8_0 chain, MTP block, k=4|spec-ds3-chain|--spec mtp --spec-k 4"
    "mtpmem|deepseek-v3 q8_0 chain --mem 160M, no speculation|spec-ds3-chain|--mem 160M"
    "mtpmem|deepseek-v3 q8_0 chain --mem 160M, MTP block, adaptive|spec-ds3-chain|--mem 160M --spec mtp"
    "mtpmem|deepseek-v3 q8_0 chain --mem 160M, MTP block, k=0 (block kept)|spec-ds3-chain|--mem 160M --spec mtp --spec-k 0"
    "mtpmem|deepseek-v3 q8_0 chain --mem 160M, MTP block, k=1|spec-ds3-chain|--mem 160M --spec mtp --spec-k 1"
    "mtpmem|deepseek-v3 q8_0 chain --mem 160M, MTP block, k=2|spec-ds3-chain|--mem 160M --spec mtp --spec-k 2"
    "mtpmem|deepseek-v3 q8_0 chain --mem 160M, MTP block, k=4|spec-ds3-chain|--mem 160M --spec mtp --spec-k 4"
)
if [ -n "${SPEC_GROUPS:-}" ]; then # keep the configurations of the groups named
    KEEP=()
    for c in "${CONF[@]}"; do [[ " $SPEC_GROUPS " == *" ${c%%|*} "* ]] && KEEP+=("$c"); done
    CONF=("${KEEP[@]}")
fi
# MODEL ARGS...: one run; prints "tokens/s|k; kept|same|disk MiB/token|why"
one() {
    local model=$1; shift
    # shellcheck disable=SC2068
    "$D" run -m "$M/$model.gguf" -p "$P" -n "$N" --temp 0 --ignore-eos --hot none -t 2 $@ > "$T/out" 2> "$T/err" ||
        { echo "0|failed: $(tail -1 "$T/err")|-|-|-"; return; }
    local tps kept why same=
    tps=$(sed -n 's/^generation: *[0-9]* tokens *[0-9.]* s *\([0-9.]*\) tokens\/s/\1/p' "$T/err")
    kept=$(sed -n 's/^speculation: [a-zA-Z ]*, k=\([0-9]*\) ([a-z]*, at most [0-9]*): \([0-9]* of [0-9]*\) guesses kept in \([0-9]*\) passes.*/k=\1; \2 kept, \3 passes/p' "$T/err")
    why=$(sed -n 's/^speculation: why: //p' "$T/err")
    disk=$(sed -n 's/^steps: .* per generated token, \([0-9.]*\) MiB from disk.*/\1/p' "$T/err")
    [ -f "$T/plain-$model" ] || cp "$T/out" "$T/plain-$model"
    cmp -s "$T/out" "$T/plain-$model" && same=yes || same=NO
    echo "${tps:-0}|${kept:--}|$same|${disk:--}|${why:--}"
}
if [ -z "${SKIP_SPEC:-}" ]; then
ROUNDS=${ROUNDS:-1}
declare -A TPS=() INFO=()
for ((r = 1; r <= ROUNDS; r++)); do # alternating: every configuration once a round
    for i in "${!CONF[@]}"; do
        IFS='|' read -r _ _ model args <<< "${CONF[$i]}"
        out=$(one "$model" "$args")
        TPS[$i]+=" ${out%%|*}"
        [ "$r" -gt 1 ] || INFO[$i]=${out#*|}
    done
done
med() { tr ' ' '\n' <<< "$1" | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
echo "| configuration | generation tokens/s (each round) | median | chosen k; guesses kept | output = plain | MiB from disk per generated token (round 1) | why |"
echo "| --- | --- | ---: | --- | --- | ---: | --- |"
declare -A BEST=() ADAPT=()
for i in "${!CONF[@]}"; do
    IFS='|' read -r group name _ _ <<< "${CONF[$i]}"
    m=$(med "${TPS[$i]}")
    IFS='|' read -r kept same disk why <<< "${INFO[$i]}"
    echo "| $name |${TPS[$i]} | $m | $kept | $same | $disk | $why |"
    case $name in
        *adaptive*) ADAPT[$group]=$m ;;
        *) BEST[$group]=$(awk -v a="${BEST[$group]:-0}" -v b="$m" 'BEGIN { print (b > a) ? b : a }') ;;
    esac
done
echo
for g in dense moe mem mtp mtpc mtpmem; do
    [ -n "${ADAPT[$g]:-}" ] && [ -n "${BEST[$g]:-}" ] || continue
    awk -v g="$g" -v a="${ADAPT[$g]}" -v b="${BEST[$g]}" 'BEGIN {
        printf "%s: adaptive %.1f tokens/s, best fixed choice (off included) %.1f: %+.1f%%\n", g, a, b, 100 * (a / b - 1) }'
done
fi

# prompt cache: time to first token (the prompt's processing) without and with a cache
[ -n "${SKIP_CACHE:-}" ] && exit 0
L=$(for i in $(seq "${PC_LINES:-120}"); do printf "line %d of a long shared system prompt. " "$i"; done)
rm -f "$T/pc"
for r in 1 2; do
    "$D" run -m "$M/spec-dense.gguf" -p "$L" -n 8 -c 8192 --temp 0 --hot none -t 2 --prompt-cache "$T/pc" > "$T/pc-out$r" 2> "$T/pc-err$r"
done
p1=$(sed -n 's/^prompt: *\([0-9]*\) tokens *\([0-9.]*\) s.*/\1 tokens in \2 s/p' "$T/pc-err1")
p2=$(sed -n 's/^prompt: *\([0-9]*\) tokens *\([0-9.]*\) s.*/\1 tokens in \2 s/p' "$T/pc-err2")
echo
echo "prompt cache (dense f32, $(sed -n 's/^prompt cache: [0-9]* of \([0-9]*\).*/\1/p' "$T/pc-err1")-token prompt):" \
     "first run $p1; second run $p2; output identical: $(cmp -s "$T/pc-out1" "$T/pc-out2" && echo yes || echo NO)"
