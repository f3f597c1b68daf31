/*
 * arch.h - the architecture table's entries, one per supported
 * general.architecture (defined in the arch_*.c files). The loader
 * (header.c), above the architectures, includes this; so do the architectures
 * that reuse arch_llama.c's forward pass.
 */
#ifndef DF_ARCH_H
#define DF_ARCH_H

#include "model.h"

extern const df_arch df_arch_llama, df_arch_qwen2, df_arch_qwen3, df_arch_qwen2moe, df_arch_qwen3moe,
    df_arch_deepseek2, df_arch_kimi_linear, df_arch_kimi_k3, df_arch_glm4moe, df_arch_minimax_m2, df_arch_gptoss,
    df_arch_qwen35moe, df_arch_qwen3next, df_arch_deepseek32, df_arch_glm_dsa, df_arch_deepseek4, df_arch_granite;

/* arch_llama.c's forward pass, which glm4moe and minimax-m2 share (the same
 * block with other tensors bound; arch_glm4moe.c, arch_minimax_m2.c). */
int df_llama_forward(struct df_session *s, struct df_session *const *own, const int32_t *tokens, int n, float *logits,
                     int all_logits, char *err, size_t errlen);
/* One of its decoder blocks, layer l over s->x's n rows in place (glm4moe's MTP block runs it too). */
int df_llama_block(struct df_session *s, struct df_session *const *own, int l, int n, char *err, size_t errlen);
/* The block's attention alone: its output projection into s->xb2 (rope 0: no RoPE), which the caller adds to
 * the residual (granite scales it first). */
int df_llama_attention(struct df_session *s, struct df_session *const *own, int l, int n, int rope, char *err,
                       size_t errlen);
/* arch_llama.c's tensors: attention (with optional Q/K/V/output biases and Q/K norms), a dense or routed FFN. */
int df_llama_bind(df_model *m, char *err, size_t errlen);

/* arch_deepseek2.c's pieces, which deepseek32 and glm-dsa (arch_dsa.c) run
 * with the DSA indexer added to their MLA (mla.c, dsa.c). */
int df_deepseek2_hparams(df_model *m, char *err, size_t errlen);
/* DeepSeek's YaRN attention scale from yarn_log_multiplier as stored (glm-dsa: 0, llama.cpp ignores it). */
void df_deepseek_yarn(df_model *m, float log_mul_stored);
int df_deepseek2_bind(df_model *m, char *err, size_t errlen);
int df_deepseek2_forward(struct df_session *s, struct df_session *const *own, const int32_t *tokens, int n,
                         float *logits, int all_logits, char *err, size_t errlen);
/* One of its decoder blocks (MLA + FFN), layer l over s->x's n rows in place (the MTP block runs it too). */
int df_deepseek2_block(struct df_session *s, struct df_session *const *own, int l, int n, char *err, size_t errlen);

#endif
