/*
 * arch_llama.c - the llama family: llama (Llama 2/3, Mistral, TinyLlama,
 * and Mixtral when it has experts), qwen2 (biases on Q/K/V, NeoX RoPE),
 * qwen3 (per-head Q/K RMSNorm, NeoX RoPE), and their Mixture-of-Experts
 * versions qwen2moe (with a gated shared expert) and qwen3moe. The FFN of a
 * layer is dense or a mixture of experts (moe.c); attention is the same.
 *
 * One pre-norm decoder block per layer:
 *   h = x + Wo * attn(rope(Wq*norm(x)), rope(Wk*norm(x)), Wv*norm(x))
 *   x = h + Wdown * (silu(Wgate*norm(h)) * Wup*norm(h))
 * then a final RMSNorm and the output projection (tied to the embedding
 * when output.weight is absent). The forward pass works on n tokens at once
 * (prompt processing) or one (generation) with the same code.
 */
#include <stdio.h>
#include <string.h>

#include "arch.h"
#include "bind.h"
#include "moe.h"
#include "quant.h"
#include "util.h"

static int need_f32_vec(df_model *m, ws_tensor *t, int64_t n, char *err, size_t errlen) {
    if (t->type != DF_TYPE_F32)
        return df_seterr(err, errlen, "%s: tensor '%s' must be f32 (it is %s)", m->path, t->gt->name,
                         quant_traits_get(t->type)->name);
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return df_seterr(err, errlen, "%s: tensor '%s' has %lld elements, expected %lld", m->path, t->gt->name,
                         (long long)t->ne[0], (long long)n);
    return 0;
}

static int need_mat(df_model *m, ws_tensor *t, int64_t ne0, int64_t ne1, char *err, size_t errlen) {
    char inner[256];
    if (df_check_shape(t, ne0, ne1, inner, sizeof inner) != 0)
        return df_seterr(err, errlen, "%s: %s", m->path, inner);
    return 0;
}

#define REQ(dst, fmt, layer) \
    if (!((dst) = df_tensor(m, fmt, layer, 1, err, errlen))) return -1

int df_llama_bind(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    REQ(m->tok_embd, "token_embd.weight", 0);
    h->n_vocab = (int)m->tok_embd->ne[1];
    if (m->tok_embd->ne[0] != h->n_embd || m->tok_embd->ne[1] < 1 || m->tok_embd->ne[1] > (1 << 24) ||
        m->tok_embd->ne[2] != 1)
        return df_seterr(err, errlen, "%s: token_embd.weight has shape [%lld, %lld], expected [%d, n_vocab]", m->path,
                         (long long)m->tok_embd->ne[0], (long long)m->tok_embd->ne[1], h->n_embd);
    REQ(m->output_norm, "output_norm.weight", 0);
    if (need_f32_vec(m, m->output_norm, h->n_embd, err, errlen)) return -1;
    m->output = df_tensor(m, "output.weight", 0, 0, err, errlen);
    if (!m->output && gguf_find_tensor(m->g, "output.weight")) return -1;
    if (!m->output) m->output = m->tok_embd; /* tied embeddings */
    if (need_mat(m, m->output, h->n_embd, h->n_vocab, err, errlen)) return -1;
    m->rope_freqs = df_tensor(m, "rope_freqs.weight", 0, 0, err, errlen);
    if (!m->rope_freqs && gguf_find_tensor(m->g, "rope_freqs.weight")) return -1;
    if (m->rope_freqs && need_f32_vec(m, m->rope_freqs, h->n_rot / 2, err, errlen)) return -1;

    const int64_t qdim = (int64_t)h->n_head * h->head_dim;
    const int64_t kdim = (int64_t)h->n_head_kv * h->head_dim, vdim = (int64_t)h->n_head_kv * h->head_dim_v;
    const int64_t odim = (int64_t)h->n_head * h->head_dim_v;
    for (int l = 0; l < h->n_layer; l++) {
        df_layer *L = &m->layers[l];
        REQ(L->attn_norm, "blk.%d.attn_norm.weight", l);
        REQ(L->wq, "blk.%d.attn_q.weight", l);
        REQ(L->wk, "blk.%d.attn_k.weight", l);
        REQ(L->wv, "blk.%d.attn_v.weight", l);
        REQ(L->wo, "blk.%d.attn_output.weight", l);
        REQ(L->ffn_norm, "blk.%d.ffn_norm.weight", l);
        if (need_f32_vec(m, L->attn_norm, h->n_embd, err, errlen) ||
            need_f32_vec(m, L->ffn_norm, h->n_embd, err, errlen) || need_mat(m, L->wq, h->n_embd, qdim, err, errlen) ||
            need_mat(m, L->wk, h->n_embd, kdim, err, errlen) || need_mat(m, L->wv, h->n_embd, vdim, err, errlen) ||
            need_mat(m, L->wo, odim, h->n_embd, err, errlen))
            return -1;
        if (h->n_expert > 0) {
            if (df_moe_bind_layer(m, l, h->n_ff_exp, err, errlen) != 0) return -1;
        } else {
            REQ(L->ffn_gate, "blk.%d.ffn_gate.weight", l);
            REQ(L->ffn_up, "blk.%d.ffn_up.weight", l);
            REQ(L->ffn_down, "blk.%d.ffn_down.weight", l);
            if (need_mat(m, L->ffn_gate, h->n_embd, h->n_ff, err, errlen) ||
                need_mat(m, L->ffn_up, h->n_embd, h->n_ff, err, errlen) ||
                need_mat(m, L->ffn_down, h->n_ff, h->n_embd, err, errlen))
                return -1;
        }
        /* optional biases (qwen2 has Q/K/V biases; some llamas have all four) */
        struct { ws_tensor **dst; const char *fmt; int64_t n; } opt[] = {
            {&L->bq, "blk.%d.attn_q.bias", qdim},
            {&L->bk, "blk.%d.attn_k.bias", kdim},
            {&L->bv, "blk.%d.attn_v.bias", vdim},
            {&L->bo, "blk.%d.attn_output.bias", h->n_embd},
            {&L->q_norm, "blk.%d.attn_q_norm.weight", h->head_dim},
            {&L->k_norm, "blk.%d.attn_k_norm.weight", h->head_dim},
        };
        for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++) {
            char name[96];
            snprintf(name, sizeof name, opt[i].fmt, l);
            if (!gguf_find_tensor(m->g, name)) continue;
            if (!(*opt[i].dst = df_tensor(m, opt[i].fmt, l, 1, err, errlen))) return -1;
            if (need_f32_vec(m, *opt[i].dst, opt[i].n, err, errlen)) return -1;
        }
    }
    return 0;
}
#undef REQ

/* Hyperparameters each variant fixes (run before the weight store is planned). */

/* Mixtral-style llama: experts of feed_forward_length, weights normalised. */
static int hp_llama(df_model *m, char *err, size_t errlen) {
    (void)err;
    (void)errlen;
    if (m->hp.n_expert > 0) {
        m->hp.n_ff_exp = m->hp.n_ff;
        m->hp.expert_weights_norm = 1;
    }
    return 0;
}

/* Qwen MoE experts; without expert_feed_forward_length they are feed_forward_length / expert_used_count wide
 * (llama.cpp's default). */
static int need_experts(df_model *m, char *err, size_t errlen) {
    if (m->hp.n_ff_exp == 0 && m->hp.n_expert_used > 0) m->hp.n_ff_exp = m->hp.n_ff / m->hp.n_expert_used;
    if (m->hp.n_expert == 0 || m->hp.n_ff_exp == 0)
        return df_seterr(err, errlen, "%s: %s needs expert_count, expert_used_count and an expert width "
                         "(expert_feed_forward_length, or feed_forward_length)", m->path, m->arch_name);
    return 0;
}

/* Qwen2-MoE: routed experts with softmax weights (not normalised) plus a
 * sigmoid-gated shared expert of expert_shared_feed_forward_length. */
static int hp_qwen2moe(df_model *m, char *err, size_t errlen) {
    if (need_experts(m, err, errlen)) return -1;
    m->hp.expert_weights_norm = 0;
    m->hp.gating = DF_GATING_SOFTMAX;
    if (m->hp.n_ff_shexp == 0) m->hp.n_ff_shexp = m->hp.n_ff;
    m->hp.n_expert_shared = 1;
    return 0;
}

/* Qwen3-MoE: Qwen3 attention, softmax router with normalised top-k weights. */
static int hp_qwen3moe(df_model *m, char *err, size_t errlen) {
    if (need_experts(m, err, errlen)) return -1;
    m->hp.expert_weights_norm = 1;
    m->hp.gating = DF_GATING_SOFTMAX;
    return 0;
}

static int bind_qwen3(df_model *m, char *err, size_t errlen) {
    if (df_llama_bind(m, err, errlen) != 0) return -1;
    for (int l = 0; l < m->hp.n_layer; l++)
        if (!m->layers[l].q_norm || !m->layers[l].k_norm)
            return df_seterr(err, errlen, "%s: qwen3 layer %d lacks attn_q_norm/attn_k_norm", m->path, l);
    return 0;
}

/* Per-head RMSNorm of n_tok rows of n_heads vectors of hd floats (qwen3 Q/K norm). */
static int head_norm(df_session *s, ws_tensor *w, float *x, int n_tok, int n_heads, int hd, char *err, size_t errlen) {
    return df_norm_rows(s, w, x, n_tok * n_heads, hd, hd, x, err, errlen);
}

/* The attention of block l over the n rows of s->x (own: as df_arch.forward),
 * its output projection in s->xb2; s->rope_cache holds the rows' RoPE
 * (rope 0: none is applied). */
int df_llama_attention(df_session *s, df_session *const *own, int l, int n, int rope, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    const int64_t E = h->n_embd;
    const int64_t qdim = (int64_t)h->n_head * h->head_dim;
    df_layer *L = &m->layers[l];
    if (df_norm_rows(s, L->attn_norm, s->x, n, E, E, s->xb, err, errlen)) return -1;
    ws_tensor *const wqkv[3] = {L->wq, L->wk, L->wv};
    float *const yqkv[3] = {s->q, s->k, s->v};
    const int64_t ldqkv[3] = {qdim, s->kv_dim_k, s->kv_dim_v};
    if (df_matmul_n(s, 3, wqkv, s->xb, n, yqkv, ldqkv, err, errlen)) return -1;
    if (df_add_bias(s, L->bq, s->q, n, qdim, err, errlen) || df_add_bias(s, L->bk, s->k, n, s->kv_dim_k, err, errlen) ||
        df_add_bias(s, L->bv, s->v, n, s->kv_dim_v, err, errlen))
        return -1;
    /* Q/K norms per head (qwen3, glm4moe), or over all of Q and of K (minimax-m2) */
    const int whole = L->q_norm && L->q_norm->ne[0] == qdim && h->n_head > 1;
    if (L->q_norm &&
        (head_norm(s, L->q_norm, s->q, n, whole ? 1 : h->n_head, whole ? (int)qdim : h->head_dim, err, errlen) ||
         head_norm(s, L->k_norm, s->k, n, whole ? 1 : h->n_head_kv, whole ? (int)s->kv_dim_k : h->head_dim, err,
                   errlen)))
        return -1;
    for (int t = 0; rope && t < n; t++) {
        const float *rc = s->rope_cache + (int64_t)t * h->n_rot;
        rope_apply(&s->rope, rc, s->q + t * qdim, h->n_head, h->head_dim);
        rope_apply(&s->rope, rc, s->k + t * s->kv_dim_k, h->n_head_kv, h->head_dim);
    }
    df_attend_rows(s, own, l, n, s->k, s->v, s->q, s->xb, NULL); /* each row against its own session's cache */
    if (df_matmul(s, L->wo, s->xb, n, s->xb2, E, err, errlen)) return -1;
    return df_add_bias(s, L->bo, s->xb2, n, E, err, errlen);
}

/* Decoder block l over the n rows of s->x (own: as df_arch.forward), in
 * place; s->rope_cache holds the rows' RoPE. The forward pass runs it for
 * every layer, and glm4moe's MTP block (mtp.c) for its NextN layer. */
int df_llama_block(df_session *s, df_session *const *own, int l, int n, char *err, size_t errlen) {
    const int64_t E = s->m->hp.n_embd;
    if (df_llama_attention(s, own, l, n, 1, err, errlen)) return -1;
    for (int64_t i = 0; i < (int64_t)n * E; i++) s->x[i] += s->xb2[i];
    return df_ffn_block(s, l, n, err, errlen); /* SwiGLU, dense or mixture of experts */
}

/* The forward pass of n rows in s's scratch (df_arch.forward: own NULL, n
 * consecutive tokens of s; otherwise row t is the next token of session own[t]). */
int df_llama_forward(df_session *s, df_session *const *own, const int32_t *tokens, int n, float *logits,
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
        if (df_llama_block(s, own, l, n, err, errlen)) return -1;
    }
    if (df_pipe_hop(s, own, tokens, n, cb, cf, 1, err, errlen)) return -1;
    if (!own) s->pos += n;
    return logits ? df_output(s, n, logits, all_logits, err, errlen) : 0;
}

const df_arch df_arch_llama = {
    .name = "llama",
    .rope_neox = 0,
    .hparams = hp_llama,
    .bind = df_llama_bind,
    .forward = df_llama_forward,
};
const df_arch df_arch_qwen2 = {
    .name = "qwen2",
    .rope_neox = 1,
    .bind = df_llama_bind,
    .forward = df_llama_forward,
};
const df_arch df_arch_qwen3 = {
    .name = "qwen3",
    .rope_neox = 1,
    .bind = bind_qwen3,
    .forward = df_llama_forward,
};
const df_arch df_arch_qwen2moe = {
    .name = "qwen2moe",
    .rope_neox = 1,
    .hparams = hp_qwen2moe,
    .bind = df_llama_bind,
    .forward = df_llama_forward,
};
const df_arch df_arch_qwen3moe = {
    .name = "qwen3moe",
    .rope_neox = 1,
    .hparams = hp_qwen3moe,
    .bind = bind_qwen3,
    .forward = df_llama_forward,
};
