/*
 * oai.c - OpenAI-compatible requests and responses for `deltafin serve`.
 *
 * oai_parse checks a /v1/chat/completions or /v1/completions body field by
 * field (a wrong type or range is a 400 naming the field, as OpenAI's
 * errors do), renders a chat with the model's template (or
 * --chat-template-file) through df_chat_apply_template, and tokenizes the
 * prompt; one that leaves no room in the context is a 400
 * (context_length_exceeded). The builders turn jobs' output into response
 * objects, streaming chunks and usage, with cJSON; the text they carry is
 * made valid UTF-8 and held back at a stop string's possible start as
 * text.c says, and the fields are read as fields.c reads them.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

/* ---- errors (the type and its JSON: fields.c) ---- */

#define BAD(...) oai_bad_request(e, __VA_ARGS__) /* a 400 naming the field (fields.c) */

/* ---- prompts ---- */

/* text as the prompt's tokens (a BOS first where the model wants one, and one only) into r. */
static int tokenize_text(const oai_ctx *c, const char *text, size_t len, oai_req *r, oai_error *e) {
    char err[512];
    int need = 0;
    if (df_tokenize(c->m, text, len, 1, 1, NULL, 0, &need, err, sizeof err) != 0 && need == 0)
        return BAD("prompt", NULL, "cannot tokenize the prompt: %s", err);
    r->prompt = malloc((size_t)(need + 1) * sizeof(int32_t));
    if (!r->prompt) return oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
    if (df_tokenize(c->m, text, len, 1, 1, r->prompt, need + 1, &r->n_prompt, err, sizeof err) != 0)
        return BAD("prompt", NULL, "cannot tokenize the prompt: %s", err);
    /* a template that writes bos_token itself: one BOS, not two (as llama.cpp) */
    const int32_t bos = df_token_bos(c->m);
    if (r->n_prompt >= 2 && bos >= 0 && r->prompt[0] == bos && r->prompt[1] == bos) {
        memmove(r->prompt, r->prompt + 1, (size_t)(r->n_prompt - 1) * sizeof(int32_t));
        r->n_prompt--;
    }
    return 0;
}

static int tokenize(const oai_ctx *c, const char *text, size_t len, oai_req *r, oai_error *e) {
    /* every token holds at most max_piece bytes: a longer text cannot fit, and is not tokenized to learn it */
    if (c->max_piece > 0 && len / (size_t)c->max_piece >= (size_t)c->n_ctx)
        return oai_set_error(e, 400, "invalid_request_error", NULL, "context_length_exceeded",
                             "the prompt (%zu bytes, at least %zu tokens) does not fit in the context of %d tokens",
                             len, len / (size_t)c->max_piece, c->n_ctx), -1;
    return tokenize_text(c, text, len, r, e);
}

int oai_tokenize_text(const oai_ctx *c, const char *text, size_t len, int32_t **toks, int *n, oai_error *e) {
    oai_req r;
    memset(&r, 0, sizeof r);
    const int rc = tokenize(c, text, len, &r, e);
    if (rc) free(r.prompt), r.prompt = NULL, r.n_prompt = 0;
    *toks = r.prompt;
    *n = r.n_prompt;
    return rc;
}

static int completion_prompt(const oai_ctx *c, cJSON *body, oai_req *r, oai_error *e) {
    cJSON *p = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    if (!p) return BAD("prompt", NULL, "'prompt' is required");
    if (cJSON_IsString(p)) return tokenize(c, p->valuestring, strlen(p->valuestring), r, e);
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) == 0)
        return BAD("prompt", NULL, "'prompt' must be a string, an array of one string or an array of token ids");
    cJSON *first = cJSON_GetArrayItem(p, 0);
    if (cJSON_IsString(first)) {
        if (cJSON_GetArraySize(p) != 1)
            return BAD("prompt", NULL, "several prompts in one request are not supported: send one request each");
        return tokenize(c, first->valuestring, strlen(first->valuestring), r, e);
    }
    const int n = cJSON_GetArraySize(p), nv = df_n_vocab(c->m);
    r->prompt = malloc((size_t)n * sizeof(int32_t));
    if (!r->prompt) return oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
    cJSON *t;
    r->n_prompt = 0;
    cJSON_ArrayForEach(t, p) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble >= nv)
            return BAD("prompt", NULL, "'prompt' token ids must be integers in [0, %d)", nv);
        r->prompt[r->n_prompt++] = (int32_t)t->valuedouble;
    }
    return 0;
}

/* The text of a message's content: a string, null, or an array of
 * {"type":"text","text":...} parts (joined). */
static int content_text(cJSON *content, int i, cJSON **out, oai_error *e) {
    if (!content || cJSON_IsNull(content) || cJSON_IsString(content)) return *out = NULL, 0;
    if (!cJSON_IsArray(content)) return BAD("messages", NULL, "messages[%d].content must be a string or an array", i);
    size_t len = 0;
    cJSON *part;
    cJSON_ArrayForEach(part, content) {
        cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type"), *tx = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(tx))
            return BAD("messages", NULL, "messages[%d].content: only parts of type \"text\" are supported", i);
        len += strlen(tx->valuestring);
    }
    char *buf = malloc(len + 1), *p = buf;
    if (!buf) return oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
    cJSON_ArrayForEach(part, content) {
        const char *s = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        memcpy(p, s, strlen(s));
        p += strlen(s);
    }
    *p = 0;
    *out = cJSON_CreateString(buf);
    free(buf);
    return 0;
}

/* Whether the template knows no tool format and the request lets the model call tools: it is then told how. */
static int generic_tools(const oai_ctx *c, cJSON *body) {
    const cJSON *choice = cJSON_GetObjectItemCaseSensitive(body, "tool_choice");
    if (cJSON_IsString(choice) && !strcmp(choice->valuestring, "none")) return 0;
    return df_tool_format_detect(c->tmpl ? c->tmpl : df_chat_template(c->m)) == DF_TOOLS_GENERIC;
}

/* The generic tool format (src/text/toolcall.c) told to the model in a system message: the tools and the one
 * JSON form of a call. */
static int tell_tools(cJSON *msgs, const cJSON *tools, oai_error *e) {
    char *tj = cJSON_PrintUnformatted(tools);
    if (!tj) return oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
    static const char head[] = "You can call these tools (each with a JSON Schema of its parameters):\n";
    static const char tail[] = "\nTo call tools, answer with only a JSON object: {\"tool_calls\": [{\"name\": "
                               "\"<the tool's name>\", \"arguments\": {<its arguments>}}]}. Otherwise answer normally.";
    cJSON *first = cJSON_GetArrayItem(msgs, 0), *role = cJSON_GetObjectItemCaseSensitive(first, "role");
    cJSON *content = cJSON_GetObjectItemCaseSensitive(first, "content");
    const int sys = cJSON_IsString(role) && !strcmp(role->valuestring, "system") && cJSON_IsString(content);
    const char *had = sys ? content->valuestring : "";
    char *text = malloc(strlen(had) + 2 + sizeof head + strlen(tj) + sizeof tail);
    if (!text) return cJSON_free(tj), oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
    sprintf(text, "%s%s%s%s%s", had, *had ? "\n\n" : "", head, tj, tail);
    cJSON_free(tj);
    if (sys) {
        cJSON_ReplaceItemInObjectCaseSensitive(first, "content", cJSON_CreateString(text));
    } else {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "system");
        cJSON_AddStringToObject(m, "content", text);
        cJSON_InsertItemInArray(msgs, 0, m);
    }
    free(text);
    return 0;
}

/* The conversation of body (messages, tools, chat_template_kwargs) rendered with the template: *out malloc'd. */
static int render_chat(const oai_ctx *c, cJSON *body, char **out, oai_error *e) {
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(body, "messages");
    if (!msgs) return BAD("messages", NULL, "'messages' is required");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return BAD("messages", NULL, "'messages' must be a non-empty array");
    if (!c->tmpl && !df_chat_template(c->m))
        return BAD("messages", "no_chat_template",
                   "the model has no chat template (tokenizer.chat_template); start the server with "
                   "--chat-template-file FILE, or use /v1/completions");
    cJSON *vars = cJSON_CreateObject(), *list = cJSON_Duplicate(msgs, 1);
    cJSON_AddItemToObject(vars, "messages", list);
    int i = 0, rc = 0;
    cJSON *m;
    cJSON_ArrayForEach(m, list) {
        cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"), *txt = NULL;
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            rc = BAD("messages", NULL, "messages[%d] must be an object with a string 'role'", i);
            break;
        }
        if ((rc = content_text(cJSON_GetObjectItemCaseSensitive(m, "content"), i, &txt, e)) != 0) break;
        if (txt) cJSON_ReplaceItemInObjectCaseSensitive(m, "content", txt);
        i++;
    }
    cJSON *tools = cJSON_GetObjectItemCaseSensitive(body, "tools");
    if (!rc && tools && !cJSON_IsNull(tools)) {
        if (!cJSON_IsArray(tools)) rc = BAD("tools", NULL, "'tools' must be an array");
        else cJSON_AddItemToObject(vars, "tools", cJSON_Duplicate(tools, 1));
    }
    if (!rc && cJSON_GetArraySize(tools) > 0 && generic_tools(c, body)) rc = tell_tools(list, tools, e);
    const cJSON *effort = cJSON_GetObjectItemCaseSensitive(body, "reasoning_effort"); /* gpt-oss's templates read it */
    if (!rc && cJSON_IsString(effort)) cJSON_AddStringToObject(vars, "reasoning_effort", effort->valuestring);
    cJSON *kw = cJSON_GetObjectItemCaseSensitive(body, "chat_template_kwargs"), *it;
    cJSON *dkw = c->kwargs ? cJSON_Parse(c->kwargs) : NULL; /* the server's, checked when it started */
    cJSON_ArrayForEach(it, dkw) {
        cJSON_DeleteItemFromObjectCaseSensitive(vars, it->string);
        cJSON_AddItemToObject(vars, it->string, cJSON_Duplicate(it, 1));
    }
    cJSON_Delete(dkw);
    if (!rc && kw && !cJSON_IsNull(kw)) {
        if (!cJSON_IsObject(kw)) rc = BAD("chat_template_kwargs", NULL, "'chat_template_kwargs' must be an object");
        else
            cJSON_ArrayForEach(it, kw) {
                cJSON_DeleteItemFromObjectCaseSensitive(vars, it->string);
                cJSON_AddItemToObject(vars, it->string, cJSON_Duplicate(it, 1));
            }
    }
    char *vj = rc ? NULL : cJSON_PrintUnformatted(vars);
    cJSON_Delete(vars);
    if (rc) return rc;
    if (!vj) return oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
    char err[512];
    rc = df_chat_apply_template(c->m, c->tmpl, NULL, 0, 1, vj, out, err, sizeof err);
    cJSON_free(vj);
    if (rc != 0) return BAD("messages", "template_error", "the chat template failed: %s", err);
    return 0;
}

static int chat_prompt(const oai_ctx *c, cJSON *body, oai_req *r, oai_error *e) {
    char *text = NULL;
    if (render_chat(c, body, &text, e) != 0) return -1;
    r->think_open = srv_opens_think(text, &r->think_kind);
    if (!r->think_open && df_tool_format_detect(c->tmpl ? c->tmpl : df_chat_template(c->m)) == DF_TOOLS_KIMI_K3)
        r->think_kind = 1; /* its output may still open a think section of its own */
    const int rc = tokenize(c, text, strlen(text), r, e);
    free(text);
    return rc;
}

static int parse_stop(cJSON *body, oai_req *r, oai_error *e) {
    cJSON *st = cJSON_GetObjectItemCaseSensitive(body, "stop"), *it;
    if (!st || cJSON_IsNull(st)) return 0;
    if (cJSON_IsString(st)) {
        if (strlen(st->valuestring) > SRV_MAX_STOP_LEN)
            return BAD("stop", NULL, "a stop string is at most %d bytes", SRV_MAX_STOP_LEN);
        if (*st->valuestring) r->stop[r->n_stop++] = strdup(st->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(st) || cJSON_GetArraySize(st) > SRV_MAX_STOP)
        return BAD("stop", NULL, "'stop' must be a string or an array of at most %d strings", SRV_MAX_STOP);
    cJSON_ArrayForEach(it, st) {
        if (!cJSON_IsString(it)) return BAD("stop", NULL, "'stop' must hold strings");
        if (strlen(it->valuestring) > SRV_MAX_STOP_LEN)
            return BAD("stop", NULL, "a stop string is at most %d bytes", SRV_MAX_STOP_LEN);
        if (*it->valuestring) r->stop[r->n_stop++] = strdup(it->valuestring);
    }
    return 0;
}

static int parse_logprobs(cJSON *body, int chat, oai_req *r, oai_error *e) {
    long k = -1;
    if (chat) {
        int on = 0;
        if (oai_get_bool(body, "logprobs", &on, e)) return -1;
        long top = 0;
        if (oai_get_int(body, "top_logprobs", 0, SRV_MAX_TOP_LOGPROBS, &top, e)) return -1;
        if (cJSON_GetObjectItemCaseSensitive(body, "top_logprobs") && !on &&
            !cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(body, "top_logprobs")))
            return BAD("top_logprobs", NULL, "'top_logprobs' needs 'logprobs': true");
        if (on) k = top;
    } else if (oai_get_int(body, "logprobs", 0, SRV_MAX_TOP_LOGPROBS, &k, e)) {
        return -1;
    }
    r->logprobs = (int)k;
    return 0;
}

static uint64_t fresh_seed(void) {
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20)) + __atomic_add_fetch(&counter, 7919, __ATOMIC_RELAXED);
}

cJSON *oai_parse_object(const oai_ctx *c, const char *body, size_t len, oai_error *e) {
    long values = 0;
    if (!body) body = "", len = 0;
    if (srv_json_scan(body, len, &values)) return BAD(NULL, "invalid_json", "a string holds a NUL character (\\u0000)"), NULL;
    if (values > c->max_values)
        return oai_set_error(e, 413, "invalid_request_error", NULL, "request_too_large",
                             "the body holds more than %ld JSON values", c->max_values), NULL;
    cJSON *b = cJSON_ParseWithLength(body, len);
    if (!b) return BAD(NULL, "invalid_json", "the body is not valid JSON"), NULL;
    if (!cJSON_IsObject(b)) {
        cJSON_Delete(b);
        return BAD(NULL, "invalid_json", "the body must be a JSON object"), NULL;
    }
    return b;
}

/* A JSON Schema (a cJSON value) as r's grammar; 400 naming param when it cannot be compiled. */
static int schema_grammar(const cJSON *schema, const char *param, oai_req *r, oai_error *e) {
    char *text = cJSON_PrintUnformatted(schema), err[512];
    if (!text) return oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
    const int rc = df_json_schema_to_grammar(text, strlen(text), &r->gbnf, err, sizeof err);
    cJSON_free(text);
    if (rc != DF_OK) return BAD(param, "invalid_schema", "the JSON Schema cannot be used: %s", err);
    return 0;
}

/* The output's constraint: llama-server's grammar (GBNF) or json_schema, or OpenAI's response_format
 * (json_object, json_schema); at most one. The grammar is checked here (a 400 naming the field), and each job
 * makes its own (oai_make_jobs). */
static int parse_format(const oai_ctx *c, cJSON *body, oai_req *r, oai_error *e) {
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(body, "grammar");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(body, "json_schema");
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(body, "response_format");
    if (g && cJSON_IsNull(g)) g = NULL;
    if (js && cJSON_IsNull(js)) js = NULL;
    if (rf && cJSON_IsNull(rf)) rf = NULL;
    const cJSON *type = rf ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
    if (rf && (!cJSON_IsObject(rf) || !cJSON_IsString(type)))
        return BAD("response_format", NULL, "'response_format' must be an object with a string 'type'");
    if (rf && !strcmp(type->valuestring, "text")) rf = NULL;
    if ((g != NULL) + (js != NULL) + (rf != NULL) > 1)
        return BAD(g ? "grammar" : "json_schema", NULL, "give one of 'grammar', 'json_schema' and 'response_format'");
    r->m = c->m;
    if (g) {
        if (!cJSON_IsString(g)) return BAD("grammar", NULL, "'grammar' must be a string (GBNF)");
        if (!(r->gbnf = strdup(g->valuestring))) return oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
    } else if (js) {
        if (schema_grammar(js, "json_schema", r, e)) return -1;
    } else if (rf && !strcmp(type->valuestring, "json_object")) {
        cJSON *any = cJSON_CreateObject();
        cJSON_AddStringToObject(any, "type", "object");
        const int rc = schema_grammar(any, "response_format", r, e);
        cJSON_Delete(any);
        if (rc) return -1;
    } else if (rf && !strcmp(type->valuestring, "json_schema")) {
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
        const cJSON *sc = cJSON_IsObject(w) ? cJSON_GetObjectItemCaseSensitive(w, "schema") : NULL;
        if (!sc) return BAD("response_format", NULL, "'response_format.json_schema.schema' is required");
        if (schema_grammar(sc, "response_format", r, e)) return -1;
    } else if (rf) {
        return BAD("response_format", NULL, "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    }
    if (!r->gbnf) return 0;
    df_grammar *check = NULL;
    char err[512];
    const int rc = df_grammar_new(c->m, r->gbnf, strlen(r->gbnf), &check, err, sizeof err);
    df_grammar_free(check);
    if (rc == DF_E_NOMEM) return oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
    if (rc != DF_OK) return BAD(g ? "grammar" : js ? "json_schema" : "response_format", "invalid_grammar", "%s", err);
    return 0;
}

/* Every field a request may hold (docs/server.md, "Requests"): each is implemented, or is one of OpenAI's hints
 * (user, metadata, store, service_tier, safety_identifier, prompt_cache_key) or llama-server's (cache_prompt),
 * accepted with no effect; any other is a 400 naming it, never ignored in silence. */
static const char *const known_fields[] = {
    "model", "messages", "prompt", "max_tokens", "max_completion_tokens", "n", "temperature", "top_p", "min_p",
    "top_k", "repeat_penalty", "presence_penalty", "frequency_penalty", "seed", "stop", "stream", "stream_options",
    "logprobs", "top_logprobs", "logit_bias", "echo", "tools", "tool_choice", "parallel_tool_calls", "response_format",
    "grammar", "json_schema", "chat_template_kwargs", "reasoning_format", "reasoning_effort", "ignore_eos",
    "best_of", "suffix", "typical_p", "mirostat", "modalities",
    /* hints */
    "user", "metadata", "store", "service_tier", "safety_identifier", "prompt_cache_key", "cache_prompt", NULL};

/* Fields known but only their neutral values are served: best_of (n), suffix (none), typical_p (1), mirostat (0),
 * modalities (text); unknown fields. tools, tool_choice and parallel_tool_calls: tools.c. */
static int check_fields(cJSON *b, int chat, const oai_req *r, oai_error *e) {
    const cJSON *v;
    cJSON_ArrayForEach(v, b) {
        int known = 0;
        for (int i = 0; known_fields[i]; i++) known |= !strcmp(v->string, known_fields[i]);
        if (!known) return BAD(v->string, "unknown_parameter", "Unrecognized request argument supplied: %.60s", v->string);
        if (cJSON_IsNull(v)) continue;
        const char *k = v->string;
        if (!strcmp(k, "best_of") && !(cJSON_IsNumber(v) && (v->valuedouble == 1 || v->valuedouble == r->n)))
            return BAD(k, NULL, "'best_of' other than 'n' is not supported (every choice is returned)");
        if (!strcmp(k, "suffix") && !(cJSON_IsString(v) && !*v->valuestring))
            return BAD(k, NULL, "'suffix' (fill in the middle) is not supported");
        if (!strcmp(k, "typical_p") && !(cJSON_IsNumber(v) && v->valuedouble >= 1))
            return BAD(k, NULL, "'typical_p' sampling is not supported (1: off)");
        if (!strcmp(k, "mirostat") && !(cJSON_IsNumber(v) && v->valuedouble == 0))
            return BAD(k, NULL, "'mirostat' sampling is not supported (0: off)");
        if (!strcmp(k, "modalities") &&
            !(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 1 && cJSON_IsString(v->child) && !strcmp(v->child->valuestring, "text")))
            return BAD(k, NULL, "only the 'text' modality is supported");
        if (!strcmp(k, "echo") && chat) return BAD(k, NULL, "'echo' is for /v1/completions");
        if (!chat && (!strcmp(k, "tools") || !strcmp(k, "tool_choice")))
            return BAD(k, NULL, "'%s' is for /v1/chat/completions", k);
        if (!strcmp(k, "reasoning_effort") && !cJSON_IsString(v)) return BAD(k, NULL, "'reasoning_effort' must be a string");
    }
    return 0;
}

/* logit_bias: {"TOKEN_ID": BIAS, ...}, biases in [-100, 100]. */
static int parse_logit_bias(const oai_ctx *c, cJSON *body, oai_req *r, oai_error *e) {
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(body, "logit_bias"), *v;
    if (!lb || cJSON_IsNull(lb)) return 0;
    if (!cJSON_IsObject(lb)) return BAD("logit_bias", NULL, "'logit_bias' must be an object of token ids and biases");
    const int n = cJSON_GetArraySize(lb), nv = df_n_vocab(c->m);
    if (n > 1024) return BAD("logit_bias", NULL, "'logit_bias' holds at most 1024 tokens");
    r->bias_id = malloc((size_t)(n ? n : 1) * sizeof *r->bias_id);
    r->bias = malloc((size_t)(n ? n : 1) * sizeof *r->bias);
    if (!r->bias_id || !r->bias) return oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
    cJSON_ArrayForEach(v, lb) {
        char *end;
        const long id = strtol(v->string, &end, 10);
        if (*end || end == v->string || id < 0 || id >= nv)
            return BAD("logit_bias", NULL, "'logit_bias' keys are token ids in [0, %d), not '%.40s'", nv, v->string);
        if (!cJSON_IsNumber(v) || v->valuedouble < -100 || v->valuedouble > 100)
            return BAD("logit_bias", NULL, "'logit_bias' biases are numbers in [-100, 100]");
        r->bias_id[r->n_bias] = (int32_t)id;
        r->bias[r->n_bias++] = (float)v->valuedouble;
    }
    return 0;
}

/* echo: the prompt's text as given (a string), or its tokens' pieces. */
static int echo_text(const oai_ctx *c, cJSON *body, oai_req *r) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(body, "prompt");
    if (cJSON_IsArray(p) && cJSON_IsString(p->child)) p = p->child;
    if (cJSON_IsString(p)) return (r->echo_text = strdup(p->valuestring)) ? 0 : -1;
    size_t cap = (size_t)r->n_prompt * 16 + 1, n = 0;
    if (!(r->echo_text = malloc(cap))) return -1;
    for (int i = 0; i < r->n_prompt; i++) {
        char buf[256];
        int k = df_token_to_piece(c->m, r->prompt[i], buf, sizeof buf);
        if (k < 0 || k > (int)sizeof buf) k = 0;
        if (n + (size_t)k + 1 > cap) {
            char *t = realloc(r->echo_text, cap = 2 * (n + (size_t)k + 1));
            if (!t) return -1;
            r->echo_text = t;
        }
        memcpy(r->echo_text + n, buf, (size_t)k);
        n += (size_t)k;
    }
    r->echo_text[n] = 0;
    return 0;
}

int oai_parse(const oai_ctx *c, const char *body, size_t len, int chat, oai_req *r, oai_error *e) {
    memset(r, 0, sizeof *r);
    r->chat = chat;
    r->n = 1;
    r->logprobs = -1;
    r->max_tokens = -1;
    r->sp = df_sampler_default_params();
    r->sp.temp = 1.0f;
    r->sp.top_k = 0;
    r->sp.top_p = 1.0f;
    r->sp.min_p = 0.0f;
    r->sp.repeat_penalty = 1.0f;
    cJSON *b = oai_parse_object(c, body, len, e);
    if (!b) return -1;
    int rc = -1;
    long l;
    double d;
    cJSON *model = cJSON_GetObjectItemCaseSensitive(b, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) {
            BAD("model", NULL, "'model' must be a string");
            goto out;
        }
        if (c->strict_model && strcmp(model->valuestring, c->name)) { /* else the one model answers any name */
            oai_set_error(e, 404, "invalid_request_error", "model", "model_not_found",
                          "The model '%.200s' does not exist (this server has '%.200s')", model->valuestring, c->name);
            goto out;
        }
    }
    if (oai_get_bool(b, "stream", &r->stream, e) || oai_get_bool(b, "ignore_eos", &r->ignore_eos, e)) goto out;
    cJSON *so = cJSON_GetObjectItemCaseSensitive(b, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) {
            BAD("stream_options", NULL, "'stream_options' must be an object");
            goto out;
        }
        if (oai_get_bool(so, "include_usage", &r->include_usage, e)) goto out;
    }
    l = -1;
    if (oai_get_int(b, "max_tokens", 0, 1 << 24, &l, e) || oai_get_int(b, "max_completion_tokens", 0, 1 << 24, &l, e)) goto out;
    r->max_tokens = (int)l;
    l = 1;
    if (oai_get_int(b, "n", 1, 16, &l, e)) goto out;
    r->n = (int)l;
    d = 1.0;
    if (oai_get_num(b, "temperature", 0, 2, &d, e)) goto out;
    r->sp.temp = (float)d;
    d = 1.0;
    if (oai_get_num(b, "top_p", 0, 1, &d, e)) goto out;
    r->sp.top_p = (float)d;
    d = 0.0;
    if (oai_get_num(b, "min_p", 0, 1, &d, e)) goto out;
    r->sp.min_p = (float)d;
    l = 0;
    if (oai_get_int(b, "top_k", 0, 1 << 24, &l, e)) goto out;
    r->sp.top_k = (int)l;
    d = 1.0;
    if (oai_get_num(b, "repeat_penalty", 0.01, 100, &d, e)) goto out;
    r->sp.repeat_penalty = (float)d;
    d = 0.0;
    if (oai_get_num(b, "presence_penalty", -2, 2, &d, e)) goto out;
    r->sp.presence_penalty = (float)d;
    d = 0.0;
    if (oai_get_num(b, "frequency_penalty", -2, 2, &d, e)) goto out;
    r->sp.frequency_penalty = (float)d;
    if (oai_get_bool(b, "echo", &r->echo, e)) goto out;
    cJSON *seed = cJSON_GetObjectItemCaseSensitive(b, "seed");
    r->seed_set = seed && !cJSON_IsNull(seed);
    l = 0;
    if (oai_get_int(b, "seed", -(1L << 53), 1L << 53, &l, e)) goto out;
    r->sp.seed = r->seed_set ? (uint64_t)l : fresh_seed();
    if (check_fields(b, chat, r, e) || parse_stop(b, r, e) || parse_logprobs(b, chat, r, e) || parse_format(c, b, r, e) ||
        parse_logit_bias(c, b, r, e))
        goto out;
    cJSON *rfm = cJSON_GetObjectItemCaseSensitive(b, "reasoning_format");
    r->reasoning = chat;
    if (rfm && !cJSON_IsNull(rfm)) { /* llama-server's: "none" keeps <think> in the content */
        if (!cJSON_IsString(rfm) || (strcmp(rfm->valuestring, "none") && strcmp(rfm->valuestring, "auto") &&
                                     strcmp(rfm->valuestring, "deepseek"))) {
            BAD("reasoning_format", NULL, "'reasoning_format' must be \"auto\", \"deepseek\" or \"none\"");
            goto out;
        }
        r->reasoning = chat && strcmp(rfm->valuestring, "none");
    }
    if ((chat ? chat_prompt(c, b, r, e) : completion_prompt(c, b, r, e)) != 0) goto out;
    if (chat && tools_parse(c, b, r, e) != 0) goto out;
    if (r->n_prompt == 0) {
        BAD(chat ? "messages" : "prompt", NULL, "the prompt is empty");
        goto out;
    }
    if (r->echo && r->logprobs >= 0) {
        BAD("echo", NULL, "'echo' with 'logprobs' (the prompt's own logprobs) is not supported");
        goto out;
    }
    if (r->echo && echo_text(c, b, r) != 0) {
        oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
        goto out;
    }
    if (r->n_prompt >= c->n_ctx) {
        BAD(chat ? "messages" : "prompt", "context_length_exceeded",
            "This model's context is %d tokens; the prompt has %d (leave room for at least one generated token)",
            c->n_ctx, r->n_prompt);
        goto out;
    }
    const int room = c->n_ctx - r->n_prompt;
    if (r->max_tokens < 0 || r->max_tokens > room) r->max_tokens = room;
    rc = 0;
out:
    cJSON_Delete(b);
    if (rc) oai_req_free(r);
    return rc;
}

void oai_req_free(oai_req *r) {
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    r->n_stop = 0;
    free(r->prompt);
    r->prompt = NULL;
    free(r->gbnf);
    r->gbnf = NULL;
    free(r->bias_id), free(r->bias);
    r->bias_id = NULL, r->bias = NULL, r->n_bias = 0;
    free(r->echo_text);
    r->echo_text = NULL;
    free(r->tools_json);
    r->tools_json = NULL;
}

srv_job **oai_make_jobs(const oai_req *r) {
    srv_job **jobs = calloc((size_t)r->n, sizeof *jobs);
    if (!jobs) return NULL;
    for (int i = 0; i < r->n; i++) {
        srv_job *j = jobs[i] = srv_job_new(r->prompt, r->n_prompt);
        if (!j) goto fail;
        j->sp = r->sp;
        j->sp.seed = r->sp.seed + (uint64_t)i;
        j->max_tokens = r->max_tokens;
        j->logprobs = r->logprobs;
        j->ignore_eos = r->ignore_eos;
        char err[256];
        if (r->gbnf && df_grammar_new(r->m, r->gbnf, strlen(r->gbnf), &j->grammar, err, sizeof err) != DF_OK) goto fail;
        if (j->grammar && r->n_keep && df_grammar_allow_tokens(j->grammar, r->keep, r->n_keep) != DF_OK) goto fail;
        if (r->n_bias && (!(j->bias_id = malloc((size_t)r->n_bias * sizeof *j->bias_id)) ||
                          !(j->bias = malloc((size_t)r->n_bias * sizeof *j->bias))))
            goto fail;
        if (r->n_bias) {
            memcpy(j->bias_id, r->bias_id, (size_t)r->n_bias * sizeof *j->bias_id);
            memcpy(j->bias, r->bias, (size_t)r->n_bias * sizeof *j->bias);
            j->n_bias = r->n_bias;
        }
        for (int k = 0; k < r->n_stop; k++)
            if (!(j->stop[j->n_stop++] = strdup(r->stop[k]))) goto fail;
        memcpy(j->keep, r->keep, sizeof j->keep);
        memcpy(j->trigger, r->trigger, sizeof j->trigger);
        j->n_keep = r->n_keep;
    }
    return jobs;
fail:
    for (int i = 0; i < r->n; i++) srv_job_free(jobs[i]);
    free(jobs);
    return NULL;
}

/* ---- responses ---- */

const char *oai_finish_name(int finish) {
    return finish == FIN_STOP ? "stop" : finish == FIN_LENGTH ? "length" : finish == FIN_TOOL_CALLS ? "tool_calls"
         : finish == FIN_NONE ? NULL : "error";
}

static cJSON *clean_string(const char *s, size_t n) {
    char *c = srv_utf8_clean(s, n);
    cJSON *v = cJSON_CreateString(c ? c : "");
    free(c);
    return v;
}

static cJSON *piece_json(const oai_ctx *c, int32_t id, cJSON **bytes) {
    char buf[512];
    int n = df_token_to_piece(c->m, id, buf, sizeof buf);
    n = n < 0 ? 0 : n > (int)sizeof buf ? (int)sizeof buf : n;
    if (bytes) {
        *bytes = cJSON_CreateArray();
        for (int i = 0; i < n; i++) cJSON_AddItemToArray(*bytes, cJSON_CreateNumber((unsigned char)buf[i]));
    }
    return clean_string(buf, (size_t)n);
}

/* Logprobs of the tokens whose text starts before the job's (stop-cut) end. */
static cJSON *logprobs_json(const oai_ctx *c, const oai_req *r, const srv_job *j) {
    if (r->logprobs < 0) return cJSON_CreateNull();
    cJSON *lp = cJSON_CreateObject();
    cJSON *content = NULL, *toks = NULL, *tlp = NULL, *top = NULL, *offs = NULL;
    if (r->chat) content = cJSON_AddArrayToObject(lp, "content");
    else {
        toks = cJSON_AddArrayToObject(lp, "tokens");
        tlp = cJSON_AddArrayToObject(lp, "token_logprobs");
        top = cJSON_AddArrayToObject(lp, "top_logprobs");
        offs = cJSON_AddArrayToObject(lp, "text_offset");
    }
    size_t off = 0;
    for (int i = 0; i < j->n_lps && off < j->len; i++) {
        const srv_logprob *p = &j->lps[i];
        char buf[512];
        int pn = df_token_to_piece(c->m, p->id, buf, sizeof buf);
        pn = pn < 0 ? 0 : pn > (int)sizeof buf ? (int)sizeof buf : pn;
        if (r->chat) {
            cJSON *e = cJSON_CreateObject(), *bytes;
            cJSON_AddItemToObject(e, "token", piece_json(c, p->id, &bytes));
            cJSON_AddNumberToObject(e, "logprob", p->lp);
            cJSON_AddItemToObject(e, "bytes", bytes);
            cJSON *alts = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int k = 0; k < p->n_top; k++) {
                cJSON *a = cJSON_CreateObject(), *ab;
                cJSON_AddItemToObject(a, "token", piece_json(c, p->top_id[k], &ab));
                cJSON_AddNumberToObject(a, "logprob", p->top_lp[k]);
                cJSON_AddItemToObject(a, "bytes", ab);
                cJSON_AddItemToArray(alts, a);
            }
            cJSON_AddItemToArray(content, e);
        } else {
            cJSON_AddItemToArray(toks, piece_json(c, p->id, NULL));
            cJSON_AddItemToArray(tlp, cJSON_CreateNumber(p->lp));
            cJSON *alts = cJSON_CreateObject();
            for (int k = 0; k < p->n_top; k++) {
                cJSON *name = piece_json(c, p->top_id[k], NULL);
                if (!cJSON_GetObjectItemCaseSensitive(alts, name->valuestring))
                    cJSON_AddNumberToObject(alts, name->valuestring, p->top_lp[k]);
                cJSON_Delete(name);
            }
            cJSON_AddItemToArray(top, alts);
            cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        }
        off += (size_t)pn;
    }
    return lp;
}

static cJSON *envelope(const oai_ctx *c, const oai_req *r, const char *id, long created, const char *object) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", id);
    cJSON_AddStringToObject(root, "object", object);
    cJSON_AddNumberToObject(root, "created", (double)created);
    cJSON_AddStringToObject(root, "model", c->name);
    cJSON_AddStringToObject(root, "system_fingerprint", "deltafin");
    return root;
}

static cJSON *usage_json(const oai_req *r, srv_job *const *jobs) {
    int gen = 0;
    for (int i = 0; i < r->n; i++) gen += jobs[i]->n_gen;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", gen);
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + gen);
    /* as OpenAI reports it: prompt tokens not processed again (the first choice's) */
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    if (d) cJSON_AddNumberToObject(d, "cached_tokens", r->n > 0 ? jobs[0]->n_cached : 0);
    return u;
}

cJSON *oai_timings(const srv_job *j) {
    cJSON *t = cJSON_CreateObject();
    const int prompt_n = j->n_prompt - j->n_cached;
    const double pms = j->t_first > j->t_start ? (j->t_first - j->t_start) * 1e3 : 0;
    const double gms = j->t_end > j->t_first ? (j->t_end - j->t_first) * 1e3 : 0;
    cJSON_AddNumberToObject(t, "cache_n", j->n_cached);
    cJSON_AddNumberToObject(t, "prompt_n", prompt_n);
    cJSON_AddNumberToObject(t, "prompt_ms", pms);
    cJSON_AddNumberToObject(t, "prompt_per_token_ms", prompt_n > 0 ? pms / prompt_n : 0);
    cJSON_AddNumberToObject(t, "prompt_per_second", pms > 0 ? prompt_n * 1e3 / pms : 0);
    cJSON_AddNumberToObject(t, "predicted_n", j->n_gen);
    cJSON_AddNumberToObject(t, "predicted_ms", gms);
    cJSON_AddNumberToObject(t, "predicted_per_token_ms", j->n_gen > 0 ? gms / j->n_gen : 0);
    cJSON_AddNumberToObject(t, "predicted_per_second", gms > 0 ? j->n_gen * 1e3 / gms : 0);
    return t;
}

static char *print_free(cJSON *root) {
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

char *oai_response(const oai_ctx *c, const oai_req *r, srv_job *const *jobs, const char *id, long created) {
    cJSON *root = envelope(c, r, id, created, r->chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices");
    for (int i = 0; i < r->n; i++) {
        const srv_job *j = jobs[i];
        cJSON *ch = cJSON_CreateObject();
        int calls = 0;
        cJSON_AddNumberToObject(ch, "index", i);
        if (r->chat) {
            cJSON *msg = cJSON_AddObjectToObject(ch, "message");
            const char *t = j->text ? j->text : "";
            srv_split sp = {0, 0, 0};
            if (r->reasoning) srv_split_think(t, j->len, r->think_open, r->think_kind, 1, &sp);
            cJSON_AddStringToObject(msg, "role", "assistant");
            if (sp.r1 > sp.r0) cJSON_AddItemToObject(msg, "reasoning_content", clean_string(t + sp.r0, sp.r1 - sp.r0));
            if (r->calls) calls = tools_message(r, t + sp.c0, j->len - sp.c0, msg);
            else cJSON_AddItemToObject(msg, "content", clean_string(t + sp.c0, j->len - sp.c0));
        } else if (r->echo_text) {
            const size_t pl = strlen(r->echo_text);
            char *both = malloc(pl + j->len + 1);
            if (both) memcpy(both, r->echo_text, pl), memcpy(both + pl, j->text ? j->text : "", j->len), both[pl + j->len] = 0;
            cJSON_AddItemToObject(ch, "text", clean_string(both ? both : "", both ? pl + j->len : 0));
            free(both);
        } else {
            cJSON_AddItemToObject(ch, "text", clean_string(j->text ? j->text : "", j->len));
        }
        cJSON_AddItemToObject(ch, "logprobs", logprobs_json(c, r, j));
        cJSON_AddStringToObject(ch, "finish_reason", calls > 0 && j->finish == FIN_STOP ? "tool_calls" : oai_finish_name(j->finish));
        cJSON_AddItemToArray(choices, ch);
    }
    cJSON_AddItemToObject(root, "usage", usage_json(r, jobs));
    if (r->n > 0) cJSON_AddItemToObject(root, "timings", oai_timings(jobs[0])); /* llama-server's: the first choice */
    return print_free(root);
}

static char *sse(cJSON *root) {
    char *s = print_free(root);
    if (!s) return NULL;
    size_t n = strlen(s);
    char *out = malloc(n + 9);
    if (out) {
        memcpy(out, "data: ", 6);
        memcpy(out + 6, s, n);
        memcpy(out + 6 + n, "\n\n", 3);
    }
    cJSON_free(s);
    return out;
}

char *oai_chunk(const oai_ctx *c, const oai_req *r, const char *id, long created, int idx, const char *text,
                int finish, int first) {
    cJSON *root = envelope(c, r, id, created, r->chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", idx);
    if (r->chat) {
        cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
        if (first) cJSON_AddStringToObject(delta, "role", "assistant");
        if (text) cJSON_AddStringToObject(delta, "content", text);
    } else {
        cJSON_AddStringToObject(ch, "text", text ? text : "");
    }
    cJSON_AddNullToObject(ch, "logprobs");
    if (finish != FIN_NONE) cJSON_AddStringToObject(ch, "finish_reason", oai_finish_name(finish));
    else cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    return sse(root);
}

char *oai_reasoning_chunk(const oai_ctx *c, const oai_req *r, const char *id, long created, int idx, const char *text) {
    cJSON *root = envelope(c, r, id, created, "chat.completion.chunk");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", idx);
    cJSON *delta = cJSON_AddObjectToObject(ch, "delta");
    cJSON_AddStringToObject(delta, "reasoning_content", text);
    cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    return sse(root);
}

char *oai_usage_chunk(const oai_ctx *c, const oai_req *r, srv_job *const *jobs, const char *id, long created) {
    cJSON *root = envelope(c, r, id, created, r->chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddArrayToObject(root, "choices");
    cJSON_AddItemToObject(root, "usage", usage_json(r, jobs));
    if (r->n > 0) cJSON_AddItemToObject(root, "timings", oai_timings(jobs[0]));
    return sse(root);
}

/* ---- llama-server's extras: /tokenize, /detokenize, /apply-template (docs/server.md) ---- */

/* cJSON's text of j (deleted), or NULL with e filled. */
static char *print_json(cJSON *j, oai_error *e) {
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s) oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
    return s;
}

/* {"key": text} (its bytes that are not UTF-8 as U+FFFD), or NULL with e filled. */
static char *one_string(const char *key, const char *text, size_t n, oai_error *e) {
    char *clean = srv_utf8_clean(text, n);
    cJSON *res = cJSON_CreateObject();
    cJSON_AddStringToObject(res, key, clean ? clean : "");
    free(clean);
    return print_json(res, e);
}

char *oai_tokenize(const oai_ctx *c, const char *body, size_t len, oai_error *e) {
    cJSON *b = oai_parse_object(c, body, len, e);
    if (!b) return NULL;
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(b, "content");
    int add_special = 0, with_pieces = 0, parse_special = 1;
    char *out = NULL, err[512];
    int32_t *ids = NULL;
    cJSON *res = NULL;
    if (!cJSON_IsString(content)) {
        BAD("content", NULL, "'content' must be a string");
        goto done;
    }
    if (oai_get_bool(b, "add_special", &add_special, e) || oai_get_bool(b, "with_pieces", &with_pieces, e) ||
        oai_get_bool(b, "parse_special", &parse_special, e))
        goto done;
    const size_t n = strlen(content->valuestring);
    int need = 0, got = 0;
    if (df_tokenize(c->m, content->valuestring, n, add_special, parse_special, NULL, 0, &need, err, sizeof err) != 0 &&
        need == 0) {
        BAD("content", NULL, "cannot tokenize: %s", err);
        goto done;
    }
    if (!(ids = malloc((size_t)(need + 1) * sizeof *ids)) ||
        df_tokenize(c->m, content->valuestring, n, add_special, parse_special, ids, need + 1, &got, err, sizeof err) != 0) {
        BAD("content", NULL, "cannot tokenize: %s", ids ? err : "out of memory");
        goto done;
    }
    res = cJSON_CreateObject();
    cJSON *list = cJSON_AddArrayToObject(res, "tokens");
    for (int i = 0; i < got && list; i++) {
        if (!with_pieces) {
            cJSON_AddItemToArray(list, cJSON_CreateNumber(ids[i]));
            continue;
        }
        char piece[512];
        int pn = df_token_to_piece(c->m, ids[i], piece, sizeof piece);
        pn = pn < 0 ? 0 : pn > (int)sizeof piece ? (int)sizeof piece : pn;
        char *clean = srv_utf8_clean(piece, (size_t)pn);
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "id", ids[i]);
        cJSON_AddStringToObject(t, "piece", clean ? clean : "");
        free(clean);
        cJSON_AddItemToArray(list, t);
    }
    out = print_json(res, e);
done:
    free(ids);
    cJSON_Delete(b);
    return out;
}

char *oai_detokenize(const oai_ctx *c, const char *body, size_t len, oai_error *e) {
    cJSON *b = oai_parse_object(c, body, len, e);
    if (!b) return NULL;
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(b, "tokens"), *t;
    const int nv = df_n_vocab(c->m);
    char *text = NULL, *out = NULL;
    size_t n = 0, cap = 0;
    if (!cJSON_IsArray(toks)) {
        BAD("tokens", NULL, "'tokens' must be an array of token ids");
        goto done;
    }
    int i = 0;
    cJSON_ArrayForEach(t, toks) {
        if (!cJSON_IsNumber(t) || t->valuedouble < 0 || t->valuedouble >= nv || t->valuedouble != (int)t->valuedouble) {
            BAD("tokens", NULL, "tokens[%d] is not a token id of this model (0 to %d)", i, nv - 1);
            goto done;
        }
        char piece[512];
        int pn = df_token_to_piece(c->m, (int32_t)t->valuedouble, piece, sizeof piece);
        pn = pn < 0 ? 0 : pn > (int)sizeof piece ? (int)sizeof piece : pn;
        if (n + (size_t)pn + 1 > cap) {
            char *g = realloc(text, cap = 2 * (n + (size_t)pn + 1));
            if (!g) {
                oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory");
                goto done;
            }
            text = g;
        }
        memcpy(text + n, piece, (size_t)pn);
        n += (size_t)pn;
        i++;
    }
    out = one_string("content", text ? text : "", n, e);
done:
    free(text);
    cJSON_Delete(b);
    return out;
}

char *oai_apply_template(const oai_ctx *c, const char *body, size_t len, oai_error *e) {
    cJSON *b = oai_parse_object(c, body, len, e);
    if (!b) return NULL;
    char *text = NULL, *out = NULL;
    if (render_chat(c, b, &text, e) == 0) out = one_string("prompt", text, strlen(text), e);
    free(text);
    cJSON_Delete(b);
    return out;
}

int oai_count_chat(const oai_ctx *c, const char *body, size_t len, int *n_tokens, oai_error *e) {
    cJSON *b = oai_parse_object(c, body, len, e);
    if (!b) return -1;
    char *text = NULL;
    oai_req r;
    memset(&r, 0, sizeof r);
    int rc = render_chat(c, b, &text, e);
    cJSON_Delete(b);
    if (!rc) rc = tokenize_text(c, text, strlen(text), &r, e);
    *n_tokens = r.n_prompt;
    free(text);
    free(r.prompt);
    return rc;
}
