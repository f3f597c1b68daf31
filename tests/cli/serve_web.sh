#!/usr/bin/env bash
# serve_web.sh - the chat page at / (issue 40 item 1) in a real browser: Debian's Chromium driven by
# puppeteer-core from npm (no browser is downloaded), tests/server/web.mjs.
#   tests/cli/serve_web.sh BUILD_DIR [SHOT_DIR]
# The page is the program's own (server/web.S): it loads with nothing fetched from elsewhere and no console
# error; a message sent gets a streamed answer (the test fails if it never appears); the engine panel updates from
# /metrics; Stop ends a long generation; the conversation survives a reload; a 390 px window has no sideways
# scroll; and a page of another origin the server allows with --cors calls the API from the browser. Screenshots
# go to SHOT_DIR (default: a temporary folder; docs/web-chat*.png were made with SHOT_DIR=docs). Skipped, saying
# why, without Chromium, node or the npm registry.
set -u
B=${1:-build}
SHOTS=${2:-}
D="$B/deltafin"
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
T=$(mktemp -d /tmp/deltafin-web-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
CHROME=$(command -v chromium || true)
[ -n "$CHROME" ] || { echo "SKIPPED: chromium not found (scripts/install-deps.sh --test installs it)"; exit 0; }
command -v curl > /dev/null || { echo "SKIPPED: curl not found"; exit 0; }
npm_pkg .cache/npm-puppeteer puppeteer-core@24 puppeteer-core || exit 0
SLOW=1; [ -n "${DELTAFIN_SANITIZED:-}" ] && SLOW=4

# another origin: a page on another port that the server allows with --cors
node -e '
const http = require("http");
const s = http.createServer((q, r) => { r.writeHead(200, {"Content-Type": "text/html"}); r.end("<!doctype html><title>other</title><p>another site"); });
s.listen(0, "127.0.0.1", () => { console.log(s.address().port); });
' > "$T/other.port" &
PIDS+=($!)
for _ in $(seq 1 50); do [ -s "$T/other.port" ] && break; sleep 0.1; done
OTHER="http://127.0.0.1:$(cat "$T/other.port")"
serve_start "$T/s.log" -m "$S" -c 1024 --chat-template chatml --parallel 2 --cors "$OTHER"
U="http://127.0.0.1:$PORT"
h=$(curl -s -D - -o "$T/page" "$U/")
check "GET /: the page (text/html, its own policy: nothing from elsewhere)" \
    test -n "$(grep -i '^Content-Type: text/html' <<< "$h")" -a -n "$(grep -i "^Content-Security-Policy: default-src 'none'" <<< "$h")"
check "... with no reference to another host" test -z "$(grep -oE '(src|href)="(https?:)?//' "$T/page")"
mkdir -p "${SHOTS:-$T/shots}"
timeout $((300 * SLOW)) env PUPPETEER_EXECUTABLE_PATH="$CHROME" node "$(dirname "${BASH_SOURCE[0]}")/../server/web.mjs" \
    .cache/npm-puppeteer "$U" "${SHOTS:-$T/shots}" "$OTHER"
check "the page in Chromium: every check (tests/server/web.mjs)" test $? -eq 0
finish
