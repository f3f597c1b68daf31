/*
 * header.h - what loading a model (load.c) and planning one (plan.c) share
 * (header.c): a model file's header read into a df_model, its tensors
 * checked, the weight store's configuration.
 */
#ifndef DF_HEADER_H
#define DF_HEADER_H

#include "model.h"
#include "wstore.h"

/* Everything before the weights into m: metadata, the architecture and its
 * hyperparameters, tokenizer (vocab_only: metadata and tokenizer of any
 * architecture). */
int df_load_header(df_model *m, const char *path, const df_model_params *p, char *err, size_t errlen);
/* Check every tensor (present, supported type, shape) without reading any. */
int df_model_validate(df_model *m, char *err, size_t errlen);
/* Bind the tensors (m->ws open) and check them against the tokenizer. */
int df_bind_all(df_model *m, char *err, size_t errlen);
/* The weight store's configuration for params p: mapped, resident, or
 * planned under p->mem_budget (sets m->session_reserve). */
int df_store_config(df_model *m, const df_model_params *p, ws_config *cfg, char *err, size_t errlen);
/* Bookkeeping outside the planned buffers (metadata, tokenizer, stacks, slack). */
uint64_t df_overhead_bytes(const df_model *m);
/* Which of the first L layers have routed experts, from the directory. */
void df_expert_layers(const df_model *m, int L, uint8_t *has);
/* The learned uses that balance a cluster's shares (L x n_expert): the hot file p names or m's own, if any. */
void df_share_uses(const df_model *m, const df_model_params *p, int L, double *uses);
/* The lookahead's recall that hot file recorded (ws_hot_recall), or -1. */
double df_hot_recall(const df_model *m, const df_model_params *p);

#endif
