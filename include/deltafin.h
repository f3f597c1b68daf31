/*
 * deltafin.h - the public C API of Deltafin, an inference engine for GGUF
 * language models.
 *
 * Usage, in short:
 *
 *   df_model *m;  df_session *s;  char err[512];
 *   df_model_params mp = df_model_default_params();
 *   if (df_model_load("model.gguf", &mp, &m, err, sizeof err)) { puts(err); ... }
 *   df_session_params sp = df_session_default_params();
 *   if (df_session_new(m, &sp, &s, err, sizeof err)) { ... }
 *   int32_t toks[256]; int n;
 *   df_tokenize(m, "Hello", 5, 1, 0, toks, 256, &n, err, sizeof err);
 *   df_decode(s, toks, n, logits_last_only_buffer, 0, err, sizeof err);  // appends at the session's position
 *   ... sample with df_sampler, decode one token at a time ...
 *   df_session_free(s); df_model_free(m);
 *
 * Conventions: functions that can fail return 0 on success and -1 on failure
 * with a one-line reason in err (which may be NULL). Nothing here prints or
 * exits. A model is read-only once loaded and may serve several sessions;
 * a session (KV cache and scratch) is used by one thread at a time.
 */
#ifndef DELTAFIN_H
#define DELTAFIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct df_model df_model;
typedef struct df_session df_session;
typedef struct df_sampler df_sampler;

/* ---- models ---- */

typedef struct df_model_params {
    int n_threads;      /* worker threads for compute (0 = number of online CPUs) */
    int use_mmap;       /* 1: map the file (default); 0: read weights into memory; -1: read them
                         * in when they take at most a quarter of the RAM, else map (the CLI's
                         * default: generation reads anonymous memory faster than a mapped
                         * page cache, bench/RESULTS.md). A mapped file
                         * truncated under a running model can only raise SIGBUS (the CLI
                         * reports it); other changes to it fail df_decode (docs/files.md) */
    /* Memory budget (0 = none). With a budget, Deltafin plans everything it
     * holds (weights kept in memory, the expert cache, one session of n_ctx
     * tokens) within mem_budget bytes, streams the rest from disk, and fails
     * to load, naming the minimum, if the model cannot run within it. */
    uint64_t mem_budget;
    int n_ctx;          /* context the session will use (planning; 0 = default) */
    int n_batch;        /* its batch (0 = 512) */
    int kv_type;        /* its KV cache type (enum df_kv_type) */
    int io_threads;     /* concurrent disk reads: reader threads or io_uring depth (0 = 8) */
    int io_engine;      /* enum df_io_engine */
    const char *hot_file; /* learned hot experts: NULL = "<model>.hot", "" = none. A file named
                           * here that is the model, not a regular file, or cannot be written fails
                           * the load; the default one is then skipped and df_io_stats.hot_note says why */
    int vocab_only;     /* 1: metadata and tokenizer only (no tensors needed, no session possible) */
} df_model_params;

/* How streamed weights are read: DF_IO_AUTO picks the engine measured
 * fastest (bench/io.sh); io_uring falls back to pread where the kernel or a
 * sandbox refuses it (df_io_stats.io_note says so). */
enum df_io_engine { DF_IO_AUTO = 0, DF_IO_PREAD = 1, DF_IO_URING = 2 };

df_model_params df_model_default_params(void);

/* Load a GGUF model (first file of a split model). */
int df_model_load(const char *path, const df_model_params *p, df_model **out, char *err, size_t errlen);
void df_model_free(df_model *m);
/* 1 if path names one of the model's files (the same file: st_dev and
 * st_ino, through any link). Never write output there. */
int df_model_is_file(const df_model *m, const char *path);
/* Save the learned hot experts now (with a budget; df_model_free does it
 * otherwise, silently). 0 when saved or there is nothing to save. */
int df_model_save_hot(df_model *m, char *err, size_t errlen);

/* Summary facts about a loaded model. */
typedef struct df_model_info {
    const char *arch;        /* general.architecture */
    const char *name;        /* general.name or "" */
    int n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    uint64_t n_params;       /* total elements of all weight tensors */
    uint64_t n_bytes;        /* total bytes of all tensor data */
    int n_expert, n_expert_used, n_expert_shared; /* 0 for dense models */
    uint64_t n_params_active; /* parameters used per token (all but the unselected routed experts) */
    uint64_t expert_bytes;   /* bytes of one routed expert in one layer (gate+up+down) */
    int n_threads;           /* compute threads in use */
} df_model_info;
void df_model_get_info(const df_model *m, df_model_info *out);

/* ---- tokenizer ---- */

/* Tokenize len bytes. add_special: BOS/EOS as the model says. parse_special:
 * recognise special-token texts. Writes up to max ids, *n_out = total needed. */
int df_tokenize(const df_model *m, const char *text, size_t len, int add_special, int parse_special, int32_t *out,
                int max, int *n_out, char *err, size_t errlen);
/* Bytes of one token (see tok_piece); returns length or -1 for a bad id. */
int df_token_to_piece(const df_model *m, int32_t id, char *buf, int buflen);
int32_t df_token_bos(const df_model *m);
int32_t df_token_eos(const df_model *m);
int df_token_is_eog(const df_model *m, int32_t id);
int df_n_vocab(const df_model *m);

/* ---- sessions (KV cache + scratch) ---- */

enum df_kv_type { DF_KV_F32 = 0, DF_KV_F16 = 1 };

typedef struct df_session_params {
    int n_ctx;         /* context length (0 = the model's training context, capped at 4096) */
    int n_batch;       /* most tokens processed per forward pass (default 512) */
    int kv_type;       /* enum df_kv_type (default f16) */
} df_session_params;

df_session_params df_session_default_params(void);

int df_session_new(df_model *m, const df_session_params *p, df_session **out, char *err, size_t errlen);
void df_session_free(df_session *s);
/* Number of tokens in the session's KV cache. */
int df_session_pos(const df_session *s);
int df_session_n_ctx(const df_session *s);
/* Forget everything from position pos onward (pos = 0 clears the session).
 * A model with recurrent layers (kimi-linear, kimi-k3) keeps a running state
 * that cannot be rewound: there only pos = 0 and pos = the current position
 * are accepted (and after a df_decode of such a model failed part way, only
 * a reset to 0 makes the session usable again). Returns 0, or -1 with err
 * (pos out of range, or a rewind of recurrent state). */
int df_session_truncate(df_session *s, int pos, char *err, size_t errlen);

/* Snapshots (src/model/snapshot.c): save what the session has seen (its
 * position, the cached rows of every attention layer, every recurrent
 * state) to path, crash-safely (a new temporary file beside it, fsync,
 * rename, fsync of the folder), with the caller's user_len bytes (e.g. the
 * tokens it holds) and a checksum. df_session_load checks the whole file
 * (the model's identity, the session's shape and KV type, sizes, checksum)
 * before it changes the session: -1 with err (the session unchanged) for a
 * damaged, truncated or stale file. It needs n_ctx >= the saved position;
 * up to user_cap of the user bytes are copied to user, *user_len = their size. */
int df_session_save(df_session *s, const char *path, const void *user, size_t user_len, char *err, size_t errlen);
int df_session_load(df_session *s, const char *path, void *user, size_t user_cap, size_t *user_len, char *err,
                    size_t errlen);

/* Record, for every token and MoE layer, the experts the router chose and
 * their weights, appending to the file at path (format: docs/trace.md).
 * path NULL stops tracing; -1 with err if writing the trace failed (a write
 * error also fails the df_decode that meets it). Returns 0 or -1 with err. */
int df_session_trace_experts(df_session *s, const char *path, char *err, size_t errlen);

/* Run n tokens at the session's current position. If logits != NULL it
 * receives n_vocab floats: for every token (all_logits = 1, n x n_vocab,
 * row-major) or only for the last (all_logits = 0). */
int df_decode(df_session *s, const int32_t *tokens, int n, float *logits, int all_logits, char *err, size_t errlen);
/* Fails (-1 with err) rather than return garbage: when a logit is NaN or Inf
 * (damaged weights), or a model file changed size or mtime since loading. */

/* The session's own logits buffer: n_batch x n_vocab floats, counted in its
 * memory (and so in a budget's plan). It may be df_decode's logits for up to
 * n_batch tokens with all_logits = 1. */
float *df_session_logits(df_session *s);
int df_session_n_batch(const df_session *s);

/* ---- sampling ---- */

typedef struct df_sampler_params {
    float temp;            /* <= 0: greedy */
    int top_k;             /* <= 0: off */
    float top_p;           /* >= 1: off */
    float min_p;           /* <= 0: off */
    float repeat_penalty;  /* 1: off */
    int repeat_last_n;     /* window for the penalty */
    uint64_t seed;
} df_sampler_params;

df_sampler_params df_sampler_default_params(void);
df_sampler *df_sampler_new(const df_sampler_params *p, int n_vocab);
void df_sampler_free(df_sampler *s);
/* Pick a token from logits (n_vocab floats; not modified). */
int32_t df_sampler_sample(df_sampler *s, const float *logits);
/* Tell the sampler a token was emitted (for the repetition penalty). */
void df_sampler_accept(df_sampler *s, int32_t id);
/* The sampler's changing state (its generator and the repetition window) as
 * bytes, so that a job stopped after some tokens continues exactly as an
 * uninterrupted one (jobs/, docs/jobs.md). df_sampler_get_state writes up to
 * cap bytes and returns the size the state needs (call with cap 0 to ask).
 * df_sampler_set_state takes such bytes from a sampler made with the same
 * parameters; -1 (state unchanged) if they are damaged or from another. */
size_t df_sampler_get_state(const df_sampler *s, void *buf, size_t cap);
int df_sampler_set_state(df_sampler *s, const void *buf, size_t len);

/* ---- memory planning ---- */

/* What a memory budget buys, without loading or running the model. */
typedef struct df_plan {
    uint64_t budget, minimum;        /* bytes; minimum = smallest budget that can run it */
    uint64_t session_bytes;          /* KV cache and scratch for one session */
    uint64_t overhead_bytes;         /* metadata, tokenizer, thread stacks */
    uint64_t resident_bytes;         /* weights kept in memory */
    uint64_t dense_bytes, expert_bytes; /* all non-expert / routed-expert weights */
    int n_dense_streamed, n_layer;   /* layers whose dense weights stream from disk */
    uint64_t dense_slot_bytes;       /* one layer buffer (two when streaming) */
    int n_expert_slots, n_experts_total; /* expert cache capacity / routed experts in all layers */
    uint64_t expert_slot_bytes;      /* one (layer, expert) */
    int n_expert_used, n_moe_layers;
    uint64_t dense_layer_bytes;      /* average dense weights of one layer */
    int n_ctx_train;                 /* the model's trained context */
} df_plan;

/* Plan p->mem_budget for the model at path (p->n_ctx etc. size the session).
 * The model is checked as loading checks it (architecture, hyperparameters,
 * every tensor's presence, type and shape, tokenizer) without reading
 * weights. Returns 0 and fills out even when the budget is too small
 * (out->minimum tells); -1 with err when the model cannot run at all. */
int df_model_plan(const char *path, const df_model_params *p, df_plan *out, char *err, size_t errlen);

/* Machine probes: disk read throughput (bytes/s) of `threads` concurrent
 * O_DIRECT reads of `chunk` bytes (0: 4 MiB) at random offsets of path for
 * about `seconds`, and memory read bandwidth (bytes/s). -1 on failure. */
double df_probe_disk(const char *path, double seconds, int threads, uint64_t chunk, char *err, size_t errlen);
double df_probe_memory(double seconds, uint64_t max_bytes); /* reads a buffer of at most max_bytes (0: 256 MiB) */
/* The fraction of a file's size that is allocated on disk (st_blocks): about
 * 1 for an ordinary file, near 0 for a sparse "shape-only" model whose data
 * are holes (mkmodel --shape-only), which no disk probe can measure. -1 if
 * the file cannot be examined. */
double df_file_allocated(const char *path);
/* The disk under `dir` (where a model would live), when the model file itself
 * cannot be read for a measurement: writes a scratch file of `bytes` there
 * (a new, uniquely named file: O_EXCL), measures it as df_probe_disk does and
 * removes it. -1 with err on failure. */
double df_probe_disk_scratch(const char *dir, uint64_t bytes, double seconds, int threads, uint64_t chunk, char *err,
                             size_t errlen);
/* Disk read throughput (bytes/s) as streaming decode will see it: opens the
 * model under p's budget and I/O settings and, for about `seconds`, reads
 * the routed experts of random tokens layer by layer (and the streamed dense
 * layers) through the weight store's own cache, queues and reading engine.
 * 0 when nothing would stream under this budget; -1 with err on failure. */
double df_model_probe_disk(const char *path, const df_model_params *p, double seconds, char *err, size_t errlen);

/* Weight-store counters of a loaded model (disk streaming and expert cache). */
typedef struct df_io_stats {
    uint64_t bytes_read, hits, misses, prefetch_issued, prefetch_used, expert_fetches;
    uint64_t unguessed;         /* demanded experts absent from memory that no guess had asked for */
    double read_seconds, wait_seconds;
    int streaming, io_threads;
    char io_engine[16];         /* "pread" or "io_uring" ("" when not streaming) */
    char io_note[160];          /* why it is not the engine asked for, or "" */
    char hot_note[512];         /* why the hot-expert file is not read or will not be saved, or "" */
} df_io_stats;
void df_model_io_stats(const df_model *m, df_io_stats *out);

/* ---- chat templates (docs/chat.md) ---- */

/* One plain message. Messages with tool calls, tool results or other fields
 * go in extra_vars_json as "messages": [...] (which then replaces msgs). */
typedef struct df_chat_message {
    const char *role;    /* "system", "user", "assistant", "tool" */
    const char *content;
} df_chat_message;

/* Render a chat into the model's prompt text with its tokenizer.chat_template
 * (or template_override), byte-identical to Hugging Face's Jinja
 * (@huggingface/jinja). Variables: messages, add_generation_prompt, bos_token
 * and eos_token (the model's token texts; m may be NULL with an override),
 * then extra_vars_json (a JSON object or NULL: tools, enable_thinking,
 * messages, ...), whose keys override. *out: malloc'd text (free() it). */
int df_chat_apply_template(const df_model *m, const char *template_override, const df_chat_message *msgs, int n_msgs,
                           int add_generation_prompt, const char *extra_vars_json, char **out, char *err,
                           size_t errlen);
/* The model's tokenizer.chat_template, or NULL if it has none. */
const char *df_chat_template(const df_model *m);
/* Render any template with the variables of a JSON object (NULL: none). */
int df_chat_render(const char *tmpl, const char *vars_json, char **out, char *err, size_t errlen);

/* ---- misc ---- */

const char *df_version(void);
const char *df_isa(void);   /* SIMD level selected at run time */

#ifdef __cplusplus
}
#endif
#endif
