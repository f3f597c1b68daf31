#!/usr/bin/env bash
# make-fixtures.sh - render every chat template with every conversation with Hugging
# Face's Jinja (@huggingface/jinja, pinned below, installed by npm into .cache/jinja)
# into OUT_DIR (default tests/data/jinja/expected, the committed fixtures).
#
#   tests/jinja/make-fixtures.sh [OUT_DIR]
#
# Needs node and npm (and the npm registry the first time). The clock strftime_now
# sees is fixed (render.mjs) and the time zone is UTC, as in tests/test_jinja.c.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VERSION=0.5.11
PKG="$ROOT/.cache/jinja"
OUT=${1:-$ROOT/tests/data/jinja/expected}
installed=$(node -p "require('$PKG/node_modules/@huggingface/jinja/package.json').version" 2> /dev/null || true)
if [ "$installed" != "$VERSION" ]; then
    mkdir -p "$PKG"
    npm install --silent --no-save --no-audit --no-fund --prefix "$PKG" "@huggingface/jinja@$VERSION" > "$PKG/npm.log" 2>&1 ||
        { cat "$PKG/npm.log" >&2; exit 1; }
fi
mkdir -p "$OUT"
TZ=UTC node "$ROOT/tests/jinja/render.mjs" "$PKG" "$ROOT/tests/data/jinja/templates" "$ROOT/tests/data/jinja/conv" "$OUT"
echo "make-fixtures.sh: @huggingface/jinja $VERSION, $(ls "$ROOT"/tests/data/jinja/templates/*.jinja | wc -l) templates x $(ls "$ROOT"/tests/data/jinja/conv/*.json | wc -l) conversations -> $OUT"
