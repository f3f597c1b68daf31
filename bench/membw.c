/*
 * membw.c - read bandwidth of main memory, for the bandwidth bound of
 * bench/compare.sh.
 *
 *   membw [-t THREADS] [-s MIB] [-r REPS] [-H]
 *
 * DESIGN
 * Decoding one token streams every active weight byte from memory once, so
 * the bound that matters is READ bandwidth with the same thread count the
 * engines use. The program allocates a buffer far larger than any cache
 * (default 1 GiB), touches it, then REPS times lets THREADS threads each sum
 * their own contiguous slice (the way matmul threads stream their rows) and
 * times the slowest thread. It prints one JSON line with the best and the
 * median GB/s (1e9 bytes/s). -H puts the buffer in transparent huge pages
 * (madvise), as Deltafin's store holds weights. Independent of Deltafin's library on purpose:
 * it measures the machine, not our code. Build it with -march=native: with
 * AVX2 the loop is 32-byte loads and adds (the cheapest way to pull bytes
 * in, so the figure is the memory's, not the loop's; a scalar loop reads
 * ~20% less on the machine of bench/RESULTS.md).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

typedef struct {
    const uint64_t *p;
    size_t n;               /* uint64 words */
    pthread_barrier_t *bar;
    uint64_t sum;           /* keeps the loads alive */
} slice;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sum a slice with independent chains (enough loads in flight to saturate memory). */
static void *reader(void *arg) {
    slice *s = arg;
    pthread_barrier_wait(s->bar);
    size_t i = 0;
#if defined(__AVX2__)
    __m256i v0 = _mm256_setzero_si256(), v1 = v0, v2 = v0, v3 = v0;
    for (; i + 16 <= s->n; i += 16) {
        v0 = _mm256_add_epi64(v0, _mm256_load_si256((const __m256i *)(const void *)(s->p + i)));
        v1 = _mm256_add_epi64(v1, _mm256_load_si256((const __m256i *)(const void *)(s->p + i + 4)));
        v2 = _mm256_add_epi64(v2, _mm256_load_si256((const __m256i *)(const void *)(s->p + i + 8)));
        v3 = _mm256_add_epi64(v3, _mm256_load_si256((const __m256i *)(const void *)(s->p + i + 12)));
    }
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)(void *)t, _mm256_add_epi64(_mm256_add_epi64(v0, v1), _mm256_add_epi64(v2, v3)));
    uint64_t a[8] = {t[0], t[1], t[2], t[3], 0, 0, 0, 0};
#else
    uint64_t a[8] = {0};
#endif
    for (; i + 8 <= s->n; i += 8)
        for (int k = 0; k < 8; k++) a[k] += s->p[i + k];
    for (; i < s->n; i++) a[0] += s->p[i];
    s->sum = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    pthread_barrier_wait(s->bar);
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    int t = 2, reps = 7, huge = 0;
    size_t mib = 1024;
    int o;
    while ((o = getopt(argc, argv, "t:s:r:H")) != -1) {
        if (o == 't') t = atoi(optarg);
        else if (o == 's') mib = (size_t)atol(optarg);
        else if (o == 'r') reps = atoi(optarg);
        else if (o == 'H') huge = 1;
        else {
            fprintf(stderr, "usage: membw [-t THREADS] [-s MIB] [-r REPS] [-H]\n");
            return 2;
        }
    }
    if (t < 1 || t > 256 || mib < 16 || reps < 1 || reps > 1000) {
        fprintf(stderr, "membw: bad arguments\n");
        return 2;
    }
    const size_t bytes = mib << 20, words = bytes / 8;
    uint64_t *buf = aligned_alloc(huge ? (size_t)2 << 20 : 4096, bytes);
    if (!buf) {
        fprintf(stderr, "membw: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    if (huge) (void)madvise(buf, bytes, MADV_HUGEPAGE);
    for (size_t i = 0; i < words; i++) buf[i] = i; /* fault every page in */
    double *gbs = calloc((size_t)reps, sizeof(double));
    slice *sl = calloc((size_t)t, sizeof(slice));
    pthread_t *tid = calloc((size_t)t, sizeof(pthread_t));
    if (!gbs || !sl || !tid) return 1;
    uint64_t check = 0;
    for (int r = 0; r < reps; r++) {
        pthread_barrier_t bar;
        pthread_barrier_init(&bar, NULL, (unsigned)t + 1);
        for (int i = 0; i < t; i++) {
            size_t lo = words * (size_t)i / (size_t)t, hi = words * (size_t)(i + 1) / (size_t)t;
            sl[i] = (slice){buf + lo, hi - lo, &bar, 0};
            pthread_create(&tid[i], NULL, reader, &sl[i]);
        }
        pthread_barrier_wait(&bar); /* all started */
        double t0 = now();
        pthread_barrier_wait(&bar); /* all done */
        double dt = now() - t0;
        for (int i = 0; i < t; i++) {
            pthread_join(tid[i], NULL);
            check += sl[i].sum;
        }
        pthread_barrier_destroy(&bar);
        gbs[r] = (double)bytes / dt / 1e9;
    }
    qsort(gbs, (size_t)reps, sizeof(double), cmp);
    printf("{\"threads\":%d,\"mib\":%zu,\"best_gbs\":%.2f,\"median_gbs\":%.2f,\"check\":%u}\n", t, mib, gbs[reps - 1],
           gbs[reps / 2], (unsigned)(check & 1));
    free(buf);
    free(gbs);
    free(sl);
    free(tid);
    return 0;
}
