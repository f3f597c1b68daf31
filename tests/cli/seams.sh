#!/usr/bin/env bash
# seams.sh - the joins between modules (issue 11): the CLI sees only the public
# header, and src/ is layered with its dependency arrows pointing one way.
#   tests/cli/seams.sh BUILD_DIR
#
# 1. tools/deltafin.c includes system headers and "deltafin.h", nothing else
#    (the Makefile also compiles it with -Iinclude alone and links it with the
#    public archive, whose only global symbols are the header's functions).
# 2. File A uses file B when A #includes B (headers found by base name in
#    src/*/; a file that includes itself, the NEON kernels' template trick, is
#    no use), or when A's object needs a symbol B's object defines (nm over
#    BUILD/obj: this sees calls through a shared header, e.g. moe.c's
#    functions declared in model.h). Every use must point down the layers,
#    lowest first:
#        base < gguf < types < store < compute < model < arch < api
#    (api: the loader, which holds the architectures table). text (tokenizer,
#    sampler, chat templates) sits beside model: it may use base and gguf;
#    model, arch and api may use it. The public header
#    include/deltafin.h is everyone's.
# 3. No cycle between source files (A uses B and B, through any path, uses A), in src/ and among the
#    program's own files (cli/, server/, jobs/, hub/).
#
# KNOWN lists today's exceptions, one "FROM -> TO" use a line, in one place.
# They are not allowed, only known: the split of src/model (issue 11 item 1)
# should remove most, and a listed use that no longer exists fails the test,
# so the list shrinks with the code.
set -uo pipefail
B=${1:-build}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
. tests/cli_common.sh
T=$(mktemp -d /tmp/deltafin-seams-XXXXXX)
trap 'rm -rf "$T"' EXIT

KNOWN='
src/gguf/gguf.c -> src/types/quant.h           # the reader checks each tensor type and its size
src/gguf/gguf.c -> src/types/quant.c
src/text/chat.c -> src/model/model.h           # chat templates take the model for its token texts
src/store/wsio.c -> src/store/wstore.c         # the reading engines take work from the store queue
'

# ---- 1. the CLI's includes ----
# cli/main.c sees the public header, and cli/'s own (the option table, the config file, the status line)
bad=$(grep -E '^[[:space:]]*#[[:space:]]*include' cli/main.c | grep -vE '^[[:space:]]*#[[:space:]]*include[[:space:]]*(<[^>]+>|"deltafin\.h"|"(opts|config|status)\.h")' || true)
check "cli/main.c includes only system headers, \"deltafin.h\" and cli/'s${bad:+ (not: $bad)}" test -z "$bad"
n_inc=$(grep -cE '^[[:space:]]*#[[:space:]]*include' cli/main.c)
check "... and it does include some ($n_inc)" test "$n_inc" -gt 0
for h in cli/*.h; do
    bad=$(grep -E '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$h" | grep -v '"deltafin\.h"' || true)
    check "$h includes no internal header${bad:+ (not: $bad)}" test -z "$bad"
done
check "the CLI is built" test -x "$B/deltafin"

# ---- 2. the uses between modules ----
# includes: "FROM TO" per line, headers found by base name in src/*/ and its folders (include/ is public)
for f in src/*/*.[ch] src/*/*/*.[ch]; do
    grep -oE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+"' "$f" | sed -E 's/.*"([^"]+)"/\1/' |
    while read -r h; do
        to=$(ls src/*/"$h" src/*/*/"$h" 2> /dev/null | head -1)
        [ -n "$to" ] || continue                    # include/deltafin.h or a system header
        [ "$to" = "$f" ] && continue                # a file that includes itself
        echo "$f $to include"
    done
done > "$T/uses"
# symbols: an object's undefined names, found among the other objects' definitions
objs=()
for o in "$B"/obj/*/*.o "$B"/obj/*/*/*.o; do
    rel=${o#"$B"/obj/}
    case "$rel" in tools/*) continue ;; esac
    [ -f "src/${rel%.o}.c" ] && objs+=("$o")        # skip objects of removed sources
done
check "object files to read in $B/obj (${#objs[@]})" test "${#objs[@]}" -gt 10
for o in "${objs[@]}"; do
    rel=${o#"$B"/obj/}
    nm -P "$o" | awk -v m="src/${rel%.o}.c" '{print m, $1, $2}'
done | awk '
    $3 == "U" { need[NR] = $1 " " $2; next }
    $3 ~ /^[A-TV-Z]$/ { def[$2] = $1 }
    END { for (i in need) { split(need[i], p, " "); if ((p[2] in def) && def[p[2]] != p[1]) print p[1], def[p[2]], "symbol" } }
' >> "$T/uses"
sort -u -k1,2 "$T/uses" -o "$T/uses"
check "uses between files found ($(wc -l < "$T/uses"))" test "$(wc -l < "$T/uses")" -gt 20
sed -E 's/#.*//; /^[[:space:]]*$/d; s/[[:space:]]*->[[:space:]]*/ /; s/[[:space:]]+$//' <<< "$KNOWN" > "$T/known"

# bad_layers KNOWN USES: "FROM -> TO (kind)" for each use that breaks the order and is not known
bad_layers() {
    awk '
        BEGIN { split("base gguf types store compute model arch api", L, " "); for (i in L) rank[L[i]] = i; rank["text"] = rank["model"] }
        function layer(m,  p) { split(m, p, "/"); return p[2] }
        function allowed(a, b) {
            if (a == b) return 1
            if (!(a in rank) || !(b in rank)) return 0
            if (a == "text") return b == "base" || b == "gguf"
            if (b == "text") return a == "model" || a == "arch" || a == "api"
            return rank[b] < rank[a]
        }
        FILENAME == ARGV[1] { known[$1 " " $2] = 1; next }
        !allowed(layer($1), layer($2)) && !(($1 " " $2) in known) { print $1 " -> " $2 " (" $3 ")" }
    ' "$1" "$2"
}
# cycles KNOWN USES: "A <-> B" for files on a cycle, from the transitive closure of the
# uses that are not known (some 50 files: cubic is fine)
cycles() {
    awk '
        FILENAME == ARGV[1] { known[$1 " " $2] = 1; next }
        (($1 " " $2) in known) { next }
        { for (i = 1; i <= 2; i++) if (!($i in id)) { id[$i] = ++n; name[n] = $i }; r[id[$1], id[$2]] = 1 }
        END {
            for (k = 1; k <= n; k++) for (i = 1; i <= n; i++) if ((i, k) in r) for (j = 1; j <= n; j++) if ((k, j) in r) r[i, j] = 1
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if ((i, j) in r && (j, i) in r) print name[i] " <-> " name[j]
        }
    ' "$1" "$2"
}
bad_layers "$T/known" "$T/uses" > "$T/bad_layers"
check "every use points down the layers$(sed 's/^/; /' "$T/bad_layers" | tr -d '\n')" test ! -s "$T/bad_layers"
cycles "$T/known" "$T/uses" > "$T/cycles"
check "no cycle between source files$(sed 's/^/; /' "$T/cycles" | tr -d '\n')" test ! -s "$T/cycles"

# the program's own files (cli/, server/, jobs/, hub/: objects linked into deltafin only): no cycle either
for o in "$B"/obj/cli/*.o "$B"/obj/server/*.o "$B"/obj/jobs/*.o "$B"/obj/hub/*.o; do
    [ -f "$o" ] || continue
    rel=${o#"$B"/obj/}
    nm -P "$o" | awk -v m="${rel%.o}.c" '{print m, $1, $2}'
done | awk '
    $3 == "U" { need[NR] = $1 " " $2; next }
    $3 ~ /^[A-TV-Z]$/ { def[$2] = $1 }
    END { for (i in need) { split(need[i], p, " "); if ((p[2] in def) && def[p[2]] != p[1]) print p[1], def[p[2]], "symbol" } }
' | sort -u > "$T/prog_uses"
check "uses between the program's files found ($(wc -l < "$T/prog_uses"))" test "$(wc -l < "$T/prog_uses")" -gt 20
: > "$T/none"
cycles "$T/none" "$T/prog_uses" > "$T/prog_cycles"
check "no cycle between the program's files$(sed 's/^/; /' "$T/prog_cycles" | tr -d '\n')" test ! -s "$T/prog_cycles"

# every known exception still exists (remove it from KNOWN when the code no longer needs it)
stale=$(while read -r a b; do
    case "$a" in *.c) o="$B/obj/${a#src/}"; [ -f "${o%.c}.o" ] || continue ;; esac # not built for this machine
    grep -q "^$a $b " "$T/uses" || echo "$a -> $b"
done < "$T/known")
check "every known exception is still real${stale:+ (gone, remove from KNOWN: $(tr '\n' ';' <<< "$stale"))}" test -z "$stale"

# the checks can fail: a use upward, text using types, and a three-module cycle are caught
printf 'src/base/util src/model/model include\nsrc/text/jinja src/types/quant symbol\nsrc/store/wsio src/base/util include\n' > "$T/fake"
printf 'src/compute/ops src/compute/matmul symbol\nsrc/compute/matmul src/compute/deltanet symbol\nsrc/compute/deltanet src/compute/ops include\n' >> "$T/fake"
check "a self-test: base -> model and text -> types are reported, store -> base is not" \
    test "$(bad_layers "$T/known" "$T/fake" | cut -d' ' -f1 | tr '\n' ' ')" = "src/base/util src/text/jinja "
check "a self-test: a cycle of three is reported" test "$(cycles "$T/known" "$T/fake" | wc -l)" -eq 3

echo
echo "uses between source files ($B):"
sed 's/^/  /' "$T/uses"
finish
