#!/usr/bin/env bash
# serve_guard.sh - what an HTTP client may not do (issue 31 items 2, 3, 13, 14).
#   tests/cli/serve_guard.sh BUILD_DIR
# - /v1/jobs: a client cannot name the remote endpoint (it would receive the
#   operator's DELTAFIN_REMOTE_KEY), nor ask for more memory, context or
#   threads than the server's; HTTP jobs get the operator's --remote.
# - Without --api-key, a request a web page of another site could make (a
#   Host that is a DNS name, not ours: DNS rebinding; an Origin of another
#   site: a cross-site POST) is refused 403; loopback clients are served.
# - --api-key "" is refused; /metrics needs the key; the key may come from
#   --api-key-file or DELTAFIN_API_KEY (out of `ps`); listening beyond
#   loopback without a key is warned about.
# - A JSON \u0000 in a prompt is a 400, not a prompt cut short; n beyond
#   --parallel + --queue is a 400, not a 429 forever; a model id of 2000
#   bytes is listed whole and then found.
# - SIGTERM while answering: a stream ends with an error event and [DONE],
#   a request waiting for its whole answer gets a 503 saying why.
set -u
B=${1:-build}
D="$B/deltafin"
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
T=$(mktemp -d /tmp/deltafin-serve-guard-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
command -v jq >/dev/null || { echo "SKIPPED: jq not found"; exit 0; }
SLOW=1; [ -n "${DELTAFIN_SANITIZED:-}" ] && SLOW=4
code() { curl -s -o "$T/body" -w '%{http_code}' "$@"; }

# ---- the key ----
e=$("$D" serve -m "$S" --api-key "" 2>&1; echo "rc=$?")
check "--api-key '': refused (exit 2)" contains "$e" "rc=2"
printf 'from-a-file\nsecond line\n' > "$T/key"; chmod 600 "$T/key"
serve_start "$T/k.log" -m "$S" -c 128 --api-key-file "$T/key"
U="http://127.0.0.1:$PORT"
check "--api-key-file: the first line is the key" test "$(code -H 'Authorization: Bearer from-a-file' "$U/v1/models")" = 200
check "... a wrong key: 401" test "$(code -H 'Authorization: Bearer from-a-fil' "$U/v1/models")" = 401
check "... an empty bearer: 401" test "$(code -H 'Authorization: Bearer ' "$U/v1/models")" = 401
check "/metrics without the key: 401" test "$(code "$U/metrics")" = 401
check "/metrics with the key: 200" test "$(code -H 'Authorization: Bearer from-a-file' "$U/metrics")" = 200
check "/health stays open" test "$(code "$U/health")" = 200
check "the key is not in ps" lacks "$(ps -o args= -p "$SPID")" "from-a-file"
kill "$SPID"; wait "$SPID" 2>/dev/null
DELTAFIN_API_KEY=from-env serve_start "$T/e.log" -m "$S" -c 128
U="http://127.0.0.1:$PORT"
check "DELTAFIN_API_KEY: the key" test "$(code -H 'Authorization: Bearer from-env' "$U/v1/models")" = 200
check "... and nothing without it" test "$(code "$U/v1/models")" = 401
kill "$SPID"; wait "$SPID" 2>/dev/null
serve_start "$T/w.log" -m "$S" -c 128 --host 0.0.0.0
check "--host 0.0.0.0 without a key: warned" grep -q "without --api-key" "$T/w.log"
kill "$SPID"; wait "$SPID" 2>/dev/null

# ---- pages of other sites (no key: loopback's default) ----
long=$(printf 'm%.0s' $(seq 1 2000))
serve_start "$T/a.log" -m "$S" -c 128 --parallel 2 --queue 3 --alias "$long"
U="http://127.0.0.1:$PORT"
J=(-H "Content-Type: application/json")
check "a loopback client: served" test "$(code "$U/v1/models")" = 200
check "Host: localhost: served" test "$(code -H "Host: localhost:$PORT" "$U/v1/models")" = 200
check "Host: a DNS name not ours (rebinding): 403" test "$(code -H "Host: evil.example:$PORT" "$U/v1/models")" = 403
check "... with a reason" grep -q "rebinding" "$T/body"
check "Origin of another site, a text/plain POST: 403" \
    test "$(code -H 'Origin: http://evil.example' -H 'Content-Type: text/plain' "$U/v1/completions" -d '{"prompt":"hi"}')" = 403
check "Origin: null (a sandboxed page): 403" test "$(code -H 'Origin: null' "$U/v1/models")" = 403
check "Origin of our own loopback page: served" test "$(code -H "Origin: http://127.0.0.1:$PORT" "$U/v1/models")" = 200

# ---- requests ----
check "a prompt with \\u0000: 400" test "$(code "${J[@]}" "$U/v1/completions" -d '{"prompt":"a\u0000b","max_tokens":2}')" = 400
check "... saying so" grep -q 'NUL' "$T/body"
check "an escaped backslash before u0000 is text: 200" \
    test "$(code "${J[@]}" "$U/v1/completions" -d '{"prompt":"a\\u0000b","max_tokens":2}')" = 200
check "a message with \\u0000: 400" \
    test "$(code "${J[@]}" "$U/v1/chat/completions" -d '{"messages":[{"role":"user","content":"x\u0000y"}]}')" = 400
check "n above --parallel + --queue: 400" test "$(code "${J[@]}" "$U/v1/completions" -d '{"prompt":"hi","n":6,"max_tokens":2}')" = 400
check "... naming n" test "$(jq -r .error.param "$T/body")" = n
id=$(curl -s "$U/v1/models" | jq -r '.data[0].id')
check "a 2000-byte model id: listed whole" test "${#id}" = 2000
check "... and found by that id" \
    test "$(code "${J[@]}" "$U/v1/completions" -d "{\"model\":\"$id\",\"prompt\":\"hi\",\"max_tokens\":2}")" = 200
kill "$SPID"; wait "$SPID" 2>/dev/null

# ---- SIGTERM while answering: streams end with an error event and [DONE], others get a 503 ----
serve_start "$T/t.log" -m "$S" -c 2048 --parallel 2
U="http://127.0.0.1:$PORT"
curl -sN "${J[@]}" "$U/v1/completions" -d '{"prompt":"Once","max_tokens":1900,"ignore_eos":true,"stream":true}' \
    > "$T/stream" 2>/dev/null &
C1=$!
curl -s -w '\n%{http_code}' "${J[@]}" "$U/v1/completions" -d '{"prompt":"Once","max_tokens":1900,"ignore_eos":true}' \
    > "$T/plain" 2>/dev/null &
C2=$!
for _ in $(seq 1 $((50 * SLOW))); do grep -q '^data: {' "$T/stream" 2>/dev/null && break; sleep 0.1; done
kill -TERM "$SPID"; wait "$SPID"; src=$?
wait "$C1" "$C2"
check "SIGTERM: the server exits 0" test "$src" = 0
check "... a stream's last event is [DONE]" test "$(grep '^data:' "$T/stream" | tail -n1)" = "data: [DONE]"
check "... after an error event saying why" grep -q '"error".*stopping' "$T/stream"
check "... a non-streaming client gets 503" test "$(tail -n1 "$T/plain")" = 503
check "... saying why" grep -q 'server_stopping' "$T/plain"

# ---- /v1/jobs: the operator's limits and remote ----
serve_start "$T/j.log" -m "$S" -c 128 -t 1 --mem 256M --jobs-db "$T/j.db" --remote http://127.0.0.1:9/v1
U="http://127.0.0.1:$PORT"
check "a job naming a remote: 400" \
    test "$(code "${J[@]}" "$U/v1/jobs" -d '{"prompt":"hi","remote":"http://169.254.169.254/latest"}')" = 400
check "... naming remote" test "$(jq -r .error.param "$T/body")" = remote
check "mem above the server's --mem: 400" test "$(code "${J[@]}" "$U/v1/jobs" -d '{"prompt":"hi","mem":"64G"}')" = 400
check "n_ctx above the server's context: 400" test "$(code "${J[@]}" "$U/v1/jobs" -d '{"prompt":"hi","n_ctx":100000}')" = 400
check "threads above the server's: 400" test "$(code "${J[@]}" "$U/v1/jobs" -d '{"prompt":"hi","threads":64}')" = 400
check "a job within them: 200" test "$(code "${J[@]}" "$U/v1/jobs" -d '{"prompt":"hi","mem":"128M","max_tokens":2}')" = 200
check "... it carries the operator's remote" test "$(jq -r .remote "$T/body")" = http://127.0.0.1:9/v1
check "... and a budget within the server's" test "$(jq -r .mem "$T/body")" = $((128 << 20))
finish
