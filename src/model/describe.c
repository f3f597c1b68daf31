/*
 * describe.c - the public call that describes a model file without loading
 * anything: what `deltafin info` prints, offered to every program through
 * include/deltafin.h (the CLI includes nothing else).
 *
 * df_model_describe reads the GGUF metadata and tensor directory only. It
 * sums the tensors by weight type, finds the routed experts (tensors named
 * "*_exps.*", whose third dimension counts the experts) and the layers that
 * have them (one ffn_down_exps tensor each), and derives the parameters one
 * token uses: all but the unselected routed experts and the NextN/MTP blocks
 * (the last nextn_predict_layers of block_count, which the forward pass never
 * runs). It checks nothing about
 * whether Deltafin can run the model (df_model_plan and df_model_load do):
 * an unknown architecture or an unsupported type is described, not refused.
 *
 * The description owns the GGUF context its strings point into (or, made
 * from a planner's context by df_describe_gguf, borrows it); the public
 * struct is the first member of a private one, so df_model_desc_free finds
 * both.
 *
 * df_parse_size is the weight store's size parser (ws_parse_size) under a
 * public name. The tokens/s model is plan.c's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deltafin.h"
#include "describe.h"
#include "gguf.h"
#include "quant.h"
#include "util.h"
#include "wstore.h"

/* The hyperparameters a description lists, after "<arch>.", in this order. */
static const char *const HPARAM_KEYS[] = {
    "context_length", "embedding_length", "block_count", "feed_forward_length", "attention.head_count",
    "attention.head_count_kv", "attention.key_length", "attention.value_length", "rope.dimension_count",
    "rope.freq_base", "attention.layer_norm_rms_epsilon", "rope.scaling.type", "rope.scaling.factor",
    "expert_count", "expert_used_count", "expert_shared_count", "leading_dense_block_count", "nextn_predict_layers"};
#define N_HPARAM_KEYS (sizeof HPARAM_KEYS / sizeof HPARAM_KEYS[0])

typedef struct {
    df_model_desc pub; /* first: df_model_desc_free casts back */
    gguf_ctx *g;
    int owns_g; /* closed with the description */
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

/* An integer metadata value "<arch>.<key>", or 0 when missing or not an integer. */
static int64_t arch_int(const desc_owner *o, const char *key) {
    char k[160];
    snprintf(k, sizeof k, "%s.%s", o->pub.arch, key);
    const gguf_kv *kv = gguf_find(o->g, k);
    return kv && kv->type != GGUF_T_ARRAY && kv->type != GGUF_T_STRING && kv->type != GGUF_T_F32 &&
                   kv->type != GGUF_T_F64
               ? kv->v.i
               : 0;
}

/* The NextN/MTP blocks: the last nextn_predict_layers of block_count, never
 * run (d->nextn_first_block is where they start; INT64_MAX: none). */
static int in_nextn(const df_model_desc *d, const gguf_tensor *t) {
    int l = -1;
    return d->n_nextn > 0 && sscanf(t->name, "blk.%d.", &l) == 1 && l >= d->nextn_first_block;
}

/* Per-type sums, the routed experts and the active parameters. */
static void describe_tensors(desc_owner *o) {
    df_model_desc *d = &o->pub;
    const gguf_ctx *g = o->g;
    uint64_t by_n[DF_TYPE_COUNT] = {0}, by_bytes[DF_TYPE_COUNT] = {0}, by_expert[DF_TYPE_COUNT] = {0};
    uint64_t exp_params = 0;
    if (d->arch) {
        const int64_t nextn = arch_int(o, "nextn_predict_layers"), blocks = arch_int(o, "block_count");
        if (nextn > 0 && nextn < blocks) {
            d->n_nextn = nextn;
            d->nextn_first_block = blocks - nextn;
        }
    }
    d->n_tensors = g->n_tensors;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor *t = &g->tensors[i];
        d->n_params += t->n_elements;
        d->n_bytes += t->nbytes;
        by_bytes[t->type] += t->nbytes;
        by_n[t->type]++;
        if (in_nextn(d, t)) { /* not run: neither active nor counted among the experts */
            d->nextn_params += t->n_elements;
            d->nextn_bytes += t->nbytes;
            continue;
        }
        if (strstr(t->name, "ffn_down_exps.") && t->n_dims == 3) d->n_moe_layers++;
        if (!strstr(t->name, "_exps.") || t->n_dims != 3 || t->ne[2] < 1) continue; /* not per-expert biases */
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
    d->n_params_active = d->n_params - d->nextn_params;
    if (!d->n_expert || !d->arch) { /* a description of experts needs the architecture's expert_used_count */
        d->n_moe_layers = 0;
        return;
    }
    d->n_expert_used = (uint64_t)arch_int(o, "expert_used_count");
    d->n_params_active = d->n_params - d->nextn_params - exp_params +
                         (d->n_expert_used <= d->n_expert ? exp_params / d->n_expert * d->n_expert_used : 0);
}

int df_describe_gguf(gguf_ctx *g, int own, df_model_desc **out, char *err, size_t errlen) {
    *out = NULL;
    desc_owner *o = df_calloc(1, sizeof *o);
    if (!o) {
        if (own) gguf_close(g);
        return df_seterr(err, errlen, "out of memory");
    }
    o->g = g;
    o->owns_g = own;
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

int df_model_describe(const char *path, df_model_desc **out, char *err, size_t errlen) {
    gguf_ctx *g;
    *out = NULL;
    if (gguf_open(path, &g, err, errlen) != 0) return -1;
    return df_describe_gguf(g, 1, out, err, errlen);
}

void df_model_desc_free(df_model_desc *d) {
    if (!d) return;
    desc_owner *o = (desc_owner *)d;
    if (o->owns_g) gguf_close(o->g);
    free(o);
}

uint64_t df_parse_size(const char *s) { return s ? ws_parse_size(s) : 0; }
