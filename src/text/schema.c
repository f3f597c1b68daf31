/*
 * schema.c - a JSON Schema compiled into a GBNF grammar (contract: schema.h).
 *
 * The grammar matches JSON texts, not values: it decides one spelling for each value the schema allows, and
 * every text it matches must be valid under the schema (that is the invariant; tests/schema/check.mjs checks it
 * with a real validator). Conventions:
 *
 *  - Whitespace: `space ::= | " " | "\n"{1,2} [ \t]{0,20}` (llama.cpp's) after every token, none before the
 *    first: the root matches a value, then at most that much whitespace. Values of enum and const keep their
 *    JSON text (cJSON's), with the same whitespace allowed between tokens.
 *  - Objects: declared properties in the schema's order, required ones always, optional ones possibly absent,
 *    a comma exactly between members; then, unless additionalProperties is false, any further members whose
 *    keys are not declared ones (spelled without escapes, so that no spelling of a declared key slips in) with
 *    values of the additionalProperties schema (any value when it is absent or true, as llama.cpp).
 *  - Numbers: integers `-?(0|[1-9][0-9]{0,14})` (at most 15 digits, exact in a double), numbers add a fraction
 *    of at most 16 digits and an exponent of at most 2; a number with bounds has no exponent. Integer bounds are
 *    exact (digit-by-digit ranges); number bounds must be whole numbers.
 *  - Strings: any character but '"', '\\' and controls, or an escape (\uXXXX not a surrogate, so one escape is
 *    one character and minLength/maxLength count as validators do). Patterns (JavaScript regular expressions,
 *    the regular subset) become grammars over the JSON spelling of the string; unanchored ends match anything;
 *    lazy quantifiers are read as greedy ones (a validator's test() matches the same strings). Formats: date
 *    (days per month and leap years exact), time and date-time (RFC 3339, with an offset), uuid.
 *  - Bounds: SCHEMA_MAX_REPEAT for minItems, minLength, prefixItems and {m,n} in patterns (a larger maxItems or
 *    maxLength is lowered to it: fewer texts, all still valid), SCHEMA_MAX_DEPTH nested schemas, the output at
 *    SCHEMA_MAX_OUTPUT, the working memory at MAX_ARENA.
 *  - oneOf is compiled as anyOf: exact only when its branches do not overlap (as llama.cpp). Without `type`, the
 *    types are those whose keywords appear (properties: object, minLength: string...), all of them when none do.
 *
 * Every keyword is either understood, an annotation (ignored: description, title, default, examples, format on
 * non-strings, unknown keywords...), or refused with a message naming it and its place (a JSON pointer). $ref
 * reaches only into this document ("#", "#/$defs/x", any JSON pointer), and $id only at the root.
 *
 * How: the schema becomes a tree of grammar nodes (literal text, class, rule reference, sequence, alternatives,
 * repetition) in rules: root, one per $ref target (so recursive schemas work), and helpers. Then two checks over
 * the rules: every rule can finish (`{"$ref": "#"}`, a `$ref` loop with no way out, is refused) and no rule
 * reaches itself before matching a character (left recursion, as in an anyOf of itself). Then the printer writes the rules, moving groups nested
 * deeper than MAX_PAREN into rules of their own. Nodes live in one arena freed at the end; errors are sticky
 * (the first one is kept, constructors given NULL return NULL).
 */
#include "schema.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INT_DIGITS 15                      /* digits of an integer (part): below 10^15, exact in a double */
#define INT_LIMIT 999999999999999LL
#define FRAC_DIGITS 16
#define MAX_PAREN 12                       /* groups nested in one rule; deeper ones become rules */
#define MAX_ARENA ((size_t)64 << 20)       /* working memory of one compilation */
#define MAX_PROPS 4096                     /* properties and required names of one object */
#define MAX_KEY 1024                       /* bytes of a property name */
#define MAX_REFS 10000                     /* distinct $ref targets */
#define MAX_PATTERN 4096                   /* bytes of a pattern */
#define MAX_REGEX_DEPTH 64                 /* groups nested in a pattern */
#define MAX_WORK 100000000L                /* node visits of the rule checks */

/* ---------------------------------------------------------------- nodes, rules, state */

enum { N_TEXT, N_CLASS, N_REF, N_SEQ, N_ALT, N_REP, N_NONE };

typedef struct node node;
struct node {
    int kind;
    int n;             /* TEXT, CLASS: bytes of text; SEQ, ALT: kids */
    int min, max;      /* REP: counts (max -1: unbounded) */
    int rule;          /* REF */
    const char *text;  /* TEXT: the JSON text to match; CLASS: the class in GBNF syntax */
    node **kid;        /* SEQ, ALT: n kids; REP: kid[0] */
};

/* N_NONE matches nothing (a number range with no member, `()*` made non-empty...); constructors absorb it. */
static node NONE = {N_NONE, 0, 0, 0, 0, NULL, NULL};

typedef struct rule {
    const char *name;
    node *body;                 /* NULL for a primitive */
    int prim;                   /* PRIMS index, or -1 */
    unsigned char nullable, productive;
    const char *where;          /* the schema it comes from (a JSON pointer), for messages */
} rule;

typedef struct ablk {
    struct ablk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} ablk;

typedef struct refmap {
    const cJSON *target;
    int rule;
} refmap;

typedef struct sc {
    const cJSON *doc;
    ablk *arena;
    size_t arena_bytes;
    rule *rules;
    int nr, rcap;
    const char **names;         /* open-addressing set of the rule names taken */
    size_t ncap, nnames;
    refmap *refs;
    int nrefs, refcap;
    int prim_rule[32];          /* rule of each primitive, -1 until used */
    char path[256];             /* JSON pointer of the schema being compiled */
    size_t plen;
    char stem[64];              /* name for rules made there */
    size_t slen;
    int depth;
    int failed;
    char *err;
    size_t errlen;
    char *out;
    size_t olen, ocap;
    int print_rule;             /* the rule being printed (names of hoisted groups) */
    long work;                  /* node visits of the rule checks */
} sc;

static void *fail(sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void *fail(sc *c, const char *fmt, ...) {
    if (c->failed) return NULL;
    c->failed = 1;
    if (c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

/* Where the schema being compiled is, for messages. */
static const char *at(const sc *c) { return c->plen ? c->path : "the root"; }

static void *alloc(sc *c, size_t n) {
    if (c->failed) return NULL;
    n = (n + 15) & ~(size_t)15;
    ablk *b = c->arena;
    if (!b || b->cap - b->used < n) {
        const size_t cap = n > 65536 ? n : 65536;
        if (c->arena_bytes + cap > MAX_ARENA)
            return fail(c, "the schema is too large (its grammar needs over %zu MiB to build)", MAX_ARENA >> 20);
        b = malloc(sizeof *b + cap);
        if (!b) return fail(c, "out of memory");
        b->next = c->arena;
        b->used = 0;
        b->cap = cap;
        c->arena = b;
        c->arena_bytes += cap;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

static char *adup(sc *c, const char *s, size_t n) {
    char *p = alloc(c, n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---- the schema path (a JSON pointer) and the stem of rule names */

static size_t path_push(sc *c, const char *seg) {
    const size_t old = c->plen;
    size_t n = c->plen;
    const size_t room = sizeof c->path - 4;
    if (n < room) c->path[n++] = '/';
    for (const char *s = seg; *s && n < room; s++) {
        if (*s == '~' || *s == '/') {
            c->path[n++] = '~';
            if (n < room) c->path[n++] = *s == '~' ? '0' : '1';
        } else {
            c->path[n++] = *s;
        }
    }
    if (n >= room) memcpy(c->path + room - 3, "...", 3), n = room;
    c->path[n] = 0;
    c->plen = n;
    return old;
}

static size_t path_index(sc *c, const char *key, int i) {
    const size_t old = path_push(c, key);
    char num[16];
    snprintf(num, sizeof num, "%d", i);
    path_push(c, num);
    return old;
}

static void path_pop(sc *c, size_t old) {
    c->plen = old;
    c->path[old] = 0;
}

/* A rule name from any text: [a-zA-Z0-9-], no runs of '-', at most 40 characters, "r" when nothing is left. */
static void sanitize(char *dst, size_t cap, const char *src) {
    size_t n = 0;
    for (const unsigned char *s = (const unsigned char *)src; *s && n + 1 < cap && n < 40; s++) {
        const int word = (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9');
        if (word) dst[n++] = (char)*s;
        else if (n && dst[n - 1] != '-') dst[n++] = '-';
    }
    while (n && dst[n - 1] == '-') n--;
    if (!n) dst[n++] = 'r';
    dst[n] = 0;
}

static size_t stem_push(sc *c, const char *seg) {
    const size_t old = c->slen;
    char s[48];
    sanitize(s, sizeof s, seg);
    if (c->slen + 1 + strlen(s) < 48) c->slen += (size_t)snprintf(c->stem + c->slen, sizeof c->stem - c->slen, "-%s", s);
    return old;
}

static void stem_set(sc *c, const char *name) {
    snprintf(c->stem, sizeof c->stem, "%s", name);
    c->slen = strlen(c->stem);
}

static void stem_pop(sc *c, size_t old) {
    c->slen = old;
    c->stem[old] = 0;
}

/* ---- rule names (a hash set) and rules */

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int name_taken(const sc *c, const char *name) {
    if (!c->ncap) return 0;
    for (size_t i = hash_str(name) & (c->ncap - 1);; i = (i + 1) & (c->ncap - 1)) {
        if (!c->names[i]) return 0;
        if (!strcmp(c->names[i], name)) return 1;
    }
}

static int name_add(sc *c, const char *name) {
    if (2 * (c->nnames + 1) > c->ncap) {
        const size_t cap = c->ncap ? 2 * c->ncap : 256;
        const char **t = calloc(cap, sizeof *t);
        if (!t) return fail(c, "out of memory"), -1;
        for (size_t i = 0; i < c->ncap; i++) {
            if (!c->names[i]) continue;
            size_t j = hash_str(c->names[i]) & (cap - 1);
            while (t[j]) j = (j + 1) & (cap - 1);
            t[j] = c->names[i];
        }
        free(c->names);
        c->names = t;
        c->ncap = cap;
    }
    size_t i = hash_str(name) & (c->ncap - 1);
    while (c->names[i]) i = (i + 1) & (c->ncap - 1);
    c->names[i] = name;
    c->nnames++;
    return 0;
}

/* A new rule (no body yet) named base, or base-N when that is taken (numbered: base-N in any case). -1 on error. */
static int rule_new(sc *c, const char *base, int numbered) {
    if (c->failed) return -1;
    if (c->nr == c->rcap) {
        const int cap = c->rcap ? 2 * c->rcap : 64;
        rule *t = realloc(c->rules, (size_t)cap * sizeof *t);
        if (!t) return fail(c, "out of memory"), -1;
        c->rules = t;
        c->rcap = cap;
    }
    char name[80];
    sanitize(name, sizeof name, base);
    const size_t blen = strlen(name);
    for (int k = numbered ? c->nr : 2; numbered || name_taken(c, name); k++) {
        snprintf(name + blen, sizeof name - blen, "-%d", k);
        numbered = 0;
    }
    char *p = adup(c, name, strlen(name));
    if (!p || name_add(c, p)) return -1;
    rule *r = &c->rules[c->nr];
    memset(r, 0, sizeof *r);
    r->name = p;
    r->prim = -1;
    r->where = adup(c, c->path, c->plen);
    return c->nr++;
}

/* ---- primitives: fixed rules, written out only when used */

enum { P_SPACE, P_CHAR, P_KCHAR, P_STRING, P_VALUE, P_OBJECT, P_ARRAY, P_NUMBER, P_INTEGER, P_BOOLEAN, P_NULL,
       P_DATE, P_LEAP, P_TIME, P_DATETIME, P_UUID, P_COUNT };

#define BIT(p) (1u << (p))
static const struct prim {
    const char *name, *body;
    unsigned deps;
    int nullable;
} PRIMS[P_COUNT] = {
    [P_SPACE] = {"space", "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}", 0, 1},
    [P_CHAR] = {"char", "[^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3}"
                        " | [dD] [0-7] [0-9a-fA-F]{2} ) )", 0, 0},
    [P_KCHAR] = {"kchar", "[^\"\\\\\\x00-\\x1F]", 0, 0},
    [P_STRING] = {"string", "\"\\\"\" char* \"\\\"\" space", BIT(P_CHAR) | BIT(P_SPACE), 0},
    [P_VALUE] = {"value", "object | array | string | number | boolean | null",
                 BIT(P_OBJECT) | BIT(P_ARRAY) | BIT(P_STRING) | BIT(P_NUMBER) | BIT(P_BOOLEAN) | BIT(P_NULL), 0},
    [P_OBJECT] = {"object", "\"{\" space ( string \":\" space value ( \",\" space string \":\" space value )* )? \"}\" space",
                  BIT(P_SPACE) | BIT(P_STRING) | BIT(P_VALUE), 0},
    [P_ARRAY] = {"array", "\"[\" space ( value ( \",\" space value )* )? \"]\" space", BIT(P_SPACE) | BIT(P_VALUE), 0},
    [P_NUMBER] = {"number", "\"-\"? ( \"0\" | [1-9] [0-9]{0,14} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )? space",
                  BIT(P_SPACE), 0},
    [P_INTEGER] = {"integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,14} ) space", BIT(P_SPACE), 0},
    [P_BOOLEAN] = {"boolean", "( \"true\" | \"false\" ) space", BIT(P_SPACE), 0},
    [P_NULL] = {"null", "\"null\" space", BIT(P_SPACE), 0},
    /* days per month, 29 February only in leap years (divisible by 4, not by 100 unless by 400) */
    [P_DATE] = {"date", "[0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )"
                        " | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" )"
                        " | \"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) ) | leap-year \"-02-29\"", BIT(P_LEAP), 0},
    [P_LEAP] = {"leap-year", "[0-9]{2} ( \"0\" [48] | [2468] [048] | [13579] [26] ) | ( [02468] [048] | [13579] [26] ) \"00\"",
                0, 0},
    [P_TIME] = {"time", "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )?"
                        " ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )", 0, 0},
    [P_DATETIME] = {"date-time", "date \"T\" time", BIT(P_DATE) | BIT(P_TIME), 0},
    [P_UUID] = {"uuid", "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}",
                0, 0},
};

static node *mk(sc *c, int kind) {
    node *x = alloc(c, sizeof *x);
    if (!x) return NULL;
    memset(x, 0, sizeof *x);
    x->kind = kind;
    return x;
}

static node *ref(sc *c, int r) {
    node *x = r >= 0 ? mk(c, N_REF) : NULL;
    if (x) x->rule = r;
    return x;
}

/* A reference to primitive p, made (with what it uses) on first use. */
static node *prim(sc *c, int p) {
    if (c->failed) return NULL;
    if (c->prim_rule[p] < 0) {
        if (c->nr == c->rcap) {
            const int cap = c->rcap ? 2 * c->rcap : 64;
            rule *t = realloc(c->rules, (size_t)cap * sizeof *t);
            if (!t) return fail(c, "out of memory");
            c->rules = t;
            c->rcap = cap;
        }
        rule *r = &c->rules[c->nr];
        memset(r, 0, sizeof *r);
        r->name = PRIMS[p].name; /* reserved at the start */
        r->prim = p;
        r->nullable = (unsigned char)PRIMS[p].nullable;
        r->productive = 1;
        r->where = "";
        c->prim_rule[p] = c->nr++;
        for (int d = 0; d < P_COUNT; d++) /* after: value uses object, which uses value */
            if (PRIMS[p].deps & BIT(d) && !prim(c, d)) return NULL;
    }
    return ref(c, c->prim_rule[p]);
}

/* ---- node constructors: NULL in, NULL out; NONE absorbed */

static node *text(sc *c, const char *s, size_t n);

static int is_empty(const node *x) { return x->kind == N_SEQ && x->n == 0; }

static node *empty(sc *c) { return mk(c, N_SEQ); }

/* A sequence of kids[0..n): nested sequences spliced, adjacent texts joined, empty ones dropped. */
static node *seqv(sc *c, int n, node *const *kids) {
    int total = 0;
    for (int i = 0; i < n; i++) {
        if (!kids[i]) return NULL;
        if (kids[i]->kind == N_NONE) return &NONE;
        total += kids[i]->kind == N_SEQ ? kids[i]->n : 1;
    }
    node *x = mk(c, N_SEQ);
    node **v = x ? alloc(c, (size_t)(total ? total : 1) * sizeof *v) : NULL;
    if (!v) return NULL;
    int m = 0;
    for (int i = 0; i < n; i++) {
        const int k = kids[i]->kind == N_SEQ ? kids[i]->n : 1;
        for (int j = 0; j < k; j++) {
            node *y = kids[i]->kind == N_SEQ ? kids[i]->kid[j] : kids[i];
            if (m && y->kind == N_TEXT && v[m - 1]->kind == N_TEXT) {
                char *t = alloc(c, (size_t)v[m - 1]->n + (size_t)y->n + 1);
                if (!t) return NULL;
                memcpy(t, v[m - 1]->text, (size_t)v[m - 1]->n);
                memcpy(t + v[m - 1]->n, y->text, (size_t)y->n);
                node *z = text(c, t, (size_t)v[m - 1]->n + (size_t)y->n);
                if (!z) return NULL;
                v[m - 1] = z;
            } else {
                v[m++] = y;
            }
        }
    }
    if (m == 1) return v[0];
    x->kid = v;
    x->n = m;
    return x;
}

/* Alternatives kids[0..n): nested alternatives spliced, NONE dropped (all NONE: NONE). */
static node *altv(sc *c, int n, node *const *kids) {
    int total = 0;
    for (int i = 0; i < n; i++) {
        if (!kids[i]) return NULL;
        total += kids[i]->kind == N_ALT ? kids[i]->n : kids[i]->kind != N_NONE;
    }
    if (!total) return &NONE;
    node *x = mk(c, N_ALT);
    node **v = x ? alloc(c, (size_t)total * sizeof *v) : NULL;
    if (!v) return NULL;
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (kids[i]->kind == N_ALT) memcpy(v + m, kids[i]->kid, (size_t)kids[i]->n * sizeof *v), m += kids[i]->n;
        else if (kids[i]->kind != N_NONE) v[m++] = kids[i];
    }
    if (m == 1) return v[0];
    x->kid = v;
    x->n = m;
    return x;
}

/* seq(c, n, kids...) and alt(c, n, kids...) for a few kids (at most 8). */
static node *seq(sc *c, int n, ...) {
    node *k[8];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n && i < 8; i++) k[i] = va_arg(ap, node *);
    va_end(ap);
    return seqv(c, n < 8 ? n : 8, k);
}

static node *alt(sc *c, int n, ...) {
    node *k[8];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n && i < 8; i++) k[i] = va_arg(ap, node *);
    va_end(ap);
    return altv(c, n < 8 ? n : 8, k);
}

static node *rep(sc *c, node *k, int min, int max) {
    if (!k) return NULL;
    if (max == 0 || is_empty(k)) return empty(c);
    if (k->kind == N_NONE) return min ? &NONE : empty(c);
    if (min == 1 && max == 1) return k;
    node *x = mk(c, N_REP);
    node **v = x ? alloc(c, sizeof *v) : NULL;
    if (!v) return NULL;
    v[0] = k;
    x->kid = v;
    x->n = 1;
    x->min = min;
    x->max = max;
    return x;
}

static node *opt(sc *c, node *k) { return rep(c, k, 0, 1); }

static node *text(sc *c, const char *s, size_t n) {
    if (!n) return empty(c);
    node *x = mk(c, N_TEXT);
    if (x && !(x->text = adup(c, s, n))) return NULL;
    if (x) x->n = (int)n;
    return x;
}

static node *lit(sc *c, const char *s) { return text(c, s, strlen(s)); }

static node *cls(sc *c, const char *s) {
    node *x = mk(c, N_CLASS);
    if (x && !(x->text = adup(c, s, strlen(s)))) return NULL;
    if (x) x->n = (int)strlen(s);
    return x;
}

/* A growing list of nodes (arena). */
typedef struct nlist {
    node **v;
    int n, cap;
} nlist;

static int nl_add(sc *c, nlist *l, node *x) {
    if (!x) return -1;
    if (l->n == l->cap) {
        const int cap = l->cap ? 2 * l->cap : 8;
        node **t = alloc(c, (size_t)cap * sizeof *t);
        if (!t) return -1;
        if (l->n) memcpy(t, l->v, (size_t)l->n * sizeof *t);
        l->v = t;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

/* x as the body of a new rule named after the stem, and a reference to it (x itself when it is small). */
static node *wrap(sc *c, node *x, const char *suffix) {
    if (!x || x->kind == N_REF || x->kind == N_TEXT || x->kind == N_NONE || is_empty(x)) return x;
    char base[80];
    snprintf(base, sizeof base, "%s%s%s", c->stem, *suffix ? "-" : "", suffix);
    const int r = rule_new(c, base, 0);
    if (r < 0) return NULL;
    c->rules[r].body = x;
    return ref(c, r);
}

/* ---------------------------------------------------------------- text helpers */

/* The code point at s[0..n) into *cp; its length, or 0 when not UTF-8 (or a surrogate). */
static int utf8_next(const unsigned char *s, size_t n, uint32_t *cp) {
    const unsigned char b = s[0];
    const int len = b < 0x80 ? 1 : b >= 0xC2 && b < 0xE0 ? 2 : b >= 0xE0 && b < 0xF0 ? 3 : b >= 0xF0 && b < 0xF5 ? 4 : 0;
    if (!len || (size_t)len > n) return 0;
    uint32_t v = len == 1 ? b : len == 2 ? b & 0x1Fu : len == 3 ? b & 0x0Fu : b & 0x07u;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3Fu);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < least[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

static int utf8_valid(const char *s, size_t n) {
    uint32_t cp;
    for (size_t i = 0; i < n;) {
        const int k = utf8_next((const unsigned char *)s + i, n - i, &cp);
        if (!k) return 0;
        i += (size_t)k;
    }
    return 1;
}

static int utf8_put(char *buf, uint32_t cp) {
    if (cp < 0x80) return buf[0] = (char)cp, 1;
    if (cp < 0x800) return buf[0] = (char)(0xC0 | cp >> 6), buf[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return buf[0] = (char)(0xE0 | cp >> 12), buf[1] = (char)(0x80 | (cp >> 6 & 0x3F)), buf[2] = (char)(0x80 | (cp & 0x3F)), 3;
    buf[0] = (char)(0xF0 | cp >> 18), buf[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    buf[2] = (char)(0x80 | (cp >> 6 & 0x3F)), buf[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Code point cp as it is written inside a JSON string (at most 6 bytes into buf); its length. */
static int json_spell(char *buf, uint32_t cp) {
    static const char shortesc[32] = {['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't'};
    if (cp == '"' || cp == '\\') return buf[0] = '\\', buf[1] = (char)cp, 2;
    if (cp < 0x20 && shortesc[cp]) return buf[0] = '\\', buf[1] = shortesc[cp], 2;
    if (cp < 0x20) return snprintf(buf, 7, "\\u%04x", (unsigned)cp), 6;
    return utf8_put(buf, cp);
}

/* The JSON string literal of UTF-8 text s (arena). */
static node *json_string(sc *c, const char *s) {
    const size_t n = strlen(s);
    char *buf = alloc(c, 6 * n + 3);
    if (!buf) return NULL;
    size_t m = 0;
    buf[m++] = '"';
    uint32_t cp;
    for (size_t i = 0; i < n;) {
        const int k = utf8_next((const unsigned char *)s + i, n - i, &cp);
        if (!k) return fail(c, "a property name at %s is not UTF-8", at(c));
        m += (size_t)json_spell(buf + m, cp);
        i += (size_t)k;
    }
    buf[m++] = '"';
    return text(c, buf, m);
}

/* floor() and ceil() without the math library: numbers of 2^52 and beyond are whole already. */
static double floor_d(double v) {
    if (!(v < 4503599627370496.0 && v > -4503599627370496.0)) return v;
    const double t = (double)(long long)v;
    return t > v ? t - 1 : t;
}

static double ceil_d(double v) { return -floor_d(-v); }

/* ---------------------------------------------------------------- keywords */

enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_NUM = 32, T_INT = 64, T_ALL = 63 };

enum { K_TYPE, K_ENUM, K_CONST, K_ANYOF, K_ONEOF, K_ALLOF, K_REF, K_PROPS, K_REQ, K_ADDL, K_ITEMS, K_PREFIX,
       K_ADDITEMS, K_MINITEMS, K_MAXITEMS, K_MINLEN, K_MAXLEN, K_PATTERN, K_FORMAT, K_MIN, K_MAX, K_XMIN, K_XMAX,
       K_DEFS, K_DEFINITIONS, K_COUNT };

static const struct {
    const char *name;
    int types;   /* the type it constrains (0: any; -1: none, a container of definitions) */
} KW[K_COUNT] = {
    [K_TYPE] = {"type", 0}, [K_ENUM] = {"enum", 0}, [K_CONST] = {"const", 0}, [K_ANYOF] = {"anyOf", 0},
    [K_ONEOF] = {"oneOf", 0}, [K_ALLOF] = {"allOf", 0}, [K_REF] = {"$ref", 0},
    [K_PROPS] = {"properties", T_OBJ}, [K_REQ] = {"required", T_OBJ}, [K_ADDL] = {"additionalProperties", T_OBJ},
    [K_ITEMS] = {"items", T_ARR}, [K_PREFIX] = {"prefixItems", T_ARR}, [K_ADDITEMS] = {"additionalItems", T_ARR},
    [K_MINITEMS] = {"minItems", T_ARR}, [K_MAXITEMS] = {"maxItems", T_ARR},
    [K_MINLEN] = {"minLength", T_STR}, [K_MAXLEN] = {"maxLength", T_STR}, [K_PATTERN] = {"pattern", T_STR},
    [K_FORMAT] = {"format", T_STR},
    [K_MIN] = {"minimum", T_NUM}, [K_MAX] = {"maximum", T_NUM}, [K_XMIN] = {"exclusiveMinimum", T_NUM},
    [K_XMAX] = {"exclusiveMaximum", T_NUM},
    [K_DEFS] = {"$defs", -1}, [K_DEFINITIONS] = {"definitions", -1},
};

/* Keywords that constrain and are not supported (anything else unknown is an annotation). */
static const char *const UNSUPPORTED[] = {
    "patternProperties", "dependentRequired", "dependentSchemas", "dependencies", "not", "if", "then", "else",
    "uniqueItems", "multipleOf", "minProperties", "maxProperties", "contains", "minContains", "maxContains",
    "propertyNames", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef",
};

typedef const cJSON *kwset[K_COUNT];

/* The keywords of schema object s into kw; -1 for an unsupported one (or one given twice). */
static int scan(sc *c, const cJSON *s, kwset kw) {
    memset(kw, 0, sizeof(kwset));
    for (const cJSON *k = s->child; k; k = k->next) {
        int found = 0;
        for (int i = 0; i < K_COUNT && !found; i++) {
            if (strcmp(k->string, KW[i].name)) continue;
            if (kw[i]) return fail(c, "'%s' appears twice at %s", KW[i].name, at(c)), -1;
            kw[i] = k;
            found = 1;
        }
        for (size_t i = 0; i < sizeof UNSUPPORTED / sizeof *UNSUPPORTED && !found; i++) {
            if (strcmp(k->string, UNSUPPORTED[i])) continue;
            const int trivial = (!strcmp(k->string, "uniqueItems") && cJSON_IsFalse(k)) ||
                                (!strcmp(k->string, "minProperties") && cJSON_IsNumber(k) && k->valuedouble == 0);
            if (!trivial) return fail(c, "'%s' at %s is not supported", k->string, at(c)), -1;
            found = 1;
        }
    }
    return 0;
}

/* The first keyword of kw that constrains, other than a and b; -1 if none. */
static int other_keyword(const kwset kw, int a, int b) {
    for (int i = 0; i < K_COUNT; i++)
        if (kw[i] && i != a && i != b && KW[i].types >= 0) return i;
    return -1;
}

static int type_bit(const char *s) {
    static const struct { const char *name; int bit; } T[] = {
        {"null", T_NULL}, {"boolean", T_BOOL}, {"object", T_OBJ}, {"array", T_ARR},
        {"string", T_STR}, {"number", T_NUM}, {"integer", T_INT},
    };
    for (size_t i = 0; i < sizeof T / sizeof *T; i++)
        if (!strcmp(s, T[i].name)) return T[i].bit;
    return 0;
}

/* The types `type` allows; -1 when it is malformed. */
static int read_types(sc *c, const cJSON *t) {
    if (cJSON_IsString(t)) {
        const int b = type_bit(t->valuestring);
        if (!b) return fail(c, "'type' at %s: '%.60s' is not a JSON Schema type", at(c), t->valuestring), -1;
        return b;
    }
    if (!cJSON_IsArray(t) || !t->child) return fail(c, "'type' at %s must be a type name or a non-empty list of them", at(c)), -1;
    int mask = 0;
    for (const cJSON *e = t->child; e; e = e->next) {
        const int b = cJSON_IsString(e) ? type_bit(e->valuestring) : 0;
        if (!b) return fail(c, "'type' at %s holds something that is not a type name", at(c)), -1;
        mask |= b;
    }
    return mask;
}

/* Whether JSON value v has one of the types of mask. */
static int has_type(const cJSON *v, int mask) {
    if (cJSON_IsNull(v)) return mask & T_NULL;
    if (cJSON_IsBool(v)) return mask & T_BOOL;
    if (cJSON_IsString(v)) return mask & T_STR;
    if (cJSON_IsArray(v)) return mask & T_ARR;
    if (cJSON_IsObject(v)) return mask & T_OBJ;
    if (cJSON_IsNumber(v)) return (mask & T_NUM) || ((mask & T_INT) && floor_d(v->valuedouble) == v->valuedouble);
    return 0;
}

/* A count keyword (minItems...): a whole number from 0. Above SCHEMA_MAX_REPEAT: an error for a least count,
 * the limit for a most count (lower). 0, or -1. */
static int read_count(sc *c, const cJSON *k, int is_max, int *out) {
    const double v = cJSON_IsNumber(k) ? k->valuedouble : -1;
    if (!(v >= 0) || floor_d(v) != v || !isfinite(v)) return fail(c, "'%s' at %s must be a whole number from 0", k->string, at(c)), -1;
    if (v > SCHEMA_MAX_REPEAT && !is_max)
        return fail(c, "'%s' %.0f at %s is above the limit of %d", k->string, v, at(c), SCHEMA_MAX_REPEAT), -1;
    *out = v > SCHEMA_MAX_REPEAT ? SCHEMA_MAX_REPEAT : (int)v;
    return 0;
}

/* ---------------------------------------------------------------- compiling schemas */

static node *compile(sc *c, const cJSON *s);

/* compile() of s's member key (a schema), at path key. */
static node *compile_at(sc *c, const cJSON *s, const char *key) {
    const size_t old = path_push(c, key);
    node *x = compile(c, s);
    path_pop(c, old);
    return x;
}

/* ---- $ref */

/* Decode one JSON pointer segment s[0..n) (~0 ~1 and %XX) into buf. -1 when too long. */
static int pointer_segment(const char *s, size_t n, char *buf, size_t cap) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '~' && i + 1 < n && (s[i + 1] == '0' || s[i + 1] == '1')) {
            ch = s[++i] == '0' ? '~' : '/';
        } else if (ch == '%' && i + 2 < n && isxdigit((unsigned char)s[i + 1]) && isxdigit((unsigned char)s[i + 2])) {
            const char hex[3] = {s[i + 1], s[i + 2], 0};
            ch = (char)strtol(hex, NULL, 16);
            i += 2;
        }
        if (m + 1 >= cap) return -1;
        buf[m++] = ch;
    }
    buf[m] = 0;
    return 0;
}

/* The schema that local reference ptr (after '#') points to, and its last segment in last. NULL on error. */
static const cJSON *resolve(sc *c, const char *ref, char *last, size_t cap) {
    const char *p = ref + 1;
    const cJSON *cur = c->doc;
    snprintf(last, cap, "root");
    if (*p && *p != '/') return fail(c, "'$ref' '%.80s' at %s is not supported (only '#' and '#/...' pointers)", ref, at(c));
    while (*p == '/') {
        const char *s = ++p;
        while (*p && *p != '/') p++;
        if (pointer_segment(s, (size_t)(p - s), last, cap)) return fail(c, "'$ref' at %s: a segment is too long", at(c));
        if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, last);
        } else if (cJSON_IsArray(cur)) {
            char *end;
            const long i = strtol(last, &end, 10);
            cur = *last >= '0' && *last <= '9' && !*end && i < INT32_MAX ? cJSON_GetArrayItem(cur, (int)i) : NULL;
        } else {
            cur = NULL;
        }
        if (!cur) return fail(c, "'$ref' '%.80s' at %s points to nothing", ref, at(c));
    }
    return cur;
}

static node *c_ref(sc *c, const cJSON *r) {
    if (!cJSON_IsString(r)) return fail(c, "'$ref' at %s must be a string", at(c));
    if (r->valuestring[0] != '#')
        return fail(c, "'$ref' '%.80s' at %s is not supported (only references into this schema, '#/...')", r->valuestring, at(c));
    char last[256];
    const cJSON *t = resolve(c, r->valuestring, last, sizeof last);
    if (!t) return NULL;
    for (int i = 0; i < c->nrefs; i++)
        if (c->refs[i].target == t) return ref(c, c->refs[i].rule);
    if (c->nrefs == MAX_REFS) return fail(c, "more than %d '$ref' targets", MAX_REFS);
    if (c->nrefs == c->refcap) {
        const int cap = c->refcap ? 2 * c->refcap : 16;
        refmap *m = realloc(c->refs, (size_t)cap * sizeof *m);
        if (!m) return fail(c, "out of memory");
        c->refs = m;
        c->refcap = cap;
    }
    /* compile the target as its own rule, at its own path; references to it meanwhile (recursion) find the rule */
    char path[sizeof c->path], stem[sizeof c->stem];
    const size_t plen = c->plen, slen = c->slen;
    memcpy(path, c->path, sizeof path);
    memcpy(stem, c->stem, sizeof stem);
    snprintf(c->path, sizeof c->path, "%s", r->valuestring + 1);
    c->plen = strlen(c->path);
    const int id = rule_new(c, last, 0);
    if (id < 0) return NULL;
    c->refs[c->nrefs].target = t;
    c->refs[c->nrefs].rule = id;
    c->nrefs++;
    stem_set(c, c->rules[id].name);
    node *body = compile(c, t);
    memcpy(c->path, path, sizeof path);
    memcpy(c->stem, stem, sizeof stem);
    c->plen = plen;
    c->slen = slen;
    if (!body) return NULL;
    c->rules[id].body = body;
    return ref(c, id);
}

/* ---- enum, const */

/* A JSON value of an enum or const, its members and items with whitespace between tokens (as elsewhere). */
static node *enum_value(sc *c, const cJSON *v) {
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) {
        const int obj = cJSON_IsObject(v);
        nlist l = {0};
        if (nl_add(c, &l, lit(c, obj ? "{" : "[")) || nl_add(c, &l, prim(c, P_SPACE))) return NULL;
        for (const cJSON *k = v->child; k; k = k->next) {
            if (k != v->child && (nl_add(c, &l, lit(c, ",")) || nl_add(c, &l, prim(c, P_SPACE)))) return NULL;
            if (obj && nl_add(c, &l, seq(c, 4, json_string(c, k->string), prim(c, P_SPACE), lit(c, ":"), prim(c, P_SPACE)))) return NULL;
            if (nl_add(c, &l, enum_value(c, k)) || nl_add(c, &l, prim(c, P_SPACE))) return NULL;
        }
        if (nl_add(c, &l, lit(c, obj ? "}" : "]"))) return NULL;
        return seqv(c, l.n, l.v);
    }
    if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) return fail(c, "'enum' or 'const' at %s holds a number beyond a double", at(c));
    char *s = cJSON_PrintUnformatted(v);
    if (!s) return fail(c, "out of memory");
    node *x = utf8_valid(s, strlen(s)) ? lit(c, s) : fail(c, "'enum' or 'const' at %s holds text that is not UTF-8", at(c));
    free(s);
    return x;
}

static node *c_enum(sc *c, const kwset kw) {
    const int k = kw[K_ENUM] ? K_ENUM : K_CONST, other = other_keyword(kw, k, K_TYPE);
    if (other >= 0) return fail(c, "'%s' together with '%s' at %s is not supported", KW[other].name, KW[k].name, at(c));
    const int mask = kw[K_TYPE] ? read_types(c, kw[K_TYPE]) : T_ALL;
    if (mask < 0) return NULL;
    nlist alts = {0};
    if (k == K_CONST) {
        if (has_type(kw[K_CONST], mask) && nl_add(c, &alts, enum_value(c, kw[K_CONST]))) return NULL;
    } else {
        if (!cJSON_IsArray(kw[K_ENUM])) return fail(c, "'enum' at %s must be a list", at(c));
        for (const cJSON *v = kw[K_ENUM]->child; v; v = v->next)
            if (has_type(v, mask) && nl_add(c, &alts, enum_value(c, v))) return NULL;
    }
    if (!alts.n) return fail(c, "'%s' at %s allows no value (none of its 'type')", KW[k].name, at(c));
    return seq(c, 2, altv(c, alts.n, alts.v), prim(c, P_SPACE));
}

/* ---- objects */

/* Keys that are not any of names[0..n) (those spelled with escapes cannot collide: keys here have none). A trie
 * of the names, a rule per node: a character no name continues with, then anything; or the next character of
 * some names; or the end, where no name ends. */
typedef struct tnode {
    uint32_t cp;
    int terminal;
    struct tnode *kid, *next;
} tnode;

static node *trie_rule(sc *c, const tnode *t, const char *base) {
    nlist alts = {0};
    size_t nk = 0, m = 0;
    for (const tnode *k = t->kid; k; k = k->next) nk++;
    char *cl = alloc(c, nk * 12 + 32); /* the class of characters no name continues with */
    if (!cl) return NULL;
    m += (size_t)snprintf(cl, 3, "[^");
    for (const tnode *k = t->kid; k; k = k->next) {
        m += (size_t)snprintf(cl + m, 12, k->cp < 0x10000 ? "\\u%04X" : "\\U%08X", (unsigned)k->cp);
        char u[4];
        const int n = utf8_put(u, k->cp);
        if (nl_add(c, &alts, seq(c, 2, text(c, u, (size_t)n), trie_rule(c, k, base)))) return NULL;
    }
    snprintf(cl + m, 32, "\"\\\\\\x00-\\x1F]");
    if (nl_add(c, &alts, seq(c, 2, cls(c, cl), rep(c, prim(c, P_KCHAR), 0, -1)))) return NULL;
    node *body = altv(c, alts.n, alts.v);
    if (!t->terminal) body = opt(c, body);
    const int r = rule_new(c, base, 1);
    if (r < 0 || !body) return NULL;
    c->rules[r].body = body;
    return ref(c, r);
}

static node *key_except(sc *c, const char *const *names, int n) {
    tnode *root = alloc(c, sizeof *root);
    if (!root) return NULL;
    memset(root, 0, sizeof *root);
    for (int i = 0; i < n; i++) {
        const char *s = names[i];
        const size_t len = strlen(s);
        int plain = utf8_valid(s, len);
        for (size_t j = 0; j < len && plain; j++) plain = s[j] != '"' && s[j] != '\\' && (unsigned char)s[j] >= 0x20;
        if (!plain) continue;
        tnode *t = root;
        uint32_t cp;
        for (size_t j = 0; j < len;) {
            j += (size_t)utf8_next((const unsigned char *)s + j, len - j, &cp);
            tnode *k = t->kid;
            while (k && k->cp != cp) k = k->next;
            if (!k) {
                if (!(k = alloc(c, sizeof *k))) return NULL;
                memset(k, 0, sizeof *k);
                k->cp = cp;
                k->next = t->kid;
                t->kid = k;
            }
            t = k;
        }
        t->terminal = 1;
    }
    char base[80];
    snprintf(base, sizeof base, "%s-key", c->stem);
    return seq(c, 4, lit(c, "\""), trie_rule(c, root, base), lit(c, "\""), prim(c, P_SPACE));
}

static int in_names(const char *const *names, int n, const char *s) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], s)) return 1;
    return 0;
}

/* A member: key (with the space after it), ':', value. */
static node *kv(sc *c, node *key, node *value) { return seq(c, 4, key, lit(c, ":"), prim(c, P_SPACE), value); }

static node *comma(sc *c, node *x) { return seq(c, 3, lit(c, ","), prim(c, P_SPACE), x); }

/* The members of an object (between the braces): kvs[0..k) in order, required where req[i], a comma exactly
 * between two; then extra members (NULL: none). rest(m), what may follow member m-1 once something came before,
 * is ", kv_m" (optional unless required) for each m on, then the extras; a rule each, so that the alternatives for
 * the first member present (any optional one up to the first required) share them. */
static node *members(sc *c, node *const *kvs, const int *req, int k, node *extra) {
    node *tail = extra ? rep(c, comma(c, extra), 0, -1) : empty(c);
    int j0 = 0;
    while (j0 < k && !req[j0]) j0++;
    if (k == 0) return extra ? opt(c, seq(c, 2, extra, tail)) : empty(c);
    const int top = j0 < k ? j0 + 1 : k;
    node **rest = alloc(c, (size_t)(k + 1) * sizeof *rest);
    nlist l = {0}, alts = {0};
    if (!rest) return NULL;
    for (int m = top; m < k; m++)
        if (nl_add(c, &l, req[m] ? comma(c, kvs[m]) : opt(c, comma(c, kvs[m])))) return NULL;
    if (nl_add(c, &l, tail)) return NULL;
    if (j0 == 0) return seq(c, 2, kvs[0], seqv(c, l.n, l.v));
    rest[top] = wrap(c, seqv(c, l.n, l.v), "rest");
    for (int m = top - 1; m >= 1; m--)
        rest[m] = wrap(c, seq(c, 2, req[m] ? comma(c, kvs[m]) : opt(c, comma(c, kvs[m])), rest[m + 1]), "rest");
    for (int i = 0; i < j0; i++)
        if (nl_add(c, &alts, seq(c, 2, kvs[i], rest[i + 1]))) return NULL;
    if (j0 < k && nl_add(c, &alts, seq(c, 2, kvs[j0], rest[j0 + 1]))) return NULL;
    if (j0 == k && extra && nl_add(c, &alts, seq(c, 2, extra, tail))) return NULL;
    node *content = altv(c, alts.n, alts.v);
    return j0 == k ? opt(c, content) : content;
}

/* An object: props (object or NULL), required (list of names or NULL), additionalProperties (NULL, bool, schema). */
static node *c_object(sc *c, const cJSON *props, const cJSON *req, const cJSON *addl) {
    if (props && !cJSON_IsObject(props)) return fail(c, "'properties' at %s must be an object", at(c));
    if (req && !cJSON_IsArray(req)) return fail(c, "'required' at %s must be a list of names", at(c));
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl))
        return fail(c, "'additionalProperties' at %s must be a boolean or a schema", at(c));
    const int np = cJSON_GetArraySize(props), nq = cJSON_GetArraySize(req);
    if (!np && !nq && (!addl || cJSON_IsTrue(addl))) return prim(c, P_OBJECT);
    if (np > MAX_PROPS || nq > MAX_PROPS) return fail(c, "more than %d properties at %s", MAX_PROPS, at(c));
    const char **reqs = alloc(c, (size_t)(nq + 1) * sizeof *reqs), **names = alloc(c, (size_t)(np + nq + 1) * sizeof *names);
    node **kvs = alloc(c, (size_t)(np + nq + 1) * sizeof *kvs);
    int *isreq = alloc(c, (size_t)(np + nq + 1) * sizeof *isreq);
    if (!reqs || !names || !kvs || !isreq) return NULL;
    int nr = 0, nn = 0, k = 0;
    for (const cJSON *q = req ? req->child : NULL; q; q = q->next) {
        if (!cJSON_IsString(q)) return fail(c, "'required' at %s must be a list of names", at(c));
        if (!in_names(reqs, nr, q->valuestring)) reqs[nr++] = q->valuestring;
    }
    /* the declared members in order, then required names not declared */
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
        if (strlen(p->string) > MAX_KEY) return fail(c, "a property name at %s is longer than %d bytes", at(c), MAX_KEY);
        if (in_names(names, nn, p->string)) return fail(c, "property '%.60s' at %s is declared twice", p->string, at(c));
        names[nn++] = p->string;
        const int required = in_names(reqs, nr, p->string);
        if (cJSON_IsFalse(p)) {
            if (required) return fail(c, "required property '%.60s' at %s has the schema false", p->string, at(c));
            continue;
        }
        const size_t po = path_push(c, "properties"), so = stem_push(c, p->string);
        node *v = wrap(c, compile_at(c, p, p->string), "");
        path_pop(c, po);
        stem_pop(c, so);
        isreq[k] = required;
        if (!(kvs[k++] = kv(c, seq(c, 2, json_string(c, p->string), prim(c, P_SPACE)), v))) return NULL;
    }
    for (int i = 0; i < nr; i++) {
        if (in_names(names, nn, reqs[i])) continue;
        if (strlen(reqs[i]) > MAX_KEY) return fail(c, "a property name at %s is longer than %d bytes", at(c), MAX_KEY);
        if (cJSON_IsFalse(addl))
            return fail(c, "required property '%.60s' at %s is not in 'properties' and 'additionalProperties' is false", reqs[i], at(c));
        const size_t so = stem_push(c, reqs[i]);
        node *v = cJSON_IsObject(addl) ? wrap(c, compile_at(c, addl, "additionalProperties"), "") : prim(c, P_VALUE);
        stem_pop(c, so);
        names[nn++] = reqs[i];
        isreq[k] = 1;
        if (!(kvs[k++] = kv(c, seq(c, 2, json_string(c, reqs[i]), prim(c, P_SPACE)), v))) return NULL;
    }
    node *extra = NULL;
    if (!cJSON_IsFalse(addl)) {
        const size_t so = stem_push(c, "extra");
        node *v = cJSON_IsObject(addl) ? wrap(c, compile_at(c, addl, "additionalProperties"), "") : prim(c, P_VALUE);
        node *key = nn ? key_except(c, names, nn) : prim(c, P_STRING);
        extra = wrap(c, kv(c, key, v), "kv");
        stem_pop(c, so);
        if (!extra) return NULL;
    }
    return seq(c, 5, lit(c, "{"), prim(c, P_SPACE), members(c, kvs, isreq, k, extra), lit(c, "}"), prim(c, P_SPACE));
}

/* ---- arrays */

static node *c_array(sc *c, const kwset kw) {
    const cJSON *items = kw[K_ITEMS], *tuple = kw[K_PREFIX], *rest = items;
    const char *tuple_key = "prefixItems", *rest_key = "items";
    if (cJSON_IsArray(items)) { /* draft 4 to 7: a list in items is a tuple, additionalItems the rest */
        if (tuple) return fail(c, "'prefixItems' together with a list in 'items' at %s is not supported", at(c));
        tuple = items, tuple_key = "items", rest = kw[K_ADDITEMS], rest_key = "additionalItems";
    }
    if (tuple && !cJSON_IsArray(tuple)) return fail(c, "'prefixItems' at %s must be a list of schemas", at(c));
    if (rest && !cJSON_IsBool(rest) && !cJSON_IsObject(rest)) return fail(c, "'%s' at %s must be a schema", rest_key, at(c));
    int lo = 0, hi = -1;
    if (kw[K_MINITEMS] && read_count(c, kw[K_MINITEMS], 0, &lo)) return NULL;
    if (kw[K_MAXITEMS] && read_count(c, kw[K_MAXITEMS], 1, &hi)) return NULL;
    const int k = cJSON_GetArraySize(tuple);
    if (k > SCHEMA_MAX_REPEAT) return fail(c, "'%s' at %s has more than %d schemas", tuple_key, at(c), SCHEMA_MAX_REPEAT);
    if (!k && (!rest || cJSON_IsTrue(rest)) && !lo && hi < 0) return prim(c, P_ARRAY);
    int j = 0;
    for (const cJSON *t = tuple ? tuple->child : NULL; t; t = t->next, j++)
        if (cJSON_IsFalse(t) && (hi < 0 || hi > j)) hi = j; /* no item at j, so none after */
    if (cJSON_IsFalse(rest) && (hi < 0 || hi > k)) hi = k;
    if (hi >= 0 && lo > hi) return fail(c, "'minItems' %d at %s is above the most items allowed (%d)", lo, at(c), hi);
    const int kk = hi >= 0 && hi < k ? hi : k; /* tuple positions that can be filled */
    node *item = NULL, *inner;
    if (hi < 0 || hi > kk) {
        const size_t so = stem_push(c, "item");
        item = wrap(c, rest ? compile_at(c, rest, rest_key) : prim(c, P_VALUE), "");
        stem_pop(c, so);
        if (!item) return NULL;
    }
    if (!item) {
        inner = empty(c);
    } else if (kk == 0) {
        inner = seq(c, 2, item, rep(c, comma(c, item), lo > 1 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1));
        if (lo == 0) inner = opt(c, inner);
    } else {
        inner = rep(c, comma(c, item), lo > kk ? lo - kk : 0, hi < 0 ? -1 : hi - kk);
    }
    node **pv = alloc(c, (size_t)(kk + 1) * sizeof *pv);
    if (!pv) return NULL;
    j = 0;
    for (const cJSON *t = tuple ? tuple->child : NULL; t && j < kk; t = t->next, j++) {
        char num[16];
        snprintf(num, sizeof num, "%d", j);
        const size_t po = path_push(c, tuple_key), so = stem_push(c, num);
        pv[j] = wrap(c, compile_at(c, t, num), "");
        path_pop(c, po);
        stem_pop(c, so);
        if (!pv[j]) return NULL;
    }
    for (j = kk - 1; j >= 0; j--) {
        inner = seq(c, 2, j ? comma(c, pv[j]) : pv[0], inner);
        if (j >= lo) inner = opt(c, inner);
    }
    return seq(c, 5, lit(c, "["), prim(c, P_SPACE), inner, lit(c, "]"), prim(c, P_SPACE));
}

/* ---- numbers */

static const long long P10[17] = {1LL, 10LL, 100LL, 1000LL, 10000LL, 100000LL, 1000000LL, 10000000LL, 100000000LL,
                                  1000000000LL, 10000000000LL, 100000000000LL, 1000000000000LL, 10000000000000LL,
                                  100000000000000LL, 1000000000000000LL, 10000000000000000LL};

static int ndigits(long long v) {
    int n = 1;
    while (n < 16 && v >= P10[n]) n++;
    return n;
}

static node *digit_class(sc *c, char a, char b) {
    if (a == b) return text(c, &a, 1);
    char s[8] = {'[', a, '-', b, ']', 0};
    return cls(c, s);
}

/* The n-digit texts from x to y (same length, x <= y, leading zeros as digits): a digit at a time. */
static node *digits_range(sc *c, const char *x, const char *y, int n) {
    static const char zeros[] = "0000000000000000", nines[] = "9999999999999999";
    if (n == 1) return digit_class(c, x[0], y[0]);
    if (x[0] == y[0]) return seq(c, 2, text(c, x, 1), digits_range(c, x + 1, y + 1, n - 1));
    const int lo_full = !memcmp(x + 1, zeros, (size_t)n - 1), hi_full = !memcmp(y + 1, nines, (size_t)n - 1);
    const char first = lo_full ? x[0] : (char)(x[0] + 1), last = hi_full ? y[0] : (char)(y[0] - 1);
    nlist alts = {0};
    if (!lo_full && nl_add(c, &alts, seq(c, 2, text(c, x, 1), digits_range(c, x + 1, nines, n - 1)))) return NULL;
    if (first <= last && nl_add(c, &alts, seq(c, 2, digit_class(c, first, last), rep(c, cls(c, "[0-9]"), n - 1, n - 1))))
        return NULL;
    if (!hi_full && nl_add(c, &alts, seq(c, 2, text(c, y, 1), digits_range(c, zeros, y + 1, n - 1)))) return NULL;
    return altv(c, alts.n, alts.v);
}

/* The decimal texts (no leading zeros) of a..b, 0 <= a <= b < 10^16: one alternative per length, lengths whose
 * every number is in range joined as [1-9][0-9]{m,n}. */
static node *nn_range(sc *c, long long a, long long b) {
    nlist alts = {0};
    int run_from = 0, run_to = 0;
    for (int len = ndigits(a); len <= ndigits(b); len++) {
        const long long lo = len == 1 || a > P10[len - 1] ? a : P10[len - 1], hi = b < P10[len] - 1 ? b : P10[len] - 1;
        if (len > 1 && lo == P10[len - 1] && hi == P10[len] - 1) {
            if (!run_from) run_from = len;
            run_to = len;
            continue;
        }
        char x[24], y[24];
        snprintf(x, sizeof x, "%0*lld", len, lo);
        snprintf(y, sizeof y, "%0*lld", len, hi);
        if (nl_add(c, &alts, digits_range(c, x, y, len))) return NULL;
    }
    if (run_from && nl_add(c, &alts, seq(c, 2, cls(c, "[1-9]"), rep(c, cls(c, "[0-9]"), run_from - 1, run_to - 1)))) return NULL;
    return altv(c, alts.n, alts.v);
}

/* The integers lo..hi (lo <= hi, both within INT_LIMIT) as JSON texts. */
static node *int_range(sc *c, long long lo, long long hi) {
    nlist alts = {0};
    if (lo < 0 && nl_add(c, &alts, seq(c, 2, lit(c, "-"), nn_range(c, hi < 0 ? -hi : 1, -lo)))) return NULL;
    if (hi >= 0 && nl_add(c, &alts, nn_range(c, lo > 0 ? lo : 0, hi))) return NULL;
    return altv(c, alts.n, alts.v);
}

static node *int_lit(sc *c, long long v) {
    char s[24];
    snprintf(s, sizeof s, "%lld", v);
    return lit(c, s);
}

/* Magnitudes m (texts I or I.F, no sign) with a <= m (a < m unless a_incl) and, when has_b, m <= b (m < b unless
 * b_incl); a, b whole. NONE when there is none. */
static node *magnitude(sc *c, long long a, int a_incl, int has_b, long long b, int b_incl) {
    if (has_b && (a > b || (a == b && !(a_incl && b_incl)))) return &NONE;
    node *frac = seq(c, 2, lit(c, "."), rep(c, cls(c, "[0-9]"), 1, FRAC_DIGITS));
    node *zeros = seq(c, 2, lit(c, "."), rep(c, lit(c, "0"), 1, FRAC_DIGITS));
    if (has_b && a == b) return seq(c, 2, int_lit(c, a), opt(c, zeros));
    nlist alts = {0};
    const long long lo = a_incl ? a : a + 1, hi = has_b ? b - 1 : INT_LIMIT;
    if (lo <= hi && nl_add(c, &alts, seq(c, 2, int_range(c, lo, hi), opt(c, frac)))) return NULL;
    if (!a_incl && nl_add(c, &alts, seq(c, 5, int_lit(c, a), lit(c, "."), rep(c, lit(c, "0"), 0, FRAC_DIGITS - 1),
                                        cls(c, "[1-9]"), rep(c, cls(c, "[0-9]"), 0, FRAC_DIGITS - 1))))
        return NULL;
    if (has_b && b_incl && nl_add(c, &alts, seq(c, 2, int_lit(c, b), opt(c, zeros)))) return NULL;
    return altv(c, alts.n, alts.v);
}

typedef struct bound {
    int set, incl, kw;
    double v;
} bound;

/* minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, or draft 4's booleans) as two bounds. */
static int read_bounds(sc *c, const kwset kw, bound *lo, bound *hi) {
    static const int order[4] = {K_MIN, K_XMIN, K_MAX, K_XMAX};
    memset(lo, 0, sizeof *lo);
    memset(hi, 0, sizeof *hi);
    for (int i = 0; i < 4; i++) {
        const int k = order[i];
        const cJSON *v = kw[k];
        if (!v || ((k == K_XMIN || k == K_XMAX) && cJSON_IsBool(v))) continue;
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return fail(c, "'%s' at %s must be a finite number", KW[k].name, at(c)), -1;
        const int is_lo = k == K_MIN || k == K_XMIN;
        const int excl = k == K_XMIN || k == K_XMAX || (k == K_MIN && cJSON_IsTrue(kw[K_XMIN])) || (k == K_MAX && cJSON_IsTrue(kw[K_XMAX]));
        bound *b = is_lo ? lo : hi;
        const double x = v->valuedouble;
        if (!b->set || (is_lo ? x > b->v : x < b->v) || (x == b->v && excl)) b->set = 1, b->v = x, b->incl = !excl, b->kw = k;
    }
    return 0;
}

static node *c_number(sc *c, const kwset kw, int integer) {
    bound lo, hi;
    if (read_bounds(c, kw, &lo, &hi)) return NULL;
    if (!lo.set && !hi.set) return prim(c, integer ? P_INTEGER : P_NUMBER);
    if (lo.set && (lo.incl ? ceil_d(lo.v) : floor_d(lo.v) + 1) > INT_LIMIT)
        return fail(c, "'%s' %g at %s is beyond the %d digits numbers may have", KW[lo.kw].name, lo.v, at(c), INT_DIGITS);
    if (hi.set && (hi.incl ? floor_d(hi.v) : ceil_d(hi.v) - 1) < -INT_LIMIT)
        return fail(c, "'%s' %g at %s is beyond the %d digits numbers may have", KW[hi.kw].name, hi.v, at(c), INT_DIGITS);
    if (integer) {
        double a = -INT_LIMIT, b = INT_LIMIT;
        if (lo.set && (lo.incl ? ceil_d(lo.v) : floor_d(lo.v) + 1) > a) a = lo.incl ? ceil_d(lo.v) : floor_d(lo.v) + 1;
        if (hi.set && (hi.incl ? floor_d(hi.v) : ceil_d(hi.v) - 1) < b) b = hi.incl ? floor_d(hi.v) : ceil_d(hi.v) - 1;
        if (a > b) return fail(c, "no integer is within the bounds at %s", at(c));
        return seq(c, 2, int_range(c, (long long)a, (long long)b), prim(c, P_SPACE));
    }
    const bound *bs[2] = {&lo, &hi};
    for (int i = 0; i < 2; i++)
        if (bs[i]->set && floor_d(bs[i]->v) != bs[i]->v)
            return fail(c, "'%s' %g at %s is not supported (bounds of numbers must be whole numbers)", KW[bs[i]->kw].name, bs[i]->v, at(c));
    if (lo.set && lo.v < -INT_LIMIT) lo.set = 0, lo.v = 0; /* the digits allowed are within it anyway */
    if (hi.set && hi.v > INT_LIMIT) hi.set = 0, hi.v = 0;
    nlist alts = {0};
    if (!hi.set || hi.v >= 0) { /* no sign: magnitudes from the lower bound or 0 */
        const int pos = lo.set && lo.v >= 0;
        if (nl_add(c, &alts, magnitude(c, pos ? (long long)lo.v : 0, pos ? lo.incl : 1, hi.set, (long long)hi.v, hi.incl))) return NULL;
    }
    if (!lo.set || lo.v < 0) { /* '-' and a magnitude above 0 (no "-0") */
        const int neg = hi.set && hi.v < 0;
        node *m = magnitude(c, neg ? -(long long)hi.v : 0, neg ? hi.incl : 0, lo.set, -(long long)lo.v, lo.incl);
        if (nl_add(c, &alts, seq(c, 2, lit(c, "-"), m))) return NULL;
    }
    node *x = altv(c, alts.n, alts.v);
    if (x && x->kind == N_NONE) return fail(c, "no number is within the bounds at %s", at(c));
    return seq(c, 2, x, prim(c, P_SPACE));
}

/* ---------------------------------------------------------------- nullable, productive */

static int node_nullable(sc *c, const node *x) {
    c->work++;
    switch (x->kind) {
    case N_TEXT: return x->n == 0;
    case N_REF: return c->rules[x->rule].nullable;
    case N_SEQ:
        for (int i = 0; i < x->n; i++)
            if (!node_nullable(c, x->kid[i])) return 0;
        return 1;
    case N_ALT:
        for (int i = 0; i < x->n; i++)
            if (node_nullable(c, x->kid[i])) return 1;
        return 0;
    case N_REP: return x->min == 0 || node_nullable(c, x->kid[0]);
    default: return 0;
    }
}

/* Whether x matches some finite text, given what is known of the rules. */
static int node_productive(sc *c, const node *x) {
    c->work++;
    switch (x->kind) {
    case N_TEXT: case N_CLASS: return 1;
    case N_REF: return c->rules[x->rule].productive;
    case N_SEQ:
        for (int i = 0; i < x->n; i++)
            if (!node_productive(c, x->kid[i])) return 0;
        return 1;
    case N_ALT:
        for (int i = 0; i < x->n; i++)
            if (node_productive(c, x->kid[i])) return 1;
        return 0;
    case N_REP: return x->min == 0 || node_productive(c, x->kid[0]);
    default: return 0;
    }
}

/* ---------------------------------------------------------------- strings and patterns */

/* Sets of code points: sorted, disjoint ranges once normalized (arena). */
typedef struct cset {
    uint32_t (*r)[2];
    int n, cap;
} cset;

static int cs_add(sc *c, cset *s, uint32_t lo, uint32_t hi) {
    if (s->n == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 8;
        uint32_t (*t)[2] = alloc(c, (size_t)cap * sizeof *t);
        if (!t) return -1;
        if (s->n) memcpy(t, s->r, (size_t)s->n * sizeof *t);
        s->r = t;
        s->cap = cap;
    }
    s->r[s->n][0] = lo;
    s->r[s->n][1] = hi;
    s->n++;
    return 0;
}

static int cs_addset(sc *c, cset *s, const cset *t) {
    for (int i = 0; i < t->n; i++)
        if (cs_add(c, s, t->r[i][0], t->r[i][1])) return -1;
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void cs_norm(cset *s) {
    if (!s->n) return;
    qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_range);
    int m = 0;
    for (int i = 1; i < s->n; i++) {
        if (s->r[i][0] <= s->r[m][1] + 1) {
            if (s->r[i][1] > s->r[m][1]) s->r[m][1] = s->r[i][1];
        } else {
            m++;
            s->r[m][0] = s->r[i][0];
            s->r[m][1] = s->r[i][1];
        }
    }
    s->n = m + 1;
}

/* The code points (to U+10FFFF) not in normalized s. */
static int cs_invert(sc *c, const cset *s, cset *out) {
    memset(out, 0, sizeof *out);
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i][0] > next && cs_add(c, out, next, s->r[i][0] - 1)) return -1;
        next = s->r[i][1] + 1;
    }
    if (next <= 0x10FFFF && cs_add(c, out, next, 0x10FFFF)) return -1;
    return 0;
}

static int cs_and(sc *c, const cset *a, const cset *b, cset *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0, j = 0; i < a->n && j < b->n;) {
        const uint32_t lo = a->r[i][0] > b->r[j][0] ? a->r[i][0] : b->r[j][0];
        const uint32_t hi = a->r[i][1] < b->r[j][1] ? a->r[i][1] : b->r[j][1];
        if (lo <= hi && cs_add(c, out, lo, hi)) return -1;
        if (a->r[i][1] < b->r[j][1]) i++;
        else j++;
    }
    return 0;
}

static int cs_has(const cset *s, uint32_t cp) {
    for (int i = 0; i < s->n; i++)
        if (cp >= s->r[i][0] && cp <= s->r[i][1]) return 1;
    return 0;
}

static void class_cp(char *buf, size_t cap, uint32_t cp) {
    if ((cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) snprintf(buf, cap, "%c", (char)cp);
    else if (cp < 0x100) snprintf(buf, cap, "\\x%02X", (unsigned)cp);
    else if (cp < 0x10000) snprintf(buf, cap, "\\u%04X", (unsigned)cp);
    else snprintf(buf, cap, "\\U%08X", (unsigned)cp);
}

/* A GBNF class for non-empty normalized s: [...] or [^...], whichever is shorter. */
static const char *class_text(sc *c, const cset *s) {
    cset inv;
    if (cs_invert(c, s, &inv)) return NULL;
    const int neg = inv.n < s->n;
    const cset *t = neg ? &inv : s;
    char *buf = alloc(c, (size_t)t->n * 24 + 8);
    if (!buf) return NULL;
    size_t m = 0;
    buf[m++] = '[';
    if (neg) buf[m++] = '^';
    for (int i = 0; i < t->n; i++) {
        class_cp(buf + m, 12, t->r[i][0]);
        m += strlen(buf + m);
        if (t->r[i][1] > t->r[i][0]) {
            buf[m++] = '-';
            class_cp(buf + m, 12, t->r[i][1]);
            m += strlen(buf + m);
        }
    }
    buf[m++] = ']';
    buf[m] = 0;
    return buf;
}

/* The JSON spellings (inside a string) of the characters of set: plain characters, \" and \\, and controls as
 * \b \t \n \f \r or \u00XX. Surrogates are left out (no UTF-8 text holds one); NONE when nothing is left. */
static node *json_chars(sc *c, cset *set) {
    static const char shortesc[32] = {['\b'] = 'b', ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't'};
    cset spec = {0}, ok, raw;
    if (cs_add(c, &spec, 0, 0x1F) || cs_add(c, &spec, '"', '"') || cs_add(c, &spec, '\\', '\\') || cs_add(c, &spec, 0xD800, 0xDFFF))
        return NULL;
    cs_norm(&spec);
    cs_norm(set);
    if (cs_invert(c, &spec, &ok) || cs_and(c, set, &ok, &raw)) return NULL;
    nlist alts = {0};
    char buf[24];
    if (raw.n == 1 && raw.r[0][0] == raw.r[0][1]) {
        if (nl_add(c, &alts, text(c, buf, (size_t)utf8_put(buf, raw.r[0][0])))) return NULL;
    } else if (raw.n && nl_add(c, &alts, cls(c, class_text(c, &raw)))) {
        return NULL;
    }
    if (cs_has(set, '"') && nl_add(c, &alts, lit(c, "\\\""))) return NULL;
    if (cs_has(set, '\\') && nl_add(c, &alts, lit(c, "\\\\"))) return NULL;
    char letters[8];
    int nl = 0;
    for (uint32_t cp = 0; cp < 0x20; cp++)
        if (shortesc[cp] && cs_has(set, cp)) letters[nl++] = shortesc[cp];
    if (nl == 1) {
        const char e[3] = {'\\', letters[0], 0};
        if (nl_add(c, &alts, lit(c, e))) return NULL;
    } else if (nl > 1) {
        snprintf(buf, sizeof buf, "[%.*s]", nl, letters);
        if (nl_add(c, &alts, seq(c, 2, lit(c, "\\"), cls(c, buf)))) return NULL;
    }
    for (int hi = 0; hi < 2; hi++) {
        char digits[17];
        int nd = 0;
        for (int d = 0; d < 16; d++)
            if (!shortesc[hi * 16 + d] && cs_has(set, (uint32_t)(hi * 16 + d))) digits[nd++] = "0123456789abcdef"[d];
        const char *prefix = hi ? "\\u001" : "\\u000";
        if (nd == 1) {
            snprintf(buf, sizeof buf, "%s%c", prefix, digits[0]);
            if (nl_add(c, &alts, lit(c, buf))) return NULL;
        } else if (nd > 1) {
            snprintf(buf, sizeof buf, "[%.*s]", nd, digits);
            if (nl_add(c, &alts, seq(c, 2, lit(c, prefix), cls(c, buf)))) return NULL;
        }
    }
    return altv(c, alts.n, alts.v);
}

/* A pattern (a JavaScript regular expression with the u flag, as validators run it) over the JSON spelling of a
 * string. The regular subset: literals, '.', classes, \d \w \s and their negations, escapes, groups (capturing,
 * (?:...), named), '|', quantifiers (lazy ones match the same strings); '^' only at the start and '$' only at the
 * end of a top-level alternative, whose other ends then match anything. */
typedef struct rx {
    sc *c;
    const char *s;
    size_t i, n;
    int depth;
} rx;

static void *rx_fail(rx *r, const char *what) {
    return fail(r->c, "'pattern' at %s: %s (offset %zu) is not supported", at(r->c), what, r->i);
}

static long rx_peek(const rx *r) {
    uint32_t cp;
    if (r->i >= r->n) return -1;
    return utf8_next((const unsigned char *)r->s + r->i, r->n - r->i, &cp) ? (long)cp : -1; /* checked UTF-8 */
}

static long rx_next(rx *r) {
    uint32_t cp;
    if (r->i >= r->n) return -1;
    const int k = utf8_next((const unsigned char *)r->s + r->i, r->n - r->i, &cp);
    if (!k) return -1;
    r->i += (size_t)k;
    return (long)cp;
}

static int rx_hex(rx *r, int n, uint32_t *v) {
    *v = 0;
    for (int k = 0; k < n; k++) {
        const long ch = rx_next(r);
        const int d = ch >= '0' && ch <= '9' ? (int)ch - '0' : ch >= 'a' && ch <= 'f' ? (int)ch - 'a' + 10
                    : ch >= 'A' && ch <= 'F' ? (int)ch - 'A' + 10 : -1;
        if (d < 0) return rx_fail(r, "an escape with too few hexadecimal digits"), -1;
        *v = *v * 16 + (uint32_t)d;
    }
    return 0;
}

/* \u escapes: \uXXXX (a surrogate pair as two), \u{X...}. */
static int rx_unicode(rx *r, uint32_t *cp) {
    if (rx_peek(r) == '{') {
        r->i++;
        uint32_t v = 0;
        int nd = 0;
        long ch;
        while ((ch = rx_next(r)) != '}') {
            const int d = ch >= '0' && ch <= '9' ? (int)ch - '0' : ch >= 'a' && ch <= 'f' ? (int)ch - 'a' + 10
                        : ch >= 'A' && ch <= 'F' ? (int)ch - 'A' + 10 : -1;
            if (d < 0 || ++nd > 6) return rx_fail(r, "a malformed escape '\\u{...}'"), -1;
            v = v * 16 + (uint32_t)d;
        }
        if (!nd || v > 0x10FFFF) return rx_fail(r, "a malformed escape '\\u{...}'"), -1;
        *cp = v;
    } else if (rx_hex(r, 4, cp)) {
        return -1;
    }
    if (*cp >= 0xD800 && *cp <= 0xDBFF && r->i + 6 <= r->n && r->s[r->i] == '\\' && r->s[r->i + 1] == 'u') {
        rx save = *r;
        uint32_t lo;
        r->i += 2;
        if (!rx_hex(r, 4, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
            *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
            return 0;
        }
        if (r->c->failed) return -1;
        *r = save;
    }
    if (*cp >= 0xD800 && *cp <= 0xDFFF) return rx_fail(r, "a lone surrogate escape"), -1;
    return 0;
}

/* The escape after a backslash: a class (\d \w \s, negations) into set and 1, or one code point into cp and 0;
 * -1 on error. */
static int rx_escape(rx *r, int in_class, cset *set, uint32_t *cp) {
    static const uint32_t space[][2] = {{9, 13}, {32, 32}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                                        {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                                        {0xFEFF, 0xFEFF}};
    const long e = rx_next(r);
    char msg[64];
    switch (e) {
    case -1: return rx_fail(r, "a '\\' at the end"), -1;
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': {
        cset base = {0};
        const long k = e | 0x20;
        int bad = 0;
        if (k == 'd' || k == 'w') bad |= cs_add(r->c, &base, '0', '9');
        if (k == 'w') bad |= cs_add(r->c, &base, 'A', 'Z') | cs_add(r->c, &base, '_', '_') | cs_add(r->c, &base, 'a', 'z');
        for (size_t i = 0; k == 's' && i < sizeof space / sizeof *space; i++) bad |= cs_add(r->c, &base, space[i][0], space[i][1]);
        if (bad) return -1;
        cs_norm(&base);
        if (e == k) *set = base;
        else if (cs_invert(r->c, &base, set)) return -1;
        return 1;
    }
    case 'b':
        if (in_class) return *cp = 8, 0;
        return rx_fail(r, "the word boundary '\\b'"), -1;
    case 'B': return rx_fail(r, "the word boundary '\\B'"), -1;
    case 'n': return *cp = '\n', 0;
    case 'r': return *cp = '\r', 0;
    case 't': return *cp = '\t', 0;
    case 'v': return *cp = 0x0B, 0;
    case 'f': return *cp = 0x0C, 0;
    case '0':
        if (rx_peek(r) >= '0' && rx_peek(r) <= '9') return rx_fail(r, "an octal escape"), -1;
        return *cp = 0, 0;
    case 'k': return rx_fail(r, "the named backreference '\\k'"), -1;
    case 'p': case 'P': return rx_fail(r, "a Unicode property escape '\\p'"), -1;
    case 'c': {
        const long l = rx_next(r);
        if (!((l >= 'a' && l <= 'z') || (l >= 'A' && l <= 'Z'))) return rx_fail(r, "a malformed escape '\\c'"), -1;
        return *cp = (uint32_t)l % 32, 0;
    }
    case 'x': return rx_hex(r, 2, cp);
    case 'u': return rx_unicode(r, cp);
    case '-':
        if (in_class) return *cp = '-', 0;
        return rx_fail(r, "the escape '\\-' outside a class"), -1;
    default:
        if (e >= '1' && e <= '9') {
            snprintf(msg, sizeof msg, "the backreference '\\%c'", (char)e);
            return rx_fail(r, msg), -1;
        }
        if (e < 0x80 && strchr("^$\\.*+?()[]{}|/", (int)e)) return *cp = (uint32_t)e, 0;
        snprintf(msg, sizeof msg, e < 0x80 && e > 0x20 ? "the invalid escape '\\%c'" : "an invalid escape", (char)e);
        return rx_fail(r, msg), -1;
    }
}

/* A class after its '[': into out (normalized). */
static int rx_class(rx *r, cset *out) {
    int neg = 0;
    memset(out, 0, sizeof *out);
    if (rx_peek(r) == '^') neg = 1, r->i++;
    if (rx_peek(r) == ']') {
        r->i++;
        if (!neg) return rx_fail(r, "the empty class '[]' (it matches nothing)"), -1;
        return cs_add(r->c, out, 0, 0x10FFFF);
    }
    cset s = {0}, es;
    for (;;) {
        const long ch = rx_next(r);
        uint32_t lo, hi;
        if (ch < 0) return rx_fail(r, "a '[' without its ']'"), -1;
        if (ch == ']') break;
        if (ch == '\\') {
            const int k = rx_escape(r, 1, &es, &lo);
            if (k < 0) return -1;
            if (k == 1) {
                if (cs_addset(r->c, &s, &es)) return -1;
                if (rx_peek(r) == '-' && r->i + 1 < r->n && r->s[r->i + 1] != ']') return rx_fail(r, "a class range from a class escape"), -1;
                continue;
            }
        } else {
            lo = (uint32_t)ch;
        }
        hi = lo;
        if (rx_peek(r) == '-' && r->i + 1 < r->n && r->s[r->i + 1] != ']') {
            r->i++;
            const long ch2 = rx_next(r);
            if (ch2 == '\\') {
                const int k = rx_escape(r, 1, &es, &hi);
                if (k < 0) return -1;
                if (k == 1) return rx_fail(r, "a class range to a class escape"), -1;
            } else {
                hi = (uint32_t)ch2;
            }
            if (hi < lo) return rx_fail(r, "a class range out of order"), -1;
        }
        if (cs_add(r->c, &s, lo, hi)) return -1;
    }
    cs_norm(&s);
    if (neg) return cs_invert(r->c, &s, out);
    *out = s;
    return 0;
}

/* L(x) without the empty text (NONE when nothing is left). */
static node *nonempty(sc *c, node *x) {
    if (!x || !node_nullable(c, x)) return x;
    switch (x->kind) {
    case N_SEQ: {
        if (!x->n) return &NONE;
        node *rest = seqv(c, x->n - 1, x->kid + 1);
        return alt(c, 2, seq(c, 2, nonempty(c, x->kid[0]), rest), nonempty(c, rest));
    }
    case N_ALT: {
        nlist l = {0};
        for (int i = 0; i < x->n; i++)
            if (nl_add(c, &l, nonempty(c, x->kid[i]))) return NULL;
        return altv(c, l.n, l.v);
    }
    case N_REP: return rep(c, nonempty(c, x->kid[0]), 1, x->max);
    default: return x;
    }
}

static node *rx_alt(rx *r, int top);

static node *rx_atom(rx *r) {
    cset set = {0};
    uint32_t cp;
    const long ch = rx_next(r);
    switch (ch) {
    case '(': {
        if (++r->depth > MAX_REGEX_DEPTH) return rx_fail(r, "groups nested too deeply");
        if (rx_peek(r) == '?') {
            r->i++;
            const long k = rx_next(r);
            if (k == '=' || k == '!') return rx_fail(r, "a lookahead '(?=' or '(?!'");
            if (k == '<' && (rx_peek(r) == '=' || rx_peek(r) == '!')) return rx_fail(r, "a lookbehind '(?<=' or '(?<!'");
            if (k == '<') {
                while (rx_peek(r) >= 0 && rx_peek(r) != '>') r->i++;
                if (rx_next(r) != '>') return rx_fail(r, "a group name without its '>'");
            } else if (k != ':') {
                return rx_fail(r, "an unknown group '(?'");
            }
        }
        node *x = rx_alt(r, 0);
        if (!x) return NULL;
        if (rx_next(r) != ')') return rx_fail(r, "a '(' without its ')'");
        r->depth--;
        return x;
    }
    case '[':
        if (rx_class(r, &set)) return NULL;
        return json_chars(r->c, &set);
    case '.':
        if (cs_add(r->c, &set, '\n', '\n') || cs_add(r->c, &set, '\r', '\r') || cs_add(r->c, &set, 0x2028, 0x2029)) return NULL;
        cset dot;
        cs_norm(&set);
        if (cs_invert(r->c, &set, &dot)) return NULL;
        return json_chars(r->c, &dot);
    case '\\': {
        const int k = rx_escape(r, 0, &set, &cp);
        if (k < 0) return NULL;
        if (k == 1) return json_chars(r->c, &set);
        break;
    }
    case '*': case '+': case '?': return rx_fail(r, "a quantifier with nothing to repeat");
    case '{': case '}': case ']': return rx_fail(r, "a lone '{', '}' or ']'");
    default: cp = (uint32_t)ch;
    }
    char buf[8];
    return text(r->c, buf, (size_t)json_spell(buf, cp));
}

static long rx_number(rx *r) {
    long v = -1;
    while (rx_peek(r) >= '0' && rx_peek(r) <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (rx_next(r) - '0');
        if (v > SCHEMA_MAX_REPEAT) v = SCHEMA_MAX_REPEAT + 1;
    }
    return v;
}

/* {m}, {m,}, {m,n} at '{'. */
static int rx_braces(rx *r, int *lo, int *hi) {
    r->i++;
    const long m = rx_number(r);
    long n = m;
    if (m < 0) return rx_fail(r, "a lone '{'"), -1;
    if (rx_peek(r) == ',') {
        r->i++;
        n = rx_peek(r) == '}' ? -1 : rx_number(r);
        if (n < 0 && rx_peek(r) != '}') return rx_fail(r, "a lone '{'"), -1;
    }
    if (rx_next(r) != '}') return rx_fail(r, "a lone '{'"), -1;
    if (m > SCHEMA_MAX_REPEAT || n > SCHEMA_MAX_REPEAT) return rx_fail(r, "a repetition count above 10000"), -1;
    if (n >= 0 && n < m) return rx_fail(r, "a quantifier {m,n} with n below m"), -1;
    *lo = (int)m;
    *hi = (int)n;
    return 0;
}

static node *rx_quant(rx *r, node *a) {
    if (!a) return NULL;
    const long ch = rx_peek(r);
    int lo, hi;
    if (ch == '*') lo = 0, hi = -1;
    else if (ch == '+') lo = 1, hi = -1;
    else if (ch == '?') lo = 0, hi = 1;
    else if (ch != '{') return a;
    if (ch != '{') r->i++;
    else if (rx_braces(r, &lo, &hi)) return NULL;
    if (rx_peek(r) == '?') r->i++; /* lazy: matches the same strings */
    const long next = rx_peek(r);
    if (next == '*' || next == '+' || next == '?' || next == '{') return rx_fail(r, "a quantifier with nothing to repeat");
    if (node_nullable(r->c, a)) a = nonempty(r->c, a), lo = 0; /* (x?)* would be left-recursive */
    return rep(r->c, a, lo, hi);
}

static node *rx_seq(rx *r, int top) {
    nlist items = {0};
    int start = 0, end = 0;
    if (top && rx_peek(r) == '^') start = 1, r->i++;
    for (;;) {
        const long ch = rx_peek(r);
        if (ch < 0 || ch == '|' || ch == ')') break;
        if (ch == '^') return rx_fail(r, "a '^' anchor that is not at the start");
        if (ch == '$') {
            r->i++;
            if (top && (rx_peek(r) < 0 || rx_peek(r) == '|')) {
                end = 1;
                break;
            }
            return rx_fail(r, "a '$' anchor that is not at the end");
        }
        if (nl_add(r->c, &items, rx_quant(r, rx_atom(r)))) return NULL;
    }
    node *body = seqv(r->c, items.n, items.v);
    if (!top || !body) return body;
    node *any = rep(r->c, prim(r->c, P_CHAR), 0, -1);
    if ((!start || !end) && node_nullable(r->c, body)) return any; /* anything then nothing: anything */
    return seq(r->c, 3, start ? empty(r->c) : any, body, end ? empty(r->c) : any);
}

static node *rx_alt(rx *r, int top) {
    nlist alts = {0};
    if (nl_add(r->c, &alts, rx_seq(r, top))) return NULL;
    while (rx_peek(r) == '|') {
        r->i++;
        if (nl_add(r->c, &alts, rx_seq(r, top))) return NULL;
    }
    return altv(r->c, alts.n, alts.v);
}

static node *c_pattern(sc *c, const char *pat) {
    const size_t n = strlen(pat);
    if (n > MAX_PATTERN) return fail(c, "'pattern' at %s is longer than %d bytes", at(c), MAX_PATTERN);
    if (!utf8_valid(pat, n)) return fail(c, "'pattern' at %s is not UTF-8", at(c));
    rx r = {c, pat, 0, n, 0};
    node *body = rx_alt(&r, 1);
    if (!body) return NULL;
    if (r.i < n) return rx_fail(&r, "a ')' without its '('");
    if (body->kind == N_NONE) return fail(c, "'pattern' at %s matches nothing", at(c));
    return seq(c, 4, lit(c, "\""), body, lit(c, "\""), prim(c, P_SPACE));
}

static node *c_string(sc *c, const kwset kw) {
    static const struct { const char *name; int prim; } FORMATS[] = {
        {"date", P_DATE}, {"time", P_TIME}, {"date-time", P_DATETIME}, {"uuid", P_UUID},
    };
    const cJSON *f = kw[K_FORMAT], *pat = kw[K_PATTERN];
    if (f) {
        if (!cJSON_IsString(f)) return fail(c, "'format' at %s must be a string", at(c));
        size_t i = 0;
        while (i < sizeof FORMATS / sizeof *FORMATS && strcmp(FORMATS[i].name, f->valuestring)) i++;
        if (i == sizeof FORMATS / sizeof *FORMATS)
            return fail(c, "'format' '%.40s' at %s is not supported (only date, time, date-time and uuid)", f->valuestring, at(c));
        const int other = pat ? K_PATTERN : kw[K_MINLEN] ? K_MINLEN : kw[K_MAXLEN] ? K_MAXLEN : -1;
        if (other >= 0) return fail(c, "'%s' together with 'format' at %s is not supported", KW[other].name, at(c));
        return seq(c, 4, lit(c, "\""), prim(c, FORMATS[i].prim), lit(c, "\""), prim(c, P_SPACE));
    }
    if (pat) {
        if (kw[K_MINLEN] || kw[K_MAXLEN])
            return fail(c, "'%s' together with 'pattern' at %s is not supported", kw[K_MINLEN] ? "minLength" : "maxLength", at(c));
        if (!cJSON_IsString(pat)) return fail(c, "'pattern' at %s must be a string", at(c));
        return c_pattern(c, pat->valuestring);
    }
    int lo = 0, hi = -1;
    if (kw[K_MINLEN] && read_count(c, kw[K_MINLEN], 0, &lo)) return NULL;
    if (kw[K_MAXLEN] && read_count(c, kw[K_MAXLEN], 1, &hi)) return NULL;
    if (!lo && hi < 0) return prim(c, P_STRING);
    if (hi >= 0 && lo > hi) return fail(c, "'minLength' %d at %s is above 'maxLength' %d", lo, at(c), hi);
    return seq(c, 4, lit(c, "\""), rep(c, prim(c, P_CHAR), lo, hi), lit(c, "\""), prim(c, P_SPACE));
}

/* ---------------------------------------------------------------- anyOf, allOf, the dispatch */

static node *c_anyof(sc *c, const kwset kw) {
    const int k = kw[K_ANYOF] ? K_ANYOF : K_ONEOF, other = other_keyword(kw, k, -1);
    if (other >= 0) return fail(c, "'%s' together with '%s' at %s is not supported", KW[other].name, KW[k].name, at(c));
    const cJSON *l = kw[k];
    if (!cJSON_IsArray(l) || !l->child) return fail(c, "'%s' at %s must be a non-empty list of schemas", KW[k].name, at(c));
    nlist alts = {0};
    int i = 0;
    for (const cJSON *v = l->child; v; v = v->next, i++) {
        if (cJSON_IsFalse(v)) continue;
        const size_t po = path_index(c, KW[k].name, i);
        node *x = compile(c, v);
        path_pop(c, po);
        if (nl_add(c, &alts, x)) return NULL;
    }
    if (!alts.n) return fail(c, "'%s' at %s allows nothing (every schema is false)", KW[k].name, at(c));
    return altv(c, alts.n, alts.v);
}

/* The schemas an allOf joins, flattened (through $ref and nested allOf), into parts. */
static int allof_collect(sc *c, const cJSON *s, const cJSON **parts, int *n, int depth) {
    if (cJSON_IsTrue(s)) return 0;
    if (!cJSON_IsObject(s)) return fail(c, "'allOf' at %s holds a schema that is false or not an object", at(c)), -1;
    if (depth > 16 || *n == 64) return fail(c, "'allOf' at %s is nested too deeply", at(c)), -1;
    kwset kw;
    if (scan(c, s, kw)) return -1;
    if (kw[K_REF]) {
        const int other = other_keyword(kw, K_REF, -1);
        if (other >= 0) return fail(c, "'$ref' together with '%s' in 'allOf' at %s is not supported", KW[other].name, at(c)), -1;
        if (!cJSON_IsString(kw[K_REF]) || kw[K_REF]->valuestring[0] != '#')
            return fail(c, "'$ref' in 'allOf' at %s is not supported (only references into this schema, '#/...')", at(c)), -1;
        char last[256];
        const cJSON *t = resolve(c, kw[K_REF]->valuestring, last, sizeof last);
        return t ? allof_collect(c, t, parts, n, depth + 1) : -1;
    }
    if (kw[K_ALLOF]) {
        if (!cJSON_IsArray(kw[K_ALLOF])) return fail(c, "'allOf' at %s must be a list of schemas", at(c)), -1;
        for (const cJSON *v = kw[K_ALLOF]->child; v; v = v->next)
            if (allof_collect(c, v, parts, n, depth + 1)) return -1;
        if (other_keyword(kw, K_ALLOF, -1) < 0) return 0;
    }
    parts[(*n)++] = s;
    return 0;
}

static int is_anything(const cJSON *s) { return cJSON_IsTrue(s) || (cJSON_IsObject(s) && !s->child); }

/* allOf of object schemas: their properties and required names joined (a property in two must be the same
 * schema in both, or anything in one), as one object with any further members. */
static node *allof_merge(sc *c, const cJSON *const *parts, int n, cJSON *props, cJSON *req) {
    for (int i = 0; i < n; i++) {
        kwset kw;
        if (scan(c, parts[i], kw)) return NULL;
        for (int k = 0; k < K_COUNT; k++) {
            if (!kw[k] || KW[k].types < 0 || k == K_PROPS || k == K_REQ || k == K_TYPE || k == K_ALLOF) continue;
            if (k == K_ADDL && cJSON_IsTrue(kw[k])) continue;
            return fail(c, "'%s' in 'allOf' at %s is not supported (only the properties of objects are joined)", KW[k].name, at(c));
        }
        if (kw[K_TYPE]) {
            const int m = read_types(c, kw[K_TYPE]);
            if (m < 0) return NULL;
            if (!(m & T_OBJ)) return fail(c, "'allOf' at %s joins schemas that are not objects (not supported)", at(c));
        }
        if (kw[K_PROPS] && !cJSON_IsObject(kw[K_PROPS])) return fail(c, "'properties' in 'allOf' at %s must be an object", at(c));
        for (const cJSON *p = kw[K_PROPS] ? kw[K_PROPS]->child : NULL; p; p = p->next) {
            const cJSON *had = cJSON_GetObjectItemCaseSensitive(props, p->string);
            if (had && (cJSON_Compare(had, p, 1) || is_anything(p))) continue;
            if (had && !is_anything(had))
                return fail(c, "property '%.60s' has two different schemas in 'allOf' at %s (not supported)", p->string, at(c));
            if (had) cJSON_DeleteItemFromObjectCaseSensitive(props, p->string);
            if (!cJSON_AddItemReferenceToObject(props, p->string, (cJSON *)p)) return fail(c, "out of memory");
        }
        if (kw[K_REQ] && !cJSON_IsArray(kw[K_REQ])) return fail(c, "'required' in 'allOf' at %s must be a list of names", at(c));
        for (const cJSON *q = kw[K_REQ] ? kw[K_REQ]->child : NULL; q; q = q->next) {
            if (!cJSON_IsString(q)) return fail(c, "'required' in 'allOf' at %s must be a list of names", at(c));
            if (!cJSON_AddItemToArray(req, cJSON_CreateString(q->valuestring))) return fail(c, "out of memory");
        }
    }
    return c_object(c, props, req, NULL);
}

static node *c_allof(sc *c, const cJSON *s, const kwset kw) {
    const cJSON *all = kw[K_ALLOF];
    if (!cJSON_IsArray(all) || !all->child) return fail(c, "'allOf' at %s must be a non-empty list of schemas", at(c));
    if (!all->child->next && other_keyword(kw, K_ALLOF, -1) < 0) {
        const size_t po = path_index(c, "allOf", 0);
        node *x = compile(c, all->child);
        path_pop(c, po);
        return x;
    }
    const cJSON *parts[64];
    int n = 0;
    if (allof_collect(c, s, parts, &n, 0)) return NULL;
    cJSON *props = cJSON_CreateObject(), *req = cJSON_CreateArray();
    node *x = props && req ? allof_merge(c, parts, n, props, req) : fail(c, "out of memory");
    cJSON_Delete(props);
    cJSON_Delete(req);
    return x;
}

static node *c_types(sc *c, const kwset kw) {
    int mask = 0, specific = 0;
    for (int k = 0; k < K_COUNT; k++)
        if (kw[k] && KW[k].types > 0) specific = 1, mask |= kw[K_TYPE] ? 0 : KW[k].types;
    if (kw[K_TYPE] && (mask = read_types(c, kw[K_TYPE])) < 0) return NULL;
    if (!mask) mask = T_ALL;
    if (mask & T_NUM) mask &= ~T_INT;
    if ((mask & T_ALL) == T_ALL && !specific) return prim(c, P_VALUE);
    nlist alts = {0};
    if (mask & T_OBJ && nl_add(c, &alts, c_object(c, kw[K_PROPS], kw[K_REQ], kw[K_ADDL]))) return NULL;
    if (mask & T_ARR && nl_add(c, &alts, c_array(c, kw))) return NULL;
    if (mask & T_STR && nl_add(c, &alts, c_string(c, kw))) return NULL;
    if (mask & (T_NUM | T_INT) && nl_add(c, &alts, c_number(c, kw, !(mask & T_NUM)))) return NULL;
    if (mask & T_BOOL && nl_add(c, &alts, prim(c, P_BOOLEAN))) return NULL;
    if (mask & T_NULL && nl_add(c, &alts, prim(c, P_NULL))) return NULL;
    return altv(c, alts.n, alts.v);
}

static node *compile_object(sc *c, const cJSON *s) {
    kwset kw;
    if (scan(c, s, kw)) return NULL;
    if (c->depth > 1 && cJSON_GetObjectItemCaseSensitive(s, "$id")) /* it would change what '#' means below it */
        return fail(c, "'$id' at %s is not supported (only at the root)", at(c));
    if (kw[K_REF]) {
        const int other = other_keyword(kw, K_REF, -1);
        if (other >= 0) return fail(c, "'%s' together with '$ref' at %s is not supported", KW[other].name, at(c));
        return c_ref(c, kw[K_REF]);
    }
    if (kw[K_ALLOF]) return c_allof(c, s, kw);
    if (kw[K_ANYOF] && kw[K_ONEOF]) return fail(c, "'anyOf' together with 'oneOf' at %s is not supported", at(c));
    if (kw[K_ANYOF] || kw[K_ONEOF]) return c_anyof(c, kw);
    if (kw[K_ENUM] && kw[K_CONST]) return fail(c, "'enum' together with 'const' at %s is not supported", at(c));
    if (kw[K_ENUM] || kw[K_CONST]) return c_enum(c, kw);
    return c_types(c, kw);
}

static node *compile(sc *c, const cJSON *s) {
    if (c->failed) return NULL;
    if (cJSON_IsTrue(s)) return prim(c, P_VALUE);
    if (cJSON_IsFalse(s)) return fail(c, "the schema at %s is false: it allows nothing", at(c));
    if (!cJSON_IsObject(s)) return fail(c, "the schema at %s is not an object or a boolean", at(c));
    if (c->depth >= SCHEMA_MAX_DEPTH) return fail(c, "schemas nested deeper than %d at %s", SCHEMA_MAX_DEPTH, at(c));
    c->depth++;
    node *x = compile_object(c, s);
    c->depth--;
    return x;
}

/* ---------------------------------------------------------------- checks over the rules */

/* The rules x refers to (all of them, or only those it may begin with: before any character), appended to *v. */
static int refs_in(sc *c, const node *x, int leading_only, int **v, int *n, int *cap) {
    if (++c->work > MAX_WORK) return fail(c, "the schema is too complex to check"), -1;
    switch (x->kind) {
    case N_REF:
        if (*n == *cap) {
            const int nc = *cap ? 2 * *cap : 16;
            int *t = realloc(*v, (size_t)nc * sizeof *t);
            if (!t) return fail(c, "out of memory"), -1;
            *v = t;
            *cap = nc;
        }
        (*v)[(*n)++] = x->rule;
        return 0;
    case N_SEQ:
        for (int i = 0; i < x->n; i++) {
            if (refs_in(c, x->kid[i], leading_only, v, n, cap)) return -1;
            if (leading_only && !node_nullable(c, x->kid[i])) break;
        }
        return 0;
    case N_ALT:
        for (int i = 0; i < x->n; i++)
            if (refs_in(c, x->kid[i], leading_only, v, n, cap)) return -1;
        return 0;
    case N_REP: return refs_in(c, x->kid[0], leading_only, v, n, cap);
    default: return 0;
    }
}

/* Each rule's references (leading ones only, or all), as lists edges[r][0..ne[r]). */
static int rule_refs(sc *c, int leading_only, int **edges, int *ne) {
    for (int r = 0; r < c->nr; r++) {
        int cap = 0;
        if (c->rules[r].body && refs_in(c, c->rules[r].body, leading_only, &edges[r], &ne[r], &cap)) return -1;
    }
    return 0;
}

/* Flags the nullable, then the productive rules: a work list, a rule evaluated again when one it uses changes. */
static int fixpoints(sc *c, int *const *edges, const int *ne) {
    const int nr = c->nr;
    int *start = calloc((size_t)nr + 1, sizeof *start), *users = NULL, *stack = malloc((size_t)nr * sizeof *stack);
    unsigned char *queued = calloc((size_t)nr, 1);
    if (!start || !stack || !queued) goto oom;
    for (int r = 0; r < nr; r++)
        for (int k = 0; k < ne[r]; k++) start[edges[r][k] + 1]++;
    for (int r = 0; r < nr; r++) start[r + 1] += start[r];
    if (!(users = malloc((size_t)start[nr] * sizeof *users + 1))) goto oom;
    int *fill = stack; /* borrowed: the next free place of each rule's users */
    memcpy(fill, start, (size_t)nr * sizeof *fill);
    for (int r = 0; r < nr; r++)
        for (int k = 0; k < ne[r]; k++) users[fill[edges[r][k]]++] = r;
    for (int productive = 0; productive < 2 && !c->failed; productive++) {
        int sp = 0;
        for (int r = nr - 1; r >= 0; r--)
            if (c->rules[r].body) stack[sp++] = r, queued[r] = 1;
        while (sp) {
            const int r = stack[--sp];
            queued[r] = 0;
            rule *x = &c->rules[r];
            unsigned char *flag = productive ? &x->productive : &x->nullable;
            if (*flag || !(productive ? node_productive(c, x->body) : node_nullable(c, x->body))) continue;
            *flag = 1;
            for (int k = start[r]; k < start[r + 1]; k++) {
                const int u = users[k];
                if (!queued[u] && !(productive ? c->rules[u].productive : c->rules[u].nullable)) stack[sp++] = u, queued[u] = 1;
            }
        }
        if (c->work > MAX_WORK) fail(c, "the schema is too complex to check");
    }
    free(start), free(users), free(stack), free(queued);
    return c->failed ? -1 : 0;
oom:
    free(start), free(users), free(stack), free(queued);
    return fail(c, "out of memory"), -1;
}

/* A rule that reaches itself through references it may begin with (depth-first, color 1 on the path). -1 if so. */
static int left_recursion(sc *c, int *const *edges, const int *ne) {
    const int nr = c->nr;
    int *stack = malloc((size_t)nr * 2 * sizeof *stack), rc = 0;
    unsigned char *color = calloc((size_t)nr, 1);
    if (!stack || !color) rc = -1, fail(c, "out of memory");
    for (int s = 0; s < nr && !rc; s++) {
        if (color[s]) continue;
        int sp = 0;
        stack[sp++] = s, stack[sp++] = 0;
        color[s] = 1;
        while (sp && !rc) {
            const int r = stack[sp - 2];
            if (stack[sp - 1] == ne[r]) {
                color[r] = 2;
                sp -= 2;
                continue;
            }
            const int t = edges[r][stack[sp - 1]++];
            if (color[t] == 1) {
                fail(c, "the schema at %s refers to itself before any text (a '$ref' loop that never advances)",
                     *c->rules[t].where ? c->rules[t].where : "the root");
                rc = -1;
            } else if (!color[t]) {
                color[t] = 1;
                stack[sp++] = t, stack[sp++] = 0;
            }
        }
    }
    free(stack), free(color);
    return rc;
}

/* Refuses rules that cannot finish, and rules that reach themselves before any character (left recursion). */
static int check_rules(sc *c) {
    const int nr = c->nr;
    int **edges = calloc((size_t)nr, sizeof *edges), *ne = calloc((size_t)nr, sizeof *ne), rc = -1;
    if (!edges || !ne) {
        fail(c, "out of memory");
    } else if (!rule_refs(c, 0, edges, ne) && !fixpoints(c, edges, ne)) {
        int bad = -1;
        for (int r = nr - 1; r >= 0 && bad < 0; r--)
            if (!c->rules[r].productive) bad = r;
        if (bad >= 0) {
            fail(c, "the schema at %s allows no finite value (it always contains itself)",
                 *c->rules[bad].where ? c->rules[bad].where : "the root");
        } else {
            for (int r = 0; r < nr; r++) free(edges[r]), edges[r] = NULL, ne[r] = 0;
            rc = rule_refs(c, 1, edges, ne) || left_recursion(c, edges, ne) ? -1 : 0;
        }
    }
    for (int r = 0; edges && r < nr; r++) free(edges[r]);
    free(edges), free(ne);
    return rc;
}

/* ---------------------------------------------------------------- printing */

static void emit(sc *c, const char *s, size_t n) {
    if (c->failed) return;
    if (c->olen + n + 1 > SCHEMA_MAX_OUTPUT) {
        fail(c, "the grammar would be larger than %d bytes", SCHEMA_MAX_OUTPUT);
        return;
    }
    if (c->olen + n + 1 > c->ocap) {
        size_t cap = c->ocap ? 2 * c->ocap : 4096;
        while (cap < c->olen + n + 1) cap *= 2;
        char *t = realloc(c->out, cap);
        if (!t) {
            fail(c, "out of memory");
            return;
        }
        c->out = t;
        c->ocap = cap;
    }
    memcpy(c->out + c->olen, s, n);
    c->olen += n;
    c->out[c->olen] = 0;
}

static void emits(sc *c, const char *s) { emit(c, s, strlen(s)); }

static void print_text(sc *c, const node *x) {
    emits(c, "\"");
    for (int i = 0; i < x->n; i++) {
        const unsigned char b = (unsigned char)x->text[i];
        char e[8];
        if (b == '"' || b == '\\') e[0] = '\\', e[1] = (char)b, e[2] = 0;
        else if (b < 0x20 || b == 0x7F) snprintf(e, sizeof e, "\\x%02X", b);
        else e[0] = (char)b, e[1] = 0;
        emits(c, e);
    }
    emits(c, "\"");
}

static int is_atom(const node *x) {
    uint32_t cp;
    if (x->kind == N_CLASS || x->kind == N_REF) return 1;
    return x->kind == N_TEXT && utf8_next((const unsigned char *)x->text, (size_t)x->n, &cp) == x->n;
}

static void print_alts(sc *c, node *x, int depth);

/* ( x ), or a rule of its own when groups are nested too deep already. */
static void print_group(sc *c, node *x, int depth) {
    if (depth >= MAX_PAREN) {
        const int r = rule_new(c, c->rules[c->print_rule].name, 1);
        if (r < 0) return;
        c->rules[r].body = x;
        emits(c, c->rules[r].name);
        return;
    }
    emits(c, "( ");
    print_alts(c, x, depth + 1);
    emits(c, " )");
}

/* x as an element of a sequence. */
static void print_item(sc *c, node *x, int depth) {
    char suffix[32];
    switch (x->kind) {
    case N_TEXT: print_text(c, x); break;
    case N_CLASS: emits(c, x->text); break;
    case N_REF: emits(c, c->rules[x->rule].name); break;
    case N_ALT: print_group(c, x, depth); break;
    case N_SEQ:
        for (int i = 0; i < x->n; i++) {
            if (i) emits(c, " ");
            print_item(c, x->kid[i], depth);
        }
        break;
    case N_REP:
        if (is_atom(x->kid[0])) print_item(c, x->kid[0], depth);
        else print_group(c, x->kid[0], depth);
        if (x->min == 0 && x->max == 1) snprintf(suffix, sizeof suffix, "?");
        else if (x->min == 0 && x->max < 0) snprintf(suffix, sizeof suffix, "*");
        else if (x->min == 1 && x->max < 0) snprintf(suffix, sizeof suffix, "+");
        else if (x->max < 0) snprintf(suffix, sizeof suffix, "{%d,}", x->min);
        else if (x->min == x->max) snprintf(suffix, sizeof suffix, "{%d}", x->min);
        else snprintf(suffix, sizeof suffix, "{%d,%d}", x->min, x->max);
        emits(c, suffix);
        break;
    default: fail(c, "internal error: printing nothing"); break;
    }
}

static void print_alts(sc *c, node *x, int depth) {
    const int n = x->kind == N_ALT ? x->n : 1;
    for (int i = 0; i < n; i++) {
        node *a = x->kind == N_ALT ? x->kid[i] : x;
        if (i) emits(c, " | ");
        if (is_empty(a)) emits(c, "\"\"");
        else print_item(c, a, depth);
    }
}

static void print_rules(sc *c) {
    for (int i = 0; i < c->nr && !c->failed; i++) { /* printing may add rules (deep groups) */
        emits(c, c->rules[i].name);
        emits(c, " ::= ");
        if (c->rules[i].prim >= 0) {
            emits(c, PRIMS[c->rules[i].prim].body);
        } else {
            c->print_rule = i;
            print_alts(c, c->rules[i].body, 0);
        }
        emits(c, "\n");
    }
}

/* ---------------------------------------------------------------- the entry */

/* Whether the JSON text has the escape \u0000 in a string (cJSON would cut the string there). */
static int has_nul_escape(const char *s, size_t n) {
    int in = 0;
    for (size_t i = 0; i < n; i++) {
        if (!in) {
            in = s[i] == '"';
        } else if (s[i] == '"') {
            in = 0;
        } else if (s[i] == '\\') {
            if (i + 5 < n && s[i + 1] == 'u' && !memcmp(s + i + 2, "0000", 4)) return 1;
            i++;
        }
    }
    return 0;
}

int schema_to_gbnf(const char *schema, size_t len, char **out, char *err, size_t errlen) {
    sc state, *c = &state;
    memset(c, 0, sizeof *c);
    c->err = err;
    c->errlen = errlen;
    if (err && errlen) err[0] = 0;
    *out = NULL;
    for (int i = 0; i < P_COUNT; i++) c->prim_rule[i] = -1;
    if (!schema || has_nul_escape(schema, len)) {
        fail(c, schema ? "the schema holds the escape \\u0000 (not supported)" : "no schema");
        return -1;
    }
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(schema, len, &end, 0);
    if (!doc) {
        fail(c, "the schema is not valid JSON (at offset %zu)", end && end >= schema ? (size_t)(end - schema) : (size_t)0);
        return -1;
    }
    while (end && end < schema + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    if (end && end < schema + len) {
        fail(c, "the schema is not valid JSON (text after it at offset %zu)", (size_t)(end - schema));
    } else {
        c->doc = doc;
        for (int i = 0; i < P_COUNT && !c->failed; i++) name_add(c, PRIMS[i].name);
        const int root = rule_new(c, "root", 0);
        c->refs = malloc(16 * sizeof *c->refs);
        if (root == 0 && c->refs) {
            c->refcap = 16;
            c->refs[c->nrefs++] = (refmap){doc, 0};
            stem_set(c, "root");
            node *body = compile(c, doc); /* (may move c->rules) */
            if (body) c->rules[0].body = body;
            if (!c->failed) check_rules(c);
            if (!c->failed) print_rules(c);
        } else {
            fail(c, "out of memory");
        }
    }
    cJSON_Delete(doc);
    while (c->arena) {
        ablk *next = c->arena->next;
        free(c->arena);
        c->arena = next;
    }
    free(c->rules);
    free(c->names);
    free(c->refs);
    if (c->failed) {
        free(c->out);
        return -1;
    }
    *out = c->out;
    return 0;
}
