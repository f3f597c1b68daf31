/*
 * plan.c - the one planner: what a memory budget buys without loading or
 * running the model (df_model_plan, df_plan), each rank's share in a
 * cluster (df_model_plan_rank, df_share_rooms), the disk probe, and the
 * tokens/s model (df_plan_predict*). docs/memory.md is the rule's prose.
 *
 * A plan reads the header and checks every tensor as a load does
 * (header.c), asks the weight store for its placement (ws_make_plan: what
 * stays resident, the streamed layers, the expert slots), and the session
 * for its bytes and its per-layer memory (session.c). The tokens/s model is
 * pure arithmetic over a df_plan and two measured (or given) speeds: a
 * token reads what its experts miss in the cache and the streamed dense
 * layers from disk, and everything it uses from memory; the reads overlap all
 * of the compute but that of the weights kept in memory, and that as far as the
 * lookahead reads ahead (predict_pass). df_plan_predict_spec does the same for speculative
 * decoding (a pass of k + 1 tokens, some of them kept), df_plan_predict_ranks
 * for a cluster sharing experts (the ranks in series: disk, compute,
 * messages), df_plan_predict_stages for a pipeline (the stages in turn).
 */
#include "plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "describe.h"
#include "expar.h"
#include "header.h"
#include "pipe.h"
#include "quant.h"
#include "session.h"
#include "util.h"

/* A plan for rank `rank` of `ranks` sharing m's experts (ranks 1: none),
 * each rank r getting rooms[r] of every layer's: m->ep as load_primary or
 * df_load_share would set it, and a rank other than 0 plans the session its
 * steps run in (no context). */
static int plan_as_rank(df_model *m, df_model_params *q, int ranks, int rank, const int *rooms, char *err,
                        size_t errlen) {
    if (ranks <= 1) return 0;
    const int L = m->hp.n_layer + m->hp.n_layer_mtp, X = m->hp.n_expert;
    if (X == 0) return df_seterr(err, errlen, "%s has no routed experts: the ranks of a cluster have none to share",
                                 m->path);
    if (ranks > X)
        return df_seterr(err, errlen, "%s: %d ranks, but the model has %d experts per layer: at most %d ranks can "
                         "share them", m->path, ranks, X, X);
    if (rank < 0 || rank >= ranks) return df_seterr(err, errlen, "rank %d of %d", rank, ranks);
    m->ep = ep_new(rank, ranks, 0, L, X, m->hp.n_expert_used);
    uint8_t *has = calloc((size_t)(L > 0 ? L : 1), 1);
    if (!m->ep || !has) {
        free(has);
        return df_seterr(err, errlen, "out of memory");
    }
    double *uses = calloc((size_t)L * (size_t)X + 1, sizeof(double));
    if (uses) df_share_uses(m, q, L, uses);
    df_expert_layers(m, L, has);
    ep_assign(m->ep, has, uses, rooms); /* the deal load_primary makes */
    free(has);
    free(uses);
    if (rank > 0) q->n_ctx = q->n_batch = q->n_batch > 0 ? q->n_batch : 512;
    return 0;
}

/* A plan for rank `rank` of a pipeline of `ranks` (--split layers): m->pp and
 * its stage as the loads set them, so that the store plans the stage's
 * tensors and the session its layers' memory. */
static int plan_as_stage(df_model *m, const df_model_params *q, int ranks, int rank, char *err, size_t errlen) {
    if (q->mtp) return df_seterr(err, errlen, "%s: --split layers does not run the MTP block yet", m->path);
    if (rank < 0 || rank >= ranks) return df_seterr(err, errlen, "rank %d of %d", rank, ranks);
    if (!(m->pp = pp_new(rank, ranks, 0))) return df_seterr(err, errlen, "out of memory");
    char why[256];
    if (pp_split(m->pp, m->g, m->hp.n_layer, why, sizeof why) != 0) return df_seterr(err, errlen, "%s: %s", m->path, why);
    pp_stage(m);
    return 0;
}

/* The lookahead's recall when no hot file has recorded one (df_plan.lookahead_recall): what it measured on the
 * scaled models of bench/stream.sh (bench/RESULTS.md, 2026-12-06). */
#define PLAN_RECALL 0.40

static int by_count_desc(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Experts among v[0..n) (sorted descending) with a count above x. */
static size_t count_above(const double *v, size_t n, double x) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (v[mid] > x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The hit rate of a static cache of the `slots` most used experts, judged
 * on uses it was not chosen from: v[0..n) (sorted descending) counts uses in
 * units of one use. A hot file is a sample of the routing; the top of a
 * sample fits that sample better than the next text (a 64-token file that
 * saw 120 of a rank's 384 experts fills 99 slots with 99% of its own uses,
 * and the next text hits 93%). So each use is judged as if it had not been
 * counted (leave one out): would its expert, with one use fewer, still be
 * among the top `slots`? Ties at the edge share the remaining slots. With
 * many uses per expert this is the in-sample figure; with few it is low,
 * and plan_hot keeps it at least at what slots chosen blindly hit. */
static double held_out_hit_rate(const double *v, size_t n, size_t slots) {
    double all = 0, hit = 0;
    for (size_t i = 0; i < n; i++) all += v[i];
    for (size_t i = 0; i < n && all > 0;) {
        size_t j = i; /* v[i..j): experts with the same count c */
        while (j < n && v[j] == v[i]) j++;
        const double c = v[i], less = c - 1;
        const size_t above = count_above(v, n, less) - 1; /* others above c - 1 (this one is not) */
        const size_t same = count_above(v, n, less - 0.5) - above - 1; /* others at c - 1 */
        double in = 0;
        if (above + same < slots) in = 1;
        else if (above < slots) in = (double)(slots - above) / (double)(same + 1);
        hit += (double)(j - i) * c * in;
        i = j;
    }
    return all > 0 ? hit / all : 0;
}

/* What the learned hot file says of plan out (df_plan.hot_*): the share of
 * all uses on the planned experts (this rank's, or all), and the hit rate of
 * the best static cache of out->n_expert_slots of them on routing it did not
 * learn from (held_out_hit_rate), which the store's policy comes within a
 * few points of (wstore.c). */
static void plan_hot(df_model *m, const df_model_params *q, df_plan *out) {
    const int L = out->n_layer, X = m->hp.n_expert;
    if (X == 0 || L == 0) return;
    const size_t cells = (size_t)L * (size_t)X;
    double *uses = calloc(cells, sizeof(double)), *mine = calloc(cells, sizeof(double));
    uint8_t *has = calloc((size_t)L, 1);
    if (uses && mine && has) {
        df_share_uses(m, q, L, uses);
        df_expert_layers(m, L, has);
        double all = 0, own = 0, unit = 0;
        size_t n = 0;
        for (size_t i = 0; i < cells; i++) {
            if (!has[i / (size_t)X]) continue;
            all += uses[i];
            if (uses[i] > 0 && (unit == 0 || uses[i] < unit)) unit = uses[i]; /* one use (the file halves and fades) */
            if (m->ep && !m->ep->own[i]) continue;
            const int l = (int)(i / (size_t)X);
            if (m->stage_hi && (l < m->stage_lo || l >= m->stage_hi)) continue; /* another stage's layer */
            own += uses[i];
            mine[n++] = uses[i];
        }
        if (all > 0 && own > 0) {
            for (size_t i = 0; i < n; i++) mine[i] = mine[i] > 0 ? fmax(1.0, round(mine[i] / unit)) : 0;
            qsort(mine, n, sizeof *mine, by_count_desc);
            out->hot_known = 1;
            out->hot_share = own / all;
            /* never below what a cache of slots chosen blindly would hit: a sample that tells nothing (every
             * expert seen once) gives that, not 0 */
            const double blind = n ? fmin(1.0, (double)out->n_expert_slots / (double)n) : 0;
            out->hot_hit_rate = fmax(blind, held_out_hit_rate(mine, n, (size_t)out->n_expert_slots));
        }
    }
    free(uses);
    free(mine);
    free(has);
}

int df_model_plan(const char *path, const df_model_params *p, df_plan *out, char *err, size_t errlen) {
    return df_model_plan_rank(path, p, 1, 0, out, err, errlen);
}

/* df_model_plan_rank with each rank's rooms given (NULL: share_rooms of
 * ranks with p's budget), and the slots its budget leaves room for
 * (room_slots, or NULL). */
static int plan_fill(df_model *m, df_model_params *q, const df_model_params *p, int ranks, int rank, const int *rooms,
                     df_plan *out, uint64_t *room_slots, char *err, size_t errlen);

static int plan_rank(const char *path, const df_model_params *p, int ranks, int rank, const int *rooms, df_plan *out,
                     uint64_t *room_slots, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    quant_init();
    df_model *m = calloc(1, sizeof *m);
    if (!m) return df_seterr(err, errlen, "out of memory");
    df_model_params q = *p;
    q.vocab_only = 0;
    if (!q.mem_budget) q.mem_budget = 1; /* size the session as a budget would */
    int rc = df_load_header(m, path, &q, err, errlen);
    if (rc == 0) rc = df_model_validate(m, err, errlen);
    if (rc == 0) rc = plan_fill(m, &q, p, ranks, rank, rooms, out, room_slots, err, errlen);
    df_model_free(m);
    return rc ? -1 : 0;
}

int df_plan_loading(df_model *m, const df_model_params *p, df_plan *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    df_model_params q = *p;
    return plan_fill(m, &q, p, 1, 0, NULL, out, NULL, err, errlen) ? -1 : 0;
}

/* The plan of m, whose header is read and checked (df_load_header with q, the parameters p sized as a budget
 * would), as rank `rank` of `ranks` with rooms (NULL: shared by p's budget): 0, or nonzero with err. */
static int plan_fill(df_model *m, df_model_params *q, const df_model_params *p, int ranks, int rank, const int *rooms,
                     df_plan *out, uint64_t *room_slots, char *err, size_t errlen) {
    const char *path = m->path;
    int rc = 0, *weighted = NULL;
    const int stages = p->split_layers && ranks > 1;
    if (rc == 0 && !stages && ranks > 1 && !rooms && m->hp.n_expert >= ranks) {
        weighted = malloc(sizeof(int) * (size_t)ranks);
        rc = !weighted ? df_seterr(err, errlen, "out of memory")
                       : df_share_rooms(path, p, ranks, NULL, m->hp.n_expert, weighted, err, errlen);
        rooms = weighted;
    }
    if (rc == 0) rc = stages ? plan_as_stage(m, q, ranks, rank, err, errlen)
                             : plan_as_rank(m, q, ranks, rank, rooms, err, errlen);
    free(weighted);
    ws_config cfg;
    if (rc == 0) rc = df_store_config(m, q, &cfg, err, errlen);
    if (rc == 0) {
        cfg.mode = WS_STREAM;
        out->session_bytes = m->session_reserve + m->scratch_reserve; /* one session, its scratch included */
        out->scratch_bytes = m->scratch_reserve;
        out->overhead_bytes = df_overhead_bytes(m);
        ws_plan wp;
        char perr[256] = "";
        /* a budget below the minimum still reports the minimum; sizes that do not add up are an error */
        if (ws_make_plan(m->g, &cfg, &wp, perr, sizeof perr) != 0 && wp.minimum == UINT64_MAX)
            rc = df_seterr(err, errlen, "%s: %s", path, perr);
        out->n_ctx_train = m->hp.n_ctx_train;
        out->budget = p->mem_budget;
        out->minimum = wp.minimum;
        out->resident_bytes = wp.resident;
        out->dense_bytes = wp.dense_total;
        out->expert_bytes = wp.expert_total;
        out->n_dense_streamed = wp.n_dense_streamed;
        out->n_layer = m->hp.n_layer + m->hp.n_layer_mtp; /* the MTP block, when loaded, runs as a layer */
        out->dense_slot_bytes = wp.dense_slot;
        out->n_expert_slots = wp.n_expert_slots;
        out->n_experts_total = wp.n_experts_total;
        out->expert_slot_bytes = wp.expert_slot;
        out->n_expert_used = m->hp.n_expert_used;
        out->layer_lo = m->stage_hi ? m->stage_lo : 0;
        out->layer_hi = m->stage_hi ? m->stage_hi : m->hp.n_layer;
        out->carry_floats = (int64_t)m->hp.n_embd * (m->arch->carry_rows ? m->arch->carry_rows(m) : 1);
        for (int l = 0; l < out->n_layer; l++) {
            if (m->stage_hi && (l < m->stage_lo || l >= m->stage_hi)) continue; /* another stage's */
            char name[64];
            snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
            const gguf_tensor *t = gguf_find_tensor(m->g, name);
            /* the lookahead guesses for a MoE layer after the first whose router is in memory (moe.c) */
            out->n_guessed_layers += t && out->n_moe_layers > 0 && !(wp.n_dense_streamed && l >= wp.first_streamed);
            out->n_moe_layers += t != NULL;
            if (t) out->expert_width = (int)t->ne[0];
        }
        if (m->ep && m->ep->rank > 0) out->dense_bytes = wp.resident; /* all it holds besides its slots */
        plan_hot(m, q, out);
        const double recall = df_hot_recall(m, q);
        out->recall_known = recall >= 0;
        out->lookahead_recall = recall >= 0 ? recall : PLAN_RECALL;
        out->ranks = ranks > 1 ? ranks : 1;
        out->rank = ranks > 1 ? rank : 0;
        const int own_layers = out->layer_hi - out->layer_lo;
        /* a streamed layer's bytes: the embeddings and the output head stay resident, so they are not in it */
        const int over = wp.n_dense_streamed ? wp.n_dense_streamed : own_layers;
        out->dense_layer_bytes = over > 0 ? wp.dense_layers / (uint64_t)over : 0;
        out->swa_window = m->hp.swa ? m->hp.n_swa : 0;
        for (int l = 0; m->hp.swa && l < m->hp.n_layer; l++) out->n_swa_layers += m->hp.swa[l];
        df_session_params sp = df_session_default_params();
        sp.n_ctx = q->n_ctx;
        sp.n_batch = q->n_batch;
        sp.kv_type = q->kv_type;
        out->swa_ring = out->n_swa_layers ? df_session_kv_ring(m, &sp) : 0;
        out->n_mem = df_session_mem_list(m, &sp, out->mem, DF_PLAN_MEM_MAX, &out->n_ctx);
        out->requant_saved_bytes = wp.requant_saved;
        out->n_experts_all = m->ep ? out->n_moe_layers * m->hp.n_expert : out->n_experts_total;
        if (room_slots) *room_slots = wp.minimum == UINT64_MAX || out->budget < wp.minimum ? 0 : wp.expert_room;
    }
    return rc;
}

int df_model_plan_rank(const char *path, const df_model_params *p, int ranks, int rank, df_plan *out, char *err,
                       size_t errlen) {
    return plan_rank(path, p, ranks, rank, NULL, out, NULL, err, errlen);
}

/* A planner: the model read and checked once (its header: what df_load_header takes of the parameters, mtp
 * and the threads), planned as often as asked. */
struct df_planner {
    df_model *m;
    int mtp;
};

int df_planner_open(const char *path, const df_model_params *p, df_planner **out, char *err, size_t errlen) {
    *out = NULL;
    quant_init();
    df_planner *pl = calloc(1, sizeof *pl);
    df_model *m = pl ? calloc(1, sizeof *m) : NULL;
    if (!m) {
        free(pl);
        return df_seterr(err, errlen, "out of memory");
    }
    df_model_params q = *p;
    q.vocab_only = 0;
    if (df_load_header(m, path, &q, err, errlen) != 0 || df_model_validate(m, err, errlen) != 0) {
        df_model_free(m);
        free(pl);
        return -1;
    }
    pl->m = m;
    pl->mtp = p->mtp != 0;
    *out = pl;
    return 0;
}

int df_planner_plan(df_planner *pl, const df_model_params *p, df_plan *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if ((p->mtp != 0) != pl->mtp || p->split_layers)
        return df_seterr(err, errlen, "a planner plans with the mtp it was opened with, for one process");
    df_model_params q = *p;
    q.vocab_only = 0;
    if (!q.mem_budget) q.mem_budget = 1; /* size the session as a budget would */
    return plan_fill(pl->m, &q, p, 1, 0, NULL, out, NULL, err, errlen) ? -1 : 0;
}

int df_planner_describe(const df_planner *pl, df_model_desc **out, char *err, size_t errlen) {
    return df_describe_gguf(pl->m->g, 0, out, err, errlen);
}

void df_planner_free(df_planner *pl) {
    if (!pl) return;
    df_model_free(pl->m);
    free(pl);
}

/* How many of every layer's X experts each of R ranks owns (rooms[R]), from
 * the cache slots each one's budget leaves room for (budgets[r], or p's
 * where NULL or 0): rank 0 holds the dense part and the sessions, so it has
 * fewer, and it may stream dense layers. Taking routing as uniform, a rank
 * reads the experts it owns beyond its slots (rank 0 also its streamed
 * layers, counted as the experts that read as much); each gets its slots
 * and an equal part of what the pooled cache cannot hold, so that the ranks
 * read alike (where the pool holds it all, shares follow the slots). Every
 * rank owns at least one expert a layer. Equal shares without a budget. */
int df_share_rooms(const char *path, const df_model_params *p, int R, const uint64_t *budgets, int X, int *rooms,
                       char *err, size_t errlen) {
    ep_rooms_equal(X, R, rooms);
    if (R <= 1 || !p->mem_budget) return 0;
    double *cap = calloc((size_t)R, sizeof *cap), total = 0, pooled = 0;
    int *equal = malloc(sizeof(int) * (size_t)R);
    if (!cap || !equal) {
        free(cap), free(equal);
        return df_seterr(err, errlen, "out of memory");
    }
    ep_rooms_equal(X, R, equal);
    int rc = 0;
    for (int r = 0; r < R && rc == 0; r++) {
        df_model_params q = *p;
        if (budgets && budgets[r]) q.mem_budget = budgets[r];
        if (r > 1 && q.mem_budget == (budgets && budgets[r - 1] ? budgets[r - 1] : p->mem_budget)) {
            cap[r] = cap[r - 1]; /* the same budget as the rank before: the same room */
        } else {
            df_plan d;
            uint64_t room = 0;
            rc = plan_rank(path, &q, R, r ? 1 : 0, equal, &d, &room, err, errlen);
            cap[r] = (double)room;
            if (r == 0 && rc == 0) {
                total = d.n_experts_all;
                /* the dense layers rank 0 streams read as many bytes as this many more uncached experts */
                const double per_expert = total > 0 ? (double)d.n_expert_used * d.n_moe_layers * d.expert_slot_bytes / total : 0;
                if (per_expert > 0) cap[0] -= (double)d.n_dense_streamed * d.dense_layer_bytes / per_expert;
            }
        }
        pooled += cap[r];
    }
    if (rc == 0 && total > 0) {
        double *want = malloc(sizeof(double) * (size_t)R);
        int sum = 0;
        for (int r = 0; want && r < R; r++) {
            const double n = pooled < total ? cap[r] + (total - pooled) / R : pooled > 0 ? total * cap[r] / pooled : total / R;
            want[r] = X * n / total;
            rooms[r] = want[r] < 1 ? 1 : (int)want[r];
            sum += rooms[r];
        }
        while (want && sum != X) { /* largest remainders first, never below one */
            int best = -1;
            for (int r = 0; r < R; r++) {
                const double gap = want[r] - rooms[r];
                if (sum < X ? best < 0 || gap > want[best] - rooms[best]
                            : rooms[r] > 1 && (best < 0 || gap < want[best] - rooms[best]))
                    best = r;
            }
            if (best < 0) break;
            rooms[best] += sum < X ? 1 : -1;
            sum += sum < X ? 1 : -1;
        }
        if (!want || sum != X) ep_rooms_equal(X, R, rooms);
        free(want);
    }
    free(cap);
    free(equal);
    return rc;
}

/* Are the last three of rates[1..n) within 10% of their mean? */
static int probe_stable(const double *r, int n) {
    if (n < 4) return 0;
    const double m = (r[n - 1] + r[n - 2] + r[n - 3]) / 3;
    for (int i = n - 3; i < n; i++)
        if (fabs(r[i] - m) > 0.1 * m) return 0;
    return 1;
}

double df_model_probe_disk(const char *path, const df_model_params *p, double seconds, char *err, size_t errlen) {
    return df_model_probe_disk_windows(path, p, seconds, NULL, 0, NULL, err, errlen);
}

double df_model_probe_disk_windows(const char *path, const df_model_params *p, double seconds, double *rates, int cap,
                                   int *n, char *err, size_t errlen) {
    if (n) *n = 0;
    quant_init();
    df_model *m = calloc(1, sizeof *m);
    if (!m) return df_seterr(err, errlen, "out of memory"), -1.0;
    double rate = -1.0;
    df_model_params q = *p;
    q.vocab_only = 0;
    ws_config cfg;
    if (df_load_header(m, path, &q, err, errlen) == 0 && df_store_config(m, p, &cfg, err, errlen) == 0) {
        cfg.mode = WS_STREAM;
        cfg.hot_path = NULL; /* measure the disk, not a warm start */
        wstore *ws = NULL;
        const double window = seconds / 5, recorded = df_hot_recall(m, &q);
        const double recall = recorded >= 0 ? recorded : PLAN_RECALL;
        double r[64], total = 0, first = 0, sum_secs = 0, sum_bytes = 0;
        int k = 0, ok = ws_open(m->g, &cfg, &ws, err, errlen) == 0;
        while (ok && k < 64 && (total < seconds - 1e-9 || (total < 2 * seconds && !probe_stable(r, k)))) {
            uint64_t bytes = 0;
            double secs = 0;
            ok = ws_probe(ws, window, recall, 0x5DEECE66Dull + (uint64_t)k, &bytes, &secs, err, errlen) == 0;
            if (!ok || bytes == 0 || secs <= 0) break; /* nothing streams (or an error) */
            r[k] = (double)bytes / secs;
            if (k == 0) first = r[0];
            else sum_secs += secs, sum_bytes += (double)bytes;
            if (rates && k < cap) rates[k] = r[k];
            total += secs;
            k++;
        }
        if (ok) rate = k > 1 ? sum_bytes / sum_secs : first;
        if (n) *n = k < cap ? k : cap;
        ws_close(ws);
    }
    df_model_free(m);
    return rate;
}

/* ---- the tokens/s model ---- */

/* Bytes of recurrent state a session keeps (DF_MEM_ITEM_RECURRENT items): every token reads and writes all of it,
 * as it reads the weights. */
static double state_bytes(const df_plan *p) {
    double b = 0;
    for (int i = 0; i < p->n_mem; i++)
        if (!strcmp(p->mem[i].name, DF_MEM_ITEM_RECURRENT)) b += (double)p->mem[i].bytes;
    return b;
}

/* One pass of `rows` positions that runs experts_layer distinct experts in each MoE layer and
 * yields tokens tokens: its reads, per token. page: bytes of the page cache
 * that hold what streams (df_plan_predict_tiers; 0: none): the streamed dense
 * layers first (every token reads them, so they are the last the kernel
 * drops), then the experts outside the budget's cache, as many as fit (taken
 * as uniformly used); what it serves is copied, its bytes read and written. */
static void predict_pass(const df_plan *p, double disk_bytes_per_s, double memory_bytes_per_s, double experts_layer,
                         double rows, double tokens, double page, df_plan_speed *out) {
    const int fits = p->budget >= p->minimum;
    const double hit = p->hot_known ? p->hot_hit_rate
                       : p->n_experts_total ? (double)p->n_expert_slots / p->n_experts_total : 1.0;
    const double experts_pass = (double)p->n_moe_layers * experts_layer * (double)p->expert_slot_bytes;
    const double dense = (double)p->n_dense_streamed * p->dense_layer_bytes;
    const double outside = (double)(p->n_experts_total - p->n_expert_slots) * (double)p->expert_slot_bytes;
    const double dense_pc = page < dense ? page : dense, room = page - dense_pc;
    const double hit2 = outside > 0 ? (1.0 - hit) * (room < outside ? room / outside : 1.0) : 0.0;
    const double disk_tok = (experts_pass * (1.0 - hit - hit2) + dense - dense_pc) / tokens;
    const double state = 2.0 * state_bytes(p) * rows; /* read and written by each position */
    const double mem_tok = ((double)(p->dense_bytes - p->requant_saved_bytes) + experts_pass + /* --resident-type */
                            2.0 * (experts_pass * hit2 + dense_pc) + state) / tokens;
    const double t_disk = disk_bytes_per_s > 0 ? disk_tok / disk_bytes_per_s : 0;
    const double t_mem = memory_bytes_per_s > 0 ? mem_tok / memory_bytes_per_s : 0;
    /* What the disk waits for (docs/memory.md "What plan predicts"): a MoE layer's reads start when its router has
     * chosen, and its experts run as they arrive, as a streamed dense layer runs while the next one is read;
     * so the compute of the weights that stay in memory (attention, routers, shared experts, the head, and the
     * recurrent layers' state) is the disk's idle time, less what the lookahead's guesses read meanwhile, and
     * the rest overlaps the reads.
     * The guesses are read only while their precision beats the share of the time the compute waits
     * (guesses_pay in wstore.c): taken as the recall on the misses against that share without them.
     * Measured by the runs' disk idle time: bench/RESULTS.md 2026-12-07 "what the disk waits for". */
    const double res = (double)p->dense_bytes - (double)p->requant_saved_bytes - dense + state;
    const double t_res = memory_bytes_per_s > 0 && res > 0 ? res / memory_bytes_per_s : 0;
    const double t_rest = t_mem - t_res, t_plain = t_res + fmax(t_disk, t_rest);
    const double ahead = p->n_moe_layers > 0 ? p->lookahead_recall * p->n_guessed_layers / p->n_moe_layers : 0;
    const double waits = t_plain > 0 ? 1.0 - t_mem / t_plain : 0;
    const double o = p->lookahead_recall * (1.0 - hit - hit2) > waits ? ahead : 0;
    const double t_tok = t_disk > 0 ? fmax(t_mem, t_res * (1.0 - o) + fmax(t_disk, t_rest)) : t_mem;
    out->hit_rate = hit;
    out->page_cache_hit_rate = hit2;
    out->disk_bytes_per_token = disk_tok;
    out->memory_bytes_per_token = mem_tok;
    out->disk_seconds = t_disk;
    out->memory_seconds = t_mem;
    out->tokens_per_s = fits && t_tok > 0 ? 1.0 / t_tok : 0.0;
    out->memory_resident_bytes_per_token = res > 0 ? res / tokens : 0;
    out->disk_idle_seconds = t_disk > 0 ? t_tok - t_disk : 0;
    out->lookahead_reads = o > 0;
}

void df_plan_predict(const df_plan *p, double disk_bytes_per_s, double memory_bytes_per_s, df_plan_speed *out) {
    predict_pass(p, disk_bytes_per_s, memory_bytes_per_s, p->n_expert_used, 1.0, 1.0, 0, out);
}

void df_plan_predict_tiers(const df_plan *p, double disk_bytes_per_s, double memory_bytes_per_s,
                           uint64_t page_cache_bytes, df_plan_speed *out) {
    predict_pass(p, disk_bytes_per_s, memory_bytes_per_s, p->n_expert_used, 1.0, 1.0, (double)page_cache_bytes, out);
}

/* Speculation: a pass verifies k guesses (k + 1 tokens: the union of their
 * experts, each token choosing n_expert_used of a layer's E uniformly, is
 * E (1 - (1 - used/E)^(k+1)) experts a layer) and yields
 * (1 - a^(k+1)) / (1 - a) tokens at acceptance a. */
void df_plan_predict_spec(const df_plan *p, double disk_bytes_per_s, double memory_bytes_per_s, double accept, int k,
                          df_plan_speed *out) {
    if (k <= 0) {
        df_plan_predict(p, disk_bytes_per_s, memory_bytes_per_s, out);
        return;
    }
    const double e = p->n_moe_layers ? (double)p->n_experts_total / p->n_moe_layers : 0;
    const double union_layer = e > 0 ? e * (1.0 - pow(1.0 - p->n_expert_used / e, k + 1)) : 0;
    double tokens = 0, pk = 1;
    for (int i = 0; i <= k; i++) tokens += pk, pk *= accept;
    predict_pass(p, disk_bytes_per_s, memory_bytes_per_s, union_layer, k + 1.0, tokens, 0, out);
}

void df_plan_predict_ranks(const df_plan *r0, const df_plan *rn, double disk_bytes_per_s, double memory_bytes_per_s,
                           double net_bytes_per_s, double net_latency_s, int one_machine, df_cluster_speed *out) {
    memset(out, 0, sizeof *out);
    const int R = r0->ranks > 1 ? r0->ranks : 1;
    /* each rank's part of a MoE layer's selections: its learned share of the uses, else its part of the experts */
    const double K = r0->n_expert_used;
    const double part0 = r0->n_experts_all > 0 ? (double)r0->n_experts_total / r0->n_experts_all : 1.0 / R;
    const double part = rn->n_experts_all > 0 ? (double)rn->n_experts_total / rn->n_experts_all : 1.0 / R;
    const double share0 = r0->hot_known ? K * r0->hot_share : K * part0, share = rn->hot_known ? K * rn->hot_share : K * part;
    predict_pass(r0, disk_bytes_per_s, memory_bytes_per_s, share0, 1.0, 1.0, 0, &out->rank0);
    predict_pass(R > 1 ? rn : r0, disk_bytes_per_s, memory_bytes_per_s, R > 1 ? share : share0, 1.0, 1.0, 0,
                 &out->other);
    /* ranks on one machine share its disk: their reads add up; on their own machines the slowest rank sets
     * the pace */
    const double b0 = out->rank0.disk_bytes_per_token, bn = out->other.disk_bytes_per_token;
    const double disk = one_machine ? b0 + (R - 1) * bn : (b0 > bn ? b0 : bn);
    out->disk_seconds = disk_bytes_per_s > 0 ? disk / disk_bytes_per_s : 0;
    /* compute: rank 0's dense part alone, then every rank's experts at once, on one machine as many at a time
     * as its cores allow (one_machine) */
    const double e0 = memory_bytes_per_s > 0
                          ? r0->n_moe_layers * share0 * (double)r0->expert_slot_bytes / memory_bytes_per_s : 0;
    const double m0 = out->rank0.memory_seconds, d0 = m0 > e0 ? m0 - e0 : 0;
    const double en = R > 1 ? out->other.memory_seconds : 0, slowest = e0 > en ? e0 : en;
    const int at_once = one_machine > 0 ? (one_machine < R ? one_machine : R) : R;
    const double shared = (e0 + (R - 1) * en) / at_once;
    out->memory_seconds = d0 + (shared > slowest ? shared : slowest);
    if (R > 1) { /* per MoE layer: rows and choices out to every rank, the others' expert rows back */
        const double row = 4.0 * r0->expert_width, out_bytes = (R - 1) * (row + 4.0 * r0->n_expert_used);
        const double back = (double)r0->n_expert_used * (R - 1) / R * row;
        out->net_bytes_per_token = r0->n_moe_layers * (out_bytes + back);
        out->net_seconds = r0->n_moe_layers * 3.0 * net_latency_s +
                           (net_bytes_per_s > 0 ? out->net_bytes_per_token / net_bytes_per_s : 0);
    }
    /* in series: a MoE layer's step waits for every rank's rows, so a miss the lookahead did not guess ahead
     * (most of them: its recall is 20-60%) stalls the whole cluster while it is read, and the computing and
     * the messages do not overlap each other (bench/RESULTS.md, bench/cluster.sh 2026-12-05: within 5% at 2 and 4 ranks) */
    const double t = out->disk_seconds + out->memory_seconds + out->net_seconds;
    const int fits = r0->budget >= r0->minimum && (R == 1 || rn->budget >= rn->minimum);
    out->tokens_per_s = fits && t > 0 ? 1.0 / t : 0.0;
}

void df_plan_predict_stages(const df_plan *stage, int R, double disk_bytes_per_s, double memory_bytes_per_s,
                            double net_bytes_per_s, double net_latency_s, df_plan_speed *each, df_cluster_speed *out) {
    memset(out, 0, sizeof *out);
    int fits = R > 0;
    double t = 0;
    for (int r = 0; r < R; r++) {
        df_plan_predict(&stage[r], disk_bytes_per_s, memory_bytes_per_s, &each[r]);
        fits &= stage[r].budget >= stage[r].minimum;
        out->disk_seconds += each[r].disk_seconds;
        out->memory_seconds += each[r].memory_seconds;
        t += each[r].disk_seconds + each[r].memory_seconds; /* in series, as a cluster's ranks (below) */
        if (r == 1 || (r > 1 && each[r].disk_bytes_per_token > out->other.disk_bytes_per_token)) out->other = each[r];
    }
    if (R > 0) out->rank0 = each[0];
    if (R > 1) { /* a token's pass (pipe.c): rank 0's head and the pass's rows (two broadcasts), then every
                  * rank's carry broadcast in turn; rank 0's link carries the head and its own carry out to every
                  * other rank, and every other rank's carry in */
        const double head = 80.0, carry = 4.0 * (double)stage[0].carry_floats;
        out->net_bytes_per_token = (R - 1) * (head + carry) + (R - 1) * carry;
        out->net_seconds = (R + 2) * net_latency_s + (net_bytes_per_s > 0 ? out->net_bytes_per_token / net_bytes_per_s : 0);
    }
    t += out->net_seconds;
    out->tokens_per_s = fits && t > 0 ? 1.0 / t : 0.0;
}
