/*
 * dsv4.h - DeepSeek V4's compressed attention (dsv4.c): the compressors that
 * turn blocks of positions into one key each, the indexer that picks among
 * the ratio-4 keys, and the attention of a compressed layer over its window
 * and its compressed keys (arch_deepseek4.c runs the rest of the model).
 */
#ifndef DF_DSV4_H
#define DF_DSV4_H

#include "layer.h"

/* deepseek4's per-session struct (df_arch.fam_bytes): its scratch, n_batch
 * rows of each. */
typedef struct df_dsv4_fam {
    float *hc;       /* (hc_mult * n_embd) the residual streams */
    float *hc_norm;  /* (hc_mult * n_embd) their RMSNorm, then hc_post's new streams */
    float *hc_mixes; /* ((2 + hc_mult) * hc_mult) a mixer's raw outputs */
    float *hc_mix;   /* (hc_mult + hc_mult^2) post weights and Sinkhorn-normalised comb */
    float *qr;       /* (q_lora_rank) normed query LoRA */
    float *o_grp;    /* (n_head * head_dim / o_groups) one output group's rows */
    float *o_low;    /* (o_groups * o_lora) the grouped low-rank output */
    float *cmp;      /* (the widest compressor row) this pass's compressor rows */
    float *lid_q, *lid_w; /* (ds4_idx_heads * ds4_idx_dim), (ds4_idx_heads) indexer queries, weights */
} df_dsv4_fam;

/* deepseek4's own tensors (m->fam_tensors, made by its bind hook; a layer's df_layer.fam points at its entry).
 * A layer's other tensors are df_layer's (kv_a_norm: the KV vector's norm; idx_wq_b, idx_proj: the indexer's
 * queries and head weights, as DSA's). */
typedef struct df_dsv4_layer {
    ws_tensor *wkv;                                          /* n_embd -> the one KV vector (key and value) */
    ws_tensor *wo_a, *wo_b;                                  /* grouped low-rank attention output */
    ws_tensor *hc_attn_fn, *hc_attn_base, *hc_attn_scale;    /* hyper-connection mixers */
    ws_tensor *hc_ffn_fn, *hc_ffn_base, *hc_ffn_scale;
    ws_tensor *comp_wkv, *comp_wgate, *comp_ape, *comp_norm; /* the attention's compressor */
    ws_tensor *lid_wkv, *lid_wgate, *lid_ape, *lid_norm;     /* the indexer's (ratio 4) */
} df_dsv4_layer;
typedef struct df_dsv4_tensors {
    ws_tensor *output_hc_fn, *output_hc_base, *output_hc_scale; /* the streams' final collapse */
    df_dsv4_layer layer[];                                      /* (n_layer + n_layer_mtp) */
} df_dsv4_tensors;
#define V4L(L) ((df_dsv4_layer *)(L)->fam)
#define V4T(m) ((df_dsv4_tensors *)(m)->fam_tensors)

/* What a layer keeps (df_arch.layer_mem): a compressed layer of ratio r its
 * compressed keys (a row of head_dim a block of r), for r = 4 its indexer's
 * (rows of ds4_idx_dim), and its compressors' last positions (fixed rows);
 * and the model's scratch (df_arch.scratch). */
int df_dsv4_layer_mem(const df_model *m, int l, df_mem_decl *d);
void df_dsv4_scratch(const df_model *m, df_layout *lay);

/* deepseek4's own hyperparameters (m->fam_hp, one allocation freed with the
 * model): arch_deepseek4.c's and dsv4.c's, read by their hparams hooks. */
typedef struct df_dsv4_hp {
    int hc_mult;           /* hyper_connection.count: residual streams */
    int hc_iters;          /* hyper_connection.sinkhorn_iterations */
    float hc_eps;          /* hyper_connection.epsilon */
    int o_groups, o_lora;  /* attention.output_group_count / output_lora_rank: grouped low-rank output */
    int n_hash_layers;     /* hash_layer_count: lead layers routed by token id (ffn_gate_tid2eid) */
    float rope_base_comp;  /* attention.compress_rope_freq_base: the compressed layers' RoPE base */
    int idx_heads, idx_dim, idx_topk; /* the compressed layers' indexer (attention.indexer.*) */
    int32_t comp_ratio[];  /* (n_layer) attention.compress_ratios: 0, 4 (with the indexer) or 128 */
} df_dsv4_hp;
const df_dsv4_hp *df_dsv4(const df_model *m);
/* Make m->fam_hp (*out, to fill in further) with attention.compress_ratios
 * (read before the MTP blocks are set apart), compress_rope_freq_base and
 * the indexer's sizes. */
int df_dsv4_hparams(df_model *m, df_dsv4_hp **out, char *err, size_t errlen);
/* Layer l's compressor (and, ratio 4, indexer) tensors. */
int df_dsv4_bind_layer(df_model *m, int l, char *err, size_t errlen);
/* The RoPE of the compressed layers: compress_rope_freq_base with the
 * file's scaling (YaRN), the magnitude left at 1 as llama.cpp does. */
rope_params df_dsv4_rope(const df_session *s);
/* Compressed layer l, n rows (own: layer.h): feed the compressors with the
 * normed input xn (n, n_embd), completing blocks into the session's caches;
 * then attend each query (s->q, roped) over its window (keys already stored)
 * and its compressed keys (the indexer's top-k for ratio 4, using qr, the
 * normed query LoRA) with sinks, into out (n, n_head * head_dim). */
int df_dsv4_attend(df_session *s, df_session *const *own, int l, int n, const float *xn, const float *qr,
                   const rope_params *rp, const float *sinks, float *out, char *err, size_t errlen);

#endif
