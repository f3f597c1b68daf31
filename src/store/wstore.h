/*
 * wstore.h - the weight store: the one way the forward pass reaches weights.
 *
 * DESIGN
 * A model's tensors are registered once (ws_tensor, a handle with shape and
 * type). Compute code asks for a tensor's bytes with ws_fetch (or, for one
 * expert of an expert tensor, ws_fetch_expert), which pins them until the
 * matching release; it never learns where the bytes live. Backends:
 *   WS_MMAP      - the GGUF files are mapped read-only; fetch is a pointer.
 *   WS_RESIDENT  - every tensor is read into aligned memory at open.
 *   WS_STREAM    - a hard memory budget: the planner (ws_plan) keeps what is
 *                  hot resident, caches routed experts in a fixed pool of
 *                  slots, streams dense layers that do not fit through two
 *                  layer buffers, and reads everything else from disk on
 *                  demand with O_DIRECT (no page cache) on reader threads.
 *
 * Invariants: a pointer from a fetch stays valid until its release; a pinned
 * slot is never evicted or overwritten; the bytes a fetch returns are the
 * file's bytes, whatever the backend, so results do not depend on it. The
 * one exception is opt-in: with ws_config.resident_type, resident dense
 * matrices are a requantized copy (requant.h) and their handle's type says
 * so (the same bytes on every CPU; dense layers that stream keep the file's).
 */
#ifndef DF_WSTORE_H
#define DF_WSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

/* WS_PLAN: tensors are registered and checked (name, type, shape) but no
 * byte is mapped or read: how a model is validated before it is planned. */
enum ws_mode { WS_MMAP = 0, WS_RESIDENT = 1, WS_STREAM = 2, WS_PLAN = 3 };

typedef struct ws_tensor {
    const gguf_tensor *gt;  /* directory entry (name, file, offset) */
    int type;               /* element type (enum df_type) */
    int64_t ne[4];          /* ne[0] = row length */
    uint64_t nbytes;
    size_t row_bytes;       /* bytes per row of ne[0] elements */
    int pins;               /* reference count of fetches */
    void *data;             /* resident storage or mapped address; NULL when streamed */
    int layer;              /* blk.N -> N, else -1 */
    int part;               /* expert tensors: 0 gate, 1 up, 2 down; else -1 */
    int streamed;           /* WS_STREAM: bytes live in a slot, not in data */
    size_t slot_off;        /* dense-streamed: offset of its segment in the layer slot */
    int requantized;        /* data is a copy requantized to `type` (ws_config.resident_type), owned by the store */
    int packed;             /* data's full groups of 16 rows (per expert slice) are in pack.h's layout
                             * (streamed experts: per slot, ws_fetch_expert_mm says) */
    int fail;               /* tests only (ws_inject_failure): every fetch of it fails */
    int elsewhere;          /* cfg.experts_only: a tensor this process does not hold (fetching it fails) */
} ws_tensor;

typedef struct wstore wstore;

typedef struct ws_config {
    int mode;               /* enum ws_mode */
    uint64_t budget;        /* WS_STREAM: bytes for everything the process holds */
    uint64_t reserve;       /* bytes of the budget taken by sessions and bookkeeping */
    int n_layer, n_expert, n_expert_used;
    int io_threads;         /* concurrent reads: pread threads or io_uring depth (0: 8) */
    int io_engine;          /* WSIO_AUTO, WSIO_PREAD or WSIO_URING (wsio.h) */
    const char *hot_path;   /* learned hot-expert file (NULL: none) */
    int hot_explicit;       /* the caller named hot_path: a problem with it is an error, not a note */
    int resident_type;      /* 0: tensors keep the file's types; else (DF_TYPE_Q4_K, DF_TYPE_Q8_0) resident
                             * dense matrices are requantized to it at open (requant.h) */
    int page_cache;         /* WS_STREAM: reads go through the kernel's page cache and stay there (no O_DIRECT,
                             * no POSIX_FADV_DONTNEED): df_model_params.page_cache */
    int no_pack;            /* 1: keep every matrix in the file's layout (else resident matrices of types
                             * with a packed kernel are packed at open: pack.h) */
    struct tp_pool *pool;   /* threads to read and pack resident matrices with at open (NULL: the caller's) */
    /* A rank of a cluster (docs/cluster.md): own[l * n_expert + e] != 0 for the routed experts this process
     * computes (NULL: all). Others are never read, cached, planned or preloaded; their uses still count
     * towards the learned hot set. experts_only: hold nothing but the owned experts and their per-expert
     * tensors (blk.N.*_exps.*): a rank that serves experts and runs no layer. hot_readonly: read the hot
     * file, never write it (rank 0 writes it). */
    const uint8_t *own;
    int experts_only, hot_readonly;
    /* A stage of a pipeline (--split layers, docs/cluster.md): layer_hi > 0 holds only the layers
     * [layer_lo, layer_hi), the small tensors outside every layer and, with globals, the embeddings and
     * the output head; the others are never read, planned or cached (fetching them fails). */
    int layer_lo, layer_hi, globals;
} ws_config;

/* What the planner decided (ws_get_plan), in bytes. */
typedef struct ws_plan {
    uint64_t budget, reserve;
    uint64_t resident;          /* tensors kept in memory */
    uint64_t dense_total;       /* all non-expert tensors (a pipeline's stage: its own) */
    uint64_t expert_total;      /* all routed-expert bytes */
    int n_dense_streamed;       /* layers whose dense weights stream */
    int first_streamed;         /* they are the layers from this one on that hold dense weights */
    uint64_t dense_layers;      /* the dense tensors' bytes inside layers as the file holds them (no
                                 * embeddings or output head): of the streamed layers when some stream (what
                                 * a token reads of them, as the store counts its reads), else of all */
    uint64_t dense_slot;        /* bytes of one layer buffer (two when streaming) */
    int n_expert_slots;         /* expert cache capacity, in (layer, expert) slots */
    uint64_t expert_room;       /* the slots the budget leaves room for, more than there are experts or not */
    int n_experts_total;        /* routed experts over all layers */
    uint64_t expert_slot;       /* bytes of one slot (gate + up + down, aligned) */
    uint64_t minimum;           /* smallest budget that can run the model */
    uint64_t requant_saved;     /* resident_type: bytes the resident dense tensors shrink by (0 without;
                                 * below the minimum: what it saves with every dense layer resident) */
} ws_plan;

/* ---- the plan (wsplan.c) ---- */
/* The layer a tensor belongs to by its name ("blk.N."), or -1 (embeddings, output, ...). */
int ws_layer_of(const char *name);
/* 0/1/2 for a routed expert tensor's gate/up/down (blk.N.ffn_{gate,up,down}_exps, 3 dims), else -1. */
int ws_expert_part(const gguf_tensor *t);
/* Does this process hold the tensor named name (of layer l, -1: none; part: ws_expert_part)? A rank that
 * serves experts holds them only; a stage of a pipeline its layers, the small tensors outside every layer
 * (norms, RoPE factors) and, with globals, the embeddings and the output head. */
int ws_holds(const ws_config *cfg, const char *name, int l, int part);
/* Bytes a read of len bytes takes: aligned for O_DIRECT, with room for an unaligned start (WSIO_ALIGN). */
uint64_t ws_span_bytes(uint64_t len);

/* Open the store. In WS_STREAM mode this plans the budget and fails (naming
 * the minimum) if the model cannot run within it. */
int ws_open(gguf_ctx *g, const ws_config *cfg, wstore **out, char *err, size_t errlen);
void ws_close(wstore *ws);

/* Plan without opening (wsplan.c; used by ws_open and `deltafin plan`). */
int ws_make_plan(const gguf_ctx *g, const ws_config *cfg, ws_plan *plan, char *err, size_t errlen);
const ws_plan *ws_get_plan(const wstore *ws);
int ws_streaming(const wstore *ws);

/* Register a tensor by name; returns NULL (and err) if it is missing. */
ws_tensor *ws_get(wstore *ws, const char *name, char *err, size_t errlen);
/* ws_get of an integer table: the tensor must be i32 (which ws_get refuses). */
ws_tensor *ws_get_table(wstore *ws, const char *name, char *err, size_t errlen);

/* Tests only: make every later fetch of the tensor named name fail as an I/O
 * error would (on = 0: stop). -1 if the model has no such tensor bound. */
int ws_inject_failure(wstore *ws, const char *name, int on);

/* Pin a tensor's bytes (NULL and err on an I/O failure), in the file's
 * layout: a packed tensor is unpacked first, once, and stays so. */
const void *ws_fetch(wstore *ws, ws_tensor *t, char *err, size_t errlen);
/* The same for a matrix product, which reads packed weights as they are
 * (t->packed says which layout it gets; matmul.h's mm_op.packed). */
const void *ws_fetch_mm(wstore *ws, ws_tensor *t, char *err, size_t errlen);
void ws_release(wstore *ws, ws_tensor *t);

/* Pin expert e's slice of an expert tensor (ne[2] = number of experts): ne[1]
 * rows of ne[0] elements, contiguous in the file, in the file's layout. In
 * WS_STREAM mode one expert's gate, up and down slices travel together in
 * one cache slot. */
const void *ws_fetch_expert(wstore *ws, ws_tensor *t, int e, char *err, size_t errlen);
/* ws_fetch_mm's counterpart: the slice as it is held, *packed saying whether
 * in pack.h's layout (resident: as t->packed; streamed: a slot is packed in
 * place once it has been used a few times, WS_PACK_AFTER, where the kernels
 * have a packed layout for the type). A slot pinned for products is not
 * unpacked: ws_fetch_expert of it fails until it is released. */
const void *ws_fetch_expert_mm(wstore *ws, ws_tensor *t, int e, int *packed, char *err, size_t errlen);
void ws_release_expert(wstore *ws, ws_tensor *t, int e);

/* Ask for experts of a layer ahead of use. demand = WS_DEMAND (1): they are
 * needed now (all misses are read at once, in parallel); WS_GUESS (0): a
 * guess, read only when the readers are idle, never at the cost of an
 * expert touched this step, and only while guesses pay (wstore.c);
 * WS_GUESS_ONE: a guess of a one-row step (a token generated alone), whose
 * layer's demand then counts towards the lookahead's recall
 * (ws_stats.lookahead_wanted). */
enum { WS_GUESS = 0, WS_DEMAND = 1, WS_GUESS_ONE = 2 };
void ws_request_experts(wstore *ws, int layer, const int32_t *ids, int n, int demand);
/* 1 if the expert is in memory now (fetch would not wait). */
int ws_expert_ready(wstore *ws, int layer, int e);
/* Advance the store's clock (once per decode step): scores decay per step. */
void ws_tick(wstore *ws);

/* Measure the disk the way decoding reads it: for about `seconds`, step
 * after step, every MoE layer asks for n_expert_used random experts at once
 * and waits for them, and every streamed dense layer is read, all through
 * this store's own cache, queues and reading engine. While a layer waits,
 * the next MoE layer's experts are guessed as decoding's lookahead does:
 * n_expert_used guesses, a share `recall` (0..1) of them right, the rest
 * wrong (none for a layer whose dense weights, its router among them,
 * stream: the lookahead cannot route it ahead). Fills the bytes the
 * demands used (read, less the guesses read and dropped unused) and the
 * time taken (0 bytes if nothing streams); -1 with err on a read error. */
int ws_probe(wstore *ws, double seconds, double recall, uint64_t seed, uint64_t *bytes, double *elapsed, char *err,
             size_t errlen);

/* Give memory back: shrink the expert cache so the store fits `budget`
 * (the budget it was planned with, less what is given back; a store only
 * shrinks). Waits for the slots it drops to finish loading and be released,
 * then frees them. -1 with err when the cache cannot shrink that far (below
 * two layers' worth of routed experts: 2 * n_expert_used slots). Not to be
 * called while the calling thread holds a fetched expert. */
int ws_shrink(wstore *ws, uint64_t budget, char *err, size_t errlen);

/* Counters since open. */
typedef struct ws_stats {
    uint64_t expert_fetches;    /* expert slices handed out */
    uint64_t expert_bytes;      /* their bytes */
    /* Expert lookups: hits found the expert in memory with no read of their own (kept
     * in the cache, or preloaded from the hot file); misses needed a read, now or
     * earlier for a guess of the lookahead (read_ahead: those it had finished). So
     * hits / (hits + misses) is the share of lookups the cache saved a read, the
     * figure tools/cachesim's policies give; a right guess saves a wait, not a read. */
    uint64_t hits, misses, read_ahead;
    uint64_t prefetch_issued, prefetch_used; /* the lookahead's guesses read, and those a lookup then named */
    uint64_t unguessed;      /* demanded experts not in memory that no guess had asked for */
    uint64_t guess_wasted_bytes; /* guessed experts read and dropped unused */
    uint64_t lookahead_wanted, lookahead_got; /* experts needed from disk in the layers a one-row step's lookahead
                                               * guessed for (generation's), and of them the guessed */
    uint64_t bytes_read;        /* from disk */
    uint64_t bytes_packed;      /* expert slices packed (pack.h) in their slots after a few uses */
    double read_seconds;        /* summed over reader threads */
    double wait_seconds;        /* compute thread blocked on I/O */
    double idle_seconds;        /* no read in flight (streaming; from the open on): the disk idle, for its
                                 * reader, while the compute works: a real disk cannot make that time up */
    uint64_t *layer_hits, *layer_misses; /* (n_layer), owned by the store */
} ws_stats;
/* Whether the store holds matrices of this type and row count packed (pack.h): the kernel table in use has a
 * packed gemm for the type, and DELTAFIN_PACK=0 (cfg->no_pack) did not turn packing off. */
int ws_type_packs(const ws_config *cfg, int type, int64_t rows);

void ws_get_stats(wstore *ws, ws_stats *out); /* under the store's lock: the readers change them */

/* The reading engine in use ("pread", "io_uring"; NULL when not streaming)
 * and, if it is not the one asked for, why (else ""). */
const char *ws_io_engine(const wstore *ws, const char **note);

/* Bytes held in memory by the store (resident copies and slots). */
uint64_t ws_resident_bytes(const wstore *ws);
/* Bytes of the tensors held in pack.h's layout now (not counting expert slots). */
uint64_t ws_packed_bytes(const wstore *ws);

/* Persist the learned hot-expert counts (WS_STREAM with a hot_path) through
 * a new temporary file, fsync and rename (docs/files.md). 0 when there is
 * nothing to save or it could not be saved and ws_hot_note says why. */
int ws_save_hot(wstore *ws, char *err, size_t errlen);
int ws_hot_saved(const wstore *ws);
/* Read the learned counts of a hot file (a regular file of ws_save_hot's
 * format) into out (n_layer * n_expert, entries it names): 0, or -1 when
 * there is none to read. */
int ws_hot_counts(const char *path, int n_layer, int n_expert, double *out);
/* The lookahead's recall the hot file at path recorded (the share of the experts needed from disk, in the
 * layers a generation step guessed for, that were guessed: lookahead_got / lookahead_wanted of the run that
 * saved it), and over how many experts (*n, may be NULL); -1 when it records none. */
double ws_hot_recall(const char *path, uint64_t *n);
/* Why the hot file is not read or will not be saved ("" if nothing to say). */
const char *ws_hot_note(const wstore *ws);
/* 1 if path (following links) is one of the model's files (same st_dev/st_ino). */
int ws_is_model_file(const wstore *ws, const char *path);
/* -1 with err if a model file changed (size or mtime) since the store opened. */
int ws_check_files(const wstore *ws, char *err, size_t errlen);

/* Parse "6G", "512M", "1.5GiB", "123456" into bytes; 0 on error. */
uint64_t ws_parse_size(const char *s);

/* Expert-cache policy (wstore.c): every (layer, expert)'s use count, resident
 * or not, decays by this factor per step; tools/cachesim.c replays traces
 * with the same rule. */
#define WS_FREQ_DECAY 0.95

/* The victim rule's score (Belady's with the count standing in for the
 * future): in layer visits from the layer at work, about when an expert of
 * layer `of`, used `rate` times a step, is wanted again. A decayed count c
 * settles at rate / (1 - decay), so rate = c x (1 - decay). The expert is
 * wanted after the layers until its own comes round, plus a whole step for
 * every step it sits out (1 / rate - 1 of them). The slot wanted furthest
 * ahead goes first: among equal rates, the layer just finished with before
 * the one about to run. */
static inline double ws_next_use(double rate, int of, int at, int n_layer) {
    rate = rate < 1e-4 ? 1e-4 : rate > 1 ? 1 : rate;
    const int d = ((of - at) % n_layer + n_layer) % n_layer;
    return (d ? d : n_layer) + n_layer * (1.0 / rate - 1.0);
}

#endif
