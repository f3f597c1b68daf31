/*
 * test_amx.c - the AMX software model (amx_tile.h) against the
 * instructions' definitions, and the AMX q8_0, mxfp4, q4_0, iq4_nl, q4_K, q5_K and q6_K gemms
 * (amx_q8_0.h, amx_q4_K.h) run on the model against the scalar reference, float64 and
 * the other tables' gemm bits, on every machine. Under DELTAFIN_AMX=model / off it also checks
 * the run-time selection (tests/run.sh runs it both ways).
 */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "amx_tile.h"
#include "quant_isa.h"

static amx_tilecfg cfg3(int m, int k4, int ncol) { /* C 0: m x ncol int32, A 1: m x 4k4, B 2: k4 x 4ncol */
    amx_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[0] = (uint8_t)m;
    c.colsb[0] = (uint16_t)(4 * ncol);
    c.rows[1] = (uint8_t)m;
    c.colsb[1] = (uint16_t)(4 * k4);
    c.rows[2] = (uint8_t)k4;
    c.colsb[2] = (uint16_t)(4 * ncol);
    return c;
}

/* A fresh model configured by cfg3(M, K4, N), with C, A, B loaded from
 * 16 x 64-byte buffers into tiles 0, 1, 2. */
static void setup3(amx_model *m, int M, int K4, int N, const void *c0, const void *a, const void *b) {
    memset(m, 0, sizeof *m);
    const amx_tilecfg c = cfg3(M, K4, N);
    assert_int_equal(amx_m_ldtilecfg(m, &c), AMX_OK);
    assert_int_equal(amx_m_loadd(m, 0, c0, 64), AMX_OK);
    assert_int_equal(amx_m_loadd(m, 1, a, 64), AMX_OK);
    assert_int_equal(amx_m_loadd(m, 2, b, 64), AMX_OK);
}

/* tdpb{s,u}{s,u}d on random tiles of odd shapes against the definition,
 * with C starting near the int32 limits so the sums wrap. */
static void test_model_dpb(void **state) {
    (void)state;
    uint64_t rng = 99;
    static const int shapes[][3] = {{16, 16, 16}, {1, 1, 1}, {7, 3, 5}, {16, 4, 16}, {5, 16, 2}};
    for (int si = 0; si < 5; si++)
        for (int sg = 0; sg < 4; sg++) {
            const int M = shapes[si][0], K4 = shapes[si][1], N = shapes[si][2];
            const int as = sg & 1, bs = sg >> 1;
            uint8_t a[16][64], b[16][64];
            int32_t c0[16][16], got[16][16];
            for (int i = 0; i < 16; i++)
                for (int j = 0; j < 64; j++) {
                    a[i][j] = (uint8_t)tu_rand(&rng);
                    b[i][j] = (uint8_t)tu_rand(&rng);
                }
            for (int i = 0; i < 16; i++)
                for (int j = 0; j < 16; j++) c0[i][j] = (int32_t)(tu_rand(&rng) % 2 ? INT32_MAX - 1000 : INT32_MIN + 1000);
            amx_model m;
            setup3(&m, M, K4, N, c0, a, b);
            assert_int_equal(amx_m_dpb(&m, 0, 1, 2, as, bs), AMX_OK);
            memset(got, 0x55, sizeof got);
            assert_int_equal(amx_m_stored(&m, 0, got, 64), AMX_OK);
            for (int i = 0; i < 16; i++)
                for (int n = 0; n < 16; n++) {
                    if (i >= M || n >= N) { /* tilestored writes only rows x colsb */
                        int32_t u;
                        memset(&u, 0x55, 4);
                        assert_int_equal(got[i][n], u);
                        continue;
                    }
                    int64_t s = c0[i][n];
                    for (int k = 0; k < 4 * K4; k++) {
                        const int x = as ? (int8_t)a[i][k] : a[i][k];
                        const int y = bs ? (int8_t)b[k / 4][4 * n + k % 4] : b[k / 4][4 * n + k % 4];
                        s += x * y;
                    }
                    assert_int_equal(got[i][n], (int32_t)(uint32_t)(uint64_t)s);
                }
            /* what lies past rows / colsb in the register is zero */
            for (int i = 0; i < 16; i++)
                for (int j = 0; j < 64; j++)
                    if (i >= M || j >= 4 * N) assert_int_equal(m.t[0][i][j], 0);
            assert_int_equal(m.fault, AMX_OK);
        }
}

/* Loads zero the rest of the register; bad configurations and shapes fault
 * without changing a register. */
static void test_model_faults(void **state) {
    (void)state;
    amx_model m;
    memset(&m, 0, sizeof m);
    uint8_t buf[16][64];
    memset(buf, 0x7F, sizeof buf);
    assert_int_equal(amx_m_loadd(&m, 0, buf, 64), AMX_FAULT_UD); /* nothing configured */
    amx_tilecfg c = cfg3(3, 2, 4);
    assert_int_equal(amx_m_ldtilecfg(&m, &c), AMX_OK);
    assert_int_equal(amx_m_loadd(&m, 1, buf, 64), AMX_OK);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 64; j++) assert_int_equal(m.t[1][i][j], i < 3 && j < 8 ? 0x7F : 0);
    assert_int_equal(amx_m_loadd(&m, 5, buf, 64), AMX_FAULT_UD); /* unconfigured tile */
    assert_int_equal(amx_m_dpb(&m, 0, 1, 1, 1, 1), AMX_FAULT_UD); /* same tile twice */
    amx_tilecfg bad[7];
    for (int i = 0; i < 7; i++) bad[i] = cfg3(3, 2, 4);
    bad[0].palette = 2;
    bad[1].rows[0] = 17;
    bad[2].colsb[1] = 68;
    bad[3].rows[4] = 0, bad[3].colsb[4] = 4;
    bad[4].reserved[3] = 1;
    bad[5].rows[9] = 1, bad[5].colsb[9] = 4;
    bad[6].rows[5] = 2, bad[6].colsb[5] = 0;
    for (int i = 0; i < 7; i++) {
        amx_model f = m;
        f.fault = AMX_OK;
        assert_int_equal(amx_m_ldtilecfg(&f, &bad[i]), AMX_FAULT_GP);
        assert_memory_equal(f.t, m.t, sizeof m.t);
        assert_int_equal(f.rows[0], 3);
    }
    /* shape mismatches: C rows != A rows, A colsb != 4 * B rows, C colsb != B colsb */
    static const int mis[][6] = {{4, 2, 4, 3, 2, 4}, {3, 3, 4, 3, 2, 4}, {3, 2, 4, 3, 2, 3}};
    for (int i = 0; i < 3; i++) {
        amx_tilecfg x;
        memset(&x, 0, sizeof x);
        x.palette = 1;
        x.rows[0] = (uint8_t)mis[i][0], x.colsb[0] = (uint16_t)(4 * mis[i][2]);
        x.rows[1] = (uint8_t)mis[i][3], x.colsb[1] = (uint16_t)(4 * mis[i][1]);
        x.rows[2] = 2, x.colsb[2] = (uint16_t)(4 * mis[i][5]);
        amx_model f;
        memset(&f, 0, sizeof f);
        assert_int_equal(amx_m_ldtilecfg(&f, &x), AMX_OK);
        assert_int_equal(amx_m_dpb(&f, 0, 1, 2, 1, 1), AMX_FAULT_UD);
        assert_int_equal(amx_m_dpbf16ps(&f, 0, 1, 2), AMX_FAULT_UD);
        assert_int_equal(f.fault, AMX_FAULT_UD);
    }
    /* palette 0 releases */
    amx_tilecfg z;
    memset(&z, 0, sizeof z);
    assert_int_equal(amx_m_ldtilecfg(&m, &z), AMX_OK);
    assert_int_equal(amx_m_zero(&m, 0), AMX_FAULT_UD);
}

static uint16_t f2bf(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)(u >> 16); } /* truncation: exact for the values used */
static float bf2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }

/* tdpbf16ps: each product exact, added to C in pair order (k, then i);
 * denormal inputs read as zero. */
static void test_model_bf16(void **state) {
    (void)state;
    uint64_t rng = 5;
    const int M = 6, K4 = 5, N = 7;
    uint16_t a[16][32], b[16][32];
    float c0[16][16], got[16][16];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 32; j++) {
            a[i][j] = f2bf(tu_randf(&rng) * 4);
            b[i][j] = f2bf(tu_randf(&rng));
        }
    a[2][3] = 0x0001; /* denormal: reads as 0 */
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) c0[i][j] = tu_randf(&rng);
    amx_model m;
    setup3(&m, M, K4, N, c0, a, b);
    assert_int_equal(amx_m_dpbf16ps(&m, 0, 1, 2), AMX_OK);
    assert_int_equal(amx_m_stored(&m, 0, got, 64), AMX_OK);
    for (int i = 0; i < M; i++)
        for (int n = 0; n < N; n++) {
            float s = c0[i][n];
            double d = c0[i][n];
            for (int k = 0; k < 2 * K4; k++) {
                const float x = (i == 2 && k == 3) ? 0.0f : bf2f(a[i][k]), y = bf2f(b[k / 2][2 * n + k % 2]);
                s = s + (float)((double)x * y);
                d += (double)x * y;
            }
            assert_memory_equal(&got[i][n], &s, 4);
            assert_true(fabs((double)got[i][n] - d) < 1e-5);
        }
}

/* Random weights of a type and activations of its vec_type. */
typedef struct {
    int type;
    int64_t n;
    int nr, nc;
    size_t wrow, xrow;
    uint8_t *w, *x;
    float *wd, *xd;
} mats8;

static mats8 make_mats(int type, int64_t n, int nr, int nc, uint64_t seed) {
    const quant_traits *t = quant_traits_ref(type), *v = quant_traits_ref(t->vec_type);
    mats8 q = {.type = type, .n = n, .nr = nr, .nc = nc, .wrow = quant_row_size(type, n),
               .xrow = quant_row_size(t->vec_type, n)};
    q.w = malloc(q.wrow * (size_t)nr);
    q.x = malloc(q.xrow * (size_t)nc);
    q.wd = malloc(sizeof(float) * (size_t)(n * nr));
    q.xd = malloc(sizeof(float) * (size_t)(n * nc));
    float *f = malloc(sizeof(float) * (size_t)n);
    assert_true(q.w && q.x && q.wd && q.xd && f);
    uint64_t rng = seed | 1;
    for (int r = 0; r < nr + nc; r++) {
        const float mag = r % 3 == 0 ? 4.0f : (r % 3 == 1 ? 0.05f : 1.0f);
        for (int64_t k = 0; k < n; k++) f[k] = tu_randf(&rng) * mag;
        const quant_traits *q_t = r < nr ? t : v;
        uint8_t *dst = r < nr ? q.w + (size_t)r * q.wrow : q.x + (size_t)(r - nr) * q.xrow;
        float *dd = r < nr ? q.wd + (int64_t)r * n : q.xd + (int64_t)(r - nr) * n;
        q_t->from_float(f, dst, n);
        q_t->to_float(dst, dd, n);
    }
    free(f);
    return q;
}

static void free_mats(mats8 *q) {
    free(q->w);
    free(q->x);
    free(q->wd);
    free(q->xd);
}

/* A model-backed gemm on nr x nc at (r0, c0) of q, into y (ldy). */
static void model_gemm(quant_gemm_fn fn, const mats8 *q, int r0, int nr, int c0, int nc, float *y, size_t ldy) {
    fn(q->n, q->w + (size_t)r0 * q->wrow, q->wrow, nr, q->x + (size_t)c0 * q->xrow, q->xrow, nc, y, ldy);
}

/* The model-backed gemm fn of type against the scalar reference and float64, alone vs in the product, and the
 * same bits as every other table's gemm of the type that keeps the AVX2 tile's order (AVX2, AVX-512, and AMX on
 * the hardware). */
static void check_gemm_model(int type, quant_gemm_fn fn, const int64_t *ns, int n_ns) {
    static const int shapes[][2] = {{16, 16}, {17, 19}, {5, 3}, {1, 1}, {33, 8}, {16, 70}};
    const long faults0 = amx_model_faults();
    for (int ni = 0; ni < n_ns; ni++)
        for (int si = 0; si < 6; si++) {
            const int64_t n = ns[ni];
            const int nr = shapes[si][0], nc = shapes[si][1];
            mats8 q = make_mats(type, n, nr, nc, 0xA3u + (uint64_t)(ni * 7 + si));
            float *y = malloc(sizeof(float) * (size_t)(nr * nc)), *y2 = malloc(sizeof(float) * (size_t)(nr * nc));
            assert_true(y && y2);
            model_gemm(fn, &q, 0, nr, 0, nc, y, (size_t)nr);
            const quant_traits *ref = quant_traits_ref(type);
            for (int c = 0; c < nc; c++)
                for (int r = 0; r < nr; r++) {
                    const float got = y[(size_t)c * nr + r];
                    float want;
                    ref->vec_dot(n, q.w + (size_t)r * q.wrow, q.x + (size_t)c * q.xrow, &want);
                    double exact = 0, mag = 0;
                    for (int64_t k = 0; k < n; k++) {
                        const double p = (double)q.wd[(int64_t)r * n + k] * q.xd[(int64_t)c * n + k];
                        exact += p;
                        mag += fabs(p);
                    }
                    if (!(fabs((double)got - want) <= 1e-5 * mag + 1e-30) || !(fabs((double)got - exact) <= 1e-5 * mag + 1e-30))
                        fail_msg("%s n=%lld %dx%d (%d,%d): amx model %.9g, scalar %.9g, float64 %.9g", ref->name,
                                 (long long)n, nr, nc, r, c, got, want, exact);
                    /* alone: the same bits */
                    float one;
                    model_gemm(fn, &q, r, 1, c, 1, &one, 1);
                    assert_memory_equal(&one, &got, 4);
                }
            for (int isa = QUANT_ISA_AVX2; isa < QUANT_ISA_COUNT; isa++) {
                if (isa == QUANT_ISA_NEON || !quant_isa_available(isa)) continue;
                const quant_traits *t = quant_traits_isa(type, isa);
                if (!t->gemm && type == DF_TYPE_Q5_K) continue; /* no AVX2 q5_K tile: vec_dot pairs, another order */
                assert_non_null(t->gemm);
                t->gemm(n, q.w, q.wrow, nr, q.x, q.xrow, nc, y2, (size_t)nr);
                for (int i = 0; i < nr * nc; i++)
                    if (memcmp(&y[i], &y2[i], 4))
                        fail_msg("%s n=%lld %dx%d: [%d] amx model %.9g, %s gemm %.9g", ref->name, (long long)n, nr, nc,
                                 i, y[i], quant_isa_str(isa), y2[i]);
            }
            free(y);
            free(y2);
            free_mats(&q);
        }
    assert_int_equal(amx_model_faults(), faults0);
}

static void test_q8_0_gemm_model(void **state) {
    (void)state;
    static const int64_t ns[] = {32, 96, 512, 2048 + 32};
    check_gemm_model(DF_TYPE_Q8_0, amx_q8_0_gemm_model, ns, 4);
}

/* MXFP4: q8_0's gemm with the E2M1 codes decoded to int8 and the E8M0 scales; n = 2080 is a chunk of 32 blocks
 * and one more. */
static void test_mxfp4_gemm_model(void **state) {
    (void)state;
    static const int64_t ns[] = {32, 96, 512, 2048 + 32};
    check_gemm_model(DF_TYPE_MXFP4, amx_mxfp4_gemm_model, ns, 4);
}

/* q4_0, IQ4_NL: q8_0's gemm with their codes decoded to int8 and the f16 scales. */
static void test_q4_0_iq4_nl_gemm_model(void **state) {
    (void)state;
    static const int64_t ns[] = {32, 96, 2048 + 32};
    check_gemm_model(DF_TYPE_Q4_0, amx_q4_0_gemm_model, ns, 3);
    check_gemm_model(DF_TYPE_IQ4_NL, amx_iq4_nl_gemm_model, ns, 3);
}

/* q4_K, q5_K: super-blocks in chunks of 4 (5 = a chunk and one more); the K-quant order is the AVX-512 tiles'
 * (and q4_K's AVX2 tile's). */
static void test_q4_K_gemm_model(void **state) {
    (void)state;
    static const int64_t ns[] = {256, 768, 1280};
    check_gemm_model(DF_TYPE_Q4_K, amx_q4_K_gemm_model, ns, 3);
}

static void test_q5_K_gemm_model(void **state) {
    (void)state;
    static const int64_t ns[] = {256, 1280};
    check_gemm_model(DF_TYPE_Q5_K, amx_q5_K_gemm_model, ns, 2);
}

/* q6_K: 16 sub-blocks of 16 per super-block (a tdpbsud of K = 16 each), the even and odd ones in two sums as the
 * AVX2 and AVX-512 tiles keep them. */
static void test_q6_K_gemm_model(void **state) {
    (void)state;
    static const int64_t ns[] = {256, 768, 1280};
    check_gemm_model(DF_TYPE_Q6_K, amx_q6_K_gemm_model, ns, 3);
}

/* The hardware kernels' code (amx_x86.h: the AVX-512 decoders, gathers and epilogues) on the model, where the
 * CPU runs AVX-512: the same checks, so nothing of the AMX kernels but the tile instructions waits for an AMX
 * machine to be run. */
static void test_x86_gemms_model(void **state) {
    (void)state;
#if defined(__x86_64__)
    if (!quant_isa_available(QUANT_ISA_AVX512)) {
        print_message("no AVX-512 on this CPU: the x86 AMX helpers are not run\n");
        return;
    }
    static const int64_t n32[] = {32, 96, 2048 + 32}, nk[] = {256, 1280};
    check_gemm_model(DF_TYPE_Q8_0, amx_q8_0_gemm_model512, n32, 3);
    check_gemm_model(DF_TYPE_MXFP4, amx_mxfp4_gemm_model512, n32, 3);
    check_gemm_model(DF_TYPE_Q4_0, amx_q4_0_gemm_model512, n32, 3);
    check_gemm_model(DF_TYPE_IQ4_NL, amx_iq4_nl_gemm_model512, n32, 3);
    check_gemm_model(DF_TYPE_Q4_K, amx_q4_K_gemm_model512, nk, 2);
    check_gemm_model(DF_TYPE_Q5_K, amx_q5_K_gemm_model512, nk, 2);
    check_gemm_model(DF_TYPE_Q6_K, amx_q6_K_gemm_model512, nk, 2);
#else
    print_message("not x86-64: no x86 AMX helpers\n");
#endif
}

/* DELTAFIN_AMX=model makes the AMX table (model-backed) the active one,
 * =off leaves it out; unset, it exists only where the CPU has AMX. */
static void test_selection(void **state) {
    (void)state;
    const char *e = getenv("DELTAFIN_AMX");
    const char *isa_cap = getenv("DELTAFIN_ISA");
    /* a cap makes the process see a CPU without the tiers above it (quant.c init_tables) */
    if (isa_cap && !strcmp(isa_cap, "avx2")) assert_false(quant_isa_available(QUANT_ISA_AVX512));
    if (isa_cap && !strcmp(isa_cap, "scalar")) assert_false(quant_isa_available(QUANT_ISA_AVX2));
    if (e && !strcmp(e, "model")) {
        assert_true(quant_isa_available(QUANT_ISA_AMX));
        assert_string_equal(quant_isa_name(), "amx"); /* on the capped base too, as on such a CPU */
        /* the hardware kernels' code on the model where the AVX-512 table exists (kern_amx_model.c), else the
         * headers' plain helpers */
        const quant_gemm_fn g = quant_traits_isa(DF_TYPE_Q8_0, QUANT_ISA_AMX)->gemm;
        if (quant_isa_available(QUANT_ISA_AVX512)) {
            assert_ptr_not_equal(g, amx_q8_0_gemm_model);
            assert_ptr_not_equal(g, quant_traits_isa(DF_TYPE_Q8_0, QUANT_ISA_AVX512)->gemm);
        } else {
            assert_ptr_equal(g, amx_q8_0_gemm_model);
        }
        assert_int_equal(quant_traits_isa(DF_TYPE_Q8_0, QUANT_ISA_AMX)->gemm_rows, 16);
    } else if (e && !strcmp(e, "off")) {
        assert_false(quant_isa_available(QUANT_ISA_AMX));
        assert_string_not_equal(quant_isa_name(), "amx");
    } else if (isa_cap && strcmp(isa_cap, "amx")) {
        assert_false(quant_isa_available(QUANT_ISA_AMX)); /* no AMX hardware below the cap */
    } else if (quant_isa_available(QUANT_ISA_AMX)) {
        assert_ptr_not_equal(quant_traits_isa(DF_TYPE_Q8_0, QUANT_ISA_AMX)->gemm, amx_q8_0_gemm_model);
    } else {
        print_message("no AMX on this CPU: the hardware kernels are not run (the model ones are)\n");
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_dpb),
        cmocka_unit_test(test_model_faults),
        cmocka_unit_test(test_model_bf16),
        cmocka_unit_test(test_q8_0_gemm_model),
        cmocka_unit_test(test_mxfp4_gemm_model),
        cmocka_unit_test(test_q4_0_iq4_nl_gemm_model),
        cmocka_unit_test(test_q4_K_gemm_model),
        cmocka_unit_test(test_q5_K_gemm_model),
        cmocka_unit_test(test_q6_K_gemm_model),
        cmocka_unit_test(test_x86_gemms_model),
        cmocka_unit_test(test_selection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
