/*
 * tools.c - OpenAI's tools for `deltafin serve`: which calls a request lets
 * the model make, and the calls in its answer, whole or streamed.
 *
 * The format is the chat template's (df_tool_format_detect: Qwen, GLM, Kimi,
 * DeepSeek, MiniMax, gpt-oss, Llama, Mistral, generic; the parser and the
 * grammar are the library's, src/text/toolcall.c). tool_choice:
 *  - "auto" (the default with tools): the model may call; its output is read
 *    for calls, and from the format's first marker on (a lazy grammar,
 *    df_sampler_set_grammar_lazy) it can write only valid calls (no grammar
 *    where a tool's schema cannot be compiled: the calls are then only read);
 *  - "none": it is told of no call to make, and its output is all content;
 *  - "required" or {"type":"function","function":{"name":...}}: a grammar of
 *    the format's calls (of that function only), so that the model can write
 *    nothing else; with parallel_tool_calls false, exactly one.
 * A format whose markers are control tokens in published files (gpt-oss's
 * <|channel|>, Kimi's, Mistral's [TOOL_CALLS]) has those tokens kept in the
 * output's text (srv_job.keep) so that the calls can be read. gpt-oss's
 * channels are read with or without tools (analysis is reasoning), and so
 * are Kimi K3's sections (the response's wrappers are not content).
 *
 * Streaming: each step parses the text so far (partial) and sends what is
 * new: content, then for each call its id and name once, then its arguments
 * as they grow (the library gives only what cannot change), as OpenAI sends
 * them; the last step parses the whole text, so the pieces join to exactly
 * the non-streamed answer. But for one case: a call that max_tokens cuts
 * short. Not streamed, its text is content (a call whose arguments do not
 * parse is never dropped); streamed, once its name and arguments have gone
 * out as a call they cannot be taken back, so it ends as the call it was,
 * with finish_reason "length" (as OpenAI's own API ends one), and its text
 * is not sent again as content.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

#define BAD(param, ...) (oai_set_error(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__), -1)
#define BADNULL(param, ...) (oai_set_error(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__), (const char *)NULL)

int tools_keep_markers(const df_model *m, int fmt, int32_t *keep) {
    const char *const *mk = df_tool_format_markers((df_tool_format)fmt);
    int k = 0;
    for (int i = 0; mk[i] && k < SRV_MAX_KEEP; i++) {
        int32_t ids[4];
        int n = 0;
        char err[128], buf[64];
        if (df_tokenize(m, mk[i], strlen(mk[i]), 0, 1, ids, 4, &n, err, sizeof err) != 0 || n != 1) continue;
        if (df_token_to_piece(m, ids[0], buf, sizeof buf) == 0) keep[k++] = ids[0]; /* no text: a control token */
    }
    return k;
}

/* The function tool_choice names, checked against the tools; NULL with e filled. */
static const char *named_choice(const cJSON *choice, const cJSON *tools, oai_error *e) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(choice, "function");
    const cJSON *nm = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(choice, "type");
    if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function") || !cJSON_IsString(nm))
        return BADNULL("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                      "{\"type\": \"function\", \"function\": {\"name\": ...}}");
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *n2 = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, "function"), "name");
        if (cJSON_IsString(n2) && !strcmp(n2->valuestring, nm->valuestring)) return nm->valuestring;
    }
    return BADNULL("tool_choice", "'tool_choice' names '%.100s', which is not one of the tools", nm->valuestring);
}

static int check_tools(const cJSON *tools, oai_error *e) {
    if (!cJSON_IsArray(tools)) return BAD("tools", "'tools' must be an array");
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "function"))
            return BAD("tools", "tools[%d].type must be \"function\"", i);
        if (!cJSON_IsString(nm) || !*nm->valuestring) return BAD("tools", "tools[%d].function.name is required", i);
        const cJSON *pa = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (pa && !cJSON_IsNull(pa) && !cJSON_IsObject(pa))
            return BAD("tools", "tools[%d].function.parameters must be a JSON Schema object", i);
        i++;
    }
    return 0;
}

int tools_parse(const oai_ctx *c, const cJSON *body, oai_req *r, oai_error *e) {
    const char *tmpl = c->tmpl ? c->tmpl : df_chat_template(c->m);
    r->tool_fmt = (int)df_tool_format_detect(tmpl);
    r->parallel = 1;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(body, "tools");
    const cJSON *choice = cJSON_GetObjectItemCaseSensitive(body, "tool_choice");
    if (tools && cJSON_IsNull(tools)) tools = NULL;
    if (choice && cJSON_IsNull(choice)) choice = NULL;
    if (oai_get_bool((cJSON *)body, "parallel_tool_calls", &r->parallel, e)) return -1;
    if (tools && check_tools(tools, e)) return -1;
    if (tools && cJSON_GetArraySize(tools) == 0) tools = NULL;
    const char *mode = "auto", *only = NULL;
    if (choice && cJSON_IsString(choice)) {
        mode = choice->valuestring;
        if (strcmp(mode, "none") && strcmp(mode, "auto") && strcmp(mode, "required"))
            return BAD("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or a function");
    } else if (choice) {
        if (!cJSON_IsObject(choice)) return BAD("tool_choice", "'tool_choice' must be a string or an object");
        if (!tools) return BAD("tool_choice", "'tool_choice' names a function, but there are no 'tools'");
        if (!(only = named_choice(choice, tools, e))) return -1;
        mode = "function";
    }
    if (!tools && !strcmp(mode, "required")) return BAD("tool_choice", "'tool_choice' is \"required\" but there are no 'tools'");
    /* read the output for calls; gpt-oss's channels and Kimi K3's sections are read with or without */
    const int sections = r->tool_fmt == DF_TOOLS_HARMONY || r->tool_fmt == DF_TOOLS_KIMI_K3;
    r->calls = (tools && strcmp(mode, "none")) || sections;
    if (!r->calls) return 0;
    if (tools && !(r->tools_json = cJSON_PrintUnformatted(tools)))
        return oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
    r->n_keep = tools_keep_markers(c->m, r->tool_fmt, r->keep);
    const int lazy = !strcmp(mode, "auto");
    if (!tools || (lazy && r->gbnf)) return 0; /* auto beside response_format: the format's grammar rules */
    if (r->gbnf)
        return BAD("tool_choice", "'tool_choice' \"%s\" cannot be combined with 'response_format', 'grammar' or "
                                  "'json_schema' (both constrain the output)", mode);
    char err[512], *g = NULL;
    const int rc = df_tool_calls_grammar((df_tool_format)r->tool_fmt, r->tools_json, only, r->parallel, &g, err, sizeof err);
    if (rc == DF_E_NOMEM) return oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
    if (rc != DF_OK && lazy) return 0; /* auto: a schema the compiler cannot honour leaves the calls unconstrained */
    if (rc != DF_OK) return BAD("tools", "the tools' calls cannot be constrained: %s", err);
    if (lazy) { /* the calls' grammar, from the format's first marker on */
        snprintf(r->trigger, sizeof r->trigger, "%s", df_tool_format_trigger((df_tool_format)r->tool_fmt));
    } else if (r->think_open) { /* the prompt opened <think>: the model closes it, then calls */
        const char *pre = r->think_kind ? "root ::= \"<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>\" "
                                          "root0\nroot0 ::="
                                        : "root ::= \"</think>\\n\\n\" root0\nroot0 ::=";
        char *g2 = malloc(strlen(g) + strlen(pre) + 1);
        if (!g2) return free(g), oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
        strcpy(g2, pre);
        strcat(g2, g + strlen("root ::="));
        free(g);
        g = g2;
    }
    r->gbnf = g;
    return 0;
}

/* A fresh call id as OpenAI spells them: call_ and 24 letters and digits. */
static void new_call_id(char *out, size_t n) {
    static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^
                 (__atomic_add_fetch(&counter, 0x9E3779B97F4A7C15ull, __ATOMIC_RELAXED));
    size_t k = 0;
    k += (size_t)snprintf(out, n, "call_");
    for (; k + 1 < n && k < 29; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        out[k] = al[x % (sizeof al - 1)];
    }
    out[k] = 0;
}

static cJSON *clean(const char *s, size_t n) {
    char *t = srv_utf8_clean(s, n);
    cJSON *v = cJSON_CreateString(t ? t : "");
    free(t);
    return v;
}

int tools_message(const oai_req *r, const char *text, size_t n, cJSON *msg) {
    df_tool_parse p;
    if (df_tool_calls_parse((df_tool_format)r->tool_fmt, r->tools_json, text, n, 0, &p) != DF_OK) {
        cJSON_AddItemToObject(msg, "content", clean(text, n));
        return 0;
    }
    const int nc = r->parallel || p.n_calls < 1 ? p.n_calls : 1;
    if (nc > 0 && !*p.content) cJSON_AddNullToObject(msg, "content");
    else cJSON_AddItemToObject(msg, "content", clean(p.content, strlen(p.content)));
    if (p.reasoning && *p.reasoning) cJSON_AddItemToObject(msg, "reasoning_content", clean(p.reasoning, strlen(p.reasoning)));
    if (nc > 0) {
        cJSON *arr = cJSON_AddArrayToObject(msg, "tool_calls");
        for (int i = 0; i < nc; i++) {
            cJSON *tc = cJSON_CreateObject(), *fn;
            char id[40];
            if (!p.calls[i].id) new_call_id(id, sizeof id);
            cJSON_AddItemToObject(tc, "id", clean(p.calls[i].id ? p.calls[i].id : id,
                                                  strlen(p.calls[i].id ? p.calls[i].id : id)));
            cJSON_AddStringToObject(tc, "type", "function");
            fn = cJSON_AddObjectToObject(tc, "function");
            cJSON_AddItemToObject(fn, "name", clean(p.calls[i].name, strlen(p.calls[i].name)));
            cJSON_AddItemToObject(fn, "arguments", clean(p.calls[i].arguments, strlen(p.calls[i].arguments)));
            cJSON_AddItemToArray(arr, tc);
        }
    }
    df_tool_parse_free(&p);
    return nc;
}

/* One chunk: {"choices":[{"index":idx,"delta":DELTA,"logprobs":null,"finish_reason":null}]} */
static char *delta_chunk(const oai_ctx *c, const oai_req *r, const char *id, long created, int idx, cJSON *delta) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "id", id);
    cJSON_AddStringToObject(root, "object", "chat.completion.chunk");
    cJSON_AddNumberToObject(root, "created", (double)created);
    cJSON_AddStringToObject(root, "model", c->name);
    cJSON_AddStringToObject(root, "system_fingerprint", "deltafin");
    cJSON *choices = cJSON_AddArrayToObject(root, "choices"), *ch = cJSON_CreateObject();
    cJSON_AddNumberToObject(ch, "index", idx);
    cJSON_AddItemToObject(ch, "delta", delta);
    cJSON_AddNullToObject(ch, "logprobs");
    cJSON_AddNullToObject(ch, "finish_reason");
    cJSON_AddItemToArray(choices, ch);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s) return NULL;
    const size_t n = strlen(s);
    char *out = malloc(n + 9);
    if (out) memcpy(out, "data: ", 6), memcpy(out + 6, s, n), memcpy(out + 6 + n, "\n\n", 3);
    cJSON_free(s);
    return out;
}

/* The text that is new: s[from..n) when it goes on from what was sent (UTF-8 whole), else nothing. */
static size_t fresh(const char *s, size_t sent, size_t n) {
    if (n <= sent) return 0;
    return srv_utf8_valid_prefix(s + sent, n - sent);
}

int tools_stream(const oai_ctx *c, const oai_req *r, const char *id, long created, int idx, const char *text, size_t n,
                 int final, tools_stream_state *st, void (*emit)(void *arg, char *event), void *arg) {
    df_tool_parse p;
    const int partial = !final || (final == TOOLS_CUT && st->n_calls > 0); /* a call cut short stays the call it was */
    if (df_tool_calls_parse((df_tool_format)r->tool_fmt, r->tools_json, text, n, partial, &p) != DF_OK) return -1;
    const size_t rl = p.reasoning ? strlen(p.reasoning) : 0, cl = strlen(p.content);
    size_t k = fresh(p.reasoning ? p.reasoning : "", st->reasoning, rl);
    if (k) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddItemToObject(d, "reasoning_content", clean(p.reasoning + st->reasoning, k));
        emit(arg, delta_chunk(c, r, id, created, idx, d));
        st->reasoning += k;
    }
    if ((k = fresh(p.content, st->content, cl)) > 0) {
        cJSON *d = cJSON_CreateObject();
        cJSON_AddItemToObject(d, "content", clean(p.content + st->content, k));
        emit(arg, delta_chunk(c, r, id, created, idx, d));
        st->content += k;
    }
    const int nc = r->parallel || p.n_calls < 1 ? p.n_calls : 1;
    for (int i = 0; i < nc && i < SRV_MAX_CALLS; i++) {
        const df_tool_call *tc = &p.calls[i];
        const size_t al = strlen(tc->arguments);
        const int named = i < st->n_calls;
        k = fresh(tc->arguments, named ? st->args[i] : 0, al);
        if (named && !k) continue;
        cJSON *d = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(d, "tool_calls"), *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "index", i);
        cJSON *fn;
        if (!named) {
            char fid[40];
            if (!tc->id) new_call_id(fid, sizeof fid);
            cJSON_AddItemToObject(o, "id", clean(tc->id ? tc->id : fid, strlen(tc->id ? tc->id : fid)));
            cJSON_AddStringToObject(o, "type", "function");
            fn = cJSON_AddObjectToObject(o, "function");
            cJSON_AddItemToObject(fn, "name", clean(tc->name, strlen(tc->name)));
            st->args[i] = 0;
            st->n_calls = i + 1;
        } else {
            fn = cJSON_AddObjectToObject(o, "function");
        }
        cJSON_AddItemToObject(fn, "arguments", clean(tc->arguments + st->args[i], k));
        st->args[i] += k;
        cJSON_AddItemToArray(arr, o);
        emit(arg, delta_chunk(c, r, id, created, idx, d));
    }
    df_tool_parse_free(&p);
    return st->n_calls;
}
