#!/usr/bin/env bash
# plan-memory.sh - how close `deltafin plan`'s tokens/s is to the run's for models that fit in memory (issue
# 39 item 3 where the prediction is the memory's alone), on bench/compare.sh's default models.
#
#   bench/plan-memory.sh [-t THREADS] [-n TOKENS] [-r REPS] [-I avx2] [-O OLD_DELTAFIN] [MODEL.gguf ...]
#
# For each model, REPS times in turn: `plan --json` (no --mem: every weight in memory, so the prediction is
# the bytes a token reads over the memory rate plan measured), then `deltafin bench -p 16 -n TOKENS` (the
# measurement); with -O, the same plan by another build (the "before" of a change) in the same turn. Prints
# a line per model (medians: planned, measured, measured / planned, the memory rate plan measured) and
# appends the table to bench/RESULTS.md. -I avx2 caps Deltafin's kernel table (DELTAFIN_ISA) for plan and
# run alike. The models are compare.sh's (made there, once; run it first, or name files). Run on a quiet
# machine: no build or test beside it.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
T=2; N=128; R=3; CAP=""; OLD=""
while getopts "t:n:r:I:O:" o; do
    case $o in t) T=$OPTARG ;; n) N=$OPTARG ;; r) R=$OPTARG ;; I) CAP=$OPTARG ;; O) OLD=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
case "$CAP" in "") ENV=() ;; avx2) ENV=(DELTAFIN_ISA=avx2) ;; *) echo "plan-memory.sh: -I takes avx2" >&2; exit 2 ;; esac
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/deltafin" >/dev/null
D=./"$BUILD"/deltafin
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    for n in dense-1.8b-q4_K dense-1.8b-q8_0 qwen3moe-4.8b-q4_K kimi-k3-2b-mxfp4 qwen35moe-1.3b-q4_K gpt-oss-2b-mxfp4 \
             deepseek-5b-q4_K; do
        f=bench/results/models/$n.gguf
        [ -f "$f" ] || { echo "plan-memory.sh: $f is missing: bench/compare.sh makes it" >&2; exit 1; }
        models+=("$f")
    done
fi
json() { sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p" <<< "$1"; }
median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
fam=$(sed -n 's/^cpu family[[:space:]]*: //p' /proc/cpuinfo | head -1); mod=$(sed -n 's/^model[[:space:]]*: //p' /proc/cpuinfo | head -1)
flags=$(grep -o -w 'avx512f\|amx_tile' /proc/cpuinfo | sort -u | paste -sd, -)
head="$(date -u +%F), commit $(git rev-parse --short HEAD), $cpu (family $fam model $mod; ${flags:-avx2 or less}), $T threads, tg$N, medians of $R, kernel table ${CAP:-best}"
echo "# $head"
rows=""
for m in "${models[@]}"; do
    name=$(basename "$m" .gguf)
    pl=(); old=(); run=(); mem=(); oldmem=()
    for ((i = 0; i < R; i++)); do
        j=$(env "${ENV[@]}" "$D" plan -m "$m" -t "$T" --json 2> /dev/null)
        pl+=("$(json "$j" predicted_tokens_per_s)"); mem+=("$(json "$j" memory_bytes_per_s)")
        if [ -n "$OLD" ]; then
            o=$(env "${ENV[@]}" "$OLD" plan -m "$m" -t "$T" --json 2> /dev/null)
            old+=("$(json "$o" predicted_tokens_per_s)"); oldmem+=("$(json "$o" memory_bytes_per_s)")
        fi
        b=$(env "${ENV[@]}" "$D" bench -m "$m" -t "$T" -p 16 -n "$N" -r 1 --json)
        run+=("$(json "$b" tg_tps)")
    done
    P=$(printf '%s\n' "${pl[@]}" | median); M=$(printf '%s\n' "${run[@]}" | median)
    G=$(printf '%s\n' "${mem[@]}" | median)
    row=$(awk -v n="$name" -v p="$P" -v m="$M" -v g="$G" 'BEGIN { printf "| %s | %.2f | %.2f | **%.2f** | %.1f |", n, p, m, m / p, g / 1e9 }')
    if [ -n "$OLD" ]; then
        OP=$(printf '%s\n' "${old[@]}" | median); OG=$(printf '%s\n' "${oldmem[@]}" | median)
        row+=$(awk -v p="$OP" -v m="$M" -v g="$OG" 'BEGIN { printf " %.2f | %.2f | %.1f |", p, m / p, g / 1e9 }')
    fi
    echo "$row"
    rows+="$row"$'\n'
done
{
    echo
    echo "## $(date -u +%F) — plan in memory: predicted and measured generation (bench/plan-memory.sh)"
    echo
    echo "\`bench/plan-memory.sh -t $T -n $N -r $R${CAP:+ -I $CAP}${OLD:+ -O OLD}\`"
    echo
    echo "$head"
    echo
    if [ -n "$OLD" ]; then
        echo "| model | plan tokens/s | measured | measured / plan | memory GB/s (plan's probe) | before: plan | measured / plan | memory GB/s |"
        echo "|---|---|---|---|---|---|---|---|"
    else
        echo "| model | plan tokens/s | measured | measured / plan | memory GB/s (plan's probe) |"
        echo "|---|---|---|---|---|"
    fi
    printf '%s' "$rows"
} >> bench/RESULTS.md
