/*
 * deltanet.h - the pieces of a gated delta-rule (linear attention) layer
 * that keep state across tokens: the causal short convolution and the
 * delta-rule recurrence (deltanet.c).
 */
#ifndef DF_DELTANET_H
#define DF_DELTANET_H

#include <stdint.h>

#include "threads.h"

/* Causal depthwise convolution of kernel d_conv over n tokens of ch channels
 * (x: n rows of ch floats, in place), followed by SiLU. state holds each
 * channel's previous d_conv - 1 inputs, oldest first, (ch, d_conv - 1), and
 * is advanced by the n tokens; w is (ch, d_conv), oldest tap first. The
 * channels are split over pool (NULL: this thread alone), the same bits. */
void dn_short_conv(tp_pool *pool, float *x, int n, int64_t ch, int d_conv, float *state, const float *w);

/* x / max(|x|, eps) for count vectors of hd floats, in place. */
void dn_l2norm(float *x, int64_t count, int hd, float eps);

/* The shape of a delta-rule layer's heads. State (value) heads are n_head
 * of size hd; queries and keys have n_head_k heads of the same size, each
 * serving n_head / n_head_k state heads, tiled (state head h reads key head
 * h % n_head_k: Kimi, Qwen3.5) or interleaved (h / (n_head / n_head_k):
 * Qwen3-Next). The decay is one value per key channel (g rows of n_head * hd:
 * KDA) or one per head (g rows of n_head: Qwen's gated delta rule). */
typedef struct {
    int n_head, n_head_k, hd;
    int k_interleave;         /* 1: key head h / (n_head / n_head_k); 0: h % n_head_k */
    int g_per_head;           /* 1: one decay per head; 0: one per key channel */
    int64_t ld_qk, ld_v, ld_o; /* floats between tokens' rows of q and k, of v, of o */
} dn_shape;

/* The gated delta rule, token by token. Per state head, with S (hd x hd,
 * S[i][j]: key index i, value index j) stored as state[h][i][j]:
 *   S[i][:] *= exp(g[i])                      (or exp(g) for the whole head)
 *   d[j]     = (v[j] - sum_i S[i][j] k[i]) * beta
 *   S[i][j] += k[i] d[j]
 *   o[j]     = sum_i S[i][j] q[i] / sqrt(hd)
 * q, k, v and o are n rows (strides in sh), beta n rows of n_head. Heads run
 * in parallel on the pool. */
void dn_gated_delta(tp_pool *pool, const dn_shape *sh, float *state, const float *q, const float *k, const float *v,
                    const float *g, const float *beta, int n, float *o);
/* Tests: 1 makes dn_gated_delta run its portable 16-value blocks where the
 * AVX2 ones would run (deltanet.c), to check that both give the same bits. */
void dn_force_baseline(int on);

#endif
