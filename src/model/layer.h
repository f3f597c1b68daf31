/*
 * layer.h - helpers the architectures' forward passes share (layer.c).
 * Below the architectures and moe.c, above the session: each takes the
 * session whose scratch and memory it works in.
 */
#ifndef DF_LAYER_H
#define DF_LAYER_H

#include "pipe.h"
#include "session.h"

int df_matmul(df_session *s, ws_tensor *w, const float *x, int n_tok, float *y, int64_t ldy, char *err,
              size_t errlen);
/* n_w (<= MM_MAX_OPS) products of the same input x, e.g. Q, K and V: y[i]
 * (stride ldy[i]) = w[i] x. x is converted once and all run in one pass of
 * the pool; the results are those of separate df_matmul calls. */
int df_matmul_n(df_session *s, int n_w, ws_tensor *const *w, const float *x, int n_tok, float *const *y,
                const int64_t *ldy, char *err, size_t errlen);
/* Rows of token_embd for n tokens into out (n, n_embd). */
int df_embed(df_session *s, const int32_t *tokens, int n, float *out, char *err, size_t errlen);
/* y (n_tok rows, stride ld) += bias b; b NULL: nothing. -1 with err if b cannot be read. */
int df_add_bias(df_session *s, ws_tensor *b, float *y, int n_tok, int64_t ld, char *err, size_t errlen);
/* RMSNorm of n rows of width floats (stride ld) of x with weight w into out
 * (out may be x). -1 with err if w cannot be read. */
int df_norm_rows(df_session *s, ws_tensor *w, const float *x, int n, int64_t width, int64_t ld, float *out, char *err,
                 size_t errlen);
/* Causal attention of n_tok queries (n_head * head_dim each) at positions
 * s->pos.. against KV layer l's cache (already holding their own keys and
 * values, df_mem_store) into out (n_tok rows of n_head * head_dim_v), with one
 * sink logit per head (NULL: none). It honours the layer's sliding
 * window (hparams swa / n_swa) and its cache's ring. */
void df_attention_sinks(df_session *s, int l, int n_tok, const float *q, float *out, const float *sinks);
/* The rows of one forward pass: own NULL, n consecutive tokens of s from
 * s->pos; otherwise row t is a token of session own[t] (a batched pass,
 * df_arch.forward: its own memory, s's scratch). A session's rows are
 * consecutive, a run: its tokens from its own position on (one row for a
 * generation step, several for a prompt). df_row_pos: row t's position;
 * df_row_run: how many rows from t on (t the first of its run, < n)
 * belong to own[t]'s run (n - t when own is NULL). A run is what df_decode
 * would run alone: store its keys, attend, advance a recurrent state over
 * its rows as one batch. */
int df_row_pos(const df_session *s, df_session *const *own, int t);
int df_row_run(df_session *const *own, int t, int n);
/* Store n rows of keys and values (strides s->kv_dim_k / kv_dim_v) in layer
 * l's memory and attend each query row (n_head * head_dim) against it into
 * out (rows of n_head * head_dim_v), with sinks (or NULL): run by run
 * against its own session's memory when own is set. */
void df_attend_rows(df_session *s, df_session *const *own, int l, int n, const float *k, const float *v,
                    const float *q, float *out, const float *sinks);
/* Dense FFN: out = down(act(gate x) * up x), using s->hb/s->hb2. */
int df_ffn_dense(df_session *s, ws_tensor *gate, ws_tensor *up, ws_tensor *down, const float *x, int n, float *out,
                 char *err, size_t errlen);
/* The FFN's gated activation in place: a = act(a, b) over n floats, SwiGLU
 * (silu(a) * b) or another of h->act's (layer.c says each). */
void df_glu(const df_hparams *h, float *a, const float *b, int n);
/* df_glu with SiTU's long rows split over the pool (element by element the
 * same arithmetic, so the same bits); SwiGLU and short rows on the caller. */
void df_glu_pool(tp_pool *pool, const df_hparams *h, float *a, const float *b, int n);
/* Between layers: 0 to go on, or -1 with err (and s->cancelled set) when
 * the session's abort callback asks to stop. Models with recurrent layers
 * are never stopped here (their states cannot be rolled back): decode.c
 * asks between batches. */
int df_layer_abort(df_session *s, char *err, size_t errlen);
/* Final RMSNorm and output projection of the last token (or all n; or the
 * rows s->out_rows names, in that order, when it is set). */
int df_output(df_session *s, int n, float *logits, int all_logits, char *err, size_t errlen);

#endif
