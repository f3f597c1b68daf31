/*
 * anthropic.c - Anthropic's Messages API over the same scheduler (docs/server.md, "Anthropic's Messages API"):
 * what coding agents and the `@anthropic-ai/sdk` clients send.
 *
 *   POST /v1/messages {"model","max_tokens","messages","system","stop_sequences","temperature","top_p","top_k",
 *                      "stream","metadata","tools","tool_choice","thinking","service_tier"}
 *   POST /v1/messages/count_tokens {"model","messages","system","tools","thinking"}: {"input_tokens"}
 *
 * As ollama.c does, a request is translated into the OpenAI chat request oai_parse checks, so that one set of
 * checks and limits guards every API: system (a string or text blocks) becomes the first message; content blocks
 * of type text are joined; an assistant's tool_use blocks become its tool_calls, a user's tool_result blocks
 * "tool" messages, thinking blocks the message's reasoning_content (what the templates read); tools' input_schema
 * becomes a function's parameters; thinking.type becomes the template's enable_thinking. As Anthropic's own API
 * does, a field it does not know is a 400 naming it; what it knows and this server cannot do yet (images and
 * documents, server tools) is a 400 saying so, never dropped in silence. tool_choice auto, any, tool (a name)
 * and none become OpenAI's auto, required, a named function and none; disable_parallel_tool_use becomes
 * parallel_tool_calls false.
 * Answers are a "message" object, or the event stream (message_start, content_block_start, ping,
 * content_block_delta..., content_block_stop, message_delta with the stop reason and usage, message_stop). The
 * model's tool calls (tools.c reads them) are tool_use blocks after the text, stop_reason "tool_use"; a stream
 * sends the text as it comes and each tool_use block whole at the end (one input_json_delta each).
 * Errors are {"type":"error","error":{"type","message"}} with the status; in a stream, an "error" event.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

/* Anthropic's error type for an HTTP status. */
static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

char *anth_error(int status, const char *msg) {
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(j, "type", "error");
    cJSON_AddStringToObject(e, "type", error_type(status));
    cJSON_AddStringToObject(e, "message", msg);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

/* "event: NAME\ndata: JSON\n\n" of j (deleted); NULL when out of memory. */
static char *event(const char *name, cJSON *j) {
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s) return NULL;
    const size_t n = strlen(name) + strlen(s) + 20;
    char *out = malloc(n);
    if (out) snprintf(out, n, "event: %s\ndata: %s\n\n", name, s);
    cJSON_free(s);
    return out;
}

char *anth_error_event(const char *msg) {
    char *body = anth_error(500, msg);
    cJSON *j = body ? cJSON_Parse(body) : NULL;
    free(body);
    return event("error", j);
}

/* ---- the request ---- */

#define FAIL(...) (snprintf(err, errlen, __VA_ARGS__), -1)

/* The text of content (a string, or blocks of which only "text" ones are wanted here) into *out (malloc'd). */
static int block_text(const cJSON *content, const char *what, char **out, char *err, size_t errlen) {
    *out = NULL;
    if (cJSON_IsString(content)) return (*out = strdup(content->valuestring)) ? 0 : FAIL("out of memory");
    if (!cJSON_IsArray(content)) return FAIL("%s must be a string or an array of content blocks", what);
    size_t len = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, content) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(b, "type"), *tx = cJSON_GetObjectItemCaseSensitive(b, "text");
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") || !cJSON_IsString(tx))
            return FAIL("%s: only blocks of type \"text\" are supported here", what);
        len += strlen(tx->valuestring);
    }
    char *s = malloc(len + 1), *p = s;
    if (!s) return FAIL("out of memory");
    cJSON_ArrayForEach(b, content) {
        const char *t = cJSON_GetObjectItemCaseSensitive(b, "text")->valuestring;
        memcpy(p, t, strlen(t));
        p += strlen(t);
    }
    *p = 0;
    *out = s;
    return 0;
}

static void add_message(cJSON *msgs, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", content);
    cJSON_AddItemToArray(msgs, m);
}

/* A growing string: its bytes (malloc'd, NUL-terminated), length and room. */
typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static int append(sbuf *b, const char *text) {
    const size_t k = strlen(text);
    if (b->n + k + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + k + 1) cap *= 2;
        char *t = realloc(b->p, cap);
        if (!t) return -1;
        b->p = t, b->cap = cap;
    }
    memcpy(b->p + b->n, text, k + 1);
    b->n += k;
    return 0;
}

/* One tool_use block as an OpenAI tool call. */
static cJSON *tool_call(const cJSON *b, int i, char *err, size_t errlen) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "id"), *nm = cJSON_GetObjectItemCaseSensitive(b, "name");
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(b, "input");
    if (!cJSON_IsString(id) || !cJSON_IsString(nm) || !cJSON_IsObject(in)) {
        snprintf(err, errlen, "messages[%d]: a tool_use block needs a string id and name and an object input", i);
        return NULL;
    }
    char *args = cJSON_PrintUnformatted(in);
    cJSON *c = cJSON_CreateObject(), *f = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "id", id->valuestring);
    cJSON_AddStringToObject(c, "type", "function");
    cJSON_AddStringToObject(f, "name", nm->valuestring);
    cJSON_AddStringToObject(f, "arguments", args ? args : "{}");
    cJSON_AddItemToObject(c, "function", f);
    cJSON_free(args);
    return c;
}

/* One Anthropic message as OpenAI messages appended to msgs. */
static int translate_message(const cJSON *m, int i, cJSON *msgs, char *err, size_t errlen) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role"), *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!cJSON_IsObject(m) || !cJSON_IsString(role) ||
        (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
        return FAIL("messages[%d] must be an object whose role is \"user\" or \"assistant\"", i);
    const int user = role->valuestring[0] == 'u';
    if (cJSON_IsString(content)) return add_message(msgs, role->valuestring, content->valuestring), 0;
    if (!cJSON_IsArray(content)) return FAIL("messages[%d].content must be a string or an array of content blocks", i);
    sbuf text = {0}, thinking = {0};
    cJSON *calls = cJSON_CreateArray();
    const cJSON *b;
    int rc = 0;
    cJSON_ArrayForEach(b, content) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(b, "type");
        const char *t = cJSON_IsString(ty) ? ty->valuestring : "";
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(b, "text");
        if (!strcmp(t, "text") && cJSON_IsString(tx)) {
            if (append(&text, tx->valuestring)) rc = FAIL("out of memory");
        } else if (!strcmp(t, "thinking") && !user) { /* an earlier answer's reasoning: the templates' field */
            const cJSON *th = cJSON_GetObjectItemCaseSensitive(b, "thinking");
            if (!cJSON_IsString(th)) rc = FAIL("messages[%d]: a thinking block needs a string 'thinking'", i);
            else if (append(&thinking, th->valuestring)) rc = FAIL("out of memory");
        } else if (!strcmp(t, "redacted_thinking") && !user) {
            /* encrypted by another provider: nothing a template could show */
        } else if (!strcmp(t, "tool_use") && !user) {
            cJSON *c = tool_call(b, i, err, errlen);
            if (!c) rc = -1;
            else cJSON_AddItemToArray(calls, c);
        } else if (!strcmp(t, "tool_result") && user) {
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(b, "tool_use_id");
            const cJSON *rc_content = cJSON_GetObjectItemCaseSensitive(b, "content");
            char *out = NULL, what[64];
            snprintf(what, sizeof what, "messages[%d]: a tool_result's content", i);
            if (!cJSON_IsString(id)) rc = FAIL("messages[%d]: a tool_result block needs a string tool_use_id", i);
            else if (rc_content && block_text(rc_content, what, &out, err, errlen)) rc = -1;
            else {
                if (text.p) add_message(msgs, "user", text.p), free(text.p), text = (sbuf){0}; /* the order kept */
                cJSON *tm = cJSON_CreateObject();
                cJSON_AddStringToObject(tm, "role", "tool");
                cJSON_AddStringToObject(tm, "tool_call_id", id->valuestring);
                cJSON_AddStringToObject(tm, "content", out ? out : "");
                cJSON_AddItemToArray(msgs, tm);
            }
            free(out);
        } else if (!strcmp(t, "image") || !strcmp(t, "document")) {
            rc = FAIL("messages[%d]: %s blocks are not supported: this model reads text only", i, t);
        } else {
            rc = FAIL("messages[%d]: a content block of type '%.40s' is not supported in a%s message", i, t,
                      user ? " user" : "n assistant");
        }
        if (rc) break;
    }
    if (!rc && (text.p || cJSON_GetArraySize(calls) || thinking.p)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "role", role->valuestring);
        cJSON_AddStringToObject(o, "content", text.p ? text.p : "");
        if (thinking.p) cJSON_AddStringToObject(o, "reasoning_content", thinking.p);
        if (cJSON_GetArraySize(calls)) cJSON_AddItemToObject(o, "tool_calls", calls), calls = NULL;
        cJSON_AddItemToArray(msgs, o);
    }
    cJSON_Delete(calls);
    free(text.p);
    free(thinking.p);
    return rc;
}

/* tools: [{"name","description","input_schema"}] as OpenAI's function tools. */
static int translate_tools(const cJSON *tools, cJSON *o, char *err, size_t errlen) {
    if (!cJSON_IsArray(tools)) return FAIL("'tools' must be an array");
    cJSON *out = cJSON_AddArrayToObject(o, "tools");
    const cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(t, "name"), *ty = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *sch = cJSON_GetObjectItemCaseSensitive(t, "input_schema");
        const cJSON *ds = cJSON_GetObjectItemCaseSensitive(t, "description");
        if (cJSON_IsString(ty) && strcmp(ty->valuestring, "custom"))
            return FAIL("tools[%d]: the server tool '%.60s' is not supported (only tools with an input_schema)", i,
                        ty->valuestring);
        if (!cJSON_IsString(nm) || !cJSON_IsObject(sch))
            return FAIL("tools[%d] needs a string 'name' and an object 'input_schema'", i);
        cJSON *w = cJSON_CreateObject(), *f = cJSON_AddObjectToObject(w, "function");
        cJSON_AddStringToObject(w, "type", "function");
        cJSON_AddStringToObject(f, "name", nm->valuestring);
        if (cJSON_IsString(ds)) cJSON_AddStringToObject(f, "description", ds->valuestring);
        cJSON_AddItemToObject(f, "parameters", cJSON_Duplicate(sch, 1));
        cJSON_AddItemToArray(out, w);
        i++;
    }
    return 0;
}

static const char *const known_fields[] = {"model", "max_tokens", "messages", "system", "stop_sequences", "stream",
                                           "temperature", "top_p", "top_k", "metadata", "tools", "tool_choice",
                                           "thinking", "service_tier", NULL};

/* Everything but max_tokens, stream and sampling: the conversation (shared with count_tokens). */
static int translate_conversation(const cJSON *b, cJSON *o, char *err, size_t errlen) {
    const cJSON *v;
    cJSON_ArrayForEach(v, b) {
        int known = 0;
        for (int i = 0; known_fields[i]; i++) known |= !strcmp(v->string, known_fields[i]);
        if (!known) return FAIL("%.60s: Extra inputs are not permitted", v->string);
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(b, "model")) && !cJSON_IsString(v)) return FAIL("model: must be a string");
    if (v) cJSON_AddStringToObject(o, "model", v->valuestring);
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(b, "messages");
    if (!cJSON_IsArray(msgs) || !cJSON_GetArraySize(msgs)) return FAIL("messages: must be a non-empty array");
    cJSON *out = cJSON_AddArrayToObject(o, "messages");
    if ((v = cJSON_GetObjectItemCaseSensitive(b, "system")) && !cJSON_IsNull(v)) {
        char *sys = NULL;
        if (block_text(v, "system", &sys, err, errlen)) return -1;
        add_message(out, "system", sys);
        free(sys);
    }
    int i = 0;
    cJSON_ArrayForEach(v, msgs) if (translate_message(v, i++, out, err, errlen)) return -1;
    if ((v = cJSON_GetObjectItemCaseSensitive(b, "tools")) && !cJSON_IsNull(v) && translate_tools(v, o, err, errlen))
        return -1;
    if ((v = cJSON_GetObjectItemCaseSensitive(b, "tool_choice")) && !cJSON_IsNull(v)) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(v, "type");
        if (!cJSON_IsString(ty)) return FAIL("tool_choice: must be an object with a string 'type'");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(v, "name");
        const cJSON *dp = cJSON_GetObjectItemCaseSensitive(v, "disable_parallel_tool_use");
        if (cJSON_IsTrue(dp)) cJSON_AddFalseToObject(o, "parallel_tool_calls");
        if (!strcmp(ty->valuestring, "none")) {
            cJSON_DeleteItemFromObjectCaseSensitive(o, "tools"); /* not offered */
        } else if (!strcmp(ty->valuestring, "any")) {
            cJSON_AddStringToObject(o, "tool_choice", "required");
        } else if (!strcmp(ty->valuestring, "tool")) {
            if (!cJSON_IsString(nm)) return FAIL("tool_choice: type \"tool\" needs a string 'name'");
            cJSON *tc = cJSON_AddObjectToObject(o, "tool_choice");
            cJSON_AddStringToObject(tc, "type", "function");
            cJSON_AddStringToObject(cJSON_AddObjectToObject(tc, "function"), "name", nm->valuestring);
        } else if (strcmp(ty->valuestring, "auto")) {
            return FAIL("tool_choice: type must be \"auto\", \"any\", \"tool\" or \"none\", not '%.40s'", ty->valuestring);
        }
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(b, "thinking")) && !cJSON_IsNull(v)) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(v, "type");
        if (!cJSON_IsString(ty) || (strcmp(ty->valuestring, "enabled") && strcmp(ty->valuestring, "disabled")))
            return FAIL("thinking: type must be \"enabled\" or \"disabled\"");
        cJSON *kw = cJSON_AddObjectToObject(o, "chat_template_kwargs");
        cJSON_AddBoolToObject(kw, "enable_thinking", ty->valuestring[0] == 'e');
    }
    return 0;
}

char *anth_to_openai(const oai_ctx *c, const char *body, size_t len, int count_only, int *stream, int *status,
                     char **err_json) {
    char err[400] = "";
    const size_t errlen = sizeof err;
    oai_error e;
    *status = 400;
    *stream = 0;
    cJSON *b = oai_parse_object(c, body, len, &e), *o = b ? cJSON_CreateObject() : NULL;
    if (!b) return *status = e.status, *err_json = anth_error(e.status, e.message), NULL;
    const cJSON *v;
    int rc = translate_conversation(b, o, err, errlen);
    if (!rc && !count_only) {
        v = cJSON_GetObjectItemCaseSensitive(b, "max_tokens");
        if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble != (double)(long)v->valuedouble)
            rc = FAIL("max_tokens: a positive integer is required");
        else cJSON_AddNumberToObject(o, "max_tokens", v->valuedouble);
    }
    if (!rc && !count_only && (v = cJSON_GetObjectItemCaseSensitive(b, "stream")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsBool(v)) rc = FAIL("stream: must be true or false");
        *stream = cJSON_IsTrue(v);
        cJSON_AddBoolToObject(o, "stream", *stream);
    }
    if (!rc && !count_only && (v = cJSON_GetObjectItemCaseSensitive(b, "stop_sequences")) && !cJSON_IsNull(v))
        cJSON_AddItemToObject(o, "stop", cJSON_Duplicate(v, 1)); /* oai_parse checks its shape and count */
    static const char *const sampling[] = {"temperature", "top_p", "top_k"};
    for (int i = 0; !rc && !count_only && i < 3; i++)
        if ((v = cJSON_GetObjectItemCaseSensitive(b, sampling[i])) && !cJSON_IsNull(v)) {
            if (!cJSON_IsNumber(v)) rc = FAIL("%s: must be a number", sampling[i]);
            else if (i == 0 && (v->valuedouble < 0 || v->valuedouble > 1)) rc = FAIL("temperature: must be in [0, 1]");
            else cJSON_AddNumberToObject(o, sampling[i], v->valuedouble);
        }
    if (!rc && !count_only && !cJSON_GetObjectItemCaseSensitive(o, "temperature"))
        cJSON_AddNumberToObject(o, "temperature", 1.0); /* Anthropic's default */
    if (!rc && (v = cJSON_GetObjectItemCaseSensitive(b, "metadata")) && !cJSON_IsNull(v) && !cJSON_IsObject(v))
        rc = FAIL("metadata: must be an object"); /* user_id: for the provider's abuse checks; nothing to do here */
    cJSON_Delete(b);
    char *s = rc ? NULL : cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (rc) return *err_json = anth_error(400, err), NULL;
    if (!s) *status = 500, *err_json = anth_error(500, "out of memory");
    return s;
}

/* ---- the answer ---- */

static const char *stop_reason(const srv_job *j, int calls) {
    if (j->finish == FIN_LENGTH) return "max_tokens";
    if (calls > 0) return "tool_use";
    return j->stop_hit >= 0 ? "stop_sequence" : "end_turn";
}

static void add_stop(cJSON *o, const srv_job *j, int calls) {
    cJSON_AddStringToObject(o, "stop_reason", stop_reason(j, calls));
    if (j->finish == FIN_STOP && j->stop_hit >= 0 && j->stop_hit < j->n_stop) {
        char *s = srv_utf8_clean(j->stop[j->stop_hit], strlen(j->stop[j->stop_hit]));
        cJSON_AddStringToObject(o, "stop_sequence", s ? s : "");
        free(s);
    } else {
        cJSON_AddNullToObject(o, "stop_sequence");
    }
}

/* Anthropic counts the prompt apart from what a cache gave. */
static cJSON *usage(const srv_job *j, int n_prompt, int with_output) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", n_prompt - (j ? j->n_cached : 0));
    cJSON_AddNumberToObject(u, "cache_creation_input_tokens", 0);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", j ? j->n_cached : 0);
    cJSON_AddNumberToObject(u, "output_tokens", with_output && j ? j->n_gen : 0);
    return u;
}

static cJSON *message(const oai_ctx *c, const char *id) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "model", c->name);
    return m;
}

static cJSON *text_block(const char *text, size_t n) {
    cJSON *t = cJSON_CreateObject();
    char *clean = srv_utf8_clean(text ? text : "", n);
    cJSON_AddStringToObject(t, "type", "text");
    cJSON_AddStringToObject(t, "text", clean ? clean : "");
    free(clean);
    return t;
}

/* A call as a tool_use block (its arguments as the input object; {} where they are not one). */
static cJSON *tool_use_block(const cJSON *call) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(call, "id"), *nm = cJSON_GetObjectItemCaseSensitive(fn, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
    cJSON *b = cJSON_CreateObject(), *in = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
    char tid[64];
    snprintf(tid, sizeof tid, "toolu_%s", cJSON_IsString(id) && !strncmp(id->valuestring, "call_", 5) ? id->valuestring + 5
                                           : cJSON_IsString(id) ? id->valuestring : "0");
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", tid);
    cJSON_AddStringToObject(b, "name", cJSON_IsString(nm) ? nm->valuestring : "");
    if (!cJSON_IsObject(in)) cJSON_Delete(in), in = cJSON_CreateObject();
    cJSON_AddItemToObject(b, "input", in);
    return b;
}

/* The text and calls of j's output (tools.c's reading, as OpenAI's message): *text malloc'd, the calls as an
 * OpenAI tool_calls array (or NULL). */
static cJSON *read_calls(const oai_req *r, const srv_job *j, char **text) {
    cJSON *msg = cJSON_CreateObject();
    tools_message(r, j->text ? j->text : "", j->len, msg);
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(msg, "content");
    *text = strdup(cJSON_IsString(ct) ? ct->valuestring : "");
    cJSON *calls = cJSON_DetachItemFromObjectCaseSensitive(msg, "tool_calls");
    cJSON_Delete(msg);
    return calls;
}

char *anth_message(const oai_ctx *c, const oai_req *r, const srv_job *j, int n_prompt, const char *id) {
    cJSON *m = message(c, id), *content = cJSON_AddArrayToObject(m, "content"), *calls = NULL, *call;
    char *text = NULL;
    if (r->calls) calls = read_calls(r, j, &text);
    if (!calls || (text && *text)) cJSON_AddItemToArray(content, text ? text_block(text, strlen(text)) : text_block(j->text, j->len));
    cJSON_ArrayForEach(call, calls) cJSON_AddItemToArray(content, tool_use_block(call));
    add_stop(m, j, cJSON_GetArraySize(calls));
    cJSON_Delete(calls);
    free(text);
    cJSON_AddItemToObject(m, "usage", usage(j, n_prompt, 1));
    char *s = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return s;
}

char *anth_stream_start(const oai_ctx *c, const char *id, int n_prompt) {
    cJSON *ev = cJSON_CreateObject(), *m = message(c, id);
    cJSON_AddStringToObject(ev, "type", "message_start");
    cJSON_AddArrayToObject(m, "content");
    cJSON_AddNullToObject(m, "stop_reason");
    cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", usage(NULL, n_prompt, 0));
    cJSON_AddItemToObject(ev, "message", m);
    cJSON *bs = cJSON_CreateObject(), *cb = cJSON_AddObjectToObject(bs, "content_block");
    cJSON_AddStringToObject(bs, "type", "content_block_start");
    cJSON_AddNumberToObject(bs, "index", 0);
    cJSON_AddStringToObject(cb, "type", "text");
    cJSON_AddStringToObject(cb, "text", "");
    cJSON *ping = cJSON_CreateObject();
    cJSON_AddStringToObject(ping, "type", "ping");
    char *a = event("message_start", ev), *b = event("content_block_start", bs), *p = event("ping", ping), *out = NULL;
    if (a && b && p && (out = malloc(strlen(a) + strlen(b) + strlen(p) + 1))) sprintf(out, "%s%s%s", a, b, p);
    free(a), free(b), free(p);
    return out;
}

char *anth_stream_delta(const char *text, size_t n) {
    cJSON *ev = cJSON_CreateObject(), *d = cJSON_AddObjectToObject(ev, "delta");
    char *clean = srv_utf8_clean(text, n);
    cJSON_AddStringToObject(ev, "type", "content_block_delta");
    cJSON_AddNumberToObject(ev, "index", 0);
    cJSON_AddStringToObject(d, "type", "text_delta");
    cJSON_AddStringToObject(d, "text", clean ? clean : "");
    free(clean);
    return event("content_block_delta", ev);
}

/* content_block_stop of block i */
static char *block_stop(int i) {
    cJSON *bs = cJSON_CreateObject();
    cJSON_AddStringToObject(bs, "type", "content_block_stop");
    cJSON_AddNumberToObject(bs, "index", i);
    return event("content_block_stop", bs);
}

/* a + b (both freed) */
static char *join(char *a, char *b) {
    char *out = a && b ? malloc(strlen(a) + strlen(b) + 1) : NULL;
    if (out) sprintf(out, "%s%s", a, b);
    free(a), free(b);
    return out;
}

char *anth_stream_end(const oai_req *r, const srv_job *j, int n_prompt) {
    cJSON *md = cJSON_CreateObject(), *ms = cJSON_CreateObject(), *calls = NULL, *call;
    char *text = NULL, *out = block_stop(0);
    if (r->calls) calls = read_calls(r, j, &text);
    int i = 1;
    cJSON_ArrayForEach(call, calls) { /* each tool_use block whole: start, its input in one delta, stop */
        cJSON *b = tool_use_block(call), *bs = cJSON_CreateObject(), *bd = cJSON_CreateObject();
        char *in = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(b, "input"));
        cJSON_ReplaceItemInObjectCaseSensitive(b, "input", cJSON_CreateObject());
        cJSON_AddStringToObject(bs, "type", "content_block_start");
        cJSON_AddNumberToObject(bs, "index", i);
        cJSON_AddItemToObject(bs, "content_block", b);
        cJSON_AddStringToObject(bd, "type", "content_block_delta");
        cJSON_AddNumberToObject(bd, "index", i);
        cJSON *d = cJSON_AddObjectToObject(bd, "delta");
        cJSON_AddStringToObject(d, "type", "input_json_delta");
        cJSON_AddStringToObject(d, "partial_json", in ? in : "{}");
        cJSON_free(in);
        out = join(join(out, event("content_block_start", bs)), join(event("content_block_delta", bd), block_stop(i)));
        i++;
    }
    cJSON_AddStringToObject(md, "type", "message_delta");
    cJSON *d = cJSON_AddObjectToObject(md, "delta");
    add_stop(d, j, cJSON_GetArraySize(calls));
    cJSON_AddItemToObject(md, "usage", usage(j, n_prompt, 1));
    cJSON_AddStringToObject(ms, "type", "message_stop");
    cJSON_Delete(calls);
    free(text);
    return join(out, join(event("message_delta", md), event("message_stop", ms)));
}

char *anth_count_tokens(const oai_ctx *c, const char *body, size_t len, int *status) {
    int stream;
    char *err_json = NULL, *chat = anth_to_openai(c, body, len, 1, &stream, status, &err_json);
    if (!chat) return err_json;
    oai_error e;
    int n = 0;
    const int rc = oai_count_chat(c, chat, strlen(chat), &n, &e);
    free(chat);
    if (rc) return *status = e.status, anth_error(e.status, e.message);
    char out[64];
    snprintf(out, sizeof out, "{\"input_tokens\":%d}", n);
    *status = 200;
    return strdup(out);
}
