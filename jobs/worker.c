/*
 * worker.c - running jobs through the public API (worker.h).
 *
 * One job, start to end:
 *   load the model under the job's budget, open a session, build the prompt
 *   (text, or a chat rendered with the model's template), read the committed
 *   tokens and sampler state, decode prompt + committed tokens again (the
 *   prompt in the session's batches, the committed tokens one at a time, as
 *   the first run decoded them: the same arithmetic, the same logits), then
 *   sample, buffer, and commit tokens with the sampler state every
 *   commit_every seconds. A commit that finds the job canceled (or no longer
 *   this worker's) stops the run at once.
 *
 * A job with a remote (docs/jobs.md, "Local or remote") is placed once when
 * first claimed: remote when the plan (df_model_plan, df_plan_predict) says
 * it cannot run here or cannot finish before its deadline, else local; a
 * local run killed max_restarts times goes remote too. The remote run is
 * remote.c's, in the worker itself.
 *
 * Only include/deltafin.h is used here: the worker is a client of the
 * library like any other program.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "deltafin.h"
#include "pressure.h"
#include "remote.h"
#include "worker.h"

#define JW_ERR 8192

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Tokens generated but not yet committed, with their text. */
typedef struct {
    int32_t *toks;
    size_t *off;    /* n + 1 offsets into text */
    char *text;
    int n, cap;
    size_t tlen, tcap;
} pending;

static int pending_add(pending *p, int32_t tok, const char *piece, int len) {
    if (p->n + 1 >= p->cap) {
        const int cap = p->cap ? 2 * p->cap : 64;
        int32_t *t = realloc(p->toks, (size_t)cap * sizeof *t);
        if (t) p->toks = t;
        size_t *o = realloc(p->off, ((size_t)cap + 1) * sizeof *o);
        if (o) p->off = o;
        if (!t || !o) return -1;
        p->cap = cap;
    }
    if (p->tlen + (size_t)len + 1 > p->tcap) {
        size_t cap = p->tcap ? 2 * p->tcap : 4096;
        while (cap < p->tlen + (size_t)len + 1) cap *= 2;
        char *nt = realloc(p->text, cap);
        if (!nt) return -1;
        p->text = nt;
        p->tcap = cap;
    }
    if (p->n == 0) p->off[0] = 0;
    memcpy(p->text + p->tlen, piece, (size_t)len);
    p->tlen += (size_t)len;
    p->toks[p->n++] = tok;
    p->off[p->n] = p->tlen;
    return 0;
}

static void pending_free(pending *p) {
    free(p->toks);
    free(p->off);
    free(p->text);
}

/* Everything one run holds. */
typedef struct {
    jq *q;
    const char *owner;
    jq_job *job;
    df_model *m;
    df_session *s;
    df_sampler *smp;
    float *logits;
    int32_t *prompt, *done;    /* prompt tokens; committed tokens as read at the start */
    int n_prompt, n_done;
    int32_t *seq;              /* prompt + every committed token (grows as we commit) */
    const jw_opts *o;
    char *ckpt;                /* this job's checkpoint file, or NULL */
    int ckpt_pos;              /* session position of the last checkpoint (0: none) */
    double t_tok, t_save;      /* measured: seconds per decoded token (average), per checkpoint (last) */
    int n_timed;
    void *state;               /* sampler state scratch */
    size_t state_cap;
    pending pend;
    double gen_prev, t_gen0;   /* generation seconds before this run; when this run's began */
    int lost;
    /* memory pressure (pressure.h) */
    pr_cgroup cg;
    pr_sample last;
    int have_last, cannot_shrink, said_pressure;
    double next_check;
    /* stability monitor */
    double mon_t0, mon_best;
    int mon_tok0, mon_n, said_collapse;
    df_io_stats mon_io;
} run;

static int load(run *r, char *err, size_t errlen) {
    df_model_params mp = df_model_default_params();
    mp.mem_budget = r->job->mem;
    mp.page_cache = r->job->page_cache;
    mp.n_ctx = r->job->ctx;
    mp.n_threads = r->job->threads;
    mp.use_mmap = -1;
    mp.split_layers = r->o->split_layers;
    if (df_model_load(r->job->model, &mp, &r->m, err, errlen) != 0) return -1;
    df_session_params sp = df_session_default_params();
    sp.n_ctx = r->job->ctx;
    if (df_session_new(r->m, &sp, &r->s, err, errlen) != 0) return -1;
    const int nv = df_n_vocab(r->m);
    r->logits = malloc((size_t)nv * sizeof(float));
    r->smp = df_sampler_new(&r->job->sp, nv);
    r->state_cap = df_sampler_get_state(r->smp, NULL, 0);
    r->state = r->smp ? malloc(r->state_cap) : NULL;
    if (!r->logits || !r->smp || !r->state) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* A job resumes on the model it began with, never on a file put in its place (its text would be two models'):
 * the first run records the file's identity (size, modification time, inode), each later run compares. */
static int same_model(run *r, char *err, size_t errlen) {
    struct stat st;
    if (stat(r->job->model, &st) != 0) return snprintf(err, errlen, "%s: %s", r->job->model, strerror(errno)), -1;
    char ident[128], bound[128];
    snprintf(ident, sizeof ident, "%lld %lld.%09ld %llu", (long long)st.st_size, (long long)st.st_mtim.tv_sec,
             st.st_mtim.tv_nsec, (unsigned long long)st.st_ino);
    if (jq_bind_model(r->q, r->job->id, r->owner, ident, bound, sizeof bound, err, errlen) != 0) return -1;
    if (*bound && strcmp(bound, ident)) {
        snprintf(err, errlen, "the model file %s changed since the job began (size, time, inode: %s, now %s): its "
                 "committed text came from the other model; submit the job again", r->job->model, bound, ident);
        return -1;
    }
    return 0;
}

/* The prompt's tokens: text as is, or a chat rendered with the model's template. */
static int build_prompt(run *r, char *err, size_t errlen) {
    const jq_job *j = r->job;
    char *text = NULL;
    size_t len = j->prompt_len;
    int add_special = !j->no_bos;
    if (j->chat) {
        if (df_chat_apply_template(r->m, NULL, NULL, 0, 1, j->prompt, &text, err, errlen) != 0) return -1;
        len = strlen(text);
        /* a template that writes the BOS text itself gets no second one */
        char bos[256];
        const int bl = df_token_to_piece(r->m, df_token_bos(r->m), bos, sizeof bos);
        if (bl > 0 && bl <= (int)sizeof bos && len >= (size_t)bl && !memcmp(text, bos, (size_t)bl)) add_special = 0;
    }
    const char *src = text ? text : j->prompt;
    int need = 0;
    if (df_tokenize(r->m, src, len, add_special, 1, NULL, 0, &need, err, errlen) != 0 && need == 0) {
        free(text);
        return -1;
    }
    r->prompt = malloc(((size_t)need + 1) * sizeof(int32_t));
    const int rc = r->prompt ? df_tokenize(r->m, src, len, add_special, 1, r->prompt, need + 1, &r->n_prompt, err,
                                           errlen)
                             : -1;
    free(text);
    if (rc != 0) return -1;
    if (r->n_prompt == 0) {
        snprintf(err, errlen, "the prompt produced no tokens");
        return -1;
    }
    return 0;
}

/* ---- checkpoints ---- */

/* What a checkpoint holds beside the session: the job, and the tokens it saw. */
typedef struct {
    int64_t job;
    int64_t pos;
    uint64_t hash;
} ckpt_tag;

static uint64_t hash_tokens(const int32_t *t, int n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)t[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}

/* A worker killed while saving leaves its temporary file (job-ID.snap.tmp.XXXXXX): remove this job's. */
static void ckpt_sweep(const run *r) {
    DIR *d = opendir(r->o->ckpt_dir);
    if (!d) return;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "job-%lld.snap.tmp.", (long long)r->job->id);
    const struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix))) unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

static void ckpt_discard(run *r, const char *why) {
    if (r->o->log) fprintf(r->o->log, "worker: job %lld: checkpoint discarded: %s\n", (long long)r->job->id, why);
    unlink(r->ckpt);
}

/* Load the job's checkpoint if it is sound and holds only committed tokens:
 * the position it restored (>= the prompt's end), or 0 (the session empty). */
static int from_checkpoint(run *r) {
    if (!r->ckpt) return 0;
    ckpt_sweep(r);
    if (access(r->ckpt, F_OK) != 0) return 0;
    char why[1024];
    ckpt_tag tag;
    size_t len;
    if (df_session_load(r->s, r->ckpt, &tag, sizeof tag, &len, why, sizeof why) != 0) {
        ckpt_discard(r, why);
        return 0;
    }
    const int p = df_session_pos(r->s);
    if (len != sizeof tag || tag.job != r->job->id || tag.pos != p || p < r->n_prompt ||
        p >= r->n_prompt + r->n_done || tag.hash != hash_tokens(r->seq, p)) {
        ckpt_discard(r, "it holds tokens other than the committed ones");
        df_session_truncate(r->s, 0, NULL, 0);
        return 0;
    }
    r->ckpt_pos = p;
    if (r->o->log)
        fprintf(r->o->log, "worker: job %lld resumes from its checkpoint at position %d (%d tokens to recompute)\n",
                (long long)r->job->id, p, r->n_prompt + r->n_done - p);
    return p;
}

/* After a commit, before the last committed token is decoded: save the
 * session if recomputing since the last checkpoint now costs ckpt_ratio
 * saves. A failed save is said and checkpoints stop for this run. */
static void maybe_checkpoint(run *r) {
    const int p = df_session_pos(r->s);
    if (!r->ckpt || p < r->n_prompt || p != r->n_prompt + r->n_done - 1 || p <= r->ckpt_pos) return;
    const int since = p - (r->ckpt_pos > r->n_prompt ? r->ckpt_pos : r->n_prompt);
    if (since * r->t_tok < r->o->ckpt_ratio * r->t_save) return;
    ckpt_tag tag = {r->job->id, p, hash_tokens(r->seq, p)};
    char why[1024];
    const double t0 = mono();
    if (df_session_save(r->s, r->ckpt, &tag, sizeof tag, why, sizeof why) != 0) {
        if (r->o->log) fprintf(r->o->log, "worker: job %lld: no more checkpoints: %s\n", (long long)r->job->id, why);
        free(r->ckpt);
        r->ckpt = NULL;
        return;
    }
    r->t_save = mono() - t0;
    r->ckpt_pos = p;
}

/* Decode the prompt and the committed tokens, as the first run did, and set
 * the sampler to where the last commit left it. */
static int replay(run *r, char *err, size_t errlen) {
    void *state;
    size_t state_len;
    if (jq_progress(r->q, r->job->id, &r->done, &r->n_done, &state, &state_len, err, errlen) != 0) return -1;
    const int n_ctx = df_session_n_ctx(r->s), nb = df_session_n_batch(r->s);
    const int most = r->n_done > r->job->n_predict ? r->n_done : r->job->n_predict;
    r->seq = malloc(((size_t)r->n_prompt + (size_t)most + 1) * sizeof(int32_t));
    if (!r->seq) {
        free(state);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    memcpy(r->seq, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
    memcpy(r->seq + r->n_prompt, r->done, (size_t)r->n_done * sizeof(int32_t));
    if (r->n_prompt + r->n_done > n_ctx) {
        free(state);
        snprintf(err, errlen, "the prompt (%d tokens) does not fit in the context of %d", r->n_prompt, n_ctx);
        return -1;
    }
    int rc = 0;
    const int from = from_checkpoint(r); /* 0, or the position a checkpoint restored */
    for (int fed = 0; fed < r->n_prompt && rc == 0 && !from; fed += nb) {
        const int c = r->n_prompt - fed < nb ? r->n_prompt - fed : nb;
        rc = df_decode(r->s, r->prompt + fed, c, r->logits, 0, err, errlen);
    }
    for (int i = from ? from : r->n_prompt; i < r->n_prompt + r->n_done && rc == 0; i++)
        rc = df_decode(r->s, &r->seq[i], 1, r->logits, 0, err, errlen);
    if (rc == 0) {
        if (r->n_done == 0) {
            for (int i = 0; i < r->n_prompt; i++) df_sampler_accept(r->smp, r->prompt[i]);
        } else if (df_sampler_set_state(r->smp, state, state_len) != 0) {
            snprintf(err, errlen, "the committed sampler state is damaged or belongs to other parameters");
            rc = -1;
        }
    }
    free(state);
    return rc;
}

/* ---- memory pressure and the stability monitor ---- */

static void event(run *r, const char *kind, const char *text) {
    char e[512];
    if (r->o->log) fprintf(r->o->log, "worker: job %lld: %s: %s\n", (long long)r->job->id, kind, text);
    if (jq_event(r->q, r->job->id, kind, text, e, sizeof e) != 0 && r->o->log)
        fprintf(r->o->log, "worker: job %lld: the event was not recorded: %s\n", (long long)r->job->id, e);
}

/* Shrink the expert cache towards target; if that is below its least size,
 * to the smallest budget between target and now that it accepts. */
static int shrink(run *r, uint64_t now, uint64_t target, char *e, size_t n) {
    for (int i = 0; i < 6; i++) {
        if (df_model_set_mem(r->m, target, e, n) == 0) return 0;
        target += (now - target) / 2;
    }
    return -1;
}

/* Every pressure_every seconds: under pressure, give memory back and go on. */
static void watch_memory(run *r) {
    const double t = mono();
    if (t < r->next_check || !r->cg.dir[0]) return;
    r->next_check = t + r->o->pressure_every;
    pr_sample s;
    pr_read(&r->cg, &s);
    char why[256], text[1024], e[512];
    const int pressed = pr_pressed(&s, r->have_last ? &r->last : NULL, why, sizeof why);
    r->last = s;
    r->have_last = 1;
    if (!pressed || r->cannot_shrink) return;
    df_io_stats io;
    df_model_io_stats(r->m, &io);
    if (!io.streaming) {
        if (!r->said_pressure) {
            snprintf(text, sizeof text, "%s; the job has no budget (--mem), so there is no cache to shrink", why);
            event(r, "pressure", text);
        }
        r->said_pressure = 1;
        return;
    }
    /* give back a quarter of the budget, or more where that brings anonymous memory to 80% of the limit */
    uint64_t target = io.budget / 4 * 3;
    const uint64_t goal = s.limit / 10 * 8;
    if (s.limit && s.anon > goal && s.anon - goal < io.budget && io.budget - (s.anon - goal) < target)
        target = io.budget - (s.anon - goal);
    if (shrink(r, io.budget, target, e, sizeof e) != 0) {
        snprintf(text, sizeof text, "%s; the expert cache cannot shrink further: %s", why, e);
        event(r, "pressure", text);
        r->cannot_shrink = 1;
        return;
    }
    df_io_stats after;
    df_model_io_stats(r->m, &after);
    char b0[32], b1[32];
    snprintf(text, sizeof text, "%s: expert cache shrunk from %d to %d slots (budget %s -> %s)", why, io.expert_slots,
             after.expert_slots, df_fmt_bytes(io.budget, b0, sizeof b0), df_fmt_bytes(after.budget, b1, sizeof b1));
    event(r, "shrink", text);
    r->next_check = mono() + 1.0; /* let the kernel's counters catch up */
}

/* Every monitor_every seconds (and at the end, if a row is due): one row of the stability monitor. */
static void monitor(run *r, int last) {
    const double t = mono(), dt = t - r->mon_t0;
    if (r->o->monitor_every <= 0 || dt < r->o->monitor_every * (last ? 0.5 : 1.0)) return;
    df_io_stats io;
    df_model_io_stats(r->m, &io);
    const int toks = r->n_done + r->pend.n - r->mon_tok0;
    const uint64_t looks = (io.hits + io.misses) - (r->mon_io.hits + r->mon_io.misses);
    jq_stats st = {.tokens_per_s = toks / dt,
                   .hit_rate = looks ? (double)(io.hits - r->mon_io.hits) / looks : 0,
                   .disk_bytes_per_s = (io.bytes_read - r->mon_io.bytes_read) / dt,
                   .mem_bytes = pr_rss(),
                   .budget = io.budget};
    /* a collapse: a quarter of the run's best interval, after two intervals to learn it */
    st.collapse = r->mon_n >= 2 && st.tokens_per_s < r->mon_best / 4;
    char e[512];
    if (jq_stat(r->q, r->job->id, &st, e, sizeof e) != 0 && r->o->log)
        fprintf(r->o->log, "worker: job %lld: the monitor's row was not recorded: %s\n", (long long)r->job->id, e);
    if (st.collapse && !r->said_collapse) {
        char text[256];
        snprintf(text, sizeof text, "the speed collapsed to %.3f tokens/s from the run's best %.3f (disk %.1f MiB/s, "
                 "hit rate %.0f%%)", st.tokens_per_s, r->mon_best, st.disk_bytes_per_s / 1048576.0, 100 * st.hit_rate);
        event(r, "collapse", text);
        r->said_collapse = 1;
    }
    if (st.tokens_per_s > r->mon_best) r->mon_best = st.tokens_per_s;
    r->mon_n++;
    r->mon_t0 = t;
    r->mon_tok0 = r->n_done + r->pend.n;
    r->mon_io = io;
}

/* Commit what is pending (with the sampler state after it). */
static int commit(run *r, char *err, size_t errlen) {
    if (r->pend.n == 0 || r->lost) return 0;
    if (jq_still_there(r->q, err, errlen) != 0) return -1;
    const size_t sl = df_sampler_get_state(r->smp, r->state, r->state_cap);
    const double gen = r->gen_prev + (mono() - r->t_gen0);
    if (jq_commit(r->q, r->job->id, r->owner, r->n_done, r->pend.toks, r->pend.n, r->pend.text, r->pend.off, r->state,
                  sl, gen, &r->lost, err, errlen) != 0)
        return -1;
    if (!r->lost) {
        memcpy(r->seq + r->n_prompt + r->n_done, r->pend.toks, (size_t)r->pend.n * sizeof(int32_t));
        r->n_done += r->pend.n;
    }
    r->pend.n = 0;
    r->pend.tlen = 0;
    return 0;
}

/* Generate until done, stopped, canceled or failed. *how: "done", "queued"
 * (stopped: give it back) or "" (lost: leave it alone). */
static int generate(run *r, double commit_every, volatile sig_atomic_t *stop, const char **how, const char **note,
                    char *err, size_t errlen) {
    const jq_job *j = r->job;
    const int n_ctx = df_session_n_ctx(r->s);
    double last = mono();
    r->t_gen0 = last;
    r->mon_t0 = last;
    r->mon_tok0 = r->n_done;
    df_model_io_stats(r->m, &r->mon_io);
    pr_open(&r->cg);
    r->gen_prev = j->gen_seconds;
    *how = "done";
    *note = NULL;
    while (r->n_done + r->pend.n < j->n_predict) {
        const int32_t tok = df_sampler_sample(r->smp, r->logits);
        df_sampler_accept(r->smp, tok);
        if (!j->ignore_eos && df_token_is_eog(r->m, tok)) {
            *note = "ended at an end-of-generation token";
            break;
        }
        char piece[256];
        int len = df_token_to_piece(r->m, tok, piece, sizeof piece);
        if (len < 0) len = 0;
        if (len > (int)sizeof piece) len = (int)sizeof piece;
        if (pending_add(&r->pend, tok, piece, len) != 0) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        const double t = mono();
        if (t - last >= commit_every || *stop) {
            if (commit(r, err, errlen) != 0) return -1;
            last = t;
            if (!r->lost && !*stop) maybe_checkpoint(r);
        }
        if (r->lost) break;
        if (*stop) {
            *how = "queued";
            break;
        }
        if (r->n_done + r->pend.n >= j->n_predict) break;
        if (df_session_pos(r->s) >= n_ctx) {
            *note = "ended when the context was full";
            break;
        }
        const double t0 = mono();
        if (df_decode(r->s, &tok, 1, r->logits, 0, err, errlen) != 0) return -1;
        r->t_tok += (mono() - t0 - r->t_tok) / ++r->n_timed; /* running mean */
        watch_memory(r);
        monitor(r, 0);
    }
    monitor(r, 1);
    if (commit(r, err, errlen) != 0) return -1;
    if (r->lost) *how = "";
    return 0;
}

static void run_free(run *r) {
    df_sampler_free(r->smp);
    df_session_free(r->s);
    df_model_free(r->m);
    free(r->logits);
    free(r->prompt);
    free(r->done);
    free(r->seq);
    free(r->ckpt);
    free(r->state);
    pending_free(&r->pend);
}

/* Run one claimed job to its end (or until stopped). -1 only when the
 * database failed; a job that fails is recorded as failed. */
static int run_job(jq *q, const char *owner, jq_job *job, const jw_opts *o, volatile sig_atomic_t *stop, char *err,
                   size_t errlen) {
    run r;
    memset(&r, 0, sizeof r);
    r.q = q;
    r.owner = owner;
    r.job = job;
    r.o = o;
    if (o->ckpt_dir) {
        const size_t n = strlen(o->ckpt_dir) + 48;
        r.ckpt = malloc(n);
        if (r.ckpt) snprintf(r.ckpt, n, "%s/job-%lld.snap", o->ckpt_dir, (long long)job->id);
    }
    char why[JW_ERR] = "";
    const char *how = "failed", *note = NULL;
    int dberr = 0;
    if (load(&r, why, sizeof why) == 0 && same_model(&r, why, sizeof why) == 0 && build_prompt(&r, why, sizeof why) == 0 &&
        replay(&r, why, sizeof why) == 0) {
        if (generate(&r, o->commit_every, stop, &how, &note, why, sizeof why) != 0) {
            how = "failed";
            dberr = strncmp(why, "jobs database", 13) == 0;
        }
    }
    if (o->log)
        fprintf(o->log, "worker: job %lld %s%s%s (%d tokens)\n", (long long)job->id, *how ? how : "lost (canceled)",
                !strcmp(how, "failed") ? ": " : "", !strcmp(how, "failed") ? why : "", r.n_done);
    int rc = 0;
    if (dberr) {
        snprintf(err, errlen, "%s", why);
        rc = -1;
    } else if (*how) {
        rc = jq_finish(q, job->id, owner, how, !strcmp(how, "failed") ? why : NULL, note, err, errlen);
    }
    if (r.ckpt && strcmp(how, "queued")) unlink(r.ckpt); /* ended (or canceled): its checkpoint is no use */
    run_free(&r);
    return rc;
}

/* ---- supervision: each run in a child process ---- */

/* The child: its own connection to the database (SQLite's must not cross a
 * fork), the job run, and an exit status: 0, or 3 when the database failed. */
static void child_run(const char *owner, jq_job *job, const jw_opts *o, volatile sig_atomic_t *stop, pid_t parent) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a worker killed takes its run with it */
    if (getppid() != parent) _exit(1);
    jq *cq;
    char err[JW_ERR];
    int rc = jq_open(o->db_path, &cq, err, sizeof err);
    if (rc == 0) rc = run_job(cq, owner, job, o, stop, err, sizeof err);
    if (rc != 0 && o->log) fprintf(o->log, "worker: %s\n", err);
    if (cq) jq_close(cq);
    if (o->log) fflush(o->log);
    _exit(rc == 0 ? 0 : 3);
}

/* Wait for the child, passing a stop on to it (polled: a stop that came
 * just before the wait must not be missed). */
static int wait_child(pid_t pid, volatile sig_atomic_t *stop) {
    int status, passed = 0;
    for (;;) {
        const pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) return status;
        if (w < 0 && errno != EINTR) return -1;
        if (*stop && !passed) {
            kill(pid, SIGTERM);
            passed = 1;
        }
        usleep(20000);
    }
}

/* Record one more step in the job's history (the parent's connection). */
static void parent_event(jq *q, const jw_opts *o, int64_t id, const char *kind, const char *text) {
    char e[512];
    if (o->log) fprintf(o->log, "worker: job %lld: %s: %s\n", (long long)id, kind, text);
    if (jq_event(q, id, kind, text, e, sizeof e) != 0 && o->log) fprintf(o->log, "worker: %s\n", e);
}

/* ---- local or remote (docs/jobs.md, "Local or remote") ---- */

/* Record the choice, then run the job on its remote. */
static int go_remote(jq *q, const char *owner, jq_job *job, const jw_opts *o, volatile sig_atomic_t *stop,
                     const char *why, char *err, size_t errlen) {
    if (jq_set_place(q, job->id, owner, "remote", err, errlen) != 0) return -1;
    parent_event(q, o, job->id, "remote", why);
    const jr_opts ro = {.commit_every = o->commit_every, .retries = 4, .backoff = 0.5, .log = o->log};
    return jr_run(q, owner, job, &ro, stop, err, errlen);
}

/* Whether the job should run on its remote: the model cannot be planned or
 * does not fit its budget, or the plan's predicted speed cannot finish it
 * before its deadline. why says which, or why it stays local. */
static int wants_remote(const jq_job *job, const jw_opts *o, char *why, size_t n) {
    df_model_params mp = df_model_default_params();
    mp.mem_budget = job->mem;
    mp.n_ctx = job->ctx;
    df_plan p;
    char e[512], b0[32], b1[32];
    if (df_model_plan(job->model, &mp, &p, e, sizeof e) != 0) {
        snprintf(why, n, "the local plan failed: %s", e);
        return 1;
    }
    if (job->mem && p.budget < p.minimum) {
        snprintf(why, n, "the model does not fit the budget here: %s, at least %s needed",
                 df_fmt_bytes(p.budget, b0, sizeof b0), df_fmt_bytes(p.minimum, b1, sizeof b1));
        return 1;
    }
    if (job->deadline <= 0) {
        snprintf(why, n, "the model fits here and the job has no deadline: it runs locally");
        return 0;
    }
    double disk = o->disk_bps, mem = o->mem_bps;
    if (!job->mem) { /* no budget: every weight is in memory, nothing streams */
        if (p.budget < p.minimum) p.budget = p.minimum;
        p.n_expert_slots = p.n_experts_total;
        p.n_dense_streamed = 0;
        disk = 0;
    } else if (disk <= 0) {
        disk = df_probe_disk(job->model, 1.0, 8, (uint64_t)4 << 20, e, sizeof e);
    }
    mp.n_threads = job->threads;
    if (mem <= 0) mem = df_model_probe_memory(job->model, &mp, 0.5, 0, e, sizeof e); /* as decoding reads it */
    if (mem <= 0) mem = df_probe_memory(0.5, 0, job->threads);
    if (disk < 0) disk = 0; /* unmeasured: the memory's pace alone */
    df_plan_speed sp; /* with --page-cache, the memory free beyond the budget now as the second tier */
    const uint64_t room = job->page_cache ? df_memory_room() : 0;
    df_plan_predict_tiers(&p, disk, mem, room > p.budget ? room - p.budget : 0, &sp);
    const int left = job->n_predict - job->n_done;
    const double now = (double)time(NULL);
    if (sp.tokens_per_s <= 0) {
        snprintf(why, n, "the local plan predicts no speed (disk %.3g B/s, memory %.3g B/s)", disk, mem);
        return 1;
    }
    const double finish = now + left / sp.tokens_per_s;
    if (finish > job->deadline) {
        snprintf(why, n, "the local plan predicts %.4g tokens/s: %d tokens would finish %.0f s after the deadline",
                 sp.tokens_per_s, left, finish - job->deadline);
        return 1;
    }
    snprintf(why, n, "the local plan predicts %.4g tokens/s: %d tokens finish %.0f s before the deadline",
             sp.tokens_per_s, left, job->deadline - finish);
    return 0;
}

static int supervise(jq *q, const char *owner, jq_job *job, const jw_opts *o, volatile sig_atomic_t *stop, char *err,
                     size_t errlen);

/* A job with a remote: decided once (recorded as its place), then run there. */
static int place_and_run(jq *q, const char *owner, jq_job *job, const jw_opts *o, volatile sig_atomic_t *stop,
                         char *err, size_t errlen) {
    if (!strcmp(job->place, "remote")) return go_remote(q, owner, job, o, stop, "resumes on the remote", err, errlen);
    if (!strcmp(job->place, "local")) return supervise(q, owner, job, o, stop, err, errlen);
    char why[1024];
    if (wants_remote(job, o, why, sizeof why)) return go_remote(q, owner, job, o, stop, why, err, errlen);
    if (jq_set_place(q, job->id, owner, "local", err, errlen) != 0) return -1;
    parent_event(q, o, job->id, "local", why);
    return supervise(q, owner, job, o, stop, err, errlen);
}

/* Run a claimed job in a child; restart it with a smaller budget when the
 * kernel kills it for memory. -1 only when the database failed. */
static int supervise(jq *q, const char *owner, jq_job *job, const jw_opts *o, volatile sig_atomic_t *stop, char *err,
                     size_t errlen) {
    /* over a cluster (docs/cluster.md) the run stays in this process: MPI does not cross a fork, and a rank
     * that dies ends the whole job, which the cluster started again resumes */
    if (df_cluster_size() > 1) return run_job(q, owner, job, o, stop, err, errlen);
    pr_cgroup cg;
    pr_open(&cg);
    for (int restarts = 0;; restarts++) {
        pr_sample before, after;
        pr_read(&cg, &before);
        if (o->log) fflush(o->log);
        const pid_t parent = getpid(), pid = fork();
        if (pid < 0) return run_job(q, owner, job, o, stop, err, errlen); /* no child: run it here */
        if (pid == 0) child_run(owner, job, o, stop, parent);
        const int status = wait_child(pid, stop);
        pr_read(&cg, &after);
        if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
        if (status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 3) {
            snprintf(err, errlen, "jobs database: the run of job %lld failed to use it (said above)",
                     (long long)job->id);
            return -1;
        }
        const int sig = status != -1 && WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        char text[1024], b0[32], b1[32];
        const int oom = after.oom_kill > before.oom_kill;
        if (sig == SIGKILL && !*stop) { /* the kernel's OOM killer, or another SIGKILL */
            const uint64_t next = job->mem / 4 * 3;
            if (restarts < o->max_restarts && job->mem) {
                snprintf(text, sizeof text, "the run was killed (SIGKILL%s) at a budget of %s: restart %d of %d from"
                         " its last checkpoint with %s", oom ? ", the cgroup counted an OOM kill" : ", presumably for memory",
                         df_fmt_bytes(job->mem, b0, sizeof b0), restarts + 1, o->max_restarts,
                         df_fmt_bytes(next, b1, sizeof b1));
                parent_event(q, o, job->id, "memory-restart", text);
                if (jq_set_mem(q, job->id, owner, next, err, errlen) != 0) return -1;
                job->mem = next;
                continue;
            }
            if (restarts < o->max_restarts) { /* no budget to lower: the same run again, from its checkpoint */
                snprintf(text, sizeof text, "the run was killed (SIGKILL%s, no --mem: nothing to lower): restart %d of "
                         "%d from its last checkpoint", oom ? ", the cgroup counted an OOM kill" : "", restarts + 1,
                         o->max_restarts);
                parent_event(q, o, job->id, "restart", text);
                continue;
            }
            snprintf(text, sizeof text, "killed (SIGKILL%s) %d time%s, the last at a budget of %s%s",
                     oom ? ", OOM" : "", restarts + 1, restarts ? "s" : "", df_fmt_bytes(job->mem, b0, sizeof b0),
                     job->mem ? "" : " (no --mem: nothing to lower)");
            if (job->remote) { /* the local run failed repeatedly: the remote takes it */
                char why[1200];
                snprintf(why, sizeof why, "%s: the job goes to the remote %s", text, job->remote);
                return go_remote(q, owner, job, o, stop, why, err, errlen);
            }
        } else {
            snprintf(text, sizeof text, "the run ended with %s %d", sig ? "signal" : "status",
                     sig ? sig : status == -1 ? -1 : WEXITSTATUS(status));
        }
        parent_event(q, o, job->id, "failed", text);
        return jq_finish(q, job->id, owner, "failed", text, NULL, err, errlen);
    }
}

int jw_run(jq *q, const jw_opts *o, volatile sig_atomic_t *stop, char *err, size_t errlen) {
    char owner[96];
    jq_self_owner(owner, sizeof owner);
    while (!*stop) {
        jq_job job;
        int got;
        if (jq_still_there(q, err, errlen) != 0) return -1;
        if (jq_claim(q, owner, &job, &got, err, errlen) != 0) return -1;
        if (!got) {
            jq_job_free(&job);
            if (o->drain) return 0;
            for (double t = 0; t < o->poll && !*stop; t += 0.05) usleep(50000);
            continue;
        }
        if (o->log) fprintf(o->log, "worker: job %lld %s (%d tokens committed)\n", (long long)job.id,
                            job.runs > 1 ? "resumes" : "starts", job.n_done);
        const int rc = job.remote && o->db_path ? place_and_run(q, owner, &job, o, stop, err, errlen)
                       : o->db_path             ? supervise(q, owner, &job, o, stop, err, errlen)
                                                : run_job(q, owner, &job, o, stop, err, errlen);
        jq_job_free(&job);
        if (rc != 0 || jq_still_there(q, err, errlen) != 0) return -1; /* a job "done" into a removed file is lost */
    }
    return 0;
}
