/*
 * amx_model_ops.h - the tile operations of amx_q8_0.h / amx_q4_K.h bound to
 * amx_tile.h's software model, for the files that instantiate the AMX gemms
 * on it (amx_gemm.c: the headers' plain helpers; kern_amx_model.c: the
 * x86 helpers of amx_x86.h).
 *
 * DESIGN
 * A gemm keeps its model state (the 8 tile registers and the
 * configuration) on its stack: AMX_STATE_DECL declares it, the helpers that
 * issue tile operations get it as a parameter (AMX_STATE_PARAM; passed as
 * AMX_STATE_ARG by the gemm, AMX_STATE_PASS by a helper to another),
 * and AMX_STATE_END reports a fault the run raised (amx_model_fault_note;
 * the tests require none: the hardware would have killed the process).
 */
#ifndef DF_AMX_MODEL_OPS_H
#define DF_AMX_MODEL_OPS_H

#include "amx_tile.h"

#define AMX_STATE_DECL amx_model amx_st_ = {0}
#define AMX_STATE_PARAM , amx_model *amx_st
#define AMX_STATE_ARG , &amx_st_
#define AMX_STATE_PASS , amx_st
#define AMX_STATE_END                                                                                              \
    do {                                                                                                           \
        if (amx_st_.fault) amx_model_fault_note();                                                                 \
    } while (0)
#define AMX_CFG(cfg) amx_m_ldtilecfg(&amx_st_, (cfg))
#define AMX_RELEASE() amx_m_release(&amx_st_)
#define AMX_LOAD(t, p, s) amx_m_loadd(amx_st, (t), (p), (s))
#define AMX_ZERO(t) amx_m_zero(amx_st, (t))
#define AMX_DPBSSD(c, a, b) amx_m_dpb(amx_st, (c), (a), (b), 1, 1)
#define AMX_DPBSUD(c, a, b) amx_m_dpb(amx_st, (c), (a), (b), 1, 0)
#define AMX_STORE(t, p, s) amx_m_stored(amx_st, (t), (p), (s))

#endif
