/*
 * decode.c - running tokens through a session: df_decode checks its input,
 * cuts it into batches of at most n_batch tokens, runs the model's
 * architecture's forward pass on each, and refuses to hand out garbage
 * (a model file that changed, a non-finite logit). Above the architectures
 * (it calls them through the df_arch table entry the loader chose).
 */
#include <math.h>
#include <stdio.h>

#include "session.h"
#include "util.h"

int df_decode(df_session *s, const int32_t *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    const int nv = s->m->hp.n_vocab;
    if (n <= 0) return df_seterr(err, errlen, "no tokens to decode");
    if (s->rec_broken)
        return df_seterr(err, errlen, "an earlier decode failed part way through the recurrent layers; reset the session "
                         "(df_session_truncate to 0) first");
    if (n > s->n_ctx - s->pos)
        return df_seterr(err, errlen, "context full: %d tokens at position %d exceed the context of %d", n, s->pos,
                         s->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= nv)
            return df_seterr(err, errlen, "token id %d is outside the vocabulary (0..%d)", tokens[i], nv - 1);
    for (int done = 0; done < n;) {
        int chunk = n - done < s->n_batch ? n - done : s->n_batch;
        int last = done + chunk == n;
        float *dst = NULL;
        if (logits && all_logits) dst = logits + (int64_t)done * nv;
        else if (logits && last) dst = logits;
        const int pos0 = s->pos;
        if (s->m->arch->forward(s, tokens + done, chunk, dst, all_logits, err, errlen) != 0) {
            s->pos = pos0; /* the failed batch is not part of the sequence (its KV rows past pos are ignored) */
            s->rec_broken = s->m->hp.n_layer_recurrent > 0; /* but a recurrent state has changed */
            return -1;
        }
        ws_tick(s->m->ws);
        if (s->trace && ferror(s->trace)) return df_seterr(err, errlen, "writing the expert trace failed");
        done += chunk;
    }
    /* never hand out garbage: a model file changed under us, or weights
     * that make NaN or Inf, end the run with an error */
    if (ws_check_files(s->m->ws, err, errlen) != 0) return -1;
    const int64_t rows = logits ? (all_logits ? n : 1) : 0;
    for (int64_t i = 0; i < rows * nv; i++)
        if (!isfinite(logits[i]))
            return df_seterr(err, errlen, "%s: the model computed a non-finite logit (%s) at position %d: its weights "
                             "are damaged (NaN or Inf) or the file changed", s->m->path,
                             isnan(logits[i]) ? "NaN" : "Inf", s->pos - n + (int)(all_logits ? i / nv : n - 1));
    return 0;
}
