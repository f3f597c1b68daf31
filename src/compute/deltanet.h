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
 * is advanced by the n tokens; w is (ch, d_conv), oldest tap first. */
void dn_short_conv(float *x, int n, int64_t ch, int d_conv, float *state, const float *w);

/* x / max(|x|, eps) for count vectors of hd floats, in place. */
void dn_l2norm(float *x, int64_t count, int hd, float eps);

/* The gated delta rule, token by token, for n_head heads of size hd. Per
 * head, with S (hd x hd, S[i][j]: key index i, value index j) stored as
 * state[h][i][j]:
 *   S[i][:] *= exp(g[i])                      per-channel decay (KDA)
 *   d[j]     = (v[j] - sum_i S[i][j] k[i]) * beta
 *   S[i][j] += k[i] d[j]
 *   o[j]     = sum_i S[i][j] q[i] / sqrt(hd)
 * q, k, v, g and o are n rows of n_head * hd floats, beta n rows of n_head.
 * Heads run in parallel on the pool. */
void dn_gated_delta(tp_pool *pool, float *state, const float *q, const float *k, const float *v, const float *g,
                    const float *beta, int n, int n_head, int hd, float *o);

#endif
