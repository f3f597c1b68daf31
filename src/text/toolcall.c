/*
 * toolcall.c - tool calls in each family's own format: which format a chat
 * template uses, the calls in a model's output (whole or still growing), and
 * a grammar that lets a model write only valid calls (contract: deltafin.h,
 * "Tool calls"; the server's use: docs/server.md).
 *
 * A format is data (the table `formats`): the markers a model writes around
 * its calls, as the published templates and llama.cpp's parsers have them.
 * Four shapes cover the families:
 *
 *  - JSON: a JSON object naming the function and holding its arguments, in
 *    markers (Hermes / Qwen3: <tool_call>{"name":...,"arguments":{...}}
 *    </tool_call>), alone (Llama 3.x: {"name":...,"parameters":{...}}), in a
 *    list (Mistral v0.3: [TOOL_CALLS][{...}, ...]; the generic form any other
 *    template gets: {"tool_calls":[{...}]}).
 *  - MARKUP: markers, the name, markers, the arguments as a JSON object
 *    (DeepSeek V3/R1 and V3.1, Kimi K2, Mistral 3.2's [TOOL_CALLS]f[ARGS]).
 *  - XML: markers, the name, then one element per argument with the value as
 *    text, typed by the tool's schema (Qwen3-Coder / Qwen3.5, GLM-4.5..5,
 *    MiniMax M2, DeepSeek V3.2 / V4's DSML, Kimi K3).
 *  - HARMONY: gpt-oss's channels: analysis is reasoning, final is content,
 *    commentary to=functions.f is a call.
 *
 * The parser reads the text once, left to right. Content is what precedes
 * the first call marker. A call that does not parse (a missing marker,
 * arguments that are not a JSON object) makes the text from its marker on
 * content again: never dropped. While the text is still growing (partial),
 * what may be the start of a marker is held back, and each call's arguments
 * are given as the longest text sure to begin the final arguments (a value
 * still being written is held back where its spelling may change), so that
 * streamed argument deltas join to exactly the final arguments.
 *
 * The grammar (tool_choice "required" or a named function) is GBNF: the
 * format's markers as literals and each function's parameters compiled from
 * its JSON Schema (schema.c), the rule names prefixed per function. An XML
 * string value is any text in which the argument's close marker does not
 * occur (where the parser ends the value): a rule per state of the marker's
 * Knuth-Morris-Pratt automaton (no_marker_rules), so that code or markup with
 * '<' in it can be an argument; with minLength or maxLength, text without '<'
 * of that length (a length and a marker together would need a rule per
 * state and count).
 */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deltafin.h"
#include "schema.h"

enum { SH_JSON, SH_MARKUP, SH_XML, SH_HARMONY };
#define TOOL_MAX_PARALLEL 8 /* calls in one answer under a grammar (tool_choice required, parallel) */

typedef struct {
    df_tool_format id;
    const char *name;
    int shape;
    const char *sec_open, *sec_close; /* around all the calls, or NULL */
    const char *call_open;            /* before the name (JSON: before the object) */
    const char *name_end;             /* what ends the name */
    const char *name_skip;            /* then skipped up to and through this, or NULL */
    const char *call_close;           /* after the arguments, or NULL */
    const char *p_open, *p_name_end, *p_skip, *p_close; /* XML: one argument */
    const char *args_key;             /* JSON: the key of the arguments */
    int array;                        /* JSON: the calls are a list [ {...}, ... ] */
    int id_in_call;                   /* the id is the text from call_open to name_skip (Kimi K2) */
    /* the grammar's spelling */
    const char *g_sec_open, *g_call_open, *g_name_tail, *g_call_close, *g_sec_close, *g_between;
    const char *g_p_open, *g_p_tail_str, *g_p_tail_json, *g_p_close;
    const char *markers[8];           /* texts that are special tokens in published files (kept in the text) */
} tool_fmt;

/* clang-format off */
static const tool_fmt formats[] = {
    {DF_TOOLS_GENERIC, "generic", SH_JSON, "{\"tool_calls\"", "}", "", NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     "arguments", 1, 0, "{\"tool_calls\": [", "", "", "", "]}", ", ", NULL, NULL, NULL, NULL, {NULL}},
    {DF_TOOLS_HERMES, "hermes", SH_JSON, NULL, NULL, "<tool_call>", NULL, NULL, "</tool_call>", NULL, NULL, NULL, NULL,
     "arguments", 0, 0, "", "<tool_call>\n", "", "\n</tool_call>", "", "\n", NULL, NULL, NULL, NULL,
     {"<tool_call>", "</tool_call>", NULL}},
    {DF_TOOLS_LLAMA3, "llama3", SH_JSON, NULL, NULL, "", NULL, NULL, NULL, NULL, NULL, NULL, NULL, "parameters", 0, 0,
     "", "", "", "", "", "; ", NULL, NULL, NULL, NULL, {"<|python_tag|>", NULL}},
    {DF_TOOLS_MISTRAL, "mistral", SH_JSON, "[TOOL_CALLS]", NULL, "", NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     "arguments", 1, 0, "[TOOL_CALLS][", "", "", "", "]", ", ", NULL, NULL, NULL, NULL, {"[TOOL_CALLS]", NULL}},
    {DF_TOOLS_MISTRAL_ARGS, "mistral-args", SH_MARKUP, NULL, NULL, "[TOOL_CALLS]", "[", "[ARGS]", NULL, NULL, NULL,
     NULL, NULL, NULL, 0, 0, "", "[TOOL_CALLS]", "[ARGS]", "", "", "", NULL, NULL, NULL, NULL,
     {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", NULL}},
    {DF_TOOLS_DEEPSEEK_R1, "deepseek-r1", SH_MARKUP, "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
     "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>",
     "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>function<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>",
     "\n", "```json", "```<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>", NULL, NULL, NULL, NULL,
     NULL, 0, 0, "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
     "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>function<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>",
     "\n```json\n", "\n```<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>",
     "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>", "\n", NULL, NULL, NULL, NULL,
     {"<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>", "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>",
      "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>", "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>",
      "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>", NULL}},
    {DF_TOOLS_DEEPSEEK_V31, "deepseek-v3.1", SH_MARKUP, "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
     "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>", "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>",
     "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>", NULL, "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>",
     NULL, NULL, NULL, NULL, NULL, 0, 0, "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
     "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>", "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>",
     "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>", "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>",
     "", NULL, NULL, NULL, NULL,
     {"<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>", "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>",
      "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>", "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>",
      "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>", NULL}},
    {DF_TOOLS_KIMI_K2, "kimi-k2", SH_MARKUP, "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
     "<|tool_call_begin|>functions.", ":", "<|tool_call_argument_begin|>", "<|tool_call_end|>", NULL, NULL, NULL, NULL,
     NULL, 0, 1, "<|tool_calls_section_begin|>", "<|tool_call_begin|>functions.", ":0<|tool_call_argument_begin|>",
     "<|tool_call_end|>", "<|tool_calls_section_end|>", "", NULL, NULL, NULL, NULL,
     {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
      "<|tool_call_end|>", NULL}},
    {DF_TOOLS_QWEN_XML, "qwen3-coder", SH_XML, NULL, NULL, "<tool_call>\n<function=", ">", NULL,
     "</function>\n</tool_call>", "<parameter=", ">", NULL, "</parameter>", NULL, 0, 0, "", "<tool_call>\n<function=",
     ">\n", "</function>\n</tool_call>", "", "\n", "<parameter=", ">\n", ">\n", "\n</parameter>\n",
     {"<tool_call>", "</tool_call>", NULL}},
    {DF_TOOLS_GLM, "glm", SH_XML, NULL, NULL, "<tool_call>", "\n", NULL, "</tool_call>", "<arg_key>", "</arg_key>",
     "<arg_value>", "</arg_value>", NULL, 0, 0, "", "<tool_call>", "\n", "</tool_call>", "", "\n", "<arg_key>",
     "</arg_key>\n<arg_value>", "</arg_key>\n<arg_value>", "</arg_value>\n",
     {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", NULL}},
    {DF_TOOLS_MINIMAX, "minimax-m2", SH_XML, "<minimax:tool_call>", "</minimax:tool_call>", "<invoke name=\"", "\">",
     NULL, "</invoke>", "<parameter name=\"", "\">", NULL, "</parameter>", NULL, 0, 0, "<minimax:tool_call>\n",
     "<invoke name=\"", "\">\n", "</invoke>\n", "</minimax:tool_call>", "", "<parameter name=\"", "\">", "\">",
     "</parameter>\n", {"<minimax:tool_call>", "</minimax:tool_call>", NULL}},
    {DF_TOOLS_DSML, "dsml", SH_XML, "<\xef\xbd\x9c" "DSML\xef\xbd\x9c", "</\xef\xbd\x9c" "DSML\xef\xbd\x9c", "<\xef\xbd\x9c" "DSML\xef\xbd\x9cinvoke name=\"",
     "\">", NULL, "</\xef\xbd\x9c" "DSML\xef\xbd\x9cinvoke>", "<\xef\xbd\x9c" "DSML\xef\xbd\x9cparameter name=\"", "\"", ">",
     "</\xef\xbd\x9c" "DSML\xef\xbd\x9cparameter>", NULL, 0, 0, NULL, "<\xef\xbd\x9c" "DSML\xef\xbd\x9cinvoke name=\"", "\">\n",
     "</\xef\xbd\x9c" "DSML\xef\xbd\x9cinvoke>\n", NULL, "", "<\xef\xbd\x9c" "DSML\xef\xbd\x9cparameter name=\"",
     "\" string=\"true\">", "\" string=\"false\">", "</\xef\xbd\x9c" "DSML\xef\xbd\x9cparameter>\n", {NULL}},
    {DF_TOOLS_KIMI_K3, "kimi-k3", SH_XML, "<|open|>tools<|sep|>", "<|close|>tools<|sep|>", "<|open|>call tool=\"", "\"",
     "<|sep|>", "<|close|>call<|sep|>", "<|open|>argument key=\"", "\"", "<|sep|>", "<|close|>argument<|sep|>", NULL, 0,
     0, "<|open|>tools<|sep|>", "<|open|>call tool=\"", "\"<|sep|>", "<|close|>call<|sep|>", "<|close|>tools<|sep|>",
     "", "<|open|>argument key=\"", "\" type=\"string\"<|sep|>", "\" type=\"json\"<|sep|>", "<|close|>argument<|sep|>",
     {"<|open|>", "<|close|>", "<|sep|>", NULL}},
    {DF_TOOLS_HARMONY, "harmony", SH_HARMONY, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 0,
     "", "<|channel|>commentary to=functions.", " <|constrain|>json<|message|>", "<|call|>", "", "", NULL, NULL, NULL,
     NULL, {"<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>", NULL}},
};
/* clang-format on */

static const tool_fmt *fmt_of(df_tool_format f) {
    if (f == DF_TOOLS_DSML_V4) f = DF_TOOLS_DSML; /* the same but for the section's name (dsml_section) */
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++)
        if (formats[i].id == f) return &formats[i];
    return &formats[0];
}

const char *df_tool_format_name(df_tool_format f) { return f == DF_TOOLS_DSML_V4 ? "dsml-v4" : fmt_of(f)->name; }

/* DeepSeek V3.2 names its DSML section function_calls, V4 tool_calls. */
static const char *dsml_section(df_tool_format f) { return f == DF_TOOLS_DSML_V4 ? "tool_calls>" : "function_calls>"; }

const char *const *df_tool_format_markers(df_tool_format f) { return fmt_of(f)->markers; }

const char *df_tool_format_trigger(df_tool_format f) {
    static const char *const dsml[2] = {"<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "function_calls>",
                                        "<\xef\xbd\x9c" "DSML\xef\xbd\x9c" "tool_calls>"};
    if (f == DF_TOOLS_DSML || f == DF_TOOLS_DSML_V4) return dsml[f == DF_TOOLS_DSML_V4];
    if (f == DF_TOOLS_LLAMA3) return "{\"name\"";
    if (f == DF_TOOLS_GENERIC) return "{\"tool_calls\"";
    if (f == DF_TOOLS_QWEN_XML || f == DF_TOOLS_HERMES || f == DF_TOOLS_GLM) return "<tool_call>";
    const tool_fmt *t = fmt_of(f);
    return *t->g_sec_open ? t->g_sec_open : t->g_call_open;
}

static int has(const char *s, const char *needle) { return strstr(s, needle) != NULL; }

/* The order matters: the most specific markers first, as llama.cpp tests them. */
df_tool_format df_tool_format_detect(const char *t) {
    if (!t) return DF_TOOLS_GENERIC;
    if (has(t, "<|channel|>")) return DF_TOOLS_HARMONY;
    if (has(t, "<|tool_calls_section_begin|>") && has(t, "<|tool_call_begin|>")) return DF_TOOLS_KIMI_K2;
    if (has(t, "<|open|>") && has(t, "<|close|>") && has(t, "<|end_of_msg|>")) return DF_TOOLS_KIMI_K3;
    if (has(t, "<minimax:tool_call>") || (has(t, "<invoke name=") && has(t, "minimax"))) return DF_TOOLS_MINIMAX;
    if (has(t, "dsml_token") && has(t, "DSML")) return has(t, "function_calls") ? DF_TOOLS_DSML : DF_TOOLS_DSML_V4;
    if (has(t, "<tool_call>") && has(t, "<function=") && has(t, "<parameter=")) return DF_TOOLS_QWEN_XML;
    if (has(t, "<arg_key>") && has(t, "<arg_value>")) return DF_TOOLS_GLM;
    if (has(t, "tool\xe2\x96\x81" "call\xe2\x96\x81" "begin")) {
        if (has(t, "begin\xef\xbd\x9c>function<\xef\xbd\x9ctool\xe2\x96\x81sep") ||
            has(t, "begin\xef\xbd\x9c>' + tool['type'] + '<")) /* the name after a type and a newline */
            return DF_TOOLS_DEEPSEEK_R1;
        return DF_TOOLS_DEEPSEEK_V31;
    }
    if (has(t, "[TOOL_CALLS]")) return has(t, "[ARGS]") ? DF_TOOLS_MISTRAL_ARGS : DF_TOOLS_MISTRAL;
    if (has(t, "<tool_call>")) return DF_TOOLS_HERMES;
    if (has(t, "<|python_tag|>") || has(t, "\"parameters\": dictionary of argument name")) return DF_TOOLS_LLAMA3;
    return DF_TOOLS_GENERIC;
}

/* ---- text helpers ---- */

typedef struct {
    const char *t;
    size_t n, i;
    int partial; /* the text may continue */
    int cut;     /* the text ended before the construct did (partial) */
} rd;

static void skip_ws(rd *r) {
    while (r->i < r->n && isspace((unsigned char)r->t[r->i])) r->i++;
}

/* Whether the text at r->i starts with s (consumed). At the end of a partial text with a prefix of s there, sets
 * cut. */
static int take(rd *r, const char *s) {
    if (r->i > r->n) return 0;
    const size_t k = strlen(s), left = r->n - r->i;
    if (left >= k) {
        if (memcmp(r->t + r->i, s, k)) return 0;
        r->i += k;
        return 1;
    }
    if (r->partial && !memcmp(r->t + r->i, s, left)) r->cut = 1;
    return 0;
}

/* The offset of s in t[from..n), or -1. */
static long find(const char *t, size_t n, size_t from, const char *s) {
    const size_t k = strlen(s);
    if (!k) return (long)from;
    for (size_t p = from; p + k <= n; p++)
        if (t[p] == s[0] && !memcmp(t + p, s, k)) return (long)p;
    return -1;
}

/* The length of the longest tail of t[0..n) that is a proper prefix of s. */
static size_t prefix_tail(const char *t, size_t n, const char *s) {
    const size_t k = strlen(s);
    for (size_t m = k > 0 ? k - 1 : 0; m > 0; m--)
        if (m <= n && !memcmp(t + n - m, s, m)) return m;
    return 0;
}

/* Where a complete JSON value starting at t[i] (after whitespace) ends, or 0 when it does not complete in t[..n). */
static size_t json_end(const char *t, size_t n, size_t i) {
    int depth = 0, in_str = 0;
    if (i >= n || (t[i] != '{' && t[i] != '[')) return 0;
    for (size_t p = i; p < n; p++) {
        const char c = t[p];
        if (in_str) {
            if (c == '\\') p++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth == 0) return p + 1;
        }
    }
    return 0;
}

/* Fewer bytes than n so that a UTF-8 sequence is not cut. */
static size_t utf8_whole(const char *s, size_t n) {
    size_t k = n;
    int back = 0;
    while (k > 0 && back < 4 && ((unsigned char)s[k - 1] & 0xC0) == 0x80) k--, back++;
    if (k == 0) return n;
    const unsigned char b = (unsigned char)s[k - 1];
    const int need = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : 0;
    return need > back ? k - 1 : n;
}

static char *dupn(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = 0;
    return d;
}

/* ---- the growing result ---- */

typedef struct {
    char *buf;
    size_t n, cap;
    int oom;
} sb;

static void sb_add(sb *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *g = realloc(b->buf, cap);
        if (!g) return (void)(b->oom = 1);
        b->buf = g, b->cap = cap;
    }
    memcpy(b->buf + b->n, s, n);
    b->n += n;
    b->buf[b->n] = 0;
}
static void sb_str(sb *b, const char *s) { sb_add(b, s, strlen(s)); }

/* s as a JSON string's inside (escaped, no quotes) */
static void sb_json_chars(sb *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const unsigned char c = (unsigned char)s[i];
        char e[8];
        if (c == '"' || c == '\\') e[0] = '\\', e[1] = (char)c, sb_add(b, e, 2);
        else if (c == '\n') sb_add(b, "\\n", 2);
        else if (c == '\r') sb_add(b, "\\r", 2);
        else if (c == '\t') sb_add(b, "\\t", 2);
        else if (c < 0x20) snprintf(e, sizeof e, "\\u%04x", c), sb_add(b, e, 6);
        else sb_add(b, (const char *)&c, 1);
    }
}

static int add_call(df_tool_parse *p, const char *name, size_t nl, const char *args, size_t al, const char *id,
                    size_t il, int done) {
    df_tool_call *g = realloc(p->calls, (size_t)(p->n_calls + 1) * sizeof *g);
    if (!g) return -1;
    p->calls = g;
    df_tool_call *c = &g[p->n_calls];
    c->name = dupn(name, nl);
    c->arguments = dupn(args, al);
    c->id = id ? dupn(id, il) : NULL;
    c->done = done;
    p->n_calls++;
    return c->name && c->arguments && (!id || c->id) ? 0 : -1;
}

void df_tool_parse_free(df_tool_parse *p) {
    if (!p) return;
    for (int i = 0; i < p->n_calls; i++) free(p->calls[i].name), free(p->calls[i].arguments), free(p->calls[i].id);
    free(p->calls);
    free(p->content);
    free(p->reasoning);
    memset(p, 0, sizeof *p);
}

/* ---- the tools' schemas: each argument's type ---- */

/* Whether the tool name's parameter key is a string (its schema's type, "string" when unknown). */
static int param_is_string(const cJSON *tools, const char *name, size_t nl, const char *key, size_t kl) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *fn = f ? cJSON_GetObjectItemCaseSensitive(f, "name") : NULL;
        if (!cJSON_IsString(fn) || strlen(fn->valuestring) != nl || memcmp(fn->valuestring, name, nl)) continue;
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f, "parameters"),
                                                              "properties"), *pr;
        cJSON_ArrayForEach(pr, props) {
            if (strlen(pr->string) != kl || memcmp(pr->string, key, kl)) continue;
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(pr, "type");
            return !cJSON_IsString(ty) || !strcmp(ty->valuestring, "string");
        }
    }
    return 1;
}

/* ---- the shapes ---- */

/* JSON: one object {"name": ..., ARGS_KEY: {...}} at r->i. Returns 1 parsed (a call added), 0 not a call, -1 out of
 * memory. In a partial text that ends inside it, sets cut and adds the call as far as it is sure. */
static int json_call(const tool_fmt *f, rd *r, df_tool_parse *p) {
    skip_ws(r);
    const size_t start = r->i;
    const size_t end = json_end(r->t, r->n, start);
    if (!end) {
        if (!r->partial || (start < r->n && r->t[start] != '{')) return 0;
        r->cut = 1;
        if (start >= r->n) return 0; /* the object has not begun */
        /* the streamed prefix: {"name": "f", "arguments": <its text so far>, when written in that order */
        rd q = *r;
        q.i = start + 1;
        skip_ws(&q);
        if (!take(&q, "\"name\"")) return 0;
        skip_ws(&q);
        if (!take(&q, ":")) return 0;
        skip_ws(&q);
        const long nq = q.i < q.n && q.t[q.i] == '"' ? find(q.t, q.n, q.i + 1, "\"") : -1;
        if (nq < 0) return 0;
        const size_t n0 = q.i + 1, n1 = (size_t)nq;
        q.i = n1 + 1;
        skip_ws(&q);
        char key[64];
        snprintf(key, sizeof key, "\"%s\"", f->args_key);
        if (!take(&q, ",")) return 0;
        skip_ws(&q);
        if (!take(&q, key)) return 0;
        skip_ws(&q);
        if (!take(&q, ":")) return 0;
        skip_ws(&q);
        const size_t ae = json_end(q.t, q.n, q.i); /* the arguments may be whole already */
        size_t an = ae ? ae - q.i : q.n - q.i;
        while (an && isspace((unsigned char)q.t[q.i + an - 1])) an--;
        an = utf8_whole(q.t + q.i, an);
        return add_call(p, q.t + n0, n1 - n0, q.t + q.i, an, NULL, 0, 0) ? -1 : 0;
    }
    cJSON *o = cJSON_ParseWithLength(r->t + start, end - start);
    const cJSON *nm = o ? cJSON_GetObjectItemCaseSensitive(o, "name") : NULL;
    const cJSON *ar = o ? cJSON_GetObjectItemCaseSensitive(o, f->args_key) : NULL;
    if (!ar && o) ar = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!cJSON_IsString(nm) || !(cJSON_IsObject(ar) || cJSON_IsString(ar))) {
        cJSON_Delete(o);
        return 0;
    }
    /* the arguments' own text where it stands (what a stream has sent a prefix of), else cJSON's */
    const char *raw = NULL;
    size_t rl = 0;
    long at = find(r->t, end, start, f->args_key);
    if (at > 0 && cJSON_IsObject(ar)) {
        rd q = {r->t, end, (size_t)at + strlen(f->args_key) + 1, 0, 0};
        skip_ws(&q);
        if (take(&q, ":")) {
            skip_ws(&q);
            const size_t e = json_end(q.t, q.n, q.i);
            if (e) raw = q.t + q.i, rl = e - q.i;
        }
    }
    char *printed = NULL;
    if (!raw) {
        printed = cJSON_IsString(ar) ? strdup(ar->valuestring) : cJSON_PrintUnformatted(ar);
        if (!printed) return cJSON_Delete(o), -1;
        raw = printed, rl = strlen(printed);
    }
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(o, "id");
    const int rc = add_call(p, nm->valuestring, strlen(nm->valuestring), raw, rl,
                            cJSON_IsString(id) ? id->valuestring : NULL, cJSON_IsString(id) ? strlen(id->valuestring) : 0, 1);
    free(printed);
    cJSON_Delete(o);
    r->i = end;
    return rc ? -1 : 1;
}

/* The name: up to f->name_end (then up to and through f->name_skip); for XML also up to the first '<' (GLM writes
 * <tool_call>f</tool_call> for a call without arguments, <tool_call>f<arg_key>... with no new line). 1 read, 0 not there (cut when
 * the partial text may still complete it). *id1 is where the name's markers end. */
static int read_name(const tool_fmt *f, rd *r, size_t *n0, size_t *n1, size_t *id1) {
    long e = find(r->t, r->n, r->i, f->name_end);
    size_t skip = strlen(f->name_end);
    if (f->shape == SH_XML) { /* a name holds no '<': where one comes first, the name ends (the markers start) */
        const long lt = find(r->t, r->n, r->i, "<");
        if (lt >= 0 && (e < 0 || lt < e)) e = lt, skip = 0;
    }
    *n0 = *n1 = r->i;
    if (e < 0 || (size_t)e - r->i > 256) {
        if (r->partial && e < 0 && r->n - r->i <= 256) r->cut = 1;
        return 0;
    }
    size_t a = r->i, b = (size_t)e;
    while (a < b && isspace((unsigned char)r->t[a])) a++;
    while (b > a && isspace((unsigned char)r->t[b - 1])) b--;
    if (a == b) return 0;
    for (size_t k = a; k < b; k++)
        if (r->t[k] == '<' || r->t[k] == '\n' || r->t[k] == '"') return 0;
    *n0 = a, *n1 = b;
    r->i = f->name_skip ? (size_t)e : (size_t)e + skip; /* the skip may begin with name_end ("[" of "[ARGS]") */
    if (f->name_skip) {
        const long s = find(r->t, r->n, r->i, f->name_skip);
        if (s < 0 || (size_t)s - r->i > 256) {
            if (r->partial && s < 0) r->cut = 1;
            return 0;
        }
        r->i = (size_t)s + strlen(f->name_skip);
    }
    *id1 = r->i;
    return 1;
}

/* MARKUP: the name, then a JSON object. */
static int markup_call(const tool_fmt *f, rd *r, df_tool_parse *p) {
    size_t n0, n1, i1;
    if (!read_name(f, r, &n0, &n1, &i1)) return 0;
    skip_ws(r);
    const size_t a0 = r->i, end = json_end(r->t, r->n, a0);
    if (!end) {
        if (r->partial && (a0 >= r->n || r->t[a0] == '{')) {
            r->cut = 1;
            size_t an = r->n - a0;
            while (an && isspace((unsigned char)r->t[a0 + an - 1])) an--;
            an = utf8_whole(r->t + a0, an);
            if (add_call(p, r->t + n0, n1 - n0, r->t + a0, an, NULL, 0, 0)) return -1;
        }
        return 0;
    }
    cJSON *o = cJSON_ParseWithLength(r->t + a0, end - a0);
    const int ok = cJSON_IsObject(o);
    cJSON_Delete(o);
    if (!ok) return 0;
    r->i = end;
    if (f->call_close) {
        skip_ws(r);
        if (!take(r, f->call_close)) {
            if (r->cut || (r->partial && r->i >= r->n)) {
                r->cut = 1;
                return add_call(p, r->t + n0, n1 - n0, r->t + a0, end - a0, NULL, 0, 0) ? -1 : 0;
            }
            return 0;
        }
    }
    /* Kimi: the id is functions.NAME:INDEX, as the model wrote it */
    char id[300];
    int il = 0;
    if (f->id_in_call)
        il = snprintf(id, sizeof id, "functions.%.*s", (int)(i1 - strlen(f->name_skip) - n0), r->t + n0);
    return add_call(p, r->t + n0, n1 - n0, r->t + a0, end - a0, il > 0 ? id : NULL, (size_t)il, 1) ? -1 : 1;
}

/* XML: the name, then the arguments one element each, gathered into a JSON object. */
static int xml_call(const tool_fmt *f, const cJSON *tools, rd *r, df_tool_parse *p) {
    size_t n0, n1, i1;
    if (!read_name(f, r, &n0, &n1, &i1)) return 0;
    sb a = {0};
    sb_str(&a, "{");
    int np = 0, rc = 0;
    for (;;) {
        skip_ws(r);
        if (!take(r, f->p_open)) break;
        const long ke = find(r->t, r->n, r->i, f->p_name_end);
        if (ke < 0) {
            r->cut = r->partial;
            goto cut;
        }
        const size_t k0 = r->i, k1 = (size_t)ke;
        r->i = k1 + strlen(f->p_name_end);
        int is_str = param_is_string(tools, r->t + n0, n1 - n0, r->t + k0, k1 - k0);
        if (f->p_skip) { /* DSML: string="true|false" says it; others: attributes we skip */
            const long s = find(r->t, r->n, r->i, f->p_skip);
            if (s < 0) {
                r->cut = r->partial;
                goto cut;
            }
            const long st = find(r->t, (size_t)s, r->i, "string=\"false\"");
            if (find(r->t, (size_t)s, r->i, "string=\"") >= 0) is_str = st < 0;
            r->i = (size_t)s + strlen(f->p_skip);
        }
        const long ve = find(r->t, r->n, r->i, f->p_close);
        size_t v0 = r->i, v1 = ve >= 0 ? (size_t)ve : r->n;
        if (v0 < v1 && r->t[v0] == '\n') v0++; /* Qwen's values stand on lines of their own */
        if (ve < 0) {
            if (!r->partial) goto bad;
            r->cut = 1;
            if (is_str) { /* the value so far, without what may yet be the close marker or trailing space */
                size_t w = v1 - v0;
                w -= prefix_tail(r->t + v0, w, f->p_close);
                while (w && isspace((unsigned char)r->t[v0 + w - 1])) w--;
                w = utf8_whole(r->t + v0, w);
                if (np) sb_str(&a, ",");
                sb_str(&a, "\"");
                sb_json_chars(&a, r->t + k0, k1 - k0);
                sb_str(&a, "\":\"");
                sb_json_chars(&a, r->t + v0, w);
            }
            goto cut;
        }
        if (v1 > v0 && r->t[v1 - 1] == '\n') v1--;
        r->i = (size_t)ve + strlen(f->p_close);
        if (np++) sb_str(&a, ",");
        sb_str(&a, "\"");
        sb_json_chars(&a, r->t + k0, k1 - k0);
        sb_str(&a, "\":");
        cJSON *v = is_str ? NULL : cJSON_ParseWithLength(r->t + v0, v1 - v0);
        if (v) { /* JSON as written, without the spaces around it */
            size_t s = v0, e = v1;
            while (s < e && isspace((unsigned char)r->t[s])) s++;
            while (e > s && isspace((unsigned char)r->t[e - 1])) e--;
            sb_add(&a, r->t + s, e - s);
            cJSON_Delete(v);
        } else {
            sb_str(&a, "\"");
            sb_json_chars(&a, r->t + v0, v1 - v0);
            sb_str(&a, "\"");
        }
    }
    if (r->cut) goto cut;
    skip_ws(r);
    if (!take(r, f->call_close)) {
        if (r->cut || (r->partial && r->i >= r->n)) {
            r->cut = 1;
            goto cut;
        }
        goto bad;
    }
    sb_str(&a, "}");
    if (a.oom) goto oom;
    rc = add_call(p, r->t + n0, n1 - n0, a.buf, a.n, NULL, 0, 1) ? -1 : 1;
    free(a.buf);
    return rc;
cut:
    if (a.oom) goto oom;
    rc = add_call(p, r->t + n0, n1 - n0, a.buf, a.n, NULL, 0, 0) ? -1 : 0;
    free(a.buf);
    return rc;
bad:
    free(a.buf);
    return 0;
oom:
    free(a.buf);
    return -1;
}

/* Harmony (gpt-oss): messages <|start|>assistant HEADER <|message|> BODY <|end|>|<|call|>|<|return|>; the
 * header names the channel (<|channel|>analysis|commentary|final) and, for a call, the recipient
 * (to=functions.NAME, before or after the channel). */
static int harmony(rd *r, df_tool_parse *p, sb *content, sb *reasoning) {
    while (r->i < r->n) {
        /* text before the next message (a model that writes no channels): content */
        long m = find(r->t, r->n, r->i, "<|channel|>");
        const long st = find(r->t, r->n, r->i, "<|start|>");
        if (st >= 0 && (m < 0 || st < m)) m = st;
        if (m < 0) {
            size_t e = r->n;
            if (r->partial) { /* what may still become a marker is held back */
                const size_t a = prefix_tail(r->t + r->i, r->n - r->i, "<|channel|>");
                const size_t b = prefix_tail(r->t + r->i, r->n - r->i, "<|start|>");
                e -= a > b ? a : b;
                r->cut = 1;
            }
            sb_add(content, r->t + r->i, e - r->i);
            return 0;
        }
        sb_add(content, r->t + r->i, (size_t)m - r->i);
        r->i = (size_t)m;
        take(r, "<|start|>");
        const long hm = find(r->t, r->n, r->i, "<|message|>");
        if (hm < 0) { /* a header still being written; one never finished is content */
            if (r->partial) return r->cut = 1, 0;
            sb_add(content, r->t + r->i, r->n - r->i);
            return 0;
        }
        const size_t h0 = r->i, h1 = (size_t)hm;
        r->i = h1 + strlen("<|message|>");
        long b1 = -1;
        const char *ends[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
        size_t endlen = 0;
        for (int k = 0; k < 4; k++) {
            const long e = find(r->t, r->n, r->i, ends[k]);
            if (e >= 0 && (b1 < 0 || e < b1)) b1 = e, endlen = k < 3 ? strlen(ends[k]) : 0;
        }
        const size_t b0 = r->i;
        size_t be = b1 >= 0 ? (size_t)b1 : r->n;
        if (b1 < 0 && r->partial) { /* hold back what may become an end marker */
            size_t hold = 0;
            for (int k = 0; k < 4; k++) {
                const size_t h = prefix_tail(r->t + b0, be - b0, ends[k]);
                hold = h > hold ? h : hold;
            }
            be -= hold;
        }
        const long to = find(r->t, h1, h0, "to=functions.");
        if (to >= 0) {
            size_t n0 = (size_t)to + strlen("to=functions."), n1 = n0;
            while (n1 < h1 && !isspace((unsigned char)r->t[n1]) && r->t[n1] != '<') n1++;
            size_t a1 = be;
            while (a1 > b0 && isspace((unsigned char)r->t[a1 - 1])) a1--;
            if (b1 < 0 && r->partial) {
                if (add_call(p, r->t + n0, n1 - n0, r->t + b0, utf8_whole(r->t + b0, a1 - b0), NULL, 0, 0)) return -1;
                return r->cut = 1, 0;
            }
            const size_t e = json_end(r->t, a1, b0);
            cJSON *o = e == a1 ? cJSON_ParseWithLength(r->t + b0, a1 - b0) : NULL;
            const int ok = cJSON_IsObject(o);
            cJSON_Delete(o);
            if (ok) {
                if (add_call(p, r->t + n0, n1 - n0, r->t + b0, a1 - b0, NULL, 0, 1)) return -1;
            } else {
                sb_add(content, r->t + b0, be - b0); /* arguments that do not parse: content */
            }
        } else if (find(r->t, h1, h0, "analysis") >= 0) {
            sb_add(reasoning, r->t + b0, be - b0);
        } else {
            sb_add(content, r->t + b0, be - b0);
        }
        if (b1 < 0) return r->partial ? (r->cut = 1, 0) : 0;
        r->i = (size_t)b1 + endlen;
    }
    return 0;
}

/* Kimi K3 writes its answer in sections: <|open|>response<|sep|> ... <|close|>response<|sep|>, then the tools
 * section, then <|close|>message<|sep|> (the think section is the server's reasoning split). The wrappers are no
 * content: removed, and in a growing text a tail that may become one held back. */
static void k3_unwrap(sb *c, int partial) {
    static const char *const wrap[] = {"<|open|>response<|sep|>", "<|close|>response<|sep|>", "<|close|>message<|sep|>",
                                       "<|end_of_msg|>"};
    if (!c->buf) return;
    for (size_t w = 0; w < sizeof wrap / sizeof *wrap; w++) {
        const size_t k = strlen(wrap[w]);
        long at;
        while ((at = find(c->buf, c->n, 0, wrap[w])) >= 0) {
            memmove(c->buf + at, c->buf + at + k, c->n - (size_t)at - k + 1);
            c->n -= k;
        }
    }
    size_t hold = 0;
    for (size_t w = 0; partial && w < sizeof wrap / sizeof *wrap; w++) {
        const size_t h = prefix_tail(c->buf, c->n, wrap[w]);
        hold = h > hold ? h : hold;
    }
    c->n -= hold;
    while (c->n && isspace((unsigned char)c->buf[c->n - 1])) c->n--;
    c->buf[c->n] = 0;
}

/* The generic form: the whole answer is one JSON object, {"tool_calls": [{"name", "arguments"}...]} (or
 * {"tool_call": {...}}, or {"response": "..."}, which is content); anything else is content. A model told the
 * form in prose spaces it as it likes, so the object is read whole, with cJSON, once complete. */
static int generic(rd *r, df_tool_parse *p, sb *content) {
    size_t w = 0;
    while (w < r->n && isspace((unsigned char)r->t[w])) w++;
    if (w < r->n && r->t[w] != '{') return sb_add(content, r->t, r->n), 0;
    if (r->partial) return 0; /* an object being written: nothing yet */
    cJSON *o = cJSON_ParseWithLength(r->t + w, r->n - w), *list = NULL, *one, *c;
    if (cJSON_IsObject(o)) {
        list = cJSON_GetObjectItemCaseSensitive(o, "tool_calls");
        one = cJSON_GetObjectItemCaseSensitive(o, "tool_call");
        const cJSON *resp = cJSON_GetObjectItemCaseSensitive(o, "response");
        if (!list && cJSON_IsObject(one)) list = one; /* walked below as a list of one */
        if (!list && cJSON_IsString(resp) && cJSON_GetArraySize(o) == 1) {
            sb_str(content, resp->valuestring);
            cJSON_Delete(o);
            return 0;
        }
    }
    int ok = list && (cJSON_IsArray(list) ? cJSON_GetArraySize(list) > 0 : 1);
    for (int pass = 0; ok && pass < 2; pass++) { /* check every call, then add them */
        for (c = cJSON_IsArray(list) ? list->child : list; ok && c; c = cJSON_IsArray(list) ? c->next : NULL) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(c, "name");
            const cJSON *ar = cJSON_GetObjectItemCaseSensitive(c, "arguments");
            if (!cJSON_IsString(nm) || !cJSON_IsObject(ar)) {
                ok = 0;
                break;
            }
            if (!pass) continue;
            char *a = cJSON_PrintUnformatted(ar);
            const int bad = !a || add_call(p, nm->valuestring, strlen(nm->valuestring), a, strlen(a), NULL, 0, 1);
            cJSON_free(a);
            if (bad) return cJSON_Delete(o), -1;
        }
    }
    cJSON_Delete(o);
    if (!ok) sb_add(content, r->t, r->n);
    return 0;
}

int df_tool_calls_parse(df_tool_format fmt, const char *tools_json, const char *text, size_t len, int partial,
                        df_tool_parse *out) {
    memset(out, 0, sizeof *out);
    const tool_fmt *f = fmt_of(fmt);
    /* the tools' schemas type XML arguments only: other shapes do not read them (this runs at every streamed step) */
    cJSON *tools = tools_json && f->shape == SH_XML ? cJSON_Parse(tools_json) : NULL;
    rd r = {text ? text : "", text ? len : 0, 0, partial, 0};
    sb content = {0}, reasoning = {0};
    int rc = 0;
    if (f->shape == SH_HARMONY) {
        rc = harmony(&r, out, &content, &reasoning);
        goto done;
    }
    if (fmt == DF_TOOLS_GENERIC) {
        rc = generic(&r, out, &content);
        goto done;
    }
    /* where the calls start: the section's marker, or the first call's */
    const char *start = f->sec_open ? f->sec_open : f->call_open;
    size_t s0, c_end; /* where the calls start, and where the content before them ends */
    if (!*start) { /* Llama 3 / generic without a section: the whole text is one JSON object, after <|python_tag|> */
        size_t w = 0;
        while (w < r.n && isspace((unsigned char)r.t[w])) w++;
        c_end = w;
        if (r.n - w >= 14 && !memcmp(r.t + w, "<|python_tag|>", 14)) w += 14;
        else if (partial && r.n - w < 14 && !memcmp(r.t + w, "<|python_tag|>", r.n - w)) goto done; /* may be it */
        while (w < r.n && isspace((unsigned char)r.t[w])) w++;
        if (w >= r.n || r.t[w] != '{') {
            if (!(partial && w >= r.n)) sb_add(&content, r.t, r.n);
            goto done;
        }
        s0 = w;
    } else {
        const long at = find(r.t, r.n, 0, start);
        if (at < 0) { /* no call: all content, but what may yet become the marker (and the blank before it) */
            size_t keep = r.n;
            if (partial) {
                keep -= prefix_tail(r.t, r.n, start);
                while (keep && isspace((unsigned char)r.t[keep - 1])) keep--;
            }
            sb_add(&content, r.t, keep);
            goto done;
        }
        s0 = c_end = (size_t)at;
    }
    r.i = s0;
    int ok = 1;
    if (f->shape == SH_JSON && f->sec_open) { /* a list of objects: [TOOL_CALLS][{...}, ...] or {"tool_calls": [...]} */
        r.i += strlen(f->sec_open);
        skip_ws(&r);
        if (!strcmp(f->sec_open, "{\"tool_calls\"")) {
            if (!take(&r, ":")) ok = 0;
            skip_ws(&r);
        }
        if (ok && !take(&r, "[")) ok = 0;
        while (ok && !r.cut) {
            const int k = json_call(f, &r, out);
            if (k < 0) goto oom;
            if (k == 0) {
                ok = r.cut;
                break;
            }
            skip_ws(&r);
            if (take(&r, ",")) continue;
            if (!take(&r, "]")) ok = r.partial && r.i >= r.n ? (r.cut = 1) : 0;
            break;
        }
        if (ok && !r.cut && f->sec_close) {
            skip_ws(&r);
            if (!take(&r, f->sec_close)) ok = r.partial && r.i >= r.n ? (r.cut = 1) : 0;
        }
    } else {
        if (f->sec_open) {
            r.i += strlen(f->sec_open);
            if (fmt == DF_TOOLS_DSML || fmt == DF_TOOLS_DSML_V4) { /* function_calls> (V3.2) or tool_calls> (V4) */
                if (!take(&r, "function_calls>") && !take(&r, "tool_calls>")) ok = r.cut;
            }
        }
        int calls = 0;
        while (ok && !r.cut) {
            skip_ws(&r);
            if (!*f->call_open) { /* Llama 3: objects one after another, perhaps with ';' between */
                if (calls && r.i < r.n && r.t[r.i] == ';') r.i++, skip_ws(&r);
                if (calls && (r.i >= r.n || r.t[r.i] != '{')) break;
            }
            if (!take(&r, f->call_open)) {
                if (r.cut) break;
                if (!calls && !(r.partial && r.i >= r.n)) ok = 0;
                if (r.partial && r.i >= r.n) r.cut = 1;
                break;
            }
            const int k = f->shape == SH_JSON ? json_call(f, &r, out)
                          : f->shape == SH_MARKUP ? markup_call(f, &r, out)
                                                  : xml_call(f, tools, &r, out);
            if (k < 0) goto oom;
            if (k == 0) {
                if (!r.cut) ok = 0;
                break;
            }
            if (f->shape == SH_JSON && f->call_close) {
                skip_ws(&r);
                if (!take(&r, f->call_close)) {
                    if (r.cut || (r.partial && r.i >= r.n)) r.cut = 1;
                    else ok = 0;
                    if (out->n_calls) out->calls[out->n_calls - 1].done = 0;
                    break;
                }
            }
            calls++;
        }
        if (ok && !r.cut && f->sec_close) {
            skip_ws(&r);
            if (fmt == DF_TOOLS_DSML || fmt == DF_TOOLS_DSML_V4) {
                if (!take(&r, "</\xef\xbd\x9c" "DSML\xef\xbd\x9c") ||
                    (!take(&r, "function_calls>") && !take(&r, "tool_calls>")))
                    ok = r.cut || (r.partial && r.i >= r.n) ? (r.cut = 1) : 0;
            } else if (!take(&r, f->sec_close)) {
                ok = r.cut || (r.partial && r.i >= r.n) ? (r.cut = 1) : 0;
            }
        }
    }
    if (!ok && !r.cut) { /* malformed: from the marker on, it is content again */
        for (int i = 0; i < out->n_calls; i++) free(out->calls[i].name), free(out->calls[i].arguments), free(out->calls[i].id);
        out->n_calls = 0;
        sb_add(&content, r.t, r.n);
        goto done;
    }
    size_t c1 = c_end;
    while (c1 > 0 && isspace((unsigned char)r.t[c1 - 1])) c1--; /* the blank before the calls is neither */
    sb_add(&content, r.t, c1);
    if (!r.cut) { /* text after the calls */
        skip_ws(&r);
        if (r.i < r.n) {
            if (content.n) sb_str(&content, "\n");
            sb_add(&content, r.t + r.i, r.n - r.i);
        }
    }
done:
    if (fmt == DF_TOOLS_KIMI_K3) k3_unwrap(&content, partial);
    if (content.oom || reasoning.oom) goto oom;
    out->content = content.buf ? content.buf : strdup("");
    out->reasoning = reasoning.buf;
    cJSON_Delete(tools);
    if (!out->content) return df_tool_parse_free(out), DF_E_NOMEM;
    return rc < 0 ? (df_tool_parse_free(out), DF_E_NOMEM) : DF_OK;
oom:
    free(content.buf), free(reasoning.buf);
    cJSON_Delete(tools);
    df_tool_parse_free(out);
    return DF_E_NOMEM;
}

/* ---- the grammar ---- */

/* s as a GBNF string literal's inside */
static void sb_gbnf_chars(sb *b, const char *s) {
    for (; *s; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') sb_str(b, "\\"), sb_add(b, (const char *)&c, 1);
        else if (c == '\n') sb_str(b, "\\n");
        else if (c == '\r') sb_str(b, "\\r");
        else if (c == '\t') sb_str(b, "\\t");
        else sb_add(b, (const char *)&c, 1);
    }
}

static void lit(sb *b, const char *s) {
    if (!s || !*s) return;
    sb_str(b, " \"");
    sb_gbnf_chars(b, s);
    sb_str(b, "\"");
}

/* A schema's grammar (schema.c) with every rule name prefixed by pre: its root is then pre "root". */
static int add_schema_rules(sb *b, const cJSON *schema, const char *pre, char *err, size_t errlen) {
    char *text = schema ? cJSON_PrintUnformatted(schema) : strdup("{\"type\":\"object\"}"), *g = NULL;
    if (!text) return DF_E_NOMEM;
    const int rc = schema_to_gbnf(text, strlen(text), &g, err, errlen);
    cJSON_free(text);
    if (rc != DF_OK) return rc;
    /* prefix the identifiers outside literals, classes and comments */
    for (const char *s = g; *s;) {
        if (*s == '"' || *s == '[') {
            const char close = *s == '"' ? '"' : ']';
            const char *e = s + 1;
            while (*e && *e != close) e += *e == '\\' && e[1] ? 2 : 1;
            if (*e) e++;
            sb_add(b, s, (size_t)(e - s));
            s = e;
        } else if (*s == '#') {
            while (*s && *s != '\n') s++;
        } else if (isalpha((unsigned char)*s)) {
            const char *e = s;
            while (isalnum((unsigned char)*e) || *e == '-' || *e == '_') e++;
            sb_str(b, pre);
            sb_add(b, s, (size_t)(e - s));
            s = e;
        } else {
            sb_add(b, s, 1);
            s++;
        }
    }
    sb_str(b, "\n");
    free(g);
    return DF_OK;
}

/* The end of a call's rule whose arguments are one JSON object: its schema's root (then the text after, or
 * NULL), the call's close, and the schema's rules. */
static int args_rule(sb *b, const tool_fmt *f, const char *pre, const char *after, const cJSON *params, char *err,
                     size_t errlen) {
    sb_str(b, " ");
    sb_str(b, pre);
    sb_str(b, "root");
    lit(b, after);
    lit(b, f->g_call_close);
    sb_str(b, "\n");
    return add_schema_rules(b, params, pre, err, errlen);
}

/* The code points of UTF-8 text s into cp[0..max); how many, or -1 if more or not UTF-8. */
static int code_points(const char *s, uint32_t *cp, int max) {
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; n++) {
        const int k = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3 : (*p & 0xF8) == 0xF0 ? 4 : 0;
        if (!k || n == max) return -1;
        uint32_t c = k == 1 ? *p : *p & (0x7F >> k);
        for (int i = 1; i < k; i++) {
            if ((p[i] & 0xC0) != 0x80) return -1;
            c = c << 6 | (p[i] & 0x3F);
        }
        cp[n] = c;
        p += k;
    }
    return n;
}

/* Rules pre "v0" .. pre "v(m-1)": any text in which marker (m code points) does not occur. Rule vi reads on
 * from having matched the marker's first i code points (the automaton of Knuth, Morris and Pratt): each code
 * point of the marker leads to the state it makes, every other one back to v0; the text may end in any state.
 * Right recursion only (grammar.c keeps no frame for a rule's last symbol). 0, or -1 where the marker is too
 * long or not UTF-8 (the caller keeps text without '<'). */
static int no_marker_rules(sb *b, const char *pre, const char *marker) {
    uint32_t cp[64], uniq[64];
    int pi[64], nu = 0;
    const int m = code_points(marker, cp, 64);
    if (m < 1) return -1;
    pi[0] = 0; /* pi[i]: the longest proper border of cp[0..i] */
    for (int i = 1, k = 0; i < m; i++) {
        while (k > 0 && cp[i] != cp[k]) k = pi[k - 1];
        if (cp[i] == cp[k]) k++;
        pi[i] = k;
    }
    for (int i = 0; i < m; i++) {
        int seen = 0;
        for (int j = 0; j < nu; j++) seen |= uniq[j] == cp[i];
        if (!seen) uniq[nu++] = cp[i];
    }
    char t[128]; /* pre is under 48 bytes */
    for (int i = 0; i < m; i++) {
        snprintf(t, sizeof t, "%sv%d ::= \"\"", pre, i);
        sb_str(b, t);
        for (int u = 0; u < nu; u++) {
            int k = i; /* the state after uniq[u] */
            while (k > 0 && cp[k] != uniq[u]) k = pi[k - 1];
            if (cp[k] == uniq[u]) k++;
            if (k == m) continue; /* the marker would be whole */
            snprintf(t, sizeof t, " | [\\U%08X] %sv%d", (unsigned)uniq[u], pre, k);
            sb_str(b, t);
        }
        sb_str(b, " | [^");
        for (int u = 0; u < nu; u++) snprintf(t, sizeof t, "\\U%08X", (unsigned)uniq[u]), sb_str(b, t);
        snprintf(t, sizeof t, "] %sv0\n", pre);
        sb_str(b, t);
    }
    return 0;
}

/* An XML argument's string value: one of its enum's strings; with minLength or maxLength, text without '<' of that
 * length (characters, at most 4096); else any text without the close marker (no_marker_rules into vrules, the
 * rules named pre "v0"...). The text is not JSON: no escapes. */
static void xml_string_value(sb *b, sb *vrules, const cJSON *pr, const char *pre, const char *close) {
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(pr, "enum"), *v;
    int all_str = cJSON_IsArray(en) && cJSON_GetArraySize(en) > 0;
    cJSON_ArrayForEach(v, en) all_str &= cJSON_IsString(v) && !strchr(v->valuestring, '<');
    if (all_str) {
        sb_str(b, " (");
        int k = 0;
        cJSON_ArrayForEach(v, en) {
            if (k++) sb_str(b, " |");
            sb_str(b, " \"");
            sb_gbnf_chars(b, v->valuestring);
            sb_str(b, "\"");
        }
        sb_str(b, " )");
        return;
    }
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(pr, "minLength"), *hi = cJSON_GetObjectItemCaseSensitive(pr, "maxLength");
    const int mn = cJSON_IsNumber(lo) && lo->valuedouble > 0 ? (int)(lo->valuedouble < 4096 ? lo->valuedouble : 4096) : 0;
    const int mx = cJSON_IsNumber(hi) && hi->valuedouble >= mn ? (int)(hi->valuedouble < 4096 ? hi->valuedouble : 4096) : -1;
    char q[80];
    if (mx >= 0) snprintf(q, sizeof q, " [^<]{%d,%d}", mn, mx);
    else if (mn > 0) snprintf(q, sizeof q, " [^<]{%d,}", mn);
    else if (no_marker_rules(vrules, pre, close) == 0) snprintf(q, sizeof q, " %sv0", pre);
    else snprintf(q, sizeof q, " [^<]*");
    sb_str(b, q);
}

int df_tool_calls_grammar(df_tool_format fmt, const char *tools_json, const char *only, int parallel, char **gbnf,
                          char *err, size_t errlen) {
    *gbnf = NULL;
    const tool_fmt *f = fmt_of(fmt);
    cJSON *tools = cJSON_Parse(tools_json ? tools_json : "[]");
    sb b = {0}, alt = {0};
    int rc = DF_OK, n = 0;
    if (!cJSON_IsArray(tools)) {
        cJSON_Delete(tools);
        snprintf(err, errlen, "'tools' must be an array");
        return DF_E_INPUT;
    }
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = fn ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
        if (!cJSON_IsString(nm) || !*nm->valuestring) {
            snprintf(err, errlen, "tools[%d] has no function name", n);
            rc = DF_E_INPUT;
            break;
        }
        if (only && strcmp(only, nm->valuestring)) {
            n++;
            continue;
        }
        for (const char *c = nm->valuestring; *c; c++)
            if (*c == '<' || *c == '"' || *c == '\n' || (unsigned char)*c < 0x20) {
                snprintf(err, errlen, "tools[%d]: the function name holds '%c'", n, *c == '\n' ? ' ' : *c);
                cJSON_Delete(tools);
                free(b.buf), free(alt.buf);
                return DF_E_INPUT;
            }
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        char pre[32];
        snprintf(pre, sizeof pre, "t%d-", n);
        sb_str(&b, pre);
        sb_str(&b, "call ::=");
        if (f->shape == SH_JSON) {
            lit(&b, f->g_call_open);
            sb_str(&b, " \"{\\\"name\\\": \\\"");
            sb_gbnf_chars(&b, nm->valuestring);
            sb_str(&b, "\\\", \\\"");
            sb_gbnf_chars(&b, f->args_key);
            sb_str(&b, "\\\": \"");
            if ((rc = args_rule(&b, f, pre, "}", params, err, errlen)) != DF_OK) break;
        } else if (f->shape == SH_MARKUP || f->shape == SH_HARMONY) {
            lit(&b, f->g_call_open);
            lit(&b, nm->valuestring);
            lit(&b, f->g_name_tail);
            if ((rc = args_rule(&b, f, pre, NULL, params, err, errlen)) != DF_OK) break;
        } else { /* XML: each property, the required ones always, in the schema's order */
            lit(&b, f->g_call_open);
            lit(&b, nm->valuestring);
            lit(&b, f->g_name_tail);
            const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties"), *pr;
            const cJSON *req = cJSON_GetObjectItemCaseSensitive(params, "required");
            int k = 0;
            sb rules = {0}, vrules = {0};
            cJSON_ArrayForEach(pr, props) {
                int required = 0;
                const cJSON *q;
                cJSON_ArrayForEach(q, req) required |= cJSON_IsString(q) && !strcmp(q->valuestring, pr->string);
                const cJSON *ty = cJSON_GetObjectItemCaseSensitive(pr, "type");
                const int is_str = !cJSON_IsString(ty) || !strcmp(ty->valuestring, "string");
                char ppre[48];
                snprintf(ppre, sizeof ppre, "%sp%d-", pre, k);
                sb_str(&b, " ");
                sb_str(&b, ppre);
                sb_str(&b, required ? "arg" : "arg?");
                sb_str(&rules, ppre);
                sb_str(&rules, "arg ::=");
                lit(&rules, f->g_p_open);
                lit(&rules, pr->string);
                lit(&rules, is_str ? f->g_p_tail_str : f->g_p_tail_json);
                if (is_str) {
                    xml_string_value(&rules, &vrules, pr, ppre, f->p_close);
                } else {
                    sb_str(&rules, " ");
                    sb_str(&rules, ppre);
                    sb_str(&rules, "root");
                }
                lit(&rules, f->g_p_close);
                sb_str(&rules, "\n");
                sb_add(&rules, vrules.buf ? vrules.buf : "", vrules.n);
                vrules.n = 0;
                if (!is_str && (rc = add_schema_rules(&rules, pr, ppre, err, errlen)) != DF_OK) break;
                k++;
            }
            lit(&b, f->g_call_close);
            sb_str(&b, "\n");
            sb_add(&b, rules.buf ? rules.buf : "", rules.n);
            b.oom |= rules.oom | vrules.oom;
            free(rules.buf), free(vrules.buf);
            if (rc != DF_OK) break;
        }
        sb_str(&alt, alt.n ? " | " : "");
        sb_str(&alt, pre);
        sb_str(&alt, "call");
        n++;
    }
    cJSON_Delete(tools);
    if (rc == DF_OK && !alt.n) {
        snprintf(err, errlen, only ? "no tool is named '%s'" : "'tools' is empty", only ? only : "");
        rc = DF_E_INPUT;
    }
    if (rc == DF_OK) {
        sb root = {0};
        sb_str(&root, "root ::=");
        char dsml[64];
        if (f->id == DF_TOOLS_DSML) snprintf(dsml, sizeof dsml, "<\xef\xbd\x9c" "DSML\xef\xbd\x9c%s\n", dsml_section(fmt));
        lit(&root, f->id == DF_TOOLS_DSML ? dsml : f->g_sec_open);
        sb_str(&root, " call");
        if (parallel) { /* at most TOOL_MAX_PARALLEL calls */
            char rep[32];
            sb_str(&root, " (");
            lit(&root, f->g_between);
            snprintf(rep, sizeof rep, " call){0,%d}", TOOL_MAX_PARALLEL - 1);
            sb_str(&root, rep);
        }
        if (f->id == DF_TOOLS_DSML) snprintf(dsml, sizeof dsml, "</\xef\xbd\x9c" "DSML\xef\xbd\x9c%s", dsml_section(fmt));
        lit(&root, f->id == DF_TOOLS_DSML ? dsml : f->g_sec_close);
        sb_str(&root, "\ncall ::= ");
        sb_add(&root, alt.buf, alt.n);
        sb_str(&root, "\n");
        sb_add(&root, b.buf ? b.buf : "", b.n);
        if (root.oom || b.oom || alt.oom) rc = DF_E_NOMEM, free(root.buf);
        else *gbnf = root.buf;
    }
    free(b.buf), free(alt.buf);
    if (rc == DF_E_NOMEM) snprintf(err, errlen, "out of memory");
    return rc;
}
