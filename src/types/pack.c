/*
 * pack.c - see pack.h.
 *
 * DESIGN
 * A type's block is described as a list of fields (shape_of), each moved
 * as a whole for the 16 rows: headers side by side, q4_K's 12 scale bytes
 * transposed (byte j of the 16 rows in one 16-byte vector), and the
 * quantized bytes as lines of 64 (bytes 4k..4k+3 of row r at 4r), xor-ed
 * with `flip` (q8_0: 0x80, so the signed weights become vpdpbusd's
 * unsigned operand; the nibble formats are unsigned already). Unpacking is
 * the same walk backwards. A group is copied to the scratch and written
 * back, so packing is in place.
 */
#include "pack.h"

#include <string.h>

#include "quant.h"

/* A block is a list of fields; each field of `size` bytes per row becomes
 * 16 * size bytes of the packed block, in order:
 *   SIDE:  the 16 rows' copies side by side (row r at r * size)
 *   TRANS: transposed (byte j of row r at 16j + r)
 *   LINES: lines of 64 bytes (bytes 4k..4k+3 of row r at 64k + 4r), xor flip */
enum { SIDE, TRANS, LINES };
typedef struct {
    int off, size, kind;
    uint8_t flip;
} pack_field;
typedef struct {
    int n;
    pack_field f[5];
} pack_shape;

static int shape_of(int type, pack_shape *s) {
    switch (type) {
    case DF_TYPE_Q8_0: *s = (pack_shape){2, {{0, 2, SIDE, 0}, {2, 32, LINES, 0x80}}}; return 1;
    case DF_TYPE_MXFP4: *s = (pack_shape){2, {{0, 1, SIDE, 0}, {1, 16, LINES, 0}}}; return 1;
    case DF_TYPE_Q4_K: /* d, dmin, scales[12], qs[128] */
        *s = (pack_shape){4, {{0, 2, SIDE, 0}, {2, 2, SIDE, 0}, {4, 12, TRANS, 0}, {16, 128, LINES, 0}}};
        return 1;
    case DF_TYPE_Q5_K: /* d, dmin, scales[12], qh[32], qs[128] */
        *s = (pack_shape){5, {{0, 2, SIDE, 0}, {2, 2, SIDE, 0}, {4, 12, TRANS, 0}, {16, 32, LINES, 0}, {48, 128, LINES, 0}}};
        return 1;
    case DF_TYPE_Q6_K: /* ql[128], qh[64], scales[16], d: packed as d, scales, ql, qh */
        *s = (pack_shape){4, {{208, 2, SIDE, 0}, {192, 16, TRANS, 0}, {0, 128, LINES, 0}, {128, 64, LINES, 0}}};
        return 1;
    default: return 0;
    }
}

int pack_has_layout(int type) {
    pack_shape s;
    return shape_of(type, &s);
}

/* One field of 16 rows: row r's `size` bytes at src + r * row_bytes <-> their packed places at p. */
static void pack_field_rows(const pack_field *f, uint8_t *src, size_t row_bytes, uint8_t *p, int unpack) {
    const uint32_t flip = 0x01010101u * f->flip;
    for (int r = 0; r < PACK_ROWS; r++) {
        uint8_t *q = src + (size_t)r * row_bytes;
        switch (f->kind) {
        case SIDE:
            if (unpack) memcpy(q, p + (size_t)(r * f->size), (size_t)f->size);
            else memcpy(p + (size_t)(r * f->size), q, (size_t)f->size);
            break;
        case TRANS:
            for (int i = 0; i < f->size; i++) {
                if (unpack) q[i] = p[16 * i + r];
                else p[16 * i + r] = q[i];
            }
            break;
        default: /* LINES: 4 bytes at a time */
            for (int k = 0; k < f->size / 4; k++) {
                uint8_t *l = p + 64 * (size_t)k + 4 * (size_t)r;
                uint32_t v;
                memcpy(&v, unpack ? l : q + 4 * k, 4);
                v ^= flip;
                memcpy(unpack ? q + 4 * k : l, &v, 4);
            }
            break;
        }
    }
}

/* One group: rows (row-major, row_bytes apart) <-> packed bytes. */
static void pack_group(const pack_shape *s, size_t bs, int64_t nb, uint8_t *rows, size_t row_bytes, uint8_t *packed,
                       int unpack) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *pf = packed + (size_t)b * bs * PACK_ROWS;
        for (int k = 0; k < s->n; k++) {
            const pack_field *f = &s->f[k];
            pack_field_rows(f, rows + (size_t)b * bs + (size_t)f->off, row_bytes, pf, unpack);
            pf += (size_t)PACK_ROWS * (size_t)f->size;
        }
    }
}

void pack_matrix(int type, uint8_t *w, size_t row_bytes, int64_t n_rows, uint8_t *scratch, int unpack) {
    pack_shape s;
    if (!shape_of(type, &s)) return;
    size_t bs = 0;
    for (int k = 0; k < s.n; k++) bs += (size_t)s.f[k].size;
    const int64_t nb = (int64_t)(row_bytes / bs);
    const size_t group = PACK_ROWS * row_bytes;
    for (int64_t r0 = 0; r0 + PACK_ROWS <= n_rows; r0 += PACK_ROWS) {
        uint8_t *g = w + (size_t)r0 * row_bytes;
        memcpy(scratch, g, group);
        if (unpack) pack_group(&s, bs, nb, g, row_bytes, scratch, 1);
        else pack_group(&s, bs, nb, scratch, row_bytes, g, 0);
    }
}

size_t pack_x_row_bytes(int vtype, int64_t n) {
    if (vtype != DF_TYPE_Q8_0) return 0;
    return (pack_q8_0_trailer_off(n / QK8_0) + 8 * (size_t)(n / QK8_0) + 63) & ~(size_t)63;
}

void pack_x_trailer(int vtype, void *xq, int64_t n) {
    if (vtype != DF_TYPE_Q8_0) return;
    const int64_t nb = n / QK8_0;
    const block_q8_0 *x = xq;
    uint8_t *t = (uint8_t *)xq + pack_q8_0_trailer_off(nb);
    for (int64_t b = 0; b < nb; b++) {
        int32_t sum = 0;
        for (int i = 0; i < QK8_0; i++) sum += x[b].qs[i];
        const int32_t corr = -128 * sum;
        const float d = df_fp16_to_fp32(x[b].d);
        memcpy(t + 4 * (size_t)b, &corr, 4);
        memcpy(t + 4 * (size_t)(nb + b), &d, 4);
    }
}
