/*
 * grammar.c - GBNF grammars: the parser, and matching a generation's text against one, token by token.
 *
 * A grammar is rules of elements (llama.cpp's representation of its GBNF syntax, docs/server.md "Constrained
 * output"): each rule a run of alternatives, each alternative a sequence of elements ended by ALT (another
 * follows) or END. An element is a character class (CHAR c [UPPER u] {CHAR_ALT c [UPPER u]}, the same after
 * CHAR_NOT, or ANY) or REF r, a use of rule r. Repetitions, optionals and groups become rules of their own when
 * parsed (x* is r ::= x r | ...). Left recursion is refused: it would never end.
 *
 * Matching is a pushdown automaton run as a set of stacks, every way the text so far can be read: a stack's top
 * is the character class expected next, and an empty stack means the text is a complete sentence. A code point
 * advances each stack whose top matches it; a new top that is a rule reference expands into the rule's
 * alternatives. A set is deduplicated, so an ambiguous grammar cannot grow without bound, and bounded
 * (GRAM_MAX_STACKS stacks of GRAM_MAX_DEPTH): a reading beyond the bounds is dropped, so a hostile grammar can
 * only refuse text, never hang or exhaust memory. Tokens are bytes: a set carries the UTF-8 character it is in
 * the middle of, kept only where some completion of it could match.
 *
 * Masking the vocabulary (gram_mask): the tokens sorted by their bytes form an implicit trie. Walking them in
 * that order, a token keeps the sets of the prefix it shares with the one before and computes only its own
 * bytes; a prefix no reading accepts rejects every token that starts with it at no cost. The sampler asks
 * gram_allows first, for the token it would have picked anyway, and masks only when that one is refused
 * (sampler.c).
 */
#include <stdlib.h>
#include <string.h>

#include "grammar.h"

#define GRAM_MAX_STACKS 512        /* readings of the text kept at once */
#define GRAM_MAX_DEPTH 2048        /* elements on one stack */
#define GRAM_MAX_ELEMS (1 << 20)   /* elements of a grammar, repetitions expanded */
#define GRAM_MAX_RULES (1 << 17)
#define GRAM_MAX_REPEAT 100000     /* the m and n of x{m,n} */
#define GRAM_MAX_EXPAND 1024       /* references expanded in a row without a character */

enum { GE_END, GE_ALT, GE_REF, GE_CHAR, GE_CHAR_NOT, GE_UPPER, GE_CHAR_ALT, GE_ANY };

typedef struct gelem {
    uint32_t type, value;
} gelem;

struct gram {
    gelem *e;          /* every rule's elements, one after another */
    int ne;
    int *start;        /* rule r's first element */
    int nr;
    int root;
};

/* ---- parsing ---- */

typedef struct gvec {
    gelem *v;
    int n, cap;
    int defined;
} gvec;

typedef struct gparse {
    const char *p, *end;
    int line;
    gvec *rules;
    char **names;      /* NULL for a rule the parser made (a group or a repetition) */
    int nr, cap;
    int *index;        /* the named rules by name: open addressing, id + 1 (0: empty), hcap a power of two */
    int hcap, nnamed;
    long total;        /* elements in all rules */
    char *err;
    size_t errlen;
    int failed;
} gparse;

#include <stdarg.h>
#include <stdio.h>

static void fail(gparse *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(gparse *ps, const char *fmt, ...) {
    if (ps->failed) return;
    ps->failed = 1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ps->err && ps->errlen) snprintf(ps->err, ps->errlen, "grammar, line %d: %s", ps->line, msg);
}

static int push(gparse *ps, int r, uint32_t type, uint32_t value) {
    if (ps->failed) return -1;
    if (++ps->total > GRAM_MAX_ELEMS) return fail(ps, "more than %d elements (repetitions expanded)", GRAM_MAX_ELEMS), -1;
    gvec *v = &ps->rules[r];
    if (v->n == v->cap) {
        const int cap = v->cap ? 2 * v->cap : 16;
        gelem *t = realloc(v->v, (size_t)cap * sizeof *t);
        if (!t) return fail(ps, "out of memory"), -1;
        v->v = t;
        v->cap = cap;
    }
    v->v[v->n].type = type;
    v->v[v->n].value = value;
    v->n++;
    return 0;
}

static uint32_t hash_name(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* The index's slot for name: where the rule is, or the empty slot where it would go. */
static int *name_slot(gparse *ps, const char *name, size_t len) {
    for (uint32_t h = hash_name(name, len) & (uint32_t)(ps->hcap - 1);; h = (h + 1) & (uint32_t)(ps->hcap - 1)) {
        const int id = ps->index[h] - 1;
        if (id < 0 || (strlen(ps->names[id]) == len && !memcmp(ps->names[id], name, len))) return &ps->index[h];
    }
}

/* Keep the index at most half full. 0, or -1 when out of memory. */
static int index_grow(gparse *ps) {
    if (2 * (ps->nnamed + 1) <= ps->hcap) return 0;
    int *old = ps->index, ocap = ps->hcap;
    ps->hcap = ocap ? 2 * ocap : 64;
    if (!(ps->index = calloc((size_t)ps->hcap, sizeof *ps->index))) return ps->index = old, ps->hcap = ocap, -1;
    for (int i = 0; i < ocap; i++)
        if (old[i]) *name_slot(ps, ps->names[old[i] - 1], strlen(ps->names[old[i] - 1])) = old[i];
    free(old);
    return 0;
}

/* A rule's id: the named one (made on first use), or a new unnamed one (name NULL). -1 on failure. */
static int rule_id(gparse *ps, const char *name, size_t len) {
    if (name && index_grow(ps) != 0) return fail(ps, "out of memory"), -1;
    int *slot = name ? name_slot(ps, name, len) : NULL;
    if (slot && *slot) return *slot - 1;
    if (ps->nr == GRAM_MAX_RULES) return fail(ps, "more than %d rules", GRAM_MAX_RULES), -1;
    if (ps->nr == ps->cap) {
        const int cap = ps->cap ? 2 * ps->cap : 32;
        gvec *r = realloc(ps->rules, (size_t)cap * sizeof *r);
        if (r) ps->rules = r;
        char **n = r ? realloc(ps->names, (size_t)cap * sizeof *n) : NULL;
        if (!n) return fail(ps, "out of memory"), -1;
        ps->names = n;
        ps->cap = cap;
    }
    memset(&ps->rules[ps->nr], 0, sizeof ps->rules[ps->nr]);
    ps->names[ps->nr] = NULL;
    if (name && !(ps->names[ps->nr] = strndup(name, len))) return fail(ps, "out of memory"), -1;
    if (slot) *slot = ps->nr + 1, ps->nnamed++;
    return ps->nr++;
}

static int is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Spaces, tabs and # comments; new lines too where newline_ok. */
static void skip_space(gparse *ps, int newline_ok) {
    while (ps->p < ps->end) {
        const char c = *ps->p;
        if (c == ' ' || c == '\t') {
            ps->p++;
        } else if (c == '#') {
            while (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r') ps->p++;
        } else if (newline_ok && (c == '\n' || c == '\r')) {
            ps->line += c == '\n';
            ps->p++;
        } else {
            break;
        }
    }
}

static int hex_digits(gparse *ps, int n, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        const char c = ps->p < ps->end ? *ps->p : 0;
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return fail(ps, "expected %d hexadecimal digits", n), -1;
        v = v * 16 + (uint32_t)d;
        ps->p++;
    }
    if (v > 0x10FFFF) return fail(ps, "code point U+%X is beyond U+10FFFF", v), -1;
    *out = v;
    return 0;
}

/* One character of a literal or class: an escape or a UTF-8 sequence. */
static int parse_char(gparse *ps, uint32_t *cp) {
    if (ps->p >= ps->end) return fail(ps, "unexpected end of the grammar"), -1;
    const unsigned char c = (unsigned char)*ps->p;
    if (c == '\\') {
        ps->p++;
        const char x = ps->p < ps->end ? *ps->p++ : 0;
        switch (x) {
        case 'x': return hex_digits(ps, 2, cp);
        case 'u': return hex_digits(ps, 4, cp);
        case 'U': return hex_digits(ps, 8, cp);
        case 't': return *cp = '\t', 0;
        case 'r': return *cp = '\r', 0;
        case 'n': return *cp = '\n', 0;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '/': return *cp = (uint32_t)x, 0;
        default: return fail(ps, "unknown escape '\\%c'", x ? x : '0'), -1;
        }
    }
    if (c == '\n' || c == '\r') return fail(ps, "a literal or class may not hold a new line (write \\n)"), -1;
    int n = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c < 0xF5 ? 4 : 0;
    if (!n || ps->p + n > ps->end) return fail(ps, "a character that is not UTF-8"), -1;
    uint32_t v = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int i = 1; i < n; i++) {
        const unsigned char k = (unsigned char)ps->p[i];
        if ((k & 0xC0) != 0x80) return fail(ps, "a character that is not UTF-8"), -1;
        v = v << 6 | (k & 0x3F);
    }
    ps->p += n;
    *cp = v;
    return 0;
}

static void parse_alternates(gparse *ps, int r, int nested);

/* Replace the last symbol (elements [sym, n) of rule r) by min to max (-1: any number) repetitions of it. */
static void repeat(gparse *ps, int r, int sym, long min, long max) {
    const int len = ps->rules[r].n - sym;
    if (len <= 0) { fail(ps, "a repetition with nothing before it"); return; }
    gelem *prev = malloc((size_t)len * sizeof *prev);
    if (!prev) { fail(ps, "out of memory"); return; }
    memcpy(prev, ps->rules[r].v + sym, (size_t)len * sizeof *prev);
    ps->rules[r].n = sym;
    ps->total -= len;
    for (long i = 0; i < min && !ps->failed; i++)
        for (int k = 0; k < len; k++) push(ps, r, prev[k].type, prev[k].value);
    if (max < 0) { /* rec ::= prev rec | */
        const int rec = rule_id(ps, NULL, 0);
        for (int k = 0; rec >= 0 && k < len; k++) push(ps, rec, prev[k].type, prev[k].value);
        if (rec >= 0 && !push(ps, rec, GE_REF, (uint32_t)rec) && !push(ps, rec, GE_ALT, 0) && !push(ps, rec, GE_END, 0))
            ps->rules[rec].defined = 1, push(ps, r, GE_REF, (uint32_t)rec);
    } else { /* opt_i ::= prev opt_{i+1} | ... the last: prev | */
        int next = -1;
        for (long i = 0; i < max - min && !ps->failed; i++) {
            const int o = rule_id(ps, NULL, 0);
            if (o < 0) break;
            for (int k = 0; k < len; k++) push(ps, o, prev[k].type, prev[k].value);
            if (next >= 0) push(ps, o, GE_REF, (uint32_t)next);
            push(ps, o, GE_ALT, 0);
            push(ps, o, GE_END, 0);
            ps->rules[o].defined = 1;
            next = o;
        }
        if (next >= 0) push(ps, r, GE_REF, (uint32_t)next);
    }
    free(prev);
}

static long parse_count(gparse *ps) {
    long v = 0;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return fail(ps, "expected a number in {m,n}"), -1;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (*ps->p++ - '0');
        if (v > GRAM_MAX_REPEAT) return fail(ps, "a repetition count beyond %d", GRAM_MAX_REPEAT), -1;
    }
    return v;
}

/* x{m}, x{m,}, x{m,n} */
static void parse_braces(gparse *ps, int r, int sym) {
    ps->p++;
    skip_space(ps, 1);
    const long min = parse_count(ps);
    long max = min;
    skip_space(ps, 1);
    if (!ps->failed && ps->p < ps->end && *ps->p == ',') {
        ps->p++;
        skip_space(ps, 1);
        max = ps->p < ps->end && *ps->p == '}' ? -1 : parse_count(ps);
        skip_space(ps, 1);
    }
    if (ps->failed) return;
    if (ps->p >= ps->end || *ps->p != '}') { fail(ps, "expected '}'"); return; }
    if (max >= 0 && max < min) { fail(ps, "{%ld,%ld}: the most is below the least", min, max); return; }
    ps->p++;
    repeat(ps, r, sym, min, max);
}

/* A character class [...] or [^...]. */
static void parse_class(gparse *ps, int r) {
    ps->p++;
    uint32_t type = GE_CHAR;
    if (ps->p < ps->end && *ps->p == '^') type = GE_CHAR_NOT, ps->p++;
    int first = 1;
    while (!ps->failed && ps->p < ps->end && *ps->p != ']') {
        uint32_t lo, hi;
        if (parse_char(ps, &lo)) return;
        push(ps, r, first ? type : GE_CHAR_ALT, lo);
        first = 0;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
            ps->p++;
            if (parse_char(ps, &hi)) return;
            if (hi < lo) { fail(ps, "a range whose end is below its start"); return; }
            push(ps, r, GE_UPPER, hi);
        }
    }
    if (ps->p >= ps->end) { fail(ps, "a class without its ']'"); return; }
    if (first) { fail(ps, "an empty class []"); return; }
    ps->p++;
}

/* One alternative: symbols and their repetitions, until '|', ')' or (not nested) the end of the line. */
static void parse_sequence(gparse *ps, int r, int nested) {
    int sym = ps->rules[r].n;
    while (!ps->failed && ps->p < ps->end) {
        const char c = *ps->p;
        if (c == '"') {
            ps->p++;
            sym = ps->rules[r].n;
            while (!ps->failed && ps->p < ps->end && *ps->p != '"') {
                uint32_t cp;
                if (!parse_char(ps, &cp)) push(ps, r, GE_CHAR, cp);
            }
            if (ps->p >= ps->end) { fail(ps, "a literal without its closing quote"); return; }
            ps->p++;
        } else if (c == '[') {
            sym = ps->rules[r].n;
            parse_class(ps, r);
        } else if (is_word(c)) {
            const char *s = ps->p;
            while (ps->p < ps->end && is_word(*ps->p)) ps->p++;
            const int id = rule_id(ps, s, (size_t)(ps->p - s));
            sym = ps->rules[r].n;
            if (id >= 0) push(ps, r, GE_REF, (uint32_t)id);
        } else if (c == '(') {
            ps->p++;
            skip_space(ps, 1);
            const int sub = rule_id(ps, NULL, 0);
            if (sub < 0) return;
            parse_alternates(ps, sub, 1);
            if (ps->failed) return;
            if (ps->p >= ps->end || *ps->p != ')') { fail(ps, "expected ')'"); return; }
            ps->p++;
            sym = ps->rules[r].n;
            push(ps, r, GE_REF, (uint32_t)sub);
        } else if (c == '.') {
            ps->p++;
            sym = ps->rules[r].n;
            push(ps, r, GE_ANY, 0);
        } else if (c == '*' || c == '+' || c == '?') {
            ps->p++;
            repeat(ps, r, sym, c == '+', c == '?' ? 1 : -1);
        } else if (c == '{') {
            parse_braces(ps, r, sym);
        } else {
            break;
        }
        skip_space(ps, nested);
    }
}

/* Whether the text at the parser's position begins a rule ("name ::="). */
static int at_rule_start(const gparse *ps) {
    const char *q = ps->p;
    while (q < ps->end && is_word(*q)) q++;
    if (q == ps->p) return 0;
    while (q < ps->end && (*q == ' ' || *q == '\t')) q++;
    return ps->end - q >= 3 && !memcmp(q, "::=", 3);
}

static void parse_alternates(gparse *ps, int r, int nested) {
    parse_sequence(ps, r, nested);
    while (!ps->failed && ps->p < ps->end && *ps->p == '|') {
        push(ps, r, GE_ALT, 0);
        ps->p++;
        const char *before = ps->p;
        const int line = ps->line;
        skip_space(ps, 1);
        if (!nested && at_rule_start(ps)) { /* "x ::= a |" then the next rule: an empty last alternative */
            ps->p = before, ps->line = line;
            skip_space(ps, 0);
            break;
        }
        parse_sequence(ps, r, nested);
    }
    push(ps, r, GE_END, 0);
    ps->rules[r].defined = 1;
}

/* name ::= alternatives */
static void parse_rule(gparse *ps) {
    const char *s = ps->p;
    while (ps->p < ps->end && is_word(*ps->p)) ps->p++;
    if (ps->p == s) { fail(ps, "expected a rule name"); return; }
    const int r = rule_id(ps, s, (size_t)(ps->p - s));
    if (r < 0) return;
    if (ps->rules[r].defined) { fail(ps, "rule '%s' is defined twice", ps->names[r]); return; }
    skip_space(ps, 0);
    if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3)) { fail(ps, "expected '::=' after '%s'", ps->names[r]); return; }
    ps->p += 3;
    skip_space(ps, 1);
    parse_alternates(ps, r, 0);
    if (ps->failed) return;
    if (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r') { fail(ps, "unexpected '%c'", *ps->p); return; }
}

/* ---- checks of the whole grammar ---- */

static int is_end(const gelem *e) { return e->type == GE_END || e->type == GE_ALT; }

/* Rules that can match the empty text (a fixpoint), then refusal of left recursion: a rule reaching itself
 * through the references that begin its alternatives (after nullable ones). */
static int check_recursion(gram *g, char **names, char *err, size_t errlen) {
    uint8_t *nullable = calloc((size_t)g->nr, 1), *color = calloc((size_t)g->nr, 1);
    int *stack = malloc((size_t)g->nr * 3 * sizeof(int)), rc = 0;
    if (!nullable || !color || !stack) {
        free(nullable), free(color), free(stack);
        return snprintf(err, errlen, "grammar: out of memory"), -1;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < g->nr; r++) {
            if (nullable[r]) continue;
            int ok = 1;
            for (int i = g->start[r];; i++) {
                const gelem *e = &g->e[i];
                if (is_end(e)) {
                    if (ok) nullable[r] = 1, changed = 1;
                    if (e->type == GE_END || nullable[r]) break;
                    ok = 1;
                } else if (e->type != GE_REF || !nullable[e->value]) {
                    ok = 0;
                }
            }
        }
    }
    /* depth-first search over "begins with" edges: a frame is (rule, element to scan from, whether that element
     * may begin the rule); color 1 on the path, 2 done */
    for (int s = 0; s < g->nr && !rc; s++) {
        if (color[s]) continue;
        int sp = 0;
        stack[sp++] = s, stack[sp++] = g->start[s], stack[sp++] = 1;
        color[s] = 1;
        while (sp && !rc) {
            const int r = stack[sp - 3];
            int i = stack[sp - 2], lead = stack[sp - 1], to = -1;
            for (; i < g->ne; i++) { /* the next reference that may begin r */
                const gelem *e = &g->e[i];
                if (e->type == GE_END) break;
                if (e->type == GE_ALT) {
                    lead = 1;
                    continue;
                }
                if (lead && e->type == GE_REF) to = (int)e->value;
                lead = lead && e->type == GE_REF && nullable[e->value];
                if (to >= 0) {
                    i++;
                    break;
                }
            }
            if (to < 0) {
                color[r] = 2;
                sp -= 3;
                continue;
            }
            stack[sp - 2] = i, stack[sp - 1] = lead;
            if (color[to] == 1) {
                const char *n = names[to] ? names[to] : names[r] ? names[r] : "(a group)";
                snprintf(err, errlen, "grammar: rule '%s' is left-recursive (it can begin with itself)", n);
                rc = -1;
            } else if (!color[to]) {
                color[to] = 1;
                stack[sp++] = to, stack[sp++] = g->start[to], stack[sp++] = 1;
            }
        }
    }
    free(nullable), free(color), free(stack);
    return rc;
}

gram *gram_parse(const char *text, size_t len, char *err, size_t errlen) {
    gparse ps = {.p = text, .end = text + len, .line = 1, .err = err, .errlen = errlen};
    if (err && errlen) err[0] = 0;
    skip_space(&ps, 1);
    while (!ps.failed && ps.p < ps.end) {
        parse_rule(&ps);
        skip_space(&ps, 1);
    }
    gram *g = ps.failed ? NULL : calloc(1, sizeof *g);
    if (!ps.failed && !g) fail(&ps, "out of memory");
    int root = -1;
    for (int r = 0; g && r < ps.nr; r++) {
        if (!ps.rules[r].defined) {
            ps.line = 0;
            snprintf(err, errlen, "grammar: rule '%s' is used but not defined", ps.names[r] ? ps.names[r] : "?");
            ps.failed = 1;
            break;
        }
        if (ps.names[r] && !strcmp(ps.names[r], "root")) root = r;
    }
    if (g && !ps.failed && root < 0) snprintf(err, errlen, "grammar: no rule 'root'"), ps.failed = 1;
    if (g && !ps.failed) {
        g->nr = ps.nr;
        g->ne = (int)ps.total;
        g->root = root;
        g->start = malloc((size_t)ps.nr * sizeof *g->start);
        g->e = malloc((size_t)(ps.total + 1) * sizeof *g->e);
        if (!g->start || !g->e) {
            snprintf(err, errlen, "grammar: out of memory");
            ps.failed = 1;
        } else {
            int at = 0;
            for (int r = 0; r < ps.nr; r++) {
                g->start[r] = at;
                memcpy(g->e + at, ps.rules[r].v, (size_t)ps.rules[r].n * sizeof *g->e);
                at += ps.rules[r].n;
            }
            g->e[at].type = GE_END; /* a guard: the element after any rule's last END */
            g->ne = at;
            if (check_recursion(g, ps.names, err, errlen) != 0) ps.failed = 1;
        }
    }
    for (int r = 0; r < ps.nr; r++) free(ps.rules[r].v), free(ps.names[r]);
    free(ps.rules);
    free(ps.names);
    free(ps.index);
    if (ps.failed) {
        gram_free(g);
        return NULL;
    }
    return g;
}

void gram_free(gram *g) {
    if (!g) return;
    free(g->e);
    free(g->start);
    free(g);
}

/* ---- the vocabulary ---- */

struct gram_vocab {
    int n;
    char *bytes;       /* every token's bytes */
    size_t *off;
    int *len;
    uint8_t *eog;
    uint8_t *special;  /* control tokens: allowed only where a state allows them (gram_state_allow) */
    int *order;        /* the tokens with text, sorted by their bytes */
    int *lcp;          /* order[k]'s common prefix with order[k - 1] */
    int n_order, max_len;
};

/* A merge sort of the tokens a[0..n) by their bytes (stable; qsort would need a global for the vocabulary). */
static void sort_tokens(const gram_vocab *v, int *a, int *tmp, int n) {
    if (n < 2) return;
    const int h = n / 2;
    sort_tokens(v, a, tmp, h);
    sort_tokens(v, a + h, tmp, n - h);
    int i = 0, j = h, k = 0;
    while (i < h && j < n) {
        const int x = a[i], y = a[j];
        const int lx = v->len[x], ly = v->len[y];
        int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], (size_t)(lx < ly ? lx : ly));
        if (!c) c = lx - ly;
        tmp[k++] = c <= 0 ? a[i++] : a[j++];
    }
    while (i < h) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, (size_t)n * sizeof *a);
}

gram_vocab *gram_vocab_new(int n, const char *const *piece, const int *len, const uint8_t *eog, const uint8_t *special) {
    gram_vocab *v = calloc(1, sizeof *v);
    if (!v || n < 1) return free(v), NULL;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += len[i] > 0 ? (size_t)len[i] : 0;
    v->n = n;
    v->bytes = malloc(total ? total : 1);
    v->off = malloc((size_t)n * sizeof *v->off);
    v->len = malloc((size_t)n * sizeof *v->len);
    v->eog = malloc((size_t)n);
    v->special = calloc((size_t)n, 1);
    v->order = malloc((size_t)n * sizeof *v->order);
    v->lcp = malloc((size_t)n * sizeof *v->lcp);
    int *tmp = malloc((size_t)n * sizeof *tmp);
    if (!v->bytes || !v->off || !v->len || !v->eog || !v->special || !v->order || !v->lcp || !tmp) {
        free(tmp);
        gram_vocab_free(v);
        return NULL;
    }
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        const int l = len[i] > 0 ? len[i] : 0;
        v->off[i] = at;
        v->len[i] = l;
        v->eog[i] = eog[i] != 0;
        v->special[i] = special && special[i];
        if (l) memcpy(v->bytes + at, piece[i], (size_t)l);
        at += (size_t)l;
        if (l && !v->eog[i]) v->order[v->n_order++] = i;
        if (l > v->max_len) v->max_len = l;
    }
    sort_tokens(v, v->order, tmp, v->n_order);
    free(tmp);
    for (int k = 0; k < v->n_order; k++) {
        int l = 0;
        if (k > 0) {
            const int a = v->order[k - 1], b = v->order[k];
            const int m = v->len[a] < v->len[b] ? v->len[a] : v->len[b];
            while (l < m && v->bytes[v->off[a] + (size_t)l] == v->bytes[v->off[b] + (size_t)l]) l++;
        }
        v->lcp[k] = l;
    }
    return v;
}

gram_vocab *gram_vocab_bytes(void) {
    char b[256];
    const char *piece[257];
    int len[257];
    uint8_t eog[257] = {0};
    for (int i = 0; i < 256; i++) b[i] = (char)i, piece[i] = &b[i], len[i] = 1;
    piece[256] = "", len[256] = 0, eog[256] = 1;
    return gram_vocab_new(257, piece, len, eog, NULL); /* it copies the bytes */
}

int32_t gram_vocab_eog(const gram_vocab *v) {
    for (int i = 0; v && i < v->n; i++)
        if (v->eog[i]) return i;
    return -1;
}

void gram_vocab_free(gram_vocab *v) {
    if (!v) return;
    free(v->bytes);
    free(v->off);
    free(v->len);
    free(v->eog);
    free(v->special);
    free(v->order);
    free(v->lcp);
    free(v);
}

/* ---- sets of stacks ---- */

typedef struct gset {
    uint32_t *buf;     /* the stacks' elements, one after another */
    size_t n, cap;
    uint32_t *at, *len; /* stack i: buf[at[i] .. at[i] + len[i]) */
    int ns, scap;
    uint32_t partial;  /* the UTF-8 character begun: its bits so far */
    int rem;           /* its continuation bytes still due (0: none) */
    int clen;          /* its length in bytes */
} gset;

#define HASH_SIZE 2048 /* > 2 * GRAM_MAX_STACKS */

struct gram_state {
    const gram *g;
    const gram_vocab *v;
    gset cur;
    gset *lvl;         /* gram_mask's and gram_allows' sets, by depth into a token */
    int nlvl;
    uint32_t *st;      /* the stack being built (GRAM_MAX_DEPTH + 2) */
    uint32_t hash_gen, *hash_mark;
    int *hash_idx;
    int overflow;      /* a reading was dropped at a bound (for tests and messages) */
    int dead;
    int32_t *spec_ok;  /* the control tokens this state may take (gram_state_allow) */
    int n_spec_ok;
};

/* Whether token id is not a control token, or one this state may take. */
static int special_ok(const gram_state *st, int32_t id) {
    if (!st->v->special[id]) return 1;
    for (int i = 0; i < st->n_spec_ok; i++)
        if (st->spec_ok[i] == id) return 1;
    return 0;
}

int gram_state_allow(gram_state *st, const int32_t *ids, int n) {
    int32_t *c = n > 0 ? malloc((size_t)n * sizeof *c) : NULL;
    if (n > 0 && !c) return -1;
    if (n > 0) memcpy(c, ids, (size_t)n * sizeof *c);
    free(st->spec_ok);
    st->spec_ok = c;
    st->n_spec_ok = n > 0 ? n : 0;
    return 0;
}

static void set_clear(gset *s) { s->n = 0, s->ns = 0, s->partial = 0, s->rem = 0, s->clen = 0; }

static uint32_t hash_stack(const uint32_t *s, int n) {
    uint32_t h = 2166136261u ^ (uint32_t)n;
    for (int i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

/* Add stack s[0..n) to out unless it is there; 0, or -1 when out of memory. */
static int set_add(gram_state *st, gset *out, const uint32_t *s, int n) {
    uint32_t h = hash_stack(s, n) & (HASH_SIZE - 1);
    for (;; h = (h + 1) & (HASH_SIZE - 1)) {
        if (st->hash_mark[h] != st->hash_gen) break;
        const int i = st->hash_idx[h];
        if ((int)out->len[i] == n && (n == 0 || !memcmp(out->buf + out->at[i], s, (size_t)n * sizeof *s))) return 0;
    }
    if (out->ns >= GRAM_MAX_STACKS) return st->overflow = 1, 0;
    if (out->ns == out->scap) {
        const int cap = out->scap ? 2 * out->scap : 8;
        uint32_t *a = realloc(out->at, (size_t)cap * sizeof *a);
        if (a) out->at = a;
        uint32_t *l = a ? realloc(out->len, (size_t)cap * sizeof *l) : NULL;
        if (!l) return -1;
        out->len = l;
        out->scap = cap;
    }
    if (out->n + (size_t)n > out->cap || !out->buf) {
        size_t cap = out->cap ? out->cap : 64;
        while (cap < out->n + (size_t)n) cap *= 2;
        uint32_t *b = realloc(out->buf, cap * sizeof *b);
        if (!b) return -1;
        out->buf = b;
        out->cap = cap;
    }
    if (n) memcpy(out->buf + out->n, s, (size_t)n * sizeof *s);
    out->at[out->ns] = (uint32_t)out->n;
    out->len[out->ns] = (uint32_t)n;
    st->hash_mark[h] = st->hash_gen;
    st->hash_idx[h] = out->ns++;
    out->n += (size_t)n;
    return 0;
}

/* Start building a set: a new generation of the deduplication table. */
static void set_begin(gram_state *st, gset *out) {
    set_clear(out);
    if (++st->hash_gen == 0) { /* wrapped: clear the marks */
        memset(st->hash_mark, 0, HASH_SIZE * sizeof *st->hash_mark);
        st->hash_gen = 1;
    }
}

static void expand(gram_state *st, int n, gset *out, int depth);

/* Add, for each alternative of rule r, stack st->st[0..m) with the alternative's start on top, expanded. */
static void expand_rule(gram_state *st, int m, uint32_t r, gset *out, int depth) {
    const gram *g = st->g;
    for (int a = g->start[r];;) {
        if (is_end(&g->e[a])) { /* an empty alternative */
            expand(st, m, out, depth);
        } else {
            st->st[m] = (uint32_t)a;
            expand(st, m + 1, out, depth);
        }
        while (!is_end(&g->e[a])) a++;
        if (g->e[a].type == GE_END) break;
        a++;
    }
}

/* Add stack st->st[0..n) to out, a reference on top expanded into its rule's alternatives (again while the new
 * top is one). Leaves st->st[0..n) as it found it. */
static void expand(gram_state *st, int n, gset *out, int depth) {
    uint32_t *s = st->st;
    if (n == 0 || st->g->e[s[n - 1]].type != GE_REF) {
        set_add(st, out, s, n);
        return;
    }
    if (n + 1 > GRAM_MAX_DEPTH || depth > GRAM_MAX_EXPAND) {
        st->overflow = 1;
        return;
    }
    const gram *g = st->g;
    const uint32_t pos = s[n - 1], r = g->e[pos].value;
    int m = n - 1;
    if (!is_end(&g->e[pos + 1])) s[m++] = pos + 1; /* what follows the reference, once the rule is read */
    expand_rule(st, m, r, out, depth + 1);
    s[n - 1] = pos;
}

/* The range [*a, *b] of a class at element p; returns the element after it (CHAR_ALT: another range). */
static uint32_t class_range(const gelem *e, uint32_t p, uint32_t *a, uint32_t *b) {
    *a = *b = e[p].value;
    if (e[p + 1].type == GE_UPPER) return *b = e[p + 1].value, p + 2;
    return p + 1;
}

/* Whether the class at pos holds cp; *next: the element after the class. */
static int class_match(const gelem *e, uint32_t pos, uint32_t cp, uint32_t *next) {
    if (e[pos].type == GE_ANY) return *next = pos + 1, 1;
    const int neg = e[pos].type == GE_CHAR_NOT;
    int found = 0;
    uint32_t p = pos, lo, hi;
    do {
        p = class_range(e, p, &lo, &hi);
        found |= lo <= cp && cp <= hi;
    } while (e[p].type == GE_CHAR_ALT);
    *next = p;
    return found != neg;
}

/* Whether some code point in [lo, hi] could match the class at pos (a character begun, not finished). */
static int class_may_match(const gelem *e, uint32_t pos, uint32_t lo, uint32_t hi) {
    if (e[pos].type == GE_ANY) return 1;
    const int neg = e[pos].type == GE_CHAR_NOT;
    uint32_t p = pos, a, b;
    do {
        p = class_range(e, p, &a, &b);
        if (!neg && a <= hi && b >= lo) return 1;
        if (neg && a <= lo && b >= hi) return 0; /* one excluded range covers every completion */
    } while (e[p].type == GE_CHAR_ALT);
    return neg;
}

/* out = in advanced by code point cp. */
static void accept_cp(gram_state *st, const gset *in, uint32_t cp, gset *out) {
    const gelem *e = st->g->e;
    set_begin(st, out);
    for (int i = 0; i < in->ns; i++) {
        const int n = (int)in->len[i];
        if (n == 0) continue;
        const uint32_t *s = in->buf + in->at[i];
        uint32_t next;
        if (!class_match(e, s[n - 1], cp, &next)) continue;
        if (n > 1) memcpy(st->st, s, (size_t)(n - 1) * sizeof *s);
        int m = n - 1;
        if (!is_end(&e[next])) st->st[m++] = next;
        expand(st, m, out, 0);
    }
}

/* out = in advanced by one byte (a character's last byte moves the stacks; an earlier one only filters them).
 * Only well-formed UTF-8 passes: no overlong form, no surrogate, nothing beyond U+10FFFF. */
static void accept_byte(gram_state *st, const gset *in, unsigned char b, gset *out) {
    uint32_t v;
    int rem, clen;
    if (in->rem > 0) {
        if ((b & 0xC0) != 0x80) { set_begin(st, out); return; }
        v = in->partial << 6 | (b & 0x3F);
        rem = in->rem - 1;
        clen = in->clen;
    } else if (b < 0x80) {
        accept_cp(st, in, b, out);
        return;
    } else if (b >= 0xC2 && b < 0xE0) {
        v = b & 0x1F, rem = 1, clen = 2;
    } else if (b >= 0xE0 && b < 0xF0) {
        v = b & 0x0F, rem = 2, clen = 3;
    } else if (b >= 0xF0 && b < 0xF5) {
        v = b & 0x07, rem = 3, clen = 4;
    } else {
        set_begin(st, out); /* not UTF-8 */
        return;
    }
    /* the code points this character can still become */
    const uint32_t least = clen == 2 ? 0x80 : clen == 3 ? 0x800 : 0x10000;
    uint32_t lo = v << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
    if (lo < least) lo = least;
    if (hi > 0x10FFFF) hi = 0x10FFFF;
    if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) { set_begin(st, out); return; }
    if (rem == 0) { accept_cp(st, in, v, out); return; }
    set_begin(st, out);
    for (int i = 0; i < in->ns; i++) {
        const int n = (int)in->len[i];
        const uint32_t *s = in->buf + in->at[i];
        if (n > 0 && class_may_match(st->g->e, s[n - 1], lo, hi)) set_add(st, out, s, n);
    }
    if (out->ns) out->partial = v, out->rem = rem, out->clen = clen;
}

static int can_end(const gset *s) {
    if (s->rem) return 0;
    for (int i = 0; i < s->ns; i++)
        if (s->len[i] == 0) return 1;
    return 0;
}

/* The set at depth d of a token (0: the current one). NULL when out of memory. */
static gset *level(gram_state *st, int d) {
    if (d == 0) return &st->cur;
    if (d > st->nlvl) {
        gset *l = realloc(st->lvl, (size_t)(d + 8) * sizeof *l);
        if (!l) return NULL;
        memset(l + st->nlvl, 0, (size_t)(d + 8 - st->nlvl) * sizeof *l);
        st->lvl = l;
        st->nlvl = d + 8;
    }
    return &st->lvl[d - 1];
}

gram_state *gram_state_new(const gram *g, const gram_vocab *v) {
    gram_state *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->g = g;
    st->v = v;
    st->st = malloc((GRAM_MAX_DEPTH + 2) * sizeof *st->st);
    st->hash_mark = calloc(HASH_SIZE, sizeof *st->hash_mark);
    st->hash_idx = malloc(HASH_SIZE * sizeof *st->hash_idx);
    if (!st->st || !st->hash_mark || !st->hash_idx || !level(st, v->max_len + 1)) {
        gram_state_free(st);
        return NULL;
    }
    set_begin(st, &st->cur);
    expand_rule(st, 0, (uint32_t)g->root, &st->cur, 0); /* the root's alternatives */
    return st;
}

void gram_state_free(gram_state *st) {
    if (!st) return;
    free(st->cur.buf), free(st->cur.at), free(st->cur.len);
    for (int i = 0; i < st->nlvl; i++) free(st->lvl[i].buf), free(st->lvl[i].at), free(st->lvl[i].len);
    free(st->lvl);
    free(st->st);
    free(st->hash_mark);
    free(st->hash_idx);
    free(st->spec_ok);
    free(st);
}

/* The set after token id's bytes from the current one: level(st, len) (an empty one where they are refused). */
static const gset *walk(gram_state *st, int32_t id) {
    const gram_vocab *v = st->v;
    const unsigned char *b = (const unsigned char *)v->bytes + v->off[id];
    const int n = v->len[id];
    for (int d = 0; d < n; d++) {
        accept_byte(st, level(st, d), b[d], level(st, d + 1));
        if (level(st, d + 1)->ns == 0) return level(st, d + 1);
    }
    return level(st, n);
}

int gram_allows(gram_state *st, int32_t id) {
    if (id < 0 || id >= st->v->n || st->dead) return 0;
    if (st->v->eog[id]) return can_end(&st->cur);
    if (st->v->len[id] == 0 || !special_ok(st, id)) return 0;
    return walk(st, id)->ns > 0;
}

int gram_mask(gram_state *st, uint8_t *allowed) {
    const gram_vocab *v = st->v;
    memset(allowed, 0, (size_t)v->n);
    if (st->dead) return 0;
    int count = 0;
    const int end_ok = can_end(&st->cur);
    for (int i = 0; i < v->n; i++)
        if (v->eog[i] && end_ok) allowed[i] = 1, count++;
    int have = 0, dead_at = 1 << 30; /* depths computed for the previous token; where its prefix died */
    for (int k = 0; k < v->n_order; k++) {
        const int id = v->order[k], n = v->len[id], l = v->lcp[k];
        if (have > l) have = l;
        if (dead_at <= have) continue; /* its prefix is refused */
        dead_at = 1 << 30;
        const unsigned char *b = (const unsigned char *)v->bytes + v->off[id];
        for (; have < n; have++) {
            gset *next = level(st, have + 1);
            accept_byte(st, level(st, have), b[have], next);
            if (next->ns == 0) {
                dead_at = ++have;
                break;
            }
        }
        if (dead_at > n && special_ok(st, id)) allowed[id] = 1, count++;
    }
    return count;
}

int gram_accept(gram_state *st, int32_t id) {
    if (id < 0 || id >= st->v->n || st->dead) return st->dead = 1, -1;
    if (st->v->eog[id]) return can_end(&st->cur) ? 0 : (st->dead = 1, -1);
    if (st->v->len[id] == 0 || !special_ok(st, id)) return st->dead = 1, -1;
    const gset *to = walk(st, id);
    if (to->ns == 0) return st->dead = 1, -1;
    /* the result becomes the current set (swap buffers with its level) */
    gset *l = level(st, st->v->len[id]), t = st->cur;
    st->cur = *l;
    *l = t;
    return 0;
}

int gram_accept_text(gram_state *st, const char *b, size_t n) {
    if (st->dead) return -1;
    for (size_t i = 0; i < n; i++) {
        gset *next = level(st, 1), t;
        accept_byte(st, &st->cur, (unsigned char)b[i], next);
        if (next->ns == 0) return st->dead = 1, -1;
        t = st->cur, st->cur = *next, *next = t;
    }
    return 0;
}

int gram_vocab_max_len(const gram_vocab *v) { return v->max_len; }

const char *gram_vocab_text(const gram_vocab *v, int32_t id, int *len) {
    if (id < 0 || id >= v->n) return *len = 0, "";
    *len = v->len[id];
    return v->bytes + v->off[id];
}

int gram_done(const gram_state *st) {
    if (st->dead) return 1;
    for (int i = 0; i < st->cur.ns; i++)
        if (st->cur.len[i] > 0) return 0;
    return st->cur.rem == 0;
}
