/*
 * model.c - loading a model (GGUF -> hyperparameters, weight handles,
 * tokenizer), sessions (KV cache and scratch), and the helpers every
 * architecture's forward pass shares: embedding lookup, matrix products
 * through the weight store (KV cache writes and attention are in attn.c).
 *
 * Every hyperparameter is range-checked before it sizes anything, and every
 * tensor's shape is checked against them, so a hostile file gives an error
 * here rather than an out-of-bounds access in the forward pass.
 */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "quant.h"
#include "requant.h"
#include "util.h"
#include "wsio.h"

#define DF_VERSION "0.1.0"
#define MAX_DIM (1 << 20)
#define MAX_LAYERS 4096
#define DEFAULT_CTX_CAP 4096

static const df_arch *const ARCHES[] = {&df_arch_llama,     &df_arch_qwen2,       &df_arch_qwen3,
                                        &df_arch_qwen2moe,  &df_arch_qwen3moe,    &df_arch_deepseek2,
                                        &df_arch_kimi_linear, &df_arch_kimi_k3};

const df_arch *df_arch_find(const char *name) {
    for (size_t i = 0; i < sizeof ARCHES / sizeof ARCHES[0]; i++)
        if (strcmp(ARCHES[i]->name, name) == 0) return ARCHES[i];
    return NULL;
}

const char *df_version(void) { return DF_VERSION; }
const char *df_isa(void) {
    quant_init();
    return quant_isa_name();
}

df_model_params df_model_default_params(void) {
    df_model_params p;
    memset(&p, 0, sizeof p);
    p.use_mmap = 1;
    p.kv_type = DF_KV_F16;
    return p;
}

/* ---- hyperparameters ---- */

/* Read "<arch>.<suffix>" as an integer in [lo, hi]; optional keys keep *out. */
int df_hp_int(df_model *m, const char *suffix, int *out, int lo, int hi, int required, char *err, size_t errlen) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    const gguf_kv *kv = gguf_find(m->g, key);
    if (!kv) return required ? df_seterr(err, errlen, "%s: missing metadata key '%s'", m->path, key) : 0;
    if (kv->type == GGUF_T_ARRAY)
        return df_seterr(err, errlen, "%s: '%s' is a per-layer array, which is not supported", m->path, key);
    int64_t v;
    if (gguf_get_i64(m->g, key, &v, err, errlen) != 0) return -1;
    if (v < lo || v > hi)
        return df_seterr(err, errlen, "%s: metadata '%s' = %lld is out of range [%d, %d]", m->path, key, (long long)v,
                         lo, hi);
    *out = (int)v;
    return 0;
}

static int hp_float(df_model *m, const char *suffix, float *out, float lo, float hi, char *err, size_t errlen) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    if (!gguf_find(m->g, key)) return 0;
    float v;
    if (gguf_get_f32(m->g, key, &v, err, errlen) != 0) return -1;
    if (!(v >= lo && v <= hi))
        return df_seterr(err, errlen, "%s: metadata '%s' = %g is out of range [%g, %g]", m->path, key, v, lo, hi);
    *out = v;
    return 0;
}

int df_hp_layers(df_model *m, const char *suffix, int32_t **out, int lo, int hi, char *err, size_t errlen) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", m->arch_name, suffix);
    *out = NULL;
    const gguf_kv *kv = gguf_find(m->g, key);
    if (!kv || kv->type != GGUF_T_ARRAY) return 0;
    const int n = m->hp.n_layer;
    if (kv->arr_n != (uint64_t)n)
        return df_seterr(err, errlen, "%s: '%s' has %llu entries for %d layers", m->path, key,
                         (unsigned long long)kv->arr_n, n);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)n);
    if (!v) return df_seterr(err, errlen, "%s: out of memory", m->path);
    for (int l = 0; l < n; l++) {
        int64_t x;
        switch (kv->arr_type) {
        case GGUF_T_U8: x = ((const uint8_t *)kv->arr)[l]; break;
        case GGUF_T_I8: x = ((const int8_t *)kv->arr)[l]; break;
        case GGUF_T_U16: x = ((const uint16_t *)kv->arr)[l]; break;
        case GGUF_T_I16: x = ((const int16_t *)kv->arr)[l]; break;
        case GGUF_T_U32: x = ((const uint32_t *)kv->arr)[l]; break;
        case GGUF_T_I32: x = ((const int32_t *)kv->arr)[l]; break;
        case GGUF_T_U64: x = ((const uint64_t *)kv->arr)[l] > (uint64_t)INT64_MAX ? -1 : (int64_t)((const uint64_t *)kv->arr)[l]; break;
        case GGUF_T_I64: x = ((const int64_t *)kv->arr)[l]; break;
        default:
            free(v);
            return df_seterr(err, errlen, "%s: '%s' is an array of type %d, not of integers", m->path, key, kv->arr_type);
        }
        if (x < lo || x > hi) {
            free(v);
            return df_seterr(err, errlen, "%s: '%s'[%d] = %lld is out of range [%d, %d]", m->path, key, l, (long long)x,
                             lo, hi);
        }
        v[l] = (int32_t)x;
    }
    *out = v;
    return 0;
}

/* head_count_kv and feed_forward_length may be per-layer arrays: a zero
 * head_count_kv marks a recurrent (linear attention) layer. Attention layers
 * must agree on one value (the KV cache has one row width). */
static int read_layer_arrays(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    int32_t *kv = NULL;
    if (df_hp_layers(m, "attention.head_count_kv", &kv, 0, h->n_head, err, errlen)) return -1;
    if (kv) {
        int first = 0;
        for (int l = 0; l < h->n_layer; l++) {
            if (kv[l] == 0) continue;
            if (first && kv[l] != first) {
                const int other = kv[l];
                free(kv);
                return df_seterr(err, errlen, "%s: attention layers have different head_count_kv (%d and %d)", m->path,
                                 first, other);
            }
            first = kv[l];
        }
        h->n_head_kv = first ? first : h->n_head;
        for (int l = 0; l < h->n_layer; l++) h->n_layer_recurrent += kv[l] == 0;
        if (h->n_layer_recurrent) {
            h->recurrent = malloc((size_t)h->n_layer);
            if (!h->recurrent) {
                free(kv);
                return df_seterr(err, errlen, "%s: out of memory", m->path);
            }
            for (int l = 0; l < h->n_layer; l++) h->recurrent[l] = kv[l] == 0;
        }
        free(kv);
    } else if (df_hp_int(m, "attention.head_count_kv", &h->n_head_kv, 1, h->n_head, 0, err, errlen)) {
        return -1;
    }
    if (df_hp_layers(m, "feed_forward_length", &h->n_ff_l, 0, MAX_DIM, err, errlen)) return -1;
    if (h->n_ff_l) {
        h->n_ff = 0;
        for (int l = 0; l < h->n_layer; l++)
            if (h->n_ff_l[l] > h->n_ff) h->n_ff = h->n_ff_l[l];
        if (h->n_ff < 1) return df_seterr(err, errlen, "%s: feed_forward_length is zero in every layer", m->path);
    } else if (df_hp_int(m, "feed_forward_length", &h->n_ff, 1, MAX_DIM, 1, err, errlen)) {
        return -1;
    }
    return 0;
}

static int read_hparams(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    h->n_ctx_train = 2048;
    if (df_hp_int(m, "context_length", &h->n_ctx_train, 1, 1 << 24, 0, err, errlen) ||
        df_hp_int(m, "embedding_length", &h->n_embd, 1, MAX_DIM, 1, err, errlen) ||
        df_hp_int(m, "block_count", &h->n_layer, 1, MAX_LAYERS, 1, err, errlen) ||
        df_hp_int(m, "attention.head_count", &h->n_head, 1, 65536, 1, err, errlen))
        return -1;
    h->n_head_kv = h->n_head;
    if (read_layer_arrays(m, err, errlen)) return -1;
    if (h->n_head % h->n_head_kv != 0)
        return df_seterr(err, errlen, "%s: head_count %d is not a multiple of head_count_kv %d", m->path, h->n_head,
                         h->n_head_kv);
    h->head_dim = h->n_embd / h->n_head;
    if (df_hp_int(m, "attention.key_length", &h->head_dim, 1, 65536, 0, err, errlen)) return -1;
    h->head_dim_v = h->head_dim;
    if (df_hp_int(m, "attention.value_length", &h->head_dim_v, 1, 65536, 0, err, errlen)) return -1;
    if (h->head_dim < 2 || h->head_dim % 2)
        return df_seterr(err, errlen, "%s: head size %d must be even and at least 2", m->path, h->head_dim);
    if ((int64_t)h->head_dim * h->n_head > MAX_DIM)
        return df_seterr(err, errlen, "%s: attention width %lld is too large", m->path,
                         (long long)h->head_dim * h->n_head);
    h->n_rot = h->head_dim;
    if (df_hp_int(m, "rope.dimension_count", &h->n_rot, 2, h->head_dim, 0, err, errlen)) return -1;
    if (h->n_rot % 2) return df_seterr(err, errlen, "%s: rope.dimension_count %d must be even", m->path, h->n_rot);
    h->norm_eps = 1e-5f;
    if (hp_float(m, "attention.layer_norm_rms_epsilon", &h->norm_eps, 0.0f, 1.0f, err, errlen)) return -1;
    h->rope_base = 10000.0f;
    if (hp_float(m, "rope.freq_base", &h->rope_base, 1.0f, 1e12f, err, errlen)) return -1;

    /* RoPE scaling, as llama.cpp interprets the keys. */
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
    const char *stype = gguf_get_str(m->g, key);
    float factor = 0.0f;
    if (hp_float(m, "rope.scaling.factor", &factor, 0.0f, 1e6f, err, errlen)) return -1;
    if (factor == 0.0f && hp_float(m, "rope.scale_linear", &factor, 0.0f, 1e6f, err, errlen)) return -1;
    h->rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    int yarn = 0;
    if (stype) {
        if (strcmp(stype, "none") == 0) h->rope_freq_scale = 1.0f;
        else if (strcmp(stype, "yarn") == 0) yarn = 1;
        else if (strcmp(stype, "linear") != 0)
            return df_seterr(err, errlen, "%s: unsupported rope.scaling.type '%s' (none, linear, yarn)", m->path, stype);
    }
    h->n_ctx_orig = h->n_ctx_train;
    if (df_hp_int(m, "rope.scaling.original_context_length", &h->n_ctx_orig, 1, 1 << 24, 0, err, errlen)) return -1;
    h->yarn_beta_fast = 32.0f;
    h->yarn_beta_slow = 1.0f;
    h->yarn_ext_factor = yarn ? 1.0f : 0.0f;
    float attn_factor = 1.0f, log_mul = 0.0f;
    if (hp_float(m, "rope.scaling.yarn_beta_fast", &h->yarn_beta_fast, 0.0f, 1e6f, err, errlen) ||
        hp_float(m, "rope.scaling.yarn_beta_slow", &h->yarn_beta_slow, 0.0f, 1e6f, err, errlen) ||
        hp_float(m, "rope.scaling.yarn_ext_factor", &h->yarn_ext_factor, 0.0f, 1e3f, err, errlen) ||
        hp_float(m, "rope.scaling.attn_factor", &attn_factor, 0.0f, 1e3f, err, errlen) ||
        hp_float(m, "rope.scaling.yarn_log_multiplier", &log_mul, 0.0f, 1e3f, err, errlen))
        return -1;
    h->yarn_attn_factor = 1.0f;
    if (h->yarn_ext_factor != 0.0f) {
        const float f = 1.0f / h->rope_freq_scale;
        float ms = f <= 1.0f ? 1.0f : 0.1f * logf(f) + 1.0f;
        if (log_mul != 0.0f) {
            float ms_all = f <= 1.0f ? 1.0f : 0.1f * log_mul * logf(f) + 1.0f;
            h->yarn_attn_factor = ms / ms_all; /* mscale taken as 1, as llama.cpp does */
        } else {
            h->yarn_attn_factor = ms;
        }
        h->yarn_attn_factor *= 1.0f / (1.0f + 0.1f * logf(f));
    }
    h->yarn_attn_factor *= attn_factor;
    h->kq_scale = 1.0f / sqrtf((float)h->head_dim);
    return df_moe_read_hparams(m, err, errlen);
}

/* ---- tensors ---- */

ws_tensor *df_tensor(df_model *m, const char *fmt, int layer, int required, char *err, size_t errlen) {
    char name[96];
    snprintf(name, sizeof name, fmt, layer);
    if (!required && !gguf_find_tensor(m->g, name)) return NULL;
    ws_tensor *t = ws_get(m->ws, name, err, errlen);
    if (!t && required) {
        char inner[256];
        snprintf(inner, sizeof inner, "%s", err ? err : "");
        df_seterr(err, errlen, "%s: %s", m->path, inner);
    }
    return t;
}

int df_bind(df_model *m, ws_tensor **dst, const char *fmt, int l, int required, int64_t ne0, int64_t ne1,
            int64_t ne2, char *err, size_t errlen) {
    char name[96];
    snprintf(name, sizeof name, fmt, l);
    *dst = NULL;
    if (!required && !gguf_find_tensor(m->g, name)) return 0;
    ws_tensor *t = df_tensor(m, fmt, l, 1, err, errlen);
    if (!t) return -1;
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1)
        return df_seterr(err, errlen, "%s: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld, %lld]",
                         m->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)ne0,
                         (long long)ne1, (long long)ne2);
    if (ne1 == 1 && ne2 == 1 && t->type != DF_TYPE_F32)
        return df_seterr(err, errlen, "%s: tensor '%s' must be f32", m->path, name);
    *dst = t;
    return 0;
}

int df_bind_embed_output(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    const int64_t E = h->n_embd;
    ws_tensor *t;
    const gguf_tensor *te = gguf_find_tensor(m->g, "token_embd.weight");
    if (!te) return df_seterr(err, errlen, "%s: missing tensor 'token_embd.weight'", m->path);
    if (te->ne[1] < 1 || te->ne[1] > (1 << 24))
        return df_seterr(err, errlen, "%s: token_embd.weight has %lld rows", m->path, (long long)te->ne[1]);
    if (df_bind(m, &m->tok_embd, "token_embd.weight", 0, 1, E, te->ne[1], 1, err, errlen)) return -1;
    h->n_vocab = (int)m->tok_embd->ne[1];
    if (df_bind(m, &m->output_norm, "output_norm.weight", 0, 1, E, 1, 1, err, errlen) ||
        df_bind(m, &t, "output.weight", 0, 0, E, h->n_vocab, 1, err, errlen))
        return -1;
    m->output = t ? t : m->tok_embd;
    return 0;
}

int df_check_shape(const ws_tensor *t, int64_t ne0, int64_t ne1, char *err, size_t errlen) {
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return df_seterr(err, errlen, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                         t->gt->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                         (long long)t->ne[3], (long long)ne0, (long long)ne1);
    return 0;
}

/* ---- loading ---- */

int df_model_is_file(const df_model *m, const char *path) { return m->ws && ws_is_model_file(m->ws, path); }

int df_model_save_hot(df_model *m, char *err, size_t errlen) {
    if (!m->ws || !ws_streaming(m->ws)) return 0;
    return ws_save_hot(m->ws, err, errlen);
}

void df_model_free(df_model *m) {
    if (!m) return;
    /* a caller that did not save (df_model_save_hot) gets a best-effort save */
    if (m->ws && ws_streaming(m->ws) && !ws_hot_saved(m->ws)) ws_save_hot(m->ws, NULL, 0);
    free(m->hot_path);
    tp_free(m->pool);
    tok_free(m->vocab);
    ws_close(m->ws);
    gguf_close(m->g);
    free(m->layers);
    free(m->hp.recurrent);
    free(m->hp.n_ff_l);
    free(m->path);
    free(m);
}

/* Bookkeeping outside the planned buffers: metadata, tokenizer, stacks,
 * allocator slack. Part of the budget; the cgroup slack covers the binary. */
static uint64_t overhead_bytes(const df_model *m) {
    uint64_t meta = 0;
    for (int i = 0; i < m->g->n_files; i++) meta += m->g->files[i].data_offset;
    return 3 * meta + (uint64_t)m->n_threads * (256u << 10) + (16u << 20);
}

/* The weight store's configuration for params p: mapped, resident, or
 * planned under p->mem_budget (sets m->session_reserve). */
static int store_config(df_model *m, const df_model_params *p, ws_config *cfg, char *err, size_t errlen) {
    memset(cfg, 0, sizeof *cfg);
    cfg->mode = p->mem_budget ? WS_STREAM : p->use_mmap > 0 ? WS_MMAP : WS_RESIDENT;
    if (!p->mem_budget && p->use_mmap < 0) { /* auto: resident when the weights fit 4 times over */
        uint64_t bytes = 0;
        for (int i = 0; i < m->g->n_files; i++) bytes += m->g->files[i].size;
        const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        const uint64_t ram = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
        cfg->mode = bytes <= ram / 4 ? WS_RESIDENT : WS_MMAP;
    }
    cfg->n_layer = m->hp.n_layer;
    cfg->n_expert = m->hp.n_expert;
    cfg->n_expert_used = m->hp.n_expert_used;
    cfg->io_threads = p->io_threads;
    m->io_threads = p->io_threads > 0 ? p->io_threads : 8;
    cfg->io_engine = p->io_engine == DF_IO_PREAD ? WSIO_PREAD : p->io_engine == DF_IO_URING ? WSIO_URING : WSIO_AUTO;
    cfg->resident_type = rq_parse_type(p->resident_type);
    if (cfg->resident_type < 0)
        return df_seterr(err, errlen, "resident type '%s' is not one of q4_K, q8_0", p->resident_type);
    df_session_params sp = df_session_default_params();
    sp.n_ctx = p->n_ctx;
    sp.n_batch = p->n_batch;
    sp.kv_type = p->kv_type;
    /* only a budget reserves (and so limits) a session: without one any session may be opened */
    m->session_reserve = 0;
    if (p->mem_budget) {
        const uint64_t sb = df_session_bytes(m, &sp);
        if (sb == UINT64_MAX)
            return df_seterr(err, errlen, "%s: a session of this context (%d) and batch would be too large", m->path,
                             p->n_ctx);
        m->session_reserve = sb;
    }
    cfg->budget = p->mem_budget;
    cfg->reserve = m->session_reserve + overhead_bytes(m);
    if (!p->mem_budget || (p->hot_file && !*p->hot_file)) {
        cfg->hot_path = NULL;
    } else if (p->hot_file) {
        cfg->hot_path = p->hot_file;
        cfg->hot_explicit = 1;
    } else {
        const size_t n = strlen(m->path) + 5;
        free(m->hot_path);
        m->hot_path = malloc(n);
        if (!m->hot_path) return df_seterr(err, errlen, "out of memory");
        snprintf(m->hot_path, n, "%s.hot", m->path);
        cfg->hot_path = m->hot_path;
    }
    return 0;
}

/* The weight store: mapped, resident, or planned under p->mem_budget. */
static int open_store(df_model *m, const df_model_params *p, char *err, size_t errlen) {
    ws_config cfg;
    if (store_config(m, p, &cfg, err, errlen) != 0) return -1;
    if (ws_open(m->g, &cfg, &m->ws, err, errlen) != 0) {
        char inner[512];
        snprintf(inner, sizeof inner, "%s", err ? err : "");
        return df_seterr(err, errlen, "%s: %s", m->path, inner);
    }
    return 0;
}

/* Bind the tensors and check them against the tokenizer. */
static int bind_all(df_model *m, char *err, size_t errlen) {
    if (!m->layers) m->layers = calloc((size_t)m->hp.n_layer, sizeof(df_layer));
    if (!m->layers) return df_seterr(err, errlen, "%s: out of memory", m->path);
    if (m->arch->bind(m, err, errlen) != 0) return -1;
    if (tok_n_vocab(m->vocab) != m->hp.n_vocab)
        return df_seterr(err, errlen, "%s: tokenizer has %d tokens but the embedding has %d rows", m->path,
                         tok_n_vocab(m->vocab), m->hp.n_vocab);
    return 0;
}

/* Check every tensor (present, supported type, shape) without reading any:
 * what a budget plan must do first, so that a malformed file is reported as
 * what it is and not as "budget too small", and plan approves only what run
 * can run. */
static int validate(df_model *m, char *err, size_t errlen) {
    ws_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.mode = WS_PLAN;
    cfg.n_layer = m->hp.n_layer;
    cfg.n_expert = m->hp.n_expert;
    cfg.n_expert_used = m->hp.n_expert_used;
    int rc = ws_open(m->g, &cfg, &m->ws, err, errlen);
    if (rc == 0) rc = bind_all(m, err, errlen);
    ws_close(m->ws); /* the handles bound here die with it: forget them */
    m->ws = NULL;
    if (m->layers) memset(m->layers, 0, (size_t)m->hp.n_layer * sizeof(df_layer));
    m->tok_embd = m->output_norm = m->output = m->rope_freqs = NULL;
    return rc;
}

/* The architecture and its hyperparameters. */
static int load_arch(df_model *m, const char *path, char *err, size_t errlen) {
    if (!m->arch_name) return df_seterr(err, errlen, "%s: missing general.architecture", path);
    m->arch = df_arch_find(m->arch_name);
    if (!m->arch)
        return df_seterr(err, errlen,
                         "%s: unsupported architecture '%s' (supported: llama, qwen2, qwen3, qwen2moe, qwen3moe, deepseek2, "
                         "kimi-linear, kimi-k3)",
                         path, m->arch_name);
    if (read_hparams(m, err, errlen) != 0) return -1;
    m->hp.rope_neox = m->arch->rope_neox;
    if (m->arch->hparams && m->arch->hparams(m, err, errlen) != 0) return -1;
    if (m->hp.n_layer_recurrent > 0 && m->hp.kda_head_dim == 0)
        return df_seterr(err, errlen, "%s: head_count_kv is 0 (a recurrent layer) in %d layers, which %s does not have",
                         path, m->hp.n_layer_recurrent, m->arch_name);
    return 0;
}

/* Everything before the weights: metadata, hyperparameters, tokenizer
 * (vocab_only: metadata and tokenizer of any architecture, as in llama.cpp's
 * ggml-vocab-*.gguf files, which hold no tensors). */
static int load_header(df_model *m, const char *path, const df_model_params *p, char *err, size_t errlen) {
    m->path = df_strdup(path);
    if (!m->path) return df_seterr(err, errlen, "%s: out of memory", path);
    if (gguf_open(path, &m->g, err, errlen) != 0) return -1;
    m->arch_name = gguf_get_str(m->g, "general.architecture");
    m->vocab_only = p->vocab_only;
    if (p->vocab_only && !m->arch_name) m->arch_name = "";
    if (!p->vocab_only && load_arch(m, path, err, errlen) != 0) return -1;
    if (tok_load(m->g, &m->vocab, err, errlen) != 0) {
        char inner[400];
        snprintf(inner, sizeof inner, "%s", err ? err : "");
        return df_seterr(err, errlen, "%s: tokenizer: %s", path, inner);
    }
    m->hp.n_vocab = tok_n_vocab(m->vocab); /* checked against the embedding by bind */
    m->n_threads = p->n_threads > 0 ? p->n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (m->n_threads < 1) m->n_threads = 1;
    if (m->n_threads > 512) m->n_threads = 512;
    return 0;
}

int df_model_load(const char *path, const df_model_params *p, df_model **out, char *err, size_t errlen) {
    df_model_params defp = df_model_default_params();
    if (!p) p = &defp;
    *out = NULL;
    quant_init();
    df_model *m = calloc(1, sizeof *m);
    if (!m) return df_seterr(err, errlen, "out of memory");
    if (load_header(m, path, p, err, errlen) != 0) goto fail;
    int shape_only = 0;
    if (!m->vocab_only && gguf_find(m->g, "deltafin.shape_only") &&
        gguf_get_bool(m->g, "deltafin.shape_only", &shape_only, err, errlen) == 0 && shape_only) {
        df_seterr(err, errlen, "%s is a shape-only model (mkmodel --shape-only: its tensor data are holes): it has no "
                  "weights to run; `deltafin plan` and `info` work on it", path);
        goto fail;
    }
    if (m->vocab_only) {
        *out = m;
        return 0;
    }
    if (p->mem_budget && validate(m, err, errlen) != 0) goto fail; /* the file's defects before the budget's */
    if (open_store(m, p, err, errlen) != 0) goto fail;
    if (bind_all(m, err, errlen) != 0) goto fail;
    m->pool = tp_create(m->n_threads);
    if (!m->pool) goto oom;
    *out = m;
    return 0;
oom:
    df_seterr(err, errlen, "%s: out of memory", path);
fail:
    df_model_free(m);
    return -1;
}

int df_model_plan(const char *path, const df_model_params *p, df_plan *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    quant_init();
    df_model *m = calloc(1, sizeof *m);
    if (!m) return df_seterr(err, errlen, "out of memory");
    df_model_params q = *p;
    q.vocab_only = 0;
    if (!q.mem_budget) q.mem_budget = 1; /* size the session as a budget would */
    int rc = load_header(m, path, &q, err, errlen);
    if (rc == 0) rc = validate(m, err, errlen);
    ws_config cfg;
    if (rc == 0) rc = store_config(m, &q, &cfg, err, errlen);
    if (rc == 0) {
        cfg.mode = WS_STREAM;
        out->session_bytes = m->session_reserve;
        out->overhead_bytes = overhead_bytes(m);
        ws_plan wp;
        char perr[256] = "";
        /* a budget below the minimum still reports the minimum; sizes that do not add up are an error */
        if (ws_make_plan(m->g, &cfg, &wp, perr, sizeof perr) != 0 && wp.minimum == UINT64_MAX)
            rc = df_seterr(err, errlen, "%s: %s", path, perr);
        out->n_ctx_train = m->hp.n_ctx_train;
        out->budget = p->mem_budget;
        out->minimum = wp.minimum;
        out->resident_bytes = wp.resident;
        out->dense_bytes = wp.dense_total;
        out->expert_bytes = wp.expert_total;
        out->n_dense_streamed = wp.n_dense_streamed;
        out->n_layer = m->hp.n_layer;
        out->dense_slot_bytes = wp.dense_slot;
        out->n_expert_slots = wp.n_expert_slots;
        out->n_experts_total = wp.n_experts_total;
        out->expert_slot_bytes = wp.expert_slot;
        out->n_expert_used = m->hp.n_expert_used;
        out->n_moe_layers = m->hp.n_expert ? wp.n_experts_total / m->hp.n_expert : 0;
        out->dense_layer_bytes = m->hp.n_layer ? wp.dense_total / (uint64_t)m->hp.n_layer : 0;
        out->requant_saved_bytes = wp.requant_saved;
    }
    df_model_free(m);
    return rc;
}

double df_model_probe_disk(const char *path, const df_model_params *p, double seconds, char *err, size_t errlen) {
    quant_init();
    df_model *m = calloc(1, sizeof *m);
    if (!m) return df_seterr(err, errlen, "out of memory"), -1.0;
    double rate = -1.0;
    df_model_params q = *p;
    q.vocab_only = 0;
    ws_config cfg;
    if (load_header(m, path, &q, err, errlen) == 0 && store_config(m, p, &cfg, err, errlen) == 0) {
        cfg.mode = WS_STREAM;
        cfg.hot_path = NULL; /* measure the disk, not a warm start */
        wstore *ws = NULL;
        uint64_t bytes = 0;
        double secs = 0;
        if (ws_open(m->g, &cfg, &ws, err, errlen) == 0 && ws_probe(ws, seconds, 0x5DEECE66Dull, &bytes, &secs, err, errlen) == 0)
            rate = bytes > 0 && secs > 0 ? (double)bytes / secs : 0.0;
        ws_close(ws);
    }
    df_model_free(m);
    return rate;
}

void df_model_io_stats(const df_model *m, df_io_stats *o) {
    ws_stats st;
    memset(o, 0, sizeof *o);
    if (!m->ws) return; /* vocab_only */
    ws_get_stats(m->ws, &st);
    snprintf(o->hot_note, sizeof o->hot_note, "%s", ws_hot_note(m->ws));
    o->bytes_read = st.bytes_read;
    o->hits = st.hits;
    o->misses = st.misses;
    o->prefetch_issued = st.prefetch_issued;
    o->prefetch_used = st.prefetch_used;
    o->unguessed = st.unguessed;
    o->expert_fetches = st.expert_fetches;
    o->read_seconds = st.read_seconds;
    o->wait_seconds = st.wait_seconds;
    o->streaming = ws_streaming(m->ws);
    const char *note = NULL, *engine = ws_io_engine(m->ws, &note);
    snprintf(o->io_engine, sizeof o->io_engine, "%s", engine ? engine : "");
    snprintf(o->io_note, sizeof o->io_note, "%s", note ? note : "");
    o->io_threads = m->io_threads;
}

void df_model_get_info(const df_model *m, df_model_info *o) {
    memset(o, 0, sizeof *o);
    o->arch = m->arch_name;
    o->name = gguf_get_str(m->g, "general.name");
    if (!o->name) o->name = "";
    o->n_vocab = m->hp.n_vocab;
    o->n_ctx_train = m->hp.n_ctx_train;
    o->n_embd = m->hp.n_embd;
    o->n_layer = m->hp.n_layer;
    o->n_head = m->hp.n_head;
    o->n_head_kv = m->hp.n_head_kv;
    o->head_dim = m->hp.head_dim;
    o->n_ff = m->hp.n_ff;
    o->n_threads = m->n_threads;
    o->n_expert = m->hp.n_expert;
    o->n_expert_used = m->hp.n_expert_used;
    o->n_expert_shared = m->hp.n_expert_shared;
    uint64_t expert_params = 0;
    for (uint64_t i = 0; i < m->g->n_tensors; i++) {
        const gguf_tensor *t = &m->g->tensors[i];
        o->n_params += t->n_elements;
        o->n_bytes += t->nbytes;
        if (m->hp.n_expert > 0 && strstr(t->name, "_exps.") && t->ne[2] == m->hp.n_expert) expert_params += t->n_elements;
    }
    o->n_params_active = o->n_params;
    if (m->hp.n_expert > 0) {
        o->n_params_active -= expert_params - expert_params / (uint64_t)m->hp.n_expert * (uint64_t)m->hp.n_expert_used;
        for (int l = 0; l < m->hp.n_layer; l++) {
            const df_layer *L = &m->layers[l];
            if (!L->ffn_gate_exps) continue;
            o->expert_bytes = (L->ffn_gate_exps->nbytes + L->ffn_up_exps->nbytes + L->ffn_down_exps->nbytes) /
                              (uint64_t)m->hp.n_expert;
            break;
        }
    }
}

/* ---- tokenizer wrappers ---- */

int df_tokenize(const df_model *m, const char *text, size_t len, int add_special, int parse_special, int32_t *out,
                int max, int *n_out, char *err, size_t errlen) {
    return tok_encode(m->vocab, text, len, add_special, parse_special, out, max, n_out, err, errlen);
}
int df_token_to_piece(const df_model *m, int32_t id, char *buf, int buflen) {
    return tok_piece(m->vocab, id, 0, buf, buflen);
}
int32_t df_token_bos(const df_model *m) { return tok_bos(m->vocab); }
int32_t df_token_eos(const df_model *m) { return tok_eos(m->vocab); }
int df_token_is_eog(const df_model *m, int32_t id) { return tok_is_eog(m->vocab, id); }
int df_n_vocab(const df_model *m) { return m->hp.n_vocab; }

/* ---- sessions ---- */

df_session_params df_session_default_params(void) {
    df_session_params p = {0, 512, DF_KV_F16};
    return p;
}

int df_session_trace_experts(df_session *s, const char *path, char *err, size_t errlen) {
    int failed = 0;
    if (s->trace) failed = (fflush(s->trace) != 0) | (ferror(s->trace) != 0) | (fclose(s->trace) != 0);
    s->trace = NULL;
    if (failed) return df_seterr(err, errlen, "writing the expert trace failed: %s", strerror(errno));
    if (!path) return 0;
    const df_hparams *h = &s->m->hp;
    if (h->n_expert == 0) return df_seterr(err, errlen, "the model has no experts to trace");
    if (df_model_is_file(s->m, path))
        return df_seterr(err, errlen, "%s: is the model file itself: not writing the trace there", path);
    s->trace = fopen(path, "wb");
    if (!s->trace) return df_seterr(err, errlen, "%s: %s", path, strerror(errno));
    const uint32_t hdr[5] = {0x52544644u /* "DFTR" */, 1, (uint32_t)h->n_layer, (uint32_t)h->n_expert,
                             (uint32_t)h->n_expert_used};
    if (fwrite(hdr, sizeof hdr, 1, s->trace) != 1) {
        fclose(s->trace);
        s->trace = NULL;
        return df_seterr(err, errlen, "%s: write failed", path);
    }
    return 0;
}

void df_session_free(df_session *s) {
    if (!s) return;
    if (s->trace) fclose(s->trace);
    free(s->mem);
    free(s->k_cache);
    free(s->v_cache);
    free(s->rec_conv);
    free(s->rec_state);
    free(s->x);
    free(s->xb);
    free(s->xb2);
    free(s->q);
    free(s->k);
    free(s->v);
    free(s->hb);
    free(s->hb2);
    free(s->att);
    free(s->rope_cache);
    free(s->logits);
    free(s->mm.buf);
    free(s->router);
    free(s->topk_id);
    free(s->topk_w);
    free(s->tok_of);
    free(s->slot_of);
    free(s->ex_x);
    free(s->ex_h);
    free(s->ex_h2);
    free(s->ex_y);
    free(s->q_abs);
    free(s->lat);
    free(s->o_lat);
    free(s->mla_tmp);
    free(s->ex_out);
    free(s->kda_q);
    free(s->kda_k);
    free(s->kda_v);
    free(s->kda_g);
    free(s->kda_o);
    free(s->kda_beta);
    free(s->kda_lo);
    free(s->res_stack);
    free(s->res_mix);
    free(s->res_scores);
    free(s->mla_gate);
    free(s->lat_in);
    free(s->lat_out);
    free(s);
}

/* The session's buffers, sized from the model and the session parameters:
 * one table serves both allocation and the memory planner's estimate. */
typedef struct {
    void **dst;
    uint64_t bytes;
} alloc_item;

#define MAX_ITEMS 64

/* Fill s's sizes (n_ctx, n_batch, KV dims) and the list of its buffers. */
static int session_layout(const df_model *m, const df_session_params *p, df_session *s, alloc_item *it, int *n_items,
                          char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    s->n_ctx = p->n_ctx > 0 ? p->n_ctx : (h->n_ctx_train < DEFAULT_CTX_CAP ? h->n_ctx_train : DEFAULT_CTX_CAP);
    if (s->n_ctx > (1 << 24)) return df_seterr(err, errlen, "context length %d is too large", p->n_ctx);
    s->n_batch = p->n_batch > 0 ? p->n_batch : 512;
    if (s->n_batch > s->n_ctx) s->n_batch = s->n_ctx;
    s->kv_type = p->kv_type == DF_KV_F32 ? DF_KV_F32 : DF_KV_F16;
    s->kv_elt = s->kv_type == DF_KV_F32 ? 4 : 2;
    /* per-layer memory: attention layers cache n_ctx positions (keys and
     * values, or one MLA latent), recurrent layers a fixed-size state */
    const int64_t n_rec = h->n_layer_recurrent, n_att = h->n_layer - n_rec;
    if (h->kv_lora_rank > 0) {
        /* MLA: the cache holds one latent per token (compressed kv + RoPE key), no values */
        s->kv_dim_k = (int64_t)h->kv_lora_rank + h->n_rot;
        s->kv_dim_v = 0;
    } else {
        s->kv_dim_k = (int64_t)h->n_head_kv * h->head_dim;
        s->kv_dim_v = (int64_t)h->n_head_kv * h->head_dim_v;
    }
    const int64_t qdim = (int64_t)h->n_head * h->head_dim, vdim = (int64_t)h->n_head * h->head_dim_v;
    int64_t wide = h->n_embd;
    if (qdim > wide) wide = qdim;
    if (vdim > wide) wide = vdim;
    int64_t ff = h->n_ff;
    if (h->n_ff_exp > ff) ff = h->n_ff_exp;
    if (h->n_ff_shexp > ff) ff = h->n_ff_shexp;
    int64_t widest_in = wide > ff ? wide : ff;
    const int64_t d_inner = (int64_t)h->kda_n_head * h->kda_head_dim; /* KDA layers (0 without) */
    if (d_inner > widest_in) widest_in = d_inner;
    if (h->q_lora_rank > widest_in) widest_in = h->q_lora_rank;
    if (s->kv_dim_k > widest_in) widest_in = s->kv_dim_k;
    s->att_stride = df_attn_scratch(h, s->n_ctx);
    const int64_t B = s->n_batch, C = s->n_ctx;
    int ni = 0;
#define ITEM(field, nbytes) (it[ni].dst = (void **)&s->field, it[ni].bytes = (uint64_t)(nbytes), ni++)
#define FLOATS(field, rows, cols) ITEM(field, (uint64_t)(rows) * (uint64_t)(cols) * sizeof(float))
    ITEM(mem, (uint64_t)h->n_layer * sizeof(df_layer_mem));
    ITEM(k_cache, n_att ? (uint64_t)n_att * C * (uint64_t)s->kv_dim_k * s->kv_elt : 64);
    ITEM(v_cache, s->kv_dim_v && n_att ? (uint64_t)n_att * C * (uint64_t)s->kv_dim_v * s->kv_elt : 64);
    FLOATS(rec_conv, n_rec ? n_rec : 1, n_rec ? df_rec_conv_floats(h) : 16);
    FLOATS(rec_state, n_rec ? n_rec : 1, n_rec ? df_rec_state_floats(h) : 16);
    FLOATS(x, B, h->n_embd);
    FLOATS(xb, B, wide);
    FLOATS(xb2, B, h->n_embd);
    FLOATS(q, B, qdim);
    FLOATS(k, B, s->kv_dim_k);
    FLOATS(v, B, s->kv_dim_v > 0 ? s->kv_dim_v : 1);
    FLOATS(hb, B, ff);
    FLOATS(hb2, B, ff);
    FLOATS(att, m->n_threads, s->att_stride);
    FLOATS(rope_cache, B, h->n_rot);
    FLOATS(logits, B, h->n_vocab);
    ITEM(mm.buf, mm_scratch_bytes(widest_in, s->n_batch));
    if (h->n_expert > 0) {
        const int64_t nk = B * h->n_expert_used;
        FLOATS(router, B, h->n_expert);
        ITEM(topk_id, (uint64_t)nk * sizeof(int32_t));
        FLOATS(topk_w, nk, 1);
        ITEM(tok_of, (uint64_t)nk * sizeof(int32_t));
        ITEM(slot_of, (uint64_t)nk * sizeof(int32_t));
        FLOATS(ex_x, B, h->n_embd);
        FLOATS(ex_y, B, h->n_embd);
        FLOATS(ex_h, B, ff);
        FLOATS(ex_h2, B, ff);
        FLOATS(ex_out, nk, h->n_embd);
    }
    if (h->kv_lora_rank > 0) {
        int64_t tw = h->kv_lora_rank;
        if (h->qk_nope > tw) tw = h->qk_nope;
        if (h->q_lora_rank > tw) tw = h->q_lora_rank;
        FLOATS(q_abs, B * h->n_head, s->kv_dim_k);
        FLOATS(lat, B, s->kv_dim_k);
        FLOATS(o_lat, B * h->n_head, h->kv_lora_rank);
        FLOATS(mla_tmp, B, tw);
    }
    if (n_rec > 0) {
        FLOATS(kda_q, B, d_inner);
        FLOATS(kda_k, B, d_inner);
        FLOATS(kda_v, B, d_inner);
        FLOATS(kda_g, B, d_inner);
        FLOATS(kda_o, B, d_inner);
        FLOATS(kda_beta, B, h->kda_n_head);
        FLOATS(kda_lo, B, h->kda_head_dim);
    }
    if (h->attn_res_block > 0) {
        const int64_t n_ckpt = (h->n_layer + h->attn_res_block - 1) / h->attn_res_block;
        FLOATS(res_stack, n_ckpt * B, h->n_embd);
        FLOATS(res_mix, B, h->n_embd);
        FLOATS(res_scores, n_ckpt + 1, 1);
    }
    if (h->mla_gate) FLOATS(mla_gate, B, vdim);
    if (h->n_expert_latent > 0) {
        FLOATS(lat_in, B, h->n_embd);
        FLOATS(lat_out, B, h->n_embd);
    }
#undef FLOATS
#undef ITEM
    *n_items = ni;
    for (int i = 0; i < ni; i++)
        if (it[i].bytes > ((uint64_t)1 << 46)) return df_seterr(err, errlen, "session buffers too large");
    return 0;
}

int64_t df_rec_conv_floats(const df_hparams *h) {
    return 3 * (int64_t)(h->ssm_d_conv - 1) * h->kda_n_head * h->kda_head_dim;
}

int64_t df_rec_state_floats(const df_hparams *h) { return (int64_t)h->kda_n_head * h->kda_head_dim * h->kda_head_dim; }

/* Point every layer's memory descriptor into the session's buffers. */
static void session_bind_memory(df_session *s) {
    const df_hparams *h = &s->m->hp;
    int64_t ia = 0, ir = 0;
    for (int l = 0; l < h->n_layer; l++) {
        df_layer_mem *lm = &s->mem[l];
        memset(lm, 0, sizeof *lm);
        if (h->recurrent && h->recurrent[l]) {
            lm->kind = DF_MEM_RECURRENT;
            lm->conv = s->rec_conv + ir * df_rec_conv_floats(h);
            lm->state = s->rec_state + ir * df_rec_state_floats(h);
            ir++;
            continue;
        }
        lm->kind = h->kv_lora_rank > 0 ? DF_MEM_LATENT : DF_MEM_KV;
        lm->k = s->k_cache + ia * s->n_ctx * s->kv_dim_k * (int64_t)s->kv_elt;
        if (lm->kind == DF_MEM_KV) lm->v = s->v_cache + ia * s->n_ctx * s->kv_dim_v * (int64_t)s->kv_elt;
        ia++;
    }
}

/* Recurrent states start at zero (a new session, or a reset to position 0). */
static void session_clear_recurrent(df_session *s) {
    const df_hparams *h = &s->m->hp;
    s->rec_broken = 0;
    if (!h->n_layer_recurrent) return;
    memset(s->rec_conv, 0, sizeof(float) * (size_t)(h->n_layer_recurrent * df_rec_conv_floats(h)));
    memset(s->rec_state, 0, sizeof(float) * (size_t)(h->n_layer_recurrent * df_rec_state_floats(h)));
}

uint64_t df_session_bytes(const df_model *m, const df_session_params *p) {
    df_session tmp;
    alloc_item it[MAX_ITEMS];
    int n;
    memset(&tmp, 0, sizeof tmp);
    if (session_layout(m, p, &tmp, it, &n, NULL, 0) != 0) return UINT64_MAX;
    uint64_t total = sizeof(df_session);
    for (int i = 0; i < n; i++) total += it[i].bytes + 64;
    return total;
}

int df_session_new(df_model *m, const df_session_params *p, df_session **out, char *err, size_t errlen) {
    df_session_params defp = df_session_default_params();
    if (!p) p = &defp;
    *out = NULL;
    const df_hparams *h = &m->hp;
    if (m->vocab_only) return df_seterr(err, errlen, "%s: loaded for its vocabulary only: no session", m->path);
    df_session *s = calloc(1, sizeof *s);
    if (!s) return df_seterr(err, errlen, "out of memory");
    s->m = m;
    alloc_item it[MAX_ITEMS];
    int n;
    if (session_layout(m, p, s, it, &n, err, errlen) != 0) {
        free(s);
        return -1;
    }
    uint64_t total = df_session_bytes(m, p);
    if (m->session_reserve && total > m->session_reserve) {
        const int n_ctx = s->n_ctx;
        free(s);
        return df_seterr(err, errlen,
                         "a session of %d tokens needs %.1f MiB but the memory plan reserved %.1f MiB (load the model "
                         "with this context length)", n_ctx, (double)total / (1 << 20),
                         (double)m->session_reserve / (1 << 20));
    }
    for (int i = 0; i < n; i++) {
        void *buf = df_aligned_alloc(64, (size_t)it[i].bytes);
        memcpy(it[i].dst, &buf, sizeof buf); /* the field is a float* or void*: same representation */
        if (!buf) {
            const int n_ctx = s->n_ctx; /* read before the session is freed */
            df_session_free(s);
            return df_seterr(err, errlen, "out of memory for a session of %d tokens (%.1f MiB)", n_ctx,
                             (double)total / (1 << 20));
        }
    }
    for (int i = 0; i < n; i++)
        if (it[i].dst == (void **)&s->mm.buf) s->mm.size = (size_t)it[i].bytes;
    session_bind_memory(s);
    session_clear_recurrent(s);
    s->rope.n_dims = h->n_rot;
    s->rope.neox = h->rope_neox;
    s->rope.freq_base = h->rope_base;
    s->rope.freq_scale = h->rope_freq_scale;
    s->rope.ext_factor = h->yarn_ext_factor;
    s->rope.attn_factor = h->yarn_attn_factor;
    rope_corr_dims(h->n_rot, h->n_ctx_orig, h->rope_base, h->yarn_beta_fast, h->yarn_beta_slow, s->rope.corr_dims);
    s->rope.freq_factors = NULL;
    if (m->rope_freqs) {
        s->rope.freq_factors = ws_fetch(m->ws, m->rope_freqs, err, errlen); /* pinned for the session's life */
        if (!s->rope.freq_factors) {
            df_session_free(s);
            return -1;
        }
    }
    *out = s;
    return 0;
}

int df_session_pos(const df_session *s) { return s->pos; }
float *df_session_logits(df_session *s) { return s->logits; }
int df_session_n_batch(const df_session *s) { return s->n_batch; }
int df_session_n_ctx(const df_session *s) { return s->n_ctx; }
int df_session_truncate(df_session *s, int pos, char *err, size_t errlen) {
    if (pos < 0 || pos > s->pos)
        return df_seterr(err, errlen, "cannot truncate a session at position %d to position %d", s->pos, pos);
    if (pos == 0) {
        s->pos = 0;
        session_clear_recurrent(s);
        return 0;
    }
    if (pos == s->pos) return 0;
    if (s->m->hp.n_layer_recurrent > 0)
        return df_seterr(err, errlen,
                         "cannot rewind a session with recurrent layers from position %d to %d: their state keeps no "
                         "history (only a reset to 0 is possible)", s->pos, pos);
    s->pos = pos;
    return 0;
}

int df_decode(df_session *s, const int32_t *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    const int nv = s->m->hp.n_vocab;
    if (n <= 0) return df_seterr(err, errlen, "no tokens to decode");
    if (s->rec_broken)
        return df_seterr(err, errlen, "an earlier decode failed part way through the recurrent layers; reset the session "
                         "(df_session_truncate to 0) first");
    if (n > s->n_ctx - s->pos)
        return df_seterr(err, errlen, "context full: %d tokens at position %d exceed the context of %d", n, s->pos,
                         s->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= nv)
            return df_seterr(err, errlen, "token id %d is outside the vocabulary (0..%d)", tokens[i], nv - 1);
    for (int done = 0; done < n;) {
        int chunk = n - done < s->n_batch ? n - done : s->n_batch;
        int last = done + chunk == n;
        float *dst = NULL;
        if (logits && all_logits) dst = logits + (int64_t)done * nv;
        else if (logits && last) dst = logits;
        if (s->m->arch->forward(s, tokens + done, chunk, dst, all_logits, err, errlen) != 0) {
            s->rec_broken = s->m->hp.n_layer_recurrent > 0; /* a KV cache only gained rows past pos; a state changed */
            return -1;
        }
        ws_tick(s->m->ws);
        if (s->trace && ferror(s->trace)) return df_seterr(err, errlen, "writing the expert trace failed");
        done += chunk;
    }
    /* never hand out garbage: a model file changed under us, or weights
     * that make NaN or Inf, end the run with an error */
    if (ws_check_files(s->m->ws, err, errlen) != 0) return -1;
    const int64_t rows = logits ? (all_logits ? n : 1) : 0;
    for (int64_t i = 0; i < rows * nv; i++)
        if (!isfinite(logits[i]))
            return df_seterr(err, errlen, "%s: the model computed a non-finite logit (%s) at position %d: its weights "
                             "are damaged (NaN or Inf) or the file changed", s->m->path,
                             isnan(logits[i]) ? "NaN" : "Inf", s->pos - n + (int)(all_logits ? i / nv : n - 1));
    return 0;
}

/* ---- shared forward-pass helpers ---- */

int df_matmul(df_session *s, ws_tensor *w, const float *x, int n_tok, float *y, int64_t ldy, char *err,
              size_t errlen) {
    const void *data = ws_fetch(s->m->ws, w, err, errlen);
    if (!data) return -1;
    int rc = mm_mul(s->m->pool, w->type, data, w->ne[0], w->ne[1], x, n_tok, y, ldy, &s->mm);
    ws_release(s->m->ws, w);
    if (rc != 0) return df_seterr(err, errlen, "internal: matmul scratch too small for '%s'", w->gt->name);
    return 0;
}

int df_matmul_n(df_session *s, int n_w, ws_tensor *const *w, const float *x, int n_tok, float *const *y,
                const int64_t *ldy, char *err, size_t errlen) {
    mm_op ops[MM_MAX_OPS] = {{0, NULL, 0, NULL, 0, NULL}};
    int got = 0, rc = 0;
    if (n_w < 1 || n_w > MM_MAX_OPS) return df_seterr(err, errlen, "internal: %d products in one df_matmul_n", n_w);
    for (; got < n_w; got++) {
        const void *data = w[got]->ne[0] == w[0]->ne[0] ? ws_fetch(s->m->ws, w[got], err, errlen) : NULL;
        if (!data) {
            rc = w[got]->ne[0] == w[0]->ne[0] ? -1 : df_seterr(err, errlen, "internal: '%s' and '%s' have different inputs",
                                                             w[0]->gt->name, w[got]->gt->name);
            break;
        }
        ops[got] = (mm_op){w[got]->type, data, w[got]->ne[1], y[got], ldy[got], NULL};
    }
    if (rc == 0 && mm_mul_n(s->m->pool, ops, n_w, w[0]->ne[0], x, n_tok, &s->mm) != 0)
        rc = df_seterr(err, errlen, "internal: matmul scratch too small for '%s'", w[0]->gt->name);
    while (got > 0) ws_release(s->m->ws, w[--got]);
    return rc;
}

int df_ffn_dense(df_session *s, ws_tensor *gate, ws_tensor *up, ws_tensor *down, const float *x, int n, float *out,
                 char *err, size_t errlen) {
    const int64_t F = gate->ne[1];
    ws_tensor *const w[2] = {gate, up};
    float *const y[2] = {s->hb, s->hb2};
    const int64_t ld[2] = {F, F};
    if (df_matmul_n(s, 2, w, x, n, y, ld, err, errlen)) return -1;
    df_glu_pool(s->m->pool, &s->m->hp, s->hb, s->hb2, (int)(n * F));
    return df_matmul(s, down, s->hb, n, out, down->ne[1], err, errlen);
}

/* SwiGLU, or SiTU: beta*tanh(g/beta) * sigmoid(g) * lb*tanh(u/lb) (the up
 * branch unchanged when lb <= 0; the scalar kernel in ggml's order of
 * operations, the SIMD ones within a few ulp of it). */
void df_glu(const df_hparams *h, float *a, const float *b, int n) {
    if (h->act != DF_ACT_SITU) op_swiglu(a, b, n);
    else op_situ(a, b, n, h->situ_beta, h->situ_linear_beta);
}

#define GLU_POOL_MIN 2048 /* SiTU elements worth a pool dispatch (~20 ns each) */
typedef struct {
    const df_hparams *h;
    float *a;
    const float *b;
    int n;
} glu_job;

static void glu_part(void *arg, int ith, int nth) {
    const glu_job *j = arg;
    long lo, hi;
    tp_range(j->n, ith, nth, &lo, &hi);
    if (hi > lo) df_glu(j->h, j->a + lo, j->b + lo, (int)(hi - lo));
}

void df_glu_pool(tp_pool *pool, const df_hparams *h, float *a, const float *b, int n) {
    if (h->act != DF_ACT_SITU || n < GLU_POOL_MIN || tp_size(pool) == 1) {
        df_glu(h, a, b, n);
        return;
    }
    glu_job j = {h, a, b, n};
    tp_run(pool, glu_part, &j);
}

int df_ffn_block(df_session *s, int l, int n, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t E = h->n_embd;
    const float *fn = ws_fetch(m->ws, L->ffn_norm, err, errlen);
    if (!fn) return -1;
    for (int t = 0; t < n; t++) op_rmsnorm(s->xb + t * E, s->x + t * E, fn, (int)E, h->norm_eps);
    ws_release(m->ws, L->ffn_norm);
    if (L->ffn_gate_inp ? df_ffn_moe(s, l, s->xb, n, s->xb2, err, errlen)
                        : df_ffn_dense(s, L->ffn_gate, L->ffn_up, L->ffn_down, s->xb, n, s->xb2, err, errlen))
        return -1;
    for (int64_t i = 0; i < (int64_t)n * E; i++) s->x[i] += s->xb2[i];
    return 0;
}

int df_output(df_session *s, int n, float *logits, int all_logits, char *err, size_t errlen) {
    df_model *m = s->m;
    const df_hparams *h = &m->hp;
    const int64_t E = h->n_embd;
    const int first = all_logits ? 0 : n - 1, cnt = all_logits ? n : 1;
    const float *on = ws_fetch(m->ws, m->output_norm, err, errlen);
    if (!on) return -1;
    for (int t = first; t < n; t++) op_rmsnorm(s->xb + t * E, s->x + t * E, on, (int)E, h->norm_eps);
    ws_release(m->ws, m->output_norm);
    return df_matmul(s, m->output, s->xb + (int64_t)first * E, cnt, logits, h->n_vocab, err, errlen);
}

int df_embed(df_session *s, const int32_t *tokens, int n, float *out, char *err, size_t errlen) {
    ws_tensor *t = s->m->tok_embd;
    const uint8_t *data = ws_fetch(s->m->ws, t, err, errlen);
    if (!data) return -1;
    const quant_traits *q = quant_traits_get(t->type);
    for (int i = 0; i < n; i++) q->to_float(data + (size_t)tokens[i] * t->row_bytes, out + (int64_t)i * t->ne[0], t->ne[0]);
    ws_release(s->m->ws, t);
    return 0;
}

void df_add_bias(df_session *s, ws_tensor *b, float *y, int n_tok, int64_t ld) {
    if (!b) return;
    const float *bv = ws_fetch(s->m->ws, b, NULL, 0);
    if (!bv) return;
    for (int t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < b->ne[0]; i++) y[(int64_t)t * ld + i] += bv[i];
    ws_release(s->m->ws, b);
}
