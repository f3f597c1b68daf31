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
 * attributes AMX_FN_ATTR and linkage AMX_GEMM_LINKAGE (static or empty), and how the tile state is passed (AMX_STATE_*).
 *
 * DESIGN
 * - Tiles: 16 weight rows x 16 tokens per output tile. A q8_0 block's two
 *   halves (elements 0..15 and 16..31) each take one tdpbssd: A = 16 rows
 *   x 16 bytes straight from the weights (stride = the row stride, no
 *   repacking: the bytes of a half-block are contiguous), B = the tokens'
 *   16 bytes in the VNNI layout (4 rows x 4 bytes per token, repacked per
 *   block into 256 bytes), C = 16 x 16 int32, zeroed before each block.
 *   Tiles 0, 1: C of the halves; 2, 3: A; 4, 5: B.
 * - Why per half-block: the AVX2 and AVX-512 q8_0 tiles accumulate, per
 *   output, two float sums (halves 0 and 1) of float(isum) * (dw * dx),
 *   one fma per block in block order, and return their sum. Doing the same
 *   here gives the same bits (tests/test_amx.c checks it), so the AMX gemm
 *   keeps quant.h's contract even when small products go to the AVX-512
 *   tile instead, and switching it on changes no logits. The cost: a
 *   tdpbssd uses K = 16 of its 64 bytes, and each block's C is stored and
 *   scaled in float (the epilogue, plain C loops the compiler vectorizes).
 * - Edge tiles (fewer than 16 rows or tokens) get their own configuration
 *   (rows, colsb) so no load reads past the last row; the configuration is
 *   loaded again only when the tile shape changes.
 * - Weights are read in the file's layout; repacking them once at load
 *   (and taking whole blocks per tdpbssd) is the next step for speed.
 */
#ifndef AMX_Q8_0_GEMM
#error "define AMX_Q8_0_GEMM and the tile operations before including amx_q8_0.h"
#endif

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

/* Block b of cn tokens in the VNNI layout: bv[h][k][4c + i] = x_c[16h + 4k + i]. */
AMX_FN_ATTR static void amx_q8_0_pack_b(const uint8_t *x, size_t xs, int cn, int64_t b, uint8_t bv[2][4][64]) {
    for (int c = 0; c < cn; c++) {
        const block_q8_0 *xb = (const block_q8_0 *)(const void *)(x + (size_t)c * xs) + b;
        for (int h = 0; h < 2; h++)
            for (int k = 0; k < 4; k++) memcpy(&bv[h][k][4 * c], xb->qs + 16 * h + 4 * k, 4);
    }
}

/* One rn x cn output tile over all n / 32 blocks. */
AMX_FN_ATTR static void amx_q8_0_tile(int64_t n, const uint8_t *w, size_t ws, int rn, const uint8_t *x, size_t xs, int cn,
                          float *y, size_t ldy AMX_STATE_PARAM) {
    float acc[2][16][16];
    int32_t cs[2][16][16];
    uint8_t bv[2][4][64];
    float dw[16], dx[16];
    memset(acc, 0, sizeof acc);
    memset(cs, 0, sizeof cs); /* columns past cn stay 0: the epilogue runs all 16 */
    memset(bv, 0, sizeof bv);
    memset(dx, 0, sizeof dx);
    const int64_t nb = n / 32;
    for (int64_t b = 0; b < nb; b++) {
        amx_q8_0_pack_b(x, xs, cn, b, bv);
        const uint8_t *wb = w + (size_t)b * sizeof(block_q8_0) + offsetof(block_q8_0, qs);
        AMX_ZERO(0);
        AMX_ZERO(1);
        AMX_LOAD(2, wb, ws);
        AMX_LOAD(3, wb + 16, ws);
        AMX_LOAD(4, bv[0], 64);
        AMX_LOAD(5, bv[1], 64);
        AMX_DPBSSD(0, 2, 4);
        AMX_DPBSSD(1, 3, 5);
        AMX_STORE(0, cs[0], 64);
        AMX_STORE(1, cs[1], 64);
        for (int r = 0; r < rn; r++) dw[r] = AMX_F16(((const block_q8_0 *)(const void *)(w + (size_t)r * ws))[b].d);
        for (int c = 0; c < cn; c++) dx[c] = AMX_F16(((const block_q8_0 *)(const void *)(x + (size_t)c * xs))[b].d);
        for (int h = 0; h < 2; h++)
            for (int r = 0; r < rn; r++)
                for (int c = 0; c < 16; c++) {
                    const float d = dw[r] * dx[c];
                    acc[h][r][c] = fmaf((float)cs[h][r][c], d, acc[h][r][c]);
                }
    }
    for (int c = 0; c < cn; c++)
        for (int r = 0; r < rn; r++) y[(size_t)c * ldy + (size_t)r] = acc[0][r][c] + acc[1][r][c];
}

/* quant_gemm_fn: nr x nc in tiles of 16 x 16, rows outermost. */
AMX_FN_ATTR AMX_GEMM_LINKAGE void AMX_Q8_0_GEMM(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                          size_t ldy) {
    AMX_STATE_DECL;
    amx_tilecfg cfg;
    int cur_rn = 0, cur_cn = 0;
    for (int r0 = 0; r0 < nr; r0 += 16) {
        const int rn = nr - r0 < 16 ? nr - r0 : 16;
        for (int c0 = 0; c0 < nc; c0 += 16) {
            const int cn = nc - c0 < 16 ? nc - c0 : 16;
            if (rn != cur_rn || cn != cur_cn) {
                amx_q8_0_cfg(&cfg, rn, cn);
                AMX_CFG(&cfg);
                cur_rn = rn;
                cur_cn = cn;
            }
            amx_q8_0_tile(n, (const uint8_t *)w + (size_t)r0 * ws, ws, rn, (const uint8_t *)x + (size_t)c0 * xs, xs,
                          cn, y + (size_t)c0 * ldy + (size_t)r0, ldy AMX_STATE_ARG);
        }
    }
    if (cur_rn) AMX_RELEASE();
    AMX_STATE_END;
}
