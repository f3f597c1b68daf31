/*
 * queue.h - the durable job queue: one SQLite database (WAL mode) shared by
 * every `deltafin` process of a user (docs/jobs.md).
 *
 * A job is a generation request (model, prompt, sampling, budget) and the
 * record of its progress: every generated token, its text, and the sampler's
 * state after the last committed token, so a job interrupted at any moment
 * continues exactly where its last commit left it.
 *
 * States: queued -> running -> done | failed | canceled | expired.
 * A running job names its owner (a worker process: boot id, pid and start
 * time); a running job whose owner is gone (killed, rebooted) is claimed
 * again before any queued one. Every write by a worker is fenced on
 * (state = 'running', owner = itself): a canceled or re-claimed job refuses
 * it, so no job is ever run twice at once.
 *
 * Functions return 0 or -1 with a one-line reason in err; nothing prints.
 */
#ifndef DF_JOBS_QUEUE_H
#define DF_JOBS_QUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "deltafin.h"

typedef struct jq jq;

typedef struct jq_job {
    int64_t id;
    char state[16];
    char *model;              /* absolute path */
    char *prompt;             /* the prompt's bytes, or the chat's JSON (chat = 1) */
    size_t prompt_len;
    int chat;
    int n_predict, ctx, threads, ignore_eos, no_bos;
    df_sampler_params sp;
    uint64_t mem;             /* budget in bytes, 0 = none */
    int page_cache;           /* --page-cache: experts outside the budget may stay in the kernel's page cache */
    double deadline;          /* Unix time by which it should be finished (still queued then: expired), 0 = none */
    char *remote;             /* an OpenAI-compatible endpoint to fall back on (docs/jobs.md), or NULL */
    char place[8];            /* where it runs: "" (not decided), "local" or "remote" */
    int priority;             /* higher first */
    double created, started, finished, updated; /* Unix times, 0 = not yet */
    int n_done;               /* tokens committed */
    double gen_seconds;       /* generation time over all runs */
    int runs;                 /* times a worker claimed it (1 + resumes) */
    char *text;               /* the committed tokens' text (jq_get only) */
    size_t text_len;
    char *error;              /* why it failed, or NULL */
    char *note;               /* how it ended or resumed, or NULL */
    char owner[96];
} jq_job;

/* Default database: $XDG_DATA_HOME/deltafin/jobs.db, else ~/.local/share/deltafin/jobs.db. */
int jq_default_path(char *buf, size_t n, char *err, size_t errlen);
/* Open (creating it and its directory, 0700, if missing) and set up the schema. */
int jq_open(const char *path, jq **out, char *err, size_t errlen);
void jq_close(jq *q);
/* 0 while the database's path still names the file that was opened; -1 with err once it was removed or
 * replaced (a worker then stops: what it would record is lost). */
int jq_still_there(jq *q, char *err, size_t errlen);

void jq_job_init(jq_job *j);   /* defaults for a new job */
void jq_job_free(jq_job *j);   /* frees the strings, not j */

int jq_submit(jq *q, const jq_job *j, int64_t *id, char *err, size_t errlen);
/* *found = 0 when no job has that id. with_text: fill text. */
int jq_get(jq *q, int64_t id, int with_text, jq_job *out, int *found, char *err, size_t errlen);
/* All jobs, newest last (no text). Caller frees each and the array. */
int jq_list(jq *q, jq_job **out, int *n, char *err, size_t errlen);
/* Cancel a queued or running job. *prev: its state before ("" if no such job). */
int jq_cancel(jq *q, int64_t id, char *prev, size_t prevlen, char *err, size_t errlen);
/* Put a failed, canceled or expired job back in the queue, its committed tokens kept (it resumes after them).
 * *prev: its state before ("" if no such job); only those three states change. */
/* The model a job runs: the first run records ident (the model file's identity), every later one reads it back
 * into bound (n bytes) to compare. 0, or -1 with err. */
int jq_bind_model(jq *q, int64_t id, const char *owner, const char *ident, char *bound, size_t n, char *err,
                  size_t errlen);
int jq_requeue(jq *q, int64_t id, char *prev, size_t prevlen, char *err, size_t errlen);

/* This process as an owner: "bootid/pid/starttime". */
int jq_self_owner(char *buf, size_t n);
/* Claim the next job for owner: an orphaned running one first, else the
 * queued one of highest priority (oldest first). *got = 0 if none. */
int jq_claim(jq *q, const char *owner, jq_job *out, int *got, char *err, size_t errlen);
/* The committed tokens and sampler state of a job (caller frees both). */
int jq_progress(jq *q, int64_t id, int32_t **toks, int *n, void **state, size_t *state_len, char *err,
                size_t errlen);
/* Commit tokens first .. first+n-1 (ids and their text pieces, piece i is
 * pieces[off[i] .. off[i+1])) with the sampler state after the last, in one
 * transaction. *lost = 1 (nothing written) when the job is no longer this
 * owner's running job (canceled, or claimed by another after a stall). */
int jq_commit(jq *q, int64_t id, const char *owner, int first, const int32_t *toks, int n, const char *pieces,
              const size_t *off, const void *state, size_t state_len, double gen_seconds, int *lost, char *err,
              size_t errlen);
/* End a run: state "done", "failed" (error), or "queued" (given back, e.g.
 * the worker was asked to stop). Fenced like jq_commit. */
int jq_finish(jq *q, int64_t id, const char *owner, const char *state, const char *error, const char *note,
              char *err, size_t errlen);

/* ---- the run's record (docs/jobs.md, "Memory pressure") ---- */

/* What happened to a run, one line: kind is "pressure", "shrink",
 * "memory-restart", "collapse", ... */
int jq_event(jq *q, int64_t id, const char *kind, const char *text, char *err, size_t errlen);

/* One interval of the stability monitor. */
typedef struct jq_stats {
    double tokens_per_s, hit_rate, disk_bytes_per_s;
    uint64_t mem_bytes, budget; /* the process's memory (RSS), the budget in force */
    int collapse;               /* 1: the speed collapsed against the run's best interval */
} jq_stats;
int jq_stat(jq *q, int64_t id, const jq_stats *s, char *err, size_t errlen);

/* Record where a running job runs ("local" or "remote"). Fenced on owner. */
int jq_set_place(jq *q, int64_t id, const char *owner, const char *place, char *err, size_t errlen);

/* Lower a running job's budget (a restart after it was killed for memory). Fenced on owner. */
int jq_set_mem(jq *q, int64_t id, const char *owner, uint64_t mem, char *err, size_t errlen);

/* The job's events and monitor rows as two JSON arrays (caller frees). */
int jq_history(jq *q, int64_t id, char **events, char **stats, char *err, size_t errlen);

#endif
