/*
 * threads.c - persistent worker pool with a generation counter.
 *
 * DESIGN
 * The caller publishes a job (fn, arg, kind) and bumps an atomic generation
 * number. Workers wait for the generation to change: they spin for a short
 * while (a forward pass issues many small jobs back to back, and a futex
 * wake-up costs microseconds), then spin with sched_yield (cheap when the
 * core is ours, polite when another process wants it), then sleep on a
 * condition variable.
 *
 * A worker JOINS the job it saw by incrementing the member count in `state`
 * (generation in the high 32 bits, a CLOSED bit, the count below) with a
 * compare-and-swap that fails if the generation moved on or the job is
 * closed; only a joined worker reads fn/arg. It leaves by decrementing.
 *  - tp_run (static jobs): the caller waits until all n-1 workers have run
 *    the job (`done` counter); it never closes, so every worker joins.
 *  - tp_run_dyn: after its own call the caller sets CLOSED and waits only
 *    for members; latecomers see CLOSED and skip. The job's work is claimed
 *    from a counter, so nothing is lost.
 * While waiting, the caller spins, then yields: on a machine shared with
 * other processes a descheduled worker gets the core back sooner.
 *
 * Idle prefetch: between jobs the caller often works alone for tens of
 * microseconds (norms, gates, routing). A matrix product that follows such
 * a gap streams its weights slower than one that follows another product:
 * with the memory system idle it starts cold (bench/RESULTS.md, 2026-12-07,
 * "the idle prefetch"). tp_idle_prefetch names the bytes the next job
 * will likely read; a waiting worker prefetches its share of them (at most
 * IDLE_PREFETCH_MAX, a stripe of PF_BLOCK bytes per worker in turn) while it
 * spins, so the memory stays busy and the next job starts on warm lines. The
 * hint is a seqlock-published (address, length); a prefetch never faults,
 * so a stale or freed range costs only bandwidth nobody was using.
 *
 * Invariants: only one job is in flight per pool (the caller's thread owns
 * the pool); job fields are written before the generation is released and
 * read only after a successful join; the caller never publishes a new job
 * while a member of the previous one is inside fn.
 */
#include "threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

#define SPIN_ITERS 4000    /* pause loops before yielding (a few microseconds) */
#define PF_BLOCK 4096      /* idle prefetch: bytes a worker takes in turn */
#define PF_STEP 8          /* idle prefetch: cache lines per spin iteration */
#define YIELD_ITERS 2000   /* sched_yield loops before sleeping */
#define WAIT_SPINS 2000    /* caller: pause loops before yielding */
#define CLOSED ((uint64_t)1 << 31)
#define COUNT_MASK (CLOSED - 1)

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
    int dyn;                 /* current job is a tp_run_dyn job */
    unsigned gen_local;      /* caller's copy of gen */
    atomic_uint gen;         /* bumped once per job */
    _Atomic uint64_t state;  /* gen << 32 | CLOSED | members */
    atomic_int done;         /* workers that finished the current static job */
    atomic_int stop;
    atomic_int sleepers;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Alignas(64) atomic_uint hint_seq; /* idle prefetch hint, odd while being written: its own line, */
    _Atomic uintptr_t hint_addr;       /* so that publishing it does not take gen's from the workers; */
    _Atomic size_t hint_len;           /* last, so the struct's alignment pads the rest of the line */
};

/* Join job g: 1 if joined, 0 if it moved on or closed. */
static int join(tp_pool *p, unsigned g) {
    uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    for (;;) {
        if ((unsigned)(s >> 32) != g || (s & CLOSED)) return 0;
        if (atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel, memory_order_acquire))
            return 1;
    }
}

/* A worker's progress through the current idle prefetch hint. */
typedef struct {
    unsigned seq;      /* the hint it is working on */
    uintptr_t addr;
    size_t len, off;   /* off: the next byte of its stripe */
} pf_state;

/* Read the hint if it changed (seqlock); 0 while it is being written. */
static int pf_refresh(tp_pool *p, pf_state *ps, int ith) {
    const unsigned s1 = atomic_load_explicit(&p->hint_seq, memory_order_acquire); /* no fences: ThreadSanitizer */
    if (s1 == ps->seq) return 1;
    if (s1 & 1) return 0;
    const uintptr_t a = atomic_load_explicit(&p->hint_addr, memory_order_acquire);
    const size_t n = atomic_load_explicit(&p->hint_len, memory_order_acquire);
    if (atomic_load_explicit(&p->hint_seq, memory_order_relaxed) != s1) return 0;
    *ps = (pf_state){s1, a, n, (size_t)(ith - 1) * PF_BLOCK};
    return 1;
}

/* Prefetch the next PF_STEP lines of this worker's stripe of the hint. */
static void pf_step(tp_pool *p, pf_state *ps, int ith) {
    if (!pf_refresh(p, ps, ith) || ps->off >= ps->len) return;
    for (int i = 0; i < PF_STEP && ps->off < ps->len; i++) {
        __builtin_prefetch((const void *)(ps->addr + ps->off), 0, 2); /* never faults */
        ps->off += 64;
        if (ps->off % PF_BLOCK == 0) ps->off += (size_t)(p->n - 2) * PF_BLOCK; /* the other workers' blocks */
    }
}

static void *worker_main(void *arg) {
    worker *w = arg;
    tp_pool *pool = w->pool;
    unsigned seen = 0;
    pf_state ps = {0, 0, 0, 0};
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool->gen, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&pool->stop, memory_order_acquire)) {
            ++spins;
            if (spins < SPIN_ITERS) {
                pf_step(pool, &ps, w->ith);
                CPU_RELAX();
            } else if (spins < SPIN_ITERS + YIELD_ITERS) {
                sched_yield();
            } else {
                pthread_mutex_lock(&pool->mu);
                atomic_fetch_add(&pool->sleepers, 1);
                while (atomic_load(&pool->gen) == seen && !atomic_load(&pool->stop))
                    pthread_cond_wait(&pool->cv, &pool->mu);
                atomic_fetch_sub(&pool->sleepers, 1);
                pthread_mutex_unlock(&pool->mu);
                spins = 0;
            }
        }
        if (atomic_load_explicit(&pool->stop, memory_order_acquire)) return NULL;
        seen = g;
        if (!join(pool, g)) continue; /* a dynamic job that finished without us */
        const int dyn = pool->dyn;
        pool->fn(pool->arg, w->ith, pool->n);
        if (!dyn) atomic_fetch_add_explicit(&pool->done, 1, memory_order_acq_rel);
        atomic_fetch_sub_explicit(&pool->state, 1, memory_order_acq_rel);
    }
}

tp_pool *tp_create(int n) {
    if (n < 1) n = 1;
    tp_pool *p = NULL;
    if (posix_memalign((void **)&p, 64, sizeof *p) != 0) return NULL; /* the hint's line (_Alignas) */
    memset(p, 0, sizeof *p);
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

/* Spin, then yield, until cond() holds. */
#define WAIT_UNTIL(cond)                        \
    do {                                        \
        for (int spins_ = 0; !(cond);) {        \
            if (++spins_ < WAIT_SPINS) CPU_RELAX(); \
            else sched_yield();                 \
        }                                       \
    } while (0)

static void run(tp_pool *p, tp_fn fn, void *arg, int dyn) {
    if (!p || p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    const unsigned g = ++p->gen_local;
    p->fn = fn;
    p->arg = arg;
    p->dyn = dyn;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->state, (uint64_t)g << 32, memory_order_relaxed);
    atomic_store(&p->gen, g); /* seq_cst: publishes the job, pairs with the sleepers check below */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(arg, 0, p->n);
    if (dyn) {
        atomic_fetch_or_explicit(&p->state, CLOSED, memory_order_acq_rel);
        WAIT_UNTIL((atomic_load_explicit(&p->state, memory_order_acquire) & COUNT_MASK) == 0);
    } else {
        WAIT_UNTIL(atomic_load_explicit(&p->done, memory_order_acquire) == p->n - 1);
        /* members decrement state after done: wait so no worker is still inside */
        WAIT_UNTIL((atomic_load_explicit(&p->state, memory_order_acquire) & COUNT_MASK) == 0);
    }
}

void tp_run(tp_pool *p, tp_fn fn, void *arg) { run(p, fn, arg, 0); }
void tp_run_dyn(tp_pool *p, tp_fn fn, void *arg) { run(p, fn, arg, 1); }

void tp_idle_prefetch(tp_pool *p, const void *addr, size_t len) {
    if (!p || p->n == 1) return;
    if (len > IDLE_PREFETCH_MAX || !addr) len = addr ? IDLE_PREFETCH_MAX : 0;
    if ((uintptr_t)addr == atomic_load_explicit(&p->hint_addr, memory_order_relaxed) && /* only the caller */
        len == atomic_load_explicit(&p->hint_len, memory_order_relaxed))                 /* writes them */
        return; /* the same: leave the line alone */
    const unsigned s = atomic_load_explicit(&p->hint_seq, memory_order_relaxed); /* only the caller writes */
    atomic_store_explicit(&p->hint_seq, s + 1, memory_order_relaxed); /* odd: being written (pf_refresh) */
    atomic_store_explicit(&p->hint_addr, (uintptr_t)addr, memory_order_release); /* after the odd count */
    atomic_store_explicit(&p->hint_len, len, memory_order_release);
    atomic_store_explicit(&p->hint_seq, s + 2, memory_order_release);
}

void tp_range(long n, int ith, int nth, long *lo, long *hi) {
    long base = n / nth, rem = n % nth;
    *lo = ith * base + (ith < rem ? ith : rem);
    *hi = *lo + base + (ith < rem ? 1 : 0);
}
