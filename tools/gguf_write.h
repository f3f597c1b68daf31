/*
 * gguf_write.h - a streaming GGUF (version 3) writer for the model-making tools.
 *
 * Usage: add metadata and declare every tensor (name, type, shape) first;
 * gw_begin writes the header, metadata and tensor directory; then the
 * tensors' bytes are appended in declaration order with gw_data (any number
 * of calls per tensor), and gw_finish pads and closes. Only the directory is
 * held in memory, so files of any size stream straight to disk.
 */
#ifndef DF_GGUF_WRITE_H
#define DF_GGUF_WRITE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct gw gw;

gw *gw_new(void);
void gw_free(gw *w);

/* Metadata; 0 or -1 (out of memory). Strings are copied. */
/* Leave these metadata keys out of the file (their name, or the part after "ARCH."; keys stays the caller's): how
 * tests make a file without an optional key. */
void gw_drop_keys(gw *w, const char *const *keys, int n);
/* Name every metadata key written from now on, one a line, on f (NULL: stop). */
void gw_list_keys(gw *w, FILE *f);
int gw_str(gw *w, const char *key, const char *val);
int gw_u32(gw *w, const char *key, uint32_t v);
int gw_i32(gw *w, const char *key, int32_t v);
int gw_f32(gw *w, const char *key, float v);
int gw_bool(gw *w, const char *key, int v);
int gw_arr_str(gw *w, const char *key, const char *const *v, size_t n);
int gw_arr_i32(gw *w, const char *key, const int32_t *v, size_t n);
int gw_arr_f32(gw *w, const char *key, const float *v, size_t n);
/* Raw metadata value: type id and its already-encoded bytes (for tests that build odd files). */
int gw_raw(gw *w, const char *key, uint32_t type, const void *bytes, size_t n);

/* Declare a tensor; returns its index or -1 (bad type/shape or no memory). */
int gw_tensor(gw *w, const char *name, int type, int n_dims, const int64_t *ne);
uint64_t gw_tensor_bytes(const gw *w, int idx);

/* Write the header to path (truncating it). 0, or -1 with err. */
int gw_begin(gw *w, const char *path, char *err, size_t errlen);
/* Append bytes of the current tensor. */
int gw_data(gw *w, const void *data, size_t n, char *err, size_t errlen);
/* Check every tensor got exactly its bytes, pad, close. */
int gw_finish(gw *w, char *err, size_t errlen);
/* Instead of any gw_data: extend the file to its full size without writing
 * tensor data (a sparse file whose data are holes, reading as zeros), close.
 * A "shape-only" model: real header, metadata and tensor directory, for
 * planning models far larger than the disk. */
int gw_finish_sparse(gw *w, char *err, size_t errlen);

#endif
