/*
 * util.h - small shared helpers: error messages, checked allocation,
 * overflow-checked size arithmetic, timing.
 *
 * Library code never prints and never exits. A function that can fail
 * returns 0 on success and -1 on failure, and writes a one-line reason
 * into a caller-supplied buffer (char *err, size_t errlen) with df_seterr.
 */
#ifndef DF_UTIL_H
#define DF_UTIL_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define DF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DF_PRINTF(a, b)
#endif

/* Format a message into err (if err != NULL and errlen > 0). Always returns -1
 * so that "return df_seterr(...)" reads naturally. */
int df_seterr(char *err, size_t errlen, const char *fmt, ...) DF_PRINTF(3, 4);

/* Checked allocation: NULL on failure (callers check); zero-filled, the n*size product overflow-checked (by
 * calloc). */
void *df_calloc(size_t n, size_t size);
/* Aligned allocation (align a power of two >= sizeof(void*)); free with free(). */
void *df_aligned_alloc(size_t align, size_t size);
/* A large buffer read over and over (weights, stream slots): df_aligned_alloc
 * that, from DF_HUGE_MIN bytes up, starts on a 2 MiB boundary and asks the
 * kernel for transparent huge pages over the whole 2 MiB pages inside it
 * (fewer page faults when it is first filled, fewer TLB misses on every pass;
 * the tail stays in small pages, so nothing is resident that is not used).
 * DELTAFIN_HUGEPAGES=0 turns the advice off. Free with free(). */
#define DF_HUGE_MIN (4u << 20)
void *df_alloc_big(size_t align, size_t size);

/* The largest data cache of this machine in bytes (sysfs, else the C library's figure), 0 when unknown; and
 * writing a range's cache lines back to memory and dropping them from every level, so that the next read of it
 * comes from memory (x86-64 and AArch64; elsewhere nothing). sysprobe.c: the memory probes. */
uint64_t df_cache_largest(void);
void df_cache_evict(const void *p, size_t n);
/* The memory probes' buffer: twice the largest cache (256 MiB to 1 GiB), or max_bytes where that is less (0: no
 * limit), whole MiB; *evict: whether each pass must first evict it (df_cache_evict), being too small to outgrow
 * the cache. */
uint64_t df_probe_buffer(uint64_t max_bytes, int *evict);

/* Overflow-checked arithmetic: return 0 on success, -1 on overflow. */
static inline int df_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
static inline int df_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

/* Monotonic wall clock in seconds. */
double df_time(void);

/* Index of the largest of v[0..n) (ties to the lowest index: greedy sampling's choice). */
int32_t df_argmax(const float *v, int n);

/* Peak resident set size of this process in bytes (0 if unknown). */
uint64_t df_peak_rss(void);

/* A byte count for people: "512 B", "1.0 KiB", "64.0 MiB", "1.50 GiB". Returns buf. */
const char *df_fmt_bytes(uint64_t n, char *buf, size_t len);

/* Duplicate a string; NULL on allocation failure. */
char *df_strdup(const char *s);

#endif
