#!/usr/bin/env bash
# symbols.sh - the public archive exports the public API and nothing else, so a
# program can link Deltafin beside ggml (issue 11 item 7).
#   tests/cli/symbols.sh BUILD_DIR
#
# libdeltafin.a is one relocatable object whose internal symbols objcopy made
# local (Makefile; docs/design.md, "The library's symbols"). Checked here:
#   - its global definitions are exactly the functions include/deltafin.h
#     declares (scripts/public-symbols.sh): none missing, none extra;
#   - a program that defines gguf_find_tensor, the name our GGUF reader shared
#     with ggml's libggml-base, links with it and runs; the same program
#     linked with the internal archive fails with a multiple definition (the
#     clash the public archive removes: so this check can fail);
#   - where llama.cpp's libraries are present (.cache/llama/lib), a program
#     calling both Deltafin and ggml links against libdeltafin.a and
#     libggml-base.so, and the executable defines none of ggml's names.
set -uo pipefail
B=${1:-build}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
. tests/cli_common.sh
T=$(mktemp -d /tmp/deltafin-symbols-XXXXXX)
trap 'rm -rf "$T"' EXIT
LIB="$B/libdeltafin.a"
INTLIB="$B/libdeltafin-internal.a"
LIBS=(-lpcre2-8 -lutf8proc -luring -lcjson -lm -pthread)
# a sanitized archive needs the sanitizer runtimes in the program too
sanitized=$(nm -u "$LIB" 2> /dev/null | grep -c __asan_)
[ "${sanitized:-0}" -gt 0 ] && LIBS+=(-fsanitize=address,undefined)

check "the public archive exists" test -f "$LIB"
check "the internal archive exists" test -f "$INTLIB"
./scripts/public-symbols.sh include/deltafin.h > "$T/want"
nm -g --defined-only "$LIB" | awk 'NF == 3 { print $3 }' | sort -u > "$T/have"
check "the header declares functions ($(wc -l < "$T/want"))" test "$(wc -l < "$T/want")" -gt 40
extra=$(comm -13 "$T/want" "$T/have" | tr '\n' ' ')
missing=$(comm -23 "$T/want" "$T/have" | tr '\n' ' ')
check "libdeltafin.a defines no global symbol beyond the header's${extra:+ (extra: $extra)}" test -z "$extra"
check "libdeltafin.a defines every function the header declares${missing:+ (missing: $missing)}" test -z "$missing"
n_int=$(nm -g --defined-only "$INTLIB" | awk 'NF == 3 && $3 !~ /^df_/' | wc -l)
check "the internal archive keeps the internals ($n_int non-df_ globals)" test "$n_int" -gt 50

# a program with its own gguf_find_tensor (as ggml's) beside Deltafin
cat > "$T/clash.c" << 'EOF'
#include <stdio.h>
#include <string.h>
#include "deltafin.h"
/* ggml's gguf_find_tensor(const struct gguf_context *, const char *) */
long gguf_find_tensor(const void *ctx, const char *name) { return ctx ? -1 : (long)strlen(name); }
int main(int argc, char **argv) {
    df_model *m;
    char err[256];
    df_model_params p = df_model_default_params();
    /* loading pulls in Deltafin's GGUF reader, which had a gguf_find_tensor of its own */
    int rc = df_model_load(argc > 1 ? argv[1] : "/nonexistent.gguf", &p, &m, err, sizeof err);
    printf("%s %ld %s\n", df_version(), gguf_find_tensor(NULL, "abc"), rc != 0 ? "load-failed" : "loaded");
    return 0;
}
EOF
cc -std=c11 -Iinclude -o "$T/clash" "$T/clash.c" "$LIB" "${LIBS[@]}" > "$T/link.log" 2>&1
check "a program defining gguf_find_tensor links with libdeltafin.a$(head -3 "$T/link.log" | tr '\n' ' ')" test -x "$T/clash"
out=$("$T/clash" 2>&1)
check "... and runs, its own gguf_find_tensor in use ($out)" contains "$out" " 3 load-failed"
cc -std=c11 -Iinclude -o "$T/clash-int" "$T/clash.c" "$INTLIB" "${LIBS[@]}" > "$T/link-int.log" 2>&1
check "the same program with the internal archive: a multiple definition of gguf_find_tensor" \
    grep -q "multiple definition of .gguf_find_tensor" "$T/link-int.log"

# with llama.cpp's ggml itself
GGML=.cache/llama/lib
if [ -f "$GGML/libggml-base.so" ] && [ "${sanitized:-0}" -eq 0 ]; then
    cat > "$T/both.c" << 'EOF'
#include <stddef.h>
#include <stdio.h>
#include "deltafin.h"
/* from ggml.h / gguf.h (declared here: the program needs no ggml headers) */
struct gguf_context;
struct gguf_context *gguf_init_empty(void);
long gguf_find_tensor(const struct gguf_context *ctx, const char *name);
void gguf_free(struct gguf_context *ctx);
int main(void) {
    struct gguf_context *g = gguf_init_empty();
    long id = gguf_find_tensor(g, "token_embd.weight"); /* ggml's: -1, no such tensor */
    gguf_free(g);
    char b[32];
    printf("%s %ld %s\n", df_version(), id, df_fmt_bytes(1 << 20, b, sizeof b));
    return 0;
}
EOF
    cc -std=c11 -Iinclude -o "$T/both" "$T/both.c" "$LIB" -L"$GGML" -lggml-base -Wl,-rpath,"$ROOT/$GGML" "${LIBS[@]}" \
        > "$T/both.log" 2>&1
    check "a program links libdeltafin.a and llama.cpp's libggml-base.so$(head -3 "$T/both.log" | tr '\n' ' ')" test -x "$T/both"
    out=$("$T/both" 2>&1)
    check "... and runs, with ggml's gguf_find_tensor ($out)" contains "$out" " -1 1.0 MiB"
    nm --defined-only "$T/both" | awk '$2 ~ /^[A-Z]$/ { print $3 }' | sort -u > "$T/both_defs"
    nm -D --defined-only "$GGML/libggml-base.so" | awk '{ print $3 }' | sort -u > "$T/ggml_defs"
    common=$(comm -12 "$T/both_defs" "$T/ggml_defs" | tr '\n' ' ')
    check "the program defines none of ggml's global names${common:+ ($common)}" test -z "$common"
else
    echo "skipped: the ggml link check (no $GGML/libggml-base.so, or a sanitized build)"
fi
finish
