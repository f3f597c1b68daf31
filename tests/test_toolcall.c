/*
 * test_toolcall.c - tool calls in each family's format (src/text/toolcall.c).
 *
 * 1. Detection: every published template the Jinja tests hold is given its family's format.
 * 2. Transcripts: a model's output in each format, written from the templates and the formats' documentation
 *    (reasoning or prose before the call, several calls, typed XML arguments), parses into the calls expected
 *    (names, ids where the model writes them, arguments equal as JSON values) and the content around them.
 * 3. Streaming: for every prefix of every transcript, the partial parse gives content that begins the final
 *    content, no call that the final parse does not have, the final name of each named call, and arguments
 *    that begin its final arguments: deltas joined are exactly the final answer.
 * 4. Malformed and truncated calls (a missing end marker, arguments that are not an object, a cut transcript)
 *    come back as content, never dropped.
 * 5. Grammars: for every format, the grammar of two tools compiles; a call spelled as the grammar spells it
 *    (by a tiny walker that always takes the grammar's first way) is accepted by the grammar engine byte by byte
 *    and parses back into a call of one of the tools with arguments valid JSON.
 */
#include <cjson/cJSON.h>
#include <string.h>

#include "deltafin.h"
#include "grammar.h"
#include "testutil.h"

#define DSB "\xef\xbd\x9c" /* the fullwidth bar of DeepSeek's markers */
#define TB "<" DSB "tool\xe2\x96\x81"

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"units\":{\"type\":\"string\",\"enum\":[\"c\",\"f\"]}},"
    "\"required\":[\"city\",\"days\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"query\":{\"type\":\"string\"},\"filters\":{\"type\":\"object\",\"properties\":{\"lang\":{\"type\":\"string\"}}}},"
    "\"required\":[\"query\"]}}}]";

typedef struct {
    df_tool_format f;
    const char *text;
    const char *content;  /* expected */
    const char *reasoning;
    int n;                /* calls */
    const char *name[2], *args[2], *id[2];
} transcript;

static const transcript T[] = {
    {DF_TOOLS_HERMES,
     "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n"
     "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"a \\\"b\\\" <c>\"}}\n</tool_call>",
     "Let me check.", NULL, 2, {"get_weather", "search"}, {"{\"city\":\"Paris\",\"days\":3}", "{\"query\":\"a \\\"b\\\" <c>\"}"},
     {NULL, NULL}},
    {DF_TOOLS_QWEN_XML,
     "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n<parameter=days>\n5\n</parameter>\n"
     "</function>\n</tool_call>",
     "", NULL, 1, {"get_weather"}, {"{\"city\":\"New York\",\"days\":5}"}, {NULL}},
    {DF_TOOLS_QWEN_XML,
     "I will search.\n\n<tool_call>\n<function=search>\n<parameter=query>\nline one\nline \"two\"\n</parameter>\n"
     "<parameter=filters>\n{\"lang\": \"en\"}\n</parameter>\n</function>\n</tool_call>",
     "I will search.", NULL, 1, {"search"}, {"{\"query\":\"line one\\nline \\\"two\\\"\",\"filters\":{\"lang\":\"en\"}}"}, {NULL}},
    {DF_TOOLS_GLM,
     "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n<arg_key>days</arg_key>\n"
     "<arg_value>2</arg_value>\n</tool_call><tool_call>search</tool_call>",
     "", NULL, 2, {"get_weather", "search"}, {"{\"city\":\"Beijing\",\"days\":2}", "{}"}, {NULL, NULL}},
    {DF_TOOLS_MINIMAX,
     "Checking.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Oslo</parameter>\n"
     "<parameter name=\"days\">1</parameter>\n</invoke>\n<invoke name=\"search\">\n<parameter name=\"query\">fjords"
     "</parameter>\n</invoke>\n</minimax:tool_call>",
     "Checking.", NULL, 2, {"get_weather", "search"}, {"{\"city\":\"Oslo\",\"days\":1}", "{\"query\":\"fjords\"}"},
     {NULL, NULL}},
    {DF_TOOLS_KIMI_K2,
     "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
     "{\"city\": \"Tokyo\", \"days\": 7}<|tool_call_end|><|tool_call_begin|>functions.search:1"
     "<|tool_call_argument_begin|>{\"query\": \"sushi\"}<|tool_call_end|><|tool_calls_section_end|>",
     "", NULL, 2, {"get_weather", "search"}, {"{\"city\":\"Tokyo\",\"days\":7}", "{\"query\":\"sushi\"}"},
     {"functions.get_weather:0", "functions.search:1"}},
    {DF_TOOLS_KIMI_K3,
     "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"0\"<|sep|><|open|>argument key=\"city\" "
     "type=\"string\"<|sep|>Rome<|close|>argument<|sep|><|open|>argument key=\"days\" type=\"number\"<|sep|>4"
     "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
     "", NULL, 1, {"get_weather"}, {"{\"city\":\"Rome\",\"days\":4}"}, {NULL}},
    {DF_TOOLS_KIMI_K3,
     "<|open|>response<|sep|>Let me see.<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool=\"search\"<|sep|>"
     "<|open|>argument key=\"query\" type=\"string\"<|sep|>tea<|close|>argument<|sep|><|close|>call<|sep|>"
     "<|close|>tools<|sep|><|close|>message<|sep|>",
     "Let me see.", NULL, 1, {"search"}, {"{\"query\":\"tea\"}"}, {NULL}},
    {DF_TOOLS_KIMI_K3, "<|open|>response<|sep|>Just words.<|close|>response<|sep|><|close|>message<|sep|>", "Just words.",
     NULL, 0, {NULL}, {NULL}, {NULL}},
    {DF_TOOLS_DEEPSEEK_R1,
     "Sure." TB "calls\xe2\x96\x81" "begin" DSB ">" TB "call\xe2\x96\x81" "begin" DSB ">function" TB "sep" DSB ">get_weather\n"
     "```json\n{\"city\": \"Lima\", \"days\": 2}\n```" TB "call\xe2\x96\x81" "end" DSB ">" TB "calls\xe2\x96\x81" "end" DSB ">",
     "Sure.", NULL, 1, {"get_weather"}, {"{\"city\":\"Lima\",\"days\":2}"}, {NULL}},
    {DF_TOOLS_DEEPSEEK_V31,
     TB "calls\xe2\x96\x81" "begin" DSB ">" TB "call\xe2\x96\x81" "begin" DSB ">search" TB "sep" DSB ">{\"query\": \"x\"}"
     TB "call\xe2\x96\x81" "end" DSB ">" TB "call\xe2\x96\x81" "begin" DSB ">get_weather" TB "sep" DSB
     ">{\"city\": \"Quito\", \"days\": 1}" TB "call\xe2\x96\x81" "end" DSB ">" TB "calls\xe2\x96\x81" "end" DSB ">",
     "", NULL, 2, {"search", "get_weather"}, {"{\"query\":\"x\"}", "{\"city\":\"Quito\",\"days\":1}"}, {NULL, NULL}},
    {DF_TOOLS_DSML,
     "Let me look.\n\n<" DSB "DSML" DSB "function_calls>\n<" DSB "DSML" DSB "invoke name=\"get_weather\">\n<" DSB "DSML" DSB
     "parameter name=\"city\" string=\"true\">Cairo</" DSB "DSML" DSB "parameter>\n<" DSB "DSML" DSB
     "parameter name=\"days\" string=\"false\">3</" DSB "DSML" DSB "parameter>\n</" DSB "DSML" DSB "invoke>\n</" DSB
     "DSML" DSB "function_calls>",
     "Let me look.", NULL, 1, {"get_weather"}, {"{\"city\":\"Cairo\",\"days\":3}"}, {NULL}},
    {DF_TOOLS_DSML_V4,
     "<" DSB "DSML" DSB "tool_calls>\n<" DSB "DSML" DSB "invoke name=\"search\">\n<" DSB "DSML" DSB
     "parameter name=\"query\" string=\"true\">42</" DSB "DSML" DSB "parameter>\n</" DSB "DSML" DSB "invoke>\n</" DSB
     "DSML" DSB "tool_calls>",
     "", NULL, 1, {"search"}, {"{\"query\":\"42\"}"}, {NULL}},
    {DF_TOOLS_HARMONY,
     "<|channel|>analysis<|message|>The user wants weather.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Berlin\", \"days\": 2}<|call|>",
     "", "The user wants weather.", 1, {"get_weather"}, {"{\"city\":\"Berlin\",\"days\":2}"}, {NULL}},
    {DF_TOOLS_HARMONY,
     "<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>Hello there.<|return|>",
     "Hello there.", "Simple.", 0, {NULL}, {NULL}, {NULL}},
    {DF_TOOLS_HARMONY, "A model that writes no channels.", "A model that writes no channels.", NULL, 0, {NULL}, {NULL},
     {NULL}},
    {DF_TOOLS_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Austin\", \"days\": 1}}", "", NULL, 1,
     {"get_weather"}, {"{\"city\":\"Austin\",\"days\":1}"}, {NULL}},
    {DF_TOOLS_LLAMA3, "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"query\": \"q\"}}", "", NULL, 1, {"search"},
     {"{\"query\":\"q\"}"}, {NULL}},
    {DF_TOOLS_MISTRAL,
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\", \"days\": 2}, \"id\": \"abcDEF123\"}]",
     "", NULL, 1, {"get_weather"}, {"{\"city\":\"Nice\",\"days\":2}"}, {"abcDEF123"}},
    {DF_TOOLS_MISTRAL_ARGS,
     "[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{\"city\": \"Lyon\", \"days\": 2}[TOOL_CALLS]search[ARGS]{\"query\": \"y\"}",
     "", NULL, 2, {"get_weather", "search"}, {"{\"city\":\"Lyon\",\"days\":2}", "{\"query\":\"y\"}"}, {NULL, NULL}},
    {DF_TOOLS_GENERIC, "{\"tool_calls\": [{\"name\": \"search\", \"arguments\": {\"query\": \"z\"}}]}", "", NULL, 1,
     {"search"}, {"{\"query\":\"z\"}"}, {NULL}},
    {DF_TOOLS_GENERIC, "Just prose, no call.", "Just prose, no call.", NULL, 0, {NULL}, {NULL}, {NULL}},
};

static int json_equal(const char *a, const char *b) {
    cJSON *x = cJSON_Parse(a), *y = cJSON_Parse(b);
    const int eq = x && y && cJSON_Compare(x, y, 1);
    cJSON_Delete(x), cJSON_Delete(y);
    return eq;
}

static int starts(const char *s, const char *prefix) { return !strncmp(s, prefix, strlen(prefix)); }

static void test_detect(void **st) {
    (void)st;
    static const struct {
        const char *file;
        df_tool_format f;
    } cases[] = {
        {"Qwen-Qwen3-0.6B", DF_TOOLS_HERMES}, {"Qwen-Qwen2.5-7B-Instruct", DF_TOOLS_HERMES},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", DF_TOOLS_HERMES}, {"Qwen3-Coder", DF_TOOLS_QWEN_XML},
        {"Qwen3.5-4B", DF_TOOLS_QWEN_XML}, {"GLM-4.6", DF_TOOLS_GLM}, {"GLM-4.7-Flash", DF_TOOLS_GLM},
        {"MiniMax-M2", DF_TOOLS_MINIMAX}, {"Kimi-K2-Instruct", DF_TOOLS_KIMI_K2}, {"Kimi-K2-Thinking", DF_TOOLS_KIMI_K2},
        {"Kimi-K3", DF_TOOLS_KIMI_K3}, {"llama-cpp-deepseek-r1", DF_TOOLS_DEEPSEEK_R1},
        {"deepseek-ai-DeepSeek-V3.1", DF_TOOLS_DEEPSEEK_V31}, {"deepseek-ai-DeepSeek-V3.2", DF_TOOLS_DSML},
        {"deepseek-ai-DeepSeek-V4", DF_TOOLS_DSML_V4}, {"openai-gpt-oss-120b", DF_TOOLS_HARMONY},
        {"meta-llama-Llama-3.1-8B-Instruct", DF_TOOLS_LLAMA3}, {"meta-llama-Llama-3.2-3B-Instruct", DF_TOOLS_LLAMA3},
        {"Mistral-Small-3.2-24B-Instruct-2506", DF_TOOLS_MISTRAL_ARGS},
        {"mistralai-Mistral-Nemo-Instruct-2407", DF_TOOLS_MISTRAL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[512];
        snprintf(path, sizeof path, "tests/data/jinja/templates/%s.jinja", cases[i].file);
        FILE *f = fopen(path, "rb");
        if (!f) fail_msg("cannot open %s", path);
        static char buf[1 << 20];
        const size_t n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[n] = 0;
        const df_tool_format got = df_tool_format_detect(buf);
        if (got != cases[i].f)
            fail_msg("%s: detected %s, expected %s", cases[i].file, df_tool_format_name(got), df_tool_format_name(cases[i].f));
    }
    assert_int_equal(df_tool_format_detect("{{ messages }}"), DF_TOOLS_GENERIC);
    assert_int_equal(df_tool_format_detect(NULL), DF_TOOLS_GENERIC);
}

static void check_final(const transcript *t, size_t k) {
    df_tool_parse p;
    assert_int_equal(df_tool_calls_parse(t->f, TOOLS, t->text, strlen(t->text), 0, &p), DF_OK);
    if (strcmp(p.content, t->content)) fail_msg("transcript %zu (%s): content '%s', expected '%s'", k, df_tool_format_name(t->f), p.content, t->content);
    if (t->reasoning && (!p.reasoning || strcmp(p.reasoning, t->reasoning)))
        fail_msg("transcript %zu: reasoning '%s'", k, p.reasoning ? p.reasoning : "(none)");
    if (p.n_calls != t->n) fail_msg("transcript %zu (%s): %d calls, expected %d", k, df_tool_format_name(t->f), p.n_calls, t->n);
    for (int i = 0; i < t->n; i++) {
        if (strcmp(p.calls[i].name, t->name[i])) fail_msg("transcript %zu call %d: name %s", k, i, p.calls[i].name);
        if (!json_equal(p.calls[i].arguments, t->args[i]))
            fail_msg("transcript %zu call %d: arguments %s, expected %s", k, i, p.calls[i].arguments, t->args[i]);
        assert_true(p.calls[i].done);
        if (t->id[i] && (!p.calls[i].id || strcmp(p.calls[i].id, t->id[i])))
            fail_msg("transcript %zu call %d: id %s, expected %s", k, i, p.calls[i].id ? p.calls[i].id : "(none)", t->id[i]);
    }
    df_tool_parse_free(&p);
}

static void test_transcripts(void **st) {
    (void)st;
    for (size_t k = 0; k < sizeof T / sizeof *T; k++) check_final(&T[k], k);
}

static void test_streaming_prefixes(void **st) {
    (void)st;
    long checked = 0;
    for (size_t k = 0; k < sizeof T / sizeof *T; k++) {
        const transcript *t = &T[k];
        df_tool_parse fin;
        assert_int_equal(df_tool_calls_parse(t->f, TOOLS, t->text, strlen(t->text), 0, &fin), DF_OK);
        const size_t n = strlen(t->text);
        for (size_t m = 0; m <= n; m++) {
            df_tool_parse p;
            assert_int_equal(df_tool_calls_parse(t->f, TOOLS, t->text, m, 1, &p), DF_OK);
            if (!starts(fin.content, p.content))
                fail_msg("transcript %zu, %zu of %zu bytes: content '%s' does not begin '%s'", k, m, n, p.content, fin.content);
            if (p.n_calls > fin.n_calls) fail_msg("transcript %zu, %zu bytes: %d calls of %d", k, m, p.n_calls, fin.n_calls);
            for (int i = 0; i < p.n_calls; i++) {
                if (strcmp(p.calls[i].name, fin.calls[i].name))
                    fail_msg("transcript %zu, %zu bytes: call %d named '%s', finally '%s'", k, m, i, p.calls[i].name,
                             fin.calls[i].name);
                if (!starts(fin.calls[i].arguments, p.calls[i].arguments))
                    fail_msg("transcript %zu, %zu bytes: call %d arguments '%s' do not begin '%s'", k, m, i,
                             p.calls[i].arguments, fin.calls[i].arguments);
            }
            if (t->reasoning && p.reasoning && !starts(fin.reasoning, p.reasoning))
                fail_msg("transcript %zu, %zu bytes: reasoning '%s'", k, m, p.reasoning);
            df_tool_parse_free(&p);
            checked++;
        }
        df_tool_parse_free(&fin);
    }
    printf("  %ld prefixes of %zu transcripts consistent with their final parse\n", checked, sizeof T / sizeof *T);
}

static void test_malformed(void **st) {
    (void)st;
    static const struct {
        df_tool_format f;
        const char *text;
    } bad[] = {
        {DF_TOOLS_HERMES, "Hi <tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}"}, /* no end */
        {DF_TOOLS_HERMES, "<tool_call>\n{\"name\": \"search\", \"arguments\": [1, 2]}\n</tool_call>"}, /* not an object */
        {DF_TOOLS_HERMES, "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"\n</tool_call>"},
        {DF_TOOLS_QWEN_XML, "<tool_call>\n<function=search>\n<parameter=query>\nx\n</function>\n</tool_call>"},
        {DF_TOOLS_KIMI_K2, "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0<|tool_call_argument_begin|>{"},
        {DF_TOOLS_DEEPSEEK_V31, TB "calls\xe2\x96\x81" "begin" DSB ">" TB "call\xe2\x96\x81" "begin" DSB ">search" TB "sep" DSB ">not json"},
        {DF_TOOLS_HARMONY, "<|channel|>commentary to=functions.search <|constrain|>json<|message|>{oops<|call|>"},
        {DF_TOOLS_LLAMA3, "{\"name\": \"search\"}"},
        {DF_TOOLS_MISTRAL, "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {}}"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        df_tool_parse p;
        assert_int_equal(df_tool_calls_parse(bad[k].f, TOOLS, bad[k].text, strlen(bad[k].text), 0, &p), DF_OK);
        int done = 0;
        for (int i = 0; i < p.n_calls; i++) done += p.calls[i].done;
        if (done) fail_msg("malformed %zu (%s): %d complete calls", k, df_tool_format_name(bad[k].f), done);
        /* nothing is dropped: the call's text is in the content */
        const char *probe = bad[k].f == DF_TOOLS_HARMONY ? "{oops" : "search";
        if (!strstr(p.content, probe)) fail_msg("malformed %zu (%s): the call's text was dropped: '%s'", k,
                                                df_tool_format_name(bad[k].f), p.content);
        df_tool_parse_free(&p);
    }
}

/* ---- grammars: a sentence spelled by always taking the first way, then parsed back ---- */

/* A text of grammar g from rule `root`, built by the engine itself: at each step a byte drawn among the allowed ones
 * of a list (markup, digits, letters; any other allowed byte when none of them is), until the grammar is complete;
 * drawn again from the start when it grows past 4,000 bytes. Half the time a closer instead, as far as the grammar
 * allows it: an XML format's argument close marker (a string value may hold any other text, so that only the whole
 * marker ends it), or a byte that ends a string, an object, an array or a value without '<'. */
static char *first_sentence(const char *gbnf) {
    char err[256];
    gram *g = gram_parse(gbnf, strlen(gbnf), err, sizeof err);
    if (!g) fail_msg("grammar refused: %s\n%s", err, gbnf);
    gram_vocab *v = gram_vocab_bytes();
    gram_state *s = gram_state_new(g, v);
    static const char pref[] = "\"}]>\n<0123456789abcdefghijklmnopqrstuvwxyz{[:, /=|_.-`";
    char *out = calloc(1, 8192);
    size_t n = 0;
    uint64_t seed = 7;
    for (int tries = 0; tries < 100 && !gram_allows(s, 256); tries++) {
        gram_state_free(s);
        s = gram_state_new(g, v);
        n = 0;
        while (n < 4000 && !gram_allows(s, 256)) {
            int opts[64], k = 0, pick = -1;
            static const char *const closers[] = {"\n</parameter>\n", "</parameter>", "</arg_value>",
                                                  "</\xef\xbd\x9c" "DSML\xef\xbd\x9cparameter>",
                                                  "<|close|>argument<|sep|>", "\"", "}", "]", "<"};
            if (tu_rand(&seed) % 2) { /* half the time, whatever closes (so that nesting stays shallow) */
                const char *can[sizeof closers / sizeof *closers];
                int nc = 0;
                for (size_t c = 0; c < sizeof closers / sizeof *closers; c++)
                    if (gram_allows(s, (unsigned char)*closers[c])) can[nc++] = closers[c];
                const char *cl = nc ? can[tu_rand(&seed) % (uint64_t)nc] : "";
                for (; *cl && cl[1] && n < 4000 && gram_allows(s, (unsigned char)*cl); cl++) { /* all but its last byte */
                    assert_int_equal(gram_accept(s, (unsigned char)*cl), 0);
                    out[n++] = *cl;
                }
                if (*cl && gram_allows(s, (unsigned char)*cl)) pick = (unsigned char)*cl;
            }
            for (const char *c = pref; *c && pick < 0; c++)
                if (gram_allows(s, (unsigned char)*c)) opts[k++] = (unsigned char)*c;
            if (k && pick < 0) pick = opts[tu_rand(&seed) % (uint64_t)k];
            for (int b = 0; b < 256 && pick < 0; b++)
                if (gram_allows(s, b)) pick = b;
            if (pick < 0) fail_msg("the grammar allows nothing after '%s'", out);
            assert_int_equal(gram_accept(s, pick), 0);
            out[n++] = (char)pick;
        }
        out[n] = 0;
    }
    if (!gram_allows(s, 256)) fail_msg("no sentence of the grammar under 4,000 bytes in 100 draws; the last: %.300s\n%s", out, gbnf);
    gram_state_free(s);
    gram_vocab_free(v);
    gram_free(g);
    return out;
}

/* How far grammar g reads text: 0 whole and complete, 1 whole but incomplete, -1 a byte refused. */
static int reads(const char *gbnf, const char *text) {
    char err[256];
    gram *g = gram_parse(gbnf, strlen(gbnf), err, sizeof err);
    if (!g) fail_msg("grammar refused: %s", err);
    gram_vocab *v = gram_vocab_bytes();
    gram_state *s = gram_state_new(g, v);
    int rc = 0;
    for (const char *c = text; *c && rc == 0; c++)
        if (!gram_allows(s, (unsigned char)*c) || gram_accept(s, (unsigned char)*c) != 0) rc = -1;
    if (rc == 0 && !gram_allows(s, 256)) rc = 1;
    gram_state_free(s);
    gram_vocab_free(v);
    gram_free(g);
    return rc;
}

/* An XML format's string argument under its grammar holds any text but its close marker: markup, a '<', the
 * marker's start. The grammar's own sentence with such text put into the city's value reads whole, and the
 * parse gives that text back; with the whole marker put in, the grammar refuses it. */
static void xml_values_with_markup(void) {
    static const struct { df_tool_format f; const char *at, *close; } xml[] = {
        {DF_TOOLS_QWEN_XML, "<parameter=city>\n", "</parameter>"},
        {DF_TOOLS_GLM, "<arg_key>city</arg_key>\n<arg_value>", "</arg_value>"},
        {DF_TOOLS_MINIMAX, "<parameter name=\"city\">", "</parameter>"},
        {DF_TOOLS_DSML, "parameter name=\"city\" string=\"true\">", "</\xef\xbd\x9c" "DSML\xef\xbd\x9cparameter>"},
        {DF_TOOLS_KIMI_K3, "<|open|>argument key=\"city\" type=\"string\"<|sep|>", "<|close|>argument<|sep|>"},
    };
    for (size_t k = 0; k < sizeof xml / sizeof *xml; k++) {
        char *g = NULL, err[256], text[8192], put[256];
        if (df_tool_calls_grammar(xml[k].f, TOOLS, "get_weather", 0, &g, err, sizeof err) != DF_OK) fail_msg("%s", err);
        char *s = first_sentence(g);
        const char *at = strstr(s, xml[k].at);
        if (!at) fail_msg("%s: no '%s' in the grammar's sentence %s", df_tool_format_name(xml[k].f), xml[k].at, s);
        const size_t off = (size_t)(at - s) + strlen(xml[k].at);
        const size_t cl = strlen(xml[k].close);
        /* markup, a lone '<', and all of the marker but its last byte */
        snprintf(put, sizeof put, "if (a<b) x = \"<b>\";<%.*s", (int)(cl - 1), xml[k].close);
        snprintf(text, sizeof text, "%.*s%s%s", (int)off, s, put, s + off);
        if (reads(g, text) != 0) fail_msg("%s: the grammar refuses a value with markup:\n%s", df_tool_format_name(xml[k].f), text);
        df_tool_parse p;
        assert_int_equal(df_tool_calls_parse(xml[k].f, TOOLS, text, strlen(text), 0, &p), DF_OK);
        assert_int_equal(p.n_calls, 1);
        cJSON *a = cJSON_Parse(p.calls[0].arguments);
        const cJSON *city = cJSON_GetObjectItemCaseSensitive(a, "city");
        if (!cJSON_IsString(city) || strncmp(city->valuestring, put, strlen(put)))
            fail_msg("%s: city %s, not what was put: %s", df_tool_format_name(xml[k].f), p.calls[0].arguments, put);
        cJSON_Delete(a);
        df_tool_parse_free(&p);
        snprintf(text, sizeof text, "%.*sa%sb%s", (int)off, s, xml[k].close, s + off); /* the whole marker */
        if (reads(g, text) != -1) fail_msg("%s: the grammar reads a value holding its close marker:\n%s", df_tool_format_name(xml[k].f), text);
        free(s);
        free(g);
    }
}

static void test_grammars(void **st) {
    (void)st;
    static const df_tool_format all[] = {DF_TOOLS_GENERIC, DF_TOOLS_HERMES, DF_TOOLS_QWEN_XML, DF_TOOLS_GLM,
                                         DF_TOOLS_MINIMAX, DF_TOOLS_KIMI_K2, DF_TOOLS_KIMI_K3, DF_TOOLS_DEEPSEEK_R1,
                                         DF_TOOLS_DEEPSEEK_V31, DF_TOOLS_DSML, DF_TOOLS_DSML_V4, DF_TOOLS_HARMONY,
                                         DF_TOOLS_LLAMA3, DF_TOOLS_MISTRAL, DF_TOOLS_MISTRAL_ARGS};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
        for (int named = 0; named < 2; named++) {
            char *g = NULL, err[256];
            const char *only = named ? "get_weather" : NULL;
            if (df_tool_calls_grammar(all[k], TOOLS, only, 1, &g, err, sizeof err) != DF_OK)
                fail_msg("%s: %s", df_tool_format_name(all[k]), err);
            char *text = first_sentence(g);
            df_tool_parse p;
            assert_int_equal(df_tool_calls_parse(all[k], TOOLS, text, strlen(text), 0, &p), DF_OK);
            if (p.n_calls < 1 || !p.calls[0].done)
                fail_msg("%s: the grammar's sentence parses into no call:\n%s\ncontent: %s", df_tool_format_name(all[k]),
                         text, p.content);
            if (named && strcmp(p.calls[0].name, "get_weather")) fail_msg("%s: named call %s", df_tool_format_name(all[k]), p.calls[0].name);
            cJSON *a = cJSON_Parse(p.calls[0].arguments);
            if (!cJSON_IsObject(a)) fail_msg("%s: arguments %s", df_tool_format_name(all[k]), p.calls[0].arguments);
            if (named && !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(a, "city")))
                fail_msg("%s: a required argument is missing: %s", df_tool_format_name(all[k]), p.calls[0].arguments);
            cJSON_Delete(a);
            df_tool_parse_free(&p);
            free(text);
            free(g);
        }
    char *g = NULL, err[256];
    xml_values_with_markup();
    assert_int_equal(df_tool_calls_grammar(DF_TOOLS_HERMES, TOOLS, "nope", 1, &g, err, sizeof err), DF_E_INPUT);
    assert_non_null(strstr(err, "nope"));
    assert_int_equal(df_tool_calls_grammar(DF_TOOLS_HERMES, "{}", NULL, 1, &g, err, sizeof err), DF_E_INPUT);
    assert_int_equal(df_tool_calls_grammar(DF_TOOLS_HERMES, "[]", NULL, 1, &g, err, sizeof err), DF_E_INPUT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect),        cmocka_unit_test(test_transcripts),
        cmocka_unit_test(test_streaming_prefixes), cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_grammars),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
