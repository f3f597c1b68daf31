/*
 * gguf_write.c - see gguf_write.h. Metadata is serialised into a growing
 * byte buffer as it is added; the tensor directory is kept as a list and
 * offsets are assigned (aligned to 32 bytes) when the header is written.
 */
#include "gguf_write.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deltafin.h"
#include "gguf.h"
#include "quant.h"
#include "util.h"

#define GW_ALIGN 32

typedef struct {
    char *name;
    int type, n_dims;
    int64_t ne[4];
    uint64_t nbytes, offset;
} gw_tensor_info;

struct gw {
    uint8_t *kv;             /* serialised metadata */
    size_t kv_len, kv_cap;
    uint64_t n_kv;
    gw_tensor_info *t;
    int n_t, cap_t;
    df_out *out;             /* the file being written (outfile.c: put in place by gw_finish) */
    FILE *f;
    int cur;                 /* tensor being written */
    uint64_t cur_written;
    uint64_t pos;            /* bytes written to the file */
    const char *const *drop; /* metadata keys left out (gw_drop_keys), n_drop of them */
    int n_drop;
    FILE *list;              /* gw_list_keys: each key written is named here */
};

gw *gw_new(void) { return calloc(1, sizeof(gw)); }

void gw_free(gw *w) {
    if (!w) return;
    if (w->out) df_out_abort(w->out); /* never finished: nothing left at the path */
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w->kv);
    free(w);
}

static int put(gw *w, const void *p, size_t n) {
    if (w->kv_len + n > w->kv_cap) {
        size_t cap = w->kv_cap ? w->kv_cap * 2 : 4096;
        while (cap < w->kv_len + n) cap *= 2;
        uint8_t *nb = realloc(w->kv, cap);
        if (!nb) return -1;
        w->kv = nb;
        w->kv_cap = cap;
    }
    memcpy(w->kv + w->kv_len, p, n);
    w->kv_len += n;
    return 0;
}
static int put_u32(gw *w, uint32_t v) { return put(w, &v, 4); }
static int put_u64(gw *w, uint64_t v) { return put(w, &v, 8); }
static int put_s(gw *w, const char *s) {
    uint64_t n = strlen(s);
    return put_u64(w, n) || put(w, s, (size_t)n);
}
static int key(gw *w, const char *k, uint32_t type) {
    w->n_kv++;
    return put_s(w, k) || put_u32(w, type);
}

void gw_list_keys(gw *w, FILE *f) { w->list = f; }

void gw_drop_keys(gw *w, const char *const *keys, int n) {
    w->drop = keys;
    w->n_drop = n;
}

/* Is k one of the keys to leave out? A dropped name matches the whole key or its part after the architecture
 * ("feed_forward_length" drops "deepseek4.feed_forward_length"). */
static int dropped(const gw *w, const char *k) {
    const char *dot = strchr(k, '.');
    for (int i = 0; i < w->n_drop; i++)
        if (!strcmp(k, w->drop[i]) || (dot && !strcmp(dot + 1, w->drop[i]))) return 1;
    return 0;
}

/* One metadata entry: EXPR writes it; a dropped key's bytes are taken back. */
#define GW_ENTRY(w, k, expr)                                                                                       \
    do {                                                                                                           \
        const size_t mark_ = (w)->kv_len;                                                                          \
        const uint64_t n_kv_ = (w)->n_kv;                                                                          \
        const int rc_ = (expr) ? -1 : 0;                                                                           \
        if (rc_ == 0 && dropped(w, k)) (w)->kv_len = mark_, (w)->n_kv = n_kv_;                                     \
        else if (rc_ == 0 && (w)->list) fprintf((w)->list, "%s\n", k);                                              \
        return rc_;                                                                                                \
    } while (0)

static int arr_str(gw *w, const char *k, const char *const *v, size_t n) {
    if (key(w, k, GGUF_T_ARRAY) || put_u32(w, GGUF_T_STRING) || put_u64(w, n)) return -1;
    for (size_t i = 0; i < n; i++)
        if (put_s(w, v[i])) return -1;
    return 0;
}

int gw_str(gw *w, const char *k, const char *v) { GW_ENTRY(w, k, key(w, k, GGUF_T_STRING) || put_s(w, v)); }
int gw_u32(gw *w, const char *k, uint32_t v) { GW_ENTRY(w, k, key(w, k, GGUF_T_U32) || put_u32(w, v)); }
int gw_i32(gw *w, const char *k, int32_t v) { GW_ENTRY(w, k, key(w, k, GGUF_T_I32) || put(w, &v, 4)); }
int gw_f32(gw *w, const char *k, float v) { GW_ENTRY(w, k, key(w, k, GGUF_T_F32) || put(w, &v, 4)); }
int gw_bool(gw *w, const char *k, int v) {
    uint8_t b = v ? 1 : 0;
    GW_ENTRY(w, k, key(w, k, GGUF_T_BOOL) || put(w, &b, 1));
}
int gw_raw(gw *w, const char *k, uint32_t type, const void *bytes, size_t n) {
    GW_ENTRY(w, k, key(w, k, type) || put(w, bytes, n));
}
int gw_arr_str(gw *w, const char *k, const char *const *v, size_t n) { GW_ENTRY(w, k, arr_str(w, k, v, n)); }
int gw_arr_i32(gw *w, const char *k, const int32_t *v, size_t n) {
    GW_ENTRY(w, k, key(w, k, GGUF_T_ARRAY) || put_u32(w, GGUF_T_I32) || put_u64(w, n) || put(w, v, n * 4));
}
int gw_arr_f32(gw *w, const char *k, const float *v, size_t n) {
    GW_ENTRY(w, k, key(w, k, GGUF_T_ARRAY) || put_u32(w, GGUF_T_F32) || put_u64(w, n) || put(w, v, n * 4));
}

int gw_tensor(gw *w, const char *name, int type, int n_dims, const int64_t *ne) {
    const quant_traits *q = quant_traits_get(type);
    if (!q || !q->name || n_dims < 1 || n_dims > 4 || ne[0] % q->blck) return -1;
    if (w->n_t == w->cap_t) {
        int cap = w->cap_t ? w->cap_t * 2 : 64;
        gw_tensor_info *nt = realloc(w->t, (size_t)cap * sizeof *nt);
        if (!nt) return -1;
        w->t = nt;
        w->cap_t = cap;
    }
    gw_tensor_info *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = df_strdup(name);
    if (!t->name) return -1;
    t->type = type;
    t->n_dims = n_dims;
    uint64_t rows = 1;
    for (int d = 0; d < 4; d++) {
        t->ne[d] = d < n_dims ? ne[d] : 1;
        if (d > 0) rows *= (uint64_t)t->ne[d];
    }
    t->nbytes = (uint64_t)quant_row_size(type, t->ne[0]) * rows;
    return w->n_t++;
}

uint64_t gw_tensor_bytes(const gw *w, int idx) { return w->t[idx].nbytes; }

static int fwrite_all(gw *w, const void *p, size_t n, char *err, size_t errlen) {
    if (n && fwrite(p, 1, n, w->f) != n) return df_seterr(err, errlen, "write failed: %s", strerror(errno));
    w->pos += n;
    return 0;
}

static int pad(gw *w, char *err, size_t errlen) {
    static const uint8_t zeros[GW_ALIGN];
    size_t r = (size_t)(w->pos % GW_ALIGN);
    return r ? fwrite_all(w, zeros, GW_ALIGN - r, err, errlen) : 0;
}

int gw_begin(gw *w, const char *path, char *err, size_t errlen) {
    if (!(w->out = df_out_open(path, "GGUF", 4, NULL, err, errlen))) return -1;
    if (!(w->f = df_out_stream(w->out))) return df_seterr(err, errlen, "%s: %s", path, strerror(errno));
    uint32_t hdr[2] = {0x46554747u /* "GGUF" */, 3};
    uint64_t counts[2] = {(uint64_t)w->n_t, w->n_kv};
    if (fwrite_all(w, hdr, 8, err, errlen) || fwrite_all(w, counts, 16, err, errlen) ||
        fwrite_all(w, w->kv, w->kv_len, err, errlen))
        return -1;
    uint64_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        gw_tensor_info *t = &w->t[i];
        uint64_t nl = strlen(t->name);
        uint32_t nd = (uint32_t)t->n_dims, ty = (uint32_t)t->type;
        t->offset = off;
        if (fwrite_all(w, &nl, 8, err, errlen) || fwrite_all(w, t->name, (size_t)nl, err, errlen) ||
            fwrite_all(w, &nd, 4, err, errlen) || fwrite_all(w, t->ne, 8 * (size_t)t->n_dims, err, errlen) ||
            fwrite_all(w, &ty, 4, err, errlen) || fwrite_all(w, &off, 8, err, errlen))
            return -1;
        off += t->nbytes;
        off = (off + GW_ALIGN - 1) / GW_ALIGN * GW_ALIGN;
    }
    w->cur = 0;
    w->cur_written = 0;
    return pad(w, err, errlen);
}

/* Skip tensors that need no bytes. */
static void skip_empty(gw *w) {
    while (w->cur < w->n_t && w->t[w->cur].nbytes == 0) w->cur++;
}

int gw_data(gw *w, const void *data, size_t n, char *err, size_t errlen) {
    while (n > 0) {
        skip_empty(w);
        if (w->cur >= w->n_t) return df_seterr(err, errlen, "more tensor data than declared");
        gw_tensor_info *t = &w->t[w->cur];
        uint64_t left = t->nbytes - w->cur_written;
        size_t take = n < left ? n : (size_t)left;
        if (fwrite_all(w, data, take, err, errlen)) return -1;
        data = (const uint8_t *)data + take;
        n -= take;
        w->cur_written += take;
        if (w->cur_written == t->nbytes) {
            if (pad(w, err, errlen)) return -1;
            w->cur++;
            w->cur_written = 0;
        }
    }
    return 0;
}

/* The file put in place (rc == 0) or removed. */
static int finish(gw *w, int rc, char *err, size_t errlen) {
    if (rc == 0) rc = df_out_commit(w->out, err, errlen);
    else df_out_abort(w->out);
    w->out = NULL;
    w->f = NULL;
    w->cur = w->n_t;
    return rc;
}

int gw_finish_sparse(gw *w, char *err, size_t errlen) {
    if (w->cur != 0 || w->cur_written != 0) return df_seterr(err, errlen, "tensor data was already written");
    uint64_t end = w->pos; /* the data section starts here, aligned */
    for (int i = 0; i < w->n_t; i++) end += (w->t[i].nbytes + GW_ALIGN - 1) / GW_ALIGN * GW_ALIGN;
    int rc = fflush(w->f) == 0 ? 0 : df_seterr(err, errlen, "flush failed: %s", strerror(errno));
    if (rc == 0 && (end > (uint64_t)INT64_MAX || ftruncate(fileno(w->f), (off_t)end) != 0))
        rc = df_seterr(err, errlen, "cannot extend the file to %llu bytes: %s", (unsigned long long)end, strerror(errno));
    return finish(w, rc, err, errlen);
}

int gw_finish(gw *w, char *err, size_t errlen) {
    skip_empty(w);
    if (w->cur != w->n_t)
        return df_seterr(err, errlen, "tensor '%s' was not written in full", w->t[w->cur].name);
    return finish(w, fflush(w->f) == 0 ? 0 : df_seterr(err, errlen, "flush failed: %s", strerror(errno)), err, errlen);
}
