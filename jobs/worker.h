/*
 * worker.h - running queued jobs (docs/jobs.md).
 *
 * A worker claims jobs one after another and runs each through the public
 * API (include/deltafin.h) alone. Generated tokens are committed with the
 * sampler's state at least every commit_every seconds (0: after every
 * token); a job that already has committed tokens resumes by decoding its
 * prompt and those tokens again exactly as the first run did (the prompt in
 * the same batches, then one token at a time), so greedy and seeded
 * sampling continue identically.
 */
#ifndef DF_JOBS_WORKER_H
#define DF_JOBS_WORKER_H

#include <signal.h>

#include "queue.h"

typedef struct jw_opts {
    double commit_every;  /* seconds between commits (0: every token) */
    int drain;            /* 1: exit when no job is left instead of waiting for more */
    double poll;          /* seconds between looks at an empty queue */
    FILE *log;            /* one line per job started and ended (NULL: quiet) */
} jw_opts;

/* Run jobs until the queue is empty (drain) or *stop is set (a signal).
 * A job interrupted by *stop is committed and given back to the queue.
 * Returns 0, or -1 with err when the database fails. */
int jw_run(jq *q, const jw_opts *o, volatile sig_atomic_t *stop, char *err, size_t errlen);

#endif
