/*
 * quant.h - tensor element types: GGUF/ggml block layouts, reference
 * (scalar) kernels and the traits table that picks SIMD kernels at run time.
 *
 * DESIGN
 * Every type is described once by a quant_traits entry: its block size
 * (elements per block), the bytes per block, how to turn a row into floats,
 * how to quantize floats into it, and a dot product of one weight row with an
 * activation row that has been converted into the type's "vec_type" (the
 * activation format it pairs with, as in llama.cpp: Q8_0 for Q4_0/Q5_0/Q8_0,
 * Q8_1 for Q4_1/Q5_1, Q8_K for the K-quants, the i-quants but IQ4_NL,
 * TQ1_0 and TQ2_0,
 * Q8_0 also for MXFP4, NVFP4, Q1_0, Q2_0 and IQ4_NL, F32 for F32, F16 for F16,
 * BF16 for BF16). Matrix code looks the entry up once and never switches on
 * type or instruction set.
 *
 * quant_init() fills the table with the best kernels this CPU supports
 * (AVX-512, AVX2, NEON, else scalar). quant_traits_ref() always returns the
 * scalar reference, which tests use as the oracle.
 *
 * Type ids are ggml's (GGML_TYPE_*), since they are what GGUF files store.
 */
#ifndef DF_QUANT_H
#define DF_QUANT_H

#include <stddef.h>
#include <stdint.h>

enum df_type {
    DF_TYPE_F32 = 0,
    DF_TYPE_F16 = 1,
    DF_TYPE_Q4_0 = 2,
    DF_TYPE_Q4_1 = 3,
    DF_TYPE_Q5_0 = 6,
    DF_TYPE_Q5_1 = 7,
    DF_TYPE_Q8_0 = 8,
    DF_TYPE_Q8_1 = 9,
    DF_TYPE_Q2_K = 10,
    DF_TYPE_Q3_K = 11,
    DF_TYPE_Q4_K = 12,
    DF_TYPE_Q5_K = 13,
    DF_TYPE_Q6_K = 14,
    DF_TYPE_Q8_K = 15,
    DF_TYPE_IQ2_XXS = 16,
    DF_TYPE_IQ2_XS = 17,
    DF_TYPE_IQ3_XXS = 18,
    DF_TYPE_IQ1_S = 19,
    DF_TYPE_IQ4_NL = 20,
    DF_TYPE_IQ3_S = 21,
    DF_TYPE_IQ2_S = 22,
    DF_TYPE_IQ4_XS = 23,
    DF_TYPE_I32 = 26, /* storage only: integer tables (deepseek4's token -> expert ids) */
    DF_TYPE_IQ1_M = 29,
    DF_TYPE_BF16 = 30,
    DF_TYPE_TQ1_0 = 34,
    DF_TYPE_TQ2_0 = 35,
    DF_TYPE_MXFP4 = 39,
    DF_TYPE_NVFP4 = 40,
    DF_TYPE_Q1_0 = 41,
    DF_TYPE_Q2_0 = 42,
    DF_TYPE_COUNT = 43 /* ggml's GGML_TYPE_COUNT: ids >= this are invalid */
};

/* Dot product of n elements: w is one row in the weight type, x the same
 * number of elements in the paired vec_type. n is a multiple of blck. */
typedef void (*quant_vec_dot_fn)(int64_t n, const void *w, const void *x, float *out);
/* Convert n elements (multiple of blck) of a row to float. */
typedef void (*quant_to_float_fn)(const void *src, float *dst, int64_t n);
/* Quantize n floats (multiple of blck) into the type. */
typedef void (*quant_from_float_fn)(const float *src, void *dst, int64_t n);
/* Matrix product of nr weight rows (n elements each, w_stride bytes apart)
 * with nc activation rows in vec_type (x_stride bytes apart):
 * y[c * ldy + r] = dot(w row r, x row c). Contract: the value written for
 * (r, c) depends only on those two rows, never on nr, nc or where the pair
 * sits in a tile, so a token's result is bit-identical whether it is
 * processed alone (generation) or in a batch (prompt). */
typedef void (*quant_gemm_fn)(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride,
                              int nc, float *y, size_t ldy);
/* Attention over cached rows of this type (F32 and F16 only, else NULL):
 * dot_rows:  out[j] = sum_i q[i] * row_j[i] for j < nr;
 * axpy_rows: y[i] += sum_j a[j] * row_j[i] for i < n, accumulated in row order.
 * Rows are n elements, stride bytes apart. Each output depends only on its
 * own inputs (same contract as gemm). */
typedef void (*quant_dot_rows_fn)(int64_t n, const float *q, const void *rows, size_t stride, int nr, float *out);
typedef void (*quant_axpy_rows_fn)(int64_t n, const float *a, const void *rows, size_t stride, int nr, float *y);
/* Float kernels of the F32 entry only: the softmax helper x[i] = expf(x[i] - sub)
 * for i < n, returning the sum; SwiGLU's a[i] = silu(a[i]) * b[i] (b NULL: silu alone); and SiTU's
 * a[i] = beta*tanh(a[i]/beta) * sigmoid(a[i]) * (lb > 0 ? lb*tanh(b[i]/lb) : b[i])
 * (Kimi K3's activation). Each output depends only on its own inputs. */
typedef float (*quant_exp_sum_fn)(float *x, int64_t n, float sub);
typedef void (*quant_swiglu_fn)(float *a, const float *b, int64_t n);
typedef void (*quant_situ_fn)(float *a, const float *b, int64_t n, float beta, float lb);

typedef struct quant_traits {
    const char *name;         /* "q4_K" etc., as ggml names it; NULL = unknown id */
    int blck;                 /* elements per block */
    size_t type_size;         /* bytes per block */
    int supported;            /* 1 if Deltafin can compute with this type */
    int vec_type;             /* activation type paired in vec_dot */
    quant_to_float_fn to_float;
    quant_from_float_fn from_float;
    quant_vec_dot_fn vec_dot;
    quant_gemm_fn gemm;       /* NULL: matmul calls vec_dot per (row, token) pair */
    quant_dot_rows_fn dot_rows;
    quant_axpy_rows_fn axpy_rows;
    quant_exp_sum_fn exp_sum;
    quant_swiglu_fn swiglu;
    quant_situ_fn situ;
    int gemm_rows, gemm_cols; /* 0, or the weight rows (a multiple) and tokens a gemm call of 8+
                                 tokens should get: a tile unit's region (AMX), not the 4 x 4 tile */
    quant_gemm_fn gemm_packed; /* NULL, or the gemm of weights in pack.h's layout: w is the first of
                                  nr / 16 packed groups (nr a multiple of 16, w_stride the row size),
                                  x rows carry pack.h's trailer; same bits as gemm. Its presence is
                                  what makes the store pack a type's resident matrices. */
} quant_traits;

/* Pick the best kernels for this CPU. Idempotent, thread-safe after the first call returns.
 * The environment variable DELTAFIN_ISA=scalar|avx2|avx512|neon caps the choice (for tests). */
void quant_init(void);

/* Traits of a type id, or NULL if the id is outside the table. The returned entry
 * may have name==NULL (a hole in ggml's numbering) or supported==0 (known to ggml,
 * not computable here): callers check. */
const quant_traits *quant_traits_get(int type);
/* Same, but always the scalar reference kernels. */
const quant_traits *quant_traits_ref(int type);

/* Name of the ISA selected by quant_init ("avx512", "avx2", "neon", "scalar"). */
const char *quant_isa_name(void);

/* Bytes needed for a row of n elements; 0 if n is not a multiple of blck or type invalid. */
size_t quant_row_size(int type, int64_t n);

/* Half-precision conversions (IEEE binary16 and bfloat16). */
float df_fp16_to_fp32(uint16_t h);
uint16_t df_fp32_to_fp16(float f);
float df_bf16_to_fp32(uint16_t h);
uint16_t df_fp32_to_bf16(float f);

/* Block layouts, byte-exact with ggml (static assertions in quant.c). */
#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12
#define QK_MXFP4 32
#define QK1_0 128
#define QK2_0 64
#define QK4_NL 32
#define QK_NVFP4 64

typedef struct { uint16_t d; uint8_t qs[QK4_0 / 2]; } block_q4_0;
typedef struct { uint16_t d, m; uint8_t qs[QK4_1 / 2]; } block_q4_1;
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; } block_q5_0;
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; } block_q5_1;
typedef struct { uint16_t d; int8_t qs[QK8_0]; } block_q8_0;
typedef struct { uint16_t d, s; int8_t qs[QK8_1]; } block_q8_1; /* s = d * sum(qs) */
typedef struct { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d, dmin; } block_q2_K;
typedef struct { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; } block_q3_K;
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; } block_q4_K;
typedef struct { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; } block_q5_K;
typedef struct { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; } block_q6_K;
typedef struct { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; } block_q8_K;
/* MXFP4: e = E8M0 shared exponent; 32 E2M1 codes, element j (j < 16) in the
 * low nibble of qs[j], element j+16 in the high one. */
typedef struct { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; } block_mxfp4;
/* NVFP4: 4 sub-blocks of 16, each with a UE4M3 scale d[s] and 8 bytes of
 * E2M1 codes: element j < 8 of sub-block s is the low nibble of qs[8s + j],
 * j + 8 the high one; value = kvalues_mxfp4[code] * ue4m3(d[s]) / 2. */
typedef struct { uint8_t d[QK_NVFP4 / 16]; uint8_t qs[QK_NVFP4 / 2]; } block_nvfp4;
/* Q1_0: one sign bit per element (bit j%8 of qs[j/8]); value = +-d. */
typedef struct { uint16_t d; uint8_t qs[QK1_0 / 8]; } block_q1_0;
/* Q2_0: 2-bit codes (bits 2(j%4).. of qs[j/4]); value = d * (code - 1). */
typedef struct { uint16_t d; uint8_t qs[QK2_0 / 4]; } block_q2_0;

/* IQ4_NL: like q4_0 (element j < 16 the low nibble of qs[j], j+16 the high
 * one) but the code indexes ggml's non-linear table kvalues_iq4nl. */
typedef struct { uint16_t d; uint8_t qs[QK4_NL / 2]; } block_iq4_nl;
/* IQ4_XS: 8 sub-blocks of 32, each laid out as an iq4_nl block without d;
 * sub-block ib's 6-bit scale ls is nibble ib%2 of scales_l[ib/2] plus bits
 * 2ib..2ib+1 of scales_h as its high bits; value = d * (ls - 32) * kvalue. */
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; } block_iq4_xs;
/* TQ1_0: ternary, 5 trits per qs byte and 4 per qh byte (base-3 digits of
 * byte * 243 / 256, most significant first), d (f16) last. */
typedef struct { uint8_t qs[(QK_K - 4 * QK_K / 64) / 5]; uint8_t qh[QK_K / 64]; uint16_t d; } block_tq1_0;
/* TQ2_0: ternary in 2-bit codes c, value d * (c - 1); d (f16) last. */
typedef struct { uint8_t qs[QK_K / 4]; uint16_t d; } block_tq2_0;

/* The grid i-quants (256 elements in 8 sub-blocks of 32; grids in
 * quant_grids.c; element order and formulas at their code in quant.c). */
typedef struct { uint16_t d; uint16_t qs[QK_K / 8]; } block_iq2_xxs;
typedef struct { uint16_t d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; } block_iq2_xs;
typedef struct { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; } block_iq2_s;
typedef struct { uint16_t d; uint8_t qs[3 * QK_K / 8]; } block_iq3_xxs;
typedef struct {
    uint16_t d;
    uint8_t qs[QK_K / 4];
    uint8_t qh[QK_K / 32];
    uint8_t signs[QK_K / 8];
    uint8_t scales[QK_K / 64];
} block_iq3_s;
typedef struct { uint16_t d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; } block_iq1_s;
typedef struct { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; } block_iq1_m;

/* ggml's kvalues_iq4nl and kvalues_mxfp4 (e2m1 values doubled) are in
 * quant_grids.h. The E8M0 exponent as a float halved
 * (ggml_e8m0_to_fp32_half: 2^(e-128), exact, subnormal for e < 2), so that
 * kvalue * half(e) is the MXFP4 element's value. */
float df_e8m0_to_fp32_half(uint8_t e);

#endif
