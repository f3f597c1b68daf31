/*
 * text.c - the text a model emits, as the server sends it.
 *
 * A model emits bytes, not characters. What goes into JSON is made valid
 * UTF-8 as a WHATWG decoder would read it (each ill-formed subsequence one
 * U+FFFD), and a stream holds back an unfinished character and any tail that
 * may be the start of a stop string or of a reasoning section's tag, so the
 * streamed pieces join to exactly the non-streamed text. Here: those checks,
 * the stop strings, and where a chat answer's reasoning and content lie.
 */
#include <stdlib.h>
#include <string.h>

#include "server.h"

/* ---- UTF-8 ---- */

/* Length of the well-formed or ill-formed unit at s[0] (WHATWG decoder):
 * *ok = 1 for a character; 0 for a maximal ill-formed subpart. Returns 0
 * when the input ends inside a sequence that could still complete. */
static size_t utf8_unit(const unsigned char *s, size_t n, int *ok) {
    const unsigned char b = s[0];
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    *ok = 1;
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b >= 0xE0 && b <= 0xEF) need = 2, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4) need = 3, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    else return *ok = 0, 1;
    size_t i = 1;
    for (; i <= (size_t)need; i++) {
        if (i >= n) return 0;
        if (s[i] < lo || s[i] > hi) return *ok = 0, i;
        lo = 0x80, hi = 0xBF;
    }
    return i;
}

size_t srv_utf8_valid_prefix(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        int ok;
        size_t u = utf8_unit((const unsigned char *)s + i, n - i, &ok);
        if (u == 0) break;
        i += u;
    }
    return i;
}

char *srv_utf8_clean(const char *s, size_t n) {
    char *out = malloc(n * 3 + 1), *o = out;
    if (!out) return NULL;
    size_t i = 0;
    while (i < n) {
        int ok;
        size_t u = utf8_unit((const unsigned char *)s + i, n - i, &ok);
        if (u == 0) u = n - i, ok = 0; /* the end inside a sequence */
        if (ok) memcpy(o, s + i, u), o += u;
        else memcpy(o, "\xEF\xBF\xBD", 3), o += 3;
        i += u;
    }
    *o = 0;
    return out;
}

static size_t skip_ws(const char *t, size_t i, size_t n) {
    while (i < n && (t[i] == ' ' || t[i] == '\n' || t[i] == '\r' || t[i] == '\t')) i++;
    return i;
}

/* The longest k < len(tag) such that t ends with tag's first k bytes: what may still become the tag. */
static size_t tag_tail(const char *t, size_t n, const char *tag) {
    const size_t tl = strlen(tag);
    for (size_t k = tl - 1; k > 0; k--)
        if (k <= n && !memcmp(t + n - k, tag, k)) return k;
    return 0;
}

/* The reasoning sections' tags (oai_req.think_kind). */
static const char *const think_tags[2][2] = {{"<think>", "</think>"}, {"<|open|>think<|sep|>", "<|close|>think<|sep|>"}};

void srv_split_think(const char *t, size_t n, int open, int kind, int final, srv_split *out) {
    const char *ot = think_tags[kind & 1][0], *ct = think_tags[kind & 1][1];
    const size_t ol = strlen(ot), cl = strlen(ct);
    out->r0 = out->r1 = out->c0 = 0;
    if (!t || n == 0) return; /* nothing yet */
    size_t p = 0;
    if (!open) {
        const size_t w = skip_ws(t, 0, n);
        if (n - w >= ol && !memcmp(t + w, ot, ol)) {
            p = w + ol;
        } else if (!final && (n - w < ol && !memcmp(t + w, ot, n - w))) {
            out->c0 = n; /* it may still open one: nothing yet */
            return;
        } else {
            return; /* no reasoning: all content */
        }
    }
    out->r0 = p;
    const char *end = n > p ? memmem(t + p, n - p, ct, cl) : NULL;
    if (!end) {
        out->r1 = final ? n : n - tag_tail(t + p, n - p, ct);
        out->c0 = n;
        return;
    }
    out->r1 = (size_t)(end - t);
    out->c0 = skip_ws(t, out->r1 + cl, n); /* the blank after the tag is neither */
}

long srv_find_stop(const srv_job *j, size_t from, int *which) {
    long best = -1;
    for (int i = 0; i < j->n_stop; i++) {
        const size_t sl = strlen(j->stop[i]);
        if (!sl || j->len < sl) continue;
        for (size_t p = from; p + sl <= j->len; p++)
            if (!memcmp(j->text + p, j->stop[i], sl)) {
                if (best < 0 || (long)p < best) best = (long)p, *which = i;
                break;
            }
    }
    return best;
}

size_t srv_safe_len(const srv_job *j) {
    size_t cut = j->len;
    for (int i = 0; i < j->n_stop; i++) {
        const size_t sl = strlen(j->stop[i]);
        for (size_t k = sl > 0 ? sl - 1 : 0; k > 0; k--)
            if (k <= j->len && !memcmp(j->text + j->len - k, j->stop[i], k)) {
                if (j->len - k < cut) cut = j->len - k;
                break;
            }
    }
    return srv_utf8_valid_prefix(j->text, cut);
}

int srv_opens_think(const char *t, int *kind) {
    size_t n = strlen(t);
    while (n && (t[n - 1] == '\n' || t[n - 1] == ' ')) n--;
    for (int k = 0; k < 2; k++) {
        const size_t l = strlen(think_tags[k][0]);
        if (n >= l && !memcmp(t + n - l, think_tags[k][0], l)) return *kind = k, 1;
    }
    return 0;
}
