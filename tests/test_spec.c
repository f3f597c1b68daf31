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
 * MTP (the model's own NextN block, glm4moe and DeepSeek V3): greedy output
 * equals plain decoding in memory and under a budget, the guesses are made
 * and compared, a file without the block is refused with the reason, and
 * the block's first guess's logits match a float reference computed here
 * from the same weights (position 0, where attention is the value itself)
 * and llama.cpp's (tests/data/ref/NAME.mtp, llama_ref's mtp command: its
 * MTP context fed the target's hidden rows, scripts/make-fixtures.sh).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deltafin.h"
#include "mtp.h"
#include "util.h"
#include "quant.h"
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

static df_model *load_mtp(const char *path, int streamed, int mtp) {
    char err[512];
    df_model_params mp = df_model_default_params();
    mp.mtp = mtp;
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

static df_model *load(const char *path, int streamed) { return load_mtp(path, streamed, 0); }

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

/* Greedy generation by m with the draft model at dpath (k fixed at 3). */
static void generate_with_draft(df_model *m, const char *dpath, int32_t *got, df_spec_stats *st) {
    df_model *dm = load(dpath, 0);
    df_session *ds = session(dm);
    df_spec_params p = df_spec_default_params();
    p.source = DF_SPEC_DRAFT;
    p.draft = ds;
    p.k_fixed = 3;
    generate(m, &p, 0, 1, got, st);
    df_session_free(ds);
    df_model_free(dm);
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
            df_spec_stats st;
            generate_with_draft(m, drafts[d], got, &st);
            if (memcmp(ref, got, sizeof ref) != 0) fail_msg("greedy output with draft %d differs", d);
            printf("  draft %d %s: identical, %d of %d guesses kept\n", d, streamed ? "streamed" : "in memory",
                   st.accepted, st.guessed);
            if (d == 0) assert_int_equal(st.accepted, st.guessed);
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
                    df_spec_stats st;
                    generate_with_draft(m, drafts[d], got, &st);
                    if (memcmp(ref, got, sizeof ref) != 0)
                        fail_msg("%s: prompt %d: greedy output with draft %d%s differs", recurrent[i][0], (int)seed, d,
                                 streamed ? " (streamed)" : "");
                    if (d == 0) assert_int_equal(st.accepted, st.guessed);
                    else kept += st.accepted, rejected += st.guessed - st.accepted;
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

/* ---- MTP ---- */

static const char *const mtp_presets[][2] = {
    {"glm4moe-mtp", "--preset glm4moe-tiny --type q8_0"},
    {"deepseek-v3-mtp", "--preset deepseek-v3-tiny --nextn 1 --type q8_0"},
};

/* Greedy with the MTP block's guesses equals plain greedy (of the model
 * loaded without the block), in memory and under a budget. */
static void check_mtp_greedy(const char *name, const char *args, int streamed) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, name);
    if (!streamed) tu_mkmodel(path, args);
    int32_t ref[NG], got[NG];
    df_model *plain = load(path, streamed);
    generate(plain, NULL, 0, 1, ref, NULL);
    df_model_free(plain);
    df_model *m = load_mtp(path, streamed, 1);
    const int ks[] = {4, -1, 1};
    for (int i = 0; i < 3; i++) {
        df_spec_params p = df_spec_default_params();
        p.source = DF_SPEC_MTP;
        p.k_fixed = ks[i];
        p.k_max = 4;
        df_spec_stats st;
        generate(m, &p, 0, 1, got, &st);
        if (memcmp(ref, got, sizeof ref) != 0)
            fail_msg("%s%s: greedy output with MTP guesses (k %d) differs from plain decoding", name,
                     streamed ? " (streamed)" : "", ks[i]);
        /* guesses were made and compared: every pass at a fixed k guesses k */
        assert_true(st.passes > 0 && st.guessed > 0);
        if (ks[i] > 0) assert_true(st.guessed >= st.passes * ks[i] / 2);
        assert_true(st.t_draft > 0);
        if (ks[i] < 0 && st.passes > 4) assert_non_null(strstr(st.why, "MTP"));
        if (i == 0)
            printf("  %-16s %-9s MTP k=4: identical, %d of %d guesses kept in %d passes\n", name,
                   streamed ? "streamed" : "in memory", st.accepted, st.guessed, st.passes);
    }
    /* plain decoding of the model with its block loaded is unchanged too */
    generate(m, NULL, 0, 1, got, NULL);
    assert_memory_equal(ref, got, sizeof ref);
    df_model_free(m);
}

static void test_mtp_greedy(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof mtp_presets / sizeof mtp_presets[0]; i++)
        check_mtp_greedy(mtp_presets[i][0], mtp_presets[i][1], 0);
    for (size_t i = 0; i < sizeof mtp_presets / sizeof mtp_presets[0]; i++)
        check_mtp_greedy(mtp_presets[i][0], mtp_presets[i][1], 1);
}

/* One greedy step of session s: decode token t alone, return the next (greedy). */
static int32_t step_greedy(df_session *s, int32_t t) {
    char err[512];
    if (df_decode(s, &t, 1, df_session_logits(s), 0, err, sizeof err) != DF_OK) fail_msg("%s", err);
    return df_argmax(df_session_logits(s), df_n_vocab(s->m));
}

/* The MTP block's upkeep deferred (mtp.c, df_mtp_defer) leaves its cache as
 * upkeep after every batch does: two sessions decode the same prompt and
 * steps, one with the upkeep waiting (flushed when the wait fills, across a
 * truncation, and by the guess), and the block's guesses and
 * their logits are bit-identical, in memory and under a budget (random
 * weights: every input of the block counts; a wrong row or hidden state
 * changes the bits). On a model whose block foresees the text (mkmodel
 * --chain, `chain`) the guesses are also the text's next tokens. */
static void check_mtp_deferred(const char *name, const char *args, int streamed, int chain) {
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, name);
    if (!streamed) tu_mkmodel(path, args);
    df_model *m = load_mtp(path, streamed, 1);
    const int nv = df_n_vocab(m);
    df_session *a = session(m), *b = session(m);
    int32_t toks[NP];
    prompt(nv, toks);
    int32_t next[2];
    df_session *ss[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        if (i == 0) df_mtp_defer(a, 1);
        if (df_decode(ss[i], toks, NP, df_session_logits(ss[i]), 0, err, sizeof err) != DF_OK) fail_msg("%s", err);
        next[i] = df_argmax(df_session_logits(ss[i]), nv);
        for (int j = 0; j < 11; j++) next[i] = step_greedy(ss[i], next[i]); /* the wait (8 rows) fills once */
        /* three more steps, then two of them taken back */
        const int pos = df_session_pos(ss[i]);
        int32_t t = next[i];
        for (int j = 0; j < 3; j++) t = step_greedy(ss[i], t);
        if (df_session_truncate(ss[i], pos + 1, err, sizeof err) != 0) fail_msg("%s", err);
        next[i] = step_greedy(ss[i], t); /* the token the truncated sequence's last row saw next */
    }
    assert_int_equal(next[0], next[1]);
    assert_int_equal(df_session_pos(a), df_session_pos(b));
    int32_t g[2][4];
    float *lg[2];
    for (int i = 0; i < 2; i++) {
        if (df_mtp_guess(ss[i], next[i], 4, g[i], err, sizeof err) != DF_OK) fail_msg("%s", err);
        lg[i] = malloc(sizeof(float) * (size_t)nv);
        assert_non_null(lg[i]);
        memcpy(lg[i], df_session_logits(ss[i]), sizeof(float) * (size_t)nv);
    }
    assert_int_equal(a->mtp_wait_n, 0);
    assert_memory_equal(g[0], g[1], sizeof g[0]);
    if (memcmp(lg[0], lg[1], sizeof(float) * (size_t)nv) != 0)
        fail_msg("%s%s: the last guess's logits differ with the upkeep deferred", name, streamed ? " (streamed)" : "");
    /* the guesses are the text: the target, fed them, continues with them */
    int32_t t = next[1];
    for (int j = 0; chain && j < 4; j++) {
        t = step_greedy(b, t);
        if (t != g[1][j]) fail_msg("%s: guess %d is %d, the text goes on with %d", name, j, g[1][j], t);
    }
    free(lg[0]);
    free(lg[1]);
    df_session_free(a);
    df_session_free(b);
    df_model_free(m);
}

static void test_mtp_deferred(void **state) {
    (void)state;
    const char *const chain[][2] = {
        {"glm4moe-chain", "--preset glm4moe-tiny --type q8_0 --chain"},
        {"deepseek-v3-chain", "--preset deepseek-v3-tiny --nextn 1 --type q4_K --chain"},
    };
    for (int streamed = 0; streamed < 2; streamed++) {
        for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++)
            check_mtp_deferred(chain[i][0], chain[i][1], streamed, 1);
        for (size_t i = 0; i < sizeof mtp_presets / sizeof mtp_presets[0]; i++)
            check_mtp_deferred(mtp_presets[i][0], mtp_presets[i][1], streamed, 0);
    }
}

/* A file without a NextN block, and one loaded without it: refused with the reason. */
static void test_mtp_refused(void **state) {
    (void)state;
    char path[256], path2[256], err[512];
    snprintf(path, sizeof path, "%s/nonextn.gguf", tmpdir);
    snprintf(path2, sizeof path2, "%s/withnextn.gguf", tmpdir);
    tu_mkmodel(path, "--preset deepseek-v3-tiny --type q8_0");
    tu_mkmodel(path2, "--preset glm4moe-tiny --type q8_0");
    df_spec_params p = df_spec_default_params();
    p.source = DF_SPEC_MTP;
    const char *paths[2] = {path, path2};
    const char *want[2] = {"has no NextN/MTP block", "loaded without its MTP block"};
    for (int i = 0; i < 2; i++) {
        df_model *m = load_mtp(paths[i], 0, i == 0);
        df_session *s = session(m);
        df_spec *sp = NULL;
        err[0] = 0;
        assert_int_not_equal(df_spec_new(s, &p, NULL, 0, &sp, err, sizeof err), 0);
        assert_null(sp);
        if (!strstr(err, want[i])) fail_msg("expected '%s', got '%s'", want[i], err);
        df_session_free(s);
        df_model_free(m);
    }
}

/* ---- the MTP block against a float reference ---- */

/* Tensor t as floats (malloc'd; the caller frees). */
static float *weights(df_model *m, ws_tensor *t) {
    char err[256];
    assert_non_null(t);
    const uint8_t *d = ws_fetch(m->ws, t, err, sizeof err);
    if (!d) fail_msg("%s", err);
    const int64_t rows = (int64_t)(t->nbytes / t->row_bytes);
    float *f = malloc(sizeof(float) * (size_t)(rows * t->ne[0]));
    assert_non_null(f);
    for (int64_t r = 0; r < rows; r++) quant_traits_get(t->type)->to_float(d + r * t->row_bytes, f + r * t->ne[0], t->ne[0]);
    ws_release(m->ws, t);
    return f;
}

static void rms(float *out, const float *x, const float *w, int n, float eps) {
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    const float sc = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) out[i] = x[i] * sc * w[i];
}

static void rms_t(df_model *m, ws_tensor *t, float *out, const float *x, int n) {
    float *w = weights(m, t);
    rms(out, x, w, n, m->hp.norm_eps);
    free(w);
}

/* y (rows) = W x, W rows of n (row r of W at W + r * n). */
static void matvec(const float *W, const float *x, int n, int rows, float *y) {
    for (int r = 0; r < rows; r++) {
        double acc = 0;
        for (int i = 0; i < n; i++) acc += (double)W[(int64_t)r * n + i] * x[i];
        y[r] = (float)acc;
    }
}

static void matvec_t(df_model *m, ws_tensor *t, const float *x, float *y) {
    float *w = weights(m, t);
    matvec(w, x, (int)t->ne[0], (int)t->ne[1], y);
    free(w);
}

static float silu(float v) { return v / (1.0f + expf(-v)); }

/* SwiGLU FFN of x (E) through gate/up (E -> F) and down (F -> E) at offsets of expert e, added times w to y. */
static void swiglu_add(const float *g, const float *u, const float *d, int E, int F, const float *x, float w, float *y) {
    float *a = malloc(sizeof(float) * (size_t)F), *b = malloc(sizeof(float) * (size_t)F);
    float *o = malloc(sizeof(float) * (size_t)E);
    assert_true(a && b && o);
    matvec(g, x, E, F, a);
    matvec(u, x, E, F, b);
    for (int i = 0; i < F; i++) a[i] = silu(a[i]) * b[i];
    matvec(d, a, F, E, o);
    for (int i = 0; i < E; i++) y[i] += w * o[i];
    free(a), free(b), free(o);
}

/* The MoE FFN of a sigmoid-routed layer (glm4moe, DeepSeek V3): selection by
 * probability plus exp_probs_b, weights normalised and scaled, plus the shared expert. */
static void moe_ref(df_model *m, const df_layer *L, const float *x, float *y) {
    const df_hparams *h = &m->hp;
    const int E = h->n_embd, X = h->n_expert, K = h->n_expert_used, F = h->n_ff_exp;
    assert_int_equal(h->gating, 2); /* sigmoid */
    assert_true(X <= 256 && K <= 64);
    float *p = malloc(sizeof(float) * (size_t)X), *bias = weights(m, L->exp_probs_b);
    assert_non_null(p);
    matvec_t(m, L->ffn_gate_inp, x, p);
    for (int e = 0; e < X; e++) p[e] = 1.0f / (1.0f + expf(-p[e]));
    float sel[256];
    for (int e = 0; e < X; e++) sel[e] = p[e] + bias[e];
    if (h->n_expert_groups > 1) { /* groups ranked by their two best; only n_group_used of them compete */
        const int G = h->n_expert_groups, per = X / G;
        float gs[256];
        int keep[256] = {0};
        for (int g = 0; g < G; g++) {
            float b1 = -INFINITY, b2 = -INFINITY;
            for (int e = g * per; e < (g + 1) * per; e++)
                if (sel[e] > b1) b2 = b1, b1 = sel[e];
                else if (sel[e] > b2) b2 = sel[e];
            gs[g] = b1 + b2;
        }
        for (int j = 0; j < h->n_group_used; j++) {
            int best = -1;
            for (int g = 0; g < G; g++)
                if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
            keep[best] = 1;
        }
        for (int e = 0; e < X; e++)
            if (!keep[e / per]) sel[e] = -INFINITY;
    }
    int ids[64];
    float w[64], sum = 0;
    int used[256] = {0};
    for (int j = 0; j < K; j++) { /* the K largest p + bias */
        int best = -1;
        for (int e = 0; e < X; e++)
            if (!used[e] && (best < 0 || sel[e] > sel[best])) best = e;
        used[best] = 1, ids[j] = best, w[j] = p[best], sum += p[best];
    }
    for (int j = 0; j < K; j++) {
        if (h->expert_weights_norm) w[j] /= sum;
        if (h->expert_weights_scale != 0) w[j] *= h->expert_weights_scale;
    }
    float *g = weights(m, L->ffn_gate_exps), *u = weights(m, L->ffn_up_exps), *d = weights(m, L->ffn_down_exps);
    for (int i = 0; i < E; i++) y[i] = 0;
    for (int j = 0; j < K; j++)
        swiglu_add(g + (int64_t)ids[j] * E * F, u + (int64_t)ids[j] * E * F, d + (int64_t)ids[j] * E * F, E, F, x, w[j],
                   y);
    free(g), free(u), free(d);
    const int FS = (int)L->ffn_gate_shexp->ne[1];
    g = weights(m, L->ffn_gate_shexp), u = weights(m, L->ffn_up_shexp), d = weights(m, L->ffn_down_shexp);
    swiglu_add(g, u, d, E, FS, x, 1.0f, y);
    free(g), free(u), free(d), free(p), free(bias);
}

/* Attention of the block's first row (position 0): each head's output is
 * its value, so o (n_head * value size) from the normed input a. */
static int attn_ref(df_model *m, const df_layer *L, const float *a, float *o) {
    const df_hparams *h = &m->hp;
    if (!L->wv_b) { /* glm4moe: V (+ bias) per KV head, shared by its query heads */
        const int hd = h->head_dim, kvd = h->n_head_kv * hd;
        float *v = malloc(sizeof(float) * (size_t)kvd);
        assert_non_null(v);
        matvec_t(m, L->wv, a, v);
        if (L->bv) {
            float *b = weights(m, L->bv);
            for (int i = 0; i < kvd; i++) v[i] += b[i];
            free(b);
        }
        for (int hh = 0; hh < h->n_head; hh++)
            memcpy(o + hh * hd, v + (hh / (h->n_head / h->n_head_kv)) * hd, sizeof(float) * (size_t)hd);
        free(v);
        return h->n_head * hd;
    }
    /* MLA: the latent kv_a_norm(c) through each head's attn_v_b */
    const int R = h->kv_lora_rank, hv = (int)L->wv_b->ne[1];
    float *ca = malloc(sizeof(float) * (size_t)(R + h->n_rot)), *c = malloc(sizeof(float) * (size_t)R);
    assert_true(ca && c);
    matvec_t(m, L->wkv_a_mqa, a, ca);
    rms_t(m, L->kv_a_norm, c, ca, R);
    float *vb = weights(m, L->wv_b);
    for (int hh = 0; hh < h->n_head; hh++) matvec(vb + (int64_t)hh * hv * R, c, R, hv, o + hh * hv);
    free(vb), free(ca), free(c);
    return h->n_head * hv;
}

/* The block's logits for token tok at position 0 paired with hidden row hid. */
static void mtp_ref(df_model *m, int32_t tok, const float *hid, float *logits) {
    const df_hparams *h = &m->hp;
    const int E = h->n_embd;
    const df_layer *L = &m->layers[h->n_layer];
    float *emb = weights(m, L->nextn_embed ? L->nextn_embed : m->tok_embd);
    float *cat = malloc(sizeof(float) * 2 * (size_t)E), *x = malloc(sizeof(float) * (size_t)E);
    float *a = malloc(sizeof(float) * (size_t)E), *o = malloc(sizeof(float) * 4096), *y = malloc(sizeof(float) * (size_t)E);
    assert_true(cat && x && a && o && y);
    rms_t(m, L->nextn_enorm, cat, emb + (int64_t)tok * E, E); /* [enorm(embedding) | hnorm(hidden)] */
    rms_t(m, L->nextn_hnorm, cat + E, hid, E);
    matvec_t(m, L->nextn_eh_proj, cat, x);
    rms_t(m, L->attn_norm, a, x, E);
    const int od = attn_ref(m, L, a, o);
    assert_int_equal(od, (int)L->wo->ne[0]);
    matvec_t(m, L->wo, o, y);
    for (int i = 0; i < E; i++) x[i] += y[i];
    rms_t(m, L->ffn_norm, a, x, E);
    moe_ref(m, L, a, y);
    for (int i = 0; i < E; i++) x[i] += y[i];
    rms_t(m, L->nextn_head_norm ? L->nextn_head_norm : m->output_norm, a, x, E);
    matvec_t(m, L->nextn_head ? L->nextn_head : m->output, a, logits);
    free(emb), free(cat), free(x), free(a), free(o), free(y);
}

/* The first guess's logits of Deltafin's MTP block (df_mtp_run at position 0
 * with the target's hidden state of a decoded prompt) against mtp_ref. */
static void check_mtp_logits(const char *name, const char *args) {
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/%s-f32.gguf", tmpdir, name);
    tu_mkmodel(path, args);
    df_model *m = load_mtp(path, 0, 1);
    const int nv = df_n_vocab(m), E = m->hp.n_embd;
    int32_t toks[NP];
    prompt(nv, toks);
    df_session_params spar = df_session_default_params();
    spar.n_ctx = CTX;
    spar.n_batch = 8;
    spar.kv_type = DF_KV_F32; /* the reference keeps f32 values */
    df_session *s;
    if (df_session_new(m, &spar, &s, err, sizeof err) != 0) fail_msg("%s", err);
    float *hid = malloc(sizeof(float) * (size_t)(NP * E)), *lg = malloc(sizeof(float) * (size_t)nv);
    float *ref = malloc(sizeof(float) * (size_t)nv);
    assert_true(hid && lg && ref);
    assert_int_equal(df_decode_hidden(s, toks, NP, NULL, 0, hid, err, sizeof err), DF_OK);
    /* the hidden row handed out is the one the session keeps for the block */
    assert_memory_equal(hid + (NP - 1) * E, df_mtp_hidden_row(s, NP - 1), sizeof(float) * (size_t)E);
    df_session *s0; /* a fresh session: the block's row at position 0 */
    if (df_session_new(m, &spar, &s0, err, sizeof err) != 0) fail_msg("%s", err);
    const int32_t next = toks[3];
    if (df_mtp_run(s0, &next, hid + (NP - 1) * E, 1, 0, NULL, lg, err, sizeof err) != 0) fail_msg("%s", err);
    mtp_ref(m, next, hid + (NP - 1) * E, ref);
    double maxd = 0, maxv = 0;
    int am = 0, ar = 0;
    for (int i = 0; i < nv; i++) {
        if (fabs(lg[i] - ref[i]) > maxd) maxd = fabs(lg[i] - ref[i]);
        if (fabs(ref[i]) > maxv) maxv = fabs(ref[i]);
        if (lg[i] > lg[am]) am = i;
        if (ref[i] > ref[ar]) ar = i;
    }
    printf("  %-16s MTP logits vs float reference: max |diff| %.2e of max |logit| %.2e, argmax %d / %d\n", name, maxd,
           maxv, am, ar);
    if (!(maxd <= 1e-3 * (maxv > 1 ? maxv : 1))) fail_msg("%s: MTP logits differ from the reference by %g", name, maxd);
    assert_int_equal(am, ar);
    /* and the hidden state matters: a zero row gives other logits */
    float *zero = calloc((size_t)E, sizeof(float));
    assert_non_null(zero);
    if (df_mtp_run(s0, &next, zero, 1, 0, NULL, ref, err, sizeof err) != 0) fail_msg("%s", err);
    double dz = 0;
    for (int i = 0; i < nv; i++) dz += fabs(lg[i] - ref[i]);
    assert_true(dz > 1e-3);
    /* the pairing along the sequence: after the prompt (two batches), the
     * first guess for a pending token t at position NP reads h of NP - 1,
     * with the block's cache holding (token p, h of p - 1) for every p; the
     * same rows run by hand in a fresh session give the same logits */
    int32_t g[2];
    const int32_t t = toks[5];
    assert_int_equal(df_mtp_guess(s, t, 2, g, err, sizeof err), DF_OK);
    memcpy(lg, df_session_logits(s), sizeof(float) * (size_t)nv); /* the second guess's */
    df_session *s1;
    if (df_session_new(m, &spar, &s1, err, sizeof err) != 0) fail_msg("%s", err);
    float *hrows = calloc((size_t)(NP + 2) * (size_t)E, sizeof(float)), *hout = malloc(sizeof(float) * (size_t)E);
    assert_true(hrows && hout);
    memcpy(hrows + E, hid, sizeof(float) * (size_t)(NP * E)); /* row p: h of p - 1 (row 0: zeros) */
    int32_t seq[NP + 2];
    memcpy(seq, toks, sizeof toks);
    seq[NP] = t;
    for (int p0 = 0; p0 <= NP; p0 += 5) {
        const int n = p0 + 5 <= NP + 1 ? 5 : NP + 1 - p0;
        if (df_mtp_run(s1, seq + p0, hrows + (int64_t)p0 * E, n, p0, NULL, ref, err, sizeof err) != 0)
            fail_msg("%s", err);
    }
    /* the guess at NP is the argmax of the last row; chained: that token with the block's own output */
    int a0 = 0;
    for (int i = 1; i < nv; i++)
        if (ref[i] > ref[a0]) a0 = i;
    assert_int_equal(g[0], a0);
    seq[NP + 1] = g[0];
    memcpy(hrows, hid + (NP - 1) * E, sizeof(float) * (size_t)E);
    if (df_mtp_run(s1, seq + NP, hrows, 1, NP, hout, NULL, err, sizeof err) != 0 ||
        df_mtp_run(s1, seq + NP + 1, hout, 1, NP + 1, NULL, ref, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_memory_equal(lg, ref, sizeof(float) * (size_t)nv);
    free(hrows), free(hout);
    df_session_free(s1);
    free(zero), free(hid), free(lg), free(ref);
    df_session_free(s0);
    df_session_free(s);
    df_model_free(m);
}

static void test_mtp_reference(void **state) {
    (void)state;
    check_mtp_logits("glm4moe-mtp", "--preset glm4moe-tiny --type f32");
    check_mtp_logits("deepseek-v3-mtp", "--preset deepseek-v3-tiny --nextn 1 --type f32");
}

/* The block's first guess after a prompt against llama.cpp's (the whole
 * path: the target's hidden rows, the block's cache over the prompt, the
 * pending token's row). */
static void check_mtp_llama(const char *name, const char *args) {
    char path[256], fx[512], err[512], cmd[700], sum[80] = "", want[80] = "";
    const char *dir = getenv("DELTAFIN_REF_DIR") ? getenv("DELTAFIN_REF_DIR") : "tests/data/ref";
    snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, name);
    tu_mkmodel(path, args);
    /* the fixture is of this very file (mkmodel is deterministic) */
    snprintf(fx, sizeof fx, "%s/%s.sha256", dir, name);
    FILE *f = fopen(fx, "r");
    if (!f) fail_msg("missing fixture %s (scripts/make-fixtures.sh)", fx);
    if (!fgets(want, sizeof want, f)) want[0] = 0;
    fclose(f);
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    if (!fgets(sum, sizeof sum, p)) sum[0] = 0;
    pclose(p);
    if (strncmp(sum, want, 64) != 0) fail_msg("%s: the fixture is stale (mkmodel changed): scripts/make-fixtures.sh", name);
    int32_t toks[64];
    int n = 0;
    snprintf(fx, sizeof fx, "%s/%s.tokens", dir, name);
    if (!(f = fopen(fx, "r"))) fail_msg("missing fixture %s", fx);
    while (n < 64 && fscanf(f, "%d", &toks[n]) == 1) n++;
    fclose(f);
    assert_true(n >= 2);
    df_model *m = load_mtp(path, 0, 1);
    const int nv = df_n_vocab(m);
    float *ref = malloc(sizeof(float) * (size_t)nv);
    assert_non_null(ref);
    snprintf(fx, sizeof fx, "%s/%s.mtp", dir, name);
    if (!(f = fopen(fx, "rb"))) fail_msg("missing fixture %s", fx);
    assert_int_equal(fread(ref, sizeof(float), (size_t)nv, f), (size_t)nv);
    fclose(f);
    df_session_params spar = df_session_default_params();
    spar.n_ctx = CTX;
    spar.n_batch = 8; /* the prompt in two batches: the carried hidden row is used */
    spar.kv_type = DF_KV_F32; /* as llama_ref's caches */
    df_session *s;
    if (df_session_new(m, &spar, &s, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(df_decode(s, toks, n - 1, NULL, 0, err, sizeof err), DF_OK);
    int32_t g;
    assert_int_equal(df_mtp_guess(s, toks[n - 1], 1, &g, err, sizeof err), DF_OK);
    const float *lg = df_session_logits(s);
    double maxd = 0, maxv = 0;
    int ar = 0;
    for (int i = 0; i < nv; i++) {
        if (fabs(lg[i] - ref[i]) > maxd) maxd = fabs(lg[i] - ref[i]);
        if (fabs(ref[i]) > maxv) maxv = fabs(ref[i]);
        if (ref[i] > ref[ar]) ar = i;
    }
    printf("  %-20s MTP logits vs llama.cpp: max |diff| %.2e of max |logit| %.2e, guess %d / %d\n", name, maxd, maxv,
           g, ar);
    if (!(maxd <= 1e-4 * (maxv > 1 ? maxv : 1)))
        fail_msg("%s: MTP logits differ from llama.cpp's by %g", name, maxd);
    assert_int_equal(g, ar);
    free(ref);
    df_session_free(s);
    df_model_free(m);
}

static void test_mtp_llama(void **state) {
    (void)state;
    check_mtp_llama("glm4moe-mtp-f32", "--preset glm4moe-tiny --type f32");
    check_mtp_llama("deepseek-v3-mtp-f32", "--preset deepseek-v3-tiny --nextn 1 --type f32");
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
        cmocka_unit_test(test_mtp_reference),
        cmocka_unit_test(test_mtp_llama),
        cmocka_unit_test(test_mtp_refused),
        cmocka_unit_test(test_mtp_greedy),
        cmocka_unit_test(test_mtp_deferred),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
