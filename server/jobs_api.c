/*
 * jobs_api.c - the durable job queue over HTTP (`deltafin serve --jobs`):
 *
 *   POST   /v1/jobs      submit: {"prompt": TEXT} or {"messages": [...]}, and
 *                        max_tokens, temperature, top_k, top_p, min_p,
 *                        repeat_penalty, repeat_last_n, seed, ignore_eos,
 *                        n_ctx, threads, mem ("12G" or bytes), deadline (Unix seconds),
 *                        priority: the fields of `deltafin submit`, within the
 *                        operator's limits (srv_jobs_limits); the remote
 *                        endpoint (serve --remote) and the page cache
 *                        (serve --page-cache) are the operator's, never
 *                        the client's: a request naming either is refused
 *   GET    /v1/jobs      {"object": "list", "data": [job, ...]}
 *   GET    /v1/jobs/ID   one job: state, tokens, text, events, stats
 *   DELETE /v1/jobs/ID   cancel it (409 if it has already ended)
 *
 * A job object is exactly `deltafin job ID --json` (jobs/job_json.c). Jobs
 * run the served model's file, in a worker (`serve --worker` starts one
 * beside the server; any `deltafin worker` on the same database will do):
 * the server itself only reads and writes the queue. Bad input is a 4xx
 * with an OpenAI-shaped error body. One SQLite connection, used under a
 * mutex (libmicrohttpd answers from a thread per connection).
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "job_json.h"
#include "queue.h"
#include "server.h"

#define ERRLEN 1024
#define JOB_MAX_VALUES (1L << 20) /* JSON values one submission may hold */

struct srv_jobs {
    jq *q;
    pthread_mutex_t mu;
    char *model;       /* absolute path of the served model */
    const char *name;  /* the served model's id */
    srv_jobs_limits lim;
};

int srv_jobs_open(const char *db_path, const char *model_path, const char *name, const srv_jobs_limits *lim,
                  srv_jobs **out, char *err, size_t errlen) {
    char def[4096];
    if (!db_path || !*db_path) {
        if (jq_default_path(def, sizeof def, err, errlen) != 0) return -1;
        db_path = def;
    }
    srv_jobs *j = calloc(1, sizeof *j);
    if (!j) return snprintf(err, errlen, "out of memory"), -1;
    if (!(j->model = realpath(model_path, NULL))) {
        snprintf(err, errlen, "%s: %s", model_path, strerror(errno));
        free(j);
        return -1;
    }
    if (jq_open(db_path, &j->q, err, errlen) != 0) {
        free(j->model);
        free(j);
        return -1;
    }
    pthread_mutex_init(&j->mu, NULL);
    j->name = name;
    j->lim = *lim;
    if (j->lim.threads <= 0) {
        const long n = sysconf(_SC_NPROCESSORS_ONLN);
        j->lim.threads = n > 0 && n < 512 ? (int)n : 512;
    }
    if (j->lim.n_ctx <= 0) j->lim.n_ctx = 1 << 24;
    *out = j;
    return 0;
}

void srv_jobs_close(srv_jobs *j) {
    if (!j) return;
    jq_close(j->q);
    pthread_mutex_destroy(&j->mu);
    free(j->model);
    free(j);
}

/* ---- answers ---- */

static char *error_body(int *status, int code, const char *type, const char *param, const char *ecode,
                        const char *msg) {
    oai_error e;
    oai_set_error(&e, code, type, param, ecode, "%s", msg);
    *status = code;
    return oai_error_json(&e);
}

static char *internal(int *status, const char *msg) { return error_body(status, 500, "server_error", NULL, NULL, msg); }

/* The job as JSON (its text, events and stats), appended to f. 0, -1 (err), 1 (no such job). Under mu. */
static int write_job(srv_jobs *sj, int64_t id, FILE *f, char *err, size_t errlen) {
    jq_job j;
    int found = 0;
    if (jq_get(sj->q, id, 1, &j, &found, err, errlen) != 0) return -1;
    if (!found) return 1;
    char *ev = NULL, *st = NULL;
    int rc = jq_history(sj->q, id, &ev, &st, err, errlen);
    if (rc == 0) jq_write_json(f, &j, ev, st);
    free(ev);
    free(st);
    jq_job_free(&j);
    return rc;
}

/* One job's object, or 404. Under mu. */
static char *job_answer(srv_jobs *sj, int64_t id, int *status) {
    char err[ERRLEN];
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return internal(status, "out of memory");
    const int rc = write_job(sj, id, f, err, sizeof err);
    if (fclose(f) != 0 || rc != 0) {
        free(buf);
        if (rc == 1) {
            snprintf(err, sizeof err, "no job %lld", (long long)id);
            return error_body(status, 404, "invalid_request_error", "id", "job_not_found", err);
        }
        return internal(status, rc < 0 ? err : "out of memory");
    }
    *status = 200;
    return buf;
}

static char *list_answer(srv_jobs *sj, int *status) {
    char err[ERRLEN];
    jq_job *v = NULL;
    int n = 0;
    if (jq_list(sj->q, &v, &n, err, sizeof err) != 0) return internal(status, err);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    int rc = f ? 0 : -1;
    if (f) fputs("{\"object\":\"list\",\"data\":[", f);
    for (int i = 0; i < n; i++) {
        if (rc == 0 && i) fputc(',', f);
        if (rc == 0) rc = write_job(sj, v[i].id, f, err, sizeof err) < 0 ? -1 : 0;
        jq_job_free(&v[i]);
    }
    free(v);
    if (f) fputs("]}", f);
    if ((f && fclose(f) != 0) || rc != 0) {
        free(buf);
        return internal(status, f && rc ? err : "out of memory");
    }
    *status = 200;
    return buf;
}

/* ---- POST /v1/jobs ---- */

/* mem: a size string ("12G") or a number of bytes. */
static int get_mem(cJSON *body, uint64_t *out, oai_error *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "mem");
    if (!v || cJSON_IsNull(v)) return 0;
    if (cJSON_IsString(v)) *out = df_parse_size(v->valuestring);
    else if (cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble < 1.8e19) *out = (uint64_t)v->valuedouble;
    else *out = 0;
    if (*out) return 0;
    oai_set_error(e, 400, "invalid_request_error", "mem", NULL, "'mem' must be a size like \"12G\" or a number of bytes");
    return -1;
}

/* The prompt: "prompt" (a string) or "messages" (a list, kept as {"messages": [...]} for the worker to render). */
static int get_prompt(cJSON *body, int chat, jq_job *j, oai_error *e) {
    cJSON *p = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    cJSON *m = cJSON_GetObjectItemCaseSensitive(body, "messages");
    if (!!p == !!m) {
        oai_set_error(e, 400, "invalid_request_error", p ? "messages" : "prompt", NULL,
                      "give exactly one of 'prompt' (a string) and 'messages' (a list)");
        return -1;
    }
    if (p) {
        if (!cJSON_IsString(p)) {
            oai_set_error(e, 400, "invalid_request_error", "prompt", NULL, "'prompt' must be a string");
            return -1;
        }
        j->prompt_len = strlen(p->valuestring);
        j->prompt = strdup(p->valuestring);
    } else {
        if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) == 0) {
            oai_set_error(e, 400, "invalid_request_error", "messages", NULL, "'messages' must be a non-empty list");
            return -1;
        }
        if (!chat) {
            oai_set_error(e, 400, "invalid_request_error", "messages", NULL,
                          "the model has no chat template (tokenizer.chat_template) to render 'messages' with");
            return -1;
        }
        cJSON *w = cJSON_CreateObject();
        cJSON *dup = cJSON_Duplicate(m, 1);
        if (w && dup && cJSON_AddItemToObject(w, "messages", dup)) dup = NULL;
        cJSON_Delete(dup);
        j->prompt = w ? cJSON_PrintUnformatted(w) : NULL;
        cJSON_Delete(w);
        j->prompt_len = j->prompt ? strlen(j->prompt) : 0;
        j->chat = 1;
    }
    if (!j->prompt) oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
    return j->prompt ? 0 : -1;
}

/* The resources a request asks for, against the operator's limits. 0, or -1 with e (400). */
static int within_limits(const srv_jobs_limits *lim, long ctx, long threads, uint64_t mem, oai_error *e) {
    if (ctx > lim->n_ctx) {
        oai_set_error(e, 400, "invalid_request_error", "n_ctx", NULL, "'n_ctx' is at most %d on this server", lim->n_ctx);
        return -1;
    }
    if (threads > lim->threads) {
        oai_set_error(e, 400, "invalid_request_error", "threads", NULL, "'threads' is at most %d on this server",
                      lim->threads);
        return -1;
    }
    if (lim->mem && mem > lim->mem) {
        oai_set_error(e, 400, "invalid_request_error", "mem", NULL,
                      "'mem' is at most the server's budget, %llu bytes", (unsigned long long)lim->mem);
        return -1;
    }
    return 0;
}

/* The request's fields into j (already holding the defaults). 0, or -1 with e. */
static int parse_job(const srv_jobs *sj, cJSON *body, jq_job *j, oai_error *e) {
    if (!cJSON_IsObject(body)) {
        oai_set_error(e, 400, "invalid_request_error", NULL, NULL, "the body must be a JSON object");
        return -1;
    }
    cJSON *model = cJSON_GetObjectItemCaseSensitive(body, "model");
    if (model && !cJSON_IsNull(model) && (!cJSON_IsString(model) || strcmp(model->valuestring, sj->name))) {
        oai_set_error(e, 404, "invalid_request_error", "model", "model_not_found",
                      "this server runs jobs on '%s' only", sj->name);
        return -1;
    }
    long n_predict = j->n_predict, ctx = 0, threads = 0, top_k = j->sp.top_k, last_n = j->sp.repeat_last_n;
    long priority = 0, seed = (long)j->sp.seed;
    double temp = j->sp.temp, top_p = j->sp.top_p, min_p = j->sp.min_p, rp = j->sp.repeat_penalty, deadline = 0;
    if (oai_get_int(body, "max_tokens", 1, 1 << 24, &n_predict, e) || oai_get_int(body, "n_ctx", 0, 1 << 24, &ctx, e) ||
        oai_get_int(body, "threads", 0, 512, &threads, e) || oai_get_int(body, "top_k", 0, 1 << 24, &top_k, e) ||
        oai_get_int(body, "repeat_last_n", 0, 1 << 24, &last_n, e) ||
        oai_get_int(body, "priority", -1000000, 1000000, &priority, e) ||
        oai_get_int(body, "seed", 0, 0x7fffffffL, &seed, e) || oai_get_num(body, "temperature", 0, 1e6, &temp, e) ||
        oai_get_num(body, "top_p", 0, 1, &top_p, e) || oai_get_num(body, "min_p", 0, 1, &min_p, e) ||
        oai_get_num(body, "repeat_penalty", 1e-6, 1e6, &rp, e) || oai_get_num(body, "deadline", 0, 1e12, &deadline, e) ||
        oai_get_bool(body, "ignore_eos", &j->ignore_eos, e) || get_mem(body, &j->mem, e) ||
        within_limits(&sj->lim, ctx, threads, j->mem, e))
        return -1;
    if (!j->mem) j->mem = sj->lim.mem; /* the server's budget holds its jobs too */
    const cJSON *pc = cJSON_GetObjectItemCaseSensitive(body, "page_cache");
    if (pc && !cJSON_IsNull(pc)) { /* memory beyond the budget is the machine's: the operator's choice alone */
        oai_set_error(e, 400, "invalid_request_error", "page_cache", NULL,
                      "'page_cache' is the server operator's setting (serve --page-cache), not a request field");
        return -1;
    }
    j->page_cache = sj->lim.page_cache;
    j->n_predict = (int)n_predict;
    j->ctx = (int)ctx;
    j->threads = (int)threads;
    j->priority = (int)priority;
    j->deadline = deadline;
    j->sp.top_k = (int)top_k;
    j->sp.repeat_last_n = (int)last_n;
    j->sp.seed = (uint64_t)seed;
    j->sp.temp = (float)temp;
    j->sp.top_p = (float)top_p;
    j->sp.min_p = (float)min_p;
    j->sp.repeat_penalty = (float)rp;
    const cJSON *remote = cJSON_GetObjectItemCaseSensitive(body, "remote");
    if (remote && !cJSON_IsNull(remote)) { /* the remote gets the operator's key: the operator's choice alone */
        oai_set_error(e, 400, "invalid_request_error", "remote", NULL,
                      "'remote' is the server operator's setting (serve --remote), not a request field");
        return -1;
    }
    if (sj->lim.remote && !(j->remote = strdup(sj->lim.remote))) {
        oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    if (!(j->model = strdup(sj->model))) {
        oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    return get_prompt(body, sj->lim.chat, j, e);
}

static char *submit_answer(srv_jobs *sj, const char *text, size_t len, int *status) {
    long values = 0;
    if (srv_json_scan(text, len, &values))
        return error_body(status, 400, "invalid_request_error", NULL, "invalid_json",
                          "a string holds a NUL character (\\u0000)");
    if (values > JOB_MAX_VALUES) /* cJSON's nodes (~64 bytes each) are the request's memory too */
        return error_body(status, 413, "invalid_request_error", NULL, "request_too_large",
                          "the body holds too many JSON values");
    cJSON *body = cJSON_ParseWithLength(text, len);
    if (!body) return error_body(status, 400, "invalid_request_error", NULL, "invalid_json", "the body is not valid JSON");
    jq_job j;
    jq_job_init(&j);
    oai_error e;
    const int bad = parse_job(sj, body, &j, &e);
    cJSON_Delete(body);
    if (bad) {
        jq_job_free(&j);
        *status = e.status;
        return oai_error_json(&e);
    }
    char err[ERRLEN];
    int64_t id = 0;
    const int rc = jq_submit(sj->q, &j, &id, err, sizeof err);
    jq_job_free(&j);
    return rc != 0 ? internal(status, err) : job_answer(sj, id, status);
}

/* ---- DELETE /v1/jobs/ID ---- */

static char *cancel_answer(srv_jobs *sj, int64_t id, int *status) {
    char err[ERRLEN], prev[16];
    if (jq_cancel(sj->q, id, prev, sizeof prev, err, sizeof err) != 0) return internal(status, err);
    if (!prev[0]) {
        snprintf(err, sizeof err, "no job %lld", (long long)id);
        return error_body(status, 404, "invalid_request_error", "id", "job_not_found", err);
    }
    if (strcmp(prev, "queued") && strcmp(prev, "running")) {
        snprintf(err, sizeof err, "job %lld has already ended (%s)", (long long)id, prev);
        return error_body(status, 409, "invalid_request_error", "id", "job_ended", err);
    }
    return job_answer(sj, id, status);
}

/* ---- routing ---- */

/* "/v1/jobs" -> 0; "/v1/jobs/ID" -> 1 with *id; anything else -> -1. */
static int parse_url(const char *url, int64_t *id) {
    static const char base[] = "/v1/jobs";
    if (strncmp(url, base, sizeof base - 1)) return -1;
    const char *p = url + sizeof base - 1;
    if (!*p || !strcmp(p, "/")) return 0;
    if (*p != '/' || p[1] < '1' || p[1] > '9') return -1;
    char *end;
    errno = 0;
    const long long v = strtoll(p + 1, &end, 10);
    if (errno || (*end && strcmp(end, "/"))) return -1;
    *id = v;
    return 1;
}

char *srv_jobs_handle(srv_jobs *sj, const char *method, const char *url, const char *body, size_t len, int *status) {
    int64_t id = 0;
    const int kind = parse_url(url, &id);
    if (kind < 0)
        return error_body(status, 404, "invalid_request_error", NULL, "not_found",
                          "unknown URL: /v1/jobs or /v1/jobs/ID (ID a positive integer)");
    const int get = !strcmp(method, "GET"), post = !strcmp(method, "POST"), del = !strcmp(method, "DELETE");
    if (kind == 0 && !get && !post)
        return error_body(status, 405, "invalid_request_error", NULL, "method_not_allowed", "use GET or POST");
    if (kind == 1 && !get && !del)
        return error_body(status, 405, "invalid_request_error", NULL, "method_not_allowed", "use GET or DELETE");
    pthread_mutex_lock(&sj->mu);
    char *r = kind == 0 ? (get ? list_answer(sj, status) : submit_answer(sj, body ? body : "", len, status))
                        : (get ? job_answer(sj, id, status) : cancel_answer(sj, id, status));
    pthread_mutex_unlock(&sj->mu);
    return r;
}
