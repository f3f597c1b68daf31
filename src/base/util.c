/*
 * util.c - error formatting, checked allocation, timing, peak memory.
 */
#include "util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

int df_seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void *df_calloc(size_t n, size_t size) {
    if (n == 0 || size == 0) return calloc(1, 1);
    return calloc(n, size);
}

void *df_aligned_alloc(size_t align, size_t size) {
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : align) != 0) return NULL;
    return p;
}

void *df_alloc_big(size_t align, size_t size) {
    const size_t huge = (size_t)2 << 20;
    const char *e = getenv("DELTAFIN_HUGEPAGES"); /* 0: no advice (read per call: no shared state) */
    if (size < DF_HUGE_MIN || (e && strcmp(e, "0") == 0)) return df_aligned_alloc(align, size);
    void *p = df_aligned_alloc(align > huge ? align : huge, size);
#ifdef MADV_HUGEPAGE
    if (p) (void)madvise(p, size & ~(huge - 1), MADV_HUGEPAGE); /* advice: failing it costs only speed */
#endif
    return p;
}

double df_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int32_t df_argmax(const float *v, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

uint64_t df_peak_rss(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (uint64_t)ru.ru_maxrss * 1024u; /* Linux reports KiB */
}

char *df_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

const char *df_fmt_bytes(uint64_t n, char *buf, size_t len) {
    static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (n < 1024) {
        snprintf(buf, len, "%llu B", (unsigned long long)n);
        return buf;
    }
    double v = (double)n / 1024;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    snprintf(buf, len, u >= 2 ? "%.2f %s" : "%.1f %s", v, unit[u]);
    return buf;
}
