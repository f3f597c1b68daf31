/*
 * attn.c - causal self-attention over the KV cache (llama family), and the
 * KV cache writes every architecture shares.
 *
 * DESIGN
 * The cache holds, per layer and position, the keys of all KV heads side by
 * side (kv_dim_k elements) and likewise the values, as f32 or f16. Query
 * heads that share a KV head (grouped-query attention) read the same K/V
 * rows, and so do consecutive query tokens of a prompt. Work is therefore
 * cut into units of (KV head, a run of its query heads, a run of tokens):
 * up to ATT_MAX_Q queries that walk the cache together, KEY_BLOCK rows at a
 * time, so each block of K (then V) rows is loaded from memory once and
 * reused from L1 by every query of the unit. Units are claimed from an
 * atomic counter (tp_run_dyn), latest tokens first (they have the most
 * keys), so the causal imbalance evens out.
 *
 * Per query: scores = K q (the type's dot_rows kernel, eight rows at a
 * time), scaled; softmax with the type-independent exp_sum kernel; then
 * out = sum_p score_p V_p (axpy_rows, accumulating in key order). Each
 * query only reads keys up to its own position (causal), and every step is
 * the same whichever unit the query lands in, so a token's attention output
 * is bit-identical in a batch and alone.
 *
 * Scratch: s->att holds ATT_MAX_Q score rows of n_ctx floats per thread
 * (df_attn_scratch sizes it).
 */
#include <stdatomic.h>
#include <string.h>

#include "model.h"
#include "quant.h"

#define ATT_MAX_Q 32   /* queries per work unit */
#define KEY_BLOCK 64   /* cache rows per block: 64 x 128 f32 = 32 KiB */

int64_t df_attn_scratch(const df_hparams *h, int n_ctx) {
    if (h->kv_lora_rank > 0) /* MLA (arch_deepseek2.c): one score row, or one latent-sized row */
        return n_ctx > h->kv_lora_rank ? n_ctx : h->kv_lora_rank;
    return (int64_t)ATT_MAX_Q * n_ctx;
}

void df_kv_store(df_session *s, int layer, int n_tok, const float *k, const float *v) {
    const int64_t ctx = s->n_ctx;
    const quant_traits *kv = quant_traits_get(s->kv_elt == 4 ? DF_TYPE_F32 : DF_TYPE_F16);
    for (int t = 0; t < n_tok; t++) {
        const int64_t pos = s->pos + t;
        uint8_t *kd = s->k_cache + ((layer * ctx + pos) * s->kv_dim_k) * (int64_t)s->kv_elt;
        kv->from_float(k + (int64_t)t * s->kv_dim_k, kd, s->kv_dim_k);
        if (v) { /* MLA caches no values */
            uint8_t *vd = s->v_cache + ((layer * ctx + pos) * s->kv_dim_v) * (int64_t)s->kv_elt;
            kv->from_float(v + (int64_t)t * s->kv_dim_v, vd, s->kv_dim_v);
        }
    }
}

typedef struct {
    df_session *s;
    int layer, n_tok;
    const float *q;
    float *out;
    int hs, tq;              /* query heads and tokens per unit */
    int n_hs, n_tb;          /* head runs per KV head, token blocks */
    long n_units;
    atomic_long next;
} attn_job;

/* One unit: KV head g, query heads [h0, h1) of it, tokens [t0, t1). */
static void attn_unit(const attn_job *j, float *scratch, int g, int h0, int h1, int t0, int t1) {
    const df_session *s = j->s;
    const df_hparams *h = &s->m->hp;
    const int hd = h->head_dim, hdv = h->head_dim_v, group = h->n_head / h->n_head_kv;
    const int64_t ctx = s->n_ctx, elt = (int64_t)s->kv_elt;
    const quant_traits *kt = quant_traits_get(s->kv_elt == 4 ? DF_TYPE_F32 : DF_TYPE_F16);
    const quant_traits *ft = quant_traits_get(DF_TYPE_F32);
    const size_t kstride = (size_t)(s->kv_dim_k * elt), vstride = (size_t)(s->kv_dim_v * elt);
    const uint8_t *kbase = s->k_cache + ((int64_t)j->layer * ctx * s->kv_dim_k + (int64_t)g * hd) * elt;
    const uint8_t *vbase = s->v_cache + ((int64_t)j->layer * ctx * s->kv_dim_v + (int64_t)g * hdv) * elt;
    const int nh = h1 - h0, nq = nh * (t1 - t0);
    const int max_keys = s->pos + t1;
#define QUERY(i) (j->q + (int64_t)(t0 + (i) / nh) * h->n_head * hd + (int64_t)(g * group + h0 + (i) % nh) * hd)
#define OUT(i) (j->out + (int64_t)(t0 + (i) / nh) * h->n_head * hdv + (int64_t)(g * group + h0 + (i) % nh) * hdv)
#define NKEYS(i) (s->pos + t0 + (i) / nh + 1)
    /* scores, a block of keys at a time for all queries */
    for (int p0 = 0; p0 < max_keys; p0 += KEY_BLOCK)
        for (int i = 0; i < nq; i++) {
            const int nk = NKEYS(i) - p0;
            if (nk <= 0) continue;
            kt->dot_rows(hd, QUERY(i), kbase + (size_t)p0 * kstride, kstride, nk < KEY_BLOCK ? nk : KEY_BLOCK,
                         scratch + (int64_t)i * ctx + p0);
        }
    /* softmax of scale * scores */
    for (int i = 0; i < nq; i++) {
        float *sc = scratch + (int64_t)i * ctx;
        const int nk = NKEYS(i);
        float mx = sc[0] * h->kq_scale;
        for (int p = 0; p < nk; p++) {
            sc[p] *= h->kq_scale;
            mx = sc[p] > mx ? sc[p] : mx;
        }
        const float inv = 1.0f / ft->exp_sum(sc, nk, mx);
        for (int p = 0; p < nk; p++) sc[p] *= inv;
        memset(OUT(i), 0, sizeof(float) * (size_t)hdv);
    }
    /* weighted sum of values, in key order */
    for (int p0 = 0; p0 < max_keys; p0 += KEY_BLOCK)
        for (int i = 0; i < nq; i++) {
            const int nk = NKEYS(i) - p0;
            if (nk <= 0) continue;
            kt->axpy_rows(hdv, scratch + (int64_t)i * ctx + p0, vbase + (size_t)p0 * vstride, vstride,
                          nk < KEY_BLOCK ? nk : KEY_BLOCK, OUT(i));
        }
#undef QUERY
#undef OUT
#undef NKEYS
}

static void attn_worker(void *arg, int ith, int nth) {
    attn_job *j = arg;
    (void)nth;
    const df_hparams *h = &j->s->m->hp;
    const int group = h->n_head / h->n_head_kv;
    float *scratch = j->s->att + (int64_t)ith * j->s->att_stride;
    for (long u; (u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_units;) {
        const long per_tb = (long)h->n_head_kv * j->n_hs;
        const int tb = j->n_tb - 1 - (int)(u / per_tb); /* latest tokens first */
        const int g = (int)(u % per_tb) / j->n_hs, hsi = (int)(u % per_tb) % j->n_hs;
        const int h0 = hsi * j->hs, h1 = h0 + j->hs < group ? h0 + j->hs : group;
        const int t0 = tb * j->tq, t1 = t0 + j->tq < j->n_tok ? t0 + j->tq : j->n_tok;
        attn_unit(j, scratch, g, h0, h1, t0, t1);
    }
}

void df_attention(df_session *s, int layer, int n_tok, const float *q, float *out) {
    const df_hparams *h = &s->m->hp;
    const int group = h->n_head / h->n_head_kv, nth = tp_size(s->m->pool);
    attn_job j;
    memset(&j, 0, sizeof j);
    j.s = s;
    j.layer = layer;
    j.n_tok = n_tok;
    j.q = q;
    j.out = out;
    j.hs = group < ATT_MAX_Q ? group : ATT_MAX_Q;
    for (;;) {
        j.n_hs = (group + j.hs - 1) / j.hs;
        j.tq = ATT_MAX_Q / j.hs < n_tok ? ATT_MAX_Q / j.hs : n_tok;
        j.n_tb = (n_tok + j.tq - 1) / j.tq;
        j.n_units = (long)h->n_head_kv * j.n_hs * j.n_tb;
        if (j.n_units >= 2L * nth || j.hs == 1) break;
        j.hs = (j.hs + 1) / 2; /* too few units (generation, few KV heads): split the group */
    }
    atomic_init(&j.next, 0);
    if (j.n_units == 1) attn_worker(&j, 0, 1);
    else tp_run_dyn(s->m->pool, attn_worker, &j);
}
