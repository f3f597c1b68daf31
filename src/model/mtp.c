/*
 * mtp.c - the NextN / MTP block some files carry (nextn_predict_layers): one more
 * decoder block after the model's layers that predicts the token after
 * next, for speculative decoding's DF_SPEC_MTP guesses (spec.c).
 *
 * DESIGN
 * The semantics are llama.cpp's (graph_mtp in the models of the families
 * whose hparams set mtp_arch; common/speculative.cpp, draft-mtp). A row pairs a token x_p at
 * position p with the target's hidden state h_{p-1}: the last layer's
 * output after the final norm (llama.cpp's h_nextn; zeros before position
 * 0). The block computes
 *     x = eh_proj [enorm(embed(x_p)) | hnorm(h_{p-1})]
 * (embed: the block's own embed_tokens, else token_embd), runs one decoder
 * block on x at position p (the architecture's own: df_model.mtp_block,
 * with its KV or latent cache as the session's layer n_layer), then
 *     h' = shared_head_norm(x)   (else output_norm)
 *     logits = head h'           (shared_head_head, else output)
 * which guess x_{p+1}; a chained guess pairs that token with h' at p + 1.
 *
 * The block's cache follows the sequence: after every batch of the target
 * (decode.c) its rows run through the block with the hidden rows of the
 * positions before them (the last row of the previous batch is kept for
 * the first), as llama.cpp's process() hook does; guesses then write rows
 * past the sequence, which the verifying batch overwrites with the true
 * pairs. The hidden rows of the last batch stay in the session (mtp_h) so
 * that a rollback into that batch still finds h of its new last position.
 *
 * Deferred upkeep (df_mtp_defer). While speculation is off the block's pass
 * after every batch is pure cost (under a memory budget its experts' reads
 * too, and the cache slots they take), so it may wait: each batch's rows
 * (tokens, and the hidden row before each) join mtp_wait, and
 * df_mtp_flush_locked runs the block over all of them in one batch, before
 * the next guess, before a batch whose upkeep does not wait, before a
 * snapshot, or when the wait holds n_batch rows. The block's cache ends as
 * it would have (the same rows at the same positions, in position order), so
 * what off costs is the target's pass alone, which is what speculation
 * compares its guesses against (spec.c). A truncation drops the rows past
 * the sequence (session.c).
 */
#include <string.h>

#include "layer.h"
#include "mtp.h"
#include "quant.h"
#include "util.h"

/* Rows of embedding table t for n tokens into out (n, n_embd). */
static int embed_rows(df_session *s, ws_tensor *t, const int32_t *tokens, int n, float *out, char *err,
                      size_t errlen) {
    const uint8_t *data = ws_fetch(s->m->ws, t, err, errlen);
    if (!data) return -1;
    const quant_traits *q = quant_traits_get(t->type);
    for (int i = 0; i < n; i++)
        q->to_float(data + (size_t)tokens[i] * t->row_bytes, out + (int64_t)i * t->ne[0], t->ne[0]);
    ws_release(s->m->ws, t);
    return 0;
}

/* eh_proj's input: [enorm(embedding) | hnorm(h)] per row in s->mtp_in. */
static int mtp_input(df_session *s, const df_layer *L, const int32_t *tokens, const float *h, int n, char *err,
                     size_t errlen) {
    df_model *m = s->m;
    const int64_t E = m->hp.n_embd;
    if (embed_rows(s, L->nextn_embed ? L->nextn_embed : m->tok_embd, tokens, n, s->x, err, errlen) ||
        df_norm_rows(s, L->nextn_enorm, s->x, n, E, E, s->xb, err, errlen))
        return -1;
    for (int t = 0; t < n; t++) memcpy(s->mtp_in + t * 2 * E, s->xb + t * E, sizeof(float) * (size_t)E);
    if (df_norm_rows(s, L->nextn_hnorm, h, n, E, E, s->xb, err, errlen)) return -1;
    for (int t = 0; t < n; t++) memcpy(s->mtp_in + t * 2 * E + E, s->xb + t * E, sizeof(float) * (size_t)E);
    return 0;
}

int df_mtp_run(df_session *s, const int32_t *tokens, const float *h, int n, int pos0, float *h_out, float *logits,
               char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *hp = &m->hp;
    const int lm = hp->n_layer;
    const int64_t E = hp->n_embd;
    if (!hp->n_layer_mtp || !m->mtp_block) return df_seterr(err, errlen, "%s: no MTP block is loaded", m->path);
    if (n < 1 || n > s->n_batch || pos0 < 0 || pos0 + n > s->n_ctx)
        return df_seterr(err, errlen, "MTP rows %d..%d do not fit the session", pos0, pos0 + n - 1);
    df_layer *L = &m->layers[lm];
    if (mtp_input(s, L, tokens, h, n, err, errlen) ||
        df_matmul(s, L->nextn_eh_proj, s->mtp_in, n, s->x, E, err, errlen))
        return -1;
    for (int t = 0; t < n; t++) rope_cache(&s->rope, pos0 + t, s->rope_cache + (int64_t)t * hp->n_rot);
    const int pos = s->pos;
    s->pos = pos0; /* the block's attention stores and reads its cache at the rows' positions */
    const int rc = m->mtp_block(s, lm, n, err, errlen);
    s->pos = pos;
    if (rc != 0) return -1;
    if (!h_out && !logits) return 0;
    ws_tensor *norm = L->nextn_head_norm ? L->nextn_head_norm : m->output_norm;
    float *hn = h_out ? h_out : s->xb; /* the last row alone when only logits are asked for */
    const int first = h_out ? 0 : n - 1;
    if (df_norm_rows(s, norm, s->x + (int64_t)first * E, n - first, E, E, hn, err, errlen)) return -1;
    if (!logits) return 0;
    return df_matmul(s, L->nextn_head ? L->nextn_head : m->output, hn + (int64_t)(n - 1 - first) * E, 1, logits,
                     hp->n_vocab, err, errlen);
}

const float *df_mtp_hidden_row(const df_session *s, int pos) {
    if (pos < 0 || s->mtp_rows <= 0 || pos < s->mtp_base || pos >= s->mtp_base + s->mtp_rows) return NULL;
    return s->mtp_h + (int64_t)(pos - s->mtp_base) * s->m->hp.n_embd;
}

int df_hidden_rows(df_session *s, int n, float *out, char *err, size_t errlen) {
    const int64_t E = s->m->hp.n_embd;
    return df_norm_rows(s, s->m->output_norm, s->x, n, E, E, out, err, errlen);
}

void df_mtp_stop(df_session *s) {
    s->mtp_stopped = 1;
    s->mtp_rows = 0;
    s->mtp_wait_n = 0;
}

void df_mtp_defer(df_session *s, int on) { s->mtp_defer = on; }

int df_mtp_flush_locked(df_session *s, char *err, size_t errlen) {
    const int n = s->mtp_wait_n;
    if (n <= 0 || s->mtp_stopped) return 0;
    s->mtp_wait_n = 0;
    return df_mtp_run(s, s->mtp_wait_tok, s->mtp_wait_h, n, s->mtp_wait_pos0, NULL, NULL, err, errlen);
}

/* Batch rows pos0.. whose upkeep waits: their tokens and mtp_h's rows 0..n-1 (the hidden row before each). */
static int wait_rows(df_session *s, const int32_t *tokens, int n, int pos0, char *err, size_t errlen) {
    const int64_t E = s->m->hp.n_embd;
    if (s->mtp_wait_n && (pos0 != s->mtp_wait_pos0 + s->mtp_wait_n || s->mtp_wait_n + n > s->n_batch) &&
        df_mtp_flush_locked(s, err, errlen) != 0)
        return -1;
    if (!s->mtp_wait_n) s->mtp_wait_pos0 = pos0;
    memcpy(s->mtp_wait_tok + s->mtp_wait_n, tokens, sizeof(int32_t) * (size_t)n);
    memcpy(s->mtp_wait_h + (int64_t)s->mtp_wait_n * E, s->mtp_h, sizeof(float) * (size_t)(n * E));
    s->mtp_wait_n += n;
    return 0;
}

int df_mtp_after_batch(df_session *s, const int32_t *tokens, int n, int pos0, float *hidden, char *err,
                       size_t errlen) {
    const int64_t E = s->m->hp.n_embd;
    if (!s->m->hp.n_layer_mtp || s->mtp_stopped) return hidden ? df_hidden_rows(s, n, hidden, err, errlen) : 0;
    const float *prev = df_mtp_hidden_row(s, pos0 - 1);
    if (prev) memmove(s->mtp_h, prev, sizeof(float) * (size_t)E);
    else memset(s->mtp_h, 0, sizeof(float) * (size_t)E);
    s->mtp_rows = 0; /* until the new rows are in */
    if (df_hidden_rows(s, n, s->mtp_h + E, err, errlen)) return -1;
    s->mtp_base = pos0 - 1;
    s->mtp_rows = n + 1;
    if (hidden) memcpy(hidden, s->mtp_h + E, sizeof(float) * (size_t)(n * E));
    /* s->x is spent from here: the block runs in it */
    if (s->mtp_defer) return wait_rows(s, tokens, n, pos0, err, errlen);
    if (df_mtp_flush_locked(s, err, errlen) != 0) return -1; /* earlier rows first */
    return df_mtp_run(s, tokens, s->mtp_h, n, pos0, NULL, NULL, err, errlen);
}
