/*
 * dsa.h - DeepSeek sparse attention's lightning indexer (dsa.c): which
 * cached keys each query of an MLA layer attends to (deepseek32, glm-dsa).
 */
#ifndef DF_DSA_H
#define DF_DSA_H

#include "layer.h"

/* The indexer's sizes (attention.indexer.*) and, for glm-dsa, which layers
 * select and which reuse a selection (attention.indexer.types). rope_neox:
 * the indexer's RoPE layout; norm_eps: its key LayerNorm's epsilon. */
int df_dsa_hparams(df_model *m, int rope_neox, float norm_eps, char *err, size_t errlen);
/* Layer l's indexer tensors (a selecting layer's; optional on the others). */
int df_dsa_bind_layer(df_model *m, int l, char *err, size_t errlen);
/* Choose the keys of layer l for the n rows in s's scratch (own: layer.h's
 * df_row_pos; each row against its own session's keys): qr is the normed
 * query LoRA (n, q_lora_rank), s->xb the normed input. A selecting layer
 * stores its indexer keys (df_mem_idx_store) and writes, per row, the
 * ascending positions of its top_k keys into s->idx_sel (row stride
 * idx_top_k; a row with no more than top_k keys needs none: it reads all).
 * Other layers keep the last selection. */
int df_dsa_select(df_session *s, df_session *const *own, int l, int n, const float *qr, char *err, size_t errlen);

#endif
