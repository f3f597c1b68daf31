/*
 * sched.c - the server's scheduler: parallel slots and a bounded queue.
 *
 * Each slot owns a df_session (its KV cache) and, while it runs a job, a
 * df_sampler. One scheduler thread loops: admit queued jobs into free slots
 * (preferring the slot whose cache shares the longest token prefix with the
 * new prompt, which it then keeps, or failing that an entry of the prefix
 * caches, pcache.c, that shares more), then sched_step(): gather one input per
 * active sequence (a prompt chunk of up to n_batch tokens, or the last
 * sampled token), run the forward pass for all of them in decode_all() -
 * the one place that calls the model: df_decode_batch, one pass over the
 * weights for all generating sequences - and sample, append text, check stop strings, the token limit and
 * end of generation. New requests join between steps (continuous batching);
 * a cancelled job leaves at the next step. An embedding job (srv_job.embed)
 * decodes its prompt alone (df_decode_hidden, from an empty cache: every
 * row's hidden state is needed), in chunks whose hidden rows fit EMBED_BUF,
 * pools them as it goes and ends with its vector; it samples nothing. A slot that has just decoded a
 * whole prompt hands its state to the prefix caches (after the step, outside
 * the mutex). Loading from them happens at admission, under the mutex.
 *
 * Locking: one mutex guards the queue, every job's output and the metrics.
 * The forward pass runs without it. Jobs are reference counted: the HTTP
 * side and the scheduler each hold one.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

typedef struct slot {
    df_session *s;
    df_sampler *smp;
    float *logits;
    srv_job *j;         /* the job it runs, or NULL */
    int fed;            /* prompt tokens in the cache */
    int32_t next_tok;   /* sampled, not yet decoded */
    int32_t *hist;      /* the tokens the cache holds */
    int n_hist;
    /* this step's input */
    const int32_t *in;
    int n_in;
    int failed;
    int store;          /* the whole prompt decoded this step: keep its state */
    int fail_status;    /* the HTTP status of its failure (0: 500) */
    char err[256];
    /* an embedding job's: this chunk's hidden rows, and the pooled sum or row so far (n_embd each) */
    float *hidden;
    double *pool;
} slot;

#define EMBED_BUF ((size_t)1 << 20) /* bytes of hidden rows an embedding job decodes at once, at most */

struct srv_sched {
    df_model *m;
    int nv, n_ctx, n_batch, n_embd, embed_rows;
    pthread_mutex_t mu;
    pthread_cond_t work;
    srv_job *qhead, *qtail;
    int qlen, qcap;
    slot *slots;
    int n_slots;
    pthread_t th;
    int started, stop;
    srv_metrics mt;
    srv_pcache *pc;     /* the prefix caches, or NULL */
    double mark_t;
    uint64_t mark_tokens;
    /* A step's arrays, n_slots entries each, allocated once (the scheduler
     * thread alone uses them). */
    slot **act, **gen;   /* the active slots; of those, the generating ones (not embedding) */
    df_session **ss;
    const int32_t **toks;
    int *nt, *pos0;
    float **lg;
};

double srv_now(void);

srv_job *srv_job_new(const int32_t *prompt, int n_prompt) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->prompt = malloc((size_t)(n_prompt > 0 ? n_prompt : 1) * sizeof(int32_t));
    if (!j->prompt) {
        free(j);
        return NULL;
    }
    if (n_prompt > 0) memcpy(j->prompt, prompt, (size_t)n_prompt * sizeof(int32_t));
    j->n_prompt = n_prompt;
    j->logprobs = -1;
    j->stop_hit = -1;
    j->sp = df_sampler_default_params();
    return j;
}

void srv_job_free(srv_job *j) {
    if (!j) return;
    for (int i = 0; i < j->n_stop; i++) free(j->stop[i]);
    free(j->prompt);
    free(j->text);
    free(j->lps);
    free(j->embd);
    df_grammar_free(j->grammar);
    free(j->bias_id);
    free(j->bias);
    free(j);
}

static void job_unref(srv_job *j) {
    if (--j->refs == 0) srv_job_free(j);
}

/* ---- output (under the mutex) ---- */

static int append_text(srv_job *j, const char *b, size_t n) {
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap : 256;
        while (cap < j->len + n + 1) cap *= 2;
        char *t = realloc(j->text, cap);
        if (!t) return -1;
        j->text = t;
        j->cap = cap;
    }
    memcpy(j->text + j->len, b, n);
    j->len += n;
    j->text[j->len] = 0;
    return 0;
}

static int append_logprob(srv_job *j, const srv_logprob *lp) {
    if (j->n_lps == j->cap_lps) {
        int cap = j->cap_lps ? 2 * j->cap_lps : 16;
        srv_logprob *t = realloc(j->lps, (size_t)cap * sizeof *t);
        if (!t) return -1;
        j->lps = t;
        j->cap_lps = cap;
    }
    j->lps[j->n_lps++] = *lp;
    return 0;
}

/* log-softmax of the chosen token and the k most likely ones */
static void logprobs_of(const float *l, int nv, int32_t tok, int k, srv_logprob *out) {
    float mx = l[0];
    for (int i = 1; i < nv; i++) mx = l[i] > mx ? l[i] : mx;
    double sum = 0;
    for (int i = 0; i < nv; i++) sum += exp((double)(l[i] - mx));
    const float lse = mx + (float)log(sum);
    out->id = tok;
    out->lp = l[tok] - lse;
    out->n_top = 0;
    for (int i = 0; i < nv; i++) {
        const float v = l[i] - lse;
        int p = out->n_top < k ? out->n_top++ : k;
        if (p == k && (k == 0 || v <= out->top_lp[k - 1])) continue;
        if (p == k) p = k - 1;
        while (p > 0 && out->top_lp[p - 1] < v) {
            out->top_lp[p] = out->top_lp[p - 1];
            out->top_id[p] = out->top_id[p - 1];
            p--;
        }
        out->top_lp[p] = v;
        out->top_id[p] = i;
    }
}

/* ---- slots ---- */

static size_t common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    size_t i = 0;
    while ((int)i < na && (int)i < nb && a[i] == b[i]) i++;
    return i;
}

static int pick_slot(srv_sched *s, const srv_job *j) {
    int best = -1;
    size_t best_len = 0;
    for (int i = 0; i < s->n_slots; i++) {
        if (s->slots[i].j) continue;
        size_t l = common_prefix(s->slots[i].hist, s->slots[i].n_hist, j->prompt, j->n_prompt);
        if (best < 0 || l > best_len) best = i, best_len = l;
    }
    return best;
}

static void slot_finish(srv_sched *s, slot *sl, int why, const char *msg);

/* An embedding job: an empty cache, the buffers of its rows (kept for the next). */
static void slot_start_embed(srv_sched *s, slot *sl, srv_job *j) {
    char err[256];
    df_session_truncate(sl->s, 0, err, sizeof err);
    sl->n_hist = sl->fed = 0;
    j->n_cached = 0;
    if (!sl->hidden) sl->hidden = malloc((size_t)s->embed_rows * (size_t)s->n_embd * sizeof(float));
    if (!sl->pool) sl->pool = malloc((size_t)s->n_embd * sizeof(double));
    j->embd = malloc((size_t)s->n_embd * sizeof(float));
    if (!sl->hidden || !sl->pool || !j->embd) {
        sl->failed = 1;
        snprintf(sl->err, sizeof sl->err, "out of memory");
        return;
    }
    memset(sl->pool, 0, (size_t)s->n_embd * sizeof(double));
}

/* Pool this chunk's rows (the prompt's rows first..first+n): a sum for mean, the row for last, row 0 for cls. */
static void embed_pool(const srv_sched *s, slot *sl, int first, int n) {
    const int d = s->n_embd, mode = sl->j->embed;
    for (int r = 0; r < n; r++) {
        const float *h = sl->hidden + (size_t)r * (size_t)d;
        if (mode == SRV_POOL_MEAN) {
            for (int k = 0; k < d; k++) sl->pool[k] += h[k];
        } else if ((mode == SRV_POOL_LAST && first + r == sl->j->n_prompt - 1) || (mode == SRV_POOL_CLS && first + r == 0)) {
            for (int k = 0; k < d; k++) sl->pool[k] = h[k];
        }
    }
}

/* The pooled vector, L2-normalised (llama-server's default), into the job. Under the mutex. */
static void embed_finish(srv_sched *s, slot *sl) {
    srv_job *j = sl->j;
    const int d = s->n_embd;
    const double scale = j->embed == SRV_POOL_MEAN ? 1.0 / j->n_prompt : 1.0;
    double sum = 0;
    for (int k = 0; k < d; k++) sum += (sl->pool[k] * scale) * (sl->pool[k] * scale);
    const double norm = sum > 0 ? 1.0 / sqrt(sum) : 0.0;
    for (int k = 0; k < d; k++) j->embd[k] = (float)(sl->pool[k] * scale * norm);
    j->n_embd = d;
    slot_finish(s, sl, FIN_STOP, NULL);
}

/* Give a slot its job: keep the cached common prefix (at least one prompt
 * token is decoded again, for the logits), a fresh sampler. */
static void slot_start(srv_sched *s, slot *sl, srv_job *j) {
    j->t_start = srv_now();
    char err[256];
    sl->j = j;
    sl->failed = 0;
    sl->store = 0;
    sl->fail_status = 0;
    if (j->embed) {
        slot_start_embed(s, sl, j);
        return;
    }
    int keep = (int)common_prefix(sl->hist, sl->n_hist, j->prompt, j->n_prompt);
    if (keep >= j->n_prompt) keep = j->n_prompt - 1;
    if (keep < 0) keep = 0;
    const uint64_t disk_errors = s->mt.pc.disk_errors;
    const int got = pcache_restore(s->pc, sl->s, j->prompt, j->n_prompt - 1, keep);
    pcache_stats_get(s->pc, &s->mt.pc);
    if (s->mt.pc.disk_errors != disk_errors)
        fprintf(stderr, "deltafin: prompt cache refused and ignored: %s\n", pcache_last_error(s->pc));
    if (got > 0) {
        keep = got;
        memcpy(sl->hist, j->prompt, (size_t)keep * sizeof(int32_t));
    } else if (df_session_truncate(sl->s, keep, err, sizeof err) != 0) {
        keep = 0;
        df_session_truncate(sl->s, 0, err, sizeof err);
    }
    sl->n_hist = keep;
    sl->fed = keep;
    j->n_cached = keep;
    s->mt.prompt_cached += (uint64_t)keep;
    df_sampler_free(sl->smp);
    sl->smp = df_sampler_new(&j->sp, s->nv);
    if (!sl->smp) {
        sl->failed = 1;
        snprintf(sl->err, sizeof sl->err, "out of memory");
        return;
    }
    for (int i = 0; i < j->n_prompt; i++) df_sampler_accept(sl->smp, j->prompt[i]);
    const char *trig[1] = {j->trigger}; /* a lazy grammar (tool calls the model may make) waits for it */
    if ((j->grammar && (*j->trigger ? df_sampler_set_grammar_lazy(sl->smp, j->grammar, trig, 1)
                                    : df_sampler_set_grammar(sl->smp, j->grammar)) != DF_OK) || /* the output's */
        (j->n_bias && df_sampler_set_logit_bias(sl->smp, j->bias_id, j->bias, j->n_bias) != DF_OK)) {
        sl->failed = 1;
        snprintf(sl->err, sizeof sl->err, "out of memory");
    }
}

static void slot_finish(srv_sched *s, slot *sl, int why, const char *msg) {
    srv_job *j = sl->j;
    if (sl->smp) df_sampler_set_grammar(sl->smp, NULL); /* the job's grammar goes with it */
    j->t_end = srv_now();
    if (!j->t_first) j->t_first = j->t_end;
    j->finish = why;
    if (msg) snprintf(j->error, sizeof j->error, "%s", msg);
    if (j->cond) pthread_cond_broadcast(j->cond);
    job_unref(j);
    sl->j = NULL;
    s->mt.active--;
}

/* ---- the step ---- */

/* The forward pass of every active sequence: each slot's n_in tokens at its
 * session's position; its last token's logits into its buffer. One
 * df_decode_batch call: for a generation step every weight is read once for
 * all sequences (decode.c says which sessions share a pass). If it fails, the sequences it had
 * not advanced run alone, so only the one at fault fails. */
static void decode_all(srv_sched *s, int n) {
    slot **act = s->act, **gen = s->gen;
    int ng = 0;
    for (int i = 0; i < n; i++) {
        slot *sl = act[i];
        if (sl->j->embed) { /* alone, for its hidden rows */
            const int first = df_session_pos(sl->s);
            const int rc = df_decode_hidden(sl->s, sl->in, sl->n_in, sl->logits, 0, sl->hidden, sl->err, sizeof sl->err);
            if (rc != 0) sl->failed = 1, sl->fail_status = rc == DF_E_UNSUPPORTED ? 501 : rc == DF_E_INPUT ? 400 : 0;
            else embed_pool(s, sl, first, sl->n_in);
            continue;
        }
        gen[ng] = sl;
        s->ss[ng] = sl->s;
        s->toks[ng] = sl->in;
        s->nt[ng] = sl->n_in;
        s->lg[ng] = sl->logits;
        s->pos0[ng] = df_session_pos(sl->s);
        ng++;
    }
    char err[256];
    if (ng > 0 && df_decode_batch(s->ss, ng, s->toks, s->nt, s->lg, err, sizeof err) != 0)
        for (int i = 0; i < ng; i++) {
            slot *sl = gen[i];
            if (df_session_pos(sl->s) == s->pos0[i] + sl->n_in) continue; /* it ran */
            if (df_decode(sl->s, sl->in, sl->n_in, sl->logits, 0, sl->err, sizeof sl->err) != 0) sl->failed = 1;
        }
}

/* Sample after a decode and record the token. Under the mutex. */
static void slot_emit(srv_sched *s, slot *sl) {
    srv_job *j = sl->j;
    if (j->max_tokens <= j->n_gen) {
        slot_finish(s, sl, FIN_LENGTH, NULL);
        return;
    }
    const int32_t tok = df_sampler_sample(sl->smp, sl->logits);
    df_sampler_accept(sl->smp, tok);
    if (!j->ignore_eos && df_token_is_eog(s->m, tok)) {
        slot_finish(s, sl, FIN_STOP, NULL);
        return;
    }
    char buf[512];
    int keep = 0; /* a tool format's marker (a control token): its text goes in (tools.c) */
    for (int k = 0; k < j->n_keep; k++) keep |= j->keep[k] == tok;
    int n = keep ? df_token_text(s->m, tok, buf, sizeof buf) : df_token_to_piece(s->m, tok, buf, sizeof buf);
    if (n > (int)sizeof buf) n = (int)sizeof buf;
    if (n < 0) n = 0;
    const size_t before = j->len;
    srv_logprob lp;
    if (j->logprobs >= 0) logprobs_of(sl->logits, s->nv, tok, j->logprobs, &lp);
    if (append_text(j, buf, (size_t)n) != 0 || (j->logprobs >= 0 && append_logprob(j, &lp) != 0)) {
        slot_finish(s, sl, FIN_ERROR, "out of memory");
        return;
    }
    if (j->n_gen++ == 0) j->t_first = srv_now();
    s->mt.gen_tokens++;
    if (j->n_stop) {
        size_t longest = 0;
        for (int i = 0; i < j->n_stop; i++) longest = strlen(j->stop[i]) > longest ? strlen(j->stop[i]) : longest;
        const long at = srv_find_stop(j, before + 1 > longest ? before + 1 - longest : 0, &j->stop_hit);
        if (at >= 0) {
            j->len = (size_t)at;
            j->text[j->len] = 0;
            slot_finish(s, sl, FIN_STOP, NULL);
            return;
        }
    }
    if (j->cond) pthread_cond_broadcast(j->cond);
    if (j->n_gen >= j->max_tokens || df_session_pos(sl->s) >= s->n_ctx) {
        slot_finish(s, sl, FIN_LENGTH, NULL);
        return;
    }
    sl->next_tok = tok;
}

static void hist_push(slot *sl, const int32_t *t, int n) {
    memcpy(sl->hist + sl->n_hist, t, (size_t)n * sizeof(int32_t));
    sl->n_hist += n;
}

/* Hand the state of slots that have just decoded a whole prompt (their
 * session holds hist[0..n_hist), the prompt) to the prefix caches. The job
 * may have finished already; the slot is not given another before the next
 * step, so its session is still as the step left it. */
static void store_prompts(srv_sched *s, int n) {
    int stored = 0;
    for (int i = 0; i < n; i++) {
        slot *sl = s->act[i];
        if (!sl->store) continue;
        sl->store = 0;
        pcache_store(s->pc, sl->s, sl->hist, sl->n_hist);
        stored = 1;
    }
    if (!stored) return;
    pthread_mutex_lock(&s->mu);
    pcache_stats_get(s->pc, &s->mt.pc);
    pthread_mutex_unlock(&s->mu);
}

/* One step for every active sequence. Returns how many ran. */
static int sched_step(srv_sched *s) {
    slot **act = s->act;
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->j) continue;
        if (sl->j->cancelled) {
            slot_finish(s, sl, FIN_CANCELLED, NULL);
            continue;
        }
        if (sl->failed) {
            sl->j->status = sl->fail_status;
            slot_finish(s, sl, FIN_ERROR, sl->err);
            continue;
        }
        const srv_job *j = sl->j;
        if (sl->fed < j->n_prompt) {
            const int left = j->n_prompt - sl->fed, most = j->embed ? s->embed_rows : s->n_batch;
            sl->in = j->prompt + sl->fed;
            sl->n_in = left < most ? left : most;
        } else {
            sl->in = &sl->next_tok;
            sl->n_in = 1;
        }
        act[n++] = sl;
    }
    pthread_mutex_unlock(&s->mu);
    if (n == 0) return 0;
    const double t0 = srv_now();
    decode_all(s, n);
    const double dt = srv_now() - t0;
    pthread_mutex_lock(&s->mu);
    s->mt.busy_seconds += dt;
    s->mt.steps++;
    s->mt.step_seqs += (uint64_t)n;
    for (int i = 0; i < n; i++) {
        slot *sl = act[i];
        if (sl->failed) {
            char e[256];
            df_session_truncate(sl->s, 0, e, sizeof e);
            sl->n_hist = 0;
            sl->j->status = sl->fail_status;
            slot_finish(s, sl, FIN_ERROR, sl->err);
            continue;
        }
        hist_push(sl, sl->in, sl->n_in);
        if (sl->fed < sl->j->n_prompt) {
            sl->fed += sl->n_in;
            s->mt.prompt_tokens += (uint64_t)sl->n_in;
            if (sl->fed < sl->j->n_prompt) continue;
            if (sl->j->embed) {
                embed_finish(s, sl);
                continue;
            }
            sl->store = s->pc != NULL;
        }
        slot_emit(s, sl);
    }
    pthread_mutex_unlock(&s->mu);
    store_prompts(s, n);
    return n;
}

static void update_rate(srv_sched *s) {
    const double t = srv_now();
    if (t - s->mark_t >= 2.0) {
        s->mt.recent_tps = (double)(s->mt.gen_tokens - s->mark_tokens) / (t - s->mark_t);
        s->mark_t = t;
        s->mark_tokens = s->mt.gen_tokens;
    }
}

static void *sched_main(void *arg) {
    srv_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        update_rate(s);
        while (!s->stop && !s->qhead && s->mt.active == 0) pthread_cond_wait(&s->work, &s->mu);
        if (s->stop) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        /* admit: queued jobs into free slots */
        while (s->qhead && s->mt.active < s->n_slots) {
            srv_job *j = s->qhead;
            s->qhead = j->next;
            if (!s->qhead) s->qtail = NULL;
            s->qlen--;
            j->next = NULL;
            if (j->cancelled) {
                j->finish = FIN_CANCELLED;
                job_unref(j);
                continue;
            }
            slot *sl = &s->slots[pick_slot(s, j)];
            s->mt.active++;
            slot_start(s, sl, j);
        }
        pthread_mutex_unlock(&s->mu);
        sched_step(s);
    }
    return NULL;
}

/* ---- public ---- */

int sched_new(df_model *m, int n_slots, int queue_cap, const df_session_params *sp, srv_pcache *pc,
              srv_sched **out, char *err, size_t errlen) {
    srv_sched *s = calloc(1, sizeof *s);
    if (!s) return pcache_free(pc), snprintf(err, errlen, "out of memory"), -1;
    s->m = m;
    s->pc = pc;
    pcache_stats_get(pc, &s->mt.pc);
    s->nv = df_n_vocab(m);
    s->qcap = queue_cap;
    s->n_slots = n_slots;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    s->slots = calloc((size_t)n_slots, sizeof *s->slots);
    s->act = calloc((size_t)n_slots, sizeof *s->act);
    s->gen = calloc((size_t)n_slots, sizeof *s->gen);
    s->ss = calloc((size_t)n_slots, sizeof *s->ss);
    s->toks = calloc((size_t)n_slots, sizeof *s->toks);
    s->nt = calloc((size_t)n_slots, sizeof *s->nt);
    s->pos0 = calloc((size_t)n_slots, sizeof *s->pos0);
    s->lg = calloc((size_t)n_slots, sizeof *s->lg);
    if (!s->slots || !s->act || !s->gen || !s->ss || !s->toks || !s->nt || !s->pos0 || !s->lg) return sched_free(s), snprintf(err, errlen, "out of memory"), -1;
    for (int i = 0; i < n_slots; i++) {
        slot *sl = &s->slots[i];
        if (df_session_new(m, sp, &sl->s, err, errlen) != 0) return sched_free(s), -1;
        s->n_ctx = df_session_n_ctx(sl->s);
        s->n_batch = df_session_n_batch(sl->s);
        df_model_info mi;
        df_model_get_info(m, &mi);
        s->n_embd = mi.n_embd;
        s->embed_rows = (int)(EMBED_BUF / ((size_t)s->n_embd * sizeof(float)));
        if (s->embed_rows > s->n_batch) s->embed_rows = s->n_batch;
        if (s->embed_rows < 1) s->embed_rows = 1;
        sl->logits = malloc((size_t)s->nv * sizeof(float));
        sl->hist = malloc((size_t)(s->n_ctx + 1) * sizeof(int32_t));
        if (!sl->logits || !sl->hist) return sched_free(s), snprintf(err, errlen, "out of memory"), -1;
    }
    s->mt.parallel = n_slots;
    s->mt.queue_cap = queue_cap;
    s->mark_t = srv_now();
    if (pthread_create(&s->th, NULL, sched_main, s) != 0)
        return sched_free(s), snprintf(err, errlen, "cannot start the scheduler thread"), -1;
    s->started = 1;
    *out = s;
    return 0;
}

void sched_free(srv_sched *s) {
    if (!s) return;
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stop = 1;
        pthread_cond_broadcast(&s->work);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->th, NULL);
    }
    for (srv_job *j = s->qhead, *nx; j; j = nx) {
        nx = j->next;
        j->finish = FIN_CANCELLED;
        if (j->cond) pthread_cond_broadcast(j->cond);
        job_unref(j);
    }
    for (int i = 0; s->slots && i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (sl->j) {
            sl->j->finish = FIN_CANCELLED;
            if (sl->j->cond) pthread_cond_broadcast(sl->j->cond);
            job_unref(sl->j);
        }
        df_sampler_free(sl->smp);
        df_session_free(sl->s);
        free(sl->logits);
        free(sl->hist);
        free(sl->hidden);
        free(sl->pool);
    }
    free(s->slots);
    free(s->act);
    free(s->gen);
    free(s->ss);
    free(s->toks);
    free(s->nt);
    free(s->pos0);
    free(s->lg);
    pcache_free(s->pc);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

int sched_submit(srv_sched *s, srv_job **jobs, int n) {
    pthread_mutex_lock(&s->mu);
    s->mt.requests++;
    if (s->qlen + n > s->qcap + (s->n_slots - s->mt.active)) {
        s->mt.rejected++;
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        srv_job *j = jobs[i];
        j->refs = 2;
        j->next = NULL;
        if (s->qtail) s->qtail->next = j;
        else s->qhead = j;
        s->qtail = j;
        s->qlen++;
    }
    pthread_cond_broadcast(&s->work);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void sched_cancel(srv_sched *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    j->cancelled = 1;
    pthread_mutex_unlock(&s->mu);
}

void sched_release(srv_sched *s, srv_job *j) {
    pthread_mutex_lock(&s->mu);
    j->cond = NULL;
    if (j->finish == FIN_NONE) j->cancelled = 1;
    job_unref(j);
    pthread_mutex_unlock(&s->mu);
}

pthread_mutex_t *sched_mutex(srv_sched *s) { return &s->mu; }

int sched_n_ctx(const srv_sched *s) { return s->n_ctx; }

uint64_t sched_slot_bytes(int n_vocab, int n_ctx, int n_embd) {
    const uint64_t logits = (uint64_t)n_vocab * sizeof(float), hist = (uint64_t)(n_ctx + 1) * sizeof(int32_t);
    const uint64_t sampler = (uint64_t)n_vocab * 16 + 4096; /* its work, candidates (8 bytes) and probabilities */
    const uint64_t embed = EMBED_BUF + (uint64_t)n_embd * (sizeof(double) + sizeof(float)); /* rows, pool, vector */
    return logits + hist + sampler + embed;
}

int sched_slots(srv_sched *s, srv_slot_info *out, int max) {
    pthread_mutex_lock(&s->mu);
    int n = 0;
    for (; n < s->n_slots && n < max; n++) {
        const slot *sl = &s->slots[n];
        srv_slot_info *o = &out[n];
        memset(o, 0, sizeof *o);
        o->id = n;
        o->busy = sl->j != NULL;
        o->n_past = sl->n_hist;
        if (sl->j) {
            o->embedding = sl->j->embed != 0;
            o->n_prompt = sl->j->n_prompt;
            o->n_cached = sl->j->n_cached;
            o->n_decoded = sl->j->n_gen;
            o->max_tokens = sl->j->max_tokens;
            o->seconds = srv_now() - sl->j->t_start;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

void sched_metrics(srv_sched *s, srv_metrics *out) {
    pthread_mutex_lock(&s->mu);
    update_rate(s);
    s->mt.queue_depth = s->qlen;
    *out = s->mt;
    pthread_mutex_unlock(&s->mu);
}
