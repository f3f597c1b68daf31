/*
 * test_matmul.c - the matrix-product and attention kernels behind prompt
 * processing and generation, and the thread pool's dynamic jobs.
 *
 * What is checked, for every weight type and every instruction set this
 * CPU has:
 *  (1) gemm (or matmul's vec_dot fallback) against the scalar reference
 *      vec_dot, to 1e-5 * sum|w_i x_i| (test_quant's SIMD-vs-scalar bound:
 *      the integer sums are exact, only float summation order differs);
 *  (2) the gemm CONTRACT (quant.h): every output is bit-identical however
 *      the rows and tokens are tiled - alone, in a full tile, at an odd
 *      offset, or as a padded edge tile. This is what makes a token's logits
 *      the same in a prompt batch and in one-token generation;
 *  (3) mm_mul with 1..3 threads and 1..130 tokens (token blocks, row
 *      chunks, dynamic scheduling) equals gemm on the whole matrix bit for
 *      bit, and mm_mul_n equals separate mm_mul calls (mm_mul_grouped: one
 *      per group), including products of
 *      different activation types and with inputs of their own in one call,
 *      and when the scratch forces several passes; too small a scratch fails;
 *  (4) the attention helpers dot_rows / axpy_rows / exp_sum and the
 *      swiglu kernel (and silu alone: b NULL) against the scalar ones (1e-5 relative, a few ulp for
 *      exp), and dot_rows' independence of how many rows one call covers;
 *  (5) tp_run_dyn runs every claimed item exactly once with more threads
 *      than cores, interleaved with static tp_run jobs;
 *  (6) the packed layouts (pack.h): round trip, and packed gemms give the
 *      row-major gemms' bits, alone and through mm_mul_n;
 *  (7) the one accumulation order: q8_0, q4_0, mxfp4, iq4_nl, q4_K, q5_K and
 *      q6_K give, on every table but the scalar one, the bits of that order
 *      written here with fmaf, so x86 and NEON machines agree bit for bit;
 *  (8) the delta rule's AVX2 and portable blocks (deltanet.c) give the same
 *      bits, and match a double-precision recurrence.
 */
#include "testutil.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "attn.h"
#include "deltanet.h"
#include "matmul.h"
#include "ops.h"
#include "pack.h"
#include "quant.h"
#include "quant_grids.h"
#include "quant_isa.h"
#include "threads.h"
#include "util.h"

static const int k_types[] = {DF_TYPE_F32,  DF_TYPE_F16,  DF_TYPE_BF16, DF_TYPE_Q4_0, DF_TYPE_Q4_1,
                              DF_TYPE_Q5_0, DF_TYPE_Q5_1, DF_TYPE_Q8_0, DF_TYPE_Q2_K, DF_TYPE_Q3_K,
                              DF_TYPE_Q4_K, DF_TYPE_Q5_K, DF_TYPE_Q6_K, DF_TYPE_MXFP4, DF_TYPE_Q1_0,
                              DF_TYPE_Q2_0, DF_TYPE_IQ4_NL, DF_TYPE_IQ4_XS, DF_TYPE_TQ1_0, DF_TYPE_TQ2_0,
                              DF_TYPE_IQ2_XXS, DF_TYPE_IQ2_XS, DF_TYPE_IQ2_S, DF_TYPE_IQ3_XXS, DF_TYPE_IQ3_S,
                              DF_TYPE_IQ1_S, DF_TYPE_IQ1_M, DF_TYPE_NVFP4};
#define N_TYPES ((int)(sizeof k_types / sizeof k_types[0]))

static void *xalloc(size_t n) {
    void *p = df_aligned_alloc(64, n ? n : 1);
    assert_non_null(p);
    memset(p, 0, n ? n : 1);
    return p;
}

/* A weight matrix and activations of one type, quantized, with the
 * dequantized copies for magnitudes. */
typedef struct {
    int type, vtype;
    int64_t n;          /* row length */
    int nr, nc;
    size_t wrow, xrow;  /* bytes per row */
    uint8_t *w, *x;
    float *wd, *xd;     /* dequantized */
    float *xf;          /* original activations (floats) */
} mats;

/* Random weights (rows of varied magnitude and offset) and activations of
 * type's activation format. */
static mats make(int type, int64_t n, int nr, int nc, uint64_t seed) {
    mats m;
    memset(&m, 0, sizeof m);
    const quant_traits *r = quant_traits_ref(type), *v = quant_traits_ref(r->vec_type);
    m.type = type;
    m.vtype = r->vec_type;
    m.n = n;
    m.nr = nr;
    m.nc = nc;
    m.wrow = quant_row_size(type, n);
    m.xrow = quant_row_size(m.vtype, n);
    m.w = xalloc(m.wrow * (size_t)nr);
    m.x = xalloc(m.xrow * (size_t)nc);
    m.wd = xalloc(sizeof(float) * (size_t)(n * nr));
    m.xd = xalloc(sizeof(float) * (size_t)(n * nc));
    m.xf = xalloc(sizeof(float) * (size_t)(n * nc));
    float *f = xalloc(sizeof(float) * (size_t)n);
    uint64_t rng = seed | 1;
    for (int i = 0; i < nr; i++) {
        const float mag = (i % 3 == 0) ? 4.0f : (i % 3 == 1 ? 0.05f : 1.0f);
        for (int64_t k = 0; k < n; k++) f[k] = tu_randf(&rng) * mag + (i % 5 == 4 ? 0.3f : 0.0f);
        r->from_float(f, m.w + (size_t)i * m.wrow, n);
        r->to_float(m.w + (size_t)i * m.wrow, m.wd + (int64_t)i * n, n);
    }
    for (int c = 0; c < nc; c++) {
        for (int64_t k = 0; k < n; k++) m.xf[(int64_t)c * n + k] = tu_randf(&rng) * (c % 2 ? 3.0f : 0.7f);
        v->from_float(m.xf + (int64_t)c * n, m.x + (size_t)c * m.xrow, n);
        v->to_float(m.x + (size_t)c * m.xrow, m.xd + (int64_t)c * n, n);
    }
    free(f);
    return m;
}

static void mats_free(mats *m) {
    free(m->w);
    free(m->x);
    free(m->wd);
    free(m->xd);
    free(m->xf);
}

/* sum |w_i x_i| of row r and token c (dequantized) */
static double mag(const mats *m, int r, int c) {
    double s = 0;
    for (int64_t k = 0; k < m->n; k++) s += fabs((double)m->wd[(int64_t)r * m->n + k] * m->xd[(int64_t)c * m->n + k]);
    return s;
}

/* The table's gemm, or matmul's fallback (vec_dot per pair) when it has none. */
static void gemm(const quant_traits *t, const mats *m, int r0, int nr, int c0, int nc, float *y, size_t ldy) {
    const uint8_t *w = m->w + (size_t)r0 * m->wrow, *x = m->x + (size_t)c0 * m->xrow;
    if (t->gemm) {
        t->gemm(m->n, w, m->wrow, nr, x, m->xrow, nc, y, ldy);
        return;
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) t->vec_dot(m->n, w + (size_t)r * m->wrow, x + (size_t)c * m->xrow, &y[(size_t)c * ldy + r]);
}

static int bits_equal(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* (1) and (2) for one type, ISA and shape. */
static void check_gemm(int type, int isa, int64_t n, int nr, int nc) {
    const quant_traits *t = quant_traits_isa(type, isa), *ref = quant_traits_ref(type);
    mats m = make(type, n, nr, nc, 0x1234u + (uint64_t)type * 77 + (uint64_t)n);
    float *y = xalloc(sizeof(float) * (size_t)(nr * nc)), *y1 = xalloc(sizeof(float) * (size_t)(nr * nc));
    gemm(t, &m, 0, nr, 0, nc, y, (size_t)nr);
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++) {
            float want;
            ref->vec_dot(n, m.w + (size_t)r * m.wrow, m.x + (size_t)c * m.xrow, &want);
            const float got = y[(size_t)c * nr + r];
            if (!(fabs((double)got - want) <= 1e-5 * mag(&m, r, c) + 1e-30))
                fail_msg("%s/%s n=%lld %dx%d: y[%d,%d] = %.9g, reference %.9g", ref->name, quant_isa_str(isa),
                         (long long)n, nr, nc, r, c, got, want);
        }
    /* alone: every pair as a 1x1 product */
    for (int c = 0; c < nc; c++)
        for (int r = 0; r < nr; r++) {
            float one;
            gemm(t, &m, r, 1, c, 1, &one, 1);
            if (!bits_equal(one, y[(size_t)c * nr + r]))
                fail_msg("%s/%s n=%lld: (%d,%d) alone %.9g, in the %dx%d product %.9g", ref->name, quant_isa_str(isa),
                         (long long)n, r, c, one, nr, nc, y[(size_t)c * nr + r]);
        }
    /* sub-rectangles at odd offsets and sizes */
    for (int r0 = 0; r0 < nr; r0 += 3)
        for (int c0 = 0; c0 < nc; c0 += 2) {
            const int rn = (nr - r0) < 5 ? nr - r0 : 5, cn = (nc - c0) < 3 ? nc - c0 : 3;
            gemm(t, &m, r0, rn, c0, cn, y1, (size_t)rn);
            for (int c = 0; c < cn; c++)
                for (int r = 0; r < rn; r++)
                    if (!bits_equal(y1[(size_t)c * rn + r], y[(size_t)(c0 + c) * nr + r0 + r]))
                        fail_msg("%s/%s n=%lld: (%d,%d) differs in a %dx%d tile at (%d,%d)", ref->name,
                                 quant_isa_str(isa), (long long)n, r0 + r, c0 + c, rn, cn, r0, c0);
        }
    free(y);
    free(y1);
    mats_free(&m);
}

static void test_gemm(void **state) {
    (void)state;
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
        if (!quant_isa_available(isa)) continue;
        for (int i = 0; i < N_TYPES; i++) {
            const int type = k_types[i];
            const int blck = quant_traits_ref(type)->blck;
            check_gemm(type, isa, blck == 1 ? 256 : 2 * QK_K, 9, 7);
            check_gemm(type, isa, blck == 1 ? 100 : 4 * QK_K, 4, 4);
            check_gemm(type, isa, blck == 1 ? 257 : QK_K, 1, 5);
            if (blck == 32) check_gemm(type, isa, 96, 6, 9);
        }
    }
}

/* Every type's AVX-512 products fold the integer sums and accumulate the
 * floats exactly as its AVX2 products do: the same bits, so a token's logits
 * do not depend on which x86 tier the machine has (the AVX2 path is what a
 * laptop without AVX-512 runs; tests/run.sh also runs the suite capped at
 * it). Every differing type is named before the test fails. Odd block counts
 * take the single-block tail; mxfp4 exponents 0..3 and 250..254 cover the
 * E8M0 subnormal scales and the largest. */
static int same_bits_avx2_avx512(int type, int k) {
    static const int64_t ns[] = {32, 64, 96, 512, 2048 + 32};
    const int blck = quant_traits_ref(type)->blck, nr = 11, nc = 9;
    const int64_t n = blck == 1 ? ns[k] + 3 : blck == 32 ? ns[k] : blck * (k + 1);
    const quant_traits *a = quant_traits_isa(type, QUANT_ISA_AVX2), *b = quant_traits_isa(type, QUANT_ISA_AVX512);
    mats m = make(type, n, nr, nc, 0x777u + (uint64_t)k);
    if (type == DF_TYPE_MXFP4 && k == 2) /* extreme exponents */
        for (int r = 0; r < nr; r++)
            for (int64_t i = 0; i < n / 32; i++) {
                block_mxfp4 *blk = (block_mxfp4 *)(void *)(m.w + (size_t)r * m.wrow) + i;
                blk->e = (uint8_t)((r + i) % 2 ? (r + i) % 4 : 250 + (r + i) % 5);
            }
    float *ya = xalloc(sizeof(float) * (size_t)(nr * nc)), *yb = xalloc(sizeof(float) * (size_t)(nr * nc));
    gemm(a, &m, 0, nr, 0, nc, ya, (size_t)nr);
    gemm(b, &m, 0, nr, 0, nc, yb, (size_t)nr);
    int same = 1;
    for (int i = 0; i < nr * nc && same; i++)
        if (!bits_equal(ya[i], yb[i])) {
            print_message("%s n=%lld: [%d] avx512 %.9g, avx2 %.9g\n", quant_traits_ref(type)->name, (long long)n, i,
                          yb[i], ya[i]);
            same = 0;
        }
    free(ya);
    free(yb);
    mats_free(&m);
    return same;
}

static void test_gemm_avx512_same_as_avx2(void **state) {
    (void)state;
    if (!quant_isa_available(QUANT_ISA_AVX512) || !quant_isa_available(QUANT_ISA_AVX2)) skip();
    int bad = 0;
    for (int i = 0; i < N_TYPES; i++)
        for (int k = 0; k < 5; k++)
            if (!same_bits_avx2_avx512(k_types[i], k)) {
                bad++;
                break;
            }
    assert_int_equal(bad, 0);
}

/* (6) packed layouts (pack.h): unpacking gives the file's bytes back; for
 * every table with a packed gemm, the packed gemm's outputs are that
 * table's row-major gemm's bits, and through mm_mul_n (1..3 threads, 1..70
 * tokens, row counts with and without a row-major tail past the last group
 * of 16) they are mm_mul's on the unpacked copy. */
static void test_packed(void **state) {
    (void)state;
    static const int types[] = {DF_TYPE_Q8_0, DF_TYPE_MXFP4, DF_TYPE_Q4_K, DF_TYPE_Q5_K, DF_TYPE_Q6_K};
    static const int rows[] = {16, 37, 203};
    static const int toks[] = {1, 2, 5, 9, 70};
    int tested = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            const int type = types[ti], nr = rows[ri];
            const int64_t n = quant_traits_ref(type)->blck == QK_K ? (ri == 1 ? 256 : 768) : (ri == 1 ? 96 : 512);
            assert_true(pack_has_layout(type));
            mats m = make(type, n, nr, 70, 0x5eedu + (uint64_t)(type * 7 + nr));
            uint8_t *pk = xalloc(m.wrow * (size_t)nr), *scratch = xalloc(m.wrow * PACK_ROWS);
            memcpy(pk, m.w, m.wrow * (size_t)nr);
            pack_matrix(type, pk, m.wrow, nr, scratch, 0);
            assert_true(memcmp(pk, m.w, m.wrow * (size_t)(nr / PACK_ROWS * PACK_ROWS)) != 0);
            assert_memory_equal(pk + m.wrow * (size_t)(nr / PACK_ROWS * PACK_ROWS),
                                m.w + m.wrow * (size_t)(nr / PACK_ROWS * PACK_ROWS), m.wrow * (size_t)(nr % PACK_ROWS));
            /* out of place (the store's staging read): the same bytes for the full groups */
            uint8_t *oop = xalloc(m.wrow * (size_t)nr);
            pack_groups_to(type, m.w, m.wrow, nr / PACK_ROWS, oop);
            assert_memory_equal(oop, pk, m.wrow * (size_t)(nr / PACK_ROWS * PACK_ROWS));
            free(oop);
            uint8_t *back = xalloc(m.wrow * (size_t)nr);
            memcpy(back, pk, m.wrow * (size_t)nr);
            pack_matrix(type, back, m.wrow, nr, scratch, 1);
            assert_memory_equal(back, m.w, m.wrow * (size_t)nr);
            /* each table's packed gemm against its own gemm, on x rows with the trailer (q8_0 activations) */
            const size_t xr = pack_x_row_bytes(m.vtype, n) ? pack_x_row_bytes(m.vtype, n) : m.xrow;
            uint8_t *xt = xalloc(xr * 70);
            for (int c = 0; c < 70; c++) {
                memcpy(xt + (size_t)c * xr, m.x + (size_t)c * m.xrow, m.xrow);
                pack_x_trailer(m.vtype, xt + (size_t)c * xr, n);
            }
            const int full = nr / PACK_ROWS * PACK_ROWS;
            float *ya = xalloc(sizeof(float) * (size_t)nr * 70), *yb = xalloc(sizeof(float) * (size_t)nr * 70);
            for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
                const quant_traits *t = quant_traits_isa(type, isa);
                if (!t || !t->gemm_packed) continue;
                tested++;
                for (int nc = 1; nc <= 9; nc++) {
                    gemm(t, &m, 0, full, 0, nc, ya, (size_t)nr);
                    memset(yb, 0xff, sizeof(float) * (size_t)nr * 70);
                    t->gemm_packed(n, pk, m.wrow, full, xt, xr, nc, yb, (size_t)nr);
                    for (int c = 0; c < nc; c++)
                        for (int r = 0; r < full; r++)
                            if (!bits_equal(ya[c * nr + r], yb[c * nr + r]))
                                fail_msg("%s %s n=%lld: packed gemm y[%d,%d] = %.9g, gemm %.9g", quant_isa_str(isa),
                                         t->name, (long long)n, r, c, yb[c * nr + r], ya[c * nr + r]);
                }
            }
            /* through the pool, with the table in use */
            if (quant_traits_get(type)->gemm_packed) {
                mm_scratch sc = {.buf = NULL, .size = mm_scratch_bytes(n, 70)};
                sc.buf = xalloc(sc.size);
                for (int nth = 1; nth <= 3; nth++) {
                    tp_pool *pool = tp_create(nth);
                    for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
                        const int nt = toks[k];
                        assert_int_equal(mm_mul(pool, type, m.w, n, nr, m.xf, nt, ya, nr, &sc), 0);
                        const mm_op op = {type, pk, nr, yb, nr, NULL, 1};
                        memset(yb, 0xff, sizeof(float) * (size_t)nr * 70);
                        assert_int_equal(mm_mul_n(pool, &op, 1, n, m.xf, nt, &sc), 0);
                        assert_memory_equal(ya, yb, sizeof(float) * (size_t)nr * (size_t)nt);
                    }
                    tp_free(pool);
                }
                free(sc.buf);
            }
            free(ya);
            free(yb);
            free(xt);
            free(back);
            free(scratch);
            free(pk);
            mats_free(&m);
        }
    /* AVX-512, AVX2 and NEON pack q8_0, mxfp4, q4_K, q5_K and q6_K */
    if (quant_isa_available(QUANT_ISA_AVX2) || quant_isa_available(QUANT_ISA_NEON)) assert_true(tested > 0);
}

/* (3) matmul through the pool: all thread counts and token counts give the
 * gemm's bits; mm_mul_n equals separate calls. */
static void test_mm_mul(void **state) {
    (void)state;
    const int types[] = {DF_TYPE_Q4_K, DF_TYPE_Q8_0, DF_TYPE_F32, DF_TYPE_Q5_K, DF_TYPE_F16};
    const int toks[] = {1, 3, 37, 130};
    const int64_t n = 512;
    const int nr = 203;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const int type = types[ti];
        mats m = make(type, n, nr, 130, 99 + (uint64_t)type);
        const quant_traits *t = quant_traits_get(type);
        float *want = xalloc(sizeof(float) * (size_t)(nr * 130));
        gemm(t, &m, 0, nr, 0, 130, want, (size_t)nr);
        mm_scratch sc = {.buf = NULL, .size = mm_scratch_bytes(n, 130)};
        sc.buf = xalloc(sc.size);
        float *y = xalloc(sizeof(float) * (size_t)(nr + 5) * 130);
        for (int nth = 1; nth <= 3; nth++) {
            tp_pool *pool = tp_create(nth);
            assert_non_null(pool);
            for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
                const int nt = toks[k];
                memset(y, 0xff, sizeof(float) * (size_t)(nr + 5) * 130);
                assert_int_equal(mm_mul(pool, type, m.w, n, nr, m.xf, nt, y, nr + 5, &sc), 0);
                for (int c = 0; c < nt; c++) {
                    for (int r = 0; r < nr; r++)
                        if (!bits_equal(y[(size_t)c * (nr + 5) + r], want[(size_t)c * nr + r]))
                            fail_msg("%s: mm_mul %d threads %d tokens: y[%d,%d] = %.9g, gemm %.9g", t->name, nth, nt,
                                     r, c, y[(size_t)c * (nr + 5) + r], want[(size_t)c * nr + r]);
                    for (int r = nr; r < nr + 5; r++) /* ldy padding untouched */
                        assert_true(isnan(y[(size_t)c * (nr + 5) + r]));
                }
            }
            tp_free(pool);
        }
        free(want);
        free(y);
        free(sc.buf);
        mats_free(&m);
    }
    /* mm_mul_n: three weights of two activation types on one input */
    tp_pool *pool = tp_create(2);
    mats a = make(DF_TYPE_Q4_K, n, 64, 9, 5), b = make(DF_TYPE_Q6_K, n, 40, 9, 6), c = make(DF_TYPE_Q8_0, n, 24, 9, 7);
    mm_scratch sc = {.buf = NULL, .size = mm_scratch_bytes(n, 9)};
    sc.buf = xalloc(sc.size);
    float *ya = xalloc(sizeof(float) * 64 * 9), *yb = xalloc(sizeof(float) * 64 * 9), *yc = xalloc(sizeof(float) * 24 * 9);
    float *za = xalloc(sizeof(float) * 64 * 9), *zb = xalloc(sizeof(float) * 40 * 9), *zc = xalloc(sizeof(float) * 24 * 9);
    const mm_op ops[3] = {{DF_TYPE_Q4_K, a.w, 64, ya, 64, NULL, 0}, {DF_TYPE_Q8_0, c.w, 24, yc, 24, NULL, 0},
                          {DF_TYPE_Q6_K, b.w, 40, yb, 40, NULL, 0}};
    assert_int_equal(mm_mul_n(pool, ops, 3, n, a.xf, 9, &sc), 0);
    assert_int_equal(mm_mul(pool, DF_TYPE_Q4_K, a.w, n, 64, a.xf, 9, za, 64, &sc), 0);
    assert_int_equal(mm_mul(pool, DF_TYPE_Q6_K, b.w, n, 40, a.xf, 9, zb, 40, &sc), 0);
    assert_int_equal(mm_mul(pool, DF_TYPE_Q8_0, c.w, n, 24, a.xf, 9, zc, 24, &sc), 0);
    assert_memory_equal(ya, za, sizeof(float) * 64 * 9);
    assert_memory_equal(yb, zb, sizeof(float) * 40 * 9);
    assert_memory_equal(yc, zc, sizeof(float) * 24 * 9);
    /* products with their own inputs (a, b and c's activations), in one call and
     * with a scratch that holds one converted input at a time (three passes) */
    const mm_op own[3] = {{DF_TYPE_Q4_K, a.w, 64, ya, 64, b.xf, 0}, {DF_TYPE_Q8_0, c.w, 24, yc, 24, c.xf, 0},
                          {DF_TYPE_Q4_K, a.w, 64, yb, 64, NULL, 0}};
    for (int pass = 0; pass < 2; pass++) {
        const size_t q8k = quant_row_size(DF_TYPE_Q8_K, n) + 64, q80 = pack_x_row_bytes(DF_TYPE_Q8_0, n);
        mm_scratch one = {.buf = sc.buf, .size = pass ? (q8k > q80 ? q8k : q80) * 9 : sc.size};
        memset(ya, 0, sizeof(float) * 64 * 9);
        memset(yb, 0, sizeof(float) * 40 * 9);
        memset(yc, 0, sizeof(float) * 24 * 9);
        assert_int_equal(mm_mul_n(pool, own, 3, n, a.xf, 9, &one), 0);
        assert_int_equal(mm_mul(pool, DF_TYPE_Q4_K, a.w, n, 64, b.xf, 9, za, 64, &sc), 0);
        assert_int_equal(mm_mul(pool, DF_TYPE_Q8_0, c.w, n, 24, c.xf, 9, zc, 24, &sc), 0);
        assert_memory_equal(ya, za, sizeof(float) * 64 * 9);
        assert_memory_equal(yc, zc, sizeof(float) * 24 * 9);
        assert_int_equal(mm_mul(pool, DF_TYPE_Q4_K, a.w, n, 64, a.xf, 9, za, 64, &sc), 0);
        assert_memory_equal(yb, za, sizeof(float) * 64 * 9);
    }
    /* too small a scratch, too many or no products */
    mm_scratch small = {.buf = sc.buf, .size = 100};
    assert_int_equal(mm_mul(pool, DF_TYPE_Q4_K, a.w, n, 64, a.xf, 9, za, 64, &small), -1);
    assert_int_equal(mm_mul_n(pool, ops, 0, n, a.xf, 9, &sc), -1);
    assert_int_equal(mm_mul_n(pool, ops, MM_MAX_OPS + 1, n, a.xf, 9, &sc), -1);
    free(ya); free(yb); free(yc); free(za); free(zb); free(zc);
    free(sc.buf);
    mats_free(&a);
    mats_free(&b);
    mats_free(&c);
    tp_free(pool);
}

/* (3) mm_mul_grouped: G products on their own slices of the input (MLA's
 * per-head products), more groups than one pass holds, packed slices and
 * slices with rows past the last group, 1..3 threads, one token and several:
 * the bits of one mm_mul per group on its gathered input. */
static void test_grouped(void **state) {
    (void)state;
    const int types[] = {DF_TYPE_Q8_0, DF_TYPE_Q4_K};
    const int rows[] = {32, 21};
    const int G = MM_MAX_OPS + 8;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (size_t ri = 0; ri < sizeof rows / sizeof rows[0]; ri++) {
            const int type = types[ti], nr = rows[ri], nt_max = 3;
            const int64_t n = quant_traits_ref(type)->blck == QK_K ? 256 : 128;
            mats m = make(type, n, G * nr, 1, 0x9e0u + (uint64_t)(type * 5 + nr));
            const size_t slice = m.wrow * (size_t)nr;
            uint8_t *pk = xalloc(slice * (size_t)G), *scratch = xalloc(m.wrow * PACK_ROWS);
            memcpy(pk, m.w, slice * (size_t)G);
            const int packs = quant_traits_get(type)->gemm_packed != NULL;
            for (int g = 0; packs && g < G; g++) pack_matrix(type, pk + (size_t)g * slice, m.wrow, nr, scratch, 0);
            uint64_t rng = 77 + (uint64_t)nr;
            float *x = xalloc(sizeof(float) * (size_t)(nt_max * G * n));
            float *tmp = xalloc(sizeof(float) * (size_t)(nt_max * n));
            for (int64_t i = 0; i < nt_max * G * n; i++) x[i] = tu_randf(&rng) * 2.0f;
            const size_t ny = (size_t)nt_max * (size_t)(G * nr);
            float *want = xalloc(sizeof(float) * ny), *y = xalloc(sizeof(float) * ny);
            mm_scratch sc = {.buf = NULL, .size = mm_scratch_bytes(n, nt_max) * (size_t)G};
            sc.buf = xalloc(sc.size);
            for (int nth = 1; nth <= 3; nth++) {
                tp_pool *pool = tp_create(nth);
                for (int nt = 1; nt <= nt_max; nt += 2)
                    for (int packed = 0; packed <= packs; packed++) {
                        for (int g = 0; g < G; g++) {
                            for (int t = 0; t < nt; t++)
                                memcpy(tmp + t * n, x + (int64_t)t * G * n + g * n, sizeof(float) * (size_t)n);
                            assert_int_equal(mm_mul(pool, type, m.w + (size_t)g * slice, n, nr, tmp, nt, want + g * nr,
                                                    G * nr, &sc), 0);
                        }
                        memset(y, 0xff, sizeof(float) * ny);
                        assert_int_equal(mm_mul_grouped(pool, type, packed ? pk : m.w, packed, slice, G, n, nr, x, n,
                                                        (int64_t)G * n, nt, y, nr, G * nr, tmp, &sc), 0);
                        if (memcmp(y, want, sizeof(float) * (size_t)nt * (size_t)(G * nr)) != 0)
                            fail_msg("%s: mm_mul_grouped %d threads %d tokens packed %d: not mm_mul's bits",
                                     quant_traits_get(type)->name, nth, nt, packed);
                    }
                tp_free(pool);
            }
            free(sc.buf);
            free(want);
            free(y);
            free(x);
            free(tmp);
            free(pk);
            free(scratch);
            mats_free(&m);
        }
}

/* The idle prefetch (matmul.c, threads.c): a sequence of products learns
 * what follows what, names it to the idle workers, and changes no bits;
 * hints at freed or NULL ranges are harmless. */
static void test_idle_prefetch(void **state) {
    (void)state;
    const int64_t n = 256;
    const int nr = 48, K = 3, rounds = 3;
    mats m = make(DF_TYPE_Q8_0, n, K * nr, 1, 0x1d1eu);
    const size_t slice = m.wrow * (size_t)nr;
    uint64_t rng = 5;
    float *x = xalloc(sizeof(float) * (size_t)n), *want = xalloc(sizeof(float) * (size_t)(K * nr));
    float *y = xalloc(sizeof(float) * (size_t)(K * nr));
    for (int64_t i = 0; i < n; i++) x[i] = tu_randf(&rng);
    mm_scratch plain = {.buf = xalloc(mm_scratch_bytes(n, 1)), .size = mm_scratch_bytes(n, 1)};
    for (int k = 0; k < K; k++)
        assert_int_equal(mm_mul(NULL, m.type, m.w + (size_t)k * slice, n, nr, x, 1, want + k * nr, nr, &plain), 0);
    for (int nth = 1; nth <= 3; nth++) {
        tp_pool *pool = tp_create(nth);
        mm_scratch sc = {.buf = plain.buf, .size = plain.size, .next = calloc(MM_NEXT_SLOTS, sizeof(mm_next))};
        assert_non_null(sc.next);
        for (int r = 0; r < rounds; r++) {
            memset(y, 0xff, sizeof(float) * (size_t)(K * nr));
            for (int k = 0; k < K; k++)
                assert_int_equal(mm_mul(pool, m.type, m.w + (size_t)k * slice, n, nr, x, 1, y + k * nr, nr, &sc), 0);
            if (memcmp(y, want, sizeof(float) * (size_t)(K * nr)) != 0)
                fail_msg("%d threads, round %d: the idle prefetch changed the bits", nth, r);
            uint8_t *buf = xalloc(1 << 20);
            tp_idle_prefetch(pool, buf, (size_t)64 << 20); /* past its end, then freed while the workers read it */
            free(buf);
            usleep(200);
            tp_idle_prefetch(pool, NULL, 0);
        }
        int learned = 0; /* each product's successor, the last one's the first */
        for (int k = 0; k < K; k++)
            for (int i = 0; i < MM_NEXT_SLOTS; i++)
                if (sc.next[i].key == m.w + (size_t)k * slice)
                    learned += sc.next[i].next == m.w + (size_t)((k + 1) % K) * slice && sc.next[i].len == slice &&
                               sc.next[i].seen == 2; /* confirmed: named to the workers */
        assert_int_equal(learned, K);
        assert_ptr_equal(sc.last, m.w + (size_t)(K - 1) * slice);
        free(sc.next);
        tp_free(pool);
    }
    free(plain.buf);
    free(x);
    free(want);
    free(y);
    mats_free(&m);
}

/* (4) attention helpers */
static void test_attention_kernels(void **state) {
    (void)state;
    uint64_t rng = 77;
    const int64_t dims[] = {64, 128, 72, 5};
    const int nrows = 37;
    for (int isa = 0; isa < QUANT_ISA_COUNT; isa++) {
        if (!quant_isa_available(isa)) continue;
        for (int ft = 0; ft < 2; ft++) {
            const int type = ft ? DF_TYPE_F16 : DF_TYPE_F32;
            const quant_traits *t = quant_traits_isa(type, isa), *r = quant_traits_ref(type);
            assert_non_null(t->dot_rows);
            assert_non_null(t->axpy_rows);
            for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
                const int64_t n = dims[di];
                const size_t stride = quant_row_size(type, n) + 6 * quant_row_size(type, 1); /* rows with a gap */
                uint8_t *rows = xalloc(stride * nrows);
                float *f = xalloc(sizeof(float) * (size_t)n), *q = xalloc(sizeof(float) * (size_t)n);
                float *a = xalloc(sizeof(float) * nrows);
                for (int j = 0; j < nrows; j++) {
                    for (int64_t i = 0; i < n; i++) f[i] = tu_randf(&rng);
                    r->from_float(f, rows + (size_t)j * stride, n);
                    a[j] = tu_randf(&rng);
                }
                for (int64_t i = 0; i < n; i++) q[i] = tu_randf(&rng) * 2;
                float out[64], ref[64], one[64];
                t->dot_rows(n, q, rows, stride, nrows, out);
                r->dot_rows(n, q, rows, stride, nrows, ref);
                for (int j = 0; j < nrows; j++) {
                    if (!(fabs((double)out[j] - ref[j]) <= 1e-5 * (double)n * 2))
                        fail_msg("%s/%s dot_rows n=%lld row %d: %.9g vs %.9g", r->name, quant_isa_str(isa),
                                 (long long)n, j, out[j], ref[j]);
                    t->dot_rows(n, q, rows + (size_t)j * stride, stride, 1, one);
                    assert_true(bits_equal(one[0], out[j]));
                }
                float *y = xalloc(sizeof(float) * (size_t)n), *yr = xalloc(sizeof(float) * (size_t)n);
                for (int64_t i = 0; i < n; i++) y[i] = yr[i] = tu_randf(&rng);
                t->axpy_rows(n, a, rows, stride, nrows, y);
                r->axpy_rows(n, a, rows, stride, nrows, yr);
                for (int64_t i = 0; i < n; i++)
                    if (!(fabs((double)y[i] - yr[i]) <= 1e-5 * nrows))
                        fail_msg("%s/%s axpy_rows n=%lld [%lld]: %.9g vs %.9g", r->name, quant_isa_str(isa),
                                 (long long)n, (long long)i, y[i], yr[i]);
                free(rows); free(f); free(q); free(a); free(y); free(yr);
            }
        }
        /* exp_sum over a softmax-like range, odd lengths */
        const quant_traits *t = quant_traits_isa(DF_TYPE_F32, isa), *r = quant_traits_ref(DF_TYPE_F32);
        assert_non_null(t->exp_sum);
        for (int n = 1; n < 300; n += 37) {
            float x1[300], x2[300];
            for (int i = 0; i < n; i++) x1[i] = x2[i] = -30.0f * (tu_randf(&rng) + 1.0f);
            x1[n / 2] = x2[n / 2] = 0.5f;
            const float s1 = t->exp_sum(x1, n, 0.5f), s2 = r->exp_sum(x2, n, 0.5f);
            assert_true(fabsf(s1 - s2) <= 2e-6f * s2);
            for (int i = 0; i < n; i++) assert_true(fabsf(x1[i] - x2[i]) <= 3e-7f * (x2[i] + 1e-30f) + 1e-38f);
        }
        /* swiglu over the range activations take, odd lengths */
        assert_non_null(t->swiglu);
        for (int n = 1; n < 300; n += 37) {
            float a1[300], a2[300], b[300];
            for (int i = 0; i < n; i++) {
                a1[i] = a2[i] = 12.0f * tu_randf(&rng) + (i == 3 ? 95.0f : 0.0f) - (i == 5 ? 95.0f : 0.0f);
                b[i] = tu_randf(&rng);
            }
            float s1[300], s2[300]; /* b NULL: silu alone, each lane as with b = 1 */
            for (int i = 0; i < n; i++) s1[i] = s2[i] = a1[i];
            t->swiglu(a1, b, n);
            r->swiglu(a2, b, n);
            for (int i = 0; i < n; i++) assert_true(fabsf(a1[i] - a2[i]) <= 4e-7f * fabsf(a2[i]) + 1e-30f);
            float one[300], s3[300];
            for (int i = 0; i < n; i++) one[i] = 1.0f, s3[i] = s1[i];
            t->swiglu(s1, NULL, n);
            r->swiglu(s2, NULL, n);
            t->swiglu(s3, one, n);
            for (int i = 0; i < n; i++) {
                assert_true(fabsf(s1[i] - s2[i]) <= 4e-7f * fabsf(s2[i]) + 1e-30f);
                assert_true(s1[i] == s3[i]);
            }
        }
        /* SiTU (Kimi K3) with and without the up branch's bound, across tanh's small and large
         * ranges and saturation, odd lengths: a few ulp of libm's tanhf and expf */
        assert_non_null(t->situ);
        for (int n = 1; n < 300; n += 37)
            for (int bounded = 0; bounded < 2; bounded++) {
                float a0[300], a1[300], a2[300], b[300];
                for (int i = 0; i < n; i++) {
                    const float mag = i % 3 == 0 ? 0.5f : i % 3 == 1 ? 8.0f : 60.0f;
                    a0[i] = a1[i] = a2[i] = mag * tu_randf(&rng);
                    b[i] = mag * tu_randf(&rng);
                }
                t->situ(a1, b, n, 3.0f, bounded ? 8.0f : 0.0f);
                r->situ(a2, b, n, 3.0f, bounded ? 8.0f : 0.0f);
                for (int i = 0; i < n; i++)
                    if (!(fabsf(a1[i] - a2[i]) <= 2e-6f * fabsf(a2[i]) + 1e-30f))
                        fail_msg("situ/%s n=%d [%d] (a %.9g, b %.9g): %.9g vs %.9g", quant_isa_str(isa), n, i, a0[i],
                                 b[i], a1[i], a2[i]);
            }
    }
}

/* (5) dynamic jobs: every item once, with more threads than cores */
typedef struct {
    atomic_long next;
    long n;
    atomic_int *hits;
    atomic_int static_calls;
} dyn_job;

static void dyn_fn(void *arg, int ith, int nth) {
    dyn_job *j = arg;
    (void)ith;
    (void)nth;
    for (long i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) atomic_fetch_add(&j->hits[i], 1);
}

static void static_fn(void *arg, int ith, int nth) {
    dyn_job *j = arg;
    assert_true(ith >= 0 && ith < nth);
    atomic_fetch_add(&j->static_calls, 1);
}

static void test_dynamic_jobs(void **state) {
    (void)state;
    for (int nth = 1; nth <= 5; nth += 2) {
        tp_pool *pool = tp_create(nth);
        assert_non_null(pool);
        dyn_job j;
        j.n = 257;
        j.hits = calloc((size_t)j.n, sizeof(atomic_int));
        assert_non_null(j.hits);
        for (int rep = 0; rep < 300; rep++) {
            atomic_store(&j.next, 0);
            for (long i = 0; i < j.n; i++) atomic_store(&j.hits[i], 0);
            tp_run_dyn(pool, dyn_fn, &j);
            for (long i = 0; i < j.n; i++) assert_int_equal(atomic_load(&j.hits[i]), 1);
            if (rep % 3 == 0) {
                atomic_store(&j.static_calls, 0);
                tp_run(pool, static_fn, &j);
                assert_int_equal(atomic_load(&j.static_calls), nth);
            }
        }
        free(j.hits);
        tp_free(pool);
    }
}

/* DSA sparse attention reads only the selected keys and values: with NaN in
 * every unselected K and V row of the cache the outputs are the same bits as
 * with finite rows, and they match a softmax over the selected keys alone.
 * Queries with no more keys than sel_k read every key. */
static void attend_sel(tp_pool *pool, const float *kv, const float *q, int hd, int n_ctx, int n_tok, int pos,
                       const int32_t *sel, int sel_k, float *out) {
    const int64_t stride = df_attn_scratch_floats(n_ctx);
    float *scratch = xalloc(sizeof(float) * (size_t)(stride * tp_size(pool)));
    df_attn_desc d;
    memset(&d, 0, sizeof d);
    d.k = d.v = (const uint8_t *)kv;
    d.k_stride = d.v_stride = sizeof(float) * (size_t)hd;
    d.kv_type = DF_TYPE_F32;
    d.n_head = d.n_head_kv = 1;
    d.hd = d.hdv = hd;
    d.q = q;
    d.q_tok = hd;
    d.out = out;
    d.o_tok = hd;
    d.scale = 1.0f / sqrtf((float)hd);
    d.pos = pos;
    d.n_tok = n_tok;
    d.sel = sel;
    d.sel_k = sel_k;
    df_attention_run(pool, scratch, stride, &d);
    free(scratch);
}

static void test_sparse_attention_reads_selected(void **state) {
    (void)state;
    enum { HD = 40, NCTX = 200, NTOK = 7, POS = 150, K = 12 };
    uint64_t rng = 99;
    float *kv = xalloc(sizeof(float) * NCTX * HD), *bad = xalloc(sizeof(float) * NCTX * HD);
    float *q = xalloc(sizeof(float) * NTOK * HD), *o1 = xalloc(sizeof(float) * NTOK * HD);
    float *o2 = xalloc(sizeof(float) * NTOK * HD);
    for (int i = 0; i < NCTX * HD; i++) kv[i] = tu_randf(&rng);
    for (int i = 0; i < NTOK * HD; i++) q[i] = 2 * tu_randf(&rng);
    int32_t sel[NTOK * K];
    uint8_t used[NCTX] = {0};
    for (int t = 0; t < NTOK; t++) /* ascending: runs of neighbours, a block edge (64, 128), the token itself */
        for (int j = 0; j < K; j++) {
            static const int at[K] = {0, 1, 2, 40, 63, 64, 65, 100, 127, 128, 140, 0};
            sel[t * K + j] = j == K - 1 ? POS + t : at[j];
            used[sel[t * K + j]] = 1;
        }
    memcpy(bad, kv, sizeof(float) * NCTX * HD);
    for (int p = 0; p < POS + NTOK; p++)
        if (!used[p])
            for (int i = 0; i < HD; i++) bad[p * HD + i] = NAN;
    tp_pool *pool = tp_create(2);
    assert_non_null(pool);
    attend_sel(pool, kv, q, HD, NCTX, NTOK, POS, sel, K, o1);
    attend_sel(pool, bad, q, HD, NCTX, NTOK, POS, sel, K, o2);
    assert_memory_equal(o1, o2, sizeof(float) * NTOK * HD);
    for (int t = 0; t < NTOK; t++) { /* the reference: softmax over the selected keys */
        double w[K], mx = -INFINITY, sum = 0;
        for (int j = 0; j < K; j++) {
            double dot = 0;
            for (int i = 0; i < HD; i++) dot += (double)q[t * HD + i] * kv[sel[t * K + j] * HD + i];
            w[j] = dot / sqrt((double)HD);
            mx = w[j] > mx ? w[j] : mx;
        }
        for (int j = 0; j < K; j++) sum += (w[j] = exp(w[j] - mx));
        for (int i = 0; i < HD; i++) {
            double ref = 0;
            for (int j = 0; j < K; j++) ref += w[j] / sum * kv[sel[t * K + j] * HD + i];
            if (!(fabs(ref - o1[t * HD + i]) <= 1e-5))
                fail_msg("token %d [%d]: %.9g vs reference %.9g", t, i, o1[t * HD + i], ref);
        }
    }
    /* a query with no more keys than sel_k reads them all (no NaN allowed there) */
    int32_t few[K];
    for (int j = 0; j < K; j++) few[j] = j;
    attend_sel(pool, kv, q, HD, NCTX, 1, K - 1, few, K, o1);
    for (int i = 0; i < HD; i++) assert_true(isfinite(o1[i]));
    tp_free(pool);
    free(kv); free(bad); free(q); free(o1); free(o2);
}

/* (7) The one accumulation order (kern_avx2.c's gemm tiles, kern_neon.c's
 * design comment), with the C library's fmaf, which rounds once wherever it
 * runs: per row and token, block by block, acc = fmaf(S, dw * dx, acc), S
 * the block's exact integer sum; q4_K and q5_K: accS = fmaf(S, d * dx, accS)
 * and accM = fmaf(M, -dmin * dx, accM) per super-block (S = sum_j sc_j *
 * dot_j, M = sum_j m_j * the activation sum of sub-block j), then accS +
 * accM; q6_K the same with its two partial sums (kern_avx2.c's q6_K tiles). */
static float one_order(int type, int64_t n, const uint8_t *w, const uint8_t *x) {
    float acc = 0, accM = 0;
    if (type == DF_TYPE_Q4_K || type == DF_TYPE_Q5_K) {
        const block_q8_K *y = (const block_q8_K *)(const void *)x;
        const size_t bs = type == DF_TYPE_Q4_K ? sizeof(block_q4_K) : sizeof(block_q5_K);
        for (int64_t i = 0; i < n / QK_K; i++) {
            const block_q4_K *a4 = (const block_q4_K *)(const void *)(w + (size_t)i * bs);
            const block_q5_K *a5 = (const block_q5_K *)(const void *)(w + (size_t)i * bs);
            const uint8_t *qs = type == DF_TYPE_Q4_K ? a4->qs : a5->qs;
            uint32_t u[4];
            uint8_t sm[16]; /* 8 scales, 8 mins */
            quant_k4_unpack(type == DF_TYPE_Q4_K ? a4->scales : a5->scales, u);
            memcpy(sm, u, sizeof sm);
            int32_t S = 0, M = 0;
            for (int j = 0; j < 8; j++) {
                int32_t dot = 0;
                for (int l = 0; l < 32; l++) {
                    int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
                    if (type == DF_TYPE_Q5_K) q |= ((a5->qh[l] >> j) & 1) << 4;
                    dot += q * y[i].qs[32 * j + l];
                }
                S += sm[j] * dot;
                M += sm[8 + j] * (y[i].bsums[2 * j] + y[i].bsums[2 * j + 1]);
            }
            const uint16_t d = type == DF_TYPE_Q4_K ? a4->d : a5->d, dmin = type == DF_TYPE_Q4_K ? a4->dmin : a5->dmin;
            acc = fmaf((float)S, df_fp16_to_fp32(d) * y[i].d, acc);
            accM = fmaf((float)M, -df_fp16_to_fp32(dmin) * y[i].d, accM);
        }
        return acc + accM;
    }
    if (type == DF_TYPE_Q6_K) { /* two partial sums a super-block: P0 of the even sub-blocks, P1 of the odd */
        const block_q8_K *y = (const block_q8_K *)(const void *)x;
        for (int64_t i = 0; i < n / QK_K; i++) {
            const block_q6_K *a = (const block_q6_K *)(const void *)(w + (size_t)i * sizeof(block_q6_K));
            int32_t P[2] = {0, 0};
            for (int j = 0; j < 16; j++) { /* sub-block j of 16 elements */
                int32_t dot = 0;
                for (int l = 16 * j; l < 16 * j + 16; l++) {
                    const int h = l / 128, e = l % 128, q = (a->ql[64 * h + e % 64] >> (4 * (e / 64))) & 15;
                    dot += (q | ((a->qh[32 * h + e % 32] >> (2 * (e / 32))) & 3) << 4) * y[i].qs[l];
                }
                P[j % 2] += a->scales[j] * dot;            /* the unsigned values' products */
                P[j / 8] -= 32 * a->scales[j] * y[i].bsums[j]; /* less 32 x the scaled activation sums */
            }
            const float dd = df_fp16_to_fp32(a->d) * y[i].d;
            acc = fmaf((float)P[0], dd, acc);
            accM = fmaf((float)P[1], dd, accM);
        }
        return acc + accM;
    }
    const block_q8_0 *y = (const block_q8_0 *)(const void *)x;
    for (int64_t b = 0; b < n / 32; b++) {
        int32_t S = 0;
        float dw;
        for (int l = 0; l < 32; l++) {
            int v;
            if (type == DF_TYPE_Q8_0) {
                const block_q8_0 *a = (const block_q8_0 *)(const void *)w + b;
                v = a->qs[l], dw = df_fp16_to_fp32(a->d);
            } else if (type == DF_TYPE_MXFP4) {
                const block_mxfp4 *a = (const block_mxfp4 *)(const void *)w + b;
                v = df_kvalues_mxfp4[(a->qs[l % 16] >> (4 * (l / 16))) & 15], dw = quant_e8m0_half(a->e);
            } else if (type == DF_TYPE_IQ4_NL) {
                const block_iq4_nl *a = (const block_iq4_nl *)(const void *)w + b;
                v = df_kvalues_iq4nl[(a->qs[l % 16] >> (4 * (l / 16))) & 15], dw = df_fp16_to_fp32(a->d);
            } else {
                const block_q4_0 *a = (const block_q4_0 *)(const void *)w + b;
                v = ((a->qs[l % 16] >> (4 * (l / 16))) & 15) - 8, dw = df_fp16_to_fp32(a->d);
            }
            S += v * y[b].qs[l];
        }
        acc = fmaf((float)S, dw * df_fp16_to_fp32(y[b].d), acc);
    }
    return acc;
}

static void test_one_order(void **state) {
    (void)state;
    static const int types[] = {DF_TYPE_Q8_0,  DF_TYPE_Q4_0, DF_TYPE_MXFP4, DF_TYPE_IQ4_NL,
                                DF_TYPE_Q4_K, DF_TYPE_Q5_K, DF_TYPE_Q6_K};
    const int nr = 21, nc = 9;
    int checked = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
        for (int k = 0; k < 3; k++) {
            const int type = types[ti];
            const int64_t n = quant_traits_ref(type)->blck == QK_K ? QK_K * (k + 1) : 32 * (k * k * 5 + 1);
            mats m = make(type, n, nr, nc, 0x0de5u + (uint64_t)(type * 3 + k));
            if (type == DF_TYPE_MXFP4) /* E8M0 scales from the subnormal ones to the largest */
                for (int r = 0; r < nr; r++)
                    for (int64_t i = 0; i < n / 32; i++)
                        ((block_mxfp4 *)(void *)(m.w + (size_t)r * m.wrow))[i].e =
                            (uint8_t)((r + i) % 2 ? (r + i) % 4 : 250 + (r + i) % 5);
            float *y = xalloc(sizeof(float) * (size_t)(nr * nc));
            for (int isa = QUANT_ISA_SCALAR + 1; isa < QUANT_ISA_COUNT; isa++) {
                const quant_traits *t = quant_traits_isa(type, isa);
                if (!quant_isa_available(isa) || !t) continue;
                checked++;
                gemm(t, &m, 0, nr, 0, nc, y, (size_t)nr);
                for (int c = 0; c < nc; c++)
                    for (int r = 0; r < nr; r++) {
                        const float want = one_order(type, n, m.w + (size_t)r * m.wrow, m.x + (size_t)c * m.xrow);
                        if (!bits_equal(y[(size_t)c * nr + r], want))
                            fail_msg("%s %s n=%lld: y[%d,%d] = %.9g, the one order %.9g", quant_isa_str(isa), t->name,
                                     (long long)n, r, c, y[(size_t)c * nr + r], want);
                    }
            }
            free(y);
            mats_free(&m);
        }
    if (!quant_isa_available(QUANT_ISA_AVX2) && !quant_isa_available(QUANT_ISA_NEON)) skip();
    assert_true(checked > 0);
}

/* (8) dn_gated_delta's AVX2 and portable blocks: the same state and outputs,
 * bit for bit, for head sizes with and without a tail past the last 16
 * values, per-channel and per-head decays, tiled and interleaved key heads;
 * and both within 1e-4 of the recurrence in double precision. */
static void test_delta_rule_builds(void **state) {
    (void)state;
    static const int hds[] = {128, 40};
    tp_pool *pool = tp_create(2);
    for (int hi = 0; hi < 2; hi++)
        for (int mode = 0; mode < 2; mode++) {
            const int hd = hds[hi], H = 4, HK = 2, n = 5;
            const dn_shape sh = {H, HK, hd, mode, mode, (int64_t)HK * hd, (int64_t)H * hd, (int64_t)H * hd};
            const size_t ns = (size_t)H * hd * hd, nq = (size_t)n * HK * hd, nv = (size_t)n * H * hd;
            const size_t ng = mode ? (size_t)n * H : (size_t)n * H * hd;
            float *s0 = xalloc(4 * ns), *s1 = xalloc(4 * ns), *q = xalloc(4 * nq), *k = xalloc(4 * nq);
            float *v = xalloc(4 * nv), *g = xalloc(4 * ng), *beta = xalloc(4 * (size_t)n * H);
            float *o0 = xalloc(4 * nv), *o1 = xalloc(4 * nv);
            double *S = xalloc(8 * ns);
            uint64_t rng = 0xde17a + (uint64_t)(hi * 2 + mode);
            for (size_t i = 0; i < ns; i++) S[i] = s0[i] = s1[i] = tu_randf(&rng) * 0.1f;
            for (size_t i = 0; i < nq; i++) q[i] = tu_randf(&rng) * 0.2f, k[i] = tu_randf(&rng) * 0.2f;
            for (size_t i = 0; i < nv; i++) v[i] = tu_randf(&rng);
            for (size_t i = 0; i < ng; i++) g[i] = -0.5f * fabsf(tu_randf(&rng));
            for (int i = 0; i < n * H; i++) beta[i] = 0.5f + 0.5f * fabsf(tu_randf(&rng));
            dn_gated_delta(pool, &sh, s0, q, k, v, g, beta, n, o0);
            dn_force_baseline(1);
            dn_gated_delta(pool, &sh, s1, q, k, v, g, beta, n, o1);
            dn_force_baseline(0);
            assert_memory_equal(s0, s1, 4 * ns);
            assert_memory_equal(o0, o1, 4 * nv);
            for (int t = 0; t < n; t++) /* the recurrence as deltanet.h states it, in doubles */
                for (int h = 0; h < H; h++) {
                    const int hk = mode ? h / (H / HK) : h % HK;
                    const float *qt = q + (size_t)t * HK * hd + (size_t)hk * hd, *kt = k + (size_t)t * HK * hd + (size_t)hk * hd;
                    double *Sh = S + (size_t)h * hd * hd, d[128];
                    for (int i = 0; i < hd; i++) {
                        const double dec = exp(mode ? g[t * H + h] : g[(size_t)t * H * hd + (size_t)h * hd + i]);
                        for (int jv = 0; jv < hd; jv++) Sh[i * hd + jv] *= dec;
                    }
                    for (int jv = 0; jv < hd; jv++) {
                        double a = 0;
                        for (int i = 0; i < hd; i++) a += Sh[i * hd + jv] * kt[i];
                        d[jv] = (v[(size_t)t * H * hd + (size_t)h * hd + jv] - a) * beta[t * H + h];
                    }
                    for (int jv = 0; jv < hd; jv++) {
                        double a = 0;
                        for (int i = 0; i < hd; i++) a += (Sh[i * hd + jv] += kt[i] * d[jv]) * qt[i];
                        const double want = a / sqrt((double)hd), got = o0[(size_t)t * H * hd + (size_t)h * hd + jv];
                        if (!(fabs(got - want) <= 1e-4 * (1 + fabs(want))))
                            fail_msg("hd %d mode %d: o[%d,%d,%d] = %.9g, double %.9g", hd, mode, t, h, jv, got, want);
                    }
                }
            free(s0); free(s1); free(q); free(k); free(v); free(g); free(beta); free(o0); free(o1); free(S);
        }
    tp_free(pool);
    if (!quant_isa_available(QUANT_ISA_AVX2)) skip(); /* one version runs here: the comparison was of it with itself */
}

/* (9) dn_short_conv: split over 1-3 threads or run alone, the window of 4 (its unrolled copy) and others,
 * one token and several: the same bits as the convolution written out plainly, the state advanced the same. */
static void test_short_conv(void **state) {
    (void)state;
    static const int dconvs[] = {4, 2, 3, 5, 1};
    for (int di = 0; di < 5; di++)
        for (int n = 1; n <= 3; n += 2)
            for (int nth = 0; nth <= 3; nth++) {
                const int dc = dconvs[di], ns = dc - 1;
                const int64_t ch = 37 + 16 * di; /* not a multiple of a vector or of the threads */
                tp_pool *pool = nth ? tp_create(nth) : NULL;
                float *x = xalloc(4 * (size_t)(n * ch)), *xr = xalloc(4 * (size_t)(n * ch));
                float *st = xalloc(4 * (size_t)(ch * (ns ? ns : 1))), *sr = xalloc(4 * (size_t)(ch * (ns ? ns : 1)));
                float *w = xalloc(4 * (size_t)(ch * dc));
                uint64_t rng = 0xc0417 + (uint64_t)(di * 8 + n * 4 + nth);
                for (int64_t i = 0; i < n * ch; i++) x[i] = xr[i] = tu_randf(&rng);
                for (int64_t i = 0; i < ch * ns; i++) st[i] = sr[i] = tu_randf(&rng);
                for (int64_t i = 0; i < ch * dc; i++) w[i] = tu_randf(&rng);
                dn_short_conv(pool, x, n, ch, dc, st, w);
                for (int64_t c = 0; c < ch; c++) /* the window oldest first, then the new input; SiLU as ggml's */
                    for (int t = 0; t < n; t++) {
                        float *win = sr + c * ns;
                        float sum = 0.0f;
                        const float in = xr[t * ch + c];
                        for (int j = 0; j < ns; j++) sum += win[j] * w[c * dc + j];
                        sum += in * w[c * dc + ns];
                        if (ns > 0) {
                            memmove(win, win + 1, 4 * (size_t)(ns - 1));
                            win[ns - 1] = in;
                        }
                        xr[t * ch + c] = sum;
                    }
                op_silu(xr, n * ch);
                assert_memory_equal(x, xr, 4 * (size_t)(n * ch));
                assert_memory_equal(st, sr, 4 * (size_t)(ch * ns));
                free(x); free(xr); free(st); free(sr); free(w);
                if (pool) tp_free(pool);
            }
}

/* (10) The lanes of ops.c's double sums: within a few units of double's last place of one running sum, for
 * lengths around the lanes (the tail alone, exact multiples, one past), and op_rmsnorm still x * scale * w. */
static void test_lane_sums(void **state) {
    (void)state;
    static const int lens[] = {0, 1, 7, 8, 9, 16, 23, 2048, 7169};
    float *x = xalloc(4 * 7169), *w = xalloc(4 * 7169), *out = xalloc(4 * 7169);
    uint64_t rng = 0x1a9e5;
    for (int i = 0; i < 7169; i++) x[i] = tu_randf(&rng) * 3.0f, w[i] = tu_randf(&rng);
    for (int li = 0; li < 9; li++) {
        const int n = lens[li];
        double sq = 0.0, dot = 0.0, mag = 0.0;
        const float scale = 0.37f;
        for (int i = 0; i < n; i++) {
            sq += (double)x[i] * (double)x[i];
            dot += (double)(x[i] * scale * w[i]);
            mag += fabs((double)(x[i] * scale * w[i]));
        }
        const double got_sq = op_sum_sq(x, n), got_dot = op_norm_dot(x, scale, w, n);
        if (!(fabs(got_sq - sq) <= 1e-14 * sq)) fail_msg("n %d: sum of squares %.17g, one chain %.17g", n, got_sq, sq);
        if (!(fabs(got_dot - dot) <= 1e-14 * mag)) fail_msg("n %d: dot %.17g, one chain %.17g", n, got_dot, dot);
        if (n == 0) continue;
        op_rmsnorm(out, x, w, n, 1e-5f);
        const float sc = op_rms_scale(x, n, 1e-5f);
        assert_true(fabs(sc - 1.0 / sqrt(sq / n + 1e-5)) <= 1e-6 * sc);
        for (int i = 0; i < n; i++) assert_true(out[i] == x[i] * sc * w[i]);
    }
    free(x); free(w); free(out);
}

int main(void) {
    quant_init();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_gemm_avx512_same_as_avx2),
        cmocka_unit_test(test_mm_mul),
        cmocka_unit_test(test_grouped),
        cmocka_unit_test(test_idle_prefetch),
        cmocka_unit_test(test_packed),
        cmocka_unit_test(test_one_order),
        cmocka_unit_test(test_delta_rule_builds),
        cmocka_unit_test(test_short_conv),
        cmocka_unit_test(test_lane_sums),
        cmocka_unit_test(test_attention_kernels),
        cmocka_unit_test(test_sparse_attention_reads_selected),
        cmocka_unit_test(test_dynamic_jobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
