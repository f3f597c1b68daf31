/*
 * layer.c - the pieces every architecture's forward pass is made of (layer.h):
 * matrix products and embedding lookups through the weight store, RMSNorm
 * with a stored weight, biases, the gated activations and the dense FFN,
 * attention over a layer's KV cache, and the output head.
 *
 * Every weight fetch is checked: a weight that cannot be read (a streamed
 * file that became unreadable, an I/O error) fails the call with the
 * store's message; nothing falls back to an unweighted norm or a skipped
 * bias.
 */
#include "layer.h"

#include <math.h>
#include <string.h>

#include "quant.h"
#include "util.h"

int df_matmul(df_session *s, ws_tensor *w, const float *x, int n_tok, float *y, int64_t ldy, char *err,
              size_t errlen) {
    ws_tensor *const one[1] = {w};
    float *const ys[1] = {y};
    return df_matmul_n(s, 1, one, x, n_tok, ys, &ldy, err, errlen);
}

int df_matmul_n(df_session *s, int n_w, ws_tensor *const *w, const float *x, int n_tok, float *const *y,
                const int64_t *ldy, char *err, size_t errlen) {
    mm_op ops[MM_MAX_OPS] = {{0, NULL, 0, NULL, 0, NULL, 0}};
    int got = 0, rc = 0;
    if (n_w < 1 || n_w > MM_MAX_OPS) return df_seterr(err, errlen, "internal: %d products in one df_matmul_n", n_w);
    for (; got < n_w; got++) {
        const void *data = w[got]->ne[0] == w[0]->ne[0] ? ws_fetch_mm(s->m->ws, w[got], err, errlen) : NULL;
        if (!data) {
            rc = w[got]->ne[0] == w[0]->ne[0] ? -1 : df_seterr(err, errlen, "internal: '%s' and '%s' have different inputs",
                                                             w[0]->gt->name, w[got]->gt->name);
            break;
        }
        ops[got] = (mm_op){w[got]->type, data, w[got]->ne[1], y[got], ldy[got], NULL, w[got]->packed};
    }
    if (rc == 0 && mm_mul_n(s->m->pool, ops, n_w, w[0]->ne[0], x, n_tok, &s->mm) != 0)
        rc = df_seterr(err, errlen, "internal: matmul scratch too small for '%s'", w[0]->gt->name);
    while (got > 0) ws_release(s->m->ws, w[--got]);
    return rc;
}

int df_ffn_dense(df_session *s, ws_tensor *gate, ws_tensor *up, ws_tensor *down, const float *x, int n, float *out,
                 char *err, size_t errlen) {
    const int64_t F = gate->ne[1];
    ws_tensor *const w[2] = {gate, up};
    float *const y[2] = {s->hb, s->hb2};
    const int64_t ld[2] = {F, F};
    if (df_matmul_n(s, 2, w, x, n, y, ld, err, errlen)) return -1;
    df_glu_pool(s->m->pool, &s->m->hp, s->hb, s->hb2, (int)(n * F));
    return df_matmul(s, down, s->hb, n, out, down->ne[1], err, errlen);
}

/* SwiGLU, SwiGLU-OAI, clamped SwiGLU, or SiTU: beta*tanh(g/beta) * sigmoid(g) * lb*tanh(u/lb) (the up
 * branch unchanged when lb <= 0; the scalar kernel in ggml's order of
 * operations, the SIMD ones within a few ulp of it). */
void df_glu(const df_hparams *h, float *a, const float *b, int n) {
    if (h->act == DF_ACT_SWIGLU_OAI) { /* ggml's swiglu_oai, alpha 1.702, limit 7 */
        for (int i = 0; i < n; i++) {
            const float x = a[i] < 7.0f ? a[i] : 7.0f, y = b[i] < -7.0f ? -7.0f : b[i] > 7.0f ? 7.0f : b[i];
            a[i] = x / (1.0f + expf(1.702f * -x)) * (y + 1.0f);
        }
        return;
    }
    if (h->act == DF_ACT_SWIGLU_CLAMP) { /* ggml's swiglu_clamp: silu(min(g, lim)) * clamp(u, -lim, lim) */
        const float lim = h->swiglu_limit;
        for (int i = 0; i < n; i++) {
            const float g = a[i] < lim ? a[i] : lim, u = b[i] < -lim ? -lim : b[i] > lim ? lim : b[i];
            a[i] = g / (1.0f + expf(-g)) * u;
        }
        return;
    }
    if (h->act != DF_ACT_SITU) op_swiglu(a, b, n);
    else op_situ(a, b, n, h->situ_beta, h->situ_linear_beta);
}

#define GLU_POOL_MIN 2048 /* SiTU elements worth a pool dispatch (~20 ns each) */
typedef struct {
    const df_hparams *h;
    float *a;
    const float *b;
    int n;
} glu_job;

static void glu_part(void *arg, int ith, int nth) {
    const glu_job *j = arg;
    long lo, hi;
    tp_range(j->n, ith, nth, &lo, &hi);
    if (hi > lo) df_glu(j->h, j->a + lo, j->b + lo, (int)(hi - lo));
}

void df_glu_pool(tp_pool *pool, const df_hparams *h, float *a, const float *b, int n) {
    if (h->act != DF_ACT_SITU || n < GLU_POOL_MIN || tp_size(pool) == 1) {
        df_glu(h, a, b, n);
        return;
    }
    glu_job j = {h, a, b, n};
    tp_run(pool, glu_part, &j);
}

int df_output(df_session *s, int n, float *logits, int all_logits, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    const int64_t E = h->n_embd;
    const int first = s->out_rows || all_logits ? 0 : n - 1;
    const int cnt = s->out_rows ? s->n_out_rows : all_logits ? n : 1;
    const float *on = ws_fetch(m->ws, m->output_norm, err, errlen);
    if (!on) return -1;
    for (int j = 0; j < cnt; j++) { /* row j of the output from row out_rows[j] (or first + j) */
        const int64_t t = s->out_rows ? s->out_rows[j] : first + j;
        op_rmsnorm(s->xb + (first + j) * E, s->x + t * E, on, (int)E, h->norm_eps);
    }
    ws_release(m->ws, m->output_norm);
    return df_matmul(s, m->output, s->xb + (int64_t)first * E, cnt, logits, h->n_vocab, err, errlen);
}

int df_embed(df_session *s, const int32_t *tokens, int n, float *out, char *err, size_t errlen) {
    ws_tensor *t = s->m->tok_embd;
    const uint8_t *data = ws_fetch(s->m->ws, t, err, errlen);
    if (!data) return -1;
    const quant_traits *q = quant_traits_get(t->type);
    for (int i = 0; i < n; i++) q->to_float(data + (size_t)tokens[i] * t->row_bytes, out + (int64_t)i * t->ne[0], t->ne[0]);
    ws_release(s->m->ws, t);
    return 0;
}

int df_add_bias(df_session *s, ws_tensor *b, float *y, int n_tok, int64_t ld, char *err, size_t errlen) {
    if (!b) return 0;
    const float *bv = ws_fetch(s->m->ws, b, err, errlen);
    if (!bv) return -1;
    for (int t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < b->ne[0]; i++) y[(int64_t)t * ld + i] += bv[i];
    ws_release(s->m->ws, b);
    return 0;
}

int df_norm_rows(df_session *s, ws_tensor *w, const float *x, int n, int64_t width, int64_t ld, float *out, char *err,
                 size_t errlen) {
    const float *wv = ws_fetch(s->m->ws, w, err, errlen);
    if (!wv) return -1;
    for (int t = 0; t < n; t++) op_rmsnorm(out + t * ld, x + t * ld, wv, (int)width, s->m->hp.norm_eps);
    ws_release(s->m->ws, w);
    return 0;
}

void df_attention_sinks(df_session *s, int l, int n_tok, const float *q, float *out, const float *sinks) {
    const df_hparams *h = &s->m->hp;
    df_attn_desc d;
    df_mem_attn_view(s, l, &d);
    d.n_head = h->n_head;
    d.n_head_kv = h->n_head_kv;
    d.hd = h->head_dim;
    d.hdv = h->head_dim_v;
    d.q = q;
    d.q_tok = (int64_t)h->n_head * h->head_dim;
    d.q_head = h->head_dim;
    d.out = out;
    d.o_tok = (int64_t)h->n_head * h->head_dim_v;
    d.o_head = h->head_dim_v;
    d.scale = h->kq_scale;
    d.n_tok = n_tok;
    d.window = h->swa && h->swa[l] ? h->n_swa : 0;
    d.sinks = sinks;
    df_attention_run(s->m->pool, s->att, s->att_stride, &d);
}

int df_row_pos(const df_session *s, df_session *const *own, int t) {
    if (!own) return s->pos + t;
    int k = 0; /* rows of the same run before t */
    while (t - k > 0 && own[t - k - 1] == own[t]) k++;
    return own[t]->pos + k;
}

int df_row_run(df_session *const *own, int t, int n) {
    if (!own) return n - t;
    int r = 1;
    while (t + r < n && own[t + r] == own[t]) r++;
    return r;
}

void df_attend_rows(df_session *s, df_session *const *own, int l, int n, const float *k, const float *v,
                    const float *q, float *out, const float *sinks) {
    const df_hparams *h = &s->m->hp;
    if (!own) {
        df_mem_store(s, l, n, k, v);
        df_attention_sinks(s, l, n, q, out, sinks);
        return;
    }
    const int64_t qdim = (int64_t)h->n_head * h->head_dim, odim = (int64_t)h->n_head * h->head_dim_v;
    for (int t = 0, r; t < n; t += r) { /* run by run, as df_decode would run each alone */
        r = df_row_run(own, t, n);
        df_mem_store(own[t], l, r, k + t * s->kv_dim_k, v + t * s->kv_dim_v);
        df_attention_sinks(own[t], l, r, q + t * qdim, out + t * odim, sinks);
    }
}

int df_layer_abort(df_session *s, char *err, size_t errlen) {
    if (!s->abort_cb || s->m->hp.n_layer_recurrent > 0 || !s->abort_cb(s->abort_ctx)) return 0;
    s->cancelled = 1;
    return df_seterr(err, errlen, "cancelled at position %d", s->pos);
}
