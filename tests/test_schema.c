/*
 * test_schema.c - the JSON Schema to GBNF compiler (src/text/schema.c).
 *
 * Unit tests: what the grammar of simple schemas holds (rules, ranges, order of properties), every keyword that
 * constrains but is not supported refused with its name and place, malformed keywords refused, and hostile
 * input (invalid JSON, 10,000 levels of nesting, huge enums and counts, $ref loops, bad patterns, random
 * mutations of schemas) giving -1 or a bounded grammar, never a crash.
 *
 * The semantic check is tests/schema/check.mjs: it generates texts from the grammars of many schemas and has a
 * real validator (ajv) check them. It runs this program as its driver: `test_schema --gbnf FILE` prints the
 * grammar of the schema in FILE (or the error, exit 1).
 */
#include <string.h>

#include "schema.h"
#include "testutil.h"

/* The grammar of schema text s; fails the test when it is refused. */
static char *gbnf(const char *s) {
    char *out = NULL, err[512];
    const int rc = schema_to_gbnf(s, strlen(s), &out, err, sizeof err);
    if (rc) fprintf(stderr, "schema %.200s: %s\n", s, err);
    assert_int_equal(rc, 0);
    assert_non_null(out);
    return out;
}

/* Asserts that schema text s[0..len) is refused with a message holding want. */
static void refused_n(const char *s, size_t len, const char *want) {
    char *out = (char *)1, err[512];
    const int rc = schema_to_gbnf(s, len, &out, err, sizeof err);
    if (rc == 0 || !strstr(err, want)) fprintf(stderr, "schema %.200s: rc %d, message '%s', expected '%s'\n", s, rc, rc ? err : "", want);
    assert_int_equal(rc, -1);
    assert_null(out);
    assert_non_null(strstr(err, want));
}

static void refused(const char *s, const char *want) { refused_n(s, strlen(s), want); }

/* Whether grammar g has a line starting with rule (e.g. "root ::= ") that holds text. */
static int rule_has(const char *g, const char *rule, const char *text) {
    const size_t n = strlen(rule);
    for (const char *line = g; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, rule, n)) continue;
        const char *end = strchr(line, '\n');
        const char *hit = strstr(line, text);
        return hit && (!end || hit < end);
    }
    return 0;
}

/* ---- simple schemas */

static void test_simple(void **state) {
    char *g = gbnf("{}");
    assert_true(rule_has(g, "root ::= ", "value"));
    assert_true(rule_has(g, "value ::= ", "object | array | string | number | boolean | null"));
    assert_true(rule_has(g, "space ::= ", "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}"));
    free(g);
    g = gbnf("true");
    assert_true(rule_has(g, "root ::= ", "value"));
    free(g);
    g = gbnf("{\"type\":\"object\"}");
    assert_true(rule_has(g, "root ::= ", "object"));
    assert_true(rule_has(g, "object ::= ", "\"{\" space"));
    free(g);
    g = gbnf("{\"type\":\"integer\"}");
    assert_true(rule_has(g, "integer ::= ", "\"-\"? ( \"0\" | [1-9] [0-9]{0,14} ) space"));
    free(g);
    g = gbnf("{\"type\":[\"boolean\",\"null\"],\"description\":\"d\",\"title\":\"t\",\"examples\":[1],\"default\":null}");
    assert_true(rule_has(g, "root ::= ", "boolean | null"));
    free(g);

    /* properties in order, required always there, optional ones around it, no extra members when closed */
    g = gbnf("{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"string\",\"maxLength\":5},\"a\":{\"type\":\"integer\","
             "\"minimum\":0,\"maximum\":100}},\"required\":[\"a\"],\"additionalProperties\":false}");
    const char *b = strstr(g, "\\\"b\\\""), *a = strstr(g, "\\\"a\\\"");
    assert_non_null(a);
    assert_non_null(b);
    assert_true(b < a);
    assert_true(rule_has(g, "root-b ::= ", "char{0,5}"));
    assert_true(rule_has(g, "root-a ::= ", "\"100\""));
    assert_null(strstr(g, "kv ::="));
    free(g);

    /* open objects: further members whose keys are none of the declared ones */
    g = gbnf("{\"type\":\"object\",\"properties\":{\"ab\":{\"type\":\"integer\"}}}");
    assert_non_null(strstr(g, "root-extra-kv ::= "));
    assert_non_null(strstr(g, "kchar ::= [^\"\\\\\\x00-\\x1F]"));
    free(g);

    /* enum and const as their JSON text */
    g = gbnf("{\"enum\":[\"x\",1.5,null,{\"k\":[true]}],\"type\":[\"string\",\"null\",\"object\"]}");
    assert_true(rule_has(g, "root ::= ", "( \"\\\"x\\\"\" | \"null\" | \"{\" space \"\\\"k\\\"\" space \":\" space \"[\" space \"true\" space \"]\" space \"}\" ) space"));
    assert_false(rule_has(g, "root ::= ", "1.5"));
    free(g);
    g = gbnf("{\"const\":\"q\\\"\"}");
    assert_true(rule_has(g, "root ::= ", "\"\\\"q\\\\\\\"\\\"\" space"));
    free(g);

    /* arrays */
    g = gbnf("{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"minItems\":2,\"maxItems\":4}");
    assert_true(rule_has(g, "root ::= ", "boolean ( \",\" space boolean ){1,3}"));
    free(g);
    g = gbnf("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"null\"}],\"items\":false}");
    assert_true(rule_has(g, "root ::= ", "\"[\" space null? \"]\" space"));
    free(g);

    /* integer ranges: exact, digit by digit */
    g = gbnf("{\"type\":\"integer\",\"minimum\":-5,\"maximum\":5}");
    assert_true(rule_has(g, "root ::= ", "( \"-\" [1-5] | [0-5] ) space"));
    free(g);
    g = gbnf("{\"type\":\"integer\",\"exclusiveMinimum\":0}");
    assert_true(rule_has(g, "root ::= ", "[1-9] | [1-9] [0-9]{1,14}"));
    free(g);
    g = gbnf("{\"type\":\"integer\",\"minimum\":3,\"exclusiveMinimum\":true}"); /* draft 4 */
    assert_true(rule_has(g, "root ::= ", "[4-9]"));
    free(g);

    /* numbers with whole bounds: no exponent */
    g = gbnf("{\"type\":\"number\",\"minimum\":0,\"maximum\":1}");
    assert_true(rule_has(g, "root ::= ", "\"0\" ( \".\" [0-9]{1,16} )? | \"1\" ( \".\" \"0\"{1,16} )?"));
    assert_false(rule_has(g, "root ::= ", "[eE]"));
    free(g);

    /* strings: patterns, formats */
    g = gbnf("{\"type\":\"string\",\"pattern\":\"^[a-z]+(-[0-9]+)*$\"}");
    assert_true(rule_has(g, "root ::= ", "\"\\\"\" [a-z]+ ( \"-\" [0-9]+ )* \"\\\"\" space"));
    free(g);
    g = gbnf("{\"type\":\"string\",\"pattern\":\"ab\"}"); /* unanchored: anything around */
    assert_true(rule_has(g, "root ::= ", "\"\\\"\" char* \"ab\" char* \"\\\"\" space"));
    free(g);
    g = gbnf("{\"type\":\"string\",\"format\":\"date-time\"}");
    assert_true(rule_has(g, "root ::= ", "date-time"));
    assert_true(rule_has(g, "date-time ::= ", "date \"T\" time"));
    assert_true(rule_has(g, "leap-year ::= ", "[13579] [26]"));
    free(g);
    g = gbnf("{\"type\":\"string\",\"maxLength\":1000000000}"); /* lowered to the limit */
    assert_true(rule_has(g, "root ::= ", "char{0,10000}"));
    free(g);
    g = gbnf("{\"type\":\"integer\",\"format\":\"int32\"}"); /* format on a non-string: an annotation */
    assert_true(rule_has(g, "root ::= ", "integer"));
    free(g);
}

/* ---- $ref, anyOf, allOf */

static void test_refs(void **state) {
    char *g = gbnf("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},"
                   "{\"type\":\"null\"}]}},\"required\":[\"next\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/node\"}");
    assert_true(rule_has(g, "root ::= ", "node"));
    assert_true(rule_has(g, "node-next ::= ", "node | null"));
    free(g);
    g = gbnf("{\"definitions\":{\"a b\":{\"type\":\"boolean\"}},\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/a%20b\"}}");
    assert_true(rule_has(g, "a-b ::= ", "boolean"));
    free(g);
    g = gbnf("{\"type\":\"object\",\"properties\":{\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}}}"); /* the root */
    assert_true(rule_has(g, "root-kids ::= ", "root"));
    free(g);
    g = gbnf("{\"allOf\":[{\"$ref\":\"#/$defs/b\"},{\"properties\":{\"y\":{\"type\":\"null\"}},\"required\":[\"y\"]}],"
             "\"$defs\":{\"b\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"null\"}}}}}");
    assert_non_null(strstr(g, "\\\"x\\\""));
    assert_non_null(strstr(g, "\\\"y\\\""));
    free(g);
    g = gbnf("{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}");
    assert_true(rule_has(g, "root ::= ", "string | integer"));
    free(g);

    refused("{\"$ref\":\"#\"}", "no finite value");
    refused("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "no finite value");
    refused("{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/a\"}", "before any text");
    refused("{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}", "no finite value");
    refused("{\"$ref\":\"#/$defs/missing\"}", "points to nothing");
    refused("{\"$ref\":\"other.json#/a\"}", "'$ref' 'other.json#/a' at the root is not supported");
    refused("{\"$ref\":\"#anchor\"}", "'$ref'");
    refused("{\"$ref\":5}", "'$ref' at the root must be a string");
    refused("{\"properties\":{\"a\":{\"$id\":\"a.json\",\"$ref\":\"#\"}}}", "'$id' at /properties/a is not supported");
    free(gbnf("{\"$id\":\"https://example.com/s.json\",\"$schema\":\"https://json-schema.org/draft/2020-12/schema\"}"));
    refused("{\"$ref\":\"#/$defs/a\",\"minimum\":1,\"$defs\":{\"a\":{}}}", "'minimum' together with '$ref'");
    refused("{\"allOf\":[{\"type\":\"string\"},{\"minLength\":2}]}", "joins schemas that are not objects");
    refused("{\"allOf\":[{\"type\":\"object\"},{\"maxProperties\":2}]}", "'maxProperties' at the root is not supported");
    refused("{\"allOf\":[{\"type\":\"object\"},{\"additionalProperties\":false}]}", "'additionalProperties' in 'allOf'");
    refused("{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"string\"}}},{\"properties\":{\"a\":{\"type\":\"integer\"}}}]}", "two different schemas");
    refused("{\"anyOf\":[]}", "'anyOf' at the root must be a non-empty list");
    refused("{\"anyOf\":[false]}", "allows nothing");
    refused("{\"anyOf\":[{}],\"type\":\"string\"}", "'type' together with 'anyOf'");
}

/* ---- what is refused */

static void test_unsupported(void **state) {
    static const char *const keywords[][2] = {
        {"patternProperties", "{}"}, {"dependentRequired", "{}"}, {"dependentSchemas", "{}"}, {"dependencies", "{}"},
        {"not", "{}"}, {"if", "{}"}, {"then", "{}"}, {"else", "{}"}, {"uniqueItems", "true"}, {"multipleOf", "2"},
        {"minProperties", "1"}, {"maxProperties", "3"}, {"contains", "{}"}, {"minContains", "1"}, {"maxContains", "1"},
        {"propertyNames", "{}"}, {"unevaluatedProperties", "false"}, {"unevaluatedItems", "false"},
        {"$dynamicRef", "\"#a\""}, {"$recursiveRef", "\"#\""},
    };
    for (size_t i = 0; i < sizeof keywords / sizeof *keywords; i++) {
        char s[256], want[128];
        snprintf(s, sizeof s, "{\"type\":\"object\",\"properties\":{\"a\":{\"%s\":%s}}}", keywords[i][0], keywords[i][1]);
        snprintf(want, sizeof want, "'%s' at /properties/a is not supported", keywords[i][0]);
        refused(s, want);
    }
    refused("{\"patternProperties\":{\"^a\":{}}}", "'patternProperties' at the root is not supported");
    refused("{\"type\":\"array\",\"items\":{\"properties\":{\"x~/\":{\"not\":{}}}}}", "'not' at /items/properties/x~0~1 is not supported");

    /* patterns beyond the regular subset */
    static const char *const patterns[][2] = {
        {"^(a)\\\\1$", "backreference"}, {"^(?<n>a)\\\\k<n>$", "backreference"}, {"^(?=a)a$", "lookahead"},
        {"^(?!a).$", "lookahead"}, {"(?<=a)b", "lookbehind"}, {"(?<!a)b", "lookbehind"}, {"a^b", "'^' anchor"},
        {"a$b", "'$' anchor"}, {"(^a)", "'^' anchor"}, {"\\\\bword", "word boundary"}, {"\\\\Bx", "word boundary"},
        {"\\\\p{L}", "Unicode property"}, {"[", "without its ']'"}, {"(a", "without its ')'"}, {"a)", "without its '('"},
        {"*a", "nothing to repeat"}, {"a**", "nothing to repeat"}, {"a{2,1}", "n below m"}, {"a{20000}", "above 10000"},
        {"[]", "empty class"}, {"[z-a]", "out of order"}, {"\\\\q", "invalid escape"}, {"a{", "lone '{'"},
        {"\\\\uD800", "lone surrogate"}, {"[\\\\d-z]", "class range"}, {"\\\\", "at the end"}, {"\\\\01", "octal"},
    };
    for (size_t i = 0; i < sizeof patterns / sizeof *patterns; i++) {
        char s[256];
        snprintf(s, sizeof s, "{\"type\":\"string\",\"pattern\":\"%s\"}", patterns[i][0]);
        refused(s, patterns[i][1]);
    }
    refused("{\"type\":\"string\",\"pattern\":\"^a$\",\"minLength\":1}", "'minLength' together with 'pattern'");
    refused("{\"type\":\"string\",\"format\":\"email\"}", "'format' 'email' at the root is not supported");
    refused("{\"type\":\"string\",\"format\":\"date\",\"maxLength\":3}", "'maxLength' together with 'format'");
    refused("{\"type\":\"number\",\"minimum\":0.5}", "'minimum' 0.5 at the root is not supported");
    refused("{\"type\":\"number\",\"exclusiveMaximum\":2.25}", "'exclusiveMaximum' 2.25");
    refused("{\"enum\":[1,2],\"minimum\":2}", "'minimum' together with 'enum'");
    refused("{\"enum\":[1],\"const\":1}", "'enum' together with 'const'");
    refused("{\"anyOf\":[{}],\"oneOf\":[{}]}", "'anyOf' together with 'oneOf'");
}

/* ---- malformed keywords, impossible schemas, limits */

static void test_malformed(void **state) {
    static const char *const cases[][2] = {
        {"{\"type\":5}", "'type' at the root"},
        {"{\"type\":\"text\"}", "'text' is not a JSON Schema type"},
        {"{\"type\":[]}", "'type' at the root"},
        {"{\"properties\":[]}", "'properties' at the root must be an object"},
        {"{\"required\":\"a\"}", "'required' at the root must be a list"},
        {"{\"required\":[1]}", "'required' at the root must be a list"},
        {"{\"additionalProperties\":1}", "'additionalProperties'"},
        {"{\"minItems\":-1}", "'minItems' at the root must be a whole number"},
        {"{\"minItems\":1.5}", "'minItems'"},
        {"{\"maxLength\":\"3\"}", "'maxLength'"},
        {"{\"minLength\":10001}", "'minLength' 10001 at the root is above the limit"},
        {"{\"minLength\":5,\"maxLength\":2}", "'minLength' 5 at the root is above 'maxLength' 2"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "'minItems' 3"},
        {"{\"type\":\"array\",\"prefixItems\":[{}],\"items\":false,\"minItems\":2}", "'minItems' 2"},
        {"{\"enum\":{}}", "'enum' at the root must be a list"},
        {"{\"enum\":[]}", "allows no value"},
        {"{\"type\":\"string\",\"enum\":[1,2]}", "allows no value"},
        {"{\"items\":5}", "'items' at the root must be a schema"},
        {"{\"prefixItems\":{}}", "'prefixItems' at the root must be a list"},
        {"{\"pattern\":5}", "'pattern' at the root must be a string"},
        {"{\"format\":5}", "'format' at the root must be a string"},
        {"{\"minimum\":\"0\"}", "'minimum' at the root must be a finite number"},
        {"{\"minimum\":1e400}", "'minimum' at the root must be a finite number"},
        {"{\"type\":\"integer\",\"minimum\":1e300}", "beyond the 15 digits"},
        {"{\"type\":\"integer\",\"maximum\":-1e20}", "beyond the 15 digits"},
        {"{\"type\":\"integer\",\"minimum\":3,\"maximum\":2.5}", "no integer"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":1,\"maximum\":1}", "no number"},
        {"{\"enum\":[1e400]}", "beyond a double"},
        {"{\"properties\":{\"a\":false},\"required\":[\"a\"]}", "schema false"},
        {"{\"required\":[\"a\"],\"additionalProperties\":false}", "'additionalProperties' is false"},
        {"{\"properties\":{\"a\":5}}", "the schema at /properties/a is not an object or a boolean"},
        {"false", "allows nothing"},
        {"5", "not an object or a boolean"},
        {"{\"type\":\"string\",\"type\":\"integer\"}", "'type' appears twice"},
        {"{\"enum\":[\"a\\u0000b\"]}", "\\u0000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) refused(cases[i][0], cases[i][1]);
}

/* ---- hostile input */

static char *repeat_text(const char *open, const char *middle, const char *close, int n) {
    const size_t lo = strlen(open), lm = strlen(middle), lc = strlen(close);
    char *s = malloc((lo + lc) * (size_t)n + lm + 1);
    assert_non_null(s);
    size_t m = 0;
    for (int i = 0; i < n; i++) memcpy(s + m, open, lo), m += lo;
    memcpy(s + m, middle, lm), m += lm;
    for (int i = 0; i < n; i++) memcpy(s + m, close, lc), m += lc;
    s[m] = 0;
    return s;
}

static void test_hostile(void **state) {
    /* invalid JSON */
    static const char *const bad[] = {"", " ", "{", "}", "nul", "{}x", "{\"a\":}", "[1,]", "{\"type\":\"object\",}", "\"\\u12\""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) refused(bad[i], "not valid JSON");
    refused_n("{\"type\":\"null\"}", 5, "not valid JSON"); /* the length counts, not the NUL */
    char *out, err[256];
    assert_int_equal(schema_to_gbnf("{}", 2, &out, err, 0), 0); /* no room for a message: fine */
    free(out);

    /* nesting: 10,000 levels (beyond cJSON's limit), then 500 (beyond ours), through items and properties */
    char *s = repeat_text("{\"items\":", "{}", "}", 10000);
    refused(s, "not valid JSON");
    free(s);
    s = repeat_text("{\"type\":\"array\",\"items\":", "{}", "}", 500);
    refused(s, "nested deeper than 64");
    free(s);
    s = repeat_text("{\"properties\":{\"a\":", "{}", "}}", 300);
    refused(s, "nested deeper than 64");
    free(s);
    s = repeat_text("{\"anyOf\":[", "{}", "]}", 60); /* within the limits */
    free(gbnf(s));
    free(s);

    /* a chain of 200 definitions (two levels each): too deep; 25: fine */
    for (int n = 25; n <= 200; n += 175) {
        char *t = malloc((size_t)n * 64 + 64);
        assert_non_null(t);
        size_t m = (size_t)sprintf(t, "{\"$ref\":\"#/$defs/d0\",\"$defs\":{");
        for (int i = 0; i < n; i++)
            m += (size_t)sprintf(t + m, "%s\"d%d\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/d%d\"}}", i ? "," : "", i, i + 1);
        m += (size_t)sprintf(t + m, ",\"d%d\":{\"type\":\"null\"}}}", n);
        if (n == 25) free(gbnf(t));
        else refused(t, "nested deeper than 64");
        free(t);
    }

    /* a huge enum: the grammar is bounded (refused past the output limit) */
    const int ne = 200000;
    char *t = malloc((size_t)ne * 16 + 32);
    assert_non_null(t);
    size_t m = (size_t)sprintf(t, "{\"enum\":[");
    for (int i = 0; i < ne; i++) m += (size_t)sprintf(t + m, "%s\"v%d\"", i ? "," : "", i);
    sprintf(t + m, "]}");
    refused(t, "larger than 1048576 bytes");
    t[0] = 0;
    m = (size_t)sprintf(t, "{\"enum\":[");
    for (int i = 0; i < 1000; i++) m += (size_t)sprintf(t + m, "%s%d", i ? "," : "", i);
    sprintf(t + m, "]}");
    char *g = gbnf(t);
    assert_true(strlen(g) < 20000);
    free(g);
    free(t);

    /* many properties with shared prefixes (the key trie), many optional: linear size */
    t = malloc(4096 * 48 + 64);
    assert_non_null(t);
    m = (size_t)sprintf(t, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < 4000; i++) m += (size_t)sprintf(t + m, "%s\"key%d\":{\"type\":\"integer\"}", i ? "," : "", i);
    sprintf(t + m, "}}");
    g = gbnf(t);
    assert_true(strlen(g) <= SCHEMA_MAX_OUTPUT);
    free(g);
    free(t);

    /* a key of 1000 characters (the trie of excluded keys is as deep), a pattern whose non-empty form grows */
    t = malloc(1100);
    assert_non_null(t);
    m = (size_t)sprintf(t, "{\"properties\":{\"");
    memset(t + m, 'k', 1000), m += 1000;
    sprintf(t + m, "\":{}}}");
    g = gbnf(t);
    assert_true(strlen(g) < SCHEMA_MAX_OUTPUT);
    free(g);
    free(t);
    s = repeat_text("", "", "a?", 2000);
    t = malloc(strlen(s) + 64);
    assert_non_null(t);
    sprintf(t, "{\"pattern\":\"^(%s)*$\"}", s);
    refused(t, "larger than");
    free(t);
    free(s);

    /* the biggest counts, and deep groups (made rules of their own) */
    g = gbnf("{\"type\":\"array\",\"minItems\":10000,\"maxItems\":1e300}");
    assert_true(rule_has(g, "root ::= ", "){9999}"));
    free(g);
    char pat[512];
    s = repeat_text("(", "a", ")?", 70);
    snprintf(pat, sizeof pat, "{\"pattern\":\"^%s$\"}", s);
    refused(pat, "groups nested too deeply");
    free(s);
    s = repeat_text("(a", "b", ")*", 40);
    snprintf(pat, sizeof pat, "{\"pattern\":\"^%s$\"}", s);
    g = gbnf(pat);
    assert_non_null(strstr(g, "root-"));
    free(g);
    free(s);

    /* random mutations of schemas: -1, or a bounded grammar with a root */
    static const char *const seeds[] = {
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120},\"b\":{\"type\":"
        "\"array\",\"items\":{\"$ref\":\"#/$defs/x\"},\"minItems\":1,\"maxItems\":3}},\"required\":[\"a\"],\"$defs\":{\"x\":"
        "{\"anyOf\":[{\"type\":\"string\",\"pattern\":\"^[a-z]{2,4}(\\\\d|_)*$\"},{\"$ref\":\"#/$defs/x\"},{\"enum\":[1,\"q\"]}]}}}",
        "{\"type\":\"number\",\"exclusiveMinimum\":0,\"maximum\":100,\"format\":\"date\"}",
        "{\"allOf\":[{\"properties\":{\"k\":{\"format\":\"uuid\",\"type\":\"string\"}}},{\"required\":[\"k\"]}]}",
    };
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int ok = 0;
    for (int round = 0; round < 3000; round++) {
        const char *seed = seeds[round % 3];
        const size_t n = strlen(seed);
        char *x = malloc(n + 1);
        assert_non_null(x);
        memcpy(x, seed, n + 1);
        const int edits = 1 + (int)(tu_rand(&rng) % 4);
        for (int e = 0; e < edits; e++) {
            static const char bytes[] = "{}[]\",:0123456789-.e\\^$*+?()|abtrue#/";
            x[tu_rand(&rng) % n] = bytes[tu_rand(&rng) % (sizeof bytes - 1)];
        }
        char *o = NULL;
        if (schema_to_gbnf(x, n, &o, err, sizeof err) == 0) {
            assert_non_null(strstr(o, "root ::= "));
            assert_true(strlen(o) <= SCHEMA_MAX_OUTPUT);
            ok++;
        } else {
            assert_null(o);
            assert_true(err[0] != 0);
        }
        free(o);
        free(x);
    }
    assert_true(ok > 0);
}

/* ---- the driver of tests/schema/check.mjs */

static int print_grammar(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return fprintf(stderr, "cannot read %s\n", path), 2;
    size_t cap = 1 << 16, n = 0, k;
    char *text = malloc(cap);
    while (text && (k = fread(text + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            char *t = realloc(text, cap *= 2);
            if (!t) free(text);
            text = t;
        }
    }
    fclose(f);
    if (!text) return fprintf(stderr, "out of memory\n"), 2;
    char *out = NULL, err[512];
    const int rc = schema_to_gbnf(text, n, &out, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    else fputs(out, stdout);
    free(out);
    free(text);
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--gbnf")) return print_grammar(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simple),    cmocka_unit_test(test_refs),    cmocka_unit_test(test_unsupported),
        cmocka_unit_test(test_malformed), cmocka_unit_test(test_hostile),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
