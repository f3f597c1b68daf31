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
 * with a one-line reason in err (which may be NULL); df_model_load,
 * df_session_new, df_decode and df_decode_batch return a negative status
 * code instead of -1 (enum df_status), so a caller can act on the kind of
 * failure. Nothing here prints or exits.
 *
 * Threads: a model may serve several sessions, and sessions may be created,
 * used and freed on any thread (one thread at a time per session). A model
 * runs one decode at a time: df_decode and df_decode_batch hold the model's
 * lock while they run, so a second caller on another thread waits until the
 * first returns (blocking; nothing fails with "busy" for that). Serve
 * several sequences of one model at once with df_decode_batch. Reading
 * df_model_io_stats or opening sessions while another thread decodes is
 * safe (they take the same lock briefly). The tokenizer calls are read-only.
 */
#ifndef DELTAFIN_H
#define DELTAFIN_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct df_model df_model;
typedef struct df_session df_session;
typedef struct df_sampler df_sampler;

/* What went wrong, beside err's message. */
enum df_status {
    DF_OK = 0,
    DF_E_INPUT = -1,       /* bad input: an argument, a token id, a malformed or damaged model file */
    DF_E_NOMEM = -2,       /* out of memory, or more than the memory budget (mem_budget) allows */
    DF_E_IO = -3,          /* a file could not be opened or read (weights streamed from a file that went away) */
    DF_E_CTX_FULL = -4,    /* the tokens do not fit in the rest of the session's context */
    DF_E_CANCELLED = -5,   /* the session's abort_cb asked to stop (df_session_params) */
    DF_E_UNSUPPORTED = -6, /* well-formed but not runnable here: architecture, scaling type, vocab-only model */
    DF_E_BUSY = -7         /* a decode started on the thread already decoding with this model (from abort_cb) */
};

/* ---- models ---- */

struct df_plan; /* below: what df_model_plan says */

typedef struct df_model_params {
    int n_threads;      /* worker threads for compute (0 = number of online CPUs) */
    int use_mmap;       /* 1: map the file (default); 0: read weights into memory; -1: read them
                         * in when they take at most half of the RAM and of df_memory_room(),
                         * else map (the CLI's default: generation reads anonymous memory
                         * faster than a mapped page cache, and only weights read in are
                         * packed for the kernels: bench/RESULTS.md). A mapped file
                         * truncated under a running model can only raise SIGBUS (the CLI
                         * reports it); other changes to it fail df_decode (docs/files.md) */
    /* Memory budget (0 = none). With a budget, Deltafin plans everything it
     * holds (weights kept in memory, the expert cache, n_sessions sessions
     * of n_ctx tokens) within mem_budget bytes, streams the rest from disk, and fails
     * to load, naming the minimum, if the model cannot run within it. */
    uint64_t mem_budget;
    int n_ctx;          /* context the session will use (planning; 0 = default) */
    int n_batch;        /* its batch (0 = 512) */
    int n_sessions;     /* sessions open at once that the budget holds (0 = 1; a server's --parallel) */
    int kv_type;        /* its KV cache type (enum df_kv_type) */
    int io_threads;     /* concurrent disk reads: reader threads or io_uring depth (0 = 8) */
    int io_engine;      /* enum df_io_engine */
    const char *hot_file; /* learned hot experts: NULL = "<model>.hot", "" = none. A file named
                           * here that is the model, not a regular file, or cannot be written fails
                           * the load; the default one is then skipped and df_io_stats.hot_note says why */
    int vocab_only;     /* 1: metadata and tokenizer only (no tensors needed, no session possible) */
    /* Requantize the resident dense (non-expert) matrices at load time to this
     * type, "q4_K" or "q8_0" (NULL or "": keep the file's types): for when the
     * dense part does not fit a budget at its published type. Costs accuracy
     * (bench/RESULTS.md measures it) and load time; routed experts, f32 tensors
     * and dense layers that stream under a budget keep their types. */
    const char *resident_type;
    int spec_k_max;     /* the sessions it plans for (n_sessions of n_ctx tokens) run speculative
                         * decoding of up to this many guesses a pass (df_session_params.spec_k_max;
                         * 0 = none): a model with recurrent layers plans their rollback room */
    /* 1: also bind, plan and read the model's first NextN/MTP block (files of the families that have
     * one, carrying blk.N.nextn.*), which speculative decoding's DF_SPEC_MTP guesses with; sessions then
     * keep its KV cache (counted by the budget) and run it after every batch. 0 (default): the
     * blocks are never read. Ignored by files without one (df_spec_new says why). */
    int mtp;
    /* Bytes the caller itself holds under mem_budget (a server's prefix caches and per-slot buffers):
     * the plan leaves them out, and its minimum counts them. */
    uint64_t mem_reserve;
    /* 1: under mem_budget, read what streams through the kernel's page cache and leave it there (the
     * CLI's --page-cache): a second tier of expert cache in memory the budget does not count and the
     * kernel may take back at any time, so that a miss of the budget's cache costs a copy, not a disk
     * read, while the machine has room (df_plan_predict_tiers says what it gives). 0 (default): reads
     * bypass the page cache (O_DIRECT, else dropped after reading), which then never holds the model. */
    int page_cache;
    /* In a cluster (df_cluster_init, docs/cluster.md): 1 cuts the model's layers into contiguous ranges,
     * one per rank, the hidden state going from rank to rank (the CLI's --split layers); 0 (default)
     * shares the routed experts of every layer out (--split experts), or, for a model without any, runs
     * it on rank 0 alone. */
    int split_layers;
    /* Called by df_model_load under mem_budget in one process, before any weight is read, with the plan
     * it loads by (df_model_plan's for the same file and parameters, made from the load's own reading of
     * the file: the CLI prints it, and a large model's dense part then takes a while to read); NULL
     * (default): none. Not called in a cluster (df_model_plan_rank plans each rank). */
    void (*plan_cb)(const struct df_plan *plan, void *ctx);
    void *plan_ctx;
} df_model_params;

/* How streamed weights are read: DF_IO_AUTO picks the engine measured
 * fastest (bench/io.sh); io_uring falls back to pread where the kernel or a
 * sandbox refuses it (df_io_stats.io_note says so). */
enum df_io_engine { DF_IO_AUTO = 0, DF_IO_PREAD = 1, DF_IO_URING = 2 };

df_model_params df_model_default_params(void);

/* Load a GGUF model (first file of a split model). DF_OK or a df_status. */
int df_model_load(const char *path, const df_model_params *p, df_model **out, char *err, size_t errlen);
void df_model_free(df_model *m);
/* 1 if path names one of the model's files (the same file: st_dev and
 * st_ino, through any link). Never write output there. */
int df_model_is_file(const df_model *m, const char *path);
/* Save the learned hot experts now (with a budget; df_model_free does it
 * otherwise, silently). 0 when saved or there is nothing to save. */
int df_model_save_hot(df_model *m, char *err, size_t errlen);

/* Writing a file at a path somebody named (docs/files.md, "The rule"; every
 * writer of Deltafin goes through these). A target that exists is replaced
 * only if it is a regular file of this user, none of m's files (m may be
 * NULL) and, when magic is given, begins with those magic_len bytes (a file
 * of the same format) or is empty; a symbolic link, FIFO, device, folder,
 * another user's or another format's file is left as it was: df_out_open
 * returns NULL with the reason. The bytes go to a new temporary file beside
 * the target (write to df_out_fd, or to df_out_stream's FILE); df_out_commit
 * fsyncs it and puts it in place (never over a file that appeared or changed
 * meanwhile) and frees the handle; df_out_abort removes it. df_out_check
 * answers the same question without creating anything (0: may be written). */
/* Reading the whole of a file somebody named (docs/files.md): "-" (or a name
 * of the same file, as /dev/stdin) is standard input, read as it comes and
 * given up as soon as *stop is set (stop may be NULL: a signal flag, checked
 * every 100 ms); anything else must be a regular file (a FIFO, device or
 * folder is refused at once, never waited on) of at most max bytes. With
 * DF_INPUT_TEXT a NUL byte is refused. Returns the bytes, NUL-terminated
 * (free() them), *len their count; NULL with err. */
#define DF_INPUT_TEXT 1
char *df_read_input(const char *path, size_t max, int flags, size_t *len, volatile sig_atomic_t *stop, char *err,
                    size_t errlen);

typedef struct df_out df_out;
int df_out_check(const char *path, const char *magic, size_t magic_len, const df_model *m, char *err, size_t errlen);
df_out *df_out_open(const char *path, const char *magic, size_t magic_len, const df_model *m, char *err,
                    size_t errlen);
int df_out_fd(const df_out *o);
FILE *df_out_stream(df_out *o);
int df_out_commit(df_out *o, char *err, size_t errlen);
void df_out_abort(df_out *o);

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
    uint64_t packed_bytes;   /* weight bytes held interleaved for the SIMD kernels (now; a matrix read
                                by rows is given back the file's layout) */
} df_model_info;
void df_model_get_info(const df_model *m, df_model_info *out);

/* ---- tokenizer ---- */

/* Tokenize len bytes. add_special: BOS/EOS as the model says. parse_special:
 * recognise special-token texts. Writes up to max ids, *n_out = total needed. */
int df_tokenize(const df_model *m, const char *text, size_t len, int add_special, int parse_special, int32_t *out,
                int max, int *n_out, char *err, size_t errlen);
/* Bytes of one token (see tok_piece); returns length or -1 for a bad id. */
int df_token_to_piece(const df_model *m, int32_t id, char *buf, int buflen);
/* The same, with a control token's own text (<|channel|>, [TOOL_CALLS]...) where df_token_to_piece gives none. */
int df_token_text(const df_model *m, int32_t id, char *buf, int buflen);
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
    /* Cancellation (NULL: none). df_decode calls abort_cb(abort_ctx) before
     * every batch of n_batch tokens and, for models without recurrent layers,
     * between layers; a non-zero return stops it with DF_E_CANCELLED. The
     * session then holds every batch completed before the stop (its position
     * says how far: a multiple of n_batch past where the call began) and
     * none of the interrupted one, and can go on decoding from there. It is
     * called on the decoding thread with the model's lock held: it must not
     * decode with the same model (that fails with DF_E_BUSY). */
    int (*abort_cb)(void *abort_ctx);
    void *abort_ctx;
    /* Speculative decoding of up to this many guesses a pass (df_spec_params.k_max;
     * 0 = none, the default). Only a model with recurrent layers uses it: such a
     * session keeps room to roll a pass of spec_k_max + 1 rows back (a copy of its
     * recurrent state and those rows' inputs to the recurrences, capped at n_batch
     * rows; df_session_new's size and the memory plan count them). Without it,
     * speculation on such a model is off (df_spec_stats.why says so). */
    int spec_k_max;
} df_session_params;

df_session_params df_session_default_params(void);

/* DF_OK or a df_status (DF_E_NOMEM: beyond the budget's session reserve or out of memory). */
int df_session_new(df_model *m, const df_session_params *p, df_session **out, char *err, size_t errlen);
void df_session_free(df_session *s);
/* Number of tokens in the session's KV cache. */
int df_session_pos(const df_session *s);
int df_session_n_ctx(const df_session *s);
/* Forget everything from position pos onward (pos = 0 clears the session).
 * A model with recurrent layers (its df_plan lists a "recurrent state")
 * keeps a running state that cannot be rewound in general: there only pos = 0,
 * pos = the current position, and (inside speculative decoding, df_spec_*)
 * a position within the pass it just verified are accepted (and after a
 * df_decode of such a model failed part way, only a reset to 0 makes the
 * session usable again). Returns 0, or -1 with err (pos out of range, or a
 * rewind of recurrent state). */
int df_session_truncate(df_session *s, int pos, char *err, size_t errlen);

/* Snapshots (src/api/snapshot.c): save what the session has seen (its
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
/* The same in memory (the server's prefix cache): df_session_save_mem
 * mallocs *out (*len bytes, free() it) holding the session's position and
 * memory; df_session_load_mem puts it back into a session of the same model
 * and shape (-1 with err, the session unchanged, for another shape).
 * df_snapshot_peek reads only a snapshot file's user bytes (up to user_cap;
 * -1 with err for a file that is not a snapshot of model m, or damaged). */
int df_session_save_mem(df_session *s, void **out, size_t *len, char *err, size_t errlen);
int df_session_load_mem(df_session *s, const void *buf, size_t len, char *err, size_t errlen);
int df_snapshot_peek(const df_model *m, const char *path, void *user, size_t user_cap, size_t *user_len, char *err,
                     size_t errlen);

/* Prompt caches (src/api/promptcache.c; the CLI's --prompt-cache): a
 * snapshot (as above) of a session that has decoded tokens[0..pos), the
 * tokens kept with it. df_prompt_cache_load resets s, loads the file and
 * keeps the longest prefix it shares with tokens[0..n): *n_reused positions
 * (0 when nothing matches, or when a model with recurrent layers would have
 * to be rewound); the caller decodes tokens[*n_reused..). Pass n one short
 * of the prompt to keep its last token's logits to compute. -1 with err (the
 * session reset to 0) for a file that is missing, damaged, not a prompt
 * cache, or from another model or session shape. */
int df_prompt_cache_save(df_session *s, const char *path, const int32_t *tokens, char *err, size_t errlen);
int df_prompt_cache_load(df_session *s, const char *path, const int32_t *tokens, int n, int *n_reused, char *err,
                         size_t errlen);
/* The tokens a prompt cache file of model m holds (up to cap; *n of them),
 * without loading it; -1 with err for a file that is not one. */
int df_prompt_cache_peek(const df_model *m, const char *path, int32_t *tokens, int cap, int *n, char *err,
                         size_t errlen);

/* Record, for every token and MoE layer, the experts the router chose and
 * their weights, into a new file at path (format: docs/trace.md; written
 * through df_out_open, so an existing path must be an earlier trace, and the
 * file appears there when tracing stops: path NULL, another path, or
 * df_session_free). -1 with err if the path is refused or writing the trace
 * failed (a write error also fails the df_decode that meets it). */
int df_session_trace_experts(df_session *s, const char *path, char *err, size_t errlen);

/* Record every discrete choice inside the model whose margin is at most eps
 * into a new text file at path (as df_session_trace_experts: path NULL ends
 * it): a line "position P layer L KIND margin M" per choice, KIND "router"
 * (the experts; M as docs/trace.md's margin) or "indexer" (the keys a sparse
 * attention attends: the worst chosen score minus the best left out, over the
 * largest score). A margin at float resolution is a tie that any rounding may
 * break: where two exact engines part, it says whether such a tie is why
 * (tests/sweep.sh). */
int df_session_trace_ties(df_session *s, const char *path, float eps, char *err, size_t errlen);

/* Run n tokens at the session's current position. If logits != NULL it
 * receives n_vocab floats: for every token (all_logits = 1, n x n_vocab,
 * row-major) or only for the last (all_logits = 0). Returns DF_OK or a
 * df_status: DF_E_INPUT (bad token, or after a failure inside recurrent
 * layers until a reset), DF_E_CTX_FULL, DF_E_CANCELLED, DF_E_IO (a weight
 * could not be read, or a model file changed size or mtime since loading),
 * DF_E_INPUT also when a logit is NaN or Inf (damaged weights): it fails
 * rather than return garbage. A batch that fails is not part of the
 * sequence: the position stays after the last completed batch. */
int df_decode(df_session *s, const int32_t *tokens, int n, float *logits, int all_logits, char *err, size_t errlen);
/* df_decode that also hands out every row's last-layer hidden state after
 * the final norm (what llama.cpp calls h_nextn, the input of a model's MTP
 * block): hidden (NULL: none, then it is df_decode) receives n x n_embd
 * floats. DF_E_UNSUPPORTED for architectures whose last hidden state is not
 * one row (hyper-connection streams, a mix of banked residuals). */
int df_decode_hidden(df_session *s, const int32_t *tokens, int n, float *logits, int all_logits, float *hidden,
                     char *err, size_t errlen);

/* Decode several sessions of one model in one call (a server's step):
 * session i consumes n_tokens[i] tokens[i] at its own position, and
 * logits[i] (logits NULL, or an entry NULL: none) receives its last token's
 * n_vocab logits. Each session gets exactly what df_decode would give it
 * alone. The input of every session is checked before any runs; a failure
 * while running stops there (err names the session; sessions before it have
 * advanced). Consecutive sessions whose tokens fit together in the first
 * one's n_batch (each within its own) run as the rows of one forward pass,
 * every architecture: generation steps and prompts alike (a new prompt is
 * prefilled beside the others' steps), each weight read once for all of
 * them, and under a budget each MoE layer asks for the union of the rows'
 * experts once (sessions with abort_cb or an expert trace excepted;
 * df_io_stats counts passes and unions). The rest run one after another
 * under one hold of the model's lock. */
int df_decode_batch(df_session *const *sessions, int n_sessions, const int32_t *const *tokens, const int *n_tokens,
                    float *const *logits, char *err, size_t errlen);

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
    int repeat_last_n;     /* window for the penalties */
    uint64_t seed;
    /* OpenAI's additive penalties over the same window: a token seen there loses presence_penalty, and
     * frequency_penalty for each time it was seen (0: off) */
    float presence_penalty, frequency_penalty;
} df_sampler_params;

df_sampler_params df_sampler_default_params(void);
df_sampler *df_sampler_new(const df_sampler_params *p, int n_vocab);
void df_sampler_free(df_sampler *s);
/* Pick a token from logits (n_vocab floats; not modified). */
int32_t df_sampler_sample(df_sampler *s, const float *logits);
/* Add bias[i] to token ids[i]'s logit before anything else (OpenAI's logit_bias: -100 bans a token, +100 all but
 * forces it); n = 0 removes them. DF_OK, DF_E_INPUT (an id outside the vocabulary, a bias not finite) or
 * DF_E_NOMEM. */
int df_sampler_set_logit_bias(df_sampler *s, const int32_t *ids, const float *bias, int n);
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

/* ---- constrained sampling (src/api/constrain.c; docs/server.md, "Constrained output") ---- */

typedef struct df_grammar df_grammar;
/* A grammar in llama.cpp's GBNF syntax (start rule `root`) for model m's vocabulary. A sampler given it picks
 * only tokens whose text continues a text the grammar accepts (control tokens never), and an end-of-generation
 * token only where that text is complete. DF_OK, DF_E_INPUT with err (the line and what is wrong: syntax, an
 * undefined rule, left recursion, a size limit) or DF_E_NOMEM. It must outlive the samplers given it. */
int df_grammar_new(const df_model *m, const char *gbnf, size_t len, df_grammar **out, char *err, size_t errlen);
void df_grammar_free(df_grammar *g);
/* Let g's samplers emit the control tokens ids[0..n) where g spells their text (a tool format's markers that are
 * special tokens in the model's file: <|channel|>, [TOOL_CALLS]...); other control tokens stay refused. Set it
 * before giving g to a sampler. DF_OK, DF_E_INPUT, DF_E_NOMEM. */
int df_grammar_allow_tokens(df_grammar *g, const int32_t *ids, int n);
/* Constrain s by g from its next token on (NULL: no longer); df_sampler_accept advances it. A sampler's state
 * (df_sampler_get_state) does not include its grammar's. DF_OK or DF_E_NOMEM. */
int df_sampler_set_grammar(df_sampler *s, const df_grammar *g);
/* The same, lazily (llama.cpp's lazy grammars): nothing is constrained until the output writes one of the n
 * trigger texts; from there on g applies, fed the output from the trigger (g's root matches from the trigger's
 * first byte). Tokens without text (control tokens) never trigger. DF_OK, DF_E_INPUT (an empty trigger),
 * DF_E_NOMEM. */
int df_sampler_set_grammar_lazy(df_sampler *s, const df_grammar *g, const char *const *triggers, int n);
/* 1 when s's grammar is complete and only end-of-generation may follow (0 without a grammar). */
int df_sampler_grammar_done(const df_sampler *s);
/* A JSON Schema (the text of a JSON object, or true) as a GBNF grammar (*gbnf malloc'd) matching exactly the
 * JSON texts valid under it. DF_OK, or DF_E_INPUT with err naming what the schema asks that cannot be compiled
 * (the keyword and where), never a grammar that drops a constraint. */
int df_json_schema_to_grammar(const char *schema, size_t len, char **gbnf, char *err, size_t errlen);

/* ---- tool calls (src/text/toolcall.c; docs/server.md, "Tool calls") ---- */

/* How a family's model writes a call to a tool, detected from its chat template as llama.cpp does. */
typedef enum {
    DF_TOOLS_GENERIC,      /* any other template: {"tool_calls": [{"name": ..., "arguments": {...}}]} */
    DF_TOOLS_HERMES,       /* Qwen3, Qwen2.5, Hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call> */
    DF_TOOLS_QWEN_XML,     /* Qwen3-Coder, Qwen3.5: <tool_call><function=f><parameter=k>v</parameter>... */
    DF_TOOLS_GLM,          /* GLM-4.5 to 5: <tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value>... */
    DF_TOOLS_MINIMAX,      /* MiniMax M2: <minimax:tool_call><invoke name="f"><parameter name="k">v</parameter>... */
    DF_TOOLS_KIMI_K2,      /* Kimi K2: <|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{...}... */
    DF_TOOLS_KIMI_K3,      /* Kimi K3: <|open|>call tool="f"<|sep|><|open|>argument key="k"...<|sep|>v... */
    DF_TOOLS_DEEPSEEK_R1,  /* DeepSeek V3, R1: <｜tool▁call▁begin｜>function<｜tool▁sep｜>f ```json {...}``` */
    DF_TOOLS_DEEPSEEK_V31, /* DeepSeek V3.1: <｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜> */
    DF_TOOLS_DSML,         /* DeepSeek V3.2: <｜DSML｜function_calls><｜DSML｜invoke name="f">... */
    DF_TOOLS_DSML_V4,      /* DeepSeek V4: the same in <｜DSML｜tool_calls> */
    DF_TOOLS_HARMONY,      /* gpt-oss: <|channel|>commentary to=functions.f <|constrain|>json<|message|>{...}<|call|> */
    DF_TOOLS_LLAMA3,       /* Llama 3.x: {"name": ..., "parameters": {...}} */
    DF_TOOLS_MISTRAL,      /* Mistral v0.3, Nemo: [TOOL_CALLS][{"name": ..., "arguments": {...}}] */
    DF_TOOLS_MISTRAL_ARGS  /* Mistral Small 3.2, Magistral: [TOOL_CALLS]f[ARGS]{...} */
} df_tool_format;
df_tool_format df_tool_format_detect(const char *chat_template);
const char *df_tool_format_name(df_tool_format f);
/* The format's marker texts (NULL-terminated): special tokens in published files, to be kept in the output's
 * text (df_token_text) so that the calls can be read. */
const char *const *df_tool_format_markers(df_tool_format f);
/* The text a call in format f begins with, as df_tool_calls_grammar spells it: where a lazy grammar of the calls
 * starts (df_sampler_set_grammar_lazy; tool_choice "auto"). */
const char *df_tool_format_trigger(df_tool_format f);
typedef struct {
    char *id;        /* as the model wrote it (some formats name calls: functions.f:0), or NULL */
    char *name;
    char *arguments; /* a JSON object's text; while partial, the start of it that will not change */
    int done;        /* the call is complete */
} df_tool_call;
typedef struct {
    char *content;   /* the text that is not a call (never NULL) */
    char *reasoning; /* harmony's analysis channel, or NULL */
    df_tool_call *calls;
    int n_calls;
} df_tool_parse;
/* The calls in a model's output text[0..len) written in format f (tools_json: the request's tools, whose schemas
 * type XML arguments; may be NULL). partial: the text may still grow; what may become a marker is held back,
 * and arguments are given as far as they are sure. A call that does not parse is content. DF_OK or DF_E_NOMEM;
 * free *out with df_tool_parse_free. */
int df_tool_calls_parse(df_tool_format f, const char *tools_json, const char *text, size_t len, int partial,
                        df_tool_parse *out);
void df_tool_parse_free(df_tool_parse *p);
/* A GBNF grammar (*gbnf malloc'd) matching one call (up to 8 with parallel) in format f to the tools of tools_json
 * (an OpenAI tools array), or only to the one named only, with arguments valid under each function's
 * parameters schema. DF_OK, DF_E_INPUT with err, DF_E_NOMEM. */
int df_tool_calls_grammar(df_tool_format f, const char *tools_json, const char *only, int parallel, char **gbnf,
                          char *err, size_t errlen);

/* ---- speculative decoding (src/api/spec.c) ---- */

/* Guess the next tokens cheaply and verify k of them with one forward pass
 * of the model (a batch with logits for every position), keeping those it
 * agrees with. Greedy output is the plain decode loop's output; with
 * temperature the sampler's draws are the plain loop's draws, so the target
 * distribution is kept. The number of guesses adapts (k_fixed = -1): the
 * acceptance rate and the measured cost of a pass choose the k, 0 = off,
 * that maximises tokens per second. A model with recurrent layers (target or
 * draft) rolls a pass back from a copy of its recurrent state and the pass's
 * rows: its session must be opened with df_session_params.spec_k_max (k_max
 * is capped at it; 0: speculation is off, df_spec_stats.why says so, and each
 * step is one plain decode). */
/* DF_SPEC_MTP: the model's own NextN/MTP block (loaded with df_model_params.mtp) guesses from the
 * target's last hidden state, chained k deep (llama.cpp's draft-mtp). */
enum df_spec_source { DF_SPEC_NONE = 0, DF_SPEC_LOOKUP = 1, DF_SPEC_DRAFT = 2, DF_SPEC_MTP = 3 };

typedef struct df_spec_params {
    int source;           /* enum df_spec_source (default: lookup) */
    int k_max;            /* most guesses per pass, 1..64 (default 4; capped at the batch - 1) */
    int k_fixed;          /* -1: adaptive (default); 0..k_max: always this many (0 = off) */
    int ngram_min, ngram_max; /* prompt lookup: n-gram lengths matched, longest first (default 2..4) */
    df_session *draft;    /* DF_SPEC_DRAFT: a fresh session of the draft model (same vocabulary) */
} df_spec_params;

typedef struct df_spec df_spec;

typedef struct df_spec_stats {
    int k;                 /* k chosen now (0: off) */
    int passes, guessed, accepted, emitted;
    double accept_rate;    /* accepted / compared guesses */
    double t_pass, t_per_guess, t_draft; /* fitted seconds: a pass, each guess more, draft per guess */
    double bytes_per_pass; /* weight bytes read from disk per pass (under a budget) */
    char why[320];         /* why this k */
} df_spec_stats;

df_spec_params df_spec_default_params(void);
/* target has decoded history[0..n_history) (the prompt). 0 or -1 with err
 * (bad parameters; a draft whose vocabulary differs from the model's). */
int df_spec_new(df_session *target, const df_spec_params *p, const int32_t *history, int n_history, df_spec **out,
                char *err, size_t errlen);
/* One step: pending is the last sampled token, not yet decoded (and already
 * given to df_sampler_accept). Decodes it with the guesses, samples with smp
 * (accepting each token into it), and writes 1..max_out new tokens to out;
 * the last is the new pending token. DF_OK or a df_status. */
int df_spec_step(df_spec *sp, df_sampler *smp, int32_t pending, int32_t *out, int max_out, int *n_out, char *err,
                 size_t errlen);
void df_spec_get_stats(const df_spec *sp, df_spec_stats *out);
void df_spec_free(df_spec *sp);

/* ---- memory planning ---- */

/* One kind of per-layer memory a session keeps: its name ("KV cache",
 * "indexer keys"), the layers that keep it, its bytes for one session. */
#define DF_PLAN_MEM_MAX 8
typedef struct df_plan_mem {
    char name[32];
    int n_layers;
    uint64_t bytes;
} df_plan_mem;

/* What a memory budget buys, without loading or running the model. */
typedef struct df_plan {
    uint64_t budget, minimum;        /* bytes; minimum = smallest budget that can run it */
    uint64_t session_bytes;          /* KV cache and scratch for one session */
    uint64_t scratch_bytes;          /* of which the scratch: one for all of a model's sessions (one decode
                                      * at a time), so n_sessions cost n * (session_bytes - scratch_bytes)
                                      * + scratch_bytes */
    uint64_t overhead_bytes;         /* metadata, tokenizer, thread stacks */
    uint64_t resident_bytes;         /* weights kept in memory */
    uint64_t dense_bytes, expert_bytes; /* all non-expert / routed-expert weights */
    int n_dense_streamed, n_layer;   /* layers whose dense weights stream from disk */
    uint64_t dense_slot_bytes;       /* one layer buffer (two when streaming) */
    int n_expert_slots, n_experts_total; /* expert cache capacity / routed experts in all layers */
    uint64_t expert_slot_bytes;      /* one (layer, expert) */
    int n_expert_used, n_moe_layers;
    uint64_t dense_layer_bytes;      /* dense weights of one layer, as in the file (the mean of the streamed
                                      * layers when some stream, else of all; embeddings and head not in it) */
    uint64_t requant_saved_bytes;    /* resident_type: how much smaller the resident dense weights are */
    int n_ctx_train;                 /* the model's trained context */
    int n_ctx;                       /* the context a session is planned for */
    int n_swa_layers, swa_window;    /* sliding-window attention layers and their window */
    int swa_ring;                    /* positions their KV cache keeps (0: the whole context) */
    int n_mem;                       /* what one session of n_ctx positions keeps per layer (in session_bytes), */
    df_plan_mem mem[DF_PLAN_MEM_MAX]; /* one entry per kind: "KV cache", "recurrent state", a family's own */
    int expert_width;                /* floats in an expert's input and output row (n_embd, or the latent) */
    /* From the learned hot file (p->hot_file or MODEL.hot), when there is one (hot_known): the share of
     * all expert uses that fall on the planned experts (1 alone; a rank's share in a cluster), and the hit
     * rate of a cache holding the hottest n_expert_slots of them. Without one, routing is taken as
     * uniform: the hit rate is the cached fraction. */
    int hot_known;
    double hot_share, hot_hit_rate;
    /* Of the experts a generation step needs from disk, in the layers after its first, the share decoding's
     * lookahead asks for while the layer before is computed (its recall; the rest are read only once their
     * router has chosen): as the hot file recorded it (recall_known), else a typical figure. The
     * decode-shaped disk probe guesses that share right (df_model_probe_disk). */
    int recall_known;
    double lookahead_recall;
    int n_guessed_layers;            /* MoE layers the lookahead guesses for: after the first, router in memory */
    int ranks, rank;                 /* df_model_plan_rank: the cluster and which rank (1 and 0: alone) */
    int n_experts_all;               /* the model's routed experts over all layers (n_experts_total alone) */
    int layer_lo, layer_hi;          /* the layers this rank runs, [lo, hi): all but with p->split_layers */
    int64_t carry_floats;            /* floats per token a pipeline's stage hands the next (the residual row, or
                                      * a family's wider state) */
} df_plan;

/* Plan p->mem_budget for the model at path (p->n_ctx etc. size the session).
 * The model is checked as loading checks it (architecture, hyperparameters,
 * every tensor's presence, type and shape, tokenizer) without reading
 * weights. Returns 0 and fills out even when the budget is too small
 * (out->minimum tells); -1 with err when the model cannot run at all. */
int df_model_plan(const char *path, const df_model_params *p, df_plan *out, char *err, size_t errlen);

/* The plan of one rank of `ranks` processes (docs/cluster.md). Sharing the
 * model's routed experts, rank 0 holds the dense part, the sessions and
 * its share; any other rank (rank >= 1) only its share, and plans no context.
 * n_experts_total is then the rank's share, n_expert_slots its cache, and
 * dense_bytes, for a rank other than 0, what it holds besides its slots.
 * A model without routed experts, or with fewer per layer than ranks, is an
 * error. With p->split_layers, the rank runs a range of layers (layer_lo,
 * layer_hi; more ranks than layers is an error): the plan is that stage's,
 * its weights (rank 0's with the embeddings and the output) and its layers'
 * memory of every session. ranks = 1 is df_model_plan. */
int df_model_plan_rank(const char *path, const df_model_params *p, int ranks, int rank, df_plan *out, char *err,
                       size_t errlen);

/* A planner: the model at path read and checked once, as df_model_plan
 * checks it, then planned as df_model_plan plans, under any parameters with
 * the same mtp (budgets, context, sessions, resident type ...), for one
 * process: a program that asks for many plans (the CLI's `plan`: a ladder
 * of budgets) reads the file once. df_planner_plan returns 0 (out filled,
 * as df_model_plan's) or -1 with err. df_planner_describe: df_model_describe
 * of the same file, from the planner's reading (free it before the planner). */
typedef struct df_planner df_planner;
struct df_model_desc; /* below, with df_model_describe */
int df_planner_open(const char *path, const df_model_params *p, df_planner **out, char *err, size_t errlen);
int df_planner_plan(df_planner *pl, const df_model_params *p, df_plan *out, char *err, size_t errlen);
int df_planner_describe(const df_planner *pl, struct df_model_desc **out, char *err, size_t errlen);
void df_planner_free(df_planner *pl);

/* What a plan runs at on a machine whose disk reads disk_bytes_per_s and
 * whose memory reads memory_bytes_per_s (the CLI's `plan` prediction). Per
 * token, the routed experts missing from the cache come from disk (uniform
 * routing: the hit rate is the cached fraction), streamed dense layers are
 * read every token, and every active weight is read from memory once; reads
 * overlap compute as far as the lookahead reads ahead (df_plan.lookahead_recall
 * in df_plan.n_guessed_layers of the MoE layers: docs/memory.md has the rule). */
typedef struct df_plan_speed {
    double hit_rate;                 /* expected expert cache hit rate */
    double disk_bytes_per_token, memory_bytes_per_token;
    double disk_seconds, memory_seconds; /* per token */
    double tokens_per_s;             /* 0 when the plan does not fit its budget */
    double page_cache_hit_rate;      /* df_plan_predict_tiers: the share of expert uses the page cache serves */
    double memory_resident_bytes_per_token; /* of memory_bytes_per_token: the weights kept in memory (not streamed) */
    double disk_idle_seconds;        /* per token: the disk idle while the compute works (docs/memory.md) */
    int lookahead_reads;             /* the lookahead's guesses are expected to be read (they pay) */
} df_plan_speed;
void df_plan_predict(const df_plan *p, double disk_bytes_per_s, double memory_bytes_per_s, df_plan_speed *out);
/* The same with the page cache as a second tier (df_model_params.page_cache) holding page_cache_bytes of
 * what streams: the streamed dense layers first (every token reads them), then experts outside the budget's
 * cache, as many as fit (taken as uniformly used, whatever the hot file says of them); what it serves costs
 * a copy in memory (its bytes read and written), not a disk read. page_cache_bytes 0 is df_plan_predict. */
void df_plan_predict_tiers(const df_plan *p, double disk_bytes_per_s, double memory_bytes_per_s,
                           uint64_t page_cache_bytes, df_plan_speed *out);
/* The same with speculative decoding: each pass verifies k guesses, each
 * kept with probability accept (a guess after a rejected one is not). A
 * pass reads the dense weights once and, per MoE layer, the union of k + 1
 * tokens' experts (uniform routing: repetitive text, which reuses experts,
 * does better); it yields (1 - accept^(k+1)) / (1 - accept) tokens. out is
 * per token as above; k = 0 is df_plan_predict. Bytes only: compute, which
 * grows with k, is not modelled (an upper bound where compute binds). */
void df_plan_predict_spec(const df_plan *p, double disk_bytes_per_s, double memory_bytes_per_s, double accept, int k,
                          df_plan_speed *out);

/* A cluster's tokens/s (docs/cluster.md): rank 0's plan r0 and any other
 * rank's rn, on machines like the one the rates describe, joined by a network
 * of net_bytes_per_s and net_latency_s per message. Per token, every rank
 * reads the misses of its share of each MoE layer's n_expert_used (its part
 * of the experts, n_experts_total / n_experts_all, under uniform routing, or
 * its learned share, df_plan.hot_share) from its own disk, or, with
 * one_machine > 0 (the ranks on one machine, of which one_machine can
 * compute at once: its cores / a rank's threads), all from one disk; and
 * rank 0 exchanges three messages a MoE layer. The memory
 * rate stands for the compute (a rank reads its weights about as fast as it
 * computes with them): rank 0's dense part, then every rank's experts at
 * once. Unlike df_plan_predict, the disk, the compute and the messages add
 * up: a step waits for its slowest rank, and a miss the lookahead did not
 * guess stalls every rank (docs/cluster.md). */
typedef struct df_cluster_speed {
    df_plan_speed rank0, other;      /* each rank's own reads per token (tokens_per_s: alone at that pace) */
    double net_bytes_per_token;      /* through rank 0's link, both ways */
    double net_seconds, disk_seconds, memory_seconds; /* per token, of the cluster */
    double tokens_per_s;             /* 0 when a rank's plan does not fit its budget */
} df_cluster_speed;
void df_plan_predict_ranks(const df_plan *r0, const df_plan *rn, double disk_bytes_per_s, double memory_bytes_per_s,
                           double net_bytes_per_s, double net_latency_s, int one_machine, df_cluster_speed *out);
/* A pipeline (--split layers) of the ranks' plans stage[0..R): each stage
 * reads and computes its layers (each[r], as df_plan_predict) and hands its
 * carry on; the stages take turns, so a token takes the sum of their disk
 * and memory times (in series within a stage too, as in
 * df_plan_predict_ranks: a miss the lookahead did not guess ahead stalls
 * it) and the messages (the pass's head and rows, then R broadcasts of the
 * carry). out's rank0 is stage 0's, other the other stage that reads most. */
void df_plan_predict_stages(const df_plan *stage, int R, double disk_bytes_per_s, double memory_bytes_per_s,
                            double net_bytes_per_s, double net_latency_s, df_plan_speed *each, df_cluster_speed *out);

/* A size such as "6G", "512M", "1.5GiB", "4096" or "64 KB" (K, M, G, T are
 * powers of 1024): bytes, or 0 when s is not such a size. */
uint64_t df_parse_size(const char *s);

/* ---- describing a model file (metadata only: no weights read) ---- */

enum df_value_kind { DF_VALUE_INT = 0, DF_VALUE_FLOAT = 1, DF_VALUE_STRING = 2, DF_VALUE_ARRAY = 3 };

/* One of the architecture's main hyperparameters, as the file stores it. */
typedef struct df_hparam {
    const char *key;       /* without the "<arch>." prefix: "context_length", "rope.freq_base", ... */
    int kind;              /* enum df_value_kind */
    int64_t i;             /* DF_VALUE_INT (booleans are 0 or 1) */
    double f;              /* DF_VALUE_FLOAT */
    const char *s;         /* DF_VALUE_STRING */
    uint64_t n;            /* DF_VALUE_ARRAY: its element count */
} df_hparam;

/* The tensors of one weight type. */
typedef struct df_type_summary {
    const char *name;          /* "q8_0", "mxfp4", ... */
    int supported;             /* 0: Deltafin cannot compute with this type */
    uint64_t n_tensors, bytes;
    double bits_per_weight;    /* of the type's encoding (block bytes / block size) */
    uint64_t expert_bytes;     /* bytes of this type in one routed expert, summed over the MoE layers */
} df_type_summary;

typedef struct df_model_desc {
    int n_files, gguf_version;
    const char *arch;          /* general.architecture, or NULL when missing */
    const char *name;          /* general.name, or NULL */
    int n_hparams;
    const df_hparam *hparams;  /* those present, in a fixed order (context_length first) */
    uint64_t n_tensors, n_params, n_bytes;
    int n_types;
    const df_type_summary *types; /* the types present, in GGUF type-id order */
    /* Routed experts (all 0 for a dense model). */
    uint64_t n_expert;         /* experts per MoE layer */
    uint64_t n_moe_layers;     /* layers with routed experts (an ffn_down_exps tensor) */
    uint64_t n_expert_used;    /* experts per token (expert_used_count; 0 when missing) */
    uint64_t n_params_active;  /* parameters used per token (all but the unselected routed experts) */
    uint64_t expert_bytes;     /* one expert in every MoE layer, all types (the types' expert_bytes summed) */
    /* NextN/MTP blocks (the last nextn_predict_layers of block_count): never run, read or counted as
     * active, except for MTP speculation (df_model_params.mtp, which reads and runs the first). */
    int64_t n_nextn, nextn_first_block;
    uint64_t nextn_params, nextn_bytes;
    /* Tokenizer. */
    const char *tok_model, *tok_pre; /* tokenizer.ggml.model and .pre, or NULL */
    uint64_t n_tokens, n_merges;
} df_model_desc;

/* Read the model file's metadata and tensor directory (a split model's
 * first file: all parts are read) into *out, to be freed with
 * df_model_desc_free. Unlike df_model_load it accepts any architecture and
 * tensor type the GGUF reader knows: it describes, it does not check that
 * Deltafin can run the model. -1 with err when the file is not valid GGUF. */
int df_model_describe(const char *path, df_model_desc **out, char *err, size_t errlen);
void df_model_desc_free(df_model_desc *d);

/* Machine probes: disk read throughput (bytes/s) of `threads` concurrent
 * O_DIRECT reads of `chunk` bytes (0: 4 MiB) at random offsets of path for
 * about `seconds`, -1 on failure; and memory read bandwidth (bytes/s) with
 * `threads` threads (0: one a processor) reading at once, from memory, not
 * the caches, over a buffer of at most max_bytes (0: twice the largest
 * cache, 256 MiB to 1 GiB), -1 when it cannot measure. */
double df_probe_disk(const char *path, double seconds, int threads, uint64_t chunk, char *err, size_t errlen);
double df_probe_memory(double seconds, uint64_t max_bytes, int threads);
/* The rate (bytes/s of weights) at which decoding multiplies the model at path from memory: the engine's own
 * products on one token with p's threads, over copies of the model's weights (its largest per-token types), in
 * a buffer of at most max_bytes (0: twice the largest cache, 256 MiB to 1 GiB). -1 with err on failure.
 * src/api/memprobe.c says how. */
double df_model_probe_memory(const char *path, const df_model_params *p, double seconds, uint64_t max_bytes,
                             char *err, size_t errlen);
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
/* This process's memory cgroup: its folder (DELTAFIN_CGROUP_DIR names
 * another: a test hook for fake readings) and whether it is cgroup v2
 * (memory.current) or v1. -1 when there is none or it cannot be read. */
int df_cgroup_dir(char *dir, size_t n, int *v2);
/* Memory this process can still fill with data the kernel cannot reclaim
 * (bytes): /proc/meminfo's MemAvailable and, in a memory cgroup with a
 * limit, the limit less the cgroup's anonymous memory, whichever is smaller.
 * 0 if neither is known. */
uint64_t df_memory_room(void);
/* Disk read throughput (bytes/s) as streaming decode will see it: opens the
 * model under p's budget and I/O settings and, for about `seconds`, reads
 * the routed experts of random tokens layer by layer (and the streamed dense
 * layers) through the weight store's own cache, queues and reading engine,
 * each layer's experts guessed ahead as decoding's lookahead does, its
 * recall as df_plan.lookahead_recall says. The bytes the demands used per
 * second; 0 when nothing would stream under this budget; -1 with err on
 * failure. */
double df_model_probe_disk(const char *path, const df_model_params *p, double seconds, char *err, size_t errlen);
/* The same, in windows of seconds / 5 (a shared disk's speed drifts: one figure hides how much): each window's
 * rate into rates[0..*n) (at most cap of them; rates may be NULL), going on past `seconds`, up to twice it, while
 * the last three windows after the first are more than 10% from their mean. Returns the rate over the windows
 * after the first (whose reads start the queues and the cache), or the first's when it is alone. */
double df_model_probe_disk_windows(const char *path, const df_model_params *p, double seconds, double *rates, int cap,
                                   int *n, char *err, size_t errlen);

/* Weight-store counters of a loaded model (disk streaming and expert cache),
 * and how decoding shared its weight reads: all counters run from the load
 * on (take differences around a stretch of work). A batched generation
 * step (df_decode_batch) is one pass whose rows are its sessions' tokens;
 * each MoE layer of a pass runs the union of its rows' experts once, so
 * expert_union / moe_runs is the union size per layer and step, and
 * expert_bytes / tokens the expert bytes read per generated token. */
typedef struct df_io_stats {
    /* hits: expert lookups that found it in memory with no read of their own (cached, or preloaded from the
     * hot file); misses: the rest, read now or ahead for a guess of the lookahead (read_ahead, at the end: those
     * whose read had finished). hits / (hits + misses) is the reads the cache saved. */
    uint64_t bytes_read, hits, misses, prefetch_issued, prefetch_used, expert_fetches;
    uint64_t unguessed;         /* demanded experts absent from memory that no guess had asked for */
    uint64_t lookahead_wanted, lookahead_got; /* experts needed from disk in the layers a one-token step's
                                               * lookahead guessed for (a prompt's chunks and batched steps do
                                               * not count), and of them the guessed: its recall */
    uint64_t bytes_packed;      /* expert bytes packed for the SIMD kernels in the cache (once reused) */
    double read_seconds, wait_seconds;
    uint64_t expert_bytes;      /* bytes of the expert slices the passes ran (resident or streamed) */
    uint64_t passes, pass_rows; /* forward passes (a batched step is one) and the tokens they ran */
    uint64_t moe_runs;          /* MoE layers run, summed over passes */
    uint64_t expert_union;      /* distinct experts those runs ran (each run: the union of its rows' choices) */
    int streaming, io_threads;
    uint64_t budget;            /* the budget now (df_model_set_mem lowers it); 0 when none */
    int expert_slots;           /* the expert cache's slots now */
    char io_engine[16];         /* "pread" or "io_uring" ("" when not streaming) */
    char io_note[160];          /* why it is not the engine asked for, or "" */
    char hot_note[512];         /* why the hot-expert file is not read or will not be saved, or "" */
    uint64_t read_ahead;        /* misses whose expert a guess of the lookahead had read by then */
    double disk_idle_seconds;   /* streaming: time with no read in flight (the disk idle while the compute works) */
} df_io_stats;
void df_model_io_stats(const df_model *m, df_io_stats *out);

/* Give memory back while the model is loaded (memory pressure): shrink the
 * expert cache so the model fits `budget` bytes, less than the budget it was
 * loaded with (a larger one changes nothing: the cache never grows). Waits
 * for a decode running in another thread to end. Decoding goes on with fewer
 * experts in memory: the same results, more reads. -1 with err when the
 * cache cannot shrink that far (the message says its least size), or the
 * model has no budget (nothing streams). */
int df_model_set_mem(df_model *m, uint64_t budget, char *err, size_t errlen);

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
/* A common format by name, as llama.cpp's --chat-template NAME (the same bytes as its built-in
 * formats; docs/server.md lists the names); NULL for another name.
 * df_chat_template_builtin_name(i) names the i-th (NULL past the last). */
const char *df_chat_template_builtin(const char *name);
const char *df_chat_template_builtin_name(int i);
/* Render any template with the variables of a JSON object (NULL: none). */
int df_chat_render(const char *tmpl, const char *vars_json, char **out, char *err, size_t errlen);

/* ---- the models a user already has (src/api/stores.c) ---- */

/* A GGUF model found where the Hugging Face cache, llama.cpp, LM Studio or Ollama keep them. */
typedef struct df_found_model {
    char store[16];   /* "hf", "llama.cpp", "lmstudio", "ollama" */
    char name[1024];  /* what df_model_resolve (and -m) accepts: hf:ORG/REPO:FILE, llama.cpp:FILE,
                       * lmstudio:PUBLISHER/REPO/FILE, ollama:NAME:TAG */
    char path[4096];  /* the file (a split model's first part) */
    uint64_t size;    /* bytes, all parts */
} df_found_model;
/* ---- several machines: one model over a cluster (docs/cluster.md) ----
 * Started by mpirun with N processes, every process calls df_cluster_init
 * first. Rank 0 then goes on as a single process would (its df_model_load of
 * a model with routed experts shares them out over the ranks); every other
 * rank calls df_cluster_worker, which holds its share of each model rank 0
 * loads and runs its experts at rank 0's word, until rank 0 leaves
 * (df_cluster_finish, also called at exit). Without mpirun these are no-ops:
 * rank 0 of 1. */
/* DF_OK, or DF_E_UNSUPPORTED when started by mpirun with several processes
 * but MPI cannot be used (the plugin is missing: err says what to do). */
int df_cluster_init(char *err, size_t errlen);
int df_cluster_rank(void);
int df_cluster_size(void);
/* Ranks other than 0: serve until rank 0 leaves. model: this rank's copy of
 * the model when its path differs from rank 0's (NULL: rank 0's path);
 * mem_budget: this rank's budget (0: rank 0's); n_threads: 0 = all cores.
 * DF_OK when rank 0 left; a failure during a step stops the whole job. */
int df_cluster_worker(const char *model, uint64_t mem_budget, int n_threads, char *err, size_t errlen);
/* One rank's share of a model shared over a cluster. */
typedef struct df_rank_stats {
    int rank;
    uint64_t bytes_read, hits, misses; /* its own experts: read from its disk, found in its cache or not */
    int expert_slots;                  /* its expert cache */
    uint64_t experts_owned;            /* the routed experts it runs, over all layers */
    uint64_t net_sent, net_received;   /* payload bytes of this model's messages, on this rank */
    uint64_t messages;                 /* collectives it took part in for this model */
    double wait_seconds;               /* its compute waiting for its disk */
    int layer_lo, layer_hi;            /* the layers it runs, [lo, hi) (a pipeline's stage; sharing experts: all) */
} df_rank_stats;
/* Rank 0: every rank's counters for model m, rank 0's first, into out (cap
 * entries; *n: the number of ranks, 1 for a model that is not shared).
 * Collective: the other ranks answer. DF_OK or DF_E_IO. */
int df_cluster_stats(df_model *m, df_rank_stats *out, int cap, int *n, char *err, size_t errlen);
/* Rank 0: tell the other ranks to leave, and leave (once; later calls do nothing). */
void df_cluster_finish(void);

/* Every model found (*out: malloc'd, free() it; *n of them). DF_OK or DF_E_NOMEM. */
int df_models_find(df_found_model **out, int *n, char *err, size_t errlen);
/* The file a model name means: a store name as above (hf:ORG/REPO:QUANT picks the repository's file whose name
 * holds QUANT; ollama:NAME means NAME:latest), else name itself (a path). DF_OK, or DF_E_INPUT saying why. */
int df_model_resolve(const char *name, char *path, size_t cap, char *err, size_t errlen);

/* ---- misc ---- */

const char *df_version(void);
const char *df_isa(void);   /* SIMD level selected at run time (scalar, avx2, avx512, neon, amx) */
double df_time(void);       /* monotonic wall clock in seconds */
uint64_t df_peak_rss(void); /* peak resident set size of this process in bytes (0 if unknown) */
/* A byte count for people: "512 B", "1.0 KiB", "64.0 MiB", "1.50 GiB". Returns buf. */
const char *df_fmt_bytes(uint64_t n, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
