#!/usr/bin/env bash
# compare.sh - Deltafin and llama.cpp side by side on the same GGUF files.
#
#   bench/compare.sh [-t THREADS] [-p PROMPT] [-n GEN] [-r REPS] [MODEL.gguf ...]
#
# Without model arguments it uses ../shared/models/stories260K.gguf and makes
# two llama-shaped models with tools/mkmodel (preset "medium", ~150M
# parameters, at q8_0 and q4_K) into bench/results/models/. For each model it
# runs `deltafin bench` and the llama.cpp reference program's `bench`
# (same threads, same prompt/generation lengths, median of REPS runs each,
# alternating the two engines), then prints tokens/s of both and the ratio
# Deltafin / llama.cpp. The table is also written to bench/results/compare.txt.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
T=2; P=512; N=128; R=3
while getopts "t:p:n:r:" o; do
    case $o in t) T=$OPTARG ;; p) P=$OPTARG ;; n) N=$OPTARG ;; r) R=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
BUILD=${BUILD:-build}
make -s BUILD="$BUILD" "$BUILD/deltafin" "$BUILD/mkmodel" >/dev/null
./scripts/llama-ref.sh build >/dev/null
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    mkdir -p bench/results/models
    for t in q8_0 q4_K; do
        f=bench/results/models/medium-$t.gguf
        [ -f "$f" ] || "$BUILD/mkmodel" -o "$f" --preset medium --type "$t"
        models+=("$f")
    done
    models=("${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf" "${models[@]}")
fi
json() { sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" <<< "$1"; }
out=bench/results/compare.txt
{
printf "# %s, commit %s, %s, %d threads, pp%d / tg%d, median of %d\n" "$(date -u +%F)" \
    "$(git rev-parse --short HEAD)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$T" "$P" "$N" "$R"
printf "%-28s %10s %10s %7s %10s %10s %7s\n" model df_pp llama_pp ratio df_tg llama_tg ratio
for m in "${models[@]}"; do
    d=$("$BUILD/deltafin" bench -m "$m" -t "$T" -p "$P" -n "$N" -r "$R" --json)
    l=$(./scripts/llama-ref.sh -m "$m" bench -t "$T" -p "$P" -n "$N" -r "$R")
    dpp=$(json "$d" pp_tps); lpp=$(json "$l" pp_tps); dtg=$(json "$d" tg_tps); ltg=$(json "$l" tg_tps)
    printf "%-28s %10.1f %10.1f %7.2f %10.1f %10.1f %7.2f\n" "$(basename "$m")" "$dpp" "$lpp" \
        "$(awk -v a="$dpp" -v b="$lpp" 'BEGIN{print a/b}')" "$dtg" "$ltg" "$(awk -v a="$dtg" -v b="$ltg" 'BEGIN{print a/b}')"
done
} | tee "$out"
