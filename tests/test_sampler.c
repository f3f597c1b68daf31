/*
 * test_sampler.c - the sampler's state (df_sampler_get_state/set_state):
 * a sampler restored from another's state continues with the same tokens,
 * and damaged or foreign states are refused without changing the sampler.
 */
#include <math.h>
#include <string.h>

#include "deltafin.h"
#include "testutil.h"

#define NV 500

static void fill_logits(float *l, uint64_t *seed) {
    for (int i = 0; i < NV; i++) l[i] = (float)(tu_rand(seed) % 1000) / 250.0f;
}

static df_sampler_params params(void) {
    df_sampler_params p = df_sampler_default_params();
    p.temp = 0.9f;
    p.top_k = 50;
    p.min_p = 0.0f;
    p.repeat_penalty = 1.3f;
    p.repeat_last_n = 16;
    p.seed = 1234;
    return p;
}

/* Draw 40 tokens; at step 17 copy the state into a fresh sampler which must
 * then draw the same remaining tokens. */
static void test_state_round_trip(void **st) {
    (void)st;
    df_sampler_params p = params();
    df_sampler *a = df_sampler_new(&p, NV), *b = df_sampler_new(&p, NV);
    assert_non_null(a);
    assert_non_null(b);
    float logits[NV];
    uint64_t seed = 99;
    const size_t need = df_sampler_get_state(a, NULL, 0);
    assert_true(need > 0);
    unsigned char *buf = malloc(need);
    assert_non_null(buf);
    int diverged = 0;
    for (int i = 0; i < 40; i++) {
        fill_logits(logits, &seed);
        const int32_t ta = df_sampler_sample(a, logits);
        df_sampler_accept(a, ta);
        if (i == 17) {
            assert_int_equal(df_sampler_get_state(a, buf, need), need);
            assert_int_equal(df_sampler_set_state(b, buf, need), 0);
        } else if (i > 17) {
            const int32_t tb = df_sampler_sample(b, logits);
            df_sampler_accept(b, tb);
            diverged |= ta != tb;
        }
    }
    assert_false(diverged);
    free(buf);
    df_sampler_free(a);
    df_sampler_free(b);
}

/* Without the state, a fresh sampler does not follow (the test can fail). */
static void test_fresh_sampler_differs(void **st) {
    (void)st;
    df_sampler_params p = params();
    df_sampler *a = df_sampler_new(&p, NV), *b = df_sampler_new(&p, NV);
    float logits[NV];
    uint64_t seed = 7;
    for (int i = 0; i < 10; i++) {
        fill_logits(logits, &seed);
        df_sampler_accept(a, df_sampler_sample(a, logits));
    }
    int same = 0;
    for (int i = 0; i < 20; i++) {
        fill_logits(logits, &seed);
        const int32_t ta = df_sampler_sample(a, logits), tb = df_sampler_sample(b, logits);
        df_sampler_accept(a, ta);
        df_sampler_accept(b, tb);
        same += ta == tb;
    }
    assert_true(same < 20);
    df_sampler_free(a);
    df_sampler_free(b);
}

static void test_bad_states_refused(void **st) {
    (void)st;
    df_sampler_params p = params();
    df_sampler *a = df_sampler_new(&p, NV);
    const size_t need = df_sampler_get_state(a, NULL, 0);
    unsigned char *buf = malloc(need), *orig = malloc(need), *after = malloc(need);
    df_sampler_get_state(a, buf, need);
    memcpy(orig, buf, need);
    assert_int_equal(df_sampler_set_state(a, buf, need - 1), -1);   /* truncated */
    assert_int_equal(df_sampler_set_state(a, NULL, need), -1);
    buf[0] ^= 1;                                                     /* bad magic */
    assert_int_equal(df_sampler_set_state(a, buf, need), -1);
    buf[0] ^= 1;
    buf[8] ^= 1;                                                     /* another seed */
    assert_int_equal(df_sampler_set_state(a, buf, need), -1);
    buf[8] ^= 1;
    buf[24] = 0xff;                                                  /* ring head out of range */
    assert_int_equal(df_sampler_set_state(a, buf, need), -1);
    df_sampler_get_state(a, after, need);
    assert_memory_equal(orig, after, need);                          /* unchanged by refusals */
    df_sampler_params q = p;
    q.repeat_last_n = 8;                                             /* other parameters */
    df_sampler *b = df_sampler_new(&q, NV);
    assert_int_equal(df_sampler_set_state(b, orig, need), -1);
    free(buf);
    free(orig);
    free(after);
    df_sampler_free(a);
    df_sampler_free(b);
}

/* logit_bias and OpenAI's penalties: a bias moves the greedy pick, bad biases are refused; a presence penalty
 * of a seen token and a frequency penalty that grows with its count, over the window. */
static void test_bias_and_penalties(void **state) {
    (void)state;
    float l[NV];
    for (int i = 0; i < NV; i++) l[i] = (float)i * 0.01f; /* greedy: the last token */
    df_sampler_params p = df_sampler_default_params();
    p.temp = 0.0f;
    df_sampler *s = df_sampler_new(&p, NV);
    const int32_t id = 3, bad = NV;
    const float up = 100.0f, nan = NAN;
    assert_int_equal(df_sampler_sample(s, l), NV - 1);
    assert_int_equal(df_sampler_set_logit_bias(s, &id, &up, 1), DF_OK);
    assert_int_equal(df_sampler_sample(s, l), 3);
    assert_int_equal(df_sampler_set_logit_bias(s, &bad, &up, 1), DF_E_INPUT);
    assert_int_equal(df_sampler_set_logit_bias(s, &id, &nan, 1), DF_E_INPUT);
    assert_int_equal(df_sampler_sample(s, l), 3); /* a refusal changes nothing */
    assert_int_equal(df_sampler_set_logit_bias(s, NULL, NULL, 0), DF_OK);
    assert_int_equal(df_sampler_sample(s, l), NV - 1);
    df_sampler_free(s);
    /* the last token seen once: a presence penalty above its lead moves the pick to the one before */
    p.presence_penalty = 0.02f;
    s = df_sampler_new(&p, NV);
    df_sampler_accept(s, NV - 1);
    assert_int_equal(df_sampler_sample(s, l), NV - 2);
    df_sampler_free(s);
    /* a frequency penalty counts: seen twice at 0.006 each (0.012 > 0.01) moves it; seen once (0.006) does not */
    p.presence_penalty = 0.0f, p.frequency_penalty = 0.006f;
    s = df_sampler_new(&p, NV);
    df_sampler_accept(s, NV - 1);
    assert_int_equal(df_sampler_sample(s, l), NV - 1);
    df_sampler_accept(s, NV - 1);
    assert_int_equal(df_sampler_sample(s, l), NV - 2);
    df_sampler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_round_trip),
        cmocka_unit_test(test_bias_and_penalties),
        cmocka_unit_test(test_fresh_sampler_differs),
        cmocka_unit_test(test_bad_states_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
