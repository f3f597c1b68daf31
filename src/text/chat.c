/*
 * chat.c - chat templates for loaded models (df_chat_apply_template, df_chat_render).
 *
 * The model's tokenizer.chat_template (or a caller's template) is rendered by
 * the Jinja engine (jinja.c) with the variables chat templates expect:
 * messages, add_generation_prompt, bos_token and eos_token (the texts of the
 * model's BOS/EOS tokens), then the caller's extra variables as a JSON object
 * (tools, enable_thinking, a messages list with tool calls, ...), which may
 * override any of them. See docs/chat.md.
 */
#include <stdlib.h>
#include <string.h>

#include "deltafin.h"
#include "jinja.h"
#include "model.h"
#include "util.h"

typedef struct jbuf {
    char *p;
    size_t n, cap;
    int bad;
} jbuf;

static void jb_raw(jbuf *b, const char *s) {
    size_t k = strlen(s);
    if (b->bad) return;
    if (b->n + k + 1 > b->cap) {
        size_t cap = (b->n + k + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->bad = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, k + 1);
    b->n += k;
}
static void jb_str(jbuf *b, const char *s) {
    if (b->bad) return;
    if (!s) { jb_raw(b, "null"); return; }
    if (jinja_json_quote(&b->p, &b->n, &b->cap, s, strlen(s)) != 0) b->bad = 1;
}

static const char *token_text(const df_model *m, int32_t id) {
    if (!m || !m->vocab || id < 0) return "";
    const char *t = tok_text(m->vocab, id);
    return t ? t : "";
}

int df_chat_render(const char *tmpl, const char *vars_json, char **out, char *err, size_t errlen) {
    if (!tmpl || !out) return df_seterr(err, errlen, "df_chat_render: no template or no output");
    const char *vars[1] = {vars_json};
    return jinja_render(tmpl, strlen(tmpl), vars, vars_json ? 1 : 0, NULL, out, err, errlen);
}

const char *df_chat_template(const df_model *m) {
    return m && m->g ? gguf_get_str(m->g, "tokenizer.chat_template") : NULL;
}

/* Common formats by name, as llama.cpp's --chat-template NAME writes them (src/llama-chat.cpp's built-in
 * formats, the same bytes), as Jinja so that they render through the one engine. */
static const struct { const char *name, *tmpl; } BUILTIN[] = {
    {"chatml", "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
               "{%- endfor %}{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}"},
    {"llama3", "{%- for m in messages %}{{ '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + "
               "(m.content | trim) + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}"
               "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"},
    {"phi3", "{%- for m in messages %}{{ '<|' + m.role + '|>\\n' + m.content + '<|end|>\\n' }}{%- endfor %}"
             "{%- if add_generation_prompt %}{{ '<|assistant|>\\n' }}{%- endif %}"},
    {"zephyr", "{%- for m in messages %}{{ '<|' + m.role + '|>\\n' + m.content + '<|endoftext|>\\n' }}"
               "{%- endfor %}{%- if add_generation_prompt %}{{ '<|assistant|>\\n' }}{%- endif %}"},
    {"gemma", "{%- set sys = namespace(p='') %}{%- for m in messages %}{%- if m.role == 'system' %}"
              "{%- set sys.p = sys.p + (m.content | trim) %}{%- else %}"
              "{%- set role = 'model' if m.role == 'assistant' else m.role %}{{ '<start_of_turn>' + role + '\\n' }}"
              "{%- if sys.p and role != 'model' %}{{ sys.p + '\\n\\n' }}{%- set sys.p = '' %}{%- endif %}"
              "{{ (m.content | trim) + '<end_of_turn>\\n' }}{%- endif %}{%- endfor %}"
              "{%- if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{%- endif %}"},
    {"mistral-v7", "{%- for m in messages %}{%- if m.role == 'system' %}{{ '[SYSTEM_PROMPT] ' + m.content + "
                   "'[/SYSTEM_PROMPT]' }}{%- elif m.role == 'user' %}{{ '[INST] ' + m.content + '[/INST]' }}"
                   "{%- else %}{{ ' ' + m.content + '</s>' }}{%- endif %}{%- endfor %}"},
    {"deepseek3", "{%- for m in messages %}{%- if m.role == 'system' %}{{ m.content + '\\n\\n' }}"
                  "{%- elif m.role == 'user' %}{{ '<｜User｜>' + m.content }}"
                  "{%- elif m.role == 'assistant' %}{{ '<｜Assistant｜>' + m.content + "
                  "'<｜end▁of▁sentence｜>' }}{%- endif %}"
                  "{%- endfor %}{%- if add_generation_prompt %}{{ '<｜Assistant｜>' }}"
                  "{%- endif %}"},
};

const char *df_chat_template_builtin(const char *name) {
    for (size_t i = 0; name && i < sizeof BUILTIN / sizeof BUILTIN[0]; i++)
        if (!strcmp(BUILTIN[i].name, name)) return BUILTIN[i].tmpl;
    return NULL;
}

const char *df_chat_template_builtin_name(int i) {
    return i >= 0 && (size_t)i < sizeof BUILTIN / sizeof BUILTIN[0] ? BUILTIN[i].name : NULL;
}

int df_chat_apply_template(const df_model *m, const char *template_override, const df_chat_message *msgs, int n_msgs,
                           int add_generation_prompt, const char *extra_vars_json, char **out, char *err,
                           size_t errlen) {
    if (!out) return df_seterr(err, errlen, "df_chat_apply_template: no output");
    *out = NULL;
    const char *tmpl = template_override ? template_override : df_chat_template(m);
    if (!tmpl)
        return df_seterr(err, errlen, "the model has no chat template (tokenizer.chat_template); pass one explicitly");
    if (n_msgs < 0 || (n_msgs > 0 && !msgs)) return df_seterr(err, errlen, "df_chat_apply_template: bad message list");
    jbuf b = {0};
    jb_raw(&b, "{\"messages\": [");
    for (int i = 0; i < n_msgs; i++) {
        jb_raw(&b, i ? ", {\"role\": " : "{\"role\": ");
        jb_str(&b, msgs[i].role ? msgs[i].role : "user");
        jb_raw(&b, ", \"content\": ");
        jb_str(&b, msgs[i].content ? msgs[i].content : "");
        jb_raw(&b, "}");
    }
    jb_raw(&b, "], \"add_generation_prompt\": ");
    jb_raw(&b, add_generation_prompt ? "true" : "false");
    jb_raw(&b, ", \"bos_token\": ");
    jb_str(&b, token_text(m, m && m->vocab ? tok_bos(m->vocab) : -1));
    jb_raw(&b, ", \"eos_token\": ");
    jb_str(&b, token_text(m, m && m->vocab ? tok_eos(m->vocab) : -1));
    jb_raw(&b, "}");
    if (b.bad) {
        free(b.p);
        return df_seterr(err, errlen, "out of memory");
    }
    const char *vars[2] = {b.p, extra_vars_json};
    int rc = jinja_render(tmpl, strlen(tmpl), vars, extra_vars_json ? 2 : 1, NULL, out, err, errlen);
    free(b.p);
    return rc;
}
