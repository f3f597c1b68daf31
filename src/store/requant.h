/*
 * requant.h - requantizing resident dense weights at load time
 * (--resident-type, df_model_params.resident_type).
 *
 * DESIGN
 * When the dense (non-expert) part of a model does not fit a budget at its
 * published type, the weight store can keep a smaller copy of each resident
 * dense matrix in another type (q4_K or q8_0): every row is converted to
 * floats and quantized again, once, at open. Which tensors qualify is decided
 * here, from the directory entry alone, so that the planner (which reads no
 * data) and the store (which converts) agree byte for byte:
 *   - a dense matrix: two dimensions, more than one row, not a routed-expert
 *     tensor (experts stream and keep their type);
 *   - not f32 (norms, gates and the small f32 tensors architectures insist on
 *     stay exact), not already the target type;
 *   - rows a whole number of the target's blocks;
 *   - the copy is strictly smaller than the original (never "requantize" up).
 * Streamed dense layers (under a budget too small for them) are read as they
 * are in the file; only resident copies change. A requantized tensor's handle
 * carries the new type, so compute code, which looks the type up at use,
 * needs no change. The conversion is deterministic (same bytes every load).
 */
#ifndef DF_REQUANT_H
#define DF_REQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

/* The type id for a --resident-type name ("q4_K", "q8_0"; case as ggml
 * spells it, or lower case), 0 for NULL or "" (no requantizing), -1 if the
 * name is not one of those. */
int rq_parse_type(const char *name);

/* The type tensor t is kept in when resident with target type `target`
 * (0: none): target if t qualifies (see DESIGN), else t's own type.
 * is_expert: t is a routed-expert tensor. */
int rq_resident_type(const gguf_tensor *t, int is_expert, int target);

/* Bytes of t held in type `type` (ne[0] x all other dims). */
uint64_t rq_nbytes(const gguf_tensor *t, int type);

/* Convert n_rows rows of n_cols elements from src (type src_type, rows
 * packed) to dst (type dst_type, rows packed). scratch: n_cols floats.
 * Returns 0, or -1 with err if a type cannot be converted. */
int rq_convert(int src_type, const void *src, int dst_type, void *dst, int64_t n_cols, int64_t n_rows, float *scratch,
               char *err, size_t errlen);

#endif
