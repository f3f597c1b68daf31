/*
 * gguf.h - reader for GGUF model files (versions 2 and 3), including models
 * split across several files (name-00001-of-0000N.gguf with split.* keys).
 *
 * The reader treats every file as hostile: each count, string length,
 * dimension, type and offset is validated (with overflow-checked 64-bit
 * arithmetic) before it is used, and every failure produces a message that
 * names the file, the key or tensor, and the reason.
 *
 * gguf_open parses only the header, metadata and tensor directory (it reads
 * no tensor data). Tensor data is reached through the file descriptors and
 * absolute offsets in gguf_tensor (the weight store maps or reads it).
 *
 * Metadata of all split files is taken from the first file; the tensor
 * directories of all files are merged (duplicate names are an error).
 */
#ifndef DF_GGUF_H
#define DF_GGUF_H

#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
    GGUF_T_U8 = 0, GGUF_T_I8 = 1, GGUF_T_U16 = 2, GGUF_T_I16 = 3,
    GGUF_T_U32 = 4, GGUF_T_I32 = 5, GGUF_T_F32 = 6, GGUF_T_BOOL = 7,
    GGUF_T_STRING = 8, GGUF_T_ARRAY = 9, GGUF_T_U64 = 10, GGUF_T_I64 = 11,
    GGUF_T_F64 = 12, GGUF_T_COUNT = 13
};

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gguf_kv {
    char *key;            /* NUL-terminated */
    int type;             /* enum gguf_vtype */
    /* scalars */
    union { uint64_t u; int64_t i; double f; } v; /* integers/bools in u or i, floats in f */
    char *str;            /* GGUF_T_STRING: NUL-terminated copy (may contain inner NULs: use str_len) */
    uint64_t str_len;
    /* arrays */
    int arr_type;         /* element type when type == GGUF_T_ARRAY */
    uint64_t arr_n;       /* element count */
    void *arr;            /* numbers: packed native values of arr_type (bool as uint8);
                             strings: char*[arr_n], each NUL-terminated */
    uint64_t *arr_str_len;/* string arrays: byte length of each string */
} gguf_kv;

typedef struct gguf_tensor {
    char *name;
    int type;                    /* ggml type id (enum df_type), validated */
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];   /* ne[0] is the row length; unused dims are 1 */
    uint64_t n_elements;
    uint64_t nbytes;             /* bytes of data */
    uint64_t offset;             /* absolute byte offset in its file */
    int file;                    /* index into gguf_ctx.files */
} gguf_tensor;

typedef struct gguf_file {
    char *path;
    int fd;
    uint64_t size;
    uint64_t data_offset;        /* start of the aligned tensor data section */
} gguf_file;

typedef struct gguf_ctx {
    int version;                 /* of the first file */
    uint64_t alignment;
    int n_files;
    gguf_file *files;
    uint64_t n_kv;
    gguf_kv *kv;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    void *name_index;            /* private: hash index of tensor names */
} gguf_ctx;

/* Open a GGUF file (the first file of a split model: the others are found
 * from split.count and the file name). Returns 0 and sets *out, or -1 with a
 * reason in err. */
int gguf_open(const char *path, gguf_ctx **out, char *err, size_t errlen);

/* Parse a GGUF image held in memory (used by the fuzzer). Data offsets are
 * checked against size. Returns 0 or -1. */
int gguf_parse_buffer(const void *buf, size_t size, gguf_ctx **out, char *err, size_t errlen);

void gguf_close(gguf_ctx *ctx);

/* Metadata lookup; NULL if absent. */
const gguf_kv *gguf_find(const gguf_ctx *ctx, const char *key);

/* Typed getters: return 0 and set *out; -1 (with err) if absent, of the wrong
 * kind or out of range. Integer getters accept any integer type whose value fits. */
int gguf_get_u32(const gguf_ctx *ctx, const char *key, uint32_t *out, char *err, size_t errlen);
int gguf_get_u64(const gguf_ctx *ctx, const char *key, uint64_t *out, char *err, size_t errlen);
int gguf_get_i64(const gguf_ctx *ctx, const char *key, int64_t *out, char *err, size_t errlen);
int gguf_get_f32(const gguf_ctx *ctx, const char *key, float *out, char *err, size_t errlen);
int gguf_get_bool(const gguf_ctx *ctx, const char *key, int *out, char *err, size_t errlen);
/* Returns the string (owned by ctx) or NULL if absent / not a string. */
const char *gguf_get_str(const gguf_ctx *ctx, const char *key);
/* Array lookup: returns the kv if it is an array of elem_type (or any type if elem_type < 0), else NULL. */
const gguf_kv *gguf_get_arr(const gguf_ctx *ctx, const char *key, int elem_type);

/* Tensor lookup by name; NULL if absent. */
const gguf_tensor *gguf_find_tensor(const gguf_ctx *ctx, const char *name);

/* A 64-bit fingerprint of the model's files: their sizes, their headers
 * (metadata and tensor directory) and 16 samples of 4 KiB spread over each
 * file's data, so that two copies of a model on two machines can be checked
 * to be the same without reading either (docs/cluster.md). 0 or -1 (err). */
int gguf_fingerprint(const gguf_ctx *g, uint64_t *out, char *err, size_t errlen);

/* Human-readable names. */
const char *gguf_vtype_name(int t);

#endif
