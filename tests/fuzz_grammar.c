/*
 * fuzz_grammar.c - libFuzzer target for constrained sampling's parsers and matcher (src/text/grammar.c,
 * src/text/schema.c).
 *
 * The input's first byte picks the part:
 *   'g' GBNF text, a NUL, then bytes choosing tokens: the grammar parses or fails with a message; if it parses,
 *       a walk over a small vocabulary (every byte and some words) takes, at each step, the allowed token the
 *       next input byte picks, checking that the mask equals the token-by-token answer;
 *   's' a JSON Schema: it compiles or fails with a message; a grammar it compiles must parse (gram_parse);
 *   't' a tool format (the next byte), then a model's output: the tool-call parser (src/text/toolcall.c) reads it
 *       whole and at every 7th prefix while it grows; each growing reading's content must begin the whole
 *       reading's (what a stream sent as content stays true). Arguments are not compared: a call that turns out
 *       malformed after its start was streamed becomes content, by design (tests/test_toolcall.c checks every
 *       prefix of well-formed transcripts, arguments included);
 *   'T' a tool format, then an OpenAI tools array: the calls' grammar is made or refused with a message; one made
 *       must parse.
 * Every crash, sanitizer report, leak, hang (-timeout) or memory blow-up (-rss_limit_mb) is a bug. Built and run
 * by tests/fuzz.sh (FUZZ_TARGET=grammar), seeded with tests/data/grammar-corpus and llama.cpp's grammars.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deltafin.h"
#include "grammar.h"
#include "schema.h"

static gram_vocab *g_vocab;
static int g_n;

static void make_vocab(void) {
    static const char *words[] = {"{\"", "\":", "\",", "true", "null", "12", "\\u", "\xC3\xA9", "ab", "abc", " ", "\n"};
    static char bytes[256];
    const char *piece[256 + 16];
    int len[256 + 16];
    uint8_t eog[256 + 16] = {0};
    for (int i = 0; i < 256; i++) bytes[i] = (char)i, piece[g_n] = &bytes[i], len[g_n++] = 1;
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) piece[g_n] = words[i], len[g_n++] = (int)strlen(words[i]);
    piece[g_n] = "", len[g_n] = 0, eog[g_n++] = 1;
    g_vocab = gram_vocab_new(g_n, piece, len, eog, NULL);
}

static void walk(const gram *g, const uint8_t *choice, size_t n) {
    gram_state *st = gram_state_new(g, g_vocab);
    uint8_t *mask = malloc((size_t)g_n);
    for (size_t i = 0; st && mask && i < n && i < 64; i++) {
        const int count = gram_mask(st, mask);
        int pick = -1, k = choice[i] % (count ? count : 1);
        for (int t = 0; t < g_n; t++) {
            if (mask[t] != gram_allows(st, t)) abort(); /* the mask must be the token-by-token answer */
            if (mask[t] && k-- == 0) pick = t;
        }
        if (pick < 0 || gram_accept(st, pick) != 0) break;
    }
    free(mask);
    gram_state_free(st);
}

static int begins(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

static void tool_parse(df_tool_format f, const char *t, size_t n) {
    df_tool_parse fin, p;
    if (df_tool_calls_parse(f, NULL, t, n, 0, &fin) != DF_OK) return;
    for (size_t m = 0; m <= n; m += 7) {
        if (df_tool_calls_parse(f, NULL, t, m, 1, &p) != DF_OK) continue;
        if (!begins(fin.content, p.content)) {
            fprintf(stderr, "format %s, prefix %zu of %zu: the growing reading is not the start of the whole one\n",
                    df_tool_format_name(f), m, n);
            abort();
        }
        df_tool_parse_free(&p);
    }
    df_tool_parse_free(&fin);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_vocab) make_vocab();
    if (size < 1) return 0;
    if ((data[0] == 't' || data[0] == 'T') && size >= 2) {
        const df_tool_format f = (df_tool_format)(data[1] % (DF_TOOLS_MISTRAL_ARGS + 1));
        char *text = malloc(size - 1);
        if (!text) return 0;
        memcpy(text, data + 2, size - 2);
        text[size - 2] = 0;
        if (data[0] == 't') {
            tool_parse(f, text, size - 2);
        } else {
            char *gbnf = NULL, err[256];
            if (df_tool_calls_grammar(f, text, NULL, data[1] & 0x80, &gbnf, err, sizeof err) == DF_OK) {
                gram *g = gram_parse(gbnf, strlen(gbnf), err, sizeof err);
                if (!g) {
                    fprintf(stderr, "the tool-call grammar is refused by the engine: %s\n%s\n", err, gbnf);
                    abort();
                }
                gram_free(g);
            }
            free(gbnf);
        }
        free(text);
        return 0;
    }
    const char *t = (const char *)data + 1;
    char err[256];
    if (data[0] == 's') {
        char *gbnf = NULL;
        if (schema_to_gbnf(t, size - 1, &gbnf, err, sizeof err) == 0) {
            gram *g = gram_parse(gbnf, strlen(gbnf), err, sizeof err);
            if (!g) {
                fprintf(stderr, "the schema compiler made a grammar the engine refuses: %s\n%s\n", err, gbnf);
                abort();
            }
            walk(g, data, size < 32 ? size : 32);
            gram_free(g);
        }
        free(gbnf);
        return 0;
    }
    const uint8_t *nul = memchr(data + 1, 0, size - 1);
    const size_t glen = nul ? (size_t)(nul - data - 1) : size - 1;
    gram *g = gram_parse(t, glen, err, sizeof err);
    if (g) {
        if (nul) walk(g, nul + 1, size - glen - 2);
        gram_free(g);
    }
    return 0;
}
