#!/usr/bin/env bash
# amx.sh - the AMX kernels selected end to end (tests/cli/amx.sh BUILD_DIR).
# DELTAFIN_AMX=model runs the whole engine with the AMX table on the
# software tile model (kern_amx.c / amx_gemm.c), on any machine: a q8_0
# model's logits over a prompt of more than 16 tokens (several token tiles)
# and its greedy text, and the logits of mxfp4, q4_0, iq4_nl, q4_K, q5_K and q6_K models read in
# (packed) and mapped, are byte for byte those without AMX (the AMX gemms
# keep the other tables' float order), and DELTAFIN_AMX=off changes nothing
# where the CPU has no AMX.
set -euo pipefail
B=${1:-build}
D="$B/deltafin"
T=$(mktemp -d /tmp/deltafin-amx-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"

"$B/mkmodel" -o "$T/m.gguf" --preset deepseek-v3-tiny --type q8_0 2>/dev/null || { echo "mkmodel failed"; exit 1; }
P="Once upon a time there was a little robot who lived in a garden full of tall flowers and singing birds, and every day"
DELTAFIN_AMX=off "$D" logits -m "$T/m.gguf" -p "$P" --out "$T/off.f32" > /dev/null 2>&1
DELTAFIN_AMX=model "$D" logits -m "$T/m.gguf" -p "$P" --out "$T/model.f32" > /dev/null 2>&1
check "logits written" test -s "$T/off.f32"
check "q8_0 logits: AMX model == no AMX, bit for bit" cmp -s "$T/off.f32" "$T/model.f32"
# the other AMX gemms, in a model read in (packed: gemm_packed) and mapped (the file's rows: gemm)
for ty in mxfp4 q4_0 iq4_nl q4_K q5_K q6_K; do
    "$B/mkmodel" -o "$T/$ty.gguf" --preset small --type "$ty" 2>/dev/null || { echo "mkmodel $ty failed"; exit 1; }
    for io in --no-mmap --mmap; do
        DELTAFIN_AMX=off "$D" logits -m "$T/$ty.gguf" -p "$P" $io --out "$T/off.f32" > /dev/null 2>&1
        DELTAFIN_AMX=model "$D" logits -m "$T/$ty.gguf" -p "$P" $io --out "$T/model.f32" > /dev/null 2>&1
        check "$ty logits ($io): AMX model == no AMX, bit for bit" \
            eval 'test -s "$T/off.f32" && cmp -s "$T/off.f32" "$T/model.f32"'
    done
done
a=$(DELTAFIN_AMX=off "$D" run -m "$T/m.gguf" -p "$P" -n 12 --temp 0 2>/dev/null)
b=$(DELTAFIN_AMX=model "$D" run -m "$T/m.gguf" -p "$P" -n 12 --temp 0 2>/dev/null)
check "greedy text: AMX model == no AMX" test "$a" = "$b"
check "greedy text is not empty" test -n "$a"
e=$(DELTAFIN_AMX=model "$D" run -m "$T/m.gguf" -p hi -n 1 2>&1 >/dev/null)
check "DELTAFIN_AMX=model: the run reports isa amx" contains "$e" "isa: amx"
e=$(DELTAFIN_AMX=off "$D" run -m "$T/m.gguf" -p hi -n 1 2>&1 >/dev/null)
check "DELTAFIN_AMX=off: not amx" lacks "$e" "isa: amx"
e=$(DELTAFIN_ISA=avx512 "$D" run -m "$T/m.gguf" -p hi -n 1 2>&1 >/dev/null)
check "a DELTAFIN_ISA cap leaves the AMX hardware out" lacks "$e" "isa: amx"
e=$(DELTAFIN_ISA=avx2 DELTAFIN_AMX=model "$D" run -m "$T/m.gguf" -p hi -n 1 2>&1 >/dev/null)
check "DELTAFIN_AMX=model under a cap: the tile model on the capped base, as on such a CPU" contains "$e" "isa: amx"
finish
