/*
 * amx_model.c - a software model of the AMX tile instructions
 * (amx_tile.h documents the semantics it follows and why it exists).
 *
 * DESIGN
 * Plain C, every architecture. Registers are byte arrays; int32 sums are
 * accumulated in uint32_t so that overflow wraps as on the hardware
 * without undefined behaviour. Shape checks come first; a faulting
 * instruction changes no register.
 */
#include "amx_tile.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

/* Gemm runs on the model that raised a fault (amx_model_ops.h's AMX_STATE_END). */
static atomic_long model_faults;

long amx_model_faults(void) { return atomic_load(&model_faults); }
void amx_model_fault_note(void) { atomic_fetch_add(&model_faults, 1); }

static int fault(amx_model *m, int f) {
    if (m->fault == AMX_OK) m->fault = f;
    return f;
}

static int tile_ok(const amx_model *m, int t) {
    return m->configured && t >= 0 && t < AMX_TILES && m->rows[t] != 0;
}

int amx_m_ldtilecfg(amx_model *m, const amx_tilecfg *cfg) {
    if (cfg->palette == 0) return amx_m_release(m);
    if (cfg->palette != 1) return fault(m, AMX_FAULT_GP);
    for (int i = 0; i < 14; i++)
        if (cfg->reserved[i]) return fault(m, AMX_FAULT_GP);
    for (int t = 0; t < 16; t++) {
        const unsigned r = cfg->rows[t], cb = cfg->colsb[t];
        if (t >= AMX_TILES && (r || cb)) return fault(m, AMX_FAULT_GP);
        if (r > AMX_MAX_ROWS || cb > AMX_MAX_COLSB || (r == 0) != (cb == 0)) return fault(m, AMX_FAULT_GP);
    }
    memset(m->t, 0, sizeof m->t);
    for (int t = 0; t < AMX_TILES; t++) {
        m->rows[t] = cfg->rows[t];
        m->colsb[t] = cfg->colsb[t];
    }
    m->configured = 1;
    return AMX_OK;
}

int amx_m_release(amx_model *m) {
    memset(m->t, 0, sizeof m->t);
    memset(m->rows, 0, sizeof m->rows);
    memset(m->colsb, 0, sizeof m->colsb);
    m->configured = 0;
    return AMX_OK;
}

int amx_m_loadd(amx_model *m, int t, const void *base, size_t stride) {
    if (!tile_ok(m, t)) return fault(m, AMX_FAULT_UD);
    memset(m->t[t], 0, sizeof m->t[t]);
    for (int r = 0; r < m->rows[t]; r++) memcpy(m->t[t][r], (const uint8_t *)base + (size_t)r * stride, m->colsb[t]);
    return AMX_OK;
}

int amx_m_stored(amx_model *m, int t, void *base, size_t stride) {
    if (!tile_ok(m, t)) return fault(m, AMX_FAULT_UD);
    for (int r = 0; r < m->rows[t]; r++) memcpy((uint8_t *)base + (size_t)r * stride, m->t[t][r], m->colsb[t]);
    return AMX_OK;
}

int amx_m_zero(amx_model *m, int t) {
    if (!tile_ok(m, t)) return fault(m, AMX_FAULT_UD);
    memset(m->t[t], 0, sizeof m->t[t]);
    return AMX_OK;
}

/* The shape rules shared by the dot-product instructions. */
static int dp_shape_ok(const amx_model *m, int c, int a, int b) {
    if (!tile_ok(m, c) || !tile_ok(m, a) || !tile_ok(m, b) || c == a || c == b || a == b) return 0;
    return m->rows[c] == m->rows[a] && m->colsb[c] == m->colsb[b] && m->colsb[a] == 4u * m->rows[b] &&
           m->colsb[c] % 4 == 0;
}

static uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* Clear what lies past the configured rows and columns of C. */
static void clear_outside(amx_model *m, int c) {
    for (int r = 0; r < AMX_MAX_ROWS; r++) {
        const int from = r < m->rows[c] ? m->colsb[c] : 0;
        memset(m->t[c][r] + from, 0, (size_t)(AMX_MAX_COLSB - from));
    }
}

int amx_m_dpb(amx_model *m, int c, int a, int b, int a_signed, int b_signed) {
    if (!dp_shape_ok(m, c, a, b)) return fault(m, AMX_FAULT_UD);
    const int M = m->rows[c], N = m->colsb[c] / 4, K = m->colsb[a] / 4;
    for (int i = 0; i < M; i++)
        for (int n = 0; n < N; n++) {
            uint32_t acc = rd32(m->t[c][i] + 4 * n);
            for (int k = 0; k < K; k++)
                for (int j = 0; j < 4; j++) {
                    const uint8_t x = m->t[a][i][4 * k + j], y = m->t[b][k][4 * n + j];
                    const int32_t xv = a_signed ? (int32_t)(int8_t)x : (int32_t)x;
                    const int32_t yv = b_signed ? (int32_t)(int8_t)y : (int32_t)y;
                    acc += (uint32_t)(xv * yv); /* |xv * yv| <= 65025 */
                }
            wr32(m->t[c][i] + 4 * n, acc);
        }
    clear_outside(m, c);
    return AMX_OK;
}

/* bf16 bits -> float, denormals as 0 (DAZ). */
static float bf16_daz(uint16_t h) {
    if ((h & 0x7F80u) == 0) h &= 0x8000u;
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float ftz(float f) { return fpclassify(f) == FP_SUBNORMAL ? copysignf(0.0f, f) : f; }

int amx_m_dpbf16ps(amx_model *m, int c, int a, int b) {
    if (!dp_shape_ok(m, c, a, b)) return fault(m, AMX_FAULT_UD);
    const int M = m->rows[c], N = m->colsb[c] / 4, K = m->colsb[a] / 4;
    for (int i = 0; i < M; i++)
        for (int n = 0; n < N; n++) {
            float acc;
            memcpy(&acc, m->t[c][i] + 4 * n, 4);
            for (int k = 0; k < K; k++)
                for (int j = 0; j < 2; j++) {
                    uint16_t x, y;
                    memcpy(&x, m->t[a][i] + 4 * k + 2 * j, 2);
                    memcpy(&y, m->t[b][k] + 4 * n + 2 * j, 2);
                    const float p = bf16_daz(x) * bf16_daz(y); /* exact: 8 x 8 significant bits */
                    acc = ftz(acc + p);
                }
            memcpy(m->t[c][i] + 4 * n, &acc, 4);
        }
    clear_outside(m, c);
    return AMX_OK;
}
