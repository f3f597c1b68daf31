#!/usr/bin/env bash
# serve_extras.sh - what `deltafin serve` answers beyond OpenAI's chat and completions (issue 40, items 2 and 5):
# llama-server's /tokenize, /detokenize, /apply-template and /props, the context length in /v1/models, any model
# name served by the one model (--strict-model: 404), CORS (--cors), Ollama's API (tests/server/ollama.mjs with
# the real `ollama` client), Anthropic's Messages API (tests/server/anthropic.mjs with the real
# `@anthropic-ai/sdk`) and a log line per request.
#   tests/cli/serve_extras.sh BUILD_DIR
# Checked: /tokenize gives `deltafin tokenize`'s ids (with pieces that spell the text back); /detokenize gives the
# text back and refuses an id outside the vocabulary (400 naming it); /apply-template renders --chat-template
# chatml byte for byte; /props and /v1/models name the context; a request for "gpt-4o-mini" is answered by the
# loaded model, and refused under --strict-model; without --cors a preflight is refused (403) and a page of
# another site too; with --cors ORIGIN the preflight is answered before any key (204, the origin, the methods,
# the headers asked for), answers to that origin carry it (also a 401), another origin gets neither; --cors '*'
# allows any; a malformed --cors is a usage error. A line on stderr per request (text, json, none).
set -u
B=${1:-build}
D="$B/deltafin"
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
serve_test_setup extras

serve_start "$T/s1.log" -m "$S" -c 1024 --chat-template chatml --parallel 2
U="http://127.0.0.1:$PORT"

P="Once upon a time, there was a girl"
r=$(post /tokenize "{\"content\":\"$P\"}")
want=$("$D" tokenize -m "$S" -p "$P" --no-bos 2> /dev/null | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
got=$(body "$r" | jq -r '.tokens | map(tostring) | join(" ")')
check "/tokenize: deltafin tokenize's ids ($got)" test -n "$got" -a "$got" = "$want"
r=$(post /tokenize "{\"content\":\"$P\",\"with_pieces\":true,\"add_special\":true}")
check "... with pieces that spell the text back (SentencePiece's leading space; BOS with add_special)" \
    test "$(body "$r" | jq -r '[.tokens[1:][].piece] | join("")')" = " $P" -a "$(body "$r" | jq '.tokens[0].id')" = 1
ids=$(body "$(post /tokenize "{\"content\":\"$P\"}")" | jq -c .tokens)
r=$(post /detokenize "{\"tokens\":$ids}")
check "/detokenize: the text back (as llama-server: the pieces joined)" test "$(body "$r" | jq -r .content)" = " $P"
r=$(post /detokenize '{"tokens":[1, 99999999]}')
check "/detokenize of an id outside the vocabulary: 400 naming it" \
    test "$(code "$r")" = 400 -a "$(body "$r" | jq -r .error.param)" = tokens
r=$(post /apply-template '{"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]}')
check "/apply-template: --chat-template chatml, byte for byte" test "$(body "$r" | jq -r .prompt)" = \
    "$(printf '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant')"
r=$(curl -s "$U/props")
check "/props: the context, the slots, the template, the build" \
    test "$(jq -r '[.n_ctx, .default_generation_settings.n_ctx, .total_slots, (.chat_template | test("im_start")), (.build_info | startswith("deltafin"))] | map(tostring) | join(",")' <<< "$r")" = "1024,1024,2,true,true"
check "/v1/models: the context length" test "$(curl -s "$U/v1/models" | jq '.data[0].context_length, .data[0].meta.n_ctx_train' | tr '\n' ,)" = "1024,$("$D" info -m "$S" | awk '$1 == "context_length" { print $2; exit }'),"
r=$(post /v1/chat/completions '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hi"}],"max_tokens":4}')
check "a request naming another model is answered by the loaded one" test "$(code "$r")" = 200
r=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hello"}],"max_tokens":6}')
check "llama-server's timings: predicted_n the completion's tokens, prompt_n + cache_n the prompt's, rates > 0" \
    test "$(body "$r" | jq '(.timings.predicted_n == .usage.completion_tokens) and
        (.timings.prompt_n + .timings.cache_n == .usage.prompt_tokens) and .timings.predicted_per_second > 0 and
        .timings.prompt_ms >= 0')" = true
s=$(curl -s "$U/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Once","max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}' | grep '"timings"')
check "... and in a stream's usage chunk" test "$(sed 's/^data: //' <<< "$s" | jq '.timings.predicted_n')" = 5
r=$(post /tokenize '{"content":5}')
check "/tokenize of a number: 400 naming content" test "$(code "$r")/$(body "$r" | jq -r .error.param)" = 400/content

# Ollama's API (server/ollama.c) with the official `ollama` npm client: list, ps, show, chat (greedy: the OpenAI
# answer; streamed pieces join to it), generate, load, format refused
g=$(body "$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":24,"temperature":0}')" |
    jq -r '.choices[0].message.content') # the greedy answer both clients must give
if npm_pkg .cache/npm-ollama ollama@0.6 ollama; then
    node "$(dirname "${BASH_SOURCE[0]}")/../server/ollama.mjs" .cache/npm-ollama "$U" "$g"; check "the ollama client: every check" test $? -eq 0
    r=$(post /api/chat '{"model":"m","messages":[{"role":"user","content":"Hi"}],"options":{"num_predict":"many"}}')
    check "an Ollama option of the wrong type: 400 in Ollama's shape" \
        test "$(code "$r")/$(body "$r" | jq -r .error)" = "400/options.num_predict must be a number"
    r=$(post /api/chat '{"model":"m","messages":[{"role":"user","content":"a\u0000b"}]}')
    check "an Ollama body goes through the same limits (a NUL in a string: 400)" \
        test "$(code "$r")/$(body "$r" | jq -r .error | grep -c NUL)" = 400/1
fi

# Anthropic's Messages API (server/anthropic.c) with the official `@anthropic-ai/sdk` client: create (greedy: the
# OpenAI answer), streamed events, countTokens, stop_sequences, tool history, refusals
if npm_pkg .cache/npm-anthropic @anthropic-ai/sdk@0.137 @anthropic-ai/sdk; then
    node "$(dirname "${BASH_SOURCE[0]}")/../server/anthropic.mjs" .cache/npm-anthropic "$U" "$g"
    check "the Anthropic client: every check" test $? -eq 0
fi
r=$(post /v1/messages '{"max_tokens":4,"messages":[{"role":"user","content":"Hi"}],"stop_sequences":[1]}')
check "an Anthropic request goes through the same checks, answered in Anthropic's error shape" \
    test "$(code "$r")/$(body "$r" | jq -r '.type + " " + .error.type')" = "400/error invalid_request_error"

# every field is implemented or refused (issue 35 item 4): unknown ones and unsupported values are a 400 naming
# them, OpenAI's hints are accepted; logit_bias, presence/frequency penalties and echo work
r=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"frobnicate":1}')
check "an unknown field: 400 naming it" test "$(code "$r")/$(body "$r" | jq -r .error.param)" = 400/frobnicate
for f in '"best_of":3' '"suffix":"x"' '"typical_p":0.5' '"mirostat":2' '"tool_choice":"required"' '"modalities":["audio"]'; do
    r=$(post /v1/completions "{\"prompt\":\"Hi\",\"max_tokens\":2,$f}")
    check "$f: 400 naming it, never ignored" test "$(code "$r")/$(body "$r" | jq -r .error.param)" = "400/$(cut -d'"' -f2 <<< "$f")"
done
r=$(post /v1/completions '{"prompt":"Hi","max_tokens":2,"user":"u1","metadata":{"a":"b"},"store":false,"cache_prompt":true}')
check "OpenAI's hints (user, metadata, store) and llama-server's cache_prompt are accepted" test "$(code "$r")" = 200
tok=$(body "$(post /tokenize '{"content":" the"}')" | jq '.tokens[-1]')
r=$(post /v1/completions "{\"prompt\":\"Once\",\"max_tokens\":5,\"temperature\":0,\"logit_bias\":{\"$tok\":100}}")
check "logit_bias +100: that token every time" test "$(body "$r" | jq -r '.choices[0].text')" = " the the the the the"
g0=$(body "$(post /v1/completions '{"prompt":"Once upon","max_tokens":24,"temperature":0}')" | jq -r '.choices[0].text')
r=$(post /v1/completions "{\"prompt\":\"Once upon\",\"max_tokens\":24,\"temperature\":0,\"logit_bias\":{\"$(body "$(post /tokenize '{"content":" a"}')" | jq '.tokens[-1]')\":-100}}")
check "logit_bias -100: the token never comes" test -z "$(body "$r" | jq -r '.choices[0].text' | grep -w a)"
g40=$(body "$(post /v1/completions '{"prompt":"Once upon","max_tokens":40,"temperature":0}')" | jq -r '.choices[0].text')
r=$(post /v1/completions '{"prompt":"Once upon","max_tokens":40,"temperature":0,"frequency_penalty":2,"presence_penalty":2}')
check "presence and frequency penalties change a greedy answer" test "$(body "$r" | jq -r '.choices[0].text')" != "$g40"
r=$(post /v1/completions '{"prompt":"Once upon","max_tokens":24,"temperature":0,"echo":true}')
check "echo: the prompt, then the answer" test "$(body "$r" | jq -r '.choices[0].text')" = "Once upon$g0"
s=$(curl -s "$U/v1/completions" -H 'Content-Type: application/json' -d '{"prompt":"Once upon","max_tokens":24,"temperature":0,"echo":true,"stream":true}' |
    grep '^data: {' | sed 's/^data: //' | jq -rj '.choices[0].text')
check "... streamed too" test "$s" = "Once upon$g0"
r=$(post /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":2,"echo":true}')
check "echo on a chat: 400" test "$(code "$r")/$(body "$r" | jq -r .error.param)" = 400/echo

# a log line per request (issue 40 item 7)
check "the log has a line per request, with its tokens and speed" \
    grep -q '^request: 127.0.0.1 POST /v1/chat/completions 200: prompt [0-9]* tokens ([0-9]* cached), 4 generated in .* tokens/s$' "$T/s1.log"
check "... and one for a request that generates nothing" grep -q '^request: 127.0.0.1 POST /tokenize 200 in ' "$T/s1.log"

# CORS: none without --cors
h=$(curl -s -o /dev/null -w '%{http_code}' -X OPTIONS "$U/v1/chat/completions" -H 'Origin: http://localhost:3000' \
    -H 'Access-Control-Request-Method: POST')
check "no --cors: a preflight is refused (403)" test "$h" = 403
kill "$SPID"; wait "$SPID" 2> /dev/null

serve_start "$T/s2.log" -m "$S" -c 256 --chat-template chatml --cors http://localhost:3000,https://app.example --api-key k1 --strict-model
U="http://127.0.0.1:$PORT"
curl -s -D "$T/h1" -o /dev/null -X OPTIONS "$U/v1/chat/completions" -H 'Origin: http://localhost:3000' \
    -H 'Access-Control-Request-Method: POST' -H 'Access-Control-Request-Headers: authorization,content-type'
check "--cors: the preflight is answered before any key (204)" grep -q '^HTTP/1.1 204' "$T/h1"
check "... naming the origin" grep -qi '^Access-Control-Allow-Origin: http://localhost:3000' "$T/h1"
check "... the methods" grep -qi '^Access-Control-Allow-Methods: .*POST' "$T/h1"
check "... and the headers asked for" grep -qi '^Access-Control-Allow-Headers: authorization,content-type' "$T/h1"
curl -s -D "$T/h2" -o "$T/b2" "$U/v1/chat/completions" -H 'Origin: https://app.example' -H 'Authorization: Bearer k1' \
    -H 'Content-Type: application/json' -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4}'
check "... an answer to an allowed origin carries it" grep -qi '^Access-Control-Allow-Origin: https://app.example' "$T/h2"
check "... and is the answer (200)" grep -q '^HTTP/1.1 200' "$T/h2"
curl -s -D "$T/h3" -o /dev/null "$U/v1/models" -H 'Origin: http://localhost:3000'
check "... a 401 to an allowed origin carries it too (the page can read why)" \
    test -n "$(grep '^HTTP/1.1 401' "$T/h3")" -a -n "$(grep -i '^Access-Control-Allow-Origin: http://localhost:3000' "$T/h3")"
curl -s -D "$T/h4" -o /dev/null -X OPTIONS "$U/v1/models" -H 'Origin: http://evil.example' -H 'Access-Control-Request-Method: GET'
check "another origin: its preflight refused, without the header" \
    test -n "$(grep '^HTTP/1.1 403' "$T/h4")" -a -z "$(grep -i '^Access-Control-Allow-Origin' "$T/h4")"
r=$(curl -s -w '\n%{http_code}' "$U/v1/chat/completions" -H 'Authorization: Bearer k1' -H 'Content-Type: application/json' \
    -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hi"}],"max_tokens":4}')
check "--strict-model: a request naming another model is a 404" \
    test "$(code "$r")/$(body "$r" | jq -r .error.code)" = 404/model_not_found
r=$(curl -s -w '\n%{http_code}' "$U/v1/messages/count_tokens" -H 'x-api-key: k1' -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Hi"}]}')
check "Anthropic's x-api-key header is a key too" test "$(code "$r")/$(body "$r" | jq '.input_tokens > 0')" = 200/true
r=$(curl -s -w '\n%{http_code}' "$U/v1/messages" -H 'x-api-key: k2' -H 'Content-Type: application/json' \
    -d '{"max_tokens":4,"messages":[{"role":"user","content":"Hi"}]}')
check "... a wrong one: 401 in Anthropic's shape" test "$(code "$r")/$(body "$r" | jq -r .error.type)" = 401/authentication_error
kill "$SPID"; wait "$SPID" 2> /dev/null

serve_start "$T/s3.log" -m "$S" -c 256 --cors '*' --log-format json
U="http://127.0.0.1:$PORT"
curl -s -D "$T/h5" -o /dev/null "$U/v1/models" -H 'Origin: http://anything.example:8000'
check "--cors '*': any origin is answered, with its name" \
    test -n "$(grep '^HTTP/1.1 200' "$T/h5")" -a -n "$(grep -i '^Access-Control-Allow-Origin: http://anything.example:8000' "$T/h5")"
curl -s "$U/v1/completions" -d '{"prompt":"Once","max_tokens":5,"stream":true}' > /dev/null
kill "$SPID"; wait "$SPID" 2> /dev/null
j=$(grep '^{' "$T/s3.log" | grep '"path":"/v1/completions"')
check "--log-format json: a JSON object per request (a stream's tokens counted at its end)" \
    test "$(jq -r '[.method, .status, .generated_tokens, (.tokens_per_s > 0)] | map(tostring) | join(",")' <<< "$j" 2> /dev/null)" = "POST,200,5,true"
serve_start "$T/s4.log" -m "$S" -c 256 --log-format none
curl -s "http://127.0.0.1:$PORT/health" > /dev/null
kill "$SPID"; wait "$SPID" 2> /dev/null
check "--log-format none: no request lines" test -z "$(grep '^request:' "$T/s4.log")"
"$D" serve -m "$S" --cors 'localhost:3000/x' --port 0 > /dev/null 2> "$T/err"; rc=$?
check "a malformed --cors: exit 2 saying what it takes" test "$rc" -eq 2 -a -n "$(grep 'origins like http://localhost:3000' "$T/err")"
finish
