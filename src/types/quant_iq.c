/*
 * quant_iq.c - the i-quants' scalar reference codecs: IQ4_NL and IQ4_XS
 * (a 16-value table), and the grid i-quants IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S and IQ1_M (quant_grids.c's tables); their block
 * decoders for the SIMD kernels (quant_iq_get, quant_isa.h); and
 * quant_iq_fill, which puts their entries into quant.c's reference table.
 * quant.c's design comment holds for them (ggml's layouts, its integer
 * sums, simpler quantizers of our own for test models).
 */
#include "quant.h"
#include "quant_bits.h"
#include "quant_isa.h"
#include "quant_grids.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================
 * IQ4_NL: 32 elements, d (f16) and 4-bit codes laid out as q4_0's (element
 * j < 16 the low nibble of qs[j], j+16 the high one); value = d * kv[code]
 * with ggml's non-linear table kv = kvalues_iq4nl. Pairs with q8_0.
 * IQ4_XS: 256 elements in 8 sub-blocks of 32, each an iq4_nl block without
 * its own d; sub-block ib's 6-bit scale ls (low nibble: nibble ib%2 of
 * scales_l[ib/2]; high bits: bits 2ib..2ib+1 of scales_h), value =
 * d * (ls - 32) * kv[code]. Pairs with q8_K; the scalar dot sums
 * (ls - 32) * (integer sub-block sum) exactly, then one float multiply.
 * Quantizer (ours, simpler than ggml's search with importance weights):
 * per 32 elements, a few scales that put the largest element on either end
 * of the table are tried, codes are the nearest table entries, and the
 * scale is refit by least squares; the best fit is kept. IQ4_XS then
 * quantizes the 8 sub-block scales to 6 bits against one f16 d and re-picks
 * the codes against the scales the decoder will see.
 * ====================================================================== */

/* Index of the table entry nearest v (the lower one on ties). */
static int iq4_nearest(float v) {
    if (!(v > (float)df_kvalues_iq4nl[0])) return 0;
    int k = 0;
    while (k < 15 && (float)df_kvalues_iq4nl[k + 1] < v) k++;
    if (k == 15) return 15;
    return v - (float)df_kvalues_iq4nl[k] <= (float)df_kvalues_iq4nl[k + 1] - v ? k : k + 1;
}

/* Best s with x ~= s * kv[L] over 32 elements (0 for an all-zero input). */
static float iq4_fit(const float *x, uint8_t *L) {
    float amax = 0, mx = 0;
    for (int i = 0; i < 32; i++)
        if (fabsf(x[i]) > amax) { amax = fabsf(x[i]); mx = x[i]; }
    memset(L, 8, 32);
    if (!(amax > 1e-30f)) return 0.0f;
    float best_s = 0, best_gain = -1;
    uint8_t tmp[32];
    for (int end = 0; end < 2; end++)
        for (int k = -6; k <= 6; k++) {
            float iscale = ((float)(end ? 113 : -127) + (float)k) / mx;
            double sxv = 0, svv = 0;
            for (int i = 0; i < 32; i++) {
                tmp[i] = (uint8_t)iq4_nearest(iscale * x[i]);
                double v = df_kvalues_iq4nl[tmp[i]];
                sxv += (double)x[i] * v;
                svv += v * v;
            }
            if (svv > 0 && sxv * sxv / svv > best_gain) {
                best_gain = sxv * sxv / svv;
                best_s = (float)(sxv / svv);
                memcpy(L, tmp, 32);
            }
        }
    return best_s;
}

/* 32 codes for x against the decoded scale dl, packed q4_0-style. */
static void iq4_pack(const float *x, float dl, uint8_t *qs) {
    float id = dl != 0.0f ? 1.0f / dl : 0.0f;
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(iq4_nearest(x[j] * id) | (iq4_nearest(x[j + 16] * id) << 4));
}

/* Integer dot of 32 iq4 codes (q4_0 layout) with 32 activations. */
static inline int iq4_dot32(const uint8_t *qs, const int8_t *y) {
    int s = 0;
    for (int j = 0; j < 16; j++)
        s += df_kvalues_iq4nl[qs[j] & 0xF] * y[j] + df_kvalues_iq4nl[qs[j] >> 4] * y[j + 16];
    return s;
}

static void iq4_nl_to_float(const void *src, float *dst, int64_t n) {
    const block_iq4_nl *b = src;
    for (int64_t i = 0; i < n / QK4_NL; i++, dst += QK4_NL) {
        float d = H2F(b[i].d);
        for (int j = 0; j < 16; j++) {
            dst[j] = d * (float)df_kvalues_iq4nl[b[i].qs[j] & 0xF];
            dst[j + 16] = d * (float)df_kvalues_iq4nl[b[i].qs[j] >> 4];
        }
    }
}

static void iq4_nl_from_float(const float *src, void *dst, int64_t n) {
    block_iq4_nl *b = dst;
    uint8_t L[32];
    for (int64_t i = 0; i < n / QK4_NL; i++, src += QK4_NL) {
        b[i].d = F2H(iq4_fit(src, L));
        iq4_pack(src, H2F(b[i].d), b[i].qs);
    }
}

static void iq4_nl_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_iq4_nl *a = w;
    const block_q8_0 *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK4_NL; i++)
        sum += (float)iq4_dot32(a[i].qs, b[i].qs) * (H2F(a[i].d) * H2F(b[i].d));
    *out = sum;
}

/* IQ4_XS sub-block ib's scale minus 32. */
static inline int iq4_xs_scale(const block_iq4_xs *b, int ib) {
    return (((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b->scales_h >> (2 * ib)) & 3) << 4)) - 32;
}

static void iq4_xs_to_float(const void *src, float *dst, int64_t n) {
    const block_iq4_xs *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float d = H2F(b[i].d);
        for (int ib = 0; ib < 8; ib++, dst += 32) {
            float dl = d * (float)iq4_xs_scale(&b[i], ib);
            const uint8_t *qs = b[i].qs + 16 * ib;
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)df_kvalues_iq4nl[qs[j] & 0xF];
                dst[j + 16] = dl * (float)df_kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

static void iq4_xs_from_float(const float *src, void *dst, int64_t n) {
    block_iq4_xs *b = dst;
    uint8_t L[32];
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float s[8], smax = 0;
        for (int ib = 0; ib < 8; ib++) {
            s[ib] = iq4_fit(src + 32 * ib, L);
            if (fabsf(s[ib]) > fabsf(smax)) smax = s[ib];
        }
        b[i].d = F2H(-smax / 32); /* the largest scale lands on -32, the extra level */
        float d = H2F(b[i].d), id = d != 0.0f ? 1.0f / d : 0.0f;
        b[i].scales_h = 0;
        memset(b[i].scales_l, 0, sizeof b[i].scales_l);
        for (int ib = 0; ib < 8; ib++) {
            int ls = qclamp(s[ib] * id, -32, 31) + 32;
            b[i].scales_l[ib / 2] |= (uint8_t)((ls & 0xF) << (4 * (ib % 2)));
            b[i].scales_h |= (uint16_t)((ls >> 4) << (2 * ib));
            iq4_pack(src + 32 * ib, d * (float)(ls - 32), b[i].qs + 16 * ib);
        }
    }
}

static void iq4_xs_vec_dot(int64_t n, const void *w, const void *x, float *out) {
    const block_iq4_xs *a = w;
    const block_q8_K *b = x;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int isum = 0;
        for (int ib = 0; ib < 8; ib++) isum += iq4_xs_scale(&a[i], ib) * iq4_dot32(a[i].qs + 16 * ib, b[i].qs + 32 * ib);
        sum += (H2F(a[i].d) * b[i].d) * (float)isum;
    }
    *out = sum;
}


/* ======================================================================
 * Grid i-quants: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M.
 * 256 elements in 8 sub-blocks of 32; groups of 8 (iq3: 4) elements take
 * their magnitudes from a grid entry (quant_grids.c: byte j of an entry is
 * element j) and their signs from a sign byte (bit j negates element j),
 * or, for iq1, signed -1/0/1 from the grid plus a +-1/8 shift. Each decoder
 * below turns one block into quant_isa.h's quant_iq_block (integer values
 * q, integer scales ls per 16 elements, d), so element e of sub-block ib,
 * group l = e % 32 / 8, byte j = e % 8 is:
 *  iq2_xxs: qs as bytes; grid index = byte l of qs[4ib..4ib+1] (iq2xxs_grid);
 *    w = the next 32 bits: signs ksigns[bits 7l..7l+6 of w], ls = 2 w>>28 + 1;
 *    value = d * ls / 8 * grid * sign.
 *  iq2_xs: qs[4ib+l]: bits 0-8 the index (iq2xs_grid), 9-15 the ksigns
 *    index; ls = 2 * nibble l/2 of scales[ib] + 1 (per 16); value as iq2_xxs.
 *  iq2_s: index qs[4ib+l] | bits 2l..2l+1 of qh[ib] << 8 (iq2s_grid); sign
 *    byte qs[32 + 4ib + l] (all 8 bits); scales as iq2_xs.
 *  iq3_xxs: elements 8l+j (j < 4) from iq3xxs_grid[qs[8ib+2l]], 8l+4+j
 *    from iq3xxs_grid[qs[8ib+2l+1]]; w = the 32 bits at qs[64 + 4ib]: signs
 *    and ls as iq2_xxs; value = d * ls / 4 * grid * sign.
 *  iq3_s: as iq3_xxs with 9-bit indices (iq3s_grid): qs[8ib+2l] | bit 2l of
 *    qh[ib] << 8 and qs[8ib+2l+1] | bit 2l+1 << 8; sign byte signs[4ib+l];
 *    ls = 2 * nibble ib%2 of scales[ib/2] + 1; value = d * ls * grid * sign.
 *  iq1_s: h = qh[ib]; index qs[4ib+l] | bits 3l..3l+2 of h << 8 (iq1s_grid,
 *    signed); ls = 2 * bits 12-14 + 1; delta = -1/8 if bit 15 else 1/8;
 *    value = d * ls * (grid + delta).
 *  iq1_m: no d field: the f16 d is the top nibbles of the four 16-bit words
 *    of scales (word k gives bits 4k..4k+3); index qs[4ib+l] | 3 bits of
 *    qh[2ib + l/2] (bits 0-2 for even l, 4-6 for odd) << 8; delta sign bit 3
 *    (even l) or 7 (odd l) of that byte; the 3-bit scales of the 16-element
 *    halves of sub-block ib are bits 6(ib%2).. and 6(ib%2)+3.. of word ib/2;
 *    value as iq1_s.
 * ksigns[i] is i with bit 7 set when i has an odd number of bits (so every
 * sign byte negates an even count). All pair with q8_K; the dot is, as in
 * ggml, integer sums per scale group times ls, summed exactly, times
 * d * y.d, times the type's factor (1/8, 1/4 or 1; iq1 carries its delta
 * as q = 8 * grid +- 1, factor 1/8, which equals ggml's sum plus 1/8 of the
 * delta times the activation sums).
 * Quantizers (ours; ggml's need importance matrices and big search tables):
 * per scale group, the step that maps the largest element onto the largest
 * grid magnitude; one f16 d for the block with the groups' odd multipliers
 * ls rounded to fit; then, per group of 8 (or 4), an exhaustive nearest-grid-
 * point search on the magnitudes (iq1: on the signed values, both deltas
 * tried) and the signs of the inputs (where the sign byte must have even
 * parity, the smallest element's sign gives way, as in ggml).
 * ====================================================================== */

static inline uint8_t iq_ksigns(unsigned i) {
    i &= 127;
    return (uint8_t)(i | ((unsigned)__builtin_parity(i) << 7));
}

static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* 8 (or 4) magnitudes of a grid entry with their signs */
static inline void iq_put8(int8_t *q, uint64_t g, unsigned signs) {
    for (int j = 0; j < 8; j++) {
        int m = (int)((g >> (8 * j)) & 0xFF);
        q[j] = (int8_t)((signs >> j) & 1 ? -m : m);
    }
}
static inline void iq_put4(int8_t *q, uint32_t g, unsigned signs) {
    for (int j = 0; j < 4; j++) {
        int m = (int)((g >> (8 * j)) & 0xFF);
        q[j] = (int8_t)((signs >> j) & 1 ? -m : m);
    }
}
/* iq1: 8 * grid + delta */
static inline void iq_put1(int8_t *q, uint64_t g, int delta) {
    for (int j = 0; j < 8; j++) q[j] = (int8_t)(8 * (int8_t)((g >> (8 * j)) & 0xFF) + delta);
}
static inline void iq_ls32(quant_iq_block *o, int ib, int ls) { o->ls[2 * ib] = o->ls[2 * ib + 1] = (int16_t)ls; }

static void iq2_xxs_decode(const void *blk, quant_iq_block *o) {
    const block_iq2_xxs *b = blk;
    const uint8_t *qs = (const uint8_t *)b->qs;
    o->d = H2F(b->d);
    for (int ib = 0; ib < 8; ib++) {
        uint32_t w = rd32(qs + 8 * ib + 4);
        iq_ls32(o, ib, 2 * (int)(w >> 28) + 1);
        for (int l = 0; l < 4; l++) iq_put8(o->q + 32 * ib + 8 * l, df_iq2xxs_grid[qs[8 * ib + l]], iq_ksigns(w >> (7 * l)));
    }
}

static void iq2_xs_decode(const void *blk, quant_iq_block *o) {
    const block_iq2_xs *b = blk;
    o->d = H2F(b->d);
    for (int ib = 0; ib < 8; ib++) {
        o->ls[2 * ib] = (int16_t)(2 * (b->scales[ib] & 0xF) + 1);
        o->ls[2 * ib + 1] = (int16_t)(2 * (b->scales[ib] >> 4) + 1);
        for (int l = 0; l < 4; l++) {
            unsigned v = b->qs[4 * ib + l];
            iq_put8(o->q + 32 * ib + 8 * l, df_iq2xs_grid[v & 511], iq_ksigns(v >> 9));
        }
    }
}

static void iq2_s_decode(const void *blk, quant_iq_block *o) {
    const block_iq2_s *b = blk;
    o->d = H2F(b->d);
    for (int ib = 0; ib < 8; ib++) {
        o->ls[2 * ib] = (int16_t)(2 * (b->scales[ib] & 0xF) + 1);
        o->ls[2 * ib + 1] = (int16_t)(2 * (b->scales[ib] >> 4) + 1);
        for (int l = 0; l < 4; l++) {
            unsigned idx = b->qs[4 * ib + l] | ((b->qh[ib] >> (2 * l)) & 3u) << 8;
            iq_put8(o->q + 32 * ib + 8 * l, df_iq2s_grid[idx], b->qs[32 + 4 * ib + l]);
        }
    }
}

static void iq3_xxs_decode(const void *blk, quant_iq_block *o) {
    const block_iq3_xxs *b = blk;
    o->d = H2F(b->d);
    for (int ib = 0; ib < 8; ib++) {
        uint32_t w = rd32(b->qs + 64 + 4 * ib);
        iq_ls32(o, ib, 2 * (int)(w >> 28) + 1);
        for (int l = 0; l < 4; l++) {
            unsigned sg = iq_ksigns(w >> (7 * l));
            iq_put4(o->q + 32 * ib + 8 * l, df_iq3xxs_grid[b->qs[8 * ib + 2 * l]], sg);
            iq_put4(o->q + 32 * ib + 8 * l + 4, df_iq3xxs_grid[b->qs[8 * ib + 2 * l + 1]], sg >> 4);
        }
    }
}

static void iq3_s_decode(const void *blk, quant_iq_block *o) {
    const block_iq3_s *b = blk;
    o->d = H2F(b->d);
    for (int ib = 0; ib < 8; ib++) {
        iq_ls32(o, ib, 2 * ((b->scales[ib / 2] >> (4 * (ib % 2))) & 0xF) + 1);
        for (int l = 0; l < 4; l++) {
            unsigned i1 = b->qs[8 * ib + 2 * l] | ((b->qh[ib] >> (2 * l)) & 1u) << 8;
            unsigned i2 = b->qs[8 * ib + 2 * l + 1] | ((b->qh[ib] >> (2 * l + 1)) & 1u) << 8;
            iq_put4(o->q + 32 * ib + 8 * l, df_iq3s_grid[i1], b->signs[4 * ib + l]);
            iq_put4(o->q + 32 * ib + 8 * l + 4, df_iq3s_grid[i2], (unsigned)b->signs[4 * ib + l] >> 4);
        }
    }
}

static void iq1_s_decode(const void *blk, quant_iq_block *o) {
    const block_iq1_s *b = blk;
    o->d = H2F(b->d);
    for (int ib = 0; ib < 8; ib++) {
        unsigned h = b->qh[ib];
        iq_ls32(o, ib, 2 * (int)((h >> 12) & 7) + 1);
        for (int l = 0; l < 4; l++)
            iq_put1(o->q + 32 * ib + 8 * l, df_iq1s_grid[b->qs[4 * ib + l] | ((h >> (3 * l)) & 7u) << 8], h & 0x8000 ? -1 : 1);
    }
}

static void iq1_m_decode(const void *blk, quant_iq_block *o) {
    const block_iq1_m *b = blk;
    o->d = H2F(quant_iq1_m_head(b, o->ls));
    for (int ib = 0; ib < 8; ib++)
        for (int l = 0; l < 4; l++) {
            unsigned h = (unsigned)b->qh[2 * ib + l / 2] >> (4 * (l % 2));
            iq_put1(o->q + 32 * ib + 8 * l, df_iq1s_grid[b->qs[4 * ib + l] | (h & 7u) << 8], h & 8 ? -1 : 1);
        }
}

/* ---- quantizer helpers ---- */

/* Per group of gs elements (ng groups), the step amax / qmax; d (returned,
 * stored as *dh) makes the largest step factor * (2 smax + 1) * d; s[g] the
 * nearest multiplier index for the others. */
static float iq_fit_scales(const float *x, int gs, int ng, float qmax, int smax, float factor, int *s, uint16_t *dh) {
    float unit[16], umax = 0;
    for (int g = 0; g < ng; g++) {
        float amax = 0;
        for (int j = 0; j < gs; j++) amax = fmaxf(amax, fabsf(x[g * gs + j]));
        unit[g] = amax / qmax;
        umax = fmaxf(umax, unit[g]);
    }
    *dh = F2H(umax / (factor * (float)(2 * smax + 1)));
    float d = H2F(*dh);
    for (int g = 0; g < ng; g++) s[g] = d > 0 ? qclamp((unit[g] / (d * factor) - 1.0f) * 0.5f, 0, smax) : 0;
    return d;
}

/* 1 / (the decoded step of multiplier index s), 0 for a zero step */
static inline float iq_inv(float d, float factor, int s) {
    float u = d * factor * (float)(2 * s + 1);
    return u > 0 ? 1.0f / u : 0.0f;
}

/* Grid entry (8 or 4 unsigned bytes) nearest the magnitudes |x_j| * inv. */
static int iq_nearest8(const uint64_t *grid, int ng, const float *x, float inv) {
    int best = 0;
    float be = INFINITY;
    for (int k = 0; k < ng; k++) {
        float e = 0;
        for (int j = 0; j < 8; j++) {
            float t = fabsf(x[j]) * inv - (float)((grid[k] >> (8 * j)) & 0xFF);
            e += t * t;
        }
        if (e < be) { be = e; best = k; }
    }
    return best;
}
static int iq_nearest4(const uint32_t *grid, int ng, const float *x, float inv) {
    int best = 0;
    float be = INFINITY;
    for (int k = 0; k < ng; k++) {
        float e = 0;
        for (int j = 0; j < 4; j++) {
            float t = fabsf(x[j]) * inv - (float)((grid[k] >> (8 * j)) & 0xFF);
            e += t * t;
        }
        if (e < be) { be = e; best = k; }
    }
    return best;
}

/* Sign bits of 8 values (bit j: x_j < 0); with even = 1 the count is made
 * even by flipping the smallest element's bit. */
static unsigned iq_signs(const float *x, int even) {
    unsigned s = 0;
    int jmin = 0;
    for (int j = 0; j < 8; j++) {
        if (x[j] < 0) s |= 1u << j;
        if (fabsf(x[j]) < fabsf(x[jmin])) jmin = j;
    }
    if (even && __builtin_parity(s)) s ^= 1u << jmin;
    return s;
}

/* iq1s_grid's entries by their ternary pattern (sum (g_j + 1) 3^j), -1
 * where a pattern is not in the grid. */
static int16_t iq1_pattern[6561];
static pthread_once_t iq1_once = PTHREAD_ONCE_INIT;
static void iq1_pattern_init(void) {
    for (int c = 0; c < 6561; c++) iq1_pattern[c] = -1;
    for (int k = 0; k < 2048; k++) {
        int c = 0;
        for (int j = 7; j >= 0; j--) c = 3 * c + (int8_t)((df_iq1s_grid[k] >> (8 * j)) & 0xFF) + 1;
        iq1_pattern[c] = (int16_t)k;
    }
}

/* iq1: the entry nearest x * inv * 8 as 8 * grid + dl (dl = +-1); writes
 * the squared error. The error is a sum over elements, so the element-wise
 * nearest pattern is the answer when the grid has it; else every entry is
 * scored from the per-element errors. */
static int iq1_nearest_dl(const float *x, float inv, int dl, float *err) {
    float e[8][3];
    int c = 0, pow3 = 1;
    float emin = 0;
    pthread_once(&iq1_once, iq1_pattern_init);
    for (int j = 0; j < 8; j++, pow3 *= 3) {
        float t = x[j] * inv * 8.0f - (float)dl;
        int bg = 0;
        for (int g = -1; g <= 1; g++) e[j][g + 1] = (t - 8.0f * (float)g) * (t - 8.0f * (float)g);
        for (int g = -1; g <= 1; g++)
            if (e[j][g + 1] < e[j][bg + 1]) bg = g;
        c += (bg + 1) * pow3;
        emin += e[j][bg + 1];
    }
    if (iq1_pattern[c] >= 0) {
        *err = emin;
        return iq1_pattern[c];
    }
    int best = 0;
    float be = INFINITY;
    for (int k = 0; k < 2048; k++) {
        float ek = 0;
        for (int j = 0; j < 8; j++) ek += e[j][(int8_t)((df_iq1s_grid[k] >> (8 * j)) & 0xFF) + 1];
        if (ek < be) { be = ek; best = k; }
    }
    *err = be;
    return best;
}

static void iq2_xxs_from_float(const float *src, void *dst, int64_t n) {
    block_iq2_xxs *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        int s[8];
        float d = iq_fit_scales(src, 32, 8, 43, 15, 0.125f, s, &b[i].d);
        uint8_t *qs = (uint8_t *)b[i].qs;
        for (int ib = 0; ib < 8; ib++) {
            const float *x = src + 32 * ib, inv = iq_inv(d, 0.125f, s[ib]);
            uint32_t w = (uint32_t)s[ib] << 28;
            for (int l = 0; l < 4; l++) {
                qs[8 * ib + l] = (uint8_t)iq_nearest8(df_iq2xxs_grid, 256, x + 8 * l, inv);
                w |= (iq_signs(x + 8 * l, 1) & 127u) << (7 * l);
            }
            memcpy(qs + 8 * ib + 4, &w, 4);
        }
    }
}

static void iq2_xs_from_float(const float *src, void *dst, int64_t n) {
    block_iq2_xs *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        int s[16];
        float d = iq_fit_scales(src, 16, 16, 43, 15, 0.125f, s, &b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            b[i].scales[ib] = (uint8_t)(s[2 * ib] | s[2 * ib + 1] << 4);
            for (int l = 0; l < 4; l++) {
                const float *x = src + 32 * ib + 8 * l;
                int idx = iq_nearest8(df_iq2xs_grid, 512, x, iq_inv(d, 0.125f, s[2 * ib + l / 2]));
                b[i].qs[4 * ib + l] = (uint16_t)(idx | (iq_signs(x, 1) & 127u) << 9);
            }
        }
    }
}

static void iq2_s_from_float(const float *src, void *dst, int64_t n) {
    block_iq2_s *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        int s[16];
        float d = iq_fit_scales(src, 16, 16, 43, 15, 0.125f, s, &b[i].d);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int ib = 0; ib < 8; ib++) {
            b[i].scales[ib] = (uint8_t)(s[2 * ib] | s[2 * ib + 1] << 4);
            for (int l = 0; l < 4; l++) {
                const float *x = src + 32 * ib + 8 * l;
                int idx = iq_nearest8(df_iq2s_grid, 1024, x, iq_inv(d, 0.125f, s[2 * ib + l / 2]));
                b[i].qs[4 * ib + l] = (uint8_t)idx;
                b[i].qh[ib] |= (uint8_t)((idx >> 8) << (2 * l));
                b[i].qs[32 + 4 * ib + l] = (uint8_t)iq_signs(x, 0);
            }
        }
    }
}

static void iq3_xxs_from_float(const float *src, void *dst, int64_t n) {
    block_iq3_xxs *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        int s[8];
        float d = iq_fit_scales(src, 32, 8, 62, 15, 0.25f, s, &b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const float *x = src + 32 * ib, inv = iq_inv(d, 0.25f, s[ib]);
            uint32_t w = (uint32_t)s[ib] << 28;
            for (int l = 0; l < 4; l++) {
                b[i].qs[8 * ib + 2 * l] = (uint8_t)iq_nearest4(df_iq3xxs_grid, 256, x + 8 * l, inv);
                b[i].qs[8 * ib + 2 * l + 1] = (uint8_t)iq_nearest4(df_iq3xxs_grid, 256, x + 8 * l + 4, inv);
                w |= (iq_signs(x + 8 * l, 1) & 127u) << (7 * l);
            }
            memcpy(b[i].qs + 64 + 4 * ib, &w, 4);
        }
    }
}

static void iq3_s_from_float(const float *src, void *dst, int64_t n) {
    block_iq3_s *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        int s[8];
        float d = iq_fit_scales(src, 32, 8, 15, 15, 1.0f, s, &b[i].d);
        memset(b[i].qh, 0, sizeof b[i].qh);
        memset(b[i].scales, 0, sizeof b[i].scales);
        for (int ib = 0; ib < 8; ib++) {
            const float *x = src + 32 * ib, inv = iq_inv(d, 1.0f, s[ib]);
            b[i].scales[ib / 2] |= (uint8_t)(s[ib] << (4 * (ib % 2)));
            for (int l = 0; l < 4; l++) {
                int i1 = iq_nearest4(df_iq3s_grid, 512, x + 8 * l, inv), i2 = iq_nearest4(df_iq3s_grid, 512, x + 8 * l + 4, inv);
                b[i].qs[8 * ib + 2 * l] = (uint8_t)i1;
                b[i].qs[8 * ib + 2 * l + 1] = (uint8_t)i2;
                b[i].qh[ib] |= (uint8_t)((i1 >> 8) << (2 * l) | (i2 >> 8) << (2 * l + 1));
                b[i].signs[4 * ib + l] = (uint8_t)iq_signs(x + 8 * l, 0);
            }
        }
    }
}

static void iq1_s_from_float(const float *src, void *dst, int64_t n) {
    block_iq1_s *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        int s[8];
        float d = iq_fit_scales(src, 32, 8, 9, 7, 0.125f, s, &b[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const float *x = src + 32 * ib, inv = iq_inv(d, 1.0f, s[ib]); /* grid units: d * ls */
            /* one delta per sub-block: keep the one with the smaller total error */
            int best_dl = 1, idx[2][4];
            float best_e = INFINITY;
            for (int dl = -1; dl <= 1; dl += 2) {
                float e = 0, el;
                for (int l = 0; l < 4; l++) {
                    idx[dl > 0][l] = iq1_nearest_dl(x + 8 * l, inv, dl, &el);
                    e += el;
                }
                if (e < best_e) { best_e = e; best_dl = dl; }
            }
            unsigned h = (unsigned)s[ib] << 12 | (best_dl < 0 ? 0x8000u : 0u);
            for (int l = 0; l < 4; l++) {
                int k = idx[best_dl > 0][l];
                b[i].qs[4 * ib + l] = (uint8_t)k;
                h |= (unsigned)(k >> 8) << (3 * l);
            }
            b[i].qh[ib] = (uint16_t)h;
        }
    }
}

static void iq1_m_from_float(const float *src, void *dst, int64_t n) {
    block_iq1_m *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        int s[16];
        uint16_t dh, sc[4] = {0, 0, 0, 0};
        float d = iq_fit_scales(src, 16, 16, 9, 7, 0.125f, s, &dh);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int ib = 0; ib < 8; ib++) {
            sc[ib / 2] |= (uint16_t)((s[2 * ib] | s[2 * ib + 1] << 3) << (6 * (ib % 2)));
            for (int l = 0; l < 4; l++) {
                const float *x = src + 32 * ib + 8 * l, inv = iq_inv(d, 1.0f, s[2 * ib + l / 2]);
                float em, ep; /* the delta of each group of 8: the better of the two */
                int km = iq1_nearest_dl(x, inv, -1, &em), kp = iq1_nearest_dl(x, inv, 1, &ep);
                int dl = em < ep ? -1 : 1, k = em < ep ? km : kp;
                b[i].qs[4 * ib + l] = (uint8_t)k;
                b[i].qh[2 * ib + l / 2] |= (uint8_t)(((k >> 8) | (dl < 0 ? 8 : 0)) << (4 * (l % 2)));
            }
        }
        for (int k = 0; k < 4; k++) sc[k] |= (uint16_t)(((dh >> (4 * k)) & 0xF) << 12);
        memcpy(b[i].scales, sc, 8);
    }
}

/* ---- shared decode-based kernels ---- */

static const quant_iq_info iq_info[DF_TYPE_COUNT] = {
    [DF_TYPE_IQ2_XXS] = {sizeof(block_iq2_xxs), 0.125f, iq2_xxs_decode},
    [DF_TYPE_IQ2_XS] = {sizeof(block_iq2_xs), 0.125f, iq2_xs_decode},
    [DF_TYPE_IQ2_S] = {sizeof(block_iq2_s), 0.125f, iq2_s_decode},
    [DF_TYPE_IQ3_XXS] = {sizeof(block_iq3_xxs), 0.25f, iq3_xxs_decode},
    [DF_TYPE_IQ3_S] = {sizeof(block_iq3_s), 1.0f, iq3_s_decode},
    [DF_TYPE_IQ1_S] = {sizeof(block_iq1_s), 0.125f, iq1_s_decode},
    [DF_TYPE_IQ1_M] = {sizeof(block_iq1_m), 0.125f, iq1_m_decode},
};

const quant_iq_info *quant_iq_get(int type) {
    if (type < 0 || type >= DF_TYPE_COUNT || !iq_info[type].decode) return NULL;
    return &iq_info[type];
}

/* d * ls first, then the power-of-two factor, then the value: the same
 * roundings as ggml's d * (0.5 + s) * 0.25 * grid (scaling by 2^k commutes
 * with rounding), so the floats are bit-identical. */
static void iq_grid_to_float(const void *src, float *dst, int64_t n, int type) {
    const quant_iq_info *t = &iq_info[type];
    quant_iq_block B;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        t->decode((const uint8_t *)src + (size_t)i * t->bs, &B);
        for (int g = 0; g < 16; g++) {
            float dl = B.d * (float)B.ls[g] * t->factor;
            for (int j = 0; j < 16; j++) dst[16 * g + j] = dl * (float)B.q[16 * g + j];
        }
    }
}

static void iq_grid_vec_dot(int64_t n, const void *w, const void *x, float *out, int type) {
    const quant_iq_info *t = &iq_info[type];
    const block_q8_K *b = x;
    quant_iq_block B;
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        t->decode((const uint8_t *)w + (size_t)i * t->bs, &B);
        int isum = 0;
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += B.q[16 * g + j] * b[i].qs[16 * g + j];
            isum += B.ls[g] * s;
        }
        sum += (B.d * b[i].d) * (float)isum;
    }
    *out = t->factor * sum;
}

#define IQ_GRID_FNS(pfx, id)                                                                                   \
    static void pfx##_to_float(const void *src, float *dst, int64_t n) { iq_grid_to_float(src, dst, n, id); } \
    static void pfx##_vec_dot(int64_t n, const void *w, const void *x, float *out) { iq_grid_vec_dot(n, w, x, out, id); }
IQ_GRID_FNS(iq2_xxs, DF_TYPE_IQ2_XXS)
IQ_GRID_FNS(iq2_xs, DF_TYPE_IQ2_XS)
IQ_GRID_FNS(iq2_s, DF_TYPE_IQ2_S)
IQ_GRID_FNS(iq3_xxs, DF_TYPE_IQ3_XXS)
IQ_GRID_FNS(iq3_s, DF_TYPE_IQ3_S)
IQ_GRID_FNS(iq1_s, DF_TYPE_IQ1_S)
IQ_GRID_FNS(iq1_m, DF_TYPE_IQ1_M)
#undef IQ_GRID_FNS



void quant_iq_fill(quant_traits *t) {
    t[DF_TYPE_IQ4_NL] = QUANT_REF_ENTRY("iq4_nl", QK4_NL, sizeof(block_iq4_nl), DF_TYPE_Q8_0, iq4_nl);
    t[DF_TYPE_IQ4_XS] = QUANT_REF_ENTRY("iq4_xs", QK_K, sizeof(block_iq4_xs), DF_TYPE_Q8_K, iq4_xs);
    t[DF_TYPE_IQ2_XXS] = QUANT_REF_ENTRY("iq2_xxs", QK_K, sizeof(block_iq2_xxs), DF_TYPE_Q8_K, iq2_xxs);
    t[DF_TYPE_IQ2_XS] = QUANT_REF_ENTRY("iq2_xs", QK_K, sizeof(block_iq2_xs), DF_TYPE_Q8_K, iq2_xs);
    t[DF_TYPE_IQ2_S] = QUANT_REF_ENTRY("iq2_s", QK_K, sizeof(block_iq2_s), DF_TYPE_Q8_K, iq2_s);
    t[DF_TYPE_IQ3_XXS] = QUANT_REF_ENTRY("iq3_xxs", QK_K, sizeof(block_iq3_xxs), DF_TYPE_Q8_K, iq3_xxs);
    t[DF_TYPE_IQ3_S] = QUANT_REF_ENTRY("iq3_s", QK_K, sizeof(block_iq3_s), DF_TYPE_Q8_K, iq3_s);
    t[DF_TYPE_IQ1_S] = QUANT_REF_ENTRY("iq1_s", QK_K, sizeof(block_iq1_s), DF_TYPE_Q8_K, iq1_s);
    t[DF_TYPE_IQ1_M] = QUANT_REF_ENTRY("iq1_m", QK_K, sizeof(block_iq1_m), DF_TYPE_Q8_K, iq1_m);
}
