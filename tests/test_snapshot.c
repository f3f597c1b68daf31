/*
 * test_snapshot.c - session snapshots (df_session_save / df_session_load):
 * a session restored from a snapshot continues with bit-identical logits
 * (KV cache, MLA latent cache, recurrent states, deepseek4's sliding-window
 * rings and compressed state); damaged, truncated and
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

static df_session *session_of(df_model *m, int n_ctx, int n_batch) {
    df_session_params sp = df_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_batch = n_batch;
    df_session *s;
    char err[512];
    assert_int_equal(df_session_new(m, &sp, &s, err, sizeof err), 0);
    return s;
}

static df_session *session(df_model *m) { return session_of(m, 64, 8); }

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

/* deepseek4: the compressed keys, the indexer's keys and the compressors'
 * partial blocks travel with the sliding-window rings. deepseek4-tiny
 * (window 16, layers SCHC); a context of 512 with batches of 8 gives each
 * layer a ring of 64 rows. 300 tokens, saved at 261: the rings have wrapped,
 * two ratio-128 blocks are done and both ratio-4 and ratio-128 compressors
 * hold a partial block. Restored into a fresh session (from a file) and into
 * one that has seen other tokens (in memory), the continuation's logits are
 * bit-identical to the uninterrupted run's at every position. */
#define DS4_ALL 300
#define DS4_SAVE 261

static df_session *ds4_session(df_model *m) { return session_of(m, 512, 8); }

/* Decode tokens [from, upto) of t in batches of 8 (and a last shorter one); logits: each position's. */
static void ds4_feed(df_session *s, const int32_t *t, int from, int upto, float *logits, int nv) {
    char err[512];
    for (int i = from; i < upto; i += 8) {
        const int n = upto - i < 8 ? upto - i : 8;
        if (df_decode(s, t + i, n, logits + (size_t)i * nv, 1, err, sizeof err) != 0) fail_msg("decode: %s", err);
    }
}

static void test_deepseek4(void **st) {
    (void)st;
    char path[256], snap[256], err[512];
    df_model *m = load("--preset deepseek4-tiny --type q8_0", "ds4", path, sizeof path);
    const int nv = df_n_vocab(m);
    int32_t t[DS4_ALL];
    for (int i = 0; i < DS4_ALL; i++) t[i] = (int32_t)((i * 7919) % 300 + 5);
    float *ref = calloc((size_t)DS4_ALL * nv, sizeof(float)), *got = calloc((size_t)DS4_ALL * nv, sizeof(float));
    assert_non_null(ref);
    assert_non_null(got);
    df_session *a = ds4_session(m);
    ds4_feed(a, t, 0, DS4_ALL, ref, nv);
    df_session *b = ds4_session(m);
    ds4_feed(b, t, 0, DS4_SAVE, got, nv);
    snprintf(snap, sizeof snap, "%s/ds4.snap", tmpdir);
    if (df_session_save(b, snap, NULL, 0, err, sizeof err) != 0) fail_msg("save: %s", err);
    void *blob = NULL;
    size_t blen = 0;
    if (df_session_save_mem(b, &blob, &blen, err, sizeof err) != 0) fail_msg("save_mem: %s", err);
    /* from the file, into a fresh session */
    df_session *c = ds4_session(m);
    if (df_session_load(c, snap, NULL, 0, NULL, err, sizeof err) != 0) fail_msg("load: %s", err);
    assert_int_equal(df_session_pos(c), DS4_SAVE);
    memset(got, 0, (size_t)DS4_ALL * nv * sizeof(float));
    ds4_feed(c, t, DS4_SAVE, DS4_ALL, got, nv);
    const size_t tail = (size_t)(DS4_ALL - DS4_SAVE) * nv * sizeof(float);
    assert_memory_equal(ref + (size_t)DS4_SAVE * nv, got + (size_t)DS4_SAVE * nv, tail);
    /* from memory, into a session that has seen 200 other tokens */
    df_session *e = ds4_session(m);
    int32_t other[200];
    for (int i = 0; i < 200; i++) other[i] = (int32_t)((i * 31) % 200 + 7);
    ds4_feed(e, other, 0, 200, got, nv);
    if (df_session_load_mem(e, blob, blen, err, sizeof err) != 0) fail_msg("load_mem: %s", err);
    assert_int_equal(df_session_pos(e), DS4_SAVE);
    memset(got, 0, (size_t)DS4_ALL * nv * sizeof(float));
    ds4_feed(e, t, DS4_SAVE, DS4_ALL, got, nv);
    assert_memory_equal(ref + (size_t)DS4_SAVE * nv, got + (size_t)DS4_SAVE * nv, tail);
    /* a session of another ring (a context of 1024 with batches of 64: 128 rows) refuses it */
    df_session *g = session_of(m, 1024, 64);
    assert_int_equal(df_session_load(g, snap, NULL, 0, NULL, err, sizeof err), -1);
    assert_non_null(strstr(err, "another session shape"));
    assert_int_equal(df_session_pos(g), 0);
    free(blob);
    df_session_free(a);
    df_session_free(b);
    df_session_free(c);
    df_session_free(e);
    df_session_free(g);
    free(ref);
    free(got);
    df_model_free(m);
}

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
        cmocka_unit_test(test_deepseek4),
        cmocka_unit_test(test_stale),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
