/*
 * bind.h - reading an architecture's metadata and binding its tensors
 * (bind.c): what df_model_load, the architectures' hparams/bind functions
 * and moe.c share. Below the architectures; uses only model.h's types.
 */
#ifndef DF_BIND_H
#define DF_BIND_H

#include "model.h"

/* "<arch>.<suffix>" as an integer in [lo, hi]; absent optional keys keep *out. */
int df_hp_int(df_model *m, const char *suffix, int *out, int lo, int hi, int required, char *err, size_t errlen);
/* "<arch>.<suffix>" as a float in [lo, hi] if present (absent: *out kept). */
int df_hp_float(df_model *m, const char *suffix, float *out, float lo, float hi, char *err, size_t errlen);
/* "<arch>.<suffix>" if it is a per-layer array: n_layer integers, each in
 * [lo, hi], into a new array *out (NULL if the key is absent or a scalar). */
int df_hp_layers(df_model *m, const char *suffix, int32_t **out, int lo, int hi, char *err, size_t errlen);

/* nextn_predict_layers: the NextN/MTP blocks past the layers (n_layer_nextn),
 * taken out of n_layer; the leading dense layers must fit in what is left. */
int df_hp_nextn(df_model *m, char *err, size_t errlen);
/* A NextN/MTP block's own tensors at layer l (after df_bind_embed_output):
 * eh_proj [2 * n_embd, n_embd], enorm, hnorm; optional shared_head_norm,
 * embed_tokens and shared_head_head [n_embd, n_vocab]. */
int df_bind_nextn(df_model *m, int l, char *err, size_t errlen);

ws_tensor *df_tensor(df_model *m, const char *fmt, int layer, int required, char *err, size_t errlen);
/* A family's own tensor handles (m->fam_tensors, for its bind hook): head bytes (its model-wide handles and
 * the flexible array's offset), then an entry of per_layer bytes for each of the n_layer + n_layer_mtp layers,
 * df_layer.fam pointing at each. Made once, zeroed; kept across binds. 0, or -1 with err. */
int df_bind_fam_tensors(df_model *m, size_t head, size_t per_layer, char *err, size_t errlen);
/* Bind tensor fmt (with %d = layer l) and check its shape [ne0, ne1, ne2];
 * vectors (ne1 = ne2 = 1) must be f32. An optional tensor that is absent
 * leaves *dst NULL and succeeds. */
int df_bind(df_model *m, ws_tensor **dst, const char *fmt, int l, int required, int64_t ne0, int64_t ne1,
            int64_t ne2, char *err, size_t errlen);
/* df_bind of a matrix [ne0, ne1] that only matrix products read, whose output count ne1 comes from a
 * hyperparameter that may be 1 (a head count): then it is not a vector, and may have any type. */
int df_bind_mat(df_model *m, ws_tensor **dst, const char *fmt, int l, int required, int64_t ne0, int64_t ne1,
                char *err, size_t errlen);
/* df_bind of a required integer table (i32, [ne0, ne1]): the one place an
 * i32 tensor is accepted (df_bind refuses i32: no kernel computes with it). */
int df_bind_i32(df_model *m, ws_tensor **dst, const char *fmt, int l, int64_t ne0, int64_t ne1, char *err,
                size_t errlen);
/* df_bind of a required tensor that must also be f32 whatever its shape
 * (short-convolution kernels, read as floats). */
int df_bind_f32(df_model *m, ws_tensor **dst, const char *fmt, int l, int64_t ne0, int64_t ne1, int64_t ne2, char *err,
                size_t errlen);
/* token_embd (its rows set n_vocab), output_norm, and output (token_embd when absent: tied). */
int df_bind_embed_output(df_model *m, char *err, size_t errlen);
/* A leading dense layer's SwiGLU FFN (ffn_gate/up/down) at layer l's
 * feed_forward_length (per-layer array or the scalar). */
int df_bind_dense_ffn(df_model *m, int l, char *err, size_t errlen);
int df_check_shape(const ws_tensor *t, int64_t ne0, int64_t ne1, char *err, size_t errlen);

#endif
