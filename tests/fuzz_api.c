/*
 * fuzz_api.c - libFuzzer target for what the server makes of a request body:
 * the OpenAI request reader (server/oai.c: JSON, fields, chat template,
 * tokenizing, stop strings) and /v1/jobs (server/jobs_api.c over the job
 * queue, jobs/).
 *
 * The input's first byte picks the route; the rest is the body:
 *   0  POST /v1/completions          2  POST /v1/jobs
 *   1  POST /v1/chat/completions     3  "METHOD URL\n" then the body, to /v1/jobs...
 * A request that parses becomes jobs whose "generated" text is the body's
 * bytes, then a response, a stream chunk and the usage chunk are made from
 * them, as serve.c does. Every outcome must be an answer (2xx or 4xx with
 * an OpenAI-shaped error); a crash, a sanitizer report, a leak or a hang is
 * a bug. The model is FUZZ_MODEL (a small model with a chat template that
 * tests/fuzz.sh makes); the queue lives in a fresh database under TMPDIR,
 * started over every 20,000 inputs so it stays small.
 * Built and run by tests/fuzz.sh (FUZZ_TARGET=api).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deltafin.h"
#include "server.h"

static df_model *g_model;
static srv_jobs *g_jobs;
static oai_ctx g_oc;
static char g_dir[256], g_db[320];
static const char *g_path;
static long g_runs;

static void die(const char *what, const char *err) {
    fprintf(stderr, "fuzz_api: %s: %s\n", what, err);
    exit(2);
}

static void jobs_restart(void) {
    char err[1024];
    if (g_jobs) srv_jobs_close(g_jobs);
    g_jobs = NULL;
    unlink(g_db);
    char side[400];
    snprintf(side, sizeof side, "%s-wal", g_db), unlink(side);
    snprintf(side, sizeof side, "%s-shm", g_db), unlink(side);
    const srv_jobs_limits lim = {1ull << 30, g_oc.n_ctx, 2, NULL, df_chat_template(g_model) != NULL};
    if (srv_jobs_open(g_db, g_path, g_oc.name, &lim, &g_jobs, err, sizeof err) != 0) die("jobs", err);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char err[512];
    g_path = getenv("FUZZ_MODEL");
    if (!g_path) die("FUZZ_MODEL", "not set");
    df_model_params mp = df_model_default_params();
    if (df_model_load(g_path, &mp, &g_model, err, sizeof err) != 0) die(g_path, err);
    g_oc.m = g_model;
    g_oc.name = "fuzz";
    g_oc.n_ctx = 256;
    g_oc.max_piece = 64;
    g_oc.max_values = 2L * g_oc.n_ctx + 65536;
    const char *tmp = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/fuzz-api-XXXXXX", tmp ? tmp : "/tmp");
    if (!mkdtemp(g_dir)) die("mkdtemp", g_dir);
    snprintf(g_db, sizeof g_db, "%s/jobs.db", g_dir);
    jobs_restart();
    return 0;
}

/* What serve.c makes of a parsed request, with text as every choice's output. */
static void respond(const oai_req *r, const char *text, size_t n) {
    srv_job **jobs = oai_make_jobs(r);
    if (!jobs) return;
    for (int i = 0; i < r->n; i++) {
        srv_job *j = jobs[i];
        j->text = malloc(n + 1);
        if (j->text) memcpy(j->text, text, n), j->text[n] = 0, j->len = j->cap = n;
        j->n_gen = (int)(n % 7);
        j->finish = (i & 1) ? FIN_LENGTH : FIN_STOP;
        int which = -1;
        (void)srv_find_stop(j, 0, &which);
        (void)srv_safe_len(j);
        char *chunk = oai_chunk(&g_oc, r, "id", 1, i, j->text ? j->text : "", j->finish, i == 0);
        free(chunk);
    }
    free(oai_response(&g_oc, r, jobs, "id", 1));
    free(oai_usage_chunk(&g_oc, r, jobs, "id", 1));
    for (int i = 0; i < r->n; i++) srv_job_free(jobs[i]);
    free(jobs);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (++g_runs % 20000 == 0) jobs_restart();
    int route = data[0] & 3;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    if (route <= 1) {
        oai_req r;
        oai_error e;
        memset(&e, 0, sizeof e);
        if (oai_parse(&g_oc, body, len, route, &r, &e) == 0) {
            respond(&r, body, len);
            oai_req_free(&r);
        } else {
            if (e.status < 400 || e.status > 499) abort(); /* a bad body is the client's error */
            free(oai_error_json(&e));
        }
        /* the same bytes to llama-server's extras: an answer, or a 4xx */
        char *(*const extra[3])(const oai_ctx *, const char *, size_t, oai_error *) = {oai_tokenize, oai_detokenize,
                                                                                      oai_apply_template};
        for (int k = 0; k < 3; k++) {
            memset(&e, 0, sizeof e);
            char *out = extra[k](&g_oc, body, len, &e);
            if (!out && (e.status < 400 || e.status > 499)) abort();
            if (out) free(out);
            else free(oai_error_json(&e));
        }
        /* and to Ollama's: its translation must parse, or be a 4xx (or the 200 of "load the model") */
        for (int chat = 0; chat < 2; chat++) {
            int stream = 0, as_chat = 0, status = 0;
            char *err_json = NULL, *t = ollama_to_openai(&g_oc, body, len, chat, &stream, &as_chat, &status, &err_json);
            if (!t && !err_json) abort();
            if (!t && status != 200 && (status < 400 || status > 499)) abort();
            if (t) {
                memset(&e, 0, sizeof e);
                if (oai_parse(&g_oc, t, strlen(t), as_chat, &r, &e) == 0) oai_req_free(&r);
                else if (e.status < 400 || e.status > 499) abort();
            }
            free(t);
            free(err_json);
        }
        int status = 0;
        free(ollama_show(&g_oc, body, len, &status));
        /* and to Anthropic's: a translation that parses, or a 4xx; then its answer shapes */
        for (int count = 0; count < 2; count++) {
            int stream = 0;
            char *err_json = NULL, *t = anth_to_openai(&g_oc, body, len, count, &stream, &status, &err_json);
            if (!t && (!err_json || status < 400 || status > 499)) abort();
            if (t && !count) {
                memset(&e, 0, sizeof e);
                if (oai_parse(&g_oc, t, strlen(t), 1, &r, &e) == 0) {
                    srv_job **jobs = oai_make_jobs(&r);
                    if (jobs) {
                        jobs[0]->text = strdup(t), jobs[0]->len = strlen(t), jobs[0]->stop_hit = r.n_stop - 1;
                        jobs[0]->finish = FIN_STOP;
                        free(anth_message(&g_oc, jobs[0], r.n_prompt, "msg_1"));
                        free(anth_stream_start(&g_oc, "msg_1", r.n_prompt));
                        free(anth_stream_delta(t, strlen(t)));
                        free(anth_stream_end(jobs[0], r.n_prompt));
                        for (int i = 0; i < r.n; i++) srv_job_free(jobs[i]);
                        free(jobs);
                    }
                    oai_req_free(&r);
                } else if (e.status < 400 || e.status > 499) {
                    abort();
                }
            }
            free(t);
            free(err_json);
        }
        free(anth_count_tokens(&g_oc, body, len, &status));
        if (status != 200 && (status < 400 || status > 499)) abort();
        /* and to /v1/embeddings: its inputs, or a 4xx; then the answer's shape (zero vectors) */
        embed_req er;
        memset(&e, 0, sizeof e);
        if (embed_parse(&g_oc, body, len, 8, &er, &e) == 0) {
            srv_job **jobs = embed_make_jobs(&er, SRV_POOL_MEAN);
            for (int i = 0; jobs && i < er.n; i++) jobs[i]->embd = calloc(4, sizeof(float)), jobs[i]->n_embd = 4;
            if (jobs) free(embed_response(&g_oc, &er, jobs));
            for (int i = 0; jobs && i < er.n; i++) srv_job_free(jobs[i]);
            free(jobs);
            embed_req_free(&er);
        } else if (e.status < 400 || e.status > 499) {
            abort();
        }
        return 0;
    }
    char method[16] = "POST", url[512] = "/v1/jobs";
    if (route == 3) {
        const char *nl = memchr(body, '\n', len);
        if (!nl) return 0;
        char line[600];
        size_t ln = (size_t)(nl - body);
        if (ln >= sizeof line) return 0;
        memcpy(line, body, ln), line[ln] = 0;
        if (sscanf(line, "%15s %511s", method, url) != 2 || strncmp(url, "/v1/jobs", 8) != 0) return 0;
        len -= ln + 1, body = nl + 1;
    }
    /* serve.c hands the handler a NUL-terminated copy of the body */
    char *copy = malloc(len + 1);
    if (!copy) return 0;
    memcpy(copy, body, len), copy[len] = 0;
    int status = 0;
    char *out = srv_jobs_handle(g_jobs, method, url, copy, len, &status);
    if (out && (status < 200 || (status > 299 && status < 400) || status > 599)) abort();
    if (out && status >= 500 && status != 503) {
        fprintf(stderr, "fuzz_api: %s %s -> %d %s\n", method, url, status, out);
        abort(); /* the server's own failure on a client's input */
    }
    free(out);
    free(copy);
    return 0;
}
