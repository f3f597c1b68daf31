/*
 * kern_amx.c - the AMX kernels on the hardware (x86-64 only), and the
 * run-time check that the CPU and the OS allow them.
 *
 * DESIGN
 * - amx_x86.h (the gemms of amx_q8_0.h - q8_0, mxfp4 - and amx_q4_K.h -
 *   q4_K, q5_K, q6_K - with their AVX-512 helpers, routing and fill)
 *   instantiated with the tile intrinsics (this file is built with
 *   -mamx-tile -mamx-int8 -mamx-bf16; the kernel functions also carry an
 *   AVX-512 target attribute for the epilogues, and are only reached when
 *   the AVX-512 table exists). kern_amx_model.c instantiates the same code
 *   on the software tile model (the tests, on AVX-512 machines), amx_gemm.c
 *   the headers' plain versions on it (the tests, everywhere).
 * - kern_amx_hw_available: CPUID leaf 7 reports AMX-TILE and AMX-INT8, the
 *   OS enables the tile state in XCR0 (bits 17, 18), and Linux grants this
 *   process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM for
 *   XFEATURE_XTILEDATA; without it the first tile instruction faults).
 *   Asked once, from quant_init.
 * - The gemm goes to the AMX tiles from AMX_MIN_TOKENS tokens on; smaller
 *   products (generation) stay on the AVX-512 tile it replaced, whose
 *   outputs are the same bits (amx_q8_0.h says why), so the choice never
 *   changes a result.
 * - matmul gives these gemms calls of 16 rows x up to 512 tokens
 *   (quant_traits.gemm_rows / gemm_cols): each row tile's weights are
 *   decoded once and serve every token of the prompt.
 */
#include "quant_isa.h"
#include "amx_tile.h"

#include <cpuid.h>
#include <math.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_MIN_TOKENS 8

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

#define AMX_FN_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#define AMX_GEMM_LINKAGE static
#define AMX_STATE_DECL
#define AMX_STATE_PARAM
#define AMX_STATE_ARG
#define AMX_STATE_PASS
#define AMX_STATE_END
#define AMX_CFG(cfg) _tile_loadconfig(cfg)
#define AMX_RELEASE() _tile_release()
#define AMX_LOAD(t, p, s) _tile_loadd(t, p, (long)(s))
#define AMX_ZERO(t) _tile_zero(t)
#define AMX_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define AMX_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)
#define AMX_STORE(t, p, s) _tile_stored(t, p, (long)(s))
#define AMX_F16(h) _cvtsh_ss(h)
#define AMX_Q8_0_GEMM amx_q8_0_gemm_hw
#define AMX_Q8_0_GEMM_PACKED amx_q8_0_packed_gemm_hw
#define AMX_MXFP4_GEMM amx_mxfp4_gemm_hw
#define AMX_MXFP4_GEMM_PACKED amx_mxfp4_packed_gemm_hw
#define AMX_Q4_0_GEMM amx_q4_0_gemm_hw
#define AMX_IQ4_NL_GEMM amx_iq4_nl_gemm_hw
#define AMX_Q4_K_GEMM amx_q4_K_gemm_hw
#define AMX_Q5_K_GEMM amx_q5_K_gemm_hw
#define AMX_Q4_K_GEMM_PACKED amx_q4_K_packed_gemm_hw
#define AMX_Q5_K_GEMM_PACKED amx_q5_K_packed_gemm_hw
#define AMX_Q6_K_GEMM amx_q6_K_gemm_hw
#define AMX_Q6_K_GEMM_PACKED amx_q6_K_packed_gemm_hw
#define AMX_X86_GEMM(TYPE) amx_##TYPE##_gemm_hw

#include "amx_x86.h"

void kern_amx_hw_fill(quant_traits *t) { amx_x86_fill(t); }

int kern_amx_hw_available(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!(d & (1u << 24)) || !(d & (1u << 25))) return 0; /* AMX-TILE, AMX-INT8 */
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0; /* OSXSAVE */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17)) return 0; /* XTILECFG, XTILEDATA enabled by the OS */
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) return 0;
    unsigned long perm = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) != 0) return 0;
    return (perm >> XFEATURE_XTILEDATA) & 1;
}
