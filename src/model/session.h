/*
 * session.h - a session: one sequence's memory of what it has seen, and the
 * scratch its forward passes compute in (session.c).
 *
 * DESIGN
 * session.c is the single owner of per-layer memory. Each layer keeps, per
 * its kind, a KV cache (n_ctx rows of keys and of values; a sliding-window
 * layer's is a ring of the window plus a batch, df_kv_ring), an MLA latent
 * cache (n_ctx latent rows) or a recurrent state of fixed size (KDA: the
 * short convolutions' last inputs and the delta-rule state); an MLA layer
 * with a DSA indexer that selects keys also keeps the indexer's n_ctx keys
 * (df_mem_idx_*). The layout is
 * private to session.c (struct df_mem is opaque); forward passes reach it
 * only through the df_mem_* calls below: write the rows of new positions,
 * describe a layer's cache for attention, hand out a recurrent state.
 *
 * The scratch buffers (df_session's public fields) are sized from one table
 * (session_layout) that also tells the memory planner what a session costs
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
    const float *moe_hint;  /* the residual the MoE lookahead reads (NULL: s->x); kimi-k3: the FFN's residual mix */
    /* MLA scratch */
    float *q_abs;           /* (n_batch, n_head, kv_lora_rank + n_rot) absorbed queries */
    float *lat;             /* (n_batch, kv_lora_rank + n_rot) new latents */
    float *o_lat;           /* (n_batch, n_head, kv_lora_rank) attention output in latent space */
    float *mla_tmp;         /* (n_batch, max(kv_lora_rank, qk_nope, q_lora_rank)) */
    float *rope_cache;      /* (n_batch, n_rot) */
    float *logits;          /* (n_batch, n_vocab) */
    /* KDA scratch (models with recurrent layers), d_inner = kda_n_head * kda_head_dim */
    float *kda_q, *kda_k, *kda_v, *kda_g, *kda_o; /* (n_batch, d_inner) each; qwen (hp.gdn): kda_q is the
                                                   * fused qkv (n_batch, ssm_conv_ch + d_inner: room for a legacy
                                                   * ssm_in row), kda_g the gate z, kda_v one legacy row, no kda_k */
    float *kda_beta;        /* (n_batch, kda_n_head) */
    float *kda_lo;          /* (n_batch, kda_head_dim) low-rank intermediate; qwen: (n_batch, kda_n_head) decays */
    /* kimi-k3 scratch */
    float *res_stack;       /* (checkpoints, n_batch, n_embd) cross-layer residual checkpoints */
    float *res_mix;         /* (n_batch, n_embd) the mixed residual a block reads */
    float *res_scores;      /* (checkpoints + 1) one token's mixing scores */
    float *attn_gate;       /* (n_batch, n_head * head_dim_v) attention output gate (hp.attn_out_gate) */
    float *lat_in, *lat_out;/* (n_batch, n_embd) latent MoE input and output */
    /* DSA lightning indexer scratch (dsa.c) */
    float *idx_q;           /* (n_batch, idx_n_head * idx_head_dim) indexer queries */
    float *idx_k;           /* (n_batch, idx_head_dim) new indexer keys */
    float *idx_w;           /* (n_batch, idx_n_head) per-head weights */
    int32_t *idx_sel;       /* (n_batch, idx_top_k) each token's chosen key positions, ascending */
    /* deepseek4 scratch (arch_deepseek4.c) */
    float *hc;              /* (n_batch, hc_mult * n_embd) the residual streams */
    float *hc_norm;         /* (n_batch, hc_mult * n_embd) their RMSNorm, then hc_post's new streams */
    float *hc_mixes;        /* (n_batch, (2 + hc_mult) * hc_mult) a mixer's raw outputs */
    float *hc_mix;          /* (n_batch, hc_mult + hc_mult^2) post weights and Sinkhorn-normalised comb */
    float *qr;              /* (n_batch, q_lora_rank) normed query LoRA */
    float *o_grp;           /* (n_batch, n_head * head_dim / o_groups) one output group's rows */
    float *o_low;           /* (n_batch, o_groups * o_lora) the grouped low-rank output */
    float *cmp;             /* (n_batch, max df_cstate_width) compressor rows of this pass (dsv4.c) */
    float *lid_q, *lid_w;   /* (n_batch, ds4_idx_heads * ds4_idx_dim), (n_batch, ds4_idx_heads) indexer queries, weights */
    const int32_t *moe_tokens; /* this pass's token ids while hash-routed layers run (moe.c), else NULL */
    /* the MTP block (hp.n_layer_mtp; mtp.c): its KV cache is layer n_layer's memory */
    float *mtp_h;           /* (n_batch + 1, n_embd) the target's hidden rows of positions mtp_base.. */
    int mtp_base, mtp_rows; /* (after the final norm): those of the last batch and the one before it */
    int mtp_stopped;        /* df_mtp_stop: the block no longer runs after batches (nor guesses) */
    float *mtp_in;          /* (n_batch, 2 * n_embd) [enorm(embedding) | hnorm(hidden)] */
    float *mtp_out;         /* (n_batch, n_embd) the block's output after shared_head_norm */
    mm_scratch mm;
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
/* The part of them that deepseek4's compressed layers keep (0s for other
 * models): compressed keys, indexer keys (ratio-4 layers) and compressor
 * states, in bytes. Returns the session's context (0: too large). */
int df_session_comp_bytes(const df_model *m, const df_session_params *p, uint64_t *comp, uint64_t *lid,
                          uint64_t *state);

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
void df_rec_conv(df_session *s, int l, int64_t c0, float *x, int n, int64_t ch, const float *w);
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
/* The DSA indexer's key cache of layer l (a layer that selects; others
 * have none): store n_tok keys (idx_head_dim floats each) at s->pos..;
 * the bytes of one cached row (0: layer l has no such cache); its rows from
 * position 0 on, row_bytes apart, in the KV element type (df_mem_kv_type). */
void df_mem_idx_store(df_session *s, int l, int n_tok, const float *k);
size_t df_mem_idx_row_bytes(const df_session *s, int l);
uint8_t *df_mem_idx_rows(df_session *s, int l);
/* deepseek4's compressed layer l (others: NULL): its compressed keys (one
 * row of head_dim per block of comp_ratio[l] positions, block b in row b),
 * its indexer's (ratio 4: rows of ds4_idx_dim), and its compressors' state:
 * df_cstate_rows rows of df_cstate_width floats, position p in row
 * p % df_cstate_rows (kv, score, then for ratio 4 the indexer's kv, score). */
float *df_mem_comp(df_session *s, int l);
/* A discrete choice inside the model (a router's experts, an indexer's keys) made
 * for session o's row at position pos in layer l with this margin (df_moe_select,
 * op_top_k_margin): written to o's near-tie trace when it is at most the trace's
 * eps (format: df_session_trace_ties). */
void df_note_choice(df_session *o, int64_t pos, int l, const char *what, float margin);
float *df_mem_lid(df_session *s, int l);
float *df_mem_cstate(df_session *s, int l);
/* deepseek4 layer l's floats of compressed keys and indexer keys for n_ctx
 * positions (the blocks begun), and of its compressors' state (0, 0, 0:
 * not a compressed layer). */
void df_mem_comp_floats(const df_hparams *h, int l, int64_t n_ctx, int64_t *comp, int64_t *lid, int64_t *state);
int df_cstate_rows(const df_hparams *h, int l);
int64_t df_cstate_width(const df_hparams *h, int l);

#endif
