/*
 * test_hardening.c - the library refuses what it cannot run honestly.
 *
 *  - weights that make NaN or Inf logits are an error, never token 0 forever
 *    (with the file mapped, resident, or streamed under a budget);
 *  - df_model_plan checks the model as loading does: a missing tensor, an
 *    unsupported type or a wrong shape is an error, not "fits" with a
 *    predicted speed; sizes that add up past 2^64 are an error, not a wrapped
 *    small minimum;
 *  - a vocabulary-only load tokenizes and opens no session.
 * (The hardening issue's items 9, 10 and 14; the CLI side is in the shell tests of tests/cli.)
 */
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

#include "deltafin.h"
#include "gguf.h"
#include "quant.h"
#include "wstore.h"

static char dir[256];

static int setup(void **state) {
    (void)state;
    return tu_mkdtemp(dir, sizeof dir, "hard");
}
static int teardown(void **state) {
    (void)state;
    return tu_rmtree(dir);
}

/* A fresh f32 llama model at path (f32: any byte pattern can be planted). */
static void make_f32(const char *path) { tu_mkmodel(path, "--arch llama --type f32"); }

/* Where a tensor's bytes and its directory entry are in the file. */
static void locate(const char *path, const char *name, uint64_t *data_off, uint64_t *nbytes) {
    gguf_ctx *g;
    char err[256];
    assert_int_equal(gguf_open(path, &g, err, sizeof err), 0);
    const gguf_tensor *t = gguf_find_tensor(g, name);
    assert_non_null(t);
    *data_off = t->offset;
    *nbytes = t->nbytes;
    gguf_close(g);
}

/* Overwrite the first n floats of tensor `name` with v. */
static void plant(const char *path, const char *name, float v, int n) {
    uint64_t off, nb;
    locate(path, name, &off, &nb);
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    for (int i = 0; i < n && (uint64_t)(i + 1) * 4 <= nb; i++)
        assert_int_equal(pwrite(fd, &v, 4, (off_t)(off + 4u * (uint64_t)i)), 4);
    close(fd);
}

/* Decode a short prompt; returns df_decode's result, its message in err. */
static int decode_with(const char *path, int use_mmap, uint64_t budget, char *err, size_t errlen) {
    df_model_params mp = df_model_default_params();
    mp.n_threads = 2;
    mp.use_mmap = use_mmap;
    mp.mem_budget = budget;
    mp.n_ctx = 64;
    mp.hot_file = "";
    df_model *m;
    assert_int_equal(df_model_load(path, &mp, &m, err, errlen), 0);
    df_session_params sp = df_session_default_params();
    sp.n_ctx = 64;
    df_session *s;
    assert_int_equal(df_session_new(m, &sp, &s, err, errlen), 0);
    const int32_t toks[3] = {1, 5, 9};
    float *logits = malloc((size_t)df_n_vocab(m) * 3 * sizeof(float));
    assert_non_null(logits);
    int rc = df_decode(s, toks, 3, logits, 1, err, errlen);
    if (rc == 0)
        for (int i = 0; i < df_n_vocab(m) * 3; i++) assert_true(isfinite(logits[i]));
    free(logits);
    df_session_free(s);
    df_model_free(m);
    return rc;
}

static void test_nonfinite_weights(void **state) {
    (void)state;
    char path[320], err[512];
    static const struct { const char *tensor; float v; } cases[] = {
        {"output_norm.weight", NAN}, {"blk.0.ffn_down.weight", INFINITY}, {"token_embd.weight", -INFINITY},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        snprintf(path, sizeof path, "%s/nan%zu.gguf", dir, c);
        make_f32(path);
        assert_int_equal(decode_with(path, 1, 0, err, sizeof err), 0); /* healthy first */
        plant(path, cases[c].tensor, cases[c].v, 1 << 20);
        for (int mode = 0; mode < 3; mode++) {
            err[0] = 0;
            if (decode_with(path, mode != 1, mode == 2 ? (256u << 20) : 0, err, sizeof err) != -1)
                fail_msg("%s = %g, mode %d: decoded without an error", cases[c].tensor, (double)cases[c].v, mode);
            assert_non_null(strstr(err, "non-finite logit"));
        }
    }
}

static void expect_plan_error(const char *path, const char *what) {
    df_model_params mp = df_model_default_params();
    mp.mem_budget = 1ull << 30;
    mp.n_ctx = 64;
    df_plan p;
    char err[512] = "";
    assert_int_equal(df_model_plan(path, &mp, &p, err, sizeof err), -1);
    if (!strstr(err, what)) fail_msg("plan: expected '%s' in '%s'", what, err);
    /* and loading under a budget names the same defect, not the budget */
    df_model *m = NULL;
    mp.mem_budget = 1024;
    err[0] = 0;
    assert_int_equal(df_model_load(path, &mp, &m, err, sizeof err), -1);
    if (!strstr(err, what)) fail_msg("load --mem 1K: expected '%s' in '%s'", what, err);
}

/* Patch the directory entry of `name`: its ne[0]/ne[1] (swap) or its type. */
static void patch_entry(const char *path, const char *name, int swap_dims, int new_type) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    const size_t nl = strlen(name);
    size_t at = 0;
    for (size_t i = 0; i + nl + 8 < n && !at; i++)
        if (!memcmp(buf + i, name, nl) && i >= 8) {
            uint64_t len;
            memcpy(&len, buf + i - 8, 8);
            if (len == nl) at = i + nl;
        }
    assert_true(at > 0);
    uint32_t nd;
    memcpy(&nd, buf + at, 4);
    assert_int_equal(nd, 2);
    uint64_t ne[2];
    memcpy(ne, buf + at + 4, 16);
    if (swap_dims) {
        const uint64_t sw[2] = {ne[1], ne[0]};
        memcpy(buf + at + 4, sw, 16);
    }
    if (new_type >= 0) {
        const uint32_t t = (uint32_t)new_type;
        memcpy(buf + at + 20, &t, 4);
    }
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    assert_int_equal(fwrite(buf, 1, at + 24, f), at + 24);
    assert_int_equal(fclose(f), 0);
}

static void test_plan_checks_tensors(void **state) {
    (void)state;
    char path[320];
    /* a missing tensor: its name changed in the directory */
    snprintf(path, sizeof path, "%s/missing.gguf", dir);
    make_f32(path);
    {
        FILE *f = fopen(path, "r+b");
        assert_non_null(f);
        static char buf[1 << 20];
        size_t n = fread(buf, 1, sizeof buf, f);
        char *p = memmem(buf, n, "blk.0.ffn_up.weight", 19);
        assert_non_null(p);
        p[6] = 'X'; /* blk.0.fXn_up.weight */
        assert_int_equal(fseek(f, 0, SEEK_SET), 0);
        assert_int_equal(fwrite(buf, 1, n, f), n);
        fclose(f);
    }
    expect_plan_error(path, "missing tensor 'blk.0.ffn_up.weight'");
    /* an unsupported type of the same size (i32 for f32) */
    snprintf(path, sizeof path, "%s/type.gguf", dir);
    make_f32(path);
    patch_entry(path, "blk.0.attn_q.weight", 0, 26);
    expect_plan_error(path, "cannot compute with");
    /* a wrong shape: [n_embd, n_ff] stored as [n_ff, n_embd] */
    snprintf(path, sizeof path, "%s/shape.gguf", dir);
    make_f32(path);
    patch_entry(path, "blk.0.ffn_up.weight", 1, -1);
    expect_plan_error(path, "has shape");
}

/* Sizes whose sum passes 2^64 are an error, not a wrapped small minimum. */
static void test_plan_sum_overflow(void **state) {
    (void)state;
    gguf_tensor t[3];
    memset(t, 0, sizeof t);
    const char *names[3] = {"token_embd.weight", "output.weight", "blk.0.attn_q.weight"};
    for (int i = 0; i < 3; i++) {
        t[i].name = (char *)names[i];
        t[i].n_dims = 2;
        t[i].ne[0] = t[i].ne[1] = 1;
        t[i].ne[2] = t[i].ne[3] = 1;
        t[i].nbytes = (1ull << 62) + 12345;
    }
    gguf_ctx g;
    memset(&g, 0, sizeof g);
    g.tensors = t;
    g.n_tensors = 3;
    ws_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.mode = WS_STREAM;
    cfg.n_layer = 1;
    cfg.budget = 1ull << 30;
    cfg.reserve = 1 << 20;
    ws_plan p;
    char err[256] = "";
    assert_int_equal(ws_make_plan(&g, &cfg, &p, err, sizeof err), -1);
    assert_non_null(strstr(err, "2^64"));
    assert_true(p.minimum == UINT64_MAX);
    /* a reserve near 2^64 (a session that cannot be sized) does not wrap either */
    t[0].nbytes = t[1].nbytes = t[2].nbytes = 4096;
    cfg.reserve = UINT64_MAX - 100;
    assert_int_equal(ws_make_plan(&g, &cfg, &p, err, sizeof err), -1);
    assert_true(p.minimum == UINT64_MAX);
}

/* A vocabulary-only load (llama.cpp's ggml-vocab-*.gguf have no tensors). */
static void test_vocab_only(void **state) {
    (void)state;
    char path[320], err[512];
    snprintf(path, sizeof path, "%s/vocab.gguf", dir);
    make_f32(path);
    df_model_params mp = df_model_default_params();
    mp.vocab_only = 1;
    df_model *m;
    assert_int_equal(df_model_load(path, &mp, &m, err, sizeof err), 0);
    int32_t ids[16];
    int n = 0;
    assert_int_equal(df_tokenize(m, "hello", 5, 1, 0, ids, 16, &n, err, sizeof err), 0);
    assert_true(n > 0);
    df_session *s = NULL;
    assert_int_equal(df_session_new(m, NULL, &s, err, sizeof err), DF_E_UNSUPPORTED);
    assert_non_null(strstr(err, "vocabulary only"));
    df_io_stats st;
    df_model_io_stats(m, &st);
    assert_int_equal(st.streaming, 0);
    df_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nonfinite_weights),
        cmocka_unit_test(test_plan_checks_tensors),
        cmocka_unit_test(test_plan_sum_overflow),
        cmocka_unit_test(test_vocab_only),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
