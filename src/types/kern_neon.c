/*
 * kern_neon.c - AArch64 NEON kernels (aarch64 builds only; NEON is part of
 * the base architecture, so these are always used there).
 *
 * DESIGN
 * - NEON multiplies signed bytes by signed bytes, so weight values are
 *   formed as their true signed value (q4_0: nibble - 8, ...) and dotted
 *   directly with the int8 activations; no offset correction is needed
 *   (but for q6_K, whose unsigned values' products and offset products are
 *   x86's partial sums: q6_K_dot). mxfp4 values come from ggml's table by vqtbl1q, q1_0's +-1 from
 *   its sign bits, q2_0's code - 1 from zipped bit pairs, iq4_nl/iq4_xs
 *   values from ggml's kvalues_iq4nl by vqtbl1q, tq1_0's trits by byte
 *   compares after wrapping multiplies by 3, tq2_0's from bit pairs; the
 *   grid i-quants' signed values from 64/32-bit grid words with their sign
 *   bits applied as byte masks (iqn_*, the same q as quant.c's decoder). The
 *   per-block integer sums are exactly the scalar reference's.
 * - The byte dot product (16 int8 pairs -> 4 int32 partial sums) has two
 *   implementations: ARMv8.0 (smull/smull2 + sadalp) and the ARMv8.2 dotprod
 *   extension (sdot). The kernel bodies are written once, in the second half
 *   of this file, which the first half includes twice (KN_PASS 1 and 2) with
 *   a different KN_DOT and function-name suffix. kern_neon_fill picks the
 *   sdot set when getauxval(AT_HWCAP) reports ASIMDDP.
 * - Only the total over the 16 lanes of a vector matters (each vector lies
 *   within one scale group), so the two dot implementations' different lane
 *   groupings give identical results.
 * - K-quant sub-block sums are scaled in int32 vectors (vmlaq_n_s32) and
 *   converted to float once per super-block.
 * - q8_0, q4_0, mxfp4, iq4_nl, q4_K, q5_K and q6_K accumulate their floats
 *   in the x86 gemms' order (kern_avx2.c, "Matrix products"), so a token's
 *   logits are the same bits on every tier: per row and token, block by
 *   block, acc = fma(float(S), dw * dx, acc) with S the block's exact
 *   integer sum; for q4_K and q5_K accS = fma(S, d * dx, accS) and accM =
 *   fma(M, -dmin * dx, accM) per super-block (M: the mins times the
 *   activation sums), and accS + accM; for q6_K the same with its partial
 *   sums P0 and P1 (q6_K_dot). tests/test_matmul.c checks every table
 *   against that order written with fmaf.
 * - Packed gemms (pack.h's layout) for q8_0, mxfp4, q4_K, q5_K and q6_K: a
 *   group's 16 rows as four vectors of 4 lanes, a line's 4 bytes of a row
 *   meeting the activation's 4 matching bytes (a broadcast) in the row's
 *   lane (rdot: sdot, or smull + sadalp into two vectors whose pairwise sum
 *   gives the lanes), no reduction across lanes; the same bits as the
 *   vec_dots above. q8_0's lines hold w ^ 0x80 (x86's unsigned operand),
 *   xor-ed back to the signed bytes; the trailer pack.h puts after the
 *   activations is not needed here.
 * - Activation quantizers round with FCVTNS (to nearest, ties to even) and
 *   f16 conversion uses FCVT, matching the scalar reference bit for bit.
 */
#ifndef KN_PASS

#include "pack.h"
#include "quant_grids.h"
#include "quant_isa.h"

#include <arm_neon.h>
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <sys/auxv.h>

#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif

static inline float h2f(uint16_t h) {
    __fp16 t;
    memcpy(&t, &h, 2);
    return (float)t;
}

static inline uint16_t f2h(float f) {
    __fp16 t = (__fp16)f;
    uint16_t h;
    memcpy(&h, &t, 2);
    return h;
}

/* Byte masks (0xFF where set) for 16 consecutive bits of qh, starting at bit 16*half. */
static inline uint8x16_t bits16(uint32_t qh, int half) {
    static const uint8_t bm[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    uint32_t b = qh >> (16 * half);
    uint8x16_t v = vcombine_u8(vdup_n_u8((uint8_t)b), vdup_n_u8((uint8_t)(b >> 8)));
    return vtstq_u8(v, vld1q_u8(bm));
}

static inline uint32_t load_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* q1_0: 16 sign bits (bits 16*half.. of bits) -> bytes +1 (set) or -1 (clear). */
static inline int8x16_t q1_0_signs(uint32_t bits, int half) {
    return vreinterpretq_s8_u8(vorrq_u8(vmvnq_u8(bits16(bits, half)), vdupq_n_u8(1)));
}

/* q2_0: the 64 values code - 1 of a block in element order (element 4b+t is
 * bits 2t..2t+1 of qs[b]): split the four bit pairs, zip them back. */
static inline void q2_0_values(const uint8_t *qs, int8x16_t v[4]) {
    const uint8x16_t m3 = vdupq_n_u8(3);
    const int8x16_t one = vdupq_n_s8(1);
    const uint8x16_t q = vld1q_u8(qs);
    const uint8x16x2_t z01 = vzipq_u8(vandq_u8(q, m3), vandq_u8(vshrq_n_u8(q, 2), m3));
    const uint8x16x2_t z23 = vzipq_u8(vandq_u8(vshrq_n_u8(q, 4), m3), vshrq_n_u8(q, 6));
    for (int h = 0; h < 2; h++) {
        uint16x8x2_t z = vzipq_u16(vreinterpretq_u16_u8(z01.val[h]), vreinterpretq_u16_u8(z23.val[h]));
        v[2 * h] = vsubq_s8(vreinterpretq_s8_u16(z.val[0]), one);
        v[2 * h + 1] = vsubq_s8(vreinterpretq_s8_u16(z.val[1]), one);
    }
}

/* Block scales of the 4-bit table formats: mxfp4's E8M0 byte, iq4_nl's f16. */
static inline float mxfp4_wd(const uint8_t *blk) { return quant_e8m0_half(blk[0]); }
static inline float iq4_nl_wd(const uint8_t *blk) {
    uint16_t d;
    memcpy(&d, blk, 2);
    return h2f(d);
}

/* Leading trit of each byte q, minus 1: ((q * 3) >> 8) - 1, i.e. -1 below
 * 86, 0 below 171, else 1 (tq1_0), from the comparisons' all-ones masks. */
static inline int8x16_t tq_trit_m1(uint8x16_t q) {
    const int8x16_t m1 = vreinterpretq_s8_u8(vcgeq_u8(q, vdupq_n_u8(86)));
    const int8x16_t m2 = vreinterpretq_s8_u8(vcgeq_u8(q, vdupq_n_u8(171)));
    return vsubq_s8(vsubq_s8(vdupq_n_s8(-1), m1), m2);
}

/* Bytes q -> (uint8_t)(q * 3): the next base-3 digit moves to the top. */
static inline uint8x16_t tq_mul3(uint8x16_t q) { return vmulq_u8(q, vdupq_n_u8(3)); }

/* The 16 qh trits of a tq1_0 block (element 240 + 4n + j is trit n of
 * qh[j]): dword n holds qh * 3^n, bytewise, so every leading trit is one. */
static inline int8x16_t tq1_0_qh_values(const uint8_t *qh) {
    static const uint8_t pw[16] = {1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27};
    return tq_trit_m1(vmulq_u8(vreinterpretq_u8_u32(vdupq_n_u32(load_u32(qh))), vld1q_u8(pw)));
}

/* ---------------------------------------------------------------------- */
/* Grid i-quants, decoded in vectors (quant.c documents the layouts). A
 * 32-element sub-block ib becomes two vectors of signed values, exactly
 * quant.c's decoder's q (grid magnitudes with their signs; iq1: 8 * grid
 * + delta); the head gives the scales ls per 16 elements and d. Grid
 * entries are looked up as 64-bit (iq2, iq1) or 32-bit (iq3) words. */

/* ggml's ksigns byte of a 7-bit field: bit 7 is its parity. */
static inline uint32_t iqn_ksigns(uint32_t f) { return (f & 127u) | (uint32_t)__builtin_parity(f & 127u) << 7; }
/* The sign word (bit 8l + j negates element 8l + j) of four 7-bit fields. */
static inline uint32_t iqn_ksigns4(uint32_t w) {
    return iqn_ksigns(w) | iqn_ksigns(w >> 7) << 8 | iqn_ksigns(w >> 14) << 16 | iqn_ksigns(w >> 21) << 24;
}
/* Magnitudes m with the signs of 16 bits of sg (bits 16*half..). */
static inline int8x16_t iqn_signed(int8x16_t m, uint32_t sg, int half) {
    const int8x16_t neg = vreinterpretq_s8_u8(bits16(sg, half));
    return vsubq_s8(veorq_s8(m, neg), neg);
}
static inline int8x16_t iqn_g64(const uint64_t *g, unsigned i0, unsigned i1) {
    return vreinterpretq_s8_u64(vcombine_u64(vcreate_u64(g[i0]), vcreate_u64(g[i1])));
}
static inline int8x16_t iqn_g32(const uint32_t *g, unsigned i0, unsigned i1, unsigned i2, unsigned i3) {
    const uint32_t t[4] = {g[i0], g[i1], g[i2], g[i3]};
    return vreinterpretq_s8_u32(vld1q_u32(t));
}
/* Four 64-bit grid entries with the signs of sg, as two vectors. */
static inline void iqn_put64(int8x16_t v[2], const uint64_t *g, const unsigned i[4], uint32_t sg) {
    v[0] = iqn_signed(iqn_g64(g, i[0], i[1]), sg, 0);
    v[1] = iqn_signed(iqn_g64(g, i[2], i[3]), sg, 1);
}
/* ls = 2 * field + 1, the same for both 16-element halves of sub-block ib. */
static inline void iqn_ls32(int16_t ls[16], int ib, unsigned field) { ls[2 * ib] = ls[2 * ib + 1] = (int16_t)(2 * field + 1); }

static inline float iqn_iq2_xxs_head(const void *blk, int16_t ls[16]) {
    const block_iq2_xxs *b = blk;
    for (int ib = 0; ib < 8; ib++) iqn_ls32(ls, ib, load_u32((const uint8_t *)b->qs + 8 * ib + 4) >> 28);
    return h2f(b->d);
}
static inline void iqn_iq2_xxs_sub(const void *blk, int ib, int8x16_t v[2]) {
    const uint8_t *q = (const uint8_t *)((const block_iq2_xxs *)blk)->qs + 8 * ib;
    const unsigned i[4] = {q[0], q[1], q[2], q[3]};
    iqn_put64(v, df_iq2xxs_grid, i, iqn_ksigns4(load_u32(q + 4)));
}
/* iq2_xs / iq2_s: two 4-bit scale fields per sub-block. */
static inline float iqn_nibble_ls(const uint8_t *sc, uint16_t d, int16_t ls[16]) {
    for (int ib = 0; ib < 8; ib++) {
        ls[2 * ib] = (int16_t)(2 * (sc[ib] & 0xF) + 1);
        ls[2 * ib + 1] = (int16_t)(2 * (sc[ib] >> 4) + 1);
    }
    return h2f(d);
}
static inline float iqn_iq2_xs_head(const void *blk, int16_t ls[16]) {
    const block_iq2_xs *b = blk;
    return iqn_nibble_ls(b->scales, b->d, ls);
}
static inline void iqn_iq2_xs_sub(const void *blk, int ib, int8x16_t v[2]) {
    const uint16_t *q = ((const block_iq2_xs *)blk)->qs + 4 * ib;
    const unsigned i[4] = {q[0] & 511u, q[1] & 511u, q[2] & 511u, q[3] & 511u};
    const uint32_t sg = iqn_ksigns(q[0] >> 9) | iqn_ksigns(q[1] >> 9) << 8 | iqn_ksigns(q[2] >> 9) << 16 | iqn_ksigns(q[3] >> 9) << 24;
    iqn_put64(v, df_iq2xs_grid, i, sg);
}
static inline float iqn_iq2_s_head(const void *blk, int16_t ls[16]) {
    const block_iq2_s *b = blk;
    return iqn_nibble_ls(b->scales, b->d, ls);
}
static inline void iqn_iq2_s_sub(const void *blk, int ib, int8x16_t v[2]) {
    const block_iq2_s *b = blk;
    const uint8_t *q = b->qs + 4 * ib;
    const unsigned h = b->qh[ib];
    const unsigned i[4] = {q[0] | (h << 8 & 0x300u), q[1] | (h << 6 & 0x300u), q[2] | (h << 4 & 0x300u), q[3] | (h << 2 & 0x300u)};
    iqn_put64(v, df_iq2s_grid, i, load_u32(b->qs + 32 + 4 * ib));
}
/* iq3: eight 4-byte entries per sub-block; element 8l + j (j < 4) from
 * entry 2l, 8l + 4 + j from entry 2l + 1, so the sign bits line up. */
static inline float iqn_iq3_xxs_head(const void *blk, int16_t ls[16]) {
    const block_iq3_xxs *b = blk;
    for (int ib = 0; ib < 8; ib++) iqn_ls32(ls, ib, load_u32(b->qs + 64 + 4 * ib) >> 28);
    return h2f(b->d);
}
static inline void iqn_iq3_xxs_sub(const void *blk, int ib, int8x16_t v[2]) {
    const block_iq3_xxs *b = blk;
    const uint8_t *q = b->qs + 8 * ib;
    const uint32_t sg = iqn_ksigns4(load_u32(b->qs + 64 + 4 * ib));
    v[0] = iqn_signed(iqn_g32(df_iq3xxs_grid, q[0], q[1], q[2], q[3]), sg, 0);
    v[1] = iqn_signed(iqn_g32(df_iq3xxs_grid, q[4], q[5], q[6], q[7]), sg, 1);
}
static inline float iqn_iq3_s_head(const void *blk, int16_t ls[16]) {
    const block_iq3_s *b = blk;
    for (int ib = 0; ib < 8; ib++) iqn_ls32(ls, ib, (b->scales[ib / 2] >> (4 * (ib % 2))) & 0xFu);
    return h2f(b->d);
}
static inline void iqn_iq3_s_sub(const void *blk, int ib, int8x16_t v[2]) {
    const block_iq3_s *b = blk;
    const uint8_t *q = b->qs + 8 * ib;
    const unsigned h = b->qh[ib];
    unsigned i[8];
    for (int k = 0; k < 8; k++) i[k] = q[k] | (h << (8 - k) & 0x100u);
    const uint32_t sg = load_u32(b->signs + 4 * ib);
    v[0] = iqn_signed(iqn_g32(df_iq3s_grid, i[0], i[1], i[2], i[3]), sg, 0);
    v[1] = iqn_signed(iqn_g32(df_iq3s_grid, i[4], i[5], i[6], i[7]), sg, 1);
}
/* iq1: signed grid bytes g (-1, 0, 1) -> 8 * g + delta (delta +-1 per 8 elements). */
static inline int8x16_t iqn_iq1(int8x16_t g, int8x16_t delta) { return vaddq_s8(vshlq_n_s8(g, 3), delta); }
static inline float iqn_iq1_s_head(const void *blk, int16_t ls[16]) {
    const block_iq1_s *b = blk;
    for (int ib = 0; ib < 8; ib++) iqn_ls32(ls, ib, (b->qh[ib] >> 12) & 7u);
    return h2f(b->d);
}
static inline void iqn_iq1_s_sub(const void *blk, int ib, int8x16_t v[2]) {
    const block_iq1_s *b = blk;
    const uint8_t *q = b->qs + 4 * ib;
    const unsigned h = b->qh[ib];
    const int8x16_t delta = vdupq_n_s8(h & 0x8000 ? -1 : 1);
    v[0] = iqn_iq1(iqn_g64(df_iq1s_grid, q[0] | (h << 8 & 0x700u), q[1] | (h << 5 & 0x700u)), delta);
    v[1] = iqn_iq1(iqn_g64(df_iq1s_grid, q[2] | (h << 2 & 0x700u), q[3] | (h >> 1 & 0x700u)), delta);
}
static inline float iqn_iq1_m_head(const void *blk, int16_t ls[16]) { return h2f(quant_iq1_m_head(blk, ls)); }
static inline int8x16_t iqn_iq1_m_delta(unsigned h) {
    return vcombine_s8(vdup_n_s8(h & 0x08 ? -1 : 1), vdup_n_s8(h & 0x80 ? -1 : 1));
}
static inline void iqn_iq1_m_sub(const void *blk, int ib, int8x16_t v[2]) {
    const block_iq1_m *b = blk;
    const uint8_t *q = b->qs + 4 * ib;
    const unsigned h0 = b->qh[2 * ib], h1 = b->qh[2 * ib + 1];
    v[0] = iqn_iq1(iqn_g64(df_iq1s_grid, q[0] | (h0 << 8 & 0x700u), q[1] | (h0 << 4 & 0x700u)), iqn_iq1_m_delta(h0));
    v[1] = iqn_iq1(iqn_g64(df_iq1s_grid, q[2] | (h1 << 8 & 0x700u), q[3] | (h1 << 4 & 0x700u)), iqn_iq1_m_delta(h1));
}

/* ---------------------------------------------------------------------- */
/* f32, f16, bf16 */

static void f32_dot(int64_t n, const void *w, const void *x, float *out) {
    const float *a = w, *b = x;
    float32x4_t s0 = vdupq_n_f32(0), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
        s1 = vfmaq_f32(s1, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
        s2 = vfmaq_f32(s2, vld1q_f32(a + i + 8), vld1q_f32(b + i + 8));
        s3 = vfmaq_f32(s3, vld1q_f32(a + i + 12), vld1q_f32(b + i + 12));
    }
    for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, vld1q_f32(a + i), vld1q_f32(b + i));
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    *out = s;
}

static inline float32x4_t h4(const uint16_t *p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p))); }

static void f16_dot(int64_t n, const void *w, const void *x, float *out) {
    const uint16_t *a = w, *b = x;
    float32x4_t s0 = vdupq_n_f32(0), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = vfmaq_f32(s0, h4(a + i), h4(b + i));
        s1 = vfmaq_f32(s1, h4(a + i + 4), h4(b + i + 4));
        s2 = vfmaq_f32(s2, h4(a + i + 8), h4(b + i + 8));
        s3 = vfmaq_f32(s3, h4(a + i + 12), h4(b + i + 12));
    }
    for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, h4(a + i), h4(b + i));
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
    for (; i < n; i++) s += h2f(a[i]) * h2f(b[i]);
    *out = s;
}

static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, h4(s + i));
    for (; i < n; i++) dst[i] = h2f(s[i]);
}

static void f16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1_u16(d + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(src + i))));
    for (; i < n; i++) d[i] = f2h(src[i]);
}

static inline float32x4_t bf4(const uint16_t *p) { return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16)); }
static inline float bf2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }

static void bf16_dot(int64_t n, const void *w, const void *x, float *out) {
    const uint16_t *a = w, *b = x;
    float32x4_t s0 = vdupq_n_f32(0), s1 = s0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        s0 = vfmaq_f32(s0, bf4(a + i), bf4(b + i));
        s1 = vfmaq_f32(s1, bf4(a + i + 4), bf4(b + i + 4));
    }
    for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, bf4(a + i), bf4(b + i));
    float s = vaddvq_f32(vaddq_f32(s0, s1));
    for (; i < n; i++) s += bf2f(a[i]) * bf2f(b[i]);
    *out = s;
}

static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(dst + i, bf4(s + i));
    for (; i < n; i++) dst[i] = bf2f(s[i]);
}

/* ---------------------------------------------------------------------- */
/* Activation quantizers */

/* 16 floats times mul, rounded to nearest-even int8 (|values| <= 127). */
static inline int8x16_t round16_i8(const float *x, float mul) {
    int32x4_t a = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x), mul));
    int32x4_t b = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 4), mul));
    int32x4_t c = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 8), mul));
    int32x4_t d = vcvtnq_s32_f32(vmulq_n_f32(vld1q_f32(x + 12), mul));
    int16x8_t ab = vcombine_s16(vmovn_s32(a), vmovn_s32(b)), cd = vcombine_s16(vmovn_s32(c), vmovn_s32(d));
    return vcombine_s8(vmovn_s16(ab), vmovn_s16(cd));
}

static inline float amax_n(const float *x, int n) {
    float32x4_t m = vdupq_n_f32(0);
    for (int j = 0; j < n; j += 4) m = vmaxq_f32(m, vabsq_f32(vld1q_f32(x + j)));
    return vmaxvq_f32(m);
}

static void q8_0_quant(const float *src, void *dst, int64_t n) {
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, src += QK8_0) {
        float amax = amax_n(src, QK8_0);
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        b[i].d = f2h(amax / 127.0f);
        vst1q_s8(b[i].qs, round16_i8(src, id));
        vst1q_s8(b[i].qs + 16, round16_i8(src + 16, id));
    }
}

static void q8_1_quant(const float *src, void *dst, int64_t n) {
    block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK8_1; i++, src += QK8_1) {
        float amax = amax_n(src, QK8_1);
        float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int8x16_t q0 = round16_i8(src, id), q1 = round16_i8(src + 16, id);
        vst1q_s8(b[i].qs, q0);
        vst1q_s8(b[i].qs + 16, q1);
        int sum = vaddlvq_s8(q0) + vaddlvq_s8(q1);
        b[i].d = f2h(d);
        b[i].s = f2h(d * (float)sum);
    }
}

static void q8_K_quant(const float *src, void *dst, int64_t n) {
    block_q8_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float amax = amax_n(src, QK_K);
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float mx = 0;
        for (int j = 0; j < QK_K; j++) /* first element of largest magnitude */
            if (fabsf(src[j]) == amax) { mx = src[j]; break; }
        float iscale = -127.0f / mx;
        for (int j = 0; j < QK_K; j += 16) {
            int8x16_t q = round16_i8(src + j, iscale);
            vst1q_s8(b[i].qs + j, q);
            b[i].bsums[j / 16] = (int16_t)vaddlvq_s8(q);
        }
        b[i].d = 1.0f / iscale;
    }
}

/* ---------------------------------------------------------------------- */
/* The kernel bodies, twice */

static inline int32x4_t dot_base(int32x4_t acc, int8x16_t a, int8x16_t b) {
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
}

/* Four rows' byte dots in their own lanes (packed gemms): a vector of 4
 * rows x 4 bytes against 4 activation bytes repeated. sdot gives row r's
 * sum in lane r; smull + sadalp leave rows 0-1's pairs in lo and rows 2-3's
 * in hi, and their pairwise sum (rfin) gives the lanes, exact either way. */
typedef struct {
    int32x4_t lo, hi;
} kn_racc;
static inline kn_racc rzero(void) { return (kn_racc){vdupq_n_s32(0), vdupq_n_s32(0)}; }
static inline kn_racc rdot_base(kn_racc a, int8x16_t w, int8x16_t y) {
    a.lo = vpadalq_s16(a.lo, vmull_s8(vget_low_s8(w), vget_low_s8(y)));
    a.hi = vpadalq_s16(a.hi, vmull_high_s8(w, y));
    return a;
}
static inline int32x4_t rfin_base(kn_racc a) { return vpaddq_s32(a.lo, a.hi); }
/* 4 bytes at p, in every lane */
static inline int8x16_t bcast4(const int8_t *p) { return vreinterpretq_s8_u32(vdupq_n_u32(load_u32((const uint8_t *)p))); }
/* Lanes 4v..4v+3 of 16 bytes, as int32 (v a constant after unrolling). */
static inline int32x4_t quarter32(uint8x16_t b, int v) {
    const uint16x8_t h = v < 2 ? vmovl_u8(vget_low_u8(b)) : vmovl_high_u8(b);
    return vreinterpretq_s32_u32(v % 2 ? vmovl_high_u16(h) : vmovl_u16(vget_low_u16(h)));
}
/* Four E8M0 bytes as quant_e8m0_half's floats. */
static inline float32x4_t e8m0_4(int32x4_t e) {
    const uint32x4_t big = vshlq_n_u32(vreinterpretq_u32_s32(vsubq_s32(e, vdupq_n_s32(1))), 23);
    const uint32x4_t small = vshlq_u32(vdupq_n_u32(0x00200000u), e);
    return vreinterpretq_f32_u32(vbslq_u32(vcgtq_s32(e, vdupq_n_s32(1)), big, small));
}

/* One packed group of 16 rows x 1 or 2 tokens (x: the tokens' rows): out[16 c + r]. */
typedef void (*kn_p16_fn)(int64_t n, const uint8_t *g, const uint8_t *const *x, float *out);
/* nr / 16 packed groups x nc tokens, in twos (the tiles' accumulators fill the registers). */
static void kn_p16_walk(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                        size_t ldy, kn_p16_fn one, kn_p16_fn two) {
    for (int r0 = 0; r0 + PACK_ROWS <= nr; r0 += PACK_ROWS)
        for (int c0 = 0; c0 < nc; c0 += 2) {
            const int cn = nc - c0 < 2 ? nc - c0 : 2;
            const uint8_t *xr[2] = {(const uint8_t *)x + (size_t)c0 * xs, (const uint8_t *)x + (size_t)(c0 + cn - 1) * xs};
            float out[2 * PACK_ROWS];
            (cn == 2 ? two : one)(n, (const uint8_t *)w + (size_t)r0 * ws, xr, out);
            for (int c = 0; c < cn; c++) memcpy(y + (size_t)(c0 + c) * ldy + r0, out + PACK_ROWS * c, sizeof(float) * PACK_ROWS);
        }
}

#define KN_INL static inline __attribute__((always_inline))
#define KN_PASS 1
#define KN(name) name##_base
#define KN_TARGET
#define KN_DOT dot_base
#define KN_RDOT rdot_base
#define KN_RFIN rfin_base
#include "kern_neon.c"
#undef KN_PASS
#undef KN
#undef KN_TARGET
#undef KN_DOT
#undef KN_RDOT
#undef KN_RFIN

#if defined(__clang__)
#define KN_TARGET __attribute__((target("dotprod")))
#else
#define KN_TARGET __attribute__((target("arch=armv8.2-a+dotprod")))
#endif
static inline KN_TARGET int32x4_t dot_sdot(int32x4_t acc, int8x16_t a, int8x16_t b) {
#if defined(__clang__) && !defined(__ARM_FEATURE_DOTPROD)
    /* clang's arm_neon.h hides vdotq_s32 unless the whole file targets dotprod */
    __asm__("sdot %0.4s, %1.16b, %2.16b" : "+w"(acc) : "w"(a), "w"(b));
    return acc;
#else
    return vdotq_s32(acc, a, b);
#endif
}
static inline KN_TARGET kn_racc rdot_sdot(kn_racc a, int8x16_t w, int8x16_t y) {
    a.lo = dot_sdot(a.lo, w, y);
    return a;
}
static inline int32x4_t rfin_sdot(kn_racc a) { return a.lo; }
#define KN_PASS 2
#define KN(name) name##_sdot
#define KN_DOT dot_sdot
#define KN_RDOT rdot_sdot
#define KN_RFIN rfin_sdot
#include "kern_neon.c"

void kern_neon_fill(quant_traits *t) {
    int dp = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
    t[DF_TYPE_F32].vec_dot = f32_dot;
    t[DF_TYPE_F16].vec_dot = f16_dot;
    t[DF_TYPE_F16].to_float = f16_to_float;
    t[DF_TYPE_F16].from_float = f16_from_float;
    t[DF_TYPE_BF16].vec_dot = bf16_dot;
    t[DF_TYPE_BF16].to_float = bf16_to_float;
    t[DF_TYPE_Q8_0].from_float = q8_0_quant;
    t[DF_TYPE_Q8_1].from_float = q8_1_quant;
    t[DF_TYPE_Q8_K].from_float = q8_K_quant;
#define SET(ty, fn) t[ty].vec_dot = dp ? fn##_sdot : fn##_base
    SET(DF_TYPE_Q4_0, q4_0_dot);
    SET(DF_TYPE_Q4_1, q4_1_dot);
    SET(DF_TYPE_Q5_0, q5_0_dot);
    SET(DF_TYPE_Q5_1, q5_1_dot);
    SET(DF_TYPE_Q8_0, q8_0_dot);
    SET(DF_TYPE_Q2_K, q2_K_dot);
    SET(DF_TYPE_Q3_K, q3_K_dot);
    SET(DF_TYPE_Q4_K, q4_K_dot);
    SET(DF_TYPE_Q5_K, q5_K_dot);
    SET(DF_TYPE_Q6_K, q6_K_dot);
    SET(DF_TYPE_MXFP4, mxfp4_dot);
    SET(DF_TYPE_NVFP4, nvfp4_dot);
    SET(DF_TYPE_Q1_0, q1_0_dot);
    SET(DF_TYPE_Q2_0, q2_0_dot);
    SET(DF_TYPE_IQ4_NL, iq4_nl_dot);
    SET(DF_TYPE_IQ4_XS, iq4_xs_dot);
    SET(DF_TYPE_TQ1_0, tq1_0_dot);
    SET(DF_TYPE_TQ2_0, tq2_0_dot);
    SET(DF_TYPE_IQ2_XXS, iq2_xxs_dot);
    SET(DF_TYPE_IQ2_XS, iq2_xs_dot);
    SET(DF_TYPE_IQ2_S, iq2_s_dot);
    SET(DF_TYPE_IQ3_XXS, iq3_xxs_dot);
    SET(DF_TYPE_IQ3_S, iq3_s_dot);
    SET(DF_TYPE_IQ1_S, iq1_s_dot);
    SET(DF_TYPE_IQ1_M, iq1_m_dot);
#undef SET
    t[DF_TYPE_Q8_0].gemm_packed = dp ? q8_0_p16_gemm_sdot : q8_0_p16_gemm_base;
    t[DF_TYPE_MXFP4].gemm_packed = dp ? mxfp4_p16_gemm_sdot : mxfp4_p16_gemm_base;
    t[DF_TYPE_Q4_K].gemm_packed = dp ? q4_K_p16_gemm_sdot : q4_K_p16_gemm_base;
    t[DF_TYPE_Q5_K].gemm_packed = dp ? q5_K_p16_gemm_sdot : q5_K_p16_gemm_base;
    t[DF_TYPE_Q6_K].gemm_packed = dp ? q6_K_p16_gemm_sdot : q6_K_p16_gemm_base;
}

#else /* KN_PASS: kernel bodies using KN(), KN_TARGET, KN_DOT */

/* Dot of 32 signed values (two vectors) with 32 activations, 4 int32 lanes. */
static inline KN_TARGET int32x4_t KN(dot32)(int8x16_t a0, int8x16_t a1, const int8_t *y) {
    return KN_DOT(KN_DOT(vdupq_n_s32(0), a0, vld1q_s8(y)), a1, vld1q_s8(y + 16));
}

/* The block-32 types in the one order (design comment): the block's exact
 * sum, then acc = fma(S, dw * dx, acc), block by block. */
static KN_TARGET void KN(q4_0_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_q4_0 *a = w;
    const block_q8_0 *b = x;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    const int8x16_t eight = vdupq_n_s8(8);
    float acc = 0;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const uint8x16_t q = vld1q_u8(a[i].qs);
        const int32x4_t p = KN(dot32)(vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, m4)), eight),
                                      vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), eight), b[i].qs);
        acc = fmaf((float)vaddvq_s32(p), h2f(a[i].d) * h2f(b[i].d), acc);
    }
    *out = acc;
}

static KN_TARGET void KN(q4_1_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_q4_1 *a = w;
    const block_q8_1 *b = x;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float32x4_t acc = vdupq_n_f32(0);
    float summ = 0;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        uint8x16_t q = vld1q_u8(a[i].qs);
        int32x4_t p = KN(dot32)(vreinterpretq_s8_u8(vandq_u8(q, m4)), vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), b[i].qs);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(p), h2f(a[i].d) * h2f(b[i].d));
        summ += h2f(a[i].m) * h2f(b[i].s);
    }
    *out = vaddvq_f32(acc) + summ;
}

static KN_TARGET void KN(q5_0_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_q5_0 *a = w;
    const block_q8_0 *b = x;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), h10 = vdupq_n_u8(0x10);
    const int8x16_t s16 = vdupq_n_s8(16);
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / QK5_0; i++) {
        uint32_t qh = load_u32(a[i].qh);
        uint8x16_t q = vld1q_u8(a[i].qs);
        uint8x16_t lo = vorrq_u8(vandq_u8(q, m4), vandq_u8(bits16(qh, 0), h10));
        uint8x16_t hi = vorrq_u8(vshrq_n_u8(q, 4), vandq_u8(bits16(qh, 1), h10));
        int32x4_t p = KN(dot32)(vsubq_s8(vreinterpretq_s8_u8(lo), s16), vsubq_s8(vreinterpretq_s8_u8(hi), s16), b[i].qs);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(p), h2f(a[i].d) * h2f(b[i].d));
    }
    *out = vaddvq_f32(acc);
}

static KN_TARGET void KN(q5_1_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_q5_1 *a = w;
    const block_q8_1 *b = x;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), h10 = vdupq_n_u8(0x10);
    float32x4_t acc = vdupq_n_f32(0);
    float summ = 0;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        uint32_t qh = load_u32(a[i].qh);
        uint8x16_t q = vld1q_u8(a[i].qs);
        uint8x16_t lo = vorrq_u8(vandq_u8(q, m4), vandq_u8(bits16(qh, 0), h10));
        uint8x16_t hi = vorrq_u8(vshrq_n_u8(q, 4), vandq_u8(bits16(qh, 1), h10));
        int32x4_t p = KN(dot32)(vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), b[i].qs);
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(p), h2f(a[i].d) * h2f(b[i].d));
        summ += h2f(a[i].m) * h2f(b[i].s);
    }
    *out = vaddvq_f32(acc) + summ;
}

static KN_TARGET void KN(q8_0_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_q8_0 *a = w, *b = x;
    float acc = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const int32x4_t p = KN(dot32)(vld1q_s8(a[i].qs), vld1q_s8(a[i].qs + 16), b[i].qs);
        acc = fmaf((float)vaddvq_s32(p), h2f(a[i].d) * h2f(b[i].d), acc);
    }
    *out = acc;
}

/* Dot of 32 4-bit codes laid out as q4_0's, looked up in tbl, with 32
 * activations (mxfp4, iq4_nl, iq4_xs). */
static inline KN_TARGET int32x4_t KN(lut4_dot32)(const uint8_t *qs, int8x16_t tbl, const int8_t *y) {
    const uint8x16_t q = vld1q_u8(qs);
    return KN(dot32)(vqtbl1q_s8(tbl, vandq_u8(q, vdupq_n_u8(0x0F))), vqtbl1q_s8(tbl, vshrq_n_u8(q, 4)), y);
}

/* A row of 32-element 4-bit blocks (mxfp4, iq4_nl): bs bytes per block,
 * codes at qs_off, block scale wd(block) times the activation's d. */
typedef float (*lut4_scale_fn)(const uint8_t *blk);
static inline KN_TARGET void KN(lut4_dot)(int64_t n, const uint8_t *w, size_t bs, size_t qs_off, const int8_t *table,
                                          lut4_scale_fn wd, const block_q8_0 *b, float *out) {
    const int8x16_t tbl = vld1q_s8(table);
    float acc = 0;
    for (int64_t i = 0; i < n / 32; i++, w += bs)
        acc = fmaf((float)vaddvq_s32(KN(lut4_dot32)(w + qs_off, tbl, b[i].qs)), wd(w) * h2f(b[i].d), acc);
    *out = acc;
}

static KN_TARGET void KN(mxfp4_dot)(int64_t n, const void *w, const void *x, float *out) {
    KN(lut4_dot)(n, w, sizeof(block_mxfp4), offsetof(block_mxfp4, qs), df_kvalues_mxfp4, mxfp4_wd, x, out);
}

/* q1_0: +-1 per sign bit; one weight block spans four q8_0 blocks. */
static KN_TARGET void KN(q1_0_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_q1_0 *a = w;
    const block_q8_0 *b = x;
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / QK1_0; i++) {
        const float dw = h2f(a[i].d);
        const block_q8_0 *y = b + 4 * i;
        for (int k = 0; k < 4; k++) {
            uint32_t bits = load_u32(a[i].qs + 4 * k);
            int32x4_t p = KN(dot32)(q1_0_signs(bits, 0), q1_0_signs(bits, 1), y[k].qs);
            acc = vfmaq_n_f32(acc, vcvtq_f32_s32(p), dw * h2f(y[k].d));
        }
    }
    *out = vaddvq_f32(acc);
}

/* q2_0: code - 1 per element; one weight block spans two q8_0 blocks. */
static KN_TARGET void KN(q2_0_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_q2_0 *a = w;
    const block_q8_0 *b = x;
    float32x4_t acc0 = vdupq_n_f32(0), acc1 = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / QK2_0; i++) {
        const float dw = h2f(a[i].d);
        int8x16_t v[4];
        q2_0_values(a[i].qs, v);
        int32x4_t p0 = KN(dot32)(v[0], v[1], b[2 * i].qs), p1 = KN(dot32)(v[2], v[3], b[2 * i + 1].qs);
        acc0 = vfmaq_n_f32(acc0, vcvtq_f32_s32(p0), dw * h2f(b[2 * i].d));
        acc1 = vfmaq_n_f32(acc1, vcvtq_f32_s32(p1), dw * h2f(b[2 * i + 1].d));
    }
    *out = vaddvq_f32(vaddq_f32(acc0, acc1));
}

/* sum_j m[j] * bsums[j] for 16 sub-block mins (uint8) */
static inline int KN(mins16)(const uint8_t *m, const int16_t *bsums) {
    uint8x16_t mv = vld1q_u8(m);
    int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mv))), m1 = vreinterpretq_s16_u16(vmovl_high_u8(mv));
    int16x8_t b0 = vld1q_s16(bsums), b1 = vld1q_s16(bsums + 8);
    int32x4_t s = vmull_s16(vget_low_s16(m0), vget_low_s16(b0));
    s = vmlal_high_s16(s, m0, b0);
    s = vmlal_s16(s, vget_low_s16(m1), vget_low_s16(b1));
    s = vmlal_high_s16(s, m1, b1);
    return vaddvq_s32(s);
}

static KN_TARGET void KN(q2_K_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_q2_K *a = w;
    const block_q8_K *b = x;
    const uint8x16_t m3 = vdupq_n_u8(3), m4 = vdupq_n_u8(0x0F);
    float32x4_t acc = vdupq_n_f32(0);
    float summ = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[16], mn[16];
        uint8x16_t sv = vld1q_u8(a[i].scales);
        vst1q_u8(sc, vandq_u8(sv, m4));
        vst1q_u8(mn, vshrq_n_u8(sv, 4));
        summ += b[i].d * h2f(a[i].dmin) * (float)KN(mins16)(mn, b[i].bsums);
        const int8_t *y = b[i].qs;
        int32x4_t isum = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            uint8x16_t q[2] = {vld1q_u8(a[i].qs + 32 * h), vld1q_u8(a[i].qs + 32 * h + 16)};
            for (int g = 0; g < 4; g++) {
                const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * g));
                for (int v = 0; v < 2; v++) {
                    int8x16_t u = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(q[v], sh), m3));
                    int32x4_t p = KN_DOT(vdupq_n_s32(0), u, vld1q_s8(y + 128 * h + 32 * g + 16 * v));
                    isum = vmlaq_n_s32(isum, p, sc[8 * h + 2 * g + v]);
                }
            }
        }
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(isum), b[i].d * h2f(a[i].d));
    }
    *out = vaddvq_f32(acc) - summ;
}

static KN_TARGET void KN(q3_K_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_q3_K *a = w;
    const block_q8_K *b = x;
    const uint8x16_t m3 = vdupq_n_u8(3), four = vdupq_n_u8(4);
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint32_t s32[4];
        quant_k3_unpack(a[i].scales, s32);
        int8_t sc[16];
        vst1q_s8(sc, vsubq_s8(vreinterpretq_s8_u32(vld1q_u32(s32)), vdupq_n_s8(32)));
        const int8_t *y = b[i].qs;
        uint8x16_t hm[2] = {vld1q_u8(a[i].hmask), vld1q_u8(a[i].hmask + 16)};
        int32x4_t isum = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            uint8x16_t q[2] = {vld1q_u8(a[i].qs + 32 * h), vld1q_u8(a[i].qs + 32 * h + 16)};
            for (int g = 0; g < 4; g++) {
                const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * g));
                const uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << (4 * h + g)));
                for (int v = 0; v < 2; v++) {
                    /* low two bits | 4 when the hmask bit is set, minus 4 */
                    uint8x16_t u = vorrq_u8(vandq_u8(vshlq_u8(q[v], sh), m3), vandq_u8(vtstq_u8(hm[v], bit), four));
                    int8x16_t s = vsubq_s8(vreinterpretq_s8_u8(u), vreinterpretq_s8_u8(four));
                    int32x4_t p = KN_DOT(vdupq_n_s32(0), s, vld1q_s8(y + 128 * h + 32 * g + 16 * v));
                    isum = vmlaq_n_s32(isum, p, sc[8 * h + 2 * g + v]);
                }
            }
        }
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(isum), h2f(a[i].d) * b[i].d);
    }
    *out = vaddvq_f32(acc);
}

static KN_TARGET void KN(q4_K_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float accS = 0, accM = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint32_t u[4];
        quant_k4_unpack(a[i].scales, u);
        uint8_t sc[16];
        memcpy(sc, u, 16); /* 0-7 scales, 8-15 mins */
        int16x8_t bs = vpaddq_s16(vld1q_s16(b[i].bsums), vld1q_s16(b[i].bsums + 8));
        int16x8_t mn = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sc + 8)));
        int32x4_t pm = vmlal_high_s16(vmull_s16(vget_low_s16(bs), vget_low_s16(mn)), bs, mn);
        accM = fmaf((float)vaddvq_s32(pm), -h2f(a[i].dmin) * b[i].d, accM);
        const int8_t *y = b[i].qs;
        int32x4_t isum = vdupq_n_s32(0);
        for (int c = 0; c < 4; c++) {
            uint8x16_t q0 = vld1q_u8(a[i].qs + 32 * c), q1 = vld1q_u8(a[i].qs + 32 * c + 16);
            int32x4_t p0 = KN(dot32)(vreinterpretq_s8_u8(vandq_u8(q0, m4)), vreinterpretq_s8_u8(vandq_u8(q1, m4)), y + 64 * c);
            int32x4_t p1 = KN(dot32)(vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)), vreinterpretq_s8_u8(vshrq_n_u8(q1, 4)), y + 64 * c + 32);
            isum = vmlaq_n_s32(isum, p0, sc[2 * c]);
            isum = vmlaq_n_s32(isum, p1, sc[2 * c + 1]);
        }
        accS = fmaf((float)vaddvq_s32(isum), h2f(a[i].d) * b[i].d, accS);
    }
    *out = accS + accM; /* the one order (design comment) */
}

static KN_TARGET void KN(q5_K_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_q5_K *a = w;
    const block_q8_K *b = x;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), one = vdupq_n_u8(1);
    float accS = 0, accM = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint32_t u[4];
        quant_k4_unpack(a[i].scales, u);
        uint8_t sc[16];
        memcpy(sc, u, 16);
        int16x8_t bs = vpaddq_s16(vld1q_s16(b[i].bsums), vld1q_s16(b[i].bsums + 8));
        int16x8_t mn = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(sc + 8)));
        int32x4_t pm = vmlal_high_s16(vmull_s16(vget_low_s16(bs), vget_low_s16(mn)), bs, mn);
        accM = fmaf((float)vaddvq_s32(pm), -h2f(a[i].dmin) * b[i].d, accM);
        const int8_t *y = b[i].qs;
        uint8x16_t h0 = vld1q_u8(a[i].qh), h1 = vld1q_u8(a[i].qh + 16);
        int32x4_t isum = vdupq_n_s32(0);
        for (int c = 0; c < 4; c++) {
            uint8x16_t q0 = vld1q_u8(a[i].qs + 32 * c), q1 = vld1q_u8(a[i].qs + 32 * c + 16);
            /* bit 2c of qh -> +16 for the low nibbles, bit 2c+1 for the high ones */
            uint8x16_t l0 = vorrq_u8(vandq_u8(q0, m4), vshlq_n_u8(vandq_u8(h0, one), 4));
            uint8x16_t l1 = vorrq_u8(vandq_u8(q1, m4), vshlq_n_u8(vandq_u8(h1, one), 4));
            uint8x16_t u0 = vorrq_u8(vshrq_n_u8(q0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h0, 1), one), 4));
            uint8x16_t u1 = vorrq_u8(vshrq_n_u8(q1, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(h1, 1), one), 4));
            h0 = vshrq_n_u8(h0, 2);
            h1 = vshrq_n_u8(h1, 2);
            int32x4_t p0 = KN(dot32)(vreinterpretq_s8_u8(l0), vreinterpretq_s8_u8(l1), y + 64 * c);
            int32x4_t p1 = KN(dot32)(vreinterpretq_s8_u8(u0), vreinterpretq_s8_u8(u1), y + 64 * c + 32);
            isum = vmlaq_n_s32(isum, p0, sc[2 * c]);
            isum = vmlaq_n_s32(isum, p1, sc[2 * c + 1]);
        }
        accS = fmaf((float)vaddvq_s32(isum), h2f(a[i].d) * b[i].d, accS);
    }
    *out = accS + accM; /* the one order (design comment) */
}

/* q6_K in the x86 order (design comment): per super-block the exact partial
 * sums P0 (the even sub-blocks' products of the unsigned values, less 32 x
 * the scaled activation sums of sub-blocks 0..7) and P1 (the odd ones, less
 * those of 8..15), each into its own float accumulator. */
static KN_TARGET void KN(q6_K_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(3);
    float acc0 = 0, acc1 = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *sc = a[i].scales;
        const int8_t *y = b[i].qs;
        int32x4_t P[2] = {vdupq_n_s32(0), vdupq_n_s32(0)}; /* [sub-block parity] */
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = a[i].ql + 64 * h, *qh = a[i].qh + 32 * h;
            for (int v = 0; v < 2; v++) {
                uint8x16_t l0 = vld1q_u8(ql + 16 * v), l1 = vld1q_u8(ql + 32 + 16 * v), hb = vld1q_u8(qh + 16 * v);
                uint8x16_t g[4];
                g[0] = vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(hb, m3), 4));
                g[1] = vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 2), m3), 4));
                g[2] = vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 4), m3), 4));
                g[3] = vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(hb, 6), 4));
                for (int k = 0; k < 4; k++) { /* sub-block 8h + 2k + v; values 0..63 as signed bytes */
                    int32x4_t p = KN_DOT(vdupq_n_s32(0), vreinterpretq_s8_u8(g[k]), vld1q_s8(y + 128 * h + 32 * k + 16 * v));
                    P[v] = vmlaq_n_s32(P[v], p, sc[8 * h + 2 * k + v]);
                }
            }
        }
        const int16x8_t s0 = vmovl_s8(vld1_s8(sc)), s1 = vmovl_s8(vld1_s8(sc + 8));
        const int16x8_t b0 = vld1q_s16(b[i].bsums), b1 = vld1q_s16(b[i].bsums + 8);
        const int32_t o0 = vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(s0), vget_low_s16(b0)), s0, b0));
        const int32_t o1 = vaddvq_s32(vmlal_high_s16(vmull_s16(vget_low_s16(s1), vget_low_s16(b1)), s1, b1));
        const float dd = h2f(a[i].d) * b[i].d;
        acc0 = fmaf((float)(vaddvq_s32(P[0]) - 32 * o0), dd, acc0);
        acc1 = fmaf((float)(vaddvq_s32(P[1]) - 32 * o1), dd, acc1);
    }
    *out = acc0 + acc1; /* the one order (design comment) */
}

static KN_TARGET void KN(iq4_nl_dot)(int64_t n, const void *w, const void *x, float *out) {
    KN(lut4_dot)(n, w, sizeof(block_iq4_nl), offsetof(block_iq4_nl, qs), df_kvalues_iq4nl, iq4_nl_wd, x, out);
}

/* iq4_xs: sub-block sums times scale - 32 in int32, one float scale per
 * super-block. */
static KN_TARGET void KN(iq4_xs_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_iq4_xs *a = w;
    const block_q8_K *b = x;
    const int8x16_t tbl = vld1q_s8(df_kvalues_iq4nl);
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32x4_t s = vdupq_n_s32(0);
        for (int ib = 0; ib < 8; ib++) {
            const int ls = (((a[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((a[i].scales_h >> (2 * ib)) & 3) << 4)) - 32;
            s = vmlaq_n_s32(s, KN(lut4_dot32)(a[i].qs + 16 * ib, tbl, b[i].qs + 32 * ib), ls);
        }
        acc = vfmaq_n_f32(acc, vcvtq_f32_s32(s), h2f(a[i].d) * b[i].d);
    }
    *out = vaddvq_f32(acc);
}

/* tq1_0: trits of qs[0..31] (elements 0..159), of qs[32..47] (160..239),
 * of qh (240..255), each after wrapping multiplies by 3; one integer sum. */
static KN_TARGET void KN(tq1_0_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_tq1_0 *a = w;
    const block_q8_K *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const int8_t *y = b[i].qs;
        uint8x16_t q0 = vld1q_u8(a[i].qs), q1 = vld1q_u8(a[i].qs + 16), q2 = vld1q_u8(a[i].qs + 32);
        int32x4_t s = vdupq_n_s32(0);
        for (int k = 0; k < 5; k++) {
            s = vaddq_s32(s, KN(dot32)(tq_trit_m1(q0), tq_trit_m1(q1), y + 32 * k));
            s = KN_DOT(s, tq_trit_m1(q2), vld1q_s8(y + 160 + 16 * k));
            q0 = tq_mul3(q0);
            q1 = tq_mul3(q1);
            q2 = tq_mul3(q2);
        }
        s = KN_DOT(s, tq1_0_qh_values(a[i].qh), vld1q_s8(y + 240));
        sum += (float)vaddvq_s32(s) * (h2f(a[i].d) * b[i].d);
    }
    *out = sum;
}

/* tq2_0: code - 1 from bit pairs (element 128h + 32l + m is bits 2l.. of
 * qs[32h + m]); one integer sum. */
static KN_TARGET void KN(tq2_0_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_tq2_0 *a = w;
    const block_q8_K *b = x;
    const uint8x16_t m3 = vdupq_n_u8(3);
    const int8x16_t one = vdupq_n_s8(1);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32x4_t s = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            uint8x16_t q0 = vld1q_u8(a[i].qs + 32 * h), q1 = vld1q_u8(a[i].qs + 32 * h + 16);
            for (int l = 0; l < 4; l++, q0 = vshrq_n_u8(q0, 2), q1 = vshrq_n_u8(q1, 2))
                s = vaddq_s32(s, KN(dot32)(vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q0, m3)), one),
                                           vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q1, m3)), one), b[i].qs + 128 * h + 32 * l));
        }
        sum += (float)vaddvq_s32(s) * (h2f(a[i].d) * b[i].d);
    }
    *out = sum;
}

/* Grid i-quants: each sub-block decoded in vectors (iqn_*), one byte dot
 * per 16-element scale group, the groups' sums times ls in int32, one
 * float scale per block, the type's factor at the end (quant_isa.h). */
#define IQ_GRID_KN(pfx, btype, id)                                                                       \
    static KN_TARGET void KN(pfx##_dot)(int64_t n, const void *w, const void *x, float *out) {          \
        const btype *a = w;                                                                              \
        const block_q8_K *b = x;                                                                         \
        float32x4_t acc = vdupq_n_f32(0);                                                                \
        for (int64_t i = 0; i < n / QK_K; i++) {                                                         \
            int16_t ls[16];                                                                              \
            const float d = iqn_##pfx##_head(&a[i], ls);                                                 \
            int32x4_t s = vdupq_n_s32(0);                                                                \
            for (int ib = 0; ib < 8; ib++) {                                                             \
                int8x16_t v[2];                                                                          \
                iqn_##pfx##_sub(&a[i], ib, v);                                                           \
                s = vmlaq_n_s32(s, KN_DOT(vdupq_n_s32(0), v[0], vld1q_s8(b[i].qs + 32 * ib)), ls[2 * ib]); \
                s = vmlaq_n_s32(s, KN_DOT(vdupq_n_s32(0), v[1], vld1q_s8(b[i].qs + 32 * ib + 16)),       \
                                ls[2 * ib + 1]);                                                         \
            }                                                                                            \
            acc = vfmaq_n_f32(acc, vcvtq_f32_s32(s), d * b[i].d);                                        \
        }                                                                                                \
        *out = quant_iq_get(id)->factor * vaddvq_f32(acc);                                               \
    }
IQ_GRID_KN(iq2_xxs, block_iq2_xxs, DF_TYPE_IQ2_XXS)
IQ_GRID_KN(iq2_xs, block_iq2_xs, DF_TYPE_IQ2_XS)
IQ_GRID_KN(iq2_s, block_iq2_s, DF_TYPE_IQ2_S)
IQ_GRID_KN(iq3_xxs, block_iq3_xxs, DF_TYPE_IQ3_XXS)
IQ_GRID_KN(iq3_s, block_iq3_s, DF_TYPE_IQ3_S)
IQ_GRID_KN(iq1_s, block_iq1_s, DF_TYPE_IQ1_S)
IQ_GRID_KN(iq1_m, block_iq1_m, DF_TYPE_IQ1_M)
#undef IQ_GRID_KN

/* nvfp4: per q8_0 block, the 16 code bytes of two sub-blocks split into
 * each sub-block's low and high nibbles, looked up in ggml's table. */
static KN_TARGET void KN(nvfp4_dot)(int64_t n, const void *w, const void *x, float *out) {
    const block_nvfp4 *a = w;
    const block_q8_0 *b = x;
    const int8x16_t tbl = vld1q_s8(df_kvalues_mxfp4);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / QK_NVFP4; i++)
        for (int k = 0; k < 2; k++) {
            const uint8x16_t q = vld1q_u8(a[i].qs + 16 * k);
            const uint8x16_t lo = vandq_u8(q, m4), hi = vshrq_n_u8(q, 4);
            const block_q8_0 *y = &b[2 * i + k];
            const float dy = h2f(y->d);
            int32x4_t p0 = KN_DOT(vdupq_n_s32(0), vqtbl1q_s8(tbl, vcombine_u8(vget_low_u8(lo), vget_low_u8(hi))), vld1q_s8(y->qs));
            int32x4_t p1 = KN_DOT(vdupq_n_s32(0), vqtbl1q_s8(tbl, vcombine_u8(vget_high_u8(lo), vget_high_u8(hi))), vld1q_s8(y->qs + 16));
            acc = vfmaq_n_f32(acc, vcvtq_f32_s32(p0), dy * quant_ue4m3_half(a[i].d[2 * k]));
            acc = vfmaq_n_f32(acc, vcvtq_f32_s32(p1), dy * quant_ue4m3_half(a[i].d[2 * k + 1]));
        }
    *out = vaddvq_f32(acc);
}

/* ---- packed gemms (pack.h; design comment): tiles of 16 rows x C tokens ---- */

/* q8_0: per block the 16 rows' f16 scales, then 8 lines of w ^ 0x80 (line k:
 * bytes 4k..4k+3 of each row, row r at 4r), 544 bytes. */
KN_INL KN_TARGET void KN(q8_0_p16)(int64_t n, const uint8_t *g, const uint8_t *const *xr, float *out, const int C) {
    const int8x16_t flip = vdupq_n_s8(-128);
    float32x4_t acc[2][4];
    for (int c = 0; c < C; c++)
        for (int v = 0; v < 4; v++) acc[c][v] = vdupq_n_f32(0);
    for (int64_t b = 0; b < n / QK8_0; b++, g += 544) {
        kn_racc s[2][4];
        for (int c = 0; c < C; c++)
            for (int v = 0; v < 4; v++) s[c][v] = rzero();
        for (int k = 0; k < 8; k++) {
            int8x16_t wv[4];
            for (int v = 0; v < 4; v++) wv[v] = veorq_s8(vld1q_s8((const int8_t *)(g + 32 + 64 * k + 16 * v)), flip);
            for (int c = 0; c < C; c++) {
                const int8x16_t y = bcast4(((const block_q8_0 *)(const void *)xr[c])[b].qs + 4 * k);
                for (int v = 0; v < 4; v++) s[c][v] = KN_RDOT(s[c][v], wv[v], y);
            }
        }
        for (int c = 0; c < C; c++) {
            const float32x4_t dx = vdupq_n_f32(h2f(((const block_q8_0 *)(const void *)xr[c])[b].d));
            for (int v = 0; v < 4; v++)
                acc[c][v] = vfmaq_f32(acc[c][v], vcvtq_f32_s32(KN_RFIN(s[c][v])),
                                      vmulq_f32(h4((const uint16_t *)(const void *)g + 4 * v), dx));
        }
    }
    for (int c = 0; c < C; c++)
        for (int v = 0; v < 4; v++) vst1q_f32(out + 16 * c + 4 * v, acc[c][v]);
}

/* mxfp4: per block the 16 rows' E8M0 bytes, then 4 lines of the nibble bytes
 * (line k: qs[4k..4k+3], elements 4k.. in the low nibbles, 16 + 4k.. in the
 * high ones), 272 bytes. */
KN_INL KN_TARGET void KN(mxfp4_p16)(int64_t n, const uint8_t *g, const uint8_t *const *xr, float *out, const int C) {
    const int8x16_t tbl = vld1q_s8(df_kvalues_mxfp4);
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    float32x4_t acc[2][4];
    for (int c = 0; c < C; c++)
        for (int v = 0; v < 4; v++) acc[c][v] = vdupq_n_f32(0);
    for (int64_t b = 0; b < n / 32; b++, g += 272) {
        kn_racc s[2][4];
        for (int c = 0; c < C; c++)
            for (int v = 0; v < 4; v++) s[c][v] = rzero();
        for (int k = 0; k < 4; k++) {
            int8x16_t wl[4], wh[4];
            for (int v = 0; v < 4; v++) {
                const uint8x16_t q = vld1q_u8(g + 16 + 64 * k + 16 * v);
                wl[v] = vqtbl1q_s8(tbl, vandq_u8(q, m4));
                wh[v] = vqtbl1q_s8(tbl, vshrq_n_u8(q, 4));
            }
            for (int c = 0; c < C; c++) {
                const int8_t *y = ((const block_q8_0 *)(const void *)xr[c])[b].qs;
                const int8x16_t yl = bcast4(y + 4 * k), yh = bcast4(y + 16 + 4 * k);
                for (int v = 0; v < 4; v++) s[c][v] = KN_RDOT(KN_RDOT(s[c][v], wl[v], yl), wh[v], yh);
            }
        }
        const uint8x16_t e = vld1q_u8(g);
        for (int c = 0; c < C; c++) {
            const float32x4_t dx = vdupq_n_f32(h2f(((const block_q8_0 *)(const void *)xr[c])[b].d));
            for (int v = 0; v < 4; v++)
                acc[c][v] = vfmaq_f32(acc[c][v], vcvtq_f32_s32(KN_RFIN(s[c][v])), vmulq_f32(e8m0_4(quarter32(e, v)), dx));
        }
    }
    for (int c = 0; c < C; c++)
        for (int v = 0; v < 4; v++) vst1q_f32(out + 16 * c + 4 * v, acc[c][v]);
}

/* q4_K and q5_K: per super-block the 16 rows' d, then dmin (f16), the 12
 * scale bytes transposed (vector i: byte i of every row), q5_K's 8 lines of
 * qh, then 32 lines of nibbles (line 8p + k: qs[32p + 4k..], low nibbles
 * sub-block 2p, high 2p + 1). Rows four at a time (v), each super-block's
 * bytes staying in L1: per row and token the exact S = sum_j sc_j * dot_j
 * and M = sum_j m_j * (sub-block j's activation sum), then the one order. */
KN_INL KN_TARGET void KN(k45_p16)(int64_t n, const uint8_t *g, const uint8_t *const *xr, float *out, const int C,
                                  const int q5) {
    const size_t gs = 16 * (q5 ? sizeof(block_q5_K) : sizeof(block_q4_K));
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m63 = vdupq_n_u8(63), one = vdupq_n_u8(1);
    const block_q8_K *x[2];
    float32x4_t accS[2][4], accM[2][4];
    for (int c = 0; c < C; c++) {
        x[c] = (const block_q8_K *)(const void *)xr[c];
        for (int v = 0; v < 4; v++) accS[c][v] = accM[c][v] = vdupq_n_f32(0);
    }
    for (int64_t i = 0; i < n / QK_K; i++, g += gs) {
        const uint8_t *qh = g + 256, *qs = g + (q5 ? 256 + 512 : 256);
        uint8x16_t t[12], sc[8], mn[8];
        for (int j = 0; j < 12; j++) t[j] = vld1q_u8(g + 64 + 16 * j);
        for (int j = 0; j < 4; j++) { /* quant_k4_unpack's 6-bit fields, 16 rows at once */
            sc[j] = vandq_u8(t[j], m63);
            mn[j] = vandq_u8(t[j + 4], m63);
            sc[j + 4] = vorrq_u8(vandq_u8(t[j + 8], m4), vshlq_n_u8(vshrq_n_u8(t[j], 6), 4));
            mn[j + 4] = vorrq_u8(vshrq_n_u8(t[j + 8], 4), vshlq_n_u8(vshrq_n_u8(t[j + 4], 6), 4));
        }
        for (int v = 0; v < 4; v++) {
            int32x4_t S[2], M[2];
            for (int c = 0; c < C; c++) S[c] = M[c] = vdupq_n_s32(0);
            for (int j = 0; j < 8; j++) {
                const int32x4_t m = quarter32(mn[j], v);
                for (int c = 0; c < C; c++) M[c] = vmlaq_n_s32(M[c], m, x[c][i].bsums[2 * j] + x[c][i].bsums[2 * j + 1]);
            }
            for (int p = 0; p < 4; p++) {
                kn_racc lo[2], hi[2];
                for (int c = 0; c < C; c++) lo[c] = hi[c] = rzero();
                for (int k = 0; k < 8; k++) {
                    const uint8x16_t q = vld1q_u8(qs + 64 * (8 * p + k) + 16 * v);
                    uint8x16_t l = vandq_u8(q, m4), u = vshrq_n_u8(q, 4);
                    if (q5) { /* bit 2p of the qh line as bit 4 of l, bit 2p + 1 of u */
                        const uint8x16_t h = vld1q_u8(qh + 64 * k + 16 * v);
                        l = vorrq_u8(l, vshlq_n_u8(vandq_u8(vshlq_u8(h, vdupq_n_s8((int8_t)(-2 * p))), one), 4));
                        u = vorrq_u8(u, vshlq_n_u8(vandq_u8(vshlq_u8(h, vdupq_n_s8((int8_t)(-2 * p - 1))), one), 4));
                    }
                    for (int c = 0; c < C; c++) {
                        const int8_t *y = x[c][i].qs + 64 * p + 4 * k;
                        lo[c] = KN_RDOT(lo[c], vreinterpretq_s8_u8(l), bcast4(y));
                        hi[c] = KN_RDOT(hi[c], vreinterpretq_s8_u8(u), bcast4(y + 32));
                    }
                }
                for (int c = 0; c < C; c++) {
                    S[c] = vmlaq_s32(S[c], KN_RFIN(lo[c]), quarter32(sc[2 * p], v));
                    S[c] = vmlaq_s32(S[c], KN_RFIN(hi[c]), quarter32(sc[2 * p + 1], v));
                }
            }
            const float32x4_t d = h4((const uint16_t *)(const void *)g + 4 * v);
            const float32x4_t dm = vnegq_f32(h4((const uint16_t *)(const void *)(g + 32) + 4 * v));
            for (int c = 0; c < C; c++) {
                const float32x4_t dx = vdupq_n_f32(x[c][i].d);
                accS[c][v] = vfmaq_f32(accS[c][v], vcvtq_f32_s32(S[c]), vmulq_f32(d, dx));
                accM[c][v] = vfmaq_f32(accM[c][v], vcvtq_f32_s32(M[c]), vmulq_f32(dm, dx));
            }
        }
    }
    for (int c = 0; c < C; c++)
        for (int v = 0; v < 4; v++) vst1q_f32(out + 16 * c + 4 * v, vaddq_f32(accS[c][v], accM[c][v]));
}
KN_INL KN_TARGET void KN(q4_K_p16)(int64_t n, const uint8_t *g, const uint8_t *const *x, float *out, const int C) {
    KN(k45_p16)(n, g, x, out, C, 0);
}
KN_INL KN_TARGET void KN(q5_K_p16)(int64_t n, const uint8_t *g, const uint8_t *const *x, float *out, const int C) {
    KN(k45_p16)(n, g, x, out, C, 1);
}

/* q6_K: per super-block the 16 rows' d (f16), the 16 scales transposed
 * (vector j: scale j of every row), 32 lines of ql, 16 lines of qh (pack.h).
 * Line k of half h (ql lines 16h + k and 16h + 8 + k, qh line 8h + k) holds
 * elements 128h + 32m + 4k.. for m = 0..3: sub-block 8h + 2m + k / 4. Rows
 * four at a time (v): per row and token q6_K_dot's exact P0 (even
 * sub-blocks) and P1 (odd), the values unsigned, less 32 x the scaled
 * activation sums of sub-blocks 0..7 and 8..15, then the one order. */
KN_INL KN_TARGET void KN(q6_K_p16)(int64_t n, const uint8_t *g, const uint8_t *const *xr, float *out, const int C) {
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(3);
    const block_q8_K *x[2];
    float32x4_t acc0[2][4], acc1[2][4];
    for (int c = 0; c < C; c++) {
        x[c] = (const block_q8_K *)(const void *)xr[c];
        for (int v = 0; v < 4; v++) acc0[c][v] = acc1[c][v] = vdupq_n_f32(0);
    }
    for (int64_t i = 0; i < n / QK_K; i++, g += 16 * sizeof(block_q6_K)) {
        const uint8_t *sc = g + 32, *ql = g + 288, *qh = g + 288 + 2048;
        for (int v = 0; v < 4; v++) {
            int32x4_t s[16], P[2][2]; /* s[j]: scale j of rows 4v..4v+3; P[c][parity] */
            for (int j = 0; j < 16; j++) {
                const int16x8_t w = vmovl_s8(vld1_s8((const int8_t *)sc + 16 * j + 8 * (v / 2)));
                s[j] = v % 2 ? vmovl_high_s16(w) : vmovl_s16(vget_low_s16(w));
            }
            for (int c = 0; c < C; c++) {
                P[c][0] = P[c][1] = vdupq_n_s32(0);
                for (int j = 0; j < 16; j++) P[c][j / 8] = vmlaq_n_s32(P[c][j / 8], s[j], -32 * x[c][i].bsums[j]);
            }
            for (int h = 0; h < 2; h++)
                for (int kk = 0; kk < 2; kk++) { /* k = 4kk..4kk+3: sub-blocks 8h + 2m + kk */
                    kn_racc dot[4][2];
                    for (int m = 0; m < 4; m++)
                        for (int c = 0; c < C; c++) dot[m][c] = rzero();
                    for (int k = 4 * kk; k < 4 * kk + 4; k++) {
                        const uint8x16_t a = vld1q_u8(ql + 64 * (16 * h + k) + 16 * v);
                        const uint8x16_t b = vld1q_u8(ql + 64 * (16 * h + 8 + k) + 16 * v);
                        const uint8x16_t hb = vld1q_u8(qh + 64 * (8 * h + k) + 16 * v);
                        const uint8x16_t q[4] = {
                            vorrq_u8(vandq_u8(a, m4), vshlq_n_u8(vandq_u8(hb, m3), 4)),
                            vorrq_u8(vandq_u8(b, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 2), m3), 4)),
                            vorrq_u8(vshrq_n_u8(a, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 4), m3), 4)),
                            vorrq_u8(vshrq_n_u8(b, 4), vshlq_n_u8(vshrq_n_u8(hb, 6), 4))};
                        for (int m = 0; m < 4; m++)
                            for (int c = 0; c < C; c++)
                                dot[m][c] = KN_RDOT(dot[m][c], vreinterpretq_s8_u8(q[m]),
                                                    bcast4(x[c][i].qs + 128 * h + 32 * m + 4 * k));
                    }
                    for (int m = 0; m < 4; m++)
                        for (int c = 0; c < C; c++)
                            P[c][kk] = vmlaq_s32(P[c][kk], KN_RFIN(dot[m][c]), s[8 * h + 2 * m + kk]);
                }
            const float32x4_t d = h4((const uint16_t *)(const void *)g + 4 * v);
            for (int c = 0; c < C; c++) {
                const float32x4_t dd = vmulq_f32(d, vdupq_n_f32(x[c][i].d));
                acc0[c][v] = vfmaq_f32(acc0[c][v], vcvtq_f32_s32(P[c][0]), dd);
                acc1[c][v] = vfmaq_f32(acc1[c][v], vcvtq_f32_s32(P[c][1]), dd);
            }
        }
    }
    for (int c = 0; c < C; c++)
        for (int v = 0; v < 4; v++) vst1q_f32(out + 16 * c + 4 * v, vaddq_f32(acc0[c][v], acc1[c][v]));
}

/* NAME_1, NAME_2 (1 and 2 tokens) and NAME_gemm, the table's gemm_packed. */
#define KN_P16_GEMM(NAME)                                                                                          \
    static KN_TARGET void KN(NAME##_1)(int64_t n, const uint8_t *g, const uint8_t *const *x, float *o) {             \
        KN(NAME)(n, g, x, o, 1);                                                                                   \
    }                                                                                                              \
    static KN_TARGET void KN(NAME##_2)(int64_t n, const uint8_t *g, const uint8_t *const *x, float *o) {             \
        KN(NAME)(n, g, x, o, 2);                                                                                   \
    }                                                                                                              \
    static void KN(NAME##_gemm)(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,      \
                                float *y, size_t ldy) {                                                            \
        kn_p16_walk(n, w, ws, nr, x, xs, nc, y, ldy, KN(NAME##_1), KN(NAME##_2));                                  \
    }
KN_P16_GEMM(q8_0_p16)
KN_P16_GEMM(mxfp4_p16)
KN_P16_GEMM(q4_K_p16)
KN_P16_GEMM(q5_K_p16)
KN_P16_GEMM(q6_K_p16)
#undef KN_P16_GEMM

#endif /* KN_PASS */
