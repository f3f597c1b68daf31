/*
 * fuzz_gguf.c - libFuzzer target for the GGUF reader (src/gguf/gguf.c).
 *
 * WHY: the reader is the engine's attack surface; every byte of a model file
 * is attacker-controlled. The sanitizers (ASan + UBSan, built by
 * tests/fuzz.sh) catch memory and arithmetic errors; this target also
 * aborts when the reader breaks its own contract, so that "silently accepts
 * garbage" shows up as a crash too:
 *  - a failed parse must return -1, leave *out NULL and write a message;
 *  - an accepted image must be self-consistent: every key findable and its
 *    value readable through every getter (arrays and strings touched to the
 *    last byte), every tensor findable by name, of a known type, with 1..4
 *    dims, a byte size that matches its shape, and data that lies inside
 *    the image at an aligned offset past the directory.
 *
 * An accepted image is then planned (wstore.c's ws_make_plan, what `deltafin
 * plan` and every --mem load compute first) under several budgets and
 * reserves, with the layer and expert counts its metadata claims: the
 * planner must either refuse with a message or return a plan that, when the
 * budget is at least its minimum, allocates no more than the budget (sums
 * checked here in 128 bits, so a wrapped sum in the planner shows).
 *
 * Built and run by tests/fuzz.sh (not by the Makefile: it needs clang's
 * -fsanitize=fuzzer).
 */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"
#include "wstore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x) do { if (!(x)) abort(); } while (0)

static volatile uint64_t g_sink; /* keeps the reads below from being optimised away */

static void exercise_kv(const gguf_ctx *ctx, const gguf_kv *kv) {
    char err[128];
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f;
    int b;
    CHECK(kv->key && kv->key[0]);
    CHECK(gguf_find(ctx, kv->key) == kv);
    CHECK(kv->type >= 0 && kv->type < GGUF_T_COUNT);
    /* each getter either succeeds or explains why */
    err[0] = 0; if (gguf_get_u32(ctx, kv->key, &u32, err, sizeof err) == 0) g_sink += u32; else CHECK(err[0]);
    err[0] = 0; if (gguf_get_u64(ctx, kv->key, &u64, err, sizeof err) == 0) g_sink += u64; else CHECK(err[0]);
    err[0] = 0; if (gguf_get_i64(ctx, kv->key, &i64, err, sizeof err) == 0) g_sink += (uint64_t)i64; else CHECK(err[0]);
    err[0] = 0; if (gguf_get_f32(ctx, kv->key, &f, err, sizeof err) == 0) g_sink += (uint64_t)isnan(f); else CHECK(err[0]);
    err[0] = 0; if (gguf_get_bool(ctx, kv->key, &b, err, sizeof err) == 0) CHECK(b == 0 || b == 1); else CHECK(err[0]);
    const char *s = gguf_get_str(ctx, kv->key);
    CHECK((s != NULL) == (kv->type == GGUF_T_STRING));
    if (s) {
        CHECK(s[kv->str_len] == 0 && strlen(s) <= kv->str_len);
    }
    const gguf_kv *a = gguf_get_arr(ctx, kv->key, -1);
    CHECK((a != NULL) == (kv->type == GGUF_T_ARRAY));
    if (!a) return;
    CHECK(gguf_get_arr(ctx, kv->key, a->arr_type) == a);
    CHECK(a->arr_type >= 0 && a->arr_type < GGUF_T_COUNT && a->arr_type != GGUF_T_ARRAY);
    CHECK(a->arr != NULL);
    if (a->arr_type == GGUF_T_STRING) {
        char **strs = a->arr;
        CHECK(a->arr_n == 0 || a->arr_str_len != NULL);
        for (uint64_t i = 0; i < a->arr_n; i++) {
            CHECK(strs[i][a->arr_str_len[i]] == 0 && strlen(strs[i]) <= a->arr_str_len[i]);
            g_sink += (uint8_t)strs[i][0];
        }
    } else {
        static const uint8_t sz[GGUF_T_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        const uint8_t *p = a->arr;
        uint64_t n = a->arr_n * sz[a->arr_type];
        for (uint64_t i = 0; i < n; i++) g_sink += p[i];
        if (a->arr_type == GGUF_T_BOOL)
            for (uint64_t i = 0; i < a->arr_n; i++) CHECK(p[i] <= 1);
    }
}

static void exercise_tensor(const gguf_ctx *ctx, const gguf_tensor *t, size_t size) {
    CHECK(t->name && t->name[0] && strlen(t->name) < 64);
    CHECK(gguf_find_tensor(ctx, t->name) == t);
    const quant_traits *q = quant_traits_get(t->type);
    CHECK(q && q->name);
    CHECK(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS);
    uint64_t n = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        CHECK(t->ne[d] >= 0);
        CHECK(d < t->n_dims || t->ne[d] == 1);
        n *= (uint64_t)t->ne[d]; /* cannot wrap: the reader checked it */
    }
    CHECK(n == t->n_elements);
    CHECK(t->ne[0] % q->blck == 0);
    CHECK(t->nbytes == n / (uint64_t)q->blck * q->type_size);
    CHECK(t->file == 0);
    const gguf_file *f = &ctx->files[0];
    CHECK(t->offset >= f->data_offset && t->offset <= size && t->nbytes <= size - t->offset);
    CHECK((t->offset - f->data_offset) % ctx->alignment == 0);
}

/* An integer of "<arch>.<suffix>" in [lo, hi], else dflt. */
static int meta_int(const gguf_ctx *ctx, const char *suffix, int lo, int hi, int dflt) {
    const char *arch = gguf_get_str(ctx, "general.architecture");
    char key[256], err[64];
    int64_t v;
    snprintf(key, sizeof key, "%s.%s", arch ? arch : "", suffix);
    if (gguf_get_i64(ctx, key, &v, err, sizeof err) != 0 || v < lo || v > hi) return dflt;
    return (int)v;
}

static void exercise_plan(const gguf_ctx *ctx) {
    static const uint64_t budgets[] = {1u << 20, 64u << 20, (uint64_t)1 << 34, UINT64_MAX / 4, UINT64_MAX};
    static const uint64_t reserves[] = {0, 1u << 20, (uint64_t)1 << 33};
    ws_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.mode = WS_STREAM;
    cfg.n_layer = meta_int(ctx, "block_count", 1, 4096, 1);
    cfg.n_expert = meta_int(ctx, "expert_count", 0, 65536, 0);
    cfg.n_expert_used = meta_int(ctx, "expert_used_count", 0, cfg.n_expert, 0);
    for (size_t b = 0; b < sizeof budgets / sizeof budgets[0]; b++)
        for (size_t r = 0; r < sizeof reserves / sizeof reserves[0]; r++) {
            char err[256];
            ws_plan p;
            cfg.budget = budgets[b];
            cfg.reserve = reserves[r];
            err[0] = 0;
            if (ws_make_plan(ctx, &cfg, &p, err, sizeof err) != 0) {
                CHECK(err[0]);
                continue;
            }
            CHECK(p.n_expert_slots >= 0 && p.n_dense_streamed >= 0 && p.n_dense_streamed <= cfg.n_layer);
            if (p.budget < p.minimum) continue;
            const unsigned __int128 used = (unsigned __int128)p.resident +
                                           (unsigned __int128)p.n_expert_slots * p.expert_slot +
                                           (p.n_dense_streamed ? 2 * (unsigned __int128)p.dense_slot : 0) + p.reserve;
            CHECK(used <= (unsigned __int128)p.budget);
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    gguf_ctx *ctx = (gguf_ctx *)err; /* any non-NULL value: a failed parse must reset it */
    err[0] = 0;
    if (gguf_parse_buffer(data, size, &ctx, err, sizeof err) != 0) {
        CHECK(ctx == NULL && err[0] != 0);
        return 0;
    }
    CHECK(ctx != NULL && ctx->n_files == 1 && ctx->files[0].size == size);
    CHECK(ctx->version == 2 || ctx->version == 3);
    CHECK(ctx->alignment > 0 && (ctx->alignment & (ctx->alignment - 1)) == 0);
    CHECK(ctx->files[0].data_offset >= 24 && ctx->files[0].data_offset % ctx->alignment == 0);
    for (uint64_t i = 0; i < ctx->n_kv; i++) exercise_kv(ctx, &ctx->kv[i]);
    for (uint64_t i = 0; i < ctx->n_tensors; i++) exercise_tensor(ctx, &ctx->tensors[i], size);
    CHECK(gguf_find_tensor(ctx, "") == NULL);
    exercise_plan(ctx);
    gguf_close(ctx);
    return 0;
}
