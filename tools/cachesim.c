/*
 * cachesim.c - replay a routing trace (docs/trace.md) through expert-cache
 * policies and print each one's hit rate.
 *
 *   cachesim TRACE --slots N [--decay D] [--json]
 *   cachesim TRACE --near-ties EPS
 *
 * Why: out of core, tokens/s is disk throughput over bytes read per token, so
 * the expert cache's hit rate is speed. A trace from `deltafin run
 * --trace-experts` says exactly which experts each (token, layer) needed; this
 * program asks what other policies would have hit with the same number of
 * slots, so Deltafin's own rate can be judged against the achievable:
 *   lru      evict the least recently used expert;
 *   static   the best fixed set of N experts chosen in hindsight (the N most
 *            used in the whole trace), never changing: hits = their share;
 *            static_cold is the same set started empty (the first use of
 *            each member is a load), the fair bar for one cold run;
 *   belady   the clairvoyant optimum of a cache that must hold every expert
 *            it computes: evict the expert needed again furthest in the future
 *            (Belady's MIN);
 *   lfu      Deltafin's policy before this tool: use counts of resident
 *            experts, decayed by 0.97 per step, forgotten on eviction;
 *   freq     Deltafin's policy now (wstore.c): every expert's use count is
 *            kept whether resident or not, decayed by D per step (default
 *            wstore's WS_FREQ_DECAY); the victim is the resident expert the
 *            count says is wanted furthest ahead (wstore.h's ws_next_use,
 *            with D's rate when D is given; ties: least recently used);
 *   static_held  the best static set for a cache that, like these and
 *            Deltafin's, must hold every expert it computes: m members
 *            (the m most used, each loaded at its first use and kept) and
 *            slots - m slots for the rest, least recently used first (a
 *            member goes only when a request leaves no other slot), m
 *            chosen in hindsight. With fewer slots than a step names, the
 *            rest need room that static's members cannot give up, so this,
 *            not static, is what an online policy can be held to there;
 * A request is one layer of one forward pass (ws_tick's step: a generated
 * token, or a whole prompt batch): the distinct experts its tokens chose are
 * needed together, so none may be evicted to make room for another (as in
 * wstore.c, where they are protected), and each counts once as a hit or a
 * miss, as Deltafin counts them. Deltafin's prefetch guesses are not
 * modelled: these are the demand policies. overlap measures how alike
 * consecutive tokens route (mkmodel's --topics and --router-corr knobs).
 *
 * --near-ties lists the routing choices whose margin (docs/trace.md) is at
 * most EPS, one "position P layer L margin M" line each: the choices any
 * rounding may flip, read from a saved trace (as they are made, with the
 * sparse attentions' choices too: deltafin logits --trace-ties, which
 * tests/sweep.sh uses).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wstore.h"

typedef struct {
    int n_layer, n_expert, k;
    int64_t n_group;    /* requests: one (step, layer) each */
    int64_t *off;       /* (n_group + 1) each group's keys are key[off[g] .. off[g + 1]) */
    int32_t *key;       /* layer * n_expert + expert, distinct within a group */
    int32_t *mult;      /* how many tokens of the group used the key */
    int64_t *step;      /* (n_group) forward-pass index */
    int64_t *next;      /* per key occurrence: index of the key's next occurrence, or INT64_MAX */
    int64_t n_step;
} trace;

static void die(const char *fmt, const char *a) {
    fprintf(stderr, "cachesim: ");
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    exit(1);
}

static void *xrealloc(void *p, size_t n, size_t sz) {
    p = realloc(p, (n ? n : 1) * sz);
    if (!p) die("%s", "out of memory");
    return p;
}

static void *xcalloc(size_t n, size_t sz) {
    void *p = calloc(n ? n : 1, sz);
    if (!p) die("%s", "out of memory");
    return p;
}

static uint32_t le32(const uint8_t *b) { return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24; }

/* Read the records and group them the way Deltafin requests experts: all
 * tokens of one forward pass (a prompt batch, or one generated token) ask for
 * one layer's experts at once, and an expert named by several of them is read
 * once. A new forward pass starts when the layer does not go up, except
 * within a batch (same layer, next position). With tie_eps >= 0, prints the
 * records whose margin is at most tie_eps (version 2 traces) as it reads. */
static void load_trace(const char *path, trace *t, double tie_eps) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open %s", path);
    uint8_t h[20];
    if (fread(h, 1, 20, f) != 20) die("%s: not a routing trace (short header)", path);
    const uint32_t magic = le32(h), ver = le32(h + 4), nl = le32(h + 8), ne = le32(h + 12), k = le32(h + 16);
    if (magic != 0x52544644u || (ver != 1 && ver != 2)) die("%s: not a version-1 or 2 routing trace", path);
    if (tie_eps >= 0 && ver < 2) die("%s: a version-1 trace has no margins", path);
    if (nl < 1 || nl > 4096 || ne < 1 || ne > 65536 || k < 1 || k > ne) die("%s: implausible trace header", path);
    t->n_layer = (int)nl;
    t->n_expert = (int)ne;
    t->k = (int)k;
    const int64_t nk = (int64_t)t->n_layer * t->n_expert;
    int64_t *mark = xcalloc((size_t)nk, sizeof *mark); /* group + 1 that last added the key */
    int64_t *at = xcalloc((size_t)nk, sizeof *at);     /* its position in that group */
    int64_t gcap = 1024, kcap = 4096, nkeys = 0, step = 0;
    t->n_group = 0;
    t->off = xcalloc((size_t)gcap + 1, sizeof *t->off);
    t->step = xcalloc((size_t)gcap, sizeof *t->step);
    t->key = xcalloc((size_t)kcap, sizeof *t->key);
    t->mult = xcalloc((size_t)kcap, sizeof *t->mult);
    int prev_layer = -1;
    int32_t prev_pos = -1;
    uint8_t rec[8];
    while (fread(rec, 1, 8, f) == 8) {
        const int32_t pos = (int32_t)le32(rec);
        const int layer = (int16_t)(rec[4] | rec[5] << 8), rk = (int16_t)(rec[6] | rec[7] << 8);
        if (layer < 0 || layer >= t->n_layer || rk != t->k) die("%s: corrupt record", path);
        uint8_t mb[4];
        if (ver >= 2 && fread(mb, 1, 4, f) != 4) die("%s: truncated record", path);
        if (ver >= 2 && tie_eps >= 0) {
            const uint32_t u = le32(mb);
            float margin;
            memcpy(&margin, &u, 4);
            if (margin <= tie_eps) printf("position %d layer %d margin %.3g\n", pos, layer, (double)margin);
        }
        const int same_batch = layer == prev_layer && pos == prev_pos + 1;
        const int new_step = t->n_group > 0 && layer <= prev_layer && !same_batch;
        if (t->n_group == 0 || new_step || layer != prev_layer) { /* a new group */
            if (new_step) step++;
            if (t->n_group == gcap) {
                gcap *= 2;
                t->off = xrealloc(t->off, (size_t)gcap + 1, sizeof *t->off);
                t->step = xrealloc(t->step, (size_t)gcap, sizeof *t->step);
            }
            t->off[t->n_group] = nkeys;
            t->step[t->n_group] = step;
            t->n_group++;
        }
        for (int j = 0; j < rk; j++) {
            uint8_t e[8];
            if (fread(e, 1, 8, f) != 8) die("%s: truncated record", path);
            const int32_t id = (int32_t)le32(e);
            if (id < 0 || id >= t->n_expert) die("%s: expert id out of range", path);
            const int32_t key = layer * t->n_expert + id;
            if (mark[key] == t->n_group) {
                t->mult[at[key]]++;
                continue;
            }
            if (nkeys == kcap) {
                kcap *= 2;
                t->key = xrealloc(t->key, (size_t)kcap, sizeof *t->key);
                t->mult = xrealloc(t->mult, (size_t)kcap, sizeof *t->mult);
            }
            mark[key] = t->n_group;
            at[key] = nkeys;
            t->key[nkeys] = key;
            t->mult[nkeys] = 1;
            nkeys++;
        }
        prev_layer = layer;
        prev_pos = pos;
    }
    fclose(f);
    if (t->n_group == 0) die("%s: no routing records", path);
    t->off[t->n_group] = nkeys;
    t->n_step = step + 1;
    for (int64_t i = 0; i < nk; i++) at[i] = INT64_MAX; /* now: the next occurrence of each key */
    t->next = xcalloc((size_t)nkeys, sizeof *t->next);
    for (int64_t i = nkeys - 1; i >= 0; i--) {
        t->next[i] = at[t->key[i]];
        at[t->key[i]] = i;
    }
    free(mark);
    free(at);
}

/* ---- one simulated cache ---- */

enum { P_LRU, P_BELADY, P_LFU, P_FREQ, P_STATIC_HELD };

typedef struct {
    int policy, slots, n_used, n_layer, n_expert;
    int32_t *slot_key;     /* (slots) key or -1 */
    int32_t *where;        /* (n_keys) slot or -1 */
    int64_t *last_use;     /* (slots) group of the last use (LRU, ties) */
    int64_t *next_use;     /* (slots) Belady: occurrence index of the key's next use */
    double *score;         /* (slots) LFU: decayed resident use count */
    int64_t *score_step;   /* (slots) LFU: step of the last score update */
    double *freq;          /* (n_keys) FREQ: decayed use count of every expert */
    int64_t *freq_step;    /* (n_keys) */
    int64_t *in_group;     /* (n_keys) group + 1 that names the key (protected from eviction) */
    double decay;
    int cur_layer;         /* the layer of the request at work */
    const uint8_t *member; /* (n_keys) STATIC_HELD: 1 for the kept set */
    int64_t hits, misses;
} cache;

static void cache_init(cache *c, int policy, int slots, int64_t n_keys, double decay) {
    memset(c, 0, sizeof *c);
    c->policy = policy;
    c->slots = slots;
    c->decay = decay;
    c->slot_key = xcalloc((size_t)slots, sizeof *c->slot_key);
    c->where = xcalloc((size_t)n_keys, sizeof *c->where);
    c->last_use = xcalloc((size_t)slots, sizeof *c->last_use);
    c->next_use = xcalloc((size_t)slots, sizeof *c->next_use);
    c->score = xcalloc((size_t)slots, sizeof *c->score);
    c->score_step = xcalloc((size_t)slots, sizeof *c->score_step);
    c->freq = xcalloc((size_t)n_keys, sizeof *c->freq);
    c->freq_step = xcalloc((size_t)n_keys, sizeof *c->freq_step);
    c->in_group = xcalloc((size_t)n_keys, sizeof *c->in_group);
    for (int i = 0; i < slots; i++) c->slot_key[i] = -1;
    for (int64_t i = 0; i < n_keys; i++) c->where[i] = -1;
}

static void cache_free(cache *c) {
    free(c->slot_key), free(c->where), free(c->last_use), free(c->next_use);
    free(c->score), free(c->score_step), free(c->freq), free(c->freq_step), free(c->in_group);
}

static double decayed(double v, int64_t from, int64_t to, double d) { return v * pow(d, (double)(to - from)); }

/* The slot to evict for group g, or -1; never one holding a key of g. */
static int victim(const cache *c, int64_t g, int64_t step) {
    if (c->n_used < c->slots) return c->n_used;
    int best = -1;
    double bv = 0;
    for (int i = 0; i < c->slots; i++) {
        const int32_t key = c->slot_key[i];
        if (c->in_group[key] == g + 1) continue;
        double v; /* lower goes first */
        switch (c->policy) {
        case P_LRU: v = (double)c->last_use[i]; break;
        case P_BELADY: v = -(double)c->next_use[i]; break;
        case P_LFU: v = decayed(c->score[i], c->score_step[i], step, 0.97); break;
        case P_STATIC_HELD: v = c->member[key] ? INFINITY : (double)c->last_use[i]; break;
        default:
            v = -ws_next_use(decayed(c->freq[key], c->freq_step[key], step, c->decay) * (1.0 - c->decay),
                             key / c->n_expert, c->cur_layer, c->n_layer);
            break;
        }
        if (best < 0 || v < bv || (v == bv && c->last_use[i] < c->last_use[best])) {
            best = i;
            bv = v;
        }
    }
    return best;
}

static void request(cache *c, const trace *t, int64_t g) {
    const int64_t step = t->step[g];
    if (t->off[g + 1] > t->off[g]) c->cur_layer = t->key[t->off[g]] / t->n_expert;
    for (int64_t o = t->off[g]; o < t->off[g + 1]; o++) { /* every use counts, resident or not */
        const int32_t key = t->key[o];
        c->freq[key] = decayed(c->freq[key], c->freq_step[key], step, c->decay) + t->mult[o];
        c->freq_step[key] = step;
        c->in_group[key] = g + 1;
    }
    for (int64_t o = t->off[g]; o < t->off[g + 1]; o++) {
        const int32_t key = t->key[o];
        int s = c->where[key];
        if (s >= 0) {
            c->hits++;
        } else {
            c->misses++;
            s = victim(c, g, step);
            if (s < 0) continue; /* fewer slots than the group names: computed without caching */
            if (s == c->n_used) c->n_used++;
            else c->where[c->slot_key[s]] = -1;
            c->slot_key[s] = key;
            c->where[key] = s;
            c->score[s] = 0;
            c->score_step[s] = step;
        }
        c->last_use[s] = g;
        c->next_use[s] = t->next[o];
        c->score[s] = decayed(c->score[s], c->score_step[s], step, 0.97) + t->mult[o];
        c->score_step[s] = step;
    }
}

static double run_policy(const trace *t, int policy, int slots, double decay, const uint8_t *member) {
    cache c;
    cache_init(&c, policy, slots, (int64_t)t->n_layer * t->n_expert, decay);
    c.n_layer = t->n_layer;
    c.n_expert = t->n_expert;
    c.member = member;
    for (int64_t g = 0; g < t->n_group; g++) request(&c, t, g);
    const double rate = (double)c.hits / (double)(c.hits + c.misses);
    cache_free(&c);
    return rate;
}

static int cmp_desc(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* The best static set: the `slots` experts requested most often over the
 * whole trace (each request counted once, as the other policies count).
 * Preloaded, every request of a member hits (the return value); started
 * empty, as a single cold run starts, the first use of each member is a
 * load (*cold). */
static double static_best(const trace *t, int slots, double *cold) {
    const int64_t nk = (int64_t)t->n_layer * t->n_expert, total = t->off[t->n_group];
    int64_t *count = xcalloc((size_t)nk, sizeof *count);
    for (int64_t i = 0; i < total; i++) count[t->key[i]]++;
    qsort(count, (size_t)nk, sizeof *count, cmp_desc);
    int64_t hit = 0, loads = 0;
    for (int64_t i = 0; i < nk && i < slots; i++) {
        hit += count[i];
        loads += count[i] > 0;
    }
    free(count);
    *cold = (double)(hit - loads) / (double)total;
    return (double)hit / (double)total;
}

/* static_held (see the head of the file): the m most used keys kept, the
 * rest through slots - m least-recently-used slots, for every m from
 * slots - 8k (k: experts a token uses) to slots; the best rate. */
static double static_held(const trace *t, int slots) {
    const int64_t nk = (int64_t)t->n_layer * t->n_expert, total = t->off[t->n_group];
    int64_t *order = xcalloc((size_t)nk, sizeof *order); /* count << 32 | key, most used first */
    uint8_t *member = xcalloc((size_t)nk, 1);
    for (int64_t i = 0; i < nk; i++) order[i] = i;
    for (int64_t i = 0; i < total; i++) order[t->key[i]] += (int64_t)1 << 32;
    qsort(order, (size_t)nk, sizeof *order, cmp_desc);
    const int lo = slots > 8 * t->k ? slots - 8 * t->k : 0;
    double best = 0;
    for (int m = 0; m <= slots && m < nk; m++) {
        if (m > 0) member[order[m - 1] & 0xffffffff] = 1;
        if (m < lo) continue;
        const double r = run_policy(t, P_STATIC_HELD, slots, WS_FREQ_DECAY, member);
        best = r > best ? r : best;
    }
    free(order), free(member);
    return best;
}

/* How alike consecutive tokens route: the mean fraction of a request's
 * experts that the same layer's previous request also used (random routing
 * of k of n experts: about k / n). */
static double overlap(const trace *t) {
    int64_t *prev = xcalloc((size_t)t->n_layer, sizeof *prev); /* group + 1 */
    uint8_t *mark = xcalloc((size_t)t->n_layer * (size_t)t->n_expert, 1);
    double sum = 0;
    int64_t n = 0;
    for (int64_t g = 0; g < t->n_group; g++) {
        if (t->off[g + 1] == t->off[g]) continue;
        const int layer = t->key[t->off[g]] / t->n_expert;
        if (prev[layer]) {
            const int64_t p = prev[layer] - 1;
            for (int64_t o = t->off[p]; o < t->off[p + 1]; o++) mark[t->key[o]] = 1;
            int64_t same = 0;
            for (int64_t o = t->off[g]; o < t->off[g + 1]; o++) same += mark[t->key[o]];
            for (int64_t o = t->off[p]; o < t->off[p + 1]; o++) mark[t->key[o]] = 0;
            sum += (double)same / (double)(t->off[g + 1] - t->off[g]);
            n++;
        }
        prev[layer] = g + 1;
    }
    free(prev);
    free(mark);
    return n ? sum / (double)n : 0;
}

int main(int argc, char **argv) {
    const char *path = NULL;
    int slots = 0, json = 0;
    double decay = WS_FREQ_DECAY, tie_eps = -1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--slots") && i + 1 < argc) slots = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--decay") && i + 1 < argc) decay = strtod(argv[++i], NULL);
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--near-ties") && i + 1 < argc) tie_eps = strtod(argv[++i], NULL);
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: cachesim TRACE --slots N [--decay D] [--json]\n       cachesim TRACE --near-ties EPS\n");
            return 0;
        } else if (argv[i][0] != '-' && !path) path = argv[i];
        else die("unknown argument '%s' (usage: cachesim TRACE --slots N [--decay D] [--json])", argv[i]);
    }
    if (path && tie_eps >= 0) { /* list the near ties, simulate nothing */
        trace t;
        load_trace(path, &t, tie_eps);
        free(t.off), free(t.key), free(t.mult), free(t.step), free(t.next);
        return 0;
    }
    if (!path || slots < 1) die("%s", "usage: cachesim TRACE --slots N [--decay D] [--json]");
    if (!(decay > 0 && decay <= 1)) die("%s", "--decay must be in (0, 1]");
    trace t;
    load_trace(path, &t, -1);
    const double lru = run_policy(&t, P_LRU, slots, decay, NULL), lfu = run_policy(&t, P_LFU, slots, decay, NULL);
    const double freq = run_policy(&t, P_FREQ, slots, decay, NULL), bel = run_policy(&t, P_BELADY, slots, decay, NULL);
    double stc;
    const double st = static_best(&t, slots, &stc), sth = static_held(&t, slots), ov = overlap(&t);
    if (json)
        printf("{\"requests\":%lld,\"experts_per_token\":%d,\"keys\":%d,\"slots\":%d,\"steps\":%lld,"
               "\"lru\":%.4f,\"lfu\":%.4f,\"freq\":%.4f,\"static\":%.4f,\"static_cold\":%.4f,\"static_held\":%.4f,"
               "\"belady\":%.4f,\"overlap\":%.4f,\"decay\":%g}\n",
               (long long)t.n_group, t.k, t.n_layer * t.n_expert, slots, (long long)t.n_step, lru, lfu, freq, st, stc,
               sth, bel, ov, decay);
    else
        printf("%lld requests (step, layer) of %d experts per token, %d slots for %d (layer, expert) keys, %lld steps\n"
               "hit rate: lru %.1f%%  lfu(0.97, resident) %.1f%%  freq(%g) %.1f%%  static-best %.1f%% (started empty "
               "%.1f%%; holding what it computes %.1f%%)  belady %.1f%%\nconsecutive tokens share %.1f%% of a layer's experts\n",
               (long long)t.n_group, t.k, slots, t.n_layer * t.n_expert, (long long)t.n_step, 100 * lru, 100 * lfu,
               decay, 100 * freq, 100 * st, 100 * stc, 100 * sth, 100 * bel, 100 * ov);
    free(t.off), free(t.key), free(t.mult), free(t.step), free(t.next);
    return 0;
}
