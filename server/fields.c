/*
 * fields.c - a request's JSON, field by field, and the errors that name them.
 *
 * An error is OpenAI's object ({"error": {message, type, param, code}}),
 * which every API of the server answers with (Ollama's and Anthropic's
 * translate it). The field readers leave a value absent or null as it is and
 * make a wrong type or range a 400 naming the field. srv_json_scan looks at a
 * body before cJSON parses it (a NUL, and how many values it may hold).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

void oai_set_error(oai_error *e, int status, const char *type, const char *param, const char *code, const char *fmt,
                   ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

char *oai_error_json(const oai_error *e) {
    cJSON *root = cJSON_CreateObject(), *er = cJSON_AddObjectToObject(root, "error");
    char *msg = srv_utf8_clean(e->message, strlen(e->message));
    cJSON_AddStringToObject(er, "message", msg ? msg : "error");
    free(msg);
    cJSON_AddStringToObject(er, "type", e->type ? e->type : "invalid_request_error");
    if (*e->param) cJSON_AddStringToObject(er, "param", e->param);
    else cJSON_AddNullToObject(er, "param");
    if (e->code) cJSON_AddStringToObject(er, "code", e->code);
    else cJSON_AddNullToObject(er, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

int oai_bad_request(oai_error *e, const char *param, const char *code, const char *fmt, ...) {
    char msg[sizeof e->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    oai_set_error(e, 400, "invalid_request_error", param, code, "%s", msg);
    return -1;
}

int oai_get_num(cJSON *o, const char *k, double lo, double hi, double *out, oai_error *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v)) return oai_bad_request(e, k, NULL, "'%s' must be a number", k);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi)) return oai_bad_request(e, k, NULL, "'%s' must be in [%g, %g]", k, lo, hi);
    *out = v->valuedouble;
    return 0;
}

int oai_get_int(cJSON *o, const char *k, long lo, long hi, long *out, oai_error *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return oai_bad_request(e, k, NULL, "'%s' must be an integer", k);
    if (!(v->valuedouble >= (double)lo && v->valuedouble <= (double)hi))
        return oai_bad_request(e, k, NULL, "'%s' must be in [%ld, %ld]", k, lo, hi);
    *out = (long)v->valuedouble;
    return 0;
}

int oai_get_bool(cJSON *o, const char *k, int *out, oai_error *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return oai_bad_request(e, k, NULL, "'%s' must be a boolean", k);
    *out = cJSON_IsTrue(v);
    return 0;
}

int srv_json_scan(const char *t, size_t n, long *values) {
    int in_str = 0;
    long v = 1;
    for (size_t i = 0; i < n; i++) {
        if (!t[i]) return 1; /* a raw NUL: cJSON would stop there */
        if (t[i] == '"') in_str = !in_str;
        else if (in_str && t[i] == '\\' && i + 1 < n) {
            if (t[i + 1] == 'u' && i + 5 < n && t[i + 2] == '0' && t[i + 3] == '0' && t[i + 4] == '0' && t[i + 5] == '0')
                return 1;
            i++; /* the escaped character (a quote or backslash among them) */
        } else if (!in_str && (t[i] == ',' || t[i] == '[' || t[i] == '{')) {
            v++;
        }
    }
    *values = v;
    return 0;
}
