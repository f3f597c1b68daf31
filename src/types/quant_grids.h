/*
 * quant_grids.h - the i-quant lookup grids (quant_grids.c), ggml's values.
 */
#ifndef DF_QUANT_GRIDS_H
#define DF_QUANT_GRIDS_H

#include <stdint.h>
extern const uint64_t df_iq2xxs_grid[256];
extern const uint64_t df_iq2xs_grid[512];
extern const uint64_t df_iq2s_grid[1024];
extern const uint32_t df_iq3xxs_grid[256];
extern const uint32_t df_iq3s_grid[512];
extern const uint64_t df_iq1s_grid[2048];

#endif
