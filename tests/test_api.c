/*
 * test_api.c - the public calls that `deltafin info` and `deltafin plan` are
 * built on (the CLI includes nothing but include/deltafin.h, so these are
 * what any other program gets too):
 *  - df_parse_size: the sizes --mem takes, and what it refuses;
 *  - df_model_describe: a file's metadata and tensor directory, checked
 *    against a model made with known shapes and against what loading the
 *    same model says (df_model_get_info); a missing file is an error;
 *  - df_plan_predict (and df_plan_predict_tiers): the tokens/s model on a plan with hand-computed
 *    numbers, and 0 tokens/s for a budget below the minimum.
 */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "deltafin.h"

static char g_dir[256], g_moe[320];

static int setup(void **state) {
    (void)state;
    if (tu_mkdtemp(g_dir, sizeof g_dir, "api") != 0) return -1;
    snprintf(g_moe, sizeof g_moe, "%s/moe.gguf", g_dir);
    tu_mkmodel(g_moe, "--preset qwen3moe-tiny --type q8_0 --expert-type mxfp4");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    return tu_rmtree(g_dir);
}

static void test_parse_size(void **state) {
    (void)state;
    assert_true(df_parse_size("6G") == 6ull << 30);
    assert_true(df_parse_size("512M") == 512ull << 20);
    assert_true(df_parse_size("1.5GiB") == 3ull << 29);
    assert_true(df_parse_size("64 KB") == 64ull << 10);
    assert_true(df_parse_size("4096") == 4096);
    assert_true(df_parse_size("2T") == 2ull << 40);
    const char *bad[] = {"", "0", "-1G", "abc", "1X", "1GG", "1e30", NULL};
    for (int i = 0; bad[i]; i++) assert_true(df_parse_size(bad[i]) == 0);
    assert_true(df_parse_size(NULL) == 0);
}

/* The value of one of the description's hyperparameters (an integer). */
static int64_t hparam_int(const df_model_desc *d, const char *key) {
    for (int i = 0; i < d->n_hparams; i++)
        if (!strcmp(d->hparams[i].key, key)) {
            assert_int_equal(d->hparams[i].kind, DF_VALUE_INT);
            return d->hparams[i].i;
        }
    fail_msg("hyperparameter %s missing", key);
    return -1;
}

static void test_describe_moe(void **state) {
    (void)state;
    char err[512];
    df_model_desc *d = NULL;
    assert_int_equal(df_model_describe(g_moe, &d, err, sizeof err), 0);
    assert_non_null(d);
    assert_string_equal(d->arch, "qwen3moe");
    assert_int_equal(d->n_files, 1);
    assert_int_equal(d->gguf_version, 3);
    assert_string_equal(d->hparams[0].key, "context_length");
    const int64_t n_layer = hparam_int(d, "block_count");
    assert_int_equal(hparam_int(d, "expert_count"), (int64_t)d->n_expert);
    assert_int_equal(hparam_int(d, "expert_used_count"), (int64_t)d->n_expert_used);
    assert_true(d->n_moe_layers == (uint64_t)n_layer); /* every layer of this preset has experts */
    /* per-type sums add up to the file's; the experts are mxfp4, the rest q8_0 or f32 */
    uint64_t n = 0, bytes = 0, expert = 0;
    int saw_mxfp4 = 0;
    for (int t = 0; t < d->n_types; t++) {
        const df_type_summary *s = &d->types[t];
        n += s->n_tensors;
        bytes += s->bytes;
        expert += s->expert_bytes;
        assert_true(s->supported);
        if (!strcmp(s->name, "mxfp4")) {
            saw_mxfp4 = 1;
            assert_true(fabs(s->bits_per_weight - 4.25) < 1e-9);
            assert_true(s->expert_bytes > 0);
        } else {
            assert_true(s->expert_bytes == 0);
        }
    }
    assert_true(saw_mxfp4);
    assert_true(n == d->n_tensors);
    assert_true(bytes == d->n_bytes);
    assert_true(expert == d->expert_bytes);
    assert_string_equal(d->tok_model, "gpt2");
    assert_true(d->n_tokens > 0);
    /* the same facts as loading the model gives */
    df_model_params mp = df_model_default_params();
    mp.n_threads = 1;
    df_model *m;
    assert_int_equal(df_model_load(g_moe, &mp, &m, err, sizeof err), 0);
    df_model_info info;
    df_model_get_info(m, &info);
    assert_true(info.n_params == d->n_params);
    assert_true(info.n_bytes == d->n_bytes);
    assert_true(info.n_params_active == d->n_params_active);
    assert_true(d->n_params_active < d->n_params);
    assert_int_equal(info.n_expert, (int)d->n_expert);
    assert_int_equal(info.n_expert_used, (int)d->n_expert_used);
    assert_int_equal(info.n_layer, (int)n_layer);
    assert_true(info.expert_bytes * d->n_moe_layers == d->expert_bytes);
    assert_int_equal(df_n_vocab(m), (int)d->n_tokens);
    df_model_free(m);
    df_model_desc_free(d);
}

static void test_describe_errors(void **state) {
    (void)state;
    char err[512] = "";
    static df_model_desc sentinel;
    df_model_desc *d = &sentinel; /* must be reset to NULL */
    char path[400];
    snprintf(path, sizeof path, "%s/missing.gguf", g_dir);
    assert_int_equal(df_model_describe(path, &d, err, sizeof err), -1);
    assert_null(d);
    assert_non_null(strstr(err, "missing.gguf"));
    snprintf(path, sizeof path, "%s/not.gguf", g_dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("this is not a GGUF file at all", f);
    fclose(f);
    err[0] = 0;
    assert_int_equal(df_model_describe(path, &d, err, sizeof err), -1);
    assert_null(d);
    assert_true(err[0] != 0);
    df_model_desc_free(NULL);
}

static void test_plan_predict(void **state) {
    (void)state;
    df_plan p;
    memset(&p, 0, sizeof p);
    p.budget = 2000;
    p.minimum = 1000;
    p.n_experts_total = 100;
    p.n_expert_slots = 25;
    p.n_moe_layers = 2;
    p.n_expert_used = 4;
    p.expert_slot_bytes = 1000;
    p.n_dense_streamed = 1;
    p.dense_layer_bytes = 500;
    p.dense_bytes = 10000;
    df_plan_speed s;
    df_plan_predict(&p, 1e6, 1e7, &s);
    /* experts per token 2 x 4 x 1000 = 8000 bytes, a quarter of them cached */
    assert_true(fabs(s.hit_rate - 0.25) < 1e-12);
    assert_true(fabs(s.disk_bytes_per_token - (8000 * 0.75 + 500)) < 1e-9);
    assert_true(fabs(s.memory_bytes_per_token - 18000) < 1e-9);
    assert_true(fabs(s.disk_seconds - 6500 / 1e6) < 1e-15);
    assert_true(fabs(s.memory_seconds - 18000 / 1e7) < 1e-15);
    /* docs/memory.md "What plan predicts": the weights kept in memory (10000 - the streamed layer's 500) compute while
     * the disk idles; the experts and the streamed layer compute under the reads. No lookahead (it guesses
     * for no layer): */
    const double t_res = 9500 / 1e7;
    assert_true(fabs(s.tokens_per_s - 1.0 / (t_res + 6500 / 1e6)) < 1e-9);
    assert_true(fabs(s.disk_idle_seconds - t_res) < 1e-12 && s.memory_resident_bytes_per_token == 9500);
    assert_int_equal(s.lookahead_reads, 0);
    df_plan_predict(&p, 1e9, 1e6, &s); /* the reads hide under the experts' compute: memory-bound */
    assert_true(fabs(s.tokens_per_s - 1.0 / (18000 / 1e6)) < 1e-9);
    /* it guesses for one of the two MoE layers, half of them right: at this disk the compute waits 76% of
     * the time, more than the share of guesses that would be right (0.5 of the 75% missed), so none is read */
    p.lookahead_recall = 0.5;
    p.n_guessed_layers = 1;
    df_plan_predict(&p, 1e6, 1e7, &s);
    assert_true(fabs(s.tokens_per_s - 1.0 / (t_res + 6500 / 1e6)) < 1e-9);
    assert_int_equal(s.lookahead_reads, 0);
    /* at a disk 4x as fast it waits 30%: the guesses are read, and hide a quarter of the resident compute */
    df_plan_predict(&p, 4e6, 1e7, &s);
    assert_true(fabs(s.tokens_per_s - 1.0 / (0.75 * t_res + 6500 / 4e6)) < 1e-9);
    assert_int_equal(s.lookahead_reads, 1);
    /* perfect guesses in every layer: the slower of the two sets the pace */
    p.lookahead_recall = 1;
    p.n_guessed_layers = 2;
    df_plan_predict(&p, 2e6, 1e7, &s);
    assert_true(fabs(s.tokens_per_s - 2e6 / 6500) < 1e-9); /* disk-bound */
    df_plan_predict(&p, 4e6, 1e7, &s);
    assert_true(fabs(s.tokens_per_s - 1e7 / 18000) < 1e-9); /* memory-bound */
    /* the page cache as a second tier: 0 bytes is no tier; 500 hold the streamed dense layer (copied: 2 x 500 more
     * from memory); 500 + 30,000 hold 40% of the 75 experts outside the cache, so 0.75 x 0.4 = 0.3 of the expert
     * reads are copies (2 x 0.3 x 8000 from memory), 0.45 from disk; room for all: nothing from disk */
    df_plan_speed t;
    df_plan_predict(&p, 1e6, 1e7, &s);
    df_plan_predict_tiers(&p, 1e6, 1e7, 0, &t);
    assert_true(t.tokens_per_s == s.tokens_per_s && t.page_cache_hit_rate == 0 && t.disk_bytes_per_token == 6500);
    df_plan_predict_tiers(&p, 1e6, 1e7, 500, &t);
    assert_true(fabs(t.disk_bytes_per_token - 6000) < 1e-9 && fabs(t.memory_bytes_per_token - 19000) < 1e-9);
    df_plan_predict_tiers(&p, 1e6, 1e7, 30500, &t);
    assert_true(fabs(t.page_cache_hit_rate - 0.3) < 1e-12);
    assert_true(fabs(t.disk_bytes_per_token - 8000 * 0.45) < 1e-9);
    assert_true(fabs(t.memory_bytes_per_token - (18000 + 1000 + 2 * 0.3 * 8000)) < 1e-9);
    df_plan_predict_tiers(&p, 1e6, 1e7, (uint64_t)1 << 40, &t);
    assert_true(t.disk_bytes_per_token == 0 && fabs(t.page_cache_hit_rate - 0.75) < 1e-12);
    assert_true(fabs(t.tokens_per_s - 1e7 / (18000 + 1000 + 2 * 0.75 * 8000)) < 1e-6); /* memory-bound */
    p.budget = 999; /* below the minimum: no speed */
    df_plan_predict(&p, 1e6, 1e7, &s);
    assert_true(s.tokens_per_s == 0.0);
    assert_true(s.disk_bytes_per_token > 0);
    /* a dense model: nothing routed, everything in memory */
    memset(&p, 0, sizeof p);
    p.budget = p.minimum = 1;
    p.dense_bytes = 4000;
    df_plan_predict(&p, 0, 2000, &s);
    assert_true(s.hit_rate == 1.0 && s.disk_bytes_per_token == 0 && s.disk_seconds == 0);
    assert_true(fabs(s.tokens_per_s - 0.5) < 1e-12);
    /* recurrent layers: every token reads and writes their state (500 bytes) as it reads the weights; a
     * KV cache is not read whole */
    p.n_mem = 2;
    snprintf(p.mem[0].name, sizeof p.mem[0].name, "recurrent state");
    p.mem[0].bytes = 500;
    snprintf(p.mem[1].name, sizeof p.mem[1].name, "KV cache");
    p.mem[1].bytes = 100000;
    df_plan_predict(&p, 0, 2000, &s);
    assert_true(fabs(s.memory_bytes_per_token - 5000) < 1e-9 && fabs(s.tokens_per_s - 0.4) < 1e-12);
    /* a speculative pass of 3 positions (k = 2) updates it three times */
    df_plan_predict_spec(&p, 0, 2000, 0.0, 2, &s);
    assert_true(fabs(s.memory_bytes_per_token - (4000 + 3 * 1000)) < 1e-9);
}

/* df_model_plan's plan of the real model, predicted: a plausible speed. */
static void test_plan_of_model(void **state) {
    (void)state;
    char err[512];
    df_model_params mp = df_model_default_params();
    mp.mem_budget = df_parse_size("64M");
    df_plan p;
    assert_int_equal(df_model_plan(g_moe, &mp, &p, err, sizeof err), 0);
    df_plan_speed s;
    df_plan_predict(&p, 1e9, 1e10, &s);
    assert_true(s.hit_rate >= 0 && s.hit_rate <= 1);
    assert_true(s.memory_bytes_per_token >= (double)p.dense_bytes);
    assert_true(s.tokens_per_s > 0);
}

/* The memory probes: decoding's products over the model's weights (memprobe.c) within a small buffer (evicted
 * each pass), and the plain read; a missing file is an error that names it. */
static void test_probe_memory(void **state) {
    (void)state;
    char err[512] = "";
    df_model_params mp = df_model_default_params();
    mp.n_threads = 2;
    const double r = df_model_probe_memory(g_moe, &mp, 0.05, (uint64_t)8 << 20, err, sizeof err);
    assert_true(r > 1e6);
    assert_true(df_probe_memory(0.05, (uint64_t)8 << 20, 2) > 1e6);
    assert_true(df_model_probe_memory("/nonexistent/m.gguf", &mp, 0.05, 0, err, sizeof err) < 0);
    assert_non_null(strstr(err, "/nonexistent/m.gguf"));
}

/* df_model_params.plan_cb: the load's own plan, before it reads weights, is df_model_plan's for the same file and
 * parameters (the CLI prints it instead of planning, and reading the file, a second time); none without a budget */
static void keep(const df_plan *p, void *ctx) {
    memcpy(ctx, p, sizeof *p);
    ((df_plan *)ctx)->ranks += 1000; /* marks a call */
}

static void test_plan_of_load(void **state) {
    (void)state;
    char err[512];
    static const char *const budgets[] = {"64M", "8M", "1G"};
    for (int b = 0; b < 3; b++) {
        df_model_params mp = df_model_default_params();
        mp.mem_budget = df_parse_size(budgets[b]);
        mp.n_ctx = 256;
        df_plan want, got;
        memset(&got, 0, sizeof got);
        assert_int_equal(df_model_plan(g_moe, &mp, &want, err, sizeof err), 0);
        mp.plan_cb = keep;
        mp.plan_ctx = &got;
        df_model *m = NULL;
        const int rc = df_model_load(g_moe, &mp, &m, err, sizeof err);
        assert_int_equal(got.ranks, want.ranks + 1000); /* called, fitting or not */
        got.ranks -= 1000;
        if (memcmp(&got, &want, sizeof got) != 0) fail_msg("budget %s: the load's plan differs", budgets[b]);
        assert_int_equal(rc != 0, want.minimum > want.budget);
        df_model_free(m);
    }
    df_model_params mp = df_model_default_params(); /* no budget: no plan */
    df_plan got;
    memset(&got, 0, sizeof got);
    mp.plan_cb = keep;
    mp.plan_ctx = &got;
    df_model *m = NULL;
    assert_int_equal(df_model_load(g_moe, &mp, &m, err, sizeof err), 0);
    assert_int_equal(got.ranks, 0);
    df_model_free(m);
}

/* df_planner: one reading of the file, the plans df_model_plan makes, under any budget, context, sessions and
 * resident type, and df_model_describe's description */
static void test_planner(void **state) {
    (void)state;
    char err[512];
    df_model_params mp = df_model_default_params();
    df_planner *pl = NULL;
    assert_int_equal(df_planner_open(g_moe, &mp, &pl, err, sizeof err), 0);
    static const char *const budgets[] = {"8M", "30M", "64M", "1G"};
    for (int b = 0; b < 4; b++)
        for (int v = 0; v < 3; v++) {
            mp.mem_budget = df_parse_size(budgets[b]);
            mp.n_ctx = v == 1 ? 1024 : 256;
            mp.n_sessions = v == 2 ? 3 : 1;
            mp.resident_type = v == 2 ? "q4_K" : NULL;
            df_plan want, got;
            assert_int_equal(df_model_plan(g_moe, &mp, &want, err, sizeof err), 0);
            assert_int_equal(df_planner_plan(pl, &mp, &got, err, sizeof err), 0);
            if (memcmp(&got, &want, sizeof got) != 0) fail_msg("budget %s, variant %d: the plans differ", budgets[b], v);
        }
    /* its description is df_model_describe's, made from the same reading */
    df_model_desc *a = NULL, *b = NULL;
    assert_int_equal(df_model_describe(g_moe, &a, err, sizeof err), 0);
    assert_int_equal(df_planner_describe(pl, &b, err, sizeof err), 0);
    assert_string_equal(a->arch, b->arch);
    assert_int_equal(a->n_files, b->n_files);
    assert_int_equal(a->n_hparams, b->n_hparams);
    for (int i = 0; i < a->n_hparams; i++) {
        assert_string_equal(a->hparams[i].key, b->hparams[i].key);
        assert_true(a->hparams[i].i == b->hparams[i].i && a->hparams[i].f == b->hparams[i].f &&
                    a->hparams[i].n == b->hparams[i].n && a->hparams[i].kind == b->hparams[i].kind);
    }
    assert_int_equal(a->n_types, b->n_types);
    for (int t = 0; t < a->n_types; t++) {
        assert_string_equal(a->types[t].name, b->types[t].name);
        assert_true(a->types[t].bytes == b->types[t].bytes && a->types[t].expert_bytes == b->types[t].expert_bytes &&
                    a->types[t].n_tensors == b->types[t].n_tensors);
    }
    assert_true(a->n_tensors == b->n_tensors && a->n_params == b->n_params && a->n_bytes == b->n_bytes);
    assert_true(a->n_expert == b->n_expert && a->n_moe_layers == b->n_moe_layers &&
                a->n_expert_used == b->n_expert_used && a->n_params_active == b->n_params_active &&
                a->expert_bytes == b->expert_bytes && a->n_nextn == b->n_nextn && a->n_tokens == b->n_tokens &&
                a->n_merges == b->n_merges);
    assert_string_equal(a->tok_model, b->tok_model);
    df_model_desc_free(a);
    df_model_desc_free(b); /* borrowed: the planner's reading stays */
    df_plan p;
    assert_int_equal(df_planner_plan(pl, &mp, &p, err, sizeof err), 0);
    mp.mtp = 1; /* the NextN block changes what is read: not this planner's */
    assert_int_equal(df_planner_plan(pl, &mp, &p, err, sizeof err), -1);
    df_planner_free(pl);
    assert_int_equal(df_planner_open("/nonexistent.gguf", &mp, &pl, err, sizeof err), -1);
    assert_null(pl);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planner),
        cmocka_unit_test(test_plan_of_load),
        cmocka_unit_test(test_parse_size),   cmocka_unit_test(test_describe_moe),
        cmocka_unit_test(test_describe_errors), cmocka_unit_test(test_plan_predict),
        cmocka_unit_test(test_plan_of_model), cmocka_unit_test(test_probe_memory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
