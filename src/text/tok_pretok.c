/*
 * tok_pretok.c - pre-tokenizers for byte-level BPE vocabularies (tokenizer.ggml.pre).
 *
 * Before byte-pair merging, BPE tokenizers cut the text into words with one or more
 * regular expressions. To produce exactly the token ids llama.cpp produces, this file
 * follows the semantics of llama.cpp's unicode_regex_split rather than those of any
 * single regex engine:
 *
 *  - The text is decoded into code points leniently (overlong forms and surrogates keep
 *    their value; any other malformed byte becomes U+FFFD and consumes one byte).
 *  - The expressions of a pre-tokenizer are applied in order; each one cuts every piece
 *    left by the previous one into matches and the gaps between matches.
 *  - The widely used GPT-2, Llama-3, Qwen-2, Qwen-3.5 and Kimi-K2 expressions (and a
 *    few digit/newline helpers) are recognised by their exact text and run by
 *    hand-written splitters with llama.cpp's semantics (e.g. its treatment of
 *    "\s+(?!\S)" at the end of a piece and its ASCII-only case-insensitive contractions).
 *  - Any other expression runs on PCRE2 the way llama.cpp runs it on std::regex: if it
 *    uses Unicode classes (\p{L}, \p{N}, \p{P}, \p{M}, \p{S}), both text and pattern are
 *    "collapsed" to one byte per code point (ASCII stays itself, other code points become
 *    a byte naming their class, non-ASCII white space becomes \v) and matched in 8-bit
 *    mode; otherwise the pattern is matched in UTF mode against the code points with
 *    non-ASCII white space replaced by \v. \s, \d and \w are ASCII-only (no PCRE2_UCP),
 *    as in std::regex, and $ only matches at the very end (PCRE2_DOLLAR_ENDONLY).
 *    std::wregex also sees surrogates (from malformed input), which UTF-8 cannot carry, so
 *    code points from U+D800 up are moved up by 0x800 in both subject and pattern: order
 *    and range membership stay the same and everything is valid UTF-8 (only the last
 *    2048 code points of plane 16 merge, and above-Unicode values join them).
 *  - Each word is re-encoded as UTF-8 and, for byte-level BPE, every byte is replaced by
 *    its GPT-2 byte-to-unicode stand-in.
 *
 * Character classes come from utf8proc (Unicode general categories) plus the Unicode
 * White_Space list.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tok_pretok.h"

#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "util.h"

/* ------------------------------------------------------------------------------------ */
/* expressions, by pre-tokenizer                                                         */

/* The split expressions of each pre-tokenizer family, applied in order. They are data: the
 * patterns of the models' Hugging Face tokenizer.json files in the form llama.cpp v0.4.0
 * uses them (e.g. "(?i:'s|...)" spelled "'[sS]|..."), which must stay byte-identical to
 * llama.cpp's because several are recognised by their exact text (custom_kind). Strings
 * written "\r" / "\n" in one place and as raw CR/LF in another are equivalent to PCRE2. */

static const char *const RX_LLAMA3[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_JAIS2[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}",
    NULL
};
static const char *const RX_DEEPSEEK_LLM[] = {
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
    NULL
};
static const char *const RX_DEEPSEEK3_LLM[] = {
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_YOUTU[] = {
    "[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_DEEPSEEK_CODER[] = {
    "[\r\n]",
    "\\s?\\p{L}+",
    "\\s?\\p{P}+",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}",
    NULL
};
static const char *const RX_FALCON[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "[0-9][0-9][0-9]",
    NULL
};
static const char *const RX_STARCODER[] = {
    "\\p{N}",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    NULL
};
static const char *const RX_GPT2[] = {
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    NULL
};
static const char *const RX_QWEN2[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_QWEN35[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_PORO[] = {
    " ?[^(\\s|.,!?…。，、।۔،)]+",
    NULL
};
static const char *const RX_VIKING[] = {
    " ?[^(\\s|.,!?…。，、।۔،)]+",
    "\\p{N}",
    NULL
};
static const char *const RX_TEKKEN[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_CHAMELEON[] = {
    "<sentinel:[0-9]+>",
    "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
    "([\\t\\n]|    |  )",
    "\\p{N}",
    "[\\p{P}!-/:-@\\[-`{-~]",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    NULL
};
static const char *const RX_GPT4O[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_GRANITE_EMB_MULTI[] = {
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_TINY_AYA[] = {
    "\\d{1,3}(?=(?:\\d{3})*\\b)",
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_KIMI_K2[] = {
    "\\p{Han}+",
    NULL
};
static const char *const RX_SUPERBPE[] = {
    "\\p{N}+",
    "(?=(\\d{3})+(?!\\d))",
    NULL
};
static const char *const RX_BAILINGMOE[] = {
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_SEED_CODER[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_AFMOE[] = {
    "\\p{AFMoE_digits}",
    "[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_LAGUNA[] = {
    "[^\\n]+|[\\n]+",
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_EXAONE_MOE[] = {
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_GEMMA4[] = {
    "[^\\n]+|[\\n]+",
    NULL
};
static const char *const RX_MINICPM5[] = {
    "\\p{N}{1,3}",
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    NULL
};
static const char *const RX_DEFAULT[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
    NULL
};

/* Expressions that llama.cpp runs with a hand-written splitter, and ours. */
enum step_kind {
    SK_REGEX = 0, SK_GPT2, SK_LLAMA3, SK_QWEN2, SK_QWEN35, SK_KIMI, SK_DIGITS3, SK_NEWLINES
};

static const char LLAMA3_ORIGINAL[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int custom_kind(const char *expr) {
    if (strcmp(expr, RX_GPT2[0]) == 0) return SK_GPT2;
    if (strcmp(expr, RX_LLAMA3[0]) == 0 || strcmp(expr, LLAMA3_ORIGINAL) == 0) return SK_LLAMA3;
    if (strcmp(expr, RX_QWEN2[0]) == 0) return SK_QWEN2;
    if (strcmp(expr, RX_QWEN35[0]) == 0) return SK_QWEN35;
    if (strcmp(expr, "\\p{Han}+") == 0) return SK_KIMI;
    if (strcmp(expr, "\\p{AFMoE_digits}") == 0 || strcmp(expr, RX_TINY_AYA[0]) == 0) return SK_DIGITS3;
    if (strcmp(expr, "[^\\n]+|[\\n]+") == 0) return SK_NEWLINES;
    return SK_REGEX;
}

typedef struct {
    const char *name;
    const char *const *exprs;
    int flags;
} pre_def;

#define BE PRETOK_BYTE_ENCODE
static const pre_def PRE_DEFS[] = {
    {"default", RX_DEFAULT, BE},
    {"llama3", RX_LLAMA3, BE | PRETOK_IGNORE_MERGES | PRETOK_ADD_BOS},
    {"llama-v3", RX_LLAMA3, BE | PRETOK_IGNORE_MERGES | PRETOK_ADD_BOS},
    {"llama-bpe", RX_LLAMA3, BE | PRETOK_IGNORE_MERGES | PRETOK_ADD_BOS},
    {"falcon3", RX_LLAMA3, BE | PRETOK_IGNORE_MERGES | PRETOK_ADD_BOS},
    {"falcon-h1", RX_LLAMA3, BE | PRETOK_IGNORE_MERGES | PRETOK_ADD_BOS},
    {"pixtral", RX_LLAMA3, BE | PRETOK_IGNORE_MERGES | PRETOK_ADD_BOS},
    {"midm-2.0", RX_LLAMA3, BE | PRETOK_IGNORE_MERGES | PRETOK_ADD_BOS},
    {"lfm2", RX_LLAMA3, BE | PRETOK_IGNORE_MERGES | PRETOK_ADD_BOS},
    {"jina-v5-nano", RX_LLAMA3, BE | PRETOK_IGNORE_MERGES | PRETOK_ADD_BOS},
    {"dbrx", RX_LLAMA3, BE},
    {"smaug-bpe", RX_LLAMA3, BE},
    {"glm4", RX_LLAMA3, BE | PRETOK_NO_BOS},
    {"chatglm-bpe", RX_LLAMA3, BE | PRETOK_NO_BOS},
    {"jais-2", RX_JAIS2, BE},
    {"deepseek-llm", RX_DEEPSEEK_LLM, BE},
    {"deepseek-coder", RX_DEEPSEEK_CODER, BE},
    {"deepseek-v3", RX_DEEPSEEK3_LLM, BE},
    {"hunyuan-dense", RX_DEEPSEEK3_LLM, BE},
    {"joyai-llm", RX_DEEPSEEK3_LLM, BE},
    {"youtu", RX_YOUTU, BE | PRETOK_IGNORE_MERGES},
    {"falcon", RX_FALCON, BE},
    {"starcoder", RX_STARCODER, BE},
    {"refact", RX_STARCODER, BE},
    {"command-r", RX_STARCODER, BE},
    {"smollm", RX_STARCODER, BE},
    {"codeshell", RX_STARCODER, BE},
    {"exaone", RX_STARCODER, BE},
    {"minerva-7b", RX_STARCODER, BE},
    {"mellum2", RX_STARCODER, BE},
    {"gpt-2", RX_GPT2, BE},
    {"phi-2", RX_GPT2, BE},
    {"jina-es", RX_GPT2, BE},
    {"jina-de", RX_GPT2, BE},
    {"gigachat", RX_GPT2, BE},
    {"jina-v2-es", RX_GPT2, BE},
    {"jina-v2-de", RX_GPT2, BE},
    {"a.x-4.0", RX_GPT2, BE},
    {"mellum", RX_GPT2, BE},
    {"modern-bert", RX_GPT2, BE},
    {"jina-v1-en", RX_GPT2, BE},
    {"jina-v2-code", RX_GPT2, BE},
    {"roberta-bpe", RX_GPT2, BE},
    {"mpt", RX_GPT2, BE},
    {"olmo", RX_GPT2, BE},
    {"jais", RX_GPT2, BE},
    {"trillion", RX_GPT2, BE},
    {"granite-docling", RX_GPT2, BE},
    {"exaone4", RX_GPT2, BE},
    {"qwen2", RX_QWEN2, BE},
    {"deepseek-r1-qwen", RX_QWEN2, BE},
    {"kormo", RX_QWEN2, BE},
    {"f2llmv2", RX_QWEN2, BE},
    {"stablelm2", RX_QWEN2, BE},
    {"hunyuan", RX_QWEN2, BE},
    {"solar-open", RX_QWEN2, BE},
    {"megrez", RX_QWEN2, BE},
    {"grok-2", RX_QWEN2, BE},
    {"qwen35", RX_QWEN35, BE},
    {"poro-chat", RX_PORO, BE},
    {"bloom", RX_PORO, BE},
    {"gpt3-finnish", RX_PORO, BE},
    {"viking", RX_VIKING, BE},
    {"tekken", RX_TEKKEN, BE | PRETOK_IGNORE_MERGES | PRETOK_ADD_BOS},
    {"chameleon", RX_CHAMELEON, BE | PRETOK_ADD_BOS},
    {"gpt-4o", RX_GPT4O, BE},
    {"llama4", RX_GPT4O, BE},
    {"kanana2", RX_GPT4O, BE},
    {"talkie", RX_GPT4O, BE},
    {"minimax-m2", RX_GPT4O, BE},
    {"granite-embed-multi-97m", RX_GRANITE_EMB_MULTI, BE | PRETOK_IGNORE_MERGES},
    {"tiny_aya", RX_TINY_AYA, BE},
    {"cohere2moe", RX_TINY_AYA, BE},
    {"kimi-k2", RX_KIMI_K2, BE},
    {"superbpe", RX_SUPERBPE, BE},
    {"bailingmoe", RX_BAILINGMOE, BE},
    {"bailingmoe2", RX_BAILINGMOE, BE},
    {"llada-moe", RX_BAILINGMOE, BE},
    {"seed-coder", RX_SEED_CODER, BE},
    {"afmoe", RX_AFMOE, BE},
    {"laguna", RX_LAGUNA, BE},
    {"exaone-moe", RX_EXAONE_MOE, BE},
    {"minicpm5", RX_MINICPM5, BE | PRETOK_IGNORE_MERGES},
    /* SPM-style BPE: raw UTF-8 with U+2581 for spaces, <0xXX> byte fallback */
    {"gemma4", RX_GEMMA4, PRETOK_ESCAPE_WS | PRETOK_NL_WORDS | PRETOK_FORCE_BOS},
    {"granite-embed-multi-311m", RX_GEMMA4, PRETOK_ESCAPE_WS | PRETOK_NL_WORDS | PRETOK_FORCE_BOS},
    {"sarvam-moe", RX_GEMMA4, PRETOK_ESCAPE_WS},
};
#undef BE

/* ------------------------------------------------------------------------------------ */
/* code points                                                                           */

enum {
    CF_UNDEF = 1, CF_NUM = 2, CF_LET = 4, CF_SEP = 8, CF_MARK = 16, CF_PUNCT = 32, CF_SYM = 64,
    CF_CTRL = 128, CF_WS = 256
};

/* Unicode White_Space. */
static int is_white(uint32_t c) {
    if (c >= 0x09 && c <= 0x0D) return 1;
    if (c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || c == 0x2028 || c == 0x2029 || c == 0x202F ||
        c == 0x205F || c == 0x3000)
        return 1;
    return c >= 0x2000 && c <= 0x200A;
}

/* Class bits of a code point; never 0 (that value means "outside the piece"). */
static uint16_t cpt_class(uint32_t c) {
    uint16_t f;
    if (c > 0x10FFFF) return CF_UNDEF;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        f = CF_LET; break;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        f = CF_MARK; break;
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
        f = CF_NUM; break;
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE: case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
        f = CF_PUNCT; break;
    case UTF8PROC_CATEGORY_SM: case UTF8PROC_CATEGORY_SC: case UTF8PROC_CATEGORY_SK:
    case UTF8PROC_CATEGORY_SO:
        f = CF_SYM; break;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
        f = CF_SEP; break;
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
        f = CF_CTRL; break;
    default:
        f = CF_UNDEF; break;
    }
    if (is_white(c)) f |= CF_WS;
    return f;
}

/* CJK ideographs (the \p{Han} of the Kimi-K2 expression): llama.cpp's unicode_cpt_is_han,
 * ranges fixed in code rather than the Unicode Script property (ext. C-F are contiguous). */
static int is_han(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2EBEF) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static uint32_t ascii_lower(uint32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

/* Overlong forms decode as llama.cpp decodes them (C0 AF is '/'), except the
 * overlong NUL (C0 80, E0 80 80, F0 80 80 80): that is malformed input like
 * any other (U+FFFD, one byte consumed), never a NUL in the token stream. */
static uint32_t decode_cpt(const unsigned char *s, size_t len, size_t *pos);
uint32_t pretok_decode_cpt(const unsigned char *s, size_t len, size_t *pos) {
    const size_t i = *pos;
    const uint32_t c = decode_cpt(s, len, pos);
    if (c == 0 && *pos > i + 1) {
        *pos = i + 1;
        return 0xFFFD;
    }
    return c;
}

static uint32_t decode_cpt(const unsigned char *s, size_t len, size_t *pos) {
    size_t i = *pos;
    unsigned b0 = s[i];
    if (b0 < 0x80) {
        *pos = i + 1;
        return b0;
    }
    if ((b0 & 0xE0) == 0xC0) {
        if (i + 1 < len && (s[i + 1] & 0xC0) == 0x80) {
            *pos = i + 2;
            return ((uint32_t)(b0 & 0x1F) << 6) | (s[i + 1] & 0x3Fu);
        }
    } else if ((b0 & 0xF0) == 0xE0) {
        if (i + 2 < len && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80) {
            *pos = i + 3;
            return ((uint32_t)(b0 & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3Fu);
        }
    } else if ((b0 & 0xF8) == 0xF0) {
        if (i + 3 < len && (s[i + 1] & 0xC0) == 0x80 && (s[i + 2] & 0xC0) == 0x80 && (s[i + 3] & 0xC0) == 0x80) {
            *pos = i + 4;
            return ((uint32_t)(b0 & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                   ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3Fu);
        }
    }
    /* a continuation byte, 0xF8..0xFF, or a truncated sequence */
    *pos = i + 1;
    return 0xFFFD;
}

int pretok_encode_cpt(uint32_t c, char out[4]) {
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | ((c >> 18) & 0x07));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68
 * bytes (0x00-0x20, 0x7F-0xA0, 0xAD) for U+0100.. in byte order. */
static uint32_t byte_cpt(uint8_t b) {
    if (b <= 0x20) return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100u + 0x21 + (uint32_t)(b - 0x7F);
    if (b == 0xAD) return 0x100u + 0x21 + 0x22;
    return b;
}

int pretok_byte_to_utf8(uint8_t b, char out[2]) {
    char tmp[4];
    int n = pretok_encode_cpt(byte_cpt(b), tmp);
    memcpy(out, tmp, (size_t)n);
    return n;
}

int pretok_cpt_to_byte(uint32_t c) {
    if ((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)) return (int)c;
    if (c >= 0x100 && c <= 0x120) return (int)(c - 0x100);
    if (c >= 0x121 && c <= 0x142) return (int)(c - 0x121 + 0x7F);
    if (c == 0x143) return 0xAD;
    return -1;
}

/* ------------------------------------------------------------------------------------ */
/* piece lists                                                                           */

typedef struct {
    size_t *v;
    size_t n, cap;
    int oom;
} szvec;

static void sz_push(szvec *s, size_t x) {
    if (s->oom) return;
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        size_t *nv = realloc(s->v, nc * sizeof *nv);
        if (!nv) {
            s->oom = 1;
            return;
        }
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n++] = x;
}

/* One piece [lo, hi) of the code point array being cut by a hand-written splitter. Reads
 * outside the piece give OOR / class 0, as the end of the subject does for a regex. */
#define OOR 0xFFFFFFFFu
typedef struct {
    const uint32_t *cp;
    const uint16_t *fl;
    size_t lo, hi, prev;
    szvec *out;
} span;

static inline uint32_t sp_cp(const span *s, size_t i) { return (i >= s->lo && i < s->hi) ? s->cp[i] : OOR; }
static inline uint16_t sp_fl(const span *s, size_t i) { return (i >= s->lo && i < s->hi) ? s->fl[i] : 0; }

/* Close the current word at end; returns its length. */
static size_t sp_emit(span *s, size_t end) {
    size_t n = end - s->prev;
    if (n) sz_push(s->out, n);
    s->prev = end;
    return n;
}

/* 's 't 'm 'd 're 've 'll at pos (pos is on the apostrophe); returns the match length or 0. */
static size_t contraction_len(const span *s, size_t pos, int any_case) {
    uint32_t a, b;
    if (pos + 1 >= s->hi) return 0;
    a = sp_cp(s, pos + 1);
    if (any_case) a = ascii_lower(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= s->hi) return 0;
    b = sp_cp(s, pos + 2);
    if (any_case) b = ascii_lower(b);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* \s+(?!\S) | \s+ (and \s*[\r\n]+ first when nl is set) at pos. Returns 1 if it consumed. */
static int split_spaces(span *s, size_t *ppos, int nl) {
    size_t pos = *ppos, n = 0, last_nl = 0;
    while (sp_fl(s, pos + n) & CF_WS) {
        uint32_t c = sp_cp(s, pos + n);
        if (c == '\r' || c == '\n') last_nl = pos + n + 1;
        n++;
    }
    if (nl && last_nl > 0) {
        pos = last_nl; /* \s*[\r\n]+ */
    } else if (n > 1 && sp_cp(s, pos + n) != OOR) {
        pos += n - 1; /* \s+(?!\S): leave the last blank to the next word */
    } else if (n > 0) {
        pos += n;
    } else {
        return 0;
    }
    sp_emit(s, pos);
    *ppos = pos;
    return 1;
}

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static void split_gpt2(span *s) {
    size_t pos = s->lo;
    while (pos < s->hi) {
        uint32_t c = sp_cp(s, pos);
        uint16_t f = sp_fl(s, pos), f2;
        if (c == '\'') {
            size_t k = contraction_len(s, pos, 0);
            if (k) {
                pos += sp_emit(s, pos + k);
                continue;
            }
        }
        f2 = (c == ' ') ? sp_fl(s, pos + 1) : f;
        if (f2 & (CF_LET | CF_NUM)) {
            uint16_t cls = (f2 & CF_LET) ? CF_LET : CF_NUM;
            pos += (c == ' ');
            while (f2 & cls) f2 = sp_fl(s, ++pos);
            sp_emit(s, pos);
            continue;
        }
        if (!(f2 & (CF_WS | CF_LET | CF_NUM)) && f2) {
            pos += (c == ' ');
            while (!(f2 & (CF_WS | CF_LET | CF_NUM)) && f2) f2 = sp_fl(s, ++pos);
            sp_emit(s, pos);
            continue;
        }
        if (split_spaces(s, &pos, 0)) continue;
        sp_emit(s, ++pos);
    }
}

/* Llama 3:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * Qwen 2:   the same with \p{N} instead of \p{N}{1,3}.
 * Qwen 3.5: the same as Qwen 2 with marks joining letters ([\p{L}\p{M}]+ and
 *           [^\s\p{L}\p{M}\p{N}]). */
static void split_llama3_like(span *s, int kind) {
    const uint16_t word = (kind == SK_QWEN35) ? (CF_LET | CF_MARK) : CF_LET;
    size_t pos = s->lo;
    while (pos < s->hi) {
        uint32_t c = sp_cp(s, pos);
        uint16_t f = sp_fl(s, pos), f2;
        if (c == '\'') {
            size_t k = contraction_len(s, pos, 1);
            if (k) {
                pos += sp_emit(s, pos + k);
                continue;
            }
        }
        if (!(c == '\r' || c == '\n' || (f & CF_NUM))) {
            if ((f & word) || (sp_fl(s, pos + 1) & word)) {
                pos++;
                while (sp_fl(s, pos) & word) pos++;
                sp_emit(s, pos);
                continue;
            }
        }
        if (f & CF_NUM) {
            if (kind == SK_LLAMA3) {
                size_t ini = pos;
                while (sp_fl(s, pos) & CF_NUM) {
                    if (++pos - ini >= 3) {
                        sp_emit(s, pos);
                        ini = pos;
                    }
                }
            } else {
                pos++;
            }
            sp_emit(s, pos);
            continue;
        }
        f2 = (c == ' ') ? sp_fl(s, pos + 1) : f;
        if (!(f2 & (CF_WS | word | CF_NUM)) && f) {
            uint32_t c2;
            pos += (c == ' ');
            while (!(f2 & (CF_WS | word | CF_NUM)) && f2) f2 = sp_fl(s, ++pos);
            c2 = sp_cp(s, pos);
            while (c2 == '\r' || c2 == '\n') c2 = sp_cp(s, ++pos);
            sp_emit(s, pos);
            continue;
        }
        if (split_spaces(s, &pos, 1)) continue;
        sp_emit(s, ++pos);
    }
}

static int kimi_letter(const span *s, size_t pos) {
    return (sp_fl(s, pos) & CF_LET) && !is_han(sp_cp(s, pos));
}

/* Kimi K2 (llama.cpp's unicode_regex_split_custom_kimi_k2, run for the expression \p{Han}+):
 * [\p{Han}]+ | letter words without Han (marks do not join), with an optional leading
 * non-letter and an optional trailing contraction (ASCII case-insensitive) | \p{N}{1,3} |
 * ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+ */
static void split_kimi(span *s) {
    size_t pos = s->lo;
    while (pos < s->hi) {
        uint32_t c = sp_cp(s, pos);
        uint16_t f = sp_fl(s, pos), f2;
        int lead_ok = !(c == '\r' || c == '\n' || (f & (CF_LET | CF_NUM)));
        if (is_han(c)) {
            while (is_han(sp_cp(s, pos))) pos++;
            sp_emit(s, pos);
            continue;
        }
        if (kimi_letter(s, pos) || (lead_ok && kimi_letter(s, pos + 1))) {
            int lead = 0, letters = 0;
            if (lead_ok) {
                lead = 1;
                pos++;
            }
            while (kimi_letter(s, pos)) {
                letters = 1;
                pos++;
            }
            if (letters || (!lead && kimi_letter(s, pos))) {
                if (!letters) pos++;
                while (kimi_letter(s, pos)) pos++;
                if (sp_cp(s, pos) == '\'') pos += contraction_len(s, pos, 1);
                sp_emit(s, pos);
                continue;
            } else if (lead) {
                pos--;
            }
        }
        if (f & CF_NUM) {
            size_t ini = pos;
            while (sp_fl(s, pos) & CF_NUM) {
                if (++pos - ini >= 3) {
                    sp_emit(s, pos);
                    ini = pos;
                }
            }
            sp_emit(s, pos);
            continue;
        }
        f2 = (c == ' ') ? sp_fl(s, pos + 1) : f;
        if (!(f2 & (CF_WS | CF_LET | CF_NUM)) && f2) {
            uint32_t c2;
            pos += (c == ' ');
            while (!(f2 & (CF_WS | CF_LET | CF_NUM)) && f2) f2 = sp_fl(s, ++pos);
            c2 = sp_cp(s, pos);
            while (c2 == '\r' || c2 == '\n') c2 = sp_cp(s, ++pos);
            sp_emit(s, pos);
            continue;
        }
        if (split_spaces(s, &pos, 1)) continue;
        sp_emit(s, ++pos);
    }
}

/* Digit runs in groups of three from the right (AFMoE, Tiny Aya). As in llama.cpp, text
 * before a digit run is joined to the run's first group. */
static void split_digits3(span *s) {
    size_t pos = s->lo;
    while (pos < s->hi) {
        if (sp_fl(s, pos) & CF_NUM) {
            size_t start = pos, count, cur, rem;
            while (pos < s->hi && (sp_fl(s, pos) & CF_NUM)) pos++;
            count = pos - start;
            rem = count % 3;
            cur = start;
            if (rem) {
                sp_emit(s, cur + rem);
                cur += rem;
            }
            while (cur < start + count) {
                sp_emit(s, cur + 3);
                cur += 3;
            }
            continue;
        }
        pos++;
    }
    if (s->prev < s->hi) sp_emit(s, s->hi);
}

/* [^\n]+|[\n]+ */
static void split_newlines(span *s) {
    size_t pos = s->lo;
    while (pos < s->hi) {
        int nl = s->cp[pos] == '\n';
        while (pos < s->hi && (s->cp[pos] == '\n') == nl) pos++;
        sp_emit(s, pos);
    }
}

/* ------------------------------------------------------------------------------------ */
/* PCRE2 steps                                                                           */

#define MAX_STEPS 8

typedef struct {
    int kind;      /* enum step_kind */
    int collapsed; /* SK_REGEX: matched against the collapsed text */
    pcre2_code *re;
} pstep;

struct tok_pretok {
    const char *name;
    int flags;
    int n_steps;
    int need_collapsed, need_utf;
    pstep steps[MAX_STEPS];
};

/* The Unicode classes llama.cpp collapses, the byte standing for each and its ASCII members. */
typedef struct {
    const char *name;
    const char *byte; /* as a PCRE2 escape */
    const char *ascii;
} ucat;
static const ucat UCATS[] = {
    {"N", "\\xD1", "0-9"},
    {"L", "\\xD2", "A-Za-z"},
    {"P", "\\xD3", "!-#%-*,-/:;?@\\[-\\]_\\{\\}"},
    {"M", "\\xD4", ""},
    {"S", "\\xD5", "\\$\\+<->\\^`\\|~"},
    {"Lu", "\\xD2", "A-Za-z"},
    {"Ll", "\\xD2", "A-Za-z"},
    {"Lt", "\\xD2", "A-Za-z"},
    {"Lm", "\\xD2", "A-Za-z"},
    {"Lo", "\\xD2", "A-Za-z"},
};
#define N_UCATS (sizeof UCATS / sizeof UCATS[0])

/* The class at s (which starts with "\p{"), or NULL; *skip gets the length of the escape. */
static const ucat *ucat_at(const char *s, size_t *skip) {
    const char *close = strchr(s + 3, '}');
    size_t n;
    if (!close) return NULL;
    n = (size_t)(close - (s + 3));
    for (size_t i = 0; i < N_UCATS; i++) {
        if (strlen(UCATS[i].name) == n && memcmp(UCATS[i].name, s + 3, n) == 0) {
            *skip = n + 4;
            return &UCATS[i];
        }
    }
    return NULL;
}

static int uses_ucat(const char *expr) {
    for (const char *p = strstr(expr, "\\p{"); p; p = strstr(p + 1, "\\p{")) {
        size_t skip;
        if (ucat_at(p, &skip)) return 1;
    }
    return 0;
}

/* Rewrite \p{X} into the collapsed byte plus its ASCII members (bracketed outside a class). */
static char *collapse_pattern(const char *expr) {
    size_t n = strlen(expr), o = 0;
    char *out = malloc(n * 8 + 1);
    int inside = 0;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        char ch = expr[i];
        if (ch == '\\' && expr[i + 1] == 'p' && expr[i + 2] == '{') {
            size_t skip;
            const ucat *u = ucat_at(expr + i, &skip);
            if (u) {
                if (!inside) out[o++] = '[';
                memcpy(out + o, u->byte, strlen(u->byte));
                o += strlen(u->byte);
                memcpy(out + o, u->ascii, strlen(u->ascii));
                o += strlen(u->ascii);
                if (!inside) out[o++] = ']';
                i += skip - 1;
                continue;
            }
        }
        if (ch == '\\' && expr[i + 1]) {
            out[o++] = ch;
            out[o++] = expr[++i];
            continue;
        }
        if (ch == '[' && !inside) inside = 1;
        else if (ch == ']' && inside) inside = 0;
        out[o++] = ch;
    }
    out[o] = 0;
    return out;
}

/* Move code points from U+D800 up by 0x800 (see the top of the file). */
static uint32_t utf_shift(uint32_t c) {
    if (c < 0xD800) return c;
    c += 0x800;
    return c > 0x10FFFF ? 0x10FFFF : c;
}

/* The pattern with its literal non-ASCII characters shifted like the subject. */
static char *shift_pattern(const char *expr) {
    size_t n = strlen(expr), pos = 0, o = 0;
    char *out = malloc(n * 2 + 1);
    if (!out) return NULL;
    while (pos < n) {
        uint32_t c = pretok_decode_cpt((const unsigned char *)expr, n, &pos);
        o += (size_t)pretok_encode_cpt(utf_shift(c), out + o);
    }
    out[o] = 0;
    return out;
}

static int compile_step(pstep *st, const char *expr, char *err, size_t errlen) {
    int errcode;
    PCRE2_SIZE erroff;
    char *pat = NULL;
    uint32_t opts = PCRE2_DOLLAR_ENDONLY;
    st->kind = custom_kind(expr);
    if (st->kind != SK_REGEX) return 0;
    st->collapsed = uses_ucat(expr);
    if (st->collapsed) {
        for (const char *p = expr; *p; p++)
            if ((unsigned char)*p >= 0x80)
                return df_seterr(err, errlen, "pre-tokenizer expression mixes Unicode classes and non-ASCII text");
        pat = collapse_pattern(expr);
        if (!pat) return df_seterr(err, errlen, "out of memory compiling a pre-tokenizer expression");
    } else {
        opts |= PCRE2_UTF;
        pat = shift_pattern(expr);
        if (!pat) return df_seterr(err, errlen, "out of memory compiling a pre-tokenizer expression");
    }
    st->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opts, &errcode, &erroff, NULL);
    free(pat);
    if (!st->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(errcode, msg, sizeof msg);
        return df_seterr(err, errlen, "pre-tokenizer expression does not compile at offset %zu: %s", (size_t)erroff,
                         (const char *)msg);
    }
    (void)pcre2_jit_compile(st->re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is used without it */
    return 0;
}

int pretok_create(const char *pre_name, tok_pretok **out, char *err, size_t errlen) {
    const pre_def *d = NULL;
    tok_pretok *p;
    *out = NULL;
    if (!pre_name || !*pre_name) pre_name = "default";
    for (size_t i = 0; i < sizeof PRE_DEFS / sizeof PRE_DEFS[0]; i++)
        if (strcmp(PRE_DEFS[i].name, pre_name) == 0) d = &PRE_DEFS[i];
    if (!d) return df_seterr(err, errlen, "unknown pre-tokenizer type '%s'", pre_name);
    p = calloc(1, sizeof *p);
    if (!p) return df_seterr(err, errlen, "out of memory");
    p->name = d->name;
    p->flags = d->flags;
    for (int i = 0; d->exprs[i]; i++) {
        pstep *st = &p->steps[p->n_steps];
        if (p->n_steps == MAX_STEPS) {
            pretok_free(p);
            return df_seterr(err, errlen, "pre-tokenizer '%s' has too many expressions", pre_name);
        }
        p->n_steps++;
        if (compile_step(st, d->exprs[i], err, errlen) != 0) {
            pretok_free(p);
            return -1;
        }
        if (st->kind == SK_REGEX) {
            if (st->collapsed) p->need_collapsed = 1;
            else p->need_utf = 1;
        }
    }
    *out = p;
    return 0;
}

void pretok_free(tok_pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n_steps; i++) pcre2_code_free(p->steps[i].re);
    free(p);
}

int pretok_flags(const tok_pretok *p) { return p->flags; }
const char *pretok_name(const tok_pretok *p) { return p->name; }

void pretok_words_free(pretok_words *w) {
    free(w->buf);
    free(w->ends);
    memset(w, 0, sizeof *w);
}

/* ------------------------------------------------------------------------------------ */
/* splitting                                                                             */

typedef struct {
    size_t n;           /* code points */
    uint32_t *cp;
    uint16_t *fl;
    char *collapsed;    /* one byte per code point */
    char *utf;          /* valid UTF-8 of the code points, for UTF-mode expressions */
    size_t *boff;       /* byte offset in utf of each code point, n + 1 entries */
    pcre2_match_data *md;
} subject;

static void subject_free(subject *s) {
    free(s->cp);
    free(s->fl);
    free(s->collapsed);
    free(s->utf);
    free(s->boff);
    if (s->md) pcre2_match_data_free(s->md);
}

static int build_subject(const tok_pretok *p, const unsigned char *text, size_t len, subject *s) {
    size_t pos = 0, n = 0;
    s->cp = malloc((len ? len : 1) * sizeof *s->cp);
    s->fl = malloc((len ? len : 1) * sizeof *s->fl);
    if (!s->cp || !s->fl) return -1;
    while (pos < len) {
        uint32_t c = pretok_decode_cpt(text, len, &pos);
        s->cp[n] = c;
        s->fl[n] = cpt_class(c);
        n++;
    }
    s->n = n;
    if (p->need_collapsed) {
        s->collapsed = malloc(n ? n : 1);
        if (!s->collapsed) return -1;
        for (size_t i = 0; i < n; i++) {
            uint32_t c = s->cp[i];
            uint16_t f = s->fl[i];
            unsigned char b;
            if (c < 0x80) b = (unsigned char)c;
            else if (f & CF_WS) b = 0x0B;
            else if (f & CF_LET) b = 0xD2;
            else if (f & CF_NUM) b = 0xD1;
            else if (f & CF_PUNCT) b = 0xD3;
            else if (f & CF_MARK) b = 0xD4;
            else if (f & CF_SYM) b = 0xD5;
            else b = 0xD0;
            s->collapsed[i] = (char)b;
        }
    }
    if (p->need_utf) {
        size_t o = 0;
        s->utf = malloc(n * 4 + 1);
        s->boff = malloc((n + 1) * sizeof *s->boff);
        if (!s->utf || !s->boff) return -1;
        for (size_t i = 0; i < n; i++) {
            uint32_t c = s->cp[i];
            s->boff[i] = o;
            if (c >= 0x80 && (s->fl[i] & CF_WS)) c = 0x0B;
            else c = utf_shift(c);
            o += (size_t)pretok_encode_cpt(c, s->utf + o);
        }
        s->boff[n] = o;
    }
    if (p->need_collapsed || p->need_utf) {
        uint32_t most = 1;
        for (int i = 0; i < p->n_steps; i++) {
            uint32_t cnt = 0;
            if (p->steps[i].re && pcre2_pattern_info(p->steps[i].re, PCRE2_INFO_CAPTURECOUNT, &cnt) == 0 &&
                cnt + 1 > most)
                most = cnt + 1;
        }
        s->md = pcre2_match_data_create(most, NULL);
        if (!s->md) return -1;
    }
    return 0;
}

/* Code point index (relative to the piece) of byte offset x of the piece [lo, hi). */
static size_t utf_index(const subject *s, size_t lo, size_t hi, size_t x) {
    size_t target = s->boff[lo] + x, a = lo, b = hi;
    while (a < b) { /* first index whose offset is >= target */
        size_t m = a + (b - a) / 2;
        if (s->boff[m] < target) a = m + 1;
        else b = m;
    }
    return a - lo;
}

/* Cut the piece [lo, hi) into matches and gaps of the expression. */
static int regex_piece(const pstep *st, const subject *s, size_t lo, size_t hi, szvec *out, char *err,
                       size_t errlen) {
    const char *subj;
    size_t slen, start = 0, prev = 0; /* byte offsets in the piece */
    uint32_t opts = 0, base_opts = 0;
    if (st->collapsed) {
        subj = s->collapsed + lo;
        slen = hi - lo;
    } else {
        subj = s->utf + s->boff[lo];
        slen = s->boff[hi] - s->boff[lo];
        base_opts = PCRE2_NO_UTF_CHECK;
    }
#define CPIDX(x) (st->collapsed ? (x) : utf_index(s, lo, hi, (x)))
    for (;;) {
        PCRE2_SIZE *ov;
        size_t ms, me;
        int rc = pcre2_match(st->re, (PCRE2_SPTR)subj, slen, start, opts | base_opts, s->md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(st->re, (PCRE2_SPTR)subj, slen, start, opts | base_opts | PCRE2_NO_JIT, s->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return df_seterr(err, errlen, "pre-tokenizer expression failed on the input: %s", (const char *)msg);
        }
        ov = pcre2_get_ovector_pointer(s->md);
        ms = ov[0];
        me = ov[1] > ov[0] ? ov[1] : ov[0];
        if (ms > prev) sz_push(out, CPIDX(ms) - CPIDX(prev));
        if (me > ms) sz_push(out, CPIDX(me) - CPIDX(ms));
        prev = me;
        /* after an empty match, the next one may not be empty at the same place */
        opts = (me == ms) ? PCRE2_NOTEMPTY_ATSTART : 0;
        start = me;
        if (start > slen) break;
    }
    if (prev < slen) sz_push(out, CPIDX(slen) - CPIDX(prev));
#undef CPIDX
    return out->oom ? df_seterr(err, errlen, "out of memory in the pre-tokenizer") : 0;
}

static int append_word(pretok_words *w, const subject *s, size_t lo, size_t hi, int byte_encode) {
    size_t need = (hi - lo) * 8;
    if (w->len + need > w->cap) {
        size_t nc = w->cap ? w->cap : 256;
        char *nb;
        while (nc < w->len + need) nc *= 2;
        nb = realloc(w->buf, nc);
        if (!nb) return -1;
        w->buf = nb;
        w->cap = nc;
    }
    if (w->n == w->ncap) {
        size_t nc = w->ncap ? w->ncap * 2 : 64;
        size_t *ne = realloc(w->ends, nc * sizeof *ne);
        if (!ne) return -1;
        w->ends = ne;
        w->ncap = nc;
    }
    for (size_t i = lo; i < hi; i++) {
        char u[4];
        int k = pretok_encode_cpt(s->cp[i], u);
        if (!byte_encode) {
            memcpy(w->buf + w->len, u, (size_t)k);
            w->len += (size_t)k;
            continue;
        }
        for (int j = 0; j < k; j++) w->len += (size_t)pretok_byte_to_utf8((uint8_t)u[j], w->buf + w->len);
    }
    w->ends[w->n++] = w->len;
    return 0;
}

int pretok_split(const tok_pretok *p, const char *text, size_t len, pretok_words *w, char *err, size_t errlen) {
    subject s;
    szvec a = {0}, b = {0};
    int rc = -1;
    memset(&s, 0, sizeof s);
    if (build_subject(p, (const unsigned char *)text, len, &s) != 0) {
        df_seterr(err, errlen, "out of memory in the pre-tokenizer");
        goto done;
    }
    if (s.n == 0) {
        rc = 0;
        goto done;
    }
    sz_push(&a, s.n);
    for (int k = 0; k < p->n_steps; k++) {
        const pstep *st = &p->steps[k];
        size_t at = 0;
        b.n = 0;
        for (size_t i = 0; i < a.n; i++) {
            size_t lo = at, hi = at + a.v[i];
            span sp = {s.cp, s.fl, lo, hi, lo, &b};
            at = hi;
            switch (st->kind) {
            case SK_GPT2: split_gpt2(&sp); break;
            case SK_LLAMA3: case SK_QWEN2: case SK_QWEN35: split_llama3_like(&sp, st->kind); break;
            case SK_KIMI: split_kimi(&sp); break;
            case SK_DIGITS3: split_digits3(&sp); break;
            case SK_NEWLINES: split_newlines(&sp); break;
            default:
                if (regex_piece(st, &s, lo, hi, &b, err, errlen) != 0) goto done;
                break;
            }
        }
        if (a.oom || b.oom) {
            df_seterr(err, errlen, "out of memory in the pre-tokenizer");
            goto done;
        }
        {
            szvec t = a;
            a = b;
            b = t;
        }
    }
    {
        size_t at = 0;
        for (size_t i = 0; i < a.n; i++) {
            if (append_word(w, &s, at, at + a.v[i], (p->flags & PRETOK_BYTE_ENCODE) != 0) != 0) {
                df_seterr(err, errlen, "out of memory in the pre-tokenizer");
                goto done;
            }
            at += a.v[i];
        }
    }
    rc = 0;
done:
    free(a.v);
    free(b.v);
    subject_free(&s);
    return rc;
}
