/*
 * bpe_vocab.h - a deterministic byte-level BPE vocabulary for synthetic models.
 */
#ifndef DF_BPE_VOCAB_H
#define DF_BPE_VOCAB_H

#include <stddef.h>
#include <stdint.h>

typedef struct bpe_vocab {
    char **tokens;     /* n_tokens strings in GPT-2 byte-level form */
    int32_t *types;    /* llama.cpp token types: 1 normal, 3 control, 5 unused */
    int n_tokens;
    char **merges;     /* "left right" */
    int n_merges;
    int bos, eos;
} bpe_vocab;

/* Build a vocabulary of exactly n_vocab tokens (258..4096), merges learned on English
 * text. 0 or -1 with err. */
int bpe_vocab_build(bpe_vocab *v, int n_vocab, char *err, size_t errlen);
/* The same from text in many scripts (CJK, emoji, digits, contractions, blank runs), with
 * Kimi K2's special-token texts [BOS] [EOS] <|im_end|> [EOT] [PAD] (n_vocab 261..4096). */
int bpe_vocab_build_multilingual(bpe_vocab *v, int n_vocab, char *err, size_t errlen);
void bpe_vocab_free(bpe_vocab *v);

#endif
