/*
 * dequant.c - write a GGUF model with every tensor dequantized to F32: the
 * "float truth" of a quantized file.
 *
 *   dequant -i MODEL.gguf -o MODEL-f32.gguf
 *
 * Why: a quantized engine is judged by how close its logits come to those of
 * the very same weights in full precision. This tool makes that model: the
 * same metadata (tokenizer, hyperparameters, chat template, except the keys
 * that would now lie: general.file_type, general.alignment and split.*) and
 * the same tensors, each dequantized row by row (integer tables, i32, copied
 * as they are) with Deltafin's scalar
 * reference (quant.c, checked against ggml's own values in
 * tests/test_quant.c). llama.cpp run on the result gives the truth that
 * tools/logitcmp.c and tests/truth.sh measure both engines against.
 * Reads the input through the hostile-input-safe GGUF reader (split files
 * too); writes a new file (it refuses to overwrite the input).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "gguf_write.h"
#include "quant.h"

static void die(const char *a, const char *b) {
    fprintf(stderr, "dequant: %s%s\n", a, b ? b : "");
    exit(1);
}

/* A growable byte buffer for one metadata value's encoding. */
typedef struct {
    unsigned char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) die("out of memory", NULL);
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static size_t scalar_size(int t) {
    switch (t) {
    case GGUF_T_U8: case GGUF_T_I8: case GGUF_T_BOOL: return 1;
    case GGUF_T_U16: case GGUF_T_I16: return 2;
    case GGUF_T_U32: case GGUF_T_I32: case GGUF_T_F32: return 4;
    case GGUF_T_U64: case GGUF_T_I64: case GGUF_T_F64: return 8;
    default: return 0;
    }
}

static void put_string(buf *b, const char *s, uint64_t len) {
    put(b, &len, 8);
    put(b, s, (size_t)len);
}

/* The value of kv encoded as GGUF stores it after the key and type. */
static void encode(const gguf_kv *kv, buf *b) {
    if (kv->type == GGUF_T_STRING) {
        put_string(b, kv->str, kv->str_len);
    } else if (kv->type == GGUF_T_ARRAY) {
        const uint32_t et = (uint32_t)kv->arr_type;
        put(b, &et, 4);
        put(b, &kv->arr_n, 8);
        if (kv->arr_type == GGUF_T_STRING) {
            char **s = kv->arr;
            for (uint64_t i = 0; i < kv->arr_n; i++) put_string(b, s[i], kv->arr_str_len[i]);
        } else {
            const size_t es = scalar_size(kv->arr_type);
            if (!es) die("unsupported nested array in key ", kv->key);
            put(b, kv->arr, (size_t)(es * kv->arr_n));
        }
    } else {
        const size_t es = scalar_size(kv->type);
        if (!es) die("unsupported metadata type in key ", kv->key);
        float f32;
        int8_t i8;
        int16_t i16;
        int32_t i32;
        switch (kv->type) { /* the reader widened scalars: narrow them back */
        case GGUF_T_F32: f32 = (float)kv->v.f; put(b, &f32, 4); break;
        case GGUF_T_F64: put(b, &kv->v.f, 8); break;
        case GGUF_T_I8: i8 = (int8_t)kv->v.i; put(b, &i8, 1); break;
        case GGUF_T_I16: i16 = (int16_t)kv->v.i; put(b, &i16, 2); break;
        case GGUF_T_I32: i32 = (int32_t)kv->v.i; put(b, &i32, 4); break;
        case GGUF_T_I64: put(b, &kv->v.i, 8); break;
        default: put(b, &kv->v.u, es); break; /* unsigned and bool: little-endian low bytes */
        }
    }
}

static int skipped_key(const char *k) {
    return !strcmp(k, "general.file_type") || !strcmp(k, "general.alignment") || !strncmp(k, "split.", 6);
}

static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int main(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-i") && i + 1 < argc) in = argv[++i];
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: dequant -i MODEL.gguf -o MODEL-f32.gguf\n");
            return 0;
        } else die("usage: dequant -i MODEL.gguf -o MODEL-f32.gguf; unexpected argument ", argv[i]);
    }
    if (!in || !out) die("usage: dequant -i MODEL.gguf -o MODEL-f32.gguf", NULL);
    if (same_file(in, out)) die("refusing to overwrite the input ", in);
    quant_init();
    char err[512];
    gguf_ctx *g = NULL;
    if (gguf_open(in, &g, err, sizeof err) != 0) die(err, NULL);
    gw *w = gw_new();
    if (!w) die("out of memory", NULL);
    buf b = {0};
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const gguf_kv *kv = &g->kv[i];
        if (skipped_key(kv->key)) continue;
        b.n = 0;
        encode(kv, &b);
        if (gw_raw(w, kv->key, (uint32_t)kv->type, b.p, b.n)) die("out of memory", NULL);
    }
    if (gw_u32(w, "general.file_type", 0)) die("out of memory", NULL); /* LLAMA_FTYPE_ALL_F32 */
    int64_t max_row = 1;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const quant_traits *q = quant_traits_get(t->type);
        const int table = t->type == DF_TYPE_I32; /* integer tables (deepseek4's token -> experts) stay as they are */
        if (!table && (!q || !q->to_float)) die("no dequantizer for the type of tensor ", t->name);
        if (gw_tensor(w, t->name, table ? DF_TYPE_I32 : DF_TYPE_F32, t->n_dims, t->ne) < 0)
            die("cannot declare tensor ", t->name);
        if (t->ne[0] > max_row) max_row = t->ne[0];
    }
    if (gw_begin(w, out, err, sizeof err) != 0) die(err, NULL);
    float *row = malloc((size_t)max_row * sizeof *row);
    unsigned char *src = malloc((size_t)max_row * 8 + 64);
    if (!row || !src) die("out of memory", NULL);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const quant_traits *q = quant_traits_get(t->type);
        const size_t rb = quant_row_size(t->type, t->ne[0]);
        const uint64_t rows = t->n_elements / (uint64_t)t->ne[0];
        const int fd = g->files[t->file].fd;
        for (uint64_t r = 0; r < rows; r++) {
            const off_t at = (off_t)(t->offset + r * rb);
            size_t got = 0;
            while (got < rb) {
                ssize_t k = pread(fd, src + got, rb - got, at + (off_t)got);
                if (k < 0 && errno == EINTR) continue;
                if (k <= 0) die("cannot read tensor ", t->name);
                got += (size_t)k;
            }
            if (t->type == DF_TYPE_I32) {
                if (gw_data(w, src, rb, err, sizeof err) != 0) die(err, NULL);
                continue;
            }
            q->to_float(src, row, t->ne[0]);
            if (gw_data(w, row, (size_t)t->ne[0] * sizeof *row, err, sizeof err) != 0) die(err, NULL);
        }
    }
    if (gw_finish(w, err, sizeof err) != 0) die(err, NULL);
    fprintf(stderr, "dequant: wrote %s: %llu tensors in F32\n", out, (unsigned long long)g->n_tensors);
    free(row);
    free(src);
    free(b.p);
    gw_free(w);
    gguf_close(g);
    return 0;
}
