/*
 * sysprobe.c - measure this machine: disk read throughput on a given file
 * (concurrent O_DIRECT reads of a given size at random offsets: the access
 * pattern of expert streaming) and memory read bandwidth. Used by `deltafin plan` to
 * predict tokens/s before a long run.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

double df_probe_memory(double seconds, uint64_t max_bytes) {
    /* 256 MiB is well beyond any cache; under a budget, what the budget allows
     * (plan must fit where run fits: tests/cli/cgroup_cmds.sh) */
    size_t n = (size_t)256 << 20;
    if (max_bytes && max_bytes < n) n = (size_t)(max_bytes & ~(uint64_t)((1 << 20) - 1));
    if (n < ((size_t)1 << 20)) n = (size_t)1 << 20;
    uint64_t *buf = df_aligned_alloc(64, n);
    if (!buf) return -1.0;
    memset(buf, 1, n);
    /* the fastest pass, not the average: a busy machine's other work slows some passes, never speeds one up,
     * so the best is the memory's own speed and two runs agree (plan's predictions must not fall as the
     * budget grows because one probe was unlucky) */
    uint64_t sum = 0;
    const double t0 = df_time();
    double t = t0, best = 0;
    while (t - t0 < seconds) {
        uint64_t a = 0, b = 0, c = 0, d = 0;
        for (size_t i = 0; i < n / 8; i += 4) {
            a += buf[i];
            b += buf[i + 1];
            c += buf[i + 2];
            d += buf[i + 3];
        }
        sum += a + b + c + d;
        const double now = df_time();
        if (now > t && (double)n / (now - t) > best) best = (double)n / (now - t);
        t = now;
    }
    free(buf);
    return sum == 42 ? 0.0 : best; /* sum keeps the loop alive */
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
