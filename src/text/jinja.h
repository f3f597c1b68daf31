/*
 * jinja.h - a small Jinja-subset template engine for chat templates.
 *
 * It renders a model's tokenizer.chat_template exactly as Hugging Face's
 * reference implementation (@huggingface/jinja 0.5.x, the one transformers.js
 * and the HF Hub use) does: the same whitespace handling (trim_blocks and
 * lstrip_blocks on, one trailing newline dropped), the same value printing
 * (true, null, 1.0, JSON for lists and dicts), the same filters, tests and
 * methods, the same errors for what it does not support. See docs/chat.md.
 *
 * Variables come in as JSON objects (vars_json[0..n_vars), later ones
 * override earlier keys): JSON numbers that are integral become integers, as
 * JavaScript's do. The output is a malloc'd NUL-terminated string.
 */
#ifndef DF_JINJA_H
#define DF_JINJA_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* A render's working memory at most (its arena; an arena is not reused within a render, so a long loop uses it up):
 * 128 MiB holds a prompt far longer than any context, and bounds what one request costs a server. */
#define JINJA_MAX_MEMORY ((size_t)128 << 20)

typedef struct jinja_opts {
    time_t now;              /* strftime_now's clock (0: the current time); local time */
    size_t max_output;       /* output bytes (0: 64 MiB) */
    size_t max_memory;       /* bytes of working memory (0: JINJA_MAX_MEMORY) */
    uint64_t max_steps;      /* evaluation steps (0: 50 million) */
} jinja_opts;

/* Render template text tmpl (tmpl_len bytes) with the variables of the JSON
 * objects vars_json[0..n_vars). 0 and *out (free() it), or -1 and a one-line
 * reason naming the template line. opts may be NULL. */
int jinja_render(const char *tmpl, size_t tmpl_len, const char *const *vars_json, int n_vars,
                 const jinja_opts *opts, char **out, char *err, size_t errlen);

/* Append s (len bytes) to *buf as a JSON string literal (with quotes), as
 * JSON.stringify writes it. *buf is malloc'd and grown; 0 or -1 (no memory). */
int jinja_json_quote(char **buf, size_t *len, size_t *cap, const char *s, size_t slen);

#endif
