/*
 * test_decode.c - the decode calls' contract: df_decode_batch gives each
 * session exactly what df_decode gives it alone (greedy generations and
 * logits bit-identical, every mkmodel architecture preset, in memory and
 * streamed under a budget); error codes; the abort callback cancels a long
 * prompt and leaves the session usable; a decode from inside the callback
 * is refused (DF_E_BUSY) rather than deadlocking. df_decode_hidden's rows
 * (the last hidden state after the final norm) are the same in a batch and
 * one by one, and leave the logits as df_decode's; deepseek4 refuses them.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deltafin.h"
#include "testutil.h"

#define NS 3    /* sessions */
#define NP 11   /* prompt of session 0 (others: shorter) */
#define NG 6    /* greedy steps */
#define MIX 2   /* at this step session 0 brings MIX_N tokens (its greedy one and more): a prompt beside steps */
#define MIX_N 3

static int nbatch = 8; /* the models' and sessions' n_batch (check_batch sets it) */

static char tmpdir[128];

static const char *const presets[][2] = {
    {"llama", "--arch llama --type f32"},
    {"qwen3", "--arch qwen3 --type q8_0"},
    {"qwen3moe", "--preset qwen3moe-tiny --type q8_0"},
    {"deepseek-v3", "--preset deepseek-v3-tiny --type q8_0"},
    {"kimi-linear", "--preset kimi-linear-tiny --type q8_0"},
    {"kimi-k3", "--preset kimi-k3-tiny --type q8_0"},
    {"glm4moe", "--preset glm4moe-tiny --type q8_0"},
    {"minimax-m2", "--preset minimax-m2-tiny --type q8_0"},
    {"gpt-oss", "--preset gpt-oss-tiny --type q8_0"},
    /* top-k 4 and 5: the 17 positions mostly attend to the indexer's choice */
    {"deepseek32", "--preset deepseek32-tiny --type q8_0 --idx-top-k 4"},
    {"glm-dsa", "--preset glm-dsa-tiny --type q8_0 --idx-types 1101 --idx-top-k 5"},
    {"qwen35moe", "--preset qwen35moe-tiny --type q8_0"},
    {"qwen3next", "--preset qwen3next-tiny --type q8_0 --legacy-ssm-in 1"},
    /* window 6 and top-2 of the ratio-4 blocks: the compressors' state crosses the steps */
    {"deepseek4", "--preset deepseek4-tiny --type q8_0 --swa 6 --idx-top-k 2"},
    {"granite", "--preset granite-moe-tiny --type q8_0"},
};

static int32_t argmax(const float *v, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static df_session *session(df_model *m);

/* Planned bytes are allocated bytes: a second session of m (the shared
 * scratch is there already) takes from the heap what the plan counts as a
 * session's own memory (glibc's counters; not under a sanitizer, whose
 * allocator keeps its own). */
static void check_own_bytes(df_model *m, const char *path, uint64_t own) {
    if (getenv("DELTAFIN_SANITIZED")) return;
    df_session *a = session(m);
    const struct mallinfo2 before = mallinfo2();
    df_session *b = session(m);
    const struct mallinfo2 after = mallinfo2();
    const double got = (double)(after.uordblks + after.hblkhd) - (double)(before.uordblks + before.hblkhd);
    printf("  %s: a session's own memory planned %.1f KiB, allocated %.1f KiB\n", strrchr(path, '/') + 1,
           (double)own / 1024, got / 1024);
    assert_true(got >= 0.99 * (double)own - 4096 && got <= 1.002 * (double)own + 8192);
    df_session_free(b);
    df_session_free(a);
}

static df_model *load(const char *path, uint64_t budget) {
    char err[512];
    uint64_t own = 0;
    df_model_params mp = df_model_default_params();
    mp.n_threads = 2;
    mp.n_ctx = 64;
    mp.n_batch = nbatch;
    mp.hot_file = "";
    if (budget) {
        df_plan p, one;
        mp.mem_budget = 1;
        if (df_model_plan(path, &mp, &one, err, sizeof err) != 0) fail_msg("%s", err);
        mp.n_sessions = NS + 1; /* the batch, and a session alone beside it (test_union) */
        if (df_model_plan(path, &mp, &p, err, sizeof err) != 0) fail_msg("%s", err);
        /* the plan counts them: each session's own memory, the scratch once (the sessions share it) */
        assert_true(one.scratch_bytes > 0 && one.scratch_bytes < one.session_bytes);
        assert_int_equal(p.minimum, one.minimum + (uint64_t)NS * (one.session_bytes - one.scratch_bytes));
        mp.mem_budget = p.minimum + (1 << 20);
        own = one.session_bytes - one.scratch_bytes;
    }
    df_model *m;
    if (df_model_load(path, &mp, &m, err, sizeof err) != 0) fail_msg("%s", err);
    if (own) check_own_bytes(m, path, own);
    return m;
}

static df_session *session(df_model *m) {
    char err[512];
    df_session_params sp = df_session_default_params();
    sp.n_ctx = 64;
    sp.n_batch = nbatch;
    df_session *s;
    if (df_session_new(m, &sp, &s, err, sizeof err) != 0) fail_msg("%s", err);
    return s;
}

static void prompt(int i, int nv, int32_t *toks, int *n) {
    *n = NP - 3 * i;
    for (int k = 0; k < *n; k++) toks[k] = (int32_t)(1 + (k * 31 + i * 17) % (nv - 3));
}

/* Session i's tokens at greedy step g: its greedy token t, and at step MIX
 * session 0 brings MIX_N tokens (t and fixed ones after it). */
static int step_tokens(int i, int g, int32_t t, int32_t *toks) {
    toks[0] = t;
    if (i != 0 || g != MIX) return 1;
    for (int k = 1; k < MIX_N; k++) toks[k] = 7 + 2 * k;
    return MIX_N;
}

/* Session i alone: the logits after its prompt and after each greedy step. */
static void alone(df_model *m, int i, float *out) {
    char err[512];
    const int nv = df_n_vocab(m);
    int32_t toks[NP];
    int n;
    prompt(i, nv, toks, &n);
    df_session *s = session(m);
    assert_int_equal(df_decode(s, toks, n, out, 0, err, sizeof err), DF_OK);
    for (int g = 0; g < NG; g++) {
        int32_t t[MIX_N];
        const int k = step_tokens(i, g, argmax(out + (size_t)g * nv, nv), t);
        assert_int_equal(df_decode(s, t, k, out + (size_t)(g + 1) * nv, 0, err, sizeof err), DF_OK);
    }
    df_session_free(s);
}

/* NS sessions decoded together (df_decode_batch) give the logits of each
 * alone. With n_batch nb = 8 the prompts (11, 8 and 5 tokens) run one after
 * another (11 > 8; 8 + 5 > 8); with nb >= 24 they are the runs of one pass.
 * The step where session 0 brings MIX_N tokens beside the others' single
 * tokens is one pass either way. */
static void check_batch(const char *name, const char *args, int streamed, int nb) {
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, name);
    if (!streamed && nb == 8) tu_mkmodel(path, args);
    nbatch = nb;
    df_model *m = load(path, streamed);
    const int nv = df_n_vocab(m);
    const size_t per = (size_t)(NG + 1) * nv;
    float *ref = malloc(sizeof(float) * per * NS), *got = malloc(sizeof(float) * per * NS);
    assert_true(ref && got);
    for (int i = 0; i < NS; i++) alone(m, i, ref + i * per);
    df_session *s[NS];
    int32_t toks[NS][NP], next[NS];
    int n[NS];
    const int32_t *tp[NS];
    float *lp[NS];
    for (int i = 0; i < NS; i++) {
        s[i] = session(m);
        prompt(i, nv, toks[i], &n[i]);
        tp[i] = toks[i];
        lp[i] = got + i * per;
    }
    df_io_stats a, b;
    df_model_io_stats(m, &a);
    assert_int_equal(df_decode_batch(s, NS, tp, n, lp, err, sizeof err), DF_OK);
    df_model_io_stats(m, &b);
    if (nb >= NS * NP) { /* the three prompts prefilled in one pass */
        assert_int_equal(b.passes - a.passes, 1);
        assert_int_equal(b.pass_rows - a.pass_rows, 3 * NP - 9);
    }
    int32_t mix[NS][MIX_N];
    for (int g = 0; g < NG; g++) {
        for (int i = 0; i < NS; i++) {
            n[i] = step_tokens(i, g, argmax(got + i * per + (size_t)g * nv, nv), mix[i]);
            tp[i] = mix[i];
            lp[i] = got + i * per + (size_t)(g + 1) * nv;
        }
        df_model_io_stats(m, &a);
        assert_int_equal(df_decode_batch(s, NS, tp, n, lp, err, sizeof err), DF_OK);
        df_model_io_stats(m, &b);
        assert_int_equal(b.passes - a.passes, 1); /* a step, with or without session 0's MIX_N tokens */
        assert_int_equal(b.pass_rows - a.pass_rows, NS + (g == MIX ? MIX_N - 1 : 0));
    }
    for (int i = 0; i < NS; i++) assert_int_equal(df_session_pos(s[i]), NP - 3 * i + NG + (i ? 0 : MIX_N - 1));
    if (memcmp(ref, got, sizeof(float) * per * NS) != 0) fail_msg("%s%s: batched logits differ", name, streamed ? " (streamed)" : "");
    printf("  %-12s %-9s n_batch %2d: %d sessions x %d greedy steps (prompts in %s, a %d-token run beside "
           "steps): bit-identical to decoding alone\n", name, streamed ? "streamed" : "in memory", nb, NS, NG,
           nb >= NS * NP ? "one pass" : "turn", MIX_N);
    /* a NULL logits entry; a generation step is one pass over the weights
     * (every architecture), each MoE layer running the union of the rows'
     * experts once; and the input checks */
    lp[1] = NULL;
    for (int i = 0; i < NS; i++) {
        next[i] = 1;
        tp[i] = &next[i];
        n[i] = 1;
    }
    df_model_io_stats(m, &a);
    assert_int_equal(df_decode_batch(s, NS, tp, n, lp, err, sizeof err), DF_OK);
    df_model_io_stats(m, &b);
    assert_int_equal(b.passes - a.passes, 1);
    assert_int_equal(b.pass_rows - a.pass_rows, NS);
    const uint64_t runs = b.moe_runs - a.moe_runs, uni = b.expert_union - a.expert_union;
    if (runs) { /* between one row's choice and all of them */
        df_model_info info;
        df_model_get_info(m, &info);
        assert_true(uni >= runs * (uint64_t)info.n_expert_used && uni <= runs * (uint64_t)info.n_expert_used * NS);
    }
    df_session *dup[2] = {s[0], s[0]};
    assert_int_equal(df_decode_batch(dup, 2, tp, n, lp, err, sizeof err), DF_E_INPUT);
    next[2] = nv;
    assert_int_equal(df_decode_batch(s, NS, tp, n, lp, err, sizeof err), DF_E_INPUT);
    assert_non_null(strstr(err, "session 2"));
    for (int i = 0; i < NS; i++) df_session_free(s[i]);
    free(ref);
    free(got);
    df_model_free(m);
    nbatch = 8;
}

/* NS sessions at the same prompt choose the same experts: a batched step
 * runs each once, so it reads exactly the expert bytes one session's step
 * reads, in memory and streamed under a budget (where the store is asked
 * for the union once per layer). */
static void check_union(const char *name, const char *args, int streamed) {
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/%s-union.gguf", tmpdir, name);
    if (!streamed) tu_mkmodel(path, args);
    df_model *m = load(path, streamed);
    df_model_info info;
    df_model_get_info(m, &info);
    const int nv = df_n_vocab(m);
    int32_t toks[NP], one = 5;
    int n, n1[NS];
    prompt(0, nv, toks, &n);
    df_session *s[NS];
    const int32_t *tp[NS];
    for (int i = 0; i < NS; i++) {
        s[i] = session(m);
        assert_int_equal(df_decode(s[i], toks, n, NULL, 0, err, sizeof err), DF_OK);
        tp[i] = &one;
        n1[i] = 1;
    }
    df_session *solo = session(m);
    assert_int_equal(df_decode(solo, toks, n, NULL, 0, err, sizeof err), DF_OK);
    df_io_stats a, b, c;
    df_model_io_stats(m, &a);
    assert_int_equal(df_decode(solo, &one, 1, NULL, 0, err, sizeof err), DF_OK); /* one session's step */
    df_model_io_stats(m, &b);
    df_session_free(solo);
    assert_int_equal(df_decode_batch(s, NS, tp, n1, NULL, err, sizeof err), DF_OK);
    df_model_io_stats(m, &c);
    assert_int_equal(c.passes - b.passes, 1);
    assert_true(c.moe_runs - b.moe_runs > 0);
    assert_int_equal(c.expert_union - b.expert_union, (c.moe_runs - b.moe_runs) * (uint64_t)info.n_expert_used);
    assert_int_equal(c.expert_bytes - b.expert_bytes, b.expert_bytes - a.expert_bytes);
    printf("  %-12s %-9s %d identical sessions: one step reads %llu expert bytes, as one session does\n", name,
           streamed ? "streamed" : "in memory", NS, (unsigned long long)(c.expert_bytes - b.expert_bytes));
    for (int i = 0; i < NS; i++) df_session_free(s[i]);
    df_model_free(m);
}

static void test_union(void **state) {
    (void)state;
    static const char *const moe[][2] = {{"deepseek-v3", "--preset deepseek-v3-tiny --type q8_0"},
                                         {"kimi-k3", "--preset kimi-k3-tiny --type q8_0"},
                                         {"gpt-oss", "--preset gpt-oss-tiny --type q8_0"},
                                         {"qwen3moe", "--preset qwen3moe-tiny --type q8_0"}};
    for (size_t k = 0; k < sizeof moe / sizeof moe[0]; k++) {
        check_union(moe[k][0], moe[k][1], 0);
        check_union(moe[k][0], moe[k][1], 1);
    }
}

static void test_batch_identical(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof presets / sizeof presets[0]; k++) {
        check_batch(presets[k][0], presets[k][1], 0, 8);
        check_batch(presets[k][0], presets[k][1], 1, 8);
        check_batch(presets[k][0], presets[k][1], 0, NS * NP);
        check_batch(presets[k][0], presets[k][1], 1, NS * NP);
    }
}

/* The abort callback: stop after `after` checks. */
typedef struct {
    int calls, after;
} abort_state;

static int stop_after(void *p) {
    abort_state *a = p;
    return ++a->calls > a->after;
}

/* A 40-token prompt cancelled part way returns DF_E_CANCELLED with the
 * session at the end of a completed batch; decoding the rest from there
 * gives the logits of an uninterrupted run (llama: cancelled between
 * layers; kimi-linear, recurrent: between batches). */
static void test_abort(void **state) {
    (void)state;
    const char *models[2][2] = {{"llama", "--arch llama --type f32"}, {"kimi-linear", "--preset kimi-linear-tiny --type f32"}};
    for (int k = 0; k < 2; k++) {
        char path[256], err[512];
        snprintf(path, sizeof path, "%s/abort-%s.gguf", tmpdir, models[k][0]);
        tu_mkmodel(path, models[k][1]);
        df_model *m = load(path, 0);
        const int nv = df_n_vocab(m);
        int32_t toks[40];
        for (int i = 0; i < 40; i++) toks[i] = (int32_t)(1 + (i * 13) % (nv - 3));
        float *a = malloc(sizeof(float) * (size_t)nv), *b = malloc(sizeof(float) * (size_t)nv);
        assert_true(a && b);
        df_session *ref = session(m);
        assert_int_equal(df_decode(ref, toks, 40, a, 0, err, sizeof err), DF_OK);
        df_session_free(ref);
        for (int after = 0; after < (k ? 4 : 12); after += k ? 3 : 2) { /* llama: 3 checks per batch (odd: between layers); kimi-linear: 5 in all */
            abort_state st = {0, after};
            df_session_params sp = df_session_default_params();
            sp.n_ctx = 64;
            sp.n_batch = 8;
            sp.abort_cb = stop_after;
            sp.abort_ctx = &st;
            df_session *s;
            assert_int_equal(df_session_new(m, &sp, &s, err, sizeof err), DF_OK);
            err[0] = 0;
            assert_int_equal(df_decode(s, toks, 40, b, 0, err, sizeof err), DF_E_CANCELLED);
            const int pos = df_session_pos(s);
            printf("  %-12s abort after %2d checks: %s (position %d)\n", models[k][0], after, err, pos);
            assert_true(pos % 8 == 0 && pos < 40);
            st.after = 1 << 30; /* let it finish */
            assert_int_equal(df_decode(s, toks + pos, 40 - pos, b, 0, err, sizeof err), DF_OK);
            assert_memory_equal(a, b, sizeof(float) * (size_t)nv);
            df_session_free(s);
        }
        free(a);
        free(b);
        df_model_free(m);
    }
}

/* An abort callback that decodes with the same model (on the thread that
 * holds the model's lock) gets DF_E_BUSY instead of waiting for itself. */
typedef struct {
    df_session *other;
    int rc, calls;
} busy_state;

static int decode_inside(void *p) {
    busy_state *b = p;
    char err[256];
    int32_t t = 1;
    if (b->calls++ == 0) b->rc = df_decode(b->other, &t, 1, NULL, 0, err, sizeof err);
    return 0;
}

static void test_busy(void **state) {
    (void)state;
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/busy.gguf", tmpdir);
    tu_mkmodel(path, "--arch llama --type f32");
    df_model *m = load(path, 0);
    busy_state b = {session(m), 1, 0};
    df_session_params sp = df_session_default_params();
    sp.n_ctx = 64;
    sp.abort_cb = decode_inside;
    sp.abort_ctx = &b;
    df_session *s;
    assert_int_equal(df_session_new(m, &sp, &s, err, sizeof err), DF_OK);
    int32_t toks[3] = {1, 2, 3};
    assert_int_equal(df_decode(s, toks, 3, NULL, 0, err, sizeof err), DF_OK);
    assert_int_equal(b.rc, DF_E_BUSY);
    assert_int_equal(df_session_pos(b.other), 0);
    assert_int_equal(df_decode(b.other, toks, 3, NULL, 0, err, sizeof err), DF_OK); /* outside: fine */
    printf("  a decode from inside abort_cb: DF_E_BUSY; outside it runs\n");
    df_session_free(s);
    df_session_free(b.other);
    df_model_free(m);
}

/* Codes beside the messages. */
static void test_codes(void **state) {
    (void)state;
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/codes.gguf", tmpdir);
    tu_mkmodel(path, "--arch llama --type f32");
    df_model *m = NULL;
    char missing[300];
    snprintf(missing, sizeof missing, "%s/no-such-file.gguf", tmpdir);
    assert_int_equal(df_model_load(missing, NULL, &m, err, sizeof err), DF_E_IO);
    printf("  DF_E_IO: %s\n", err);
    m = load(path, 0);
    df_session_params sp = df_session_default_params();
    sp.n_ctx = 1 << 25;
    df_session *s = NULL;
    assert_int_equal(df_session_new(m, &sp, &s, err, sizeof err), DF_E_INPUT);
    printf("  DF_E_INPUT: %s\n", err);
    s = session(m);
    int32_t toks[65] = {0};
    assert_int_equal(df_decode(s, toks, 65, NULL, 0, err, sizeof err), DF_E_CTX_FULL);
    printf("  DF_E_CTX_FULL: %s\n", err);
    toks[0] = -1;
    assert_int_equal(df_decode(s, toks, 1, NULL, 0, err, sizeof err), DF_E_INPUT);
    assert_int_equal(df_session_pos(s), 0);
    df_session_free(s);
    df_model_free(m);
}

static void test_hidden(void **state) {
    (void)state;
    char path[256], path4[256], err[512];
    snprintf(path, sizeof path, "%s/hidden.gguf", tmpdir);
    snprintf(path4, sizeof path4, "%s/hidden-ds4.gguf", tmpdir);
    tu_mkmodel(path, "--arch llama --type f32");
    df_model *m = load(path, 0);
    df_model_info info;
    df_model_get_info(m, &info);
    const int nv = df_n_vocab(m), E = info.n_embd;
    int32_t toks[NP];
    int n;
    prompt(0, nv, toks, &n);
    float *ha = malloc(sizeof(float) * (size_t)(n * E)), *hb = malloc(sizeof(float) * (size_t)(n * E));
    float *la = malloc(sizeof(float) * (size_t)(n * nv)), *lb = malloc(sizeof(float) * (size_t)(n * nv));
    assert_true(ha && hb && la && lb);
    df_session *a = session(m), *b = session(m), *c = session(m);
    assert_int_equal(df_decode_hidden(a, toks, n, la, 1, ha, err, sizeof err), DF_OK); /* two batches of nbatch */
    for (int i = 0; i < n; i++)
        assert_int_equal(df_decode_hidden(b, toks + i, 1, NULL, 0, hb + (int64_t)i * E, err, sizeof err), DF_OK);
    assert_memory_equal(ha, hb, sizeof(float) * (size_t)(n * E));
    assert_int_equal(df_decode(c, toks, n, lb, 1, err, sizeof err), DF_OK);
    assert_memory_equal(la, lb, sizeof(float) * (size_t)(n * nv));
    double ss = 0;
    for (int i = 0; i < E; i++) ss += (double)ha[i] * ha[i];
    assert_true(ss > 0);
    df_session_free(a), df_session_free(b), df_session_free(c);
    df_model_free(m);
    tu_mkmodel(path4, "--preset deepseek4-tiny --type q8_0");
    m = load(path4, 0);
    a = session(m);
    assert_int_equal(df_decode_hidden(a, toks, 1, NULL, 0, hb, err, sizeof err), DF_E_UNSUPPORTED);
    printf("  DF_E_UNSUPPORTED: %s\n", err);
    df_session_free(a);
    df_model_free(m);
    free(ha), free(hb), free(la), free(lb);
}

static int setup(void **state) {
    (void)state;
    return tu_mkdtemp(tmpdir, sizeof tmpdir, "decode");
}

static int teardown(void **state) {
    (void)state;
    return tu_rmtree(tmpdir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_identical),
        cmocka_unit_test(test_union),
        cmocka_unit_test(test_abort),
        cmocka_unit_test(test_busy),
        cmocka_unit_test(test_codes),
        cmocka_unit_test(test_hidden),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
