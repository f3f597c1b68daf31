/*
 * llama_ref.c - a small reference program driving llama.cpp through its C API (llama.h).
 *
 * Why: Deltafin's tokenizer, logits, greedy generation and speed are checked against
 * llama.cpp. This program is the one place that talks to llama.cpp; tests and benchmarks
 * call it (through scripts/llama-ref.sh) and compare its plain-text / raw-float output with
 * Deltafin's. It links against the prebuilt CPU libraries of node-llama-cpp 3.21.1
 * (llama.cpp release v0.4.0), fetched by scripts/fetch-llama.sh and built by
 * scripts/build-llama-ref.sh into .cache/llama/llama_ref. See docs/reference.md.
 *
 * Usage: llama_ref -m MODEL [-v] COMMAND [options]
 *   tokenize [--no-special] [--no-parse-special] TEXT-FILE
 *       token ids of the file's exact bytes, one per line (always loads the vocabulary only)
 *   logits --tokens "1 2 3" [--out FILE] [--top K] [--one-by-one]
 *       evaluates every position; FILE gets raw little-endian float32 [n_tokens][n_vocab];
 *       stdout gets "POS ID:LOGIT ..." with the top K (default 5), logit descending
 *   generate --tokens "..." -n N [--one-by-one]
 *       N greedy tokens (argmax, ties to the lowest id), one id per line, never stops early
 *   bench [-p 512] [-n 128] [-r 5] [--seqs S]
 *       prompt processing of p tokens (one llama_decode call) and generation of n tokens one
 *       at a time, each from an empty KV cache; one JSON line with medians over the reps.
 *       --seqs S: S sequences generate together, one token of each in one llama_batch a step
 *       (unified KV cache); tg_tps counts the tokens of all of them
 *   mtp --tokens "1 2 3 P" [--out FILE] [--top K]
 *       the model's NextN/MTP block (loaded with load_mtp) after the prompt "1 2 3": the
 *       target's hidden rows (its embeddings, after the final norm) go with the tokens one
 *       position later into an LLAMA_CONTEXT_TYPE_MTP context (row p: token p, hidden p - 1,
 *       zeros for p = 0), as common/speculative.cpp's draft-mtp does; FILE gets the float32
 *       logits of the last row (the block's first guess after pending token P)
 *   embed --tokens "1 2 3" --pooling mean|last|cls [--out FILE]
 *       the sequence's embedding as llama-server's /v1/embeddings gives it for a generative
 *       model: the hidden rows after the final norm, pooled by llama.cpp (embeddings on,
 *       that pooling type), then L2-normalised as llama-server does; FILE gets the n_embd
 *       float32 values, stdout the first eight
 *   grammar --grammar-file FILE --tokens "1 2 3" [-r REPS]
 *       llama.cpp's grammar sampler (llama_sampler_init_grammar, root rule "root") after accepting the
 *       tokens: the time of one llama_sampler_apply over the whole vocabulary (median of REPS, default 20)
 *       and how many tokens it leaves allowed, as one JSON line (bench/grammar.sh); needs only the
 *       vocabulary (--vocab-only)
 *   info
 *       model / vocabulary / backend facts, for humans
 * Common options: -t THREADS (2), -c CTX (just enough), --ubatch N (512), --vocab-only,
 *   --fa on|off|auto (default off), --kv-f16 (default f32 KV cache), --no-repack,
 *   --no-threadpool, --cpu-variant NAME|best (which libggml-cpu-NAME.so to load; see
 *   requested_variant: pinned for fidelity, ggml's best for bench), -v.
 *
 * Settings chosen for tight comparisons: CPU backend only (no devices offloaded), flash
 * attention disabled (llama.cpp's default is "auto", which enables it on CPU), K and V cache
 * in f32 (llama.cpp's default is f16), n_threads = n_threads_batch = -t, one persistent
 * thread pool (default ggml_threadpool_params, like llama-bench).
 * llama.cpp's logging is silenced unless -v; its error messages are still shown on failure.
 */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"

/* The CPU variant for fidelity work: see requested_variant(). */
#if defined(__x86_64__)
#define REF_FIDELITY_VARIANT "haswell"
#elif defined(__aarch64__)
#define REF_FIDELITY_VARIANT "armv8.0_1"
#else
#define REF_FIDELITY_VARIANT "best"
#endif

/* ------------------------------------------------------------------------------------ */
/* errors and logging                                                                     */

static bool g_verbose;
static char g_llama_errors[4096]; /* recent error text from llama.cpp, shown on failure */
static int g_last_level;          /* level of the previous message, for GGML_LOG_LEVEL_CONT */
static char g_cpu_path[4096];     /* the CPU backend library actually loaded (found by dladdr) */
static char g_cpu_variant[256];   /* its variant: "haswell" for libggml-cpu-haswell.so */
static char g_cpu_features[512];  /* the ISA features that library was compiled for */

static void append_err(const char *text) {
    size_t have = strlen(g_llama_errors), add = strlen(text);
    if (add >= sizeof g_llama_errors) {
        text += add - (sizeof g_llama_errors - 1);
        add = sizeof g_llama_errors - 1;
    }
    if (have + add >= sizeof g_llama_errors) { /* drop the oldest text */
        size_t drop = have + add - (sizeof g_llama_errors - 1);
        memmove(g_llama_errors, g_llama_errors + drop, have - drop + 1);
        have -= drop;
    }
    memcpy(g_llama_errors + have, text, add + 1);
}

static void log_cb(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level != GGML_LOG_LEVEL_CONT) g_last_level = level;
    if (g_last_level == GGML_LOG_LEVEL_ERROR) append_err(text);
    if (g_verbose) fputs(text, stderr);
}

_Noreturn static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("llama_ref: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (!g_verbose && g_llama_errors[0]) fprintf(stderr, "llama.cpp said:\n%s", g_llama_errors);
    exit(1);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) die("out of memory (%zu bytes)", n);
    return p;
}

/* ------------------------------------------------------------------------------------ */
/* options                                                                               */

typedef struct {
    const char *model, *cmd, *file, *tokens, *out, *cpu_variant, *pooling, *grammar_file;
    int top, threads, n_ctx, n_ubatch, n, p, reps, seqs;
    enum llama_flash_attn_type fa;
    bool vocab_only, no_special, no_parse_special, one_by_one, kv_f16, no_repack, no_threadpool;
} opts_t;

static void usage(FILE *f) {
    fputs("usage: llama_ref -m MODEL [options] COMMAND [args]\n"
          "commands:\n"
          "  tokenize [--no-special] [--no-parse-special] TEXT-FILE\n"
          "  logits   --tokens \"1 2 3\" [--out FILE] [--top K] [--one-by-one]\n"
          "  generate --tokens \"1 2 3\" -n N [--one-by-one]\n"
          "  bench    [-p 512] [-n 128] [-r 5] [--seqs S]  (S sequences generating in one llama_batch a step)\n"
          "  mtp      --tokens \"1 2 3 P\" [--out FILE] [--top K]  (the NextN block's guess after P)\n"
          "  embed    --tokens \"1 2 3\" --pooling mean|last|cls [--out FILE]  (llama-server's embedding)\n"
          "  grammar  --grammar-file FILE --tokens \"1 2 3\" [-r REPS]  (the grammar sampler's cost over the vocabulary)\n"
          "  info\n"
          "options: -t THREADS (2)  -c CTX  --ubatch N (512)  --vocab-only  --fa on|off|auto (off)\n"
          "         --kv-f16  --no-repack  --no-threadpool  --cpu-variant NAME|best  -v\n"
          "         (default variant: " REF_FIDELITY_VARIANT " for tokenize/logits/generate/info, best for bench;\n"
          "          $LLAMA_REF_CPU_VARIANT overrides the default)\n",
          f);
}

static int parse_int(const char *opt, const char *s, long lo, long hi) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        die("%s: expected an integer in [%ld, %ld], got '%s'", opt, lo, hi, s);
    return (int)v;
}

static opts_t parse_args(int argc, char **argv) {
    opts_t o = {.top = 5, .threads = 2, .n_ubatch = 512, .n = -1, .p = 512, .reps = 5, .seqs = 1,
                .fa = LLAMA_FLASH_ATTN_TYPE_DISABLED};
    bool only_pos = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
#define NEXT() (i + 1 < argc ? argv[++i] : (die("option %s needs a value", a), (char *)0))
        if (only_pos || a[0] != '-' || !a[1]) {
            if (!o.cmd) o.cmd = a;
            else if (!o.file) o.file = a;
            else die("unexpected argument '%s'", a);
        } else if (!strcmp(a, "--")) only_pos = true;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); exit(0); }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) o.model = NEXT();
        else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) g_verbose = true;
        else if (!strcmp(a, "--tokens")) o.tokens = NEXT();
        else if (!strcmp(a, "--out")) o.out = NEXT();
        else if (!strcmp(a, "--pooling")) o.pooling = NEXT();
        else if (!strcmp(a, "--grammar-file")) o.grammar_file = NEXT();
        else if (!strcmp(a, "--top")) o.top = parse_int(a, NEXT(), 0, INT_MAX);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) o.threads = parse_int(a, NEXT(), 1, 1024);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) o.n_ctx = parse_int(a, NEXT(), 1, INT_MAX);
        else if (!strcmp(a, "--ubatch")) o.n_ubatch = parse_int(a, NEXT(), 1, INT_MAX);
        else if (!strcmp(a, "-n")) o.n = parse_int(a, NEXT(), 0, INT_MAX / 2);
        else if (!strcmp(a, "-p")) o.p = parse_int(a, NEXT(), 0, INT_MAX / 2);
        else if (!strcmp(a, "--seqs")) o.seqs = parse_int(a, NEXT(), 1, 256);
        else if (!strcmp(a, "-r") || !strcmp(a, "--reps")) o.reps = parse_int(a, NEXT(), 1, 1000000);
        else if (!strcmp(a, "--cpu-variant")) o.cpu_variant = NEXT();
        else if (!strcmp(a, "--vocab-only")) o.vocab_only = true;
        else if (!strcmp(a, "--no-special")) o.no_special = true;
        else if (!strcmp(a, "--no-parse-special")) o.no_parse_special = true;
        else if (!strcmp(a, "--one-by-one")) o.one_by_one = true;
        else if (!strcmp(a, "--fa") || !strcmp(a, "--flash-attn")) {
            const char *v = NEXT();
            if (!strcmp(v, "on")) o.fa = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            else if (!strcmp(v, "off")) o.fa = LLAMA_FLASH_ATTN_TYPE_DISABLED;
            else if (!strcmp(v, "auto")) o.fa = LLAMA_FLASH_ATTN_TYPE_AUTO;
            else die("%s: expected on, off or auto, got '%s'", a, v);
        }
        else if (!strcmp(a, "--kv-f16")) o.kv_f16 = true;
        else if (!strcmp(a, "--no-repack")) o.no_repack = true;
        else if (!strcmp(a, "--no-threadpool")) o.no_threadpool = true;
        else { usage(stderr); die("unknown option '%s'", a); }
#undef NEXT
    }
    if (!o.cmd) { usage(stderr); die("no command given"); }
    static const char *const cmds[] = {"tokenize", "logits", "generate", "bench", "info", "mtp", "embed", "grammar"};
    bool known = false;
    for (size_t k = 0; k < sizeof cmds / sizeof *cmds; k++) known |= !strcmp(o.cmd, cmds[k]);
    if (!known) { usage(stderr); die("unknown command '%s'", o.cmd); }
    if (!o.model) die("no model given (-m MODEL)");
    if (o.file && strcmp(o.cmd, "tokenize")) die("unexpected argument '%s'", o.file);
    if (o.vocab_only && strcmp(o.cmd, "tokenize") && strcmp(o.cmd, "info") && strcmp(o.cmd, "grammar"))
        die("--vocab-only only makes sense with tokenize or info");
    return o;
}

/* "1 2 3" or "1,2,3" -> array of token ids */
static llama_token *parse_tokens(const char *s, int *n_out) {
    size_t cap = 16, n = 0;
    llama_token *t = xmalloc(cap * sizeof *t);
    while (*s) {
        while (*s == ' ' || *s == ',' || *s == '\t' || *s == '\n') s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < 0 || v > INT32_MAX || !(*end == 0 || strchr(" ,\t\n", *end)))
            die("--tokens: bad token id near '%.20s'", s);
        if (n == cap) {
            cap *= 2;
            t = realloc(t, cap * sizeof *t);
            if (!t) die("out of memory");
        }
        t[n++] = (llama_token)v;
        s = end;
    }
    if (n > INT32_MAX / 2) die("--tokens: too many tokens");
    *n_out = (int)n;
    return t;
}

/* ------------------------------------------------------------------------------------ */
/* llama.cpp setup                                                                        */

/* Directory holding the ggml backend libraries: $LLAMA_REF_BACKEND_DIR, else the directory
 * of the libllama we were linked against (fetch-llama.sh puts the backends next to it). */
static void backend_dir(char *buf, size_t size) {
    const char *env = getenv("LLAMA_REF_BACKEND_DIR");
    if (env && *env) {
        snprintf(buf, size, "%s", env);
        return;
    }
    Dl_info info;
    if (!dladdr((void *)llama_backend_init, &info) || !info.dli_fname)
        die("cannot locate libllama (dladdr failed); set LLAMA_REF_BACKEND_DIR");
    snprintf(buf, size, "%s", info.dli_fname);
    char *slash = strrchr(buf, '/');
    if (slash) *slash = 0;
    else snprintf(buf, size, ".");
}

/* The CPU variant, chosen in this one place.
 *
 * llama.cpp ships one CPU backend library per instruction-set level (x64, sse42, haswell,
 * skylakex, zen4, sapphirerapids, ... on x86-64; armv8.0_1 ... armv9.2_2 on aarch64) and, by
 * default, loads the best one the processor runs. The best is not the most faithful: on
 * Intel machines with AMX, the sapphirerapids variant aborts on some MoE K-quant models
 * (GGML_ASSERT in the backend scheduler) and computes logits far from its own AVX2 path on
 * others. So fidelity work (tokenize, logits, generate, info) pins the AVX2 "haswell" variant,
 * which every x86-64 machine we get runs (the baseline armv8.0_1 on aarch64); speed work
 * (bench) loads the variant a user would get ("best"). Either default is overridden by
 * $LLAMA_REF_CPU_VARIANT, and that by --cpu-variant; "best" asks for ggml's own choice.
 * Whatever was asked, the variant actually loaded is found from the library that holds the
 * CPU backend's code (dladdr), compared with the request (a mismatch is an error, never a
 * silent substitute) and printed with the results. */

static const char *requested_variant(const opts_t *o) {
    if (o->cpu_variant) return o->cpu_variant;
    const char *env = getenv("LLAMA_REF_CPU_VARIANT");
    if (env && *env) return env;
    return strcmp(o->cmd, "bench") ? REF_FIDELITY_VARIANT : "best";
}

/* Which libggml-cpu-*.so holds the registered CPU backend, and what it was compiled for. */
static void identify_cpu_backend(void) {
    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
    void *fn = ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features");
    Dl_info info;
    if (!fn || !dladdr(fn, &info) || !info.dli_fname) die("cannot tell which CPU backend library was loaded");
    snprintf(g_cpu_path, sizeof g_cpu_path, "%s", info.dli_fname);
    const char *base = strrchr(g_cpu_path, '/');
    base = base ? base + 1 : g_cpu_path;
    const char *pre = "libggml-cpu-";
    size_t len = strlen(base);
    if (strncmp(base, pre, strlen(pre)) || len < strlen(pre) + 4 || strcmp(base + len - 3, ".so"))
        die("the CPU backend was loaded from an unexpected library %s", g_cpu_path);
    snprintf(g_cpu_variant, sizeof g_cpu_variant, "%.*s", (int)(len - strlen(pre) - 3), base + strlen(pre));
    typedef struct ggml_backend_feature *(*features_fn)(ggml_backend_reg_t);
    struct ggml_backend_feature *f = ((features_fn)fn)(reg);
    size_t used = 0;
    g_cpu_features[0] = 0;
    for (; f && f->name; f++) {
        if (strcmp(f->value, "1")) continue; /* numeric facts (vector lengths) are not features */
        int w = snprintf(g_cpu_features + used, sizeof g_cpu_features - used, "%s%s", used ? " " : "", f->name);
        if (w < 0 || (size_t)w >= sizeof g_cpu_features - used) break;
        used += (size_t)w;
    }
}

static void load_backends(const opts_t *o) {
    char dir[4096];
    backend_dir(dir, sizeof dir);
    const char *want = requested_variant(o);
    if (strcmp(want, "best")) {
        char path[4400];
        snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", dir, want);
        if (!ggml_backend_load(path))
            die("could not load CPU variant '%s' from %s (missing, or not supported by this CPU)", want, path);
    } else {
        ggml_backend_load_all_from_path(dir);
    }
    if (!ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU))
        die("no CPU backend could be loaded from %s (expected libggml-cpu-*.so there)", dir);
    identify_cpu_backend();
    if (strcmp(want, "best") && strcmp(want, g_cpu_variant))
        die("asked for CPU variant '%s' but ggml loaded '%s' (%s)", want, g_cpu_variant, g_cpu_path);
    if (strcmp(o->cmd, "info") && strcmp(o->cmd, "bench")) /* info and bench print it on stdout */
        fprintf(stderr, "llama_ref: cpu variant %s (%s)\n", g_cpu_variant, g_cpu_features);
}

static bool g_load_mtp; /* the mtp command: load the NextN/MTP layers too */

static struct llama_model *load_model(const opts_t *o, bool vocab_only) {
    static ggml_backend_dev_t no_devices[1] = {NULL}; /* offload to nothing: CPU only */
    struct llama_model_params mp = llama_model_default_params();
    mp.devices = no_devices;
    mp.n_gpu_layers = 0;
    mp.split_mode = LLAMA_SPLIT_MODE_NONE;
    mp.vocab_only = vocab_only;
    mp.use_extra_bufts = !o->no_repack;
    mp.load_mtp = g_load_mtp;
    FILE *f = fopen(o->model, "rb");
    if (!f) die("cannot open model %s: %s", o->model, strerror(errno));
    fclose(f);
    struct llama_model *m = llama_model_load_from_file(o->model, mp);
    if (!m)
        die("failed to load model %s%s", o->model,
            !vocab_only && strstr(g_llama_errors, "not found")
                ? " (if it is a vocabulary-only GGUF, only tokenize and info --vocab-only work)"
                : "");
    return m;
}

/* A persistent ggml thread pool, as llama-bench and llama.cpp's own tools attach. Without
 * one, the CPU backend creates and joins a throw-away pool on every llama_decode call. The
 * functions live in the dynamically loaded CPU backend, so they are looked up by name. */
static ggml_threadpool_t g_threadpool;
typedef ggml_threadpool_t (*threadpool_new_fn)(struct ggml_threadpool_params *);
typedef void (*threadpool_free_fn)(ggml_threadpool_t);
static threadpool_free_fn g_threadpool_free;

static void attach_threadpool(struct llama_context *ctx, int n_threads) {
    if (!g_threadpool) {
        ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
        threadpool_new_fn tp_new = (threadpool_new_fn)ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_new");
        g_threadpool_free = (threadpool_free_fn)ggml_backend_reg_get_proc_address(reg, "ggml_threadpool_free");
        if (!tp_new || !g_threadpool_free) die("the CPU backend does not export ggml_threadpool_new/free");
        struct ggml_threadpool_params tpp = ggml_threadpool_params_default(n_threads);
        g_threadpool = tp_new(&tpp);
        if (!g_threadpool) die("could not create a thread pool of %d threads", n_threads);
    }
    llama_attach_threadpool(ctx, g_threadpool, NULL);
}

static void free_threadpool(void) {
    if (g_threadpool) g_threadpool_free(g_threadpool);
    g_threadpool = NULL;
}

static struct llama_context *new_context(struct llama_model *m, const opts_t *o, int n_ctx, int n_batch, int n_seq) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = (uint32_t)n_batch;
    cp.n_ubatch = (uint32_t)o->n_ubatch;
    cp.n_seq_max = (uint32_t)n_seq;
    if (n_seq > 1) cp.kv_unified = true; /* n_ctx shared by the sequences */
    cp.n_outputs_max_per_seq = 0; /* only matters for backend samplers; 0 = no limit */
    cp.n_threads = o->threads;
    cp.n_threads_batch = o->threads;
    cp.flash_attn_type = o->fa;
    cp.type_k = o->kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.type_v = o->kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.offload_kqv = false;
    cp.op_offload = false;
    cp.embeddings = false;
    cp.no_perf = true;
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) die("failed to create a llama context (n_ctx=%d, n_batch=%d)", n_ctx, n_batch);
    if (!o->no_threadpool) attach_threadpool(ctx, o->threads);
    return ctx;
}

static void check_tokens(const llama_token *t, int n, int n_vocab) {
    for (int i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= n_vocab) die("token id %d at index %d is out of range [0, %d)", t[i], i, n_vocab);
}

static void decode_or_die(struct llama_context *ctx, struct llama_batch b, const char *what) {
    int32_t rc = llama_decode(ctx, b);
    if (rc != 0) die("llama_decode failed (%s, %d tokens): return code %d", what, b.n_tokens, rc);
}

/* Decode tokens t[0..n) at positions pos0.. in one llama_decode call; request logits for
 * every position if all_logits, else only the last one. */
static void decode_span(struct llama_context *ctx, const llama_token *t, int n, int pos0, bool all_logits) {
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = t[i];
        b.pos[i] = pos0 + i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = all_logits || i == n - 1;
    }
    b.n_tokens = n;
    decode_or_die(ctx, b, "batch");
    llama_batch_free(b);
}

static const float *logits_at(struct llama_context *ctx, int i) {
    const float *p = llama_get_logits_ith(ctx, i);
    if (!p) die("llama_get_logits_ith(%d) returned NULL", i);
    return p;
}

static int argmax(const float *x, int n) { /* ties -> lowest id */
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* ------------------------------------------------------------------------------------ */
/* commands                                                                              */

static int cmd_tokenize(const opts_t *o) {
    if (!o->file) die("tokenize needs a TEXT-FILE");
    FILE *f = fopen(o->file, "rb");
    if (!f) die("cannot open %s: %s", o->file, strerror(errno));
    size_t cap = 1 << 16, len = 0, got;
    char *text = xmalloc(cap);
    while ((got = fread(text + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            cap *= 2;
            text = realloc(text, cap);
            if (!text) die("out of memory");
        }
    }
    if (ferror(f)) die("error reading %s", o->file);
    fclose(f);
    if (len > INT32_MAX / 2) die("%s is too large", o->file);

    /* Tokenization needs no weights: always load the vocabulary only. */
    struct llama_model *m = load_model(o, true);
    const struct llama_vocab *v = llama_model_get_vocab(m);
    bool add_special = !o->no_special, parse_special = !o->no_parse_special;
    int32_t cap_tok = (int32_t)len + 16;
    llama_token *tok = xmalloc((size_t)cap_tok * sizeof *tok);
    int32_t n = llama_tokenize(v, text, (int32_t)len, tok, cap_tok, add_special, parse_special);
    if (n == INT32_MIN) die("tokenization overflow");
    if (n < 0) {
        cap_tok = -n;
        free(tok);
        tok = xmalloc((size_t)cap_tok * sizeof *tok);
        n = llama_tokenize(v, text, (int32_t)len, tok, cap_tok, add_special, parse_special);
        if (n < 0) die("llama_tokenize failed (%d)", n);
    }
    for (int32_t i = 0; i < n; i++) printf("%d\n", tok[i]);
    free(tok);
    free(text);
    llama_model_free(m);
    return 0;
}

static void write_f32_le(FILE *f, const float *x, size_t n, const char *path) {
    const uint16_t one = 1;
    if (*(const uint8_t *)&one == 1) {
        if (fwrite(x, sizeof(float), n, f) != n) die("write error on %s", path);
        return;
    }
    for (size_t i = 0; i < n; i++) { /* big-endian host: byte-swap */
        uint32_t u;
        memcpy(&u, &x[i], 4);
        uint8_t b[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
        if (fwrite(b, 1, 4, f) != 4) die("write error on %s", path);
    }
}

static void print_top(int pos, const float *x, int n_vocab, int k, int *idx) {
    if (k > n_vocab) k = n_vocab;
    int have = 0;
    for (int i = 0; i < n_vocab; i++) { /* insertion into a sorted top-k list; ties keep lower id first */
        if (have == k && !(x[i] > x[idx[k - 1]])) continue;
        int j = have < k ? have++ : k - 1;
        while (j > 0 && x[i] > x[idx[j - 1]]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
    printf("%d", pos);
    for (int j = 0; j < have; j++) printf(" %d:%.6f", idx[j], x[idx[j]]);
    putchar('\n');
}

static int cmd_logits(const opts_t *o) {
    if (!o->tokens) die("logits needs --tokens \"ID ID ...\"");
    int n;
    llama_token *t = parse_tokens(o->tokens, &n);
    if (n == 0) die("--tokens is empty");
    struct llama_model *m = load_model(o, false);
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int n_vocab = llama_vocab_n_tokens(v);
    check_tokens(t, n, n_vocab);
    int n_ctx = o->n_ctx ? o->n_ctx : n;
    if (n_ctx < n) die("-c %d is smaller than the number of tokens (%d)", n_ctx, n);
    struct llama_context *ctx = new_context(m, o, n_ctx, n, 1);

    float *all = xmalloc((size_t)n * (size_t)n_vocab * sizeof(float));
    if (o->one_by_one) {
        for (int i = 0; i < n; i++) {
            decode_span(ctx, &t[i], 1, i, true);
            memcpy(all + (size_t)i * n_vocab, logits_at(ctx, 0), (size_t)n_vocab * sizeof(float));
        }
    } else {
        decode_span(ctx, t, n, 0, true);
        for (int i = 0; i < n; i++)
            memcpy(all + (size_t)i * n_vocab, logits_at(ctx, i), (size_t)n_vocab * sizeof(float));
    }

    if (o->out) {
        FILE *f = fopen(o->out, "wb");
        if (!f) die("cannot create %s: %s", o->out, strerror(errno));
        write_f32_le(f, all, (size_t)n * (size_t)n_vocab, o->out);
        if (fclose(f)) die("write error on %s", o->out);
    }
    if (o->top > 0) {
        int *idx = xmalloc((size_t)o->top * sizeof *idx);
        for (int i = 0; i < n; i++) print_top(i, all + (size_t)i * n_vocab, n_vocab, o->top, idx);
        free(idx);
    }
    free(all);
    free(t);
    llama_free(ctx);
    llama_model_free(m);
    return 0;
}

/* The NextN/MTP block's logits after the prompt t[0..n-1) for pending token t[n-1]. */
/* A context of n tokens, one sequence, that hands out its hidden rows after the final norm (embeddings on),
 * pooled by pt (NONE: every row). */
static struct llama_context_params embedding_params(const opts_t *o, int n, enum llama_pooling_type pt) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)n;
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = o->threads;
    cp.flash_attn_type = o->fa;
    cp.type_k = cp.type_v = o->kv_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32;
    cp.offload_kqv = cp.op_offload = false;
    cp.embeddings = true;
    cp.pooling_type = pt;
    cp.no_perf = true;
    return cp;
}

static int cmd_mtp(const opts_t *o) {
    if (!o->tokens) die("mtp needs --tokens \"ID ID ... PENDING\"");
    int n;
    llama_token *t = parse_tokens(o->tokens, &n);
    if (n < 2) die("mtp needs a prompt and a pending token (at least 2 ids)");
    g_load_mtp = true;
    struct llama_model *m = load_model(o, false);
    if (llama_model_n_layer_nextn(m) < 1) die("%s has no NextN/MTP layers", o->model);
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m)), n_embd = llama_model_n_embd(m);
    check_tokens(t, n, n_vocab);
    /* the target: its hidden rows after the final norm are its embeddings (pooling none) */
    struct llama_context_params cp = embedding_params(o, n, LLAMA_POOLING_TYPE_NONE);
    struct llama_context *tgt = llama_init_from_model(m, cp);
    if (!tgt) die("failed to create the target context");
    decode_span(tgt, t, n - 1, 0, true);
    struct llama_batch b = llama_batch_init(n, n_embd, 1);
    b.token = xmalloc(sizeof(llama_token) * (size_t)n); /* llama_batch_init gives embd only; MTP reads both */
    for (int i = 0; i < n; i++) {
        b.token[i] = t[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = i == n - 1;
        const float *h = i ? llama_get_embeddings_ith(tgt, i - 1) : NULL;
        if (i && !h) die("llama_get_embeddings_ith(%d) returned NULL", i - 1);
        for (int k = 0; k < n_embd; k++) b.embd[(size_t)i * n_embd + k] = h ? h[k] : 0.0f;
    }
    b.n_tokens = n;
    cp.embeddings = false;
    cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    struct llama_context *mtp = llama_init_from_model(m, cp);
    if (!mtp) die("failed to create an MTP context");
    decode_or_die(mtp, b, "mtp batch");
    const float *lg = logits_at(mtp, n - 1);
    if (o->out) {
        FILE *f = fopen(o->out, "wb");
        if (!f) die("cannot create %s: %s", o->out, strerror(errno));
        write_f32_le(f, lg, (size_t)n_vocab, o->out);
        if (fclose(f)) die("write error on %s", o->out);
    }
    if (o->top > 0) {
        int *idx = xmalloc((size_t)o->top * sizeof *idx);
        print_top(n - 1, lg, n_vocab, o->top, idx);
        free(idx);
    }
    free(b.token);
    b.token = NULL;
    llama_batch_free(b);
    llama_free(mtp);
    llama_free(tgt);
    llama_model_free(m);
    free(t);
    return 0;
}

static int cmd_generate(const opts_t *o) {
    if (!o->tokens) die("generate needs --tokens \"ID ID ...\" (the prompt)");
    if (o->n < 0) die("generate needs -n N");
    int n;
    llama_token *t = parse_tokens(o->tokens, &n);
    if (n == 0) die("--tokens is empty");
    struct llama_model *m = load_model(o, false);
    const struct llama_vocab *v = llama_model_get_vocab(m);
    int n_vocab = llama_vocab_n_tokens(v);
    check_tokens(t, n, n_vocab);
    int need = n + o->n;
    int n_ctx = o->n_ctx ? o->n_ctx : need;
    if (n_ctx < need) die("-c %d is smaller than prompt + generated tokens (%d)", n_ctx, need);
    struct llama_context *ctx = new_context(m, o, n_ctx, n, 1);

    if (o->one_by_one)
        for (int i = 0; i < n; i++) decode_span(ctx, &t[i], 1, i, true);
    else
        decode_span(ctx, t, n, 0, false);
    for (int i = 0; i < o->n; i++) {
        llama_token next = argmax(logits_at(ctx, -1), n_vocab);
        printf("%d\n", next);
        if (i + 1 < o->n) decode_span(ctx, &next, 1, n + i, true);
    }
    free(t);
    llama_free(ctx);
    llama_model_free(m);
    return 0;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static llama_token rand_token(int n_vocab) { /* xorshift64*, fixed seed: deterministic ids */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (llama_token)(((g_rng * 0x2545F4914F6CDD1Dull) >> 33) % (uint64_t)n_vocab);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

static int cmd_bench(const opts_t *o) {
    int p = o->p, ng = o->n < 0 ? 128 : o->n;
    if (p == 0 && ng == 0) die("bench: nothing to do (-p 0 -n 0)");
    struct llama_model *m = load_model(o, false);
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m));
    const int S = o->seqs;
    int n_ctx = o->n_ctx ? o->n_ctx : (p > ng * S ? p : ng * S);
    if (n_ctx < p || n_ctx < ng * S) die("-c %d is too small for -p %d / -n %d x %d sequences", n_ctx, p, ng, S);
    struct llama_context *ctx = new_context(m, o, n_ctx, p > S ? p : S, S);
    struct llama_batch gb = llama_batch_init(S, 0, 1);
    llama_memory_t mem = llama_get_memory(ctx);

    llama_token *prompt = xmalloc((size_t)(p > 0 ? p : 1) * sizeof *prompt);
    for (int i = 0; i < p; i++) prompt[i] = rand_token(n_vocab);
    double *pp = xmalloc((size_t)o->reps * sizeof *pp), *tg = xmalloc((size_t)o->reps * sizeof *tg);

    for (int r = -1; r < o->reps; r++) { /* r == -1: warm-up, not counted */
        if (p > 0) {
            llama_memory_clear(mem, true);
            int64_t t0 = llama_time_us();
            decode_or_die(ctx, llama_batch_get_one(prompt, p), "bench prompt");
            llama_synchronize(ctx);
            int64_t t1 = llama_time_us();
            if (r >= 0) pp[r] = p / ((double)(t1 - t0) * 1e-6);
        }
        if (ng > 0) {
            llama_memory_clear(mem, true);
            int steps = r < 0 ? 1 : ng;
            llama_token tok = rand_token(n_vocab);
            int64_t t0 = llama_time_us();
            for (int i = 0; i < steps; i++) {
                if (S == 1) {
                    decode_or_die(ctx, llama_batch_get_one(&tok, 1), "bench generation");
                } else { /* one token of each sequence, at its own position, in one batch */
                    for (int s = 0; s < S; s++) {
                        gb.token[s] = rand_token(n_vocab);
                        gb.pos[s] = i;
                        gb.n_seq_id[s] = 1;
                        gb.seq_id[s][0] = s;
                        gb.logits[s] = true;
                    }
                    gb.n_tokens = S;
                    decode_or_die(ctx, gb, "bench generation");
                }
                llama_synchronize(ctx);
                tok = rand_token(n_vocab);
            }
            int64_t t1 = llama_time_us();
            if (r >= 0) tg[r] = (double)ng * S / ((double)(t1 - t0) * 1e-6);
        }
    }
    llama_batch_free(gb);
    printf("{\"pp_tokens\":%d,\"pp_tps\":%.2f,\"tg_tokens\":%d,\"tg_seqs\":%d,\"tg_tps\":%.2f,\"threads\":%d,"
           "\"reps\":%d,\"n_ubatch\":%u,\"cpu_variant\":\"%s\"}\n",
           p, p > 0 ? median(pp, o->reps) : 0.0, ng, S, ng > 0 ? median(tg, o->reps) : 0.0, o->threads,
           o->reps, llama_n_ubatch(ctx), g_cpu_variant);
    free(pp);
    free(tg);
    free(prompt);
    llama_free(ctx);
    llama_model_free(m);
    return 0;
}

static int cmd_info(const opts_t *o) {
    struct llama_model *m = load_model(o, o->vocab_only);
    const struct llama_vocab *v = llama_model_get_vocab(m);
    char desc[256];
    llama_model_desc(m, desc, sizeof desc);
    static const char *vt[] = {"none", "spm", "bpe", "wpm", "ugm", "rwkv", "plamo2"};
    int t = (int)llama_vocab_type(v);
    printf("model:       %s\n", desc);
    printf("n_params:    %llu\n", (unsigned long long)llama_model_n_params(m));
    printf("n_ctx_train: %d\n", llama_model_n_ctx_train(m));
    printf("vocab:       %s, %d tokens, bos %d (add %d), eos %d (add %d)\n",
           t >= 0 && t < 7 ? vt[t] : "?", llama_vocab_n_tokens(v), llama_vocab_bos(v),
           llama_vocab_get_add_bos(v), llama_vocab_eos(v), llama_vocab_get_add_eos(v));
    printf("cpu variant: %s\n", g_cpu_variant);
    printf("cpu library: %s\n", g_cpu_path);
    printf("cpu features: %s\n", g_cpu_features);
    printf("system:      %s\n", llama_print_system_info());
    llama_model_free(m);
    return 0;
}

static int cmd_embed(const opts_t *o) {
    if (!o->tokens || !o->pooling) die("embed needs --tokens \"ID ID ...\" and --pooling mean|last|cls");
    const enum llama_pooling_type pt = !strcmp(o->pooling, "mean") ? LLAMA_POOLING_TYPE_MEAN
                                       : !strcmp(o->pooling, "last") ? LLAMA_POOLING_TYPE_LAST
                                       : !strcmp(o->pooling, "cls") ? LLAMA_POOLING_TYPE_CLS
                                                                    : LLAMA_POOLING_TYPE_UNSPECIFIED;
    if (pt == LLAMA_POOLING_TYPE_UNSPECIFIED) die("--pooling: mean, last or cls, not '%s'", o->pooling);
    int n;
    llama_token *t = parse_tokens(o->tokens, &n);
    struct llama_model *m = load_model(o, false);
    const int n_embd = llama_model_n_embd(m);
    check_tokens(t, n, llama_vocab_n_tokens(llama_model_get_vocab(m)));
    struct llama_context_params cp = embedding_params(o, n, pt);
    struct llama_context *ctx = llama_init_from_model(m, cp);
    if (!ctx) die("failed to create the context");
    decode_span(ctx, t, n, 0, true);
    const float *e = llama_get_embeddings_seq(ctx, 0);
    if (!e) die("llama_get_embeddings_seq returned NULL");
    double sum = 0; /* llama-server's default normalisation: Euclidean (common_embd_normalize, 2) */
    for (int k = 0; k < n_embd; k++) sum += (double)e[k] * e[k];
    const double norm = sum > 0 ? 1.0 / sqrt(sum) : 0.0;
    float *v = xmalloc((size_t)n_embd * sizeof *v);
    for (int k = 0; k < n_embd; k++) v[k] = (float)(e[k] * norm);
    if (o->out) {
        FILE *f = fopen(o->out, "wb");
        if (!f) die("cannot create %s: %s", o->out, strerror(errno));
        write_f32_le(f, v, (size_t)n_embd, o->out);
        if (fclose(f)) die("write error on %s", o->out);
    }
    for (int k = 0; k < n_embd && k < 8; k++) printf("%s%.6f", k ? " " : "", v[k]);
    printf("\n");
    free(v);
    llama_free(ctx);
    llama_model_free(m);
    free(t);
    return 0;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmd_grammar(const opts_t *o) {
    if (!o->grammar_file || !o->tokens) die("grammar needs --grammar-file FILE and --tokens \"ID ...\"");
    FILE *f = fopen(o->grammar_file, "rb");
    if (!f) die("cannot open %s: %s", o->grammar_file, strerror(errno));
    char *text = xmalloc(1 << 20);
    const size_t n_text = fread(text, 1, (1 << 20) - 1, f);
    fclose(f);
    text[n_text] = 0;
    int n;
    llama_token *t = parse_tokens(o->tokens, &n);
    struct llama_model *m = load_model(o, true);
    const struct llama_vocab *vocab = llama_model_get_vocab(m);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    check_tokens(t, n, n_vocab);
    struct llama_sampler *g = llama_sampler_init_grammar(vocab, text, "root");
    if (!g) die("llama.cpp could not parse the grammar in %s", o->grammar_file);
    for (int i = 0; i < n; i++) llama_sampler_accept(g, t[i]);
    llama_token_data *data = xmalloc((size_t)n_vocab * sizeof *data);
    const int reps = o->reps > 0 ? o->reps : 20;
    double *ms = xmalloc((size_t)reps * sizeof *ms);
    int allowed = 0;
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < n_vocab; i++) data[i] = (llama_token_data){i, (float)((i * 7919) % 1000) / 100.0f, 0.0f};
        llama_token_data_array arr = {data, (size_t)n_vocab, -1, false};
        const double t0 = now_ms();
        llama_sampler_apply(g, &arr);
        ms[r] = now_ms() - t0;
        allowed = 0;
        for (int i = 0; i < n_vocab; i++) allowed += arr.data[i].logit != -INFINITY;
    }
    printf("{\"engine\":\"llama.cpp\",\"n_vocab\":%d,\"prefix_tokens\":%d,\"apply_ms\":%.4f,\"allowed\":%d}\n", n_vocab, n,
           median(ms, reps), allowed);
    free(ms), free(data), free(text), free(t);
    llama_sampler_free(g);
    llama_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    opts_t o = parse_args(argc, argv);
    /* Logging must be redirected before anything else logs (backend loading does). */
    llama_log_set(log_cb, NULL);
    load_backends(&o);
    llama_backend_init();

    int rc;
    if (!strcmp(o.cmd, "tokenize")) rc = cmd_tokenize(&o);
    else if (!strcmp(o.cmd, "logits")) rc = cmd_logits(&o);
    else if (!strcmp(o.cmd, "generate")) rc = cmd_generate(&o);
    else if (!strcmp(o.cmd, "mtp")) rc = cmd_mtp(&o);
    else if (!strcmp(o.cmd, "embed")) rc = cmd_embed(&o);
    else if (!strcmp(o.cmd, "grammar")) rc = cmd_grammar(&o);
    else if (!strcmp(o.cmd, "bench")) rc = cmd_bench(&o);
    else rc = cmd_info(&o);

    free_threadpool(); /* after every context using it is freed */
    llama_backend_free();
    if (fflush(stdout) || ferror(stdout)) die("error writing to stdout");
    return rc;
}
