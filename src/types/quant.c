/*
 * quant.c - tensor element types: the traits table, half-precision
 * conversion, and the scalar reference kernels for every supported type.
 *
 * DESIGN
 * - Block layouts are ggml's, byte for byte (static assertions below), since
 *   GGUF files store them verbatim. Element order inside a block follows
 *   ggml's dequantize_row_* exactly; the comment above each to_float spells
 *   out where element i lives.
 * - The table is indexed by ggml type id. Types ggml knows but we do not
 *   compute (I8..F64) carry their name,
 *   block size and block bytes with supported = 0, so a GGUF reader can size
 *   tensors and report "unsupported type <name>". Ids ggml has retired are
 *   holes (name NULL).
 * - vec_dot pairs a weight row with an activation row in the type's vec_type,
 *   as llama.cpp's CPU backend does (q4_0/q5_0/q8_0, mxfp4/nvfp4, q1_0/q2_0, iq4_nl -> q8_0,
 *   q4_1/q5_1 -> q8_1, K-quants, the other i-quants, tq1_0/tq2_0 -> q8_K, f16 -> f16, bf16 -> bf16, f32 -> f32). The scalar
 *   kernels do the same integer arithmetic per block as llama.cpp (products of
 *   small integers summed exactly, then one float multiply by the block
 *   scales; K-quant mins through the q8_K bsums) so that our logits track
 *   llama.cpp's. SIMD kernels in kern_*.c must reproduce these integer sums;
 *   only the float accumulation order may differ.
 * - Activation quantizers (q8_0, q8_1, q8_K) round x * (127 / amax) to
 *   nearest-even, the operation SIMD code does natively, so the SIMD versions
 *   are bit-identical to these and the per-ISA tests can demand equality.
 * - MXFP4, NVFP4, Q1_0, Q2_0, TQ1_0 and TQ2_0 quantize exactly as ggml's reference quantizers
 *   (quantize_row_*_ref), so files mkmodel writes hold what llama.cpp would.
 * - The other weight quantizers (used by tools/mkmodel to make test models) are simpler
 *   than llama.cpp's: per sub-block a small search over candidate scales with
 *   a least-squares refit, then the super-block scales are quantized and the
 *   values re-quantized against the scales the decoder will actually see.
 * - quant_init picks the best ISA once (pthread_once), capped by the
 *   environment variable DELTAFIN_ISA (tables above the cap are not built:
 *   init_tables). Each ISA table is the scalar table
 *   overwritten by the ISA's fill function (see quant_isa.h).
 */
#include "quant.h"
#include "quant_bits.h"
#include "quant_isa.h"
#include "quant_grids.h"

#include <math.h>
#include <pthread.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <stdlib.h>
#include <string.h>

/* ---- block layout checks (byte-exact with ggml-common.h) ---- */
_Static_assert(sizeof(block_q4_0) == 2 + QK4_0 / 2, "block_q4_0 size");
_Static_assert(sizeof(block_q4_1) == 4 + QK4_1 / 2, "block_q4_1 size");
_Static_assert(sizeof(block_q5_0) == 2 + 4 + QK5_0 / 2, "block_q5_0 size");
_Static_assert(sizeof(block_q5_1) == 4 + 4 + QK5_1 / 2, "block_q5_1 size");
_Static_assert(sizeof(block_q8_0) == 2 + QK8_0, "block_q8_0 size");
_Static_assert(sizeof(block_q8_1) == 4 + QK8_1, "block_q8_1 size");
_Static_assert(sizeof(block_q2_K) == 4 + QK_K / 16 + QK_K / 4, "block_q2_K size");
_Static_assert(sizeof(block_q3_K) == 2 + QK_K / 4 + QK_K / 8 + 12, "block_q3_K size");
_Static_assert(sizeof(block_q4_K) == 4 + K_SCALE_SIZE + QK_K / 2, "block_q4_K size");
_Static_assert(sizeof(block_q5_K) == 4 + K_SCALE_SIZE + QK_K / 2 + QK_K / 8, "block_q5_K size");
_Static_assert(sizeof(block_q6_K) == 2 + QK_K / 16 + 3 * QK_K / 4, "block_q6_K size");
_Static_assert(sizeof(block_q8_K) == 4 + QK_K + QK_K / 16 * 2, "block_q8_K size");
_Static_assert(sizeof(block_mxfp4) == 1 + QK_MXFP4 / 2, "block_mxfp4 size");
_Static_assert(sizeof(block_q1_0) == 2 + QK1_0 / 8, "block_q1_0 size");
_Static_assert(sizeof(block_q2_0) == 2 + QK2_0 / 4, "block_q2_0 size");
_Static_assert(sizeof(block_iq4_nl) == 2 + QK4_NL / 2, "block_iq4_nl size");
_Static_assert(sizeof(block_iq4_xs) == 4 + QK_K / 64 + QK_K / 2, "block_iq4_xs size");
_Static_assert(sizeof(block_tq1_0) == 2 + QK_K / 64 + (QK_K - 4 * QK_K / 64) / 5, "block_tq1_0 size");
_Static_assert(sizeof(block_tq2_0) == 2 + QK_K / 4, "block_tq2_0 size");
_Static_assert(sizeof(block_nvfp4) == 36, "block_nvfp4 size");
_Static_assert(sizeof(block_iq2_xxs) == 66 && sizeof(block_iq2_xs) == 74 && sizeof(block_iq2_s) == 82, "iq2 sizes");
_Static_assert(sizeof(block_iq3_xxs) == 98 && sizeof(block_iq3_s) == 110, "iq3 sizes");
_Static_assert(sizeof(block_iq1_s) == 50 && sizeof(block_iq1_m) == 56, "iq1 sizes");
_Static_assert(sizeof(float) == 4 && sizeof(uint32_t) == 4, "32-bit float");

/* ---- half precision ---- */

float df_fp16_to_fp32(uint16_t h) { return quant_f16_to_f32(h); }

uint16_t df_fp32_to_fp16(float f) { return quant_f32_to_f16(f); }

float df_bf16_to_fp32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t df_fp32_to_bf16(float f) {
    uint32_t x = f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}


/* ======================================================================
 * Float types
 * ====================================================================== */

/* Copy n floats. */
static void f32_to_float(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }
static void f32_from_float(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

/* Dot of two float rows, accumulated in double (the reference). */
static void f32_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const float *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
    *out = (float)s;
}

static void f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = H2F(s[i]);
}
static void f16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = F2H(src[i]);
}
/* f16 x f16: each product is exact in float; summed in double. */
static void f16_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const uint16_t *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(H2F(a[i]) * H2F(b[i]));
    *out = (float)s;
}

/* Attention helpers on cached f32/f16 rows (see quant.h): plain loops, the
 * reference the SIMD versions are tested against. */
static void f32_dot_rows(int64_t n, const float *q, const void *rows, size_t stride, int nr, float *out) {
    for (int j = 0; j < nr; j++) {
        const float *r = (const float *)(const void *)((const uint8_t *)rows + (size_t)j * stride);
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++) s += q[i] * r[i];
        out[j] = s;
    }
}
static void f16_dot_rows(int64_t n, const float *q, const void *rows, size_t stride, int nr, float *out) {
    for (int j = 0; j < nr; j++) {
        const uint16_t *r = (const uint16_t *)(const void *)((const uint8_t *)rows + (size_t)j * stride);
        float s = 0.0f;
        for (int64_t i = 0; i < n; i++) s += q[i] * H2F(r[i]);
        out[j] = s;
    }
}
static void f32_axpy_rows(int64_t n, const float *a, const void *rows, size_t stride, int nr, float *y) {
    for (int j = 0; j < nr; j++) {
        const float *r = (const float *)(const void *)((const uint8_t *)rows + (size_t)j * stride);
        for (int64_t i = 0; i < n; i++) y[i] += a[j] * r[i];
    }
}
static void f16_axpy_rows(int64_t n, const float *a, const void *rows, size_t stride, int nr, float *y) {
    for (int j = 0; j < nr; j++) {
        const uint16_t *r = (const uint16_t *)(const void *)((const uint8_t *)rows + (size_t)j * stride);
        for (int64_t i = 0; i < n; i++) y[i] += a[j] * H2F(r[i]);
    }
}
static float f32_exp_sum(float *x, int64_t n, float sub) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - sub);
        sum += x[i];
    }
    return (float)sum;
}
static void f32_swiglu(float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float g = a[i];
        a[i] = g / (1.0f + expf(-g)) * (b ? b[i] : 1.0f);
    }
}
/* SiTU as llama.cpp computes it (libm tanhf and expf, ggml's order of operations). */
static void f32_situ(float *a, const float *b, int64_t n, float beta, float lb) {
    const float ib = 1.0f / beta, ilb = lb > 0.0f ? 1.0f / lb : 0.0f;
    for (int64_t i = 0; i < n; i++) {
        const float g = a[i];
        float act = tanhf(g * ib) * beta;
        act = act * (1.0f / (1.0f + expf(-g)));
        const float u = lb > 0.0f ? tanhf(b[i] * ilb) * lb : b[i];
        a[i] = act * u;
    }
}

static void bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = df_bf16_to_fp32(s[i]);
}
static void bf16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = df_fp32_to_bf16(src[i]);
}
static void bf16_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const uint16_t *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(df_bf16_to_fp32(a[i]) * df_bf16_to_fp32(b[i]));
    *out = (float)s;
}

/* ======================================================================
 * Weight-quantizer helpers (used only by from_float of weight types)
 * ====================================================================== */

/* Fit x[0..n) ~= s * L[i] with integer L in [-nmax, nmax-1]: the element of
 * largest magnitude is aimed at -nmax (the side with the extra level), a few
 * nearby scales are tried and the best least-squares scale kept. Returns s
 * (may be negative; 0 for an all-zero input). */
static float fit_sym(const float *x, int n, int nmax, int8_t *L) {
    float amax = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        if (a > amax) { amax = a; mx = x[i]; }
    }
    if (!(amax > 1e-30f)) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float best_s = 0, best_gain = -1;
    int8_t tmp[256];
    for (int k = -4; k <= 4; k++) {
        float iscale = -((float)nmax + 0.125f * (float)k) / mx;
        double sxl = 0, sll = 0;
        for (int i = 0; i < n; i++) {
            int l = qclamp(iscale * x[i], -nmax, nmax - 1);
            tmp[i] = (int8_t)l;
            sxl += (double)x[i] * l;
            sll += (double)l * l;
        }
        /* residual = sum x^2 - sxl^2/sll, so maximize sxl^2/sll */
        if (sll > 0 && sxl * sxl / sll > best_gain) {
            best_gain = sxl * sxl / sll;
            best_s = (float)(sxl / sll);
            memcpy(L, tmp, (size_t)n);
        }
    }
    return best_s;
}

/* Fit x[0..n) ~= s * L[i] + o with integer L in [0, nmax] and s >= 0. With
 * allow_pos == 0 the offset is forced <= 0 (K-quants store -dmin*m, m >= 0).
 * Tries a few grid spacings, refits (s, o) by least squares for each, keeps
 * the best. Returns s, writes o and L. */
static float fit_affine(const float *x, int n, int nmax, int allow_pos, uint8_t *L, float *o_out) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < lo) lo = x[i];
        if (x[i] > hi) hi = x[i];
    }
    if (!allow_pos && lo > 0) lo = 0;
    if (!(hi > lo)) { /* constant block */
        memset(L, 0, (size_t)n);
        *o_out = lo;
        return 0.0f;
    }
    float best_err = INFINITY, best_s = (hi - lo) / (float)nmax, best_o = lo;
    uint8_t tmp[256];
    for (int k = -6; k <= 4; k++) {
        float iscale = ((float)nmax + 0.1f * (float)k) / (hi - lo);
        double sl = 0, sll = 0, sx = 0, sxl = 0;
        for (int i = 0; i < n; i++) {
            int l = qclamp((x[i] - lo) * iscale, 0, nmax);
            tmp[i] = (uint8_t)l;
            sl += l; sll += (double)l * l; sx += x[i]; sxl += (double)x[i] * l;
        }
        double det = n * sll - sl * sl;
        if (det <= 0) continue;
        double s = (n * sxl - sx * sl) / det;
        double o = (sll * sx - sl * sxl) / det;
        if (!allow_pos && o > 0) { o = 0; s = sxl / sll; }
        if (s <= 0) continue;
        double err = 0;
        for (int i = 0; i < n; i++) {
            double e = s * tmp[i] + o - x[i];
            err += e * e;
        }
        if (err < best_err) {
            best_err = (float)err; best_s = (float)s; best_o = (float)o;
            memcpy(L, tmp, (size_t)n);
        }
    }
    if (!(best_err < INFINITY)) { /* no candidate fit: plain min/max grid */
        for (int i = 0; i < n; i++) L[i] = (uint8_t)qclamp((x[i] - lo) / best_s, 0, nmax);
    }
    *o_out = best_o;
    return best_s;
}

/* ======================================================================
 * Q4_0: 32 elements, d (f16), 16 bytes of nibbles.
 * Element j (j < 16) is the low nibble of qs[j], element j+16 the high one.
 * value = d * (q - 8).
 * ====================================================================== */

static void q4_0_to_float(const void *src, float *dst, int64_t n) {
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        float d = H2F(b[i].d);
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)((b[i].qs[j] & 0xF) - 8);
            dst[j + 16] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

static void q4_0_from_float(const float *src, void *dst, int64_t n) {
    block_q4_0 *b = dst;
    int8_t L[QK4_0];
    for (int64_t i = 0; i < n / QK4_0; i++, src += QK4_0) {
        float s = fit_sym(src, QK4_0, 8, L);
        b[i].d = F2H(s);
        float d = H2F(b[i].d);
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < 16; j++) {
            int a = qclamp(src[j] * id, -8, 7) + 8, c = qclamp(src[j + 16] * id, -8, 7) + 8;
            b[i].qs[j] = (uint8_t)(a | (c << 4));
        }
    }
}

static void q4_0_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q4_0 *a = w;
    const block_q8_0 *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        int s = 0;
        for (int j = 0; j < 16; j++) {
            s += ((a[i].qs[j] & 0xF) - 8) * b[i].qs[j];
            s += ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
        }
        sum += (float)s * (H2F(a[i].d) * H2F(b[i].d));
    }
    *out = sum;
}

/* ======================================================================
 * Q4_1: like Q4_0 but unsigned q with an offset: value = d * q + m.
 * ====================================================================== */

static void q4_1_to_float(const void *src, float *dst, int64_t n) {
    const block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_1; i++, dst += QK4_1) {
        float d = H2F(b[i].d), m = H2F(b[i].m);
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)(b[i].qs[j] & 0xF) + m;
            dst[j + 16] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

static void q4_1_from_float(const float *src, void *dst, int64_t n) {
    block_q4_1 *b = dst;
    uint8_t L[QK4_1];
    for (int64_t i = 0; i < n / QK4_1; i++, src += QK4_1) {
        float o;
        float s = fit_affine(src, QK4_1, 15, 1, L, &o);
        b[i].d = F2H(s);
        b[i].m = F2H(o);
        float d = H2F(b[i].d), m = H2F(b[i].m);
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int j = 0; j < 16; j++) {
            int a = qclamp((src[j] - m) * id, 0, 15), c = qclamp((src[j + 16] - m) * id, 0, 15);
            b[i].qs[j] = (uint8_t)(a | (c << 4));
        }
    }
}

static void q4_1_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q4_1 *a = w;
    const block_q8_1 *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        int s = 0;
        for (int j = 0; j < 16; j++) {
            s += (a[i].qs[j] & 0xF) * b[i].qs[j];
            s += (a[i].qs[j] >> 4) * b[i].qs[j + 16];
        }
        sum += (H2F(a[i].d) * H2F(b[i].d)) * (float)s + H2F(a[i].m) * H2F(b[i].s);
    }
    *out = sum;
}

/* ======================================================================
 * Q5_0: Q4_0 plus a fifth bit: bit j of the little-endian 32-bit qh is the
 * high bit of element j. value = d * (q - 16).
 * ====================================================================== */

static inline uint32_t load_qh(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

static void q5_0_to_float(const void *src, float *dst, int64_t n) {
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, dst += QK5_0) {
        float d = H2F(b[i].d);
        uint32_t qh = load_qh(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int lo = (b[i].qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
            int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            dst[j] = d * (float)(lo - 16);
            dst[j + 16] = d * (float)(hi - 16);
        }
    }
}

static void q5_0_from_float(const float *src, void *dst, int64_t n) {
    block_q5_0 *b = dst;
    int8_t L[QK5_0];
    for (int64_t i = 0; i < n / QK5_0; i++, src += QK5_0) {
        float s = fit_sym(src, QK5_0, 16, L);
        b[i].d = F2H(s);
        float d = H2F(b[i].d);
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int a = qclamp(src[j] * id, -16, 15) + 16, c = qclamp(src[j + 16] * id, -16, 15) + 16;
            b[i].qs[j] = (uint8_t)((a & 0xF) | ((c & 0xF) << 4));
            qh |= (uint32_t)(a >> 4) << j;
            qh |= (uint32_t)(c >> 4) << (j + 16);
        }
        memcpy(b[i].qh, &qh, 4);
    }
}

static void q5_0_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q5_0 *a = w;
    const block_q8_0 *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        uint32_t qh = load_qh(a[i].qh);
        int s = 0;
        for (int j = 0; j < 16; j++) {
            int lo = ((a[i].qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4)) - 16;
            int hi = ((a[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4)) - 16;
            s += lo * b[i].qs[j] + hi * b[i].qs[j + 16];
        }
        sum += (H2F(a[i].d) * H2F(b[i].d)) * (float)s;
    }
    *out = sum;
}

/* ======================================================================
 * Q5_1: Q4_1 plus the fifth bit as in Q5_0. value = d * q + m.
 * ====================================================================== */

static void q5_1_to_float(const void *src, float *dst, int64_t n) {
    const block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK5_1; i++, dst += QK5_1) {
        float d = H2F(b[i].d), m = H2F(b[i].m);
        uint32_t qh = load_qh(b[i].qh);
        for (int j = 0; j < 16; j++) {
            int lo = (b[i].qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
            int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            dst[j] = d * (float)lo + m;
            dst[j + 16] = d * (float)hi + m;
        }
    }
}

static void q5_1_from_float(const float *src, void *dst, int64_t n) {
    block_q5_1 *b = dst;
    uint8_t L[QK5_1];
    for (int64_t i = 0; i < n / QK5_1; i++, src += QK5_1) {
        float o;
        float s = fit_affine(src, QK5_1, 31, 1, L, &o);
        b[i].d = F2H(s);
        b[i].m = F2H(o);
        float d = H2F(b[i].d), m = H2F(b[i].m);
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int a = qclamp((src[j] - m) * id, 0, 31), c = qclamp((src[j + 16] - m) * id, 0, 31);
            b[i].qs[j] = (uint8_t)((a & 0xF) | ((c & 0xF) << 4));
            qh |= (uint32_t)(a >> 4) << j;
            qh |= (uint32_t)(c >> 4) << (j + 16);
        }
        memcpy(b[i].qh, &qh, 4);
    }
}

static void q5_1_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q5_1 *a = w;
    const block_q8_1 *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        uint32_t qh = load_qh(a[i].qh);
        int s = 0;
        for (int j = 0; j < 16; j++) {
            int lo = (a[i].qs[j] & 0xF) | (int)(((qh >> j) & 1u) << 4);
            int hi = (a[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1u) << 4);
            s += lo * b[i].qs[j] + hi * b[i].qs[j + 16];
        }
        sum += (H2F(a[i].d) * H2F(b[i].d)) * (float)s + H2F(a[i].m) * H2F(b[i].s);
    }
    *out = sum;
}

/* ======================================================================
 * Q8_0: 32 int8 with an f16 scale. Also the activation format for
 * q4_0/q5_0/q8_0. Quantizer: d = amax/127, q = rne(x * (127/amax)).
 * ====================================================================== */

static void q8_0_to_float(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        float d = H2F(b[i].d);
        for (int j = 0; j < QK8_0; j++) dst[j] = d * (float)b[i].qs[j];
    }
}

static void q8_0_from_float(const float *src, void *dst, int64_t n) {
    block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, src += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(src[j]));
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        b[i].d = F2H(amax / 127.0f);
        for (int j = 0; j < QK8_0; j++) b[i].qs[j] = (int8_t)qclamp(src[j] * id, -127, 127);
    }
}

static void q8_0_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q8_0 *a = w, *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int s = 0;
        for (int j = 0; j < QK8_0; j++) s += a[i].qs[j] * b[i].qs[j];
        sum += (float)s * (H2F(a[i].d) * H2F(b[i].d));
    }
    *out = sum;
}

/* ======================================================================
 * Q8_1: Q8_0 plus s = d * sum(q) (f16), the activation format for
 * q4_1/q5_1 (the weight offset m multiplies s).
 * ====================================================================== */

static void q8_1_to_float(const void *src, float *dst, int64_t n) {
    const block_q8_1 *b = src;
    for (int64_t i = 0; i < n / QK8_1; i++, dst += QK8_1) {
        float d = H2F(b[i].d);
        for (int j = 0; j < QK8_1; j++) dst[j] = d * (float)b[i].qs[j];
    }
}

static void q8_1_from_float(const float *src, void *dst, int64_t n) {
    block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK8_1; i++, src += QK8_1) {
        float amax = 0;
        for (int j = 0; j < QK8_1; j++) amax = fmaxf(amax, fabsf(src[j]));
        float d = amax / 127.0f;
        float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_1; j++) {
            int q = qclamp(src[j] * id, -127, 127);
            b[i].qs[j] = (int8_t)q;
            sum += q;
        }
        b[i].d = F2H(d);
        b[i].s = F2H(d * (float)sum);
    }
}

static void q8_1_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q8_1 *a = w, *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        int s = 0;
        for (int j = 0; j < QK8_1; j++) s += a[i].qs[j] * b[i].qs[j];
        sum += (float)s * (H2F(a[i].d) * H2F(b[i].d));
    }
    *out = sum;
}

/* ======================================================================
 * Q8_K: 256 int8 with a float scale and 16 partial sums (bsums[j] = sum of
 * qs[16j..16j+15]); the activation format of every K-quant. The element of
 * largest magnitude maps to -127 exactly.
 * ====================================================================== */

static void q8_K_to_float(const void *src, float *dst, int64_t n) {
    const block_q8_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K)
        for (int j = 0; j < QK_K; j++) dst[j] = b[i].d * (float)b[i].qs[j];
}

static void q8_K_from_float(const float *src, void *dst, int64_t n) {
    block_q8_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float amax = 0, mx = 0;
        for (int j = 0; j < QK_K; j++) {
            float a = fabsf(src[j]);
            if (a > amax) { amax = a; mx = src[j]; }
        }
        if (amax == 0.0f) {
            memset(&b[i], 0, sizeof b[i]);
            continue;
        }
        float iscale = -127.0f / mx;
        for (int j = 0; j < QK_K; j++) b[i].qs[j] = (int8_t)qclamp(iscale * src[j], -127, 127);
        for (int j = 0; j < QK_K / 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += b[i].qs[16 * j + l];
            b[i].bsums[j] = (int16_t)s;
        }
        b[i].d = 1.0f / iscale;
    }
}

static void q8_K_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q8_K *a = w, *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int s = 0;
        for (int j = 0; j < QK_K; j++) s += a[i].qs[j] * b[i].qs[j];
        sum += (float)s * (a[i].d * b[i].d);
    }
    *out = sum;
}

/* ======================================================================
 * Q2_K: 256 elements in 16 sub-blocks of 16. scales[j]: low nibble = scale,
 * high nibble = min of sub-block j. Element e = 128h + 32g + l (h 0..1,
 * g 0..3, l 0..31) is bits 2g..2g+1 of qs[32h + l].
 * value = d * sc * q - dmin * m.
 * ====================================================================== */

static void q2_K_to_float(const void *src, float *dst, int64_t n) {
    const block_q2_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        float d = H2F(b[i].d), dmin = H2F(b[i].dmin);
        for (int e = 0; e < QK_K; e++) {
            int h = e >> 7, g = (e >> 5) & 3, l = e & 31;
            int q = (b[i].qs[32 * h + l] >> (2 * g)) & 3;
            uint8_t sc = b[i].scales[e >> 4];
            dst[e] = d * (float)(sc & 0xF) * (float)q - dmin * (float)(sc >> 4);
        }
    }
}

static void q2_K_from_float(const float *src, void *dst, int64_t n) {
    block_q2_K *b = dst;
    uint8_t L[QK_K];
    float sc[16], mn[16];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float smax = 0, mmax = 0;
        for (int j = 0; j < 16; j++) {
            float o;
            sc[j] = fit_affine(src + 16 * j, 16, 3, 0, L + 16 * j, &o);
            mn[j] = -o;
            if (sc[j] > smax) smax = sc[j];
            if (mn[j] > mmax) mmax = mn[j];
        }
        b[i].d = F2H(smax / 15.0f);
        b[i].dmin = F2H(mmax / 15.0f);
        float d = H2F(b[i].d), dmin = H2F(b[i].dmin);
        for (int j = 0; j < 16; j++) {
            int qs = d > 0 ? qclamp(sc[j] / d, 0, 15) : 0;
            int qm = dmin > 0 ? qclamp(mn[j] / dmin, 0, 15) : 0;
            b[i].scales[j] = (uint8_t)(qs | (qm << 4));
            float ds = d * (float)qs, dm = dmin * (float)qm;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = ds > 0 ? (uint8_t)qclamp((src[16 * j + l] + dm) / ds, 0, 3) : 0;
        }
        memset(b[i].qs, 0, sizeof b[i].qs);
        for (int e = 0; e < QK_K; e++) {
            int h = e >> 7, g = (e >> 5) & 3, l = e & 31;
            b[i].qs[32 * h + l] |= (uint8_t)(L[e] << (2 * g));
        }
    }
}

static void q2_K_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q2_K *a = w;
    const block_q8_K *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int summ = 0;
        for (int j = 0; j < 16; j++) summ += b[i].bsums[j] * (a[i].scales[j] >> 4);
        int isum = 0;
        for (int j = 0; j < 16; j++) { /* sub-block j = elements 16j..16j+15 */
            int h = j >> 3, g = (j >> 1) & 3, l0 = (j & 1) * 16;
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += b[i].qs[16 * j + l] * ((a[i].qs[32 * h + l0 + l] >> (2 * g)) & 3);
            isum += (a[i].scales[j] & 0xF) * s;
        }
        float dall = b[i].d * H2F(a[i].d), dmin = b[i].d * H2F(a[i].dmin);
        sum += dall * (float)isum - dmin * (float)summ;
    }
    *out = sum;
}

/* ======================================================================
 * Q3_K: 256 elements, 16 sub-blocks of 16 with signed 6-bit scales (packed
 * in 12 bytes, see quant_k3_scales). Element e = 128h + 32g + l: low two bits
 * are bits 2g..2g+1 of qs[32h + l]; bit (4h + g) of hmask[l] set means the
 * value is q, clear means q - 4. value = d * sc * q3.
 * ====================================================================== */

static inline int q3_K_get(const block_q3_K *b, int e) {
    int h = e >> 7, g = (e >> 5) & 3, l = e & 31;
    int q = (b->qs[32 * h + l] >> (2 * g)) & 3;
    return q - (((b->hmask[l] >> (4 * h + g)) & 1) ? 0 : 4);
}

static void q3_K_to_float(const void *src, float *dst, int64_t n) {
    const block_q3_K *b = src;
    int8_t sc[16];
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        float d = H2F(b[i].d);
        quant_k3_scales(b[i].scales, sc);
        for (int e = 0; e < QK_K; e++) dst[e] = d * (float)sc[e >> 4] * (float)q3_K_get(&b[i], e);
    }
}

static void q3_K_from_float(const float *src, void *dst, int64_t n) {
    block_q3_K *b = dst;
    int8_t L[QK_K];
    float sc[16];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float amax = 0, smax = 0;
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_sym(src + 16 * j, 16, 4, L + 16 * j);
            if (fabsf(sc[j]) > amax) { amax = fabsf(sc[j]); smax = sc[j]; }
        }
        memset(b[i].scales, 0, 12);
        memset(b[i].hmask, 0, sizeof b[i].hmask);
        memset(b[i].qs, 0, sizeof b[i].qs);
        b[i].d = F2H(smax / -32.0f);
        float d = H2F(b[i].d);
        for (int j = 0; j < 16; j++) {
            int q = d != 0.0f ? qclamp(sc[j] / d, -32, 31) : 0;
            int u = q + 32; /* 6 bits: low 4 in scales[0..7], high 2 in scales[8..11] */
            if (j < 8) b[i].scales[j] |= (uint8_t)(u & 0xF);
            else b[i].scales[j - 8] |= (uint8_t)((u & 0xF) << 4);
            b[i].scales[8 + (j & 3)] |= (uint8_t)((u >> 4) << (2 * (j >> 2)));
            float ds = d * (float)q;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(ds != 0.0f ? qclamp(src[16 * j + l] / ds, -4, 3) : 0);
        }
        for (int e = 0; e < QK_K; e++) {
            int h = e >> 7, g = (e >> 5) & 3, l = e & 31;
            int v = L[e] + 4; /* 0..7: bit 2 -> hmask (set means no -4) */
            b[i].qs[32 * h + l] |= (uint8_t)((v & 3) << (2 * g));
            if (v & 4) b[i].hmask[l] |= (uint8_t)(1u << (4 * h + g));
        }
    }
}

static void q3_K_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q3_K *a = w;
    const block_q8_K *b = x;
    int8_t sc[16];
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        quant_k3_scales(a[i].scales, sc);
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += b[i].qs[16 * j + l] * q3_K_get(&a[i], 16 * j + l);
            isum += sc[j] * s;
        }
        sum += (H2F(a[i].d) * b[i].d) * (float)isum;
    }
    *out = sum;
}

/* ======================================================================
 * Q4_K: 256 elements, 8 sub-blocks of 32 with 6-bit scale and min (packed
 * in 12 bytes, see quant_k4_scale_min). Element e = 64c + 32t + l is the low
 * (t = 0) or high (t = 1) nibble of qs[32c + l]. value = d*sc*q - dmin*m.
 * ====================================================================== */

static void q4_K_to_float(const void *src, float *dst, int64_t n) {
    const block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        float d = H2F(b[i].d), dmin = H2F(b[i].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_k4_scale_min(b[i].scales, j, &sc, &m);
            float ds = d * (float)sc, dm = dmin * (float)m;
            const uint8_t *q = b[i].qs + 32 * (j >> 1);
            int sh = 4 * (j & 1);
            for (int l = 0; l < 32; l++) dst[32 * j + l] = ds * (float)((q[l] >> sh) & 0xF) - dm;
        }
    }
}

/* Pack 8 six-bit scales and mins into the 12-byte K-quant layout. */
static void pack_k4_scales(uint8_t *s, const uint8_t *sc, const uint8_t *m) {
    memset(s, 0, K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] |= sc[j];
            s[j + 4] |= m[j];
        } else {
            s[j + 4] = (uint8_t)((sc[j] & 0xF) | ((m[j] & 0xF) << 4));
            s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
            s[j] |= (uint8_t)((m[j] >> 4) << 6);
        }
    }
}

/* Shared by q4_K (nmax 15) and q5_K (nmax 31): per-sub-block fits, 6-bit
 * super-block quantization of scales and mins, final levels in L[256]. */
static void quantize_k45(const float *x, int nmax, uint16_t *dh, uint16_t *dminh, uint8_t *scales,
                         uint8_t *L) {
    float sc[8], mn[8], smax = 0, mmax = 0;
    for (int j = 0; j < 8; j++) {
        float o;
        sc[j] = fit_affine(x + 32 * j, 32, nmax, 0, L + 32 * j, &o);
        mn[j] = -o;
        if (sc[j] > smax) smax = sc[j];
        if (mn[j] > mmax) mmax = mn[j];
    }
    *dh = F2H(smax / 63.0f);
    *dminh = F2H(mmax / 63.0f);
    float d = H2F(*dh), dmin = H2F(*dminh);
    uint8_t qs[8], qm[8];
    for (int j = 0; j < 8; j++) {
        qs[j] = (uint8_t)(d > 0 ? qclamp(sc[j] / d, 0, 63) : 0);
        qm[j] = (uint8_t)(dmin > 0 ? qclamp(mn[j] / dmin, 0, 63) : 0);
        float ds = d * (float)qs[j], dm = dmin * (float)qm[j];
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)(ds > 0 ? qclamp((x[32 * j + l] + dm) / ds, 0, nmax) : 0);
    }
    pack_k4_scales(scales, qs, qm);
}

static void q4_K_from_float(const float *src, void *dst, int64_t n) {
    block_q4_K *b = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        quantize_k45(src, 15, &b[i].d, &b[i].dmin, b[i].scales, L);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

static void q4_K_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q4_K *a = w;
    const block_q8_K *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_k4_scale_min(a[i].scales, j, &sc, &m);
            const uint8_t *q = a[i].qs + 32 * (j >> 1);
            const int8_t *y = b[i].qs + 32 * j;
            int sh = 4 * (j & 1), s = 0;
            for (int l = 0; l < 32; l++) s += y[l] * ((q[l] >> sh) & 0xF);
            isum += sc * s;
            summ += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        sum += (H2F(a[i].d) * b[i].d) * (float)isum - (H2F(a[i].dmin) * b[i].d) * (float)summ;
    }
    *out = sum;
}

/* ======================================================================
 * Q5_K: Q4_K plus high bits: element e = 64c + 32t + l gets +16 when bit
 * (2c + t) of qh[l] is set.
 * ====================================================================== */

static void q5_K_to_float(const void *src, float *dst, int64_t n) {
    const block_q5_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        float d = H2F(b[i].d), dmin = H2F(b[i].dmin);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_k4_scale_min(b[i].scales, j, &sc, &m);
            float ds = d * (float)sc, dm = dmin * (float)m;
            const uint8_t *q = b[i].qs + 32 * (j >> 1);
            int sh = 4 * (j & 1);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> sh) & 0xF) | (((b[i].qh[l] >> j) & 1) << 4);
                dst[32 * j + l] = ds * (float)v - dm;
            }
        }
    }
}

static void q5_K_from_float(const float *src, void *dst, int64_t n) {
    block_q5_K *b = dst;
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        quantize_k45(src, 31, &b[i].d, &b[i].dmin, b[i].scales, L);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                b[i].qs[32 * c + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                b[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
    }
}

static void q5_K_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q5_K *a = w;
    const block_q8_K *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_k4_scale_min(a[i].scales, j, &sc, &m);
            const uint8_t *q = a[i].qs + 32 * (j >> 1);
            const int8_t *y = b[i].qs + 32 * j;
            int sh = 4 * (j & 1), s = 0;
            for (int l = 0; l < 32; l++) s += y[l] * (((q[l] >> sh) & 0xF) | (((a[i].qh[l] >> j) & 1) << 4));
            isum += sc * s;
            summ += m * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        sum += (H2F(a[i].d) * b[i].d) * (float)isum - (H2F(a[i].dmin) * b[i].d) * (float)summ;
    }
    *out = sum;
}

/* ======================================================================
 * Q6_K: 256 elements, 16 sub-blocks of 16 with int8 scales. Element
 * e = 128h + 32g + l: low nibble from ql[64h + 32(g&1) + l] (low nibble for
 * g < 2, high for g >= 2), high two bits = bits 2g..2g+1 of qh[32h + l].
 * value = d * sc * (q - 32).
 * ====================================================================== */

static inline int q6_K_get(const block_q6_K *b, int e) {
    int h = e >> 7, g = (e >> 5) & 3, l = e & 31;
    int lo = (b->ql[64 * h + 32 * (g & 1) + l] >> (4 * (g >> 1))) & 0xF;
    int hi = (b->qh[32 * h + l] >> (2 * g)) & 3;
    return (lo | (hi << 4)) - 32;
}

static void q6_K_to_float(const void *src, float *dst, int64_t n) {
    const block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        float d = H2F(b[i].d);
        for (int e = 0; e < QK_K; e++) dst[e] = d * (float)b[i].scales[e >> 4] * (float)q6_K_get(&b[i], e);
    }
}

static void q6_K_from_float(const float *src, void *dst, int64_t n) {
    block_q6_K *b = dst;
    int8_t L[QK_K];
    float sc[16];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float amax = 0, smax = 0;
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_sym(src + 16 * j, 16, 32, L + 16 * j);
            if (fabsf(sc[j]) > amax) { amax = fabsf(sc[j]); smax = sc[j]; }
        }
        b[i].d = F2H(smax / -128.0f);
        float d = H2F(b[i].d);
        for (int j = 0; j < 16; j++) {
            int q = d != 0.0f ? qclamp(sc[j] / d, -128, 127) : 0;
            b[i].scales[j] = (int8_t)q;
            float ds = d * (float)q;
            for (int l = 0; l < 16; l++)
                L[16 * j + l] = (int8_t)(ds != 0.0f ? qclamp(src[16 * j + l] / ds, -32, 31) : 0);
        }
        memset(b[i].ql, 0, sizeof b[i].ql);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int e = 0; e < QK_K; e++) {
            int h = e >> 7, g = (e >> 5) & 3, l = e & 31;
            int v = L[e] + 32;
            b[i].ql[64 * h + 32 * (g & 1) + l] |= (uint8_t)((v & 0xF) << (4 * (g >> 1)));
            b[i].qh[32 * h + l] |= (uint8_t)((v >> 4) << (2 * g));
        }
    }
}

static void q6_K_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_q6_K *a = w;
    const block_q8_K *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++) s += b[i].qs[16 * j + l] * q6_K_get(&a[i], 16 * j + l);
            isum += a[i].scales[j] * s;
        }
        sum += (H2F(a[i].d) * b[i].d) * (float)isum;
    }
    *out = sum;
}

/* ======================================================================
 * The table
 * ====================================================================== */

#define SUP(nm, bl, sz, vt, pfx) \
    { nm, bl, sz, 1, vt, pfx##_to_float, pfx##_from_float, pfx##_vec_dot, NULL, NULL, NULL, NULL, NULL, NULL }
#define UNSUP(nm, bl, sz) { nm, bl, sz, 0, -1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL }

/* The scalar reference table; the i-quants' entries are quant_iq.c's, the microscaled and 1-2-bit types'
 * quant_lowbit.c's (quant_iq_fill, quant_lowbit_fill: at init_tables). */
static quant_traits ref_table[DF_TYPE_COUNT] = {
    [DF_TYPE_F32] = {"f32", 1, 4, 1, DF_TYPE_F32, f32_to_float, f32_from_float, f32_vec_dot, NULL, f32_dot_rows,
                     f32_axpy_rows, f32_exp_sum, f32_swiglu, f32_situ},
    [DF_TYPE_F16] = {"f16", 1, 2, 1, DF_TYPE_F16, f16_to_float, f16_from_float, f16_vec_dot, NULL, f16_dot_rows,
                     f16_axpy_rows, NULL, NULL, NULL},
    [DF_TYPE_Q4_0] = SUP("q4_0", QK4_0, sizeof(block_q4_0), DF_TYPE_Q8_0, q4_0),
    [DF_TYPE_Q4_1] = SUP("q4_1", QK4_1, sizeof(block_q4_1), DF_TYPE_Q8_1, q4_1),
    [DF_TYPE_Q5_0] = SUP("q5_0", QK5_0, sizeof(block_q5_0), DF_TYPE_Q8_0, q5_0),
    [DF_TYPE_Q5_1] = SUP("q5_1", QK5_1, sizeof(block_q5_1), DF_TYPE_Q8_1, q5_1),
    [DF_TYPE_Q8_0] = SUP("q8_0", QK8_0, sizeof(block_q8_0), DF_TYPE_Q8_0, q8_0),
    [DF_TYPE_Q8_1] = SUP("q8_1", QK8_1, sizeof(block_q8_1), DF_TYPE_Q8_1, q8_1),
    [DF_TYPE_Q2_K] = SUP("q2_K", QK_K, sizeof(block_q2_K), DF_TYPE_Q8_K, q2_K),
    [DF_TYPE_Q3_K] = SUP("q3_K", QK_K, sizeof(block_q3_K), DF_TYPE_Q8_K, q3_K),
    [DF_TYPE_Q4_K] = SUP("q4_K", QK_K, sizeof(block_q4_K), DF_TYPE_Q8_K, q4_K),
    [DF_TYPE_Q5_K] = SUP("q5_K", QK_K, sizeof(block_q5_K), DF_TYPE_Q8_K, q5_K),
    [DF_TYPE_Q6_K] = SUP("q6_K", QK_K, sizeof(block_q6_K), DF_TYPE_Q8_K, q6_K),
    [DF_TYPE_Q8_K] = SUP("q8_K", QK_K, sizeof(block_q8_K), DF_TYPE_Q8_K, q8_K),
    [DF_TYPE_BF16] = SUP("bf16", 1, 2, DF_TYPE_BF16, bf16),
    /* known to ggml, not computed here (sizes from ggml-common.h) */
    [24] = UNSUP("i8", 1, 1),
    [25] = UNSUP("i16", 1, 2),
    [26] = UNSUP("i32", 1, 4),
    [27] = UNSUP("i64", 1, 8),
    [28] = UNSUP("f64", 1, 8),
    /* 4, 5, 31..33, 36..38: retired by ggml, left as holes (name NULL) */
};

static quant_traits isa_tables[QUANT_ISA_COUNT][DF_TYPE_COUNT];
static int isa_ok[QUANT_ISA_COUNT];
static const quant_traits *active = ref_table;
static int active_isa = QUANT_ISA_SCALAR;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
/* F16C through CPUID (leaf 1, ECX bit 29): not every compiler's
 * __builtin_cpu_supports knows the name. */
static int cpu_has_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c >> 29) & 1u;
}
#endif

/* The AMX table: the best other table plus the AMX gemms, on the tiles
 * when the CPU and the OS allow them (x86 with AVX-512), or on the
 * software model when DELTAFIN_AMX=model forces it (any machine; slow,
 * for testing the selection). DELTAFIN_AMX=off leaves it out. */
static void init_amx_table(int cap) {
    const char *env = getenv("DELTAFIN_AMX");
    if (env && !strcmp(env, "off")) return;
    const int model = env && !strcmp(env, "model");
    int base = QUANT_ISA_SCALAR;
    for (int isa = QUANT_ISA_AVX2; isa < QUANT_ISA_AMX; isa++)
        if (isa_ok[isa]) base = isa;
    int hw = 0;
#if defined(__x86_64__)
    hw = !model && cap > QUANT_ISA_AVX512 && isa_ok[QUANT_ISA_AVX512] && kern_amx_hw_available();
#endif
    if (!hw && !model) return;
    memcpy(isa_tables[QUANT_ISA_AMX], isa_tables[base], sizeof ref_table);
    /* forced: the hardware kernels' code on the model where it can run (AVX-512), else the plain helpers */
    kern_amx_fill(isa_tables[QUANT_ISA_AMX], model ? (isa_ok[QUANT_ISA_AVX512] ? 2 : 1) : 0);
    isa_ok[QUANT_ISA_AMX] = 1;
}

/* DELTAFIN_ISA: the highest tier this process may believe the CPU has. */
static int isa_cap(void) {
    const char *env = getenv("DELTAFIN_ISA");
    if (env && !strcmp(env, "scalar")) return QUANT_ISA_SCALAR;
    if (env && !strcmp(env, "avx2")) return QUANT_ISA_AVX2;
    if (env && !strcmp(env, "avx512")) return QUANT_ISA_AVX512;
    return QUANT_ISA_COUNT;
}

/* Build every table this CPU can run, up to the DELTAFIN_ISA cap, and pick
 * the active one. The cap makes the process behave as on a CPU without the
 * tiers above it: their tables are not built (quant_traits_isa answers NULL),
 * the AMX hardware is not used, and DELTAFIN_AMX=model builds its table on
 * the capped base, as it would on such a CPU (how an AVX-512 machine tests
 * the path an AVX2-only laptop runs; tests/run.sh). */
static void init_tables(void) {
    const int cap = isa_cap();
    quant_iq_fill(ref_table);
    quant_lowbit_fill(ref_table);
    memcpy(isa_tables[QUANT_ISA_SCALAR], ref_table, sizeof ref_table);
    isa_ok[QUANT_ISA_SCALAR] = 1;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (cap >= QUANT_ISA_AVX2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        cpu_has_f16c()) {
        memcpy(isa_tables[QUANT_ISA_AVX2], ref_table, sizeof ref_table);
        kern_avx2_fill(isa_tables[QUANT_ISA_AVX2]);
        isa_ok[QUANT_ISA_AVX2] = 1;
        if (cap >= QUANT_ISA_AVX512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx512vnni")) {
            memcpy(isa_tables[QUANT_ISA_AVX512], isa_tables[QUANT_ISA_AVX2], sizeof ref_table);
            kern_avx512_fill(isa_tables[QUANT_ISA_AVX512]);
            isa_ok[QUANT_ISA_AVX512] = 1;
        }
    }
#elif defined(__aarch64__)
    if (cap > QUANT_ISA_SCALAR) { /* on aarch64 only "scalar" changes anything */
        memcpy(isa_tables[QUANT_ISA_NEON], ref_table, sizeof ref_table);
        kern_neon_fill(isa_tables[QUANT_ISA_NEON]);
        isa_ok[QUANT_ISA_NEON] = 1;
    }
#endif
    init_amx_table(cap);
    int pick = QUANT_ISA_SCALAR;
    if (isa_ok[QUANT_ISA_AMX]) pick = QUANT_ISA_AMX;
    else if (isa_ok[QUANT_ISA_NEON]) pick = QUANT_ISA_NEON;
    else if (isa_ok[QUANT_ISA_AVX512]) pick = QUANT_ISA_AVX512;
    else if (isa_ok[QUANT_ISA_AVX2]) pick = QUANT_ISA_AVX2;
    active_isa = pick;
    active = isa_tables[pick];
}

void quant_init(void) { pthread_once(&init_once, init_tables); }

const quant_traits *quant_traits_get(int type) {
    if (type < 0 || type >= DF_TYPE_COUNT) return NULL;
    quant_init();
    return &active[type];
}

const quant_traits *quant_traits_ref(int type) {
    if (type < 0 || type >= DF_TYPE_COUNT) return NULL;
    quant_init(); /* the table is complete once quant_iq_fill and quant_lowbit_fill have run */
    return &ref_table[type];
}

const quant_traits *quant_traits_isa(int type, int isa) {
    if (type < 0 || type >= DF_TYPE_COUNT || isa < 0 || isa >= QUANT_ISA_COUNT) return NULL;
    quant_init();
    return isa_ok[isa] ? &isa_tables[isa][type] : NULL;
}

int quant_isa_available(int isa) {
    if (isa < 0 || isa >= QUANT_ISA_COUNT) return 0;
    quant_init();
    return isa_ok[isa];
}

const char *quant_isa_str(int isa) {
    static const char *const names[QUANT_ISA_COUNT] = {"scalar", "avx2", "avx512", "neon", "amx"};
    return (isa >= 0 && isa < QUANT_ISA_COUNT) ? names[isa] : "?";
}

const char *quant_isa_name(void) {
    quant_init();
    return quant_isa_str(active_isa);
}

size_t quant_row_size(int type, int64_t n) {
    const quant_traits *t = quant_traits_ref(type);
    if (!t || !t->name || t->blck <= 0 || n < 0 || n % t->blck != 0) return 0;
    size_t out;
    if (__builtin_mul_overflow((uint64_t)(n / t->blck), (uint64_t)t->type_size, &out)) return 0;
    return out;
}
