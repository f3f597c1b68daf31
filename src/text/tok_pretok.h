/*
 * tok_pretok.h - internal interface of the BPE pre-tokenizer (tok_pretok.c), used only
 * by tokenizer.c.
 *
 * A pre-tokenizer cuts a text into "words" before byte-pair merging, the way llama.cpp's
 * unicode_regex_split does: the text is decoded leniently into code points, a list of
 * split steps (hand-written splitters for the common GPT-2 / Llama-3 / Qwen-2 style
 * expressions, PCRE2 for the rest) is applied one after the other, each step cutting the
 * pieces left by the previous one, and every resulting word is re-encoded as UTF-8 and,
 * for byte-level BPE, mapped through the GPT-2 byte-to-unicode table.
 */
#ifndef DF_TOK_PRETOK_H
#define DF_TOK_PRETOK_H

#include <stddef.h>
#include <stdint.h>

typedef struct tok_pretok tok_pretok;

/* Properties of a pre-tokenizer that the BPE tokenizer needs (llama.cpp ties them to the
 * tokenizer.ggml.pre name). */
enum {
    PRETOK_BYTE_ENCODE   = 1 << 0, /* words go through the GPT-2 byte-to-unicode table */
    PRETOK_IGNORE_MERGES = 1 << 1, /* a word that is itself a token is emitted whole */
    PRETOK_ADD_BOS       = 1 << 2, /* add_bos defaults to true */
    PRETOK_NO_BOS        = 1 << 3, /* there is no default BOS id */
    PRETOK_ESCAPE_WS     = 1 << 4, /* ' ' becomes U+2581 before splitting (SPM-style BPE) */
    PRETOK_NL_WORDS      = 1 << 5, /* a word of only '\n' that is a token is emitted whole */
    PRETOK_FORCE_BOS     = 1 << 6, /* add_bos is forced on even if the metadata says no */
};

/* Words produced by pretok_split: word i is buf[ends[i-1] .. ends[i]) (ends[-1] = 0).
 * The buffers grow as needed and may be reused across calls; free with pretok_words_free. */
typedef struct pretok_words {
    char *buf;
    size_t len, cap;
    size_t *ends;
    size_t n, ncap;
} pretok_words;

/* Pre-tokenizer for a tokenizer.ggml.pre name (NULL or "" means "default").
 * Returns 0, or -1 with err (unknown name, regex compile failure, allocation failure). */
int pretok_create(const char *pre_name, tok_pretok **out, char *err, size_t errlen);
void pretok_free(tok_pretok *p);
int pretok_flags(const tok_pretok *p);     /* PRETOK_* bits */
const char *pretok_name(const tok_pretok *p);

/* Split len bytes of text (any bytes) into words, appended to *w (the caller clears it
 * by setting w->len = w->n = 0). Returns 0, or -1 with err. Thread-safe: the
 * pre-tokenizer is only read. */
int pretok_split(const tok_pretok *p, const char *text, size_t len, pretok_words *w, char *err, size_t errlen);
void pretok_words_free(pretok_words *w);

/* The GPT-2 byte-to-unicode mapping: the UTF-8 form (1 or 2 bytes) of the code point
 * standing for byte b; returns its length. */
int pretok_byte_to_utf8(uint8_t b, char out[2]);
/* Inverse: the byte a code point stands for, or -1 if it stands for none. */
int pretok_cpt_to_byte(uint32_t cpt);

/* llama.cpp-compatible lenient UTF-8 decoding of one code point at s[*pos] (len bytes in
 * all, *pos < len): well-formed, overlong and surrogate sequences give their value;
 * anything else gives U+FFFD and consumes one byte. */
uint32_t pretok_decode_cpt(const unsigned char *s, size_t len, size_t *pos);
/* Encode a code point as UTF-8 (values up to 0x1FFFFF use the generic 4-byte form);
 * returns the byte count (1..4). */
int pretok_encode_cpt(uint32_t cpt, char out[4]);

#endif
