/*
 * quant_bits.h - the bit-level helpers the scalar codecs share (quant.c,
 * quant_iq.c): float <-> bits, round to nearest even, clamped rounding, half
 * precision shorthands.
 */
#ifndef DF_QUANT_BITS_H
#define DF_QUANT_BITS_H

#include <stdint.h>
#include <string.h>

#include "quant.h"

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Round to nearest, ties to even. Exact for |v| < 2^22; callers keep v small
 * (qclamp below saturates first). Same result as SIMD round-to-nearest. */
static inline int rne(float v) {
    return (int)(f2u(v + 12582912.0f) & 0x007fffffu) - 0x00400000;
}

/* rne(v) clamped to [lo, hi]; NaN maps to lo. */
static inline int qclamp(float v, int lo, int hi) {
    if (!(v > (float)lo)) return lo;
    if (v > (float)hi) return hi;
    int r = rne(v);
    return r < lo ? lo : (r > hi ? hi : r);
}

/* f32 -> f16, round to nearest even (what df_fp32_to_fp16 answers). */
static inline uint16_t quant_f32_to_f16(float f) {
    uint32_t x = f2u(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* nan: quiet it, keep the top payload bits */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) { /* below 2^-14: subnormal half (or zero) */
        float v = u2f(ax) * 0x1p24f; /* exact: value in units of 2^-24 */
        float r = (v + 0x1p23f) - 0x1p23f;   /* round to integer, ties to even */
        return (uint16_t)(sign | (uint16_t)r); /* r == 1024 encodes 2^-14 */
    }
    uint32_t r = ax - 0x38000000u; /* rebias exponent 127 -> 15 */
    r = (r + 0x0fffu + ((r >> 13) & 1u)) >> 13;
    return (uint16_t)(sign | r);
}

#define H2F(h) quant_f16_to_f32(h)
#define F2H(f) quant_f32_to_f16(f)

#endif
