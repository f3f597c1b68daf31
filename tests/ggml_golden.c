/*
 * ggml_golden.c - prints the k_golden table of tests/test_quant.c from
 * ggml's own code (not part of the build; run by hand when a type is added).
 *
 * DESIGN
 * For each type it fills two blocks with tests/golden_pattern.h's pattern,
 * dequantizes them with ggml's to_float (libggml-base) and prints the
 * checksum sum (i+1) * value_i (two blocks, or GOLDEN_NBLK_BIG for the
 * table-indexed types), then dots them with the activation pattern
 * through ggml's portable vec_dot (ggml_vec_dot_*_generic, exported by the
 * plain x64 CPU variant), the same functions named in the test. It also
 * prints a hash of the bytes ggml's reference quantizer makes of a fixed
 * input, for the types whose quantizer we copy exactly. Only ggml's
 * public headers are used; the generic kernels are declared here.
 *
 *   cc -std=c11 -Isrc -I.cache/llama/llama.cpp/ggml/include tests/ggml_golden.c \
 *      -L.cache/llama/lib -Wl,-rpath,$PWD/.cache/llama/lib -l:libggml-cpu-x64.so -lggml-base -o /tmp/ggml_golden
 *   /tmp/ggml_golden
 */
#include "golden_pattern.h"
#include "ggml.h"
#include "ggml-cpu.h"

#include <stdio.h>

typedef void (*ggml_dot_fn)(int n, float *s, size_t bs, const void *vx, size_t bx, const void *vy, size_t by, int nrc);
#define GENERIC(name) void ggml_vec_dot_##name##_generic(int, float *, size_t, const void *, size_t, const void *, size_t, int);
GENERIC(q4_0_q8_0) GENERIC(q4_1_q8_1) GENERIC(q5_0_q8_0) GENERIC(q5_1_q8_1) GENERIC(q8_0_q8_0)
GENERIC(q2_K_q8_K) GENERIC(q3_K_q8_K) GENERIC(q4_K_q8_K) GENERIC(q5_K_q8_K) GENERIC(q6_K_q8_K)
GENERIC(mxfp4_q8_0) GENERIC(q1_0_q8_0) GENERIC(iq4_nl_q8_0) GENERIC(iq4_xs_q8_K) GENERIC(tq1_0_q8_K)
GENERIC(tq2_0_q8_K) GENERIC(iq2_xxs_q8_K) GENERIC(iq2_xs_q8_K) GENERIC(iq2_s_q8_K) GENERIC(iq3_xxs_q8_K)
GENERIC(iq3_s_q8_K) GENERIC(iq1_s_q8_K) GENERIC(iq1_m_q8_K) GENERIC(nvfp4_q8_0)
#undef GENERIC
/* x86 builds have no SIMD q2_0 kernel: arch-fallback.h renames the generic
 * one to this name, so it is the portable code */
void ggml_vec_dot_q2_0_q8_0(int, float *, size_t, const void *, size_t, const void *, size_t, int);

static uint16_t f2h(float f) { return ggml_fp32_to_fp16(f); }

static const struct { int type, vt; const char *id; ggml_dot_fn dot; } k_types[] = {
    {DF_TYPE_Q4_0, DF_TYPE_Q8_0, "DF_TYPE_Q4_0", ggml_vec_dot_q4_0_q8_0_generic},
    {DF_TYPE_Q4_1, DF_TYPE_Q8_1, "DF_TYPE_Q4_1", ggml_vec_dot_q4_1_q8_1_generic},
    {DF_TYPE_Q5_0, DF_TYPE_Q8_0, "DF_TYPE_Q5_0", ggml_vec_dot_q5_0_q8_0_generic},
    {DF_TYPE_Q5_1, DF_TYPE_Q8_1, "DF_TYPE_Q5_1", ggml_vec_dot_q5_1_q8_1_generic},
    {DF_TYPE_Q8_0, DF_TYPE_Q8_0, "DF_TYPE_Q8_0", ggml_vec_dot_q8_0_q8_0_generic},
    {DF_TYPE_Q8_1, -1, "DF_TYPE_Q8_1", NULL},
    {DF_TYPE_Q2_K, DF_TYPE_Q8_K, "DF_TYPE_Q2_K", ggml_vec_dot_q2_K_q8_K_generic},
    {DF_TYPE_Q3_K, DF_TYPE_Q8_K, "DF_TYPE_Q3_K", ggml_vec_dot_q3_K_q8_K_generic},
    {DF_TYPE_Q4_K, DF_TYPE_Q8_K, "DF_TYPE_Q4_K", ggml_vec_dot_q4_K_q8_K_generic},
    {DF_TYPE_Q5_K, DF_TYPE_Q8_K, "DF_TYPE_Q5_K", ggml_vec_dot_q5_K_q8_K_generic},
    {DF_TYPE_Q6_K, DF_TYPE_Q8_K, "DF_TYPE_Q6_K", ggml_vec_dot_q6_K_q8_K_generic},
    {DF_TYPE_Q8_K, -1, "DF_TYPE_Q8_K", NULL},
    {DF_TYPE_MXFP4, DF_TYPE_Q8_0, "DF_TYPE_MXFP4", ggml_vec_dot_mxfp4_q8_0_generic},
    {DF_TYPE_Q1_0, DF_TYPE_Q8_0, "DF_TYPE_Q1_0", ggml_vec_dot_q1_0_q8_0_generic},
    {DF_TYPE_Q2_0, DF_TYPE_Q8_0, "DF_TYPE_Q2_0", ggml_vec_dot_q2_0_q8_0},
    {DF_TYPE_IQ4_NL, DF_TYPE_Q8_0, "DF_TYPE_IQ4_NL", ggml_vec_dot_iq4_nl_q8_0_generic},
    {DF_TYPE_IQ4_XS, DF_TYPE_Q8_K, "DF_TYPE_IQ4_XS", ggml_vec_dot_iq4_xs_q8_K_generic},
    {DF_TYPE_TQ1_0, DF_TYPE_Q8_K, "DF_TYPE_TQ1_0", ggml_vec_dot_tq1_0_q8_K_generic},
    {DF_TYPE_TQ2_0, DF_TYPE_Q8_K, "DF_TYPE_TQ2_0", ggml_vec_dot_tq2_0_q8_K_generic},
    {DF_TYPE_IQ2_XXS, DF_TYPE_Q8_K, "DF_TYPE_IQ2_XXS", ggml_vec_dot_iq2_xxs_q8_K_generic},
    {DF_TYPE_IQ2_XS, DF_TYPE_Q8_K, "DF_TYPE_IQ2_XS", ggml_vec_dot_iq2_xs_q8_K_generic},
    {DF_TYPE_IQ2_S, DF_TYPE_Q8_K, "DF_TYPE_IQ2_S", ggml_vec_dot_iq2_s_q8_K_generic},
    {DF_TYPE_IQ3_XXS, DF_TYPE_Q8_K, "DF_TYPE_IQ3_XXS", ggml_vec_dot_iq3_xxs_q8_K_generic},
    {DF_TYPE_IQ3_S, DF_TYPE_Q8_K, "DF_TYPE_IQ3_S", ggml_vec_dot_iq3_s_q8_K_generic},
    {DF_TYPE_IQ1_S, DF_TYPE_Q8_K, "DF_TYPE_IQ1_S", ggml_vec_dot_iq1_s_q8_K_generic},
    {DF_TYPE_IQ1_M, DF_TYPE_Q8_K, "DF_TYPE_IQ1_M", ggml_vec_dot_iq1_m_q8_K_generic},
    {DF_TYPE_NVFP4, DF_TYPE_Q8_0, "DF_TYPE_NVFP4", ggml_vec_dot_nvfp4_q8_0_generic},
};

/* Checksum of golden_nblk blocks and their dot with the activation pattern. */
static void golden_row(int k) {
    static uint8_t w[GOLDEN_NBLK_BIG * 292], a[GOLDEN_NBLK_BIG * 292];
    static float v[GOLDEN_NBLK_BIG * QK_K];
    const enum ggml_type t = (enum ggml_type)k_types[k].type;
    const int nblk = golden_nblk(t);
    const int64_t n = nblk * ggml_blck_size(t);
    golden_fill(t, ggml_type_size(t), w, nblk, f2h);
    if (!ggml_get_type_traits(t)->to_float) { /* q8_1: ggml has no dequantizer */
        printf("    /* %s: no ggml to_float */\n", k_types[k].id);
        return;
    }
    ggml_get_type_traits(t)->to_float(w, v, n);
    double cs = 0;
    for (int64_t i = 0; i < n; i++) cs += (double)(i + 1) * v[i];
    float dot = 0;
    if (k_types[k].dot) {
        const enum ggml_type vt = (enum ggml_type)k_types[k].vt;
        golden_fill_act(vt, ggml_type_size(vt), a, (int)(n / ggml_blck_size(vt)), f2h);
        k_types[k].dot((int)n, &dot, 0, w, 0, a, 0, 1);
    }
    printf("    {%s, %.17g, %.9g},\n", k_types[k].id, cs, dot);
}

/* Hash of ggml's reference quantization (ggml_quantize_chunk without an
 * importance matrix runs quantize_row_*_ref) of golden_quant_input. */
static void quant_row(int type, const char *id) {
    static float x[GOLDEN_QN];
    static uint8_t q[GOLDEN_QN * 4];
    golden_quant_input(x);
    size_t bytes = ggml_quantize_chunk((enum ggml_type)type, x, q, 0, 1, GOLDEN_QN, NULL);
    printf("    {%s, 0x%016llxull},\n", id, (unsigned long long)golden_hash(q, bytes));
}

int main(void) {
    ggml_cpu_init(); /* the CPU kernels' f16 tables */
    printf("k_golden:\n");
    for (size_t k = 0; k < sizeof k_types / sizeof k_types[0]; k++) golden_row((int)k);
    printf("k_golden_quant:\n");
    quant_row(DF_TYPE_MXFP4, "DF_TYPE_MXFP4");
    quant_row(DF_TYPE_Q1_0, "DF_TYPE_Q1_0");
    quant_row(DF_TYPE_Q2_0, "DF_TYPE_Q2_0");
    quant_row(DF_TYPE_TQ1_0, "DF_TYPE_TQ1_0");
    quant_row(DF_TYPE_TQ2_0, "DF_TYPE_TQ2_0");
    quant_row(DF_TYPE_NVFP4, "DF_TYPE_NVFP4");
    return 0;
}
