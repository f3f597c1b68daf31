/*
 * test_quant.c - tests of the tensor element types (src/types/quant.c) and of every
 * SIMD kernel set the running CPU can execute (src/types/kern_*.c).
 *
 * WHAT IS CHECKED, per supported type, per available ISA, at several row
 * sizes (one block, a few blocks, 768, 4096; odd lengths for the float types
 * so SIMD tails run):
 *  (0) activation quantizers (from_float) of the ISA produce the same bytes
 *      as the scalar reference (they are specified bit-identical);
 *  (1) to_float of the ISA equals the reference (to 1e-6 of the row's
 *      largest value, to allow a fused multiply-add in a SIMD dequantizer);
 *  (2) vec_dot of the ISA equals the scalar vec_dot to 1e-5 * sum|w_i x_i|;
 *  (3) the scalar vec_dot equals a float64 dot of the dequantized weights with
 *      the ORIGINAL float activations, within the error the activation format
 *      allows (derivation at act_error_bound);
 *  (4) quantize -> dequantize error of every type stays under a bound derived
 *      from the format's step size (derivation at the rt_bound table).
 * Golden tests pin the byte layout to ggml's: fixed bit patterns are decoded
 * and dotted and compared with checksums produced by ggml's own
 * dequantize_row_* and ggml_vec_dot_*_generic (printed by tests/ggml_golden.c);
 * for mxfp4/nvfp4/q1_0/q2_0/tq1_0/tq2_0, whose quantizers follow ggml's reference ones, the
 * quantized bytes of a fixed input are compared with ggml's by hash.
 * Half-precision conversion is tested exhaustively over all 65536 halves and
 * on the edge cases (ties, overflow, subnormals, inf, nan).
 *
 * THRESHOLD (2): the integer part of every SIMD kernel is exact, so SIMD and
 * scalar differ only in the order of float additions. A chain of k float
 * additions errs by at most k * 2^-24 * sum|terms|; the longest chain here is
 * about 135 (4101-element f32 rows over 32 lanes, or 128 blocks of 32), i.e.
 * <= 8.1e-6 * sum|terms| in the worst case and ~1e-6 typically. 1e-5 covers
 * it, while one wrong block (1/128 of the row) or one wrong nibble in a block
 * moves the result by ~1e-3..1e-2 of sum|terms|.
 */
#include "testutil.h"

#include "quant.h"
#include "quant_isa.h"
#include "golden_pattern.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------- */

static const int k_types[] = {
    DF_TYPE_F32, DF_TYPE_F16, DF_TYPE_BF16, DF_TYPE_Q4_0, DF_TYPE_Q4_1, DF_TYPE_Q5_0,
    DF_TYPE_Q5_1, DF_TYPE_Q8_0, DF_TYPE_Q8_1, DF_TYPE_Q2_K, DF_TYPE_Q3_K, DF_TYPE_Q4_K,
    DF_TYPE_Q5_K, DF_TYPE_Q6_K, DF_TYPE_Q8_K, DF_TYPE_MXFP4, DF_TYPE_Q1_0, DF_TYPE_Q2_0,
    DF_TYPE_IQ4_NL, DF_TYPE_IQ4_XS, DF_TYPE_TQ1_0, DF_TYPE_TQ2_0, DF_TYPE_IQ2_XXS, DF_TYPE_IQ2_XS,
    DF_TYPE_IQ2_S, DF_TYPE_IQ3_XXS, DF_TYPE_IQ3_S, DF_TYPE_IQ1_S, DF_TYPE_IQ1_M, DF_TYPE_NVFP4,
};
#define N_TYPES ((int)(sizeof k_types / sizeof k_types[0]))

/*
 * Round-trip bounds (check 4): relative RMS error sqrt(sum (x - x^)^2 / sum x^2)
 * for x uniform in [-1, 1) (mean square 1/3). A uniform quantizer with step D
 * errs uniformly in +-D/2, RMS D/sqrt(12), so the relative RMS is
 * (D/sqrt(12)) / (1/sqrt(3)) = D/2. The step of each format:
 *  q8_0/q8_1/q8_K: D = amax/127 ~ 1/127            -> 1/254  = 0.00394
 *  q4_0: D = amax/8 (largest element -> -8), E[amax of 32] = 32/33 -> 0.0606
 *  q5_0: D = amax/16                                 -> 0.0303
 *  q4_1: D = range/15, E[range of 32] = 2*31/33 = 1.879 -> 0.0626
 *  q5_1: D = range/31                                -> 0.0303
 *  q2_K: sub-blocks of 16, 4 levels, D = range/3, E[range of 16] = 1.765 -> 0.294
 *  q3_K: sub-blocks of 16, 8 levels, D = amax/4, E[amax of 16] = 16/17 -> 0.118
 *  q4_K: sub-blocks of 32, D = range/15               -> 0.0626
 *  q5_K: D = range/31                                 -> 0.0303
 *  q6_K: sub-blocks of 16, D = amax/32                -> 0.0147
 *  f16 / bf16: per-element relative rounding error <= 2^-11 / 2^-8.
 *  mxfp4 (ggml's quantizer): half scale d = 2^(floor(log2 amax) - 3), grid
 *    d * {0,1,2,3,4,6,8,12}; for amax ~ 1 (E[amax of 32] = 32/33) d = 1/16,
 *    so |x| in [0,16d). Mean square error in units of d^2 over the four
 *    quarters of that range: step 1 (1/12), step 2 (4/12), step 4 (16/12),
 *    and [12,16) clipped to 12 (16/3): 85/48; signal 256/3. Relative RMS
 *    sqrt((85/48)/(256/3)) = 0.1441 (smaller when amax sits lower in its
 *    octave: less clipping). No f16 scale (E8M0 is exact).
 *  nvfp4 (ggml's quantizer): per 16 elements the scale amax/6 (UE4M3, 3
 *    mantissa bits), grid (amax/6) * {0, .5, 1, 1.5, 2, 3, 4, 6}; for x
 *    uniform in [0, 6] units the cells (steps .5 x4, 1 x2, 2) give mean
 *    square error (4 * .125 + 2 + 8) / 12 / 6 = 0.146 against 12: 0.110.
 *  q1_0: value sign(x) * mean|x|; for uniform x the error is |x| - 1/2,
 *    variance 1/12 against mean square 1/3 -> 0.5, plus the f16 scale.
 *  q2_0: d = amax, levels {-d, 0, d} (ggml never emits 2d): step D = amax,
 *    E[amax of 64] = 64/65 -> 0.4923.
 *  tq1_0/tq2_0: the same ternary grid per 256: E[amax of 256] = 256/257
 *    -> 0.4981.
 *  iq4_nl: the largest element on the table's -127 end, so x/d is uniform
 *    in [-127, 127] against ggml's 16 non-linear levels; the mean square
 *    distance to the nearest level (integrated numerically, including the
 *    clipped [113, 127]) relative to 127^2/3 gives 0.0721 (0.0751 with the
 *    largest on the +113 end; the least-squares refit only lowers it).
 *  iq4_xs: the same per 32 elements, plus 6-bit sub-block scales (as q4_K).
 *  grid i-quants: the grids are small subsets of the product of their
 *    per-element levels, chosen by ggml for Gaussian-like weights, so there
 *    is no closed form; the nominal values are what our quantizer
 *    (src/types/quant.c: amax scales, nearest grid point) measures on this data:
 *    iq2_xxs 0.335, iq2_xs 0.315, iq2_s 0.242, iq3_xxs 0.205, iq3_s 0.133,
 *    iq1_s 0.453, iq1_m 0.417. For scale: with the unrestricted levels
 *    (iq2: 3 magnitudes and sign per element, step ~ amax/2.5) the formula
 *    above gives ~0.2; iq1's ternary levels give 0.5.
 * Each bound is the nominal value times 1.15 (clamped top level, 6-bit or
 * 4-bit quantization of the sub-block scales and mins, sampling spread of the
 * range over 4096 elements) plus 2^-11 for the f16 block scales. A quantizer
 * that misplaces elements or mis-scales a block errs by ~1 (relative).
 */
static double rt_bound(int type) {
    const double m = 1.15, h = 1.0 / 2048;
    switch (type) {
    case DF_TYPE_F32: return 0;
    case DF_TYPE_F16: return 1.0 / 2048;
    case DF_TYPE_BF16: return 1.0 / 256;
    case DF_TYPE_Q8_0: case DF_TYPE_Q8_1: return m / 254 + h;
    case DF_TYPE_Q8_K: return m / 254;
    case DF_TYPE_Q4_0: return m * 0.0606 + h;
    case DF_TYPE_Q5_0: return m * 0.0303 + h;
    case DF_TYPE_Q4_1: return m * 0.0626 + h;
    case DF_TYPE_Q5_1: return m * 0.0303 + h;
    case DF_TYPE_Q2_K: return m * 0.294 + h;
    case DF_TYPE_Q3_K: return m * 0.118 + h;
    case DF_TYPE_Q4_K: return m * 0.0626 + h;
    case DF_TYPE_Q5_K: return m * 0.0303 + h;
    case DF_TYPE_Q6_K: return m * 0.0147 + h;
    case DF_TYPE_MXFP4: return m * 0.1441;
    case DF_TYPE_Q1_0: return m * 0.5 + h;
    case DF_TYPE_Q2_0: return m * 0.4923 + h;
    case DF_TYPE_TQ1_0: case DF_TYPE_TQ2_0: return m * 0.4981 + h;
    case DF_TYPE_IQ4_NL: case DF_TYPE_IQ4_XS: return m * 0.0721 + h;
    case DF_TYPE_IQ2_XXS: return m * 0.335 + h;
    case DF_TYPE_IQ2_XS: return m * 0.315 + h;
    case DF_TYPE_IQ2_S: return m * 0.242 + h;
    case DF_TYPE_IQ3_XXS: return m * 0.205 + h;
    case DF_TYPE_IQ3_S: return m * 0.133 + h;
    case DF_TYPE_IQ1_S: return m * 0.453 + h;
    case DF_TYPE_IQ1_M: return m * 0.417 + h;
    case DF_TYPE_NVFP4: return m * 0.110;
    default: return -1;
    }
}

/* ---------------------------------------------------------------------- */

typedef struct {
    float *w, *x;          /* original weights and activations */
    float *wd, *xd;        /* dequantized (reference) */
    float *tmp;
    uint8_t *wq, *xq, *xq2, *tq;
} bufs;

static void *xalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    assert_non_null(p);
    return p;
}

static bufs bufs_new(int64_t n) {
    bufs b;
    size_t fb = (size_t)n * sizeof(float), qb = (size_t)n * 4 + 64;
    b.w = xalloc(fb); b.x = xalloc(fb); b.wd = xalloc(fb); b.xd = xalloc(fb); b.tmp = xalloc(fb);
    b.wq = xalloc(qb); b.xq = xalloc(qb); b.xq2 = xalloc(qb); b.tq = xalloc(qb);
    return b;
}

static void bufs_free(bufs *b) {
    free(b->w); free(b->x); free(b->wd); free(b->xd); free(b->tmp);
    free(b->wq); free(b->xq); free(b->xq2); free(b->tq);
}

/* Weights: uniform with a magnitude that changes every 256 elements and an
 * occasional offset, so block scales and mins are exercised. */
static void gen_weights(float *w, int64_t n, uint64_t *rng) {
    static const float mags[] = {1.0f, 0.03f, 7.5f, 0.4f, 120.0f};
    for (int64_t i = 0; i < n; i++) {
        int64_t c = i / 256;
        float off = (c % 3 == 2) ? 0.6f : 0.0f;
        w[i] = (tu_randf(rng) + off) * mags[c % 5];
    }
}

static void gen_acts(float *x, int64_t n, uint64_t *rng) {
    for (int64_t i = 0; i < n; i++) x[i] = tu_randf(rng) * (1.0f + (float)(i % 5));
}

/*
 * Bound for check (3): |vec_dot(W, quant(x)) - sum w^_i x_i|.
 * The difference is E = sum w^_i (x_i - x^_i) plus float rounding.
 *  - Rounding an activation to the grid errs by e_i with |e_i| <= h_i (half a
 *    step: d_b/2 for q8 blocks, 2^-11|x_i| for f16, 2^-8|x_i| for bf16, 0 for
 *    f32). Treating the e_i as independent and zero-mean (variance <= h_i^2/3),
 *    E has standard deviation s = sqrt(sum w^_i^2 h_i^2 / 3); we allow 6 s.
 *  - q8_0/q8_1 store the block scale in f16 (relative error <= 2^-11), which
 *    scales the whole block: add 2^-11 * |sum_{i in b} w^_i x^_i| per block.
 *  - q8_1's s = d*sum(q) is a second f16 rounding that multiplies the weight
 *    offset m of q4_1/q5_1: add 2^-10 * |m_b * sum_{i in b} x^_i| per block.
 *  - float accumulation: 1e-5 * sum |w^_i x^_i| (see threshold (2) above).
 */
static double act_error_bound(int type, int vt, const void *wq, const float *wd, const float *x,
                              const float *xd, int64_t n) {
    double var = 0, sys = 0, mag = 0;
    int bl = vt == DF_TYPE_Q8_K ? QK_K : (vt == DF_TYPE_Q8_0 || vt == DF_TYPE_Q8_1) ? 32 : 1;
    for (int64_t b0 = 0; b0 < n; b0 += bl) {
        double amax = 0, bdot = 0, bsum = 0;
        for (int64_t i = b0; i < b0 + bl; i++) amax = fmax(amax, fabs(x[i]));
        for (int64_t i = b0; i < b0 + bl; i++) {
            double h;
            switch (vt) {
            case DF_TYPE_F32: h = 0; break;
            case DF_TYPE_F16: h = fabs(x[i]) / 2048 + 0x1p-25; break;
            case DF_TYPE_BF16: h = fabs(x[i]) / 256; break;
            default: h = amax / 127 / 2 * (1 + 1.0 / 1024); break;
            }
            var += (double)wd[i] * wd[i] * h * h / 3;
            bdot += (double)wd[i] * xd[i];
            bsum += xd[i];
            mag += fabs((double)wd[i] * xd[i]);
        }
        if (vt == DF_TYPE_Q8_0 || vt == DF_TYPE_Q8_1) sys += fabs(bdot) / 2048;
        if (vt == DF_TYPE_Q8_1 && (type == DF_TYPE_Q4_1 || type == DF_TYPE_Q5_1)) {
            size_t bs = quant_traits_ref(type)->type_size;
            uint16_t mh;
            memcpy(&mh, (const uint8_t *)wq + (size_t)(b0 / 32) * bs + 2, 2); /* m follows d */
            sys += fabs(df_fp16_to_fp32(mh) * bsum) / 1024;
        }
    }
    return 6 * sqrt(var) + sys + 1e-5 * mag;
}

static double dot64(const float *a, const float *b, int64_t n, double *mag) {
    double s = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)a[i] * b[i];
        m += fabs((double)a[i] * b[i]);
    }
    if (mag) *mag = m;
    return s;
}

/* Run checks (0)-(3) for one type, ISA and length. */
static void check_type_isa_n(int type, int isa, int64_t n, uint64_t *rng) {
    const quant_traits *ref = quant_traits_ref(type);
    const quant_traits *t = quant_traits_isa(type, isa);
    assert_non_null(t);
    int vt = ref->vec_type;
    const quant_traits *vref = quant_traits_ref(vt), *vt_isa = quant_traits_isa(vt, isa);
    assert_non_null(vref);
    assert_non_null(vt_isa);
    assert_int_equal(t->vec_type, vt);
    bufs b = bufs_new(n);
    gen_weights(b.w, n, rng);
    gen_acts(b.x, n, rng);

    /* weights: reference quantizer; the ISA's must agree byte for byte */
    size_t wbytes = quant_row_size(type, n), xbytes = quant_row_size(vt, n);
    assert_true(wbytes > 0 && xbytes > 0);
    ref->from_float(b.w, b.wq, n);
    t->from_float(b.w, b.tq, n);
    if (memcmp(b.wq, b.tq, wbytes) != 0)
        fail_msg("%s/%s n=%lld: from_float differs from reference", ref->name, quant_isa_str(isa), (long long)n);

    /* (0) activations */
    vref->from_float(b.x, b.xq, n);
    vt_isa->from_float(b.x, b.xq2, n);
    if (memcmp(b.xq, b.xq2, xbytes) != 0)
        fail_msg("%s/%s n=%lld: activation quantizer %s differs from reference", ref->name,
                 quant_isa_str(isa), (long long)n, vref->name);

    /* (1) to_float */
    ref->to_float(b.wq, b.wd, n);
    t->to_float(b.wq, b.tmp, n);
    float rowmax = 0;
    for (int64_t i = 0; i < n; i++) rowmax = fmaxf(rowmax, fabsf(b.wd[i]));
    for (int64_t i = 0; i < n; i++)
        if (!(fabsf(b.tmp[i] - b.wd[i]) <= 1e-6f * rowmax))
            fail_msg("%s/%s n=%lld: to_float[%lld] = %.9g, reference %.9g", ref->name, quant_isa_str(isa),
                     (long long)n, (long long)i, b.tmp[i], b.wd[i]);
    vref->to_float(b.xq, b.xd, n);

    /* (2) vec_dot ISA vs reference */
    float r_ref = NAN, r_isa = NAN;
    ref->vec_dot(n, b.wq, b.xq, &r_ref);
    t->vec_dot(n, b.wq, b.xq, &r_isa);
    double mag;
    double exact_q = dot64(b.wd, b.xd, n, &mag);
    if (!(fabs((double)r_isa - r_ref) <= 1e-5 * mag + 1e-30))
        fail_msg("%s/%s n=%lld: vec_dot %.9g, reference %.9g (sum|wx| %.6g)", ref->name, quant_isa_str(isa),
                 (long long)n, r_isa, r_ref, mag);

    /* (3) reference vec_dot vs float64 dot with the original activations */
    if (isa == QUANT_ISA_SCALAR) {
        double exact = dot64(b.wd, b.x, n, NULL);
        double bound = act_error_bound(type, vt, b.wq, b.wd, b.x, b.xd, n);
        if (!(fabs((double)r_ref - exact) <= bound))
            fail_msg("%s n=%lld: vec_dot %.9g vs float64 %.9g: error %.3g > bound %.3g", ref->name, (long long)n,
                     r_ref, exact, fabs(r_ref - exact), bound);
        /* and against the dequantized activations: only accumulation error
         * (plus q8_1's f16 sum s, covered by the same bound) */
        if (!(fabs((double)r_ref - exact_q) <= bound))
            fail_msg("%s n=%lld: vec_dot %.9g vs dequantized float64 %.9g", ref->name, (long long)n, r_ref, exact_q);
    }
    bufs_free(&b);
}

static void test_type(void **state) {
    int type = *(const int *)*state;
    const quant_traits *ref = quant_traits_ref(type);
    assert_non_null(ref);
    assert_true(ref->supported);
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)type;
    int64_t sizes_f[] = {1, 7, 33, 768, 4096, 4101};
    int64_t sizes_32[] = {32, 96, 768, 4096};
    int64_t sizes_256[] = {256, 768, 4096};
    int64_t sizes_b[] = {ref->blck, 3 * ref->blck, 768, 4096}; /* q2_0 (64), q1_0 (128) */
    const int64_t *sizes;
    int ns;
    if (ref->blck == 1) { sizes = sizes_f; ns = 6; }
    else if (ref->blck == 32) { sizes = sizes_32; ns = 4; }
    else if (ref->blck == 256) { sizes = sizes_256; ns = 3; }
    else { sizes = sizes_b; ns = 4; }
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
        if (!quant_isa_available(isa)) continue;
        for (int k = 0; k < ns; k++) check_type_isa_n(type, isa, sizes[k], &rng);
    }

    /* (4) round trip on uniform [-1, 1) data, whole row and per 256 chunk */
    const int64_t n = 4096;
    float *x = xalloc(n * sizeof(float)), *y = xalloc(n * sizeof(float));
    uint8_t *q = xalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) x[i] = tu_randf(&rng);
    ref->from_float(x, q, n);
    ref->to_float(q, y, n);
    double se = 0, sx = 0;
    for (int64_t i = 0; i < n; i++) {
        se += (double)(x[i] - y[i]) * (x[i] - y[i]);
        sx += (double)x[i] * x[i];
        if (type == DF_TYPE_F16 || type == DF_TYPE_BF16) {
            /* half an ulp: 2^-11 (f16) or 2^-8 (bf16) relative, and 2^-25
             * absolute in f16's subnormal range (spacing 2^-24) */
            double tol = type == DF_TYPE_F16 ? fabs(x[i]) / 2048 + 0x1p-25 : fabs(x[i]) / 256;
            if (!(fabs((double)x[i] - y[i]) <= tol)) fail_msg("%s: element %lld %.9g -> %.9g", ref->name, (long long)i, x[i], y[i]);
        }
    }
    double rel = sqrt(se / sx);
    if (!(rel <= rt_bound(type))) fail_msg("%s: round-trip relative RMS %.5f > bound %.5f", ref->name, rel, rt_bound(type));

    /* same with magnitudes varying over 6 decades between 256-chunks; the
     * per-chunk relative errors are averaged (same expectation as above) */
    /* nvfp4's only scale is the per-16 UE4M3 byte (2^-10 .. 448, no tensor
     * scale in ggml): magnitudes 0.1 .. 100 there, below that it underflows */
    const int decades = type == DF_TYPE_NVFP4 ? 4 : 7, lowest = type == DF_TYPE_NVFP4 ? -1 : -3;
    for (int64_t i = 0; i < n; i++) x[i] = tu_randf(&rng) * powf(10.0f, (float)((i / 256) % decades + lowest));
    ref->from_float(x, q, n);
    ref->to_float(q, y, n);
    double acc = 0;
    for (int64_t c = 0; c < n / 256; c++) {
        double e = 0, s = 0;
        for (int64_t i = c * 256; i < (c + 1) * 256; i++) {
            e += (double)(x[i] - y[i]) * (x[i] - y[i]);
            s += (double)x[i] * x[i];
        }
        acc += e / s;
    }
    rel = sqrt(acc / (double)(n / 256));
    if (!(rel <= rt_bound(type) * 1.05)) /* 1.05: 256-element chunks sample the range less well */
        fail_msg("%s: round-trip (varying scales) relative RMS %.5f > bound %.5f", ref->name, rel, rt_bound(type) * 1.05);

    /* all-zero input must quantize to exact zeros */
    memset(x, 0, (size_t)n * sizeof(float));
    ref->from_float(x, q, n);
    ref->to_float(q, y, n);
    for (int64_t i = 0; i < n; i++) assert_true(y[i] == 0.0f);
    free(x); free(y); free(q);
}

/* ---------------------------------------------------------------------- */
/* Golden layout tests: checksums computed by ggml's own code. */

static uint16_t f2h(float f) { return df_fp32_to_fp16(f); }

typedef struct {
    int type;
    double checksum; /* sum over golden_nblk blocks of (i+1) * value_i, from ggml dequantize_row_* */
    double dot;      /* ggml_vec_dot_*_generic of the pattern with the activation pattern */
} golden;

/* Generated with ggml (llama.cpp ggml/src/ggml-quants.c + ggml-cpu/quants.c):
 * tests/ggml_golden.c prints this table (see its header for the command);
 * q8_1 has no ggml dequantizer, q8_K none in ggml-base's traits. */
static const golden k_golden[] = {
    {DF_TYPE_Q4_0, -63.12890625, 6.32527161},
    {DF_TYPE_Q4_1, 1023.36328125, 14.5806732},
    {DF_TYPE_Q5_0, -210.51953125, -23.5640717},
    {DF_TYPE_Q5_1, 2166.59765625, 0.347091675},
    {DF_TYPE_Q8_0, 447.9375, 1482.64038},
    {DF_TYPE_Q8_1, 998.6875, 0},
    {DF_TYPE_Q2_K, 71141.66796875, 7.13282013},
    {DF_TYPE_Q3_K, -19692.625, -0.840206146},
    {DF_TYPE_Q4_K, 2017524.09375, -293.942932},
    {DF_TYPE_Q5_K, 4268793.46875, 585.971924},
    {DF_TYPE_Q6_K, 59483.90625, -1721.92529},
    {DF_TYPE_Q8_K, -1444.9279065951705, 0},
    {DF_TYPE_MXFP4, -42.4375, -8.22070312},
    {DF_TYPE_Q1_0, 17.703125, 3.87045288},
    {DF_TYPE_Q2_0, 277.1328125, 7.10704041},
    {DF_TYPE_IQ4_NL, -17846.41796875, -81.5205994},
    {DF_TYPE_IQ4_XS, -3168120.59375, -3111.26172},
    {DF_TYPE_TQ1_0, -1642.53515625, -6.68878794},
    {DF_TYPE_TQ2_0, 85371.625, -4.4036684},
    {DF_TYPE_IQ2_XXS, 81955.201171875, 295.843842},
    {DF_TYPE_IQ2_XS, -919172.70458984375, -595.017456},
    {DF_TYPE_IQ2_S, 1253010.31640625, -2961.34229},
    {DF_TYPE_IQ3_XXS, 106087.611328125, 291.928864},
    {DF_TYPE_IQ3_S, 501377.7265625, -2315.35718},
    {DF_TYPE_IQ1_S, 27906377.375, -1264.54663},
    {DF_TYPE_IQ1_M, 25033289.9375, -2413.20801},
    {DF_TYPE_NVFP4, 59610936.453125, -446712.938},
};

/* Hash of the bytes ggml's reference quantizer (quantize_row_*_ref, through
 * ggml_quantize_chunk) makes of golden_quant_input, for the types whose
 * quantizer we follow exactly; printed by tests/ggml_golden.c. */
static const struct { int type; uint64_t hash; } k_golden_quant[] = {
    {DF_TYPE_MXFP4, 0xcec4980474ebee7cull},
    {DF_TYPE_Q1_0, 0x25a87ba8564e8354ull},
    {DF_TYPE_Q2_0, 0xf40254e41eaadd65ull},
    {DF_TYPE_TQ1_0, 0xfbe34585005d044eull},
    {DF_TYPE_TQ2_0, 0x5ac366e1f9bdf21dull},
    {DF_TYPE_NVFP4, 0xf201245b5dcb96d0ull},
};

static void test_golden_quant(void **state) {
    (void)state;
    float x[GOLDEN_QN];
    uint8_t q[GOLDEN_QN * 4];
    golden_quant_input(x);
    for (size_t g = 0; g < sizeof k_golden_quant / sizeof k_golden_quant[0]; g++) {
        for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
            if (!quant_isa_available(isa)) continue;
            const quant_traits *t = quant_traits_isa(k_golden_quant[g].type, isa);
            memset(q, 0, sizeof q);
            t->from_float(x, q, GOLDEN_QN);
            uint64_t h = golden_hash(q, quant_row_size(k_golden_quant[g].type, GOLDEN_QN));
            if (h != k_golden_quant[g].hash)
                fail_msg("%s/%s: quantized bytes hash %016llx, ggml %016llx", t->name, quant_isa_str(isa),
                         (unsigned long long)h, (unsigned long long)k_golden_quant[g].hash);
        }
    }
    /* ggml_e8m0_to_fp32_half: 2^(e-128), subnormal for e = 0, 1 */
    for (int e = 0; e < 256; e++)
        if (df_e8m0_to_fp32_half((uint8_t)e) != ldexpf(1.0f, e - 128))
            fail_msg("e8m0 half(%d) = %.9g", e, df_e8m0_to_fp32_half((uint8_t)e));
}

static void test_golden(void **state) {
    (void)state;
    static uint8_t w[GOLDEN_NBLK_BIG * 292], a[GOLDEN_NBLK_BIG * 292];
    static float v[GOLDEN_NBLK_BIG * QK_K], va[GOLDEN_NBLK_BIG * QK_K];
    for (size_t g = 0; g < sizeof k_golden / sizeof k_golden[0]; g++) {
        const golden *G = &k_golden[g];
        const quant_traits *r = quant_traits_ref(G->type);
        int nblk = golden_nblk(G->type);
        int64_t n = (int64_t)r->blck * nblk;
        golden_fill(G->type, r->type_size, w, nblk, f2h);
        r->to_float(w, v, n);
        double cs = 0;
        for (int64_t i = 0; i < n; i++) cs += (double)(i + 1) * v[i];
        if (!(fabs(cs - G->checksum) <= 1e-9 * fabs(G->checksum) + 1e-9))
            fail_msg("%s: layout checksum %.17g, ggml %.17g", r->name, cs, G->checksum);
        if (G->type == DF_TYPE_Q8_K || G->type == DF_TYPE_Q8_1) continue; /* no ggml vec_dot */
        const quant_traits *vr = quant_traits_ref(r->vec_type);
        golden_fill_act(r->vec_type, vr->type_size, a, (int)(n / vr->blck), f2h);
        quant_traits_ref(r->vec_type)->to_float(a, va, n);
        double mag = 0;
        for (int64_t i = 0; i < n; i++) mag += fabs((double)v[i] * va[i]);
        for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
            if (!quant_isa_available(isa)) continue;
            float d = NAN;
            quant_traits_isa(G->type, isa)->vec_dot(n, w, a, &d);
            if (!(fabs(d - G->dot) <= 1e-5 * mag))
                fail_msg("%s/%s: pattern vec_dot %.9g, ggml %.9g", r->name, quant_isa_str(isa), d, G->dot);
        }
    }
}

/* Grid i-quants on random bytes (every grid index, high bit, sign pattern,
 * scale and iq1 delta, with sane f16 d's) against q8_K activations holding
 * the extremes +-127: every ISA's vec_dot against the scalar reference. */
static void test_iq_random(void **state) {
    (void)state;
    static const int types[] = {DF_TYPE_IQ2_XXS, DF_TYPE_IQ2_XS, DF_TYPE_IQ2_S, DF_TYPE_IQ3_XXS,
                                DF_TYPE_IQ3_S,   DF_TYPE_IQ1_S,  DF_TYPE_IQ1_M};
    enum { NB = 24 };
    static uint8_t w[NB * 110];
    static block_q8_K a[NB];
    static float wd[NB * QK_K], ad[NB * QK_K];
    uint64_t rng = 0x51ed270b27bd4f3dull;
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const quant_traits *r = quant_traits_ref(types[t]);
        for (int rep = 0; rep < 8; rep++) {
            for (size_t k = 0; k < sizeof w; k++) w[k] = (uint8_t)(tu_rand(&rng) >> 24);
            for (int b = 0; b < NB; b++) {
                uint8_t *p = w + (size_t)b * r->type_size;
                uint16_t d = f2h(0.001f * (1.0f + tu_randf(&rng)));
                if (types[t] == DF_TYPE_IQ1_M)
                    for (int k = 0; k < 4; k++) p[48 + 2 * k + 1] = (uint8_t)((p[48 + 2 * k + 1] & 0x0F) | ((d >> (4 * k)) & 0xF) << 4);
                else memcpy(p, &d, 2);
                a[b].d = 0.01f * (1.0f + tu_randf(&rng));
                for (int j = 0; j < QK_K; j++) {
                    const int v = (int)(tu_rand(&rng) % 255) - 127;
                    a[b].qs[j] = (int8_t)(rep == 0 ? (j & 1 ? 127 : -127) : v);
                }
                for (int g = 0; g < QK_K / 16; g++) {
                    int s = 0;
                    for (int j = 0; j < 16; j++) s += a[b].qs[16 * g + j];
                    a[b].bsums[g] = (int16_t)s;
                }
            }
            const int64_t n = (int64_t)NB * QK_K;
            r->to_float(w, wd, n);
            quant_traits_ref(DF_TYPE_Q8_K)->to_float(a, ad, n);
            double mag = 0;
            const double exact = dot64(wd, ad, n, &mag);
            float ref = NAN;
            r->vec_dot(n, w, a, &ref);
            if (!(fabs((double)ref - exact) <= 1e-5 * mag))
                fail_msg("%s: random blocks: reference vec_dot %.9g, float64 %.9g", r->name, ref, exact);
            for (int isa = 1; isa < QUANT_ISA_COUNT; isa++) {
                if (!quant_isa_available(isa)) continue;
                float v = NAN;
                quant_traits_isa(types[t], isa)->vec_dot(n, w, a, &v);
                if (!(fabs((double)v - ref) <= 1e-5 * mag))
                    fail_msg("%s/%s: random blocks (rep %d): vec_dot %.9g, reference %.9g (sum|wx| %.6g)", r->name,
                             quant_isa_str(isa), rep, v, ref, mag);
            }
        }
    }
}

/* ---------------------------------------------------------------------- */

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

static void test_fp16(void **state) {
    (void)state;
    /* every half decodes and re-encodes to itself; nan stays nan */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = df_fp16_to_fp32((uint16_t)h);
        uint16_t back = df_fp32_to_fp16(f);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            assert_true(isnan(f));
            assert_int_equal(back & 0x7e00, 0x7e00); /* quiet nan */
            assert_int_equal(back & 0x8000, h & 0x8000);
        } else {
            if (back != h) fail_msg("half %04x -> %.9g -> %04x", h, f, back);
        }
    }
    /* decoded values */
    assert_true(df_fp16_to_fp32(0x3c00) == 1.0f);
    assert_true(df_fp16_to_fp32(0xc000) == -2.0f);
    assert_true(df_fp16_to_fp32(0x7bff) == 65504.0f);
    assert_true(df_fp16_to_fp32(0x0001) == 0x1p-24f);
    assert_true(df_fp16_to_fp32(0x03ff) == 1023 * 0x1p-24f);
    assert_true(df_fp16_to_fp32(0x0400) == 0x1p-14f);
    assert_true(isinf(df_fp16_to_fp32(0x7c00)) && df_fp16_to_fp32(0xfc00) < 0);
    assert_true(fbits(df_fp16_to_fp32(0x8000)) == 0x80000000u);
    /* encoding: ties to even, overflow, subnormals */
    assert_int_equal(df_fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(df_fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
    assert_int_equal(df_fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    assert_int_equal(df_fp32_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(df_fp32_to_fp16(65519.99f), 0x7bff);
    assert_int_equal(df_fp32_to_fp16(65520.0f), 0x7c00);
    assert_int_equal(df_fp32_to_fp16(1e10f), 0x7c00);
    assert_int_equal(df_fp32_to_fp16(-1e10f), 0xfc00);
    assert_int_equal(df_fp32_to_fp16(INFINITY), 0x7c00);
    assert_int_equal(df_fp32_to_fp16(-INFINITY), 0xfc00);
    assert_int_equal(df_fp32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(df_fp32_to_fp16(0x1p-24f), 0x0001);
    assert_int_equal(df_fp32_to_fp16(0x1p-25f), 0x0000);           /* tie -> even (0) */
    assert_int_equal(df_fp32_to_fp16(3 * 0x1p-25f), 0x0002);       /* 1.5 units -> 2 */
    assert_int_equal(df_fp32_to_fp16(0x1p-25f + 0x1p-30f), 0x0001);
    assert_int_equal(df_fp32_to_fp16(1e-30f), 0x0000);
    assert_int_equal(df_fp32_to_fp16(0x1p-14f - 0x1p-26f), 0x0400); /* rounds up into the normals */
    assert_int_equal(df_fp32_to_fp16(1023 * 0x1p-24f), 0x03ff);
    uint16_t hn = df_fp32_to_fp16(NAN);
    assert_true((hn & 0x7c00) == 0x7c00 && (hn & 0x3ff) != 0);

    /* bf16: all values round-trip, rounding ties to even, nan quiet, subnormals kept */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = df_bf16_to_fp32((uint16_t)h);
        uint16_t back = df_fp32_to_bf16(f);
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) assert_true(isnan(f) && (back & 0x40));
        else if (back != h) fail_msg("bf16 %04x -> %.9g -> %04x", h, f, back);
    }
    assert_int_equal(df_fp32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(df_fp32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(df_fp32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    assert_int_equal(df_fp32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(df_fp32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(df_fp32_to_bf16(0x1p-133f), 0x0001); /* float subnormal */
    uint16_t bn = df_fp32_to_bf16(NAN);
    assert_true((bn & 0x7f80) == 0x7f80 && (bn & 0x7f) != 0);

    /* SIMD f16/bf16 conversion rows agree with the scalar ones on all halves
     * and on special floats (inf, nan, subnormal, overflow, ties) */
    uint16_t *hs = xalloc(65536 * 2), *h2 = xalloc(65536 * 2);
    float *f1 = xalloc(65536 * 4), *f2 = xalloc(65536 * 4);
    for (uint32_t h = 0; h < 65536; h++) hs[h] = (uint16_t)h;
    static const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.99f, 65520.0f, 1e10f, -1e10f,
                                     0x1p-24f, 0x1p-25f, 3 * 0x1p-25f, 1e-30f, 0x1p-133f, 1.0f + 0x1p-11f,
                                     1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 0.1f, -3.3e-6f};
    int ns = (int)(sizeof specials / sizeof specials[0]);
    for (int isa = 1; isa < QUANT_ISA_COUNT; isa++) {
        if (!quant_isa_available(isa)) continue;
        int tys[2] = {DF_TYPE_F16, DF_TYPE_BF16};
        for (int k = 0; k < 2; k++) {
            const quant_traits *r = quant_traits_ref(tys[k]), *t = quant_traits_isa(tys[k], isa);
            r->to_float(hs, f1, 65536);
            t->to_float(hs, f2, 65536);
            for (int i = 0; i < 65536; i++)
                if (fbits(f1[i]) != fbits(f2[i]) && !(isnan(f1[i]) && isnan(f2[i])))
                    fail_msg("%s/%s to_float(%04x) = %08x, scalar %08x", r->name, quant_isa_str(isa), i,
                             fbits(f2[i]), fbits(f1[i]));
            float in[64];
            for (int i = 0; i < 64; i++) in[i] = i < ns ? specials[i] : (i == ns ? INFINITY : (i == ns + 1 ? NAN : -INFINITY));
            r->from_float(in, hs + 0, 64); /* reuse hs as scratch, restored below */
            t->from_float(in, h2, 64);
            for (int i = 0; i < 64; i++)
                if (hs[i] != h2[i]) fail_msg("%s/%s from_float(%.9g) = %04x, scalar %04x", r->name, quant_isa_str(isa), in[i], h2[i], hs[i]);
            for (uint32_t h = 0; h < 64; h++) hs[h] = (uint16_t)h;
        }
    }
    free(hs); free(h2); free(f1); free(f2);
}

/* ---------------------------------------------------------------------- */

static void test_table(void **state) {
    (void)state;
    quant_init();
    const char *isa = quant_isa_name();
    assert_non_null(isa);
    assert_true(!strcmp(isa, "scalar") || !strcmp(isa, "avx2") || !strcmp(isa, "avx512") || !strcmp(isa, "neon") ||
                !strcmp(isa, "amx"));
    assert_null(quant_traits_get(-1));
    assert_null(quant_traits_get(DF_TYPE_COUNT));
    assert_null(quant_traits_ref(DF_TYPE_COUNT));
    /* names, sizes and pairings as ggml has them */
    struct { int id; const char *name; int blck; size_t size; int vt; } want[] = {
        {0, "f32", 1, 4, 0}, {1, "f16", 1, 2, 1}, {2, "q4_0", 32, 18, 8}, {3, "q4_1", 32, 20, 9},
        {6, "q5_0", 32, 22, 8}, {7, "q5_1", 32, 24, 9}, {8, "q8_0", 32, 34, 8}, {9, "q8_1", 32, 36, 9},
        {10, "q2_K", 256, 84, 15}, {11, "q3_K", 256, 110, 15}, {12, "q4_K", 256, 144, 15},
        {13, "q5_K", 256, 176, 15}, {14, "q6_K", 256, 210, 15}, {15, "q8_K", 256, 292, 15},
        {30, "bf16", 1, 2, 30}, {39, "mxfp4", 32, 17, 8}, {41, "q1_0", 128, 18, 8}, {42, "q2_0", 64, 18, 8},
        {20, "iq4_nl", 32, 18, 8}, {23, "iq4_xs", 256, 136, 15}, {34, "tq1_0", 256, 54, 15}, {35, "tq2_0", 256, 66, 15},
        {16, "iq2_xxs", 256, 66, 15}, {17, "iq2_xs", 256, 74, 15}, {18, "iq3_xxs", 256, 98, 15}, {19, "iq1_s", 256, 50, 15},
        {21, "iq3_s", 256, 110, 15}, {22, "iq2_s", 256, 82, 15}, {29, "iq1_m", 256, 56, 15}, {40, "nvfp4", 64, 36, 8},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const quant_traits *t = quant_traits_get(want[i].id);
        assert_non_null(t);
        assert_string_equal(t->name, want[i].name);
        assert_int_equal(t->blck, want[i].blck);
        assert_int_equal(t->type_size, want[i].size);
        assert_int_equal(t->vec_type, want[i].vt);
        assert_true(t->supported && t->to_float && t->from_float && t->vec_dot);
    }
    struct { int id; const char *name; int blck; size_t size; } unsup[] = {
        {24, "i8", 1, 1}, {25, "i16", 1, 2}, {26, "i32", 1, 4}, {27, "i64", 1, 8}, {28, "f64", 1, 8},
    };
    for (size_t i = 0; i < sizeof unsup / sizeof unsup[0]; i++) {
        const quant_traits *t = quant_traits_get(unsup[i].id);
        assert_non_null(t);
        assert_string_equal(t->name, unsup[i].name);
        assert_int_equal(t->blck, unsup[i].blck);
        assert_int_equal(t->type_size, unsup[i].size);
        assert_int_equal(t->supported, 0);
        assert_int_equal(quant_row_size(unsup[i].id, unsup[i].blck * 3), 3 * unsup[i].size);
    }
    int holes[] = {4, 5, 31, 32, 33, 36, 37, 38};
    for (size_t i = 0; i < sizeof holes / sizeof holes[0]; i++) {
        assert_null(quant_traits_get(holes[i])->name);
        assert_int_equal(quant_row_size(holes[i], 32), 0);
    }
    assert_int_equal(quant_row_size(DF_TYPE_Q4_K, 4096), 16 * 144);
    assert_int_equal(quant_row_size(DF_TYPE_Q4_K, 100), 0);
    assert_int_equal(quant_row_size(DF_TYPE_Q8_0, -32), 0);
    assert_int_equal(quant_row_size(DF_TYPE_F16, 7), 14);
    assert_int_equal(quant_row_size(99, 32), 0);
    /* the selected table is one of the per-ISA tables, and the scalar one is the reference */
    for (int i = 0; i < N_TYPES; i++) {
        const quant_traits *s = quant_traits_isa(k_types[i], QUANT_ISA_SCALAR);
        assert_ptr_equal(s->vec_dot, quant_traits_ref(k_types[i])->vec_dot);
    }
    assert_true(quant_isa_available(QUANT_ISA_SCALAR));
    assert_null(quant_traits_isa(DF_TYPE_Q4_0, QUANT_ISA_COUNT));
}

/* The word-parallel K-quant scale decoders used by SIMD kernels agree with
 * the per-element ones on random bytes. */
static void test_scale_unpack(void **state) {
    (void)state;
    uint64_t rng = 12345;
    for (int it = 0; it < 2000; it++) {
        uint8_t s[12];
        for (int k = 0; k < 12; k++) s[k] = (uint8_t)tu_rand(&rng);
        uint32_t u[4];
        uint8_t b[16];
        quant_k4_unpack(s, u);
        memcpy(b, u, 16);
        for (int j = 0; j < 8; j++) {
            uint8_t sc, m;
            quant_k4_scale_min(s, j, &sc, &m);
            assert_int_equal(b[j], sc);
            assert_int_equal(b[8 + j], m);
        }
        int8_t sc3[16];
        quant_k3_scales(s, sc3);
        quant_k3_unpack(s, u);
        memcpy(b, u, 16);
        for (int j = 0; j < 16; j++) assert_int_equal((int)b[j] - 32, sc3[j]);
    }
}

/* ---------------------------------------------------------------------- */

int main(void) {
    quant_init();
    fprintf(stderr, "test_quant: selected ISA %s; testing:", quant_isa_name());
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++)
        if (quant_isa_available(isa)) fprintf(stderr, " %s", quant_isa_str(isa));
    fprintf(stderr, "\n");

    struct CMUnitTest tests[N_TYPES + 6];
    int nt = 0;
    tests[nt++] = (struct CMUnitTest)cmocka_unit_test(test_table);
    tests[nt++] = (struct CMUnitTest)cmocka_unit_test(test_fp16);
    tests[nt++] = (struct CMUnitTest)cmocka_unit_test(test_golden);
    tests[nt++] = (struct CMUnitTest)cmocka_unit_test(test_golden_quant);
    tests[nt++] = (struct CMUnitTest)cmocka_unit_test(test_scale_unpack);
    tests[nt++] = (struct CMUnitTest)cmocka_unit_test(test_iq_random);
    for (int i = 0; i < N_TYPES; i++) {
        tests[nt] = (struct CMUnitTest)cmocka_unit_test_prestate(test_type, (void *)&k_types[i]);
        tests[nt].name = quant_traits_ref(k_types[i])->name;
        nt++;
    }
    return _cmocka_run_group_tests("quant", tests, (size_t)nt, NULL, NULL);
}
