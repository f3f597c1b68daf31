/*
 * arch_minimax_m2.c - MiniMax M2 / M2.1 (general.architecture "minimax-m2").
 *
 * The llama family's block (arch_llama.c's forward pass runs it), as
 * llama.cpp's src/models/minimax-m2.cpp defines it:
 *   - Q/K RMSNorm over the whole projected Q (n_head * head_dim) and K
 *     (n_head_kv * head_dim), not per head: attn_q_norm / attn_k_norm have
 *     that many weights, which is how the forward pass tells the two apart;
 *   - NeoX RoPE on the first rope.dimension_count dimensions of each head;
 *   - every layer a mixture of experts of feed_forward_length width, no
 *     shared expert: the router's gating function from expert_gating_func
 *     (sigmoid in the released models), the exp_probs_b selection bias, top-k
 *     weights always normalised and never scaled (llama.cpp reads no
 *     expert_weights_scale for this architecture).
 */
#include <stdio.h>

#include "arch.h"
#include "bind.h"
#include "moe.h"
#include "util.h"

static int hparams(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    int gating = 0;
    if (h->n_expert == 0) return df_seterr(err, errlen, "%s: minimax-m2 needs expert_count and expert_used_count", m->path);
    if (df_hp_int(m, "expert_gating_func", &gating, 0, 3, 0, err, errlen)) return -1;
    if (gating == 0) return df_seterr(err, errlen, "%s: minimax-m2 needs expert_gating_func", m->path);
    if (h->n_ff_l) return df_seterr(err, errlen, "%s: minimax-m2 has one feed_forward_length for all layers", m->path);
    if (h->head_dim_v != h->head_dim)
        return df_seterr(err, errlen, "%s: minimax-m2 needs key_length == value_length (%d, %d)", m->path, h->head_dim,
                         h->head_dim_v);
    h->n_ff_exp = h->n_ff; /* the experts are feed_forward_length wide */
    h->n_ff_shexp = 0;
    h->n_expert_shared = 0;
    h->n_layer_dense_lead = 0;
    h->expert_weights_norm = 1;
    h->expert_weights_scale = 0.0f;
    return 0;
}

static int bind(df_model *m, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    const int64_t E = h->n_embd, hd = h->head_dim, Q = (int64_t)h->n_head * hd, KV = (int64_t)h->n_head_kv * hd;
    if (df_bind_embed_output(m, err, errlen)) return -1;
    for (int l = 0; l < h->n_layer; l++) {
        df_layer *L = &m->layers[l];
        if (df_bind(m, &L->attn_norm, "blk.%d.attn_norm.weight", l, 1, E, 1, 1, err, errlen) ||
            df_bind(m, &L->wq, "blk.%d.attn_q.weight", l, 1, E, Q, 1, err, errlen) ||
            df_bind(m, &L->wk, "blk.%d.attn_k.weight", l, 1, E, KV, 1, err, errlen) ||
            df_bind(m, &L->wv, "blk.%d.attn_v.weight", l, 1, E, KV, 1, err, errlen) ||
            df_bind(m, &L->bq, "blk.%d.attn_q.bias", l, 0, Q, 1, 1, err, errlen) ||
            df_bind(m, &L->bk, "blk.%d.attn_k.bias", l, 0, KV, 1, 1, err, errlen) ||
            df_bind(m, &L->bv, "blk.%d.attn_v.bias", l, 0, KV, 1, 1, err, errlen) ||
            df_bind(m, &L->wo, "blk.%d.attn_output.weight", l, 1, Q, E, 1, err, errlen) ||
            df_bind(m, &L->q_norm, "blk.%d.attn_q_norm.weight", l, 1, Q, 1, 1, err, errlen) ||
            df_bind(m, &L->k_norm, "blk.%d.attn_k_norm.weight", l, 1, KV, 1, 1, err, errlen) ||
            df_bind(m, &L->ffn_norm, "blk.%d.ffn_norm.weight", l, 1, E, 1, 1, err, errlen) ||
            df_moe_bind_layer(m, l, h->n_ff_exp, err, errlen))
            return -1;
        if (!L->exp_probs_b) return df_seterr(err, errlen, "%s: missing tensor 'blk.%d.exp_probs_b.bias'", m->path, l);
    }
    return 0;
}

const df_arch df_arch_minimax_m2 = {
    .name = "minimax-m2",
    .rope_neox = 1,
    .hparams = hparams,
    .bind = bind,
    .forward = df_llama_forward,
};
