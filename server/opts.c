/*
 * opts.c - the command-line options of `deltafin serve` and `deltafin chat`.
 *
 * Spelled as the rest of the CLI (llama.cpp's names; --flag=value works).
 * A mistake prints one line naming it and exits with status 2.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f, int chat, int status) {
    if (chat)
        fprintf(f, "usage: deltafin chat -m MODEL [-sys TEXT] [--chat-template-file F | --chat-template NAME]\n"
                   "                     [--chat-template-kwargs JSON] [-c CTX] [-t THREADS]\n"
                   "                     [--mem SIZE] [-n MAX_TOKENS] [--temp T] [--top-k K] [--top-p P] [--min-p P]\n"
                   "                     [--repeat-penalty R] [--seed S] [--kv f16|f32] [--ignore-eos] [--page-cache]\n"
                   "                     [--grammar GBNF | --grammar-file FILE] (every answer in llama.cpp's GBNF)\n"
                   "                     [--split layers|experts] (under mpirun: docs/cluster.md)\n"
                   "  --chat-template: chatml, llama3, phi3, zephyr, gemma, mistral-v7, deepseek3 (llama.cpp's), or a\n"
                   "  Jinja template; --chat-template-kwargs '{\"enable_thinking\":false}': variables for the template\n"
                   "  in the chat: /help, /set system|temp|top-k|top-p|min-p|repeat-penalty|seed|n VALUE, /info, /clear,\n"
                   "  /save FILE, /load FILE, /exit; \"\"\" starts and ends a message of several lines (a pasted text is\n"
                   "  one message); Ctrl-C stops an answer, clears the line, and leaves when pressed twice (or Ctrl-D);\n"
                   "  the input history is kept in $XDG_DATA_HOME/deltafin/chat_history\n");
    else
        fprintf(f, "usage: deltafin serve -m MODEL [--host 127.0.0.1] [--port 8080] [--api-key K | --api-key-file F]\n"
                   "                      [--parallel N] [--queue N] [--mem SIZE] [-c CTX] [-t THREADS] [--alias NAME]\n"
                   "                      [--chat-template-file F | --chat-template NAME] [--chat-template-kwargs JSON]\n"
                   "                      [--kv f16|f32] [--page-cache] [--jobs] [--jobs-db PATH] [--worker]\n"
                   "                      [--cors ORIGIN[,ORIGIN] | --cors '*'] [--strict-model] [--log-format text|json|none]\n"
                   "                      [--pooling mean|last|cls] [--split layers|experts] (under mpirun: docs/cluster.md)\n"
                   "                      [--db PATH] [--remote URL] [--max-conn-per-ip N (256)] [--request-mem SIZE]\n"
                   "                      [--prompt-cache-dir DIR] [--prompt-cache-mem SIZE (256M; 0 under --mem)]\n"
                   "                      [--prompt-cache-disk SIZE (4G)] [--prompt-cache-min TOKENS (32)]\n"
                   "  a chat page at /; OpenAI's API (/v1/chat/completions /v1/completions /v1/embeddings /v1/models),\n"
                   "  Anthropic's (/v1/messages), Ollama's (/api/chat ...), /health /metrics, and llama-server's /tokenize\n"
                   "  /detokenize /apply-template /props /slots (docs/server.md); --pooling: how /v1/embeddings pools the\n"
                   "  last hidden states (mean: the default); --cors: pages of these origins may\n"
                   "  call it; --strict-model: a request naming another model is refused (else the model answers it);\n"
                   "  --log-format: a line on stderr per request (method, path, status, tokens, time, tokens/s)\n"
                   "  --jobs: also /v1/jobs, the durable job queue (docs/jobs.md); --jobs-db PATH: on that database\n"
                   "  (implies --jobs); --worker: run `deltafin worker` on it beside the server (implies --jobs);\n"
                   "  --db PATH: the database --jobs uses; --remote URL: where HTTP jobs may go (docs/jobs.md)\n"
                   "  the key may come from DELTAFIN_API_KEY; without one, pages of other sites are refused\n");
    exit(status);
}

static void bad(const char *fmt, const char *a) {
    fputs("deltafin: ", stderr);
    fprintf(stderr, fmt, a);
    fputs(" (deltafin --help lists the options)\n", stderr);
    exit(2);
}

static long num(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "deltafin: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, v);
        exit(2);
    }
    return x;
}

static float fnum(const char *flag, const char *v, double lo, double hi) {
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x < lo || x > hi) {
        fprintf(stderr, "deltafin: %s expects a number in [%g, %g], got '%s'\n", flag, lo, hi, v);
        exit(2);
    }
    return (float)x;
}

/* 6G, 512M, 1.5GiB, 4096 (bytes): df_parse_size, as the rest of the CLI reads it */
static uint64_t size_arg(const char *flag, const char *v) {
    if (strcmp(flag, "--mem") != 0 && !strcmp(v, "0")) return 0; /* a cache size 0: off */
    const uint64_t n = df_parse_size(v);
    if (!n) {
        fprintf(stderr, "deltafin: %s expects a size like 6G, 512M or 1.5GiB, got '%s'\n", flag, v);
        exit(2);
    }
    return n;
}

/* The API key: --api-key or the first line of --api-key-file, whichever came last (the config file's api-key and
 * DELTAFIN_API_KEY arrive as an --api-key before the user's flags: jobs/config.c; the file and the variable keep
 * the key out of `ps`); NULL if none. An empty key is refused: it would let anybody in. */
static const char *api_key(const char *flag, const char *file) {
    if (flag) return flag;
    if (file) {
        char err[512];
        size_t n = 0;
        char *k = df_read_input(file, 4096, DF_INPUT_TEXT, &n, NULL, err, sizeof err);
        if (!k) bad("--api-key-file: %s", err);
        k[strcspn(k, "\r\n")] = 0;
        if (!*k) bad("--api-key-file %s: the first line is empty", file);
        return k; /* kept for the server's life */
    }
    return NULL;
}

/* --chat-template: a built-in format's name (llama.cpp's), else a Jinja template given inline. */
static const char *template_arg(const char *v) {
    const char *t = df_chat_template_builtin(v);
    if (t) return t;
    if (strstr(v, "{{") || strstr(v, "{%")) return v;
    char names[256] = "";
    for (int i = 0; df_chat_template_builtin_name(i); i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                 df_chat_template_builtin_name(i));
    fprintf(stderr, "deltafin: --chat-template '%s' is not a built-in format (%s) nor a Jinja template "
            "(--chat-template-file reads one from a file)\n", v, names);
    exit(2);
}

/* --cors ORIGIN[,ORIGIN]: each "*" or scheme://host[:port], as a browser sends its Origin (no path, no spaces). */
static const char *cors_arg(const char *v) {
    for (const char *p = v; *p;) {
        const size_t n = strcspn(p, ",");
        const size_t scheme = n > 7 && !strncmp(p, "http://", 7) ? 7 : n > 8 && !strncmp(p, "https://", 8) ? 8 : 0;
        int ok = (n == 1 && *p == '*') || scheme;
        for (size_t i = scheme; ok && i < n; i++) ok = (unsigned char)p[i] > 0x20 && p[i] != '/';
        if (!ok) bad("--cors takes origins like http://localhost:3000 (or *), comma-separated, not '%s'", v);
        p += n + (p[n] == ',');
    }
    return v;
}

/* --chat-template-kwargs: a JSON object. */
static const char *kwargs_arg(const char *v) {
    cJSON *j = cJSON_Parse(v);
    const int ok = cJSON_IsObject(j);
    cJSON_Delete(j);
    if (!ok) bad("--chat-template-kwargs expects a JSON object like '{\"enable_thinking\":false}', not '%s'", v);
    return v;
}

void srv_parse_opts(int argc, char **argv, srv_opts *o, int chat) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->parallel = 4;
    o->queue = 256;
    o->conn_per_ip = 256;
    o->n_predict = chat ? 1024 : 0;
    o->pc_disk = (uint64_t)4 << 30;
    o->pc_min = 32;
    o->pooling = SRV_POOL_MEAN;
    int pc_mem_set = 0;
    const char *key_file = NULL, *db = NULL;
    o->sp = df_sampler_default_params();
    if (chat) o->sp.temp = 0.7f, o->sp.seed = (uint64_t)time(NULL);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        char name[64];
        const char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        if (a[0] != '-' || nl >= sizeof name) bad("unexpected argument '%s'", a);
        memcpy(name, a, nl);
        name[nl] = 0;
        if (!strcmp(name, "-h") || !strcmp(name, "--help")) usage(stdout, chat, 0);
        if (!strcmp(name, "--kv-f32")) { o->kv_f32 = 1; continue; }
        if (!strcmp(name, "--page-cache")) { o->page_cache = 1; continue; }
        if (!chat && (!strcmp(name, "--jobs") || !strcmp(name, "--worker"))) {
            if (!o->jobs_db) o->jobs_db = "";
            o->worker |= !strcmp(name, "--worker");
            continue;
        }
        if (chat && !strcmp(name, "--ignore-eos")) { o->ignore_eos = 1; continue; }
        if (!chat && !strcmp(name, "--strict-model")) { o->strict_model = 1; continue; }
        if (!chat && (!strcmp(name, "--embeddings") || !strcmp(name, "--embedding"))) continue; /* llama-server's:
                                                                  /v1/embeddings is always there */
        static const char *const with_value[] = {"-m", "--model", "--chat-template-file", "--chat-template",
                                                 "--chat-template-kwargs", "-c", "--ctx-size", "-t",
                                                 "--threads", "--mem", "--kv", "-sys", "--system-prompt", "-n",
                                                 "--n-predict", "--temp", "--top-k", "--top-p", "--min-p",
                                                 "--repeat-penalty", "--seed", "-s", "--host", "--port", "--api-key",
                                                 "--parallel", "-np", "--queue", "--alias", "--jobs-db",
                                                 "--prompt-cache-dir", "--prompt-cache-mem", "--prompt-cache-disk",
                                                 "--prompt-cache-min", "--api-key-file", "--remote", "--db",
                                                 "--max-conn-per-ip", "--request-mem", "--cors", "--log-format",
                                                 "--pooling", "--grammar", "--grammar-file", "--split"};
        int known = 0;
        for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++) known |= !strcmp(name, with_value[k]);
        if (!known) bad("unknown option '%s'", name);
        if (eq) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        else bad("%s needs a value", name);
        if (!strcmp(name, "-m") || !strcmp(name, "--model")) o->model = v;
        else if (!strcmp(name, "--chat-template-file")) o->template_file = v;
        else if (!strcmp(name, "--chat-template")) o->template_text = template_arg(v);
        else if (!strcmp(name, "--chat-template-kwargs")) o->template_kwargs = kwargs_arg(v);
        else if (!strcmp(name, "-c") || !strcmp(name, "--ctx-size")) o->ctx = (int)num(name, v, 0, 1 << 24);
        else if (!strcmp(name, "-t") || !strcmp(name, "--threads")) o->threads = (int)num(name, v, 1, 512);
        else if (!strcmp(name, "--mem")) o->mem = size_arg(name, v);
        else if (!strcmp(name, "--split")) {
            if (strcmp(v, "layers") && strcmp(v, "experts")) bad("--split is layers or experts, not '%s'", v);
            o->split_layers = !strcmp(v, "layers");
        }
        else if (!strcmp(name, "--kv")) {
            if (!strcmp(v, "f32")) o->kv_f32 = 1;
            else if (strcmp(v, "f16")) bad("--kv is f16 or f32, not '%s'", v);
        } else if (chat && (!strcmp(name, "-sys") || !strcmp(name, "--system-prompt"))) o->system = v;
        else if (chat && (!strcmp(name, "-n") || !strcmp(name, "--n-predict"))) o->n_predict = (int)num(name, v, 1, 1 << 24);
        else if (chat && !strcmp(name, "--temp")) o->sp.temp = fnum(name, v, 0, 1e6);
        else if (chat && !strcmp(name, "--top-k")) o->sp.top_k = (int)num(name, v, 0, 1 << 24);
        else if (chat && !strcmp(name, "--top-p")) o->sp.top_p = fnum(name, v, 0, 1);
        else if (chat && !strcmp(name, "--min-p")) o->sp.min_p = fnum(name, v, 0, 1);
        else if (chat && !strcmp(name, "--repeat-penalty")) o->sp.repeat_penalty = fnum(name, v, 1e-6, 1e6);
        else if (chat && (!strcmp(name, "--seed") || !strcmp(name, "-s"))) o->sp.seed = (uint64_t)num(name, v, 0, 0x7fffffffL);
        else if (chat && !strcmp(name, "--grammar")) o->grammar = v, o->grammar_file = NULL;
        else if (chat && !strcmp(name, "--grammar-file")) o->grammar_file = v, o->grammar = NULL;
        else if (!chat && !strcmp(name, "--host")) o->host = v;
        else if (!chat && !strcmp(name, "--port")) o->port = (int)num(name, v, 0, 65535);
        else if (!chat && !strcmp(name, "--api-key")) {
            if (!*v) bad("--api-key needs a key (an empty one would let anybody in)%s", "");
            o->api_key = v, key_file = NULL;
        } else if (!chat && !strcmp(name, "--api-key-file")) key_file = v, o->api_key = NULL;
        else if (!chat && !strcmp(name, "--remote")) {
            if (strncmp(v, "http://", 7) && strncmp(v, "https://", 8)) bad("--remote needs an http:// or https:// URL, not '%s'", v);
            o->remote = v;
        } else if (!chat && !strcmp(name, "--db")) {
            if (!*v) bad("--db needs a path%s", "");
            db = v;
        }
        else if (!chat && (!strcmp(name, "--parallel") || !strcmp(name, "-np"))) o->parallel = (int)num(name, v, 1, 256);
        else if (!chat && !strcmp(name, "--queue")) o->queue = (int)num(name, v, 0, 1 << 20);
        else if (!chat && !strcmp(name, "--alias")) o->alias = v;
        else if (!chat && !strcmp(name, "--cors")) o->cors = cors_arg(v);
        else if (!chat && !strcmp(name, "--log-format")) {
            o->log_format = !strcmp(v, "text") ? 0 : !strcmp(v, "json") ? 1 : !strcmp(v, "none") ? 2 : -1;
            if (o->log_format < 0) bad("--log-format is text, json or none, not '%s'", v);
        }
        else if (!chat && !strcmp(name, "--pooling")) {
            o->pooling = !strcmp(v, "mean") ? SRV_POOL_MEAN : !strcmp(v, "last") ? SRV_POOL_LAST
                         : !strcmp(v, "cls") ? SRV_POOL_CLS : SRV_POOL_NONE;
            if (o->pooling == SRV_POOL_NONE) bad("--pooling is mean, last or cls, not '%s'", v);
        }
        else if (!chat && !strcmp(name, "--max-conn-per-ip")) o->conn_per_ip = (int)num(name, v, 0, 1 << 20);
        else if (!chat && !strcmp(name, "--request-mem")) o->request_mem = size_arg(name, v);
        else if (!chat && !strcmp(name, "--jobs-db")) {
            if (!*v) bad("--jobs-db needs a path%s", "");
            o->jobs_db = v;
        }
        else if (!chat && !strcmp(name, "--prompt-cache-dir")) o->pc_dir = v;
        else if (!chat && !strcmp(name, "--prompt-cache-mem")) o->pc_mem = size_arg(name, v), pc_mem_set = 1;
        else if (!chat && !strcmp(name, "--prompt-cache-disk")) o->pc_disk = size_arg(name, v);
        else if (!chat && !strcmp(name, "--prompt-cache-min")) o->pc_min = (int)num(name, v, 1, 1 << 24);
        else bad("unknown option '%s'", name);
    }
    if (o->template_file && o->template_text) bad("give --chat-template-file or --chat-template, not both%s", "");
    /* --db (the config file's db): the job database, where --jobs or --worker asks for the default one */
    if (db && o->jobs_db && !*o->jobs_db) o->jobs_db = db;
    if (!chat) o->api_key = api_key(o->api_key, key_file);
    /* the memory prefix cache is inside --mem's budget (serve.c): off under --mem unless asked for */
    if (!pc_mem_set) o->pc_mem = o->mem ? 0 : (uint64_t)256 << 20;
    if (!o->model) {
        fprintf(stderr, "deltafin: -m MODEL is required\n");
        exit(2);
    }
    static char model_path[4096]; /* -m NAME of a model store (hf:, ollama:, ...): its file */
    char err[1024];
    if (df_model_resolve(o->model, model_path, sizeof model_path, err, sizeof err) != DF_OK) {
        fprintf(stderr, "deltafin: %s\n", err);
        exit(1);
    }
    o->model = model_path;
}

char *srv_read_file(const char *path, size_t max, char *err, size_t errlen) {
    return df_read_input(path, max, DF_INPUT_TEXT, NULL, NULL, err, errlen);
}
