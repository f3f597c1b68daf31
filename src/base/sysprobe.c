/*
 * sysprobe.c - measure this machine: disk read throughput on a given file
 * (concurrent O_DIRECT reads of a given size at random offsets: the access
 * pattern of expert streaming) and memory read bandwidth (every thread
 * streaming its share of a buffer from memory, as decoding streams weights).
 * Used by `deltafin plan` and the server to predict tokens/s.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "deltafin.h"
#include "util.h"

#define CHUNK (4u << 20)

typedef struct {
    int fd;
    uint64_t size, chunk;
    double until;
    uint64_t bytes, seed;
    int failed;
} disk_job;

static void *disk_worker(void *arg) {
    disk_job *j = arg;
    uint8_t *buf = df_aligned_alloc(4096, (size_t)j->chunk);
    if (!buf) {
        j->failed = 1;
        return NULL;
    }
    const uint64_t blocks = j->size / j->chunk;
    while (df_time() < j->until) {
        j->seed = j->seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t off = blocks ? ((j->seed >> 17) % blocks) * j->chunk : 0;
        ssize_t r = pread(j->fd, buf, (size_t)j->chunk, (off_t)off);
        if (r <= 0) {
            if (r < 0 && errno == EINTR) continue;
            j->failed = r < 0;
            break;
        }
        j->bytes += (uint64_t)r;
    }
    free(buf);
    return NULL;
}

double df_probe_disk(const char *path, double seconds, int threads, uint64_t chunk, char *err, size_t errlen) {
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
    int direct = fd >= 0;
    if (fd < 0) fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return df_seterr(err, errlen, "%s: %s", path, strerror(errno)), -1.0;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < 4096) {
        close(fd);
        return df_seterr(err, errlen, "%s: too small to measure", path), -1.0;
    }
    disk_job jobs[64];
    pthread_t tid[64];
    const double t0 = df_time();
    for (int i = 0; i < threads; i++) {
        memset(&jobs[i], 0, sizeof jobs[i]);
        jobs[i].fd = fd;
        jobs[i].size = (uint64_t)st.st_size;
        uint64_t c = chunk ? (chunk + 4095) & ~(uint64_t)4095 : CHUNK;
        jobs[i].chunk = (uint64_t)st.st_size >= c ? c : 4096;
        jobs[i].until = t0 + seconds;
        jobs[i].seed = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
        if (pthread_create(&tid[i], NULL, disk_worker, &jobs[i]) != 0) threads = i;
    }
    uint64_t total = 0;
    int failed = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(tid[i], NULL);
        total += jobs[i].bytes;
        failed |= jobs[i].failed;
    }
    const double dt = df_time() - t0;
    if (!direct) posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if (failed || total == 0) return df_seterr(err, errlen, "%s: reading failed", path), -1.0;
    return (double)total / dt;
}

double df_file_allocated(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || st.st_size <= 0) return -1.0;
    return (double)st.st_blocks * 512.0 / (double)st.st_size;
}

/* Fill fd with `bytes` of incompressible-looking data (so no layer below can
 * skip storing it) in pieces of `piece` bytes. 0 or -1. */
static int fill_scratch(int fd, uint64_t bytes, uint64_t piece) {
    uint64_t *buf = df_aligned_alloc(4096, (size_t)piece);
    if (!buf) return -1;
    uint64_t x = 0x243F6A8885A308D3ull;
    int rc = 0;
    for (uint64_t done = 0; rc == 0 && done < bytes; done += piece) {
        for (size_t i = 0; i < piece / 8; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            buf[i] = x;
        }
        for (size_t w = 0; rc == 0 && w < piece;) {
            ssize_t k = write(fd, (uint8_t *)buf + w, (size_t)piece - w);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) rc = -1;
            else w += (size_t)k;
        }
    }
    free(buf);
    return rc == 0 && fsync(fd) == 0 ? 0 : -1;
}

double df_probe_disk_scratch(const char *dir, uint64_t bytes, double seconds, int threads, uint64_t chunk, char *err,
                             size_t errlen) {
    if (chunk < 4096) chunk = 4096;
    chunk &= ~(uint64_t)4095;
    if (bytes < 4 * chunk) bytes = 4 * chunk;
    size_t n = strlen(dir) + 32;
    char *path = malloc(n);
    if (!path) return df_seterr(err, errlen, "out of memory"), -1.0;
    snprintf(path, n, "%s/.deltafin-probe-XXXXXX", dir);
    int fd = mkostemp(path, O_CLOEXEC); /* O_EXCL: a new file of our own, never a planted one */
    if (fd < 0) {
        df_seterr(err, errlen, "%s: cannot create a scratch file to measure the disk: %s", dir, strerror(errno));
        free(path);
        return -1.0;
    }
    double rate = -1.0;
    if (fill_scratch(fd, bytes, chunk) != 0)
        df_seterr(err, errlen, "%s: cannot write a %llu-byte scratch file to measure the disk: %s", dir,
                  (unsigned long long)bytes, strerror(errno));
    else
        rate = df_probe_disk(path, seconds, threads, chunk, err, errlen);
    close(fd);
    unlink(path);
    free(path);
    return rate;
}

uint64_t df_cache_largest(void) {
    uint64_t best = 0;
    for (int i = 0; i < 8; i++) {
        char path[96], line[64];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "re");
        if (!f) continue;
        char unit = 0;
        unsigned long long v = 0;
        if (fgets(line, sizeof line, f) && sscanf(line, "%llu%c", &v, &unit) >= 1) {
            const uint64_t b = v << (unit == 'K' ? 10 : unit == 'M' ? 20 : unit == 'G' ? 30 : 0);
            best = b > best ? b : best;
        }
        fclose(f);
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (l3 > 0 && (uint64_t)l3 > best) best = (uint64_t)l3;
#endif
    return best;
}

void df_cache_evict(const void *ptr, size_t n) {
    const uint8_t *p = ptr;
#if defined(__x86_64__)
    for (size_t i = 0; i < n; i += 64) _mm_clflush(p + i);
    _mm_mfence();
#elif defined(__aarch64__)
    for (size_t i = 0; i < n; i += 64) __asm__ volatile("dc civac, %0" : : "r"(p + i) : "memory");
    __asm__ volatile("dsb ish" : : : "memory");
#else
    (void)p, (void)n; /* no portable way: the buffer is then sized past the cache only */
#endif
}

/* Sum n 64-byte lines with four independent chains of the widest loads the
 * processor has (a narrow loop cannot pull memory's full rate into one core:
 * bench/membw.c's scalar loop reads about 20% less than its AVX2 one). */
#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t sum_lines_avx2(const uint8_t *p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 2 <= n; i += 2, p += 128) { /* two lines a step: four loads in flight */
        a = _mm256_add_epi64(a, _mm256_load_si256((const __m256i *)(const void *)p));
        b = _mm256_add_epi64(b, _mm256_load_si256((const __m256i *)(const void *)(p + 32)));
        c = _mm256_add_epi64(c, _mm256_load_si256((const __m256i *)(const void *)(p + 64)));
        d = _mm256_add_epi64(d, _mm256_load_si256((const __m256i *)(const void *)(p + 96)));
    }
    if (i < n) {
        a = _mm256_add_epi64(a, _mm256_load_si256((const __m256i *)(const void *)p));
        b = _mm256_add_epi64(b, _mm256_load_si256((const __m256i *)(const void *)(p + 32)));
    }
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)(void *)t, _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
    return t[0] + t[1] + t[2] + t[3];
}
#endif

static uint64_t sum_lines(const uint8_t *p, size_t n) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) return sum_lines_avx2(p, n);
    __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
    for (size_t i = 0; i < n; i++, p += 64) {
        a = _mm_add_epi64(a, _mm_load_si128((const __m128i *)(const void *)p));
        b = _mm_add_epi64(b, _mm_load_si128((const __m128i *)(const void *)(p + 16)));
        c = _mm_add_epi64(c, _mm_load_si128((const __m128i *)(const void *)(p + 32)));
        d = _mm_add_epi64(d, _mm_load_si128((const __m128i *)(const void *)(p + 48)));
    }
    uint64_t t[2];
    _mm_storeu_si128((__m128i *)(void *)t, _mm_add_epi64(_mm_add_epi64(a, b), _mm_add_epi64(c, d)));
    return t[0] + t[1];
#elif defined(__aarch64__)
    uint64x2_t a = vdupq_n_u64(0), b = a, c = a, d = a;
    for (size_t i = 0; i < n; i++, p += 64) {
        a = vaddq_u64(a, vld1q_u64((const uint64_t *)(const void *)p));
        b = vaddq_u64(b, vld1q_u64((const uint64_t *)(const void *)(p + 16)));
        c = vaddq_u64(c, vld1q_u64((const uint64_t *)(const void *)(p + 32)));
        d = vaddq_u64(d, vld1q_u64((const uint64_t *)(const void *)(p + 48)));
    }
    return vaddvq_u64(vaddq_u64(vaddq_u64(a, b), vaddq_u64(c, d)));
#else
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i < n; i++, p += 64) {
        const uint64_t *q = (const uint64_t *)(const void *)p;
        a += q[0] + q[4], b += q[1] + q[5], c += q[2] + q[6], d += q[3] + q[7];
    }
    return a + b + c + d;
#endif
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;                /* 1: all threads started, pass on; -1: not all could start, return */
    int stop;              /* read at each pass's start barrier */
    pthread_barrier_t bar; /* the threads and the timer */
} mem_gate;

typedef struct {
    const uint8_t *p;
    size_t n; /* 64-byte lines */
    int flush;
    mem_gate *g;
    double start, end; /* this pass's reading, by the thread's own clock: the timer may wait for a processor */
    uint64_t sum;
} mem_job;

/* One thread's slice, pass after pass: evicted (when the buffer fits in the
 * cache), then read between two barriers the caller times. */
static void *mem_worker(void *arg) {
    mem_job *j = arg;
    pthread_mutex_lock(&j->g->mu);
    while (j->g->go == 0) pthread_cond_wait(&j->g->cv, &j->g->mu);
    const int go = j->g->go;
    pthread_mutex_unlock(&j->g->mu);
    while (go > 0) {
        if (j->flush) df_cache_evict(j->p, j->n * 64);
        pthread_barrier_wait(&j->g->bar); /* start */
        if (__atomic_load_n(&j->g->stop, __ATOMIC_ACQUIRE)) break;
        j->start = df_time();
        j->sum += sum_lines(j->p, j->n);
        j->end = df_time();
        pthread_barrier_wait(&j->g->bar); /* done */
    }
    return NULL;
}

uint64_t df_probe_buffer(uint64_t max_bytes, int *evict) {
    /* a buffer twice the largest cache is read from memory pass after pass (a sequential pass over twice an LRU
     * cache finds nothing of the pass before); where the budget allows less (half of it: plan must fit where run
     * fits, tests/cli/cgroup_cmds.sh), each pass first evicts it */
    const uint64_t cache = df_cache_largest(), mib = (uint64_t)1 << 20;
    uint64_t n = 2 * cache;
    n = n < 256 * mib ? 256 * mib : n > 1024 * mib ? 1024 * mib : n;
    if (max_bytes && max_bytes < n) n = max_bytes;
    n &= ~(mib - 1);
    if (n < mib) n = mib;
    *evict = cache == 0 || n < 2 * cache;
    return n;
}

double df_probe_memory(double seconds, uint64_t max_bytes, int threads) {
    /* Decoding streams each weight once a token with every thread at once, from memory: so the buffer
     * (df_probe_buffer) is read by `threads` threads in wide loads. */
    if (threads < 1) threads = (int)sysconf(_SC_NPROCESSORS_ONLN); /* as a model's default (df_model_params) */
    if (threads < 1) threads = 1;
    if (threads > 64) threads = 64;
    int flush;
    const uint64_t n = df_probe_buffer(max_bytes, &flush);
    uint8_t *buf = df_alloc_big(64, (size_t)n);
    if (!buf) return -1.0;
    memset(buf, 1, (size_t)n);
    const size_t lines = (size_t)(n / 64);
    mem_gate g = {.go = 0, .stop = 0};
    if (pthread_mutex_init(&g.mu, NULL) != 0) return free(buf), -1.0;
    if (pthread_cond_init(&g.cv, NULL) != 0) return pthread_mutex_destroy(&g.mu), free(buf), -1.0;
    if (pthread_barrier_init(&g.bar, NULL, (unsigned)threads + 1) != 0)
        return pthread_cond_destroy(&g.cv), pthread_mutex_destroy(&g.mu), free(buf), -1.0;
    mem_job jobs[64];
    pthread_t tid[64];
    int started = 0;
    for (int i = 0; i < threads; i++) {
        const size_t lo = lines * (size_t)i / (size_t)threads, hi = lines * (size_t)(i + 1) / (size_t)threads;
        jobs[i] = (mem_job){buf + lo * 64, hi - lo, flush, &g, 0, 0, 0};
        if (pthread_create(&tid[i], NULL, mem_worker, &jobs[i]) != 0) break;
        started++;
    }
    pthread_mutex_lock(&g.mu);
    g.go = started == threads ? 1 : -1; /* the barrier counts every thread: without them all, measure nothing */
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    double best = started == threads ? 0.0 : -1.0;
    if (started == threads) {
        /* the fastest pass, not the average: a busy machine's other work slows some passes, never speeds one up,
         * so the best is the memory's own speed and two runs agree (plan's predictions must not fall as the
         * budget grows because one probe was unlucky) */
        const double t0 = df_time();
        do {
            pthread_barrier_wait(&g.bar);
            pthread_barrier_wait(&g.bar);
            double a = jobs[0].start, b = jobs[0].end; /* from the first start to the last end */
            for (int i = 1; i < threads; i++)
                a = jobs[i].start < a ? jobs[i].start : a, b = jobs[i].end > b ? jobs[i].end : b;
            if (b > a && (double)n / (b - a) > best) best = (double)n / (b - a);
        } while (df_time() - t0 < seconds);
        __atomic_store_n(&g.stop, 1, __ATOMIC_RELEASE);
        pthread_barrier_wait(&g.bar);
    }
    uint64_t sum = 0;
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL), sum += jobs[i].sum;
    pthread_barrier_destroy(&g.bar);
    pthread_cond_destroy(&g.cv);
    pthread_mutex_destroy(&g.mu);
    free(buf);
    return sum == 42 ? 0.0 : best; /* sum keeps the loads alive */
}

/* The memory cgroup: DELTAFIN_CGROUP_DIR (v2 where it holds memory.current,
 * else v1), else the memory controller's folder of /proc/self/cgroup (v1),
 * else the unified hierarchy's (v2). */
static int named_cgroup(const char *named, char *dir, size_t n, int *v2) {
    char probe[600];
    const int w = snprintf(dir, n, "%s", named), wp = snprintf(probe, sizeof probe, "%s/memory.current", named);
    if (w <= 0 || (size_t)w >= n || wp <= 0 || (size_t)wp >= sizeof probe || access(named, R_OK) != 0) return -1;
    *v2 = access(probe, R_OK) == 0;
    return 0;
}

int df_cgroup_dir(char *dir, size_t n, int *v2) {
    *v2 = 0;
    const char *named = getenv("DELTAFIN_CGROUP_DIR");
    if (named && *named) return named_cgroup(named, dir, n, v2);
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return -1;
    char line[1024], p1[512] = "", p2[512] = "";
    int have1 = 0, have2 = 0;
    while (fgets(line, sizeof line, f)) { /* "ID:CONTROLLERS:PATH" */
        line[strcspn(line, "\n")] = 0;
        char *a = strchr(line, ':'), *b = a ? strchr(a + 1, ':') : NULL;
        if (!a || !b) continue;
        *a = *b = 0;
        const char *path = b + 1;
        if (!strcmp(line, "0") && a + 1 == b) have2 = snprintf(p2, sizeof p2, "%s", path) < (int)sizeof p2;
        char *save = NULL;
        for (char *t = strtok_r(a + 1, ",", &save); t; t = strtok_r(NULL, ",", &save))
            if (!strcmp(t, "memory")) have1 = snprintf(p1, sizeof p1, "%s", path) < (int)sizeof p1;
    }
    fclose(f);
    char probe[600];
    int w;
    if (have1 && (w = snprintf(dir, n, "/sys/fs/cgroup/memory%s", p1)) > 0 && (size_t)w < n && access(dir, R_OK) == 0)
        return 0;
    if (have2 && (w = snprintf(dir, n, "/sys/fs/cgroup%s", p2)) > 0 && (size_t)w < n &&
        snprintf(probe, sizeof probe, "%s/memory.current", dir) < (int)sizeof probe && access(probe, R_OK) == 0) {
        *v2 = 1;
        return 0;
    }
    return -1;
}

/* A number from dir/file: the first one (key NULL), or the one after "key "
 * on a line of its own (memory.stat); 0 when absent or "max". */
static uint64_t cg_number(const char *dir, const char *file, const char *key) {
    char path[700], line[256];
    if (snprintf(path, sizeof path, "%s/%s", dir, file) >= (int)sizeof path) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    uint64_t v = 0;
    const size_t kl = key ? strlen(key) : 0;
    while (fgets(line, sizeof line, f)) {
        if (!key) {
            v = strtoull(line, NULL, 10);
            break;
        }
        if (!strncmp(line, key, kl) && line[kl] == ' ') {
            v = strtoull(line + kl + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return v;
}

uint64_t df_memory_room(void) {
    uint64_t room = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kib;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) room = (uint64_t)kib << 10;
        fclose(f);
    }
    char dir[512];
    int v2;
    if (df_cgroup_dir(dir, sizeof dir, &v2) == 0) {
        uint64_t limit = cg_number(dir, v2 ? "memory.max" : "memory.limit_in_bytes", NULL);
        const uint64_t anon = cg_number(dir, "memory.stat", v2 ? "anon" : "total_rss");
        if (limit >= (uint64_t)1 << 62) limit = 0; /* v1's "no limit" */
        if (limit) {
            const uint64_t left = limit > anon ? limit - anon : 0;
            if (!room || left < room) room = left;
        }
    }
    return room;
}
