/*
 * ops.c - see ops.h. Numerics follow ggml where it matters for matching
 * llama.cpp: sums of squares accumulate in double, RoPE angles advance by
 * repeated multiplication in float exactly as ggml's rope cache does.
 */
#include "ops.h"

#include <math.h>

#include "quant.h"

void op_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    const float scale = 1.0f / sqrtf((float)(ss / n) + eps);
    if (w) {
        for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
    } else {
        for (int i = 0; i < n; i++) out[i] = x[i] * scale;
    }
}

static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return n_dims * logf(n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

void rope_corr_dims(int n_dims, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow, float dims[2]) {
    float start = floorf(yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base));
    float end = ceilf(yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base));
    dims[0] = start > 0 ? start : 0;
    dims[1] = end < n_dims - 1 ? end : (float)(n_dims - 1);
}

static float yarn_ramp(float low, float high, int i0) {
    float d = high - low;
    float y = (float)(i0 / 2 - low) / (d > 0.001f ? d : 0.001f);
    y = y < 0 ? 0 : (y > 1 ? 1 : y);
    return 1 - y;
}

void rope_cache(const rope_params *rp, int64_t pos, float *cache) {
    const float theta_scale = powf(rp->freq_base, -2.0f / rp->n_dims);
    float theta = (float)pos;
    for (int i0 = 0; i0 < rp->n_dims; i0 += 2) {
        const float ff = rp->freq_factors ? rp->freq_factors[i0 / 2] : 1.0f;
        const float extrap = theta / ff;
        const float interp = rp->freq_scale * extrap;
        float th = interp, mscale = rp->attn_factor;
        if (rp->ext_factor != 0.0f) {
            float mix = yarn_ramp(rp->corr_dims[0], rp->corr_dims[1], i0) * rp->ext_factor;
            th = interp * (1 - mix) + extrap * mix;
            mscale *= 1.0f + 0.1f * logf(1.0f / rp->freq_scale);
        }
        cache[i0] = cosf(th) * mscale;
        cache[i0 + 1] = sinf(th) * mscale;
        theta *= theta_scale;
    }
}

void rope_apply(const rope_params *rp, const float *cache, float *x, int n_heads, int head_dim) {
    const int half = rp->n_dims / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (int64_t)h * head_dim;
        for (int i0 = 0; i0 < rp->n_dims; i0 += 2) {
            const float c = cache[i0], s = cache[i0 + 1];
            const int a = rp->neox ? i0 / 2 : i0;
            const int b = rp->neox ? i0 / 2 + half : i0 + 1;
            const float x0 = v[a], x1 = v[b];
            v[a] = x0 * c - x1 * s;
            v[b] = x0 * s + x1 * c;
        }
    }
}

void op_swiglu(float *a, const float *b, int n) { quant_traits_get(DF_TYPE_F32)->swiglu(a, b, n); }
void op_situ(float *a, const float *b, int n, float beta, float lb) {
    quant_traits_get(DF_TYPE_F32)->situ(a, b, n, beta, lb);
}

void op_softmax(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}
