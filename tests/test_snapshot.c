/*
 * test_snapshot.c - session snapshots (df_session_save / df_session_load):
 * a session restored from a snapshot continues with bit-identical logits
 * (KV cache, MLA latent cache, recurrent states); damaged, truncated and
 * stale snapshots are refused and leave the session as it was. The same
 * for snapshots in memory (df_session_save_mem / df_session_load_mem, the
 * server's prefix cache) and for reading a prompt cache's tokens alone
 * (df_prompt_cache_peek).
 */
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deltafin.h"
#include "testutil.h"

static char tmpdir[128];

static df_model *load(const char *args, const char *name, char *path, size_t n) {
    snprintf(path, n, "%s/%s.gguf", tmpdir, name);
    tu_mkmodel(path, args);
    df_model_params mp = df_model_default_params();
    mp.n_threads = 2;
    df_model *m;
    char err[512];
    assert_int_equal(df_model_load(path, &mp, &m, err, sizeof err), 0);
    return m;
}

static df_session *session(df_model *m) {
    df_session_params sp = df_session_default_params();
    sp.n_ctx = 64;
    sp.n_batch = 8;
    df_session *s;
    char err[512];
    assert_int_equal(df_session_new(m, &sp, &s, err, sizeof err), 0);
    return s;
}

static const int32_t toks[] = {1, 17, 42, 7, 99, 3, 5, 11, 23, 8, 64, 2, 31, 19};
#define N_PROMPT 6
#define N_ALL 14

/* Decode the prompt in one batch then tokens [N_PROMPT, upto) one at a time. */
static void feed(df_session *s, int from, int upto, float *logits) {
    char err[512];
    if (from == 0) {
        if (df_decode(s, toks, N_PROMPT, logits, 0, err, sizeof err) != 0) fail_msg("decode: %s", err);
        from = N_PROMPT;
    }
    for (int i = from; i < upto; i++) assert_int_equal(df_decode(s, &toks[i], 1, logits, 0, err, sizeof err), 0);
}

static void flip_byte(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

static void copy_file(const char *from, const char *to) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    assert_int_equal(system(cmd), 0);
}

static void check_model(const char *args, const char *name) {
    char path[256], snap[256], bad[256], err[512];
    df_model *m = load(args, name, path, sizeof path);
    const int nv = df_n_vocab(m);
    float *ref = malloc((size_t)nv * sizeof(float)), *got = malloc((size_t)nv * sizeof(float));
    assert_non_null(ref);
    assert_non_null(got);
    /* the uninterrupted run */
    df_session *a = session(m);
    feed(a, 0, N_ALL, ref);
    /* a run saved after 9 tokens, restored into a new session, continued */
    df_session *b = session(m);
    feed(b, 0, 9, got);
    snprintf(snap, sizeof snap, "%s/%s.snap", tmpdir, name);
    const char tag[] = "job 7 at 9";
    if (df_session_save(b, snap, tag, sizeof tag, err, sizeof err) != 0) fail_msg("save: %s", err);
    df_session *c = session(m);
    char user[64];
    size_t ulen = 0;
    if (df_session_load(c, snap, user, sizeof user, &ulen, err, sizeof err) != 0) fail_msg("load: %s", err);
    assert_int_equal(ulen, sizeof tag);
    assert_string_equal(user, tag);
    assert_int_equal(df_session_pos(c), 9);
    feed(c, 9, N_ALL, got);
    assert_memory_equal(ref, got, (size_t)nv * sizeof(float));
    /* in memory: b (at 9) copied into a session that has seen other tokens, continued */
    void *blob = NULL;
    size_t blen = 0;
    if (df_session_save_mem(b, &blob, &blen, err, sizeof err) != 0) fail_msg("save_mem: %s", err);
    df_session *e = session(m);
    const int32_t other[] = {5, 6, 7};
    assert_int_equal(df_decode(e, other, 3, NULL, 0, err, sizeof err), 0);
    if (df_session_load_mem(e, blob, blen, err, sizeof err) != 0) fail_msg("load_mem: %s", err);
    assert_int_equal(df_session_pos(e), 9);
    feed(e, 9, N_ALL, got);
    assert_memory_equal(ref, got, (size_t)nv * sizeof(float));
    /* a damaged header or a wrong length: refused, the session unchanged */
    ((unsigned char *)blob)[13] ^= 1;
    assert_int_equal(df_session_load_mem(e, blob, blen, err, sizeof err), -1);
    ((unsigned char *)blob)[13] ^= 1;
    assert_int_equal(df_session_load_mem(e, blob, blen - 1, err, sizeof err), -1);
    assert_int_equal(df_session_pos(e), N_ALL);
    free(blob);
    df_session_free(e);
    /* damaged copies: a flipped payload byte, a flipped header byte, truncated, padded */
    struct stat st;
    assert_int_equal(stat(snap, &st), 0);
    const long offs[] = {(long)st.st_size - 3, (long)st.st_size / 2, 13};
    df_session *d = session(m);
    for (int i = 0; i < 3; i++) {
        snprintf(bad, sizeof bad, "%s/%s.bad%d", tmpdir, name, i);
        copy_file(snap, bad);
        flip_byte(bad, offs[i]);
        assert_int_equal(df_session_load(d, bad, NULL, 0, NULL, err, sizeof err), -1);
        assert_int_equal(df_session_pos(d), 0);
    }
    snprintf(bad, sizeof bad, "%s/%s.trunc", tmpdir, name);
    copy_file(snap, bad);
    assert_int_equal(truncate(bad, st.st_size - 100), 0);
    assert_int_equal(df_session_load(d, bad, NULL, 0, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "truncated"));
    assert_int_equal(df_session_pos(d), 0);
    /* the session d is still fine: it runs as a fresh one would */
    feed(d, 0, N_ALL, got);
    assert_memory_equal(ref, got, (size_t)nv * sizeof(float));
    /* the model is never a snapshot's target */
    assert_int_equal(df_session_save(b, path, NULL, 0, err, sizeof err), -1);
    df_session_free(a);
    df_session_free(b);
    df_session_free(c);
    df_session_free(d);
    free(ref);
    free(got);
    df_model_free(m);
}

static void test_kv(void **st) { (void)st; check_model("--arch llama --type q8_0", "llama"); }
static void test_latent(void **st) { (void)st; check_model("--preset deepseek-v3-tiny --type q8_0", "dsv3"); }
/* DSA: the indexer's key cache travels with the latents (top-k 4 < 14 positions, so it selects) */
static void test_dsa(void **st) { (void)st; check_model("--preset glm-dsa-tiny --type q8_0 --idx-types 1101 --idx-top-k 4", "glmdsa"); }
static void test_recurrent(void **st) { (void)st; check_model("--preset kimi-linear-tiny --type q8_0", "kimi"); }

/* A snapshot of one model is stale for another (and for a changed file). */
static void test_stale(void **st) {
    (void)st;
    char p1[256], p2[256], snap[256], err[512];
    df_model *m1 = load("--arch llama --type q8_0", "m1", p1, sizeof p1);
    df_model *m2 = load("--arch llama --type f16", "m2", p2, sizeof p2);
    df_session *s1 = session(m1), *s2 = session(m2);
    feed(s1, 0, 8, NULL);
    snprintf(snap, sizeof snap, "%s/m1.snap", tmpdir);
    assert_int_equal(df_session_save(s1, snap, NULL, 0, err, sizeof err), 0);
    assert_int_equal(df_session_load(s2, snap, NULL, 0, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "stale"));
    assert_int_equal(df_session_pos(s2), 0);
    /* a snapshot in memory of m1 does not go into m2's session */
    void *blob = NULL;
    size_t blen = 0;
    assert_int_equal(df_session_save_mem(s1, &blob, &blen, err, sizeof err), 0);
    assert_int_equal(df_session_load_mem(s2, blob, blen, err, sizeof err), -1);
    assert_non_null(strstr(err, "stale"));
    free(blob);
    /* a prompt cache's tokens: read back for its model, refused for another */
    char pc[256];
    snprintf(pc, sizeof pc, "%s/m1.pc", tmpdir);
    const int32_t held[8] = {1, 17, 42, 7, 99, 3, 5, 11};
    assert_int_equal(df_prompt_cache_save(s1, pc, held, err, sizeof err), 0);
    int32_t back[16];
    int n = 0;
    assert_int_equal(df_prompt_cache_peek(m1, pc, back, 16, &n, err, sizeof err), 0);
    assert_int_equal(n, 8);
    assert_memory_equal(back, held, sizeof held);
    assert_int_equal(df_prompt_cache_peek(m1, pc, back, 4, &n, err, sizeof err), -1); /* too small a buffer */
    assert_int_equal(df_prompt_cache_peek(m2, pc, back, 16, &n, err, sizeof err), -1);
    assert_non_null(strstr(err, "stale"));
    assert_int_equal(df_prompt_cache_peek(m1, snap, back, 16, &n, err, sizeof err), -1); /* a plain snapshot */
    df_session_free(s1);
    df_session_free(s2);
    df_model_free(m1);
    df_model_free(m2);
}

static int setup(void **st) {
    (void)st;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/deltafin-snap-XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv),
        cmocka_unit_test(test_latent),
        cmocka_unit_test(test_dsa),
        cmocka_unit_test(test_recurrent),
        cmocka_unit_test(test_stale),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
