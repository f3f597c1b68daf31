/*
 * threads.c - persistent worker pool with a generation counter.
 *
 * DESIGN
 * The caller publishes a job (fn, arg) and bumps an atomic generation
 * number. Workers wait for the generation to change: they spin for a short
 * while (a forward pass issues many small jobs back to back, and a futex
 * wake-up costs microseconds) and then sleep on a condition variable. Each
 * worker runs fn(arg, ith, nth) and decrements a pending counter; the caller
 * runs its own share as thread 0 and then waits for the counter to reach 0.
 *
 * Invariants: only one tp_run is in flight per pool (the caller's thread
 * owns the pool); job fields are written before the generation is released
 * and read after it is acquired.
 */
#include "threads.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ITERS 20000

typedef struct worker {
    tp_pool *pool;
    int ith;
    pthread_t tid;
} worker;

struct tp_pool {
    int n;
    worker *w;
    tp_fn fn;
    void *arg;
    atomic_uint gen;     /* bumped once per job */
    atomic_int pending;  /* workers still running the current job */
    atomic_int stop;
    atomic_int sleepers;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *worker_main(void *p) {
    worker *w = p;
    tp_pool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool->gen, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&pool->stop, memory_order_acquire)) {
            if (++spins < SPIN_ITERS) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->sleepers, 1);
            while (atomic_load(&pool->gen) == seen && !atomic_load(&pool->stop)) pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->mu);
            spins = 0;
        }
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) return NULL;
        seen = g;
        pool->fn(pool->arg, w->ith, pool->n);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel);
    }
}

tp_pool *tp_create(int n) {
    if (n < 1) n = 1;
    tp_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n;
    p->w = calloc((size_t)n, sizeof(worker));
    if (!p->w) { free(p); return NULL; }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    for (int i = 1; i < n; i++) {
        p->w[i].pool = p;
        p->w[i].ith = i;
        if (pthread_create(&p->w[i].tid, NULL, worker_main, &p->w[i]) != 0) {
            p->n = i; /* shut down the ones that started */
            tp_free(p);
            return NULL;
        }
    }
    return p;
}

void tp_free(tp_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->w[i].tid, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->w);
    free(p);
}

int tp_size(const tp_pool *p) { return p ? p->n : 1; }

void tp_run(tp_pool *p, tp_fn fn, void *arg) {
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: pairs with the sleepers check below */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(arg, 0, p->n);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) CPU_RELAX();
}

void tp_range(long n, int ith, int nth, long *lo, long *hi) {
    long base = n / nth, rem = n % nth;
    *lo = ith * base + (ith < rem ? ith : rem);
    *hi = *lo + base + (ith < rem ? 1 : 0);
}
