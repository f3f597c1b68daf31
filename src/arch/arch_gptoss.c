/*
 * arch_gptoss.c - OpenAI's gpt-oss-20b / 120b (general.architecture
 * "gpt-oss"), as llama.cpp's src/models/openai-moe.cpp defines it.
 *
 * A pre-norm decoder block with:
 *   - biases on Q, K, V and the attention output;
 *   - attention sinks: one learned logit per head that joins each softmax's
 *     denominator (attn.c);
 *   - sliding-window attention on the layers attention.sliding_window_pattern
 *     marks (period P: layer l slides when l % P < P - 1; gpt-oss: P = 2, so
 *     the even layers), with rope.freq_base_swa as their RoPE base where the
 *     file has it; those layers' KV cache is a ring that holds only the
 *     window (df_kv_ring), so their memory does not grow with the context;
 *   - NeoX RoPE, attention scale 1/sqrt(head size);
 *   - every layer a mixture of experts (moe.c): router with a bias, experts
 *     chosen by their raw logits and weighted by the softmax over the chosen
 *     (DF_GATING_SOFTMAX_WEIGHT), biases on each expert's gate, up and down
 *     products, and the swiglu_oai activation
 *       min(g, 7) * sigmoid(1.702 * min(g, 7)) * (clamp(u, -7, 7) + 1);
 *     MXFP4 experts in the released files;
 *   - the FFN's norm is named post_attention_norm.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bind.h"
#include "moe.h"
#include "quant.h"
#include "util.h"

/* The family's hyperparameters (m->fam_hp). */
typedef struct {
    float rope_base_swa; /* rope.freq_base_swa: the window layers' RoPE base */
} gptoss_hp;

static int hparams(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    gptoss_hp *g = calloc(1, sizeof *g);
    if (!g) return df_seterr(err, errlen, "out of memory");
    m->fam_hp = g; /* freed with the model */
    if (h->n_expert == 0 || h->n_ff_exp == 0)
        return df_seterr(err, errlen, "%s: gpt-oss needs expert_count, expert_used_count and "
                         "expert_feed_forward_length", m->path);
    if (h->n_rot != h->head_dim || h->head_dim_v != h->head_dim)
        return df_seterr(err, errlen, "%s: gpt-oss needs rope.dimension_count == key_length == value_length "
                         "(%d, %d, %d)", m->path, h->n_rot, h->head_dim, h->head_dim_v);
    if (h->n_ff_l) return df_seterr(err, errlen, "%s: gpt-oss has one feed_forward_length for all layers", m->path);
    int period = 2;
    if (df_hp_int(m, "attention.sliding_window", &h->n_swa, 1, 1 << 24, 1, err, errlen) ||
        df_hp_int(m, "attention.sliding_window_pattern", &period, 0, h->n_layer, 0, err, errlen))
        return -1;
    h->swa = malloc((size_t)h->n_layer);
    if (!h->swa) return df_seterr(err, errlen, "%s: out of memory", m->path);
    for (int l = 0; l < h->n_layer; l++) h->swa[l] = period == 0 || l % period < period - 1;
    g->rope_base_swa = h->rope_base;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.freq_base_swa", m->arch_name);
    if (gguf_find(m->g, key)) {
        if (gguf_get_f32(m->g, key, &g->rope_base_swa, err, errlen)) return -1;
        if (!(g->rope_base_swa >= 1.0f && g->rope_base_swa <= 1e12f))
            return df_seterr(err, errlen, "%s: '%s' = %g is out of range", m->path, key, g->rope_base_swa);
    }
    h->gating = DF_GATING_SOFTMAX_WEIGHT;
    h->act = DF_ACT_SWIGLU_OAI;
    h->expert_weights_norm = 0;
    h->expert_weights_scale = 0.0f; /* llama.cpp reads none for gpt-oss */
    h->n_expert_shared = h->n_ff_shexp = h->n_layer_dense_lead = 0;
    h->n_expert_groups = 0;
    return 0;
}

/* An f32 tensor of exactly [ne0, ne1] (the per-expert biases). */
static int bind_f32(df_model *m, ws_tensor **dst, const char *fmt, int l, int64_t ne0, int64_t ne1, char *err,
                    size_t errlen) {
    if (df_bind(m, dst, fmt, l, 1, ne0, ne1, 1, err, errlen)) return -1;
    if ((*dst)->type != DF_TYPE_F32) return df_seterr(err, errlen, "%s: tensor '%s' must be f32", m->path, (*dst)->gt->name);
    return 0;
}

static int bind(df_model *m, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    const int64_t E = h->n_embd, hd = h->head_dim, Q = (int64_t)h->n_head * hd, KV = (int64_t)h->n_head_kv * hd;
    const int64_t X = h->n_expert, F = h->n_ff_exp;
    if (df_bind_embed_output(m, err, errlen)) return -1;
    for (int l = 0; l < h->n_layer; l++) {
        df_layer *L = &m->layers[l];
        if (df_bind(m, &L->attn_norm, "blk.%d.attn_norm.weight", l, 1, E, 1, 1, err, errlen) ||
            df_bind(m, &L->ffn_norm, "blk.%d.post_attention_norm.weight", l, 1, E, 1, 1, err, errlen) ||
            df_bind(m, &L->wq, "blk.%d.attn_q.weight", l, 1, E, Q, 1, err, errlen) ||
            df_bind(m, &L->wk, "blk.%d.attn_k.weight", l, 1, E, KV, 1, err, errlen) ||
            df_bind(m, &L->wv, "blk.%d.attn_v.weight", l, 1, E, KV, 1, err, errlen) ||
            df_bind(m, &L->bq, "blk.%d.attn_q.bias", l, 0, Q, 1, 1, err, errlen) ||
            df_bind(m, &L->bk, "blk.%d.attn_k.bias", l, 0, KV, 1, 1, err, errlen) ||
            df_bind(m, &L->bv, "blk.%d.attn_v.bias", l, 0, KV, 1, 1, err, errlen) ||
            df_bind(m, &L->wo, "blk.%d.attn_output.weight", l, 1, Q, E, 1, err, errlen) ||
            df_bind(m, &L->bo, "blk.%d.attn_output.bias", l, 1, E, 1, 1, err, errlen) ||
            df_bind(m, &L->attn_sinks, "blk.%d.attn_sinks.weight", l, 1, h->n_head, 1, 1, err, errlen) ||
            df_moe_bind_layer(m, l, (int)F, err, errlen) ||
            df_bind(m, &L->ffn_gate_inp_b, "blk.%d.ffn_gate_inp.bias", l, 1, X, 1, 1, err, errlen) ||
            bind_f32(m, &L->ffn_gate_exps_b, "blk.%d.ffn_gate_exps.bias", l, F, X, err, errlen) ||
            bind_f32(m, &L->ffn_up_exps_b, "blk.%d.ffn_up_exps.bias", l, F, X, err, errlen) ||
            bind_f32(m, &L->ffn_down_exps_b, "blk.%d.ffn_down_exps.bias", l, E, X, err, errlen))
            return -1;
    }
    return 0;
}

/* Layer l's attention on s->xb (n rows; own: layer.h) into s->xb2, with rope rp. */
static int attention(df_session *s, df_session *const *own, int l, int n, const rope_params *rp, char *err,
                     size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t qdim = (int64_t)h->n_head * h->head_dim;
    ws_tensor *const wqkv[3] = {L->wq, L->wk, L->wv};
    float *const yqkv[3] = {s->q, s->k, s->v};
    const int64_t ldqkv[3] = {qdim, s->kv_dim_k, s->kv_dim_v};
    if (df_matmul_n(s, 3, wqkv, s->xb, n, yqkv, ldqkv, err, errlen) ||
        df_add_bias(s, L->bq, s->q, n, qdim, err, errlen) || df_add_bias(s, L->bk, s->k, n, s->kv_dim_k, err, errlen) ||
        df_add_bias(s, L->bv, s->v, n, s->kv_dim_v, err, errlen))
        return -1;
    for (int t = 0; t < n; t++) {
        float *rc = s->rope_cache + (int64_t)t * h->n_rot;
        rope_cache(rp, df_row_pos(s, own, t), rc);
        rope_apply(rp, rc, s->q + t * qdim, h->n_head, h->head_dim);
        rope_apply(rp, rc, s->k + t * s->kv_dim_k, h->n_head_kv, h->head_dim);
    }
    const float *sinks = ws_fetch(m->ws, L->attn_sinks, err, errlen);
    if (!sinks) return -1;
    df_attend_rows(s, own, l, n, s->k, s->v, s->q, s->xb, sinks);
    ws_release(m->ws, L->attn_sinks);
    if (df_matmul(s, L->wo, s->xb, n, s->xb2, h->n_embd, err, errlen)) return -1;
    return df_add_bias(s, L->bo, s->xb2, n, h->n_embd, err, errlen);
}

/* The forward pass of n rows in s's scratch (own: layer.h, df_row_pos). */
static int forward(df_session *s, df_session *const *own, const int32_t *tokens, int n, float *logits,
                   int all_logits, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    const int64_t E = h->n_embd;
    rope_params swa = s->rope; /* the window layers' RoPE: their own base (and YaRN ramp) */
    const float base_swa = ((const gptoss_hp *)m->fam_hp)->rope_base_swa;
    swa.freq_base = base_swa;
    rope_corr_dims(h->n_rot, h->n_ctx_orig, base_swa, h->yarn_beta_fast, h->yarn_beta_slow, swa.corr_dims);
    int lo, hi; /* this rank's layers (pipe.h; alone: all) */
    df_pipe_layers(s, &lo, &hi);
    float *const cb[1] = {s->x};
    const size_t cf[1] = {(size_t)n * (size_t)E};
    if (lo == 0 ? df_embed(s, tokens, n, s->x, err, errlen) : df_pipe_enter(s, cb, cf, 1, err, errlen)) return -1;
    for (int l = lo; l < hi; l++) {
        if (df_norm_rows(s, m->layers[l].attn_norm, s->x, n, E, E, s->xb, err, errlen)) return -1;
        if (attention(s, own, l, n, h->swa[l] ? &swa : &s->rope, err, errlen)) return -1;
        for (int64_t i = 0; i < (int64_t)n * E; i++) s->x[i] += s->xb2[i];
        if (df_ffn_block(s, l, n, err, errlen)) return -1; /* post_attention_norm, experts, residual */
    }
    if (df_pipe_hop(s, own, tokens, n, cb, cf, 1, err, errlen)) return -1;
    if (!own) s->pos += n;
    return logits ? df_output(s, n, logits, all_logits, err, errlen) : 0;
}

const df_arch df_arch_gptoss = {
    .name = "gpt-oss",
    .rope_neox = 1,
    .hparams = hparams,
    .bind = bind,
    .forward = forward,
};
