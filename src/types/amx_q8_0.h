/*
 * amx_q8_0.h - the AMX int8 gemm of q8_0 weights x q8_0 activations,
 * written once against six tile operations that the including file
 * defines (kern_amx.c: the hardware instructions; amx_gemm.c: amx_tile.h's
 * software model):
 *   AMX_CFG(cfg)            ldtilecfg          AMX_RELEASE()   tilerelease
 *   AMX_LOAD(t, p, stride)  tileloadd          AMX_ZERO(t)     tilezero
 *   AMX_DPBSSD(c, a, b)     tdpbssd            AMX_STORE(t, p, stride) tilestored
 * (tile numbers are literal constants, as the intrinsics require), plus
 * AMX_F16(h) (f16 bits -> float), the function's name AMX_Q8_0_GEMM, its
 * attributes AMX_FN_ATTR and linkage AMX_GEMM_LINKAGE (static or empty),
 * how the tile state is passed (AMX_STATE_*), and optionally
 * AMX_PACK_GROUP, AMX_DW_TABLE and AMX_ACC / AMX_ACC_LOAD / AMX_ACC_STORE /
 * AMX_SCALE (faster versions of amx_q8_0_pack_group, amx_q8_0_dw_table and
 * the accumulators, with the same results).
 *
 * DESIGN
 * - Output tiles of 16 weight rows x 16 tokens. A q8_0 block's two halves
 *   (elements 0..15 and 16..31) each take one tdpbssd: A = 16 rows x 16
 *   bytes straight from the weights (stride = the row stride, no
 *   repacking: a half-block's bytes are contiguous), B = the tokens' 16
 *   bytes in the VNNI layout (4 rows x 4 bytes per token), C = 16 x 16
 *   int32, stored and scaled into float after each block.
 * - Why per half-block: the AVX2 and AVX-512 q8_0 tiles accumulate, per
 *   output, two float sums (halves 0 and 1) of float(isum) * (dw * dx),
 *   one fma per block in block order, and return their sum. Doing the same
 *   here gives the same bits (tests/test_amx.c checks it), so the AMX gemm
 *   keeps quant.h's contract even though small products (generation) go
 *   to the AVX-512 tile instead, and switching it on changes no logits.
 *   The cost is a tdpbssd on K = 16 of its 64 bytes; the float epilogue,
 *   not the tile unit, is what bounds the speed.
 * - Blocking: the activations of up to 64 tokens and 32 blocks are packed
 *   once (the VNNI layout plus each block's 16 token scales as floats) and
 *   serve up to 64 weight rows (4 row tiles); the weight scales of a row
 *   tile are converted once per 32 blocks. The float accumulators of that
 *   64 x 64 region (two halves) live on the stack across the K chunks and
 *   are added into y at the end. Tiles 0 and 1 take C of two consecutive
 *   blocks (the tile unit works on the second while the first is scaled),
 *   2, 3 their A, 4, 5 their B.
 * - Edge tiles (fewer than 16 rows or tokens) get their own configuration
 *   (rows, colsb) so no load reads past the last row; the configuration is
 *   loaded again only when the tile shape changes. Lanes past the edge
 *   compute on zero scales and are never written out.
 */
#ifndef AMX_Q8_0_GEMM
#error "define AMX_Q8_0_GEMM and the tile operations before including amx_q8_0.h"
#endif

#define AMX_KC 32 /* blocks per K chunk */
#define AMX_RT 8  /* row tiles (of 16) per region */
#define AMX_CG 4  /* token groups (of 16) per region */

/* One block of 16 tokens, packed: bv[h][k][4c + i] = x_c[16h + 4k + i], dx[c] = x_c's scale (0 past the edge). */
struct amx_q8_0_pk {
    uint8_t bv[2][4][64];
    float dx[16];
};
typedef struct amx_q8_0_pk amx_q8_0_pk;

/* The configuration for an rn x cn output tile. */
AMX_FN_ATTR static void amx_q8_0_cfg(amx_tilecfg *cfg, int rn, int cn) {
    memset(cfg, 0, sizeof *cfg);
    cfg->palette = 1;
    for (int t = 0; t < 2; t++) { /* C: rn rows of cn int32 */
        cfg->rows[t] = (uint8_t)rn;
        cfg->colsb[t] = (uint16_t)(4 * cn);
    }
    for (int t = 2; t < 4; t++) { /* A: rn rows of 16 weight bytes */
        cfg->rows[t] = (uint8_t)rn;
        cfg->colsb[t] = 16;
    }
    for (int t = 4; t < 6; t++) { /* B: 4 rows of cn x 4 activation bytes */
        cfg->rows[t] = 4;
        cfg->colsb[t] = (uint16_t)(4 * cn);
    }
}

#ifndef AMX_PACK_GROUP
/* Blocks b0..b0+kc of cn <= 16 tokens into pk[0..kc). */
AMX_FN_ATTR static void amx_q8_0_pack_group(const uint8_t *x, size_t xs, int cn, int64_t b0, int kc, amx_q8_0_pk *pk) {
    for (int b = 0; b < kc; b++) {
        memset(&pk[b], 0, sizeof pk[b]);
        for (int c = 0; c < cn; c++) {
            const block_q8_0 *xb = (const block_q8_0 *)(const void *)(x + (size_t)c * xs) + b0 + b;
            for (int h = 0; h < 2; h++)
                for (int k = 0; k < 4; k++) memcpy(&pk[b].bv[h][k][4 * c], xb->qs + 16 * h + 4 * k, 4);
            pk[b].dx[c] = AMX_F16(xb->d);
        }
    }
}
#define AMX_PACK_GROUP amx_q8_0_pack_group
#endif

#ifndef AMX_DW_TABLE
/* dwt[b][r] = the scale of block b of row r (0 for r >= rn), w at the chunk's first block of the tile's first row. */
AMX_FN_ATTR static void amx_q8_0_dw_table(const uint8_t *w, size_t ws, int rn, int kc, float dwt[][16]) {
    for (int b = 0; b < kc; b++)
        for (int r = 0; r < 16; r++)
            dwt[b][r] = r < rn ? AMX_F16(((const block_q8_0 *)(const void *)(w + (size_t)r * ws))[b].d) : 0.0f;
}
#define AMX_DW_TABLE amx_q8_0_dw_table
#endif

#ifndef AMX_SCALE
/* The accumulators of one 16 x 16 tile while a run scales into them (the hardware keeps them in registers). */
typedef struct {
    float v[16][16];
} amx_q8_0_acc;
#define AMX_ACC amx_q8_0_acc
AMX_FN_ATTR static inline void amx_q8_0_acc_load(amx_q8_0_acc *a, float acc[16][16]) { memcpy(a->v, acc, sizeof a->v); }
AMX_FN_ATTR static inline void amx_q8_0_acc_store(const amx_q8_0_acc *a, float acc[16][16]) { memcpy(acc, a->v, sizeof a->v); }
/* a[r][c] += float(cs[r][c]) * (dw[r] * dx[c]) for a whole 16 x 16 tile (the AVX2 tile's fma). */
AMX_FN_ATTR static inline void amx_q8_0_scale(amx_q8_0_acc *a, const int32_t cs[16][16], const float dw[16],
                                             const float dx[16]) {
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) a->v[r][c] = fmaf((float)cs[r][c], dw[r] * dx[c], a->v[r][c]);
}
#define AMX_ACC_LOAD amx_q8_0_acc_load
#define AMX_ACC_STORE amx_q8_0_acc_store
#define AMX_SCALE amx_q8_0_scale
#endif

/* Blocks b and b + 1 (if b + 1 < kc) of one half into C tiles 0 and 1. */
#define AMX_Q8_0_ISSUE(b)                                                                                           \
    do {                                                                                                            \
        const uint8_t *wb_ = w + (size_t)(b) * sizeof(block_q8_0) + offsetof(block_q8_0, qs) + 16 * (size_t)h;      \
        AMX_ZERO(0);                                                                                                \
        AMX_LOAD(2, wb_, ws);                                                                                       \
        AMX_LOAD(4, pk[b].bv[h], 64);                                                                               \
        AMX_DPBSSD(0, 2, 4);                                                                                        \
        if ((b) + 1 < kc) {                                                                                         \
            AMX_ZERO(1);                                                                                            \
            AMX_LOAD(3, wb_ + sizeof(block_q8_0), ws);                                                              \
            AMX_LOAD(5, pk[(b) + 1].bv[h], 64);                                                                     \
            AMX_DPBSSD(1, 3, 5);                                                                                    \
        }                                                                                                           \
    } while (0)

/* One rn x cn tile over kc blocks of one half: w at the chunk's first block of its first row. Each pair of
 * blocks is stored, the next pair issued to the tile unit, and then the stored pair scaled, so the tile
 * unit and the float epilogue overlap. */
AMX_FN_ATTR static void amx_q8_0_run(const uint8_t *w, size_t ws, const amx_q8_0_pk *pk, int kc, int h,
                                     float dwt[][16], float acc[16][16] AMX_STATE_PARAM) {
    int32_t cs[2][16][16];
    memset(cs, 0, sizeof cs); /* rows/columns past the tile are never stored: keep them finite */
    AMX_ACC a;
    AMX_ACC_LOAD(&a, acc);
    AMX_Q8_0_ISSUE(0);
    for (int b = 0; b < kc; b += 2) {
        AMX_STORE(0, cs[0], 64);
        if (b + 1 < kc) AMX_STORE(1, cs[1], 64);
        if (b + 2 < kc) AMX_Q8_0_ISSUE(b + 2);
        AMX_SCALE(&a, cs[0], dwt[b], pk[b].dx);
        if (b + 1 < kc) AMX_SCALE(&a, cs[1], dwt[b + 1], pk[b + 1].dx);
    }
    AMX_ACC_STORE(&a, acc);
}
#undef AMX_Q8_0_ISSUE

/* quant_gemm_fn: nr x nc in regions of 64 x 64, K in chunks of AMX_KC blocks. */
AMX_FN_ATTR AMX_GEMM_LINKAGE void AMX_Q8_0_GEMM(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,
                                                int nc, float *y, size_t ldy) {
    AMX_STATE_DECL;
    amx_tilecfg cfg;
    amx_q8_0_pk pk[AMX_CG][AMX_KC];
    float acc[AMX_RT][AMX_CG][2][16][16];
    float dwt[AMX_KC][16];
    int cur_rn = 0, cur_cn = 0;
    const int64_t nb = n / 32;
    const uint8_t *W = w, *X = x;
    for (int R0 = 0; R0 < nr; R0 += 16 * AMX_RT) {
        const int nrt = (nr - R0 + 15) / 16 < AMX_RT ? (nr - R0 + 15) / 16 : AMX_RT;
        for (int C0 = 0; C0 < nc; C0 += 16 * AMX_CG) {
            const int ncg = (nc - C0 + 15) / 16 < AMX_CG ? (nc - C0 + 15) / 16 : AMX_CG;
            memset(acc, 0, sizeof acc);
            for (int64_t k0 = 0; k0 < nb; k0 += AMX_KC) {
                const int kc = nb - k0 < AMX_KC ? (int)(nb - k0) : AMX_KC;
                for (int g = 0; g < ncg; g++) {
                    const int c0 = C0 + 16 * g, cn = nc - c0 < 16 ? nc - c0 : 16;
                    AMX_PACK_GROUP(X + (size_t)c0 * xs, xs, cn, k0, kc, pk[g]);
                }
                for (int t = 0; t < nrt; t++) {
                    const int r0 = R0 + 16 * t, rn = nr - r0 < 16 ? nr - r0 : 16;
                    const uint8_t *wr = W + (size_t)r0 * ws + (size_t)k0 * sizeof(block_q8_0);
                    AMX_DW_TABLE(wr, ws, rn, kc, dwt);
                    for (int g = 0; g < ncg; g++) {
                        const int cn = nc - (C0 + 16 * g) < 16 ? nc - (C0 + 16 * g) : 16;
                        if (rn != cur_rn || cn != cur_cn) {
                            amx_q8_0_cfg(&cfg, rn, cn);
                            AMX_CFG(&cfg);
                            cur_rn = rn;
                            cur_cn = cn;
                        }
                        for (int h = 0; h < 2; h++) amx_q8_0_run(wr, ws, pk[g], kc, h, dwt, acc[t][g][h] AMX_STATE_ARG);
                    }
                }
            }
            for (int t = 0; t < nrt; t++)
                for (int g = 0; g < ncg; g++) {
                    const int r0 = R0 + 16 * t, rn = nr - r0 < 16 ? nr - r0 : 16;
                    const int c0 = C0 + 16 * g, cn = nc - c0 < 16 ? nc - c0 : 16;
                    for (int c = 0; c < cn; c++)
                        for (int r = 0; r < rn; r++)
                            y[(size_t)(c0 + c) * ldy + (size_t)(r0 + r)] = acc[t][g][0][r][c] + acc[t][g][1][r][c];
                }
        }
    }
    if (cur_rn) AMX_RELEASE();
    AMX_STATE_END;
}
