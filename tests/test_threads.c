/*
 * test_threads.c - the threading contract (include/deltafin.h), driven
 * through the public API only: several threads, each with its own sessions
 * of one shared model, decode at the same time (df_decode and
 * df_decode_batch) while another reads the model's counters; every thread
 * gets exactly the logits of a single-threaded run. Built and run under
 * ThreadSanitizer by `make tsan`, which reports any data race.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deltafin.h"
#include "testutil.h"

#define NT 4   /* decoding threads */
#define NP 9   /* prompt */
#define NG 5   /* greedy steps */

static char tmpdir[128];

typedef struct {
    df_model *m;
    int id;
    float *out;        /* (NG + 1) * nv logits */
    int rc;
    char err[512];
} job;

static int32_t argmax(const float *v, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static df_session *session(df_model *m, char *err, size_t errlen) {
    df_session_params sp = df_session_default_params();
    sp.n_ctx = 32;
    sp.n_batch = 4;
    df_session *s = NULL;
    return df_session_new(m, &sp, &s, err, errlen) == DF_OK ? s : NULL;
}

/* Thread id's run: a prompt and greedy steps; odd threads use df_decode_batch
 * with a second session they run alongside (and drop). */
static void *run(void *arg) {
    job *j = arg;
    const int nv = df_n_vocab(j->m);
    int32_t toks[NP];
    for (int k = 0; k < NP; k++) toks[k] = (int32_t)(1 + (k * 29 + j->id * 7) % (nv - 3));
    df_session *s = session(j->m, j->err, sizeof j->err), *other = session(j->m, j->err, sizeof j->err);
    if (!s || !other) {
        j->rc = -100;
        goto done;
    }
    for (int g = 0; g <= NG && j->rc == DF_OK; g++) {
        int32_t t = g ? argmax(j->out + (size_t)(g - 1) * nv, nv) : 0;
        const int32_t *tp = g ? &t : toks;
        const int n = g ? 1 : NP;
        float *lg = j->out + (size_t)g * nv;
        if (j->id % 2) {
            df_session *ss[2] = {s, other};
            const int32_t *tt[2] = {tp, tp};
            const int nn[2] = {n, n};
            float *ll[2] = {lg, NULL};
            j->rc = df_decode_batch(ss, 2, tt, nn, ll, j->err, sizeof j->err);
        } else {
            j->rc = df_decode(s, tp, n, lg, 0, j->err, sizeof j->err);
        }
    }
done:
    df_session_free(s);
    df_session_free(other);
    return NULL;
}

static atomic_int stop_reader;

static void *reader(void *arg) {
    df_model *m = arg;
    df_io_stats st;
    while (!atomic_load(&stop_reader)) {
        df_model_io_stats(m, &st);
        usleep(500);
    }
    return NULL;
}

static void check_model(const char *name, const char *args, int streamed) {
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/%s.gguf", tmpdir, name);
    tu_mkmodel(path, args);
    df_model_params mp = df_model_default_params();
    mp.n_threads = 2;
    mp.n_ctx = 32;
    mp.n_batch = 4;
    mp.hot_file = "";
    if (streamed) {
        df_plan p;
        mp.mem_budget = 1;
        assert_int_equal(df_model_plan(path, &mp, &p, err, sizeof err), 0);
        mp.mem_budget = p.minimum + (1 << 20);
    }
    df_model *m;
    if (df_model_load(path, &mp, &m, err, sizeof err) != 0) fail_msg("%s", err);
    const int nv = df_n_vocab(m);
    job ref[NT], jobs[NT];
    for (int i = 0; i < NT; i++) { /* one at a time: the reference */
        memset(&ref[i], 0, sizeof ref[i]);
        ref[i].m = m;
        ref[i].id = i;
        ref[i].out = calloc((size_t)(NG + 1) * nv, sizeof(float));
        run(&ref[i]);
        if (ref[i].rc != DF_OK) fail_msg("%s", ref[i].err);
    }
    pthread_t th[NT], rd;
    atomic_store(&stop_reader, 0);
    assert_int_equal(pthread_create(&rd, NULL, reader, m), 0);
    for (int i = 0; i < NT; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].m = m;
        jobs[i].id = i;
        jobs[i].out = calloc((size_t)(NG + 1) * nv, sizeof(float));
        assert_int_equal(pthread_create(&th[i], NULL, run, &jobs[i]), 0);
    }
    for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
    atomic_store(&stop_reader, 1);
    pthread_join(rd, NULL);
    for (int i = 0; i < NT; i++) {
        if (jobs[i].rc != DF_OK) fail_msg("thread %d: %s", i, jobs[i].err);
        assert_memory_equal(ref[i].out, jobs[i].out, sizeof(float) * (size_t)(NG + 1) * nv);
        free(ref[i].out);
        free(jobs[i].out);
    }
    printf("  %-12s %-9s %d threads decoding one model: each as alone\n", name, streamed ? "streamed" : "in memory", NT);
    df_model_free(m);
}

static void test_threads(void **state) {
    (void)state;
    check_model("llama", "--arch llama --type q8_0", 0);
    check_model("qwen3moe", "--preset qwen3moe-tiny --type q8_0", 1);
    check_model("kimi-linear", "--preset kimi-linear-tiny --type q8_0", 0);
}

static int setup(void **state) {
    (void)state;
    return tu_mkdtemp(tmpdir, sizeof tmpdir, "threads");
}

static int teardown(void **state) {
    (void)state;
    return tu_rmtree(tmpdir);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_threads)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
