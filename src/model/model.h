/*
 * model.h - internal model and session structures, and the architecture table.
 *
 * DESIGN
 * State is split three ways, as in llama2.c:
 *   df_hparams  - hyperparameters read from metadata (immutable);
 *   df_model    - weight handles (ws_tensor, reached only through the weight
 *                 store), tokenizer, thread pool;
 *   df_session  - the run state: per-layer memory (df_layer_mem: KV cache,
 *                 MLA latent cache or recurrent state) and scratch buffers,
 *                 allocated once when the session is created; nothing is
 *                 allocated per token.
 * Each supported general.architecture is one df_arch entry: a function that
 * reads its extra hyperparameters and binds its tensors, and a forward
 * function. One file per family (arch_llama.c: llama, qwen2, qwen3;
 * arch_deepseek2.c; arch_kimi.c: kimi-linear, kimi-k3; arch_glm4moe.c;
 * arch_minimax_m2.c; arch_gptoss.c).
 */
#ifndef DF_MODEL_H
#define DF_MODEL_H

#include <stdio.h>

#include "deltafin.h"
#include "gguf.h"
#include "matmul.h"
#include "ops.h"
#include "threads.h"
#include "tokenizer.h"
#include "wstore.h"

typedef struct df_hparams {
    int n_vocab;
    int n_ctx_train;
    int n_embd;
    int n_layer;         /* layers of the forward pass (block_count less n_layer_nextn) */
    int n_layer_nextn;   /* NextN/MTP blocks after them (nextn_predict_layers): never run or read */
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
    int n_expert_shared;   /* deepseek2: shared experts folded into one FFN of n_ff_exp * count */
    int n_ff_exp;          /* hidden size of one routed expert */
    int n_ff_shexp;        /* hidden size of the shared expert FFN */
    int n_layer_dense_lead;/* leading layers with a dense FFN */
    int gating;            /* DF_GATING_SOFTMAX, DF_GATING_SIGMOID or DF_GATING_SOFTMAX_WEIGHT */
    int expert_weights_norm;
    float expert_weights_scale;
    int n_expert_groups;   /* group-limited routing (0 or 1: off) */
    int n_group_used;
    /* Multi-head latent attention (deepseek2) */
    int q_lora_rank;       /* 0: plain wq */
    int kv_lora_rank;
    int qk_nope;           /* non-RoPE part of a query/key head */
    int mla_split;         /* 1: attn_k_b/attn_v_b tensors; 0: combined attn_kv_b */
    /* Per-layer arrays (NULL: the scalar applies to every layer). Owned by
     * the model, freed with it. */
    uint8_t *recurrent;    /* 1: a recurrent (linear attention) layer: head_count_kv[l] == 0 */
    int32_t *n_ff_l;       /* feed_forward_length per layer */
    int n_layer_recurrent; /* layers with recurrent[l] */
    /* Recurrent (KDA) layers: the memory they keep per sequence */
    int ssm_d_conv;        /* short convolution kernel (ssm.conv_kernel) */
    int kda_head_dim;      /* delta-rule head size (kda.head_dim); 0: no recurrent layers */
    int kda_n_head;        /* delta-rule heads (attention.head_count) */
    float kda_gate_lb;     /* kda.gate_lower_bound ("safe" gate), or -INFINITY: kimi-linear's softplus gate */
    /* kimi-k3 */
    int attn_res_block;    /* attn_res.block_size: bank a checkpoint every this many layers (0: off) */
    int n_expert_latent;   /* expert_latent_length: routed experts' width (0: n_embd) */
    int act;               /* DF_ACT_SWIGLU or DF_ACT_SITU */
    int mla_gate;          /* MLA layers may have a sigmoid output gate (attn_gate) */
    float situ_beta, situ_linear_beta;
    /* gpt-oss: sliding-window attention layers */
    int n_swa;             /* attention.sliding_window (0: none) */
    uint8_t *swa;          /* (n_layer) 1: a sliding-window layer; NULL: none. Owned by the model */
    float rope_base_swa;   /* rope.freq_base_swa: the window layers' RoPE base */
} df_hparams;

enum { DF_ACT_SWIGLU = 0, DF_ACT_SITU = 1, DF_ACT_SWIGLU_OAI = 2 };

/* What one layer of a session remembers (df_session.mem[l]). */
enum { DF_MEM_KV = 1, DF_MEM_LATENT = 2, DF_MEM_RECURRENT = 3 };

typedef struct df_layer_mem {
    int kind;
    uint8_t *k, *v;        /* KV: n_ctx rows of kv_dim_k / kv_dim_v; LATENT: k only (one latent per position) */
    int ring;              /* KV of a sliding-window layer: this many rows, position p in row p % ring (0: n_ctx rows) */
    float *conv;           /* RECURRENT: short-conv states, (3 [q, k, v], d_inner, d_conv - 1) */
    float *state;          /* RECURRENT: delta-rule state, (n_head, head_dim [key], head_dim [value]) */
} df_layer_mem;

/* SOFTMAX_WEIGHT (gpt-oss): top-k of the raw logits, softmax over the chosen */
enum { DF_GATING_SOFTMAX = 1, DF_GATING_SIGMOID = 2, DF_GATING_SOFTMAX_WEIGHT = 3 };

typedef struct df_layer {
    ws_tensor *attn_norm;
    ws_tensor *wq, *wk, *wv, *wo;
    ws_tensor *bq, *bk, *bv, *bo;     /* optional biases */
    ws_tensor *q_norm, *k_norm;       /* qwen3: per-head RMSNorm weights */
    ws_tensor *ffn_norm;
    ws_tensor *ffn_gate, *ffn_up, *ffn_down;
    /* mixture of experts */
    ws_tensor *ffn_gate_inp;                       /* router (n_embd -> n_expert) */
    ws_tensor *exp_probs_b;                        /* selection bias (deepseek v3) */
    ws_tensor *ffn_gate_exps, *ffn_up_exps, *ffn_down_exps; /* (n_in, n_out, n_expert) */
    ws_tensor *ffn_gate_shexp, *ffn_up_shexp, *ffn_down_shexp;
    ws_tensor *ffn_gate_inp_shexp;                 /* qwen2moe: sigmoid gate of the shared expert */
    ws_tensor *ffn_gate_inp_b;                     /* gpt-oss: router bias (n_expert) */
    ws_tensor *ffn_gate_exps_b, *ffn_up_exps_b, *ffn_down_exps_b; /* gpt-oss: per-expert biases (n_out, n_expert) */
    ws_tensor *attn_sinks;                         /* gpt-oss: one softmax sink logit per head */
    /* multi-head latent attention */
    ws_tensor *wq_a, *q_a_norm, *wq_b;
    ws_tensor *wkv_a_mqa, *kv_a_norm;
    ws_tensor *wk_b, *wv_b, *wkv_b;
    ws_tensor *attn_gate;                          /* kimi-k3: sigmoid output gate of MLA */
    /* KDA (kimi's linear attention) */
    ws_tensor *ssm_conv[3];                        /* short convolutions of q, k, v: (d_conv, 1, d_inner) */
    ws_tensor *ssm_f_a, *ssm_f_b, *ssm_beta, *ssm_a, *ssm_dt_b;
    ws_tensor *ssm_g_a, *ssm_g_b, *ssm_g;          /* output gate: low rank (kimi-linear) or full (kimi-k3) */
    ws_tensor *ssm_o_norm;
    /* kimi-k3 */
    ws_tensor *attn_res_score, *ffn_res_score;     /* cross-layer residual attention */
    ws_tensor *ffn_routed_down, *ffn_routed_up, *ffn_routed_norm; /* latent MoE */
} df_layer;

struct df_session;

typedef struct df_arch {
    const char *name;
    int rope_neox;                                      /* default RoPE layout */
    int (*hparams)(df_model *m, char *err, size_t errlen); /* arch-specific hyperparameters, or NULL */
    int (*bind)(df_model *m, char *err, size_t errlen);    /* tensors */
    int (*forward)(struct df_session *s, const int32_t *tokens, int n, float *logits, int all_logits, char *err,
                   size_t errlen);
} df_arch;

struct df_model {
    char *path;
    gguf_ctx *g;
    wstore *ws;
    tok_vocab *vocab;
    const df_arch *arch;
    const char *arch_name;
    df_hparams hp;
    ws_tensor *tok_embd, *output_norm, *output, *rope_freqs;
    ws_tensor *output_res_score;  /* kimi-k3: the final residual mix */
    df_layer *layers;
    tp_pool *pool;
    int n_threads;
    int io_threads;         /* concurrent disk reads when streaming */
    uint64_t session_reserve; /* memory budget: bytes reserved for one session (0: no budget) */
    char *hot_path;           /* learned hot-expert file beside the model (allocated: any path length) */
    int vocab_only;           /* df_model_params.vocab_only: metadata and tokenizer, no weights */
};

/* Rows of a sliding-window layer's KV ring for this context and batch (a
 * multiple of 64, at least the window plus a batch's new keys), or 0 when
 * the model has no window or n_ctx rows are no more. */
int df_kv_ring(const df_hparams *h, int n_ctx, int n_batch);
/* Floats of one recurrent layer's short-conv and delta-rule states. */
int64_t df_rec_conv_floats(const df_hparams *h);
int64_t df_rec_state_floats(const df_hparams *h);

/* Bytes a session with these parameters allocates (for the memory planner). */
uint64_t df_session_bytes(const df_model *m, const df_session_params *p);

struct df_session {
    df_model *m;
    int n_ctx, n_batch, kv_type, pos;
    int rec_broken;         /* a decode failed midway through recurrent layers: their state is unusable until a reset */
    size_t kv_elt;          /* bytes per cached element (4 or 2) */
    int64_t kv_dim_k, kv_dim_v; /* n_head_kv * head_dim(_v) */
    df_layer_mem *mem;      /* (n_layer) per-layer memory, pointing into the buffers below */
    uint8_t *k_cache;       /* (attention layers, n_ctx, kv_dim_k) */
    uint8_t *v_cache;       /* (KV layers, n_ctx, kv_dim_v) */
    float *rec_conv;        /* (recurrent layers, df_rec_conv_floats) */
    float *rec_state;       /* (recurrent layers, df_rec_state_floats) */
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
    int64_t att_stride;     /* floats per thread: df_attn_scratch() */
    /* mixture of experts scratch */
    float *router;          /* (n_batch, n_expert) router probabilities */
    int32_t *topk_id;       /* (n_batch, n_expert_used) */
    float *topk_w;          /* (n_batch, n_expert_used) */
    int32_t *tok_of;        /* (n_batch * n_expert_used) tokens grouped by expert */
    int32_t *slot_of;       /* same, the slot within the token's top-k */
    float *ex_x, *ex_h, *ex_h2, *ex_y; /* gathered rows for one expert */
    float *ex_out;          /* (n_batch * n_expert_used, n_embd) each (token, slot)'s expert output */
    FILE *trace;            /* --trace-experts: routing records, or NULL */
    const float *moe_hint;  /* the residual the MoE lookahead reads (NULL: s->x); kimi-k3: the FFN's residual mix */
    /* MLA scratch */
    float *q_abs;           /* (n_batch, n_head, kv_lora_rank + n_rot) absorbed queries */
    float *lat;             /* (n_batch, kv_lora_rank + n_rot) new latents */
    float *o_lat;           /* (n_batch, n_head, kv_lora_rank) attention output in latent space */
    float *mla_tmp;         /* (n_batch, max(kv_lora_rank, qk_nope, q_lora_rank)) */
    float *rope_cache;      /* (n_batch, n_rot) */
    float *logits;          /* (n_batch, n_vocab) */
    /* KDA scratch (models with recurrent layers), d_inner = kda_n_head * kda_head_dim */
    float *kda_q, *kda_k, *kda_v, *kda_g, *kda_o; /* (n_batch, d_inner) each */
    float *kda_beta;        /* (n_batch, kda_n_head) */
    float *kda_lo;          /* (n_batch, kda_head_dim) low-rank intermediate */
    /* kimi-k3 scratch */
    float *res_stack;       /* (checkpoints, n_batch, n_embd) cross-layer residual checkpoints */
    float *res_mix;         /* (n_batch, n_embd) the mixed residual a block reads */
    float *res_scores;      /* (checkpoints + 1) one token's mixing scores */
    float *mla_gate;        /* (n_batch, n_head * head_dim_v) MLA output gate */
    float *lat_in, *lat_out;/* (n_batch, n_embd) latent MoE input and output */
    mm_scratch mm;
};

/* Architecture lookup by general.architecture; NULL if unsupported. */
const df_arch *df_arch_find(const char *name);

/* Shared helpers for architecture files. */
ws_tensor *df_tensor(df_model *m, const char *fmt, int layer, int required, char *err, size_t errlen);
/* Bind tensor fmt (with %d = layer l) and check its shape [ne0, ne1, ne2];
 * vectors (ne1 = ne2 = 1) must be f32. An optional tensor that is absent
 * leaves *dst NULL and succeeds. */
int df_bind(df_model *m, ws_tensor **dst, const char *fmt, int l, int required, int64_t ne0, int64_t ne1,
            int64_t ne2, char *err, size_t errlen);
/* token_embd (its rows set n_vocab), output_norm, and output (token_embd when absent: tied). */
int df_bind_embed_output(df_model *m, char *err, size_t errlen);
/* "<arch>.<suffix>" as an integer in [lo, hi]; absent optional keys keep *out. */
int df_hp_int(df_model *m, const char *suffix, int *out, int lo, int hi, int required, char *err, size_t errlen);
/* "<arch>.<suffix>" if it is a per-layer array: n_layer integers, each in
 * [lo, hi], into a new array *out (NULL if the key is absent or a scalar). */
int df_hp_layers(df_model *m, const char *suffix, int32_t **out, int lo, int hi, char *err, size_t errlen);
/* Layer l's feed-forward block on s->x: RMSNorm, dense or MoE FFN, residual. */
int df_ffn_block(df_session *s, int l, int n, char *err, size_t errlen);
/* Final RMSNorm and output projection of the last token (or all n). */
int df_output(df_session *s, int n, float *logits, int all_logits, char *err, size_t errlen);
int df_check_shape(const ws_tensor *t, int64_t ne0, int64_t ne1, char *err, size_t errlen);
int df_matmul(df_session *s, ws_tensor *w, const float *x, int n_tok, float *y, int64_t ldy, char *err,
              size_t errlen);
/* n_w (<= MM_MAX_OPS) products of the same input x, e.g. Q, K and V: y[i]
 * (stride ldy[i]) = w[i] x. x is converted once and all run in one pass of
 * the pool; the results are those of separate df_matmul calls. */
int df_matmul_n(df_session *s, int n_w, ws_tensor *const *w, const float *x, int n_tok, float *const *y,
                const int64_t *ldy, char *err, size_t errlen);
int df_embed(df_session *s, const int32_t *tokens, int n, float *out, char *err, size_t errlen);
void df_add_bias(df_session *s, ws_tensor *b, float *y, int n_tok, int64_t ld);
/* attn.c: causal attention of n_tok queries (n_head * head_dim each) at
 * positions s->pos.. against layer's cache (already holding their own keys
 * and values) into out (n_tok rows of n_head * head_dim_v); writing n_tok
 * rows of keys and values (v NULL: keys only, MLA) at s->pos..; and the
 * per-thread floats of s->att attention needs. */
void df_attention(df_session *s, int layer, int n_tok, const float *q, float *out);
/* The same with one sink logit per head (sinks may be NULL). Both honour the
 * layer's sliding window (hparams swa / n_swa) and its ring. */
void df_attention_sinks(df_session *s, int layer, int n_tok, const float *q, float *out, const float *sinks);
void df_kv_store(df_session *s, int layer, int n_tok, const float *k, const float *v);
int64_t df_attn_scratch(const df_hparams *h, int n_ctx);
/* The general form, for caches laid out otherwise (MLA: one latent row per
 * position serves as key, and its first hdv elements as value). Query token
 * t of head hh is q[t * q_tok + hh * q_head] (hd floats) at position pos + t;
 * its output goes to out[t * o_tok + hh * o_head] (hdv floats). */
typedef struct df_attn_desc {
    const uint8_t *k, *v;       /* position 0, KV head 0 of the layer */
    size_t k_stride, v_stride;  /* bytes between positions */
    size_t k_head, v_head;      /* bytes between KV heads */
    int kv_type;                /* DF_TYPE_F32 or DF_TYPE_F16 */
    int n_head, n_head_kv, hd, hdv;
    const float *q;
    int64_t q_tok, q_head;
    float *out;
    int64_t o_tok, o_head;
    float scale;                /* applied to q.k before the softmax */
    int pos, n_tok;
    int window;                 /* > 0: a query at p reads keys (p - window, p] only (sliding window) */
    int ring;                   /* > 0: position p is cache row p % ring (a multiple of 64) */
    const float *sinks;         /* (n_head) extra softmax logits, or NULL */
} df_attn_desc;
void df_attention_run(df_session *s, const df_attn_desc *d);
/* Dense SwiGLU FFN: out = down(silu(gate x) * up x), using s->hb/s->hb2. */
int df_ffn_dense(df_session *s, ws_tensor *gate, ws_tensor *up, ws_tensor *down, const float *x, int n, float *out,
                 char *err, size_t errlen);
/* Mixture-of-experts FFN of layer l (router, top-k, experts grouped by expert,
 * shared experts); out (n, n_embd) is overwritten. moe.c */
int df_ffn_moe(df_session *s, int l, const float *x, int n, float *out, char *err, size_t errlen);
/* Its two halves. Routed experts: the router reads xr (n_embd wide), the
 * experts read x and write out at their own width (n_embd, or kimi-k3's
 * expert_latent_length). Shared experts: added to out (n_embd wide). */
int df_ffn_moe_routed(df_session *s, int l, const float *xr, const float *x, int n, float *out, char *err,
                      size_t errlen);
int df_ffn_moe_shared(df_session *s, int l, const float *x, int n, float *out, char *err, size_t errlen);
/* The FFN's gated activation in place: a = act(a, b) over n floats, SwiGLU
 * (silu(a) * b) or kimi-k3's SiTU (h->act). */
void df_glu(const df_hparams *h, float *a, const float *b, int n);
/* df_glu with SiTU's long rows split over the pool (element by element the
 * same arithmetic, so the same bits); SwiGLU and short rows on the caller. */
void df_glu_pool(tp_pool *pool, const df_hparams *h, float *a, const float *b, int n);
/* Streaming only: guess layer l's experts from the hidden state x (one token,
 * before layer l's attention) and ask the store to read them ahead. moe.c */
void df_moe_lookahead(df_session *s, int l, const float *x);
/* Read and check the MoE hyperparameters and tensors of layer l (bind time). moe.c */
int df_moe_read_hparams(df_model *m, char *err, size_t errlen);
int df_moe_bind_layer(df_model *m, int l, int n_ff_exp, char *err, size_t errlen);
/* The router's pieces, exposed for tests: router logits -> probabilities
 * (softmax or sigmoid, in place), then top-k selection on one token's
 * probabilities (with optional bias and groups) giving ids and weights. */
void df_moe_probs(const df_hparams *h, float *p);
void df_moe_select(const df_hparams *h, const float *probs, const float *bias, int32_t *ids, float *w);

/* Defined per architecture file. */
extern const df_arch df_arch_llama, df_arch_qwen2, df_arch_qwen3, df_arch_qwen2moe, df_arch_qwen3moe,
    df_arch_deepseek2, df_arch_kimi_linear, df_arch_kimi_k3, df_arch_glm4moe,
    df_arch_minimax_m2, df_arch_gptoss;
/* arch_llama.c's forward pass (also glm4moe's: the same block with other tensors bound). */
int df_llama_forward(df_session *s, const int32_t *tokens, int n, float *logits, int all_logits, char *err,
                     size_t errlen);

/* arch_deepseek2.c: layer l's multi-head latent attention on the normed
 * input s->xb (n tokens), storing the latents in the layer's cache; the
 * output (n, n_head * head_dim_v), before attn_output, goes to s->xb.
 * rope = 0: no RoPE (kimi's NoPE MLA). */
int df_mla_attention(df_session *s, int l, int n, int rope, char *err, size_t errlen);
int df_mla_hparams(df_model *m, char *err, size_t errlen);
int df_mla_bind_layer(df_model *m, int l, char *err, size_t errlen);

#endif
