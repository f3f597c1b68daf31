/*
 * decode.c - running tokens through sessions: df_decode and df_decode_batch
 * check their input, take the model's decode lock, cut each session's
 * tokens into batches of at most n_batch, run the architecture's forward
 * pass on each, and refuse to hand out garbage (a model file that changed,
 * a non-finite logit). Above the architectures (it calls them through the
 * df_arch entry the loader chose).
 *
 * DESIGN
 * Threading: a model has one thread pool and one weight store whose caches
 * and counters are not safe to use from two decodes at once, so a model
 * runs one decode at a time: df_model.decode_mu is held for the whole of a
 * df_decode or df_decode_batch, and a second caller waits (blocking). A
 * decode started from inside an abort callback of the same model (on the
 * thread that holds the lock) would wait for itself: it fails with
 * DF_E_BUSY instead. Sessions carry no thread affinity.
 *
 * df_decode_batch: consecutive sessions whose tokens each fit their batch
 * and together fit the first one's (n_batch), and that neither trace
 * experts nor have an abort callback, run as the rows of one forward pass
 * (df_arch.forward with the rows' sessions): each session's tokens are a
 * run of rows at its own positions (a generation step's one token, or a
 * prompt prefilled beside the others' steps). Every product and expert
 * runs once over all rows (under a budget, a MoE layer asks the store for
 * the union of the rows' experts once); attention and recurrent states run
 * run by run against the run's own session's memory, as df_decode would
 * run that batch alone; df_output computes only the logits asked for (each
 * session's last row, s->out_rows). Other sessions run alone, in order,
 * under the same hold of the lock. Either way each session computes
 * exactly what df_decode computes for it alone: the kernels compute each
 * row from its own data in a fixed order.
 *
 * Hidden states and the MTP block: df_decode_hidden hands out each row's
 * last hidden state after the final norm (mtp.c computes it from the
 * forward pass's residual, only when asked). A model loaded with its MTP
 * block (df_model_params.mtp) runs the block over every batch after the
 * forward pass, so that its cache follows the sequence (mtp.c); such
 * sessions never share a pass. df_mtp_guess chains the block's greedy
 * guesses under the decode lock (spec.c's DF_SPEC_MTP).
 *
 * Failure and cancellation: a batch whose forward pass fails or is
 * cancelled is not part of the sequence (pos goes back to where the batch
 * began); batches before it stay. Cancellation is checked before every
 * batch and, for models without recurrent layers, between layers; a
 * recurrent state changes layer by layer and cannot be rolled back, so such
 * models stop only between batches and a cancelled session stays usable.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mtp.h"
#include "pipe.h"
#include "session.h"
#include "util.h"

static _Thread_local const df_model *decoding; /* the model whose decode lock this thread holds */

/* Take m's decode lock: DF_OK, or DF_E_BUSY if this thread already holds it. */
static int lock_model(df_model *m, char *err, size_t errlen) {
    if (decoding == m) {
        df_seterr(err, errlen, "this thread is already decoding with this model (a decode from an abort callback?)");
        return DF_E_BUSY;
    }
    pthread_mutex_lock(&m->decode_mu);
    decoding = m;
    return DF_OK;
}

static void unlock_model(df_model *m) {
    decoding = NULL;
    pthread_mutex_unlock(&m->decode_mu);
}

/* Check n tokens for session s before anything runs. */
static int check_input(const df_session *s, const int32_t *tokens, int n, char *err, size_t errlen) {
    const int nv = s->m->hp.n_vocab;
    if (n <= 0 || !tokens) return df_seterr(err, errlen, "no tokens to decode"), DF_E_INPUT;
    if (s->rec_broken)
        return df_seterr(err, errlen, "an earlier decode failed part way through the recurrent layers; reset the session "
                         "(df_session_truncate to 0) first"), DF_E_INPUT;
    if (n > s->n_ctx - s->pos)
        return df_seterr(err, errlen, "context full: %d tokens at position %d exceed the context of %d", n, s->pos,
                         s->n_ctx), DF_E_CTX_FULL;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= nv)
            return df_seterr(err, errlen, "token id %d is outside the vocabulary (0..%d)", tokens[i], nv - 1), DF_E_INPUT;
    return DF_OK;
}

/* df_decode's work, with the model's lock held and the input checked. */
static int decode_locked(df_session *s, const int32_t *tokens, int n, float *logits, int all_logits, float *hidden,
                         char *err, size_t errlen) {
    const int nv = s->m->hp.n_vocab;
    df_session_bind_scratch(s); /* the model's scratch is this decode's */
    for (int done = 0; done < n;) {
        int chunk = n - done < s->n_batch ? n - done : s->n_batch;
        int last = done + chunk == n;
        float *dst = NULL;
        if (logits && all_logits) dst = logits + (int64_t)done * nv;
        else if (logits && last) dst = logits;
        const int pos0 = s->pos;
        s->cancelled = 0;
        if (s->abort_cb && s->abort_cb(s->abort_ctx))
            return df_seterr(err, errlen, "cancelled at position %d", s->pos), DF_E_CANCELLED;
        if (df_pipe_forward(s, NULL, tokens + done, chunk, dst, all_logits, err, errlen) != 0) {
            s->pos = pos0; /* the failed batch is not part of the sequence (its KV rows past pos are ignored) */
            if (s->cancelled) return DF_E_CANCELLED; /* between layers: only models without recurrent state */
            s->rec_broken = s->m->hp.n_layer_recurrent > 0; /* a recurrent state has changed */
            return DF_E_IO;
        }
        /* the rows' hidden states, and the MTP block's cache following the sequence (mtp.c) */
        if ((hidden || s->m->hp.n_layer_mtp) &&
            df_mtp_after_batch(s, tokens + done, chunk, pos0, hidden ? hidden + (int64_t)done * s->m->hp.n_embd : NULL,
                               err, errlen) != 0) {
            s->pos = pos0;
            return DF_E_IO;
        }
        ws_tick(s->m->ws);
        s->m->n_passes++;
        s->m->n_pass_rows += (uint64_t)chunk;
        if (s->trace && ferror(s->trace)) return df_seterr(err, errlen, "writing the expert trace failed"), DF_E_IO;
        if (s->ties && ferror(s->ties)) return df_seterr(err, errlen, "writing the near-tie trace failed"), DF_E_IO;
        done += chunk;
    }
    /* never hand out garbage: a model file changed under us, or weights
     * that make NaN or Inf, end the run with an error */
    if (ws_check_files(s->m->ws, err, errlen) != 0) return DF_E_IO;
    const int64_t rows = logits ? (all_logits ? n : 1) : 0;
    for (int64_t i = 0; i < rows * nv; i++)
        if (!isfinite(logits[i]))
            return df_seterr(err, errlen, "%s: the model computed a non-finite logit (%s) at position %d: its weights "
                             "are damaged (NaN or Inf) or the file changed", s->m->path,
                             isnan(logits[i]) ? "NaN" : "Inf", s->pos - n + (int)(all_logits ? i / nv : n - 1)),
                   DF_E_INPUT;
    return DF_OK;
}

int df_decode_hidden(df_session *s, const int32_t *tokens, int n, float *logits, int all_logits, float *hidden,
                     char *err, size_t errlen) {
    if (hidden && df_pipe_refuse(s, "hidden states", err, errlen)) return DF_E_UNSUPPORTED;
    if (hidden && s->m->hp.hidden_not_rows)
        return df_seterr(err, errlen, "%s: %s's last hidden state is not one row per token", s->m->path,
                         s->m->arch_name), DF_E_UNSUPPORTED;
    int rc = check_input(s, tokens, n, err, errlen);
    if (rc != DF_OK) return rc;
    if ((rc = lock_model(s->m, err, errlen)) != DF_OK) return rc;
    rc = decode_locked(s, tokens, n, logits, all_logits, hidden, err, errlen);
    unlock_model(s->m);
    return rc;
}

int df_decode(df_session *s, const int32_t *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    return df_decode_hidden(s, tokens, n, logits, all_logits, NULL, err, errlen);
}

int df_mtp_guess(df_session *s, int32_t pending, int k, int32_t *g, char *err, size_t errlen) {
    const int64_t E = s->m->hp.n_embd;
    if (k < 1 || k > s->n_batch || s->pos + k > s->n_ctx || pending < 0 || pending >= s->m->hp.n_vocab)
        return df_seterr(err, errlen, "df_mtp_guess: %d guesses at position %d do not fit", k, s->pos), DF_E_INPUT;
    if (s->mtp_stopped) return df_seterr(err, errlen, "df_mtp_guess: the session's MTP block was stopped"), DF_E_INPUT;
    int rc = lock_model(s->m, err, errlen);
    if (rc != DF_OK) return rc;
    df_session_bind_scratch(s);
    if (df_mtp_flush_locked(s, err, errlen) != 0) rc = DF_E_IO; /* the rows whose upkeep waited, first */
    float *row = s->mtp_out; /* the hidden row each guess reads and the next one gets */
    const float *h = df_mtp_hidden_row(s, s->pos - 1);
    if (h) memcpy(row, h, sizeof(float) * (size_t)E);
    else memset(row, 0, sizeof(float) * (size_t)E);
    int32_t tok = pending;
    for (int j = 0; j < k && rc == DF_OK; j++) {
        if (df_mtp_run(s, &tok, row, 1, s->pos + j, row, s->logits, err, errlen) != 0) rc = DF_E_IO;
        else g[j] = tok = df_argmax(s->logits, s->m->hp.n_vocab);
    }
    ws_tick(s->m->ws);
    unlock_model(s->m);
    return rc;
}

int df_mtp_flush(df_session *s, char *err, size_t errlen) {
    if (s->mtp_wait_n <= 0) return DF_OK;
    int rc = lock_model(s->m, err, errlen);
    if (rc != DF_OK) return rc;
    df_session_bind_scratch(s);
    if (df_mtp_flush_locked(s, err, errlen) != 0) rc = DF_E_IO;
    unlock_model(s->m);
    return rc;
}

/* Can session s's n tokens be a run of a shared forward pass? A prompt
 * longer than its batch, an expert or near-tie trace (written per df_decode)
 * or an abort callback (checked between batches and layers) run alone. */
static int poolable(const df_session *s, int n) {
    return n <= s->n_batch && !s->trace && !s->ties && !s->abort_cb && !s->m->hp.n_layer_mtp; /* the MTP block runs per session */
}

/* Sessions ss[0..n) (poolable, n >= 2, their tokens together at most
 * ss[0]->n_batch) as the runs of one forward pass in ss[0]'s scratch; base:
 * ss[0]'s index in the caller's list (for messages). logits[i] (or NULL)
 * gets the logits of session i's last token: df_output computes only those
 * rows (s->out_rows). */
static int decode_pass(df_session *const *ss, int n, const int32_t *const *tokens, const int *n_tokens,
                       float *const *logits, int base, char *err, size_t errlen) {
    df_session *s = ss[0];
    df_model *m = s->m;
    const int nv = m->hp.n_vocab;
    int rows = 0, n_out = 0;
    for (int i = 0; i < n; i++) df_session_bind_scratch(ss[i]); /* one scratch, the model's */
    for (int i = 0; i < n; i++) rows += n_tokens[i];
    int32_t *toks = malloc(sizeof *toks * (size_t)rows);
    df_session **own = malloc(sizeof *own * (size_t)rows);
    int *out_rows = malloc(sizeof *out_rows * (size_t)n), *out_of = malloc(sizeof *out_of * (size_t)n);
    if (!toks || !own || !out_rows || !out_of) {
        free(toks), free(own), free(out_rows), free(out_of);
        return df_seterr(err, errlen, "out of memory for a batched pass of %d rows", rows), DF_E_NOMEM;
    }
    for (int i = 0, r = 0; i < n; r += n_tokens[i++]) {
        memcpy(toks + r, tokens[i], sizeof *toks * (size_t)n_tokens[i]);
        for (int k = 0; k < n_tokens[i]; k++) own[r + k] = ss[i];
        if (logits && logits[i]) out_of[n_out] = i, out_rows[n_out++] = r + n_tokens[i] - 1;
    }
    s->out_rows = out_rows;
    s->n_out_rows = n_out;
    float *dst = n_out ? s->logits : NULL;
    int rc = df_pipe_forward(s, own, toks, rows, dst, 1, err, errlen);
    s->out_rows = NULL;
    free(toks), free(own), free(out_rows);
    if (rc != 0) {
        for (int i = 0; i < n; i++) ss[i]->rec_broken = m->hp.n_layer_recurrent > 0; /* states have changed */
        free(out_of);
        return DF_E_IO;
    }
    for (int j = 0; j < n_out; j++) memcpy(logits[out_of[j]], s->logits + (int64_t)j * nv, sizeof(float) * (size_t)nv);
    for (int i = 0; i < n; i++) ss[i]->pos += n_tokens[i];
    ws_tick(m->ws);
    m->n_passes++;
    m->n_pass_rows += (uint64_t)rows;
    rc = ws_check_files(m->ws, err, errlen) != 0 ? DF_E_IO : DF_OK;
    for (int j = 0; j < n_out && rc == DF_OK; j++)
        for (int64_t k = 0; k < nv; k++)
            if (!isfinite(logits[out_of[j]][k])) {
                df_seterr(err, errlen, "session %d: %s: the model computed a non-finite logit (%s): its weights are "
                          "damaged (NaN or Inf) or the file changed", base + out_of[j], m->path,
                          isnan(logits[out_of[j]][k]) ? "NaN" : "Inf");
                rc = DF_E_INPUT;
                break;
            }
    free(out_of);
    return rc;
}

int df_decode_batch(df_session *const *sessions, int n_sessions, const int32_t *const *tokens, const int *n_tokens,
                    float *const *logits, char *err, size_t errlen) {
    if (n_sessions < 1 || !sessions || !tokens || !n_tokens)
        return df_seterr(err, errlen, "df_decode_batch: no sessions"), DF_E_INPUT;
    for (int i = 0; i < n_sessions; i++) {
        if (!sessions[i]) return df_seterr(err, errlen, "df_decode_batch: session %d is NULL", i), DF_E_INPUT;
        if (sessions[i]->m != sessions[0]->m)
            return df_seterr(err, errlen, "df_decode_batch: session %d belongs to another model", i), DF_E_INPUT;
        for (int j = 0; j < i; j++)
            if (sessions[j] == sessions[i])
                return df_seterr(err, errlen, "df_decode_batch: sessions %d and %d are the same", j, i), DF_E_INPUT;
        char inner[400] = "";
        const int rc = check_input(sessions[i], tokens[i], n_tokens[i], inner, sizeof inner);
        if (rc != DF_OK) return df_seterr(err, errlen, "session %d: %s", i, inner), rc;
    }
    df_model *m = sessions[0]->m;
    int rc = lock_model(m, err, errlen);
    if (rc != DF_OK) return rc;
    /* consecutive poolable sessions whose tokens fit the first one's batch
     * share a pass; the others (and a pass of one) run as df_decode would */
    for (int i = 0, j; i < n_sessions && rc == DF_OK; i = j) {
        int rows = n_tokens[i];
        j = i + 1;
        if (poolable(sessions[i], n_tokens[i]))
            while (j < n_sessions && poolable(sessions[j], n_tokens[j]) && rows + n_tokens[j] <= sessions[i]->n_batch)
                rows += n_tokens[j++];
        if (j - i > 1) {
            rc = decode_pass(sessions + i, j - i, tokens + i, n_tokens + i, logits ? logits + i : NULL, i, err, errlen);
            continue;
        }
        char inner[400] = "";
        rc = decode_locked(sessions[i], tokens[i], n_tokens[i], logits ? logits[i] : NULL, 0, NULL, inner, sizeof inner);
        if (rc != DF_OK) df_seterr(err, errlen, "session %d: %s", i, inner);
    }
    unlock_model(m);
    return rc;
}
