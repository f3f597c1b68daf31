#!/usr/bin/env bash
# tiers.sh - a model's logits do not depend on the x86 tier (issue 30).
#   tests/cli/tiers.sh BUILD_DIR
# For a model of every weight type, the logits over a prompt of more than 16
# tokens (several tiles) with the kernel table capped at AVX2 (what a laptop
# without AVX-512 runs) are byte for byte those of the AVX-512 table, read in
# (packed where the type packs) and mapped. tests/test_matmul.c checks the
# kernels one by one; this checks the whole engine. Skipped without AVX-512.
set -u
B=${1:-build}
D="$B/deltafin"
T=$(mktemp -d /tmp/deltafin-tiers-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
if [ "$(uname -m)" != x86_64 ] || ! grep -qw avx512_vnni /proc/cpuinfo; then
    echo "SKIPPED: no AVX-512 here (the AVX2 table is the one tested)"; exit 0
fi
P="Once upon a time there was a little robot who lived in a garden full of tall flowers and singing birds"
for ty in q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K mxfp4 nvfp4 q1_0 q2_0 iq4_nl iq4_xs tq1_0 tq2_0 \
          iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s iq1_s iq1_m f16 bf16; do
    "$B/mkmodel" -o "$T/m.gguf" --preset tiny --type "$ty" 2>/dev/null || { echo "mkmodel $ty failed"; exit 1; }
    for io in --no-mmap --mmap; do
        DELTAFIN_ISA=avx2 "$D" logits -m "$T/m.gguf" -p "$P" $io --out "$T/avx2.f32" > /dev/null 2>&1
        DELTAFIN_ISA=avx512 "$D" logits -m "$T/m.gguf" -p "$P" $io --out "$T/avx512.f32" > /dev/null 2>&1
        check "$ty ($io): AVX2 == AVX-512, bit for bit" \
            eval 'test -s "$T/avx2.f32" && cmp -s "$T/avx2.f32" "$T/avx512.f32"'
    done
done
finish
