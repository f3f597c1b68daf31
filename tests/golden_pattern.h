/*
 * golden_pattern.h - the fixed block patterns of tests/test_quant.c's golden
 * layout tests, shared with tests/ggml_golden.c, which decodes the same
 * bytes with ggml's own code to produce the committed checksums.
 *
 * DESIGN
 * Blocks are filled with a fixed byte sequence; then each type's scale
 * fields are overwritten with small exact values so that the decoded
 * values are finite and exact. The caller supplies the block size in bytes
 * and an f32 -> f16 conversion (ours in the test, ggml's in the generator),
 * so this header needs nothing but quant.h's type ids and block layouts.
 */
#ifndef DF_GOLDEN_PATTERN_H
#define DF_GOLDEN_PATTERN_H

#include "quant.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef uint16_t (*golden_f2h_fn)(float);

/* Blocks in a golden row: 2, or more for the types whose codes index a
 * table, so that every entry is decoded: every tq1_0 byte, every nvfp4
 * UE4M3 scale byte (numbered through the row as well), and every grid
 * entry of the i-quants (their indices are numbered through the row by
 * golden_fill: 2048 iq1 entries at 32 per block need 64 blocks). */
#define GOLDEN_NBLK_BIG 64
static int golden_nblk(int type) {
    switch (type) {
    case DF_TYPE_IQ4_NL: case DF_TYPE_IQ4_XS: case DF_TYPE_TQ1_0: case DF_TYPE_TQ2_0: case DF_TYPE_IQ2_XXS:
    case DF_TYPE_IQ3_S: return 8;
    case DF_TYPE_IQ3_XXS: return 4;
    case DF_TYPE_IQ2_XS: return 16;
    case DF_TYPE_IQ2_S: return 32;
    case DF_TYPE_IQ1_S: case DF_TYPE_IQ1_M: case DF_TYPE_NVFP4: return 64;
    default: return 2;
    }
}

/* Grid index k (numbered through the row) of an i-quant block b into its
 * bit fields, leaving the sign and scale bits of the pattern alone. */
static void golden_grid_indices(int type, uint8_t *p, int b) {
    for (int k = 0; k < 64; k++) {
        const int ib = k / 8 % 8, l = k % 4;
        switch (type) {
        case DF_TYPE_IQ2_XXS: if (k < 32) p[2 + 8 * (k / 4) + k % 4] = (uint8_t)(32 * b + k); break;
        case DF_TYPE_IQ2_XS: if (k < 32) { /* uint16 qs[k]: low 9 bits */
                unsigned v = p[2 + 2 * k] | (unsigned)p[3 + 2 * k] << 8, idx = (unsigned)(32 * b + k) & 511u;
                v = (v & ~511u) | idx;
                p[2 + 2 * k] = (uint8_t)v; p[3 + 2 * k] = (uint8_t)(v >> 8);
            } break;
        case DF_TYPE_IQ2_S: if (k < 32) { /* qs[k] low 8 bits, qh[k/4] bits 2l.. the high 2 */
                unsigned idx = (unsigned)(32 * b + k) & 1023u;
                p[2 + k] = (uint8_t)idx;
                p[2 + 64 + k / 4] = (uint8_t)((p[2 + 64 + k / 4] & ~(3u << (2 * l))) | (idx >> 8) << (2 * l));
            } break;
        case DF_TYPE_IQ3_XXS: p[2 + k] = (uint8_t)(64 * b + k); break;
        case DF_TYPE_IQ3_S: { /* qs[k] low 8 bits, bit k%8 of qh[k/8] the 9th */
                unsigned idx = (unsigned)(64 * b + k) & 511u;
                p[2 + k] = (uint8_t)idx;
                p[2 + 64 + ib] = (uint8_t)((p[2 + 64 + ib] & ~(1u << (k % 8))) | (idx >> 8) << (k % 8));
            } break;
        case DF_TYPE_IQ1_S: if (k < 32) { /* qs[k], bits 3l.. of qh[k/4] */
                unsigned idx = (unsigned)(32 * b + k) & 2047u, o = 2 + 32 + 2 * (k / 4);
                unsigned h = p[o] | (unsigned)p[o + 1] << 8;
                h = (h & ~(7u << (3 * l))) | (idx >> 8) << (3 * l);
                p[2 + k] = (uint8_t)idx; p[o] = (uint8_t)h; p[o + 1] = (uint8_t)(h >> 8);
            } break;
        case DF_TYPE_IQ1_M: if (k < 32) { /* qs[k], bits 0-2 / 4-6 of qh[k/2] */
                unsigned idx = (unsigned)(32 * b + k) & 2047u, sh = 4 * (k % 2);
                p[k] = (uint8_t)idx;
                p[32 + k / 2] = (uint8_t)((p[32 + k / 2] & ~(7u << sh)) | (idx >> 8) << sh);
            } break;
        default: break;
        }
    }
}

/* nblk blocks of type (bs bytes each) into buf. */
static void golden_fill(int type, size_t bs, uint8_t *buf, int nblk, golden_f2h_fn f2h) {
    for (size_t k = 0; k < bs * (size_t)nblk; k++) buf[k] = (uint8_t)(k * 167u + 13u);
    for (int b = 0; b < nblk; b++) {
        uint8_t *p = buf + (size_t)b * bs;
        uint16_t d = f2h(0.0625f * (1.0f + 0.0625f * (float)b)), m = f2h(-0.015625f * (float)(b + 1));
        uint16_t dmin = f2h(0.015625f * (float)(b + 1));
        switch (type) {
        case DF_TYPE_Q4_0: case DF_TYPE_Q5_0: case DF_TYPE_Q8_0: case DF_TYPE_Q1_0: case DF_TYPE_Q2_0:
        case DF_TYPE_IQ4_NL: case DF_TYPE_IQ4_XS:
            memcpy(p, &d, 2);
            break;
        case DF_TYPE_TQ2_0: memcpy(p + offsetof(block_tq2_0, d), &d, 2); break;
        case DF_TYPE_IQ2_XXS: case DF_TYPE_IQ2_XS: case DF_TYPE_IQ2_S: case DF_TYPE_IQ3_XXS: case DF_TYPE_IQ3_S:
        case DF_TYPE_IQ1_S:
            memcpy(p, &d, 2);
            golden_grid_indices(type, p, b);
            break;
        case DF_TYPE_NVFP4:
            for (int k = 0; k < 4; k++) p[k] = (uint8_t)((4 * b + k) * 167 + 13);
            break;
        case DF_TYPE_IQ1_M: /* d lives in the top nibbles of the four scale words */
            golden_grid_indices(type, p, b);
            for (int k = 0; k < 4; k++) p[48 + 2 * k + 1] = (uint8_t)((p[48 + 2 * k + 1] & 0x0F) | ((d >> (4 * k)) & 0xF) << 4);
            break;
        case DF_TYPE_TQ1_0:
            /* qs bytes numbered across blocks, so that GOLDEN_NBLK_BIG blocks hold every byte value */
            for (size_t k = 0; k < sizeof(((block_tq1_0 *)0)->qs); k++)
                p[k] = (uint8_t)(((size_t)b * sizeof(((block_tq1_0 *)0)->qs) + k) * 167u + 13u);
            memcpy(p + offsetof(block_tq1_0, d), &d, 2);
            break;
        case DF_TYPE_Q4_1: case DF_TYPE_Q5_1: case DF_TYPE_Q8_1: memcpy(p, &d, 2); memcpy(p + 2, &m, 2); break;
        case DF_TYPE_Q2_K: memcpy(p + offsetof(block_q2_K, d), &d, 2); memcpy(p + offsetof(block_q2_K, dmin), &dmin, 2); break;
        case DF_TYPE_Q3_K: memcpy(p + offsetof(block_q3_K, d), &d, 2); break;
        case DF_TYPE_Q4_K: case DF_TYPE_Q5_K: memcpy(p, &d, 2); memcpy(p + 2, &dmin, 2); break;
        case DF_TYPE_Q6_K: memcpy(p + offsetof(block_q6_K, d), &d, 2); break;
        case DF_TYPE_MXFP4: p[0] = (uint8_t)(124 + 3 * b); break; /* E8M0: half scale 2^-4, 2^-1 */
        case DF_TYPE_Q8_K: {
            float fd = 0.03125f + 0.001f * (float)b;
            memcpy(p, &fd, 4);
            break;
        }
        default: break;
        }
    }
}

/* Activation pattern in the vec type: values kept in [-127, 127] as our
 * quantizers produce; q8_K bsums made consistent with qs. */
static void golden_fill_act(int vt, size_t bs, uint8_t *buf, int nblk, golden_f2h_fn f2h) {
    golden_fill(vt, bs, buf, nblk, f2h);
    for (int b = 0; b < nblk; b++) {
        uint8_t *p = buf + (size_t)b * bs;
        if (vt == DF_TYPE_Q8_K) {
            block_q8_K *k = (block_q8_K *)(void *)p;
            for (int i = 0; i < QK_K; i++)
                if (k->qs[i] == -128) k->qs[i] = -127;
            for (int j = 0; j < 16; j++) {
                int s = 0;
                for (int l = 0; l < 16; l++) s += k->qs[16 * j + l];
                k->bsums[j] = (int16_t)s;
            }
        } else {
            size_t off = vt == DF_TYPE_Q8_0 ? 2 : 4;
            for (size_t i = 0; i < 32; i++)
                if (p[off + i] == 0x80) p[off + i] = 0x81;
        }
    }
}

/* Input for the quantizer golden test: GOLDEN_QN floats, uniform in [-1, 1)
 * from a fixed LCG, times a magnitude that changes every 32 elements over
 * 2^-20 .. 2^20, with an all-zero block, a block of signed zeros and a block
 * of exact halves (rounding ties for q2_0 and mxfp4). */
#define GOLDEN_QN 1024
static void golden_quant_input(float *x) {
    uint32_t s = 12345;
    for (int i = 0; i < GOLDEN_QN; i++) {
        s = s * 1103515245u + 12345u;
        float u = (float)(s >> 8) * 0x1p-23f - 1.0f;
        int c = i / 32;
        float mag = (float)(1 << (c % 21)) * 0x1p-10f;
        if (c % 2) mag = c % 3 ? mag * 1024.0f : 1.0f / (mag * 1024.0f);
        x[i] = u * mag;
        if (c == 5) x[i] = 0.0f;
        if (c == 6) x[i] = (i & 1) ? -0.0f : 0.0f;
        if (c == 7) x[i] = (float)((i % 9) - 4) * 0.5f;
    }
}

/* FNV-1a of n bytes. */
static uint64_t golden_hash(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

#endif
