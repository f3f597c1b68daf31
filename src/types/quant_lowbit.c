/*
 * quant_lowbit.c - the scalar reference codecs of the microscaled 4-bit
 * types (MXFP4, NVFP4) and the 1-2-bit types (Q1_0, Q2_0, TQ1_0, TQ2_0),
 * and quant_lowbit_fill, which puts their entries into quant.c's reference
 * table. quant.c's design comment holds for them (ggml's layouts, its
 * integer sums); their quantizers are ggml's reference ones, so the files
 * mkmodel writes hold what llama.cpp would.
 */
#include "quant.h"
#include "quant_bits.h"
#include "quant_isa.h"
#include "quant_grids.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================
 * MXFP4: 32 elements, one E8M0 exponent byte e and 16 bytes of 4-bit E2M1
 * codes. Element j (j < 16) is the low nibble of qs[j], element j+16 the
 * high one. value = kvalues[code] * 2^(e-128) (ggml's doubled e2m1 table
 * times half the E8M0 scale). Pairs with q8_0 activations.
 * ====================================================================== */

float df_e8m0_to_fp32_half(uint8_t e) { return quant_e8m0_half(e); }

static void mxfp4_to_float(const void *src, float *dst, int64_t n) {
    const block_mxfp4 *b = src;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, dst += QK_MXFP4) {
        float d = quant_e8m0_half(b[i].e);
        for (int j = 0; j < 16; j++) {
            dst[j] = (float)df_kvalues_mxfp4[b[i].qs[j] & 0xF] * d;
            dst[j + 16] = (float)df_kvalues_mxfp4[b[i].qs[j] >> 4] * d;
        }
    }
}

/* ggml's shared exponent: floor(log2(amax)) - 2 + 127, so the largest
 * element lands in [8, 16) units of the half scale; 0 for an all-zero block.
 * (ggml converts the float to uint8 unchecked; below 2^-125 that is out of
 * range, and we clamp to 0.) */
static uint8_t mxfp4_exponent(float amax) {
    if (!(amax > 0.0f)) return 0;
    float e = floorf(log2f(amax)) - 2.0f + 127.0f;
    return e < 0.0f ? 0 : (e > 254.0f ? 254 : (uint8_t)e);
}

/* Index of the table value nearest x/d, the first one on ties (ggml's
 * best_index_mxfp4: index 0 beats 8, the smaller magnitude wins a tie). */
static int mxfp4_best_index(float x, float d) {
    int best = 0;
    float best_err = fabsf((float)df_kvalues_mxfp4[0] * d - x);
    for (int i = 1; i < 16; i++) {
        float err = fabsf((float)df_kvalues_mxfp4[i] * d - x);
        if (err < best_err) { best = i; best_err = err; }
    }
    return best;
}

static void mxfp4_from_float(const float *src, void *dst, int64_t n) {
    block_mxfp4 *b = dst;
    for (int64_t i = 0; i < n / QK_MXFP4; i++, src += QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; j++)
            if (amax < fabsf(src[j])) amax = fabsf(src[j]);
        b[i].e = mxfp4_exponent(amax);
        float d = quant_e8m0_half(b[i].e);
        for (int j = 0; j < 16; j++)
            b[i].qs[j] = (uint8_t)(mxfp4_best_index(src[j], d) | (mxfp4_best_index(src[j + 16], d) << 4));
    }
}

static void mxfp4_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_mxfp4 *a = w;
    const block_q8_0 *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_MXFP4; i++) {
        int s = 0;
        for (int j = 0; j < 16; j++) {
            s += df_kvalues_mxfp4[a[i].qs[j] & 0xF] * b[i].qs[j];
            s += df_kvalues_mxfp4[a[i].qs[j] >> 4] * b[i].qs[j + 16];
        }
        sum += (H2F(b[i].d) * quant_e8m0_half(a[i].e)) * (float)s;
    }
    *out = sum;
}

/* ======================================================================
 * NVFP4: 64 elements in 4 sub-blocks of 16; sub-block s has a UE4M3 scale
 * byte d[s] and 8 bytes of E2M1 codes (element j < 8 the low nibble of
 * qs[8s + j], j + 8 the high one); value = kvalues_mxfp4[code] *
 * ue4m3_half(d[s]). Pairs with q8_0 (two sub-blocks per activation block),
 * each sub-block's integer sum scaled in float as ggml does. Quantizer
 * (ggml's reference): the scale is ue4m3(amax / 6) rounded as ggml's
 * ggml_fp32_to_ue4m3, codes the nearest table value (mxfp4's rule).
 * ====================================================================== */

static void nvfp4_to_float(const void *src, float *dst, int64_t n) {
    const block_nvfp4 *b = src;
    for (int64_t i = 0; i < n / QK_NVFP4; i++)
        for (int s = 0; s < 4; s++, dst += 16) {
            float d = quant_ue4m3_half(b[i].d[s]);
            for (int j = 0; j < 8; j++) {
                dst[j] = (float)df_kvalues_mxfp4[b[i].qs[8 * s + j] & 0xF] * d;
                dst[j + 8] = (float)df_kvalues_mxfp4[b[i].qs[8 * s + j] >> 4] * d;
            }
        }
}

/* ggml_fp32_to_ue4m3: round to nearest (ties up) on the mantissa, clamp
 * to 448 (code 0x7E), subnormals man * 2^-9, 0 for x <= 0 or NaN. */
static uint8_t fp32_to_ue4m3(float x) {
    if (!(x > 0.0f)) return 0;
    if (x > 448.0f) x = 448.0f;
    const uint32_t bits = f2u(x);
    int e = (int)((bits >> 23) & 0xFF) - 127 + 7, m = (int)((bits >> 20) & 7);
    if (e <= 0) {
        int sm = (int)(x * 512.0f + 0.5f);
        return sm > 7 ? 7 : (sm < 1 ? 0 : (uint8_t)sm);
    }
    if (e >= 15) return 0x7E;
    m += (int)((bits >> 19) & 1);
    if (m > 7) {
        m = 0;
        if (++e >= 15) return 0x7E;
    }
    return (uint8_t)(e << 3 | m);
}

static void nvfp4_from_float(const float *src, void *dst, int64_t n) {
    block_nvfp4 *b = dst;
    for (int64_t i = 0; i < n / QK_NVFP4; i++)
        for (int s = 0; s < 4; s++, src += 16) {
            float amax = 0.0f;
            for (int j = 0; j < 16; j++)
                if (amax < fabsf(src[j])) amax = fabsf(src[j]);
            b[i].d[s] = fp32_to_ue4m3(amax / 6.0f);
            float d = quant_ue4m3_half(b[i].d[s]);
            for (int j = 0; j < 8; j++)
                b[i].qs[8 * s + j] = (uint8_t)(mxfp4_best_index(src[j], d) | (mxfp4_best_index(src[j + 8], d) << 4));
        }
}

static void nvfp4_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_nvfp4 *a = w;
    const block_q8_0 *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_NVFP4; i++)
        for (int s = 0; s < 4; s++) {
            const block_q8_0 *y = &b[2 * i + s / 2];
            const int8_t *yq = y->qs + 16 * (s % 2);
            int si = 0;
            for (int j = 0; j < 8; j++)
                si += df_kvalues_mxfp4[a[i].qs[8 * s + j] & 0xF] * yq[j] + df_kvalues_mxfp4[a[i].qs[8 * s + j] >> 4] * yq[j + 8];
            sum += H2F(y->d) * quant_ue4m3_half(a[i].d[s]) * (float)si;
        }
    *out = sum;
}

/* ======================================================================
 * Q1_0: 128 elements, d (f16) and one bit per element: bit j%8 of qs[j/8]
 * set means +d, clear means -d. Pairs with q8_0: one weight block spans four
 * activation blocks, and (as in ggml) each activation block's integer sum is
 * scaled by its own d in float, the four summed, then times the weight d.
 * Quantizer (ggml's reference): d = mean |x|, bit = (x >= 0).
 * ====================================================================== */

static void q1_0_to_float(const void *src, float *dst, int64_t n) {
    const block_q1_0 *b = src;
    for (int64_t i = 0; i < n / QK1_0; i++, dst += QK1_0) {
        float d = H2F(b[i].d);
        for (int j = 0; j < QK1_0; j++) dst[j] = (b[i].qs[j >> 3] >> (j & 7)) & 1 ? d : -d;
    }
}

static void q1_0_from_float(const float *src, void *dst, int64_t n) {
    block_q1_0 *b = dst;
    for (int64_t i = 0; i < n / QK1_0; i++, src += QK1_0) {
        float sum_abs = 0.0f;
        for (int j = 0; j < QK1_0; j++) sum_abs += fabsf(src[j]);
        b[i].d = F2H(sum_abs / QK1_0);
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int j = 0; j < QK1_0; j++)
            if (src[j] >= 0.0f) b[i].qs[j >> 3] |= (uint8_t)(1u << (j & 7));
    }
}

/* Dot of weight blocks that span several q8_0 blocks (q1_0, q2_0), scaled
 * as ggml does: each activation block's integer sum times its d, those
 * summed, times the weight block's d. Each weight block is bs bytes: the f16
 * d, then the codes; val(codes, j) is element j's integer value. */
typedef int (*lowbit_val_fn)(const uint8_t *qs, int j);
static inline float dot_spanning_q8_0(int64_t n, const void *w, size_t bs, int blck, lowbit_val_fn val,
                                      const block_q8_0 *b) {
    float sum = 0;
    for (int64_t i = 0; i < n / blck; i++, b += blck / QK8_0) {
        const uint8_t *blk = (const uint8_t *)w + (size_t)i * bs;
        uint16_t d;
        memcpy(&d, blk, 2);
        float sb = 0;
        for (int k = 0; k < blck / QK8_0; k++) {
            int s = 0;
            for (int l = 0; l < QK8_0; l++) s += val(blk + 2, QK8_0 * k + l) * b[k].qs[l];
            sb += H2F(b[k].d) * (float)s;
        }
        sum += H2F(d) * sb;
    }
    return sum;
}

static int q1_0_val(const uint8_t *qs, int j) { return (qs[j >> 3] >> (j & 7)) & 1 ? 1 : -1; }

static void q1_0_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    *out = dot_spanning_q8_0(n, w, sizeof(block_q1_0), QK1_0, q1_0_val, x);
}

/* ======================================================================
 * Q2_0: 64 elements, d (f16) and 2-bit codes c: element j is bits
 * 2(j%4)..2(j%4)+1 of qs[j/4]; value = d * (c - 1), c - 1 in {-1, 0, 1, 2}.
 * Pairs with q8_0 (two activation blocks per weight block, scaled as for
 * Q1_0). Quantizer (ggml's reference): d = amax, c = round(x/d) + 1 (half
 * away from zero) clamped to [0, 3], so c = 3 only arises in foreign files.
 * ====================================================================== */

static inline int q2_0_code(const uint8_t *qs, int j) { return (qs[j >> 2] >> (2 * (j & 3))) & 3; }

static void q2_0_to_float(const void *src, float *dst, int64_t n) {
    const block_q2_0 *b = src;
    for (int64_t i = 0; i < n / QK2_0; i++, dst += QK2_0) {
        float d = H2F(b[i].d);
        for (int j = 0; j < QK2_0; j++) dst[j] = (float)(q2_0_code(b[i].qs, j) - 1) * d;
    }
}

/* round(v) + 1 clamped to [0, 3], half away from zero; NaN -> 0 */
static inline int q2_0_quant1(float v) {
    float r = roundf(v);
    if (!(r >= -1.0f)) return 0;
    return r >= 2.0f ? 3 : (int)r + 1;
}

static void q2_0_from_float(const float *src, void *dst, int64_t n) {
    block_q2_0 *b = dst;
    for (int64_t i = 0; i < n / QK2_0; i++, src += QK2_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK2_0; j++)
            if (fabsf(src[j]) > amax) amax = fabsf(src[j]);
        float id = amax > 0.0f ? 1.0f / amax : 0.0f;
        b[i].d = F2H(amax);
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int j = 0; j < QK2_0; j++) b[i].qs[j >> 2] |= (uint8_t)(q2_0_quant1(src[j] * id) << (2 * (j & 3)));
    }
}

static int q2_0_val(const uint8_t *qs, int j) { return q2_0_code(qs, j) - 1; }

static void q2_0_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    *out = dot_spanning_q8_0(n, w, sizeof(block_q2_0), QK2_0, q2_0_val, x);
}

/* ======================================================================
 * TQ2_0: 256 ternary elements, 2-bit codes c and d (f16, after the codes);
 * value = d * (c - 1). Element 128h + 32l + m is bits 2l..2l+1 of
 * qs[32h + m].
 * TQ1_0: 256 ternary elements as base-3 digits: byte q holds trits
 * t_n = ((uint8_t)(q * 3^n) * 3) >> 8 (n = 0 first), value d * (t - 1).
 * Element 32n + m (< 160) is trit n of qs[m]; 160 + 16n + m (< 240) trit n
 * of qs[32 + m]; 240 + 4n + j trit n of qh[j].
 * Both pair with q8_K: one integer sum per super-block, times d * y.d.
 * Quantizers are ggml's reference ones: d = amax, digit = round(x / amax)
 * + 1 (half away from zero); tq1_0 packs five digits most significant
 * first and stores ceil(q * 256 / 243).
 * ====================================================================== */

static inline int tq2_0_val(const block_tq2_0 *b, int e) {
    return ((b->qs[32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3) - 1;
}

static inline int tq_trit(uint8_t q, int n) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return ((unsigned)(uint8_t)(q * pow3[n]) * 3u) >> 8;
}

static inline int tq1_0_val(const block_tq1_0 *b, int e) {
    if (e < 160) return tq_trit(b->qs[e & 31], e >> 5) - 1;
    if (e < 240) return tq_trit(b->qs[32 + ((e - 160) & 15)], (e - 160) >> 4) - 1;
    return tq_trit(b->qh[(e - 240) & 3], (e - 240) >> 2) - 1;
}

/* round(v) + 1 clamped to [0, 2], half away from zero (ggml's lroundf + 1
 * for |v| <= 1); NaN -> 1 */
static inline int tq_digit(float v) {
    float r = roundf(v);
    if (!(r == r)) return 1;
    return r <= -1.0f ? 0 : (r >= 1.0f ? 2 : 1);
}

/* amax of a 256-element block; returns 1/amax (0 for an all-zero block) */
static float tq_scale(const float *x, uint16_t *d) {
    float amax = 0.0f;
    for (int j = 0; j < QK_K; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
    *d = F2H(amax);
    return amax > 0.0f ? 1.0f / amax : 0.0f;
}

static void tq2_0_to_float(const void *src, float *dst, int64_t n) {
    const block_tq2_0 *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        float d = H2F(b[i].d);
        for (int e = 0; e < QK_K; e++) dst[e] = (float)tq2_0_val(&b[i], e) * d;
    }
}

static void tq2_0_from_float(const float *src, void *dst, int64_t n) {
    block_tq2_0 *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float id = tq_scale(src, &b[i].d);
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int e = 0; e < QK_K; e++)
            b[i].qs[32 * (e >> 7) + (e & 31)] |= (uint8_t)(tq_digit(src[e] * id) << (2 * ((e >> 5) & 3)));
    }
}

static void tq2_0_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_tq2_0 *a = w;
    const block_q8_K *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int e = 0; e < QK_K; e++) isum += tq2_0_val(&a[i], e) * b[i].qs[e];
        sum += (H2F(a[i].d) * b[i].d) * (float)isum;
    }
    *out = sum;
}

static void tq1_0_to_float(const void *src, float *dst, int64_t n) {
    const block_tq1_0 *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        float d = H2F(b[i].d);
        for (int e = 0; e < QK_K; e++) dst[e] = (float)tq1_0_val(&b[i], e) * d;
    }
}

/* Pack the digits of x[0], x[stride], ... (cnt of them, most significant
 * first, padded to five) into one byte, as ggml: ceil(q * 256 / 243). */
static uint8_t tq1_0_pack(const float *x, int stride, int cnt, float id) {
    unsigned q = 0;
    for (int k = 0; k < 5; k++) q = q * 3 + (unsigned)(k < cnt ? tq_digit(x[k * stride] * id) : 0);
    return (uint8_t)((q * 256 + 242) / 243);
}

static void tq1_0_from_float(const float *src, void *dst, int64_t n) {
    block_tq1_0 *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float id = tq_scale(src, &b[i].d);
        for (int m = 0; m < 32; m++) b[i].qs[m] = tq1_0_pack(src + m, 32, 5, id);
        for (int m = 0; m < 16; m++) b[i].qs[32 + m] = tq1_0_pack(src + 160 + m, 16, 5, id);
        for (int j = 0; j < 4; j++) b[i].qh[j] = tq1_0_pack(src + 240 + j, 4, 4, id);
    }
}

static void tq1_0_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_tq1_0 *a = w;
    const block_q8_K *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int e = 0; e < QK_K; e++) isum += tq1_0_val(&a[i], e) * b[i].qs[e];
        sum += (H2F(a[i].d) * b[i].d) * (float)isum;
    }
    *out = sum;
}


void quant_lowbit_fill(quant_traits *t) {
    t[DF_TYPE_MXFP4] = QUANT_REF_ENTRY("mxfp4", QK_MXFP4, sizeof(block_mxfp4), DF_TYPE_Q8_0, mxfp4);
    t[DF_TYPE_NVFP4] = QUANT_REF_ENTRY("nvfp4", QK_NVFP4, sizeof(block_nvfp4), DF_TYPE_Q8_0, nvfp4);
    t[DF_TYPE_Q1_0] = QUANT_REF_ENTRY("q1_0", QK1_0, sizeof(block_q1_0), DF_TYPE_Q8_0, q1_0);
    t[DF_TYPE_Q2_0] = QUANT_REF_ENTRY("q2_0", QK2_0, sizeof(block_q2_0), DF_TYPE_Q8_0, q2_0);
    t[DF_TYPE_TQ1_0] = QUANT_REF_ENTRY("tq1_0", QK_K, sizeof(block_tq1_0), DF_TYPE_Q8_K, tq1_0);
    t[DF_TYPE_TQ2_0] = QUANT_REF_ENTRY("tq2_0", QK_K, sizeof(block_tq2_0), DF_TYPE_Q8_K, tq2_0);
}
