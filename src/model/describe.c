/*
 * describe.c - the public calls that describe a model file and predict a
 * plan's speed without loading anything: what `deltafin info` and `deltafin
 * plan` print, offered to every program through include/deltafin.h (the CLI
 * includes nothing else).
 *
 * df_model_describe reads the GGUF metadata and tensor directory only. It
 * sums the tensors by weight type, finds the routed experts (tensors named
 * "*_exps.*", whose third dimension counts the experts) and the layers that
 * have them (one ffn_down_exps tensor each), and derives the parameters one
 * token uses: all but the unselected routed experts. It checks nothing about
 * whether Deltafin can run the model (df_model_plan and df_model_load do):
 * an unknown architecture or an unsupported type is described, not refused.
 *
 * The description owns the GGUF context its strings point into; the public
 * struct is the first member of a private one, so df_model_desc_free finds
 * both.
 *
 * df_plan_predict is the tokens/s model: pure arithmetic over a df_plan and
 * two measured (or given) speeds. df_parse_size is the weight store's size
 * parser (ws_parse_size) under a public name.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deltafin.h"
#include "gguf.h"
#include "quant.h"
#include "util.h"
#include "wstore.h"

/* The hyperparameters a description lists, after "<arch>.", in this order. */
static const char *const HPARAM_KEYS[] = {
    "context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.dimension_count",
    "rope.freq_base", "attention.layer_norm_rms_epsilon", "rope.scaling.type", "rope.scaling.factor",
    "expert_count", "expert_used_count"};
#define N_HPARAM_KEYS (sizeof HPARAM_KEYS / sizeof HPARAM_KEYS[0])

typedef struct {
    df_model_desc pub; /* first: df_model_desc_free casts back */
    gguf_ctx *g;
    df_hparam hparams[N_HPARAM_KEYS];
    df_type_summary types[DF_TYPE_COUNT];
} desc_owner;

/* A metadata value as a df_hparam (integers and booleans in i). */
static df_hparam hparam_of(const char *key, const gguf_kv *kv) {
    df_hparam h;
    memset(&h, 0, sizeof h);
    h.key = key;
    if (kv->type == GGUF_T_STRING) {
        h.kind = DF_VALUE_STRING;
        h.s = kv->str;
    } else if (kv->type == GGUF_T_F32 || kv->type == GGUF_T_F64) {
        h.kind = DF_VALUE_FLOAT;
        h.f = kv->v.f;
    } else if (kv->type == GGUF_T_ARRAY) {
        h.kind = DF_VALUE_ARRAY;
        h.n = kv->arr_n;
    } else {
        h.kind = DF_VALUE_INT;
        h.i = kv->v.i;
    }
    return h;
}

static void describe_hparams(desc_owner *o) {
    const char *arch = o->pub.arch;
    int n = 0;
    for (size_t i = 0; arch && i < N_HPARAM_KEYS; i++) {
        char k[160];
        snprintf(k, sizeof k, "%s.%s", arch, HPARAM_KEYS[i]);
        const gguf_kv *kv = gguf_find(o->g, k);
        if (kv) o->hparams[n++] = hparam_of(HPARAM_KEYS[i], kv);
    }
    o->pub.hparams = o->hparams;
    o->pub.n_hparams = n;
}

/* Per-type sums, the routed experts and the active parameters. */
static void describe_tensors(desc_owner *o) {
    df_model_desc *d = &o->pub;
    const gguf_ctx *g = o->g;
    uint64_t by_n[DF_TYPE_COUNT] = {0}, by_bytes[DF_TYPE_COUNT] = {0}, by_expert[DF_TYPE_COUNT] = {0};
    uint64_t exp_params = 0;
    d->n_tensors = g->n_tensors;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        d->n_params += t->n_elements;
        d->n_bytes += t->nbytes;
        by_bytes[t->type] += t->nbytes;
        by_n[t->type]++;
        if (strstr(t->name, "ffn_down_exps.")) d->n_moe_layers++;
        if (!strstr(t->name, "_exps.") || t->ne[2] < 1) continue;
        d->n_expert = (uint64_t)t->ne[2];
        exp_params += t->n_elements;
        by_expert[t->type] += t->nbytes / (uint64_t)t->ne[2];
    }
    int n = 0;
    for (int t = 0; t < DF_TYPE_COUNT; t++) {
        if (!by_n[t] && !by_expert[t]) continue;
        const quant_traits *q = quant_traits_get(t);
        df_type_summary *s = &o->types[n++];
        s->name = q->name;
        s->supported = q->supported;
        s->n_tensors = by_n[t];
        s->bytes = by_bytes[t];
        s->bits_per_weight = 8.0 * (double)q->type_size / q->blck;
        s->expert_bytes = by_expert[t];
        d->expert_bytes += by_expert[t];
    }
    d->types = o->types;
    d->n_types = n;
    d->n_params_active = d->n_params;
    if (!d->n_expert || !d->arch) { /* a description of experts needs the architecture's expert_used_count */
        d->n_moe_layers = 0;
        return;
    }
    char k[160];
    snprintf(k, sizeof k, "%s.expert_used_count", d->arch);
    const gguf_kv *kv = gguf_find(g, k);
    if (kv && kv->type != GGUF_T_ARRAY && kv->type != GGUF_T_STRING) d->n_expert_used = kv->v.u;
    d->n_params_active = d->n_params - exp_params +
                         (d->n_expert_used <= d->n_expert ? exp_params / d->n_expert * d->n_expert_used : 0);
}

int df_model_describe(const char *path, df_model_desc **out, char *err, size_t errlen) {
    *out = NULL;
    desc_owner *o = df_calloc(1, sizeof *o);
    if (!o) return df_seterr(err, errlen, "out of memory");
    if (gguf_open(path, &o->g, err, errlen) != 0) {
        free(o);
        return -1;
    }
    quant_init();
    df_model_desc *d = &o->pub;
    d->n_files = o->g->n_files;
    d->gguf_version = o->g->version;
    d->arch = gguf_get_str(o->g, "general.architecture");
    d->name = gguf_get_str(o->g, "general.name");
    describe_hparams(o);
    describe_tensors(o);
    d->tok_model = gguf_get_str(o->g, "tokenizer.ggml.model");
    d->tok_pre = gguf_get_str(o->g, "tokenizer.ggml.pre");
    const gguf_kv *toks = gguf_get_arr(o->g, "tokenizer.ggml.tokens", GGUF_T_STRING);
    const gguf_kv *merges = gguf_get_arr(o->g, "tokenizer.ggml.merges", GGUF_T_STRING);
    d->n_tokens = toks ? toks->arr_n : 0;
    d->n_merges = merges ? merges->arr_n : 0;
    *out = d;
    return 0;
}

void df_model_desc_free(df_model_desc *d) {
    if (!d) return;
    desc_owner *o = (desc_owner *)d;
    gguf_close(o->g);
    free(o);
}

void df_plan_predict(const df_plan *p, double disk_bytes_per_s, double memory_bytes_per_s, df_plan_speed *out) {
    const int fits = p->budget >= p->minimum;
    const double hit = p->n_experts_total ? (double)p->n_expert_slots / p->n_experts_total : 1.0;
    const double experts_tok = (double)p->n_moe_layers * p->n_expert_used * (double)p->expert_slot_bytes;
    const double disk_tok = experts_tok * (1.0 - hit) + (double)p->n_dense_streamed * p->dense_layer_bytes;
    const double mem_tok = (double)p->dense_bytes + experts_tok;
    const double t_disk = disk_bytes_per_s > 0 ? disk_tok / disk_bytes_per_s : 0;
    const double t_mem = memory_bytes_per_s > 0 ? mem_tok / memory_bytes_per_s : 0;
    const double t_tok = t_disk > t_mem ? t_disk : t_mem;
    out->hit_rate = hit;
    out->disk_bytes_per_token = disk_tok;
    out->memory_bytes_per_token = mem_tok;
    out->disk_seconds = t_disk;
    out->memory_seconds = t_mem;
    out->tokens_per_s = fits && t_tok > 0 ? 1.0 / t_tok : 0.0;
}

uint64_t df_parse_size(const char *s) { return s ? ws_parse_size(s) : 0; }
