/*
 * mkmodel - writes a synthetic GGUF model for any supported architecture and
 * tensor type, with a working byte-level BPE vocabulary.
 *
 * The weights are random but deterministic (each tensor's values depend only
 * on the seed and the tensor's name) and scaled so activations stay sane:
 * linear weights are uniform with variance gain^2/n_in (gain 0.5 for Q and K,
 * so attention is neither uniform nor one-hot), norms are near 1,
 * the output projection gives logits with a standard deviation of about 3,
 * so the argmax at every position is well separated. Tensors are generated
 * row by row and streamed to disk, so multi-gigabyte models need little
 * memory.
 *
 *   mkmodel -o tiny.gguf [--arch ARCH] [--type q4_K] [--expert-type mxfp4] [--preset NAME] [dimension flags...]
 *
 * Architectures: llama (dense, or Mixtral-style with --experts), qwen2, qwen3,
 * qwen2moe, qwen3moe, deepseek2, deepseek32, glm-dsa. Presets keep each family's real structure
 * at a small size: tiny/small/medium/1b (dense llama), mixtral-tiny,
 * qwen2moe-tiny, qwen3moe-tiny, deepseek-v3-tiny (MLA with q LoRA and split
 * attn_k_b/attn_v_b, sigmoid routing with groups and a selection bias, one
 * shared expert, one leading dense layer, YaRN), deepseek-v2-tiny (combined
 * attn_kv_b, softmax routing without groups or bias, two shared experts)
 * and deepseek-v2-lite-tiny (the same without q LoRA; 26 layers, which is
 * how llama.cpp recognises a "lite" model), kimi-linear-tiny (KDA and NoPE
 * MLA layers per --schedule, e.g. KKKM) and kimi-k3-tiny (plus residual
 * attention, latent MoE, SiTU, the KDA gate bound and the MLA gate),
 * glm4moe-tiny (GLM-4.5: half-rotated heads, Q/K norms and biases, sigmoid
 * routing with a shared expert, and a NextN/MTP block past the layers),
 * minimax-m2-tiny (MiniMax M2: Q/K norms over all heads, half-rotated
 * heads, sigmoid routing without a shared expert), gpt-oss-tiny (sinks,
 * sliding windows on alternate layers, biased experts, swiglu_oai),
 * deepseek32-tiny (DeepSeek V3.2: deepseek-v3-tiny plus the DSA lightning
 * indexer, top-k 16 so that 80-token prompts select) and glm-dsa-tiny
 * (GLM-5: the same with GLM's routing and indexer RoPE; --idx-types 1101
 * gives it GLM-5.2's shared indexer layers), deepseek4-tiny (DeepSeek V4:
 * hyper-connections, low-rank Q, a shared KV vector with sinks and a
 * sliding window, the grouped output projection, compressed attentions of
 * ratio 4 with an indexer and 128 per --ds4-layers, hash-routed lead layers
 * with an i32 token -> experts table, sqrt-softplus routing, clamped SwiGLU),
 * qwen35moe-tiny and qwen3next-tiny (gated delta-net layers with more value
 * than key heads and every fourth layer gated full attention, a gated
 * shared expert, an MTP block; qwen3next optionally with the legacy ssm_in
 * packing). Big
 * variants (e.g. --preset deepseek-v3-tiny --n-embd 2048 --experts 64) are
 * just flags away. A tensor whose rows do not fit the chosen block type
 * falls back to q8_0, then f16, as llama-quantize does. --expert-type gives
 * the routed expert tensors (ffn_*_exps) their own type, as real files do
 * (e.g. MXFP4 experts with Q8_0 elsewhere); by default they get --type.
 * MXFP4, Q1_0 and Q2_0 are written by ggml's own reference quantizers, so
 * llama.cpp would make the same bytes from the same floats. Run without
 * arguments for the flag list.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bpe_vocab.h"
#include "deltafin.h"
#include "gguf_write.h"
#include "quant.h"
#include "util.h"

enum init_kind { INIT_LINEAR, INIT_QK, INIT_EMBED, INIT_NORM, INIT_BIAS, INIT_OUTPUT, INIT_ROPE_FREQS, INIT_ROUTER,
                 INIT_NEG, INIT_SCORE, INIT_SINK, INIT_APE, INIT_EXPERT_IDS };

typedef struct {
    const char *arch;
    int type, expert_type, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, vocab, ctx, tied;
    /* mixture of experts */
    int n_expert, n_used, n_ff_exp, n_ff_shexp, n_shared, dense_lead, gating, groups, group_used, norm_w, probs_bias;
    float w_scale;
    int shape_only; /* --shape-only: header, metadata and directory; the data are holes (gw_finish_sparse) */
    float router_skew, router_corr; /* routing that looks trained: see router_row() */
    int topics;                     /* text that stays on a subject: see topic_row() */
    int chain;                      /* text a model foresees: see chain_row() */
    int row_pool;                   /* --row-pool: distinct rows per tensor, 0 = all */
    float topic_weight;
    /* multi-head latent attention (deepseek2) */
    int q_lora, kv_lora, qk_nope, qk_rope, v_head, mla_split;
    float yarn_log_mul;
    /* kimi-linear / kimi-k3: schedule[l] is 'K' (KDA, linear attention) or 'M' (MLA) */
    char schedule[128];
    int kda_hd, d_conv, attn_res, latent, routed_norm, mla_gate;
    float gate_lb, situ_beta, situ_lb; /* gate_lb 0: no lower bound (kimi-linear's gate) */
    /* glm4moe: NextN/MTP blocks after the n_layer layers, rotated head dims (0: half), Q/K norms */
    int nextn, n_rot, qk_norm;
    /* gpt-oss: sliding window, its layer pattern (0: file default, -1: write 0) and RoPE base (0: none) */
    int swa, swa_pattern;
    float rope_base_swa;
    /* deepseek32 / glm-dsa: the DSA indexer's heads, head size, top-k, and
     * attention.indexer.types ('1' a layer with its own indexer, '0' shared; "" none written) */
    int idx_heads, idx_hd, idx_topk;
    char idx_types[128];
    /* qwen35moe / qwen3next: delta-net heads (value, key) and size, every attn_every-th layer full attention,
     * qwen3next's legacy ssm_in packing */
    int gdn_v_heads, gdn_k_heads, gdn_hd, attn_every, gdn_legacy;
    /* deepseek4: layers[l] 'S' (sliding window only), 'C' (compress ratio 4 with the indexer) or 'H' (ratio 128);
     * grouped output projection (groups, rank), hyper-connection streams and Sinkhorn iterations, hash-routed
     * lead layers, the SwiGLU clamp, the compressed layers' RoPE base */
    char ds4_layers[128];
    int o_groups, o_lora, hc, hc_iters, hash_layers;
    float swiglu_limit, rope_base_comp;
    /* granite: embedding, residual, attention and logit scales (0: the key is not written; the logit scale always
     * is), and RoPE switched off (rope.scaling.finetuned false) */
    float g_emb, g_res, g_att, g_logit;
    int g_nope;
    uint64_t seed;
    float rope_base;
    char scaling[16];
    float scale_factor;
    int scale_orig;
    const char *out;
    const char *pre; /* --pre: tokenizer.ggml.pre (default: the architecture's) */
    int multilingual; /* --multilingual: bpe_vocab_build_multilingual */
    const char *drop[16];  /* --drop-key: metadata keys left out (an optional key a published file may lack) */
    int n_drop;
    const char *chat_template; /* --chat-template FILE: its text as tokenizer.chat_template */
    const char *special;       /* --special-tokens A,B,...: control tokens added at the vocabulary's end */
} config;

typedef struct {
    char name[96];
    int type, n_dims;
    int64_t ne[3];
    int init;
} tensor_plan;

typedef struct {
    tensor_plan *t;
    int n, cap;
} plan;

static void die(const char *msg) {
    fprintf(stderr, "mkmodel: %s\n", msg);
    exit(1);
}

/* The type a tensor gets: the requested one if its rows fit the block size,
 * else q8_0, else f16, else f32 (llama-quantize's fallback order). */
static int fit_type(int type, int64_t ne0) {
    if (ne0 % quant_traits_get(type)->blck == 0) return type;
    if (ne0 % QK8_0 == 0) return DF_TYPE_Q8_0;
    return ne0 % 2 == 0 ? DF_TYPE_F16 : DF_TYPE_F32;
}

static void add3(plan *p, int type, int init, int64_t ne0, int64_t ne1, int64_t ne2, const char *fmt, int layer) {
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 64;
        p->t = realloc(p->t, (size_t)p->cap * sizeof *p->t);
        if (!p->t) die("out of memory");
    }
    tensor_plan *t = &p->t[p->n++];
    snprintf(t->name, sizeof t->name, fmt, layer);
    t->type = fit_type(type, ne0);
    t->init = init;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->n_dims = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1;
}

static void add(plan *p, int type, int init, int64_t ne0, int64_t ne1, const char *fmt, int layer) {
    add3(p, type, init, ne0, ne1, 1, fmt, layer);
}

static void plan_ffn(const config *c, plan *p, int l);
static int is_dsa(const config *c);
static int is_qwen35(const config *c);

/* The tensors of the llama family, in llama.cpp's names and shapes. */
static void plan_llama(const config *c, plan *p) {
    const int64_t E = c->n_embd, q = (int64_t)c->n_head * c->head_dim, kv = (int64_t)c->n_head_kv * c->head_dim;
    add(p, c->type, INIT_EMBED, E, c->vocab, "token_embd.weight", 0);
    add(p, DF_TYPE_F32, INIT_NORM, E, 1, "output_norm.weight", 0);
    if (!c->tied) add(p, c->type, INIT_OUTPUT, E, c->vocab, "output.weight", 0);
    if (strcmp(c->scaling, "llama3") == 0) add(p, DF_TYPE_F32, INIT_ROPE_FREQS, c->head_dim / 2, 1, "rope_freqs.weight", 0);
    for (int l = 0; l < c->n_layer; l++) {
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.attn_norm.weight", l);
        add(p, c->type, INIT_QK, E, q, "blk.%d.attn_q.weight", l);
        add(p, c->type, INIT_QK, E, kv, "blk.%d.attn_k.weight", l);
        add(p, c->type, INIT_LINEAR, E, kv, "blk.%d.attn_v.weight", l);
        if (strncmp(c->arch, "qwen2", 5) == 0) {
            add(p, DF_TYPE_F32, INIT_BIAS, q, 1, "blk.%d.attn_q.bias", l);
            add(p, DF_TYPE_F32, INIT_BIAS, kv, 1, "blk.%d.attn_k.bias", l);
            add(p, DF_TYPE_F32, INIT_BIAS, kv, 1, "blk.%d.attn_v.bias", l);
        }
        if (strncmp(c->arch, "qwen3", 5) == 0) {
            add(p, DF_TYPE_F32, INIT_NORM, c->head_dim, 1, "blk.%d.attn_q_norm.weight", l);
            add(p, DF_TYPE_F32, INIT_NORM, c->head_dim, 1, "blk.%d.attn_k_norm.weight", l);
        }
        add(p, c->type, INIT_LINEAR, q, E, "blk.%d.attn_output.weight", l);
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.ffn_norm.weight", l);
        plan_ffn(c, p, l);
    }
}

/* Layer l's FFN: dense, or router + experts (+ shared experts). */
static void plan_ffn(const config *c, plan *p, int l) {
    const int64_t E = c->n_embd;
    if (c->n_expert == 0 || l < c->dense_lead) {
        add(p, c->type, INIT_LINEAR, E, c->n_ff, "blk.%d.ffn_gate.weight", l);
        add(p, c->type, INIT_LINEAR, E, c->n_ff, "blk.%d.ffn_up.weight", l);
        add(p, c->type, INIT_LINEAR, c->n_ff, E, "blk.%d.ffn_down.weight", l);
        return;
    }
    add(p, DF_TYPE_F32, INIT_ROUTER, E, c->n_expert, "blk.%d.ffn_gate_inp.weight", l);
    if (c->probs_bias) add(p, DF_TYPE_F32, INIT_BIAS, c->n_expert, 1, "blk.%d.exp_probs_b.bias", l);
    add3(p, c->expert_type, INIT_LINEAR, E, c->n_ff_exp, c->n_expert, "blk.%d.ffn_gate_exps.weight", l);
    add3(p, c->expert_type, INIT_LINEAR, E, c->n_ff_exp, c->n_expert, "blk.%d.ffn_up_exps.weight", l);
    add3(p, c->expert_type, INIT_LINEAR, c->n_ff_exp, E, c->n_expert, "blk.%d.ffn_down_exps.weight", l);
    if (c->n_ff_shexp > 0) {
        if (strcmp(c->arch, "qwen2moe") == 0 || is_qwen35(c))
            add(p, DF_TYPE_F32, INIT_ROUTER, E, 1, "blk.%d.ffn_gate_inp_shexp.weight", l);
        add(p, c->type, INIT_LINEAR, E, c->n_ff_shexp, "blk.%d.ffn_gate_shexp.weight", l);
        add(p, c->type, INIT_LINEAR, E, c->n_ff_shexp, "blk.%d.ffn_up_shexp.weight", l);
        add(p, c->type, INIT_LINEAR, c->n_ff_shexp, E, "blk.%d.ffn_down_shexp.weight", l);
    }
}

/* Layer l's multi-head latent attention (deepseek2, kimi), without attn_output. */
static void plan_mla(const config *c, plan *p, int l) {
    const int64_t E = c->n_embd, H = c->n_head, hd = c->qk_nope + c->qk_rope, R = c->kv_lora;
    if (c->q_lora > 0) {
        add(p, c->type, INIT_LINEAR, E, c->q_lora, "blk.%d.attn_q_a.weight", l);
        add(p, DF_TYPE_F32, INIT_NORM, c->q_lora, 1, "blk.%d.attn_q_a_norm.weight", l);
        add(p, c->type, INIT_QK, c->q_lora, H * hd, "blk.%d.attn_q_b.weight", l);
    } else {
        add(p, c->type, INIT_QK, E, H * hd, "blk.%d.attn_q.weight", l);
    }
    add(p, c->type, INIT_QK, E, R + c->qk_rope, "blk.%d.attn_kv_a_mqa.weight", l);
    add(p, DF_TYPE_F32, INIT_NORM, R, 1, "blk.%d.attn_kv_a_norm.weight", l);
    if (c->mla_split) {
        add3(p, c->type, INIT_QK, c->qk_nope, R, H, "blk.%d.attn_k_b.weight", l);
        add3(p, c->type, INIT_LINEAR, R, c->v_head, H, "blk.%d.attn_v_b.weight", l);
    } else {
        add(p, c->type, INIT_QK, R, H * (c->qk_nope + c->v_head), "blk.%d.attn_kv_b.weight", l);
    }
}

/* Layer l's DSA lightning indexer (deepseek32, glm-dsa). */
static void plan_indexer(const config *c, plan *p, int l) {
    const int64_t E = c->n_embd, H = c->idx_heads, D = c->idx_hd;
    add(p, c->type, INIT_QK, c->q_lora, H * D, "blk.%d.indexer.attn_q_b.weight", l);
    add(p, c->type, INIT_QK, E, D, "blk.%d.indexer.attn_k.weight", l);
    add(p, DF_TYPE_F32, INIT_NORM, D, 1, "blk.%d.indexer.k_norm.weight", l);
    add(p, DF_TYPE_F32, INIT_BIAS, D, 1, "blk.%d.indexer.k_norm.bias", l);
    add(p, c->type, INIT_LINEAR, E, H, "blk.%d.indexer.proj.weight", l);
}

static void plan_nextn(const config *c, plan *p, int l);

/* DeepSeek V2/V3 (and V3.2, GLM-5 with an indexer): multi-head latent attention, then plan_ffn;
 * deepseek2's c->nextn MTP blocks past the layers (a whole block plus eh_proj and its norms). */
static void plan_deepseek2(const config *c, plan *p) {
    const int64_t E = c->n_embd, H = c->n_head;
    add(p, c->type, INIT_EMBED, E, c->vocab, "token_embd.weight", 0);
    add(p, DF_TYPE_F32, INIT_NORM, E, 1, "output_norm.weight", 0);
    if (!c->tied) add(p, c->type, INIT_OUTPUT, E, c->vocab, "output.weight", 0);
    const int nextn = strcmp(c->arch, "deepseek2") == 0 ? c->nextn : 0; /* DeepSeek V3's MTP blocks */
    for (int l = 0; l < c->n_layer + nextn; l++) {
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.attn_norm.weight", l);
        plan_mla(c, p, l);
        if (is_dsa(c) && (!c->idx_types[0] || c->idx_types[l] == '1')) plan_indexer(c, p, l);
        add(p, c->type, INIT_LINEAR, H * c->v_head, E, "blk.%d.attn_output.weight", l);
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.ffn_norm.weight", l);
        plan_ffn(c, p, l);
        if (l >= c->n_layer) plan_nextn(c, p, l);
    }
}

/* A NextN/MTP block's own tensors (past the n_layer layers): eh_proj and its norms. */
static void plan_nextn(const config *c, plan *p, int l) {
    const int64_t E = c->n_embd;
    add(p, c->type, INIT_LINEAR, 2 * E, E, "blk.%d.nextn.eh_proj.weight", l);
    add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.nextn.enorm.weight", l);
    add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.nextn.hnorm.weight", l);
    add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.nextn.shared_head_norm.weight", l);
}

/* GLM-4.5: Q/K/V biases, optional Q/K norms, post_attention_norm, dense lead
 * layers then sigmoid-routed experts with a shared expert; the last c->nextn
 * blocks (past n_layer) are NextN/MTP blocks: a whole block plus eh_proj and
 * its norms, which inference never runs. */
static void plan_glm4moe(const config *c, plan *p) {
    const int64_t E = c->n_embd, q = (int64_t)c->n_head * c->head_dim, kv = (int64_t)c->n_head_kv * c->head_dim;
    add(p, c->type, INIT_EMBED, E, c->vocab, "token_embd.weight", 0);
    add(p, DF_TYPE_F32, INIT_NORM, E, 1, "output_norm.weight", 0);
    if (!c->tied) add(p, c->type, INIT_OUTPUT, E, c->vocab, "output.weight", 0);
    for (int l = 0; l < c->n_layer + c->nextn; l++) {
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.attn_norm.weight", l);
        add(p, c->type, INIT_QK, E, q, "blk.%d.attn_q.weight", l);
        add(p, c->type, INIT_QK, E, kv, "blk.%d.attn_k.weight", l);
        add(p, c->type, INIT_LINEAR, E, kv, "blk.%d.attn_v.weight", l);
        add(p, DF_TYPE_F32, INIT_BIAS, q, 1, "blk.%d.attn_q.bias", l);
        add(p, DF_TYPE_F32, INIT_BIAS, kv, 1, "blk.%d.attn_k.bias", l);
        add(p, DF_TYPE_F32, INIT_BIAS, kv, 1, "blk.%d.attn_v.bias", l);
        if (c->qk_norm) {
            add(p, DF_TYPE_F32, INIT_NORM, c->head_dim, 1, "blk.%d.attn_q_norm.weight", l);
            add(p, DF_TYPE_F32, INIT_NORM, c->head_dim, 1, "blk.%d.attn_k_norm.weight", l);
        }
        add(p, c->type, INIT_LINEAR, q, E, "blk.%d.attn_output.weight", l);
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.post_attention_norm.weight", l);
        plan_ffn(c, p, l);
        if (l >= c->n_layer) plan_nextn(c, p, l);
    }
}

static int is_glm4moe(const config *c) { return strcmp(c->arch, "glm4moe") == 0; }
/* DeepSeek V3.2 / GLM-5: DeepSeek's blocks plus the DSA indexer */
static int is_dsa(const config *c) { return strcmp(c->arch, "deepseek32") == 0 || strcmp(c->arch, "glm-dsa") == 0; }
static int is_ds(const config *c) { return strcmp(c->arch, "deepseek2") == 0 || is_dsa(c); }
static int is_minimax(const config *c) { return strcmp(c->arch, "minimax-m2") == 0; }

/* MiniMax M2: Q/K RMSNorm over all of Q and of K, every layer MoE (router,
 * selection bias, experts of feed_forward_length), no shared expert. */
static void plan_minimax(const config *c, plan *p) {
    const int64_t E = c->n_embd, q = (int64_t)c->n_head * c->head_dim, kv = (int64_t)c->n_head_kv * c->head_dim;
    add(p, c->type, INIT_EMBED, E, c->vocab, "token_embd.weight", 0);
    add(p, DF_TYPE_F32, INIT_NORM, E, 1, "output_norm.weight", 0);
    add(p, c->type, INIT_OUTPUT, E, c->vocab, "output.weight", 0);
    for (int l = 0; l < c->n_layer; l++) {
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.attn_norm.weight", l);
        add(p, c->type, INIT_QK, E, q, "blk.%d.attn_q.weight", l);
        add(p, c->type, INIT_QK, E, kv, "blk.%d.attn_k.weight", l);
        add(p, c->type, INIT_LINEAR, E, kv, "blk.%d.attn_v.weight", l);
        add(p, DF_TYPE_F32, INIT_NORM, q, 1, "blk.%d.attn_q_norm.weight", l);
        add(p, DF_TYPE_F32, INIT_NORM, kv, 1, "blk.%d.attn_k_norm.weight", l);
        add(p, c->type, INIT_LINEAR, q, E, "blk.%d.attn_output.weight", l);
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.ffn_norm.weight", l);
        plan_ffn(c, p, l);
    }
}

static int is_gptoss(const config *c) { return strcmp(c->arch, "gpt-oss") == 0; }

static int is_ds4(const config *c) { return strcmp(c->arch, "deepseek4") == 0; }
static int is_granite(const config *c) { return strcmp(c->arch, "granite") == 0; }

/* deepseek4's compress ratio of layer l (MTP blocks past n_layer: sliding only). */
static int ds4_ratio(const config *c, int l) {
    if (l >= c->n_layer) return 0;
    return c->ds4_layers[l] == 'C' ? 4 : c->ds4_layers[l] == 'H' ? 128 : 0;
}

/* DeepSeek V4 (llama.cpp's src/models/deepseek4.cpp): hyper-connection mixers
 * around every sublayer and before the output, low-rank Q, one shared KV
 * vector, sinks, the grouped low-rank output projection, per-layer
 * compressors (ratio 4 with the indexer's own compressor, ratio 128 without),
 * hash-routed lead layers (token id -> expert ids, i32) and sqrt-softplus
 * routing with a selection bias elsewhere, one shared expert; c->nextn MTP
 * blocks past the layers. */
static void plan_deepseek4(const config *c, plan *p) {
    const int64_t E = c->n_embd, H = c->n_head, hd = c->head_dim, HC = c->hc, mix = (2 + HC) * HC;
    const int64_t X = c->n_expert, F = c->n_ff_exp, G = c->o_groups, R = c->o_lora, D = c->idx_hd;
    add(p, c->type, INIT_EMBED, E, c->vocab, "token_embd.weight", 0);
    add(p, DF_TYPE_F32, INIT_NORM, E, 1, "output_norm.weight", 0);
    add(p, c->type, INIT_OUTPUT, E, c->vocab, "output.weight", 0);
    add(p, DF_TYPE_F32, INIT_LINEAR, HC * E, HC, "output_hc_fn.weight", 0);
    add(p, DF_TYPE_F32, INIT_BIAS, HC, 1, "output_hc_base.weight", 0);
    add(p, DF_TYPE_F32, INIT_NORM, 1, 1, "output_hc_scale.weight", 0);
    for (int l = 0; l < c->n_layer + c->nextn; l++) {
        const int ratio = ds4_ratio(c, l), coff = ratio == 4 ? 2 : 1;
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.attn_norm.weight", l);
        add(p, DF_TYPE_F32, INIT_SINK, H, 1, "blk.%d.attn_sinks.weight", l);
        add(p, c->type, INIT_LINEAR, E, c->q_lora, "blk.%d.attn_q_a.weight", l);
        add(p, DF_TYPE_F32, INIT_NORM, c->q_lora, 1, "blk.%d.attn_q_a_norm.weight", l);
        add(p, c->type, INIT_LINEAR, c->q_lora, H * hd, "blk.%d.attn_q_b.weight", l);
        add(p, c->type, INIT_LINEAR, E, hd, "blk.%d.attn_kv.weight", l);
        add(p, DF_TYPE_F32, INIT_NORM, hd, 1, "blk.%d.attn_kv_a_norm.weight", l);
        add(p, c->type, INIT_LINEAR, H * hd / G, R * G, "blk.%d.attn_output_a.weight", l);
        add(p, c->type, INIT_LINEAR, G * R, E, "blk.%d.attn_output_b.weight", l);
        add(p, DF_TYPE_F32, INIT_LINEAR, HC * E, mix, "blk.%d.hc_attn_fn.weight", l);
        add(p, DF_TYPE_F32, INIT_BIAS, mix, 1, "blk.%d.hc_attn_base.weight", l);
        add(p, DF_TYPE_F32, INIT_NORM, 3, 1, "blk.%d.hc_attn_scale.weight", l);
        add(p, DF_TYPE_F32, INIT_LINEAR, HC * E, mix, "blk.%d.hc_ffn_fn.weight", l);
        add(p, DF_TYPE_F32, INIT_BIAS, mix, 1, "blk.%d.hc_ffn_base.weight", l);
        add(p, DF_TYPE_F32, INIT_NORM, 3, 1, "blk.%d.hc_ffn_scale.weight", l);
        if (ratio) {
            add(p, c->type, INIT_LINEAR, E, coff * hd, "blk.%d.attn_compressor_kv.weight", l);
            add(p, c->type, INIT_LINEAR, E, coff * hd, "blk.%d.attn_compressor_gate.weight", l);
            add(p, DF_TYPE_F32, INIT_APE, coff * hd, ratio, "blk.%d.attn_compressor_ape.weight", l);
            add(p, DF_TYPE_F32, INIT_NORM, hd, 1, "blk.%d.attn_compressor_norm.weight", l);
        }
        if (ratio == 4) {
            add(p, c->type, INIT_LINEAR, E, c->idx_heads, "blk.%d.indexer.proj.weight", l);
            add(p, c->type, INIT_QK, c->q_lora, c->idx_heads * D, "blk.%d.indexer.attn_q_b.weight", l);
            add(p, c->type, INIT_LINEAR, E, 2 * D, "blk.%d.indexer_compressor_kv.weight", l);
            add(p, c->type, INIT_LINEAR, E, 2 * D, "blk.%d.indexer_compressor_gate.weight", l);
            add(p, DF_TYPE_F32, INIT_APE, 2 * D, ratio, "blk.%d.indexer_compressor_ape.weight", l);
            add(p, DF_TYPE_F32, INIT_NORM, D, 1, "blk.%d.indexer_compressor_norm.weight", l);
        }
        add(p, DF_TYPE_F32, INIT_ROUTER, E, X, "blk.%d.ffn_gate_inp.weight", l);
        if (l < c->hash_layers) add(p, DF_TYPE_I32, INIT_EXPERT_IDS, c->n_used, c->vocab, "blk.%d.ffn_gate_tid2eid.weight", l);
        else add(p, DF_TYPE_F32, INIT_BIAS, X, 1, "blk.%d.exp_probs_b.bias", l);
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.ffn_norm.weight", l);
        add3(p, c->expert_type, INIT_LINEAR, E, F, X, "blk.%d.ffn_gate_exps.weight", l);
        add3(p, c->expert_type, INIT_LINEAR, F, E, X, "blk.%d.ffn_down_exps.weight", l);
        add3(p, c->expert_type, INIT_LINEAR, E, F, X, "blk.%d.ffn_up_exps.weight", l);
        add(p, c->type, INIT_LINEAR, E, F * c->n_shared, "blk.%d.ffn_gate_shexp.weight", l);
        add(p, c->type, INIT_LINEAR, F * c->n_shared, E, "blk.%d.ffn_down_shexp.weight", l);
        add(p, c->type, INIT_LINEAR, E, F * c->n_shared, "blk.%d.ffn_up_shexp.weight", l);
        if (l >= c->n_layer) plan_nextn(c, p, l);
    }
}

/* deepseek4's own metadata (llama.cpp's llama_model_deepseek4::load_arch_hparams). */
static void write_hparams_ds4(gw *w, const config *c) {
    char k[128];
    int32_t ratios[128];
    for (int l = 0; l < c->n_layer + c->nextn; l++) ratios[l] = ds4_ratio(c, l);
#define KEY(suffix) (snprintf(k, sizeof k, "%s." suffix, c->arch), k)
    if (gw_u32(w, KEY("attention.q_lora_rank"), (uint32_t)c->q_lora) ||
        gw_u32(w, KEY("attention.sliding_window"), (uint32_t)c->swa) ||
        gw_u32(w, KEY("expert_shared_count"), (uint32_t)c->n_shared) ||
        gw_f32(w, KEY("expert_weights_scale"), c->w_scale) || gw_bool(w, KEY("expert_weights_norm"), c->norm_w) ||
        gw_f32(w, KEY("swiglu_clamp_exp"), c->swiglu_limit) ||
        gw_u32(w, KEY("attention.indexer.head_count"), (uint32_t)c->idx_heads) ||
        gw_u32(w, KEY("attention.indexer.key_length"), (uint32_t)c->idx_hd) ||
        gw_u32(w, KEY("attention.indexer.top_k"), (uint32_t)c->idx_topk) ||
        gw_u32(w, KEY("attention.output_group_count"), (uint32_t)c->o_groups) ||
        gw_u32(w, KEY("attention.output_lora_rank"), (uint32_t)c->o_lora) ||
        gw_f32(w, KEY("attention.compress_rope_freq_base"), c->rope_base_comp) ||
        gw_arr_i32(w, KEY("attention.compress_ratios"), ratios, (size_t)(c->n_layer + c->nextn)) ||
        gw_u32(w, KEY("hyper_connection.count"), (uint32_t)c->hc) ||
        gw_u32(w, KEY("hyper_connection.sinkhorn_iterations"), (uint32_t)c->hc_iters) ||
        gw_f32(w, KEY("hyper_connection.epsilon"), 1e-6f) ||
        gw_u32(w, KEY("hash_layer_count"), (uint32_t)c->hash_layers) ||
        gw_u32(w, KEY("expert_gating_func"), 4) || /* sqrt(softplus) */
        (c->nextn && gw_u32(w, KEY("nextn_predict_layers"), (uint32_t)c->nextn)))
        die("out of memory");
#undef KEY
}

/* gpt-oss: biases on Q/K/V/O, one sink per head, post_attention_norm, every
 * layer MoE with a router bias and per-expert gate/up/down biases. */
static void plan_gptoss(const config *c, plan *p) {
    const int64_t E = c->n_embd, q = (int64_t)c->n_head * c->head_dim, kv = (int64_t)c->n_head_kv * c->head_dim;
    const int64_t X = c->n_expert, F = c->n_ff_exp;
    add(p, c->type, INIT_EMBED, E, c->vocab, "token_embd.weight", 0);
    add(p, DF_TYPE_F32, INIT_NORM, E, 1, "output_norm.weight", 0);
    add(p, c->type, INIT_OUTPUT, E, c->vocab, "output.weight", 0);
    for (int l = 0; l < c->n_layer; l++) {
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.attn_norm.weight", l);
        add(p, c->type, INIT_QK, E, q, "blk.%d.attn_q.weight", l);
        add(p, c->type, INIT_QK, E, kv, "blk.%d.attn_k.weight", l);
        add(p, c->type, INIT_LINEAR, E, kv, "blk.%d.attn_v.weight", l);
        add(p, DF_TYPE_F32, INIT_BIAS, q, 1, "blk.%d.attn_q.bias", l);
        add(p, DF_TYPE_F32, INIT_BIAS, kv, 1, "blk.%d.attn_k.bias", l);
        add(p, DF_TYPE_F32, INIT_BIAS, kv, 1, "blk.%d.attn_v.bias", l);
        add(p, c->type, INIT_LINEAR, q, E, "blk.%d.attn_output.weight", l);
        add(p, DF_TYPE_F32, INIT_BIAS, E, 1, "blk.%d.attn_output.bias", l);
        add(p, DF_TYPE_F32, INIT_SINK, c->n_head, 1, "blk.%d.attn_sinks.weight", l);
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.post_attention_norm.weight", l);
        add(p, DF_TYPE_F32, INIT_ROUTER, E, X, "blk.%d.ffn_gate_inp.weight", l);
        add(p, DF_TYPE_F32, INIT_BIAS, X, 1, "blk.%d.ffn_gate_inp.bias", l);
        add3(p, c->expert_type, INIT_LINEAR, E, F, X, "blk.%d.ffn_gate_exps.weight", l);
        add3(p, c->expert_type, INIT_LINEAR, E, F, X, "blk.%d.ffn_up_exps.weight", l);
        add3(p, c->expert_type, INIT_LINEAR, F, E, X, "blk.%d.ffn_down_exps.weight", l);
        add(p, DF_TYPE_F32, INIT_BIAS, F, X, "blk.%d.ffn_gate_exps.bias", l);
        add(p, DF_TYPE_F32, INIT_BIAS, F, X, "blk.%d.ffn_up_exps.bias", l);
        add(p, DF_TYPE_F32, INIT_BIAS, E, X, "blk.%d.ffn_down_exps.bias", l);
    }
}

static int is_qwen35(const config *c) { return strcmp(c->arch, "qwen35moe") == 0 || strcmp(c->arch, "qwen3next") == 0; }

/* A Qwen3.5 / Qwen3-Next delta-net layer: fused qkv (or qwen3next's legacy
 * ssm_in), one convolution, decay and beta inputs, gated output norm. */
static void plan_gdn(const config *c, plan *p, int l) {
    const int64_t E = c->n_embd, H = c->gdn_v_heads, hd = c->gdn_hd, V = H * hd, C = 2 * c->gdn_k_heads * hd + V;
    if (c->gdn_legacy) {
        add(p, c->type, INIT_LINEAR, E, C + V, "blk.%d.ssm_in.weight", l);
    } else {
        add(p, c->type, INIT_LINEAR, E, C, "blk.%d.attn_qkv.weight", l);
        add(p, c->type, INIT_LINEAR, E, V, "blk.%d.attn_gate.weight", l);
    }
    add(p, DF_TYPE_F32, INIT_LINEAR, c->d_conv, C, "blk.%d.ssm_conv1d.weight", l);
    add(p, DF_TYPE_F32, INIT_BIAS, H, 1, "blk.%d.ssm_dt.bias", l);
    add(p, DF_TYPE_F32, INIT_NEG, H, 1, "blk.%d.ssm_a", l);
    if (strcmp(c->arch, "qwen3next") == 0) {
        add(p, c->type, INIT_LINEAR, E, 2 * H, "blk.%d.ssm_ba.weight", l);
    } else {
        add(p, c->type, INIT_LINEAR, E, H, "blk.%d.ssm_beta.weight", l);
        add(p, c->type, INIT_LINEAR, E, H, "blk.%d.ssm_alpha.weight", l);
    }
    add(p, DF_TYPE_F32, INIT_NORM, hd, 1, "blk.%d.ssm_norm.weight", l);
    add(p, c->type, INIT_LINEAR, V, E, "blk.%d.ssm_out.weight", l);
}

/* Qwen3.5 MoE / Qwen3-Next: delta-net layers with every attn_every-th layer
 * gated full attention (attn_q: query and gate per head, Q/K norms), MoE
 * with a sigmoid-gated shared expert; c->nextn MTP blocks past the layers. */
static void plan_qwen35(const config *c, plan *p) {
    const int64_t E = c->n_embd, q = (int64_t)c->n_head * c->head_dim, kv = (int64_t)c->n_head_kv * c->head_dim;
    add(p, c->type, INIT_EMBED, E, c->vocab, "token_embd.weight", 0);
    add(p, DF_TYPE_F32, INIT_NORM, E, 1, "output_norm.weight", 0);
    add(p, c->type, INIT_OUTPUT, E, c->vocab, "output.weight", 0);
    for (int l = 0; l < c->n_layer + c->nextn; l++) {
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.attn_norm.weight", l);
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.post_attention_norm.weight", l);
        if (l < c->n_layer && (l + 1) % c->attn_every != 0) {
            plan_gdn(c, p, l);
        } else {
            add(p, c->type, INIT_QK, E, 2 * q, "blk.%d.attn_q.weight", l);
            add(p, c->type, INIT_QK, E, kv, "blk.%d.attn_k.weight", l);
            add(p, c->type, INIT_LINEAR, E, kv, "blk.%d.attn_v.weight", l);
            add(p, DF_TYPE_F32, INIT_NORM, c->head_dim, 1, "blk.%d.attn_q_norm.weight", l);
            add(p, DF_TYPE_F32, INIT_NORM, c->head_dim, 1, "blk.%d.attn_k_norm.weight", l);
            add(p, c->type, INIT_LINEAR, q, E, "blk.%d.attn_output.weight", l);
        }
        plan_ffn(c, p, l);
        if (l >= c->n_layer) plan_nextn(c, p, l);
    }
}

/* Qwen's own keys: the delta-net sizes, the layer pattern, the MTP blocks,
 * qwen35moe's IMRoPE sections (pairs of each class t/h/w, as real files). */
static void write_hparams_qwen35(gw *w, const config *c) {
    char k[128];
#define KEY(suffix) (snprintf(k, sizeof k, "%s." suffix, c->arch), k)
    if (gw_u32(w, KEY("ssm.conv_kernel"), (uint32_t)c->d_conv) ||
        gw_u32(w, KEY("ssm.inner_size"), (uint32_t)(c->gdn_v_heads * c->gdn_hd)) ||
        gw_u32(w, KEY("ssm.state_size"), (uint32_t)c->gdn_hd) ||
        gw_u32(w, KEY("ssm.time_step_rank"), (uint32_t)c->gdn_v_heads) ||
        gw_u32(w, KEY("ssm.group_count"), (uint32_t)c->gdn_k_heads) ||
        gw_u32(w, KEY("full_attention_interval"), (uint32_t)c->attn_every) ||
        gw_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)c->n_ff_shexp) ||
        (c->nextn && gw_u32(w, KEY("nextn_predict_layers"), (uint32_t)c->nextn)))
        die("out of memory");
    if (strcmp(c->arch, "qwen35moe") == 0) {
        const int pairs = c->n_rot / 2;
        int32_t sec[4] = {(pairs + 2) / 3, (pairs + 1) / 3, pairs / 3, 0};
        if (gw_arr_i32(w, KEY("rope.dimension_sections"), sec, 4)) die("out of memory");
    }
#undef KEY
}

static int is_kimi(const config *c) { return strncmp(c->arch, "kimi", 4) == 0; }
static int is_k3(const config *c) { return strcmp(c->arch, "kimi-k3") == 0; }

/* Kimi's KDA layer: q/k/v with short convolutions, decay gate, beta, gated
 * output norm (kimi-linear: low-rank g_a/g_b gate; kimi-k3: full-rank g). */
static void plan_kda(const config *c, plan *p, int l) {
    const int64_t E = c->n_embd, H = c->n_head, hd = c->kda_hd, D = H * hd;
    static const char *const conv[3] = {"blk.%d.ssm_conv1d_q.weight", "blk.%d.ssm_conv1d_k.weight",
                                        "blk.%d.ssm_conv1d_v.weight"};
    for (int i = 0; i < 3; i++) add3(p, DF_TYPE_F32, INIT_LINEAR, c->d_conv, 1, D, conv[i], l);
    add(p, c->type, INIT_QK, E, D, "blk.%d.attn_q.weight", l);
    add(p, c->type, INIT_QK, E, D, "blk.%d.attn_k.weight", l);
    add(p, c->type, INIT_LINEAR, E, D, "blk.%d.attn_v.weight", l);
    add(p, c->type, INIT_LINEAR, E, hd, "blk.%d.ssm_f_a.weight", l);
    add(p, c->type, INIT_LINEAR, hd, D, "blk.%d.ssm_f_b.weight", l);
    add(p, c->type, INIT_LINEAR, E, H, "blk.%d.ssm_beta.weight", l);
    if (is_k3(c)) add(p, DF_TYPE_F32, INIT_NEG, H, 1, "blk.%d.ssm_a", l);
    else add(p, DF_TYPE_F32, INIT_NEG, 1, H, "blk.%d.ssm_a", l);
    add(p, DF_TYPE_F32, INIT_BIAS, D, 1, "blk.%d.ssm_dt.bias", l);
    if (is_k3(c)) {
        add(p, c->type, INIT_LINEAR, E, D, "blk.%d.ssm_g.weight", l);
    } else {
        add(p, c->type, INIT_LINEAR, E, hd, "blk.%d.ssm_g_a.weight", l);
        add(p, c->type, INIT_LINEAR, hd, D, "blk.%d.ssm_g_b.weight", l);
    }
    add(p, DF_TYPE_F32, INIT_NORM, hd, 1, "blk.%d.ssm_norm.weight", l);
    add(p, c->type, INIT_LINEAR, D, E, "blk.%d.attn_output.weight", l);
}

/* Kimi's MoE: router and selection bias at full width; kimi-k3's routed
 * experts at the latent width between ffn_routed_down and ffn_routed_up. */
static void plan_kimi_moe(const config *c, plan *p, int l) {
    const int64_t E = c->n_embd, X = c->n_expert, W = c->latent > 0 ? c->latent : E, sh = (int64_t)c->n_ff_exp * c->n_shared;
    add(p, DF_TYPE_F32, INIT_ROUTER, E, X, "blk.%d.ffn_gate_inp.weight", l);
    add(p, DF_TYPE_F32, INIT_BIAS, X, 1, "blk.%d.exp_probs_b.bias", l);
    add3(p, c->expert_type, INIT_LINEAR, W, c->n_ff_exp, X, "blk.%d.ffn_gate_exps.weight", l);
    add3(p, c->expert_type, INIT_LINEAR, W, c->n_ff_exp, X, "blk.%d.ffn_up_exps.weight", l);
    add3(p, c->expert_type, INIT_LINEAR, c->n_ff_exp, W, X, "blk.%d.ffn_down_exps.weight", l);
    if (c->latent > 0) {
        add(p, c->type, INIT_LINEAR, E, W, "blk.%d.ffn_routed_down.weight", l);
        add(p, c->type, INIT_LINEAR, W, E, "blk.%d.ffn_routed_up.weight", l);
        if (c->routed_norm) add(p, DF_TYPE_F32, INIT_NORM, W, 1, "blk.%d.ffn_routed_norm.weight", l);
    }
    if (sh > 0) {
        add(p, c->type, INIT_LINEAR, E, sh, "blk.%d.ffn_gate_shexp.weight", l);
        add(p, c->type, INIT_LINEAR, E, sh, "blk.%d.ffn_up_shexp.weight", l);
        add(p, c->type, INIT_LINEAR, sh, E, "blk.%d.ffn_down_shexp.weight", l);
    }
}

/* kimi-linear / kimi-k3: KDA or NoPE MLA per schedule, dense lead or MoE. */
static void plan_kimi(const config *c, plan *p) {
    const int64_t E = c->n_embd, H = c->n_head;
    add(p, c->type, INIT_EMBED, E, c->vocab, "token_embd.weight", 0);
    add(p, DF_TYPE_F32, INIT_NORM, E, 1, "output_norm.weight", 0);
    add(p, c->type, INIT_OUTPUT, E, c->vocab, "output.weight", 0);
    if (c->attn_res > 0) add(p, DF_TYPE_F32, INIT_SCORE, E, 1, "output_res_score.weight", 0);
    for (int l = 0; l < c->n_layer; l++) {
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.attn_norm.weight", l);
        add(p, DF_TYPE_F32, INIT_NORM, E, 1, "blk.%d.ffn_norm.weight", l);
        if (c->attn_res > 0) {
            add(p, DF_TYPE_F32, INIT_SCORE, E, 1, "blk.%d.attn_res_score.weight", l);
            add(p, DF_TYPE_F32, INIT_SCORE, E, 1, "blk.%d.ffn_res_score.weight", l);
        }
        if (c->schedule[l] == 'K') {
            plan_kda(c, p, l);
        } else {
            plan_mla(c, p, l);
            if (c->mla_gate) add(p, c->type, INIT_LINEAR, E, H * c->v_head, "blk.%d.attn_gate.weight", l);
            add(p, c->type, INIT_LINEAR, H * c->v_head, E, "blk.%d.attn_output.weight", l);
        }
        if (l < c->dense_lead) {
            add(p, c->type, INIT_LINEAR, E, c->n_ff, "blk.%d.ffn_gate.weight", l);
            add(p, c->type, INIT_LINEAR, E, c->n_ff, "blk.%d.ffn_up.weight", l);
            add(p, c->type, INIT_LINEAR, c->n_ff, E, "blk.%d.ffn_down.weight", l);
        } else {
            plan_kimi_moe(c, p, l);
        }
    }
}

/* Kimi's own keys: the layer schedule as head_count_kv (0: KDA), KDA sizes,
 * and kimi-k3's gate bound, attn_res block, latent MoE and SiTU. */
static void write_hparams_kimi(gw *w, const config *c) {
    char k[128];
    int32_t kv[128];
    for (int l = 0; l < c->n_layer; l++) kv[l] = c->schedule[l] == 'K' ? 0 : 1; /* MLA: one latent per token */
#define KEY(suffix) (snprintf(k, sizeof k, "%s." suffix, c->arch), k)
    if (gw_arr_i32(w, KEY("attention.head_count_kv"), kv, (size_t)c->n_layer) ||
        gw_u32(w, KEY("ssm.conv_kernel"), (uint32_t)c->d_conv) || gw_u32(w, KEY("kda.head_dim"), (uint32_t)c->kda_hd))
        die("out of memory");
    if (is_k3(c)) {
        if (gw_u32(w, KEY("attn_res.block_size"), (uint32_t)c->attn_res) ||
            gw_f32(w, KEY("activation.situ_beta"), c->situ_beta) ||
            gw_f32(w, KEY("activation.situ_linear_beta"), c->situ_lb) ||
            (c->latent > 0 && gw_u32(w, KEY("expert_latent_length"), (uint32_t)c->latent)) ||
            (c->gate_lb != 0.0f && gw_f32(w, KEY("kda.gate_lower_bound"), c->gate_lb)))
            die("out of memory");
    }
#undef KEY
}

static uint64_t hash_name(uint64_t seed, const char *s) {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h ? h : 1;
}

static float next_uniform(uint64_t *s) { /* [-1, 1) */
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *s = x;
    return (float)((double)(x >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* Fill one row of a tensor with its initial values. */
static void init_row(const tensor_plan *t, const config *c, uint64_t *rng, float *row) {
    const int64_t n = t->ne[0];
    const float lin = sqrtf(3.0f / (float)n);
    for (int64_t i = 0; i < n; i++) {
        float u = next_uniform(rng);
        switch (t->init) {
        case INIT_LINEAR: row[i] = u * lin; break;
        case INIT_QK: row[i] = u * lin * 0.5f; break; /* attention scores with a std of ~sqrt(head_dim)/4 */
        case INIT_ROUTER: row[i] = u * lin * 2.0f; break; /* router logits with a std of ~2: distinct choices */
        case INIT_OUTPUT: row[i] = u * lin * 3.0f; break;
        case INIT_EMBED: row[i] = u; break;
        case INIT_NORM: row[i] = 1.0f + 0.1f * u; break;
        case INIT_BIAS: row[i] = 0.1f * u; break;
        case INIT_NEG: row[i] = -(1.0f + 0.5f * u); break; /* kimi's ssm_a = -exp(A_log) */
        case INIT_SCORE: row[i] = 0.15f * u; break;        /* attn_res scores with a std of ~1 */
        case INIT_SINK: row[i] = 1.0f + 2.0f * u; break;   /* gpt-oss sinks: logits that take a real share */
        case INIT_APE: row[i] = u; break;                  /* deepseek4 compressor position biases on the scores */
        case INIT_EXPERT_IDS: break;                       /* integers: expert_ids_row() */
        case INIT_ROPE_FREQS: /* llama3-style: low frequencies divided by up to the factor */
            row[i] = 1.0f + (c->scale_factor - 1.0f) * (float)i / (float)(n > 1 ? n - 1 : 1);
            break;
        }
    }
}

/* One token's row of deepseek4's hash routing table: n distinct expert ids
 * below n_expert, stored as int32. */
static void expert_ids_row(const config *c, uint64_t *rng, int64_t n, int32_t *ids) {
    for (int64_t i = 0; i < n; i++) {
        int32_t e;
        int dup;
        do {
            e = (int32_t)((next_uniform(rng) + 1.0f) * 0.5f * (float)c->n_expert);
            if (e >= c->n_expert) e = c->n_expert - 1;
            dup = 0;
            for (int64_t j = 0; j < i; j++) dup |= ids[j] == e;
        } while (dup);
        ids[i] = e;
    }
}

/* Routing that looks like a trained router's (issue: expert cache policy).
 * Random router rows route nearly uniformly, where no cache can help; trained
 * routers are skewed (a minority of experts takes most of the traffic, and
 * how strongly differs by layer) and adjacent layers route alike (the hidden
 * state changes little from one layer to the next). Two knobs imitate that:
 *  --router-skew S   expert e's row of layer l is scaled by exp(S_l z), z a
 *                    standard normal drawn per (layer, expert) and S_l = S x
 *                    (0.5 .. 1.5, per layer): a log-normal spread of logit
 *                    scales, so high-scale experts win the top-k more often;
 *  --router-corr A   row e of layer l is A x (row e of layer l - 1, before its
 *                    scale) + sqrt(1 - A^2) x fresh values, so a token's
 *                    choices in adjacent layers are correlated.
 * Drift of the popular set along a text and correlation between consecutive
 * tokens come from the text itself: --topics (topic_row) imitates them.
 * prev holds the previous router's unscaled rows (n_expert x n_embd). */
static float std_normal(uint64_t *rng) {
    float u1 = 0.5f * (next_uniform(rng) + 1.0f), u2 = next_uniform(rng);
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(3.14159265f * u2);
}

static void router_row(const config *c, const tensor_plan *t, int64_t e, float *row, float *prev, int have_prev) {
    const int64_t n = t->ne[0];
    if (c->router_corr > 0 && have_prev) {
        const float a = c->router_corr, b = sqrtf(1.0f - a * a);
        for (int64_t i = 0; i < n; i++) row[i] = a * prev[e * n + i] + b * row[i];
    }
    memcpy(prev + e * n, row, (size_t)n * sizeof *row);
    if (c->router_skew > 0) {
        int layer = 0;
        sscanf(t->name, "blk.%d.", &layer);
        uint64_t lr = hash_name(c->seed ^ 0x5ca1eull, t->name);
        const float s_l = c->router_skew * (1.0f + next_uniform(&lr) * 0.5f);
        uint64_t er = hash_name(c->seed + (uint64_t)e * 0x9e3779b97f4a7c15ull, t->name);
        const float scale = expf(s_l * std_normal(&er));
        for (int64_t i = 0; i < n; i++) row[i] *= scale;
    }
}

/* Text that stays on a subject, then moves on (issue: expert cache policy).
 * In trained models consecutive tokens route alike (they share a subject,
 * whose direction dominates the residual stream) and the popular experts
 * drift as the subject changes. --topics K splits the vocabulary into K
 * contiguous blocks, each with a direction T_k drawn like an ordinary row of
 * the tensor, and mixes it into the rows of its tokens in both the token
 * embeddings and the output head: row = sqrt(1 - w^2) x row + w x T_k
 * (w = --topic-weight, default 0.4, the same row norm on average). A token
 * of topic k puts T_k into the residual stream, the routers (whose rows are
 * random) see it in every layer and so route the topic's tokens alike, and
 * the output head favours the next token from the same topic: generation
 * stays on a topic for a while, with sampling jumping to another now and
 * then. `cachesim` reports the resulting correlation between consecutive
 * tokens' experts (overlap). */
static void topic_row(const config *c, const tensor_plan *t, int64_t r, float *row, float *tmp) {
    const int64_t k = r * c->topics / t->ne[1];
    uint64_t rng = hash_name(c->seed ^ 0x70b1cull, "topic") + (uint64_t)k * 0x9e3779b97f4a7c15ull;
    if (!rng) rng = 1;
    init_row(t, c, &rng, tmp);
    const float w = c->topic_weight, a = sqrtf(1.0f - w * w);
    for (int64_t i = 0; i < t->ne[0]; i++) row[i] = a * row[i] + w * tmp[i];
}

/* Text that a model foresees (speculation's tests and benchmarks). Random
 * weights make a model whose next token no guesser can foresee, so that an
 * MTP block's guesses are always wrong and the path that keeps them is never
 * run. --chain makes every token's successor a fixed permutation of the
 * vocabulary, s(t) = (t + k) mod V with k coprime to V (one cycle through
 * every token: no n-gram repeats within V tokens, so lookup guesses nothing),
 * that the model computes and its NextN/MTP blocks foresee one token ahead:
 *  - token t's embedding row is drawn from its own seed, so that
 *  - the output head's row s(t) can be a multiple of token t's embedding
 *    (the output's init scale, times 0.05): the head's logits are dot
 *    products with the final hidden state, which is the token's embedding
 *    plus what the layers add;
 *  - the layers add little: the matrices that write into the residual stream
 *    (attn_output, ssm_out, the FFNs' down projections) are scaled by 0.02,
 *    while everything else (attention, routing, the experts' reads) is as
 *    usual, so the model still costs what its shape costs;
 *  - an MTP block's eh_proj passes its embedding half through (rows of the
 *    identity on [enorm(embed(x)) | hnorm(h)]), so the block's output is the
 *    embedding of the token it is given and its head foresees that token's
 *    successor: the token after next.
 * The margin is wide (`deltafin logits`: the winner 2.3-3.4, the runner-up
 * 0.35-0.46 at 64 to 512 wide, q8_0 and q4_K), so greedy text follows the
 * chain: checked for llama, qwen3moe, glm4moe, deepseek2, deepseek4, gpt-oss
 * and qwen35moe; not kimi-k3, whose residual stream others write too. */
#define CHAIN_HEAD 0.05f
#define CHAIN_QUIET 0.02f

static int64_t chain_step(int64_t vocab) { /* k: near 0.618 V and coprime to it */
    for (int64_t k = (int64_t)(0.618 * (double)vocab);; k++) {
        int64_t a = k, b = vocab;
        while (b) { const int64_t r = a % b; a = b; b = r; }
        if (a == 1) return k;
    }
}

static int ends_with(const char *s, const char *tail) {
    const size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

static void chain_embedding(const config *c, const tensor_plan *t, int64_t token, float *row) {
    uint64_t rng = hash_name(c->seed ^ 0xc4a17ull, "chain") + (uint64_t)token * 0x9e3779b97f4a7c15ull;
    if (!rng) rng = 1;
    init_row(t, c, &rng, row);
}

static void chain_row(const config *c, const tensor_plan *t, int64_t r, float *row) {
    if (!strcmp(t->name, "token_embd.weight")) {
        chain_embedding(c, t, r, row);
    } else if (!strcmp(t->name, "output.weight")) { /* row r = s(t): t = r - k */
        const int64_t V = t->ne[1], k = chain_step(V);
        chain_embedding(c, t, ((r - k) % V + V) % V, row);
        for (int64_t i = 0; i < t->ne[0]; i++) row[i] *= CHAIN_HEAD;
    } else if (ends_with(t->name, "nextn.eh_proj.weight")) {
        for (int64_t i = 0; i < t->ne[0]; i++) row[i] = i == r ? 1.0f : 0.0f;
    } else if (ends_with(t->name, "attn_output.weight") || ends_with(t->name, "ssm_out.weight") ||
               ends_with(t->name, "ffn_down.weight") || ends_with(t->name, "ffn_down_exps.weight") ||
               ends_with(t->name, "ffn_down_shexp.weight")) {
        for (int64_t i = 0; i < t->ne[0]; i++) row[i] *= CHAIN_QUIET;
    }
}

/* --row-pool N: quantize N random rows of the tensor and write each of its
 * rows as one of them, picked at random. The slow quantizers of the lowest-
 * bit types (iq1_s searches its grid) would take hours for the gigabytes of a
 * streaming benchmark; what a speed benchmark needs is the bytes and valid
 * blocks, not distinct values. Routers and topic rows are never pooled. */
static void write_pooled(gw *w, const tensor_plan *t, const config *c, uint64_t *rng, size_t rb, float *row) {
    const quant_traits *q = quant_traits_get(t->type);
    uint8_t *pool = malloc((size_t)c->row_pool * rb);
    char err[256];
    if (!pool) die("out of memory");
    for (int i = 0; i < c->row_pool; i++) {
        init_row(t, c, rng, row);
        q->from_float(row, pool + (size_t)i * rb, t->ne[0]);
    }
    for (int64_t r = 0; r < t->ne[1] * t->ne[2]; r++) {
        const uint64_t k = (uint64_t)(0.5f * (next_uniform(rng) + 1.0f) * (float)c->row_pool) % (uint64_t)c->row_pool;
        if (gw_data(w, pool + k * rb, rb, err, sizeof err) != 0) die(err);
    }
    free(pool);
}

/* --special-tokens A,B,...: each a control token (llama.cpp type 3) at v's end, as published files have their
 * chat and tool markers. Returns how many (0 for NULL), -1 when out of memory or one is empty. */
static int add_special_tokens(bpe_vocab *v, const char *list) {
    int n = 0;
    for (const char *s = list; s && *s; n++) {
        const char *e = strchr(s, ',');
        const size_t l = e ? (size_t)(e - s) : strlen(s);
        char **t = realloc(v->tokens, sizeof *t * (size_t)(v->n_tokens + 1));
        if (!t || !l) return -1;
        v->tokens = t;
        int32_t *ty = realloc(v->types, sizeof *ty * (size_t)(v->n_tokens + 1));
        if (!ty) return -1;
        v->types = ty;
        if (!(v->tokens[v->n_tokens] = malloc(l + 1))) return -1;
        memcpy(v->tokens[v->n_tokens], s, l);
        v->tokens[v->n_tokens][l] = 0;
        v->types[v->n_tokens++] = 3;
        s = e ? e + 1 : s + l;
    }
    return n;
}

/* Extend v to n tokens with unused ones ("<|unused_N|>", llama.cpp type 5). */
static int pad_vocab(bpe_vocab *v, int n) {
    char **t = realloc(v->tokens, sizeof *t * (size_t)n);
    if (!t) return -1;
    v->tokens = t;
    int32_t *ty = realloc(v->types, sizeof *ty * (size_t)n);
    if (!ty) return -1;
    v->types = ty;
    for (int i = v->n_tokens; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "<|unused_%d|>", i);
        if (!(v->tokens[i] = df_strdup(name))) return -1;
        v->types[i] = 5;
        v->n_tokens = i + 1;
    }
    return 0;
}

/* --chat-template NAME: each family's published template, from the real ones the Jinja tests hold (run from the
 * repository's root). */
static const char *const template_names[][2] = {
    {"qwen3", "Qwen-Qwen3-0.6B"}, {"qwen3-coder", "Qwen3-Coder"}, {"qwen3.5", "Qwen3.5-4B"},
    {"qwen2.5", "Qwen-Qwen2.5-7B-Instruct"}, {"deepseek-v3.1", "deepseek-ai-DeepSeek-V3.1"},
    {"deepseek-v3.2", "deepseek-ai-DeepSeek-V3.2"}, {"deepseek-v4", "deepseek-ai-DeepSeek-V4"},
    {"deepseek-r1", "llama-cpp-deepseek-r1"}, {"kimi-k2", "Kimi-K2-Instruct"}, {"kimi-k2-thinking", "Kimi-K2-Thinking"},
    {"kimi-k3", "Kimi-K3"}, {"glm-4.6", "GLM-4.6"}, {"glm-4.7", "GLM-4.7-Flash"}, {"minimax-m2", "MiniMax-M2"},
    {"gpt-oss", "openai-gpt-oss-120b"}, {"llama3.1", "meta-llama-Llama-3.1-8B-Instruct"},
    {"llama3.2", "meta-llama-Llama-3.2-3B-Instruct"}, {"mistral", "Mistral-Small-3.2-24B-Instruct-2506"},
    {"mistral-nemo", "mistralai-Mistral-Nemo-Instruct-2407"}, {"hermes", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use"},
};

/* --chat-template FILE|NAME: the file's text (or the named family's template), as tokenizer.chat_template. */
static void write_template(gw *w, const char *path) {
    char err[1024], msg[1100], named[512];
    for (size_t i = 0; i < sizeof template_names / sizeof *template_names; i++)
        if (!strcmp(path, template_names[i][0]) && access(path, F_OK) != 0) {
            snprintf(named, sizeof named, "tests/data/jinja/templates/%s.jinja", template_names[i][1]);
            path = named;
        }
    char *t = df_read_input(path, 1 << 20, DF_INPUT_TEXT, NULL, NULL, err, sizeof err);
    if (!t) snprintf(msg, sizeof msg, "--chat-template: %s", err), die(msg);
    if (gw_str(w, "tokenizer.chat_template", t)) die("out of memory");
    free(t);
}

static void write_vocab(gw *w, const config *c, const bpe_vocab *v) {
    const char *pre = c->pre ? c->pre : strcmp(c->arch, "llama") == 0 ? "llama-bpe" : strcmp(c->arch, "deepseek2") == 0 || strcmp(c->arch, "deepseek32") == 0 || is_ds4(c) ? "deepseek-v3" : is_glm4moe(c) || is_dsa(c) ? "glm4" : is_minimax(c) ? "minimax-m2" : is_gptoss(c) ? "gpt-4o" : "qwen2";
    if (gw_str(w, "tokenizer.ggml.model", "gpt2") || gw_str(w, "tokenizer.ggml.pre", pre) ||
        gw_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens, (size_t)v->n_tokens) ||
        gw_arr_i32(w, "tokenizer.ggml.token_type", v->types, (size_t)v->n_tokens) ||
        gw_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges, (size_t)v->n_merges) ||
        gw_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos) ||
        gw_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos) ||
        gw_bool(w, "tokenizer.ggml.add_bos_token", strcmp(c->arch, "llama") == 0 || strcmp(c->arch, "deepseek2") == 0 || strcmp(c->arch, "deepseek32") == 0 || is_ds4(c)))
        die("out of memory");
}

static void write_hparams(gw *w, const config *c) {
    char k[128];
#define KU32(suffix, val) \
    do { snprintf(k, sizeof k, "%s." suffix, c->arch); if (gw_u32(w, k, (uint32_t)(val))) die("out of memory"); } while (0)
#define KF32(suffix, val) \
    do { snprintf(k, sizeof k, "%s." suffix, c->arch); if (gw_f32(w, k, (val))) die("out of memory"); } while (0)
    if (gw_str(w, "general.architecture", c->arch) || gw_str(w, "general.name", "deltafin-mkmodel") ||
        gw_u32(w, "general.alignment", 32))
        die("out of memory");
    KU32("context_length", c->ctx);
    KU32("embedding_length", c->n_embd);
    KU32("block_count", c->n_layer + c->nextn);
    KU32("feed_forward_length", c->n_ff);
    KU32("attention.head_count", c->n_head);
    if (is_kimi(c)) write_hparams_kimi(w, c);
    else KU32("attention.head_count_kv", c->n_head_kv);
    if (is_ds(c) || is_kimi(c)) {
        const int hd = c->qk_nope + c->qk_rope;
        KU32("attention.kv_lora_rank", c->kv_lora);
        if (c->q_lora) KU32("attention.q_lora_rank", c->q_lora);
        if (c->mla_split) { /* the MQA view llama.cpp's converter writes, plus the real head sizes */
            KU32("attention.key_length", c->kv_lora + c->qk_rope);
            KU32("attention.value_length", c->kv_lora);
            KU32("attention.key_length_mla", hd);
            KU32("attention.value_length_mla", c->v_head);
        } else {
            KU32("attention.key_length", hd);
            KU32("attention.value_length", c->v_head);
        }
        KU32("rope.dimension_count", c->qk_rope);
        KU32("leading_dense_block_count", c->dense_lead);
        KU32("expert_shared_count", c->n_shared);
        KF32("expert_weights_scale", c->w_scale);
        KU32("expert_gating_func", c->gating);
        snprintf(k, sizeof k, "%s.expert_weights_norm", c->arch);
        if (gw_bool(w, k, c->norm_w)) die("out of memory");
        if (c->groups > 1) {
            KU32("expert_group_count", c->groups);
            KU32("expert_group_used_count", c->group_used);
        }
        if (strcmp(c->arch, "deepseek2") == 0 && c->nextn) KU32("nextn_predict_layers", c->nextn);
    } else {
        KU32("attention.key_length", c->head_dim);
        KU32("attention.value_length", c->head_dim);
        KU32("rope.dimension_count", c->n_rot ? c->n_rot : c->head_dim);
    }
    if (is_glm4moe(c)) {
        KU32("leading_dense_block_count", c->dense_lead);
        KU32("expert_shared_count", c->n_shared);
        KF32("expert_weights_scale", c->w_scale);
        KU32("expert_gating_func", c->gating);
        snprintf(k, sizeof k, "%s.expert_weights_norm", c->arch);
        if (gw_bool(w, k, c->norm_w)) die("out of memory");
        if (c->nextn) KU32("nextn_predict_layers", c->nextn);
    }
    if (is_minimax(c)) KU32("expert_gating_func", c->gating);
    if (is_dsa(c)) {
        KU32("attention.indexer.head_count", c->idx_heads);
        KU32("attention.indexer.key_length", c->idx_hd);
        KU32("attention.indexer.top_k", c->idx_topk);
        if (c->idx_types[0]) {
            int32_t types[128];
            for (int l = 0; l < c->n_layer; l++) types[l] = c->idx_types[l] == '1';
            snprintf(k, sizeof k, "%s.attention.indexer.types", c->arch);
            if (gw_arr_i32(w, k, types, (size_t)c->n_layer)) die("out of memory");
        }
    }
    if (is_qwen35(c)) write_hparams_qwen35(w, c);
    if (is_ds4(c)) write_hparams_ds4(w, c);
    if (is_granite(c)) {
        KF32("logit_scale", c->g_logit);
        if (c->g_res != 0.0f) KF32("residual_scale", c->g_res);
        if (c->g_emb != 0.0f) KF32("embedding_scale", c->g_emb);
        if (c->g_att != 0.0f) KF32("attention.scale", c->g_att);
        snprintf(k, sizeof k, "%s.rope.scaling.finetuned", c->arch);
        if (c->g_nope && gw_bool(w, k, 0)) die("out of memory");
    }
    if (is_gptoss(c)) {
        KU32("attention.sliding_window", c->swa);
        if (c->swa_pattern) KU32("attention.sliding_window_pattern", c->swa_pattern < 0 ? 0 : c->swa_pattern);
        if (c->rope_base_swa > 0.0f) KF32("rope.freq_base_swa", c->rope_base_swa);
    }
    if (c->n_expert > 0) {
        KU32("expert_count", c->n_expert);
        KU32("expert_used_count", c->n_used);
        if (strcmp(c->arch, "llama") != 0) KU32("expert_feed_forward_length", c->n_ff_exp);
        if (strcmp(c->arch, "qwen2moe") == 0 || (is_granite(c) && c->n_ff_shexp > 0))
            KU32("expert_shared_feed_forward_length", c->n_ff_shexp);
    }
    KU32("vocab_size", c->vocab);
    KF32("attention.layer_norm_rms_epsilon", 1e-5f);
    KF32("rope.freq_base", c->rope_base);
    if (strcmp(c->scaling, "linear") == 0 || strcmp(c->scaling, "yarn") == 0) {
        snprintf(k, sizeof k, "%s.rope.scaling.type", c->arch);
        if (gw_str(w, k, c->scaling)) die("out of memory");
        KF32("rope.scaling.factor", c->scale_factor);
        if (c->scale_orig) KU32("rope.scaling.original_context_length", c->scale_orig);
        if (c->yarn_log_mul != 0.0f) KF32("rope.scaling.yarn_log_multiplier", c->yarn_log_mul);
    }
#undef KU32
#undef KF32
}

static int parse_type(const char *s) {
    for (int t = 0; t < DF_TYPE_COUNT; t++) {
        const quant_traits *q = quant_traits_get(t);
        if (q && q->name && q->supported && strcasecmp(q->name, s) == 0 && t != DF_TYPE_Q8_1 && t != DF_TYPE_Q8_K)
            return t;
    }
    return -1;
}

static void preset(config *c, const char *name) {
    if (strcmp(name, "tiny") == 0) { c->n_embd = 256; c->n_layer = 2; c->n_head = 4; c->n_head_kv = 2; c->n_ff = 512; c->vocab = 320; }
    else if (strcmp(name, "small") == 0) { c->n_embd = 512; c->n_layer = 4; c->n_head = 8; c->n_head_kv = 4; c->n_ff = 1536; c->vocab = 1024; }
    else if (strcmp(name, "medium") == 0) { c->n_embd = 1024; c->n_layer = 8; c->n_head = 16; c->n_head_kv = 4; c->n_ff = 2816; c->vocab = 2048; }
    else if (strcmp(name, "1b") == 0) { c->n_embd = 2048; c->n_layer = 16; c->n_head = 32; c->n_head_kv = 8; c->n_ff = 5632; c->vocab = 4096; }
    else if (strcmp(name, "mixtral-tiny") == 0) {
        preset(c, "tiny");
        c->arch = "llama"; c->n_ff = 256; c->n_expert = 8; c->n_used = 2; c->n_ff_exp = 256;
    } else if (strcmp(name, "qwen2moe-tiny") == 0) {
        preset(c, "tiny");
        c->arch = "qwen2moe"; c->n_expert = 16; c->n_used = 4; c->n_ff_exp = 256; c->n_ff_shexp = 512;
    } else if (strcmp(name, "qwen3moe-tiny") == 0) {
        preset(c, "tiny");
        c->arch = "qwen3moe"; c->n_expert = 16; c->n_used = 4; c->n_ff_exp = 256;
    } else if (strcmp(name, "deepseek-v3-tiny") == 0) {
        preset(c, "tiny");
        c->arch = "deepseek2"; c->n_layer = 3; c->dense_lead = 1; c->n_head = 4; c->n_head_kv = 1;
        c->q_lora = 128; c->kv_lora = 128; c->qk_nope = 64; c->qk_rope = 32; c->v_head = 64; c->mla_split = 1;
        c->n_expert = 16; c->n_used = 4; c->n_ff_exp = 256; c->n_shared = 1; c->n_ff_shexp = 256;
        c->groups = 4; c->group_used = 2; c->gating = 2; c->probs_bias = 1; c->norm_w = 1; c->w_scale = 2.5f;
        memcpy(c->scaling, "yarn", 5); c->scale_factor = 4.0f; c->scale_orig = 64; c->yarn_log_mul = 0.1f;
    } else if (strcmp(name, "deepseek32-tiny") == 0 || strcmp(name, "glm-dsa-tiny") == 0) {
        /* the indexer's top-k is small so that short prompts select */
        preset(c, "deepseek-v3-tiny");
        c->arch = name[0] == 'd' ? "deepseek32" : "glm-dsa";
        c->idx_heads = 16; c->idx_hd = 64; c->idx_topk = 16;
        if (name[0] == 'g') { c->n_layer = 4; c->groups = 0; c->group_used = 0; c->w_scale = 2.5f; c->idx_topk = 24; }
    } else if (strcmp(name, "deepseek-v2-tiny") == 0) {
        preset(c, "tiny");
        c->arch = "deepseek2"; c->n_layer = 3; c->dense_lead = 1; c->n_head = 4; c->n_head_kv = 4;
        c->q_lora = 128; c->kv_lora = 128; c->qk_nope = 64; c->qk_rope = 32; c->v_head = 64; c->mla_split = 0;
        c->n_expert = 16; c->n_used = 4; c->n_ff_exp = 256; c->n_shared = 2; c->n_ff_shexp = 512;
        c->gating = 1; c->norm_w = 0; c->w_scale = 1.0f;
    } else if (strcmp(name, "deepseek-v2-lite-tiny") == 0) {
        /* llama.cpp recognises a model without q LoRA ("lite") by its 26 or 27 layers */
        preset(c, "tiny");
        c->arch = "deepseek2"; c->n_embd = 128; c->n_layer = 26; c->dense_lead = 1; c->n_head = 2; c->n_head_kv = 2;
        c->q_lora = 0; c->kv_lora = 64; c->qk_nope = 32; c->qk_rope = 16; c->v_head = 32; c->mla_split = 0;
        c->n_ff = 256; c->n_expert = 8; c->n_used = 2; c->n_ff_exp = 64; c->n_shared = 2; c->n_ff_shexp = 128;
        c->gating = 1; c->norm_w = 0; c->w_scale = 1.0f;
    } else if (strcmp(name, "kimi-linear-tiny") == 0 || strcmp(name, "kimi-k3-tiny") == 0) {
        /* three KDA layers to one NoPE MLA layer, as Kimi-Linear; one dense lead layer */
        preset(c, "tiny");
        c->arch = name[5] == 'k' ? "kimi-k3" : "kimi-linear"; c->n_layer = 4; memcpy(c->schedule, "KKKM", 5);
        c->n_head = 4; c->n_head_kv = 4; c->kda_hd = 64; c->d_conv = 4;
        c->q_lora = 0; c->kv_lora = 128; c->qk_nope = 64; c->qk_rope = 32; c->v_head = 64; c->mla_split = 1;
        c->n_expert = 16; c->n_used = 4; c->n_ff_exp = 128; c->n_shared = 1; c->dense_lead = 1;
        c->gating = 2; c->probs_bias = 1; c->norm_w = 1; c->w_scale = 2.5f;
        if (c->arch[5] == 'k') { /* kimi-k3 */
            c->n_layer = 5; memcpy(c->schedule, "KKMKM", 6); c->q_lora = 96; c->attn_res = 2; c->latent = 128;
            c->routed_norm = 1; c->mla_gate = 1; c->gate_lb = -5.0f; c->situ_beta = 3.0f; c->situ_lb = 8.0f;
        }
    } else if (strcmp(name, "glm4moe-tiny") == 0) {
        /* GLM-4.5's shape: half-rotated heads, Q/K norms, one dense lead layer, one NextN block */
        preset(c, "tiny");
        c->arch = "glm4moe"; c->n_layer = 3; c->dense_lead = 1; c->nextn = 1; c->qk_norm = 1; c->n_rot = 32;
        c->n_expert = 16; c->n_used = 4; c->n_ff_exp = 128; c->n_shared = 1;
        c->gating = 2; c->probs_bias = 1; c->norm_w = 1; c->w_scale = 2.5f;
    } else if (strcmp(name, "minimax-m2-tiny") == 0) {
        /* MiniMax M2's shape: half-rotated heads, whole-Q/K norms, sigmoid routing, no shared expert */
        preset(c, "tiny");
        c->arch = "minimax-m2"; c->n_layer = 3; c->n_rot = 32; c->n_ff = 128;
        c->n_expert = 16; c->n_used = 4; c->n_ff_exp = 128; c->gating = 2; c->probs_bias = 1; c->norm_w = 1;
    } else if (strcmp(name, "deepseek4-tiny") == 0) {
        /* DeepSeek V4's shape at a small size: a sliding-only layer, two ratio-4 layers with the indexer and a
         * ratio-128 one; a 16-token window and top-4 so that prompts of a few hundred tokens use every path */
        preset(c, "tiny");
        c->arch = "deepseek4"; c->n_layer = 4; memcpy(c->ds4_layers, "SCHC", 5); c->hash_layers = 2;
        c->n_head = 4; c->n_head_kv = 1; c->head_dim = 64; c->n_rot = 16; c->q_lora = 64; c->o_groups = 2; c->o_lora = 32;
        c->swa = 16; c->idx_heads = 16; c->idx_hd = 64; c->idx_topk = 4; c->hc = 4; c->hc_iters = 20;
        c->n_expert = 8; c->n_used = 2; c->n_ff_exp = 64; c->n_ff = 64; c->n_shared = 1; c->norm_w = 1; c->w_scale = 1.5f;
        c->swiglu_limit = 2.0f; c->rope_base_comp = 160000.0f;
    } else if (strcmp(name, "gpt-oss-tiny") == 0) {
        /* gpt-oss's shape: sliding windows on alternate layers, sinks, biased MoE with swiglu_oai */
        preset(c, "tiny");
        c->arch = "gpt-oss"; c->n_layer = 4; c->swa = 32; c->rope_base = 150000.0f;
        c->n_expert = 16; c->n_used = 4; c->n_ff_exp = 128;
    } else if (strcmp(name, "qwen35moe-tiny") == 0 || strcmp(name, "qwen3next-tiny") == 0) {
        /* Qwen3.5's shape: three delta-net layers to one gated attention layer, quarter-rotated
         * heads, more value than key heads in the delta net, a sigmoid-gated shared expert, one MTP
         * block; Qwen3-Next's the same with its own head order and ssm_ba */
        preset(c, "tiny");
        c->arch = name[5] == '5' ? "qwen35moe" : "qwen3next"; c->n_layer = 4; c->attn_every = 4; c->nextn = 1;
        c->n_head = 4; c->n_head_kv = 2; c->head_dim = 64; c->n_rot = 16;
        c->gdn_v_heads = 4; c->gdn_k_heads = 2; c->gdn_hd = 32; c->d_conv = 4;
        c->n_expert = 16; c->n_used = 4; c->n_ff_exp = 128; c->n_ff_shexp = 128;
    } else if (strcmp(name, "granite-tiny") == 0 || strcmp(name, "granite-moe-tiny") == 0) {
        /* Granite 3's scalars (embedding 12, residual 0.22, attention 1/64, logits / 8 would flatten tiny
         * random logits: / 2); the MoE one with a shared expert */
        preset(c, "tiny");
        c->arch = "granite"; c->g_emb = 12.0f; c->g_res = 0.22f; c->g_att = 0.015625f; c->g_logit = 2.0f;
        if (name[8] == 'm') { c->n_ff = 128; c->n_expert = 8; c->n_used = 2; c->n_ff_exp = 128; c->n_ff_shexp = 96; }
    } else die("unknown preset (tiny, small, medium, 1b, mixtral-tiny, qwen2moe-tiny, qwen3moe-tiny, "
               "deepseek-v3-tiny, deepseek-v2-tiny, deepseek-v2-lite-tiny, kimi-linear-tiny, kimi-k3-tiny, glm4moe-tiny, "
               "minimax-m2-tiny, gpt-oss-tiny, qwen35moe-tiny, qwen3next-tiny, deepseek32-tiny, glm-dsa-tiny, deepseek4-tiny, "
               "granite-tiny, granite-moe-tiny)");
}

/* ---- --random-config SEED ----
 * A configuration of the preset's family drawn at random: every
 * hyperparameter llama.cpp reads for the architecture, independently of the
 * others, within the range that a published file may hold and that both
 * engines accept (head sizes apart from width / heads, q LoRA present or
 * not, LoRA ranks, partial rotation, YaRN, windows, indexer heads, size and
 * top-k, shared indexer layers, delta-net heads, conv kernels, gate bounds,
 * residual-attention blocks, latent sizes, expert counts and groups, routing
 * functions and scales, dense lead layers, MTP blocks). The preset gives the
 * family; the seed also seeds the weights. The draw is printed as the
 * equivalent flags, so a failing configuration can be rebuilt and shrunk by
 * hand. tests/sweep.sh runs these against llama.cpp.
 * Left out, because llama.cpp (the pinned v0.4.0 bundle) crashes on them or
 * computes something else than the model means, while no published file
 * has them: a DSA indexer head that is not a multiple of 64 (llama.cpp
 * rotates it by Hadamard blocks of 64 or more: GGML_ASSERT in mul_mat);
 * as many used expert groups as groups (GGML_ASSERT n_group_used <
 * n_expert_groups); a kimi or qwen35/qwen3next model without both an
 * attention and a recurrent layer (no KV or no recurrent cache: GGML_ASSERT
 * buffer); a deepseek4 model without both compressed kinds, ratio 4 and 128
 * (a division by zero); and a kimi-linear model without shared experts,
 * where llama.cpp adds the FFN's input in place of the missing shared
 * expert's output (kimi-linear.cpp builds build_ffn on null weights), which
 * Kimi-Linear's own code does not: Deltafin adds nothing. */
static uint64_t rc_state;
static int rc_int(int lo, int hi) { /* uniform in [lo, hi] (splitmix64) */
    uint64_t z = (rc_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (int)(z % (uint64_t)(hi - lo + 1));
}
static int rc_pick(const int *v, int n) { return v[rc_int(0, n - 1)]; }
#define RC_PICK(...) rc_pick((const int[]){__VA_ARGS__}, (int)(sizeof((const int[]){__VA_ARGS__}) / sizeof(int)))

static void rc_layers(char *out, int n, const char *alphabet) {
    const int k = (int)strlen(alphabet);
    for (int l = 0; l < n; l++) out[l] = alphabet[rc_int(0, k - 1)];
    out[n] = 0;
}

/* The experts of any MoE family: count, used, width, routing. */
static void rc_experts(config *c) {
    c->n_expert = RC_PICK(4, 8, 16, 32);
    c->n_used = rc_int(1, c->n_expert < 8 ? c->n_expert : 8);
    c->n_ff_exp = RC_PICK(32, 64, 128);
    c->norm_w = rc_int(0, 1);
}

/* Multi-head latent attention's ranks and head parts (deepseek2, DSA, kimi). */
static void rc_mla(config *c, int q_lora_optional) {
    c->q_lora = q_lora_optional && rc_int(0, 1) ? 0 : RC_PICK(32, 64, 96);
    c->kv_lora = RC_PICK(32, 64, 128);
    c->qk_nope = RC_PICK(16, 32, 64);
    c->qk_rope = RC_PICK(8, 16, 32);
    c->v_head = RC_PICK(16, 32, 64, 96);
    c->n_head = RC_PICK(1, 2, 4, 8);
}

static void rc_rope(config *c, int yarn_only) {
    c->rope_base = (float)RC_PICK(10000, 50000, 1000000);
    const int kind = rc_int(0, yarn_only ? 1 : 2); /* none, yarn, linear */
    c->scaling[0] = 0, c->scale_factor = 0.0f, c->scale_orig = 0, c->yarn_log_mul = 0.0f;
    if (kind == 1) {
        memcpy(c->scaling, "yarn", 5);
        c->scale_factor = (float)RC_PICK(2, 4, 8, 40);
        c->scale_orig = RC_PICK(32, 64, 128);
        if (is_ds(c) || is_kimi(c)) c->yarn_log_mul = rc_int(0, 1) ? 0.1f : 0.0f;
    } else if (kind == 2) {
        memcpy(c->scaling, "linear", 7);
        c->scale_factor = (float)RC_PICK(2, 4);
    }
}

static void random_config(config *c, uint64_t seed, int *head_dim_set) {
    rc_state = seed * 0x2545F4914F6CDD1Dull + 0x1234567ull;
    c->seed = seed;
    const quant_traits *qt = quant_traits_get(c->type), *qe = quant_traits_get(c->expert_type < 0 ? c->type : c->expert_type);
    c->n_embd = (qt && qt->blck > 64) || (qe && qe->blck > 64) ? 256 : RC_PICK(64, 128, 256); /* rows of whole blocks */
    if (is_ds(c)) {
        c->n_layer = rc_int(2, 4);
        rc_mla(c, 0); /* llama.cpp takes a deepseek2 without q LoRA for "lite" only at 26 or 27 layers */
        c->mla_split = is_dsa(c) ? 1 : rc_int(0, 1);
        c->n_head_kv = c->mla_split ? 1 : c->n_head;
        rc_experts(c);
        c->n_shared = rc_int(1, 2);
        c->dense_lead = rc_int(0, c->n_layer - 1);
        c->gating = rc_int(1, 2);
        c->probs_bias = c->gating == 2;
        c->w_scale = rc_int(0, 1) ? 2.5f : 1.0f;
        c->groups = c->group_used = 0;
        if (!(c->arch[0] == 'g') && c->n_expert >= 8 && rc_int(0, 1)) { /* glm-dsa has no groups */
            c->groups = RC_PICK(2, 4);
            c->group_used = rc_int(1, c->groups - 1);
            const int room = c->group_used * (c->n_expert / c->groups);
            if (c->n_used > room) c->n_used = room;
        }
        rc_rope(c, 1);
        if (is_dsa(c)) {
            c->idx_heads = RC_PICK(1, 2, 3, 4, 8, 16);
            c->idx_hd = RC_PICK(64, 128);
            c->idx_topk = RC_PICK(2, 4, 8, 16, 32, 64);
            c->idx_types[0] = 0;
            if (c->arch[0] == 'g' && rc_int(0, 1)) {
                rc_layers(c->idx_types, c->n_layer, "01");
                c->idx_types[0] = '1';
            }
        }
    } else if (is_kimi(c)) {
        c->n_layer = rc_int(2, 6);
        rc_layers(c->schedule, c->n_layer, "KKM");
        const int at = rc_int(0, c->n_layer - 1); /* a KDA and an MLA layer at least */
        c->schedule[at] = 'M', c->schedule[(at + 1) % c->n_layer] = 'K';
        rc_mla(c, 1);
        if (!is_k3(c)) c->q_lora = 0;
        c->n_head = RC_PICK(1, 2, 4, 8);
        c->kda_hd = RC_PICK(16, 32, 64, 128);
        c->d_conv = rc_int(2, 4);
        rc_experts(c);
        c->n_shared = rc_int(is_k3(c) ? 0 : 1, 2);
        c->dense_lead = rc_int(0, 1);
        c->gating = 2, c->probs_bias = 1;
        c->w_scale = rc_int(0, 1) ? 2.5f : 1.0f;
        if (is_k3(c)) {
            c->attn_res = rc_int(0, c->n_layer);
            c->latent = RC_PICK(0, 32, 64);
            c->gate_lb = (float)RC_PICK(0, -2, -5);
            c->situ_beta = (float)RC_PICK(1, 3);
            c->situ_lb = (float)RC_PICK(2, 8);
            c->routed_norm = rc_int(0, 1);
            c->mla_gate = rc_int(0, 1);
        }
    } else if (is_ds4(c)) {
        c->n_layer = rc_int(2, 5);
        rc_layers(c->ds4_layers, c->n_layer, "SCCH");
        const int at = rc_int(0, c->n_layer - 1);
        c->ds4_layers[at] = 'C', c->ds4_layers[(at + 1) % c->n_layer] = 'H';
        c->n_head = RC_PICK(2, 4, 8);
        c->q_lora = RC_PICK(32, 64);
        c->o_groups = RC_PICK(1, 2);
        c->o_lora = RC_PICK(16, 32);
        c->swa = RC_PICK(4, 8, 16, 32);
        c->idx_heads = RC_PICK(1, 2, 4, 16);
        c->idx_topk = RC_PICK(2, 4, 8);
        c->hc_iters = RC_PICK(1, 5, 20);
        c->hash_layers = rc_int(0, c->n_layer);
        c->n_expert = RC_PICK(4, 8, 16);
        c->n_used = rc_int(1, 4);
        c->n_ff_exp = RC_PICK(32, 64);
        c->swiglu_limit = (float)RC_PICK(2, 7, 10);
        c->w_scale = rc_int(0, 1) ? 1.5f : 1.0f;
    } else {
        c->n_layer = rc_int(1, 4);
        c->n_head = RC_PICK(1, 2, 4, 8);
        c->n_head_kv = c->n_head / RC_PICK(1, 1, 2, 4);
        if (c->n_head_kv < 1) c->n_head_kv = 1;
        c->head_dim = RC_PICK(16, 32, 64, 96, 128);
        if (strncmp(c->arch, "qwen2", 5) == 0) c->head_dim = c->n_embd / c->n_head; /* llama.cpp's qwen2 ignores key_length */
        *head_dim_set = 1;
        c->n_ff = RC_PICK(64, 128, 256, 512);
        rc_rope(c, 0);
        if (c->n_expert > 0) {
            rc_experts(c);
            if (strcmp(c->arch, "llama") == 0) c->n_ff_exp = c->n_ff;
            if (strcmp(c->arch, "qwen2moe") == 0) c->n_ff_shexp = RC_PICK(64, 128, 256);
            if (is_granite(c)) c->n_ff_exp = c->n_ff, c->n_ff_shexp = RC_PICK(0, 64, 128);
        }
        if (is_granite(c)) {
            c->head_dim = c->n_embd / c->n_head; /* llama.cpp's granite: heads as wide as the rotary dimension */
            c->g_emb = (float)RC_PICK(0, 1, 12);
            c->g_res = RC_PICK(0, 1, 2) == 0 ? 0.0f : RC_PICK(0, 1) ? 0.22f : 0.5f;
            c->g_att = RC_PICK(0, 1, 2) == 0 ? 0.0f : RC_PICK(0, 1) ? 0.015625f : 0.1f;
            c->g_logit = (float)RC_PICK(1, 2, 8);
            c->g_nope = rc_int(0, 3) == 0;
        }
        if (is_glm4moe(c)) {
            c->n_layer = rc_int(1, 4);
            c->n_rot = c->head_dim / RC_PICK(1, 2, 4);
            c->n_rot -= c->n_rot % 2;
            c->qk_norm = rc_int(0, 1);
            c->nextn = rc_int(0, 1);
            c->n_shared = rc_int(1, 2);
            c->dense_lead = rc_int(0, c->n_layer);
            c->gating = 2, c->probs_bias = 1;
            c->w_scale = rc_int(0, 1) ? 2.5f : 1.0f;
        } else if (is_minimax(c)) {
            c->n_rot = c->head_dim / RC_PICK(1, 2, 4);
            c->n_rot -= c->n_rot % 2;
            c->n_ff = RC_PICK(32, 64, 128);
        } else if (is_gptoss(c)) {
            c->n_layer = rc_int(1, 4);
            c->swa = RC_PICK(4, 8, 16, 32);
            c->swa_pattern = RC_PICK(0, 0, -1, 2, 3);
            if (c->swa_pattern > c->n_layer) c->swa_pattern = 0;
            c->rope_base_swa = rc_int(0, 1) ? 10000.0f : 0.0f;
            c->scaling[0] = 0; /* gpt-oss files carry YaRN; keep it as the preset has it */
        } else if (is_qwen35(c)) {
            c->n_layer = rc_int(2, 5);
            c->attn_every = rc_int(2, c->n_layer < 4 ? c->n_layer : 4); /* a full-attention and a delta-net layer */
            c->gdn_k_heads = RC_PICK(1, 2, 4);
            c->gdn_v_heads = c->gdn_k_heads * RC_PICK(1, 2, 3);
            c->gdn_hd = RC_PICK(16, 32, 64);
            c->d_conv = rc_int(2, 4);
            c->n_rot = c->head_dim / RC_PICK(2, 4);
            c->n_rot -= c->n_rot % 2;
            c->nextn = rc_int(0, 1);
            c->n_ff_shexp = RC_PICK(64, 128);
            if (strcmp(c->arch, "qwen3next") == 0) c->gdn_legacy = rc_int(0, 1);
            c->scaling[0] = 0;
        }
    }
    fprintf(stderr, "mkmodel: --random-config %llu: --n-embd %d --n-layer %d --n-head %d --n-head-kv %d", (unsigned long long)seed,
            c->n_embd, c->n_layer, c->n_head, c->n_head_kv);
    if (*head_dim_set) fprintf(stderr, " --head-dim %d", c->head_dim);
    fprintf(stderr, " --n-ff %d --rope-base %g --seed %llu", c->n_ff, c->rope_base, (unsigned long long)seed);
    if (c->scaling[0]) fprintf(stderr, " --rope-scaling %s:%g:%d", c->scaling, c->scale_factor, c->scale_orig);
    else fprintf(stderr, " --rope-scaling none");
    if (c->n_expert)
        fprintf(stderr, " --experts %d --experts-used %d --n-ff-exp %d --shared %d --dense-lead %d --gating %s --norm-w %d"
                " --w-scale %g --probs-bias %d", c->n_expert, c->n_used, c->n_ff_exp, c->n_shared, c->dense_lead,
                c->gating == 2 ? "sigmoid" : "softmax", c->norm_w, c->w_scale, c->probs_bias);
    if (c->n_expert) fprintf(stderr, " --groups %d:%d", c->groups, c->group_used); /* 0:0 undoes a preset's */
    if ((c->n_ff_shexp && (strcmp(c->arch, "qwen2moe") == 0 || is_qwen35(c))) || (is_granite(c) && c->n_expert))
        fprintf(stderr, " --n-ff-shexp %d", c->n_ff_shexp); /* granite: 0 undoes a preset's */
    if (c->yarn_log_mul != 0.0f || is_ds(c) || is_kimi(c)) fprintf(stderr, " --yarn-log-mul %g", c->yarn_log_mul);
    if (c->kv_lora)
        fprintf(stderr, " --q-lora %d --kv-lora %d --qk-nope %d --qk-rope %d --v-head %d --mla-split %d", c->q_lora,
                c->kv_lora, c->qk_nope, c->qk_rope, c->v_head, c->mla_split);
    if (is_kimi(c)) fprintf(stderr, " --schedule %s --kda-head-dim %d --conv %d", c->schedule, c->kda_hd, c->d_conv);
    if (is_k3(c))
        fprintf(stderr, " --attn-res %d --latent %d --gate-bound %g --situ %g:%g --routed-norm %d --mla-gate %d",
                c->attn_res, c->latent, c->gate_lb, c->situ_beta, c->situ_lb, c->routed_norm, c->mla_gate);
    if (is_dsa(c)) {
        fprintf(stderr, " --idx-heads %d --idx-head-dim %d --idx-top-k %d", c->idx_heads, c->idx_hd, c->idx_topk);
        if (c->idx_types[0]) fprintf(stderr, " --idx-types %s", c->idx_types);
    }
    if (is_ds4(c))
        fprintf(stderr, " --ds4-layers %s --q-lora %d --o-groups %d:%d --swa %d --idx-heads %d --idx-top-k %d"
                " --hc-iters %d --hash-layers %d --swiglu-limit %g", c->ds4_layers, c->q_lora, c->o_groups, c->o_lora,
                c->swa, c->idx_heads, c->idx_topk, c->hc_iters, c->hash_layers, c->swiglu_limit);
    if (is_glm4moe(c) || is_minimax(c) || is_qwen35(c)) fprintf(stderr, " --rope-dims %d", c->n_rot);
    if (is_glm4moe(c)) fprintf(stderr, " --qk-norm %d --nextn %d", c->qk_norm, c->nextn);
    if (is_gptoss(c))
        fprintf(stderr, " --swa %d --rope-base-swa %g", c->swa, c->rope_base_swa);
    if (is_gptoss(c) && c->swa_pattern) fprintf(stderr, " --swa-pattern %d", c->swa_pattern < 0 ? 0 : c->swa_pattern);
    if (is_qwen35(c))
        fprintf(stderr, " --gdn-heads %d:%d --gdn-head-dim %d --conv %d --attn-every %d --nextn %d%s", c->gdn_v_heads,
                c->gdn_k_heads, c->gdn_hd, c->d_conv, c->attn_every, c->nextn, c->gdn_legacy ? " --legacy-ssm-in 1" : "");
    if (is_granite(c))
        fprintf(stderr, " --granite-scales %g:%g:%g:%g --no-rope %d", c->g_emb, c->g_res, c->g_att, c->g_logit, c->g_nope);
    fprintf(stderr, "\n");
}

static void usage(void) {
    fprintf(stderr,
            "usage: mkmodel -o OUT.gguf [--arch llama|qwen2|qwen3] [--type TYPE] [--expert-type TYPE]\n"
            "               TYPE: f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K mxfp4 q1_0 q2_0\n"
            "                     iq4_nl iq4_xs tq1_0 tq2_0 iq2_xxs iq2_xs iq2_s iq3_xxs iq3_s iq1_s iq1_m nvfp4\n"
            "               [--preset tiny|small|medium|1b] [--n-embd N] [--n-layer N] [--n-head N] [--n-head-kv N]\n"
            "               [--head-dim N] [--n-ff N] [--vocab N] [--ctx N] [--seed S] [--tied] [--rope-base F]\n"
            "               [--rope-scaling none | linear:F | yarn:F:ORIG | llama3:F:ORIG] [--yarn-log-mul F]\n"
            "               [--drop-key KEY]...\n"
            "               [--random-config SEED] (the preset's family, every hyperparameter drawn at random)\n"
            "               [--list-keys] (name each metadata key written on stdout)\n"
            "  vocabulary:  [--pre NAME] (tokenizer.ggml.pre) [--multilingual] (merges from CJK/emoji/... text)\n"
            "               [--chat-template FILE|NAME] (tokenizer.chat_template; NAME: a family's own, qwen3 qwen3-coder\n"
            "               qwen3.5 qwen2.5 deepseek-v3.1 deepseek-v3.2 deepseek-v4 deepseek-r1 kimi-k2 kimi-k2-thinking\n"
            "               kimi-k3 glm-4.6 glm-4.7 minimax-m2 gpt-oss llama3.1 llama3.2 mistral mistral-nemo hermes)\n"
            "               [--special-tokens A,B,...] (control tokens at the vocabulary's end: a family's markers)\n"
            "  experts:     [--experts N] [--experts-used K] [--n-ff-exp N] [--n-ff-shexp N] [--shared N]\n"
            "               [--dense-lead N] [--gating softmax|sigmoid] [--groups G:USED] [--norm-w 0|1]\n"
            "               [--w-scale F] [--probs-bias 0|1] [--router-skew S] [--router-corr A]\n"
            "               [--topics K] [--topic-weight W] [--row-pool N]\n"
            "               [--chain] (text the model and its MTP blocks foresee: chain_row())\n"
            "  MLA:         [--q-lora N] [--kv-lora N] [--qk-nope N] [--qk-rope N] [--v-head N] [--mla-split 0|1]\n"
            "  presets:     tiny small medium 1b mixtral-tiny qwen2moe-tiny qwen3moe-tiny deepseek-v3-tiny deepseek-v2-tiny\n"
            "               deepseek-v2-lite-tiny kimi-linear-tiny kimi-k3-tiny glm4moe-tiny\n"
            "               minimax-m2-tiny gpt-oss-tiny qwen35moe-tiny qwen3next-tiny deepseek32-tiny glm-dsa-tiny\n"
            "               deepseek4-tiny\n"
            "  kimi:        [--schedule KKKM (K: KDA layer, M: MLA layer; sets the layer count)] [--kda-head-dim N]\n"
            "               [--conv N] [--attn-res BLOCK] [--latent N] [--gate-bound F (0: none)] [--situ BETA:LINEAR]\n"
            "               [--routed-norm 0|1] [--mla-gate 0|1]\n"
            "  glm4moe:     [--nextn N (NextN/MTP blocks)] [--rope-dims N (default head_dim / 2)] [--qk-norm 0|1]\n"
            "  deepseek2:   [--nextn N (NextN/MTP blocks, DeepSeek V3)]\n"
            "  minimax-m2:  [--rope-dims N (default head_dim / 2)]; its experts are --n-ff wide\n"
            "  gpt-oss:     [--swa N (window)] [--swa-pattern P (0: all layers)] [--rope-base-swa F]\n"
            "  granite:     [--granite-scales EMBED:RESIDUAL:ATTENTION:LOGIT (0: key not written)] [--no-rope 0|1]\n"
            "  qwen35moe, qwen3next: [--gdn-heads V:K] [--gdn-head-dim N] [--conv N] [--attn-every N (full attention)]\n"
            "               [--nextn N] [--rope-dims N (default head_dim / 4)] [--legacy-ssm-in 0|1 (qwen3next)]\n"
            "  DSA:         [--idx-heads N] [--idx-head-dim N] [--idx-top-k K] [--idx-types 1101 (1: own indexer, 0: shared)]\n"
            "  deepseek4:   [--ds4-layers SCHC (S: window only, C: ratio 4 + indexer, H: ratio 128; sets the layer count)]\n"
            "               [--o-groups G:RANK] [--hc-iters N] [--hash-layers N] [--swiglu-limit F] [--rope-base-comp F]\n"
            "               [--swa N] [--rope-dims N] [--q-lora N] [--idx-heads N] [--idx-head-dim N] [--idx-top-k K] [--nextn N]\n"
            "  --shape-only: real header, metadata and tensor directory; the data are holes (a sparse file)\n");
    exit(2);
}

int main(int argc, char **argv) {
    config c;
    memset(&c, 0, sizeof c);
    c.arch = "llama";
    c.type = DF_TYPE_F32;
    c.expert_type = -1; /* same as --type */
    c.seed = 42;
    c.ctx = 2048;
    c.rope_base = 10000.0f;
    c.topic_weight = 0.4f;
    quant_init();
    preset(&c, "tiny");
    int head_dim_set = 0, random_set = 0, list_keys = 0;
    uint64_t random_seed = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--tied") == 0) { c.tied = 1; continue; }
        if (strcmp(a, "--chain") == 0) { c.chain = 1; continue; }
        if (strcmp(a, "--multilingual") == 0) { c.multilingual = 1; continue; }
        if (strcmp(a, "--shape-only") == 0) { c.shape_only = 1; continue; }
        if (strcmp(a, "--list-keys") == 0) { list_keys = 1; continue; }
        if (!v) usage();
        i++;
        if (strcmp(a, "-o") == 0 || strcmp(a, "--out") == 0) c.out = v;
        else if (strcmp(a, "--arch") == 0) c.arch = v;
        else if (strcmp(a, "--type") == 0) { if ((c.type = parse_type(v)) < 0) die("unknown --type"); }
        else if (strcmp(a, "--expert-type") == 0) { if ((c.expert_type = parse_type(v)) < 0) die("unknown --expert-type"); }
        else if (strcmp(a, "--preset") == 0) preset(&c, v);
        else if (strcmp(a, "--n-embd") == 0) c.n_embd = atoi(v);
        else if (strcmp(a, "--n-layer") == 0) c.n_layer = atoi(v);
        else if (strcmp(a, "--n-head") == 0) c.n_head = atoi(v);
        else if (strcmp(a, "--n-head-kv") == 0) c.n_head_kv = atoi(v);
        else if (strcmp(a, "--head-dim") == 0) { c.head_dim = atoi(v); head_dim_set = 1; }
        else if (strcmp(a, "--n-ff") == 0) c.n_ff = atoi(v);
        else if (strcmp(a, "--vocab") == 0) c.vocab = atoi(v);
        else if (strcmp(a, "--ctx") == 0) c.ctx = atoi(v);
        else if (strcmp(a, "--pre") == 0) c.pre = v;
        else if (strcmp(a, "--seed") == 0) c.seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--chat-template") == 0) c.chat_template = v;
        else if (strcmp(a, "--special-tokens") == 0) c.special = v;
        else if (strcmp(a, "--random-config") == 0) { random_seed = strtoull(v, NULL, 10); random_set = 1; }
        else if (strcmp(a, "--drop-key") == 0) {
            if (c.n_drop == (int)(sizeof c.drop / sizeof c.drop[0])) die("too many --drop-key");
            c.drop[c.n_drop++] = v;
        }
        else if (strcmp(a, "--rope-base") == 0) c.rope_base = strtof(v, NULL);
        else if (strcmp(a, "--yarn-log-mul") == 0) c.yarn_log_mul = strtof(v, NULL);
        else if (strcmp(a, "--experts") == 0) c.n_expert = atoi(v);
        else if (strcmp(a, "--experts-used") == 0) c.n_used = atoi(v);
        else if (strcmp(a, "--n-ff-exp") == 0) c.n_ff_exp = atoi(v);
        else if (strcmp(a, "--n-ff-shexp") == 0) c.n_ff_shexp = atoi(v);
        else if (strcmp(a, "--shared") == 0) c.n_shared = atoi(v);
        else if (strcmp(a, "--dense-lead") == 0) c.dense_lead = atoi(v);
        else if (strcmp(a, "--gating") == 0) c.gating = strcmp(v, "sigmoid") == 0 ? 2 : 1;
        else if (strcmp(a, "--groups") == 0) { if (sscanf(v, "%d:%d", &c.groups, &c.group_used) != 2) die("bad --groups"); }
        else if (strcmp(a, "--norm-w") == 0) c.norm_w = atoi(v);
        else if (strcmp(a, "--w-scale") == 0) c.w_scale = strtof(v, NULL);
        else if (strcmp(a, "--probs-bias") == 0) c.probs_bias = atoi(v);
        else if (strcmp(a, "--router-skew") == 0) { c.router_skew = strtof(v, NULL); if (!(c.router_skew >= 0 && c.router_skew <= 4)) die("--router-skew must be in [0, 4]"); }
        else if (strcmp(a, "--row-pool") == 0) { c.row_pool = atoi(v); if (c.row_pool < 1) die("--row-pool must be >= 1"); }
        else if (strcmp(a, "--topics") == 0) { c.topics = atoi(v); if (c.topics < 1 || c.topics > 4096) die("--topics must be in [1, 4096]"); }
        else if (strcmp(a, "--topic-weight") == 0) { c.topic_weight = strtof(v, NULL); if (!(c.topic_weight > 0 && c.topic_weight < 1)) die("--topic-weight must be in (0, 1)"); }
        else if (strcmp(a, "--router-corr") == 0) { c.router_corr = strtof(v, NULL); if (!(c.router_corr >= 0 && c.router_corr < 1)) die("--router-corr must be in [0, 1)"); }
        else if (strcmp(a, "--q-lora") == 0) c.q_lora = atoi(v);
        else if (strcmp(a, "--kv-lora") == 0) c.kv_lora = atoi(v);
        else if (strcmp(a, "--qk-nope") == 0) c.qk_nope = atoi(v);
        else if (strcmp(a, "--qk-rope") == 0) c.qk_rope = atoi(v);
        else if (strcmp(a, "--v-head") == 0) c.v_head = atoi(v);
        else if (strcmp(a, "--mla-split") == 0) c.mla_split = atoi(v);
        else if (strcmp(a, "--schedule") == 0) {
            if (strlen(v) >= sizeof c.schedule || strspn(v, "KM") != strlen(v)) die("bad --schedule (K and M, at most 127)");
            memcpy(c.schedule, v, strlen(v) + 1);
            c.n_layer = (int)strlen(v);
        }
        else if (strcmp(a, "--kda-head-dim") == 0) c.kda_hd = atoi(v);
        else if (strcmp(a, "--conv") == 0) c.d_conv = atoi(v);
        else if (strcmp(a, "--attn-res") == 0) c.attn_res = atoi(v);
        else if (strcmp(a, "--latent") == 0) c.latent = atoi(v);
        else if (strcmp(a, "--gate-bound") == 0) c.gate_lb = strtof(v, NULL);
        else if (strcmp(a, "--situ") == 0) { if (sscanf(v, "%f:%f", &c.situ_beta, &c.situ_lb) != 2) die("bad --situ"); }
        else if (strcmp(a, "--routed-norm") == 0) c.routed_norm = atoi(v);
        else if (strcmp(a, "--mla-gate") == 0) c.mla_gate = atoi(v);
        else if (strcmp(a, "--nextn") == 0) c.nextn = atoi(v);
        else if (strcmp(a, "--rope-dims") == 0) c.n_rot = atoi(v);
        else if (strcmp(a, "--qk-norm") == 0) c.qk_norm = atoi(v);
        else if (strcmp(a, "--swa") == 0) c.swa = atoi(v);
        else if (strcmp(a, "--swa-pattern") == 0) c.swa_pattern = atoi(v) == 0 ? -1 : atoi(v);
        else if (strcmp(a, "--rope-base-swa") == 0) c.rope_base_swa = strtof(v, NULL);
        else if (strcmp(a, "--idx-heads") == 0) c.idx_heads = atoi(v);
        else if (strcmp(a, "--idx-head-dim") == 0) c.idx_hd = atoi(v);
        else if (strcmp(a, "--idx-top-k") == 0) c.idx_topk = atoi(v);
        else if (strcmp(a, "--idx-types") == 0) {
            if (strlen(v) >= sizeof c.idx_types || strspn(v, "01") != strlen(v)) die("bad --idx-types (0 and 1, at most 127)");
            memcpy(c.idx_types, v, strlen(v) + 1);
        }
        else if (strcmp(a, "--ds4-layers") == 0) {
            if (strlen(v) >= sizeof c.ds4_layers || strspn(v, "SCH") != strlen(v)) die("bad --ds4-layers (S, C and H, at most 127)");
            memcpy(c.ds4_layers, v, strlen(v) + 1);
            c.n_layer = (int)strlen(v);
        }
        else if (strcmp(a, "--o-groups") == 0) { if (sscanf(v, "%d:%d", &c.o_groups, &c.o_lora) != 2) die("bad --o-groups"); }
        else if (strcmp(a, "--hc-iters") == 0) c.hc_iters = atoi(v);
        else if (strcmp(a, "--hash-layers") == 0) c.hash_layers = atoi(v);
        else if (strcmp(a, "--swiglu-limit") == 0) c.swiglu_limit = strtof(v, NULL);
        else if (strcmp(a, "--rope-base-comp") == 0) c.rope_base_comp = strtof(v, NULL);
        else if (strcmp(a, "--gdn-heads") == 0) { if (sscanf(v, "%d:%d", &c.gdn_v_heads, &c.gdn_k_heads) != 2) die("bad --gdn-heads"); }
        else if (strcmp(a, "--gdn-head-dim") == 0) c.gdn_hd = atoi(v);
        else if (strcmp(a, "--attn-every") == 0) c.attn_every = atoi(v);
        else if (strcmp(a, "--legacy-ssm-in") == 0) c.gdn_legacy = atoi(v);
        else if (strcmp(a, "--granite-scales") == 0) {
            if (sscanf(v, "%f:%f:%f:%f", &c.g_emb, &c.g_res, &c.g_att, &c.g_logit) != 4) die("bad --granite-scales");
        } else if (strcmp(a, "--no-rope") == 0) c.g_nope = atoi(v);
        else if (strcmp(a, "--rope-scaling") == 0 && strcmp(v, "none") == 0) c.scaling[0] = 0, c.yarn_log_mul = 0.0f;
        else if (strcmp(a, "--rope-scaling") == 0) {
            char kind[16] = {0};
            if (sscanf(v, "%15[a-z0-9]:%f:%d", kind, &c.scale_factor, &c.scale_orig) < 2) die("bad --rope-scaling");
            if (strcmp(kind, "linear") && strcmp(kind, "yarn") && strcmp(kind, "llama3")) die("bad --rope-scaling kind");
            memcpy(c.scaling, kind, sizeof c.scaling);
        } else usage();
    }
    if (!c.out) usage();
    if (random_set) random_config(&c, random_seed, &head_dim_set);
    static const char *arches[] = {"llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "deepseek2", "kimi-linear", "kimi-k3", "glm4moe", "minimax-m2", "gpt-oss", "qwen35moe", "qwen3next", "deepseek32", "glm-dsa", "deepseek4", "granite"};
    int known = 0;
    for (size_t i = 0; i < sizeof arches / sizeof arches[0]; i++) known |= strcmp(c.arch, arches[i]) == 0;
    if (!known) die("unknown --arch (llama, qwen2, qwen3, qwen2moe, qwen3moe, deepseek2, kimi-linear, kimi-k3, glm4moe, minimax-m2, gpt-oss, qwen35moe, qwen3next, deepseek32, glm-dsa, deepseek4, granite)");
    const int moe_arch = strcmp(c.arch, "qwen2moe") == 0 || strcmp(c.arch, "qwen3moe") == 0 || is_ds(&c) ||
                         is_kimi(&c) || is_glm4moe(&c) || is_minimax(&c) || is_gptoss(&c) || is_qwen35(&c) || is_ds4(&c);
    if (moe_arch && c.n_expert == 0) die("this architecture needs --experts (or a preset)");
    if (c.chain && (c.tied || c.topics || c.row_pool))
        die("--chain needs an output head of its own, and no --topics or --row-pool (chain_row)");
    if (c.n_expert > 0 && (c.n_used < 1 || c.n_used > c.n_expert || c.n_ff_exp < 1)) die("inconsistent expert settings");
    if ((strcmp(c.arch, "llama") == 0 || is_granite(&c)) && c.n_expert > 0) c.n_ff_exp = c.n_ff;
    if (is_granite(&c) && c.g_logit <= 0.0f) c.g_logit = 1.0f;
    if (!is_granite(&c) && (c.g_emb != 0.0f || c.g_res != 0.0f || c.g_att != 0.0f || c.g_nope))
        die("--granite-scales and --no-rope are granite's");
    if (is_dsa(&c) && (c.idx_heads < 1 || c.idx_hd < c.qk_rope || c.idx_hd % 2 || c.idx_topk < 1 || c.q_lora < 1 ||
                       !c.mla_split || (c.idx_types[0] && ((int)strlen(c.idx_types) != c.n_layer || c.idx_types[0] != '1'))))
        die("inconsistent DSA settings (indexer heads, a head of at least --qk-rope, top-k, q LoRA, --mla-split 1; "
            "--idx-types names every layer, the first '1')");
    if (!is_dsa(&c) && ((c.idx_heads && !is_ds4(&c)) || c.idx_types[0])) die("--idx-* are deepseek32's and glm-dsa's");
    if (is_ds(&c)) {
        if (c.kv_lora < 1 || c.qk_nope < 1 || c.qk_rope < 2 || c.qk_rope % 2 || c.v_head < 1) die("inconsistent MLA settings");
        c.n_ff_shexp = c.n_ff_exp * c.n_shared;
        c.head_dim = c.qk_nope + c.qk_rope;
        head_dim_set = 1;
    }
    if (is_kimi(&c)) {
        if (c.kv_lora < 1 || c.qk_nope < 1 || c.qk_rope < 2 || c.qk_rope % 2 || c.v_head < 1 || !c.mla_split)
            die("inconsistent MLA settings (kimi needs --mla-split 1)");
        if ((int)strlen(c.schedule) != c.n_layer || c.kda_hd < 1 || c.d_conv < 2 || c.attn_res < 0 || c.latent < 0 ||
            c.latent > c.n_embd || (is_k3(&c) && c.situ_beta <= 0.0f) || c.n_layer > 127)
            die("inconsistent kimi settings (--schedule must name every layer)");
        if (!is_k3(&c) && (c.attn_res || c.latent || c.mla_gate || c.gate_lb != 0.0f || c.q_lora))
            die("kimi-linear has no attn_res, latent MoE, MLA gate, gate bound or q LoRA (kimi-k3 does)");
        c.n_head_kv = c.n_head;
        c.n_ff_shexp = c.n_ff_exp * c.n_shared;
        c.head_dim = c.qk_nope + c.qk_rope;
        head_dim_set = 1;
    }
    if (is_ds4(&c)) head_dim_set = 1; /* the preset's (or --head-dim's) */
    if (!head_dim_set) c.head_dim = c.n_head > 0 ? c.n_embd / c.n_head : 0;
    if (is_glm4moe(&c)) {
        if (c.n_rot == 0) c.n_rot = c.head_dim / 2;
        if (c.n_rot < 2 || c.n_rot % 2 || c.n_rot > c.head_dim || c.nextn < 0 || c.dense_lead > c.n_layer || c.n_shared < 1)
            die("inconsistent glm4moe settings (--rope-dims even, at most the head size; --shared 1 or more)");
        c.n_ff_shexp = c.n_ff_exp * c.n_shared;
    } else if (is_minimax(&c)) {
        if (c.n_rot == 0) c.n_rot = c.head_dim / 2;
        if (c.n_rot < 2 || c.n_rot % 2 || c.n_rot > c.head_dim || c.nextn || c.qk_norm || c.n_shared || c.dense_lead)
            die("inconsistent minimax-m2 settings (no NextN, shared experts or dense layers; --rope-dims even)");
        c.n_ff_exp = c.n_ff; /* the experts are feed_forward_length wide */
    } else if (is_ds4(&c)) {
        if ((int)strlen(c.ds4_layers) != c.n_layer || c.n_layer + c.nextn > 127 || c.n_head_kv != 1 || c.n_rot < 2 ||
            c.n_rot % 2 || c.n_rot > c.head_dim || c.n_rot > c.idx_hd || c.idx_hd % 2 || c.idx_heads < 1 ||
            c.idx_topk < 1 || c.q_lora < 1 || c.o_groups < 1 || c.n_head % c.o_groups || c.o_lora < 1 || c.swa < 1 ||
            c.hc != 4 || c.hc_iters < 1 || c.hash_layers < 0 || c.hash_layers > c.n_layer || c.n_shared < 1 ||
            c.nextn < 0 || c.dense_lead || c.qk_norm)
            die("inconsistent deepseek4 settings (--ds4-layers names every layer; one KV head; --rope-dims even, at "
                "most the head and the indexer head, a multiple of 64 (llama.cpp rotates it in blocks of 64 or more); --o-groups G:R with G dividing the heads; --swa N)");
    } else if (is_gptoss(&c)) {
        if (c.swa < 1 || c.swa_pattern > c.n_layer || c.nextn || c.qk_norm || c.n_rot || c.n_shared || c.dense_lead)
            die("inconsistent gpt-oss settings (--swa N needed; no NextN, Q/K norms, partial RoPE, shared or dense layers)");
    } else if (is_qwen35(&c)) {
        if (c.n_rot == 0) c.n_rot = c.head_dim / 4;
        if (c.n_rot < 2 || c.n_rot % 2 || c.n_rot > c.head_dim || c.nextn < 0 || c.qk_norm || c.n_shared || c.dense_lead ||
            c.attn_every < 1 || c.gdn_hd < 2 || c.gdn_k_heads < 1 || c.gdn_v_heads % c.gdn_k_heads || c.d_conv < 2 ||
            c.n_ff_shexp < 1 || (c.gdn_legacy && strcmp(c.arch, "qwen3next") != 0))
            die("inconsistent qwen35moe/qwen3next settings (--gdn-heads V:K with K dividing V; --legacy-ssm-in is qwen3next's)");
    } else if (c.gdn_v_heads || c.attn_every || c.gdn_legacy) {
        die("--gdn-heads, --gdn-head-dim, --attn-every and --legacy-ssm-in are qwen35moe's and qwen3next's");
    } else if (c.swa || c.swa_pattern || c.rope_base_swa > 0.0f) {
        die("--swa, --swa-pattern and --rope-base-swa are gpt-oss's");
    } else if (strcmp(c.arch, "deepseek2") == 0 && c.nextn > 0 && !c.n_rot && !c.qk_norm) {
        if (c.nextn + c.n_layer > 127 || c.dense_lead > c.n_layer) die("bad --nextn for deepseek2");
    } else if (c.nextn || c.n_rot || c.qk_norm) {
        die("--nextn and --qk-norm are glm4moe's (--nextn deepseek2's too), --rope-dims glm4moe's and minimax-m2's");
    }
    if (c.n_embd < 1 || c.n_layer < 1 || c.n_head < 1 || c.n_head_kv < 1 || c.n_head % c.n_head_kv || c.head_dim < 2 ||
        c.head_dim % 2 || c.n_ff < 1 || c.ctx < 1)
        die("inconsistent dimensions");
    if (c.expert_type < 0) c.expert_type = c.type;
    const quant_traits *qt = quant_traits_get(c.type), *qe = quant_traits_get(c.expert_type);
    if (c.n_embd % qt->blck || c.n_embd % qe->blck) {
        const quant_traits *bad = c.n_embd % qt->blck ? qt : qe;
        fprintf(stderr, "mkmodel: %s needs n_embd to be a multiple of %d\n", bad->name, bad->blck);
        return 1;
    }

    char err[256];
    bpe_vocab v;
    /* Vocabularies learn at most 4096 tokens; a larger --vocab (real models' 150k+) is
     * padded with unused tokens, so embeddings and outputs get their real size. */
    int n_special = 0; /* --special-tokens: the vocabulary grows by them */
    for (const char *s = c.special; s && *s; s++) n_special += *s == ',';
    n_special += c.special && *c.special;
    const int learned = c.vocab > 4096 ? 4096 : c.vocab;
    if ((c.multilingual ? bpe_vocab_build_multilingual : bpe_vocab_build)(&v, learned, err, sizeof err) != 0) die(err);
    if (c.vocab > learned && pad_vocab(&v, c.vocab) != 0) die("out of memory");
    if (add_special_tokens(&v, c.special) != n_special) die("--special-tokens: a list of texts, A,B,... (none empty)");
    c.vocab += n_special;
    plan p = {0};
    if (is_ds(&c)) plan_deepseek2(&c, &p);
    else if (is_kimi(&c)) plan_kimi(&c, &p);
    else if (is_glm4moe(&c)) plan_glm4moe(&c, &p);
    else if (is_minimax(&c)) plan_minimax(&c, &p);
    else if (is_gptoss(&c)) plan_gptoss(&c, &p);
    else if (is_ds4(&c)) plan_deepseek4(&c, &p);
    else if (is_qwen35(&c)) plan_qwen35(&c, &p);
    else plan_llama(&c, &p);
    gw *w = gw_new();
    if (!w) die("out of memory");
    gw_drop_keys(w, c.drop, c.n_drop);
    if (list_keys) gw_list_keys(w, stdout);
    write_hparams(w, &c);
    if (c.shape_only && gw_bool(w, "deltafin.shape_only", 1)) die("out of memory");
    write_vocab(w, &c, &v);
    if (c.chat_template) write_template(w, c.chat_template);
    int64_t max_row = 0;
    for (int i = 0; i < p.n; i++) {
        if (gw_tensor(w, p.t[i].name, p.t[i].type, p.t[i].n_dims, p.t[i].ne) < 0) die("bad tensor");
        if (p.t[i].ne[0] > max_row) max_row = p.t[i].ne[0];
    }
    if (gw_begin(w, c.out, err, sizeof err) != 0) die(err);
    float *row = malloc((size_t)max_row * sizeof(float));
    void *qrow = malloc((size_t)max_row * 4 + 64);
    float *prev_router = calloc((size_t)(c.n_expert > 0 ? c.n_expert : 1) * (size_t)max_row, sizeof(float));
    float *topic = malloc((size_t)max_row * sizeof(float));
    int have_prev_router = 0;
    if (!row || !qrow || !prev_router || !topic) die("out of memory");
    uint64_t total = 0;
    for (int i = 0; c.shape_only && i < p.n; i++)
        total += quant_row_size(p.t[i].type, p.t[i].ne[0]) * (uint64_t)p.t[i].ne[1] * (uint64_t)p.t[i].ne[2];
    for (int i = 0; !c.shape_only && i < p.n; i++) {
        const tensor_plan *t = &p.t[i];
        const quant_traits *q = quant_traits_get(t->type);
        uint64_t rng = hash_name(c.seed, t->name);
        size_t rb = quant_row_size(t->type, t->ne[0]);
        const int is_router = t->init == INIT_ROUTER && t->ne[1] == c.n_expert && c.n_expert > 0;
        const int is_topic = c.topics > 0 && (!strcmp(t->name, "token_embd.weight") || !strcmp(t->name, "output.weight"));
        const int64_t rows = t->ne[1] * t->ne[2];
        if (c.row_pool > 0 && rows > c.row_pool && t->type != DF_TYPE_F32 && t->type != DF_TYPE_I32 && !is_router && !is_topic) {
            write_pooled(w, t, &c, &rng, rb, row);
            total += rb * (uint64_t)rows;
            continue;
        }
        for (int64_t r = 0; r < rows; r++) {
            if (t->init == INIT_EXPERT_IDS) {
                expert_ids_row(&c, &rng, t->ne[0], qrow);
                if (gw_data(w, qrow, rb, err, sizeof err) != 0) die(err);
                continue;
            }
            init_row(t, &c, &rng, row);
            if (is_router) router_row(&c, t, r, row, prev_router, have_prev_router);
            if (is_topic) topic_row(&c, t, r, row, topic);
            if (c.chain) chain_row(&c, t, r, row);
            if (t->type == DF_TYPE_F32) memcpy(qrow, row, rb);
            else q->from_float(row, qrow, t->ne[0]);
            if (gw_data(w, qrow, rb, err, sizeof err) != 0) die(err);
        }
        total += rb * (uint64_t)t->ne[1] * (uint64_t)t->ne[2];
        have_prev_router |= is_router;
    }
    if ((c.shape_only ? gw_finish_sparse(w, err, sizeof err) : gw_finish(w, err, sizeof err)) != 0) die(err);
    fprintf(stderr, "mkmodel: wrote %s: %s, %s (experts %s), %d tensors, %.1f MiB of weights%s\n", c.out, c.arch, qt->name,
            c.n_expert > 0 ? qe->name : "-", p.n, (double)total / (1 << 20),
            c.shape_only ? " (shape only: the data are holes in a sparse file)" : "");
    gw_free(w);
    bpe_vocab_free(&v);
    free(p.t);
    free(row);
    free(qrow);
    free(prev_router);
    free(topic);
    return 0;
}
