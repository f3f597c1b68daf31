/*
 * expar.c - expert parallel: who owns which expert, and the messages of one
 * MoE layer (design in expar.h and docs/cluster.md).
 */
#include "expar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "util.h"

ep_state *ep_new(int rank, int size, int id, int n_layer, int n_expert, int n_used) {
    ep_state *ep = calloc(1, sizeof *ep);
    if (!ep) return NULL;
    ep->rank = rank;
    ep->size = size;
    ep->id = id;
    ep->n_layer = n_layer;
    ep->n_expert = n_expert;
    ep->n_used = n_used;
    const size_t cells = (size_t)n_layer * (size_t)n_expert;
    ep->owner = calloc(cells ? cells : 1, sizeof *ep->owner);
    ep->own = calloc(cells ? cells : 1, 1);
    ep->counts = calloc((size_t)size, sizeof *ep->counts);
    ep->guess = malloc(sizeof(int32_t) * EP_MAX_GUESS_ROWS * (size_t)(n_used > 0 ? n_used : 1));
    if (!ep->owner || !ep->own || !ep->counts || !ep->guess) {
        ep_free(ep);
        return NULL;
    }
    return ep;
}

void ep_free(ep_state *ep) {
    if (!ep) return;
    free(ep->owner);
    free(ep->own);
    free(ep->buf);
    free(ep->counts);
    free(ep->guess);
    free(ep->pack);
    free(ep);
}

static const double *sort_uses; /* qsort's context: one sort at a time (load time, one thread) */

static int by_use(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    if (sort_uses[x] != sort_uses[y]) return sort_uses[x] > sort_uses[y] ? -1 : 1;
    return x - y;
}

/* The rank of the least load for its room that still has room (ties: the
 * lowest). With equal rooms and no uses this deals round robin. */
static int least_loaded(const ep_state *ep, const int *room, const double *load, const int *count) {
    int best = -1;
    for (int r = 0; r < ep->size; r++)
        if (count[r] < room[r] && (best < 0 || load[r] * room[best] < load[best] * room[r])) best = r;
    return best;
}

/* Layer l by learned use (hottest first), or by number where uses says
 * nothing: each expert to the rank with the least load for its room
 * (least_loaded). */
static void assign_layer(ep_state *ep, int l, const double *uses, const int *room, int *order, double *load,
                         int *count) {
    const int X = ep->n_expert, R = ep->size;
    for (int e = 0; e < X; e++) order[e] = l * X + e;
    if (uses) {
        sort_uses = uses;
        qsort(order, (size_t)X, sizeof *order, by_use);
    }
    for (int r = 0; r < R; r++) load[r] = 0, count[r] = 0;
    for (int i = 0; i < X; i++) {
        const int best = least_loaded(ep, room, load, count);
        ep->owner[order[i]] = (int16_t)best;
        load[best] += uses ? uses[order[i]] : 1.0;
        count[best]++;
    }
}

void ep_rooms_equal(int n_expert, int ranks, int *room) {
    for (int r = 0; r < ranks; r++) room[r] = n_expert / ranks + (r < n_expert % ranks);
}

void ep_assign(ep_state *ep, const uint8_t *has, const double *uses, const int *rooms) {
    const int X = ep->n_expert, R = ep->size;
    int *order = malloc(sizeof(int) * (size_t)(X > 0 ? X : 1)), *count = malloc(sizeof(int) * (size_t)R);
    int *room = malloc(sizeof(int) * (size_t)R);
    double *load = malloc(sizeof(double) * (size_t)R);
    if (room) {
        if (rooms) memcpy(room, rooms, sizeof(int) * (size_t)R);
        else ep_rooms_equal(X, R, room);
    }
    for (int l = 0; l < ep->n_layer; l++) {
        double sum = 0;
        for (int e = 0; uses && e < X; e++) sum += uses[l * X + e];
        if (order && count && load && room) {
            assign_layer(ep, l, has[l] && sum > 0 ? uses : NULL, room, order, load, count);
        } else {
            for (int e = 0; e < X; e++) ep->owner[l * X + e] = (int16_t)(e % R);
        }
        for (int e = 0; e < X; e++) ep->own[l * X + e] = has[l] && ep->owner[l * X + e] == ep->rank;
    }
    free(order);
    free(count);
    free(room);
    free(load);
}

void ep_take(ep_state *ep, const uint8_t *has, const int16_t *owner) {
    const int X = ep->n_expert;
    for (int l = 0; l < ep->n_layer; l++)
        for (int e = 0; e < X; e++) {
            const int16_t o = owner[l * X + e];
            ep->owner[l * X + e] = o >= 0 && o < ep->size ? o : 0;
            ep->own[l * X + e] = has[l] && ep->owner[l * X + e] == ep->rank;
        }
}

static int grow(ep_state *ep, size_t n, char *err, size_t errlen) {
    if (n <= ep->cap) return 0;
    uint8_t *b = realloc(ep->buf, n);
    if (!b) return df_seterr(err, errlen, "out of memory for a cluster message of %zu bytes", n);
    ep->buf = b;
    ep->cap = n;
    return 0;
}

int ep_send(ep_state *ep, const ep_head *h, const void *payload, char *err, size_t errlen) {
    ep_head copy = *h;
    if (comm_bcast(&copy, sizeof copy, 0, err, errlen) != 0) return -1;
    if (ep) ep->messages += 1 + !!h->bytes, ep->sent += h->bytes * (uint64_t)(ep->size - 1);
    return h->bytes ? comm_bcast((void *)payload, (size_t)h->bytes, 0, err, errlen) : 0;
}

typedef struct {
    int32_t rc;
    char msg[500];
} agree_msg;

int ep_agree(int rc, const char *msg, char *err, size_t errlen) {
    const int size = comm_size(), me = comm_rank();
    agree_msg mine = {rc != 0, ""}, *all = calloc((size_t)size, sizeof *all);
    if (!all) return df_seterr(err, errlen, "out of memory");
    snprintf(mine.msg, sizeof mine.msg, "%s", rc && msg ? msg : "");
    if (comm_allgather(&mine, sizeof mine, all, err, errlen) != 0) {
        free(all);
        return -1;
    }
    int bad = -1;
    for (int r = 0; r < size && bad < 0; r++)
        if (all[r].rc) bad = r;
    if (bad >= 0 && !(rc && bad == me)) df_seterr(err, errlen, "rank %d of %d: %s", bad, size, all[bad].msg);
    else if (bad >= 0 && size > 1) {
        char own[500];
        snprintf(own, sizeof own, "%s", all[me].msg);
        df_seterr(err, errlen, "rank %d of %d: %s", me, size, own);
    }
    free(all);
    return bad >= 0 ? -1 : 0;
}

int ep_recv_head(ep_state *ep, ep_head *h, char *err, size_t errlen) {
    if (comm_bcast(h, sizeof *h, 0, err, errlen) != 0) return -1;
    if (ep) ep->messages++;
    return 0;
}

int ep_recv_payload(ep_state *ep, const ep_head *h, char *err, size_t errlen) {
    if (!h->bytes) return 0;
    if (h->bytes > SIZE_MAX / 2 || grow(ep, (size_t)h->bytes, err, errlen) != 0) return -1;
    ep->messages++;
    ep->received += h->bytes;
    return comm_bcast(ep->buf, (size_t)h->bytes, 0, err, errlen);
}

int ep_run_send(df_model *m, int l, int n, const int32_t *ids, const int32_t *guess, int ng, const float *x, int W,
                char *err, size_t errlen) {
    ep_state *ep = m->ep;
    const size_t K = (size_t)ep->n_used, nid = (size_t)n * K * 4, ngs = (size_t)ng * K * 4;
    const size_t nx = (size_t)n * (size_t)W * sizeof(float);
    if (grow(ep, nid + ngs + nx, err, errlen) != 0) return -1;
    memcpy(ep->buf, ids, nid);
    if (ngs) memcpy(ep->buf + nid, guess, ngs);
    memcpy(ep->buf + nid + ngs, x, nx);
    const ep_head h = {EP_RUN, ep->id, l, n, ng, W, m->n_passes, nid + ngs + nx};
    return ep_send(ep, &h, ep->buf, err, errlen);
}

/* Bytes of output rows each rank sends for rows ids of layer l. */
static void count_rows(ep_state *ep, int l, int n, const int32_t *ids, int W) {
    const int K = ep->n_used;
    for (int r = 0; r < ep->size; r++) ep->counts[r] = 0;
    for (int i = 0; i < n * K; i++) ep->counts[ep->owner[l * ep->n_expert + ids[i]]] += (size_t)W * sizeof(float);
    ep->counts[0] = 0; /* rank 0's rows are in place */
}

int ep_run_gather(df_model *m, int l, int n, const int32_t *ids, float *ex_out, int W, char *err, size_t errlen) {
    ep_state *ep = m->ep;
    const int K = ep->n_used;
    count_rows(ep, l, n, ids, W);
    size_t total = 0;
    for (int r = 0; r < ep->size; r++) total += ep->counts[r];
    if (grow(ep, total ? total : 1, err, errlen) != 0) return -1;
    if (comm_gatherv(NULL, 0, ep->buf, ep->counts, 0, err, errlen) != 0) return -1;
    ep->messages++;
    ep->received += total;
    /* rank r's rows arrive in (t, j) order: walk the rows once per rank */
    const uint8_t *at = ep->buf;
    for (int r = 1; r < ep->size; r++)
        for (int i = 0; i < n * K; i++)
            if (ep->owner[l * ep->n_expert + ids[i]] == r) {
                memcpy(ex_out + (int64_t)i * W, at, (size_t)W * sizeof(float));
                at += (size_t)W * sizeof(float);
            }
    return 0;
}

int ep_pack(ep_state *ep, int l, int n, const int32_t *ids, const float *ex_out, int W, char *err, size_t errlen) {
    const int K = ep->n_used;
    const int16_t *owner = ep->owner + (size_t)l * (size_t)ep->n_expert;
    for (int i = 0; i < n * K; i++) {
        if (owner[ids[i]] != ep->rank) continue;
        if (ep->pack_n + (size_t)W > ep->pack_cap) { /* grows to a step's rows once, then stays */
            const size_t cap = 2 * ep->pack_cap > ep->pack_n + (size_t)W ? 2 * ep->pack_cap : ep->pack_n + (size_t)W;
            float *p = realloc(ep->pack, cap * sizeof(float));
            if (!p) return df_seterr(err, errlen, "out of memory for %zu floats of expert rows", cap);
            ep->pack = p;
            ep->pack_cap = cap;
        }
        memcpy(ep->pack + ep->pack_n, ex_out + (int64_t)i * W, (size_t)W * sizeof(float));
        ep->pack_n += (size_t)W;
    }
    return 0;
}

int ep_reply(ep_state *ep, char *err, size_t errlen) {
    const size_t bytes = ep->pack_n * sizeof(float);
    ep->pack_n = 0;
    ep->messages++;
    ep->sent += bytes;
    return comm_gatherv(ep->pack, bytes, NULL, NULL, 0, err, errlen);
}
