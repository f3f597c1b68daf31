/*
 * load.c - loading a model: GGUF metadata -> hyperparameters, the weight
 * store (mapped, resident or planned under a budget), the architecture's
 * tensors, the tokenizer; planning a budget without loading; the model's
 * facts and counters. The top layer (src/api): it holds the architecture table
 * (arch.h) and calls into the architectures' hparams and bind functions,
 * bind.c's helpers, moe.c's hyperparameters and the session's size.
 *
 * Every hyperparameter is range-checked before it sizes anything, and every
 * tensor's shape is checked against them (bind.c), so a hostile file gives
 * an error here rather than an out-of-bounds access in the forward pass.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch.h"
#include "bind.h"
#include "comm.h"
#include "expar.h"
#include "grammar.h"
#include "moe.h"
#include "pipe.h"
#include "quant.h"
#include "requant.h"
#include "session.h"
#include "outfile.h"
#include "util.h"
#include "wsio.h"

#define DF_VERSION "0.1.0"
#define MAX_DIM (1 << 20)
#define MAX_LAYERS 4096

static const df_arch *const ARCHES[] = {&df_arch_llama,     &df_arch_qwen2,       &df_arch_qwen3,
                                        &df_arch_qwen2moe,  &df_arch_qwen3moe,    &df_arch_deepseek2,
                                        &df_arch_kimi_linear, &df_arch_kimi_k3,     &df_arch_glm4moe,
                                        &df_arch_minimax_m2,  &df_arch_gptoss,      &df_arch_qwen35moe,
                                        &df_arch_qwen3next,   &df_arch_deepseek32,  &df_arch_glm_dsa,
                                        &df_arch_deepseek4,   &df_arch_granite};

static const df_arch *arch_find(const char *name) {
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
    /* optional, as llama.cpp reads it (0 when absent): a model whose every layer is MoE (deepseek4) needs none, and a
     * dense layer without one is refused where its FFN is bound (bind.c) */
    h->n_ff = 0;
    if (df_hp_layers(m, "feed_forward_length", &h->n_ff_l, 0, MAX_DIM, err, errlen)) return -1;
    if (h->n_ff_l) {
        for (int l = 0; l < h->n_layer; l++)
            if (h->n_ff_l[l] > h->n_ff) h->n_ff = h->n_ff_l[l];
    } else if (df_hp_int(m, "feed_forward_length", &h->n_ff, 0, MAX_DIM, 0, err, errlen)) {
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
    if (df_hp_float(m, "attention.layer_norm_rms_epsilon", &h->norm_eps, 0.0f, 1.0f, err, errlen)) return -1;
    h->rope_base = 10000.0f;
    if (df_hp_float(m, "rope.freq_base", &h->rope_base, 1.0f, 1e12f, err, errlen)) return -1;

    /* RoPE scaling, as llama.cpp interprets the keys. */
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", m->arch_name);
    const char *stype = gguf_get_str(m->g, key);
    float factor = 0.0f;
    if (df_hp_float(m, "rope.scaling.factor", &factor, 0.0f, 1e6f, err, errlen)) return -1;
    if (factor == 0.0f && df_hp_float(m, "rope.scale_linear", &factor, 0.0f, 1e6f, err, errlen)) return -1;
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
    if (df_hp_float(m, "rope.scaling.yarn_beta_fast", &h->yarn_beta_fast, 0.0f, 1e6f, err, errlen) ||
        df_hp_float(m, "rope.scaling.yarn_beta_slow", &h->yarn_beta_slow, 0.0f, 1e6f, err, errlen) ||
        df_hp_float(m, "rope.scaling.yarn_ext_factor", &h->yarn_ext_factor, 0.0f, 1e3f, err, errlen) ||
        df_hp_float(m, "rope.scaling.attn_factor", &attn_factor, 0.0f, 1e3f, err, errlen) ||
        df_hp_float(m, "rope.scaling.yarn_log_multiplier", &log_mul, 0.0f, 1e3f, err, errlen))
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

/* ---- loading ---- */

int df_model_is_file(const df_model *m, const char *path) { return m->ws && ws_is_model_file(m->ws, path); }

/* The file rule (src/base/outfile.c) and the model check: no output is ever one of the model's files. */
int df_out_check(const char *path, const char *magic, size_t magic_len, const df_model *m, char *err, size_t errlen) {
    if (path && m && df_model_is_file(m, path))
        return df_seterr(err, errlen, "%s is the model file itself: not written", path);
    return df_outfile_check(path, magic, magic_len, err, errlen);
}

df_out *df_out_open(const char *path, const char *magic, size_t magic_len, const df_model *m, char *err,
                    size_t errlen) {
    if (path && m && df_model_is_file(m, path)) {
        df_seterr(err, errlen, "%s is the model file itself: not written", path);
        return NULL;
    }
    return df_outfile_open(path, magic, magic_len, err, errlen);
}

int df_model_save_hot(df_model *m, char *err, size_t errlen) {
    if (!m->ws || !ws_streaming(m->ws)) return 0;
    pthread_mutex_lock(&m->decode_mu);
    const int rc = ws_save_hot(m->ws, err, errlen);
    pthread_mutex_unlock(&m->decode_mu);
    return rc;
}

void df_model_free(df_model *m) {
    if (!m) return;
    /* a caller that did not save (df_model_save_hot) gets a best-effort save */
    if (m->ws && ws_streaming(m->ws) && !ws_hot_saved(m->ws) && (!m->ep || m->ep->rank == 0) &&
        (!m->pp || m->pp->rank == 0))
        ws_save_hot(m->ws, NULL, 0);
    if (m->ep && m->ep->rank == 0 && m->ep_loaded) { /* the other ranks free their share */
        const ep_head h = {.op = EP_UNLOAD, .model = m->ep->id};
        ep_send(m->ep, &h, NULL, NULL, 0);
    }
    if (m->pp && m->pp->rank == 0 && m->ep_loaded) { /* ... or their stage */
        const ep_head h = {.op = EP_UNLOAD, .model = m->pp->id};
        ep_send(NULL, &h, NULL, NULL, 0);
    }
    ep_free(m->ep);
    pp_free(m->pp);
    free(m->hot_path);
    df_scratch_free(m);
    tp_free(m->pool);
    tok_free(m->vocab);
    ws_close(m->ws);
    gguf_close(m->g);
    free(m->layers);
    free(m->hp.recurrent);
    free(m->hp.n_ff_l);
    free(m->hp.swa);
    free(m->hp.idx_full);
    free(m->fam_hp);
    free(m->path);
    gram_vocab_free(m->gram_vocab);
    if (m->decode_mu_init) pthread_mutex_destroy(&m->decode_mu), pthread_mutex_destroy(&m->gram_mu);
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
    if (!p->mem_budget && p->use_mmap < 0) { /* auto: resident when the weights fit twice over */
        uint64_t bytes = 0;
        for (int i = 0; i < m->g->n_files; i++) bytes += m->g->files[i].size;
        const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        const uint64_t ram = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
        const uint64_t room = df_memory_room(); /* what is free now, and the cgroup's limit */
        cfg->mode = bytes <= ram / 2 && (room ? bytes <= room / 2 : bytes <= ram / 4) ? WS_RESIDENT : WS_MMAP;
    }
    if (m->ep) { /* a rank of a cluster: its share of the experts (expar.h); never read whole, so never resident */
        cfg->mode = p->mem_budget ? WS_STREAM : WS_MMAP;
        cfg->own = m->ep->own;
        cfg->experts_only = cfg->hot_readonly = m->ep->rank > 0;
    }
    if (m->pp) { /* a stage of a pipeline: its layers (pipe.h); the others mapped, never touched */
        if (!p->mem_budget) cfg->mode = WS_MMAP;
        cfg->layer_lo = m->pp->lo[m->pp->rank];
        cfg->layer_hi = m->pp->hi[m->pp->rank];
        cfg->globals = m->pp->rank == 0;
        cfg->hot_readonly = m->pp->rank > 0;
    }
    cfg->n_layer = m->hp.n_layer + m->hp.n_layer_mtp; /* the MTP block, when loaded, is planned as a layer */
    cfg->n_expert = m->hp.n_expert;
    cfg->n_expert_used = m->hp.n_expert_used;
    cfg->io_threads = p->io_threads;
    m->io_threads = p->io_threads > 0 ? p->io_threads : 8;
    cfg->io_engine = p->io_engine == DF_IO_PREAD ? WSIO_PREAD : p->io_engine == DF_IO_URING ? WSIO_URING : WSIO_AUTO;
    cfg->page_cache = p->page_cache != 0;
    const char *pack = getenv("DELTAFIN_PACK"); /* 0: matrices stay in the file's layout (tests, A/B runs) */
    cfg->no_pack = pack && !strcmp(pack, "0");
    cfg->resident_type = rq_parse_type(p->resident_type);
    if (cfg->resident_type < 0)
        return df_seterr(err, errlen, "resident type '%s' is not one of q4_K, q8_0", p->resident_type);
    if (p->n_sessions < 0 || p->n_sessions > 65536)
        return df_seterr(err, errlen, "n_sessions %d is out of range (0..65536)", p->n_sessions);
    if (p->spec_k_max < 0 || p->spec_k_max > 1024)
        return df_seterr(err, errlen, "spec_k_max %d is out of range (0..1024)", p->spec_k_max);
    df_session_params sp = df_session_default_params();
    sp.n_ctx = p->n_ctx;
    sp.n_batch = p->n_batch;
    sp.kv_type = p->kv_type;
    sp.spec_k_max = p->spec_k_max; /* a recurrent model's rollback room (session.c) */
    /* only a budget reserves (and so limits) a session: without one any session may be opened */
    m->session_reserve = m->scratch_reserve = 0;
    if (p->mem_budget) {
        uint64_t own, scratch;
        if (df_session_split_bytes(m, &sp, &own, &scratch) != 0)
            return df_seterr(err, errlen, "%s: a session of this context (%d) and batch would be too large", m->path,
                             p->n_ctx);
        m->session_reserve = own;
        m->scratch_reserve = scratch;
    }
    cfg->budget = p->mem_budget;
    /* n sessions' own memory, and the scratch they share (one decode at a time) */
    if (p->mem_reserve > ((uint64_t)1 << 50))
        return df_seterr(err, errlen, "mem_reserve of %llu bytes is out of range", (unsigned long long)p->mem_reserve);
    cfg->reserve = (uint64_t)(p->n_sessions > 1 ? p->n_sessions : 1) * m->session_reserve + m->scratch_reserve +
                   overhead_bytes(m) + p->mem_reserve;
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
    cfg.pool = m->pool;
    if (ws_open(m->g, &cfg, &m->ws, err, errlen) != 0) {
        char inner[512];
        snprintf(inner, sizeof inner, "%s", err ? err : "");
        return df_seterr(err, errlen, "%s: %s", m->path, inner);
    }
    return 0;
}

/* Bind the tensors and check them against the tokenizer. */
static int bind_all(df_model *m, char *err, size_t errlen) {
    if (!m->layers) m->layers = calloc((size_t)(m->hp.n_layer + m->hp.n_layer_mtp), sizeof(df_layer));
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
    cfg.n_layer = m->hp.n_layer + m->hp.n_layer_mtp;
    cfg.n_expert = m->hp.n_expert;
    cfg.n_expert_used = m->hp.n_expert_used;
    int rc = ws_open(m->g, &cfg, &m->ws, err, errlen);
    if (rc == 0) rc = bind_all(m, err, errlen);
    ws_close(m->ws); /* the handles bound here die with it: forget them */
    m->ws = NULL;
    if (m->layers) memset(m->layers, 0, (size_t)(m->hp.n_layer + m->hp.n_layer_mtp) * sizeof(df_layer));
    m->mtp_block = NULL;
    m->tok_embd = m->output_norm = m->output = m->rope_freqs = NULL;
    m->output_hc_fn = m->output_hc_base = m->output_hc_scale = NULL;
    return rc;
}

/* The architecture and its hyperparameters. */
static int load_arch(df_model *m, const char *path, char *err, size_t errlen) {
    if (!m->arch_name) return df_seterr(err, errlen, "%s: missing general.architecture", path);
    m->arch = arch_find(m->arch_name);
    if (!m->arch)
        return df_seterr(err, errlen,
                         "%s: unsupported architecture '%s' (supported: llama, qwen2, qwen3, qwen2moe, qwen3moe, deepseek2, "
                         "kimi-linear, kimi-k3, glm4moe, minimax-m2, gpt-oss, qwen35moe, qwen3next, deepseek32, glm-dsa, "
                         "deepseek4)",
                         path, m->arch_name), DF_E_UNSUPPORTED;
    if (read_hparams(m, err, errlen) != 0) return -1;
    m->hp.rope_neox = m->arch->rope_neox;
    if (m->arch->hparams && m->arch->hparams(m, err, errlen) != 0) return -1;
    if (m->hp.n_layer_recurrent > 0 && m->hp.kda_head_dim == 0)
        return df_seterr(err, errlen, "%s: head_count_kv is 0 (a recurrent layer) in %d layers, which %s does not have",
                         path, m->hp.n_layer_recurrent, m->arch_name);
    return 0;
}

/* df_model_params.mtp: run the first NextN block where the architecture
 * can (hp.mtp_arch: its family says so; per-layer arrays sized to
 * block_count cover it; a model with recurrent or sliding-window layers is
 * not one). */
static void use_mtp(df_model *m) {
    df_hparams *h = &m->hp;
    h->n_layer_mtp = h->mtp_arch && h->n_layer_nextn > 0 && !h->recurrent && !h->swa;
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
    int rc;
    if (!p->vocab_only && (rc = load_arch(m, path, err, errlen)) != 0) return rc;
    if (!p->vocab_only && p->mtp) use_mtp(m);
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

/* ---- a model shared out over a cluster (expar.h, docs/cluster.md) ---- */

/* EP_LOAD's payload: what the other ranks need to load their share as rank 0
 * loads the model; followed by the owner table (int16_t, n_layer x n_expert). */
typedef struct load_msg {
    char path[4096];
    char hot[4096];       /* rank 0's hot file, read (never written) by the others where they find it */
    char resident_type[16];
    uint64_t fingerprint, mem_budget;
    int32_t n_batch, kv_type, io_threads, io_engine, mtp, no_hot, n_layer, n_expert, page_cache, n_ctx, n_sessions;
} load_msg;

static int next_model_id; /* rank 0's names for the models it shares (one loader at a time in practice) */

/* What rank 0 tells the others of model m loaded with params p (fingerprint fp): lm's fields before
 * the tables that follow it. */
static void fill_load_msg(const df_model *m, const df_model_params *p, uint64_t fp, load_msg *lm) {
    snprintf(lm->path, sizeof lm->path, "%s", m->path);
    snprintf(lm->resident_type, sizeof lm->resident_type, "%s", p->resident_type ? p->resident_type : "");
    lm->fingerprint = fp;
    lm->mem_budget = p->mem_budget;
    lm->n_batch = p->n_batch > 0 ? p->n_batch : 512;
    lm->n_ctx = p->n_ctx;
    lm->n_sessions = p->n_sessions;
    lm->kv_type = p->kv_type;
    lm->io_threads = p->io_threads;
    lm->io_engine = p->io_engine;
    lm->page_cache = p->page_cache;
    lm->mtp = p->mtp;
    lm->no_hot = p->hot_file && !*p->hot_file;
    if (p->hot_file && strlen(p->hot_file) < sizeof lm->hot) snprintf(lm->hot, sizeof lm->hot, "%s", p->hot_file);
    lm->n_layer = m->hp.n_layer + m->hp.n_layer_mtp;
    lm->n_expert = m->hp.n_expert;
}

/* A rank other than 0: the parameters rank 0 loaded with, under this rank's budget (0: rank 0's). */
static df_model_params params_sent(const load_msg *lm, uint64_t mem_budget, int n_threads) {
    df_model_params p = df_model_default_params();
    p.mem_budget = mem_budget ? mem_budget : lm->mem_budget;
    p.kv_type = lm->kv_type;
    p.io_threads = lm->io_threads;
    p.io_engine = lm->io_engine;
    p.page_cache = lm->page_cache;
    p.hot_file = lm->no_hot ? "" : lm->hot[0] ? lm->hot : NULL;
    p.resident_type = lm->resident_type[0] ? lm->resident_type : NULL;
    p.n_threads = n_threads;
    return p;
}

static df_model *model_new(void);

/* A rank other than 0: its copy of rank 0's model (at path, else rank 0's), read and checked to be the
 * same (fingerprint and layers): 0, or -1 with why (*out set either way, to free). */
static int open_copy(const load_msg *lm, const char *path, const df_model_params *p, df_model **out, char *why,
                     size_t n) {
    if (!path || !*path) path = lm->path;
    df_model *m = *out = model_new();
    int rc = !m ? df_seterr(why, n, "out of memory") : load_header(m, path, p, why, n);
    if (rc == 0) rc = validate(m, why, n);
    uint64_t fp = 0;
    if (rc == 0) rc = gguf_fingerprint(m->g, &fp, why, n);
    if (rc == 0 && (fp != lm->fingerprint || m->hp.n_layer + m->hp.n_layer_mtp != lm->n_layer ||
                    m->hp.n_expert != lm->n_expert))
        rc = df_seterr(why, n, "%s is not the same model as rank 0's %s (another file, version or quantization): "
                       "every rank must load the same model", path, lm->path);
    return rc ? -1 : 0;
}

/* Which layers have routed experts, from the directory (nothing bound yet). */
static void expert_layers(const df_model *m, int L, uint8_t *has) {
    char name[64];
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
        has[l] = gguf_find_tensor(m->g, name) != NULL;
    }
}

/* This rank's plan of its share (before any weight is read): 0 or -1 with why. */
static int plan_share(df_model *m, const df_model_params *p, char *why, size_t n) {
    ws_config cfg;
    ws_plan plan;
    if (store_config(m, p, &cfg, why, n) != 0) return -1;
    return cfg.mode == WS_STREAM ? ws_make_plan(m->g, &cfg, &plan, why, n) : 0;
}

/* The store and the bindings of this rank's share: 0 or -1 with why. */
static int open_share(df_model *m, const df_model_params *p, char *why, size_t n) {
    m->pool = tp_create(m->n_threads);
    if (!m->pool) return df_seterr(why, n, "out of memory");
    return open_store(m, p, why, n) || bind_all(m, why, n) ? -1 : 0;
}

/* The learned uses that balance the shares: rank 0's hot file, if it has one. */
static void share_uses(const df_model *m, const df_model_params *p, int L, double *uses) {
    if (!p->mem_budget || (p->hot_file && !*p->hot_file)) return;
    char def[4200];
    snprintf(def, sizeof def, "%s.hot", m->path);
    ws_hot_counts(p->hot_file ? p->hot_file : def, L, m->hp.n_expert, uses);
}

static int share_rooms(const char *path, const df_model_params *p, int R, const uint64_t *budgets, int X, int *rooms,
                       char *err, size_t errlen);

/* Rank 0: every rank's budget (0: rank 0's), and the deal of m's experts
 * (m->ep) their rooms make. */
static int deal(df_model *m, const df_model_params *p, const uint8_t *has, const double *uses, char *err,
                size_t errlen) {
    const int R = m->ep->size;
    const ep_head h = {.op = EP_BUDGETS, .model = m->ep->id};
    uint64_t *budgets = calloc((size_t)R, sizeof *budgets);
    int *rooms = malloc(sizeof(int) * (size_t)R), rc = DF_OK;
    if (!budgets || !rooms)
        rc = DF_E_NOMEM, df_seterr(err, errlen, "out of memory");
    else if (ep_send(m->ep, &h, NULL, err, errlen) != 0 ||
             comm_allgather(&p->mem_budget, sizeof *budgets, budgets, err, errlen) != 0)
        rc = DF_E_IO;
    else if (share_rooms(m->path, p, R, budgets, m->hp.n_expert, rooms, err, errlen) != 0)
        rc = DF_E_INPUT;
    else
        ep_assign(m->ep, has, uses, rooms);
    free(budgets);
    free(rooms);
    return rc;
}

/* Rank 0: share the model's experts out, tell the others, and load its own
 * share; every step agreed by every rank, so that a rank that cannot load
 * (another file, a budget too small for its share) stops them all, with its
 * reason, before any weight is read. */
static int load_primary(df_model *m, const df_model_params *p, char *err, size_t errlen) {
    const int R = comm_size(), L = m->hp.n_layer + m->hp.n_layer_mtp, X = m->hp.n_expert;
    if (validate(m, err, errlen) != 0) return DF_E_INPUT;
    if (R > X)
        return df_seterr(err, errlen, "%s: %d ranks, but the model has %d experts per layer: at most %d ranks can "
                         "share them", m->path, R, X, X), DF_E_INPUT;
    if (strlen(m->path) >= sizeof ((load_msg *)0)->path)
        return df_seterr(err, errlen, "%s: the path is too long to send to the other ranks", m->path), DF_E_INPUT;
    uint64_t fp;
    if (gguf_fingerprint(m->g, &fp, err, errlen) != 0) return DF_E_IO;
    m->ep = ep_new(0, R, ++next_model_id, L, X, m->hp.n_expert_used);
    const size_t cells = (size_t)L * (size_t)X, bytes = sizeof(load_msg) + cells * sizeof(int16_t);
    uint8_t *has = calloc((size_t)L, 1), *buf = calloc(1, bytes);
    double *uses = calloc(cells, sizeof(double));
    if (!m->ep || !has || !buf || !uses) {
        free(has), free(buf), free(uses);
        return df_seterr(err, errlen, "out of memory"), DF_E_NOMEM;
    }
    expert_layers(m, L, has);
    share_uses(m, p, L, uses);
    int rc = deal(m, p, has, uses, err, errlen);
    if (rc != DF_OK) {
        free(has), free(buf), free(uses);
        return rc;
    }
    fill_load_msg(m, p, fp, (load_msg *)(void *)buf);
    memcpy(buf + sizeof(load_msg), m->ep->owner, cells * sizeof(int16_t));
    const ep_head h = {.op = EP_LOAD, .model = m->ep->id, .bytes = bytes};
    rc = ep_send(m->ep, &h, buf, err, errlen);
    free(has), free(buf), free(uses);
    if (rc != 0) return DF_E_IO;
    char why[500] = "";
    if (ep_agree(plan_share(m, p, why, sizeof why), why, err, errlen) != 0) return DF_E_NOMEM;
    if (ep_agree(open_share(m, p, why, sizeof why), why, err, errlen) != 0) return DF_E_NOMEM;
    m->ep_loaded = 1;
    return DF_OK;
}

/* ---- a model cut into stages over a cluster (pipe.h, --split layers) ---- */

/* This rank's store and bindings of its stage, agreed step by step with the others: the checks so far
 * (rc, why) and the plan, then the opening. */
static int open_stage(df_model *m, const df_model_params *p, int rc, char *why, size_t n, char *err, size_t errlen) {
    if (rc == 0) rc = plan_share(m, p, why, n);
    if (ep_agree(rc, why, err, errlen) != 0) return DF_E_NOMEM;
    return ep_agree(open_share(m, p, why, n), why, err, errlen) != 0 ? DF_E_NOMEM : DF_OK;
}

/* Rank 0 of a pipeline: cut the layers, tell the others, load its stage. */
static int load_stage_primary(df_model *m, const df_model_params *p, char *err, size_t errlen) {
    const int R = comm_size();
    if (validate(m, err, errlen) != 0) return DF_E_INPUT;
    if (p->mtp) return df_seterr(err, errlen, "%s: --split layers does not run the MTP block yet", m->path), DF_E_UNSUPPORTED;
    if (strlen(m->path) >= sizeof ((load_msg *)0)->path)
        return df_seterr(err, errlen, "%s: the path is too long to send to the other ranks", m->path), DF_E_INPUT;
    uint64_t fp;
    if (gguf_fingerprint(m->g, &fp, err, errlen) != 0) return DF_E_IO;
    m->pp = pp_new(0, R, ++next_model_id);
    if (!m->pp) return df_seterr(err, errlen, "out of memory"), DF_E_NOMEM;
    m->session_freed = df_pipe_freed;
    if (pp_split(m->pp, m->g, m->hp.n_layer, err, errlen) != 0) return DF_E_INPUT;
    const size_t bytes = sizeof(load_msg) + 2 * sizeof(int32_t) * (size_t)R;
    uint8_t *buf = calloc(1, bytes);
    if (!buf) return df_seterr(err, errlen, "out of memory"), DF_E_NOMEM;
    fill_load_msg(m, p, fp, (load_msg *)(void *)buf);
    int32_t *range = (int32_t *)(void *)(buf + sizeof(load_msg));
    for (int r = 0; r < R; r++) range[r] = m->pp->lo[r], range[R + r] = m->pp->hi[r];
    const ep_head h = {.op = EP_PP_LOAD, .model = m->pp->id, .bytes = bytes};
    const int rc = ep_send(NULL, &h, buf, err, errlen);
    free(buf);
    if (rc != 0) return DF_E_IO;
    char why[500] = "";
    const int orc = open_stage(m, p, 0, why, sizeof why, err, errlen);
    if (orc == DF_OK) m->ep_loaded = 1;
    return orc;
}

int df_load_stage(const ep_head *h, const void *payload, const char *path, uint64_t mem_budget, int n_threads,
                  df_model **out, char *err, size_t errlen) {
    const load_msg *lm = payload;
    const int R = comm_size();
    char why[500] = "";
    *out = NULL;
    df_model *m = NULL;
    df_model_params p = df_model_default_params();
    int rc = h->bytes != sizeof *lm + 2 * sizeof(int32_t) * (size_t)R
                 ? df_seterr(why, sizeof why, "internal: a damaged load message") : 0;
    if (rc == 0) {
        p = params_sent(lm, mem_budget, n_threads);
        p.n_batch = lm->n_batch;
        p.n_ctx = lm->n_ctx; /* the sessions rank 0 planned: its mirrors here are as many and as large */
        p.n_sessions = lm->n_sessions;
        rc = open_copy(lm, path, &p, &m, why, sizeof why);
    }
    if (rc == 0 && !(m->pp = pp_new(comm_rank(), R, h->model))) rc = df_seterr(why, sizeof why, "out of memory");
    const int32_t *range = (const int32_t *)(const void *)(lm + 1);
    for (int r = 0; rc == 0 && r < R; r++) m->pp->lo[r] = range[r], m->pp->hi[r] = range[R + r];
    if (open_stage(m, &p, rc, why, sizeof why, err, errlen) != DF_OK) {
        df_model_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

/* A model, empty, with its lock. */
static df_model *model_new(void) {
    df_model *m = calloc(1, sizeof *m);
    if (m && pthread_mutex_init(&m->decode_mu, NULL) != 0) {
        free(m);
        return NULL;
    }
    if (m && pthread_mutex_init(&m->gram_mu, NULL) != 0) {
        pthread_mutex_destroy(&m->decode_mu);
        free(m);
        return NULL;
    }
    if (m) m->decode_mu_init = 1;
    return m;
}

/* A rank other than 0, at EP_LOAD: the model rank 0 names (or path when the
 * rank has its own copy elsewhere), checked to be the same, and this rank's
 * share under mem_budget (0: rank 0's); the same agreed steps as rank 0. */
int df_load_share(const ep_head *h, const void *payload, const char *path, uint64_t mem_budget, int n_threads,
                  df_model **out, df_session **sess, char *err, size_t errlen) {
    const load_msg *lm = payload;
    char why[500] = "";
    *out = NULL;
    *sess = NULL;
    df_model_params p = df_model_default_params();
    df_model *m = NULL;
    int rc = h->bytes < sizeof *lm || lm->n_layer < 0 || lm->n_expert < 1 ||
             h->bytes != sizeof *lm + (uint64_t)lm->n_layer * (uint64_t)lm->n_expert * sizeof(int16_t)
                 ? df_seterr(why, sizeof why, "internal: a damaged load message (%llu bytes, %d x %d)",
                             (unsigned long long)h->bytes, lm->n_layer, lm->n_expert) : 0;
    if (rc == 0) {
        p = params_sent(lm, mem_budget, n_threads);
        p.n_ctx = p.n_batch = lm->n_batch; /* rows of a step: its session keeps no context */
        p.mtp = lm->mtp;
        rc = open_copy(lm, path, &p, &m, why, sizeof why);
    }
    if (rc == 0) {
        const int L = lm->n_layer;
        m->ep = ep_new(comm_rank(), comm_size(), h->model, L, lm->n_expert, m->hp.n_expert_used);
        uint8_t *has = calloc((size_t)(L > 0 ? L : 1), 1);
        if (!m->ep || !has) rc = df_seterr(why, sizeof why, "out of memory");
        else expert_layers(m, L, has), ep_take(m->ep, has, (const int16_t *)(lm + 1));
        free(has);
    }
    if (rc == 0) rc = plan_share(m, &p, why, sizeof why);
    if (ep_agree(rc, why, err, errlen) != 0) goto fail;
    rc = open_share(m, &p, why, sizeof why);
    if (rc == 0) {
        df_session_params sp = df_session_default_params();
        sp.n_ctx = sp.n_batch = lm->n_batch;
        sp.kv_type = lm->kv_type;
        rc = df_session_new(m, &sp, sess, why, sizeof why) != DF_OK ? -1 : 0;
    }
    if (ep_agree(rc, why, err, errlen) != 0) goto fail;
    *out = m;
    return 0;
fail:
    df_session_free(*sess);
    *sess = NULL;
    if (m) ep_free(m->ep), m->ep = NULL; /* nothing to tell rank 0 */
    df_model_free(m);
    return -1;
}

int df_model_load(const char *path, const df_model_params *p, df_model **out, char *err, size_t errlen) {
    df_model_params defp = df_model_default_params();
    if (!p) p = &defp;
    *out = NULL;
    quant_init();
    if (access(path, R_OK) != 0) return df_seterr(err, errlen, "%s: cannot open: %s", path, strerror(errno)), DF_E_IO;
    df_model *m = model_new();
    if (!m) return df_seterr(err, errlen, "out of memory"), DF_E_NOMEM;
    int rc = load_header(m, path, p, err, errlen), shape_only = 0;
    if (rc != 0) goto fail;
    rc = DF_E_UNSUPPORTED;
    if (!m->vocab_only && gguf_find(m->g, "deltafin.shape_only") &&
        gguf_get_bool(m->g, "deltafin.shape_only", &shape_only, err, errlen) == 0 && shape_only) {
        df_seterr(err, errlen, "%s is a shape-only model (mkmodel --shape-only: its tensor data are holes): it has no "
                  "weights to run; `deltafin plan` and `info` work on it", path);
        goto fail;
    }
    if (m->vocab_only) {
        *out = m;
        return DF_OK;
    }
    if (comm_size() > 1 && comm_rank() == 0 && p->split_layers) { /* its layers cut into stages over a cluster */
        if ((rc = load_stage_primary(m, p, err, errlen)) != DF_OK) goto fail;
        *out = m;
        return DF_OK;
    }
    if (comm_size() > 1 && comm_rank() == 0 && m->hp.n_expert > 0) { /* its experts shared out over a cluster */
        if ((rc = load_primary(m, p, err, errlen)) != DF_OK) goto fail;
        *out = m;
        return DF_OK;
    }
    rc = DF_E_INPUT;
    if (p->mem_budget && validate(m, err, errlen) != 0) goto fail; /* the file's defects before the budget's */
    rc = p->mem_budget ? DF_E_NOMEM : DF_E_IO; /* the file is sound: what fails now is the budget or the reading */
    m->pool = tp_create(m->n_threads); /* the store reads with it too */
    if (!m->pool) goto oom;
    if (open_store(m, p, err, errlen) != 0) goto fail;
    rc = DF_E_INPUT;
    if (bind_all(m, err, errlen) != 0) goto fail;
    *out = m;
    return DF_OK;
oom:
    df_seterr(err, errlen, "%s: out of memory", path);
    rc = DF_E_NOMEM;
fail:
    df_model_free(m);
    return rc < 0 ? rc : DF_E_INPUT;
}

/* A plan for rank `rank` of `ranks` sharing m's experts (ranks 1: none),
 * each rank r getting rooms[r] of every layer's: m->ep as load_primary or
 * df_load_share would set it, and a rank other than 0 plans the session its
 * steps run in (no context). */
static int plan_as_rank(df_model *m, df_model_params *q, int ranks, int rank, const int *rooms, char *err,
                        size_t errlen) {
    if (ranks <= 1) return 0;
    const int L = m->hp.n_layer + m->hp.n_layer_mtp, X = m->hp.n_expert;
    if (X == 0) return df_seterr(err, errlen, "%s has no routed experts: the ranks of a cluster have none to share",
                                 m->path);
    if (ranks > X)
        return df_seterr(err, errlen, "%s: %d ranks, but the model has %d experts per layer: at most %d ranks can "
                         "share them", m->path, ranks, X, X);
    if (rank < 0 || rank >= ranks) return df_seterr(err, errlen, "rank %d of %d", rank, ranks);
    m->ep = ep_new(rank, ranks, 0, L, X, m->hp.n_expert_used);
    uint8_t *has = calloc((size_t)(L > 0 ? L : 1), 1);
    if (!m->ep || !has) {
        free(has);
        return df_seterr(err, errlen, "out of memory");
    }
    double *uses = calloc((size_t)L * (size_t)X + 1, sizeof(double));
    if (uses) share_uses(m, q, L, uses);
    expert_layers(m, L, has);
    ep_assign(m->ep, has, uses, rooms); /* the deal load_primary makes */
    free(has);
    free(uses);
    if (rank > 0) q->n_ctx = q->n_batch = q->n_batch > 0 ? q->n_batch : 512;
    return 0;
}

static int by_count_desc(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Experts among v[0..n) (sorted descending) with a count above x. */
static size_t count_above(const double *v, size_t n, double x) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (v[mid] > x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The hit rate of a static cache of the `slots` most used experts, judged
 * on uses it was not chosen from: v[0..n) (sorted descending) counts uses in
 * units of one use. A hot file is a sample of the routing; the top of a
 * sample fits that sample better than the next text (a 64-token file that
 * saw 120 of a rank's 384 experts fills 99 slots with 99% of its own uses,
 * and the next text hits 93%). So each use is judged as if it had not been
 * counted (leave one out): would its expert, with one use fewer, still be
 * among the top `slots`? Ties at the edge share the remaining slots. With
 * many uses per expert this is the in-sample figure; with few it is low,
 * and plan_hot keeps it at least at what slots chosen blindly hit. */
static double held_out_hit_rate(const double *v, size_t n, size_t slots) {
    double all = 0, hit = 0;
    for (size_t i = 0; i < n; i++) all += v[i];
    for (size_t i = 0; i < n && all > 0;) {
        size_t j = i; /* v[i..j): experts with the same count c */
        while (j < n && v[j] == v[i]) j++;
        const double c = v[i], less = c - 1;
        const size_t above = count_above(v, n, less) - 1; /* others above c - 1 (this one is not) */
        const size_t same = count_above(v, n, less - 0.5) - above - 1; /* others at c - 1 */
        double in = 0;
        if (above + same < slots) in = 1;
        else if (above < slots) in = (double)(slots - above) / (double)(same + 1);
        hit += (double)(j - i) * c * in;
        i = j;
    }
    return all > 0 ? hit / all : 0;
}

/* What the learned hot file says of plan out (df_plan.hot_*): the share of
 * all uses on the planned experts (this rank's, or all), and the hit rate of
 * the best static cache of out->n_expert_slots of them on routing it did not
 * learn from (held_out_hit_rate), which the store's policy comes within a
 * few points of (wstore.c). */
static void plan_hot(df_model *m, const df_model_params *q, df_plan *out) {
    const int L = out->n_layer, X = m->hp.n_expert;
    if (X == 0 || L == 0) return;
    const size_t cells = (size_t)L * (size_t)X;
    double *uses = calloc(cells, sizeof(double)), *mine = calloc(cells, sizeof(double));
    uint8_t *has = calloc((size_t)L, 1);
    if (uses && mine && has) {
        share_uses(m, q, L, uses);
        expert_layers(m, L, has);
        double all = 0, own = 0, unit = 0;
        size_t n = 0;
        for (size_t i = 0; i < cells; i++) {
            if (!has[i / (size_t)X]) continue;
            all += uses[i];
            if (uses[i] > 0 && (unit == 0 || uses[i] < unit)) unit = uses[i]; /* one use (the file halves and fades) */
            if (m->ep && !m->ep->own[i]) continue;
            own += uses[i];
            mine[n++] = uses[i];
        }
        if (all > 0 && own > 0) {
            for (size_t i = 0; i < n; i++) mine[i] = mine[i] > 0 ? fmax(1.0, round(mine[i] / unit)) : 0;
            qsort(mine, n, sizeof *mine, by_count_desc);
            out->hot_known = 1;
            out->hot_share = own / all;
            /* never below what a cache of slots chosen blindly would hit: a sample that tells nothing (every
             * expert seen once) gives that, not 0 */
            const double blind = n ? fmin(1.0, (double)out->n_expert_slots / (double)n) : 0;
            out->hot_hit_rate = fmax(blind, held_out_hit_rate(mine, n, (size_t)out->n_expert_slots));
        }
    }
    free(uses);
    free(mine);
    free(has);
}

int df_model_plan(const char *path, const df_model_params *p, df_plan *out, char *err, size_t errlen) {
    return df_model_plan_rank(path, p, 1, 0, out, err, errlen);
}

/* df_model_plan_rank with each rank's rooms given (NULL: share_rooms of
 * ranks with p's budget), and the slots its budget leaves room for
 * (room_slots, or NULL). */
static int plan_rank(const char *path, const df_model_params *p, int ranks, int rank, const int *rooms, df_plan *out,
                     uint64_t *room_slots, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    quant_init();
    df_model *m = calloc(1, sizeof *m);
    if (!m) return df_seterr(err, errlen, "out of memory");
    df_model_params q = *p;
    q.vocab_only = 0;
    if (!q.mem_budget) q.mem_budget = 1; /* size the session as a budget would */
    int rc = load_header(m, path, &q, err, errlen), *weighted = NULL;
    if (rc == 0) rc = validate(m, err, errlen);
    if (rc == 0 && ranks > 1 && !rooms && m->hp.n_expert >= ranks) {
        weighted = malloc(sizeof(int) * (size_t)ranks);
        rc = !weighted ? df_seterr(err, errlen, "out of memory")
                       : share_rooms(path, p, ranks, NULL, m->hp.n_expert, weighted, err, errlen);
        rooms = weighted;
    }
    if (rc == 0) rc = plan_as_rank(m, &q, ranks, rank, rooms, err, errlen);
    free(weighted);
    ws_config cfg;
    if (rc == 0) rc = store_config(m, &q, &cfg, err, errlen);
    if (rc == 0) {
        cfg.mode = WS_STREAM;
        out->session_bytes = m->session_reserve + m->scratch_reserve; /* one session, its scratch included */
        out->scratch_bytes = m->scratch_reserve;
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
        out->n_layer = m->hp.n_layer + m->hp.n_layer_mtp; /* the MTP block, when loaded, runs as a layer */
        out->dense_slot_bytes = wp.dense_slot;
        out->n_expert_slots = wp.n_expert_slots;
        out->n_experts_total = wp.n_experts_total;
        out->expert_slot_bytes = wp.expert_slot;
        out->n_expert_used = m->hp.n_expert_used;
        for (int l = 0; l < out->n_layer; l++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
            const gguf_tensor *t = gguf_find_tensor(m->g, name);
            out->n_moe_layers += t != NULL;
            if (t) out->expert_width = (int)t->ne[0];
        }
        if (m->ep && m->ep->rank > 0) out->dense_bytes = wp.resident; /* all it holds besides its slots */
        plan_hot(m, &q, out);
        out->ranks = ranks > 1 ? ranks : 1;
        out->rank = ranks > 1 ? rank : 0;
        out->dense_layer_bytes = m->hp.n_layer ? wp.dense_total / (uint64_t)m->hp.n_layer : 0;
        out->swa_window = m->hp.swa ? m->hp.n_swa : 0;
        for (int l = 0; m->hp.swa && l < m->hp.n_layer; l++) out->n_swa_layers += m->hp.swa[l];
        df_session_params sp = df_session_default_params();
        sp.n_ctx = q.n_ctx;
        sp.n_batch = q.n_batch;
        sp.kv_type = q.kv_type;
        out->swa_ring = out->n_swa_layers ? df_session_kv_ring(m, &sp) : 0;
        out->n_mem = df_session_mem_list(m, &sp, out->mem, DF_PLAN_MEM_MAX, &out->n_ctx);
        out->requant_saved_bytes = wp.requant_saved;
        out->n_experts_all = m->ep ? out->n_moe_layers * m->hp.n_expert : out->n_experts_total;
        if (room_slots) *room_slots = wp.minimum == UINT64_MAX || out->budget < wp.minimum ? 0 : wp.expert_room;
    }
    df_model_free(m);
    return rc ? -1 : 0;
}

int df_model_plan_rank(const char *path, const df_model_params *p, int ranks, int rank, df_plan *out, char *err,
                       size_t errlen) {
    return plan_rank(path, p, ranks, rank, NULL, out, NULL, err, errlen);
}

/* How many of every layer's X experts each of R ranks owns (rooms[R]), from
 * the cache slots each one's budget leaves room for (budgets[r], or p's
 * where NULL or 0): rank 0 holds the dense part and the sessions, so it has
 * fewer, and it may stream dense layers. Taking routing as uniform, a rank
 * reads the experts it owns beyond its slots (rank 0 also its streamed
 * layers, counted as the experts that read as much); each gets its slots
 * and an equal part of what the pooled cache cannot hold, so that the ranks
 * read alike (where the pool holds it all, shares follow the slots). Every
 * rank owns at least one expert a layer. Equal shares without a budget. */
static int share_rooms(const char *path, const df_model_params *p, int R, const uint64_t *budgets, int X, int *rooms,
                       char *err, size_t errlen) {
    ep_rooms_equal(X, R, rooms);
    if (R <= 1 || !p->mem_budget) return 0;
    double *cap = calloc((size_t)R, sizeof *cap), total = 0, pooled = 0;
    int *equal = malloc(sizeof(int) * (size_t)R);
    if (!cap || !equal) {
        free(cap), free(equal);
        return df_seterr(err, errlen, "out of memory");
    }
    ep_rooms_equal(X, R, equal);
    int rc = 0;
    for (int r = 0; r < R && rc == 0; r++) {
        df_model_params q = *p;
        if (budgets && budgets[r]) q.mem_budget = budgets[r];
        if (r > 1 && q.mem_budget == (budgets && budgets[r - 1] ? budgets[r - 1] : p->mem_budget)) {
            cap[r] = cap[r - 1]; /* the same budget as the rank before: the same room */
        } else {
            df_plan d;
            uint64_t room = 0;
            rc = plan_rank(path, &q, R, r ? 1 : 0, equal, &d, &room, err, errlen);
            cap[r] = (double)room;
            if (r == 0 && rc == 0) {
                total = d.n_experts_all;
                /* the dense layers rank 0 streams read as many bytes as this many more uncached experts */
                const double per_expert = total > 0 ? (double)d.n_expert_used * d.n_moe_layers * d.expert_slot_bytes / total : 0;
                if (per_expert > 0) cap[0] -= (double)d.n_dense_streamed * d.dense_layer_bytes / per_expert;
            }
        }
        pooled += cap[r];
    }
    if (rc == 0 && total > 0) {
        double *want = malloc(sizeof(double) * (size_t)R);
        int sum = 0;
        for (int r = 0; want && r < R; r++) {
            const double n = pooled < total ? cap[r] + (total - pooled) / R : pooled > 0 ? total * cap[r] / pooled : total / R;
            want[r] = X * n / total;
            rooms[r] = want[r] < 1 ? 1 : (int)want[r];
            sum += rooms[r];
        }
        while (want && sum != X) { /* largest remainders first, never below one */
            int best = -1;
            for (int r = 0; r < R; r++) {
                const double gap = want[r] - rooms[r];
                if (sum < X ? best < 0 || gap > want[best] - rooms[best]
                            : rooms[r] > 1 && (best < 0 || gap < want[best] - rooms[best]))
                    best = r;
            }
            if (best < 0) break;
            rooms[best] += sum < X ? 1 : -1;
            sum += sum < X ? 1 : -1;
        }
        if (!want || sum != X) ep_rooms_equal(X, R, rooms);
        free(want);
    }
    free(cap);
    free(equal);
    return rc;
}

/* Are the last three of rates[1..n) within 10% of their mean? */
static int probe_stable(const double *r, int n) {
    if (n < 4) return 0;
    const double m = (r[n - 1] + r[n - 2] + r[n - 3]) / 3;
    for (int i = n - 3; i < n; i++)
        if (fabs(r[i] - m) > 0.1 * m) return 0;
    return 1;
}

double df_model_probe_disk(const char *path, const df_model_params *p, double seconds, char *err, size_t errlen) {
    return df_model_probe_disk_windows(path, p, seconds, NULL, 0, NULL, err, errlen);
}

double df_model_probe_disk_windows(const char *path, const df_model_params *p, double seconds, double *rates, int cap,
                                   int *n, char *err, size_t errlen) {
    if (n) *n = 0;
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
        const double window = seconds / 5;
        double r[64], total = 0, first = 0, sum_secs = 0, sum_bytes = 0;
        int k = 0, ok = ws_open(m->g, &cfg, &ws, err, errlen) == 0;
        while (ok && k < 64 && (total < seconds - 1e-9 || (total < 2 * seconds && !probe_stable(r, k)))) {
            uint64_t bytes = 0;
            double secs = 0;
            ok = ws_probe(ws, window, 0x5DEECE66Dull + (uint64_t)k, &bytes, &secs, err, errlen) == 0;
            if (!ok || bytes == 0 || secs <= 0) break; /* nothing streams (or an error) */
            r[k] = (double)bytes / secs;
            if (k == 0) first = r[0];
            else sum_secs += secs, sum_bytes += (double)bytes;
            if (rates && k < cap) rates[k] = r[k];
            total += secs;
            k++;
        }
        if (ok) rate = k > 1 ? sum_bytes / sum_secs : first;
        if (n) *n = k < cap ? k : cap;
        ws_close(ws);
    }
    df_model_free(m);
    return rate;
}

void df_model_io_stats(const df_model *m, df_io_stats *o) {
    ws_stats st;
    memset(o, 0, sizeof *o);
    if (!m->ws) return; /* vocab_only */
    /* the counters change while a decode runs: read them under its lock (the
     * caller's model is not changed, but its lock must be taken) */
    pthread_mutex_t *mu = (pthread_mutex_t *)&m->decode_mu;
    pthread_mutex_lock(mu);
    ws_get_stats(m->ws, &st);
    snprintf(o->hot_note, sizeof o->hot_note, "%s", ws_hot_note(m->ws));
    o->bytes_read = st.bytes_read;
    o->hits = st.hits;
    o->misses = st.misses;
    o->prefetch_issued = st.prefetch_issued;
    o->prefetch_used = st.prefetch_used;
    o->unguessed = st.unguessed;
    o->bytes_packed = st.bytes_packed;
    o->expert_fetches = st.expert_fetches;
    o->expert_bytes = st.expert_bytes;
    o->passes = m->n_passes;
    o->pass_rows = m->n_pass_rows;
    o->moe_runs = m->n_moe_runs;
    o->expert_union = m->n_union_experts;
    o->read_seconds = st.read_seconds;
    o->wait_seconds = st.wait_seconds;
    o->streaming = ws_streaming(m->ws);
    const char *note = NULL, *engine = ws_io_engine(m->ws, &note);
    snprintf(o->io_engine, sizeof o->io_engine, "%s", engine ? engine : "");
    snprintf(o->io_note, sizeof o->io_note, "%s", note ? note : "");
    const ws_plan *wp = ws_get_plan(m->ws);
    o->budget = o->streaming ? wp->budget : 0;
    o->expert_slots = o->streaming ? wp->n_expert_slots : 0;
    pthread_mutex_unlock(mu);
    o->io_threads = m->io_threads;
}

int df_model_set_mem(df_model *m, uint64_t budget, char *err, size_t errlen) {
    if (!m->ws || !ws_streaming(m->ws))
        return df_seterr(err, errlen, "the model was loaded without a budget: it has no expert cache to shrink");
    pthread_mutex_lock(&m->decode_mu);
    const int rc = ws_shrink(m->ws, budget, err, errlen);
    pthread_mutex_unlock(&m->decode_mu);
    return rc;
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
    uint64_t expert_params = 0, unused = 0;
    for (uint64_t i = 0; i < m->g->n_tensors; i++) {
        const gguf_tensor *t = &m->g->tensors[i];
        o->n_params += t->n_elements;
        o->n_bytes += t->nbytes;
        int l = -1;
        if (sscanf(t->name, "blk.%d.", &l) == 1 && l >= m->hp.n_layer) { /* NextN/MTP blocks: never run */
            unused += t->n_elements;
            continue;
        }
        if (m->hp.n_expert > 0 && strstr(t->name, "_exps.") && t->ne[2] == m->hp.n_expert) expert_params += t->n_elements;
    }
    o->n_params_active = o->n_params - unused;
    o->packed_bytes = m->ws ? ws_packed_bytes(m->ws) : 0;
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
int df_token_text(const df_model *m, int32_t id, char *buf, int buflen) { return tok_piece(m->vocab, id, 1, buf, buflen); }
int32_t df_token_bos(const df_model *m) { return tok_bos(m->vocab); }
int32_t df_token_eos(const df_model *m) { return tok_eos(m->vocab); }
int df_token_is_eog(const df_model *m, int32_t id) { return tok_is_eog(m->vocab, id); }
int df_n_vocab(const df_model *m) { return m->hp.n_vocab; }
