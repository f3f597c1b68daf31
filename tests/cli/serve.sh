#!/usr/bin/env bash
# serve.sh - `deltafin serve`: the OpenAI-compatible server, with curl and the
# official `openai` npm client (tests/server/client.mjs).
#   tests/cli/serve.sh BUILD_DIR
# The model: the tiny real stories260K (real text) with a ChatML template file
# (it carries none); a random mkmodel model where a slow, long generation is
# needed (a client that disconnects, a full queue). Servers listen on port 0
# (a free loopback port, read back from the log).
set -u
B=${1:-build}
D="$B/deltafin"
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
TMPL=tests/data/jinja/templates/Qwen-Qwen2.5-7B-Instruct.jinja
T=$(mktemp -d /tmp/deltafin-serve-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
SLOW=1; [ -n "${DELTAFIN_SANITIZED:-}" ] && SLOW=4

start() { serve_start "$@"; }
KEY=sekrit
# --strict-model: a request naming another model is a 404 (the default serves it: tests/cli/serve_extras.sh)
start "$T/a.log" -m "$S" --chat-template-file "$TMPL" --parallel 4 -c 256 --api-key "$KEY" --strict-model
U="http://127.0.0.1:$PORT"
H=(-H "Authorization: Bearer $KEY" -H "Content-Type: application/json")
post() { curl -s -w '\n%{http_code}' "${H[@]}" "$U$1" -d "$2"; }          # body, then the status on the last line
status() { tail -n1 <<< "$1"; }
body() { sed '$d' <<< "$1"; }

r=$(curl -s "$U/health");                       check "/health answers without a key" test "$r" = '{"status":"ok"}'
r=$(curl -s -w '\n%{http_code}' "$U/v1/models")
check "no API key: 401" test "$(status "$r")" = 401
check "401 body: OpenAI-shaped, code invalid_api_key" test "$(body "$r" | jq -r .error.code)" = invalid_api_key
r=$(curl -s -w '\n%{http_code}' -H "Authorization: Bearer nope" "$U/v1/models"); check "wrong API key: 401" test "$(status "$r")" = 401
MODEL=$(curl -s "${H[@]}" "$U/v1/models" | jq -r '.data[0].id'); check "/v1/models: the model's id" test "$MODEL" = stories260K.gguf

# greedy output is `deltafin run`'s, from text and from the same prompt tokens
P="Once upon a time"
run=$("$D" run -m "$S" -p "$P" -n 24 --temp 0 -c 256 2>/dev/null)
want=${run#"$P"}
r=$(post /v1/completions "{\"model\":\"$MODEL\",\"prompt\":\"$P\",\"max_tokens\":24,\"temperature\":0}")
check "completion: 200" test "$(status "$r")" = 200
got=$(body "$r" | jq -r '.choices[0].text')
check "greedy completion = deltafin run's text" test "$got" = "$want"
toks=$("$D" tokenize -m "$S" -p "$P" | paste -sd, -)
r=$(post /v1/completions "{\"prompt\":[$toks],\"max_tokens\":24,\"temperature\":0}")
check "prompt as token ids: the same text" test "$(body "$r" | jq -r '.choices[0].text')" = "$want"
check "usage: prompt tokens counted" test "$(body "$r" | jq -r '.usage.prompt_tokens')" = "$(tr ',' '\n' <<< "$toks" | wc -l)"
# streaming: the events join to the same text and end with [DONE]
s=$(curl -sN "${H[@]}" "$U/v1/completions" -d "{\"prompt\":\"$P\",\"max_tokens\":24,\"temperature\":0,\"stream\":true}")
joined=$(grep '^data: {' <<< "$s" | sed 's/^data: //' | jq -j '.choices[0].text')
check "stream: the chunks join to the greedy text" test "$joined" = "$want"
check "stream: ends with data: [DONE]" test "$(grep '^data:' <<< "$s" | tail -n1)" = "data: [DONE]"
# stop strings: the text ends before the stop, finish_reason stop
stopw=$(awk '{print $3}' <<< "$want")
r=$(post /v1/completions "{\"prompt\":\"$P\",\"max_tokens\":24,\"temperature\":0,\"stop\":[\"zzz\",\"$stopw\"]}")
check "stop: text cut before '$stopw'" test "$(body "$r" | jq -r '.choices[0].text')" = "${want%%"$stopw"*}"
check "stop: finish_reason stop" test "$(body "$r" | jq -r '.choices[0].finish_reason')" = stop
s=$(curl -sN "${H[@]}" "$U/v1/completions" -d "{\"prompt\":\"$P\",\"max_tokens\":24,\"temperature\":0,\"stream\":true,\"stop\":\"$stopw\"}")
check "stop while streaming: the same cut" test "$(grep '^data: {' <<< "$s" | sed 's/^data: //' | jq -j '.choices[0].text')" = "${want%%"$stopw"*}"
# seeds
q="{\"prompt\":\"$P\",\"max_tokens\":32,\"temperature\":1.2,\"seed\":42}"
a=$(body "$(post /v1/completions "$q")" | jq -r '.choices[0].text'); b=$(body "$(post /v1/completions "$q")" | jq -r '.choices[0].text')
check "seed 42 twice: the same text" test "$a" = "$b"
c=$(body "$(post /v1/completions "${q/42/43}")" | jq -r '.choices[0].text')
check "seed 43: another text" test "$a" != "$c"
# chat, with the template file
r=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":16,"temperature":0}')
check "chat: 200 with an assistant message" test "$(body "$r" | jq -r '.choices[0].message.role')" = assistant
r=$(post /v1/completions "{\"prompt\":\"$P\",\"max_tokens\":5,\"temperature\":0,\"logprobs\":3}")
check "completion logprobs: 5 tokens, 3 alternatives each" test "$(body "$r" | jq '[.choices[0].logprobs.top_logprobs[] | length] | join(",")')" = '"3,3,3,3,3"'

# bad requests: 4xx with OpenAI error bodies, the server keeps running
bad() { # DESCRIPTION URL BODY STATUS PARAM_OR_CODE
    local r; r=$(post "$2" "$3")
    check "$1: $4" test "$(status "$r")" = "$4"
    check "$1: error body names '$5'" test "$(body "$r" | jq -r '.error | "\(.param) \(.code) \(.type)"' | grep -c -- "$5")" = 1
}
bad "malformed JSON" /v1/chat/completions '{"messages": [' 400 invalid_json
bad "not an object" /v1/completions '[1,2]' 400 invalid_json
bad "temperature as a string" /v1/completions '{"prompt":"hi","temperature":"hot"}' 400 temperature
bad "max_tokens negative" /v1/completions '{"prompt":"hi","max_tokens":-3}' 400 max_tokens
bad "n too large" /v1/completions '{"prompt":"hi","n":1000}' 400 "^n "
bad "stop of numbers" /v1/completions '{"prompt":"hi","stop":[1]}' 400 stop
bad "messages missing" /v1/chat/completions '{"model":"stories260K.gguf"}' 400 messages
bad "messages not an array" /v1/chat/completions '{"messages":"hi"}' 400 messages
bad "message without role" /v1/chat/completions '{"messages":[{"content":"hi"}]}' 400 messages
bad "token id out of range" /v1/completions '{"prompt":[1,999999]}' 400 prompt
bad "unknown model" /v1/chat/completions '{"model":"gpt-9","messages":[{"role":"user","content":"hi"}]}' 404 model_not_found
long=$(printf 'word %.0s' $(seq 1 400))
bad "oversized prompt" /v1/completions "{\"prompt\":\"$long\"}" 400 context_length_exceeded
r=$(curl -s -w '\n%{http_code}' "${H[@]}" "$U/v1/nothing"); check "unknown URL: 404" test "$(status "$r")" = 404
r=$(curl -s -w '\n%{http_code}' "${H[@]}" "$U/v1/completions"); check "GET on a POST route: 405" test "$(status "$r")" = 405
head -c 17000000 /dev/zero | tr '\0' ' ' > "$T/big"
r=$(curl -s -w '\n%{http_code}' "${H[@]}" "$U/v1/completions" --data-binary @"$T/big"); check "a 17 MB body: 413" test "$(status "$r")" = 413
check "still healthy after the bad requests" test "$(curl -s "$U/health")" = '{"status":"ok"}'

# the official openai client: chat, streaming, completions, stop, seed, n, logprobs, errors; then 100 concurrent clients
OPENAI=.cache/npm-openai
if npm_pkg "$OPENAI" openai@6 openai; then
    node tests/server/client.mjs "$OPENAI" "$U/v1" "$KEY" basic; check "openai client: basic" test $? -eq 0
    timeout $((120 * SLOW)) node tests/server/client.mjs "$OPENAI" "$U/v1" "$KEY" load 100
    check "openai client: 100 concurrent clients, each gets its own answer, in bounded time" test $? -eq 0
fi
m=$(curl -s -H "Authorization: Bearer $KEY" "$U/metrics")
for k in tokens_per_second queue_depth active_sequences expert_cache_hit_rate disk_read_bytes_per_second memory_rss_bytes; do
    check "/metrics has deltafin_$k" grep -q "^deltafin_$k " <<< "$m"
done
check "/metrics: tokens counted" test "$(awk '/^deltafin_tokens_generated_total/{print $2}' <<< "$m")" -gt 100
kill -INT "${PIDS[0]}"; wait "${PIDS[0]}"; rc=$?
check "SIGINT stops the server cleanly (exit 0)" test "$rc" -eq 0

# a slow random model: a disconnecting client cancels its generation; a full queue says 429
"$B/mkmodel" -o "$T/slow.gguf" --preset small --type q8_0 --ctx 4096 2>/dev/null || { echo "mkmodel failed"; exit 1; }
start "$T/b.log" -m "$T/slow.gguf" --parallel 1 --queue 0 -c 4096
U="http://127.0.0.1:$PORT"; H=(-H "Content-Type: application/json")
timeout 1 curl -sN "${H[@]}" "$U/v1/completions" -d '{"prompt":"hi","max_tokens":4000,"ignore_eos":true,"stream":true}' > /dev/null
sleep 0.5
r=$(post /v1/completions '{"prompt":"hi","max_tokens":3}')
check "after the streaming client went away, its slot is free (200)" test "$(status "$r")" = 200
g1=$(curl -s -H "Authorization: Bearer $KEY" "$U/metrics" | awk '/^deltafin_tokens_generated_total/{print $2}')
check "the cancelled generation stopped early ($g1 of 4000 tokens)" test "$g1" -lt 3000
timeout 1 curl -s "${H[@]}" "$U/v1/completions" -d '{"prompt":"hi","max_tokens":4000,"ignore_eos":true}' > /dev/null
sleep 0.5
check "a non-streaming client that went away is cancelled too" \
    test "$(curl -s -H "Authorization: Bearer $KEY" "$U/metrics" | awk '/^deltafin_active_sequences /{print $2}')" = 0
curl -s "${H[@]}" "$U/v1/completions" -d '{"prompt":"hi","max_tokens":4000,"ignore_eos":true}' > /dev/null &
CURL=$!
sleep 0.5
r=$(post /v1/completions '{"prompt":"hi","max_tokens":3}')
check "one slot busy, no queue: 429" test "$(status "$r")" = 429
check "429 body: code queue_full" test "$(body "$r" | jq -r .error.code)" = queue_full
kill "$CURL" 2>/dev/null; wait "$CURL" 2>/dev/null

# batching: a MoE model (one batched pass per step) gives each of 8 concurrent
# greedy sequences exactly what it gets alone
"$B/mkmodel" -o "$T/moe.gguf" --preset qwen3moe-tiny --type q8_0 2>/dev/null || { echo "mkmodel failed"; exit 1; }
start "$T/c.log" -m "$T/moe.gguf" --parallel 8 -c 256
CURLS=()
U="http://127.0.0.1:$PORT"
for i in $(seq 1 8); do
    curl -s "${H[@]}" "$U/v1/completions" -d "{\"prompt\":\"tale $i of $((i * 7))\",\"max_tokens\":120,\"temperature\":0,\"ignore_eos\":true}" | jq -r '.choices[0].text' > "$T/alone.$i"
done
for i in $(seq 1 8); do
    curl -s "${H[@]}" "$U/v1/completions" -d "{\"prompt\":\"tale $i of $((i * 7))\",\"max_tokens\":120,\"temperature\":0,\"ignore_eos\":true}" | jq -r '.choices[0].text' > "$T/together.$i" &
    CURLS+=($!)
done
wait "${CURLS[@]}"
same=0; for i in $(seq 1 8); do cmp -s "$T/alone.$i" "$T/together.$i" && same=$((same + 1)); done
check "MoE, 8 concurrent greedy sequences: each as alone ($same/8)" test "$same" = 8
steps=$(curl -s -H "Authorization: Bearer $KEY" "$U/metrics" | awk '/^deltafin_sequences_per_step /{print $2}')
check "steps ran several sequences at once (average $steps per step)" awk -v s="$steps" 'BEGIN{exit !(s > 1.0)}'
m=$(curl -s -H "Authorization: Bearer $KEY" "$U/metrics")
mv() { awk -v k="deltafin_$1" '$1 == k {print $2}' <<< "$m"; }
check "/metrics: expert union per MoE layer ($(mv expert_union_per_moe_layer)) between 4 (qwen3moe-tiny's experts a token) and its 16" \
    awk -v u="$(mv expert_union_per_moe_layer)" 'BEGIN{exit !(u >= 4 && u <= 16)}'
check "/metrics: expert union per pass ($(mv expert_union_per_pass)) and expert bytes per generated token ($(mv expert_bytes_per_generated_token))" \
    awk -v u="$(mv expert_union_per_pass)" -v b="$(mv expert_bytes_per_generated_token)" 'BEGIN{exit !(u > 0 && b > 0)}'
check "/metrics: passes counted ($(mv forward_passes_total) for $(mv forward_pass_tokens_total) tokens)" \
    awk -v p="$(mv forward_passes_total)" -v r="$(mv forward_pass_tokens_total)" 'BEGIN{exit !(p > 0 && r > p)}'
finish
