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
 * the same walk backwards. In place, a group is copied to the scratch and
 * written back; pack_groups_to packs from a separate buffer (the store's
 * staging buffer at load), so each destination byte is written once.
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

/* A field's `size` bytes of one row, in either direction (sizes 1 and 2,
 * the headers, are by far the most frequent: no call for them). */
static inline void move_bytes(uint8_t *to, const uint8_t *from, int size) {
    if (size == 2) memcpy(to, from, 2);
    else if (size == 1) *to = *from;
    else memcpy(to, from, (size_t)size);
}

/* One field of 16 rows: row r's bytes at rows + r * row_bytes -> their packed places at p. */
static void field_pack(const pack_field *f, const uint8_t *rows, size_t row_bytes, uint8_t *p) {
    const uint32_t flip = 0x01010101u * f->flip;
    for (int r = 0; r < PACK_ROWS; r++) {
        const uint8_t *q = rows + (size_t)r * row_bytes;
        if (f->kind == SIDE) move_bytes(p + (size_t)(r * f->size), q, f->size);
        else if (f->kind == TRANS)
            for (int i = 0; i < f->size; i++) p[16 * i + r] = q[i];
    }
    if (f->kind == LINES) /* line by line, 4 bytes of each row: the writes in order */
        for (int k = 0; k < f->size / 4; k++) {
            uint32_t l[PACK_ROWS];
            for (int r = 0; r < PACK_ROWS; r++) {
                memcpy(&l[r], rows + (size_t)r * row_bytes + 4 * k, 4);
                l[r] ^= flip;
            }
            memcpy(p + 64 * (size_t)k, l, sizeof l);
        }
}

/* The inverse of field_pack. */
static void field_unpack(const pack_field *f, const uint8_t *p, uint8_t *rows, size_t row_bytes) {
    const uint32_t flip = 0x01010101u * f->flip;
    for (int r = 0; r < PACK_ROWS; r++) {
        uint8_t *q = rows + (size_t)r * row_bytes;
        if (f->kind == SIDE) move_bytes(q, p + (size_t)(r * f->size), f->size);
        else if (f->kind == TRANS)
            for (int i = 0; i < f->size; i++) q[i] = p[16 * i + r];
        else
            for (int k = 0; k < f->size / 4; k++) {
                uint32_t v;
                memcpy(&v, p + 64 * (size_t)k + 4 * (size_t)r, 4);
                v ^= flip;
                memcpy(q + 4 * k, &v, 4);
            }
    }
}

/* One group of nb blocks of bs bytes per row: rows (row-major, row_bytes
 * apart) -> packed bytes, or back. */
static void group_pack(const pack_shape *s, size_t bs, int64_t nb, const uint8_t *rows, size_t row_bytes,
                       uint8_t *packed) {
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *pf = packed + (size_t)b * bs * PACK_ROWS;
        for (int k = 0; k < s->n; k++) {
            field_pack(&s->f[k], rows + (size_t)b * bs + (size_t)s->f[k].off, row_bytes, pf);
            pf += (size_t)PACK_ROWS * (size_t)s->f[k].size;
        }
    }
}

static void group_unpack(const pack_shape *s, size_t bs, int64_t nb, const uint8_t *packed, uint8_t *rows,
                         size_t row_bytes) {
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pf = packed + (size_t)b * bs * PACK_ROWS;
        for (int k = 0; k < s->n; k++) {
            field_unpack(&s->f[k], pf, rows + (size_t)b * bs + (size_t)s->f[k].off, row_bytes);
            pf += (size_t)PACK_ROWS * (size_t)s->f[k].size;
        }
    }
}

/* The block size of a shape (the sum of its fields). */
static size_t block_bytes(const pack_shape *s) {
    size_t bs = 0;
    for (int k = 0; k < s->n; k++) bs += (size_t)s->f[k].size;
    return bs;
}

void pack_matrix(int type, uint8_t *w, size_t row_bytes, int64_t n_rows, uint8_t *scratch, int unpack) {
    pack_shape s;
    if (!shape_of(type, &s)) return;
    const size_t bs = block_bytes(&s), group = PACK_ROWS * row_bytes;
    const int64_t nb = (int64_t)(row_bytes / bs);
    for (int64_t r0 = 0; r0 + PACK_ROWS <= n_rows; r0 += PACK_ROWS) {
        uint8_t *g = w + (size_t)r0 * row_bytes;
        memcpy(scratch, g, group);
        if (unpack) group_unpack(&s, bs, nb, scratch, g, row_bytes);
        else group_pack(&s, bs, nb, scratch, row_bytes, g);
    }
}

void pack_groups_to(int type, const uint8_t *rows, size_t row_bytes, int64_t n_groups, uint8_t *dst) {
    pack_shape s;
    if (!shape_of(type, &s)) return;
    const size_t bs = block_bytes(&s), group = PACK_ROWS * row_bytes;
    const int64_t nb = (int64_t)(row_bytes / bs);
    for (int64_t g = 0; g < n_groups; g++) group_pack(&s, bs, nb, rows + (size_t)g * group, row_bytes, dst + (size_t)g * group);
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
