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
/* ggml's kvalues_iq4nl (IQ4_NL, IQ4_XS) and kvalues_mxfp4 (the e2m1 values
 * doubled: times half the E8M0 scale, df_e8m0_to_fp32_half). */
extern const int8_t df_kvalues_iq4nl[16];
extern const int8_t df_kvalues_mxfp4[16];

#endif
