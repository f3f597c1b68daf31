/*
 * mtp.h - a model's NextN / MTP block (mtp.c): one more decoder block that
 * guesses the token after next from the target's last hidden state.
 * Below decode.c (which runs it after every batch and for guesses), above
 * layer.c.
 */
#ifndef DF_MTP_H
#define DF_MTP_H

#include "session.h"

/* The MTP block over n rows: row t is token tokens[t] at position pos0 + t
 * paired with h's row t (n_embd floats: the target's hidden state of
 * position pos0 + t - 1 after the final norm, zeros for none). Writes the
 * block's KV (or latent) rows at those positions in the session's layer
 * n_layer; s->pos is left as it was. h_out (n rows, or NULL): the block's
 * output after shared_head_norm (the hidden row a chained guess reads);
 * logits (n_vocab floats, or NULL): the last row's. h and h_out must not be
 * s->x, s->xb or s->mtp_in. */
int df_mtp_run(df_session *s, const int32_t *tokens, const float *h, int n, int pos0, float *h_out, float *logits,
               char *err, size_t errlen);

/* The target's hidden row of position pos (after the final norm) if the
 * session still has it (its last batch, or the row before it), else NULL
 * (a zero row stands in: position -1, a restored snapshot). */
const float *df_mtp_hidden_row(const df_session *s, int pos);

/* After the target's batch of n rows at pos0.. (s->x: their last residual,
 * s->pos past them): keep their hidden rows (into hidden too, unless NULL)
 * and, with an MTP block, run it over the batch so that its cache follows
 * the sequence (llama.cpp's process(): token p paired with hidden p - 1). */
int df_mtp_after_batch(df_session *s, const int32_t *tokens, int n, int pos0, float *hidden, char *err,
                       size_t errlen);

/* Stop running the MTP block after s's batches (speculation gave up on its
 * guesses, spec.c): its cache no longer follows the sequence, so it must not
 * guess again in this session; hidden rows are still handed out. */
void df_mtp_stop(df_session *s);

/* Whether the block's upkeep after s's batches waits (on) or runs after
 * each (off, the default): mtp.c's "Deferred upkeep". */
void df_mtp_defer(df_session *s, int on);

/* Run the block over the rows whose upkeep waits, if any (the caller holds
 * the model's decode lock and s's scratch); df_mtp_flush takes them. */
int df_mtp_flush_locked(df_session *s, char *err, size_t errlen);
int df_mtp_flush(df_session *s, char *err, size_t errlen);

/* k greedy guesses of the MTP block after the sequence s holds, given its
 * next token pending (not yet decoded): row j is at position s->pos + j,
 * its token pending or guess j - 1, its hidden row the target's of
 * position s->pos - 1 or the previous row's output. The block's cache
 * rows past the sequence are the guesses' (the next batch overwrites
 * them). Takes the model's decode lock (decode.c). DF_OK or a df_status. */
int df_mtp_guess(df_session *s, int32_t pending, int k, int32_t *g, char *err, size_t errlen);

/* The final RMSNorm of s->x's n rows into out (n, n_embd). */
int df_hidden_rows(df_session *s, int n, float *out, char *err, size_t errlen);

#endif
