/*
 * arch_glm4moe.c - GLM-4.5, 4.6 and 4.7 (general.architecture "glm4moe").
 *
 * The decoder block is the llama family's (arch_llama.c's forward pass runs
 * it) with GLM's choices, as llama.cpp's src/models/glm4-moe.cpp has them:
 *   - Q/K/V projections with optional biases, optional per-head Q/K RMSNorm
 *     (the 355B model has it, Air does not);
 *   - NeoX RoPE on the first rope.dimension_count dimensions of a head only
 *     (GLM rotates half of each head);
 *   - the FFN's norm is named post_attention_norm;
 *   - leading_dense_block_count dense layers, then MoE layers: sigmoid
 *     router (the default when expert_gating_func is absent), exp_probs_b
 *     selection bias, normalised and scaled weights, and shared experts
 *     (expert_shared_count >= 1) as one FFN of expert_feed_forward_length *
 *     expert_shared_count (moe.c).
 *
 * NextN / MTP layers. block_count counts nextn_predict_layers extra blocks
 * at the end (blk.{n_layer}.*: a whole decoder block plus nextn.eh_proj,
 * enorm, hnorm, ...), used only for speculative decoding. They are not
 * layers of the forward pass: n_layer is block_count minus them. Unless the
 * model is loaded with df_model_params.mtp, nothing binds their tensors (so
 * they are never read, resident or streamed), the weight store's plan
 * leaves them out (wstore.c: tensors of layers past its n_layer), and `info`
 * does not count them as active. With mtp the first one is bound as
 * layers[n_layer] (attention and MoE as the other layers, plus its nextn.*
 * tensors) and mtp.c runs it through df_llama_block, as llama.cpp's
 * glm4-moe.cpp graph_mtp does.
 */
#include <stdio.h>
#include <string.h>

#include "arch.h"
#include "bind.h"
#include "moe.h"
#include "util.h"

static int hparams(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    if (df_hp_nextn(m, err, errlen)) return -1;
    h->mtp_arch = 1;
    if (h->n_expert == 0) return df_seterr(err, errlen, "%s: glm4moe needs expert_count and expert_used_count", m->path);
    if (h->n_ff_exp == 0) h->n_ff_exp = h->n_ff / h->n_expert_used; /* llama.cpp's fallback */
    if (h->n_ff_exp < 1) return df_seterr(err, errlen, "%s: glm4moe needs expert_feed_forward_length", m->path);
    int gating = 0;
    if (df_hp_int(m, "expert_gating_func", &gating, 0, 3, 0, err, errlen)) return -1;
    if (gating == 0) h->gating = DF_GATING_SIGMOID; /* GLM's router when the file does not say */
    /* llama.cpp runs a file without one as if its shared expert were silu(x):
     * no GLM model is like that, so such a file is refused */
    if (h->n_expert_shared < 1) return df_seterr(err, errlen, "%s: glm4moe needs expert_shared_count >= 1", m->path);
    h->n_ff_shexp = h->n_ff_exp * h->n_expert_shared;
    if (h->head_dim_v != h->head_dim)
        return df_seterr(err, errlen, "%s: glm4moe needs key_length == value_length (%d, %d)", m->path, h->head_dim,
                         h->head_dim_v);
    return 0;
}

/* Layer l's attention: Q/K/V (optional biases), output, optional Q/K norms. */
static int bind_attention(df_model *m, int l, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t E = h->n_embd, hd = h->head_dim, Q = (int64_t)h->n_head * hd, KV = (int64_t)h->n_head_kv * hd;
    if (df_bind(m, &L->attn_norm, "blk.%d.attn_norm.weight", l, 1, E, 1, 1, err, errlen) ||
        df_bind(m, &L->wq, "blk.%d.attn_q.weight", l, 1, E, Q, 1, err, errlen) ||
        df_bind(m, &L->wk, "blk.%d.attn_k.weight", l, 1, E, KV, 1, err, errlen) ||
        df_bind(m, &L->wv, "blk.%d.attn_v.weight", l, 1, E, KV, 1, err, errlen) ||
        df_bind(m, &L->wo, "blk.%d.attn_output.weight", l, 1, Q, E, 1, err, errlen) ||
        df_bind(m, &L->bq, "blk.%d.attn_q.bias", l, 0, Q, 1, 1, err, errlen) ||
        df_bind(m, &L->bk, "blk.%d.attn_k.bias", l, 0, KV, 1, 1, err, errlen) ||
        df_bind(m, &L->bv, "blk.%d.attn_v.bias", l, 0, KV, 1, 1, err, errlen) ||
        df_bind(m, &L->q_norm, "blk.%d.attn_q_norm.weight", l, 0, hd, 1, 1, err, errlen) ||
        df_bind(m, &L->k_norm, "blk.%d.attn_k_norm.weight", l, 0, hd, 1, 1, err, errlen))
        return -1;
    if (!L->q_norm != !L->k_norm)
        return df_seterr(err, errlen, "%s: layer %d has only one of attn_q_norm and attn_k_norm", m->path, l);
    return 0;
}

/* Layer l's FFN: the post-attention norm, then dense (leading layers) or MoE. */
static int bind_ffn(df_model *m, int l, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t E = h->n_embd;
    if (df_bind(m, &L->ffn_norm, "blk.%d.post_attention_norm.weight", l, 1, E, 1, 1, err, errlen)) return -1;
    if (l < h->n_layer_dense_lead) return df_bind_dense_ffn(m, l, err, errlen);
    if (df_moe_bind_layer(m, l, h->n_ff_exp, err, errlen)) return -1;
    if (!L->exp_probs_b) return df_seterr(err, errlen, "%s: missing tensor 'blk.%d.exp_probs_b.bias'", m->path, l);
    return 0;
}

static int mtp_block(df_session *s, int l, int n, char *err, size_t errlen) {
    return df_llama_block(s, NULL, l, n, err, errlen);
}

static int bind(df_model *m, char *err, size_t errlen) {
    if (df_bind_embed_output(m, err, errlen)) return -1;
    /* the NextN layers (l >= n_layer) are bound only with df_model_params.mtp, and only the first */
    for (int l = 0; l < m->hp.n_layer + m->hp.n_layer_mtp; l++)
        if (bind_attention(m, l, err, errlen) || bind_ffn(m, l, err, errlen)) return -1;
    if (m->hp.n_layer_mtp) {
        if (df_bind_nextn(m, m->hp.n_layer, err, errlen)) return -1;
        m->mtp_block = mtp_block;
    }
    return 0;
}

const df_arch df_arch_glm4moe = {
    .name = "glm4moe",
    .rope_neox = 1,
    .hparams = hparams,
    .bind = bind,
    .forward = df_llama_forward,
};
