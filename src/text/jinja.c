/*
 * jinja.c - the Jinja-subset template engine behind chat templates (contract: jinja.h).
 *
 * The reference is @huggingface/jinja 0.5.x, and this file follows its source
 * closely (lexer.ts, parser.ts, runtime.ts), quirks included, because a chat
 * template must produce byte-for-byte the prompt the model was trained with:
 *
 *  - Before lexing, one trailing newline is dropped, lstrip_blocks removes
 *    blanks before "{%", "{#" (and "{-") at a line start, trim_blocks removes
 *    the newline after "%}", "#}", "-}", and {% generation %} tags vanish.
 *  - Values are those of JavaScript: integers and floats are doubles (an
 *    "integer" is only a flag), strings are compared by content, lists and
 *    dicts by identity; == is JavaScript's loose equality. Printing: true,
 *    false, null prints nothing, 1.0 stays 1.0, lists and dicts print as JSON
 *    with ", " and ": ". "a" ~ 1.0 is "a1" (JavaScript's own toString).
 *  - String lengths count UTF-16 units; trimming and splitting use
 *    JavaScript's whitespace; upper/lower map code points with utf8proc.
 *  - Only the filters, tests and methods the reference has exist; anything
 *    else is an error naming it and the template line, as the reference
 *    throws one (e.g. str.format, list.append).
 *
 * Memory: every allocation of a render (tokens, syntax tree, values, strings)
 * comes from one arena freed at the end, so values need no ownership rules.
 * Errors, including allocation failures and the limits on memory, output,
 * evaluation steps and nesting depth, longjmp to jinja_render, which frees
 * the arena and returns -1 with the message. Nothing outside the arena is
 * held across a call that can fail but the variables' JSON tree (cJSON),
 * which jinja_render frees too.
 */
#include "jinja.h"

#include <cjson/cJSON.h>

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#define MAX_DEPTH 200 /* nesting of expressions, statements, macro calls, JSON */

/* ---------------------------------------------------------------- state, arena, errors */

typedef struct blk {
    struct blk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} blk;

typedef struct J {
    jmp_buf jb;
    blk *blocks;
    size_t mem, mem_limit, out_limit;
    uint64_t steps, max_steps;
    int line, depth;
    time_t now;
    char *err;
    size_t errlen;
    cJSON *json; /* the variables' JSON while it is copied (parse_json) */
} J;

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
_Noreturn static void
jfail(J *j, const char *fmt, ...) {
    if (j->err && j->errlen) {
        int k = j->line > 0 ? snprintf(j->err, j->errlen, "chat template line %d: ", j->line)
                            : snprintf(j->err, j->errlen, "chat template: ");
        if (k >= 0 && (size_t)k < j->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(j->err + k, j->errlen - (size_t)k, fmt, ap);
            va_end(ap);
        }
    }
    longjmp(j->jb, 1);
}

static void *jalloc(J *j, size_t n) {
    if (n > ((size_t)1 << 40)) jfail(j, "allocation too large");
    n = (n + 15) & ~(size_t)15;
    blk *b = j->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        if (j->mem + cap > j->mem_limit) jfail(j, "needs more than %zu bytes of memory", j->mem_limit);
        blk *nb = malloc(sizeof *nb + cap);
        if (!nb) jfail(j, "out of memory");
        nb->used = 0;
        nb->cap = cap;
        j->mem += cap;
        if (b && n > 16384) { /* a big block of its own: keep filling the current one */
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            j->blocks = nb;
        }
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

static void step(J *j) {
    if (++j->steps > j->max_steps) jfail(j, "too many evaluation steps (more than %llu)", (unsigned long long)j->max_steps);
}

static void enter(J *j) {
    if (++j->depth > MAX_DEPTH) jfail(j, "nested too deeply (more than %d levels)", MAX_DEPTH);
}

static char *jstrdup(J *j, const char *s, size_t n) {
    char *p = jalloc(j, n + 1);
    if (n) memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---------------------------------------------------------------- string builder */

typedef struct sb {
    char *p;
    size_t n, cap;
} sb;

static void sb_put(J *j, sb *b, const char *s, size_t n) {
    if (b->cap - b->n < n + 1) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->n < n + 1) {
            if (cap > j->out_limit) jfail(j, "output larger than %zu bytes", j->out_limit);
            cap *= 2;
        }
        char *p = jalloc(j, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void sb_str(J *j, sb *b, const char *s) { sb_put(j, b, s, strlen(s)); }
static void sb_ch(J *j, sb *b, char c) { sb_put(j, b, &c, 1); }

/* ---------------------------------------------------------------- UTF-8 and JavaScript text rules */

/* Decode one code point at s[i] (invalid bytes decode as themselves, length 1). */
static size_t u8dec(const char *s, size_t n, size_t i, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned c = u[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > n) {
        *cp = c;
        return 1;
    }
    uint32_t v = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k < len; k++) {
        if ((u[i + k] & 0xc0) != 0x80) {
            *cp = c;
            return 1;
        }
        v = (v << 6) | (u[i + k] & 0x3f);
    }
    *cp = v;
    return len;
}

static size_t u8enc(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xc0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* JavaScript's \s (WhiteSpace and LineTerminator). */
static int js_space_cp(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
           c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000 || c == 0xfeff;
}
/* Bytes of the whitespace character at s[i], 0 if none. */
static size_t js_space(const char *s, size_t n, size_t i) {
    if (i >= n) return 0;
    if ((unsigned char)s[i] < 0x80) return js_space_cp((unsigned char)s[i]) ? 1 : 0;
    uint32_t cp;
    size_t k = u8dec(s, n, i, &cp);
    return js_space_cp(cp) ? k : 0;
}
/* Start of the trailing whitespace of s[0..n). */
static size_t js_trim_end(const char *s, size_t n) {
    size_t e = n;
    while (e > 0) {
        size_t b = e - 1;
        while (b > 0 && e - b < 4 && ((unsigned char)s[b] & 0xc0) == 0x80) b--;
        size_t k = js_space(s, e, b);
        if (k == 0 || b + k != e) break;
        e = b;
    }
    return e;
}
static size_t js_trim_start(const char *s, size_t n) {
    size_t i = 0, k;
    while ((k = js_space(s, n, i)) > 0) i += k;
    return i;
}
static int is_word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Length in UTF-16 code units (JavaScript's String.length). */
static size_t js_length(const char *s, size_t n) {
    size_t len = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += u8dec(s, n, i, &cp);
        len += cp >= 0x10000 ? 2 : 1;
    }
    return len;
}

/* Shortest round-trip decimal, formatted as JavaScript's Number.prototype.toString. */
static void js_num(double v, char *out, size_t cap) {
    if (isnan(v)) { snprintf(out, cap, "NaN"); return; }
    if (isinf(v)) { snprintf(out, cap, v < 0 ? "-Infinity" : "Infinity"); return; }
    if (v == 0) { snprintf(out, cap, "0"); return; }
    char buf[40];
    int p;
    for (p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v) break;
    }
    const char *s = buf;
    int neg = 0;
    if (*s == '-') { neg = 1; s++; }
    char dig[24];
    int k = 0;
    for (; *s && *s != 'e'; s++)
        if (is_digit(*s)) dig[k++] = *s;
    while (k > 1 && dig[k - 1] == '0') k--;
    dig[k] = 0;
    int e = atoi(s + 1), n = e + 1;
    char *o = out;
    size_t left = cap;
#define PUT(...) do { int w_ = snprintf(o, left, __VA_ARGS__); if (w_ < 0 || (size_t)w_ >= left) return; o += w_; left -= (size_t)w_; } while (0)
    if (neg) PUT("-");
    if (k <= n && n <= 21) {
        PUT("%s", dig);
        for (int i = 0; i < n - k; i++) PUT("0");
    } else if (0 < n && n <= 21) {
        PUT("%.*s.%s", n, dig, dig + n);
    } else if (-6 < n && n <= 0) {
        PUT("0.");
        for (int i = 0; i < -n; i++) PUT("0");
        PUT("%s", dig);
    } else {
        PUT("%c", dig[0]);
        if (k > 1) PUT(".%s", dig + 1);
        PUT("e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
#undef PUT
}

/* ---------------------------------------------------------------- values */

enum { JT_UNDEF, JT_NULL, JT_BOOL, JT_INT, JT_FLOAT, JT_STR, JT_LIST, JT_DICT, JT_NS, JT_FUNC };
static const char *const type_names[] = {"UndefinedValue", "NullValue",   "BooleanValue", "IntegerValue", "FloatValue",
                                         "StringValue",    "ArrayValue", "ObjectValue",  "NamespaceValue", "FunctionValue"};

typedef struct jv {
    int t;
    double num;      /* bool, int, float */
    const char *s;   /* string bytes (not NUL-terminated in general) */
    size_t n;
    void *p;         /* jlist, jdict, jfn */
    int tuple;       /* a list made by a tuple literal (the reference's TupleValue) */
} jv;

typedef struct jlist {
    jv *v;
    size_t n, cap;
} jlist;
typedef struct jent {
    const char *k;
    size_t kn;
    jv v;
} jent;
typedef struct jdict {
    jent *e;
    size_t n, cap;
} jdict;

struct node;
enum { FN_NAMESPACE, FN_RAISE, FN_RANGE, FN_STRFTIME, FN_MACRO, FN_METHOD, FN_CALLER };
typedef struct jfn {
    int kind;
    const char *name;   /* method name */
    jv self;            /* method receiver */
    struct node *macro; /* macro, or call block (parameters l2, body l1 either way) */
    struct env *closure; /* a call block's environment */
} jfn;

static const jv UNDEF = {JT_UNDEF, 0, NULL, 0, NULL, 0};
static const jv JNULL = {JT_NULL, 0, NULL, 0, NULL, 0};

static const char *tname(jv v) { return v.tuple ? "TupleValue" : type_names[v.t]; }

static jv v_bool(int b) { jv v = {JT_BOOL, b ? 1 : 0, NULL, 0, NULL, 0}; return v; }
static jv v_int(double x) { jv v = {JT_INT, x, NULL, 0, NULL, 0}; return v; }
static jv v_float(double x) { jv v = {JT_FLOAT, x, NULL, 0, NULL, 0}; return v; }
static jv v_str(const char *s, size_t n) { jv v = {JT_STR, 0, s, n, NULL, 0}; return v; }
static jv v_sb(sb *b) { return v_str(b->p ? b->p : "", b->n); }
static jv v_list(J *j) { jv v = {JT_LIST, 0, NULL, 0, jalloc(j, sizeof(jlist)), 0}; memset(v.p, 0, sizeof(jlist)); return v; }
static jv v_dict(J *j, int t) { jv v = {t, 0, NULL, 0, jalloc(j, sizeof(jdict)), 0}; memset(v.p, 0, sizeof(jdict)); return v; }
static jlist *L(jv v) { return (jlist *)v.p; }
static jdict *D(jv v) { return (jdict *)v.p; }
static int is_num(jv v) { return v.t == JT_INT || v.t == JT_FLOAT; }
static int is_numlike(jv v) { return is_num(v) || v.t == JT_BOOL; }
static int is_container(jv v) { return v.t == JT_DICT || v.t == JT_NS; }

static void list_push(J *j, jlist *l, jv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jv *nv = jalloc(j, cap * sizeof *nv);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

static jent *dict_find(const jdict *d, const char *k, size_t kn) {
    for (size_t i = 0; i < d->n; i++)
        if (d->e[i].kn == kn && memcmp(d->e[i].k, k, kn) == 0) return &d->e[i];
    return NULL;
}
static void dict_set(J *j, jdict *d, const char *k, size_t kn, jv v) {
    jent *e = dict_find(d, k, kn);
    if (e) { e->v = v; return; }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jent *ne = jalloc(j, cap * sizeof *ne);
        if (d->n) memcpy(ne, d->e, d->n * sizeof *ne);
        d->e = ne;
        d->cap = cap;
    }
    d->e[d->n].k = k;
    d->e[d->n].kn = kn;
    d->e[d->n].v = v;
    d->n++;
}
static void dict_setz(J *j, jdict *d, const char *k, jv v) { dict_set(j, d, k, strlen(k), v); }

static int truthy(jv v) {
    switch (v.t) {
    case JT_BOOL: case JT_INT: case JT_FLOAT: return v.num != 0 && !isnan(v.num);
    case JT_STR: return v.n > 0;
    case JT_LIST: return L(v)->n > 0;
    case JT_DICT: return D(v)->n > 0;
    case JT_NS: case JT_FUNC: return 1;
    default: return 0;
    }
}

/* JavaScript's === on the reference's raw values (numbers by value, strings by
 * content, lists/dicts by identity). */
static int strict_eq(jv a, jv b) {
    if (is_num(a) && is_num(b)) return a.num == b.num;
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JT_UNDEF: case JT_NULL: return 1;
    case JT_BOOL: return a.num == b.num;
    case JT_STR: return a.n == b.n && memcmp(a.s, b.s, a.n) == 0;
    default: return a.p == b.p;
    }
}

/* JavaScript's ToNumber of a string. */
static double js_str_to_num(const char *s, size_t n) {
    size_t i = js_trim_start(s, n), e = js_trim_end(s, n);
    if (e <= i) return 0;
    char buf[64];
    size_t len = e - i;
    if (len >= sizeof buf) return NAN;
    memcpy(buf, s + i, len);
    buf[len] = 0;
    if (strcmp(buf, "Infinity") == 0 || strcmp(buf, "+Infinity") == 0) return INFINITY;
    if (strcmp(buf, "-Infinity") == 0) return -INFINITY;
    for (size_t k = 0; k < len; k++)
        if (!(is_digit(buf[k]) || buf[k] == '.' || buf[k] == 'e' || buf[k] == 'E' || buf[k] == '+' || buf[k] == '-'))
            return NAN;
    char *end;
    double v = strtod(buf, &end);
    return *end ? NAN : v;
}

/* JavaScript's == on the raw values. */
static int loose_eq(jv a, jv b) {
    int an = a.t == JT_UNDEF || a.t == JT_NULL, bn = b.t == JT_UNDEF || b.t == JT_NULL;
    if (an || bn) return an && bn;
    if (a.t == JT_BOOL) a = v_int(a.num);
    if (b.t == JT_BOOL) b = v_int(b.num);
    if (is_num(a) && is_num(b)) return a.num == b.num;
    if (a.t == JT_STR && b.t == JT_STR) return strict_eq(a, b);
    if (is_num(a) && b.t == JT_STR) return a.num == js_str_to_num(b.s, b.n);
    if (a.t == JT_STR && is_num(b)) return js_str_to_num(a.s, a.n) == b.num;
    return a.t == b.t && a.p == b.p;
}

/* ---------------------------------------------------------------- printing and JSON */

static void sb_num(J *j, sb *b, double v) {
    char buf[64];
    js_num(v, buf, sizeof buf);
    sb_str(j, b, buf);
}

/* JSON.stringify of a string; ascii: also \uXXXX for every UTF-16 unit >= 0x7f. */
static void sb_json_str(J *j, sb *b, const char *s, size_t n, int ascii) {
    sb_ch(j, b, '"');
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        char esc[16];
        if (c == '"' || c == '\\') {
            esc[0] = '\\'; esc[1] = (char)c;
            sb_put(j, b, esc, 2);
            i++;
        } else if (c < 0x20) {
            const char *m = c == '\b' ? "\\b" : c == '\f' ? "\\f" : c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
            if (m) sb_str(j, b, m);
            else { snprintf(esc, sizeof esc, "\\u%04x", c); sb_str(j, b, esc); }
            i++;
        } else if (ascii && c >= 0x7f) {
            uint32_t cp;
            i += u8dec(s, n, i, &cp);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", cp);
            }
            sb_str(j, b, esc);
        } else {
            size_t k = i;
            while (k < n && (unsigned char)s[k] >= 0x20 && s[k] != '"' && s[k] != '\\' && !(ascii && (unsigned char)s[k] >= 0x7f)) k++;
            sb_put(j, b, s + i, k - i);
            i = k;
        }
    }
    sb_ch(j, b, '"');
}

typedef struct json_opts {
    int indent;                   /* 0: none */
    int ascii, sort_keys, undef_null;
    const char *item_sep, *key_sep;
} json_opts;

static int key_cmp(const void *x, const void *y) {
    const jent *a = x, *b = y;
    size_t m = a->kn < b->kn ? a->kn : b->kn;
    int c = memcmp(a->k, b->k, m);
    return c ? c : (a->kn > b->kn) - (a->kn < b->kn);
}

static void sb_pad(J *j, sb *b, const json_opts *o, int depth) {
    sb_ch(j, b, '\n');
    for (int i = 0; i < o->indent * depth; i++) sb_ch(j, b, ' ');
}

/* The reference's toJSON. */
static void sb_json(J *j, sb *b, jv v, const json_opts *o, int depth) {
    if (depth > MAX_DEPTH) jfail(j, "tojson: value nested too deeply");
    switch (v.t) {
    case JT_NULL: sb_str(j, b, "null"); return;
    case JT_UNDEF: sb_str(j, b, o->undef_null ? "null" : "undefined"); return;
    case JT_BOOL: sb_str(j, b, v.num ? "true" : "false"); return;
    case JT_INT: case JT_FLOAT:
        if (isfinite(v.num)) sb_num(j, b, v.num);
        else sb_str(j, b, "null");
        return;
    case JT_STR: sb_json_str(j, b, v.s, v.n, o->ascii); return;
    case JT_LIST: {
        jlist *l = L(v);
        if (v.tuple) jfail(j, "Cannot convert to JSON: TupleValue");
        sb_ch(j, b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i) sb_str(j, b, o->item_sep);
            if (o->indent) sb_pad(j, b, o, depth + 1);
            sb_json(j, b, l->v[i], o, depth + 1);
        }
        if (o->indent && l->n) sb_pad(j, b, o, depth);
        sb_ch(j, b, ']');
        return;
    }
    case JT_DICT: case JT_NS: {
        jdict *d = D(v);
        jent *e = d->e;
        if (o->sort_keys && d->n > 1) {
            e = jalloc(j, d->n * sizeof *e);
            memcpy(e, d->e, d->n * sizeof *e);
            qsort(e, d->n, sizeof *e, key_cmp);
        }
        sb_ch(j, b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i) sb_str(j, b, o->item_sep);
            if (o->indent) sb_pad(j, b, o, depth + 1);
            sb_json_str(j, b, e[i].k, e[i].kn, o->ascii);
            sb_str(j, b, o->key_sep);
            sb_json(j, b, e[i].v, o, depth + 1);
        }
        if (o->indent && d->n) sb_pad(j, b, o, depth);
        sb_ch(j, b, '}');
        return;
    }
    default: jfail(j, "Cannot convert to JSON: %s", tname(v));
    }
}

static void sb_json_default(J *j, sb *b, jv v, int undef_null) {
    json_opts o = {0, 0, 0, undef_null, ", ", ": "};
    sb_json(j, b, v, &o, 0);
}

/* The reference's RuntimeValue.toString (what {{ }} prints). */
static void sb_value(J *j, sb *b, jv v) {
    switch (v.t) {
    case JT_UNDEF: sb_str(j, b, "undefined"); return;
    case JT_NULL: sb_str(j, b, "null"); return;
    case JT_BOOL: sb_str(j, b, v.num ? "true" : "false"); return;
    case JT_INT: sb_num(j, b, v.num); return;
    case JT_FLOAT:
        if (v.num == 0 && signbit(v.num)) sb_str(j, b, "-0.0");
        else if (isfinite(v.num) && v.num == floor(v.num) && fabs(v.num) < 1e21) {
            char buf[400];
            snprintf(buf, sizeof buf, "%.1f", v.num);
            sb_str(j, b, buf);
        } else sb_num(j, b, v.num);
        return;
    case JT_STR: sb_put(j, b, v.s, v.n); return;
    case JT_LIST: case JT_DICT: case JT_NS: sb_json_default(j, b, v, 0); return;
    default: jfail(j, "cannot print a function");
    }
}

/* JavaScript's own toString of the reference's raw value (used by ~, + and join). */
static void sb_js(J *j, sb *b, jv v) {
    switch (v.t) {
    case JT_UNDEF: case JT_NULL: return; /* only reachable through join, which prints them as "" */
    case JT_BOOL: sb_str(j, b, v.num ? "true" : "false"); return;
    case JT_INT: case JT_FLOAT: sb_num(j, b, v.num); return;
    case JT_STR: sb_put(j, b, v.s, v.n); return;
    case JT_LIST:
        for (size_t i = 0; i < L(v)->n; i++) {
            if (i) sb_ch(j, b, ',');
            sb_value(j, b, L(v)->v[i]);
        }
        return;
    case JT_DICT: case JT_NS: sb_str(j, b, "[object Map]"); return;
    default: jfail(j, "cannot convert a function to a string");
    }
}

/* ---------------------------------------------------------------- JSON input */

/* The variables arrive as JSON texts, read by cJSON (the tree is held in j->json while it is copied into the
 * arena, so that jinja_render frees it when a copy fails). Two texts JavaScript's JSON.parse (the reference's)
 * takes are refused with an error, never changed: a string holding \u0000 (a cJSON string ends there) and a lone
 * UTF-16 surrogate (bad JSON to cJSON). The server refuses both in a request before a template sees it. */

/* A canonical array index ("0", "17"): JavaScript orders such object keys first, ascending. */
static int array_index_key(const char *k, size_t n, double *out) {
    if (n == 0 || n > 10 || (n > 1 && k[0] == '0')) return 0;
    double v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(k[i])) return 0;
        v = v * 10 + (k[i] - '0');
    }
    if (v >= 4294967295.0) return 0;
    *out = v;
    return 1;
}

static void js_order_keys(J *j, jdict *d) {
    size_t nidx = 0;
    double x;
    for (size_t i = 0; i < d->n; i++) nidx += array_index_key(d->e[i].k, d->e[i].kn, &x);
    if (nidx == 0) return;
    jent *e = jalloc(j, d->n * sizeof *e);
    size_t w = 0;
    for (size_t i = 0; i < d->n; i++) /* indices, insertion-sorted */
        if (array_index_key(d->e[i].k, d->e[i].kn, &x)) {
            size_t k = w++;
            double y;
            while (k > 0 && array_index_key(e[k - 1].k, e[k - 1].kn, &y) && y > x) { e[k] = e[k - 1]; k--; }
            e[k] = d->e[i];
        }
    for (size_t i = 0; i < d->n; i++)
        if (!array_index_key(d->e[i].k, d->e[i].kn, &x)) e[w++] = d->e[i];
    d->e = e;
    d->cap = d->n;
}

/* c, as a value in the arena: strings copied, a number with no fraction an integer (as JavaScript's), an object's
 * keys in JavaScript's order (a repeated key: the last one) */
static jv from_cjson(J *j, const cJSON *c, int depth) {
    if (depth > MAX_DEPTH) jfail(j, "variables: JSON nested too deeply");
    if (cJSON_IsString(c)) {
        const size_t n = strlen(c->valuestring);
        return v_str(jstrdup(j, c->valuestring, n), n);
    }
    if (cJSON_IsNumber(c)) {
        const double v = c->valuedouble;
        return isfinite(v) && v == floor(v) ? v_int(v) : v_float(v);
    }
    if (cJSON_IsBool(c)) return v_bool(cJSON_IsTrue(c));
    if (cJSON_IsArray(c)) {
        jv l = v_list(j);
        for (const cJSON *e = c->child; e; e = e->next) list_push(j, L(l), from_cjson(j, e, depth + 1));
        return l;
    }
    if (cJSON_IsObject(c)) {
        jv d = v_dict(j, JT_DICT);
        for (const cJSON *e = c->child; e; e = e->next) {
            const size_t kn = strlen(e->string);
            dict_set(j, D(d), jstrdup(j, e->string, kn), kn, from_cjson(j, e, depth + 1));
        }
        js_order_keys(j, D(d));
        return d;
    }
    return JNULL;
}

/* Does the JSON text s hold a \u0000 inside a string? (cJSON would end the string there, silently.) */
static int json_has_nul(const char *s) {
    int in_str = 0;
    for (; *s; s++)
        if (*s == '"') in_str = !in_str;
        else if (in_str && *s == '\\' && s[1]) {
            if (s[1] == 'u' && !strncmp(s + 2, "0000", 4)) return 1;
            s++; /* the escaped character (a quote or a backslash among them) */
        }
    return 0;
}

static jv parse_json(J *j, const char *s) {
    if (json_has_nul(s)) jfail(j, "variables: a string holds \\u0000, which this reader cannot keep");
    const char *end = NULL;
    j->json = cJSON_ParseWithOpts(s, &end, 1);
    if (!j->json) jfail(j, "variables: bad JSON at byte %zu", end && end >= s ? (size_t)(end - s) : (size_t)0);
    const jv v = from_cjson(j, j->json, 0);
    cJSON_Delete(j->json);
    j->json = NULL;
    return v;
}

/* ---------------------------------------------------------------- preprocessing */

/* Text with, for every byte, the template line it came from. */
typedef struct src {
    char *s;
    int *line;
    size_t n, cap;
} src;

static void src_push(J *j, src *o, char c, int line) {
    if (o->n == o->cap) {
        size_t nc = o->cap ? o->cap * 2 : 256;
        char *s = jalloc(j, nc);
        int *l = jalloc(j, nc * sizeof *l);
        if (o->n) { memcpy(s, o->s, o->n); memcpy(l, o->line, o->n * sizeof *l); }
        o->s = s;
        o->line = l;
        o->cap = nc;
    }
    o->s[o->n] = c;
    o->line[o->n++] = line;
}

static int is_block_open(const src *in, size_t i) { /* {# {% {- */
    return i + 1 < in->n && in->s[i] == '{' && (in->s[i + 1] == '#' || in->s[i + 1] == '%' || in->s[i + 1] == '-');
}
static int line_start(const src *in, size_t i) { /* JavaScript's ^ with the m flag */
    if (i == 0) return 1;
    char c = in->s[i - 1];
    if (c == '\n' || c == '\r') return 1;
    return i >= 3 && (unsigned char)in->s[i - 3] == 0xe2 && (unsigned char)in->s[i - 2] == 0x80 &&
           ((unsigned char)c == 0xa8 || (unsigned char)c == 0xa9);
}

/* {%-? generation -?%} or endgeneration at s[i]: its end, else 0; ls and rs: the dashes. */
static size_t generation_tag(const src *in, size_t i, int *ls, int *rs) {
    const char *s = in->s;
    size_t n = in->n, k;
    if (i + 2 > n || s[i] != '{' || s[i + 1] != '%') return 0;
    i += 2;
    *ls = i < n && s[i] == '-';
    if (*ls) i++;
    while ((k = js_space(s, n, i)) > 0) i += k;
    if (n - i >= 3 && memcmp(s + i, "end", 3) == 0 && n - i >= 13 && memcmp(s + i + 3, "generation", 10) == 0) i += 3;
    if (n - i < 10 || memcmp(s + i, "generation", 10) != 0) return 0;
    i += 10;
    while ((k = js_space(s, n, i)) > 0) i += k;
    *rs = i < n && s[i] == '-';
    if (*rs) i++;
    if (n - i < 2 || s[i] != '%' || s[i + 1] != '}') return 0;
    return i + 2;
}

/* lstrip_blocks: ^[ \t]*({[#%-]) -> $1 */
static src lstrip_blocks(J *j, const src *in) {
    src o = {0};
    for (size_t i = 0; i < in->n; i++) {
        if (line_start(in, i)) {
            size_t k = i;
            while (k < in->n && (in->s[k] == ' ' || in->s[k] == '\t')) k++;
            if (is_block_open(in, k)) i = k;
        }
        src_push(j, &o, in->s[i], in->line[i]);
    }
    return o;
}

/* trim_blocks: ([#%-]})\n -> $1 */
static src trim_blocks(J *j, const src *in) {
    src o = {0};
    for (size_t i = 0; i < in->n; i++) {
        src_push(j, &o, in->s[i], in->line[i]);
        char c = in->s[i];
        if ((c == '#' || c == '%' || c == '-') && i + 2 < in->n && in->s[i + 1] == '}' && in->s[i + 2] == '\n') {
            src_push(j, &o, '}', in->line[i + 1]);
            i += 2;
        }
    }
    return o;
}

/* (\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*) -> the blanks before unless {%-, after unless -%} */
static src drop_generation_tags(J *j, const src *in) {
    src o = {0};
    for (size_t i = 0; i < in->n;) {
        size_t k = i, w, e;
        int ls = 0, rs = 0;
        while ((w = js_space(in->s, in->n, k)) > 0) k += w;
        if ((e = generation_tag(in, k, &ls, &rs)) > 0) {
            if (!ls) for (size_t q = i; q < k; q++) src_push(j, &o, in->s[q], in->line[q]);
            size_t f = e;
            while ((w = js_space(in->s, in->n, f)) > 0) f += w;
            if (!rs) for (size_t q = e; q < f; q++) src_push(j, &o, in->s[q], in->line[q]);
            i = f;
        } else {
            size_t stop = k > i ? k : i + 1;
            for (; i < stop; i++) src_push(j, &o, in->s[i], in->line[i]);
        }
    }
    return o;
}

/* The reference's preprocessing with its chat options: one trailing newline dropped,
 * lstrip_blocks, trim_blocks, generation tags removed. */
static src preprocess(J *j, const char *t, size_t n) {
    src a = {0};
    int line = 1;
    if (n > 0 && t[n - 1] == '\n') n--;
    for (size_t i = 0; i < n; i++) {
        src_push(j, &a, t[i], line);
        if (t[i] == '\n') line++;
    }
    src b = lstrip_blocks(j, &a), c = trim_blocks(j, &b);
    return drop_generation_tags(j, &c);
}

/* ---------------------------------------------------------------- lexer */

enum {
    T_EOF, T_TEXT, T_NUM, T_STR, T_IDENT, T_EQUALS, T_LPAREN, T_RPAREN, T_OPEN_STMT, T_CLOSE_STMT, T_OPEN_EXPR,
    T_CLOSE_EXPR, T_LBRACK, T_RBRACK, T_LBRACE, T_RBRACE, T_COMMA, T_DOT, T_COLON, T_PIPE, T_ADD, T_MUL, T_POW,
    T_CMP, T_UNARY, T_COMMENT
};

typedef struct tok {
    int t;
    const char *s;
    size_t n;
    int line;
} tok;

typedef struct lexer {
    J *j;
    const src *in;
    size_t i;
    tok *toks;
    size_t n, cap;
} lexer;

static void lx_push(lexer *x, int t, const char *s, size_t n, int line) {
    if (x->n == x->cap) {
        size_t cap = x->cap ? x->cap * 2 : 256;
        tok *nt = jalloc(x->j, cap * sizeof *nt);
        if (x->n) memcpy(nt, x->toks, x->n * sizeof *nt);
        x->toks = nt;
        x->cap = cap;
    }
    tok *k = &x->toks[x->n++];
    k->t = t;
    k->s = s;
    k->n = n;
    k->line = line;
}
static int lx_last(const lexer *x) { return x->n ? x->toks[x->n - 1].t : -1; }
static int lx_line(const lexer *x) { return x->i < x->in->n ? x->in->line[x->i] : (x->in->n ? x->in->line[x->in->n - 1] : 1); }
_Noreturn static void lx_fail(lexer *x, const char *msg) {
    x->j->line = lx_line(x);
    jfail(x->j, "%s", msg);
}
static int lx_at(const lexer *x, const char *lit) {
    size_t l = strlen(lit);
    return x->in->n - x->i >= l && memcmp(x->in->s + x->i, lit, l) == 0;
}

static void lx_strip_trailing(lexer *x) {
    if (lx_last(x) != T_TEXT) return;
    tok *t = &x->toks[x->n - 1];
    t->n = js_trim_end(t->s, t->n);
    if (t->n == 0) x->n--;
}
static void lx_skip_space(lexer *x) {
    size_t k;
    while ((k = js_space(x->in->s, x->in->n, x->i)) > 0) x->i += k;
}

/* A string literal's body up to the quote q, with escapes decoded. */
static void lx_string(lexer *x, char q, int line) {
    J *j = x->j;
    const char *s = x->in->s;
    size_t n = x->in->n;
    sb b = {0};
    x->i++;
    while (x->i < n && s[x->i] != q) {
        if (s[x->i] == '\\') {
            if (++x->i >= n) lx_fail(x, "Unexpected end of input");
            char e = s[x->i++], o[4];
            if (e == 'x' || e == 'u') {
                size_t len = e == 'x' ? 2 : 4;
                if (n - x->i < len) lx_fail(x, "Invalid hexadecimal escape sequence");
                uint32_t v = 0;
                for (size_t k = 0; k < len; k++) {
                    char c = s[x->i + k];
                    int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
                    if (d < 0) lx_fail(x, "Invalid hexadecimal escape sequence");
                    v = v * 16 + (uint32_t)d;
                }
                x->i += len;
                sb_put(j, &b, o, u8enc(v, o));
                continue;
            }
            const char *from = "ntrbfv'\"\\", *to = "\n\t\r\b\f\v'\"\\";
            const char *m = memchr(from, e, 9);
            if (!m) lx_fail(x, "Unexpected escaped character in string");
            sb_ch(j, &b, to[m - from]);
            continue;
        }
        sb_ch(j, &b, s[x->i++]);
        if (x->i >= n) lx_fail(x, "Unexpected end of input (unterminated string)");
    }
    if (x->i >= n) lx_fail(x, "Unexpected end of input (unterminated string)");
    x->i++;
    lx_push(x, T_STR, b.p ? b.p : "", b.n, line);
}

static size_t lx_digits(lexer *x) {
    size_t st = x->i;
    while (x->i < x->in->n && is_digit(x->in->s[x->i])) x->i++;
    return x->i - st;
}

static void lex(lexer *x) {
    static const struct { const char *s; int t; } table[] = {
        {"{%", T_OPEN_STMT}, {"%}", T_CLOSE_STMT}, {"{{", T_OPEN_EXPR}, {"}}", T_CLOSE_EXPR}, {"(", T_LPAREN},
        {")", T_RPAREN}, {"{", T_LBRACE}, {"}", T_RBRACE}, {"[", T_LBRACK}, {"]", T_RBRACK}, {",", T_COMMA},
        {".", T_DOT}, {":", T_COLON}, {"|", T_PIPE}, {"<=", T_CMP}, {">=", T_CMP}, {"==", T_CMP}, {"!=", T_CMP},
        {"<", T_CMP}, {">", T_CMP}, {"+", T_ADD}, {"-", T_ADD}, {"~", T_ADD}, {"**", T_POW}, {"*", T_MUL},
        {"//", T_MUL}, {"/", T_MUL}, {"%", T_MUL}, {"=", T_EQUALS},
    };
    const char *s = x->in->s;
    size_t n = x->in->n;
    int curly = 0;
    while (x->i < n) {
        int last = lx_last(x), line = lx_line(x);
        if (last == -1 || last == T_CLOSE_STMT || last == T_CLOSE_EXPR || last == T_COMMENT) {
            size_t st = x->i;
            while (x->i < n && !(s[x->i] == '{' && x->i + 1 < n && (s[x->i + 1] == '%' || s[x->i + 1] == '{' || s[x->i + 1] == '#')))
                x->i++;
            if (x->i > st) { lx_push(x, T_TEXT, s + st, x->i - st, line); continue; }
        }
        if (lx_at(x, "{#")) {
            x->i += 2;
            int strip_before = x->i < n && s[x->i] == '-';
            if (strip_before) x->i++;
            size_t st = x->i;
            while (!(x->i + 1 < n && s[x->i] == '#' && s[x->i + 1] == '}')) {
                if (x->i + 2 >= n) lx_fail(x, "Missing end of comment tag");
                x->i++;
            }
            size_t cn = x->i - st;
            int strip_after = cn > 0 && s[st + cn - 1] == '-';
            if (strip_before) lx_strip_trailing(x);
            lx_push(x, T_COMMENT, s + st, strip_after ? cn - 1 : cn, line);
            x->i += 2;
            if (strip_after) lx_skip_space(x);
            continue;
        }
        if (lx_at(x, "{%-")) { lx_strip_trailing(x); lx_push(x, T_OPEN_STMT, "{%", 2, line); x->i += 3; continue; }
        if (lx_at(x, "{{-")) { lx_strip_trailing(x); lx_push(x, T_OPEN_EXPR, "{{", 2, line); curly = 0; x->i += 3; continue; }
        lx_skip_space(x);
        line = lx_line(x);
        if (lx_at(x, "-%}")) { lx_push(x, T_CLOSE_STMT, "%}", 2, line); x->i += 3; lx_skip_space(x); continue; }
        if (lx_at(x, "-}}")) { lx_push(x, T_CLOSE_EXPR, "}}", 2, line); x->i += 3; lx_skip_space(x); continue; }
        if (x->i >= n) break; /* the reference reads past the end here and then stops too */
        char c = s[x->i];
        if (c == '-' || c == '+') {
            last = lx_last(x);
            if (last == T_TEXT || last == -1) lx_fail(x, "Unexpected character: + or -");
            if (!(last == T_IDENT || last == T_NUM || last == T_STR || last == T_RPAREN || last == T_RBRACK)) {
                size_t st = x->i++;
                size_t nd = lx_digits(x);
                if (nd > 0 && x->i + 1 < n && s[x->i] == '.' && is_digit(s[x->i + 1])) { x->i++; lx_digits(x); }
                lx_push(x, nd > 0 ? T_NUM : T_UNARY, s + st, x->i - st, line);
                continue;
            }
        }
        int matched = 0;
        for (size_t k = 0; k < sizeof table / sizeof table[0]; k++) {
            if (table[k].t == T_CLOSE_EXPR && curly > 0) continue;
            if (lx_at(x, table[k].s)) {
                size_t l = strlen(table[k].s);
                lx_push(x, table[k].t, s + x->i, l, line);
                if (table[k].t == T_OPEN_EXPR) curly = 0;
                else if (table[k].t == T_LBRACE) curly++;
                else if (table[k].t == T_RBRACE) curly--;
                x->i += l;
                matched = 1;
                break;
            }
        }
        if (matched) continue;
        if (c == '\'' || c == '"') { lx_string(x, c, line); continue; }
        if (is_digit(c)) {
            size_t st = x->i;
            lx_digits(x);
            if (lx_last(x) != T_DOT && x->i + 1 < n && s[x->i] == '.' && is_digit(s[x->i + 1])) { x->i++; lx_digits(x); }
            lx_push(x, T_NUM, s + st, x->i - st, line);
            continue;
        }
        if (is_word(c)) {
            size_t st = x->i;
            while (x->i < n && is_word(s[x->i])) x->i++;
            lx_push(x, T_IDENT, s + st, x->i - st, line);
            continue;
        }
        char msg[64];
        snprintf(msg, sizeof msg, "Unexpected character: '%c' (0x%02x)", (unsigned char)c >= 0x20 && (unsigned char)c < 0x7f ? c : '?', (unsigned char)c);
        lx_fail(x, msg);
    }
    lx_push(x, T_EOF, "", 0, lx_line(x));
}

/* ---------------------------------------------------------------- syntax tree */

enum {
    N_TEXT, N_STR, N_INT, N_FLOAT, N_IDENT, N_ARRAY, N_TUPLE, N_OBJECT, N_MEMBER, N_SLICE, N_CALL, N_KWARG, N_SPREAD,
    N_KWSPREAD, N_UNARY, N_BINARY, N_FILTER, N_TEST, N_SELECT, N_TERNARY, N_IF, N_FOR, N_SET, N_MACRO, N_CALLSTMT,
    N_FILTERSTMT, N_BREAK, N_CONTINUE, N_COMMENT
};

typedef struct node {
    int k, line;
    const char *s; /* identifier, string, operator, test name */
    size_t n;
    double num;
    int flag;      /* negate (test), computed (member) */
    struct node *a, *b, *c;
    struct node **l1, **l2; /* bodies, arguments, elements / alternates, parameters, object values */
    int n1, n2;
} node;

typedef struct parser {
    J *j;
    tok *t;
    size_t i, n;
} parser;

static node *mk(parser *p, int k) {
    node *x = jalloc(p->j, sizeof *x);
    memset(x, 0, sizeof *x);
    x->k = k;
    x->line = p->t[p->i < p->n ? p->i : p->n - 1].line;
    return x;
}

typedef struct nlist {
    node **v;
    int n, cap;
} nlist;
static void nl_push(J *j, nlist *l, node *x) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        node **nv = jalloc(j, (size_t)cap * sizeof *nv);
        if (l->n) memcpy(nv, l->v, (size_t)l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

static const char *const tok_names[] = {
    "end of template", "Text", "NumericLiteral", "StringLiteral", "Identifier", "Equals", "OpenParen", "CloseParen",
    "OpenStatement", "CloseStatement", "OpenExpression", "CloseExpression", "OpenSquareBracket", "CloseSquareBracket",
    "OpenCurlyBracket", "CloseCurlyBracket", "Comma", "Dot", "Colon", "Pipe", "AdditiveBinaryOperator",
    "MultiplicativeBinaryOperator", "ExponentiationBinaryOperator", "ComparisonBinaryOperator", "UnaryOperator", "Comment"};

_Noreturn static void p_fail(parser *p, const char *msg) {
    p->j->line = p->t[p->i < p->n ? p->i : p->n - 1].line;
    jfail(p->j, "syntax error: %s (at %s)", msg, tok_names[p->t[p->i < p->n ? p->i : p->n - 1].t]);
}
static tok *peek(parser *p, size_t off) { return p->i + off < p->n ? &p->t[p->i + off] : &p->t[p->n - 1]; }
static int is_t(parser *p, int t) { return peek(p, 0)->t == t; }
static int tok_is(const tok *k, const char *word) { return k->t == T_IDENT && k->n == strlen(word) && memcmp(k->s, word, k->n) == 0; }
static int is_id(parser *p, const char *w) { return tok_is(peek(p, 0), w); }
static int is_stmt(parser *p, const char *w) { return is_t(p, T_OPEN_STMT) && tok_is(peek(p, 1), w); }
static tok *expect(parser *p, int t, const char *msg) {
    if (!is_t(p, t)) p_fail(p, msg);
    return &p->t[p->i++];
}
static void expect_id(parser *p, const char *w) {
    if (!is_id(p, w)) {
        char msg[64];
        snprintf(msg, sizeof msg, "expected '%s'", w);
        p_fail(p, msg);
    }
    p->i++;
}

static node *p_expr(parser *p);
static node *p_primary(parser *p);
static node *p_any(parser *p);
static node *p_call(parser *p, node *callee);

static void p_body_until(parser *p, nlist *body, const char *w1, const char *w2, const char *w3) {
    while (!(is_stmt(p, w1) || (w2 && is_stmt(p, w2)) || (w3 && is_stmt(p, w3)))) nl_push(p->j, body, p_any(p));
}

static node *p_seq(parser *p, int primary) {
    node *first = primary ? p_primary(p) : p_expr(p);
    if (!is_t(p, T_COMMA)) return first;
    nlist l = {0};
    nl_push(p->j, &l, first);
    while (is_t(p, T_COMMA)) {
        p->i++;
        nl_push(p->j, &l, primary ? p_primary(p) : p_expr(p));
        if (!is_t(p, T_COMMA)) break;
    }
    node *t = mk(p, N_TUPLE);
    t->l1 = l.v;
    t->n1 = l.n;
    return t;
}

static node *p_args(parser *p, int params, int *count) {
    nlist l = {0};
    int saw_kw = 0, saw_spread = 0;
    expect(p, T_LPAREN, "expected '(' for an argument list");
    while (!is_t(p, T_RPAREN)) {
        if (is_t(p, T_EOF)) p_fail(p, "unterminated argument list");
        int kwspread = is_t(p, T_POW), spread = is_t(p, T_MUL) && peek(p, 0)->n == 1 && peek(p, 0)->s[0] == '*';
        if (params && (kwspread || spread)) p_fail(p, "argument unpacking is not allowed in parameter declarations");
        if (kwspread) {
            p->i++;
            node *x = mk(p, N_KWSPREAD);
            x->a = p_expr(p);
            nl_push(p->j, &l, x);
            if (is_t(p, T_COMMA)) p->i++;
            if (!is_t(p, T_RPAREN)) p_fail(p, "`**` must be applied to the final argument");
            break;
        }
        node *arg;
        if (spread) {
            if (saw_spread) p_fail(p, "only one `*` argument unpacking is allowed");
            saw_spread = 1;
            p->i++;
            arg = mk(p, N_SPREAD);
            arg->a = p_expr(p);
        } else {
            arg = p_expr(p);
            if (is_t(p, T_EQUALS)) {
                p->i++;
                if (arg->k != N_IDENT) p_fail(p, "expected an identifier for a keyword argument");
                node *kw = mk(p, N_KWARG);
                kw->s = arg->s;
                kw->n = arg->n;
                kw->a = p_expr(p);
                arg = kw;
            }
            if (params && arg->k != N_IDENT && arg->k != N_KWARG) p_fail(p, "expected an identifier for a parameter");
            if (params)
                for (int q = 0; q < l.n; q++)
                    if (l.v[q]->n == arg->n && memcmp(l.v[q]->s, arg->s, arg->n) == 0) p_fail(p, "duplicate parameter name");
            if (arg->k == N_KWARG) saw_kw = 1;
            else if (saw_kw) p_fail(p, params ? "non-default argument follows default argument" : "positional argument after keyword argument");
            else if (saw_spread) p_fail(p, "positional argument after `*` unpacking");
        }
        nl_push(p->j, &l, arg);
        if (is_t(p, T_COMMA)) p->i++;
    }
    expect(p, T_RPAREN, "expected ')'");
    node *x = mk(p, N_TUPLE);
    x->l1 = l.v;
    x->n1 = l.n;
    *count = l.n;
    return x;
}

static node *p_member_args(parser *p) {
    node *sl[4] = {0};
    int k = 0, is_slice = 0;
    while (!is_t(p, T_RBRACK)) {
        if (is_t(p, T_EOF)) p_fail(p, "unterminated subscript");
        if (k >= 4) p_fail(p, "expected 0-3 arguments for a slice");
        if (is_t(p, T_COLON)) {
            sl[k++] = NULL;
            p->i++;
            is_slice = 1;
        } else {
            sl[k++] = p_expr(p);
            if (is_t(p, T_COLON)) { p->i++; is_slice = 1; }
        }
    }
    if (k == 0) p_fail(p, "expected at least one argument for a subscript");
    if (!is_slice) return sl[0];
    if (k > 3) p_fail(p, "expected 0-3 arguments for a slice");
    node *x = mk(p, N_SLICE);
    x->a = sl[0];
    x->b = k > 1 ? sl[1] : NULL;
    x->c = k > 2 ? sl[2] : NULL;
    return x;
}

static node *p_member(parser *p, node *obj) {
    while (is_t(p, T_DOT) || is_t(p, T_LBRACK)) {
        int computed = is_t(p, T_LBRACK);
        p->i++;
        node *m = mk(p, N_MEMBER);
        m->a = obj;
        m->flag = computed;
        if (computed) {
            m->b = p_member_args(p);
            expect(p, T_RBRACK, "expected ']'");
        } else {
            m->b = p_primary(p);
            if (m->b->k != N_IDENT && m->b->k != N_INT) p_fail(p, "expected an identifier or integer after '.'");
        }
        obj = m;
    }
    return obj;
}

static node *p_call(parser *p, node *callee) {
    enter(p->j);
    node *c = mk(p, N_CALL);
    c->a = callee;
    int cnt;
    c->b = p_args(p, 0, &cnt);
    node *e = p_member(p, c);
    if (is_t(p, T_LPAREN)) e = p_call(p, e);
    p->j->depth--;
    return e;
}

static node *p_primary(parser *p) {
    enter(p->j);
    tok *k = peek(p, 0);
    node *x = NULL;
    if (k->t == T_EOF) p_fail(p, "unexpected end of template");
    p->i++;
    switch (k->t) {
    case T_NUM: {
        char buf[64];
        size_t len = k->n < sizeof buf - 1 ? k->n : sizeof buf - 1;
        memcpy(buf, k->s, len);
        buf[len] = 0;
        x = mk(p, memchr(k->s, '.', k->n) ? N_FLOAT : N_INT);
        x->num = strtod(buf, NULL);
        break;
    }
    case T_STR: {
        sb b = {0};
        sb_put(p->j, &b, k->s, k->n);
        while (is_t(p, T_STR)) { sb_put(p->j, &b, peek(p, 0)->s, peek(p, 0)->n); p->i++; }
        x = mk(p, N_STR);
        x->s = b.p ? b.p : "";
        x->n = b.n;
        break;
    }
    case T_IDENT:
        x = mk(p, N_IDENT);
        x->s = k->s;
        x->n = k->n;
        break;
    case T_LPAREN:
        x = p_seq(p, 0);
        expect(p, T_RPAREN, "expected ')'");
        break;
    case T_LBRACK: {
        nlist l = {0};
        while (!is_t(p, T_RBRACK)) {
            if (is_t(p, T_EOF)) p_fail(p, "unterminated list");
            nl_push(p->j, &l, p_expr(p));
            if (is_t(p, T_COMMA)) p->i++;
        }
        p->i++;
        x = mk(p, N_ARRAY);
        x->l1 = l.v;
        x->n1 = l.n;
        break;
    }
    case T_LBRACE: {
        nlist ks = {0}, vs = {0};
        while (!is_t(p, T_RBRACE)) {
            if (is_t(p, T_EOF)) p_fail(p, "unterminated dict");
            nl_push(p->j, &ks, p_expr(p));
            expect(p, T_COLON, "expected ':' in a dict literal");
            nl_push(p->j, &vs, p_expr(p));
            if (is_t(p, T_COMMA)) p->i++;
        }
        p->i++;
        x = mk(p, N_OBJECT);
        x->l1 = ks.v;
        x->l2 = vs.v;
        x->n1 = ks.n;
        break;
    }
    default:
        p->i--;
        p_fail(p, "unexpected token");
    }
    p->j->depth--;
    return x;
}

static node *p_call_member(parser *p) {
    node *m = p_member(p, p_primary(p));
    return is_t(p, T_LPAREN) ? p_call(p, m) : m;
}

static node *p_unary_sign(parser *p) {
    tok *k = peek(p, 0);
    if ((k->t == T_UNARY || k->t == T_ADD) && k->n == 1 && (k->s[0] == '-' || k->s[0] == '+')) {
        enter(p->j);
        p->i++;
        node *u = mk(p, N_UNARY);
        u->s = k->s;
        u->n = 1;
        u->a = p_unary_sign(p);
        p->j->depth--;
        return u;
    }
    return p_call_member(p);
}

static node *p_filter_expr(parser *p) {
    node *x = p_unary_sign(p);
    while (is_t(p, T_PIPE)) {
        p->i++;
        node *f = p_primary(p);
        if (f->k != N_IDENT) p_fail(p, "expected an identifier for the filter");
        if (is_t(p, T_LPAREN)) f = p_call(p, f);
        node *e = mk(p, N_FILTER);
        e->a = x;
        e->b = f;
        x = e;
    }
    return x;
}

static node *p_test(parser *p) {
    node *x = p_filter_expr(p);
    while (is_id(p, "is")) {
        p->i++;
        int neg = is_id(p, "not");
        if (neg) p->i++;
        node *t = p_primary(p);
        if (t->k != N_IDENT) p_fail(p, "expected an identifier for the test");
        node *e = mk(p, N_TEST);
        e->a = x;
        e->s = t->s;
        e->n = t->n;
        e->flag = neg;
        x = e;
    }
    return x;
}

static node *binary(parser *p, const char *op, size_t n, node *a, node *b) {
    node *e = mk(p, N_BINARY);
    e->s = op;
    e->n = n;
    e->a = a;
    e->b = b;
    return e;
}

/* The left-associative arithmetic levels, tightest first: ** (over tests), then * / // %,
 * then + - ~. */
static node *p_arith(parser *p, int level) {
    static const int ops[] = {T_POW, T_MUL, T_ADD};
    node *x = level == 0 ? p_test(p) : p_arith(p, level - 1);
    while (is_t(p, ops[level])) {
        tok *k = &p->t[p->i++];
        x = binary(p, k->s, k->n, x, level == 0 ? p_test(p) : p_arith(p, level - 1));
    }
    return x;
}
static node *p_cmp(parser *p) {
    node *x = p_arith(p, 2);
    for (;;) {
        const char *op;
        size_t n;
        if (is_id(p, "not") && tok_is(peek(p, 1), "in")) { op = "not in"; n = 6; p->i += 2; }
        else if (is_id(p, "in")) { op = "in"; n = 2; p->i++; }
        else if (is_t(p, T_CMP)) { op = peek(p, 0)->s; n = peek(p, 0)->n; p->i++; }
        else break;
        x = binary(p, op, n, x, p_arith(p, 2));
    }
    return x;
}
static node *p_not(parser *p) {
    if (!is_id(p, "not")) return p_cmp(p);
    enter(p->j);
    node *u = NULL;
    while (is_id(p, "not")) {
        p->i++;
        u = mk(p, N_UNARY);
        u->s = "not";
        u->n = 3;
        u->a = p_not(p);
    }
    p->j->depth--;
    return u;
}
static node *p_and(parser *p) {
    node *x = p_not(p);
    while (is_id(p, "and")) { p->i++; x = binary(p, "and", 3, x, p_not(p)); }
    return x;
}
static node *p_or(parser *p) {
    node *x = p_and(p);
    while (is_id(p, "or")) { p->i++; x = binary(p, "or", 2, x, p_and(p)); }
    return x;
}
static node *p_expr(parser *p) {
    enter(p->j);
    node *a = p_or(p);
    if (is_id(p, "if")) {
        p->i++;
        node *test = p_or(p);
        if (is_id(p, "else")) {
            p->i++;
            node *t = mk(p, N_TERNARY);
            t->a = test;
            t->b = a;
            t->c = p_expr(p);
            a = t;
        } else {
            node *s = mk(p, N_SELECT);
            s->a = a;
            s->b = test;
            a = s;
        }
    }
    p->j->depth--;
    return a;
}

static node *p_if(parser *p) {
    node *x = mk(p, N_IF);
    x->a = p_expr(p);
    expect(p, T_CLOSE_STMT, "expected '%}'");
    nlist body = {0}, alt = {0};
    p_body_until(p, &body, "elif", "else", "endif");
    if (is_stmt(p, "elif")) {
        p->i += 2;
        enter(p->j);
        nl_push(p->j, &alt, p_if(p));
        p->j->depth--;
    } else if (is_stmt(p, "else")) {
        p->i += 2;
        expect(p, T_CLOSE_STMT, "expected '%}'");
        p_body_until(p, &alt, "endif", NULL, NULL);
    }
    x->l1 = body.v;
    x->n1 = body.n;
    x->l2 = alt.v;
    x->n2 = alt.n;
    return x;
}

static void p_end(parser *p, const char *w) {
    expect(p, T_OPEN_STMT, "expected '{%'");
    expect_id(p, w);
    expect(p, T_CLOSE_STMT, "expected '%}'");
}

static node *p_statement(parser *p) {
    expect(p, T_OPEN_STMT, "expected '{%'");
    tok *k = peek(p, 0);
    if (k->t != T_IDENT) p_fail(p, "unknown statement");
    node *x;
    nlist body = {0}, alt = {0};
    if (tok_is(k, "set")) {
        p->i++;
        x = mk(p, N_SET);
        x->a = p_seq(p, 0);
        if (is_t(p, T_EQUALS)) {
            p->i++;
            x->b = p_seq(p, 0);
        } else {
            expect(p, T_CLOSE_STMT, "expected '%}'");
            p_body_until(p, &body, "endset", NULL, NULL);
            expect(p, T_OPEN_STMT, "expected '{%'");
            expect_id(p, "endset");
        }
        expect(p, T_CLOSE_STMT, "expected '%}'");
    } else if (tok_is(k, "if")) {
        p->i++;
        x = p_if(p);
        p_end(p, "endif");
        return x;
    } else if (tok_is(k, "macro")) {
        p->i++;
        x = mk(p, N_MACRO);
        node *name = p_primary(p);
        if (name->k != N_IDENT) p_fail(p, "expected an identifier after 'macro'");
        x->s = name->s;
        x->n = name->n;
        int cnt;
        node *params = p_args(p, 1, &cnt);
        x->l2 = params->l1;
        x->n2 = params->n1;
        expect(p, T_CLOSE_STMT, "expected '%}'");
        p_body_until(p, &body, "endmacro", NULL, NULL);
        p_end(p, "endmacro");
    } else if (tok_is(k, "for")) {
        p->i++;
        x = mk(p, N_FOR);
        x->a = p_seq(p, 1);
        if (x->a->k != N_IDENT && x->a->k != N_TUPLE) p_fail(p, "expected an identifier or tuple for the loop variable");
        if (!is_id(p, "in")) p_fail(p, "expected 'in' after the loop variable");
        p->i++;
        x->b = p_expr(p);
        expect(p, T_CLOSE_STMT, "expected '%}'");
        p_body_until(p, &body, "endfor", "else", NULL);
        if (is_stmt(p, "else")) {
            p->i += 2;
            expect(p, T_CLOSE_STMT, "expected '%}'");
            p_body_until(p, &alt, "endfor", NULL, NULL);
        }
        p_end(p, "endfor");
    } else if (tok_is(k, "call")) {
        p->i++;
        x = mk(p, N_CALLSTMT);
        if (is_t(p, T_LPAREN)) {
            int cnt;
            node *params = p_args(p, 1, &cnt);
            x->l2 = params->l1;
            x->n2 = params->n1;
        }
        node *callee = p_primary(p);
        if (callee->k != N_IDENT) p_fail(p, "expected an identifier after 'call'");
        node *c = mk(p, N_CALL);
        int cnt;
        c->a = callee;
        c->b = p_args(p, 0, &cnt);
        x->a = c;
        expect(p, T_CLOSE_STMT, "expected '%}'");
        p_body_until(p, &body, "endcall", NULL, NULL);
        p_end(p, "endcall");
        x->l1 = body.v;
        x->n1 = body.n;
        return x;
    } else if (tok_is(k, "break") || tok_is(k, "continue")) {
        p->i++;
        x = mk(p, tok_is(k, "break") ? N_BREAK : N_CONTINUE);
        expect(p, T_CLOSE_STMT, "expected '%}'");
    } else if (tok_is(k, "filter")) {
        p->i++;
        x = mk(p, N_FILTERSTMT);
        x->b = p_primary(p);
        if (x->b->k == N_IDENT && is_t(p, T_LPAREN)) x->b = p_call(p, x->b);
        expect(p, T_CLOSE_STMT, "expected '%}'");
        p_body_until(p, &body, "endfilter", NULL, NULL);
        p_end(p, "endfilter");
    } else {
        char msg[96];
        snprintf(msg, sizeof msg, "unknown or unsupported statement '%.*s'", (int)(k->n < 40 ? k->n : 40), k->s);
        p_fail(p, msg);
    }
    x->l1 = body.v;
    x->n1 = body.n;
    if (alt.n) { x->l2 = alt.v; x->n2 = alt.n; }
    return x;
}

static node *p_any(parser *p) {
    enter(p->j);
    node *x;
    tok *k = peek(p, 0);
    switch (k->t) {
    case T_COMMENT: x = mk(p, N_COMMENT); p->i++; break;
    case T_TEXT: x = mk(p, N_TEXT); x->s = k->s; x->n = k->n; p->i++; break;
    case T_OPEN_STMT: x = p_statement(p); break;
    case T_OPEN_EXPR:
        p->i++;
        x = p_expr(p);
        expect(p, T_CLOSE_EXPR, "expected '}}'");
        break;
    default: p_fail(p, "unexpected token");
    }
    p->j->depth--;
    return x;
}

/* ---------------------------------------------------------------- environments */

typedef struct env {
    struct env *parent;
    jdict vars;
} env;

static env *env_new(J *j, env *parent) {
    env *e = jalloc(j, sizeof *e);
    memset(e, 0, sizeof *e);
    e->parent = parent;
    return e;
}
static jv env_get(env *e, const char *k, size_t n) {
    for (; e; e = e->parent) {
        jent *x = dict_find(&e->vars, k, n);
        if (x) return x->v;
    }
    return UNDEF;
}
static void env_set(J *j, env *e, const char *k, size_t n, jv v) { dict_set(j, &e->vars, k, n, v); }

static jv v_fn(J *j, int kind, const char *name, jv self, node *macro) {
    jfn *f = jalloc(j, sizeof *f);
    f->kind = kind;
    f->name = name;
    f->self = self;
    f->macro = macro;
    f->closure = NULL;
    jv v = {JT_FUNC, 0, NULL, 0, f, 0};
    return v;
}

/* ---------------------------------------------------------------- evaluation */

enum { ST_OK = 0, ST_BREAK = 1, ST_CONTINUE = 2 };

static jv ev(J *j, node *x, env *e);
static int exec_block(J *j, node **body, int n, env *e, sb *out);

typedef struct args {
    jv *v;
    size_t n;
    jdict *kw; /* NULL: no keyword arguments */
} args;

static jv *kwget(const args *a, const char *k) {
    if (!a->kw) return NULL;
    jent *x = dict_find(a->kw, k, strlen(k));
    return x ? &x->v : NULL;
}
/* Positional i, else keyword k, else NULL. */
static jv *arg(const args *a, size_t i, const char *k) { return i < a->n ? &a->v[i] : k ? kwget(a, k) : NULL; }

static args eval_args(J *j, node *tuple, env *e) {
    args a = {0};
    jlist pos = {0};
    for (int i = 0; i < tuple->n1; i++) {
        node *x = tuple->l1[i];
        if (x->k == N_SPREAD) {
            jv v = ev(j, x->a, e);
            if (v.t != JT_LIST) jfail(j, "Cannot unpack non-iterable type: %s", tname(v));
            for (size_t q = 0; q < L(v)->n; q++) list_push(j, &pos, L(v)->v[q]);
        } else if (x->k != N_KWARG && x->k != N_KWSPREAD) {
            list_push(j, &pos, ev(j, x, e));
        }
    }
    for (int i = 0; i < tuple->n1; i++) {
        node *x = tuple->l1[i];
        if (x->k != N_KWARG && x->k != N_KWSPREAD) continue;
        if (!a.kw) { a.kw = jalloc(j, sizeof *a.kw); memset(a.kw, 0, sizeof *a.kw); }
        if (x->k == N_KWARG) {
            if (dict_find(a.kw, x->s, x->n)) jfail(j, "Got multiple values for keyword argument '%.*s'", (int)x->n, x->s);
            dict_set(j, a.kw, x->s, x->n, ev(j, x->a, e));
        } else {
            jv v = ev(j, x->a, e);
            if (v.t != JT_DICT) jfail(j, "Argument after ** must be a mapping, not %s", tname(v));
            for (size_t q = 0; q < D(v)->n; q++) {
                if (dict_find(a.kw, D(v)->e[q].k, D(v)->e[q].kn)) jfail(j, "Got multiple values for a keyword argument");
                dict_set(j, a.kw, D(v)->e[q].k, D(v)->e[q].kn, D(v)->e[q].v);
            }
        }
    }
    a.v = pos.v;
    a.n = pos.n;
    return a;
}

static int name_is(const node *x, const char *w) { return x->n == strlen(w) && memcmp(x->s, w, x->n) == 0; }

/* ---- strings */

static jv str_map(J *j, jv s, int upper) {
    sb b = {0};
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        size_t k = u8dec(s.s, s.n, i, &cp);
        if (cp < 0x80) {
            char c = (char)cp;
            if (upper && c >= 'a' && c <= 'z') c = (char)(c - 32);
            if (!upper && c >= 'A' && c <= 'Z') c = (char)(c + 32);
            sb_ch(j, &b, c);
        } else if (k == 1) {
            sb_put(j, &b, s.s + i, 1);
        } else if (upper && cp == 0xdf) {
            sb_str(j, &b, "SS");
        } else {
            char o[4];
            uint32_t m = (uint32_t)(upper ? utf8proc_toupper((utf8proc_int32_t)cp) : utf8proc_tolower((utf8proc_int32_t)cp));
            sb_put(j, &b, o, u8enc(m, o));
        }
        i += k;
    }
    return v_sb(&b);
}

static jv str_title(J *j, jv s) { /* /\b\w/g -> upper: ASCII word characters after a non-word one */
    char *o = jstrdup(j, s.s, s.n);
    for (size_t i = 0; i < s.n; i++)
        if (is_word(o[i]) && (i == 0 || !is_word(s.s[i - 1])) && o[i] >= 'a' && o[i] <= 'z') o[i] = (char)(o[i] - 32);
    return v_str(o, s.n);
}

static jv str_capitalize(J *j, jv s) {
    if (s.n == 0) return s;
    uint32_t cp;
    size_t k = u8dec(s.s, s.n, 0, &cp);
    jv first = str_map(j, v_str(s.s, k), 1);
    sb b = {0};
    sb_put(j, &b, first.s, first.n);
    sb_put(j, &b, s.s + k, s.n - k);
    return v_sb(&b);
}

static jv str_trim(jv s, int left, int right) {
    size_t st = left ? js_trim_start(s.s, s.n) : 0, en = right ? js_trim_end(s.s, s.n) : s.n;
    if (en < st) en = st;
    return v_str(s.s + st, en - st);
}

static const char *mem_find(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    return memmem(h, hn, nd, nn);
}

static int str_starts(jv s, jv p) { return p.n <= s.n && memcmp(s.s, p.s, p.n) == 0; }
static int str_ends(jv s, jv p) { return p.n <= s.n && memcmp(s.s + s.n - p.n, p.s, p.n) == 0; }

static jv str_affix(J *j, jv s, const args *a, int ends) {
    const char *nm = ends ? "endswith" : "startswith";
    if (a->n == 0) jfail(j, "%s() requires at least one argument", nm);
    jv p = a->v[0];
    if (p.t == JT_STR) return v_bool(ends ? str_ends(s, p) : str_starts(s, p));
    if (p.t == JT_LIST) {
        for (size_t i = 0; i < L(p)->n; i++) {
            jv q = L(p)->v[i];
            if (q.t != JT_STR) jfail(j, "%s() tuple elements must be strings", nm);
            if (ends ? str_ends(s, q) : str_starts(s, q)) return v_bool(1);
        }
        return v_bool(0);
    }
    jfail(j, "%s() argument must be a string or tuple of strings", nm);
}

static jv str_split(J *j, jv s, const args *a) {
    jv sep = a->n > 0 ? a->v[0] : JNULL;
    if (sep.t != JT_STR && sep.t != JT_NULL) jfail(j, "sep argument must be a string or null");
    jv maxv = a->n > 1 ? a->v[1] : v_int(-1);
    if (maxv.t != JT_INT) jfail(j, "maxsplit argument must be a number");
    double maxsplit = maxv.num;
    jv out = v_list(j);
    if (sep.t == JT_NULL) {
        jv t = str_trim(s, 1, 0);
        size_t i = 0;
        while (i < t.n) {
            size_t w, st = i;
            while (i < t.n && (w = js_space(t.s, t.n, i)) == 0) { uint32_t cp; i += u8dec(t.s, t.n, i, &cp); }
            if (maxsplit != -1 && (double)L(out)->n >= maxsplit) {
                list_push(j, L(out), v_str(t.s + st, t.n - st));
                return out;
            }
            list_push(j, L(out), v_str(t.s + st, i - st));
            while ((w = js_space(t.s, t.n, i)) > 0) i += w;
        }
        return out;
    }
    if (sep.n == 0) jfail(j, "empty separator");
    size_t i = 0;
    for (;;) {
        if (maxsplit != -1 && (double)L(out)->n >= maxsplit) { list_push(j, L(out), v_str(s.s + i, s.n - i)); break; }
        const char *f = mem_find(s.s + i, s.n - i, sep.s, sep.n);
        if (!f) { list_push(j, L(out), v_str(s.s + i, s.n - i)); break; }
        list_push(j, L(out), v_str(s.s + i, (size_t)(f - (s.s + i))));
        i = (size_t)(f - s.s) + sep.n;
    }
    return out;
}

static jv str_replace(J *j, jv s, jv from, jv to, jv count) {
    if (from.t != JT_STR || to.t != JT_STR) jfail(j, "replace() arguments must be strings");
    if (count.t != JT_INT && count.t != JT_NULL) jfail(j, "replace() count argument must be a number or null");
    if (count.t == JT_INT && count.num == 0) return s;
    double left = count.t == JT_NULL || count.num < 0 ? INFINITY : count.num;
    sb b = {0};
    if (from.n == 0) { /* (?=) with the u flag: before every code point and at the end */
        for (size_t i = 0;; ) {
            if (left > 0) { sb_put(j, &b, to.s, to.n); left--; }
            if (i >= s.n) break;
            uint32_t cp;
            size_t k = u8dec(s.s, s.n, i, &cp);
            sb_put(j, &b, s.s + i, k);
            i += k;
        }
        return v_sb(&b);
    }
    size_t i = 0;
    while (i <= s.n) {
        const char *f = left > 0 ? mem_find(s.s + i, s.n - i, from.s, from.n) : NULL;
        if (!f) { sb_put(j, &b, s.s + i, s.n - i); break; }
        sb_put(j, &b, s.s + i, (size_t)(f - (s.s + i)));
        sb_put(j, &b, to.s, to.n);
        left--;
        i = (size_t)(f - s.s) + from.n;
    }
    return v_sb(&b);
}

/* The indent filter: width spaces before every line but the first (unless first) and
 * empty ones (unless blank). */
static jv str_indent(J *j, jv s, int width, int first, int blank) {
    sb b = {0};
    for (size_t i = 0, ln = 0;; ln++) {
        const char *nl = memchr(s.s + i, '\n', s.n - i);
        size_t len = nl ? (size_t)(nl - (s.s + i)) : s.n - i;
        if (!((!first && ln == 0) || (!blank && len == 0)))
            for (int q = 0; q < width; q++) sb_ch(j, &b, ' ');
        sb_put(j, &b, s.s + i, len);
        if (!nl) break;
        sb_ch(j, &b, '\n');
        i += len + 1;
    }
    return v_sb(&b);
}

/* Code points of a string as a list of strings (JavaScript's Array.from). */
static jv str_chars(J *j, jv s) {
    jv l = v_list(j);
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        size_t k = u8dec(s.s, s.n, i, &cp);
        list_push(j, L(l), v_str(s.s + i, k));
        i += k;
    }
    return l;
}

/* ---- ordering */

static int compare(J *j, jv a, jv b, int case_sensitive) {
    if (a.t == JT_NULL && b.t == JT_NULL) return 0;
    if (a.t == JT_NULL || b.t == JT_NULL || (a.t == JT_UNDEF) != (b.t == JT_UNDEF))
        jfail(j, "Cannot compare %s with %s", tname(a), tname(b));
    if (a.t == JT_UNDEF) return 0;
    if (is_numlike(a) && is_numlike(b)) return a.num < b.num ? -1 : a.num > b.num ? 1 : 0;
    if (a.t != b.t) jfail(j, "Cannot compare different types: %s and %s", tname(a), tname(b));
    if (a.t != JT_STR) jfail(j, "Cannot compare type: %s", tname(a));
    if (!case_sensitive) { a = str_map(j, a, 0); b = str_map(j, b, 0); }
    /* JavaScript compares UTF-16 units; for text without astral characters that is code point order, which UTF-8 byte order is */
    size_t m = a.n < b.n ? a.n : b.n;
    int c = memcmp(a.s, b.s, m);
    return c ? (c < 0 ? -1 : 1) : (a.n < b.n ? -1 : a.n > b.n ? 1 : 0);
}

typedef struct sort_item {
    jv v, key;
} sort_item;

/* Stable merge sort (Array.prototype.sort is stable); errors longjmp out, the arena keeps nothing inconsistent. */
static void msort(J *j, sort_item *v, sort_item *tmp, size_t n, int cs, int rev) {
    if (n < 2) return;
    size_t h = n / 2;
    msort(j, v, tmp, h, cs, rev);
    msort(j, v + h, tmp, n - h, cs, rev);
    size_t a = 0, b = h, k = 0;
    while (a < h && b < n) {
        int c = compare(j, v[a].key, v[b].key, cs);
        if (rev) c = -c;
        tmp[k++] = c <= 0 ? v[a++] : v[b++];
    }
    while (a < h) tmp[k++] = v[a++];
    while (b < n) tmp[k++] = v[b++];
    memcpy(v, tmp, n * sizeof *v);
}

/* item.attr.path: dicts by key, lists by index, else undefined. */
static jv attr_path(jv item, jv path) {
    jv v = item;
    size_t i = 0;
    while (i <= path.n) {
        const char *dot = memchr(path.s + i, '.', path.n - i);
        size_t len = dot ? (size_t)(dot - (path.s + i)) : path.n - i;
        if (is_container(v)) {
            jent *x = dict_find(D(v), path.s + i, len);
            v = x ? x->v : UNDEF;
        } else if (v.t == JT_LIST) {
            double idx;
            if (!array_index_key(path.s + i, len, &idx) || idx >= (double)L(v)->n) return UNDEF;
            v = L(v)->v[(size_t)idx];
        } else {
            return UNDEF;
        }
        if (!dot) break;
        i += len + 1;
    }
    return v;
}

static jv sort_list(J *j, jv list, int rev, int cs, jv attr) {
    size_t n = L(list)->n;
    sort_item *v = jalloc(j, (n + 1) * sizeof *v), *tmp = jalloc(j, (n + 1) * sizeof *tmp);
    for (size_t i = 0; i < n; i++) {
        v[i].v = L(list)->v[i];
        if (attr.t == JT_NULL) v[i].key = v[i].v;
        else {
            jv path = attr;
            if (attr.t == JT_INT) { char buf[32]; js_num(attr.num, buf, sizeof buf); path = v_str(jstrdup(j, buf, strlen(buf)), strlen(buf)); }
            v[i].key = attr_path(v[i].v, path);
        }
    }
    msort(j, v, tmp, n, cs, rev);
    jv out = v_list(j);
    for (size_t i = 0; i < n; i++) list_push(j, L(out), v[i].v);
    return out;
}

static jv dict_items(J *j, jv d) {
    jv out = v_list(j);
    for (size_t i = 0; i < D(d)->n; i++) {
        jv pair = v_list(j);
        list_push(j, L(pair), v_str(D(d)->e[i].k, D(d)->e[i].kn));
        list_push(j, L(pair), D(d)->e[i].v);
        list_push(j, L(out), pair);
    }
    return out;
}

static jv dictsort(J *j, jv d, const args *a) {
    jv *cs = arg(a, 0, "case_sensitive"), *by = arg(a, 1, "by"), *rev = arg(a, 2, "reverse");
    if (cs && cs->t != JT_BOOL) jfail(j, "case_sensitive must be a boolean");
    if (by && by->t != JT_STR) jfail(j, "by must be a string");
    int by_value = 0;
    if (by) {
        if (by->n == 5 && memcmp(by->s, "value", 5) == 0) by_value = 1;
        else if (!(by->n == 3 && memcmp(by->s, "key", 3) == 0)) jfail(j, "by must be either 'key' or 'value'");
    }
    if (rev && rev->t != JT_BOOL) jfail(j, "reverse must be a boolean");
    jv items = dict_items(j, d);
    size_t n = L(items)->n;
    sort_item *v = jalloc(j, (n + 1) * sizeof *v), *tmp = jalloc(j, (n + 1) * sizeof *tmp);
    for (size_t i = 0; i < n; i++) { v[i].v = L(items)->v[i]; v[i].key = L(v[i].v)->v[by_value]; }
    msort(j, v, tmp, n, cs && cs->num, rev && rev->num);
    jv out = v_list(j);
    for (size_t i = 0; i < n; i++) list_push(j, L(out), v[i].v);
    return out;
}

/* ---- tests */

static int run_test(J *j, const char *name, size_t n, jv a, const jv *b) {
#define IS(w) (n == strlen(w) && memcmp(name, w, n) == 0)
    if (IS("boolean")) return a.t == JT_BOOL;
    if (IS("callable")) return a.t == JT_FUNC;
    if (IS("odd") || IS("even")) {
        if (a.t != JT_INT) jfail(j, "cannot %.*s on %s", (int)n, name, tname(a));
        int odd = fmod(a.num, 2) != 0;
        return IS("odd") ? odd : !odd;
    }
    if (IS("false")) return a.t == JT_BOOL && !a.num;
    if (IS("true")) return a.t == JT_BOOL && a.num;
    if (IS("none")) return a.t == JT_NULL;
    if (IS("string")) return a.t == JT_STR;
    if (IS("number")) return is_num(a);
    if (IS("integer")) return a.t == JT_INT;
    if (IS("iterable")) return (a.t == JT_LIST && !a.tuple) || a.t == JT_STR;
    if (IS("mapping")) return a.t == JT_DICT;
    if (IS("sequence")) return a.t == JT_LIST || a.t == JT_DICT || a.t == JT_STR;
    if (IS("lower") || IS("upper")) {
        if (a.t != JT_STR) jfail(j, "test '%.*s' on %s", (int)n, name, tname(a));
        return strict_eq(a, str_map(j, a, IS("upper")));
    }
    if (IS("defined")) return a.t != JT_UNDEF;
    if (IS("undefined")) return a.t == JT_UNDEF;
    if (IS("equalto") || IS("eq")) {
        if (!b) jfail(j, "test '%.*s' needs a value to compare with", (int)n, name);
        return strict_eq(a, *b);
    }
#undef IS
    jfail(j, "Unknown test: %.*s", (int)n, name);
}

static jv v_fn(J *j, int kind, const char *name, jv self, node *macro);
static jv call_method(J *j, jfn *f, const args *a);

/* A dict's built-in method name (get, items, keys, values, dictsort) bound to it, or undefined. */
static jv dict_method(J *j, jv d, const char *name, size_t n) {
    static const char *const m[] = {"get", "items", "keys", "values", "dictsort"};
    for (int i = 0; i < 5; i++)
        if (n == strlen(m[i]) && !memcmp(name, m[i], n)) return v_fn(j, FN_METHOD, m[i], d, NULL);
    return UNDEF;
}

/* JavaScript's parseInt(s, 10) and parseFloat(s): a leading number, NaN if none. */
static size_t digits_at(jv s, size_t i) {
    size_t k = i;
    while (k < s.n && is_digit(s.s[k])) k++;
    return k - i;
}
static double js_parse_int(jv s) {
    size_t i = js_trim_start(s.s, s.n);
    int neg = i < s.n && s.s[i] == '-';
    if (i < s.n && (s.s[i] == '-' || s.s[i] == '+')) i++;
    size_t nd = digits_at(s, i);
    if (nd == 0) return NAN;
    double v = 0;
    for (size_t k = 0; k < nd; k++) v = v * 10 + (s.s[i + k] - '0');
    return neg ? -v : v;
}
static double js_parse_float(jv s) {
    size_t i = js_trim_start(s.s, s.n), st = i;
    if (i < s.n && (s.s[i] == '-' || s.s[i] == '+')) i++;
    if (s.n - i >= 8 && memcmp(s.s + i, "Infinity", 8) == 0) return s.s[st] == '-' ? -INFINITY : INFINITY;
    size_t ip = digits_at(s, i), fp = 0;
    i += ip;
    if (i < s.n && s.s[i] == '.') fp = digits_at(s, i + 1);
    if (ip == 0 && fp == 0) return NAN;
    if (i < s.n && s.s[i] == '.') i += 1 + fp;
    if (i < s.n && (s.s[i] == 'e' || s.s[i] == 'E')) {
        size_t k = i + 1;
        if (k < s.n && (s.s[k] == '-' || s.s[k] == '+')) k++;
        if (digits_at(s, k) > 0) i = k + digits_at(s, k);
    }
    char buf[400];
    if (i - st >= sizeof buf) return NAN;
    memcpy(buf, s.s + st, i - st);
    buf[i - st] = 0;
    return strtod(buf, NULL);
}

/* ---- filters */

static jv apply_filter(J *j, jv v, node *f, env *e) {
    if (f->k == N_IDENT) {
#define IS(w) name_is(f, w)
        if (IS("safe")) return v;
        if (IS("tojson")) { sb b = {0}; sb_json_default(j, &b, v, 1); return v_sb(&b); }
        if (v.t == JT_LIST) {
            jlist *l = L(v);
            if (IS("list")) return v;
            if (IS("first")) return l->n ? l->v[0] : UNDEF;
            if (IS("last")) return l->n ? l->v[l->n - 1] : UNDEF;
            if (IS("length")) return v_int((double)l->n);
            if (IS("reverse")) {
                jv o = v_list(j);
                for (size_t i = l->n; i-- > 0;) list_push(j, L(o), l->v[i]);
                return o;
            }
            if (IS("sort")) return sort_list(j, v, 0, 0, JNULL);
            if (IS("join")) {
                sb b = {0};
                for (size_t i = 0; i < l->n; i++) sb_js(j, &b, l->v[i]);
                return v_sb(&b);
            }
            if (IS("string")) { sb b = {0}; sb_json_default(j, &b, v, 0); return v_sb(&b); }
            if (IS("unique")) {
                jv o = v_list(j);
                for (size_t i = 0; i < l->n; i++) {
                    int seen = 0;
                    for (size_t q = 0; q < L(o)->n && !seen; q++) seen = strict_eq(L(o)->v[q], l->v[i]);
                    if (!seen) list_push(j, L(o), l->v[i]);
                }
                return o;
            }
            jfail(j, "Unknown ArrayValue filter: %.*s", (int)f->n, f->s);
        }
        if (v.t == JT_STR) {
            if (IS("length")) return v_int((double)js_length(v.s, v.n));
            if (IS("upper") || IS("lower")) return str_map(j, v, IS("upper"));
            if (IS("title")) return str_title(j, v);
            if (IS("capitalize")) return str_capitalize(j, v);
            if (IS("trim")) return str_trim(v, 1, 1);
            if (IS("indent")) return str_indent(j, v, 4, 0, 0);
            if (IS("join") || IS("string")) return v;
            if (IS("int") || IS("float")) {
                double x = IS("int") ? js_parse_int(v) : js_parse_float(v);
                return IS("int") ? v_int(isnan(x) ? 0 : x) : v_float(isnan(x) ? 0 : x);
            }
            jfail(j, "Unknown StringValue filter: %.*s", (int)f->n, f->s);
        }
        if (is_num(v)) {
            if (IS("abs")) return v.t == JT_INT ? v_int(fabs(v.num)) : v_float(fabs(v.num));
            if (IS("int")) return v_int(floor(v.num));
            if (IS("float")) return v_float(v.num);
            if (IS("string")) { sb b = {0}; sb_value(j, &b, v); return v_sb(&b); }
            jfail(j, "Unknown NumericValue filter: %.*s", (int)f->n, f->s);
        }
        if (v.t == JT_DICT) { /* items, length, else a method called without arguments */
            if (IS("items")) return dict_items(j, v);
            if (IS("length")) return v_int((double)D(v)->n);
            jv m = dict_method(j, v, f->s, f->n);
            args none = {0};
            if (m.t == JT_FUNC) return call_method(j, m.p, &none);
            jfail(j, "Unknown ObjectValue filter: %.*s", (int)f->n, f->s);
        }
        if (v.t == JT_BOOL) {
            if (IS("bool")) return v;
            if (IS("int")) return v_int(v.num);
            if (IS("float")) return v_float(v.num);
            if (IS("string")) return v_str(v.num ? "true" : "false", v.num ? 4 : 5);
            jfail(j, "Unknown BooleanValue filter: %.*s", (int)f->n, f->s);
        }
        jfail(j, "Cannot apply filter \"%.*s\" to type: %s", (int)f->n, f->s, tname(v));
#undef IS
    }
    /* a call: name(args) */
    node *cal = f->a;
    if (f->k != N_CALL || cal->k != N_IDENT) jfail(j, "Unknown filter");
#define IS(w) name_is(cal, w)
    if (IS("tojson")) {
        args a = eval_args(j, f->b, e);
        jv *ind = kwget(&a, "indent"), *asc = kwget(&a, "ensure_ascii"), *sk = kwget(&a, "sort_keys"), *sep = kwget(&a, "separators");
        if (ind && ind->t != JT_INT && ind->t != JT_NULL) jfail(j, "If set, indent must be a number");
        if (asc && asc->t != JT_BOOL) jfail(j, "If set, ensure_ascii must be a boolean");
        if (sk && sk->t != JT_BOOL) jfail(j, "If set, sort_keys must be a boolean");
        json_opts o = {0, asc && asc->num, sk && sk->num, 1, ", ", ": "};
        if (ind && ind->t == JT_INT && ind->num != 0 && !isnan(ind->num)) {
            if (ind->num < 0 || ind->num > 64) jfail(j, "tojson: unsupported indent %g", ind->num);
            o.indent = (int)ind->num;
            o.item_sep = ",";
        }
        if (sep && sep->t != JT_NULL) {
            if (sep->t != JT_LIST || L(*sep)->n != 2 || L(*sep)->v[0].t != JT_STR || L(*sep)->v[1].t != JT_STR)
                jfail(j, "separators must be a tuple of two strings");
            o.item_sep = jstrdup(j, L(*sep)->v[0].s, L(*sep)->v[0].n);
            o.key_sep = jstrdup(j, L(*sep)->v[1].s, L(*sep)->v[1].n);
        }
        sb b = {0};
        sb_json(j, &b, v, &o, 0);
        return v_sb(&b);
    }
    if (IS("join")) {
        jv items;
        if (v.t == JT_STR) items = str_chars(j, v);
        else if (v.t == JT_LIST) items = v;
        else jfail(j, "Cannot apply filter \"join\" to type: %s", tname(v));
        args a = eval_args(j, f->b, e);
        jv *sep = arg(&a, 0, "separator");
        if (sep && sep->t != JT_STR) jfail(j, "separator must be a string");
        sb b = {0};
        for (size_t i = 0; i < L(items)->n; i++) {
            if (i && sep) sb_put(j, &b, sep->s, sep->n);
            sb_js(j, &b, L(items)->v[i]);
        }
        return v_sb(&b);
    }
    if (IS("int") || IS("float")) {
        args a = eval_args(j, f->b, e);
        jv *def = arg(&a, 0, "default");
        if (v.t == JT_STR) {
            double x = IS("int") ? js_parse_int(v) : js_parse_float(v);
            if (isnan(x)) return def ? *def : IS("int") ? v_int(0) : v_float(0);
            return IS("int") ? v_int(x) : v_float(x);
        }
        if (is_num(v)) return v;
        if (v.t == JT_BOOL) return IS("int") ? v_int(v.num) : v_float(v.num);
        jfail(j, "Cannot apply filter \"%.*s\" to type: %s", (int)cal->n, cal->s, tname(v));
    }
    if (IS("default")) {
        args a = eval_args(j, f->b, e);
        jv def = a.n > 0 ? a.v[0] : v_str("", 0);
        jv *flag = arg(&a, 1, "boolean");
        if (flag && flag->t != JT_BOOL) jfail(j, "`default` filter flag must be a boolean");
        if (v.t == JT_UNDEF || (flag && flag->num && !truthy(v))) return def;
        return v;
    }
    if (v.t == JT_LIST) {
        if (IS("sort")) {
            args a = eval_args(j, f->b, e);
            jv *rev = arg(&a, 0, "reverse"), *cs = arg(&a, 1, "case_sensitive"), *at = arg(&a, 2, "attribute");
            if (rev && rev->t != JT_BOOL) jfail(j, "reverse must be a boolean");
            if (cs && cs->t != JT_BOOL) jfail(j, "case_sensitive must be a boolean");
            if (at && at->t != JT_STR && at->t != JT_INT && at->t != JT_NULL) jfail(j, "attribute must be a string, integer, or null");
            return sort_list(j, v, rev && rev->num, cs && cs->num, at ? *at : JNULL);
        }
        if (IS("selectattr") || IS("rejectattr")) {
            int sel = IS("selectattr");
            for (size_t i = 0; i < L(v)->n; i++)
                if (!is_container(L(v)->v[i])) jfail(j, "`%.*s` can only be applied to array of objects", (int)cal->n, cal->s);
            node *t = f->b;
            for (int i = 0; i < t->n1; i++)
                if (t->l1[i]->k != N_STR) jfail(j, "arguments of `%.*s` must be strings", (int)cal->n, cal->s);
            if (t->n1 < 1) jfail(j, "`%.*s` needs an attribute name", (int)cal->n, cal->s);
            node *attr = t->l1[0], *test = t->n1 > 1 ? t->l1[1] : NULL;
            jv val = t->n1 > 2 ? v_str(t->l1[2]->s, t->l1[2]->n) : UNDEF;
            jv o = v_list(j);
            for (size_t i = 0; i < L(v)->n; i++) {
                jent *x = dict_find(D(L(v)->v[i]), attr->s, attr->n);
                int r = 0;
                if (x) r = test ? run_test(j, test->s, test->n, x->v, t->n1 > 2 ? &val : NULL) : truthy(x->v);
                if (sel ? r : !r) list_push(j, L(o), L(v)->v[i]);
            }
            return o;
        }
        if (IS("map")) {
            args a = eval_args(j, f->b, e);
            jv *at = kwget(&a, "attribute");
            if (!at) jfail(j, "`map` expressions without `attribute` set are not currently supported.");
            if (at->t != JT_STR) jfail(j, "attribute must be a string");
            jv *def = kwget(&a, "default");
            jv o = v_list(j);
            for (size_t i = 0; i < L(v)->n; i++) {
                if (!is_container(L(v)->v[i])) jfail(j, "items in map must be an object");
                jv r = attr_path(L(v)->v[i], *at);
                list_push(j, L(o), r.t == JT_UNDEF && def ? *def : r);
            }
            return o;
        }
        jfail(j, "Unknown ArrayValue filter: %.*s", (int)cal->n, cal->s);
    }
    if (v.t == JT_STR) {
        if (IS("indent")) {
            args a = eval_args(j, f->b, e);
            jv *w = arg(&a, 0, "width"), *first = arg(&a, 1, "first"), *blank = arg(&a, 2, "blank");
            if (w && w->t != JT_INT) jfail(j, "width must be a number");
            double width = w ? w->num : 4;
            if (isnan(width)) width = 0; /* " ".repeat(NaN) */
            if (width > 1024) jfail(j, "indent: width too large");
            if (width < 0) jfail(j, "Invalid count value: %g", width);
            return str_indent(j, v, (int)width, first && truthy(*first), blank && truthy(*blank));
        }
        if (IS("replace")) {
            args a = eval_args(j, f->b, e);
            if (a.n < 2) jfail(j, "replace() requires at least two arguments");
            jv *cnt = a.n > 2 ? &a.v[2] : kwget(&a, "count");
            return str_replace(j, v, a.v[0], a.v[1], cnt ? *cnt : JNULL);
        }
        jfail(j, "Unknown StringValue filter: %.*s", (int)cal->n, cal->s);
    }
    if (v.t == JT_DICT) {
        jv m = dict_method(j, v, cal->s, cal->n);
        if (m.t != JT_FUNC) jfail(j, "Unknown ObjectValue filter: %.*s", (int)cal->n, cal->s);
        args a = eval_args(j, f->b, e);
        return call_method(j, m.p, &a);
    }
    jfail(j, "Cannot apply filter \"%.*s\" to type: %s", (int)cal->n, cal->s, tname(v));
#undef IS
}

/* ---- calls */

/* Does the tree use the identifier name? (Left-deep operator chains are not depth-checked
 * by the parser, hence the limit.) */
static int tree_uses(J *j, const node *x, const char *name, int depth) {
    if (!x) return 0;
    if (depth > 5000) jfail(j, "expression nested too deeply");
    if (x->k == N_IDENT && name_is(x, name)) return 1;
    if (tree_uses(j, x->a, name, depth + 1) || tree_uses(j, x->b, name, depth + 1) || tree_uses(j, x->c, name, depth + 1))
        return 1;
    for (int i = 0; i < x->n1; i++)
        if (tree_uses(j, x->l1[i], name, depth + 1) || (x->k == N_OBJECT && tree_uses(j, x->l2[i], name, depth + 1))) return 1;
    if (x->k != N_OBJECT)
        for (int i = 0; i < x->n2; i++)
            if (tree_uses(j, x->l2[i], name, depth + 1)) return 1;
    return 0;
}

static int macro_uses(J *j, const node *m, const char *name) {
    for (int i = 0; i < m->n2; i++)
        if (name_is(m->l2[i], name)) return 0; /* declared as a parameter */
    for (int i = 0; i < m->n1; i++)
        if (tree_uses(j, m->l1[i], name, 0)) return 1;
    for (int i = 0; i < m->n2; i++)
        if (m->l2[i]->k == N_KWARG && tree_uses(j, m->l2[i]->a, name, 0)) return 1;
    return 0;
}

static jv call_macro(J *j, node *m, const args *a, env *caller) {
    env *scope = env_new(j, caller);
    jdict kw = {0};
    if (a->kw) {
        kw.e = jalloc(j, (a->kw->n + 1) * sizeof *kw.e);
        memcpy(kw.e, a->kw->e, a->kw->n * sizeof *kw.e);
        kw.n = kw.cap = a->kw->n;
    }
    node *pending[64];
    int np = 0;
    for (int i = 0; i < m->n2; i++) {
        node *p = m->l2[i];
        const jv *val = (size_t)i < a->n ? &a->v[i] : NULL;
        jv got;
        if (!val) {
            jent *x = dict_find(&kw, p->s, p->n);
            if (x) {
                got = x->v;
                val = &got;
                size_t idx = (size_t)(x - kw.e);
                memmove(kw.e + idx, kw.e + idx + 1, (kw.n - idx - 1) * sizeof *kw.e);
                kw.n--;
            }
        }
        if (!val && p->k == N_KWARG) {
            if (np >= 64) jfail(j, "macro '%.*s': too many parameters", (int)m->n, m->s);
            pending[np++] = p;
        }
        env_set(j, scope, p->s, p->n, val ? *val : UNDEF);
    }
    if (macro_uses(j, m, "kwargs")) {
        jv d = v_dict(j, JT_DICT);
        *D(d) = kw;
        env_set(j, scope, "kwargs", 6, d);
    } else if (kw.n > 0) {
        jfail(j, "macro '%.*s' takes no keyword argument '%.*s'", (int)m->n, m->s, (int)kw.e[0].kn, kw.e[0].k);
    }
    if (macro_uses(j, m, "varargs")) {
        jv l = v_list(j);
        for (size_t i = (size_t)m->n2; i < a->n; i++) list_push(j, L(l), a->v[i]);
        env_set(j, scope, "varargs", 7, l);
    } else if (a->n > (size_t)m->n2) {
        jfail(j, "macro '%.*s' takes not more than %d argument(s)", (int)m->n, m->s, m->n2);
    }
    for (int i = 0; i < np; i++) env_set(j, scope, pending[i]->s, pending[i]->n, ev(j, pending[i]->a, scope));
    sb out = {0};
    enter(j);
    if (exec_block(j, m->l1, m->n1, scope, &out) != ST_OK) jfail(j, "break or continue outside a loop");
    j->depth--;
    return v_sb(&out);
}

static jv call_method(J *j, jfn *f, const args *a) {
    jv s = f->self;
    const char *m = f->name;
    if (s.t == JT_STR) {
        if (!strcmp(m, "upper") || !strcmp(m, "lower")) return str_map(j, s, !strcmp(m, "upper"));
        if (!strcmp(m, "strip")) return str_trim(s, 1, 1);
        if (!strcmp(m, "lstrip")) return str_trim(s, 1, 0);
        if (!strcmp(m, "rstrip")) return str_trim(s, 0, 1);
        if (!strcmp(m, "title")) return str_title(j, s);
        if (!strcmp(m, "capitalize")) return str_capitalize(j, s);
        if (!strcmp(m, "startswith")) return str_affix(j, s, a, 0);
        if (!strcmp(m, "endswith")) return str_affix(j, s, a, 1);
        if (!strcmp(m, "split")) return str_split(j, s, a);
        if (!strcmp(m, "replace")) {
            if (a->n < 2) jfail(j, "replace() requires at least two arguments");
            jv *cnt = a->n > 2 ? &a->v[2] : kwget(a, "count");
            return str_replace(j, s, a->v[0], a->v[1], cnt ? *cnt : JNULL);
        }
    } else if (s.t == JT_DICT) {
        if (!strcmp(m, "get")) {
            jv key = a->n > 0 ? a->v[0] : UNDEF;
            if (key.t != JT_STR) jfail(j, "Object key must be a string: got %s", tname(key));
            jent *x = dict_find(D(s), key.s, key.n);
            if (x) return x->v;
            if (a->n > 1) return a->v[1];
            if (a->kw) { jv d = v_dict(j, JT_DICT); *D(d) = *a->kw; return d; } /* the reference passes its kwargs object */
            return JNULL;
        }
        if (!strcmp(m, "items")) return dict_items(j, s);
        if (!strcmp(m, "keys") || !strcmp(m, "values")) {
            jv o = v_list(j);
            int keys = !strcmp(m, "keys");
            for (size_t i = 0; i < D(s)->n; i++) list_push(j, L(o), keys ? v_str(D(s)->e[i].k, D(s)->e[i].kn) : D(s)->e[i].v);
            return o;
        }
        if (!strcmp(m, "dictsort")) return dictsort(j, s, a);
    }
    jfail(j, "unknown method %s", m);
}

static jv call(J *j, jv fnv, const args *a, env *e) {
    if (fnv.t != JT_FUNC) jfail(j, "Cannot call something that is not a function: got %s", tname(fnv));
    jfn *f = fnv.p;
    switch (f->kind) {
    case FN_MACRO: return call_macro(j, f->macro, a, e);
    case FN_CALLER: return call_macro(j, f->macro, a, f->closure);
    case FN_METHOD: return call_method(j, f, a);
    case FN_NAMESPACE: {
        if (a->n > 1) jfail(j, "namespace expected at most 1 argument, got %zu", a->n);
        jv ns = v_dict(j, JT_NS);
        if (a->n == 1) {
            jv from = a->v[0];
            if (from.t == JT_DICT) {
                for (size_t i = 0; i < D(from)->n; i++) dict_set(j, D(ns), D(from)->e[i].k, D(from)->e[i].kn, D(from)->e[i].v);
            } else if (from.t == JT_LIST) {
                for (size_t i = 0; i < L(from)->n; i++) {
                    jv pr = L(from)->v[i];
                    if (pr.t == JT_STR) pr = str_chars(j, pr);
                    if (pr.t != JT_LIST || L(pr)->n != 2) jfail(j, "namespace expected an object or an iterable of [key, value] pairs");
                    if (L(pr)->v[0].t != JT_STR) jfail(j, "namespace keys must be strings");
                    dict_set(j, D(ns), L(pr)->v[0].s, L(pr)->v[0].n, L(pr)->v[1]);
                }
            } else {
                jfail(j, "'%s' object is not iterable", tname(from));
            }
        }
        if (a->kw)
            for (size_t i = 0; i < a->kw->n; i++) dict_set(j, D(ns), a->kw->e[i].k, a->kw->e[i].kn, a->kw->e[i].v);
        return ns;
    }
    case FN_RAISE: {
        sb b = {0};
        if (a->n > 0 && a->v[0].t != JT_UNDEF && a->v[0].t != JT_NULL) sb_js(j, &b, a->v[0]);
        jfail(j, "raise_exception: %s", b.p ? b.p : "");
    }
    case FN_RANGE: {
        for (size_t i = 0; i < a->n && i < 3; i++)
            if (!is_numlike(a->v[i])) jfail(j, "range() arguments must be numbers");
        if (a->n == 0) jfail(j, "range() needs an argument");
        double st = 0, stop = a->v[0].num, stp = 1;
        if (a->n >= 2) { st = a->v[0].num; stop = a->v[1].num; }
        if (a->n >= 3) stp = a->v[2].num;
        if (stp == 0) jfail(j, "range() step must not be zero");
        jv l = v_list(j);
        for (double i = st; stp > 0 ? i < stop : i > stop; i += stp) {
            step(j);
            list_push(j, L(l), i == floor(i) ? v_int(i) : v_float(i));
        }
        return l;
    }
    case FN_STRFTIME: {
        if (a->n < 1 || a->v[0].t != JT_STR) jfail(j, "strftime_now() needs a format string");
        static const char *const mon[] = {"January", "February", "March", "April", "May", "June", "July",
                                          "August", "September", "October", "November", "December"};
        time_t now = j->now ? j->now : time(NULL);
        struct tm tm;
        if (!localtime_r(&now, &tm)) jfail(j, "strftime_now: no local time");
        jv fmt = a->v[0];
        sb b = {0};
        for (size_t i = 0; i < fmt.n; i++) {
            char c = i + 1 < fmt.n && fmt.s[i] == '%' ? fmt.s[i + 1] : 0;
            char buf[32];
            switch (c) {
            case 'Y': snprintf(buf, sizeof buf, "%d", tm.tm_year + 1900); break;
            case 'm': snprintf(buf, sizeof buf, "%02d", tm.tm_mon + 1); break;
            case 'd': snprintf(buf, sizeof buf, "%02d", tm.tm_mday); break;
            case 'b': snprintf(buf, sizeof buf, "%.3s", mon[tm.tm_mon]); break;
            case 'B': snprintf(buf, sizeof buf, "%s", mon[tm.tm_mon]); break;
            case 'H': snprintf(buf, sizeof buf, "%02d", tm.tm_hour); break;
            case 'M': snprintf(buf, sizeof buf, "%02d", tm.tm_min); break;
            case '%': snprintf(buf, sizeof buf, "%%"); break;
            default: sb_ch(j, &b, fmt.s[i]); continue;
            }
            sb_str(j, &b, buf);
            i++;
        }
        return v_sb(&b);
    }
    }
    jfail(j, "bad function");
}

/* ---- expressions */

static jv member(J *j, node *x, env *e) {
    jv obj = ev(j, x->a, e), prop;
    if (x->flag) {
        if (x->b->k == N_SLICE) {
            node *sl = x->b;
            if (obj.t != JT_LIST && obj.t != JT_STR) jfail(j, "Slice object must be an array or string");
            jv st = sl->a ? ev(j, sl->a, e) : UNDEF, sp = sl->b ? ev(j, sl->b, e) : UNDEF, stp = sl->c ? ev(j, sl->c, e) : UNDEF;
            if ((st.t != JT_INT && st.t != JT_UNDEF) || (sp.t != JT_INT && sp.t != JT_UNDEF) || (stp.t != JT_INT && stp.t != JT_UNDEF))
                jfail(j, "Slice indices must be integers or undefined");
            jv arr = obj.t == JT_STR ? str_chars(j, obj) : obj;
            if ((st.t == JT_INT && isnan(st.num)) || (sp.t == JT_INT && isnan(sp.num))) /* the reference's loop never runs */
                return obj.t == JT_STR ? v_str("", 0) : v_list(j);
            double len = (double)L(arr)->n, step_ = stp.t == JT_INT ? stp.num : 1;
            int dir = step_ > 0 ? 1 : step_ < 0 ? -1 : 0;
            double a0, b0;
            if (dir >= 0) {
                a0 = st.t == JT_UNDEF ? 0 : st.num;
                a0 = a0 < 0 ? fmax(len + a0, 0) : fmin(a0, len);
                b0 = sp.t == JT_UNDEF ? len : sp.num;
                b0 = b0 < 0 ? fmax(len + b0, 0) : fmin(b0, len);
            } else {
                a0 = st.t == JT_UNDEF ? len - 1 : st.num;
                a0 = a0 < 0 ? fmax(len + a0, -1) : fmin(a0, len - 1);
                b0 = sp.t == JT_UNDEF ? -1 : sp.num;
                b0 = b0 < -1 ? fmax(len + b0, -1) : fmin(b0, len - 1);
            }
            jv out = v_list(j);
            for (double i = a0; dir * i < dir * b0; i += step_) list_push(j, L(out), L(arr)->v[(size_t)i]);
            if (obj.t == JT_LIST) return out;
            sb b = {0};
            for (size_t i = 0; i < L(out)->n; i++) sb_put(j, &b, L(out)->v[i].s, L(out)->v[i].n);
            return v_sb(&b);
        }
        prop = ev(j, x->b, e);
    } else if (x->b->k == N_INT) {
        prop = v_int(x->b->num);
    } else {
        prop = v_str(x->b->s, x->b->n);
    }
    if (is_container(obj)) {
        if (prop.t != JT_STR) jfail(j, "Cannot access property with non-string: got %s", tname(prop));
        jent *f = dict_find(D(obj), prop.s, prop.n);
        if (f) return f->v;
        return obj.t == JT_DICT ? dict_method(j, obj, prop.s, prop.n) : UNDEF;
    }
    if (obj.t == JT_LIST || obj.t == JT_STR) {
        if (prop.t == JT_INT) {
            jv arr = obj.t == JT_STR ? str_chars(j, obj) : obj;
            double k = isnan(prop.num) ? 0 : prop.num; /* Array.prototype.at: NaN is 0 */
            double i = k < 0 ? (double)L(arr)->n + k : k;
            if (!(i >= 0 && i < (double)L(arr)->n)) return UNDEF;
            return L(arr)->v[(size_t)i];
        }
        if (prop.t != JT_STR) jfail(j, "Cannot access property with non-string/non-number: got %s", tname(prop));
        if (prop.n == 6 && !memcmp(prop.s, "length", 6)) return v_int(obj.t == JT_STR ? (double)js_length(obj.s, obj.n) : (double)L(obj)->n);
        if (obj.t == JT_STR) {
            static const char *const m[] = {"upper", "lower", "strip", "title", "capitalize", "rstrip", "lstrip",
                                            "startswith", "endswith", "split", "replace"};
            for (int i = 0; i < 11; i++)
                if (prop.n == strlen(m[i]) && !memcmp(prop.s, m[i], prop.n)) return v_fn(j, FN_METHOD, m[i], obj, NULL);
        }
        return UNDEF;
    }
    if (prop.t != JT_STR) jfail(j, "Cannot access property with non-string: got %s", tname(prop));
    return UNDEF;
}

static jv binop(J *j, node *x, env *e) {
    const char *op = x->s;
    size_t on = x->n;
#define OP(w) (on == strlen(w) && memcmp(op, w, on) == 0)
    jv a = ev(j, x->a, e);
    if (OP("and")) return truthy(a) ? ev(j, x->b, e) : a;
    if (OP("or")) return truthy(a) ? a : ev(j, x->b, e);
    jv b = ev(j, x->b, e);
    if (OP("==")) return v_bool(loose_eq(a, b));
    if (OP("!=")) return v_bool(!loose_eq(a, b));
    if (a.t == JT_UNDEF || b.t == JT_UNDEF) {
        if (b.t == JT_UNDEF && (OP("in") || OP("not in"))) return v_bool(OP("not in"));
        jfail(j, "Cannot perform operation %.*s on undefined values", (int)on, op);
    }
    if (a.t == JT_NULL || b.t == JT_NULL) jfail(j, "Cannot perform operation on null values");
    if (OP("~")) { sb s = {0}; sb_js(j, &s, a); sb_js(j, &s, b); return v_sb(&s); }
    if (OP("**") && is_numlike(a) && is_numlike(b)) {
        if (a.num == 0 && b.num < 0) jfail(j, "0.0 cannot be raised to a negative power");
        double r = pow(a.num, b.num);
        if (!isfinite(r)) jfail(j, "Exponentiation result is not a finite real number");
        return a.t == JT_FLOAT || b.t == JT_FLOAT || b.num < 0 ? v_float(r) : v_int(r);
    }
    if (is_num(a) && is_num(b)) {
        int fl = a.t == JT_FLOAT || b.t == JT_FLOAT;
        double r;
        if (OP("+")) r = a.num + b.num;
        else if (OP("-")) r = a.num - b.num;
        else if (OP("*")) r = a.num * b.num;
        else if (OP("/")) return v_float(a.num / b.num);
        else if (OP("//")) r = floor(a.num / b.num);
        else if (OP("%")) r = fmod(a.num, b.num);
        else if (OP("<")) return v_bool(a.num < b.num);
        else if (OP(">")) return v_bool(a.num > b.num);
        else if (OP(">=")) return v_bool(a.num >= b.num);
        else if (OP("<=")) return v_bool(a.num <= b.num);
        else goto unknown;
        return fl ? v_float(r) : v_int(r);
    }
    if (a.t == JT_LIST && b.t == JT_LIST) {
        if (OP("+")) {
            jv o = v_list(j);
            for (size_t i = 0; i < L(a)->n; i++) list_push(j, L(o), L(a)->v[i]);
            for (size_t i = 0; i < L(b)->n; i++) list_push(j, L(o), L(b)->v[i]);
            return o;
        }
    } else if (b.t == JT_LIST) {
        if (OP("in") || OP("not in")) {
            int found = 0;
            for (size_t i = 0; i < L(b)->n && !found; i++) found = strict_eq(L(b)->v[i], a);
            return v_bool(OP("in") ? found : !found);
        }
    }
    if ((a.t == JT_STR || b.t == JT_STR) && OP("+")) { sb s = {0}; sb_js(j, &s, a); sb_js(j, &s, b); return v_sb(&s); }
    if (a.t == JT_STR && b.t == JT_STR && (OP("in") || OP("not in"))) {
        int found = mem_find(b.s, b.n, a.s, a.n) != NULL;
        return v_bool(OP("in") ? found : !found);
    }
    if (a.t == JT_STR && b.t == JT_DICT && (OP("in") || OP("not in"))) {
        int found = dict_find(D(b), a.s, a.n) != NULL;
        return v_bool(OP("in") ? found : !found);
    }
unknown:
    jfail(j, "Unknown operator \"%.*s\" between %s and %s", (int)on, op, tname(a), tname(b));
#undef OP
}

static jv ev(J *j, node *x, env *e) {
    step(j);
    enter(j);
    int saved = j->line;
    j->line = x->line;
    jv r = UNDEF;
    switch (x->k) {
    case N_TEXT: case N_STR: r = v_str(x->s, x->n); break;
    case N_INT: r = v_int(x->num); break;
    case N_FLOAT: r = v_float(x->num); break;
    case N_IDENT: r = env_get(e, x->s, x->n); break;
    case N_ARRAY: case N_TUPLE:
        r = v_list(j);
        r.tuple = x->k == N_TUPLE;
        for (int i = 0; i < x->n1; i++) list_push(j, L(r), ev(j, x->l1[i], e));
        break;
    case N_OBJECT:
        r = v_dict(j, JT_DICT);
        for (int i = 0; i < x->n1; i++) {
            jv k = ev(j, x->l1[i], e);
            if (k.t != JT_STR) jfail(j, "Object keys must be strings: got %s", tname(k));
            dict_set(j, D(r), k.s, k.n, ev(j, x->l2[i], e));
        }
        break;
    case N_MEMBER: r = member(j, x, e); break;
    case N_CALL: {
        args a = eval_args(j, x->b, e);
        r = call(j, ev(j, x->a, e), &a, e);
        break;
    }
    case N_UNARY: {
        jv v = ev(j, x->a, e);
        if (x->n == 3) { r = v_bool(!truthy(v)); break; }
        if (!is_numlike(v)) jfail(j, "Unknown operator \"%c\" for %s", x->s[0], tname(v));
        double s = x->s[0] == '-' ? -1 : 1;
        r = v.t == JT_FLOAT ? v_float(s * v.num) : v_int(s * v.num);
        break;
    }
    case N_BINARY: r = binop(j, x, e); break;
    case N_FILTER: r = apply_filter(j, ev(j, x->a, e), x->b, e); break;
    case N_TEST: {
        jv v = ev(j, x->a, e);
        int t = run_test(j, x->s, x->n, v, NULL);
        r = v_bool(x->flag ? !t : t);
        break;
    }
    case N_SELECT: r = truthy(ev(j, x->b, e)) ? ev(j, x->a, e) : UNDEF; break;
    case N_TERNARY: r = truthy(ev(j, x->a, e)) ? ev(j, x->b, e) : ev(j, x->c, e); break;
    case N_SLICE: jfail(j, "a slice outside a subscript");
    case N_KWARG: case N_SPREAD: case N_KWSPREAD: jfail(j, "an argument form outside a call");
    default: jfail(j, "a statement where an expression was expected");
    }
    j->line = saved;
    j->depth--;
    return r;
}

/* ---- statements */

static void assign(J *j, node *target, jv v, env *e) {
    if (target->k == N_IDENT) { env_set(j, e, target->s, target->n, v); return; }
    if (target->k == N_TUPLE) {
        if (v.t != JT_LIST) jfail(j, "Cannot unpack non-iterable type in set: %s", tname(v));
        if (L(v)->n != (size_t)target->n1) jfail(j, "Too %s items to unpack in set", (size_t)target->n1 > L(v)->n ? "few" : "many");
        for (int i = 0; i < target->n1; i++) {
            if (target->l1[i]->k != N_IDENT) jfail(j, "Cannot unpack to non-identifier in set");
            env_set(j, e, target->l1[i]->s, target->l1[i]->n, L(v)->v[i]);
        }
        return;
    }
    if (target->k == N_MEMBER) {
        jv obj = ev(j, target->a, e);
        if (obj.t != JT_NS) jfail(j, "cannot assign attribute on non-namespace object");
        if (target->flag || target->b->k != N_IDENT) jfail(j, "Cannot assign to member with non-identifier property");
        dict_set(j, D(obj), target->b->s, target->b->n, v);
        return;
    }
    jfail(j, "Invalid LHS inside assignment expression");
}

static void bind_loopvar(J *j, node *var, jv item, env *e) {
    if (var->k == N_IDENT) { env_set(j, e, var->s, var->n, item); return; }
    if (item.t != JT_LIST) jfail(j, "Cannot unpack non-iterable type: %s", tname(item));
    if (L(item)->n != (size_t)var->n1) jfail(j, "Too %s items to unpack", (size_t)var->n1 > L(item)->n ? "few" : "many");
    for (int i = 0; i < var->n1; i++) {
        if (var->l1[i]->k != N_IDENT) jfail(j, "Cannot unpack non-identifier type");
        env_set(j, e, var->l1[i]->s, var->l1[i]->n, L(item)->v[i]);
    }
}

static void exec_for(J *j, node *x, env *e, sb *out) {
    env *scope = env_new(j, e);
    node *iter = x->b, *test = NULL;
    if (iter->k == N_SELECT) { test = iter->b; iter = iter->a; }
    jv it = ev(j, iter, scope);
    if (it.t != JT_LIST && it.t != JT_DICT) jfail(j, "Expected iterable or object type in for loop: got %s", tname(it));
    if (it.t == JT_DICT) {
        jv keys = v_list(j);
        for (size_t i = 0; i < D(it)->n; i++) list_push(j, L(keys), v_str(D(it)->e[i].k, D(it)->e[i].kn));
        it = keys;
    }
    jlist items = {0};
    for (size_t i = 0; i < L(it)->n; i++) {
        jv cur = L(it)->v[i];
        if (x->a->k == N_TUPLE && (cur.t != JT_LIST || cur.tuple)) jfail(j, "Cannot unpack non-iterable type: %s", tname(cur));
        if (x->a->k == N_TUPLE && L(cur)->n != (size_t)x->a->n1) jfail(j, "Too %s items to unpack", (size_t)x->a->n1 > L(cur)->n ? "few" : "many");
        if (test) {
            env *ls = env_new(j, scope);
            bind_loopvar(j, x->a, cur, ls);
            if (!truthy(ev(j, test, ls))) continue;
        }
        list_push(j, &items, cur);
    }
    int none = 1;
    for (size_t i = 0; i < items.n; i++) {
        step(j);
        jv loop = v_dict(j, JT_DICT);
        jdict *d = D(loop);
        dict_setz(j, d, "index", v_int((double)i + 1));
        dict_setz(j, d, "index0", v_int((double)i));
        dict_setz(j, d, "revindex", v_int((double)(items.n - i)));
        dict_setz(j, d, "revindex0", v_int((double)(items.n - i - 1)));
        dict_setz(j, d, "first", v_bool(i == 0));
        dict_setz(j, d, "last", v_bool(i == items.n - 1));
        dict_setz(j, d, "length", v_int((double)items.n));
        dict_setz(j, d, "previtem", i > 0 ? items.v[i - 1] : UNDEF);
        dict_setz(j, d, "nextitem", i + 1 < items.n ? items.v[i + 1] : UNDEF);
        env_set(j, scope, "loop", 4, loop);
        bind_loopvar(j, x->a, items.v[i], scope);
        size_t mark = out->n;
        int st = exec_block(j, x->l1, x->n1, scope, out);
        if (st != ST_OK) { /* the reference drops the interrupted iteration's output */
            out->n = mark;
            if (out->p) out->p[mark] = 0;
            if (st == ST_BREAK) break;
            continue;
        }
        none = 0;
    }
    if (none && exec_block(j, x->l2, x->n2, scope, out) != ST_OK) jfail(j, "break or continue outside a loop");
}

static int exec_stmt(J *j, node *x, env *e, sb *out) {
    step(j);
    j->line = x->line;
    switch (x->k) {
    case N_COMMENT: return ST_OK;
    case N_TEXT: sb_put(j, out, x->s, x->n); return ST_OK;
    case N_IF: {
        int c = truthy(ev(j, x->a, e));
        return c ? exec_block(j, x->l1, x->n1, e, out) : exec_block(j, x->l2, x->n2, e, out);
    }
    case N_FOR: exec_for(j, x, e, out); return ST_OK;
    case N_SET: {
        jv v;
        if (x->b) v = ev(j, x->b, e);
        else {
            sb b = {0};
            int st = exec_block(j, x->l1, x->n1, e, &b);
            if (st != ST_OK) return st;
            v = v_sb(&b);
        }
        assign(j, x->a, v, e);
        return ST_OK;
    }
    case N_MACRO: env_set(j, e, x->s, x->n, v_fn(j, FN_MACRO, NULL, UNDEF, x)); return ST_OK;
    case N_CALLSTMT: { /* {% call(params) m(args) %}body{% endcall %}: m sees caller() */
        jv caller = v_fn(j, FN_CALLER, NULL, UNDEF, x);
        ((jfn *)caller.p)->closure = e;
        args a = eval_args(j, x->a->b, e);
        jv fn = ev(j, x->a->a, e);
        env *inner = env_new(j, e);
        env_set(j, inner, "caller", 6, caller);
        j->line = x->line;
        jv v = call(j, fn, &a, inner);
        if (v.t != JT_UNDEF && v.t != JT_NULL) sb_value(j, out, v);
        return ST_OK;
    }
    case N_FILTERSTMT: {
        sb b = {0};
        int st = exec_block(j, x->l1, x->n1, e, &b);
        if (st != ST_OK) return st;
        jv v = apply_filter(j, v_sb(&b), x->b, e);
        if (v.t != JT_UNDEF && v.t != JT_NULL) sb_value(j, out, v);
        return ST_OK;
    }
    case N_BREAK: return ST_BREAK;
    case N_CONTINUE: return ST_CONTINUE;
    default: {
        jv v = ev(j, x, e);
        if (v.t != JT_UNDEF && v.t != JT_NULL) sb_value(j, out, v);
        return ST_OK;
    }
    }
}

static int exec_block(J *j, node **body, int n, env *e, sb *out) {
    enter(j);
    for (int i = 0; i < n; i++) {
        int st = exec_stmt(j, body[i], e, out);
        if (st != ST_OK) { j->depth--; return st; }
    }
    j->depth--;
    return ST_OK;
}

/* ---------------------------------------------------------------- entry points */

static void free_blocks(blk *b) {
    while (b) {
        blk *next = b->next;
        free(b);
        b = next;
    }
}

static char *render(J *j, const char *tmpl, size_t len, const char *const *vars, int n_vars) {
    env *globals = env_new(j, NULL);
    env_set(j, globals, "namespace", 9, v_fn(j, FN_NAMESPACE, NULL, UNDEF, NULL));
    env_set(j, globals, "false", 5, v_bool(0));
    env_set(j, globals, "true", 4, v_bool(1));
    env_set(j, globals, "none", 4, JNULL);
    env_set(j, globals, "raise_exception", 15, v_fn(j, FN_RAISE, NULL, UNDEF, NULL));
    env_set(j, globals, "range", 5, v_fn(j, FN_RANGE, NULL, UNDEF, NULL));
    env_set(j, globals, "strftime_now", 12, v_fn(j, FN_STRFTIME, NULL, UNDEF, NULL));
    env_set(j, globals, "True", 4, v_bool(1));
    env_set(j, globals, "False", 5, v_bool(0));
    env_set(j, globals, "None", 4, JNULL);
    env *user = env_new(j, globals); /* the reference refuses to redeclare a global; here they are shadowed */
    for (int i = 0; i < n_vars; i++) {
        if (!vars[i]) continue;
        jv d = parse_json(j, vars[i]);
        if (d.t != JT_DICT) jfail(j, "variables must be a JSON object");
        for (size_t k = 0; k < D(d)->n; k++) env_set(j, user, D(d)->e[k].k, D(d)->e[k].kn, D(d)->e[k].v);
    }
    src s = preprocess(j, tmpl, len);
    lexer x = {j, &s, 0, NULL, 0, 0};
    lex(&x);
    parser p = {j, x.toks, 0, x.n};
    nlist prog = {0};
    while (!is_t(&p, T_EOF)) nl_push(j, &prog, p_any(&p));
    sb out = {0};
    if (exec_block(j, prog.v, prog.n, user, &out) != ST_OK) jfail(j, "break or continue outside a loop");
    if (out.n > j->out_limit) jfail(j, "output larger than %zu bytes", j->out_limit);
    char *res = malloc(out.n + 1);
    if (!res) jfail(j, "out of memory");
    if (out.n) memcpy(res, out.p, out.n);
    res[out.n] = 0;
    return res;
}

int jinja_render(const char *tmpl, size_t tmpl_len, const char *const *vars_json, int n_vars, const jinja_opts *opts,
                 char **out, char *err, size_t errlen) {
    J *j = calloc(1, sizeof *j);
    if (!j) {
        if (err && errlen) snprintf(err, errlen, "chat template: out of memory");
        return -1;
    }
    j->err = err;
    j->errlen = errlen;
    j->mem_limit = opts && opts->max_memory ? opts->max_memory : (size_t)JINJA_MAX_MEMORY;
    j->out_limit = opts && opts->max_output ? opts->max_output : (size_t)64 << 20;
    j->max_steps = opts && opts->max_steps ? opts->max_steps : 50000000ull;
    j->now = opts ? opts->now : 0;
    *out = NULL;
    volatile int rc = -1;
    if (setjmp(j->jb) == 0) {
        *out = render(j, tmpl, tmpl_len, vars_json, n_vars);
        rc = 0;
    }
    cJSON_Delete(j->json);
    free_blocks(j->blocks);
    free(j);
    return rc;
}

int jinja_json_quote(char **buf, size_t *len, size_t *cap, const char *s, size_t slen) {
    J j;
    memset(&j, 0, sizeof j);
    j.mem_limit = (size_t)1 << 40;
    j.out_limit = (size_t)1 << 40;
    volatile int rc = -1;
    if (setjmp(j.jb) == 0) {
        sb b = {0};
        sb_json_str(&j, &b, s, slen, 0);
        if (*len + b.n + 1 > *cap) {
            size_t nc = (*len + b.n + 1) * 2;
            char *p = realloc(*buf, nc);
            if (!p) longjmp(j.jb, 1);
            *buf = p;
            *cap = nc;
        }
        memcpy(*buf + *len, b.p, b.n);
        *len += b.n;
        (*buf)[*len] = 0;
        rc = 0;
    }
    free_blocks(j.blocks);
    return rc;
}
