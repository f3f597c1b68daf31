/*
 * memprobe.c - how fast this machine computes a model's products from
 * memory while it decodes (df_model_probe_memory): plan's memory rate.
 *
 * A plain read of memory (df_probe_memory) is the bound; decoding reaches
 * part of it, and how much depends on the weight type, the kernel table and
 * the processor (bench/compare.sh's "Deltafin / bound" column in
 * bench/RESULTS.md). So the probe runs what decoding runs: the engine's own matrix
 * products (matmul.h: the kernel table in use, the packed layouts where the
 * store packs, the thread pool of df_model_params.n_threads) on one token,
 * over copies of the model's own weights (read from its file), each matrix
 * of its real shape, one product a matrix as decoding calls them, in a
 * buffer sized as the plain probe's (df_probe_buffer: evicted from the
 * caches before each pass where the budget keeps it small). The fastest
 * pass counts, as in the plain probe.
 *
 * The types: what one token reads from memory, by type: every matrix but the
 * token embeddings (a row a token), the experts' at n_expert_used /
 * n_expert of their bytes. The PROBE_TYPES largest shares are measured, each
 * by its largest matrix; the rate is their bytes over their summed time (the
 * smaller types, a few percent where there are more, taken at that rate).
 * Requantized resident weights (--resident-type) are measured in the file's
 * type. Attention over the KV cache and the vector ops are not in it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deltafin.h"
#include "header.h"
#include "matmul.h"
#include "model.h"
#include "pack.h"
#include "quant.h"
#include "util.h"

#define PROBE_TYPES 4

typedef struct {
    int type;
    const gguf_tensor *t; /* the type's largest matrix (per token) */
    double bytes;         /* read per token */
} type_share;

/* Bytes one token reads of tensor t, 0 when it is no matrix decoding multiplies by. */
static double token_bytes(const df_model *m, const gguf_tensor *t) {
    const quant_traits *q = quant_traits_get(t->type);
    if (!q || !q->supported || t->n_dims < 2 || t->ne[1] < PACK_ROWS || strstr(t->name, "token_embd")) return 0;
    if (t->n_dims >= 3 && t->ne[2] > 1 && m->hp.n_expert > 1 && t->ne[2] == m->hp.n_expert)
        return (double)t->nbytes * m->hp.n_expert_used / (double)t->ne[2];
    return (double)t->nbytes;
}

/* The token's types, largest share first; their count (at most cap). */
static int token_types(const df_model *m, type_share *s, int cap) {
    type_share all[64];
    int n = 0;
    for (uint64_t i = 0; i < m->g->n_tensors; i++) {
        const gguf_tensor *t = &m->g->tensors[i];
        const double b = token_bytes(m, t);
        if (b <= 0) continue;
        int k = 0;
        while (k < n && all[k].type != t->type) k++;
        if (k == n) {
            if (n == 64) continue;
            all[n++] = (type_share){t->type, t, 0};
        }
        all[k].bytes += b;
        if (b > token_bytes(m, all[k].t)) all[k].t = t;
    }
    for (int i = 0; i < n; i++) /* largest share first (a handful: insertion) */
        for (int j = i; j > 0 && all[j].bytes > all[j - 1].bytes; j--) {
            const type_share x = all[j];
            all[j] = all[j - 1], all[j - 1] = x;
        }
    n = n < cap ? n : cap;
    memcpy(s, all, (size_t)n * sizeof *s);
    return n;
}

/* One matrix of t (the first expert's, or rows from its start where it is larger than `bytes`) read from the
 * file into w: 0 or -1. */
static int read_matrix(const df_model *m, const gguf_tensor *t, uint8_t *w, size_t size, char *err, size_t errlen) {
    const int fd = m->g->files[t->file].fd;
    for (size_t done = 0; done < size;) {
        const ssize_t r = pread(fd, w + done, size - done, (off_t)(t->offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return df_seterr(err, errlen, "%s: reading %s to measure memory failed", m->path, t->name);
        done += (size_t)r;
    }
    return 0;
}

/* Bytes/s of one token's products over copies of t's matrix filling about `bytes` (evicted before each pass when
 * evict), for `seconds`. */
static double probe_type(df_model *m, const gguf_tensor *t, uint64_t bytes, int evict, double seconds, int pack,
                         char *err, size_t errlen) {
    const int64_t n_in = t->ne[0];
    const size_t row = quant_row_size(t->type, n_in);
    int64_t rows = t->ne[1];
    if (row == 0) return df_seterr(err, errlen, "%s: a row of %s has no size", m->path, t->name), -1.0;
    if ((uint64_t)rows * row > bytes) rows = (int64_t)(bytes / row) & ~(int64_t)(PACK_ROWS - 1);
    if (rows < PACK_ROWS) rows = PACK_ROWS;
    const size_t mat = (size_t)rows * row, copies = bytes / mat ? (size_t)(bytes / mat) : 1, total = copies * mat;
    uint8_t *w = df_alloc_big(64, total), *scratch = malloc(PACK_ROWS * row);
    float *x = malloc((size_t)n_in * sizeof *x), *y = malloc((size_t)rows * sizeof *y);
    mm_scratch sc = {.buf = malloc(mm_scratch_bytes(n_in, 1)), .size = mm_scratch_bytes(n_in, 1)};
    double best = -1.0;
    if (!w || !scratch || !x || !y || !sc.buf) {
        df_seterr(err, errlen, "out of memory measuring memory");
        goto out;
    }
    if (read_matrix(m, t, w, mat, err, errlen) != 0) goto out;
    for (int64_t i = 0; i < n_in; i++) x[i] = (float)((i * 7919) % 2001 - 1000) / 1000.0f;
    if (pack) pack_matrix(t->type, w, row, rows, scratch, 0);
    for (size_t c = 1; c < copies; c++) memcpy(w + c * mat, w, mat);
    const mm_op op0 = {t->type, w, rows, y, rows, NULL, pack};
    best = 0;
    const double t0 = df_time();
    int passes = 0;
    do {
        if (evict) df_cache_evict(w, total);
        const double a = df_time();
        for (size_t c = 0; c < copies; c++) {
            mm_op op = op0;
            op.w = w + c * mat;
            if (mm_mul_n(m->pool, &op, 1, n_in, x, 1, &sc) != 0) {
                df_seterr(err, errlen, "measuring memory: the product's scratch is too small");
                best = -1.0;
                goto out;
            }
        }
        const double dt = df_time() - a;
        if (dt > 0 && (double)total / dt > best) best = (double)total / dt;
    } while (++passes < 2 || df_time() - t0 < seconds);
out:
    free(w), free(scratch), free(x), free(y), free(sc.buf);
    return best;
}

double df_model_probe_memory(const char *path, const df_model_params *p, double seconds, uint64_t max_bytes,
                             char *err, size_t errlen) {
    quant_init();
    df_model *m = calloc(1, sizeof *m);
    if (!m) return df_seterr(err, errlen, "out of memory"), -1.0;
    df_model_params q = *p;
    q.vocab_only = 0;
    double rate = -1.0;
    ws_config cfg;
    if (df_load_header(m, path, &q, err, errlen) != 0 || df_store_config(m, p, &cfg, err, errlen) != 0) goto out;
    m->pool = tp_create(m->n_threads);
    type_share s[PROBE_TYPES];
    const int n = token_types(m, s, PROBE_TYPES);
    if (!m->pool || n == 0) {
        df_seterr(err, errlen, "%s: %s", path, m->pool ? "no matrices to measure memory with" : "out of memory");
        goto out;
    }
    int evict;
    const uint64_t bytes = df_probe_buffer(max_bytes, &evict);
    double sum_bytes = 0, sum_secs = 0;
    for (int i = 0; i < n; i++) {
        const int pack = ws_type_packs(&cfg, s[i].type, s[i].t->ne[1]); /* as the store holds it */
        const double r = probe_type(m, s[i].t, bytes, evict, seconds / n, pack, err, errlen);
        if (r <= 0) goto out;
        sum_bytes += s[i].bytes, sum_secs += s[i].bytes / r;
    }
    rate = sum_bytes / sum_secs;
out:
    df_model_free(m); /* frees the pool */
    return rate;
}
