/*
 * arch_dsa.c - DeepSeek V3.2 ("deepseek32") and GLM-5 ("glm-dsa"): DeepSeek
 * V3's blocks (arch_deepseek2.c: MLA, dense lead layers, routed and shared
 * experts) whose MLA attends only to the keys a lightning indexer chooses
 * (DeepSeek sparse attention; dsa.c selects, mla.c and attn.c attend).
 *
 * What the two files differ in, as llama.cpp's src/models/deepseek32.cpp
 * and glm-dsa.cpp have it:
 *   - the indexer's RoPE: NeoX layout (deepseek32) or pairs (glm-dsa);
 *   - its key LayerNorm's epsilon: 1e-6 (deepseek32); glm-dsa's is left at 0;
 *   - glm-dsa ignores rope.scaling.yarn_log_multiplier (llama.cpp does not
 *     read it there: YaRN's attention scale is computed as without it);
 *   - glm-dsa routes with a sigmoid when expert_gating_func is absent, and
 *     GLM-5.2 has shared indexer layers (attention.indexer.types 0) that
 *     reuse the last selecting layer's choice. llama.cpp assumes GLM-5.2's
 *     pattern for files with a 1M-token context that lack the key; Deltafin
 *     reads the key and otherwise lets every layer select.
 * NextN / MTP blocks (nextn_predict_layers) are left out of the forward
 * pass, as for glm4moe.
 */
#include <stdio.h>

#include "arch.h"
#include "bind.h"
#include "dsa.h"
#include "util.h"

static int hparams(df_model *m, int rope_neox, float norm_eps, char *err, size_t errlen) {
    if (df_hp_nextn(m, err, errlen)) return -1;
    return df_deepseek2_hparams(m, err, errlen) || df_dsa_hparams(m, rope_neox, norm_eps, err, errlen) ? -1 : 0;
}

static int hparams_deepseek32(df_model *m, char *err, size_t errlen) { return hparams(m, 1, 1e-6f, err, errlen); }

static int hparams_glm_dsa(df_model *m, char *err, size_t errlen) {
    int gating = 0;
    if (df_hp_int(m, "expert_gating_func", &gating, 0, 3, 0, err, errlen)) return -1;
    if (gating == 0) m->hp.gating = DF_GATING_SIGMOID; /* GLM's router when the file does not say */
    if (hparams(m, 0, 0.0f, err, errlen)) return -1;
    df_deepseek_yarn(m, 0.0f); /* llama.cpp reads no yarn_log_multiplier for glm-dsa */
    return 0;
}

static int bind(df_model *m, char *err, size_t errlen) {
    if (df_deepseek2_bind(m, err, errlen)) return -1;
    for (int l = 0; l < m->hp.n_layer; l++)
        if (df_dsa_bind_layer(m, l, err, errlen)) return -1;
    return 0;
}

const df_arch df_arch_deepseek32 = {
    .name = "deepseek32",
    .rope_neox = 0,
    .hparams = hparams_deepseek32,
    .bind = bind,
    .forward = df_deepseek2_forward,
    .layer_mem = df_dsa_layer_mem,
    .fam_bytes = sizeof(df_dsa_fam),
    .scratch = df_dsa_scratch,
};
const df_arch df_arch_glm_dsa = {
    .name = "glm-dsa",
    .rope_neox = 0,
    .hparams = hparams_glm_dsa,
    .bind = bind,
    .forward = df_deepseek2_forward,
    .layer_mem = df_dsa_layer_mem,
    .fam_bytes = sizeof(df_dsa_fam),
    .scratch = df_dsa_scratch,
};
