/*
 * load.c - loading a model: its header (header.c), the weight store
 * (mapped, resident or planned under a budget), the architecture's tensors;
 * a model shared out over a cluster's ranks (its experts, or its layers);
 * the model's facts and counters. Planning without loading is plan.c's.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "expar.h"
#include "grammar.h"
#include "header.h"
#include "pipe.h"
#include "plan.h"
#include "quant.h"
#include "requant.h"
#include "session.h"
#include "outfile.h"
#include "util.h"
#include "wsio.h"

#define DF_VERSION "0.1.0"



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




/* The weight store: mapped, resident, or planned under p->mem_budget. */
static int open_store(df_model *m, const df_model_params *p, char *err, size_t errlen) {
    ws_config cfg;
    if (df_store_config(m, p, &cfg, err, errlen) != 0) return -1;
    cfg.pool = m->pool;
    if (ws_open(m->g, &cfg, &m->ws, err, errlen) != 0) {
        char inner[512];
        snprintf(inner, sizeof inner, "%s", err ? err : "");
        return df_seterr(err, errlen, "%s: %s", m->path, inner);
    }
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
    int rc = !m ? df_seterr(why, n, "out of memory") : df_load_header(m, path, p, why, n);
    if (rc == 0) rc = df_model_validate(m, why, n);
    uint64_t fp = 0;
    if (rc == 0) rc = gguf_fingerprint(m->g, &fp, why, n);
    if (rc == 0 && (fp != lm->fingerprint || m->hp.n_layer + m->hp.n_layer_mtp != lm->n_layer ||
                    m->hp.n_expert != lm->n_expert))
        rc = df_seterr(why, n, "%s is not the same model as rank 0's %s (another file, version or quantization): "
                       "every rank must load the same model", path, lm->path);
    return rc ? -1 : 0;
}


/* This rank's plan of its share (before any weight is read): 0 or -1 with why. */
static int plan_share(df_model *m, const df_model_params *p, char *why, size_t n) {
    ws_config cfg;
    ws_plan plan;
    if (df_store_config(m, p, &cfg, why, n) != 0) return -1;
    return cfg.mode == WS_STREAM ? ws_make_plan(m->g, &cfg, &plan, why, n) : 0;
}

/* The store and the bindings of this rank's share: 0 or -1 with why. */
static int open_share(df_model *m, const df_model_params *p, char *why, size_t n) {
    m->pool = tp_create(m->n_threads);
    if (!m->pool) return df_seterr(why, n, "out of memory");
    return open_store(m, p, why, n) || df_bind_all(m, why, n) ? -1 : 0;
}



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
    else if (df_share_rooms(m->path, p, R, budgets, m->hp.n_expert, rooms, err, errlen) != 0)
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
    if (df_model_validate(m, err, errlen) != 0) return DF_E_INPUT;
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
    df_expert_layers(m, L, has);
    df_share_uses(m, p, L, uses);
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
    if (df_model_validate(m, err, errlen) != 0) return DF_E_INPUT;
    if (p->mtp) return df_seterr(err, errlen, "%s: --split layers does not run the MTP block yet", m->path), DF_E_UNSUPPORTED;
    if (strlen(m->path) >= sizeof ((load_msg *)0)->path)
        return df_seterr(err, errlen, "%s: the path is too long to send to the other ranks", m->path), DF_E_INPUT;
    uint64_t fp;
    if (gguf_fingerprint(m->g, &fp, err, errlen) != 0) return DF_E_IO;
    m->pp = pp_new(0, R, ++next_model_id);
    if (!m->pp) return df_seterr(err, errlen, "out of memory"), DF_E_NOMEM;
    m->session_freed = df_pipe_freed;
    if (pp_split(m->pp, m->g, m->hp.n_layer, err, errlen) != 0) return DF_E_INPUT;
    pp_stage(m);
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
    if (rc == 0) pp_stage(m);
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
        else df_expert_layers(m, L, has), ep_take(m->ep, has, (const int16_t *)(lm + 1));
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
    int rc = df_load_header(m, path, p, err, errlen), shape_only = 0;
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
    if (p->mem_budget && df_model_validate(m, err, errlen) != 0) goto fail; /* the file's defects before the budget's */
    if (p->mem_budget && p->plan_cb) { /* the plan it loads by, before any weight is read */
        df_plan plan;
        if (df_plan_loading(m, p, &plan, err, errlen) != 0) goto fail;
        p->plan_cb(&plan, p->plan_ctx);
    }
    rc = p->mem_budget ? DF_E_NOMEM : DF_E_IO; /* the file is sound: what fails now is the budget or the reading */
    m->pool = tp_create(m->n_threads); /* the store reads with it too */
    if (!m->pool) goto oom;
    if (open_store(m, p, err, errlen) != 0) goto fail;
    rc = DF_E_INPUT;
    if (df_bind_all(m, err, errlen) != 0) goto fail;
    *out = m;
    return DF_OK;
oom:
    df_seterr(err, errlen, "%s: out of memory", path);
    rc = DF_E_NOMEM;
fail:
    df_model_free(m);
    return rc < 0 ? rc : DF_E_INPUT;
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
    o->read_ahead = st.read_ahead;
    o->prefetch_issued = st.prefetch_issued;
    o->prefetch_used = st.prefetch_used;
    o->unguessed = st.unguessed;
    o->lookahead_wanted = st.lookahead_wanted;
    o->lookahead_got = st.lookahead_got;
    o->bytes_packed = st.bytes_packed;
    o->expert_fetches = st.expert_fetches;
    o->expert_bytes = st.expert_bytes;
    o->passes = m->n_passes;
    o->pass_rows = m->n_pass_rows;
    o->moe_runs = m->n_moe_runs;
    o->expert_union = m->n_union_experts;
    o->read_seconds = st.read_seconds;
    o->wait_seconds = st.wait_seconds;
    o->disk_idle_seconds = st.idle_seconds;
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
