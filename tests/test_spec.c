/*
 * test_spec.c - speculative decoding (df_spec_*) and prompt caches
 * (df_prompt_cache_*): greedy output with prompt lookup and with a draft
 * model is byte-identical to plain decoding, for every mkmodel architecture
 * preset, in memory and streamed under a budget (recurrent models too:
 * kimi-linear, kimi-k3, qwen35moe, qwen3next, whose passes with rejected
 * guesses roll their recurrent state back; their sessions ask for the room
 * with spec_k_max, and without it speculation is off with the reason); after
 * a rolled-back pass the next logits are bit for bit those of a session that
 * only saw the kept tokens; sampled output keeps the target distribution (token
 * frequencies over many seeds against the model's softmax); a draft with
 * another vocabulary is refused; a prompt cache restores the longest
 * common prefix, and one of another model or a damaged one is refused.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deltafin.h"
#include "testutil.h"

#define NP 12 /* prompt */
#define NG 40 /* generated tokens */
#define CTX 96
#define SPEC_K 4 /* the sessions' spec_k_max: rollback room for passes of 4 guesses */

static char tmpdir[128];

static const char *const presets[][2] = {
    {"llama", "--arch llama --type f32"},
    {"qwen3", "--arch qwen3 --type q8_0"},
    {"qwen3moe", "--preset qwen3moe-tiny --type q8_0"},
    {"deepseek-v3", "--preset deepseek-v3-tiny --type q8_0"},
    {"kimi-linear", "--preset kimi-linear-tiny --type q8_0"},
    {"kimi-k3", "--preset kimi-k3-tiny --type q8_0"},
    {"qwen35moe", "--preset qwen35moe-tiny --type q8_0"},
    {"qwen3next", "--preset qwen3next-tiny --type q8_0"},
    {"glm4moe", "--preset glm4moe-tiny --type q8_0"},
    {"minimax-m2", "--preset minimax-m2-tiny --type q8_0"},
    {"gpt-oss", "--preset gpt-oss-tiny --type q8_0"},
};

/* The presets with recurrent layers (KDA or gated delta net). */
static const char *const recurrent[][2] = {
    {"kimi-linear", "--preset kimi-linear-tiny --type q8_0"},
    {"kimi-k3", "--preset kimi-k3-tiny --type q8_0"},
    {"qwen35moe", "--preset qwen35moe-tiny --type q8_0"},
    {"qwen3next", "--preset qwen3next-tiny --type q8_0"},
};

static int is_recurrent(const char *name) {
    for (size_t i = 0; i < sizeof recurrent / sizeof recurrent[0]; i++)
        if (!strcmp(name, recurrent[i][0])) return 1;
    return 0;
}

static df_model *load(const char *path, int streamed) {
    char err[512];
    df_model_params mp = df_model_default_params();
    mp.n_threads = 2;
    mp.n_ctx = CTX;
    mp.n_batch = 8;
    mp.hot_file = "";
    mp.spec_k_max = SPEC_K; /* the budget plans the sessions' rollback room */
    if (streamed) {
        df_plan p;
        mp.mem_budget = 1;
        if (df_model_plan(path, &mp, &p, err, sizeof err) != 0) fail_msg("%s", err);
        mp.mem_budget = p.minimum + 2 * p.session_bytes + (1 << 20); /* target and reference sessions */
    }
    df_model *m;
    if (df_model_load(path, &mp, &m, err, sizeof err) != 0) fail_msg("%s", err);
    return m;
}

static df_session *session_k(df_model *m, int spec_k_max) {
    char err[512];
    df_session_params sp = df_session_default_params();
    sp.n_ctx = CTX;
    sp.n_batch = 8;
    sp.spec_k_max = spec_k_max;
    df_session *s;
    if (df_session_new(m, &sp, &s, err, sizeof err) != 0) fail_msg("%s", err);
    return s;
}

static df_session *session(df_model *m) { return session_k(m, SPEC_K); }

/* A repetitive prompt, so that prompt lookup finds n-grams. */
static void prompt(int nv, int32_t *toks) {
    for (int k = 0; k < NP; k++) toks[k] = (int32_t)(1 + (k % 4) * 7 % (nv - 3));
}

/* Another prompt of few distinct tokens (every token recurs, so lookup always
 * guesses), in an order drawn from seed. */
static void prompt_seeded(int nv, uint64_t seed, int32_t *toks) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int k = 0; k < NP; k++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        toks[k] = (int32_t)(1 + (int)((x >> 33) % 5) * 37 % (nv - 3));
    }
}

static df_sampler *sampler(int nv, float temp, uint64_t seed) {
    df_sampler_params p = df_sampler_default_params();
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1;
    p.min_p = 0;
    p.seed = seed;
    df_sampler *smp = df_sampler_new(&p, nv);
    assert_non_null(smp);
    return smp;
}

static int64_t gen_seed = -1; /* generate's prompt: prompt() when negative, else prompt_seeded(gen_seed) */

/* Generate NG tokens after the prompt: plainly (sp_params NULL) or speculatively. */
static void generate(df_model *m, const df_spec_params *spp, float temp, uint64_t seed, int32_t *out,
                     df_spec_stats *st) {
    char err[512];
    const int nv = df_n_vocab(m);
    int32_t toks[NP];
    if (gen_seed < 0) prompt(nv, toks);
    else prompt_seeded(nv, (uint64_t)gen_seed, toks);
    df_session *s = session(m);
    float *lg = malloc((size_t)nv * sizeof(float));
    assert_non_null(lg);
    assert_int_equal(df_decode(s, toks, NP, lg, 0, err, sizeof err), DF_OK);
    df_sampler *smp = sampler(nv, temp, seed);
    for (int i = 0; i < NP; i++) df_sampler_accept(smp, toks[i]);
    out[0] = df_sampler_sample(smp, lg);
    df_sampler_accept(smp, out[0]);
    int n = 1;
    if (!spp) {
        for (; n < NG; n++) {
            assert_int_equal(df_decode(s, &out[n - 1], 1, lg, 0, err, sizeof err), DF_OK);
            out[n] = df_sampler_sample(smp, lg);
            df_sampler_accept(smp, out[n]);
        }
    } else {
        df_spec *sp;
        if (df_spec_new(s, spp, toks, NP, &sp, err, sizeof err) != 0) fail_msg("%s", err);
        while (n < NG) {
            int got = 0;
            if (df_spec_step(sp, smp, out[n - 1], out + n, NG - n, &got, err, sizeof err) != DF_OK) fail_msg("%s", err);
            assert_true(got >= 1 && got <= NG - n);
            n += got;
        }
        if (st) df_spec_get_stats(sp, st);
        df_spec_free(sp);
    }
    df_sampler_free(smp);
    free(lg);
    df_session_free(s);
}

/* Recurrent models: greedy with lookup (k 4, 1-grams) is plain decoding's
 * over seeded prompts, until one whose run kept some guesses and rejected
 * others (so passes were rolled back past kept rows). */
static void check_greedy_mixed(df_model *m, const char *name, int streamed) {
    int32_t ref[NG], got[NG];
    int64_t seed = 0;
    for (; seed < 200; seed++) {
        gen_seed = seed;
        generate(m, NULL, 0, 1, ref, NULL);
        df_spec_params p = df_spec_default_params();
        p.k_fixed = 4;
        p.ngram_min = 1;
        df_spec_stats st;
        generate(m, &p, 0, 1, got, &st);
        if (memcmp(ref, got, sizeof ref) != 0)
            fail_msg("%s%s: prompt %d: greedy output with prompt lookup differs from plain decoding", name,
                     streamed ? " (streamed)" : "", (int)seed);
        if (st.accepted > 0 && st.guessed > st.accepted) {
            printf("  %-12s %-9s prompt %d, lookup k=4: identical, %d of %d guesses kept in %d passes\n", name,
                   streamed ? "streamed" : "in memory", (int)seed, st.accepted, st.guessed, st.passes);
            break;
        }
    }
    gen_seed = -1;
    if (seed == 200) fail_msg("%s: no prompt had lookup guesses both kept and rejected", name);
}

static void check_greedy(const char *name, const char *args, int streamed) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, name);
    if (!streamed) tu_mkmodel(path, args);
    df_model *m = load(path, streamed);
    int32_t ref[NG], got[NG];
    generate(m, NULL, 0, 1, ref, NULL);
    const int ks[] = {4, -1, 2};
    for (int i = 0; i < 3; i++) {
        df_spec_params p = df_spec_default_params();
        p.k_fixed = ks[i];
        p.k_max = 4;
        if (i == 2) p.ngram_min = 1; /* more guesses (and more rejected ones) */
        df_spec_stats st;
        generate(m, &p, 0, 1, got, &st);
        if (memcmp(ref, got, sizeof ref) != 0)
            fail_msg("%s%s: greedy output with prompt lookup (k %d) differs from plain decoding", name,
                     streamed ? " (streamed)" : "", ks[i]);
        if (i == 2)
            printf("  %-12s %-9s lookup k=2, 1-grams: identical, %d of %d guesses kept in %d passes%s%s\n", name,
                   streamed ? "streamed" : "in memory", st.accepted, st.guessed, st.passes, st.k ? "" : "; off: ",
                   st.k ? "" : st.why);
    }
    /* recurrent models: also prompts whose guesses are partly kept, partly rolled back */
    if (is_recurrent(name)) check_greedy_mixed(m, name, streamed);
    df_model_free(m);
}

/* Greedy generation with lookup (k 4, 1-grams) after prompt_seeded(seed),
 * stopped after the first pass that kept some guesses and rejected others;
 * the session's next logits (after decoding the pending token) then equal a
 * fresh session's that decoded only the kept tokens. 1 if such a pass came. */
static int rollback_pass(df_model *m, uint64_t seed) {
    char err[512];
    const int nv = df_n_vocab(m);
    int32_t toks[NP + NG], *out = toks + NP;
    prompt_seeded(nv, seed, toks);
    df_session *s = session(m);
    float *lg = malloc((size_t)nv * sizeof(float)), *ref = malloc((size_t)nv * sizeof(float));
    assert_true(lg && ref);
    assert_int_equal(df_decode(s, toks, NP, lg, 0, err, sizeof err), DF_OK);
    df_sampler *smp = sampler(nv, 0, 1);
    for (int i = 0; i < NP; i++) df_sampler_accept(smp, toks[i]);
    out[0] = df_sampler_sample(smp, lg);
    df_sampler_accept(smp, out[0]);
    df_spec_params p = df_spec_default_params();
    p.k_fixed = 4;
    p.ngram_min = 1;
    df_spec *sp;
    if (df_spec_new(s, &p, toks, NP, &sp, err, sizeof err) != 0) fail_msg("%s", err);
    int n = 1, mixed = 0;
    df_spec_stats st0, st;
    df_spec_get_stats(sp, &st0);
    while (n < NG - 1 && !mixed) {
        int got = 0;
        if (df_spec_step(sp, smp, out[n - 1], out + n, NG - 1 - n, &got, err, sizeof err) != DF_OK) fail_msg("%s", err);
        n += got;
        df_spec_get_stats(sp, &st);
        const int kept = st.accepted - st0.accepted, rejected = (st.guessed - st.accepted) - (st0.guessed - st0.accepted);
        mixed = kept > 0 && rejected > 0;
        st0 = st;
    }
    df_spec_free(sp);
    df_sampler_free(smp);
    if (mixed) {
        /* the session holds the prompt and out[0..n-1); out[n-1] is pending */
        assert_int_equal(df_session_pos(s), NP + n - 1);
        assert_int_equal(df_decode(s, &out[n - 1], 1, lg, 0, err, sizeof err), DF_OK);
        df_session *f = session(m);
        assert_int_equal(df_decode(f, toks, NP + n, ref, 0, err, sizeof err), DF_OK);
        if (memcmp(lg, ref, (size_t)nv * sizeof(float)) != 0)
            fail_msg("seed %d: logits after a rolled-back pass differ from a session fed the kept tokens", (int)seed);
        df_session_free(f);
        /* a rewind before the last pass still cannot be done */
        assert_int_equal(df_session_truncate(s, NP - 1, err, sizeof err), -1);
        assert_non_null(strstr(err, "recurrent"));
    }
    free(lg);
    free(ref);
    df_session_free(s);
    return mixed;
}

/* The plan's session bytes with rollback room for k guesses a pass. */
static uint64_t planned_session(const char *path, int spec_k_max) {
    char err[512];
    df_model_params mp = df_model_default_params();
    mp.n_ctx = CTX;
    mp.n_batch = 8;
    mp.spec_k_max = spec_k_max;
    mp.hot_file = "";
    df_plan p;
    if (df_model_plan(path, &mp, &p, err, sizeof err) != 0) fail_msg("%s", err);
    return p.session_bytes;
}

/* Recurrent models: a pass with kept and rejected guesses is rolled back
 * exactly (rollback_pass, over prompts until one gives such a pass, in
 * memory and streamed); without rollback room speculation is off, with the
 * reason, and the output is still plain decoding's. */
static void test_rollback_logits(void **state) {
    (void)state;
    char path[256], err[512];
    for (size_t i = 0; i < sizeof recurrent / sizeof recurrent[0]; i++) {
        snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, recurrent[i][0]);
        tu_mkmodel(path, recurrent[i][1]);
        /* the rollback room is planned: more with more guesses a pass */
        const uint64_t b0 = planned_session(path, 0), b4 = planned_session(path, 4), b8 = planned_session(path, 8);
        printf("  %-12s session %.1f KiB; rollback room for 4 guesses %.1f KiB, for 8 %.1f KiB\n", recurrent[i][0],
               b0 / 1024.0, (b4 - b0) / 1024.0, (b8 - b0) / 1024.0);
        assert_true(b0 < b4 && b4 < b8);
        for (int streamed = 0; streamed < 2; streamed++) {
            df_model *m = load(path, streamed);
            uint64_t seed = 0;
            while (seed < 200 && !rollback_pass(m, seed)) seed++;
            if (seed == 200) fail_msg("%s: no prompt gave a pass with kept and rejected guesses", recurrent[i][0]);
            printf("  %-12s %-9s prompt %d: a pass kept and rejected guesses; next logits identical\n",
                   recurrent[i][0], streamed ? "streamed" : "in memory", (int)seed);
            if (!streamed) { /* sampled: the same draws as plain decoding, seed for seed */
                int32_t ref[NG], got[NG];
                df_spec_params p = df_spec_default_params();
                p.k_fixed = 3;
                p.ngram_min = 1;
                gen_seed = (int64_t)seed;
                for (uint64_t smp_seed = 1; smp_seed <= 3; smp_seed++) {
                    generate(m, NULL, 1.0f, smp_seed, ref, NULL);
                    generate(m, &p, 1.0f, smp_seed, got, NULL);
                    if (memcmp(ref, got, sizeof ref) != 0)
                        fail_msg("%s: seed %d: sampled output differs", recurrent[i][0], (int)smp_seed);
                }
                gen_seed = -1;
            }
            if (!streamed) { /* no room: off, with the reason */
                df_session *s = session_k(m, 0);
                df_spec_params p = df_spec_default_params();
                df_spec *sp;
                assert_int_equal(df_spec_new(s, &p, NULL, 0, &sp, err, sizeof err), 0);
                df_spec_stats st;
                df_spec_get_stats(sp, &st);
                assert_int_equal(st.k, 0);
                assert_non_null(strstr(st.why, "spec_k_max"));
                df_spec_free(sp);
                df_session_free(s);
            }
            df_model_free(m);
        }
    }
}

static void test_greedy_every_arch(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) check_greedy(presets[i][0], presets[i][1], 0);
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) check_greedy(presets[i][0], presets[i][1], 1);
    /* no recurrent layers: no rollback room */
    char path[256];
    snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, presets[0][0]);
    assert_true(planned_session(path, 0) == planned_session(path, 8));
}

/* A draft model: the same model loaded twice (every guess kept), and another one. */
static void test_draft(void **state) {
    (void)state;
    char path[256], dpath[256], bad[256], err[512];
    snprintf(path, sizeof path, "%s/t.gguf", tmpdir);
    snprintf(dpath, sizeof dpath, "%s/d.gguf", tmpdir);
    snprintf(bad, sizeof bad, "%s/v.gguf", tmpdir);
    tu_mkmodel(path, "--arch llama --type f32 --seed 3");
    tu_mkmodel(dpath, "--arch llama --type q8_0 --n-layer 1 --seed 4");
    tu_mkmodel(bad, "--arch llama --type f32 --vocab 400");
    df_model *m = load(path, 0);
    int32_t ref[NG], got[NG];
    const char *drafts[] = {path, dpath};
    for (int streamed = 0; streamed < 2; streamed++) {
        if (streamed) df_model_free(m), m = load(path, 1);
        generate(m, NULL, 0, 1, ref, NULL);
        for (int d = 0; d < 2; d++) {
            df_model *dm = load(drafts[d], 0);
            df_session *ds = session(dm);
            df_spec_params p = df_spec_default_params();
            p.source = DF_SPEC_DRAFT;
            p.draft = ds;
            p.k_fixed = 3;
            df_spec_stats st;
            generate(m, &p, 0, 1, got, &st);
            if (memcmp(ref, got, sizeof ref) != 0) fail_msg("greedy output with draft %d differs", d);
            printf("  draft %d %s: identical, %d of %d guesses kept\n", d, streamed ? "streamed" : "in memory",
                   st.accepted, st.guessed);
            if (d == 0) assert_int_equal(st.accepted, st.guessed);
            df_session_free(ds);
            df_model_free(dm);
        }
    }
    /* another vocabulary is refused */
    df_model *vm = load(bad, 0);
    df_session *vs = session(vm), *s = session(m);
    df_spec_params p = df_spec_default_params();
    p.source = DF_SPEC_DRAFT;
    p.draft = vs;
    df_spec *sp;
    assert_int_equal(df_spec_new(s, &p, NULL, 0, &sp, err, sizeof err), -1);
    assert_non_null(strstr(err, "vocabulary"));
    df_session_free(vs);
    df_session_free(s);
    df_model_free(vm);
    df_model_free(m);
}

/* Recurrent targets and drafts: the same file loaded twice (every guess
 * kept) and the same weights at another type (guesses mostly kept, some
 * rejected: both sessions roll back), in memory and with the target
 * streamed; greedy output is plain decoding's. */
static void test_draft_recurrent(void **state) {
    (void)state;
    char path[256], dpath[256], args[160];
    for (size_t i = 0; i < sizeof recurrent / sizeof recurrent[0]; i++) {
        snprintf(path, sizeof path, "%s/%s-t.gguf", tmpdir, recurrent[i][0]);
        snprintf(dpath, sizeof dpath, "%s/%s-d.gguf", tmpdir, recurrent[i][0]);
        tu_mkmodel(path, recurrent[i][1]);
        snprintf(args, sizeof args, "%s --type q4_0", recurrent[i][1]); /* the later --type wins */
        tu_mkmodel(dpath, args);
        const char *drafts[] = {path, dpath};
        int kept = 0, rejected = 0;
        for (int streamed = 0; streamed < 2; streamed++) {
            df_model *m = load(path, streamed);
            int32_t ref[NG], got[NG];
            for (int64_t seed = -1; seed < 3; seed++) {
                gen_seed = seed;
                generate(m, NULL, 0, 1, ref, NULL);
                for (int d = 0; d < 2; d++) {
                    df_model *dm = load(drafts[d], 0);
                    df_session *ds = session(dm);
                    df_spec_params p = df_spec_default_params();
                    p.source = DF_SPEC_DRAFT;
                    p.draft = ds;
                    p.k_fixed = 3;
                    df_spec_stats st;
                    generate(m, &p, 0, 1, got, &st);
                    if (memcmp(ref, got, sizeof ref) != 0)
                        fail_msg("%s: prompt %d: greedy output with draft %d%s differs", recurrent[i][0], (int)seed, d,
                                 streamed ? " (streamed)" : "");
                    if (d == 0) assert_int_equal(st.accepted, st.guessed);
                    else kept += st.accepted, rejected += st.guessed - st.accepted;
                    df_session_free(ds);
                    df_model_free(dm);
                }
            }
            gen_seed = -1;
            df_model_free(m);
        }
        printf("  %-12s drafts (itself; q4_0): identical in memory and streamed; q4_0 draft: %d guesses kept, %d "
               "rejected\n", recurrent[i][0], kept, rejected);
        if (kept == 0 || rejected == 0) fail_msg("%s: the q4_0 draft's guesses were not both kept and rejected",
                                                 recurrent[i][0]);
    }
}

/* Sampling: the same draws as plain decoding seed for seed, and the first
 * verified row's token frequencies match the model's softmax. */
static void test_sampling_distribution(void **state) {
    (void)state;
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/s.gguf", tmpdir);
    tu_mkmodel(path, "--arch llama --type f32 --vocab 300 --seed 9");
    df_model *m = load(path, 0);
    const int nv = df_n_vocab(m);
    int32_t ref[NG], got[NG];
    df_spec_params p = df_spec_default_params();
    p.k_fixed = 3;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        generate(m, NULL, 1.0f, seed, ref, NULL);
        generate(m, &p, 1.0f, seed, got, NULL);
        if (memcmp(ref, got, sizeof ref) != 0) fail_msg("seed %d: sampled output differs", (int)seed);
    }
    /* the distribution of the token after prompt + x, with x followed by a guess in the prompt */
    int32_t toks[NP];
    prompt(nv, toks);
    const int32_t x = toks[NP - 4]; /* lookup will guess toks[NP - 3] after it */
    df_session *s = session(m);
    float *lg = malloc((size_t)nv * sizeof(float));
    double *pr = calloc((size_t)nv, sizeof(double)), *freq = calloc((size_t)nv, sizeof(double));
    assert_true(lg && pr && freq);
    assert_int_equal(df_decode(s, toks, NP, NULL, 0, err, sizeof err), DF_OK);
    assert_int_equal(df_decode(s, &x, 1, lg, 0, err, sizeof err), DF_OK);
    double mx = lg[0], z = 0;
    for (int i = 1; i < nv; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (int i = 0; i < nv; i++) z += pr[i] = exp(lg[i] - mx);
    for (int i = 0; i < nv; i++) pr[i] /= z;
    const int N = 3000;
    p.k_fixed = 1;
    int compared = 0;
    for (int r = 0; r < N; r++) {
        assert_int_equal(df_session_truncate(s, NP, err, sizeof err), 0);
        df_spec *sp;
        assert_int_equal(df_spec_new(s, &p, toks, NP, &sp, err, sizeof err), 0);
        df_sampler *smp = sampler(nv, 1.0f, 1000 + (uint64_t)r);
        int32_t out[2];
        int n = 0;
        assert_int_equal(df_spec_step(sp, smp, x, out, 2, &n, err, sizeof err), DF_OK);
        df_spec_stats st;
        df_spec_get_stats(sp, &st);
        compared += st.guessed;
        freq[out[0]] += 1.0 / N;
        df_sampler_free(smp);
        df_spec_free(sp);
    }
    assert_int_equal(compared, N); /* every step verified a guess */
    /* Pearson's chi-square over the tokens expected at least 5 times, the rest pooled */
    double chi2 = 0, rest_p = 0, rest_f = 0;
    int df = 0;
    for (int i = 0; i < nv; i++) {
        const double sd = sqrt(pr[i] * (1 - pr[i]) / N);
        if (fabs(freq[i] - pr[i]) > 5 * sd + 1e-3)
            fail_msg("token %d: frequency %.4f, model probability %.4f", i, freq[i], pr[i]);
        if (pr[i] * N >= 5) chi2 += N * (freq[i] - pr[i]) * (freq[i] - pr[i]) / pr[i], df++;
        else rest_p += pr[i], rest_f += freq[i];
    }
    if (rest_p * N >= 5) chi2 += N * (rest_f - rest_p) * (rest_f - rest_p) / rest_p, df++;
    df--;
    printf("  %d sampled steps: chi-square %.1f on %d degrees of freedom against the model's softmax\n", N, chi2, df);
    assert_true(df > 0);
    assert_true(chi2 < df + 6 * sqrt(2.0 * df));
    free(lg);
    free(pr);
    free(freq);
    df_session_free(s);
    df_model_free(m);
}

/* Prompt caches: the longest common prefix is restored; foreign and damaged caches are refused. */
static void test_prompt_cache(void **state) {
    (void)state;
    char path[256], other[256], cache[256], err[512];
    snprintf(path, sizeof path, "%s/c.gguf", tmpdir);
    snprintf(other, sizeof other, "%s/o.gguf", tmpdir);
    snprintf(cache, sizeof cache, "%s/c.cache", tmpdir);
    tu_mkmodel(path, "--arch llama --type f32 --seed 5");
    tu_mkmodel(other, "--arch llama --type f32 --seed 6");
    df_model *m = load(path, 0), *o = load(other, 0);
    const int nv = df_n_vocab(m);
    int32_t toks[NP];
    prompt(nv, toks);
    float *ref = malloc((size_t)nv * sizeof(float)), *got = malloc((size_t)nv * sizeof(float));
    assert_true(ref && got);
    df_session *s = session(m);
    assert_int_equal(df_decode(s, toks, NP, ref, 0, err, sizeof err), DF_OK);
    assert_int_equal(df_session_truncate(s, NP - 1, err, sizeof err), 0);
    assert_int_equal(df_prompt_cache_save(s, cache, toks, err, sizeof err), 0);
    /* the same prompt: all but its last token reused, the last one's logits the same */
    df_session *c = session(m);
    int reused = -1;
    assert_int_equal(df_prompt_cache_load(c, cache, toks, NP - 1, &reused, err, sizeof err), 0);
    assert_int_equal(reused, NP - 1);
    assert_int_equal(df_decode(c, toks + NP - 1, 1, got, 0, err, sizeof err), DF_OK);
    assert_memory_equal(ref, got, (size_t)nv * sizeof(float));
    /* a prompt that diverges at 5: 5 reused */
    int32_t alt[NP];
    memcpy(alt, toks, sizeof alt);
    alt[5] = (alt[5] + 1) % nv;
    assert_int_equal(df_prompt_cache_load(c, cache, alt, NP - 1, &reused, err, sizeof err), 0);
    assert_int_equal(reused, 5);
    assert_int_equal(df_session_pos(c), 5);
    /* another model's session refuses it; so does a damaged file; a snapshot is not a cache */
    df_session *os = session(o);
    assert_int_equal(df_prompt_cache_load(os, cache, toks, NP - 1, &reused, err, sizeof err), -1);
    assert_non_null(strstr(err, "another model"));
    assert_int_equal(reused, 0);
    FILE *f = fopen(cache, "r+b");
    assert_non_null(f);
    fseek(f, -5, SEEK_END);
    fputc(0x55, f);
    fclose(f);
    assert_int_equal(df_prompt_cache_load(c, cache, toks, NP - 1, &reused, err, sizeof err), -1);
    assert_non_null(strstr(err, "damaged"));
    assert_int_equal(df_session_pos(c), 0);
    assert_int_equal(df_session_save(s, cache, "x", 1, err, sizeof err), 0);
    assert_int_equal(df_prompt_cache_load(c, cache, toks, NP - 1, &reused, err, sizeof err), -1);
    assert_non_null(strstr(err, "not a prompt cache"));
    free(ref);
    free(got);
    df_session_free(s);
    df_session_free(c);
    df_session_free(os);
    df_model_free(m);
    df_model_free(o);
}

static int setup(void **state) {
    (void)state;
    return tu_mkdtemp(tmpdir, sizeof tmpdir, "spec");
}

static int teardown(void **state) {
    (void)state;
    return tu_rmtree(tmpdir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompt_cache),
        cmocka_unit_test(test_greedy_every_arch),
        cmocka_unit_test(test_rollback_logits),
        cmocka_unit_test(test_draft),
        cmocka_unit_test(test_draft_recurrent),
        cmocka_unit_test(test_sampling_distribution),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
