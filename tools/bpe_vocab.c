/*
 * bpe_vocab.c - builds a small, working byte-level BPE vocabulary for
 * synthetic models: the 256 byte tokens (GPT-2's byte-to-unicode mapping),
 * merges learned by plain BPE training on a short built-in English text,
 * and the special tokens, so that text tokenizes into multi-byte pieces the
 * way it does with a real vocabulary. Deterministic: no randomness at all.
 */
#include "bpe_vocab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static const char CORPUS[] =
    "Once upon a time there was a little girl who lived in a village near the forest. "
    "Whenever she went out, the little girl wore a red riding cloak, so everyone in the village called her "
    "Little Red Riding Hood. One morning, Little Red Riding Hood asked her mother if she could go to visit her "
    "grandmother as it had been awhile since they had seen each other. That is a good idea, her mother said. "
    "So they packed a nice basket for Little Red Riding Hood to take to her grandmother. The engine reads the "
    "weights from the disk and computes the next token of the story. The model is large and the machine is "
    "small, but the answer is the same. There were three bears who lived in a house in the woods. They had "
    "porridge for breakfast every day, and they went for a walk while it cooled. The quick brown fox jumps "
    "over the lazy dog. She said that the weather would be nice and warm tomorrow, and they would play in "
    "the garden with their friends until the sun went down. He was happy and he smiled at the sky.";

/* For bpe_vocab_build_multilingual: text in many scripts, cut into training words at spaces
 * only, so that merges also join what pre-tokenizers keep apart (Han and kana, letters and
 * digits or punctuation, digit groups, contractions, runs of blanks and newlines). Each
 * piece appears at least twice: BPE training only merges pairs that repeat. The escapes are
 * the compatibility ideographs U+F900 and U+2F800 (which NFC would turn into U+8C48, U+4E3D). */
static const char CORPUS_MULTI[] =
    "你好世界 你好世界 中文分词测试 中文分词测试 我们今天去公园散步。 我们今天去公园散步。 "
    "漢字とひらがなとカタカナ 漢字とひらがなとカタカナ 日本語のテキスト 日本語のテキスト 東京は日本の首都です "
    "東京は日本の首都です 中文English混合text123文字 中文English混合text123文字 한국어 텍스트 한국어 텍스트 "
    "안녕하세요 세계 안녕하세요 세계 2024年12月31日 2024年12月31日 1234567890 1234567890 12345 12345 "
    "3.14159 3.14159 $100,000.00 $100,000.00 it's it's DON'T DON'T we'll we'll I'M I'M you've you've they're "
    "they're he'd he'd IT'S IT'S 中's 中's x'中 x'中 a𪜀b a𪜀b x𠀀y x𠀀y z\xef\xa4\x80z z\xef\xa4\x80z q㐀q q㐀q \xf0\xaf\xa0\x80𮯠w \xf0\xaf\xa0\x80𮯠w 人々 人々 "
    "Ελληνικά Ελληνικά русский русский العربية العربية हिन्दी हिन्दी ภาษาไทย ภาษาไทย naïve naïve café café "
    "👍🏽👍🏽 👍🏽👍🏽 👨‍👩‍👧‍👦 👨‍👩‍👧‍👦 🦙.cpp 🦙.cpp ✅✅ ✅✅ 你好，世界！ 你好，世界！ 「引用」 「引用」 "
    "\n\n\n\n \n\n\n\n \t\t\t\t \t\t\t\t \r\n\r\n \r\n\r\n 　中文　 　中文　 \xc2\xa0\xc2\xa0 \xc2\xa0\xc2\xa0 "
    "Hello, world! Hello, world! (x+y)*2==z (x+y)*2==z #include<stdio.h> #include<stdio.h>";

/* GPT-2 byte-to-unicode: printable bytes map to themselves, the rest to U+0100.. */
static int byte_cp(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return b;
    int n = 0;
    for (int i = 0; i < b; i++)
        if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255))) n++;
    return 256 + n;
}

static int utf8_put(int cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
    return 3;
}

void bpe_vocab_free(bpe_vocab *v) {
    if (!v) return;
    for (int i = 0; i < v->n_tokens; i++) free(v->tokens[i]);
    for (int i = 0; i < v->n_merges; i++) free(v->merges[i]);
    free(v->tokens);
    free(v->merges);
    free(v->types);
    memset(v, 0, sizeof *v);
}

static int add_token(bpe_vocab *v, const char *s, int type) {
    char *c = df_strdup(s);
    if (!c) return -1;
    v->tokens[v->n_tokens] = c;
    v->types[v->n_tokens] = type;
    return v->n_tokens++;
}

static int find_token(const bpe_vocab *v, const char *s) {
    for (int i = 0; i < v->n_tokens; i++)
        if (strcmp(v->tokens[i], s) == 0) return i;
    return -1;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : (x > y);
}

/* Words of the corpus as token-id sequences ("Ġ" marks a leading space). */
typedef struct { int *ids; int n; } word;

/* Special tokens after the learned ones: text and llama.cpp token type (3 control). */
typedef struct { const char *text; int type; } special;

/* BPE training on corpus; a word starts at each byte of seps and at the start. The first
 * special is the BOS, the second the EOS. */
static int build(bpe_vocab *v, int n_vocab, const char *corpus, const char *seps, const special *specials,
                 int n_special, char *err, size_t errlen) {
    memset(v, 0, sizeof *v);
    if (n_vocab < 256 + n_special || n_vocab > 4096)
        return df_seterr(err, errlen, "vocabulary size %d out of range [%d, 4096]", n_vocab, 256 + n_special);
    v->tokens = calloc((size_t)n_vocab, sizeof(char *));
    v->types = calloc((size_t)n_vocab, sizeof(int32_t));
    v->merges = calloc((size_t)n_vocab, sizeof(char *));
    size_t clen = strlen(corpus);
    word *words = calloc(clen, sizeof(word));
    int *ids = malloc(clen * sizeof(int));
    if (!v->tokens || !v->types || !v->merges || !words || !ids) goto oom;
    for (int b = 0; b < 256; b++) {
        char s[4] = {0};
        utf8_put(byte_cp(b), s);
        if (add_token(v, s, 1) < 0) goto oom;
    }
    /* split the corpus into words: a space starts a new word and belongs to it */
    int nw = 0;
    for (size_t i = 0; i < clen;) {
        word *w = &words[nw++];
        w->ids = ids + i;
        size_t j = i;
        do { ids[j] = (uint8_t)corpus[j]; j++; } while (j < clen && !strchr(seps, corpus[j]));
        w->n = (int)(j - i);
        i = j;
    }
    int target = n_vocab - n_special;
    uint64_t *pairs = malloc(clen * sizeof(uint64_t));
    if (!pairs) goto oom;
    while (v->n_tokens < target) {
        /* the most frequent adjacent pair (ties: the smallest ids) */
        size_t np = 0;
        for (int wi = 0; wi < nw; wi++)
            for (int k = 0; k + 1 < words[wi].n; k++)
                pairs[np++] = (uint64_t)words[wi].ids[k] << 32 | (uint32_t)words[wi].ids[k + 1];
        qsort(pairs, np, sizeof(uint64_t), cmp_u64);
        int best_a = -1, best_b = -1;
        size_t best_n = 1;
        for (size_t i = 0; i < np;) {
            size_t j = i;
            while (j < np && pairs[j] == pairs[i]) j++;
            if (j - i > best_n) { best_n = j - i; best_a = (int)(pairs[i] >> 32); best_b = (int)(uint32_t)pairs[i]; }
            i = j;
        }
        if (best_a < 0) break; /* nothing repeats any more */
        size_t la = strlen(v->tokens[best_a]), lb = strlen(v->tokens[best_b]);
        char *merged = malloc(la + lb + 1), *rule = malloc(la + lb + 2);
        if (!merged || !rule) { free(merged); free(rule); free(pairs); goto oom; }
        memcpy(merged, v->tokens[best_a], la);
        memcpy(merged + la, v->tokens[best_b], lb + 1);
        snprintf(rule, la + lb + 2, "%s %s", v->tokens[best_a], v->tokens[best_b]);
        int id = find_token(v, merged);
        if (id < 0) {
            v->tokens[v->n_tokens] = merged;
            v->types[v->n_tokens] = 1;
            id = v->n_tokens++;
        } else {
            free(merged);
        }
        v->merges[v->n_merges++] = rule;
        for (int wi = 0; wi < nw; wi++) {
            word *w = &words[wi];
            int o = 0;
            for (int k = 0; k < w->n; k++) {
                if (k + 1 < w->n && w->ids[k] == best_a && w->ids[k + 1] == best_b) { w->ids[o++] = id; k++; }
                else w->ids[o++] = w->ids[k];
            }
            w->n = o;
        }
    }
    free(pairs);
    /* pad with never-merged filler tokens if the corpus ran out of pairs */
    while (v->n_tokens < target) {
        char s[32];
        snprintf(s, sizeof s, "<unused%d>", v->n_tokens);
        if (add_token(v, s, 5) < 0) goto oom;
    }
    for (int i = 0; i < n_special; i++)
        if (add_token(v, specials[i].text, specials[i].type) < 0) goto oom;
    v->bos = target;
    v->eos = target + 1;
    free(words);
    free(ids);
    return 0;
oom:
    free(words);
    free(ids);
    bpe_vocab_free(v);
    return df_seterr(err, errlen, "out of memory building the vocabulary");
}

int bpe_vocab_build(bpe_vocab *v, int n_vocab, char *err, size_t errlen) {
    static const special sp[] = {{"<|begin_of_text|>", 3}, {"<|end_of_text|>", 3}};
    return build(v, n_vocab, CORPUS, " .,", sp, 2, err, errlen);
}

int bpe_vocab_build_multilingual(bpe_vocab *v, int n_vocab, char *err, size_t errlen) {
    /* Kimi K2's texts; "[EOT]" and "[PAD]" are typed normal: llama.cpp makes them control
     * tokens by their text */
    static const special sp[] = {{"[BOS]", 3}, {"[EOS]", 3}, {"<|im_end|>", 3}, {"[EOT]", 1}, {"[PAD]", 1}};
    return build(v, n_vocab, CORPUS_MULTI, " ", sp, 5, err, errlen);
}
