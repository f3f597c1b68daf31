/*
 * moe.c - Mixture-of-Experts feed-forward layers: the router, expert
 * selection, and expert computation organised by expert.
 *
 * DESIGN
 * For a batch of n tokens the router gives every token n_expert scores
 * (softmax or sigmoid of ffn_gate_inp * x). Selection follows llama.cpp's
 * build_moe_ffn exactly: an optional per-expert bias
 * (exp_probs_b) shifts the scores used for choosing but not the weights;
 * group-limited routing keeps the n_group_used groups whose two best scores
 * sum highest; the top n_expert_used experts win (ties to the lower id);
 * their unbiased probabilities are the weights, optionally normalised to sum
 * to one and scaled.
 *
 * Then the tokens are grouped by expert: each selected expert's weights are
 * fetched once from the weight store (ws_fetch_expert: one expert slice, the
 * unit a streaming store reads) and applied to all of its tokens in one
 * matrix product. Experts nobody selected are never touched. This is what
 * makes prompt processing and batched generation cheap, and it tells the
 * weight store, before any expert runs, exactly which experts a step needs.
 *
 * Shared experts are a dense FFN added to the result, gated by a sigmoid
 * when the layer has ffn_gate_inp_shexp.
 *
 * df_ffn_block, the FFN block most families use (norm,
 * dense or MoE FFN, residual), is here too: it is the one caller that
 * chooses between the two.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bind.h"
#include "expar.h"
#include "moe.h"
#include "quant.h"
#include "util.h"

#define MAX_EXPERTS 1024
#define MAX_LOOKAHEAD_ROWS EP_MAX_GUESS_ROWS /* rows of a pass that guess the next layer's experts */

int df_moe_read_hparams(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    char key[128];
    if (df_hp_int(m, "expert_count", &h->n_expert, 0, MAX_EXPERTS, 0, err, errlen) ||
        df_hp_int(m, "expert_used_count", &h->n_expert_used, 0, MAX_EXPERTS, 0, err, errlen) ||
        df_hp_int(m, "expert_shared_count", &h->n_expert_shared, 0, 64, 0, err, errlen) ||
        df_hp_int(m, "expert_feed_forward_length", &h->n_ff_exp, 1, 1 << 20, 0, err, errlen) ||
        df_hp_int(m, "expert_shared_feed_forward_length", &h->n_ff_shexp, 1, 1 << 20, 0, err, errlen) ||
        df_hp_int(m, "leading_dense_block_count", &h->n_layer_dense_lead, 0, h->n_layer, 0, err, errlen) ||
        df_hp_int(m, "expert_gating_func", &h->gating, 0, 4, 0, err, errlen) ||
        df_hp_int(m, "expert_group_count", &h->n_expert_groups, 0, MAX_EXPERTS, 0, err, errlen) ||
        df_hp_int(m, "expert_group_used_count", &h->n_group_used, 0, MAX_EXPERTS, 0, err, errlen))
        return -1;
    snprintf(key, sizeof key, "%s.expert_weights_norm", m->arch_name);
    if (gguf_find(m->g, key) && gguf_get_bool(m->g, key, &h->expert_weights_norm, err, errlen) != 0) return -1;
    snprintf(key, sizeof key, "%s.expert_weights_scale", m->arch_name);
    if (gguf_find(m->g, key)) {
        if (gguf_get_f32(m->g, key, &h->expert_weights_scale, err, errlen) != 0) return -1;
        if (!(h->expert_weights_scale >= 0.0f && h->expert_weights_scale <= 1e4f))
            return df_seterr(err, errlen, "%s: '%s' = %g is out of range", m->path, key, h->expert_weights_scale);
    }
    if (h->gating == 0) h->gating = DF_GATING_SOFTMAX;
    if (h->gating == 3)
        return df_seterr(err, errlen, "%s: expert_gating_func 3 (softmax of the selected weights) is not supported",
                         m->path);
    if (h->n_expert == 0) {
        if (h->n_expert_used != 0)
            return df_seterr(err, errlen, "%s: expert_used_count %d without expert_count", m->path, h->n_expert_used);
        return 0;
    }
    if (h->n_expert_used < 1 || h->n_expert_used > h->n_expert)
        return df_seterr(err, errlen, "%s: expert_used_count %d must be between 1 and expert_count %d", m->path,
                         h->n_expert_used, h->n_expert);
    if (h->n_expert_groups > 1) {
        if (h->n_expert % h->n_expert_groups || h->n_expert_groups >= h->n_expert ||
            h->n_expert / h->n_expert_groups < 2)
            return df_seterr(err, errlen, "%s: expert_group_count %d does not divide expert_count %d into groups of 2+",
                             m->path, h->n_expert_groups, h->n_expert);
        if (h->n_group_used < 1 || h->n_group_used >= h->n_expert_groups ||
            h->n_group_used * (h->n_expert / h->n_expert_groups) < h->n_expert_used)
            return df_seterr(err, errlen, "%s: expert_group_used_count %d is out of range for %d groups and %d used experts",
                             m->path, h->n_group_used, h->n_expert_groups, h->n_expert_used);
    }
    return 0;
}

int df_moe_bind_layer(df_model *m, int l, int n_ff_exp, char *err, size_t errlen) {
    return df_moe_bind_experts(m, l, n_ff_exp, 0, err, errlen);
}

int df_moe_bind_experts(df_model *m, int l, int n_ff_exp, int64_t width, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t E = h->n_embd, X = h->n_expert, sh = h->n_ff_shexp;
    const int64_t W = width > 0 ? width : E; /* the routed experts' width */
    if (df_bind(m, &L->ffn_gate_inp, "blk.%d.ffn_gate_inp.weight", l, 1, E, X, 1, err, errlen) ||
        df_bind(m, &L->ffn_gate_exps, "blk.%d.ffn_gate_exps.weight", l, 1, W, n_ff_exp, X, err, errlen) ||
        df_bind(m, &L->ffn_up_exps, "blk.%d.ffn_up_exps.weight", l, 1, W, n_ff_exp, X, err, errlen) ||
        df_bind(m, &L->ffn_down_exps, "blk.%d.ffn_down_exps.weight", l, 1, n_ff_exp, W, X, err, errlen) ||
        df_bind(m, &L->exp_probs_b, "blk.%d.exp_probs_b.bias", l, 0, X, 1, 1, err, errlen))
        return -1;
    if (L->exp_probs_b && L->exp_probs_b->type != DF_TYPE_F32)
        return df_seterr(err, errlen, "%s: blk.%d.exp_probs_b.bias must be f32", m->path, l);
    if (sh > 0) {
        const int req = h->n_expert_shared > 0;
        if (df_bind(m, &L->ffn_gate_shexp, "blk.%d.ffn_gate_shexp.weight", l, req, E, sh, 1, err, errlen) ||
            df_bind(m, &L->ffn_up_shexp, "blk.%d.ffn_up_shexp.weight", l, req, E, sh, 1, err, errlen) ||
            df_bind(m, &L->ffn_down_shexp, "blk.%d.ffn_down_shexp.weight", l, req, sh, E, 1, err, errlen) ||
            df_bind(m, &L->ffn_gate_inp_shexp, "blk.%d.ffn_gate_inp_shexp.weight", l, 0, E, 1, 1, err, errlen))
            return -1;
        const int parts = !!L->ffn_gate_shexp + !!L->ffn_up_shexp + !!L->ffn_down_shexp;
        if (parts != 0 && parts != 3)
            return df_seterr(err, errlen, "%s: layer %d has an incomplete shared expert", m->path, l);
    }
    return 0;
}

/* ---- routing ---- */

static int better(const float *v, int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); }

/* Indices of the k largest of v[0..n) (ties: lower index), best first. */
static void top_k(const float *v, int n, int k, int32_t *out) {
    for (int j = 0; j < k; j++) out[j] = -1;
    for (int i = 0; i < n; i++) {
        if (out[k - 1] >= 0 && !better(v, i, out[k - 1])) continue;
        int j = k - 1;
        while (j > 0 && (out[j - 1] < 0 || better(v, i, out[j - 1]))) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = i;
    }
}

/* Choose one token's experts (moe.h); returns the choice's margin: the
 * smaller of the group choice's (the last kept group's score minus the best
 * left out) and the expert choice's. */
float df_moe_select(const df_hparams *h, const float *probs, const float *bias, int32_t *ids, float *w) {
    const int X = h->n_expert, K = h->n_expert_used;
    float sel[MAX_EXPERTS] = {0}, margin = INFINITY; /* zeroed: the compiler cannot see X <= MAX_EXPERTS */
    for (int e = 0; e < X; e++) sel[e] = bias ? probs[e] + bias[e] : probs[e];
    if (h->n_expert_groups > 1) {
        const int G = h->n_expert_groups, per = X / G;
        float gscore[MAX_EXPERTS];
        int32_t best2[2], keep[MAX_EXPERTS];
        for (int g = 0; g < G; g++) {
            top_k(sel + g * per, per, 2, best2);
            gscore[g] = sel[g * per + best2[0]] + sel[g * per + best2[1]];
        }
        top_k(gscore, G, h->n_group_used, keep);
        float gnext = -INFINITY; /* the best group left out */
        for (int g = 0; g < G; g++) {
            int kept = 0;
            for (int j = 0; j < h->n_group_used; j++) kept |= keep[j] == g;
            if (kept) continue;
            gnext = gscore[g] > gnext ? gscore[g] : gnext;
            for (int e = 0; e < per; e++) sel[g * per + e] = -INFINITY;
        }
        if (gnext > -INFINITY) margin = gscore[keep[h->n_group_used - 1]] - gnext;
    }
    top_k(sel, X, K, ids);
    df_moe_weights(h, probs, ids, w);
    float next = -INFINITY; /* the best unchosen expert (of the groups kept) */
    for (int e = 0; e < X; e++) {
        int chosen = 0;
        for (int j = 0; j < K; j++) chosen |= ids[j] == e;
        if (!chosen && sel[e] > next) next = sel[e];
    }
    if (next > -INFINITY && sel[ids[K - 1]] - next < margin) margin = sel[ids[K - 1]] - next;
    return margin;
}

void df_moe_weights(const df_hparams *h, const float *probs, const int32_t *ids, float *w) {
    const int K = h->n_expert_used;
    float sum = 0.0f;
    for (int j = 0; j < K; j++) w[j] = probs[ids[j]];
    if (h->gating == DF_GATING_SOFTMAX_WEIGHT) op_softmax(w, K); /* the chosen logits' softmax */
    for (int j = 0; j < K; j++) sum += w[j];
    if (h->expert_weights_norm) {
        if (sum < 6.103515625e-5f) sum = 6.103515625e-5f;
        for (int j = 0; j < K; j++) w[j] /= sum;
    }
    if (h->expert_weights_scale != 0.0f && h->expert_weights_scale != 1.0f)
        for (int j = 0; j < K; j++) w[j] *= h->expert_weights_scale;
}

void df_moe_probs(const df_hparams *h, float *p) {
    if (h->gating == DF_GATING_SOFTMAX_WEIGHT) return; /* experts are chosen by their raw logits */
    if (h->gating == DF_GATING_SIGMOID) {
        for (int e = 0; e < h->n_expert; e++) p[e] = 1.0f / (1.0f + expf(-p[e]));
    } else if (h->gating == DF_GATING_SQRT_SOFTPLUS) { /* ggml's softplus: x above 20 */
        for (int e = 0; e < h->n_expert; e++) p[e] = sqrtf(p[e] > 20.0f ? p[e] : logf(1.0f + expf(p[e])));
    } else {
        op_softmax(p, h->n_expert);
    }
}

/* Hash routing: the experts the token's row of ffn_gate_tid2eid
 * names (s->moe_tokens), weighted by the router's probabilities of them. */
static int route_hash(df_session *s, df_layer *L, int n, char *err, size_t errlen) {
    const df_hparams *h = &s->m->hp;
    const int K = h->n_expert_used;
    if (!s->moe_tokens) return df_seterr(err, errlen, "internal: hash routing without the tokens");
    const int32_t *tab = ws_fetch(s->m->ws, L->ffn_tid2eid, err, errlen);
    if (!tab) return -1;
    int rc = 0;
    for (int t = 0; t < n && rc == 0; t++) {
        const int32_t *ids = tab + (int64_t)s->moe_tokens[t] * K;
        for (int j = 0; j < K; j++)
            if (ids[j] < 0 || ids[j] >= h->n_expert) rc = df_seterr(err, errlen, "%s: ffn_gate_tid2eid names expert %d "
                                                                    "of %d", s->m->path, ids[j], h->n_expert);
        if (rc) break;
        memcpy(s->topk_id + (int64_t)t * K, ids, sizeof(int32_t) * (size_t)K);
        df_moe_weights(h, s->router + (int64_t)t * h->n_expert, ids, s->topk_w + (int64_t)t * K);
        s->topk_margin[t] = INFINITY; /* chosen by the token, not by scores */
    }
    ws_release(s->m->ws, L->ffn_tid2eid);
    return rc;
}

/* Router probabilities for n tokens into s->router. */
static int route(df_session *s, df_layer *L, const float *x, int n, char *err, size_t errlen) {
    const df_hparams *h = &s->m->hp;
    const int X = h->n_expert;
    if (df_matmul(s, L->ffn_gate_inp, x, n, s->router, X, err, errlen) != 0) return -1;
    if (df_add_bias(s, L->ffn_gate_inp_b, s->router, n, X, err, errlen)) return -1;
    for (int t = 0; t < n; t++) df_moe_probs(h, s->router + (int64_t)t * X);
    if (L->ffn_tid2eid) return route_hash(s, L, n, err, errlen);
    const float *bias = L->exp_probs_b ? ws_fetch(s->m->ws, L->exp_probs_b, err, errlen) : NULL;
    if (L->exp_probs_b && !bias) return -1;
    for (int t = 0; t < n; t++)
        s->topk_margin[t] = df_moe_select(h, s->router + (int64_t)t * X, bias,
                                          s->topk_id + (int64_t)t * h->n_expert_used,
                                          s->topk_w + (int64_t)t * h->n_expert_used);
    if (bias) ws_release(s->m->ws, L->exp_probs_b);
    return 0;
}

/* Append this step's routing to the trace file (format in docs/trace.md). */
static void trace(df_session *s, int l, int n) {
    const int K = s->m->hp.n_expert_used;
    for (int t = 0; t < n; t++) {
        int32_t pos = s->pos + t;
        int16_t hdr[2] = {(int16_t)l, (int16_t)K};
        fwrite(&pos, 4, 1, s->trace);
        fwrite(hdr, 2, 2, s->trace);
        fwrite(&s->topk_margin[t], 4, 1, s->trace);
        for (int j = 0; j < K; j++) {
            fwrite(&s->topk_id[t * K + j], 4, 1, s->trace);
            fwrite(&s->topk_w[t * K + j], 4, 1, s->trace);
        }
    }
}

/* Add expert e's row of a per-expert bias (ne = (n_out, n_expert))
 * to cnt rows of y (stride ld). */
static int expert_bias(df_session *s, ws_tensor *b, int e, float *y, int cnt, int64_t ld, char *err, size_t errlen) {
    if (!b) return 0;
    const float *bv = ws_fetch(s->m->ws, b, err, errlen);
    if (!bv) return -1;
    const int64_t n = b->ne[0];
    for (int r = 0; r < cnt; r++)
        for (int64_t i = 0; i < n; i++) y[r * ld + i] += bv[(int64_t)e * n + i];
    ws_release(s->m->ws, b);
    return 0;
}

/* Run one expert's SwiGLU FFN on its cnt gathered rows in s->ex_x into s->ex_y. */
static int run_expert(df_session *s, df_layer *L, int e, int cnt, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    const int F = (int)L->ffn_gate_exps->ne[1];
    int pk[3] = {0, 0, 0}; /* each slice's layout */
    const void *g = ws_fetch_expert_mm(m->ws, L->ffn_gate_exps, e, &pk[0], err, errlen);
    const void *u = g ? ws_fetch_expert_mm(m->ws, L->ffn_up_exps, e, &pk[1], err, errlen) : NULL;
    const void *d = u ? ws_fetch_expert_mm(m->ws, L->ffn_down_exps, e, &pk[2], err, errlen) : NULL;
    int rc = -1;
    const mm_op gate_up[2] = {{L->ffn_gate_exps->type, g, F, s->ex_h, F, NULL, pk[0]},
                              {L->ffn_up_exps->type, u, F, s->ex_h2, F, NULL, pk[1]}};
    const int64_t W = L->ffn_gate_exps->ne[0]; /* n_embd, or the latent width */
    if (d && mm_mul_n(m->pool, gate_up, 2, W, s->ex_x, cnt, &s->mm) == 0) { /* one conversion, one pass */
        if (expert_bias(s, L->ffn_gate_exps_b, e, s->ex_h, cnt, F, err, errlen) ||
            expert_bias(s, L->ffn_up_exps_b, e, s->ex_h2, cnt, F, err, errlen)) {
            rc = -1;
        } else {
            df_glu_pool(m->pool, h, s->ex_h, s->ex_h2, cnt * F);
            const mm_op down = {L->ffn_down_exps->type, d, W, s->ex_y, W, s->ex_h, pk[2]};
            rc = mm_mul_n(m->pool, &down, 1, F, NULL, cnt, &s->mm);
            if (rc != 0) df_seterr(err, errlen, "internal: expert scratch too small");
            else rc = expert_bias(s, L->ffn_down_exps_b, e, s->ex_y, cnt, W, err, errlen);
        }
    } else if (d) {
        df_seterr(err, errlen, "internal: expert scratch too small");
    }
    if (d) ws_release_expert(m->ws, L->ffn_down_exps, e);
    if (u) ws_release_expert(m->ws, L->ffn_up_exps, e);
    if (g) ws_release_expert(m->ws, L->ffn_gate_exps, e);
    return rc;
}

/* Generation (one token x, experts ids[0..nu), distinct, all in memory, for
 * slots slot[0..nu)): every expert's gate and up products in one pass of the
 * pool and all down products in a second, straight into s->ex_out's slot
 * rows; two passes per layer instead of two per expert. Returns 1 if it ran,
 * 0 if this case does not apply (caller runs experts one by one), -1 on
 * error. */
static int run_experts_one_token(df_session *s, df_layer *L, int l, const int32_t *ids, const int *slot, int nu,
                                 const float *x, char *err, size_t errlen) {
    df_model *m = s->m;
    const int64_t E = L->ffn_gate_exps->ne[0], F = L->ffn_gate_exps->ne[1];
    if (2 * nu > MM_MAX_OPS || nu > s->n_batch) return 0; /* ex_h/ex_h2 hold n_batch rows of F */
    for (int u = 0; u < nu; u++)
        if (!ws_expert_ready(m->ws, l, ids[u])) return 0;
    ws_tensor *const t3[3] = {L->ffn_gate_exps, L->ffn_up_exps, L->ffn_down_exps};
    const void *w[3][MM_MAX_OPS];
    int pk[3][MM_MAX_OPS]; /* each slice's layout */
    int got = 0, rc = -1;
    for (; got < 3 * nu; got++) {
        const int part = got / nu, u = got % nu;
        w[part][u] = ws_fetch_expert_mm(m->ws, t3[part], ids[u], &pk[part][u], err, errlen);
        if (!w[part][u]) break;
    }
    if (got == 3 * nu) {
        mm_op ops[MM_MAX_OPS];
        for (int u = 0; u < nu; u++) {
            ops[2 * u] = (mm_op){L->ffn_gate_exps->type, w[0][u], F, s->ex_h + u * F, F, NULL, pk[0][u]};
            ops[2 * u + 1] = (mm_op){L->ffn_up_exps->type, w[1][u], F, s->ex_h2 + u * F, F, NULL, pk[1][u]};
        }
        if (mm_mul_n(m->pool, ops, 2 * nu, E, x, 1, &s->mm) == 0) {
            int brc = 0;
            for (int u = 0; u < nu && !brc; u++)
                brc = expert_bias(s, L->ffn_gate_exps_b, ids[u], s->ex_h + u * F, 1, F, err, errlen) ||
                      expert_bias(s, L->ffn_up_exps_b, ids[u], s->ex_h2 + u * F, 1, F, err, errlen);
            if (!brc) {
                df_glu_pool(m->pool, &m->hp, s->ex_h, s->ex_h2, (int)(nu * F));
                for (int u = 0; u < nu; u++) /* its slot's output row */
                    ops[u] = (mm_op){L->ffn_down_exps->type, w[2][u], E, s->ex_out + slot[u] * E, E,
                                     s->ex_h + u * F, pk[2][u]};
                rc = mm_mul_n(m->pool, ops, nu, F, NULL, 1, &s->mm) == 0 ? 1 : -1;
                if (rc < 0) df_seterr(err, errlen, "internal: expert scratch too small");
                for (int u = 0; u < nu && rc > 0; u++)
                    if (expert_bias(s, L->ffn_down_exps_b, ids[u], s->ex_out + slot[u] * E, 1, E, err, errlen))
                        rc = -1;
            }
        } else {
            df_seterr(err, errlen, "internal: expert scratch too small");
        }
    }
    while (got > 0) {
        got--;
        ws_release_expert(m->ws, t3[got / nu], ids[got % nu]);
    }
    return rc;
}

int df_moe_guess(df_session *s, int l, const float *x, int32_t *ids) {
    df_model *m = s->m;
    df_layer *L = &m->layers[l];
    const df_hparams *h = &m->hp;
    if (!ws_streaming(m->ws) || !L->ffn_gate_inp || !L->ffn_norm || L->ffn_tid2eid) return 0; /* hash: needs the token */
    if (L->ffn_norm->streamed || L->ffn_gate_inp->streamed) return 0; /* would wait for that layer's dense weights */
    const float *fn = ws_fetch(m->ws, L->ffn_norm, NULL, 0);
    if (!fn) return 0;
    op_rmsnorm(s->ex_x, x, fn, h->n_embd, h->norm_eps);
    ws_release(m->ws, L->ffn_norm);
    float *p = s->router + (int64_t)(s->n_batch - 1) * h->n_expert; /* free: the choices are made (route) */
    if (df_matmul(s, L->ffn_gate_inp, s->ex_x, 1, p, h->n_expert, NULL, 0) != 0) return 0;
    if (df_add_bias(s, L->ffn_gate_inp_b, p, 1, h->n_expert, NULL, 0)) return 0;
    df_moe_probs(h, p);
    const float *bias = L->exp_probs_b ? ws_fetch(m->ws, L->exp_probs_b, NULL, 0) : NULL;
    if (L->exp_probs_b && !bias) return 0; /* only a guess: the demand read will report the error */
    float w[MAX_EXPERTS];
    df_moe_select(h, p, bias, ids, w);
    if (bias) ws_release(m->ws, L->exp_probs_b);
    return 1;
}

void df_moe_lookahead(df_session *s, int l, const float *x, int alone) {
    int32_t ids[MAX_EXPERTS];
    if (df_moe_guess(s, l, x, ids))
        ws_request_experts(s->m->ws, l, ids, s->m->hp.n_expert_used, alone ? WS_GUESS_ONE : WS_GUESS);
}

/* The next layer's likely experts, guessed from this layer's residual
 * (s->x, or the architecture's hint) for each of n rows: into guess (rows of
 * n_expert_used ids; returns how many rows) when the experts are shared out
 * over a cluster, so that every rank hears them, else asked of the store at
 * once (returns 0). They queue behind this layer's demand reads. Every row
 * of a generation step guesses (the router's rows are free again once the
 * choices are made); a long prompt chunk does not. */
static int guess_next(df_session *s, int l, int n, int32_t *guess) {
    const df_hparams *h = &s->m->hp;
    if (n > MAX_LOOKAHEAD_ROWS || l + 1 >= h->n_layer || !s->m->layers[l + 1].ffn_gate_inp) return 0;
    int rows = 0;
    for (int t = 0; t < n; t++) {
        const float *x = (s->moe_hint ? s->moe_hint : s->x) + (int64_t)t * h->n_embd;
        if (guess) rows += df_moe_guess(s, l + 1, x, guess + (int64_t)rows * h->n_expert_used);
        else df_moe_lookahead(s, l + 1, x, n == 1);
    }
    return rows;
}

/* Is expert e of layer l this process's to run? (All of them, alone.) */
static int mine(const df_model *m, int l, int e) { return !m->ep || m->ep->own[l * m->ep->n_expert + e]; }

int df_moe_run_owned(df_session *s, int l, const float *x, int n, const int32_t *guess, int ng, char *err,
                     size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int X = h->n_expert, K = h->n_expert_used;
    const int64_t E = L->ffn_gate_exps->ne[0]; /* the experts' width: n_embd, or the latent width */

    /* group this process's (token, slot) pairs by expert: counting sort */
    int count[MAX_EXPERTS + 1];
    memset(count, 0, sizeof(int) * (size_t)(X + 1));
    for (int i = 0; i < n * K; i++)
        if (mine(m, l, s->topk_id[i])) count[s->topk_id[i] + 1]++;
    for (int e = 0; e < X; e++) count[e + 1] += count[e];
    int fill[MAX_EXPERTS];
    memcpy(fill, count, sizeof(int) * (size_t)X);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < K; j++) {
            const int e = s->topk_id[t * K + j];
            if (!mine(m, l, e)) continue;
            const int at = fill[e]++;
            s->tok_of[at] = t;
            s->slot_of[at] = j;
        }

    /* ask the store for every selected expert at once (misses load in
     * parallel; it counts the uses of every one, reads only its own), then
     * run those already in memory while the rest arrive */
    int32_t uniq[MAX_EXPERTS];
    int nu = 0, nsel = 0;
    for (int e = 0; e < X; e++)
        if (count[e + 1] > count[e]) uniq[nu++] = e;
    if (m->ep) { /* the store counts every expert's uses, whoever runs it (the hot file is rank 0's) */
        int32_t all[MAX_EXPERTS];
        uint8_t seen[MAX_EXPERTS] = {0};
        for (int i = 0; i < n * K; i++)
            if (!seen[s->topk_id[i]]) seen[s->topk_id[i]] = 1, all[nsel++] = s->topk_id[i];
        ws_request_experts(m->ws, l, all, nsel, WS_DEMAND);
    } else {
        ws_request_experts(m->ws, l, uniq, nu, WS_DEMAND);
        nsel = nu;
    }
    m->n_moe_runs++;
    m->n_union_experts += (uint64_t)nsel;
    if (ng > 0) ws_request_experts(m->ws, l + 1, guess, ng * K, n == 1 ? WS_GUESS_ONE : WS_GUESS);
    else if (!m->ep) guess_next(s, l, n, NULL);
    if (n == 1 && nu > 0) {
        int slot[MAX_EXPERTS];
        for (int u = 0; u < nu; u++) slot[u] = s->slot_of[count[uniq[u]]];
        const int rc = run_experts_one_token(s, L, l, uniq, slot, nu, x, err, errlen);
        if (rc < 0) return -1;
        if (rc > 0) nu = 0; /* done: outputs are in ex_out by slot */
    }
    for (int pass = 0; pass < 2; pass++) {
        for (int u = 0; u < nu; u++) {
            const int e = uniq[u];
            if (e < 0) continue;
            if (pass == 0 && !ws_expert_ready(m->ws, l, e)) continue;
            uniq[u] = -1;
            const int lo = count[e], cnt = count[e + 1] - lo;
            for (int i = 0; i < cnt; i++) memcpy(s->ex_x + i * E, x + s->tok_of[lo + i] * E, sizeof(float) * (size_t)E);
            if (run_expert(s, L, e, cnt, err, errlen) != 0) return -1;
            for (int i = 0; i < cnt; i++)
                memcpy(s->ex_out + ((int64_t)s->tok_of[lo + i] * K + s->slot_of[lo + i]) * E, s->ex_y + i * E,
                       sizeof(float) * (size_t)E);
        }
    }
    return 0;
}

int df_ffn_moe_routed(df_session *s, int l, const float *xr, const float *x, int n, float *out, char *err,
                      size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int K = h->n_expert_used;
    const int64_t E = L->ffn_gate_exps->ne[0]; /* the experts' width: n_embd, or the latent width */
    if (route(s, L, xr, n, err, errlen) != 0) return -1;
    if (s->trace) trace(s, l, n);
    for (int t = 0; s->ties && t < n; t++) df_note_choice(s, s->pos + t, l, "router", s->topk_margin[t]); /* alone */
    if (m->ep) { /* a cluster: every rank hears the work, runs its share; rank 0 gathers (expar.h) */
        const int ng = guess_next(s, l, n, m->ep->guess);
        if (ep_run_send(m, l, n, s->topk_id, m->ep->guess, ng, x, (int)E, err, errlen) != 0) return -1;
        const int rc = df_moe_run_owned(s, l, x, n, m->ep->guess, ng, err, errlen);
        char e2[256]; /* the others' rows are taken even when ours failed: they must not be left waiting */
        if (ep_run_gather(m, l, n, s->topk_id, s->ex_out, (int)E, rc ? e2 : err, rc ? sizeof e2 : errlen) != 0 || rc)
            return -1;
    } else if (df_moe_run_owned(s, l, x, n, NULL, 0, err, errlen) != 0) {
        return -1;
    }
    /* weighted sum in slot order, so the result does not depend on which
     * expert happened to be in memory first, nor on which rank ran it */
    for (int t = 0; t < n; t++) {
        float *o = out + t * E;
        memset(o, 0, sizeof(float) * (size_t)E);
        for (int j = 0; j < K; j++) {
            const float w = s->topk_w[t * K + j];
            const float *y = s->ex_out + ((int64_t)t * K + j) * E;
            for (int64_t k = 0; k < E; k++) o[k] += w * y[k];
        }
    }
    return 0;
}

int df_ffn_moe_shared(df_session *s, int l, const float *x, int n, float *out, char *err, size_t errlen) {
    df_layer *L = &s->m->layers[l];
    const int64_t E = s->m->hp.n_embd;
    if (L->ffn_gate_shexp) {
        /* shared experts: a dense FFN on every token, sigmoid-gated when gate_inp_shexp is there */
        if (df_ffn_dense(s, L->ffn_gate_shexp, L->ffn_up_shexp, L->ffn_down_shexp, x, n, s->ex_y, err, errlen) != 0)
            return -1;
        float gate[1];
        for (int t = 0; t < n; t++) {
            float gv = 1.0f;
            if (L->ffn_gate_inp_shexp) {
                if (df_matmul(s, L->ffn_gate_inp_shexp, x + t * E, 1, gate, 1, err, errlen) != 0) return -1;
                gv = 1.0f / (1.0f + expf(-gate[0]));
            }
            for (int64_t k = 0; k < E; k++) out[t * E + k] += gv * s->ex_y[t * E + k];
        }
    }
    return 0;
}

int df_ffn_moe(df_session *s, int l, const float *x, int n, float *out, char *err, size_t errlen) {
    if (df_ffn_moe_routed(s, l, x, x, n, out, err, errlen) != 0) return -1;
    return df_ffn_moe_shared(s, l, x, n, out, err, errlen);
}

int df_ffn_block(df_session *s, int l, int n, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t E = h->n_embd;
    if (df_norm_rows(s, L->ffn_norm, s->x, n, E, E, s->xb, err, errlen)) return -1;
    if (L->ffn_gate_inp ? df_ffn_moe(s, l, s->xb, n, s->xb2, err, errlen)
                        : df_ffn_dense(s, L->ffn_gate, L->ffn_up, L->ffn_down, s->xb, n, s->xb2, err, errlen))
        return -1;
    for (int64_t i = 0; i < (int64_t)n * E; i++) s->x[i] += s->xb2[i];
    return 0;
}
