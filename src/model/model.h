/*
 * model.h - what a loaded model is: hyperparameters, weight handles, and the
 * architecture table's entry type. The bottom of src/model: every other file
 * here and every architecture reads these types; this header declares no
 * functions of its own.
 *
 * DESIGN
 * State is split three ways, as in llama2.c:
 *   df_hparams  - hyperparameters read from metadata (immutable);
 *   df_model    - weight handles (ws_tensor, reached only through the weight
 *                 store), tokenizer, thread pool (this header);
 *   df_session  - the run state (session.h): per-layer memory, owned and
 *                 indexed only by session.c, and scratch buffers, allocated
 *                 once when the session is created; nothing per token.
 * Each supported general.architecture is one df_arch entry: a function that
 * reads its extra hyperparameters and binds its tensors, and a forward
 * function. One file per family in src/arch/ (the table is in
 * src/api/header.c; docs/design.md says which file holds which families).
 * What only one family has -- hyperparameters, tensors, session memory and
 * scratch -- is private to its file (m->fam_hp, m->fam_tensors, df_layer.fam,
 * the df_arch layout hooks); these types hold the core and the blocks several
 * families share (tests/cli/rooms.sh keeps it so).
 *
 * Who includes whom (arrows point down; docs/design.md):
 *   src/api/header.c        the arch table; load.c, plan.c: loading, planning
 *   src/arch/arch_*.c       forward passes (arch.h, mla.h)
 *   decode.c                df_decode(_batch): calls forward through df_arch
 *   layer.c, moe.c          helpers the forward passes share (layer.h, moe.h)
 *   session.c               session memory and scratch (session.h)
 *   bind.c                  metadata and tensor binding helpers (bind.h)
 *   model.h                 these types
 */
#ifndef DF_MODEL_H
#define DF_MODEL_H

#include <pthread.h>
#include <stdio.h>

#include "deltafin.h"
#include "gguf.h"
#include "threads.h"
#include "tokenizer.h"
#include "wstore.h"

typedef struct df_hparams {
    int n_vocab;
    int n_ctx_train;
    int n_embd;
    int n_layer;         /* layers of the forward pass (block_count less n_layer_nextn) */
    int hidden_not_rows; /* the last hidden state is not one row per token (df_decode_hidden refuses) */
    int n_layer_nextn;   /* NextN/MTP blocks after them (nextn_predict_layers): never run or read, */
    int n_layer_mtp;     /* except the first one when the model is loaded with df_model_params.mtp: 1 here,
                          * bound as layers[n_layer], planned and read (mtp.c runs it; spec.c guesses with it) */
    int mtp_arch;        /* the architecture's hparams say it can run its NextN block (mtp.c) */
    int n_head;
    int n_head_kv;
    int head_dim;        /* key/query head size (attention.key_length) */
    int head_dim_v;      /* value head size (attention.value_length) */
    int n_ff;
    int n_rot;           /* rope.dimension_count */
    float norm_eps;
    /* RoPE */
    int rope_neox;
    float rope_base;
    float rope_freq_scale;
    float yarn_ext_factor;
    float yarn_attn_factor;
    float yarn_beta_fast;
    float yarn_beta_slow;
    int n_ctx_orig;
    float kq_scale;      /* attention score scale (1/sqrt(head_dim) unless the arch says otherwise) */
    /* Mixture of experts (n_expert == 0: dense) */
    int n_expert;
    int n_expert_used;
    int n_expert_shared;   /* shared experts folded into one FFN of n_ff_exp * count (0: not given) */
    int n_ff_exp;          /* hidden size of one routed expert */
    int n_ff_shexp;        /* hidden size of the shared expert FFN */
    int n_layer_dense_lead;/* leading layers with a dense FFN */
    int gating;            /* DF_GATING_SOFTMAX, DF_GATING_SIGMOID or DF_GATING_SOFTMAX_WEIGHT */
    int expert_weights_norm;
    float expert_weights_scale;
    int n_expert_groups;   /* group-limited routing (0 or 1: off) */
    int n_group_used;
    /* Multi-head latent attention (mla.c) */
    int q_lora_rank;       /* 0: plain wq */
    int kv_lora_rank;
    int qk_nope;           /* non-RoPE part of a query/key head */
    int mla_split;         /* 1: attn_k_b/attn_v_b tensors; 0: combined attn_kv_b */
    /* Per-layer arrays (NULL: the scalar applies to every layer). Owned by
     * the model, freed with it. */
    uint8_t *recurrent;    /* 1: a recurrent (linear attention) layer: head_count_kv[l] == 0 */
    int32_t *n_ff_l;       /* feed_forward_length per layer */
    int n_layer_recurrent; /* layers with recurrent[l] */
    /* Recurrent (delta-rule) layers: the memory they keep per sequence (each family's hparams hook
     * says which of its keys fill these) */
    int ssm_d_conv;        /* short convolution kernel (ssm.conv_kernel) */
    int kda_head_dim;      /* delta-rule head size; 0: no recurrent layers */
    int kda_n_head;        /* delta-rule (state, value) heads */
    int kda_n_head_k;      /* query/key heads (a divisor of kda_n_head) */
    int64_t ssm_conv_ch;   /* channels of the short convolution (q, k and v side by side) */
    int gdn;               /* gated delta net: fused qkv, one decay per head (else one per key channel) */
    int attn_q_gate;       /* attn_q holds query and output gate interleaved per head */
    int act;               /* DF_ACT_*: the FFN's activation */
    int attn_out_gate;     /* attention output times sigmoid(gate) (the gate: a tensor, or attn_q's half) */
    float situ_beta, situ_linear_beta;
    /* sliding-window attention layers */
    int n_swa;             /* attention.sliding_window (0: none) */
    uint8_t *swa;          /* (n_layer) 1: a sliding-window layer; NULL: none. Owned by the model */
    float swiglu_limit;    /* swiglu_clamp_exp: DF_ACT_SWIGLU_CLAMP's bound */
} df_hparams;

/* The FFN's activations: layer.c's df_glu says what each computes */
enum { DF_ACT_SWIGLU = 0, DF_ACT_SITU = 1, DF_ACT_SWIGLU_OAI = 2, DF_ACT_SWIGLU_CLAMP = 3 };

/* SOFTMAX_WEIGHT: top-k of the raw logits, softmax over the chosen;
 * SQRT_SOFTPLUS: sqrt(softplus(logit)) */
enum { DF_GATING_SOFTMAX = 1, DF_GATING_SIGMOID = 2, DF_GATING_SOFTMAX_WEIGHT = 3, DF_GATING_SQRT_SOFTPLUS = 4 };

typedef struct df_layer {
    ws_tensor *attn_norm;
    ws_tensor *wq, *wk, *wv, *wo;
    ws_tensor *bq, *bk, *bv, *bo;     /* optional biases */
    ws_tensor *q_norm, *k_norm;       /* per-head RMSNorm weights */
    ws_tensor *ffn_norm;
    ws_tensor *ffn_gate, *ffn_up, *ffn_down;
    /* mixture of experts */
    ws_tensor *ffn_gate_inp;                       /* router (n_embd -> n_expert) */
    ws_tensor *exp_probs_b;                        /* selection bias (moves choices, not weights) */
    ws_tensor *ffn_gate_exps, *ffn_up_exps, *ffn_down_exps; /* (n_in, n_out, n_expert) */
    ws_tensor *ffn_gate_shexp, *ffn_up_shexp, *ffn_down_shexp;
    ws_tensor *ffn_gate_inp_shexp;                 /* sigmoid gate of the shared expert */
    ws_tensor *ffn_gate_inp_b;                     /* router bias (n_expert) */
    ws_tensor *ffn_gate_exps_b, *ffn_up_exps_b, *ffn_down_exps_b; /* per-expert biases (n_out, n_expert) */
    ws_tensor *attn_sinks;                         /* one softmax sink logit per head */
    /* multi-head latent attention */
    ws_tensor *wq_a, *q_a_norm, *wq_b;
    ws_tensor *wkv_a_mqa, *kv_a_norm;
    ws_tensor *wk_b, *wv_b, *wkv_b;
    /* delta-rule (linear attention) layers: ssm_conv[0] alone is one convolution of the fused qkv */
    ws_tensor *ssm_conv[3];                        /* short convolutions of q, k, v: (d_conv, 1, d_inner) */
    ws_tensor *ssm_beta, *ssm_a, *ssm_dt_b;
    ws_tensor *ssm_g;                              /* full-rank output gate */
    ws_tensor *ssm_o_norm;
    ws_tensor *wqkv;                               /* attn_qkv: q, k and v in one projection */
    /* sparse attention's lightning indexer (a layer that selects the keys it attends to) */
    ws_tensor *idx_wq_b;                           /* q LoRA -> indexer queries (n_head x head_dim) */
    ws_tensor *idx_wk, *idx_k_norm, *idx_k_norm_b; /* n_embd -> one key; LayerNorm weight and bias */
    ws_tensor *idx_proj;                           /* n_embd -> per-head weights */
    ws_tensor *ffn_tid2eid;                        /* hash routing: i32 (n_expert_used, n_vocab) expert ids */
    void *fam;        /* the family's own tensors of this layer (an entry of m->fam_tensors), or NULL */
    /* a NextN/MTP block (layers[n_layer] when hp.n_layer_mtp): eh_proj (2 * n_embd -> n_embd) of
     * [enorm(embedding) | hnorm(hidden)]; its own head's norm, embedding and head (optional) */
    ws_tensor *nextn_eh_proj, *nextn_enorm, *nextn_hnorm, *nextn_head_norm, *nextn_embed, *nextn_head;
} df_layer;

struct df_session;
struct df_mem_decl;
struct df_layout;

typedef struct df_arch {
    const char *name;
    int rope_neox;                                      /* default RoPE layout */
    int (*hparams)(df_model *m, char *err, size_t errlen); /* arch-specific hyperparameters, or NULL */
    int (*bind)(df_model *m, char *err, size_t errlen);    /* tensors */
    /* The forward pass of n rows in s's scratch. own NULL: n consecutive
     * tokens of s at s->pos.. (s->pos advances). Otherwise row t is one token
     * of session own[t] (n <= s->n_batch; a batched generation step): every
     * product runs once over all rows, attention and recurrent states per
     * row against its own session's memory at its own position, which does
     * not advance (decode.c does). logits: the last row's, or all rows'. */
    int (*forward)(struct df_session *s, struct df_session *const *own, const int32_t *tokens, int n, float *logits,
                   int all_logits, char *err, size_t errlen);
    /* What the family keeps and computes in beyond what session.c knows
     * (session.h's df_mem_decl, df_layout; any may be NULL/0): the items
     * layer l keeps (up to DF_MEM_ITEMS into d; returns how many), the
     * bytes of its per-session struct (s->fam), and its scratch, declared
     * into that struct. */
    int (*layer_mem)(const df_model *m, int l, struct df_mem_decl *d);
    size_t fam_bytes;
    void (*scratch)(const df_model *m, struct df_layout *lay);
    /* A pipeline's carry (pipe.h): the rows of n_embd floats per token one
     * rank hands the next (NULL: 1, the residual). */
    int (*carry_rows)(const df_model *m);
} df_arch;

struct df_model {
    char *path;
    gguf_ctx *g;
    wstore *ws;
    tok_vocab *vocab;
    const df_arch *arch;
    const char *arch_name;
    df_hparams hp;
    void *fam_hp;           /* the family's own hyperparameters, or NULL: its hparams hook makes them (one
                             * allocation, freed with the model) */
    ws_tensor *tok_embd, *output_norm, *output, *rope_freqs;
    void *fam_tensors;      /* the family's own tensor handles (its bind hook makes them: one allocation, freed
                             * with the model, forgotten with the handles), or NULL */
    df_layer *layers;       /* n_layer + hp.n_layer_mtp */
    /* the MTP block's decoder block (hp.n_layer_mtp): layer l over n consecutive rows of s->x at
     * s->pos.. (RoPE cache filled), in place, as the forward pass runs its layers (set by bind) */
    int (*mtp_block)(struct df_session *s, int l, int n, char *err, size_t errlen);
    tp_pool *pool;
    int n_threads;
    int io_threads;         /* concurrent disk reads when streaming */
    uint64_t session_reserve; /* memory budget: bytes reserved for one session's own memory (0: no budget) */
    uint64_t scratch_reserve; /* and for the scratch all sessions share (session.c, df_session_bind_scratch) */
    struct df_scratch *scratch; /* that shared scratch (session.c); NULL before the first session */
    char *hot_path;           /* learned hot-expert file beside the model (allocated: any path length) */
    int vocab_only;           /* df_model_params.vocab_only: metadata and tokenizer, no weights */
    pthread_mutex_t decode_mu; /* one decode at a time (decode.c); also guards the store's pins and counters */
    int decode_mu_init;
    /* step counters, under decode_mu (df_io_stats): forward passes (a batched
     * step is one) and the tokens they ran (decode.c); MoE layers run and the
     * distinct experts they ran, the union of the rows' choices (moe.c) */
    uint64_t n_passes, n_pass_rows, n_moe_runs, n_union_experts;
    struct gram_vocab *gram_vocab; /* the vocabulary sorted for constrained sampling (api/constrain.c), built on
                              * first use under gram_mu */
    pthread_mutex_t gram_mu;
    struct ep_state *ep;      /* expert parallel over a cluster (expar.h); NULL: this process runs every expert */
    struct pp_state *pp;      /* pipeline parallel over a cluster (pipe.h); NULL: this process runs every layer */
    int stage_lo, stage_hi;   /* with pp: the layers this rank runs, [lo, hi), and so the layers its sessions keep
                               * memory for (session.c); stage_hi 0: every layer */
    int stage_outputs;        /* with pp: this rank computes the output (rank 0), so its sessions keep logits */
    void (*session_freed)(struct df_session *s); /* rank 0 of a pipeline: tell the others (df_pipe_freed) */
    int ep_loaded;            /* rank 0: the other ranks hold their share (df_model_free tells them to drop it) */
};

#endif
