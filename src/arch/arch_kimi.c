/*
 * arch_kimi.c - Kimi-Linear and Kimi-K3: hybrid models whose layers are
 * either KDA (Kimi Delta Attention, a gated delta-rule linear attention
 * with a fixed-size recurrent state) or MLA without RoPE, followed by a
 * DeepSeek-style MoE (sigmoid router with a selection bias, shared experts,
 * leading dense layers).
 *
 * DESIGN
 * The layer schedule comes from attention.head_count_kv as a per-layer
 * array: 0 marks a KDA layer (header.c reads it into hp.recurrent, and the
 * session gives that layer a recurrent state instead of a cache: df_mem_conv,
 * df_mem_state).
 *
 * KDA layer, on the normed input x (token by token; deltanet.c):
 *   q, k, v  = silu(short_conv(W x)) per channel, kernel ssm.conv_kernel,
 *              the last d_conv - 1 inputs kept in the layer's state
 *   q, k     = l2-normalised per head
 *   g        = f_b(f_a x) + dt_bias, per channel, then
 *              kimi-linear:         softplus(g) * A          (A = -exp(A_log))
 *              kimi-k3 ("safe"):    lb * sigmoid(-A * g)      lb = kda.gate_lower_bound
 *   beta     = sigmoid(W_beta x), per head
 *   o        = gated delta rule (q, k, v, g, beta) on the per-head state
 *   out      = W_o (rmsnorm_head(o) * sigmoid(gate x)), the gate low rank
 *              (g_b g_a, kimi-linear) or full rank (g, kimi-k3)
 * MLA layers are deepseek2's absorbed MLA (mla.c) with the RoPE
 * part used unrotated; kimi-k3 multiplies their output by sigmoid(W_gate x)
 * before attn_output.
 *
 * Kimi-K3 also has:
 *  - cross-layer residual attention (attn_res.block_size B > 0): every B
 *    layers the raw residual stream is banked as a checkpoint and the
 *    running sum restarts from that layer's attention output. Before the
 *    attention, before the FFN and before the output norm, the block reads
 *    a mix of the checkpoints and the running sum: softmax over the scores
 *    sum(rmsnorm(c) * w) (checkpoints first, the running sum last).
 *  - the latent MoE: the router reads the full-width input, the routed
 *    experts run at expert_latent_length between ffn_routed_down and
 *    ffn_routed_up (with an optional RMSNorm before the up projection);
 *    shared experts stay at full width.
 *  - SiTU instead of SwiGLU in every FFN (layer.c df_glu).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bind.h"
#include "deltanet.h"
#include "mla.h"
#include "moe.h"
#include "quant.h"
#include "util.h"

#define MAX_KDA_HEAD 1024 /* deltanet.c's per-thread row */

/* The family's scratch in a session (df_arch.fam_bytes), n_batch rows of each: kimi-k3's cross-layer
 * residual checkpoints (one per block of attn_res.block_size layers), the mix a block reads, one token's
 * mixing scores; the latent MoE's input and output (expert_latent_length wide). */
typedef struct {
    float *res_stack, *res_mix, *res_scores;
    float *lat_in, *lat_out;
} kimi_fam;

/* The family's hyperparameters (m->fam_hp). */
typedef struct {
    int attn_res_block; /* kimi-k3: attn_res.block_size: bank a checkpoint every this many layers (0: off) */
    float gate_lb;      /* kda.gate_lower_bound ("safe" gate), or -INFINITY: kimi-linear's softplus gate */
    int n_expert_latent; /* kimi-k3: expert_latent_length, the routed experts' width (0: n_embd, no projections) */
} kimi_hp;

static const kimi_hp *khp(const df_model *m) { return m->fam_hp; }

/* The family's own tensors (m->fam_tensors; a layer's df_layer.fam points at its entry). */
typedef struct {
    ws_tensor *ssm_f_a, *ssm_f_b;                                 /* KDA: the decay's low-rank projection */
    ws_tensor *ssm_g_a, *ssm_g_b;                                 /* kimi-linear: the output gate's low rank */
    ws_tensor *attn_gate;                                         /* kimi-k3: sigmoid output gate of MLA */
    ws_tensor *attn_res_score, *ffn_res_score;                    /* kimi-k3: cross-layer residual attention */
    ws_tensor *ffn_routed_down, *ffn_routed_up, *ffn_routed_norm; /* kimi-k3: latent MoE */
} kimi_layer;
typedef struct {
    ws_tensor *output_res_score; /* kimi-k3: the final residual mix */
    kimi_layer layer[];          /* (n_layer + n_layer_mtp) */
} kimi_tensors;
#define KL(L) ((kimi_layer *)(L)->fam)
#define KT(m) ((kimi_tensors *)(m)->fam_tensors)

static void scratch(const df_model *m, df_layout *lay) {
    const df_hparams *h = &m->hp;
    const int bs = khp(m)->attn_res_block;
    kimi_fam *f = df_layout_fam(lay);
    const uint64_t B = (uint64_t)df_layout_batch(lay), E = (uint64_t)h->n_embd, F = sizeof(float);
    if (bs > 0) {
        const uint64_t n_ckpt = (uint64_t)((h->n_layer + bs - 1) / bs);
        df_layout_scratch(lay, &f->res_stack, n_ckpt * B * E * F);
        df_layout_scratch(lay, &f->res_mix, B * E * F);
        df_layout_scratch(lay, &f->res_scores, (n_ckpt + 1) * F);
    }
    if (khp(m)->n_expert_latent > 0) {
        df_layout_scratch(lay, &f->lat_in, B * E * F);
        df_layout_scratch(lay, &f->lat_out, B * E * F);
    }
}

static int hparams_common(df_model *m, int k3, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    kimi_hp *k = calloc(1, sizeof *k);
    if (!k) return df_seterr(err, errlen, "out of memory");
    m->fam_hp = k; /* freed with the model */
    if (df_mla_hparams(m, err, errlen)) return -1;
    h->kq_scale = 1.0f / sqrtf((float)h->head_dim); /* the MLA head, not key_length's latent view */
    if (df_hp_int(m, "ssm.conv_kernel", &h->ssm_d_conv, 2, 64, 1, err, errlen) ||
        df_hp_int(m, "kda.head_dim", &h->kda_head_dim, 1, MAX_KDA_HEAD, 1, err, errlen))
        return -1;
    h->kda_n_head = h->kda_n_head_k = h->n_head;
    h->ssm_conv_ch = 3 * h->kda_n_head * h->kda_head_dim; /* q, k and v convolved side by side */
    if ((int64_t)h->kda_n_head * h->kda_head_dim > (1 << 20))
        return df_seterr(err, errlen, "%s: KDA width %lld is too large", m->path,
                         (long long)h->kda_n_head * h->kda_head_dim);
    k->gate_lb = -INFINITY;
    if (h->n_expert == 0 || h->n_ff_exp == 0)
        return df_seterr(err, errlen, "%s: %s needs expert_count, expert_used_count and expert_feed_forward_length",
                         m->path, m->arch_name);
    h->n_ff_shexp = h->n_ff_exp * (h->n_expert_shared > 0 ? h->n_expert_shared : 1);
    if (!k3) {
        h->expert_weights_norm = 1; /* llama.cpp normalises kimi-linear's expert weights whatever the file says */
        return 0;
    }
    char key[128];
    snprintf(key, sizeof key, "%s.kda.gate_lower_bound", m->arch_name);
    if (gguf_find(m->g, key)) {
        if (gguf_get_f32(m->g, key, &k->gate_lb, err, errlen)) return -1;
        if (!(k->gate_lb >= -1e4f && k->gate_lb < 0.0f))
            return df_seterr(err, errlen, "%s: '%s' = %g must be negative", m->path, key, k->gate_lb);
    }
    const char *betas[2] = {"activation.situ_beta", "activation.situ_linear_beta"};
    float *dst[2] = {&h->situ_beta, &h->situ_linear_beta};
    for (int i = 0; i < 2; i++) {
        snprintf(key, sizeof key, "%s.%s", m->arch_name, betas[i]);
        if (!gguf_find(m->g, key)) return df_seterr(err, errlen, "%s: missing metadata key '%s'", m->path, key);
        if (gguf_get_f32(m->g, key, dst[i], err, errlen)) return -1;
        if (!(*dst[i] <= 1e4f && *dst[i] >= (i ? -1e4f : 1e-4f)))
            return df_seterr(err, errlen, "%s: '%s' = %g is out of range", m->path, key, *dst[i]);
    }
    h->act = DF_ACT_SITU;
    h->attn_out_gate = 1;
    if (df_hp_int(m, "attn_res.block_size", &k->attn_res_block, 0, h->n_layer, 1, err, errlen) ||
        df_hp_int(m, "expert_latent_length", &k->n_expert_latent, 0, h->n_embd, 0, err, errlen))
        return -1;
    h->hidden_not_rows = k->attn_res_block > 0; /* blocks read mixes of banked residuals */
    return 0;
}

static int hparams_linear(df_model *m, char *err, size_t errlen) { return hparams_common(m, 0, err, errlen); }
static int hparams_k3(df_model *m, char *err, size_t errlen) { return hparams_common(m, 1, err, errlen); }

/* Layer l's KDA tensors. */
static int bind_kda(df_model *m, int l, int k3, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t E = h->n_embd, H = h->kda_n_head, hd = h->kda_head_dim, D = H * hd;
    static const char *const conv[3] = {"blk.%d.ssm_conv1d_q.weight", "blk.%d.ssm_conv1d_k.weight",
                                        "blk.%d.ssm_conv1d_v.weight"};
    for (int i = 0; i < 3; i++)
        if (df_bind_f32(m, &L->ssm_conv[i], conv[i], l, h->ssm_d_conv, 1, D, err, errlen)) return -1;
    char name[64];
    snprintf(name, sizeof name, "blk.%d.ssm_a", l);
    const gguf_tensor *ta = gguf_find_tensor(m->g, name);
    const int a_row = ta && ta->ne[0] == 1 && H > 1; /* kimi-linear: [1, n_head]; kimi-k3: [n_head] */
    if (df_bind(m, &L->wq, "blk.%d.attn_q.weight", l, 1, E, D, 1, err, errlen) ||
        df_bind(m, &L->wk, "blk.%d.attn_k.weight", l, 1, E, D, 1, err, errlen) ||
        df_bind(m, &L->wv, "blk.%d.attn_v.weight", l, 1, E, D, 1, err, errlen) ||
        df_bind(m, &KL(L)->ssm_f_a, "blk.%d.ssm_f_a.weight", l, 1, E, hd, 1, err, errlen) ||
        df_bind(m, &KL(L)->ssm_f_b, "blk.%d.ssm_f_b.weight", l, 1, hd, D, 1, err, errlen) ||
        df_bind_mat(m, &L->ssm_beta, "blk.%d.ssm_beta.weight", l, 1, E, H, err, errlen) ||
        df_bind_f32(m, &L->ssm_a, "blk.%d.ssm_a", l, a_row ? 1 : H, a_row ? H : 1, 1, err, errlen) ||
        df_bind(m, &L->ssm_dt_b, "blk.%d.ssm_dt.bias", l, 1, D, 1, 1, err, errlen) ||
        df_bind(m, &L->ssm_o_norm, "blk.%d.ssm_norm.weight", l, 1, hd, 1, 1, err, errlen) ||
        df_bind(m, &L->wo, "blk.%d.attn_output.weight", l, 1, D, E, 1, err, errlen))
        return -1;
    if (k3) return df_bind(m, &L->ssm_g, "blk.%d.ssm_g.weight", l, 1, E, D, 1, err, errlen);
    return df_bind(m, &KL(L)->ssm_g_a, "blk.%d.ssm_g_a.weight", l, 1, E, hd, 1, err, errlen) ||
                   df_bind(m, &KL(L)->ssm_g_b, "blk.%d.ssm_g_b.weight", l, 1, hd, D, 1, err, errlen)
               ? -1
               : 0;
}

/* Layer l's FFN: dense (leading layers) or MoE, with kimi-k3's latent projections. */
static int bind_ffn(df_model *m, int l, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t E = h->n_embd, W = khp(m)->n_expert_latent;
    if (l < h->n_layer_dense_lead) return df_bind_dense_ffn(m, l, err, errlen);
    if (df_moe_bind_experts(m, l, h->n_ff_exp, W, err, errlen)) return -1;
    if (!L->exp_probs_b) return df_seterr(err, errlen, "%s: missing tensor 'blk.%d.exp_probs_b.bias'", m->path, l);
    if (W > 0 && (df_bind(m, &KL(L)->ffn_routed_down, "blk.%d.ffn_routed_down.weight", l, 1, E, W, 1, err, errlen) ||
                  df_bind(m, &KL(L)->ffn_routed_up, "blk.%d.ffn_routed_up.weight", l, 1, W, E, 1, err, errlen) ||
                  df_bind(m, &KL(L)->ffn_routed_norm, "blk.%d.ffn_routed_norm.weight", l, 0, W, 1, 1, err, errlen)))
        return -1;
    return 0;
}

static int bind_common(df_model *m, int k3, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    const int64_t E = h->n_embd;
    if (df_bind_fam_tensors(m, offsetof(kimi_tensors, layer), sizeof(kimi_layer), err, errlen) ||
        df_bind_embed_output(m, err, errlen))
        return -1;
    const int res = khp(m)->attn_res_block > 0;
    if (res && df_bind(m, &KT(m)->output_res_score, "output_res_score.weight", 0, 1, E, 1, 1, err, errlen)) return -1;
    for (int l = 0; l < h->n_layer; l++) {
        df_layer *L = &m->layers[l];
        if (df_bind(m, &L->attn_norm, "blk.%d.attn_norm.weight", l, 1, E, 1, 1, err, errlen) ||
            df_bind(m, &L->ffn_norm, "blk.%d.ffn_norm.weight", l, 1, E, 1, 1, err, errlen))
            return -1;
        if (res && (df_bind(m, &KL(L)->attn_res_score, "blk.%d.attn_res_score.weight", l, 1, E, 1, 1, err, errlen) ||
                    df_bind(m, &KL(L)->ffn_res_score, "blk.%d.ffn_res_score.weight", l, 1, E, 1, 1, err, errlen)))
            return -1;
        if (h->recurrent && h->recurrent[l]) {
            if (bind_kda(m, l, k3, err, errlen)) return -1;
        } else if (df_mla_bind_layer(m, l, err, errlen) ||
                   (k3 && df_bind(m, &KL(L)->attn_gate, "blk.%d.attn_gate.weight", l, 0, E,
                                  (int64_t)h->n_head * h->head_dim_v, 1, err, errlen))) {
            return -1;
        }
        if (bind_ffn(m, l, err, errlen)) return -1;
    }
    return 0;
}

static int bind_linear(df_model *m, char *err, size_t errlen) { return bind_common(m, 0, err, errlen); }
static int bind_k3(df_model *m, char *err, size_t errlen) { return bind_common(m, 1, err, errlen); }

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* KDA layer l on the normed input s->xb (n rows; own: layer.h, each row
 * then advancing its own session's states); output (n, n_embd) in s->xb2. */
static int kda_layer(df_session *s, df_session *const *own, int l, int n, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int H = h->kda_n_head, hd = h->kda_head_dim;
    const int64_t D = (int64_t)H * hd, E = h->n_embd;
    /* q, k, v and the first halves of the decay gate and beta share the
     * input: one pass over the pool (each output is the same bits) */
    ws_tensor *const wx[5] = {L->wq, L->wk, L->wv, KL(L)->ssm_f_a, L->ssm_beta};
    float *const qkv[5] = {s->kda_q, s->kda_k, s->kda_v, s->kda_lo, s->kda_beta};
    const int64_t ld[5] = {D, D, D, hd, H};
    if (df_matmul_n(s, 5, wx, s->xb, n, qkv, ld, err, errlen)) return -1;
    for (int i = 0; i < 3; i++) {
        const float *w = ws_fetch(m->ws, L->ssm_conv[i], err, errlen);
        if (!w) return -1;
        if (!own) df_rec_conv(m->pool, s, l, i * D, qkv[i], n, D, w);
        for (int t = 0, r; own && t < n; t += r) {
            r = df_row_run(own, t, n);
            df_rec_conv(m->pool, own[t], l, i * D, qkv[i] + t * D, r, D, w);
        }
        ws_release(m->ws, L->ssm_conv[i]);
    }
    dn_l2norm(s->kda_q, (int64_t)n * H, hd, h->norm_eps);
    dn_l2norm(s->kda_k, (int64_t)n * H, hd, h->norm_eps);
    /* decay gate and beta */
    if (df_matmul(s, KL(L)->ssm_f_b, s->kda_lo, n, s->kda_g, D, err, errlen)) return -1;
    const float *dt = ws_fetch(m->ws, L->ssm_dt_b, err, errlen);
    const float *A = dt ? ws_fetch(m->ws, L->ssm_a, err, errlen) : NULL;
    if (!A) {
        if (dt) ws_release(m->ws, L->ssm_dt_b);
        return -1;
    }
    const float lb = khp(m)->gate_lb;
    for (int t = 0; t < n; t++)
        for (int64_t c = 0; c < D; c++) {
            float *g = s->kda_g + t * D + c;
            const float a = A[c / hd], x = *g + dt[c];
            if (lb > -INFINITY) *g = sigmoidf((x * a) * -1.0f) * lb;
            else *g = (x > 20.0f ? x : logf(1.0f + expf(x))) * a;
        }
    ws_release(m->ws, L->ssm_a);
    ws_release(m->ws, L->ssm_dt_b);
    for (int64_t i = 0; i < (int64_t)n * H; i++) s->kda_beta[i] = sigmoidf(s->kda_beta[i]);
    const dn_shape sh = {H, H, hd, 0, 0, D, D, D}; /* a decay per key channel, one key head per state head */
    if (!own) df_rec_delta(m->pool, &sh, s, l, s->kda_q, s->kda_k, s->kda_v, s->kda_g, s->kda_beta, n, s->kda_o);
    for (int t = 0, r; own && t < n; t += r) { /* each run on its own session's state */
        r = df_row_run(own, t, n);
        df_rec_delta(m->pool, &sh, own[t], l, s->kda_q + t * D, s->kda_k + t * D, s->kda_v + t * D,
                       s->kda_g + t * D, s->kda_beta + t * H, r, s->kda_o + t * D);
    }
    /* output gate (into kda_g, free again) and gated RMSNorm */
    if (L->ssm_g ? df_matmul(s, L->ssm_g, s->xb, n, s->kda_g, D, err, errlen)
                 : df_matmul(s, KL(L)->ssm_g_a, s->xb, n, s->kda_lo, hd, err, errlen) ||
                       df_matmul(s, KL(L)->ssm_g_b, s->kda_lo, n, s->kda_g, D, err, errlen))
        return -1;
    const float *on = ws_fetch(m->ws, L->ssm_o_norm, err, errlen);
    if (!on) return -1;
    for (int64_t r = 0; r < (int64_t)n * H; r++) {
        float *o = s->kda_o + r * hd;
        const float *g = s->kda_g + r * hd;
        op_rmsnorm(o, o, on, hd, h->norm_eps);
        for (int i = 0; i < hd; i++) o[i] *= sigmoidf(g[i]);
    }
    ws_release(m->ws, L->ssm_o_norm);
    return df_matmul(s, L->wo, s->kda_o, n, s->xb2, E, err, errlen);
}

/* MLA layer l (NoPE, optional output gate) on s->xb; output in s->xb2. */
static int mla_layer(df_session *s, df_session *const *own, int l, int n, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t V = (int64_t)h->n_head * h->head_dim_v;
    if (KL(L)->attn_gate && df_matmul(s, KL(L)->attn_gate, s->xb, n, s->attn_gate, V, err, errlen)) return -1;
    if (df_mla_attention(s, own, l, n, 0, err, errlen)) return -1;
    if (KL(L)->attn_gate)
        for (int64_t i = 0; i < (int64_t)n * V; i++) s->xb[i] *= sigmoidf(s->attn_gate[i]);
    return df_matmul(s, L->wo, s->xb, n, s->xb2, h->n_embd, err, errlen);
}

/* One residual's score: sum(rmsnorm(x) * w), summed in double as ggml's sum_rows. */
static float res_score(const float *x, const float *w, int E, float eps) {
    return (float)op_norm_dot(x, op_rms_scale(x, E, eps), w, E);
}

/* out += r * a, element by element (distinct arrays). */
static void add_scaled(float *restrict out, const float *restrict r, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] += r[i] * a;
}

/* Cross-layer residual attention: the mix of the nck banked checkpoints and
 * the running sum s->x that a block reads (s->x itself when none is banked). */
static const float *res_mix(df_session *s, ws_tensor *wt, int nck, int n, char *err, size_t errlen) {
    const df_hparams *h = &s->m->hp;
    kimi_fam *f = s->fam;
    const int64_t E = h->n_embd, B = s->n_batch;
    if (nck == 0) return s->x;
    const float *w = ws_fetch(s->m->ws, wt, err, errlen);
    if (!w) return NULL;
    float *p = f->res_scores;
    for (int t = 0; t < n; t++) {
        float *out = f->res_mix + t * E;
        const float *cur = s->x + t * E;
        for (int c = 0; c < nck; c++) p[c] = res_score(f->res_stack + (c * B + t) * E, w, (int)E, h->norm_eps);
        p[nck] = res_score(cur, w, (int)E, h->norm_eps);
        op_softmax(p, nck + 1);
        memset(out, 0, sizeof(float) * (size_t)E); /* each element's sum in the checkpoints' order */
        for (int c = 0; c < nck; c++) add_scaled(out, f->res_stack + (c * B + t) * E, p[c], E);
        add_scaled(out, cur, p[nck], E);
    }
    ws_release(s->m->ws, wt);
    return f->res_mix;
}

/* Layer l's FFN on the normed input s->xb; output in s->xb2. */
static int ffn_layer(df_session *s, int l, int n, char *err, size_t errlen) {
    df_model *m = s->m;
    df_layer *L = &m->layers[l];
    kimi_fam *f = s->fam;
    if (!L->ffn_gate_inp) return df_ffn_dense(s, L->ffn_gate, L->ffn_up, L->ffn_down, s->xb, n, s->xb2, err, errlen);
    if (!KL(L)->ffn_routed_down) return df_ffn_moe(s, l, s->xb, n, s->xb2, err, errlen);
    const int64_t W = KL(L)->ffn_routed_down->ne[1];
    if (df_matmul(s, KL(L)->ffn_routed_down, s->xb, n, f->lat_in, W, err, errlen) ||
        df_ffn_moe_routed(s, l, s->xb, f->lat_in, n, f->lat_out, err, errlen))
        return -1;
    if (KL(L)->ffn_routed_norm) {
        const float *rn = ws_fetch(m->ws, KL(L)->ffn_routed_norm, err, errlen);
        if (!rn) return -1;
        for (int t = 0; t < n; t++) op_rmsnorm(f->lat_out + t * W, f->lat_out + t * W, rn, (int)W, m->hp.norm_eps);
        ws_release(m->ws, KL(L)->ffn_routed_norm);
    }
    if (df_matmul(s, KL(L)->ffn_routed_up, f->lat_out, n, s->xb2, m->hp.n_embd, err, errlen)) return -1;
    return df_ffn_moe_shared(s, l, s->xb, n, s->xb2, err, errlen);
}

/* RMSNorm of n rows of x with tensor w into s->xb. */
static int norm_into_xb(df_session *s, ws_tensor *w, const float *x, int n, char *err, size_t errlen) {
    const df_hparams *h = &s->m->hp;
    const int64_t E = h->n_embd;
    const float *wn = ws_fetch(s->m->ws, w, err, errlen);
    if (!wn) return -1;
    for (int t = 0; t < n; t++) op_rmsnorm(s->xb + t * E, x + t * E, wn, (int)E, h->norm_eps);
    ws_release(s->m->ws, w);
    return 0;
}

/* The rows of a pipeline's carry: the running sum and every block's banked input. */
static int carry_rows(const df_model *m) {
    const df_hparams *h = &m->hp;
    const int bs = khp(m)->attn_res_block;
    return 1 + (bs ? (h->n_layer + bs - 1) / bs : 0);
}

/* A pipeline's hand-over (pipe.h): the running sum x and every block's banked input (res_stack; the same
 * buffers on every rank, so all of them, whichever layer the hand-over is at): taken at this rank's first
 * layer (enter), else handed on. Alone: nothing. */
static int pipe_carry(df_session *s, df_session *const *own, const int32_t *tokens, int n, int enter, char *err,
                      size_t errlen) {
    const df_hparams *h = &s->m->hp;
    kimi_fam *f = s->fam;
    if (!s->m->pp) return 0;
    const int64_t E = h->n_embd, B = s->n_batch;
    const int nb = carry_rows(s->m);
    float **cb = malloc(sizeof *cb * (size_t)nb);
    size_t *cf = malloc(sizeof *cf * (size_t)nb);
    int rc = !cb || !cf ? df_seterr(err, errlen, "out of memory"), -1 : 0;
    for (int k = 0; rc == 0 && k < nb; k++) {
        cb[k] = k ? f->res_stack + (k - 1) * B * E : s->x;
        cf[k] = (size_t)(n * E);
    }
    if (rc == 0)
        rc = enter ? df_pipe_enter(s, cb, cf, nb, err, errlen) : df_pipe_hop(s, own, tokens, n, cb, cf, nb, err, errlen);
    free(cb);
    free(cf);
    return rc;
}

/* The forward pass of n rows in s's scratch (own: layer.h, df_row_pos). */
static int forward(df_session *s, df_session *const *own, const int32_t *tokens, int n, float *logits,
                   int all_logits, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    kimi_fam *f = s->fam;
    const int64_t E = h->n_embd, B = s->n_batch;
    const int bs = khp(m)->attn_res_block;
    int lo, hi; /* this rank's layers (pipe.h; alone: all): the carry is x and the banked blocks' inputs */
    df_pipe_layers(s, &lo, &hi);
    int nck = bs ? (lo + bs - 1) / bs : 0; /* blocks banked before layer lo */
    if (lo == 0 && df_embed(s, tokens, n, s->x, err, errlen) != 0) return -1;
    if (lo > 0 && pipe_carry(s, own, tokens, n, 1, err, errlen)) return -1;
    for (int l = lo; l < hi; l++) {
        df_layer *L = &m->layers[l];
        if (df_layer_abort(s, err, errlen)) return -1; /* only models without recurrent layers stop here */
        const float *in = bs ? res_mix(s, KL(L)->attn_res_score, nck, n, err, errlen) : s->x;
        if (!in) return -1;
        const int banked = bs && l % bs == 0;
        if (banked) memcpy(f->res_stack + nck++ * B * E, s->x, sizeof(float) * (size_t)(n * E)); /* the raw input */
        if (norm_into_xb(s, L->attn_norm, in, n, err, errlen)) return -1;
        if (df_mem_kind(s, l) == DF_MEM_RECURRENT ? kda_layer(s, own, l, n, err, errlen)
                                                  : mla_layer(s, own, l, n, err, errlen))
            return -1;
        if (banked) memcpy(s->x, s->xb2, sizeof(float) * (size_t)(n * E)); /* the running sum restarts */
        else
            for (int64_t i = 0; i < n * E; i++) s->x[i] += s->xb2[i];
        in = bs ? res_mix(s, KL(L)->ffn_res_score, nck, n, err, errlen) : s->x;
        s->moe_hint = in; /* what the next layer's FFN will read is closer to this mix than to the running sum */
        if (!in || norm_into_xb(s, L->ffn_norm, in, n, err, errlen) || ffn_layer(s, l, n, err, errlen)) return -1;
        for (int64_t i = 0; i < n * E; i++) s->x[i] += s->xb2[i];
    }
    if (pipe_carry(s, own, tokens, n, 0, err, errlen)) return -1;
    if (bs) nck = (h->n_layer + bs - 1) / bs; /* rank 0 of a pipeline: the last rank's blocks (alone: the same) */
    if (!own) s->pos += n;
    if (!logits) return 0;
    if (bs) {
        const float *out = res_mix(s, KT(m)->output_res_score, nck, n, err, errlen);
        if (!out) return -1;
        if (out != s->x) memcpy(s->x, out, sizeof(float) * (size_t)(n * E));
    }
    return df_output(s, n, logits, all_logits, err, errlen);
}

const df_arch df_arch_kimi_linear = {
    .name = "kimi-linear",
    .rope_neox = 0,
    .hparams = hparams_linear,
    .bind = bind_linear,
    .forward = forward,
    .fam_bytes = sizeof(kimi_fam),
    .scratch = scratch,
    .carry_rows = carry_rows,
};
const df_arch df_arch_kimi_k3 = {
    .name = "kimi-k3",
    .rope_neox = 0,
    .hparams = hparams_k3,
    .bind = bind_k3,
    .forward = forward,
    .fam_bytes = sizeof(kimi_fam),
    .scratch = scratch,
    .carry_rows = carry_rows,
};
