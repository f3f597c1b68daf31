/*
 * sampler.c - choosing the next token from logits.
 *
 * Pipeline, in llama.cpp's usual order: the logit biases, the penalties over
 * the last repeat_last_n emitted tokens (repetition; presence and frequency),
 * then (unless greedy) top-k, temperature,
 * softmax, top-p and min-p filtering, and a draw from the seeded generator.
 * Greedy (temp <= 0) takes the argmax after the penalty, ties to the lowest id.
 *
 * The generator is xoshiro256** seeded through splitmix64, so the same seed
 * and the same logits give the same tokens on every machine. All buffers are
 * allocated once in df_sampler_new: sampling allocates nothing.
 *
 * With a grammar (df_sampler_set_grammar, grammar.c): the token picked is
 * checked against it; if refused, every token the grammar refuses is masked
 * and the pipeline runs again from the penalised logits (llama.cpp's order: the
 * same distribution as masking first, since a refused draw is redrawn from
 * the rest, at the cost of one check when the model already complies). A
 * grammar no token can continue ends the text with an end-of-generation token.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "deltafin.h"
#include "grammar.h"

typedef struct { float v; int32_t id; } cand;

struct df_sampler {
    df_sampler_params p;
    int n_vocab;
    uint64_t rng[4];
    float *work;     /* (n_vocab) penalised logits */
    cand *cand;      /* (n_vocab) candidates, best first */
    float *prob;     /* (n_vocab) candidate probabilities */
    int32_t *recent; /* ring of the last repeat_last_n tokens */
    int n_recent, recent_head;
    int32_t *bias_id; /* the logit biases (df_sampler_set_logit_bias) */
    float *bias;
    int n_bias;
    gram_state *gs;  /* the grammar's state, or NULL */
    const gram_vocab *gv;
    uint8_t *allowed; /* (n_vocab) the grammar's mask */
    /* a lazy grammar (sampler_set_grammar_lazy): gs waits for a trigger in the output */
    char **trig;
    int n_trig, lazy;
    size_t trig_max;  /* the longest trigger's length */
    char *tail;       /* the output's last bytes (up to trig_max - 1 before the next token's) */
    size_t tail_n, tail_cap; /* allocated once: trig_max + the longest token */
};

df_sampler_params df_sampler_default_params(void) {
    df_sampler_params p;
    p.temp = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.repeat_last_n = 64;
    p.seed = 0x5EED;
    p.presence_penalty = p.frequency_penalty = 0.0f;
    return p;
}

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t *s) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform double in [0, 1). */
static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); }

df_sampler *df_sampler_new(const df_sampler_params *p, int n_vocab) {
    if (n_vocab < 1) return NULL;
    df_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = p ? *p : df_sampler_default_params();
    if (s->p.repeat_last_n < 0) s->p.repeat_last_n = 0;
    s->n_vocab = n_vocab;
    uint64_t x = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    s->work = malloc((size_t)n_vocab * sizeof(float));
    s->cand = malloc((size_t)n_vocab * sizeof(cand));
    s->prob = malloc((size_t)n_vocab * sizeof(float));
    s->recent = malloc((size_t)(s->p.repeat_last_n ? s->p.repeat_last_n : 1) * sizeof(int32_t));
    if (!s->work || !s->cand || !s->prob || !s->recent) {
        df_sampler_free(s);
        return NULL;
    }
    return s;
}

static void lazy_clear(df_sampler *s) {
    for (int i = 0; i < s->n_trig; i++) free(s->trig[i]);
    free(s->trig);
    free(s->tail);
    s->trig = NULL, s->tail = NULL, s->n_trig = 0, s->lazy = 0, s->tail_n = 0, s->tail_cap = 0, s->trig_max = 0;
}

void df_sampler_free(df_sampler *s) {
    if (!s) return;
    lazy_clear(s);
    gram_state_free(s->gs);
    free(s->allowed);
    free(s->bias_id);
    free(s->bias);
    free(s->work);
    free(s->cand);
    free(s->prob);
    free(s->recent);
    free(s);
}

int sampler_set_grammar(df_sampler *s, gram_state *st, const gram_vocab *v) {
    if (st && !s->allowed && !(s->allowed = malloc((size_t)s->n_vocab))) return -1;
    lazy_clear(s);
    gram_state_free(s->gs);
    s->gs = st;
    s->gv = v;
    return 0;
}

int sampler_set_grammar_lazy(df_sampler *s, gram_state *st, const gram_vocab *v, const char *const *triggers, int n) {
    char **t = calloc((size_t)(n > 0 ? n : 1), sizeof *t);
    size_t most = 0;
    int ok = t != NULL;
    for (int i = 0; ok && i < n; i++) {
        ok = (t[i] = strdup(triggers[i])) != NULL;
        if (ok && strlen(t[i]) > most) most = strlen(t[i]);
    }
    const size_t cap = most + (size_t)(v ? gram_vocab_max_len(v) : 0) + 1;
    char *tail = ok ? malloc(cap) : NULL;
    if (!tail || sampler_set_grammar(s, st, v) != 0) {
        for (int i = 0; t && i < n; i++) free(t[i]);
        free(t);
        free(tail);
        return -1;
    }
    s->trig = t, s->n_trig = n, s->trig_max = most, s->lazy = st != NULL && n > 0 && most > 0;
    s->tail = tail, s->tail_cap = cap, s->tail_n = 0;
    return 0;
}

/* A lazy grammar's wait: token id's text joins the tail; at a trigger the grammar starts, fed the text from it
 * (a grammar that refuses it is dropped: the output goes on unconstrained, as it would have without). */
static void lazy_accept(df_sampler *s, int32_t id) {
    int len;
    const char *text = gram_vocab_text(s->gv, id, &len);
    if (s->tail_n + (size_t)len + 1 > s->tail_cap) return; /* cannot happen: the tail holds < trig_max bytes */
    memcpy(s->tail + s->tail_n, text, (size_t)len);
    s->tail_n += (size_t)len;
    s->tail[s->tail_n] = 0;
    size_t at = SIZE_MAX;
    for (int i = 0; i < s->n_trig; i++) {
        const char *hit = memmem(s->tail, s->tail_n, s->trig[i], strlen(s->trig[i]));
        if (hit && (size_t)(hit - s->tail) < at) at = (size_t)(hit - s->tail);
    }
    if (at != SIZE_MAX) {
        s->lazy = 0;
        if (gram_accept_text(s->gs, s->tail + at, s->tail_n - at) != 0) {
            gram_state_free(s->gs);
            s->gs = NULL;
        }
        return;
    }
    const size_t keep = s->trig_max - 1; /* what may be the start of a trigger */
    if (s->tail_n > keep) memmove(s->tail, s->tail + s->tail_n - keep, keep), s->tail_n = keep;
}

int df_sampler_set_logit_bias(df_sampler *s, const int32_t *ids, const float *bias, int n) {
    if (n < 0) return DF_E_INPUT;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= s->n_vocab || !isfinite(bias[i])) return DF_E_INPUT;
    int32_t *a = n ? malloc((size_t)n * sizeof *a) : NULL;
    float *b = n ? malloc((size_t)n * sizeof *b) : NULL;
    if (n && (!a || !b)) return free(a), free(b), DF_E_NOMEM;
    if (n) memcpy(a, ids, (size_t)n * sizeof *a), memcpy(b, bias, (size_t)n * sizeof *b);
    free(s->bias_id), free(s->bias);
    s->bias_id = a, s->bias = b, s->n_bias = n;
    return DF_OK;
}

int df_sampler_grammar_done(const df_sampler *s) { return s->gs && !s->lazy ? gram_done(s->gs) : 0; }

void df_sampler_accept(df_sampler *s, int32_t id) {
    if (s->gs && s->lazy) lazy_accept(s, id);
    else if (s->gs) gram_accept(s->gs, id);
    if (s->p.repeat_last_n <= 0) return;
    s->recent[s->recent_head] = id;
    s->recent_head = (s->recent_head + 1) % s->p.repeat_last_n;
    if (s->n_recent < s->p.repeat_last_n) s->n_recent++;
}

/* Order: descending value, ties to the lower id. */
static int cand_before(const cand *a, const cand *b) { return a->v > b->v || (a->v == b->v && a->id < b->id); }
static int cmp_cand(const void *a, const void *b) {
    return cand_before(a, b) ? -1 : (cand_before(b, a) ? 1 : 0);
}

/* Put the k best of w[0..n) into c[0..k), sorted best first. A min-heap of
 * size k keeps this O(n log k) for the usual top-k of 40 over 150k tokens. */
static int select_top(const float *w, int n, int k, cand *c) {
    if (k <= 0 || k > n) k = n;
    int size = 0;
    for (int i = 0; i < n; i++) {
        cand x = {w[i], i};
        if (size < k) { /* sift up: heap root is the worst kept */
            int j = size++;
            while (j > 0 && cand_before(&c[(j - 1) / 2], &x)) { c[j] = c[(j - 1) / 2]; j = (j - 1) / 2; }
            c[j] = x;
        } else if (cand_before(&x, &c[0])) { /* replace root, sift down */
            int j = 0;
            for (;;) {
                int l = 2 * j + 1, r = l + 1, m = j;
                const cand *cur = (m == j) ? &x : &c[m];
                if (l < size && cand_before(cur, &c[l])) { m = l; cur = &c[l]; }
                if (r < size && cand_before(cur, &c[r])) m = r;
                if (m == j) break;
                c[j] = c[m];
                j = m;
            }
            c[j] = x;
        }
    }
    qsort(c, (size_t)size, sizeof(cand), cmp_cand);
    return size;
}

static int32_t pick(df_sampler *s, const float *w);

int32_t df_sampler_sample(df_sampler *s, const float *logits) {
    const int n = s->n_vocab;
    float *w = s->work;
    memcpy(w, logits, (size_t)n * sizeof(float));
    for (int i = 0; i < s->n_bias; i++) w[s->bias_id[i]] += s->bias[i];
    const int repeat = s->p.repeat_penalty != 1.0f && s->p.repeat_penalty > 0.0f;
    if (repeat || s->p.presence_penalty != 0.0f || s->p.frequency_penalty != 0.0f) {
        for (int i = 0; i < s->n_recent; i++) {
            int32_t id = s->recent[i];
            if (id < 0 || id >= n) continue;
            /* apply once per distinct token: its first place in the window, counting the others */
            int seen = 0, count = 1;
            for (int j = 0; j < i; j++) seen |= s->recent[j] == id;
            if (seen) continue;
            for (int j = i + 1; j < s->n_recent; j++) count += s->recent[j] == id;
            if (repeat) w[id] = w[id] > 0 ? w[id] / s->p.repeat_penalty : w[id] * s->p.repeat_penalty;
            w[id] -= s->p.presence_penalty + s->p.frequency_penalty * (float)count;
        }
    }
    const int32_t tok = pick(s, w);
    if (!s->gs || s->lazy || gram_allows(s->gs, tok)) return tok;
    if (gram_mask(s->gs, s->allowed) == 0) { /* nothing continues the grammar: end the text */
        const int32_t end = gram_vocab_eog(s->gv);
        return end >= 0 ? end : tok;
    }
    for (int i = 0; i < n; i++)
        if (!s->allowed[i]) w[i] = -INFINITY;
    return pick(s, w);
}

/* The token the pipeline picks from penalised logits w (-INFINITY: never). */
static int32_t pick(df_sampler *s, const float *w) {
    const int n = s->n_vocab;
    if (s->p.temp <= 0.0f) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (w[i] > w[best]) best = i;
        return best;
    }
    int m = select_top(w, n, s->p.top_k, s->cand);
    /* temperature + softmax over the m candidates */
    const float mx = s->cand[0].v;
    double sum = 0.0;
    for (int i = 0; i < m; i++) {
        s->prob[i] = expf((s->cand[i].v - mx) / s->p.temp);
        sum += s->prob[i];
    }
    for (int i = 0; i < m; i++) s->prob[i] = (float)(s->prob[i] / sum);
    /* top-p: the smallest prefix whose mass reaches top_p */
    if (s->p.top_p < 1.0f) {
        double cum = 0.0;
        for (int i = 0; i < m; i++) {
            cum += s->prob[i];
            if (cum >= s->p.top_p) {
                m = i + 1;
                break;
            }
        }
    }
    /* min-p: drop candidates below min_p times the best probability */
    if (s->p.min_p > 0.0f) {
        const float floor_p = s->p.min_p * s->prob[0];
        int keep = 1;
        while (keep < m && s->prob[keep] >= floor_p) keep++;
        m = keep;
    }
    double total = 0.0;
    for (int i = 0; i < m; i++) total += s->prob[i];
    double r = rng_uniform(s->rng) * total, acc = 0.0;
    for (int i = 0; i < m; i++) {
        acc += s->prob[i];
        if (r < acc) return s->cand[i].id;
    }
    while (m > 1 && s->prob[m - 1] <= 0.0f) m--; /* rounding left r at the end: the last possible one */
    return s->cand[m - 1].id;
}

/* ---- state: bytes, little-endian, fixed layout ----
 *   "DFSS" u32 version(1) | u64 seed | i32 repeat_last_n | i32 n_recent | i32 recent_head
 *   | u64 rng[4] | i32 recent[repeat_last_n]
 * The seed and window length identify the parameters it belongs to. */

#define SS_HEAD (4 + 4 + 8 + 4 * 3 + 8 * 4)

static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}

size_t df_sampler_get_state(const df_sampler *s, void *buf, size_t cap) {
    const size_t need = SS_HEAD + 4 * (size_t)s->p.repeat_last_n;
    if (!buf || cap < need) return need;
    unsigned char *p = buf;
    memcpy(p, "DFSS", 4);
    put_u32(p + 4, 1);
    put_u64(p + 8, s->p.seed);
    put_u32(p + 16, (uint32_t)s->p.repeat_last_n);
    put_u32(p + 20, (uint32_t)s->n_recent);
    put_u32(p + 24, (uint32_t)s->recent_head);
    for (int i = 0; i < 4; i++) put_u64(p + 28 + 8 * i, s->rng[i]);
    for (int i = 0; i < s->p.repeat_last_n; i++) put_u32(p + SS_HEAD + 4 * (size_t)i, (uint32_t)s->recent[i]);
    return need;
}

int df_sampler_set_state(df_sampler *s, const void *buf, size_t len) {
    const unsigned char *p = buf;
    const int rl = s->p.repeat_last_n;
    if (!buf || len != SS_HEAD + 4 * (size_t)rl || memcmp(p, "DFSS", 4) || get_u32(p + 4) != 1 ||
        get_u64(p + 8) != s->p.seed || get_u32(p + 16) != (uint32_t)rl)
        return -1;
    const uint32_t nr = get_u32(p + 20), head = get_u32(p + 24);
    if (nr > (uint32_t)rl || (rl > 0 ? head >= (uint32_t)rl : head != 0)) return -1;
    uint64_t rng[4];
    for (int i = 0; i < 4; i++) rng[i] = get_u64(p + 28 + 8 * i);
    if (!(rng[0] | rng[1] | rng[2] | rng[3])) return -1; /* xoshiro's one invalid state */
    memcpy(s->rng, rng, sizeof rng);
    s->n_recent = (int)nr;
    s->recent_head = (int)head;
    for (int i = 0; i < rl; i++) s->recent[i] = (int32_t)get_u32(p + SS_HEAD + 4 * (size_t)i);
    return 0;
}
