/*
 * logitcmp.c - how close are an engine's logits to the truth: mean KL
 * divergence and top-1 agreement over positions.
 *
 *   logitcmp --vocab N TRUTH.f32 ENGINE.f32 [ENGINE2.f32 ...]
 *
 * Each file holds raw little-endian float32 logits, positions x N, row-major
 * (what `deltafin logits --out` and the reference program's `logits --out`
 * write). For every position, with p = softmax(truth) and q = softmax(engine):
 * KL(p || q) = sum p (log p - log q), in nats, computed from log-softmax in
 * double precision; top-1 agrees when both argmaxes are the same id. Prints
 * one JSON line: {"positions":P,"vocab":N,"files":[{"file":...,"mean_kl":...,
 * "max_kl":...,"top1":...,"rel":...,"argmax_bad":...,"near_ties":...},...]}, where
 * rel is max |engine - truth| / max |truth| over all logits, argmax_bad the
 * positions whose argmax differs, and near_ties those of them where the
 * engine's pick is within 1e-4 of the truth's best (relative to the row's
 * largest magnitude): a tie that any rounding may break, and outliers the
 * positions whose largest difference is over 1e-3 of the largest truth
 * logit (first_outlier the first of them, -1 if none), with rel2 the largest
 * relative difference over the other positions (a float-level tie inside
 * the model, such as a sparse attention's k-th and (k+1)-th scores, moves one
 * position). kl_trim is the mean KL without the worst 2% of positions
 * (rounded up): what tests/truth.sh pools for Mixture-of-Experts models,
 * where a router flip moves a position by nats either way. Used by
 * tests/truth.sh (Deltafin at least as close to the float truth as
 * llama.cpp) and tests/sweep.sh (f32 models against llama.cpp).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void die(const char *a, const char *b) {
    fprintf(stderr, "logitcmp: %s%s\n", a, b ? b : "");
    exit(1);
}

static float *load(const char *path, long vocab, long *positions) {
    struct stat st;
    if (stat(path, &st) != 0) die("cannot open ", path);
    const long long bytes = (long long)st.st_size, row = 4LL * vocab;
    if (bytes == 0 || bytes % row) die("size is not a whole number of vocabulary rows: ", path);
    float *v = malloc((size_t)bytes);
    FILE *f = fopen(path, "rb");
    if (!v || !f) die("cannot read ", path);
    if (fread(v, 1, (size_t)bytes, f) != (size_t)bytes) die("short read: ", path);
    fclose(f);
    *positions = (long)(bytes / row);
    for (long long i = 0; i < bytes / 4; i++)
        if (!isfinite(v[i])) die("a logit is not finite in ", path);
    return v;
}

/* log-softmax of x (n) into out, in double */
static void log_softmax(const float *x, long n, double *out) {
    double mx = x[0], sum = 0;
    for (long i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (long i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    const double lse = mx + log(sum);
    for (long i = 0; i < n; i++) out[i] = (double)x[i] - lse;
}

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The mean of kl[0..n) without its ceil(2% of n) largest (sorts kl). */
static double trimmed_mean(double *kl, long n) {
    qsort(kl, (size_t)n, sizeof *kl, by_value);
    const long keep = n - (n * 2 + 99) / 100;
    double s = 0;
    for (long i = 0; i < keep; i++) s += kl[i];
    return keep > 0 ? s / (double)keep : 0;
}

static long argmax(const float *x, long n) {
    long b = 0;
    for (long i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

int main(int argc, char **argv) {
    long vocab = 0;
    int first = 1;
    if (argc > 2 && !strcmp(argv[1], "--vocab")) {
        vocab = strtol(argv[2], NULL, 10);
        first = 3;
    }
    if (vocab <= 0 || argc - first < 2) die("usage: logitcmp --vocab N TRUTH.f32 ENGINE.f32 [ENGINE2.f32 ...]", NULL);
    long pt;
    float *truth = load(argv[first], vocab, &pt);
    double *lp = malloc(sizeof(double) * (size_t)vocab), *lq = malloc(sizeof(double) * (size_t)vocab);
    if (!lp || !lq) die("out of memory", NULL);
    printf("{\"positions\":%ld,\"vocab\":%ld,\"files\":[", pt, vocab);
    for (int a = first + 1; a < argc; a++) {
        long pe;
        float *eng = load(argv[a], vocab, &pe);
        if (pe != pt) die("position count differs from the truth's: ", argv[a]);
        double kl_sum = 0, kl_max = 0, dmax = 0, rmax = 0;
        long agree = 0, ties = 0;
        double *dpos = malloc(sizeof(double) * (size_t)pt), *kpos = malloc(sizeof(double) * (size_t)pt);
        if (!dpos || !kpos) die("out of memory", NULL);
        for (long p = 0; p < pt; p++) {
            const float *t = truth + p * vocab, *e = eng + p * vocab;
            log_softmax(t, vocab, lp);
            log_softmax(e, vocab, lq);
            double kl = 0;
            for (long i = 0; i < vocab; i++) kl += exp(lp[i]) * (lp[i] - lq[i]);
            kl = kl > 0 ? kl : 0; /* rounding can leave -1e-17 */
            kpos[p] = kl;
            kl_sum += kl;
            kl_max = kl > kl_max ? kl : kl_max;
            double row = 0, drow = 0;
            for (long i = 0; i < vocab; i++) {
                const double r = fabs((double)t[i]), d = fabs((double)e[i] - (double)t[i]);
                row = r > row ? r : row;
                drow = d > drow ? d : drow;
            }
            dpos[p] = drow;
            dmax = drow > dmax ? drow : dmax;
            rmax = row > rmax ? row : rmax;
            const long at = argmax(t, vocab), ae = argmax(e, vocab);
            agree += at == ae;
            ties += at != ae && (double)t[at] - (double)t[ae] <= 1e-4 * row;
        }
        const double den = rmax > 0 ? rmax : 1.0;
        long outliers = 0, first_out = -1;
        double rest = 0;
        for (long p = 0; p < pt; p++) {
            if (dpos[p] / den > 1e-3) {
                if (!outliers++) first_out = p;
            } else {
                rest = dpos[p] / den > rest ? dpos[p] / den : rest;
            }
        }
        const double trim = trimmed_mean(kpos, pt);
        free(dpos);
        free(kpos);
        printf("%s{\"file\":\"%s\",\"mean_kl\":%.9g,\"max_kl\":%.9g,\"kl_trim\":%.9g,\"top1\":%.6f,\"rel\":%.3e,"
               "\"argmax_bad\":%ld,\"near_ties\":%ld,\"outliers\":%ld,\"first_outlier\":%ld,\"rel2\":%.3e}",
               a > first + 1 ? "," : "", argv[a], kl_sum / (double)pt, kl_max, trim, (double)agree / (double)pt,
               dmax / den, pt - agree, ties, outliers, first_out, rest);
        free(eng);
    }
    printf("]}\n");
    free(truth);
    free(lp);
    free(lq);
    return 0;
}
