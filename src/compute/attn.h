/*
 * attn.h - causal self-attention of a run of queries over one layer's cached
 * keys and values (attn.c). It knows nothing of models or sessions: the
 * caller describes where the rows are (df_attn_desc) and hands over the
 * thread pool and the per-thread scratch, as the matrix products do.
 */
#ifndef DF_ATTN_H
#define DF_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "threads.h"

/* Query token t of head hh is q[t * q_tok + hh * q_head] (hd floats) at
 * position pos + t and reads the keys of positions 0..pos + t; its output
 * goes to out[t * o_tok + hh * o_head] (hdv floats). A plain KV cache has
 * n_head_kv heads side by side in a row; an MLA latent cache has one
 * latent row per position that serves as key, and its first hdv elements as
 * value (k == v, k_head = v_head = 0). */
typedef struct df_attn_desc {
    const uint8_t *k, *v;       /* position 0, KV head 0 of the layer */
    size_t k_stride, v_stride;  /* bytes between positions */
    size_t k_head, v_head;      /* bytes between KV heads */
    int kv_type;                /* DF_TYPE_F32 or DF_TYPE_F16 */
    int n_head, n_head_kv, hd, hdv;
    const float *q;
    int64_t q_tok, q_head;
    float *out;
    int64_t o_tok, o_head;
    float scale;                /* applied to q.k before the softmax */
    int pos, n_tok;
    int window;                 /* > 0: a query at p reads keys (p - window, p] only (sliding window) */
    int ring;                   /* > 0: position p is cache row p % ring (a multiple of 64) */
    const float *sinks;         /* (n_head) extra softmax logits, or NULL */
    const int32_t *sel;         /* sparse attention (DSA), or NULL: query token t with more than sel_k
                                 * keys reads only positions sel[t * sel_k ..], sel_k ascending ones */
    int sel_k;
} df_attn_desc;

/* Floats of per-thread scratch attention needs for a context of n_ctx. */
int64_t df_attn_scratch_floats(int n_ctx);

/* Run d on pool; scratch holds tp_size(pool) rows of scratch_stride floats
 * (at least df_attn_scratch_floats(pos + n_tok)). */
void df_attention_run(tp_pool *pool, float *scratch, int64_t scratch_stride, const df_attn_desc *d);

#endif
