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
 *
 * Checkpoints: with a checkpoint folder, the session itself is saved
 * (df_session_save) right after a commit, once recomputing the tokens since
 * the last checkpoint would cost ckpt_ratio times what a save costs (both
 * measured as the job runs), so a crash costs little recomputation and
 * checkpointing little time. A resumed job loads its checkpoint (checked:
 * the model, the checksum, and the tokens it holds against the committed
 * ones) and decodes only the tokens after it; a damaged or stale one is
 * deleted and the job recomputes from its committed tokens.
 *
 * Memory (docs/jobs.md, "Memory pressure"): a run watches its cgroup
 * (pressure.h) and, under pressure, shrinks the model's expert cache
 * (df_model_set_mem) and goes on; the worker runs each job in a child
 * process and, when the kernel kills it for memory anyway, runs it again
 * from its last checkpoint with three quarters of the budget, at most
 * max_restarts times. Every such step is an event of the job, and a
 * stability monitor writes the run's tokens/s, cache hit rate, disk reads
 * and memory every monitor_every seconds, flagging a collapse of the speed.
 *
 * Remote (remote.h): a job with a remote URL runs there when the local plan
 * cannot run it, cannot finish it before its deadline (at disk_bps/mem_bps,
 * or speeds measured when it is claimed), or after max_restarts kills; the
 * choice and why are the job's place and an event.
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
    const char *ckpt_dir; /* session checkpoints go here (job-ID.snap); NULL: none */
    double ckpt_ratio;    /* checkpoint when recomputing since the last would cost this many times a save */
    const char *db_path;  /* set: each run is a child process that opens it (supervised: a run killed for
                           * memory restarts with a smaller budget); NULL: runs in this process */
    int max_restarts;     /* restarts after a kill for memory, per job and worker */
    double pressure_every; /* seconds between looks at the cgroup's memory */
    double monitor_every; /* seconds per row of the stability monitor */
    double disk_bps, mem_bps; /* the local plan's speeds (bytes/s) for a job with a remote; 0: measured */
    int split_layers;     /* under mpirun: each rank runs a range of the model's layers (docs/cluster.md) */
} jw_opts;

/* Run jobs until the queue is empty (drain) or *stop is set (a signal).
 * A job interrupted by *stop is committed and given back to the queue.
 * Returns 0, or -1 with err when the database fails. */
int jw_run(jq *q, const jw_opts *o, volatile sig_atomic_t *stop, char *err, size_t errlen);

#endif
