/*
 * grammar.c - what a grammar costs a generated token (bench/grammar.sh runs it beside llama.cpp's).
 *
 *   grammar MODEL GRAMMAR_FILE "PREFIX IDS" [REPS]
 *
 * DESIGN
 * MODEL is read for its vocabulary only. The grammar (GBNF) is advanced by the prefix tokens, then each figure
 * is the median of REPS (default 20) over logits that are the same every time:
 *   mask_ms     gram_mask over the whole vocabulary: what a refused pick costs (llama.cpp's llama_sampler_apply
 *               of its grammar sampler does the same work: bench/grammar.sh compares the two);
 *   check_us    gram_allows of one token: what a pick the grammar takes costs;
 *   plain_us    df_sampler_sample without a grammar (top-k 40, temperature 0.8: the server's usual sampler);
 *   comply_us   df_sampler_sample with the grammar when the model's pick complies (logits favouring a token the
 *               grammar allows);
 *   refuse_us   df_sampler_sample with the grammar when it does not (favouring a refused token): mask and repick.
 * One JSON line; allowed is the number of tokens the mask allows (llama.cpp's must be the same). Built against
 * the library's internal headers (src/), like the tests:
 *   cc -O2 -Iinclude $(printf -- '-I%s ' src/[a-z]*) bench/grammar.c build/libdeltafin-internal.a \
 *      -lpcre2-8 -lutf8proc -luring -lcjson -lm -pthread -o build/grammar-bench
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deltafin.h"
#include "grammar.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = malloc(1 << 20);
    const size_t n = b ? fread(b, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (b) b[n] = 0;
    return b;
}

/* The time of one df_sampler_sample (median of reps), a fresh sampler each time, grammar g advanced by the
 * prefix (NULL: none), logits l. */
static double time_sample(df_sampler_params *sp, int nv, const df_grammar *g, const int32_t *pre, int np, const float *l,
                          int reps, double *buf) {
    for (int r = 0; r < reps; r++) {
        df_sampler *s = df_sampler_new(sp, nv);
        if (g) df_sampler_set_grammar(s, g);
        for (int i = 0; i < np && g; i++) df_sampler_accept(s, pre[i]);
        const double t0 = now_us();
        (void)df_sampler_sample(s, l);
        buf[r] = now_us() - t0;
        df_sampler_free(s);
    }
    return median(buf, reps);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: grammar MODEL GRAMMAR_FILE \"PREFIX IDS\" [REPS]\n");
        return 2;
    }
    const int reps = argc > 4 ? atoi(argv[4]) : 20;
    char err[512], *text = read_all(argv[2]);
    if (!text || reps < 1) return fprintf(stderr, "cannot read %s\n", argv[2]), 1;
    df_model_params mp = df_model_default_params();
    mp.vocab_only = 1;
    df_model *m;
    if (df_model_load(argv[1], &mp, &m, err, sizeof err) != DF_OK) return fprintf(stderr, "%s\n", err), 1;
    const int nv = df_n_vocab(m);
    int32_t *pre = malloc((size_t)strlen(argv[3]) * sizeof *pre + 4);
    int np = 0;
    for (char *p = argv[3], *e; *p; p = e) {
        const long v = strtol(p, &e, 10);
        if (e == p) break;
        pre[np++] = (int32_t)v;
    }
    df_grammar *g;
    const double tg0 = now_us();
    if (df_grammar_new(m, text, strlen(text), &g, err, sizeof err) != DF_OK) return fprintf(stderr, "%s\n", err), 1;
    const double first_ms = (now_us() - tg0) / 1e3; /* the vocabulary's sorting is paid by the first grammar */
    /* the internal state, for the mask and the check alone */
    char **piece = calloc((size_t)nv, sizeof *piece);
    int *len = calloc((size_t)nv, sizeof *len);
    uint8_t *eog = calloc((size_t)nv, 1), *mask = malloc((size_t)nv);
    char buf[1024];
    for (int i = 0; i < nv; i++) {
        int k = df_token_to_piece(m, i, buf, sizeof buf);
        if (k < 0 || k > (int)sizeof buf) k = 0;
        piece[i] = malloc((size_t)k + 1);
        memcpy(piece[i], buf, (size_t)k);
        len[i] = k;
        eog[i] = (uint8_t)df_token_is_eog(m, i);
    }
    gram_vocab *v = gram_vocab_new(nv, (const char *const *)piece, len, eog);
    gram *gr = gram_parse(text, strlen(text), err, sizeof err);
    gram_state *st = gram_state_new(gr, v);
    for (int i = 0; i < np; i++) gram_accept(st, pre[i]);
    double *t = malloc((size_t)reps * sizeof *t);
    int allowed = 0;
    for (int r = 0; r < reps; r++) {
        const double t0 = now_us();
        allowed = gram_mask(st, mask);
        t[r] = now_us() - t0;
    }
    const double mask_ms = median(t, reps) / 1e3;
    int ok_tok = -1, bad_tok = -1;
    for (int i = 0; i < nv && (ok_tok < 0 || bad_tok < 0); i++) {
        if (mask[i] && !eog[i] && ok_tok < 0) ok_tok = i;
        if (!mask[i] && bad_tok < 0) bad_tok = i;
    }
    for (int r = 0; r < reps; r++) {
        const double t0 = now_us();
        for (int k = 0; k < 100; k++) (void)gram_allows(st, ok_tok);
        t[r] = (now_us() - t0) / 100;
    }
    const double check_us = median(t, reps);
    float *l = malloc((size_t)nv * sizeof *l);
    for (int i = 0; i < nv; i++) l[i] = (float)((i * 7919) % 1000) / 100.0f;
    df_sampler_params sp = df_sampler_default_params();
    (void)time_sample(&sp, nv, NULL, pre, np, l, 2, t); /* warm: the allocator's first large blocks are fresh pages */
    const double plain = time_sample(&sp, nv, NULL, pre, np, l, reps, t);
    l[ok_tok] = 100.0f;
    const double comply = time_sample(&sp, nv, g, pre, np, l, reps, t);
    l[ok_tok] = 0.0f, l[bad_tok >= 0 ? bad_tok : 0] = 100.0f;
    const double refuse = time_sample(&sp, nv, g, pre, np, l, reps, t);
    printf("{\"engine\":\"deltafin\",\"n_vocab\":%d,\"prefix_tokens\":%d,\"mask_ms\":%.4f,\"allowed\":%d,"
           "\"check_us\":%.3f,\"plain_us\":%.1f,\"comply_us\":%.1f,\"refuse_us\":%.1f,\"first_grammar_ms\":%.1f}\n",
           nv, np, mask_ms, allowed, check_us, plain, comply, refuse, first_ms);
    gram_state_free(st);
    gram_free(gr);
    gram_vocab_free(v);
    for (int i = 0; i < nv; i++) free(piece[i]);
    free(piece), free(len), free(eog), free(mask), free(l), free(t), free(pre), free(text);
    df_grammar_free(g);
    df_model_free(m);
    return 0;
}
