#!/usr/bin/env bash
# serve_grammar.sh - constrained output over HTTP (issue 35 item 1): response_format, json_schema, grammar,
# Ollama's format.
#   tests/cli/serve_grammar.sh BUILD_DIR
# tests/server/structured.mjs with the real `openai` client and `ajv`: a schema of nested objects, bounded arrays,
# enums, const, anyOf, $ref, an integer range and a pattern gives valid JSON on 50 seeds streamed and 50 not
# (stories260K at temperature 1: the grammar, not the model, makes it valid); json_object, a GBNF grammar; a
# schema or grammar that cannot be honoured is a 400 naming the field. Then Ollama's `format` (a schema, and
# "json") through the same grammar, and the same schema for a model with a large vocabulary of its own tokens
# (qwen3moe-tiny, random weights: a tokenizer whose tokens are not bytes). Reasoning: <think> sections go to
# reasoning_content, streamed and not, unless reasoning_format is "none", also when the template opens one.
set -u
B=${1:-build}
D="$B/deltafin"
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
serve_test_setup grammar

serve_start "$T/s1.log" -m "$S" -c 2048 --chat-template chatml --parallel 2
U="http://127.0.0.1:$PORT"
if npm_pkg .cache/npm-openai openai@6 openai && npm_pkg .cache/npm-ajv ajv@8 ajv; then
    timeout $((600 * SLOW)) node "$(dirname "${BASH_SOURCE[0]}")/../server/structured.mjs" .cache/npm-openai .cache/npm-ajv "$U/v1"
    check "structured output with the openai client and ajv: every check" test $? -eq 0
fi
# reasoning (issue 35 item 3): a <think> section goes to reasoning_content, streamed too (the grammar makes the
# model write one); reasoning_format "none" keeps it in the content; a template that opens the section for the
# model (DeepSeek R1's way) is read from inside it
G='root ::= \"<think>\" [a-z ]{3,12} \"</think>\\n\\n\" [a-z]{2,6}'
r=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"grammar\":\"$G\",\"max_tokens\":100,\"seed\":9}")
rc=$(body "$r" | jq -r '.choices[0].message.reasoning_content'); ct=$(body "$r" | jq -r '.choices[0].message.content')
check "<think>...</think>: reasoning_content '$rc', content '$ct'" \
    test -n "$(grep -xE '[a-z ]{3,12}' <<< "$rc")" -a -n "$(grep -xE '[a-z]{2,6}' <<< "$ct")"
s=$(curl -s "$U/v1/chat/completions" -H 'Content-Type: application/json' \
    -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"grammar\":\"$G\",\"max_tokens\":100,\"seed\":9,\"stream\":true}" |
    grep '^data: {' | sed 's/^data: //')
check "... streamed: the reasoning deltas and the content deltas join to the same two texts" \
    test "$(jq -rj '.choices[0].delta.reasoning_content // empty' <<< "$s")|$(jq -rj '.choices[0].delta.content // empty' <<< "$s")" = "$rc|$ct"
r=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"grammar\":\"$G\",\"max_tokens\":100,\"seed\":9,\"reasoning_format\":\"none\"}")
check "reasoning_format none: the section stays in the content" \
    test "$(body "$r" | jq -r '.choices[0].message | (.content | startswith("<think>")) and (.reasoning_content == null)')" = true
kill "$SPID"; wait "$SPID" 2> /dev/null
printf '%s' '{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}<|im_start|>assistant
<think>
' > "$T/open.jinja"
serve_start "$T/s3.log" -m "$S" -c 512 --chat-template-file "$T/open.jinja"
U="http://127.0.0.1:$PORT"
G2='root ::= [a-z ]{3,12} \"</think>\" [a-z]{2,6}'
r=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"grammar\":\"$G2\",\"max_tokens\":100,\"seed\":2}")
check "a template that opens <think>: the answer up to </think> is reasoning ($(body "$r" | jq -c '.choices[0].message | [.reasoning_content, .content]'))" \
    test "$(body "$r" | jq -r '.choices[0].message | (.reasoning_content | test("^[a-z ]{3,12}$")) and (.content | test("^[a-z]{2,6}$"))')" = true
kill "$SPID"; wait "$SPID" 2> /dev/null
# Kimi K3's template opens <|open|>think<|sep|> for the model: reasoning up to its close, the response's wrappers
# are no content (streamed the same)
serve_start "$T/s4.log" -m "$S" -c 2048 --chat-template-file tests/data/jinja/templates/Kimi-K3.jinja
U="http://127.0.0.1:$PORT"
G3='root ::= [a-z ]{3,12} \"<|close|>think<|sep|><|open|>response<|sep|>\" [a-z]{2,6} \"<|close|>response<|sep|><|close|>message<|sep|>\"'
r=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"grammar\":\"$G3\",\"max_tokens\":100,\"seed\":9}")
k3=$(body "$r" | jq -c '.choices[0].message | [.reasoning_content, .content]')
check "Kimi K3: its think section is reasoning, its response's text the content ($k3)" \
    test "$(jq -r '(.[0] | test("^[a-z ]{3,12}$")) and (.[1] | test("^[a-z]{2,6}$"))' <<< "$k3")" = true
s=$(curl -s "$U/v1/chat/completions" -d "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"grammar\":\"$G3\",\"max_tokens\":100,\"seed\":9,\"stream\":true}" |
    grep '^data: {' | sed 's/^data: //')
check "... streamed: the same two texts" \
    test "$(jq -rj '.choices[0].delta.reasoning_content // empty' <<< "$s")|$(jq -rj '.choices[0].delta.content // empty' <<< "$s")" = \
    "$(jq -r '.[0] + "|" + .[1]' <<< "$k3")"
kill "$SPID"; wait "$SPID" 2> /dev/null
serve_start "$T/s1.log" -m "$S" -c 2048 --chat-template chatml --parallel 2
U="http://127.0.0.1:$PORT"

SCHEMA='{"type":"object","properties":{"answer":{"enum":["yes","no"]},"n":{"type":"integer","minimum":1,"maximum":9}},"required":["answer","n"],"additionalProperties":false}'
r=$(post /api/chat "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"Yes?\"}],\"stream\":false,\"format\":$SCHEMA,\"options\":{\"seed\":3,\"num_predict\":300}}")
t=$(body "$r" | jq -r .message.content)
check "Ollama's format (a schema): JSON of that schema ($t)" \
    test "$(jq -c '[(.answer | IN("yes","no")), (.n | . >= 1 and . <= 9 and floor == .), (keys | length)]' <<< "$t" 2> /dev/null)" = '[true,true,2]'
r=$(post /api/generate '{"model":"m","prompt":"List","stream":false,"raw":true,"format":"json","options":{"seed":4,"num_predict":400}}')
check "Ollama's format \"json\": a JSON object, or the cut-off start of one (done_reason $(body "$r" | jq -r .done_reason))" \
    test "$(body "$r" | jq -r '.response | startswith("{")')" = true
kill "$SPID"; wait "$SPID" 2> /dev/null

"$B/mkmodel" -o "$T/moe.gguf" --preset qwen3moe-tiny --type q8_0 2> /dev/null || { echo "mkmodel failed"; exit 1; }
serve_start "$T/s2.log" -m "$T/moe.gguf" -c 1024
U="http://127.0.0.1:$PORT"
ok=0
for seed in 1 2 3 4 5; do
    r=$(post /v1/completions "{\"prompt\":\"x\",\"max_tokens\":600,\"seed\":$seed,\"temperature\":1,\"json_schema\":$SCHEMA}")
    t=$(body "$r" | jq -r '.choices[0].text')
    [ "$(jq -c '[(.answer | IN("yes","no")), (.n | . >= 1 and . <= 9), (keys | length)]' <<< "$t" 2> /dev/null)" = '[true,true,2]' ] &&
        ok=$((ok + 1)) || echo "seed $seed: $t"
done
check "a BPE vocabulary of random weights: valid JSON on 5 seeds ($ok/5)" test "$ok" = 5
kill "$SPID"; wait "$SPID" 2> /dev/null
finish
