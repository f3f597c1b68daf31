/*
 * wsplan.c - the weight store's plan: what a budget holds (wstore.h).
 *
 * Tensors are classified by name (routed experts, a layer's dense tensors,
 * globals), and the budget is shared as wstore.c's design comment says:
 * globals and as many layers' dense tensors as fit resident, the rest
 * streamed through two layer buffers, what remains the expert cache. Sizes
 * come from a file: every sum is checked for overflow. A plan is a pure
 * function of the file's tensors and the configuration: `deltafin plan`
 * makes it without opening the store.
 */
#include <stdlib.h>
#include <string.h>

#include "requant.h"
#include "util.h"
#include "wsio.h"
#include "wstore.h"

uint64_t ws_span_bytes(uint64_t len) {
    const uint64_t a = WSIO_ALIGN;
    return ((len + a - 1) & ~(a - 1)) + a;
}

uint64_t ws_parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0)) return 0;
    while (*end == ' ') end++;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1024.0 * 1024; end++; break;
    case 'g': case 'G': mul = 1024.0 * 1024 * 1024; end++; break;
    case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return 0;
    v *= mul;
    return v >= 1.8e19 ? 0 : (uint64_t)v;
}

/* ---- tensor classification ---- */

int ws_layer_of(const char *name) {
    if (strncmp(name, "blk.", 4) != 0) return -1;
    char *end;
    long l = strtol(name + 4, &end, 10);
    return (end != name + 4 && *end == '.' && l >= 0 && l < 100000) ? (int)l : -1;
}

int ws_expert_part(const gguf_tensor *t) {
    if (t->n_dims != 3 || ws_layer_of(t->name) < 0) return -1;
    if (strstr(t->name, ".ffn_gate_exps.")) return 0;
    if (strstr(t->name, ".ffn_up_exps.")) return 1;
    if (strstr(t->name, ".ffn_down_exps.")) return 2;
    return -1;
}

/* Per-expert tensors that are not the expert matrices (gpt-oss's blk.N.ffn_*_exps.bias): what a rank that
 * only serves experts holds besides its slots. */
static int serves_experts(const char *name) { return strstr(name, "_exps.") != NULL; }

int ws_holds(const ws_config *cfg, const char *name, int l, int part) {
    if (cfg->experts_only && part < 0 && !serves_experts(name)) return 0;
    if (cfg->layer_hi > 0 && l >= 0) return l >= cfg->layer_lo && l < cfg->layer_hi;
    if (cfg->layer_hi > 0) return cfg->globals || (strcmp(name, "token_embd.weight") && strcmp(name, "output.weight"));
    return 1;
}

/* ---- planning ---- */

/* Sums of sizes from a file: overflow makes the whole plan an error (a
 * crafted file must not wrap a sum into a small minimum that "fits"). */
#define ADD(acc, x) (ovf |= (uint64_t)__builtin_add_overflow((acc), (x), &(acc)))
#define MULU(a, b) (ovf |= (uint64_t)__builtin_mul_overflow((uint64_t)(a), (uint64_t)(b), &tmp), tmp)

int ws_make_plan(const gguf_ctx *g, const ws_config *cfg, ws_plan *p, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    p->budget = cfg->budget;
    p->reserve = cfg->reserve;
    const int L = cfg->n_layer;
    /* per layer: dense bytes as resident copies (requantized where
     * cfg->resident_type says so), as the file holds them (what a streaming
     * buffer reads), and what requantizing saves */
    uint64_t *dense = calloc((size_t)L + 1, sizeof(uint64_t)), *dfile = calloc((size_t)L + 1, sizeof(uint64_t));
    uint64_t *saved = calloc((size_t)L + 1, sizeof(uint64_t)), *dread = calloc((size_t)L + 1, sizeof(uint64_t));
    uint64_t (*eslot)[3] = calloc((size_t)L + 1, sizeof *eslot);
    if (!dense || !dfile || !saved || !dread || !eslot) {
        free(dense); free(dfile); free(saved); free(dread); free(eslot);
        return df_seterr(err, errlen, "out of memory");
    }
    uint64_t globals = 0, saved_all = 0, ovf = 0, tmp = 0;
    int moe_layers = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        const int l = ws_layer_of(t->name), part = ws_expert_part(t);
        if (l >= L) continue; /* a block past the model's layers (NextN/MTP): never bound, never read */
        if (!ws_holds(cfg, t->name, l, part)) {
            if (part < 0 && !cfg->layer_hi) ADD(p->dense_total, t->nbytes); /* rank 0's, which runs them all */
            continue;
        }
        const uint64_t span = t->nbytes > UINT64_MAX / 2 ? (ovf = 1, 0) : ws_span_bytes(t->nbytes);
        const uint64_t rq = rq_nbytes(t, rq_resident_type(t, part >= 0, cfg->resident_type));
        const uint64_t rspan = rq > UINT64_MAX / 2 ? (ovf = 1, 0) : ws_span_bytes(rq);
        if (part >= 0 && l >= 0 && t->ne[2] > 0) {
            eslot[l][part] = ws_span_bytes(t->nbytes / (uint64_t)t->ne[2]);
            ADD(p->expert_total, t->nbytes);
        } else if (l >= 0) {
            ADD(dense[l], rspan);
            ADD(dfile[l], span);
            ADD(dread[l], t->nbytes);
            ADD(saved[l], span - rspan);
            ADD(p->dense_total, t->nbytes);
        } else {
            ADD(globals, rspan);
            ADD(saved_all, span - rspan);
            ADD(p->dense_total, t->nbytes);
        }
    }
    uint64_t es = 0, dmax = 0, dall = 0;
    for (int l = 0; l < L; l++) {
        uint64_t s = eslot[l][0];
        ADD(s, eslot[l][1]);
        ADD(s, eslot[l][2]);
        if (s) moe_layers++;
        if (s > es) es = s;
        if (dfile[l] > dmax) dmax = dfile[l];
        ADD(dall, dense[l]);
        ADD(p->dense_layers, dread[l]);
        ADD(saved_all, saved[l]); /* what requantizing saves if every layer stays (refined below) */
    }
    p->requant_saved = saved_all;
    p->expert_slot = es;
    p->n_experts_total = moe_layers * cfg->n_expert;
    if (cfg->own) { /* a rank of a cluster: its own share only */
        p->n_experts_total = 0;
        for (int l = 0; l < L; l++)
            for (int e = 0; e < cfg->n_expert && eslot[l][0]; e++) p->n_experts_total += cfg->own[l * cfg->n_expert + e] != 0;
    }
    const uint64_t min_slots = moe_layers ? (uint64_t)(2 * cfg->n_expert_used) : 0;
    const uint64_t slots_min = MULU(min_slots, es);
    const uint64_t two_bufs = L > 0 ? MULU(2, dmax) : 0;
    uint64_t streamed = cfg->reserve, all_in = cfg->reserve; /* the two ways to run: dense layers streamed or not */
    ADD(streamed, globals);
    ADD(streamed, two_bufs);
    ADD(streamed, slots_min);
    ADD(all_in, globals);
    ADD(all_in, dall);
    ADD(all_in, slots_min);
    int rc = 0;
    if (ovf) {
        rc = df_seterr(err, errlen, "the sizes in this file add up to more than 2^64 bytes: it is damaged or crafted");
        p->minimum = UINT64_MAX;
        goto done;
    }
    p->minimum = streamed < all_in ? streamed : all_in;
    if (cfg->budget < p->minimum) {
        char b[32], mn[32];
        rc = df_seterr(err, errlen, "a budget of %s cannot run this model: the minimum is %s",
                       df_fmt_bytes(cfg->budget, b, sizeof b), df_fmt_bytes(p->minimum, mn, sizeof mn));
        goto done;
    }
    const uint64_t avail = cfg->budget - cfg->reserve;
    uint64_t used;
    p->first_streamed = L;
    if (all_in - cfg->reserve <= avail) {
        used = globals + dall;
        p->n_dense_streamed = 0;
    } else {
        for (int l = 0; l < L; l++) p->requant_saved -= saved[l]; /* streamed layers keep the file's types */
        used = globals + 2 * dmax;
        p->dense_slot = dmax;
        int keep = 0;
        while (keep < L && used + dense[keep] + slots_min <= avail) p->requant_saved += saved[keep], used += dense[keep++];
        p->first_streamed = keep;
        p->n_dense_streamed = 0;
        p->dense_layers = 0;
        for (int l = keep; l < L; l++) { /* a stage's other layers hold none */
            p->n_dense_streamed += dfile[l] > 0;
            p->dense_layers += dread[l]; /* no overflow: a part of the sum checked above */
        }
    }
    p->resident = used - (p->n_dense_streamed ? 2 * dmax : 0);
    uint64_t left = avail - used;
    uint64_t slots = es ? left / es : 0;
    p->expert_room = slots;
    if (slots > (uint64_t)p->n_experts_total) slots = (uint64_t)p->n_experts_total;
    p->n_expert_slots = (int)slots;
done:
    free(dense);
    free(dfile);
    free(saved);
    free(dread);
    free(eslot);
    return rc;
}
#undef ADD
#undef MULU
