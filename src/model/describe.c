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
 * token uses: all but the unselected routed experts and the NextN/MTP blocks
 * (the last nextn_predict_layers of block_count, which the forward pass never
 * runs). It checks nothing about
 * whether Deltafin can run the model (df_model_plan and df_model_load do):
 * an unknown architecture or an unsupported type is described, not refused.
 *
 * The description owns the GGUF context its strings point into; the public
 * struct is the first member of a private one, so df_model_desc_free finds
 * both.
 *
 * df_plan_predict is the tokens/s model: pure arithmetic over a df_plan and
 * two measured (or given) speeds; df_plan_predict_spec the same for
 * speculative decoding (a pass of k + 1 tokens, some of them kept). df_parse_size is the weight store's size
 * parser (ws_parse_size) under a public name.
 */
#include <math.h>
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
    "expert_count", "expert_used_count", "expert_shared_count", "leading_dense_block_count", "nextn_predict_layers"};
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
        if (!strstr(t->name, "_exps.") || t->n_dims != 3 || t->ne[2] < 1) continue; /* not gpt-oss's expert biases */
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

/* One pass that runs experts_layer distinct experts in each MoE layer and
 * yields tokens tokens: its reads, per token. page: bytes of the page cache
 * that hold what streams (df_plan_predict_tiers; 0: none): the streamed dense
 * layers first (every token reads them, so they are the last the kernel
 * drops), then the experts outside the budget's cache, as many as fit (taken
 * as uniformly used); what it serves is copied, its bytes read and written. */
static void predict_pass(const df_plan *p, double disk_bytes_per_s, double memory_bytes_per_s, double experts_layer,
                         double tokens, double page, df_plan_speed *out) {
    const int fits = p->budget >= p->minimum;
    const double hit = p->hot_known ? p->hot_hit_rate
                       : p->n_experts_total ? (double)p->n_expert_slots / p->n_experts_total : 1.0;
    const double experts_pass = (double)p->n_moe_layers * experts_layer * (double)p->expert_slot_bytes;
    const double dense = (double)p->n_dense_streamed * p->dense_layer_bytes;
    const double outside = (double)(p->n_experts_total - p->n_expert_slots) * (double)p->expert_slot_bytes;
    const double dense_pc = page < dense ? page : dense, room = page - dense_pc;
    const double hit2 = outside > 0 ? (1.0 - hit) * (room < outside ? room / outside : 1.0) : 0.0;
    const double disk_tok = (experts_pass * (1.0 - hit - hit2) + dense - dense_pc) / tokens;
    const double mem_tok = ((double)(p->dense_bytes - p->requant_saved_bytes) + experts_pass + /* --resident-type */
                            2.0 * (experts_pass * hit2 + dense_pc)) / tokens;
    const double t_disk = disk_bytes_per_s > 0 ? disk_tok / disk_bytes_per_s : 0;
    const double t_mem = memory_bytes_per_s > 0 ? mem_tok / memory_bytes_per_s : 0;
    const double t_tok = t_disk > t_mem ? t_disk : t_mem;
    out->hit_rate = hit;
    out->page_cache_hit_rate = hit2;
    out->disk_bytes_per_token = disk_tok;
    out->memory_bytes_per_token = mem_tok;
    out->disk_seconds = t_disk;
    out->memory_seconds = t_mem;
    out->tokens_per_s = fits && t_tok > 0 ? 1.0 / t_tok : 0.0;
}

void df_plan_predict(const df_plan *p, double disk_bytes_per_s, double memory_bytes_per_s, df_plan_speed *out) {
    predict_pass(p, disk_bytes_per_s, memory_bytes_per_s, p->n_expert_used, 1.0, 0, out);
}

void df_plan_predict_tiers(const df_plan *p, double disk_bytes_per_s, double memory_bytes_per_s,
                           uint64_t page_cache_bytes, df_plan_speed *out) {
    predict_pass(p, disk_bytes_per_s, memory_bytes_per_s, p->n_expert_used, 1.0, (double)page_cache_bytes, out);
}

/* Speculation: a pass verifies k guesses (k + 1 tokens: the union of their
 * experts, each token choosing n_expert_used of a layer's E uniformly, is
 * E (1 - (1 - used/E)^(k+1)) experts a layer) and yields
 * (1 - a^(k+1)) / (1 - a) tokens at acceptance a. */
void df_plan_predict_spec(const df_plan *p, double disk_bytes_per_s, double memory_bytes_per_s, double accept, int k,
                          df_plan_speed *out) {
    if (k <= 0) {
        df_plan_predict(p, disk_bytes_per_s, memory_bytes_per_s, out);
        return;
    }
    const double e = p->n_moe_layers ? (double)p->n_experts_total / p->n_moe_layers : 0;
    const double union_layer = e > 0 ? e * (1.0 - pow(1.0 - p->n_expert_used / e, k + 1)) : 0;
    double tokens = 0, pk = 1;
    for (int i = 0; i <= k; i++) tokens += pk, pk *= accept;
    predict_pass(p, disk_bytes_per_s, memory_bytes_per_s, union_layer, tokens, 0, out);
}

void df_plan_predict_ranks(const df_plan *r0, const df_plan *rn, double disk_bytes_per_s, double memory_bytes_per_s,
                           double net_bytes_per_s, double net_latency_s, int one_machine, df_cluster_speed *out) {
    memset(out, 0, sizeof *out);
    const int R = r0->ranks > 1 ? r0->ranks : 1;
    /* each rank's part of a MoE layer's selections: its learned share of the uses, else its part of the experts */
    const double K = r0->n_expert_used;
    const double part0 = r0->n_experts_all > 0 ? (double)r0->n_experts_total / r0->n_experts_all : 1.0 / R;
    const double part = rn->n_experts_all > 0 ? (double)rn->n_experts_total / rn->n_experts_all : 1.0 / R;
    const double share0 = r0->hot_known ? K * r0->hot_share : K * part0, share = rn->hot_known ? K * rn->hot_share : K * part;
    predict_pass(r0, disk_bytes_per_s, memory_bytes_per_s, share0, 1.0, 0, &out->rank0);
    predict_pass(R > 1 ? rn : r0, disk_bytes_per_s, memory_bytes_per_s, R > 1 ? share : share0, 1.0, 0, &out->other);
    /* ranks on one machine share its disk: their reads add up; on their own machines the slowest rank sets
     * the pace */
    const double b0 = out->rank0.disk_bytes_per_token, bn = out->other.disk_bytes_per_token;
    const double disk = one_machine ? b0 + (R - 1) * bn : (b0 > bn ? b0 : bn);
    out->disk_seconds = disk_bytes_per_s > 0 ? disk / disk_bytes_per_s : 0;
    /* compute: rank 0's dense part alone, then every rank's experts at once, on one machine as many at a time
     * as its cores allow (one_machine) */
    const double e0 = memory_bytes_per_s > 0
                          ? r0->n_moe_layers * share0 * (double)r0->expert_slot_bytes / memory_bytes_per_s : 0;
    const double m0 = out->rank0.memory_seconds, d0 = m0 > e0 ? m0 - e0 : 0;
    const double en = R > 1 ? out->other.memory_seconds : 0, slowest = e0 > en ? e0 : en;
    const int at_once = one_machine > 0 ? (one_machine < R ? one_machine : R) : R;
    const double shared = (e0 + (R - 1) * en) / at_once;
    out->memory_seconds = d0 + (shared > slowest ? shared : slowest);
    if (R > 1) { /* per MoE layer: rows and choices out to every rank, the others' expert rows back */
        const double row = 4.0 * r0->expert_width, out_bytes = (R - 1) * (row + 4.0 * r0->n_expert_used);
        const double back = (double)r0->n_expert_used * (R - 1) / R * row;
        out->net_bytes_per_token = r0->n_moe_layers * (out_bytes + back);
        out->net_seconds = r0->n_moe_layers * 3.0 * net_latency_s +
                           (net_bytes_per_s > 0 ? out->net_bytes_per_token / net_bytes_per_s : 0);
    }
    /* in series: a MoE layer's step waits for every rank's rows, so a miss the lookahead did not guess ahead
     * (most of them: its recall is 20-60%) stalls the whole cluster while it is read, and the computing and
     * the messages do not overlap each other (bench/RESULTS.md, bench/cluster.sh 2026-12-05: within 5% at 2 and 4 ranks) */
    const double t = out->disk_seconds + out->memory_seconds + out->net_seconds;
    const int fits = r0->budget >= r0->minimum && (R == 1 || rn->budget >= rn->minimum);
    out->tokens_per_s = fits && t > 0 ? 1.0 / t : 0.0;
}

uint64_t df_parse_size(const char *s) { return s ? ws_parse_size(s) : 0; }
