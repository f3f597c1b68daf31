/*
 * wstore.c - weight store backends: mapped files and resident copies.
 * See wstore.h for the contract.
 */
#include "wstore.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "quant.h"
#include "util.h"

struct wstore {
    gguf_ctx *g;
    int mode;
    void **maps;          /* per file (WS_MMAP) */
    uint64_t *map_size;
    ws_tensor *handles;   /* one per gguf tensor, same index */
    uint64_t resident;
    ws_stats stats;
};

void ws_get_stats(const wstore *ws, ws_stats *out) { *out = ws->stats; }

int ws_open(gguf_ctx *g, int mode, wstore **out, char *err, size_t errlen) {
    *out = NULL;
    wstore *ws = calloc(1, sizeof *ws);
    if (!ws) return df_seterr(err, errlen, "out of memory");
    ws->g = g;
    ws->mode = mode;
    ws->maps = calloc((size_t)g->n_files, sizeof(void *));
    ws->map_size = calloc((size_t)g->n_files, sizeof(uint64_t));
    ws->handles = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(ws_tensor));
    if (!ws->maps || !ws->map_size || !ws->handles) {
        ws_close(ws);
        return df_seterr(err, errlen, "out of memory");
    }
    if (mode == WS_MMAP) {
        for (int i = 0; i < g->n_files; i++) {
            if (g->files[i].fd < 0) continue;
            void *m = mmap(NULL, (size_t)g->files[i].size, PROT_READ, MAP_SHARED, g->files[i].fd, 0);
            if (m == MAP_FAILED) {
                df_seterr(err, errlen, "%s: cannot map: %s", g->files[i].path, strerror(errno));
                ws_close(ws);
                return -1;
            }
            ws->maps[i] = m;
            ws->map_size[i] = g->files[i].size;
        }
    }
    *out = ws;
    return 0;
}

void ws_close(wstore *ws) {
    if (!ws) return;
    for (int i = 0; ws->maps && i < ws->g->n_files; i++)
        if (ws->maps[i]) munmap(ws->maps[i], (size_t)ws->map_size[i]);
    if (ws->mode == WS_RESIDENT && ws->handles)
        for (uint64_t i = 0; i < ws->g->n_tensors; i++) free(ws->handles[i].data);
    free(ws->maps);
    free(ws->map_size);
    free(ws->handles);
    free(ws);
}

/* Read a tensor's bytes into an aligned buffer (WS_RESIDENT). */
static int read_resident(wstore *ws, ws_tensor *t, char *err, size_t errlen) {
    const gguf_file *f = &ws->g->files[t->gt->file];
    size_t n = (size_t)t->nbytes;
    uint8_t *buf = df_aligned_alloc(64, n);
    if (!buf) return df_seterr(err, errlen, "out of memory for tensor '%s' (%zu bytes)", t->gt->name, n);
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(f->fd, buf + done, n - done, (off_t)(t->gt->offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            free(buf);
            return df_seterr(err, errlen, "%s: reading tensor '%s': %s", f->path, t->gt->name,
                             r < 0 ? strerror(errno) : "unexpected end of file");
        }
        done += (size_t)r;
    }
    t->data = buf;
    ws->resident += n;
    return 0;
}

ws_tensor *ws_get(wstore *ws, const char *name, char *err, size_t errlen) {
    const gguf_tensor *gt = gguf_find_tensor(ws->g, name);
    if (!gt) {
        df_seterr(err, errlen, "missing tensor '%s'", name);
        return NULL;
    }
    ws_tensor *t = &ws->handles[gt - ws->g->tensors];
    if (t->gt) return t; /* already registered */
    const quant_traits *q = quant_traits_get(gt->type);
    if (!q || !q->supported) {
        df_seterr(err, errlen, "tensor '%s' has type %s, which Deltafin cannot compute with", name,
                  q && q->name ? q->name : "unknown");
        return NULL;
    }
    t->gt = gt;
    t->type = gt->type;
    memcpy(t->ne, gt->ne, sizeof t->ne);
    t->nbytes = gt->nbytes;
    t->row_bytes = quant_row_size(gt->type, gt->ne[0]);
    if (ws->mode == WS_MMAP) {
        t->data = (uint8_t *)ws->maps[gt->file] + gt->offset;
    } else if (read_resident(ws, t, err, errlen) != 0) {
        t->gt = NULL;
        return NULL;
    }
    return t;
}

const void *ws_fetch(wstore *ws, ws_tensor *t, char *err, size_t errlen) {
    (void)ws;
    (void)err;
    (void)errlen;
    t->pins++;
    return t->data;
}

void ws_release(wstore *ws, ws_tensor *t) {
    (void)ws;
    if (t->pins > 0) t->pins--;
}

const void *ws_fetch_expert(wstore *ws, ws_tensor *t, int e, char *err, size_t errlen) {
    if (e < 0 || e >= t->ne[2]) {
        df_seterr(err, errlen, "expert %d out of range for '%s'", e, t->gt->name);
        return NULL;
    }
    t->pins++;
    ws->stats.expert_fetches++;
    ws->stats.expert_bytes += (uint64_t)t->ne[1] * t->row_bytes;
    return (const uint8_t *)t->data + (size_t)e * (size_t)t->ne[1] * t->row_bytes;
}

void ws_release_expert(wstore *ws, ws_tensor *t, int e) {
    (void)e;
    ws_release(ws, t);
}

uint64_t ws_resident_bytes(const wstore *ws) { return ws->resident; }
