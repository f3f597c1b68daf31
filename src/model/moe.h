/*
 * moe.h - feed-forward blocks: a layer's FFN, dense or a mixture of experts
 * (moe.c). Above layer.c (whose products and dense FFN it uses), below the
 * architectures.
 */
#ifndef DF_MOE_H
#define DF_MOE_H

#include "layer.h"

/* Read and check the MoE hyperparameters (load time). */
int df_moe_read_hparams(df_model *m, char *err, size_t errlen);
/* Bind layer l's router, experts and shared experts (bind time). The routed
 * experts read and write n_embd-wide rows, or width-wide ones (width > 0: a
 * family that projects into a narrower latent space around them). */
int df_moe_bind_layer(df_model *m, int l, int n_ff_exp, char *err, size_t errlen);
int df_moe_bind_experts(df_model *m, int l, int n_ff_exp, int64_t width, char *err, size_t errlen);
/* Layer l's feed-forward block on s->x: RMSNorm, dense or MoE FFN, residual. */
int df_ffn_block(df_session *s, int l, int n, char *err, size_t errlen);
/* Mixture-of-experts FFN of layer l (router, top-k, experts grouped by expert,
 * shared experts); out (n, n_embd) is overwritten. */
int df_ffn_moe(df_session *s, int l, const float *x, int n, float *out, char *err, size_t errlen);
/* Its two halves. Routed experts: the router reads xr (n_embd wide), the
 * experts read x and write out at their own width (the one they were bound
 * at: n_embd, or a latent width). Shared experts: added to out (n_embd wide). */
int df_ffn_moe_routed(df_session *s, int l, const float *xr, const float *x, int n, float *out, char *err,
                      size_t errlen);
int df_ffn_moe_shared(df_session *s, int l, const float *x, int n, float *out, char *err, size_t errlen);
/* Streaming only: guess layer l's experts from the hidden state x (one token,
 * before layer l's attention) and ask the store to read them ahead; alone: 1
 * when that token is the step's only row (its guesses then measure the
 * lookahead's recall: ws_request_experts). */
void df_moe_lookahead(df_session *s, int l, const float *x, int alone);
/* Its guess alone: n_expert_used ids into ids; 0 when it cannot guess. */
int df_moe_guess(df_session *s, int l, const float *x, int32_t *ids);
/* The routed experts of layer l that this process runs (all of them, or its
 * share in a cluster: expar.h) on the rows x (n rows at the experts' width)
 * whose choices are in s->topk_id, into s->ex_out's slot rows ((t * K + j)
 * * width); guess (ng rows of K ids) is read ahead for layer l + 1. */
int df_moe_run_owned(df_session *s, int l, const float *x, int n, const int32_t *guess, int ng, char *err,
                     size_t errlen);
/* The router's pieces, exposed for tests: router logits -> probabilities
 * (softmax or sigmoid, in place), then top-k selection on one token's
 * probabilities (with optional bias and groups) giving ids and weights, and
 * returning the choice's margin: the last chosen expert's selection score
 * minus the best unchosen one's, or the same for groups where that is
 * smaller (INFINITY when every expert is chosen). A
 * margin at float resolution is a tie any rounding may break (docs/trace.md). */
void df_moe_probs(const df_hparams *h, float *p);
float df_moe_select(const df_hparams *h, const float *probs, const float *bias, int32_t *ids, float *w);
/* The weights of the chosen ids (df_moe_select's second half; hash
 * routing chooses by token id): their probabilities, normalised and
 * scaled as the hyperparameters say. */
void df_moe_weights(const df_hparams *h, const float *probs, const int32_t *ids, float *w);

#endif
