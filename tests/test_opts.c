/*
 * test_opts.c - the option table (cli/opts.c): its entries are well formed,
 * no command has two options of one spelling, and cli_next reads, checks and
 * refuses as it says. `test_opts --list` prints "COMMAND FLAG VALUE" for every
 * option of every command, with a value the table accepts: tests/cli/options.sh
 * gives each to the program, whose parsers must all store what the table lets
 * through.
 */
#include <string.h>

#include "opts.h"
#include "testutil.h"

static int is_command(const char *w, size_t n) {
    for (size_t c = 0; cli_command_name(c); c++)
        if (strlen(cli_command_name(c)) == n && !strncmp(cli_command_name(c), w, n)) return 1;
    return 0;
}

/* every entry: a long name, a known kind with a sane range, choices, help, and commands that exist */
static void test_entries_well_formed(void **state) {
    (void)state;
    size_t n = 0;
    for (const cli_opt *o; (o = cli_option(n)); n++) {
        assert_true(!strncmp(o->name, "--", 2));
        assert_non_null(o->help);
        assert_true(strlen(o->help) > 3);
        if (o->kind == CLI_INT || o->kind == CLI_NUM) assert_true(o->lo <= o->hi);
        if (o->kind == CLI_CHOICE) assert_true(o->arg && strchr(o->arg, '|'));
        if (o->kind != CLI_FLAG && o->kind != CLI_CHOICE) assert_non_null(o->arg);
        if (!o->cmds) {
            assert_string_equal(o->name, "--help");
            continue;
        }
        assert_true(o->cmds[0] == ' ' && o->cmds[strlen(o->cmds) - 1] == ' ');
        for (const char *p = o->cmds; *p;) {
            p += strspn(p, " ");
            const size_t w = strcspn(p, " ");
            if (w && !is_command(p, w)) fail_msg("%s names a command that is not one: %.*s", o->name, (int)w, p);
            p += w;
        }
    }
    assert_true(n > 50);
}

/* a spelling means one option in a command: no two entries that share a name or alias apply to one command */
static void test_no_spelling_twice(void **state) {
    (void)state;
    for (size_t c = 0; cli_command_name(c); c++) {
        const char *cmd = cli_command_name(c);
        for (size_t i = 0; cli_option(i); i++) {
            const cli_opt *a = cli_option(i);
            if (!cli_applies(a, cmd)) continue;
            const char *names[2] = {a->name, a->alias};
            for (int k = 0; k < 2; k++) {
                if (!names[k]) continue;
                for (const char *p = names[k]; *p;) {
                    const size_t w = strcspn(p, "|");
                    if (cli_find(cmd, p, w) != a)
                        fail_msg("%s: %.*s means both %s and %s", cmd, (int)w, p, a->name, cli_find(cmd, p, w)->name);
                    p += w + (p[w] == '|');
                }
            }
        }
    }
}

/* runs cli_next over argv (argv[0], argv[1] = the command); returns its codes and fills v */
static int next(const char *cmd, char **argv, int argc, int *i, cli_val *v) {
    return cli_next(cmd, argc, argv, i, v);
}

static void test_reads_and_checks(void **state) {
    (void)state;
    char *argv[] = {"deltafin", "run", "-c", "512", "--top-p=0.5", "--kv", "f32", "--mem", "6G",
                    "--ignore-eos", "stray", "--io", "io_uring"};
    const int argc = (int)(sizeof argv / sizeof argv[0]);
    cli_val v;
    int i = 2;
    assert_int_equal(next("run", argv, argc, &i, &v), CLI_OPTION);
    assert_true(cli_is(&v, "--ctx-size"));
    assert_int_equal(v.n, 512);
    assert_int_equal(next("run", argv, argc, &i, &v), CLI_OPTION);
    assert_true(cli_is(&v, "--top-p"));
    assert_true(v.x == 0.5);
    assert_int_equal(next("run", argv, argc, &i, &v), CLI_OPTION);
    assert_string_equal(v.s, "f32");
    assert_int_equal(next("run", argv, argc, &i, &v), CLI_OPTION);
    assert_true(v.size == (uint64_t)6 << 30);
    assert_int_equal(next("run", argv, argc, &i, &v), CLI_OPTION);
    assert_true(cli_is(&v, "--ignore-eos"));
    assert_null(v.s);
    assert_int_equal(next("run", argv, argc, &i, &v), CLI_ARG);
    assert_string_equal(v.s, "stray");
    assert_int_equal(next("run", argv, argc, &i, &v), CLI_OPTION); /* a choice accepted but not shown */
    assert_string_equal(v.s, "io_uring");
    assert_int_equal(next("run", argv, argc, &i, &v), CLI_END);
}

/* each refusal: out of range, not a number, a bad choice, a flag given a value, a missing value, a size of 0,
 * an option of another command, an unknown one */
static void test_refuses(void **state) {
    (void)state;
    static const char *const bad[][3] = {
        {"run", "--top-p", "2"},       {"run", "-t", "0"},         {"run", "-n", "abc"},
        {"run", "--temp", "nan"},      {"run", "--temp", "inf"},   {"run", "--kv", "f8"},
        {"run", "--repeat-penalty", "0"}, {"run", "--mem", "0"},   {"run", "--mem", "lots"},
        {"chat", "-n", "0"},           {"serve", "--port", "70000"}, {"serve", "--remote", "ftp://x"},
        {"run", "--port", "80"},       {"run", "--frobnicate", "1"}, {"bench", "--prompt", "hi"},
        {"submit", "--priority", "1.5"}, {"run", "-c", "99999999999999999999"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char *argv[] = {"deltafin", (char *)bad[k][0], (char *)bad[k][1], (char *)bad[k][2]};
        cli_val v;
        int i = 2;
        if (next(bad[k][0], argv, 4, &i, &v) != CLI_ERROR)
            fail_msg("%s %s %s was let through", bad[k][0], bad[k][1], bad[k][2]);
    }
    char *flag_eq[] = {"deltafin", "run", "--ignore-eos=1"}, *missing[] = {"deltafin", "run", "--temp"};
    cli_val v;
    int i = 2;
    assert_int_equal(next("run", flag_eq, 3, &i, &v), CLI_ERROR);
    i = 2;
    assert_int_equal(next("run", missing, 3, &i, &v), CLI_ERROR);
    /* a cache's size may be 0 (off), the budget may not */
    char *pc[] = {"deltafin", "serve", "--prompt-cache-mem", "0"};
    i = 2;
    assert_int_equal(next("serve", pc, 4, &i, &v), CLI_OPTION);
    assert_true(v.size == 0);
}

/* the same spelling, another option in another command: bench's -p is the prompt's length */
static void test_per_command_meaning(void **state) {
    (void)state;
    char *argv[] = {"deltafin", "bench", "-p", "64"};
    cli_val v;
    int i = 2;
    assert_int_equal(next("bench", argv, 4, &i, &v), CLI_OPTION);
    assert_true(cli_is(&v, "--n-prompt"));
    assert_int_equal(v.n, 64);
    argv[1] = "run";
    i = 2;
    assert_int_equal(next("run", argv, 4, &i, &v), CLI_OPTION);
    assert_true(cli_is(&v, "--prompt"));
}

/* a value the option accepts */
static const char *good_value(const cli_opt *o, char *buf, size_t n) {
    switch (o->kind) {
    case CLI_INT: snprintf(buf, n, "%ld", (long)(o->lo > 1 ? o->lo : o->hi >= 1 ? 1 : o->lo)); return buf;
    case CLI_NUM: snprintf(buf, n, "%g", o->lo + (o->hi - o->lo) / 2); return buf;
    case CLI_SIZE: return "1M";
    case CLI_CHOICE: snprintf(buf, n, "%.*s", (int)strcspn(o->arg, "|"), o->arg); return buf;
    case CLI_URL: return "http://127.0.0.1:9";
    default: return "x";
    }
}

static void test_good_values_pass(void **state) {
    (void)state;
    for (size_t i = 0; cli_option(i); i++) {
        const cli_opt *o = cli_option(i);
        if (o->kind == CLI_FLAG) continue;
        char buf[64], want[128];
        cli_val v;
        const char *t = good_value(o, buf, sizeof buf);
        if (cli_check(o, t, &v, want, sizeof want)) fail_msg("%s %s: expected %s", o->name, t, want);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--list")) {
        for (size_t c = 0; cli_command_name(c); c++)
            for (size_t i = 0; cli_option(i); i++) {
                const cli_opt *o = cli_option(i);
                char buf[64];
                if (!o->cmds || !cli_applies(o, cli_command_name(c))) continue;
                printf("%s %s%s%s\n", cli_command_name(c), o->name, o->kind == CLI_FLAG ? "" : " ",
                       o->kind == CLI_FLAG ? "" : good_value(o, buf, sizeof buf));
            }
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_entries_well_formed), cmocka_unit_test(test_no_spelling_twice),
        cmocka_unit_test(test_reads_and_checks),    cmocka_unit_test(test_refuses),
        cmocka_unit_test(test_per_command_meaning), cmocka_unit_test(test_good_values_pass),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
