/*
 * arch.h - the architecture table's entries, one per supported
 * general.architecture (defined in the arch_*.c files). Only the loader
 * (load.c), above the architectures, includes this.
 */
#ifndef DF_ARCH_H
#define DF_ARCH_H

#include "model.h"

extern const df_arch df_arch_llama, df_arch_qwen2, df_arch_qwen3, df_arch_qwen2moe, df_arch_qwen3moe,
    df_arch_deepseek2, df_arch_kimi_linear, df_arch_kimi_k3;

#endif
