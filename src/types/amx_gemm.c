/*
 * amx_gemm.c - the AMX kernels on the software tile model, and the AMX
 * table's fill function (every architecture).
 *
 * DESIGN
 * amx_q8_0.h (q8_0, mxfp4) and amx_q4_K.h (q4_K, q5_K, q6_K) are instantiated here with amx_tile.h's model
 * as their tile operations: amx_q8_0_gemm_model and the rest (the packed
 * versions too, put where the table below packs the type). It is what the tests run against the
 * scalar reference, float64 and the AVX-512 gemm on every machine, and
 * what the AMX table uses when DELTAFIN_AMX=model forces the model (to
 * test the selection end to end where the CPU has no AMX; slow).
 * kern_amx_fill puts the AMX gemm into a table that starts as the best
 * other table: the hardware kernel (kern_amx.c) when the CPU has AMX, the
 * model when forced. Faults the model raised (a kernel bug: the hardware
 * would have killed the process) are counted for the tests.
 */
#include "amx_tile.h"
#include "quant_isa.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

static atomic_long model_faults;

long amx_model_faults(void) { return atomic_load(&model_faults); }

#define AMX_STATE_DECL amx_model amx_st_ = {0}
#define AMX_STATE_PARAM , amx_model *amx_st
#define AMX_STATE_ARG , &amx_st_
#define AMX_STATE_END                                   \
    do {                                                \
        if (amx_st_.fault) atomic_fetch_add(&model_faults, 1); \
    } while (0)
/* amx_q8_0_tile gets the gemm's model state as a parameter. */
#define AMX_FN_ATTR
#define AMX_GEMM_LINKAGE
#define AMX_CFG(cfg) amx_m_ldtilecfg(&amx_st_, (cfg))
#define AMX_RELEASE() amx_m_release(&amx_st_)
#define AMX_LOAD(t, p, s) amx_m_loadd(amx_st, (t), (p), (s))
#define AMX_ZERO(t) amx_m_zero(amx_st, (t))
#define AMX_DPBSSD(c, a, b) amx_m_dpb(amx_st, (c), (a), (b), 1, 1)
#define AMX_STORE(t, p, s) amx_m_stored(amx_st, (t), (p), (s))
#define AMX_F16(h) quant_f16_to_f32(h)
#define AMX_Q8_0_GEMM amx_q8_0_gemm_model
#define AMX_Q8_0_GEMM_PACKED amx_q8_0_packed_gemm_model
#define AMX_MXFP4_GEMM amx_mxfp4_gemm_model
#define AMX_MXFP4_GEMM_PACKED amx_mxfp4_packed_gemm_model
#include "amx_q8_0.h"
#define AMX_DPBSUD(c, a, b) amx_m_dpb(amx_st, (c), (a), (b), 1, 0)
#define AMX_Q4_K_GEMM amx_q4_K_gemm_model
#define AMX_Q5_K_GEMM amx_q5_K_gemm_model
#define AMX_Q4_K_GEMM_PACKED amx_q4_K_packed_gemm_model
#define AMX_Q5_K_GEMM_PACKED amx_q5_K_packed_gemm_model
#define AMX_Q6_K_GEMM amx_q6_K_gemm_model
#define AMX_Q6_K_GEMM_PACKED amx_q6_K_packed_gemm_model
#include "amx_q4_K.h"

void kern_amx_fill(quant_traits *t, int model) {
#if defined(__x86_64__)
    if (!model) {
        kern_amx_hw_fill(t);
        return;
    }
#endif
    (void)model;
    const int pack_q8_0 = t[DF_TYPE_Q8_0].gemm_packed != NULL, pack_q4_K = t[DF_TYPE_Q4_K].gemm_packed != NULL;
    const int pack_mxfp4 = t[DF_TYPE_MXFP4].gemm_packed != NULL;
    const int pack_q5_K = t[DF_TYPE_Q5_K].gemm_packed != NULL, pack_q6_K = t[DF_TYPE_Q6_K].gemm_packed != NULL;
    amx_put_gemm(&t[DF_TYPE_Q8_0], amx_q8_0_gemm_model, 16 * AMX_CG);
    amx_put_gemm(&t[DF_TYPE_MXFP4], amx_mxfp4_gemm_model, 16 * AMX_CG);
    amx_put_gemm(&t[DF_TYPE_Q4_K], amx_q4_K_gemm_model, 16 * AMXK_CG);
    amx_put_gemm(&t[DF_TYPE_Q5_K], amx_q5_K_gemm_model, 16 * AMXK_CG);
    amx_put_gemm(&t[DF_TYPE_Q6_K], amx_q6_K_gemm_model, 16 * AMXK_CG);
    if (pack_q8_0) t[DF_TYPE_Q8_0].gemm_packed = amx_q8_0_packed_gemm_model; /* where the table below packs */
    if (pack_mxfp4) t[DF_TYPE_MXFP4].gemm_packed = amx_mxfp4_packed_gemm_model;
    if (pack_q4_K) t[DF_TYPE_Q4_K].gemm_packed = amx_q4_K_packed_gemm_model;
    if (pack_q5_K) t[DF_TYPE_Q5_K].gemm_packed = amx_q5_K_packed_gemm_model;
    if (pack_q6_K) t[DF_TYPE_Q6_K].gemm_packed = amx_q6_K_packed_gemm_model;
}
