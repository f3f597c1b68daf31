/*
 * kern_avx2.c - AVX2/FMA/F16C kernels (x86-64 only; built with
 * -mavx2 -mfma -mf16c and only called when the CPU has all three).
 *
 * DESIGN
 * - Integer core: AVX2 has no signed x signed byte multiply, so products go
 *   through _mm256_maddubs_epi16 (unsigned x signed bytes -> pairs of int16)
 *   followed by _mm256_madd_epi16 (int16 pairs -> int32). Weight values are
 *   therefore kept UNSIGNED wherever the format allows (q4_1, q5_1, all
 *   K-quants) and the format's fixed offset is folded in afterwards through
 *   the activation block sums: for q6_K sum (q-32)*y = sum q*y - 32*sum y, and
 *   q8_K carries sum y per 16 elements (bsums). For q4_0/q5_0/q8_0 the signed
 *   product uses the sign trick |w| * (y * sign(w)), valid because activations
 *   never hold -128 (our quantizers emit [-127, 127]). mxfp4 values come from
 *   ggml's table through pshufb, q1_0's +-1 from the sign bits, q2_0's
 *   code - 1 from kern_x86.h's unpacking, all through the same sign trick;
 *   iq4_nl/iq4_xs values from ggml's kvalues_iq4nl through pshufb; tq1_0's
 *   trits by byte compares after wrapping multiplies by 3, tq2_0's from bit
 *   pairs (kern_x86.h), through the same sign trick. The grid i-quants
 *   decode in vectors (kern_x86.h: grid words looked up 4 or 8 at a time,
 *   the sign bits applied to the activations) and multiply unsigned grid
 *   magnitudes by them with maddubs.
 * - No int16 saturation is possible: the largest maddubs pair is
 *   2 * 63 * 127 = 16002 (q6_K), and scaled sums stay far inside int32.
 * - Every kernel forms exactly the same per-block integer sums as the scalar
 *   reference in quant.c and multiplies by the same scale products; only the
 *   float accumulation (vector lanes, fused multiply-add) differs.
 * - Activation quantizers (q8_0, q8_1, q8_K, f16) are bit-identical to the
 *   scalar ones: same amax, same 127/amax, same round-to-nearest-even.
 * - Packed gemms (gemm_packed, pack.h's layout) for q8_0, mxfp4, q4_K, q5_K
 *   and q6_K: a group's 16 rows as two vectors of 8 lanes, no reduction
 *   across lanes, the row-major tiles' bits; the walks are kern_x86.h's,
 *   shared with kern_avx512.c. The K-quant tiles unpack a super-block's
 *   scales for all 16 rows at once and run two tokens a tile (four spill);
 *   q4_K has its own one-token tile (q4_K_p8_one).
 */
#include "kern_x86.h"
#include "quant_isa.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

#define LOADU(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define LOADU128(p) _mm_loadu_si128((const __m128i *)(const void *)(p))

static inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

/* Sum of the 8 lanes. */
static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline int hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

static inline float hmax_ps(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Signed bytes w (any value) times signed bytes y (never -128), summed in
 * groups of 4 into 8 int32. */
static inline __m256i dot_i8(__m256i w, __m256i y) {
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* Unsigned bytes u (< 128) times signed bytes y, summed in groups of 4. */
static inline __m256i dot_u8(__m256i u, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles in the low lane (elements
 * 0..15), high nibbles in the high lane (elements 16..31). */
static inline __m256i nibbles32(const uint8_t *qs) {
    __m128i v = LOADU128(qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}

/* Bit j of bits -> byte j = 0xFF if set, else 0. */
static inline __m256i bits32(uint32_t bits) {
    const __m256i sel = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    const __m256i bm = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), sel);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bm), bm);
}

static inline uint32_t load_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* ---------------------------------------------------------------------- */
/* f32, f16, bf16 */

static void f32_dot(int64_t n, const void *w, const void *x, float *out) {
    const float *a = w, *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += a[i] * b[i];
    *out = s;
}

static void f16_dot(int64_t n, const void *w, const void *x, float *out) {
    const uint16_t *a = w, *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
#define H8(p) _mm256_cvtph_ps(LOADU128(p))
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(H8(a + i), H8(b + i), s0);
        s1 = _mm256_fmadd_ps(H8(a + i + 8), H8(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(H8(a + i + 16), H8(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(H8(a + i + 24), H8(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(H8(a + i), H8(b + i), s0);
#undef H8
    float s = hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) s += h2f(a[i]) * h2f(b[i]);
    *out = s;
}

static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(LOADU128(s + i)));
    for (; i < n; i++) dst[i] = h2f(s[i]);
}

static void f16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) d[i] = (uint16_t)_cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

/* 8 bf16 -> 8 floats (exact: bf16 is the top half of a float). */
static inline __m256 bf8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(LOADU128(p)), 16));
}

static inline float bf2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }

static void bf16_dot(int64_t n, const void *w, const void *x, float *out) {
    const uint16_t *a = w, *b = x;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(bf8(a + i), bf8(b + i), s0);
        s1 = _mm256_fmadd_ps(bf8(a + i + 8), bf8(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(bf8(a + i), bf8(b + i), s0);
    float s = hsum_ps(_mm256_add_ps(s0, s1));
    for (; i < n; i++) s += bf2f(a[i]) * bf2f(b[i]);
    *out = s;
}

static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, bf8(s + i));
    for (; i < n; i++) dst[i] = bf2f(s[i]);
}

/* ---------------------------------------------------------------------- */
/* Activation quantizers */

/* Round 32 floats (times mul) to nearest-even int8, in element order; the
 * int32 lanes are also summed into *sum when sum != NULL. */
static inline __m256i round32_i8(const float *x, __m256 mul, int *sum) {
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x), mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8), mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 16), mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 24), mul), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (sum) *sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
    /* packs interleave 128-bit lanes; the permute restores element order */
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline float amax32(const float *x) {
    const __m256 sgn = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_max_ps(_mm256_andnot_ps(sgn, _mm256_loadu_ps(x)), _mm256_andnot_ps(sgn, _mm256_loadu_ps(x + 8)));
    m = _mm256_max_ps(m, _mm256_max_ps(_mm256_andnot_ps(sgn, _mm256_loadu_ps(x + 16)), _mm256_andnot_ps(sgn, _mm256_loadu_ps(x + 24))));
    return hmax_ps(m);
}

static void q8_0_quant(const float *src, void *dst, int64_t n) {
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, src += QK8_0) {
        float amax = amax32(src);
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        b[i].d = (uint16_t)_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_si256((__m256i *)(void *)b[i].qs, round32_i8(src, _mm256_set1_ps(id), NULL));
    }
}

static void q8_1_quant(const float *src, void *dst, int64_t n) {
    block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK8_1; i++, src += QK8_1) {
        float amax = amax32(src);
        float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum;
        _mm256_storeu_si256((__m256i *)(void *)b[i].qs, round32_i8(src, _mm256_set1_ps(id), &sum));
        b[i].d = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        b[i].s = (uint16_t)_cvtss_sh(d * (float)sum, _MM_FROUND_TO_NEAREST_INT);
    }
}

static void q8_K_quant(const float *src, void *dst, int64_t n) {
    block_q8_K *b = dst;
    const __m256 sgn = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sgn, _mm256_loadu_ps(src + j)));
        float amax = hmax_ps(m);
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        /* the first element of largest magnitude decides the sign */
        float mx = 0;
        __m256 va = _mm256_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 8) {
            int k = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sgn, _mm256_loadu_ps(src + j)), va, _CMP_EQ_OQ));
            if (k) { mx = src[j + __builtin_ctz((unsigned)k)]; break; }
        }
        float iscale = -127.0f / mx;
        __m256 mul = _mm256_set1_ps(iscale);
        for (int j = 0; j < QK_K; j += 32) {
            __m256i q = round32_i8(src + j, mul, NULL);
            _mm256_storeu_si256((__m256i *)(void *)(b[i].qs + j), q);
            /* two sums of 16 bytes: widen to int16, add adjacent pairs, fold */
            __m256i w = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
            /* w: 8 int32, lanes 0-3 = first 16 bytes, 4-7 = last 16 bytes */
            __m128i s = _mm_hadd_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
            s = _mm_hadd_epi32(s, s);
            b[i].bsums[j / 16] = (int16_t)_mm_cvtsi128_si32(s);
            b[i].bsums[j / 16 + 1] = (int16_t)_mm_extract_epi32(s, 1);
        }
        b[i].d = 1.0f / iscale;
    }
}

/* ---------------------------------------------------------------------- */
/* 32-element block formats */

static void q4_0_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q4_0 *a = w;
    const block_q8_0 *b = x;
    const int64_t nb = n / QK4_0;
    const __m256i eight = _mm256_set1_epi8(8);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        __m256i p0 = dot_i8(_mm256_sub_epi8(nibbles32(a[i].qs), eight), LOADU(b[i].qs));
        __m256i p1 = dot_i8(_mm256_sub_epi8(nibbles32(a[i + 1].qs), eight), LOADU(b[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(h2f(a[i + 1].d) * h2f(b[i + 1].d)), acc1);
    }
    for (; i < nb; i++) {
        __m256i p0 = dot_i8(_mm256_sub_epi8(nibbles32(a[i].qs), eight), LOADU(b[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), acc0);
    }
    *out = hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* One q4_1 / q5_0 / q5_1 block's integer dot (8 int32 lanes). */
static inline __m256i q4_1_block(const block_q4_1 *a, const block_q8_1 *b) {
    return dot_u8(nibbles32(a->qs), LOADU(b->qs));
}

static inline __m256i q5_0_block(const block_q5_0 *a, const block_q8_0 *b) {
    /* high bit clear: q - 16 = nibble | 0xF0 as int8; set: q - 16 = nibble */
    __m256i q = _mm256_or_si256(nibbles32(a->qs), _mm256_andnot_si256(bits32(load_u32(a->qh)), _mm256_set1_epi8((char)0xF0)));
    return dot_i8(q, LOADU(b->qs));
}

static inline __m256i q5_1_block(const block_q5_1 *a, const block_q8_1 *b) {
    __m256i q = _mm256_or_si256(nibbles32(a->qs), _mm256_and_si256(bits32(load_u32(a->qh)), _mm256_set1_epi8(0x10)));
    return dot_u8(q, LOADU(b->qs));
}

/* Two blocks per step with separate accumulators (the float adds and the
 * scalar offset terms would otherwise form one long dependency chain). */
#define DOT_2BLK(NAME, WT, AT, BLK, HAS_M)                                                               \
    static void NAME(int64_t n, const void *w, const void *x, float *out) {                              \
        const WT *a = w;                                                                                  \
        const AT *b = x;                                                                                  \
        const int64_t nb = n / 32;                                                                        \
        __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();                                   \
        float m0 = 0, m1 = 0;                                                                             \
        int64_t i = 0;                                                                                    \
        for (; i + 1 < nb; i += 2) {                                                                      \
            __m256i p0 = BLK(&a[i], &b[i]), p1 = BLK(&a[i + 1], &b[i + 1]);                               \
            acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), acc0); \
            acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(h2f(a[i + 1].d) * h2f(b[i + 1].d)), acc1); \
            if (HAS_M) {                                                                                  \
                m0 += OFFSET_TERM(a[i], b[i]);                                                            \
                m1 += OFFSET_TERM(a[i + 1], b[i + 1]);                                                    \
            }                                                                                             \
        }                                                                                                 \
        for (; i < nb; i++) {                                                                             \
            acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(BLK(&a[i], &b[i])), _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), acc0); \
            if (HAS_M) m0 += OFFSET_TERM(a[i], b[i]);                                                     \
        }                                                                                                 \
        *out = hsum_ps(_mm256_add_ps(acc0, acc1)) + (m0 + m1);                                            \
    }

/* weight offset m times the activation block sum s (q4_1/q5_1 only) */
#define OFFSET_TERM(wb, ab) (h2f((wb).m) * h2f((ab).s))
DOT_2BLK(q4_1_dot, block_q4_1, block_q8_1, q4_1_block, 1)
DOT_2BLK(q5_1_dot, block_q5_1, block_q8_1, q5_1_block, 1)
#undef OFFSET_TERM
#define OFFSET_TERM(wb, ab) 0.0f
DOT_2BLK(q5_0_dot, block_q5_0, block_q8_0, q5_0_block, 0)
#undef OFFSET_TERM
#undef DOT_2BLK

static void q8_0_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q8_0 *a = w, *b = x;
    const int64_t nb = n / QK8_0;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        __m256i p0 = dot_i8(LOADU(a[i].qs), LOADU(b[i].qs));
        __m256i p1 = dot_i8(LOADU(a[i + 1].qs), LOADU(b[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(h2f(a[i + 1].d) * h2f(b[i + 1].d)), acc1);
    }
    for (; i < nb; i++) {
        __m256i p0 = dot_i8(LOADU(a[i].qs), LOADU(b[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(h2f(a[i].d) * h2f(b[i].d)), acc0);
    }
    *out = hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* ---------------------------------------------------------------------- */
/* mxfp4, q1_0, q2_0 (activations in q8_0) */

/* 32-element blocks of 4-bit codes laid out as q4_0's (mxfp4, iq4_nl):
 * codes looked up in a 16-entry table (pshufb) give signed values; the
 * block's scale is wd(block) times the activation's d. Blocks are bs bytes
 * with the codes at qs_off. */
typedef float (*lut4_scale_fn)(const uint8_t *blk);
static inline void lut4_dot(int64_t n, const uint8_t *w, size_t bs, size_t qs_off, __m128i table, lut4_scale_fn wd,
                            const block_q8_0 *b, float *out) {
    const int64_t nb = n / 32;
    const __m256i tbl = _mm256_broadcastsi128_si256(table);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        const uint8_t *w0 = w + (size_t)i * bs, *w1 = w0 + bs;
        __m256i p0 = dot_i8(_mm256_shuffle_epi8(tbl, nibbles32(w0 + qs_off)), LOADU(b[i].qs));
        __m256i p1 = dot_i8(_mm256_shuffle_epi8(tbl, nibbles32(w1 + qs_off)), LOADU(b[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(h2f(b[i].d) * wd(w0)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(h2f(b[i + 1].d) * wd(w1)), acc1);
    }
    for (; i < nb; i++) {
        const uint8_t *w0 = w + (size_t)i * bs;
        __m256i p0 = dot_i8(_mm256_shuffle_epi8(tbl, nibbles32(w0 + qs_off)), LOADU(b[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(h2f(b[i].d) * wd(w0)), acc0);
    }
    *out = hsum_ps(_mm256_add_ps(acc0, acc1));
}

KX_TABLE_TYPE_DOTS

/* nvfp4: two sub-blocks (one q8_0 block) per step, codes in element order
 * (kern_x86.h) looked up in ggml's table; lanes 0-3 of the dot are the
 * first sub-block, 4-7 the second. */
static void nvfp4_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_nvfp4 *a = w;
    const block_q8_0 *b = x;
    const __m256i tbl = _mm256_broadcastsi128_si256(kx_mxfp4_table());
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_NVFP4; i++)
        for (int k = 0; k < 2; k++) {
            const block_q8_0 *y = &b[2 * i + k];
            __m256i p = dot_i8(_mm256_shuffle_epi8(tbl, kx_nvfp4_codes(a[i].qs + 16 * k)), LOADU(y->qs));
            const float dy = h2f(y->d);
            const __m256 sc = _mm256_set_m128(_mm_set1_ps(dy * quant_ue4m3_half(a[i].d[2 * k + 1])),
                                              _mm_set1_ps(dy * quant_ue4m3_half(a[i].d[2 * k])));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), sc, acc);
        }
    *out = hsum_ps(acc);
}

/* q1_0: 32 sign bits -> bytes +1 (bit set) or -1 (clear). */
static inline __m256i q1_0_signs(const uint8_t *bits) {
    return _mm256_or_si256(_mm256_andnot_si256(bits32(load_u32(bits)), _mm256_set1_epi8(-1)), _mm256_set1_epi8(1));
}

/* One q1_0 block spans four q8_0 blocks; each gets its own scale product. */
static void q1_0_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q1_0 *a = w;
    const block_q8_0 *b = x;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK1_0; i++) {
        const float dw = h2f(a[i].d);
        const block_q8_0 *y = b + 4 * i;
        __m256i p0 = dot_i8(q1_0_signs(a[i].qs), LOADU(y[0].qs));
        __m256i p1 = dot_i8(q1_0_signs(a[i].qs + 4), LOADU(y[1].qs));
        __m256i p2 = dot_i8(q1_0_signs(a[i].qs + 8), LOADU(y[2].qs));
        __m256i p3 = dot_i8(q1_0_signs(a[i].qs + 12), LOADU(y[3].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(dw * h2f(y[0].d)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(dw * h2f(y[1].d)), acc1);
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p2), _mm256_set1_ps(dw * h2f(y[2].d)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p3), _mm256_set1_ps(dw * h2f(y[3].d)), acc1);
    }
    *out = hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* q2_0: codes 0..3 minus 1, two q8_0 blocks per weight block. */
static void q2_0_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q2_0 *a = w;
    const block_q8_0 *b = x;
    const __m256i one = _mm256_set1_epi8(1);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK2_0; i++) {
        const float dw = h2f(a[i].d);
        __m256i lo, hi;
        kx_q2_0_codes(a[i].qs, &lo, &hi);
        __m256i p0 = dot_i8(_mm256_sub_epi8(lo, one), LOADU(b[2 * i].qs));
        __m256i p1 = dot_i8(_mm256_sub_epi8(hi, one), LOADU(b[2 * i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(dw * h2f(b[2 * i].d)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(dw * h2f(b[2 * i + 1].d)), acc1);
    }
    *out = hsum_ps(_mm256_add_ps(acc0, acc1));
}

/* ---------------------------------------------------------------------- */
/* iq4_nl (activations in q8_0); iq4_xs, tq1_0, tq2_0 (activations in q8_K) */

/* iq4_xs: each sub-block's integer lane sums times its scale - 32, summed
 * in int32 over the super-block, then one float scale d * y.d. */
static void iq4_xs_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_iq4_xs *a = w;
    const block_q8_K *b = x;
    const __m256i tbl = _mm256_broadcastsi128_si256(kx_iq4nl_table());
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i s = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            const int ls = (((a[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((a[i].scales_h >> (2 * ib)) & 3) << 4)) - 32;
            __m256i p = dot_i8(_mm256_shuffle_epi8(tbl, nibbles32(a[i].qs + 16 * ib)), LOADU(b[i].qs + 32 * ib));
            s = _mm256_add_epi32(s, _mm256_mullo_epi32(p, _mm256_set1_epi32(ls)));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(h2f(a[i].d) * b[i].d), acc);
    }
    *out = hsum_ps(acc);
}

/* tq1_0 / tq2_0: the block's 256 values (kern_x86.h; tq2_0's code 3 is
 * the value 2, so the general signed product), one integer sum. */
static inline float tq_dot(const __m256i v[8], const block_q8_K *y, float d) {
    __m256i s = _mm256_setzero_si256();
    for (int k = 0; k < 8; k++) s = _mm256_add_epi32(s, dot_i8(v[k], LOADU(y->qs + 32 * k)));
    return (float)hsum_epi32(s) * (d * y->d);
}


KX_TQ_ROW_DOT(tq1_0_dot, block_tq1_0, kx_tq1_0_values, tq_dot)
KX_TQ_ROW_DOT(tq2_0_dot, block_tq2_0, kx_tq2_0_values, tq_dot)

/* Grid i-quants (kern_x86.h's decoders): per 32-element sub-block the grid
 * magnitudes u (unsigned) times the activations with the weights' signs
 * applied as (y ^ m) - m (m all-ones where negated), through maddubs
 * (pairs <= 2 * 62 * 127), then madd with the two 16-element scales; an
 * exact int32 sum per block. */
static inline __m256i iq_sign_mask(uint32_t sg) {
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303LL, 0x0202020202020202LL, 0x0101010101010101LL, 0);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)sg), spread), bit), bit);
}

#define KX_IQ_ROW(name, head, sub, has_signs, off9, factor, btype)                                          \
    /* one weight row against NC <= 4 activation rows, each block decoded once */                           \
    static inline __attribute__((always_inline)) void name##_tile(int64_t n, const btype *a, const uint8_t *xp, \
                                                                  size_t xs, float *out, const int NC) {      \
        __m256 acc[4];                                                                                      \
        int16_t ls[16];                                                                                     \
        for (int t = 0; t < NC; t++) acc[t] = _mm256_setzero_ps();                                          \
        for (int64_t i = 0; i < n / QK_K; i++) {                                                            \
            const float d = head(&a[i], ls);                                                                \
            __m256i s[4];                                                                                   \
            for (int t = 0; t < NC; t++) s[t] = _mm256_setzero_si256();                                     \
            for (int ib = 0; ib < 8; ib++) {                                                                \
                uint32_t g;                                                                                 \
                const __m256i u = sub(&a[i], ib, &g);                                                       \
                const __m256i l = _mm256_set_m128i(_mm_set1_epi16(ls[2 * ib + 1]), _mm_set1_epi16(ls[2 * ib])); \
                const __m256i m = has_signs ? iq_sign_mask(g) : _mm256_setzero_si256();                    \
                for (int t = 0; t < NC; t++) {                                                              \
                    const block_q8_K *b = (const block_q8_K *)(const void *)(xp + (size_t)t * xs) + i;      \
                    __m256i y = LOADU(b->qs + 32 * ib);                                                     \
                    if (has_signs) y = _mm256_sub_epi8(_mm256_xor_si256(y, m), m);                          \
                    s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), l));        \
                }                                                                                           \
            }                                                                                               \
            for (int t = 0; t < NC; t++) {                                                                  \
                const block_q8_K *b = (const block_q8_K *)(const void *)(xp + (size_t)t * xs) + i;          \
                if (off9) {                                                                                 \
                    const __m256i c = _mm256_madd_epi16(LOADU(b->bsums), LOADU(ls));                        \
                    s[t] = _mm256_sub_epi32(s[t], _mm256_add_epi32(_mm256_slli_epi32(c, 3), c));            \
                }                                                                                           \
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), _mm256_set1_ps(d * b->d), acc[t]);       \
            }                                                                                               \
        }                                                                                                   \
        for (int t = 0; t < NC; t++) out[t] = (factor) * hsum_ps(acc[t]);                                   \
    }                                                                                                       \
    KX_IQ_ENTRY_POINTS(name, btype)

KX_IQ_GRID_DOTS

/* ---------------------------------------------------------------------- */
/* K-quants (256-element super-blocks, activations in q8_K) */

/* From 16 int16 scales (sub-blocks 0-7 in the low lane, 8-15 in the high
 * lane), the vector whose low lane holds scale 8h+2g and high lane scale
 * 8h+2g+1: the two 16-element sub-blocks of the 32-element group (h, g). */
static inline __m256i scale_pair(__m256i sc16, int h, int g) {
    __m256i lane = h ? _mm256_permute2x128_si256(sc16, sc16, 0x11) : _mm256_permute2x128_si256(sc16, sc16, 0x00);
    const __m256i idx = _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 + 0x0202 * (2 * g + 1))),
                                         _mm_set1_epi16((short)(0x0100 + 0x0202 * (2 * g))));
    return _mm256_shuffle_epi8(lane, idx);
}

/* From 8 int16 scales duplicated in both lanes, scale j in all 16 lanes. */
static inline __m256i scale_bcast(__m256i sc8x2, int j) {
    return _mm256_shuffle_epi8(sc8x2, _mm256_set1_epi16((short)(0x0100 + 0x0202 * j)));
}

static void q2_K_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q2_K *a = w;
    const block_q8_K *b = x;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m128i sb = LOADU128(a[i].scales);
        __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0x0F)));
        __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F)));
        __m256i pm = _mm256_madd_epi16(LOADU(b[i].bsums), mn16);
        const int8_t *y = b[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        _Pragma("GCC unroll 4")
        for (int h = 0; h < 2; h++) {
            __m256i q = LOADU(a[i].qs + 32 * h);
            _Pragma("GCC unroll 4")
            for (int g = 0; g < 4; g++) {
                __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * g), m3);
                __m256i p = _mm256_maddubs_epi16(u, LOADU(y + 128 * h + 32 * g));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_pair(sc16, h, g)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(b[i].d * h2f(a[i].d)), acc);
        accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pm), _mm256_set1_ps(b[i].d * h2f(a[i].dmin)), accm);
    }
    *out = hsum_ps(acc) - hsum_ps(accm);
}

static void q3_K_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q3_K *a = w;
    const block_q8_K *b = x;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint32_t s32[4];
        quant_k3_unpack(a[i].scales, s32);
        /* built from registers: a 16-byte load of four just-stored words would stall store forwarding */
        __m128i sb = _mm_sub_epi8(_mm_set_epi32((int)s32[3], (int)s32[2], (int)s32[1], (int)s32[0]), _mm_set1_epi8(32));
        __m256i sc16 = _mm256_cvtepi8_epi16(sb);
        /* values are u - 4 with u = low2 | hbit << 2 in 0..7: subtract 4 * sum(sc * bsums) */
        __m256i corr = _mm256_madd_epi16(LOADU(b[i].bsums), sc16);
        __m256i hm = LOADU(a[i].hmask);
        const int8_t *y = b[i].qs;
        __m256i sumi = _mm256_setzero_si256();
        _Pragma("GCC unroll 4")
        for (int h = 0; h < 2; h++) {
            __m256i q = LOADU(a[i].qs + 32 * h);
            _Pragma("GCC unroll 4")
            for (int g = 0; g < 4; g++) {
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * g), m3);
                __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + g), one), 2);
                __m256i p = _mm256_maddubs_epi16(_mm256_or_si256(lo, hb), LOADU(y + 128 * h + 32 * g));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_pair(sc16, h, g)));
            }
        }
        sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(corr, 2));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(h2f(a[i].d) * b[i].d), acc);
    }
    *out = hsum_ps(acc);
}

/* Scales (8 int16, both lanes) and min products m_j * (bsums[2j] + bsums[2j+1])
 * of a q4_K/q5_K block. */
static inline void k4_scales(const uint8_t *scales, const int16_t *bsums, __m256i *sc, __m256i *pm) {
    uint32_t u[4];
    quant_k4_unpack(scales, u);
    __m128i v = _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]); /* bytes 0-7 scales, 8-15 mins */
    *sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(v));
    __m128i mins = _mm_unpackhi_epi8(v, v); /* m0 m0 m1 m1 ... m7 m7 */
    *pm = _mm256_madd_epi16(LOADU(bsums), _mm256_cvtepu8_epi16(mins));
}

static void q4_K_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sc, pm;
        k4_scales(a[i].scales, b[i].bsums, &sc, &pm);
        const int8_t *y = b[i].qs;
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) {
            __m256i q = LOADU(a[i].qs + 32 * c);
            __m256i p0 = _mm256_maddubs_epi16(_mm256_and_si256(q, m4), LOADU(y + 64 * c));
            __m256i p1 = _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), LOADU(y + 64 * c + 32));
            s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(p0, scale_bcast(sc, 2 * c)));
            s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(p1, scale_bcast(sc, 2 * c + 1)));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), _mm256_set1_ps(h2f(a[i].d) * b[i].d), acc);
        accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pm), _mm256_set1_ps(h2f(a[i].dmin) * b[i].d), accm);
    }
    *out = hsum_ps(acc) - hsum_ps(accm);
}

static void q5_K_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q5_K *a = w;
    const block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sc, pm;
        k4_scales(a[i].scales, b[i].bsums, &sc, &pm);
        const int8_t *y = b[i].qs;
        __m256i hb = LOADU(a[i].qh);
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
        _Pragma("GCC unroll 4")
        for (int c = 0; c < 4; c++) {
            __m256i q = LOADU(a[i].qs + 32 * c);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
                                         _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4));
            hb = _mm256_srli_epi16(hb, 2);
            s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, LOADU(y + 64 * c)), scale_bcast(sc, 2 * c)));
            s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, LOADU(y + 64 * c + 32)), scale_bcast(sc, 2 * c + 1)));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), _mm256_set1_ps(h2f(a[i].d) * b[i].d), acc);
        accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pm), _mm256_set1_ps(h2f(a[i].dmin) * b[i].d), accm);
    }
    *out = hsum_ps(acc) - hsum_ps(accm);
}

static void q6_K_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        __m256i sc16 = _mm256_cvtepi8_epi16(LOADU128(a[i].scales));
        /* values are u - 32 with u in 0..63: subtract 32 * sum(sc * bsums) */
        __m256i corr = _mm256_madd_epi16(LOADU(b[i].bsums), sc16);
        const int8_t *y = b[i].qs;
        __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
        _Pragma("GCC unroll 4")
        for (int h = 0; h < 2; h++) {
            __m256i l0 = LOADU(a[i].ql + 64 * h), l1 = LOADU(a[i].ql + 64 * h + 32);
            __m256i qh = LOADU(a[i].qh + 32 * h);
            __m256i u0 = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
            __m256i u1 = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
            __m256i u2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(qh, m30));
            __m256i u3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                         _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
            const int8_t *yh = y + 128 * h;
            s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_maddubs_epi16(u0, LOADU(yh)), scale_pair(sc16, h, 0)));
            s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_maddubs_epi16(u1, LOADU(yh + 32)), scale_pair(sc16, h, 1)));
            s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_maddubs_epi16(u2, LOADU(yh + 64)), scale_pair(sc16, h, 2)));
            s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_maddubs_epi16(u3, LOADU(yh + 96)), scale_pair(sc16, h, 3)));
        }
        __m256i sumi = _mm256_sub_epi32(_mm256_add_epi32(s0, s1), _mm256_slli_epi32(corr, 5));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(h2f(a[i].d) * b[i].d), acc);
    }
    *out = hsum_ps(acc);
}

/* ---------------------------------------------------------------------- */
/* Matrix products (gemm): tiles of GR weight rows x C activation rows.
 *
 * Layout: for every (row, token) pair the kernel forms the same per-block
 * integer (or float) partial sums as a dot product would, then reduces them
 * ACROSS ROWS with horizontal adds, so that one vector holds one partial per
 * row: lanes 0-3 the sums over elements in the low 128-bit half of each
 * block step, lanes 4-7 over the high half. The block scale product
 * (weight scale x activation scale, as a float product) multiplies that
 * vector and it is fused into a per-token accumulator. A row's result is
 * acc[i] + acc[i + 4] at the end. Every lane sees the same operations in the
 * same order whichever slot of the tile its row occupies and however many
 * tokens share the tile, so outputs are independent of tiling (quant.h's
 * gemm contract): padding rows repeat the last real row and are discarded.
 *
 * The weight block is decoded once per tile and used for C tokens; C is a
 * compile-time constant of each tile function (always_inline + unrolled
 * loops, so arrays indexed by c live in registers). */

#define GR 4 /* weight rows per tile */
#define INL static inline __attribute__((always_inline))

/* [a b c d | a b c d] of the four 32-bit lanes' sums: lane i (i < 4) = sum of
 * v_i's lanes 0-3, lane i + 4 = sum of its lanes 4-7. */
INL __m256i hsum4_epi32(__m256i v0, __m256i v1, __m256i v2, __m256i v3) {
    return _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, v3));
}
/* The two 128-bit halves added (a row's two half-sums into one, exactly). */
INL __m128i fold_pair(__m256i v) { return _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)); }
INL __m256 hsum4_ps(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
    return _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
}

/* Four f16 values as floats, in both 128-bit halves. */
INL __m256 dup4_h(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
    uint64_t u = (uint64_t)a | (uint64_t)b << 16 | (uint64_t)c << 32 | (uint64_t)d << 48;
    __m128 f = _mm_cvtph_ps(_mm_cvtsi64_si128((long long)u));
    return _mm256_set_m128(f, f);
}

/* Row r's result: lanes r and r + 4, for the four rows at once. */
INL void store_rows(__m256 acc, float *out) {
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)));
}

/* Tile signature: GR weight rows w[], C activation rows from x (xs bytes
 * apart), results out[c * GR + r]. pf (or NULL) is the next tile's weights,
 * to prefetch pf_step bytes of per block step (see prefetch_step). */
typedef void (*gemm_tile_fn)(int64_t n, const uint8_t *const *w, const uint8_t *x, size_t xs, float *out,
                             const uint8_t *pf, size_t pf_step);

/* Generation streams the weights from memory once, with little arithmetic
 * per byte: while a tile computes, fetch the next tile's rows into L1, a
 * slice per block step, so that the loads of the next tile find them there
 * (the hardware prefetcher sees four interleaved row streams that restart
 * at every tile, and keeps too few misses in flight). */
INL void prefetch_step(const uint8_t *pf, size_t step, int64_t i) {
    if (!pf) return;
    const uint8_t *p = pf + (size_t)i * step;
    for (size_t k = 0; k < step; k += 64) _mm_prefetch((const char *)(p + k), _MM_HINT_T0);
}

/* Walk nr x nc in tiles of GR rows x up to CMAX tokens (tiles[k] handles k + 1
 * tokens). Rows are the outer loop: a tile's weight rows stay in L1 while
 * every token passes over them. */
static void gemm_walk(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                      size_t ldy, int cmax, const gemm_tile_fn *tiles, int64_t steps) {
    const uint8_t *W = w, *X = x;
    const size_t pf_step = (GR * ws + (size_t)steps - 1) / (size_t)steps;
    for (int r0 = 0; r0 < nr; r0 += GR) {
        const int rn = nr - r0 < GR ? nr - r0 : GR;
        const uint8_t *wr[GR];
        for (int i = 0; i < GR; i++) wr[i] = W + (size_t)(r0 + (i < rn ? i : rn - 1)) * ws;
        for (int c0 = 0; c0 < nc; c0 += cmax) {
            const int cn = nc - c0 < cmax ? nc - c0 : cmax;
            float out[GR * 8];
            /* prefetch on the first pass over these rows only, and not past the product */
            const uint8_t *pf = c0 == 0 && r0 + 2 * GR <= nr ? W + (size_t)(r0 + GR) * ws : NULL;
            tiles[cn - 1](n, wr, X + (size_t)c0 * xs, xs, out, pf, pf_step);
            for (int c = 0; c < cn; c++)
                for (int i = 0; i < rn; i++) y[(size_t)(c0 + c) * ldy + (size_t)(r0 + i)] = out[c * GR + i];
        }
    }
}

/* Define NAME_1 .. NAME_4 from an always_inline tile body NAME(n, w, x, xs, out, C),
 * and the gemm entry NAME_gemm walking with up to 4 tokens per tile. */
#define GEMM_TILES4(NAME, BLK)                                                                                     \
    static void NAME##_1(int64_t n, const uint8_t *const *w, const uint8_t *x, size_t xs, float *o,            \
                          const uint8_t *pf, size_t ps) { NAME(n, w, x, xs, o, pf, ps, 1); }                   \
    static void NAME##_2(int64_t n, const uint8_t *const *w, const uint8_t *x, size_t xs, float *o,            \
                          const uint8_t *pf, size_t ps) { NAME(n, w, x, xs, o, pf, ps, 2); }                   \
    static void NAME##_3(int64_t n, const uint8_t *const *w, const uint8_t *x, size_t xs, float *o,            \
                          const uint8_t *pf, size_t ps) { NAME(n, w, x, xs, o, pf, ps, 3); }                   \
    static void NAME##_4(int64_t n, const uint8_t *const *w, const uint8_t *x, size_t xs, float *o,            \
                          const uint8_t *pf, size_t ps) { NAME(n, w, x, xs, o, pf, ps, 4); }                   \
    static void NAME##_gemm(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y, \
                            size_t ldy) {                                                                          \
        static const gemm_tile_fn tiles[4] = {NAME##_1, NAME##_2, NAME##_3, NAME##_4};                            \
        gemm_walk(n, w, ws, nr, x, xs, nc, y, ldy, 4, tiles, (n + BLK - 1) / BLK);                                 \
    }
#define GEMM_TILES3(NAME, BLK)                                                                                     \
    static void NAME##_1(int64_t n, const uint8_t *const *w, const uint8_t *x, size_t xs, float *o,            \
                          const uint8_t *pf, size_t ps) { NAME(n, w, x, xs, o, pf, ps, 1); }                   \
    static void NAME##_2(int64_t n, const uint8_t *const *w, const uint8_t *x, size_t xs, float *o,            \
                          const uint8_t *pf, size_t ps) { NAME(n, w, x, xs, o, pf, ps, 2); }                   \
    static void NAME##_3(int64_t n, const uint8_t *const *w, const uint8_t *x, size_t xs, float *o,            \
                          const uint8_t *pf, size_t ps) { NAME(n, w, x, xs, o, pf, ps, 3); }                   \
    static void NAME##_gemm(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y, \
                            size_t ldy) {                                                                          \
        static const gemm_tile_fn tiles[3] = {NAME##_1, NAME##_2, NAME##_3};                                       \
        gemm_walk(n, w, ws, nr, x, xs, nc, y, ldy, 3, tiles, (n + BLK - 1) / BLK);                                 \
    }

/* The E8M0 half scales of four mxfp4 blocks, in both halves (as dup4_h). */
INL __m256 dup4_e8m0(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    const __m128 f = _mm_setr_ps(quant_e8m0_half(a), quant_e8m0_half(b), quant_e8m0_half(c), quant_e8m0_half(d));
    return _mm256_set_m128(f, f);
}

/* q8_0 / q4_0 / mxfp4 / iq4_nl weights x q8_0 activations: one 32-element block per
 * step. DECODE(blk) yields the block's signed weight bytes, SCALE4(b) the
 * four rows' block-b weight scales (dup4_h layout). Per row and block the
 * exact integer sum of the whole block (its two half-sums folded), times
 * dw * dx, one fma per block in block order: the order kern_avx512.c's
 * tiles and the AMX gemm (amx_q8_0.h) reproduce. */
#define Q8_0_DECODE(blk) LOADU((blk)->qs)
#define Q4_0_DECODE(blk) _mm256_sub_epi8(nibbles32((blk)->qs), _mm256_set1_epi8(8))
#define MXFP4_DECODE(blk) _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(kx_mxfp4_table()), nibbles32((blk)->qs))
#define IQ4_NL_DECODE(blk) _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(kx_iq4nl_table()), nibbles32((blk)->qs))
#define F16_SCALE4(b) dup4_h(w0[b].d, w1[b].d, w2[b].d, w3[b].d)
#define E8M0_SCALE4(b) dup4_e8m0(w0[b].e, w1[b].e, w2[b].e, w3[b].e)
#define GEMM_BLOCK32(NAME, WT, DECODE, SCALE4)                                                                     \
    INL void NAME(int64_t n, const uint8_t *const *wp, const uint8_t *xp, size_t xs, float *out, const uint8_t *pf, \
                  size_t pf_step, const int C) {                                                                  \
        const WT *w0 = (const WT *)(const void *)wp[0], *w1 = (const WT *)(const void *)wp[1];                     \
        const WT *w2 = (const WT *)(const void *)wp[2], *w3 = (const WT *)(const void *)wp[3];                     \
        const block_q8_0 *x[4];                                                                                    \
        __m128 acc[4];                                                                                             \
        const __m256i ones = _mm256_set1_epi16(1);                                                                 \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                                      \
            x[c] = (const block_q8_0 *)(const void *)(xp + (size_t)c * xs);                                        \
            acc[c] = _mm_setzero_ps();                                                                             \
        }                                                                                                          \
        for (int64_t b = 0; b < n / 32; b++) {                                                                     \
            prefetch_step(pf, pf_step, b);                                                                         \
            const __m128 dw = _mm256_castps256_ps128(SCALE4(b));                                                   \
            const __m256i q0 = DECODE(&w0[b]), q1 = DECODE(&w1[b]), q2 = DECODE(&w2[b]), q3 = DECODE(&w3[b]);      \
            const __m256i a0 = _mm256_sign_epi8(q0, q0), a1 = _mm256_sign_epi8(q1, q1);                            \
            const __m256i a2 = _mm256_sign_epi8(q2, q2), a3 = _mm256_sign_epi8(q3, q3);                            \
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                                  \
                const __m256i y = LOADU(x[c][b].qs);                                                               \
                const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(y, q0)), ones);     \
                const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(y, q1)), ones);     \
                const __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(a2, _mm256_sign_epi8(y, q2)), ones);     \
                const __m256i p3 = _mm256_madd_epi16(_mm256_maddubs_epi16(a3, _mm256_sign_epi8(y, q3)), ones);     \
                const __m128 d = _mm_mul_ps(dw, _mm_set1_ps(h2f(x[c][b].d)));                                      \
                acc[c] = _mm_fmadd_ps(_mm_cvtepi32_ps(fold_pair(hsum4_epi32(p0, p1, p2, p3))), d, acc[c]);        \
            }                                                                                                      \
        }                                                                                                          \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) _mm_storeu_ps(out + c * GR, acc[c]);                   \
    }
GEMM_BLOCK32(q8_0_tile, block_q8_0, Q8_0_DECODE, F16_SCALE4)
GEMM_BLOCK32(q4_0_tile, block_q4_0, Q4_0_DECODE, F16_SCALE4)
GEMM_BLOCK32(mxfp4_tile, block_mxfp4, MXFP4_DECODE, E8M0_SCALE4)
GEMM_BLOCK32(iq4_nl_tile, block_iq4_nl, IQ4_NL_DECODE, F16_SCALE4)
GEMM_TILES4(q8_0_tile, 32)
GEMM_TILES4(q4_0_tile, 32)
GEMM_TILES4(mxfp4_tile, 32)
GEMM_TILES4(iq4_nl_tile, 32)

/* Packed gemms (pack.h): a packed group's 16 rows in two vectors of 8 lanes
 * (rows 0-7, rows 8-15), up to 4 tokens. A line's 4 bytes of a row meet the
 * activation's matching 4 bytes (a broadcast) in a maddubs, so a
 * block's exact integer sum per row builds up in its lane with no reduction
 * across lanes (the row-major tiles spend three hadds per four rows and token
 * on it); then, per row, acc = fma(float(sum), dw * dx, acc), block by block:
 * the bits of the row-major tiles above and of kern_avx512.c's packed gemms
 * (tests/test_matmul.c). q8_0's lines hold w ^ 0x80 (vpdpbusd's unsigned
 * operand), xor-ed back here; |w| <= 128 and |y| <= 127 keep every maddubs
 * pair below 32767, and each line's pairs go to int32 at once (mxfp4: no
 * sign trick, p8_mxfp4_sums). */
INL __m256i p8_y4(const block_q8_0 *y, int k) { return _mm256_set1_epi32((int)load_u32((const uint8_t *)y->qs + 4 * k)); }

/* 8 rows' f16 or E8M0 block scales as floats (E8M0: as kern_avx512.c's p16_mxfp4_scales). */
INL __m256 p8_f16_scales(const uint8_t *g) { return _mm256_cvtph_ps(LOADU128(g)); }
INL __m256 p8_e8m0_scales(const uint8_t *g) {
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)g));
    const __m256i big = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i small = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(small, big, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1))));
}

/* The 16 rows' integer sums of block b for C tokens: s[c][h], rows 8h..8h+7. */
INL void p8_q8_0_sums(const uint8_t *g, const p16_x *X, int64_t b, __m256i s[4][2], const int C) {
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) s[c][0] = s[c][1] = _mm256_setzero_si256();
    for (int k = 0; k < 8; k++) {
        const __m256i w0 = _mm256_xor_si256(LOADU(g + 32 + 64 * k), flip);
        const __m256i w1 = _mm256_xor_si256(LOADU(g + 64 + 64 * k), flip);
        const __m256i a0 = _mm256_sign_epi8(w0, w0), a1 = _mm256_sign_epi8(w1, w1);
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
            const __m256i y = p8_y4(&X->x[c][b], k);
            s[c][0] = _mm256_add_epi32(s[c][0], _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(y, w0)), ones));
            s[c][1] = _mm256_add_epi32(s[c][1], _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(y, w1)), ones));
        }
    }
}
/* mxfp4 through the sign trick: the values are at most 12 in magnitude, a block's 8 lines of pairs (at most
 * 8 * 2 * 12 * 127 = 24384) add up in int16 before one madd. */
INL void p8_mxfp4_sign_sums(const uint8_t *g, const p16_x *X, int64_t b, __m256i s[4][2], const int C) {
    const __m256i tbl = _mm256_broadcastsi128_si256(kx_mxfp4_table()), m4 = _mm256_set1_epi8(0x0F);
    __m256i p[4][2];
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) p[c][0] = p[c][1] = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) { /* low nibbles: elements 4k.., high ones: 16 + 4k.. */
        for (int h = 0; h < 2; h++) {
            const __m256i v = LOADU(g + 16 + 64 * k + 32 * h);
            const __m256i wl = _mm256_shuffle_epi8(tbl, _mm256_and_si256(v, m4));
            const __m256i wh = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            const __m256i al = _mm256_sign_epi8(wl, wl), ah = _mm256_sign_epi8(wh, wh);
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                const block_q8_0 *y = &X->x[c][b];
                p[c][h] = _mm256_add_epi16(p[c][h], _mm256_maddubs_epi16(al, _mm256_sign_epi8(p8_y4(y, k), wl)));
                p[c][h] = _mm256_add_epi16(p[c][h], _mm256_maddubs_epi16(ah, _mm256_sign_epi8(p8_y4(y, k + 4), wh)));
            }
        }
    }
    const __m256i ones = _mm256_set1_epi16(1);
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
        s[c][0] = _mm256_madd_epi16(p[c][0], ones);
        s[c][1] = _mm256_madd_epi16(p[c][1], ones);
    }
}

/* mxfp4 without the sign trick: the table shifted by 12 (0..24) is maddubs' unsigned operand as it is, and
 * the shift's 12 * sum(y) per block comes off through the trailer's -128 * sum(y), exactly. A pair is at most
 * 2 * 24 * 127 = 6096: two lines (four pairs) add up in int16 before each madd. */
INL void p8_mxfp4_shift_sums(const uint8_t *g, const p16_x *X, int64_t b, __m256i s[4][2], const int C) {
    const __m256i tbl = _mm256_add_epi8(_mm256_broadcastsi128_si256(kx_mxfp4_table()), _mm256_set1_epi8(12));
    const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) s[c][0] = s[c][1] = _mm256_set1_epi32(X->corr[c][b] / 128 * 12);
    _Pragma("GCC unroll 2") for (int k0 = 0; k0 < 4; k0 += 2) {
        __m256i p[4][2];
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) p[c][0] = p[c][1] = _mm256_setzero_si256();
        _Pragma("GCC unroll 2") for (int k = k0; k < k0 + 2; k++) { /* low nibbles: elements 4k.., high ones: 16 + 4k.. */
            _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                const __m256i v = LOADU(g + 16 + 64 * k + 32 * h);
                const __m256i ul = _mm256_shuffle_epi8(tbl, _mm256_and_si256(v, m4));
                const __m256i uh = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                    const block_q8_0 *y = &X->x[c][b];
                    p[c][h] = _mm256_add_epi16(p[c][h], _mm256_maddubs_epi16(ul, p8_y4(y, k)));
                    p[c][h] = _mm256_add_epi16(p[c][h], _mm256_maddubs_epi16(uh, p8_y4(y, k + 4)));
                }
            }
        }
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
            s[c][0] = _mm256_add_epi32(s[c][0], _mm256_madd_epi16(p[c][0], ones));
            s[c][1] = _mm256_add_epi32(s[c][1], _mm256_madd_epi16(p[c][1], ones));
        }
    }
}

/* Both give the exact sums. The shifted table drops the sign instructions (two a line, two more a line and
 * token) for a madd every two lines, but keeps the int32 sums live beside the int16 ones: from two tokens a
 * tile they spill out of AVX2's 16 registers. bench/kernels on a Zen 3, one token from L3: 30 -> 40 GB/s;
 * shifted at four tokens a tile: 109 -> 103 GMAC/s. */
INL void p8_mxfp4_sums(const uint8_t *g, const p16_x *X, int64_t b, __m256i s[4][2], const int C) {
    if (C == 1) p8_mxfp4_shift_sums(g, X, b, s, C);
    else p8_mxfp4_sign_sums(g, X, b, s, C);
}

#define P8_TILE(NAME, BLK_BYTES, HDR, SCALES, SUMS)                                                                \
    INL void NAME##_tile(int64_t nb, const uint8_t *g, const p16_x *X, float *out, const int C) {                 \
        __m256 acc[4][2];                                                                                          \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) acc[c][0] = acc[c][1] = _mm256_setzero_ps();           \
        for (int64_t b = 0; b < nb; b++, g += (BLK_BYTES)) {                                                       \
            for (size_t q = 0; q < (BLK_BYTES); q += 64) _mm_prefetch((const char *)(g + 2048 + q), _MM_HINT_T0);  \
            const __m256 dw0 = SCALES(g), dw1 = SCALES(g + (HDR) / 2);                                             \
            __m256i s[4][2];                                                                                       \
            SUMS(g, X, b, s, C);                                                                                   \
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                                  \
                const __m256 dx = _mm256_set1_ps(X->dx[c][b]);                                                     \
                acc[c][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c][0]), _mm256_mul_ps(dw0, dx), acc[c][0]);       \
                acc[c][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c][1]), _mm256_mul_ps(dw1, dx), acc[c][1]);       \
            }                                                                                                      \
        }                                                                                                          \
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {                                                      \
            _mm256_storeu_ps(out + 16 * c, acc[c][0]);                                                             \
            _mm256_storeu_ps(out + 16 * c + 8, acc[c][1]);                                                         \
        }                                                                                                          \
    }                                                                                                              \
    P16_GEMM(NAME, 4)
P8_TILE(q8_0_p8, 544, 32, p8_f16_scales, p8_q8_0_sums)
P8_TILE(mxfp4_p8, 272, 16, p8_e8m0_scales, p8_mxfp4_sums)

/* Packed q4_K and q5_K (pack.h), AVX2: kern_avx512.c's k45_p16_tile on two
 * vectors of 8 rows. Per super-block and row the exact S = sum_j sc_j * dot_j
 * and M = sum_j m_j * (sub-block j's activation sum), then accS = fma(S, d *
 * dx, accS), accM = fma(M, -dmin * dx, accM) and accS + accM: t5_kmin's
 * order, the row-major tiles' bits. dot_j: the unsigned values times the
 * activations by maddubs, whose int16 pairs (at most 2 * 15 * 127 = 3810
 * for q4_K, 2 * 31 * 127 = 7874 for q5_K) add up over 8 lines (q4_K) or 4
 * (q5_K) before one madd by sc_j (in both halves of a lane) adds them to S;
 * M is four madds of two mins against two activation sums (each at most
 * 4064, an int16): no 32-bit multiply. The 6-bit scales and mins of all 16
 * rows are unpacked once a super-block, two sub-blocks a vector (k45_p8_scales). */

/* The 16 rows' scales and mins of a super-block as bytes from the transposed scale bytes t (pack.h):
 * sc[p] = [scale 2p of rows 0-15 | scale 2p + 1], mn[p] likewise for the mins (get_scale_min_k4's split). */
INL void k45_p8_scales(const uint8_t *t, __m256i sc[4], __m256i mn[4]) {
    const __m256i m63 = _mm256_set1_epi8(63), m0f = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    const __m256i t0 = LOADU(t), t2 = LOADU(t + 32), t4 = LOADU(t + 64), t6 = LOADU(t + 96);
    const __m256i t8 = LOADU(t + 128), t10 = LOADU(t + 160);
    sc[0] = _mm256_and_si256(t0, m63);
    sc[1] = _mm256_and_si256(t2, m63);
    mn[0] = _mm256_and_si256(t4, m63);
    mn[1] = _mm256_and_si256(t6, m63);
    sc[2] = _mm256_or_si256(_mm256_and_si256(t8, m0f), _mm256_and_si256(_mm256_srli_epi16(t0, 2), m30));
    sc[3] = _mm256_or_si256(_mm256_and_si256(t10, m0f), _mm256_and_si256(_mm256_srli_epi16(t2, 2), m30));
    mn[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(t8, 4), m0f), _mm256_and_si256(_mm256_srli_epi16(t4, 2), m30));
    mn[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(t10, 4), m0f), _mm256_and_si256(_mm256_srli_epi16(t6, 2), m30));
}

/* Rows 8h..8h+7 of two byte vectors a, b of 16 rows as int16 pairs (a[r], b[r]), one row a 32-bit lane. */
INL __m256i k45_p8_pairs(__m128i a, __m128i b, int h) {
    return _mm256_cvtepu8_epi16(h ? _mm_unpackhi_epi8(a, b) : _mm_unpacklo_epi8(a, b));
}
#define LO128(v) _mm256_castsi256_si128(v)
#define HI128(v) _mm256_extracti128_si256((v), 1)

/* How far ahead (bytes) the one-token q4_K tile asks for its stream, one
 * line a step: 0 on AMD, where the hardware prefetcher alone streams it
 * fastest from DRAM (Zen 3: 27.7 GB/s against 23.7 at 1 KiB ahead, 20.0 at
 * 2 KiB); 1 KiB on Intel, where it is 8-13% faster so (Sapphire Rapids
 * class: 27.1-27.4 against 29.3-31.1 GB/s, 2 KiB 29.5-29.9, 4 KiB 26.5-26.7;
 * bench/RESULTS.md 2026-12-06 and 2026-12-07). Set by kern_avx2_fill. */
static size_t kq_one_prefetch;

/* The one-token q4_K tile: k45_p8_tile's integer sums S and M and its float
 * steps, so its bits, with both halves of a line in one step, so that each
 * activation broadcast serves all 16 rows and nothing is spilled: per 64-byte
 * line two loads, six logic ops, four maddubs and four adds (about 820
 * instructions a group against 1200 in k45_p8_tile's loop of halves). The
 * activation pair sums of M come from one hadd of the block's bsums. It reads
 * its one stream front to back, asking for the line pf bytes on each step
 * where pf is not 0 (kq_one_prefetch: the vendor's). q5_K keeps k45_p8_tile's
 * halves for one token too: its two streams (qh, qs) read faster from DRAM
 * that way. */
INL void q4_K_p8_one(int64_t nsb, const uint8_t *g, const block_q8_K *x, float *out, const size_t pf) {
    __m256 accS0 = _mm256_setzero_ps(), accS1 = accS0, accM0 = accS0, accM1 = accS0;
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const size_t gs = 16 * sizeof(block_q4_K);
    for (int64_t i = 0; i < nsb; i++, g += gs) {
        const uint8_t *qs = g + 256, *y = (const uint8_t *)x[i].qs;
        __m256i sc[4], mn[4], S0 = _mm256_setzero_si256(), S1 = S0;
        k45_p8_scales(g + 64, sc, mn);
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
            __m256i l0 = _mm256_setzero_si256(), h0 = l0, l1 = l0, h1 = l0;
            if (pf)
                _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++)
                    _mm_prefetch((const char *)(qs + 64 * (8 * p + k) + pf), _MM_HINT_T0);
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
                const __m256i yl = _mm256_set1_epi32((int)load_u32(y + 64 * p + 4 * k));
                const __m256i yh = _mm256_set1_epi32((int)load_u32(y + 64 * p + 4 * k + 32));
                const __m256i v0 = LOADU(qs + 64 * (8 * p + k)), v1 = LOADU(qs + 64 * (8 * p + k) + 32);
                l0 = _mm256_add_epi16(l0, _mm256_maddubs_epi16(_mm256_and_si256(v0, m4), yl));
                h0 = _mm256_add_epi16(h0, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v0, 4), m4), yh));
                l1 = _mm256_add_epi16(l1, _mm256_maddubs_epi16(_mm256_and_si256(v1, m4), yl));
                h1 = _mm256_add_epi16(h1, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v1, 4), m4), yh));
                /* the sums stay in registers line by line: unpinned, GCC computes all 32
                 * products of the unrolled loop first and spills them */
                __asm__("" : "+x"(l0), "+x"(h0), "+x"(l1), "+x"(h1));
            }
            /* eight lines' pairs (each at most 3810) times the scales, into S */
            const __m128i a = _mm256_castsi256_si128(sc[p]), b = _mm256_extracti128_si256(sc[p], 1);
            S0 = _mm256_add_epi32(S0, _mm256_add_epi32(_mm256_madd_epi16(l0, k45_p8_pairs(a, a, 0)),
                                                       _mm256_madd_epi16(h0, k45_p8_pairs(b, b, 0))));
            S1 = _mm256_add_epi32(S1, _mm256_add_epi32(_mm256_madd_epi16(l1, k45_p8_pairs(a, a, 1)),
                                                       _mm256_madd_epi16(h1, k45_p8_pairs(b, b, 1))));
        }
        /* ys[p]: the activation sums of sub-blocks 2p and 2p + 1 (int16 each) */
        int32_t ys[4];
        _mm_storeu_si128((__m128i *)(void *)ys, _mm_hadd_epi16(LOADU128(x[i].bsums), LOADU128(x[i].bsums + 8)));
        __m256i M0 = _mm256_setzero_si256(), M1 = M0;
        _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
            const __m256i yp = _mm256_set1_epi32(ys[p]);
            const __m128i a = _mm256_castsi256_si128(mn[p]), b = _mm256_extracti128_si256(mn[p], 1);
            M0 = _mm256_add_epi32(M0, _mm256_madd_epi16(k45_p8_pairs(a, b, 0), yp));
            M1 = _mm256_add_epi32(M1, _mm256_madd_epi16(k45_p8_pairs(a, b, 1), yp));
        }
        const __m256 dx = _mm256_set1_ps(x[i].d), neg = _mm256_set1_ps(-1.0f);
        const __m256 d0 = _mm256_cvtph_ps(LOADU128(g)), d1 = _mm256_cvtph_ps(LOADU128(g + 16));
        const __m256 m0 = _mm256_mul_ps(_mm256_cvtph_ps(LOADU128(g + 32)), neg);
        const __m256 m1 = _mm256_mul_ps(_mm256_cvtph_ps(LOADU128(g + 48)), neg);
        accS0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S0), _mm256_mul_ps(d0, dx), accS0);
        accM0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(M0), _mm256_mul_ps(m0, dx), accM0);
        accS1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S1), _mm256_mul_ps(d1, dx), accS1);
        accM1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(M1), _mm256_mul_ps(m1, dx), accM1);
    }
    _mm256_storeu_ps(out, _mm256_add_ps(accS0, accM0));
    _mm256_storeu_ps(out + 8, _mm256_add_ps(accS1, accM1));
}

/* Half h (rows 8h..8h+7) of k45_p8_tile's super-block i: S and M, then the float steps. */
INL void k45_p8_half(int64_t i, const uint8_t *g, const block_q8_K *const *x, const __m256i *sc, const __m256i *mn,
                     const int h, __m256 accS[][2], __m256 accM[][2], const int C, const int q5) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m10 = _mm256_set1_epi8(0x10);
    const size_t gs = 16 * (q5 ? sizeof(block_q5_K) : sizeof(block_q4_K));
    const int flush = q5 ? 4 : 8; /* lines whose int16 pairs add up before a madd */
    const uint8_t *qh = g + 256, *qs = g + (q5 ? 256 + 512 : 256);
    __m256i S[4], M[4];
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) S[c] = M[c] = _mm256_setzero_si256();
    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
        const __m256i m = k45_p8_pairs(LO128(mn[p]), HI128(mn[p]), h);
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
            const int16_t *bs = x[c][i].bsums + 4 * p; /* sub-blocks 2p and 2p + 1: 16 elements a sum */
            const uint32_t y2 = (uint16_t)(bs[0] + bs[1]) | (uint32_t)(uint16_t)(bs[2] + bs[3]) << 16;
            M[c] = _mm256_add_epi32(M[c], _mm256_madd_epi16(m, _mm256_set1_epi32((int)y2)));
        }
    }
    _Pragma("GCC unroll 4") for (int p = 0; p < 4; p++) {
        const __m256i s0 = k45_p8_pairs(LO128(sc[p]), LO128(sc[p]), h);
        const __m256i s1 = k45_p8_pairs(HI128(sc[p]), HI128(sc[p]), h);
        __m256i lo16[4], hi16[4];
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) lo16[c] = hi16[c] = _mm256_setzero_si256();
        _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) {
            /* the next group, two lines a step of the first half: spread, so that the
             * fill buffers are never all taken at once */
            const size_t pf = 128 * (size_t)(8 * p + k);
            if (h == 0 && pf < gs) {
                _mm_prefetch((const char *)(g + gs + pf), _MM_HINT_T0);
                _mm_prefetch((const char *)(g + gs + pf + 64), _MM_HINT_T0);
            }
            const __m256i v = LOADU(qs + 64 * (8 * p + k) + 32 * h);
            __m256i l = _mm256_and_si256(v, m4), u = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if (q5) { /* bit 2p of the qh line to bit 4 of l, bit 2p + 1 to bit 4 of u */
                const __m256i hb = LOADU(qh + 64 * k + 32 * h);
                const __m256i b0 = 2 * p <= 4 ? _mm256_slli_epi16(hb, 4 - 2 * p) : _mm256_srli_epi16(hb, 2 * p - 4);
                const __m256i b1 = 2 * p + 1 <= 4 ? _mm256_slli_epi16(hb, 3 - 2 * p) : _mm256_srli_epi16(hb, 2 * p - 3);
                l = _mm256_or_si256(l, _mm256_and_si256(b0, m10));
                u = _mm256_or_si256(u, _mm256_and_si256(b1, m10));
            }
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                const uint8_t *y = (const uint8_t *)x[c][i].qs + 64 * p + 4 * k;
                lo16[c] = _mm256_add_epi16(lo16[c], _mm256_maddubs_epi16(l, _mm256_set1_epi32((int)load_u32(y))));
                hi16[c] = _mm256_add_epi16(hi16[c], _mm256_maddubs_epi16(u, _mm256_set1_epi32((int)load_u32(y + 32))));
                if (C > 1) __asm__("" : "+x"(lo16[c]), "+x"(hi16[c])); /* as in q4_K_p8_one */
                if ((k + 1) % flush == 0) { /* the scales times the pairs, into S */
                    S[c] = _mm256_add_epi32(S[c], _mm256_add_epi32(_mm256_madd_epi16(lo16[c], s0),
                                                                   _mm256_madd_epi16(hi16[c], s1)));
                    lo16[c] = hi16[c] = _mm256_setzero_si256();
                }
            }
        }
    }
    const __m256 d = _mm256_cvtph_ps(LOADU128(g + 16 * h));
    const __m256 dm = _mm256_mul_ps(_mm256_cvtph_ps(LOADU128(g + 32 + 16 * h)), _mm256_set1_ps(-1.0f));
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
        const __m256 dx = _mm256_set1_ps(x[c][i].d);
        accS[c][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[c]), _mm256_mul_ps(d, dx), accS[c][h]);
        accM[c][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(M[c]), _mm256_mul_ps(dm, dx), accM[c][h]);
    }
}

INL void k45_p8_tile(int64_t nsb, const uint8_t *g, const uint8_t *xp, size_t xs, float *out, const int C, const int q5) {
    if (C == 1 && !q5) {
        q4_K_p8_one(nsb, g, (const block_q8_K *)(const void *)xp, out, kq_one_prefetch);
        return;
    }
    const block_q8_K *x[4];
    __m256 accS[4][2], accM[4][2];
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
        x[c] = (const block_q8_K *)(const void *)(xp + (size_t)c * xs);
        accS[c][0] = accS[c][1] = accM[c][0] = accM[c][1] = _mm256_setzero_ps();
    }
    const size_t gs = 16 * (q5 ? sizeof(block_q5_K) : sizeof(block_q4_K));
    for (int64_t i = 0; i < nsb; i++, g += gs) {
        __m256i sc[4], mn[4];
        k45_p8_scales(g + 64, sc, mn);
        if (C == 1) { /* q5_K: a loop of halves reads fastest from DRAM (q4_K_p8_one's comment) */
            for (int h = 0; h < 2; h++) k45_p8_half(i, g, x, sc, mn, h, accS, accM, C, q5);
            continue;
        }
        /* Two tokens: both halves in line, each with the activation pointers made opaque
         * to GCC, which would otherwise keep the first half's broadcasts for the second
         * and spill them (with the int16 sums pinned, as in q4_K_p8_one: bench/kernels'
         * prompts q4_K +35%, q5_K +17%, bench/RESULTS.md 2026-12-06) */
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const block_q8_K *xh[4];
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                xh[c] = x[c];
                __asm__("" : "+r"(xh[c]));
            }
            k45_p8_half(i, g, xh, sc, mn, h, accS, accM, C, q5);
        }
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
        _mm256_storeu_ps(out + 16 * c, _mm256_add_ps(accS[c][0], accM[c][0]));
        _mm256_storeu_ps(out + 16 * c + 8, _mm256_add_ps(accS[c][1], accM[c][1]));
    }
}
#undef LO128
#undef HI128
/* Two tokens a tile: at four, the tile's 16 integer accumulators and its
 * operands outgrow AVX2's 16 registers, and the spills cost an AMD Zen 3
 * a third of its prompt speed (dense q4_K pp256: 31-35 tokens/s in fours,
 * 36-47 in threes, 40-47 in twos; bench/RESULTS.md 2026-12-05). */
P16_K45_GEMMS(p8, k45_p8_tile, 2)

/* Packed q6_K (pack.h), AVX2: kern_avx512.c's q6_K_p16_tile on two vectors
 * of 8 rows, its exact partial sums P0 (the even 16-element sub-blocks'
 * scaled products less 32 x the scaled activation sums of sub-blocks 0..7)
 * and P1 (the odd ones, less those of 8..15), so its bits. The 6-bit values
 * are maddubs' unsigned operand; two lines' pairs (at most 2 * 2 * 63 * 127 =
 * 32004) add up in int16 before a madd by the sub-block's scale in both
 * halves of a lane; the offsets are madds of two scales against two
 * activation sums (each at most 16 * 127). Line k of half h (ql lines
 * 16h + k, 16h + 8 + k, qh line 8h + k) holds elements 128h + 32m + 4k..
 * for m = 0..3: sub-block 8h + 2m + k / 4. */
#define Q6_S(j) LOADU128(sc + 16 * (j)) /* scale j of the 16 rows (int8) */
INL __m256i q6_p8_pairs(__m128i a, __m128i b, int r) {
    return _mm256_cvtepi8_epi16(r ? _mm_unpackhi_epi8(a, b) : _mm_unpacklo_epi8(a, b));
}
INL void q6_K_p8_tile(int64_t nsb, const uint8_t *g, const uint8_t *xp, size_t xs, float *out, const int C) {
    const block_q8_K *x[4];
    __m256 acc0[4][2], acc1[4][2];
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
        x[c] = (const block_q8_K *)(const void *)(xp + (size_t)c * xs);
        acc0[c][0] = acc0[c][1] = acc1[c][0] = acc1[c][1] = _mm256_setzero_ps();
    }
    const size_t gs = 16 * sizeof(block_q6_K);
    for (int64_t i = 0; i < nsb; i++, g += gs) {
        const uint8_t *sc = g + 32, *ql = g + 288, *qh = g + 288 + 2048;
        for (int r = 0; r < 2; r++) { /* rows 8r..8r+7: bytes 32r.. of every line */
            __m256i P[4][2];
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) P[c][0] = P[c][1] = _mm256_setzero_si256();
            _Pragma("GCC unroll 8") for (int jp = 0; jp < 8; jp++) { /* -32 x the scaled activation sums */
                const __m256i sp = q6_p8_pairs(Q6_S(2 * jp), Q6_S(2 * jp + 1), r);
                _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                    const int16_t *bs = x[c][i].bsums + 2 * jp;
                    const uint32_t b2 = (uint16_t)bs[0] | (uint32_t)(uint16_t)bs[1] << 16;
                    P[c][jp / 4] = _mm256_sub_epi32(P[c][jp / 4], _mm256_slli_epi32(_mm256_madd_epi16(sp, _mm256_set1_epi32((int)b2)), 5));
                }
            }
            for (int h = 0; h < 2; h++) {
                _Pragma("GCC unroll 2") for (int kk = 0; kk < 2; kk++) {
                    __m256i ss[4];
                    _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) {
                        const __m128i sj = Q6_S(8 * h + 2 * m + kk);
                        ss[m] = q6_p8_pairs(sj, sj, r);
                    }
                    _Pragma("GCC unroll 2") for (int k2 = 4 * kk; k2 < 4 * kk + 4; k2 += 2) {
                        __m256i dot[4][4]; /* [m][c] */
                        _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
                            dot[m][c] = _mm256_setzero_si256();
                        _Pragma("GCC unroll 2") for (int k = k2; k < k2 + 2; k++) {
                            const size_t pf = 128 * (size_t)(16 * r + 8 * h + k);
                            if (pf < gs) { /* the next group, two lines a step */
                                _mm_prefetch((const char *)(g + gs + pf), _MM_HINT_T0);
                                _mm_prefetch((const char *)(g + gs + pf + 64), _MM_HINT_T0);
                            }
                            const __m256i a = LOADU(ql + 64 * (16 * h + k) + 32 * r);
                            const __m256i b = LOADU(ql + 64 * (16 * h + 8 + k) + 32 * r);
                            const __m256i hb = LOADU(qh + 64 * (8 * h + k) + 32 * r);
                            const __m256i q[4] = {
                                _mm256_or_si256(_mm256_and_si256(a, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)),
                                _mm256_or_si256(_mm256_and_si256(b, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
                                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), m4), _mm256_and_si256(hb, m30)),
                                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4),
                                                _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30))};
                            _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                                const uint8_t *y = (const uint8_t *)x[c][i].qs + 128 * h + 32 * m + 4 * k;
                                dot[m][c] = _mm256_add_epi16(dot[m][c], _mm256_maddubs_epi16(q[m], _mm256_set1_epi32((int)load_u32(y))));
                            }
                        }
                        _Pragma("GCC unroll 4") for (int m = 0; m < 4; m++) _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
                            P[c][kk] = _mm256_add_epi32(P[c][kk], _mm256_madd_epi16(dot[m][c], ss[m]));
                    }
                }
            }
            const __m256 d = _mm256_cvtph_ps(LOADU128(g + 16 * r));
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                const __m256 dd = _mm256_mul_ps(d, _mm256_set1_ps(x[c][i].d));
                acc0[c][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P[c][0]), dd, acc0[c][r]);
                acc1[c][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(P[c][1]), dd, acc1[c][r]);
            }
        }
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
        _mm256_storeu_ps(out + 16 * c, _mm256_add_ps(acc0[c][0], acc1[c][0]));
        _mm256_storeu_ps(out + 16 * c + 8, _mm256_add_ps(acc0[c][1], acc1[c][1]));
    }
}
#undef Q6_S
P16_K_GEMM(q6_K_p8, 2)

/* K-quant x q8_K tiles. A super-block is eight 32-element chunks; chunk j
 * of a row meets the activations' bytes 32j..32j+31. Per row and token the
 * kernel forms the lone dot's integer vector (lane l: bytes 4l..4l+3 of every
 * chunk, each times its sub-block's scale), exact, and:
 * - q4_K, q5_K, q2_K (scale d and min dmin): one hadd with the min products
 *   (bsums x mins) gives [s s m m | s s m m]; a second hadd pairs two rows:
 *   [s_a m_a s_b m_b | s_a m_a s_b m_b], and its halves added give each
 *   row's whole super-block sums S and M, exact: [S_a M_a S_b M_b]. Four
 *   rows, [S_0 M_0 S_1 M_1 | S_2 M_2 S_3 M_3], are scaled by
 *   [d -dmin ...] * d_y and accumulated; a row's result is accS + accM.
 * - q6_K, q3_K (one scale d, values offset by 32 or 4): the offset products
 *   (bsums x scales, times the offset) subtracted lane by lane, then reduced
 *   across four rows like the 32-element formats (hsum4_epi32).
 * This is the K-quant order that kern_avx512.c's tiles (t5_kmin, t5_koff)
 * and amx_q4_K.h reproduce, so every x86 table gives these bits. */

INL void store_sm(__m256 acc, float *out) {
    _mm_storeu_ps(out, _mm_hadd_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)));
}

/* One row's super-block, ready for its chunks: the scales as kq_chunk wants
 * them, and the int16 vector whose madd with the bsums gives the min (q2_K,
 * q4_K, q5_K) or offset (q3_K, q6_K) products. */
typedef struct {
    const uint8_t *qs, *qh; /* q6_K: ql in qs */
    __m256i sc, mb;
} kq_row;

INL kq_row kq_begin(const int type, const uint8_t *blk) {
    kq_row k;
    if (type == DF_TYPE_Q4_K || type == DF_TYPE_Q5_K) {
        const block_q4_K *a4 = (const block_q4_K *)(const void *)blk;
        const block_q5_K *a5 = (const block_q5_K *)(const void *)blk;
        uint32_t u[4];
        quant_k4_unpack(type == DF_TYPE_Q4_K ? a4->scales : a5->scales, u);
        const __m128i v = _mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]); /* 8 scales, 8 mins */
        k.sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(v));
        k.mb = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(v, v)); /* m_j twice: pairs of bsums */
        k.qs = type == DF_TYPE_Q4_K ? a4->qs : a5->qs;
        k.qh = type == DF_TYPE_Q4_K ? NULL : a5->qh;
    } else if (type == DF_TYPE_Q2_K) {
        const block_q2_K *a = (const block_q2_K *)(const void *)blk;
        const __m128i sb = LOADU128(a->scales);
        k.sc = _mm256_cvtepu8_epi16(_mm_and_si128(sb, _mm_set1_epi8(0x0F)));
        k.mb = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sb, 4), _mm_set1_epi8(0x0F)));
        k.qs = a->qs, k.qh = NULL;
    } else if (type == DF_TYPE_Q3_K) {
        const block_q3_K *a = (const block_q3_K *)(const void *)blk;
        uint32_t s32[4];
        quant_k3_unpack(a->scales, s32);
        k.sc = _mm256_cvtepi8_epi16(
            _mm_sub_epi8(_mm_set_epi32((int)s32[3], (int)s32[2], (int)s32[1], (int)s32[0]), _mm_set1_epi8(32)));
        k.mb = k.sc;
        k.qs = a->qs, k.qh = a->hmask;
    } else {
        const block_q6_K *a = (const block_q6_K *)(const void *)blk;
        k.sc = _mm256_cvtepi8_epi16(LOADU128(a->scales));
        k.mb = k.sc;
        k.qs = a->ql, k.qh = a->qh;
    }
    return k;
}

/* Chunk j's unsigned values and the int16 scales of its sub-blocks (one for
 * q4_K/q5_K, two of 16 elements for the others). j is a constant after
 * unrolling, so the type's branches and shifts fold away. */
INL void kq_chunk(const int type, const kq_row *k, const int j, __m256i *u, __m256i *scl) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    const int h = j / 4, g = j % 4;
    if (type == DF_TYPE_Q4_K || type == DF_TYPE_Q5_K) { /* qs[32(j/2)..] low nibbles (j even) or high */
        const __m256i q = LOADU(k->qs + 32 * (j / 2));
        *u = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(q, 4) : q, m4);
        if (type == DF_TYPE_Q5_K) /* qh bit j as bit 4 */
            *u = _mm256_or_si256(*u, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(LOADU(k->qh), j), one), 4));
        *scl = scale_bcast(k->sc, j);
        return;
    }
    if (type == DF_TYPE_Q6_K) { /* low bits from ql[64h + 32(g%2)..], high bits from qh[32h..] */
        const __m256i l = LOADU(k->qs + 64 * h + 32 * (g % 2)), qh = LOADU(k->qh + 32 * h);
        const __m256i m30 = _mm256_set1_epi8(0x30);
        const __m256i lo = _mm256_and_si256(g < 2 ? l : _mm256_srli_epi16(l, 4), m4);
        const __m256i hi = g == 0 ? _mm256_slli_epi16(qh, 4) : g == 1 ? _mm256_slli_epi16(qh, 2)
                           : g == 2 ? qh : _mm256_srli_epi16(qh, 2);
        *u = _mm256_or_si256(lo, _mm256_and_si256(hi, m30));
    } else { /* q2_K, q3_K: qs[32h..] bits 2g..2g+1; q3_K: hmask bit 4h + g as bit 2 */
        *u = _mm256_and_si256(_mm256_srli_epi16(LOADU(k->qs + 32 * h), 2 * g), m3);
        if (type == DF_TYPE_Q3_K)
            *u = _mm256_or_si256(*u, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(LOADU(k->qh), 4 * h + g), one), 2));
    }
    *scl = scale_pair(k->sc, h, g);
}

/* [d, -dmin] of four rows as floats (q2_K, q4_K, q5_K), or [d d d d | d d d d] (q3_K, q6_K, as dup4_h). */
INL __m256 kq_d4(const int type, const uint8_t *const *b) {
    uint16_t d[GR], dm[GR];
    _Pragma("GCC unroll 4") for (int r = 0; r < GR; r++) kx_k_scales(type, b[r], &d[r], &dm[r]);
    if (type == DF_TYPE_Q3_K || type == DF_TYPE_Q6_K) return dup4_h(d[0], d[1], d[2], d[3]);
    const __m256 v = _mm256_cvtph_ps(_mm_setr_epi16((short)d[0], (short)dm[0], (short)d[1], (short)dm[1], (short)d[2],
                                                    (short)dm[2], (short)d[3], (short)dm[3]));
    return _mm256_mul_ps(v, _mm256_setr_ps(1, -1, 1, -1, 1, -1, 1, -1));
}

INL void kq_tile(const int type, int64_t n, const uint8_t *const *wp, const uint8_t *xp, size_t xs, float *out,
                 const uint8_t *pf, size_t pf_step, const int C) {
    const size_t bs = kx_k_size(type);
    const int with_min = type == DF_TYPE_Q2_K || type == DF_TYPE_Q4_K || type == DF_TYPE_Q5_K;
    const int off_shift = type == DF_TYPE_Q6_K ? 5 : 2; /* offsets 32 and 4 */
    const block_q8_K *x[4];
    __m256 acc[4];
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
        x[c] = (const block_q8_K *)(const void *)(xp + (size_t)c * xs);
        acc[c] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_step(pf, pf_step, i);
        const uint8_t *b[GR];
        __m256i t[GR][4]; /* per row and token: hadd(s, m), or s less the offsets */
        _Pragma("GCC unroll 4") for (int r = 0; r < GR; r++) {
            b[r] = wp[r] + (size_t)i * bs;
            const kq_row k = kq_begin(type, b[r]);
            __m256i s[4];
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) s[c] = _mm256_setzero_si256();
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
                __m256i u, scl;
                kq_chunk(type, &k, j, &u, &scl);
                _Pragma("GCC unroll 4") for (int c = 0; c < C; c++)
                    s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(_mm256_maddubs_epi16(u, LOADU(x[c][i].qs + 32 * j)), scl));
            }
            _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
                const __m256i p = _mm256_madd_epi16(LOADU(x[c][i].bsums), k.mb);
                t[r][c] = with_min ? _mm256_hadd_epi32(s[c], p) : _mm256_sub_epi32(s[c], _mm256_sll_epi32(p, _mm_cvtsi32_si128(off_shift)));
            }
        }
        const __m256 d4 = kq_d4(type, b);
        _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
            const __m256i v = with_min ? _mm256_set_m128i(fold_pair(_mm256_hadd_epi32(t[2][c], t[3][c])),
                                                          fold_pair(_mm256_hadd_epi32(t[0][c], t[1][c])))
                                       : hsum4_epi32(t[0][c], t[1][c], t[2][c], t[3][c]);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(d4, _mm256_set1_ps(x[c][i].d)), acc[c]);
        }
    }
    _Pragma("GCC unroll 4") for (int c = 0; c < C; c++) {
        if (with_min) store_sm(acc[c], out + c * GR);
        else store_rows(acc[c], out + c * GR);
    }
}

#define KQ_TILE(NAME, TYPE)                                                                                        \
    INL void NAME(int64_t n, const uint8_t *const *wp, const uint8_t *xp, size_t xs, float *out, const uint8_t *pf, \
                  size_t pf_step, const int C) {                                                                  \
        kq_tile(TYPE, n, wp, xp, xs, out, pf, pf_step, C);                                                        \
    }                                                                                                             \
    GEMM_TILES4(NAME, QK_K)
KQ_TILE(q2_K_tile, DF_TYPE_Q2_K)
KQ_TILE(q3_K_tile, DF_TYPE_Q3_K)
KQ_TILE(q4_K_tile, DF_TYPE_Q4_K)
KQ_TILE(q5_K_tile, DF_TYPE_Q5_K)
KQ_TILE(q6_K_tile, DF_TYPE_Q6_K)

/* f32 / f16 weights: one 8-float accumulator per (row, token) over the
 * whole row (n % 8 tail through a zero-padded load), reduced across four
 * rows at the end. LOAD8(p, i) loads 8 elements at index i as floats;
 * TAIL8(p, i, k) the k < 8 remaining ones, zero-padded. */
INL __m256 f32_load8(const void *p, int64_t i) { return _mm256_loadu_ps((const float *)p + i); }
INL __m256 f16_load8(const void *p, int64_t i) { return _mm256_cvtph_ps(LOADU128((const uint16_t *)p + i)); }
static __m256 f32_tail8(const void *p, int64_t i, int k) {
    float t[8] = {0};
    memcpy(t, (const float *)p + i, (size_t)k * sizeof(float));
    return _mm256_loadu_ps(t);
}
static __m256 f16_tail8(const void *p, int64_t i, int k) {
    uint16_t t[8] = {0};
    memcpy(t, (const uint16_t *)p + i, (size_t)k * sizeof(uint16_t));
    return _mm256_cvtph_ps(LOADU128(t));
}
#define GEMM_FLOAT(NAME, LOAD8, TAIL8)                                                                             \
    INL void NAME(int64_t n, const uint8_t *const *w, const uint8_t *xp, size_t xs, float *out, const uint8_t *pf,  \
                  size_t pf_step, const int C) {                                                                  \
        const uint8_t *x[3];                                                                                       \
        __m256 acc[3][GR];                                                                                         \
        _Pragma("GCC unroll 3") for (int c = 0; c < C; c++) {                                                      \
            x[c] = xp + (size_t)c * xs;                                                                            \
            _Pragma("GCC unroll 4") for (int r = 0; r < GR; r++) acc[c][r] = _mm256_setzero_ps();                  \
        }                                                                                                          \
        int64_t i = 0;                                                                                             \
        for (; i + 8 <= n; i += 8) {                                                                               \
            if ((i & 31) == 0) prefetch_step(pf, 4 * pf_step, i / 32);                                             \
            const __m256 a0 = LOAD8(w[0], i), a1 = LOAD8(w[1], i), a2 = LOAD8(w[2], i), a3 = LOAD8(w[3], i);       \
            _Pragma("GCC unroll 3") for (int c = 0; c < C; c++) {                                                  \
                const __m256 y = LOAD8(x[c], i);                                                                   \
                acc[c][0] = _mm256_fmadd_ps(a0, y, acc[c][0]);                                                     \
                acc[c][1] = _mm256_fmadd_ps(a1, y, acc[c][1]);                                                     \
                acc[c][2] = _mm256_fmadd_ps(a2, y, acc[c][2]);                                                     \
                acc[c][3] = _mm256_fmadd_ps(a3, y, acc[c][3]);                                                     \
            }                                                                                                      \
        }                                                                                                          \
        if (i < n) {                                                                                               \
            const int k = (int)(n - i);                                                                            \
            const __m256 a0 = TAIL8(w[0], i, k), a1 = TAIL8(w[1], i, k), a2 = TAIL8(w[2], i, k), a3 = TAIL8(w[3], i, k); \
            _Pragma("GCC unroll 3") for (int c = 0; c < C; c++) {                                                  \
                const __m256 y = TAIL8(x[c], i, k);                                                                \
                acc[c][0] = _mm256_fmadd_ps(a0, y, acc[c][0]);                                                     \
                acc[c][1] = _mm256_fmadd_ps(a1, y, acc[c][1]);                                                     \
                acc[c][2] = _mm256_fmadd_ps(a2, y, acc[c][2]);                                                     \
                acc[c][3] = _mm256_fmadd_ps(a3, y, acc[c][3]);                                                     \
            }                                                                                                      \
        }                                                                                                          \
        _Pragma("GCC unroll 3") for (int c = 0; c < C; c++)                                                        \
            store_rows(hsum4_ps(acc[c][0], acc[c][1], acc[c][2], acc[c][3]), out + c * GR);                        \
    }
GEMM_FLOAT(f32_tile, f32_load8, f32_tail8)
GEMM_FLOAT(f16_tile, f16_load8, f16_tail8)
GEMM_TILES3(f32_tile, 8)
GEMM_TILES3(f16_tile, 8)

/* ---------------------------------------------------------------------- */
/* Attention helpers (quant.h): q . row for runs of cached f32/f16 rows, and
 * y += sum_j a_j row_j. dot_rows takes eight rows at a time (eight FMA
 * chains in flight) and reduces them with hadds; a row's dot is the same
 * sequence of operations in any slot, and the tail of fewer than eight rows
 * pads with the last row. */
#define DOT_ROWS(NAME, LOAD8, TAIL8)                                                                               \
    static void NAME(int64_t n, const float *q, const void *rows, size_t stride, int nr, float *out) {            \
        const uint8_t *R = rows;                                                                                   \
        for (int j0 = 0; j0 < nr; j0 += 8) {                                                                       \
            const int jn = nr - j0 < 8 ? nr - j0 : 8;                                                              \
            const uint8_t *r[8];                                                                                   \
            __m256 acc[8];                                                                                         \
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {                                                  \
                r[j] = R + (size_t)(j0 + (j < jn ? j : jn - 1)) * stride;                                          \
                acc[j] = _mm256_setzero_ps();                                                                      \
            }                                                                                                      \
            int64_t i = 0;                                                                                         \
            for (; i + 8 <= n; i += 8) {                                                                           \
                const __m256 qv = _mm256_loadu_ps(q + i);                                                          \
                _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) acc[j] = _mm256_fmadd_ps(qv, LOAD8(r[j], i), acc[j]); \
            }                                                                                                      \
            if (i < n) {                                                                                           \
                const __m256 qv = f32_tail8(q, i, (int)(n - i));                                                   \
                _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++)                                                \
                    acc[j] = _mm256_fmadd_ps(qv, TAIL8(r[j], i, (int)(n - i)), acc[j]);                            \
            }                                                                                                      \
            const __m256 h0 = hsum4_ps(acc[0], acc[1], acc[2], acc[3]), h1 = hsum4_ps(acc[4], acc[5], acc[6], acc[7]); \
            /* [r0..r3 lo | r0..r3 hi] and the same for r4..r7 -> eight sums */                                   \
            const __m256 s = _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31)); \
            float tmp[8];                                                                                          \
            _mm256_storeu_ps(tmp, s);                                                                              \
            memcpy(out + j0, tmp, (size_t)jn * sizeof(float));                                                     \
        }                                                                                                          \
    }
DOT_ROWS(f32_dot_rows, f32_load8, f32_tail8)
DOT_ROWS(f16_dot_rows, f16_load8, f16_tail8)

/* y[i] += sum_j a[j] * row_j[i]: 64 outputs (eight accumulators) at a time
 * over all rows, then 8 at a time, then a zero-padded tail; each y[i] sees
 * one FMA per row, in row order. */
#define AXPY_ROWS(NAME, LOAD8, TAIL8)                                                                              \
    static void NAME(int64_t n, const float *a, const void *rows, size_t stride, int nr, float *y) {              \
        const uint8_t *R = rows;                                                                                   \
        int64_t i = 0;                                                                                             \
        for (; i + 64 <= n; i += 64) {                                                                             \
            __m256 acc[8];                                                                                         \
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) acc[k] = _mm256_loadu_ps(y + i + 8 * k);           \
            for (int j = 0; j < nr; j++) {                                                                         \
                const __m256 aj = _mm256_broadcast_ss(a + j);                                                      \
                const uint8_t *r = R + (size_t)j * stride;                                                         \
                _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) acc[k] = _mm256_fmadd_ps(aj, LOAD8(r, i + 8 * k), acc[k]); \
            }                                                                                                      \
            _Pragma("GCC unroll 8") for (int k = 0; k < 8; k++) _mm256_storeu_ps(y + i + 8 * k, acc[k]);           \
        }                                                                                                          \
        for (; i + 8 <= n; i += 8) {                                                                               \
            __m256 acc = _mm256_loadu_ps(y + i);                                                                   \
            for (int j = 0; j < nr; j++) acc = _mm256_fmadd_ps(_mm256_broadcast_ss(a + j), LOAD8(R + (size_t)j * stride, i), acc); \
            _mm256_storeu_ps(y + i, acc);                                                                          \
        }                                                                                                          \
        if (i < n) {                                                                                               \
            const int k = (int)(n - i);                                                                            \
            __m256 acc = f32_tail8(y, i, k);                                                                       \
            for (int j = 0; j < nr; j++) acc = _mm256_fmadd_ps(_mm256_broadcast_ss(a + j), TAIL8(R + (size_t)j * stride, i, k), acc); \
            float tmp[8];                                                                                          \
            _mm256_storeu_ps(tmp, acc);                                                                            \
            memcpy(y + i, tmp, (size_t)k * sizeof(float));                                                         \
        }                                                                                                          \
    }
AXPY_ROWS(f32_axpy_rows, f32_load8, f32_tail8)
AXPY_ROWS(f16_axpy_rows, f16_load8, f16_tail8)

/* expf(x - sub) for 8 lanes: x = n ln2 + r with |r| <= ln2/2 (Cody-Waite),
 * Cephes' degree-6 polynomial for e^r, 2^n through the exponent bits.
 * About 1 ulp; inputs below -87.3 give ~1e-38 instead of a denormal or 0
 * (harmless in a softmax, whose sum is at least 1). */
INL __m256 exp8(__m256 x) {
    x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.0f)), _mm256_set1_ps(-87.3365478515625f));
    const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n: n in [-126, 127] after the clamps */
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static float f32_exp_sum(float *x, int64_t n, float sub) {
    const __m256 vs = _mm256_set1_ps(sub);
    __m256 sum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
        _mm256_storeu_ps(x + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    float s = hsum_ps(sum);
    if (i < n) {
        float t[8] = {0};
        const int k = (int)(n - i);
        memcpy(t, x + i, (size_t)k * sizeof(float));
        _mm256_storeu_ps(t, exp8(_mm256_sub_ps(_mm256_loadu_ps(t), vs)));
        for (int j = 0; j < k; j++) s += t[j];
        memcpy(x + i, t, (size_t)k * sizeof(float));
    }
    return s;
}

/* a = a / (1 + e^-a) * b (b NULL: times 1) */
static void f32_swiglu(float *a, const float *b, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), sgn = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(a + i);
        const __m256 e = exp8(_mm256_xor_ps(g, sgn));
        const __m256 u = b ? _mm256_loadu_ps(b + i) : one;
        _mm256_storeu_ps(a + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u));
    }
    if (i < n) {
        float t[8] = {0}, u[8] = {1, 1, 1, 1, 1, 1, 1, 1};
        const int k = (int)(n - i);
        memcpy(t, a + i, (size_t)k * sizeof(float));
        if (b) memcpy(u, b + i, (size_t)k * sizeof(float));
        f32_swiglu(t, u, 8);
        memcpy(a + i, t, (size_t)k * sizeof(float));
    }
}

/* tanh for 8 lanes: an odd Taylor polynomial through x^11 below |x| = 0.3
 * (terms beyond are under 1e-10 relative there), else (1 - e) / (1 + e) with
 * e = exp(-2|x|) (no cancellation worth a bit: e <= 0.55), sign restored.
 * A few ulp; saturates to +-1 (exp8's clamp keeps e finite). */
INL __m256 tanh8(__m256 x) {
    const __m256 sgn = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    const __m256 ax = _mm256_andnot_ps(sgn, x), x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-8.8632355e-3f);                 /* -1382/155925 */
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.1869489e-2f));  /* 62/2835 */
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-5.3968254e-2f)); /* -17/315 */
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(1.3333334e-1f));  /* 2/15 */
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-3.3333334e-1f)); /* -1/3 */
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, x2), x, x);
    const __m256 e = exp8(_mm256_mul_ps(ax, _mm256_set1_ps(-2.0f)));
    const __m256 big = _mm256_or_ps(_mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e)), _mm256_and_ps(x, sgn));
    return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.3f), _CMP_LT_OQ));
}

/* SiTU (quant.h) for 8 lanes at a time; the tail goes through the same lanes. */
static void f32_situ(float *a, const float *b, int64_t n, float beta, float lb) {
    const __m256 vb = _mm256_set1_ps(beta), ib = _mm256_set1_ps(1.0f / beta), vl = _mm256_set1_ps(lb);
    const __m256 il = _mm256_set1_ps(lb > 0.0f ? 1.0f / lb : 0.0f), one = _mm256_set1_ps(1.0f);
    const __m256 sgn = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(a + i), u0 = _mm256_loadu_ps(b + i);
        const __m256 act = _mm256_mul_ps(_mm256_mul_ps(tanh8(_mm256_mul_ps(g, ib)), vb),
                                         _mm256_div_ps(one, _mm256_add_ps(one, exp8(_mm256_xor_ps(g, sgn)))));
        const __m256 u = lb > 0.0f ? _mm256_mul_ps(tanh8(_mm256_mul_ps(u0, il)), vl) : u0;
        _mm256_storeu_ps(a + i, _mm256_mul_ps(act, u));
    }
    if (i < n) {
        float t[8] = {0}, v[8] = {0};
        const int k = (int)(n - i);
        memcpy(t, a + i, (size_t)k * sizeof(float));
        memcpy(v, b + i, (size_t)k * sizeof(float));
        f32_situ(t, v, 8, beta, lb);
        memcpy(a + i, t, (size_t)k * sizeof(float));
    }
}

/* ---------------------------------------------------------------------- */

void kern_avx2_fill(quant_traits *t) {
    kq_one_prefetch = kx_cpu_intel() ? 1024 : 0;
    t[DF_TYPE_F32].vec_dot = f32_dot;
    t[DF_TYPE_F16].vec_dot = f16_dot;
    t[DF_TYPE_F16].to_float = f16_to_float;
    t[DF_TYPE_F16].from_float = f16_from_float;
    t[DF_TYPE_BF16].vec_dot = bf16_dot;
    t[DF_TYPE_BF16].to_float = bf16_to_float;
    t[DF_TYPE_Q4_0].vec_dot = q4_0_dot;
    t[DF_TYPE_Q4_1].vec_dot = q4_1_dot;
    t[DF_TYPE_Q5_0].vec_dot = q5_0_dot;
    t[DF_TYPE_Q5_1].vec_dot = q5_1_dot;
    t[DF_TYPE_Q8_0].vec_dot = q8_0_dot;
    t[DF_TYPE_Q8_0].from_float = q8_0_quant;
    t[DF_TYPE_Q8_1].from_float = q8_1_quant;
    t[DF_TYPE_Q8_K].from_float = q8_K_quant;
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
    t[DF_TYPE_F32].gemm = f32_tile_gemm;
    t[DF_TYPE_F16].gemm = f16_tile_gemm;
    t[DF_TYPE_Q4_0].gemm = q4_0_tile_gemm;
    t[DF_TYPE_Q8_0].gemm = q8_0_tile_gemm;
    t[DF_TYPE_Q8_0].gemm_packed = q8_0_p8_gemm;
    t[DF_TYPE_MXFP4].gemm_packed = mxfp4_p8_gemm;
    t[DF_TYPE_Q4_K].gemm_packed = q4_K_p8_gemm;
    t[DF_TYPE_Q5_K].gemm_packed = q5_K_p8_gemm;
    t[DF_TYPE_Q6_K].gemm_packed = q6_K_p8_gemm;
    t[DF_TYPE_MXFP4].gemm = mxfp4_tile_gemm;
    t[DF_TYPE_IQ4_NL].gemm = iq4_nl_tile_gemm;
    t[DF_TYPE_Q2_K].gemm = q2_K_tile_gemm;
    t[DF_TYPE_Q3_K].gemm = q3_K_tile_gemm;
    t[DF_TYPE_Q4_K].gemm = q4_K_tile_gemm;
    t[DF_TYPE_Q5_K].gemm = q5_K_tile_gemm;
    t[DF_TYPE_Q6_K].gemm = q6_K_tile_gemm;
    t[DF_TYPE_F32].dot_rows = f32_dot_rows;
    t[DF_TYPE_F16].dot_rows = f16_dot_rows;
    t[DF_TYPE_F32].axpy_rows = f32_axpy_rows;
    t[DF_TYPE_F16].axpy_rows = f16_axpy_rows;
    t[DF_TYPE_F32].exp_sum = f32_exp_sum;
    t[DF_TYPE_F32].swiglu = f32_swiglu;
    t[DF_TYPE_F32].situ = f32_situ;
}
