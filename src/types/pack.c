/*
 * pack.c - see pack.h.
 *
 * DESIGN
 * The layouts share one shape: a block of `hdr` header bytes followed by
 * `qs` quantized bytes (a multiple of 4). A packed block of a group is the
 * 16 headers side by side, then qs / 4 lines of 64 bytes (line k: bytes
 * 4k..4k+3 of row r at 4r), each byte xor-ed with `flip` (q8_0: 0x80, so
 * the signed weights become vpdpbusd's unsigned operand; the nibble formats
 * are unsigned already). Unpacking is the same walk backwards. A group is
 * copied to the scratch and written back, so packing is in place.
 */
#include "pack.h"

#include <string.h>

#include "quant.h"

typedef struct {
    int hdr, qs;
    uint8_t flip;
} pack_shape;

static int shape_of(int type, pack_shape *s) {
    switch (type) {
    case DF_TYPE_Q8_0: *s = (pack_shape){2, 32, 0x80}; return 1;
    case DF_TYPE_MXFP4: *s = (pack_shape){1, 16, 0}; return 1;
    default: return 0;
    }
}

int pack_has_layout(int type) {
    pack_shape s;
    return shape_of(type, &s);
}

/* One group: rows (row-major, row_bytes apart) <-> packed bytes. */
static void pack_group(const pack_shape *s, int64_t nb, uint8_t *rows, size_t row_bytes, uint8_t *packed, int unpack) {
    const size_t bs = (size_t)(s->hdr + s->qs);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *pb = packed + (size_t)b * bs * PACK_ROWS;
        for (int r = 0; r < PACK_ROWS; r++) {
            uint8_t *blk = rows + (size_t)r * row_bytes + (size_t)b * bs;
            uint8_t *h = pb + (size_t)r * (size_t)s->hdr;
            if (unpack) memcpy(blk, h, (size_t)s->hdr);
            else memcpy(h, blk, (size_t)s->hdr);
            for (int k = 0; k < s->qs / 4; k++) {
                uint8_t *l = pb + PACK_ROWS * (size_t)s->hdr + 64 * (size_t)k + 4 * (size_t)r;
                uint8_t *q = blk + s->hdr + 4 * k;
                for (int i = 0; i < 4; i++) {
                    if (unpack) q[i] = l[i] ^ s->flip;
                    else l[i] = q[i] ^ s->flip;
                }
            }
        }
    }
}

void pack_matrix(int type, uint8_t *w, size_t row_bytes, int64_t n_rows, uint8_t *scratch, int unpack) {
    pack_shape s;
    if (!shape_of(type, &s)) return;
    const int64_t nb = (int64_t)(row_bytes / (size_t)(s.hdr + s.qs));
    const size_t group = PACK_ROWS * row_bytes;
    for (int64_t r0 = 0; r0 + PACK_ROWS <= n_rows; r0 += PACK_ROWS) {
        uint8_t *g = w + (size_t)r0 * row_bytes;
        memcpy(scratch, g, group);
        if (unpack) pack_group(&s, nb, g, row_bytes, scratch, 1);
        else pack_group(&s, nb, scratch, row_bytes, g, 0);
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
