/*
 * deltanet.c - the recurrent half of a gated delta-rule layer (Kimi's KDA):
 * the short convolution with its rolling window, and the delta rule.
 *
 * DESIGN
 * Both keep a fixed-size state per sequence (the session's recurrent layer
 * memory, model.h df_layer_mem) instead of a cache that grows with the
 * context, so a layer's cost per token does not depend on the position.
 * Prompts run through the same token-by-token recurrence as generation
 * (llama.cpp's fused CPU op does too), so a token's output is the same
 * whether it arrives in a batch or alone. The order of operations follows
 * ggml's gated_delta_net op: decay the state, read it with the key, write
 * the beta-weighted correction, then read it with the query.
 */
#include "deltanet.h"

#include <math.h>
#include <string.h>

void dn_short_conv(float *x, int n, int64_t ch, int d_conv, float *state, const float *w) {
    const int ns = d_conv - 1;
    for (int64_t c = 0; c < ch; c++) {
        float *st = state + c * ns;
        const float *wc = w + c * d_conv;
        for (int t = 0; t < n; t++) {
            float *xt = x + (int64_t)t * ch + c;
            const float in = *xt;
            float sum = 0.0f;
            for (int j = 0; j < ns; j++) sum += st[j] * wc[j];
            sum += in * wc[ns];
            for (int j = 0; j + 1 < ns; j++) st[j] = st[j + 1];
            if (ns > 0) st[ns - 1] = in;
            *xt = sum / (1.0f + expf(-sum)); /* SiLU */
        }
    }
}

void dn_l2norm(float *x, int64_t count, int hd, float eps) {
    for (int64_t r = 0; r < count; r++) {
        float *v = x + r * hd;
        double ss = 0.0;
        for (int i = 0; i < hd; i++) ss += (double)(v[i] * v[i]);
        const float scale = 1.0f / fmaxf(sqrtf((float)ss), eps);
        for (int i = 0; i < hd; i++) v[i] *= scale;
    }
}

typedef struct {
    float *state;
    const float *q, *k, *v, *g, *beta;
    float *o;
    int n, n_head, hd;
} dn_job;

/* Rows jv of S are independent: a row is decayed, read with k, corrected
 * and read with q in one pass while it is in L1, and R rows go together so
 * that their sums (each in the order i = 0..hd-1, as one row alone) are
 * independent chains. Every element sees the same operations in the same
 * order as the four-pass form (decay all, read all, correct all, read all). */
#define DN_R 4
static void dn_rows(float *S, int hd, int r0, int nr, const float *dec, const float *k, const float *q,
                    const float *v, float b, float scale, float *o) {
    if (nr == DN_R) {
        float *s0 = S + (int64_t)r0 * hd, *s1 = s0 + hd, *s2 = s1 + hd, *s3 = s2 + hd;
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
        for (int i = 0; i < hd; i++) {
            s0[i] *= dec[i];
            s1[i] *= dec[i];
            s2[i] *= dec[i];
            s3[i] *= dec[i];
            a0 += s0[i] * k[i];
            a1 += s1[i] * k[i];
            a2 += s2[i] * k[i];
            a3 += s3[i] * k[i];
        }
        const float d0 = (v[r0] - a0) * b, d1 = (v[r0 + 1] - a1) * b, d2 = (v[r0 + 2] - a2) * b, d3 = (v[r0 + 3] - a3) * b;
        a0 = a1 = a2 = a3 = 0.0f;
        for (int i = 0; i < hd; i++) {
            s0[i] += k[i] * d0;
            s1[i] += k[i] * d1;
            s2[i] += k[i] * d2;
            s3[i] += k[i] * d3;
            a0 += s0[i] * q[i];
            a1 += s1[i] * q[i];
            a2 += s2[i] * q[i];
            a3 += s3[i] * q[i];
        }
        o[r0] = a0 * scale;
        o[r0 + 1] = a1 * scale;
        o[r0 + 2] = a2 * scale;
        o[r0 + 3] = a3 * scale;
        return;
    }
    for (int jv = r0; jv < r0 + nr; jv++) {
        float *sr = S + (int64_t)jv * hd;
        float a = 0.0f;
        for (int i = 0; i < hd; i++) {
            sr[i] *= dec[i];
            a += sr[i] * k[i];
        }
        const float d = (v[jv] - a) * b;
        a = 0.0f;
        for (int i = 0; i < hd; i++) {
            sr[i] += k[i] * d;
            a += sr[i] * q[i];
        }
        o[jv] = a * scale;
    }
}

static void dn_heads(void *arg, int ith, int nth) {
    const dn_job *j = arg;
    const int hd = j->hd, H = j->n_head;
    const int64_t row = (int64_t)H * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float dec[1024]; /* hd <= 1024 (checked when the model is loaded) */
    long lo, hi;
    tp_range(H, ith, nth, &lo, &hi);
    for (long h = lo; h < hi; h++) {
        float *S = j->state + (int64_t)h * hd * hd; /* S[jv * hd + ik] */
        for (int t = 0; t < j->n; t++) {
            const float *q = j->q + t * row + h * hd, *k = j->k + t * row + h * hd, *v = j->v + t * row + h * hd;
            const float *g = j->g + t * row + h * hd;
            const float b = j->beta[(int64_t)t * H + h];
            float *o = j->o + t * row + h * hd;
            for (int i = 0; i < hd; i++) dec[i] = expf(g[i]);
            for (int r0 = 0; r0 < hd; r0 += DN_R) dn_rows(S, hd, r0, hd - r0 < DN_R ? hd - r0 : DN_R, dec, k, q, v, b, scale, o);
        }
    }
}

void dn_gated_delta(tp_pool *pool, float *state, const float *q, const float *k, const float *v, const float *g,
                    const float *beta, int n, int n_head, int hd, float *o) {
    dn_job j = {state, q, k, v, g, beta, o, n, n_head, hd};
    tp_run(pool, dn_heads, &j);
}
