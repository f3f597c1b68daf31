/*
 * deltafin - the command-line interface.
 *
 *   deltafin run      -m MODEL -p PROMPT [-n N] [-t T] [-c CTX] [--temp T] [--top-k K] [--top-p P]
 *                     [--min-p P] [--repeat-penalty R] [--seed S] [--kv f16|f32] [--no-mmap] [--ignore-eos]
 *   deltafin info     -m MODEL
 *   deltafin tokenize -m MODEL -p TEXT [--pieces] [--no-bos]
 *   deltafin logits   -m MODEL (-p TEXT | --tokens "1 2 3") [--top K] [--out FILE] [-t T] [--kv f16|f32]
 *
 * Flags follow llama.cpp's spelling. Text goes to stdout; statistics and
 * errors to stderr. Exit status: 0 ok, 1 runtime error, 2 usage error.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deltafin.h"
#include "gguf.h"
#include "quant.h"
#include "util.h"
#include "wstore.h"

typedef struct {
    const char *model, *prompt, *tokens, *out, *trace, *hot;
    uint64_t mem;
    int io_threads, io_engine, progress;
    double probe_secs;
    int n_predict, threads, ctx, top, pieces, no_bos, no_mmap, ignore_eos, kv_f32, json, n_prompt, reps;
    df_sampler_params sp;
} opts;

static void usage(void) {
    fprintf(stderr,
            "usage: deltafin COMMAND [options]\n"
            "  run       -m MODEL -p PROMPT [-n N] [-t THREADS] [-c CTX] [--temp T] [--top-k K] [--top-p P]\n"
            "            [--min-p P] [--repeat-penalty R] [--repeat-last-n N] [--seed S] [--kv f16|f32]\n"
            "            [--no-mmap] [--ignore-eos] [--trace-experts FILE] [--mem SIZE] [--io-threads N]\n"
            "            [--io pread|uring|auto] [--hot FILE|none] [--progress]\n"
            "  plan      -m MODEL --mem SIZE [-c CTX] [--json] [--probe-seconds S] [--io-threads N] [--io ENGINE]\n"
            "            will it fit, what streams, how fast (measures the disk for S seconds, default 5)\n"
            "  info      -m MODEL\n"
            "  tokenize  -m MODEL -p TEXT [--pieces] [--no-bos]\n"
            "  logits    -m MODEL (-p TEXT | --tokens \"1 2 3\") [--top K] [--out FILE] [-t THREADS] [--kv f16|f32]\n"
            "  bench     -m MODEL [-p 512] [-n 128] [-t THREADS] [-r REPS] [--json]\n");
    exit(2);
}

static void fail(const char *msg) {
    fprintf(stderr, "deltafin: %s\n", msg);
    exit(1);
}

static long parse_long(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "deltafin: %s expects an integer in [%ld, %ld], got '%s'\n", flag, lo, hi, v);
        exit(2);
    }
    return x;
}

static float parse_float(const char *flag, const char *v) {
    char *end;
    float x = strtof(v, &end);
    if (*end || end == v || x != x) {
        fprintf(stderr, "deltafin: %s expects a number, got '%s'\n", flag, v);
        exit(2);
    }
    return x;
}

static void parse(int argc, char **argv, opts *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
    o->probe_secs = 5.0;
    o->top = 5;
    o->sp = df_sampler_default_params();
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--pieces")) { o->pieces = 1; continue; }
        if (!strcmp(a, "--no-bos")) { o->no_bos = 1; continue; }
        if (!strcmp(a, "--no-mmap")) { o->no_mmap = 1; continue; }
        if (!strcmp(a, "--ignore-eos")) { o->ignore_eos = 1; continue; }
        if (!strcmp(a, "--json")) { o->json = 1; continue; }
        if (!strcmp(a, "--progress")) { o->progress = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage();
        if (i + 1 >= argc) {
            fprintf(stderr, "deltafin: %s needs a value\n", a);
            exit(2);
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "--tokens")) o->tokens = v;
        else if (!strcmp(a, "--out")) o->out = v;
        else if (!strcmp(a, "--trace-experts")) o->trace = v;
        else if (!strcmp(a, "--hot")) o->hot = v;
        else if (!strcmp(a, "--io-threads")) o->io_threads = (int)parse_long(a, v, 1, 256);
        else if (!strcmp(a, "--io")) {
            if (!strcmp(v, "pread")) o->io_engine = DF_IO_PREAD;
            else if (!strcmp(v, "uring") || !strcmp(v, "io_uring")) o->io_engine = DF_IO_URING;
            else if (!strcmp(v, "auto")) o->io_engine = DF_IO_AUTO;
            else {
                fprintf(stderr, "deltafin: --io takes pread, uring or auto, not '%s'\n", v);
                exit(2);
            }
        }
        else if (!strcmp(a, "--mem")) {
            o->mem = ws_parse_size(v);
            if (!o->mem) {
                fprintf(stderr, "deltafin: --mem expects a size like 6G, 512M or 1.5GiB, got '%s'\n", v);
                exit(2);
            }
        }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) o->n_predict = (int)parse_long(a, v, 0, 1 << 24);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) o->threads = (int)parse_long(a, v, 1, 512);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) o->ctx = (int)parse_long(a, v, 0, 1 << 24);
        else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) o->reps = (int)parse_long(a, v, 1, 1000);
        else if (!strcmp(a, "--top")) o->top = (int)parse_long(a, v, 1, 1 << 24);
        else if (!strcmp(a, "--temp")) o->sp.temp = parse_float(a, v);
        else if (!strcmp(a, "--probe-seconds")) {
            o->probe_secs = parse_float(a, v);
            if (!(o->probe_secs >= 0.1 && o->probe_secs <= 600)) {
                fprintf(stderr, "deltafin: --probe-seconds expects 0.1 to 600\n");
                exit(2);
            }
        }
        else if (!strcmp(a, "--top-k")) o->sp.top_k = (int)parse_long(a, v, 0, 1 << 24);
        else if (!strcmp(a, "--top-p")) o->sp.top_p = parse_float(a, v);
        else if (!strcmp(a, "--min-p")) o->sp.min_p = parse_float(a, v);
        else if (!strcmp(a, "--repeat-penalty")) o->sp.repeat_penalty = parse_float(a, v);
        else if (!strcmp(a, "--repeat-last-n")) o->sp.repeat_last_n = (int)parse_long(a, v, 0, 1 << 20);
        else if (!strcmp(a, "--seed") || !strcmp(a, "-s")) o->sp.seed = (uint64_t)parse_long(a, v, 0, 0x7fffffffL);
        else if (!strcmp(a, "--kv")) {
            if (!strcmp(v, "f32")) o->kv_f32 = 1;
            else if (strcmp(v, "f16")) { fprintf(stderr, "deltafin: --kv is f16 or f32\n"); exit(2); }
        } else {
            fprintf(stderr, "deltafin: unknown option '%s'\n", a);
            exit(2);
        }
    }
    if (!o->model) {
        fprintf(stderr, "deltafin: -m MODEL is required\n");
        exit(2);
    }
}

static df_model_params model_params(const opts *o) {
    df_model_params mp = df_model_default_params();
    mp.n_threads = o->threads;
    mp.use_mmap = !o->no_mmap;
    mp.mem_budget = o->mem;
    mp.n_ctx = o->ctx;
    mp.kv_type = o->kv_f32 ? DF_KV_F32 : DF_KV_F16;
    mp.io_threads = o->io_threads;
    mp.io_engine = o->io_engine;
    mp.hot_file = o->hot && !strcmp(o->hot, "none") ? "" : o->hot;
    return mp;
}

static void print_plan(const df_plan *p, FILE *f) {
    const double G = 1 << 30, M = 1 << 20;
    fprintf(f, "plan: budget %.2f GiB: weights in memory %.2f GiB, KV cache and scratch %.2f GiB, overhead %.2f GiB\n",
            p->budget / G, p->resident_bytes / G, p->session_bytes / G, p->overhead_bytes / G);
    if (p->n_experts_total)
        fprintf(f, "plan: expert cache %d slots of %.2f MiB = %.2f GiB (%.1f%% of %d routed experts)\n",
                p->n_expert_slots, p->expert_slot_bytes / M, p->n_expert_slots * (double)p->expert_slot_bytes / G,
                100.0 * p->n_expert_slots / p->n_experts_total, p->n_experts_total);
    if (p->n_dense_streamed)
        fprintf(f, "plan: %d of %d layers stream their dense weights through two %.1f MiB buffers\n",
                p->n_dense_streamed, p->n_layer, p->dense_slot_bytes / M);
    else
        fprintf(f, "plan: all dense weights (embeddings, attention, norms, routers, shared experts) stay in memory\n");
    fprintf(f, "plan: minimum budget for this model and context: %.2f GiB\n", p->minimum / G);
}

static df_model *load(const opts *o, double *secs) {
    char err[1024];
    df_model_params mp = model_params(o);
    df_model *m;
    double t0 = df_time();
    if (o->mem) {
        df_plan plan;
        if (df_model_plan(o->model, &mp, &plan, err, sizeof err) != 0) fail(err);
        print_plan(&plan, stderr);
    }
    if (df_model_load(o->model, &mp, &m, err, sizeof err) != 0) fail(err);
    if (secs) *secs = df_time() - t0;
    return m;
}

/* After a run with a budget: what the disk and the cache did. */
static void print_io_report(df_model *m, int tokens, double seconds) {
    df_io_stats st;
    df_model_io_stats(m, &st);
    if (!st.streaming) return;
    const double M = 1 << 20;
    const uint64_t looks = st.hits + st.misses;
    if (*st.io_note) fprintf(stderr, "io: %s; reading with %s\n", st.io_note, st.io_engine);
    fprintf(stderr, "io: engine %s, %d concurrent reads\n", st.io_engine, st.io_threads);
    fprintf(stderr, "io: %.1f MiB read from disk, %.2f MiB per token, %.1f MiB/s over the run\n", st.bytes_read / M,
            tokens ? st.bytes_read / M / tokens : 0.0, seconds > 0 ? st.bytes_read / M / seconds : 0.0);
    fprintf(stderr, "io: expert cache hit rate %.1f%% (%llu of %llu), prefetched %llu, of which used %llu\n",
            looks ? 100.0 * st.hits / looks : 0.0, (unsigned long long)st.hits, (unsigned long long)looks,
            (unsigned long long)st.prefetch_issued, (unsigned long long)st.prefetch_used);
    const uint64_t wanted = st.prefetch_used + st.unguessed; /* experts that had to come from disk */
    fprintf(stderr, "io: lookahead precision %.0f%% (guesses used), recall %.0f%% (of the experts needed from disk, "
            "guessed ahead)\n", st.prefetch_issued ? 100.0 * st.prefetch_used / st.prefetch_issued : 0.0,
            wanted ? 100.0 * st.prefetch_used / wanted : 0.0);
    fprintf(stderr, "io: waiting for the disk %.2f s of %.2f s (%.0f%%), compute %.2f s\n", st.wait_seconds, seconds,
            seconds > 0 ? 100.0 * st.wait_seconds / seconds : 0.0, seconds - st.wait_seconds);
}

static int cmd_plan(const opts *o) {
    if (!o->mem) {
        fprintf(stderr, "deltafin: plan needs --mem SIZE\n");
        exit(2);
    }
    char err[1024];
    df_model_params mp = model_params(o);
    df_plan p;
    if (df_model_plan(o->model, &mp, &p, err, sizeof err) != 0) fail(err);
    const int fits = p.budget >= p.minimum;
    /* read the way decoding will: random tokens' experts, layer by layer, through
     * the weight store itself; a plain read test when nothing would stream */
    const int readers = o->io_threads > 0 ? o->io_threads : 8;
    double disk = fits ? df_model_probe_disk(o->model, &mp, o->probe_secs, err, sizeof err) : 0.0;
    const int shaped = disk > 0;
    if (disk == 0) disk = df_probe_disk(o->model, o->probe_secs, readers, 0, err, sizeof err);
    if (disk < 0) fail(err);
    const double mem = df_probe_memory(1.0);
    /* per token: routed experts missing from the cache come from disk (uniform
     * routing: the hit rate is the cached fraction), streamed dense layers are
     * read every token, and every active weight is read from memory once */
    const double hit = p.n_experts_total ? (double)p.n_expert_slots / p.n_experts_total : 1.0;
    const double expert_one = (double)p.expert_slot_bytes;
    const double experts_tok = (double)p.n_moe_layers * p.n_expert_used * expert_one;
    const double disk_tok = experts_tok * (1.0 - hit) + (double)p.n_dense_streamed * p.dense_layer_bytes;
    const double mem_tok = (double)p.dense_bytes + experts_tok;
    /* reads overlap compute (the lookahead queues the next layer's likely
     * experts while this one computes), so the slower of the two sets the pace */
    const double t_disk = disk > 0 ? disk_tok / disk : 0, t_mem = mem > 0 ? mem_tok / mem : 0;
    const double t_tok = t_disk > t_mem ? t_disk : t_mem;
    const double tps = fits && t_tok > 0 ? 1.0 / t_tok : 0.0;
    if (o->json) {
        printf("{\"fits\":%s,\"budget\":%llu,\"minimum\":%llu,\"resident_bytes\":%llu,\"session_bytes\":%llu,"
               "\"expert_slots\":%d,\"experts_total\":%d,\"dense_layers_streamed\":%d,\"disk_bytes_per_s\":%.0f,"
               "\"memory_bytes_per_s\":%.0f,\"expected_hit_rate\":%.4f,\"disk_bytes_per_token\":%.0f,"
               "\"memory_bytes_per_token\":%.0f,\"predicted_tokens_per_s\":%.4f}\n",
               fits ? "true" : "false", (unsigned long long)p.budget, (unsigned long long)p.minimum,
               (unsigned long long)p.resident_bytes, (unsigned long long)p.session_bytes, p.n_expert_slots,
               p.n_experts_total, p.n_dense_streamed, disk, mem, hit, disk_tok, mem_tok, tps);
        return fits ? 0 : 1;
    }
    print_plan(&p, stdout);
    if (!fits) {
        printf("plan: does NOT fit: %.2f GiB is below the minimum of %.2f GiB\n", p.budget / (double)(1 << 30),
               p.minimum / (double)(1 << 30));
        return 1;
    }
    if (shaped)
        printf("machine: disk %.0f MiB/s (%.0f s of decode-shaped reads of this model, %d concurrent), memory %.1f GiB/s\n",
               disk / (1 << 20), o->probe_secs, readers, mem / (1 << 30));
    else
        printf("machine: disk %.0f MiB/s (%d concurrent 4 MiB reads of this file), memory %.1f GiB/s\n", disk / (1 << 20),
               readers, mem / (1 << 30));
    printf("per token: %.2f MiB from disk (expected cache hit rate %.1f%%), %.2f MiB from memory\n", disk_tok / (1 << 20),
           100.0 * hit, mem_tok / (1 << 20));
    printf("predicted: %.2f tokens/s (%s-bound: disk %.3f s, memory %.3f s per token)\n", tps,
           t_disk >= t_mem ? "disk" : "memory", t_disk, t_mem);
    return 0;
}

static df_session *session(df_model *m, const opts *o) {
    char err[1024];
    df_session_params sp = df_session_default_params();
    sp.n_ctx = o->ctx;
    sp.kv_type = o->kv_f32 ? DF_KV_F32 : DF_KV_F16;
    df_session *s;
    if (df_session_new(m, &sp, &s, err, sizeof err) != 0) fail(err);
    if (o->trace && df_session_trace_experts(s, o->trace, err, sizeof err) != 0) fail(err);
    return s;
}

/* Tokenize the prompt (adding BOS as the model says unless --no-bos). Caller frees. */
static int32_t *tokenize(df_model *m, const opts *o, const char *text, int *n) {
    char err[512];
    int need = 0;
    size_t len = strlen(text);
    if (df_tokenize(m, text, len, !o->no_bos, 1, NULL, 0, &need, err, sizeof err) != 0 && need == 0) fail(err);
    int32_t *ids = malloc((size_t)(need + 1) * sizeof(int32_t));
    if (!ids) fail("out of memory");
    if (df_tokenize(m, text, len, !o->no_bos, 1, ids, need + 1, n, err, sizeof err) != 0) fail(err);
    return ids;
}

static int32_t *parse_tokens(const char *s, int *n) {
    int cap = 16, k = 0;
    int32_t *ids = malloc((size_t)cap * sizeof(int32_t));
    if (!ids) fail("out of memory");
    while (*s) {
        while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n') s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) fail("--tokens expects non-negative integers");
        if (k == cap) {
            cap *= 2;
            int32_t *nb = realloc(ids, (size_t)cap * sizeof(int32_t));
            if (!nb) fail("out of memory");
            ids = nb;
        }
        ids[k++] = (int32_t)v;
        s = end;
    }
    *n = k;
    return ids;
}

static int cmd_info(const opts *o) {
    char err[1024];
    gguf_ctx *g;
    if (gguf_open(o->model, &g, err, sizeof err) != 0) fail(err);
    quant_init();
    const char *arch = gguf_get_str(g, "general.architecture");
    printf("file:          %s (%d file%s, GGUF v%d)\n", o->model, g->n_files, g->n_files > 1 ? "s" : "", g->version);
    printf("architecture:  %s\n", arch ? arch : "(missing)");
    const char *name = gguf_get_str(g, "general.name");
    if (name) printf("name:          %s\n", name);
    static const char *keys[] = {"context_length", "embedding_length", "block_count", "feed_forward_length",
                                 "attention.head_count", "attention.head_count_kv", "attention.key_length",
                                 "attention.value_length", "rope.dimension_count", "rope.freq_base",
                                 "attention.layer_norm_rms_epsilon", "rope.scaling.type", "rope.scaling.factor",
                                 "expert_count", "expert_used_count"};
    for (size_t i = 0; arch && i < sizeof keys / sizeof keys[0]; i++) {
        char k[160];
        snprintf(k, sizeof k, "%s.%s", arch, keys[i]);
        const gguf_kv *kv = gguf_find(g, k);
        if (!kv) continue;
        if (kv->type == GGUF_T_STRING) printf("  %-34s %s\n", keys[i], kv->str);
        else if (kv->type == GGUF_T_F32 || kv->type == GGUF_T_F64) printf("  %-34s %g\n", keys[i], kv->v.f);
        else if (kv->type == GGUF_T_ARRAY) printf("  %-34s (array of %" PRIu64 ")\n", keys[i], kv->arr_n);
        else printf("  %-34s %" PRId64 "\n", keys[i], kv->v.i);
    }
    uint64_t params = 0, bytes = 0, by_type_bytes[DF_TYPE_COUNT] = {0}, by_type_n[DF_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        params += t->n_elements;
        bytes += t->nbytes;
        by_type_bytes[t->type] += t->nbytes;
        by_type_n[t->type]++;
    }
    printf("tensors:       %" PRIu64 "\n", g->n_tensors);
    printf("parameters:    %" PRIu64 " (%.3f B)\n", params, (double)params / 1e9);
    printf("tensor bytes:  %" PRIu64 " (%.2f GiB, %.2f bits/weight)\n", bytes, (double)bytes / (1 << 30),
           params ? 8.0 * (double)bytes / (double)params : 0.0);
    for (int t = 0; t < DF_TYPE_COUNT; t++) {
        if (!by_type_n[t]) continue;
        const quant_traits *q = quant_traits_get(t);
        printf("  %-8s %5" PRIu64 " tensors %14" PRIu64 " bytes  %6.4g bits/weight%s\n", q->name, by_type_n[t],
               by_type_bytes[t], 8.0 * (double)q->type_size / q->blck, q->supported ? "" : "  (unsupported by Deltafin)");
    }
    /* experts: bytes per expert by tensor type, active parameters */
    uint64_t n_exp = 0, exp_params = 0, per_expert_bytes[DF_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        if (!strstr(t->name, "_exps.") || t->ne[2] < 1) continue;
        n_exp = (uint64_t)t->ne[2];
        exp_params += t->n_elements;
        per_expert_bytes[t->type] += t->nbytes / (uint64_t)t->ne[2];
    }
    if (n_exp > 0 && arch) {
        char k[160];
        snprintf(k, sizeof k, "%s.expert_used_count", arch);
        uint64_t used = 0, n_moe_layers = 0;
        const gguf_kv *kv = gguf_find(g, k);
        if (kv && kv->type != GGUF_T_ARRAY && kv->type != GGUF_T_STRING) used = kv->v.u;
        for (uint64_t i = 0; i < g->n_tensors; i++)
            if (strstr(g->tensors[i].name, "ffn_down_exps.")) n_moe_layers++;
        uint64_t active = params - exp_params + (used <= n_exp ? exp_params / n_exp * used : 0);
        printf("experts:       %" PRIu64 " per layer in %" PRIu64 " layers, %" PRIu64 " used per token\n", n_exp,
               n_moe_layers, used);
        printf("active params: %" PRIu64 " per token (%.3f B, %.1f%% of all)\n", active, (double)active / 1e9,
               params ? 100.0 * (double)active / (double)params : 0.0);
        printf("one expert:    ");
        uint64_t tot = 0;
        for (int t = 0; t < DF_TYPE_COUNT; t++)
            if (per_expert_bytes[t]) {
                printf("%s%" PRIu64 " bytes %s", tot ? ", " : "", per_expert_bytes[t] / (n_moe_layers ? n_moe_layers : 1),
                       quant_traits_get(t)->name);
                tot += per_expert_bytes[t];
            }
        printf(" (%.2f MiB per layer; %.2f MiB read per token if nothing is cached)\n",
               (double)tot / (double)(n_moe_layers ? n_moe_layers : 1) / (1 << 20), (double)tot * (double)used / (1 << 20));
    }
    const char *tm = gguf_get_str(g, "tokenizer.ggml.model");
    const char *pre = gguf_get_str(g, "tokenizer.ggml.pre");
    const gguf_kv *toks = gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_T_STRING);
    const gguf_kv *merges = gguf_get_arr(g, "tokenizer.ggml.merges", GGUF_T_STRING);
    printf("tokenizer:     %s%s%s, %" PRIu64 " tokens, %" PRIu64 " merges\n", tm ? tm : "(none)", pre ? ", pre=" : "",
           pre ? pre : "", toks ? toks->arr_n : 0, merges ? merges->arr_n : 0);
    gguf_close(g);
    return 0;
}

static int cmd_tokenize(const opts *o) {
    if (!o->prompt) usage();
    df_model *m = load(o, NULL);
    int n;
    int32_t *ids = tokenize(m, o, o->prompt, &n);
    for (int i = 0; i < n; i++) {
        if (o->pieces) {
            char buf[256];
            int len = df_token_to_piece(m, ids[i], buf, sizeof buf);
            if (len < 0) len = 0;
            if (len > (int)sizeof buf) len = (int)sizeof buf;
            printf("%d\t'%.*s'\n", ids[i], len, buf);
        } else {
            printf("%d\n", ids[i]);
        }
    }
    free(ids);
    df_model_free(m);
    return 0;
}

typedef struct { float v; int id; } scored;
static int cmp_scored(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id - y->id;
}

static int cmd_logits(const opts *o) {
    if (!!o->prompt == !!o->tokens) usage();
    df_model *m = load(o, NULL);
    int n;
    int32_t *ids = o->tokens ? parse_tokens(o->tokens, &n) : tokenize(m, o, o->prompt, &n);
    if (n == 0) fail("no tokens");
    opts o2 = *o;
    if (o2.ctx == 0) o2.ctx = n;
    df_session *s = session(m, &o2);
    const int nv = df_n_vocab(m);
    float *logits = malloc((size_t)n * (size_t)nv * sizeof(float));
    scored *sc = malloc((size_t)nv * sizeof(scored));
    if (!logits || !sc) fail("out of memory");
    char err[512];
    if (df_decode(s, ids, n, logits, 1, err, sizeof err) != 0) fail(err);
    for (int p = 0; p < n; p++) {
        for (int i = 0; i < nv; i++) sc[i] = (scored){logits[(size_t)p * nv + i], i};
        qsort(sc, (size_t)nv, sizeof(scored), cmp_scored);
        printf("%d", p);
        for (int k = 0; k < o->top && k < nv; k++) printf(" %d:%.6f", sc[k].id, sc[k].v);
        printf("\n");
    }
    if (o->out) {
        FILE *f = fopen(o->out, "wb");
        if (!f) fail(strerror(errno));
        size_t cnt = (size_t)n * (size_t)nv;
        if (fwrite(logits, sizeof(float), cnt, f) != cnt || fclose(f) != 0) fail("writing --out failed");
    }
    free(sc);
    free(logits);
    free(ids);
    df_session_free(s);
    df_model_free(m);
    return 0;
}

/* Print a token's bytes. */
static void emit(df_model *m, int32_t id) {
    char buf[256];
    int len = df_token_to_piece(m, id, buf, sizeof buf);
    if (len > (int)sizeof buf) len = (int)sizeof buf;
    if (len > 0) fwrite(buf, 1, (size_t)len, stdout);
    fflush(stdout);
}

static int cmd_run(const opts *o) {
    if (!o->prompt) usage();
    double t_load;
    df_model *m = load(o, &t_load);
    df_session *s = session(m, o);
    int n;
    int32_t *ids = tokenize(m, o, o->prompt, &n);
    if (n == 0) fail("the prompt produced no tokens");
    if (n >= df_session_n_ctx(s)) fail("the prompt does not fit in the context (use -c)");
    const int nv = df_n_vocab(m);
    float *logits = malloc((size_t)nv * sizeof(float));
    df_sampler *smp = df_sampler_new(&o->sp, nv);
    if (!logits || !smp) fail("out of memory");
    char err[512];
    fwrite(o->prompt, 1, strlen(o->prompt), stdout);
    fflush(stdout);
    double t0 = df_time();
    if (df_decode(s, ids, n, logits, 0, err, sizeof err) != 0) fail(err);
    double t_prompt = df_time() - t0;
    for (int i = 0; i < n; i++) df_sampler_accept(smp, ids[i]);
    int generated = 0;
    t0 = df_time();
    while (generated < o->n_predict) {
        int32_t tok = df_sampler_sample(smp, logits);
        df_sampler_accept(smp, tok);
        if (!o->ignore_eos && df_token_is_eog(m, tok)) break;
        emit(m, tok);
        generated++;
        if (o->progress && generated % 16 == 0) {
            const double el = df_time() - t0, tps = generated / (el > 0 ? el : 1e-9);
            fprintf(stderr, "\r[%d/%d tokens, %.2f tokens/s, ETA %.0f s]  ", generated, o->n_predict, tps,
                    (o->n_predict - generated) / (tps > 0 ? tps : 1e-9));
        }
        if (generated == o->n_predict) break;
        if (df_session_pos(s) >= df_session_n_ctx(s)) {
            fprintf(stderr, "\ndeltafin: context full after %d tokens\n", df_session_pos(s));
            break;
        }
        if (df_decode(s, &tok, 1, logits, 0, err, sizeof err) != 0) fail(err);
    }
    double t_gen = df_time() - t0;
    printf("\n");
    fprintf(stderr, "\nload:       %8.3f s\n", t_load);
    fprintf(stderr, "prompt:     %8d tokens %8.3f s %10.2f tokens/s\n", n, t_prompt, n / (t_prompt > 0 ? t_prompt : 1e-9));
    fprintf(stderr, "generation: %8d tokens %8.3f s %10.2f tokens/s\n", generated, t_gen,
            generated / (t_gen > 0 ? t_gen : 1e-9));
    df_model_info info;
    df_model_get_info(m, &info);
    fprintf(stderr, "peak memory: %.1f MiB (RSS), threads: %d, isa: %s\n", (double)df_peak_rss() / (1 << 20),
            info.n_threads, df_isa());
    print_io_report(m, n + generated, t_prompt + t_gen);
    df_sampler_free(smp);
    free(logits);
    free(ids);
    df_session_free(s);
    df_model_free(m);
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : (x > y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* llama-bench's two measurements: prompt processing of p tokens in one batch,
 * and generation of n tokens one at a time, each from an empty cache; the
 * median over the repetitions after one warm-up round. */
static int cmd_bench(opts *o, int n_prompt) {
    o->ctx = n_prompt + o->n_predict + 1;
    df_model *m = load(o, NULL);
    const int nv = df_n_vocab(m), reps = o->reps > 0 ? o->reps : 5, ng = o->n_predict;
    char err[512];
    df_session_params sp = df_session_default_params();
    sp.n_ctx = n_prompt + ng + 1;
    sp.n_batch = n_prompt > 0 ? n_prompt : 1;
    sp.kv_type = o->kv_f32 ? DF_KV_F32 : DF_KV_F16;
    df_session *s;
    if (df_session_new(m, &sp, &s, err, sizeof err) != 0) fail(err);
    int32_t *toks = malloc((size_t)(n_prompt + 1) * sizeof(int32_t));
    float *logits = malloc((size_t)nv * sizeof(float));
    double *pp = calloc((size_t)reps, sizeof(double)), *tg = calloc((size_t)reps, sizeof(double));
    if (!toks || !logits || !pp || !tg) fail("out of memory");
    uint64_t x = 42;
    for (int i = 0; i < n_prompt + 1; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (int32_t)((x >> 33) % (uint64_t)nv);
    }
    df_io_stats io0, io1;
    double tg_secs = 0;
    memset(&io0, 0, sizeof io0);
    memset(&io1, 0, sizeof io1);
    for (int r = -1; r < reps; r++) {
        if (n_prompt > 0) {
            df_session_truncate(s, 0);
            double t0 = df_time();
            if (df_decode(s, toks, n_prompt, logits, 0, err, sizeof err) != 0) fail(err);
            if (r >= 0) pp[r] = n_prompt / (df_time() - t0);
        }
        if (ng > 0) {
            df_session_truncate(s, 0);
            df_model_io_stats(m, &io0);
            double t0 = df_time();
            for (int i = 0; i < ng; i++)
                if (df_decode(s, &toks[i % (n_prompt + 1)], 1, logits, 0, err, sizeof err) != 0) fail(err);
            tg_secs = df_time() - t0;
            if (r >= 0) tg[r] = ng / tg_secs;
            df_model_io_stats(m, &io1);
        }
    }
    df_model_info info;
    df_model_get_info(m, &info);
    double pp_m = n_prompt > 0 ? median(pp, reps) : 0, tg_m = ng > 0 ? median(tg, reps) : 0;
    int threads = info.n_threads;
    /* the last generation round's disk traffic (streaming only) */
    const double rd = (double)(io1.bytes_read - io0.bytes_read), looks = (double)(io1.hits + io1.misses - io0.hits - io0.misses);
    if (o->json)
        printf("{\"pp_tokens\":%d,\"pp_tps\":%.2f,\"tg_tokens\":%d,\"tg_tps\":%.2f,\"threads\":%d,\"reps\":%d,"
               "\"model_bytes\":%llu,\"isa\":\"%s\",\"streaming\":%d,\"tg_disk_bytes_per_token\":%.0f,"
               "\"tg_disk_bytes_per_s\":%.0f,\"tg_hit_rate\":%.4f,\"tg_io_wait_fraction\":%.4f,\"io_engine\":\"%s\"}\n",
               n_prompt, pp_m, ng, tg_m, threads, reps, (unsigned long long)info.n_bytes, df_isa(), io1.streaming,
               ng ? rd / ng : 0.0, tg_secs > 0 ? rd / tg_secs : 0.0,
               looks > 0 ? (double)(io1.hits - io0.hits) / looks : 0.0,
               tg_secs > 0 ? (io1.wait_seconds - io0.wait_seconds) / tg_secs : 0.0,
               *io1.io_engine ? io1.io_engine : "none");
    else
        printf("model %s (%.1f MiB), threads %d, isa %s\n  pp%-5d %10.2f tokens/s\n  tg%-5d %10.2f tokens/s\n",
               o->model, (double)info.n_bytes / (1 << 20), threads, df_isa(), n_prompt, pp_m, ng, tg_m);
    free(pp);
    free(tg);
    free(toks);
    free(logits);
    df_session_free(s);
    df_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) usage();
    const char *cmd = argv[1];
    opts o;
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help")) usage();
    if (!strcmp(cmd, "--version")) {
        printf("deltafin %s\n", df_version());
        return 0;
    }
    if (!strcmp(cmd, "bench")) {
        /* llama-bench spells the prompt length -p: take it before the common parser */
        int n_prompt = 512, k = 2;
        for (int i = 2; i < argc; i++) {
            if (!strcmp(argv[i], "-p") && i + 1 < argc) n_prompt = (int)parse_long("-p", argv[++i], 0, 1 << 20);
            else argv[k++] = argv[i];
        }
        argc = k;
        parse(argc, argv, &o);
        return cmd_bench(&o, n_prompt);
    }
    parse(argc, argv, &o);
    if (!strcmp(cmd, "run")) return cmd_run(&o);
    if (!strcmp(cmd, "info")) return cmd_info(&o);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(&o);
    if (!strcmp(cmd, "logits")) return cmd_logits(&o);
    if (!strcmp(cmd, "plan")) return cmd_plan(&o);
    fprintf(stderr, "deltafin: unknown command '%s'\n", cmd);
    usage();
    return 2;
}
