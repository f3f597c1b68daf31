/*
 * quant_isa.h - internal interface between quant.c (the traits table and the
 * scalar reference kernels) and the per-instruction-set kernel files
 * (kern_avx2.c, kern_avx512.c, kern_neon.c).
 *
 * DESIGN
 * quant.c owns one table per instruction set. Each table starts as a copy of
 * the scalar reference table; the ISA's fill function then overwrites the
 * entries (vec_dot, to_float, from_float, gemm, and the float kernels
 * dot_rows, axpy_rows, exp_sum, swiglu) it has a faster version of. A kernel
 * file therefore only implements what pays off and silently inherits the
 * scalar code for the rest (gemm: NULL, matmul then calls vec_dot per pair).
 * The AVX-512 table is built on top of the AVX2 one (every AVX-512 CPU has
 * AVX2), so it inherits AVX2 kernels it does not override, gemm included.
 * A gemm must keep quant.h's contract: each output bit-identical however
 * the product is tiled (tests/test_matmul.c checks it for every table).
 *
 * Every SIMD kernel must compute the same per-block integer sums as the
 * scalar reference and apply the scales the same way; only the order of the
 * float accumulation may differ. SIMD activation quantizers (q8_0, q8_1,
 * q8_K, f16) must be bit-identical to the scalar ones, which is why those use
 * round-to-nearest-even on x * (127 / amax) exactly as the SIMD code does.
 *
 * Tests reach a given ISA's table through quant_traits_isa(), since the
 * DELTAFIN_ISA cap is read once at quant_init() (and no table above the cap
 * is built: the process behaves as on a CPU without those tiers).
 */
#ifndef DF_QUANT_ISA_H
#define DF_QUANT_ISA_H

#include "quant.h"

#include <string.h>

enum quant_isa {
    QUANT_ISA_SCALAR = 0,
    QUANT_ISA_AVX2 = 1,
    QUANT_ISA_AVX512 = 2,
    QUANT_ISA_NEON = 3,
    QUANT_ISA_AMX = 4, /* the best other table plus AMX tile gemms (amx_gemm.c) */
    QUANT_ISA_COUNT = 5
};

/* 1 if this build contains kernels for isa and the running CPU can execute them. */
int quant_isa_available(int isa);

/* Name of an ISA id ("scalar", "avx2", "avx512", "neon", "amx"); "?" for a bad id. */
const char *quant_isa_str(int isa);

/* Traits of a type for a specific ISA, or NULL when the type id is outside the
 * table or the ISA is not available here (nor above the DELTAFIN_ISA cap: quant.c init_tables). */
const quant_traits *quant_traits_isa(int type, int isa);

/* Fill functions: overwrite the entries of tab (DF_TYPE_COUNT entries, already
 * holding the scalar or lower-ISA kernels) with this ISA's kernels. Only called
 * when the CPU supports the ISA. */
#if defined(__x86_64__)
void kern_avx2_fill(quant_traits *tab);
void kern_avx512_fill(quant_traits *tab);
#endif
#if defined(__aarch64__)
void kern_neon_fill(quant_traits *tab);
#endif

/* AMX (amx_gemm.c, kern_amx.c): kern_amx_fill puts the AMX gemms into tab
 * (a copy of the best other table): on the hardware (model = 0), or on
 * amx_tile.h's software model (DELTAFIN_AMX=model): the hardware kernels'
 * code (model = 2, x86 with the AVX-512 table) or the gemm headers' plain
 * helpers (model = 1). kern_amx_hw_available
 * says whether the CPU and the OS allow the tiles (and asks Linux for the
 * tile state). amx_q8_0/mxfp4/q4_0/iq4_nl/q4_K/q5_K/q6_K_gemm_model are the model-backed gemms,
 * for the tests; amx_model_faults (amx_tile.h) counts the model faults their runs raised. */
void kern_amx_fill(quant_traits *tab, int model);
#if defined(__x86_64__)
void kern_amx_hw_fill(quant_traits *tab);
int kern_amx_hw_available(void);
/* kern_amx_model.c: the hardware kernels' code (amx_x86.h) on the model, where the AVX-512 table exists; what
 * kern_amx_fill puts in for model == 2, and its gemms for the tests. */
void kern_amx_model512_fill(quant_traits *tab);
void amx_q8_0_gemm_model512(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride, int nc,
                            float *y, size_t ldy);
void amx_mxfp4_gemm_model512(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride, int nc,
                             float *y, size_t ldy);
void amx_q4_0_gemm_model512(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride, int nc,
                            float *y, size_t ldy);
void amx_iq4_nl_gemm_model512(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride,
                              int nc, float *y, size_t ldy);
void amx_q4_K_gemm_model512(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride, int nc,
                            float *y, size_t ldy);
void amx_q5_K_gemm_model512(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride, int nc,
                            float *y, size_t ldy);
void amx_q6_K_gemm_model512(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride, int nc,
                            float *y, size_t ldy);
#endif
void amx_q8_0_gemm_model(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride, int nc,
                         float *y, size_t ldy);
void amx_mxfp4_gemm_model(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride, int nc,
                          float *y, size_t ldy);
void amx_mxfp4_packed_gemm_model(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride,
                                 int nc, float *y, size_t ldy);
void amx_q4_0_gemm_model(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride, int nc,
                         float *y, size_t ldy);
void amx_iq4_nl_gemm_model(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride, int nc,
                           float *y, size_t ldy);
void amx_q4_K_gemm_model(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride, int nc,
                         float *y, size_t ldy);
void amx_q5_K_gemm_model(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride, int nc,
                         float *y, size_t ldy);
void amx_q8_0_packed_gemm_model(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride,
                                int nc, float *y, size_t ldy);
void amx_q4_K_packed_gemm_model(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride,
                                int nc, float *y, size_t ldy);
void amx_q5_K_packed_gemm_model(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride,
                                int nc, float *y, size_t ldy);
void amx_q6_K_gemm_model(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride, int nc,
                         float *y, size_t ldy);
void amx_q6_K_packed_gemm_model(int64_t n, const void *w, size_t w_stride, int nr, const void *x, size_t x_stride,
                                int nc, float *y, size_t ldy);
/* An AMX gemm into a table entry, with the call shape matmul should give it: 16-row tiles, each serving up to
 * cols tokens (quant_traits.gemm_rows / gemm_cols). */
static inline void amx_put_gemm(quant_traits *e, quant_gemm_fn fn, int cols) {
    e->gemm = fn;
    e->gemm_rows = 16;
    e->gemm_cols = cols;
    e->gemm_packed = NULL; /* packed only where the caller puts the AMX gemm's packed version too */
}

/* The AMX gemms of one instantiation, by type in the order of amx_gemm_types: each type's gemm (into the table
 * by amx_put_gemm, 16-row calls of up to `cols` tokens) and its packed version (put only where the table packs
 * the type, i.e. had a packed gemm for it; NULL: the type has no packed AMX gemm). */
#define AMX_GEMM_TYPES 7
static const int amx_gemm_types[AMX_GEMM_TYPES] = {DF_TYPE_Q8_0, DF_TYPE_MXFP4, DF_TYPE_Q4_K, DF_TYPE_Q5_K,
                                                   DF_TYPE_Q6_K, DF_TYPE_Q4_0, DF_TYPE_IQ4_NL};
typedef struct {
    quant_gemm_fn gemm[AMX_GEMM_TYPES], packed[AMX_GEMM_TYPES];
} amx_gemm_set;
static inline void amx_put_gemms(quant_traits *t, const amx_gemm_set *s, int cols) {
    for (int i = 0; i < AMX_GEMM_TYPES; i++) {
        quant_traits *e = &t[amx_gemm_types[i]];
        quant_gemm_fn packed = e->gemm_packed; /* the table's: kept where the AMX set has none (same bits) */
        amx_put_gemm(e, s->gemm[i], cols);
        if (packed) e->gemm_packed = s->packed[i] ? s->packed[i] : packed;
    }
}

/* ggml_e8m0_to_fp32_half: the MXFP4 block scale 2^(e-128), exact (e >= 2 a
 * normal float with biased exponent e-1; e = 0, 1 the subnormals 2^-128 and
 * 2^-127). Inline for the kernels; df_e8m0_to_fp32_half wraps it. */
static inline float quant_e8m0_half(uint8_t e) {
    uint32_t u = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* IEEE half bits -> float, exact (df_fp16_to_fp32 wraps it; inline so the
 * portable AMX model kernels need no symbol of quant.c). NaN comes back
 * quiet with its payload, as F16C does; subnormals are man * 2^-24. */
static inline float quant_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (man ? 0x00400000u | (man << 13) : 0u);
    else if (exp != 0) u = sign | ((exp + 112u) << 23) | (man << 13);
    else {
        const float v = (float)man * 0x1p-24f;
        memcpy(&u, &v, 4);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A grid i-quant block (iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s,
 * iq1_m) decoded to integers: element e is d * factor * ls[e / 16] * q[e],
 * factor a power of two per type. Its dot with a q8_K block is therefore
 * factor * d * y.d * sum_g ls[g] * (integer sum of q * y over group g), the
 * same integer sums as ggml's vec_dot (iq1's +-1/8 delta is folded into q
 * as 8 * grid +- 1, factor 1/8). The x86 kernels (kern_x86.h) and the
 * NEON ones (kern_neon.c's iqn_*) decode in vectors to the same integer
 * sums. */
typedef struct {
    float d;
    int16_t ls[16];
    int8_t q[QK_K];
} quant_iq_block;
typedef void (*quant_iq_decode_fn)(const void *blk, quant_iq_block *out);
/* iq1_m's head, shared by every decoder: the scales ls of its sixteen
 * 16-element groups (3 bits each in the four 16-bit words of scales) and,
 * returned, its f16 d (the top nibbles of those words). */
static inline uint16_t quant_iq1_m_head(const block_iq1_m *b, int16_t ls[16]) {
    uint16_t sc[4];
    memcpy(sc, b->scales, 8);
    for (int ib = 0; ib < 8; ib++) {
        ls[2 * ib] = (int16_t)(2 * ((sc[ib / 2] >> (6 * (ib % 2))) & 7) + 1);
        ls[2 * ib + 1] = (int16_t)(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1);
    }
    return (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
}

typedef struct {
    size_t bs;     /* bytes per block */
    float factor;
    quant_iq_decode_fn decode;
} quant_iq_info;
/* The decoder of a grid i-quant type, or NULL for any other type. */
const quant_iq_info *quant_iq_get(int type);
/* A supported type's entry of the scalar reference table from its codec's three functions (PFX_to_float,
 * PFX_from_float, PFX_vec_dot), as quant_iq_fill and quant_lowbit_fill put them. */
#define QUANT_REF_ENTRY(nm, bl, sz, vt, pfx)                                                                     \
    (quant_traits){.name = nm, .blck = bl, .type_size = sz, .supported = 1, .vec_type = vt,                      \
                   .to_float = pfx##_to_float, .from_float = pfx##_from_float, .vec_dot = pfx##_vec_dot}
/* The i-quants' entries of the scalar reference table (quant_iq.c; quant.c calls it once, first). */
void quant_iq_fill(quant_traits *t);
/* The microscaled and 1-2-bit types' entries (quant_lowbit.c; called just after). */
void quant_lowbit_fill(quant_traits *t);

/* ggml_ue4m3_to_fp32: NVFP4's sub-block scale (unsigned, 4 exponent bits
 * with bias 7, 3 mantissa bits, bit 7 ignored) halved, as ggml keeps it to
 * pair with the doubled e2m1 table; 0 and 0x7F decode to 0. Exact. */
static inline float quant_ue4m3_half(uint8_t x) {
    if (x == 0 || x == 0x7F) return 0.0f;
    const unsigned e = (x >> 3) & 0xFu, m = x & 7u;
    if (e == 0) return (float)m * 0x1p-10f;
    uint32_t u = (e + 119u) << 23 | m << 20; /* (1 + m/8) * 2^(e - 8) */
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Decode the 6-bit scale and min of sub-block j (0..7) of a q4_K/q5_K block. */
static inline void quant_k4_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = (uint8_t)(s[j] & 63);
        *m = (uint8_t)(s[j + 4] & 63);
    } else {
        *sc = (uint8_t)((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* Decode the 16 signed 6-bit scales of a q3_K block (already minus 32). */
static inline void quant_k3_scales(const uint8_t *s, int8_t out[16]) {
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
        int hi = (s[8 + (j & 3)] >> (2 * (j >> 2))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* Word-parallel versions of the two decoders above, for SIMD kernels.
 * q4_K/q5_K: out[0..1] = the 8 scales (bytes), out[2..3] = the 8 mins. */
static inline void quant_k4_unpack(const uint8_t *s, uint32_t out[4]) {
    uint32_t w0, w1, w2;
    memcpy(&w0, s, 4);
    memcpy(&w1, s + 4, 4);
    memcpy(&w2, s + 8, 4);
    out[0] = w0 & 0x3f3f3f3fu;
    out[1] = (w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4);
    out[2] = w1 & 0x3f3f3f3fu;
    out[3] = ((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4);
}

/* q3_K: the 16 six-bit scales as bytes 0..63 (subtract 32 for the value). */
static inline void quant_k3_unpack(const uint8_t *s, uint32_t out[4]) {
    uint32_t w0, w1, w2;
    memcpy(&w0, s, 4);
    memcpy(&w1, s + 4, 4);
    memcpy(&w2, s + 8, 4);
    out[0] = (w0 & 0x0f0f0f0fu) | ((w2 & 0x03030303u) << 4);
    out[1] = (w1 & 0x0f0f0f0fu) | (((w2 >> 2) & 0x03030303u) << 4);
    out[2] = ((w0 >> 4) & 0x0f0f0f0fu) | (((w2 >> 4) & 0x03030303u) << 4);
    out[3] = ((w1 >> 4) & 0x0f0f0f0fu) | (((w2 >> 6) & 0x03030303u) << 4);
}

#endif
