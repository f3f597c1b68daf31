/*
 * remote.h - running a job on a remote OpenAI-compatible endpoint (docs/jobs.md,
 * "Local or remote").
 *
 * A job the worker sends away is a streaming POST to URL/v1/completions
 * (prompt jobs) or URL/v1/chat/completions (chat jobs) with the job's
 * sampling fields, seed and max_tokens. The streamed text is committed to the
 * job as local tokens are (every commit_every seconds, fenced on the owner);
 * the remote returns text, not our token ids, so each streamed piece is one
 * row of the job with the id -1. A stream that drops is resumed (bounded
 * retries, doubling backoff): the prompt plus the committed text is sent again
 * with the tokens still to generate (the committed text counted with the
 * model's own tokenizer, loaded vocabulary-only).
 *
 * Returns 0 once the job is recorded (done, failed with the reason, or given
 * back when *stop is set); -1 with err only when the database failed.
 */
#ifndef DF_JOBS_REMOTE_H
#define DF_JOBS_REMOTE_H

#include <signal.h>
#include <stdio.h>

#include "queue.h"

typedef struct jr_opts {
    double commit_every; /* seconds between commits (0: every piece) */
    int retries;         /* attempts after the first before the job fails */
    double backoff;      /* seconds before the first retry; doubles, at most 30 s */
    FILE *log;           /* NULL: quiet */
} jr_opts;

/* Once per process, before any thread: libcurl's global set-up. */
int jr_global_init(char *err, size_t errlen);

int jr_run(jq *q, const char *owner, jq_job *job, const jr_opts *o, volatile sig_atomic_t *stop, char *err,
           size_t errlen);

#endif
