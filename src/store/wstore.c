/*
 * wstore.c - weight store backends: mapped files, resident copies, and
 * streaming under a hard memory budget. See wstore.h for the contract.
 *
 * DESIGN (WS_STREAM)
 * Planning. Tensors are classified by name: routed-expert tensors
 * (blk.N.ffn_{gate,up,down}_exps), the dense tensors of layer N (everything
 * else under blk.N.), and globals (embeddings, output, norms); blocks past the
 * model's layers (NextN/MTP, blk.N with N >= n_layer) are never bound and left
 * out of the plan. Globals and as
 * many layers' dense tensors as fit stay resident; if not all fit, the rest
 * stream through two layer buffers (double buffering: layer L+1 loads while
 * L computes). What remains of the budget becomes the expert cache: a fixed
 * pool of slots, each holding one (layer, expert): its gate, up and down
 * slices, which are contiguous in the GGUF file, so one expert is three reads.
 * The plan never allocates more than the budget minus the caller's reserve
 * (sessions and bookkeeping); everything is allocated at open. With
 * cfg.resident_type, resident dense matrices are counted (and held) at their
 * requantized size (requant.h), the layer buffers at the file's.
 *
 * Reading. Slot loads wait in two queues, demand first; a reading engine
 * (wsio.c: pread threads or io_uring) takes them (ws_io_take), reads the
 * jobs' spans with O_DIRECT into 4 KiB-aligned buffers (a span is the aligned
 * superset of the wanted bytes), so nothing piles up in the page cache, and
 * hands them back (ws_io_finish). Where O_DIRECT is refused (tmpfs), plain
 * reads are followed by POSIX_FADV_DONTNEED. With cfg.page_cache (--page-cache)
 * both are left out: reads go through the page cache and stay there, a second
 * tier of cache outside the budget that the kernel reclaims when it needs the
 * room. ws_probe reads the way decoding does, through all of this, to measure
 * the disk for `deltafin plan` (with the page cache: what a miss costs now),
 * guessing the next layer's experts as well as the lookahead does: the
 * lookahead's recall is measured on one-token steps (WS_GUESS_ONE; the share
 * of a guessed-for layer's experts read now that it had guessed) and kept in
 * the hot file for the next plan. Guesses are read only while they pay
 * (guesses_pay: their precision against the share of time the compute waits
 * for the disk); the probe, all waiting, so reads the demands alone once
 * its first guesses are judged.
 *
 * Caching. Every (layer, expert) has a use count, kept whether the expert is
 * resident or not and decayed by WS_FREQ_DECAY per step (ws_tick): frequency
 * with a memory, so an expert that was hot before its eviction is still known
 * to be hot, while recency enters through the decay and through ties (the
 * least recently touched goes first). The victim is the unpinned, not-loading
 * slot whose expert the count says is wanted furthest ahead (ws_next_use:
 * lowest count first, and among near counts the layer just finished with
 * before the layer about to run), never one touched for the current layer
 * in this step. A guess (prefetch) may only evict a slot not touched in
 * this step whose count is no higher than the guessed expert's would be once
 * used (admission: a guess never pushes out something hotter than itself).
 * Replayed on routing traces (tools/cachesim.c, bench/cache.sh) this rule
 * came within a few points of the best static cache in hindsight where the
 * old one (counts of resident slots only, forgotten on eviction) fell 10-45
 * points behind. Counts are kept in a small "hot" file beside the model:
 * loaded at open (they seed the counts, scaled to this run's units, and the
 * hottest experts are read ahead), saved at close.
 *
 * Packing. A slot arrives in the file's layout; the fetch that finds it
 * unpinned for the WS_PACK_AFTER + 1th time since its load packs its parts
 * in place (pack.h, where the kernel table has a packed gemm for the type),
 * holding the only pin and with the slot marked repacking, outside the
 * lock. ws_fetch_expert_mm reports each slice's layout; ws_fetch_expert
 * (the file's layout) unpacks a slot nobody holds.
 *
 * Invariants
 *  1. A slot with pins > 0 or state LOADING is never chosen as a victim.
 *  2. where[key] == i  <=>  slots[i].key == key (both under the lock).
 *  3. Only reader threads write a slot's buffer, only while LOADING, and each
 *     part by one reader at a time (busy bits); queue entries carry the
 *     slot's generation, so an entry left over from an earlier assignment is
 *     skipped; a slot is READY when all its parts are done.
 */
#include "wstore.h"

#include <errno.h>
#include <fcntl.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "outfile.h"
#include "pack.h"
#include "quant.h"
#include "requant.h"
#include "threads.h"
#include "util.h"
#include "wsio.h"

#define ALIGN WSIO_ALIGN

#define DECAY_AGES 1024 /* ages (steps) whose decay factor is tabled; 0.95^1024 is 1e-23 */
/* Uses of an expert slot, as read, before it is packed for the products (acquire_expert). Packing costs about
 * as much as 4 single-token products of the file's layout and makes each later one about twice as fast; at
 * low hit rates (most experts used once or twice, then evicted) packing every arrival measured slower
 * (Qwen3-MoE q4_K under 600M: 6.6-13 tokens/s against 11-14.5); with the whole cache hot, generation 1.1-1.9x
 * and prompts 1.3-1.6x faster (bench/RESULTS.md). */
#define WS_PACK_AFTER 2
/* The lookahead's gate (guesses_pay): its figures decay by GUESS_DECAY a step (about ten steps' memory), and
 * guesses are read until GUESS_EVIDENCE (decayed) have been judged: a model of a few small layers guesses one or
 * two absent experts a step (about 12 in ten steps' memory), a large one hundreds. */
#define GUESS_DECAY 0.9
#define GUESS_EVIDENCE 8.0

enum { SLOT_EMPTY = 0, SLOT_LOADING, SLOT_READY, SLOT_ERROR };

typedef struct slot {
    int layer, expert;   /* key; expert = -1 for a dense layer slot; layer = -1 when empty */
    int state;
    int pins;
    int demand;          /* queued as demand */
    int busy, done;      /* parts being read / read (bit p: expert part p; bit 0: a dense layer) */
    uint32_t gen;        /* bumped at every (re)assignment: queue entries carry it */
    uint64_t touched;    /* tick of the last use */
    uint64_t used_seq;   /* order of the last use (ties between equal counts: older goes first) */
    int uses;            /* expert slots: fetches that found it unpinned since it was loaded */
    uint64_t guessed;    /* expert slots: 1 + the tick of the guess that loaded it (0: not a guess) */
    int packed;          /* expert slots: bit p, part p is in pack.h's layout (repack_slot) */
    int repacking;       /* expert slots: its layout is being changed (by the thread holding its only pin) */
    uint8_t *buf;
} slot;

typedef struct {
    ws_job *q;
    int head, n, cap;
} ring;

struct wstore {
    gguf_ctx *g;
    ws_config cfg;
    ws_plan plan;
    void **maps;              /* per file (WS_MMAP) */
    uint64_t *map_size;
    int *dfd;                 /* per file: O_DIRECT descriptor (WS_STREAM) */
    int *direct;              /* 1 if dfd really is O_DIRECT */
    ws_tensor *handles;       /* one per gguf tensor, same index */
    uint64_t resident;
    /* layer layout */
    int n_layer, n_expert;
    const gguf_tensor *(*exps)[3]; /* (n_layer) expert tensors, NULL if the layer has none */
    uint64_t (*part_off)[3];       /* slot offset of each part, per layer */
    int *dense_streamed;           /* (n_layer) */
    uint64_t *dense_bytes;         /* (n_layer) bytes of the layer's dense tensors: what reading it brings in */
    int *dense_first, *dense_idx;  /* layer l's dense tensors: dense_idx[dense_first[l] .. dense_first[l + 1]) */
    uint64_t *slot_off_of;         /* per gguf tensor: offset in its dense slot */
    /* caches */
    slot *es;                 /* expert slots */
    int n_es;
    int32_t *where;           /* (n_layer * n_expert) -> expert slot or -1 */
    slot ds[2];               /* dense layer slots */
    int where_dense_init;
    int *where_dense;         /* (n_layer) -> 0/1 or -1 */
    double *hot;              /* (n_layer * n_expert) use counts: learned + this run */
    double *freq;             /* (n_layer * n_expert) the policy's decayed use counts */
    uint64_t *freq_tick;      /* (n_layer * n_expert) tick of freq's last update */
    uint64_t *layer_guessed;  /* (n_layer) 1 + the tick of the last one-row step whose lookahead guessed for it */
    uint64_t *guess_mark;     /* (n_layer * n_expert) 1 + the tick of such a step that guessed the key */
    uint64_t *shadow;         /* (n_layer * n_expert) 1 + the tick of a guess not read (guesses_pay said no) */
    double guess_made, guess_right; /* guesses of absent experts (read or not) and those then named: decayed */
    double busy;              /* the share of a step's time the compute waited for the disk: decayed */
    uint64_t busy_n;          /* steps measured */
    double step_t0, step_wait0; /* when the step began, and the wait counter then */
    uint32_t *seen;           /* (n_layer * n_expert) request that last named the key (dedup) */
    uint32_t request_no;
    uint64_t use_seq;         /* counts uses, for used_seq */
    double decay_pow[DECAY_AGES]; /* WS_FREQ_DECAY^age: the same values pow() gives */
    uint64_t tick;
    uint64_t dclock;          /* orders the two dense slots by last use */
    /* readers */
    pthread_mutex_t mu;
    pthread_cond_t job_cv, done_cv;
    ring dq, pq;              /* demand and prefetch queues (slot ids; dense slots as -1, -2) */
    wsio *io;                 /* the reading engine (wsio.c) */
    int locked, stop, max_reads; /* locked: mu and the condition variables exist */
    int guess_busy;           /* jobs being read as guesses */
    int reading;              /* jobs being read (any kind) */
    double idle_t0;           /* when the last read in flight finished (reading == 0) */
    char io_note[160];        /* why the engine asked for is not the one running */
    char io_err[256];         /* the first read error */
    char hot_note[512];       /* why the hot file is not read or not saved, or "" */
    int hot_read, hot_save;   /* the hot file may be read / written */
    int hot_saved;            /* ws_save_hot succeeded */
    double hot_recall;        /* the lookahead's recall the hot file recorded (-1: none), over hot_recall_n experts */
    uint64_t hot_recall_n;
    struct stat *fst;         /* per file: identity, size and mtime at open (ws_check_files) */
    ws_stats stats;
};

static uint64_t align_up(uint64_t x) { return (x + ALIGN - 1) & ~(uint64_t)(ALIGN - 1); }

const ws_plan *ws_get_plan(const wstore *ws) { return &ws->plan; }
int ws_streaming(const wstore *ws) { return ws->cfg.mode == WS_STREAM; }

/* ---- I/O ---- */

static slot *slot_by_id(wstore *ws, int id) { return id >= 0 ? &ws->es[id] : &ws->ds[-id - 1]; }

static double now(void) { return df_time(); }

/* The aligned read that brings len bytes at off of file f into dst
 * (ws_span_bytes(len) long); the wanted bytes land at dst + (off % ALIGN). */
static ws_read span_read(const wstore *ws, int f, uint64_t off, uint64_t len, uint8_t *dst) {
    const uint64_t a_off = off & ~(uint64_t)(ALIGN - 1), want = off - a_off + len;
    return (ws_read){ws->dfd[f], ws->direct[f], ws->cfg.page_cache, a_off, align_up(want), want, dst,
                     ws->g->files[f].path};
}

int ws_io_max_reads(const wstore *ws) { return ws->max_reads; }

/* A job's reads: one expert part is one read; a dense layer is one read per
 * tensor (called by an engine, without the lock: the slot is LOADING and its
 * key cannot change, invariant 3). */
int ws_io_reads(wstore *ws, const ws_job *j, ws_read *r, int max, char *err, size_t errlen) {
    const slot *s = slot_by_id(ws, j->id);
    int n = 0;
    if (s->expert >= 0) {
        const gguf_tensor *t = ws->exps[s->layer][j->part];
        const uint64_t slice = t->nbytes / (uint64_t)t->ne[2];
        if (max < 1) return df_seterr(err, errlen, "internal: no room for reads");
        r[n++] = span_read(ws, t->file, t->offset + slice * (uint64_t)s->expert, slice, s->buf + ws->part_off[s->layer][j->part]);
        return n;
    }
    for (int k = ws->dense_first[s->layer]; k < ws->dense_first[s->layer + 1]; k++) {
        const int i = ws->dense_idx[k];
        const gguf_tensor *t = &ws->g->tensors[i];
        if (n == max) return df_seterr(err, errlen, "internal: too many reads for layer %d", s->layer);
        r[n++] = span_read(ws, t->file, t->offset, t->nbytes, s->buf + ws->slot_off_of[i]);
    }
    return n;
}

/* Bytes a job brings in (for the counters). */
static uint64_t job_bytes(const wstore *ws, const slot *s, int part) {
    return s->expert >= 0 ? ws->exps[s->layer][part]->nbytes / (uint64_t)ws->n_expert : ws->dense_bytes[s->layer];
}

static void ring_push(ring *r, int id, uint32_t gen, int part) {
    if (r->n == r->cap) return; /* cannot happen: see the capacity in open_stream */
    r->q[(r->head + r->n++) % r->cap] = (ws_job){id, gen, part, 0};
}

/* Queue every part of a slot's load (lock held). */
static void queue_slot(wstore *ws, int id, int demand) {
    slot *s = slot_by_id(ws, id);
    const int parts = s->expert >= 0 ? 3 : 1;
    for (int p = 0; p < parts; p++) ring_push(demand ? &ws->dq : &ws->pq, id, s->gen, p);
    pthread_cond_broadcast(&ws->job_cv);
    wsio_kick(ws->io);
}
static ws_job ring_pop(ring *r) {
    ws_job v = r->q[r->head];
    r->head = (r->head + 1) % r->cap;
    r->n--;
    return v;
}

int ws_io_take(wstore *ws, ws_job *out, int block, int guess_cap) {
    pthread_mutex_lock(&ws->mu);
    int got = 0;
    while (!ws->stop && !got) {
        if (ws->dq.n == 0 && (ws->pq.n == 0 || ws->guess_busy >= guess_cap)) {
            if (!block) break;
            pthread_cond_wait(&ws->job_cv, &ws->mu);
            continue;
        }
        ws_job j = ws->dq.n ? ring_pop(&ws->dq) : ring_pop(&ws->pq);
        slot *s = slot_by_id(ws, j.id);
        const int bit = 1 << j.part;
        /* stale (reassigned since), already read, or being read by another reader */
        if (s->state != SLOT_LOADING || s->gen != j.gen || ((s->busy | s->done) & bit)) continue;
        s->busy |= bit; /* a LOADING slot keeps its key until READY (invariant 1) */
        j.guess = !s->demand;
        ws->guess_busy += j.guess;
        if (ws->reading++ == 0) ws->stats.idle_seconds += now() - ws->idle_t0;
        *out = j;
        got = 1;
    }
    if (ws->stop) got = -1;
    pthread_mutex_unlock(&ws->mu);
    return got;
}

void ws_io_finish(wstore *ws, const ws_job *j, int rc, const char *err, double seconds) {
    pthread_mutex_lock(&ws->mu);
    slot *s = slot_by_id(ws, j->id);
    const int bit = 1 << j->part;
    ws->guess_busy -= j->guess;
    if (--ws->reading == 0) ws->idle_t0 = now();
    ws->stats.read_seconds += seconds;
    if (rc == 0) ws->stats.bytes_read += job_bytes(ws, s, j->part);
    else if (!ws->io_err[0]) snprintf(ws->io_err, sizeof ws->io_err, "%s", err ? err : "read failed");
    s->busy &= ~bit;
    s->done |= bit;
    if (rc != 0) s->state = SLOT_ERROR;
    else if (s->done == (s->expert >= 0 ? 7 : 1)) s->state = SLOT_READY;
    pthread_cond_broadcast(&ws->done_cv);
    pthread_cond_broadcast(&ws->job_cv);
    pthread_mutex_unlock(&ws->mu);
}

/* ---- cache policy (under the lock) ---- */

/* The decayed use count of key (layer * n_expert + expert) now. */
static double freq_now(const wstore *ws, int key) {
    const uint64_t age = ws->tick - ws->freq_tick[key];
    /* victim picks scan every slot for every miss: the decay comes from a table, not pow() */
    return ws->freq[key] * (age < DECAY_AGES ? ws->decay_pow[age] : pow(WS_FREQ_DECAY, (double)age));
}

static void count_use(wstore *ws, int key) {
    ws->freq[key] = freq_now(ws, key) + 1.0;
    ws->freq_tick[key] = ws->tick;
}

static void touch(wstore *ws, slot *s) {
    s->touched = ws->tick;
    s->used_seq = ++ws->use_seq;
}

/* Expert slot v starts loading (layer, e) (lock held; the caller queues it): a new key, generation and parts,
 * in the file's layout. */
static void assign_expert(wstore *ws, int v, int layer, int e) {
    slot *s = &ws->es[v];
    s->layer = layer;
    s->expert = e;
    s->state = SLOT_LOADING;
    s->gen++;
    s->done = 0;
    s->uses = 0;
    s->packed = 0;
    s->guessed = 0;
}

enum { PICK_GUESS, PICK_PLAN, PICK_NOW };

/* Pick a victim expert slot for (layer, e), or -1. Never a pinned or loading
 * slot (invariant 1). PICK_GUESS: only slots not touched this step whose
 * expert's count is at most e's count + 1 (admission); PICK_PLAN (a layer's
 * demand list): also not the layer's own slots touched this step; PICK_NOW
 * (an expert needed this instant): anything else, preferring slots the layer
 * has not touched this step. Among candidates the one wanted furthest ahead
 * goes (ws_next_use: its count and where its layer is), and among equal
 * scores the least recently used. What earlier layers touched
 * this step is done with until the next step and is judged by its count
 * like the rest: kept ahead of it, the experts later layers are about to use
 * went first, and the cache hit like LRU whenever a step names more experts
 * than it holds (tests/cli/cachesim.sh). */
static int pick_victim(wstore *ws, int layer, int e, int mode) {
    int best = -1;
    double bs = 0;
    const double limit = mode == PICK_GUESS ? freq_now(ws, layer * ws->n_expert + e) + 1.0 : 0;
    for (int i = 0; i < ws->n_es; i++) {
        slot *s = &ws->es[i];
        if (s->state == SLOT_EMPTY) return i;
        if (s->pins > 0 || s->state == SLOT_LOADING) continue;
        const int now_used = s->touched == ws->tick;
        if (now_used && (mode == PICK_GUESS || (mode == PICK_PLAN && s->layer == layer))) continue;
        const double count = freq_now(ws, s->layer * ws->n_expert + s->expert);
        if (mode == PICK_GUESS && count > limit) continue;
        double sc = -ws_next_use(count * (1.0 - WS_FREQ_DECAY), s->layer, layer, ws->n_layer);
        sc += now_used && s->layer == layer ? 1e9 : 0;
        if (best < 0 || sc < bs || (sc == bs && s->used_seq < ws->es[best].used_seq)) {
            best = i;
            bs = sc;
        }
    }
    return best;
}

/* Start loading (layer, e) into a victim slot; returns the slot or -1. */
static int start_load(wstore *ws, int layer, int e, int demand, int mode) {
    int v = pick_victim(ws, layer, e, mode);
    if (v < 0) return -1;
    slot *s = &ws->es[v];
    if (s->layer >= 0 && s->expert >= 0) {
        ws->where[s->layer * ws->n_expert + s->expert] = -1;
        if (!s->demand && s->state == SLOT_READY) /* a guess read and never used */
            for (int p = 0; p < 3; p++) ws->stats.guess_wasted_bytes += job_bytes(ws, s, p);
    }
    assign_expert(ws, v, layer, e);
    s->demand = demand;
    s->guessed = demand ? 0 : ws->tick + 1;
    s->touched = demand ? ws->tick : 0;
    s->used_seq = ++ws->use_seq;
    ws->where[layer * ws->n_expert + e] = v;
    queue_slot(ws, v, demand);
    return v;
}

/* Are the lookahead's guesses worth their reads? (Lock held.) A right guess
 * read while the compute runs saves a wait; a wrong one takes the disk from
 * the reads that are needed. While the compute waits for the disk most of a
 * step (busy), the disk has little idle time for guesses to fill and a wrong
 * one delays the next demand by its whole read, so they are read only while
 * their precision (of guesses of absent experts, the share then named) is
 * above that share: on the scaled models of bench/stream.sh and
 * bench/cache.sh's, precision 0.4-0.7 against waits of 0.6-0.95, reading
 * them cost 1-40% more bytes a token and no speed (bench/RESULTS.md
 * 2026-12-07). Guesses not read are still judged (ws->shadow), so the gate
 * opens again when they get better or the disk has time to spare. Until
 * GUESS_EVIDENCE guesses are judged, they are read. */
static int guesses_pay(const wstore *ws) {
    if (ws->guess_made < GUESS_EVIDENCE) return 1;
    return ws->guess_right / ws->guess_made > ws->busy;
}

/* Does this process compute expert key (ws_config.own)? */
static int owned(const wstore *ws, int key) { return !ws->cfg.own || ws->cfg.own[key]; }

void ws_request_experts(wstore *ws, int layer, const int32_t *ids, int n, int demand) {
    if (ws->cfg.mode != WS_STREAM || !ws->es || layer < 0 || layer >= ws->n_layer || !ws->exps[layer][0]) return;
    pthread_mutex_lock(&ws->mu);
    if (demand == WS_DEMAND) {
        /* account hits and misses, then protect everything named before choosing victims.
         * An expert named by several tokens of a batch is read once: it counts once as a
         * hit or a miss (and every use counts towards its frequency). */
        if (++ws->request_no == 0) { /* wrapped: forget old marks */
            memset(ws->seen, 0, sizeof *ws->seen * (size_t)ws->n_layer * (size_t)ws->n_expert);
            ws->request_no = 1;
        }
        for (int i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= ws->n_expert) continue;
            const int key = layer * ws->n_expert + ids[i];
            const int w = ws->where[key];
            if (ws->hot) ws->hot[key] += 1.0;
            count_use(ws, key);
            if (!owned(ws, key) || ws->seen[key] == ws->request_no) continue;
            ws->seen[key] = ws->request_no;
            /* a right guess of the lookahead, read or still reading (not a slot preloaded from the hot file) */
            const int ahead = w >= 0 && !ws->es[w].demand && ws->es[w].guessed;
            if (ahead) ws->stats.prefetch_used++, ws->guess_right += 1;
            /* a guess not read is right only if named in its own step (a read one may be named later, while it
             * stays in its slot: the gate, once shut, judges a little more strictly than it was opened) */
            if (ws->shadow[key] == ws->tick + 1) ws->guess_right += 1, ws->shadow[key] = 0;
            if (w < 0) ws->stats.unguessed++;
            if (ws->layer_guessed[layer] == ws->tick + 1 && /* this step's lookahead guessed for the layer */
                (w < 0 || (!ws->es[w].demand && ws->es[w].guessed == ws->tick + 1))) { /* and it is read now */
                ws->stats.lookahead_wanted++;
                ws->stats.lookahead_got += ws->guess_mark[key] == ws->tick + 1; /* guessed, read ahead or not */
            }
            if (w >= 0 && ws->es[w].state == SLOT_READY && !ahead) { /* in memory, no read for this use */
                ws->stats.hits++;
                ws->stats.layer_hits[layer]++;
            } else { /* read for it: now, or ahead for the lookahead's guess (ws_stats) */
                ws->stats.misses++;
                ws->stats.layer_misses[layer]++;
                ws->stats.read_ahead += w >= 0 && ws->es[w].state == SLOT_READY;
            }
            if (w >= 0 && ws->es[w].state == SLOT_READY) ws->es[w].demand = 1;
            if (w >= 0) ws->es[w].touched = ws->tick;
        }
    }
    if (demand == WS_GUESS_ONE) { /* the layer's demand measures the lookahead */
        ws->layer_guessed[layer] = ws->tick + 1;
        for (int i = 0; i < n; i++)
            if (ids[i] >= 0 && ids[i] < ws->n_expert) ws->guess_mark[layer * ws->n_expert + ids[i]] = ws->tick + 1;
        demand = WS_GUESS;
    }
    const int read_guesses = demand || guesses_pay(ws);
    for (int i = 0; i < n; i++) {
        const int e = ids[i];
        if (e < 0 || e >= ws->n_expert || !owned(ws, layer * ws->n_expert + e)) continue;
        const int w = ws->where[layer * ws->n_expert + e];
        if (!read_guesses) { /* measured as if read: is it named when its layer runs? */
            if (w < 0 && ws->shadow[layer * ws->n_expert + e] != ws->tick + 1)
                ws->shadow[layer * ws->n_expert + e] = ws->tick + 1, ws->guess_made += 1;
        } else if (demand) {
            if (w < 0) {
                start_load(ws, layer, e, 1, PICK_PLAN);
            } else if (ws->es[w].state == SLOT_LOADING && !ws->es[w].demand) {
                ws->es[w].demand = 1; /* a guess still queued: move it up */
                queue_slot(ws, w, 1);
            }
        } else if (w < 0 && ws->pq.n < ws->n_es / 4 + 1) {
            if (start_load(ws, layer, e, 0, PICK_GUESS) >= 0) ws->stats.prefetch_issued++, ws->guess_made += 1;
        }
    }
    pthread_mutex_unlock(&ws->mu);
}

int ws_expert_ready(wstore *ws, int layer, int e) {
    if (ws->cfg.mode != WS_STREAM || !ws->es) return 1;
    pthread_mutex_lock(&ws->mu);
    int w = ws->where[layer * ws->n_expert + e];
    int r = w >= 0 && ws->es[w].state == SLOT_READY;
    pthread_mutex_unlock(&ws->mu);
    return r;
}

void ws_tick(wstore *ws) {
    pthread_mutex_lock(&ws->mu);
    ws->tick++;
    const double t = now(), dt = t - ws->step_t0, dw = ws->stats.wait_seconds - ws->step_wait0;
    if (ws->step_t0 > 0 && dt > 0) /* the first step measured sets it (a probe waits from the start) */
        ws->busy = ws->busy_n++ ? GUESS_DECAY * ws->busy + (1 - GUESS_DECAY) * fmin(1.0, dw / dt) : fmin(1.0, dw / dt);
    ws->step_t0 = t;
    ws->step_wait0 = ws->stats.wait_seconds;
    ws->guess_made *= GUESS_DECAY;
    ws->guess_right *= GUESS_DECAY;
    pthread_mutex_unlock(&ws->mu);
}

/* Wait (lock held) until slot s is no longer loading; accounts the wait. */
static int wait_ready(wstore *ws, slot *s, char *err, size_t errlen) {
    if (s->state == SLOT_LOADING) {
        double t0 = now();
        while (s->state == SLOT_LOADING) pthread_cond_wait(&ws->done_cv, &ws->mu);
        ws->stats.wait_seconds += now() - t0;
    }
    if (s->state != SLOT_READY)
        return df_seterr(err, errlen, "reading weights from disk failed: %s", ws->io_err[0] ? ws->io_err : "unknown error");
    return 0;
}

int ws_type_packs(const ws_config *cfg, int type, int64_t rows) {
    const quant_traits *q = quant_traits_get(type);
    return !cfg->no_pack && q && q->gemm_packed && pack_has_layout(type) && rows >= PACK_ROWS;
}

static int type_packs(const wstore *ws, int type, int64_t rows) { return ws_type_packs(&ws->cfg, type, rows); }

/* Part p of expert slot s: where its slice starts in the slot (after the read's alignment lead), its tensor. */
static uint8_t *slot_part(const wstore *ws, const slot *s, int p, const gguf_tensor **gt) {
    *gt = ws->exps[s->layer][p];
    const uint64_t slice = (*gt)->nbytes / (uint64_t)(*gt)->ne[2];
    return s->buf + ws->part_off[s->layer][p] + (((*gt)->offset + slice * (uint64_t)s->expert) & (ALIGN - 1));
}

/* Pack (unpack = 0) or unpack the parts of expert slot s whose type packs, in place; returns the slot's packed
 * bits after it. The caller holds the only pin and has marked s repacking (no product reads it meanwhile, no
 * one else changes its layout), so this runs without the lock. Packing is an optimization: without memory for
 * the scratch rows a part stays as it is. */
static int repack_slot(const wstore *ws, const slot *s, int unpack) {
    int bits = s->packed;
    for (int p = 0; p < 3; p++) {
        const gguf_tensor *gt;
        uint8_t *w = slot_part(ws, s, p, &gt);
        if (!type_packs(ws, gt->type, gt->ne[1]) || ((bits >> p) & 1) != unpack) continue;
        const size_t row = quant_row_size(gt->type, gt->ne[0]);
        uint8_t *scratch = malloc(PACK_ROWS * row);
        if (!scratch) continue;
        pack_matrix(gt->type, w, row, gt->ne[1], scratch, unpack);
        free(scratch);
        bits ^= 1 << p;
    }
    return bits;
}

/* Bytes of slot s's parts held packed. */
static uint64_t slot_bytes_packed(const wstore *ws, const slot *s) {
    uint64_t n = 0;
    for (int p = 0; p < 3; p++)
        if ((s->packed >> p) & 1) n += ws->exps[s->layer][p]->nbytes / (uint64_t)ws->exps[s->layer][p]->ne[2];
    return n;
}

/* Pin the expert slot of (layer, e), loading it on demand. mm: the pin is for matrix products, which read
 * packed parts (an expert found unpinned for the WS_PACK_AFTER + 1th time since its load is packed first: by
 * then it has shown it stays in use, and each product of a packed expert costs about half as much); else for
 * the file's layout (a packed slot is unpacked, if nobody holds it). */
static slot *acquire_expert(wstore *ws, int layer, int e, int mm, char *err, size_t errlen) {
    pthread_mutex_lock(&ws->mu);
    for (;;) {
        int w = ws->where[layer * ws->n_expert + e];
        if (w < 0) {
            w = start_load(ws, layer, e, 1, PICK_NOW);
            if (w < 0) { /* everything pinned or loading: wait for a load to finish */
                pthread_cond_wait(&ws->done_cv, &ws->mu);
                continue;
            }
        }
        slot *s = &ws->es[w];
        if (wait_ready(ws, s, err, errlen) != 0) {
            pthread_mutex_unlock(&ws->mu);
            return NULL;
        }
        if (s->layer != layer || s->expert != e) continue; /* evicted meanwhile: retry */
        if (s->repacking) { /* another thread is changing its layout: wait for it */
            pthread_cond_wait(&ws->done_cv, &ws->mu);
            continue;
        }
        const int alone = s->pins == 0;
        if (alone) s->uses++;
        if (!mm && s->packed && !alone) {
            pthread_mutex_unlock(&ws->mu);
            df_seterr(err, errlen, "internal: expert %d of layer %d is held packed by a running product", e, layer);
            return NULL;
        }
        const int repack = alone && (mm ? !s->packed && s->uses > WS_PACK_AFTER : s->packed);
        s->pins++;
        touch(ws, s);
        if (repack) { /* outside the lock, the readers and the policy going on: pinned, the slot stays */
            s->repacking = 1;
            pthread_mutex_unlock(&ws->mu);
            const int bits = repack_slot(ws, s, !mm);
            pthread_mutex_lock(&ws->mu);
            s->packed = bits;
            if (mm) ws->stats.bytes_packed += slot_bytes_packed(ws, s);
            s->repacking = 0;
            pthread_cond_broadcast(&ws->done_cv);
        }
        pthread_mutex_unlock(&ws->mu);
        return s;
    }
}

/* Next streamed dense layer after l (wrapping to the first), or -1. */
static int next_streamed(const wstore *ws, int l) {
    for (int k = 1; k <= ws->n_layer; k++) {
        int c = (l + k) % ws->n_layer;
        if (ws->dense_streamed[c]) return c;
    }
    return -1;
}

/* Put layer l into dense slot i (lock held) and queue it. */
static void start_dense(wstore *ws, int i, int l, int demand) {
    slot *s = &ws->ds[i];
    if (s->layer >= 0) ws->where_dense[s->layer] = -1;
    s->layer = l;
    s->expert = -1;
    s->state = SLOT_LOADING;
    s->gen++;
    s->done = 0;
    s->demand = demand;
    ws->where_dense[l] = i;
    queue_slot(ws, -i - 1, demand);
}

/* Pin the dense slot holding layer l, and read the next streamed layer ahead. */
static slot *acquire_dense(wstore *ws, int l, char *err, size_t errlen) {
    pthread_mutex_lock(&ws->mu);
    for (;;) {
        int w = ws->where_dense[l];
        if (w < 0) {
            int v = -1;
            for (int i = 0; i < 2; i++)
                if (ws->ds[i].pins == 0 && ws->ds[i].state != SLOT_LOADING && (v < 0 || ws->ds[i].touched < ws->ds[v].touched))
                    v = i;
            if (v < 0) {
                pthread_cond_wait(&ws->done_cv, &ws->mu);
                continue;
            }
            start_dense(ws, v, l, 1);
            w = v;
        }
        slot *s = &ws->ds[w];
        if (s->state == SLOT_LOADING && !s->demand) { /* read ahead but not started: needed now */
            s->demand = 1;
            queue_slot(ws, -w - 1, 1);
        }
        if (wait_ready(ws, s, err, errlen) != 0) {
            pthread_mutex_unlock(&ws->mu);
            return NULL;
        }
        if (s->layer != l) continue;
        s->pins++;
        s->touched = ++ws->dclock;
        /* double buffering: the other slot starts on the next streamed layer */
        const int nx = next_streamed(ws, l);
        slot *o = &ws->ds[1 - w];
        if (nx >= 0 && nx != l && ws->where_dense[nx] < 0 && o->pins == 0 && o->state != SLOT_LOADING)
            start_dense(ws, 1 - w, nx, 0);
        pthread_mutex_unlock(&ws->mu);
        return s;
    }
}

static void unpin(wstore *ws, slot *s) {
    pthread_mutex_lock(&ws->mu);
    if (s->pins > 0) s->pins--;
    pthread_cond_broadcast(&ws->done_cv);
    pthread_mutex_unlock(&ws->mu);
}

/* ---- giving memory back ---- */

/* 1 while a slot at or past index n is loading, pinned or being read. */
static int tail_busy(const wstore *ws, int from, int to) {
    for (int i = from; i < to; i++)
        if (ws->es[i].state == SLOT_LOADING || ws->es[i].pins > 0 || ws->es[i].busy) return 1;
    return 0;
}

int ws_shrink(wstore *ws, uint64_t budget, char *err, size_t errlen) {
    if (ws->cfg.mode != WS_STREAM || !ws->es || budget >= ws->plan.budget) return 0;
    /* what is not the cache: the session reserve, resident weights, the two layer buffers */
    const ws_plan *p = &ws->plan;
    const uint64_t es = p->expert_slot, fixed = p->reserve + p->resident + (p->n_dense_streamed ? 2 * p->dense_slot : 0);
    uint64_t fit = budget > fixed && es ? (budget - fixed) / es : 0;
    if (fit > (uint64_t)ws->n_es) fit = (uint64_t)ws->n_es;
    const int min = 2 * ws->cfg.n_expert_used;
    if ((int)fit < min) {
        char b[32];
        return df_seterr(err, errlen, "the expert cache cannot shrink to fit %s: it needs at least %d slots of %s",
                         df_fmt_bytes(budget, b, sizeof b), min, df_fmt_bytes(es, (char[32]){0}, 32));
    }
    const uint64_t drop = (uint64_t)ws->n_es - fit;
    pthread_mutex_lock(&ws->mu);
    const int old = ws->n_es, n = old - (int)drop;
    ws->n_es = n; /* no new load picks a dropped slot (pick_victim scans n_es) */
    while (tail_busy(ws, n, old)) pthread_cond_wait(&ws->done_cv, &ws->mu);
    for (int i = n; i < old; i++) {
        slot *s = &ws->es[i];
        if (s->layer >= 0 && s->expert >= 0) ws->where[s->layer * ws->n_expert + s->expert] = -1;
        s->layer = s->expert = -1;
        s->state = SLOT_EMPTY;
        s->gen++; /* queue entries left for it are stale */
        free(s->buf);
        s->buf = NULL;
    }
    ws->resident -= drop * es;
    ws->plan.budget = budget;
    ws->plan.n_expert_slots = n;
    pthread_mutex_unlock(&ws->mu);
#ifdef __GLIBC__
    malloc_trim(0); /* small slots come from the heap: hand its free pages back */
#endif
    return 0;
}

/* ---- measuring the disk the way decoding reads it ---- */

/* n distinct random experts (n <= n_expert). */
static void pick_random(const wstore *ws, uint64_t *seed, int32_t *ids, int n) {
    int k = 0;
    while (k < n) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        const int e = (int)((*seed >> 33) % (uint64_t)ws->n_expert);
        int dup = 0;
        for (int i = 0; i < k; i++) dup |= ids[i] == e;
        if (!dup) ids[k++] = e;
    }
}

/* The guesses decoding's lookahead makes for a layer that will use ids[0..K): K of them, a share `recall` right
 * (the fraction left over carried in *owed, so that the share holds over the layers) and the rest wrong,
 * distinct experts the layer will not use. Into out; returns how many. */
static int probe_guesses(const wstore *ws, uint64_t *seed, const int32_t *ids, int K, double recall, double *owed,
                         int32_t *out) {
    *owed += recall * K;
    int right = (int)*owed, k;
    if (right > K) right = K;
    *owed -= right;
    for (k = 0; k < right; k++) out[k] = ids[k];
    const int wrong = K - right < ws->n_expert - K ? K - right : ws->n_expert - K;
    while (k < right + wrong) {
        *seed = *seed * 6364136223846793005ull + 1442695040888963407ull;
        const int e = (int)((*seed >> 33) % (uint64_t)ws->n_expert);
        int dup = 0;
        for (int i = 0; i < K; i++) dup |= ids[i] == e;
        for (int i = right; i < k; i++) dup |= out[i] == e;
        if (!dup) out[k++] = e;
    }
    return k;
}

int ws_probe(wstore *ws, double seconds, double recall, uint64_t seed, uint64_t *bytes, double *elapsed, char *err,
             size_t errlen) {
    *bytes = 0;
    *elapsed = 0;
    if (ws->cfg.mode != WS_STREAM || !ws->locked) return 0;
    if (ws->plan.n_expert_slots >= ws->plan.n_experts_total && !ws->plan.n_dense_streamed) return 0; /* all fits */
    int K = ws->cfg.n_expert_used > 0 ? ws->cfg.n_expert_used : 1;
    if (K > 64) K = 64;
    if (K > ws->n_expert) K = ws->n_expert;
    recall = recall < 0 ? 0 : recall > 1 ? 1 : recall;
    int32_t ids[2][64], guess[64];
    int cur = 0;
    double owed = 0;
    pthread_mutex_lock(&ws->mu);
    const uint64_t b0 = ws->stats.bytes_read, w0 = ws->stats.guess_wasted_bytes;
    pthread_mutex_unlock(&ws->mu);
    const double t0 = now();
    int any = 1, pending = 0; /* ids[cur] holds the next MoE layer's experts (pending) */
    while (any && now() - t0 < seconds) {
        any = 0;
        for (int l = 0; l < ws->n_layer; l++) {
            if (ws->es && ws->exps[l][0]) {
                if (!pending) pick_random(ws, &seed, ids[cur], K);
                ws_request_experts(ws, l, ids[cur], K, WS_DEMAND);
                /* as decoding's lookahead does: guesses at the next MoE layer's experts, as many right as
                 * its recall; none where that layer's router streams (df_moe_guess would wait for it) */
                int nl = l + 1;
                while (nl < ws->n_layer && !ws->exps[nl][0]) nl++;
                pending = nl < ws->n_layer;
                if (pending) {
                    pick_random(ws, &seed, ids[1 - cur], K);
                    const int ng = ws->dense_streamed[nl] ? 0 : probe_guesses(ws, &seed, ids[1 - cur], K, recall,
                                                                                &owed, guess);
                    if (ng) ws_request_experts(ws, nl, guess, ng, WS_GUESS);
                }
                for (int i = 0; i < K; i++) {
                    slot *s = acquire_expert(ws, l, ids[cur][i], 1, err, errlen);
                    if (!s) return -1;
                    unpin(ws, s);
                }
                cur = 1 - cur;
                any = 1;
            }
            if (ws->dense_streamed[l]) {
                slot *s = acquire_dense(ws, l, err, errlen);
                if (!s) return -1;
                unpin(ws, s);
                any = 1;
            }
        }
        pending = 0;
        ws_tick(ws);
    }
    pthread_mutex_lock(&ws->mu); /* what the demands used: the reads of guesses dropped unused are not speed */
    const uint64_t read = ws->stats.bytes_read - b0, wasted = ws->stats.guess_wasted_bytes - w0;
    *bytes = read > wasted ? read - wasted : 0;
    pthread_mutex_unlock(&ws->mu);
    *elapsed = now() - t0;
    return 0;
}

/* ---- hot-expert file ----
 * File safety (docs/files.md): the hot file is read only if it is a regular
 * file (opened O_NONBLOCK, so a FIFO cannot block), is never the model itself
 * (same st_dev/st_ino as any of the model's files, e.g. a symlink to it or
 * --hot naming the model), and is written only through outfile.c (df_outfile_open:
 * a temporary file of this process, fsynced and renamed over a hot file of
 * this user, never over a symlink, a FIFO, a device or another file). */
#define HOT_MAGIC "deltafin-hot 1"
/* The last line: the lookahead's recall (ws_hot_recall), after the counts, where a reader of counts stops. */
#define HOT_RECALL "lookahead-recall"
#define HOT_RECALL_MIN 64 /* experts a run's recall must be measured over to replace the recorded one */

/* 1 if path names one of the model's files (following symlinks). */
static int is_model_file(const wstore *ws, const struct stat *st) {
    for (int f = 0; f < ws->g->n_files; f++)
        if (ws->fst && ws->fst[f].st_dev == st->st_dev && ws->fst[f].st_ino == st->st_ino) return 1;
    return 0;
}

/* Decide whether the hot file may be read and written. A problem with a path
 * the caller named (cfg.hot_explicit) is an error; with the default path
 * beside the model it is a note (ws_hot_note) and the file is left alone. */
static int hot_setup(wstore *ws, char *err, size_t errlen) {
    const char *p = ws->cfg.hot_path;
    char why[400] = "";
    struct stat st;
    ws->hot_read = ws->hot_save = 1;
    if (stat(p, &st) == 0) {
        if (is_model_file(ws, &st)) {
            snprintf(why, sizeof why, "the hot file is the model file itself: not used: %s", p);
            ws->hot_read = ws->hot_save = 0;
        } else if (!S_ISREG(st.st_mode)) {
            snprintf(why, sizeof why, "the hot file is not a regular file: not used: %s", p);
            ws->hot_read = ws->hot_save = 0;
        }
    } else if (errno != ENOENT) {
        snprintf(why, sizeof why, "the hot file cannot be used (%s): %s", strerror(errno), p);
        ws->hot_read = ws->hot_save = 0;
    }
    if (ws->cfg.hot_readonly) ws->hot_save = 0;
    if (ws->hot_save) { /* may it be written: the rule, and a temporary file created (and removed) beside it */
        char e2[300];
        df_out *o = df_outfile_open(p, HOT_MAGIC, strlen(HOT_MAGIC), e2, sizeof e2);
        if (!o) {
            snprintf(why, sizeof why, "cannot write the hot file (%s): the learned hot set will not be saved", e2);
            ws->hot_save = 0;
        }
        df_out_abort(o);
    }
    if (!*why) return 0;
    if (ws->cfg.hot_explicit) return df_seterr(err, errlen, "%s", why);
    snprintf(ws->hot_note, sizeof ws->hot_note, "%s", why);
    return 0;
}

/* The hot file at path, open for reading past its magic line, if it is a regular file of the format; else NULL. */
static FILE *hot_open(const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    FILE *f = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? fdopen(fd, "r") : NULL;
    if (!f) {
        close(fd);
        return NULL;
    }
    char line[128];
    if (fgets(line, sizeof line, f) && strncmp(line, HOT_MAGIC, strlen(HOT_MAGIC)) == 0) return f;
    fclose(f);
    return NULL;
}

int ws_hot_counts(const char *path, int n_layer, int n_expert, double *out) {
    FILE *f = hot_open(path);
    if (!f) return -1;
    int l, e;
    double c;
    while (fscanf(f, "%d %d %lf", &l, &e, &c) == 3)
        if (l >= 0 && l < n_layer && e >= 0 && e < n_expert && c >= 0 && c < 1e12) out[l * n_expert + e] = c;
    fclose(f);
    return 0;
}

double ws_hot_recall(const char *path, uint64_t *n) {
    FILE *f = hot_open(path);
    if (!f) return -1;
    char line[128];
    double r = -1, v;
    unsigned long long k;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, HOT_RECALL " %lf %llu", &v, &k) == 2 && v >= 0 && v <= 1 && k > 0) {
            r = v;
            if (n) *n = k;
        }
    fclose(f);
    return r;
}

static void load_hot(wstore *ws) {
    struct stat st;
    if (!ws->hot_read || (stat(ws->cfg.hot_path, &st) == 0 && is_model_file(ws, &st))) return;
    ws_hot_counts(ws->cfg.hot_path, ws->n_layer, ws->n_expert, ws->hot);
    ws->hot_recall = ws_hot_recall(ws->cfg.hot_path, &ws->hot_recall_n);
}

const char *ws_hot_note(const wstore *ws) { return ws->hot_note; }

int ws_is_model_file(const wstore *ws, const char *path) {
    struct stat st;
    return path && stat(path, &st) == 0 && is_model_file(ws, &st);
}

int ws_save_hot(wstore *ws, char *err, size_t errlen) {
    if (!ws->hot || !ws->cfg.hot_path || !ws->hot_save) return 0;
    const char *path = ws->cfg.hot_path;
    struct stat st;
    if (stat(path, &st) == 0 && is_model_file(ws, &st))
        return df_seterr(err, errlen, "%s: not saving the hot file: it is the model", path);
    char e2[300];
    df_out *o = df_outfile_open(path, HOT_MAGIC, strlen(HOT_MAGIC), e2, sizeof e2);
    FILE *f = df_out_stream(o);
    if (!f) {
        df_out_abort(o);
        return df_seterr(err, errlen, "cannot save the hot file: %s", o ? strerror(errno) : e2);
    }
    fprintf(f, HOT_MAGIC "\n");
    for (int l = 0; l < ws->n_layer; l++)
        for (int x = 0; x < ws->n_expert; x++)
            if (ws->hot[l * ws->n_expert + x] > 0.01)
                fprintf(f, "%d %d %.2f\n", l, x, ws->hot[l * ws->n_expert + x] * 0.5); /* halve: older runs fade */
    const uint64_t wanted = ws->stats.lookahead_wanted;
    if (wanted >= HOT_RECALL_MIN) /* this run's, else the one recorded */
        fprintf(f, HOT_RECALL " %.4f %llu\n", (double)ws->stats.lookahead_got / (double)wanted,
                (unsigned long long)wanted);
    else if (ws->hot_recall >= 0)
        fprintf(f, HOT_RECALL " %.4f %llu\n", ws->hot_recall, (unsigned long long)ws->hot_recall_n);
    if (df_out_commit(o, e2, sizeof e2) != 0) return df_seterr(err, errlen, "cannot save the hot file: %s", e2);
    return 0;
}

int ws_hot_saved(const wstore *ws) { return ws->hot_saved; }

/* The model's files must not change under a running model: a file truncated
 * or rewritten in place would feed the forward pass other bytes than the ones
 * checked at load. Compares each file's size and mtime with those at open. */
int ws_check_files(const wstore *ws, char *err, size_t errlen) {
    for (int f = 0; ws->fst && f < ws->g->n_files; f++) {
        struct stat st;
        if (ws->g->files[f].fd < 0) continue;
        if (fstat(ws->g->files[f].fd, &st) != 0)
            return df_seterr(err, errlen, "%s: cannot stat: %s", ws->g->files[f].path, strerror(errno));
        if (st.st_size != ws->fst[f].st_size || st.st_mtim.tv_sec != ws->fst[f].st_mtim.tv_sec ||
            st.st_mtim.tv_nsec != ws->fst[f].st_mtim.tv_nsec)
            return df_seterr(err, errlen, "%s: the model file was %s while the model was running", ws->g->files[f].path,
                             st.st_size < ws->fst[f].st_size ? "truncated" : "modified");
    }
    return 0;
}

/* Seed the policy's counts from the learned ones, in this run's units: if
 * the learned shares held, an expert with share u of all uses would settle at
 * u x (uses per step) / (1 - decay). They fade as this run's own uses come. */
static void seed_counts(wstore *ws) {
    const int total = ws->n_layer * ws->n_expert;
    double sum = 0;
    int moe_layers = 0;
    for (int i = 0; i < total; i++) sum += ws->hot[i];
    for (int l = 0; l < ws->n_layer; l++) moe_layers += ws->exps[l][0] != NULL;
    if (!(sum > 0) || ws->cfg.n_expert_used <= 0) return;
    const double per_step = (double)moe_layers * ws->cfg.n_expert_used / (1.0 - WS_FREQ_DECAY);
    for (int i = 0; i < total; i++) ws->freq[i] = ws->hot[i] / sum * per_step;
}

/* Read the hottest experts ahead, as guesses, into the empty slots. */
static void preload_hot(wstore *ws) {
    const int total = ws->n_layer * ws->n_expert;
    int *order = malloc(sizeof(int) * (size_t)total);
    if (!order) return;
    int n = 0;
    for (int i = 0; i < total; i++)
        if (ws->hot[i] > 0 && ws->exps[i / ws->n_expert][0] && owned(ws, i)) order[n++] = i;
    /* selection of the top n_es by count (n is small: a simple partial sort) */
    int take = n < ws->n_es ? n : ws->n_es;
    for (int a = 0; a < take; a++) {
        int b = a;
        for (int j = a + 1; j < n; j++)
            if (ws->hot[order[j]] > ws->hot[order[b]]) b = j;
        int t = order[a];
        order[a] = order[b];
        order[b] = t;
    }
    pthread_mutex_lock(&ws->mu);
    for (int a = 0; a < take; a++) {
        const int l = order[a] / ws->n_expert, e = order[a] % ws->n_expert;
        if (ws->where[order[a]] >= 0) continue;
        int v = -1;
        for (int i = 0; i < ws->n_es && v < 0; i++)
            if (ws->es[i].state == SLOT_EMPTY) v = i;
        if (v < 0) break;
        assign_expert(ws, v, l, e);
        ws->where[order[a]] = v;
        queue_slot(ws, v, 0);
    }
    pthread_cond_broadcast(&ws->job_cv);
    pthread_mutex_unlock(&ws->mu);
    free(order);
}

/* ---- open / close ---- */

static int open_stream(wstore *ws, char *err, size_t errlen) {
    gguf_ctx *g = ws->g;
    if (ws_make_plan(g, &ws->cfg, &ws->plan, err, errlen) != 0) return -1;
    const int L = ws->n_layer, X = ws->n_expert;
    ws->dfd = malloc(sizeof(int) * (size_t)g->n_files);
    ws->direct = calloc((size_t)g->n_files, sizeof(int));
    ws->exps = calloc((size_t)(L > 0 ? L : 1), sizeof *ws->exps);
    ws->part_off = calloc((size_t)(L > 0 ? L : 1), sizeof *ws->part_off);
    ws->dense_streamed = calloc((size_t)(L > 0 ? L : 1), sizeof(int));
    ws->dense_bytes = calloc((size_t)(L > 0 ? L : 1), sizeof(uint64_t));
    ws->dense_first = calloc((size_t)L + 1, sizeof(int));
    ws->dense_idx = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(int));
    ws->where_dense = malloc(sizeof(int) * (size_t)(L > 0 ? L : 1));
    ws->slot_off_of = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(uint64_t));
    ws->stats.layer_hits = calloc((size_t)(L > 0 ? L : 1), sizeof(uint64_t));
    ws->stats.layer_misses = calloc((size_t)(L > 0 ? L : 1), sizeof(uint64_t));
    if (!ws->dfd || !ws->direct || !ws->exps || !ws->part_off || !ws->dense_streamed || !ws->dense_bytes || !ws->dense_first || !ws->dense_idx || !ws->where_dense ||
        !ws->slot_off_of || !ws->stats.layer_hits || !ws->stats.layer_misses)
        return df_seterr(err, errlen, "out of memory");
    for (int f = 0; f < g->n_files; f++) ws->dfd[f] = -1;
    for (int f = 0; f < g->n_files; f++) {
        ws->dfd[f] = ws->cfg.page_cache ? -1 : open(g->files[f].path, O_RDONLY | O_DIRECT | O_CLOEXEC);
        ws->direct[f] = ws->dfd[f] >= 0;
        if (ws->dfd[f] < 0) ws->dfd[f] = open(g->files[f].path, O_RDONLY | O_CLOEXEC);
        if (ws->dfd[f] < 0) return df_seterr(err, errlen, "%s: %s", g->files[f].path, strerror(errno));
    }
    for (int l = 0; l < L; l++) ws->where_dense[l] = -1;
    /* layer layouts: where each dense tensor sits in its layer's slot, the
     * layer's bytes, and its tensor count (a dense layer is one read per tensor) */
    uint64_t *fill = calloc((size_t)(L > 0 ? L : 1), sizeof(uint64_t));
    int *at = malloc(sizeof(int) * (size_t)(L > 0 ? L : 1)); /* next free place in dense_idx, per layer */
    if (!fill || !at) {
        free(fill);
        free(at);
        return df_seterr(err, errlen, "out of memory");
    }
    if (g->n_tensors > (uint64_t)INT32_MAX) {
        free(fill);
        free(at);
        return df_seterr(err, errlen, "too many tensors (%llu)", (unsigned long long)g->n_tensors);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) { /* count first: dense_first[l + 1] */
        const int l = ws_layer_of(g->tensors[i].name), p = ws_expert_part(&g->tensors[i]);
        if (l >= 0 && l < L && p < 0 && ws_holds(&ws->cfg, g->tensors[i].name, l, p)) ws->dense_first[l + 1]++;
    }
    ws->max_reads = 1;
    for (int l = 0; l < L; l++) {
        if (ws->dense_first[l + 1] > ws->max_reads) ws->max_reads = ws->dense_first[l + 1];
        ws->dense_first[l + 1] += ws->dense_first[l];
        at[l] = ws->dense_first[l];
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const int l = ws_layer_of(t->name), p = ws_expert_part(t);
        if (l < 0 || l >= L || !ws_holds(&ws->cfg, t->name, l, p)) continue;
        if (p >= 0) {
            if (t->ne[2] != X) {
                free(fill);
                free(at);
                return df_seterr(err, errlen, "tensor '%s' has %lld experts, expected %d", t->name, (long long)t->ne[2], X);
            }
            ws->exps[l][p] = t;
        } else {
            ws->slot_off_of[i] = fill[l];
            fill[l] += ws_span_bytes(t->nbytes);
            ws->dense_bytes[l] += t->nbytes;
            ws->dense_idx[at[l]++] = (int)i;
        }
    }
    free(fill);
    free(at);
    for (int l = 0; l < L; l++) {
        uint64_t off = 0;
        for (int p = 0; p < 3; p++) {
            ws->part_off[l][p] = off;
            if (ws->exps[l][p]) off += ws_span_bytes(ws->exps[l][p]->nbytes / (uint64_t)X);
        }
        if ((!!ws->exps[l][0] + !!ws->exps[l][1] + !!ws->exps[l][2]) % 3 != 0)
            return df_seterr(err, errlen, "layer %d lacks one of ffn_gate_exps/ffn_up_exps/ffn_down_exps", l);
        ws->dense_streamed[l] = ws->plan.n_dense_streamed && l >= ws->plan.first_streamed && ws->dense_bytes[l] > 0;
    }
    /* slots, allocated once */
    if (X > 0 && ws->plan.n_expert_slots > 0) {
        ws->n_es = ws->plan.n_expert_slots;
        ws->es = calloc((size_t)ws->n_es, sizeof(slot));
        ws->where = malloc(sizeof(int32_t) * (size_t)L * (size_t)X);
        ws->hot = calloc((size_t)L * (size_t)X, sizeof(double));
        ws->freq = calloc((size_t)L * (size_t)X, sizeof(double));
        ws->freq_tick = calloc((size_t)L * (size_t)X, sizeof(uint64_t));
        ws->layer_guessed = calloc((size_t)L, sizeof(uint64_t));
        ws->guess_mark = calloc((size_t)L * (size_t)X, sizeof(uint64_t));
        ws->shadow = calloc((size_t)L * (size_t)X, sizeof(uint64_t));
        for (int a = 0; a < DECAY_AGES; a++) ws->decay_pow[a] = pow(WS_FREQ_DECAY, (double)a);
        ws->seen = calloc((size_t)L * (size_t)X, sizeof(uint32_t));
        if (!ws->es || !ws->where || !ws->hot || !ws->freq || !ws->freq_tick || !ws->layer_guessed || !ws->guess_mark ||
            !ws->shadow || !ws->seen)
            return df_seterr(err, errlen, "out of memory");
        for (int i = 0; i < L * X; i++) ws->where[i] = -1;
        for (int i = 0; i < ws->n_es; i++) {
            ws->es[i].layer = ws->es[i].expert = -1;
            ws->es[i].buf = df_alloc_big(ALIGN, (size_t)ws->plan.expert_slot);
            if (!ws->es[i].buf) return df_seterr(err, errlen, "out of memory for the expert cache");
            ws->resident += ws->plan.expert_slot;
        }
    }
    for (int i = 0; i < 2; i++) {
        ws->ds[i].layer = ws->ds[i].expert = -1;
        if (!ws->plan.n_dense_streamed) continue;
        ws->ds[i].buf = df_alloc_big(ALIGN, (size_t)ws->plan.dense_slot);
        if (!ws->ds[i].buf) return df_seterr(err, errlen, "out of memory for the layer buffers");
        ws->resident += ws->plan.dense_slot;
    }
    /* each load queues its parts (3) once, plus once more when a guess is
     * promoted; stale entries are skipped when popped: 12x the slots is ample */
    int cap = 12 * (ws->n_es + 2) + 16;
    ws->dq.q = malloc(sizeof(ws_job) * (size_t)cap);
    ws->pq.q = malloc(sizeof(ws_job) * (size_t)cap);
    if (!ws->dq.q || !ws->pq.q) return df_seterr(err, errlen, "out of memory");
    ws->dq.cap = ws->pq.cap = cap;
    pthread_mutex_init(&ws->mu, NULL);
    pthread_cond_init(&ws->job_cv, NULL);
    pthread_cond_init(&ws->done_cv, NULL);
    ws->locked = 1;
    ws->idle_t0 = now();
    if (wsio_start(ws, ws->cfg.io_engine, ws->cfg.io_threads > 0 ? ws->cfg.io_threads : 8, &ws->io, ws->io_note,
                   sizeof ws->io_note, err, errlen) != 0)
        return -1;
    if (ws->hot && ws->cfg.hot_path) {
        if (hot_setup(ws, err, errlen) != 0) return -1;
        load_hot(ws);
        seed_counts(ws);
        preload_hot(ws);
    }
    return 0;
}

int ws_open(gguf_ctx *g, const ws_config *cfg, wstore **out, char *err, size_t errlen) {
    *out = NULL;
    wstore *ws = calloc(1, sizeof *ws);
    if (!ws) return df_seterr(err, errlen, "out of memory");
    ws->g = g;
    ws->cfg = *cfg;
    ws->n_layer = cfg->n_layer;
    ws->n_expert = cfg->n_expert;
    ws->hot_recall = -1;
    ws->maps = calloc((size_t)g->n_files, sizeof(void *));
    ws->map_size = calloc((size_t)g->n_files, sizeof(uint64_t));
    ws->handles = calloc(g->n_tensors ? g->n_tensors : 1, sizeof(ws_tensor));
    ws->fst = calloc((size_t)g->n_files, sizeof(struct stat));
    if (!ws->maps || !ws->map_size || !ws->handles || !ws->fst) {
        ws_close(ws);
        return df_seterr(err, errlen, "out of memory");
    }
    for (int i = 0; i < g->n_files; i++)
        if (g->files[i].fd >= 0 && fstat(g->files[i].fd, &ws->fst[i]) != 0) {
            df_seterr(err, errlen, "%s: cannot stat: %s", g->files[i].path, strerror(errno));
            ws_close(ws);
            return -1;
        }
    if (cfg->mode == WS_MMAP) {
        for (int i = 0; i < g->n_files; i++) {
            if (g->files[i].fd < 0) continue;
            void *m = mmap(NULL, (size_t)g->files[i].size, PROT_READ, MAP_SHARED, g->files[i].fd, 0);
            if (m == MAP_FAILED) {
                df_seterr(err, errlen, "%s: cannot map: %s", g->files[i].path, strerror(errno));
                ws_close(ws);
                return -1;
            }
            ws->maps[i] = m;
            ws->map_size[i] = g->files[i].size;
        }
    } else if (cfg->mode == WS_STREAM && open_stream(ws, err, errlen) != 0) {
        ws_close(ws);
        return -1;
    }
    *out = ws;
    return 0;
}

void ws_close(wstore *ws) {
    if (!ws) return;
    if (ws->locked) {
        pthread_mutex_lock(&ws->mu);
        ws->stop = 1;
        pthread_cond_broadcast(&ws->job_cv);
        pthread_mutex_unlock(&ws->mu);
        wsio_stop(ws->io);
        pthread_mutex_destroy(&ws->mu);
        pthread_cond_destroy(&ws->job_cv);
        pthread_cond_destroy(&ws->done_cv);
    }
    for (int i = 0; ws->maps && i < ws->g->n_files; i++)
        if (ws->maps[i]) munmap(ws->maps[i], (size_t)ws->map_size[i]);
    for (uint64_t i = 0; ws->handles && i < ws->g->n_tensors; i++)
        if ((ws->cfg.mode != WS_MMAP || ws->handles[i].requantized) && !ws->handles[i].streamed)
            free(ws->handles[i].data);
    for (int f = 0; ws->dfd && f < ws->g->n_files; f++)
        if (ws->dfd[f] >= 0) close(ws->dfd[f]);
    for (int i = 0; ws->es && i < ws->n_es; i++) free(ws->es[i].buf);
    free(ws->ds[0].buf);
    free(ws->ds[1].buf);
    free(ws->es);
    free(ws->where);
    free(ws->hot);
    free(ws->freq);
    free(ws->freq_tick);
    free(ws->layer_guessed);
    free(ws->guess_mark);
    free(ws->shadow);
    free(ws->seen);
    free(ws->dq.q);
    free(ws->pq.q);
    free(ws->dfd);
    free(ws->direct);
    free(ws->exps);
    free(ws->part_off);
    free(ws->dense_streamed);
    free(ws->dense_bytes);
    free(ws->dense_first);
    free(ws->dense_idx);
    free(ws->where_dense);
    free(ws->slot_off_of);
    free(ws->stats.layer_hits);
    free(ws->stats.layer_misses);
    free(ws->maps);
    free(ws->map_size);
    free(ws->handles);
    free(ws->fst);
    free(ws);
}

/* Whether a registered matrix is to be packed, its bytes apart (read_resident
 * asks before reading); packable: and it holds them, as the store's own. */
static int pack_wanted(const wstore *ws, const ws_tensor *t) {
    return !t->streamed && type_packs(ws, t->type, t->ne[1]) && strcmp(t->gt->name, "token_embd.weight");
}

static int packable(const wstore *ws, const ws_tensor *t) {
    return t->data && !t->packed && (ws->cfg.mode != WS_MMAP || t->requantized) && pack_wanted(ws, t);
}

/* n bytes of file f at off into buf, or an error naming the tensor. */
static int pread_full(const gguf_file *f, const char *name, uint8_t *buf, size_t n, uint64_t off, char *err,
                      size_t errlen) {
    for (size_t done = 0; done < n;) {
        ssize_t r = pread(f->fd, buf + done, n - done, (off_t)(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return df_seterr(err, errlen, "%s: reading tensor '%s': %s", f->path, name,
                             r < 0 ? strerror(errno) : "unexpected end of file");
        done += (size_t)r;
    }
    return 0;
}

/* A matrix that will be packed (pack.h), read through staging buffers of
 * about 1 MiB and packed from them into dst: each byte of dst is written
 * once, where reading in place and packing after would pass over the
 * matrix three times. The work is a list of units (a run of groups of one
 * slice; the slice's last unit also reads the rows past its last full
 * group as they are), split across the threads of ws_config.pool. */
typedef struct {
    const gguf_file *f;
    const ws_tensor *t;
    uint8_t *dst;
    int64_t per, units_per_slice, units;
    int rc[64]; /* per thread */
    char err[64][160];
} pack_read;

static void read_packing_part(void *arg, int ith, int nth) {
    pack_read *j = arg;
    const ws_tensor *t = j->t;
    const size_t rb = t->row_bytes, group = PACK_ROWS * rb;
    const int64_t rows = t->ne[1], full = rows / PACK_ROWS;
    long lo, hi;
    tp_range((long)j->units, ith, nth, &lo, &hi);
    uint8_t *stage = lo < hi ? malloc((size_t)j->per * group) : NULL;
    int rc = lo < hi && !stage ? df_seterr(j->err[ith], sizeof j->err[ith], "out of memory for tensor '%s'", t->gt->name) : 0;
    for (long u = lo; rc == 0 && u < hi; u++) {
        const int64_t e = u / j->units_per_slice, g0 = (u % j->units_per_slice) * j->per;
        const int64_t n = full - g0 < j->per ? full - g0 : j->per;
        uint8_t *d = j->dst + (size_t)e * (size_t)rows * rb;
        const uint64_t off = t->gt->offset + (uint64_t)e * (uint64_t)rows * rb;
        rc = pread_full(j->f, t->gt->name, stage, (size_t)n * group, off + (uint64_t)g0 * group, j->err[ith], sizeof j->err[ith]);
        if (rc == 0) pack_groups_to(t->type, stage, rb, n, d + (size_t)g0 * group);
        const size_t tail = (size_t)(rows - full * PACK_ROWS) * rb;
        if (rc == 0 && g0 + n == full && tail)
            rc = pread_full(j->f, t->gt->name, d + (size_t)full * group, tail, off + (uint64_t)full * group, j->err[ith],
                            sizeof j->err[ith]);
    }
    free(stage);
    j->rc[ith] = rc;
}

static int read_packing(const wstore *ws, const gguf_file *f, const ws_tensor *t, uint8_t *dst, char *err,
                        size_t errlen) {
    pack_read *j = calloc(1, sizeof *j);
    if (!j) return df_seterr(err, errlen, "out of memory for tensor '%s'", t->gt->name);
    const size_t group = PACK_ROWS * t->row_bytes;
    const int64_t full = t->ne[1] / PACK_ROWS;
    j->f = f;
    j->t = t;
    j->dst = dst;
    j->per = (int64_t)((1u << 20) / group);
    j->per = j->per < 1 ? 1 : j->per > full ? full : j->per;
    j->units_per_slice = (full + j->per - 1) / j->per;
    j->units = j->units_per_slice * t->ne[2] * t->ne[3];
    const int nth = ws->cfg.pool ? tp_size(ws->cfg.pool) : 1;
    if (nth > 1 && nth <= 64 && j->units > 1) tp_run(ws->cfg.pool, read_packing_part, j);
    else read_packing_part(j, 0, 1);
    int rc = 0;
    for (int i = 0; i < 64 && rc == 0; i++)
        if (j->rc[i] != 0) rc = df_seterr(err, errlen, "%s", j->err[i]);
    free(j);
    return rc;
}

/* Read a tensor's bytes into an aligned buffer (WS_RESIDENT and resident
 * tensors of WS_STREAM, which read with O_DIRECT); a matrix to pack comes
 * out packed (t->packed) under WS_RESIDENT. */
static int read_resident(wstore *ws, ws_tensor *t, char *err, size_t errlen) {
    const gguf_tensor *gt = t->gt;
    if (ws->cfg.mode == WS_STREAM) {
        uint8_t *buf = df_alloc_big(ALIGN, (size_t)ws_span_bytes(gt->nbytes));
        if (!buf) return df_seterr(err, errlen, "out of memory for tensor '%s'", gt->name);
        const ws_read r = span_read(ws, gt->file, gt->offset, gt->nbytes, buf);
        if (wsio_pread_span(&r, err, errlen) != 0) {
            free(buf);
            return -1;
        }
        const uint8_t *p = buf + (gt->offset & (ALIGN - 1));
        /* keep the tensor at the start of its allocation so free() gets the same pointer */
        memmove(buf, p, (size_t)gt->nbytes);
        t->data = buf;
        ws->resident += ws_span_bytes(gt->nbytes);
        ws->stats.bytes_read += gt->nbytes;
        return 0;
    }
    const gguf_file *f = &ws->g->files[gt->file];
    size_t n = (size_t)t->nbytes;
    uint8_t *buf = df_alloc_big(64, n);
    if (!buf) return df_seterr(err, errlen, "out of memory for tensor '%s' (%zu bytes)", gt->name, n);
    const int pack = pack_wanted(ws, t);
    if ((pack ? read_packing(ws, f, t, buf, err, errlen) : pread_full(f, gt->name, buf, n, gt->offset, err, errlen)) != 0) {
        free(buf);
        return -1;
    }
    t->data = buf;
    t->packed = pack;
    ws->resident += n;
    return 0;
}

/* Rows [r0, r0 + n) of a tensor's file bytes (row bytes each): from the
 * mapping, else read into buf (ws_span_bytes(n * row) bytes, ALIGN-aligned; with
 * O_DIRECT under a budget). Returns where they start, or NULL with err. */
static const uint8_t *file_rows(wstore *ws, const gguf_tensor *gt, size_t row, uint64_t r0, uint64_t n, uint8_t *buf,
                                char *err, size_t errlen) {
    const uint64_t off = gt->offset + r0 * row, len = n * row;
    if (ws->cfg.mode == WS_MMAP) return (const uint8_t *)ws->maps[gt->file] + off;
    if (ws->cfg.mode == WS_STREAM) {
        const ws_read r = span_read(ws, gt->file, off, len, buf);
        if (wsio_pread_span(&r, err, errlen) != 0) return NULL;
        ws->stats.bytes_read += len;
        return buf + (off & (ALIGN - 1));
    }
    return pread_full(&ws->g->files[gt->file], gt->name, buf, (size_t)len, off, err, errlen) == 0 ? buf : NULL;
}

/* A resident dense matrix requantized to `type` (requant.h): the file's rows
 * pass through a ~1 MiB buffer (and one row of floats), so the copy is all
 * that stays; its size is what ws_make_plan counted. */
static int read_requantized(wstore *ws, ws_tensor *t, int type, char *err, size_t errlen) {
    const gguf_tensor *gt = t->gt;
    const size_t row = quant_row_size(gt->type, gt->ne[0]), row_new = quant_row_size(type, gt->ne[0]);
    const uint64_t rows = gt->nbytes / row, nb = rq_nbytes(gt, type);
    const uint64_t per = row < (1u << 20) ? (1u << 20) / row : 1;
    uint8_t *dst = df_alloc_big(ALIGN, (size_t)nb);
    uint8_t *buf = ws->cfg.mode == WS_MMAP ? NULL : df_aligned_alloc(ALIGN, (size_t)ws_span_bytes(per * row));
    float *fl = malloc((size_t)gt->ne[0] * sizeof(float));
    int rc = !dst || !fl || (ws->cfg.mode != WS_MMAP && !buf)
                 ? df_seterr(err, errlen, "out of memory for tensor '%s'", gt->name)
                 : 0;
    for (uint64_t r0 = 0; rc == 0 && r0 < rows; r0 += per) {
        const uint64_t n = rows - r0 < per ? rows - r0 : per;
        const uint8_t *src = file_rows(ws, gt, row, r0, n, buf, err, errlen);
        rc = src ? rq_convert(gt->type, src, type, dst + r0 * row_new, gt->ne[0], (int64_t)n, fl, err, errlen) : -1;
    }
    free(buf);
    free(fl);
    if (rc != 0) {
        free(dst);
        return -1;
    }
    t->data = dst;
    t->requantized = 1;
    t->type = type;
    t->nbytes = nb;
    t->row_bytes = row_new;
    ws->resident += ws->cfg.mode == WS_STREAM ? ws_span_bytes(nb) : nb;
    return 0;
}

/* Pack (unpack = 0) or unpack a resident matrix in place, slice by slice
 * for expert tensors (pack.h). Packed: matrices the store owns (not the
 * mapping), of a type whose kernel table has a packed gemm, with a group of
 * rows at least, other than the token embeddings (read by rows every token). */
static int repack(ws_tensor *t, int unpack, char *err, size_t errlen) {
    const int64_t rows = t->ne[1], slices = t->ne[2] * t->ne[3];
    uint8_t *scratch = malloc(PACK_ROWS * t->row_bytes);
    if (!scratch) return df_seterr(err, errlen, "out of memory for tensor '%s'", t->gt->name);
    for (int64_t e = 0; e < slices; e++)
        pack_matrix(t->type, (uint8_t *)t->data + (size_t)e * (size_t)rows * t->row_bytes, t->row_bytes, rows, scratch,
                    unpack);
    free(scratch);
    t->packed = !unpack;
    return 0;
}

/* ws_get and ws_get_table: one registration, the type check apart (i32
 * integer tables are read as they are, and only when asked for as one). */
static ws_tensor *get_checked(wstore *ws, const char *name, int table, char *err, size_t errlen) {
    const gguf_tensor *gt = gguf_find_tensor(ws->g, name);
    if (!gt) {
        df_seterr(err, errlen, "missing tensor '%s'", name);
        return NULL;
    }
    const uint64_t idx = (uint64_t)(gt - ws->g->tensors);
    ws_tensor *t = &ws->handles[idx];
    const quant_traits *q = quant_traits_get(gt->type);
    if (table ? gt->type != DF_TYPE_I32 : !q || !q->supported) {
        df_seterr(err, errlen, table ? "tensor '%s' has type %s, not i32" : "tensor '%s' has type %s, which Deltafin cannot compute with",
                  name, q && q->name ? q->name : "unknown");
        return NULL;
    }
    if (t->gt) return t; /* already registered */
    t->type = gt->type;
    memcpy(t->ne, gt->ne, sizeof t->ne);
    t->nbytes = gt->nbytes;
    t->row_bytes = quant_row_size(gt->type, gt->ne[0]);
    t->layer = ws_layer_of(gt->name);
    t->part = ws_expert_part(gt);
    t->gt = gt;
    const int rq = rq_resident_type(gt, t->part >= 0, ws->cfg.resident_type);
    const int streamed = ws->cfg.mode == WS_STREAM && t->layer >= 0 && t->layer < ws->n_layer &&
                         ((t->part >= 0 && ws->es) || (t->part < 0 && ws->dense_streamed[t->layer]));
    if (ws->cfg.mode == WS_PLAN) {
        t->data = NULL; /* checked, never read */
        t->type = rq;   /* as it would be held (architectures check types) */
    } else if (ws->cfg.mode != WS_MMAP && !ws_holds(&ws->cfg, gt->name, t->layer, t->part)) {
        t->data = NULL; /* another rank runs the layer that uses it */
        t->elsewhere = 1;
    } else if (rq != gt->type && !streamed) {
        if (read_requantized(ws, t, rq, err, errlen) != 0) {
            t->gt = NULL;
            return NULL;
        }
    } else if (ws->cfg.mode == WS_MMAP) {
        t->data = (uint8_t *)ws->maps[gt->file] + gt->offset;
    } else if (streamed) {
        t->streamed = 1;
        t->slot_off = ws->slot_off_of[idx];
    } else if (read_resident(ws, t, err, errlen) != 0) {
        t->gt = NULL;
        return NULL;
    }
    if (packable(ws, t) && repack(t, 0, err, errlen) != 0) {
        t->gt = NULL;
        return NULL;
    }
    return t;
}

ws_tensor *ws_get(wstore *ws, const char *name, char *err, size_t errlen) { return get_checked(ws, name, 0, err, errlen); }

ws_tensor *ws_get_table(wstore *ws, const char *name, char *err, size_t errlen) {
    return get_checked(ws, name, 1, err, errlen);
}

int ws_inject_failure(wstore *ws, const char *name, int on) {
    for (uint64_t i = 0; i < ws->g->n_tensors; i++)
        if (ws->handles[i].gt && strcmp(ws->g->tensors[i].name, name) == 0) {
            ws->handles[i].fail = on;
            return 0;
        }
    return -1;
}

/* A fetch that ws_inject_failure asked to fail. */
static const void *injected(const ws_tensor *t, char *err, size_t errlen) {
    df_seterr(err, errlen, "%s: injected read failure (test)", t->gt->name);
    return NULL;
}

const void *ws_fetch(wstore *ws, ws_tensor *t, char *err, size_t errlen) {
    if (t->packed && repack(t, 1, err, errlen) != 0) return NULL; /* read by rows: the file's layout from now on */
    return ws_fetch_mm(ws, t, err, errlen);
}

/* A fetch of what this process does not hold (ws_config.own, experts_only): a bug, reported as one. */
static const void *elsewhere(const ws_tensor *t, int e, char *err, size_t errlen) {
    if (e < 0) df_seterr(err, errlen, "internal: '%s' is held by another rank of the cluster", t->gt->name);
    else df_seterr(err, errlen, "internal: expert %d of '%s' belongs to another rank of the cluster", e, t->gt->name);
    return NULL;
}

const void *ws_fetch_mm(wstore *ws, ws_tensor *t, char *err, size_t errlen) {
    if (t->fail) return injected(t, err, errlen);
    if (t->elsewhere) return elsewhere(t, -1, err, errlen);
    if (!t->streamed) {
        t->pins++;
        return t->data;
    }
    slot *s = acquire_dense(ws, t->layer, err, errlen);
    if (!s) return NULL;
    t->pins++;
    return s->buf + t->slot_off + (t->gt->offset & (ALIGN - 1));
}

void ws_release(wstore *ws, ws_tensor *t) {
    if (t->pins > 0) t->pins--;
    if (t->streamed && t->part < 0) {
        int w = ws->where_dense[t->layer];
        if (w >= 0) unpin(ws, &ws->ds[w]);
    }
}

/* ws_fetch_expert and ws_fetch_expert_mm: the slice, pinned, in the layout mm asks for (*packed: which). */
static const void *fetch_expert(wstore *ws, ws_tensor *t, int e, int mm, int *packed, char *err, size_t errlen) {
    if (e < 0 || e >= t->ne[2]) {
        df_seterr(err, errlen, "expert %d out of range for '%s'", e, t->gt->name);
        return NULL;
    }
    if (t->fail) return injected(t, err, errlen);
    if (t->layer >= 0 && !owned(ws, t->layer * ws->n_expert + e)) return elsewhere(t, e, err, errlen);
    if (!mm && t->packed && repack(t, 1, err, errlen) != 0) return NULL;
    const uint64_t slice = (uint64_t)t->ne[1] * t->row_bytes;
    const uint8_t *p;
    if (t->streamed) {
        slot *s = acquire_expert(ws, t->layer, e, mm, err, errlen);
        if (!s) return NULL;
        p = s->buf + ws->part_off[t->layer][t->part] + ((t->gt->offset + slice * (uint64_t)e) & (ALIGN - 1));
        *packed = (s->packed >> t->part) & 1;
    } else {
        p = (const uint8_t *)t->data + slice * (uint64_t)e;
        *packed = t->packed;
    }
    if (ws->locked) pthread_mutex_lock(&ws->mu);
    t->pins++;
    ws->stats.expert_fetches++;
    ws->stats.expert_bytes += slice;
    if (ws->locked) pthread_mutex_unlock(&ws->mu);
    return p;
}

const void *ws_fetch_expert(wstore *ws, ws_tensor *t, int e, char *err, size_t errlen) {
    int packed;
    return fetch_expert(ws, t, e, 0, &packed, err, errlen);
}

const void *ws_fetch_expert_mm(wstore *ws, ws_tensor *t, int e, int *packed, char *err, size_t errlen) {
    return fetch_expert(ws, t, e, 1, packed, err, errlen);
}

void ws_release_expert(wstore *ws, ws_tensor *t, int e) {
    if (ws->locked) pthread_mutex_lock(&ws->mu);
    if (t->pins > 0) t->pins--;
    if (t->streamed) {
        int w = ws->where[t->layer * ws->n_expert + e];
        if (w >= 0 && ws->es[w].pins > 0) ws->es[w].pins--;
        pthread_cond_broadcast(&ws->done_cv);
    }
    if (ws->locked) pthread_mutex_unlock(&ws->mu);
}

void ws_get_stats(wstore *ws, ws_stats *out) {
    if (ws->locked) pthread_mutex_lock(&ws->mu);
    *out = ws->stats;
    if (ws->locked && ws->reading == 0) out->idle_seconds += now() - ws->idle_t0; /* idle now, so far */
    if (ws->locked) pthread_mutex_unlock(&ws->mu);
}

uint64_t ws_resident_bytes(const wstore *ws) { return ws->resident; }

uint64_t ws_packed_bytes(const wstore *ws) {
    uint64_t n = 0;
    for (uint64_t i = 0; i < ws->g->n_tensors; i++)
        if (ws->handles[i].gt && ws->handles[i].packed && !ws->handles[i].streamed) n += ws->handles[i].nbytes;
    return n;
}

const char *ws_io_engine(const wstore *ws, const char **note) {
    if (note) *note = ws->io_note;
    return ws->io ? wsio_name(ws->io) : NULL;
}
