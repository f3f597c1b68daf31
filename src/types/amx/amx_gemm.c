/*
 * amx_gemm.c - the AMX kernels on the software tile model, and the AMX
 * table's fill function (every architecture).
 *
 * DESIGN
 * amx_q8_0.h (q8_0, mxfp4, q4_0, iq4_nl) and amx_q4_K.h (q4_K, q5_K, q6_K) are instantiated here with amx_tile.h's model
 * as their tile operations: amx_q8_0_gemm_model and the rest (the packed
 * versions too, put where the table below packs the type). It is what the tests run against the
 * scalar reference, float64 and the AVX-512 gemm on every machine, and
 * what the AMX table uses when DELTAFIN_AMX=model forces the model (to
 * test the selection end to end where the CPU has no AMX; slow).
 * kern_amx_fill puts the AMX gemm into a table that starts as the best
 * other table: the hardware kernel (kern_amx.c) when the CPU has AMX, the
 * model when forced - the hardware kernels' code on it (kern_amx_model.c)
 * where the AVX-512 table exists, else these plain versions. Faults the model raised (a kernel bug: the hardware
 * would have killed the process) are counted for the tests (amx_model.c, amx_model_faults).
 */
#include "amx_tile.h"
#include "quant_isa.h"

#include <math.h>
#include <string.h>

#include "amx_model_ops.h"
#define AMX_FN_ATTR
#define AMX_GEMM_LINKAGE
#define AMX_F16(h) quant_f16_to_f32(h)
#define AMX_Q8_0_GEMM amx_q8_0_gemm_model
#define AMX_Q8_0_GEMM_PACKED amx_q8_0_packed_gemm_model
#define AMX_MXFP4_GEMM amx_mxfp4_gemm_model
#define AMX_MXFP4_GEMM_PACKED amx_mxfp4_packed_gemm_model
#define AMX_Q4_0_GEMM amx_q4_0_gemm_model
#define AMX_IQ4_NL_GEMM amx_iq4_nl_gemm_model
#include "amx_q8_0.h"
#define AMX_Q4_K_GEMM amx_q4_K_gemm_model
#define AMX_Q5_K_GEMM amx_q5_K_gemm_model
#define AMX_Q4_K_GEMM_PACKED amx_q4_K_packed_gemm_model
#define AMX_Q5_K_GEMM_PACKED amx_q5_K_packed_gemm_model
#define AMX_Q6_K_GEMM amx_q6_K_gemm_model
#define AMX_Q6_K_GEMM_PACKED amx_q6_K_packed_gemm_model
#include "amx_q4_K.h"

void kern_amx_fill(quant_traits *t, int model) {
#if defined(__x86_64__)
    if (model != 1) {
        if (model) kern_amx_model512_fill(t);
        else kern_amx_hw_fill(t);
        return;
    }
#endif
    (void)model;
    static const amx_gemm_set set = {
        {amx_q8_0_gemm_model, amx_mxfp4_gemm_model, amx_q4_K_gemm_model, amx_q5_K_gemm_model, amx_q6_K_gemm_model,
         amx_q4_0_gemm_model, amx_iq4_nl_gemm_model},
        {amx_q8_0_packed_gemm_model, amx_mxfp4_packed_gemm_model, amx_q4_K_packed_gemm_model,
         amx_q5_K_packed_gemm_model, amx_q6_K_packed_gemm_model, NULL, NULL}};
    amx_put_gemms(t, &set, 16 * AMX_CG);
}
