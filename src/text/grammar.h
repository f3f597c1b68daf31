/*
 * grammar.h - GBNF grammars for constrained sampling (grammar.c; the public side is df_grammar in deltafin.h,
 * made in src/api/constrain.c). See grammar.c for the design.
 */
#ifndef DF_GRAMMAR_H
#define DF_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

typedef struct gram gram;          /* a parsed grammar: rules (immutable) */
typedef struct gram_vocab gram_vocab; /* a vocabulary's token texts, sorted (built once per model) */
typedef struct gram_state gram_state; /* where a generation is in a grammar */

/* Parse GBNF text (llama.cpp's syntax, start rule `root`). NULL with err (line, what). */
gram *gram_parse(const char *text, size_t len, char *err, size_t errlen);
void gram_free(gram *g);

/* n tokens: piece[i][0..len[i]) their bytes ("": never allowed), eog[i] whether an end-of-generation token,
 * special[i] (NULL: none) whether a control token: its text is matched, but it is allowed only where a state
 * allows it (gram_state_allow). Copies what it needs. NULL when out of memory. */
gram_vocab *gram_vocab_new(int n, const char *const *piece, const int *len, const uint8_t *eog, const uint8_t *special);
void gram_vocab_free(gram_vocab *v);
/* Every byte a token (ids 0..255) and an end-of-generation token (256): for reading texts against a grammar a
 * byte at a time (tests, tools). NULL when out of memory. */
gram_vocab *gram_vocab_bytes(void);

/* The start of generation for g over v (both must outlive it). NULL when out of memory. */
gram_state *gram_state_new(const gram *g, const gram_vocab *v);
void gram_state_free(gram_state *st);
/* The control tokens ids[0..n) may come where the grammar spells their text (a tool format's markers). 0, or -1
 * when out of memory. */
int gram_state_allow(gram_state *st, const int32_t *ids, int n);
/* Whether token id may come next (an end-of-generation token: when the text so far is complete). */
int gram_allows(gram_state *st, int32_t id);
/* allowed[i] = whether token i may come next, for every token (the vocabulary walked in sorted order, tokens that
 * share a prefix sharing its work). Returns how many are allowed. */
int gram_mask(gram_state *st, uint8_t *allowed);
/* Advance by token id (emitted). 0, or -1 when it does not continue the grammar (the state is then dead: only
 * end-of-generation tokens are allowed... none, in fact: gram_mask allows nothing). */
int gram_accept(gram_state *st, int32_t id);
/* Advance by the bytes b[0..n) (text that came before the grammar applied: a lazy grammar's trigger onwards).
 * 0, or -1 when they do not continue the grammar (the state is then dead). */
int gram_accept_text(gram_state *st, const char *b, size_t n);
/* 1 when the text so far is complete and nothing else may follow (only end-of-generation). */
int gram_done(const gram_state *st);
/* Token id's text in v (*len bytes; control tokens have none). */
const char *gram_vocab_text(const gram_vocab *v, int32_t id, int *len);
/* The longest token's length in bytes. */
int gram_vocab_max_len(const gram_vocab *v);
/* The first end-of-generation token, or -1. */
int32_t gram_vocab_eog(const gram_vocab *v);

/* sampler.c: constrain sampler s by st (over v), owned by s from then on; NULL: no longer. 0, or -1 when out of
 * memory (nothing changed). */
struct df_sampler;
int sampler_set_grammar(struct df_sampler *s, gram_state *st, const gram_vocab *v);
/* The same, lazily: st applies from the first of the n triggers (texts) the output writes, fed the output from
 * that trigger on; before it, nothing is constrained. 0, or -1 when out of memory (nothing changed). */
int sampler_set_grammar_lazy(struct df_sampler *s, gram_state *st, const gram_vocab *v, const char *const *triggers,
                             int n);

#endif
