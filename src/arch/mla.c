/*
 * mla.c - multi-head latent attention (MLA), as DeepSeek V2/V3 and Kimi's
 * MLA layers use it (mla.h). Shared by arch_deepseek2.c and arch_kimi.c.
 *
 * MLA, as Deltafin computes it ("absorbed", like llama.cpp's MLA path):
 *   q        = Wq_b * rmsnorm(Wq_a * x)       (or Wq * x without a q LoRA)
 *              per head: [q_nope (qk_nope) | q_pe (n_rot)], RoPE on q_pe
 *   latent   = [rmsnorm(c) | rope(k_pe)] where [c | k_pe] = Wkv_a * x
 *              c has kv_lora_rank values; one latent per token, shared by
 *              all heads: this is all the session's cache holds for the layer.
 *   q_abs    = [Wk_b[h] * q_nope | q_pe]      (Wk_b[h]: kv_lora x qk_nope)
 *   score    = q_abs . latent[p] * kq_scale
 *   o_lat    = sum_p softmax(score)_p * c[p]
 *   out[h]   = Wv_b[h] * o_lat                (Wv_b[h]: v_head x kv_lora)
 * Older GGUFs carry one combined attn_kv_b (rows per head: qk_nope rows of
 * K, then v_head rows of V). Its V rows are used like Wv_b; its K rows are
 * applied transposed (q_abs[r] = sum_i q_nope[i] * K[i][r]), which is the
 * same product, so both layouts share the latent cache.
 *
 * With a DSA lightning indexer (deepseek32, glm-dsa; dsa.c) each query
 * attends only to the keys the indexer chose for it (attn.c's sel).
 */
#include "mla.h"

#include <string.h>

#include "bind.h"
#include "dsa.h"
#include "quant.h"
#include "util.h"

/* MLA sizes (shared with kimi's MLA layers). */
int df_mla_hparams(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    if (df_hp_int(m, "attention.kv_lora_rank", &h->kv_lora_rank, 1, 1 << 16, 1, err, errlen) ||
        df_hp_int(m, "attention.q_lora_rank", &h->q_lora_rank, 0, 1 << 16, 0, err, errlen))
        return -1;
    int kmla = 0, vmla = 0;
    if (df_hp_int(m, "attention.key_length_mla", &kmla, 0, 65536, 0, err, errlen) ||
        df_hp_int(m, "attention.value_length_mla", &vmla, 0, 65536, 0, err, errlen))
        return -1;
    if (!!kmla != !!vmla)
        return df_seterr(err, errlen, "%s: key_length_mla and value_length_mla must both be set", m->path);
    h->mla_split = kmla > 0;
    if (h->mla_split) {
        h->head_dim = kmla;
        h->head_dim_v = vmla;
    }
    h->qk_nope = h->head_dim - h->n_rot;
    if (h->qk_nope < 1)
        return df_seterr(err, errlen, "%s: head size %d leaves no non-RoPE part (rope dims %d)", m->path, h->head_dim,
                         h->n_rot);
    h->n_head_kv = 1; /* one latent per token */
    return 0;
}

/* Layer l's MLA tensors (q, with or without LoRA; kv_a; k_b/v_b or kv_b; output). */
int df_mla_bind_layer(df_model *m, int l, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t E = h->n_embd, H = h->n_head, hd = h->head_dim, hv = h->head_dim_v, R = h->kv_lora_rank;
    if (df_bind(m, &L->kv_a_norm, "blk.%d.attn_kv_a_norm.weight", l, 1, R, 1, 1, err, errlen) ||
        df_bind(m, &L->wkv_a_mqa, "blk.%d.attn_kv_a_mqa.weight", l, 1, E, R + h->n_rot, 1, err, errlen) ||
        df_bind(m, &L->wo, "blk.%d.attn_output.weight", l, 1, H * hv, E, 1, err, errlen))
        return -1;
    if (h->q_lora_rank > 0) {
        if (df_bind(m, &L->wq_a, "blk.%d.attn_q_a.weight", l, 1, E, h->q_lora_rank, 1, err, errlen) ||
            df_bind(m, &L->q_a_norm, "blk.%d.attn_q_a_norm.weight", l, 1, h->q_lora_rank, 1, 1, err, errlen) ||
            df_bind(m, &L->wq_b, "blk.%d.attn_q_b.weight", l, 1, h->q_lora_rank, H * hd, 1, err, errlen))
            return -1;
    } else if (df_bind(m, &L->wq, "blk.%d.attn_q.weight", l, 1, E, H * hd, 1, err, errlen)) {
        return -1;
    }
    if (h->mla_split) {
        if (df_bind(m, &L->wk_b, "blk.%d.attn_k_b.weight", l, 1, h->qk_nope, R, H, err, errlen) ||
            df_bind(m, &L->wv_b, "blk.%d.attn_v_b.weight", l, 1, R, hv, H, err, errlen))
            return -1;
    } else if (df_bind(m, &L->wkv_b, "blk.%d.attn_kv_b.weight", l, 1, R, H * (h->qk_nope + hv), 1, err, errlen)) {
        return -1;
    }
    return 0;
}

/* Work shared by the per-head helpers below. */
typedef struct {
    df_session *s;
    df_layer *L;
    int layer, n;
    const uint8_t *kv_b; /* attn_kv_b's bytes as ws_fetch gave them (a streamed layer's are in its buffer) */
} mla_job;

/* Combined attn_kv_b: q_abs[t][h][r] = sum_i q_nope[t][h][i] * K_h[i][r],
 * dequantizing each K row once for all tokens. Threads split the heads. */
static void absorb_combined(void *arg, int ith, int nth) {
    mla_job *j = arg;
    df_session *s = j->s;
    const df_hparams *h = &s->m->hp;
    const ws_tensor *w = j->L->wkv_b;
    const quant_traits *q = quant_traits_get(w->type);
    const int R = h->kv_lora_rank, nope = h->qk_nope, stride = nope + h->head_dim_v;
    float *row = s->att + (int64_t)ith * s->att_stride; /* att_stride >= kv_lora_rank */
    long lo, hi;
    tp_range(h->n_head, ith, nth, &lo, &hi);
    for (long hh = lo; hh < hi; hh++) {
        for (int t = 0; t < j->n; t++) memset(s->q_abs + ((int64_t)t * h->n_head + hh) * s->kv_dim_k, 0, sizeof(float) * (size_t)R);
        for (int i = 0; i < nope; i++) {
            q->to_float(j->kv_b + (size_t)(hh * stride + i) * w->row_bytes, row, R);
            for (int t = 0; t < j->n; t++) {
                const float qv = s->q[(int64_t)t * h->n_head * h->head_dim + hh * h->head_dim + i];
                float *dst = s->q_abs + ((int64_t)t * h->n_head + hh) * s->kv_dim_k;
                for (int r = 0; r < R; r++) dst[r] += qv * row[r];
            }
        }
    }
}

/* Row t's attention in latent space: every head reads the same latent rows
 * of session own's layer l (attn.c), own's scratch. */
static void latent_attention(df_session *s, df_session *own, int l, int t, int n_tok) {
    const df_hparams *h = &s->m->hp;
    const int64_t H = h->n_head, R = h->kv_lora_rank, D = s->kv_dim_k;
    df_attn_desc ad;
    df_mem_attn_view(own, l, &ad); /* one latent row per position: key, and its first R values the value */
    ad.n_head = (int)H;
    ad.n_head_kv = 1;
    ad.hd = (int)D;
    ad.hdv = (int)R;
    ad.q = s->q_abs + t * H * D;
    ad.q_tok = H * D;
    ad.q_head = D;
    ad.out = s->o_lat + t * H * R;
    ad.o_tok = H * R;
    ad.o_head = R;
    ad.scale = h->kq_scale;
    ad.n_tok = n_tok;
    ad.window = 0;
    ad.sinks = NULL;
    const df_dsa_hp *dsa = df_dsa(s->m);
    ad.sel = dsa ? df_dsa_chosen(s, t) : NULL; /* DSA: only the keys the indexer chose */
    ad.sel_k = dsa ? dsa->top_k : 0;
    df_attention_run(s->m->pool, own->att, own->att_stride, &ad);
}

int df_mla_attention(df_session *s, df_session *const *own, int l, int n, int rope, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t H = h->n_head, hd = h->head_dim, hv = h->head_dim_v, R = h->kv_lora_rank;
    const int64_t D = s->kv_dim_k, nope = h->qk_nope;
    /* queries */
    if (L->wq_a) {
        const int64_t QL = h->q_lora_rank;
        if (df_matmul(s, L->wq_a, s->xb, n, s->mla_tmp, QL, err, errlen)) return -1;
        if (df_norm_rows(s, L->q_a_norm, s->mla_tmp, n, QL, QL, s->mla_tmp, err, errlen) ||
            df_matmul(s, L->wq_b, s->mla_tmp, n, s->q, H * hd, err, errlen)) return -1;
    } else if (df_matmul(s, L->wq, s->xb, n, s->q, H * hd, err, errlen)) {
        return -1;
    }
    /* DSA (deepseek32, glm-dsa): the indexer reads the normed q LoRA, still in mla_tmp */
    if (df_dsa(m) && df_dsa_select(s, own, l, n, s->mla_tmp, err, errlen)) return -1;
    /* latents: [rmsnorm(c) | rope(k_pe)] */
    if (df_matmul(s, L->wkv_a_mqa, s->xb, n, s->lat, D, err, errlen)) return -1;
    if (df_norm_rows(s, L->kv_a_norm, s->lat, n, R, D, s->lat, err, errlen)) return -1;
    for (int t = 0; rope && t < n; t++) { /* NoPE: k_pe and q_pe are used as they are */
        float *lt = s->lat + t * D;
        const float *rc = s->rope_cache + (int64_t)t * h->n_rot;
        rope_apply(&s->rope, rc, lt + R, 1, h->n_rot);
        for (int64_t hh = 0; hh < H; hh++) rope_apply(&s->rope, rc, s->q + t * H * hd + hh * hd + nope, 1, h->n_rot);
    }
    if (!own) df_mem_store(s, l, n, s->lat, NULL);
    for (int t = 0, r; own && t < n; t += r) { /* run by run: each session's rows at its own position */
        r = df_row_run(own, t, n);
        df_mem_store(own[t], l, r, s->lat + t * D, NULL);
    }
    /* absorbed queries: [Wk_b[h] * q_nope | q_pe] */
    mla_job job = {s, L, l, n, NULL};
    if (L->wk_b) {
        const uint8_t *wk = ws_fetch_mm(m->ws, L->wk_b, err, errlen); /* a head a slice: packed, if held so */
        if (!wk) return -1;
        int rc = mm_mul_grouped(m->pool, L->wk_b->type, wk, L->wk_b->packed, R * L->wk_b->row_bytes, (int)H, nope, R,
                                s->q, hd, H * hd, n, s->q_abs, D, H * D, s->mla_tmp, &s->mm);
        ws_release(m->ws, L->wk_b);
        if (rc) return df_seterr(err, errlen, "internal: MLA scratch too small");
    } else {
        if (!(job.kv_b = ws_fetch(m->ws, L->wkv_b, err, errlen))) return -1;
        tp_run(m->pool, absorb_combined, &job);
        ws_release(m->ws, L->wkv_b);
    }
    for (int t = 0; t < n; t++)
        for (int64_t hh = 0; hh < H; hh++)
            memcpy(s->q_abs + (t * H + hh) * D + R, s->q + t * H * hd + hh * hd + nope, sizeof(float) * (size_t)h->n_rot);
    if (!own) latent_attention(s, s, l, 0, n);
    for (int t = 0, r; own && t < n; t += r) { /* each run against its own session's latents */
        r = df_row_run(own, t, n);
        latent_attention(s, own[t], l, t, r);
    }
    /* back from latent space: out[h] = Wv[h] * o_lat[h] (attn_v_b: a head a slice, packed if held so; the
     * combined attn_kv_b's V rows are part of a slice: the file's layout) */
    ws_tensor *wv = L->wv_b ? L->wv_b : L->wkv_b;
    const uint8_t *vb = L->wv_b ? ws_fetch_mm(m->ws, wv, err, errlen) : ws_fetch(m->ws, wv, err, errlen);
    if (!vb) return -1;
    size_t stride;
    if (L->wv_b) {
        stride = (size_t)hv * wv->row_bytes;
    } else {
        stride = (size_t)(nope + hv) * wv->row_bytes;
        vb += (size_t)nope * wv->row_bytes; /* V rows follow the head's K rows */
    }
    int rc = mm_mul_grouped(m->pool, wv->type, vb, L->wv_b && wv->packed, stride, (int)H, R, hv, s->o_lat, R, H * R, n,
                            s->xb, hv, H * hv, s->mla_tmp, &s->mm);
    ws_release(m->ws, wv);
    if (rc) return df_seterr(err, errlen, "internal: MLA scratch too small");
    return 0;
}

