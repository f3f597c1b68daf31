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
 *   never hold -128 (our quantizers emit [-127, 127]).
 * - No int16 saturation is possible: the largest maddubs pair is
 *   2 * 63 * 127 = 16002 (q6_K), and scaled sums stay far inside int32.
 * - Every kernel forms exactly the same per-block integer sums as the scalar
 *   reference in quant.c and multiplies by the same scale products; only the
 *   float accumulation (vector lanes, fused multiply-add) differs.
 * - Activation quantizers (q8_0, q8_1, q8_K, f16) are bit-identical to the
 *   scalar ones: same amax, same 127/amax, same round-to-nearest-even.
 */
#include "quant_isa.h"

#include <immintrin.h>
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

void kern_avx2_fill(quant_traits *t) {
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
}
