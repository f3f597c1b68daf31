/*
 * arch_qwen35.c - Qwen3.5 MoE (qwen35moe) and Qwen3-Next (qwen3next):
 * hybrids of gated delta-net layers (linear attention with a fixed-size
 * recurrent state) and gated full-attention layers, each followed by a
 * mixture of experts with a sigmoid-gated shared expert. llama.cpp's
 * src/models/qwen35moe.cpp and qwen3next.cpp are the semantics.
 *
 * DESIGN
 * Layer pattern: attention.recurrent_layers (a per-layer flag) if present,
 * else every full_attention_interval-th layer (default 4) is full attention
 * and the others are delta-net layers. The nextn_predict_layers MTP blocks
 * past them are never bound or run (as glm4moe's). The session gives a
 * recurrent layer a state instead of a KV cache (df_mem_conv, df_mem_state).
 *
 * Delta-net layer, on the normed input x (H value heads, Hk key heads, both
 * of size hd; ssm.time_step_rank, ssm.group_count, ssm.state_size):
 *   qkv     = silu(short_conv(W_qkv x)) over all 2 Hk hd + H hd channels
 *             (the last d_conv - 1 inputs kept in the layer's state)
 *   q, k    = l2-normalised per key head; v per value head
 *   g       = softplus(W_alpha x + dt_bias) * ssm_a  (ssm_a = -exp(A_log)), per head
 *   beta    = sigmoid(W_beta x), per head
 *   o       = gated delta rule (deltanet.c) with one decay per head; value
 *             head h reads key head h % Hk (qwen35moe) or h / (H / Hk)
 *             (qwen3next): the order each converter packs the heads in
 *   out     = W_out (rmsnorm_head(o) * silu(W_gate x))
 * qwen3next packs beta and alpha in one ssm_ba projection, per key head
 * [beta (H/Hk), alpha (H/Hk)]; its oldest files pack q, k, v and z in one
 * ssm_in, per key head [q (hd), k (hd), v (H/Hk hd), z (H/Hk hd)], which is
 * unpacked into the newer layout row by row.
 *
 * Full-attention layer: attn_q gives per head [query (hd), gate (hd)]; the
 * query and key are RMS-normed per head, rotated (NeoX; qwen35moe's IMRoPE
 * with text positions, equal in all sections, is the same rotation), and
 * the attention output is multiplied by sigmoid(gate) before attn_output.
 *
 * FFN: post_attention_norm, then softmax routing with normalised top-k
 * weights, plus the shared expert times sigmoid(ffn_gate_inp_shexp x)
 * (moe.c).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "bind.h"
#include "deltanet.h"
#include "moe.h"
#include "util.h"

#define MAX_GDN_HEAD 1024 /* deltanet.c's per-thread row */

static int is_next(const df_model *m) { return strcmp(m->arch_name, "qwen3next") == 0; }

/* The family's hyperparameters (m->fam_hp, made by read_ssm). */
typedef struct {
    int k_interleave; /* qwen3next: value head h reads key head h / (H / Hk); qwen35moe: h % Hk */
} qwen_hp;

/* The family's own tensors of a layer (df_layer.fam; m->fam_tensors holds them all). */
typedef struct {
    ws_tensor *ssm_alpha; /* qwen35moe: the decay's input (beta in ssm_beta) */
    ws_tensor *ssm_ba;    /* qwen3next: beta and alpha interleaved per key head */
    ws_tensor *ssm_in;    /* qwen3next legacy: q, k, v and z interleaved per key head */
} qwen_layer;
#define QL(L) ((qwen_layer *)(L)->fam)

/* The layer pattern: which of the n_layer layers are delta-net layers. */
static int read_pattern(df_model *m, const int32_t *flags, int interval, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    if (h->recurrent)
        return df_seterr(err, errlen, "%s: %s marks its layers with full_attention_interval, not head_count_kv",
                         m->path, m->arch_name);
    h->recurrent = malloc((size_t)h->n_layer);
    if (!h->recurrent) return df_seterr(err, errlen, "%s: out of memory", m->path);
    h->n_layer_recurrent = 0;
    for (int l = 0; l < h->n_layer; l++) {
        h->recurrent[l] = (uint8_t)(flags ? flags[l] != 0 : (l + 1) % interval != 0);
        h->n_layer_recurrent += h->recurrent[l];
    }
    return 0;
}

/* The delta-net sizes (ssm.*). */
static int read_ssm(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    int d_inner = 0, n_group = 0;
    if (df_hp_int(m, "ssm.conv_kernel", &h->ssm_d_conv, 2, 64, 1, err, errlen) ||
        df_hp_int(m, "ssm.inner_size", &d_inner, 1, 1 << 20, 1, err, errlen) ||
        df_hp_int(m, "ssm.state_size", &h->kda_head_dim, 2, MAX_GDN_HEAD, 1, err, errlen) ||
        df_hp_int(m, "ssm.time_step_rank", &h->kda_n_head, 1, 1 << 16, 1, err, errlen) ||
        df_hp_int(m, "ssm.group_count", &n_group, 1, 1 << 16, 1, err, errlen))
        return -1;
    h->kda_n_head_k = n_group;
    if ((int64_t)h->kda_n_head * h->kda_head_dim != d_inner)
        return df_seterr(err, errlen, "%s: ssm.inner_size %d is not ssm.time_step_rank %d x ssm.state_size %d", m->path,
                         d_inner, h->kda_n_head, h->kda_head_dim);
    if (h->kda_n_head % n_group)
        return df_seterr(err, errlen, "%s: ssm.time_step_rank %d is not a multiple of ssm.group_count %d", m->path,
                         h->kda_n_head, n_group);
    h->ssm_conv_ch = 2 * (int64_t)n_group * h->kda_head_dim + d_inner;
    h->gdn = 1;
    qwen_hp *q = calloc(1, sizeof *q);
    if (!q) return df_seterr(err, errlen, "out of memory");
    q->k_interleave = is_next(m);
    m->fam_hp = q; /* freed with the model */
    return 0;
}

/* qwen35moe's IMRoPE (rope.dimension_sections): with a text token's
 * positions (t = h = w = pos, e = 0), a rotated pair whose sector selects t,
 * h or w turns by the position, as in NeoX RoPE, and one that falls to e does
 * not turn at all. Real files cover every pair; others are refused. */
static int check_sections(df_model *m, char *err, size_t errlen) {
    char key[128];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", m->arch_name);
    const gguf_kv *kv = gguf_find(m->g, key);
    if (!kv) return 0;
    if (kv->type != GGUF_T_ARRAY || kv->arr_n < 3 || kv->arr_n > 4 ||
        (kv->arr_type != GGUF_T_I32 && kv->arr_type != GGUF_T_U32))
        return df_seterr(err, errlen, "%s: '%s' must be 3 or 4 integers", m->path, key);
    int64_t sec[4] = {0, 0, 0, 0}, sum = 0;
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        sec[i] = ((const int32_t *)kv->arr)[i];
        if (sec[i] < 0 || sec[i] > 65536) return df_seterr(err, errlen, "%s: '%s' is out of range", m->path, key);
        sum += sec[i];
    }
    if (sum < 1 || sum > m->hp.head_dim) return df_seterr(err, errlen, "%s: '%s' does not fit the head", m->path, key);
    for (int64_t i = 0; i < m->hp.n_rot / 2; i++) {
        const int64_t sector = i % sum;
        if (sector >= 3 * sec[sector % 3])
            return df_seterr(err, errlen, "%s: '%s' leaves rotated pair %lld unrotated for text, which is not supported",
                             m->path, key, (long long)i);
    }
    return 0;
}

static int hparams(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    int32_t *flags = NULL;
    int interval = 4;
    /* the pattern keys count the MTP blocks too (block_count's layers) */
    if (df_hp_int(m, "nextn_predict_layers", &h->n_layer_nextn, 0, h->n_layer - 1, 0, err, errlen) ||
        df_hp_int(m, "full_attention_interval", &interval, 1, h->n_layer, 0, err, errlen) ||
        df_hp_layers(m, "attention.recurrent_layers", &flags, 0, 1, err, errlen))
        return -1;
    h->n_layer -= h->n_layer_nextn;
    const int rc = read_pattern(m, flags, interval, err, errlen);
    free(flags);
    if (rc || read_ssm(m, err, errlen) || check_sections(m, err, errlen)) return -1;
    if (h->n_expert == 0) return df_seterr(err, errlen, "%s: %s needs expert_count and expert_used_count", m->path,
                                           m->arch_name);
    if (h->n_ff_exp == 0) h->n_ff_exp = h->n_ff / h->n_expert_used; /* llama.cpp's fallback */
    if (h->n_ff_exp < 1) return df_seterr(err, errlen, "%s: %s needs expert_feed_forward_length", m->path, m->arch_name);
    if (h->n_ff_shexp == 0) h->n_ff_shexp = h->n_ff;
    h->gating = DF_GATING_SOFTMAX;
    h->expert_weights_norm = 1;
    if (h->head_dim_v != h->head_dim)
        return df_seterr(err, errlen, "%s: %s needs key_length == value_length (%d, %d)", m->path, m->arch_name,
                         h->head_dim, h->head_dim_v);
    h->attn_q_gate = 1;
    h->attn_out_gate = 1;
    return 0;
}

/* Layer l's delta-net tensors. */
static int bind_gdn(df_model *m, int l, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t E = h->n_embd, H = h->kda_n_head, hd = h->kda_head_dim, V = H * hd, C = h->ssm_conv_ch;
    if (df_bind_f32(m, &L->ssm_conv[0], "blk.%d.ssm_conv1d.weight", l, h->ssm_d_conv, C, 1, err, errlen) ||
        df_bind(m, &L->ssm_dt_b, "blk.%d.ssm_dt.bias", l, 1, H, 1, 1, err, errlen) ||
        df_bind(m, &L->ssm_a, "blk.%d.ssm_a", l, 1, H, 1, 1, err, errlen) ||
        df_bind(m, &L->ssm_o_norm, "blk.%d.ssm_norm.weight", l, 1, hd, 1, 1, err, errlen) ||
        df_bind(m, &L->wo, "blk.%d.ssm_out.weight", l, 1, V, E, 1, err, errlen))
        return -1;
    if (is_next(m)) {
        if (df_bind(m, &QL(L)->ssm_ba, "blk.%d.ssm_ba.weight", l, 1, E, 2 * H, 1, err, errlen) ||
            df_bind(m, &QL(L)->ssm_in, "blk.%d.ssm_in.weight", l, 0, E, C + V, 1, err, errlen))
            return -1;
        if (QL(L)->ssm_in) return 0; /* the legacy packing: no attn_qkv, attn_gate */
    } else if (df_bind_mat(m, &L->ssm_beta, "blk.%d.ssm_beta.weight", l, 1, E, H, err, errlen) ||
               df_bind_mat(m, &QL(L)->ssm_alpha, "blk.%d.ssm_alpha.weight", l, 1, E, H, err, errlen)) {
        return -1;
    }
    return df_bind(m, &L->wqkv, "blk.%d.attn_qkv.weight", l, 1, E, C, 1, err, errlen) ||
                   df_bind(m, &L->ssm_g, "blk.%d.attn_gate.weight", l, 1, E, V, 1, err, errlen)
               ? -1
               : 0;
}

/* Layer l's gated attention: attn_q holds the query and the gate. */
static int bind_attention(df_model *m, int l, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t E = h->n_embd, hd = h->head_dim, Q = (int64_t)h->n_head * hd, KV = (int64_t)h->n_head_kv * hd;
    return df_bind(m, &L->wq, "blk.%d.attn_q.weight", l, 1, E, 2 * Q, 1, err, errlen) ||
                   df_bind(m, &L->wk, "blk.%d.attn_k.weight", l, 1, E, KV, 1, err, errlen) ||
                   df_bind(m, &L->wv, "blk.%d.attn_v.weight", l, 1, E, KV, 1, err, errlen) ||
                   df_bind(m, &L->wo, "blk.%d.attn_output.weight", l, 1, Q, E, 1, err, errlen) ||
                   df_bind(m, &L->q_norm, "blk.%d.attn_q_norm.weight", l, 1, hd, 1, 1, err, errlen) ||
                   df_bind(m, &L->k_norm, "blk.%d.attn_k_norm.weight", l, 1, hd, 1, 1, err, errlen)
               ? -1
               : 0;
}

static int bind(df_model *m, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    if (df_bind_fam_tensors(m, 0, sizeof(qwen_layer), err, errlen) || df_bind_embed_output(m, err, errlen)) return -1;
    for (int l = 0; l < h->n_layer; l++) { /* the MTP layers (l >= n_layer) are never bound */
        df_layer *L = &m->layers[l];
        if (df_bind(m, &L->attn_norm, "blk.%d.attn_norm.weight", l, 1, h->n_embd, 1, 1, err, errlen) ||
            df_bind(m, &L->ffn_norm, "blk.%d.post_attention_norm.weight", l, 1, h->n_embd, 1, 1, err, errlen) ||
            (h->recurrent[l] ? bind_gdn(m, l, err, errlen) : bind_attention(m, l, err, errlen)) ||
            df_moe_bind_layer(m, l, h->n_ff_exp, err, errlen))
            return -1;
    }
    return 0;
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* qwen3next's legacy ssm_in rows (in s->kda_q, C + V floats per token) into
 * the fused qkv (C per token, in place) and z (s->kda_g). */
static void unpack_legacy(df_session *s, int n) {
    const df_hparams *h = &s->m->hp;
    const int64_t hd = h->kda_head_dim, Hk = h->kda_n_head_k, r = h->kda_n_head / Hk, C = h->ssm_conv_ch;
    const int64_t V = h->kda_n_head * hd, KD = Hk * hd, grp = 2 * hd + 2 * r * hd;
    float *tmp = s->kda_v;
    for (int t = 0; t < n; t++) {
        memcpy(tmp, s->kda_q + t * (C + V), sizeof(float) * (size_t)(C + V));
        float *qkv = s->kda_q + t * C, *z = s->kda_g + t * V;
        for (int64_t g = 0; g < Hk; g++) {
            const float *src = tmp + g * grp;
            memcpy(qkv + g * hd, src, sizeof(float) * (size_t)hd);
            memcpy(qkv + KD + g * hd, src + hd, sizeof(float) * (size_t)hd);
            memcpy(qkv + 2 * KD + g * r * hd, src + 2 * hd, sizeof(float) * (size_t)(r * hd));
            memcpy(z + g * r * hd, src + 2 * hd + r * hd, sizeof(float) * (size_t)(r * hd));
        }
    }
}

/* The projections of a delta-net layer, in one pass over the input: the
 * fused qkv into s->kda_q, z into s->kda_g, beta into s->kda_beta and alpha
 * into s->kda_lo (qwen3next's ssm_ba through s->kda_o, free until the delta
 * rule; its legacy ssm_in through s->kda_q). */
static int gdn_project(df_session *s, int l, int n, char *err, size_t errlen) {
    const df_hparams *h = &s->m->hp;
    df_layer *L = &s->m->layers[l];
    const qwen_layer *Q = QL(L);
    const int64_t H = h->kda_n_head, C = h->ssm_conv_ch, V = H * h->kda_head_dim, r = H / h->kda_n_head_k;
    ws_tensor *w[4];
    float *y[4];
    int64_t ld[4];
    int nw = 0;
#define OUT(t, dst, width) (w[nw] = (t), y[nw] = (dst), ld[nw] = (width), nw++)
    if (Q->ssm_in) {
        OUT(Q->ssm_in, s->kda_q, C + V);
    } else {
        OUT(L->wqkv, s->kda_q, C);
        OUT(L->ssm_g, s->kda_g, V);
    }
    if (Q->ssm_ba) {
        OUT(Q->ssm_ba, s->kda_o, 2 * H);
    } else {
        OUT(L->ssm_beta, s->kda_beta, H);
        OUT(Q->ssm_alpha, s->kda_lo, H);
    }
#undef OUT
    if (df_matmul_n(s, nw, w, s->xb, n, y, ld, err, errlen)) return -1;
    if (Q->ssm_ba) /* per key head [beta (r), alpha (r)] */
        for (int64_t i = 0; i < (int64_t)n * H; i++) {
            const int64_t t = i / H, g = (i % H) / r, j = i % r;
            s->kda_beta[i] = s->kda_o[t * 2 * H + g * 2 * r + j];
            s->kda_lo[i] = s->kda_o[t * 2 * H + g * 2 * r + r + j];
        }
    if (Q->ssm_in) unpack_legacy(s, n);
    return 0;
}

/* Delta-net layer l on the normed input s->xb (n rows; own: layer.h, each
 * row then advancing its own session's states); output in s->xb2. */
static int gdn_layer(df_session *s, df_session *const *own, int l, int n, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int H = h->kda_n_head, Hk = h->kda_n_head_k, hd = h->kda_head_dim;
    const int64_t C = h->ssm_conv_ch, KD = (int64_t)Hk * hd, V = (int64_t)H * hd;
    if (gdn_project(s, l, n, err, errlen)) return -1;
    const float *w = ws_fetch(m->ws, L->ssm_conv[0], err, errlen);
    if (!w) return -1;
    if (!own) df_rec_conv(m->pool, s, l, 0, s->kda_q, n, C, w);
    for (int t = 0, r; own && t < n; t += r) { /* run by run on its own session's state */
        r = df_row_run(own, t, n);
        df_rec_conv(m->pool, own[t], l, 0, s->kda_q + t * C, r, C, w);
    }
    ws_release(m->ws, L->ssm_conv[0]);
    for (int t = 0; t < n; t++) dn_l2norm(s->kda_q + t * C, 2 * Hk, hd, h->norm_eps); /* q and k side by side */
    const float *dt = ws_fetch(m->ws, L->ssm_dt_b, err, errlen);
    const float *A = dt ? ws_fetch(m->ws, L->ssm_a, err, errlen) : NULL;
    if (!A) {
        if (dt) ws_release(m->ws, L->ssm_dt_b);
        return -1;
    }
    for (int64_t i = 0; i < (int64_t)n * H; i++) {
        const float x = s->kda_lo[i] + dt[i % H];
        s->kda_lo[i] = (x > 20.0f ? x : logf(1.0f + expf(x))) * A[i % H];
        s->kda_beta[i] = sigmoidf(s->kda_beta[i]);
    }
    ws_release(m->ws, L->ssm_a);
    ws_release(m->ws, L->ssm_dt_b);
    const dn_shape sh = {H, Hk, hd, ((const qwen_hp *)m->fam_hp)->k_interleave, 1, C, C, V};
    if (!own)
        df_rec_delta(m->pool, &sh, s, l, s->kda_q, s->kda_q + KD, s->kda_q + 2 * KD, s->kda_lo,
                       s->kda_beta, n, s->kda_o);
    for (int t = 0, r; own && t < n; t += r) { /* each run on its own session's state */
        r = df_row_run(own, t, n);
        const float *qkv = s->kda_q + t * C;
        df_rec_delta(m->pool, &sh, own[t], l, qkv, qkv + KD, qkv + 2 * KD, s->kda_lo + t * H,
                       s->kda_beta + t * H, r, s->kda_o + t * V);
    }
    /* gated RMSNorm: rmsnorm(o) * w * silu(z) */
    if (df_norm_rows(s, L->ssm_o_norm, s->kda_o, n * H, hd, hd, s->kda_o, err, errlen)) return -1;
    for (int64_t i = 0; i < (int64_t)n * V; i++) {
        const float z = s->kda_g[i];
        s->kda_o[i] *= z / (1.0f + expf(-z));
    }
    return df_matmul(s, L->wo, s->kda_o, n, s->xb2, h->n_embd, err, errlen);
}

/* attn_q's rows, per head [query, gate] (s->q, 2 qdim per token), into the
 * queries (s->q, qdim per token, in place) and the gates (s->attn_gate).
 * Each head's gate is read before anything is written over it. */
static void split_query_gate(df_session *s, int n) {
    const df_hparams *h = &s->m->hp;
    const int64_t hd = h->head_dim, Q = (int64_t)h->n_head * hd;
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < h->n_head; i++) {
            const float *src = s->q + t * 2 * Q + 2 * i * hd;
            memcpy(s->attn_gate + t * Q + i * hd, src + hd, sizeof(float) * (size_t)hd);
            memmove(s->q + t * Q + i * hd, src, sizeof(float) * (size_t)hd);
        }
}

/* Gated full-attention layer l on s->xb (own: layer.h); output in s->xb2. */
static int attn_layer(df_session *s, df_session *const *own, int l, int n, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int hd = h->head_dim;
    const int64_t Q = (int64_t)h->n_head * hd;
    ws_tensor *const w[3] = {L->wq, L->wk, L->wv};
    float *const y[3] = {s->q, s->k, s->v};
    const int64_t ld[3] = {2 * Q, s->kv_dim_k, s->kv_dim_v};
    if (df_matmul_n(s, 3, w, s->xb, n, y, ld, err, errlen)) return -1;
    split_query_gate(s, n);
    if (df_norm_rows(s, L->q_norm, s->q, n * h->n_head, hd, hd, s->q, err, errlen) ||
        df_norm_rows(s, L->k_norm, s->k, n * h->n_head_kv, hd, hd, s->k, err, errlen))
        return -1;
    for (int t = 0; t < n; t++) {
        const float *rc = s->rope_cache + (int64_t)t * h->n_rot;
        rope_apply(&s->rope, rc, s->q + t * Q, h->n_head, hd);
        rope_apply(&s->rope, rc, s->k + t * s->kv_dim_k, h->n_head_kv, hd);
    }
    df_attend_rows(s, own, l, n, s->k, s->v, s->q, s->xb, NULL);
    for (int64_t i = 0; i < (int64_t)n * Q; i++) s->xb[i] *= sigmoidf(s->attn_gate[i]);
    return df_matmul(s, L->wo, s->xb, n, s->xb2, h->n_embd, err, errlen);
}

/* The forward pass of n rows in s's scratch (own: layer.h, df_row_pos). */
static int forward(df_session *s, df_session *const *own, const int32_t *tokens, int n, float *logits,
                   int all_logits, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    const int64_t E = h->n_embd;
    int lo, hi; /* this rank's layers (pipe.h; alone: all) */
    df_pipe_layers(s, &lo, &hi);
    float *const cb[1] = {s->x};
    const size_t cf[1] = {(size_t)n * (size_t)E};
    if (lo == 0 ? df_embed(s, tokens, n, s->x, err, errlen) : df_pipe_enter(s, cb, cf, 1, err, errlen)) return -1;
    for (int t = 0; t < n; t++) rope_cache(&s->rope, df_row_pos(s, own, t), s->rope_cache + (int64_t)t * h->n_rot);
    for (int l = lo; l < hi; l++) {
        df_layer *L = &m->layers[l];
        if (df_layer_abort(s, err, errlen)) return -1; /* only models without recurrent layers stop here */
        if (df_norm_rows(s, L->attn_norm, s->x, n, E, E, s->xb, err, errlen)) return -1;
        if (df_mem_kind(s, l) == DF_MEM_RECURRENT ? gdn_layer(s, own, l, n, err, errlen)
                                                  : attn_layer(s, own, l, n, err, errlen))
            return -1;
        for (int64_t i = 0; i < (int64_t)n * E; i++) s->x[i] += s->xb2[i];
        if (df_ffn_block(s, l, n, err, errlen)) return -1; /* post_attention_norm, experts, shared expert */
    }
    if (df_pipe_hop(s, own, tokens, n, cb, cf, 1, err, errlen)) return -1;
    if (!own) s->pos += n;
    return logits ? df_output(s, n, logits, all_logits, err, errlen) : 0;
}

const df_arch df_arch_qwen35moe = {
    .name = "qwen35moe",
    .rope_neox = 1,
    .hparams = hparams,
    .bind = bind,
    .forward = forward,
};
const df_arch df_arch_qwen3next = {
    .name = "qwen3next",
    .rope_neox = 1,
    .hparams = hparams,
    .bind = bind,
    .forward = forward,
};
