/*
 * requant.c - see requant.h.
 *
 * DESIGN
 * The conversion uses the scalar reference kernels (quant_traits_ref) for
 * both directions, so a requantized copy has the same bytes on every
 * instruction set: a model's logits do not depend on which CPU requantized
 * it. It runs once per tensor at open.
 */
#include "requant.h"

#include <string.h>

#include "quant.h"
#include "util.h"

int rq_parse_type(const char *name) {
    if (!name || !*name) return 0;
    if (!strcmp(name, "q4_K") || !strcmp(name, "q4_k")) return DF_TYPE_Q4_K;
    if (!strcmp(name, "q8_0")) return DF_TYPE_Q8_0;
    return -1;
}

int rq_resident_type(const gguf_tensor *t, int is_expert, int target) {
    if (target <= 0 || is_expert || t->n_dims != 2 || t->ne[1] < 2) return t->type;
    if (t->type == DF_TYPE_F32 || t->type == target) return t->type;
    const quant_traits *src = quant_traits_ref(t->type), *dst = quant_traits_ref(target);
    if (!src || !src->supported || !src->to_float || !dst || !dst->from_float) return t->type;
    const size_t row_new = quant_row_size(target, t->ne[0]), row_old = quant_row_size(t->type, t->ne[0]);
    if (row_new == 0 || row_old == 0 || row_new >= row_old) return t->type;
    return target;
}

uint64_t rq_nbytes(const gguf_tensor *t, int type) {
    if (type == t->type) return t->nbytes;
    uint64_t rows = 1;
    for (int d = 1; d < GGUF_MAX_DIMS; d++) rows *= (uint64_t)t->ne[d];
    return rows * quant_row_size(type, t->ne[0]);
}

int rq_convert(int src_type, const void *src, int dst_type, void *dst, int64_t n_cols, int64_t n_rows, float *scratch,
               char *err, size_t errlen) {
    const quant_traits *s = quant_traits_ref(src_type), *d = quant_traits_ref(dst_type);
    const size_t rs = quant_row_size(src_type, n_cols), rd = quant_row_size(dst_type, n_cols);
    if (!s || !s->to_float || !d || !d->from_float || !rs || !rd)
        return df_seterr(err, errlen, "cannot requantize rows of %lld elements from type %d to type %d",
                         (long long)n_cols, src_type, dst_type);
    for (int64_t r = 0; r < n_rows; r++) {
        s->to_float((const uint8_t *)src + (size_t)r * rs, scratch, n_cols);
        d->from_float(scratch, (uint8_t *)dst + (size_t)r * rd, n_cols);
    }
    return 0;
}
