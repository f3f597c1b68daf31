#!/usr/bin/env bash
# schema.sh - the JSON Schema compiler (src/text/schema.c) checked independently, and against the grammar engine.
#   tests/cli/schema.sh BUILD_DIR
# tests/schema/check.mjs compiles 79 schemas (objects, arrays, enums, anyOf, $ref recursion, integer and number
# ranges, patterns, formats...) with `test_schema --gbnf`, generates 200 random texts from each grammar with a
# GBNF generator of its own and validates every one with ajv (and ajv-formats); valid instances must match, invalid
# ones (101 for 0..100, ...) must not, and refused schemas must name their keyword. Then every generated text must
# be a sentence of its grammar for Deltafin's engine (test_grammar --accepts, a byte a token).
set -u
B=${1:-build}
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
command -v node > /dev/null || { echo "SKIPPED: node not found"; exit 0; }
npm_pkg .cache/npm-ajv "ajv@8 ajv-formats@3" ajv-formats || exit 0
T=$(mktemp -d /tmp/deltafin-schema-XXXXXX)
trap 'rm -rf "$T"' EXIT
SCHEMA2GBNF="$B/test_schema" SCHEMA_DUMP="$T" AJV_PREFIX=.cache/npm-ajv \
    node "$(dirname "${BASH_SOURCE[0]}")/../schema/check.mjs" 200 > "$T/check.log" 2>&1
rc=$?
tail -3 "$T/check.log"
check "check.mjs: every generated text valid under ajv, every instance judged right" test "$rc" -eq 0
n=0 bad=0
for g in "$T"/*.gbnf; do
    [ -f "${g%.gbnf}.texts" ] || continue
    n=$((n + 1))
    "$B/test_grammar" --accepts "$g" "${g%.gbnf}.texts" > /dev/null 2> "$T/acc.err" || { bad=$((bad + 1)); head -3 "$T/acc.err"; }
done
check "Deltafin's grammar engine accepts every generated text of the $n grammars ($bad refusing)" test "$n" -gt 50 -a "$bad" -eq 0
finish
