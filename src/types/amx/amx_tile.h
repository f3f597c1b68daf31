/*
 * amx_tile.h - the AMX tile configuration and a software model of the
 * tile instructions the AMX kernels use (amx_model.c implements it).
 *
 * DESIGN
 * The AMX kernels (amx_q8_0.h) are written once against six tile
 * operations (configure, load, zero, int8 dot product, store, release).
 * kern_amx.c binds them to the hardware instructions (ldtilecfg,
 * tileloadd, tilezero, tdpbssd, tilestored, tilerelease; compiled with
 * -mamx-tile -mamx-int8), amx_gemm.c to this model, so the same kernel
 * logic runs in the tests on every machine, with or without AMX.
 *
 * The model follows Intel's description (SDM vol. 2, "Intel AMX"):
 * - 8 tile registers of up to 16 rows x 64 bytes, palette 1; a 64-byte
 *   configuration gives each tile its rows (<= 16) and bytes per row
 *   (colsb <= 64); a tile is either fully unconfigured (0, 0) or neither
 *   is 0; tiles 8..15 and the reserved bytes must be 0; palette 0 releases
 *   (all tiles unconfigured). A bad configuration faults (#GP).
 * - tileloadd copies rows x colsb bytes from base + r * stride and zeroes
 *   the rest of the register; tilestored writes rows x colsb bytes.
 * - tdpbssd / tdpbusd / tdpbsud / tdpbuud: C[m][n] += sum over k < K/4,
 *   i < 4 of A[m][4k + i] * B[k][4n + i] (bytes signed or unsigned as the
 *   name says, int32 accumulation that wraps, no saturation), with K =
 *   A.colsb; it faults (#UD) unless C.rows == A.rows, C.colsb == B.colsb,
 *   A.colsb == 4 * B.rows, all three tiles configured and distinct.
 *   Columns of C past colsb / 4 and rows past rows are zeroed.
 * - tdpbf16ps: the same with bf16 pairs (A[m][2k + i] * B[k][2n + i],
 *   i < 2, K = A.colsb / 4 pairs), products exact in fp32, each added to
 *   C with round-to-nearest-even; bf16 inputs that are denormal read as 0
 *   and denormal results are flushed to 0 (DAZ/FTZ, as the hardware).
 * The model never faults the process: it records the first fault in the
 * state (the kernels' model instantiation counts them, amx_model_faults,
 * and the tests require 0) and leaves the registers unchanged.
 */
#ifndef DF_AMX_TILE_H
#define DF_AMX_TILE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define AMX_TILES 8
#define AMX_MAX_ROWS 16
#define AMX_MAX_COLSB 64

/* The 64-byte operand of ldtilecfg (palette 1), as the hardware reads it. */
typedef struct {
    uint8_t palette;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tilecfg;

/* The layout of the AMX gemms (amx_q8_0.h, amx_q4_K.h), for an output tile of m rows x n int32 columns
 * reduced over k bytes: tiles 0, 1 are C (m x 4n bytes), 2, 3 their A (m x k), 4, 5 their B (k / 4 rows x 4n). */
static inline void amx_cfg_pairs(amx_tilecfg *cfg, int m, int n, int k) {
    memset(cfg, 0, sizeof *cfg);
    cfg->palette = 1;
    for (int t = 0; t < 6; t += 2)
        for (int i = t; i < t + 2; i++) {
            cfg->rows[i] = (uint8_t)(t == 4 ? k / 4 : m);
            cfg->colsb[i] = (uint16_t)(t == 2 ? k : 4 * n);
        }
}

enum amx_fault { AMX_OK = 0, AMX_FAULT_GP = 1, AMX_FAULT_UD = 2 };

typedef struct {
    uint8_t t[AMX_TILES][AMX_MAX_ROWS][AMX_MAX_COLSB];
    uint8_t rows[AMX_TILES];
    uint16_t colsb[AMX_TILES];
    int configured; /* palette 1 loaded */
    int fault;      /* first fault, enum amx_fault */
} amx_model;

/* The model's instructions; each returns AMX_OK or the fault it raised
 * (also kept in m->fault if it is the first). */
int amx_m_ldtilecfg(amx_model *m, const amx_tilecfg *cfg);
int amx_m_release(amx_model *m);
int amx_m_loadd(amx_model *m, int t, const void *base, size_t stride);
int amx_m_stored(amx_model *m, int t, void *base, size_t stride);
int amx_m_zero(amx_model *m, int t);
/* Byte dot products: a_signed / b_signed select tdpbssd, tdpbsud,
 * tdpbusd, tdpbuud. */
int amx_m_dpb(amx_model *m, int c, int a, int b, int a_signed, int b_signed);
int amx_m_dpbf16ps(amx_model *m, int c, int a, int b);
/* Count a gemm run on the model that raised a fault; amx_model_faults: the count (the tests require 0). */
void amx_model_fault_note(void);
long amx_model_faults(void);

#endif
