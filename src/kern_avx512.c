/*
 * kern_avx512.c - placeholder being replaced by the avx512 kernels (see quant_isa.h).
 */
#include "quant_isa.h"

void kern_avx512_fill(quant_traits *tab) { (void)tab; }
