/*
 * threads.h - a persistent pool of worker threads.
 *
 * tp_run(pool, fn, arg) calls fn(arg, ith, nth) on every thread (the caller
 * is thread 0) and returns when all have finished: for jobs split
 * statically (tp_range). tp_run_dyn is for jobs whose threads claim work
 * from a shared counter: fn runs on the caller and on the workers that join
 * before the caller's own call returns; a worker that is late (descheduled
 * by another process, still waking up) skips the job instead of being
 * waited for. Workers spin briefly and then sleep between jobs, so a
 * forward pass that issues hundreds of small jobs per token pays little
 * synchronisation cost.
 */
#ifndef DF_THREADS_H
#define DF_THREADS_H

#include <stddef.h>

typedef struct tp_pool tp_pool;
typedef void (*tp_fn)(void *arg, int ith, int nth);

/* Create a pool of n threads in total (n-1 workers plus the caller). NULL on failure. */
tp_pool *tp_create(int n);
void tp_free(tp_pool *p);
int tp_size(const tp_pool *p);
/* fn(arg, ith, nth) on all nth threads; returns when every call has returned. */
void tp_run(tp_pool *p, tp_fn fn, void *arg);
/* fn(arg, ith, nth) on the caller (ith 0) and on the workers that start in
 * time; fn must take its work from a shared counter until none is left, so
 * that the caller's call alone would complete the job. Returns when every
 * started call has returned. */
void tp_run_dyn(tp_pool *p, tp_fn fn, void *arg);

/* Bytes the next job will likely read: waiting workers prefetch up to
 * IDLE_PREFETCH_MAX of them (NULL: none). Only a hint: the range may be
 * stale or freed by the time it is read (threads.c says why it pays). */
#define IDLE_PREFETCH_MAX ((size_t)512 << 10)
void tp_idle_prefetch(tp_pool *p, const void *addr, size_t len);

/* Split [0, n) into nth near-equal chunks; chunk ith is [*lo, *hi). */
void tp_range(long n, int ith, int nth, long *lo, long *hi);

#endif
