/*
 * kern_amx.c - the AMX kernels on the hardware (x86-64 only), and the
 * run-time check that the CPU and the OS allow them.
 *
 * DESIGN
 * - amx_q8_0.h instantiated with the tile intrinsics (this file is built
 *   with -mamx-tile -mamx-int8 -mamx-bf16; the kernel functions also carry
 *   an AVX-512 target attribute for the float epilogue, and are only
 *   reached when the AVX-512 table exists). amx_gemm.c instantiates the
 *   same kernel on the software model, which is what the tests run where
 *   the CPU has no AMX.
 * - kern_amx_hw_available: CPUID leaf 7 reports AMX-TILE and AMX-INT8, the
 *   OS enables the tile state in XCR0 (bits 17, 18), and Linux grants this
 *   process the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM for
 *   XFEATURE_XTILEDATA; without it the first tile instruction faults).
 *   Asked once, from quant_init.
 * - The gemm goes to the AMX tiles from AMX_MIN_TOKENS tokens on; smaller
 *   products (generation) stay on the AVX-512 tile it replaced, whose
 *   outputs are the same bits (amx_q8_0.h says why), so the choice never
 *   changes a result.
 * - Speed: not measured; the development machine (AMD Zen 5) has no AMX.
 */
#include "quant_isa.h"
#include "amx_tile.h"

#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define AMX_MIN_TOKENS 8

#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

#define AMX_FN_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))
#define AMX_GEMM_LINKAGE static
#define AMX_STATE_DECL
#define AMX_STATE_PARAM
#define AMX_STATE_ARG
#define AMX_STATE_END
#define AMX_CFG(cfg) _tile_loadconfig(cfg)
#define AMX_RELEASE() _tile_release()
#define AMX_LOAD(t, p, s) _tile_loadd(t, p, (long)(s))
#define AMX_ZERO(t) _tile_zero(t)
#define AMX_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define AMX_STORE(t, p, s) _tile_stored(t, p, (long)(s))
#define AMX_F16(h) _cvtsh_ss(h)
#define AMX_Q8_0_GEMM amx_q8_0_gemm_hw
#include "amx_q8_0.h"

static quant_gemm_fn q8_0_small; /* the table's gemm before the AMX one */

static void amx_q8_0_gemm(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs, int nc, float *y,
                          size_t ldy) {
    if (nc < AMX_MIN_TOKENS && q8_0_small) q8_0_small(n, w, ws, nr, x, xs, nc, y, ldy);
    else amx_q8_0_gemm_hw(n, w, ws, nr, x, xs, nc, y, ldy);
}

void kern_amx_hw_fill(quant_traits *t) {
    q8_0_small = t[DF_TYPE_Q8_0].gemm;
    t[DF_TYPE_Q8_0].gemm = amx_q8_0_gemm;
}

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
