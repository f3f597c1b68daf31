/*
 * attn.c - causal self-attention over a layer's cached keys and values
 * (attn.h). The cache itself belongs to the session (session.c).
 *
 * DESIGN
 * The cache holds, per layer and position, the keys of all KV heads side by
 * side (kv_dim_k elements) and likewise the values, as f32 or f16. Query
 * heads that share a KV head (grouped-query attention) read the same K/V
 * rows, and so do consecutive query tokens of a prompt. Work is therefore
 * cut into units of (KV head, a run of its query heads, a run of tokens):
 * up to ATT_MAX_Q queries that walk the cache together, KEY_BLOCK rows at a
 * time, so each block of K (then V) rows is loaded from memory once and
 * reused from L1 by every query of the unit. Units are claimed from an
 * atomic counter (tp_run_dyn), latest tokens first (they have the most
 * keys), so the causal imbalance evens out.
 *
 * Per query: scores = K q (the type's dot_rows kernel, eight rows at a
 * time), scaled; softmax with the type-independent exp_sum kernel; then
 * out = sum_p score_p V_p (axpy_rows, accumulating in key order). Each
 * query only reads keys up to its own position (causal), and every step is
 * the same whichever unit the query lands in, so a token's attention output
 * is bit-identical in a batch and alone.
 *
 * Sliding windows and sinks (gpt-oss). A query at position q with window
 * W reads keys (q - W, q] only; score rows stay indexed by absolute
 * position and key blocks stay at multiples of KEY_BLOCK, so a window changes
 * where each query starts, not the order anything is summed in. A layer's
 * cache may be a ring of `ring` rows (a multiple of KEY_BLOCK, at least
 * W + n_batch - 1): position p lives in row p % ring, a key block never
 * wraps, and the rows a batch overwrites are older than any of its queries
 * can see. A sink is one more logit per head in the softmax's denominator
 * (ggml's soft_max with sinks: the max includes it, its exp joins the sum),
 * with no value.
 *
 * Sparse attention (DSA). A query with a selection (sel, sel_k ascending
 * positions chosen by the lightning indexer) reads only the selected keys
 * and values: within each key block, each run of consecutive selected
 * positions is one dot_rows (then one axpy_rows) call, and the unselected
 * positions' scores are -inf, so the softmax runs over the same score row
 * as a dense query's. dot_rows computes a row's dot the same way in any
 * slot, and an unselected value would only have added 0 * v (exactly
 * nothing) to the output, so the result is the bits of scoring every key
 * and masking (what this did before), in a batch and alone.
 *
 * Scratch: the caller's per-thread rows hold ATT_MAX_Q score rows each
 * (df_attn_scratch_floats sizes them).
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "attn.h"
#include "quant.h"

#define ATT_MAX_Q 32   /* queries per work unit */
#define KEY_BLOCK 64   /* cache rows per block: 64 x 128 f32 = 32 KiB */

int64_t df_attn_scratch_floats(int n_ctx) { return (int64_t)ATT_MAX_Q * n_ctx; }

typedef struct {
    const df_attn_desc *d;
    float *scratch;
    int64_t scratch_stride;  /* floats per thread */
    int64_t ctx;             /* floats per score row: scratch_stride / ATT_MAX_Q */
    int hs, tq;              /* query heads and tokens per unit */
    int n_hs, n_tb;          /* head runs per KV head, token blocks */
    long n_units;
    atomic_long next;
} attn_job;

/* The first index of sel (k ascending positions) at or after position lo. */
static int sel_from(const int32_t *sel, int k, int lo) {
    int a = 0, b = k;
    while (a < b) {
        const int mid = a + (b - a) / 2;
        if (sel[mid] < lo) a = mid + 1;
        else b = mid;
    }
    return a;
}

/* The end of the run of consecutive positions in sel[j..k) that starts at j,
 * stopping before position hi. */
static int sel_run_end(const int32_t *sel, int k, int j, int hi) {
    int e = j + 1;
    while (e < k && sel[e] < hi && sel[e] == sel[e - 1] + 1) e++;
    return e;
}

/* One unit: KV head g, query heads [h0, h1) of its group, tokens [t0, t1). */
static void attn_unit(const attn_job *j, float *scratch, int g, int h0, int h1, int t0, int t1) {
    const df_attn_desc *d = j->d;
    const int64_t ctx = j->ctx;
    const int group = d->n_head / d->n_head_kv;
    const quant_traits *kt = quant_traits_get(d->kv_type);
    const quant_traits *ft = quant_traits_get(DF_TYPE_F32);
    const uint8_t *kbase = d->k + (size_t)g * d->k_head, *vbase = d->v + (size_t)g * d->v_head;
    const int nh = h1 - h0, nq = nh * (t1 - t0);
    const int max_keys = d->pos + t1;
    const int first_block = d->window > 0 && d->pos + t0 - d->window + 1 > 0
                                ? (d->pos + t0 - d->window + 1) / KEY_BLOCK * KEY_BLOCK
                                : 0;
#define QUERY(i) (d->q + (int64_t)(t0 + (i) / nh) * d->q_tok + (int64_t)(g * group + h0 + (i) % nh) * d->q_head)
#define OUT(i) (d->out + (int64_t)(t0 + (i) / nh) * d->o_tok + (int64_t)(g * group + h0 + (i) % nh) * d->o_head)
#define NKEYS(i) (d->pos + t0 + (i) / nh + 1)
#define FIRST(i) (d->window > 0 && NKEYS(i) > d->window ? NKEYS(i) - d->window : 0)
#define ROW(p0) ((size_t)(d->ring ? (p0) % d->ring : (p0))) /* a block's first cache row (blocks never wrap) */
    /* the query's selection when it has more keys than it selects, else NULL (it reads them all) */
#define SEL(i) (d->sel && NKEYS(i) > d->sel_k ? d->sel + (int64_t)(t0 + (i) / nh) * d->sel_k : NULL)
    /* scores, a block of keys at a time for all queries */
    for (int p0 = first_block; p0 < max_keys; p0 += KEY_BLOCK)
        for (int i = 0; i < nq; i++) {
            const int lo = FIRST(i) > p0 ? FIRST(i) : p0, hi = NKEYS(i) < p0 + KEY_BLOCK ? NKEYS(i) : p0 + KEY_BLOCK;
            if (hi <= lo) continue;
            float *sc = scratch + (int64_t)i * ctx; /* indexed by position */
            const int32_t *sel = SEL(i);
            if (!sel) {
                kt->dot_rows(d->hd, QUERY(i), kbase + (ROW(p0) + (size_t)(lo - p0)) * d->k_stride, d->k_stride,
                             hi - lo, sc + lo);
                continue;
            }
            for (int p = lo; p < hi; p++) sc[p] = -INFINITY;
            for (int r = sel_from(sel, d->sel_k, lo), e; r < d->sel_k && sel[r] < hi; r = e) {
                e = sel_run_end(sel, d->sel_k, r, hi);
                kt->dot_rows(d->hd, QUERY(i), kbase + (ROW(p0) + (size_t)(sel[r] - p0)) * d->k_stride, d->k_stride,
                             e - r, sc + sel[r]);
            }
        }
    /* softmax of scale * scores (and the head's sink) */
    for (int i = 0; i < nq; i++) {
        const int lo = FIRST(i), nk = NKEYS(i) - lo;
        float *sc = scratch + (int64_t)i * ctx + lo;
        const float sink = d->sinks ? d->sinks[g * group + h0 + i % nh] : -INFINITY;
        float mx = sc[0] * d->scale;
        for (int p = 0; p < nk; p++) {
            sc[p] *= d->scale;
            mx = sc[p] > mx ? sc[p] : mx;
        }
        if (sink > mx) mx = sink;
        float sum = ft->exp_sum(sc, nk, mx);
        if (d->sinks) sum += expf(sink - mx);
        const float inv = 1.0f / sum;
        for (int p = 0; p < nk; p++) sc[p] *= inv;
        memset(OUT(i), 0, sizeof(float) * (size_t)d->hdv);
    }
    /* weighted sum of values, in key order */
    for (int p0 = first_block; p0 < max_keys; p0 += KEY_BLOCK)
        for (int i = 0; i < nq; i++) {
            const int lo = FIRST(i) > p0 ? FIRST(i) : p0, hi = NKEYS(i) < p0 + KEY_BLOCK ? NKEYS(i) : p0 + KEY_BLOCK;
            if (hi <= lo) continue;
            const float *sc = scratch + (int64_t)i * ctx;
            const int32_t *sel = SEL(i);
            if (!sel) {
                kt->axpy_rows(d->hdv, sc + lo, vbase + (ROW(p0) + (size_t)(lo - p0)) * d->v_stride, d->v_stride,
                              hi - lo, OUT(i));
                continue;
            }
            for (int r = sel_from(sel, d->sel_k, lo), e; r < d->sel_k && sel[r] < hi; r = e) {
                e = sel_run_end(sel, d->sel_k, r, hi);
                kt->axpy_rows(d->hdv, sc + sel[r], vbase + (ROW(p0) + (size_t)(sel[r] - p0)) * d->v_stride,
                              d->v_stride, e - r, OUT(i));
            }
        }
#undef QUERY
#undef OUT
#undef NKEYS
#undef FIRST
#undef ROW
#undef SEL
}

static void attn_worker(void *arg, int ith, int nth) {
    attn_job *j = arg;
    (void)nth;
    const df_attn_desc *d = j->d;
    const int group = d->n_head / d->n_head_kv;
    float *scratch = j->scratch + (int64_t)ith * j->scratch_stride;
    const long per_tb = (long)d->n_head_kv * j->n_hs;
    for (long u; (u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_units;) {
        const int tb = j->n_tb - 1 - (int)(u / per_tb); /* latest tokens first */
        const int g = (int)(u % per_tb) / j->n_hs, hsi = (int)(u % per_tb) % j->n_hs;
        const int h0 = hsi * j->hs, h1 = h0 + j->hs < group ? h0 + j->hs : group;
        const int t0 = tb * j->tq, t1 = t0 + j->tq < d->n_tok ? t0 + j->tq : d->n_tok;
        attn_unit(j, scratch, g, h0, h1, t0, t1);
    }
}

void df_attention_run(tp_pool *pool, float *scratch, int64_t scratch_stride, const df_attn_desc *d) {
    const int group = d->n_head / d->n_head_kv, nth = tp_size(pool);
    attn_job j;
    memset(&j, 0, sizeof j);
    j.d = d;
    j.scratch = scratch;
    j.scratch_stride = scratch_stride;
    j.ctx = scratch_stride / ATT_MAX_Q;
    j.hs = group < ATT_MAX_Q ? group : ATT_MAX_Q;
    for (;;) {
        j.n_hs = (group + j.hs - 1) / j.hs;
        j.tq = ATT_MAX_Q / j.hs < d->n_tok ? ATT_MAX_Q / j.hs : d->n_tok;
        j.n_tb = (d->n_tok + j.tq - 1) / j.tq;
        j.n_units = (long)d->n_head_kv * j.n_hs * j.n_tb;
        if (j.n_units >= 2L * nth || j.hs == 1) break;
        j.hs = (j.hs + 1) / 2; /* too few units (generation, few KV heads): split the group */
    }
    atomic_init(&j.next, 0);
    if (j.n_units == 1) attn_worker(&j, 0, 1);
    else tp_run_dyn(pool, attn_worker, &j);
}
