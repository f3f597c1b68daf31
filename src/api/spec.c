/*
 * spec.c - speculative decoding: guess the next k tokens cheaply, verify
 * them with one forward pass of the target model, keep the ones it agrees
 * with (df_spec_*, include/deltafin.h).
 *
 * DESIGN
 * Guess sources: prompt lookup (the longest recent n-gram of the context
 * that occurred before; the tokens that followed it then), a draft model
 * (a session of a smaller model with the same vocabulary, decoding greedily
 * k tokens ahead; checked token by token at df_spec_new), and the model's
 * own NextN/MTP block (DF_SPEC_MTP, llama.cpp's draft-mtp: the model loaded
 * with df_model_params.mtp; the block's cache follows every batch of the
 * target, and df_mtp_guess chains it greedily from the target's last
 * hidden state, src/model/mtp.c). Its guesses are verified like the others.
 *
 * One step (df_spec_step): the pending token (sampled, not yet decoded) and
 * the guesses g1..gk run through the target as one batch with logits for
 * every position. Row i is sampled with the caller's sampler exactly as a
 * plain decode loop would sample it (same sampler state, same draws in the
 * same order); while the sampled token equals the guess g(i+1) the next row
 * is valid too. The first disagreement (or the row after the last guess)
 * gives the new pending token, and the session is truncated back to the
 * positions that were kept. With greedy sampling the output is therefore
 * the plain loop's output; with temperature it is rejection sampling with
 * a point-mass proposal (accept g with probability p(g), otherwise a draw
 * from p without g): the target distribution, draw for draw the same as
 * without speculation when the rows' logits are the same.
 *
 * Recurrent layers (kimi-linear, kimi-k3: KDA; qwen35moe, qwen3next: gated
 * delta net) keep no history, so a rejected guess is undone by session.c's
 * rollback: before a pass the session is marked (df_rec_mark: a copy of
 * every recurrent layer's conv window and delta-rule state), the pass's rows
 * journal their recurrences' inputs (the conv inputs; the delta rule's k, v,
 * decay and beta), and the truncation to the kept rows restores the copy and
 * replays the kept rows' recurrences alone (no weights, no other layer): the
 * same operations in the same order, so the state, and every later logit, is
 * bit for bit that of a session that never saw the rejected rows. This beats
 * a copy of the state per row (k + 1 copies of heads x d x d floats per layer
 * a pass, and that much memory) and re-running the kept rows through the
 * model (a second pass over the weights: from disk under a budget): one copy
 * a pass, a journal row is 1/20 (Kimi-Linear) to 1/36 (Qwen3-Next) of a
 * layer's state, and the replay is a few rows of the cheapest part of a
 * layer. The room (the copy and k_max + 1 journal rows per recurrent layer)
 * is the session's memory, asked for with df_session_params.spec_k_max
 * (df_model_params.spec_k_max plans it under a budget); k_max is capped at
 * it (a draft's at its rows: it journals the pending token and k - 1
 * guesses), and a session without it has speculation off with the reason in
 * the report. The mark and the rollback are timed with the pass (its
 * decode, not the sampling), so adaptive k sees their cost.
 *
 * Adaptive k: every pass is timed (and under a memory budget the bytes it
 * read are counted). A pass with k guesses costs the mean of the passes
 * measured at that k (once there are two), otherwise a + b*k seconds (least
 * squares over all passes); a draft's time per guess is added. A guess is
 * accepted with probability alpha (accepted / compared), so k guesses yield
 * (1 - alpha^(k+1)) / (1 - alpha) tokens per pass; k maximises tokens per
 * second, 0 (off) included.
 * Warm-up: four passes alternating k_hi (k_max/2 rounded up, at least 2)
 * and 1, so that the line has two ends without spending passes at k = 0,
 * each of which forgoes the most tokens exactly when guesses are good
 * (bench/spec.sh: a warm-up with four passes at 0 cost 8% of a 128-token
 * run at acceptance 0.99). Off is then measured (two passes) only when the
 * best k's predicted gain over the line's k = 0 is under 25%, where the
 * line's intercept could decide it. Re-tests: while on, every 16th pass
 * tries a neighbour of the chosen k (alternately above and below), so the
 * costs near the optimum are measured rather than extrapolated; while
 * off, every 16th pass probes with 2 guesses so a change of text is noticed
 * (every 4th while fewer than 32 guesses were compared: an acceptance
 * rate from the warm-up's 6 guesses is too rough to stay off on), and each
 * probe that leaves it off doubles that interval (up to 256 passes). An MTP
 * block whose guesses are kept less than 5% of 16+ times is stopped: its
 * cache's upkeep costs a block's pass over every batch. While off, that
 * upkeep waits (mtp.c "Deferred upkeep") and runs as one batch before the
 * next guess; its time counts as the passes at k = 0's (pass_cost), so a
 * pass at k = 0 measures the target alone. An MTP block that costs more
 * than its kept guesses gain (the target alone 5% faster than the best k,
 * measured on two passes at k = 0 once 32 guesses were compared) is
 * stopped too (mtp_costs_more).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mtp.h"
#include "pipe.h"
#include "session.h"
#include "util.h"

#define WARMUP 4       /* passes alternating k_hi and 1 before choosing */
#define PROBE_EVERY 16 /* one pass in this many re-tests a neighbour (on) or probes (off) */
#define PROBE_EVERY_EARLY 4 /* ... while fewer than EARLY_COMPARED guesses were compared */
#define EARLY_COMPARED 32
#define PROBE_EVERY_MAX 256 /* while off, each probe that does not turn speculation on doubles the interval, to this */
#define MTP_STOP_COMPARED 16 /* MTP guesses compared, and */
#define MTP_STOP_ACCEPT 0.05 /* an acceptance below this: the block is stopped (mtp.c), speculation stays off */
#define PROBE_K 2
#define MEASURE_OFF 1.25 /* measure k = 0 when the best k's predicted gain is under this */
#define MTP_STOP_GAIN 1.05 /* the target alone this much faster than the best k: the MTP block is stopped */
#define K_CAP 64

struct df_spec {
    df_session *s, *draft;
    int mtp; /* DF_SPEC_MTP: the target's own MTP block guesses */
    df_spec_params p;
    int32_t *hist; /* every token of the sequence: decoded ones, then the pending one */
    int n_hist, cap;
    float *dlogits; /* the draft's logits */
    char off_why[240]; /* non-empty: speculation cannot run */
    /* measurements */
    double sk, st, skk, skt, n_pass; /* least-squares sums of (k, seconds) */
    double sb, skb;                  /* bytes read, and k * bytes */
    double draft_t, draft_n;         /* draft seconds and guesses */
    double kt[K_CAP + 1], kn[K_CAP + 1]; /* seconds and passes at each k */
    double flush_t; /* seconds of the MTP block's upkeep that waited through passes at k = 0 (mtp.c) */
    long compared, accepted, guessed, emitted, passes, since_probe, probes;
    int off_probes; /* probes in a row that left speculation off (the interval doubles with each) */
    int k_now;
    char why[320];
};

df_spec_params df_spec_default_params(void) {
    df_spec_params p;
    memset(&p, 0, sizeof p);
    p.source = DF_SPEC_LOOKUP;
    p.k_max = 4;
    p.k_fixed = -1;
    p.ngram_min = 2;
    p.ngram_max = 4;
    return p;
}

/* Same vocabulary: the same size and the same bytes for every token. */
static int same_vocab(const df_model *a, const df_model *b, char *err, size_t errlen) {
    const int nv = df_n_vocab(a);
    if (df_n_vocab(b) != nv)
        return df_seterr(err, errlen, "the draft's vocabulary has %d tokens, the model's %d", df_n_vocab(b), nv);
    char pa[512], pb[512];
    for (int32_t id = 0; id < nv; id++) {
        const int la = df_token_to_piece(a, id, pa, sizeof pa), lb = df_token_to_piece(b, id, pb, sizeof pb);
        if (la != lb || (la > 0 && memcmp(pa, pb, (size_t)(la < (int)sizeof pa ? la : (int)sizeof pa)) != 0))
            return df_seterr(err, errlen, "the draft's vocabulary differs from the model's at token %d", id);
    }
    if (df_token_eos(a) != df_token_eos(b) || df_token_bos(a) != df_token_bos(b))
        return df_seterr(err, errlen, "the draft's BOS/EOS tokens differ from the model's");
    return 0;
}

/* DF_SPEC_MTP needs a NextN block in the file, an architecture that runs
 * it, and the model loaded with it. */
static int mtp_usable(const df_model *m, char *err, size_t errlen) {
    const char *arch = m->arch_name ? m->arch_name : "the model";
    if (m->hp.n_layer_nextn == 0)
        return df_seterr(err, errlen, "%s has no NextN/MTP block (no nextn_predict_layers, no blk.N.nextn.* tensors): "
                         "MTP speculation needs a model file that carries one", m->path);
    if (!m->hp.mtp_arch)
        return df_seterr(err, errlen, "%s: MTP speculation is not supported for %s (glm4moe and deepseek2 only)",
                         m->path, arch);
    if (!m->hp.n_layer_mtp || !m->mtp_block)
        return df_seterr(err, errlen, "%s was loaded without its MTP block (df_model_params.mtp = 1)", m->path);
    return 0;
}

int df_spec_new(df_session *target, const df_spec_params *p, const int32_t *history, int n_history, df_spec **out,
                char *err, size_t errlen) {
    *out = NULL;
    if (!target || !p || n_history < 0 || (n_history > 0 && !history))
        return df_seterr(err, errlen, "df_spec_new: bad arguments");
    if (p->source != DF_SPEC_NONE && df_pipe_refuse(target, "speculative decoding", err, errlen)) return DF_E_UNSUPPORTED;
    if (p->source < DF_SPEC_NONE || p->source > DF_SPEC_MTP)
        return df_seterr(err, errlen, "unknown guess source %d", p->source);
    if (p->source == DF_SPEC_DRAFT && !p->draft) return df_seterr(err, errlen, "a draft model's session is needed");
    if (p->k_max < 1 || p->k_max > 64 || p->k_fixed > p->k_max)
        return df_seterr(err, errlen, "k_max is 1..64 and k_fixed at most k_max (k_max %d, k_fixed %d)", p->k_max,
                         p->k_fixed);
    if (p->source == DF_SPEC_LOOKUP && (p->ngram_min < 1 || p->ngram_max < p->ngram_min))
        return df_seterr(err, errlen, "n-gram lengths %d..%d are not a range", p->ngram_min, p->ngram_max);
    if (p->draft && p->draft->m == target->m) return df_seterr(err, errlen, "the draft is the model itself");
    if (p->source == DF_SPEC_DRAFT && same_vocab(target->m, p->draft->m, err, errlen) != 0) return -1;
    if (p->source == DF_SPEC_MTP && mtp_usable(target->m, err, errlen) != 0) return -1;
    df_spec *sp = calloc(1, sizeof *sp);
    if (!sp) return df_seterr(err, errlen, "out of memory");
    sp->s = target;
    sp->p = *p;
    sp->draft = p->source == DF_SPEC_DRAFT ? p->draft : NULL;
    sp->mtp = p->source == DF_SPEC_MTP;
    sp->cap = df_session_n_ctx(target) + 1;
    sp->hist = malloc((size_t)sp->cap * sizeof(int32_t));
    if (sp->draft) sp->dlogits = malloc((size_t)df_n_vocab(target->m) * sizeof(float));
    if (!sp->hist || (sp->draft && !sp->dlogits) || n_history > sp->cap) {
        df_spec_free(sp);
        return df_seterr(err, errlen, n_history > df_session_n_ctx(target) + 1 ? "history longer than the context"
                                                                               : "out of memory");
    }
    if (n_history) memcpy(sp->hist, history, (size_t)n_history * sizeof(int32_t));
    sp->n_hist = n_history;
    const int kmax_batch = df_session_n_batch(target) - 1;
    if (sp->p.k_max > kmax_batch) sp->p.k_max = kmax_batch;
    /* recurrent layers: k + 1 rows of the target's pass, k of the draft's, must fit their rollback room */
    const int rec_t = target->m->hp.n_layer_recurrent > 0, rec_d = sp->draft && sp->draft->m->hp.n_layer_recurrent > 0;
    if (rec_t && sp->p.k_max > df_rec_rows(target) - 1) sp->p.k_max = df_rec_rows(target) - 1;
    if (rec_d && sp->p.k_max > df_rec_rows(sp->draft)) sp->p.k_max = df_rec_rows(sp->draft);
    if (sp->p.k_fixed > sp->p.k_max) sp->p.k_fixed = sp->p.k_max > 0 ? sp->p.k_max : 0;
    if (p->source == DF_SPEC_NONE) snprintf(sp->off_why, sizeof sp->off_why, "no guess source");
    else if (rec_t && df_rec_rows(target) < 2)
        snprintf(sp->off_why, sizeof sp->off_why,
                 "%s has recurrent layers and the session no room to roll them back (df_session_params.spec_k_max)",
                 target->m->arch_name ? target->m->arch_name : "the model");
    else if (rec_d && df_rec_rows(sp->draft) < 1)
        snprintf(sp->off_why, sizeof sp->off_why,
                 "the draft has recurrent layers and its session no room to roll them back "
                 "(df_session_params.spec_k_max)");
    else if (sp->p.k_max < 1) snprintf(sp->off_why, sizeof sp->off_why, "the batch holds one token");
    else if (p->k_fixed == 0) snprintf(sp->off_why, sizeof sp->off_why, "k fixed at 0");
    snprintf(sp->why, sizeof sp->why, "%s", sp->off_why[0] ? sp->off_why : "warming up");
    /* the draft reads the prompt now, so that its per-guess cost is not charged with it */
    if (sp->draft && !sp->off_why[0] && n_history > 1 &&
        (df_session_truncate(sp->draft, 0, err, errlen) != 0 ||
         df_decode(sp->draft, history, n_history - 1, NULL, 0, err, errlen) != DF_OK)) {
        df_spec_free(sp);
        return -1;
    }
    *out = sp;
    return 0;
}

void df_spec_free(df_spec *sp) {
    if (!sp) return;
    if (sp->mtp) df_mtp_defer(sp->s, 0); /* the block follows every batch again (rows waiting go first) */
    free(sp->hist);
    free(sp->dlogits);
    free(sp);
}

/* ---- guesses ---- */

/* Prompt lookup: the tokens after the latest earlier occurrence of the
 * context's last n tokens, longest n first. */
static int guess_lookup(const df_spec *sp, int k, int32_t *g) {
    const int32_t *h = sp->hist;
    const int nh = sp->n_hist;
    for (int n = sp->p.ngram_max; n >= sp->p.ngram_min; n--) {
        if (n >= nh) continue;
        const int32_t *tail = h + nh - n;
        for (int i = nh - n - 1; i >= 0; i--) {
            if (memcmp(h + i, tail, (size_t)n * sizeof(int32_t)) != 0) continue;
            int c = 0;
            while (c < k && i + n + c < nh) g[c] = h[i + n + c], c++;
            if (c > 0) return c;
        }
    }
    return 0;
}

/* Draft model: catch up with the history, then k greedy tokens. */
static int guess_draft(df_spec *sp, int k, int32_t *g, char *err, size_t errlen) {
    df_session *d = sp->draft;
    const int nv = df_n_vocab(d->m);
    int dp = df_session_pos(d);
    if (dp >= sp->n_hist) { /* it must decode at least the pending token to have its logits */
        if (df_session_truncate(d, sp->n_hist - 1, err, errlen) != 0) return -1;
        dp = sp->n_hist - 1;
    }
    if (sp->n_hist + k > df_session_n_ctx(d)) k = df_session_n_ctx(d) - sp->n_hist;
    if (k <= 0) return 0;
    /* tokens it missed while speculation was off: not the guesses' cost (a pass at k
     * feeds it the pending token and k - 1 guesses, k decodes) */
    int rc = dp < sp->n_hist - 1 ? df_decode(d, sp->hist + dp, sp->n_hist - 1 - dp, NULL, 0, err, errlen) : DF_OK;
    const double t0 = df_time();
    /* a recurrent draft: the guesses it decodes from here may be rolled back */
    if (rc == DF_OK && df_rec_mark(d, err, errlen) != 0) rc = DF_E_INPUT;
    if (rc == DF_OK) rc = df_decode(d, sp->hist + sp->n_hist - 1, 1, sp->dlogits, 0, err, errlen);
    for (int i = 0; rc == DF_OK && i < k; i++) {
        g[i] = df_argmax(sp->dlogits, nv);
        if (i + 1 < k) rc = df_decode(d, &g[i], 1, sp->dlogits, 0, err, errlen);
    }
    if (rc != DF_OK) return -1;
    sp->draft_t += df_time() - t0;
    sp->draft_n += k;
    return k;
}

/* The model's MTP block: k greedy guesses chained from the pending token
 * and the target's last hidden state (timed as a draft's). */
static int guess_mtp(df_spec *sp, int32_t pending, int k, int32_t *g, char *err, size_t errlen) {
    const double t0 = df_time();
    if (df_mtp_guess(sp->s, pending, k, g, err, errlen) != DF_OK) return -1;
    sp->draft_t += df_time() - t0;
    sp->draft_n += k;
    return k;
}

/* ---- the choice of k ---- */

/* Fitted cost of a pass with k guesses: a + b*k seconds. */
static void cost_line(const df_spec *sp, double *a, double *b) {
    const double n = sp->n_pass, den = n * sp->skk - sp->sk * sp->sk;
    if (n < 1) {
        *a = 0, *b = 0;
        return;
    }
    if (den <= 1e-12) { /* one k measured: no slope yet */
        *a = sp->st / n, *b = 0;
        return;
    }
    *b = (n * sp->skt - sp->sk * sp->st) / den;
    if (*b < 0) *b = 0;
    *a = (sp->st - *b * sp->sk) / n;
    if (*a < 1e-9) *a = 1e-9;
}

static double accept_rate(const df_spec *sp) { return sp->compared ? (double)sp->accepted / (double)sp->compared : 0; }

/* Seconds of a pass with k guesses: measured at k, else the line; at k = 0
 * with the MTP block's upkeep that waited (its share of each such pass). */
static double pass_cost(const df_spec *sp, int k, double a, double b) {
    const double c = sp->kn[k] >= 2 ? sp->kt[k] / sp->kn[k] : a + b * k;
    return k == 0 && sp->kn[0] > 0 ? c + sp->flush_t / sp->kn[0] : c;
}

/* Predicted tokens per second with k guesses. */
static double predict(const df_spec *sp, int k, double a, double b) {
    const double al = accept_rate(sp), td = sp->draft_n > 0 ? sp->draft_t / sp->draft_n : 0;
    double tokens = 0, pk = 1;
    for (int i = 0; i <= k; i++) tokens += pk, pk *= al;
    return tokens / (pass_cost(sp, k, a, b) + td * k);
}

/* The warm-up's two k: k_hi then 1 (k_max 1: 1 and 0). */
static int warmup_k(const df_spec *sp) {
    int hi = (sp->p.k_max + 1) / 2;
    if (hi < 2) hi = 2;
    if (hi > sp->p.k_max) hi = sp->p.k_max;
    const int lo = hi > 1 ? 1 : 0;
    return sp->passes % 2 == 0 ? hi : lo;
}

/* Passes between probes: every 4th early on, then every 16th; while off,
 * doubled by each probe that left it off (to PROBE_EVERY_MAX), so that a
 * source whose guesses fail costs ever less. */
static long probe_interval(const df_spec *sp, int best) {
    if (sp->compared < EARLY_COMPARED) return PROBE_EVERY_EARLY;
    if (best > 0) return PROBE_EVERY;
    const long every = (long)PROBE_EVERY << sp->off_probes;
    return every < PROBE_EVERY_MAX ? every : PROBE_EVERY_MAX;
}

/* An MTP block whose guesses have failed (MTP_STOP_*): stop it, since it
 * costs a block's pass over every batch even while speculation is off; the
 * session is then off for good (the report says why). 1 if stopped. */
static int mtp_hopeless(df_spec *sp) {
    if (!sp->mtp || sp->compared < MTP_STOP_COMPARED || accept_rate(sp) >= MTP_STOP_ACCEPT) return 0;
    df_mtp_stop(sp->s);
    snprintf(sp->off_why, sizeof sp->off_why,
             "the MTP block's guesses were kept %ld of %ld times: it is stopped for the rest of the session (it costs a "
             "block's pass over every batch)", sp->accepted, sp->compared);
    return 1;
}

/* An MTP block that costs more than its guesses gain: the target alone (its
 * passes at k = 0, whose upkeep waited: measured, two at least) is faster
 * than speculation at the best k, by MTP_STOP_GAIN, since the stop is for
 * good. Under a memory budget where consecutive tokens route apart, every
 * guess adds its experts' reads and the block adds its own, so no k pays
 * (bench/RESULTS.md 2026-12-06). 1 if stopped; 0 with *measure set: measure
 * the target alone first. */
static int mtp_costs_more(df_spec *sp, int best, double best_tps, int *measure) {
    *measure = 0;
    if (!sp->mtp || sp->compared < EARLY_COMPARED) return 0;
    if (sp->kn[0] < 2) return *measure = 1, 0;
    const double alone = sp->kt[0] > 0 ? sp->kn[0] / sp->kt[0] : 0;
    if (alone < MTP_STOP_GAIN * best_tps) return 0;
    df_mtp_stop(sp->s);
    snprintf(sp->off_why, sizeof sp->off_why,
             "the MTP block's guesses (kept %ld of %ld) gain less than it costs: the target alone ran %.2f tokens/s, "
             "speculation at k=%d is predicted %.2f; the block is stopped for the rest of the session",
             sp->accepted, sp->compared, alone, best, best_tps);
    return 1;
}

/* k for the next pass (before capping at what the source found). */
static int choose_k(df_spec *sp) {
    if (sp->off_why[0]) return 0;
    if (sp->p.k_fixed >= 0) {
        snprintf(sp->why, sizeof sp->why, "k fixed at %d", sp->p.k_fixed);
        return sp->p.k_fixed;
    }
    if (sp->passes < WARMUP) return warmup_k(sp); /* not k_max: it may be the costliest mistake */
    if (mtp_hopeless(sp)) return 0; /* the acceptance decides, not the timings (noise can favour k > 0 at 0%) */
    double a, b;
    cost_line(sp, &a, &b);
    int best = 0;
    double best_tps = predict(sp, 0, a, b);
    for (int k = 1; k <= sp->p.k_max; k++) {
        const double t = predict(sp, k, a, b);
        if (t > best_tps * 1.0001) best = k, best_tps = t;
    }
    /* a marginal gain rests on the line's intercept: measure off itself */
    if (best > 0 && sp->kn[0] < 2 && best_tps < MEASURE_OFF * predict(sp, 0, a, b)) return 0;
    int measure;
    if (mtp_costs_more(sp, best, best_tps, &measure) || measure) return 0;
    const double td = sp->draft_n > 0 ? sp->draft_t / sp->draft_n : 0;
    const double mib = sp->n_pass > 0 ? sp->sb / sp->n_pass / (1 << 20) : 0;
    snprintf(sp->why, sizeof sp->why,
             "acceptance %.2f; a pass costs %.4f s + %.4f s per guess%s (%.2f MiB read per pass); "
             "predicted %.2f tokens/s at k=%d vs %.2f off",
             accept_rate(sp), a, b + td, sp->draft ? " incl. draft" : sp->mtp ? " incl. MTP" : "", mib, best_tps, best,
             predict(sp, 0, a, b));
    sp->k_now = best;
    if (best > 0) sp->off_probes = 0;
    if (++sp->since_probe < probe_interval(sp, best)) return best;
    sp->since_probe = 0;
    if (best == 0) {
        if (sp->compared >= EARLY_COMPARED && sp->off_probes < 30) sp->off_probes++;
        return PROBE_K < sp->p.k_max ? PROBE_K : sp->p.k_max;
    }
    /* a neighbour of the choice, alternately above and below (within 1..k_max) */
    const int up = (sp->probes++ % 2 == 0 && best < sp->p.k_max) || best == 1;
    return up ? (best < sp->p.k_max ? best + 1 : best) : best - 1;
}

static void record(df_spec *sp, int k, double secs, uint64_t bytes) {
    sp->n_pass += 1;
    sp->sk += k;
    sp->st += secs;
    sp->skk += (double)k * k;
    sp->skt += k * secs;
    sp->sb += (double)bytes;
    sp->skb += (double)k * (double)bytes;
    sp->kt[k] += secs;
    sp->kn[k] += 1;
    sp->passes++;
}

/* ---- a step ---- */

int df_spec_step(df_spec *sp, df_sampler *smp, int32_t pending, int32_t *out, int max_out, int *n_out, char *err,
                 size_t errlen) {
    *n_out = 0;
    if (max_out < 1 || !out || !smp) return df_seterr(err, errlen, "df_spec_step: bad arguments"), DF_E_INPUT;
    df_session *s = sp->s;
    const int pos0 = df_session_pos(s);
    if (pos0 != sp->n_hist)
        return df_seterr(err, errlen, "df_spec_step: the session is at %d but %d tokens were seen", pos0, sp->n_hist),
               DF_E_INPUT;
    if (sp->n_hist >= sp->cap) return df_seterr(err, errlen, "context full"), DF_E_CTX_FULL;
    sp->hist[sp->n_hist++] = pending;
    int k = choose_k(sp);
    if (k > max_out - 1) k = max_out - 1;
    if (k > df_session_n_ctx(s) - pos0 - 1) k = df_session_n_ctx(s) - pos0 - 1;
    int32_t batch[65];
    batch[0] = pending;
    if (sp->mtp && k > 0) { /* the block's upkeep that waited while off (mtp.c): the cost of those passes */
        const double f0 = df_time();
        if (df_mtp_flush(s, err, errlen) != DF_OK) {
            sp->n_hist--;
            return DF_E_IO;
        }
        sp->flush_t += df_time() - f0;
    }
    if (sp->mtp) df_mtp_defer(s, k == 0); /* off: the target's pass alone */
    if (k > 0) {
        k = sp->draft ? guess_draft(sp, k, batch + 1, err, errlen)
            : sp->mtp ? guess_mtp(sp, pending, k, batch + 1, err, errlen)
                      : guess_lookup(sp, k, batch + 1);
        if (k < 0) {
            sp->n_hist--;
            return DF_E_IO;
        }
    }
    df_io_stats io0, io1;
    df_model_io_stats(s->m, &io0);
    const double t0 = df_time();
    float *lg = df_session_logits(s);
    const int nv = df_n_vocab(s->m);
    /* recurrent layers: a pass with guesses can be rolled back to any of its rows */
    int rc = k > 0 && df_rec_mark(s, err, errlen) != 0 ? DF_E_INPUT : DF_OK;
    if (rc == DF_OK) rc = df_decode(s, batch, k + 1, lg, 1, err, errlen);
    if (rc != DF_OK) {
        sp->n_hist--;
        return rc;
    }
    double secs = df_time() - t0;
    int n = 0, i = 0;
    for (;; i++) {
        const int32_t t = df_sampler_sample(smp, lg + (size_t)i * nv);
        df_sampler_accept(smp, t);
        out[n++] = t;
        if (i == k || t != batch[i + 1]) break;
        sp->hist[sp->n_hist++] = t; /* a guess kept: decoded, so part of the history */
    }
    if (k > 0) {
        sp->guessed += k;
        sp->accepted += i;
        sp->compared += i + (i < k);
    }
    sp->emitted += n;
    /* the session keeps the pending token and the kept guesses; the new pending token is out[n-1] */
    const double t1 = df_time();
    rc = df_session_truncate(s, sp->n_hist, err, errlen);
    if (rc == 0 && sp->draft && df_session_pos(sp->draft) > sp->n_hist)
        rc = df_session_truncate(sp->draft, sp->n_hist, err, errlen);
    if (rc != 0) return DF_E_INPUT;
    secs += df_time() - t1; /* the pass's cost: the mark, the decode and the rollback (not the sampling) */
    df_model_io_stats(s->m, &io1);
    record(sp, k, secs, io1.bytes_read - io0.bytes_read);
    *n_out = n;
    return DF_OK;
}

void df_spec_get_stats(const df_spec *sp, df_spec_stats *st) {
    memset(st, 0, sizeof *st);
    st->k = sp->off_why[0] ? 0 : (sp->p.k_fixed >= 0 ? sp->p.k_fixed : sp->k_now);
    st->passes = (int)sp->passes;
    st->guessed = (int)sp->guessed;
    st->accepted = (int)sp->accepted;
    st->emitted = (int)sp->emitted;
    st->accept_rate = accept_rate(sp);
    double a, b;
    cost_line(sp, &a, &b);
    st->t_pass = a;
    st->t_per_guess = b;
    st->t_draft = sp->draft_n > 0 ? sp->draft_t / sp->draft_n : 0;
    st->bytes_per_pass = sp->n_pass > 0 ? sp->sb / sp->n_pass : 0;
    snprintf(st->why, sizeof st->why, "%s", sp->off_why[0] ? sp->off_why : sp->why);
}
