/*
 * test_gguf.c - tests of the GGUF reader (src/gguf/gguf.c).
 *
 * WHY: gguf.c is the one place where bytes from an untrusted file turn into
 * counts, sizes and offsets that the rest of the engine trusts. These tests
 * pin down that (a) valid files of every shape the format allows are read
 * exactly, and (b) every malformed file is refused with rc -1, ctx NULL and a
 * message that names the key or tensor at fault, never a crash, a hang or a
 * silently wrong result.
 *
 * HOW: GGUF images are built in memory with a tiny byte builder (bb_*), so a
 * test can write exactly the malformed field it wants; they are parsed with
 * gguf_parse_buffer, or written to a temporary directory for gguf_open (plain
 * files, split models, directories, missing and empty files). Hostile
 * buffers are parsed from a heap copy of exactly their size so that
 * AddressSanitizer (make MODE=debug) sees any read past the end.
 *
 * WHAT IS CHECKED
 *  - every metadata type (u8..f64, bool, string, empty string, numeric, bool,
 *    string and empty arrays) round-trips, through every typed getter, and
 *    out-of-range / wrong-kind / missing getters fail naming the key;
 *  - the tensor directory: shapes, types, n_elements, nbytes (f32, f16, q4_0,
 *    q4_K), absolute offsets = data_offset + relative offset, the data really
 *    is there, general.alignment (64) and the default (32), versions 2 and 3;
 *  - split models (name-0000i-of-00003.gguf with split.no / split.count /
 *    split.tensors.count written as u16/u16/i32 like llama.cpp's gguf-split,
 *    and as other integer types), the file index of each tensor, the second
 *    part opened directly, a missing part, inconsistent split keys;
 *  - gguf_open on a directory, a FIFO, a device, a missing, an empty and a
 *    short file;
 *  - the hostile corpus: truncation at every byte offset, single-byte
 *    mutations at every offset, and one hand-made file per documented
 *    defect (magic, versions, counts, strings, keys, value types, arrays,
 *    bools, tensor names, dims, types, block sizes, offsets, alignment);
 *  - many keys / many tensors parse in (near) linear time, also when their
 *    names are crafted to collide in the reader's hash tables.
 */
#include "testutil.h"

#include "gguf.h"
#include "gguf_write.h"
#include "quant.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ======================================================================
 * Byte builder
 * ====================================================================== */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_put(bb *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        assert_non_null(np);
        b->p = np;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void bb_u8(bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u16(bb *b, uint16_t v) { bb_put(b, &v, 2); }
static void bb_u32(bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_i64(bb *b, int64_t v) { bb_put(b, &v, 8); }
static void bb_f32(bb *b, float v) { bb_put(b, &v, 4); }
static void bb_f64(bb *b, double v) { bb_put(b, &v, 8); }
static void bb_strn(bb *b, const char *s, size_t n) { bb_u64(b, n); bb_put(b, s, n); }
static void bb_str(bb *b, const char *s) { bb_strn(b, s, strlen(s)); }
static void bb_zeros(bb *b, size_t n) { for (size_t i = 0; i < n; i++) bb_u8(b, 0); }
static void bb_pad(bb *b, size_t align) { while (b->n % align) bb_u8(b, 0); }
static void bb_free(bb *b) { free(b->p); memset(b, 0, sizeof *b); }

static void bb_hdr(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
static void bb_key(bb *b, const char *key, uint32_t type) { bb_str(b, key); bb_u32(b, type); }
static void bb_tensor(bb *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type, uint64_t off) {
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) bb_i64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, off);
}

/* ======================================================================
 * Parse helpers
 * ====================================================================== */

/* Parse from a heap copy of exactly n bytes (so ASan catches over-reads). */
static int parse_copy(const void *p, size_t n, gguf_ctx **ctx, char *err, size_t errlen) {
    void *c = malloc(n ? n : 1);
    assert_non_null(c);
    if (n) memcpy(c, p, n);
    int rc = gguf_parse_buffer(c, n, ctx, err, errlen);
    free(c);
    return rc;
}

static gguf_ctx *parse_ok_at(int line, const bb *b) {
    char err[512] = "";
    gguf_ctx *ctx = NULL;
    if (gguf_parse_buffer(b->p, b->n, &ctx, err, sizeof err) != 0) fail_msg("line %d: valid image refused: %s", line, err);
    assert_non_null(ctx);
    return ctx;
}
#define PARSE_OK(b) parse_ok_at(__LINE__, (b))

/* The parse must fail, leave *out NULL, and produce a message holding every word. */
static void expect_fail_at(int line, const void *p, size_t n, const char *const *words) {
    char err[512];
    memset(err, 0, sizeof err);
    gguf_ctx *ctx = (gguf_ctx *)&err; /* must be reset to NULL */
    int rc = parse_copy(p, n, &ctx, err, sizeof err);
    if (rc == 0) {
        gguf_close(ctx);
        fail_msg("line %d: hostile image accepted", line);
    }
    if (rc != -1) fail_msg("line %d: rc %d, expected -1", line, rc);
    if (ctx != NULL) fail_msg("line %d: *out not reset to NULL on failure", line);
    if (!err[0]) fail_msg("line %d: empty error message", line);
    for (; *words; words++)
        if (!strstr(err, *words)) fail_msg("line %d: error \"%s\" does not mention \"%s\"", line, err, *words);
}
#define EXPECT_FAIL(b, ...) expect_fail_at(__LINE__, (b)->p, (b)->n, (const char *const[]){__VA_ARGS__, NULL})

/* ======================================================================
 * The "rich" valid image: every metadata type and a few tensor types
 * ====================================================================== */

typedef struct {
    const char *name;
    int type, n_dims;
    int64_t ne[4];
    uint64_t nbytes;
} tspec;

static const tspec k_tensors[] = {
    {"token_embd.weight", DF_TYPE_F32, 2, {8, 3, 1, 1}, 8 * 3 * 4},
    {"blk.0.attn_q.weight", DF_TYPE_Q4_0, 2, {64, 2, 1, 1}, 2 * 2 * 18},
    {"blk.0.ffn_down.weight", DF_TYPE_Q4_K, 2, {256, 2, 1, 1}, 2 * 144},
    {"output_norm.weight", DF_TYPE_F16, 1, {5, 1, 1, 1}, 5 * 2},
    {"four.dims", DF_TYPE_F32, 4, {2, 1, 3, 2}, 2 * 3 * 2 * 4},
    {"empty.tensor", DF_TYPE_F32, 2, {4, 0, 1, 1}, 0},
    {"blk.0.attn_k.weight", DF_TYPE_Q8_0, 1, {32, 1, 1, 1}, 34},
};
#define N_TENSORS (sizeof k_tensors / sizeof k_tensors[0])

static const int32_t k_arr_i32[] = {1, -2, 3};
static const float k_arr_f32[] = {0.5f, -1.25f};
static const uint8_t k_arr_u8[] = {1, 2, 255};
static const uint8_t k_arr_bool[] = {1, 0, 1};
static const double k_arr_f64[] = {1e-300, -3.5};
static const char *const k_arr_str[] = {"a", "", "ccc"};
#define N_RICH_KV 28

static void tensor_fill(uint8_t *dst, uint64_t n, int idx) {
    for (uint64_t i = 0; i < n; i++) dst[i] = (uint8_t)(idx * 31 + i * 7 + 1);
}

/* Build the rich image. align == 0: no general.alignment key (default 32).
 * The image ends exactly at the end of the last non-empty tensor's data, so
 * that every truncation cuts something the reader must notice. Relative
 * offsets are written to rel[] (if not NULL). */
static void build_rich(bb *b, uint32_t version, uint32_t align, uint64_t *rel) {
    uint64_t A = align ? align : 32;
    bb_hdr(b, version, N_TENSORS, N_RICH_KV - (align ? 0 : 1));
    bb_key(b, "general.architecture", GGUF_T_STRING); bb_str(b, "llama");
    bb_key(b, "t.u8", GGUF_T_U8); bb_u8(b, 200);
    bb_key(b, "t.i8", GGUF_T_I8); bb_u8(b, (uint8_t)(int8_t)-5);
    bb_key(b, "t.u16", GGUF_T_U16); bb_u16(b, 60000);
    bb_key(b, "t.i16", GGUF_T_I16); bb_u16(b, (uint16_t)(int16_t)-300);
    bb_key(b, "t.u32", GGUF_T_U32); bb_u32(b, 4000000000u);
    bb_key(b, "t.i32", GGUF_T_I32); bb_u32(b, (uint32_t)(int32_t)-2000000000);
    bb_key(b, "t.f32", GGUF_T_F32); bb_f32(b, 1.5f);
    bb_key(b, "t.bool.true", GGUF_T_BOOL); bb_u8(b, 1);
    bb_key(b, "t.bool.false", GGUF_T_BOOL); bb_u8(b, 0);
    bb_key(b, "t.str", GGUF_T_STRING); bb_str(b, "hello");
    bb_key(b, "t.str.empty", GGUF_T_STRING); bb_str(b, "");
    bb_key(b, "t.str.nul", GGUF_T_STRING); bb_strn(b, "a\0b", 3);
    bb_key(b, "t.u64", GGUF_T_U64); bb_u64(b, 1ull << 40);
    bb_key(b, "t.u64.big", GGUF_T_U64); bb_u64(b, 0x8000000000000005ull);
    bb_key(b, "t.i64", GGUF_T_I64); bb_i64(b, -(1ll << 40));
    bb_key(b, "t.i64.pos", GGUF_T_I64); bb_i64(b, 123);
    bb_key(b, "t.f64", GGUF_T_F64); bb_f64(b, 2.25);
    bb_key(b, "t.f64.huge", GGUF_T_F64); bb_f64(b, 1e300);
    bb_key(b, "t.arr.i32", GGUF_T_ARRAY); bb_u32(b, GGUF_T_I32); bb_u64(b, 3); bb_put(b, k_arr_i32, sizeof k_arr_i32);
    bb_key(b, "t.arr.f32", GGUF_T_ARRAY); bb_u32(b, GGUF_T_F32); bb_u64(b, 2); bb_put(b, k_arr_f32, sizeof k_arr_f32);
    bb_key(b, "t.arr.u8", GGUF_T_ARRAY); bb_u32(b, GGUF_T_U8); bb_u64(b, 3); bb_put(b, k_arr_u8, sizeof k_arr_u8);
    bb_key(b, "t.arr.bool", GGUF_T_ARRAY); bb_u32(b, GGUF_T_BOOL); bb_u64(b, 3); bb_put(b, k_arr_bool, 3);
    bb_key(b, "t.arr.f64", GGUF_T_ARRAY); bb_u32(b, GGUF_T_F64); bb_u64(b, 2); bb_put(b, k_arr_f64, sizeof k_arr_f64);
    bb_key(b, "t.arr.str", GGUF_T_ARRAY); bb_u32(b, GGUF_T_STRING); bb_u64(b, 3);
    for (int i = 0; i < 3; i++) bb_str(b, k_arr_str[i]);
    bb_key(b, "t.arr.empty", GGUF_T_ARRAY); bb_u32(b, GGUF_T_I32); bb_u64(b, 0);
    bb_key(b, "t.arr.str.empty", GGUF_T_ARRAY); bb_u32(b, GGUF_T_STRING); bb_u64(b, 0);
    if (align) { bb_key(b, "general.alignment", GGUF_T_U32); bb_u32(b, align); }
    uint64_t off[N_TENSORS], o = 0;
    for (size_t i = 0; i < N_TENSORS; i++) {
        off[i] = o;
        o += k_tensors[i].nbytes;
        o = (o + A - 1) / A * A;
        if (rel) rel[i] = off[i];
        bb_tensor(b, k_tensors[i].name, (uint32_t)k_tensors[i].n_dims, k_tensors[i].ne, (uint32_t)k_tensors[i].type,
                  off[i]);
    }
    bb_pad(b, A);
    size_t data = b->n;
    uint64_t end = 0;
    for (size_t i = 0; i < N_TENSORS; i++)
        if (k_tensors[i].nbytes && off[i] + k_tensors[i].nbytes > end) end = off[i] + k_tensors[i].nbytes;
    bb_zeros(b, (size_t)end);
    for (size_t i = 0; i < N_TENSORS; i++) tensor_fill(b->p + data + off[i], k_tensors[i].nbytes, (int)i);
}

/* Check the tensor directory of a context built from build_rich. base: the
 * image bytes (for parse_buffer) or NULL (then data is read through the fd). */
static void check_rich_tensors(const gguf_ctx *ctx, const uint64_t *rel, uint64_t align, const uint8_t *base) {
    assert_int_equal(ctx->n_tensors, N_TENSORS);
    assert_int_equal(ctx->alignment, align);
    uint64_t data_offset = ctx->files[0].data_offset;
    assert_true(data_offset > 0);
    assert_int_equal(data_offset % align, 0);
    for (size_t i = 0; i < N_TENSORS; i++) {
        const tspec *s = &k_tensors[i];
        const gguf_tensor *t = gguf_find_tensor(ctx, s->name);
        assert_non_null(t);
        assert_ptr_equal(t, &ctx->tensors[i]);
        assert_string_equal(t->name, s->name);
        assert_int_equal(t->type, s->type);
        assert_int_equal(t->n_dims, s->n_dims);
        uint64_t ne = 1;
        for (int d = 0; d < 4; d++) {
            assert_int_equal(t->ne[d], s->ne[d]);
            ne *= (uint64_t)s->ne[d];
        }
        assert_int_equal(t->n_elements, ne);
        assert_int_equal(t->nbytes, s->nbytes);
        assert_int_equal(t->offset, data_offset + rel[i]);
        assert_int_equal(t->offset % align, 0);
        assert_int_equal(t->file, 0);
        uint8_t *want = malloc(s->nbytes + 1), *got = malloc(s->nbytes + 1);
        assert_non_null(want);
        assert_non_null(got);
        tensor_fill(want, s->nbytes, (int)i);
        if (base) memcpy(got, base + t->offset, (size_t)s->nbytes);
        else assert_int_equal(pread(ctx->files[0].fd, got, (size_t)s->nbytes, (off_t)t->offset), (ssize_t)s->nbytes);
        assert_memory_equal(got, want, (size_t)s->nbytes);
        free(want);
        free(got);
    }
    assert_null(gguf_find_tensor(ctx, "no.such.tensor"));
    assert_null(gguf_find_tensor(ctx, ""));
}

/* ---- getters ---- */

#define GET_FAILS(call, ...)                                                                                  \
    do {                                                                                                      \
        char e_[256] = "";                                                                                    \
        if ((call) != -1) fail_msg("line %d: %s succeeded", __LINE__, #call);                                 \
        const char *const w_[] = {__VA_ARGS__, NULL};                                                         \
        for (int k_ = 0; w_[k_]; k_++)                                                                        \
            if (!strstr(e_, w_[k_])) fail_msg("line %d: error \"%s\" lacks \"%s\"", __LINE__, e_, w_[k_]);   \
    } while (0)
/* The calls below use e_ / sizeof e_ as their error buffer. */

static void check_rich_metadata(const gguf_ctx *ctx) {
    char err[256];
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f;
    int bl;
    assert_int_equal(ctx->n_kv, N_RICH_KV - (gguf_find(ctx, "general.alignment") ? 0 : 1));
    for (uint64_t i = 0; i < ctx->n_kv; i++) assert_ptr_equal(gguf_find(ctx, ctx->kv[i].key), &ctx->kv[i]);
    assert_null(gguf_find(ctx, "nope"));

    /* u32 */
    assert_int_equal(gguf_get_u32(ctx, "t.u8", &u32, err, sizeof err), 0); assert_int_equal(u32, 200);
    assert_int_equal(gguf_get_u32(ctx, "t.u16", &u32, err, sizeof err), 0); assert_int_equal(u32, 60000);
    assert_int_equal(gguf_get_u32(ctx, "t.u32", &u32, err, sizeof err), 0); assert_int_equal(u32, 4000000000u);
    assert_int_equal(gguf_get_u32(ctx, "t.i64.pos", &u32, err, sizeof err), 0); assert_int_equal(u32, 123);
    GET_FAILS(gguf_get_u32(ctx, "t.i8", &u32, e_, sizeof e_), "t.i8", "out of range");
    GET_FAILS(gguf_get_u32(ctx, "t.i32", &u32, e_, sizeof e_), "t.i32", "out of range");
    GET_FAILS(gguf_get_u32(ctx, "t.u64", &u32, e_, sizeof e_), "t.u64", "out of range");
    GET_FAILS(gguf_get_u32(ctx, "t.str", &u32, e_, sizeof e_), "t.str", "integer");
    GET_FAILS(gguf_get_u32(ctx, "t.bool.true", &u32, e_, sizeof e_), "t.bool.true", "integer");
    GET_FAILS(gguf_get_u32(ctx, "t.f32", &u32, e_, sizeof e_), "t.f32", "integer");
    GET_FAILS(gguf_get_u32(ctx, "t.arr.i32", &u32, e_, sizeof e_), "t.arr.i32", "integer");
    GET_FAILS(gguf_get_u32(ctx, "missing.key", &u32, e_, sizeof e_), "missing.key", "missing");
    /* u64 */
    assert_int_equal(gguf_get_u64(ctx, "t.u64", &u64, err, sizeof err), 0); assert_int_equal(u64, 1ull << 40);
    assert_int_equal(gguf_get_u64(ctx, "t.u64.big", &u64, err, sizeof err), 0);
    assert_true(u64 == 0x8000000000000005ull);
    assert_int_equal(gguf_get_u64(ctx, "t.u8", &u64, err, sizeof err), 0); assert_int_equal(u64, 200);
    GET_FAILS(gguf_get_u64(ctx, "t.i64", &u64, e_, sizeof e_), "t.i64", "out of range");
    GET_FAILS(gguf_get_u64(ctx, "t.i16", &u64, e_, sizeof e_), "t.i16", "out of range");
    GET_FAILS(gguf_get_u64(ctx, "t.f64", &u64, e_, sizeof e_), "t.f64", "integer");
    /* i64 */
    assert_int_equal(gguf_get_i64(ctx, "t.i64", &i64, err, sizeof err), 0); assert_true(i64 == -(1ll << 40));
    assert_int_equal(gguf_get_i64(ctx, "t.i8", &i64, err, sizeof err), 0); assert_true(i64 == -5);
    assert_int_equal(gguf_get_i64(ctx, "t.i16", &i64, err, sizeof err), 0); assert_true(i64 == -300);
    assert_int_equal(gguf_get_i64(ctx, "t.i32", &i64, err, sizeof err), 0); assert_true(i64 == -2000000000);
    assert_int_equal(gguf_get_i64(ctx, "t.u32", &i64, err, sizeof err), 0); assert_true(i64 == 4000000000ll);
    assert_int_equal(gguf_get_i64(ctx, "t.u64", &i64, err, sizeof err), 0); assert_true(i64 == 1ll << 40);
    GET_FAILS(gguf_get_i64(ctx, "t.u64.big", &i64, e_, sizeof e_), "t.u64.big", "out of range");
    GET_FAILS(gguf_get_i64(ctx, "t.str.empty", &i64, e_, sizeof e_), "t.str.empty", "integer");
    GET_FAILS(gguf_get_i64(ctx, "nope", &i64, e_, sizeof e_), "nope", "missing");
    /* f32 */
    assert_int_equal(gguf_get_f32(ctx, "t.f32", &f, err, sizeof err), 0); assert_true(f == 1.5f);
    assert_int_equal(gguf_get_f32(ctx, "t.f64", &f, err, sizeof err), 0); assert_true(f == 2.25f);
    assert_int_equal(gguf_get_f32(ctx, "t.u16", &f, err, sizeof err), 0); assert_true(f == 60000.0f);
    assert_int_equal(gguf_get_f32(ctx, "t.i8", &f, err, sizeof err), 0); assert_true(f == -5.0f);
    GET_FAILS(gguf_get_f32(ctx, "t.f64.huge", &f, e_, sizeof e_), "t.f64.huge", "out of range");
    GET_FAILS(gguf_get_f32(ctx, "t.str", &f, e_, sizeof e_), "t.str", "number");
    GET_FAILS(gguf_get_f32(ctx, "t.bool.false", &f, e_, sizeof e_), "t.bool.false", "number");
    GET_FAILS(gguf_get_f32(ctx, "t.arr.f32", &f, e_, sizeof e_), "t.arr.f32", "number");
    GET_FAILS(gguf_get_f32(ctx, "no.f", &f, e_, sizeof e_), "no.f", "missing");
    /* bool */
    assert_int_equal(gguf_get_bool(ctx, "t.bool.true", &bl, err, sizeof err), 0); assert_int_equal(bl, 1);
    assert_int_equal(gguf_get_bool(ctx, "t.bool.false", &bl, err, sizeof err), 0); assert_int_equal(bl, 0);
    GET_FAILS(gguf_get_bool(ctx, "t.u8", &bl, e_, sizeof e_), "t.u8", "bool");
    GET_FAILS(gguf_get_bool(ctx, "no.b", &bl, e_, sizeof e_), "no.b", "missing");
    /* strings */
    assert_string_equal(gguf_get_str(ctx, "general.architecture"), "llama");
    assert_string_equal(gguf_get_str(ctx, "t.str"), "hello");
    assert_non_null(gguf_get_str(ctx, "t.str.empty"));
    assert_string_equal(gguf_get_str(ctx, "t.str.empty"), "");
    assert_int_equal(gguf_find(ctx, "t.str.empty")->str_len, 0);
    assert_int_equal(gguf_find(ctx, "t.str.nul")->str_len, 3);
    assert_memory_equal(gguf_get_str(ctx, "t.str.nul"), "a\0b", 4);
    assert_null(gguf_get_str(ctx, "t.u8"));
    assert_null(gguf_get_str(ctx, "t.arr.str"));
    assert_null(gguf_get_str(ctx, "missing"));
    /* scalar kinds recorded */
    static const struct { const char *k; int t; } kinds[] = {
        {"t.u8", GGUF_T_U8},   {"t.i8", GGUF_T_I8},     {"t.u16", GGUF_T_U16},       {"t.i16", GGUF_T_I16},
        {"t.u32", GGUF_T_U32}, {"t.i32", GGUF_T_I32},   {"t.f32", GGUF_T_F32},       {"t.bool.true", GGUF_T_BOOL},
        {"t.str", GGUF_T_STRING}, {"t.u64", GGUF_T_U64}, {"t.i64", GGUF_T_I64},      {"t.f64", GGUF_T_F64},
        {"t.arr.i32", GGUF_T_ARRAY}};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) assert_int_equal(gguf_find(ctx, kinds[i].k)->type, kinds[i].t);
    /* arrays */
    const gguf_kv *a = gguf_get_arr(ctx, "t.arr.i32", GGUF_T_I32);
    assert_non_null(a);
    assert_int_equal(a->arr_n, 3);
    assert_memory_equal(a->arr, k_arr_i32, sizeof k_arr_i32);
    assert_ptr_equal(gguf_get_arr(ctx, "t.arr.i32", -1), a);
    assert_null(gguf_get_arr(ctx, "t.arr.i32", GGUF_T_U32));
    assert_null(gguf_get_arr(ctx, "t.u8", -1));
    assert_null(gguf_get_arr(ctx, "missing", -1));
    a = gguf_get_arr(ctx, "t.arr.f32", GGUF_T_F32);
    assert_non_null(a);
    assert_int_equal(a->arr_n, 2);
    assert_memory_equal(a->arr, k_arr_f32, sizeof k_arr_f32);
    a = gguf_get_arr(ctx, "t.arr.u8", GGUF_T_U8);
    assert_non_null(a);
    assert_memory_equal(a->arr, k_arr_u8, 3);
    a = gguf_get_arr(ctx, "t.arr.bool", GGUF_T_BOOL);
    assert_non_null(a);
    assert_memory_equal(a->arr, k_arr_bool, 3);
    a = gguf_get_arr(ctx, "t.arr.f64", GGUF_T_F64);
    assert_non_null(a);
    assert_memory_equal(a->arr, k_arr_f64, sizeof k_arr_f64);
    a = gguf_get_arr(ctx, "t.arr.str", GGUF_T_STRING);
    assert_non_null(a);
    assert_int_equal(a->arr_n, 3);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(((char **)a->arr)[i], k_arr_str[i]);
        assert_int_equal(a->arr_str_len[i], strlen(k_arr_str[i]));
    }
    a = gguf_get_arr(ctx, "t.arr.empty", GGUF_T_I32);
    assert_non_null(a);
    assert_int_equal(a->arr_n, 0);
    a = gguf_get_arr(ctx, "t.arr.str.empty", GGUF_T_STRING);
    assert_non_null(a);
    assert_int_equal(a->arr_n, 0);
}

/* ======================================================================
 * Valid files
 * ====================================================================== */

static void test_rich_buffer(void **state) {
    static const uint32_t aligns[] = {0, 64, 1, 256};
    for (uint32_t version = 2; version <= 3; version++)
        for (size_t ai = 0; ai < sizeof aligns / sizeof aligns[0]; ai++) {
            bb b = {0};
            uint64_t rel[N_TENSORS];
            build_rich(&b, version, aligns[ai], rel);
            gguf_ctx *ctx = PARSE_OK(&b);
            assert_int_equal(ctx->version, (int)version);
            assert_int_equal(ctx->n_files, 1);
            assert_int_equal(ctx->files[0].size, b.n);
            check_rich_metadata(ctx);
            check_rich_tensors(ctx, rel, aligns[ai] ? aligns[ai] : 32, b.p);
            gguf_close(ctx);
            bb_free(&b);
        }
}

static void test_minimal(void **state) {
    /* header only: no keys, no tensors */
    bb b = {0};
    bb_hdr(&b, 3, 0, 0);
    gguf_ctx *ctx = PARSE_OK(&b);
    assert_int_equal(ctx->n_kv, 0);
    assert_int_equal(ctx->n_tensors, 0);
    assert_null(gguf_find(ctx, "x"));
    assert_null(gguf_find_tensor(ctx, "x"));
    gguf_close(ctx);
    gguf_close(NULL);
    /* a 63-byte tensor name is the longest allowed; a row of 32 q4_0 elements is one block */
    bb_free(&b);
    char name[64];
    memset(name, 'n', 63);
    name[63] = 0;
    int64_t ne[2] = {32, 1};
    bb_hdr(&b, 3, 1, 0);
    bb_tensor(&b, name, 2, ne, DF_TYPE_Q4_0, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 18);
    ctx = PARSE_OK(&b);
    assert_non_null(gguf_find_tensor(ctx, name));
    assert_int_equal(ctx->tensors[0].nbytes, 18);
    gguf_close(ctx);
    bb_free(&b);
    /* names of vtypes */
    assert_string_equal(gguf_vtype_name(GGUF_T_U8), "u8");
    assert_string_equal(gguf_vtype_name(GGUF_T_F64), "f64");
    assert_string_equal(gguf_vtype_name(GGUF_T_ARRAY), "array");
    assert_string_equal(gguf_vtype_name(13), "invalid");
    assert_string_equal(gguf_vtype_name(-1), "invalid");
}

/* The error buffer may be small or absent. */
static void test_err_buffer(void **state) {
    bb b = {0};
    bb_put(&b, "GGUX", 4);
    bb_zeros(&b, 20);
    gguf_ctx *ctx = NULL;
    char small[8];
    memset(small, 'x', sizeof small);
    assert_int_equal(gguf_parse_buffer(b.p, b.n, &ctx, small, sizeof small), -1);
    assert_true(memchr(small, 0, sizeof small) != NULL);
    assert_int_equal(gguf_parse_buffer(b.p, b.n, &ctx, NULL, 0), -1);
    assert_null(ctx);
    bb_free(&b);
}

/* Many keys and many tensors must not take quadratic time. */
static void test_many(void **state) {
    enum { NK = 100000, NT = 40000 };
    bb b = {0};
    bb_hdr(&b, 3, NT, NK);
    char k[32];
    for (int i = 0; i < NK; i++) {
        snprintf(k, sizeof k, "k.%d", i);
        bb_key(&b, k, GGUF_T_U8);
        bb_u8(&b, (uint8_t)i);
    }
    int64_t ne[1] = {0};
    for (int i = 0; i < NT; i++) {
        snprintf(k, sizeof k, "t.%d", i);
        bb_tensor(&b, k, 1, ne, DF_TYPE_F32, 0);
    }
    bb_pad(&b, 32);
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    gguf_ctx *ctx = PARSE_OK(&b);
    double dt = (double)clock() / CLOCKS_PER_SEC - t0;
    assert_int_equal(ctx->n_kv, NK);
    assert_int_equal(ctx->n_tensors, NT);
    assert_non_null(gguf_find_tensor(ctx, "t.39999"));
    assert_non_null(gguf_find(ctx, "k.99999"));
    gguf_close(ctx);
    if (dt > 20.0) fail_msg("parsing %d keys and %d tensors took %.1f s", NK, NT, dt);
    bb_free(&b);
    /* and the duplicate checks still fire at the very end */
    bb_hdr(&b, 3, NT, NK);
    for (int i = 0; i < NK; i++) {
        snprintf(k, sizeof k, "k.%d", i == NK - 1 ? 17 : i);
        bb_key(&b, k, GGUF_T_U8);
        bb_u8(&b, 0);
    }
    for (int i = 0; i < NT; i++) {
        snprintf(k, sizeof k, "t.%d", i);
        bb_tensor(&b, k, 1, ne, DF_TYPE_F32, 0);
    }
    bb_pad(&b, 32);
    EXPECT_FAIL(&b, "duplicate", "'k.17'");
    bb_free(&b);
    bb_hdr(&b, 3, NT, 1);
    bb_key(&b, "a", GGUF_T_U8);
    bb_u8(&b, 0);
    for (int i = 0; i < NT; i++) {
        snprintf(k, sizeof k, "t.%d", i == NT - 1 ? 123 : i);
        bb_tensor(&b, k, 1, ne, DF_TYPE_F32, 0);
    }
    bb_pad(&b, 32);
    EXPECT_FAIL(&b, "duplicate tensor name", "'t.123'");
    bb_free(&b);
}

/* Names that all land in one bucket of a 2^k-slot table indexed by the low k
 * bits of 64-bit FNV-1a (the reader's name hash before it was seeded). Those
 * bits evolve mod 2^k, so a 3-byte suffix found by a backward search from the
 * target steers any prefix there. names: n x 16 bytes, NUL-terminated. */
static void flood_names(char *names, int n, int k, char tag) {
    const uint64_t P = 1099511628211ull, mask = (1ull << k) - 1;
    uint64_t inv = P;
    for (int i = 0; i < 6; i++) inv *= 2 - P * inv; /* P^-1 mod 2^64 */
    uint32_t *suf = malloc(sizeof(uint32_t) << k);  /* per state: c1 | c2 << 8 | c3 << 16, 0 = none */
    uint32_t *lvl2 = malloc(sizeof(uint32_t) * 255 * 255 * 2);
    assert_non_null(suf);
    assert_non_null(lvl2);
    memset(suf, 0, sizeof(uint32_t) << k);
    const uint64_t t = 12345 & mask;
    int n2 = 0;
    for (uint32_t c3 = 1; c3 < 256; c3++) {
        uint64_t s2 = ((t * inv) & mask) ^ c3; /* (s2 ^ c3) * P == t */
        for (uint32_t c2 = 1; c2 < 256; c2++) {
            lvl2[2 * n2] = (uint32_t)(((s2 * inv) & mask) ^ c2);
            lvl2[2 * n2 + 1] = c2 << 8 | c3 << 16;
            n2++;
        }
    }
    for (int i = 0; i < n2; i++)
        for (uint32_t c1 = 1; c1 < 256; c1++) {
            uint64_t s0 = ((lvl2[2 * i] * inv) & mask) ^ c1;
            if (!suf[s0]) suf[s0] = c1 | lvl2[2 * i + 1];
        }
    int made = 0;
    for (int j = 0; made < n; j++) {
        char *nm = names + 16 * made;
        int len = snprintf(nm, 16, "%c%07d", tag, j);
        uint64_t h = 1469598103934665603ull;
        for (int i = 0; i < len; i++) h = (h ^ (uint8_t)nm[i]) * P;
        uint32_t sx = suf[h & mask];
        if (!sx) continue;
        nm[len] = (char)(sx & 255);
        nm[len + 1] = (char)(sx >> 8 & 255);
        nm[len + 2] = (char)(sx >> 16);
        nm[len + 3] = 0;
        h = 1469598103934665603ull;
        for (int i = 0; i < len + 3; i++) h = (h ^ (uint8_t)nm[i]) * P;
        assert_int_equal(h & mask, t);
        made++;
    }
    free(lvl2);
    free(suf);
}

/* Crafted names that collide in the name tables must not make parsing quadratic. */
static void test_hash_flood(void **state) {
    enum { N = 100000 }; /* tables of 2^18 slots */
    char *names = malloc(16 * (size_t)N);
    assert_non_null(names);
    flood_names(names, N, 18, 'k');
    bb b = {0};
    bb_hdr(&b, 3, N, N);
    for (int i = 0; i < N; i++) {
        bb_key(&b, names + 16 * i, GGUF_T_U8);
        bb_u8(&b, 1);
    }
    flood_names(names, N, 18, 't');
    int64_t ne[1] = {0};
    for (int i = 0; i < N; i++) bb_tensor(&b, names + 16 * i, 1, ne, DF_TYPE_F32, 0);
    bb_pad(&b, 32);
    double t0 = (double)clock() / CLOCKS_PER_SEC;
    gguf_ctx *ctx = PARSE_OK(&b);
    double dt = (double)clock() / CLOCKS_PER_SEC - t0;
    for (int i = 0; i < N; i += 997) assert_ptr_equal(gguf_find_tensor(ctx, names + 16 * i), &ctx->tensors[i]);
    gguf_close(ctx);
    if (dt > 20.0) fail_msg("%d colliding keys and tensor names took %.1f s to parse", N, dt);
    bb_free(&b);
    free(names);
}

/* ======================================================================
 * Hostile images
 * ====================================================================== */

/* Truncating a valid image at any byte must fail cleanly. */
static void test_truncation(void **state) {
    bb b = {0};
    build_rich(&b, 3, 64, NULL);
    for (size_t len = 0; len < b.n; len++) {
        char err[512] = "";
        gguf_ctx *ctx = NULL;
        int rc = parse_copy(b.p, len, &ctx, err, sizeof err);
        if (rc == 0) {
            gguf_close(ctx);
            fail_msg("image truncated to %zu of %zu bytes was accepted", len, b.n);
        }
        if (ctx) fail_msg("len %zu: ctx not NULL", len);
        if (!strstr(err, "<buffer>")) fail_msg("len %zu: message \"%s\" does not name the input", len, err);
        if (!strstr(err, "truncated") && !strstr(err, "exceeds") && !strstr(err, "past the end") &&
            !strstr(err, "impossible") && !strstr(err, "too small"))
            fail_msg("len %zu: message \"%s\" does not say the file is short", len, err);
    }
    bb_free(&b);
}

/* Every single-byte mutation of a valid image either parses or fails with a message. */
static void test_mutations(void **state) {
    bb b = {0};
    build_rich(&b, 3, 0, NULL);
    static const uint8_t vals[] = {0x00, 0xff, 0x80, 0x7f, 0x01, 0x40};
    uint8_t *m = malloc(b.n);
    assert_non_null(m);
    int ok = 0, bad = 0;
    for (size_t i = 0; i < b.n; i++)
        for (size_t v = 0; v < sizeof vals + 1; v++) {
            memcpy(m, b.p, b.n);
            m[i] = v < sizeof vals ? vals[v] : (uint8_t)(b.p[i] ^ 0x20);
            if (m[i] == b.p[i]) continue;
            char err[512] = "";
            gguf_ctx *ctx = NULL;
            if (parse_copy(m, b.n, &ctx, err, sizeof err) == 0) {
                ok++;
                /* whatever was accepted must be self-consistent */
                for (uint64_t t = 0; t < ctx->n_tensors; t++) {
                    const gguf_tensor *tt = &ctx->tensors[t];
                    assert_ptr_equal(gguf_find_tensor(ctx, tt->name), tt);
                    assert_true(tt->offset + tt->nbytes <= b.n);
                    assert_true(tt->offset >= ctx->files[0].data_offset);
                }
                gguf_close(ctx);
            } else {
                bad++;
                if (ctx || !err[0] || !strstr(err, "<buffer>"))
                    fail_msg("byte %zu = 0x%02x: bad failure (ctx %p, message \"%s\")", i, m[i], (void *)ctx, err);
            }
        }
    assert_true(ok > 0 && bad > 0);
    free(m);
    bb_free(&b);
}

static void test_bad_header(void **state) {
    bb b = {0};
    bb_put(&b, "GGUf", 4); bb_u32(&b, 3); bb_u64(&b, 0); bb_u64(&b, 0);
    EXPECT_FAIL(&b, "magic"); bb_free(&b);
    bb_put(&b, "FUGG", 4); bb_u32(&b, 3); bb_u64(&b, 0); bb_u64(&b, 0);
    EXPECT_FAIL(&b, "magic"); bb_free(&b);
    bb_hdr(&b, 1, 0, 0); EXPECT_FAIL(&b, "version 1"); bb_free(&b);
    bb_hdr(&b, 0, 0, 0); EXPECT_FAIL(&b, "version 0"); bb_free(&b);
    bb_hdr(&b, 4, 0, 0); EXPECT_FAIL(&b, "version 4"); bb_free(&b);
    bb_hdr(&b, 0x03000000u, 0, 0); EXPECT_FAIL(&b, "big-endian"); bb_free(&b);
    bb_hdr(&b, 0x02000000u, 0, 0); EXPECT_FAIL(&b, "big-endian"); bb_free(&b);
    bb_hdr(&b, 0xffffffffu, 0, 0); EXPECT_FAIL(&b, "version"); bb_free(&b);
    /* short header */
    bb_put(&b, "GGUF", 4); EXPECT_FAIL(&b, "version"); bb_free(&b);
    bb_put(&b, "GG", 2); EXPECT_FAIL(&b, "magic"); bb_free(&b);
    EXPECT_FAIL(&b, "magic"); /* zero bytes */
    bb_hdr(&b, 3, 0, 0); b.n -= 1; EXPECT_FAIL(&b, "metadata count"); bb_free(&b);
    bb_hdr(&b, 3, 0, 0); b.n -= 8; EXPECT_FAIL(&b, "metadata count"); bb_free(&b);
    bb_hdr(&b, 3, 0, 0); b.n -= 9; EXPECT_FAIL(&b, "tensor count"); bb_free(&b);
    /* impossible counts */
    static const uint64_t huge[] = {1ull << 63, 1ull << 40, UINT64_MAX, 1000};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        bb_hdr(&b, 3, 0, huge[i]); bb_zeros(&b, 256); EXPECT_FAIL(&b, "metadata count"); bb_free(&b);
        bb_hdr(&b, 3, huge[i], 0); bb_zeros(&b, 256); EXPECT_FAIL(&b, "tensor count"); bb_free(&b);
    }
}

/* A keys-only image: header with n_kv, then the caller's bytes, then filler so
 * that the count check passes and the defect under test is what fails. */
static void kv_begin(bb *b, uint64_t n_kv) { bb_hdr(b, 3, 0, n_kv); }
static void kv_end(bb *b) { bb_zeros(b, 64); }

static void test_bad_keys(void **state) {
    bb b = {0};
    /* key string length huge / past the end */
    kv_begin(&b, 1); bb_u64(&b, 1ull << 63); kv_end(&b);
    EXPECT_FAIL(&b, "key 0", "string length"); bb_free(&b);
    kv_begin(&b, 1); bb_u64(&b, UINT64_MAX); kv_end(&b);
    EXPECT_FAIL(&b, "key 0", "string length"); bb_free(&b);
    kv_begin(&b, 2); bb_key(&b, "ok", GGUF_T_U8); bb_u8(&b, 1); bb_u64(&b, 65); bb_zeros(&b, 64);
    EXPECT_FAIL(&b, "key 1", "string length"); bb_free(&b);
    /* key too long (over the 64 KiB bound) */
    {
        char *big = malloc(70000);
        assert_non_null(big);
        memset(big, 'k', 70000);
        kv_begin(&b, 1); bb_strn(&b, big, 70000); bb_u32(&b, GGUF_T_U8); bb_u8(&b, 0); kv_end(&b);
        EXPECT_FAIL(&b, "key 0", "limit"); bb_free(&b);
        free(big);
    }
    /* key with NUL, empty key */
    kv_begin(&b, 2); bb_key(&b, "ok", GGUF_T_U8); bb_u8(&b, 1);
    bb_strn(&b, "a\0b", 3); bb_u32(&b, GGUF_T_U8); bb_u8(&b, 0); kv_end(&b);
    EXPECT_FAIL(&b, "key 1", "NUL"); bb_free(&b);
    kv_begin(&b, 1); bb_strn(&b, "", 0); bb_u32(&b, GGUF_T_U8); bb_u8(&b, 0); kv_end(&b);
    EXPECT_FAIL(&b, "key 0", "empty"); bb_free(&b);
    /* duplicate key */
    kv_begin(&b, 3); bb_key(&b, "general.name", GGUF_T_U8); bb_u8(&b, 1);
    bb_key(&b, "x", GGUF_T_U8); bb_u8(&b, 1);
    bb_key(&b, "general.name", GGUF_T_STRING); bb_str(&b, "dup"); kv_end(&b);
    EXPECT_FAIL(&b, "duplicate", "'general.name'"); bb_free(&b);
    /* invalid value types */
    static const uint32_t bad_types[] = {13, 14, 255, 0x80000000u, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++) {
        kv_begin(&b, 1); bb_key(&b, "my.key", bad_types[i]); bb_u64(&b, 0); kv_end(&b);
        EXPECT_FAIL(&b, "'my.key'", "invalid value type"); bb_free(&b);
    }
    /* truncated in the value type and in the value itself: the key is named */
    kv_begin(&b, 1); bb_str(&b, "my.key"); bb_u16(&b, 0);
    EXPECT_FAIL(&b, "my.key", "truncated"); bb_free(&b);
    kv_begin(&b, 1); bb_key(&b, "my.key", GGUF_T_U64); bb_u32(&b, 0);
    EXPECT_FAIL(&b, "my.key", "truncated"); bb_free(&b);
    /* string value: length huge / past the end */
    kv_begin(&b, 1); bb_key(&b, "general.name", GGUF_T_STRING); bb_u64(&b, 1ull << 62); kv_end(&b);
    EXPECT_FAIL(&b, "general.name", "string length"); bb_free(&b);
    kv_begin(&b, 1); bb_key(&b, "general.name", GGUF_T_STRING); bb_u64(&b, 65); kv_end(&b);
    EXPECT_FAIL(&b, "general.name", "string length"); bb_free(&b);
    /* bool 2 */
    kv_begin(&b, 1); bb_key(&b, "my.flag", GGUF_T_BOOL); bb_u8(&b, 2); kv_end(&b);
    EXPECT_FAIL(&b, "'my.flag'", "bool"); bb_free(&b);
    kv_begin(&b, 1); bb_key(&b, "my.flag", GGUF_T_BOOL); bb_u8(&b, 0xff); kv_end(&b);
    EXPECT_FAIL(&b, "'my.flag'", "bool"); bb_free(&b);
}

static void test_bad_arrays(void **state) {
    bb b = {0};
    /* nested array */
    kv_begin(&b, 1); bb_key(&b, "my.arr", GGUF_T_ARRAY); bb_u32(&b, GGUF_T_ARRAY); bb_u64(&b, 1);
    bb_u32(&b, GGUF_T_U8); bb_u64(&b, 1); bb_u8(&b, 0); kv_end(&b);
    EXPECT_FAIL(&b, "'my.arr'", "nested"); bb_free(&b);
    /* invalid element type */
    kv_begin(&b, 1); bb_key(&b, "my.arr", GGUF_T_ARRAY); bb_u32(&b, 13); bb_u64(&b, 1); kv_end(&b);
    EXPECT_FAIL(&b, "'my.arr'", "element type"); bb_free(&b);
    kv_begin(&b, 1); bb_key(&b, "my.arr", GGUF_T_ARRAY); bb_u32(&b, UINT32_MAX); bb_u64(&b, 1); kv_end(&b);
    EXPECT_FAIL(&b, "'my.arr'", "element type"); bb_free(&b);
    /* counts: huge, overflowing n * size, just past the end */
    static const struct { uint32_t t; uint64_t n; } cases[] = {
        {GGUF_T_U8, 1ull << 63},     {GGUF_T_U32, 1ull << 62}, {GGUF_T_U64, (1ull << 61) + 1},
        {GGUF_T_F64, UINT64_MAX},    {GGUF_T_U8, 65},          {GGUF_T_U16, 33},
        {GGUF_T_BOOL, 1ull << 40},   {GGUF_T_STRING, 1ull << 63}, {GGUF_T_STRING, UINT64_MAX},
        {GGUF_T_STRING, 9}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        kv_begin(&b, 1); bb_key(&b, "tokenizer.ggml.tokens", GGUF_T_ARRAY); bb_u32(&b, cases[i].t);
        bb_u64(&b, cases[i].n); kv_end(&b);
        EXPECT_FAIL(&b, "'tokenizer.ggml.tokens'", "array"); bb_free(&b);
    }
    /* a string element whose length runs past the end, and a truncated element length */
    kv_begin(&b, 1); bb_key(&b, "tokenizer.ggml.tokens", GGUF_T_ARRAY); bb_u32(&b, GGUF_T_STRING); bb_u64(&b, 2);
    bb_str(&b, "ab"); bb_u64(&b, 1000); bb_zeros(&b, 8);
    EXPECT_FAIL(&b, "'tokenizer.ggml.tokens'", "string 1", "past the end"); bb_free(&b);
    kv_begin(&b, 1); bb_key(&b, "tokenizer.ggml.tokens", GGUF_T_ARRAY); bb_u32(&b, GGUF_T_STRING); bb_u64(&b, 2);
    bb_str(&b, "abcdefghijk"); bb_u32(&b, 1);
    EXPECT_FAIL(&b, "'tokenizer.ggml.tokens'", "truncated string 1"); bb_free(&b);
    /* bool element 2 */
    kv_begin(&b, 1); bb_key(&b, "my.bools", GGUF_T_ARRAY); bb_u32(&b, GGUF_T_BOOL); bb_u64(&b, 3);
    bb_u8(&b, 1); bb_u8(&b, 0); bb_u8(&b, 2); kv_end(&b);
    EXPECT_FAIL(&b, "'my.bools'", "bool element 2"); bb_free(&b);
    /* truncated array header names the key */
    kv_begin(&b, 1); bb_key(&b, "my.arr", GGUF_T_ARRAY); bb_u32(&b, GGUF_T_U8); bb_u16(&b, 0);
    EXPECT_FAIL(&b, "my.arr", "truncated"); bb_free(&b);
}

/* One tensor after an architecture key, padding, and data_bytes of data. */
static void one_tensor(bb *b, const char *name, uint32_t n_dims, const int64_t *ne, uint32_t type, uint64_t off,
                       size_t data_bytes) {
    bb_hdr(b, 3, 1, 1);
    bb_key(b, "general.architecture", GGUF_T_STRING);
    bb_str(b, "llama");
    bb_tensor(b, name, n_dims, ne, type, off);
    bb_pad(b, 32);
    bb_zeros(b, data_bytes);
}

static void test_bad_tensors(void **state) {
    bb b = {0};
    int64_t ne2[2] = {32, 4}, ne5[5] = {1, 1, 1, 1, 1};
    /* the baseline is valid */
    one_tensor(&b, "w", 2, ne2, DF_TYPE_F32, 0, 512);
    gguf_ctx *ctx = PARSE_OK(&b);
    gguf_close(ctx);
    bb_free(&b);
    /* names */
    char name[65];
    memset(name, 'n', 64);
    name[64] = 0;
    one_tensor(&b, name, 2, ne2, DF_TYPE_F32, 0, 512);
    EXPECT_FAIL(&b, "tensor 0", "name", "longer"); bb_free(&b);
    bb_hdr(&b, 3, 1, 0); bb_u64(&b, 1ull << 62); bb_zeros(&b, 64);
    EXPECT_FAIL(&b, "tensor 0 name", "string length"); bb_free(&b);
    bb_hdr(&b, 3, 1, 0); bb_strn(&b, "", 0); bb_u32(&b, 1); bb_i64(&b, 1); bb_u32(&b, 0); bb_u64(&b, 0);
    bb_zeros(&b, 64);
    EXPECT_FAIL(&b, "tensor 0", "empty name"); bb_free(&b);
    bb_hdr(&b, 3, 1, 0); bb_strn(&b, "a\0b", 3); bb_u32(&b, 1); bb_i64(&b, 1); bb_u32(&b, 0); bb_u64(&b, 0);
    bb_zeros(&b, 64);
    EXPECT_FAIL(&b, "tensor 0", "NUL"); bb_free(&b);
    /* duplicate names */
    bb_hdr(&b, 3, 3, 0);
    bb_tensor(&b, "blk.0.w", 2, ne2, DF_TYPE_F32, 0);
    bb_tensor(&b, "blk.1.w", 2, ne2, DF_TYPE_F32, 512);
    bb_tensor(&b, "blk.0.w", 2, ne2, DF_TYPE_F32, 1024);
    bb_pad(&b, 32); bb_zeros(&b, 1536);
    EXPECT_FAIL(&b, "duplicate tensor name", "'blk.0.w'"); bb_free(&b);
    /* n_dims */
    static const uint32_t bad_nd[] = {0, 5, 0x80000000u, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad_nd / sizeof bad_nd[0]; i++) {
        bb_hdr(&b, 3, 1, 0); bb_str(&b, "w.dims"); bb_u32(&b, bad_nd[i]);
        for (int d = 0; d < 5; d++) bb_i64(&b, ne5[d]);
        bb_u32(&b, 0); bb_u64(&b, 0); bb_zeros(&b, 64);
        EXPECT_FAIL(&b, "'w.dims'", "dimensions"); bb_free(&b);
    }
    /* negative dims, in every position */
    for (int d = 0; d < 4; d++) {
        int64_t ne[4] = {32, 2, 2, 2};
        ne[d] = d & 1 ? -1 : INT64_MIN;
        one_tensor(&b, "w.neg", 4, ne, DF_TYPE_F32, 0, 4096);
        EXPECT_FAIL(&b, "'w.neg'", "negative"); bb_free(&b);
    }
    /* element count overflows int64 / uint64; byte size overflows */
    {
        int64_t a[2] = {1ll << 32, 1ll << 32};          /* 2^64 */
        int64_t c[2] = {1ll << 31, 1ll << 32};          /* 2^63 > INT64_MAX */
        int64_t d[4] = {INT64_MAX, INT64_MAX, INT64_MAX, INT64_MAX};
        int64_t e[3] = {1ll << 62, 4, 0};               /* zero, but the running product overflows first */
        one_tensor(&b, "w.big", 2, a, DF_TYPE_F32, 0, 64); EXPECT_FAIL(&b, "'w.big'", "overflow"); bb_free(&b);
        one_tensor(&b, "w.big", 2, c, DF_TYPE_F32, 0, 64); EXPECT_FAIL(&b, "'w.big'", "overflow"); bb_free(&b);
        one_tensor(&b, "w.big", 4, d, DF_TYPE_F32, 0, 64); EXPECT_FAIL(&b, "'w.big'", "overflow"); bb_free(&b);
        one_tensor(&b, "w.big", 3, e, DF_TYPE_F32, 0, 64); EXPECT_FAIL(&b, "'w.big'", "overflow"); bb_free(&b);
        int64_t f[1] = {1ll << 62};                     /* elements fit, bytes (x4) do not */
        one_tensor(&b, "w.big", 1, f, DF_TYPE_F32, 0, 64); EXPECT_FAIL(&b, "'w.big'", "overflow"); bb_free(&b);
        int64_t g[2] = {1ll << 61, 2};                  /* 2^62 f32 elements = 2^64 bytes */
        one_tensor(&b, "w.big", 2, g, DF_TYPE_F32, 0, 64); EXPECT_FAIL(&b, "'w.big'", "overflow"); bb_free(&b);
        int64_t h[2] = {1ll << 40, 1ll << 20};          /* fits in int64: too big for the file */
        one_tensor(&b, "w.big", 2, h, DF_TYPE_F32, 0, 64); EXPECT_FAIL(&b, "'w.big'", "past the end"); bb_free(&b);
    }
    /* unknown types: out of the table, holes in ggml's numbering */
    static const uint32_t bad_t[] = {4, 5, 31, 32, 33, 36, 37, 38, 43, 200, 0x80000000u, UINT32_MAX};
    for (size_t i = 0; i < sizeof bad_t / sizeof bad_t[0]; i++) {
        one_tensor(&b, "w.type", 2, ne2, bad_t[i], 0, 4096);
        char want[64];
        snprintf(want, sizeof want, "unknown tensor type %u", bad_t[i]);
        EXPECT_FAIL(&b, "'w.type'", want); bb_free(&b);
    }
    /* a known type Deltafin cannot compute is still a valid file */
    {
        int64_t ne[2] = {256, 1};
        one_tensor(&b, "w.i8", 2, ne, 24 /* i8 */, 0, 256);
        ctx = PARSE_OK(&b);
        assert_int_equal(ctx->tensors[0].nbytes, 256);
        gguf_close(ctx);
        bb_free(&b);
    }
    /* row length not a multiple of the block size */
    {
        int64_t q[2] = {33, 1}, k[2] = {128, 2}, z[2] = {0, 3};
        one_tensor(&b, "w.q4", 2, q, DF_TYPE_Q4_0, 0, 4096);
        EXPECT_FAIL(&b, "'w.q4'", "block size"); bb_free(&b);
        one_tensor(&b, "w.q4k", 2, k, DF_TYPE_Q4_K, 0, 4096);
        EXPECT_FAIL(&b, "'w.q4k'", "block size"); bb_free(&b);
        one_tensor(&b, "w.zero", 2, z, DF_TYPE_Q4_K, 0, 0); /* zero elements: fine */
        ctx = PARSE_OK(&b);
        assert_int_equal(ctx->tensors[0].nbytes, 0);
        gguf_close(ctx);
        bb_free(&b);
    }
    /* offsets: unaligned, data past the end, offset + nbytes overflows */
    one_tensor(&b, "w.off", 2, ne2, DF_TYPE_F32, 16, 4096);
    EXPECT_FAIL(&b, "'w.off'", "alignment"); bb_free(&b);
    one_tensor(&b, "w.off", 2, ne2, DF_TYPE_F32, 1, 4096);
    EXPECT_FAIL(&b, "'w.off'", "alignment"); bb_free(&b);
    one_tensor(&b, "w.off", 2, ne2, DF_TYPE_F32, 0, 511);
    EXPECT_FAIL(&b, "'w.off'", "past the end"); bb_free(&b);
    one_tensor(&b, "w.off", 2, ne2, DF_TYPE_F32, 32, 512);
    EXPECT_FAIL(&b, "'w.off'", "past the end"); bb_free(&b);
    one_tensor(&b, "w.off", 2, ne2, DF_TYPE_F32, UINT64_MAX - 31, 512);
    EXPECT_FAIL(&b, "'w.off'", "past the end"); bb_free(&b);
    one_tensor(&b, "w.off", 2, ne2, DF_TYPE_F32, 1ull << 63, 512);
    EXPECT_FAIL(&b, "'w.off'", "past the end"); bb_free(&b);
    {
        int64_t ne[1] = {1ll << 60}; /* 2^62 bytes: start fits, start + nbytes wraps */
        one_tensor(&b, "w.off", 1, ne, DF_TYPE_F32, 0xC000000000000000ull, 64);
        EXPECT_FAIL(&b, "'w.off'", "past the end"); bb_free(&b);
    }
    /* truncated tensor info names the tensor: header, architecture key (45 bytes),
     * name (13), n_dims (4), 3 bytes of ne[0] */
    one_tensor(&b, "w.cut", 2, ne2, DF_TYPE_F32, 0, 0);
    b.n = 24 + 45 + 13 + 4 + 3;
    EXPECT_FAIL(&b, "w.cut", "truncated"); bb_free(&b);
    one_tensor(&b, "w.cut", 2, ne2, DF_TYPE_F32, 0, 0);
    b.n = 24 + 45 + 13 + 4 + 16 + 4 + 7;
    EXPECT_FAIL(&b, "w.cut", "truncated"); bb_free(&b);
}

static void test_bad_alignment(void **state) {
    bb b = {0};
    int64_t ne[1] = {16};
    struct { uint32_t type; uint64_t v; size_t n; } cases[] = {
        {GGUF_T_U32, 0, 4},          {GGUF_T_U32, 48, 4},        {GGUF_T_U32, 3, 4},
        {GGUF_T_U64, 1ull << 40, 8}, {GGUF_T_U64, 1ull << 63, 8}, {GGUF_T_I32, (uint32_t)-64, 4},
        {GGUF_T_I64, (uint64_t)INT64_MIN, 8},
        {GGUF_T_F32, 0x42800000u /* 64.0f */, 4},            {GGUF_T_BOOL, 1, 1},
        {GGUF_T_STRING, 0, 8 /* empty string */}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bb_hdr(&b, 3, 1, 1);
        bb_key(&b, "general.alignment", cases[i].type);
        bb_put(&b, &cases[i].v, cases[i].n);
        bb_tensor(&b, "w", 1, ne, DF_TYPE_F32, 0);
        bb_pad(&b, 64);
        bb_zeros(&b, 64);
        EXPECT_FAIL(&b, "general.alignment");
        bb_free(&b);
    }
    /* an array is a wrong type too */
    bb_hdr(&b, 3, 0, 1);
    bb_key(&b, "general.alignment", GGUF_T_ARRAY); bb_u32(&b, GGUF_T_U32); bb_u64(&b, 1); bb_u32(&b, 32);
    EXPECT_FAIL(&b, "general.alignment");
    bb_free(&b);
    /* other integer types holding a power of two are accepted */
    bb_hdr(&b, 3, 1, 1);
    bb_key(&b, "general.alignment", GGUF_T_U16); bb_u16(&b, 16);
    bb_tensor(&b, "w", 1, ne, DF_TYPE_F32, 16);
    bb_pad(&b, 16);
    bb_zeros(&b, 128);
    gguf_ctx *ctx = PARSE_OK(&b);
    assert_int_equal(ctx->alignment, 16);
    assert_int_equal(ctx->files[0].data_offset % 16, 0);
    assert_int_equal(ctx->tensors[0].offset, ctx->files[0].data_offset + 16);
    gguf_close(ctx);
    bb_free(&b);
}

/* ======================================================================
 * Files: gguf_open, splits
 * ====================================================================== */

static char g_dir[256];

static int setup_dir(void **state) {
    snprintf(g_dir, sizeof g_dir, "/tmp/df_test_gguf.XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown_dir(void **state) {
    DIR *d = opendir(g_dir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
            if (unlink(p) != 0) rmdir(p);
        }
        closedir(d);
    }
    return rmdir(g_dir);
}

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", g_dir, name); }

static void write_file(const char *path, const bb *b) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (b->n) assert_int_equal(fwrite(b->p, 1, b->n, f), b->n);
    assert_int_equal(fclose(f), 0);
}

static void expect_open_fail(int line, const char *path, const char *const *words) {
    char err[1024] = "";
    gguf_ctx *ctx = (gguf_ctx *)&err;
    int rc = gguf_open(path, &ctx, err, sizeof err);
    if (rc == 0) {
        gguf_close(ctx);
        fail_msg("line %d: %s opened", line, path);
    }
    if (ctx) fail_msg("line %d: *out not NULL", line);
    if (!err[0]) fail_msg("line %d: empty message", line);
    for (; *words; words++)
        if (!strstr(err, *words)) fail_msg("line %d: error \"%s\" does not mention \"%s\"", line, err, *words);
}
#define EXPECT_OPEN_FAIL(path, ...) expect_open_fail(__LINE__, (path), (const char *const[]){__VA_ARGS__, NULL})

static void test_open_file(void **state) {
    char p[512], err[512] = "";
    bb b = {0};
    uint64_t rel[N_TENSORS];
    build_rich(&b, 3, 64, rel);
    path_of(p, sizeof p, "rich.gguf");
    write_file(p, &b);
    gguf_ctx *ctx = NULL;
    if (gguf_open(p, &ctx, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(ctx->n_files, 1);
    assert_string_equal(ctx->files[0].path, p);
    assert_true(ctx->files[0].fd >= 0);
    assert_int_equal(ctx->files[0].size, b.n);
    check_rich_metadata(ctx);
    check_rich_tensors(ctx, rel, 64, NULL);
    gguf_close(ctx);
    /* a hostile file through gguf_open names the file */
    b.n -= 1;
    write_file(p, &b);
    EXPECT_OPEN_FAIL(p, p, "past the end", k_tensors[N_TENSORS - 1].name);
    bb_free(&b);
    /* directory, FIFO, device, missing file, empty file, short file. Opening a
     * FIFO must not wait for a writer: the alarm turns a hang into a failure. */
    EXPECT_OPEN_FAIL(g_dir, g_dir, "not a regular file");
    path_of(p, sizeof p, "fifo.gguf");
    assert_int_equal(mkfifo(p, 0600), 0);
    alarm(20);
    EXPECT_OPEN_FAIL(p, p, "not a regular file");
    alarm(0);
    assert_int_equal(unlink(p), 0);
    EXPECT_OPEN_FAIL("/dev/null", "/dev/null", "not a regular file");
    path_of(p, sizeof p, "missing.gguf");
    EXPECT_OPEN_FAIL(p, p, "cannot open", "No such file");
    path_of(p, sizeof p, "empty.gguf");
    write_file(p, &b);
    EXPECT_OPEN_FAIL(p, p, "too small");
    bb_put(&b, "GGUF", 4);
    bb_u32(&b, 3);
    write_file(p, &b);
    EXPECT_OPEN_FAIL(p, p, "too small");
    bb_free(&b);
    bb_put(&b, "GGML", 4);
    bb_zeros(&b, 60);
    write_file(p, &b);
    EXPECT_OPEN_FAIL(p, p, "magic");
    bb_free(&b);
}

/* A file written by tools/gguf_write.c reads back. */
static void test_writer_roundtrip(void **state) {
    char p[512], err[512] = "";
    path_of(p, sizeof p, "gw.gguf");
    gw *w = gw_new();
    assert_non_null(w);
    const char *toks[] = {"<s>", "</s>", "hi"};
    int32_t iv[2] = {7, -7};
    float fv[2] = {0.25f, 4.0f};
    int64_t ne_a[2] = {32, 3}, ne_b[1] = {256};
    assert_int_equal(gw_str(w, "general.architecture", "llama"), 0);
    assert_int_equal(gw_u32(w, "llama.block_count", 1), 0);
    assert_int_equal(gw_i32(w, "x.i32", -3), 0);
    assert_int_equal(gw_f32(w, "x.f32", 0.125f), 0);
    assert_int_equal(gw_bool(w, "x.bool", 1), 0);
    assert_int_equal(gw_arr_str(w, "tokenizer.ggml.tokens", toks, 3), 0);
    assert_int_equal(gw_arr_i32(w, "x.ai", iv, 2), 0);
    assert_int_equal(gw_arr_f32(w, "x.af", fv, 2), 0);
    assert_int_equal(gw_tensor(w, "a", DF_TYPE_Q8_0, 2, ne_a), 0);
    assert_int_equal(gw_tensor(w, "b", DF_TYPE_Q6_K, 1, ne_b), 1);
    uint64_t na = gw_tensor_bytes(w, 0), nb = gw_tensor_bytes(w, 1);
    assert_int_equal(na, 3 * 34);
    assert_int_equal(nb, 210);
    uint8_t buf[512];
    if (gw_begin(w, p, err, sizeof err) != 0) fail_msg("%s", err);
    for (int i = 0; i < 512; i++) buf[i] = (uint8_t)i;
    assert_int_equal(gw_data(w, buf, (size_t)na, err, sizeof err), 0);
    assert_int_equal(gw_data(w, buf + 1, (size_t)nb, err, sizeof err), 0);
    assert_int_equal(gw_finish(w, err, sizeof err), 0);
    gw_free(w);
    gguf_ctx *ctx = NULL;
    if (gguf_open(p, &ctx, err, sizeof err) != 0) fail_msg("%s", err);
    uint32_t u;
    int64_t i64;
    float f;
    int bl;
    assert_int_equal(gguf_get_u32(ctx, "llama.block_count", &u, err, sizeof err), 0); assert_int_equal(u, 1);
    assert_int_equal(gguf_get_i64(ctx, "x.i32", &i64, err, sizeof err), 0); assert_true(i64 == -3);
    assert_int_equal(gguf_get_f32(ctx, "x.f32", &f, err, sizeof err), 0); assert_true(f == 0.125f);
    assert_int_equal(gguf_get_bool(ctx, "x.bool", &bl, err, sizeof err), 0); assert_int_equal(bl, 1);
    const gguf_kv *a = gguf_get_arr(ctx, "tokenizer.ggml.tokens", GGUF_T_STRING);
    assert_non_null(a);
    assert_string_equal(((char **)a->arr)[2], "hi");
    const gguf_tensor *ta = gguf_find_tensor(ctx, "a"), *tb = gguf_find_tensor(ctx, "b");
    assert_non_null(ta);
    assert_non_null(tb);
    assert_int_equal(ta->offset, ctx->files[0].data_offset);
    assert_int_equal(tb->offset, ctx->files[0].data_offset + 128);
    uint8_t got[256];
    assert_int_equal(pread(ctx->files[0].fd, got, (size_t)nb, (off_t)tb->offset), (ssize_t)nb);
    assert_memory_equal(got, buf + 1, (size_t)nb);
    gguf_close(ctx);
}

/* One part of a split model. Key types as llama.cpp's gguf-split writes them
 * (split.no u16, split.count u16, split.tensors.count i32) unless int_type
 * says otherwise. Part i holds tensors "p<i>.t0" .. "p<i>.t<nt-1>". */
typedef struct {
    int no, count, total;       /* split.no, split.count, split.tensors.count (<0: omit) */
    uint32_t int_type;          /* GGUF_T_U16 (llama.cpp) or another integer type */
    int nt;                     /* tensors in this part */
    const char *dup_name;       /* if set, the last tensor gets this name */
} split_spec;

static void put_int(bb *b, const char *key, uint32_t type, int64_t v) {
    bb_key(b, key, type);
    switch (type) {
    case GGUF_T_U8: case GGUF_T_I8: bb_u8(b, (uint8_t)v); break;
    case GGUF_T_U16: case GGUF_T_I16: bb_u16(b, (uint16_t)v); break;
    case GGUF_T_U32: case GGUF_T_I32: bb_u32(b, (uint32_t)v); break;
    default: bb_i64(b, v); break;
    }
}

static uint8_t split_byte(int part, int t, int i) { return (uint8_t)(part * 50 + t * 13 + i); }

static void write_split(const char *path, const split_spec *s) {
    bb b = {0};
    int first = s->no == 0;
    uint64_t nkv = 2 + (s->total >= 0) + (first ? 1 : 0);
    bb_hdr(&b, 3, (uint64_t)s->nt, nkv);
    if (first) { bb_key(&b, "general.architecture", GGUF_T_STRING); bb_str(&b, "llama"); }
    put_int(&b, "split.no", s->int_type, s->no);
    put_int(&b, "split.count", s->int_type, s->count);
    if (s->total >= 0) put_int(&b, "split.tensors.count", s->int_type == GGUF_T_U16 ? GGUF_T_I32 : s->int_type, s->total);
    int64_t ne[2] = {8, 2};
    char name[64];
    for (int t = 0; t < s->nt; t++) {
        snprintf(name, sizeof name, "p%d.t%d", s->no, t);
        bb_tensor(&b, (s->dup_name && t == s->nt - 1) ? s->dup_name : name, 2, ne, DF_TYPE_F32, (uint64_t)t * 64);
    }
    bb_pad(&b, 32);
    for (int t = 0; t < s->nt; t++)
        for (int i = 0; i < 64; i++) bb_u8(&b, split_byte(s->no, t, i));
    write_file(path, &b);
    bb_free(&b);
}

static void split_path(char *out, size_t n, const char *prefix, int i, int count) {
    char name[128];
    snprintf(name, sizeof name, "%s-%05d-of-%05d.gguf", prefix, i, count);
    path_of(out, n, name);
}

static void write_model3(const char *prefix, uint32_t int_type, int total) {
    static const int nts[3] = {2, 1, 3};
    char p[512];
    for (int i = 0; i < 3; i++) {
        split_spec s = {i, 3, total, int_type, nts[i], NULL};
        split_path(p, sizeof p, prefix, i + 1, 3);
        write_split(p, &s);
    }
}

static void test_split(void **state) {
    static const uint32_t types[] = {GGUF_T_U16, GGUF_T_U8, GGUF_T_U32, GGUF_T_I32, GGUF_T_U64, GGUF_T_I64};
    char p[512], p2[512], err[1024] = "";
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        write_model3("m", types[ti], 6);
        split_path(p, sizeof p, "m", 1, 3);
        gguf_ctx *ctx = NULL;
        if (gguf_open(p, &ctx, err, sizeof err) != 0) fail_msg("split key type %s: %s", gguf_vtype_name((int)types[ti]), err);
        assert_int_equal(ctx->n_files, 3);
        assert_int_equal(ctx->n_tensors, 6);
        assert_string_equal(gguf_get_str(ctx, "general.architecture"), "llama");
        static const int nts[3] = {2, 1, 3};
        int k = 0;
        for (int part = 0; part < 3; part++) {
            split_path(p2, sizeof p2, "m", part + 1, 3);
            assert_string_equal(ctx->files[part].path, p2);
            assert_true(ctx->files[part].fd >= 0);
            for (int t = 0; t < nts[part]; t++, k++) {
                char name[64];
                snprintf(name, sizeof name, "p%d.t%d", part, t);
                const gguf_tensor *tt = gguf_find_tensor(ctx, name);
                assert_non_null(tt);
                assert_ptr_equal(tt, &ctx->tensors[k]);
                assert_int_equal(tt->file, part);
                assert_int_equal(tt->nbytes, 64);
                assert_int_equal(tt->offset, ctx->files[part].data_offset + (uint64_t)t * 64);
                uint8_t got[64];
                assert_int_equal(pread(ctx->files[tt->file].fd, got, 64, (off_t)tt->offset), 64);
                for (int i = 0; i < 64; i++) assert_int_equal(got[i], split_byte(part, t, i));
            }
        }
        gguf_close(ctx);
    }
    /* llama.cpp key types again, for the failure cases */
    write_model3("m", GGUF_T_U16, 6);
    /* opening a later part directly */
    split_path(p, sizeof p, "m", 2, 3);
    EXPECT_OPEN_FAIL(p, p, "split 2 of 3", "open the first", "-00001-of-00003.gguf");
    split_path(p, sizeof p, "m", 3, 3);
    EXPECT_OPEN_FAIL(p, p, "split 3 of 3", "open the first");
    /* a missing part is named */
    split_path(p2, sizeof p2, "m", 3, 3);
    assert_int_equal(unlink(p2), 0);
    split_path(p, sizeof p, "m", 1, 3);
    EXPECT_OPEN_FAIL(p, p2, "cannot open");
    split_path(p2, sizeof p2, "m", 2, 3);
    assert_int_equal(unlink(p2), 0);
    EXPECT_OPEN_FAIL(p, p2, "cannot open");
    /* wrong split.tensors.count */
    write_model3("m", GGUF_T_U16, 7);
    EXPECT_OPEN_FAIL(p, "split.tensors.count", "7");
    /* a part with the wrong split.no */
    write_model3("m", GGUF_T_U16, 6);
    {
        split_spec s = {2, 3, 6, GGUF_T_U16, 1, NULL};
        split_path(p2, sizeof p2, "m", 2, 3);
        write_split(p2, &s);
        EXPECT_OPEN_FAIL(p, p2, "split.no");
    }
    /* a part that is not GGUF */
    write_model3("m", GGUF_T_U16, 6);
    {
        bb b = {0};
        bb_put(&b, "nope", 4);
        bb_zeros(&b, 100);
        split_path(p2, sizeof p2, "m", 3, 3);
        write_file(p2, &b);
        EXPECT_OPEN_FAIL(p, p2, "magic");
        bb_free(&b);
        bb_hdr(&b, 3, 1ull << 40, 0);
        bb_zeros(&b, 100);
        write_file(p2, &b);
        EXPECT_OPEN_FAIL(p, p2, "tensor count");
        bb_free(&b);
    }
    /* a tensor name repeated across parts */
    write_model3("m", GGUF_T_U16, 6);
    {
        split_spec s = {2, 3, 6, GGUF_T_U16, 3, "p0.t1"};
        split_path(p2, sizeof p2, "m", 3, 3);
        write_split(p2, &s);
        EXPECT_OPEN_FAIL(p, "duplicate tensor name", "'p0.t1'");
    }
    /* a split first file whose name does not follow the pattern */
    {
        split_spec s = {0, 3, 6, GGUF_T_U16, 2, NULL};
        path_of(p2, sizeof p2, "model.gguf");
        write_split(p2, &s);
        EXPECT_OPEN_FAIL(p2, p2, "-00001-of-00003.gguf");
        path_of(p2, sizeof p2, "m-00001-of-00004.gguf");
        write_split(p2, &s);
        EXPECT_OPEN_FAIL(p2, p2, "-00001-of-00003.gguf");
    }
    /* split.count out of range */
    {
        split_spec s = {0, 5000, -1, GGUF_T_U16, 1, NULL};
        split_path(p2, sizeof p2, "big", 1, 5000);
        write_split(p2, &s);
        EXPECT_OPEN_FAIL(p2, "split.count", "5000");
    }
    /* split.count 1: an ordinary single file */
    {
        split_spec s = {0, 1, 2, GGUF_T_U16, 2, NULL};
        split_path(p2, sizeof p2, "one", 1, 1);
        write_split(p2, &s);
        gguf_ctx *ctx = NULL;
        if (gguf_open(p2, &ctx, err, sizeof err) != 0) fail_msg("%s", err);
        assert_int_equal(ctx->n_files, 1);
        assert_int_equal(ctx->n_tensors, 2);
        gguf_close(ctx);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_minimal),
        cmocka_unit_test(test_rich_buffer),
        cmocka_unit_test(test_err_buffer),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_bad_keys),
        cmocka_unit_test(test_bad_arrays),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_many),
        cmocka_unit_test(test_hash_flood),
        cmocka_unit_test(test_open_file),
        cmocka_unit_test(test_writer_roundtrip),
        cmocka_unit_test(test_split),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
