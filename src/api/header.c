/*
 * header.c - a model file's header read into a df_model (header.h): GGUF
 * metadata -> hyperparameters through the architecture table (arch.h), the
 * tokenizer, every tensor checked without reading it, and the weight store's
 * configuration; and df_model_free. Loading (load.c) and planning (plan.c)
 * both start here, so that a plan approves only what a load can run.
 *
 * Every hyperparameter is range-checked before it sizes anything, and every
 * tensor's shape is checked against them (bind.c), so a hostile file gives
 * an error here rather than an out-of-bounds access in the forward pass.
 */
#include "header.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arch.h"
#include "bind.h"
#include "expar.h"
#include "grammar.h"
#include "moe.h"
#include "pipe.h"
#include "quant.h"
#include "requant.h"
#include "session.h"
#include "util.h"
#include "wsio.h"

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
    free(m->fam_hp);
    free(m->fam_tensors);
    free(m->path);
    gram_vocab_free(m->gram_vocab);
    if (m->decode_mu_init) pthread_mutex_destroy(&m->decode_mu), pthread_mutex_destroy(&m->gram_mu);
    free(m);
}

/* Bookkeeping outside the planned buffers: metadata, tokenizer, stacks,
 * allocator slack. Part of the budget; the cgroup slack covers the binary. */
uint64_t df_overhead_bytes(const df_model *m) {
    uint64_t meta = 0;
    for (int i = 0; i < m->g->n_files; i++) meta += m->g->files[i].data_offset;
    return 3 * meta + (uint64_t)m->n_threads * (256u << 10) + (16u << 20);
}

/* The weight store's configuration for params p: mapped, resident, or
 * planned under p->mem_budget (sets m->session_reserve). */
int df_store_config(df_model *m, const df_model_params *p, ws_config *cfg, char *err, size_t errlen) {
    memset(cfg, 0, sizeof *cfg);
    cfg->mode = p->mem_budget ? WS_STREAM : p->use_mmap > 0 ? WS_MMAP : WS_RESIDENT;
    if (!p->mem_budget && p->use_mmap < 0) { /* auto: resident when the weights fit twice over */
        uint64_t bytes = 0;
        for (int i = 0; i < m->g->n_files; i++) bytes += m->g->files[i].size;
        if (m->pp) { /* a stage of a pipeline holds its own layers only (rank 0 also what is outside them) */
            const int lo = m->pp->lo[m->pp->rank], hi = m->pp->hi[m->pp->rank];
            bytes = 0;
            for (uint64_t i = 0; i < m->g->n_tensors; i++) {
                const int l = ws_layer_of(m->g->tensors[i].name);
                if (l < 0 ? m->pp->rank == 0 : l >= lo && l < hi) bytes += m->g->tensors[i].nbytes;
            }
        }
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
    if (m->pp) { /* a stage of a pipeline: its layers (pipe.h); the others mapped (WS_MMAP, never touched) or
                  * not held at all */
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
                   df_overhead_bytes(m) + p->mem_reserve;
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

/* Bind the tensors and check them against the tokenizer. */
int df_bind_all(df_model *m, char *err, size_t errlen) {
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
int df_model_validate(df_model *m, char *err, size_t errlen) {
    ws_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.mode = WS_PLAN;
    cfg.n_layer = m->hp.n_layer + m->hp.n_layer_mtp;
    cfg.n_expert = m->hp.n_expert;
    cfg.n_expert_used = m->hp.n_expert_used;
    int rc = ws_open(m->g, &cfg, &m->ws, err, errlen);
    if (rc == 0) rc = df_bind_all(m, err, errlen);
    ws_close(m->ws); /* the handles bound here die with it: forget them */
    m->ws = NULL;
    if (m->layers) memset(m->layers, 0, (size_t)(m->hp.n_layer + m->hp.n_layer_mtp) * sizeof(df_layer));
    m->mtp_block = NULL;
    m->tok_embd = m->output_norm = m->output = m->rope_freqs = NULL;
    free(m->fam_tensors);
    m->fam_tensors = NULL;
    return rc;
}

/* The architecture and its hyperparameters. */
static int load_arch(df_model *m, const char *path, char *err, size_t errlen) {
    if (!m->arch_name) return df_seterr(err, errlen, "%s: missing general.architecture", path);
    m->arch = arch_find(m->arch_name);
    if (!m->arch) {
        char names[512] = "";
        for (size_t i = 0, k = 0; i < sizeof ARCHES / sizeof ARCHES[0] && k < sizeof names; i++)
            k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", i ? ", " : "", ARCHES[i]->name);
        return df_seterr(err, errlen, "%s: unsupported architecture '%s' (supported: %s)", path, m->arch_name, names),
               DF_E_UNSUPPORTED;
    }
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
int df_load_header(df_model *m, const char *path, const df_model_params *p, char *err, size_t errlen) {
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

/* Which layers have routed experts, from the directory (nothing bound yet). */
void df_expert_layers(const df_model *m, int L, uint8_t *has) {
    char name[64];
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", l);
        has[l] = gguf_find_tensor(m->g, name) != NULL;
    }
}

/* The hot file p names, or m's own beside it (into def), or NULL: none under p. */
static const char *hot_path(const df_model *m, const df_model_params *p, char *def, size_t n) {
    if (!p->mem_budget || (p->hot_file && !*p->hot_file)) return NULL;
    snprintf(def, n, "%s.hot", m->path);
    return p->hot_file ? p->hot_file : def;
}

/* The learned uses that balance the shares: rank 0's hot file, if it has one. */
void df_share_uses(const df_model *m, const df_model_params *p, int L, double *uses) {
    char def[4200];
    const char *path = hot_path(m, p, def, sizeof def);
    if (path) ws_hot_counts(path, L, m->hp.n_expert, uses);
}

double df_hot_recall(const df_model *m, const df_model_params *p) {
    char def[4200];
    const char *path = hot_path(m, p, def, sizeof def);
    return path ? ws_hot_recall(path, NULL) : -1;
}
