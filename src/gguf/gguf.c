/*
 * gguf.c - hostile-input-safe GGUF reader.
 *
 * FILE LAYOUT (little-endian, versions 2 and 3)
 *   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x { string key | u32 value_type | value }
 *       string = u64 length + bytes (no NUL)
 *       array  = u32 elem_type + u64 count + count elements
 *   n_tensors x { string name | u32 n_dims | n_dims x i64 ne | u32 type | u64 offset }
 *   padding to general.alignment (default 32)
 *   tensor data; each tensor at data_start + offset
 *
 * DESIGN
 * Parsing runs over an in-memory image (the file is mapped read-only while
 * its header is parsed, then unmapped) through a cursor that checks every
 * read against the bytes left. Counts are checked against the bytes left
 * before anything is allocated for them, so a hostile count cannot make us
 * allocate gigabytes. Everything the caller sees is copied out, validated
 * and NUL-terminated; no pointer into the file image survives parsing.
 * Errors name the file and the key or tensor involved.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "quant.h"
#include "util.h"

#define GGUF_MAX_NAME 64          /* ggml's limit on tensor names (incl. NUL) */
#define GGUF_MAX_KEY 65536        /* generous bound on key length */
#define GGUF_MAX_SPLITS 1000

/* ---- cursor over a bounded image ---- */

typedef struct {
    const uint8_t *p;
    uint64_t size, pos;
    const char *fname;
    char *err;
    size_t errlen;
} cursor;

static uint64_t cur_left(const cursor *c) { return c->size - c->pos; }

static int cur_read(cursor *c, void *dst, uint64_t n, const char *what) {
    if (n > cur_left(c))
        return df_seterr(c->err, c->errlen, "%s: truncated file: %s needs %llu bytes at offset %llu, %llu left",
                         c->fname, what, (unsigned long long)n, (unsigned long long)c->pos,
                         (unsigned long long)cur_left(c));
    memcpy(dst, c->p + c->pos, (size_t)n);
    c->pos += n;
    return 0;
}

static int cur_u32(cursor *c, uint32_t *v, const char *what) { return cur_read(c, v, 4, what); }
static int cur_u64(cursor *c, uint64_t *v, const char *what) { return cur_read(c, v, 8, what); }

/* Read a string: returns a malloc'd NUL-terminated copy and its length. */
static int cur_str(cursor *c, char **out, uint64_t *len_out, uint64_t max_len, const char *what) {
    uint64_t len;
    if (cur_u64(c, &len, what) != 0) return -1;
    if (len > cur_left(c))
        return df_seterr(c->err, c->errlen, "%s: %s: string length %llu exceeds the %llu bytes left in the file",
                         c->fname, what, (unsigned long long)len, (unsigned long long)cur_left(c));
    if (len > max_len)
        return df_seterr(c->err, c->errlen, "%s: %s: string length %llu exceeds the limit %llu", c->fname, what,
                         (unsigned long long)len, (unsigned long long)max_len);
    char *s = malloc((size_t)len + 1);
    if (!s) return df_seterr(c->err, c->errlen, "%s: out of memory reading %s", c->fname, what);
    memcpy(s, c->p + c->pos, (size_t)len);
    s[len] = 0;
    c->pos += len;
    *out = s;
    if (len_out) *len_out = len;
    return 0;
}

/* ---- value types ---- */

static const char *vtype_names[GGUF_T_COUNT] = {"u8",   "i8",    "u16",   "i16", "u32", "i32", "f32",
                                                 "bool", "string", "array", "u64", "i64", "f64"};
static const uint8_t vtype_size[GGUF_T_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *gguf_vtype_name(int t) { return (t >= 0 && t < GGUF_T_COUNT) ? vtype_names[t] : "invalid"; }

static int vtype_is_int(int t) {
    return t == GGUF_T_U8 || t == GGUF_T_I8 || t == GGUF_T_U16 || t == GGUF_T_I16 || t == GGUF_T_U32 ||
           t == GGUF_T_I32 || t == GGUF_T_U64 || t == GGUF_T_I64 || t == GGUF_T_BOOL;
}
static int vtype_is_signed(int t) {
    return t == GGUF_T_I8 || t == GGUF_T_I16 || t == GGUF_T_I32 || t == GGUF_T_I64;
}

/* Decode a fixed-size scalar of type t from raw little-endian bytes into kv->v. */
static void decode_scalar(int t, const uint8_t *b, gguf_kv *kv) {
    switch (t) {
    case GGUF_T_U8: case GGUF_T_BOOL: kv->v.u = b[0]; break;
    case GGUF_T_I8: kv->v.i = (int8_t)b[0]; break;
    case GGUF_T_U16: { uint16_t x; memcpy(&x, b, 2); kv->v.u = x; break; }
    case GGUF_T_I16: { int16_t x; memcpy(&x, b, 2); kv->v.i = x; break; }
    case GGUF_T_U32: { uint32_t x; memcpy(&x, b, 4); kv->v.u = x; break; }
    case GGUF_T_I32: { int32_t x; memcpy(&x, b, 4); kv->v.i = x; break; }
    case GGUF_T_U64: { uint64_t x; memcpy(&x, b, 8); kv->v.u = x; break; }
    case GGUF_T_I64: { int64_t x; memcpy(&x, b, 8); kv->v.i = x; break; }
    case GGUF_T_F32: { float x; memcpy(&x, b, 4); kv->v.f = x; break; }
    case GGUF_T_F64: { double x; memcpy(&x, b, 8); kv->v.f = x; break; }
    default: break;
    }
}

static void kv_free(gguf_kv *kv) {
    free(kv->key);
    free(kv->str);
    if (kv->type == GGUF_T_ARRAY && kv->arr_type == GGUF_T_STRING && kv->arr) {
        /* strings share one arena that starts at element 0 */
        char **s = kv->arr;
        if (kv->arr_n) free(s[0]);
    }
    free(kv->arr);
    free(kv->arr_str_len);
}

/* Read an array value into kv. */
static int read_array(cursor *c, gguf_kv *kv) {
    uint32_t at;
    uint64_t n;
    /* (the key is the "what": a truncated array header names its key) */
    if (cur_u32(c, &at, kv->key) != 0 || cur_u64(c, &n, kv->key) != 0) return -1;
    if (at >= GGUF_T_COUNT || at == GGUF_T_ARRAY)
        return df_seterr(c->err, c->errlen, "%s: key '%s': invalid array element type %u%s", c->fname, kv->key, at,
                         at == GGUF_T_ARRAY ? " (nested arrays are not supported)" : "");
    kv->arr_type = (int)at;
    kv->arr_n = n;
    if (at != GGUF_T_STRING) {
        uint64_t bytes;
        if (df_mul_u64(n, vtype_size[at], &bytes) != 0 || bytes > cur_left(c))
            return df_seterr(c->err, c->errlen, "%s: key '%s': array of %llu %s elements exceeds the file size",
                             c->fname, kv->key, (unsigned long long)n, vtype_names[at]);
        kv->arr = malloc(bytes ? (size_t)bytes : 1);
        if (!kv->arr) return df_seterr(c->err, c->errlen, "%s: key '%s': out of memory", c->fname, kv->key);
        if (at == GGUF_T_BOOL) {
            for (uint64_t i = 0; i < n; i++) {
                uint8_t b = c->p[c->pos + i];
                if (b > 1)
                    return df_seterr(c->err, c->errlen, "%s: key '%s': bool element %llu has value %u", c->fname,
                                     kv->key, (unsigned long long)i, b);
            }
        }
        memcpy(kv->arr, c->p + c->pos, (size_t)bytes);
        c->pos += bytes;
        return 0;
    }
    /* Strings: each needs at least 8 bytes of length, so bound n first. */
    if (n > cur_left(c) / 8)
        return df_seterr(c->err, c->errlen, "%s: key '%s': array of %llu strings exceeds the file size", c->fname,
                         kv->key, (unsigned long long)n);
    /* Pass 1: validate lengths and total the bytes. */
    uint64_t pos = c->pos, total = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len;
        if (c->size - pos < 8)
            return df_seterr(c->err, c->errlen, "%s: key '%s': truncated string %llu", c->fname, kv->key,
                             (unsigned long long)i);
        memcpy(&len, c->p + pos, 8);
        pos += 8;
        if (len > c->size - pos)
            return df_seterr(c->err, c->errlen, "%s: key '%s': string %llu has length %llu past the end of the file",
                             c->fname, kv->key, (unsigned long long)i, (unsigned long long)len);
        pos += len;
        total += len + 1;
    }
    char **arr = malloc((size_t)(n ? n : 1) * sizeof(char *));
    uint64_t *lens = malloc((size_t)(n ? n : 1) * sizeof(uint64_t));
    char *arena = malloc((size_t)(total ? total : 1));
    if (!arr || !lens || !arena) {
        free(arr); free(lens); free(arena);
        return df_seterr(c->err, c->errlen, "%s: key '%s': out of memory for %llu strings", c->fname, kv->key,
                         (unsigned long long)n);
    }
    char *w = arena;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len;
        memcpy(&len, c->p + c->pos, 8);
        c->pos += 8;
        memcpy(w, c->p + c->pos, (size_t)len);
        w[len] = 0;
        arr[i] = w;
        lens[i] = len;
        w += len + 1;
        c->pos += len;
    }
    if (n == 0) free(arena); /* kv_free frees the arena through arr[0] only when n > 0 */
    kv->arr = arr;
    kv->arr_str_len = lens;
    return 0;
}

static int read_kv(cursor *c, gguf_kv *kv, uint64_t idx) {
    char what[64];
    snprintf(what, sizeof what, "key %llu", (unsigned long long)idx);
    uint64_t klen;
    if (cur_str(c, &kv->key, &klen, GGUF_MAX_KEY, what) != 0) return -1;
    if (klen == 0 || strlen(kv->key) != klen)
        return df_seterr(c->err, c->errlen, "%s: key %llu is empty or contains a NUL byte", c->fname,
                         (unsigned long long)idx);
    uint32_t t;
    if (cur_u32(c, &t, kv->key) != 0) return -1; /* a truncated value type names its key */
    if (t >= GGUF_T_COUNT)
        return df_seterr(c->err, c->errlen, "%s: key '%s': invalid value type %u", c->fname, kv->key, t);
    kv->type = (int)t;
    if (t == GGUF_T_STRING) return cur_str(c, &kv->str, &kv->str_len, UINT64_MAX, kv->key);
    if (t == GGUF_T_ARRAY) return read_array(c, kv);
    uint8_t b[8];
    if (cur_read(c, b, vtype_size[t], kv->key) != 0) return -1;
    if (t == GGUF_T_BOOL && b[0] > 1)
        return df_seterr(c->err, c->errlen, "%s: key '%s': bool has value %u", c->fname, kv->key, b[0]);
    decode_scalar((int)t, b, kv);
    return 0;
}

/* ---- name index (open addressing over tensor indices) ---- */

typedef struct {
    uint64_t cap;    /* power of two */
    uint64_t seed;   /* random per index */
    int64_t *slot;   /* tensor index or -1 */
} name_index;

/* Bucket hash: FNV-1a started from a per-index random state, then murmur3's
 * finaliser so every bit reaches the low bits used as the bucket. Plain
 * FNV-1a's low k bits depend only on the low k bits of its state, so a file
 * could carry names crafted to share one bucket and make the index quadratic
 * (100k such tensors took 45 s); with a secret seed they cannot be aimed. */
static uint64_t hash_str(const char *s, uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static uint64_t random_seed(const void *salt) {
    uint64_t s = 0;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s)
        s = ((uint64_t)(uintptr_t)salt ^ (uint64_t)time(NULL)) * 0x9e3779b97f4a7c15ull;
    return s;
}

/* Build the index; returns 0, or -1 with err naming a duplicate. */
static int index_build(gguf_ctx *ctx, char *err, size_t errlen) {
    name_index *ix = calloc(1, sizeof *ix);
    if (!ix) return df_seterr(err, errlen, "out of memory");
    ix->cap = 16;
    ix->seed = random_seed(ix);
    while (ix->cap < ctx->n_tensors * 2) ix->cap <<= 1;
    ix->slot = malloc((size_t)ix->cap * sizeof(int64_t));
    if (!ix->slot) { free(ix); return df_seterr(err, errlen, "out of memory"); }
    for (uint64_t i = 0; i < ix->cap; i++) ix->slot[i] = -1;
    ctx->name_index = ix;
    for (uint64_t i = 0; i < ctx->n_tensors; i++) {
        uint64_t h = hash_str(ctx->tensors[i].name, ix->seed) & (ix->cap - 1);
        while (ix->slot[h] >= 0) {
            if (strcmp(ctx->tensors[ix->slot[h]].name, ctx->tensors[i].name) == 0)
                return df_seterr(err, errlen, "%s: duplicate tensor name '%s'", ctx->files[ctx->tensors[i].file].path,
                                 ctx->tensors[i].name);
            h = (h + 1) & (ix->cap - 1);
        }
        ix->slot[h] = (int64_t)i;
    }
    return 0;
}

const gguf_tensor *gguf_find_tensor(const gguf_ctx *ctx, const char *name) {
    const name_index *ix = ctx->name_index;
    if (!ix) return NULL;
    uint64_t h = hash_str(name, ix->seed) & (ix->cap - 1);
    while (ix->slot[h] >= 0) {
        const gguf_tensor *t = &ctx->tensors[ix->slot[h]];
        if (strcmp(t->name, name) == 0) return t;
        h = (h + 1) & (ix->cap - 1);
    }
    return NULL;
}

/* ---- one file image ---- */

typedef struct {
    int version;
    uint64_t n_kv, n_tensors, alignment, data_offset;
    gguf_kv *kv;
    gguf_tensor *tensors;
} image;

static void image_free(image *im) {
    for (uint64_t i = 0; im->kv && i < im->n_kv; i++) kv_free(&im->kv[i]);
    for (uint64_t i = 0; im->tensors && i < im->n_tensors; i++) free(im->tensors[i].name);
    free(im->kv);
    free(im->tensors);
    memset(im, 0, sizeof *im);
}

static const gguf_kv *kv_lookup(const gguf_kv *kv, uint64_t n, const char *key) {
    for (uint64_t i = 0; i < n; i++)
        if (kv[i].key && strcmp(kv[i].key, key) == 0) return &kv[i];
    return NULL;
}

static int cmp_kv_key(const void *a, const void *b) {
    return strcmp((*(const gguf_kv *const *)a)->key, (*(const gguf_kv *const *)b)->key);
}

/* Reject duplicate metadata keys by sorting them: O(n log n) whatever the keys
 * are. (A pairwise scan is quadratic: a 2 MB file of 100k keys took 21 s.) */
static int check_dup_keys(const image *im, const char *fname, char *err, size_t errlen) {
    if (im->n_kv < 2) return 0;
    const gguf_kv **v = malloc((size_t)im->n_kv * sizeof *v);
    if (!v) return df_seterr(err, errlen, "%s: out of memory", fname);
    for (uint64_t i = 0; i < im->n_kv; i++) v[i] = &im->kv[i];
    qsort(v, (size_t)im->n_kv, sizeof *v, cmp_kv_key);
    int rc = 0;
    for (uint64_t i = 1; i < im->n_kv && rc == 0; i++)
        if (strcmp(v[i - 1]->key, v[i]->key) == 0)
            rc = df_seterr(err, errlen, "%s: duplicate metadata key '%s'", fname, v[i]->key);
    free(v);
    return rc;
}

static int read_tensor_info(cursor *c, gguf_tensor *t, uint64_t idx) {
    char what[64];
    snprintf(what, sizeof what, "tensor %llu name", (unsigned long long)idx);
    uint64_t nlen;
    if (cur_str(c, &t->name, &nlen, UINT64_MAX, what) != 0) return -1;
    if (nlen >= GGUF_MAX_NAME)
        return df_seterr(c->err, c->errlen, "%s: tensor %llu: name of %llu bytes is longer than %d", c->fname,
                         (unsigned long long)idx, (unsigned long long)nlen, GGUF_MAX_NAME - 1);
    if (nlen == 0 || strlen(t->name) != nlen)
        return df_seterr(c->err, c->errlen, "%s: tensor %llu: empty name or name with a NUL byte", c->fname,
                         (unsigned long long)idx);
    uint32_t nd;
    if (cur_u32(c, &nd, t->name) != 0) return -1;
    if (nd < 1 || nd > GGUF_MAX_DIMS)
        return df_seterr(c->err, c->errlen, "%s: tensor '%s': %u dimensions (1 to %d allowed)", c->fname, t->name, nd,
                         GGUF_MAX_DIMS);
    t->n_dims = (int)nd;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
        int64_t ne;
        if (cur_read(c, &ne, 8, t->name) != 0) return -1;
        if (ne < 0)
            return df_seterr(c->err, c->errlen, "%s: tensor '%s': dimension %u is negative (%lld)", c->fname, t->name,
                             d, (long long)ne);
        t->ne[d] = ne;
    }
    uint32_t type;
    uint64_t off;
    if (cur_u32(c, &type, t->name) != 0 || cur_u64(c, &off, t->name) != 0) return -1;
    const quant_traits *qt = quant_traits_get((int)type);
    if (!qt || !qt->name)
        return df_seterr(c->err, c->errlen, "%s: tensor '%s': unknown tensor type %u", c->fname, t->name, type);
    t->type = (int)type;
    t->offset = off;
    /* element count and byte size, overflow-checked (ggml keeps them in int64) */
    uint64_t n = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        if (df_mul_u64(n, (uint64_t)t->ne[d], &n) != 0 || n > (uint64_t)INT64_MAX)
            return df_seterr(c->err, c->errlen, "%s: tensor '%s': element count overflows", c->fname, t->name);
    t->n_elements = n;
    if (t->ne[0] % qt->blck != 0)
        return df_seterr(c->err, c->errlen, "%s: tensor '%s': row length %lld is not a multiple of the %s block size %d",
                         c->fname, t->name, (long long)t->ne[0], qt->name, qt->blck);
    uint64_t nb = (uint64_t)t->ne[0] / (uint64_t)qt->blck;
    if (df_mul_u64(nb, qt->type_size, &nb) != 0) goto ovf;
    for (int d = 1; d < GGUF_MAX_DIMS; d++)
        if (df_mul_u64(nb, (uint64_t)t->ne[d], &nb) != 0) goto ovf;
    if (nb > (uint64_t)INT64_MAX) goto ovf;
    t->nbytes = nb;
    return 0;
ovf:
    return df_seterr(c->err, c->errlen, "%s: tensor '%s': byte size overflows", c->fname, t->name);
}

/* Parse one GGUF image of size bytes. */
static int parse_image(const uint8_t *p, uint64_t size, const char *fname, image *im, char *err, size_t errlen) {
    cursor c = {p, size, 0, fname, err, errlen};
    memset(im, 0, sizeof *im);
    uint8_t magic[4];
    uint32_t version;
    if (cur_read(&c, magic, 4, "magic") != 0) return -1;
    if (memcmp(magic, "GGUF", 4) != 0) return df_seterr(err, errlen, "%s: not a GGUF file (bad magic)", fname);
    if (cur_u32(&c, &version, "version") != 0) return -1;
    if (version == 1) return df_seterr(err, errlen, "%s: GGUF version 1 is not supported (only 2 and 3)", fname);
    if ((version & 0xffff) == 0 && version != 0)
        return df_seterr(err, errlen, "%s: big-endian GGUF files are not supported", fname);
    if (version < 2 || version > 3)
        return df_seterr(err, errlen, "%s: unsupported GGUF version %u (only 2 and 3)", fname, version);
    im->version = (int)version;
    uint64_t nt, nkv;
    if (cur_u64(&c, &nt, "tensor count") != 0 || cur_u64(&c, &nkv, "metadata count") != 0) return -1;
    /* A key-value pair takes at least 8+1+4+1 bytes, a tensor info at least 8+1+4+8+4+8. */
    if (nkv > cur_left(&c) / 14)
        return df_seterr(err, errlen, "%s: metadata count %llu is impossible for a file of %llu bytes", fname,
                         (unsigned long long)nkv, (unsigned long long)size);
    if (nt > cur_left(&c) / 33)
        return df_seterr(err, errlen, "%s: tensor count %llu is impossible for a file of %llu bytes", fname,
                         (unsigned long long)nt, (unsigned long long)size);
    im->kv = calloc(nkv ? nkv : 1, sizeof(gguf_kv));
    im->tensors = calloc(nt ? nt : 1, sizeof(gguf_tensor));
    if (!im->kv || !im->tensors) return df_seterr(err, errlen, "%s: out of memory", fname);
    for (uint64_t i = 0; i < nkv; i++) {
        im->n_kv = i + 1;
        if (read_kv(&c, &im->kv[i], i) != 0) return -1;
    }
    if (check_dup_keys(im, fname, err, errlen) != 0) return -1;
    im->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *al = kv_lookup(im->kv, im->n_kv, "general.alignment");
    if (al) {
        if (!vtype_is_int(al->type) || al->type == GGUF_T_BOOL || al->v.u == 0 || (al->v.u & (al->v.u - 1)) != 0 ||
            al->v.u > (1u << 30))
            return df_seterr(err, errlen, "%s: general.alignment must be a power of two integer (got type %s, value %llu)",
                             fname, gguf_vtype_name(al->type), (unsigned long long)al->v.u);
        im->alignment = al->v.u;
    }
    for (uint64_t i = 0; i < nt; i++) {
        im->n_tensors = i + 1;
        if (read_tensor_info(&c, &im->tensors[i], i) != 0) return -1;
        if (im->tensors[i].offset % im->alignment != 0)
            return df_seterr(err, errlen, "%s: tensor '%s': offset %llu is not a multiple of the alignment %llu", fname,
                             im->tensors[i].name, (unsigned long long)im->tensors[i].offset,
                             (unsigned long long)im->alignment);
    }
    uint64_t data = c.pos;
    if (data % im->alignment) data += im->alignment - data % im->alignment;
    im->data_offset = data;
    for (uint64_t i = 0; i < nt; i++) {
        gguf_tensor *t = &im->tensors[i];
        uint64_t start, end;
        if (df_add_u64(data, t->offset, &start) != 0 || df_add_u64(start, t->nbytes, &end) != 0 || end > size)
            return df_seterr(err, errlen,
                             "%s: tensor '%s': data at offset %llu (+%llu bytes) extends past the end of the file (%llu bytes)",
                             fname, t->name, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                             (unsigned long long)size);
        t->offset = start;
    }
    return 0;
}

/* ---- context assembly ---- */

void gguf_close(gguf_ctx *ctx) {
    if (!ctx) return;
    for (uint64_t i = 0; ctx->kv && i < ctx->n_kv; i++) kv_free(&ctx->kv[i]);
    for (uint64_t i = 0; ctx->tensors && i < ctx->n_tensors; i++) free(ctx->tensors[i].name);
    for (int i = 0; ctx->files && i < ctx->n_files; i++) {
        if (ctx->files[i].fd >= 0) close(ctx->files[i].fd);
        free(ctx->files[i].path);
    }
    name_index *ix = ctx->name_index;
    if (ix) free(ix->slot);
    free(ix);
    free(ctx->files);
    free(ctx->kv);
    free(ctx->tensors);
    free(ctx);
}

/* Map and parse one file. On success the fd stays open in f. */
static int load_file(const char *path, gguf_file *f, image *im, char *err, size_t errlen) {
    f->fd = -1;
    f->path = df_strdup(path);
    if (!f->path) return df_seterr(err, errlen, "out of memory");
    /* O_NONBLOCK: opening a FIFO would otherwise wait forever for a writer before
     * the S_ISREG check below could refuse it (it does nothing for regular files). */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return df_seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno));
    f->fd = fd;
    struct stat st;
    if (fstat(fd, &st) != 0) return df_seterr(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return df_seterr(err, errlen, "%s: not a regular file", path);
    f->size = (uint64_t)st.st_size;
    if (f->size < 24) return df_seterr(err, errlen, "%s: file too small to be GGUF (%llu bytes)", path,
                                       (unsigned long long)f->size);
    void *m = mmap(NULL, (size_t)f->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) return df_seterr(err, errlen, "%s: cannot map: %s", path, strerror(errno));
    int rc = parse_image(m, f->size, path, im, err, errlen);
    munmap(m, (size_t)f->size);
    f->data_offset = im->data_offset;
    return rc;
}

/* Move an image's contents into ctx (metadata only from the first file). */
static int absorb(gguf_ctx *ctx, image *im, int file_idx, char *err, size_t errlen) {
    if (file_idx == 0) {
        ctx->version = im->version;
        ctx->alignment = im->alignment;
        ctx->kv = im->kv;
        ctx->n_kv = im->n_kv;
        im->kv = NULL;
        im->n_kv = 0;
    }
    uint64_t n = ctx->n_tensors + im->n_tensors;
    gguf_tensor *t = realloc(ctx->tensors, (size_t)(n ? n : 1) * sizeof *t);
    if (!t) return df_seterr(err, errlen, "out of memory");
    ctx->tensors = t;
    for (uint64_t i = 0; i < im->n_tensors; i++) {
        t[ctx->n_tensors + i] = im->tensors[i];
        t[ctx->n_tensors + i].file = file_idx;
        im->tensors[i].name = NULL;
    }
    ctx->n_tensors = n;
    image_free(im);
    return 0;
}

/* Integer value of a metadata key, or -1 when absent/not an integer. */
static int kv_int(const gguf_kv *kv, uint64_t n, const char *key, uint64_t *out) {
    const gguf_kv *k = kv_lookup(kv, n, key);
    if (!k || !vtype_is_int(k->type) || (vtype_is_signed(k->type) && k->v.i < 0)) return -1;
    *out = k->v.u;
    return 0;
}

/* Split models: "PREFIX-00001-of-0000N.gguf". Returns the prefix length or 0. */
static size_t split_prefix_len(const char *path, uint64_t count) {
    char tail[64];
    snprintf(tail, sizeof tail, "-%05d-of-%05d.gguf", 1, (int)count);
    size_t lp = strlen(path), lt = strlen(tail);
    if (lp <= lt || strcmp(path + lp - lt, tail) != 0) return 0;
    return lp - lt;
}

int gguf_open(const char *path, gguf_ctx **out, char *err, size_t errlen) {
    *out = NULL;
    gguf_ctx *ctx = calloc(1, sizeof *ctx);
    image im;
    memset(&im, 0, sizeof im);
    char *other = NULL;
    if (!ctx) return df_seterr(err, errlen, "out of memory");
    ctx->files = calloc(1, sizeof(gguf_file));
    if (!ctx->files) goto oom;
    ctx->n_files = 1;
    if (load_file(path, &ctx->files[0], &im, err, errlen) != 0) goto fail;
    if (absorb(ctx, &im, 0, err, errlen) != 0) goto fail;

    uint64_t count = 1;
    if (kv_int(ctx->kv, ctx->n_kv, "split.count", &count) == 0 && count > 1) {
        uint64_t no = 0;
        if (kv_int(ctx->kv, ctx->n_kv, "split.no", &no) == 0 && no != 0) {
            df_seterr(err, errlen, "%s: this is split %llu of %llu: open the first file (-00001-of-%05llu.gguf)", path,
                      (unsigned long long)no + 1, (unsigned long long)count, (unsigned long long)count);
            goto fail;
        }
        if (count > GGUF_MAX_SPLITS) {
            df_seterr(err, errlen, "%s: split.count %llu is out of range (1 to %d)", path, (unsigned long long)count,
                      GGUF_MAX_SPLITS);
            goto fail;
        }
        size_t pl = split_prefix_len(path, count);
        if (pl == 0) {
            df_seterr(err, errlen, "%s: split.count is %llu but the name does not end in -00001-of-%05llu.gguf", path,
                      (unsigned long long)count, (unsigned long long)count);
            goto fail;
        }
        gguf_file *nf = realloc(ctx->files, (size_t)count * sizeof *nf);
        if (!nf) goto oom;
        ctx->files = nf;
        other = malloc(pl + 64);
        if (!other) goto oom;
        for (uint64_t i = 1; i < count; i++) {
            memcpy(other, path, pl);
            snprintf(other + pl, 64, "-%05d-of-%05d.gguf", (int)i + 1, (int)count);
            memset(&ctx->files[i], 0, sizeof ctx->files[i]);
            ctx->files[i].fd = -1;
            ctx->n_files = (int)i + 1;
            if (load_file(other, &ctx->files[i], &im, err, errlen) != 0) goto fail;
            uint64_t sno;
            if (kv_int(im.kv, im.n_kv, "split.no", &sno) != 0 || sno != i) {
                df_seterr(err, errlen, "%s: split.no is missing or not %llu", other, (unsigned long long)i);
                goto fail;
            }
            if (absorb(ctx, &im, (int)i, err, errlen) != 0) goto fail;
        }
        uint64_t total;
        if (kv_int(ctx->kv, ctx->n_kv, "split.tensors.count", &total) == 0 && total != ctx->n_tensors) {
            df_seterr(err, errlen, "%s: split.tensors.count says %llu tensors but the %llu files hold %llu", path,
                      (unsigned long long)total, (unsigned long long)count, (unsigned long long)ctx->n_tensors);
            goto fail;
        }
    }
    if (index_build(ctx, err, errlen) != 0) goto fail;
    free(other);
    *out = ctx;
    return 0;
oom:
    df_seterr(err, errlen, "%s: out of memory", path);
fail:
    free(other);
    image_free(&im);
    gguf_close(ctx);
    return -1;
}

int gguf_parse_buffer(const void *buf, size_t size, gguf_ctx **out, char *err, size_t errlen) {
    *out = NULL;
    image im;
    memset(&im, 0, sizeof im); /* image_free runs on it even when parse_image never did */
    gguf_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return df_seterr(err, errlen, "out of memory");
    ctx->files = calloc(1, sizeof(gguf_file));
    if (!ctx->files) { free(ctx); return df_seterr(err, errlen, "out of memory"); }
    ctx->n_files = 1;
    ctx->files[0].fd = -1;
    ctx->files[0].size = size;
    ctx->files[0].path = df_strdup("<buffer>");
    int rc = !ctx->files[0].path ? -1 : parse_image(buf, size, "<buffer>", &im, err, errlen);
    ctx->files[0].data_offset = im.data_offset; /* as load_file does for files */
    if (rc != 0 || absorb(ctx, &im, 0, err, errlen) != 0 || index_build(ctx, err, errlen) != 0) {
        if (!ctx->files[0].path) df_seterr(err, errlen, "out of memory");
        image_free(&im);
        gguf_close(ctx);
        return -1;
    }
    *out = ctx;
    return 0;
}

/* ---- typed getters ---- */

const gguf_kv *gguf_find(const gguf_ctx *ctx, const char *key) { return kv_lookup(ctx->kv, ctx->n_kv, key); }

static int get_int(const gguf_ctx *ctx, const char *key, int64_t lo, uint64_t hi, int want_signed, uint64_t *uo,
                   int64_t *io, char *err, size_t errlen) {
    const gguf_kv *k = gguf_find(ctx, key);
    if (!k) return df_seterr(err, errlen, "missing metadata key '%s'", key);
    if (!vtype_is_int(k->type) || k->type == GGUF_T_BOOL)
        return df_seterr(err, errlen, "metadata key '%s' has type %s, expected an integer", key,
                         gguf_vtype_name(k->type));
    if (vtype_is_signed(k->type)) {
        if (k->v.i < lo || (k->v.i > 0 && (uint64_t)k->v.i > hi))
            return df_seterr(err, errlen, "metadata key '%s' = %lld is out of range", key, (long long)k->v.i);
        if (uo) *uo = (uint64_t)k->v.i;
        if (io) *io = k->v.i;
    } else {
        if (k->v.u > hi) return df_seterr(err, errlen, "metadata key '%s' = %llu is out of range", key,
                                          (unsigned long long)k->v.u);
        if (uo) *uo = k->v.u;
        if (io) *io = (int64_t)k->v.u;
    }
    (void)want_signed;
    return 0;
}

int gguf_get_u32(const gguf_ctx *ctx, const char *key, uint32_t *out, char *err, size_t errlen) {
    uint64_t v;
    if (get_int(ctx, key, 0, UINT32_MAX, 0, &v, NULL, err, errlen) != 0) return -1;
    *out = (uint32_t)v;
    return 0;
}

int gguf_get_u64(const gguf_ctx *ctx, const char *key, uint64_t *out, char *err, size_t errlen) {
    return get_int(ctx, key, 0, UINT64_MAX, 0, out, NULL, err, errlen);
}

int gguf_get_i64(const gguf_ctx *ctx, const char *key, int64_t *out, char *err, size_t errlen) {
    return get_int(ctx, key, INT64_MIN, INT64_MAX, 1, NULL, out, err, errlen);
}

int gguf_get_f32(const gguf_ctx *ctx, const char *key, float *out, char *err, size_t errlen) {
    const gguf_kv *k = gguf_find(ctx, key);
    if (!k) return df_seterr(err, errlen, "missing metadata key '%s'", key);
    if (k->type == GGUF_T_F64 && isfinite(k->v.f) && fabs(k->v.f) > FLT_MAX)
        return df_seterr(err, errlen, "metadata key '%s' = %g is out of range for f32", key, k->v.f);
    if (k->type == GGUF_T_F32 || k->type == GGUF_T_F64) *out = (float)k->v.f;
    else if (vtype_is_int(k->type) && k->type != GGUF_T_BOOL)
        *out = vtype_is_signed(k->type) ? (float)k->v.i : (float)k->v.u;
    else
        return df_seterr(err, errlen, "metadata key '%s' has type %s, expected a number", key, gguf_vtype_name(k->type));
    return 0;
}

int gguf_get_bool(const gguf_ctx *ctx, const char *key, int *out, char *err, size_t errlen) {
    const gguf_kv *k = gguf_find(ctx, key);
    if (!k) return df_seterr(err, errlen, "missing metadata key '%s'", key);
    if (k->type != GGUF_T_BOOL)
        return df_seterr(err, errlen, "metadata key '%s' has type %s, expected bool", key, gguf_vtype_name(k->type));
    *out = k->v.u != 0;
    return 0;
}

const char *gguf_get_str(const gguf_ctx *ctx, const char *key) {
    const gguf_kv *k = gguf_find(ctx, key);
    return (k && k->type == GGUF_T_STRING) ? k->str : NULL;
}

const gguf_kv *gguf_get_arr(const gguf_ctx *ctx, const char *key, int elem_type) {
    const gguf_kv *k = gguf_find(ctx, key);
    if (!k || k->type != GGUF_T_ARRAY) return NULL;
    if (elem_type >= 0 && k->arr_type != elem_type) return NULL;
    return k;
}

/* ---- fingerprint ---- */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* Hash n bytes of file f at off into *h. */
static int hash_span(const gguf_file *f, uint64_t off, uint64_t n, uint64_t *h, char *err, size_t errlen) {
    uint8_t buf[1 << 16];
    while (n > 0) {
        const size_t want = n < sizeof buf ? (size_t)n : sizeof buf;
        const ssize_t got = pread(f->fd, buf, want, (off_t)off);
        if (got <= 0) return df_seterr(err, errlen, "%s: cannot read: %s", f->path, got < 0 ? strerror(errno) : "short file");
        *h = fnv(*h, buf, (size_t)got);
        off += (uint64_t)got;
        n -= (uint64_t)got;
    }
    return 0;
}

int gguf_fingerprint(const gguf_ctx *g, uint64_t *out, char *err, size_t errlen) {
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, &g->n_files, sizeof g->n_files);
    for (int i = 0; i < g->n_files; i++) {
        const gguf_file *f = &g->files[i];
        if (f->fd < 0) return df_seterr(err, errlen, "%s: not open", f->path);
        h = fnv(h, &f->size, sizeof f->size);
        const uint64_t head = f->data_offset < (64u << 20) ? f->data_offset : (64u << 20);
        if (hash_span(f, 0, head, &h, err, errlen) != 0) return -1;
        const uint64_t data = f->size - f->data_offset, sample = 4096;
        for (int k = 0; k < 16 && data >= sample; k++)
            if (hash_span(f, f->data_offset + (data - sample) / 15 * (uint64_t)k, sample, &h, err, errlen) != 0)
                return -1;
    }
    *out = h;
    return 0;
}
