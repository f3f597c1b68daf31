/*
 * pack.h - row-interleaved ("packed") weight layouts: a matrix's rows in
 * groups of PACK_ROWS, stored block by block, for the gemm kernels that read
 * one stream and keep one weight row in each 32-bit lane of a 512-bit
 * register (quant_traits.gemm_packed).
 *
 * DESIGN
 * Generation reads every weight byte once per token, so its speed is the
 * rate at which one core streams weights. The file's row-major layout makes
 * a tile of rows read several short streams at once (the core runs out of
 * line-fill buffers) and leaves a reduction across lanes per row and block.
 * A packed group of 16 rows holds, for each block b in order, the 16 rows'
 * block headers side by side, then the quantized bytes as lines of 64 bytes:
 * line k holds bytes 4k..4k+3 of each row's block, row r at byte 4r. One
 * vpdpbusd of a line against the activation's 4 matching bytes (broadcast)
 * adds 4 products to each row's lane: a block's exact integer sum per row
 * with no reduction, and the group is one sequential read. The layout is the
 * one the AMX tile unit wants for its B operand as well (amx_q8_0.h).
 *
 *   q8_0:  per block 16 x f16 d, then 8 lines (qs ^ 0x80: the bytes are the
 *          unsigned operand of vpdpbusd; the activation sums below undo the
 *          offset exactly) = 544 bytes = 16 blocks
 *   mxfp4: per block 16 x e (E8M0), then 4 lines of the nibble bytes as
 *          they are (line k: qs[4k..4k+3]: elements 4k.. low, 16+4k.. high)
 *          = 272 bytes = 16 blocks
 *   q4_K:  per super-block 16 x d, 16 x dmin (f16), the 12 scale bytes
 *          transposed (12 vectors of 16 bytes: byte j of every row), then
 *          32 lines of the nibble bytes (line 8p + k: qs[32p+4k..+3], low
 *          nibbles sub-block 2p, high 2p + 1) = 2304 bytes = 16 blocks
 *   q5_K:  as q4_K with the 8 lines of qh (line k: qh[4k..4k+3]) between
 *          the scales and the nibble lines = 2816 bytes
 *   q6_K:  per super-block 16 x d, the 16 scales transposed (16 vectors of
 *          16 bytes), 32 lines of ql, then 16 lines of qh = 3360 bytes
 *
 * A packed group takes exactly the bytes of its 16 rows, so a matrix can
 * be packed in place, and row r0 of a multiple of 16 starts where it did.
 * The store packs its resident matrices but the token embeddings once, at
 * load: as it reads them (pack_groups_to from a staging buffer) or in place
 * (pack_matrix); ws_fetch, the accessor of readers by rows, unpacks a
 * matrix for good. Rows past the last full group keep the file's layout. The packed kernels give
 * the same bits as the row-major ones (tests/test_matmul.c).
 *
 * Activations (q8_0 rows converted by matmul) that a packed weight reads
 * carry a trailer after their blocks: per block -128 * sum(qs) (int32: starts the accumulator so that
 * the unsigned weight bytes' offset cancels) and the scale as a float.
 */
#ifndef DF_PACK_H
#define DF_PACK_H

#include <stddef.h>
#include <stdint.h>

#define PACK_ROWS 16

/* 1 if `type` has a packed layout (the table decides whether it is used:
 * quant_traits.gemm_packed). */
int pack_has_layout(int type);

/* Pack (unpack = 0) or unpack every full group of PACK_ROWS rows of the
 * n_rows x row_bytes matrix at w, in place; rows past the last full group
 * are left alone. scratch: PACK_ROWS * row_bytes bytes. */
void pack_matrix(int type, uint8_t *w, size_t row_bytes, int64_t n_rows, uint8_t *scratch, int unpack);
/* Pack n_groups full groups of row-major rows (row_bytes each) at `rows`
 * into dst (n_groups * PACK_ROWS * row_bytes bytes, not overlapping). */
void pack_groups_to(int type, const uint8_t *rows, size_t row_bytes, int64_t n_groups, uint8_t *dst);

/* Bytes of an activation row of n elements in vec_type `vtype` with the
 * trailer (q8_0), or 0 when the type has none. */
size_t pack_x_row_bytes(int vtype, int64_t n);
/* Write the trailer of a converted q8_0 row of n elements (n / 32 blocks). */
void pack_x_trailer(int vtype, void *xq, int64_t n);

/* Where a q8_0 row's trailer starts: int32 corr[nb], then float d[nb]. */
static inline size_t pack_q8_0_trailer_off(int64_t nb) { return ((size_t)nb * 34 + 63) & ~(size_t)63; }

#endif
