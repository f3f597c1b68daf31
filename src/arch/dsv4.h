/*
 * dsv4.h - DeepSeek V4's compressed attention (dsv4.c): the compressors that
 * turn blocks of positions into one key each, the indexer that picks among
 * the ratio-4 keys, and the attention of a compressed layer over its window
 * and its compressed keys (arch_deepseek4.c runs the rest of the model).
 */
#ifndef DF_DSV4_H
#define DF_DSV4_H

#include "layer.h"

/* attention.compress_ratios (read before the MTP blocks are set apart),
 * compress_rope_freq_base and the indexer's sizes. */
int df_dsv4_hparams(df_model *m, char *err, size_t errlen);
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
