/*
 * testutil.h - helpers shared by the cmocka test programs.
 */
#ifndef DF_TESTUTIL_H
#define DF_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

/* Path of the shared folder beside the checkout (../shared), overridable with DELTAFIN_SHARED. */
static inline const char *tu_shared_dir(void) {
    const char *s = getenv("DELTAFIN_SHARED");
    return s ? s : "../shared";
}

/* Folder where scripts/fetch-llama.sh unpacked llama.cpp (source clone and prebuilt libs). */
static inline const char *tu_llama_dir(void) {
    const char *s = getenv("DELTAFIN_LLAMA_DIR");
    return s ? s : ".cache/llama";
}

/* Deterministic xorshift generator for test data. */
static inline uint64_t tu_rand(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return *s = x;
}
static inline float tu_randf(uint64_t *s) { /* uniform in [-1, 1) */
    return (float)((double)(tu_rand(s) >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* A fresh temporary folder (path into buf), and its removal. 0 on success. */
static inline int tu_mkdtemp(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/deltafin-test-%s-XXXXXX", tag);
    return mkdtemp(buf) ? 0 : -1;
}
static inline int tu_rmtree(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Build a model with the build's mkmodel (DELTAFIN_BUILD, default "build"). */
static inline void tu_mkmodel(const char *out, const char *args) {
    char cmd[1024];
    const char *b = getenv("DELTAFIN_BUILD");
    snprintf(cmd, sizeof cmd, "%s/mkmodel -o %s %s 2>/dev/null", b && *b ? b : "build", out, args);
    assert_int_equal(system(cmd), 0);
}

#endif
