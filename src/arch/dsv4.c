/*
 * dsv4.c - DeepSeek V4's compressed attention (dsv4.h), as llama.cpp's
 * src/models/deepseek4.cpp and llama-kv-cache-dsv4.cpp compute it.
 *
 * A layer with compress ratio r (4 or 128) keeps, besides its window of raw
 * keys, one compressed key per complete block of r positions. Every position
 * p gives its compressor a row kv = Wkv x and a score = Wgate x + ape[p % r]
 * (coff * head_dim each; coff 2 for r = 4). When p completes block
 * b = p / r (starting at p0 = b r):
 *   r = 128: per dimension i, softmax over the block's 128 scores, and the
 *            weighted sum of their kv values;
 *   r = 4:   the same over 8 entries: the previous block's first halves
 *            (kv[0..hd), score[0..hd)) and this block's second halves
 *            (kv[hd..2hd)); block 0 has no previous one (weight 0);
 * then RMSNorm with the compressor's norm and RoPE on the last n_rot values
 * at position p0 (compress_rope_freq_base, the file's YaRN).
 * Ratio-4 layers run a second compressor of the same kind (ds4_idx_dim wide)
 * for the indexer's keys. A query at p sees the blocks complete by p
 * ((p + 1) / r of them): all of them for r = 128; for r = 4 the top_k by the
 * indexer's score
 *   s(b) = sum_h w_h relu(q_h . k_b),  q = (Wq_idx qr) with RoPE at p,
 *   w = (Wproj xn) / sqrt(ds4_idx_dim * ds4_idx_heads)
 * (llama.cpp rotates q and k by a Hadamard matrix: orthogonal, the same dot
 * products). Window keys and chosen compressed keys share one softmax with
 * the head's sink; a key is also its value.
 *
 * The compressor's last positions live in the session (cstate: 8 or 128
 * rows, position p in row p % rows; all three caches are items the layer
 * declares, df_dsv4_layer_mem), so blocks that span batches
 * complete exactly as in one pass. Rows are processed in order, one at a
 * time, so a batch longer than the state never overwrites a row it still
 * needs. In a batched step (own) each row uses its own session's memory.
 */
#include "dsv4.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bind.h"
#include "quant.h"
#include "util.h"

const df_dsv4_hp *df_dsv4(const df_model *m) { return m->fam_hp; }

int df_dsv4_hparams(df_model *m, df_dsv4_hp **out, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    int32_t *r = NULL;
    *out = NULL;
    if (df_hp_layers(m, "attention.compress_ratios", &r, 0, 128, err, errlen)) return -1;
    if (!r) return df_seterr(err, errlen, "%s: deepseek4 needs attention.compress_ratios", m->path);
    for (int l = 0; l < h->n_layer; l++)
        if (r[l] != 0 && r[l] != 4 && r[l] != 128) {
            const int bad = r[l];
            free(r);
            return df_seterr(err, errlen, "%s: attention.compress_ratios[%d] = %d (0, 4 or 128)", m->path, l, bad);
        }
    df_dsv4_hp *v4 = calloc(1, sizeof *v4 + sizeof(int32_t) * (size_t)h->n_layer);
    if (!v4) {
        free(r);
        return df_seterr(err, errlen, "%s: out of memory", m->path);
    }
    memcpy(v4->comp_ratio, r, sizeof(int32_t) * (size_t)h->n_layer);
    free(r);
    m->fam_hp = *out = v4; /* freed with the model */
    v4->rope_base_comp = h->rope_base;
    return df_hp_float(m, "attention.compress_rope_freq_base", &v4->rope_base_comp, 1.0f, 1e12f, err, errlen) ||
                   df_hp_int(m, "attention.indexer.head_count", &v4->idx_heads, 1, 4096, 1, err, errlen) ||
                   df_hp_int(m, "attention.indexer.key_length", &v4->idx_dim, 2, 65536, 1, err, errlen) ||
                   df_hp_int(m, "attention.indexer.top_k", &v4->idx_topk, 1, 1 << 24, 1, err, errlen)
               ? -1
               : 0;
}

/* The compressor state's rows (ratio 4 overlaps the previous block) and row width: kv, score [, indexer kv, score]. */
static int cstate_rows(const df_model *m, int l) {
    const int r = df_dsv4(m)->comp_ratio[l];
    return r == 4 ? 2 * r : r;
}

static int64_t cstate_width(const df_model *m, int l) {
    const df_dsv4_hp *v4 = df_dsv4(m);
    const int r = v4->comp_ratio[l];
    if (!r) return 0;
    const int64_t coff = r == 4 ? 2 : 1;
    return 2 * coff * m->hp.head_dim + (r == 4 ? 4 * (int64_t)v4->idx_dim : 0);
}

int df_dsv4_layer_mem(const df_model *m, int l, df_mem_decl *d) {
    const df_dsv4_hp *v4 = df_dsv4(m);
    const df_hparams *h = &m->hp;
    const int r = l < h->n_layer ? v4->comp_ratio[l] : 0;
    if (!r) return 0;
    int n = 0;
    d[n++] = (df_mem_decl){"compressed keys", DF_ROWS_BLOCK, r, h->head_dim, 0};
    if (r == 4) d[n++] = (df_mem_decl){"compressed indexer keys", DF_ROWS_BLOCK, r, v4->idx_dim, 0};
    d[n++] = (df_mem_decl){"compressor states", DF_ROWS_FIXED, cstate_rows(m, l), cstate_width(m, l), 0};
    return n;
}

/* Layer l's items in o (df_dsv4_layer_mem's order). */
static float *comp_keys(df_session *o, int l) { return df_mem_item(o, l, 0); }
static float *lid_keys(df_session *o, int l) { return df_mem_item(o, l, 1); }
static float *cstate(df_session *o, int l) { return df_mem_item(o, l, df_mem_n_items(o, l) - 1); }

void df_dsv4_scratch(const df_model *m, df_layout *lay) {
    const df_dsv4_hp *v4 = df_dsv4(m);
    const df_hparams *h = &m->hp;
    df_dsv4_fam *f = df_layout_fam(lay);
    const uint64_t B = (uint64_t)df_layout_batch(lay), F = sizeof(float), HC = (uint64_t)v4->hc_mult;
    const int64_t hcw = v4->hc_mult * (int64_t)h->n_embd, o_gd = (int64_t)h->n_head * h->head_dim / v4->o_groups;
    int64_t cw_max = 1; /* the widest compressor row */
    for (int l = 0; l < h->n_layer; l++)
        if (cstate_width(m, l) > cw_max) cw_max = cstate_width(m, l);
    df_layout_scratch(lay, &f->hc, B * (uint64_t)hcw * F);
    df_layout_scratch(lay, &f->hc_norm, B * (uint64_t)hcw * F);
    df_layout_scratch(lay, &f->hc_mixes, B * (2 + HC) * HC * F);
    df_layout_scratch(lay, &f->hc_mix, B * (HC + HC * HC) * F);
    df_layout_scratch(lay, &f->qr, B * (uint64_t)h->q_lora_rank * F);
    df_layout_scratch(lay, &f->o_grp, B * (uint64_t)o_gd * F);
    df_layout_scratch(lay, &f->o_low, B * (uint64_t)v4->o_groups * (uint64_t)v4->o_lora * F);
    df_layout_scratch(lay, &f->cmp, B * (uint64_t)cw_max * F);
    df_layout_scratch(lay, &f->lid_q, B * (uint64_t)v4->idx_heads * (uint64_t)v4->idx_dim * F);
    df_layout_scratch(lay, &f->lid_w, B * (uint64_t)v4->idx_heads * F);
    df_layout_wide(lay, hcw);   /* the mixers read all streams */
    df_layout_wide(lay, o_gd);  /* the output groups */
    df_layout_wide(lay, (int64_t)v4->o_groups * v4->o_lora);
    /* attend_row's scores, window keys and choice */
    df_layout_att(lay, 3 * (int64_t)df_layout_ctx(lay) + (int64_t)h->n_swa * (h->head_dim + 1) + 64);
}

int df_dsv4_bind_layer(df_model *m, int l, char *err, size_t errlen) {
    const df_dsv4_hp *v4 = df_dsv4(m);
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int r = v4->comp_ratio[l];
    if (!r) return 0;
    const int64_t E = h->n_embd, hd = h->head_dim, cw = (r == 4 ? 2 : 1) * hd, D = v4->idx_dim;
    if (df_bind(m, &V4L(L)->comp_wkv, "blk.%d.attn_compressor_kv.weight", l, 1, E, cw, 1, err, errlen) ||
        df_bind(m, &V4L(L)->comp_wgate, "blk.%d.attn_compressor_gate.weight", l, 1, E, cw, 1, err, errlen) ||
        df_bind(m, &V4L(L)->comp_ape, "blk.%d.attn_compressor_ape.weight", l, 1, cw, r, 1, err, errlen) ||
        df_bind(m, &V4L(L)->comp_norm, "blk.%d.attn_compressor_norm.weight", l, 1, hd, 1, 1, err, errlen))
        return -1;
    if (V4L(L)->comp_ape->type != DF_TYPE_F32)
        return df_seterr(err, errlen, "%s: blk.%d.attn_compressor_ape.weight must be f32", m->path, l);
    if (r != 4) return 0;
    if (df_bind_mat(m, &L->idx_proj, "blk.%d.indexer.proj.weight", l, 1, E, v4->idx_heads, err, errlen) ||
        df_bind(m, &L->idx_wq_b, "blk.%d.indexer.attn_q_b.weight", l, 1, h->q_lora_rank,
                (int64_t)v4->idx_heads * D, 1, err, errlen) ||
        df_bind(m, &V4L(L)->lid_wkv, "blk.%d.indexer_compressor_kv.weight", l, 1, E, 2 * D, 1, err, errlen) ||
        df_bind(m, &V4L(L)->lid_wgate, "blk.%d.indexer_compressor_gate.weight", l, 1, E, 2 * D, 1, err, errlen) ||
        df_bind(m, &V4L(L)->lid_ape, "blk.%d.indexer_compressor_ape.weight", l, 1, 2 * D, r, 1, err, errlen) ||
        df_bind(m, &V4L(L)->lid_norm, "blk.%d.indexer_compressor_norm.weight", l, 1, D, 1, 1, err, errlen))
        return -1;
    if (V4L(L)->lid_ape->type != DF_TYPE_F32)
        return df_seterr(err, errlen, "%s: blk.%d.indexer_compressor_ape.weight must be f32", m->path, l);
    return 0;
}

rope_params df_dsv4_rope(const df_session *s) {
    const df_dsv4_hp *v4 = df_dsv4(s->m);
    const df_hparams *h = &s->m->hp;
    rope_params rp = s->rope;
    rp.freq_base = v4->rope_base_comp;
    rp.freq_factors = NULL;
    rp.attn_factor = rp.ext_factor != 0.0f ? 1.0f / (1.0f + 0.1f * logf(1.0f / rp.freq_scale)) : 1.0f;
    rope_corr_dims(h->n_rot, h->n_ctx_orig, v4->rope_base_comp, h->yarn_beta_fast, h->yarn_beta_slow, rp.corr_dims);
    return rp;
}

/* RoPE at pos on the last n_rot of each of n_heads heads of dim values in x. */
static void rope_tail(const rope_params *rp, float *x, int n_heads, int dim, int64_t pos, float *rc) {
    rope_cache(rp, pos, rc);
    rope_apply(rp, rc, x + (dim - rp->n_dims), n_heads, dim);
}

/* One compressed key of dim values into out: the softmax-weighted sum, per
 * dimension, over the entries (kv, score) of the block, then norm and RoPE. */
static void compress_block(const df_session *s, const float *state, int rows, int64_t width, int64_t kv_off,
                           int64_t sc_off, int dim, int r, int overlap, int64_t p0, const float *norm,
                           const rope_params *rp, float *out, float *rc) {
    const int64_t half = overlap ? dim : 0; /* this block's entries read the second half */
    for (int i = 0; i < dim; i++) {
        float mx = -INFINITY;
        for (int pass = 0; pass < 2; pass++) {
            float sum = 0.0f, acc = 0.0f;
            for (int j = overlap ? -r : 0; j < r; j++) {
                const int64_t p = p0 + j;
                if (p < 0) continue; /* block 0 has no previous block */
                const float *row = state + (p % rows) * width;
                const int64_t o = j < 0 ? 0 : half;
                const float sc = row[sc_off + o + i];
                if (pass == 0) {
                    if (sc > mx) mx = sc;
                } else {
                    const float w = expf(sc - mx);
                    sum += w;
                    acc += w * row[kv_off + o + i];
                }
            }
            if (pass == 1) out[i] = acc / sum;
        }
    }
    op_rmsnorm(out, out, norm, dim, s->m->hp.norm_eps);
    rope_tail(rp, out, 1, dim, p0, rc);
}

/* Feed row t's compressor rows (the family's cmp row t, already projected) to session
 * o at position p; complete a block when p ends one. */
static void feed(df_session *s, df_session *o, df_layer *L, int l, int t, int64_t p, const float *ape,
                 const float *lape, const float *norm, const float *lnorm, const rope_params *rp, float *rc) {
    const df_dsv4_hp *v4 = df_dsv4(s->m);
    const df_hparams *h = &s->m->hp;
    const int r = v4->comp_ratio[l], rows = cstate_rows(s->m, l), ov = r == 4;
    const int64_t W = cstate_width(s->m, l), hd = h->head_dim, cw = (ov ? 2 : 1) * hd, D = v4->idx_dim;
    float *st = cstate(o, l), *row = st + (p % rows) * W;
    memcpy(row, ((df_dsv4_fam *)s->fam)->cmp + (int64_t)t * W, sizeof(float) * (size_t)W);
    for (int64_t i = 0; i < cw; i++) row[cw + i] += ape[(p % r) * cw + i];
    if (ov)
        for (int64_t i = 0; i < 2 * D; i++) row[2 * cw + 2 * D + i] += lape[(p % r) * 2 * D + i];
    if ((p + 1) % r) return;
    const int64_t b = p / r, p0 = p + 1 - r;
    compress_block(s, st, rows, W, 0, cw, (int)hd, r, ov, p0, norm, rp, comp_keys(o, l) + b * hd, rc);
    if (ov)
        compress_block(s, st, rows, W, 2 * cw, 2 * cw + 2 * D, (int)D, r, 1, p0, lnorm, rp,
                       lid_keys(o, l) + b * D, rc);
    (void)L;
}

/* The compressor projections of n rows of xn into the family's cmp (rows of cstate_width). */
static int project(df_session *s, df_layer *L, int l, int n, const float *xn, char *err, size_t errlen) {
    const df_dsv4_hp *v4 = df_dsv4(s->m);
    const df_hparams *h = &s->m->hp;
    const int ov = v4->comp_ratio[l] == 4;
    const int64_t W = cstate_width(s->m, l), cw = (ov ? 2 : 1) * (int64_t)h->head_dim, D = v4->idx_dim;
    ws_tensor *const w[4] = {V4L(L)->comp_wkv, V4L(L)->comp_wgate, V4L(L)->lid_wkv, V4L(L)->lid_wgate};
    float *const c = ((df_dsv4_fam *)s->fam)->cmp, *const y[4] = {c, c + cw, c + 2 * cw, c + 2 * cw + 2 * D};
    const int64_t ld[4] = {W, W, W, W};
    return df_matmul_n(s, ov ? 4 : 2, w, xn, n, y, ld, err, errlen);
}

/* Query row t (position p, session o) of compressed layer l: scores over the
 * window and the chosen compressed keys, softmax with the sink, sum into out. */
static void attend_row(df_session *s, df_session *o, int l, int t, int64_t p, const float *sinks, const float *lq,
                       const float *lw, float *out) {
    const df_dsv4_hp *v4 = df_dsv4(s->m);
    const df_hparams *h = &s->m->hp;
    const int r = v4->comp_ratio[l], H = h->n_head, hd = h->head_dim;
    const int64_t nvis = (p + 1) / r, lo = p - h->n_swa + 1 > 0 ? p - h->n_swa + 1 : 0, nwin = p - lo + 1;
    float *sc = s->att, *kbuf = s->att + nwin + nvis; /* scores, then converted window keys */
    int32_t *sel = (int32_t *)(kbuf + nwin * hd);
    int64_t nsel = nvis;
    const float *comp = comp_keys(o, l);
    if (r == 4 && nvis > v4->idx_topk) { /* the indexer's choice */
        const int Hi = v4->idx_heads, D = v4->idx_dim;
        const float *lid = lid_keys(o, l);
        for (int64_t b = 0; b < nvis; b++) {
            float acc = 0.0f;
            for (int hh = 0; hh < Hi; hh++) {
                float d = 0.0f;
                for (int i = 0; i < D; i++) d += lq[hh * D + i] * lid[b * D + i];
                acc += lw[hh] * (d > 0.0f ? d : 0.0f);
            }
            sc[b] = acc;
        }
        op_top_k_set(sc, (int)nvis, v4->idx_topk, sel); /* ties as llama.cpp settles them (ops.c) */
        if (o->ties) df_note_choice(o, p, l, "indexer", op_top_k_margin(sc, (int)nvis, v4->idx_topk, sel));
        nsel = v4->idx_topk;
    } else {
        for (int64_t b = 0; b < nvis; b++) sel[b] = (int32_t)b;
    }
    const quant_traits *qt = quant_traits_get(df_mem_kv_type(o));
    for (int64_t j = 0; j < nwin; j++) qt->to_float(df_mem_k_row(o, l, (int)(lo + j)), kbuf + j * hd, hd);
    for (int hh = 0; hh < H; hh++) {
        const float *q = s->q + ((int64_t)t * H + hh) * hd;
        float mx = sinks[hh];
        for (int64_t j = 0; j < nwin + nsel; j++) {
            const float *k = j < nwin ? kbuf + j * hd : comp + (int64_t)sel[j - nwin] * hd;
            float d = 0.0f;
            for (int i = 0; i < hd; i++) d += q[i] * k[i];
            sc[j] = d * h->kq_scale;
            if (sc[j] > mx) mx = sc[j];
        }
        float sum = expf(sinks[hh] - mx);
        float *ot = out + ((int64_t)t * H + hh) * hd;
        memset(ot, 0, sizeof(float) * (size_t)hd);
        for (int64_t j = 0; j < nwin + nsel; j++) {
            const float w = expf(sc[j] - mx);
            const float *k = j < nwin ? kbuf + j * hd : comp + (int64_t)sel[j - nwin] * hd;
            sum += w;
            for (int i = 0; i < hd; i++) ot[i] += w * k[i];
        }
        for (int i = 0; i < hd; i++) ot[i] /= sum;
    }
}

int df_dsv4_attend(df_session *s, df_session *const *own, int l, int n, const float *xn, const float *qr,
                   const rope_params *rp, const float *sinks, float *out, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_dsv4_hp *v4 = df_dsv4(m);
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int r = v4->comp_ratio[l];
    const int Hi = v4->idx_heads, D = v4->idx_dim;
    const df_dsv4_fam *f = s->fam;
    float rc[2048];
    if (h->n_rot > 2048) return df_seterr(err, errlen, "internal: rope dimension too large");
    if (project(s, L, l, n, xn, err, errlen)) return -1;
    if (r == 4 && (df_matmul(s, L->idx_wq_b, qr, n, f->lid_q, (int64_t)Hi * D, err, errlen) ||
                   df_matmul(s, L->idx_proj, xn, n, f->lid_w, Hi, err, errlen)))
        return -1;
    const float *ape = ws_fetch(m->ws, V4L(L)->comp_ape, err, errlen);
    const float *norm = ape ? ws_fetch(m->ws, V4L(L)->comp_norm, err, errlen) : NULL;
    const float *lape = norm && r == 4 ? ws_fetch(m->ws, V4L(L)->lid_ape, err, errlen) : NULL;
    const float *lnorm = lape ? ws_fetch(m->ws, V4L(L)->lid_norm, err, errlen) : NULL;
    int rc_ok = norm && (r != 4 || lnorm);
    for (int t = 0; t < n && rc_ok; t++) {
        df_session *o = own ? own[t] : s;
        const int64_t p = df_row_pos(s, own, t);
        feed(s, o, L, l, t, p, ape, lape, norm, lnorm, rp, rc);
    }
    const float scale = 1.0f / sqrtf((float)D * (float)Hi);
    for (int t = 0; t < n && rc_ok; t++) {
        df_session *o = own ? own[t] : s;
        const int64_t p = df_row_pos(s, own, t);
        float *lq = r == 4 ? f->lid_q + (int64_t)t * Hi * D : NULL, *lw = r == 4 ? f->lid_w + (int64_t)t * Hi : NULL;
        if (r == 4) {
            rope_tail(rp, lq, Hi, D, p, rc);
            for (int hh = 0; hh < Hi; hh++) lw[hh] *= scale;
        }
        attend_row(s, o, l, t, p, sinks, lq, lw, out);
    }
    if (lnorm) ws_release(m->ws, V4L(L)->lid_norm);
    if (lape) ws_release(m->ws, V4L(L)->lid_ape);
    if (norm) ws_release(m->ws, V4L(L)->comp_norm);
    if (ape) ws_release(m->ws, V4L(L)->comp_ape);
    return rc_ok ? 0 : -1;
}
