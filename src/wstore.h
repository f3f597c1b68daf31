/*
 * wstore.h - the weight store: the one way the forward pass reaches weights.
 *
 * DESIGN
 * A model's tensors are registered once (ws_tensor, a handle with shape and
 * type). Compute code asks for a tensor's bytes with ws_fetch, which pins
 * them until the matching ws_release; it never learns where the bytes live.
 * Backends:
 *   WS_MMAP      - the GGUF files are mapped read-only; fetch is a pointer.
 *   WS_RESIDENT  - every tensor is read into aligned memory at open.
 * A streaming backend (bounded memory, reads from disk on demand) plugs in
 * behind the same calls; fetch/release pairs are already in the forward pass
 * so that one can evict what is not pinned.
 *
 * Invariants: a pointer from ws_fetch stays valid until its ws_release;
 * fetch/release calls nest (reference counts per tensor).
 */
#ifndef DF_WSTORE_H
#define DF_WSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

enum ws_mode { WS_MMAP = 0, WS_RESIDENT = 1 };

typedef struct ws_tensor {
    const gguf_tensor *gt;  /* directory entry (name, file, offset) */
    int type;               /* element type (enum df_type) */
    int64_t ne[4];          /* ne[0] = row length */
    uint64_t nbytes;
    size_t row_bytes;       /* bytes per row of ne[0] elements */
    int pins;               /* reference count of fetches */
    void *data;             /* backend-owned storage (resident) or mapped address */
} ws_tensor;

typedef struct wstore wstore;

int ws_open(gguf_ctx *g, int mode, wstore **out, char *err, size_t errlen);
void ws_close(wstore *ws);

/* Register a tensor by name; returns NULL (and err) if it is missing. */
ws_tensor *ws_get(wstore *ws, const char *name, char *err, size_t errlen);

/* Pin a tensor's bytes (NULL and err on an I/O failure). */
const void *ws_fetch(wstore *ws, ws_tensor *t, char *err, size_t errlen);
void ws_release(wstore *ws, ws_tensor *t);

/* Pin expert e's slice of an expert tensor (ne[2] = number of experts): ne[1]
 * rows of ne[0] elements, contiguous in the file. This is the unit a streaming
 * backend reads, so MoE code fetches experts one by one and only those the
 * router chose. */
const void *ws_fetch_expert(wstore *ws, ws_tensor *t, int e, char *err, size_t errlen);
void ws_release_expert(wstore *ws, ws_tensor *t, int e);

/* Counters since open: expert slices fetched and their bytes. */
typedef struct ws_stats {
    uint64_t expert_fetches;
    uint64_t expert_bytes;
} ws_stats;
void ws_get_stats(const wstore *ws, ws_stats *out);

/* Bytes held in memory by the store (resident copies; mapped files count 0). */
uint64_t ws_resident_bytes(const wstore *ws);

#endif
