/*
 * matmul.h - multithreaded matrix products against quantized weights.
 *
 * y[t, o] = sum_i W[o, i] * x[t, i] for t < n_tok, o < n_out, where W is a
 * weight tensor of n_out rows of n_in elements in any supported type. The
 * activations are converted once per call into the weight type's paired
 * activation format (quant_traits.vec_type), then every thread takes a
 * share of the output rows and, for each row, runs the dot product against
 * all n_tok activation rows while the weight row is still in cache.
 */
#ifndef DF_MATMUL_H
#define DF_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "threads.h"

typedef struct mm_scratch {
    void *buf;       /* activations converted to vec_type */
    size_t size;
} mm_scratch;

/* Bytes of scratch needed for n_tok rows of n_in activations of any type. */
size_t mm_scratch_bytes(int64_t n_in, int n_tok);

/* W: n_out rows of n_in elements of type wtype at w (row stride = row size).
 * x: n_tok rows of n_in floats (stride n_in). y: n_tok rows of n_out floats
 * (stride ldy). Returns 0, or -1 if the scratch is too small. */
int mm_mul(tp_pool *pool, int wtype, const void *w, int64_t n_in, int64_t n_out, const float *x, int n_tok,
           float *y, int64_t ldy, mm_scratch *sc);

#endif
