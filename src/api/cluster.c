/*
 * cluster.c - one model over several processes (mpirun): joining, the loop
 * the ranks other than 0 spend their life in, and leaving.
 *
 * DESIGN (the whole picture: docs/cluster.md)
 * Rank 0 is the program the user started: it parses the command, loads the
 * model, serves the requests, prints. Every other rank calls
 * df_cluster_worker, which waits for rank 0's messages (expar.h): EP_BUDGETS
 * (say this rank's budget, by which rank 0 shares a model's experts out),
 * EP_LOAD (load this rank's share of a model: df_load_share), EP_RUN (run its
 * experts on a layer's rows and send them back), EP_UNLOAD, EP_STOP (rank 0
 * is leaving: leave too). Several models may be loaded at once (a job
 * worker loads one per job); each has rank 0's id.
 *
 * A rank that fails in the middle of a step cannot leave the others waiting
 * for its rows: it prints its reason and aborts the whole job (comm_abort),
 * which mpirun reports with the rank's number. A rank that dies (kill -9) is
 * noticed by mpirun, which stops the others.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "comm.h"
#include "expar.h"
#include "moe.h"
#include "pipe.h"
#include "session.h"
#include "snapshot.h"
#include "util.h"
#include "wstore.h"

#define MAX_MODELS 16

typedef struct {
    int id;
    df_model *m;
    df_session *s;       /* expert parallel: the session its steps run in */
    pp_mirrors *mirrors; /* pipeline: rank 0's sessions, as this rank's layers keep them */
    uint64_t pass;
} shared_model;

static void finish_at_exit(void) { df_cluster_finish(); }

int df_cluster_init(char *err, size_t errlen) {
    static int registered;
    if (comm_init(err, errlen) != 0) return DF_E_UNSUPPORTED;
    if (comm_size() > 1 && comm_rank() == 0 && !registered) {
        registered = 1;
        atexit(finish_at_exit); /* the other ranks leave when rank 0 does, however it exits */
    }
    return DF_OK;
}

int df_cluster_rank(void) { return comm_rank(); }
int df_cluster_size(void) { return comm_size(); }

void df_cluster_finish(void) {
    static int done;
    if (done || comm_size() < 2) return;
    done = 1;
    if (comm_rank() == 0) {
        const ep_head h = {.op = EP_STOP};
        ep_send(NULL, &h, NULL, NULL, 0);
    }
    comm_finish();
}

/* This rank's counters for model m. */
static df_rank_stats own_stats(const df_model *m) {
    df_rank_stats r = {.rank = comm_rank()};
    ws_stats st;
    ws_get_stats(m->ws, &st);
    r.bytes_read = st.bytes_read;
    r.hits = st.hits;
    r.misses = st.misses;
    r.wait_seconds = st.wait_seconds;
    r.expert_slots = ws_get_plan(m->ws)->n_expert_slots;
    r.layer_lo = m->stage_hi ? m->stage_lo : 0;
    r.layer_hi = m->stage_hi ? m->stage_hi : m->hp.n_layer;
    if (m->pp) {
        r.net_sent = m->pp->sent;
        r.net_received = m->pp->received;
        r.messages = m->pp->messages;
        for (int l = m->pp->lo[m->pp->rank]; l < m->pp->hi[m->pp->rank]; l++)
            r.experts_owned += m->layers[l].ffn_gate_exps ? (uint64_t)m->hp.n_expert : 0;
    } else if (m->ep) {
        r.net_sent = m->ep->sent;
        r.net_received = m->ep->received;
        r.messages = m->ep->messages;
        for (size_t i = 0; i < (size_t)m->ep->n_layer * (size_t)m->ep->n_expert; i++) r.experts_owned += m->ep->own[i];
    } else {
        for (int l = 0; l < m->hp.n_layer + m->hp.n_layer_mtp; l++) r.experts_owned += m->layers[l].ffn_gate_exps ? (uint64_t)m->hp.n_expert : 0;
    }
    return r;
}

/* EP_STATS: every rank's counters, to every rank (rank 0 keeps them). */
static int gather_stats(const df_model *m, df_rank_stats *all, char *err, size_t errlen) {
    const df_rank_stats mine = own_stats(m);
    return comm_allgather(&mine, sizeof mine, all, err, errlen);
}

int df_cluster_stats(df_model *m, df_rank_stats *out, int cap, int *n, char *err, size_t errlen) {
    *n = 1;
    if (!m->ep && !m->pp) {
        if (cap > 0) out[0] = own_stats(m);
        return DF_OK;
    }
    const int R = m->ep ? m->ep->size : m->pp->size;
    df_rank_stats *all = calloc((size_t)R, sizeof *all);
    if (!all) return df_seterr(err, errlen, "out of memory"), DF_E_NOMEM;
    pthread_mutex_lock(&m->decode_mu); /* between two steps, never inside one */
    const ep_head h = {.op = EP_STATS, .model = m->ep ? m->ep->id : m->pp->id};
    int rc = ep_send(m->ep, &h, NULL, err, errlen) == 0 && gather_stats(m, all, err, errlen) == 0 ? DF_OK : DF_E_IO;
    pthread_mutex_unlock(&m->decode_mu);
    for (int r = 0; r < R && r < cap && rc == DF_OK; r++) out[r] = all[r];
    *n = R;
    free(all);
    return rc;
}

/* The rank cannot go on without leaving others stuck in a step: stop them all. */
static void die(const char *what, const char *why) {
    fprintf(stderr, "deltafin: rank %d of %d: %s: %s\n", comm_rank(), comm_size(), what, why);
    fflush(stderr);
    comm_abort(1);
}

static shared_model *find(shared_model *ms, int id) {
    for (int i = 0; i < MAX_MODELS; i++)
        if (ms[i].m && ms[i].id == id) return &ms[i];
    return NULL;
}

static void drop(shared_model *sm) {
    df_session_free(sm->s);
    pp_mirrors_free(sm->mirrors);
    df_model_free(sm->m);
    memset(sm, 0, sizeof *sm);
}

/* EP_RUN: this rank's experts on the layer's rows, in passes of the session's batch, and the rows back to rank 0. */
static int run_step(shared_model *sm, const ep_head *h, char *err, size_t errlen) {
    df_model *m = sm->m;
    df_session *s = sm->s;
    ep_state *ep = m->ep;
    const int K = ep->n_used, n = h->n, W = h->width, L = h->layer;
    const size_t nid = (size_t)n * (size_t)K * 4, ngs = (size_t)h->n_guess * (size_t)K * 4;
    if (n < 1 || W < 1 || L < 0 || L >= ep->n_layer || !m->layers[L].ffn_gate_exps ||
        W != m->layers[L].ffn_gate_exps->ne[0] || h->n_guess < 0 || h->n_guess > EP_MAX_GUESS_ROWS ||
        h->bytes != nid + ngs + (size_t)n * (size_t)W * sizeof(float))
        return df_seterr(err, errlen, "internal: a damaged step message");
    if (ep_recv_payload(ep, h, err, errlen) != 0) return -1;
    if (h->pass != sm->pass) ws_tick(m->ws), sm->pass = h->pass; /* rank 0's new forward pass */
    const int32_t *ids = (const int32_t *)ep->buf, *guess = (const int32_t *)(ep->buf + nid);
    const float *x = (const float *)(ep->buf + nid + ngs);
    for (int i = 0; i < n * K; i++)
        if (ids[i] < 0 || ids[i] >= m->hp.n_expert) return df_seterr(err, errlen, "internal: expert %d in a step", ids[i]);
    df_session_bind_scratch(s);
    const int B = s->n_batch;
    for (int t0 = 0; t0 < n; t0 += B) {
        const int c = n - t0 < B ? n - t0 : B;
        memcpy(s->topk_id, ids + (size_t)t0 * K, sizeof(int32_t) * (size_t)c * K);
        if (df_moe_run_owned(s, L, x + (size_t)t0 * W, c, t0 == 0 ? guess : NULL, t0 == 0 ? h->n_guess : 0, err,
                             errlen) != 0 ||
            ep_pack(ep, L, c, s->topk_id, s->ex_out, W, err, errlen) != 0)
            return -1;
    }
    return ep_reply(ep, err, errlen);
}

int df_cluster_worker(const char *model, uint64_t mem_budget, int n_threads, char *err, size_t errlen) {
    if (comm_size() < 2 || comm_rank() == 0) return df_seterr(err, errlen, "not a worker rank of a cluster"), DF_E_INPUT;
    shared_model ms[MAX_MODELS];
    memset(ms, 0, sizeof ms);
    char why[600];
    for (;;) {
        ep_head h;
        if (ep_recv_head(NULL, &h, why, sizeof why) != 0) die("waiting for rank 0", why);
        if (h.op == EP_STOP) break;
        if (h.op == EP_LOAD) {
            uint8_t *payload = h.bytes <= (64u << 20) ? malloc(h.bytes ? h.bytes : 1) : NULL;
            if (!payload) die("loading", "out of memory for the load message");
            if (comm_bcast(payload, h.bytes, 0, why, sizeof why) != 0) die("loading", why);
            int slot = 0;
            while (slot < MAX_MODELS && ms[slot].m) slot++;
            df_model *m = NULL;
            df_session *s = NULL;
            /* a failure was agreed with rank 0, which reports it: wait for the next message */
            if (slot < MAX_MODELS &&
                df_load_share(&h, payload, model, mem_budget, n_threads, &m, &s, why, sizeof why) == 0)
                ms[slot] = (shared_model){.id = h.model, .m = m, .s = s};
            else if (slot == MAX_MODELS)
                die("loading", "too many models at once");
            free(payload);
        } else if (h.op == EP_PP_LOAD) {
            uint8_t *payload = h.bytes <= (64u << 20) ? malloc(h.bytes ? h.bytes : 1) : NULL;
            if (!payload) die("loading", "out of memory for the load message");
            if (comm_bcast(payload, h.bytes, 0, why, sizeof why) != 0) die("loading", why);
            int slot = 0;
            while (slot < MAX_MODELS && ms[slot].m) slot++;
            if (slot == MAX_MODELS) die("loading", "too many models at once");
            df_model *m = NULL;
            pp_mirrors *t = pp_mirrors_new();
            if (!t) die("loading", "out of memory");
            /* a failure was agreed with rank 0, which reports it: wait for the next message */
            if (df_load_stage(&h, payload, model, mem_budget, n_threads, &m, why, sizeof why) == 0)
                ms[slot] = (shared_model){.id = h.model, .m = m, .mirrors = t};
            else
                pp_mirrors_free(t);
            free(payload);
        } else if (h.op == EP_PP_RUN || h.op == EP_PP_SESSION || h.op == EP_PP_STATE || h.op == EP_PP_CHUNKS) {
            shared_model *sm = find(ms, h.model);
            if (!sm || !sm->mirrors) die("a step", "of a model this rank does not hold");
            if (h.op == EP_PP_SESSION) df_pipe_session(sm->mirrors, &h);
            else if (h.op == EP_PP_STATE && df_snapshot_serve(sm->m, sm->mirrors, &h, why, sizeof why) != 0)
                die("a session's memory", why);
            else if (h.op == EP_PP_RUN && df_pipe_pass(sm->m, sm->mirrors, &h, why, sizeof why) != 0) die("a step", why);
            else if (h.op == EP_PP_CHUNKS && df_pipe_chunks(sm->m, sm->mirrors, &h, why, sizeof why) != 0)
                die("a step", why);
        } else if (h.op == EP_UNLOAD) {
            shared_model *sm = find(ms, h.model);
            if (sm) drop(sm);
        } else if (h.op == EP_BUDGETS) { /* before a load: rank 0 shares the experts by the ranks' budgets */
            uint64_t *all = calloc((size_t)comm_size(), sizeof *all);
            if (!all) die("loading", "out of memory");
            if (comm_allgather(&mem_budget, sizeof mem_budget, all, why, sizeof why) != 0) die("loading", why);
            free(all);
        } else if (h.op == EP_STATS) {
            shared_model *sm = find(ms, h.model);
            df_rank_stats *all = calloc((size_t)comm_size(), sizeof *all);
            if (!sm || !all) die("counting", !sm ? "a model this rank does not hold" : "out of memory");
            if (gather_stats(sm->m, all, why, sizeof why) != 0) die("counting", why);
            free(all);
        } else if (h.op == EP_RUN) {
            shared_model *sm = find(ms, h.model);
            if (!sm) die("a step", "of a model this rank does not hold");
            if (run_step(sm, &h, why, sizeof why) != 0) die("a step", why);
        } else {
            die("waiting for rank 0", "an unknown message");
        }
    }
    for (int i = 0; i < MAX_MODELS; i++)
        if (ms[i].m) drop(&ms[i]);
    comm_finish();
    return DF_OK;
}
