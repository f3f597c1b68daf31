/*
 * kern_avx512.c - AVX-512 (F, BW, VL, DQ, VNNI) kernels, x86-64 only; built
 * with the matching -m flags plus -mavx2 -mfma -mf16c and only called when
 * the CPU reports all five extensions. The table it fills starts from the
 * AVX2 one, so anything not overridden here (activation quantizers, bf16,
 * dequantizers) runs the AVX2 code.
 *
 * DESIGN
 * - 512-bit registers hold 64 weight values: two 32-element blocks of the
 *   small formats, or a 64-element slice of a K-quant super-block.
 * - VNNI: vpdpbusd (unsigned x signed bytes, four at a time, into int32, no
 *   saturation) replaces AVX2's maddubs+madd for the 32-element formats. Their
 *   fixed offsets are folded in through the activation sums: for q4_0
 *   sum (u-8)*y = sum u*y - 8*sum y, where sum y comes from a second vpdpbusd
 *   against a vector of ones. q8_0 uses |w| times y negated where w < 0
 *   (activations never hold -128, so the negation cannot overflow).
 * - K-quants: maddubs gives int16 pair sums (max 2*63*127 = 16002, no
 *   saturation); vpdpwssd multiplies them by the per-sub-block int16 scales
 *   and accumulates into int32 in one instruction. Scales are spread to the
 *   lanes with vpermw from a small index table. q6_K/q3_K offsets use bsums as
 *   in the AVX2 file.
 * - mxfp4 looks its codes up in ggml's table (pshufb per 128-bit lane) and
 *   multiplies like q8_0; q1_0's sign bits are a 64-lane mask that negates
 *   activations before a vpdpbusd against ones; q2_0's unsigned codes fold
 *   their -1 offset in through the activation sum, like q4_0. iq4_nl/iq4_xs
 *   look up ggml's non-linear table like mxfp4 (iq4_xs scales its sub-block
 *   sums in int32); tq1_0/tq2_0 take kern_x86.h's 256-bit value vectors
 *   in pairs. The grid i-quants use kern_x86.h's vector decoders, two
 *   sub-blocks per step: their 64 sign bits are a byte mask negating the
 *   activations; maddubs + vpdpwssd with the 16-element scales (as q6_K).
 * - gemm (matmul's tiles) for q8_0, mxfp4, q4_0 and iq4_nl: 4 rows x up to 4 tokens, two
 *   blocks per step, one vpdpbusd per row and token (weights as w + 128,
 *   the accumulator started at -128 * sum(y)); the lane sums are folded to
 *   one exact sum per row and block and accumulated like kern_avx2.c's
 *   tile, so the outputs are the AVX2 gemm's bits. The K-quant tiles (q2_K,
 *   q3_K, q4_K, q5_K, q6_K) decode each row's super-block once
 *   (t5_k_decode) and use the lone dot's 64-element maddubs + vpdpwssd per
 *   row and token, add the two 256-bit halves into the AVX2 tiles' lanes
 *   and fold them as those do: the same bits as AVX2 (q2_K, q4_K, q5_K in
 *   the K-quant order: exact S and M per super-block, accS + accM). iq4_xs and the
 *   grid i-quants run one row against up to 4 tokens (KX_IQ_ENTRY_POINTS).
 *   Inherited from the AVX2 table (maddubs, no VNNI): the f32 and f16
 *   gemms; types with no gemm at all (q4_1, q5_0, q5_1, nvfp4, q1_0, q2_0,
 *   tq1_0, tq2_0, bf16) run this file's vec_dot per (row, token) pair, VNNI
 *   where listed above.
 * - Packed gemms (gemm_packed) for q8_0, mxfp4, q4_K, q5_K and q6_K read pack.h's
 *   layout: 16 rows in the 16 lanes, one vpdpbusd per 64-byte line and
 *   token against 4 broadcast activation bytes, so a block's exact sum per
 *   row builds up with no reduction across lanes (the row-major tiles'
 *   order and bits). The store packs resident matrices of these types. One
 *   token of q4_K, q5_K and q6_K on an Intel core takes the AVX2 table's
 *   256-bit packed tiles instead (kq_one_256: faster there, same bits).
 * - AMX (Intel's tile unit) lives in kern_amx.c / amx_gemm.c, as a table of
 *   its own built on top of this one.
 * - The integer sums per block are exactly the scalar reference's; only the
 *   float accumulation order differs.
 * - This file is exercised by tests/test_quant.c wherever the CPU has
 *   AVX-512 (the development machine may not).
 */
#include "kern_x86.h"
#include "pack.h"
#include "quant_isa.h"

#include <immintrin.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define LOADU(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define LOADU128(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
#define LD512(p) _mm512_loadu_si512((const void *)(p))

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }
static inline uint32_t load_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

static inline __m512i join256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Lanes 0-7 = a, lanes 8-15 = b. */
static inline __m512 join_ps(float a, float b) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(a)), _mm256_set1_ps(b), 1);
}

/* The two 256-bit halves of 16 int32 lanes added (exact): lane j of each half covers the same bytes of its block,
 * so the sum is kern_avx2.c's 8-lane vector for the two blocks together. */
static inline __m256i halves_epi32(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

static inline float hsum256_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Per-16-bit-lane shift counts: low 256 bits by a, high 256 bits by b. */
static inline __m512i shifts2(short a, short b) {
    return join256(_mm256_set1_epi16(a), _mm256_set1_epi16(b));
}

/* Two blocks of 16 nibble bytes -> 64 bytes in element order:
 * [A low nibbles, A high nibbles, B low nibbles, B high nibbles]. */
static inline __m512i nibbles64(const uint8_t *qa, const uint8_t *qb) {
    __m256i q = _mm256_set_m128i(LOADU128(qb), LOADU128(qa));
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m512i v = join256(_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
    /* 128-bit lanes are [Alo, Blo, Ahi, Bhi]; reorder to [Alo, Ahi, Blo, Bhi] */
    return _mm512_shuffle_i64x2(v, v, _MM_SHUFFLE(3, 1, 2, 0));
}

/* ---------------------------------------------------------------------- */
/* f32, f16 */

static void f32_dot(int64_t n, const void *w, const void *x, float *out) {
    const float *a = w, *b = x;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    *out = s;
}

static void f16_dot(int64_t n, const void *w, const void *x, float *out) {
    const uint16_t *a = w, *b = x;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
#define H16(p) _mm512_cvtph_ps(LOADU(p))
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(H16(a + i), H16(b + i), s0);
        s1 = _mm512_fmadd_ps(H16(a + i + 16), H16(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(H16(a + i + 32), H16(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(H16(a + i + 48), H16(b + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(H16(a + i), H16(b + i), s0);
#undef H16
    float s = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
    for (; i < n; i++) s += h2f(a[i]) * h2f(b[i]);
    *out = s;
}

static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(LOADU(s + i)));
    for (; i < n; i++) dst[i] = h2f(s[i]);
}

/* ---------------------------------------------------------------------- */
/* 32-element block formats, two blocks per step; an odd last block is done
 * with the same arithmetic on the low half (upper half zeroed). */

/* Lane sums of w*y for 64 unsigned weight bytes. */
static inline __m512i dpb(__m512i u, __m512i y) { return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, y); }

/* One block's 32 bytes in the low half of a 512-bit register, zero above. */
static inline __m512i low256(__m256i v) { return _mm512_inserti64x4(_mm512_setzero_si512(), v, 0); }

static inline __m512i nibbles_one(const uint8_t *qa) {
    __m128i q = LOADU128(qa);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    return low256(_mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4)));
}

static void q4_0_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q4_0 *a = w;
    const block_q8_0 *b = x;
    const int64_t nb = n / QK4_0;
    const __m512i ones = _mm512_set1_epi8(1);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        __m512i y = join256(LOADU(b[i].qs), LOADU(b[i + 1].qs));
        __m512i p = _mm512_sub_epi32(dpb(nibbles64(a[i].qs, a[i + 1].qs), y), _mm512_slli_epi32(dpb(ones, y), 3));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), join_ps(h2f(a[i].d) * h2f(b[i].d), h2f(a[i + 1].d) * h2f(b[i + 1].d)), acc);
    }
    if (i < nb) {
        __m512i y = low256(LOADU(b[i].qs));
        __m512i p = _mm512_sub_epi32(dpb(nibbles_one(a[i].qs), y), _mm512_slli_epi32(dpb(ones, y), 3));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_set1_ps(h2f(a[i].d) * h2f(b[i].d)), acc);
    }
    *out = _mm512_reduce_add_ps(acc);
}

static void q4_1_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q4_1 *a = w;
    const block_q8_1 *b = x;
    const int64_t nb = n / QK4_1;
    __m512 acc = _mm512_setzero_ps();
    float m0 = 0, m1 = 0; /* the offset terms of even and odd blocks apart: kern_avx2.c's DOT_2BLK order */
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        __m512i y = join256(LOADU(b[i].qs), LOADU(b[i + 1].qs));
        __m512i p = dpb(nibbles64(a[i].qs, a[i + 1].qs), y);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), join_ps(h2f(a[i].d) * h2f(b[i].d), h2f(a[i + 1].d) * h2f(b[i + 1].d)), acc);
        m0 += h2f(a[i].m) * h2f(b[i].s);
        m1 += h2f(a[i + 1].m) * h2f(b[i + 1].s);
    }
    if (i < nb) {
        __m512i p = dpb(nibbles_one(a[i].qs), low256(LOADU(b[i].qs)));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_set1_ps(h2f(a[i].d) * h2f(b[i].d)), acc);
        m0 += h2f(a[i].m) * h2f(b[i].s);
    }
    *out = _mm512_reduce_add_ps(acc) + (m0 + m1);
}

/* The fifth bits of two q5 blocks as a 64-lane byte mask (bit j = element j). */
static inline __mmask64 qh_mask(const uint8_t *qa, const uint8_t *qb) {
    return (__mmask64)((uint64_t)load_u32(qa) | ((uint64_t)(qb ? load_u32(qb) : 0) << 32));
}

static void q5_0_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q5_0 *a = w;
    const block_q8_0 *b = x;
    const int64_t nb = n / QK5_0;
    const __m512i ones = _mm512_set1_epi8(1), h16 = _mm512_set1_epi8(16);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        __m512i y = join256(LOADU(b[i].qs), LOADU(b[i + 1].qs));
        __m512i u = nibbles64(a[i].qs, a[i + 1].qs);
        u = _mm512_mask_add_epi8(u, qh_mask(a[i].qh, a[i + 1].qh), u, h16);
        __m512i p = _mm512_sub_epi32(dpb(u, y), _mm512_slli_epi32(dpb(ones, y), 4));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), join_ps(h2f(a[i].d) * h2f(b[i].d), h2f(a[i + 1].d) * h2f(b[i + 1].d)), acc);
    }
    if (i < nb) {
        __m512i y = low256(LOADU(b[i].qs));
        __m512i u = nibbles_one(a[i].qs);
        u = _mm512_mask_add_epi8(u, qh_mask(a[i].qh, NULL), u, h16);
        __m512i p = _mm512_sub_epi32(dpb(u, y), _mm512_slli_epi32(dpb(ones, y), 4));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_set1_ps(h2f(a[i].d) * h2f(b[i].d)), acc);
    }
    *out = _mm512_reduce_add_ps(acc);
}

static void q5_1_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q5_1 *a = w;
    const block_q8_1 *b = x;
    const int64_t nb = n / QK5_1;
    const __m512i h16 = _mm512_set1_epi8(16);
    __m512 acc = _mm512_setzero_ps();
    float m0 = 0, m1 = 0; /* the offset terms of even and odd blocks apart: kern_avx2.c's DOT_2BLK order */
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        __m512i y = join256(LOADU(b[i].qs), LOADU(b[i + 1].qs));
        __m512i u = nibbles64(a[i].qs, a[i + 1].qs);
        u = _mm512_mask_add_epi8(u, qh_mask(a[i].qh, a[i + 1].qh), u, h16);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dpb(u, y)), join_ps(h2f(a[i].d) * h2f(b[i].d), h2f(a[i + 1].d) * h2f(b[i + 1].d)), acc);
        m0 += h2f(a[i].m) * h2f(b[i].s);
        m1 += h2f(a[i + 1].m) * h2f(b[i + 1].s);
    }
    if (i < nb) {
        __m512i u = nibbles_one(a[i].qs);
        u = _mm512_mask_add_epi8(u, qh_mask(a[i].qh, NULL), u, h16);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dpb(u, low256(LOADU(b[i].qs)))), _mm512_set1_ps(h2f(a[i].d) * h2f(b[i].d)), acc);
        m0 += h2f(a[i].m) * h2f(b[i].s);
    }
    *out = _mm512_reduce_add_ps(acc) + (m0 + m1);
}

/* |w| times y negated where w < 0: the signed product through vpdpbusd. */
static inline __m512i dot_i8_512(__m512i w, __m512i y) {
    __m512i ys = _mm512_mask_sub_epi8(y, _mm512_movepi8_mask(w), _mm512_setzero_si512(), y);
    return dpb(_mm512_abs_epi8(w), ys);
}

static void q8_0_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q8_0 *a = w, *b = x;
    const int64_t nb = n / QK8_0;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 3 < nb; i += 4) {
        __m512i p0 = dot_i8_512(join256(LOADU(a[i].qs), LOADU(a[i + 1].qs)), join256(LOADU(b[i].qs), LOADU(b[i + 1].qs)));
        __m512i p1 = dot_i8_512(join256(LOADU(a[i + 2].qs), LOADU(a[i + 3].qs)), join256(LOADU(b[i + 2].qs), LOADU(b[i + 3].qs)));
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), join_ps(h2f(a[i].d) * h2f(b[i].d), h2f(a[i + 1].d) * h2f(b[i + 1].d)), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), join_ps(h2f(a[i + 2].d) * h2f(b[i + 2].d), h2f(a[i + 3].d) * h2f(b[i + 3].d)), acc1);
    }
    for (; i < nb; i++) {
        __m512i p = dot_i8_512(low256(LOADU(a[i].qs)), low256(LOADU(b[i].qs)));
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_set1_ps(h2f(a[i].d) * h2f(b[i].d)), acc0);
    }
    *out = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

/* ---------------------------------------------------------------------- */
/* mxfp4, q1_0, q2_0 (activations in q8_0) */

/* 32-element blocks of 4-bit codes laid out as q4_0's (mxfp4, iq4_nl),
 * two per step: codes -> values by pshufb on every 128-bit lane, then the
 * signed product as for q8_0; the block's scale is wd(block) times the
 * activation's d. Blocks are bs bytes with the codes at qs_off. */
typedef float (*lut4_scale_fn)(const uint8_t *blk);
static inline void lut4_dot(int64_t n, const uint8_t *w, size_t bs, size_t qs_off, __m128i table, lut4_scale_fn wd,
                            const block_q8_0 *b, float *out) {
    const int64_t nb = n / 32;
    const __m512i tbl = _mm512_broadcast_i32x4(table);
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const uint8_t *w0 = w + (size_t)i * bs, *w1 = w0 + bs;
        __m512i v = _mm512_shuffle_epi8(tbl, nibbles64(w0 + qs_off, w1 + qs_off));
        __m512i p = dot_i8_512(v, join256(LOADU(b[i].qs), LOADU(b[i + 1].qs)));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), join_ps(h2f(b[i].d) * wd(w0), h2f(b[i + 1].d) * wd(w1)), acc);
    }
    if (i < nb) { /* the upper half's codes are 0, against zero activations */
        const uint8_t *w0 = w + (size_t)i * bs;
        __m512i p = dot_i8_512(_mm512_shuffle_epi8(tbl, nibbles_one(w0 + qs_off)), low256(LOADU(b[i].qs)));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_set1_ps(h2f(b[i].d) * wd(w0)), acc);
    }
    *out = _mm512_reduce_add_ps(acc);
}

KX_TABLE_TYPE_DOTS

/* nvfp4: one block (four sub-blocks, two q8_0 blocks) per step; lane group
 * j/4 of the dot is sub-block j/4. */
static void nvfp4_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_nvfp4 *a = w;
    const block_q8_0 *b = x;
    const __m512i tbl = _mm512_broadcast_i32x4(kx_mxfp4_table());
    __m256 acc = _mm256_setzero_ps(); /* one chain, the two halves in turn: kern_avx2.c's order */
    for (int64_t i = 0; i < n / QK_NVFP4; i++) {
        const __m512i v = _mm512_shuffle_epi8(tbl, join256(kx_nvfp4_codes(a[i].qs), kx_nvfp4_codes(a[i].qs + 16)));
        const __m512i p = dot_i8_512(v, join256(LOADU(b[2 * i].qs), LOADU(b[2 * i + 1].qs)));
        const float d0 = h2f(b[2 * i].d), d1 = h2f(b[2 * i + 1].d);
        const __m256 s0 = _mm256_set_m128(_mm_set1_ps(d0 * quant_ue4m3_half(a[i].d[1])), _mm_set1_ps(d0 * quant_ue4m3_half(a[i].d[0])));
        const __m256 s1 = _mm256_set_m128(_mm_set1_ps(d1 * quant_ue4m3_half(a[i].d[3])), _mm_set1_ps(d1 * quant_ue4m3_half(a[i].d[2])));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm512_castsi512_si256(p)), s0, acc);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(p, 1)), s1, acc);
    }
    *out = hsum256_ps(acc);
}

/* q1_0: 64 sign bits are a byte mask directly; y is negated where the bit
 * is clear and summed by vpdpbusd against ones. Two q8_0 blocks per step. */
static void q1_0_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q1_0 *a = w;
    const block_q8_0 *b = x;
    const __m512i ones = _mm512_set1_epi8(1);
    /* lanes 0-7 hold kern_avx2.c's acc0 (q8_0 blocks 0 then 2 of each weight block), lanes 8-15 its acc1 (1, 3) */
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK1_0; i++) {
        const float dw = h2f(a[i].d);
        const block_q8_0 *y = b + 4 * i;
        uint64_t m0, m1;
        memcpy(&m0, a[i].qs, 8);
        memcpy(&m1, a[i].qs + 8, 8);
        __m512i y0 = join256(LOADU(y[0].qs), LOADU(y[1].qs)), y1 = join256(LOADU(y[2].qs), LOADU(y[3].qs));
        y0 = _mm512_mask_sub_epi8(y0, (__mmask64)~m0, _mm512_setzero_si512(), y0);
        y1 = _mm512_mask_sub_epi8(y1, (__mmask64)~m1, _mm512_setzero_si512(), y1);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dpb(ones, y0)), join_ps(dw * h2f(y[0].d), dw * h2f(y[1].d)), acc);
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dpb(ones, y1)), join_ps(dw * h2f(y[2].d), dw * h2f(y[3].d)), acc);
    }
    *out = _mm512_reduce_add_ps(acc);
}

/* q2_0: unsigned codes (kern_x86.h) through vpdpbusd; the -1 offset folded
 * in as minus the activation sum. One weight block = two q8_0 blocks. */
static void q2_0_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q2_0 *a = w;
    const block_q8_0 *b = x;
    const __m512i ones = _mm512_set1_epi8(1);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK2_0; i++) {
        const float dw = h2f(a[i].d);
        __m256i lo, hi;
        kx_q2_0_codes(a[i].qs, &lo, &hi);
        __m512i y = join256(LOADU(b[2 * i].qs), LOADU(b[2 * i + 1].qs));
        __m512i p = _mm512_sub_epi32(dpb(join256(lo, hi), y), dpb(ones, y));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), join_ps(dw * h2f(b[2 * i].d), dw * h2f(b[2 * i + 1].d)), acc);
    }
    *out = _mm512_reduce_add_ps(acc);
}

/* ---------------------------------------------------------------------- */
/* iq4_nl (activations in q8_0); iq4_xs, tq1_0, tq2_0 (activations in q8_K) */

/* iq4_xs: two sub-blocks per step; lane sums times their scale - 32 in
 * int32, one float scale per super-block. One weight row against NC <= 4
 * activation rows (KX_IQ_ENTRY_POINTS: vec_dot is NC = 1, the gemm walks
 * rows x 4 tokens), each block's codes looked up once. */
static inline __attribute__((always_inline)) void iq4_xs_dot_tile(int64_t n, const block_iq4_xs *a, const uint8_t *xp,
                                                                  size_t xs, float *out, const int NC) {
    const __m512i tbl = _mm512_broadcast_i32x4(kx_iq4nl_table());
    __m256 acc[4];
    for (int t = 0; t < NC; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m512i s[4];
        for (int t = 0; t < NC; t++) s[t] = _mm512_setzero_si512();
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const int h = a[i].scales_h >> (4 * k);
            const int l0 = ((a[i].scales_l[k] & 0xF) | ((h & 3) << 4)) - 32;
            const int l1 = ((a[i].scales_l[k] >> 4) | (((h >> 2) & 3) << 4)) - 32;
            const __m512i v = _mm512_shuffle_epi8(tbl, nibbles64(a[i].qs + 32 * k, a[i].qs + 32 * k + 16));
            const __m512i av = _mm512_abs_epi8(v), l = join256(_mm256_set1_epi32(l0), _mm256_set1_epi32(l1));
            const __mmask64 neg = _mm512_movepi8_mask(v);
            for (int t = 0; t < NC; t++) { /* dot_i8_512, the weight side once */
                const block_q8_K *b = (const block_q8_K *)(const void *)(xp + (size_t)t * xs) + i;
                const __m512i y = LD512(b->qs + 64 * k);
                const __m512i p = dpb(av, _mm512_mask_sub_epi8(y, neg, _mm512_setzero_si512(), y));
                s[t] = _mm512_add_epi32(s[t], _mm512_mullo_epi32(p, l));
            }
        }
        for (int t = 0; t < NC; t++) {
            const block_q8_K *b = (const block_q8_K *)(const void *)(xp + (size_t)t * xs) + i;
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(halves_epi32(s[t])), _mm256_set1_ps(h2f(a[i].d) * b->d), acc[t]);
        }
    }
    for (int t = 0; t < NC; t++) out[t] = hsum256_ps(acc[t]);
}
KX_IQ_ENTRY_POINTS(iq4_xs_dot, block_iq4_xs)

/* tq1_0 / tq2_0: the block's 256 values (kern_x86.h) in four 64-byte
 * vectors, one integer sum per block. */
static inline float tq_dot(const __m256i v[8], const block_q8_K *y, float d) {
    __m512i s = _mm512_setzero_si512();
    for (int k = 0; k < 4; k++) s = _mm512_add_epi32(s, dot_i8_512(join256(v[2 * k], v[2 * k + 1]), LD512(y->qs + 64 * k)));
    return (float)_mm512_reduce_add_epi32(s) * (d * y->d);
}


KX_TQ_ROW_DOT(tq1_0_dot, block_tq1_0, kx_tq1_0_values, tq_dot)
KX_TQ_ROW_DOT(tq2_0_dot, block_tq2_0, kx_tq2_0_values, tq_dot)

/* ---------------------------------------------------------------------- */
/* K-quants */

/* vpermw indices spreading int16 scales over the 32 int16 lanes of a
 * maddubs result. k4: lanes 0-15 take scale 2c, lanes 16-31 scale 2c+1 (the
 * 64-element slice c of q4_K/q5_K). k16: lanes take scale base + lane/8 (four
 * 16-element sub-blocks per 64 elements, q2_K/q3_K/q6_K), base = 4s. */
static int16_t idx_k4[4][32], idx_k16[4][32];

static void init_idx(void) {
    for (int c = 0; c < 4; c++)
        for (int k = 0; k < 32; k++) {
            idx_k4[c][k] = (int16_t)(2 * c + (k >= 16));
            idx_k16[c][k] = (int16_t)(4 * c + k / 8);
        }
}

static inline __m512i zext256(__m256i v) { return _mm512_inserti64x4(_mm512_setzero_si512(), v, 0); }

/* Grid i-quants (kern_x86.h's decoders): two 32-element sub-blocks per
 * step; the 64 sign bits are a byte mask that negates the activations,
 * maddubs gives int16 pairs (<= 2 * 62 * 127) and vpdpwssd multiplies them
 * by the 16-element scales (lanes from idx_k16, as q6_K) into int32. */
#define KX_IQ_ROW(name, head, sub, has_signs, off9, factor, btype)                                          \
    /* one weight row against NC <= 4 activation rows, each block decoded once */                           \
    static inline __attribute__((always_inline)) void name##_tile(int64_t n, const btype *a, const uint8_t *xp, \
                                                                  size_t xs, float *out, const int NC) {      \
        __m256 acc[4];                                                                                      \
        int16_t ls[16];                                                                                     \
        for (int t = 0; t < NC; t++) acc[t] = _mm256_setzero_ps();                                          \
        for (int64_t i = 0; i < n / QK_K; i++) {                                                            \
            const float d = head(&a[i], ls);                                                                \
            const __m512i sc = zext256(LOADU(ls));                                                          \
            __m512i s[4];                                                                                   \
            for (int t = 0; t < NC; t++) s[t] = _mm512_setzero_si512();                                     \
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {                                           \
                uint32_t g0, g1;                                                                            \
                const __m256i u0 = sub(&a[i], 2 * c, &g0), u1 = sub(&a[i], 2 * c + 1, &g1);                 \
                const __m512i u = join256(u0, u1);                                                          \
                const __mmask64 m = (__mmask64)((uint64_t)g1 << 32 | g0);                                   \
                const __m512i l = _mm512_permutexvar_epi16(LD512(idx_k16[c]), sc);                          \
                for (int t = 0; t < NC; t++) {                                                              \
                    const block_q8_K *b = (const block_q8_K *)(const void *)(xp + (size_t)t * xs) + i;      \
                    __m512i y = LD512(b->qs + 64 * c);                                                      \
                    if (has_signs) y = _mm512_mask_sub_epi8(y, m, _mm512_setzero_si512(), y);               \
                    s[t] = _mm512_dpwssd_epi32(s[t], _mm512_maddubs_epi16(u, y), l);                        \
                }                                                                                           \
            }                                                                                               \
            for (int t = 0; t < NC; t++) {                                                                  \
                const block_q8_K *b = (const block_q8_K *)(const void *)(xp + (size_t)t * xs) + i;          \
                if (off9) {                                                                                 \
                    const __m256i k = _mm256_madd_epi16(LOADU(b->bsums), LOADU(ls));                        \
                    s[t] = _mm512_sub_epi32(s[t], zext256(_mm256_add_epi32(_mm256_slli_epi32(k, 3), k)));   \
                }                                                                                           \
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(halves_epi32(s[t])), _mm256_set1_ps(d * b->d), acc[t]); \
            }                                                                                               \
        }                                                                                                   \
        for (int t = 0; t < NC; t++) out[t] = (factor) * hsum256_ps(acc[t]);                                \
    }                                                                                                       \
    KX_IQ_ENTRY_POINTS(name, btype)

KX_IQ_GRID_DOTS

/* Scale/min products for q4_K/q5_K: sc512 holds the 8 scales as int16 in lanes
 * 0-7; pm = m_j * (bsums[2j] + bsums[2j+1]) as 8 int32. */
static inline void k4_scales(const uint8_t *scales, const int16_t *bsums, __m512i *sc512, __m256i *pm) {
    uint32_t u[4];
    quant_k4_unpack(scales, u);
    __m128i v = _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]);
    *sc512 = zext256(_mm256_cvtepu8_epi16(v));
    *pm = _mm256_madd_epi16(LOADU(bsums), _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(v, v)));
}

static void q4_K_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    const __m512i m4 = _mm512_set1_epi8(0x0F), sh = shifts2(0, 4);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m512i sc;
        __m256i pm;
        k4_scales(a[i].scales, b[i].bsums, &sc, &pm);
        const int8_t *y = b[i].qs;
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) {
            __m512i q = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(LOADU(a[i].qs + 32 * c)), sh), m4);
            __m512i p = _mm512_maddubs_epi16(q, LD512(y + 64 * c));
            __m512i scv = _mm512_permutexvar_epi16(LD512(idx_k4[c]), sc);
            if (c & 1) s1 = _mm512_dpwssd_epi32(s1, p, scv);
            else s0 = _mm512_dpwssd_epi32(s0, p, scv);
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_set1_ps(h2f(a[i].d) * b[i].d), acc);
        accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pm), _mm256_set1_ps(h2f(a[i].dmin) * b[i].d), accm);
    }
    *out = _mm512_reduce_add_ps(acc) - hsum256_ps(accm);
}

static void q5_K_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q5_K *a = w;
    const block_q8_K *b = x;
    const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1), sh = shifts2(0, 4);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m512i sc;
        __m256i pm;
        k4_scales(a[i].scales, b[i].bsums, &sc, &pm);
        const int8_t *y = b[i].qs;
        __m512i hb = _mm512_srlv_epi16(_mm512_broadcast_i64x4(LOADU(a[i].qh)), shifts2(0, 1));
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) {
            __m512i q = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(LOADU(a[i].qs + 32 * c)), sh), m4);
            q = _mm512_or_si512(q, _mm512_slli_epi16(_mm512_and_si512(hb, one), 4));
            hb = _mm512_srli_epi16(hb, 2);
            __m512i p = _mm512_maddubs_epi16(q, LD512(y + 64 * c));
            __m512i scv = _mm512_permutexvar_epi16(LD512(idx_k4[c]), sc);
            if (c & 1) s1 = _mm512_dpwssd_epi32(s1, p, scv);
            else s0 = _mm512_dpwssd_epi32(s0, p, scv);
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_set1_ps(h2f(a[i].d) * b[i].d), acc);
        accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pm), _mm256_set1_ps(h2f(a[i].dmin) * b[i].d), accm);
    }
    *out = _mm512_reduce_add_ps(acc) - hsum256_ps(accm);
}

static void q6_K_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i shl = shifts2(4, 2), shr = shifts2(0, 2);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sc16 = _mm256_cvtepi8_epi16(LOADU128(a[i].scales));
        __m512i sc = zext256(sc16);
        __m256i corr = _mm256_madd_epi16(LOADU(b[i].bsums), sc16);
        const int8_t *y = b[i].qs;
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            __m512i l = LD512(a[i].ql + 64 * h); /* [ql 0-31 | ql 32-63] of this half */
            __m512i qh = _mm512_broadcast_i64x4(LOADU(a[i].qh + 32 * h));
            /* [g0 | g1] and [g2 | g3]: high bits 2g..2g+1 moved to bits 4-5 */
            __m512i u01 = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi16(qh, shl), m30));
            __m512i u23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                          _mm512_and_si512(_mm512_srlv_epi16(qh, shr), m30));
            __m512i p01 = _mm512_maddubs_epi16(u01, LD512(y + 128 * h));
            __m512i p23 = _mm512_maddubs_epi16(u23, LD512(y + 128 * h + 64));
            s0 = _mm512_dpwssd_epi32(s0, p01, _mm512_permutexvar_epi16(LD512(idx_k16[2 * h]), sc));
            s1 = _mm512_dpwssd_epi32(s1, p23, _mm512_permutexvar_epi16(LD512(idx_k16[2 * h + 1]), sc));
        }
        __m512i sumi = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), zext256(_mm256_slli_epi32(corr, 5)));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(h2f(a[i].d) * b[i].d), acc);
    }
    *out = _mm512_reduce_add_ps(acc);
}

static void q2_K_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q2_K *a = w;
    const block_q8_K *b = x;
    const __m512i m3 = _mm512_set1_epi8(3), sh01 = shifts2(0, 2), sh23 = shifts2(4, 6);
    __m512 acc = _mm512_setzero_ps();
    __m256 accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m128i sb = LOADU128(a[i].scales);
        __m512i sc = zext256(_mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0x0F))));
        __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F)));
        __m256i pm = _mm256_madd_epi16(LOADU(b[i].bsums), mn16);
        const int8_t *y = b[i].qs;
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            __m512i q = _mm512_broadcast_i64x4(LOADU(a[i].qs + 32 * h));
            __m512i u01 = _mm512_and_si512(_mm512_srlv_epi16(q, sh01), m3);
            __m512i u23 = _mm512_and_si512(_mm512_srlv_epi16(q, sh23), m3);
            __m512i p01 = _mm512_maddubs_epi16(u01, LD512(y + 128 * h));
            __m512i p23 = _mm512_maddubs_epi16(u23, LD512(y + 128 * h + 64));
            s0 = _mm512_dpwssd_epi32(s0, p01, _mm512_permutexvar_epi16(LD512(idx_k16[2 * h]), sc));
            s1 = _mm512_dpwssd_epi32(s1, p23, _mm512_permutexvar_epi16(LD512(idx_k16[2 * h + 1]), sc));
        }
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_set1_ps(b[i].d * h2f(a[i].d)), acc);
        accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pm), _mm256_set1_ps(b[i].d * h2f(a[i].dmin)), accm);
    }
    *out = _mm512_reduce_add_ps(acc) - hsum256_ps(accm);
}

static void q3_K_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q3_K *a = w;
    const block_q8_K *b = x;
    const __m512i m3 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1), sh01 = shifts2(0, 2), sh23 = shifts2(4, 6);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint32_t s32[4];
        quant_k3_unpack(a[i].scales, s32);
        __m128i sb = _mm_sub_epi8(_mm_set_epi32((int)s32[3], (int)s32[2], (int)s32[1], (int)s32[0]), _mm_set1_epi8(32));
        __m256i sc16 = _mm256_cvtepi8_epi16(sb);
        __m512i sc = zext256(sc16);
        __m256i corr = _mm256_madd_epi16(LOADU(b[i].bsums), sc16);
        __m512i hm = _mm512_broadcast_i64x4(LOADU(a[i].hmask));
        const int8_t *y = b[i].qs;
        __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
        _Pragma("GCC unroll 2")
        for (int h = 0; h < 2; h++) {
            __m512i q = _mm512_broadcast_i64x4(LOADU(a[i].qs + 32 * h));
            /* group g takes hmask bit 4h+g as value bit 2 */
            __m512i h01 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hm, shifts2((short)(4 * h), (short)(4 * h + 1))), one), 2);
            __m512i h23 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(hm, shifts2((short)(4 * h + 2), (short)(4 * h + 3))), one), 2);
            __m512i u01 = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi16(q, sh01), m3), h01);
            __m512i u23 = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi16(q, sh23), m3), h23);
            __m512i p01 = _mm512_maddubs_epi16(u01, LD512(y + 128 * h));
            __m512i p23 = _mm512_maddubs_epi16(u23, LD512(y + 128 * h + 64));
            s0 = _mm512_dpwssd_epi32(s0, p01, _mm512_permutexvar_epi16(LD512(idx_k16[2 * h]), sc));
            s1 = _mm512_dpwssd_epi32(s1, p23, _mm512_permutexvar_epi16(LD512(idx_k16[2 * h + 1]), sc));
        }
        __m512i sumi = _mm512_sub_epi32(_mm512_add_epi32(s0, s1), zext256(_mm256_slli_epi32(corr, 2)));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(h2f(a[i].d) * b[i].d), acc);
    }
    *out = _mm512_reduce_add_ps(acc);
}

/* ---------------------------------------------------------------------- */
/* gemm tiles for q8_0, mxfp4, q4_0 and iq4_nl weights x q8_0 activations: 4 weight rows x
 * up to 4 tokens, two 32-element blocks per step.
 *
 * The weights enter vpdpbusd as unsigned bytes w + 128 (q8_0: w ^ 0x80;
 * mxfp4, iq4_nl: ggml's tables shifted by 128; q4_0: nibble + 120), and the accumulator starts at
 * -128 * (sum of the four activations of the lane), so every int32 lane is
 * the exact signed sum of its four products: one instruction per row and
 * token. The per-lane sums are then folded to each row's exact sum of the
 * whole block (t5_fold_halves), and block b and b + 1 go into the same
 * float accumulator one after the other with the same scale products, as
 * kern_avx2.c's tile does: the results are bit for bit those of the AVX2
 * tile and of the AMX gemm (tests/test_matmul.c, tests/test_amx.c). */

#define T5_ROWS 4
#define T5_INL static inline __attribute__((always_inline))

typedef void (*tile5_fn)(int64_t n, const uint8_t *const *w, const uint8_t *x, size_t xs, float *out,
                         const uint8_t *pf, size_t pf_step);

/* The next tile's rows into L1, a slice per block (as kern_avx2.c). */
T5_INL void t5_prefetch(const uint8_t *pf, size_t step, int64_t i) {
    if (!pf) return;
    const uint8_t *p = pf + (size_t)i * step;
    for (size_t k = 0; k < step; k += 64) _mm_prefetch((const char *)(p + k), _MM_HINT_T0);
}

/* Walk nr x nc in tiles of 4 rows x up to 4 tokens, rows outermost (the
 * walk of kern_avx2.c's gemm_walk). */
static void t5_walk(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                    size_t ldy, const tile5_fn *tiles, int64_t steps) {
    const uint8_t *W = w, *X = x;
    const size_t pf_step = (T5_ROWS * ws + (size_t)steps - 1) / (size_t)steps;
    for (int r0 = 0; r0 < nr; r0 += T5_ROWS) {
        const int rn = nr - r0 < T5_ROWS ? nr - r0 : T5_ROWS;
        const uint8_t *wr[T5_ROWS];
        for (int i = 0; i < T5_ROWS; i++) wr[i] = W + (size_t)(r0 + (i < rn ? i : rn - 1)) * ws;
        for (int c0 = 0; c0 < nc; c0 += 4) {
            const int cn = nc - c0 < 4 ? nc - c0 : 4;
            float out[T5_ROWS * 4];
            const uint8_t *pf = c0 == 0 && r0 + 2 * T5_ROWS <= nr ? W + (size_t)(r0 + T5_ROWS) * ws : NULL;
            tiles[cn - 1](n, wr, X + (size_t)c0 * xs, xs, out, pf, pf_step);
            for (int c = 0; c < cn; c++)
                for (int i = 0; i < rn; i++) y[(size_t)(c0 + c) * ldy + (size_t)(r0 + i)] = out[c * T5_ROWS + i];
        }
    }
}

/* For each 128-bit lane k: lane 4k + r = the sum of v_r's lanes 4k..4k+3. */
T5_INL __m512i t5_sum4(__m512i v0, __m512i v1, __m512i v2, __m512i v3) {
    const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(v0, v1), _mm512_unpackhi_epi32(v0, v1));
    const __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(v2, v3), _mm512_unpackhi_epi32(v2, v3));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}
T5_INL __m256i t5_sum4_256(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
    const __m256i a = _mm256_add_epi32(_mm256_unpacklo_epi32(v0, v1), _mm256_unpackhi_epi32(v0, v1));
    const __m256i b = _mm256_add_epi32(_mm256_unpacklo_epi32(v2, v3), _mm256_unpackhi_epi32(v2, v3));
    return _mm256_add_epi32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b));
}

/* Lanes [b h0 | b h1 | b+1 h0 | b+1 h1] (128 bits each, rows 0..3) -> [b | b+1]: each row's two half-block sums
 * added, exactly. */
T5_INL __m256i t5_fold_halves(__m512i s) {
    const __m512i sum = _mm512_add_epi32(s, _mm512_shuffle_i32x4(s, s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_castsi512_si256(_mm512_shuffle_i32x4(sum, sum, _MM_SHUFFLE(2, 0, 2, 0)));
}

/* f16 scales of blocks b, b + 1 of the four rows. */
#define T5_F16_SCALES2(b)                                                                                          \
    _mm256_cvtph_ps(_mm_setr_epi16((short)w0[b].d, (short)w1[b].d, (short)w2[b].d, (short)w3[b].d,                 \
                                   (short)w0[(b) + 1].d, (short)w1[(b) + 1].d, (short)w2[(b) + 1].d,               \
                                   (short)w3[(b) + 1].d))
#define T5_F16_SCALE1(b)                                                                                           \
    _mm256_castps128_ps256(_mm_cvtph_ps(_mm_setr_epi16((short)w0[b].d, (short)w1[b].d, (short)w2[b].d,            \
                                                       (short)w3[b].d, 0, 0, 0, 0)))

/* E8M0 half scales (quant_e8m0_half) of 8 exponent bytes, as floats. */
T5_INL __m256 t5_e8m0(__m256i e) {
    const __m256i big = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_mask_blend_epi32(_mm256_cmpge_epu32_mask(e, _mm256_set1_epi32(2)), small, big));
}
#define T5_E8M0_SCALES2(b)                                                                                         \
    t5_e8m0(_mm256_setr_epi32(w0[b].e, w1[b].e, w2[b].e, w3[b].e, w0[(b) + 1].e, w1[(b) + 1].e, w2[(b) + 1].e,     \
                              w3[(b) + 1].e))
#define T5_E8M0_SCALE1(b) t5_e8m0(_mm256_setr_epi32(w0[b].e, w1[b].e, w2[b].e, w3[b].e, 0, 0, 0, 0))

/* Weight bytes + 128 of blocks b, b + 1 (64 bytes) or of block b (32). */
#define T5_Q8_0_LOAD2(wr, b) _mm512_xor_si512(join256(LOADU((wr)[b].qs), LOADU((wr)[(b) + 1].qs)), k80)
#define T5_Q8_0_LOAD1(wr, b) _mm256_xor_si256(LOADU((wr)[b].qs), _mm512_castsi512_si256(k80))
#define T5_MXFP4_LOAD2(wr, b) _mm512_shuffle_epi8(tblu, t5_nibbles64((wr)[b].qs, (wr)[(b) + 1].qs))
#define T5_MXFP4_LOAD1(wr, b) _mm256_shuffle_epi8(_mm512_castsi512_si256(tblu), t5_nibbles32((wr)[b].qs))
/* q4_0: nibble - 8 + 128; iq4_nl: ggml's non-linear table shifted by 128
 * (the constant table is hoisted out of the loop by the compiler). */
#define T5_Q4_0_LOAD2(wr, b) _mm512_add_epi8(t5_nibbles64((wr)[b].qs, (wr)[(b) + 1].qs), _mm512_set1_epi8(120))
#define T5_Q4_0_LOAD1(wr, b) _mm256_add_epi8(t5_nibbles32((wr)[b].qs), _mm256_set1_epi8(120))
#define T5_IQ4NL_TBL _mm512_xor_si512(_mm512_broadcast_i32x4(kx_iq4nl_table()), k80)
#define T5_IQ4_NL_LOAD2(wr, b) _mm512_shuffle_epi8(T5_IQ4NL_TBL, t5_nibbles64((wr)[b].qs, (wr)[(b) + 1].qs))
#define T5_IQ4_NL_LOAD1(wr, b) _mm256_shuffle_epi8(_mm512_castsi512_si256(T5_IQ4NL_TBL), t5_nibbles32((wr)[b].qs))

/* Two blocks' nibble bytes -> 64 code bytes in element order, as
 * nibbles64 but in fewer instructions: broadcast loads [A A B B], then the
 * high nibbles shifted down in 128-bit lanes 1 and 3. */
T5_INL __m512i t5_nibbles64(const uint8_t *qa, const uint8_t *qb) {
    const __m512i v = _mm512_mask_broadcast_i32x4(_mm512_broadcast_i32x4(LOADU128(qa)), 0xFF00, LOADU128(qb));
    const __m512i sh = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi64(v, sh), _mm512_set1_epi8(0x0F));
}

/* One block's 16 nibble bytes -> 32 code bytes in element order. */
T5_INL __m256i t5_nibbles32(const uint8_t *qs) {
    const __m128i q = LOADU128(qs), m4 = _mm_set1_epi8(0x0F);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}

#define T5_TILE(NAME, WT, LOAD2, LOAD1, SCALES2, SCALE1)                                                          \
    T5_INL void NAME(int64_t n, const uint8_t *const *wp, const uint8_t *xp, size_t xs, float *out,               \
                     const uint8_t *pf, size_t pf_step, const int C) {                                            \
        const WT *w0 = (const WT *)(const void *)wp[0], *w1 = (const WT *)(const void *)wp[1];                     \
        const WT *w2 = (const WT *)(const void *)wp[2], *w3 = (const WT *)(const void *)wp[3];                     \
        const block_q8_0 *x[4];                                                                                    \
        __m128 acc[4];                                                                                             \
        const __m512i k80 = _mm512_set1_epi8((char)0x80);                                                          \
        const __m512i tblu = _mm512_xor_si512(_mm512_broadcast_i32x4(kx_mxfp4_table()), k80);                      \
        (void)tblu;                                                                                                \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                                      \
            x[c] = (const block_q8_0 *)(const void *)(xp + (size_t)c * xs);                                        \
            acc[c] = _mm_setzero_ps();                                                                             \
        }                                                                                                          \
        const int64_t nb = n / 32;                                                                                 \
        int64_t b = 0;                                                                                             \
        for (; b + 1 < nb; b += 2) {                                                                               \
            t5_prefetch(pf, pf_step, b);                                                                           \
            t5_prefetch(pf, pf_step, b + 1);                                                                       \
            const __m256 dw = SCALES2(b); /* [block b: rows 0..3 | block b + 1] */                                 \
            const __m512i u0 = LOAD2(w0, b), u1 = LOAD2(w1, b), u2 = LOAD2(w2, b), u3 = LOAD2(w3, b);              \
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                                  \
                const __m512i y = join256(LOADU(x[c][b].qs), LOADU(x[c][b + 1].qs));                               \
                const __m512i corr =                                                                               \
                    _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), k80, y)); \
                const __m512i s = t5_sum4(_mm512_dpbusd_epi32(corr, u0, y), _mm512_dpbusd_epi32(corr, u1, y),     \
                                          _mm512_dpbusd_epi32(corr, u2, y), _mm512_dpbusd_epi32(corr, u3, y));    \
                const __m256 f = _mm256_cvtepi32_ps(t5_fold_halves(s));                                            \
                const __m256 d = _mm256_mul_ps(dw, _mm256_set_m128(_mm_set1_ps(h2f(x[c][b + 1].d)),                \
                                                                   _mm_set1_ps(h2f(x[c][b].d))));                  \
                acc[c] = _mm_fmadd_ps(_mm256_castps256_ps128(f), _mm256_castps256_ps128(d), acc[c]);               \
                acc[c] = _mm_fmadd_ps(_mm256_extractf128_ps(f, 1), _mm256_extractf128_ps(d, 1), acc[c]);          \
            }                                                                                                      \
        }                                                                                                          \
        if (b < nb) {                                                                                              \
            t5_prefetch(pf, pf_step, b);                                                                           \
            const __m256 dw = SCALE1(b);                                                                           \
            const __m256i u0 = LOAD1(w0, b), u1 = LOAD1(w1, b), u2 = LOAD1(w2, b), u3 = LOAD1(w3, b);              \
            const __m256i k80h = _mm512_castsi512_si256(k80);                                                      \
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                                  \
                const __m256i y = LOADU(x[c][b].qs);                                                               \
                const __m256i corr =                                                                               \
                    _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), k80h, y)); \
                const __m256i s = t5_sum4_256(_mm256_dpbusd_epi32(corr, u0, y), _mm256_dpbusd_epi32(corr, u1, y), \
                                              _mm256_dpbusd_epi32(corr, u2, y), _mm256_dpbusd_epi32(corr, u3, y));\
                const __m128 d = _mm_mul_ps(_mm256_castps256_ps128(dw), _mm_set1_ps(h2f(x[c][b].d)));              \
                const __m128i sf = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));       \
                acc[c] = _mm_fmadd_ps(_mm_cvtepi32_ps(sf), d, acc[c]);                                             \
            }                                                                                                      \
        }                                                                                                          \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) _mm_storeu_ps(out + c * T5_ROWS, acc[c]);              \
    }

#define T5_GEMM(NAME) T5_GEMM_BLK(NAME, 32)
#define T5_GEMM_BLK(NAME, BLK)                                                                                     \
    static void NAME##_1(int64_t n, const uint8_t *const *w, const uint8_t *x, size_t xs, float *o,            \
                         const uint8_t *pf, size_t ps) { NAME(n, w, x, xs, o, pf, ps, 1); }                    \
    static void NAME##_2(int64_t n, const uint8_t *const *w, const uint8_t *x, size_t xs, float *o,            \
                         const uint8_t *pf, size_t ps) { NAME(n, w, x, xs, o, pf, ps, 2); }                    \
    static void NAME##_3(int64_t n, const uint8_t *const *w, const uint8_t *x, size_t xs, float *o,            \
                         const uint8_t *pf, size_t ps) { NAME(n, w, x, xs, o, pf, ps, 3); }                    \
    static void NAME##_4(int64_t n, const uint8_t *const *w, const uint8_t *x, size_t xs, float *o,            \
                         const uint8_t *pf, size_t ps) { NAME(n, w, x, xs, o, pf, ps, 4); }                    \
    static void NAME##_gemm(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,      \
                            float *y, size_t ldy) {                                                             \
        static const tile5_fn tiles[4] = {NAME##_1, NAME##_2, NAME##_3, NAME##_4};                              \
        t5_walk(n, w, ws, nr, x, xs, nc, y, ldy, tiles, (n + (BLK) - 1) / (BLK));                               \
    }

T5_TILE(q8_0_t5, block_q8_0, T5_Q8_0_LOAD2, T5_Q8_0_LOAD1, T5_F16_SCALES2, T5_F16_SCALE1)
T5_TILE(mxfp4_t5, block_mxfp4, T5_MXFP4_LOAD2, T5_MXFP4_LOAD1, T5_E8M0_SCALES2, T5_E8M0_SCALE1)
T5_TILE(q4_0_t5, block_q4_0, T5_Q4_0_LOAD2, T5_Q4_0_LOAD1, T5_F16_SCALES2, T5_F16_SCALE1)
T5_TILE(iq4_nl_t5, block_iq4_nl, T5_IQ4_NL_LOAD2, T5_IQ4_NL_LOAD1, T5_F16_SCALES2, T5_F16_SCALE1)
T5_GEMM(q8_0_t5)
T5_GEMM(mxfp4_t5)
T5_GEMM(q4_0_t5)
T5_GEMM(iq4_nl_t5)

/* K-quant x q8_K tiles, 4 rows x up to 4 tokens. Per super-block, each
 * row's weight side is decoded once (t5_k_decode): its four 64-element
 * slices as unsigned bytes, the slices' scales spread to the int16 lanes
 * of a maddubs result (idx_k4 / idx_k16), and the int16 vector whose madd
 * with the activations' bsums gives the block's min products (q4_K, q5_K,
 * q2_K: subtracted with dmin) or offset products (q6_K, q3_K: 32 or 4
 * times, subtracted in int32). Per row and token the integer vector is the
 * lone dot's (maddubs + vpdpwssd per slice), its two 256-bit halves added
 * (lane j: bytes 4j..4j+3 of every 32-byte slice of the block, exactly the
 * lanes of kern_avx2.c's kq_tile), then folded as those
 * tiles fold, lane for lane: the outputs are kern_avx2.c's kq_tile's
 * bits (tests/test_matmul.c), and every (row, token) is summed on its own,
 * so they do not depend on the tiling (quant.h's gemm contract). Each
 * row's size, d and dmin: kern_x86.h's kx_k_size and kx_k_scales. */

/* q4_K / q5_K: slice k = qs[32k..32k+31], low nibbles then high (q5_K: qh bit 2k / 2k+1 as bit 4). */
T5_INL void t5_k4_decode(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh, __m512i u[4], __m512i l[4],
                         __m256i *mb) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1), sh = shifts2(0, 4);
    uint32_t w[4];
    quant_k4_unpack(scales, w);
    const __m128i v = _mm_set_epi32((int)w[3], (int)w[2], (int)w[1], (int)w[0]);
    const __m512i sc = zext256(_mm256_cvtepu8_epi16(v));
    *mb = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(v, v)); /* m_j twice: pairs of bsums */
    __m512i hb = qh ? _mm512_srlv_epi16(_mm512_broadcast_i64x4(LOADU(qh)), shifts2(0, 1)) : _mm512_setzero_si512();
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
        u[k] = _mm512_and_si512(_mm512_srlv_epi16(_mm512_broadcast_i64x4(LOADU(qs + 32 * k)), sh), m4);
        if (qh) {
            u[k] = _mm512_or_si512(u[k], _mm512_slli_epi16(_mm512_and_si512(hb, one), 4));
            hb = _mm512_srli_epi16(hb, 2);
        }
        l[k] = _mm512_permutexvar_epi16(LD512(idx_k4[k]), sc);
    }
}

T5_INL void t5_k_decode(const int type, const uint8_t *blk, __m512i u[4], __m512i l[4], __m256i *mb) {
    const __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    const __m512i one = _mm512_set1_epi8(1);
    __m512i sc;
    if (type == DF_TYPE_Q4_K) {
        const block_q4_K *a = (const block_q4_K *)(const void *)blk;
        t5_k4_decode(a->scales, a->qs, NULL, u, l, mb);
        return;
    }
    if (type == DF_TYPE_Q5_K) {
        const block_q5_K *a = (const block_q5_K *)(const void *)blk;
        t5_k4_decode(a->scales, a->qs, a->qh, u, l, mb);
        return;
    }
    if (type == DF_TYPE_Q2_K) { /* slice 2h + g: qs[32h..32h+31] bits 4g..4g+1 and 4g+2..4g+3 */
        const block_q2_K *a = (const block_q2_K *)(const void *)blk;
        const __m128i sb = LOADU128(a->scales);
        sc = zext256(_mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0x0F))));
        *mb = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F)));
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const __m512i q = _mm512_broadcast_i64x4(LOADU(a->qs + 32 * h));
            u[2 * h] = _mm512_and_si512(_mm512_srlv_epi16(q, shifts2(0, 2)), m3);
            u[2 * h + 1] = _mm512_and_si512(_mm512_srlv_epi16(q, shifts2(4, 6)), m3);
        }
    } else if (type == DF_TYPE_Q3_K) { /* as q2_K, plus hmask bit 4h + g as value bit 2 */
        const block_q3_K *a = (const block_q3_K *)(const void *)blk;
        uint32_t s32[4];
        quant_k3_unpack(a->scales, s32);
        const __m256i sc16 = _mm256_cvtepi8_epi16(
            _mm_sub_epi8(_mm_set_epi32((int)s32[3], (int)s32[2], (int)s32[1], (int)s32[0]), _mm_set1_epi8(32)));
        sc = zext256(sc16);
        *mb = sc16;
        const __m512i hm = _mm512_broadcast_i64x4(LOADU(a->hmask));
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const __m512i q = _mm512_broadcast_i64x4(LOADU(a->qs + 32 * h));
            const __m512i h01 = _mm512_slli_epi16(
                _mm512_and_si512(_mm512_srlv_epi16(hm, shifts2((short)(4 * h), (short)(4 * h + 1))), one), 2);
            const __m512i h23 = _mm512_slli_epi16(
                _mm512_and_si512(_mm512_srlv_epi16(hm, shifts2((short)(4 * h + 2), (short)(4 * h + 3))), one), 2);
            u[2 * h] = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi16(q, shifts2(0, 2)), m3), h01);
            u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srlv_epi16(q, shifts2(4, 6)), m3), h23);
        }
    } else { /* q6_K: slice 2h + g, low bits from ql[64h..64h+63], high bits from qh[32h..32h+31] */
        const block_q6_K *a = (const block_q6_K *)(const void *)blk;
        const __m256i sc16 = _mm256_cvtepi8_epi16(LOADU128(a->scales));
        sc = zext256(sc16);
        *mb = sc16;
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const __m512i lo = LD512(a->ql + 64 * h); /* [ql 0-31 | ql 32-63] of this half */
            const __m512i qh = _mm512_broadcast_i64x4(LOADU(a->qh + 32 * h));
            u[2 * h] = _mm512_or_si512(_mm512_and_si512(lo, m4),
                                       _mm512_and_si512(_mm512_sllv_epi16(qh, shifts2(4, 2)), m30));
            u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lo, 4), m4),
                                           _mm512_and_si512(_mm512_srlv_epi16(qh, shifts2(0, 2)), m30));
        }
    }
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) l[k] = _mm512_permutexvar_epi16(LD512(idx_k16[k]), sc);
}

/* Per row and token of one super-block: the lone dot's integer vector, its halves added. */
T5_INL __m256i t5_k_sum(const __m512i u[4], const __m512i l[4], const block_q8_K *x) {
    __m512i s = _mm512_setzero_si512();
    _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
        s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(u[k], LD512(x->qs + 64 * k)), l[k]);
    return _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
}

/* q4_K, q5_K, q2_K (d and dmin): kern_avx2.c's kq_tile folding (with_min), hadd(sums, mins) per row to each row's exact
 * super-block sums [S M], scaled by [d, -dmin] * d_y; a row's result is accS + accM. */
T5_INL __m128i t5_fold_pair(__m256i v) { return _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)); }
T5_INL void t5_kmin(const int type, int64_t n, const uint8_t *const *wp, const uint8_t *xp, size_t xs, float *out,
                    const uint8_t *pf, size_t pf_step, const int C) {
    const size_t bs = kx_k_size(type);
    const block_q8_K *x[4];
    __m256 acc[4];
    const __m256 sign = _mm256_setr_ps(1, -1, 1, -1, 1, -1, 1, -1);
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
        x[c] = (const block_q8_K *)(const void *)(xp + (size_t)c * xs);
        acc[c] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        t5_prefetch(pf, pf_step, i);
        __m256i t[T5_ROWS][4]; /* per row and token: hadd(s, m) as in the AVX2 tile */
        uint16_t d[T5_ROWS], dm[T5_ROWS];
        _Pragma("GCC unroll 4") for (int r = 0; r < T5_ROWS; r++) {
            const uint8_t *blk = wp[r] + (size_t)i * bs;
            __m512i u[4], l[4];
            __m256i mins;
            t5_k_decode(type, blk, u, l, &mins);
            kx_k_scales(type, blk, &d[r], &dm[r]);
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
                t[r][c] = _mm256_hadd_epi32(t5_k_sum(u, l, &x[c][i]), _mm256_madd_epi16(LOADU(x[c][i].bsums), mins));
        }
        const __m128i dh = _mm_setr_epi16((short)d[0], (short)dm[0], (short)d[1], (short)dm[1], (short)d[2],
                                          (short)dm[2], (short)d[3], (short)dm[3]);
        const __m256 dd = _mm256_mul_ps(_mm256_cvtph_ps(dh), sign); /* [d, -dmin] of rows 0..3 */
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
            const __m256i sm = _mm256_set_m128i(t5_fold_pair(_mm256_hadd_epi32(t[2][c], t[3][c])),
                                                t5_fold_pair(_mm256_hadd_epi32(t[0][c], t[1][c])));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sm), _mm256_mul_ps(dd, _mm256_set1_ps(x[c][i].d)), acc[c]);
        }
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) /* kern_avx2.c's store_sm */
        _mm_storeu_ps(out + c * T5_ROWS, _mm_hadd_ps(_mm256_castps256_ps128(acc[c]), _mm256_extractf128_ps(acc[c], 1)));
    /* The upper state cleared after the last use of a wide register: without it the compiler put its vzeroupper
     * before the final fold, which reads the upper half of a ymm16+ register, and the scalar (SSE) code the
     * caller runs next went ~30% slower on an Intel Xeon (measured). */
    _mm256_zeroupper();
}

/* q6_K, q3_K (one d, an offset of 32 or 4): kern_avx2.c's kq_tile folding (offsets), the offset products subtracted. */
T5_INL void t5_koff(const int type, int64_t n, const uint8_t *const *wp, const uint8_t *xp, size_t xs, float *out,
                    const uint8_t *pf, size_t pf_step, const int C) {
    const size_t bs = kx_k_size(type);
    const int off_shift = type == DF_TYPE_Q6_K ? 5 : 2;
    const block_q8_K *x[4];
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
        x[c] = (const block_q8_K *)(const void *)(xp + (size_t)c * xs);
        acc[c] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        t5_prefetch(pf, pf_step, i);
        __m256i t[T5_ROWS][4];
        uint16_t d[T5_ROWS], unused;
        _Pragma("GCC unroll 4") for (int r = 0; r < T5_ROWS; r++) {
            const uint8_t *blk = wp[r] + (size_t)i * bs;
            __m512i u[4], l[4];
            __m256i sc16;
            t5_k_decode(type, blk, u, l, &sc16);
            kx_k_scales(type, blk, &d[r], &unused);
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                const __m256i off = _mm256_madd_epi16(LOADU(x[c][i].bsums), sc16);
                t[r][c] = _mm256_sub_epi32(t5_k_sum(u, l, &x[c][i]), _mm256_sll_epi32(off, _mm_cvtsi32_si128(off_shift)));
            }
        }
        const __m128 d4 = _mm_cvtph_ps(_mm_setr_epi16((short)d[0], (short)d[1], (short)d[2], (short)d[3], 0, 0, 0, 0));
        const __m256 dw = _mm256_set_m128(d4, d4);
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) { /* kern_avx2.c's hsum4_epi32 */
            const __m256i f = _mm256_hadd_epi32(_mm256_hadd_epi32(t[0][c], t[1][c]), _mm256_hadd_epi32(t[2][c], t[3][c]));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(f), _mm256_mul_ps(dw, _mm256_set1_ps(x[c][i].d)), acc[c]);
        }
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) { /* kern_avx2.c's store_rows */
        const __m128 lo = _mm256_castps256_ps128(acc[c]), hi = _mm256_extractf128_ps(acc[c], 1);
        _mm_storeu_ps(out + c * T5_ROWS, _mm_add_ps(lo, hi));
    }
}

#define T5_K_TILE(NAME, KIND, TYPE)                                                                                \
    T5_INL void NAME(int64_t n, const uint8_t *const *wp, const uint8_t *xp, size_t xs, float *out,               \
                     const uint8_t *pf, size_t pf_step, const int C) {                                            \
        KIND(TYPE, n, wp, xp, xs, out, pf, pf_step, C);                                                           \
    }                                                                                                             \
    T5_GEMM_BLK(NAME, QK_K)
T5_K_TILE(q4_K_t5, t5_kmin, DF_TYPE_Q4_K)
T5_K_TILE(q5_K_t5, t5_kmin, DF_TYPE_Q5_K)
T5_K_TILE(q2_K_t5, t5_kmin, DF_TYPE_Q2_K)
T5_K_TILE(q6_K_t5, t5_koff, DF_TYPE_Q6_K)
T5_K_TILE(q3_K_t5, t5_koff, DF_TYPE_Q3_K)

/* Packed gemms (pack.h): 16 weight rows in the 16 lanes, up to 4 tokens.
 * Each line of a packed block is one vpdpbusd per token against the
 * activation's matching 4 bytes (a broadcast from memory), so a block's
 * exact integer sum per row builds up in its lane with no reduction; the
 * accumulator starts at the trailer's -128 * sum(y) (the weights are
 * unsigned w + 128), two chains summed exactly. Then, per row, as the
 * row-major tiles: acc = fma(float(sum), dw * dx, acc), block by block, so
 * the outputs are their bits (tests/test_matmul.c). */
#define P16_INL static inline __attribute__((always_inline))

/* A packed group is one stream: every line of the block `ahead` bytes on is asked for
 * (q4_K: 33 -> 47-51 GB/s on 2 threads of a Zen 5 with it at 4 KiB; q8_0, mxfp4: no
 * difference measured, 2 KiB kept; bench/kernels.c). */
P16_INL void p16_prefetch(const uint8_t *ahead, size_t bytes) {
    for (size_t q = 0; q < bytes; q += 64) _mm_prefetch((const char *)(ahead + q), _MM_HINT_T0);
}

/* One packed block's 16 row scales as floats. */
P16_INL __m512 p16_q8_0_scales(const uint8_t *g) { return _mm512_cvtph_ps(LOADU(g)); }
P16_INL __m512 p16_mxfp4_scales(const uint8_t *g) {
    const __m512i e = _mm512_cvtepu8_epi32(LOADU128(g));
    const __m512i big = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i small = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmpge_epu32_mask(e, _mm512_set1_epi32(2)), small, big));
}

/* y's bytes 4k..4k+3 in every lane. */
P16_INL __m512i p16_y4(const block_q8_0 *y, int k) { return _mm512_set1_epi32((int)load_u32((const uint8_t *)y->qs + 4 * k)); }

/* The block's integer sums for token c from its 8 unsigned weight lines u[0..8). */
P16_INL __m512i p16_sum8(const __m512i u[8], const p16_x *X, int c, int64_t b) {
    const block_q8_0 *y = &X->x[c][b];
    __m512i s0 = _mm512_set1_epi32(X->corr[c][b]), s1 = _mm512_setzero_si512();
    s0 = _mm512_dpbusd_epi32(s0, u[0], p16_y4(y, 0));
    s1 = _mm512_dpbusd_epi32(s1, u[1], p16_y4(y, 1));
    s0 = _mm512_dpbusd_epi32(s0, u[2], p16_y4(y, 2));
    s1 = _mm512_dpbusd_epi32(s1, u[3], p16_y4(y, 3));
    s0 = _mm512_dpbusd_epi32(s0, u[4], p16_y4(y, 4));
    s1 = _mm512_dpbusd_epi32(s1, u[5], p16_y4(y, 5));
    s0 = _mm512_dpbusd_epi32(s0, u[6], p16_y4(y, 6));
    s1 = _mm512_dpbusd_epi32(s1, u[7], p16_y4(y, 7));
    return _mm512_add_epi32(s0, s1);
}

/* q8_0: 8 lines as they are; mxfp4: 4 lines of nibbles, low ones are elements 4k.., high ones 16 + 4k.. */
P16_INL void p16_q8_0_lines(const uint8_t *g, __m512i u[8]) {
    for (int k = 0; k < 8; k++) u[k] = LD512(g + 32 + 64 * k);
}
P16_INL void p16_mxfp4_lines(const uint8_t *g, __m512i u[8]) {
    const __m512i tbl = _mm512_xor_si512(_mm512_broadcast_i32x4(kx_mxfp4_table()), _mm512_set1_epi8((char)0x80));
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int k = 0; k < 4; k++) {
        const __m512i v = LD512(g + 16 + 64 * k);
        u[k] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(v, m4));
        u[k + 4] = _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
    }
}

#define P16_TILE(NAME, BLK_BYTES, SCALES, LINES)                                                                   \
    P16_INL void NAME##_tile(int64_t nb, const uint8_t *g, const p16_x *X, float *out, const int C) {             \
        __m512 acc[4];                                                                                             \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();                          \
        for (int64_t b = 0; b < nb; b++, g += (BLK_BYTES)) {                                                       \
            p16_prefetch(g + 2048, (BLK_BYTES));                                                                   \
            const __m512 dw = SCALES(g);                                                                           \
            __m512i u[8];                                                                                          \
            LINES(g, u);                                                                                           \
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                                  \
                const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(X->dx[c][b]));                                   \
                acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p16_sum8(u, X, c, b)), d, acc[c]);                     \
            }                                                                                                      \
        }                                                                                                          \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) _mm512_storeu_ps(out + 16 * c, acc[c]);               \
    }                                                                                                              \
    P16_GEMM(NAME, 4)

P16_TILE(q8_0_p16, 544, p16_q8_0_scales, p16_q8_0_lines)
P16_TILE(mxfp4_p16, 272, p16_mxfp4_scales, p16_mxfp4_lines)

/* Packed q4_K (pack.h): 16 rows in the lanes, up to 4 tokens. Per
 * super-block and row the exact sums of t5_kmin - S = sum_j sc_j * dot_j
 * (dot_j: the sub-block's nibbles x activations, one vpdpbusd per line and
 * token, no offset since nibbles are unsigned) and M = sum_j m_j * (the
 * sub-block's activation sum) - then accS = fma(S, d * dx, accS), accM =
 * fma(M, -dmin * dx, accM) and accS + accM: t5_kmin's order, its bits. */

/* Sub-block j's 6-bit scale (min = 0) or min (min = 1) of the 16 rows, from the transposed scale bytes t[12][16]. */
P16_INL __m512i p16_k4_scale(const uint8_t *t, int j, int min) {
    const __m128i m63 = _mm_set1_epi8(63), m0f = _mm_set1_epi8(0x0F), m30 = _mm_set1_epi8(0x30);
#define P16_T(i) LOADU128(t + 16 * (i))
    __m128i v;
    if (j < 4) v = _mm_and_si128(P16_T(min ? j + 4 : j), m63);
    else if (!min) v = _mm_or_si128(_mm_and_si128(P16_T(j + 4), m0f), _mm_and_si128(_mm_srli_epi16(P16_T(j - 4), 2), m30));
    else v = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(P16_T(j + 4), 4), m0f), _mm_and_si128(_mm_srli_epi16(P16_T(j), 2), m30));
#undef P16_T
    return _mm512_cvtepu8_epi32(v);
}

/* q4_K, and q5_K (q5 = 1: its packed qh lines - line k: qh[4k..4k+3] of each row, bit 2p / 2p + 1 the fifth bit of
 * sub-block 2p / 2p + 1 - sit between the scales and the nibble lines). */
P16_INL void k45_p16_tile(int64_t nsb, const uint8_t *g, const uint8_t *xp, size_t xs, float *out, const int C,
                          const int q5) {
    const block_q8_K *x[4];
    __m512 accS[4], accM[4];
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
        x[c] = (const block_q8_K *)(const void *)(xp + (size_t)c * xs);
        accS[c] = accM[c] = _mm512_setzero_ps();
    }
    const size_t gs = 16 * (q5 ? sizeof(block_q5_K) : sizeof(block_q4_K));
    const __m512i m10 = _mm512_set1_epi8(0x10);
    for (int64_t i = 0; i < nsb; i++, g += gs) {
        p16_prefetch(g + 4096, gs);
        const uint8_t *sc = g + 64, *qh = g + 256, *qs = g + (q5 ? 256 + 512 : 256);
        __m512i S[4], M[4];
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) S[c] = M[c] = _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
            const __m512i m = p16_k4_scale(sc, j, 1);
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                const int ys = x[c][i].bsums[2 * j] + x[c][i].bsums[2 * j + 1];
                M[c] = _mm512_add_epi32(M[c], _mm512_mullo_epi32(m, _mm512_set1_epi32(ys)));
            }
        }
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
            __m512i lo[4], hi[4];
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) lo[c] = hi[c] = _mm512_setzero_si512();
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                const __m512i v = LD512(qs + 64 * (8 * p + k));
                __m512i l = _mm512_and_si512(v, m4), h = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                if (q5) { /* bit 2p of the qh line to bit 4 of l, bit 2p + 1 to bit 4 of h */
                    const __m512i hb = LD512(qh + 64 * k);
                    const __m512i b0 = 2 * p <= 4 ? _mm512_slli_epi16(hb, 4 - 2 * p) : _mm512_srli_epi16(hb, 2 * p - 4);
                    const __m512i b1 = 2 * p + 1 <= 4 ? _mm512_slli_epi16(hb, 3 - 2 * p) : _mm512_srli_epi16(hb, 2 * p - 3);
                    l = _mm512_or_si512(l, _mm512_and_si512(b0, m10));
                    h = _mm512_or_si512(h, _mm512_and_si512(b1, m10));
                }
                _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                    const uint8_t *y = (const uint8_t *)x[c][i].qs + 64 * p + 4 * k;
                    lo[c] = _mm512_dpbusd_epi32(lo[c], l, _mm512_set1_epi32((int)load_u32(y)));
                    hi[c] = _mm512_dpbusd_epi32(hi[c], h, _mm512_set1_epi32((int)load_u32(y + 32)));
                }
            }
            const __m512i s0 = p16_k4_scale(sc, 2 * p, 0), s1 = p16_k4_scale(sc, 2 * p + 1, 0);
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
                S[c] = _mm512_add_epi32(S[c], _mm512_add_epi32(_mm512_mullo_epi32(lo[c], s0), _mm512_mullo_epi32(hi[c], s1)));
        }
        const __m512 d = _mm512_cvtph_ps(LOADU(g)), dm = _mm512_mul_ps(_mm512_cvtph_ps(LOADU(g + 32)), _mm512_set1_ps(-1.0f));
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
            const __m512 dx = _mm512_set1_ps(x[c][i].d);
            accS[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S[c]), _mm512_mul_ps(d, dx), accS[c]);
            accM[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M[c]), _mm512_mul_ps(dm, dx), accM[c]);
        }
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) _mm512_storeu_ps(out + 16 * c, _mm512_add_ps(accS[c], accM[c]));
}


/* Packed q6_K (pack.h): 16 rows in the lanes, up to 4 tokens. Per
 * super-block and row, the two exact partial sums of t5_koff (and of
 * kern_avx2.c's q6_K tile): P0 over the even 16-element sub-blocks' scaled
 * products less 32 x the scaled activation sums of sub-blocks 0..7, P1 over
 * the odd ones less those of 8..15; acc0 = fma(P0, d * dx, acc0), acc1
 * likewise, and acc0 + acc1: their bits. Line k of half h (ql bytes 4k..,
 * 32 + 4k.. and qh bytes 4k..) holds elements 128h + 32m + 4k.. for m = 0..3
 * (sub-blocks 8h + 2m + k / 4). */
P16_INL void q6_K_p16_tile(int64_t nsb, const uint8_t *g, const uint8_t *xp, size_t xs, float *out, const int C) {
    const block_q8_K *x[4];
    __m512 acc0[4], acc1[4];
    const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
        x[c] = (const block_q8_K *)(const void *)(xp + (size_t)c * xs);
        acc0[c] = acc1[c] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < nsb; i++, g += 16 * sizeof(block_q6_K)) {
        p16_prefetch(g + 4096, 16 * sizeof(block_q6_K));
        const uint8_t *sc = g + 32, *ql = g + 288, *qh = g + 288 + 2048;
        __m512i P[2][4];
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) { /* -32 x the scaled activation sums, by halves */
            P[0][c] = P[1][c] = _mm512_setzero_si512();
            _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++) {
                const __m512i s = _mm512_cvtepi8_epi32(LOADU128(sc + 16 * j));
                P[j / 8][c] = _mm512_sub_epi32(P[j / 8][c], _mm512_slli_epi32(
                                                                 _mm512_mullo_epi32(s, _mm512_set1_epi32(x[c][i].bsums[j])), 5));
            }
        }
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) _Pragma("GCC unroll 2") for (int kk = 0; kk < 2; kk++) {
            __m512i dot[4][4]; /* [m][c] */
            _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
                dot[m][c] = _mm512_setzero_si512();
            _Pragma("GCC unroll 4") for (int k = 4 * kk; k < 4 * kk + 4; k++) {
                const __m512i a = LD512(ql + 64 * (16 * h + k)), b = LD512(ql + 64 * (16 * h + 8 + k));
                const __m512i hb = LD512(qh + 64 * (8 * h + k));
                const __m512i q[4] = {
                    _mm512_or_si512(_mm512_and_si512(a, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 4), m30)),
                    _mm512_or_si512(_mm512_and_si512(b, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 2), m30)),
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(a, 4), m4), _mm512_and_si512(hb, m30)),
                    _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(b, 4), m4),
                                    _mm512_and_si512(_mm512_srli_epi16(hb, 2), m30))};
                _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                    const uint8_t *y = (const uint8_t *)x[c][i].qs + 128 * h + 32 * m + 4 * k;
                    dot[m][c] = _mm512_dpbusd_epi32(dot[m][c], q[m], _mm512_set1_epi32((int)load_u32(y)));
                }
            }
            _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) {
                const __m512i s = _mm512_cvtepi8_epi32(LOADU128(sc + 16 * (8 * h + 2 * m + kk)));
                _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
                    P[kk][c] = _mm512_add_epi32(P[kk][c], _mm512_mullo_epi32(dot[m][c], s));
            }
        }
        const __m512 d = _mm512_cvtph_ps(LOADU(g));
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
            const __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(x[c][i].d));
            acc0[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P[0][c]), dd, acc0[c]);
            acc1[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(P[1][c]), dd, acc1[c]);
        }
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) _mm512_storeu_ps(out + 16 * c, _mm512_add_ps(acc0[c], acc1[c]));
}

P16_K45_GEMMS(p16, k45_p16_tile, 4)
P16_K_GEMM(q6_K_p16, 4)

/* One token through the packed K-quants on an Intel core runs the AVX2
 * table's 256-bit tiles, which give the same bits: there the 512-bit tiles
 * above stream 20% slower from memory (bench/kernels.c -g -m 1024, 2 threads
 * of a Sapphire Rapids-class Xeon: q4_K 24.2 against 28.6 GB/s, q5_K 22.4
 * against 28.4, q6_K 23.3 against 28.1; bench/RESULTS.md 2026-12-07), while
 * q8_0 and MXFP4, with no scale work per super-block, stream alike. On AMD
 * (Zen 5) the 512-bit tiles with their prefetch are the ones measured fast
 * (47-54 GB/s), so they stay. DELTAFIN_KQ_ONE=512 or 256 forces either (the
 * tests run both). */
enum { KQ_ONE_Q4_K, KQ_ONE_Q5_K, KQ_ONE_Q6_K, KQ_ONE_N };
static quant_gemm_fn kq_one[KQ_ONE_N]; /* the AVX2 table's, or NULL: the 512-bit tiles */
#define KQ_ONE_ROUTE(NAME, I)                                                                                      \
    static void NAME##_route(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y, \
                             size_t ldy) {                                                                         \
        if (nc == 1 && kq_one[I]) kq_one[I](n, w, ws, nr, x, xs, nc, y, ldy);                                      \
        else NAME##_gemm(n, w, ws, nr, x, xs, nc, y, ldy);                                                         \
    }
KQ_ONE_ROUTE(q4_K_p16, KQ_ONE_Q4_K)
KQ_ONE_ROUTE(q5_K_p16, KQ_ONE_Q5_K)
KQ_ONE_ROUTE(q6_K_p16, KQ_ONE_Q6_K)
#undef KQ_ONE_ROUTE

/* 1 if one token takes the 256-bit tiles here (above). */
static int kq_one_256(void) {
    const char *e = getenv("DELTAFIN_KQ_ONE");
    if (e && !strcmp(e, "512")) return 0;
    if (e && !strcmp(e, "256")) return 1;
    return kx_cpu_intel();
}

/* One token (generation) keeps the AVX2 tile, which measured faster there
 * (bench/kernels.c: its scale spreading is cheaper when no second token
 * shares it); both give the same bits. */
static quant_gemm_fn q6_K_gemm_one;
static void q6_K_gemm(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                      size_t ldy) {
    if (nc == 1 && q6_K_gemm_one) q6_K_gemm_one(n, w, ws, nr, x, xs, nc, y, ldy);
    else q6_K_t5_gemm(n, w, ws, nr, x, xs, nc, y, ldy);
}

/* ---------------------------------------------------------------------- */

void kern_avx512_fill(quant_traits *t) {
    init_idx();
    t[DF_TYPE_F32].vec_dot = f32_dot;
    t[DF_TYPE_F16].vec_dot = f16_dot;
    t[DF_TYPE_F16].to_float = f16_to_float;
    t[DF_TYPE_Q4_0].vec_dot = q4_0_dot;
    t[DF_TYPE_Q4_1].vec_dot = q4_1_dot;
    t[DF_TYPE_Q5_0].vec_dot = q5_0_dot;
    t[DF_TYPE_Q5_1].vec_dot = q5_1_dot;
    t[DF_TYPE_Q8_0].vec_dot = q8_0_dot;
    t[DF_TYPE_Q2_K].vec_dot = q2_K_dot;
    t[DF_TYPE_Q3_K].vec_dot = q3_K_dot;
    t[DF_TYPE_Q4_K].vec_dot = q4_K_dot;
    t[DF_TYPE_Q5_K].vec_dot = q5_K_dot;
    t[DF_TYPE_Q6_K].vec_dot = q6_K_dot;
    t[DF_TYPE_MXFP4].vec_dot = mxfp4_dot;
    t[DF_TYPE_NVFP4].vec_dot = nvfp4_dot;
    t[DF_TYPE_Q1_0].vec_dot = q1_0_dot;
    t[DF_TYPE_Q2_0].vec_dot = q2_0_dot;
    t[DF_TYPE_IQ4_NL].vec_dot = iq4_nl_dot;
    t[DF_TYPE_IQ4_XS].vec_dot = iq4_xs_dot;
    t[DF_TYPE_TQ1_0].vec_dot = tq1_0_dot;
    t[DF_TYPE_TQ2_0].vec_dot = tq2_0_dot;
    t[DF_TYPE_IQ2_XXS].vec_dot = iq2_xxs_dot;
    t[DF_TYPE_IQ2_XS].vec_dot = iq2_xs_dot;
    t[DF_TYPE_IQ2_S].vec_dot = iq2_s_dot;
    t[DF_TYPE_IQ3_XXS].vec_dot = iq3_xxs_dot;
    t[DF_TYPE_IQ3_S].vec_dot = iq3_s_dot;
    t[DF_TYPE_IQ1_S].vec_dot = iq1_s_dot;
    t[DF_TYPE_IQ1_M].vec_dot = iq1_m_dot;
    t[DF_TYPE_IQ2_XXS].gemm = iq2_xxs_dot_gemm;
    t[DF_TYPE_IQ2_XS].gemm = iq2_xs_dot_gemm;
    t[DF_TYPE_IQ2_S].gemm = iq2_s_dot_gemm;
    t[DF_TYPE_IQ3_XXS].gemm = iq3_xxs_dot_gemm;
    t[DF_TYPE_IQ3_S].gemm = iq3_s_dot_gemm;
    t[DF_TYPE_IQ1_S].gemm = iq1_s_dot_gemm;
    t[DF_TYPE_IQ1_M].gemm = iq1_m_dot_gemm;
    t[DF_TYPE_Q8_0].gemm = q8_0_t5_gemm;
    t[DF_TYPE_MXFP4].gemm = mxfp4_t5_gemm;
    t[DF_TYPE_Q4_K].gemm = q4_K_t5_gemm;
    q6_K_gemm_one = t[DF_TYPE_Q6_K].gemm; /* the AVX2 table's */
    t[DF_TYPE_Q6_K].gemm = q6_K_gemm;
    t[DF_TYPE_Q4_0].gemm = q4_0_t5_gemm;
    t[DF_TYPE_IQ4_NL].gemm = iq4_nl_t5_gemm;
    t[DF_TYPE_IQ4_XS].gemm = iq4_xs_dot_gemm;
    t[DF_TYPE_Q2_K].gemm = q2_K_t5_gemm;
    t[DF_TYPE_Q3_K].gemm = q3_K_t5_gemm;
    t[DF_TYPE_Q5_K].gemm = q5_K_t5_gemm;
    t[DF_TYPE_Q8_0].gemm_packed = q8_0_p16_gemm;
    t[DF_TYPE_MXFP4].gemm_packed = mxfp4_p16_gemm;
    const int one256 = kq_one_256();
    kq_one[KQ_ONE_Q4_K] = one256 ? t[DF_TYPE_Q4_K].gemm_packed : NULL; /* the AVX2 table's */
    kq_one[KQ_ONE_Q5_K] = one256 ? t[DF_TYPE_Q5_K].gemm_packed : NULL;
    kq_one[KQ_ONE_Q6_K] = one256 ? t[DF_TYPE_Q6_K].gemm_packed : NULL;
    t[DF_TYPE_Q4_K].gemm_packed = q4_K_p16_route;
    t[DF_TYPE_Q6_K].gemm_packed = q6_K_p16_route;
    t[DF_TYPE_Q5_K].gemm_packed = q5_K_p16_route;
}
