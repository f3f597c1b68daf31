#!/usr/bin/env bash
# compare.sh - Deltafin and llama.cpp side by side on the same GGUF files,
# with the memory-bandwidth bound for generation.
#
#   bench/compare.sh [-t THREADS] [-p PROMPT] [-n GEN] [-r REPS] [-s] [-V VARIANT]... [-I avx2] [MODEL.gguf ...]
#
# Without model arguments it benchmarks the default set, made once with
# tools/mkmodel into bench/results/models/ (gitignored; a few minutes each
# the first time):
#   stories260K        ../shared/models/stories260K.gguf (tiny: per-token overheads)
#   dense-1.8b-q4_K    llama-shaped, preset 1b with 40 layers (4096-token vocabulary, mkmodel's largest; ~1.0 GB)
#   dense-1.8b-q8_0    the same in q8_0 (~2 GB)
#   qwen3moe-4.8b-q4_K 64 experts (8 used) of 768, 16 layers, 2048 wide (~2.8 GB, 0.8 B active)
#   qwen35moe-1.3b-q4_K Qwen3.5-shaped: gated delta-net layers (32 value, 16 key heads of 128) and
#                      every fourth layer gated attention (16 heads of 256, 2 KV), 32 experts (8 used)
#                      of 512 plus a gated shared expert, 12 layers, 2048 wide
#   gpt-oss-2b-mxfp4   gpt-oss-shaped: attention sinks, a 128-token sliding window on every other
#                      layer (32 heads of 64, 8 KV), 32 MXFP4 experts (4 used) of 1536 with biases
#                      and swiglu_oai, q8_0 elsewhere, 12 layers, 2048 wide (~1.9 GB)
#   deepseek-5b-q4_K   DeepSeek-V3-shaped: MLA, 64 sigmoid-routed experts with groups, a shared
#                      expert and a dense first layer (~2.9 GB)
#   kimi-k3-2b-mxfp4   Kimi-K3-shaped: KDA and NoPE MLA layers 3:1, residual attention, a latent
#                      MoE of 64 MXFP4 experts (8 used) at half the width, q8_0 elsewhere (~1.5 GB)
# -s (small) uses the old medium-size models instead (quick checks).
#
# Method: the machine's read bandwidth is measured before and after the
# runs (bench/membw.c, THREADS threads, AVX2 loads, median of 15 passes over
# 1 GiB in transparent huge pages) and the higher of the two is used (the stricter bound). Then for each model the
# two engines run alternately REPS times (`deltafin bench -r 1` and the
# llama.cpp reference program's `bench -r 1`, each with one warm-up round,
# same THREADS, prompt of PROMPT tokens in one batch, GEN tokens generated
# one at a time, f16 KV cache in both, llama.cpp's flash attention off as
# in every comparison here), and the medians of the REPS runs are reported.
# The bandwidth bound of generation is bandwidth / bytes read per token:
# the weight bytes (for MoE only the experts a token uses: all tensor bytes
# minus the unused experts' bytes), less the token-embedding table, which a
# token reads one row of (estimated as n_vocab x n_embd at the file's
# average bits per weight; the table is not read at all when tied).
#
# llama.cpp runs the CPU variant a user gets by default (ggml's best for this
# processor; its name is recorded with the results); each -V VARIANT (e.g. -V
# haswell -V skylakex) also runs it with that variant, in extra columns.
# -I avx2 measures an AVX2-only laptop's figures on any newer x86 machine:
# Deltafin with its kernel table capped at AVX2 (DELTAFIN_ISA=avx2, as the
# test suite caps it), beside llama.cpp's `haswell` variant (what ggml loads
# on such a CPU) as the main llama.cpp column. The table Deltafin ran is
# recorded with the results either way. A run
# of either engine that crashes or fails is recorded as such ("crashed" in the
# table, 0 in the CSV) and the benchmark goes on with the next run and model.
#
# Output: a table on stdout, bench/results/compare.txt (the same table),
# bench/results/compare.csv, bench/results/compare.png (gnuplot, if
# installed), and a dated entry appended to bench/RESULTS.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
ARGS="$*"
T=2; P=512; N=128; R=3; SMALL=0; EXTRA_VARIANTS=(); CAP=
while getopts "t:p:n:r:sV:I:" o; do
    case $o in t) T=$OPTARG ;; p) P=$OPTARG ;; n) N=$OPTARG ;; r) R=$OPTARG ;; s) SMALL=1 ;;
               V) EXTRA_VARIANTS+=("$OPTARG") ;; I) CAP=$OPTARG ;; *) exit 2 ;; esac
done
DF_ENV=(); LL_VARIANT=() # -I avx2: Deltafin capped, llama.cpp's variant for such a CPU
case "$CAP" in
    "") ;;
    avx2) DF_ENV=(DELTAFIN_ISA=avx2); LL_VARIANT=(--cpu-variant haswell) ;;
    *) echo "compare.sh: -I takes avx2 (the tier below this machine's to measure), got '$CAP'" >&2; exit 2 ;;
esac
shift $((OPTIND - 1))
BUILD=${BUILD:-build}
SHARED=${DELTAFIN_SHARED:-../shared}
make -s BUILD="$BUILD" "$BUILD/deltafin" "$BUILD/mkmodel" >/dev/null
cc -O2 -march=native -std=c11 -Wall -Wextra -pthread -o "$BUILD/membw" bench/membw.c
./scripts/llama-ref.sh build >/dev/null
OUT=bench/results
mkdir -p "$OUT/models"

# name | mkmodel arguments
DEFAULT_SET=(
    "dense-1.8b-q4_K|--preset 1b --n-layer 40 --vocab 4096 --type q4_K"
    "dense-1.8b-q8_0|--preset 1b --n-layer 40 --vocab 4096 --type q8_0"
    "qwen3moe-4.8b-q4_K|--preset qwen3moe-tiny --n-embd 2048 --n-layer 16 --n-head 16 --n-head-kv 4 --experts 64 --experts-used 8 --n-ff-exp 768 --vocab 4096 --type q4_K"
    "kimi-k3-2b-mxfp4|--preset kimi-k3-tiny --type q8_0 --expert-type mxfp4 --n-embd 2048 --n-head 16 --n-head-kv 16 --kda-head-dim 128 --q-lora 512 --kv-lora 256 --qk-nope 128 --qk-rope 64 --v-head 128 --experts 64 --experts-used 8 --n-ff-exp 1024 --latent 1024 --n-ff 4096 --schedule KKKMKKKMKKKMKKKM --vocab 4096"
    "qwen35moe-1.3b-q4_K|--preset qwen35moe-tiny --n-embd 2048 --n-layer 12 --n-head 16 --n-head-kv 2 --head-dim 256 --rope-dims 64 --gdn-heads 32:16 --gdn-head-dim 128 --experts 32 --experts-used 8 --n-ff-exp 512 --n-ff-shexp 512 --n-ff 4096 --vocab 4096 --type q4_K"
    "gpt-oss-2b-mxfp4|--preset gpt-oss-tiny --n-embd 2048 --n-layer 12 --n-head 32 --n-head-kv 8 --head-dim 64 --swa 128 --experts 32 --experts-used 4 --n-ff-exp 1536 --vocab 4096 --type q8_0 --expert-type mxfp4"
    "deepseek-5b-q4_K|--preset deepseek-v3-tiny --n-embd 2048 --n-layer 16 --n-head 16 --q-lora 768 --kv-lora 512 --qk-nope 128 --qk-rope 64 --v-head 128 --experts 64 --experts-used 8 --n-ff-exp 768 --n-ff-shexp 768 --n-ff 5632 --vocab 4096 --type q4_K"
)
SMALL_SET=(
    "medium-q8_0|--preset medium --type q8_0"
    "medium-q4_K|--preset medium --type q4_K"
)
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
    [ -f "$SHARED/models/stories260K.gguf" ] && models+=("$SHARED/models/stories260K.gguf")
    if [ "$SMALL" = 1 ]; then set_=("${SMALL_SET[@]}"); else set_=("${DEFAULT_SET[@]}"); fi
    for e in "${set_[@]}"; do
        f="$OUT/models/${e%%|*}.gguf"
        if [ ! -f "$f" ]; then
            echo "making $f (once)..." >&2
            # shellcheck disable=SC2086
            "$BUILD/mkmodel" -o "$f.tmp" ${e#*|} >&2 && mv "$f.tmp" "$f"
        fi
        models+=("$f")
    done
fi

json() { sed -n "s/.*\"$2\":\([0-9.]*\).*/\1/p" <<< "$1"; }
jstr() { sed -n "s/.*\"$2\":\"\([^\"]*\)\".*/\1/p" <<< "$1"; }
median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "nan" }'; }

# Bytes of weights one generated token reads (see the header).
token_bytes() {
    "$BUILD/deltafin" info -m "$1" | awk '
        /^tensor bytes:/ { total = $3; bpw = $(NF - 1) }
        /embedding_length/ { E = $2 }
        /^tokenizer:/ { for (i = 1; i <= NF; i++) if ($(i) ~ /^tokens,?$/) V = $(i - 1) }
        /^experts:/ { X = $2; L = $6; K = $8 }
        /^one expert:/ { eb = $3 }
        END {
            active = total - (X > K ? (X - K) * eb * L : 0)
            printf "%.0f %.0f\n", active, V * E * bpw / 8
        }'
}
has_output() { # 1 if the file has its own output.weight (embedding not tied)
    { head -c 64M "$1" || true; } | grep -aq "output.weight" && echo 1 || echo 0
}

# Bandwidth before and after the runs (it drifts on a shared machine): the
# higher median, so the bound is the stricter one.
# membw -H: in transparent huge pages, as Deltafin holds its weights (df_alloc_big);
# on the machine of bench/RESULTS.md it reads ~15-25% faster than in small pages
BW1=$(json "$("$BUILD/membw" -t "$T" -r 15 -H)" median_gbs)
COMMIT=$(git rev-parse --short HEAD)$(git diff --quiet -- src include tools 2>/dev/null || echo "+dirty")
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
DATE=$(date -u +%F)
CSV="$OUT/compare.csv"
TXT="$OUT/compare.txt"
echo "model,bytes_per_token,df_pp,llama_pp,pp_ratio,df_tg,llama_tg,tg_ratio,bound_tg,df_frac_bound,llama_frac_bound" > "$CSV"
VARIANTS=()   # the llama.cpp CPU variant each run loaded (the user's default: ggml's best; -I: the capped tier's)
TABLES=()     # the kernel table each Deltafin run used
ROWS=$(mktemp)
trap 'rm -f "$ROWS"' EXIT
# One benchmark run; prints its JSON, or {"crashed":1} (and the reason on
# stderr) when the engine fails, so one crash does not end the comparison.
bench_run() { # WHO CMD...
    local who=$1 out rc=0; shift
    out=$("$@" 2> "$ROWS.err") || rc=$?
    if [ "$rc" -ne 0 ] || [ -z "$(json "$out" tg_tps)" ]; then
        echo "  $who failed (exit $rc): $(tail -2 "$ROWS.err" | tr '\n' ' ')" >&2
        echo '{"crashed":1}'
    else
        echo "$out"
    fi
}
val() { if grep -q crashed <<< "$1"; then echo crashed; else json "$1" "$2"; fi; } # JSON KEY
# medians of a list of numbers; "crashed" when any run crashed
med_or_crash() { if printf '%s\n' "$@" | grep -qx crashed; then echo crashed; else printf '%s\n' "$@" | median; fi; }
num() { [ "$1" = crashed ] && echo 0 || echo "$1"; }
for m in "${models[@]}"; do
    name=$(basename "$m" .gguf)
    read -r active emb < <(token_bytes "$m")
    [ "$(has_output "$m")" = 1 ] || emb=0
    bytes=$(awk -v a="$active" -v e="$emb" 'BEGIN { printf "%.0f", a - e }')
    dpp=(); lpp=(); dtg=(); ltg=(); declare -A xpp=() xtg=()
    for ((i = 0; i < R; i++)); do
        d=$(bench_run deltafin env "${DF_ENV[@]}" "$BUILD/deltafin" bench -m "$m" -t "$T" -p "$P" -n "$N" -r 1 --json)
        l=$(bench_run "llama.cpp (main variant)" ./scripts/llama-ref.sh -m "$m" bench -t "$T" -p "$P" -n "$N" -r 1 --kv-f16 \
            "${LL_VARIANT[@]}")
        for v in "${EXTRA_VARIANTS[@]}"; do
            x=$(bench_run "llama.cpp ($v)" ./scripts/llama-ref.sh -m "$m" bench -t "$T" -p "$P" -n "$N" -r 1 --kv-f16 --cpu-variant "$v")
            xpp[$v]+=" $(val "$x" pp_tps)"; xtg[$v]+=" $(val "$x" tg_tps)"
        done
        dpp+=("$(val "$d" pp_tps)"); dtg+=("$(val "$d" tg_tps)")
        lpp+=("$(val "$l" pp_tps)"); ltg+=("$(val "$l" tg_tps)")
        v=$(jstr "$l" cpu_variant); [ -n "$v" ] && VARIANTS+=("$v")
        v=$(jstr "$d" isa); [ -n "$v" ] && TABLES+=("$v")
    done
    Dpp=$(med_or_crash "${dpp[@]}"); Lpp=$(med_or_crash "${lpp[@]}")
    Dtg=$(med_or_crash "${dtg[@]}"); Ltg=$(med_or_crash "${ltg[@]}")
    extra=""
    for v in "${EXTRA_VARIANTS[@]}"; do
        # shellcheck disable=SC2086
        extra+=" $(med_or_crash ${xpp[$v]}) $(med_or_crash ${xtg[$v]})"
    done
    echo "$name $bytes $Dpp $Lpp $Dtg $Ltg$extra" >> "$ROWS"
    echo "  $name: pp $Dpp / $Lpp, tg $Dtg / $Ltg$([ -n "$extra" ] && echo ", other variants (pp tg):$extra")" >&2
done
BW2=$(json "$("$BUILD/membw" -t "$T" -r 15 -H)" median_gbs)
BW=$(awk -v a="$BW1" -v b="$BW2" 'BEGIN { print (a > b ? a : b) }')
VARIANT=$( (printf '%s\n' "${VARIANTS[@]}" | sort -u | paste -sd/) || true); VARIANT=${VARIANT:-unknown}
TABLE=$( (printf '%s\n' "${TABLES[@]}" | sort -u | paste -sd/) || true); TABLE=${TABLE:-unknown}
{
printf "# %s, commit %s, %s (%d CPUs), %d threads, pp%d / tg%d, median of %d alternating runs, read bandwidth %s GB/s (%s before, %s after), Deltafin's kernel table %s, llama.cpp CPU variant %s\n" \
    "$DATE" "$COMMIT" "$CPU" "$(nproc)" "$T" "$P" "$N" "$R" "$BW" "$BW1" "$BW2" "$TABLE" "$VARIANT"
printf "%-22s %9s %9s %6s %9s %9s %6s %9s %7s %7s" model df_pp llama_pp ratio df_tg llama_tg ratio bound_tg df/bnd ll/bnd
for v in "${EXTRA_VARIANTS[@]}"; do printf " %14s %14s" "pp[$v]" "tg[$v]"; done
echo
while read -r name bytes Dpp Lpp Dtg Ltg extra; do
    bound=$(awk -v bw="$BW" -v b="$bytes" 'BEGIN { printf "%.1f", bw * 1e9 / b }')
    printf "%-22s %9s %9s %6s %9s %9s %6s %9.1f %7s %7s" "$name" "$Dpp" "$Lpp" "$(div "$(num "$Dpp")" "$(num "$Lpp")")" \
        "$Dtg" "$Ltg" "$(div "$(num "$Dtg")" "$(num "$Ltg")")" "$bound" "$(div "$(num "$Dtg")" "$bound")" "$(div "$(num "$Ltg")" "$bound")"
    # shellcheck disable=SC2086
    for x in $extra; do printf " %14s" "$x"; done
    echo
    echo "$name,$bytes,$(num "$Dpp"),$(num "$Lpp"),$(div "$(num "$Dpp")" "$(num "$Lpp")"),$(num "$Dtg"),$(num "$Ltg"),$(div "$(num "$Dtg")" "$(num "$Ltg")"),$bound,$(div "$(num "$Dtg")" "$bound"),$(div "$(num "$Ltg")" "$bound")" >> "$CSV"
done < "$ROWS"
} | tee "$TXT"

if command -v gnuplot >/dev/null; then
    gnuplot <<EOF
set terminal pngcairo size 1200,520 font ",10" noenhanced
set output "$OUT/compare.png"
set datafile separator ","
set multiplot layout 1,2 title "Deltafin vs llama.cpp, $T threads ($CPU), commit $COMMIT, $DATE"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set xrange [-0.6:*]
set xtics rotate by -25 scale 0
set grid ytics
set key top right
set title "prompt processing (pp$P)"
set ylabel "tokens/s (log)"
set logscale y
plot "$CSV" every ::1 using 3:xtic(1) title "Deltafin" lc rgb "#1f77b4", "" every ::1 using 4 title "llama.cpp" lc rgb "#ff7f0e"
set title "generation (tg$N) and the bandwidth bound ($BW GB/s)"
plot "$CSV" every ::1 using 6:xtic(1) title "Deltafin" lc rgb "#1f77b4", "" every ::1 using 7 title "llama.cpp" lc rgb "#ff7f0e", \
     "" every ::1 using 9 title "bandwidth bound" lc rgb "#999999"
unset multiplot
EOF
fi

{
    echo
    echo "## $DATE — bench/compare.sh (commit $COMMIT)"
    echo
    echo "\`bench/compare.sh $ARGS\` (-t $T -p $P -n $N -r $R) at commit $COMMIT, $CPU ($(nproc) CPUs), $T threads,"
    echo "read bandwidth $BW GB/s (bench/membw.c -H, higher of the medians before/after: $BW1, $BW2). Medians of $R alternating runs; bound = bandwidth / bytes per token."
    if [ -n "$CAP" ]; then
        echo "Capped at $CAP (\`-I $CAP\`): Deltafin's kernel table \`$TABLE\` (DELTAFIN_ISA=$CAP), llama.cpp's \`$VARIANT\` variant (what ggml loads on such a CPU)."
    else
        echo "Deltafin's kernel table \`$TABLE\`; llama.cpp ran its default CPU variant for this machine, \`$VARIANT\` (what a user gets; the reference program's \`bench\` loads ggml's best)."
    fi
    echo
    echo "| model | MB/token | Deltafin pp t/s | llama.cpp pp t/s | ratio | Deltafin tg t/s | llama.cpp tg t/s | ratio | tg bound | Deltafin / bound | llama.cpp / bound |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    tail -n +2 "$CSV" | awk -F, '{ printf "| %s | %.0f | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f | %.1f | %.2f | %.2f |\n", $1, $2 / 1e6, $3, $4, $5, $6, $7, $8, $9, $10, $11 }'
    echo
    echo "(0 in a speed column: that engine crashed or failed on the model; see the run's log.)"
    if [ ${#EXTRA_VARIANTS[@]} -gt 0 ]; then
        echo
        echo "llama.cpp with other CPU variants (pp t/s, tg t/s): $(while read -r name _ _ _ _ _ extra; do printf '%s: %s; ' "$name" "$extra"; done < "$ROWS")"
    fi
} >> bench/RESULTS.md
echo "wrote $TXT, $CSV$(command -v gnuplot >/dev/null && echo ", $OUT/compare.png"), appended to bench/RESULTS.md" >&2
