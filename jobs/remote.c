/*
 * remote.c - a job run on a remote OpenAI-compatible endpoint (remote.h).
 *
 * One attempt: a JSON body (cJSON) from the job and the text committed so
 * far, a streaming POST with libcurl, and a write callback that splits the
 * answer into server-sent-event lines ("data: {...}" ... "data: [DONE]"),
 * takes each chunk's text (choices[0].text, or .delta.content for a chat)
 * and commits the pieces every commit_every seconds. A piece is committed
 * only from a whole line, so a stream cut mid-line loses nothing committed
 * and commits nothing twice: the next attempt starts from the committed
 * text. An attempt that ends without "[DONE]" (a dropped connection, a
 * refused one, an HTTP 5xx) is retried after a doubling pause; an HTTP 4xx
 * or an error the remote sends in the stream fails the job at once, with
 * the remote's words.
 */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "deltafin.h"
#include "remote.h"

#define JR_ERR 1024
#define JR_MAX_LINE (1 << 20) /* bytes of one server-sent-event line, at most */

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A growable byte buffer. */
typedef struct {
    char *p;
    size_t n, cap;
} buf;

static int buf_add(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) return -1;
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

/* One remote run of a job. */
typedef struct {
    jq *q;
    const char *owner;
    jq_job *job;
    const jr_opts *o;
    volatile sig_atomic_t *stop;
    buf text;               /* committed text, then the pending pieces */
    size_t committed;       /* bytes of text committed */
    int n_done;             /* pieces committed */
    size_t *off;            /* pending pieces: off[0..n_pend] into text, from committed */
    int32_t *ids;           /* n_pend times -1 */
    int n_pend, cap_pend;
    double last_commit, gen_prev, t0;
    int lost, dberr;
    /* this attempt */
    buf line, body;         /* the line being read; a non-200 answer's body */
    long http;
    int done, failed;       /* saw [DONE]; the remote sent an error */
    char why[JR_ERR];       /* the remote's error */
    char dberrmsg[JR_ERR];
} rrun;

static int commit(rrun *r) {
    if (r->n_pend == 0 || r->lost || r->dberr) return 0;
    size_t *off = malloc(((size_t)r->n_pend + 1) * sizeof *off);
    if (!off) {
        snprintf(r->dberrmsg, sizeof r->dberrmsg, "out of memory");
        r->dberr = 1;
        return -1;
    }
    for (int i = 0; i <= r->n_pend; i++) off[i] = r->off[i] - r->committed;
    const double gen = r->gen_prev + (mono() - r->t0);
    const int rc = jq_commit(r->q, r->job->id, r->owner, r->n_done, r->ids, r->n_pend, r->text.p + r->committed, off,
                             NULL, 0, gen, &r->lost, r->dberrmsg, sizeof r->dberrmsg);
    free(off);
    if (rc != 0) {
        r->dberr = 1;
        return -1;
    }
    if (!r->lost) {
        r->n_done += r->n_pend;
        r->committed = r->text.n;
    }
    r->n_pend = 0;
    r->last_commit = mono();
    return 0;
}

static int add_piece(rrun *r, const char *s, size_t n) {
    if (n == 0) return 0;
    if (r->n_pend + 2 > r->cap_pend) {
        const int cap = r->cap_pend ? 2 * r->cap_pend : 64;
        size_t *o = realloc(r->off, (size_t)cap * sizeof *o);
        if (o) r->off = o;
        int32_t *ids = realloc(r->ids, (size_t)cap * sizeof *ids);
        if (ids) r->ids = ids;
        if (!o || !ids) return -1;
        r->cap_pend = cap;
    }
    if (r->n_pend == 0) r->off[0] = r->text.n;
    if (buf_add(&r->text, s, n) != 0) return -1;
    r->ids[r->n_pend++] = -1;
    r->off[r->n_pend] = r->text.n;
    return 0;
}

/* One "data: ..." line of the stream. */
static void on_line(rrun *r, const char *line) {
    if (strncmp(line, "data:", 5)) return; /* comments, event names, blank lines */
    line += 5;
    while (*line == ' ') line++;
    if (!strcmp(line, "[DONE]")) {
        r->done = 1;
        return;
    }
    cJSON *j = cJSON_Parse(line);
    if (!j) return;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (e) {
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
        snprintf(r->why, sizeof r->why, "the remote stream said: %s",
                 cJSON_IsString(m) ? m->valuestring : cJSON_IsString(e) ? e->valuestring : "an error");
        r->failed = 1;
    }
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(ch, "text");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ch, "delta"), "content");
    if (cJSON_IsString(t) && add_piece(r, t->valuestring, strlen(t->valuestring)) != 0) {
        snprintf(r->why, sizeof r->why, "out of memory");
        r->failed = 1;
    }
    cJSON_Delete(j);
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *cls) {
    rrun *r = cls;
    const size_t n = size * nmemb;
    if (r->http != 200) { /* keep the start of an error's body to quote it */
        if (r->body.n < 4096 && buf_add(&r->body, p, n) != 0) return 0;
        return n;
    }
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\n') {
            if (r->line.n && r->line.p[r->line.n - 1] == '\r') r->line.p[--r->line.n] = 0;
            if (r->line.n) on_line(r, r->line.p);
            r->line.n = 0;
        } else if (r->line.n >= JR_MAX_LINE) { /* no event is that long: a broken or hostile stream */
            snprintf(r->why, sizeof r->why, "the remote sent a line of over %d bytes", JR_MAX_LINE);
            r->failed = 1;
            return 0;
        } else if (buf_add(&r->line, p + i, 1) != 0) {
            return 0;
        }
    }
    if (mono() - r->last_commit >= r->o->commit_every) commit(r);
    return r->lost || r->dberr || r->failed || *r->stop ? 0 : n;
}

static int on_progress(void *cls, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
    rrun *r = cls;
    if (r->n_pend && mono() - r->last_commit >= r->o->commit_every) commit(r);
    return r->lost || r->dberr || *r->stop;
}

static size_t on_header(char *p, size_t size, size_t nmemb, void *cls) {
    rrun *r = cls;
    const size_t n = size * nmemb;
    long code;
    if (n > 5 && !strncmp(p, "HTTP/", 5)) {
        const char *sp = memchr(p, ' ', n);
        if (sp && sscanf(sp, " %ld", &code) == 1) r->http = code;
    }
    return n;
}

/* The request's body: the job's prompt (or messages) with the committed
 * text appended, and its sampling. NULL with why on a failure. */
static char *request_body(const rrun *r, int max_tokens, char *why, size_t n) {
    const jq_job *j = r->job;
    cJSON *b = cJSON_CreateObject();
    if (!b) return NULL;
    if (j->chat) {
        cJSON *c = cJSON_ParseWithLength(j->prompt, j->prompt_len);
        cJSON *msgs = cJSON_DetachItemFromObjectCaseSensitive(c, "messages");
        cJSON_Delete(c);
        if (!cJSON_IsArray(msgs)) {
            snprintf(why, n, "the job's chat has no \"messages\" list");
            cJSON_Delete(msgs);
            cJSON_Delete(b);
            return NULL;
        }
        if (r->committed) { /* a resumed chat: the answer so far, as the final assistant message */
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddStringToObject(m, "content", r->text.p);
            cJSON_AddItemToArray(msgs, m);
        }
        cJSON_AddItemToObject(b, "messages", msgs);
    } else {
        if (memchr(j->prompt, 0, j->prompt_len)) {
            snprintf(why, n, "the prompt holds a NUL byte, which JSON cannot carry");
            cJSON_Delete(b);
            return NULL;
        }
        buf p = {0};
        if (buf_add(&p, j->prompt, j->prompt_len) != 0 || buf_add(&p, r->text.p ? r->text.p : "", r->committed)) {
            free(p.p);
            cJSON_Delete(b);
            return NULL;
        }
        cJSON_AddStringToObject(b, "prompt", p.p);
        free(p.p);
    }
    cJSON_AddNumberToObject(b, "max_tokens", max_tokens);
    cJSON_AddBoolToObject(b, "stream", 1);
    cJSON_AddNumberToObject(b, "temperature", j->sp.temp);
    cJSON_AddNumberToObject(b, "top_k", j->sp.top_k);
    cJSON_AddNumberToObject(b, "top_p", j->sp.top_p);
    cJSON_AddNumberToObject(b, "min_p", j->sp.min_p);
    cJSON_AddNumberToObject(b, "repeat_penalty", j->sp.repeat_penalty);
    cJSON_AddNumberToObject(b, "seed", (double)j->sp.seed);
    if (j->ignore_eos) cJSON_AddBoolToObject(b, "ignore_eos", 1);
    char *s = cJSON_PrintUnformatted(b);
    cJSON_Delete(b);
    if (!s) snprintf(why, n, "out of memory");
    return s;
}

/* One attempt. 0: it ended ([DONE], a stop, the job lost); 1: retry; 2: the job fails (why). */
static int attempt(rrun *r, int max_tokens, char *why, size_t n) {
    char *body = request_body(r, max_tokens, why, n);
    if (!body) return 2;
    const jq_job *j = r->job;
    buf url = {0};
    size_t ul = strlen(j->remote);
    while (ul && j->remote[ul - 1] == '/') ul--;
    const char *path = j->chat ? "/v1/chat/completions" : "/v1/completions";
    CURL *c = curl_easy_init();
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    struct curl_slist *h2 = h ? curl_slist_append(h, "Accept: text/event-stream") : NULL;
    char auth[600];
    const char *key = getenv("DELTAFIN_REMOTE_KEY");
    if (h2 && key && *key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", key);
        struct curl_slist *h3 = curl_slist_append(h2, auth);
        if (h3) h2 = h3;
    }
    if (!c || !h2 || buf_add(&url, j->remote, ul) != 0 || buf_add(&url, path, strlen(path)) != 0) {
        snprintf(why, n, "out of memory");
        curl_easy_cleanup(c);
        curl_slist_free_all(h2 ? h2 : h);
        free(url.p);
        free(body);
        return 2;
    }
    r->line.n = r->body.n = 0;
    r->http = 0;
    r->done = r->failed = 0;
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(c, CURLOPT_URL, url.p);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h2);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, r);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);   /* a remote silent for 10 minutes is gone */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 600L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, cerr);
    const CURLcode rc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    curl_slist_free_all(h2);
    free(body);
    commit(r);
    int out;
    if (r->dberr || r->lost || *r->stop || r->done) {
        out = 0;
    } else if (r->failed) {
        snprintf(why, n, "%s", r->why);
        out = 2;
    } else if (r->http >= 400) {
        snprintf(why, n, "%s answered HTTP %ld: %.400s", url.p, r->http, r->body.p ? r->body.p : "");
        out = r->http >= 500 ? 1 : 2;
    } else {
        snprintf(why, n, "%s: %s", url.p,
                 rc != CURLE_OK ? (*cerr ? cerr : curl_easy_strerror(rc)) : "the stream ended before [DONE]");
        out = 1;
    }
    free(url.p);
    return out;
}

static int n_tokens(const df_model *m, const char *s, size_t n) {
    int need = 0;
    char e[256];
    if (df_tokenize(m, s, n, 1, 1, NULL, 0, &need, e, sizeof e) != 0 && need == 0) return -1;
    return need;
}

/* Tokens the committed text holds, by the model's own tokenizer (-1:
 * unknown): for a prompt job, those of prompt + text less the prompt's (as
 * the remote reads them: a tokenizer's leading space or a merge across the
 * seam counts as it would there); for a chat, the text's alone. */
static int count_tokens(const df_model *m, const jq_job *j, const char *s, size_t n) {
    if (!m || n == 0) return 0;
    if (j->chat) return n_tokens(m, s, n);
    buf b = {0};
    int r = -1;
    if (buf_add(&b, j->prompt, j->prompt_len) == 0 && buf_add(&b, s, n) == 0) {
        const int all = n_tokens(m, b.p, b.n), p = n_tokens(m, j->prompt, j->prompt_len);
        r = all < 0 || p < 0 ? -1 : all - p;
    }
    free(b.p);
    return r;
}

static void event(const rrun *r, const char *kind, const char *text) {
    char e[256];
    if (r->o->log) fprintf(r->o->log, "worker: job %lld: %s: %s\n", (long long)r->job->id, kind, text);
    if (jq_event(r->q, r->job->id, kind, text, e, sizeof e) != 0 && r->o->log)
        fprintf(r->o->log, "worker: job %lld: the event was not recorded: %s\n", (long long)r->job->id, e);
}

int jr_global_init(char *err, size_t errlen) {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        snprintf(err, errlen, "libcurl could not be initialised");
        return -1;
    }
    return 0;
}

/* Sleep s seconds, or less when stopped. */
static void pause_for(double s, volatile sig_atomic_t *stop) {
    for (double t = 0; t < s && !*stop; t += 0.05) usleep(50000);
}

int jr_run(jq *q, const char *owner, jq_job *job, const jr_opts *o, volatile sig_atomic_t *stop, char *err,
           size_t errlen) {
    rrun r;
    memset(&r, 0, sizeof r);
    r.q = q;
    r.owner = owner;
    r.job = job;
    r.o = o;
    r.stop = stop;
    char why[JR_ERR] = "", text[JR_ERR + 128];
    jq_job cur;
    int found = 0;
    if (jq_get(q, job->id, 1, &cur, &found, err, errlen) != 0) return -1;
    if (found && buf_add(&r.text, cur.text ? cur.text : "", cur.text_len) != 0) snprintf(why, sizeof why, "out of memory");
    r.committed = r.text.n;
    r.n_done = found ? cur.n_done : 0;
    r.gen_prev = found ? cur.gen_seconds : 0;
    jq_job_free(&cur);
    r.t0 = r.last_commit = mono();
    /* the model's tokenizer, to count what is committed (a resumed stream asks for the rest) */
    df_model_params mp = df_model_default_params();
    mp.vocab_only = 1;
    df_model *m = NULL;
    char me[256];
    if (df_model_load(job->model, &mp, &m, me, sizeof me) != 0) {
        m = NULL;
        snprintf(text, sizeof text, "the model's tokenizer did not load (%s): a resumed stream counts committed "
                 "pieces as tokens", me);
        event(&r, "remote", text);
    }
    const char *how = "failed";
    const char *note = NULL;
    for (int k = 0; !*why; k++) {
        int used = count_tokens(m, job, r.text.p, r.committed);
        if (used < 0) used = r.n_done;
        const int left = job->n_predict - used;
        if (left <= 0) {
            how = "done";
            break;
        }
        const int rc = attempt(&r, left, why, sizeof why);
        if (r.dberr) break;
        if (r.lost) {
            how = "";
            break;
        }
        if (*stop) {
            how = "queued";
            break;
        }
        if (rc == 0) {
            how = "done";
            note = "ran on the remote";
            break;
        }
        if (rc == 2 || k >= o->retries) {
            if (rc == 1) {
                char last[JR_ERR];
                snprintf(last, sizeof last, "%s", why);
                snprintf(why, sizeof why, "the remote failed %d times; the last: %.900s", k + 1, last);
            }
            break;
        }
        double wait = o->backoff;
        for (int i = 0; i < k && wait < 30; i++) wait *= 2;
        if (wait > 30) wait = 30;
        snprintf(text, sizeof text, "attempt %d of %d failed (%s); resuming from %d committed pieces in %.1f s", k + 1,
                 o->retries + 1, why, r.n_done, wait);
        event(&r, "remote-retry", text);
        *why = 0;
        pause_for(wait, stop);
        if (*stop) {
            how = "queued";
            break;
        }
    }
    df_model_free(m);
    int out = 0;
    if (r.dberr) {
        snprintf(err, errlen, "%s", r.dberrmsg);
        out = -1;
    } else if (*how) {
        if (!strcmp(how, "failed")) event(&r, "failed", why);
        if (o->log)
            fprintf(o->log, "worker: job %lld %s on the remote%s%s (%d pieces)\n", (long long)job->id, how,
                    *why ? ": " : "", why, r.n_done);
        out = jq_finish(q, job->id, owner, how, !strcmp(how, "failed") ? why : NULL, note, err, errlen);
    }
    free(r.text.p);
    free(r.line.p);
    free(r.body.p);
    free(r.off);
    free(r.ids);
    return out;
}
