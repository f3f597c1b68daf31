/*
 * arch_granite.c - IBM Granite (general.architecture "granite": Granite 3.x
 * dense, and its routed-expert variant when the file has experts), as
 * llama.cpp's src/models/granite.cpp defines it.
 *
 * A llama decoder (arch_llama.c's tensors, attention and FFN) with four
 * scalars (granite.*):
 *   embedding_scale   the token embeddings are multiplied by it (0: not);
 *   attention.scale   the attention's kq scale (0: 1/sqrt(head_dim));
 *   residual_scale    each block's attention and FFN outputs are multiplied
 *                     by it before they join the residual (0: not);
 *   logit_scale       the logits are divided by it (required).
 * rope.scaling.finetuned false turns RoPE off (llama.cpp's switch; true
 * when absent). Routed experts (expert_count > 0) are feed_forward_length
 * wide, softmax-gated with normalised weights and no weight scale, plus a
 * shared expert of expert_shared_feed_forward_length when the file has one,
 * added ungated, whatever the file's expert_gating_func, expert_weights_*
 * or ffn_gate_inp_shexp say: llama.cpp reads none of them for granite.
 * Head sizes must equal the rotary dimension, as llama.cpp asserts.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "arch.h"
#include "bind.h"
#include "gguf.h"
#include "moe.h"
#include "util.h"

/* The family's hyperparameters (m->fam_hp). */
typedef struct {
    float embedding_scale, residual_scale, logit_scale;
    int rope; /* rope.scaling.finetuned */
} granite_hp;

static int hparams(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    granite_hp *g = calloc(1, sizeof *g);
    if (!g) return df_seterr(err, errlen, "%s: out of memory", m->path);
    m->fam_hp = g; /* freed with the model */
    char key[96];
    snprintf(key, sizeof key, "%s.logit_scale", m->arch_name);
    if (!gguf_find(m->g, key)) return df_seterr(err, errlen, "%s: granite needs %s", m->path, key);
    float attn = 0.0f;
    g->logit_scale = 1.0f;
    if (df_hp_float(m, "logit_scale", &g->logit_scale, 1e-6f, 1e6f, err, errlen) ||
        df_hp_float(m, "residual_scale", &g->residual_scale, 0.0f, 1e6f, err, errlen) ||
        df_hp_float(m, "embedding_scale", &g->embedding_scale, 0.0f, 1e6f, err, errlen) ||
        df_hp_float(m, "attention.scale", &attn, 0.0f, 1e6f, err, errlen))
        return -1;
    if (attn != 0.0f) h->kq_scale = attn;
    g->rope = 1;
    snprintf(key, sizeof key, "%s.rope.scaling.finetuned", m->arch_name);
    if (gguf_find(m->g, key) && gguf_get_bool(m->g, key, &g->rope, err, errlen)) return -1;
    if (h->head_dim != h->n_rot || h->head_dim_v != h->head_dim)
        return df_seterr(err, errlen, "%s: granite's heads must be rope.dimension_count wide (key %d, value %d, "
                         "rotary %d)", m->path, h->head_dim, h->head_dim_v, h->n_rot);
    if (h->n_expert > 0) {
        h->n_ff_exp = h->n_ff;
        h->expert_weights_norm = 1;
        h->expert_weights_scale = 0.0f;
        h->gating = DF_GATING_SOFTMAX;
        h->n_expert_shared = h->n_ff_shexp > 0;
    }
    return 0;
}

static int bind(df_model *m, char *err, size_t errlen) {
    if (df_llama_bind(m, err, errlen)) return -1;
    static const char *const absent[] = {"blk.%d.attn_q_norm.weight", "blk.%d.attn_k_norm.weight",
                                         "blk.%d.ffn_gate.bias", "blk.%d.ffn_up.bias", "blk.%d.ffn_down.bias"};
    for (int l = 0; l < m->hp.n_layer; l++) {
        for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
            char name[96];
            snprintf(name, sizeof name, absent[i], l);
            if (gguf_find_tensor(m->g, name))
                return df_seterr(err, errlen, "%s: tensor '%s' is not one granite has (not supported)", m->path, name);
        }
        m->layers[l].ffn_gate_inp_shexp = NULL; /* llama.cpp adds granite's shared expert ungated */
    }
    return 0;
}

/* x += scale * y over n rows (scale 0: y as it is). */
static void add_scaled(float *x, const float *y, int64_t n, float scale) {
    const float a = scale != 0.0f ? scale : 1.0f;
    for (int64_t i = 0; i < n; i++) x[i] += a * y[i];
}

static int block(df_session *s, df_session *const *own, int l, int n, const granite_hp *g, char *err,
                 size_t errlen) {
    df_model *m = s->m;
    df_layer *L = &m->layers[l];
    const int64_t E = m->hp.n_embd;
    if (df_llama_attention(s, own, l, n, g->rope, err, errlen)) return -1;
    add_scaled(s->x, s->xb2, (int64_t)n * E, g->residual_scale);
    if (df_norm_rows(s, L->ffn_norm, s->x, n, E, E, s->xb, err, errlen)) return -1;
    if (L->ffn_gate_inp ? df_ffn_moe(s, l, s->xb, n, s->xb2, err, errlen)
                        : df_ffn_dense(s, L->ffn_gate, L->ffn_up, L->ffn_down, s->xb, n, s->xb2, err, errlen))
        return -1;
    add_scaled(s->x, s->xb2, (int64_t)n * E, g->residual_scale);
    return 0;
}

static int forward(df_session *s, df_session *const *own, const int32_t *tokens, int n, float *logits,
                   int all_logits, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    const granite_hp *g = m->fam_hp;
    int lo, hi; /* this rank's layers (pipe.h; alone: all) */
    df_pipe_layers(s, &lo, &hi);
    float *const cb[1] = {s->x};
    const size_t cf[1] = {(size_t)n * (size_t)h->n_embd};
    if (lo == 0 ? df_embed(s, tokens, n, s->x, err, errlen) : df_pipe_enter(s, cb, cf, 1, err, errlen)) return -1;
    if (lo == 0 && g->embedding_scale != 0.0f)
        for (int64_t i = 0; i < (int64_t)n * h->n_embd; i++) s->x[i] *= g->embedding_scale;
    for (int t = 0; g->rope && t < n; t++)
        rope_cache(&s->rope, df_row_pos(s, own, t), s->rope_cache + (int64_t)t * h->n_rot);
    for (int l = lo; l < hi; l++) {
        if (df_layer_abort(s, err, errlen)) return -1;
        if (block(s, own, l, n, g, err, errlen)) return -1;
    }
    if (df_pipe_hop(s, own, tokens, n, cb, cf, 1, err, errlen)) return -1;
    if (!own) s->pos += n;
    if (!logits) return 0;
    if (df_output(s, n, logits, all_logits, err, errlen)) return -1;
    const int64_t rows = s->out_rows ? s->n_out_rows : all_logits ? n : 1;
    for (int64_t i = 0; i < rows * h->n_vocab; i++) logits[i] /= g->logit_scale;
    return 0;
}

const df_arch df_arch_granite = {
    .name = "granite",
    .rope_neox = 0,
    .hparams = hparams,
    .bind = bind,
    .forward = forward,
};
