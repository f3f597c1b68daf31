/*
 * main.c - the deltafin program: the command-line interface.
 *
 *   deltafin run | plan | info | tokenize | logits | bench | models   (here)
 *   deltafin serve | chat (server/), submit | jobs | job | cancel | requeue | worker (jobs/),
 *            pull (hub/), config (config.c): main hands them over
 *
 * Every command's options are one table's (opts.c: their spelling, which
 * follows llama.cpp's, their checks and the help); this file stores them.
 * Long options also take --flag=value.
 * Text goes to stdout; statistics and errors to stderr. Exit status: 0 ok,
 * 1 runtime error (including output that could not be written), 2 usage
 * error, 128 + signal number when SIGINT or SIGTERM ended a run (which still
 * reports and saves the learned hot set).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h" /* the config file's defaults, put before the user's flags; `deltafin config` */
#include "deltafin.h"
#include "opts.h"   /* the options of every command */

/* jobs/cmd_jobs.c: submit, jobs, job, cancel, worker */
int jobs_is_command(const char *cmd);
int jobs_main(int argc, char **argv);

/* jobs/job_json.c: a JSON string, bytes that are not UTF-8 as U+FFFD */
void jq_json_str(FILE *f, const char *s, size_t n);


/* hub/hub.c: `deltafin pull`, and -hf ORG/REPO[:QUANT] made -m PATH on every command */
int hub_pull(const char *name, const char *file, const char *rev, int quiet);
int hub_apply(int *argc, char ***argv);

/* server/: `deltafin serve` and `deltafin chat` */
int df_cmd_serve(int argc, char **argv);
int df_cmd_chat(int argc, char **argv);

/* Room for a message that names a path of PATH_MAX bytes and still says why. */
#define ERRLEN 8192

typedef struct {
    const char *model, *prompt, *prompt_file, *tokens, *out, *trace, *hot, *resident_type, *batch_file;
    const char *prompt_cache, *draft; /* run: --prompt-cache FILE, -md DRAFT.gguf */
    const char *ties;                 /* --trace-ties FILE: the choices within tie_margin (df_session_trace_ties) */
    float tie_margin;
    const char *grammar, *json_schema; /* run: --grammar GBNF / --grammar-file FILE, --json-schema / --json-schema-file */
    int spec, draft_max, spec_k;      /* run: enum df_spec_source (-1: draft if -md, else off), k_max, k_fixed */
    int spec_tuned;                   /* --draft-max or --spec-k given */
    size_t prompt_len;      /* the prompt's bytes (a file's prompt may hold NUL bytes) */
    char *prompt_buf;       /* owned: a prompt read with -f */
    uint64_t mem;
    int io_threads, io_engine, progress;
    int page_cache;                   /* --page-cache: df_model_params.page_cache */
    int split_layers;                 /* --split layers: df_model_params.split_layers */
    double probe_secs;
    double disk_gbps, mem_gbps; /* plan: a machine's speeds instead of measuring this one's (GB/s, 1e9 bytes) */
    int ranks, one_machine;     /* plan --ranks N: N machines sharing the experts (--one-machine: N ranks on one: one disk, one memory) */
    double net_gbps, net_latency_us; /* ... joined by this network (Gbit/s, 1e9 bits; microseconds per message) */
    double spec_accept;         /* plan: the acceptance rate speculation is predicted at */
    int n_predict, threads, ctx, batch, top, pieces, no_bos, no_mmap, ignore_eos, kv_f32, json, n_prompt, reps;
    int parallel;           /* run --batch-file: sequences decoded at once */
    int seed_set;           /* --seed given (bench: the tokens' seed, else 42) */
    df_sampler_params sp;
} opts;

static void usage(FILE *f, int status) {
    cli_usage(f);
    exit(status);
}

/* CMD --help: its usage and options (cli/opts.c), exit 0. */
static void command_usage(const char *cmd) {
    cli_command_help(stdout, cmd);
    exit(0);
}

static void fail(const char *msg) {
    fprintf(stderr, "deltafin: %s\n", msg);
    exit(1);
}

static void usage_error(const char *fmt, const char *a, const char *b) {
    fputs("deltafin: ", stderr);
    fprintf(stderr, fmt, a, b);
    fputs(" (deltafin --help lists the options)\n", stderr);
    exit(2);
}

static long parse_long(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "deltafin: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, v);
        exit(2);
    }
    return x;
}

static volatile sig_atomic_t g_signal; /* SIGINT or SIGTERM received: finish the run cleanly */

/* The whole of a file (or stdin for "-"), which may hold any byte: df_read_input (a FIFO or device refused, a
 * signal while standard input is idle ends the command with 128 + its number). */
static char *read_all(const char *path, size_t max, size_t *len) {
    char err[ERRLEN];
    char *buf = df_read_input(path, max, 0, len, &g_signal, err, sizeof err);
    if (buf) return buf;
    if (g_signal) exit(128 + g_signal);
    fprintf(stderr, "deltafin: %s%s\n", err,
            strstr(err, "larger than") && max < ((size_t)1 << 30) ? " (a prompt may take a quarter of --mem)" : "");
    exit(1);
}

/* -m NAME: a path, or a model of the stores df_model_resolve knows (hf:, ollama:, ...), into path (which
 * lives as long as the process). Exits 1 when there is none. */
static const char *resolve_model(const char *name, char *path, size_t cap) {
    char err[1024];
    if (df_model_resolve(name, path, cap, err, sizeof err) != DF_OK) {
        fprintf(stderr, "deltafin: %s\n", err);
        exit(1);
    }
    return path;
}

static void json_str(FILE *f, const char *s) { jq_json_str(f, s, strlen(s)); }

/* The model at path described (*d, NULL when it is not GGUF: err says why) and, where this build runs it, a
 * planner of it (*pl; else NULL, and why says why not). The planner checks architecture, hyperparameters and
 * every tensor, reading no weights, and plans it under default parameters; where it runs, the description is
 * made from the planner's reading, so the file is read once. 0, or -1 when there is no description. */
static int describe_model(const char *path, const df_model_params *mp, df_model_desc **d, df_planner **pl, char *why,
                          size_t n, char *err, size_t errlen) {
    why[0] = 0;
    if (df_planner_open(path, mp, pl, why, n) == 0) {
        df_model_params dp = df_model_default_params();
        df_plan p;
        dp.mtp = mp->mtp;
        if (df_planner_plan(*pl, &dp, &p, why, n) != 0 && !why[0]) snprintf(why, n, "it cannot be planned");
    }
    if (!why[0] && !*pl) snprintf(why, n, "it cannot be read");
    return *pl ? df_planner_describe(*pl, d, err, errlen) : df_model_describe(path, d, err, errlen);
}

/* deltafin pull ORG/REPO[:QUANT] [--file PATH] [--revision REV] [--quiet]: hub/hub.c downloads. */
static int cmd_pull(int argc, char **argv) {
    const char *name = NULL, *file = NULL, *rev = "main";
    int quiet = 0;
    cli_val o;
    for (int rc, i = 2; (rc = cli_next("pull", argc, argv, &i, &o)) != CLI_END;) {
        if (rc == CLI_ERROR) return 2;
        if (rc == CLI_ARG && name) usage_error("pull takes one ORG/REPO[:QUANT]: '%s' is a second%s", o.s, "");
        if (rc == CLI_ARG) name = o.s;
        else if (cli_is(&o, "--help")) command_usage("pull");
        else if (cli_is(&o, "--file")) file = o.s;
        else if (cli_is(&o, "--revision")) rev = o.s;
        else if (cli_is(&o, "--quiet")) quiet = 1;
        else usage_error("%s: an option of %s this parser forgot", o.opt->name, "pull");
    }
    if (!name) usage_error("pull needs a model: ORG/REPO[:QUANT]%s%s", "", "");
    return hub_pull(name, file, rev, quiet);
}

/* deltafin models [--json]: the models df_models_find finds, and whether this build runs each (its plan, which
 * checks architecture, hyperparameters and every tensor without reading weights). */
static int cmd_models(int argc, char **argv) {
    int json = 0;
    cli_val o;
    for (int rc, i = 2; (rc = cli_next("models", argc, argv, &i, &o)) != CLI_END;) {
        if (rc == CLI_ERROR) return 2;
        if (rc == CLI_ARG) usage_error("unexpected argument '%s'%s", o.s, "");
        if (cli_is(&o, "--help")) command_usage("models");
        json = 1; /* --json, its only option */
    }
    df_found_model *v = NULL;
    int n = 0;
    char err[1024];
    if (df_models_find(&v, &n, err, sizeof err) != DF_OK) {
        fprintf(stderr, "deltafin: %s\n", err);
        return 1;
    }
    if (!json) printf("%-60s %10s  %-14s %s\n", "NAME", "SIZE", "ARCH", "RUNS");
    for (int i = 0; i < n; i++) {
        df_model_desc *d = NULL;
        df_planner *pl = NULL;
        const df_model_params mp = df_model_default_params();
        char arch[64] = "?", sz[32], why[1024] = "", derr[1024] = "";
        if (describe_model(v[i].path, &mp, &d, &pl, why, sizeof why, derr, sizeof derr) == 0) {
            snprintf(arch, sizeof arch, "%s", d->arch ? d->arch : "?");
            df_model_desc_free(d);
        } else if (derr[0]) {
            snprintf(why, sizeof why, "%s", derr);
        }
        df_planner_free(pl);
        const int runs = !why[0];
        df_fmt_bytes(v[i].size, sz, sizeof sz);
        if (json) {
            printf("{\"name\":");
            json_str(stdout, v[i].name);
            printf(",\"store\":\"%s\",\"path\":", v[i].store);
            json_str(stdout, v[i].path);
            printf(",\"bytes\":%llu,\"arch\":", (unsigned long long)v[i].size);
            json_str(stdout, arch);
            printf(",\"runs\":%s,\"why\":", runs ? "true" : "false");
            json_str(stdout, runs ? "" : why);
            printf("}\n");
        } else {
            printf("%-60s %10s  %-14s %s\n", v[i].name, sz, arch, runs ? "yes" : "no");
        }
    }
    if (!json && n == 0)
        printf("(none found: the Hugging Face cache, ~/.cache/llama.cpp, ~/.lmstudio/models and ~/.ollama/models "
               "hold no GGUF model)\n");
    free(v);
    return 0;
}

/* One option of cmd's (read and checked by cli_next: cli/opts.c), stored. */
static void store(const char *cmd, opts *o, const cli_val *v) {
    const char *s = v->s;
    const int n = (int)v->n;
    const float x = (float)v->x;
    if (cli_is(v, "--help")) command_usage(cmd);
    else if (cli_is(v, "--pieces")) o->pieces = 1;
    else if (cli_is(v, "--no-bos")) o->no_bos = 1;
    else if (cli_is(v, "--no-mmap")) o->no_mmap = 1;
    else if (cli_is(v, "--mmap")) o->no_mmap = -1;
    else if (cli_is(v, "--ignore-eos")) o->ignore_eos = 1;
    else if (cli_is(v, "--json")) o->json = 1;
    else if (cli_is(v, "--progress")) o->progress = 1;
    else if (cli_is(v, "--page-cache")) o->page_cache = 1;
    else if (cli_is(v, "--one-machine")) o->one_machine = 1;
    else if (cli_is(v, "--model")) o->model = s;
    else if (cli_is(v, "--prompt")) o->prompt = s;
    else if (cli_is(v, "--file")) o->prompt_file = s;
    else if (cli_is(v, "--tokens")) o->tokens = s;
    else if (cli_is(v, "--batch-file")) o->batch_file = s;
    else if (cli_is(v, "--parallel")) o->parallel = n;
    else if (cli_is(v, "--out")) o->out = s;
    else if (cli_is(v, "--trace-experts")) o->trace = s;
    else if (cli_is(v, "--trace-ties")) o->ties = s;
    else if (cli_is(v, "--tie-margin")) o->tie_margin = x;
    else if (cli_is(v, "--hot")) o->hot = s;
    else if (cli_is(v, "--resident-type")) o->resident_type = s;
    else if (cli_is(v, "--prompt-cache")) o->prompt_cache = s;
    else if (cli_is(v, "--model-draft")) o->draft = s;
    else if (cli_is(v, "--spec"))
        o->spec = !strcmp(s, "off") ? DF_SPEC_NONE : !strcmp(s, "lookup") ? DF_SPEC_LOOKUP
                  : !strcmp(s, "draft") ? DF_SPEC_DRAFT : DF_SPEC_MTP;
    else if (cli_is(v, "--draft-max")) o->draft_max = n, o->spec_tuned = 1;
    else if (cli_is(v, "--spec-k")) o->spec_k = !strcmp(s, "auto") ? -1 : (int)parse_long("--spec-k", s, 0, 64), o->spec_tuned = 1;
    else if (cli_is(v, "--io-threads")) o->io_threads = n;
    else if (cli_is(v, "--io")) o->io_engine = !strcmp(s, "pread") ? DF_IO_PREAD : !strcmp(s, "auto") ? DF_IO_AUTO : DF_IO_URING;
    else if (cli_is(v, "--mem")) o->mem = v->size;
    else if (cli_is(v, "--n-predict")) o->n_predict = n < 0 ? 1 << 24 : n; /* -1: until the context ends (llama.cpp's) */
    else if (cli_is(v, "--n-prompt")) o->n_prompt = n;
    else if (cli_is(v, "--threads")) {
        o->threads = n;
        const long cores = sysconf(_SC_NPROCESSORS_ONLN);
        if (cores > 0 && o->threads > cores)
            fprintf(stderr, "deltafin: warning: -t %d is more than this machine's %ld cores: the threads would wait "
                    "on each other (slower than -t %ld)\n", o->threads, cores, cores);
    }
    else if (cli_is(v, "--ctx-size")) o->ctx = n;
    else if (cli_is(v, "--repetitions")) o->reps = n;
    else if (cli_is(v, "--top")) o->top = n;
    else if (cli_is(v, "--temp")) o->sp.temp = x;
    else if (cli_is(v, "--probe-seconds")) o->probe_secs = v->x;
    else if (cli_is(v, "--disk-gbps")) o->disk_gbps = v->x;
    else if (cli_is(v, "--mem-gbps")) o->mem_gbps = v->x;
    else if (cli_is(v, "--ranks")) o->ranks = n;
    else if (cli_is(v, "--split")) o->split_layers = !strcmp(s, "layers");
    else if (cli_is(v, "--net-gbps")) o->net_gbps = v->x;
    else if (cli_is(v, "--net-latency-us")) o->net_latency_us = v->x;
    else if (cli_is(v, "--spec-accept")) o->spec_accept = v->x;
    else if (cli_is(v, "--top-k")) o->sp.top_k = n;
    else if (cli_is(v, "--grammar")) o->grammar = s;
    else if (cli_is(v, "--grammar-file")) o->grammar = read_all(s, 1 << 22, NULL);
    else if (cli_is(v, "--json-schema")) o->json_schema = s;
    else if (cli_is(v, "--json-schema-file")) o->json_schema = read_all(s, 1 << 22, NULL);
    else if (cli_is(v, "--top-p")) o->sp.top_p = x;
    else if (cli_is(v, "--min-p")) o->sp.min_p = x;
    else if (cli_is(v, "--repeat-penalty")) o->sp.repeat_penalty = x;
    else if (cli_is(v, "--repeat-last-n")) o->sp.repeat_last_n = n;
    else if (cli_is(v, "--seed")) o->sp.seed = (uint64_t)n, o->seed_set = 1;
    else if (cli_is(v, "--kv")) o->kv_f32 = !strcmp(s, "f32");
    else usage_error("%s: an option of %s this parser forgot", v->opt->name, cmd); /* a table entry not stored */
}

static void parse(const char *cmd, int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
    o->n_prompt = 512;
    o->probe_secs = 5.0;
    o->top = 5;
    o->sp = df_sampler_default_params();
    o->spec = -1;
    o->draft_max = 4;
    o->spec_accept = 0.7;
    o->ranks = 1;
    o->net_gbps = 10;
    o->net_latency_us = 50;
    o->spec_k = -1;
    o->tie_margin = 1e-6f;
    cli_val v;
    int rc, i = 2;
    while ((rc = cli_next(cmd, argc, argv, &i, &v)) != CLI_END) {
        if (rc == CLI_ERROR) exit(2);
        if (rc == CLI_ARG) usage_error("unexpected argument '%s'%s", v.s, "");
        store(cmd, o, &v);
    }
    if (!o->model) {
        fprintf(stderr, "deltafin: -m MODEL is required\n");
        exit(2);
    }
    const uint64_t room = o->mem ? df_memory_room() : 0;
    if (room && o->mem > room) {
        char a[32], b[32];
        fprintf(stderr, "deltafin: warning: --mem %s is more than the %s this machine can give now: a plan for it "
                "holds, a run of it would swap or be killed\n", df_fmt_bytes(o->mem, a, sizeof a),
                df_fmt_bytes(room, b, sizeof b));
    }
    static char model_path[4096], draft_path[4096];
    o->model = resolve_model(o->model, model_path, sizeof model_path);
    if (o->draft) o->draft = resolve_model(o->draft, draft_path, sizeof draft_path);
    if (o->spec < 0) o->spec = o->draft ? DF_SPEC_DRAFT : DF_SPEC_NONE;
    if (o->spec == DF_SPEC_DRAFT && !o->draft) usage_error("--spec draft needs a draft model: -md DRAFT.gguf%s%s", "", "");
    if (o->spec != DF_SPEC_DRAFT && o->draft) usage_error("-md is for --spec draft%s%s", "", "");
    if (o->spec_k > o->draft_max) usage_error("--spec-k is at most --draft-max%s%s", "", "");
    if (o->prompt && o->prompt_file) usage_error("give the prompt once: -p TEXT or -f FILE%s%s", "", "");
    if (o->batch_file && (o->prompt_cache || o->spec != DF_SPEC_NONE))
        usage_error("--prompt-cache, --spec and -md are for one prompt, not --batch-file%s%s", "", "");
    if (o->batch_file && (o->prompt || o->prompt_file))
        usage_error("--batch-file holds the prompts: no -p or -f beside it%s%s", "", "");
    /* the prompt's text is memory too: under a budget, at most a quarter of it */
    size_t max = (size_t)1 << 30;
    if (o->mem && o->mem / 4 < max) max = (size_t)(o->mem / 4) < ((size_t)1 << 16) ? (size_t)1 << 16 : (size_t)(o->mem / 4);
    if (o->prompt_file) o->prompt = o->prompt_buf = read_all(o->prompt_file, max, &o->prompt_len);
    else if (o->batch_file) o->prompt_buf = read_all(o->batch_file, max, &o->prompt_len);
    else if (o->prompt) o->prompt_len = strlen(o->prompt); /* -f's length counts its NUL bytes */
}

/* A run's prompt is required: say so (not just the usage). */
static void need_prompt(const opts *o, const char *cmd) {
    if (!o->prompt) usage_error("%s needs a prompt: -p TEXT, -f FILE or -f - (stdin)%s", cmd, "");
}

/* cli/status.c: run --progress's status line, kept apart from the text (also job --follow's) */
void status_open(int enabled);
void status_text(const char *p, size_t n);
void status_show(const char *what, int done, int total, double rate, int force);
void status_close(void);
void status_signal(void);

/* ---- signals ---- */

/* The first SIGINT/SIGTERM ends the command cleanly; a second one at once (the status line's scroll region reset
 * first). */
static void on_stop(int sig) {
    if (g_signal) {
        status_signal();
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_signal = sig;
}

/* A mapped model file truncated under a running model: the kernel can only
 * kill the access with SIGBUS. Say what happened (async-signal-safe) and exit. */
static void on_sigbus(int sig) {
    static const char msg[] = "\ndeltafin: the model file was truncated or changed while it was mapped (SIGBUS); "
                              "stopping\n";
    (void)sig;
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

/* SIGBUS for every command; SIGINT and SIGTERM only where a run stops
 * cleanly on them (run), elsewhere they end the process as usual. */
static void install_signals(int stop_cleanly) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_sigbus;
    sigaction(SIGBUS, &sa, NULL);
    if (!stop_cleanly) return;
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESTART; /* a second signal acts at once (on_stop) */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* Text that could not be written is an error, not a silent loss. */
static void check_stdout(void) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "deltafin: writing the output failed: %s\n", strerror(errno ? errno : EIO));
        exit(1);
    }
}

/* --spec: the guesses a pass may verify, for which a model with recurrent
 * layers keeps rollback room in its sessions (0 without speculation). */
static int spec_rows(const opts *o) { return o->spec > DF_SPEC_NONE ? o->draft_max : 0; }

static df_model_params model_params(const opts *o) {
    df_model_params mp = df_model_default_params();
    mp.n_threads = o->threads;
    mp.use_mmap = o->no_mmap > 0 ? 0 : o->no_mmap < 0 ? 1 : -1; /* default: resident if small, else mapped */
    mp.mem_budget = o->mem;
    mp.n_ctx = o->ctx;
    mp.n_batch = o->batch;
    mp.n_sessions = o->parallel;
    mp.kv_type = o->kv_f32 ? DF_KV_F32 : DF_KV_F16;
    mp.io_threads = o->io_threads;
    mp.io_engine = o->io_engine;
    mp.page_cache = o->page_cache;
    mp.split_layers = o->split_layers;
    mp.hot_file = o->hot && !strcmp(o->hot, "none") ? "" : o->hot;
    mp.resident_type = o->resident_type;
    mp.spec_k_max = spec_rows(o);
    mp.mtp = o->spec == DF_SPEC_MTP; /* the NextN block is read (and planned under --mem) only for it */
    return mp;
}

/* What a session keeps per layer, on one line: "a session of 4096 positions
 * keeps KV cache (24 layers) 96.0 MiB, ...". */
static void print_mem_list(FILE *f, const df_plan *p) {
    char b[32];
    fprintf(f, "a session of %d positions keeps", p->n_ctx);
    for (int i = 0; i < p->n_mem; i++)
        fprintf(f, "%s %s (%d of %d layers) %s", i ? "," : "", p->mem[i].name, p->mem[i].n_layers, p->n_layer,
                df_fmt_bytes(p->mem[i].bytes, b, sizeof b));
    fprintf(f, "\n");
}

static void print_plan(const df_plan *p, int n_sessions, FILE *f) {
    const double M = 1 << 20;
    char b[4][32];
    fprintf(f, "plan: budget %s: weights in memory %s, KV cache and scratch %s, overhead %s\n",
            df_fmt_bytes(p->budget, b[0], 32), df_fmt_bytes(p->resident_bytes, b[1], 32),
            df_fmt_bytes(p->session_bytes, b[2], 32), df_fmt_bytes(p->overhead_bytes, b[3], 32));
    if (n_sessions > 1) /* each session's own memory; the scratch is one for all (one decode at a time) */
        fprintf(f, "plan: %d sessions: %s each (KV cache, state, logits) and %s of scratch they share\n", n_sessions,
                df_fmt_bytes(p->session_bytes - p->scratch_bytes, b[0], 32), df_fmt_bytes(p->scratch_bytes, b[1], 32));
    if (p->n_experts_total && p->budget >= p->minimum)
        fprintf(f, "plan: expert cache %d slots of %.2f MiB = %s (%.1f%% of %d routed experts)\n",
                p->n_expert_slots, p->expert_slot_bytes / M,
                df_fmt_bytes((uint64_t)p->n_expert_slots * p->expert_slot_bytes, b[0], 32),
                100.0 * p->n_expert_slots / p->n_experts_total, p->n_experts_total);
    if (p->budget < p->minimum)
        ; /* nothing is placed: the verdict says so */
    else if (p->n_dense_streamed)
        fprintf(f, "plan: %d of %d layers stream their dense weights through two %.1f MiB buffers\n",
                p->n_dense_streamed, p->n_layer, p->dense_slot_bytes / M);
    else
        fprintf(f, "plan: all dense weights (embeddings, attention, norms, routers, shared experts) stay in memory\n");
    if (p->n_swa_layers)
        fprintf(f, "plan: %d of %d layers attend over a sliding window of %d: their KV cache keeps %s\n",
                p->n_swa_layers, p->n_layer, p->swa_window,
                p->swa_ring ? (snprintf(b[0], 32, "a ring of %d positions", p->swa_ring), b[0]) : "the whole context");
    fprintf(f, "plan: ");
    print_mem_list(f, p);
    fprintf(f, "plan: minimum budget for this model and context: %s\n", df_fmt_bytes(p->minimum, b[0], 32));
}

/* A context beyond the trained one works, but the model was never trained there. */
static void warn_ctx(int ctx, int n_ctx_train) {
    if (ctx > n_ctx_train && n_ctx_train > 0)
        fprintf(stderr, "deltafin: warning: -c %d is beyond the model's trained context of %d tokens; "
                "quality may suffer\n", ctx, n_ctx_train);
}

/* df_model_params.plan_cb: the plan a load goes by, on stderr (ctx: the sessions it plans) */
static void on_plan(const df_plan *plan, void *ctx) { print_plan(plan, *(const int *)ctx, stderr); }

static df_model *load(const opts *o, double *secs) {
    char err[ERRLEN];
    df_model_params mp = model_params(o);
    df_model *m;
    double t0 = df_time();
    if (o->mem && df_cluster_size() > 1) { /* the load plans each rank: say what one process would hold */
        df_plan plan;
        if (df_model_plan(o->model, &mp, &plan, err, sizeof err) != 0) fail(err);
        print_plan(&plan, mp.n_sessions, stderr);
    }
    mp.plan_cb = on_plan; /* alone: the load's own plan, printed before the weights are read */
    mp.plan_ctx = &mp.n_sessions;
    if (df_model_load(o->model, &mp, &m, err, sizeof err) != 0) fail(err);
    if (secs) *secs = df_time() - t0;
    df_model_info info;
    df_model_get_info(m, &info);
    warn_ctx(o->ctx, info.n_ctx_train);
    df_io_stats st;
    df_model_io_stats(m, &st);
    if (*st.hot_note) fprintf(stderr, "deltafin: warning: %s\n", st.hot_note);
    return m;
}

/* The tokenizer alone (no weights): tokenize, and counting a prompt's tokens. */
static df_model *load_vocab(const opts *o) {
    char err[ERRLEN];
    df_model_params mp = df_model_default_params();
    mp.vocab_only = 1;
    df_model *m;
    if (df_model_load(o->model, &mp, &m, err, sizeof err) != 0) fail(err);
    return m;
}

/* Save the learned hot set; 1 if that failed (said on stderr). */
static int save_hot(df_model *m) {
    char err[ERRLEN];
    if (df_model_save_hot(m, err, sizeof err) == 0) return 0;
    fprintf(stderr, "deltafin: %s\n", err);
    return 1;
}

/* A model shared over a cluster (docs/cluster.md): what each rank read and held, and the network. */
static void print_cluster_report(df_model *m, int tokens) {
    df_rank_stats rs[64];
    int n = 0;
    char err[ERRLEN];
    if (df_cluster_size() < 2) return;
    if (df_cluster_stats(m, rs, 64, &n, err, sizeof err) != DF_OK) {
        fprintf(stderr, "cluster: %s\n", err);
        return;
    }
    if (n < 2) return;
    const double M = 1 << 20, t = tokens > 0 ? tokens : 1;
    for (int r = 0; r < n && r < 64; r++) {
        const uint64_t looks = rs[r].hits + rs[r].misses;
        char stage[48] = "";
        if (rs[r].layer_lo > 0 || rs[r].layer_hi < rs[n - 1].layer_hi) /* a pipeline's */
            snprintf(stage, sizeof stage, "layers %d-%d, ", rs[r].layer_lo, rs[r].layer_hi - 1);
        fprintf(stderr, "cluster: rank %d: %s%llu experts, %d cache slots, %.1f MiB read (%.2f MiB per token), hit rate "
                "%.1f%%, waiting for its disk %.2f s\n", r, stage, (unsigned long long)rs[r].experts_owned, rs[r].expert_slots,
                rs[r].bytes_read / M, rs[r].bytes_read / M / t, looks ? 100.0 * rs[r].hits / looks : 0.0,
                rs[r].wait_seconds);
    }
    fprintf(stderr, "cluster: network: rank 0 sent %.2f MiB and received %.2f MiB per token, %.1f messages per token\n",
            rs[0].net_sent / M / t, rs[0].net_received / M / t, rs[0].messages / t);
}

/* After a run with a budget: what the disk and the cache did. */
/* start: the counters when the prompt began (the disk's idle time counts from the load on) */
static void print_io_report(df_model *m, const df_io_stats *start, int tokens, double seconds, int page_cache) {
    df_io_stats st;
    df_model_io_stats(m, &st);
    if (!st.streaming) return;
    const double M = 1 << 20;
    const uint64_t looks = st.hits + st.misses;
    if (*st.io_note) fprintf(stderr, "io: %s; reading with %s\n", st.io_note, st.io_engine);
    fprintf(stderr, "io: engine %s, %d concurrent reads\n", st.io_engine, st.io_threads);
    fprintf(stderr, "io: %.1f MiB read %s, %.2f MiB per token, %.1f MiB/s over the run\n", st.bytes_read / M,
            page_cache ? "through the page cache (--page-cache: from disk, or from memory the kernel kept)" : "from disk",
            tokens ? st.bytes_read / M / tokens : 0.0, seconds > 0 ? st.bytes_read / M / seconds : 0.0);
    /* hits: no read for them; a guess read ahead saves the wait, not the read (df_io_stats) */
    fprintf(stderr, "io: expert cache hit rate %.1f%% (%llu of %llu), prefetched %llu, of which used %llu (%llu read "
            "before they were needed); %.1f MiB of experts packed in the cache\n",
            looks ? 100.0 * st.hits / looks : 0.0, (unsigned long long)st.hits, (unsigned long long)looks,
            (unsigned long long)st.prefetch_issued, (unsigned long long)st.prefetch_used,
            (unsigned long long)st.read_ahead, st.bytes_packed / M);
    const uint64_t wanted = st.prefetch_used + st.unguessed; /* experts that had to come from disk */
    fprintf(stderr, "io: lookahead precision %.0f%% (guesses used), recall %.0f%% (of the experts needed from disk, "
            "guessed ahead; %.0f%% in the layers it guessed for)\n",
            st.prefetch_issued ? 100.0 * st.prefetch_used / st.prefetch_issued : 0.0,
            wanted ? 100.0 * st.prefetch_used / wanted : 0.0,
            st.lookahead_wanted ? 100.0 * st.lookahead_got / st.lookahead_wanted : 0.0);
    const double idle = st.disk_idle_seconds - start->disk_idle_seconds;
    fprintf(stderr, "io: waiting for the disk %.2f s of %.2f s (%.0f%%), compute %.2f s; the disk idle %.2f s (%.0f%%: "
            "no read in flight)\n", st.wait_seconds, seconds, seconds > 0 ? 100.0 * st.wait_seconds / seconds : 0.0,
            seconds - st.wait_seconds, idle, seconds > 0 ? 100.0 * idle / seconds : 0.0);
    print_cluster_report(m, tokens);
}

/* `plan` reads the model once (df_planner) and plans it a dozen times (budgets, the resident type): plan_at
 * plans path under mp with it where it can, else as df_model_plan does. */
static df_planner *g_planner;
static const char *g_planner_path;

static int plan_at(const char *path, const df_model_params *mp, df_plan *p, char *err, size_t n) {
    if (g_planner && !strcmp(path, g_planner_path) && !mp->split_layers &&
        df_planner_plan(g_planner, mp, p, err, n) == 0)
        return 0;
    return df_model_plan(path, mp, p, err, n);
}

/* Where the model does not fit (or its dense layers stream), what
 * --resident-type q4_K would buy: the minimum and the layers that stream. */
static void suggest_requant(const opts *o, const df_model_params *mp, const df_plan *p) {
    if (o->resident_type && !strcmp(o->resident_type, "q4_K")) return;
    df_model_params q = *mp;
    q.resident_type = "q4_K";
    df_plan r;
    char err[ERRLEN], b[3][32];
    if (plan_at(o->model, &q, &r, err, sizeof err) != 0 || !r.requant_saved_bytes) return;
    printf("plan: with --resident-type q4_K (dense weights requantized at load, %s smaller; costs accuracy): minimum %s "
           "instead of %s; %s",
           df_fmt_bytes(r.requant_saved_bytes, b[0], 32), df_fmt_bytes(r.minimum, b[1], 32),
           df_fmt_bytes(p->minimum, b[2], 32), r.budget >= r.minimum ? "fits" : "still does NOT fit");
    if (r.budget >= r.minimum)
        printf(", %d of %d layers stream their dense weights (now %d)", r.n_dense_streamed, r.n_layer,
               p->n_dense_streamed);
    printf("\n");
}

/* The smallest budget under which the plan of the model at path (settings mp) keeps every weight in memory:
 * its resident part, session and overhead, every expert and every dense layer. */
static uint64_t all_in_memory(const char *path, const df_model_params *given) {
    char err[ERRLEN];
    df_model_params mp = *given;
    mp.mem_budget = (uint64_t)1 << 60;
    df_plan p;
    if (plan_at(path, &mp, &p, err, sizeof err) != 0) fail(err);
    uint64_t need = p.resident_bytes + p.session_bytes + p.overhead_bytes;
    if (need < p.minimum) need = p.minimum;
    for (int i = 0; i < 8; i++) {
        mp.mem_budget = need;
        if (plan_at(path, &mp, &p, err, sizeof err) != 0) fail(err);
        const uint64_t short_by = (uint64_t)(p.n_experts_total - p.n_expert_slots) * p.expert_slot_bytes +
                                  (uint64_t)p.n_dense_streamed * p.dense_layer_bytes +
                                  (p.minimum > need ? p.minimum - need : 0);
        if (!short_by) break;
        need += short_by;
    }
    return need;
}

/* The tokens/s of the model planned under budget b, at these speeds (0 when it does not fit). */
static double tps_at(const opts *o, const df_model_params *mp, uint64_t b, double disk, double mem) {
    char err[ERRLEN];
    df_model_params q = *mp;
    q.mem_budget = b;
    df_plan p;
    df_plan_speed sp;
    if (plan_at(o->model, &q, &p, err, sizeof err) != 0) return 0;
    df_plan_predict(&p, disk, mem, &sp);
    return sp.tokens_per_s;
}

/* tokens/s as a person reads them: 2.06e+03 is 2060, 0.0687 keeps its digits. */
static const char *tps_str(double t, char *b, size_t n) {
    snprintf(b, n, t >= 100 ? "%.0f" : t >= 10 ? "%.1f" : t >= 1 ? "%.2f" : "%.3g", t);
    return b;
}

/* The plan's first sentence: fits or not, the budget to give, the tokens/s to expect; then the predictions
 * for a few budgets from the same measurements (so they never fall as the budget grows). room: what this
 * machine can give now (0: unknown). */
static void plan_verdict(const opts *o, const df_model_params *mp, const df_plan *p, double tps, double disk,
                         double mem, uint64_t room) {
    char b[4][32], t0[32], t1[32];
    const uint64_t all = all_in_memory(o->model, mp);
    if (p->budget < p->minimum) {
        printf("plan: does NOT fit: %s is below the minimum of %s for this model and context; give --mem %s or "
               "more (everything in memory from %s)\n",
               df_fmt_bytes(p->budget, b[0], 32), df_fmt_bytes(p->minimum, b[1], 32),
               df_fmt_bytes(p->minimum, b[2], 32), df_fmt_bytes(all, b[3], 32));
    } else if (p->budget >= all) {
        printf("plan: fits: every weight stays in memory (%s of the %s budget); expect about %s tokens/s on this "
               "machine\n", df_fmt_bytes(all, b[0], 32), df_fmt_bytes(p->budget, b[1], 32), tps_str(tps, t0, 32));
    } else {
        const double full = tps_at(o, mp, all, disk, mem);
        printf("plan: fits, streaming from disk: expect about %s tokens/s on this machine; with --mem %s (every "
               "weight in memory%s) about %s\n",
               tps_str(tps, t0, 32), df_fmt_bytes(all, b[0], 32),
               room && all > room ? ", more than this machine can give now" : "", tps_str(full, t1, 32));
    }
    /* the ladder: the minimum, the budget, all in memory, and between */
    uint64_t at[8];
    int n = 0;
    const uint64_t lo = p->minimum, hi = all > p->budget ? all : p->budget;
    for (int i = 0; i <= 4 && hi > lo; i++) at[n++] = lo + (hi - lo) / 4 * (uint64_t)i;
    if (n < 2) return;
    at[n - 1] = hi;
    printf("plan: tokens/s by budget:");
    for (int i = 0; i < n; i++)
        printf(" %s %s%s", df_fmt_bytes(at[i], b[0], 32), tps_str(tps_at(o, mp, at[i], disk, mem), t0, 32),
               i + 1 < n ? ";" : "\n");
}

/* Speculation's predicted effect (df_plan_predict_spec): the best k in
 * 0..--draft-max at --spec-accept; tps[k] for each k. */
static int plan_spec(const opts *o, const df_plan *p, double disk, double mem, double *tps) {
    int best = 0;
    for (int k = 0; k <= o->draft_max; k++) {
        df_plan_speed s;
        df_plan_predict_spec(p, disk, mem, o->spec_accept, k, &s);
        tps[k] = s.tokens_per_s;
        if (tps[k] > tps[best] * 1.0001) best = k;
    }
    /* it pays when it gains 5%: the model counts bytes, not the drafting or the rejected rows' compute */
    return tps[best] >= 1.05 * tps[0] ? best : 0;
}

/* A cluster's tokens/s beside one machine's alone (0: it cannot run it), into buf[32]. */
static const char *vs_alone(double tps, double alone, char *buf) {
    if (alone > 0) snprintf(buf, 32, "%.2fx one machine's %.2f", tps / alone, alone);
    else snprintf(buf, 32, "one machine cannot run it");
    return buf;
}

/* plan --ranks N (docs/cluster.md): what each rank of N machines like this
 * one (or like --disk-gbps/--mem-gbps say) holds and reads, the network, and
 * the tokens/s; alone_tps: one machine's, for the ratio. 0, or 1 when a rank
 * does not fit. */
static int plan_ranks(const opts *o, const df_model_params *mp, double disk, double mem, double alone_tps, int json) {
    char err[ERRLEN], b[4][32];
    df_plan r0, rn;
    if (df_model_plan_rank(o->model, mp, o->ranks, 0, &r0, err, sizeof err) != 0 ||
        df_model_plan_rank(o->model, mp, o->ranks, 1, &rn, err, sizeof err) != 0)
        fail(err);
    df_cluster_speed cs;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN), per_rank = o->threads > 0 ? o->threads : cores;
    const int at_once = !o->one_machine ? 0 : cores > per_rank && per_rank > 0 ? (int)(cores / per_rank) : 1;
    df_plan_predict_ranks(&r0, &rn, disk, mem, o->net_gbps * 1e9 / 8, o->net_latency_us * 1e-6, at_once, &cs);
    const int fits = r0.budget >= r0.minimum && rn.budget >= rn.minimum;
    const double M = 1 << 20;
    if (json) {
        printf("\"ranks\":%d,\"rank0_minimum\":%llu,\"rank_minimum\":%llu,\"rank0_expert_slots\":%d,"
               "\"rank_expert_slots\":%d,\"rank0_experts\":%d,\"rank_experts\":%d,\"experts_all\":%d,"
               "\"rank0_disk_bytes_per_token\":%.0f,"
               "\"rank_disk_bytes_per_token\":%.0f,\"net_bytes_per_token\":%.0f,\"net_seconds_per_token\":%.6f,"
               "\"cluster_disk_seconds_per_token\":%.6f,\"cluster_memory_seconds_per_token\":%.6f,"
               "\"cluster_tokens_per_s\":%.4f", o->ranks, (unsigned long long)r0.minimum, (unsigned long long)rn.minimum,
               r0.n_expert_slots, rn.n_expert_slots, r0.n_experts_total, rn.n_experts_total, r0.n_experts_all,
               cs.rank0.disk_bytes_per_token,
               cs.other.disk_bytes_per_token, cs.net_bytes_per_token, cs.net_seconds, cs.disk_seconds,
               cs.memory_seconds, cs.tokens_per_s);
        return fits ? 0 : 1;
    }
    printf("cluster: %d ranks sharing the routed experts (expert parallel), each with --mem %s\n", o->ranks,
           df_fmt_bytes(o->mem, b[0], 32));
    printf("cluster: rank 0: the dense part and the sessions (%s), %d of the %d experts in %d cache slots (%.1f%%); "
           "minimum %s\n", df_fmt_bytes(r0.resident_bytes + r0.session_bytes, b[1], 32), r0.n_experts_total,
           r0.n_experts_all, r0.n_expert_slots,
           r0.n_experts_total ? 100.0 * r0.n_expert_slots / r0.n_experts_total : 0.0, df_fmt_bytes(r0.minimum, b[2], 32));
    const int others = r0.n_experts_all - r0.n_experts_total; /* the ranks' rooms differ by one a layer at most */
    printf("cluster: each other rank: %s%d experts in %d cache slots (%.1f%%), no context; minimum %s\n",
           others % (o->ranks - 1) ? "about " : "", (others + (o->ranks - 1) / 2) / (o->ranks - 1), rn.n_expert_slots, rn.n_experts_total ? 100.0 * rn.n_expert_slots / rn.n_experts_total : 0.0,
           df_fmt_bytes(rn.minimum, b[3], 32));
    if (!fits) {
        printf("cluster: does NOT fit: a rank's budget is below its minimum\n");
        return 1;
    }
    printf("cluster: per token: rank 0 reads %.2f MiB from disk, each other rank %.2f MiB%s; the network carries %.2f MiB "
           "in %d messages (%.1f Gbit/s, %.0f us each: %.3f s)\n", cs.rank0.disk_bytes_per_token / M,
           cs.other.disk_bytes_per_token / M, o->one_machine ? " (one disk for all)" : " (each from its own disk)",
           cs.net_bytes_per_token / M, 3 * r0.n_moe_layers, o->net_gbps, o->net_latency_us, cs.net_seconds);
    printf("predicted: %.2f tokens/s on %s%d%s (%s; disk %.3f s, memory %.3f s, network %.3f s per token)\n",
           cs.tokens_per_s, o->one_machine ? "this machine as " : "", o->ranks,
           o->one_machine ? " ranks" : " machines like this", vs_alone(cs.tokens_per_s, alone_tps, b[0]),
           cs.disk_seconds, cs.memory_seconds, cs.net_seconds);
    return 0;
}

/* plan --ranks N --split layers (docs/cluster.md): each stage's layers, what
 * it holds and reads, the hand-over, and the tokens/s of N machines like
 * this one (or as given) taking turns; alone_tps: one machine's. 0, or 1
 * when a stage does not fit. */
static int plan_stages(const opts *o, const df_model_params *mp, double disk, double mem, double alone_tps, int json) {
    char err[ERRLEN], b[4][32];
    const int R = o->ranks;
    df_plan *st = calloc((size_t)R, sizeof *st);
    df_plan_speed *each = calloc((size_t)R, sizeof *each);
    if (!st || !each) fail("out of memory");
    int fits = 1;
    for (int r = 0; r < R; r++) {
        if (df_model_plan_rank(o->model, mp, R, r, &st[r], err, sizeof err) != 0) fail(err);
        fits &= st[r].budget >= st[r].minimum;
    }
    df_cluster_speed cs;
    df_plan_predict_stages(st, R, disk, mem, o->net_gbps * 1e9 / 8, o->net_latency_us * 1e-6, each, &cs);
    const double M = 1 << 20;
    if (json) {
        printf("\"ranks\":%d,\"split\":\"layers\",\"net_bytes_per_token\":%.0f,\"net_seconds_per_token\":%.6f,"
               "\"cluster_disk_seconds_per_token\":%.6f,\"cluster_memory_seconds_per_token\":%.6f,"
               "\"cluster_tokens_per_s\":%.4f,\"stages\":[", R, cs.net_bytes_per_token, cs.net_seconds, cs.disk_seconds,
               cs.memory_seconds, cs.tokens_per_s);
        for (int r = 0; r < R; r++)
            printf("%s{\"rank\":%d,\"layer_lo\":%d,\"layer_hi\":%d,\"minimum\":%llu,\"resident_bytes\":%llu,"
                   "\"session_bytes\":%llu,\"expert_slots\":%d,\"experts\":%d,\"dense_layers_streamed\":%d,"
                   "\"disk_bytes_per_token\":%.0f,\"memory_bytes_per_token\":%.0f,\"seconds_per_token\":%.6f}",
                   r ? "," : "", r, st[r].layer_lo, st[r].layer_hi, (unsigned long long)st[r].minimum,
                   (unsigned long long)st[r].resident_bytes, (unsigned long long)st[r].session_bytes,
                   st[r].n_expert_slots, st[r].n_experts_total, st[r].n_dense_streamed, each[r].disk_bytes_per_token,
                   each[r].memory_bytes_per_token, each[r].disk_seconds + each[r].memory_seconds);
        printf("]");
        free(st);
        free(each);
        return fits ? 0 : 1;
    }
    printf("cluster: %d ranks, each a range of layers (pipeline parallel), each with --mem %s\n", R,
           df_fmt_bytes(o->mem, b[0], 32));
    for (int r = 0; r < R; r++) {
        const df_plan *p = &st[r];
        printf("cluster: rank %d: layers %d-%d (%d of %d)%s: %s resident, %d of its %d experts in cache slots, its "
               "layers' memory of a session %s; minimum %s%s\n", r, p->layer_lo, p->layer_hi - 1,
               p->layer_hi - p->layer_lo, st[R - 1].layer_hi,
               r == 0 ? " and the embeddings and the output" : "", df_fmt_bytes(p->resident_bytes, b[1], 32),
               p->n_expert_slots, p->n_experts_total, df_fmt_bytes(p->session_bytes - p->scratch_bytes, b[2], 32),
               df_fmt_bytes(p->minimum, b[3], 32), p->budget >= p->minimum ? "" : ": does NOT fit");
    }
    if (!fits) {
        printf("cluster: does NOT fit: a rank's budget is below its minimum\n");
        free(st);
        free(each);
        return 1;
    }
    printf("cluster: per token: the ranks read");
    for (int r = 0; r < R; r++) printf(" %.2f%s", each[r].disk_bytes_per_token / M, r + 1 < R ? "," : " MiB from disk");
    printf(" (each from its own disk); the network carries %.3f MiB in %d messages (%.1f Gbit/s, %.0f us each: "
           "%.4f s)\n", cs.net_bytes_per_token / M, R + 2, o->net_gbps, o->net_latency_us, cs.net_seconds);
    printf("predicted: %.2f tokens/s on %s%d%s (%s; disk %.3f s, memory %.3f s, network %.4f s per token: the "
           "stages take turns, so they pool memory and disks, not compute)\n", cs.tokens_per_s,
           o->one_machine ? "this machine as " : "", R, o->one_machine ? " ranks" : " machines like this",
           vs_alone(cs.tokens_per_s, alone_tps, b[0]), cs.disk_seconds, cs.memory_seconds, cs.net_seconds);
    free(st);
    free(each);
    return 0;
}

static int cmd_plan(const opts *given) {
    opts with_mem = *given;
    const opts *o = &with_mem;
    if (!with_mem.mem) { /* no --mem: what this machine can give now */
        char b[32];
        if (!(with_mem.mem = df_memory_room())) {
            fprintf(stderr, "deltafin: plan needs --mem SIZE (this machine's free memory cannot be read)\n");
            exit(2);
        }
        fprintf(stderr, "deltafin: no --mem: planning for the %s this machine can give now\n",
                df_fmt_bytes(with_mem.mem, b, sizeof b));
    }
    char err[ERRLEN];
    df_model_params mp = model_params(o);
    df_plan p;
    if (df_planner_open(o->model, &mp, &g_planner, err, sizeof err) != 0) fail(err); /* read and checked once */
    g_planner_path = o->model;
    if (plan_at(o->model, &mp, &p, err, sizeof err) != 0) fail(err);
    warn_ctx(o->ctx, p.n_ctx_train);
    const int fits = p.budget >= p.minimum;
    const int readers = o->io_threads > 0 ? o->io_threads : 8;
    /* the plain read test's buffers (readers x chunk) stay within half the budget too */
    uint64_t chunk = 4u << 20;
    while (chunk > 4096 && (uint64_t)readers * chunk > o->mem / 2) chunk /= 2;
    /* A shape-only model (mkmodel --shape-only: a sparse file whose data are
     * holes) cannot be read for a measurement: reading holes measures nothing. */
    const double allocated = df_file_allocated(o->model);
    const int sparse = allocated >= 0 && allocated < 0.5;
    enum { DISK_GIVEN, DISK_SHAPED, DISK_PLAIN, DISK_SCRATCH } how = DISK_GIVEN;
    double disk = o->disk_gbps * 1e9, win[64];
    int n_win = 0; /* the decode-shaped probe's windows (df_model_probe_disk_windows) */
    if (disk > 0) {
        how = DISK_GIVEN;
    } else if (sparse) {
        /* measure the disk the model lives on, with a scratch file of our own */
        char *dir = strdup(o->model), *slash = dir ? strrchr(dir, '/') : NULL;
        if (!dir) fail("out of memory");
        if (slash) *slash = 0;
        const char *where = slash ? (*dir ? dir : "/") : ".";
        uint64_t scratch = (uint64_t)1 << 30;
        disk = df_probe_disk_scratch(where, scratch, o->probe_secs, readers, chunk, err, sizeof err);
        if (disk < 0) { /* the model's folder is not writable: measure the temporary folder's disk instead */
            const char *tmp = getenv("TMPDIR");
            fprintf(stderr, "deltafin: %s; measuring %s instead\n", err, tmp && *tmp ? tmp : "/tmp");
            disk = df_probe_disk_scratch(tmp && *tmp ? tmp : "/tmp", scratch, o->probe_secs, readers, chunk, err,
                                         sizeof err);
        }
        free(dir);
        how = DISK_SCRATCH;
    } else {
        /* read the way decoding will: random tokens' experts, layer by layer, through
         * the weight store itself, under a budget just above the minimum (the probe
         * measures the disk, so its cache need not be the run's: a budget larger than
         * this machine's memory is planned, not allocated) */
        df_model_params pm = mp;
        pm.page_cache = 0; /* the disk itself: pages the kernel kept would read at memory speed */
        const uint64_t cap = p.minimum + ((uint64_t)512 << 20);
        if (pm.mem_budget > cap) pm.mem_budget = cap;
        disk = fits ? df_model_probe_disk_windows(o->model, &pm, o->probe_secs, win, 64, &n_win, err, sizeof err) : 0.0;
        how = disk > 0 ? DISK_SHAPED : DISK_PLAIN;
        if (disk == 0) disk = df_probe_disk(o->model, o->probe_secs, readers, chunk, err, sizeof err);
    }
    if (disk < 0) fail(err);
    const int shaped = how == DISK_SHAPED;
    /* memory: decoding's own products over this model's weights (memprobe.c), else a plain read */
    double mem = o->mem_gbps > 0 ? o->mem_gbps * 1e9
                                 : df_model_probe_memory(o->model, &mp, 1.0, o->mem / 2, err, sizeof err);
    const char *mem_source = o->mem_gbps > 0 ? "given" : mem > 0 ? "decode-shaped" : "plain";
    if (mem <= 0) {
        fprintf(stderr, "deltafin: %s; measuring memory with a plain read instead\n", err);
        mem = df_probe_memory(1.0, o->mem / 2, o->threads);
    }
    df_plan_speed sp, tiers, lo_sp, hi_sp; /* the tokens/s model (include/deltafin.h) */
    df_plan_predict(&p, disk, mem, &sp);
    double lo = disk, hi = disk; /* the disk's spread over the probe's windows (the first aside: it starts the queues) */
    for (int i = 1; i < n_win; i++) lo = win[i] < lo ? win[i] : lo, hi = win[i] > hi ? win[i] : hi;
    df_plan_predict(&p, lo, mem, &lo_sp);
    df_plan_predict(&p, hi, mem, &hi_sp);
    const uint64_t room = df_memory_room(), beyond = room > p.budget ? room - p.budget : 0; /* free beyond it now */
    df_plan_predict_tiers(&p, disk, mem, beyond, &tiers);
    const double hit = sp.hit_rate, disk_tok = sp.disk_bytes_per_token, mem_tok = sp.memory_bytes_per_token;
    const double t_disk = sp.disk_seconds, t_mem = sp.memory_seconds, tps = sp.tokens_per_s;
    double spec_tps[65];
    const int spec_k = plan_spec(o, &p, disk, mem, spec_tps);
    if (o->json) {
        printf("{\"fits\":%s,\"budget\":%llu,\"minimum\":%llu,\"resident_bytes\":%llu,\"session_bytes\":%llu,"
               "\"scratch_bytes\":%llu,"
               "\"expert_slots\":%d,\"experts_total\":%d,\"dense_layers_streamed\":%d,\"disk_bytes_per_s\":%.0f,"
               "\"memory_bytes_per_s\":%.0f,\"expected_hit_rate\":%.4f,\"disk_bytes_per_token\":%.0f,"
               "\"memory_bytes_per_token\":%.0f,\"predicted_tokens_per_s\":%.4f,\"disk_source\":\"%s\","
               "\"memory_source\":\"%s\",\"shape_only\":%s,\"requant_saved_bytes\":%llu,\"spec_accept\":%.3f,"
               "\"spec_best_k\":%d,\"spec_tokens_per_s\":%.4f,\"page_cache_room_bytes\":%llu,"
               "\"page_cache_hit_rate\":%.4f,\"page_cache_tokens_per_s\":%.4f,\"disk_bytes_per_s_low\":%.0f,"
               "\"disk_bytes_per_s_high\":%.0f,\"predicted_tokens_per_s_low\":%.4f,\"predicted_tokens_per_s_high\":%.4f,"
               "\"lookahead_recall\":%.4f,\"lookahead_recall_source\":\"%s\",\"lookahead_layers\":%d,\"moe_layers\":%d,"
               "\"memory_resident_bytes_per_token\":%.0f,\"disk_idle_seconds\":%.6f,\"lookahead_reads\":%s",
               fits ? "true" : "false", (unsigned long long)p.budget, (unsigned long long)p.minimum,
               (unsigned long long)p.resident_bytes, (unsigned long long)p.session_bytes,
               (unsigned long long)p.scratch_bytes, p.n_expert_slots,
               p.n_experts_total, p.n_dense_streamed, disk, mem, hit, disk_tok, mem_tok, tps,
               how == DISK_GIVEN ? "given" : how == DISK_SHAPED ? "decode-shaped" : how == DISK_SCRATCH ? "scratch" : "plain",
               mem_source, sparse ? "true" : "false",
               (unsigned long long)p.requant_saved_bytes, o->spec_accept, spec_k, spec_tps[spec_k],
               (unsigned long long)beyond, tiers.page_cache_hit_rate,
               tiers.tokens_per_s, lo, hi, lo_sp.tokens_per_s, hi_sp.tokens_per_s, p.lookahead_recall,
               p.recall_known ? "hot file" : "typical", p.n_guessed_layers, p.n_moe_layers,
               sp.memory_resident_bytes_per_token, sp.disk_idle_seconds, sp.lookahead_reads ? "true" : "false");
        printf(",\"memory\":[");
        for (int i = 0; i < p.n_mem; i++)
            printf("%s{\"name\":\"%s\",\"layers\":%d,\"bytes\":%llu}", i ? "," : "", p.mem[i].name, p.mem[i].n_layers,
                   (unsigned long long)p.mem[i].bytes);
        printf("],\"disk_windows\":[");
        for (int i = 0; i < n_win; i++) printf("%s%.0f", i ? "," : "", win[i]);
        printf("]");
        int rrc = 0;
        if (o->ranks > 1) {
            printf(",");
            rrc = (o->split_layers ? plan_stages : plan_ranks)(o, &mp, disk, mem, tps, 1);
        }
        printf("}\n");
        return (o->ranks > 1 ? rrc : !fits) ? 1 : 0; /* a cluster may fit where one process does not */
    }
    plan_verdict(o, &mp, &p, tps, disk, mem, df_memory_room());
    print_plan(&p, o->parallel, stdout);
    if (p.requant_saved_bytes)
        printf("plan: --resident-type %s: the resident dense weights take %s less than in the file\n", o->resident_type,
               df_fmt_bytes(p.requant_saved_bytes, (char[32]){0}, 32));
    if (!fits || p.n_dense_streamed) suggest_requant(o, &mp, &p);
    if (!fits) /* a cluster may fit where one process does not */
        return o->ranks <= 1 ? 1 : (o->split_layers ? plan_stages : plan_ranks)(o, &mp, disk, mem, 0, 0);
    if (sparse)
        printf("plan: %s is a shape-only file (%.2f%% of it is on disk): it reads no tensor data\n", o->model,
               100.0 * allocated);
    const int threads = mp.n_threads > 0 ? mp.n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    char mem_what[96];
    if (o->mem_gbps > 0) snprintf(mem_what, sizeof mem_what, "given");
    else snprintf(mem_what, sizeof mem_what, "%s, %d threads",
                  !strcmp(mem_source, "decode-shaped") ? "this model's products, as decoding runs them" : "a plain read", threads);
    if (how == DISK_GIVEN)
        printf("machine (given): disk %.2f GB/s, memory %.1f GB/s (%s)\n", disk / 1e9, mem / 1e9, mem_what);
    else if (how == DISK_SCRATCH)
        printf("machine: disk %.0f MiB/s (%d concurrent %s reads of a 1 GiB scratch file: the model is holes), memory %.1f "
               "GiB/s (%s)\n",
               disk / (1 << 20), readers, df_fmt_bytes(chunk, (char[32]){0}, 32), mem / (1 << 30), mem_what);
    else if (shaped)
        printf("machine: disk %.0f MiB/s (%.0f s of decode-shaped reads of this model, %d concurrent, the next layer's "
               "experts guessed %.0f%% right (the lookahead's recall, %s) and read while that pays: %d windows, "
               "%.0f-%.0f MiB/s after the first), memory %.1f GiB/s (%s)\n",
               disk / (1 << 20), o->probe_secs, readers, 100.0 * p.lookahead_recall,
               p.recall_known ? "as the hot file recorded it" : "typical: no hot file has recorded it", n_win,
               lo / (1 << 20), hi / (1 << 20), mem / (1 << 30), mem_what);
    else
        printf("machine: disk %.0f MiB/s (%d concurrent %s reads of this file), memory %.1f GiB/s (%s)\n",
               disk / (1 << 20), readers, df_fmt_bytes(chunk, (char[32]){0}, 32), mem / (1 << 30), mem_what);
    if (p.n_experts_total)
        printf("per token: %.2f MiB from disk (expected expert cache hit rate %.1f%%, %s%s), %.2f MiB from memory\n",
               disk_tok / (1 << 20), 100.0 * hit, p.hot_known ? "from the learned hot file" : "routing taken as uniform",
               p.n_dense_streamed ? ", and the streamed dense layers" : "", mem_tok / (1 << 20));
    else
        printf("per token: %.2f MiB from disk (%s), %.2f MiB from memory\n", disk_tok / (1 << 20),
               p.n_dense_streamed ? "the streamed dense layers, every token" : "nothing streams", mem_tok / (1 << 20));
    printf("predicted: %.2f tokens/s (%s-bound: disk %.3f s, memory %.3f s per token", tps,
           t_disk >= t_mem ? "disk" : "memory", t_disk, t_mem);
    if (disk_tok > 0) /* docs/memory.md "What plan predicts" */
        printf("; the disk idle %.3f s while the weights kept in memory compute%s", sp.disk_idle_seconds,
               sp.lookahead_reads ? ", less the lookahead's reads" : "");
    printf(")");
    if (hi_sp.tokens_per_s > lo_sp.tokens_per_s * 1.001) /* the disk moved while it was measured: say how much */
        printf("; %.2f-%.2f over the disk's spread", lo_sp.tokens_per_s, hi_sp.tokens_per_s);
    printf("\n");
    if (disk_tok > 0 && beyond > 0) /* the second tier: what the machine has beyond the budget, now */
        printf("predicted with --page-cache%s: %.2f tokens/s: the %s free beyond the budget now keeps %.0f%% of the expert "
               "reads%s off the disk (%.2f MiB a token from disk); the kernel takes it back as it needs\n",
               o->page_cache ? " (on)" : "", tiers.tokens_per_s, df_fmt_bytes(beyond, (char[32]){0}, 32),
               100.0 * (hit < 1 ? tiers.page_cache_hit_rate / (1 - hit) : 0),
               p.n_dense_streamed ? " and the streamed dense layers it can" : "", tiers.disk_bytes_per_token / (1 << 20));
    printf("speculation at acceptance %.2f (--spec-accept; uniform routing, bytes only):", o->spec_accept);
    for (int k = 1; k <= o->draft_max; k++) printf(" k=%d %.2f tokens/s (%.2fx)%s", k, spec_tps[k],
                                                    tps > 0 ? spec_tps[k] / tps : 0, k < o->draft_max ? ";" : "");
    if (spec_k) printf("\npredicted: speculation pays: k=%d, %.2f tokens/s\n", spec_k, spec_tps[spec_k]);
    else printf("\npredicted: speculation does not pay here (off)\n");
    return o->ranks <= 1 ? 0 : (o->split_layers ? plan_stages : plan_ranks)(o, &mp, disk, mem, tps, 0);
}

static df_session *session(df_model *m, const opts *o) {
    char err[ERRLEN];
    df_session_params sp = df_session_default_params();
    sp.n_ctx = o->ctx;
    sp.n_batch = o->batch; /* 0: the default; as planned (model_params) */
    sp.kv_type = o->kv_f32 ? DF_KV_F32 : DF_KV_F16;
    sp.spec_k_max = spec_rows(o);
    df_session *s;
    if (df_session_new(m, &sp, &s, err, sizeof err) != 0) fail(err);
    if (o->trace && df_session_trace_experts(s, o->trace, err, sizeof err) != 0) fail(err);
    if (o->ties && df_session_trace_ties(s, o->ties, o->tie_margin, err, sizeof err) != 0) fail(err);
    return s;
}

/* Tokenize len bytes of text (adding BOS as the model says unless --no-bos). Caller frees. */
static int32_t *tokenize(df_model *m, const opts *o, const char *text, size_t len, int *n) {
    char err[ERRLEN];
    int need = 0;
    if (df_tokenize(m, text, len, !o->no_bos, 1, NULL, 0, &need, err, sizeof err) != 0 && need == 0) fail(err);
    int32_t *ids = malloc((size_t)(need + 1) * sizeof(int32_t));
    if (!ids) fail("out of memory");
    if (df_tokenize(m, text, len, !o->no_bos, 1, ids, need + 1, n, err, sizeof err) != 0) fail(err);
    return ids;
}

static int32_t *parse_tokens(const char *s, int *n) {
    int cap = 16, k = 0;
    int32_t *ids = malloc((size_t)cap * sizeof(int32_t));
    if (!ids) fail("out of memory");
    while (*s) {
        while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n') s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) usage_error("--tokens expects non-negative integers%s%s", "", "");
        if (k == cap) {
            cap *= 2;
            int32_t *nb = realloc(ids, (size_t)cap * sizeof(int32_t));
            if (!nb) fail("out of memory");
            ids = nb;
        }
        ids[k++] = (int32_t)v;
        s = end;
    }
    *n = k;
    return ids;
}

/* For info: what a session of -c positions (the default context without -c)
 * keeps per layer, from the planner's plan. info calls it only where there
 * is a planner (a file Deltafin cannot plan is described without one). */
static void info_memory(df_planner *pl, const opts *o) {
    df_model_params mp = model_params(o);
    df_plan p;
    char err[ERRLEN];
    if (df_planner_plan(pl, &mp, &p, err, sizeof err) != 0 || !p.n_mem) return;
    printf("memory:        ");
    print_mem_list(stdout, &p);
}

/* A count for people: 292.8 K, 35.2 M, 1.20 B. */
static const char *fmt_count(uint64_t n, char *buf, size_t len) {
    if (n < 1000) snprintf(buf, len, "%" PRIu64, n);
    else if (n < 1000000) snprintf(buf, len, "%.1f K", (double)n / 1e3);
    else if (n < 1000000000) snprintf(buf, len, "%.1f M", (double)n / 1e6);
    else snprintf(buf, len, "%.2f B", (double)n / 1e9);
    return buf;
}

/* deltafin info: the file is read once where this build runs it (the planner checks it, describes it and plans
 * its memory); a file it does not run is described by df_model_describe, which checks nothing. */
static int cmd_info(const opts *o) {
    char err[ERRLEN], why[ERRLEN];
    df_model_desc *d;
    df_model_params mp = model_params(o);
    df_planner *pl = NULL;
    if (describe_model(o->model, &mp, &d, &pl, why, sizeof why, err, sizeof err) != 0) fail(err);
    printf("file:          %s (%d file%s, GGUF v%d)\n", o->model, d->n_files, d->n_files > 1 ? "s" : "", d->gguf_version);
    printf("architecture:  %s\n", d->arch ? d->arch : "(missing)");
    if (d->name) printf("name:          %s\n", d->name);
    for (int i = 0; i < d->n_hparams; i++) {
        const df_hparam *h = &d->hparams[i];
        if (h->kind == DF_VALUE_STRING) printf("  %-34s %s\n", h->key, h->s);
        else if (h->kind == DF_VALUE_FLOAT) printf("  %-34s %g\n", h->key, h->f);
        else if (h->kind == DF_VALUE_ARRAY) printf("  %-34s (array of %" PRIu64 ")\n", h->key, h->n);
        else printf("  %-34s %" PRId64 "\n", h->key, h->i);
    }
    const uint64_t params = d->n_params, bytes = d->n_bytes;
    printf("tensors:       %" PRIu64 "\n", d->n_tensors);
    char cnt[32], sz[32];
    printf("parameters:    %" PRIu64 " (%s)\n", params, fmt_count(params, cnt, sizeof cnt));
    printf("tensor bytes:  %" PRIu64 " (%s, %.2f bits/weight)\n", bytes, df_fmt_bytes(bytes, sz, sizeof sz),
           params ? 8.0 * (double)bytes / (double)params : 0.0);
    for (int t = 0; t < d->n_types; t++) {
        const df_type_summary *q = &d->types[t];
        printf("  %-8s %5" PRIu64 " tensors %14" PRIu64 " bytes  %6.4g bits/weight%s\n", q->name, q->n_tensors, q->bytes,
               q->bits_per_weight, q->supported ? "" : "  (unsupported by Deltafin)");
    }
    if (d->n_nextn > 0)
        printf("nextn/MTP:     %" PRId64 " block%s (blk.%" PRId64 "+), %" PRIu64 " params, %.2f MiB: not run, not read\n",
               d->n_nextn, d->n_nextn > 1 ? "s" : "", d->nextn_first_block, d->nextn_params,
               (double)d->nextn_bytes / (1 << 20));
    if (d->n_expert > 0 && d->arch) {
        const uint64_t used = d->n_expert_used, n_moe_layers = d->n_moe_layers, active = d->n_params_active;
        printf("experts:       %" PRIu64 " per layer in %" PRIu64 " layers, %" PRIu64 " used per token\n", d->n_expert,
               n_moe_layers, used);
        printf("active params: %" PRIu64 " per token (%s, %.1f%% of all)\n", active, fmt_count(active, cnt, sizeof cnt),
               params ? 100.0 * (double)active / (double)params : 0.0);
        printf("one expert:    ");
        uint64_t tot = 0;
        for (int t = 0; t < d->n_types; t++)
            if (d->types[t].expert_bytes) {
                printf("%s%" PRIu64 " bytes %s", tot ? ", " : "",
                       d->types[t].expert_bytes / (n_moe_layers ? n_moe_layers : 1), d->types[t].name);
                tot += d->types[t].expert_bytes;
            }
        printf(" (%.2f MiB per layer; %.2f MiB read per token if nothing is cached)\n",
               (double)tot / (double)(n_moe_layers ? n_moe_layers : 1) / (1 << 20), (double)tot * (double)used / (1 << 20));
    }
    if (pl) info_memory(pl, o);
    printf("tokenizer:     %s%s%s, %" PRIu64 " tokens, %" PRIu64 " merges\n", d->tok_model ? d->tok_model : "(none)",
           d->tok_pre ? ", pre=" : "", d->tok_pre ? d->tok_pre : "", d->n_tokens, d->n_merges);
    df_model_desc_free(d);
    df_planner_free(pl);
    if (!why[0]) printf("runnable:      yes\n");
    else printf("runnable:      no: %s\n", why);
    return 0;
}

static int cmd_tokenize(const opts *o) {
    need_prompt(o, "tokenize");
    df_model *m = load_vocab(o); /* the tokenizer is all it needs: vocabulary-only files work */
    int n;
    int32_t *ids = tokenize(m, o, o->prompt, o->prompt_len, &n);
    for (int i = 0; i < n; i++) {
        if (o->pieces) {
            char buf[256];
            int len = df_token_to_piece(m, ids[i], buf, sizeof buf);
            if (len < 0) len = 0;
            if (len > (int)sizeof buf) len = (int)sizeof buf;
            printf("%d\t'%.*s'\n", ids[i], len, buf);
        } else {
            printf("%d\n", ids[i]);
        }
    }
    free(ids);
    df_model_free(m);
    return 0;
}

typedef struct { float v; int id; } scored;
static int cmp_scored(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id - y->id;
}

/* Logits of every position, decoded n_batch tokens at a time into the
 * session's own buffer (counted in its memory and in a budget): nothing here
 * grows with the number of tokens times the vocabulary. */
static int cmd_logits(const opts *o) {
    if (!o->prompt && !o->tokens) usage_error("logits needs -p TEXT, -f FILE or --tokens \"1 2 3\"%s%s", "", "");
    if (o->prompt && o->tokens) usage_error("logits takes one of -p/-f and --tokens%s%s", "", "");
    int n;
    int32_t *ids;
    opts o2 = *o;
    if (o->tokens) {
        ids = parse_tokens(o->tokens, &n);
    } else { /* count the tokens with the tokenizer alone, so the session (and a budget's plan) fits them */
        df_model *v = load_vocab(o);
        ids = tokenize(v, o, o->prompt, o->prompt_len, &n);
        df_model_free(v);
    }
    if (n == 0) fail("no tokens");
    if (o2.ctx == 0) o2.ctx = n;
    if (o2.ctx < n) {
        fprintf(stderr, "deltafin: %d tokens do not fit in a context of %d (-c)\n", n, o2.ctx);
        exit(1);
    }
    df_model *m = load(&o2, NULL);
    df_session *s = session(m, &o2);
    const int nv = df_n_vocab(m), nb = df_session_n_batch(s);
    float *logits = df_session_logits(s);
    scored *sc = malloc((size_t)nv * sizeof(scored));
    if (!sc) fail("out of memory");
    FILE *f = NULL;
    char err[ERRLEN];
    df_out *out = NULL; /* --out: raw floats, written through df_out_open (docs/files.md) */
    if (o->out && (!(out = df_out_open(o->out, NULL, 0, m, err, sizeof err)) || !(f = df_out_stream(out)))) {
        fprintf(stderr, "deltafin: --out: %s\n", out ? strerror(errno) : err);
        exit(1);
    }
    for (int done = 0; done < n; done += nb) {
        const int c = n - done < nb ? n - done : nb;
        if (df_decode(s, ids + done, c, logits, 1, err, sizeof err) != 0) fail(err);
        for (int p = 0; p < c; p++) {
            for (int i = 0; i < nv; i++) sc[i] = (scored){logits[(size_t)p * nv + i], i};
            qsort(sc, (size_t)nv, sizeof(scored), cmp_scored);
            printf("%d", done + p);
            for (int k = 0; k < o->top && k < nv; k++) printf(" %d:%.6f", sc[k].id, sc[k].v);
            printf("\n");
        }
        const size_t cnt = (size_t)c * (size_t)nv;
        if (f && fwrite(logits, sizeof(float), cnt, f) != cnt) fail("writing --out failed");
        check_stdout();
    }
    if (out && df_out_commit(out, err, sizeof err) != 0) fail(err);
    if (df_session_trace_ties(s, NULL, 0, err, sizeof err) != 0) fail(err);
    free(sc);
    free(ids);
    const int rc = save_hot(m);
    df_session_free(s);
    df_model_free(m);
    return rc;
}

/* How the generation steps between a and b shared their weight reads: the
 * union of experts per step (and per MoE layer), expert bytes and disk
 * bytes per generated token. */
static void print_share_report(const df_io_stats *a, const df_io_stats *b, int generated) {
    const uint64_t passes = b->passes - a->passes, rows = b->pass_rows - a->pass_rows;
    const uint64_t runs = b->moe_runs - a->moe_runs, uni = b->expert_union - a->expert_union;
    const double M = 1 << 20, g = generated > 0 ? generated : 1;
    if (!passes) return;
    fprintf(stderr, "steps: %llu passes over the weights for %llu tokens (%.2f sequences a step)\n",
            (unsigned long long)passes, (unsigned long long)rows, (double)rows / (double)passes);
    if (runs)
        fprintf(stderr, "steps: expert union %.1f experts a step (%.2f per MoE layer)\n", (double)uni / (double)passes,
                (double)uni / (double)runs);
    const uint64_t ex = b->expert_bytes - a->expert_bytes, disk = b->bytes_read - a->bytes_read;
    if (runs || ex) /* a dense model has no experts to speak of */
        fprintf(stderr, "steps: %.3f MiB of experts read per generated token, %.3f MiB from disk\n", (double)ex / M / g,
                (double)disk / M / g);
    else if (disk)
        fprintf(stderr, "steps: %.3f MiB from disk per generated token\n", (double)disk / M / g);
}

/* Print a token's bytes. */
static void emit(df_model *m, int32_t id) {
    char buf[256];
    int len = df_token_to_piece(m, id, buf, sizeof buf);
    if (len > (int)sizeof buf) len = (int)sizeof buf;
    if (len > 0) fwrite(buf, 1, (size_t)len, stdout), status_text(buf, (size_t)len);
    check_stdout(); /* a full disk or a closed pipe ends the run with an error */
}

/* Decode ids[from..to) a batch at a time (a signal is seen between batches); the tokens decoded. */
static int prefill(df_session *s, const int32_t *ids, int from, int to, float *logits) {
    char err[ERRLEN];
    const int nb = df_session_n_batch(s);
    int fed = from;
    const double t0 = df_time();
    while (fed < to && !g_signal) {
        const int c = to - fed < nb ? to - fed : nb;
        if (df_decode(s, ids + fed, c, logits, 0, err, sizeof err) != 0) fail(err);
        fed += c;
        const double el = df_time() - t0;
        status_show("prompt", fed, to, el > 0 ? (fed - from) / el : 0, 0);
    }
    return fed - from;
}

/* --prompt-cache: restore the longest prefix the cache shares with the prompt
 * (all but its last token, whose logits are needed), decode the rest of that
 * part, save the cache when it grew, then the last token. Returns the prompt
 * tokens evaluated; *reused = those taken from the cache. */
static int prompt_with_cache(df_session *s, const char *path, const int32_t *ids, int n, float *logits, int *reused) {
    char err[ERRLEN];
    *reused = 0;
    if (access(path, F_OK) == 0 && df_prompt_cache_load(s, path, ids, n - 1, reused, err, sizeof err) != 0)
        fprintf(stderr, "deltafin: prompt cache refused, ignoring it: %s\n", err);
    int fed = prefill(s, ids, *reused, n - 1, logits);
    if (g_signal) return fed;
    if (*reused < n - 1 && df_prompt_cache_save(s, path, ids, err, sizeof err) != 0)
        fprintf(stderr, "deltafin: warning: the prompt cache was not saved: %s\n", err);
    return fed + prefill(s, ids, n - 1, n, logits);
}

/* The draft model's load settings: the main model's, no hot set, no
 * requantization, budget bytes (0: none). */
static df_model_params draft_params(const opts *o, uint64_t budget) {
    df_model_params mp = model_params(o);
    mp.mem_budget = budget;
    mp.hot_file = "";
    mp.resident_type = NULL;
    return mp;
}

/* -md under --mem: the bytes the draft takes out of the budget (all its
 * weights resident, its session, its overhead; df_model_plan), so the main
 * model is planned with the rest. 0 without --mem or -md. */
static uint64_t draft_share(const opts *o) {
    if (!o->mem || !o->draft) return 0;
    char err[ERRLEN];
    df_model_params mp = draft_params(o, 0);
    const uint64_t need = all_in_memory(o->draft, &mp);
    char b0[32], b1[32];
    if (need >= o->mem) {
        snprintf(err, sizeof err, "the draft model alone needs %s, all of --mem %s", df_fmt_bytes(need, b0, sizeof b0),
                 df_fmt_bytes(o->mem, b1, sizeof b1));
        fail(err);
    }
    fprintf(stderr, "draft: %s of --mem %s (its weights, KV cache and overhead, all in memory); the model plans the rest\n",
            df_fmt_bytes(need, b0, sizeof b0), df_fmt_bytes(o->mem, b1, sizeof b1));
    return need;
}

/* The draft model of -md: the main model's settings, within share bytes of
 * --mem (draft_share; 0: no budget). */
static df_model *load_draft(const opts *o, uint64_t share, df_session **ds) {
    char err[ERRLEN];
    df_model_params mp = draft_params(o, share);
    df_model *d;
    if (df_model_load(o->draft, &mp, &d, err, sizeof err) != 0) fail(err);
    df_session_params sp = df_session_default_params(); /* as session(), without --trace-experts */
    sp.n_ctx = o->ctx;
    sp.kv_type = o->kv_f32 ? DF_KV_F32 : DF_KV_F16;
    sp.spec_k_max = spec_rows(o);
    if (df_session_new(d, &sp, ds, err, sizeof err) != 0) fail(err);
    return d;
}

static df_spec *open_spec(const opts *o, df_session *s, df_session *draft, const int32_t *ids, int n) {
    char err[ERRLEN];
    df_spec_params p = df_spec_default_params();
    p.source = o->spec;
    p.draft = draft;
    p.k_max = o->draft_max;
    p.k_fixed = o->spec_k;
    df_spec *sp;
    if (df_spec_new(s, &p, ids, n, &sp, err, sizeof err) != 0) fail(err);
    return sp;
}

static void print_spec_report(const opts *o, const df_spec *sp) {
    df_spec_stats st;
    df_spec_get_stats(sp, &st);
    fprintf(stderr, "speculation: %s, k=%d (%s, at most %d): %d of %d guesses kept in %d passes, %.2f tokens per pass\n",
            o->spec == DF_SPEC_DRAFT ? "draft model" : o->spec == DF_SPEC_MTP ? "MTP block" : "prompt lookup", st.k,
            o->spec_k < 0 ? "adaptive" : "fixed",
            o->draft_max, st.accepted, st.guessed, st.passes, st.passes ? (double)st.emitted / st.passes : 0);
    fprintf(stderr, "speculation: why: %s\n", st.why);
}

/* Stream the generated tokens: the first from the prompt's logits, then one
 * decode (or one speculative pass) at a time. Returns the count. */
static int generate(const opts *o, df_model *m, df_session *s, df_spec *sp, df_sampler *smp, float *logits) {
    char err[ERRLEN];
    int32_t buf[65];
    int nbuf = 1, generated = 0;
    const double t0 = df_time();
    buf[0] = df_sampler_sample(smp, logits);
    df_sampler_accept(smp, buf[0]);
    for (;;) {
        for (int j = 0; j < nbuf; j++) {
            if (!o->ignore_eos && df_token_is_eog(m, buf[j])) return generated;
            emit(m, buf[j]);
            generated++;
            if (o->progress) {
                const double el = df_time() - t0;
                status_show("generated", generated, o->n_predict, el > 0 ? generated / el : 0, 0);
            }
            if (generated == o->n_predict) return generated;
        }
        if (g_signal) return generated;
        if (df_session_pos(s) >= df_session_n_ctx(s)) {
            fprintf(stderr, "\ndeltafin: context full after %d tokens\n", df_session_pos(s));
            return generated;
        }
        const int32_t pending = buf[nbuf - 1];
        if (sp) {
            const int room = o->n_predict - generated < 65 ? o->n_predict - generated : 65;
            if (df_spec_step(sp, smp, pending, buf, room, &nbuf, err, sizeof err) != 0) fail(err);
        } else {
            if (df_decode(s, &pending, 1, logits, 0, err, sizeof err) != 0) fail(err);
            buf[0] = df_sampler_sample(smp, logits);
            df_sampler_accept(smp, buf[0]);
            nbuf = 1;
        }
    }
}

/* --grammar / --json-schema: the output's grammar (NULL: none). Exits 2 when it cannot be used. */
static df_grammar *output_grammar(const opts *o, df_model *m) {
    if (!o->grammar && !o->json_schema) return NULL;
    if (o->grammar && o->json_schema) usage_error("give --grammar or --json-schema, not both%s%s", "", "");
    char err[ERRLEN], *gbnf = NULL;
    if (o->json_schema && df_json_schema_to_grammar(o->json_schema, strlen(o->json_schema), &gbnf, err, sizeof err) != DF_OK)
        usage_error("--json-schema: %s%s", err, "");
    df_grammar *g = NULL;
    const char *text = gbnf ? gbnf : o->grammar;
    if (df_grammar_new(m, text, strlen(text), &g, err, sizeof err) != DF_OK) usage_error("--grammar: %s%s", err, "");
    free(gbnf);
    return g;
}

static int cmd_run(const opts *o) {
    need_prompt(o, "run");
    if ((o->grammar || o->json_schema) && o->spec != DF_SPEC_NONE)
        usage_error("--grammar and --json-schema do not go with --spec yet%s%s", "", "");
    double t_load;
    opts om = *o; /* under --mem, the draft's share comes out of the model's budget */
    const uint64_t share = draft_share(o);
    om.mem -= share;
    df_model *m = load(&om, &t_load);
    df_session *s = session(m, o), *ds = NULL;
    df_model *dm = o->draft ? load_draft(o, share, &ds) : NULL;
    int n;
    int32_t *ids = tokenize(m, o, o->prompt, o->prompt_len, &n);
    if (n == 0) fail("the prompt produced no tokens");
    if (n >= df_session_n_ctx(s)) fail("the prompt does not fit in the context (use -c)");
    const int nv = df_n_vocab(m);
    float *logits = malloc((size_t)nv * sizeof(float));
    df_sampler *smp = df_sampler_new(&o->sp, nv);
    if (!logits || !smp) fail("out of memory");
    df_grammar *gr = output_grammar(o, m); /* checked before any output; set after the prompt, the output's */
    char err[ERRLEN];
    /* a guess source this model cannot use (no MTP block, a draft of another vocabulary) fails before any output */
    if (o->spec != DF_SPEC_NONE) df_spec_free(open_spec(o, s, ds, NULL, 0));
    df_io_stats io0;
    df_model_io_stats(m, &io0);
    status_open(o->progress);
    status_show("prompt", 0, n, 0, 1);
    fwrite(o->prompt, 1, o->prompt_len, stdout);
    status_text(o->prompt, o->prompt_len);
    check_stdout();
    double t0 = df_time();
    int reused = 0; /* prompt tokens taken from --prompt-cache */
    const int fed = o->prompt_cache ? prompt_with_cache(s, o->prompt_cache, ids, n, logits, &reused)
                                    : prefill(s, ids, 0, n, logits); /* prompt tokens evaluated */
    double t_prompt = df_time() - t0;
    for (int i = 0; i < n; i++) df_sampler_accept(smp, ids[i]);
    if (gr && df_sampler_set_grammar(smp, gr) != DF_OK) fail("out of memory");
    df_spec *sp = o->spec != DF_SPEC_NONE && !g_signal ? open_spec(o, s, ds, ids, n) : NULL;
    df_io_stats gen0, gen1;
    df_model_io_stats(m, &gen0);
    t0 = df_time();
    const int generated = g_signal || o->n_predict == 0 ? 0 : generate(o, m, s, sp, smp, logits);
    double t_gen = df_time() - t0;
    df_model_io_stats(m, &gen1);
    printf("\n");
    check_stdout();
    status_close();
    const int sig = g_signal;
    if (sig)
        fprintf(stderr, "\ndeltafin: stopped by %s after %d of %d prompt tokens and %d generated\n",
                sig == SIGINT ? "SIGINT" : "SIGTERM", reused + fed, n, generated);
    fprintf(stderr, "\nload:       %8.3f s\n", t_load);
    fprintf(stderr, "prompt:     %8d tokens %8.3f s %10.2f tokens/s\n", fed, t_prompt, fed / (t_prompt > 0 ? t_prompt : 1e-9));
    if (o->prompt_cache) fprintf(stderr, "prompt cache: %d of %d prompt tokens reused from %s\n", reused, n, o->prompt_cache);
    fprintf(stderr, "generation: %8d tokens %8.3f s %10.2f tokens/s\n", generated, t_gen,
            generated / (t_gen > 0 ? t_gen : 1e-9));
    if (sp) print_spec_report(o, sp);
    print_share_report(&gen0, &gen1, generated);
    df_model_info info;
    df_model_get_info(m, &info);
    fprintf(stderr, "peak memory: %.1f MiB (RSS), threads: %d, isa: %s, packed weights: %.1f MiB\n",
            (double)df_peak_rss() / (1 << 20), info.n_threads, df_isa(), (double)info.packed_bytes / (1 << 20));
    print_io_report(m, &io0, fed + generated, t_prompt + t_gen, o->page_cache);
    int rc = df_session_trace_experts(s, NULL, err, sizeof err) != 0 ? (fprintf(stderr, "deltafin: %s\n", err), 1) : 0;
    if (df_session_trace_ties(s, NULL, 0, err, sizeof err) != 0) rc = (fprintf(stderr, "deltafin: %s\n", err), 1);
    rc |= save_hot(m); /* the learned hot set survives an interrupted run too */
    df_spec_free(sp);
    df_sampler_free(smp);
    df_grammar_free(gr);
    free(logits);
    free(ids);
    df_session_free(s);
    df_model_free(m);
    if (ds) df_session_free(ds);
    if (dm) df_model_free(dm);
    return sig ? 128 + sig : rc;
}

/* ---- run --batch-file: many prompts, one pass over the weights per step ---- */

typedef struct {
    int32_t *ids;         /* prompt tokens */
    int n_ids;
    const char *text;     /* the prompt's line */
    size_t len;
    char *out;            /* the completion's bytes */
    size_t out_len, out_cap;
} batch_seq;

typedef struct {
    df_session *s;
    df_sampler *smp;
    float *logits;
    int seq;              /* index into the prompts, -1: free */
    int generated;
    int32_t next;         /* the token the next step decodes */
} batch_slot;

/* The prompts: one a line of buf (a trailing CR dropped), empty lines skipped. */
static batch_seq *split_prompts(char *buf, size_t len, int *n) {
    int cap = 16, k = 0;
    batch_seq *v = calloc((size_t)cap, sizeof *v);
    if (!v) fail("out of memory");
    for (size_t i = 0; i < len;) {
        size_t e = i;
        while (e < len && buf[e] != '\n') e++;
        size_t l = e - i;
        if (l && buf[i + l - 1] == '\r') l--;
        if (l) {
            if (k == cap) {
                batch_seq *nv = realloc(v, sizeof *v * (size_t)(cap *= 2));
                if (!nv) fail("out of memory");
                v = nv;
                memset(v + k, 0, sizeof *v * (size_t)(cap - k));
            }
            v[k].text = buf + i;
            v[k++].len = l;
        }
        i = e + 1;
    }
    *n = k;
    return v;
}

static void append_piece(df_model *m, batch_seq *q, int32_t id) {
    char buf[256];
    int len = df_token_to_piece(m, id, buf, sizeof buf);
    if (len > (int)sizeof buf) len = (int)sizeof buf;
    if (len <= 0) return;
    if (q->out_len + (size_t)len > q->out_cap) {
        size_t cap = q->out_cap ? q->out_cap * 2 : 256;
        while (cap < q->out_len + (size_t)len) cap *= 2;
        char *nb = realloc(q->out, cap);
        if (!nb) fail("out of memory");
        q->out = nb;
        q->out_cap = cap;
    }
    memcpy(q->out + q->out_len, buf, (size_t)len);
    q->out_len += (size_t)len;
}

/* Sample slot b's next token from its logits; 0 when its sequence ends here. */
static int advance(df_model *m, const opts *o, batch_slot *b, batch_seq *q) {
    if (b->generated >= o->n_predict) return 0;
    const int32_t tok = df_sampler_sample(b->smp, b->logits);
    df_sampler_accept(b->smp, tok);
    if (!o->ignore_eos && df_token_is_eog(m, tok)) return 0;
    append_piece(m, q, tok);
    b->generated++;
    b->next = tok;
    return b->generated < o->n_predict && df_session_pos(b->s) < df_session_n_ctx(b->s);
}

/* Start prompt k in slot b: reset its session, decode the prompt, sample the first token. */
static int admit(df_model *m, const opts *o, batch_slot *b, batch_seq *q, int k, int *prompt_tokens) {
    char err[ERRLEN];
    if (df_session_truncate(b->s, 0, err, sizeof err) != 0) fail(err);
    df_sampler_free(b->smp);
    if (!(b->smp = df_sampler_new(&o->sp, df_n_vocab(m)))) fail("out of memory");
    b->seq = k;
    b->generated = 0;
    const int nb = df_session_n_batch(b->s);
    for (int fed = 0; fed < q->n_ids;) {
        const int c = q->n_ids - fed < nb ? q->n_ids - fed : nb;
        if (df_decode(b->s, q->ids + fed, c, b->logits, 0, err, sizeof err) != 0) fail(err);
        fed += c;
    }
    *prompt_tokens += q->n_ids;
    for (int i = 0; i < q->n_ids; i++) df_sampler_accept(b->smp, q->ids[i]);
    return advance(m, o, b, q);
}

static int cmd_run_batch(opts *o) {
    if (o->grammar || o->json_schema) usage_error("--grammar and --json-schema do not go with --batch-file yet%s%s", "", "");
    int np;
    batch_seq *q = split_prompts(o->prompt_buf, o->prompt_len, &np);
    if (np == 0) fail("the batch file holds no prompt (one a line)");
    const int ns = np < (o->parallel ? o->parallel : 16) ? np : (o->parallel ? o->parallel : 16);
    o->parallel = ns; /* the budget's plan holds every session */
    /* a step's rows fit a session's batch; prompts go in chunks of it (a
     * smaller batch than the default keeps N sessions' scratch small) */
    o->batch = ns > 32 ? ns : 32;
    double t_load;
    df_model *m = load(o, &t_load);
    batch_slot *slot = calloc((size_t)ns, sizeof *slot);
    df_session **ss = malloc(sizeof *ss * (size_t)ns);
    const int32_t **tp = malloc(sizeof *tp * (size_t)ns);
    int *n1 = malloc(sizeof *n1 * (size_t)ns), *at = malloc(sizeof *at * (size_t)ns);
    float **lp = malloc(sizeof *lp * (size_t)ns);
    if (!slot || !ss || !tp || !n1 || !at || !lp) fail("out of memory");
    for (int i = 0; i < np; i++) {
        q[i].ids = tokenize(m, o, q[i].text, q[i].len, &q[i].n_ids);
        if (q[i].n_ids == 0) fail("a prompt of the batch file produced no tokens");
    }
    for (int i = 0; i < ns; i++) {
        slot[i].s = session(m, o);
        slot[i].seq = -1;
        if (!(slot[i].logits = malloc(sizeof(float) * (size_t)df_n_vocab(m)))) fail("out of memory");
        n1[i] = 1;
    }
    for (int i = 0; i < np; i++)
        if (q[i].n_ids >= df_session_n_ctx(slot[0].s)) fail("a prompt of the batch file does not fit in the context (use -c)");
    char err[ERRLEN];
    int next = 0, prompt_tokens = 0, generated = 0, steps = 0;
    double t_prompt = 0, t_gen = 0;
    df_io_stats s0, s1, acc0, acc1, io0;
    memset(&acc0, 0, sizeof acc0);
    memset(&acc1, 0, sizeof acc1);
    df_model_io_stats(m, &io0);
    for (;;) {
        /* admit prompts into free slots (a finished sequence frees its slot) */
        double t0 = df_time();
        for (int i = 0; i < ns && !g_signal; i++)
            while (slot[i].seq < 0 && next < np) {
                const int k = next++;
                const int go = admit(m, o, &slot[i], &q[k], k, &prompt_tokens);
                generated += slot[i].generated;
                if (!go) slot[i].seq = -1;
            }
        t_prompt += df_time() - t0;
        int na = 0;
        for (int i = 0; i < ns; i++)
            if (slot[i].seq >= 0) {
                at[na] = i;
                ss[na] = slot[i].s;
                tp[na] = &slot[i].next;
                lp[na++] = slot[i].logits;
            }
        if (na == 0 || g_signal) break;
        /* one step: every active sequence's next token in one df_decode_batch */
        t0 = df_time();
        df_model_io_stats(m, &s0);
        if (df_decode_batch(ss, na, tp, n1, lp, err, sizeof err) != 0) fail(err);
        df_model_io_stats(m, &s1);
        acc1.passes += s1.passes - s0.passes;
        acc1.pass_rows += s1.pass_rows - s0.pass_rows;
        acc1.moe_runs += s1.moe_runs - s0.moe_runs;
        acc1.expert_union += s1.expert_union - s0.expert_union;
        acc1.expert_bytes += s1.expert_bytes - s0.expert_bytes;
        acc1.bytes_read += s1.bytes_read - s0.bytes_read;
        steps++;
        for (int j = 0; j < na; j++) {
            batch_slot *b = &slot[at[j]];
            const int before = b->generated;
            if (!advance(m, o, b, &q[b->seq])) b->seq = -1;
            generated += b->generated - before;
        }
        t_gen += df_time() - t0;
    }
    for (int i = 0; i < np; i++) { /* every completion, in the file's order */
        printf("=== prompt %d of %d ===\n", i + 1, np);
        fwrite(q[i].text, 1, q[i].len, stdout);
        if (q[i].out_len) fwrite(q[i].out, 1, q[i].out_len, stdout);
        printf("\n");
        check_stdout();
    }
    const int sig = g_signal;
    if (sig)
        fprintf(stderr, "\ndeltafin: stopped by %s after %d of %d prompts were started\n",
                sig == SIGINT ? "SIGINT" : "SIGTERM", next, np);
    fprintf(stderr, "\nload:       %8.3f s\n", t_load);
    fprintf(stderr, "prompts:    %8d (%d decoded together at most)\n", np, ns);
    fprintf(stderr, "prompt:     %8d tokens %8.3f s %10.2f tokens/s\n", prompt_tokens, t_prompt,
            prompt_tokens / (t_prompt > 0 ? t_prompt : 1e-9));
    fprintf(stderr, "generation: %8d tokens %8.3f s %10.2f tokens/s (all sequences), %d steps\n", generated, t_gen,
            generated / (t_gen > 0 ? t_gen : 1e-9), steps);
    print_share_report(&acc0, &acc1, generated);
    fprintf(stderr, "peak memory: %.1f MiB (RSS), isa: %s\n", (double)df_peak_rss() / (1 << 20), df_isa());
    print_io_report(m, &io0, prompt_tokens + generated, t_prompt + t_gen, o->page_cache);
    int rc = save_hot(m);
    for (int i = 0; i < ns; i++) {
        df_sampler_free(slot[i].smp);
        free(slot[i].logits);
        df_session_free(slot[i].s);
    }
    for (int i = 0; i < np; i++) {
        free(q[i].ids);
        free(q[i].out);
    }
    free(q);
    free(slot);
    free(ss);
    free(tp);
    free(n1);
    free(at);
    free(lp);
    df_model_free(m);
    return sig ? 128 + sig : rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : (x > y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* llama-bench's two measurements: prompt processing of p tokens in one batch,
 * and generation of n tokens one at a time, each from an empty cache; the
 * median over the repetitions after one warm-up round. */
static int cmd_bench(opts *o, int n_prompt) {
    o->ctx = n_prompt + o->n_predict + 1;
    o->batch = n_prompt > 0 ? n_prompt : 1; /* the session below: planned as it will be opened */
    df_model *m = load(o, NULL);
    const int nv = df_n_vocab(m), reps = o->reps > 0 ? o->reps : 5, ng = o->n_predict;
    char err[ERRLEN];
    df_session_params sp = df_session_default_params();
    sp.n_ctx = n_prompt + ng + 1;
    sp.n_batch = n_prompt > 0 ? n_prompt : 1;
    sp.kv_type = o->kv_f32 ? DF_KV_F32 : DF_KV_F16;
    df_session *s;
    if (df_session_new(m, &sp, &s, err, sizeof err) != 0) fail(err);
    /* Every pass (the warm-up, each repetition, its prompt and its generation) reads tokens of its own: under
     * --mem, a pass that repeated the one before would find the experts that pass left in the cache, a hit
     * rate no new text gives (in memory the tokens do not change the speed). */
    const int nt = n_prompt + (ng > 0 ? ng : 0);
    int32_t *toks = malloc((size_t)(nt > 0 ? nt : 1) * sizeof(int32_t));
    float *logits = malloc((size_t)nv * sizeof(float));
    double *pp = calloc((size_t)reps, sizeof(double)), *tg = calloc((size_t)reps, sizeof(double));
    if (!toks || !logits || !pp || !tg) fail("out of memory");
    uint64_t x = o->seed_set ? o->sp.seed : 42;
    df_io_stats io0, io1;
    double tg_secs = 0;
    memset(&io0, 0, sizeof io0);
    memset(&io1, 0, sizeof io1);
    for (int r = -1; r < reps; r++) {
        for (int i = 0; i < nt; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            toks[i] = (int32_t)((x >> 33) % (uint64_t)nv);
        }
        if (n_prompt > 0) {
            if (df_session_truncate(s, 0, err, sizeof err) != 0) fail(err);
            double t0 = df_time();
            if (df_decode(s, toks, n_prompt, logits, 0, err, sizeof err) != 0) fail(err);
            if (r >= 0) pp[r] = n_prompt / (df_time() - t0);
        }
        if (ng > 0) {
            if (df_session_truncate(s, 0, err, sizeof err) != 0) fail(err);
            df_model_io_stats(m, &io0);
            double t0 = df_time();
            for (int i = 0; i < ng; i++)
                if (df_decode(s, &toks[n_prompt + i], 1, logits, 0, err, sizeof err) != 0) fail(err);
            tg_secs = df_time() - t0;
            if (r >= 0) tg[r] = ng / tg_secs;
            df_model_io_stats(m, &io1);
        }
    }
    df_model_info info;
    df_model_get_info(m, &info);
    double pp_m = n_prompt > 0 ? median(pp, reps) : 0, tg_m = ng > 0 ? median(tg, reps) : 0;
    int threads = info.n_threads;
    /* the last generation round's disk traffic (streaming only) */
    const double rd = (double)(io1.bytes_read - io0.bytes_read), looks = (double)(io1.hits + io1.misses - io0.hits - io0.misses);
    if (o->json)
        printf("{\"pp_tokens\":%d,\"pp_tps\":%.2f,\"tg_tokens\":%d,\"tg_tps\":%.2f,\"threads\":%d,\"reps\":%d,"
               "\"model_bytes\":%llu,\"isa\":\"%s\",\"streaming\":%d,\"tg_disk_bytes_per_token\":%.0f,"
               "\"tg_disk_bytes_per_s\":%.0f,\"tg_hit_rate\":%.4f,\"tg_io_wait_fraction\":%.4f,\"io_engine\":\"%s\","
               "\"packed_bytes\":%llu,\"tg_lookahead_recall\":%.4f,\"tg_disk_idle_fraction\":%.4f}\n",
               n_prompt, pp_m, ng, tg_m, threads, reps, (unsigned long long)info.n_bytes, df_isa(), io1.streaming,
               ng ? rd / ng : 0.0, tg_secs > 0 ? rd / tg_secs : 0.0,
               looks > 0 ? (double)(io1.hits - io0.hits) / looks : 0.0,
               tg_secs > 0 ? (io1.wait_seconds - io0.wait_seconds) / tg_secs : 0.0,
               *io1.io_engine ? io1.io_engine : "none", (unsigned long long)info.packed_bytes,
               io1.lookahead_wanted > io0.lookahead_wanted ? (double)(io1.lookahead_got - io0.lookahead_got) /
                                                                 (double)(io1.lookahead_wanted - io0.lookahead_wanted)
                                                           : 0.0,
               tg_secs > 0 && io1.streaming ? (io1.disk_idle_seconds - io0.disk_idle_seconds) / tg_secs : 0.0);
    else
        printf("model %s (%.1f MiB), threads %d, isa %s, packed %.1f MiB\n  pp%-5d %10.2f tokens/s\n"
               "  tg%-5d %10.2f tokens/s\n",
               o->model, (double)info.n_bytes / (1 << 20), threads, df_isa(), (double)info.packed_bytes / (1 << 20),
               n_prompt, pp_m, ng, tg_m);
    free(pp);
    free(tg);
    free(toks);
    free(logits);
    const int rc = save_hot(m);
    df_session_free(s);
    df_model_free(m);
    return rc;
}

/* DELTAFIN_ISA caps the kernels; a value the library does not know is a mistake to report. */
static void check_isa_env(void) {
    const char *e = getenv("DELTAFIN_ISA");
    if (!e || !strcmp(e, "scalar") || !strcmp(e, "avx2") || !strcmp(e, "avx512") || !strcmp(e, "neon")) return;
    fprintf(stderr, "deltafin: DELTAFIN_ISA='%s' is not one of scalar, avx2, avx512, neon\n", e);
    exit(2);
}

/* DELTAFIN_AMX: auto (the default: the AMX tiles where the CPU has them),
 * off, or model (the AMX kernels on the software tile model; slow, for tests). */
static void check_amx_env(void) {
    const char *e = getenv("DELTAFIN_AMX");
    if (!e || !strcmp(e, "auto") || !strcmp(e, "off") || !strcmp(e, "model")) return;
    fprintf(stderr, "deltafin: DELTAFIN_AMX='%s' is not one of auto, off, model\n", e);
    exit(2);
}

static int dispatch(const char *cmd, int argc, char **argv, opts *o) {
    if (!strcmp(cmd, "bench")) {
        parse(cmd, argc, argv, o);
        return cmd_bench(o, o->n_prompt);
    }
    static const char *const known[] = {"run", "info", "tokenize", "logits", "plan"};
    int ok = 0;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) ok |= !strcmp(cmd, known[i]);
    if (!ok) {
        fprintf(stderr, "deltafin: unknown command '%s'\n", cmd);
        usage(stderr, 2);
    }
    parse(cmd, argc, argv, o);
    if (o->spec_tuned && o->spec == DF_SPEC_NONE && !strcmp(cmd, "run"))
        usage_error("--draft-max and --spec-k tune speculative decoding: give --spec lookup|draft|mtp (or -md)%s%s",
                    "", "");
    if (!strcmp(cmd, "run")) return o->batch_file ? cmd_run_batch(o) : cmd_run(o);
    if (!strcmp(cmd, "info")) return cmd_info(o);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(o);
    if (!strcmp(cmd, "logits")) return cmd_logits(o);
    return cmd_plan(o);
}

/* Started by mpirun with several processes (docs/cluster.md): rank 0 goes on
 * with the command; every other rank serves its share of the experts of the
 * models rank 0 loads, with its own -m (its copy of the model), --mem and -t
 * where its command line has them. Returns -1 on rank 0 (and alone), else
 * the exit status. */
static int cluster_join(int argc, char **argv) {
    char err[1024], path[4096];
    if (df_cluster_init(err, sizeof err) != DF_OK) {
        fprintf(stderr, "deltafin: %s\n", err);
        return 1;
    }
    if (df_cluster_rank() == 0) return -1;
    const char *model = NULL;
    uint64_t mem = 0;
    int threads = 0;
    for (int i = 2; i < argc; i++) { /* the command's options, as the table reads them; rank 0 says what is wrong */
        const char *a = argv[i];
        const size_t len = strcspn(a, "=");
        const cli_opt *o = a[0] == '-' ? cli_find(argv[1], a, len) : NULL;
        if (!o || o->kind == CLI_FLAG) continue;
        const char *v = a[len] == '=' ? a + len + 1 : i + 1 < argc ? argv[++i] : NULL;
        char want[128];
        cli_val x;
        if (!v || cli_check(o, v, &x, want, sizeof want)) continue;
        if (!strcmp(o->name, "--model")) model = v;
        else if (!strcmp(o->name, "--mem")) mem = x.size;
        else if (!strcmp(o->name, "--threads")) threads = (int)x.n;
    }
    /* a name rank 0 resolves the same way is the same path; a store name this rank cannot resolve: rank 0's path */
    if (model && df_model_resolve(model, path, sizeof path, err, sizeof err) == DF_OK) model = path;
    else model = NULL;
    if (df_cluster_worker(model, mem, threads, err, sizeof err) != DF_OK) {
        fprintf(stderr, "deltafin: rank %d: %s\n", df_cluster_rank(), err);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) usage(stderr, 2);
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) usage(stdout, 0);
    if (!strcmp(cmd, "--version")) {
        printf("deltafin %s\n", df_version());
        check_stdout();
        return 0;
    }
    check_isa_env();
    check_amx_env();
    if (!strcmp(cmd, "config")) return cfg_main(argc, argv);
    if (!strcmp(cmd, "models")) return cmd_models(argc, argv);
    if (!strcmp(cmd, "pull")) return cmd_pull(argc, argv);
    const int crc = cfg_apply(&argc, &argv);
    if (crc) return crc;
    const int hrc = hub_apply(&argc, &argv);
    if (hrc > 0) return hrc;
    const int wrc = cluster_join(argc, argv);
    if (wrc >= 0) return wrc;
    if (!strcmp(cmd, "serve")) return df_cmd_serve(argc, argv); /* server/serve.c */
    if (!strcmp(cmd, "chat")) return df_cmd_chat(argc, argv);   /* server/chat_cli.c */
    if (jobs_is_command(cmd)) return jobs_main(argc, argv); /* submit, jobs, job, cancel, worker: jobs/ */
    install_signals(!strcmp(cmd, "run"));
    opts o;
    const int rc = dispatch(cmd, argc, argv, &o);
    check_stdout();
    free(o.prompt_buf);
    df_planner_free(g_planner);
    return rc;
}
