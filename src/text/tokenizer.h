/*
 * tokenizer.h - text <-> token ids, built from a GGUF vocabulary.
 *
 * Supports tokenizer.ggml.model "llama" (SentencePiece-style: scores, byte
 * fallback <0xXX>, the "▁" space marker) and "gpt2" (byte-level BPE with
 * merges and a pre-tokenizer chosen by tokenizer.ggml.pre: llama-bpe/llama3,
 * qwen2, deepseek-llm, deepseek-coder, deepseek-v3, kimi-k2, gpt-2, default).
 * Pre-tokenizer regexes run on PCRE2 with Unicode properties.
 *
 * Special/control tokens (token_type 3 = control, 4 = user-defined) are
 * recognised in the input text when parse_special is set. BOS/EOS ids and
 * whether to add them come from tokenizer.ggml.{bos,eos}_token_id and
 * tokenizer.ggml.add_{bos,eos}_token, with the same defaults as llama.cpp.
 */
#ifndef DF_TOKENIZER_H
#define DF_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

typedef struct tok_vocab tok_vocab;

enum tok_kind { TOK_KIND_SPM = 1, TOK_KIND_BPE = 2 };

/* Build the tokenizer from a GGUF's tokenizer.* metadata. 0 or -1 with err. */
int tok_load(const gguf_ctx *g, tok_vocab **out, char *err, size_t errlen);
void tok_free(tok_vocab *v);

int tok_n_vocab(const tok_vocab *v);
int tok_kind(const tok_vocab *v);
int32_t tok_bos(const tok_vocab *v);     /* -1 if none */
int32_t tok_eos(const tok_vocab *v);     /* -1 if none */
int tok_add_bos(const tok_vocab *v);     /* 1 if BOS is prepended by default */
int tok_add_eos(const tok_vocab *v);
/* 1 if id ends generation (EOS, EOT, or another end-of-generation token). */
int tok_is_eog(const tok_vocab *v, int32_t id);
const char *tok_pre_name(const tok_vocab *v); /* pre-tokenizer in use */

/* Tokenize len bytes of text (any bytes: invalid UTF-8 is handled, never
 * rejected with a crash). add_special: prepend BOS / append EOS as the vocab
 * says. parse_special: match control/user-defined token texts in the input.
 * Writes up to max ids; *n_out is the total needed (may exceed max).
 * Returns 0, or -1 with err on allocation failure or max too small. */
int tok_encode(const tok_vocab *v, const char *text, size_t len, int add_special, int parse_special,
               int32_t *out, int max, int *n_out, char *err, size_t errlen);

/* The bytes of one token as it appears in text (SPM: "▁" -> ' ', <0xXX> -> byte;
 * BPE: byte-level decoding). Control tokens give "" unless render_special.
 * Returns the byte count (may exceed buflen; nothing beyond buflen is written),
 * or -1 for an invalid id. */
int tok_piece(const tok_vocab *v, int32_t id, int render_special, char *buf, int buflen);

/* The raw vocabulary string of a token (for --pieces), NULL for an invalid id. */
const char *tok_text(const tok_vocab *v, int32_t id);

#endif
