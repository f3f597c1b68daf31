/*
 * config.c - the user's config file and DELTAFIN_* variables (config.h).
 *
 * One table (KEYS) says, for each setting, the flag it stands for and its
 * default; the flag's entry in the option table (cli/opts.c) says how its
 * value is checked and the commands it applies to. Reading the
 * file checks every line (a line's mistake is reported with its number and
 * stops the command: a default the user believes set but that is not is
 * worse than an error); applying the settings puts them as flags before the
 * user's arguments, so the user's own flags, coming later, win.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "deltafin.h"
#include "opts.h"
#include "queue.h" /* jq_default_path: the job database's default */

/* A key is the flag's name without its "--"; the flag's entry in the option table (cli/opts.c) says how its
 * value is checked and the commands it applies to. */
typedef struct {
    const char *key, *flag;
    const char *dflt; /* what applies when nothing sets it */
} cfg_key;

static const cfg_key KEYS[] = {
    {"mem", "--mem", "none (no budget: all in memory)"},
    {"io", "--io", "auto"},
    {"io-threads", "--io-threads", "8"},
    {"threads", "--threads", "all cores"},
    {"db", "--db", NULL /* jq_default_path */},
    {"remote", "--remote", "none"},
    {"host", "--host", "127.0.0.1"},
    {"port", "--port", "8080"},
    {"api-key", "--api-key", "none"},
};
#define N_KEYS (sizeof KEYS / sizeof KEYS[0])
#define LINE_MAX_LEN 4096

/* A setting's value and where it came from. */
typedef struct {
    char *value;
    char src[PATH_MAX + 64];
    int line;             /* its line in the file, 0 if not from the file */
} setting;

static void set(setting *s, const char *v, size_t n, const char *src) {
    free(s->value);
    s->value = malloc(n + 1);
    if (!s->value) {
        fprintf(stderr, "deltafin: out of memory\n");
        exit(1);
    }
    memcpy(s->value, v, n);
    s->value[n] = 0;
    snprintf(s->src, sizeof s->src, "%s", src);
}

static const cfg_key *find_key(const char *k, size_t n) {
    for (size_t i = 0; i < N_KEYS; i++)
        if (strlen(KEYS[i].key) == n && !strncmp(KEYS[i].key, k, n)) return &KEYS[i];
    return NULL;
}

/* The option k stands for (cli/opts.c). */
static const cli_opt *key_opt(const cfg_key *k) { return cli_find(NULL, k->flag, strlen(k->flag)); }

/* Does k apply to cmd? (Does cmd take its flag?) */
static int key_applies(const cfg_key *k, const char *cmd) { return cli_find(cmd, k->flag, strlen(k->flag)) != NULL; }

/* Check v for key k by its flag's entry; NULL if good, else what was expected. A path (~/ expanded) must be
 * absolute: a file has no working directory to be relative to. */
static const char *check_value(const cfg_key *k, setting *s) {
    static char want[128];
    const char *v = s->value;
    if (!*v) return "a value";
    const cli_opt *o = key_opt(k);
    if (o->kind == CLI_PATH) {
        if (v[0] == '~' && v[1] == '/') {
            const char *home = getenv("HOME");
            if (!home || home[0] != '/') return "an absolute path ($HOME is not set for ~/)";
            char *p = malloc(strlen(home) + strlen(v));
            if (!p) return "a shorter path (out of memory)";
            sprintf(p, "%s%s", home, v + 1);
            free(s->value);
            s->value = p;
            v = p;
        }
        return v[0] == '/' && strlen(v) < PATH_MAX ? NULL : "an absolute path (or ~/...)";
    }
    cli_val val;
    return cli_check(o, v, &val, want, sizeof want);
}

static int bad_value(const char *where, const cfg_key *k, const char *v, const char *want) {
    fprintf(stderr, "deltafin: %s: %s expects %s, got '%s'\n", where, k->key, want, v);
    return 2;
}

/* The default file: $XDG_CONFIG_HOME/deltafin/config, else ~/.config/deltafin/config ("" if neither is set). */
static void default_path(char *buf, size_t n) {
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    int w = -1;
    if (xdg && xdg[0] == '/') w = snprintf(buf, n, "%s/deltafin/config", xdg);
    else if (home && home[0] == '/') w = snprintf(buf, n, "%s/.config/deltafin/config", home);
    if (w < 0 || (size_t)w >= n) buf[0] = 0;
}

static const char *trim(char *s, char **end) {
    while (*s == ' ' || *s == '\t') s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n')) e--;
    *e = 0;
    if (end) *end = e;
    return s;
}

/* One line "key = value" (value optionally in double quotes; an unquoted
 * value ends at " #"). 0, or 2 with the reason said. */
static int parse_line(const char *path, int no, char *line, setting *st) {
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "%s:%d", path, no);
    char *end;
    char *s = (char *)trim(line, &end);
    if (!*s || *s == '#') return 0;
    char *eq = strchr(s, '=');
    if (!eq) {
        fprintf(stderr, "deltafin: %s: expected 'key = value', got '%s'\n", where, s);
        return 2;
    }
    char *kend = eq;
    while (kend > s && (kend[-1] == ' ' || kend[-1] == '\t')) kend--;
    const cfg_key *k = find_key(s, (size_t)(kend - s));
    if (!k) {
        *kend = 0;
        fprintf(stderr, "deltafin: %s: unknown key '%s' (the keys: mem, io, io-threads, threads, db, remote, host, "
                        "port, api-key)\n", where, s);
        return 2;
    }
    setting *t = &st[k - KEYS];
    if (t->line) {
        fprintf(stderr, "deltafin: %s: %s is already set on line %d\n", where, k->key, t->line);
        return 2;
    }
    char *v = eq + 1;
    while (*v == ' ' || *v == '\t') v++;
    size_t vn;
    if (*v == '"') {
        char *q = strchr(v + 1, '"');
        const char *rest = q ? trim(q + 1, NULL) : NULL;
        if (!q || (*rest && *rest != '#')) {
            fprintf(stderr, "deltafin: %s: a quoted value must end with '\"' (then at most a # comment)\n", where);
            return 2;
        }
        v++;
        vn = (size_t)(q - v);
    } else {
        for (char *c = v; *c; c++) /* a comment: '#' after a blank */
            if (*c == '#' && (c == v || c[-1] == ' ' || c[-1] == '\t')) {
                *c = 0;
                break;
            }
        v = (char *)trim(v, NULL);
        vn = strlen(v);
    }
    char src[PATH_MAX + 48];
    snprintf(src, sizeof src, "file %s", where);
    set(t, v, vn, src);
    t->line = no;
    const char *want = check_value(k, t);
    return want ? bad_value(where, k, t->value, want) : 0;
}

/* Read the file into st. explicit: it must exist. 0, or the exit status. */
static int read_file(const char *path, int explicit, setting *st) {
    /* O_NONBLOCK: a FIFO there is refused below, never waited on (docs/files.md) */
    const int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (fd >= 0 && !f) close(fd);
    if (!f) {
        if (!explicit && (errno == ENOENT || errno == ENOTDIR)) return 0;
        if (!explicit && errno == EACCES) { /* e.g. another user's HOME under setpriv or sudo: not ours to read */
            fprintf(stderr, "deltafin: warning: config file %s: %s; ignored\n", path, strerror(errno));
            return 0;
        }
        fprintf(stderr, "deltafin: config file %s: %s\n", path, strerror(errno));
        return 1;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && !S_ISREG(sb.st_mode)) {
        fclose(f);
        fprintf(stderr, "deltafin: config file %s is not a regular file\n", path);
        return 1;
    }
    char line[LINE_MAX_LEN + 2];
    int no = 0, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        no++;
        if (strlen(line) > LINE_MAX_LEN && !strchr(line, '\n')) {
            fprintf(stderr, "deltafin: %s:%d: the line is longer than %d bytes\n", path, no, LINE_MAX_LEN);
            rc = 2;
        } else {
            rc = parse_line(path, no, line, st);
        }
    }
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "deltafin: reading config file %s failed\n", path);
        rc = 1;
    }
    fclose(f);
    const setting *key = &st[find_key("api-key", 7) - KEYS];
    if (rc == 0 && key->value && (sb.st_mode & 077))
        fprintf(stderr, "deltafin: warning: %s holds api-key but others may read it (chmod 600)\n", path);
    return rc;
}

/* DELTAFIN_<KEY> variables over the file. */
static int read_env(setting *st) {
    for (size_t i = 0; i < N_KEYS; i++) {
        char var[64] = "DELTAFIN_";
        for (const char *c = KEYS[i].key; *c; c++) {
            const size_t n = strlen(var);
            var[n] = *c == '-' ? '_' : (char)(*c - 32 * (*c >= 'a' && *c <= 'z'));
            var[n + 1] = 0;
        }
        const char *v = getenv(var);
        if (!v) continue;
        char src[80];
        snprintf(src, sizeof src, "env %s", var);
        set(&st[i], v, strlen(v), src);
        st[i].line = 0;
        const char *want = check_value(&KEYS[i], &st[i]);
        if (want) return bad_value(var, &KEYS[i], v, want);
    }
    return 0;
}

/* Is argv[i] a "--config" (with its file in *file)? Advances i past the value. -1: no value. */
static int is_config_flag(int argc, char **argv, int *i, const char **file) {
    const char *a = argv[*i];
    if (!strncmp(a, "--config=", 9)) {
        *file = a + 9;
        return 1;
    }
    if (strcmp(a, "--config")) return 0;
    if (*i + 1 >= argc) return -1;
    *file = argv[++*i];
    return 1;
}

/* Does argv's a take the next word as its value (which could be "--config" itself: a prompt)? */
static int takes_value(const char *cmd, const char *a) {
    const cli_opt *o = !strchr(a, '=') ? cli_find(cmd, a, strlen(a)) : NULL;
    return o && o->kind != CLI_FLAG;
}

/* Read the file named by --config (removed from argv) or the default one, then the environment. */
static int load(int *argc, char **argv, setting *st, char *path, size_t pn, int *explicit) {
    const char *file = NULL;
    int k = 2;
    for (int i = 2; i < *argc; i++) {
        if (takes_value(argv[1], argv[i]) && i + 1 < *argc) {
            argv[k++] = argv[i++];
            argv[k++] = argv[i];
            continue;
        }
        const int c = is_config_flag(*argc, argv, &i, &file);
        if (c < 0) {
            fprintf(stderr, "deltafin: --config needs a value (deltafin --help lists the options)\n");
            return 2;
        }
        if (!c) argv[k++] = argv[i];
    }
    *argc = k;
    argv[k] = NULL;
    *explicit = file != NULL;
    if (file) snprintf(path, pn, "%s", file);
    else default_path(path, pn);
    int rc = *path ? read_file(path, *explicit, st) : 0;
    if (rc == 0) rc = read_env(st);
    return rc;
}

static void free_settings(setting *st) {
    for (size_t i = 0; i < N_KEYS; i++) free(st[i].value);
}

/* The rewritten argv and the values it holds: they live until the process
 * ends, and are freed then. */
static char **g_argv;
static char *g_vals[N_KEYS];

static void free_argv(void) {
    for (size_t i = 0; i < N_KEYS; i++) free(g_vals[i]);
    free(g_argv);
}

int cfg_apply(int *argc, char ***argv) {
    setting st[N_KEYS];
    memset(st, 0, sizeof st);
    char path[PATH_MAX];
    int explicit;
    const int rc = load(argc, *argv, st, path, sizeof path, &explicit);
    if (rc) {
        free_settings(st);
        return rc;
    }
    const char *cmd = (*argv)[1];
    int n = 0;
    for (size_t i = 0; i < N_KEYS; i++) n += st[i].value && key_applies(&KEYS[i], cmd);
    if (!n) {
        free_settings(st);
        return 0;
    }
    char **nv = g_argv = malloc(((size_t)*argc + 2 * (size_t)n + 1) * sizeof *nv);
    if (!nv) {
        fprintf(stderr, "deltafin: out of memory\n");
        exit(1);
    }
    int k = 0;
    nv[k++] = (*argv)[0];
    nv[k++] = (*argv)[1];
    for (size_t i = 0; i < N_KEYS; i++) {
        if (!st[i].value || !key_applies(&KEYS[i], cmd)) continue;
        nv[k++] = (char *)KEYS[i].flag;
        nv[k++] = g_vals[i] = st[i].value; /* kept until the process ends */
        st[i].value = NULL;
    }
    for (int i = 2; i < *argc; i++) nv[k++] = (*argv)[i];
    nv[k] = NULL;
    *argc = k;
    *argv = nv;
    atexit(free_argv);
    free_settings(st);
    return 0;
}

/* ---- deltafin config ---- */

static void print_setting(const cfg_key *k, const setting *s) {
    char dflt[PATH_MAX + 64];
    const char *v = s->value, *src = s->src;
    if (!v) {
        if (key_opt(k)->kind == CLI_PATH && jq_default_path(dflt, sizeof dflt, NULL, 0) == 0) v = dflt;
        else v = k->dflt ? k->dflt : "none";
        src = key_opt(k)->kind == CLI_PATH ? (getenv("XDG_DATA_HOME") ? "default ($XDG_DATA_HOME)" : "default ($HOME)")
                                : "default";
    }
    if (s->value && !strcmp(k->key, "api-key")) v = "(set, not shown)";
    printf("%-10s = %-32s # %s\n", k->key, v, src);
}

int cfg_main(int argc, char **argv) {
    setting st[N_KEYS];
    memset(st, 0, sizeof st);
    char path[PATH_MAX];
    int explicit;
    int rc = load(&argc, argv, st, path, sizeof path, &explicit);
    for (int i = 2; rc == 0 && i < argc; i++) { /* the flags, as the commands would take them */
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: deltafin config [--config FILE] [--mem SIZE] [--io E] [--threads N] ...\n"
                   "  every setting, its effective value and where it came from (docs/config.md)\n");
            free_settings(st);
            return 0;
        }
        const char *eq = !strncmp(a, "--", 2) ? strchr(a, '=') : NULL;
        const size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        size_t k = 0;
        const cli_opt *o = cli_find(NULL, a, nl);
        while (k < N_KEYS && !(o && key_opt(&KEYS[k]) == o)) k++;
        if (k == N_KEYS) {
            fprintf(stderr, "deltafin: config: unknown option '%.*s' (deltafin config --help)\n", (int)nl, a);
            rc = 2;
        } else if (!eq && i + 1 >= argc) {
            fprintf(stderr, "deltafin: %s needs a value\n", a);
            rc = 2;
        } else {
            const char *v = eq ? eq + 1 : argv[++i];
            set(&st[k], v, strlen(v), "flag");
            const char *want = check_value(&KEYS[k], &st[k]);
            if (want) rc = bad_value("flag", &KEYS[k], v, want);
        }
    }
    if (rc == 0) {
        if (!*path) printf("# config file: none (neither XDG_CONFIG_HOME nor HOME is set)\n");
        else printf("# config file: %s%s\n", path, explicit || access(path, F_OK) == 0 ? "" : " (not found)");
        for (size_t i = 0; i < N_KEYS; i++) print_setting(&KEYS[i], &st[i]);
    }
    free_settings(st);
    return rc;
}
