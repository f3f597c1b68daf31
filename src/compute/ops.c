/*
 * ops.c - see ops.h. Numerics follow ggml where it matters for matching
 * llama.cpp: sums of squares accumulate in double, RoPE angles advance by
 * repeated multiplication in float exactly as ggml's rope cache does.
 */
#include "ops.h"

#include <math.h>
#include <stdlib.h>

#include "quant.h"

/* Sums in double of n terms, in OP_LANES running sums: lane j takes the terms j, j + OP_LANES, ..., and
 * the lanes are added in a fixed order at the end. One sum of n terms is a chain of n dependent adds (four
 * cycles each on x86); eight independent ones keep the adder busy, and the compiler may put them in
 * vectors without changing a bit. The order is the same on every machine and kernel table; against one
 * running sum it moves the result by a few units in double's last place, far below the float it becomes. */
#define OP_LANES 8

/* One step of the lanes: l[j] += term(i + j); a macro so that the lanes stay in registers. */
#define OP_LANES_SUM(TERM)                                                                                         \
    double l0 = 0, l1 = 0, l2 = 0, l3 = 0, l4 = 0, l5 = 0, l6 = 0, l7 = 0, tail = 0;                               \
    int i = 0;                                                                                                     \
    for (; i + OP_LANES <= n; i += OP_LANES) {                                                                     \
        l0 += TERM(i);                                                                                             \
        l1 += TERM(i + 1);                                                                                         \
        l2 += TERM(i + 2);                                                                                         \
        l3 += TERM(i + 3);                                                                                         \
        l4 += TERM(i + 4);                                                                                         \
        l5 += TERM(i + 5);                                                                                         \
        l6 += TERM(i + 6);                                                                                         \
        l7 += TERM(i + 7);                                                                                         \
    }                                                                                                              \
    for (; i < n; i++) tail += TERM(i);                                                                            \
    return (((l0 + l4) + (l1 + l5)) + ((l2 + l6) + (l3 + l7))) + tail

#define SQ_TERM(k) ((double)x[k] * (double)x[k])
#define NORM_DOT_TERM(k) ((double)(x[k] * scale * w[k]))

double op_sum_sq(const float *x, int n) { OP_LANES_SUM(SQ_TERM); }

double op_norm_dot(const float *x, float scale, const float *w, int n) { OP_LANES_SUM(NORM_DOT_TERM); }

float op_rms_scale(const float *x, int n, float eps) { return 1.0f / sqrtf((float)(op_sum_sq(x, n) / n) + eps); }

void op_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
    const float scale = op_rms_scale(x, n, eps);
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
void op_silu(float *a, int64_t n) { quant_traits_get(DF_TYPE_F32)->swiglu(a, NULL, n); }
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

/* ---- top-k as ggml chooses it ----
 * DeepSeek's sparse attention keeps the k best-scored positions. Which of the
 * values tied with the k-th largest are kept is not a detail: a ReLU'd
 * indexer score is often exactly 0 (every head's dot product negative), and
 * when the head weights are negative, 0 is the best score, shared by dozens
 * of positions. llama.cpp's CPU top_k is std::partial_sort of the indices
 * 0..n-1 by value, descending, which libstdc++ does by heap selection: the
 * first k indices form a heap whose top is the worst of them, and each later
 * index that is strictly better replaces the top, the heap repaired by
 * __adjust_heap (sift the hole to a leaf, then push the new index up). Ties
 * are thus settled by the heap's layout; this is that procedure, step for
 * step, so the set is the same. */
static int better(const float *v, int32_t a, int32_t b) { return v[a] > v[b]; }

static void adjust_heap(const float *v, int32_t *h, long hole, long len, int32_t val) {
    const long top = hole;
    long child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (better(v, h[child], h[child - 1])) child--;
        h[hole] = h[child];
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        h[hole] = h[child - 1];
        hole = child - 1;
    }
    for (long parent = (hole - 1) / 2; hole > top && better(v, h[parent], val); parent = (hole - 1) / 2) {
        h[hole] = h[parent];
        hole = parent;
    }
    h[hole] = val;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

void op_top_k_set(const float *v, int n, int k, int32_t *sel) {
    for (int i = 0; i < k; i++) sel[i] = i;
    for (long parent = (k - 2) / 2; k >= 2 && parent >= 0; parent--) adjust_heap(v, sel, parent, k, sel[parent]);
    for (int i = k; i < n; i++)
        if (better(v, i, sel[0])) adjust_heap(v, sel, 0, k, i);
    qsort(sel, (size_t)k, sizeof(int32_t), cmp_i32);
}

float op_top_k_margin(const float *v, int n, int k, const int32_t *sel) {
    if (k >= n) return INFINITY;
    float worst = INFINITY, best_out = -INFINITY, scale = 0.0f;
    for (int i = 0, j = 0; i < n; i++) {
        if (j < k && sel[j] == i) {
            j++;
            if (v[i] < worst) worst = v[i];
        } else if (v[i] > best_out) {
            best_out = v[i];
        }
        if (fabsf(v[i]) > scale) scale = fabsf(v[i]);
    }
    const float d = worst - best_out;
    return d <= 0.0f ? 0.0f : d / scale;
}
