/*
 * matmul.c - see matmul.h.
 *
 * DESIGN
 * A pass computes every product whose converted input fits in the scratch
 * (usually all of mm_mul_n's): each distinct (input, activation type) is
 * converted once (on the calling thread for a few rows, else by the pool),
 * then the output space of all the products is cut into chunks of RB
 * weight rows x CB tokens. Each thread owns a
 * contiguous run of chunks and claims them front to back from the run's
 * atomic counter; a thread that runs out steals from the other runs
 * (tp_run_dyn), so a thread that the other processes on the machine delay
 * costs only its current chunk, while in the common case every thread
 * streams one contiguous part of the weights.
 *
 * Blocking, for the two regimes:
 *  - generation (a few tokens): the weights stream from memory once; a chunk
 *    is ~16 KiB of weight rows (a packed group of 16 at least), so that the
 *    threads finish a product within a small chunk of each other: with home
 *    runs a thread's chunks are contiguous anyway, so the prefetchers still
 *    see long runs (against 64 KiB on a Sapphire Rapids: kimi-k3-2b +1.7%,
 *    deepseek-5b +1.6%, dense q8_0 +3.8% capped at AVX2; before the packed
 *    layouts and the home runs 64 KiB had been the faster). More tokens in
 *    one block (AMX tiles, which reuse their rows) keep 64 KiB chunks.
 *  - prompt (many tokens): CB tokens of converted activations (~128 KiB)
 *    stay in L2 while the chunk's rows pass over them; inside a chunk the
 *    gemm kernel keeps a tile of weight rows in registers/L1 for up to four
 *    tokens at a time. Chunks are ordered token block first, so a thread's
 *    consecutive chunks share the activation block.
 * The gemm kernels prefetch the next tile's weights themselves where that
 * pays (kern_*.c; not AVX2's one-token q4_K tile, whose one stream the
 * hardware prefetcher takes faster); that, more than any chunking, is what
 * brings generation near the memory bandwidth (bench/RESULTS.md).
 * Weights in pack.h's layout (mm_op.packed) go to the type's gemm_packed,
 * whole groups of 16 rows per chunk, any rows past the last group to the
 * row-major gemm.
 * Types without a gemm kernel fall back to vec_dot per (row, token).
 *
 * Between two products the caller often works alone (norms, gates, routing)
 * while the memory sits idle, and a product that starts after such a gap
 * streams slower (threads.c). A model's products come in the same order
 * every token, so each call remembers which weights followed the previous
 * call's (mm_scratch.next, keyed by its first weights) and, when it ends,
 * names its successor, once the same one has followed twice in a row, to
 * the pool's idle workers (tp_idle_prefetch). Routed experts change from
 * token to token and are seldom confirmed; a wrong guess costs only
 * bandwidth nobody was using.
 */
#include "matmul.h"

#include <stdatomic.h>
#include <string.h>

#include "pack.h"
#include "quant.h"

#define GEN_CHUNK_BYTES (16 << 10)   /* weight bytes per chunk when generating (up to 4 tokens, a tile's) */
#define ONE_CHUNK_BYTES (64 << 10)   /* ... for more tokens in one token block (tiles that reuse rows: AMX) */
#define PP_CHUNK_BYTES (16 << 10)    /* weight bytes per chunk for prompts */
#define X_BLOCK_BYTES (128 << 10)    /* converted activations per token block */
#define CALLER_QUANT_ELEMS 8192      /* convert x on the caller below this many elements */

size_t mm_scratch_bytes(int64_t n_in, int n_tok) {
    /* The widest activation format is f32 (4 bytes/element); q8_K adds block
     * headers but stays under 4 bytes/element. Pad each row to 64 bytes. */
    return ((size_t)n_in * 4 + 64) * (size_t)(n_tok > 0 ? n_tok : 1);
}

typedef struct {
    const quant_traits *qt;
    const uint8_t *w;
    size_t w_row;
    int64_t n_out;
    float *y;
    int64_t ldy;
    const uint8_t *xq;      /* its converted input */
    size_t xq_row;
    long rb, n_rb;          /* rows per chunk, chunks per token block */
    int64_t n_packed;       /* rows [0, n_packed) are packed groups (pack.h) */
} mm_part;

/* One input converted to one activation type. */
typedef struct {
    const quant_traits *vt;
    int vtype;
    const float *x;
    uint8_t *xq;
    size_t xq_row;
    int trailer;            /* a packed weight reads it: write pack.h's trailer */
} mm_conv;

/* A thread's home run of chunks, claimed front to back (own cache line). */
#define MM_HOMES 16
typedef struct {
    _Alignas(64) atomic_long next;
    long end;
} mm_home;

typedef struct {
    mm_home home[MM_HOMES];
    int n_home;
    mm_part part[MM_MAX_OPS];
    int n_part;
    long per_cb;            /* chunks per token block (sum of n_rb) */
    int64_t n_in;
    int n_tok, cb;          /* tokens, tokens per block */
    long n_chunks;
    mm_conv conv[MM_MAX_OPS];
    int n_conv;
    atomic_long next;       /* next (input, row) to convert */
} mm_job;

/* Token t of input c converted, with the packed kernels' trailer when a packed weight reads it. */
static void convert_row(const mm_job *j, const mm_conv *c, long t) {
    uint8_t *xq = c->xq + (size_t)t * c->xq_row;
    c->vt->from_float(c->x + t * j->n_in, xq, j->n_in);
    if (c->trailer) pack_x_trailer(c->vtype, xq, j->n_in);
}

static void quantize_rows(void *arg, int ith, int nth) {
    mm_job *j = arg;
    (void)ith;
    (void)nth;
    for (long i; (i = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < (long)j->n_conv * j->n_tok;)
        convert_row(j, &j->conv[i / j->n_tok], i % j->n_tok);
}

/* Chunk i: token block i / per_cb, then the part and row block within it. */
static void run_chunk(const mm_job *j, long i) {
    const long cbi = i / j->per_cb;
    long k = i % j->per_cb;
    const mm_part *p = j->part;
    while (k >= p->n_rb) k -= p++->n_rb;
    const long r0 = k * p->rb;
    int nr = (int)(p->n_out - r0 < p->rb ? p->n_out - r0 : p->rb);
    const int c0 = (int)cbi * j->cb;
    const int nc = j->n_tok - c0 < j->cb ? j->n_tok - c0 : j->cb;
    const uint8_t *w = p->w + (size_t)r0 * p->w_row;
    const uint8_t *x = p->xq + (size_t)c0 * p->xq_row;
    float *y = p->y + (int64_t)c0 * p->ldy + r0;
    if (r0 < p->n_packed) { /* whole groups (r0 and rb are multiples of 16), then any row-major tail */
        const int np = (int)(p->n_packed - r0 < nr ? p->n_packed - r0 : nr);
        p->qt->gemm_packed(j->n_in, w, p->w_row, np, x, p->xq_row, nc, y, (size_t)p->ldy);
        if (np == nr) return;
        w += (size_t)np * p->w_row;
        y += np;
        nr -= np;
    }
    if (p->qt->gemm) {
        p->qt->gemm(j->n_in, w, p->w_row, nr, x, p->xq_row, nc, y, (size_t)p->ldy);
        return;
    }
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++)
            p->qt->vec_dot(j->n_in, w + (size_t)r * p->w_row, x + (size_t)c * p->xq_row, &y[(int64_t)c * p->ldy + r]);
}

/* Next chunk for thread ith: from its home run, else from the others' (the
 * runs of threads that are late or slow), or -1 when all are claimed. */
static long claim(mm_job *j, int ith) {
    for (int k = 0; k < j->n_home; k++) {
        mm_home *h = &j->home[(ith + k) % j->n_home];
        if (atomic_load_explicit(&h->next, memory_order_relaxed) >= h->end) continue;
        const long i = atomic_fetch_add_explicit(&h->next, 1, memory_order_relaxed);
        if (i < h->end) return i;
    }
    return -1;
}

static void dot_chunks(void *arg, int ith, int nth) {
    mm_job *j = arg;
    (void)nth;
    for (long i; (i = claim(j, ith)) >= 0;) run_chunk(j, i);
}

/* Cut the chunks into one contiguous home run per thread: each thread
 * streams its own part of the weights front to back (what the hardware
 * prefetcher likes), and steals from the others' runs only at the end. */
static void set_homes(mm_job *j, int nth) {
    j->n_home = nth < MM_HOMES ? nth : MM_HOMES;
    for (int k = 0; k < j->n_home; k++) {
        atomic_init(&j->home[k].next, j->n_chunks * k / j->n_home);
        j->home[k].end = j->n_chunks * (k + 1) / j->n_home;
    }
}

/* Rows per chunk for a weight of n_out rows of w_row bytes: about `bytes`
 * of weights, a multiple of `unit` (the gemm tile: 4, or a packed group's
 * 16), and small enough for `min_chunks` chunks when the matrix allows. */
static long rows_per_chunk(int64_t n_out, size_t w_row, size_t bytes, long min_chunks, long unit) {
    long rb = (long)(bytes / (w_row ? w_row : 1));
    long cap = (long)((n_out + min_chunks - 1) / min_chunks);
    if (rb > cap) rb = cap;
    rb = (rb + unit - 1) / unit * unit;
    return rb < unit ? unit : rb;
}

/* Bytes of one converted row of n_in elements (64-byte aligned rows, with
 * pack.h's trailer where the type has one). */
static size_t xq_row_bytes(int vtype, int64_t n_in) {
    if (vtype == DF_TYPE_F32) return (size_t)n_in * sizeof(float);
    const size_t with_trailer = pack_x_row_bytes(vtype, n_in);
    return with_trailer ? with_trailer : (quant_row_size(vtype, n_in) + 63) & ~(size_t)63;
}

/* One pass over the ops whose inputs j->conv holds (parts already set up
 * except for blocking): convert the inputs, cut the chunks, run them. */
static void mm_pass(tp_pool *pool, mm_job *j) {
    const int nth = tp_size(pool);
    if (j->n_conv > 0) {
        if ((int64_t)j->n_tok * j->n_in * j->n_conv <= CALLER_QUANT_ELEMS || nth == 1) {
            for (int k = 0; k < j->n_conv; k++)
                for (int t = 0; t < j->n_tok; t++) convert_row(j, &j->conv[k], t);
        } else {
            atomic_init(&j->next, 0);
            tp_run_dyn(pool, quantize_rows, j);
        }
    }
    /* token blocks: all tokens when generating, else ~X_BLOCK_BYTES of activations */
    size_t widest = 0;
    int64_t rows = 0;
    for (int k = 0; k < j->n_part; k++) {
        if (j->part[k].xq_row > widest) widest = j->part[k].xq_row;
        rows += j->part[k].n_out;
    }
    if (rows == 0) return;
    int cb = (int)(X_BLOCK_BYTES / widest); /* capped below at 64, unless a tile unit asks for more */
    cb = cb < 4 ? 4 : (cb > 64 ? 64 : cb & ~3);
    for (int k = 0; k < j->n_part; k++) /* a tile unit's region (AMX) */
        if (j->n_tok >= 8 && j->part[k].qt->gemm_cols > cb) cb = j->part[k].qt->gemm_cols;
    if (j->n_tok <= 4 || cb > j->n_tok) cb = j->n_tok;
    j->cb = cb;
    const long n_cb = (j->n_tok + cb - 1) / cb;
    j->per_cb = 0;
    for (int k = 0; k < j->n_part; k++) {
        mm_part *p = &j->part[k];
        /* at least 8 chunks per thread over the whole pass, shared by the parts by size */
        const long want = (long)((8 * nth * p->n_out + rows - 1) / rows);
        const size_t bytes = n_cb > 1 ? PP_CHUNK_BYTES : j->n_tok <= 4 ? GEN_CHUNK_BYTES : ONE_CHUNK_BYTES;
        p->rb = rows_per_chunk(p->n_out, p->w_row, bytes, n_cb > 1 ? 1 : want, p->n_packed ? PACK_ROWS : 4);
        const long gr = p->qt->gemm_rows;
        if (gr > 0 && j->n_tok >= 8) p->rb = (p->rb + gr - 1) / gr * gr;
        p->n_rb = (long)((p->n_out + p->rb - 1) / p->rb);
        j->per_cb += p->n_rb;
    }
    j->n_chunks = j->per_cb * n_cb;
    if (j->n_chunks == 1 || nth == 1) {
        set_homes(j, 1);
        dot_chunks(j, 0, 1);
    } else {
        set_homes(j, nth);
        tp_run_dyn(pool, dot_chunks, j);
    }
}

static size_t next_slot(const void *key) {
    const uint64_t k = (uint64_t)(uintptr_t)key * 0x9e3779b97f4a7c15u; /* Fibonacci hashing: the high bits mix all */
    return (size_t)(k >> 52) % MM_NEXT_SLOTS;
}

/* Learn that w (its first len bytes) followed the previous call, then name
 * what followed w the last two times, if the same, to the pool's idle workers. */
static void prefetch_next(tp_pool *pool, mm_scratch *sc, const void *w, size_t len) {
    if (!sc->next) return;
    if (sc->last) {
        mm_next *p = &sc->next[next_slot(sc->last)];
        if (p->key == sc->last && p->next == w) p->seen += p->seen < 2;
        else *p = (mm_next){sc->last, w, len, 1};
    }
    sc->last = w;
    const mm_next *e = &sc->next[next_slot(w)];
    if (e->key == w && e->seen >= 2) tp_idle_prefetch(pool, e->next, e->len);
    else tp_idle_prefetch(pool, NULL, 0);
}

int mm_mul_n(tp_pool *pool, const mm_op *ops, int n_ops, int64_t n_in, const float *x, int n_tok, mm_scratch *sc) {
    if (n_ops < 1 || n_ops > MM_MAX_OPS || n_tok < 1) return -1;
    int done[MM_MAX_OPS] = {0}, left = n_ops;
    mm_job j;
    while (left > 0) {
        /* a pass: every remaining op whose converted input is already in it
         * or still fits in the scratch, in order */
        memset(&j, 0, sizeof j);
        j.n_in = n_in;
        j.n_tok = n_tok;
        size_t used = 0;
        for (int k = 0; k < n_ops; k++) {
            if (done[k]) continue;
            const quant_traits *qt = quant_traits_get(ops[k].wtype);
            const int vtype = qt->vec_type;
            const float *in = ops[k].x ? ops[k].x : x;
            if (ops[k].packed && !qt->gemm_packed) return -1; /* packed weights need the packed kernel */
            const int64_t n_packed = ops[k].packed ? ops[k].n_out / PACK_ROWS * PACK_ROWS : 0;
            const uint8_t *xq = NULL;
            const size_t xr = xq_row_bytes(vtype, n_in);
            if (vtype == DF_TYPE_F32) {
                xq = (const uint8_t *)in;
            } else {
                mm_conv *c = NULL;
                for (int i = 0; i < j.n_conv && !c; i++)
                    if (j.conv[i].x == in && j.conv[i].vt == quant_traits_get(vtype)) c = &j.conv[i];
                if (!c) {
                    if (used + xr * (size_t)n_tok > sc->size) {
                        if (j.n_part == 0) return -1; /* not even one input fits */
                        continue;                     /* next pass */
                    }
                    c = &j.conv[j.n_conv++];
                    *c = (mm_conv){quant_traits_get(vtype), vtype, in, (uint8_t *)sc->buf + used, xr, 0};
                    used += xr * (size_t)n_tok;
                }
                c->trailer |= n_packed > 0;
                xq = c->xq;
            }
            j.part[j.n_part++] = (mm_part){qt, ops[k].w, quant_row_size(ops[k].wtype, n_in), ops[k].n_out, ops[k].y,
                                           ops[k].ldy, xq, xr, 0, 0, n_packed};
            done[k] = 1;
            left--;
        }
        mm_pass(pool, &j);
    }
    prefetch_next(pool, sc, ops[0].w, quant_row_size(ops[0].wtype, n_in) * (size_t)ops[0].n_out);
    return 0;
}

int mm_mul(tp_pool *pool, int wtype, const void *w, int64_t n_in, int64_t n_out, const float *x, int n_tok,
           float *y, int64_t ldy, mm_scratch *sc) {
    const mm_op op = {wtype, w, n_out, y, ldy, NULL, 0};
    return mm_mul_n(pool, &op, 1, n_in, x, n_tok, sc);
}

int mm_mul_grouped(tp_pool *pool, int wtype, const void *w, int packed, size_t w_stride, int G, int64_t n_in,
                   int64_t n_out, const float *x, int64_t x_grp, int64_t x_tok, int n_tok, float *y, int64_t y_grp,
                   int64_t ldy, float *tmp, mm_scratch *sc) {
    const uint8_t *wb = w;
    if (n_tok == 1) { /* a pass for up to MM_MAX_OPS groups: a pass apiece costs more than these small products */
        mm_op ops[MM_MAX_OPS];
        for (int g0 = 0; g0 < G; g0 += MM_MAX_OPS) {
            const int ng = G - g0 < MM_MAX_OPS ? G - g0 : MM_MAX_OPS;
            for (int k = 0; k < ng; k++) {
                const int g = g0 + k;
                ops[k] = (mm_op){wtype, wb + (size_t)g * w_stride, n_out, y + g * y_grp, ldy, x + g * x_grp, packed};
            }
            if (mm_mul_n(pool, ops, ng, n_in, NULL, 1, sc) != 0) return -1;
        }
        return 0;
    }
    for (int g = 0; g < G; g++) {
        for (int t = 0; t < n_tok; t++) memcpy(tmp + t * n_in, x + t * x_tok + g * x_grp, sizeof(float) * (size_t)n_in);
        const mm_op op = {wtype, wb + (size_t)g * w_stride, n_out, y + g * y_grp, ldy, tmp, packed};
        if (mm_mul_n(pool, &op, 1, n_in, NULL, n_tok, sc) != 0) return -1;
    }
    return 0;
}
