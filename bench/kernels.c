/*
 * kernels.c - throughput of Deltafin's matrix product alone, per weight type:
 * the numbers behind the model-level benchmarks of bench/compare.sh.
 *
 *   kernels [-t THREADS] [-m MIB] [-k N_IN] [-s SLICE_MIB] [-r REPS] [-g] [TYPE ...]
 *           (default: 2 threads, 256 MiB, rows of 4096, whole matrix; q4_K q8_0 q6_K q4_0 f16)
 *
 * DESIGN
 * For each type it quantizes a random weight matrix of about MIB mebibytes
 * (default 256: far larger than the last-level cache, like a real model's
 * weights) with N_IN-element rows (64 distinct rows, repeated: the i-quant
 * quantizers are slow searches), then times mm_mul through the library's
 * thread pool for one token (generation: weight bytes streamed per second,
 * to compare with bench/membw) and for a 512-token prompt on 1024 rows
 * (GMAC/s; -g: generation only, e.g. under perf, the prompt column 0).
 * Types with a packed layout in this kernel table (pack.h) are packed
 * first, as the store packs resident matrices (DELTAFIN_PACK=0: not; the
 * last column says which ran). With -s the generation pass is a sequence of
 * products of SLICE_MIB each, like a model's layers, so per-call costs show.
 * Each figure is the median of REPS runs. Built against the library's
 * internal headers (src/), like the tests:
 *   cc -O2 -Iinclude $(printf -- '-I%s ' src/[a-z]*) bench/kernels.c build/libdeltafin-internal.a \
 *      -lpcre2-8 -lutf8proc -luring -lm -pthread -o build/kernels
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "matmul.h"
#include "pack.h"
#include "quant.h"
#include "threads.h"
#include "util.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int type_of(const char *name) {
    for (int t = 0; t < DF_TYPE_COUNT; t++) {
        const quant_traits *q = quant_traits_get(t);
        if (q && q->name && q->supported && !strcmp(q->name, name)) return t;
    }
    return -1;
}

int main(int argc, char **argv) {
    int threads = 2, reps = 7, gen_only = 0, o;
    size_t mib = 256;
    double slice_mib = 0;
    int64_t n_in = 4096;
    while ((o = getopt(argc, argv, "t:m:r:k:s:g")) != -1) {
        if (o == 't') threads = atoi(optarg);
        else if (o == 'm') mib = (size_t)atol(optarg);
        else if (o == 'k') n_in = atol(optarg) & ~255L;
        else if (o == 's') slice_mib = atof(optarg);
        else if (o == 'r') reps = atoi(optarg);
        else if (o == 'g') gen_only = 1;
        else {
            fprintf(stderr, "usage: kernels [-t THREADS] [-m MIB] [-k N_IN] [-s SLICE_MIB] [-r REPS] [-g] [TYPE ...]\n");
            return 2;
        }
    }
    const char *defaults[] = {"q4_K", "q8_0", "q6_K", "q4_0", "f16"};
    const char **names = argc > optind ? (const char **)argv + optind : defaults;
    const int n_names = argc > optind ? argc - optind : 5;
    if (threads < 1 || reps < 1 || mib < 1 || n_in < 256) return 2;
    quant_init();
    tp_pool *pool = tp_create(threads);
    const int64_t n_tok = 512;
    float *x = malloc(sizeof(float) * (size_t)(n_in * n_tok));
    float *row = malloc(sizeof(float) * (size_t)n_in);
    double *v = malloc(sizeof(double) * (size_t)reps);
    mm_scratch sc = {.buf = NULL, .size = mm_scratch_bytes(n_in, (int)n_tok)};
    sc.buf = df_aligned_alloc(64, sc.size);
    if (!pool || !x || !row || !v || !sc.buf) return 1;
    uint64_t rng = 1;
    for (int64_t i = 0; i < n_in * n_tok; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int64_t)(rng >> 40) - (1 << 23)) / (float)(1 << 23);
    }
    printf("%-6s %12s %10s %14s %7s  (isa %s, %d threads)\n", "type", "gen GB/s", "gen ms", "prompt GMAC/s", "layout",
           quant_isa_name(), threads);
    const char *pack_env = getenv("DELTAFIN_PACK");
    const int may_pack = !pack_env || strcmp(pack_env, "0");
    for (int k = 0; k < n_names; k++) {
        const int t = type_of(names[k]);
        if (t < 0) {
            fprintf(stderr, "kernels: unknown type %s\n", names[k]);
            continue;
        }
        const size_t rb = quant_row_size(t, n_in);
        const int64_t n_out = (int64_t)((mib << 20) / rb) & ~(int64_t)63;
        uint8_t *w = df_alloc_big(64, rb * (size_t)n_out); /* huge pages, as the store holds weights */
        float *y = malloc(sizeof(float) * (size_t)(n_out > 4096 ? n_out : 4096) * (size_t)n_tok);
        if (!w || !y) return 1;
        for (int64_t r = 0; r < n_out; r++) {
            if (r >= 64) { /* the slow quantizers (i-quants) fill only 64 distinct rows */
                memcpy(w + (size_t)r * rb, w + (size_t)(r % 64) * rb, rb);
                continue;
            }
            for (int64_t i = 0; i < n_in; i++) row[i] = x[(r * 7 + i) % (n_in * n_tok)];
            quant_traits_get(t)->from_float(row, w + (size_t)r * rb, n_in);
        }
        const int packed = may_pack && quant_traits_get(t)->gemm_packed && pack_has_layout(t);
        if (packed) {
            uint8_t *scratch = malloc(rb * PACK_ROWS);
            if (!scratch) return 1;
            pack_matrix(t, w, rb, n_out, scratch, 0);
            free(scratch);
        }
        /* generation: one token against the whole matrix, or slice by slice (multiples of 16 rows) */
        int64_t step = slice_mib > 0 ? (int64_t)(slice_mib * (1 << 20) / (double)rb) & ~(int64_t)15 : n_out;
        if (step < 16) step = 16;
        for (int i = -1; i < reps; i++) {
            double t0 = now();
            for (int64_t r0 = 0; r0 < n_out; r0 += step) {
                const mm_op op = {t, w + (size_t)r0 * rb, n_out - r0 < step ? n_out - r0 : step, y, n_out, NULL, packed};
                mm_mul_n(pool, &op, 1, n_in, x, 1, &sc);
            }
            if (i >= 0) v[i] = now() - t0;
        }
        qsort(v, (size_t)reps, sizeof(double), cmp);
        const double gen = v[reps / 2];
        /* prompt: 512 tokens against the first 1024 rows */
        const int64_t pr = n_out < 1024 ? n_out : 1024;
        for (int i = -1; i < reps && !gen_only; i++) {
            double t0 = now();
            const mm_op op = {t, w, pr, y, pr, NULL, packed};
            mm_mul_n(pool, &op, 1, n_in, x, (int)n_tok, &sc);
            if (i >= 0) v[i] = now() - t0;
        }
        if (!gen_only) qsort(v, (size_t)reps, sizeof(double), cmp);
        const double pp = gen_only ? 0 : v[reps / 2];
        printf("%-6s %12.2f %10.3f %14.1f %7s\n", names[k], (double)rb * (double)n_out / gen / 1e9, gen * 1e3,
               gen_only ? 0.0 : (double)pr * (double)n_in * (double)n_tok / pp / 1e9, packed ? "packed" : "rows");
        free(w);
        free(y);
    }
    tp_free(pool);
    free(x);
    free(row);
    free(v);
    free(sc.buf);
    return 0;
}
