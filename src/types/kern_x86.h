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
#include <stddef.h>
#include <string.h>

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

/* The codes of two nvfp4 sub-blocks (16 bytes: 8 per sub-block, element
 * j the low nibble, j + 8 the high one) as 32 bytes in element order. */
static inline __m256i kx_nvfp4_codes(const uint8_t *qs) {
    const __m128i m4 = _mm_set1_epi8(0x0F), q = _mm_loadu_si128((const __m128i *)(const void *)qs);
    const __m128i lo = _mm_and_si128(q, m4), hi = _mm_and_si128(_mm_srli_epi16(q, 4), m4);
    return _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi));
}

/* ggml's IQ4_NL table (kvalues_iq4nl) as a pshufb lookup. */
static inline __m128i kx_iq4nl_table(void) { return _mm_loadu_si128((const __m128i *)(const void *)df_kvalues_iq4nl); }

/* Bytes q -> (uint8_t)(q * 3): the next base-3 digit moves to the top. */
static inline __m256i kx_mul3(__m256i q) { return _mm256_add_epi8(q, _mm256_add_epi8(q, q)); }

/* Leading trit of each byte q, minus 1: ((q * 3) >> 8) - 1 is -1 below
 * 86, 0 below 171, else 1; computed as -1 - [q >= 86] - [q >= 171] with
 * the comparisons' all-ones masks. */
static inline __m256i kx_trit_m1(__m256i q) {
    const __m256i m1 = _mm256_cmpeq_epi8(_mm256_max_epu8(q, _mm256_set1_epi8(86)), q);
    const __m256i m2 = _mm256_cmpeq_epi8(_mm256_max_epu8(q, _mm256_set1_epi8((char)171)), q);
    return _mm256_sub_epi8(_mm256_sub_epi8(_mm256_set1_epi8(-1), m1), m2);
}

/* The 256 values (-1, 0, 1) of a tq1_0 block in element order, 32 per
 * vector: qs[0..31] give elements 0..159 (one trit per vector); the two
 * halves of [qs[32..47] * 3^n, * 3^(n+1)] give 160 + 16n ..; the last
 * vector is qs[32..47] * 81 (elements 224..239) and the qh trits (element
 * 240 + 4n + j: dword n of the high half holds qh[j] * 3^n). */
static inline void kx_tq1_0_values(const block_tq1_0 *b, __m256i v[8]) {
    __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)b->qs);
    for (int n = 0; n < 5; n++, q = kx_mul3(q)) v[n] = kx_trit_m1(q);
    const __m128i q1 = _mm_loadu_si128((const __m128i *)(const void *)(b->qs + 32));
    __m256i p = _mm256_set_m128i(_mm256_castsi256_si128(kx_mul3(_mm256_castsi128_si256(q1))), q1);
    v[5] = kx_trit_m1(p);
    p = kx_mul3(kx_mul3(p));
    v[6] = kx_trit_m1(p);
    uint32_t h;
    memcpy(&h, b->qh, 4);
    __m256i hv = _mm256_set1_epi32((int)h);
    const __m256i h3 = kx_mul3(hv), h9 = kx_mul3(h3), h27 = kx_mul3(h9);
    hv = _mm256_blend_epi32(_mm256_blend_epi32(hv, h3, 0x22), _mm256_blend_epi32(h9, h27, 0x88), 0xcc);
    p = _mm256_permute2x128_si256(kx_mul3(kx_mul3(p)), hv, 0x20); /* low: q1 * 81, high: qh trits */
    v[7] = kx_trit_m1(p);
}

/* The 256 values code - 1 of a tq2_0 block in element order, 32 per
 * vector: element 128h + 32l + m is bits 2l.. of qs[32h + m]. ggml's
 * quantizer writes codes 0..2; a foreign code 3 decodes to 2. */
static inline void kx_tq2_0_values(const block_tq2_0 *b, __m256i v[8]) {
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(b->qs + 32 * h));
        v[4 * h] = _mm256_sub_epi8(_mm256_and_si256(q, m3), one);
        v[4 * h + 1] = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(q, 2), m3), one);
        v[4 * h + 2] = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(q, 4), m3), one);
        v[4 * h + 3] = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(q, 6), m3), one);
    }
}

/* A row of tq1_0 / tq2_0 blocks: each block's 256 values (the functions
 * above), then dotfn(values, q8_K block, weight d) from the including file,
 * which also provides h2f. */
#define KX_TQ_ROW_DOT(name, btype, values, dotfn)                          \
    static void name(int64_t n, const void *w, const void *x, float *out) { \
        const btype *a = w;                                                 \
        const block_q8_K *b = x;                                            \
        float sum = 0;                                                      \
        __m256i v[8];                                                       \
        for (int64_t i = 0; i < n / QK_K; i++) {                            \
            values(&a[i], v);                                               \
            sum += dotfn(v, &b[i], h2f(a[i].d));                            \
        }                                                                   \
        *out = sum;                                                         \
    }

/* Block scale readers of the 4-bit table formats (the files' lut4_dot):
 * mxfp4's E8M0 byte, iq4_nl's f16 d. */
static inline float kx_mxfp4_wd(const uint8_t *blk) { return quant_e8m0_half(blk[0]); }
static inline float kx_iq4_nl_wd(const uint8_t *blk) {
    uint16_t d;
    memcpy(&d, blk, 2);
    return _cvtsh_ss(d);
}

/* The mxfp4 and iq4_nl row dots and the grid i-quants' per-type vec_dot
 * functions, on top of the including file's lut4_dot and iq_grid_dot. */
#define KX_TABLE_TYPE_DOTS                                                                                       \
    static void mxfp4_dot(int64_t n, const void *w, const void *x, float *out) {                                 \
        lut4_dot(n, w, sizeof(block_mxfp4), offsetof(block_mxfp4, qs), kx_mxfp4_table(), kx_mxfp4_wd, x, out);    \
    }                                                                                                            \
    static void iq4_nl_dot(int64_t n, const void *w, const void *x, float *out) {                                \
        lut4_dot(n, w, sizeof(block_iq4_nl), offsetof(block_iq4_nl, qs), kx_iq4nl_table(), kx_iq4_nl_wd, x, out); \
    }
#define KX_IQ_GRID_DOT(pfx, id) \
    static void pfx##_dot(int64_t n, const void *w, const void *x, float *out) { iq_grid_dot(n, w, x, out, id); }
#define KX_IQ_GRID_DOTS                         \
    KX_IQ_GRID_DOT(iq2_xxs, DF_TYPE_IQ2_XXS)    \
    KX_IQ_GRID_DOT(iq2_xs, DF_TYPE_IQ2_XS)      \
    KX_IQ_GRID_DOT(iq2_s, DF_TYPE_IQ2_S)        \
    KX_IQ_GRID_DOT(iq3_xxs, DF_TYPE_IQ3_XXS)    \
    KX_IQ_GRID_DOT(iq3_s, DF_TYPE_IQ3_S)        \
    KX_IQ_GRID_DOT(iq1_s, DF_TYPE_IQ1_S)        \
    KX_IQ_GRID_DOT(iq1_m, DF_TYPE_IQ1_M)

#endif
