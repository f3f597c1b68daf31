/*
 * amx_q4_K.h - the AMX int8 gemms of the K-quants q4_K, q5_K and q6_K x q8_K
 * activations, written once against the tile operations of amx_q8_0.h
 * (AMX_CFG, AMX_RELEASE, AMX_LOAD, AMX_ZERO, AMX_STORE; the including file
 * defines them) plus AMX_DPBSUD(c, a, b) (tdpbsud: signed A bytes x unsigned
 * B bytes), AMX_F16, the functions' names AMX_Q4_K_GEMM, AMX_Q5_K_GEMM,
 * AMX_Q6_K_GEMM, and AMX_Q4_K_GEMM_PACKED / AMX_Q5_K_GEMM_PACKED /
 * AMX_Q6_K_GEMM_PACKED (on pack.h's layout) and the AMX_FN_ATTR / AMX_GEMM_LINKAGE / AMX_STATE_* conventions,
 * and optionally faster versions of its helpers with the same results
 * (AMXK_DECODE, AMXK_SACC, AMXK_SZERO, AMXK_SUB, AMXK_FINISH, AMXK6_FINISH).
 *
 * DESIGN
 * - Output tiles of 16 tokens x 16 weight rows (C is tokens x rows). A =
 *   16 tokens x one sub-block of the q8_K activations (32 elements; q6_K's
 *   16), loaded straight from their rows (stride = the activation row
 *   stride, no packing). B = the same sub-block of 16 weight rows as
 *   unsigned bytes (q4_K's nibbles, 0..15; q5_K's 5-bit values, 0..31;
 *   q6_K's 6-bit values, 0..63, the offset of 32 taken off below) in the
 *   VNNI layout, decoded once per row tile and super-block (amxk_decode) and
 *   used by every token group. q4_K and q5_K share the header fields (d,
 *   dmin, the 12 bytes of scales) and so everything but the decoding.
 * - The K-quant order (kern_avx2.c's kq_tile, kern_avx512.c's t5_kmin):
 *   per super-block and (token, row) the exact integer sums
 *   S = sum_j sc_j * dot_j (the 8 sub-block products, one tdpbsud each,
 *   scaled in int32) and M = sum_j m_j * (bsums of sub-block j), then
 *   accS += float(S) * (d * dy), accM += float(M) * (-dmin * dy), and the
 *   result is accS + accM. So the AMX gemm gives the AVX-512 tile's bits
 *   (tests/test_amx.c) and small products (generation) can stay there.
 * - q6_K keeps t5_koff's (and the packed q6_K tile's) order: 16 sub-blocks
 *   of 16 (a tdpbsud of K = 16 each: the scales change every 16 elements),
 *   P0 = the even sub-blocks' scaled products - 32 x sum_{j<8} sc_j * bsum_j,
 *   P1 = the odd ones' - 32 x sum_{j>=8} sc_j * bsum_j, exact in int32; then
 *   acc0 += float(P0) * (d * dy), acc1 likewise, and the result acc0 + acc1
 *   (the same two accumulators as q4_K's S and M).
 * - Tiles 0, 1: C of two sub-blocks; 2, 3: their A; 4, 5: their B. Each
 *   pair is stored, the next pair issued to the tile unit, and then the
 *   stored pair scaled, so the tile unit and the epilogue overlap.
 * - Blocking: rows in tiles of 16, K in chunks of AMXK_KC super-blocks,
 *   each chunk decoded once and used by all the call's tokens (up to 512,
 *   in groups of 16; matmul gives this gemm 512-token calls, gemm_cols), so
 *   a row tile's weights are read from memory once; the float accumulators
 *   of one row tile and its tokens live on the stack across the chunks.
 */
#ifndef AMX_Q4_K_GEMM
#error "define AMX_Q4_K_GEMM and the tile operations before including amx_q4_K.h"
#endif

#define AMXK_KC 4 /* super-blocks per K chunk */
#define AMXK_CG 32 /* token groups (of 16) a row tile serves at a time */

/* One super-block of a row tile, decoded: b[j][k][4r + i] = value 32j + 4k + i of row r (0..15), and per row the
 * sub-block scales, the min pairs (m_j in both int16 halves, for the bsum pairs) and d, -dmin as floats
 * (all 0 past the tile's rows). q6_K: b6[j][k][4r + i] = value 16j + 4k + i, its 16 scales in sc, the scale
 * pairs (sc_2p low, sc_2p+1 high int16) in mn[p], no dmin. */
struct amxk_wk {
    union {
        uint8_t b[8][8][64];
        uint8_t b6[16][4][64];
    };
    int32_t sc[16][16];
    int32_t mn[8][16];
    float d[16], ndmin[16];
};
typedef struct amxk_wk amxk_wk;

/* A row's super-block i of the type (q4_K or q5_K; their d, dmin and scales sit alike). */
AMX_FN_ATTR static inline const block_q4_K *amxk_head(int type, const uint8_t *row, int64_t i) {
    const size_t bs = type == DF_TYPE_Q5_K ? sizeof(block_q5_K) : sizeof(block_q4_K);
    return (const block_q4_K *)(const void *)(row + (size_t)i * bs);
}

/* The row-tile metadata of super-block i (shared by the plain and the fast decoders). */
AMX_FN_ATTR static void amxk_meta(int type, const uint8_t *w, size_t ws, int rn, int64_t i, amxk_wk *o) {
    memset(o->sc, 0, sizeof o->sc);
    memset(o->mn, 0, sizeof o->mn);
    memset(o->d, 0, sizeof o->d);
    memset(o->ndmin, 0, sizeof o->ndmin);
    for (int r = 0; r < rn; r++) {
        const block_q4_K *a = amxk_head(type, w + (size_t)r * ws, i);
        uint32_t u[4];
        quant_k4_unpack(a->scales, u);
        uint8_t s8[16];
        memcpy(s8, u, 16); /* scales 0..7, then mins 0..7 */
        for (int j = 0; j < 8; j++) {
            o->sc[j][r] = s8[j];
            o->mn[j][r] = (int32_t)((uint32_t)s8[8 + j] | (uint32_t)s8[8 + j] << 16);
        }
        o->d[r] = AMX_F16(a->d);
        o->ndmin[r] = -AMX_F16(a->dmin);
    }
}

#ifndef AMXK_DECODE
/* Super-block i of rows 0..rn of w into o. Element e = 64k + l: the low nibble of qs[32k + l] (l < 32) or
 * the high one of qs[32k + l - 32]; q5_K adds bit 2k (l < 32) or 2k + 1 of qh[l % 32] as bit 4. */
AMX_FN_ATTR static void amxk_decode(int type, const uint8_t *w, size_t ws, int rn, int64_t i, amxk_wk *o) {
    memset(o->b, 0, sizeof o->b);
    for (int r = 0; r < rn; r++) {
        const uint8_t *row = w + (size_t)r * ws;
        const uint8_t *qs = type == DF_TYPE_Q5_K ? ((const block_q5_K *)(const void *)row)[i].qs
                                                 : ((const block_q4_K *)(const void *)row)[i].qs;
        for (int e = 0; e < QK_K; e++) {
            const int k = e / 64, l = e % 64;
            uint8_t q = l < 32 ? qs[32 * k + l] & 0x0F : qs[32 * k + l - 32] >> 4;
            if (type == DF_TYPE_Q5_K)
                q |= (uint8_t)(((((const block_q5_K *)(const void *)row)[i].qh[l % 32] >> (2 * k + l / 32)) & 1) << 4);
            o->b[e / 32][(e % 32) / 4][4 * r + e % 4] = q;
        }
    }
    amxk_meta(type, w, ws, rn, i, o);
}
#define AMXK_DECODE amxk_decode
#endif

#ifndef AMXK_SACC
/* The integer sums of one super-block of a 16 x 16 tile: S (scaled products) and M (min products). */
typedef struct {
    int32_t s[16][16];
} amxk_s;
#define AMXK_SACC amxk_s
AMX_FN_ATTR static inline void amxk_szero(amxk_s *s) { memset(s, 0, sizeof *s); }
#define AMXK_SZERO amxk_szero
/* s[c][r] += cs[c][r] * sc[r] */
AMX_FN_ATTR static inline void amxk_sub(amxk_s *s, const int32_t cs[16][16], const int32_t sc[16]) {
    for (int c = 0; c < 16; c++)
        for (int r = 0; r < 16; r++) s->s[c][r] += cs[c][r] * sc[r];
}
#define AMXK_SUB amxk_sub
/* M from the tokens' bsums and the rows' mins, then the float accumulation of S and M (the K-quant order). */
AMX_FN_ATTR static inline void amxk_finish(const amxk_s *s, const amxk_wk *wk, const uint8_t *x, size_t xs, int cn,
                                           int64_t i, float accs[16][16], float accm[16][16]) {
    for (int c = 0; c < 16; c++) {
        const block_q8_K *xb = c < cn ? (const block_q8_K *)(const void *)(x + (size_t)c * xs) + i : NULL;
        const float dy = xb ? xb->d : 0.0f;
        for (int r = 0; r < 16; r++) {
            int32_t m = 0;
            for (int j = 0; j < 8 && xb; j++) m += (wk->mn[j][r] & 0xFFFF) * (xb->bsums[2 * j] + xb->bsums[2 * j + 1]);
            accs[c][r] = fmaf((float)s->s[c][r], wk->d[r] * dy, accs[c][r]);
            accm[c][r] = fmaf((float)m, wk->ndmin[r] * dy, accm[c][r]);
        }
    }
}
#define AMXK_FINISH amxk_finish
#endif


/* Super-block i of a packed q4_K or q5_K group (pack.h) into o: line 8p + k's low nibbles are sub-block 2p's B tile
 * row k, its high ones sub-block 2p + 1's; q5_K's qh line k (between the scales and the nibble lines) gives them
 * bits 2p and 2p + 1 as bit 4, byte for byte; the scales come transposed (byte j of row r at 16j + r). Not
 * inlined, as amx_q8_0_decode_packed. */
#define AMXK_Q4_K_PACKED (-DF_TYPE_Q4_K)
#define AMXK_Q5_K_PACKED (-DF_TYPE_Q5_K)
#define AMXK_Q6_K_PACKED (-DF_TYPE_Q6_K)
AMX_FN_ATTR __attribute__((noinline)) static void amxk_decode_packed(int q5, const uint8_t *w, int64_t i, amxk_wk *o) {
    const size_t bs = q5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
    const uint8_t *g = w + (size_t)i * 16 * bs, *t = g + 64, *qh = g + 256, *qs = g + (q5 ? 768 : 256);
    for (int p = 0; p < 4; p++)
        for (int k = 0; k < 8; k++)
            for (int q = 0; q < 64; q++) {
                const uint8_t v = qs[64 * (8 * p + k) + q], h = q5 ? qh[64 * k + q] : 0;
                o->b[2 * p][k][q] = (uint8_t)((v & 0x0F) | ((h >> (2 * p)) & 1) << 4);
                o->b[2 * p + 1][k][q] = (uint8_t)((v >> 4) | ((h >> (2 * p + 1)) & 1) << 4);
            }
    for (int r = 0; r < 16; r++) {
        uint8_t sc[12];
        for (int j = 0; j < 12; j++) sc[j] = t[16 * j + r];
        uint32_t u[4];
        quant_k4_unpack(sc, u);
        uint8_t s8[16];
        memcpy(s8, u, 16); /* scales 0..7, then mins 0..7 (as amxk_meta) */
        for (int j = 0; j < 8; j++) {
            o->sc[j][r] = s8[j];
            o->mn[j][r] = (int32_t)((uint32_t)s8[8 + j] | (uint32_t)s8[8 + j] << 16);
        }
        uint16_t d, dmin;
        memcpy(&d, g + 2 * r, 2);
        memcpy(&dmin, g + 32 + 2 * r, 2);
        o->d[r] = AMX_F16(d);
        o->ndmin[r] = -AMX_F16(dmin);
    }
}

/* q6_K. Its row tile's metadata: the 16 signed scales, their pairs and d of each row (0 past rn); sc(r, j) reads
 * scale j of row r from the file's block or the packed group's transposed scales. */
AMX_FN_ATTR static void amxk6_meta(const int8_t *sc, size_t sc_row, size_t sc_j, const uint8_t *d, size_t d_row,
                                   int rn, amxk_wk *o) {
    memset(o->sc, 0, sizeof o->sc);
    memset(o->mn, 0, sizeof o->mn);
    memset(o->d, 0, sizeof o->d);
    memset(o->ndmin, 0, sizeof o->ndmin);
    for (int r = 0; r < rn; r++) {
        for (int j = 0; j < 16; j++) o->sc[j][r] = sc[(size_t)r * sc_row + (size_t)j * sc_j];
        for (int p = 0; p < 8; p++)
            o->mn[p][r] = (int32_t)((uint32_t)(uint16_t)o->sc[2 * p][r] | (uint32_t)(uint16_t)o->sc[2 * p + 1][r] << 16);
        uint16_t h;
        memcpy(&h, d + (size_t)r * d_row, 2);
        o->d[r] = AMX_F16(h);
    }
}

/* Super-block i of rows 0..rn of w (the file's q6_K layout) into o. Element e = 128h + 32m + l (l < 32): the low
 * (m < 2) or high nibble of ql[64h + 32(m & 1) + l], bits 2m..2m+1 of qh[32h + l] above it. */
AMX_FN_ATTR static void amxk6_decode(const uint8_t *w, size_t ws, int rn, int64_t i, amxk_wk *o) {
    memset(o->b6, 0, sizeof o->b6);
    for (int r = 0; r < rn; r++) {
        const block_q6_K *a = (const block_q6_K *)(const void *)(w + (size_t)r * ws) + i;
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, m = (e % 128) / 32, l = e % 32;
            const uint8_t lo = a->ql[64 * h + 32 * (m & 1) + l];
            const uint8_t q = (uint8_t)((m < 2 ? lo & 0x0F : lo >> 4) | ((a->qh[32 * h + l] >> (2 * m)) & 3) << 4);
            o->b6[e / 16][(e % 16) / 4][4 * r + e % 4] = q;
        }
    }
    const block_q6_K *a0 = (const block_q6_K *)(const void *)w + i;
    amxk6_meta(a0->scales, ws, 1, (const uint8_t *)&a0->d, ws, rn, o);
}

/* Super-block i of a packed q6_K group (pack.h: 16 x d, the scales transposed, 32 lines of ql, 16 of qh) into o.
 * Line k of half h - ql lines 16h + k and 16h + 8 + k, qh line 8h + k - holds for m = 0..3 elements
 * 128h + 32m + 4k.. of each row: sub-block 8h + 2m + k / 4's B tile row k % 4. */
AMX_FN_ATTR __attribute__((noinline)) static void amxk6_decode_packed(const uint8_t *w, int64_t i, amxk_wk *o) {
    const uint8_t *g = w + (size_t)i * 16 * sizeof(block_q6_K), *ql = g + 288, *qh = g + 288 + 2048;
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 8; k++) {
            const uint8_t *a = ql + 64 * (16 * h + k), *b = ql + 64 * (16 * h + 8 + k), *hb = qh + 64 * (8 * h + k);
            for (int q = 0; q < 64; q++) {
                o->b6[8 * h + 0 + k / 4][k % 4][q] = (uint8_t)((a[q] & 0x0F) | ((hb[q] << 4) & 0x30));
                o->b6[8 * h + 2 + k / 4][k % 4][q] = (uint8_t)((b[q] & 0x0F) | ((hb[q] << 2) & 0x30));
                o->b6[8 * h + 4 + k / 4][k % 4][q] = (uint8_t)((a[q] >> 4) | (hb[q] & 0x30));
                o->b6[8 * h + 6 + k / 4][k % 4][q] = (uint8_t)((b[q] >> 4) | ((hb[q] >> 2) & 0x30));
            }
        }
    amxk6_meta((const int8_t *)(g + 32), 1, 16, g, 2, 16, o);
}

#ifndef AMXK6_FINISH
/* P0, P1 less 32 x the scaled activation sums of sub-blocks 0..7 and 8..15, then the float accumulation. */
AMX_FN_ATTR static inline void amxk6_finish(const AMXK_SACC *s0, const AMXK_SACC *s1, const amxk_wk *wk,
                                            const uint8_t *x, size_t xs, int cn, int64_t i, float acc0[16][16],
                                            float acc1[16][16]) {
    for (int c = 0; c < cn; c++) {
        const block_q8_K *xb = (const block_q8_K *)(const void *)(x + (size_t)c * xs) + i;
        int32_t p0[16], p1[16];
        memcpy(p0, s0->s[c], sizeof p0);
        memcpy(p1, s1->s[c], sizeof p1);
        for (int r = 0; r < 16; r++)
            for (int j = 0; j < 16; j++) (j < 8 ? p0 : p1)[r] -= 32 * wk->sc[j][r] * xb->bsums[j];
        for (int r = 0; r < 16; r++) {
            acc0[c][r] = fmaf((float)p0[r], wk->d[r] * xb->d, acc0[c][r]);
            acc1[c][r] = fmaf((float)p1[r], wk->d[r] * xb->d, acc1[c][r]);
        }
    }
}
#define AMXK6_FINISH amxk6_finish
#endif

/* Super-block i of one tile: its sub-blocks (kb bytes each: 32, q6_K's 16; B tiles 16 * kb bytes apart in wk->b)
 * in pairs through C tiles 0 and 1, each scaled into S (q6_K: the even ones into P0, the odd ones into P1). */
#define AMXK_ISSUE(j)                                                                                               \
    do {                                                                                                            \
        AMX_ZERO(0);                                                                                                \
        AMX_ZERO(1);                                                                                                \
        AMX_LOAD(2, xq + (size_t)kb * (j), xs);                                                                     \
        AMX_LOAD(3, xq + (size_t)kb * ((j) + 1), xs);                                                               \
        AMX_LOAD(4, bt + (size_t)16 * kb * (j), 64);                                                                \
        AMX_LOAD(5, bt + (size_t)16 * kb * ((j) + 1), 64);                                                          \
        AMX_DPBSUD(0, 2, 4);                                                                                        \
        AMX_DPBSUD(1, 3, 5);                                                                                        \
    } while (0)

AMX_FN_ATTR static inline __attribute__((always_inline)) void amxk_run(const int q6, const uint8_t *x, size_t xs,
                                                                        int cn, int64_t i, const amxk_wk *wk,
                                                                        float acc0[16][16],
                                                                        float acc1[16][16] AMX_STATE_PARAM) {
    const int kb = q6 ? 16 : 32, nsub = QK_K / kb;
    int32_t cs[2][16][16];
    memset(cs, 0, sizeof cs); /* rows/columns past the tile are never stored: keep them finite */
    const uint8_t *xq = x + (size_t)i * sizeof(block_q8_K) + offsetof(block_q8_K, qs), *bt = &wk->b[0][0][0];
    AMXK_SACC s0, s1;
    AMXK_SZERO(&s0);
    if (q6) AMXK_SZERO(&s1);
    AMXK_ISSUE(0);
    for (int j = 0; j < nsub; j += 2) {
        AMX_STORE(0, cs[0], 64);
        AMX_STORE(1, cs[1], 64);
        if (j + 2 < nsub) AMXK_ISSUE(j + 2);
        AMXK_SUB(&s0, cs[0], wk->sc[j]);
        if (q6) AMXK_SUB(&s1, cs[1], wk->sc[j + 1]);
        else AMXK_SUB(&s0, cs[1], wk->sc[j + 1]);
    }
    if (q6) AMXK6_FINISH(&s0, &s1, wk, x, xs, cn, i, acc0, acc1);
    else AMXK_FINISH(&s0, wk, x, xs, cn, i, acc0, acc1);
}
#undef AMXK_ISSUE

/* amxk_run for each kind, as functions of their own: q4_K/q5_K keep one accumulator tile in registers, and
 * neither sees the other's register pressure (q6_K's two tiles take all 32). */
AMX_FN_ATTR static void amxk_run_k45(const uint8_t *x, size_t xs, int cn, int64_t i, const amxk_wk *wk,
                                     float acc0[16][16], float acc1[16][16] AMX_STATE_PARAM) {
    amxk_run(0, x, xs, cn, i, wk, acc0, acc1 AMX_STATE_PASS);
}
AMX_FN_ATTR static void amxk_run_k6(const uint8_t *x, size_t xs, int cn, int64_t i, const amxk_wk *wk,
                                    float acc0[16][16], float acc1[16][16] AMX_STATE_PARAM) {
    amxk_run(1, x, xs, cn, i, wk, acc0, acc1 AMX_STATE_PASS);
}

/* quant_gemm_fn for the type: rows in tiles of 16, K in chunks of AMXK_KC super-blocks decoded once and used by
 * the tokens of the call in groups of 16 (up to 16 * AMXK_CG at a time), so a row tile's weights are read once. */
AMX_FN_ATTR static inline __attribute__((always_inline)) void amxk_gemm(int type, int64_t n, const void *w, size_t ws,
                                                                         int nr, const void *x, size_t xs, int nc,
                                                                         float *y, size_t ldy) {
    AMX_STATE_DECL;
    amx_tilecfg cfg;
    amxk_wk wk[AMXK_KC];
    float acc[AMXK_CG][2][16][16];
    int cur_rn = 0, cur_cn = 0;
    const int q6 = type == DF_TYPE_Q6_K || type == AMXK_Q6_K_PACKED;
    const int64_t nb = n / QK_K;
    const uint8_t *W = w, *X = x;
    for (int C0 = 0; C0 < nc; C0 += 16 * AMXK_CG) {
        const int ncg = (nc - C0 + 15) / 16 < AMXK_CG ? (nc - C0 + 15) / 16 : AMXK_CG;
        for (int r0 = 0; r0 < nr; r0 += 16) {
            const int rn = nr - r0 < 16 ? nr - r0 : 16;
            const uint8_t *wr = W + (size_t)r0 * ws;
            memset(acc, 0, sizeof(acc[0]) * (size_t)ncg);
            for (int64_t k0 = 0; k0 < nb; k0 += AMXK_KC) {
                const int kc = nb - k0 < AMXK_KC ? (int)(nb - k0) : AMXK_KC;
                for (int b = 0; b < kc; b++) {
                    if (type == AMXK_Q4_K_PACKED || type == AMXK_Q5_K_PACKED)
                        amxk_decode_packed(type == AMXK_Q5_K_PACKED, wr, k0 + b, &wk[b]);
                    else if (type == AMXK_Q6_K_PACKED) amxk6_decode_packed(wr, k0 + b, &wk[b]);
                    else if (type == DF_TYPE_Q6_K) amxk6_decode(wr, ws, rn, k0 + b, &wk[b]);
                    else AMXK_DECODE(type, wr, ws, rn, k0 + b, &wk[b]);
                }
                for (int g = 0; g < ncg; g++) {
                    const int c0 = C0 + 16 * g, cn = nc - c0 < 16 ? nc - c0 : 16;
                    if (rn != cur_rn || cn != cur_cn) {
                        amx_cfg_pairs(&cfg, cn, rn, q6 ? 16 : 32); /* tokens x rows over a sub-block's bytes */
                        AMX_CFG(&cfg);
                        cur_rn = rn;
                        cur_cn = cn;
                    }
                    for (int b = 0; b < kc; b++) {
                        (q6 ? amxk_run_k6 : amxk_run_k45)(X + (size_t)c0 * xs, xs, cn, k0 + b, &wk[b], acc[g][0],
                                                          acc[g][1] AMX_STATE_ARG);
                    }
                }
            }
            for (int g = 0; g < ncg; g++) {
                const int c0 = C0 + 16 * g, cn = nc - c0 < 16 ? nc - c0 : 16;
                for (int c = 0; c < cn; c++)
                    for (int r = 0; r < rn; r++)
                        y[(size_t)(c0 + c) * ldy + (size_t)(r0 + r)] = acc[g][0][c][r] + acc[g][1][c][r];
            }
        }
    }
    if (cur_rn) AMX_RELEASE();
    AMX_STATE_END;
}

AMX_FN_ATTR AMX_GEMM_LINKAGE void AMX_Q4_K_GEMM(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,
                                                int nc, float *y, size_t ldy) {
    amxk_gemm(DF_TYPE_Q4_K, n, w, ws, nr, x, xs, nc, y, ldy);
}

AMX_FN_ATTR AMX_GEMM_LINKAGE void AMX_Q5_K_GEMM(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,
                                                int nc, float *y, size_t ldy) {
    amxk_gemm(DF_TYPE_Q5_K, n, w, ws, nr, x, xs, nc, y, ldy);
}

/* The q4_K and q5_K gemms on pack.h's layout (gemm_packed: nr a multiple of 16). */
AMX_FN_ATTR AMX_GEMM_LINKAGE void AMX_Q4_K_GEMM_PACKED(int64_t n, const void *w, size_t ws, int nr, const void *x,
                                                       size_t xs, int nc, float *y, size_t ldy) {
    amxk_gemm(AMXK_Q4_K_PACKED, n, w, ws, nr, x, xs, nc, y, ldy);
}

AMX_FN_ATTR AMX_GEMM_LINKAGE void AMX_Q5_K_GEMM_PACKED(int64_t n, const void *w, size_t ws, int nr, const void *x,
                                                       size_t xs, int nc, float *y, size_t ldy) {
    amxk_gemm(AMXK_Q5_K_PACKED, n, w, ws, nr, x, xs, nc, y, ldy);
}

AMX_FN_ATTR AMX_GEMM_LINKAGE void AMX_Q6_K_GEMM(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,
                                                int nc, float *y, size_t ldy) {
    amxk_gemm(DF_TYPE_Q6_K, n, w, ws, nr, x, xs, nc, y, ldy);
}

/* The q6_K gemm on pack.h's layout (gemm_packed: nr a multiple of 16). */
AMX_FN_ATTR AMX_GEMM_LINKAGE void AMX_Q6_K_GEMM_PACKED(int64_t n, const void *w, size_t ws, int nr, const void *x,
                                                       size_t xs, int nc, float *y, size_t ldy) {
    amxk_gemm(AMXK_Q6_K_PACKED, n, w, ws, nr, x, xs, nc, y, ldy);
}
