/*
 * kern_x86.h - decoding helpers shared by kern_avx2.c and kern_avx512.c
 * (both compiled with at least -mavx2; never included elsewhere).
 *
 * DESIGN
 * Only the weight-format unpacking that both x86 kernel files need lives
 * here, as static inline functions on 128/256-bit vectors, and the walks of
 * the packed gemms over their groups and tokens (pack.h); the dot products
 * themselves stay in the per-ISA files, which differ in how they multiply
 * bytes (maddubs in AVX2, vpdpbusd in AVX-512).
 */
#ifndef DF_KERN_X86_H
#define DF_KERN_X86_H

#include "pack.h"
#include "quant_grids.h"
#include "quant_isa.h"

#include <cpuid.h>
#include <immintrin.h>
#include <stddef.h>
#include <string.h>

/* 1 if the CPU is Intel's: the packed K-quant tiles for one token are tuned by vendor (kern_avx2.c
 * kq_one_prefetch, kern_avx512.c kq_one_256), from measurements on each (bench/RESULTS.md 2026-12-07). */
static inline int kx_cpu_intel(void) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid(0, &a, &b, &c, &d) && b == 0x756e6547u && d == 0x49656e69u && c == 0x6c65746eu; /* GenuineIntel */
}

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

/* A K-quant super-block's bytes, and its f16 scale d and min dmin (0 for q3_K and q6_K, which have none): what
 * the K-quant tiles of kern_avx2.c (kq_tile) and kern_avx512.c (t5_kmin, t5_koff) read of each row. */
static inline size_t kx_k_size(const int type) {
    switch (type) {
    case DF_TYPE_Q2_K: return sizeof(block_q2_K);
    case DF_TYPE_Q3_K: return sizeof(block_q3_K);
    case DF_TYPE_Q4_K: return sizeof(block_q4_K);
    case DF_TYPE_Q5_K: return sizeof(block_q5_K);
    default: return sizeof(block_q6_K);
    }
}

static inline void kx_k_scales(const int type, const uint8_t *blk, uint16_t *d, uint16_t *dmin) {
    const void *b = blk;
    switch (type) {
    case DF_TYPE_Q2_K: *d = ((const block_q2_K *)b)->d, *dmin = ((const block_q2_K *)b)->dmin; break;
    case DF_TYPE_Q3_K: *d = ((const block_q3_K *)b)->d, *dmin = 0; break;
    case DF_TYPE_Q4_K: *d = ((const block_q4_K *)b)->d, *dmin = ((const block_q4_K *)b)->dmin; break;
    case DF_TYPE_Q5_K: *d = ((const block_q5_K *)b)->d, *dmin = ((const block_q5_K *)b)->dmin; break;
    default: *d = ((const block_q6_K *)b)->d, *dmin = 0; break;
    }
}
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
/* ---------------------------------------------------------------------- */
/* Grid i-quants, decoded in vectors (quant.c documents the layouts).
 *
 * A 32-element sub-block ib is decoded into unsigned magnitudes u (the grid
 * bytes, looked up 8 or 4 at a time as 64/32-bit words) plus a sign word
 * (bit 8l + j negates element 8l + j): the kernels apply the signs to the
 * activations instead of the weights, so u * y goes straight into maddubs /
 * vpdpbusd (unsigned x signed). The scales ls (per 16 elements, int16) and
 * d come from the block's head. The integer sums are quant.c's:
 * iq1's q = 8 * grid + delta enters as u = q + 9 = 8 * (grid + 1) + delta + 1
 * (0..18), and 9 * ls * (the activations' 16-element sums, q8_K's bsums)
 * is subtracted once per block (KX_IQ_OFF9). */

/* Four ggml ksigns bytes from four 7-bit fields (byte l = field l): bit 7
 * is the field's parity (per-byte xor folding; bit 7 of x is clear). */
static inline uint32_t kx_ksigns_bytes(uint32_t x) {
    uint32_t p = x ^ (x >> 4);
    p ^= p >> 2;
    p ^= p >> 1;
    return x | (p & 0x01010101u) << 7;
}
/* The four sign bytes of the 28 low bits of w (fields of 7 bits). */
static inline uint32_t kx_ksigns4(uint32_t w) {
    return kx_ksigns_bytes((w & 0x7Fu) | (w << 1 & 0x7F00u) | (w << 2 & 0x7F0000u) | (w << 3 & 0x7F000000u));
}
static inline uint32_t kx_rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline float kx_h2f(uint16_t h) { return _cvtsh_ss(h); }

#define KX_G64(g, i0, i1, i2, i3) _mm256_set_epi64x((long long)(g)[i3], (long long)(g)[i2], (long long)(g)[i1], (long long)(g)[i0])
#define KX_G32(g, q, f)                                                                                          \
    _mm256_set_epi32((int)(g)[f(q, 7)], (int)(g)[f(q, 6)], (int)(g)[f(q, 5)], (int)(g)[f(q, 4)], (int)(g)[f(q, 3)], \
                     (int)(g)[f(q, 2)], (int)(g)[f(q, 1)], (int)(g)[f(q, 0)])

/* iq2_xxs: ls = 2 * (w >> 28) + 1 per sub-block, w the 32 bits after its four grid indices. */
static inline float kx_iq2_xxs_head(const void *blk, int16_t ls[16]) {
    const block_iq2_xxs *b = blk;
    for (int ib = 0; ib < 8; ib++) ls[2 * ib] = ls[2 * ib + 1] = (int16_t)(2 * (kx_rd32((const uint8_t *)b->qs + 8 * ib + 4) >> 28) + 1);
    return kx_h2f(b->d);
}
static inline __m256i kx_iq2_xxs_sub(const void *blk, int ib, uint32_t *sg) {
    const uint8_t *q = (const uint8_t *)((const block_iq2_xxs *)blk)->qs + 8 * ib;
    *sg = kx_ksigns4(kx_rd32(q + 4));
    return KX_G64(df_iq2xxs_grid, q[0], q[1], q[2], q[3]);
}

/* iq2_xs / iq2_s: two 4-bit scale fields per sub-block. */
static inline void kx_iq_ls_nibbles(const uint8_t *sc, int16_t ls[16]) {
    for (int ib = 0; ib < 8; ib++) {
        ls[2 * ib] = (int16_t)(2 * (sc[ib] & 0xF) + 1);
        ls[2 * ib + 1] = (int16_t)(2 * (sc[ib] >> 4) + 1);
    }
}
static inline float kx_iq2_xs_head(const void *blk, int16_t ls[16]) {
    const block_iq2_xs *b = blk;
    kx_iq_ls_nibbles(b->scales, ls);
    return kx_h2f(b->d);
}
static inline __m256i kx_iq2_xs_sub(const void *blk, int ib, uint32_t *sg) {
    const uint16_t *q = ((const block_iq2_xs *)blk)->qs + 4 * ib;
    *sg = kx_ksigns_bytes((uint32_t)(q[0] >> 9) | (uint32_t)(q[1] >> 9) << 8 | (uint32_t)(q[2] >> 9) << 16 |
                          (uint32_t)(q[3] >> 9) << 24);
    return KX_G64(df_iq2xs_grid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511);
}
static inline float kx_iq2_s_head(const void *blk, int16_t ls[16]) {
    const block_iq2_s *b = blk;
    kx_iq_ls_nibbles(b->scales, ls);
    return kx_h2f(b->d);
}
static inline __m256i kx_iq2_s_sub(const void *blk, int ib, uint32_t *sg) {
    const block_iq2_s *b = blk;
    const uint8_t *q = b->qs + 4 * ib;
    const unsigned h = b->qh[ib];
    *sg = kx_rd32(b->qs + 32 + 4 * ib);
    return KX_G64(df_iq2s_grid, q[0] | (h << 8 & 0x300), q[1] | (h << 6 & 0x300), q[2] | (h << 4 & 0x300),
                  q[3] | (h << 2 & 0x300));
}

/* iq3_xxs: eight 4-byte grid entries; signs and ls as iq2_xxs. */
static inline float kx_iq3_xxs_head(const void *blk, int16_t ls[16]) {
    const block_iq3_xxs *b = blk;
    for (int ib = 0; ib < 8; ib++) ls[2 * ib] = ls[2 * ib + 1] = (int16_t)(2 * (kx_rd32(b->qs + 64 + 4 * ib) >> 28) + 1);
    return kx_h2f(b->d);
}
#define KX_IQ3XXS_IDX(q, k) (q)[k]
static inline __m256i kx_iq3_xxs_sub(const void *blk, int ib, uint32_t *sg) {
    const block_iq3_xxs *b = blk;
    const uint8_t *q = b->qs + 8 * ib;
    *sg = kx_ksigns4(kx_rd32(b->qs + 64 + 4 * ib));
    return KX_G32(df_iq3xxs_grid, q, KX_IQ3XXS_IDX);
}

/* iq3_s: 9-bit indices (bit k of qh[ib] on top of qs[8ib + k]), plain sign bytes. */
static inline float kx_iq3_s_head(const void *blk, int16_t ls[16]) {
    const block_iq3_s *b = blk;
    for (int ib = 0; ib < 8; ib++) ls[2 * ib] = ls[2 * ib + 1] = (int16_t)(2 * ((b->scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1);
    return kx_h2f(b->d);
}
#define KX_IQ3S_IDX(q, k) ((q)[k] | (h << (8 - (k)) & 0x100u))
static inline __m256i kx_iq3_s_sub(const void *blk, int ib, uint32_t *sg) {
    const block_iq3_s *b = blk;
    const uint8_t *q = b->qs + 8 * ib;
    const unsigned h = b->qh[ib];
    *sg = kx_rd32(b->signs + 4 * ib);
    return KX_G32(df_iq3s_grid, q, KX_IQ3S_IDX);
}

/* iq1: signed grid bytes g (-1, 0, 1) -> 8 * (g + 1) + dp, dp = delta + 1
 * (0 or 2 per 8 elements, a byte vector). */
static inline __m256i kx_iq1_u(__m256i g, __m256i dp) {
    return _mm256_add_epi8(_mm256_slli_epi16(_mm256_add_epi8(g, _mm256_set1_epi8(1)), 3), dp);
}
static inline float kx_iq1_s_head(const void *blk, int16_t ls[16]) {
    const block_iq1_s *b = blk;
    for (int ib = 0; ib < 8; ib++) ls[2 * ib] = ls[2 * ib + 1] = (int16_t)(2 * ((b->qh[ib] >> 12) & 7) + 1);
    return kx_h2f(b->d);
}
static inline __m256i kx_iq1_s_sub(const void *blk, int ib, uint32_t *sg) {
    const block_iq1_s *b = blk;
    const uint8_t *q = b->qs + 4 * ib;
    const unsigned h = b->qh[ib];
    *sg = 0;
    const __m256i g = KX_G64(df_iq1s_grid, q[0] | (h << 8 & 0x700), q[1] | (h << 5 & 0x700), q[2] | (h << 2 & 0x700),
                             q[3] | (h >> 1 & 0x700));
    return kx_iq1_u(g, _mm256_set1_epi8(h & 0x8000 ? 0 : 2));
}
static inline float kx_iq1_m_head(const void *blk, int16_t ls[16]) { return kx_h2f(quant_iq1_m_head(blk, ls)); }
static inline __m256i kx_iq1_m_sub(const void *blk, int ib, uint32_t *sg) {
    const block_iq1_m *b = blk;
    const uint8_t *q = b->qs + 4 * ib;
    const unsigned h0 = b->qh[2 * ib], h1 = b->qh[2 * ib + 1];
    *sg = 0;
    const __m256i g = KX_G64(df_iq1s_grid, q[0] | (h0 << 8 & 0x700), q[1] | (h0 << 4 & 0x700), q[2] | (h1 << 8 & 0x700),
                             q[3] | (h1 << 4 & 0x700));
    const long long two = 0x0202020202020202LL;
    return kx_iq1_u(g, _mm256_set_epi64x(h1 & 0x80 ? 0 : two, h1 & 0x08 ? 0 : two, h0 & 0x80 ? 0 : two, h0 & 0x08 ? 0 : two));
}

/* vec_dot and gemm of a grid i-quant from the including file's
 * name##_tile(n, row, x, x_stride, out, NC): one weight row against NC <= 4
 * activation rows, every block decoded once for all of them. vec_dot is
 * the NC = 1 instance and each output goes through the same arithmetic
 * whatever NC, so the gemm keeps quant.h's tiling contract. */
#define KX_IQ_ENTRY_POINTS(name, btype)                                                                       \
    static void name(int64_t n, const void *w, const void *x, float *out) {                                  \
        name##_tile(n, (const btype *)w, (const uint8_t *)x, 0, out, 1);                                     \
    }                                                                                                         \
    static void name##_gemm(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,   \
                            float *y, size_t ldy) {                                                           \
        for (int r = 0; r < nr; r++) {                                                                        \
            const btype *a = (const btype *)(const void *)((const uint8_t *)w + (size_t)r * ws);              \
            for (int c0 = 0; c0 < nc; c0 += 4) {                                                              \
                const uint8_t *xp = (const uint8_t *)x + (size_t)c0 * xs;                                     \
                float o[4];                                                                                   \
                const int cn = nc - c0 < 4 ? nc - c0 : 4;                                                     \
                if (cn == 4) name##_tile(n, a, xp, xs, o, 4);                                                 \
                else if (cn == 3) name##_tile(n, a, xp, xs, o, 3);                                            \
                else if (cn == 2) name##_tile(n, a, xp, xs, o, 2);                                            \
                else name##_tile(n, a, xp, xs, o, 1);                                                         \
                for (int c = 0; c < cn; c++) y[(size_t)(c0 + c) * ldy + (size_t)r] = o[c];                    \
            }                                                                                                 \
        }                                                                                                     \
    }

/* The per-type row dots, on top of the including file's KX_IQ_ROW(name,
 * head, sub, has_signs, off9, factor, block type) macro, which defines
 * name##_tile and expands KX_IQ_ENTRY_POINTS: name (vec_dot) and name##_gemm. */
#define KX_IQ_GRID_DOTS                                                          \
    KX_IQ_ROW(iq2_xxs_dot, kx_iq2_xxs_head, kx_iq2_xxs_sub, 1, 0, 0.125f, block_iq2_xxs)    \
    KX_IQ_ROW(iq2_xs_dot, kx_iq2_xs_head, kx_iq2_xs_sub, 1, 0, 0.125f, block_iq2_xs)       \
    KX_IQ_ROW(iq2_s_dot, kx_iq2_s_head, kx_iq2_s_sub, 1, 0, 0.125f, block_iq2_s)          \
    KX_IQ_ROW(iq3_xxs_dot, kx_iq3_xxs_head, kx_iq3_xxs_sub, 1, 0, 0.25f, block_iq3_xxs)     \
    KX_IQ_ROW(iq3_s_dot, kx_iq3_s_head, kx_iq3_s_sub, 1, 0, 1.0f, block_iq3_s)           \
    KX_IQ_ROW(iq1_s_dot, kx_iq1_s_head, kx_iq1_s_sub, 0, 1, 0.125f, block_iq1_s)          \
    KX_IQ_ROW(iq1_m_dot, kx_iq1_m_head, kx_iq1_m_sub, 0, 1, 0.125f, block_iq1_m)

/* ---- packed gemms (pack.h): the walk both tiers' packed kernels share ---- */

/* Per token c: its q8_0 blocks, trailer sums and scales (pack.h's trailer). */
typedef struct {
    const block_q8_0 *x[4];
    const int32_t *corr[4];
    const float *dx[4];
} p16_x;

/* One packed group of 16 rows x C tokens (the table's entry C - 1): out[16 c + r]. */
typedef void (*p16_tile_fn)(int64_t nb, const uint8_t *g, const p16_x *X, float *out);

/* nr / 16 packed groups x nc tokens, tokens in groups of up to cmax (<= 4)
 * inside each group (its weights stay in L1/L2 for the next ones). */
static inline void p16_walk(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                            size_t ldy, const p16_tile_fn *tiles, const int cmax) {
    const int64_t nb = n / 32;
    const size_t toff = pack_q8_0_trailer_off(nb);
    for (int r0 = 0; r0 + PACK_ROWS <= nr; r0 += PACK_ROWS) {
        const uint8_t *g = (const uint8_t *)w + (size_t)r0 * ws;
        for (int c0 = 0; c0 < nc; c0 += cmax) {
            const int cn = nc - c0 < cmax ? nc - c0 : cmax;
            p16_x X;
            for (int c = 0; c < cn; c++) {
                const uint8_t *xr = (const uint8_t *)x + (size_t)(c0 + c) * xs;
                X.x[c] = (const block_q8_0 *)(const void *)xr;
                X.corr[c] = (const int32_t *)(const void *)(xr + toff);
                X.dx[c] = (const float *)(const void *)(xr + toff + 4 * (size_t)nb);
            }
            float out[4 * PACK_ROWS];
            tiles[cn - 1](nb, g, &X, out);
            for (int c = 0; c < cn; c++)
                memcpy(y + (size_t)(c0 + c) * ldy + r0, out + PACK_ROWS * c, PACK_ROWS * sizeof(float));
        }
    }
}

/* NAME_1 .. NAME_4 and NAME_gemm (walking p16_walk, up to CMAX tokens a tile) from the tile body
 * NAME_tile(nb, g, X, out, C). */
#define P16_GEMM(NAME, CMAX)                                                                                       \
    static void NAME##_1(int64_t nb, const uint8_t *g, const p16_x *X, float *o) { NAME##_tile(nb, g, X, o, 1); }  \
    static void NAME##_2(int64_t nb, const uint8_t *g, const p16_x *X, float *o) { NAME##_tile(nb, g, X, o, 2); }  \
    static void NAME##_3(int64_t nb, const uint8_t *g, const p16_x *X, float *o) { NAME##_tile(nb, g, X, o, 3); }  \
    static void NAME##_4(int64_t nb, const uint8_t *g, const p16_x *X, float *o) { NAME##_tile(nb, g, X, o, 4); }  \
    static void NAME##_gemm(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,          \
                            float *y, size_t ldy) {                                                                 \
        static const p16_tile_fn tiles[4] = {NAME##_1, NAME##_2, NAME##_3, NAME##_4};                               \
        p16_walk(n, w, ws, nr, x, xs, nc, y, ldy, tiles, CMAX);                                                     \
    }

/* The K-quant packed gemms: nr / 16 groups x nc tokens in groups of up to cmax (<= 4). */
typedef void (*p16_k_fn)(int64_t n, const uint8_t *g, const uint8_t *x, size_t xs, float *out);
static inline void p16_k_walk(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,
                              float *y, size_t ldy, const p16_k_fn *tiles, const int cmax) {
    for (int r0 = 0; r0 + PACK_ROWS <= nr; r0 += PACK_ROWS)
        for (int c0 = 0; c0 < nc; c0 += cmax) {
            const int cn = nc - c0 < cmax ? nc - c0 : cmax;
            float out[4 * 16];
            tiles[cn - 1](n, (const uint8_t *)w + (size_t)r0 * ws, (const uint8_t *)x + (size_t)c0 * xs, xs, out);
            for (int c = 0; c < cn; c++) memcpy(y + (size_t)(c0 + c) * ldy + r0, out + 16 * c, 16 * sizeof(float));
        }
    _mm256_zeroupper();
}
/* NAME_gemm from the tile body NAME_tile(nsb, g, x, xs, out, C), C <= CMAX tokens a tile. */
#define P16_K_GEMM(NAME, CMAX)                                                                                     \
    static void NAME##_1(int64_t n, const uint8_t *g, const uint8_t *x, size_t xs, float *o) { NAME##_tile(n / QK_K, g, x, xs, o, 1); } \
    static void NAME##_2(int64_t n, const uint8_t *g, const uint8_t *x, size_t xs, float *o) { NAME##_tile(n / QK_K, g, x, xs, o, 2); } \
    static void NAME##_3(int64_t n, const uint8_t *g, const uint8_t *x, size_t xs, float *o) { NAME##_tile(n / QK_K, g, x, xs, o, 3); } \
    static void NAME##_4(int64_t n, const uint8_t *g, const uint8_t *x, size_t xs, float *o) { NAME##_tile(n / QK_K, g, x, xs, o, 4); } \
    static void NAME##_gemm(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,  \
                            size_t ldy) {                                                                           \
        static const p16_k_fn tiles[4] = {NAME##_1, NAME##_2, (CMAX) > 2 ? NAME##_3 : NULL,                         \
                                          (CMAX) > 3 ? NAME##_4 : NULL}; /* past CMAX: not built */               \
        p16_k_walk(n, w, ws, nr, x, xs, nc, y, ldy, tiles, CMAX);                                                   \
    }

/* q4_K_SUF_gemm and q5_K_SUF_gemm from the tile body K45(nsb, g, x, xs, out, C, q5) both K-quants share. */
#define P16_K45_GEMMS(SUF, K45, CMAX)                                                                              \
    static inline __attribute__((always_inline)) void q4_K_##SUF##_tile(int64_t nsb, const uint8_t *g,            \
                                                                         const uint8_t *x, size_t xs, float *out,  \
                                                                         const int C) {                            \
        K45(nsb, g, x, xs, out, C, 0);                                                                             \
    }                                                                                                              \
    static inline __attribute__((always_inline)) void q5_K_##SUF##_tile(int64_t nsb, const uint8_t *g,            \
                                                                         const uint8_t *x, size_t xs, float *out,  \
                                                                         const int C) {                            \
        K45(nsb, g, x, xs, out, C, 1);                                                                             \
    }                                                                                                              \
    P16_K_GEMM(q4_K_##SUF, CMAX)                                                                                   \
    P16_K_GEMM(q5_K_##SUF, CMAX)

#endif
