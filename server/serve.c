/*
 * serve.c - `deltafin serve`: an OpenAI-compatible HTTP server.
 *
 * libmicrohttpd runs one thread per connection. A generation request is
 * parsed (oai.c) into one job per choice and queued on the scheduler
 * (sched.c), which decodes every active sequence a step at a time. The
 * connection's thread then waits on its request's condition variable:
 *   non-streaming: until every choice is done, then one JSON response;
 *   streaming:     a response whose reader callback turns new text into
 *                  Server-Sent Events as the scheduler produces it.
 * While waiting it looks at the client's socket every 200 ms: a client
 * that went away cancels its jobs (the scheduler drops them at the next
 * step). A full queue answers 429. Errors are OpenAI-shaped JSON bodies.
 *
 * Routes: POST /v1/chat/completions, POST /v1/completions, GET /v1/models
 * and GET /metrics (Prometheus text) (with --api-key, these need
 * "Authorization: Bearer KEY", compared in constant time), GET /health; with --jobs, /v1/jobs (jobs_api.c), and
 * with --worker a `deltafin worker` child process that runs those jobs
 * (given SIGTERM when the server stops: it hands its job back to the queue).
 * The listen address defaults to loopback. Without --api-key, a request that
 * a web page of another site could have sent (a Host that is not ours, an
 * Origin of another site) is refused: foreign_request.
 */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server.h"

#define MAX_BODY (16u << 20)
#define CONN_IDLE_S 30 /* seconds a connection may send nothing while its request is read */

enum { LOG_TEXT, LOG_JSON, LOG_NONE };
enum { DIALECT_OPENAI, DIALECT_OLLAMA_CHAT, DIALECT_OLLAMA_GENERATE, DIALECT_ANTHROPIC };

typedef struct server {
    df_model *m;
    srv_sched *sched;
    srv_jobs *jobs;        /* /v1/jobs; NULL without --jobs */
    oai_ctx oc;
    const char *api_key;   /* NULL: none (then requests from other sites' pages are refused: foreign_request) */
    const char *host;      /* --host */
    uint64_t mem_budget;
    /* the plan the server runs under, for /metrics' prediction (plan_ok: it could be made) */
    df_plan plan;
    int plan_ok, plan_kept; /* plan_kept: the load's own (keep_plan) */
    double mem_bps;        /* this machine's memory bandwidth (a short probe at start) */
    int n_slots;           /* --parallel */
    int log_format;        /* --log-format: LOG_TEXT, LOG_JSON, LOG_NONE */
    int pooling;           /* --pooling: how /v1/embeddings pools (enum srv_pooling) */
    const char *model_path;
    volatile int stopping;
    int inflight;          /* generation requests being answered (under id_mu): stopping waits for them */
    /* Request memory (docs/server.md, "Memory"): request bodies come out of a pool (under id_mu), and the
     * parsing of bodies (cJSON trees, the template's arena, the tokens) runs parse_slots at a time. */
    uint64_t pool, pool_used;
    int parse_slots;
    pthread_cond_t parse_cv;
    unsigned long next_id;
    pthread_mutex_t id_mu;
} server;

typedef struct conn {
    char *body;
    size_t len, cap;
    int too_big;
    int too_busy;          /* the request-memory pool could not hold its body */
    size_t reserved;       /* bytes of the pool this connection holds */
    /* the request's log line (log_request) */
    double t0;
    char method[12], path[128];
    int n_prompt, n_cached, n_gen; /* a generation's tokens (-1: not one) */
} conn;

/* A request in flight: its jobs and, when streaming, what is left to send. */
typedef struct flight {
    server *srv;
    conn *cc;              /* its connection, for the log's token counts (while it streams: alive) */
    int dialect;           /* DIALECT_OPENAI, Ollama's chat or generate (ollama.c), Anthropic's (anthropic.c) */
    double t0, t_first;    /* when it was submitted; when its first text came (0: not yet) */
    oai_req req;
    srv_job **jobs;
    pthread_cond_t cond;
    char id[64];
    long created;
    int fd;
    size_t *sent;          /* bytes of each job's text already sent (a chat with reasoning: of its content) */
    size_t *sent_r;        /* ... of its reasoning (up to where in the text) */
    int *fin_sent;         /* each choice's finish chunk sent */
    tools_stream_state *ts; /* each choice's tool calls sent (a chat that reads calls: req.calls) */
    char *pend;            /* formatted events not yet handed to MHD */
    size_t plen, poff, pcap;
    int ended;             /* [DONE] queued */
} flight;

/* ---- small helpers ---- */

/* A client's words for the log: printable ASCII, at most n - 1 bytes ("..." when cut). */
static void printable(char *out, size_t n, const char *s) {
    size_t k = 0;
    for (; s && *s && k + 1 < n; s++) out[k++] = *s > 0x20 && *s < 0x7f ? *s : '?';
    out[k] = 0;
    if (s && *s && n > 4) memcpy(out + n - 4, "...", 4);
}


/* --cors: the origins whose pages may call the server ("*": any), NULL: none (one server per process). */
static const char *g_cors;

/* The request's Origin when --cors allows it, else NULL. */
static const char *cors_origin(struct MHD_Connection *c) {
    const char *o = g_cors ? MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin") : NULL;
    if (!o || !*o) return NULL;
    const size_t n = strlen(o);
    for (const char *p = g_cors; *p;) {
        const size_t k = strcspn(p, ",");
        if ((k == 1 && *p == '*') || (k == n && !strncasecmp(p, o, n))) return o;
        p += k + (p[k] == ',');
    }
    return NULL;
}

/* Access-Control-Allow-Origin on an answer to an allowed origin. */
static void cors_headers(struct MHD_Connection *c, struct MHD_Response *r) {
    const char *o = cors_origin(c);
    if (!o) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", o);
    MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result send_text(struct MHD_Connection *c, int status, char *text, const char *type) {
    if (!text) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    cors_headers(c, r);
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result send_error(struct MHD_Connection *c, const oai_error *e) {
    return send_text(c, e->status, oai_error_json(e), "application/json");
}

static enum MHD_Result fail(struct MHD_Connection *c, int status, const char *type, const char *code, const char *msg) {
    oai_error e;
    oai_set_error(&e, status, type, NULL, code, "%s", msg);
    return send_error(c, &e);
}

/* The client closed its end (or the socket failed). */
static int gone(int fd) {
    if (fd < 0) return 0;
    char b;
    ssize_t r = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(cv, mu, &ts);
}

/* n more bytes of a body from the pool; -1 when it has not that many left. */
static int reserve(server *srv, conn *cc, size_t n) {
    pthread_mutex_lock(&srv->id_mu);
    const int ok = srv->pool_used + n <= srv->pool;
    if (ok) srv->pool_used += n, cc->reserved += n;
    pthread_mutex_unlock(&srv->id_mu);
    return ok ? 0 : -1;
}

/* Parsing a body (its JSON tree, a chat template's arena, the tokens) costs a multiple of its size: at most
 * parse_slots run at once; the others wait their turn. */
static void parse_begin(server *srv) {
    pthread_mutex_lock(&srv->id_mu);
    while (srv->parse_slots == 0) pthread_cond_wait(&srv->parse_cv, &srv->id_mu);
    srv->parse_slots--;
    pthread_mutex_unlock(&srv->id_mu);
}

static void parse_end(server *srv) {
    pthread_mutex_lock(&srv->id_mu);
    srv->parse_slots++;
    pthread_cond_signal(&srv->parse_cv);
    pthread_mutex_unlock(&srv->id_mu);
}

static enum MHD_Result busy(struct MHD_Connection *mc) {
    return fail(mc, 503, "server_error", "request_memory_full",
                "the server is receiving too many bytes at once (its request memory, serve --request-mem); retry");
}

/* ---- requests in flight ---- */

static void flight_free(flight *f) {
    if (!f) return;
    pthread_mutex_lock(&f->srv->id_mu);
    f->srv->inflight--;
    pthread_mutex_unlock(&f->srv->id_mu);
    for (int i = 0; f->jobs && i < f->req.n; i++)
        if (f->jobs[i]) sched_release(f->srv->sched, f->jobs[i]);
    pthread_cond_destroy(&f->cond);
    free(f->jobs);
    free(f->sent);
    free(f->sent_r);
    free(f->fin_sent);
    free(f->ts);
    free(f->pend);
    oai_req_free(&f->req);
    free(f);
}

static int all_done(const flight *f) {
    for (int i = 0; i < f->req.n; i++)
        if (f->jobs[i]->finish == FIN_NONE) return 0;
    return 1;
}

static void cancel_all(flight *f) {
    for (int i = 0; i < f->req.n; i++) sched_cancel(f->srv->sched, f->jobs[i]);
}

static int pend_add(flight *f, char *ev) {
    if (!ev) return -1;
    size_t n = strlen(ev);
    if (f->plen + n > f->pcap) {
        size_t cap = f->pcap ? f->pcap : 1024;
        while (cap < f->plen + n) cap *= 2;
        char *t = realloc(f->pend, cap);
        if (!t) return free(ev), -1;
        f->pend = t;
        f->pcap = cap;
    }
    memcpy(f->pend + f->plen, ev, n);
    f->plen += n;
    free(ev);
    return 0;
}

static void emit_event(void *arg, char *ev) { pend_add(arg, ev); }

/* An OpenAI-shaped error as a Server-Sent Event (malloc'd; NULL when out of memory). */
static char *sse_error(const char *msg) {
    oai_error e;
    oai_set_error(&e, 500, "server_error", NULL, NULL, "%s", msg);
    char *body = oai_error_json(&e), *ev = body ? malloc(strlen(body) + 9) : NULL;
    if (ev) sprintf(ev, "data: %s\n\n", body);
    free(body);
    return ev;
}

/* New events from the jobs' output (under the scheduler mutex). */
/* The request's tokens, for its log line: prompt, reused from a cache, generated (all choices). */
static void count_tokens(const flight *f, conn *cc) {
    cc->n_prompt = f->req.n_prompt;
    cc->n_cached = f->req.n > 0 ? f->jobs[0]->n_cached : 0;
    cc->n_gen = 0;
    for (int i = 0; i < f->req.n; i++) cc->n_gen += f->jobs[i]->n_gen;
}

/* What job j's stream may send so far (*text; returns its length): its text, or where the output is read for
 * tool calls (tools.c), the content read so far (p holds it: the caller frees p). */
static size_t stream_text(const flight *f, const srv_job *j, const char **text, df_tool_parse *p) {
    const size_t upto = j->finish != FIN_NONE ? j->len : srv_safe_len(j);
    *text = j->text;
    if (!f->req.calls || df_tool_calls_parse((df_tool_format)f->req.tool_fmt, f->req.tools_json, j->text, upto,
                                             j->finish == FIN_NONE, p) != DF_OK)
        return upto;
    *text = p->content;
    return srv_utf8_valid_prefix(p->content, strlen(p->content));
}

/* Ollama's stream: NDJSON pieces, then the last object with the counts (and the tool calls) (one choice: Ollama
 * has no n). */
static void collect_ollama(flight *f) {
    const oai_ctx *c = &f->srv->oc;
    srv_job *j = f->jobs[0];
    const int chat = f->dialect == DIALECT_OLLAMA_CHAT;
    df_tool_parse p = {0};
    const char *text;
    const size_t upto = stream_text(f, j, &text, &p);
    if (upto > f->sent[0]) {
        if (!f->t_first) f->t_first = srv_now();
        pend_add(f, ollama_answer(c, NULL, chat, text + f->sent[0], upto - f->sent[0], 0, j, 0, 0, 0));
        f->sent[0] = upto;
    }
    df_tool_parse_free(&p);
    if (j->finish == FIN_NONE || f->ended) return;
    const double now = srv_now();
    if (j->finish == FIN_STOP || j->finish == FIN_LENGTH) {
        pend_add(f, ollama_answer(c, &f->req, chat, "", 0, 1, j, f->req.n_prompt, now - f->t0,
                                  (f->t_first ? f->t_first : now) - f->t0));
    } else {
        char why[300];
        snprintf(why, sizeof why, "generation failed: %s", *j->error ? j->error : "cancelled");
        pend_add(f, ollama_error(why));
    }
    if (f->cc) count_tokens(f, f->cc);
    f->fin_sent[0] = 1;
    f->ended = 1;
}

/* Anthropic's stream: text deltas, then the block's and the message's ends (one choice); with tools, the text is
 * what tools.c reads as content so far, and the tool_use blocks come at the end. */
static void collect_anthropic(flight *f) {
    srv_job *j = f->jobs[0];
    df_tool_parse p = {0};
    const char *text;
    const size_t upto = stream_text(f, j, &text, &p);
    if (upto > f->sent[0]) {
        pend_add(f, anth_stream_delta(text + f->sent[0], upto - f->sent[0]));
        f->sent[0] = upto;
    }
    df_tool_parse_free(&p);
    if (j->finish == FIN_NONE || f->ended) return;
    if (j->finish == FIN_STOP || j->finish == FIN_LENGTH) {
        pend_add(f, anth_stream_end(&f->req, j, f->req.n_prompt));
    } else {
        char why[300];
        snprintf(why, sizeof why, "generation failed: %s", *j->error ? j->error : "cancelled");
        pend_add(f, anth_error_event(why));
    }
    if (f->cc) count_tokens(f, f->cc);
    f->fin_sent[0] = 1;
    f->ended = 1;
}

static void collect_events(flight *f) {
    const oai_ctx *c = &f->srv->oc;
    if (f->dialect == DIALECT_ANTHROPIC) {
        collect_anthropic(f);
        return;
    }
    if (f->dialect != DIALECT_OPENAI) {
        collect_ollama(f);
        return;
    }
    for (int i = 0; i < f->req.n; i++) {
        srv_job *j = f->jobs[i];
        if (f->fin_sent[i]) continue;
        const size_t upto = j->finish != FIN_NONE ? j->len : srv_safe_len(j);
        srv_split sp = {0, 0, 0};
        if (f->req.reasoning)
            srv_split_think(j->text, upto, f->req.think_open, f->req.think_kind, j->finish != FIN_NONE, &sp);
        const size_t rs = f->sent_r[i] > sp.r0 ? f->sent_r[i] : sp.r0, cs = f->sent[i] > sp.c0 ? f->sent[i] : sp.c0;
        if (sp.r1 > rs) {
            char *t = srv_utf8_clean(j->text + rs, sp.r1 - rs);
            if (t) pend_add(f, oai_reasoning_chunk(c, &f->req, f->id, f->created, i, t));
            free(t);
            f->sent_r[i] = sp.r1;
        }
        int calls = 0;
        if (f->req.calls) { /* content and calls from the parse of the content so far (tools.c) */
            if (upto > sp.c0)
                calls = tools_stream(c, &f->req, f->id, f->created, i, j->text + sp.c0, upto - sp.c0,
                                     j->finish == FIN_NONE ? 0 : j->finish == FIN_LENGTH ? TOOLS_CUT : 1, &f->ts[i],
                                     emit_event, f);
        } else if (upto > cs) {
            char *t = srv_utf8_clean(j->text + cs, upto - cs);
            if (t) pend_add(f, oai_chunk(c, &f->req, f->id, f->created, i, t, FIN_NONE, 0));
            free(t);
            f->sent[i] = upto;
        }
        if (j->finish == FIN_NONE) continue;
        f->fin_sent[i] = 1;
        if (j->finish == FIN_STOP || j->finish == FIN_LENGTH) {
            pend_add(f, oai_chunk(c, &f->req, f->id, f->created, i, NULL,
                                  calls > 0 && j->finish == FIN_STOP ? FIN_TOOL_CALLS : j->finish, 0));
        } else {
            char why[300];
            snprintf(why, sizeof why, "generation failed: %s", *j->error ? j->error : "cancelled");
            pend_add(f, sse_error(why));
        }
    }
    if (all_done(f) && !f->ended) {
        if (f->cc) count_tokens(f, f->cc);
        if (f->req.include_usage) pend_add(f, oai_usage_chunk(c, &f->req, f->jobs, f->id, f->created));
        pend_add(f, strdup("data: [DONE]\n\n"));
        f->ended = 1;
    }
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    flight *f = cls;
    pthread_mutex_t *mu = sched_mutex(f->srv->sched);
    if (f->poff == f->plen && !f->ended) {
        f->poff = f->plen = 0;
        pthread_mutex_lock(mu);
        for (;;) {
            collect_events(f);
            if (f->plen || f->ended) break;
            timed_wait(&f->cond, mu, 200);
            if (f->srv->stopping) { /* the client is told, and the stream ends as streams end */
                pthread_mutex_unlock(mu);
                cancel_all(f);
                if (f->dialect == DIALECT_ANTHROPIC) {
                    pend_add(f, anth_error_event("the server is stopping (SIGINT or SIGTERM); the generation was cut short"));
                } else if (f->dialect != DIALECT_OPENAI) {
                    pend_add(f, ollama_error("the server is stopping (SIGINT or SIGTERM); the generation was cut short"));
                } else {
                    pend_add(f, sse_error("the server is stopping (SIGINT or SIGTERM); the generation was cut short"));
                    pend_add(f, strdup("data: [DONE]\n\n"));
                }
                f->ended = 1;
                pthread_mutex_lock(mu);
                break;
            }
            if (gone(f->fd)) {
                pthread_mutex_unlock(mu);
                cancel_all(f);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
        pthread_mutex_unlock(mu);
    }
    if (f->poff == f->plen) return MHD_CONTENT_READER_END_OF_STREAM;
    size_t n = f->plen - f->poff < max ? f->plen - f->poff : max;
    memcpy(buf, f->pend + f->poff, n);
    f->poff += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) { flight_free(cls); }

/* An error in the request's own dialect: OpenAI's object, Ollama's {"error"} or Anthropic's. */
static enum MHD_Result send_error_in(struct MHD_Connection *mc, int dialect, const oai_error *e) {
    if (dialect == DIALECT_OPENAI) return send_error(mc, e);
    if (dialect == DIALECT_ANTHROPIC) return send_text(mc, e->status, anth_error(e->status, e->message), "application/json");
    return send_text(mc, e->status, ollama_error(e->message), "application/json");
}

static enum MHD_Result fail_in(struct MHD_Connection *mc, int dialect, int status, const char *type, const char *code,
                               const char *msg) {
    oai_error e;
    oai_set_error(&e, status, type, NULL, code, "%s", msg);
    return send_error_in(mc, dialect, &e);
}

/* A parsed request's body goes back to the request pool. */
static void drop_body(server *srv, conn *cc) {
    free(cc->body);
    cc->body = NULL;
    cc->len = cc->cap = 0;
    pthread_mutex_lock(&srv->id_mu);
    srv->pool_used -= cc->reserved;
    cc->reserved = 0;
    pthread_mutex_unlock(&srv->id_mu);
}

/* Wait until every job of f has ended: 0 with the scheduler mutex held; -1 (the server is stopping) or -2 (the
 * client went away) with the mutex released and the jobs cancelled. */
static int wait_done(flight *f) {
    pthread_mutex_t *mu = sched_mutex(f->srv->sched);
    pthread_mutex_lock(mu);
    while (!all_done(f)) {
        timed_wait(&f->cond, mu, 200);
        if (f->srv->stopping || gone(f->fd)) {
            pthread_mutex_unlock(mu);
            cancel_all(f);
            return f->srv->stopping ? -1 : -2;
        }
    }
    return 0;
}

/* Submit f's jobs (f->req.n of them, made) for the connection: 0, or -1 when the queue is full (f freed). */
static int submit(server *srv, struct MHD_Connection *mc, flight *f) {
    for (int i = 0; i < f->req.n; i++) f->jobs[i]->cond = &f->cond;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    f->fd = ci ? ci->connect_fd : -1;
    if (sched_submit(srv->sched, f->jobs, f->req.n) == 0) return 0;
    for (int i = 0; i < f->req.n; i++) srv_job_free(f->jobs[i]);
    free(f->jobs);
    f->jobs = NULL;
    flight_free(f);
    return -1;
}

static enum MHD_Result generate(server *srv, struct MHD_Connection *mc, conn *cc, int chat, int dialect) {
    flight *f = calloc(1, sizeof *f);
    if (!f) return fail(mc, 500, "server_error", NULL, "out of memory");
    f->srv = srv;
    f->cc = cc;
    f->dialect = dialect;
    f->t0 = srv_now();
    pthread_cond_init(&f->cond, NULL);
    oai_error e;
    parse_begin(srv);
    char *translated = NULL, *err_json = NULL;
    int ostream = 0, ostatus = 0, bad;
    if (dialect == DIALECT_ANTHROPIC &&
        !(translated = anth_to_openai(&srv->oc, cc->body, cc->len, 0, &ostream, &ostatus, &err_json))) {
        bad = 1;
    } else if (dialect != DIALECT_OPENAI && dialect != DIALECT_ANTHROPIC &&
               !(translated = ollama_to_openai(&srv->oc, cc->body, cc->len, dialect == DIALECT_OLLAMA_CHAT, &ostream,
                                               &chat, &ostatus, &err_json))) {
        bad = 1;
    } else {
        bad = oai_parse(&srv->oc, translated ? translated : cc->body ? cc->body : "",
                        translated ? strlen(translated) : cc->len, chat, &f->req, &e);
    }
    free(translated);
    parse_end(srv);
    drop_body(srv, cc);
    if (bad) {
        free(f->jobs);
        pthread_cond_destroy(&f->cond);
        free(f);
        if (err_json) return send_text(mc, ostatus, err_json, "application/json");
        return send_error_in(mc, dialect, &e);
    }
    srv_metrics mt;
    sched_metrics(srv->sched, &mt);
    if (f->req.n > mt.parallel + mt.queue_cap) { /* could never be queued: not a "retry later" */
        oai_set_error(&e, 400, "invalid_request_error", "n", NULL,
                      "'n' is at most %d on this server (--parallel + --queue)", mt.parallel + mt.queue_cap);
        oai_req_free(&f->req);
        pthread_cond_destroy(&f->cond);
        free(f);
        return send_error_in(mc, dialect, &e);
    }
    pthread_mutex_lock(&srv->id_mu);
    srv->inflight++; /* from here on flight_free ends the request, and takes it back */
    pthread_mutex_unlock(&srv->id_mu);
    f->jobs = oai_make_jobs(&f->req);
    f->sent = calloc((size_t)f->req.n, sizeof *f->sent);
    f->sent_r = calloc((size_t)f->req.n, sizeof *f->sent_r);
    f->fin_sent = calloc((size_t)f->req.n, sizeof *f->fin_sent);
    f->ts = calloc((size_t)f->req.n, sizeof *f->ts);
    if (!f->jobs || !f->sent || !f->sent_r || !f->fin_sent || !f->ts) {
        flight_free(f);
        return fail_in(mc, dialect, 500, "server_error", NULL, "out of memory");
    }
    pthread_mutex_lock(&srv->id_mu);
    snprintf(f->id, sizeof f->id, "%s%lu", dialect == DIALECT_ANTHROPIC ? "msg_" : chat ? "chatcmpl-" : "cmpl-",
             ++srv->next_id);
    pthread_mutex_unlock(&srv->id_mu);
    f->created = (long)time(NULL);
    if (submit(srv, mc, f) != 0) {
        return fail_in(mc, dialect, 429, "rate_limit_error", "queue_full",
                       "the server's queue is full; retry later (deltafin serve --queue, --parallel)");
    }
    if (f->req.stream) {
        if (chat && dialect == DIALECT_OPENAI)
            for (int i = 0; i < f->req.n; i++)
                pend_add(f, oai_chunk(&srv->oc, &f->req, f->id, f->created, i, "", FIN_NONE, 1));
        if (dialect == DIALECT_ANTHROPIC) pend_add(f, anth_stream_start(&srv->oc, f->id, f->req.n_prompt));
        if (!chat && dialect == DIALECT_OPENAI && f->req.echo_text) /* echo: the prompt first */
            for (int i = 0; i < f->req.n; i++) {
                char *t = srv_utf8_clean(f->req.echo_text, strlen(f->req.echo_text));
                if (t) pend_add(f, oai_chunk(&srv->oc, &f->req, f->id, f->created, i, t, FIN_NONE, 0));
                free(t);
            }
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, f, stream_free);
        if (!r) {
            flight_free(f);
            return MHD_NO;
        }
        cors_headers(mc, r);
        MHD_add_response_header(r, "Content-Type", dialect == DIALECT_OPENAI || dialect == DIALECT_ANTHROPIC
                                                       ? "text/event-stream" : "application/x-ndjson");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(mc, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return ret;
    }
    const int w = wait_done(f);
    if (w != 0) {
        flight_free(f);
        if (w == -2) return MHD_NO; /* the client is gone: close the connection */
        return fail_in(mc, dialect, 503, "server_error", "server_stopping",
                       "the server is stopping (SIGINT or SIGTERM); the generation was cut short");
    }
    pthread_mutex_t *mu = sched_mutex(srv->sched);
    int failed = -1;
    for (int i = 0; i < f->req.n; i++)
        if (f->jobs[i]->finish != FIN_STOP && f->jobs[i]->finish != FIN_LENGTH) failed = i;
    char *body = NULL;
    if (failed >= 0) {
        oai_set_error(&e, 500, "server_error", NULL, NULL, "generation failed: %s",
                      *f->jobs[failed]->error ? f->jobs[failed]->error : "cancelled");
    } else if (dialect == DIALECT_OPENAI) {
        body = oai_response(&srv->oc, &f->req, f->jobs, f->id, f->created);
    } else if (dialect == DIALECT_ANTHROPIC) {
        body = anth_message(&srv->oc, &f->req, f->jobs[0], f->req.n_prompt, f->id);
    } else {
        const srv_job *j = f->jobs[0];
        const double now = srv_now();
        body = ollama_answer(&srv->oc, &f->req, dialect == DIALECT_OLLAMA_CHAT, j->text, j->len, 1, j, f->req.n_prompt, now - f->t0,
                             now - f->t0);
    }
    count_tokens(f, cc);
    pthread_mutex_unlock(mu);
    flight_free(f);
    if (failed >= 0) return send_error_in(mc, dialect, &e);
    return send_text(mc, 200, body, "application/json");
}

/* /v1/embeddings (embed.c): one embedding job per input, answered when all have their vectors. */
static enum MHD_Result embeddings(server *srv, struct MHD_Connection *mc, conn *cc) {
    srv_metrics mt;
    sched_metrics(srv->sched, &mt);
    embed_req er;
    oai_error e;
    parse_begin(srv);
    const int bad = embed_parse(&srv->oc, cc->body ? cc->body : "", cc->len, mt.parallel + mt.queue_cap, &er, &e);
    parse_end(srv);
    drop_body(srv, cc);
    if (bad) return send_error(mc, &e);
    flight *f = calloc(1, sizeof *f);
    if (!f) return embed_req_free(&er), fail(mc, 500, "server_error", NULL, "out of memory");
    f->srv = srv;
    f->cc = cc;
    pthread_cond_init(&f->cond, NULL);
    f->req.n = er.n;
    pthread_mutex_lock(&srv->id_mu);
    srv->inflight++; /* from here on flight_free ends the request */
    pthread_mutex_unlock(&srv->id_mu);
    if (!(f->jobs = embed_make_jobs(&er, srv->pooling))) {
        f->req.n = 0;
        flight_free(f);
        embed_req_free(&er);
        return fail(mc, 500, "server_error", NULL, "out of memory");
    }
    if (submit(srv, mc, f) != 0) {
        embed_req_free(&er);
        return fail(mc, 429, "rate_limit_error", "queue_full",
                    "the server's queue is full; retry later (deltafin serve --queue, --parallel)");
    }
    const int w = wait_done(f);
    if (w != 0) {
        flight_free(f);
        embed_req_free(&er);
        if (w == -2) return MHD_NO;
        return fail(mc, 503, "server_error", "server_stopping", "the server is stopping (SIGINT or SIGTERM)");
    }
    int failed = -1;
    for (int i = 0; i < er.n; i++)
        if (f->jobs[i]->finish != FIN_STOP) failed = i;
    if (failed >= 0) {
        const srv_job *j = f->jobs[failed];
        oai_set_error(&e, j->status ? j->status : 500, j->status && j->status < 500 ? "invalid_request_error" : "server_error",
                      "input", NULL, "embedding failed: %s", *j->error ? j->error : "cancelled");
    }
    char *body = failed < 0 ? embed_response(&srv->oc, &er, f->jobs) : NULL;
    cc->n_prompt = er.total, cc->n_cached = 0, cc->n_gen = 0;
    pthread_mutex_unlock(sched_mutex(srv->sched));
    flight_free(f);
    embed_req_free(&er);
    return failed >= 0 ? send_error(mc, &e) : send_text(mc, 200, body, "application/json");
}

/* ---- other routes ---- */

static long mem_field(const char *key) {
    FILE *fp = fopen("/proc/self/status", "r");
    if (!fp) return 0;
    char line[256];
    long kb = 0;
    const size_t kl = strlen(key);
    while (fgets(line, sizeof line, fp))
        if (!strncmp(line, key, kl) && line[kl] == ':') kb = strtol(line + kl + 1, NULL, 10);
    fclose(fp);
    return kb;
}

static char *metrics_text(server *srv) {
    srv_metrics mt;
    sched_metrics(srv->sched, &mt);
    df_io_stats io;
    df_model_io_stats(srv->m, &io);
    const double looks = (double)(io.hits + io.misses);
    size_t cap = 16384, n = 0; /* about 4 KiB are written */
    char *b = malloc(cap);
    if (!b) return NULL;
#define M(name, type, help, fmt, val)                                                                                  \
    n += (size_t)snprintf(b + n, cap - n, "# HELP deltafin_" name " " help "\n# TYPE deltafin_" name " " type          \
                                          "\ndeltafin_" name " " fmt "\n", val)
    M("tokens_generated_total", "counter", "Tokens generated.", "%llu", (unsigned long long)mt.gen_tokens);
    M("prompt_tokens_total", "counter", "Prompt tokens decoded.", "%llu", (unsigned long long)mt.prompt_tokens);
    M("prompt_tokens_cached_total", "counter", "Prompt tokens reused from a slot's KV cache.", "%llu",
      (unsigned long long)mt.prompt_cached);
    M("prefix_cache_hits_memory_total", "counter", "Prompts that started from a prefix cache entry in memory.", "%llu",
      (unsigned long long)mt.pc.mem_hits);
    M("prefix_cache_hits_disk_total", "counter", "Prompts that started from a prefix cache file.", "%llu",
      (unsigned long long)mt.pc.disk_hits);
    M("prefix_cache_tokens_reused_total", "counter", "Prompt tokens restored from the prefix caches.", "%llu",
      (unsigned long long)mt.pc.tokens_reused);
    M("prefix_cache_memory_bytes", "gauge", "Bytes of the prefix cache in memory.", "%llu",
      (unsigned long long)mt.pc.mem_bytes);
    M("prefix_cache_memory_entries", "gauge", "Prompts kept in the memory prefix cache.", "%d", mt.pc.mem_entries);
    M("prefix_cache_disk_bytes", "gauge", "Bytes of the prefix cache files.", "%llu", (unsigned long long)mt.pc.disk_bytes);
    M("prefix_cache_disk_entries", "gauge", "Prompts kept in prefix cache files.", "%d", mt.pc.disk_entries);
    M("prefix_cache_disk_errors_total", "counter", "Prefix cache files refused (damaged) or not written.", "%llu",
      (unsigned long long)mt.pc.disk_errors);
    M("tokens_per_second", "gauge", "Generated tokens per second over the last seconds.", "%.3f", mt.recent_tps);
    M("busy_tokens_per_second", "gauge", "Generated tokens per second of decoding time.", "%.3f",
      mt.busy_seconds > 0 ? (double)mt.gen_tokens / mt.busy_seconds : 0.0);
    M("requests_total", "counter", "Generation requests received.", "%llu", (unsigned long long)mt.requests);
    M("requests_rejected_total", "counter", "Requests refused because the queue was full.", "%llu",
      (unsigned long long)mt.rejected);
    M("queue_depth", "gauge", "Sequences waiting for a slot.", "%d", mt.queue_depth);
    M("queue_capacity", "gauge", "Most sequences that may wait.", "%d", mt.queue_cap);
    M("active_sequences", "gauge", "Sequences being decoded.", "%d", mt.active);
    M("parallel_slots", "gauge", "Sequences decoded at once at most.", "%d", mt.parallel);
    M("steps_total", "counter", "Scheduler steps (one forward pass for all active sequences).", "%llu",
      (unsigned long long)mt.steps);
    M("sequences_per_step", "gauge", "Average active sequences per step.", "%.3f",
      mt.steps ? (double)mt.step_seqs / (double)mt.steps : 0.0);
    M("expert_cache_hits_total", "counter", "Expert cache hits.", "%llu", (unsigned long long)io.hits);
    M("expert_cache_misses_total", "counter", "Expert cache misses.", "%llu", (unsigned long long)io.misses);
    M("expert_cache_hit_rate", "gauge", "Expert cache hit rate since start.", "%.4f",
      looks > 0 ? (double)io.hits / looks : 0.0);
    M("disk_bytes_read_total", "counter", "Weight bytes read from disk.", "%llu", (unsigned long long)io.bytes_read);
    M("disk_read_seconds_total", "counter", "Seconds spent reading weights.", "%.6f", io.read_seconds);
    M("disk_read_bytes_per_second", "gauge", "Disk throughput while reading.", "%.0f",
      io.read_seconds > 0 ? (double)io.bytes_read / io.read_seconds : 0.0);
    M("disk_bytes_per_generated_token", "gauge", "Bytes read per generated token.", "%.0f",
      mt.gen_tokens ? (double)io.bytes_read / (double)mt.gen_tokens : 0.0);
    M("forward_passes_total", "counter", "Passes over the weights (a step of all active sequences is one).", "%llu",
      (unsigned long long)io.passes);
    M("forward_pass_tokens_total", "counter", "Tokens those passes ran.", "%llu", (unsigned long long)io.pass_rows);
    M("expert_union_per_pass", "gauge", "Distinct experts a pass ran (each MoE layer: the union of its tokens' experts).",
      "%.3f", io.passes ? (double)io.expert_union / (double)io.passes : 0.0);
    M("expert_union_per_moe_layer", "gauge", "Distinct experts a MoE layer of a pass ran.", "%.3f",
      io.moe_runs ? (double)io.expert_union / (double)io.moe_runs : 0.0);
    M("expert_bytes_read_total", "counter", "Expert weight bytes the passes read (memory or disk).", "%llu",
      (unsigned long long)io.expert_bytes);
    M("expert_bytes_per_generated_token", "gauge", "Expert weight bytes read per generated token.", "%.0f",
      mt.gen_tokens ? (double)io.expert_bytes / (double)mt.gen_tokens : 0.0);
    M("memory_rss_bytes", "gauge", "Resident memory.", "%llu", (unsigned long long)mem_field("VmRSS") * 1024ull);
    M("memory_peak_rss_bytes", "gauge", "Peak resident memory.", "%llu", (unsigned long long)mem_field("VmHWM") * 1024ull);
    M("memory_budget_bytes", "gauge", "The --mem budget (0: none).", "%llu", (unsigned long long)srv->mem_budget);
    df_plan_speed ps = {0};
    const double disk = io.read_seconds > 0 ? (double)io.bytes_read / io.read_seconds : 0;
    if (srv->plan_ok) df_plan_predict(&srv->plan, disk > 0 ? disk : 1e15, srv->mem_bps, &ps);
    const int known = srv->plan_ok && (disk > 0 || ps.disk_bytes_per_token == 0); /* streaming needs a measured disk */
    M("plan_expert_hit_rate", "gauge", "The plan's expected expert cache hit rate (0: unknown).", "%.4f",
      srv->plan_ok ? ps.hit_rate : 0.0);
    M("plan_tokens_per_second", "gauge", "What the plan predicts for one sequence at the measured disk and memory "
      "speeds (0: unknown).", "%.3f", known ? ps.tokens_per_s : 0.0);
#undef M
    return b;
}

static char *models_json(server *srv) {
    char *name = srv_utf8_clean(srv->oc.name, strlen(srv->oc.name));
    /* the name is a file name: escape what JSON needs (at most 6 bytes for one) */
    char *esc = name ? malloc(strlen(name) * 6 + 1) : NULL, *b = esc ? malloc(strlen(name) * 6 + 256) : NULL;
    if (!b) {
        free(name);
        free(esc);
        return NULL;
    }
    size_t k = 0;
    for (const char *p = name; *p; p++) {
        if (*p == '"' || *p == '\\') esc[k++] = '\\', esc[k++] = *p;
        else if ((unsigned char)*p < 0x20) k += (size_t)sprintf(esc + k, "\\u%04x", *p);
        else esc[k++] = *p;
    }
    esc[k] = 0;
    free(name);
    df_model_info mi;
    df_model_get_info(srv->m, &mi);
    sprintf(b, "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\",\"created\":%ld,\"owned_by\":\"deltafin\","
               "\"context_length\":%d,\"meta\":{\"n_ctx\":%d,\"n_ctx_train\":%d,\"n_vocab\":%d,\"n_params\":%llu,"
               "\"size\":%llu}}]}",
            esc, (long)time(NULL), srv->oc.n_ctx, srv->oc.n_ctx, mi.n_ctx_train, mi.n_vocab,
            (unsigned long long)mi.n_params, (unsigned long long)mi.n_bytes);
    free(esc);
    return b;
}

/* /props, as llama-server answers it: the context, the slots, the template, the build. */
static char *props_json(server *srv) {
    df_model_info mi;
    df_model_get_info(srv->m, &mi);
    cJSON *p = cJSON_CreateObject(), *g = cJSON_AddObjectToObject(p, "default_generation_settings");
    cJSON_AddNumberToObject(g, "n_ctx", srv->oc.n_ctx);
    cJSON_AddNumberToObject(p, "n_ctx", srv->oc.n_ctx);
    cJSON_AddNumberToObject(p, "n_ctx_train", mi.n_ctx_train);
    cJSON_AddNumberToObject(p, "total_slots", srv->n_slots);
    cJSON_AddStringToObject(p, "model_alias", srv->oc.name);
    cJSON_AddStringToObject(p, "model_path", srv->model_path);
    const char *t = srv->oc.tmpl ? srv->oc.tmpl : df_chat_template(srv->m);
    char *clean = t ? srv_utf8_clean(t, strlen(t)) : NULL;
    cJSON_AddStringToObject(p, "chat_template", clean ? clean : "");
    free(clean);
    char build[64];
    snprintf(build, sizeof build, "deltafin %s", df_version());
    cJSON_AddStringToObject(p, "build_info", build);
    cJSON *mod = cJSON_AddObjectToObject(p, "modalities");
    cJSON_AddBoolToObject(mod, "vision", 0);
    cJSON_AddBoolToObject(mod, "audio", 0);
    char *s = cJSON_PrintUnformatted(p);
    cJSON_Delete(p);
    return s;
}

/* /slots, as llama-server answers it: each slot, whether it is busy, its cache and its job's progress. */
static char *slots_json(server *srv) {
    srv_slot_info info[256];
    const int n = sched_slots(srv->sched, info, 256);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        const srv_slot_info *si = &info[i];
        cJSON *o = cJSON_CreateObject(), *nt = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", si->id);
        cJSON_AddNumberToObject(o, "n_ctx", srv->oc.n_ctx);
        cJSON_AddBoolToObject(o, "is_processing", si->busy);
        cJSON_AddStringToObject(o, "task", !si->busy ? "" : si->embedding ? "embedding" : "generation");
        cJSON_AddNumberToObject(o, "n_past", si->n_past);
        cJSON_AddNumberToObject(o, "n_prompt_tokens", si->n_prompt);
        cJSON_AddNumberToObject(o, "n_cached_tokens", si->n_cached);
        cJSON_AddNumberToObject(o, "seconds", si->seconds);
        cJSON_AddNumberToObject(nt, "n_decoded", si->n_decoded);
        cJSON_AddNumberToObject(nt, "n_remain", si->busy ? si->max_tokens - si->n_decoded : 0);
        cJSON_AddBoolToObject(nt, "has_next_token", si->busy && !si->embedding);
        cJSON_AddItemToObject(o, "next_token", nt);
        cJSON_AddItemToArray(a, o);
    }
    char *s = cJSON_PrintUnformatted(a);
    cJSON_Delete(a);
    return s;
}

/* The chat page (server/web/index.html, in the binary: server/web.S). */
extern const char srv_web_page[];
extern const uint64_t srv_web_page_len;

static enum MHD_Result web_page(struct MHD_Connection *mc) {
    struct MHD_Response *r = MHD_create_response_from_buffer((size_t)srv_web_page_len, (void *)srv_web_page,
                                                             MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    /* its own scripts and styles, and requests to this server only */
    MHD_add_response_header(r, "Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; "
                                                          "style-src 'unsafe-inline'; img-src data:; connect-src 'self'; "
                                                          "base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    const enum MHD_Result ret = MHD_queue_response(mc, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* a and b equal, in a time that depends on their lengths only (no byte of the key leaks through timing) */
static int same_secret(const char *a, const char *b) {
    const size_t na = strlen(a), nb = strlen(b);
    unsigned char d = na != nb;
    for (size_t i = 0; i < na; i++) d |= (unsigned char)(a[i] ^ b[i % (nb ? nb : 1)]);
    return nb > 0 && d == 0;
}

/* The key as OpenAI's clients send it (Authorization: Bearer KEY) or Anthropic's (x-api-key: KEY). */
static int authorized(server *srv, struct MHD_Connection *mc) {
    if (!srv->api_key) return 1;
    const char *h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Authorization");
    const char *x = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "x-api-key");
    return (h && !strncmp(h, "Bearer ", 7) && same_secret(h + 7, srv->api_key)) || (x && same_secret(x, srv->api_key));
}

/* The host part of a Host header or of an Origin's authority ("[::1]:8080" -> "::1"), into out. */
static void host_part(const char *v, char *out, size_t n) {
    size_t k = 0;
    if (*v == '[') {
        for (v++; *v && *v != ']' && k + 1 < n; v++) out[k++] = *v;
    } else {
        for (; *v && *v != ':' && *v != '/' && k + 1 < n; v++) out[k++] = (char)(*v >= 'A' && *v <= 'Z' ? *v + 32 : *v);
    }
    out[k] = 0;
}

/* A name a browser page of another site cannot make resolve to us: an IP
 * literal, localhost, or the --host the operator gave. */
static int trusted_host(const server *srv, const char *h) {
    struct in6_addr a6;
    struct in_addr a4;
    return !strcmp(h, "localhost") || !strcmp(h, srv->host) || inet_pton(AF_INET, h, &a4) == 1 ||
           inet_pton(AF_INET6, h, &a6) == 1;
}

/* Requests a web page elsewhere could have made: a Host that is a DNS name
 * other than ours (DNS rebinding) or an Origin of another site (a cross-site
 * POST). Either is refused (403) unless --api-key guards the server. */
static const char *foreign_request(const server *srv, struct MHD_Connection *mc) {
    if (srv->api_key) return NULL;
    char h[256], o[256];
    const char *host = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Host");
    if (host) {
        host_part(host, h, sizeof h);
        if (!trusted_host(srv, h)) return "the Host header names another site (DNS rebinding?)";
    }
    const char *origin = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Origin");
    if (origin && cors_origin(mc)) return NULL; /* the operator allowed its pages (--cors) */
    if (origin && strcmp(origin, "null")) {
        const char *auth = strstr(origin, "://");
        host_part(auth ? auth + 3 : origin, o, sizeof o);
        if (!trusted_host(srv, o)) return "a page of another site (its Origin) may not use this server";
    } else if (origin) {
        return "a page of another site (Origin: null) may not use this server";
    }
    return NULL;
}

static enum MHD_Result jobs_route(server *srv, struct MHD_Connection *mc, conn *cc, const char *url,
                                  const char *method) {
    if (!srv->jobs)
        return fail(mc, 404, "invalid_request_error", "not_found", "this server has no job queue (start it with --jobs)");
    if (!authorized(srv, mc))
        return fail(mc, 401, "invalid_request_error", "invalid_api_key",
                    "a valid API key is needed: send the header 'Authorization: Bearer KEY'");
    if (cc->too_big) return fail(mc, 413, "invalid_request_error", "request_too_large", "the body is larger than 16 MiB");
    if (cc->too_busy) return busy(mc);
    int status = 500;
    parse_begin(srv);
    char *body = srv_jobs_handle(srv->jobs, method, url, cc->body, cc->len, &status);
    parse_end(srv);
    return send_text(mc, status, body, "application/json");
}

/* Anthropic's Messages API (anthropic.c): /v1/messages, /v1/messages/count_tokens. */
static enum MHD_Result anthropic_route(server *srv, struct MHD_Connection *mc, conn *cc, const char *url, int post) {
    const int count = !strcmp(url, "/v1/messages/count_tokens");
    if (!authorized(srv, mc))
        return send_text(mc, 401, anth_error(401, "a valid API key is needed: send the header 'x-api-key: KEY' or "
                                                  "'Authorization: Bearer KEY'"), "application/json");
    if (!post) return send_text(mc, 405, anth_error(405, "use POST"), "application/json");
    if (cc->too_big) return send_text(mc, 413, anth_error(413, "the body is larger than 16 MiB"), "application/json");
    if (cc->too_busy) return busy(mc);
    if (!count) return generate(srv, mc, cc, 1, DIALECT_ANTHROPIC);
    int status = 500;
    parse_begin(srv);
    char *out = anth_count_tokens(&srv->oc, cc->body, cc->len, &status);
    parse_end(srv);
    return send_text(mc, status, out, "application/json");
}

/* Ollama's API (ollama.c): /api/version, /api/tags, /api/ps, /api/show, /api/chat, /api/generate. */
static enum MHD_Result ollama_route(server *srv, struct MHD_Connection *mc, conn *cc, const char *url, int get,
                                    int post) {
    const char *u = url + 5;
    const int chat = !strcmp(u, "chat"), gen = !strcmp(u, "generate"), show = !strcmp(u, "show");
    const int version = !strcmp(u, "version"), tags = !strcmp(u, "tags") || !strcmp(u, "ps");
    if (!chat && !gen && !show && !version && !tags)
        return send_text(mc, 404, ollama_error("unknown URL (this server answers /api/chat, /api/generate, /api/tags, "
                                               "/api/ps, /api/show, /api/version)"), "application/json");
    if (!version && !authorized(srv, mc))
        return send_text(mc, 401, ollama_error("a valid API key is needed: send the header 'Authorization: Bearer KEY'"),
                         "application/json");
    if ((version || tags) ? !get : !post)
        return send_text(mc, 405, ollama_error((version || tags) ? "use GET" : "use POST"), "application/json");
    if (version) return send_text(mc, 200, ollama_version(), "application/json");
    if (tags) return send_text(mc, 200, ollama_tags(&srv->oc), "application/json");
    if (cc->too_big) return send_text(mc, 413, ollama_error("the body is larger than 16 MiB"), "application/json");
    if (cc->too_busy) return busy(mc);
    if (show) {
        int status = 500;
        char *out = ollama_show(&srv->oc, cc->body, cc->len, &status);
        return send_text(mc, status, out, "application/json");
    }
    return generate(srv, mc, cc, chat, chat ? DIALECT_OLLAMA_CHAT : DIALECT_OLLAMA_GENERATE);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    server *srv = cls;
    conn *cc = *con_cls;
    if (!cc) {
        if (!(cc = calloc(1, sizeof *cc))) return MHD_NO;
        *con_cls = cc;
        cc->t0 = srv_now();
        cc->n_prompt = cc->n_cached = cc->n_gen = -1;
        printable(cc->method, sizeof cc->method, method);
        printable(cc->path, sizeof cc->path, url);
        return MHD_YES;
    }
    if (*upload_size) {
        if (cc->len + *upload_size > MAX_BODY) cc->too_big = 1;
        if (!cc->len && !cc->reserved && !cc->too_big) { /* the whole declared body at once, or nothing */
            const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
            const unsigned long long want = cl ? strtoull(cl, NULL, 10) : 0;
            if (want > MAX_BODY) cc->too_big = 1;
            else if (want > *upload_size && reserve(srv, cc, (size_t)want) != 0) cc->too_busy = 1;
        }
        const size_t more = cc->len + *upload_size > cc->reserved ? cc->len + *upload_size - cc->reserved : 0;
        if (!cc->too_big && !cc->too_busy && more && reserve(srv, cc, more) != 0) {
            cc->too_busy = 1; /* the rest is read and dropped; the answer is a 503 */
            free(cc->body);
            cc->body = NULL;
            cc->len = cc->cap = 0;
        }
        if (!cc->too_big && !cc->too_busy) {
            if (cc->len + *upload_size + 1 > cc->cap) {
                size_t cap = cc->cap ? cc->cap : 4096;
                while (cap < cc->len + *upload_size + 1) cap *= 2;
                char *t = realloc(cc->body, cap);
                if (!t) return MHD_NO;
                cc->body = t;
                cc->cap = cap;
            }
            memcpy(cc->body + cc->len, upload, *upload_size);
            cc->len += *upload_size;
            cc->body[cc->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    const int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(method, "OPTIONS")) { /* a browser's preflight: answered before any key is asked for */
        if (!cors_origin(mc))
            return fail(mc, 403, "invalid_request_error", "forbidden",
                        "cross-origin requests need the server started with --cors ORIGIN");
        struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
        const char *want = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "Access-Control-Request-Headers");
        cors_headers(mc, r);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", want && *want ? want : "Authorization, Content-Type");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
        const enum MHD_Result ret = MHD_queue_response(mc, 204, r);
        MHD_destroy_response(r);
        return ret;
    }
    const char *foreign = foreign_request(srv, mc);
    if (foreign) return fail(mc, 403, "invalid_request_error", "forbidden", foreign);
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) { /* the page holds no secret: it asks for the key */
        if (!get) return fail(mc, 405, "invalid_request_error", "method_not_allowed", "use GET");
        return web_page(mc);
    }
    if (!strcmp(url, "/health")) {
        if (!get) return fail(mc, 405, "invalid_request_error", "method_not_allowed", "use GET");
        return send_text(mc, 200, strdup("{\"status\":\"ok\"}"), "application/json");
    }
    if (!strcmp(url, "/metrics")) {
        if (!get) return fail(mc, 405, "invalid_request_error", "method_not_allowed", "use GET");
        if (!authorized(srv, mc))
            return fail(mc, 401, "invalid_request_error", "invalid_api_key",
                        "a valid API key is needed: send the header 'Authorization: Bearer KEY'");
        return send_text(mc, 200, metrics_text(srv), "text/plain; version=0.0.4");
    }
    if (!strncmp(url, "/v1/jobs", 8)) return jobs_route(srv, mc, cc, url, method);
    const int chat = !strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions");
    const int comp = !strcmp(url, "/v1/completions") || !strcmp(url, "/completions");
    const int models = !strcmp(url, "/v1/models") || !strcmp(url, "/models");
    const int extra = !strcmp(url, "/tokenize") || !strcmp(url, "/detokenize") || !strcmp(url, "/apply-template");
    const int props = !strcmp(url, "/props"), slots = !strcmp(url, "/slots");
    const int embed = !strcmp(url, "/v1/embeddings") || !strcmp(url, "/embeddings");
    if (!strncmp(url, "/api/", 5)) return ollama_route(srv, mc, cc, url, get, post);
    if (!strcmp(url, "/v1/messages") || !strcmp(url, "/v1/messages/count_tokens"))
        return anthropic_route(srv, mc, cc, url, post);
    if (!chat && !comp && !models && !extra && !props && !slots && !embed)
        return fail(mc, 404, "invalid_request_error", "not_found", "unknown URL (see /v1/models, /v1/chat/completions, "
                                                                   "/v1/completions, /v1/embeddings, /v1/messages, "
                                                                   "/api/chat, /slots, "
                                                                   "/tokenize, /detokenize, /apply-template, /props, "
                                                                   "/health, /metrics)");
    if (!authorized(srv, mc))
        return fail(mc, 401, "invalid_request_error", "invalid_api_key",
                    "a valid API key is needed: send the header 'Authorization: Bearer KEY'");
    if (models || props || slots) {
        if (!get) return fail(mc, 405, "invalid_request_error", "method_not_allowed", "use GET");
        return send_text(mc, 200, models ? models_json(srv) : props ? props_json(srv) : slots_json(srv),
                         "application/json");
    }
    if (extra) {
        if (!post) return fail(mc, 405, "invalid_request_error", "method_not_allowed", "use POST");
        if (cc->too_big) return fail(mc, 413, "invalid_request_error", "request_too_large", "the body is larger than 16 MiB");
        if (cc->too_busy) return busy(mc);
        oai_error e;
        parse_begin(srv);
        char *out = url[1] == 't' ? oai_tokenize(&srv->oc, cc->body, cc->len, &e)
                    : url[1] == 'd' ? oai_detokenize(&srv->oc, cc->body, cc->len, &e)
                                    : oai_apply_template(&srv->oc, cc->body, cc->len, &e);
        parse_end(srv);
        return out ? send_text(mc, 200, out, "application/json") : send_error(mc, &e);
    }
    if (!post) return fail(mc, 405, "invalid_request_error", "method_not_allowed", "use POST");
    if (cc->too_big) return fail(mc, 413, "invalid_request_error", "request_too_large", "the body is larger than 16 MiB");
    if (cc->too_busy) return busy(mc);
    if (embed) return embeddings(srv, mc, cc);
    return generate(srv, mc, cc, chat, DIALECT_OPENAI);
}

/* One line on stderr for every request answered (--log-format text, json or none). */
static void log_request(const server *srv, struct MHD_Connection *mc, const conn *cc, int toe) {
    if (srv->log_format == LOG_NONE) return;
    const union MHD_ConnectionInfo *st = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_HTTP_STATUS);
    const union MHD_ConnectionInfo *ca = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char ip[INET6_ADDRSTRLEN] = "?";
    if (ca && ca->client_addr) {
        const struct sockaddr *sa = ca->client_addr;
        if (sa->sa_family == AF_INET) inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, ip, sizeof ip);
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, ip, sizeof ip);
    }
    const int status = st ? (int)st->http_status : 0;
    const double secs = srv_now() - cc->t0, tps = cc->n_gen > 0 && secs > 0 ? cc->n_gen / secs : 0;
    const char *cut = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : toe == MHD_REQUEST_TERMINATED_CLIENT_ABORT
                                                                      ? "client gone" : "ended early";
    if (srv->log_format == LOG_JSON) {
        fprintf(stderr, "{\"time\":%.3f,\"client\":\"%s\",\"method\":\"%s\",\"path\":\"%s\",\"status\":%d,"
                        "\"seconds\":%.4f", (double)time(NULL), ip, cc->method, cc->path, status, secs);
        if (cc->n_gen >= 0)
            fprintf(stderr, ",\"prompt_tokens\":%d,\"cached_tokens\":%d,\"generated_tokens\":%d,\"tokens_per_s\":%.2f",
                    cc->n_prompt, cc->n_cached, cc->n_gen, tps);
        fprintf(stderr, "%s%s%s}\n", *cut ? ",\"note\":\"" : "", cut, *cut ? "\"" : "");
    } else if (cc->n_gen >= 0) {
        fprintf(stderr, "request: %s %s %s %d: prompt %d tokens (%d cached), %d generated in %.3f s, %.2f tokens/s%s%s\n",
                ip, cc->method, cc->path, status, cc->n_prompt, cc->n_cached, cc->n_gen, secs, tps, *cut ? "; " : "",
                cut);
    } else {
        fprintf(stderr, "request: %s %s %s %d in %.3f s%s%s\n", ip, cc->method, cc->path, status, secs,
                *cut ? "; " : "", cut);
    }
}

static void completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe) {
    server *srv = cls;
    conn *cc = *con_cls;
    if (cc) log_request(srv, mc, cc, (int)toe);
    if (cc) {
        pthread_mutex_lock(&srv->id_mu);
        srv->pool_used -= cc->reserved;
        pthread_mutex_unlock(&srv->id_mu);
        free(cc->body);
    }
    free(cc);
    *con_cls = NULL;
}

/* ---- startup ---- */

static int resolve(const char *host, int port, struct sockaddr_storage *ss, int *v6) {
    struct addrinfo hints, *res;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return -1;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *v6 = res->ai_family == AF_INET6;
    if (*v6) ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    else ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return 0;
}

/* Is the address a loopback one (127.0.0.0/8, ::1)? */
static int loopback(const struct sockaddr_storage *ss) {
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)(const void *)ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)(const void *)ss)->sin6_addr);
    return 0;
}

/* `deltafin worker [--db PATH]` as a child process that dies with the server. -1 if it could not start. */
static pid_t start_worker(const char *db) {
    const pid_t pid = fork();
    if (pid != 0) return pid;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_UNBLOCK, &all, NULL); /* the server blocked SIGINT/SIGTERM; exec keeps the mask */
    signal(SIGPIPE, SIG_DFL);
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1) _exit(1);
    if (*db) execl("/proc/self/exe", "deltafin", "worker", "--db", db, (char *)NULL);
    else execl("/proc/self/exe", "deltafin", "worker", (char *)NULL);
    _exit(127);
}

static void stop_worker(pid_t pid) {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
}

/* The longest text of one token, in bytes. */
static int longest_piece(const df_model *m) {
    int most = 1;
    char buf[512];
    for (int32_t id = 0; id < df_n_vocab(m); id++) {
        const int n = df_token_to_piece(m, id, buf, sizeof buf);
        if (n > most) most = n;
    }
    return most;
}

static const char *base_name(const char *p) {
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

/* The most slots (0..o->parallel) of per_slot bytes each that o->mem holds, with the memory prefix cache. */
static int slots_that_fit(const srv_opts *o, df_model_params mp, uint64_t per_slot) {
    int lo = 0, hi = o->parallel;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        df_plan pl;
        char e[256];
        mp.n_sessions = mid;
        mp.mem_reserve = o->pc_mem + (uint64_t)mid * per_slot;
        const int R = mp.split_layers ? df_cluster_size() : 1; /* a pipeline: rank 0's stage */
        if (df_model_plan_rank(o->model, &mp, R, 0, &pl, e, sizeof e) == 0 && pl.minimum <= o->mem) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Load the model. Under --mem the budget holds, beside the weights, every slot's session and buffers
 * (sched_slot_bytes) and the memory prefix cache (--prompt-cache-mem): mp->mem_reserve. A budget that cannot
 * hold --parallel slots says how many it holds. */
static int load_model(const srv_opts *o, df_model_params *mp, df_model **m, char *err, size_t errlen) {
    uint64_t per_slot = (uint64_t)4 << 20; /* a first guess: exact once the model's sizes are known */
    for (;;) {
        mp->mem_reserve = o->mem ? o->pc_mem + (uint64_t)o->parallel * per_slot : 0;
        if (df_model_load(o->model, mp, m, err, errlen) != 0) {
            const size_t n = strlen(err);
            const int fit = o->mem ? slots_that_fit(o, *mp, per_slot) : o->parallel;
            if (fit < o->parallel && fit > 0)
                snprintf(err + n, errlen - n, " for --parallel %d; this budget holds --parallel %d at this context "
                         "(-c) and --prompt-cache-mem", o->parallel, fit);
            else if (fit < o->parallel)
                snprintf(err + n, errlen - n, "; this budget does not hold one slot at this context (-c) and "
                         "--prompt-cache-mem");
            return -1;
        }
        if (!o->mem) return 0;
        df_model_info mi;
        df_model_get_info(*m, &mi);
        const uint64_t need = sched_slot_bytes(mi.n_vocab, o->ctx > 0 ? o->ctx : mi.n_ctx_train, mi.n_embd);
        if (need <= per_slot) return 0;
        df_model_free(*m); /* the guess was short: plan again with the slots' real size */
        *m = NULL;
        per_slot = need;
    }
}

/* df_model_params.plan_cb: the plan the load goes by (ctx: the server) */
static void keep_plan(const df_plan *plan, void *ctx) {
    server *srv = ctx;
    srv->plan = *plan;
    srv->plan_kept = 1;
}

int df_cmd_serve(int argc, char **argv) {
    srv_opts o;
    srv_parse_opts(argc, argv, &o, 0);
    char err[8192];
    char *tmpl = NULL; /* read while SIGINT and SIGTERM still end the process (it may be standard input) */
    if (o.template_file && !(tmpl = srv_read_file(o.template_file, 1 << 22, err, sizeof err))) {
        fprintf(stderr, "deltafin: %s\n", err);
        return 1;
    }
    /* signals: the main thread waits for SIGINT/SIGTERM; every other thread blocks them */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);
    df_model_params mp = df_model_default_params();
    mp.n_threads = o.threads;
    mp.use_mmap = -1;
    mp.mem_budget = o.mem;
    mp.page_cache = o.page_cache;
    mp.n_ctx = o.ctx;
    mp.n_sessions = o.parallel; /* the budget holds every slot's session */
    mp.kv_type = o.kv_f32 ? DF_KV_F32 : DF_KV_F16;
    mp.split_layers = o.split_layers;
    server srv;
    memset(&srv, 0, sizeof srv);
    pthread_mutex_init(&srv.id_mu, NULL);
    /* before the model: outside its budget's peak; decoding's own products (memprobe.c), else a plain read */
    char probe_err[256];
    srv.mem_bps = df_model_probe_memory(o.model, &mp, 0.2, (uint64_t)32 << 20, probe_err, sizeof probe_err);
    if (srv.mem_bps <= 0) srv.mem_bps = df_probe_memory(0.2, (uint64_t)32 << 20, o.threads);
    mp.plan_cb = keep_plan; /* under --mem, the load's own plan (one process) */
    mp.plan_ctx = &srv;
    if (load_model(&o, &mp, &srv.m, err, sizeof err) != 0) {
        fprintf(stderr, "deltafin: %s\n", err);
        free(tmpl);
        return 1;
    }
    df_model_params pp = mp; /* the plan it runs under (without --mem: all in memory), for /metrics */
    pp.plan_cb = NULL;
    if (!pp.mem_budget) pp.mem_budget = (uint64_t)1 << 50;
    srv.plan_ok = srv.mem_bps > 0 && (srv.plan_kept || df_model_plan(o.model, &pp, &srv.plan, err, sizeof err) == 0) &&
                  srv.plan.minimum <= pp.mem_budget; /* no prediction without a measured memory speed */
    df_session_params sp = df_session_default_params();
    sp.n_ctx = o.ctx;
    sp.kv_type = mp.kv_type;
    srv_pcache *pc = NULL;
    if (pcache_new(srv.m, o.pc_mem, o.pc_dir, o.pc_disk, o.pc_min, &pc,
                   err, sizeof err) != 0 ||
        sched_new(srv.m, o.parallel, o.queue, &sp, pc, &srv.sched, err, sizeof err) != 0) {
        fprintf(stderr, "deltafin: %s\n", err);
        df_model_free(srv.m);
        free(tmpl);
        return 1;
    }
    srv.oc.m = srv.m;
    srv.oc.tmpl = tmpl ? tmpl : o.template_text;
    srv.oc.kwargs = o.template_kwargs;
    srv.oc.name = o.alias ? o.alias : base_name(o.model);
    srv.oc.strict_model = o.strict_model;
    srv.n_slots = o.parallel;
    srv.log_format = o.log_format;
    srv.pooling = o.pooling;
    srv.model_path = o.model;
    g_cors = o.cors;
    srv.oc.n_ctx = sched_n_ctx(srv.sched);
    srv.oc.max_piece = longest_piece(srv.m);
    srv.oc.max_values = 2L * srv.oc.n_ctx + 65536;
    srv.pool = o.request_mem ? o.request_mem : o.mem ? (uint64_t)64 << 20 : (uint64_t)1 << 30;
    srv.parse_slots = o.mem ? 1 : 4;
    pthread_cond_init(&srv.parse_cv, NULL);
    srv.api_key = o.api_key;
    srv.mem_budget = o.mem;
    struct sockaddr_storage ss;
    int v6 = 0;
    int rc = 1;
    pid_t worker = 0;
    struct MHD_Daemon *d = NULL;
    srv.host = o.host;
    const srv_jobs_limits lim = {o.mem, srv.oc.n_ctx, o.threads, o.remote, df_chat_template(srv.m) != NULL,
                                 o.page_cache};
    if (o.jobs_db && srv_jobs_open(o.jobs_db, o.model, srv.oc.name, &lim, &srv.jobs, err, sizeof err) != 0) {
        fprintf(stderr, "deltafin: job queue: %s\n", err);
        goto out;
    }
    if (o.worker && (worker = start_worker(o.jobs_db)) < 0) {
        fprintf(stderr, "deltafin: cannot start the worker: %s\n", strerror(errno));
        goto out;
    }
    if (resolve(o.host, o.port, &ss, &v6) != 0) {
        fprintf(stderr, "deltafin: cannot resolve --host '%s'\n", o.host);
        goto out;
    }
    /* Slow clients may not starve the others: at most --max-conn-per-ip connections from one address, and one that
     * sends nothing for CONN_IDLE_S seconds while its request is read is closed (a request being answered is not
     * idle: its thread is in handle()). The total stays under the descriptors the process may open. */
    struct rlimit nofile;
    unsigned conn_limit = 4096;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY && nofile.rlim_cur < conn_limit + 64)
        conn_limit = nofile.rlim_cur > 128 ? (unsigned)nofile.rlim_cur - 64 : 64;
    d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO |
                             (v6 ? MHD_USE_IPv6 : 0),
                         (uint16_t)o.port, NULL, NULL, handle, &srv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                         MHD_OPTION_NOTIFY_COMPLETED, completed, &srv, MHD_OPTION_CONNECTION_LIMIT, conn_limit,
                         MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)o.conn_per_ip,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONN_IDLE_S, MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "deltafin: cannot listen on %s port %d (in use, or not an address of this machine?)\n", o.host,
                o.port);
        goto out;
    }
    if (!o.api_key && !loopback(&ss))
        fprintf(stderr, "deltafin: warning: listening on %s without --api-key: anyone who reaches this address may "
                        "use the server (give --api-key-file FILE or DELTAFIN_API_KEY)\n",
                o.host);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    fprintf(stderr, "deltafin: serving %s on http://%s:%d (%d parallel, context %d, queue %d)\n", srv.oc.name, o.host,
            di ? di->port : o.port, o.parallel, srv.oc.n_ctx, o.queue);
    fflush(stderr);
    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "deltafin: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv.stopping = 1;
    /* the requests being answered say so to their clients (an error event and [DONE], or a 503) before the
     * daemon closes the connections: they notice within a wait (200 ms); give them 5 s at most */
    for (int i = 0; i < 100; i++) {
        pthread_mutex_lock(&srv.id_mu);
        const int busy = srv.inflight;
        pthread_mutex_unlock(&srv.id_mu);
        if (!busy) break;
        usleep(50000);
    }
    rc = 0;
out:
    if (d) MHD_stop_daemon(d);
    stop_worker(worker);
    srv_jobs_close(srv.jobs);
    sched_free(srv.sched);
    df_model_save_hot(srv.m, err, sizeof err);
    df_model_free(srv.m);
    pthread_mutex_destroy(&srv.id_mu);
    free(tmpl);
    return rc;
}
