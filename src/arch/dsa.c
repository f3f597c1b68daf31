/*
 * dsa.c - the lightning indexer of DeepSeek sparse attention (dsa.h), as
 * llama.cpp's src/models/deepseek32.cpp and glm-dsa.cpp compute it.
 *
 * For a token with normed input x and normed query LoRA qr, at position p:
 *   q_h   = (Wq_b * qr)[h]                 idx_n_head heads of idx_head_dim
 *   k     = LayerNorm(Wk * x) * w + b      one key, cached per position
 *           RoPE on the first n_rot values of q_h and k (NeoX layout for
 *           deepseek32, pairs for glm-dsa; the model's frequencies/YaRN)
 *   w_h   = (Wproj * x)[h] / sqrt(idx_head_dim * idx_n_head)
 *   s(j)  = sum_h w_h * relu(q_h . k_j)    for every cached position j <= p
 * and the token attends to the idx_top_k positions with the largest s (all
 * of them while there are no more than top_k). llama.cpp also multiplies q
 * and k by a Hadamard matrix before caching k; it is orthogonal, so the dot
 * products, and with them the choice, are the same without it.
 *
 * The choice is a set: it is written as ascending positions (attn.c masks
 * the rest). Which of the scores tied with the k-th largest are taken is
 * llama.cpp's choice (op_top_k_set, ops.c): ties are common, a ReLU'd score
 * being exactly 0 wherever every head's dot product is negative.
 *
 * GLM-5.2's shared layers (attention.indexer.types 0) have no indexer of
 * their own: they reuse the selection of the last layer that made one,
 * which the family's idx_sel still holds (layers run in order over the same tokens).
 * Scores are computed per row on the thread pool, each thread in its own
 * scratch row of the row's session's att (n_ctx scores, n_ctx dot
 * products). In a batched pass (own) each row is a token of its own
 * session (a run of its rows at its own positions, layer.h): its key goes
 * to that session's cache, and it chooses among that session's keys.
 */
#include "dsa.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bind.h"
#include "quant.h"
#include "util.h"

/* A DSA model is one whose architecture declares the indexer's keys (arch_dsa.c's entries). */
const df_dsa_hp *df_dsa(const df_model *m) { return m->arch && m->arch->layer_mem == df_dsa_layer_mem ? m->fam_hp : NULL; }

int df_dsa_hparams(df_model *m, int rope_neox, float norm_eps, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    df_dsa_hp *v = calloc(1, sizeof *v + (size_t)h->n_layer);
    if (!v) return df_seterr(err, errlen, "%s: out of memory", m->path);
    m->fam_hp = v; /* freed with the model */
    if (df_hp_int(m, "attention.indexer.head_count", &v->n_head, 1, 4096, 1, err, errlen) ||
        df_hp_int(m, "attention.indexer.key_length", &v->head_dim, 2, 65536, 1, err, errlen) ||
        df_hp_int(m, "attention.indexer.top_k", &v->top_k, 1, 1 << 24, 1, err, errlen))
        return -1;
    if (h->n_rot > v->head_dim)
        return df_seterr(err, errlen, "%s: the indexer's key length %d is below rope.dimension_count %d", m->path,
                         v->head_dim, h->n_rot);
    if (h->q_lora_rank < 1) return df_seterr(err, errlen, "%s: the DSA indexer needs attention.q_lora_rank", m->path);
    v->rope_neox = rope_neox;
    v->norm_eps = norm_eps;
    int32_t *types = NULL;
    if (df_hp_layers(m, "attention.indexer.types", &types, 0, 1, err, errlen)) return -1;
    memset(v->selects, 1, (size_t)h->n_layer);
    v->n_layer_sel = h->n_layer;
    if (types) {
        if (!types[0]) {
            free(types);
            return df_seterr(err, errlen, "%s: attention.indexer.types: layer 0 must have its own indexer", m->path);
        }
        v->n_layer_sel = 0;
        for (int l = 0; l < h->n_layer; l++) v->n_layer_sel += v->selects[l] = (uint8_t)types[l];
        free(types);
    }
    return 0;
}

int df_dsa_layer_mem(const df_model *m, int l, df_mem_decl *d) {
    const df_dsa_hp *v = m->fam_hp;
    if (l >= m->hp.n_layer || !v->selects[l]) return 0;
    d[0] = (df_mem_decl){"indexer keys", DF_ROWS_POS, 0, v->head_dim, 1};
    return 1;
}

void df_dsa_scratch(const df_model *m, df_layout *lay) {
    const df_dsa_hp *v = m->fam_hp;
    df_dsa_fam *f = df_layout_fam(lay);
    const uint64_t B = (uint64_t)df_layout_batch(lay), H = (uint64_t)v->n_head, D = (uint64_t)v->head_dim;
    df_layout_scratch(lay, &f->idx_q, B * H * D * sizeof(float));
    df_layout_scratch(lay, &f->idx_k, B * D * sizeof(float));
    df_layout_scratch(lay, &f->idx_w, B * H * sizeof(float));
    df_layout_scratch(lay, &f->idx_sel, B * (uint64_t)v->top_k * sizeof(int32_t));
    df_layout_att(lay, 2 * (int64_t)df_layout_ctx(lay)); /* select_tokens' scores and dot products */
}

const int32_t *df_dsa_chosen(const df_session *s, int t) {
    const df_dsa_fam *f = s->fam;
    return f->idx_sel + (int64_t)t * df_dsa(s->m)->top_k;
}

int df_dsa_bind_layer(df_model *m, int l, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    const df_dsa_hp *v = m->fam_hp;
    df_layer *L = &m->layers[l];
    const int64_t E = h->n_embd, D = v->head_dim, H = v->n_head;
    const int req = v->selects[l];
    if (!req) return 0; /* a shared layer's indexer tensors, if any, are never read */
    return df_bind(m, &L->idx_wq_b, "blk.%d.indexer.attn_q_b.weight", l, req, h->q_lora_rank, H * D, 1, err, errlen) ||
           df_bind(m, &L->idx_wk, "blk.%d.indexer.attn_k.weight", l, req, E, D, 1, err, errlen) ||
           df_bind(m, &L->idx_k_norm, "blk.%d.indexer.k_norm.weight", l, req, D, 1, 1, err, errlen) ||
           df_bind(m, &L->idx_k_norm_b, "blk.%d.indexer.k_norm.bias", l, req, D, 1, 1, err, errlen) ||
           df_bind_mat(m, &L->idx_proj, "blk.%d.indexer.proj.weight", l, req, E, H, err, errlen)
               ? -1
               : 0;
}

/* LayerNorm of n rows of d floats in place, then * w + b (ggml_norm, mul, add). */
static int layer_norm(df_session *s, df_layer *L, float *x, int n, int64_t d, char *err, size_t errlen) {
    const float eps = df_dsa(s->m)->norm_eps;
    for (int t = 0; t < n; t++) {
        float *r = x + t * d;
        double mean = 0.0, var = 0.0;
        for (int64_t i = 0; i < d; i++) mean += r[i];
        mean /= (double)d;
        for (int64_t i = 0; i < d; i++) {
            r[i] -= (float)mean;
            var += (double)r[i] * r[i];
        }
        const float scale = 1.0f / sqrtf((float)(var / (double)d) + eps);
        for (int64_t i = 0; i < d; i++) r[i] *= scale;
    }
    const float *w = ws_fetch(s->m->ws, L->idx_k_norm, err, errlen);
    if (!w) return -1;
    for (int t = 0; t < n; t++)
        for (int64_t i = 0; i < d; i++) x[t * d + i] *= w[i];
    ws_release(s->m->ws, L->idx_k_norm);
    return df_add_bias(s, L->idx_k_norm_b, x, n, d, err, errlen);
}

typedef struct {
    df_session *s;
    df_session *const *own;
    int l, n;
} select_job;

/* Scores and choice of the job's rows ith, ith + nth, ... (each in its own
 * session's keys and per-thread scratch row) */
static void select_tokens(void *arg, int ith, int nth) {
    const select_job *j = arg;
    df_session *s = j->s;
    const df_dsa_hp *v = s->m->fam_hp;
    const int H = v->n_head, D = v->head_dim, K = v->top_k;
    const quant_traits *kt = quant_traits_get(df_mem_kv_type(s));
    const df_dsa_fam *f = s->fam;
    for (int t = ith; t < j->n; t += nth) {
        df_session *o = j->own ? j->own[t] : s;
        const int nk = df_row_pos(s, j->own, t) + 1;
        if (nk <= K) continue; /* every key is chosen */
        float *score = o->att + (int64_t)ith * o->att_stride, *dot = score + o->n_ctx;
        const uint8_t *keys = df_mem_item(o, j->l, 0);
        const size_t stride = df_mem_item_row_bytes(o, j->l, 0);
        const float *w = f->idx_w + (int64_t)t * H;
        memset(score, 0, sizeof(float) * (size_t)nk);
        for (int hh = 0; hh < H; hh++) {
            kt->dot_rows(D, f->idx_q + ((int64_t)t * H + hh) * D, keys, stride, nk, dot);
            for (int p = 0; p < nk; p++) score[p] += w[hh] * (dot[p] > 0.0f ? dot[p] : 0.0f);
        }
        int32_t *sel = f->idx_sel + (int64_t)t * K;
        op_top_k_set(score, nk, K, sel);
        if (o->ties) df_note_choice(o, nk - 1, j->l, "indexer", op_top_k_margin(score, nk, K, sel));
    }
}

int df_dsa_select(df_session *s, df_session *const *own, int l, int n, const float *qr, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    const df_dsa_hp *v = m->fam_hp;
    df_layer *L = &m->layers[l];
    if (!v->selects[l]) return 0; /* idx_sel holds the last selecting layer's choice */
    df_dsa_fam *f = s->fam;
    const int64_t H = v->n_head, D = v->head_dim;
    if (df_matmul(s, L->idx_wq_b, qr, n, f->idx_q, H * D, err, errlen) ||
        df_matmul(s, L->idx_wk, s->xb, n, f->idx_k, D, err, errlen) ||
        df_matmul(s, L->idx_proj, s->xb, n, f->idx_w, H, err, errlen) || layer_norm(s, L, f->idx_k, n, D, err, errlen))
        return -1;
    rope_params rp = s->rope;
    rp.neox = v->rope_neox;
    const float wscale = 1.0f / sqrtf((float)(D * H));
    for (int t = 0; t < n; t++) {
        const float *rc = s->rope_cache + (int64_t)t * h->n_rot;
        rope_apply(&rp, rc, f->idx_q + t * H * D, (int)H, (int)D);
        rope_apply(&rp, rc, f->idx_k + t * D, 1, (int)D);
        for (int64_t hh = 0; hh < H; hh++) f->idx_w[t * H + hh] *= wscale;
    }
    if (!own) df_mem_item_store(s, l, 0, n, f->idx_k);
    for (int t = 0, r; own && t < n; t += r) { /* run by run: each session's keys at its own position */
        r = df_row_run(own, t, n);
        df_mem_item_store(own[t], l, 0, r, f->idx_k + t * D);
    }
    select_job job = {s, own, l, n};
    tp_run(m->pool, select_tokens, &job);
    return 0;
}
