/*
 * amx_x86.h - the AMX gemms with their x86 (AVX-512) helpers, routing and
 * table fill, instantiated twice: on the tile instructions (kern_amx.c)
 * and on amx_tile.h's software model (kern_amx_model.c), so that every line
 * of the hardware kernels but the tile instructions themselves runs in the
 * tests on any AVX-512 machine.
 *
 * DESIGN
 * - The includer defines the tile operations, AMX_FN_ATTR, AMX_F16, the
 *   AMX_STATE_* conventions and AMX_GEMM_LINKAGE (as amx_q8_0.h asks),
 *   the gemms' names (AMX_Q8_0_GEMM ... AMX_Q6_K_GEMM_PACKED),
 *   AMX_X86_GEMM(TYPE) (the name of TYPE's gemm, TYPE as in AMX_ROUTE
 *   below) and AMX_MIN_TOKENS (products of fewer tokens stay on the AVX-512
 *   tiles; 0 on the model, so its tests reach every size).
 * - The weight decoding (a 16 x 16 dword transpose into the VNNI layout,
 *   amx_tr16), the scale gathers and the epilogues of the two gemm headers
 *   get AVX-512 versions here, with the same results as the headers' plain
 *   ones; the accumulators of a tile live in 16 registers.
 * - Weights the store packed (pack.h) go to the gemms' packed versions
 *   (gemm_packed), routed the same way (small products to the AVX-512
 *   packed gemm, which gives the same bits).
 */
#ifndef AMX_X86_GEMM
#error "define the tile operations, the gemms' names and AMX_X86_GEMM before including amx_x86.h"
#endif

#include <immintrin.h>
#include <limits.h>

#define AMX_DECODE amx_decode_512
#define AMX_DX amx_dx_512

/* out[m] = dword m of r[0..15]: a 16 x 16 transpose of dwords (in 128-bit lanes, then of the lanes). */
AMX_FN_ATTR static inline void amx_tr16(const __m512i r[16], __m512i out[16]) {
    __m512i t[16];
    for (int q = 0; q < 16; q += 4) { /* lane L of t[q + j]: rows q..q+3 of dword 4L + j */
        const __m512i a0 = _mm512_unpacklo_epi32(r[q], r[q + 1]), a1 = _mm512_unpackhi_epi32(r[q], r[q + 1]);
        const __m512i a2 = _mm512_unpacklo_epi32(r[q + 2], r[q + 3]), a3 = _mm512_unpackhi_epi32(r[q + 2], r[q + 3]);
        t[q] = _mm512_unpacklo_epi64(a0, a2);
        t[q + 1] = _mm512_unpackhi_epi64(a0, a2);
        t[q + 2] = _mm512_unpacklo_epi64(a1, a3);
        t[q + 3] = _mm512_unpackhi_epi64(a1, a3);
    }
    for (int j = 0; j < 4; j++) { /* the 4 x 4 transpose of 128-bit lanes across t[j], t[4 + j], t[8 + j], t[12 + j] */
        const __m512i b0 = _mm512_shuffle_i32x4(t[j], t[4 + j], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i b1 = _mm512_shuffle_i32x4(t[j], t[4 + j], _MM_SHUFFLE(3, 2, 3, 2));
        const __m512i b2 = _mm512_shuffle_i32x4(t[8 + j], t[12 + j], _MM_SHUFFLE(1, 0, 1, 0));
        const __m512i b3 = _mm512_shuffle_i32x4(t[8 + j], t[12 + j], _MM_SHUFFLE(3, 2, 3, 2));
        out[j] = _mm512_shuffle_i32x4(b0, b2, _MM_SHUFFLE(2, 0, 2, 0));
        out[4 + j] = _mm512_shuffle_i32x4(b0, b2, _MM_SHUFFLE(3, 1, 3, 1));
        out[8 + j] = _mm512_shuffle_i32x4(b1, b3, _MM_SHUFFLE(2, 0, 2, 0));
        out[12 + j] = _mm512_shuffle_i32x4(b1, b3, _MM_SHUFFLE(3, 1, 3, 1));
    }
}

/* 16 lanes of f16 bits in the low halves of dwords -> floats. */
AMX_FN_ATTR static inline __m512 amx_f16_lanes(__m512i d) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_and_si512(d, _mm512_set1_epi32(0xFFFF))));
}

/* Offsets of 16 rows stride apart (rows past n repeat the last), for gathers. */
AMX_FN_ATTR static inline __m512i amx_row_offsets(int n, size_t stride) {
    int32_t off[16];
    for (int r = 0; r < 16; r++) off[r] = (int32_t)((size_t)(r < n ? r : n - 1) * stride);
    return _mm512_loadu_si512((const void *)off);
}

/* amx_q8_0.h's amx_q8_0_decode: two blocks of the 16 rows per transpose (row q: [block b | block b + 1], 16
 * dwords), the scales by one gather per block. */
struct amx_q8_0_wk;
AMX_FN_ATTR static void amx_decode_512(const uint8_t *w, size_t ws, int rn, int64_t b0, int kc, struct amx_q8_0_wk *o);

/* amx_q8_0.h's amx_q8_0_dx: one gather of the 16 tokens' scales. */
AMX_FN_ATTR static void amx_dx_512(const uint8_t *x, size_t xs, int cn, int64_t b, float dx[16]) {
    const __m512i d = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), (__mmask16)((1u << cn) - 1),
                                                  amx_row_offsets(cn, xs), x + (size_t)b * sizeof(block_q8_0), 1);
    _mm512_storeu_ps(dx, amx_f16_lanes(d));
}

/* amx_q8_0.h's accumulators in 16 registers (a token each, the rows in the lanes), the same fma per lane. */
typedef struct {
    __m512 v[16];
} amx_acc_512;
#define AMX_ACC amx_acc_512
#define AMX_ACC_LOAD(a, acc)                                                                                       \
    do {                                                                                                           \
        _Pragma("GCC unroll 16") for (int c_ = 0; c_ < 16; c_++) (a)->v[c_] = _mm512_loadu_ps((acc)[c_]);           \
    } while (0)
#define AMX_ACC_STORE(a, acc)                                                                                      \
    do {                                                                                                           \
        _Pragma("GCC unroll 16") for (int c_ = 0; c_ < 16; c_++) _mm512_storeu_ps((acc)[c_], (a)->v[c_]);           \
    } while (0)
#define AMX_SCALE(a, cs, dw, dx)                                                                                   \
    do {                                                                                                           \
        const __m512 vw_ = _mm512_loadu_ps(dw);                                                                    \
        _Pragma("GCC unroll 16") for (int c_ = 0; c_ < 16; c_++) {                                                 \
            const __m512 f_ = _mm512_cvtepi32_ps(_mm512_loadu_si512((const void *)(cs)[c_]));                      \
            (a)->v[c_] = _mm512_fmadd_ps(f_, _mm512_mul_ps(vw_, _mm512_set1_ps((dx)[c_])), (a)->v[c_]);           \
        }                                                                                                          \
    } while (0)

#include "amx_q8_0.h"

AMX_FN_ATTR static void amx_decode_512(const uint8_t *w, size_t ws, int rn, int64_t b0, int kc, amx_q8_0_wk *o) {
    const __m512i idx = amx_row_offsets(rn, ws);
    const __mmask16 live = (__mmask16)((1u << rn) - 1);
    for (int b = 0; b < kc; b += 2) {
        const int two = b + 1 < kc;
        __m512i r[16], t[16];
        for (int q = 0; q < 16; q++) {
            if (q >= rn) {
                r[q] = _mm512_setzero_si512();
                continue;
            }
            const block_q8_0 *wb = (const block_q8_0 *)(const void *)(w + (size_t)q * ws) + b0 + b;
            const __m256i lo = _mm256_loadu_si256((const __m256i *)(const void *)wb[0].qs);
            const __m256i hi = two ? _mm256_loadu_si256((const __m256i *)(const void *)wb[1].qs) : _mm256_setzero_si256();
            r[q] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
        }
        amx_tr16(r, t);
        for (int m = 0; m < 8 * (1 + two); m++) _mm512_storeu_si512((void *)o[b + m / 8].b[m % 8], t[m]);
        for (int k = 0; k < 1 + two; k++) {
            const uint8_t *base = w + (size_t)(b0 + b + k) * sizeof(block_q8_0);
            _mm512_storeu_ps(o[b + k].dw, amx_f16_lanes(_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, base, 1)));
        }
    }
}

#define AMXK_DECODE amxk_decode_512
#define AMXK_SACC amxk_s512
#define AMXK_SZERO(s)                                                                                              \
    do {                                                                                                           \
        _Pragma("GCC unroll 16") for (int c_ = 0; c_ < 16; c_++) (s)->v[c_] = _mm512_setzero_si512();              \
    } while (0)
#define AMXK_SUB(s, cs, sc)                                                                                        \
    do {                                                                                                           \
        const __m512i sc_ = _mm512_loadu_si512((const void *)(sc));                                                \
        _Pragma("GCC unroll 16") for (int c_ = 0; c_ < 16; c_++)(s)->v[c_] =                                       \
            _mm512_add_epi32((s)->v[c_], _mm512_mullo_epi32(_mm512_loadu_si512((const void *)(cs)[c_]), sc_));    \
    } while (0)
#define AMXK_FINISH amxk_finish_512
#define AMXK6_FINISH amxk6_finish_512

/* amx_q4_K.h's integer sums in 16 registers (a token each, the rows in the lanes). */
typedef struct {
    __m512i v[16];
} amxk_s512;
struct amxk_wk;
AMX_FN_ATTR static void amxk_decode_512(int type, const uint8_t *w, size_t ws, int rn, int64_t i, struct amxk_wk *o);
AMX_FN_ATTR static inline void amxk_finish_512(const amxk_s512 *s, const struct amxk_wk *wk, const uint8_t *x, size_t xs,
                                               int cn, int64_t i, float accs[16][16], float accm[16][16]);
AMX_FN_ATTR static inline void amxk6_finish_512(const amxk_s512 *s0, const amxk_s512 *s1, const struct amxk_wk *wk,
                                                const uint8_t *x, size_t xs, int cn, int64_t i, float acc0[16][16],
                                                float acc1[16][16]);

#include "amx_q4_K.h"

/* amx_q4_K.h's amxk_decode: per 64-element slice the 16 rows' nibbles (as t5_k4_decode lays them out: 16 dwords
 * of 4 values each), transposed 16 x 16 in dwords, so that output m is dword m of every row: the B tile row of
 * sub-block 2k + m / 8. */
AMX_FN_ATTR static void amxk_decode_512(int type, const uint8_t *w, size_t ws, int rn, int64_t i, amxk_wk *o) {
    const __m512i m4 = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    const __m512i sh = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(4), 1);
    for (int k = 0; k < 4; k++) {
        __m512i r[16], t[16];
        /* q5_K: qh bit 2k for the slice's low half, 2k + 1 for its high half */
        const __m512i hsh = _mm512_inserti64x4(_mm512_set1_epi16((short)(2 * k)), _mm256_set1_epi16((short)(2 * k + 1)), 1);
        for (int q = 0; q < 16; q++) {
            if (q >= rn) {
                r[q] = _mm512_setzero_si512();
                continue;
            }
            const uint8_t *row = w + (size_t)q * ws;
            const uint8_t *qs = type == DF_TYPE_Q5_K ? ((const block_q5_K *)(const void *)row)[i].qs
                                                     : ((const block_q4_K *)(const void *)row)[i].qs;
            const __m512i v = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * k)));
            r[q] = _mm512_and_si512(_mm512_srlv_epi16(v, sh), m4);
            if (type == DF_TYPE_Q5_K) {
                const uint8_t *qh = ((const block_q5_K *)(const void *)row)[i].qh;
                const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(const void *)qh));
                r[q] = _mm512_or_si512(r[q], _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(h, hsh), one), 4));
            }
        }
        amx_tr16(r, t);
        for (int m = 0; m < 16; m++) _mm512_storeu_si512((void *)o->b[2 * k + m / 8][m % 8], t[m]); /* dword m */
    }
    amxk_meta(type, w, ws, rn, i, o);
}

/* amx_q4_K.h's amxk_finish: M by vpdpwssd (the rows' min pairs x a token's bsum pair), then the same fmas. */
AMX_FN_ATTR static inline void amxk_finish_512(const amxk_s512 *s, const amxk_wk *wk, const uint8_t *x, size_t xs,
                                               int cn, int64_t i, float accs[16][16], float accm[16][16]) {
    const __m512 d = _mm512_loadu_ps(wk->d), nd = _mm512_loadu_ps(wk->ndmin);
    for (int c = 0; c < cn; c++) {
        const block_q8_K *xb = (const block_q8_K *)(const void *)(x + (size_t)c * xs) + i;
        int32_t bp[8];
        memcpy(bp, xb->bsums, sizeof bp);
        __m512i m = _mm512_setzero_si512();
        for (int p = 0; p < 8; p++) m = _mm512_dpwssd_epi32(m, _mm512_set1_epi32(bp[p]), _mm512_loadu_si512((const void *)wk->mn[p]));
        const __m512 dy = _mm512_set1_ps(xb->d);
        _mm512_storeu_ps(accs[c], _mm512_fmadd_ps(_mm512_cvtepi32_ps(s->v[c]), _mm512_mul_ps(d, dy), _mm512_loadu_ps(accs[c])));
        _mm512_storeu_ps(accm[c], _mm512_fmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(nd, dy), _mm512_loadu_ps(accm[c])));
    }
}

/* amx_q4_K.h's amxk6_finish: the scaled activation sums by vpdpwssd (the rows' scale pairs x a token's bsum pair),
 * times 32 off P0 (sub-blocks 0..7) and P1 (8..15), then the same fmas. */
AMX_FN_ATTR static inline void amxk6_finish_512(const amxk_s512 *s0, const amxk_s512 *s1, const amxk_wk *wk,
                                                const uint8_t *x, size_t xs, int cn, int64_t i, float acc0[16][16],
                                                float acc1[16][16]) {
    const __m512 d = _mm512_loadu_ps(wk->d);
    for (int c = 0; c < cn; c++) {
        const block_q8_K *xb = (const block_q8_K *)(const void *)(x + (size_t)c * xs) + i;
        int32_t bp[8];
        memcpy(bp, xb->bsums, sizeof bp);
        __m512i o0 = _mm512_setzero_si512(), o1 = _mm512_setzero_si512();
        for (int p = 0; p < 4; p++) {
            o0 = _mm512_dpwssd_epi32(o0, _mm512_set1_epi32(bp[p]), _mm512_loadu_si512((const void *)wk->mn[p]));
            o1 = _mm512_dpwssd_epi32(o1, _mm512_set1_epi32(bp[p + 4]), _mm512_loadu_si512((const void *)wk->mn[p + 4]));
        }
        const __m512i p0 = _mm512_sub_epi32(s0->v[c], _mm512_slli_epi32(o0, 5));
        const __m512i p1 = _mm512_sub_epi32(s1->v[c], _mm512_slli_epi32(o1, 5));
        const __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(xb->d));
        _mm512_storeu_ps(acc0[c], _mm512_fmadd_ps(_mm512_cvtepi32_ps(p0), dd, _mm512_loadu_ps(acc0[c])));
        _mm512_storeu_ps(acc1[c], _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), dd, _mm512_loadu_ps(acc1[c])));
    }
}

/* The AMX gemm of a type (AMX_X86_GEMM(TYPE): the includer's name for it), and the table's gemm before it (the
 * AVX-512 tile: the same bits) for products of fewer than AMX_MIN_TOKENS tokens, or where STAY (a condition on
 * ws and xs: the gathers' 32-bit offsets) says so. */
#define AMX_ROUTE(TYPE, STAY)                                                                                      \
    static quant_gemm_fn TYPE##_small;                                                                             \
    static void amx_##TYPE##_gemm(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc,   \
                                  float *y, size_t ldy) {                                                          \
        if ((nc < AMX_MIN_TOKENS || (STAY)) && TYPE##_small) TYPE##_small(n, w, ws, nr, x, xs, nc, y, ldy);        \
        else AMX_X86_GEMM(TYPE)(n, w, ws, nr, x, xs, nc, y, ldy);                                                  \
    }
AMX_ROUTE(q8_0, ws > INT32_MAX / 16 || xs > INT32_MAX / 16) /* its gathers take 32-bit offsets of up to 15 rows */
AMX_ROUTE(mxfp4, xs > INT32_MAX / 16) /* amx_dx_512's gathers */
AMX_ROUTE(q4_0, xs > INT32_MAX / 16)
AMX_ROUTE(iq4_nl, xs > INT32_MAX / 16)
AMX_ROUTE(q4_K, 0)
AMX_ROUTE(q5_K, 0)
AMX_ROUTE(q6_K, 0)
AMX_ROUTE(q8_0_packed, xs > INT32_MAX / 16) /* on pack.h's layout; the small products on the AVX-512 packed gemm */
AMX_ROUTE(mxfp4_packed, xs > INT32_MAX / 16)
AMX_ROUTE(q4_K_packed, 0)
AMX_ROUTE(q5_K_packed, 0)
AMX_ROUTE(q6_K_packed, 0)
#undef AMX_ROUTE

/* The gemms into t (a copy of the AVX-512 table, whose gemms the routes keep for the small products), each
 * type's packed version where t packs the type. */
static void amx_x86_fill(quant_traits *t) {
    quant_gemm_fn *const small[AMX_GEMM_TYPES] = {&q8_0_small, &mxfp4_small, &q4_K_small, &q5_K_small,
                                                   &q6_K_small,  &q4_0_small,  &iq4_nl_small};
    quant_gemm_fn *const small_packed[AMX_GEMM_TYPES] = {&q8_0_packed_small, &mxfp4_packed_small, &q4_K_packed_small,
                                                          &q5_K_packed_small, &q6_K_packed_small, NULL, NULL};
    for (int i = 0; i < AMX_GEMM_TYPES; i++) {
        *small[i] = t[amx_gemm_types[i]].gemm;
        if (small_packed[i]) *small_packed[i] = t[amx_gemm_types[i]].gemm_packed;
    }
    static const amx_gemm_set set = {
        {amx_q8_0_gemm, amx_mxfp4_gemm, amx_q4_K_gemm, amx_q5_K_gemm, amx_q6_K_gemm, amx_q4_0_gemm, amx_iq4_nl_gemm},
        {amx_q8_0_packed_gemm, amx_mxfp4_packed_gemm, amx_q4_K_packed_gemm, amx_q5_K_packed_gemm, amx_q6_K_packed_gemm,
         NULL, NULL}};
    amx_put_gemms(t, &set, 16 * AMX_CG); /* a row tile serves the whole call */
}
