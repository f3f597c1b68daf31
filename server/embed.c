/*
 * embed.c - /v1/embeddings (OpenAI's shape, as llama-server answers it for a generative model; docs/server.md,
 * "Embeddings").
 *
 *   POST /v1/embeddings {"input", "model", "encoding_format", "dimensions", "user"}
 *
 * input is a string, an array of strings, an array of token ids or an array of arrays of them; each becomes one
 * embedding job of the scheduler (sched.c: the prompt decoded from an empty cache, its last hidden states after
 * the final norm pooled - mean, last token or first, serve --pooling - and L2-normalised). Strings are tokenized
 * as prompts are (a BOS where the model wants one). The answer lists the vectors in input order, as floats or as
 * base64 of little-endian float32 (encoding_format "base64", what the openai clients ask for by default), with
 * usage.prompt_tokens. As OpenAI's API does, a field it does not know is a 400; dimensions other than the
 * model's width is a 400 (this model's vectors cannot be shortened), never ignored.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

#define BAD(param, ...) (oai_set_error(e, 400, "invalid_request_error", param, NULL, __VA_ARGS__), -1)

void embed_req_free(embed_req *r) {
    for (int i = 0; r->toks && i < r->n; i++) free(r->toks[i]);
    free(r->toks);
    free(r->n_toks);
    memset(r, 0, sizeof *r);
}

/* input[i] as tokens: a string (tokenized) or an array of ids. */
static int one_input(const oai_ctx *c, const cJSON *in, int i, embed_req *r, oai_error *e) {
    if (cJSON_IsString(in)) {
        if (!*in->valuestring) return BAD("input", "input[%d] is empty", i);
        return oai_tokenize_text(c, in->valuestring, strlen(in->valuestring), &r->toks[i], &r->n_toks[i], e);
    }
    const int n = cJSON_GetArraySize(in), nv = df_n_vocab(c->m);
    if (!cJSON_IsArray(in) || n == 0) return BAD("input", "input[%d] must be a non-empty string or array of token ids", i);
    if (n > c->n_ctx) return BAD("input", "input[%d] has %d tokens; the context holds %d", i, n, c->n_ctx);
    if (!(r->toks[i] = malloc((size_t)n * sizeof(int32_t))))
        return oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1;
    const cJSON *t;
    int k = 0;
    cJSON_ArrayForEach(t, in) {
        if (!cJSON_IsNumber(t) || t->valuedouble != (double)(long)t->valuedouble || t->valuedouble < 0 || t->valuedouble >= nv)
            return BAD("input", "input[%d]: token ids must be integers in [0, %d)", i, nv);
        r->toks[i][k++] = (int32_t)t->valuedouble;
    }
    r->n_toks[i] = n;
    return 0;
}

static int parse_fields(const oai_ctx *c, cJSON *b, embed_req *r, oai_error *e) {
    static const char *const known[] = {"input", "model", "encoding_format", "dimensions", "user", NULL};
    const cJSON *v;
    cJSON_ArrayForEach(v, b) {
        int ok = 0;
        for (int i = 0; known[i]; i++) ok |= !strcmp(v->string, known[i]);
        if (!ok) return BAD(v->string, "Unrecognized request argument supplied: %.60s", v->string);
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(b, "model")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v)) return BAD("model", "'model' must be a string");
        if (c->strict_model && strcmp(v->valuestring, c->name))
            return oai_set_error(e, 404, "invalid_request_error", "model", "model_not_found",
                                 "The model '%.200s' does not exist (this server has '%.200s')", v->valuestring,
                                 c->name), -1;
    }
    if ((v = cJSON_GetObjectItemCaseSensitive(b, "encoding_format")) && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v) || (strcmp(v->valuestring, "float") && strcmp(v->valuestring, "base64")))
            return BAD("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        r->base64 = v->valuestring[0] == 'b';
    }
    df_model_info mi;
    df_model_get_info(c->m, &mi);
    if ((v = cJSON_GetObjectItemCaseSensitive(b, "dimensions")) && !cJSON_IsNull(v) &&
        (!cJSON_IsNumber(v) || v->valuedouble != mi.n_embd))
        return BAD("dimensions", "this model's embeddings have %d dimensions and cannot be shortened", mi.n_embd);
    if ((v = cJSON_GetObjectItemCaseSensitive(b, "user")) && !cJSON_IsNull(v) && !cJSON_IsString(v))
        return BAD("user", "'user' must be a string");
    return 0;
}

int embed_parse(const oai_ctx *c, const char *body, size_t len, int max_inputs, embed_req *r, oai_error *e) {
    memset(r, 0, sizeof *r);
    cJSON *b = oai_parse_object(c, body, len, e);
    if (!b) return -1;
    int rc = parse_fields(c, b, r, e);
    const cJSON *in = cJSON_GetObjectItemCaseSensitive(b, "input");
    if (!rc && !in) rc = BAD("input", "'input' is required");
    /* one input (a string, or one array of ids), or a list of them */
    const int list = cJSON_IsArray(in) && (cJSON_IsString(in->child) || cJSON_IsArray(in->child));
    if (!rc) r->n = list ? cJSON_GetArraySize(in) : 1;
    if (!rc && r->n > max_inputs)
        rc = BAD("input", "at most %d inputs in one request on this server (--parallel + --queue)", max_inputs);
    if (!rc && (!(r->toks = calloc((size_t)r->n, sizeof *r->toks)) || !(r->n_toks = calloc((size_t)r->n, sizeof(int)))))
        rc = (oai_set_error(e, 500, "server_error", NULL, NULL, "out of memory"), -1);
    for (int i = 0; !rc && i < r->n; i++) {
        rc = one_input(c, list ? cJSON_GetArrayItem(in, i) : in, i, r, e);
        if (!rc && r->n_toks[i] > c->n_ctx)
            rc = BAD("input", "input[%d] has %d tokens; the context holds %d", i, r->n_toks[i], c->n_ctx);
        if (!rc) r->total += r->n_toks[i];
    }
    cJSON_Delete(b);
    if (rc) embed_req_free(r);
    return rc;
}

srv_job **embed_make_jobs(const embed_req *r, int pooling) {
    srv_job **jobs = calloc((size_t)r->n, sizeof *jobs);
    for (int i = 0; jobs && i < r->n; i++) {
        if (!(jobs[i] = srv_job_new(r->toks[i], r->n_toks[i]))) {
            while (i--) srv_job_free(jobs[i]);
            free(jobs);
            return NULL;
        }
        jobs[i]->embed = pooling;
        jobs[i]->max_tokens = 0;
    }
    return jobs;
}

/* n floats as base64 of their little-endian bytes (malloc'd). */
static char *base64_f32(const float *x, int n) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t nb = (size_t)n * 4;
    unsigned char *b = malloc(nb ? nb : 1);
    char *out = malloc((nb + 2) / 3 * 4 + 1), *o = out;
    if (!b || !out) return free(b), free(out), NULL;
    for (int i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        for (int k = 0; k < 4; k++) b[(size_t)i * 4 + (size_t)k] = (unsigned char)(u >> (8 * k));
    }
    for (size_t i = 0; i < nb; i += 3) {
        const uint32_t v = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) | (i + 2 < nb ? b[i + 2] : 0);
        *o++ = al[v >> 18 & 63];
        *o++ = al[v >> 12 & 63];
        *o++ = i + 1 < nb ? al[v >> 6 & 63] : '=';
        *o++ = i + 2 < nb ? al[v & 63] : '=';
    }
    *o = 0;
    free(b);
    return out;
}

char *embed_response(const oai_ctx *c, const embed_req *r, srv_job *const *jobs) {
    cJSON *root = cJSON_CreateObject(), *data = cJSON_AddArrayToObject(root, "data");
    cJSON_AddStringToObject(root, "object", "list");
    int ok = 1;
    for (int i = 0; i < r->n; i++) {
        const srv_job *j = jobs[i];
        cJSON *d = cJSON_CreateObject();
        cJSON_AddStringToObject(d, "object", "embedding");
        cJSON_AddNumberToObject(d, "index", i);
        if (r->base64) {
            char *s = base64_f32(j->embd, j->n_embd);
            ok &= s != NULL;
            cJSON_AddStringToObject(d, "embedding", s ? s : "");
            free(s);
        } else {
            cJSON *v = cJSON_AddArrayToObject(d, "embedding");
            for (int k = 0; k < j->n_embd; k++) cJSON_AddItemToArray(v, cJSON_CreateNumber(j->embd[k]));
        }
        cJSON_AddItemToArray(data, d);
    }
    cJSON_AddStringToObject(root, "model", c->name);
    cJSON *u = cJSON_AddObjectToObject(root, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", r->total);
    cJSON_AddNumberToObject(u, "total_tokens", r->total);
    char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return s;
}
