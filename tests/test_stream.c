/*
 * test_stream.c - running under a memory budget computes exactly what
 * running in memory computes.
 *
 * For every MoE architecture and for a dense model whose layers must stream,
 * the logits of a prompt and of the following decode steps are compared
 * byte for byte between the mapped model (no budget) and the same model
 * under a budget just above the planner's minimum, where most experts (or
 * most dense layers) come from disk through the cache (experts packed in
 * their slots once reused where the kernels have a packed layout for their
 * type; not with DELTAFIN_PACK=0). Also: a budget below
 * the minimum fails with a message naming it; the learned hot-expert file is
 * written and read back; the store never hands out more than it planned;
 * the lookahead's guesses stop being read where they do not pay.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deltafin.h"
#include "header.h"
#include "model.h"
#include "pack.h"
#include "quant.h"
#include "testutil.h"
#include "wstore.h"

static char tmpdir[128];

static void make_model(const char *args, const char *name, char *path, size_t n) {
    snprintf(path, n, "%s/%s.gguf", tmpdir, name);
    tu_mkmodel(path, args);
}

/* The context of the sessions and the prompt length of run(); the sliding-
 * window ring test lengthens both so that the ring is smaller than the
 * context and wraps. */
static int g_ctx = 64, g_prompt = 40;
#define MAX_PROMPT 128 /* g_prompt's ceiling */

/* Load path under budget (0: mapped) with reading engine `engine` and the
 * hot-expert file hot ("" = none), and open a session of 64 tokens. */
static df_session *open_budgeted(const char *path, uint64_t budget, int engine, const char *hot, df_model **m) {
    char err[512];
    df_model_params mp = df_model_default_params();
    mp.n_threads = 2;
    mp.mem_budget = budget;
    mp.n_ctx = g_ctx;
    mp.n_batch = 16;
    mp.hot_file = hot;
    mp.io_engine = engine;
    if (df_model_load(path, &mp, m, err, sizeof err) != 0) fail_msg("%s", err);
    df_session_params sp = df_session_default_params();
    sp.n_ctx = g_ctx;
    sp.n_batch = 16;
    df_session *s;
    if (df_session_new(*m, &sp, &s, err, sizeof err) != 0) fail_msg("%s", err);
    return s;
}

/* Logits of a g_prompt-token prompt (all positions) and 12 greedy steps, reading
 * with the given engine (enum df_io_engine). */
static float *run(const char *path, uint64_t budget, int engine, int *count, df_io_stats *io) {
    char err[512];
    df_model *m;
    df_session *s = open_budgeted(path, budget, engine, "", &m);
    const int nv = df_n_vocab(m), np = g_prompt, ng = 12;
    float *out = malloc(sizeof(float) * (size_t)nv * (np + ng));
    int32_t toks[MAX_PROMPT];
    assert_true(np <= MAX_PROMPT);
    for (int i = 0; i < np; i++) toks[i] = (int32_t)(1 + (i * 71) % (nv - 3));
    assert_int_equal(df_decode(s, toks, np, out, 1, err, sizeof err), 0);
    int32_t t = 0;
    for (int g = 0; g < ng; g++) {
        const float *last = out + (size_t)(np + g - 1) * nv;
        t = 0;
        for (int i = 1; i < nv; i++)
            if (last[i] > last[t]) t = i;
        assert_int_equal(df_decode(s, &t, 1, out + (size_t)(np + g) * nv, 0, err, sizeof err), 0);
    }
    *count = nv * (np + ng);
    if (io) df_model_io_stats(m, io);
    df_session_free(s);
    df_model_free(m);
    return out;
}

/* The plan of path under budget for the sessions here (n_ctx g_ctx, batches of 16). */
static df_plan plan_at(const char *path, uint64_t budget) {
    char err[512];
    df_model_params mp = df_model_default_params();
    mp.n_threads = 2;
    mp.mem_budget = budget;
    mp.n_ctx = g_ctx;
    mp.n_batch = 16;
    df_plan p;
    assert_int_equal(df_model_plan(path, &mp, &p, err, sizeof err), 0);
    return p;
}

static df_plan plan_for(const char *path) { return plan_at(path, 1); }

static uint64_t minimum_for(const char *path) {
    const df_plan p = plan_for(path);
    assert_true(p.minimum > 1);
    return p.minimum;
}

/* The routed experts' type of a mkmodel argument string (--expert-type, else --type), -1 if not named. */
static int expert_type_of(const char *args) {
    const char *p = strstr(args, "--expert-type ");
    p = p ? p + strlen("--expert-type ") : strstr(args, "--type ");
    if (p && !strncmp(p, "--type ", 7)) p += 7;
    if (!p) return -1;
    for (int t = 0; t < DF_TYPE_COUNT; t++) {
        const quant_traits *q = quant_traits_get(t);
        const size_t n = q && q->name ? strlen(q->name) : 0;
        if (n && !strncmp(p, q->name, n) && (p[n] == ' ' || p[n] == 0)) return t;
    }
    return -1;
}

/* The budgeted runs (each reading engine, and pread with DELTAFIN_PACK=0: nothing packed) against the mapped
 * model. Experts the cache keeps in use get packed (bytes_packed) where their type has a packed kernel:
 * test_cached_experts_packed requires it. */
static void check_identical(const char *args, const char *name, uint64_t extra) {
    char path[256];
    make_model(args, name, path, sizeof path);
    const uint64_t budget = minimum_for(path) + extra;
    int n1, n2;
    float *a = run(path, 0, DF_IO_AUTO, &n1, NULL);
    for (int engine = DF_IO_PREAD; engine <= DF_IO_URING + 1; engine++) {
        const int no_pack = engine > DF_IO_URING;
        if (no_pack) setenv("DELTAFIN_PACK", "0", 1);
        df_io_stats io;
        float *b = run(path, budget, no_pack ? DF_IO_PREAD : engine, &n2, &io);
        if (no_pack) unsetenv("DELTAFIN_PACK");
        assert_int_equal(n1, n2);
        printf("  %-12s %-8s budget %.1f MiB: %.1f MiB read from disk (%.1f packed), hit rate %.0f%%: logits %s\n",
               name, no_pack ? "unpacked" : io.io_engine, budget / 1048576.0, io.bytes_read / 1048576.0,
               io.bytes_packed / 1048576.0, io.hits + io.misses ? 100.0 * io.hits / (io.hits + io.misses) : 0.0,
               memcmp(a, b, sizeof(float) * (size_t)n1) == 0 ? "identical" : "DIFFERENT");
        if (*io.io_note) printf("    (%s: the pread engine ran instead)\n", io.io_note);
        else assert_string_equal(io.io_engine, engine == DF_IO_URING ? "io_uring" : "pread");
        assert_true(io.streaming);
        assert_true(io.bytes_read > 0);
        if (no_pack) assert_true(io.bytes_packed == 0);
        assert_memory_equal(a, b, sizeof(float) * (size_t)n1);
        free(b);
    }
    free(a);
}

static void test_moe_streaming_identical(void **state) {
    (void)state;
    /* a budget two expert slots above the minimum: nearly every expert streams */
    check_identical("--preset deepseek-v3-tiny --type q4_K", "deepseek-v3", 4 << 20);
    check_identical("--preset deepseek-v2-tiny --type q8_0", "deepseek-v2", 2 << 20);
    check_identical("--preset qwen3moe-tiny --type q6_K", "qwen3moe", 2 << 20);
    check_identical("--preset qwen2moe-tiny --type q8_0", "qwen2moe", 2 << 20);
    check_identical("--preset mixtral-tiny --type q4_0", "mixtral", 2 << 20);
    /* recurrent KDA states and MLA latents in the session reserve; the lookahead reads kimi-k3's full-width router */
    check_identical("--preset kimi-linear-tiny --type q8_0", "kimi-linear", 2 << 20);
    check_identical("--preset kimi-k3-tiny --type q8_0", "kimi-k3", 2 << 20);
    /* a NextN block past the layers: neither planned nor read */
    check_identical("--preset glm4moe-tiny --type q8_0 --expert-type mxfp4", "glm4moe", 2 << 20);
    check_identical("--preset minimax-m2-tiny --type q8_0", "minimax-m2", 2 << 20);
    check_identical("--preset gpt-oss-tiny --type q8_0 --expert-type mxfp4", "gpt-oss", 2 << 20);
    /* the DSA indexer's key cache in the session reserve; top-k below the context so that it selects */
    check_identical("--preset deepseek32-tiny --type q8_0 --idx-top-k 6", "deepseek32", 2 << 20);
    check_identical("--preset glm-dsa-tiny --type q8_0 --expert-type mxfp4 --idx-types 1101 --idx-top-k 7", "glm-dsa", 2 << 20);
    /* delta-net states in the session reserve; an MTP block neither planned nor read */
    check_identical("--preset qwen35moe-tiny --type q8_0 --expert-type q4_K", "qwen35moe", 2 << 20);
    check_identical("--preset qwen3next-tiny --type q8_0", "qwen3next", 2 << 20);
    /* hyper-connections, compressed caches and compressor states in the session reserve; hash-routed layers */
    check_identical("--preset deepseek4-tiny --type q8_0 --expert-type mxfp4 --idx-top-k 2", "deepseek4", 2 << 20);
    /* ... with i-quant experts (a pool of quantized rows: their quantizer is slow) */
    check_identical("--preset deepseek4-tiny --type q8_0 --expert-type iq2_xxs --row-pool 8 --idx-top-k 2", "deepseek4", 2 << 20);
    /* scaled embeddings, residuals and logits; an ungated shared expert */
    check_identical("--preset granite-moe-tiny --type q8_0 --expert-type q4_K", "granite", 2 << 20);
}

/* A budget that holds every expert: each stays in its slot and is packed once it has served a few passes
 * (WS_PACK_AFTER) where its type has a packed kernel in the table in use; the logits stay those of the mapped
 * model. */
static void test_cached_experts_packed(void **state) {
    (void)state;
    static const char *const models[][2] = {{"--preset qwen3moe-tiny --type q6_K", "qwen3moe-q6"},
                                             {"--preset qwen2moe-tiny --type q8_0", "qwen2moe-q8"},
                                             {"--preset deepseek-v3-tiny --type q4_K", "deepseek-v3-q4"},
                                             {"--preset gpt-oss-tiny --type q8_0 --expert-type mxfp4", "gpt-oss-mx"}};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char path[256];
        make_model(models[i][0], models[i][1], path, sizeof path);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        const uint64_t budget = minimum_for(path) + 2 * (uint64_t)st.st_size;
        const int et = expert_type_of(models[i][0]);
        const int packs = et >= 0 && quant_traits_get(et)->gemm_packed && pack_has_layout(et);
        int n1, n2;
        df_io_stats io;
        float *a = run(path, 0, DF_IO_AUTO, &n1, NULL), *b = run(path, budget, DF_IO_PREAD, &n2, &io);
        printf("  %-14s budget %.1f MiB: hit rate %.0f%%, %.1f of %.1f MiB read packed in the cache: logits %s\n",
               models[i][1], budget / 1048576.0, 100.0 * io.hits / (double)(io.hits + io.misses),
               io.bytes_packed / 1048576.0, io.bytes_read / 1048576.0,
               n1 == n2 && !memcmp(a, b, sizeof(float) * (size_t)n1) ? "identical" : "DIFFERENT");
        assert_true(io.streaming);
        if (packs) assert_true(io.bytes_packed > 0 && io.bytes_packed <= io.bytes_read);
        else assert_true(io.bytes_packed == 0);
        assert_int_equal(n1, n2);
        assert_memory_equal(a, b, sizeof(float) * (size_t)n1);
        free(a);
        free(b);
    }
}

/* The store's side of it, on one expert: fetched for products more than WS_PACK_AFTER times it comes back
 * packed (pack.h's layout of the file's rows), a fetch for the file's layout while a product holds it fails,
 * and once released it gets the file's bytes back (the slot unpacked in place). */
static void test_expert_slot_layouts(void **state) {
    (void)state;
    char path[256], err[512];
    make_model("--preset qwen2moe-tiny --type q8_0", "slot-layouts", path, sizeof path);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    df_model *mm, *mb;
    df_model_params mp = df_model_default_params();
    mp.n_threads = 2;
    mp.hot_file = "";
    assert_int_equal(df_model_load(path, &mp, &mm, err, sizeof err), 0); /* mapped: the file's bytes */
    mp.mem_budget = minimum_for(path) + 2 * (uint64_t)st.st_size;
    assert_int_equal(df_model_load(path, &mp, &mb, err, sizeof err), 0);
    ws_tensor *tf = mm->layers[0].ffn_up_exps, *tb = mb->layers[0].ffn_up_exps;
    assert_true(tb->streamed);
    const size_t bytes = (size_t)tb->ne[1] * tb->row_bytes;
    const int packs = quant_traits_get(tb->type)->gemm_packed != NULL;
    const uint8_t *file = ws_fetch_expert(mm->ws, tf, 3, err, sizeof err);
    assert_non_null(file);
    uint8_t *want = malloc(bytes), *scratch = malloc(PACK_ROWS * tb->row_bytes);
    assert_true(want && scratch);
    memcpy(want, file, bytes);
    pack_matrix(tb->type, want, tb->row_bytes, tb->ne[1], scratch, 0);
    for (int k = 0; k <= 3; k++) {
        int packed = -1;
        const uint8_t *w = ws_fetch_expert_mm(mb->ws, tb, 3, &packed, err, sizeof err);
        assert_non_null(w);
        assert_int_equal(packed, packs && k >= 2); /* WS_PACK_AFTER = 2 uses as read, packed for the third */
        assert_memory_equal(w, packed ? want : file, bytes);
        if (packed) {
            assert_null(ws_fetch_expert(mb->ws, tb, 3, err, sizeof err));
            assert_non_null(strstr(err, "held packed"));
        }
        ws_release_expert(mb->ws, tb, 3);
    }
    const uint8_t *rows = ws_fetch_expert(mb->ws, tb, 3, err, sizeof err);
    assert_non_null(rows);
    assert_memory_equal(rows, file, bytes);
    ws_release_expert(mb->ws, tb, 3);
    ws_release_expert(mm->ws, tf, 3);
    free(want);
    free(scratch);
    df_model_free(mb);
    df_model_free(mm);
}

/* gpt-oss with an 8-token window in a 256-token context: the sliding layers'
 * KV ring (window + batch - 1 positions, rounded up to 64) is smaller than
 * the context and than the 120 + 12 tokens run, so it wraps twice while the
 * model streams; the logits are identical to the in-memory run's. */
static void test_gptoss_ring_streaming_identical(void **state) {
    (void)state;
    const char *args = "--preset gpt-oss-tiny --type q8_0 --expert-type mxfp4 --swa 8 --ctx 256";
    char path[256];
    g_ctx = 256;
    g_prompt = 120;
    make_model(args, "gpt-oss-swa8", path, sizeof path);
    const df_plan p = plan_for(path);
    assert_int_equal(p.swa_window, 8);
    assert_true(p.n_swa_layers > 0);
    printf("  gpt-oss: window %d, ring %d of a %d-token context\n", p.swa_window, p.swa_ring, g_ctx);
    assert_true(p.swa_ring > 0 && p.swa_ring < g_prompt); /* wraps inside the prompt, far below n_ctx */
    check_identical(args, "gpt-oss-swa8", 2 << 20);
}

/* Teardown of the ring test: the other tests' lengths back, even after a failure. */
static int default_lengths(void **state) {
    (void)state;
    g_ctx = 64;
    g_prompt = 40;
    return 0;
}

/* Memory pressure: the expert cache shrinks mid-decode (df_model_set_mem)
 * and decoding goes on with the same logits, reading more; a budget below
 * the cache's least size, or a model without a budget, is refused. */
static void test_shrink_mid_decode(void **state) {
    (void)state;
    char path[256], err[512];
    make_model("--preset qwen3moe-tiny --type q8_0", "shrink", path, sizeof path);
    const uint64_t min = minimum_for(path), big = min + (24 << 20);
    int n1;
    float *a = run(path, 0, DF_IO_AUTO, &n1, NULL);
    df_model *m;
    df_session *s = open_budgeted(path, big, DF_IO_AUTO, "", &m);
    const int nv = df_n_vocab(m), np = 40, ng = 12;
    float *out = malloc(sizeof(float) * (size_t)nv * (np + ng));
    assert_non_null(out);
    int32_t toks[MAX_PROMPT];
    assert_true(np <= MAX_PROMPT);
    for (int i = 0; i < np; i++) toks[i] = (int32_t)(1 + (i * 71) % (nv - 3));
    assert_int_equal(df_decode(s, toks, np, out, 1, err, sizeof err), 0);
    df_io_stats before, after;
    df_model_io_stats(m, &before);
    for (int g = 0; g < ng; g++) {
        if (g == 4) {
            assert_int_equal(df_model_set_mem(m, 1, err, sizeof err), -1); /* far below the least cache */
            assert_non_null(strstr(err, "cannot shrink"));
            assert_int_equal(df_model_set_mem(m, min + (1 << 20), err, sizeof err), 0);
            assert_int_equal(df_model_set_mem(m, big, err, sizeof err), 0); /* never grows: no change */
            df_model_io_stats(m, &after);
            assert_true(after.budget == min + (1 << 20));
            assert_true(after.expert_slots < before.expert_slots);
            printf("  shrunk mid-decode: %d -> %d expert slots, budget %.1f -> %.1f MiB\n", before.expert_slots,
                   after.expert_slots, before.budget / 1048576.0, after.budget / 1048576.0);
        }
        const float *last = out + (size_t)(np + g - 1) * nv;
        int32_t t = 0;
        for (int i = 1; i < nv; i++)
            if (last[i] > last[t]) t = i;
        assert_int_equal(df_decode(s, &t, 1, out + (size_t)(np + g) * nv, 0, err, sizeof err), 0);
    }
    assert_memory_equal(a, out, sizeof(float) * (size_t)n1);
    df_session_free(s);
    df_model_free(m);
    /* a mapped model has no cache to shrink */
    s = open_budgeted(path, 0, DF_IO_AUTO, "", &m);
    assert_int_equal(df_model_set_mem(m, min, err, sizeof err), -1);
    assert_non_null(strstr(err, "without a budget"));
    df_session_free(s);
    df_model_free(m);
    free(out);
    free(a);
}

/* glm4moe's NextN/MTP block (blk.{n_layer}: a whole MoE block plus eh_proj)
 * is not a layer: the same model without it plans the same weights and
 * computes bit-identical logits, mapped and under a budget. */
static void test_nextn_block_skipped(void **state) {
    (void)state;
    char with[256], without[256], err[512];
    make_model("--preset glm4moe-tiny --type q8_0 --nextn 1", "glm-nextn", with, sizeof with);
    make_model("--preset glm4moe-tiny --type q8_0 --nextn 0", "glm-plain", without, sizeof without);
    df_model_params mp = df_model_default_params();
    mp.n_threads = 2;
    mp.mem_budget = 1;
    mp.n_ctx = 64;
    mp.n_batch = 16;
    df_plan a, b;
    assert_int_equal(df_model_plan(with, &mp, &a, err, sizeof err), 0);
    assert_int_equal(df_model_plan(without, &mp, &b, err, sizeof err), 0);
    printf("  NextN block: plan dense %llu / %llu bytes, experts %d / %d, layers %d / %d (with / without)\n",
           (unsigned long long)a.dense_bytes, (unsigned long long)b.dense_bytes, a.n_experts_total, b.n_experts_total,
           a.n_layer, b.n_layer);
    assert_true(a.dense_bytes == b.dense_bytes && a.expert_bytes == b.expert_bytes);
    assert_int_equal(a.n_experts_total, b.n_experts_total);
    assert_int_equal(a.n_moe_layers, b.n_moe_layers);
    assert_int_equal(a.n_layer, b.n_layer);
    struct stat sw, so;
    assert_int_equal(stat(with, &sw), 0);
    assert_int_equal(stat(without, &so), 0);
    assert_true(sw.st_size > so.st_size + (1 << 20)); /* the block is really there */
    int n1, n2, n3;
    float *x = run(with, 0, DF_IO_AUTO, &n1, NULL), *y = run(without, 0, DF_IO_AUTO, &n2, NULL);
    float *z = run(with, minimum_for(with) + (2 << 20), DF_IO_PREAD, &n3, NULL);
    assert_int_equal(n1, n2);
    assert_int_equal(n1, n3);
    assert_memory_equal(x, y, sizeof(float) * (size_t)n1);
    assert_memory_equal(x, z, sizeof(float) * (size_t)n1);
    free(x);
    free(y);
    free(z);
}

static void test_dense_streaming_identical(void **state) {
    (void)state;
    char path[256];
    make_model("--preset small --type q8_0", "dense", path, sizeof path);
    const df_plan p = plan_at(path, minimum_for(path) + (1 << 20));
    printf("  dense: %d of %d layers stream through two %.1f MiB buffers\n", p.n_dense_streamed, p.n_layer,
           p.dense_slot_bytes / 1048576.0);
    assert_true(p.n_dense_streamed >= p.n_layer - 1);
    check_identical("--preset small --type q8_0", "dense", 1 << 20);
}

/* Every family's dense layers streamed through the two buffers (a budget
 * just above the minimum), with the same logits as in memory: a layer's
 * weights are then in a buffer, not at their tensor's address (MLA with one
 * combined attn_kv_b read it from there once, and crashed). */
static void test_dense_streaming_families(void **state) {
    (void)state;
    static const char *const presets[] = {"deepseek-v2-lite-tiny", "deepseek-v3-tiny", "kimi-k3-tiny",
                                          "deepseek4-tiny", "qwen35moe-tiny", "gpt-oss-tiny", "glm-dsa-tiny"};
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        char args[160], path[256];
        snprintf(args, sizeof args, "--preset %s --type q8_0", presets[i]);
        make_model(args, presets[i], path, sizeof path);
        const df_plan p = plan_at(path, minimum_for(path) + (256 << 10));
        printf("  %s: %d of %d layers stream their dense weights\n", presets[i], p.n_dense_streamed, p.n_layer);
        assert_true(p.n_dense_streamed > 0);
        check_identical(args, presets[i], 256 << 10);
    }
}

static void test_budget_below_minimum(void **state) {
    (void)state;
    char path[256], err[512];
    make_model("--preset qwen3moe-tiny --type q8_0", "small-budget", path, sizeof path);
    const uint64_t min = minimum_for(path);
    df_model_params mp = df_model_default_params();
    mp.mem_budget = min - 4096;
    mp.n_ctx = 64;
    mp.n_batch = 16;
    mp.hot_file = "";
    df_model *m;
    assert_int_equal(df_model_load(path, &mp, &m, err, sizeof err), DF_E_NOMEM);
    printf("  %s\n", err);
    assert_non_null(strstr(err, "minimum"));
    mp.mem_budget = min;
    assert_int_equal(df_model_load(path, &mp, &m, err, sizeof err), 0);
    df_model_free(m);
}

static void test_hot_file(void **state) {
    (void)state;
    char path[256], hot[300], err[512];
    make_model("--preset qwen3moe-tiny --type q8_0", "hot", path, sizeof path);
    snprintf(hot, sizeof hot, "%s/hot.txt", tmpdir);
    double rate[2];
    for (int round = 0; round < 2; round++) {
        df_model *m;
        df_session *s = open_budgeted(path, minimum_for(path) + (2 << 20), DF_IO_AUTO, hot, &m);
        int32_t toks[20];
        for (int i = 0; i < 20; i++) toks[i] = 3 + i;
        assert_int_equal(df_decode(s, toks, 20, NULL, 0, err, sizeof err), 0);
        df_io_stats io;
        df_model_io_stats(m, &io);
        rate[round] = io.hits + io.misses ? (double)io.hits / (double)(io.hits + io.misses) : 0.0;
        printf("  hot file round %d: hit rate %.0f%%\n", round, 100.0 * rate[round]);
        df_session_free(s);
        df_model_free(m); /* saves the counts */
        struct stat st;
        assert_int_equal(stat(hot, &st), 0);
        assert_true(st.st_size > 20);
    }
    /* the same prompt again: the experts learned in round 0 are read ahead at open */
    assert_true(rate[1] > rate[0]);
    FILE *f = fopen(hot, "r");
    char line[64];
    assert_non_null(fgets(line, sizeof line, f));
    assert_int_equal(strncmp(line, "deltafin-hot 1", 14), 0);
    int l, e;
    double c;
    assert_int_equal(fscanf(f, "%d %d %lf", &l, &e, &c), 3);
    assert_true(l >= 0 && e >= 0 && c > 0);
    fclose(f);
}

/* A model file that shrinks under a running model: every engine reports the
 * missing bytes as an error (no crash, no hang, no garbage logits). */
static void test_truncated_while_streaming(void **state) {
    (void)state;
    char path[256], copy[300], err[512];
    make_model("--preset qwen3moe-tiny --type q8_0", "trunc", path, sizeof path);
    snprintf(copy, sizeof copy, "%s/trunc-copy.gguf", tmpdir);
    for (int engine = DF_IO_PREAD; engine <= DF_IO_URING; engine++) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "cp '%s' '%s'", path, copy);
        assert_int_equal(system(cmd), 0);
        df_model *m;
        df_session *s = open_budgeted(copy, minimum_for(path) + (2 << 20), engine, "", &m);
        struct stat st;
        assert_int_equal(stat(copy, &st), 0);
        assert_int_equal(truncate(copy, st.st_size / 3), 0);
        int32_t toks[20];
        for (int i = 0; i < 20; i++) toks[i] = 3 + i;
        err[0] = 0;
        assert_int_equal(df_decode(s, toks, 20, NULL, 0, err, sizeof err), DF_E_IO);
        df_io_stats io;
        df_model_io_stats(m, &io);
        printf("  %s, truncated file: %s\n", io.io_engine, err);
        assert_non_null(strstr(err, "unexpected end of file"));
        df_session_free(s);
        df_model_free(m);
    }
}

/* The recall of the hot file at path ("lookahead-recall R N"), or -1. */
static double recorded_recall(const char *path) {
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[128];
    double r = -1;
    unsigned long long n;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "lookahead-recall %lf %llu", &r, &n) != 2) r = -1;
    fclose(f);
    return r;
}

/* Generation's lookahead recall is counted over the layers it guessed for (a
 * prompt chunk guesses none), the hot file records it after its counts, a
 * run too short to measure it keeps the recorded one, and plan takes it from
 * there (a typical figure without one, or with a bad one). */
static void test_lookahead_recall(void **state) {
    (void)state;
    char path[256], hot[300], err[512];
    make_model("--preset qwen3moe-tiny --type q8_0", "recall", path, sizeof path);
    snprintf(hot, sizeof hot, "%s.hot", path);
    g_ctx = 128;
    const uint64_t budget = minimum_for(path) + (2 << 20);
    df_plan p = plan_at(path, budget);
    assert_int_equal(p.recall_known, 0);
    const double typical = p.lookahead_recall;
    assert_true(typical > 0 && typical < 1);
    df_model *m;
    df_session *s = open_budgeted(path, budget, DF_IO_AUTO, hot, &m);
    int32_t toks[120];
    for (int i = 0; i < 120; i++) toks[i] = 3 + (i * 7) % 50;
    assert_int_equal(df_decode(s, toks, 8, NULL, 0, err, sizeof err), 0);
    df_io_stats io;
    df_model_io_stats(m, &io);
    assert_true(io.misses > 0);
    assert_int_equal(io.lookahead_wanted, 0); /* a chunk of 8 rows is not generation */
    const uint64_t looked = io.hits + io.misses;
    for (int i = 8; i < 120; i++)
        if (df_decode(s, &toks[i], 1, NULL, 0, err, sizeof err) != 0) fail_msg("step %d: %s", i, err);
    df_model_io_stats(m, &io);
    /* only the routers' choices are looked up: a guess is neither a hit nor a miss (nor a use: the counts that
     * choose victims and fill the hot file are the routers' alone) */
    assert_int_equal(io.hits + io.misses - looked, (uint64_t)(120 - 8) * p.n_moe_layers * p.n_expert_used);
    printf("  lookahead: %llu of %llu experts needed from disk guessed ahead\n", (unsigned long long)io.lookahead_got,
           (unsigned long long)io.lookahead_wanted);
    assert_true(io.lookahead_wanted >= 64); /* enough to be recorded */
    assert_true(io.lookahead_got <= io.lookahead_wanted);
    const double recall = (double)io.lookahead_got / (double)io.lookahead_wanted;
    df_session_free(s);
    df_model_free(m); /* saves the hot file */
    assert_true(fabs(recorded_recall(hot) - recall) < 1e-4);
    p = plan_at(path, budget);
    assert_int_equal(p.hot_known, 1); /* the counts before the line are read as before */
    assert_int_equal(p.recall_known, 1);
    assert_true(fabs(p.lookahead_recall - recall) < 1e-4);
    /* a run that generates nothing keeps it */
    s = open_budgeted(path, budget, DF_IO_AUTO, hot, &m);
    df_session_free(s);
    df_model_free(m);
    assert_true(fabs(recorded_recall(hot) - recall) < 1e-4);
    /* a recall out of range is not believed */
    FILE *f = fopen(hot, "a");
    assert_non_null(f);
    fputs("lookahead-recall 7 100\n", f);
    assert_int_equal(fclose(f), 0);
    p = plan_at(path, budget);
    assert_true(fabs(p.lookahead_recall - recall) < 1e-4); /* the good one before it stands */
    f = fopen(hot, "w");
    assert_non_null(f);
    fputs("deltafin-hot 1\n0 1 2.00\nlookahead-recall 1.5 100\nlookahead-recall -0.1 100\n", f);
    assert_int_equal(fclose(f), 0);
    p = plan_at(path, budget);
    assert_int_equal(p.recall_known, 0);
    assert_true(p.lookahead_recall == typical);
    g_ctx = 64;
}

/* A small context under a budget just above the minimum: most experts stream. */
static df_model_params tight_params(const char *path) {
    df_model_params mp = df_model_default_params();
    mp.n_ctx = 64;
    mp.n_batch = 16;
    mp.mem_budget = minimum_for(path) + (2 << 20);
    return mp;
}

/* The decode-shaped disk probe reads through the store when experts stream,
 * and reports 0 when nothing would stream. */
static void test_disk_probe(void **state) {
    (void)state;
    char path[256], err[512];
    make_model("--preset qwen3moe-tiny --type q8_0", "probe", path, sizeof path);
    df_model_params mp = tight_params(path);
    const double rate = df_model_probe_disk(path, &mp, 0.3, err, sizeof err);
    printf("  probe under a tight budget: %.0f MiB/s\n", rate / 1048576.0);
    assert_true(rate > 0);
    mp.mem_budget = (uint64_t)1 << 30; /* everything fits: nothing to measure */
    assert_true(df_model_probe_disk(path, &mp, 0.3, err, sizeof err) == 0.0);
    assert_true(df_model_probe_disk("/nonexistent.gguf", &mp, 0.3, err, sizeof err) < 0);
}

/* How a guess read ahead is counted, and the lookahead's gate (wstore.c, guesses_pay): the probe only waits
 * for the disk, so guesses that are always wrong (recall 0) are read only in its first steps, until
 * GUESS_EVIDENCE of them are judged (without the gate: about 350 in the same steps), and then only judged. */
static void test_guess_gate(void **state) {
    (void)state;
    char path[256], err[512];
    make_model("--preset qwen3moe-tiny --type q8_0", "gate", path, sizeof path);
    df_model_params mp = tight_params(path);
    quant_init();
    df_model *m = calloc(1, sizeof *m);
    assert_non_null(m);
    ws_config cfg;
    assert_int_equal(df_load_header(m, path, &mp, err, sizeof err), 0);
    assert_int_equal(df_store_config(m, &mp, &cfg, err, sizeof err), 0);
    cfg.mode = WS_STREAM;
    cfg.hot_path = NULL;
    wstore *ws = NULL;
    assert_int_equal(ws_open(m->g, &cfg, &ws, err, sizeof err), 0);
    /* the disk's idle time: it grows while nothing is read */
    ws_stats st, st0;
    ws_get_stats(ws, &st0);
    usleep(30000);
    ws_get_stats(ws, &st);
    assert_true(st.idle_seconds - st0.idle_seconds >= 0.025);
    /* an expert a guess read ahead is a miss when it is named (the read was made), a hit the next time */
    const int32_t e = 5;
    ws_request_experts(ws, 0, &e, 1, WS_GUESS); /* read: nothing judged yet */
    for (int i = 0; i < 5000 && !ws_expert_ready(ws, 0, e); i++) usleep(1000);
    assert_true(ws_expert_ready(ws, 0, e));
    ws_request_experts(ws, 0, &e, 1, WS_DEMAND);
    ws_get_stats(ws, &st);
    assert_true(st.hits == 0 && st.misses == 1 && st.read_ahead == 1 && st.prefetch_used == 1);
    ws_tick(ws);
    ws_request_experts(ws, 0, &e, 1, WS_DEMAND);
    ws_get_stats(ws, &st);
    assert_true(st.hits == 1 && st.misses == 1 && st.read_ahead == 1);
    uint64_t bytes = 0;
    double secs = 0;
    const uint64_t step = (uint64_t)m->hp.n_layer * (uint64_t)cfg.n_expert_used; /* qwen3moe-tiny: all route */
    const uint64_t issued0 = st.prefetch_issued;
    st0 = st;
    const double t0 = df_time();
    for (int k = 0; k < 50; k++) { /* many steps (slow under qemu or a sanitizer) */
        assert_int_equal(ws_probe(ws, 0.3, 0.0, 7 + (uint64_t)k, &bytes, &secs, err, sizeof err), 0);
        ws_get_stats(ws, &st);
        if (st.hits + st.misses > 20 * step) break;
    }
    const ws_plan *pl = ws_get_plan(ws);
    printf("  probe, every guess wrong: %llu guesses read, %llu lookups (%llu hits), %d slots\n",
           (unsigned long long)st.prefetch_issued, (unsigned long long)(st.hits + st.misses),
           (unsigned long long)st.hits, pl->n_expert_slots);
    assert_true(st.hits + st.misses > 20 * step); /* many steps ran */
    assert_true(st.prefetch_issued - issued0 <= 2 * step);
    /* ... and not while reads are in flight: the engine reads io_threads jobs at once at most (wsio.c), so
     * they kept the disk busy for at least their summed time / io_threads */
    const double wall = df_time() - t0, idle = st.idle_seconds - st0.idle_seconds;
    const double reads = st.read_seconds - st0.read_seconds, at_once = cfg.io_threads > 0 ? cfg.io_threads : 8;
    printf("  probe: %.3f s, disk idle %.3f s, reads summed %.3f s, %.0f at once at most\n", wall, idle, reads, at_once);
    assert_true(reads > 0 && idle >= 0 && idle + reads / at_once <= wall + 1e-3);
    ws_close(ws);
    df_model_free(m);
}

static int setup(void **state) {
    (void)state;
    return tu_mkdtemp(tmpdir, sizeof tmpdir, "stream");
}

static int teardown(void **state) {
    (void)state;
    return tu_rmtree(tmpdir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_streaming_identical),
        cmocka_unit_test(test_cached_experts_packed),
        cmocka_unit_test(test_expert_slot_layouts),
        cmocka_unit_test_teardown(test_gptoss_ring_streaming_identical, default_lengths),
        cmocka_unit_test(test_nextn_block_skipped),
        cmocka_unit_test(test_shrink_mid_decode),
        cmocka_unit_test(test_dense_streaming_identical),
        cmocka_unit_test(test_dense_streaming_families),
        cmocka_unit_test(test_budget_below_minimum),
        cmocka_unit_test(test_hot_file),
        cmocka_unit_test(test_lookahead_recall),
        cmocka_unit_test(test_truncated_while_streaming),
        cmocka_unit_test(test_disk_probe),
        cmocka_unit_test(test_guess_gate),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
