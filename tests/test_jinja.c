/*
 * test_jinja.c - the chat-template engine (src/text/jinja.c, src/text/chat.c).
 *
 * 1. Every template of tests/data/jinja/templates (real chat templates of
 *    published models, from llama.cpp's models/templates) rendered with every
 *    conversation of tests/data/jinja/conv must equal, byte for byte, what
 *    Hugging Face's @huggingface/jinja produced (tests/data/jinja/expected,
 *    made by tests/jinja/make-fixtures.sh; `make test-ref` regenerates them live
 *    and runs this test against the live ones: DELTAFIN_JINJA_REF_DIR). Where
 *    the reference fails (a template needs what it lacks), the engine must
 *    fail too, with the same message.
 * 2. Unit tests of the pieces: expressions, printing, filters, whitespace
 *    control, errors naming the construct and line, limits, hostile input.
 *
 * `test_jinja --render TEMPLATE VARS.json` prints one rendering (debugging).
 */
#include <dirent.h>
#include <string.h>
#include <time.h>

#include "deltafin.h"
#include "jinja.h"
#include "testutil.h"

#define DATA "tests/data/jinja"

static time_t fixed_now(void) { /* 2026-01-15 10:30:00 local time (TZ=UTC), as tests/jinja/render.mjs */
    struct tm tm = {0};
    tm.tm_year = 126;
    tm.tm_mon = 0;
    tm.tm_mday = 15;
    tm.tm_hour = 10;
    tm.tm_min = 30;
    tm.tm_isdst = -1;
    return mktime(&tm);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *p = malloc(cap);
    size_t k;
    while (p && (k = fread(p + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (cap - n < 2) {
            char *q = realloc(p, cap * 2);
            if (!q) { free(p); p = NULL; break; }
            p = q;
            cap *= 2;
        }
    }
    fclose(f);
    if (p) p[n] = 0;
    if (len) *len = n;
    return p;
}

static int render_file(const char *tmpl, size_t tlen, const char *vars, char **out, char *err, size_t errlen) {
    jinja_opts o = {0};
    o.now = fixed_now();
    const char *v[1] = {vars};
    return jinja_render(tmpl, tlen, v, vars ? 1 : 0, &o, out, err, errlen);
}

/* ---- 1. real templates against the reference */

static int cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The engine's message (without "chat template line N: " and "raise_exception: ") says
 * what the reference's does: msg is render.mjs's one-line form, cut at 300 characters. */
static int same_error(const char *err, const char *msg) {
    const char *e = strstr(err, ": ");
    e = e ? e + 2 : err;
    if (!strncmp(e, "raise_exception: ", 17)) e += 17;
    char norm[600];
    size_t n = 0;
    for (; *e && n < sizeof norm - 1; e++) {
        int sp = *e == ' ' || *e == '\n' || *e == '\t' || *e == '\r';
        if (sp && n > 0 && norm[n - 1] == ' ') continue;
        norm[n++] = sp ? ' ' : *e;
    }
    norm[n] = 0;
    size_t len = (size_t)(strchr(msg, '\n') - msg), cmp = len < 200 ? len : 200;
    return strlen(norm) >= cmp && strncmp(norm, msg, cmp) == 0;
}

static void test_reference(void **state) {
    (void)state;
    const char *ref = getenv("DELTAFIN_JINJA_REF_DIR");
    if (!ref) ref = DATA "/expected";
    DIR *d = opendir(ref);
    assert_non_null(d);
    char *names[256];
    int nn = 0;
    struct dirent *de;
    while ((de = readdir(d)) && nn < 256) {
        size_t l = strlen(de->d_name);
        if (l > 4 && !strcmp(de->d_name + l - 4, ".txt")) names[nn++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)nn, sizeof *names, cmp_name);
    int same = 0, both_err = 0, bad = 0, tmpl_all_ok = 0, tmpl_some_ok = 0;
    for (int t = 0; t < nn; t++) {
        char path[1024];
        size_t elen, tlen;
        snprintf(path, sizeof path, "%s/%s", ref, names[t]);
        char *exp = read_file(path, &elen);
        assert_non_null(exp);
        snprintf(path, sizeof path, DATA "/templates/%.*s.jinja", (int)(strlen(names[t]) - 4), names[t]);
        char *tmpl = read_file(path, &tlen);
        assert_non_null(tmpl);
        int n_ok = 0, n_rec = 0;
        for (char *p = exp; p < exp + elen;) {
            char conv[256], kind[16];
            size_t blen = 0;
            int k = sscanf(p, "=== %255s %15s %zu", conv, kind, &blen);
            assert_true(k >= 2);
            char *body = strchr(p, '\n') + 1;
            int ok = !strcmp(kind, "ok");
            char *end = ok ? body + blen + 1 : strchr(body, '\n') + 1;
            snprintf(path, sizeof path, DATA "/conv/%s.json", conv);
            char *vars = read_file(path, NULL);
            assert_non_null(vars);
            char *out = NULL, err[512];
            int rc = render_file(tmpl, tlen, vars, &out, err, sizeof err);
            n_rec++;
            if (ok && rc == 0 && strlen(out) == blen && memcmp(out, body, blen) == 0) {
                same++;
                n_ok++;
            } else if (!ok && rc != 0 && same_error(err, body)) {
                both_err++;
            } else {
                bad++;
                if (getenv("JINJA_VERBOSE") || bad <= 30)
                    print_message("MISMATCH %s x %s: reference %s%.*s, engine %s%s\n", names[t], conv,
                                  ok ? "ok" : "error: ", ok ? 0 : (int)(strchr(body, '\n') - body), body,
                                  rc == 0 ? "ok" : "error: ", rc == 0 ? "" : err);
            }
            free(out);
            free(vars);
            p = end;
        }
        tmpl_all_ok += n_ok == n_rec;
        tmpl_some_ok += n_ok > 0;
        free(exp);
        free(tmpl);
        free(names[t]);
    }
    print_message("chat templates: %d renderings byte-identical, %d fail in both, %d differ; %d templates identical on "
                  "every conversation, %d on some\n", same, both_err, bad, tmpl_all_ok, tmpl_some_ok);
    assert_int_equal(bad, 0);
    assert_true(same >= 1000);
}


/* ---- 2. pieces of the engine */

/* Render with the fixed clock; the output, or "ERROR: message" (static buffer). */
static const char *R(const char *tmpl, const char *vars) {
    static char buf[1 << 16];
    char *out = NULL, err[512];
    if (render_file(tmpl, strlen(tmpl), vars, &out, err, sizeof err) != 0) {
        snprintf(buf, sizeof buf, "ERROR: %s", err);
    } else {
        snprintf(buf, sizeof buf, "%s", out);
        free(out);
    }
    return buf;
}

/* Template, variables, and what @huggingface/jinja 0.5.11 renders (checked with it when written). */
static const char *const cases[][3] = {
    {"{{ [7, 8][0 // 0] }}|{{ [1, 2][(0 // 0):] }}|{{ 'ab'|indent(0 // 0) }}|{{ [1]|tojson(indent=0 // 0) }}", "{}", "7|[]|ab|[1]"},
    {"{{ \"+.5\"|int(9) }}|{{ \" -12.7e2z\"|float }}|{{ \".5\"|float }}|{{ \"-Infinity\"|float }}|{{ \"inf\"|float(1.5) }}|"
     "{{ \"1e5\"|int }}|{{ \"x\"|float }}|{{ \" 42 \"|int }}|{{ \"-\"|int(3) }}", "{}", "9|-1270.0|0.5|-Infinity|1.5|1|0.0|42|3"},
    {"{% macro box(t) %}[{{ t }}:{{ caller() }}]{% endmacro %}{% call box(\"x\") %}inside{% endcall %}", "{}", "[x:inside]"},
    {"{% macro each(l) %}{% for i in l %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(v) each([1, 2]) %}<{{ v }}>{% endcall %}|"
     "{% call(v, w=3) each([5]) %}{{ v }}{{ w }}{% endcall %}", "{}", "<1><2>|53"},
    {"{{ 1 + 2 }}|{{ 7 // 2 }}|{{ 7 / 2 }}|{{ 4 / 2 }}|{{ 2 ** 10 }}|{{ -7 % 3 }}|{{ 1.5 + 1 }}|{{ 0.1 + 0.2 }}|{{ 10 ** 21 }}|{{ 3.0 }}|{{ -0.0 }}",
     "{}",
     "3|3|3.5|2.0|1024|-1|2.5|0.30000000000000004|1e+21|3.0|-0.0"},
    {"{{ \"a\" ~ 1 ~ true }}|{{ \"a\" ~ 1.0 }}|{{ \"n\" + 2 }}|{{ [1, 2] ~ \"\" }}|{{ [1] + [2.0] }}",
     "{}",
     "a1true|a1|n2|1,2|[1, 2]"},
    {"{{ true }}|{{ none }}|{{ [1, \"a\", none, true, 2.5] }}|{{ {\"a\": 1.5, \"b\": {\"c\": []}} }}|{{ x }}|{{ u }}",
     "{\"x\": 3.0, \"u\": null}",
     "true||[1, \"a\", null, true, 2.5]|{\"a\": 1.5, \"b\": {\"c\": []}}|3|"},
    {"{{ 1 == 1.0 }}{{ \"1\" == 1 }}{{ none == undefined_thing }}{{ [1] == [1] }}{{ 1 < 2 and not false }}{{ 0 or \"x\" }}{{ \"\" and 1 }}",
     "{}",
     "truetruetruefalsetruex"},
    {"{{ \"b\" in \"abc\" }}{{ 2 in [1, 2] }}{{ \"k\" in {\"k\": 1} }}{{ \"x\" not in [] }}{{ 2.0 in [1, 2] }}{{ \"a\" in nothing }}",
     "{}",
     "truetruetruetruetruefalse"},
    {"[{{ \"y\" if 1 else \"n\" }}][{{ \"y\" if 0 }}][{{ \"a\" if false else \"b\" if false else \"c\" }}]",
     "{}",
     "[y][][c]"},
    {"{{ [1, 2, 3, 4][1:3] }}{{ \"hello\"[::-1] }}{{ [1, 2, 3][-1] }}{{ \"h\303\251llo\"[1] }}{{ [1, 2, 3, 4, 5][::2] }}{{ \"abc\"[5:] }}|{{ m[-1].content }}",
     "{\"m\": [{\"content\": \"last\"}]}",
     "[2, 3]olleh3\303\251[1, 3, 5]|last"},
    {"[{{ \"  a b \\n\".strip() }}]{{ \"a,b,c\".split(\",\", 1) }}{{ \" x  y \".split() }}{{ \"x\".startswith((\"a\", \"x\")) }}{{ \"aXbX\".replace(\"X\", \"-\", 1) }}{{ \"hello wOrld-x\".title() }}{{ \"\303\211COLE stra\303\237e\".lower() }}{{ \"stra\303\237e\".upper() }}{{ \"h\303\251llo\"|length }}{{ \"\360\237\230\200\"|length }}{{ \"ab\".replace(\"\", \"-\") }}{{ \"xxy\".rstrip(\"y\") }}",
     "{}",
     "[a b][\"a\", \"b,c\"][\"x\", \"y\"]truea-bXHello WOrld-X\303\251cole stra\303\237eSTRASSE52-a-b-xxy"},
    {"{{ d.get(\"a\") }}{{ d.get(\"z\", 5) }}{{ d.get(\"z\") }}{% for k, v in d.items() %}<{{ k }}={{ v }}>{% endfor %}{{ d|dictsort }}{{ d.keys() }}{{ d.values() }}{% for k in d %}{{ k }}{% endfor %}{{ d|length }}",
     "{\"d\": {\"b\": 2, \"a\": 1, \"10\": \"ten\", \"2\": \"two\"}}",
     "15<2=two><10=ten><b=2><a=1>[[\"10\", \"ten\"], [\"2\", \"two\"], [\"a\", 1], [\"b\", 2]][\"2\", \"10\", \"b\", \"a\"][\"two\", \"ten\", 2, 1]210ba4"},
    {"{% for x in [\"a\", \"b\", \"c\"] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.revindex }}{{ loop.length }}{{ loop.previtem }};{% endfor %}",
     "{}",
     "10truefalse33;21falsefalse23a;32falsetrue13b;"},
    {"{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}|{% for x in [] %}no{% else %}empty{% endfor %}|{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     "{}",
     "2242|empty|13"},
    {"{% set ns = namespace(c=0, s=\"\") %}{% for x in [1, 2] %}{% set ns.c = ns.c + x %}{% set y = 5 %}{% endfor %}{{ ns.c }}{{ y }}{% set y = 1 %}{% for x in [1] %}{% set y = 2 %}{% endfor %}{{ y }}{{ ns }}",
     "{}",
     "31{\"c\": 3, \"s\": \"\"}"},
    {"{% set a, b = [1, 2] %}{{ b }}{{ a }}{% set s %}hi {{ 1 }}{% endset %}[{{ s }}]{% set t = (1, 2) %}{{ t[0] }}{{ t|length }}",
     "{}",
     "21[hi 1]12"},
    {"{% macro f(a, b=2) %}{{ a }}-{{ b }}{% endmacro %}{{ f(1) }}|{{ f(1, b=3) }}|{{ f(\"x\", \"y\") }}{% macro g() %}{{ kwargs }}{{ varargs }}{% endmacro %}|{{ g(1, 2, k=3) }}",
     "{}",
     "1-2|1-3|x-y|{\"k\": 3}[1, 2]"},
    {"{{ {\"a\": [1, \"\303\251\\n\", none, 1.0, false]}|tojson }}|{{ {\"a\": [1, {\"b\": []}], \"c\": {}}|tojson(indent=2) }}|{{ \"\303\251\360\237\230\200\\u007f\"|tojson(ensure_ascii=true) }}|{{ {\"b\": 1, \"a\": 2}|tojson(sort_keys=true, separators=(\",\", \":\")) }}|{{ u|tojson }}",
     "{}",
     "{\"a\": [1, \"\303\251\\n\", null, 1, false]}|{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ],\n  \"c\": {}\n}|\"\\u00e9\\ud83d\\ude00\\u007f\"|{\"a\":2,\"b\":1}|null"},
    {"{{ \"  x \"|trim }}{{ \"ab\"|upper }}{{ [1, \"a\", none, true]|join(\", \") }}{{ [1, 2]|first }}{{ [1, 2]|last }}{{ u|default(\"d\") }}{{ \"\"|default(\"e\", true) }}{{ [\"b\", \"a\", \"b\"]|unique|list }}{{ [3, 1, 2]|sort }}{{ [1, 2]|reverse }}{{ \"hELLO wORLD\"|capitalize }}{{ \"text\"|string }}{{ 2.0|string }}{{ true|string }}{{ [1]|string }}",
     "{}",
     "xAB1, a, , true12de[\"b\", \"a\"][1, 2, 3][2, 1]HELLO wORLDtext2.0true[1]"},
    {"{{ l|selectattr(\"t\", \"equalto\", \"x\")|list|length }}{{ l|rejectattr(\"t\", \"equalto\", \"x\")|map(attribute=\"n\")|join(\",\") }}{{ l|selectattr(\"t\")|length }}{{ l|map(attribute=\"zz\", default=0)|list }}{{ l|sort(attribute=\"n\", reverse=true)|map(attribute=\"n\")|list }}",
     "{\"l\": [{\"t\": \"x\", \"n\": 1}, {\"t\": \"y\", \"n\": 2}, {\"t\": \"\", \"n\": 3}]}",
     "12,32[0, 0, 0][3, 2, 1]"},
    {"{{ \"a\\nb\\n\\nc\"|indent }}|{{ \"a\\nb\\n\\nc\"|indent(2, true) }}|{{ \"a\\nb\"|indent(width=1, first=true, blank=true) }}|{{ \"12abc\"|int }}{{ \" -3.5e1x\"|float }}{{ \"x\"|int(7) }}{{ 3.7|int }}{{ -3.7|int }}{{ 3|float }}{{ -2|abs }}{{ \"a-b\"|replace(\"-\", \"+\") }}{{ {\"k\": 1}|items|list }}",
     "{}",
     "a\n    b\n\n    c|  a\n  b\n\n  c| a\n b|12-35.073-43.02a+b[[\"k\", 1]]"},
    {"{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ \"s\" is string }}{{ {} is mapping }}{{ [] is sequence }}{{ \"s\" is iterable }}{{ 1.5 is number }}{{ true is boolean }}{{ true is true }}{{ 0 is false }}{{ 3 is odd }}{{ 4 is even }}{{ x is not none }}{{ (1, 2) is iterable }}{{ \"ab\" is lower }}",
     "{\"x\": 1}",
     "truetruetruetruetruetruetruetruetruetruefalsetruetruetruefalsetrue"},
    {"a  {%- if true -%}  b  {%- endif %}  c\n  {% if true %}\nline\n  {% endif %}\nend {#- comment -#}  z\n",
     "{}",
     "ab  c\nline\nendz"},
    {"<{% for m in msgs %}\n  {{ m }}\n{% endfor %}>\n{{- '  x' }}  {{ 'y' -}}\n  !\n\n",
     "{\"msgs\": [\"a\", \"b\"]}",
     "<  a\n  b\n>  x  y!\n"},
    {"before {% generation %} inside {% endgeneration %} after\n{%- generation -%}  tight  {%- endgeneration -%}\nend",
     "{}",
     "before  inside  aftertightend"},
    {"{{ strftime_now(\"%Y-%m-%d %H:%M %b %B %% %j\") }}|{{ range(3) }}{{ range(1, 7, 2) }}{{ range(3, 0, -1) }}",
     "{}",
     "2026-01-15 10:30 Jan January % %j|[0, 1, 2][1, 3, 5][3, 2, 1]"},
    {"{{ 'a' 'b' }}{{ \"q\\\"\\t\\x41\\u00e9\" }}{{ -1 }}{{ - 2 }}{{ 5-3 }}{{ [1,2,3]|length-1 }}{{ {'a': {'b': 1}} }}",
     "{}",
     "abq\"\tA\303\251-1-222{\"a\": {\"b\": 1}}"},
    {"{% filter upper %}shout {{ 'it' }}{% endfilter %}{% if x %}1{% elif y %}2{% else %}3{% endif %}{{ 'a' if (x or y) }}",
     "{\"y\": [0]}",
     "SHOUT IT2a"},
};

static void test_cases(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = R(cases[i][0], cases[i][1]);
        if (strcmp(got, cases[i][2]) != 0) print_message("case %zu: %s\n  want [%s]\n  got  [%s]\n", i, cases[i][0], cases[i][2], got);
        assert_string_equal(got, cases[i][2]);
    }
}

/* What the reference cannot do fails here too, with the construct and the line. */
static void test_errors(void **state) {
    (void)state;
    static const char *const bad[][2] = {
        {"line one\n{{ 'x {}'.format(1) }}", "line 2"},
        {"{{ [1].append(2) }}", "not a function"},
        {"{{ 'a'|nosuchfilter }}", "nosuchfilter"},
        {"{{ x is nosuchtest }}", "nosuchtest"},
        {"a\nb\n{% call foo() %}x{% endcall %}", "line 3"},
        {"{% call foo() %}x{% endcall %}", "not a function"},
        {"{% with x = 1 %}{% endwith %}", "'with'"},
        {"{{ raise_exception('boom: ' ~ 1) }}", "boom: 1"},
        {"{% if x %}never closed", "end of template"},
        {"{{ x", "expected '}}'"},
        {"{{ 'unterminated }}", "nterminated"},
        {"{% for x in 5 %}{% endfor %}", "IntegerValue"},
        {"{{ undefined_thing + 1 }}", "undefined"},
        {"{{ none ~ 'x' }}", "null"},
        {"{{ (1, 2) }}", "TupleValue"},
        {"{{ 1 @ 2 }}", "Unexpected character"},
        {"{% break %}", "outside a loop"},
        {"{{ {1: 2} }}", "Object keys must be strings"},
        {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "argument"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *got = R(bad[i][0], "{}");
        if (strncmp(got, "ERROR: ", 7) != 0 || !strstr(got, bad[i][1]))
            print_message("error case %zu: %s\n  want an error with [%s]\n  got [%s]\n", i, bad[i][0], bad[i][1], got);
        assert_true(strncmp(got, "ERROR: ", 7) == 0 && strstr(got, bad[i][1]));
    }
    assert_string_equal(R("{{ x }}", "{\"x\": [1,"), "ERROR: chat template: variables: bad JSON at byte 9");
    assert_string_equal(R("{{ x }}", "{\"x\": 1} 2"), "ERROR: chat template: variables: bad JSON at byte 9");
    /* a \u0000 would end cJSON's string silently: refused; an escaped backslash before u0000 is text */
    assert_non_null(strstr(R("{{ x }}", "{\"x\": \"a\\u0000b\"}"), "ERROR: chat template: variables: a string holds"));
    assert_string_equal(R("{{ x }}", "{\"x\": \"a\\\\u0000b\"}"), "a\\u0000b");
    assert_string_equal(R("{{ x }}", "[1]"), "ERROR: chat template: variables must be a JSON object");
}

/* Limits: nesting, recursion, work, memory and output end in errors, not crashes. */
static void test_limits(void **state) {
    (void)state;
    size_t n = 100000;
    char *deep = malloc(2 * n + 16);
    assert_non_null(deep);
    strcpy(deep, "{{ ");
    for (size_t i = 0; i < n; i++) deep[3 + i] = '(';
    strcpy(deep + 3 + n, "1 }}");
    assert_non_null(strstr(R(deep, "{}"), "nested too deeply"));
    memset(deep, 0, 2 * n + 16);
    for (size_t i = 0; i < n / 20; i++) strcat(deep, "{% if 1 %}");
    assert_non_null(strstr(R(deep, "{}"), "nested too deeply"));
    free(deep);
    assert_non_null(strstr(R("{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}", "{}"), "nested too deeply"));
    char *chain = malloc(2 * n + 64);
    assert_non_null(chain);
    strcpy(chain, "{% macro m() %}{{ 1");
    for (size_t i = 0; i < n; i++) memcpy(chain + 19 + 2 * i, "+1", 2);
    strcpy(chain + 19 + 2 * n, " }}{% endmacro %}{{ m() }}");
    assert_non_null(strstr(R(chain, "{}"), "nested too deeply"));
    free(chain);
    char *vars = malloc(3 * n);
    assert_non_null(vars);
    strcpy(vars, "{\"x\": ");
    memset(vars + 6, '[', n);
    vars[6 + n] = 0;
    assert_non_null(strstr(R("{{ x }}", vars), "bad JSON")); /* beyond cJSON's nesting limit */
    const size_t d = 500;                                     /* within it, deeper than the values may be */
    memset(vars + 6 + d, ']', d);
    strcpy(vars + 6 + 2 * d, "}");
    assert_non_null(strstr(R("{{ x }}", vars), "nested too deeply"));
    free(vars);

    jinja_opts o = {0};
    o.max_steps = 100000;
    char *out = NULL, err[256];
    const char *spin = "{% for i in range(1000000) %}{{ i }}{% endfor %}";
    assert_int_equal(jinja_render(spin, strlen(spin), NULL, 0, &o, &out, err, sizeof err), -1);
    assert_non_null(strstr(err, "evaluation steps"));
    o.max_steps = 0;
    o.max_output = 1 << 16;
    const char *big = "{% for i in range(100000) %}xxxxxxxxxx{% endfor %}";
    assert_int_equal(jinja_render(big, strlen(big), NULL, 0, &o, &out, err, sizeof err), -1);
    assert_non_null(strstr(err, "output larger"));
    o.max_output = 0;
    o.max_memory = 1 << 22;
    const char *grow = "{% set ns = namespace(s='x') %}{% for i in range(100000) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}";
    assert_int_equal(jinja_render(grow, strlen(grow), NULL, 0, &o, &out, err, sizeof err), -1);
    assert_null(out);
}

/* Mutated real templates (bytes flipped, cut, Jinja punctuation inserted) must render or
 * fail cleanly: run under ASan/UBSan by `make test`. */
static void test_hostile(void **state) {
    (void)state;
    static const char *const names[] = {"meta-llama-Llama-3.1-8B-Instruct", "Qwen3.5-4B", "openai-gpt-oss-120b",
                                        "Kimi-K2-Thinking", "GLM-4.7-Flash", "MiniMax-M2", "deepseek-ai-DeepSeek-V3.1"};
    static const char *const bits[] = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "(", ")", "[", "]", "'", "\"", "|",
                                       ".", ",", "=", "not ", " if ", "endfor", "\\", "\n", "\xff", "\xe2\x80\xa8"};
    char *vars = read_file(DATA "/conv/11-parallel-tool-calls.json", NULL);
    assert_non_null(vars);
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int rendered = 0, failed = 0;
    jinja_opts o = {0};
    o.max_steps = 200000;
    o.max_memory = 16 << 20;
    o.max_output = 1 << 20;
    for (size_t t = 0; t < sizeof names / sizeof names[0]; t++) {
        char path[512];
        size_t len;
        snprintf(path, sizeof path, DATA "/templates/%s.jinja", names[t]);
        char *base = read_file(path, &len);
        assert_non_null(base);
        char *buf = malloc(len + 64 * 8 + 1);
        assert_non_null(buf);
        for (int it = 0; it < 150; it++) {
            memcpy(buf, base, len);
            size_t n = len;
            int muts = 1 + (int)(tu_rand(&rng) % 4);
            for (int m = 0; m < muts && n > 0; m++) {
                size_t at = tu_rand(&rng) % n;
                switch (tu_rand(&rng) % 4) {
                case 0: buf[at] = (char)(tu_rand(&rng) & 0xff); break;
                case 1: n = at; break;
                case 2: memmove(buf + at, buf + at + 1, n - at - 1); n--; break;
                default: {
                    const char *b = bits[tu_rand(&rng) % (sizeof bits / sizeof bits[0])];
                    size_t bl = strlen(b);
                    memmove(buf + at + bl, buf + at, n - at);
                    memcpy(buf + at, b, bl);
                    n += bl;
                }
                }
            }
            char *out = NULL, err[256];
            const char *v[1] = {vars};
            if (jinja_render(buf, n, v, 1, &o, &out, err, sizeof err) == 0) rendered++;
            else failed++;
            free(out);
        }
        free(buf);
        free(base);
    }
    free(vars);
    print_message("hostile templates: %d rendered, %d failed cleanly\n", rendered, failed);
    assert_true(rendered + failed == 150 * (int)(sizeof names / sizeof names[0]));
}

/* The public API: the model's template, its BOS/EOS texts, extra variables, a clear error without one. */
static void test_api(void **state) {
    (void)state;
    df_chat_message msgs[] = {{"system", "Be brief."}, {"user", "Hi \"there\"\n"}};
    char *out = NULL, err[256];
    const char *t = "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
                    "{% if add_generation_prompt %}[assistant:{% endif %}{{ tools|length if tools is defined }}";
    assert_int_equal(df_chat_apply_template(NULL, t, msgs, 2, 1, NULL, &out, err, sizeof err), 0);
    assert_string_equal(out, "[system:Be brief.][user:Hi \"there\"\n][assistant:");
    free(out);
    assert_int_equal(df_chat_apply_template(NULL, t, msgs, 2, 0, "{\"tools\": [{}, {}], \"bos_token\": \"<B>\"}", &out, err,
                                            sizeof err), 0);
    assert_string_equal(out, "<B>[system:Be brief.][user:Hi \"there\"\n]2");
    free(out);
    assert_int_equal(df_chat_apply_template(NULL, t, msgs, 2, 0,
                                            "{\"messages\": [{\"role\": \"tool\", \"content\": \"42\", \"tool_call_id\": \"c1\"}]}",
                                            &out, err, sizeof err), 0);
    assert_string_equal(out, "[tool:42]");
    free(out);
    assert_int_equal(df_chat_apply_template(NULL, NULL, msgs, 2, 1, NULL, &out, err, sizeof err), -1);
    assert_non_null(strstr(err, "no chat template"));
    assert_int_equal(df_chat_render("{{ a }}", "{\"a\": 1.0}", &out, err, sizeof err), 0);
    assert_string_equal(out, "1"); /* JSON 1.0 is JavaScript's 1, an integer */
    free(out);

    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", tu_shared_dir());
    FILE *f = fopen(path, "rb");
    if (!f) return;
    fclose(f);
    df_model_params mp = df_model_default_params();
    mp.n_threads = 1;
    df_model *m;
    assert_int_equal(df_model_load(path, &mp, &m, err, sizeof err), 0);
    if (!df_chat_template(m)) {
        assert_int_equal(df_chat_apply_template(m, NULL, msgs, 2, 1, NULL, &out, err, sizeof err), -1);
        assert_non_null(strstr(err, "no chat template"));
    }
    assert_int_equal(df_chat_apply_template(m, "{{ bos_token }}|{{ eos_token }}", msgs, 2, 1, NULL, &out, err, sizeof err), 0);
    assert_string_equal(out, "<s>|</s>");
    free(out);
    df_model_free(m);
}

/* --chat-template NAME: each built-in format renders one conversation exactly as llama.cpp's built-in formats
 * write it (src/llama-chat.cpp: roles, separators, trimmed contents where it trims, gemma's system turn merged
 * into the first user turn, mistral-v7 without a generation prompt); an unknown name is NULL. */
static void test_builtin_templates(void **state) {
    (void)state;
    const df_chat_message msgs[] = {{"system", "You are terse."}, {"user", "Hi there "}, {"assistant", " Hello! "},
                                    {"user", "Who are you?"}};
    static const struct { const char *name, *want; } formats[] = {
        {"chatml", "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there <|im_end|>\n"
                   "<|im_start|>assistant\n Hello! <|im_end|>\n<|im_start|>user\nWho are you?<|im_end|>\n"
                   "<|im_start|>assistant\n"},
        {"llama3", "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
                   "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                   "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {"phi3", "<|system|>\nYou are terse.<|end|>\n<|user|>\nHi there <|end|>\n<|assistant|>\n Hello! <|end|>\n"
                 "<|user|>\nWho are you?<|end|>\n<|assistant|>\n"},
        {"zephyr", "<|system|>\nYou are terse.<|endoftext|>\n<|user|>\nHi there <|endoftext|>\n<|assistant|>\n"
                   " Hello! <|endoftext|>\n<|user|>\nWho are you?<|endoftext|>\n<|assistant|>\n"},
        {"gemma", "<start_of_turn>user\nYou are terse.\n\nHi there<end_of_turn>\n<start_of_turn>model\nHello!"
                  "<end_of_turn>\n<start_of_turn>user\nWho are you?<end_of_turn>\n<start_of_turn>model\n"},
        {"mistral-v7", "[SYSTEM_PROMPT] You are terse.[/SYSTEM_PROMPT][INST] Hi there [/INST]  Hello! </s>"
                       "[INST] Who are you?[/INST]"},
        {"deepseek3", "You are terse.\n\n<｜User｜>Hi there <｜Assistant｜> Hello! <｜end▁of▁sentence｜>"
                      "<｜User｜>Who are you?<｜Assistant｜>"},
    };
    char err[256];
    int n = 0;
    while (df_chat_template_builtin_name(n)) n++;
    assert_int_equal(n, (int)(sizeof formats / sizeof formats[0]));
    for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
        const char *t = df_chat_template_builtin(formats[i].name);
        assert_non_null(t);
        char *out = NULL;
        assert_int_equal(df_chat_apply_template(NULL, t, msgs, 4, 1, NULL, &out, err, sizeof err), 0);
        if (strcmp(out, formats[i].want)) fprintf(stderr, "%s:\n[%s]\n[%s]\n", formats[i].name, out, formats[i].want);
        assert_string_equal(out, formats[i].want);
        free(out);
    }
    assert_null(df_chat_template_builtin("chatml2"));
    assert_null(df_chat_template_builtin(NULL));
}

int main(int argc, char **argv) {
    setenv("TZ", "UTC", 1);
    tzset();
    if (argc == 4 && !strcmp(argv[1], "--render")) {
        size_t tlen;
        char *tmpl = read_file(argv[2], &tlen), *vars = read_file(argv[3], NULL), *out = NULL, err[512];
        if (!tmpl || !vars) { fprintf(stderr, "cannot read inputs\n"); return 2; }
        int rc = render_file(tmpl, tlen, vars, &out, err, sizeof err);
        if (rc) fprintf(stderr, "ERROR: %s\n", err);
        else fwrite(out, 1, strlen(out), stdout);
        free(out);
        free(tmpl);
        free(vars);
        return rc ? 1 : 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference), cmocka_unit_test(test_cases), cmocka_unit_test(test_errors),
        cmocka_unit_test(test_limits),    cmocka_unit_test(test_hostile), cmocka_unit_test(test_api),
        cmocka_unit_test(test_builtin_templates),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
