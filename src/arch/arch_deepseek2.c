/*
 * arch_deepseek2.c - DeepSeek V2, V2-Lite, V3, R1 and Kimi K2: multi-head
 * latent attention (MLA) and a Mixture-of-Experts FFN with shared experts.
 *
 * MLA, the latent attention whose cache holds one latent per token, is in
 * mla.c (kimi's MLA layers share it).
 *
 * The leading_dense_block_count first layers have a dense FFN, the others
 * route to experts (softmax or sigmoid gating, exp_probs_b bias, groups)
 * and add the shared experts; see moe.c.
 *
 * NextN / MTP (DeepSeek V3): nextn_predict_layers blocks past the layers,
 * skipped unless the model is loaded with df_model_params.mtp; then the
 * first is bound as layers[n_layer] (MLA and MoE, plus its nextn.* tensors)
 * and mtp.c runs it through df_deepseek2_block (llama.cpp's deepseek2.cpp
 * graph_mtp).
 *
 * YaRN follows llama.cpp's DeepSeek handling: yarn_log_multiplier is stored
 * divided by 10 by the converter, and the magnitude correction is moved from
 * RoPE into the attention scale (kq_scale = mscale^2 / sqrt(head_dim)).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "arch.h"
#include "bind.h"
#include "mla.h"
#include "moe.h"
#include "util.h"

static float get_opt_float(df_model *m, const char *suffix, float dflt) {
    char key[128];
    float v;
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    return gguf_get_f32(m->g, key, &v, NULL, 0) == 0 && isfinite(v) ? v : dflt;
}

/* DeepSeek's YaRN: recompute the RoPE magnitude and the attention scale
 * (log_mul: yarn_log_multiplier as the converter stored it, divided by 10). */
void df_deepseek_yarn(df_model *m, float log_mul_stored) {
    df_hparams *h = &m->hp;
    const float log_mul = log_mul_stored / 0.1f;
    const float f = 1.0f / h->rope_freq_scale;
    float attn = 1.0f;
    if (h->yarn_ext_factor != 0.0f) {
#define MSCALE(scale, ms) ((scale) <= 1.0f ? 1.0f : 0.1f * (ms) * logf(scale) + 1.0f)
        if (log_mul != 0.0f) {
            const float ms = log_mul != 1.0f ? log_mul : 1.0f;
            attn = MSCALE(f, ms) / MSCALE(f, log_mul);
        } else {
            attn = MSCALE(f, 1.0f);
        }
#undef MSCALE
        attn *= 1.0f / (1.0f + 0.1f * logf(f));
    }
    attn *= get_opt_float(m, "rope.scaling.attn_factor", 1.0f);
    h->yarn_attn_factor = attn;
    const float attn_org = attn * (1.0f + 0.1f * logf(1.0f / h->rope_freq_scale));
    const float mscale = attn_org * (1.0f + 0.1f * log_mul * logf(1.0f / h->rope_freq_scale));
    h->kq_scale = mscale * mscale / sqrtf((float)h->head_dim);
}

/* MLA sizes, experts and YaRN (before the weight store is planned). */
int df_deepseek2_hparams(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    if (df_mla_hparams(m, err, errlen)) return -1;
    if (h->n_expert == 0 || h->n_ff_exp == 0)
        return df_seterr(err, errlen, "%s: deepseek2 needs expert_count, expert_used_count and "
                         "expert_feed_forward_length", m->path);
    h->n_ff_shexp = h->n_ff_exp * h->n_expert_shared;
    df_deepseek_yarn(m, get_opt_float(m, "rope.scaling.yarn_log_multiplier", 0.0f));
    return 0;
}

/* deepseek2 itself (deepseek32 and glm-dsa read nextn_predict_layers in arch_dsa.c, and run no MTP block). */
static int hparams_deepseek2(df_model *m, char *err, size_t errlen) {
    if (df_hp_nextn(m, err, errlen) || df_deepseek2_hparams(m, err, errlen)) return -1;
    m->hp.mtp_arch = 1;
    return 0;
}

static int mtp_block(df_session *s, int l, int n, char *err, size_t errlen) {
    return df_deepseek2_block(s, NULL, l, n, err, errlen);
}

int df_deepseek2_bind(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;

    const int64_t E = h->n_embd;
    if (df_bind_embed_output(m, err, errlen)) return -1;
    for (int l = 0; l < h->n_layer + h->n_layer_mtp; l++) { /* layers[n_layer]: the MTP block (mtp.c) */
        df_layer *L = &m->layers[l];
        if (df_bind(m, &L->attn_norm, "blk.%d.attn_norm.weight", l, 1, E, 1, 1, err, errlen) ||
            df_bind(m, &L->ffn_norm, "blk.%d.ffn_norm.weight", l, 1, E, 1, 1, err, errlen) ||
            df_mla_bind_layer(m, l, err, errlen))
            return -1;
        if (l < h->n_layer_dense_lead) {
            if (df_bind_dense_ffn(m, l, err, errlen)) return -1;
        } else if (df_moe_bind_layer(m, l, h->n_ff_exp, err, errlen) != 0) {
            return -1;
        }
    }
    if (h->n_layer_mtp) {
        if (df_bind_nextn(m, h->n_layer, err, errlen)) return -1;
        m->mtp_block = mtp_block;
    }
    return 0;
}

/* Decoder block l (MLA, then the dense or MoE FFN) over the n rows of
 * s->x, in place; s->rope_cache holds the rows' RoPE (own: layer.h,
 * df_row_pos). The forward pass runs it for every layer, the MTP block
 * (mtp.c) for its NextN layer. */
int df_deepseek2_block(df_session *s, df_session *const *own, int l, int n, char *err, size_t errlen) {
    df_layer *L = &s->m->layers[l];
    const int64_t E = s->m->hp.n_embd;
    if (df_norm_rows(s, L->attn_norm, s->x, n, E, E, s->xb, err, errlen)) return -1;
    if (df_mla_attention(s, own, l, n, 1, err, errlen)) return -1;
    if (df_matmul(s, L->wo, s->xb, n, s->xb2, E, err, errlen)) return -1;
    for (int64_t i = 0; i < (int64_t)n * E; i++) s->x[i] += s->xb2[i];
    return df_ffn_block(s, l, n, err, errlen);
}

/* The forward pass of n rows in s's scratch (own: layer.h, df_row_pos). */
int df_deepseek2_forward(df_session *s, df_session *const *own, const int32_t *tokens, int n, float *logits,
                         int all_logits, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    int lo, hi; /* this rank's layers (pipe.h; alone: all) */
    df_pipe_layers(s, &lo, &hi);
    float *const cb[1] = {s->x};
    const size_t cf[1] = {(size_t)n * (size_t)h->n_embd};
    if (lo == 0 ? df_embed(s, tokens, n, s->x, err, errlen) : df_pipe_enter(s, cb, cf, 1, err, errlen)) return -1;
    for (int t = 0; t < n; t++) rope_cache(&s->rope, df_row_pos(s, own, t), s->rope_cache + (int64_t)t * h->n_rot);

    for (int l = lo; l < hi; l++) {
        if (df_layer_abort(s, err, errlen)) return -1;
        if (df_deepseek2_block(s, own, l, n, err, errlen)) return -1;
    }
    if (df_pipe_hop(s, own, tokens, n, cb, cf, 1, err, errlen)) return -1;
    if (!own) s->pos += n;
    return logits ? df_output(s, n, logits, all_logits, err, errlen) : 0;
}

const df_arch df_arch_deepseek2 = {
    .name = "deepseek2",
    .rope_neox = 0,
    .hparams = hparams_deepseek2,
    .bind = df_deepseek2_bind,
    .forward = df_deepseek2_forward,
};
