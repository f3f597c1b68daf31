/*
 * session.h - a session: one sequence's memory of what it has seen, and the
 * scratch its forward passes compute in (session.c).
 *
 * DESIGN
 * session.c is the single owner of per-layer memory. Each layer keeps, per
 * its kind, a KV cache (n_ctx rows of keys and of values; a sliding-window
 * layer's is a ring of the window plus a batch, df_kv_ring), an MLA latent
 * cache (n_ctx latent rows) or a recurrent state of fixed size (KDA: the
 * short convolutions' last inputs and the delta-rule state); and whatever
 * items its family declares besides (df_mem_decl, below). The layout is
 * private to session.c (struct df_mem is opaque); forward passes reach it
 * only through the df_mem_* calls below: write the rows of new positions,
 * describe a layer's cache for attention, hand out a recurrent state or a
 * declared item.
 *
 * The scratch buffers (df_session's public fields, and the fields of its
 * family's struct, s->fam) are sized from one table (session_layout) that
 * also tells the memory planner what a session costs
 * (df_session_split_bytes). Nothing is allocated per token.
 *
 * Scratch is the model's, not the session's: one decode runs at a time per
 * model (decode.c holds its lock), so every session of a model computes in
 * one set of scratch buffers, as large as its largest session needs. A
 * session's scratch fields are pointed at them (df_session_bind_scratch)
 * by each decode before its forward pass; outside a decode they are not to
 * be used. What a session keeps between decodes -- its per-layer memory, its
 * logits -- stays its own. N sessions under a budget therefore cost N times
 * their own memory and the scratch once (df_session_split_bytes).
 */
#ifndef DF_SESSION_H
#define DF_SESSION_H

#include <stdio.h>

#include "attn.h"
#include "deltanet.h"
#include "matmul.h"
#include "model.h"
#include "ops.h"

/* What one layer of a session remembers. */
enum { DF_MEM_KV = 1, DF_MEM_LATENT = 2, DF_MEM_RECURRENT = 3 };

typedef struct df_mem df_mem; /* session.c */

#define DF_SCRATCH_MAX 64 /* scratch buffers of a session (session_layout) */
#define DF_SESSION_ITEMS 80 /* buffers of a session, its own and scratch (session_layout) */

struct df_session {
    df_model *m;
    int n_ctx, n_batch, pos;
    df_session_params params; /* as made (a pipeline's other ranks make their mirrors alike: pipe.h) */
    uint64_t pp_id;           /* this process's name for it (pipe.h) */
    int rec_broken;         /* a decode failed midway through recurrent layers: their state is unusable until a reset */
    int64_t kv_dim_k, kv_dim_v; /* row widths of new keys / values (s->k, s->v): n_head_kv * head_dim(_v), or the MLA latent */
    df_mem *mem;            /* per-layer memory: session.c only */
    int (*abort_cb)(void *); /* df_session_params' cancellation, or NULL */
    void *abort_ctx;
    int cancelled;          /* the forward pass stopped because abort_cb said so (df_layer_abort) */
    const int *out_rows;    /* set by decode.c for a batched pass: the rows whose logits df_output computes, */
    int n_out_rows;         /* in order (NULL: the last row, or all of them with all_logits) */
    rope_params rope;
    /* scratch, n_batch rows each */
    float *x;               /* (n_batch, n_embd) residual stream */
    float *xb;              /* (n_batch, max(n_embd, q_dim)) normed input / attention output */
    float *xb2;             /* (n_batch, n_embd) */
    float *q;               /* (n_batch, n_head * head_dim) */
    float *k;               /* (n_batch, kv_dim_k) */
    float *v;               /* (n_batch, kv_dim_v) */
    float *hb, *hb2;        /* (n_batch, n_ff) */
    float *att;             /* (n_threads, att_stride) attention scores / per-thread rows */
    int64_t att_stride;     /* floats per thread: df_attn_scratch_floats(n_ctx), at least kv_lora_rank */
    /* mixture of experts scratch */
    float *router;          /* (n_batch, n_expert) router probabilities */
    int32_t *topk_id;       /* (n_batch, n_expert_used) */
    float *topk_w;          /* (n_batch, n_expert_used) */
    float *topk_margin;     /* (n_batch) each token's routing margin (df_moe_select) */
    int32_t *tok_of;        /* (n_batch * n_expert_used) tokens grouped by expert */
    int32_t *slot_of;       /* same, the slot within the token's top-k */
    float *ex_x, *ex_h, *ex_h2, *ex_y; /* gathered rows for one expert */
    float *ex_out;          /* (n_batch * n_expert_used, n_embd) each (token, slot)'s expert output */
    FILE *trace;            /* --trace-experts: routing records, or NULL */
    df_out *trace_out;      /* ... the file it goes to (outfile.c: put in place when the trace ends) */
    FILE *ties;             /* df_session_trace_ties: the near ties, or NULL */
    df_out *ties_out;       /* ... the file they go to */
    float ties_eps;         /* ... the largest margin written */
    const float *moe_hint;  /* the residual the MoE lookahead reads (NULL: s->x; a family whose FFN reads a mix
                             * of residuals points it there) */
    /* MLA scratch */
    float *q_abs;           /* (n_batch, n_head, kv_lora_rank + n_rot) absorbed queries */
    float *lat;             /* (n_batch, kv_lora_rank + n_rot) new latents */
    float *o_lat;           /* (n_batch, n_head, kv_lora_rank) attention output in latent space */
    float *mla_tmp;         /* (n_batch, max(kv_lora_rank, qk_nope, q_lora_rank)) */
    float *rope_cache;      /* (n_batch, n_rot) */
    float *logits;          /* (n_batch, n_vocab) */
    /* KDA scratch (models with recurrent layers), d_inner = kda_n_head * kda_head_dim */
    float *kda_q, *kda_k, *kda_v, *kda_g, *kda_o; /* (n_batch, d_inner) each; a gated delta net (hp.gdn): kda_q is the
                                                   * fused qkv (n_batch, ssm_conv_ch + d_inner: room for a legacy
                                                   * row packing qkv and z), kda_g the gate z, kda_v one legacy row, no kda_k */
    float *kda_beta;        /* (n_batch, kda_n_head) */
    float *kda_lo;          /* (n_batch, kda_head_dim) low-rank intermediate; gdn: (n_batch, kda_n_head) decays */
    float *attn_gate;       /* (n_batch, n_head * head_dim_v) attention output gate (hp.attn_out_gate) */
    const int32_t *moe_tokens; /* this pass's token ids while hash-routed layers run (moe.c), else NULL */
    /* the MTP block (hp.n_layer_mtp; mtp.c): its KV cache is layer n_layer's memory */
    float *mtp_h;           /* (n_batch + 1, n_embd) the target's hidden rows of positions mtp_base.. */
    int mtp_base, mtp_rows; /* (after the final norm): those of the last batch and the one before it */
    int mtp_stopped;        /* df_mtp_stop: the block no longer runs after batches (nor guesses) */
    int mtp_defer;          /* df_mtp_defer: the block's upkeep after batches waits */
    int mtp_wait_pos0, mtp_wait_n; /* the rows waiting: positions mtp_wait_pos0.., their */
    float *mtp_wait_h;      /* (n_batch, n_embd) hidden rows (each the one before its token) and */
    int32_t *mtp_wait_tok;  /* (n_batch) tokens */
    float *mtp_in;          /* (n_batch, 2 * n_embd) [enorm(embedding) | hnorm(hidden)] */
    float *mtp_out;         /* (n_batch, n_embd) the block's output after shared_head_norm */
    mm_scratch mm;
    void *fam;              /* the family's own per-session struct (df_arch.fam_bytes; its scratch fields, as the
                             * family's scratch hook declared them), or NULL */
    /* where the scratch fields above live (session.c): their addresses and the bytes this session needs of each */
    void **scr_dst[DF_SCRATCH_MAX];
    uint64_t scr_need[DF_SCRATCH_MAX];
    int n_scr;
    /* the fields of the buffers the session owns (session_layout's own items), which df_session_free frees */
    void **own_dst[DF_SESSION_ITEMS];
    int n_own;
};

/* Bytes a session with these parameters allocates (for the memory planner),
 * in two parts: its own memory and the scratch it computes in (sessions of
 * one model share the scratch); -1 if it would be too large. */
int df_session_split_bytes(const df_model *m, const df_session_params *p, uint64_t *own, uint64_t *scratch);
/* Point s's scratch fields at the model's scratch; decode.c calls it, holding
 * the model's lock, before a forward pass computes in s's scratch. */
void df_session_bind_scratch(df_session *s);
/* The model's shared scratch, freed with the model (df_model_free). */
void df_scratch_free(df_model *m);

/* Rows of a sliding-window layer's KV ring for this context and batch (a
 * multiple of 64, at least the window plus a batch's new keys), or 0 when
 * the model has no window or n_ctx rows are no more. */
int df_kv_ring(const df_hparams *h, int n_ctx, int n_batch);
/* The ring a session with these parameters would give its sliding-window layers. */
int df_session_kv_ring(const df_model *m, const df_session_params *p);
/* Floats of one recurrent layer's short-conv and delta-rule states. */
int64_t df_rec_conv_floats(const df_hparams *h);
int64_t df_rec_state_floats(const df_hparams *h);
/* Floats of one row of one recurrent layer's rollback journal: the short
 * convolution's inputs and the delta rule's k, v, decay and beta. */
int64_t df_rec_row_floats(const df_hparams *h);

/* ---- rolling recurrent state back (speculative decoding, spec.c) ----
 * df_rec_mark copies every recurrent state at the session's position; the
 * rows decoded after it (at most df_rec_rows of them) have their recurrent
 * layers' inputs journaled, so that df_session_truncate can go back to any
 * position from the mark on: it restores the copy and replays the kept rows'
 * recurrences (exactly: the same operations in the same order). A mark is
 * dropped by a reset to 0, a snapshot load (df_rec_unmark), or more rows
 * than the journal holds. Models without recurrent layers need none of it:
 * df_rec_mark is then a no-op. */
/* Rows the session can roll back (0: no room; the model has no recurrent
 * layers, or the session was opened with spec_k_max 0). */
int df_rec_rows(const df_session *s);
/* 0, or -1 with err (no room, or a state broken by a failed decode). */
int df_rec_mark(df_session *s, char *err, size_t errlen);
void df_rec_unmark(df_session *s);
/* The recurrences of recurrent layer l, through the session (journaled when
 * marked): dn_short_conv of n rows of ch channels (x, rows ch floats apart)
 * on the layer's conv state from channel c0 on; dn_gated_delta on its
 * delta-rule state. */
void df_rec_conv(tp_pool *pool, df_session *s, int l, int64_t c0, float *x, int n, int64_t ch, const float *w);
void df_rec_delta(tp_pool *pool, const dn_shape *sh, df_session *s, int l, const float *q, const float *k,
                  const float *v, const float *g, const float *beta, int n, float *o);

/* ---- per-layer memory (the only way in) ---- */

/* DF_MEM_KV, DF_MEM_LATENT or DF_MEM_RECURRENT. */
int df_mem_kind(const df_session *s, int l);
/* Write n_tok rows at positions s->pos.. of attention layer l: keys (rows of
 * kv_dim_k floats) and values (rows of kv_dim_v; NULL for a latent cache,
 * which keeps no values). */
void df_mem_store(df_session *s, int l, int n_tok, const float *k, const float *v);
/* The cached row of position pos (< s->pos + rows just stored) of layer l:
 * keys (or the latent) and values (NULL for a latent cache). */
const uint8_t *df_mem_k_row(const df_session *s, int l, int pos);
/* Describe layer l's cache for df_attention_run: k, v, their strides,
 * the bytes between KV heads (a latent cache: 0, one row serves every head),
 * the element type, its ring (0: none) and pos = s->pos. The caller adds
 * queries, output, and a window and sinks if it has them. */
void df_mem_attn_view(const df_session *s, int l, df_attn_desc *d);
/* Recurrent layer l's short-conv windows (df_rec_conv_floats) and delta-rule
 * state (df_rec_state_floats). */
float *df_mem_conv(df_session *s, int l);
float *df_mem_state(df_session *s, int l);
/* Raw rows, for saving and restoring a session (snapshot.c): the bytes of
 * one cached key (or latent) row and value row (0: no values), the element
 * type, and writable rows of attention layer l. */
size_t df_mem_k_row_bytes(const df_session *s);
size_t df_mem_v_row_bytes(const df_session *s);
int df_mem_kv_type(const df_session *s);
uint8_t *df_mem_k_row_w(df_session *s, int l, int pos);
uint8_t *df_mem_v_row_w(df_session *s, int l, int pos);
/* A discrete choice inside the model (a router's experts, an indexer's keys) made
 * for session o's row at position pos in layer l with this margin (df_moe_select,
 * op_top_k_margin): written to o's near-tie trace when it is at most the trace's
 * eps (format: df_session_trace_ties). */
void df_note_choice(df_session *o, int64_t pos, int l, const char *what, float margin);

/* ---- what a family declares (df_arch.layer_mem, df_arch.scratch) ----
 * session.c owns what many families share: attention caches (KV, the MLA
 * latent, sliding-window rings), recurrent states, the scratch of dense,
 * MoE, MLA and recurrent layers. Anything else a family keeps per layer, or
 * computes in, it declares through two hooks of its df_arch entry, and
 * session.c sizes, plans, allocates, frees, snapshots and restores it like
 * its own without knowing what it means. */

/* Rows of a declared item: one per position (n_ctx rows; a snapshot keeps
 * those of the positions seen), one per block of `per` positions (those
 * begun), or `per` rows whatever the position (a snapshot keeps them all). */
enum { DF_ROWS_POS = 1, DF_ROWS_BLOCK = 2, DF_ROWS_FIXED = 3 };
#define DF_MEM_ITEMS 4 /* items one layer declares at most */
typedef struct df_mem_decl {
    const char *name;  /* how the plan names it ("indexer keys"); items of one name are one line */
    int rule, per;     /* DF_ROWS_* and its count */
    int64_t row_elts;  /* elements of a row */
    int kv_type;       /* 1: elements of the session's KV type (df_mem_kv_type); 0: floats */
} df_mem_decl;

/* Item i (in the order layer l's df_arch.layer_mem declared them) of
 * layer l: its rows, row 0 first; NULL when the layer has no such item. */
void *df_mem_item(const df_session *s, int l, int i);
/* The bytes of one of its rows. */
size_t df_mem_item_row_bytes(const df_session *s, int l, int i);
/* Items layer l declared, and their rows held at position pos (snapshot.c). */
int df_mem_n_items(const df_session *s, int l);
uint64_t df_mem_item_rows(const df_session *s, int l, int i, int64_t pos);
/* Store n_tok float rows (row_elts each) as item i's rows of positions
 * s->pos.. (a DF_ROWS_POS item of the KV type: converted to it). */
void df_mem_item_store(df_session *s, int l, int i, int n_tok, const float *rows);

/* A family's scratch hook sizes its scratch through these. */
typedef struct df_layout df_layout; /* session.c */
int df_layout_ctx(const df_layout *lay);
int df_layout_batch(const df_layout *lay);
/* The family's per-session struct (df_arch.fam_bytes), whose fields the
 * scratch is declared into. */
void *df_layout_fam(df_layout *lay);
/* field (a float*, int32_t* or void* in the family's struct) points at
 * scratch of this many bytes during a decode (df_session_bind_scratch). */
void df_layout_scratch(df_layout *lay, void *field, uint64_t bytes);
/* The family multiplies inputs this many floats wide (matmul.c's scratch),
 * or needs this many floats per thread in s->att. */
void df_layout_wide(df_layout *lay, int64_t floats);
void df_layout_att(df_layout *lay, int64_t floats);

/* The item of the recurrent layers' state, which every position reads and writes whole (plan.c counts it). */
#define DF_MEM_ITEM_RECURRENT "recurrent state"

/* The per-layer memory of a session with these parameters, one entry per
 * name (what it is, the layers that keep it, its bytes), for the plan; at
 * most max entries, and the session's context (0: bad parameters). Returns
 * the number of entries. */
int df_session_mem_list(const df_model *m, const df_session_params *p, df_plan_mem *out, int max, int *n_ctx);

#endif
