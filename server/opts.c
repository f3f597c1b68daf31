/*
 * opts.c - the command-line options of `deltafin serve` and `deltafin chat`.
 *
 * The options, their values' checks and the help are cli/opts.c's table (the
 * one every command parses from); this file stores them in srv_opts and
 * checks what is the server's own (a template, the CORS origins, the API key).
 * A mistake prints one line naming it and exits with status 2.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "opts.h" /* the options of every command (cli/opts.c) */
#include "server.h"

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void bad(const char *fmt, const char *a) {
    fputs("deltafin: ", stderr);
    fprintf(stderr, fmt, a);
    fputs(" (deltafin --help lists the options)\n", stderr);
    exit(2);
}

/* The API key: --api-key or the first line of --api-key-file, whichever came last (the config file's api-key and
 * DELTAFIN_API_KEY arrive as an --api-key before the user's flags: cli/config.c; the file and the variable keep
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

/* One option (read and checked by cli_next: cli/opts.c), stored. */
static void store(srv_opts *o, const cli_val *v, const char **key_file, const char **db, int *pc_mem_set) {
    const char *s = v->s;
    const int n = (int)v->n;
    const float x = (float)v->x;
    if (cli_is(v, "--kv-f32")) o->kv_f32 = 1;
    else if (cli_is(v, "--page-cache")) o->page_cache = 1;
    else if (cli_is(v, "--jobs") || cli_is(v, "--worker")) {
        if (!o->jobs_db) o->jobs_db = "";
        o->worker |= cli_is(v, "--worker");
    }
    else if (cli_is(v, "--ignore-eos")) o->ignore_eos = 1;
    else if (cli_is(v, "--strict-model")) o->strict_model = 1;
    else if (cli_is(v, "--embeddings")) {} /* llama-server's: /v1/embeddings is always there */
    else if (cli_is(v, "--model")) o->model = s;
    else if (cli_is(v, "--chat-template-file")) o->template_file = s;
    else if (cli_is(v, "--chat-template")) o->template_text = template_arg(s);
    else if (cli_is(v, "--chat-template-kwargs")) o->template_kwargs = kwargs_arg(s);
    else if (cli_is(v, "--ctx-size")) o->ctx = n;
    else if (cli_is(v, "--threads")) o->threads = n;
    else if (cli_is(v, "--mem")) o->mem = v->size;
    else if (cli_is(v, "--split")) o->split_layers = !strcmp(s, "layers");
    else if (cli_is(v, "--kv")) o->kv_f32 = !strcmp(s, "f32");
    else if (cli_is(v, "--system-prompt")) o->system = s;
    else if (cli_is(v, "--n-predict")) o->n_predict = n;
    else if (cli_is(v, "--temp")) o->sp.temp = x;
    else if (cli_is(v, "--top-k")) o->sp.top_k = n;
    else if (cli_is(v, "--top-p")) o->sp.top_p = x;
    else if (cli_is(v, "--min-p")) o->sp.min_p = x;
    else if (cli_is(v, "--repeat-penalty")) o->sp.repeat_penalty = x;
    else if (cli_is(v, "--repeat-last-n")) o->sp.repeat_last_n = n;
    else if (cli_is(v, "--seed")) o->sp.seed = (uint64_t)n;
    else if (cli_is(v, "--grammar")) o->grammar = s, o->grammar_file = NULL;
    else if (cli_is(v, "--grammar-file")) o->grammar_file = s, o->grammar = NULL;
    else if (cli_is(v, "--host")) o->host = s;
    else if (cli_is(v, "--port")) o->port = n;
    else if (cli_is(v, "--api-key")) {
        if (!*s) bad("--api-key needs a key (an empty one would let anybody in)%s", "");
        o->api_key = s, *key_file = NULL;
    } else if (cli_is(v, "--api-key-file")) *key_file = s, o->api_key = NULL;
    else if (cli_is(v, "--remote")) o->remote = s;
    else if (cli_is(v, "--db")) *db = s;
    else if (cli_is(v, "--parallel")) o->parallel = n;
    else if (cli_is(v, "--queue")) o->queue = n;
    else if (cli_is(v, "--alias")) o->alias = s;
    else if (cli_is(v, "--cors")) o->cors = cors_arg(s);
    else if (cli_is(v, "--log-format")) o->log_format = !strcmp(s, "text") ? 0 : !strcmp(s, "json") ? 1 : 2;
    else if (cli_is(v, "--pooling"))
        o->pooling = !strcmp(s, "mean") ? SRV_POOL_MEAN : !strcmp(s, "last") ? SRV_POOL_LAST : SRV_POOL_CLS;
    else if (cli_is(v, "--max-conn-per-ip")) o->conn_per_ip = n;
    else if (cli_is(v, "--request-mem")) o->request_mem = v->size;
    else if (cli_is(v, "--jobs-db")) o->jobs_db = s;
    else if (cli_is(v, "--prompt-cache-dir")) o->pc_dir = s;
    else if (cli_is(v, "--prompt-cache-mem")) o->pc_mem = v->size, *pc_mem_set = 1;
    else if (cli_is(v, "--prompt-cache-disk")) o->pc_disk = v->size;
    else if (cli_is(v, "--prompt-cache-min")) o->pc_min = n;
    else bad("%s: an option this parser forgot", v->opt->name);
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
    const char *cmd = chat ? "chat" : "serve";
    cli_val v;
    for (int rc, i = 2; (rc = cli_next(cmd, argc, argv, &i, &v)) != CLI_END;) {
        if (rc == CLI_ERROR) exit(2);
        if (rc == CLI_ARG) bad("unexpected argument '%s'", v.s);
        if (cli_is(&v, "--help")) {
            cli_command_help(stdout, cmd);
            exit(0);
        }
        store(o, &v, &key_file, &db, &pc_mem_set);
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
