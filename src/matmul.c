/*
 * matmul.c - see matmul.h.
 *
 * Rows of W are split between threads in contiguous chunks, so each thread
 * streams its own part of the weight matrix from memory once per call.
 */
#include "matmul.h"

#include <string.h>

#include "quant.h"

size_t mm_scratch_bytes(int64_t n_in, int n_tok) {
    /* The widest activation format is f32 (4 bytes/element); q8_K adds block
     * headers but stays under 4 bytes/element. Pad each row to 64 bytes. */
    return ((size_t)n_in * 4 + 64) * (size_t)(n_tok > 0 ? n_tok : 1);
}

typedef struct {
    const quant_traits *qt;
    const quant_traits *vt;
    const uint8_t *w;
    size_t w_row;
    int64_t n_in, n_out;
    const float *x;
    const uint8_t *xq;
    size_t xq_row;
    int n_tok;
    float *y;
    int64_t ldy;
    uint8_t *xq_out;
} mm_job;

static void quantize_rows(void *arg, int ith, int nth) {
    mm_job *j = arg;
    long lo, hi;
    tp_range(j->n_tok, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) j->vt->from_float(j->x + t * j->n_in, j->xq_out + t * j->xq_row, j->n_in);
}

static void dot_rows(void *arg, int ith, int nth) {
    mm_job *j = arg;
    long lo, hi;
    tp_range((long)j->n_out, ith, nth, &lo, &hi);
    for (long o = lo; o < hi; o++) {
        const uint8_t *wr = j->w + (size_t)o * j->w_row;
        for (int t = 0; t < j->n_tok; t++) {
            float v;
            j->qt->vec_dot(j->n_in, wr, j->xq + (size_t)t * j->xq_row, &v);
            j->y[(int64_t)t * j->ldy + o] = v;
        }
    }
}

int mm_mul(tp_pool *pool, int wtype, const void *w, int64_t n_in, int64_t n_out, const float *x, int n_tok,
           float *y, int64_t ldy, mm_scratch *sc) {
    mm_job j;
    memset(&j, 0, sizeof j);
    j.qt = quant_traits_get(wtype);
    j.vt = quant_traits_get(j.qt->vec_type);
    j.w = w;
    j.w_row = quant_row_size(wtype, n_in);
    j.n_in = n_in;
    j.n_out = n_out;
    j.x = x;
    j.n_tok = n_tok;
    j.y = y;
    j.ldy = ldy;
    if (j.qt->vec_type == DF_TYPE_F32) {
        j.xq = (const uint8_t *)x;
        j.xq_row = (size_t)n_in * sizeof(float);
    } else {
        j.xq_row = (quant_row_size(j.qt->vec_type, n_in) + 63) & ~(size_t)63;
        if (j.xq_row * (size_t)n_tok > sc->size) return -1;
        j.xq_out = sc->buf;
        j.xq = sc->buf;
        tp_run(pool, quantize_rows, &j);
    }
    tp_run(pool, dot_rows, &j);
    return 0;
}
