/*
 * tokenizer.c - text <-> token ids from a GGUF vocabulary (the contract is tokenizer.h).
 *
 * Behaviour follows llama.cpp (its llama-vocab.cpp), because Deltafin's output is checked
 * against llama.cpp token for token:
 *
 *  - "llama" vocabularies (SentencePiece BPE): spaces become U+2581, a space is put in
 *    front of every piece of text that starts the input or follows a special token
 *    (tokenizer.ggml.add_space_prefix, default on), then neighbouring symbols are merged
 *    highest score first (ties: leftmost) as long as the merged text is a token; a symbol
 *    left over that is not a token becomes its bytes (<0xXX> tokens, else the one-byte
 *    token, else the unknown token).
 *  - "gpt2" vocabularies (byte-level BPE): the pre-tokenizer named by tokenizer.ggml.pre
 *    (tok_pretok.c) cuts the text into words of GPT-2 byte stand-ins, and each word is
 *    merged lowest merge rank first (ties: leftmost). "gemma4" vocabularies are BPE over
 *    raw UTF-8 with U+2581 for spaces and <0xXX> byte fallback.
 *  - Special tokens: control, user-defined and unknown-typed tokens are cut out of the
 *    text first, longest text first (llama.cpp's tokenizer_st_partition). Control and
 *    unknown ones only when parse_special is set; user-defined ones ALWAYS, as llama.cpp
 *    does (Hugging Face "added tokens"), which e.g. the MPT/NeoX and DeepSeek vocabularies
 *    rely on. Some tokens strip blanks beside them (Phi-3's rule, <mask> of some BERTs).
 *  - BOS/EOS/EOT/EOM ids, add_bos/add_eos defaults, the text-based detection of
 *    end-of-generation tokens and the attribute fix-ups are llama.cpp's.
 *  - tok_piece gives llama.cpp's token_to_piece bytes (without the lstrip option).
 *
 * Lookups are hash tables (token text -> id, merge pair -> rank), merging uses a binary
 * heap, so a word of k symbols costs O(k log k); special-token cutting is one memmem pass
 * per special token. Nothing is printed; all failures come back as messages.
 */
#include "tokenizer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_pretok.h"
#include "util.h"

/* Longest text tok_encode accepts. */
#define TOK_MAX_TEXT (256 << 20)

/* token attributes (as llama.cpp's llama_token_attr) */
enum {
    A_UNKNOWN = 1 << 0,
    A_UNUSED = 1 << 1,
    A_NORMAL = 1 << 2,
    A_CONTROL = 1 << 3,
    A_USER = 1 << 4,
    A_BYTE = 1 << 5,
    A_LSTRIP = 1 << 7,
    A_RSTRIP = 1 << 8,
};

typedef struct {
    uint32_t loff;         /* offset of the merge text in the merge arena */
    uint32_t llen, rlen;   /* left and right parts: text[loff..+llen), text[loff+llen+1..+rlen) */
    int32_t rank;
} merge_ent;

struct tok_vocab {
    int kind;
    int32_t n;
    char *arena;          /* token texts, each NUL-terminated */
    char **text;
    uint32_t *tlen;
    float *score;
    uint32_t *attr;
    uint8_t *eog;
    uint32_t max_tlen;

    int32_t *tmap;        /* open-addressing table of token ids by text */
    size_t tmap_mask;

    char *marena;
    merge_ent *merges;
    int32_t n_merges;
    int32_t *mmap;        /* open-addressing table of merge indices by (left, right) */
    size_t mmap_mask;
    uint32_t max_merge_len;

    char *parena;         /* pieces (token_to_piece with special = true) */
    size_t *poff;
    uint32_t *plen;

    int32_t *special;     /* control / user-defined / unknown tokens, longest text first */
    int32_t n_special;

    int32_t bos, eos, eot, eom, unk;
    int add_bos, add_eos, add_space_prefix;
    int32_t byte_tok[256]; /* fallback token of each byte, -1 if none */

    tok_pretok *pre;       /* BPE only */
    int pre_flags;
};

/* ------------------------------------------------------------------------------------ */
/* hashing                                                                               */

static uint64_t hmix(uint64_t h, uint64_t v) {
    h ^= v;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 31);
}

static uint64_t hash_bytes(uint64_t h, const char *p, size_t n) {
    uint64_t v;
    while (n >= 8) {
        memcpy(&v, p, 8);
        h = hmix(h, v);
        p += 8;
        n -= 8;
    }
    v = 0;
    memcpy(&v, p, n);
    h = hmix(h, v ^ ((uint64_t)n << 59) ^ 0x5bd1e995u);
    return h ^ (h >> 29);
}

static size_t table_size(size_t n) {
    size_t s = 16;
    while (s < n * 2 + 1) s <<= 1;
    return s;
}

static int32_t lookup(const tok_vocab *v, const char *s, size_t len) {
    size_t i;
    if (len > v->max_tlen) return -1;
    i = (size_t)hash_bytes(0x243F6A8885A308D3ull, s, len) & v->tmap_mask;
    for (;;) {
        int32_t id = v->tmap[i];
        if (id < 0) return -1;
        if (v->tlen[id] == len && memcmp(v->text[id], s, len) == 0) return id;
        i = (i + 1) & v->tmap_mask;
    }
}

static uint64_t merge_hash(const char *l, size_t ll, const char *r, size_t rl) {
    return hash_bytes(hash_bytes(0x13198A2E03707344ull, l, ll), r, rl);
}

/* Rank of merging left and right, or -1. */
static int32_t merge_rank(const tok_vocab *v, const char *l, size_t ll, const char *r, size_t rl) {
    size_t i;
    if (!v->mmap || ll + rl > v->max_merge_len) return -1;
    i = (size_t)merge_hash(l, ll, r, rl) & v->mmap_mask;
    for (;;) {
        int32_t k = v->mmap[i];
        const merge_ent *m;
        if (k < 0) return -1;
        m = &v->merges[k];
        if (m->llen == ll && m->rlen == rl && memcmp(v->marena + m->loff, l, ll) == 0 &&
            memcmp(v->marena + m->loff + ll + 1, r, rl) == 0)
            return m->rank;
        i = (i + 1) & v->mmap_mask;
    }
}

/* ------------------------------------------------------------------------------------ */
/* small helpers                                                                         */

static int c_isspace(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

typedef struct {
    char *p;
    size_t len, cap;
} buf_t;

static int buf_reserve(buf_t *b, size_t extra) {
    size_t nc;
    char *np;
    if (b->len + extra <= b->cap) return 0;
    nc = b->cap ? b->cap : 256;
    while (nc < b->len + extra) {
        if (nc > SIZE_MAX / 2) return -1;
        nc *= 2;
    }
    np = realloc(b->p, nc);
    if (!np) return -1;
    b->p = np;
    b->cap = nc;
    return 0;
}

static int buf_add(buf_t *b, const void *s, size_t n) {
    if (buf_reserve(b, n) != 0) return -1;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* pieces                                                                                */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The byte of a <0xXX> token (like strtol on the two characters after "<0x"). */
static uint8_t byte_token_value(const char *t, uint32_t len) {
    int val = 0;
    for (uint32_t i = 3; i < 5 && i < len; i++) {
        int h = hexval(t[i]);
        if (h < 0) break;
        val = val * 16 + h;
    }
    return (uint8_t)val;
}

/* llama.cpp's token_to_piece(special = true) for token id, appended to b. */
static int make_piece(const tok_vocab *v, int32_t id, buf_t *b) {
    const char *t = v->text[id];
    uint32_t len = v->tlen[id], a = v->attr[id];
    if (a & (A_UNKNOWN | A_CONTROL | A_USER)) return buf_add(b, t, len);
    if (a & A_NORMAL) {
        if (v->kind == TOK_KIND_SPM || (v->pre_flags & PRETOK_ESCAPE_WS)) {
            for (uint32_t i = 0; i < len; i++) {
                if (i + 2 < len && (unsigned char)t[i] == 0xE2 && (unsigned char)t[i + 1] == 0x96 &&
                    (unsigned char)t[i + 2] == 0x81) {
                    if (buf_add(b, " ", 1) != 0) return -1;
                    i += 2;
                } else if (buf_add(b, t + i, 1) != 0) {
                    return -1;
                }
            }
            return 0;
        }
        /* byte-level BPE: every code point stands for one byte */
        for (size_t pos = 0; pos < len;) {
            uint32_t c = pretok_decode_cpt((const unsigned char *)t, len, &pos);
            int byte = pretok_cpt_to_byte(c);
            if (byte >= 0) {
                char ch = (char)byte;
                if (buf_add(b, &ch, 1) != 0) return -1;
            } else {
                /* llama.cpp writes unmappable code points out like this */
                char hex[16], u[4];
                int k = pretok_encode_cpt(c, u);
                if (buf_add(b, "[UNK_BYTE_0x", 12) != 0) return -1;
                for (int j = 0; j < k; j++) {
                    snprintf(hex, sizeof hex, "%02x", (unsigned char)u[j]);
                    if (buf_add(b, hex, 2) != 0) return -1;
                }
                if (buf_add(b, t, len) != 0 || buf_add(b, "]", 1) != 0) return -1;
            }
        }
        return 0;
    }
    if (a & A_BYTE) {
        char ch = (char)byte_token_value(t, len);
        return buf_add(b, &ch, 1);
    }
    return 0; /* unused / undefined tokens have no text */
}

/* ------------------------------------------------------------------------------------ */
/* loading                                                                               */

void tok_free(tok_vocab *v) {
    if (!v) return;
    free(v->arena);
    free(v->text);
    free(v->tlen);
    free(v->score);
    free(v->attr);
    free(v->eog);
    free(v->tmap);
    free(v->marena);
    free(v->merges);
    free(v->mmap);
    free(v->parena);
    free(v->poff);
    free(v->plen);
    free(v->special);
    pretok_free(v->pre);
    free(v);
}

static int get_flag(const gguf_ctx *g, const char *key, int *val, char *err, size_t errlen) {
    const gguf_kv *kv = gguf_find(g, key);
    if (!kv) return 0;
    if (kv->type != GGUF_T_BOOL) return df_seterr(err, errlen, "metadata key '%s' must be a bool", key);
    *val = kv->v.u != 0;
    return 0;
}

/* A token id from the metadata: kept if it names a token, otherwise the default stays. */
static void get_id(const gguf_ctx *g, const char *key, int32_t n, int32_t *id) {
    int64_t x;
    if (!gguf_find(g, key)) return;
    if (gguf_get_i64(g, key, &x, NULL, 0) != 0) return;
    if (x >= 0 && x < n) *id = (int32_t)x;
}

static int load_tokens(tok_vocab *v, const gguf_ctx *g, char *err, size_t errlen) {
    const gguf_kv *toks = gguf_get_arr(g, "tokenizer.ggml.tokens", -1);
    const gguf_kv *sc = gguf_find(g, "tokenizer.ggml.scores");
    const gguf_kv *tt = gguf_find(g, "tokenizer.ggml.token_type");
    const char *const *strs;
    size_t total = 0, o = 0;
    if (!toks) return df_seterr(err, errlen, "missing tokenizer.ggml.tokens");
    if (toks->arr_type != GGUF_T_STRING) return df_seterr(err, errlen, "tokenizer.ggml.tokens is not a string array");
    if (toks->arr_n == 0 || toks->arr_n >= (uint64_t)INT32_MAX)
        return df_seterr(err, errlen, "tokenizer.ggml.tokens has %llu entries", (unsigned long long)toks->arr_n);
    v->n = (int32_t)toks->arr_n;
    strs = (const char *const *)toks->arr;
    if (sc && (sc->type != GGUF_T_ARRAY || (sc->arr_type != GGUF_T_F32 && sc->arr_type != GGUF_T_I32)))
        return df_seterr(err, errlen, "tokenizer.ggml.scores must be an array of f32 or i32");
    if (sc && sc->arr_n < toks->arr_n)
        return df_seterr(err, errlen, "tokenizer.ggml.scores has %llu entries for %d tokens",
                         (unsigned long long)sc->arr_n, v->n);
    if (tt && (tt->type != GGUF_T_ARRAY || tt->arr_type != GGUF_T_I32))
        return df_seterr(err, errlen, "tokenizer.ggml.token_type must be an array of i32");
    if (tt && tt->arr_n < toks->arr_n)
        return df_seterr(err, errlen, "tokenizer.ggml.token_type has %llu entries for %d tokens",
                         (unsigned long long)tt->arr_n, v->n);

    for (int32_t i = 0; i < v->n; i++) {
        uint64_t l = toks->arr_str_len[i];
        if (l >= UINT32_MAX / 2) return df_seterr(err, errlen, "token %d is too long", i);
        total += (l ? l : 24) + 1;
    }
    v->arena = malloc(total);
    v->text = malloc((size_t)v->n * sizeof *v->text);
    v->tlen = malloc((size_t)v->n * sizeof *v->tlen);
    v->score = malloc((size_t)v->n * sizeof *v->score);
    v->attr = malloc((size_t)v->n * sizeof *v->attr);
    v->eog = calloc((size_t)v->n, 1);
    if (!v->arena || !v->text || !v->tlen || !v->score || !v->attr || !v->eog)
        return df_seterr(err, errlen, "out of memory loading %d tokens", v->n);
    for (int32_t i = 0; i < v->n; i++) {
        uint64_t l = toks->arr_str_len[i];
        v->text[i] = v->arena + o;
        if (l == 0) { /* as llama.cpp: give empty tokens a unique placeholder text */
            l = (uint64_t)snprintf(v->arena + o, 24, "[EMPTY_%d]", (int)i);
        } else {
            memcpy(v->arena + o, strs[i], l);
            v->arena[o + l] = 0;
        }
        v->tlen[i] = (uint32_t)l;
        if (l > v->max_tlen) v->max_tlen = (uint32_t)l;
        o += l + 1;
        if (sc && sc->arr_type == GGUF_T_F32) v->score[i] = ((const float *)sc->arr)[i];
        else if (sc) v->score[i] = (float)((const int32_t *)sc->arr)[i];
        else v->score[i] = 0.0f;
        v->attr[i] = A_NORMAL;
        if (tt) {
            switch (((const int32_t *)tt->arr)[i]) {
            case 1: v->attr[i] = A_NORMAL; break;
            case 2: v->attr[i] = A_UNKNOWN; break;
            case 3: v->attr[i] = A_CONTROL; break;
            case 4: v->attr[i] = A_USER; break;
            case 5: v->attr[i] = A_UNUSED; break;
            case 6: v->attr[i] = A_BYTE; break;
            default: v->attr[i] = 0; break;
            }
        }
    }

    /* text -> id; a repeated text maps to its last id, as in llama.cpp */
    {
        size_t sz = table_size((size_t)v->n);
        v->tmap = malloc(sz * sizeof *v->tmap);
        if (!v->tmap) return df_seterr(err, errlen, "out of memory");
        memset(v->tmap, 0xFF, sz * sizeof *v->tmap);
        v->tmap_mask = sz - 1;
        for (int32_t id = 0; id < v->n; id++) {
            size_t i = (size_t)hash_bytes(0x243F6A8885A308D3ull, v->text[id], v->tlen[id]) & v->tmap_mask;
            for (;;) {
                int32_t k = v->tmap[i];
                if (k < 0 || (v->tlen[k] == v->tlen[id] && memcmp(v->text[k], v->text[id], v->tlen[id]) == 0)) {
                    v->tmap[i] = id;
                    break;
                }
                i = (i + 1) & v->tmap_mask;
            }
        }
    }
    return 0;
}

static int load_merges(tok_vocab *v, const gguf_ctx *g, int required, char *err, size_t errlen) {
    const gguf_kv *mk = gguf_find(g, "tokenizer.ggml.merges");
    const char *const *strs;
    size_t total = 0, o = 0, sz;
    if (!mk) return required ? df_seterr(err, errlen, "missing tokenizer.ggml.merges") : 0;
    if (mk->type != GGUF_T_ARRAY || mk->arr_type != GGUF_T_STRING)
        return df_seterr(err, errlen, "tokenizer.ggml.merges is not a string array");
    if (mk->arr_n >= (uint64_t)INT32_MAX) return df_seterr(err, errlen, "too many merges");
    strs = (const char *const *)mk->arr;
    for (uint64_t i = 0; i < mk->arr_n; i++) {
        total += mk->arr_str_len[i] + 1;
        if (total >= UINT32_MAX) return df_seterr(err, errlen, "tokenizer.ggml.merges is too large");
    }
    v->marena = malloc(total ? total : 1);
    v->merges = malloc((mk->arr_n ? mk->arr_n : 1) * sizeof *v->merges);
    sz = table_size((size_t)mk->arr_n);
    v->mmap = malloc(sz * sizeof *v->mmap);
    if (!v->marena || !v->merges || !v->mmap) return df_seterr(err, errlen, "out of memory loading merges");
    memset(v->mmap, 0xFF, sz * sizeof *v->mmap);
    v->mmap_mask = sz - 1;
    for (uint64_t i = 0; i < mk->arr_n; i++) {
        size_t len = (size_t)mk->arr_str_len[i], sp;
        const char *s = strs[i], *l, *r;
        size_t ll, rl, h;
        merge_ent *m = &v->merges[v->n_merges];
        int dup = 0;
        memcpy(v->marena + o, s, len);
        v->marena[o + len] = 0;
        /* "left right", split at the first space after the first byte */
        for (sp = 1; sp < len && s[sp] != ' '; sp++) {}
        if (len < 2 || sp >= len) {
            o += len + 1;
            continue; /* no pair: can never match */
        }
        m->loff = (uint32_t)o;
        m->llen = (uint32_t)sp;
        m->rlen = (uint32_t)(len - sp - 1);
        m->rank = (int32_t)i;
        l = v->marena + o;
        r = l + sp + 1;
        ll = m->llen;
        rl = m->rlen;
        o += len + 1;
        h = (size_t)merge_hash(l, ll, r, rl) & v->mmap_mask;
        for (;;) {
            int32_t k = v->mmap[h];
            const merge_ent *e;
            if (k < 0) break;
            e = &v->merges[k];
            if (e->llen == ll && e->rlen == rl && memcmp(v->marena + e->loff, l, ll) == 0 &&
                memcmp(v->marena + e->loff + ll + 1, r, rl) == 0) {
                dup = 1; /* the first rank of a pair wins */
                break;
            }
            h = (h + 1) & v->mmap_mask;
        }
        if (dup) continue;
        v->mmap[h] = v->n_merges++;
        if (ll + rl > v->max_merge_len) v->max_merge_len = (uint32_t)(ll + rl);
    }
    return 0;
}

static int text_is(const tok_vocab *v, int32_t id, const char *s) {
    size_t l = strlen(s);
    return v->tlen[id] == l && memcmp(v->text[id], s, l) == 0;
}

static int text_in(const tok_vocab *v, int32_t id, const char *const *list) {
    for (; *list; list++)
        if (text_is(v, id, *list)) return 1;
    return 0;
}

static const char *const EOT_TEXTS[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                        "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                        "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>",
                                        "<end_of_utterance>", NULL};
static const char *const EOM_TEXTS[] = {"<|eom_id|>", NULL};
static const char *const FIM_PRE_TEXTS[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                            "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
                                            "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const FIM_SUF_TEXTS[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                            "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>", "<SUF>",
                                            "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const FIM_MID_TEXTS[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                            "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
                                            "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const FIM_PAD_TEXTS[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const FIM_REP_TEXTS[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
                                            NULL};
static const char *const FIM_SEP_TEXTS[] = {"<|file_sep|>", NULL};
static const char *const EOG_TEXTS[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                                        "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
                                        "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
                                        "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                                        "<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>",
                                        "[e~[", NULL};

/* llama.cpp's text-based detection of EOT/EOM/FIM/EOG tokens and its attribute fix-ups. */
static void detect_special(tok_vocab *v, const gguf_ctx *g) {
    struct {
        const char *key;
        const char *const *texts;
        int32_t id;
    } det[] = {
        {"tokenizer.ggml.eot_token_id", EOT_TEXTS, -1},
        {"tokenizer.ggml.eom_token_id", EOM_TEXTS, -1},
        {"tokenizer.ggml.fim_pre_token_id", FIM_PRE_TEXTS, -1},
        {"tokenizer.ggml.fim_suf_token_id", FIM_SUF_TEXTS, -1},
        {"tokenizer.ggml.fim_mid_token_id", FIM_MID_TEXTS, -1},
        {"tokenizer.ggml.fim_pad_token_id", FIM_PAD_TEXTS, -1},
        {"tokenizer.ggml.fim_rep_token_id", FIM_REP_TEXTS, -1},
        {"tokenizer.ggml.fim_sep_token_id", FIM_SEP_TEXTS, -1},
    };
    const size_t ndet = sizeof det / sizeof det[0];
    int32_t end_id = -1, s_id = -1;
    int has_return = 0, has_call = 0, has_flush = 0, has_end = 0, has_tool_response = 0, has_s = 0;

    get_id(g, "tokenizer.ggml.prefix_token_id", v->n, &det[2].id); /* deprecated names */
    get_id(g, "tokenizer.ggml.suffix_token_id", v->n, &det[3].id);
    get_id(g, "tokenizer.ggml.middle_token_id", v->n, &det[4].id);
    for (size_t k = 0; k < ndet; k++) get_id(g, det[k].key, v->n, &det[k].id);

    /* Ids not given by the metadata are found by their text (the first such token, in id
     * order; llama.cpp walks a hash map, whose order is unspecified). */
    for (int32_t id = 0; id < v->n; id++) {
        for (size_t k = 0; k < ndet; k++) {
            if (det[k].id < 0 && text_in(v, id, det[k].texts)) {
                det[k].id = id;
                v->attr[id] |= A_CONTROL;
            }
        }
    }
    v->eot = det[0].id;
    v->eom = det[1].id;
    for (size_t k = 5; k < 8; k++) /* FIM pad, repo and file-separator end generation */
        if (det[k].id >= 0) v->eog[det[k].id] = 1;

    for (int32_t id = 0; id < v->n; id++) {
        if (text_in(v, id, EOG_TEXTS)) {
            v->eog[id] = 1;
            v->attr[id] |= A_CONTROL;
        }
    }
    for (int32_t id = 0; id < v->n; id++) /* gpt-oss: always render these */
        if (text_is(v, id, "<|channel|>") || text_is(v, id, "<|message|>") || text_is(v, id, "<|start|>") ||
            text_is(v, id, "<|constrain|>"))
            v->attr[id] = A_USER;
    if (v->eos >= 0) v->eog[v->eos] = 1;
    if (v->eot >= 0) v->eog[v->eot] = 1;
    if (v->eom >= 0) v->eog[v->eom] = 1;

    for (int32_t id = 0; id < v->n; id++) {
        if (!v->eog[id]) continue;
        if (text_is(v, id, "<|return|>")) has_return = 1;
        else if (text_is(v, id, "<|call|>") || text_is(v, id, "<|calls|>")) has_call = 1;
        else if (text_is(v, id, "<|flush|>")) has_flush = 1;
        else if (text_is(v, id, "<|end|>")) has_end = 1, end_id = id;
        if (text_is(v, id, "<|tool_response>")) has_tool_response = 1;
        else if (text_is(v, id, "</s>")) has_s = 1, s_id = id;
    }
    /* o200k_harmony / solar-open: "<|end|>" does not end generation there */
    if ((has_return && has_call && has_end) || (has_call && has_flush && has_end)) {
        v->eog[end_id] = 0;
        v->attr[end_id] = A_USER;
    }
    /* Gemma 4 / PaddleOCR: "</s>" is not an end-of-generation token */
    if (has_tool_response && has_s) {
        v->eog[s_id] = 0;
        v->attr[s_id] = A_NORMAL;
    }
}

typedef struct {
    uint32_t len;
    int32_t id;
} len_id;

static int cmp_len_desc(const void *a, const void *b) {
    const len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

static int build_special(tok_vocab *v) {
    len_id *tmp;
    int32_t n = 0;
    for (int32_t id = 0; id < v->n; id++)
        if (v->attr[id] & (A_CONTROL | A_USER | A_UNKNOWN)) n++;
    tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    v->special = malloc((size_t)(n ? n : 1) * sizeof *v->special);
    if (!tmp || !v->special) {
        free(tmp);
        return -1;
    }
    n = 0;
    for (int32_t id = 0; id < v->n; id++)
        if (v->attr[id] & (A_CONTROL | A_USER | A_UNKNOWN)) tmp[n].len = v->tlen[id], tmp[n++].id = id;
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_len_desc);
    for (int32_t i = 0; i < n; i++) v->special[i] = tmp[i].id;
    v->n_special = n;
    free(tmp);
    return 0;
}

static int build_pieces(tok_vocab *v) {
    buf_t b = {0};
    v->poff = malloc((size_t)v->n * sizeof *v->poff);
    v->plen = malloc((size_t)v->n * sizeof *v->plen);
    if (!v->poff || !v->plen) return -1;
    for (int32_t id = 0; id < v->n; id++) {
        v->poff[id] = b.len;
        if (make_piece(v, id, &b) != 0) {
            free(b.p);
            return -1;
        }
        if (b.len - v->poff[id] > INT_MAX / 2) {
            free(b.p);
            return -1;
        }
        v->plen[id] = (uint32_t)(b.len - v->poff[id]);
    }
    v->parena = b.p ? b.p : malloc(1);
    return v->parena ? 0 : -1;
}

static int contains_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (; hay && *hay; hay++) {
        size_t i = 0;
        while (i < n && hay[i] && (hay[i] >= 'A' && hay[i] <= 'Z' ? hay[i] + 32 : hay[i]) == needle[i]) i++;
        if (i == n) return 1;
    }
    return 0;
}

/* llama.cpp's per-model strip attributes (they only matter when cutting special tokens). */
static void strip_attrs(tok_vocab *v, const gguf_ctx *g) {
    const char *name = gguf_get_str(g, "general.name");
    const char *pre = gguf_get_str(g, "tokenizer.ggml.pre");
    const char *arch = gguf_get_str(g, "general.architecture");
    int32_t id;
    if (contains_ci(pre, "jina-v2-de") || contains_ci(pre, "jina-v2-es") || contains_ci(pre, "jina-v2-code") ||
        contains_ci(arch, "nomic-bert-moe") || contains_ci(arch, "jina-bert-v3")) {
        if ((id = lookup(v, "<mask>", 6)) >= 0) v->attr[id] |= A_LSTRIP;
    } else if (contains_ci(name, "phi-3") || contains_ci(name, "phi3")) {
        for (int32_t i = 0; i < v->n_special; i++) v->attr[v->special[i]] |= A_RSTRIP;
        if ((id = lookup(v, "</s>", 4)) >= 0) v->attr[id] |= A_RSTRIP;
        if ((id = lookup(v, "<unk>", 5)) >= 0) v->attr[id] &= ~(uint32_t)A_RSTRIP;
        if ((id = lookup(v, "<s>", 3)) >= 0) v->attr[id] &= ~(uint32_t)A_RSTRIP;
        if ((id = lookup(v, "<|endoftext|>", 13)) >= 0) v->attr[id] &= ~(uint32_t)A_RSTRIP;
    } else if (contains_ci(name, "modern-bert")) {
        if ((id = lookup(v, "[MASK]", 6)) >= 0) v->attr[id] |= A_LSTRIP;
    }
}

int tok_load(const gguf_ctx *g, tok_vocab **out, char *err, size_t errlen) {
    const char *model, *pre_name;
    tok_vocab *v;
    *out = NULL;
    if (!g) return df_seterr(err, errlen, "no GGUF given");
    model = gguf_get_str(g, "tokenizer.ggml.model");
    if (!model) return df_seterr(err, errlen, "missing tokenizer.ggml.model");
    pre_name = gguf_get_str(g, "tokenizer.ggml.pre");
    v = calloc(1, sizeof *v);
    if (!v) return df_seterr(err, errlen, "out of memory");

    if (strcmp(model, "llama") == 0) {
        v->kind = TOK_KIND_SPM;
        v->bos = 1, v->eos = 2, v->unk = 0;
        v->add_space_prefix = 1, v->add_bos = 1, v->add_eos = 0;
    } else if (strcmp(model, "gpt2") == 0 || strcmp(model, "gemma4") == 0) {
        v->kind = TOK_KIND_BPE;
        if (strcmp(model, "gemma4") == 0) {
            pre_name = "gemma4";
            v->bos = v->eos = v->unk = -1;
        } else {
            v->bos = 11, v->eos = 11, v->unk = -1;
        }
    } else {
        tok_free(v);
        return df_seterr(err, errlen, "unsupported tokenizer model '%s' (supported: llama, gpt2, gemma4)", model);
    }

    if (load_tokens(v, g, err, errlen) != 0) goto fail;
    if (v->kind == TOK_KIND_BPE) {
        char perr[256];
        if (pretok_create(pre_name, &v->pre, perr, sizeof perr) != 0) {
            df_seterr(err, errlen, "%s", perr);
            goto fail;
        }
        v->pre_flags = pretok_flags(v->pre);
        if (v->pre_flags & PRETOK_ADD_BOS) v->add_bos = 1;
        if (v->pre_flags & PRETOK_NO_BOS) v->bos = -1;
        /* Kimi-K2 vocabularies come without merges */
        if (load_merges(v, g, strcmp(pretok_name(v->pre), "kimi-k2") != 0, err, errlen) != 0) goto fail;
    }
    if (get_flag(g, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err, errlen) != 0) goto fail;

    /* default ids that do not exist are dropped; metadata ids must name a token */
    if (v->bos >= v->n) v->bos = -1;
    if (v->eos >= v->n) v->eos = -1;
    if (v->unk >= v->n) v->unk = -1;
    get_id(g, "tokenizer.ggml.bos_token_id", v->n, &v->bos);
    get_id(g, "tokenizer.ggml.eos_token_id", v->n, &v->eos);
    get_id(g, "tokenizer.ggml.unknown_token_id", v->n, &v->unk);
    if (get_flag(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err, errlen) != 0) goto fail;
    if (get_flag(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err, errlen) != 0) goto fail;
    if (v->pre_flags & PRETOK_FORCE_BOS) v->add_bos = 1;

    detect_special(v, g);
    if (build_special(v) != 0 || build_pieces(v) != 0) {
        df_seterr(err, errlen, "out of memory building the tokenizer tables");
        goto fail;
    }
    strip_attrs(v, g);

    /* byte fallback of each byte */
    for (int b = 0; b < 256; b++) {
        char hex[8], raw[1] = {(char)b};
        int32_t id;
        snprintf(hex, sizeof hex, "<0x%02X>", b);
        if (v->kind == TOK_KIND_SPM) {
            id = lookup(v, hex, 6);
            if (id < 0) id = lookup(v, raw, 1);
            if (id < 0) id = v->unk;
        } else if (v->pre_flags & PRETOK_BYTE_ENCODE) {
            id = lookup(v, raw, 1); /* llama.cpp looks the raw byte up; usually absent */
        } else {
            id = lookup(v, hex, 6);
        }
        v->byte_tok[b] = id;
    }
    *out = v;
    return 0;
fail:
    tok_free(v);
    return -1;
}

/* ------------------------------------------------------------------------------------ */
/* accessors                                                                             */

int tok_n_vocab(const tok_vocab *v) { return v->n; }
int tok_kind(const tok_vocab *v) { return v->kind; }
int32_t tok_bos(const tok_vocab *v) { return v->bos; }
int32_t tok_eos(const tok_vocab *v) { return v->eos; }
int tok_add_bos(const tok_vocab *v) { return v->add_bos && v->bos >= 0; }
int tok_add_eos(const tok_vocab *v) { return v->add_eos && v->eos >= 0; }
int tok_is_eog(const tok_vocab *v, int32_t id) { return id >= 0 && id < v->n && v->eog[id]; }
const char *tok_pre_name(const tok_vocab *v) { return v->pre ? pretok_name(v->pre) : "default"; }

const char *tok_text(const tok_vocab *v, int32_t id) {
    if (!v || id < 0 || id >= v->n) return NULL;
    return v->text[id];
}

int tok_piece(const tok_vocab *v, int32_t id, int render_special, char *buf, int buflen) {
    uint32_t n;
    if (!v || id < 0 || id >= v->n) return -1;
    if (!render_special && (v->attr[id] & (A_UNKNOWN | A_CONTROL))) return 0;
    n = v->plen[id];
    if (buf && buflen > 0) memcpy(buf, v->parena + v->poff[id], n < (uint32_t)buflen ? n : (size_t)buflen);
    return (int)n;
}

/* ------------------------------------------------------------------------------------ */
/* encoding                                                                              */

typedef struct {
    int32_t prev, next;
    uint32_t off, n; /* bytes of the symbol in the text being merged */
} sym_t;

typedef struct {
    float score;   /* SPM: higher first */
    int32_t rank;  /* BPE: lower first */
    int32_t left, right;
    uint32_t size;
} bigram_t;

typedef struct {
    const tok_vocab *v;
    int32_t *out;
    int max;
    size_t count;
    sym_t *sym;
    size_t sym_cap;
    bigram_t *heap;
    size_t heap_n, heap_cap;
    buf_t text;         /* SPM: escaped fragment; BPE: escaped fragment (Gemma 4) */
    pretok_words words;
    int oom;
} session;

static void emit(session *s, int32_t id) {
    if (s->count < (size_t)s->max) s->out[s->count] = id;
    s->count++;
}

/* heap order: is a before b? */
static int bg_before(int spm, const bigram_t *a, const bigram_t *b) {
    if (spm) {
        if (a->score != b->score) return a->score > b->score;
    } else if (a->rank != b->rank) {
        return a->rank < b->rank;
    }
    return a->left < b->left;
}

static void heap_push(session *s, int spm, bigram_t x) {
    size_t i;
    if (s->heap_n == s->heap_cap) {
        size_t nc = s->heap_cap ? s->heap_cap * 2 : 256;
        bigram_t *nh = realloc(s->heap, nc * sizeof *nh);
        if (!nh) {
            s->oom = 1;
            return;
        }
        s->heap = nh;
        s->heap_cap = nc;
    }
    i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bg_before(spm, &x, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = x;
}

static bigram_t heap_pop(session *s, int spm) {
    bigram_t top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bg_before(spm, &s->heap[c + 1], &s->heap[c])) c++;
        if (!bg_before(spm, &s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n > 0) s->heap[i] = last;
    return top;
}

static size_t utf8_len_lead(unsigned char c) {
    static const uint8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[c >> 4];
}

/* Split text into one symbol per UTF-8 character (by the lead byte, clipped at the end). */
static int make_symbols(session *s, const char *t, size_t len, size_t *nsym) {
    size_t n = 0, off = 0;
    if (len + 1 > s->sym_cap) {
        size_t nc = len + 1;
        sym_t *ns;
        if (nc > SIZE_MAX / sizeof *ns) return -1;
        ns = realloc(s->sym, nc * sizeof *ns);
        if (!ns) return -1;
        s->sym = ns;
        s->sym_cap = nc;
    }
    while (off < len) {
        size_t k = utf8_len_lead((unsigned char)t[off]);
        if (k > len - off) k = len - off;
        s->sym[n].off = (uint32_t)off;
        s->sym[n].n = (uint32_t)k;
        s->sym[n].prev = (int32_t)n - 1;
        off += k;
        s->sym[n].next = off == len ? -1 : (int32_t)n + 1;
        n++;
    }
    *nsym = n;
    return 0;
}

static void spm_try(session *s, const char *t, int32_t l, int32_t r) {
    const tok_vocab *v = s->v;
    size_t len;
    int32_t id;
    if (l < 0 || r < 0) return;
    len = (size_t)s->sym[l].n + s->sym[r].n;
    id = lookup(v, t + s->sym[l].off, len);
    if (id < 0) return;
    heap_push(s, 1, (bigram_t){v->score[id], 0, l, r, (uint32_t)len});
}

static void emit_bytes(session *s, const char *p, size_t n) {
    for (size_t j = 0; j < n; j++) {
        int32_t id = s->v->byte_tok[(unsigned char)p[j]];
        if (id >= 0) emit(s, id);
    }
}

static void bpe_try(session *s, const char *w, int32_t l, int32_t r) {
    int32_t rank;
    const sym_t *L, *R;
    if (l < 0 || r < 0) return;
    L = &s->sym[l];
    R = &s->sym[r];
    rank = merge_rank(s->v, w + L->off, L->n, w + R->off, R->n);
    if (rank < 0) return;
    heap_push(s, 0, (bigram_t){0.0f, rank, l, r, L->n + R->n});
}

/* Merge the n symbols of t, best pair first (SPM: highest score of the
 * merged piece; BPE: lowest merge rank), until nothing merges; then emit
 * each piece, or its bytes when the vocabulary lacks it. */
static int merge_and_emit(session *s, int spm, const char *t, size_t n) {
    void (*try_pair)(session *, const char *, int32_t, int32_t) = spm ? spm_try : bpe_try;
    s->heap_n = 0;
    for (size_t i = 1; i < n; i++) try_pair(s, t, (int32_t)i - 1, (int32_t)i);
    while (s->heap_n > 0 && !s->oom) {
        bigram_t bg = heap_pop(s, spm);
        sym_t *L = &s->sym[bg.left], *R = &s->sym[bg.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != bg.size) continue; /* stale */
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) s->sym[R->next].prev = bg.left;
        try_pair(s, t, L->prev, bg.left);
        try_pair(s, t, bg.left, L->next);
    }
    if (s->oom) return -1;
    for (int32_t i = 0; i != -1; i = s->sym[i].next) {
        const sym_t *y = &s->sym[i];
        int32_t id = lookup(s->v, t + y->off, y->n);
        if (id >= 0) emit(s, id);
        else emit_bytes(s, t + y->off, y->n);
    }
    return 0;
}

/* Merge adjacent symbols by score; t is the escaped text (U+2581 for spaces). */
static int spm_tokenize(session *s, const char *t, size_t len) {
    size_t n;
    if (len == 0) return 0;
    if (len > UINT32_MAX / 2 || len > (size_t)INT32_MAX - 1) return -1;
    if (make_symbols(s, t, len, &n) != 0) return -1;
    return merge_and_emit(s, 1, t, n);
}

/* Byte-pair merge one pre-tokenized word. */
static int bpe_word(session *s, const char *w, size_t len) {
    const tok_vocab *v = s->v;
    size_t n;
    int32_t whole;
    if (len == 0) return 0;
    if (len > UINT32_MAX / 2 || len > (size_t)INT32_MAX - 1) return -1;
    whole = -1;
    if (v->pre_flags & PRETOK_IGNORE_MERGES) {
        whole = lookup(v, w, len);
    } else if (v->pre_flags & PRETOK_NL_WORDS) {
        size_t i = 0;
        while (i < len && w[i] == '\n') i++;
        if (i == len) whole = lookup(v, w, len);
    }
    if (whole >= 0) {
        emit(s, whole);
        return 0;
    }
    if (make_symbols(s, w, len, &n) != 0) return -1;
    return merge_and_emit(s, 0, w, n);
}

/* Append text with ' ' replaced by U+2581 to b. */
static int add_escaped(buf_t *b, const char *t, size_t len) {
    if (buf_reserve(b, len * 3) != 0) return -1;
    for (size_t i = 0; i < len; i++) {
        if (t[i] == ' ') {
            memcpy(b->p + b->len, "\xe2\x96\x81", 3);
            b->len += 3;
        } else {
            b->p[b->len++] = t[i];
        }
    }
    return 0;
}

/* A piece of the input: raw text [off, off+len) or a special token. */
typedef struct {
    size_t off, len;
    int32_t tok; /* -1 for raw text */
} frag_t;

typedef struct {
    frag_t *v;
    size_t n, cap;
} fragvec;

static int frag_push(fragvec *f, size_t off, size_t len, int32_t tok) {
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 16;
        frag_t *nv = realloc(f->v, nc * sizeof *nv);
        if (!nv) return -1;
        f->v = nv;
        f->cap = nc;
    }
    f->v[f->n++] = (frag_t){off, len, tok};
    return 0;
}

/* Cut the special tokens out of the text, longest first (llama.cpp's tokenizer_st_partition). */
static int partition(const tok_vocab *v, const char *text, size_t len, int parse_special, fragvec *fa) {
    fragvec fb = {0};
    fa->n = 0;
    if (len == 0) return 0;
    if (frag_push(fa, 0, len, -1) != 0) return -1;
    for (int32_t k = 0; k < v->n_special; k++) {
        int32_t id = v->special[k];
        uint32_t a = v->attr[id], tl = v->tlen[id];
        const char *tt = v->text[id];
        int any = 0;
        if (!parse_special && (a & (A_CONTROL | A_UNKNOWN))) continue;
        for (size_t i = 0; i < fa->n && !any; i++)
            if (fa->v[i].tok < 0 && memmem(text + fa->v[i].off, fa->v[i].len, tt, tl)) any = 1;
        if (!any) continue;
        fb.n = 0;
        for (size_t i = 0; i < fa->n; i++) {
            frag_t f = fa->v[i];
            size_t off = f.off, l = f.len;
            if (f.tok >= 0) {
                if (frag_push(&fb, f.off, f.len, f.tok) != 0) goto oom;
                continue;
            }
            while (l > 0) {
                const char *m = memmem(text + off, l, tt, tl);
                size_t mpos, left, roff, rlen;
                if (!m) {
                    if (frag_push(&fb, off, l, -1) != 0) goto oom;
                    break;
                }
                mpos = (size_t)(m - text);
                left = mpos - off;
                if (a & A_LSTRIP)
                    while (left > 0 && c_isspace((unsigned char)text[off + left - 1])) left--;
                if (left > 0 && frag_push(&fb, off, left, -1) != 0) goto oom;
                if (frag_push(&fb, mpos, tl, id) != 0) goto oom;
                roff = mpos + tl;
                rlen = off + l - roff;
                if (a & A_RSTRIP)
                    while (rlen > 0 && c_isspace((unsigned char)text[roff])) roff++, rlen--;
                off = roff;
                l = rlen;
            }
        }
        {
            fragvec t = *fa;
            *fa = fb;
            fb = t;
        }
    }
    free(fb.v);
    return 0;
oom:
    free(fb.v);
    return -1;
}

int tok_encode(const tok_vocab *v, const char *text, size_t len, int add_special, int parse_special,
               int32_t *out, int max, int *n_out, char *err, size_t errlen) {
    session s;
    fragvec frags = {0};
    int rc = -1;
    if (n_out) *n_out = 0;
    if (!v || (!text && len > 0)) return df_seterr(err, errlen, "tok_encode: no vocabulary or no text");
    if (max < 0 || (max > 0 && !out)) return df_seterr(err, errlen, "tok_encode: bad output buffer");
    /* symbol offsets are 32-bit and a word can grow 6-fold when byte-encoded */
    if (len > TOK_MAX_TEXT)
        return df_seterr(err, errlen, "tok_encode: text of %zu bytes is longer than the limit of %d MiB", len,
                         TOK_MAX_TEXT >> 20);
    memset(&s, 0, sizeof s);
    s.v = v;
    s.out = out;
    s.max = max;
    if (partition(v, text, len, parse_special, &frags) != 0) {
        df_seterr(err, errlen, "out of memory while tokenizing");
        goto done;
    }
    if (add_special && v->add_bos && v->bos >= 0) emit(&s, v->bos);
    if (v->kind == TOK_KIND_SPM) {
        int prev_special = 1; /* the start of the text counts as following a special token */
        for (size_t i = 0; i < frags.n; i++) {
            const frag_t *f = &frags.v[i];
            if (f->tok >= 0) {
                emit(&s, f->tok);
                prev_special = 1;
                continue;
            }
            s.text.len = 0;
            if (v->add_space_prefix && prev_special && add_escaped(&s.text, " ", 1) != 0) goto oom;
            if (add_escaped(&s.text, text + f->off, f->len) != 0) goto oom;
            if (spm_tokenize(&s, s.text.p, s.text.len) != 0) goto oom;
            prev_special = 0;
        }
    } else {
        for (size_t i = 0; i < frags.n; i++) {
            const frag_t *f = &frags.v[i];
            const char *t = text + f->off;
            size_t tl = f->len;
            char perr[256];
            if (f->tok >= 0) {
                emit(&s, f->tok);
                continue;
            }
            if (v->pre_flags & PRETOK_ESCAPE_WS) {
                s.text.len = 0;
                if (add_escaped(&s.text, t, tl) != 0) goto oom;
                t = s.text.p;
                tl = s.text.len;
            }
            s.words.len = s.words.n = 0;
            if (pretok_split(v->pre, t, tl, &s.words, perr, sizeof perr) != 0) {
                df_seterr(err, errlen, "%s", perr);
                goto done;
            }
            for (size_t w = 0; w < s.words.n; w++) {
                size_t a = w ? s.words.ends[w - 1] : 0;
                if (bpe_word(&s, s.words.buf + a, s.words.ends[w] - a) != 0) goto oom;
            }
        }
    }
    if (add_special && v->add_eos && v->eos >= 0) emit(&s, v->eos);
    if (s.count > (size_t)INT_MAX) {
        df_seterr(err, errlen, "tok_encode: %zu tokens do not fit in an int", s.count);
        goto done;
    }
    if (n_out) *n_out = (int)s.count;
    if (s.count > (size_t)max) {
        df_seterr(err, errlen, "tok_encode: %zu tokens do not fit in the buffer of %d", s.count, max);
        goto done;
    }
    rc = 0;
    goto done;
oom:
    df_seterr(err, errlen, "out of memory while tokenizing");
done:
    free(frags.v);
    free(s.sym);
    free(s.heap);
    free(s.text.p);
    pretok_words_free(&s.words);
    return rc;
}
