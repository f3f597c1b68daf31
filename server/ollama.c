/*
 * ollama.c - Ollama's API over the same scheduler (docs/server.md, "Ollama's API"): what the `ollama` clients,
 * Open WebUI's Ollama connection and the tools written for Ollama send.
 *
 *   GET  /api/version                  {"version"}: the Ollama API level these shapes follow
 *   GET  /api/tags, /api/ps            the one model: name, size, digest-free details (format, family, sizes)
 *   POST /api/show {"model"}           its details, model_info (architecture, parameters, context), template
 *   POST /api/chat {"model","messages","stream","options","think","format","keep_alive"}
 *   POST /api/generate {"model","prompt","system","stream","options","raw",...}
 *
 * A chat or generate request is translated into the OpenAI request oai_parse checks (messages or prompt;
 * options.temperature, top_k, top_p, min_p, num_predict, seed, stop, repeat_penalty; Ollama's own defaults
 * where a field is absent: temperature 0.8, top_k 40, top_p 0.9, repeat_penalty 1.1, until the end of the
 * context), so that one set of checks and limits guards both APIs; `think` becomes the template's
 * enable_thinking. Options that size the runtime (num_ctx, num_gpu, num_thread, ...) and keep_alive are
 * accepted and have no effect: the server's own flags decide those. `format` ("json" or a JSON Schema)
 * constrains the output through the grammar (oai.c's response_format / json_schema); `images`, `tools` in
 * generate and `raw` with a template are refused with a 400, never dropped in silence. Answers are one JSON object, or NDJSON lines when
 * streaming ("done": false pieces, then the last with done_reason, the token counts and durations in ns).
 * Errors are {"error": "..."} with the status. A generate without a prompt is Ollama's "load the model": done at
 * once (done_reason "load").
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

#define OLLAMA_API_VERSION "0.6.0"

static char *print_line(cJSON *j) { /* the object and a new line; j deleted */
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s) return NULL;
    const size_t n = strlen(s);
    char *out = realloc(s, n + 2);
    if (!out) return free(s), NULL;
    out[n] = '\n', out[n + 1] = 0;
    return out;
}

char *ollama_error(const char *msg) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "error", msg);
    return print_line(j);
}

static void created_at(char *buf, size_t n) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char day[24];
    if (!strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm)) day[0] = 0;
    snprintf(buf, n, "%.20s.%06dZ", day, (int)(ts.tv_nsec / 1000 % 1000000));
}

/* "260K", "7.6B": Ollama's parameter_size. */
static void param_size(uint64_t n, char *buf, size_t len) {
    if (n >= 1000000000ull) snprintf(buf, len, "%.1fB", n / 1e9);
    else if (n >= 1000000ull) snprintf(buf, len, "%.1fM", n / 1e6);
    else snprintf(buf, len, "%.0fK", n / 1e3);
}

static cJSON *details(const oai_ctx *c) {
    df_model_info mi;
    df_model_get_info(c->m, &mi);
    cJSON *d = cJSON_CreateObject(), *fam = cJSON_CreateArray();
    char ps[32];
    param_size(mi.n_params, ps, sizeof ps);
    cJSON_AddStringToObject(d, "parent_model", "");
    cJSON_AddStringToObject(d, "format", "gguf");
    cJSON_AddStringToObject(d, "family", mi.arch ? mi.arch : "");
    cJSON_AddItemToArray(fam, cJSON_CreateString(mi.arch ? mi.arch : ""));
    cJSON_AddItemToObject(d, "families", fam);
    cJSON_AddStringToObject(d, "parameter_size", ps);
    cJSON_AddStringToObject(d, "quantization_level", "");
    return d;
}

char *ollama_version(void) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "version", OLLAMA_API_VERSION);
    return print_line(j);
}

char *ollama_tags(const oai_ctx *c) {
    df_model_info mi;
    df_model_get_info(c->m, &mi);
    char at[48];
    created_at(at, sizeof at);
    cJSON *j = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(j, "models"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "name", c->name);
    cJSON_AddStringToObject(m, "model", c->name);
    cJSON_AddStringToObject(m, "modified_at", at);
    cJSON_AddNumberToObject(m, "size", (double)mi.n_bytes);
    cJSON_AddStringToObject(m, "digest", "");
    cJSON_AddItemToObject(m, "details", details(c));
    cJSON_AddItemToArray(list, m);
    return print_line(j);
}

char *ollama_show(const oai_ctx *c, const char *body, size_t len, int *status) {
    oai_error e;
    cJSON *b = oai_parse_object(c, body, len, &e);
    if (!b) return *status = e.status, ollama_error(e.message);
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(b, "model");
    if (!nm) nm = cJSON_GetObjectItemCaseSensitive(b, "name");
    if (!cJSON_IsString(nm)) {
        cJSON_Delete(b);
        *status = 400;
        return ollama_error("the body must name the model ({\"model\": \"...\"})");
    }
    if (c->strict_model && strcmp(nm->valuestring, c->name)) {
        char msg[400];
        snprintf(msg, sizeof msg, "model '%.200s' not found (this server has '%.150s')", nm->valuestring, c->name);
        cJSON_Delete(b);
        *status = 404;
        return ollama_error(msg);
    }
    cJSON_Delete(b);
    df_model_info mi;
    df_model_get_info(c->m, &mi);
    cJSON *j = cJSON_CreateObject(), *info = cJSON_CreateObject(), *caps = cJSON_CreateArray();
    const char *t = c->tmpl ? c->tmpl : df_chat_template(c->m);
    char *clean = t ? srv_utf8_clean(t, strlen(t)) : NULL, key[96];
    cJSON_AddStringToObject(j, "modelfile", "");
    cJSON_AddStringToObject(j, "parameters", "");
    cJSON_AddStringToObject(j, "template", clean ? clean : "");
    free(clean);
    cJSON_AddItemToObject(j, "details", details(c));
    cJSON_AddStringToObject(info, "general.architecture", mi.arch ? mi.arch : "");
    cJSON_AddNumberToObject(info, "general.parameter_count", (double)mi.n_params);
    snprintf(key, sizeof key, "%.60s.context_length", mi.arch ? mi.arch : "model");
    cJSON_AddNumberToObject(info, key, mi.n_ctx_train);
    cJSON_AddItemToObject(j, "model_info", info);
    cJSON_AddItemToArray(caps, cJSON_CreateString("completion"));
    cJSON_AddItemToObject(j, "capabilities", caps);
    *status = 200;
    return print_line(j);
}

/* options.NAME (a number) into the OpenAI body as FIELD; Ollama's default where it is absent. */
static int copy_num(const cJSON *opts, const char *name, cJSON *out, const char *field, double dflt, char *err,
                    size_t n) {
    const cJSON *v = opts ? cJSON_GetObjectItemCaseSensitive(opts, name) : NULL;
    if (v && !cJSON_IsNumber(v)) return snprintf(err, n, "options.%s must be a number", name), -1;
    if (v || dflt >= 0) cJSON_AddNumberToObject(out, field, v ? v->valuedouble : dflt);
    return 0;
}

/* The Ollama request as the OpenAI one oai_parse checks; NULL with *status and the error's JSON in *err_json. */
char *ollama_to_openai(const oai_ctx *c, const char *body, size_t len, int chat, int *stream, int *as_chat,
                       int *status, char **err_json) {
    char err[300] = "";
    oai_error e;
    cJSON *b = oai_parse_object(c, body, len, &e), *o = b ? cJSON_CreateObject() : NULL;
    *status = 400;
    *as_chat = chat;
    if (!b) return *status = e.status, *err_json = ollama_error(e.message), NULL;
    const cJSON *opts = cJSON_GetObjectItemCaseSensitive(b, "options"), *v;
    if (opts && !cJSON_IsObject(opts)) snprintf(err, sizeof err, "'options' must be an object");
    else if ((v = cJSON_GetObjectItemCaseSensitive(b, "format")) && !cJSON_IsNull(v) &&
             !(cJSON_IsString(v) && (!*v->valuestring || !strcmp(v->valuestring, "json"))) && !cJSON_IsObject(v))
        snprintf(err, sizeof err, "'format' must be \"json\" or a JSON Schema object");
    else if ((v = cJSON_GetObjectItemCaseSensitive(b, "images")) && cJSON_GetArraySize(v) > 0)
        snprintf(err, sizeof err, "'images': this model reads text only");
    else if (!chat && (v = cJSON_GetObjectItemCaseSensitive(b, "template")) && cJSON_IsString(v) && *v->valuestring)
        snprintf(err, sizeof err, "'template' in a request is not supported (start the server with --chat-template)");
    else if (!chat && (v = cJSON_GetObjectItemCaseSensitive(b, "context")) && cJSON_GetArraySize(v) > 0)
        snprintf(err, sizeof err, "'context' (the tokens of an earlier answer) is not supported: send the text");
    if (!*err && (v = cJSON_GetObjectItemCaseSensitive(b, "model")) && cJSON_IsString(v))
        cJSON_AddStringToObject(o, "model", v->valuestring);
    if (!*err && chat) {
        v = cJSON_GetObjectItemCaseSensitive(b, "messages");
        if (!cJSON_IsArray(v)) snprintf(err, sizeof err, "'messages' must be an array");
        else cJSON_AddItemToObject(o, "messages", cJSON_Duplicate(v, 1));
        const cJSON *tools = cJSON_GetObjectItemCaseSensitive(b, "tools");
        if (tools && !cJSON_IsNull(tools)) cJSON_AddItemToObject(o, "tools", cJSON_Duplicate(tools, 1));
    } else if (!*err) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(b, "prompt"), *sys = cJSON_GetObjectItemCaseSensitive(b, "system");
        const cJSON *raw = cJSON_GetObjectItemCaseSensitive(b, "raw");
        if (p && !cJSON_IsString(p)) snprintf(err, sizeof err, "'prompt' must be a string");
        else if (sys && !cJSON_IsString(sys)) snprintf(err, sizeof err, "'system' must be a string");
        else if (!p || !*p->valuestring) { /* Ollama's "load the model": it is loaded; done at once */
            char at[48];
            created_at(at, sizeof at);
            cJSON *l = cJSON_CreateObject();
            cJSON_AddStringToObject(l, "model", c->name);
            cJSON_AddStringToObject(l, "created_at", at);
            cJSON_AddStringToObject(l, "response", "");
            cJSON_AddBoolToObject(l, "done", 1);
            cJSON_AddStringToObject(l, "done_reason", "load");
            cJSON_Delete(b);
            cJSON_Delete(o);
            *status = 200;
            *err_json = print_line(l);
            return NULL;
        }
        else if (cJSON_IsTrue(raw) || (!c->tmpl && !df_chat_template(c->m))) { /* the prompt as it is */
            cJSON_AddStringToObject(o, "prompt", p ? p->valuestring : "");
        } else { /* as Ollama: the prompt through the model's template, as one user turn */
            *as_chat = 1;
            cJSON *msgs = cJSON_AddArrayToObject(o, "messages"), *m;
            if (sys) {
                m = cJSON_CreateObject();
                cJSON_AddStringToObject(m, "role", "system");
                cJSON_AddStringToObject(m, "content", sys->valuestring);
                cJSON_AddItemToArray(msgs, m);
            }
            m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", "user");
            cJSON_AddStringToObject(m, "content", p ? p->valuestring : "");
            cJSON_AddItemToArray(msgs, m);
        }
    }
    if (!*err) {
        v = cJSON_GetObjectItemCaseSensitive(b, "stream");
        if (v && !cJSON_IsBool(v)) snprintf(err, sizeof err, "'stream' must be true or false");
        *stream = !v || cJSON_IsTrue(v); /* Ollama streams unless told not to */
        cJSON_AddBoolToObject(o, "stream", *stream);
    }
    if (!*err) /* the first bad option leaves its words in err */
        (void)(copy_num(opts, "temperature", o, "temperature", 0.8, err, sizeof err) ||
               copy_num(opts, "top_k", o, "top_k", 40, err, sizeof err) ||
               copy_num(opts, "top_p", o, "top_p", 0.9, err, sizeof err) ||
               copy_num(opts, "min_p", o, "min_p", 0.0, err, sizeof err) ||
               copy_num(opts, "repeat_penalty", o, "repeat_penalty", 1.1, err, sizeof err) ||
               copy_num(opts, "seed", o, "seed", -1, err, sizeof err));
    if (!*err && opts && (v = cJSON_GetObjectItemCaseSensitive(opts, "num_predict"))) {
        if (!cJSON_IsNumber(v)) snprintf(err, sizeof err, "options.num_predict must be a number");
        else if (v->valuedouble >= 0) cJSON_AddNumberToObject(o, "max_tokens", v->valuedouble); /* -1, -2: no limit */
    }
    if (!*err && opts && (v = cJSON_GetObjectItemCaseSensitive(opts, "stop")) && !cJSON_IsNull(v))
        cJSON_AddItemToObject(o, "stop", cJSON_Duplicate(v, 1));
    if (!*err && (v = cJSON_GetObjectItemCaseSensitive(b, "format")) && (cJSON_IsObject(v) || cJSON_IsString(v)) &&
        !(cJSON_IsString(v) && !*v->valuestring)) { /* JSON output: through the grammar (oai_parse) */
        if (cJSON_IsObject(v)) cJSON_AddItemToObject(o, "json_schema", cJSON_Duplicate(v, 1));
        else cJSON_AddItemToObject(o, "response_format", cJSON_Parse("{\"type\":\"json_object\"}"));
    }
    const cJSON *think = cJSON_GetObjectItemCaseSensitive(b, "think");
    if (!*err && think && !cJSON_IsNull(think)) {
        if (!cJSON_IsBool(think)) snprintf(err, sizeof err, "'think' must be true or false");
        cJSON *kw = cJSON_AddObjectToObject(o, "chat_template_kwargs");
        cJSON_AddBoolToObject(kw, "enable_thinking", cJSON_IsTrue(think));
    }
    cJSON_Delete(b);
    if (*err) {
        cJSON_Delete(o);
        *err_json = ollama_error(err);
        return NULL;
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) *status = 500, *err_json = ollama_error("out of memory");
    return s;
}

/* One answer object: a streamed piece (done 0) or the last (done 1, with its reason, counts and durations). */
/* The last chat answer's tool calls as Ollama gives them: [{"function": {"name", "arguments": {...}}}] into m,
 * read from j's whole output (tools.c); the content read is in *content (malloc'd). */
static void ollama_calls(const oai_req *r, const srv_job *j, cJSON *m, char **content) {
    cJSON *msg = cJSON_CreateObject(), *tc;
    tools_message(r, j->text ? j->text : "", j->len, msg);
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(msg, "content");
    *content = strdup(cJSON_IsString(ct) ? ct->valuestring : "");
    cJSON *out = NULL;
    cJSON_ArrayForEach(tc, cJSON_GetObjectItemCaseSensitive(msg, "tool_calls")) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        cJSON *a = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL, *c = cJSON_CreateObject();
        if (!cJSON_IsObject(a)) cJSON_Delete(a), a = cJSON_CreateObject();
        cJSON *f = cJSON_AddObjectToObject(c, "function");
        cJSON_AddItemToObject(f, "name", cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(fn, "name"), 1));
        cJSON_AddItemToObject(f, "arguments", a);
        if (!out) out = cJSON_AddArrayToObject(m, "tool_calls");
        cJSON_AddItemToArray(out, c);
    }
    cJSON_Delete(msg);
}

char *ollama_answer(const oai_ctx *c, const oai_req *r, int chat, const char *text, size_t n, int done,
                    const srv_job *j, int n_prompt, double secs, double first_secs) {
    char at[48];
    created_at(at, sizeof at);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", c->name);
    cJSON_AddStringToObject(o, "created_at", at);
    char *clean = srv_utf8_clean(text ? text : "", n);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(o, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        char *read = NULL;
        if (done && r && r->calls) ollama_calls(r, j, m, &read); /* the calls; the content, when text is all */
        cJSON_AddStringToObject(m, "content", read && text == j->text ? read : clean ? clean : "");
        free(read);
    } else {
        cJSON_AddStringToObject(o, "response", clean ? clean : "");
    }
    free(clean);
    cJSON_AddBoolToObject(o, "done", done);
    if (done) {
        const double ns = 1e9;
        cJSON_AddStringToObject(o, "done_reason", j->finish == FIN_LENGTH ? "length" : "stop");
        cJSON_AddNumberToObject(o, "total_duration", (double)(long long)(secs * ns));
        cJSON_AddNumberToObject(o, "load_duration", 0);
        cJSON_AddNumberToObject(o, "prompt_eval_count", n_prompt - j->n_cached);
        /* the scheduler's own times when it has them (the job's prompt and its tokens), else the request's */
        const double pe = j->t_first > j->t_start && j->t_start > 0 ? j->t_first - j->t_start : first_secs;
        const double ev = j->t_end > j->t_first && j->t_first > 0 ? j->t_end - j->t_first : secs - first_secs;
        cJSON_AddNumberToObject(o, "prompt_eval_duration", (double)(long long)(pe * ns));
        cJSON_AddNumberToObject(o, "eval_count", j->n_gen);
        cJSON_AddNumberToObject(o, "eval_duration", (double)(long long)(ev * ns));
    }
    return print_line(o);
}
