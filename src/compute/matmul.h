/*
 * matmul.h - multithreaded matrix products against quantized weights.
 *
 * y[t, o] = sum_i W[o, i] * x[t, i] for t < n_tok, o < n_out, where W is a
 * weight tensor of n_out rows of n_in elements in any supported type. The
 * activations are converted once per call (and once per distinct activation
 * format when several weights share the input: mm_mul_n) into the weight
 * type's paired format (quant_traits.vec_type). The output is cut into
 * chunks of (rows x tokens) that threads claim from a shared counter; each
 * chunk runs the type's gemm kernel, which reuses every weight block it
 * decodes for several tokens. See matmul.c for the blocking.
 *
 * Results do not depend on n_tok, on the thread count or on which thread
 * computed what (the gemm contract in quant.h): a token's outputs are the
 * same bits in a batch and alone.
 */
#ifndef DF_MATMUL_H
#define DF_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "threads.h"

/* What followed a product the last time it ran: the next call's first
 * weights (the idle prefetch's guesses, matmul.c). */
typedef struct mm_next {
    const void *key, *next;
    size_t len;
    int seen;        /* times in a row key was followed by next (a routed expert's products: rarely twice) */
} mm_next;

#define MM_NEXT_SLOTS 4096 /* a table of them: a few hundred products a token, few collisions */

/* A caller's scratch (one sequence of products, e.g. a model's sessions).
 * Zero-initialise the fields after size. */
typedef struct mm_scratch {
    void *buf;        /* activations converted to vec_type */
    size_t size;
    mm_next *next;    /* MM_NEXT_SLOTS guesses, or NULL: no idle prefetch */
    const void *last; /* the previous call's first weights */
} mm_scratch;

/* One product of mm_mul_n: n_out rows of W (type wtype) times the input
 * (x, or mm_mul_n's shared x when NULL) into y (n_tok rows, stride ldy). */
typedef struct mm_op {
    int wtype;
    const void *w;
    int64_t n_out;
    float *y;
    int64_t ldy;
    const float *x;
    int packed;      /* w's full groups of 16 rows are in pack.h's layout (quant_traits.gemm_packed) */
} mm_op;

#define MM_MAX_OPS 32

/* Bytes of scratch needed for n_tok rows of n_in activations of any type. */
size_t mm_scratch_bytes(int64_t n_in, int n_tok);

/* W: n_out rows of n_in elements of type wtype at w (row stride = row size), in the file's layout.
 * x: n_tok rows of n_in floats (stride n_in). y: n_tok rows of n_out floats
 * (stride ldy). Returns 0, or -1 if the scratch is too small. */
int mm_mul(tp_pool *pool, int wtype, const void *w, int64_t n_in, int64_t n_out, const float *x, int n_tok,
           float *y, int64_t ldy, mm_scratch *sc);

/* n_ops (<= MM_MAX_OPS) products with inputs of n_tok rows of n_in floats,
 * each its own ops[k].x or the shared x: every distinct input is converted
 * once per activation type, and all products run in one pass of the pool
 * (several when their converted inputs do not fit in the scratch together).
 * Same results as separate mm_mul calls. Returns 0, or -1 if the scratch
 * cannot hold one converted input or n_ops is out of range. */
int mm_mul_n(tp_pool *pool, const mm_op *ops, int n_ops, int64_t n_in, const float *x, int n_tok, mm_scratch *sc);

/* G products of one type and shape, each on its own slice of the input (an
 * attention's per-head or per-group projections): y_g = W_g * x_g for g < G,
 * where W_g (n_out rows of n_in: in pack.h's layout when packed, its
 * groups of 16 rows from its first row) starts at w + g * w_stride, token
 * t's x_g at x + t * x_tok + g * x_grp (n_in floats) and y_g at
 * y + g * y_grp (rows ldy apart). One token: MM_MAX_OPS groups a
 * pass, read in place; more: a group a pass, its rows gathered into tmp
 * (n_tok * n_in floats). Same results as G mm_mul calls. Returns 0, or -1 if
 * the scratch is too small. */
int mm_mul_grouped(tp_pool *pool, int wtype, const void *w, int packed, size_t w_stride, int G, int64_t n_in,
                   int64_t n_out, const float *x, int64_t x_grp, int64_t x_tok, int n_tok, float *y, int64_t y_grp,
                   int64_t ldy, float *tmp, mm_scratch *sc);

#endif
