#!/usr/bin/env bash
# install.sh - `make install` into a temporary DESTDIR gives a working package
# (issue 36 item 1).
#   tests/cli/install.sh BUILD_DIR
# Checked: the program, libdeltafin.so (versioned soname, exporting exactly the
# functions include/deltafin.h declares), libdeltafin.a, the header,
# deltafin.pc, the man page and the docs land under DESTDIR/PREFIX; a C program
# on the header alone builds with `pkg-config --cflags --libs deltafin`, linked
# shared and static, and both print the model's vocabulary size; the
# installed program runs; `pip install ./python` works offline and its package runs on the installed library;
# `make uninstall` takes every file away again.
set -uo pipefail
B=${1:-build}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
. tests/cli_common.sh
S=$(realpath -m "${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf") # absolute: the Python check runs from another folder
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
command -v pkg-config > /dev/null || { echo "SKIPPED: pkg-config not found"; exit 0; }
# a sanitized build's library needs the sanitizer runtime in every program: the package is the optimized build's
[ "$B" = build ] || { echo "SKIPPED: the package is made from build/ (this is $B)"; exit 0; }
T=$(mktemp -d /tmp/deltafin-install-XXXXXX)
trap 'rm -rf "$T"' EXIT
D="$T/root"
P=/usr
make -s install BUILD="$B" DESTDIR="$D" PREFIX="$P" > "$T/install.log" 2>&1
check "make install DESTDIR=... PREFIX=/usr succeeds" test $? -eq 0
for f in bin/deltafin lib/libdeltafin.a lib/libdeltafin.so lib/libdeltafin.so.0 include/deltafin.h \
    lib/pkgconfig/deltafin.pc share/man/man1/deltafin.1 share/doc/deltafin/README.md share/doc/deltafin/design.md; do
    check "installed: $P/$f" test -e "$D$P/$f"
done
check "libdeltafin.so.0 is the soname" bash -c "objdump -p '$D$P/lib/libdeltafin.so' | grep -q 'SONAME *libdeltafin.so.0\$'"
./scripts/public-symbols.sh include/deltafin.h > "$T/want"
nm -D --defined-only "$D$P/lib/libdeltafin.so" | awk '{ print $3 }' | sort -u > "$T/have"
check "the shared library exports exactly the header's $(wc -l < "$T/want") functions ($(comm -3 "$T/want" "$T/have" | tr -d '\t' | tr '\n' ' '))" \
    cmp -s "$T/want" "$T/have"
check "the man page is the help text's (names 'serve')" grep -q 'serve' "$D$P/share/man/man1/deltafin.1"
man -l "$D$P/share/man/man1/deltafin.1" > "$T/man.txt" 2> "$T/man.err" || true
[ -s "$T/man.txt" ] && check "man renders it" grep -q 'DESCRIPTION' "$T/man.txt"

cat > "$T/prog.c" << 'EOF'
#include <stdio.h>
#include "deltafin.h"
int main(int argc, char **argv) {
    char err[512];
    df_model_params mp = df_model_default_params();
    mp.vocab_only = 1;
    df_model *m = NULL;
    if (argc < 2 || df_model_load(argv[1], &mp, &m, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", argc < 2 ? "no model" : err);
        return 1;
    }
    printf("%d\n", df_n_vocab(m));
    df_model_free(m);
    return 0;
}
EOF
export PKG_CONFIG_PATH="$D$P/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$D"
check "pkg-config knows deltafin $(pkg-config --modversion deltafin 2> /dev/null)" pkg-config --exists deltafin
# shellcheck disable=SC2046
cc -std=c11 -o "$T/shared" "$T/prog.c" $(pkg-config --cflags --libs deltafin) 2> "$T/cc1.err"
check "a program builds against the shared library ($(head -c 200 "$T/cc1.err"))" test -x "$T/shared"
want=$("$B/deltafin" info -m "$S" | sed -n 's/^tokenizer:.*, \([0-9]*\) tokens,.*/\1/p')
check "... and runs: the model's vocabulary ($want)" \
    test "$(LD_LIBRARY_PATH="$D$P/lib" "$T/shared" "$S" 2>&1)" = "$want"
check "... linked to libdeltafin.so.0" bash -c "LD_LIBRARY_PATH='$D$P/lib' ldd '$T/shared' | grep -q 'libdeltafin.so.0 => $D'"
# static: the archive by name, with the private libraries pkg-config lists
# shellcheck disable=SC2046
cc -std=c11 -o "$T/static" "$T/prog.c" $(pkg-config --cflags --static --libs deltafin | sed 's/-ldeltafin/-l:libdeltafin.a/') \
    2> "$T/cc2.err"
check "a program builds against the static library ($(head -c 200 "$T/cc2.err"))" test -x "$T/static"
check "... runs without the shared one" test "$("$T/static" "$S" 2>&1)" = "$want"
check "... and does not need it" bash -c "! ldd '$T/static' | grep -q libdeltafin"
check "the installed program runs" bash -c "LD_LIBRARY_PATH= '$D$P/bin/deltafin' info -m '$S' | grep -q stories"
# Python: `pip install ./python` offline (no index, nothing compiled) into a virtual environment; imported from
# another folder, the package loads the installed library and generates run --temp 0's text
PY=/usr/bin/python3 # Debian's (scripts/install-deps.sh --test), not another on the PATH
[ -x "$PY" ] || PY=$(command -v python3 || echo python3)
if "$PY" -c 'import venv, setuptools, wheel' 2> /dev/null; then
    "$PY" -m venv --system-site-packages "$T/venv" > "$T/venv.log" 2>&1 &&
        cp -r "$ROOT/python" "$T/pysrc" && # pip builds in the folder it is given: not in the source tree
        "$T/venv/bin/pip" install --no-index --no-build-isolation --no-cache-dir "$T/pysrc" > "$T/pip.log" 2>&1
    check "pip install ./python offline into a virtual environment ($(tail -n 1 "$T/pip.log"))" test $? -eq 0
    py=$(cd "$T" && LD_LIBRARY_PATH="$D$P/lib" "$T/venv/bin/python" -c '
import sys, deltafin
print(deltafin.__file__)
print("".join(deltafin.Model(sys.argv[1]).generate("Once upon a time", max_tokens=24, temp=0)), end="")' "$S" 2>&1)
    want=$("$B/deltafin" run -m "$S" -p "Once upon a time" -n 24 --temp 0 2> /dev/null)
    check "... imported from the environment, not the source ($(head -n 1 <<< "$py"))" \
        test "${py#"$T/venv/"}" != "$py"
    check "... it generates run --temp 0's text" test "Once upon a time$(tail -n +2 <<< "$py")" = "$want"
else
    echo "(pip install not checked: python3 venv, setuptools or wheel missing)"
fi
if [ -f "$B/libdeltafin-mpi.so" ] && command -v mpirun > /dev/null; then # the MPI plugin (docs/cluster.md)
    check "installed: $P/lib/deltafin/libdeltafin-mpi.so" test -f "$D$P/lib/deltafin/libdeltafin-mpi.so"
    "$B/mkmodel" -o "$T/moe.gguf" --preset qwen3moe-tiny --type q8_0 > /dev/null 2>&1
    out=$(ASAN_OPTIONS=detect_leaks=0 timeout 120 mpirun --allow-run-as-root --oversubscribe --quiet -np 2 \
        "$D$P/bin/deltafin" run -m "$T/moe.gguf" -p hi -n 4 --temp 0 2>&1)
    rc=$?
    check "the installed program finds its plugin under mpirun -np 2 (exit $rc: $(tail -c 200 <<< "$out"))" test $rc -eq 0
fi

make -s uninstall BUILD="$B" DESTDIR="$D" PREFIX="$P" > /dev/null 2>&1
left=$(find "$D" -type f -o -type l | sed "s|^$D||" | tr '\n' ' ')
check "make uninstall leaves no file behind${left:+ (left: $left)}" test -z "$left"
finish
