/*
 * constrain.c - constrained sampling's public side: df_grammar (a GBNF grammar for a model's vocabulary) and
 * df_json_schema_to_grammar. The grammar engine is src/text/grammar.c, the JSON Schema compiler
 * src/text/schema.c, the sampler's use of them src/text/sampler.c.
 *
 * The vocabulary a grammar is matched against (every token's text, sorted: gram_vocab) is built once per model,
 * on the first grammar, and kept with the model (df_model.gram_vocab, under gram_mu): a server makes a grammar
 * per request. Control tokens have their text there but are allowed only where a grammar lets them
 * (df_grammar_allow_tokens: a tool format's markers); end-of-generation tokens are allowed where the text is
 * complete.
 */
#include <stdlib.h>
#include <string.h>

#include "deltafin.h"
#include "grammar.h"
#include "model.h"
#include "schema.h"
#include "util.h"

struct df_grammar {
    gram *g;
    const gram_vocab *v; /* the model's */
    int32_t *ctl;        /* control tokens it may emit where it spells their text (df_grammar_allow_tokens) */
    int n_ctl;
};

/* The model's sorted vocabulary, built on first use. NULL when out of memory. */
static const gram_vocab *model_vocab(const df_model *cm) {
    df_model *m = (df_model *)cm; /* a cache: the model's tokens do not change */
    pthread_mutex_lock(&m->gram_mu);
    if (!m->gram_vocab) {
        const int n = df_n_vocab(m);
        char **piece = calloc((size_t)n, sizeof *piece);
        int *len = calloc((size_t)n, sizeof *len);
        uint8_t *eog = calloc((size_t)n, 1), *special = calloc((size_t)n, 1);
        char buf[1024];
        int ok = piece && len && eog && special;
        for (int i = 0; ok && i < n; i++) {
            int k = df_token_text(m, i, buf, sizeof buf);
            if (k < 0 || k > (int)sizeof buf) k = 0; /* a piece this long is no JSON a grammar wants */
            len[i] = k;
            eog[i] = df_token_is_eog(m, i) != 0;
            special[i] = k > 0 && df_token_to_piece(m, i, NULL, 0) == 0; /* a control token: text of its own only */
            if (k && !(piece[i] = malloc((size_t)k))) ok = 0;
            else if (k) memcpy(piece[i], buf, (size_t)k);
        }
        if (ok) m->gram_vocab = gram_vocab_new(n, (const char *const *)piece, len, eog, special);
        for (int i = 0; piece && i < n; i++) free(piece[i]);
        free(piece), free(len), free(eog), free(special);
    }
    const gram_vocab *v = m->gram_vocab;
    pthread_mutex_unlock(&m->gram_mu);
    return v;
}

int df_grammar_new(const df_model *m, const char *gbnf, size_t len, df_grammar **out, char *err, size_t errlen) {
    *out = NULL;
    if (!m || !gbnf) return df_seterr(err, errlen, "df_grammar_new: no model or no grammar");
    df_grammar *d = calloc(1, sizeof *d);
    if (!d) return df_seterr(err, errlen, "out of memory"), DF_E_NOMEM;
    if (!(d->g = gram_parse(gbnf, len, err, errlen))) {
        free(d);
        return DF_E_INPUT;
    }
    if (!(d->v = model_vocab(m))) {
        df_grammar_free(d);
        return df_seterr(err, errlen, "out of memory"), DF_E_NOMEM;
    }
    *out = d;
    return DF_OK;
}

void df_grammar_free(df_grammar *g) {
    if (!g) return;
    gram_free(g->g);
    free(g->ctl);
    free(g);
}

int df_grammar_allow_tokens(df_grammar *g, const int32_t *ids, int n) {
    if (!g || n < 0) return DF_E_INPUT;
    int32_t *c = n ? malloc((size_t)n * sizeof *c) : NULL;
    if (n && !c) return DF_E_NOMEM;
    if (n) memcpy(c, ids, (size_t)n * sizeof *c);
    free(g->ctl);
    g->ctl = c, g->n_ctl = n;
    return DF_OK;
}

/* A state of g that may take the control tokens g allows. NULL when out of memory. */
static gram_state *new_state(const df_grammar *g) {
    gram_state *st = gram_state_new(g->g, g->v);
    if (st && g->n_ctl && gram_state_allow(st, g->ctl, g->n_ctl) != 0) gram_state_free(st), st = NULL;
    return st;
}

int df_sampler_set_grammar(df_sampler *s, const df_grammar *g) {
    gram_state *st = NULL;
    if (g && !(st = new_state(g))) return DF_E_NOMEM;
    if (sampler_set_grammar(s, st, g ? g->v : NULL) != 0) {
        gram_state_free(st);
        return DF_E_NOMEM;
    }
    return DF_OK;
}

int df_sampler_set_grammar_lazy(df_sampler *s, const df_grammar *g, const char *const *triggers, int n) {
    if (!g || n < 1) return df_sampler_set_grammar(s, g);
    for (int i = 0; i < n; i++)
        if (!triggers[i] || !*triggers[i]) return DF_E_INPUT;
    gram_state *st = new_state(g);
    if (!st) return DF_E_NOMEM;
    if (sampler_set_grammar_lazy(s, st, g->v, triggers, n) != 0) {
        gram_state_free(st);
        return DF_E_NOMEM;
    }
    return DF_OK;
}

int df_json_schema_to_grammar(const char *schema, size_t len, char **gbnf, char *err, size_t errlen) {
    *gbnf = NULL;
    if (!schema) return df_seterr(err, errlen, "no schema");
    return schema_to_gbnf(schema, len, gbnf, err, errlen) == 0 ? DF_OK : DF_E_INPUT;
}
