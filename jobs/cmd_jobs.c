/*
 * cmd_jobs.c - the job subcommands (cmd_jobs.h):
 *
 *   deltafin submit -m MODEL (-p TEXT | -f FILE | --chat FILE.json) [-n N] [-c CTX] [-t T] [--temp T]
 *                   [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--repeat-last-n N]
 *                   [--seed S] [--ignore-eos] [--no-bos] [--mem SIZE [--page-cache]] [--deadline TIME] [--priority P]
 *                   [--db PATH]
 *   deltafin jobs   [--db PATH]                      a table: state, tokens done, tokens/s, ETA
 *   deltafin job ID [--json] [--follow] [--db PATH]  one job, and its text (--follow: as it grows)
 *   deltafin cancel ID [--db PATH]
 *   deltafin requeue ID [--db PATH]                  a failed, canceled or expired job back in the queue
 *   deltafin worker [--db PATH] [--drain] [--commit-every SECONDS] [--no-checkpoints] [--checkpoint-ratio R]
 *                   [--max-restarts N] [--monitor-every SECONDS]
 *                   (checkpoints: DB's folder/checkpoints, 0700; each run a supervised child process)
 *
 * Their options are the table's in cli/opts.c (checked there; stored here).
 * submit prints the job id alone on stdout. Exit status: 0 ok, 1 runtime
 * error, 2 usage error (as the rest of the CLI).
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmd_jobs.h"
#include "job_json.h"
#include "opts.h" /* the options of every command (cli/opts.c) */
#include "status.h"
#include "queue.h"
#include "remote.h"
#include "worker.h"
/* --mem: df_parse_size, as the rest of the CLI reads it */

#define ERRLEN 8192

static const char *const CMDS[] = {"submit", "jobs", "job", "cancel", "requeue", "worker"};

int jobs_is_command(const char *cmd) {
    for (size_t i = 0; i < sizeof CMDS / sizeof CMDS[0]; i++)
        if (!strcmp(cmd, CMDS[i])) return 1;
    return 0;
}

static int usage_err(const char *fmt, const char *a) {
    fputs("deltafin: ", stderr);
    fprintf(stderr, fmt, a);
    fputs(" (deltafin COMMAND --help lists its options)\n", stderr);
    return 2;
}

static int fail(const char *msg) {
    fprintf(stderr, "deltafin: %s\n", msg);
    return 1;
}

/* --deadline: "+90s", "+30m", "+2h", "+1d", Unix seconds, or local "YYYY-MM-DD HH:MM[:SS]" / "...THH:MM". */
static int parse_deadline(const char *v, double *out) {
    if (v[0] == '+') {
        char *end;
        errno = 0;
        const double x = strtod(v + 1, &end);
        double mul = 1;
        if (!strcmp(end, "m")) mul = 60;
        else if (!strcmp(end, "h")) mul = 3600;
        else if (!strcmp(end, "d")) mul = 86400;
        else if (strcmp(end, "s") && *end) return -1;
        if (errno || end == v + 1 || !isfinite(x) || x < 0) return -1;
        *out = (double)time(NULL) + x * mul;
        return 0;
    }
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *e = strptime(v, "%Y-%m-%d %H:%M", &tm);
    if (!e) e = strptime(v, "%Y-%m-%dT%H:%M", &tm);
    if (e) {
        if (*e == ':' && !(e = strptime(e, ":%S", &tm))) return -1;
        if (*e) return -1;
        tm.tm_isdst = -1;
        const time_t t = mktime(&tm);
        if (t == (time_t)-1) return -1;
        *out = (double)t;
        return 0;
    }
    char *end;
    errno = 0;
    const double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x <= 0) return -1;
    *out = x;
    return 0;
}

/* A prompt or chat file: df_read_input (a regular file or "-", never a FIFO waited on). */
static char *read_file(const char *path, size_t max, size_t *len) {
    char err[1024];
    char *t = df_read_input(path, max, 0, len, NULL, err, sizeof err);
    if (!t) fprintf(stderr, "deltafin: %s\n", err);
    return t;
}

/* A chat job is checked when it is submitted, not when a worker meets it: {"messages": a non-empty list}, and a
 * model that has a chat template to render it with (read without its weights). 0, or 1 (said on stderr). */
static int check_chat(const jq_job *j) {
    cJSON *root = cJSON_ParseWithLength(j->prompt, j->prompt_len);
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    const int ok = cJSON_IsArray(msgs) && cJSON_GetArraySize(msgs) > 0;
    cJSON_Delete(root);
    if (!ok) return fail("--chat: \"messages\" must be a non-empty JSON list of messages");
    df_model_params mp = df_model_default_params();
    mp.vocab_only = 1;
    df_model *m = NULL;
    char err[ERRLEN];
    if (df_model_load(j->model, &mp, &m, err, sizeof err) != 0) return fail(err);
    const int has = df_chat_template(m) != NULL;
    df_model_free(m);
    if (!has) return fail("--chat: the model has no chat template (tokenizer.chat_template) to render it with");
    return 0;
}

/* Options common to the subcommands. */
typedef struct {
    const char *db, *model, *prompt, *file, *chat;
    int json, follow, drain, have_id, no_ckpt, max_restarts, split_layers;
    double commit_every, ckpt_ratio, monitor_every, disk_gbps, mem_gbps;
    int64_t id;
    jq_job job;
} jopts;

/* One option (read and checked by cli_next: cli/opts.c), stored. 0 ok, 2 usage error. */
static int store(jopts *o, const cli_val *v) {
    jq_job *j = &o->job;
    const char *s = v->s;
    const int n = (int)v->n;
    if (cli_is(v, "--json")) o->json = 1;
    else if (cli_is(v, "--follow")) o->follow = 1;
    else if (cli_is(v, "--drain")) o->drain = 1;
    else if (cli_is(v, "--no-checkpoints")) o->no_ckpt = 1;
    else if (cli_is(v, "--ignore-eos")) j->ignore_eos = 1;
    else if (cli_is(v, "--no-bos")) j->no_bos = 1;
    else if (cli_is(v, "--page-cache")) j->page_cache = 1;
    else if (cli_is(v, "--db")) o->db = s;
    else if (cli_is(v, "--split")) o->split_layers = !strcmp(s, "layers"); /* worker: docs/cluster.md */
    else if (cli_is(v, "--model")) o->model = s;
    else if (cli_is(v, "--prompt")) o->prompt = s;
    else if (cli_is(v, "--file")) o->file = s;
    else if (cli_is(v, "--chat")) o->chat = s;
    else if (cli_is(v, "--remote")) {
        free(j->remote);
        if (!(j->remote = strdup(s))) return usage_err("out of memory%s", "");
    }
    else if (cli_is(v, "--mem")) j->mem = v->size;
    else if (cli_is(v, "--deadline")) {
        if (parse_deadline(s, &j->deadline) != 0)
            return usage_err("--deadline expects +30m, +2h, 'YYYY-MM-DD HH:MM' or Unix seconds, got '%s'", s);
        if (j->deadline <= (double)time(NULL))
            return usage_err("--deadline %s is in the past: the job would only expire", s);
    }
    else if (cli_is(v, "--n-predict")) j->n_predict = n;
    else if (cli_is(v, "--ctx-size")) j->ctx = n;
    else if (cli_is(v, "--threads")) j->threads = n;
    else if (cli_is(v, "--temp")) j->sp.temp = (float)v->x;
    else if (cli_is(v, "--top-k")) j->sp.top_k = n;
    else if (cli_is(v, "--top-p")) j->sp.top_p = (float)v->x;
    else if (cli_is(v, "--min-p")) j->sp.min_p = (float)v->x;
    else if (cli_is(v, "--repeat-penalty")) j->sp.repeat_penalty = (float)v->x;
    else if (cli_is(v, "--repeat-last-n")) j->sp.repeat_last_n = n;
    else if (cli_is(v, "--seed")) j->sp.seed = (uint64_t)n;
    else if (cli_is(v, "--priority")) j->priority = n;
    else if (cli_is(v, "--commit-every")) o->commit_every = v->x;
    else if (cli_is(v, "--checkpoint-ratio")) o->ckpt_ratio = v->x;
    else if (cli_is(v, "--max-restarts")) o->max_restarts = n;
    else if (cli_is(v, "--monitor-every")) o->monitor_every = v->x;
    else if (cli_is(v, "--disk-gbps")) o->disk_gbps = v->x;
    else if (cli_is(v, "--mem-gbps")) o->mem_gbps = v->x;
    else return usage_err("%s: an option this parser forgot", v->opt->name);
    return 0;
}

/* cmd's command line into o: 0, 2 (a usage error, said), or -1 (--help, printed). */
static int parse_args(const char *cmd, jopts *o, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    jq_job_init(&o->job);
    o->commit_every = 1.0;
    o->ckpt_ratio = 20.0;
    o->max_restarts = 3;
    o->monitor_every = 60.0;
    cli_val v;
    for (int rc, i = 2; (rc = cli_next(cmd, argc, argv, &i, &v)) != CLI_END;) {
        if (rc == CLI_ERROR) return 2;
        if (rc == CLI_ARG) {
            char *end;
            errno = 0;
            const long long id = strtoll(v.s, &end, 10);
            if (o->have_id || errno || *end || end == v.s || id <= 0) return usage_err("unexpected argument '%s'", v.s);
            o->id = id;
            o->have_id = 1;
            continue;
        }
        if (cli_is(&v, "--help")) {
            cli_command_help(stdout, cmd);
            return -1;
        }
        if ((rc = store(o, &v))) return rc;
    }
    return 0;
}

static int db_path(const jopts *o, char *path, size_t n) {
    char err[ERRLEN];
    if (o->db) {
        if (strlen(o->db) >= n) return fail("the --db path is too long");
        snprintf(path, n, "%s", o->db);
    } else if (jq_default_path(path, n, err, sizeof err) != 0) {
        return fail(err);
    }
    return 0;
}

static int open_db(const jopts *o, jq **q) {
    char path[PATH_MAX], err[ERRLEN];
    if (db_path(o, path, sizeof path)) return 1;
    if (jq_open(path, q, err, sizeof err) != 0) return fail(err);
    return 0;
}

/* ---- submit ---- */

static int cmd_submit(jopts *o) {
    jq_job *j = &o->job;
    if (!o->model) return usage_err("submit needs -m MODEL%s", "");
    const int kinds = !!o->prompt + !!o->file + !!o->chat;
    if (kinds != 1) return usage_err("submit needs exactly one of -p TEXT, -f FILE, --chat FILE.json%s", "");
    char named[4096], rerr[1024]; /* -m NAME of a model store (hf:, ollama:, ...): its file */
    if (df_model_resolve(o->model, named, sizeof named, rerr, sizeof rerr) != DF_OK) {
        fprintf(stderr, "deltafin: %s\n", rerr);
        return 1;
    }
    char *abs = realpath(named, NULL);
    if (!abs) {
        fprintf(stderr, "deltafin: %s: %s\n", o->model, strerror(errno));
        return 1;
    }
    j->model = abs;
    struct stat st; /* stat, not open: a FIFO never blocks here */
    if (stat(abs, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "deltafin: %s is not a regular file: not a model\n", o->model);
        return 1;
    }
    /* what the worker would find out later, now: a model this build cannot run, a budget below its minimum */
    df_model_params mp = df_model_default_params();
    mp.mem_budget = j->mem;
    mp.n_ctx = j->ctx;
    df_plan plan;
    char perr[ERRLEN], b0[32], b1[32];
    if (df_model_plan(abs, &mp, &plan, perr, sizeof perr) != 0) {
        fprintf(stderr, "deltafin: %s: not submitted: %s\n", o->model, perr);
        return 1;
    }
    if (j->mem && plan.budget < plan.minimum) {
        fprintf(stderr, "deltafin: not submitted: --mem %s is below the %s this model needs at a context of %d "
                "(deltafin plan -m %s --mem ... says more)\n", df_fmt_bytes(j->mem, b0, sizeof b0),
                df_fmt_bytes(plan.minimum, b1, sizeof b1), plan.n_ctx, o->model);
        return 1;
    }
    if (o->prompt) {
        j->prompt_len = strlen(o->prompt);
        j->prompt = strdup(o->prompt);
    } else {
        size_t len;
        char *t = read_file(o->file ? o->file : o->chat, (size_t)1 << 30, &len);
        if (!t) return 1;
        j->prompt = t;
        j->prompt_len = len;
        if (o->chat) {
            /* a bare list of messages becomes {"messages": [...]} */
            const char *p = t;
            while (isspace((unsigned char)*p)) p++;
            if (*p == '[') {
                const size_t n = len + 16;
                char *w = malloc(n);
                if (!w) return fail("out of memory");
                snprintf(w, n, "{\"messages\":%s}", t);
                free(t);
                j->prompt = w;
                j->prompt_len = strlen(w);
            } else if (*p != '{') {
                return fail("--chat expects a JSON object with \"messages\" or a JSON list of messages");
            }
            j->chat = 1;
            if (check_chat(j) != 0) return 1;
        }
    }
    if (!j->prompt) return fail("out of memory");
    jq *q;
    if (open_db(o, &q)) return 1;
    char err[ERRLEN];
    int64_t id;
    const int rc = jq_submit(q, j, &id, err, sizeof err);
    jq_close(q);
    if (rc != 0) return fail(err);
    printf("%lld\n", (long long)id);
    return 0;
}

/* ---- jobs, job, cancel ---- */

static double tps_of(const jq_job *j) { return j->gen_seconds > 0 ? j->n_done / j->gen_seconds : 0; }

static void fmt_eta(const jq_job *j, char *buf, size_t n) {
    const double tps = tps_of(j);
    if (strcmp(j->state, "running") && strcmp(j->state, "queued")) snprintf(buf, n, "-");
    else if (tps <= 0) snprintf(buf, n, "?");
    else {
        const double s = (j->n_predict - j->n_done) / tps;
        if (s < 120) snprintf(buf, n, "%.0fs", s);
        else if (s < 7200) snprintf(buf, n, "%.0fm", s / 60);
        else snprintf(buf, n, "%.1fh", s / 3600);
    }
}

/* Why a job stopped, in a few words: the worker's note, the error, the state's own reason. */
static const char *why_ended(const jq_job *j, char *buf, size_t n) {
    const char *s = j->state;
    if (!strcmp(s, "done") && j->note && strstr(j->note, "context was full")) snprintf(buf, n, "the context filled");
    else if (!strcmp(s, "done") && j->note && strstr(j->note, "end-of-generation")) snprintf(buf, n, "end of text");
    else if (!strcmp(s, "done")) snprintf(buf, n, j->n_done >= j->n_predict ? "all tokens" : "%s", j->note ? j->note : "");
    else if (!strcmp(s, "failed") || !strcmp(s, "expired")) snprintf(buf, n, "%.80s", j->error ? j->error : "");
    else if (!strcmp(s, "canceled")) snprintf(buf, n, "canceled");
    else buf[0] = 0;
    return buf;
}

static int cmd_list(jopts *o) {
    jq *q;
    if (open_db(o, &q)) return 1;
    char err[ERRLEN];
    jq_job *v;
    int n;
    const int rc = jq_list(q, &v, &n, err, sizeof err);
    jq_close(q);
    if (rc != 0) return fail(err);
    printf("%6s  %-9s %4s %13s %9s %7s  %-24s %s\n", "ID", "STATE", "PRIO", "TOKENS", "TOKENS/S", "ETA", "MODEL",
           "WHY");
    for (int i = 0; i < n; i++) {
        char tok[32], eta[16], why[96];
        snprintf(tok, sizeof tok, "%d/%d", v[i].n_done, v[i].n_predict);
        fmt_eta(&v[i], eta, sizeof eta);
        const char *base = strrchr(v[i].model, '/');
        printf("%6lld  %-9s %4d %13s %9.2f %7s  %-24s %s\n", (long long)v[i].id, v[i].state, v[i].priority, tok,
               tps_of(&v[i]), eta, base ? base + 1 : v[i].model, why_ended(&v[i], why, sizeof why));
        jq_job_free(&v[i]);
    }
    free(v);
    return 0;
}

static int terminal(const char *state) { return strcmp(state, "queued") && strcmp(state, "running"); }

/* A worker holds a shared flock on the database file while it runs (SQLite's locks are POSIX record locks,
 * which flock leaves alone): the fd, kept open; -1 when it cannot be taken. */
static int worker_mark(const char *db) {
    const int fd = open(db, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd >= 0 && flock(fd, LOCK_SH | LOCK_NB) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* 1 when some worker serves the database at db, 0 when none does, -1 when it cannot be told. */
static int worker_running(const char *db) {
    const int fd = open(db, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return -1;
    const int free_ = flock(fd, LOCK_EX | LOCK_NB) == 0; /* nobody holds it shared */
    close(fd);
    return !free_;
}

static int cmd_show(jopts *o) {
    if (!o->have_id) return usage_err("job needs an ID%s", "");
    if (o->json && o->follow) return usage_err("give --json or --follow, not both%s", "");
    jq *q;
    if (open_db(o, &q)) return 1;
    char err[ERRLEN], db[PATH_MAX];
    size_t shown = 0;
    int rc = 0, said_idle = 0;
    double checked = (double)time(NULL); /* a worker started beside this command has 2 s to take its mark */
    if (db_path(o, db, sizeof db)) db[0] = 0;
    if (o->follow) status_open(1); /* the job's figures, apart from its text */
    for (;;) {
        jq_job j;
        int found;
        if (jq_get(q, o->id, 1, &j, &found, err, sizeof err) != 0) {
            rc = fail(err);
            break;
        }
        if (!found) {
            fprintf(stderr, "deltafin: no job %lld\n", (long long)o->id);
            rc = 1;
            break;
        }
        if (o->json) {
            char *ev, *stt;
            if (jq_history(q, j.id, &ev, &stt, err, sizeof err) != 0) {
                jq_job_free(&j);
                rc = fail(err);
                break;
            }
            jq_write_json(stdout, &j, ev, stt);
            free(ev);
            free(stt);
        } else if (!o->follow) {
            fwrite(j.text, 1, j.text_len, stdout);
            fprintf(stderr, "job %lld: %s, %d/%d tokens, %.2f tokens/s, %d run%s%s%s%s%s%s%s\n", (long long)j.id,
                    j.state, j.n_done, j.n_predict, tps_of(&j), j.runs, j.runs == 1 ? "" : "s",
                    !strcmp(j.place, "remote") ? ", ran on " : "", !strcmp(j.place, "remote") ? j.remote : "",
                    j.error ? "; error: " : "", j.error ? j.error : "", j.note ? "; " : "", j.note ? j.note : "");
            char *ev, *stt;
            if (jq_history(q, j.id, &ev, &stt, err, sizeof err) == 0 && ev && strcmp(ev, "[]"))
                fprintf(stderr, "events: %s\n", ev);
            free(ev);
            free(stt);
        } else {
            if (j.text_len > shown) {
                fwrite(j.text + shown, 1, j.text_len - shown, stdout);
                status_text(j.text + shown, j.text_len - shown);
            }
            shown = j.text_len > shown ? j.text_len : shown;
            fflush(stdout);
            status_show(j.state, j.n_done, j.n_predict, tps_of(&j), 0);
            const double now = (double)time(NULL);
            if (!strcmp(j.state, "queued") && !said_idle && *db && now - checked >= 2) {
                checked = now;
                if (worker_running(db) == 0) {
                    status_close();
                    fprintf(stderr, "deltafin: job %lld is queued and no worker serves %s: start one with `deltafin "
                            "worker` (or `deltafin serve --jobs --worker`); waiting\n", (long long)j.id, db);
                    said_idle = 1;
                    status_open(1);
                }
            }
        }
        const int end = !o->follow || terminal(j.state);
        if (end && o->follow) {
            char why[96];
            status_close();
            fprintf(stderr, "\njob %lld: %s, %d/%d tokens, %.2f tokens/s%s%s\n", (long long)j.id, j.state, j.n_done,
                    j.n_predict, tps_of(&j), *why_ended(&j, why, sizeof why) ? ": " : "", why);
            rc = strcmp(j.state, "done") ? 1 : 0;
        }
        jq_job_free(&j);
        if (end) break;
        usleep(200000);
    }
    jq_close(q);
    if (fflush(stdout) != 0 || ferror(stdout)) return fail("writing the output failed");
    return rc;
}

/* cancel ID, requeue ID: one state change, said on stderr. */
static int cmd_transition(jopts *o, int requeue) {
    if (!o->have_id) return usage_err(requeue ? "requeue needs an ID%s" : "cancel needs an ID%s", "");
    jq *q;
    if (open_db(o, &q)) return 1;
    char err[ERRLEN], prev[16];
    const int rc = requeue ? jq_requeue(q, o->id, prev, sizeof prev, err, sizeof err)
                           : jq_cancel(q, o->id, prev, sizeof prev, err, sizeof err);
    if (rc == 0 && requeue && (!strcmp(prev, "failed") || !strcmp(prev, "canceled") || !strcmp(prev, "expired"))) {
        char text[64];
        snprintf(text, sizeof text, "back in the queue (was %s)", prev);
        jq_event(q, o->id, "requeued", text, err, sizeof err);
    }
    jq_close(q);
    if (rc != 0) return fail(err);
    if (!*prev) {
        fprintf(stderr, "deltafin: no job %lld\n", (long long)o->id);
        return 1;
    }
    if (!requeue && terminal(prev)) {
        fprintf(stderr, "deltafin: job %lld already ended (%s)\n", (long long)o->id, prev);
        return 1;
    }
    if (requeue && !terminal(prev)) {
        fprintf(stderr, "deltafin: job %lld is %s: nothing to requeue\n", (long long)o->id, prev);
        return 1;
    }
    if (requeue && !strcmp(prev, "done")) {
        fprintf(stderr, "deltafin: job %lld is done: nothing to requeue\n", (long long)o->id);
        return 1;
    }
    fprintf(stderr, "job %lld %s (was %s)\n", (long long)o->id, requeue ? "queued again" : "canceled", prev);
    return 0;
}

/* ---- worker ---- */

static volatile sig_atomic_t g_stop;
static void on_stop(int sig) { g_stop = sig; }

static int cmd_worker(jopts *o) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESETHAND; /* a second signal ends it at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    jq *q;
    if (open_db(o, &q)) return 1;
    char path[PATH_MAX];
    if (db_path(o, path, sizeof path)) return 1;
    const int mark = worker_mark(path); /* `job --follow` sees that a worker serves this queue */
    jw_opts w = {.commit_every = o->commit_every, .drain = o->drain, .poll = 1.0, .log = stderr,
                 .ckpt_ratio = o->ckpt_ratio, .db_path = path, .max_restarts = o->max_restarts,
                 .pressure_every = 0.25, .monitor_every = o->monitor_every, .disk_bps = o->disk_gbps * 1e9,
                 .mem_bps = o->mem_gbps * 1e9, .split_layers = o->split_layers};
    /* checkpoints: the folder "checkpoints" beside the database (0700, not a symlink) */
    char dir[PATH_MAX + 16];
    if (!o->no_ckpt) {
        char folder[PATH_MAX];
        snprintf(folder, sizeof folder, "%s", path);
        char *slash = strrchr(folder, '/');
        if (slash) *slash = 0;
        snprintf(dir, sizeof dir, "%s/checkpoints", slash ? (*folder ? folder : "/") : ".");
        struct stat st;
        if (mkdir(dir, 0700) != 0 && errno != EEXIST) fprintf(stderr, "deltafin: %s: %s: no checkpoints\n", dir, strerror(errno));
        else if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) fprintf(stderr, "deltafin: %s is not a folder (a symbolic link?): no checkpoints\n", dir);
        else w.ckpt_dir = dir;
    }
    char err[ERRLEN];
    if (jr_global_init(err, sizeof err) != 0) {
        jq_close(q);
        return fail(err);
    }
    const int rc = jw_run(q, &w, &g_stop, err, sizeof err);
    jq_close(q);
    if (mark >= 0) close(mark);
    if (rc != 0) return fail(err);
    return g_stop ? 128 + g_stop : 0;
}

int jobs_main(int argc, char **argv) {
    const char *cmd = argv[1];
    jopts o;
    int rc = parse_args(cmd, &o, argc, argv);
    if (rc < 0) rc = 0; /* --help */
    else if (rc == 0) {
        const int needs_id = !strcmp(cmd, "job") || !strcmp(cmd, "cancel") || !strcmp(cmd, "requeue");
        if (o.have_id && !needs_id) rc = usage_err("%s takes no job ID", cmd);
        else if (!strcmp(cmd, "submit")) rc = cmd_submit(&o);
        else if (!strcmp(cmd, "jobs")) rc = cmd_list(&o);
        else if (!strcmp(cmd, "job")) rc = cmd_show(&o);
        else if (!strcmp(cmd, "cancel")) rc = cmd_transition(&o, 0);
        else if (!strcmp(cmd, "requeue")) rc = cmd_transition(&o, 1);
        else rc = cmd_worker(&o);
    }
    jq_job_free(&o.job);
    if (fflush(stdout) != 0 || ferror(stdout)) rc = fail("writing the output failed");
    return rc;
}
