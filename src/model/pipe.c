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

int df_pipe_enter(df_session *s, float *const *bufs, const size_t *floats, int nbuf, char *err, size_t errlen) {
    pp_state *pp = s->m->pp;
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
static int send_rows(pp_state *pp, df_session *s, df_session *const *own, const int32_t *tokens, int n, char *err,
                     size_t errlen) {
    int runs = 0;
    for (int t = 0; t < n; t += df_row_run(own, t, n)) runs++;
    const size_t bytes = sizeof(pp_run) * (size_t)runs + sizeof(int32_t) * (size_t)n;
    if (grow(pp, bytes, err, errlen) != 0) return -1;
    pp_run *r = (pp_run *)(void *)pp->buf;
    for (int t = 0, i = 0; t < n; t += r[i++].n_tok) {
        const df_session *o = own ? own[t] : s;
        r[i] = (pp_run){.id = o->pp_id, .pos = df_row_pos(s, own, t), .n_tok = df_row_run(own, t, n),
                        .n_ctx = o->n_ctx, .n_batch = o->n_batch, .kv_type = o->params.kv_type,
                        .spec_k_max = o->params.spec_k_max};
    }
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

int df_pipe_pass(df_model *m, pp_mirrors *t, const ep_head *h, char *err, size_t errlen) {
    pp_state *pp = m->pp;
    const int n = h->n, runs = h->layer;
    if (n < 1 || runs < 1 || runs > n || h->bytes != sizeof(pp_run) * (size_t)runs + sizeof(int32_t) * (size_t)n)
        return df_seterr(err, errlen, "internal: a damaged pass message");
    uint8_t *msg = malloc((size_t)h->bytes);
    df_session **own = malloc(sizeof *own * (size_t)n);
    int rc = !msg || !own ? df_seterr(err, errlen, "out of memory"), -1 : 0;
    if (rc == 0) rc = comm_bcast(msg, (size_t)h->bytes, 0, err, errlen);
    const pp_run *r = (const pp_run *)(void *)msg;
    const int32_t *tokens = (const int32_t *)(void *)(msg + sizeof(pp_run) * (size_t)runs);
    for (int i = 0, t0 = 0; rc == 0 && i < runs; t0 += r[i++].n_tok) {
        df_session *s = mirror(m, t, &r[i], err, errlen);
        if (!s || t0 + r[i].n_tok > n) rc = s ? df_seterr(err, errlen, "internal: a damaged pass message") : -1;
        for (int k = 0; rc == 0 && k < r[i].n_tok; k++) own[t0 + k] = s;
    }
    for (int i = 0; rc == 0 && i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab) rc = df_seterr(err, errlen, "internal: token %d in a pass", tokens[i]);
    if (rc == 0) {
        pp->messages += 2;
        pp->received += h->bytes;
        for (int i = 0; i < n; i++) df_session_bind_scratch(own[i]);
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
