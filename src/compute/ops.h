/*
 * ops.h - the small float kernels of a transformer layer: RMSNorm, RoPE,
 * SiLU gating, softmax. Plain C on float arrays; vectorised by the compiler.
 * The heavy work (matrix products, attention) lives in matmul.c and attn.c.
 */
#ifndef DF_OPS_H
#define DF_OPS_H

#include <stdint.h>

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]  (w may be NULL: no weight). */
void op_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
/* Its scale, 1 / sqrt(mean(x^2) + eps), and the sum of squares under it, in double (ops.c: the lanes). */
float op_rms_scale(const float *x, int n, float eps);
double op_sum_sq(const float *x, int n);
/* sum of x[i] * scale * w[i], each term in float, summed in double: the dot of op_rmsnorm(x) and w. */
double op_norm_dot(const float *x, float scale, const float *w, int n);

/* RoPE parameters (ggml's rope_ext semantics, including YaRN). */
typedef struct rope_params {
    int n_dims;             /* rotated dimensions (<= head_dim), even */
    int neox;               /* 1: pairs (i, i + n_dims/2); 0: pairs (2i, 2i+1) */
    float freq_base;
    float freq_scale;       /* 1 / linear scaling factor */
    float ext_factor;       /* YaRN extrapolation mix (0 = off) */
    float attn_factor;      /* magnitude scale */
    float corr_dims[2];     /* YaRN correction range, from rope_corr_dims() */
    const float *freq_factors; /* n_dims/2 divisors (llama3 rope_freqs) or NULL */
} rope_params;

void rope_corr_dims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow, float dims[2]);

/* Fill cache (n_dims floats: cos, sin interleaved) for a position. */
void rope_cache(const rope_params *rp, int64_t pos, float *cache);

/* Rotate n_heads heads of head_dim floats each (stride head_dim) in place. */
void rope_apply(const rope_params *rp, const float *cache, float *x, int n_heads, int head_dim);

/* a[i] = silu(a[i]) * b[i] (the F32 traits' swiglu kernel: vectorised exp) */
void op_swiglu(float *a, const float *b, int n);
/* a[i] = silu(a[i]) (the same kernel) */
void op_silu(float *a, int64_t n);
/* a[i] = SiTU(a[i], b[i]) with beta and the up branch's bound lb (the F32 traits' situ kernel) */
void op_situ(float *a, const float *b, int n, float beta, float lb);

/* In-place softmax of n floats. */
void op_softmax(float *x, int n);

/* The k (1 <= k <= n) positions of the largest of v[0..n), ascending, into
 * sel: the set ggml's CPU top_k picks, ties with the k-th largest included
 * (see ops.c). */
void op_top_k_set(const float *v, int n, int k, int32_t *sel);
/* How decisive op_top_k_set's choice sel (k indices, ascending) of v[0..n) was: the
 * worst chosen value minus the best one left out, over the largest |v| (0 where all
 * are 0); never negative; +inf where nothing was left out (k >= n). A value at float
 * resolution is a tie that any rounding may break (df_note_choice). */
float op_top_k_margin(const float *v, int n, int k, const int32_t *sel);

#endif
