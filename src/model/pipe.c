/*
 * pipe.c - pipeline parallel: the layer ranges, the hand-over of a pass's
 * state from rank to rank, and the mirror sessions of the ranks other than
 * 0 (design in pipe.h and docs/cluster.md).
 */
#include "pipe.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "gguf.h"
#include "layer.h"
#include "session.h"
#include "util.h"
#include "wstore.h"

pp_state *pp_new(int rank, int size, int id) {
    pp_state *pp = calloc(1, sizeof *pp);
    if (!pp) return NULL;
    pp->rank = rank;
    pp->size = size;
    pp->id = id;
    const char *want = getenv("DELTAFIN_PIPE_CHUNKS"); /* 0: every pass whole; N: N chunks (A/B runs) */
    pp->want_chunks = want && *want ? atoi(want) : -1;
    pp->lo = calloc((size_t)size, sizeof *pp->lo);
    pp->hi = calloc((size_t)size, sizeof *pp->hi);
    if (!pp->lo || !pp->hi) {
        pp_free(pp);
        return NULL;
    }
    return pp;
}

void pp_free(pp_state *pp) {
    if (!pp) return;
    free(pp->lo);
    free(pp->hi);
    free(pp->buf);
    free(pp);
}

int pp_split(pp_state *pp, const gguf_ctx *g, int n_layer, char *err, size_t errlen) {
    const int R = pp->size;
    if (R > n_layer)
        return df_seterr(err, errlen, "%d ranks, but the model has %d layers: at most %d ranks can share them (--split "
                         "layers)", R, n_layer, n_layer);
    double *bytes = calloc((size_t)n_layer + 1, sizeof *bytes), total = 0;
    if (!bytes) return df_seterr(err, errlen, "out of memory");
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const int l = ws_layer_of(g->tensors[i].name);
        if (l >= n_layer) continue; /* a block the forward pass never runs (NextN) */
        bytes[l < 0 ? n_layer : l] += (double)g->tensors[i].nbytes; /* [n_layer]: rank 0's embeddings, output */
        total += (double)g->tensors[i].nbytes;
    }
    /* contiguous ranges: rank r ends where the running sum passes (r + 1) / R of the total, leaving every later
     * rank at least a layer */
    double sum = bytes[n_layer];
    int l = 0;
    for (int r = 0; r < R; r++) {
        pp->lo[r] = l;
        const double target = total * (r + 1) / R;
        do {
            sum += bytes[l++];
        } while (l < n_layer - (R - 1 - r) && sum + bytes[l] / 2 < target);
        if (r == R - 1) l = n_layer;
        pp->hi[r] = l;
    }
    free(bytes);
    return 0;
}

void pp_stage(df_model *m) {
    const pp_state *pp = m->pp;
    m->stage_lo = pp->lo[pp->rank];
    m->stage_hi = pp->hi[pp->rank];
    m->stage_outputs = pp->rank == 0;
}

void df_pipe_layers(const df_session *s, int *lo, int *hi) {
    const pp_state *pp = s->m->pp;
    *lo = pp ? pp->lo[pp->rank] : 0;
    *hi = pp ? pp->hi[pp->rank] : s->m->hp.n_layer;
    if (pp && pp->staged == PP_TAIL) *lo = *hi = s->m->hp.n_layer; /* rank 0: only the output, after the last rank */
}

int df_pipe_refuse(const df_session *s, const char *what, char *err, size_t errlen) {
    if (!s->m->pp) return 0;
    return df_seterr(err, errlen, "%s: not with --split layers yet (each rank holds its own layers' memory of the "
                     "session)", what);
}

int df_pipe_outputs(const df_session *s) { return !s->m->pp || s->m->pp->rank == 0; }

static int grow(pp_state *pp, size_t n, char *err, size_t errlen) {
    if (n <= pp->cap) return 0;
    uint8_t *b = realloc(pp->buf, n);
    if (!b) return df_seterr(err, errlen, "out of memory for a cluster message of %zu bytes", n);
    pp->buf = b;
    pp->cap = n;
    return 0;
}

static size_t carry_bytes(const size_t *floats, int nbuf) {
    size_t n = 0;
    for (int i = 0; i < nbuf; i++) n += floats[i] * sizeof(float);
    return n;
}

/* The carry broadcast from root: sent from bufs (root is this rank), or received, and then kept in bufs
 * when keep. */
static int carry_bcast(pp_state *pp, int root, int keep, float *const *bufs, const size_t *floats, int nbuf,
                       char *err, size_t errlen) {
    const size_t n = carry_bytes(floats, nbuf);
    if (grow(pp, n ? n : 1, err, errlen) != 0) return -1;
    size_t at = 0;
    if (root == pp->rank)
        for (int i = 0; i < nbuf; at += floats[i++] * sizeof(float)) memcpy(pp->buf + at, bufs[i], floats[i] * sizeof(float));
    if (comm_bcast(pp->buf, n, root, err, errlen) != 0) return -1;
    pp->messages++;
    if (root == pp->rank) pp->sent += n * (size_t)(pp->size - 1);
    else pp->received += n;
    if (keep && root != pp->rank)
        for (int i = 0; i < nbuf; at += floats[i++] * sizeof(float)) memcpy(bufs[i], pp->buf + at, floats[i] * sizeof(float));
    return 0;
}

/* A chunked pass's carry: taken from src into bufs (enter), or left in out from bufs (hop). */
static void carry_unpack(const uint8_t *src, float *const *bufs, const size_t *floats, int nbuf) {
    for (int i = 0; i < nbuf; src += floats[i++] * sizeof(float)) memcpy(bufs[i], src, floats[i] * sizeof(float));
}

static int carry_pack(pp_state *pp, float *const *bufs, const size_t *floats, int nbuf, char *err, size_t errlen) {
    const size_t n = carry_bytes(floats, nbuf);
    if (n > pp->out_cap) return df_seterr(err, errlen, "internal: a carry of %zu bytes for a chunk of %zu", n, pp->out_cap);
    uint8_t *at = pp->out;
    for (int i = 0; i < nbuf; at += floats[i++] * sizeof(float)) memcpy(at, bufs[i], floats[i] * sizeof(float));
    pp->out_bytes = n;
    return 0;
}

int df_pipe_enter(df_session *s, float *const *bufs, const size_t *floats, int nbuf, char *err, size_t errlen) {
    pp_state *pp = s->m->pp;
    if (pp && pp->staged) {
        carry_unpack(pp->src, bufs, floats, nbuf);
        return 0;
    }
    for (int root = 0; pp && root < pp->rank; root++)
        if (carry_bcast(pp, root, root == pp->rank - 1, bufs, floats, nbuf, err, errlen) != 0) return -1;
    return 0;
}

/* A pass's run of one session, as the other ranks hear of it. */
typedef struct pp_run {
    uint64_t id;
    int32_t pos, n_tok, n_ctx, n_batch, kv_type, spec_k_max;
} pp_run;

/* Rank 0: the head and the rows of a pass. */
/* The runs of a pass of n rows (own, s as df_arch.forward has them) at the start of pp->buf, with room
 * after them for `more` int32s: their number, or -1 with err. */
static int put_runs(pp_state *pp, df_session *s, df_session *const *own, int n, int more, char *err, size_t errlen) {
    int runs = 0;
    for (int t = 0; t < n; t += df_row_run(own, t, n)) runs++;
    if (grow(pp, sizeof(pp_run) * (size_t)runs + sizeof(int32_t) * (size_t)more, err, errlen) != 0) return -1;
    pp_run *r = (pp_run *)(void *)pp->buf;
    for (int t = 0, i = 0; t < n; t += r[i++].n_tok) {
        const df_session *o = own ? own[t] : s;
        r[i] = (pp_run){.id = o->pp_id, .pos = df_row_pos(s, own, t), .n_tok = df_row_run(own, t, n),
                        .n_ctx = o->n_ctx, .n_batch = o->n_batch, .kv_type = o->params.kv_type,
                        .spec_k_max = o->params.spec_k_max};
    }
    return runs;
}

static int send_rows(pp_state *pp, df_session *s, df_session *const *own, const int32_t *tokens, int n, char *err,
                     size_t errlen) {
    const int runs = put_runs(pp, s, own, n, n, err, errlen);
    if (runs < 0) return -1;
    const size_t bytes = sizeof(pp_run) * (size_t)runs + sizeof(int32_t) * (size_t)n;
    memcpy(pp->buf + sizeof(pp_run) * (size_t)runs, tokens, sizeof(int32_t) * (size_t)n);
    const ep_head h = {.op = EP_PP_RUN, .model = pp->id, .n = n, .layer = runs, .bytes = bytes};
    pp->messages += 2;
    pp->sent += bytes * (uint64_t)(pp->size - 1);
    return ep_send(NULL, &h, pp->buf, err, errlen);
}

int df_pipe_hop(df_session *s, df_session *const *own, const int32_t *tokens, int n, float *const *bufs,
                const size_t *floats, int nbuf, char *err, size_t errlen) {
    pp_state *pp = s->m->pp;
    if (!pp) return 0;
    if (pp->staged) return pp->staged == PP_STAGE ? carry_pack(pp, bufs, floats, nbuf, err, errlen) : 0;
    if (pp->rank == 0 && send_rows(pp, s, own, tokens, n, err, errlen) != 0) return -1;
    for (int root = pp->rank; root < pp->size; root++)
        if (carry_bcast(pp, root, pp->rank == 0 && root == pp->size - 1, bufs, floats, nbuf, err, errlen) != 0)
            return -1;
    return 0;
}

/* ---- the other ranks: mirror sessions ---- */

struct pp_mirrors {
    uint64_t *id;
    df_session **s;
    int n, cap;
};

pp_mirrors *pp_mirrors_new(void) { return calloc(1, sizeof(pp_mirrors)); }

void pp_mirrors_free(pp_mirrors *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) df_session_free(t->s[i]);
    free(t->id);
    free(t->s);
    free(t);
}

static int find_mirror(const pp_mirrors *t, uint64_t id) {
    for (int i = 0; i < t->n; i++)
        if (t->id[i] == id) return i;
    return -1;
}

/* The mirror of run r, made as rank 0's session was if there is none yet. */
static df_session *mirror_of(df_model *m, pp_mirrors *t, const pp_run *r, char *err, size_t errlen) {
    int i = find_mirror(t, r->id);
    if (i < 0) {
        if (t->n == t->cap) {
            const int cap = t->cap ? 2 * t->cap : 8;
            uint64_t *id = realloc(t->id, sizeof *id * (size_t)cap);
            if (id) t->id = id;
            df_session **s = realloc(t->s, sizeof *s * (size_t)cap);
            if (s) t->s = s;
            if (!id || !s) return df_seterr(err, errlen, "out of memory"), NULL;
            t->cap = cap;
        }
        df_session_params p = df_session_default_params();
        p.n_ctx = r->n_ctx;
        p.n_batch = r->n_batch;
        p.kv_type = r->kv_type;
        p.spec_k_max = r->spec_k_max;
        df_session *s = NULL;
        if (df_session_new(m, &p, &s, err, errlen) != DF_OK) return NULL;
        i = t->n++;
        t->id[i] = r->id;
        t->s[i] = s;
    }
    return t->s[i];
}

/* The mirror of run r (made as rank 0's was), at r's position. */
static df_session *mirror(df_model *m, pp_mirrors *t, const pp_run *r, char *err, size_t errlen) {
    df_session *s = mirror_of(m, t, r, err, errlen);
    if (!s) return NULL;
    if (r->pos != s->pos && df_session_truncate(s, r->pos, err, errlen) != 0) return NULL;
    if (r->n_tok < 1 || r->n_tok > s->n_batch || r->pos + r->n_tok > s->n_ctx)
        return df_seterr(err, errlen, "internal: a run of %d rows at %d in a pass", r->n_tok, r->pos), NULL;
    return s;
}

/* A pass's runs (r, runs of them, n rows of tokens) as the mirrors they run on: own[t], row t's; the pass's
 * message counted, the mirrors' scratch bound. 0 or -1 with err. */
static int take_runs(df_model *m, pp_mirrors *t, const ep_head *h, const pp_run *r, int runs, const int32_t *tokens,
                     int n, df_session **own, char *err, size_t errlen) {
    for (int i = 0, t0 = 0; i < runs; t0 += r[i++].n_tok) {
        df_session *s = mirror(m, t, &r[i], err, errlen);
        if (!s) return -1;
        if (t0 + r[i].n_tok > n) return df_seterr(err, errlen, "internal: a damaged pass message");
        for (int k = 0; k < r[i].n_tok; k++) own[t0 + k] = s;
    }
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab) return df_seterr(err, errlen, "internal: token %d in a pass", tokens[i]);
    m->pp->messages += 2;
    m->pp->received += h->bytes;
    for (int i = 0; i < n; i++) df_session_bind_scratch(own[i]);
    return 0;
}

int df_pipe_pass(df_model *m, pp_mirrors *t, const ep_head *h, char *err, size_t errlen) {
    const int n = h->n, runs = h->layer;
    if (n < 1 || runs < 1 || runs > n || h->bytes != sizeof(pp_run) * (size_t)runs + sizeof(int32_t) * (size_t)n)
        return df_seterr(err, errlen, "internal: a damaged pass message");
    uint8_t *msg = malloc((size_t)h->bytes);
    df_session **own = malloc(sizeof *own * (size_t)n);
    int rc = !msg || !own ? df_seterr(err, errlen, "out of memory"), -1 : 0;
    if (rc == 0) rc = comm_bcast(msg, (size_t)h->bytes, 0, err, errlen);
    const pp_run *r = (const pp_run *)(void *)msg;
    const int32_t *tokens = (const int32_t *)(void *)(msg + sizeof(pp_run) * (size_t)runs);
    if (rc == 0) rc = take_runs(m, t, h, r, runs, tokens, n, own, err, errlen);
    if (rc == 0) {
        if (runs == 1) {
            rc = m->arch->forward(own[0], NULL, tokens, n, NULL, 0, err, errlen);
        } else {
            rc = m->arch->forward(own[0], own, tokens, n, NULL, 1, err, errlen);
            for (int i = 0, t0 = 0; rc == 0 && i < runs; t0 += r[i++].n_tok) own[t0]->pos += r[i].n_tok;
        }
        ws_tick(m->ws);
    }
    free(msg);
    free(own);
    return rc;
}

void df_pipe_session(pp_mirrors *t, const ep_head *h) {
    const int i = find_mirror(t, h->pass);
    if (i < 0) return; /* never in a pass here */
    df_session_free(t->s[i]);
    t->id[i] = t->id[t->n - 1];
    t->s[i] = t->s[--t->n];
}

void df_pipe_freed(df_session *s) {
    pp_state *pp = s->m->pp;
    if (!pp || pp->rank != 0) return;
    const ep_head h = {.op = EP_PP_SESSION, .model = pp->id, .pass = s->pp_id};
    pthread_mutex_lock(&s->m->decode_mu); /* never inside a pass's messages */
    pp->messages++;
    ep_send(NULL, &h, NULL, NULL, 0);
    pthread_mutex_unlock(&s->m->decode_mu);
}

/* ---- a session's memory over the ranks (snapshot.c) ---- */

int df_pipe_state_begin(df_session *s, int dir, int pos, char *err, size_t errlen) {
    pp_state *pp = s->m->pp;
    const pp_run r = {.id = s->pp_id, .pos = pos, .n_ctx = s->n_ctx, .n_batch = s->n_batch,
                      .kv_type = s->params.kv_type, .spec_k_max = s->params.spec_k_max};
    const ep_head h = {.op = EP_PP_STATE, .model = pp->id, .layer = dir, .n = pos, .bytes = sizeof r};
    pthread_mutex_lock(&s->m->decode_mu); /* never inside a pass's messages */
    pp->messages += 2;
    pp->sent += sizeof r * (uint64_t)(pp->size - 1);
    if (ep_send(NULL, &h, &r, err, errlen) == 0) return 0;
    pthread_mutex_unlock(&s->m->decode_mu);
    return -1;
}

void df_pipe_state_end(df_session *s) { pthread_mutex_unlock(&s->m->decode_mu); }

df_session *df_pipe_state_mirror(df_model *m, pp_mirrors *t, const ep_head *h, char *err, size_t errlen) {
    pp_run r;
    if (h->bytes != sizeof r) return df_seterr(err, errlen, "internal: a damaged state message"), NULL;
    if (comm_bcast(&r, sizeof r, 0, err, errlen) != 0) return NULL;
    m->pp->messages += 2;
    m->pp->received += sizeof r;
    df_session *s = mirror_of(m, t, &r, err, errlen);
    if (s && (r.pos < 0 || r.pos > s->n_ctx || (h->layer == 0 && r.pos != s->pos)))
        return df_seterr(err, errlen, "internal: a session's memory at %d asked of a mirror at %d", r.pos, s->pos), NULL;
    return s;
}

/* ---- a pass in chunks: the stages overlap ----
 *
 * A pass of many consecutive rows of one session (a prompt) is cut into
 * chunks that follow each other through the stages: chunk m runs on rank r
 * at step m + r, so while rank 1 runs chunk 0, rank 0 runs chunk 1. After
 * each step's computing every rank takes part in the step's broadcasts of
 * the carries, rooted at each rank in turn (collectives only, in the same
 * order everywhere); a rank keeps the carry of the rank before it for its
 * next step, and rank 0 the last rank's, from which it computes the chunk's
 * output (PP_TAIL: the forward pass with no layers). A chunk's rows come out
 * as they would in one pass: the products and attention of a row do not
 * depend on the rows beside it (tests/cli/cluster.sh compares the logits). */

#define PP_CHUNK_MIN 8   /* rows: smaller chunks cost more in messages and in products than the overlap gains */
#define PP_CHUNK_ROWS 16 /* rows a chunk gives each weight (each expert: on average) */
#define PP_CHUNKS_MAX 64 /* chunks of a pass at most */

/* How many chunks a pass of n rows of m (own: as df_arch.forward has them) is cut into, into off[] and
 * rows[] (room for PP_CHUNKS_MAX): 1 when it stays whole. Every chunk reads the stage's weights again, so it must
 * keep enough rows a weight to stay computing rather than reading: PP_CHUNK_ROWS rows of every dense matrix,
 * and of every routed expert on average (a sparse MoE's prompt of 512 rows gives each of 128 experts, 4 used,
 * 16 rows: cut in two it measured slower, bench/RESULTS.md). A batch is cut between sessions only, and only
 * when its runs are long on average (prompts): a generation step of one row a sequence, cut, measured no
 * faster even at 64 sequences of a dense model (2 ranks: 2550-2710 tokens/s in two chunks, 2640-2650 whole;
 * in four, 2030), its small products losing what the overlap gains. */
static int chunk_cut(const df_model *m, df_session *const *own, int n, int *off, int *rows) {
    const pp_state *pp = m->pp;
    const int most = 2 * pp->size < PP_CHUNKS_MAX ? 2 * pp->size : PP_CHUNKS_MAX;
    int c = pp->want_chunks >= 0 ? pp->want_chunks : most;
    const int64_t per_weight = m->hp.n_expert > 0 ? (int64_t)n * m->hp.n_expert_used / m->hp.n_expert : n;
    if (pp->want_chunks < 0 && c > per_weight / PP_CHUNK_ROWS) c = (int)(per_weight / PP_CHUNK_ROWS);
    if (c > most) c = most;
    if (c > n / PP_CHUNK_MIN) c = n / PP_CHUNK_MIN;
    if (c < 2) return 1;
    if (!own) {
        for (int i = 0; i < c; i++) off[i] = (int)((int64_t)n * i / c), rows[i] = (int)((int64_t)n * (i + 1) / c) - off[i];
        return c;
    }
    int runs = 0;
    for (int t = 0; t < n; t += df_row_run(own, t, n)) runs++;
    if (n / runs < PP_CHUNK_MIN) return 1;
    int k = 0;
    for (int t = 0; t < n;) { /* whole runs, each chunk to about n / c rows */
        off[k] = t;
        while (t < n && (t == off[k] || t - off[k] < n / c)) t += df_row_run(own, t, n);
        rows[k] = t - off[k];
        if (++k == most && t < n) return 1; /* runs too uneven to cut: whole */
    }
    for (int i = 0; i < k; i++)
        if (rows[i] < PP_CHUNK_MIN) return 1;
    return k;
}

static size_t carry_row_bytes(const df_model *m) {
    return sizeof(float) * (size_t)m->hp.n_embd * (size_t)(m->arch->carry_rows ? m->arch->carry_rows(m) : 1);
}

/* The steps both sides run (above): compute(ctx, m) runs chunk m's layers here; tail(ctx, m), on rank 0, its
 * output. A failure to compute is kept and returned at the end, the broadcasts still made (the others wait for
 * them); a failed broadcast ends it at once. */
static int chunk_steps(pp_state *pp, int C, const int *rows, size_t row_bytes, int (*compute)(void *ctx, int m),
                       int (*tail)(void *ctx, int m), void *ctx, char *err, size_t errlen) {
    const int R = pp->size, me = pp->rank;
    int most = 0;
    for (int m = 0; m < C; m++) most = rows[m] > most ? rows[m] : most;
    const size_t cap = (size_t)most * row_bytes;
    uint8_t *in = malloc(cap), *fin = malloc(cap), *junk = malloc(cap), *out = malloc(cap);
    if (!in || !fin || !junk || !out) {
        free(in), free(fin), free(junk), free(out);
        return df_seterr(err, errlen, "out of memory for a pass in chunks");
    }
    pp->out = out;
    pp->out_cap = cap;
    int rc = 0;
    for (int k = 0; k < C + R - 1; k++) {
        const int m = k - me;
        if (m >= 0 && m < C) {
            pp->src = in;
            pp->staged = PP_STAGE;
            pp->out_bytes = 0;
            if (rc == 0 && compute(ctx, m) != 0) rc = -1;
            if (rc == 0 && pp->out_bytes != (size_t)rows[m] * row_bytes)
                rc = df_seterr(err, errlen, "internal: a chunk's carry of %zu bytes, not %zu", pp->out_bytes,
                               (size_t)rows[m] * row_bytes);
        }
        for (int q = 0; q < R; q++) {
            const int mq = k - q;
            if (mq < 0 || mq >= C) continue;
            const size_t n = (size_t)rows[mq] * row_bytes;
            uint8_t *b = q == me ? out : q == me - 1 ? in : me == 0 && q == R - 1 ? fin : junk;
            char e2[256];
            if (comm_bcast(b, n, q, e2, sizeof e2) != 0) {
                pp->staged = PP_WHOLE;
                free(in), free(fin), free(junk), free(out);
                pp->out = NULL;
                return df_seterr(err, errlen, "%s", e2);
            }
            pp->messages++;
            if (q == me) pp->sent += n * (uint64_t)(R - 1);
            else pp->received += n;
        }
        const int mf = k - (R - 1);
        if (me == 0 && mf >= 0 && mf < C) {
            pp->src = fin;
            pp->staged = PP_TAIL;
            if (rc == 0 && tail(ctx, mf) != 0) rc = -1;
        }
    }
    pp->staged = PP_WHOLE;
    pp->out = NULL;
    free(in), free(fin), free(junk), free(out);
    return rc;
}

/* Rank 0's pass: its sessions (own, or one), its rows, where their logits go. */
typedef struct {
    df_session *s;
    df_session *const *own;
    const int32_t *tokens;
    int *off, *rows, C, pos0, all_logits;
    float *logits;
    const int *out_rows; /* a batch's rows to output (s->out_rows as the caller set them), n_out of them */
    int n_out;
    char *err;
    size_t errlen;
} chunk_pass;

static int run_chunk(void *ctx, int m) {
    chunk_pass *c = ctx;
    return c->s->m->arch->forward(c->s, c->own ? c->own + c->off[m] : NULL, c->tokens + c->off[m], c->rows[m], NULL,
                                  c->own != NULL, c->err, c->errlen);
}

/* Chunk m's output: alone, the last chunk's last row or every row (all_logits); a batch's, the rows out_rows
 * names within the chunk, into their places. */
static int chunk_output(void *ctx, int m) {
    chunk_pass *c = ctx;
    df_session *s = c->s;
    const int nv = s->m->hp.n_vocab, lo = c->off[m], hi = lo + c->rows[m];
    if (!c->logits || (!c->own && !c->all_logits && m != c->C - 1)) return 0; /* no logits wanted of it */
    float *dst = c->all_logits || c->own ? c->logits + (size_t)lo * (size_t)nv : c->logits;
    int j0 = 0, k = 0, rel[64], *rows = rel;
    if (c->own && c->out_rows) { /* the output rows within this chunk, as its own rows */
        while (j0 < c->n_out && c->out_rows[j0] < lo) j0++;
        while (j0 + k < c->n_out && c->out_rows[j0 + k] < hi) k++;
        if (k == 0) return 0;
        if (k > 64 && !(rows = malloc(sizeof *rows * (size_t)k))) return df_seterr(c->err, c->errlen, "out of memory");
        for (int j = 0; j < k; j++) rows[j] = c->out_rows[j0 + j] - lo;
        dst = c->logits + (size_t)j0 * (size_t)nv;
        s->out_rows = rows;
        s->n_out_rows = k;
    }
    const int pos = s->pos; /* alone: past the chunks run since; back to this one's while its output is made */
    if (!c->own) s->pos = c->pos0 + lo;
    const int rc = s->m->arch->forward(s, c->own ? c->own + lo : NULL, c->tokens + lo, c->rows[m], dst,
                                       c->own ? 1 : c->all_logits, c->err, c->errlen);
    s->pos = pos;
    if (c->own && c->out_rows) s->out_rows = c->out_rows, s->n_out_rows = c->n_out;
    if (rows != rel) free(rows);
    return rc;
}

int df_pipe_forward(df_session *s, df_session *const *own, const int32_t *tokens, int n, float *logits,
                    int all_logits, char *err, size_t errlen) {
    df_model *m = s->m;
    pp_state *pp = m->pp;
    int off[PP_CHUNKS_MAX], rows[PP_CHUNKS_MAX];
    const int C = pp && pp->rank == 0 ? chunk_cut(m, own, n, off, rows) : 1;
    if (C < 2) return m->arch->forward(s, own, tokens, n, logits, all_logits, err, errlen); /* a whole pass */
    /* the runs as a whole pass sends them (send_rows), then the chunks' rows, then the tokens */
    const int runs = put_runs(pp, s, own, n, C + n, err, errlen);
    const size_t bytes = sizeof(pp_run) * (size_t)(runs > 0 ? runs : 0) + sizeof(int32_t) * (size_t)(C + n);
    int rc = runs < 0 ? -1 : 0;
    if (rc == 0) {
        int32_t *w = (int32_t *)(void *)(pp->buf + sizeof(pp_run) * (size_t)runs);
        for (int i = 0; i < C; i++) w[i] = rows[i];
        memcpy(w + C, tokens, sizeof(int32_t) * (size_t)n);
        /* n rows, C chunks, and the runs in n_guess (EP_RUN's field: unused by this message otherwise) */
        const ep_head h = {.op = EP_PP_CHUNKS, .model = pp->id, .n = n, .layer = C, .n_guess = runs, .bytes = bytes};
        pp->messages += 2;
        pp->sent += bytes * (uint64_t)(pp->size - 1);
        rc = ep_send(NULL, &h, pp->buf, err, errlen);
    }
    chunk_pass c = {s, own, tokens, off, rows, C, s->pos, all_logits, logits, s->out_rows, s->n_out_rows, err, errlen};
    if (rc == 0) rc = chunk_steps(pp, C, rows, carry_row_bytes(m), run_chunk, chunk_output, &c, err, errlen);
    return rc;
}

/* A rank other than 0: its part of a chunked pass, on the sessions' mirrors. */
typedef struct {
    df_session *s;
    df_session **own; /* a batch's rows' mirrors, or NULL (one session's consecutive rows) */
    const int32_t *tokens;
    const int32_t *rows;
    int *off;
    char *err;
    size_t errlen;
} chunk_mirror;

static int run_mirror_chunk(void *ctx, int m) {
    chunk_mirror *c = ctx;
    return c->s->m->arch->forward(c->own ? c->own[c->off[m]] : c->s, c->own ? c->own + c->off[m] : NULL,
                                  c->tokens + c->off[m], c->rows[m], NULL, c->own != NULL, c->err, c->errlen);
}

static int no_output(void *ctx, int m) {
    (void)ctx, (void)m;
    return 0;
}

int df_pipe_chunks(df_model *m, pp_mirrors *t, const ep_head *h, char *err, size_t errlen) {
    pp_state *pp = m->pp;
    const int n = h->n, C = h->layer, runs = h->n_guess;
    if (n < 1 || C < 1 || C > n || runs < 1 || runs > n ||
        h->bytes != sizeof(pp_run) * (size_t)runs + sizeof(int32_t) * (size_t)(C + n))
        return df_seterr(err, errlen, "internal: a damaged chunked pass message");
    uint8_t *msg = malloc((size_t)h->bytes);
    int *off = malloc(sizeof *off * (size_t)C);
    df_session **own = malloc(sizeof *own * (size_t)n);
    int rc = !msg || !off || !own ? df_seterr(err, errlen, "out of memory"), -1 : 0;
    if (rc == 0) rc = comm_bcast(msg, (size_t)h->bytes, 0, err, errlen);
    const pp_run *r = (const pp_run *)(void *)msg;
    const int32_t *rows = (const int32_t *)(void *)(msg + sizeof(pp_run) * (size_t)runs), *tokens = rows + C;
    for (int i = 0, at = 0; rc == 0 && i < C; at += rows[i++]) {
        off[i] = at;
        if (rows[i] < 1 || at + rows[i] > n || (i == C - 1 && at + rows[i] != n))
            rc = df_seterr(err, errlen, "internal: a damaged chunked pass message");
    }
    if (rc == 0) rc = take_runs(m, t, h, r, runs, tokens, n, own, err, errlen);
    if (rc == 0) {
        chunk_mirror c = {own[0], runs > 1 ? own : NULL, tokens, rows, off, err, errlen};
        rc = chunk_steps(pp, C, (const int *)rows, carry_row_bytes(m), run_mirror_chunk, no_output, &c, err, errlen);
        for (int i = 0, t0 = 0; rc == 0 && runs > 1 && i < runs; t0 += r[i++].n_tok) own[t0]->pos += r[i].n_tok;
        ws_tick(m->ws);
    }
    free(msg);
    free(off);
    free(own);
    return rc;
}
