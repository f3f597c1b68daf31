/*
 * fuzz_jinja.c - libFuzzer target for the chat-template engine (src/text/jinja.c).
 *
 * The input is a template, optionally followed by a NUL byte and the variables
 * as JSON text. Rendering must succeed or fail with a message; every crash,
 * sanitizer report, leak or hang is a bug. Small limits keep each run short.
 * Built and run by tests/fuzz.sh (FUZZ_TARGET=jinja).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *t = (const char *)data;
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    char *vars = NULL;
    if (nul) {
        size_t vlen = size - tlen - 1;
        vars = malloc(vlen + 1);
        if (!vars) return 0;
        memcpy(vars, nul + 1, vlen);
        vars[vlen] = 0;
    }
    jinja_opts o = {0};
    o.now = 1768473000;
    o.max_steps = 100000;
    o.max_memory = 32 << 20;
    o.max_output = 1 << 20;
    const char *v[1] = {vars};
    char *out = NULL, err[256];
    jinja_render(t, tlen, v, vars ? 1 : 0, &o, &out, err, sizeof err);
    free(out);
    free(vars);
    return 0;
}
