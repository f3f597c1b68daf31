/*
 * amx_q8_0.h - the AMX int8 gemms of q8_0, MXFP4, q4_0 and IQ4_NL weights
 * x q8_0 activations, written once against six tile operations that the including file
 * defines (kern_amx.c, through amx_x86.h: the hardware instructions;
 * amx_gemm.c and kern_amx_model.c: amx_tile.h's software model):
 *   AMX_CFG(cfg)            ldtilecfg          AMX_RELEASE()   tilerelease
 *   AMX_LOAD(t, p, stride)  tileloadd          AMX_ZERO(t)     tilezero
 *   AMX_DPBSSD(c, a, b)     tdpbssd            AMX_STORE(t, p, stride) tilestored
 * (tile numbers are literal constants, as the intrinsics require), plus
 * AMX_F16(h) (f16 bits -> float), the functions' names AMX_Q8_0_GEMM,
 * AMX_MXFP4_GEMM, AMX_Q4_0_GEMM, AMX_IQ4_NL_GEMM and AMX_Q8_0_GEMM_PACKED /
 * AMX_MXFP4_GEMM_PACKED (the same gemms on pack.h's layout), their
 * attributes AMX_FN_ATTR and linkage AMX_GEMM_LINKAGE (static or empty),
 * how the tile state is passed (AMX_STATE_*), and optionally faster
 * versions of its helpers with the same results: AMX_DECODE, AMX_DX and
 * AMX_ACC / AMX_ACC_LOAD / AMX_ACC_STORE / AMX_SCALE.
 *
 * DESIGN
 * - Output tiles of 16 tokens x 16 weight rows (C is tokens x rows). A q8_0
 *   block takes one tdpbssd: A = 16 tokens x the block's 32 activation
 *   bytes, loaded straight from the activation rows (stride = their row
 *   stride, no packing), B = the same block of 16 weight rows in the VNNI
 *   layout (8 rows x 4 bytes per weight row), transposed once per row tile
 *   and block (amx_q8_0_decode) and used by every token of the call. C =
 *   16 x 16 int32, stored and scaled into float after each block.
 * - The order of the AVX2 and AVX-512 q8_0 tiles: per output, the exact
 *   integer sum of each block times (dw * dx), one fma per block in block
 *   order. So the AMX gemm gives their bits (tests/test_amx.c), keeps
 *   quant.h's contract although small products (generation) go to the
 *   AVX-512 tile, and switching it on changes no logits. The float
 *   epilogue, not the tile unit, bounds the speed.
 * - Blocking: rows in tiles of 16, K in chunks of AMX_KC blocks decoded
 *   once and used by all the call's tokens (up to 512 at a time, in groups
 *   of 16; matmul gives this gemm 512-token calls, gemm_cols), so a row
 *   tile's weights are read from memory once. The float accumulators of
 *   one row tile and its tokens live on the stack across the chunks; a run
 *   keeps its 16 x 16 in registers. Tiles 0 and 1 take
 *   C of two consecutive blocks (each pair is stored, the next pair issued
 *   to the tile unit, then the stored pair scaled, so the two overlap), 2,
 *   3 their A, 4, 5 their B.
 * - Packed weights (pack.h) are a row tile's B operand as they lie: the
 *   packed decoder only takes the 128 offset back off and converts the
 *   scales (no transpose); everything else is shared.
 * - MXFP4, q4_0 and IQ4_NL are the same gemm with another decoder: a
 *   block's 32 4-bit codes become their int8 values (MXFP4's E2M1 values
 *   doubled, -12..12; q4_0's code - 8; IQ4_NL's grid, -127..113), the
 *   scale a float (MXFP4's E8M0 exponent: 2^(e-128), quant_e8m0_half), and
 *   the rest - one tdpbssd per block, fma(float(sum), dw * dx) - is
 *   q8_0's, which is also the order of their AVX-512 tiles.
 * - Edge tiles (fewer than 16 rows or tokens) get their own configuration
 *   (rows, colsb) so no load reads past the last row; the configuration is
 *   loaded again only when the tile shape changes. Lanes past the edge
 *   compute on zero scales and are never written out.
 */
#ifndef AMX_Q8_0_GEMM
#error "define AMX_Q8_0_GEMM and the tile operations before including amx_q8_0.h"
#endif

#define AMX_KC 32 /* blocks per K chunk */
#define AMX_CG 32 /* token groups (of 16) a row tile serves at a time */

/* One block of a row tile, decoded: b[k][4r + i] = byte 4k + i of row r's block, dw[r] its scale (0 past the
 * tile's rows). */
struct amx_q8_0_wk {
    uint8_t b[8][64];
    float dw[16];
};
typedef struct amx_q8_0_wk amx_q8_0_wk;

#ifndef AMX_DECODE
/* Blocks b0..b0+kc of rows 0..rn of w into o[0..kc). */
AMX_FN_ATTR static void amx_q8_0_decode(const uint8_t *w, size_t ws, int rn, int64_t b0, int kc, amx_q8_0_wk *o) {
    for (int b = 0; b < kc; b++) {
        memset(&o[b], 0, sizeof o[b]);
        for (int r = 0; r < rn; r++) {
            const block_q8_0 *wb = (const block_q8_0 *)(const void *)(w + (size_t)r * ws) + b0 + b;
            for (int k = 0; k < 8; k++) memcpy(&o[b].b[k][4 * r], wb->qs + 4 * k, 4);
            o[b].dw[r] = AMX_F16(wb->d);
        }
    }
}
#define AMX_DECODE amx_q8_0_decode
#endif

#ifndef AMX_DX
/* dx[c] = the scale of block b of token c (0 for c >= cn). */
AMX_FN_ATTR static void amx_q8_0_dx(const uint8_t *x, size_t xs, int cn, int64_t b, float dx[16]) {
    for (int c = 0; c < 16; c++)
        dx[c] = c < cn ? AMX_F16(((const block_q8_0 *)(const void *)(x + (size_t)c * xs))[b].d) : 0.0f;
}
#define AMX_DX amx_q8_0_dx
#endif

#ifndef AMX_SCALE
/* The accumulators of one 16 x 16 tile while a run scales into them (the hardware keeps them in registers). */
typedef struct {
    float v[16][16];
} amx_q8_0_acc;
#define AMX_ACC amx_q8_0_acc
AMX_FN_ATTR static inline void amx_q8_0_acc_load(amx_q8_0_acc *a, float acc[16][16]) { memcpy(a->v, acc, sizeof a->v); }
AMX_FN_ATTR static inline void amx_q8_0_acc_store(const amx_q8_0_acc *a, float acc[16][16]) { memcpy(acc, a->v, sizeof a->v); }
/* a[c][r] += float(cs[c][r]) * (dw[r] * dx[c]) for a whole 16 x 16 tile (the AVX2 tile's fma). */
AMX_FN_ATTR static inline void amx_q8_0_scale(amx_q8_0_acc *a, const int32_t cs[16][16], const float dw[16],
                                             const float dx[16]) {
    for (int c = 0; c < 16; c++)
        for (int r = 0; r < 16; r++) a->v[c][r] = fmaf((float)cs[c][r], dw[r] * dx[c], a->v[c][r]);
}
#define AMX_ACC_LOAD amx_q8_0_acc_load
#define AMX_ACC_STORE amx_q8_0_acc_store
#define AMX_SCALE amx_q8_0_scale
#endif

/* Blocks b and b + 1 (if b + 1 < kc) into C tiles 0 and 1. */
#define AMX_Q8_0_ISSUE(bi)                                                                                          \
    do {                                                                                                            \
        const uint8_t *xb_ = x + (size_t)(b0 + (bi)) * sizeof(block_q8_0) + offsetof(block_q8_0, qs);               \
        AMX_ZERO(0);                                                                                                \
        AMX_LOAD(2, xb_, xs);                                                                                       \
        AMX_LOAD(4, wk[bi].b, 64);                                                                                  \
        AMX_DPBSSD(0, 2, 4);                                                                                        \
        if ((bi) + 1 < kc) {                                                                                        \
            AMX_ZERO(1);                                                                                            \
            AMX_LOAD(3, xb_ + sizeof(block_q8_0), xs);                                                              \
            AMX_LOAD(5, wk[(bi) + 1].b, 64);                                                                        \
            AMX_DPBSSD(1, 3, 5);                                                                                    \
        }                                                                                                           \
    } while (0)

/* One tile of cn tokens (x: their rows) over the kc blocks from b0; dxt[b] = their block scales. */
AMX_FN_ATTR static void amx_q8_0_run(const uint8_t *x, size_t xs, int64_t b0, const amx_q8_0_wk *wk, int kc,
                                     float dxt[][16], float acc[16][16] AMX_STATE_PARAM) {
    int32_t cs[2][16][16];
    memset(cs, 0, sizeof cs); /* rows/columns past the tile are never stored: keep them finite */
    AMX_ACC a;
    AMX_ACC_LOAD(&a, acc);
    AMX_Q8_0_ISSUE(0);
    for (int b = 0; b < kc; b += 2) {
        AMX_STORE(0, cs[0], 64);
        if (b + 1 < kc) AMX_STORE(1, cs[1], 64);
        if (b + 2 < kc) AMX_Q8_0_ISSUE(b + 2);
        AMX_SCALE(&a, cs[0], wk[b].dw, dxt[b]);
        if (b + 1 < kc) AMX_SCALE(&a, cs[1], wk[b + 1].dw, dxt[b + 1]);
    }
    AMX_ACC_STORE(&a, acc);
}
#undef AMX_Q8_0_ISSUE

/* Blocks b0..b0+kc of a packed group (pack.h: per block 16 f16 scales, then 8 lines of 16 rows' 4 bytes, + 128)
 * into o: the lines are the B tile's rows already. Not inlined: inlined, its vector loop changed the gemm's
 * register use and left a ymm16+ write after a vzeroupper (tests/cli/upper_state.sh). */
AMX_FN_ATTR __attribute__((noinline)) static void amx_q8_0_decode_packed(const uint8_t *w, int64_t b0, int kc, amx_q8_0_wk *o) {
    for (int b = 0; b < kc; b++) {
        const uint8_t *g = w + (size_t)(b0 + b) * 16 * sizeof(block_q8_0);
        for (int r = 0; r < 16; r++) {
            uint16_t h;
            memcpy(&h, g + 2 * r, 2);
            o[b].dw[r] = AMX_F16(h);
        }
        for (int k = 0; k < 8; k++)
            for (int q = 0; q < 64; q++) o[b].b[k][q] = (uint8_t)(g[32 + 64 * k + q] ^ 0x80);
    }
}

/* The 16 values of the 4-bit codes, by type (here so that the AMX files need nothing of quant.c's:
 * tests/cli/seams.sh, no cycle; the tests hold them to the scalar reference): MXFP4's E2M1 values doubled
 * (ggml's kvalues_mxfp4), IQ4_NL's non-linear grid (kvalues_iq4nl), q4_0's code - 8. */
static const int8_t amx_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
static const int8_t amx_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const int8_t amx_q4_0_values[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

/* Blocks b0..b0+kc of rows 0..rn of w in the file's layout of a 32-element block of 4-bit codes (MXFP4: an E8M0
 * exponent byte; q4_0, IQ4_NL: an f16 scale; then 16 bytes, element j < 16 the low nibble of byte j, 16 + j the
 * high one) into o: the codes' values by vals, the scale as a float. */
AMX_FN_ATTR static void amx_nib_decode(const uint8_t *w, size_t ws, int rn, int64_t b0, int kc, amx_q8_0_wk *o,
                                       const int8_t vals[16], int e8m0) {
    const size_t bs = e8m0 ? sizeof(block_mxfp4) : sizeof(block_q4_0), head = e8m0 ? 1 : 2;
    for (int b = 0; b < kc; b++) {
        memset(&o[b], 0, sizeof o[b]);
        for (int r = 0; r < rn; r++) {
            const uint8_t *blk = w + (size_t)r * ws + (size_t)(b0 + b) * bs, *qs = blk + head;
            for (int j = 0; j < 16; j++) {
                o[b].b[j / 4][4 * r + j % 4] = (uint8_t)vals[qs[j] & 0x0F];
                o[b].b[4 + j / 4][4 * r + j % 4] = (uint8_t)vals[qs[j] >> 4];
            }
            uint16_t h;
            memcpy(&h, blk, 2);
            o[b].dw[r] = e8m0 ? quant_e8m0_half(blk[0]) : AMX_F16(h);
        }
    }
}

/* Blocks b0..b0+kc of a packed MXFP4 group (pack.h: per block 16 exponents, then 4 lines of 16 rows' 4 bytes of
 * codes, the low nibbles elements 4k.., the high ones 16 + 4k..) into o. Not inlined, as amx_q8_0_decode_packed. */
AMX_FN_ATTR __attribute__((noinline)) static void amx_mxfp4_decode_packed(const uint8_t *w, int64_t b0, int kc,
                                                                          amx_q8_0_wk *o) {
    for (int b = 0; b < kc; b++) {
        const uint8_t *g = w + (size_t)(b0 + b) * 16 * sizeof(block_mxfp4);
        for (int r = 0; r < 16; r++) o[b].dw[r] = quant_e8m0_half(g[r]);
        for (int k = 0; k < 4; k++)
            for (int q = 0; q < 64; q++) {
                const uint8_t v = g[16 + 64 * k + q];
                o[b].b[k][q] = (uint8_t)amx_mxfp4_values[v & 0x0F];
                o[b].b[4 + k][q] = (uint8_t)amx_mxfp4_values[v >> 4];
            }
    }
}

/* What amx_q8_0_gemm_any multiplies: the weights' type and layout. */
enum { AMX_Q8_0_ROWS, AMX_Q8_0_PACKED, AMX_MXFP4_ROWS, AMX_MXFP4_PACKED, AMX_Q4_0_ROWS, AMX_IQ4_NL_ROWS };

/* Rows in tiles of 16, K in chunks of AMX_KC blocks, tokens in groups of 16; kind: the weights' type and
 * layout (packed: w holds nr / 16 packed groups, pack.h; else rows in the file's layout). */
AMX_FN_ATTR static inline __attribute__((always_inline)) void amx_q8_0_gemm_any(int kind, int64_t n, const void *w,
                                                                                 size_t ws, int nr, const void *x,
                                                                                 size_t xs, int nc, float *y,
                                                                                 size_t ldy) {
    AMX_STATE_DECL;
    amx_tilecfg cfg;
    amx_q8_0_wk wk[AMX_KC];
    float acc[AMX_CG][16][16];
    float dxt[AMX_KC][16];
    int cur_rn = 0, cur_cn = 0;
    const int64_t nb = n / 32;
    const uint8_t *W = w, *X = x;
    for (int C0 = 0; C0 < nc; C0 += 16 * AMX_CG) {
        const int ncg = (nc - C0 + 15) / 16 < AMX_CG ? (nc - C0 + 15) / 16 : AMX_CG;
        for (int r0 = 0; r0 < nr; r0 += 16) {
            const int rn = nr - r0 < 16 ? nr - r0 : 16;
            memset(acc, 0, sizeof(acc[0]) * (size_t)ncg);
            for (int64_t k0 = 0; k0 < nb; k0 += AMX_KC) {
                const int kc = nb - k0 < AMX_KC ? (int)(nb - k0) : AMX_KC;
                const uint8_t *wr = W + (size_t)r0 * ws;
                if (kind == AMX_Q8_0_PACKED) amx_q8_0_decode_packed(wr, k0, kc, wk);
                else if (kind == AMX_MXFP4_ROWS) amx_nib_decode(wr, ws, rn, k0, kc, wk, amx_mxfp4_values, 1);
                else if (kind == AMX_Q4_0_ROWS) amx_nib_decode(wr, ws, rn, k0, kc, wk, amx_q4_0_values, 0);
                else if (kind == AMX_IQ4_NL_ROWS) amx_nib_decode(wr, ws, rn, k0, kc, wk, amx_iq4nl_values, 0);
                else if (kind == AMX_MXFP4_PACKED) amx_mxfp4_decode_packed(wr, k0, kc, wk);
                else AMX_DECODE(wr, ws, rn, k0, kc, wk);
                for (int g = 0; g < ncg; g++) {
                    const int c0 = C0 + 16 * g, cn = nc - c0 < 16 ? nc - c0 : 16;
                    const uint8_t *xg = X + (size_t)c0 * xs;
                    if (rn != cur_rn || cn != cur_cn) {
                        amx_cfg_pairs(&cfg, cn, rn, 32); /* tokens x rows over a block's 32 bytes */
                        AMX_CFG(&cfg);
                        cur_rn = rn;
                        cur_cn = cn;
                    }
                    for (int b = 0; b < kc; b++) AMX_DX(xg, xs, cn, k0 + b, dxt[b]);
                    amx_q8_0_run(xg, xs, k0, wk, kc, dxt, acc[g] AMX_STATE_ARG);
                }
            }
            for (int g = 0; g < ncg; g++) {
                const int c0 = C0 + 16 * g, cn = nc - c0 < 16 ? nc - c0 : 16;
                for (int c = 0; c < cn; c++)
                    for (int r = 0; r < rn; r++)
                        y[(size_t)(c0 + c) * ldy + (size_t)(r0 + r)] = acc[g][c][r];
            }
        }
    }
    if (cur_rn) AMX_RELEASE();
    AMX_STATE_END;
}

/* quant_gemm_fn, the file's layout (gemm) and pack.h's (gemm_packed: nr a multiple of 16). */
AMX_FN_ATTR AMX_GEMM_LINKAGE void AMX_Q8_0_GEMM(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,
                                                int nc, float *y, size_t ldy) {
    amx_q8_0_gemm_any(AMX_Q8_0_ROWS, n, w, ws, nr, x, xs, nc, y, ldy);
}
AMX_FN_ATTR AMX_GEMM_LINKAGE void AMX_Q8_0_GEMM_PACKED(int64_t n, const void *w, size_t ws, int nr, const void *x,
                                                       size_t xs, int nc, float *y, size_t ldy) {
    amx_q8_0_gemm_any(AMX_Q8_0_PACKED, n, w, ws, nr, x, xs, nc, y, ldy);
}
AMX_FN_ATTR AMX_GEMM_LINKAGE void AMX_MXFP4_GEMM(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,
                                                 int nc, float *y, size_t ldy) {
    amx_q8_0_gemm_any(AMX_MXFP4_ROWS, n, w, ws, nr, x, xs, nc, y, ldy);
}
AMX_FN_ATTR AMX_GEMM_LINKAGE void AMX_MXFP4_GEMM_PACKED(int64_t n, const void *w, size_t ws, int nr, const void *x,
                                                        size_t xs, int nc, float *y, size_t ldy) {
    amx_q8_0_gemm_any(AMX_MXFP4_PACKED, n, w, ws, nr, x, xs, nc, y, ldy);
}
AMX_FN_ATTR AMX_GEMM_LINKAGE void AMX_Q4_0_GEMM(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,
                                                int nc, float *y, size_t ldy) {
    amx_q8_0_gemm_any(AMX_Q4_0_ROWS, n, w, ws, nr, x, xs, nc, y, ldy);
}
AMX_FN_ATTR AMX_GEMM_LINKAGE void AMX_IQ4_NL_GEMM(int64_t n, const void *w, size_t ws, int nr, const void *x,
                                                  size_t xs, int nc, float *y, size_t ldy) {
    amx_q8_0_gemm_any(AMX_IQ4_NL_ROWS, n, w, ws, nr, x, xs, nc, y, ldy);
}
