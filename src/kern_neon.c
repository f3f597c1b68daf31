/*
 * kern_neon.c - placeholder being replaced by the NEON kernels (see quant_isa.h).
 */
#include "quant_isa.h"

void kern_neon_fill(quant_traits *tab) { (void)tab; }
