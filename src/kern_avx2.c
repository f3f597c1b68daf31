/*
 * kern_avx2.c - placeholder being replaced by the avx2 kernels (see quant_isa.h).
 */
#include "quant_isa.h"

void kern_avx2_fill(quant_traits *tab) { (void)tab; }
