/*
 * test_grammar.c - the GBNF engine (src/text/grammar.c) and the sampler under a grammar (src/text/sampler.c).
 *
 * 1. Parsing: what llama.cpp's syntax allows (literals and escapes, classes, groups, repetitions {m,n}, comments,
 *    rules over several lines, right recursion) is taken; what is wrong is refused naming it (an undefined rule,
 *    left recursion direct and through a nullable rule, no root, a rule twice, bad escapes, {3,2}, limits).
 * 2. Matching over a synthetic vocabulary (every byte, multi-byte tokens, a character split across tokens,
 *    control tokens without text, an end-of-generation token): sentences are accepted token by token, others
 *    refused at the first wrong token, end-of-generation only where the text is complete; only well-formed
 *    UTF-8 (no overlong form of an allowed character, no surrogate).
 * 3. The mask equals the token-by-token check for every token, in random states of several grammars: the
 *    implicit trie's shared prefixes give the same answers as walking each token alone.
 * 4. Hostile grammars stay bounded: 10,000 identical alternatives, an ambiguous x* x*, nesting deeper than the
 *    stack bound (refused, not crashed), x{0,100000}.
 * 5. The sampler with a grammar: whatever the logits (random, and a model that prefers refused tokens), the
 *    tokens it picks spell a sentence of the grammar and it ends with end-of-generation once complete.
 * `test_grammar --accepts G.gbnf TEXTS` checks texts against a grammar (tests/cli/schema.sh).
 */
#include <cjson/cJSON.h>
#include <string.h>

#include "deltafin.h"
#include "grammar.h"
#include "testutil.h"

/* A vocabulary: the 95 printable ASCII bytes and \n, some words, "é" whole and split in two bytes, a control
 * token (no text) and an end-of-generation token. */
enum { V_MAX = 300 };
static const char *g_piece[V_MAX];
static int g_len[V_MAX], g_n;
static uint8_t g_eog[V_MAX], g_special[V_MAX];
static int32_t g_eog_id;

static void add_tok(const char *s, int len, int eog) {
    g_piece[g_n] = s;
    g_len[g_n] = len;
    g_eog[g_n] = (uint8_t)eog;
    g_n++;
}

static gram_vocab *make_vocab(void) {
    static char bytes[128];
    g_n = 0;
    for (int c = 32; c < 127; c++) bytes[c] = (char)c, add_tok(&bytes[c], 1, 0);
    bytes[10] = '\n';
    add_tok(&bytes[10], 1, 0);
    static const char *words[] = {"true", "false", "null", "\"a", "\":", "{\"", "},", "12", "123", "ab", "abc",
                                  "\xC3\xA9", "\xC3", "\xA9", "a\xC3", "()", "(("};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) add_tok(words[i], (int)strlen(words[i]), 0);
    static char high[128];
    for (int c = 0; c < 128; c++) high[c] = (char)(0x80 + c), add_tok(&high[c], 1, 0); /* every byte above ASCII */
    add_tok("", 0, 0); /* a control token without text */
    g_special[g_n] = 1;
    add_tok("<|x|>", 5, 0); /* a control token with text: only where a state allows it */
    g_eog_id = g_n;
    add_tok("", 0, 1);
    return gram_vocab_new(g_n, g_piece, g_len, g_eog, g_special);
}

static int tok_of(const char *s) {
    for (int i = 0; i < g_n; i++)
        if (g_len[i] == (int)strlen(s) && !memcmp(g_piece[i], s, strlen(s)) && !g_eog[i] && g_len[i]) return i;
    return -1;
}

static gram *parse(const char *text, char *err, size_t n) { return gram_parse(text, strlen(text), err, n); }

/* Feed the text as tokens (greedy longest match in the vocabulary); 0 when every token is accepted. */
static int feed(gram_state *st, const char *text) {
    size_t i = 0, n = strlen(text);
    while (i < n) {
        int best = -1, bl = 0;
        for (int t = 0; t < g_n; t++)
            if (g_len[t] > bl && !g_eog[t] && (size_t)g_len[t] <= n - i && !memcmp(g_piece[t], text + i, (size_t)g_len[t]))
                best = t, bl = g_len[t];
        if (best < 0 || !gram_allows(st, best) || gram_accept(st, best) != 0) return -1;
        i += (size_t)bl;
    }
    return 0;
}

/* Whether text is a sentence: every token accepted, then end-of-generation allowed. */
static int sentence(const char *grammar, const char *text) {
    char err[256];
    gram *g = parse(grammar, err, sizeof err);
    assert_non_null(g);
    gram_vocab *v = make_vocab();
    gram_state *st = gram_state_new(g, v);
    assert_non_null(st);
    const int ok = feed(st, text) == 0 && gram_allows(st, g_eog_id);
    gram_state_free(st);
    gram_vocab_free(v);
    gram_free(g);
    return ok;
}

static void refused(const char *grammar, const char *needle) {
    char err[256] = "";
    gram *g = parse(grammar, err, sizeof err);
    if (g || !strstr(err, needle)) fprintf(stderr, "grammar %.60s: error '%s', wanted '%s'\n", grammar, err, needle);
    assert_null(g);
    assert_non_null(strstr(err, needle));
}

static void test_parse(void **state) {
    (void)state;
    char err[256];
    const char *ok[] = {
        "root ::= \"a\"",
        "root ::= [a-z0-9_] [^\"\\\\] . \"\\x41\\u00e9\\n\\t\\\\\\\"\"  # a comment\n",
        "root ::= (\"a\" | \"b\")* x+ y? z{2} z{1,} z{0,3}\nx ::= \"x\"\ny ::= \"y\"\nz ::= \"z\"\n",
        "root ::=\n  \"{\" (\n    item\n    (\",\" item)*\n  )? \"}\"\nitem ::= [0-9]+\n",
        "root ::= \"a\" root | \"b\"", /* right recursion */
        "root ::= list\nlist ::= item list | \nitem ::= \"i\"",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        gram *g = parse(ok[i], err, sizeof err);
        if (!g) fprintf(stderr, "%s: %s\n", ok[i], err);
        assert_non_null(g);
        gram_free(g);
    }
    refused("root ::= x", "'x' is used but not defined");
    refused("root ::= root \"a\" | \"b\"", "left-recursive");
    refused("root ::= e \"+\"\ne ::= n root\nn ::= \"\" | \"1\"", "left-recursive"); /* through a nullable rule */
    refused("start ::= \"a\"", "no rule 'root'");
    refused("root ::= \"a\"\nroot ::= \"b\"", "defined twice");
    refused("root ::= \"\\q\"", "unknown escape");
    refused("root ::= \"abc", "closing quote");
    refused("root ::= \"a\"{3,2}", "below the least");
    refused("root ::= \"a\"{0,1000000}", "repetition count");
    refused("root ::= []", "empty class");
    refused("root ::= [z-a]", "below its start");
    refused("root ::= *", "nothing before it");
    refused("root ::= (\"a\"", "expected ')'");
    refused("root = \"a\"", "'::='");
}

static const char *JSONISH = "root ::= value\n"
                             "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
                             "object ::= \"{\" ( string \":\" value (\",\" string \":\" value)* )? \"}\"\n"
                             "array ::= \"[\" ( value (\",\" value)* )? \"]\"\n"
                             "string ::= \"\\\"\" [^\"\\\\\\x00-\\x1f]* \"\\\"\"\n"
                             "number ::= \"-\"? ([0-9] | [1-9] [0-9]{1,15})\n";

static void test_match(void **state) {
    (void)state;
    assert_true(sentence(JSONISH, "{\"a\":[1,true,\"x\"],\"b\":null}"));
    assert_true(sentence(JSONISH, "123"));
    assert_true(sentence(JSONISH, "\"\xC3\xA9t\xC3\xA9\"")); /* a character whole and split across tokens */
    assert_false(sentence(JSONISH, "{\"a\":}"));
    assert_false(sentence(JSONISH, "{\"a\":1")); /* incomplete: no end-of-generation yet */
    assert_false(sentence(JSONISH, "tru"));
    assert_false(sentence(JSONISH, "0123"));
    assert_true(sentence("root ::= \"a\" root | \"b\"", "aaab"));
    assert_true(sentence("root ::= [^a]+", "\xC3\xA9xyz"));
    assert_false(sentence("root ::= [a-z]+", "ab\xC3\xA9")); /* é begun: no completion matches [a-z] */
    assert_true(sentence("root ::= \"x\"{2,4}", "xxx"));
    assert_false(sentence("root ::= \"x\"{2,4}", "xxxxx"));
    assert_true(sentence("root ::= \"\" | \"a\"", ""));
    /* only well-formed UTF-8: an overlong "}" (F0 80 81 BD, E0 81 BD, C1 BD), a surrogate, beyond U+10FFFF */
    assert_false(sentence("root ::= \"}\"", "\xF0\x80\x81\xBD"));
    assert_false(sentence("root ::= \"}\"", "\xE0\x81\xBD"));
    assert_false(sentence("root ::= \"}\"", "\xC1\xBD"));
    assert_false(sentence("root ::= [^a]", "\xED\xA0\x80"));
    assert_false(sentence("root ::= [^a]", "\xF4\x90\x80\x80"));
    assert_true(sentence("root ::= [^a]", "\xF0\x9F\x98\x80")); /* U+1F600, byte by byte */

    char err[256];
    gram *g = parse("root ::= \"ab\"", err, sizeof err);
    gram_vocab *v = make_vocab();
    gram_state *st = gram_state_new(g, v);
    assert_false(gram_allows(st, g_eog_id));
    assert_false(gram_allows(st, g_eog_id - 1)); /* a control token: never */
    assert_true(gram_allows(st, tok_of("ab")));
    assert_false(gram_allows(st, tok_of("abc")));
    assert_int_equal(gram_accept(st, tok_of("a")), 0);
    assert_false(gram_done(st));
    assert_int_equal(gram_accept(st, tok_of("b")), 0);
    assert_true(gram_done(st));
    assert_true(gram_allows(st, g_eog_id));
    assert_int_equal(gram_accept(st, tok_of("x")), -1); /* refused: the state is dead */
    uint8_t mask[V_MAX];
    assert_int_equal(gram_mask(st, mask), 0);
    gram_state_free(st);
    gram_vocab_free(v);
    gram_free(g);
}

/* In random states of each grammar (reached by accepting random allowed tokens), the mask is exactly the
 * token-by-token answer. */
static void test_mask_equals_check(void **state) {
    (void)state;
    const char *grammars[] = {JSONISH, "root ::= ([a-c] | \"\xC3\xA9\")* \"!\"",
                              "root ::= \"(\" root \")\" root | \"\"", "root ::= [0-9]{1,3} (\",\" [0-9]{1,3})*"};
    uint64_t seed = 42;
    gram_vocab *v = make_vocab();
    for (size_t gi = 0; gi < sizeof grammars / sizeof *grammars; gi++) {
        char err[256];
        gram *g = parse(grammars[gi], err, sizeof err);
        assert_non_null(g);
        for (int run = 0; run < 30; run++) {
            gram_state *st = gram_state_new(g, v);
            for (int step = 0; step < 12; step++) {
                uint8_t mask[V_MAX];
                const int n = gram_mask(st, mask);
                int count = 0;
                for (int t = 0; t < g_n; t++) {
                    const int a = gram_allows(st, t);
                    if (a != mask[t]) fprintf(stderr, "grammar %zu run %d step %d token %d: mask %d check %d\n", gi, run, step, t, mask[t], a);
                    assert_int_equal(a, mask[t]);
                    count += a;
                }
                assert_int_equal(n, count);
                int pickable[V_MAX], np = 0;
                for (int t = 0; t < g_n; t++)
                    if (mask[t] && !g_eog[t]) pickable[np++] = t;
                if (!np) break;
                assert_int_equal(gram_accept(st, pickable[tu_rand(&seed) % (uint64_t)np]), 0);
            }
            gram_state_free(st);
        }
        gram_free(g);
    }
    gram_vocab_free(v);
}

static void test_hostile(void **state) {
    (void)state;
    char err[256];
    /* 10,000 identical alternatives: one reading after deduplication */
    size_t cap = 16 + 10000 * 6;
    char *big = malloc(cap);
    assert_non_null(big);
    strcpy(big, "root ::= \"a\"");
    for (int i = 1; i < 10000; i++) strcat(big, " | \"a\"");
    assert_true(sentence(big, "a"));
    free(big);
    /* ambiguous: x* x* reads "aaaa" five ways; bounded */
    assert_true(sentence("root ::= x* x*\nx ::= \"a\"", "aaaaaaaaaaaaaaaaaaaa"));
    /* nesting beyond the stack bound: refused, not crashed */
    char *deep = malloc(20002);
    assert_non_null(deep);
    memset(deep, '(', 10000);
    memset(deep + 10000, ')', 10000);
    deep[20000] = 0;
    assert_false(sentence("root ::= \"(\" root \")\" | \"\"", deep));
    free(deep);
    gram *g = parse("root ::= \"a\"{0,100000}", err, sizeof err);
    assert_non_null(g);
    gram_free(g);
    assert_true(sentence("root ::= \"a\"{0,100000}", "aaaa"));
}

/* The sampler under a grammar: random logits, and logits that prefer refused tokens. */
static void test_sampler(void **state) {
    (void)state;
    char err[256];
    gram *g = parse(JSONISH, err, sizeof err);
    gram_vocab *v = make_vocab();
    uint64_t seed = 7;
    for (int run = 0; run < 40; run++) {
        df_sampler_params p = df_sampler_default_params();
        p.seed = (uint64_t)run;
        p.temp = run % 4 == 0 ? 0.0f : 1.0f;
        df_sampler *s = df_sampler_new(&p, g_n);
        assert_non_null(s);
        gram_state *st = gram_state_new(g, v);
        assert_int_equal(sampler_set_grammar(s, st, v), 0);
        gram_state *check = gram_state_new(g, v); /* an independent reading of what comes out */
        float logits[V_MAX];
        int ended = 0;
        for (int step = 0; step < 200 && !ended; step++) {
            for (int t = 0; t < g_n; t++) logits[t] = tu_randf(&seed) * 5;
            logits[tok_of("}")] += run % 2 ? 20.0f : 0.0f; /* a model that wants to close what is not open */
            logits[g_eog_id] += step > 30 ? 30.0f : 0.0f; /* ... and to stop */
            const int32_t t = df_sampler_sample(s, logits);
            assert_true(gram_allows(check, t));
            if (t == g_eog_id) ended = 1;
            else assert_int_equal(gram_accept(check, t), 0);
            df_sampler_accept(s, t);
        }
        gram_state_free(check);
        df_sampler_free(s);
    }
    gram_vocab_free(v);
    gram_free(g);
}

/* A control token with text (a tool format's marker): refused by a state unless it allows it, even where the
 * grammar spells its text (which plain tokens may still spell); allowed, it is taken where the text fits and
 * nowhere else. */
static void test_special(void **state) {
    (void)state;
    char err[256];
    gram *g = parse("root ::= \"<|x|>\" [a-z] | \"<\" [0-9]", err, sizeof err);
    gram_vocab *v = make_vocab();
    const int32_t x = tok_of("<|x|>");
    assert_int_equal(g_special[x], 1);
    gram_state *st = gram_state_new(g, v);
    uint8_t mask[V_MAX];
    assert_false(gram_allows(st, x));
    gram_mask(st, mask);
    assert_false(mask[x]);
    assert_true(mask[tok_of("<")]);
    assert_int_equal(gram_state_allow(st, &x, 1), 0);
    assert_true(gram_allows(st, x));
    gram_mask(st, mask);
    assert_true(mask[x] && mask[tok_of("<")]);
    assert_int_equal(gram_accept(st, x), 0);
    assert_true(gram_allows(st, tok_of("a")));
    assert_false(gram_allows(st, tok_of("1")));
    assert_false(gram_allows(st, x)); /* allowed, but not where its text does not fit */
    gram_state_free(st);
    gram_vocab_free(v);
    gram_free(g);
}

/* A lazy grammar (tool_choice auto): nothing is constrained before the trigger; the token that completes it (here
 * "ab", whose "a" ends the trigger "(a" and whose "b" is the grammar's) starts the grammar fed from the trigger on;
 * then only its sentences; a grammar that refuses what followed the trigger is dropped, not a dead end. */
static void test_lazy(void **state) {
    (void)state;
    char err[256];
    gram *g = parse("root ::= \"(ab\" [0-9]{2} \")\"", err, sizeof err);
    gram_vocab *v = make_vocab();
    df_sampler_params p = df_sampler_default_params();
    p.temp = 0.0f; /* greedy: the logits decide */
    df_sampler *s = df_sampler_new(&p, g_n);
    const char *trig[1] = {"(a"};
    assert_int_equal(sampler_set_grammar_lazy(s, gram_state_new(g, v), v, trig, 1), 0);
    float logits[V_MAX];
    for (int t = 0; t < g_n; t++) logits[t] = 0;
    logits[tok_of("x")] = 10; /* the model wants x: before the trigger it gets it */
    assert_int_equal(df_sampler_sample(s, logits), tok_of("x"));
    df_sampler_accept(s, tok_of("x"));
    assert_int_equal(df_sampler_grammar_done(s), 0);
    df_sampler_accept(s, tok_of("("));
    assert_int_equal(df_sampler_sample(s, logits), tok_of("x")); /* "(" alone is not the trigger */
    df_sampler_accept(s, tok_of("ab")); /* "(a" + "b": triggered, the grammar has read "(ab" */
    const int32_t t1 = df_sampler_sample(s, logits);
    assert_true(t1 == tok_of("12") || t1 == tok_of("123") || (g_len[t1] == 1 && g_piece[t1][0] >= '0' && g_piece[t1][0] <= '9'));
    df_sampler_accept(s, tok_of("12"));
    logits[tok_of("x")] = 0, logits[g_eog_id] = 10; /* a model that wants to stop: the grammar wants ")" first */
    assert_int_equal(df_sampler_sample(s, logits), tok_of(")"));
    df_sampler_accept(s, tok_of(")"));
    assert_int_equal(df_sampler_grammar_done(s), 1);
    df_sampler_free(s);
    /* refused after the trigger: the grammar is dropped, the model goes on as it likes */
    s = df_sampler_new(&p, g_n);
    assert_int_equal(sampler_set_grammar_lazy(s, gram_state_new(g, v), v, trig, 1), 0);
    df_sampler_accept(s, tok_of("("));
    df_sampler_accept(s, tok_of("a\xC3")); /* "(a" then a byte the grammar refuses */
    logits[g_eog_id] = 0, logits[tok_of("x")] = 10;
    assert_int_equal(df_sampler_sample(s, logits), tok_of("x"));
    df_sampler_free(s);
    gram_vocab_free(v);
    gram_free(g);
}

/* test_grammar --accepts GRAMMAR.gbnf TEXTS: every text (a JSON string a line: tests/schema/check.mjs's
 * SCHEMA_DUMP) must be a sentence of the grammar, fed to the engine a byte a token. Prints a summary; exit 1 on any
 * refusal. */
static int accepts(const char *gpath, const char *tpath) {
    size_t n;
    char err[256], *gtext = NULL, *line = NULL;
    FILE *f = fopen(gpath, "rb");
    if (!f) return fprintf(stderr, "cannot open %s\n", gpath), 1;
    gtext = malloc(1 << 21);
    n = gtext ? fread(gtext, 1, (1 << 21) - 1, f) : 0;
    fclose(f);
    if (!gtext) return 1;
    gtext[n] = 0;
    gram *g = gram_parse(gtext, n, err, sizeof err);
    free(gtext);
    if (!g) return fprintf(stderr, "%s: %s\n", gpath, err), 1;
    gram_vocab *v = gram_vocab_bytes();
    FILE *t = fopen(tpath, "rb");
    int total = 0, bad = 0;
    size_t cap = 0;
    while (t && v && getline(&line, &cap, t) > 0) {
        cJSON *j = cJSON_Parse(line);
        if (!cJSON_IsString(j)) {
            cJSON_Delete(j);
            continue;
        }
        gram_state *st = gram_state_new(g, v);
        int ok = st != NULL;
        for (const unsigned char *p = (const unsigned char *)j->valuestring; ok && *p; p++) ok = gram_accept(st, *p) == 0;
        ok = ok && gram_allows(st, 256);
        if (!ok && bad++ < 3) fprintf(stderr, "%s refuses %s", gpath, line);
        total++;
        gram_state_free(st);
        cJSON_Delete(j);
    }
    if (t) fclose(t);
    free(line);
    gram_vocab_free(v);
    gram_free(g);
    printf("%s: %d texts, %d refused\n", gpath, total, bad);
    return bad || !total;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--accepts")) return accepts(argv[2], argv[3]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_match),
        cmocka_unit_test(test_mask_equals_check),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_special), cmocka_unit_test(test_lazy), cmocka_unit_test(test_sampler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
