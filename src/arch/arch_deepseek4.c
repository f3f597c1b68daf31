/*
 * arch_deepseek4.c - DeepSeek V4 (general.architecture "deepseek4"), as
 * llama.cpp's src/models/deepseek4.cpp defines it.
 *
 * Hyper-connections: the residual is hc (= 4) streams of n_embd. Before each
 * sublayer (attention, FFN) a mixer reads all streams (RMSNorm of the
 * hc * n_embd row, no weight) through hc_*_fn into (2 + hc) * hc numbers:
 *   pre[i]  = sigmoid(m[i] * scale[0] + base[i]) + eps           i < hc
 *   post[i] = 2 * sigmoid(m[hc + i] * scale[1] + base[hc + i])
 *   comb    = Sinkhorn(m[2hc..] * scale[2] + base[2hc..])        hc x hc
 * The sublayer reads sum_i pre[i] * stream[i]; its output y is written back as
 *   stream'[d] = post[d] * y + sum_s comb[s][d] * stream[s].
 * Sinkhorn: softmax over d for each s, + eps, then the sums over s are
 * divided out (columns), then iters - 1 times rows (sum over d) and columns,
 * each sum + eps (the reference's order). The output head mixes the streams
 * once more (output_hc_*: pre only) before output_norm.
 *
 * Attention (every layer has a sliding window of attention.sliding_window):
 *   qr = RMSNorm(Wq_a x) * q_a_norm; q = Wq_b qr, per head RMSNorm without
 *   weight; kv = RMSNorm(Wkv x) * kv_norm, one vector that is both the key and
 *   the value of the single KV head; RoPE (pairs) on the LAST n_rot values of
 *   q and kv; attention with one sink logit per head; the inverse RoPE on
 *   the output's last n_rot values; the grouped low-rank output projection:
 *   the heads in o_groups groups, group g through rows [g R, (g+1) R) of
 *   attn_output_a, then attn_output_b.
 * Layers with compress_ratios 4 or 128 also attend to compressed keys, one
 * per block of 4 or 128 positions, chosen by an indexer where the ratio is 4
 * (dsv4.c: the compressors, the indexer and their caches).
 *
 * FFN: routed experts with sqrt(softplus) gating and a selection bias, or,
 * in the hash_layer_count lead layers, the experts ffn_gate_tid2eid names for
 * the token (weights still from the router); SwiGLU clamped at
 * swiglu_clamp_exp (gate <= limit, |up| <= limit); one shared expert with
 * the same clamp (moe.c). MTP blocks (nextn_predict_layers) are not run.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "bind.h"
#include "dsv4.h"
#include "moe.h"
#include "pack.h"
#include "quant.h"
#include "util.h"

#define MAX_ROT 1024 /* rope.dimension_count (checked at load) */


static int hparams(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    df_dsv4_hp *v4;
    /* compress_ratios names every block, MTP ones included: read before the MTP blocks are set apart */
    if (df_dsv4_hparams(m, &v4, err, errlen) || df_hp_nextn(m, err, errlen)) return -1;
    if (h->n_expert == 0 || h->n_ff_exp == 0 || h->n_expert_shared < 1)
        return df_seterr(err, errlen, "%s: deepseek4 needs expert_count, expert_used_count, "
                         "expert_feed_forward_length and expert_shared_count", m->path);
    if (h->gating != DF_GATING_SQRT_SOFTPLUS)
        return df_seterr(err, errlen, "%s: deepseek4 needs expert_gating_func 4 (sqrt(softplus))", m->path);
    if (h->n_head_kv != 1 || h->head_dim_v != h->head_dim)
        return df_seterr(err, errlen, "%s: deepseek4 has one KV head whose key is its value (head_count_kv 1, "
                         "key_length == value_length)", m->path);
    if (df_hp_int(m, "attention.q_lora_rank", &h->q_lora_rank, 1, 1 << 20, 1, err, errlen) ||
        df_hp_int(m, "attention.sliding_window", &h->n_swa, 1, 1 << 24, 1, err, errlen) ||
        df_hp_int(m, "attention.output_group_count", &v4->o_groups, 1, h->n_head, 1, err, errlen) ||
        df_hp_int(m, "attention.output_lora_rank", &v4->o_lora, 1, 1 << 20, 1, err, errlen) ||
        df_hp_int(m, "hyper_connection.count", &v4->hc_mult, 1, 16, 1, err, errlen) ||
        df_hp_int(m, "hyper_connection.sinkhorn_iterations", &v4->hc_iters, 1, 1000, 1, err, errlen) ||
        df_hp_int(m, "hash_layer_count", &v4->n_hash_layers, 0, h->n_layer, 0, err, errlen))
        return -1;
    v4->hc_eps = 1e-6f;
    h->swiglu_limit = 0.0f;
    if (df_hp_float(m, "hyper_connection.epsilon", &v4->hc_eps, 0.0f, 1.0f, err, errlen) ||
        df_hp_float(m, "swiglu_clamp_exp", &h->swiglu_limit, 0.0f, 1e6f, err, errlen))
        return -1;
    if (h->n_rot > MAX_ROT) return df_seterr(err, errlen, "%s: rope.dimension_count %d is too large", m->path, h->n_rot);
    if (v4->hc_mult != 4)
        return df_seterr(err, errlen, "%s: hyper_connection.count %d (llama.cpp supports 4)", m->path, v4->hc_mult);
    if (h->n_head % v4->o_groups)
        return df_seterr(err, errlen, "%s: attention.output_group_count %d does not divide the %d heads", m->path,
                         v4->o_groups, h->n_head);
    h->swa = malloc((size_t)h->n_layer);
    if (!h->swa) return df_seterr(err, errlen, "%s: out of memory", m->path);
    memset(h->swa, 1, (size_t)h->n_layer);
    h->act = h->swiglu_limit > 1e-6f ? DF_ACT_SWIGLU_CLAMP : DF_ACT_SWIGLU;
    h->hidden_not_rows = 1; /* hc_mult residual streams */
    h->n_ff_shexp = h->n_ff_exp * h->n_expert_shared;
    h->n_layer_dense_lead = 0;
    h->n_expert_groups = 0;
    return 0;
}

static int bind(df_model *m, char *err, size_t errlen) {
    const df_dsv4_hp *v4 = df_dsv4(m);
    const df_hparams *h = &m->hp;
    const int64_t E = h->n_embd, H = h->n_head, hd = h->head_dim, HC = v4->hc_mult, mix = (2 + HC) * HC;
    const int64_t G = v4->o_groups, R = v4->o_lora, QL = h->q_lora_rank;
    if (df_bind_fam_tensors(m, offsetof(df_dsv4_tensors, layer), sizeof(df_dsv4_layer), err, errlen) ||
        df_bind_embed_output(m, err, errlen) ||
        df_bind(m, &V4T(m)->output_hc_fn, "output_hc_fn.weight", 0, 1, HC * E, HC, 1, err, errlen) ||
        df_bind(m, &V4T(m)->output_hc_base, "output_hc_base.weight", 0, 1, HC, 1, 1, err, errlen) ||
        df_bind(m, &V4T(m)->output_hc_scale, "output_hc_scale.weight", 0, 1, 1, 1, 1, err, errlen))
        return -1;
    if (V4T(m)->output_hc_fn->type != DF_TYPE_F32 && V4T(m)->output_hc_fn->type != DF_TYPE_F16 &&
        V4T(m)->output_hc_fn->type != DF_TYPE_BF16)
        return df_seterr(err, errlen, "%s: output_hc_fn.weight must be f32, f16 or bf16", m->path);
    for (int l = 0; l < h->n_layer; l++) {
        df_layer *L = &m->layers[l];
        if (df_bind(m, &L->attn_norm, "blk.%d.attn_norm.weight", l, 1, E, 1, 1, err, errlen) ||
            df_bind(m, &L->attn_sinks, "blk.%d.attn_sinks.weight", l, 1, H, 1, 1, err, errlen) ||
            df_bind(m, &L->wq_a, "blk.%d.attn_q_a.weight", l, 1, E, QL, 1, err, errlen) ||
            df_bind(m, &L->q_a_norm, "blk.%d.attn_q_a_norm.weight", l, 1, QL, 1, 1, err, errlen) ||
            df_bind(m, &L->wq_b, "blk.%d.attn_q_b.weight", l, 1, QL, H * hd, 1, err, errlen) ||
            df_bind(m, &V4L(L)->wkv, "blk.%d.attn_kv.weight", l, 1, E, hd, 1, err, errlen) ||
            df_bind(m, &L->kv_a_norm, "blk.%d.attn_kv_a_norm.weight", l, 1, hd, 1, 1, err, errlen) ||
            df_bind(m, &V4L(L)->wo_a, "blk.%d.attn_output_a.weight", l, 1, H * hd / G, R * G, 1, err, errlen) ||
            df_bind(m, &V4L(L)->wo_b, "blk.%d.attn_output_b.weight", l, 1, G * R, E, 1, err, errlen) ||
            df_bind(m, &V4L(L)->hc_attn_fn, "blk.%d.hc_attn_fn.weight", l, 1, HC * E, mix, 1, err, errlen) ||
            df_bind(m, &V4L(L)->hc_attn_base, "blk.%d.hc_attn_base.weight", l, 1, mix, 1, 1, err, errlen) ||
            df_bind(m, &V4L(L)->hc_attn_scale, "blk.%d.hc_attn_scale.weight", l, 1, 3, 1, 1, err, errlen) ||
            df_bind(m, &V4L(L)->hc_ffn_fn, "blk.%d.hc_ffn_fn.weight", l, 1, HC * E, mix, 1, err, errlen) ||
            df_bind(m, &V4L(L)->hc_ffn_base, "blk.%d.hc_ffn_base.weight", l, 1, mix, 1, 1, err, errlen) ||
            df_bind(m, &V4L(L)->hc_ffn_scale, "blk.%d.hc_ffn_scale.weight", l, 1, 3, 1, 1, err, errlen) ||
            df_bind(m, &L->ffn_norm, "blk.%d.ffn_norm.weight", l, 1, E, 1, 1, err, errlen) ||
            df_moe_bind_layer(m, l, h->n_ff_exp, err, errlen) || df_dsv4_bind_layer(m, l, err, errlen))
            return -1;
        if (l < v4->n_hash_layers) {
            if (df_bind_i32(m, &L->ffn_tid2eid, "blk.%d.ffn_gate_tid2eid.weight", l, h->n_expert_used, h->n_vocab,
                            err, errlen))
                return -1;
        } else if (!L->exp_probs_b) {
            return df_seterr(err, errlen, "%s: missing tensor 'blk.%d.exp_probs_b.bias'", m->path, l);
        }
        if (!L->ffn_gate_shexp) return df_seterr(err, errlen, "%s: layer %d has no shared expert", m->path, l);
    }
    return 0;
}

/* ---- hyper-connections ---- */

/* comb[s * hc + d] (source stream s, destination d): Sinkhorn as in the
 * reference (see the top of the file). */
static void sinkhorn(float *comb, int hc, int iters, float eps) {
    for (int s = 0; s < hc; s++) op_softmax(comb + s * hc, hc);
    for (int i = 0; i < hc * hc; i++) comb[i] += eps;
    for (int it = 0; it < iters; it++) {
        if (it > 0)
            for (int s = 0; s < hc; s++) { /* rows: the sum over d */
                float sum = 0.0f;
                for (int d = 0; d < hc; d++) sum += comb[s * hc + d];
                sum += eps;
                for (int d = 0; d < hc; d++) comb[s * hc + d] /= sum;
            }
        for (int d = 0; d < hc; d++) { /* columns: the sum over s */
            float sum = 0.0f;
            for (int s = 0; s < hc; s++) sum += comb[s * hc + d];
            sum += eps;
            for (int s = 0; s < hc; s++) comb[s * hc + d] /= sum;
        }
    }
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* The mixer of n rows of streams f->hc (fn, base, scale: one sublayer's, or
 * the output head's with post_comb 0): each row's pre weights collapse the
 * streams into out (n, n_embd); with post_comb, post and comb go to f->hc_mix
 * (row stride hc + hc * hc). */
static int hc_pre(df_session *s, ws_tensor *fn, ws_tensor *base, ws_tensor *scale, int post_comb, int n,
                  float *out, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_dsv4_hp *v4 = df_dsv4(m);
    df_dsv4_fam *f = s->fam;
    const df_hparams *h = &m->hp;
    const int hc = v4->hc_mult, nmix = (int)fn->ne[1];
    const int64_t E = h->n_embd, W = hc * E;
    for (int t = 0; t < n; t++) op_rmsnorm(f->hc_norm + t * W, f->hc + t * W, NULL, (int)W, h->norm_eps);
    if (df_matmul(s, fn, f->hc_norm, n, f->hc_mixes, nmix, err, errlen)) return -1;
    const float *b = ws_fetch(m->ws, base, err, errlen);
    const float *sc = b ? ws_fetch(m->ws, scale, err, errlen) : NULL;
    if (!sc) {
        if (b) ws_release(m->ws, base);
        return -1;
    }
    const int stride = hc + hc * hc;
    for (int t = 0; t < n; t++) {
        const float *mx = f->hc_mixes + (int64_t)t * nmix;
        const float *x = f->hc + t * W;
        float pre[16], *o = out + t * E;
        for (int i = 0; i < hc; i++) pre[i] = sigmoidf(mx[i] * sc[0] + b[i]) + v4->hc_eps;
        for (int64_t k = 0; k < E; k++) {
            float acc = 0.0f;
            for (int i = 0; i < hc; i++) acc += x[i * E + k] * pre[i];
            o[k] = acc;
        }
        if (!post_comb) continue;
        float *pc = f->hc_mix + (int64_t)t * stride;
        for (int i = 0; i < hc; i++) pc[i] = 2.0f * sigmoidf(mx[hc + i] * sc[1] + b[hc + i]);
        for (int i = 0; i < hc * hc; i++) pc[hc + i] = mx[2 * hc + i] * sc[2] + b[2 * hc + i];
        sinkhorn(pc + hc, hc, v4->hc_iters, v4->hc_eps);
    }
    ws_release(m->ws, scale);
    ws_release(m->ws, base);
    return 0;
}

/* Write the sublayer's output y (n, n_embd) back into the streams with the
 * post and comb weights hc_pre left in f->hc_mix. */
static void hc_post(df_session *s, const float *y, int n) {
    const df_dsv4_hp *v4 = df_dsv4(s->m);
    const df_hparams *h = &s->m->hp;
    df_dsv4_fam *f = s->fam;
    const int hc = v4->hc_mult, stride = hc + hc * hc;
    const int64_t E = h->n_embd, W = hc * E;
    for (int t = 0; t < n; t++) {
        const float *pc = f->hc_mix + (int64_t)t * stride, *comb = pc + hc, *yt = y + t * E;
        float *x = f->hc + t * W, *nx = f->hc_norm + t * W; /* the normed copy is spent: reuse it */
        for (int d = 0; d < hc; d++)
            for (int64_t k = 0; k < E; k++) {
                float acc = yt[k] * pc[d];
                for (int si = 0; si < hc; si++) acc += x[si * E + k] * comb[si * hc + d];
                nx[d * E + k] = acc;
            }
        memcpy(x, nx, sizeof(float) * (size_t)W);
    }
}

/* ---- attention ---- */

/* RoPE (or its inverse, sign -1) on the last n_rot values of each of n_heads
 * heads of hd in row x, at position pos. */
static void rope_tail(const df_session *s, const rope_params *rp, float *x, int n_heads, int pos, int sign) {
    const df_hparams *h = &s->m->hp;
    float rc[MAX_ROT];
    rope_cache(rp, sign > 0 ? pos : -(int64_t)pos, rc);
    rope_apply(rp, rc, x + (h->head_dim - h->n_rot), n_heads, h->head_dim);
}

/* The grouped low-rank output projection of n rows of s->xb (n_head * hd)
 * into s->xb2 (n, n_embd). */
static int out_proj(df_session *s, df_layer *L, int n, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_dsv4_hp *v4 = df_dsv4(m);
    df_dsv4_fam *f = s->fam;
    const df_hparams *h = &m->hp;
    const int64_t G = v4->o_groups, R = v4->o_lora, gd = (int64_t)h->n_head * h->head_dim / G;
    const int64_t qdim = (int64_t)h->n_head * h->head_dim;
    /* a group's R rows start a packed group (pack.h) when R is a multiple of PACK_ROWS: packed, if held so */
    ws_tensor *wt = V4L(L)->wo_a;
    const int aligned = R % PACK_ROWS == 0;
    const uint8_t *wa = aligned ? ws_fetch_mm(m->ws, wt, err, errlen) : ws_fetch(m->ws, wt, err, errlen);
    if (!wa) return -1;
    int rc = mm_mul_grouped(m->pool, wt->type, wa, aligned && wt->packed, (size_t)R * wt->row_bytes, (int)G, gd, R,
                            s->xb, gd, qdim, n, f->o_low, R, G * R, f->o_grp, &s->mm);
    if (rc) df_seterr(err, errlen, "internal: matmul scratch too small");
    ws_release(m->ws, wt);
    if (rc) return -1;
    return df_matmul(s, V4L(L)->wo_b, f->o_low, n, s->xb2, h->n_embd, err, errlen);
}

/* Layer l's attention on s->x (n rows, already mixed; own: layer.h) into s->xb2. */
static int attention(df_session *s, df_session *const *own, int l, int n, const rope_params *rp, char *err,
                     size_t errlen) {
    df_model *m = s->m;
    const df_dsv4_hp *v4 = df_dsv4(m);
    df_dsv4_fam *f = s->fam;
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t E = h->n_embd, hd = h->head_dim, H = h->n_head, qdim = H * hd, QL = h->q_lora_rank;
    if (df_norm_rows(s, L->attn_norm, s->x, n, E, E, s->xb, err, errlen)) return -1;
    ws_tensor *const w2[2] = {L->wq_a, V4L(L)->wkv};
    float *const y2[2] = {f->qr, s->k};
    const int64_t ld2[2] = {QL, hd};
    if (df_matmul_n(s, 2, w2, s->xb, n, y2, ld2, err, errlen) ||
        df_norm_rows(s, L->q_a_norm, f->qr, n, QL, QL, f->qr, err, errlen) ||
        df_norm_rows(s, L->kv_a_norm, s->k, n, hd, hd, s->k, err, errlen) ||
        df_matmul(s, L->wq_b, f->qr, n, s->q, qdim, err, errlen))
        return -1;
    for (int t = 0; t < n; t++) {
        const int pos = df_row_pos(s, own, t);
        float *q = s->q + t * qdim;
        for (int64_t hh = 0; hh < H; hh++) op_rmsnorm(q + hh * hd, q + hh * hd, NULL, (int)hd, h->norm_eps);
        rope_tail(s, rp, q, (int)H, pos, 1);
        rope_tail(s, rp, s->k + t * hd, 1, pos, 1);
    }
    memcpy(s->v, s->k, sizeof(float) * (size_t)(n * hd)); /* the key is the value */
    const float *sinks = ws_fetch(m->ws, L->attn_sinks, err, errlen);
    if (!sinks) return -1;
    int rc = 0;
    if (!v4->comp_ratio[l]) {
        df_attend_rows(s, own, l, n, s->k, s->v, s->q, s->xb, sinks);
    } else {
        if (!own) df_mem_store(s, l, n, s->k, s->v);
        for (int t = 0, r; own && t < n; t += r) { /* run by run: a session's rows go to consecutive positions */
            r = df_row_run(own, t, n);
            df_mem_store(own[t], l, r, s->k + t * hd, s->v + t * hd);
        }
        rc = df_dsv4_attend(s, own, l, n, s->xb, f->qr, rp, sinks, s->xb, err, errlen);
    }
    ws_release(m->ws, L->attn_sinks);
    if (rc) return -1;
    for (int t = 0; t < n; t++) rope_tail(s, rp, s->xb + t * qdim, (int)H, df_row_pos(s, own, t), -1);
    return out_proj(s, L, n, err, errlen);
}

/* ---- the pass ---- */

static int forward(df_session *s, df_session *const *own, const int32_t *tokens, int n, float *logits,
                   int all_logits, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_dsv4_hp *v4 = df_dsv4(m);
    df_dsv4_fam *f = s->fam;
    const df_hparams *h = &m->hp;
    const int64_t E = h->n_embd, HC = v4->hc_mult;
    /* the window layers' RoPE: the model's base without its scaling (llama.cpp: freq_scale 1, no YaRN) */
    rope_params rp = s->rope;
    rp.freq_scale = 1.0f;
    rp.ext_factor = 0.0f;
    rp.attn_factor = 1.0f;
    rp.freq_factors = NULL;
    const rope_params rp_comp = df_dsv4_rope(s); /* the compressed layers' */
    int lo, hi; /* this rank's layers (pipe.h; alone: all): the carry is the hyper-connections' streams */
    df_pipe_layers(s, &lo, &hi);
    float *const cb[1] = {f->hc};
    const size_t cf[1] = {(size_t)n * (size_t)(HC * E)};
    if (lo > 0) {
        if (df_pipe_enter(s, cb, cf, 1, err, errlen)) return -1;
    } else {
        if (df_embed(s, tokens, n, s->x, err, errlen) != 0) return -1;
        for (int t = 0; t < n; t++)
            for (int64_t i = 0; i < HC; i++) memcpy(f->hc + (t * HC + i) * E, s->x + t * E, sizeof(float) * (size_t)E);
    }
    s->moe_tokens = tokens;
    for (int l = lo; l < hi; l++) {
        df_layer *L = &m->layers[l];
        if (hc_pre(s, V4L(L)->hc_attn_fn, V4L(L)->hc_attn_base, V4L(L)->hc_attn_scale, 1, n, s->x, err, errlen) ||
            attention(s, own, l, n, v4->comp_ratio[l] ? &rp_comp : &rp, err, errlen))
            return -1;
        hc_post(s, s->xb2, n);
        if (hc_pre(s, V4L(L)->hc_ffn_fn, V4L(L)->hc_ffn_base, V4L(L)->hc_ffn_scale, 1, n, s->x, err, errlen) ||
            df_norm_rows(s, L->ffn_norm, s->x, n, E, E, s->xb, err, errlen) ||
            df_ffn_moe(s, l, s->xb, n, s->xb2, err, errlen))
            return -1;
        hc_post(s, s->xb2, n);
        if (df_layer_abort(s, err, errlen)) return -1;
    }
    s->moe_tokens = NULL;
    if (df_pipe_hop(s, own, tokens, n, cb, cf, 1, err, errlen)) return -1;
    if (!own) s->pos += n;
    if (!df_pipe_outputs(s)) return 0;
    if (hc_pre(s, V4T(m)->output_hc_fn, V4T(m)->output_hc_base, V4T(m)->output_hc_scale, 0, n, s->x, err, errlen)) return -1;
    return logits ? df_output(s, n, logits, all_logits, err, errlen) : 0;
}

/* The hyper-connections' streams go from rank to rank (pipe.h). */
static int carry_rows(const df_model *m) { return df_dsv4(m)->hc_mult; }

const df_arch df_arch_deepseek4 = {
    .name = "deepseek4",
    .rope_neox = 0,
    .hparams = hparams,
    .bind = bind,
    .forward = forward,
    .layer_mem = df_dsv4_layer_mem,
    .fam_bytes = sizeof(df_dsv4_fam),
    .scratch = df_dsv4_scratch,
    .carry_rows = carry_rows,
};
