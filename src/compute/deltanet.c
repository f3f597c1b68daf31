/*
 * deltanet.c - the recurrent half of a gated delta-rule layer (Kimi's KDA,
 * Qwen3.5's and Qwen3-Next's gated delta net): the short convolution with
 * its rolling window, and the delta rule with a per-channel or per-head decay.
 *
 * DESIGN
 * Both keep a fixed-size state per sequence (the session's recurrent layer
 * memory, owned by session.c) instead of a cache that grows with the
 * context, so a layer's cost per token does not depend on the position.
 * Prompts run through the same token-by-token recurrence as generation
 * (llama.cpp's fused CPU op does too), so a token's output is the same
 * whether it arrives in a batch or alone. The order of operations follows
 * ggml's gated_delta_net op: decay the state, read it with the key, write
 * the beta-weighted correction, then read it with the query.
 *
 * On x86-64 a block of 16 values also has an AVX2 version (dn_cols16_avx2:
 * two ymm instead of four xmm), picked by the kernel table's tier
 * (quant_isa_available, so DELTAFIN_ISA caps it too): each lane's multiplies
 * and adds in dn_cols16's order, no fused multiply-add, so the same bits
 * (tests/test_matmul.c compares the two).
 */
#include "deltanet.h"
#include "ops.h"
#include "quant_isa.h"

#include <math.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* dn_short_conv's channels [c0, c1) of rows ch floats apart; inlined with ns a constant for the usual window
 * (d_conv 4), whose loops then unroll: the per-channel loop bookkeeping had cost more than the arithmetic. */
static inline __attribute__((always_inline)) void conv_channels(float *x, int n, int64_t ch, int64_t c0, int64_t c1,
                                                                const int ns, float *state, const float *w) {
    const int d_conv = ns + 1;
    for (int64_t c = c0; c < c1; c++) {
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
            *xt = sum;
        }
    }
}

typedef struct {
    float *x, *state;
    const float *w;
    int64_t ch;
    int n, d_conv;
} conv_job;

/* A thread's share of the channels: the window (state and weights read from memory, the cost) and SiLU. */
static void conv_part(void *arg, int ith, int nth) {
    const conv_job *j = arg;
    long lo, hi;
    tp_range((long)j->ch, ith, nth, &lo, &hi);
    if (j->d_conv == 4) conv_channels(j->x, j->n, j->ch, lo, hi, 3, j->state, j->w);
    else conv_channels(j->x, j->n, j->ch, lo, hi, j->d_conv - 1, j->state, j->w);
    for (int t = 0; t < j->n && hi > lo; t++) op_silu(j->x + (int64_t)t * j->ch + lo, hi - lo); /* as ggml's */
}

void dn_short_conv(tp_pool *pool, float *x, int n, int64_t ch, int d_conv, float *state, const float *w) {
    conv_job j = {x, state, w, ch, n, d_conv};
    if (pool) tp_run(pool, conv_part, &j);
    else conv_part(&j, 0, 1);
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
    const dn_shape *sh;
    float *state;
    const float *q, *k, *v, *g, *beta;
    float *o;
    int n;
    int avx2; /* 1: dn_cols16_avx2 */
} dn_job;

/* The state is stored key-major, state[h][i][j] (i: key, j: value), so that
 * for one key index the values j are contiguous: lanes of a vector are 16
 * values j, and each lane's sums over i still run in the order
 * i = 0..hd-1, one multiply and one add at a time (no fused multiply-add:
 * C11 mode keeps -ffp-contract=off), exactly as a scalar loop per j would.
 * Two passes per block of 16 values: decay and read with k, then the
 * beta-weighted correction and the read with q. */
typedef float dn_v16 __attribute__((vector_size(64)));

/* (no functions taking or returning these: their ABI depends on the ISA) */
#define DN_LOAD(v, p) memcpy(&(v), (p), sizeof(v))
#define DN_STORE(p, v) memcpy((p), &(v), sizeof(v))

static void dn_cols16(float *S, int hd, int j0, const float *dec, const float *k, const float *q, const float *v,
                      float b, float scale, float *o) {
    dn_v16 a = {0}, sv, vv;
    for (int i = 0; i < hd; i++) {
        float *p = S + (int64_t)i * hd + j0;
        DN_LOAD(sv, p);
        sv = sv * dec[i];
        DN_STORE(p, sv);
        a = a + sv * k[i];
    }
    DN_LOAD(vv, v + j0);
    const dn_v16 d = (vv - a) * b;
    a = (dn_v16){0};
    for (int i = 0; i < hd; i++) {
        float *p = S + (int64_t)i * hd + j0;
        DN_LOAD(sv, p);
        sv = sv + k[i] * d;
        DN_STORE(p, sv);
        a = a + sv * q[i];
    }
    a = a * scale;
    DN_STORE(o + j0, a);
}

#if defined(__x86_64__)
/* dn_cols16 on two ymm of 8 values: the same operations per lane, in its order. */
__attribute__((target("avx2"))) static void dn_cols16_avx2(float *S, int hd, int j0, const float *dec, const float *k,
                                                          const float *q, const float *v, float b, float scale,
                                                          float *o) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    for (int i = 0; i < hd; i++) {
        float *p = S + (int64_t)i * hd + j0;
        const __m256 dd = _mm256_set1_ps(dec[i]), kk = _mm256_set1_ps(k[i]);
        const __m256 s0 = _mm256_mul_ps(_mm256_loadu_ps(p), dd), s1 = _mm256_mul_ps(_mm256_loadu_ps(p + 8), dd);
        _mm256_storeu_ps(p, s0);
        _mm256_storeu_ps(p + 8, s1);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(s0, kk));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(s1, kk));
    }
    const __m256 bb = _mm256_set1_ps(b);
    const __m256 d0 = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v + j0), a0), bb);
    const __m256 d1 = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(v + j0 + 8), a1), bb);
    a0 = a1 = _mm256_setzero_ps();
    for (int i = 0; i < hd; i++) {
        float *p = S + (int64_t)i * hd + j0;
        const __m256 kk = _mm256_set1_ps(k[i]), qq = _mm256_set1_ps(q[i]);
        const __m256 s0 = _mm256_add_ps(_mm256_loadu_ps(p), _mm256_mul_ps(kk, d0));
        const __m256 s1 = _mm256_add_ps(_mm256_loadu_ps(p + 8), _mm256_mul_ps(kk, d1));
        _mm256_storeu_ps(p, s0);
        _mm256_storeu_ps(p + 8, s1);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(s0, qq));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(s1, qq));
    }
    const __m256 sc = _mm256_set1_ps(scale);
    _mm256_storeu_ps(o + j0, _mm256_mul_ps(a0, sc));
    _mm256_storeu_ps(o + j0 + 8, _mm256_mul_ps(a1, sc));
}
#endif

/* The same for one value j (the columns past the last block of 16). */
static void dn_col1(float *S, int hd, int j, const float *dec, const float *k, const float *q, const float *v, float b,
                    float scale, float *o) {
    float a = 0.0f;
    for (int i = 0; i < hd; i++) {
        float *p = S + (int64_t)i * hd + j;
        *p *= dec[i];
        a += *p * k[i];
    }
    const float d = (v[j] - a) * b;
    a = 0.0f;
    for (int i = 0; i < hd; i++) {
        float *p = S + (int64_t)i * hd + j;
        *p += k[i] * d;
        a += *p * q[i];
    }
    o[j] = a * scale;
}

static void dn_heads(void *arg, int ith, int nth) {
    const dn_job *j = arg;
    const dn_shape *sh = j->sh;
    const int hd = sh->hd, H = sh->n_head, rep = sh->n_head / sh->n_head_k;
    const int64_t ldg = sh->g_per_head ? H : (int64_t)H * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    float dec[1024]; /* hd <= 1024 (checked when the model is loaded) */
    long lo, hi;
    tp_range(H, ith, nth, &lo, &hi);
    for (long h = lo; h < hi; h++) {
        float *S = j->state + (int64_t)h * hd * hd; /* S[ik * hd + jv] */
        const int64_t hk = sh->k_interleave ? h / rep : h % sh->n_head_k;
        for (int t = 0; t < j->n; t++) {
            const float *q = j->q + t * sh->ld_qk + hk * hd, *k = j->k + t * sh->ld_qk + hk * hd;
            const float *v = j->v + t * sh->ld_v + h * hd;
            const float b = j->beta[(int64_t)t * H + h];
            float *o = j->o + t * sh->ld_o + h * hd;
            if (sh->g_per_head) {
                const float d = expf(j->g[t * ldg + h]);
                for (int i = 0; i < hd; i++) dec[i] = d;
            } else {
                const float *g = j->g + t * ldg + h * hd;
                for (int i = 0; i < hd; i++) dec[i] = expf(g[i]);
            }
            int j0 = 0;
#if defined(__x86_64__)
            if (j->avx2)
                for (; j0 + 16 <= hd; j0 += 16) dn_cols16_avx2(S, hd, j0, dec, k, q, v, b, scale, o);
#endif
            for (; j0 + 16 <= hd; j0 += 16) dn_cols16(S, hd, j0, dec, k, q, v, b, scale, o);
            for (; j0 < hd; j0++) dn_col1(S, hd, j0, dec, k, q, v, b, scale, o);
        }
    }
}

static int dn_baseline; /* dn_force_baseline */

void dn_force_baseline(int on) { dn_baseline = on; }

void dn_gated_delta(tp_pool *pool, const dn_shape *sh, float *state, const float *q, const float *k, const float *v,
                    const float *g, const float *beta, int n, float *o) {
    dn_job j = {sh, state, q, k, v, g, beta, o, n, !dn_baseline && quant_isa_available(QUANT_ISA_AVX2)};
    tp_run(pool, dn_heads, &j);
}
