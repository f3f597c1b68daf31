/*
 * mla.h - multi-head latent attention, shared by the DeepSeek and Kimi
 * architectures (mla.c).
 */
#ifndef DF_MLA_H
#define DF_MLA_H

#include "layer.h"

/* MLA sizes from the metadata (kv_lora_rank, q_lora_rank, key/value lengths). */
int df_mla_hparams(df_model *m, char *err, size_t errlen);
/* Layer l's MLA tensors (q, with or without LoRA; kv_a; k_b/v_b or kv_b; output). */
int df_mla_bind_layer(df_model *m, int l, char *err, size_t errlen);
/* Layer l's multi-head latent attention on the normed input s->xb (n
 * tokens), storing the latents in the layer's cache (df_mem_store); the
 * output (n, n_head * head_dim_v), before attn_output, goes to s->xb.
 * rope = 0: no RoPE (kimi's NoPE MLA); RoPE reads s->rope_cache's rows.
 * own: the rows' sessions (layer.h, df_row_pos), or NULL. */
int df_mla_attention(df_session *s, df_session *const *own, int l, int n, int rope, char *err, size_t errlen);

#endif
