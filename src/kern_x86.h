/*
 * kern_x86.h - decoding helpers shared by kern_avx2.c and kern_avx512.c
 * (both compiled with at least -mavx2; never included elsewhere).
 *
 * DESIGN
 * Only the weight-format unpacking that both x86 kernel files need lives
 * here, as static inline functions on 128/256-bit vectors; the dot products
 * themselves stay in the per-ISA files, which differ in how they multiply
 * bytes (maddubs in AVX2, vpdpbusd in AVX-512).
 */
#ifndef DF_KERN_X86_H
#define DF_KERN_X86_H

#include "quant_isa.h"

#include <immintrin.h>

/* ggml's MXFP4 value table (doubled e2m1) as a pshufb lookup. */
static inline __m128i kx_mxfp4_table(void) { return _mm_loadu_si128((const __m128i *)(const void *)df_kvalues_mxfp4); }

/* The 64 two-bit codes of a q2_0 block (element 4b+t = bits 2t..2t+1 of
 * qs[b]) as bytes 0..3 in element order: lo = elements 0..31, hi = 32..63.
 * Split the four bit pairs of every byte into four vectors, then interleave
 * them back into element order with byte and word unpacks. */
static inline void kx_q2_0_codes(const uint8_t *qs, __m256i *lo, __m256i *hi) {
    const __m128i m3 = _mm_set1_epi8(3);
    const __m128i q = _mm_loadu_si128((const __m128i *)(const void *)qs);
    const __m128i v0 = _mm_and_si128(q, m3), v1 = _mm_and_si128(_mm_srli_epi16(q, 2), m3);
    const __m128i v2 = _mm_and_si128(_mm_srli_epi16(q, 4), m3), v3 = _mm_and_si128(_mm_srli_epi16(q, 6), m3);
    const __m128i a01 = _mm_unpacklo_epi8(v0, v1), a23 = _mm_unpacklo_epi8(v2, v3); /* bytes 0..7 */
    const __m128i b01 = _mm_unpackhi_epi8(v0, v1), b23 = _mm_unpackhi_epi8(v2, v3); /* bytes 8..15 */
    *lo = _mm256_set_m128i(_mm_unpackhi_epi16(a01, a23), _mm_unpacklo_epi16(a01, a23));
    *hi = _mm256_set_m128i(_mm_unpackhi_epi16(b01, b23), _mm_unpacklo_epi16(b01, b23));
}

#endif
