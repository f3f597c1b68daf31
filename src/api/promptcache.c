/*
 * promptcache.c - prompt caches: a session's state after a prompt saved to
 * a file, and the longest prefix of it that a new prompt shares restored
 * (df_prompt_cache_save / df_prompt_cache_load, include/deltafin.h; the
 * CLI's --prompt-cache).
 *
 * DESIGN
 * A prompt cache is a session snapshot (snapshot.c: crash-safe, checksummed,
 * bound to the model's identity) whose user bytes are a tag and the token
 * ids the session holds, one per position. Loading checks the whole file
 * first (snapshot.c refuses another model, another session shape or a
 * damaged file, leaving the session as it was), then keeps the longest
 * common prefix of the cached tokens and the new prompt by truncating the
 * session there. A model with recurrent layers cannot be rewound: there the
 * cache is used only when all of it is a prefix of the prompt, and otherwise
 * the session is reset (nothing reused). A caller that needs the logits of
 * the prompt's last token saves the cache one token short of the prompt and
 * asks for at most n - 1 tokens back, so that token is always decoded.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"
#include "util.h"

#define PC_TAG "DFPROMPT"
#define PC_TAG_LEN 8

int df_prompt_cache_save(df_session *s, const char *path, const int32_t *tokens, char *err, size_t errlen) {
    const int pos = df_session_pos(s);
    if (pos > 0 && !tokens) return df_seterr(err, errlen, "df_prompt_cache_save: no tokens");
    const size_t len = PC_TAG_LEN + (size_t)pos * sizeof(int32_t);
    unsigned char *user = malloc(len);
    if (!user) return df_seterr(err, errlen, "out of memory");
    memcpy(user, PC_TAG, PC_TAG_LEN);
    if (pos > 0) memcpy(user + PC_TAG_LEN, tokens, (size_t)pos * sizeof(int32_t));
    const int rc = df_session_save(s, path, user, len, err, errlen);
    free(user);
    return rc;
}

/* Tokens shared at the start of a[0..na) and b[0..nb). */
static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

int df_prompt_cache_load(df_session *s, const char *path, const int32_t *tokens, int n, int *n_reused, char *err,
                         size_t errlen) {
    if (n_reused) *n_reused = 0;
    if (!path || !*path || n < 0 || (n > 0 && !tokens) || !n_reused)
        return df_seterr(err, errlen, "df_prompt_cache_load: bad arguments");
    if (df_session_truncate(s, 0, err, errlen) != 0) return -1;
    const size_t cap = PC_TAG_LEN + (size_t)df_session_n_ctx(s) * sizeof(int32_t);
    unsigned char *user = malloc(cap);
    if (!user) return df_seterr(err, errlen, "out of memory");
    size_t ulen = 0;
    int rc = df_session_load(s, path, user, cap, &ulen, err, errlen);
    if (rc == 0) {
        const int pos = df_session_pos(s);
        if (ulen != PC_TAG_LEN + (size_t)pos * sizeof(int32_t) || memcmp(user, PC_TAG, PC_TAG_LEN) != 0) {
            df_session_truncate(s, 0, NULL, 0);
            rc = df_seterr(err, errlen, "%s: a session snapshot, not a prompt cache", path);
        } else {
            int32_t *cached = malloc((size_t)(pos > 0 ? pos : 1) * sizeof(int32_t));
            if (!cached) {
                df_session_truncate(s, 0, NULL, 0);
                rc = df_seterr(err, errlen, "out of memory");
            } else {
                memcpy(cached, user + PC_TAG_LEN, (size_t)pos * sizeof(int32_t));
                const int keep = common_prefix(cached, pos, tokens, n);
                /* a recurrent or sliding-window state that cannot go back that far: start afresh */
                if (df_session_truncate(s, keep, NULL, 0) != 0) df_session_truncate(s, 0, NULL, 0);
                *n_reused = df_session_pos(s);
                free(cached);
            }
        }
    }
    free(user);
    return rc;
}

int df_prompt_cache_peek(const df_model *m, const char *path, int32_t *tokens, int cap, int *n, char *err,
                         size_t errlen) {
    if (!m || !path || !tokens || cap < 0 || !n) return df_seterr(err, errlen, "df_prompt_cache_peek: bad arguments");
    *n = 0;
    const size_t ucap = PC_TAG_LEN + (size_t)cap * sizeof(int32_t);
    unsigned char *user = malloc(ucap);
    if (!user) return df_seterr(err, errlen, "out of memory");
    size_t ulen = 0;
    int rc = df_snapshot_peek(m, path, user, ucap, &ulen, err, errlen);
    if (rc == 0 && (ulen < PC_TAG_LEN || (ulen - PC_TAG_LEN) % sizeof(int32_t) || memcmp(user, PC_TAG, PC_TAG_LEN)))
        rc = df_seterr(err, errlen, "%s: a session snapshot, not a prompt cache", path);
    if (rc == 0) {
        *n = (int)((ulen - PC_TAG_LEN) / sizeof(int32_t));
        memcpy(tokens, user + PC_TAG_LEN, (size_t)*n * sizeof(int32_t));
    }
    free(user);
    return rc;
}
