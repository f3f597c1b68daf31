/*
 * bind.c - the helpers loading shares with every architecture and moe.c:
 * reading "<arch>.<key>" metadata with range checks, and binding tensors by
 * name with their shapes checked (bind.h).
 *
 * Every hyperparameter is range-checked before it sizes anything, and every
 * tensor's shape is checked against them, so a hostile file gives an error
 * here rather than an out-of-bounds access in the forward pass.
 */
#include "bind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "util.h"

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

int df_hp_float(df_model *m, const char *suffix, float *out, float lo, float hi, char *err, size_t errlen) {
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

int df_hp_nextn(df_model *m, char *err, size_t errlen) {
    df_hparams *h = &m->hp;
    if (df_hp_int(m, "nextn_predict_layers", &h->n_layer_nextn, 0, h->n_layer - 1, 0, err, errlen)) return -1;
    h->n_layer -= h->n_layer_nextn;
    if (h->n_layer_dense_lead > h->n_layer)
        return df_seterr(err, errlen, "%s: leading_dense_block_count %d exceeds the %d layers", m->path,
                         h->n_layer_dense_lead, h->n_layer);
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
        case GGUF_T_U8:
        case GGUF_T_BOOL: x = ((const uint8_t *)kv->arr)[l]; break;
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

/* df_bind, df_bind_mat and df_bind_i32: the store refuses i32 (integer tables) except
 * where one is asked for (ws_get_table), and then anything else. kind: BIND_VECTOR_RULE (a one-row shape is a
 * vector, read as floats: f32 only), BIND_MATRIX (a matrix that may have one output row: any type), BIND_I32. */
enum { BIND_VECTOR_RULE, BIND_MATRIX, BIND_I32 };
static int bind_checked(df_model *m, ws_tensor **dst, const char *fmt, int l, int required, int64_t ne0, int64_t ne1,
                        int64_t ne2, int kind, char *err, size_t errlen) {
    const int i32 = kind == BIND_I32;
    char name[96];
    snprintf(name, sizeof name, fmt, l);
    *dst = NULL;
    if (!required && !gguf_find_tensor(m->g, name)) return 0;
    ws_tensor *t = i32 ? ws_get_table(m->ws, name, err, errlen) : df_tensor(m, fmt, l, 1, err, errlen);
    if (!t && i32) {
        char inner[256];
        snprintf(inner, sizeof inner, "%s", err ? err : "");
        return df_seterr(err, errlen, "%s: %s", m->path, inner);
    }
    if (!t) return -1;
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1)
        return df_seterr(err, errlen, "%s: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld, %lld]",
                         m->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)ne0,
                         (long long)ne1, (long long)ne2);
    if (kind == BIND_VECTOR_RULE && ne1 == 1 && ne2 == 1 && t->type != DF_TYPE_F32)
        return df_seterr(err, errlen, "%s: tensor '%s' must be f32", m->path, name);
    *dst = t;
    return 0;
}

int df_bind(df_model *m, ws_tensor **dst, const char *fmt, int l, int required, int64_t ne0, int64_t ne1,
            int64_t ne2, char *err, size_t errlen) {
    return bind_checked(m, dst, fmt, l, required, ne0, ne1, ne2, BIND_VECTOR_RULE, err, errlen);
}

int df_bind_mat(df_model *m, ws_tensor **dst, const char *fmt, int l, int required, int64_t ne0, int64_t ne1,
                char *err, size_t errlen) {
    return bind_checked(m, dst, fmt, l, required, ne0, ne1, 1, BIND_MATRIX, err, errlen);
}

int df_bind_i32(df_model *m, ws_tensor **dst, const char *fmt, int l, int64_t ne0, int64_t ne1, char *err,
                size_t errlen) {
    return bind_checked(m, dst, fmt, l, 1, ne0, ne1, 1, BIND_I32, err, errlen);
}

int df_bind_dense_ffn(df_model *m, int l, char *err, size_t errlen) {
    const df_hparams *h = &m->hp;
    df_layer *L = &m->layers[l];
    const int64_t E = h->n_embd, F = h->n_ff_l ? h->n_ff_l[l] : h->n_ff;
    if (F < 1) return df_seterr(err, errlen, "%s: dense layer %d has feed_forward_length 0", m->path, l);
    return df_bind(m, &L->ffn_gate, "blk.%d.ffn_gate.weight", l, 1, E, F, 1, err, errlen) ||
                   df_bind(m, &L->ffn_up, "blk.%d.ffn_up.weight", l, 1, E, F, 1, err, errlen) ||
                   df_bind(m, &L->ffn_down, "blk.%d.ffn_down.weight", l, 1, F, E, 1, err, errlen)
               ? -1
               : 0;
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

int df_bind_nextn(df_model *m, int l, char *err, size_t errlen) {
    const int64_t E = m->hp.n_embd, V = m->hp.n_vocab;
    df_layer *L = &m->layers[l];
    return df_bind(m, &L->nextn_eh_proj, "blk.%d.nextn.eh_proj.weight", l, 1, 2 * E, E, 1, err, errlen) ||
                   df_bind(m, &L->nextn_enorm, "blk.%d.nextn.enorm.weight", l, 1, E, 1, 1, err, errlen) ||
                   df_bind(m, &L->nextn_hnorm, "blk.%d.nextn.hnorm.weight", l, 1, E, 1, 1, err, errlen) ||
                   df_bind(m, &L->nextn_head_norm, "blk.%d.nextn.shared_head_norm.weight", l, 0, E, 1, 1, err,
                           errlen) ||
                   df_bind(m, &L->nextn_embed, "blk.%d.nextn.embed_tokens.weight", l, 0, E, V, 1, err, errlen) ||
                   df_bind(m, &L->nextn_head, "blk.%d.nextn.shared_head_head.weight", l, 0, E, V, 1, err, errlen)
               ? -1
               : 0;
}

int df_check_shape(const ws_tensor *t, int64_t ne0, int64_t ne1, char *err, size_t errlen) {
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return df_seterr(err, errlen, "tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                         t->gt->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                         (long long)t->ne[3], (long long)ne0, (long long)ne1);
    return 0;
}

int df_bind_f32(df_model *m, ws_tensor **dst, const char *fmt, int l, int64_t ne0, int64_t ne1, int64_t ne2, char *err,
                size_t errlen) {
    if (df_bind(m, dst, fmt, l, 1, ne0, ne1, ne2, err, errlen)) return -1;
    if ((*dst)->type != DF_TYPE_F32) return df_seterr(err, errlen, "%s: tensor '%s' must be f32", m->path, (*dst)->gt->name);
    return 0;
}

int df_bind_fam_tensors(df_model *m, size_t head, size_t per_layer, char *err, size_t errlen) {
    const size_t nl = (size_t)(m->hp.n_layer + m->hp.n_layer_mtp);
    if (!m->fam_tensors && !(m->fam_tensors = calloc(1, head + nl * per_layer)))
        return df_seterr(err, errlen, "%s: out of memory", m->path);
    for (size_t l = 0; l < nl; l++) m->layers[l].fam = (char *)m->fam_tensors + head + l * per_layer;
    return 0;
}
