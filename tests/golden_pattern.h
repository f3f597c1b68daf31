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

/* Blocks in a golden row: 2, or GOLDEN_NBLK_BIG for the types whose codes
 * index a table, so that every entry (every tq1_0 byte) is decoded. */
#define GOLDEN_NBLK_BIG 8
static int golden_nblk(int type) {
    switch (type) {
    case DF_TYPE_IQ4_NL: case DF_TYPE_IQ4_XS: case DF_TYPE_TQ1_0: case DF_TYPE_TQ2_0: return GOLDEN_NBLK_BIG;
    default: return 2;
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
