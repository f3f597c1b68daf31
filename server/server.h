/*
 * server.h - what the `deltafin serve` and `deltafin chat` programs share.
 *
 * Built on the public API only (include/deltafin.h). The pieces:
 *   sched.c    slots (one df_session + df_sampler each), a bounded queue of
 *              jobs and the scheduler thread; sched_step() is the one place
 *              that runs the forward pass for every active sequence.
 *   oai.c      OpenAI request parsing and response JSON (cJSON), Server-Sent
 *              Events chunks.
 *   fields.c   a request's fields read and checked; the errors naming them.
 *   text.c     the text a model emits: UTF-8 cleaning, stop strings, the
 *              reasoning section's split.
 *   serve.c    HTTP (libmicrohttpd): routing, API key, errors, /metrics.
 *   chat_cli.c the interactive terminal chat.
 *   opts.c     the command-line options both commands share.
 *   jobs_api.c /v1/jobs: the durable job queue (jobs/, docs/jobs.md) over HTTP.
 *   pcache.c   prefix caches: the state after recent prompts, in memory
 *              and in --prompt-cache-dir, for prompts that start alike.
 * A job is one generated sequence (one choice of a request). Everything a
 * job's output holds is guarded by the scheduler's mutex.
 */
#ifndef DF_SERVER_H
#define DF_SERVER_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "deltafin.h"

#define SRV_MAX_STOP 4
#define SRV_MAX_KEEP 16  /* control tokens a tool format keeps in the text (tools.c) */
#define SRV_MAX_CALLS 64 /* tool calls streamed per choice */
#define SRV_MAX_TOP_LOGPROBS 20

/* ---- command-line options (opts.c) ---- */
typedef struct srv_opts {
    const char *model, *host, *api_key, *template_file, *alias, *system;
    const char *template_text;  /* --chat-template NAME (a built-in format) or a Jinja template given inline */
    const char *template_kwargs; /* --chat-template-kwargs: a JSON object of extra template variables */
    const char *grammar, *grammar_file; /* chat --grammar GBNF, --grammar-file FILE: every answer constrained */
    const char *cors;           /* serve --cors ORIGIN[,ORIGIN] ("*": any), NULL: none */
    int strict_model;           /* serve --strict-model */
    int log_format;             /* serve --log-format: 0 text, 1 json, 2 none (a line on stderr per request) */
    int pooling;                /* serve --pooling mean|last|cls: how /v1/embeddings pools (enum srv_pooling) */
    const char *jobs_db;    /* serve: /v1/jobs on this database ("" = the default one), NULL = off */
    const char *remote;     /* serve: the remote endpoint of HTTP jobs (--remote), NULL = none */
    int worker;             /* serve: run `deltafin worker` on jobs_db beside the API */
    int port, parallel, queue, ctx, threads, n_predict, kv_f32, ignore_eos;
    int page_cache;         /* --page-cache: df_model_params.page_cache */
    int split_layers;       /* --split layers: df_model_params.split_layers (under mpirun: docs/cluster.md) */
    int conn_per_ip;        /* serve: connections one client address may hold (--max-conn-per-ip; 0: no limit) */
    uint64_t request_mem;   /* serve: request bodies in memory at once (--request-mem; 0: 64 MiB under --mem, else 1 GiB) */
    uint64_t mem;
    const char *pc_dir;             /* --prompt-cache-dir */
    uint64_t pc_mem, pc_disk;       /* --prompt-cache-mem, --prompt-cache-disk (bytes) */
    int pc_min;                     /* --prompt-cache-min: shortest prompt kept (tokens) */
    df_sampler_params sp;
} srv_opts;

/* Parse argv[2..] of `deltafin serve|chat`; prints usage and exits on error. */
void srv_parse_opts(int argc, char **argv, srv_opts *o, int chat);
/* Read a whole (text) file; NULL with err. */
char *srv_read_file(const char *path, size_t max, char *err, size_t errlen);
double srv_now(void);

/* ---- jobs and the scheduler (sched.c) ---- */
typedef struct srv_logprob {
    int32_t id;
    float lp;
    int n_top;
    int32_t top_id[SRV_MAX_TOP_LOGPROBS];
    float top_lp[SRV_MAX_TOP_LOGPROBS];
} srv_logprob;

enum srv_finish { FIN_NONE = 0, FIN_STOP, FIN_LENGTH, FIN_ERROR, FIN_CANCELLED, FIN_TOOL_CALLS /* named only: a stop with calls */ };
/* How an embedding pools the prompt's last hidden states (llama.cpp's --pooling). */
enum srv_pooling { SRV_POOL_NONE = 0, SRV_POOL_MEAN, SRV_POOL_LAST, SRV_POOL_CLS };

typedef struct srv_job {
    /* input (set before submit, read-only afterwards) */
    int32_t *prompt;
    int n_prompt;
    df_sampler_params sp;
    int max_tokens;
    int n_stop;
    char *stop[SRV_MAX_STOP];
    int logprobs; /* -1: none; else how many alternatives per token (0..20) */
    int ignore_eos; /* generate past end-of-generation tokens (llama.cpp's extension) */
    int embed;      /* an embedding job (SRV_POOL_*): the prompt's pooled hidden state, nothing sampled */
    df_grammar *grammar; /* the output's grammar (owned), or NULL */
    char trigger[64];    /* "": the grammar applies from the start; else from where the output writes this */
    int32_t *bias_id;    /* logit_bias (owned) */
    float *bias;
    int n_bias;
    int32_t keep[SRV_MAX_KEEP]; /* control tokens whose text goes into text (a tool format's markers) */
    int n_keep;
    /* output (guarded by the scheduler mutex) */
    char *text;
    size_t len, cap;
    srv_logprob *lps;
    int n_lps, cap_lps;
    int n_gen;              /* tokens generated */
    int n_cached;           /* prompt tokens not processed again (reused) */
    double t_start, t_first, t_end; /* srv_now() when a slot took it, its first token came, it ended (0: not yet) */
    int finish;             /* enum srv_finish; != FIN_NONE when done */
    int stop_hit;           /* FIN_STOP by a stop string: its index in stop[] (-1: an end-of-generation token) */
    char error[256];
    int status;             /* FIN_ERROR: the HTTP status it calls for (0: 500; 501 when the model cannot) */
    float *embd;            /* an embedding job's vector (n_embd floats, L2-normalised) once it ends */
    int n_embd;
    int cancelled;          /* the client went away: stop at the next step */
    int refs;               /* the HTTP side and the scheduler */
    pthread_cond_t *cond;   /* broadcast on progress (the request's) */
    struct srv_job *next;
} srv_job;

typedef struct srv_sched srv_sched;

/* ---- prefix caches (pcache.c) ---- */
typedef struct pcache_stats {
    uint64_t mem_hits, disk_hits, tokens_reused, mem_stores, disk_stores, disk_errors;
    uint64_t mem_bytes, disk_bytes;
    int mem_entries, disk_entries;
} pcache_stats;
typedef struct srv_pcache srv_pcache;
/* mem_limit / disk_limit bytes; dir NULL: memory only; prompts shorter than
 * min_tokens are not kept. 0, or -1 with err (the folder unusable). */
int pcache_new(df_model *m, uint64_t mem_limit, const char *dir, uint64_t disk_limit, int min_tokens,
               srv_pcache **out, char *err, size_t errlen);
void pcache_free(srv_pcache *c);
/* If an entry shares more than have tokens with prompt[0..n), load it into
 * s cut to the shared prefix and return that length; else 0 (s may then
 * have been reset: the caller truncates to what it keeps, or to 0). */
int pcache_restore(srv_pcache *c, df_session *s, const int32_t *prompt, int n, int have);
/* Keep s's state; s holds toks[0..n) (nothing kept otherwise). */
void pcache_store(srv_pcache *c, df_session *s, const int32_t *toks, int n);
void pcache_stats_get(const srv_pcache *c, pcache_stats *out);
const char *pcache_last_error(const srv_pcache *c);

typedef struct srv_metrics {
    uint64_t gen_tokens, prompt_tokens, prompt_cached, requests, rejected, steps, step_seqs;
    double busy_seconds;    /* time spent in steps */
    int queue_depth, active, parallel, queue_cap;
    double recent_tps;      /* generated tokens/s over the last few seconds */
    pcache_stats pc;        /* the prefix caches */
} srv_metrics;

/* n_slots sessions of n_ctx tokens each; queue_cap waiting jobs at most;
 * pc (may be NULL) the prefix caches, owned by the scheduler from then on. */
int sched_new(df_model *m, int n_slots, int queue_cap, const df_session_params *sp, srv_pcache *pc,
              srv_sched **out, char *err, size_t errlen);
void sched_free(srv_sched *s);
/* Queue jobs (all or none). Returns 0, or -1 when the queue is full. Each
 * job's refs becomes 2; release with sched_release. */
int sched_submit(srv_sched *s, srv_job **jobs, int n);
/* Mark a job cancelled (the scheduler drops it at its next step). */
void sched_cancel(srv_sched *s, srv_job *j);
/* Drop the caller's reference; frees the job when the scheduler is done too. */
void sched_release(srv_sched *s, srv_job *j);
pthread_mutex_t *sched_mutex(srv_sched *s);
void sched_metrics(srv_sched *s, srv_metrics *out);
int sched_n_ctx(const srv_sched *s);
/* What one slot holds beside its session (logits, token history, sampler, an embedding's rows and vector):
 * what the budget reserves per slot (serve.c). */
uint64_t sched_slot_bytes(int n_vocab, int n_ctx, int n_embd);
/* What each slot is doing (llama-server's /slots): at most max entries; returns how many. */
typedef struct srv_slot_info {
    int id, busy, embedding;
    int n_past;             /* tokens its cache holds */
    int n_prompt, n_cached, n_decoded, max_tokens; /* its job's (busy) */
    double seconds;         /* since its job started */
} srv_slot_info;
int sched_slots(srv_sched *s, srv_slot_info *out, int max);
/* Create a job (copies prompt and stop strings); NULL when out of memory. */
srv_job *srv_job_new(const int32_t *prompt, int n_prompt);
void srv_job_free(srv_job *j);

/* ---- the text a model emits (text.c) ---- */
/* Append b (n bytes) to *out as valid UTF-8, each ill-formed subsequence
 * becoming U+FFFD as a WHATWG decoder does. Returns the new length or -1. */
size_t srv_utf8_valid_prefix(const char *s, size_t n);
char *srv_utf8_clean(const char *s, size_t n);
/* Bytes of text[0..len) that may be sent now: not an incomplete UTF-8
 * sequence at the end nor a prefix of a stop string. */
size_t srv_safe_len(const srv_job *j);
/* Whether a rendered prompt ends inside an opened reasoning section (DeepSeek R1's and others' templates open
 * <think> for the model, Kimi K3's <|open|>think<|sep|>); *kind: which (oai_req.think_kind). */
int srv_opens_think(const char *t, int *kind);
/* Where a chat answer's reasoning and content lie in its text t[0..n): reasoning t[r0..r1), content
 * t[c0..n). open: the prompt opened a <think> section; final: the text is whole (else what may still become a
 * tag is held back: c0 or r1 short of n). */
typedef struct srv_split {
    size_t r0, r1, c0;
} srv_split;
void srv_split_think(const char *t, size_t n, int open, int kind, int final, srv_split *out);
/* The stop strings: first occurrence of any at or after from (*which: that string's index); -1 if none. */
long srv_find_stop(const srv_job *j, size_t from, int *which);

/* ---- OpenAI requests and responses (oai.c) ---- */
typedef struct oai_error {
    int status;             /* HTTP status */
    char message[512];
    const char *type;       /* "invalid_request_error", ... */
    char param[64];         /* "" = null */
    const char *code;       /* NULL = null */
} oai_error;

typedef struct oai_ctx {
    df_model *m;
    const char *tmpl;       /* --chat-template-file's text, --chat-template's, or NULL (the model's) */
    const char *kwargs;     /* --chat-template-kwargs (a JSON object) or NULL: a request's own override them */
    const char *name;       /* the model's id */
    int strict_model;       /* --strict-model: a request naming another model is a 404 (else the one model answers) */
    int n_ctx;
    int max_piece;          /* the longest token's text in bytes: a prompt of more than n_ctx times it cannot fit */
    long max_values;        /* JSON values a request may hold (srv_json_scan) */
} oai_ctx;

typedef struct oai_req {
    int chat, stream, include_usage, n, max_tokens, logprobs, n_stop, seed_set, ignore_eos;
    int reasoning;          /* chat: <think> sections go to reasoning_content (reasoning_format, default on) */
    int think_open;         /* ... and the prompt opened one: the output starts inside it */
    int think_kind;         /* its tags: 0 <think> </think>, 1 Kimi K3's <|open|>think<|sep|> <|close|>think<|sep|> */
    df_sampler_params sp;
    char *stop[SRV_MAX_STOP];
    int32_t *prompt;
    int n_prompt;
    char *gbnf;             /* the output's grammar (grammar, response_format, json_schema), or NULL */
    int32_t *bias_id;       /* logit_bias */
    float *bias;
    int n_bias;
    int echo;               /* completions: the prompt's text before the output */
    char *echo_text;        /* ... that text */
    const df_model *m;      /* the model the grammar is for */
    int tool_fmt;           /* df_tool_format of the chat template (tools.c) */
    int calls;              /* read the output for tool calls (tools allowed, or gpt-oss's channels) */
    int parallel;           /* parallel_tool_calls */
    char *tools_json;       /* the request's tools, or NULL */
    char trigger[64];       /* the grammar is lazy: it applies from this text on (tool_choice auto) */
    int32_t keep[SRV_MAX_KEEP]; /* the format's marker tokens, kept in the text */
    int n_keep;
} oai_req;

struct cJSON;
/* tools.c: tools, tool_choice and parallel_tool_calls of a chat body into r (after its prompt: r->think_open
 * is known); a grammar for "required" or a named function. 0, or -1 with e filled (400). */
int tools_parse(const oai_ctx *c, const struct cJSON *body, oai_req *r, oai_error *e);
/* The control tokens of model m that spell one of format fmt's markers (to be kept in the output's text), into
 * keep[0..SRV_MAX_KEEP); returns how many. */
int tools_keep_markers(const df_model *m, int fmt, int32_t *keep);
/* The answer's content, reasoning (gpt-oss) and tool_calls from text[0..n) into msg; returns the calls. */
int tools_message(const oai_req *r, const char *text, size_t n, struct cJSON *msg);
typedef struct {
    size_t content, reasoning; /* bytes sent of the parsed content and reasoning */
    int n_calls;               /* calls whose id and name were sent */
    size_t args[SRV_MAX_CALLS]; /* bytes of each one's arguments sent */
} tools_stream_state;
/* The chunks for what is new in text[0..n) (final: it is whole), each given to emit; returns the calls so far,
 * -1 when out of memory. */
int tools_stream(const oai_ctx *c, const oai_req *r, const char *id, long created, int idx, const char *text, size_t n,
                 int final, tools_stream_state *st, void (*emit)(void *arg, char *event), void *arg);
#define TOOLS_CUT 2 /* tools_stream's final: the text ended by max_tokens (1: ended by the model or a stop) */

/* Parse and check a request body; tokenize its prompt (rendering a chat
 * with the template). 0, or -1 with e filled (4xx). */
int oai_parse(const oai_ctx *c, const char *body, size_t len, int chat, oai_req *r, oai_error *e);
/* A request body as a JSON object within the request limits (no NUL in a string, at most max_values values),
 * or NULL with e filled (400 or 413): every route parses its body here. */
struct cJSON *oai_parse_object(const oai_ctx *c, const char *body, size_t len, oai_error *e);
void oai_req_free(oai_req *r);
/* ollama.c: Ollama's API (docs/server.md). Answers end with a new line (NDJSON); errors are {"error"}. */
char *ollama_error(const char *msg);
char *ollama_version(void);
char *ollama_tags(const oai_ctx *c);
char *ollama_show(const oai_ctx *c, const char *body, size_t len, int *status);
/* /api/chat (chat 1) or /api/generate as the OpenAI body oai_parse checks (*as_chat: parse it as a chat);
 * NULL with *status and *err_json. */
char *ollama_to_openai(const oai_ctx *c, const char *body, size_t len, int chat, int *stream, int *as_chat,
                       int *status, char **err_json);
/* A streamed piece (done 0) or the last object (done 1: reason, counts, durations from secs and first_secs). */
char *ollama_answer(const oai_ctx *c, const oai_req *r, int chat, const char *text, size_t n, int done,
                    const srv_job *j, int n_prompt, double secs, double first_secs);
/* llama-server's "timings" of job j: prompt and generation tokens, milliseconds and rates (cJSON object). */
struct cJSON *oai_timings(const srv_job *j);
/* llama-server's extras: the JSON answer of /tokenize ({"content", "add_special", "parse_special",
 * "with_pieces"}), /detokenize ({"tokens"}) and /apply-template ({"messages", ...}: {"prompt"}); NULL with e. */
char *oai_tokenize(const oai_ctx *c, const char *body, size_t len, oai_error *e);
char *oai_detokenize(const oai_ctx *c, const char *body, size_t len, oai_error *e);
char *oai_apply_template(const oai_ctx *c, const char *body, size_t len, oai_error *e);
/* text as a prompt's tokens (*toks malloc'd); 0, or -1 with e (400: it cannot fit the context). */
int oai_tokenize_text(const oai_ctx *c, const char *text, size_t len, int32_t **toks, int *n, oai_error *e);
/* embed.c: /v1/embeddings. A request's inputs as tokens (at most max_inputs of them). */
typedef struct embed_req {
    int n, base64, total;   /* inputs; encoding_format "base64"; their tokens in all */
    int32_t **toks;
    int *n_toks;
} embed_req;
int embed_parse(const oai_ctx *c, const char *body, size_t len, int max_inputs, embed_req *r, oai_error *e);
void embed_req_free(embed_req *r);
/* One embedding job per input (srv_job.embed = pooling); NULL when out of memory. */
srv_job **embed_make_jobs(const embed_req *r, int pooling);
/* The answer once every job has its vector. */
char *embed_response(const oai_ctx *c, const embed_req *r, srv_job *const *jobs);
/* The prompt tokens of a chat request's conversation (what oai_parse would make of it, with no context limit). */
int oai_count_chat(const oai_ctx *c, const char *body, size_t len, int *n_tokens, oai_error *e);
/* anthropic.c: Anthropic's Messages API (docs/server.md). Errors are {"type":"error","error":{"type","message"}}. */
char *anth_error(int status, const char *msg);
char *anth_error_event(const char *msg); /* the same as a stream's "error" event */
/* /v1/messages (count_only 0) or /v1/messages/count_tokens as the OpenAI chat body oai_parse checks; NULL with
 * *status and *err_json. */
char *anth_to_openai(const oai_ctx *c, const char *body, size_t len, int count_only, int *stream, int *status,
                     char **err_json);
char *anth_count_tokens(const oai_ctx *c, const char *body, size_t len, int *status);
/* The whole answer (a "message"), or a stream's events: its start (message_start, content_block_start, ping),
 * a text delta, its end (content_block_stop, message_delta with the stop reason and usage, message_stop). */
char *anth_message(const oai_ctx *c, const oai_req *r, const srv_job *j, int n_prompt, const char *id);
char *anth_stream_start(const oai_ctx *c, const char *id, int n_prompt);
char *anth_stream_delta(const char *text, size_t n);
char *anth_stream_end(const oai_req *r, const srv_job *j, int n_prompt);
/* The jobs of a parsed request (one per choice); NULL when out of memory. */
srv_job **oai_make_jobs(const oai_req *r);
/* The error's JSON, set it (fields.c); oai_bad_request: a 400 naming the field param (and a code, or NULL),
 * returns -1. */
char *oai_error_json(const oai_error *e);
int oai_bad_request(oai_error *e, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void oai_set_error(oai_error *e, int status, const char *type, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The whole (non-streaming) response; under the scheduler mutex. */
char *oai_response(const oai_ctx *c, const oai_req *r, srv_job *const *jobs, const char *id, long created);
/* One Server-Sent Event "data: {...}\n\n": choice idx's new text (may be
 * NULL), its finish reason (FIN_NONE: none), the role on a chat's first. */
char *oai_chunk(const oai_ctx *c, const oai_req *r, const char *id, long created, int idx, const char *text,
                int finish, int first);
/* A chat chunk of reasoning (delta.reasoning_content). */
char *oai_reasoning_chunk(const oai_ctx *c, const oai_req *r, const char *id, long created, int idx, const char *text);
char *oai_usage_chunk(const oai_ctx *c, const oai_req *r, srv_job *const *jobs, const char *id, long created);
const char *oai_finish_name(int finish);
/* Field readers of a request object (fields.c): absent or null leaves *out as it is;
 * a wrong type or range is a 400 naming the field (0, or -1 with e). */
/* Look at a JSON text before it is parsed: 1 if it holds a NUL, raw or as \u0000 inside a string (cJSON's strings
 * would silently end there); *values: how many values it holds at most (cJSON makes a node of ~64 bytes each). */
int srv_json_scan(const char *t, size_t n, long *values);
#define SRV_MAX_STOP_LEN 4096   /* bytes of one stop string */
struct cJSON;
int oai_get_num(struct cJSON *o, const char *k, double lo, double hi, double *out, oai_error *e);
int oai_get_int(struct cJSON *o, const char *k, long lo, long hi, long *out, oai_error *e);
int oai_get_bool(struct cJSON *o, const char *k, int *out, oai_error *e);

/* ---- the durable job queue over HTTP (jobs_api.c; the queue is jobs/queue.h) ---- */
typedef struct srv_jobs srv_jobs;
/* What the operator allows a job submitted over HTTP (a client controls
 * nothing beyond it): mem, n_ctx and threads at most these (0: mem free, the
 * others at most the machine's), and the remote endpoint of every HTTP job,
 * the operator's alone (serve --remote / the config file; NULL: none).
 * Chat jobs are taken only for a model with a chat template (lim->chat). */
typedef struct srv_jobs_limits {
    uint64_t mem;
    int n_ctx, threads;
    const char *remote;
    int chat;               /* the model has a chat template: jobs of "messages" can be rendered */
    int page_cache;         /* serve --page-cache: its jobs run so too (the operator's choice, as remote) */
} srv_jobs_limits;
/* Open the queue's database for the served model (its file path, absolute
 * or not; name: the id requests may give as "model"). */
int srv_jobs_open(const char *db_path, const char *model_path, const char *name, const srv_jobs_limits *lim,
                  srv_jobs **out, char *err, size_t errlen);
void srv_jobs_close(srv_jobs *j);
/* Answer a request whose URL starts with /v1/jobs: the JSON body
 * (malloc'd; NULL when out of memory) and *status. */
char *srv_jobs_handle(srv_jobs *j, const char *method, const char *url, const char *body, size_t len, int *status);

/* ---- chat (chat_cli.c) and server (serve.c) entry points ---- */
int df_cmd_serve(int argc, char **argv);
int df_cmd_chat(int argc, char **argv);

#endif
