/*
 * session.c - sessions: their sizes, their buffers, and the per-layer memory
 * they own (session.h). The one file that knows how a KV cache, an MLA
 * latent cache or a recurrent state is laid out; forward passes reach it
 * through df_mem_*.
 *
 * DESIGN
 * One size table (session_layout) lists every buffer of a session with its
 * size; it serves both the allocation and the memory planner's estimate
 * (df_session_split_bytes), so the two cannot disagree. Attention layers share one
 * block of n_ctx rows per layer for keys and one for values (an MLA layer
 * keeps one latent row per position and no values); recurrent layers share
 * one block of fixed-size states. The per-layer descriptors point into
 * those blocks. What a family declares besides (df_arch.layer_mem: items
 * of rows by position, by block or fixed) lies in one more block (items),
 * each layer's items in the order declared; its scratch hook's buffers
 * join the scratch list after session.c's own. A pipeline's stage
 * (--split layers, pipe.h) keeps the memory of its own layers only (held):
 * another rank's layers have kind 0 and no rows here, and the size table,
 * and so the stage's budget, counts only its own.
 *
 * Positions: rows of positions < pos hold the sequence seen so far; a
 * decode writes the rows of its new positions (df_mem_store) before
 * attending over them and advances pos when its forward pass completes.
 * Truncating only moves pos back; a recurrent state cannot be rewound, so
 * it can only be cleared (pos = 0), except within a speculative pass:
 *
 * Rollback (df_rec_mark, spec.c). A session opened with spec_k_max > 0 of a
 * model with recurrent layers also keeps, in the same size table (so the
 * planner and a budget count it), a copy of every recurrent layer's conv
 * window and delta-rule state and a journal of rb_rows = min(spec_k_max + 1,
 * n_batch) rows per recurrent layer: each row's short-conv inputs and the
 * delta rule's k, v, decay and beta (1/20 to 1/36 of a layer's state at
 * the published models' shapes).
 * df_rec_mark takes the copy at pos; the recurrences, run through
 * df_rec_conv / df_rec_delta, journal every row decoded after it. A
 * truncation back to p >= the mark restores the copy and replays rows
 * [mark, p): the conv window is shifted by the same copies dn_short_conv
 * makes, and dn_gated_delta runs on the journaled k, v, decay and beta one
 * row a call (a head's state never depends on the query, nor on how heads
 * are spread over threads), so the state is bit for bit the one a session
 * that never saw the rejected rows has. The alternatives cost more: a copy
 * of the state per row needs (k + 1) states of memory and copies per pass;
 * re-running the kept rows through the model reads the weights again (from
 * disk under a budget). The mark survives its rollback (its first rows still
 * hold) and is dropped by a reset, a snapshot load, a failed decode (the
 * state is then broken anyway) or rows beyond the journal; without a mark
 * the old refusal stands, so the prompt cache and chat's prefix reuse keep
 * their behaviour.
 */
#include "session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "outfile.h"
#include "quant.h"
#include "util.h"

#define DEFAULT_CTX_CAP 4096

typedef struct layer_mem {
    int kind;
    uint8_t *k, *v;        /* KV: n_ctx rows of kv_dim_k / kv_dim_v; LATENT: k only (one latent per position) */
    int ring;              /* KV of a sliding-window layer: this many rows, position p in row p % ring (0: n_ctx rows) */
    float *conv;           /* RECURRENT: short-conv states, (3 [q, k, v], d_inner, d_conv - 1) */
    float *state;          /* RECURRENT: delta-rule state, (n_head, head_dim [key], head_dim [value]) */
    int n_item;            /* the items its family declared (df_arch.layer_mem), their rows */
    df_mem_decl item[DF_MEM_ITEMS];
    uint8_t *item_rows[DF_MEM_ITEMS];
    float *rb_conv, *rb_state; /* RECURRENT with rollback room: conv and state at the mark */
    float *rb_in;          /* and the journal: rb_rows rows of df_rec_row_floats (conv in, k, v, g, beta) */
} layer_mem;

struct df_mem {
    int kv_type;            /* DF_TYPE_F32 or DF_TYPE_F16 */
    size_t kv_elt;          /* bytes per cached element (4 or 2) */
    int64_t kv_dim_k, kv_dim_v;
    size_t k_head, v_head;  /* bytes between KV heads in a row (0: a latent row serves every head) */
    layer_mem *layer;       /* (n_layer + n_layer_mtp: the MTP block's KV or latent last) pointing into the blocks below */
    uint8_t *k_cache;       /* (attention layers, n_ctx, kv_dim_k) */
    uint8_t *v_cache;       /* (KV layers, n_ctx, kv_dim_v) */
    float *rec_conv;        /* (recurrent layers, df_rec_conv_floats) */
    float *rec_state;       /* (recurrent layers, df_rec_state_floats) */
    uint8_t *items;         /* the declared items of every layer, each 64-byte aligned (item_bytes) */
    /* rollback of recurrent state (df_rec_mark): rb_rows rows per recurrent layer (0: no room) */
    int rb_rows;
    int n_rec;              /* the recurrent layers it keeps (every one, or its stage's: held) */
    float *rb_conv, *rb_state; /* (recurrent layers, conv / state floats): the states at the mark */
    float *rb_in;           /* (recurrent layers, rb_rows, df_rec_row_floats): the rows decoded since */
    float *rb_out;          /* (kda_n_head * kda_head_dim) the replay's output row, discarded (not scratch: a
                             * truncation runs outside any decode) */
    int rb_pos;             /* the mark's position (-1: none) */
    dn_shape rb_sh;         /* the delta rule's shape as the forward pass gave it (for the replay) */
};

df_session_params df_session_default_params(void) {
    df_session_params p = {.n_ctx = 0, .n_batch = 512, .kv_type = DF_KV_F16, .abort_cb = NULL, .abort_ctx = NULL,
                           .spec_k_max = 0};
    return p;
}

int64_t df_rec_conv_floats(const df_hparams *h) {
    return (int64_t)(h->ssm_d_conv - 1) * h->ssm_conv_ch;
}

int64_t df_rec_state_floats(const df_hparams *h) { return (int64_t)h->kda_n_head * h->kda_head_dim * h->kda_head_dim; }

/* A journal row's parts: conv inputs, k, v, decay g, beta (offsets in floats). */
typedef struct {
    int64_t conv, k, v, g, beta, total;
} rec_row;

static rec_row rec_row_layout(const df_hparams *h) {
    const int64_t hd = h->kda_head_dim, V = (int64_t)h->kda_n_head * hd;
    rec_row r;
    r.conv = 0;
    r.k = h->ssm_conv_ch;
    r.v = r.k + (int64_t)h->kda_n_head_k * hd;
    r.g = r.v + V;
    r.beta = r.g + (h->gdn ? h->kda_n_head : V); /* one decay per head (gdn) or per key channel (KDA) */
    r.total = r.beta + h->kda_n_head;
    return r;
}

int64_t df_rec_row_floats(const df_hparams *h) { return rec_row_layout(h).total; }

/* Rows of rollback room for spec_k_max guesses a pass: the pass's k + 1 rows
 * (a batch at most); 0 without recurrent layers. */
static int rec_rows_for(const df_hparams *h, int spec_k_max, int n_batch) {
    if (h->n_layer_recurrent <= 0 || spec_k_max <= 0) return 0;
    const int64_t rows = (int64_t)spec_k_max + 1;
    return rows < n_batch ? (int)rows : n_batch;
}

int df_kv_ring(const df_hparams *h, int n_ctx, int n_batch) {
    if (!h->swa || h->n_swa <= 0) return 0;
    const int64_t need = ((int64_t)h->n_swa + n_batch - 1 + 63) / 64 * 64; /* the window and a batch's new keys */
    return need < n_ctx ? (int)need : 0;
}

/* Rows of layer l's cache row for position pos. */
static int64_t mem_row(const df_session *s, int l, int64_t pos) {
    const int ring = s->mem->layer[l].ring;
    return ring ? pos % ring : pos;
}

/* Does a session of m keep layer l's memory? Alone, every layer's; a
 * pipeline's stage only its own layers' (model.h stage_*), and the MTP block
 * (never run split) on rank 0. */
static int held(const df_model *m, int l) {
    if (!m->stage_hi) return 1;
    return l < m->hp.n_layer ? l >= m->stage_lo && l < m->stage_hi : m->stage_outputs;
}

static int is_recurrent(const df_hparams *h, int l) { return h->recurrent && h->recurrent[l]; }

/* ---- what a family declares (df_arch.layer_mem, df_arch.scratch) ---- */

/* The items layer l of m keeps, into d; their number. */
static int layer_items(const df_model *m, int l, df_mem_decl *d) {
    const int n = m->arch && m->arch->layer_mem ? m->arch->layer_mem(m, l, d) : 0;
    return n < 0 ? 0 : n > DF_MEM_ITEMS ? DF_MEM_ITEMS : n;
}

/* Rows of an item for positions 0..pos-1. */
static uint64_t decl_rows(const df_mem_decl *d, int64_t pos) {
    if (d->per <= 0 && d->rule != DF_ROWS_POS) return 0;
    if (d->rule == DF_ROWS_POS) return (uint64_t)pos;
    if (d->rule == DF_ROWS_BLOCK) return (uint64_t)((pos + d->per - 1) / d->per);
    return (uint64_t)d->per;
}

static uint64_t decl_row_bytes(const df_mem_decl *d, size_t kv_elt) {
    return (uint64_t)d->row_elts * (d->kv_type ? kv_elt : sizeof(float));
}

/* An item's place in the items block: its rows for n_ctx positions, rounded up to 64 bytes. */
static uint64_t item_bytes(const df_mem_decl *d, int64_t n_ctx, size_t kv_elt) {
    return (decl_rows(d, n_ctx) * decl_row_bytes(d, kv_elt) + 63) / 64 * 64;
}

struct df_layout {
    const df_model *m;
    int n_ctx, n_batch;
    void *fam;
    int64_t wide, att;  /* what the family asked of the shared matmul and attention scratch */
    int n, overflow;    /* its scratch buffers */
    void **dst[DF_SCRATCH_MAX];
    uint64_t bytes[DF_SCRATCH_MAX];
};

int df_layout_ctx(const df_layout *lay) { return lay->n_ctx; }
int df_layout_batch(const df_layout *lay) { return lay->n_batch; }
void *df_layout_fam(df_layout *lay) { return lay->fam; }

void df_layout_scratch(df_layout *lay, void *field, uint64_t bytes) {
    if (lay->n == DF_SCRATCH_MAX) {
        lay->overflow = 1;
        return;
    }
    lay->dst[lay->n] = field;
    lay->bytes[lay->n++] = bytes > 64 ? bytes : 64;
}

void df_layout_wide(df_layout *lay, int64_t floats) {
    if (floats > lay->wide) lay->wide = floats;
}

void df_layout_att(df_layout *lay, int64_t floats) {
    if (floats > lay->att) lay->att = floats;
}

/* ---- the size table ---- */

typedef struct {
    void **dst;
    uint64_t bytes;
} alloc_item;

#define MAX_ITEMS DF_SESSION_ITEMS

/* Fill s's sizes (n_ctx, n_batch, KV dims, s->mem's element type) and the
 * list of its buffers; s->mem must point to a df_mem. Items [0, *n_own) are
 * the session's own (its per-layer memory, its logits); the rest is scratch,
 * shared by the model's sessions (df_session_bind_scratch): the same items
 * in the same order for every session of a model, only their sizes differ. */
static int session_layout(const df_model *m, const df_session_params *p, df_session *s, alloc_item *it, int *n_items,
                          int *n_own, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    df_mem *mem = s->mem;
    s->n_ctx = p->n_ctx > 0 ? p->n_ctx : (h->n_ctx_train < DEFAULT_CTX_CAP ? h->n_ctx_train : DEFAULT_CTX_CAP);
    if (s->n_ctx > (1 << 24)) return df_seterr(err, errlen, "context length %d is too large", p->n_ctx);
    s->n_batch = p->n_batch > 0 ? p->n_batch : 512;
    if (s->n_batch > s->n_ctx) s->n_batch = s->n_ctx;
    df_layout lay = {.m = m, .n_ctx = s->n_ctx, .n_batch = s->n_batch, .fam = s->fam};
    if (m->arch && m->arch->scratch) m->arch->scratch(m, &lay);
    if (lay.overflow) return df_seterr(err, errlen, "internal: more scratch buffers than DF_SCRATCH_MAX");
    mem->kv_type = p->kv_type == DF_KV_F32 ? DF_TYPE_F32 : DF_TYPE_F16;
    mem->kv_elt = mem->kv_type == DF_TYPE_F32 ? 4 : 2;
    /* per-layer memory: attention layers cache n_ctx positions (keys and
     * values, or one MLA latent), recurrent layers a fixed-size state */
    int64_t n_rec = 0, n_att = 0; /* the layers it keeps memory for, each kind */
    for (int l = 0; l < h->n_layer + h->n_layer_mtp; l++)
        if (held(m, l)) *(is_recurrent(h, l) ? &n_rec : &n_att) += 1;
    mem->n_rec = (int)n_rec;
    if (h->kv_lora_rank > 0) {
        /* MLA: the cache holds one latent per token (compressed kv + RoPE key), no values */
        s->kv_dim_k = (int64_t)h->kv_lora_rank + h->n_rot;
        s->kv_dim_v = 0;
        mem->k_head = mem->v_head = 0;
    } else {
        s->kv_dim_k = (int64_t)h->n_head_kv * h->head_dim;
        s->kv_dim_v = (int64_t)h->n_head_kv * h->head_dim_v;
        mem->k_head = (size_t)h->head_dim * mem->kv_elt;
        mem->v_head = (size_t)h->head_dim_v * mem->kv_elt;
    }
    mem->kv_dim_k = s->kv_dim_k;
    mem->kv_dim_v = s->kv_dim_v;
    const int64_t qdim = (int64_t)h->n_head * h->head_dim, vdim = (int64_t)h->n_head * h->head_dim_v;
    int64_t wide = h->n_embd;
    if (qdim > wide) wide = qdim;
    if (vdim > wide) wide = vdim;
    int64_t ff = h->n_ff;
    if (h->n_ff_exp > ff) ff = h->n_ff_exp;
    if (h->n_ff_shexp > ff) ff = h->n_ff_shexp;
    int64_t widest_in = wide > ff ? wide : ff;
    const int64_t d_inner = (int64_t)h->kda_n_head * h->kda_head_dim; /* KDA layers (0 without) */
    if (d_inner > widest_in) widest_in = d_inner;
    if (h->q_lora_rank > widest_in) widest_in = h->q_lora_rank;
    if (s->kv_dim_k > widest_in) widest_in = s->kv_dim_k;
    if (h->n_layer_mtp && 2 * (int64_t)h->n_embd > widest_in) widest_in = 2 * (int64_t)h->n_embd; /* eh_proj */
    if (lay.wide > widest_in) widest_in = lay.wide;
    s->att_stride = df_attn_scratch_floats(s->n_ctx);
    if (s->att_stride < h->kv_lora_rank) s->att_stride = h->kv_lora_rank; /* MLA's absorb borrows a latent-sized row */
    if (s->att_stride < lay.att) s->att_stride = lay.att;
    const int64_t B = s->n_batch, C = s->n_ctx;
    const uint64_t elt = mem->kv_elt;
    /* KV rows of all attention layers: n_ctx each, or a sliding-window
     * layer's ring (df_kv_ring) */
    const int64_t ring = df_kv_ring(h, s->n_ctx, s->n_batch);
    int64_t kv_rows = 0;
    for (int l = 0; l < h->n_layer + h->n_layer_mtp; l++) /* the MTP block has no window (header.c use_mtp) */
        if (held(m, l) && !is_recurrent(h, l)) kv_rows += ring && h->swa && h->swa[l] ? ring : C;
    int ni = 0;
#define ITEM(field, nbytes) (it[ni].dst = (void **)&(field), it[ni].bytes = (uint64_t)(nbytes), ni++)
#define FLOATS(field, rows, cols) ITEM(s->field, (uint64_t)(rows) * (uint64_t)(cols) * sizeof(float))
    ITEM(mem->layer, (uint64_t)(h->n_layer + h->n_layer_mtp) * sizeof(layer_mem));
    ITEM(mem->k_cache, n_att ? (uint64_t)kv_rows * (uint64_t)s->kv_dim_k * elt : 64);
    ITEM(mem->v_cache, s->kv_dim_v && n_att ? (uint64_t)kv_rows * (uint64_t)s->kv_dim_v * elt : 64);
    ITEM(mem->rec_conv, (uint64_t)(n_rec ? n_rec : 1) * (uint64_t)(n_rec ? df_rec_conv_floats(h) : 16) * sizeof(float));
    ITEM(mem->rec_state, (uint64_t)(n_rec ? n_rec : 1) * (uint64_t)(n_rec ? df_rec_state_floats(h) : 16) * sizeof(float));
    uint64_t items = 0; /* what the family declares */
    for (int l = 0; l < h->n_layer + h->n_layer_mtp; l++) {
        df_mem_decl d[DF_MEM_ITEMS];
        const int k = held(m, l) ? layer_items(m, l, d) : 0;
        for (int i = 0; i < k; i++) items += item_bytes(&d[i], C, elt);
    }
    ITEM(mem->items, items ? items : 64);
    /* rollback room for speculative decoding: a copy of the states, the rows' inputs */
    if (p->spec_k_max < 0 || p->spec_k_max > 1024)
        return df_seterr(err, errlen, "spec_k_max %d is out of range (0..1024)", p->spec_k_max);
    mem->rb_rows = n_rec ? rec_rows_for(h, p->spec_k_max, s->n_batch) : 0;
    if (mem->rb_rows) {
        ITEM(mem->rb_conv, (uint64_t)n_rec * (uint64_t)df_rec_conv_floats(h) * sizeof(float));
        ITEM(mem->rb_state, (uint64_t)n_rec * (uint64_t)df_rec_state_floats(h) * sizeof(float));
        ITEM(mem->rb_in, (uint64_t)n_rec * (uint64_t)mem->rb_rows * (uint64_t)df_rec_row_floats(h) * sizeof(float));
        ITEM(mem->rb_out, (uint64_t)d_inner * sizeof(float));
    }
    if (!m->stage_hi || m->stage_outputs) FLOATS(logits, B, h->n_vocab); /* read after a decode (df_session_logits) */
    else ITEM(s->logits, 64); /* a stage that hands its rows on computes no output */
    if (h->n_layer_mtp) {
        FLOATS(mtp_h, B + 1, h->n_embd);  /* mtp.c: the target's hidden rows (and the one before) */
        FLOATS(mtp_wait_h, B, h->n_embd); /* mtp.c: the rows whose upkeep waits (df_mtp_defer) */
        ITEM(s->mtp_wait_tok, (uint64_t)B * sizeof(int32_t));
    }
    *n_own = ni;
    /* scratch from here on */
    FLOATS(x, B, h->n_embd);
    FLOATS(xb, B, wide);
    FLOATS(xb2, B, h->n_embd);
    FLOATS(q, B, h->attn_q_gate ? 2 * qdim : qdim); /* with its gate (hp.attn_q_gate), split in place */
    FLOATS(k, B, s->kv_dim_k);
    FLOATS(v, B, s->kv_dim_v > 0 ? s->kv_dim_v : 1);
    FLOATS(hb, B, ff);
    FLOATS(hb2, B, ff);
    FLOATS(att, m->n_threads, s->att_stride);
    FLOATS(rope_cache, B, h->n_rot);
    ITEM(s->mm.buf, mm_scratch_bytes(widest_in, s->n_batch));
    if (h->n_expert > 0) {
        const int64_t nk = B * h->n_expert_used;
        FLOATS(router, B, h->n_expert);
        ITEM(s->topk_id, (uint64_t)nk * sizeof(int32_t));
        FLOATS(topk_w, nk, 1);
        FLOATS(topk_margin, B, 1);
        ITEM(s->tok_of, (uint64_t)nk * sizeof(int32_t));
        ITEM(s->slot_of, (uint64_t)nk * sizeof(int32_t));
        FLOATS(ex_x, B, h->n_embd);
        FLOATS(ex_y, B, h->n_embd);
        FLOATS(ex_h, B, ff);
        FLOATS(ex_h2, B, ff);
        FLOATS(ex_out, nk, h->n_embd);
    }
    if (h->kv_lora_rank > 0) {
        int64_t tw = h->kv_lora_rank;
        if (h->qk_nope > tw) tw = h->qk_nope;
        if (h->q_lora_rank > tw) tw = h->q_lora_rank;
        FLOATS(q_abs, B * h->n_head, s->kv_dim_k);
        FLOATS(lat, B, s->kv_dim_k);
        FLOATS(o_lat, B * h->n_head, h->kv_lora_rank);
        FLOATS(mla_tmp, B, tw);
    }
    if (n_rec > 0 && h->gdn) { /* gated delta net: the fused qkv (or a legacy row packing qkv and z), the output
                                  * gate z, per-head beta and decay; kda_v one token's legacy row */
        FLOATS(kda_q, B, h->ssm_conv_ch + d_inner);
        FLOATS(kda_v, 1, h->ssm_conv_ch + d_inner);
        FLOATS(kda_g, B, d_inner);
        FLOATS(kda_o, B, d_inner);
        FLOATS(kda_beta, B, h->kda_n_head);
        FLOATS(kda_lo, B, h->kda_n_head);
    } else if (n_rec > 0) {
        FLOATS(kda_q, B, d_inner);
        FLOATS(kda_k, B, d_inner);
        FLOATS(kda_v, B, d_inner);
        FLOATS(kda_g, B, d_inner);
        FLOATS(kda_o, B, d_inner);
        FLOATS(kda_beta, B, h->kda_n_head);
        FLOATS(kda_lo, B, h->kda_head_dim);
    }
    if (h->attn_out_gate) FLOATS(attn_gate, B, vdim);
    if (h->n_layer_mtp) { /* mtp.c: eh_proj's input, the head's output */
        FLOATS(mtp_in, B, 2 * (int64_t)h->n_embd);
        FLOATS(mtp_out, B, h->n_embd);
    }
    if (ni + lay.n > MAX_ITEMS) return df_seterr(err, errlen, "internal: more session buffers than DF_SESSION_ITEMS");
    for (int i = 0; i < lay.n; i++) ITEM(*lay.dst[i], lay.bytes[i]); /* the family's own scratch */
#undef FLOATS
#undef ITEM
    *n_items = ni;
    if (ni - *n_own > DF_SCRATCH_MAX) return df_seterr(err, errlen, "internal: more scratch buffers than DF_SCRATCH_MAX");
    for (int i = 0; i < ni; i++)
        if (it[i].bytes > ((uint64_t)1 << 46)) return df_seterr(err, errlen, "session buffers too large");
    return 0;
}

/* The layout a session of these parameters would have, allocating only
 * the family's small struct its scratch hook declares into (planning: its
 * ring, its bytes); dry_end frees that. */
typedef struct {
    df_session s;
    df_mem mem;
    alloc_item it[MAX_ITEMS];
    int n, n_own;
} dry;

static int dry_layout(const df_model *m, const df_session_params *p, dry *d) {
    memset(d, 0, sizeof *d);
    d->s.mem = &d->mem;
    if (m->arch && m->arch->fam_bytes && !(d->s.fam = calloc(1, m->arch->fam_bytes))) return -1;
    return session_layout(m, p, &d->s, d->it, &d->n, &d->n_own, NULL, 0);
}

static void dry_end(dry *d) { free(d->s.fam); }

int df_session_kv_ring(const df_model *m, const df_session_params *p) {
    dry d;
    const int ok = dry_layout(m, p, &d) == 0;
    dry_end(&d);
    return ok ? df_kv_ring(&m->hp, d.s.n_ctx, d.s.n_batch) : 0;
}

int df_session_split_bytes(const df_model *m, const df_session_params *p, uint64_t *own, uint64_t *scratch) {
    dry d;
    *own = *scratch = 0;
    const int rc = dry_layout(m, p, &d);
    dry_end(&d);
    if (rc != 0) return -1;
    *own = sizeof(df_session) + sizeof(df_mem) + (m->arch ? m->arch->fam_bytes : 0);
    for (int i = 0; i < d.n; i++) *(i < d.n_own ? own : scratch) += d.it[i].bytes + 64;
    *scratch += MM_NEXT_SLOTS * sizeof(mm_next); /* the idle prefetch's table (scratch_grow) */
    return 0;
}

/* Count a layer of bytes under name in the list (a new entry if it has none). */
static void mem_list_add(df_plan_mem *out, int *n, int max, const char *name, uint64_t bytes) {
    for (int i = 0; i < *n; i++)
        if (strcmp(out[i].name, name) == 0) {
            out[i].n_layers++;
            out[i].bytes += bytes;
            return;
        }
    if (*n == max) return;
    snprintf(out[*n].name, sizeof out[*n].name, "%s", name);
    out[*n].n_layers = 1;
    out[(*n)++].bytes = bytes;
}

int df_session_mem_list(const df_model *m, const df_session_params *p, df_plan_mem *out, int max, int *n_ctx) {
    const df_hparams *h = &m->hp;
    dry d;
    const int rc = dry_layout(m, p, &d);
    dry_end(&d);
    *n_ctx = rc == 0 ? d.s.n_ctx : 0;
    if (rc != 0) return 0;
    const int64_t C = d.s.n_ctx, ring = df_kv_ring(h, d.s.n_ctx, d.s.n_batch);
    const size_t elt = d.mem.kv_elt;
    int n = 0;
    for (int l = 0; l < h->n_layer + h->n_layer_mtp; l++) {
        if (!held(m, l)) continue;
        if (is_recurrent(h, l)) {
            const uint64_t f = (uint64_t)(df_rec_conv_floats(h) + df_rec_state_floats(h));
            mem_list_add(out, &n, max, DF_MEM_ITEM_RECURRENT, f * sizeof(float));
            if (d.mem.rb_rows)
                mem_list_add(out, &n, max, "rollback room",
                             (f + (uint64_t)d.mem.rb_rows * (uint64_t)df_rec_row_floats(h)) * sizeof(float));
        } else {
            const uint64_t rows = (uint64_t)(ring && h->swa && h->swa[l] ? ring : C);
            mem_list_add(out, &n, max, h->kv_lora_rank > 0 ? "latent cache" : "KV cache",
                         rows * (uint64_t)(d.s.kv_dim_k + d.s.kv_dim_v) * elt);
        }
        df_mem_decl it[DF_MEM_ITEMS];
        const int k = layer_items(m, l, it);
        for (int i = 0; i < k; i++) mem_list_add(out, &n, max, it[i].name, decl_rows(&it[i], C) * decl_row_bytes(&it[i], elt));
    }
    return n;
}

/* ---- the model's shared scratch ---- */

struct df_scratch {
    int n;                       /* buffers (every session of the model has the same list) */
    void *buf[DF_SCRATCH_MAX];   /* 64-byte aligned */
    uint64_t cap[DF_SCRATCH_MAX]; /* their sizes: the largest any session asked for */
    mm_next *next;               /* the products' order, for the idle prefetch (matmul.h) */
};

/* Grow the model's scratch to what s needs (s->scr_need); the caller holds
 * the model's lock. The old contents are not kept: scratch holds nothing
 * between decodes. */
static int scratch_grow(df_model *m, const df_session *s, char *err, size_t errlen) {
    if (!m->scratch && !(m->scratch = calloc(1, sizeof *m->scratch))) return df_seterr(err, errlen, "out of memory");
    struct df_scratch *sc = m->scratch;
    if (!sc->next && !(sc->next = calloc(MM_NEXT_SLOTS, sizeof *sc->next)))
        return df_seterr(err, errlen, "out of memory");
    if (sc->n == 0) sc->n = s->n_scr;
    if (sc->n != s->n_scr) return df_seterr(err, errlen, "internal: sessions of one model with different scratch lists");
    for (int i = 0; i < sc->n; i++) {
        if (sc->cap[i] >= s->scr_need[i]) continue;
        free(sc->buf[i]);
        sc->cap[i] = 0;
        if (!(sc->buf[i] = df_aligned_alloc(64, (size_t)s->scr_need[i])))
            return df_seterr(err, errlen, "out of memory for %.1f MiB of scratch", (double)s->scr_need[i] / (1 << 20));
        sc->cap[i] = s->scr_need[i];
    }
    return 0;
}

void df_session_bind_scratch(df_session *s) {
    const struct df_scratch *sc = s->m->scratch;
    for (int i = 0; i < s->n_scr; i++) {
        memcpy(s->scr_dst[i], &sc->buf[i], sizeof sc->buf[i]); /* a float*, uint8_t* or void* field: same representation */
        if (s->scr_dst[i] == (void **)&s->mm.buf) s->mm.size = (size_t)s->scr_need[i];
    }
    s->mm.next = sc->next; /* the order of products is the model's, whichever session runs them */
}

void df_scratch_free(df_model *m) {
    if (!m->scratch) return;
    for (int i = 0; i < m->scratch->n; i++) free(m->scratch->buf[i]);
    free(m->scratch->next);
    free(m->scratch);
    m->scratch = NULL;
}

/* ---- per-layer memory ---- */

/* Point every layer's memory descriptor into the session's blocks. */
static void mem_bind(df_session *s) {
    const df_hparams *h = &s->m->hp;
    df_mem *mem = s->mem;
    const int ring = df_kv_ring(h, s->n_ctx, s->n_batch);
    int64_t ia = 0, ir = 0; /* KV rows so far, recurrent layers so far */
    uint64_t io = 0;        /* bytes of declared items so far */
    for (int l = 0; l < h->n_layer + h->n_layer_mtp; l++) {
        layer_mem *lm = &mem->layer[l];
        memset(lm, 0, sizeof *lm);
        if (!held(s->m, l)) continue; /* another rank's layer: kind 0, no memory here */
        lm->n_item = layer_items(s->m, l, lm->item);
        for (int i = 0; i < lm->n_item; i++) {
            lm->item_rows[i] = mem->items + io;
            io += item_bytes(&lm->item[i], s->n_ctx, mem->kv_elt);
        }
        if (is_recurrent(h, l)) {
            lm->kind = DF_MEM_RECURRENT;
            lm->conv = mem->rec_conv + ir * df_rec_conv_floats(h);
            lm->state = mem->rec_state + ir * df_rec_state_floats(h);
            if (mem->rb_rows) {
                lm->rb_conv = mem->rb_conv + ir * df_rec_conv_floats(h);
                lm->rb_state = mem->rb_state + ir * df_rec_state_floats(h);
                lm->rb_in = mem->rb_in + ir * mem->rb_rows * df_rec_row_floats(h);
            }
            ir++;
            continue;
        }
        lm->kind = h->kv_lora_rank > 0 ? DF_MEM_LATENT : DF_MEM_KV;
        lm->ring = ring && h->swa && h->swa[l] ? ring : 0;
        lm->k = mem->k_cache + ia * mem->kv_dim_k * (int64_t)mem->kv_elt;
        if (lm->kind == DF_MEM_KV) lm->v = mem->v_cache + ia * mem->kv_dim_v * (int64_t)mem->kv_elt;
        ia += lm->ring ? lm->ring : s->n_ctx;
    }
}

/* Recurrent states start at zero (a new session, or a reset to position 0). */
static void mem_clear_recurrent(df_session *s) {
    const df_hparams *h = &s->m->hp;
    s->rec_broken = 0;
    s->mem->rb_pos = -1;
    const int64_t n_rec = s->mem->n_rec;
    if (!n_rec) return;
    memset(s->mem->rec_conv, 0, sizeof(float) * (size_t)(n_rec * df_rec_conv_floats(h)));
    memset(s->mem->rec_state, 0, sizeof(float) * (size_t)(n_rec * df_rec_state_floats(h)));
}

int df_mem_kind(const df_session *s, int l) { return s->mem->layer[l].kind; }

/* Layer l's key (or latent) and value rows of position pos (a sliding-window
 * layer's ring wraps); v: NULL for a latent cache. */
static uint8_t *k_row(const df_session *s, int l, int64_t pos) {
    const df_mem *mem = s->mem;
    return mem->layer[l].k + (mem_row(s, l, pos) * mem->kv_dim_k) * (int64_t)mem->kv_elt;
}

static uint8_t *v_row(const df_session *s, int l, int64_t pos) {
    const df_mem *mem = s->mem;
    return mem->layer[l].v ? mem->layer[l].v + (mem_row(s, l, pos) * mem->kv_dim_v) * (int64_t)mem->kv_elt : NULL;
}

const uint8_t *df_mem_k_row(const df_session *s, int l, int pos) { return k_row(s, l, pos); }

void df_mem_store(df_session *s, int l, int n_tok, const float *k, const float *v) {
    const df_mem *mem = s->mem;
    const quant_traits *kv = quant_traits_get(mem->kv_type);
    for (int t = 0; t < n_tok; t++) {
        const int64_t pos = s->pos + t;
        kv->from_float(k + (int64_t)t * mem->kv_dim_k, k_row(s, l, pos), mem->kv_dim_k);
        uint8_t *vd = v ? v_row(s, l, pos) : NULL;
        if (vd) kv->from_float(v + (int64_t)t * mem->kv_dim_v, vd, mem->kv_dim_v);
    }
}

void df_mem_attn_view(const df_session *s, int l, df_attn_desc *d) {
    const df_mem *mem = s->mem;
    const layer_mem *lm = &mem->layer[l];
    d->k = lm->k;
    d->v = lm->v ? lm->v : lm->k; /* a latent row is its own value */
    d->k_stride = (size_t)mem->kv_dim_k * mem->kv_elt;
    d->v_stride = lm->v ? (size_t)mem->kv_dim_v * mem->kv_elt : d->k_stride;
    d->k_head = mem->k_head;
    d->v_head = mem->v_head;
    d->kv_type = mem->kv_type;
    d->pos = s->pos;
    d->ring = lm->ring;
    d->sel = NULL;
    d->sel_k = 0;
}

float *df_mem_conv(df_session *s, int l) { return s->mem->layer[l].conv; }

size_t df_mem_k_row_bytes(const df_session *s) { return (size_t)s->mem->kv_dim_k * s->mem->kv_elt; }
size_t df_mem_v_row_bytes(const df_session *s) { return (size_t)s->mem->kv_dim_v * s->mem->kv_elt; }
int df_mem_kv_type(const df_session *s) { return s->mem->kv_type; }
uint8_t *df_mem_k_row_w(df_session *s, int l, int pos) {
    return s->mem->layer[l].k + ((int64_t)pos * s->mem->kv_dim_k) * (int64_t)s->mem->kv_elt;
}
uint8_t *df_mem_v_row_w(df_session *s, int l, int pos) {
    uint8_t *v = s->mem->layer[l].v;
    return v ? v + ((int64_t)pos * s->mem->kv_dim_v) * (int64_t)s->mem->kv_elt : NULL;
}
float *df_mem_state(df_session *s, int l) { return s->mem->layer[l].state; }

/* ---- rolling recurrent state back ---- */

int df_rec_rows(const df_session *s) { return s->mem->rb_rows; }

int df_rec_mark(df_session *s, char *err, size_t errlen) {
    const df_hparams *h = &s->m->hp;
    df_mem *mem = s->mem;
    if (!mem->n_rec) return 0;
    if (!mem->rb_rows)
        return df_seterr(err, errlen, "the session has no room to roll recurrent state back (open it with "
                         "df_session_params.spec_k_max)");
    if (s->rec_broken)
        return df_seterr(err, errlen, "the session's recurrent state is unusable after a failed decode");
    memcpy(mem->rb_conv, mem->rec_conv, sizeof(float) * (size_t)(mem->n_rec * df_rec_conv_floats(h)));
    memcpy(mem->rb_state, mem->rec_state, sizeof(float) * (size_t)(mem->n_rec * df_rec_state_floats(h)));
    mem->rb_pos = s->pos;
    return 0;
}

void df_rec_unmark(df_session *s) { s->mem->rb_pos = -1; }

/* Where rows [s->pos, s->pos + n) of recurrent layer l go in the journal,
 * or NULL when the session is not marked; rows past the journal's end drop
 * the mark (the pass can then not be rolled back). */
static float *journal_rows(df_session *s, int l, int n) {
    df_mem *mem = s->mem;
    if (mem->rb_pos < 0) return NULL;
    const int64_t first = (int64_t)s->pos - mem->rb_pos;
    if (first < 0 || first + n > mem->rb_rows) {
        mem->rb_pos = -1;
        return NULL;
    }
    return mem->layer[l].rb_in + first * df_rec_row_floats(&s->m->hp);
}

void df_rec_conv(tp_pool *pool, df_session *s, int l, int64_t c0, float *x, int n, int64_t ch, const float *w) {
    const df_hparams *h = &s->m->hp;
    float *j = journal_rows(s, l, n);
    const int64_t rf = df_rec_row_floats(h);
    for (int t = 0; j && t < n; t++) memcpy(j + t * rf + c0, x + t * ch, sizeof(float) * (size_t)ch);
    dn_short_conv(pool, x, n, ch, h->ssm_d_conv, df_mem_conv(s, l) + c0 * (h->ssm_d_conv - 1), w);
}

void df_rec_delta(tp_pool *pool, const dn_shape *sh, df_session *s, int l, const float *q, const float *k,
                  const float *v, const float *g, const float *beta, int n, float *o) {
    float *j = journal_rows(s, l, n);
    if (j) {
        const rec_row rr = rec_row_layout(&s->m->hp);
        const int64_t H = sh->n_head, hd = sh->hd, nk = (int64_t)sh->n_head_k * hd, ng = sh->g_per_head ? H : H * hd;
        for (int64_t t = 0; t < n; t++) {
            float *row = j + t * rr.total;
            memcpy(row + rr.k, k + t * sh->ld_qk, sizeof(float) * (size_t)nk);
            memcpy(row + rr.v, v + t * sh->ld_v, sizeof(float) * (size_t)(H * hd));
            memcpy(row + rr.g, g + t * ng, sizeof(float) * (size_t)ng);
            memcpy(row + rr.beta, beta + t * H, sizeof(float) * (size_t)H);
        }
        s->mem->rb_sh = *sh;
    }
    dn_gated_delta(pool, sh, df_mem_state(s, l), q, k, v, g, beta, n, o);
}

/* The short-conv state of channels (ch of them, ns = d_conv - 1 inputs
 * each) after n more inputs, journal rows rf floats apart: each channel's
 * window shifted as dn_short_conv shifts it (copies only). */
static void replay_conv(float *st, int64_t ch, int ns, const float *in, int n, int64_t rf) {
    for (int64_t c = 0; c < ch && ns > 0; c++)
        for (int t = 0; t < n; t++) {
            float *w = st + c * ns;
            memmove(w, w + 1, sizeof(float) * (size_t)(ns - 1));
            w[ns - 1] = in[t * rf + c];
        }
}

/* Roll every recurrent layer back to the mark and replay its first n
 * journaled rows: the states the session had after those rows. The delta
 * rule's state never depends on the query or the output, so the replay
 * reads k as the query and writes the output into mem->rb_out (one row).
 * The pool is used when the model's lock is free (a decode of another
 * session may hold it): the heads' results do not depend on it. */
static void rec_replay(df_session *s, int n) {
    const df_hparams *h = &s->m->hp;
    df_mem *mem = s->mem;
    const rec_row rr = rec_row_layout(h);
    const dn_shape sh = mem->rb_sh; /* one row a call: its strides do not matter */
    const int locked = n > 0 && pthread_mutex_trylock(&s->m->decode_mu) == 0;
    for (int l = 0; l < h->n_layer; l++) {
        layer_mem *lm = &mem->layer[l];
        if (lm->kind != DF_MEM_RECURRENT) continue;
        memcpy(lm->conv, lm->rb_conv, sizeof(float) * (size_t)df_rec_conv_floats(h));
        memcpy(lm->state, lm->rb_state, sizeof(float) * (size_t)df_rec_state_floats(h));
        if (n == 0) continue;
        replay_conv(lm->conv, h->ssm_conv_ch, h->ssm_d_conv - 1, lm->rb_in + rr.conv, n, rr.total);
        for (int t = 0; t < n; t++) { /* a row a call: dn_gated_delta's g and beta rows are packed */
            const float *j = lm->rb_in + t * rr.total;
            dn_gated_delta(locked ? s->m->pool : NULL, &sh, lm->state, j + rr.k, j + rr.k, j + rr.v, j + rr.g,
                           j + rr.beta, 1, mem->rb_out);
        }
    }
    if (locked) pthread_mutex_unlock(&s->m->decode_mu);
}

/* ---- the items families declare ---- */

void *df_mem_item(const df_session *s, int l, int i) {
    const layer_mem *lm = &s->mem->layer[l];
    return i < lm->n_item ? lm->item_rows[i] : NULL;
}

size_t df_mem_item_row_bytes(const df_session *s, int l, int i) {
    const layer_mem *lm = &s->mem->layer[l];
    return i < lm->n_item ? (size_t)decl_row_bytes(&lm->item[i], s->mem->kv_elt) : 0;
}

int df_mem_n_items(const df_session *s, int l) { return s->mem->layer[l].n_item; }

uint64_t df_mem_item_rows(const df_session *s, int l, int i, int64_t pos) {
    const layer_mem *lm = &s->mem->layer[l];
    return i < lm->n_item ? decl_rows(&lm->item[i], pos) : 0;
}

void df_mem_item_store(df_session *s, int l, int i, int n_tok, const float *rows) {
    const layer_mem *lm = &s->mem->layer[l];
    if (i >= lm->n_item) return;
    const df_mem_decl *d = &lm->item[i];
    const size_t rb = (size_t)decl_row_bytes(d, s->mem->kv_elt);
    const quant_traits *qt = quant_traits_get(d->kv_type ? s->mem->kv_type : DF_TYPE_F32);
    for (int t = 0; t < n_tok; t++)
        qt->from_float(rows + t * d->row_elts, lm->item_rows[i] + (size_t)(s->pos + t) * rb, d->row_elts);
}

/* ---- lifetime ---- */

void df_session_free(df_session *s) {
    if (!s) return;
    if (s->m->session_freed) s->m->session_freed(s); /* rank 0 of a pipeline: the others free their mirrors */
    void *none = NULL;
    for (int i = 0; i < s->n_scr; i++) memcpy(s->scr_dst[i], &none, sizeof none); /* the model's scratch: not freed here */
    if (s->trace_out) df_out_commit(s->trace_out, NULL, 0); /* the records so far are kept */
    if (s->ties_out) df_out_commit(s->ties_out, NULL, 0);
    for (int i = 0; i < s->n_own; i++) { /* the buffers session_layout listed as the session's own */
        void *buf;
        memcpy(&buf, s->own_dst[i], sizeof buf);
        free(buf);
    }
    free(s->mem);
    free(s->fam);
    free(s);
}

/* RoPE parameters from the hyperparameters; the frequency factors stay
 * pinned in the weight store for the session's life. */
static int session_rope(df_session *s, char *err, size_t errlen) {
    const df_model *m = s->m;
    const df_hparams *h = &m->hp;
    s->rope.n_dims = h->n_rot;
    s->rope.neox = h->rope_neox;
    s->rope.freq_base = h->rope_base;
    s->rope.freq_scale = h->rope_freq_scale;
    s->rope.ext_factor = h->yarn_ext_factor;
    s->rope.attn_factor = h->yarn_attn_factor;
    rope_corr_dims(h->n_rot, h->n_ctx_orig, h->rope_base, h->yarn_beta_fast, h->yarn_beta_slow, s->rope.corr_dims);
    s->rope.freq_factors = NULL;
    if (m->rope_freqs) {
        pthread_mutex_lock(&s->m->decode_mu); /* the store's pin counts: one thread at a time */
        s->rope.freq_factors = ws_fetch(m->ws, m->rope_freqs, err, errlen);
        pthread_mutex_unlock(&s->m->decode_mu);
        if (!s->rope.freq_factors) return -1;
    }
    return 0;
}

int df_session_new(df_model *m, const df_session_params *p, df_session **out, char *err, size_t errlen) {
    df_session_params defp = df_session_default_params();
    if (!p) p = &defp;
    *out = NULL;
    if (m->vocab_only)
        return df_seterr(err, errlen, "%s: loaded for its vocabulary only: no session", m->path), DF_E_UNSUPPORTED;
    df_session *s = calloc(1, sizeof *s);
    if (!s) return df_seterr(err, errlen, "out of memory"), DF_E_NOMEM;
    static uint64_t next_id; /* the names a pipeline's other ranks know sessions by (pipe.h) */
    s->m = m;
    s->params = *p;
    s->pp_id = __atomic_add_fetch(&next_id, 1, __ATOMIC_RELAXED);
    s->abort_cb = p->abort_cb;
    s->abort_ctx = p->abort_ctx;
    s->mem = calloc(1, sizeof *s->mem);
    if (s->mem && m->arch->fam_bytes) s->fam = calloc(1, m->arch->fam_bytes);
    if (!s->mem || (m->arch->fam_bytes && !s->fam)) {
        free(s->mem);
        free(s);
        return df_seterr(err, errlen, "out of memory"), DF_E_NOMEM;
    }
    alloc_item it[MAX_ITEMS];
    int n, n_own;
    if (session_layout(m, p, s, it, &n, &n_own, err, errlen) != 0) {
        df_session_free(s);
        return DF_E_INPUT;
    }
    uint64_t own = 0, scratch = 0;
    df_session_split_bytes(m, p, &own, &scratch);
    if (m->session_reserve && (own > m->session_reserve || scratch > m->scratch_reserve)) {
        const int n_ctx = s->n_ctx;
        df_session_free(s);
        return df_seterr(err, errlen,
                         "a session of %d tokens needs %.1f MiB (and %.1f MiB of scratch) but the memory plan reserved "
                         "%.1f MiB (and %.1f MiB) (load the model with this context length)", n_ctx,
                         (double)own / (1 << 20), (double)scratch / (1 << 20), (double)m->session_reserve / (1 << 20),
                         (double)m->scratch_reserve / (1 << 20)), DF_E_NOMEM;
    }
    for (int i = 0; i < n_own; i++) {
        void *buf = df_aligned_alloc(64, (size_t)it[i].bytes);
        memcpy(it[i].dst, &buf, sizeof buf); /* the field is a float*, uint8_t* or void*: same representation */
        s->own_dst[s->n_own++] = it[i].dst;  /* freed by df_session_free */
        if (!buf) {
            const int n_ctx = s->n_ctx; /* read before the session is freed */
            df_session_free(s);
            return df_seterr(err, errlen, "out of memory for a session of %d tokens (%.1f MiB)", n_ctx,
                             (double)own / (1 << 20)), DF_E_NOMEM;
        }
        /* the families' items start at zero: a block begun holds its row before the block completes it, and a
         * snapshot saves that row (never the heap's old bytes) */
        if (it[i].dst == (void **)&s->mem->items) memset(buf, 0, (size_t)it[i].bytes);
    }
    /* the scratch: the model's, grown to what this session needs (other sessions may be decoding) */
    for (int i = n_own; i < n; i++) {
        s->scr_dst[s->n_scr] = it[i].dst;
        s->scr_need[s->n_scr++] = it[i].bytes;
    }
    pthread_mutex_lock(&m->decode_mu);
    const int grown = scratch_grow(m, s, err, errlen);
    if (grown == 0) df_session_bind_scratch(s);
    pthread_mutex_unlock(&m->decode_mu);
    if (grown != 0) {
        df_session_free(s);
        return DF_E_NOMEM;
    }
    mem_bind(s);
    mem_clear_recurrent(s);
    if (session_rope(s, err, errlen) != 0) {
        df_session_free(s);
        return DF_E_IO;
    }
    *out = s;
    return 0;
}

int df_session_pos(const df_session *s) { return s->pos; }
float *df_session_logits(df_session *s) { return s->logits; }
int df_session_n_batch(const df_session *s) { return s->n_batch; }
int df_session_n_ctx(const df_session *s) { return s->n_ctx; }

int df_session_truncate(df_session *s, int pos, char *err, size_t errlen) {
    if (pos < 0 || pos > s->pos)
        return df_seterr(err, errlen, "cannot truncate a session at position %d to position %d", s->pos, pos);
    if (pos == 0) {
        s->pos = 0;
        s->mtp_rows = 0;
        s->mtp_wait_n = 0;
        mem_clear_recurrent(s);
        return 0;
    }
    if (pos == s->pos) return 0;
    const int rollback = s->m->hp.n_layer_recurrent > 0; /* within the last mark: restore and replay */
    if (rollback && (s->rec_broken || s->mem->rb_pos < 0 || pos < s->mem->rb_pos))
        return df_seterr(err, errlen,
                         "cannot rewind a session with recurrent layers from position %d to %d: their state keeps no "
                         "history (only a reset to 0, or a rollback within a speculative pass, is possible)", s->pos,
                         pos);
    const int ring = df_kv_ring(&s->m->hp, s->n_ctx, s->n_batch);
    if (ring) { /* the window of the next token must still be in the sliding-window layers' rings */
        const int need = pos - s->m->hp.n_swa + 1 > 0 ? pos - s->m->hp.n_swa + 1 : 0;
        if (s->pos - 1 >= need + ring)
            return df_seterr(err, errlen,
                             "cannot rewind a session from position %d to %d: the sliding-window layers keep only the "
                             "last %d positions (a reset to 0 is possible)", s->pos, pos, ring);
    }
    if (rollback) rec_replay(s, pos - s->mem->rb_pos); /* the mark stays: the journal's first rows still hold */
    s->pos = pos;
    if (s->mtp_wait_n > pos - s->mtp_wait_pos0) /* rows past the sequence no longer wait (mtp.c) */
        s->mtp_wait_n = pos > s->mtp_wait_pos0 ? pos - s->mtp_wait_pos0 : 0;
    return 0;
}

int df_session_trace_experts(df_session *s, const char *path, char *err, size_t errlen) {
    if (path && s->m->pp) /* the trace of rank 0's layers only */
        return df_seterr(err, errlen, "an expert trace: not with --split layers yet");
    int rc = 0;
    if (s->trace_out) rc = df_out_commit(s->trace_out, err, errlen);
    s->trace_out = NULL;
    s->trace = NULL;
    if (rc != 0 || !path) return rc;
    const df_hparams *h = &s->m->hp;
    if (h->n_expert == 0) return df_seterr(err, errlen, "the model has no experts to trace");
    if (s->m->ws && ws_is_model_file(s->m->ws, path))
        return df_seterr(err, errlen, "the expert trace: %s is the model file itself: not written", path);
    char e2[512];
    df_out *o = df_outfile_open(path, "DFTR", 4, e2, sizeof e2);
    if (!o) return df_seterr(err, errlen, "the expert trace: %s", e2);
    FILE *f = df_out_stream(o);
    const uint32_t hdr[5] = {0x52544644u /* "DFTR" */, 2, (uint32_t)h->n_layer, (uint32_t)h->n_expert,
                             (uint32_t)h->n_expert_used};
    if (!f || fwrite(hdr, sizeof hdr, 1, f) != 1) {
        df_out_abort(o);
        return df_seterr(err, errlen, "%s: write failed", path);
    }
    s->trace_out = o;
    s->trace = f;
    return 0;
}

#define TIES_MAGIC "# deltafin near ties\n"

int df_session_trace_ties(df_session *s, const char *path, float eps, char *err, size_t errlen) {
    if (path && s->m->pp) return df_seterr(err, errlen, "a near-tie trace: not with --split layers yet");
    int rc = 0;
    if (s->ties_out) rc = df_out_commit(s->ties_out, err, errlen);
    s->ties_out = NULL;
    s->ties = NULL;
    if (rc != 0 || !path) return rc;
    if (!(eps >= 0.0f)) return df_seterr(err, errlen, "the near-tie trace: the margin must be a number >= 0");
    if (s->m->ws && ws_is_model_file(s->m->ws, path))
        return df_seterr(err, errlen, "the near-tie trace: %s is the model file itself: not written", path);
    char e2[512];
    df_out *o = df_outfile_open(path, TIES_MAGIC, strlen(TIES_MAGIC), e2, sizeof e2);
    if (!o) return df_seterr(err, errlen, "the near-tie trace: %s", e2);
    FILE *f = df_out_stream(o);
    if (!f || fputs(TIES_MAGIC, f) == EOF) {
        df_out_abort(o);
        return df_seterr(err, errlen, "%s: write failed", path);
    }
    s->ties_out = o;
    s->ties = f;
    s->ties_eps = eps;
    return 0;
}

void df_note_choice(df_session *o, int64_t pos, int l, const char *what, float margin) {
    if (o->ties && margin <= o->ties_eps)
        fprintf(o->ties, "position %lld layer %d %s margin %.3g\n", (long long)pos, l, what, (double)margin);
}
