/*
 * kern_amx_model.c - the hardware AMX kernels' code (amx_x86.h: the gemms
 * with their AVX-512 decoders, gathers and epilogues, routing and fill) on
 * amx_tile.h's software model of the tiles (x86-64 only).
 *
 * DESIGN
 * kern_amx.c runs amx_x86.h on the tile instructions, which only Intel
 * CPUs with AMX have; amx_gemm.c runs the gemm headers' plain helpers on
 * the model. This file closes the gap between them: the same amx_x86.h
 * with the model's tile operations (amx_model_ops.h), so every line of the
 * hardware kernels but the tile instructions runs in the tests on any
 * AVX-512 machine. The AMX table takes these gemms under DELTAFIN_AMX=model
 * where the AVX-512 table exists (kern_amx_fill), and tests/test_amx.c
 * checks each against the scalar reference, float64 and the other tables'
 * bits. AMX_MIN_TOKENS is 0 here: every product, however small, goes
 * through the tile code (on the hardware those under 8 tokens stay on the
 * AVX-512 tiles).
 */
#include "quant_isa.h"
#include "amx_model_ops.h"

#include <math.h>
#include <string.h>

#define AMX_MIN_TOKENS 0
#define AMX_FN_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define AMX_GEMM_LINKAGE
#define AMX_F16(h) _cvtsh_ss(h)
#define AMX_Q8_0_GEMM amx_q8_0_gemm_model512
#define AMX_Q8_0_GEMM_PACKED amx_q8_0_packed_gemm_model512
#define AMX_MXFP4_GEMM amx_mxfp4_gemm_model512
#define AMX_MXFP4_GEMM_PACKED amx_mxfp4_packed_gemm_model512
#define AMX_Q4_0_GEMM amx_q4_0_gemm_model512
#define AMX_IQ4_NL_GEMM amx_iq4_nl_gemm_model512
#define AMX_Q4_K_GEMM amx_q4_K_gemm_model512
#define AMX_Q5_K_GEMM amx_q5_K_gemm_model512
#define AMX_Q4_K_GEMM_PACKED amx_q4_K_packed_gemm_model512
#define AMX_Q5_K_GEMM_PACKED amx_q5_K_packed_gemm_model512
#define AMX_Q6_K_GEMM amx_q6_K_gemm_model512
#define AMX_Q6_K_GEMM_PACKED amx_q6_K_packed_gemm_model512
#define AMX_X86_GEMM(TYPE) amx_##TYPE##_gemm_model512
#include "amx_x86.h"

void kern_amx_model512_fill(quant_traits *t) { amx_x86_fill(t); }
