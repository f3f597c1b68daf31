/*
 * test_moe.c - Mixture-of-Experts routing and expert execution.
 *
 *  - The router (logits from an f32 router matrix, softmax or sigmoid,
 *    selection bias, group-limited top-k, normalisation, scaling) chooses the
 *    same experts with the same weights as an independent float64 reference,
 *    for every gating variant, on thousands of random tokens. Where float64
 *    itself calls two experts a tie within float32 resolution, either choice
 *    is accepted.
 *  - Only the selected experts are fetched from the weight store: one token
 *    through deepseek-v3-tiny fetches exactly layers x used x 3 expert slices.
 *  - The routing trace (--trace-experts) has the documented layout and its
 *    records describe exactly the experts fetched.
 *  - Batched and token-by-token decoding agree for MoE models.
 *  - A model whose expert tensors disagree with expert_count fails to load
 *    with an error naming the tensor.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "deltafin.h"
#include "gguf_write.h"
#include "bpe_vocab.h"
#include "matmul.h"
#include "moe.h"
#include "ops.h"
#include "quant.h"
#include "testutil.h"

static char tmpdir[128];

/* ---- float64 reference router ---- */

typedef struct {
    int gating, norm, groups, group_used, bias;
    float scale;
} variant;

/* Top-k by value (ties: lower index) in double. */
static void ref_topk(const double *v, int n, int k, int *out) {
    char used[1024] = {0};
    for (int j = 0; j < k; j++) {
        int b = -1;
        for (int i = 0; i < n; i++)
            if (!used[i] && (b < 0 || v[i] > v[b])) b = i;
        used[b] = 1;
        out[j] = b;
    }
}

/* The reference selection. Returns the k-th and (k+1)-th best selection
 * scores' gap so the caller can tell a float32-resolution near-tie. */
static double ref_route(const variant *vr, int X, int K, const double *logit, const double *bias, int *ids, double *w) {
    double p[1024], sel[1024];
    if (vr->gating == DF_GATING_SIGMOID) {
        for (int e = 0; e < X; e++) p[e] = 1.0 / (1.0 + exp(-logit[e]));
    } else {
        double mx = -INFINITY, sum = 0;
        for (int e = 0; e < X; e++) mx = fmax(mx, logit[e]);
        for (int e = 0; e < X; e++) sum += (p[e] = exp(logit[e] - mx));
        for (int e = 0; e < X; e++) p[e] /= sum;
    }
    for (int e = 0; e < X; e++) sel[e] = p[e] + (bias ? bias[e] : 0);
    double gap = INFINITY;
    if (vr->groups > 1) {
        int per = X / vr->groups, keep[64], two[2];
        double gs[64];
        for (int g = 0; g < vr->groups; g++) {
            ref_topk(sel + g * per, per, 2, two);
            gs[g] = sel[g * per + two[0]] + sel[g * per + two[1]];
        }
        int order[64];
        ref_topk(gs, vr->groups, vr->groups, order);
        gap = gs[order[vr->group_used - 1]] - gs[order[vr->group_used]];
        ref_topk(gs, vr->groups, vr->group_used, keep);
        for (int g = 0; g < vr->groups; g++) {
            int kept = 0;
            for (int j = 0; j < vr->group_used; j++) kept |= keep[j] == g;
            if (!kept)
                for (int e = 0; e < per; e++) sel[g * per + e] = -INFINITY;
        }
    }
    int order[1024];
    ref_topk(sel, X, K + 1 <= X ? K + 1 : K, order);
    if (K < X) gap = fmin(gap, sel[order[K - 1]] - sel[order[K]]);
    double sum = 0;
    for (int j = 0; j < K; j++) {
        ids[j] = order[j];
        sum += (w[j] = p[order[j]]);
    }
    if (vr->norm)
        for (int j = 0; j < K; j++) w[j] /= fmax(sum, 6.103515625e-5);
    if (vr->scale != 0 && vr->scale != 1)
        for (int j = 0; j < K; j++) w[j] *= vr->scale;
    return gap;
}

static void test_router_matches_float64(void **state) {
    (void)state;
    quant_init();
    const variant variants[] = {
        {DF_GATING_SOFTMAX, 0, 0, 0, 0, 0.0f},  /* Qwen2-MoE / DeepSeek V2 */
        {DF_GATING_SOFTMAX, 1, 0, 0, 0, 0.0f},  /* Mixtral / Qwen3-MoE */
        {DF_GATING_SOFTMAX, 0, 0, 0, 0, 16.0f}, /* DeepSeek V2 with weights scale */
        {DF_GATING_SIGMOID, 1, 8, 4, 1, 2.5f},  /* DeepSeek V3: sigmoid, bias, groups */
        {DF_GATING_SIGMOID, 1, 1, 0, 1, 2.827f},/* Kimi K2: sigmoid, bias, no groups */
    };
    const int E = 256, X = 64, K = 8, N = 500;
    uint64_t rng = 99;
    float *W = malloc(sizeof(float) * E * X), *x = malloc(sizeof(float) * E * N), *logits = malloc(sizeof(float) * X * N);
    double *bias = malloc(sizeof(double) * X);
    float *biasf = malloc(sizeof(float) * X);
    mm_scratch sc = {.buf = malloc(mm_scratch_bytes(E, N)), .size = mm_scratch_bytes(E, N)};
    tp_pool *pool = tp_create(2);
    assert_true(W && x && logits && bias && biasf && sc.buf && pool);
    for (int i = 0; i < E * X; i++) W[i] = tu_randf(&rng) * 0.2f;
    for (int i = 0; i < E * N; i++) x[i] = tu_randf(&rng);
    for (int e = 0; e < X; e++) biasf[e] = (float)(bias[e] = tu_randf(&rng) * 0.05f);
    int checked = 0, ties = 0;
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        const variant *vr = &variants[v];
        df_hparams h;
        memset(&h, 0, sizeof h);
        h.n_expert = X;
        h.n_expert_used = K;
        h.gating = vr->gating;
        h.expert_weights_norm = vr->norm;
        h.expert_weights_scale = vr->scale;
        h.n_expert_groups = vr->groups;
        h.n_group_used = vr->group_used;
        /* the engine's path: f32 router product, then activation and selection */
        assert_int_equal(mm_mul(pool, DF_TYPE_F32, W, E, X, x, N, logits, X, &sc), 0);
        for (int t = 0; t < N; t++) {
            float *p = logits + t * X;
            double lg[1024];
            for (int e = 0; e < X; e++) {
                double d = 0;
                for (int i = 0; i < E; i++) d += (double)W[e * E + i] * x[t * E + i];
                lg[e] = d;
            }
            float pf[1024];
            memcpy(pf, p, sizeof(float) * X);
            df_moe_probs(&h, pf);
            int32_t ids[64];
            float w[64];
            const float margin = df_moe_select(&h, pf, vr->bias ? biasf : NULL, ids, w);
            int rid[64];
            double rw[64];
            double gap = ref_route(vr, X, K, lg, vr->bias ? bias : NULL, rid, rw);
            if (isinf(gap) != isinf(margin) || (!isinf(gap) && fabs(margin - gap) > 1e-5 * fmax(1.0, fabs(gap))))
                fail_msg("variant %zu token %d: routing margin %.9g, float64 reference %.9g", v, t, margin, gap);
            if (gap < 1e-5) { /* a tie at float32 resolution: either answer is right */
                ties++;
                continue;
            }
            for (int j = 0; j < K; j++) {
                if (ids[j] != rid[j])
                    fail_msg("variant %zu token %d slot %d: expert %d, float64 reference %d", v, t, j, ids[j], rid[j]);
                if (fabs(w[j] - rw[j]) > 1e-5 * fmax(1.0, fabs(rw[j])))
                    fail_msg("variant %zu token %d slot %d: weight %.8f, reference %.8f", v, t, j, w[j], rw[j]);
            }
            checked++;
        }
    }
    printf("  router: %d tokens identical to the float64 reference, %d near-ties skipped\n", checked, ties);
    assert_true(checked > 2400);
    tp_free(pool);
    free(sc.buf);
    free(W);
    free(x);
    free(logits);
    free(bias);
    free(biasf);
}

/* ---- models ---- */

static void make_model(const char *args, char *path, size_t n) {
    static int k;
    snprintf(path, n, "%s/m%d.gguf", tmpdir, k++);
    tu_mkmodel(path, args);
}

/* op_top_k_margin (an indexer's choice, df_session_trace_ties): the worst chosen minus the best left out, over the
 * largest |value|, on random sets with and without exact ties, against a brute-force reading of the same choice. */
static void test_top_k_margin(void **state) {
    (void)state;
    uint32_t x = 7;
    for (int trial = 0; trial < 2000; trial++) {
        float v[64];
        int32_t sel[64];
        const int n = 2 + trial % 60, k = 1 + (trial / 7) % n;
        for (int i = 0; i < n; i++) {
            x = x * 1664525u + 1013904223u;
            v[i] = trial % 3 == 0 ? (float)((x >> 24) % 4) : (float)((int32_t)(x >> 8) - (1 << 23)) / (1 << 20);
        }
        op_top_k_set(v, n, k, sel);
        const float m = op_top_k_margin(v, n, k, sel);
        if (k >= n) {
            assert_true(isinf(m));
            continue;
        }
        double worst = INFINITY, best = -INFINITY, scale = 0;
        for (int i = 0; i < n; i++) {
            int chosen = 0;
            for (int j = 0; j < k; j++) chosen |= sel[j] == i;
            if (chosen && v[i] < worst) worst = v[i];
            if (!chosen && v[i] > best) best = v[i];
            if (fabs(v[i]) > scale) scale = fabs(v[i]);
        }
        assert_true(worst >= best); /* a top-k set: nothing left out is better */
        const double want = worst == best ? 0 : (worst - best) / scale;
        assert_true(fabs(m - want) <= 1e-6 * want);
        if (trial % 3 == 0) assert_true(m == 0.0f || m >= 0.25f); /* small integers: a tie is exact */
    }
}

static void test_only_selected_experts_are_fetched(void **state) {
    (void)state;
    char path[256], err[512], tpath[300];
    make_model("--preset deepseek-v3-tiny", path, sizeof path);
    df_model *m;
    assert_int_equal(df_model_load(path, NULL, &m, err, sizeof err), 0);
    df_session *s;
    assert_int_equal(df_session_new(m, NULL, &s, err, sizeof err), 0);
    snprintf(tpath, sizeof tpath, "%s/trace.bin", tmpdir);
    assert_int_equal(df_session_trace_experts(s, tpath, err, sizeof err), 0);
    const int moe_layers = m->hp.n_layer - m->hp.n_layer_dense_lead, K = m->hp.n_expert_used;
    ws_stats a, b;
    int32_t tok = 5;
    float *lg = malloc(sizeof(float) * (size_t)df_n_vocab(m));
    ws_get_stats(m->ws, &a);
    assert_int_equal(df_decode(s, &tok, 1, lg, 0, err, sizeof err), 0);
    ws_get_stats(m->ws, &b);
    assert_int_equal(b.expert_fetches - a.expert_fetches, (uint64_t)(moe_layers * K * 3));
    /* a batch of 8 tokens fetches each selected expert once, not once per token */
    int32_t toks[8] = {10, 11, 12, 13, 14, 15, 16, 17};
    assert_int_equal(df_decode(s, toks, 8, lg, 0, err, sizeof err), 0);
    ws_stats c;
    ws_get_stats(m->ws, &c);
    assert_int_equal(df_session_trace_experts(s, NULL, err, sizeof err), 0);
    /* read the trace back: header, then one record per token and MoE layer */
    FILE *f = fopen(tpath, "rb");
    assert_non_null(f);
    uint32_t hdr[5];
    assert_int_equal(fread(hdr, 4, 5, f), 5);
    assert_int_equal(hdr[0], 0x52544644u);
    assert_int_equal(hdr[2], (uint32_t)m->hp.n_layer);
    assert_int_equal(hdr[3], (uint32_t)m->hp.n_expert);
    assert_int_equal(hdr[4], (uint32_t)K);
    int records = 0, distinct = 0;
    char seen[8][64];
    memset(seen, 0, sizeof seen);
    int32_t pos;
    int16_t lk[2];
    float margin;
    assert_int_equal(hdr[1], 2);
    while (fread(&pos, 4, 1, f) == 1) {
        assert_int_equal(fread(lk, 2, 2, f), 2);
        assert_int_equal(lk[1], K);
        assert_int_equal(fread(&margin, 4, 1, f), 1);
        assert_true(margin >= 0); /* the last chosen is at least as good as the best unchosen */
        assert_true(lk[0] >= m->hp.n_layer_dense_lead && lk[0] < m->hp.n_layer);
        float wsum = 0;
        for (int j = 0; j < K; j++) {
            int32_t id;
            float w;
            assert_int_equal(fread(&id, 4, 1, f), 1);
            assert_int_equal(fread(&w, 4, 1, f), 1);
            assert_true(id >= 0 && id < m->hp.n_expert);
            wsum += w;
            if (pos >= 1 && !seen[lk[0]][id]) {
                seen[lk[0]][id] = 1;
                distinct++;
            }
        }
        assert_true(fabsf(wsum - m->hp.expert_weights_scale) < 1e-4f); /* normalised, then scaled */
        records++;
    }
    fclose(f);
    assert_int_equal(records, 9 * moe_layers);
    /* the batch's fetches = distinct (layer, expert) pairs it selected, x3 tensors */
    assert_int_equal(c.expert_fetches - b.expert_fetches, (uint64_t)(distinct * 3));
    printf("  one token: %llu expert fetches; a batch of 8: %llu (%d distinct experts)\n",
           (unsigned long long)(b.expert_fetches - a.expert_fetches), (unsigned long long)(c.expert_fetches - b.expert_fetches),
           distinct);
    free(lg);
    df_session_free(s);
    df_model_free(m);
}

static void test_moe_batch_equals_sequential(void **state) {
    (void)state;
    const char *presets[] = {"deepseek-v3-tiny", "deepseek-v2-tiny", "qwen2moe-tiny", "mixtral-tiny --type q4_K"};
    for (size_t k = 0; k < sizeof presets / sizeof presets[0]; k++) {
        char path[256], args[128], err[512];
        snprintf(args, sizeof args, "--preset %s", presets[k]);
        make_model(args, path, sizeof path);
        df_model *m;
        assert_int_equal(df_model_load(path, NULL, &m, err, sizeof err), 0);
        const int nv = df_n_vocab(m), n = 70;
        int32_t toks[70];
        for (int i = 0; i < n; i++) toks[i] = (int32_t)(1 + (i * 53) % (nv - 3));
        df_session_params sp = df_session_default_params();
        sp.n_ctx = 128;
        sp.kv_type = DF_KV_F32;
        sp.n_batch = 32;
        df_session *a, *b;
        assert_int_equal(df_session_new(m, &sp, &a, err, sizeof err), 0);
        assert_int_equal(df_session_new(m, &sp, &b, err, sizeof err), 0);
        float *la = malloc(sizeof(float) * n * nv), *lb = malloc(sizeof(float) * n * nv);
        assert_int_equal(df_decode(a, toks, n, la, 1, err, sizeof err), 0);
        for (int i = 0; i < n; i++) assert_int_equal(df_decode(b, &toks[i], 1, lb + (size_t)i * nv, 0, err, sizeof err), 0);
        double mr = 0, md = 0;
        for (int i = 0; i < n * nv; i++) {
            if (fabs(la[i]) > mr) mr = fabs(la[i]);
            if (fabs(la[i] - lb[i]) > md) md = fabs(la[i] - lb[i]);
        }
        printf("  %-24s batched vs token-by-token: max rel diff %.2e\n", presets[k], md / mr);
        assert_true(md / mr < 1e-4);
        free(la);
        free(lb);
        df_session_free(a);
        df_session_free(b);
        df_model_free(m);
    }
}

/* A qwen3moe model whose ffn_up_exps has `bad_experts` experts while the
 * metadata says 4 (or whose router has the wrong width). */
static void write_bad_moe(const char *path, int bad_experts, int bad_router) {
    char err[256];
    bpe_vocab v;
    assert_int_equal(bpe_vocab_build(&v, 300, err, sizeof err), 0);
    gw *w = gw_new();
    const int E = 32, F = 32, X = 4;
    gw_str(w, "general.architecture", "qwen3moe");
    gw_u32(w, "qwen3moe.embedding_length", E);
    gw_u32(w, "qwen3moe.block_count", 1);
    gw_u32(w, "qwen3moe.feed_forward_length", F);
    gw_u32(w, "qwen3moe.attention.head_count", 2);
    gw_u32(w, "qwen3moe.attention.head_count_kv", 1);
    gw_u32(w, "qwen3moe.expert_count", X);
    gw_u32(w, "qwen3moe.expert_used_count", 2);
    gw_u32(w, "qwen3moe.expert_feed_forward_length", F);
    gw_str(w, "tokenizer.ggml.model", "gpt2");
    gw_str(w, "tokenizer.ggml.pre", "qwen2");
    gw_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v.tokens, (size_t)v.n_tokens);
    gw_arr_i32(w, "tokenizer.ggml.token_type", v.types, (size_t)v.n_tokens);
    gw_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v.merges, (size_t)v.n_merges);
    struct { const char *name; int64_t ne[3]; int nd; } t[] = {
        {"token_embd.weight", {E, 300, 1}, 2},       {"output_norm.weight", {E, 1, 1}, 1},
        {"blk.0.attn_norm.weight", {E, 1, 1}, 1},    {"blk.0.attn_q.weight", {E, E, 1}, 2},
        {"blk.0.attn_k.weight", {E, E / 2, 1}, 2},   {"blk.0.attn_v.weight", {E, E / 2, 1}, 2},
        {"blk.0.attn_output.weight", {E, E, 1}, 2},  {"blk.0.attn_q_norm.weight", {E / 2, 1, 1}, 1},
        {"blk.0.attn_k_norm.weight", {E / 2, 1, 1}, 1}, {"blk.0.ffn_norm.weight", {E, 1, 1}, 1},
        {"blk.0.ffn_gate_inp.weight", {E, bad_router ? X + 1 : X, 1}, 2},
        {"blk.0.ffn_gate_exps.weight", {E, F, X}, 3}, {"blk.0.ffn_up_exps.weight", {E, F, bad_experts}, 3},
        {"blk.0.ffn_down_exps.weight", {F, E, X}, 3},
    };
    const int nt = (int)(sizeof t / sizeof t[0]);
    for (int i = 0; i < nt; i++) assert_true(gw_tensor(w, t[i].name, DF_TYPE_F32, t[i].nd, t[i].ne) >= 0);
    assert_int_equal(gw_begin(w, path, err, sizeof err), 0);
    for (int i = 0; i < nt; i++) {
        uint64_t nb = gw_tensor_bytes(w, i);
        float *z = calloc(1, (size_t)nb);
        for (uint64_t j = 0; j < nb / 4; j++) z[j] = 0.01f;
        assert_int_equal(gw_data(w, z, (size_t)nb, err, sizeof err), 0);
        free(z);
    }
    assert_int_equal(gw_finish(w, err, sizeof err), 0);
    gw_free(w);
    bpe_vocab_free(&v);
}

static void test_inconsistent_experts_rejected(void **state) {
    (void)state;
    char path[256], err[512];
    df_model *m;
    snprintf(path, sizeof path, "%s/good.gguf", tmpdir);
    write_bad_moe(path, 4, 0);
    if (df_model_load(path, NULL, &m, err, sizeof err) != 0) fail_msg("the consistent model should load: %s", err);
    df_model_free(m);
    snprintf(path, sizeof path, "%s/bad1.gguf", tmpdir);
    write_bad_moe(path, 3, 0);
    assert_int_equal(df_model_load(path, NULL, &m, err, sizeof err), -1);
    printf("  %s\n", err);
    assert_non_null(strstr(err, "ffn_up_exps"));
    snprintf(path, sizeof path, "%s/bad2.gguf", tmpdir);
    write_bad_moe(path, 4, 1);
    assert_int_equal(df_model_load(path, NULL, &m, err, sizeof err), -1);
    printf("  %s\n", err);
    assert_non_null(strstr(err, "ffn_gate_inp"));
}

static int setup(void **state) {
    (void)state;
    return tu_mkdtemp(tmpdir, sizeof tmpdir, "moe");
}

static int teardown(void **state) {
    (void)state;
    return tu_rmtree(tmpdir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_router_matches_float64),
        cmocka_unit_test(test_top_k_margin),
        cmocka_unit_test(test_only_selected_experts_are_fetched),
        cmocka_unit_test(test_moe_batch_equals_sequential),
        cmocka_unit_test(test_inconsistent_experts_rejected),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
