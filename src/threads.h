/*
 * threads.h - a persistent pool of worker threads.
 *
 * tp_run(pool, fn, arg) calls fn(arg, ith, nth) on every thread (the caller
 * is thread 0) and returns when all have finished. Workers spin briefly and
 * then sleep on a condition variable between jobs, so a forward pass that
 * issues hundreds of small jobs per token pays little synchronisation cost.
 */
#ifndef DF_THREADS_H
#define DF_THREADS_H

typedef struct tp_pool tp_pool;
typedef void (*tp_fn)(void *arg, int ith, int nth);

/* Create a pool of n threads in total (n-1 workers plus the caller). NULL on failure. */
tp_pool *tp_create(int n);
void tp_free(tp_pool *p);
int tp_size(const tp_pool *p);
void tp_run(tp_pool *p, tp_fn fn, void *arg);

/* Split [0, n) into nth near-equal chunks; chunk ith is [*lo, *hi). */
void tp_range(long n, int ith, int nth, long *lo, long *hi);

#endif
