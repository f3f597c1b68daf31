/*
 * expar.h - expert parallel: the routed experts of a model shared out
 * between the ranks of a cluster, and the exchange of one MoE layer's work.
 *
 * DESIGN (docs/cluster.md has the whole picture)
 * Rank 0 runs the model as a single process would: every layer, the router,
 * the sampler, the sessions and their caches. The other ranks hold only
 * their share of every layer's routed experts (ownership: ep_assign) and run
 * nothing else. At each MoE layer rank 0 broadcasts the layer's rows (the
 * experts' input x), every row's chosen experts and its guesses for the next
 * layer (so that every rank prefetches its own); every rank runs its own
 * experts on their rows; rank 0 gathers the output rows and adds them up in
 * slot order, exactly as one process does: the logits are bit-identical to a
 * single process on the same kernels, whatever the number of ranks.
 *
 * Messages are collectives of comm.h: a fixed head (ep_head) and, when the
 * head says so, a payload. Rank 0 sends; the others wait in
 * df_cluster_worker (src/api/cluster.c), which loads and frees models when
 * rank 0 does and answers EP_RUN with ep_reply.
 */
#ifndef DF_EXPAR_H
#define DF_EXPAR_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

enum ep_op { EP_STOP = 1, EP_LOAD, EP_LOADED, EP_UNLOAD, EP_RUN, EP_STATS, EP_BUDGETS, EP_PP_LOAD, EP_PP_RUN,
             EP_PP_SESSION, EP_PP_STATE, EP_PP_CHUNKS };

typedef struct ep_head {
    int32_t op;      /* enum ep_op */
    int32_t model;   /* rank 0's id for the model */
    int32_t layer, n, n_guess, width; /* EP_RUN: layer, rows, guessed rows (for layer + 1), row width */
    uint64_t pass;   /* EP_RUN: rank 0's forward passes so far (a new one ticks the store's clock) */
    uint64_t bytes;  /* the payload that follows, 0 if none */
} ep_head;

typedef struct ep_state {
    int rank, size, id;
    int n_layer, n_expert, n_used;
    int16_t *owner;           /* (n_layer * n_expert): the rank that computes each routed expert */
    uint8_t *own;             /* (n_layer * n_expert): owner == rank (ws_config.own) */
    uint8_t *buf;             /* message scratch */
    size_t cap;
    size_t *counts;           /* (size) bytes per rank of a gather */
    int32_t *guess;           /* (EP_MAX_GUESS_ROWS * n_used): a step's guesses for the next layer */
    float *pack;              /* another rank: its output rows of a step, in (t, j) order, until ep_reply */
    size_t pack_n, pack_cap;  /* floats */
    uint64_t sent, received, messages; /* this rank's traffic, payload bytes and collectives */
} ep_state;

#define EP_MAX_GUESS_ROWS 64

/* A cluster's state for a model of n_layer layers (owner table empty). */
ep_state *ep_new(int rank, int size, int id, int n_layer, int n_expert, int n_used);
void ep_free(ep_state *ep);
/* Share out the routed experts of the layers that have them (has[l]):
 * rank r gets rooms[r] of every layer's (NULL: ep_rooms_equal), balanced by
 * use for the room where uses (n_layer * n_expert, learned counts) says
 * something, else dealt in turn; the same result on every rank for the same
 * input, and stable across runs (docs/cluster.md). */
void ep_assign(ep_state *ep, const uint8_t *has, const double *uses, const int *rooms);
/* n_expert / ranks experts each, the first n_expert % ranks one more. */
void ep_rooms_equal(int n_expert, int ranks, int *room);

/* Take the owner table rank 0 decided (owner: n_layer x n_expert). */
void ep_take(ep_state *ep, const uint8_t *has, const int16_t *owner);

/* Every rank's outcome of a step of loading (rc 0 or not, msg why): 0 when
 * all succeeded, else -1 with err naming the first rank that failed and its
 * reason. Collective. */
int ep_agree(int rc, const char *msg, char *err, size_t errlen);

/* The head and payload (comm_bcast from rank 0; ep may be NULL: no counts). */
int ep_send(ep_state *ep, const ep_head *h, const void *payload, char *err, size_t errlen);
int ep_recv_head(ep_state *ep, ep_head *h, char *err, size_t errlen);
int ep_recv_payload(ep_state *ep, const ep_head *h, char *err, size_t errlen); /* into ep->buf */

/* Rank 0, at layer l: send the work (rows x of width W, ids n x n_used,
 * guesses ng x n_used), and after its own experts, gather the others' output
 * rows into ex_out's slot rows ((t * n_used + j) * W). */
int ep_run_send(df_model *m, int l, int n, const int32_t *ids, const int32_t *guess, int ng, const float *x, int W,
                char *err, size_t errlen);
int ep_run_gather(df_model *m, int l, int n, const int32_t *ids, float *ex_out, int W, char *err, size_t errlen);
/* Another rank: add the output rows of its own experts for n rows of a
 * received EP_RUN (choices ids, outputs in ex_out's slot rows) to the reply,
 * a pass of its batch at a time, in order; then send rank 0 the reply. */
int ep_pack(ep_state *ep, int l, int n, const int32_t *ids, const float *ex_out, int W, char *err, size_t errlen);
int ep_reply(ep_state *ep, char *err, size_t errlen);

#endif
