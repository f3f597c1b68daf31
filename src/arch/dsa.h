/*
 * dsa.h - DeepSeek sparse attention's lightning indexer (dsa.c): which
 * cached keys each query of an MLA layer attends to (deepseek32, glm-dsa).
 */
#ifndef DF_DSA_H
#define DF_DSA_H

#include "layer.h"

/* The indexer's hyperparameters: a DSA model's m->fam_hp (one allocation
 * freed with the model). */
typedef struct df_dsa_hp {
    int n_head;          /* attention.indexer.head_count */
    int head_dim;        /* attention.indexer.key_length: [RoPE n_rot | rest] */
    int top_k;           /* attention.indexer.top_k: keys each query attends to */
    int rope_neox;       /* the indexer's RoPE layout (deepseek32 NeoX, glm-dsa normal) */
    float norm_eps;      /* epsilon of the indexer keys' LayerNorm */
    int n_layer_sel;     /* layers that select (with an indexer key cache) */
    uint8_t selects[];   /* (n_layer) 1: the layer selects keys itself (its own indexer and key cache); 0: it
                          * reuses the last such layer's choice (GLM-5.2's shared layers, attention.indexer.types) */
} df_dsa_hp;
/* m's, or NULL when m is not a DSA model (mla.c asks). */
const df_dsa_hp *df_dsa(const df_model *m);
/* Read them (attention.indexer.*) into m->fam_hp. rope_neox: the indexer's
 * RoPE layout; norm_eps: its key LayerNorm's epsilon. */
int df_dsa_hparams(df_model *m, int rope_neox, float norm_eps, char *err, size_t errlen);
/* Layer l's indexer tensors (a selecting layer's; optional on the others). */
int df_dsa_bind_layer(df_model *m, int l, char *err, size_t errlen);
/* The indexer's scratch: a DSA family's per-session struct (df_arch.fam_bytes). */
typedef struct df_dsa_fam {
    float *idx_q;     /* (n_batch, idx_n_head * idx_head_dim) indexer queries */
    float *idx_k;     /* (n_batch, idx_head_dim) new indexer keys */
    float *idx_w;     /* (n_batch, idx_n_head) per-head weights */
    int32_t *idx_sel; /* (n_batch, idx_top_k) each row's chosen key positions, ascending */
} df_dsa_fam;
/* What a selecting layer keeps (its indexer's keys, one row a position, in
 * the KV type) and the scratch: df_arch's layer_mem and scratch hooks. */
int df_dsa_layer_mem(const df_model *m, int l, df_mem_decl *d);
void df_dsa_scratch(const df_model *m, df_layout *lay);
/* Row t's chosen key positions (idx_top_k of them, ascending). */
const int32_t *df_dsa_chosen(const df_session *s, int t);
/* Choose the keys of layer l for the n rows in s's scratch (own: layer.h's
 * df_row_pos; each row against its own session's keys): qr is the normed
 * query LoRA (n, q_lora_rank), s->xb the normed input. A selecting layer
 * stores its indexer keys and writes, per row, the ascending positions of
 * its top_k keys (df_dsa_chosen; a row with no more than top_k keys needs
 * none: it reads all).
 * Other layers keep the last selection. */
int df_dsa_select(df_session *s, df_session *const *own, int l, int n, const float *qr, char *err, size_t errlen);

#endif
