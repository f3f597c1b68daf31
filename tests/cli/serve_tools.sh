#!/usr/bin/env bash
# serve_tools.sh - tool calls over HTTP (issue 35 item 2), for every family's published template.
#   tests/cli/serve_tools.sh BUILD_DIR
# For each template (Qwen3, Qwen3.5, Qwen3-Coder, GLM-4.6, MiniMax M2, Kimi K2 and K3, DeepSeek R1, V3.1, V3.2
# and V4, gpt-oss, Llama 3.1, Mistral Small 3.2 and Nemo, and one with no tool format: the generic form), a
# server on stories260K with that template, and tests/server/tools.mjs with the real `openai` client and `ajv`:
# tool_choice "required" and a named function give well-formed calls, streamed and not. Then the request
# errors, each a 400 naming its field, and the generic form's instructions in the prompt.
set -u
B=${1:-build}
D="$B/deltafin"
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
serve_test_setup tools
TD=tests/data/jinja/templates
npm_pkg .cache/npm-openai openai@6 openai && npm_pkg .cache/npm-ajv ajv@8 ajv || { echo "SKIPPED: npm packages"; finish; exit; }
printf '%s' '{% for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}<|im_start|>assistant
' > "$T/plain.jinja"
for fam in Qwen-Qwen3-0.6B:qwen3 Qwen3.5-4B:qwen3.5 Qwen3-Coder:qwen3-coder GLM-4.6:glm MiniMax-M2:minimax \
    Kimi-K2-Instruct:kimi-k2 Kimi-K3:kimi-k3 llama-cpp-deepseek-r1:deepseek-r1 deepseek-ai-DeepSeek-V3.1:deepseek-v3.1 \
    deepseek-ai-DeepSeek-V3.2:deepseek-v3.2 deepseek-ai-DeepSeek-V4:deepseek-v4 openai-gpt-oss-120b:gpt-oss \
    meta-llama-Llama-3.1-8B-Instruct:llama3.1 Mistral-Small-3.2-24B-Instruct-2506:mistral-3.2 \
    mistralai-Mistral-Nemo-Instruct-2407:mistral-nemo plain:generic; do
    file=${fam%%:*} name=${fam##*:}
    tf="$TD/$file.jinja"
    [ "$file" = plain ] && tf="$T/plain.jinja"
    serve_start "$T/$name.log" -m "$S" -c 4096 --chat-template-file "$tf"
    U="http://127.0.0.1:$PORT"
    timeout $((300 * SLOW)) node "$(dirname "${BASH_SOURCE[0]}")/../server/tools.mjs" .cache/npm-openai .cache/npm-ajv \
        "$U/v1" "$name" > "$T/out.txt" 2>&1
    rc=$?
    grep -c '^ok' "$T/out.txt" | xargs printf "    $name: %s checks passed\n"
    grep '^FAIL' "$T/out.txt" | head -n 5
    check "$name: every tool-call check with the openai client and ajv" test "$rc" -eq 0
    if [ "$name" = generic ]; then # the generic form is told to the model: the tools and how to call them
        r=$(post /apply-template '{"messages":[{"role":"user","content":"Hi"}],"tools":[{"type":"function","function":{"name":"zap"}}]}')
        body "$r" | jq -r .prompt > "$T/prompt.txt"
        check "generic: the prompt tells the model the tools and the call's JSON form" \
            bash -c "grep -q '\"zap\"' '$T/prompt.txt' && grep -q '{\"tool_calls\": \[' '$T/prompt.txt'"
        TOOLS='[{"type":"function","function":{"name":"zap","parameters":{"type":"object"}}}]'
        M='"messages":[{"role":"user","content":"Hi"}]'
        r=$(post /v1/chat/completions "{$M,\"tools\":$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}")
        check "a named function that is not a tool: 400 naming tool_choice" \
            test "$(code "$r")/$(body "$r" | jq -r .error.param)" = 400/tool_choice
        r=$(post /v1/chat/completions "{$M,\"tool_choice\":\"required\"}")
        check "required without tools: 400 naming tool_choice" test "$(code "$r")/$(body "$r" | jq -r .error.param)" = 400/tool_choice
        r=$(post /v1/chat/completions "{$M,\"tools\":$TOOLS,\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}")
        check "required with response_format: 400 (both constrain the output)" test "$(code "$r")" = 400
        r=$(post /v1/chat/completions "{$M,\"tools\":[{\"type\":\"function\"}]}")
        check "a tool without a name: 400 naming tools" test "$(code "$r")/$(body "$r" | jq -r .error.param)" = 400/tools
        r=$(post /v1/chat/completions "{$M,\"tools\":$TOOLS,\"tool_choice\":\"sometimes\"}")
        check "an unknown tool_choice: 400" test "$(code "$r")" = 400
        # tool_choice auto reads the calls the model writes: a schema of the generic form makes this model write one
        CALLS='{"type":"object","properties":{"tool_calls":{"type":"array","minItems":1,"maxItems":1,"items":{"type":"object","properties":{"name":{"const":"zap"},"arguments":{"type":"object","properties":{"n":{"type":"integer","minimum":1,"maximum":9}},"required":["n"],"additionalProperties":false}},"required":["name","arguments"],"additionalProperties":false}}},"required":["tool_calls"],"additionalProperties":false}'
        r=$(post /v1/chat/completions "{$M,\"tools\":$TOOLS,\"seed\":2,\"max_tokens\":200,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"c\",\"schema\":$CALLS}}}")
        check "auto: the call the model wrote is read: tool_calls, finish tool_calls ($(body "$r" | jq -c .choices[0].message.tool_calls))" \
            test "$(body "$r" | jq -r '.choices[0] | [.finish_reason, .message.tool_calls[0].function.name, (.message.tool_calls[0].function.arguments | fromjson | .n | type)] | join(",")')" = "tool_calls,zap,number"
        r=$(post /api/chat "{\"model\":\"m\",$M,\"tools\":$TOOLS,\"stream\":false,\"format\":$CALLS,\"options\":{\"seed\":2,\"num_predict\":200}}")
        check "Ollama's /api/chat: message.tool_calls with the arguments as an object ($(body "$r" | jq -c .message.tool_calls))" \
            test "$(body "$r" | jq -r '.message | [.tool_calls[0].function.name, (.tool_calls[0].function.arguments.n | type), .content] | join(",")')" = "zap,number,"
        s=$(curl -s "$U/api/chat" -d "{\"model\":\"m\",$M,\"tools\":$TOOLS,\"format\":$CALLS,\"options\":{\"seed\":2,\"num_predict\":200}}")
        check "... streamed: no call text among the pieces, the calls in the last line" \
            test "$(jq -rj '.message.content' <<< "$s")|$(tail -n1 <<< "$s" | jq -r '.message.tool_calls[0].function.name')" = "|zap"
        r=$(post /v1/completions "{\"prompt\":\"x\",\"tools\":$TOOLS}")
        check "tools on /v1/completions: 400 naming tools" test "$(code "$r")/$(body "$r" | jq -r .error.param)" = 400/tools
    fi
    kill "$SPID"; wait "$SPID" 2> /dev/null
done

# A family whose markers are control tokens in its files (Kimi K2's): the grammar lets the model emit them where
# it spells their text (biased here towards them: a trained model prefers them), they are kept in the text, and the
# call is read; a grammar of a plain request never emits a control token, even one that spells its text.
MK='<|tool_calls_section_begin|>,<|tool_calls_section_end|>,<|tool_call_begin|>,<|tool_call_argument_begin|>,<|tool_call_end|>'
"$B/mkmodel" -o "$T/k2.gguf" --preset tiny --chat-template kimi-k2 --special-tokens "$MK" 2> /dev/null || { echo "mkmodel failed"; exit 1; }
serve_start "$T/k2.log" -m "$T/k2.gguf" -c 4096
U="http://127.0.0.1:$PORT"
BIAS='{"320":30,"321":30,"322":30,"323":30,"324":30}'
W='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":6}},"required":["city"],"additionalProperties":false}}}]'
r=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],\"max_tokens\":300,\"seed\":1,\"logprobs\":true,\"parallel_tool_calls\":false,\"tools\":$W,\"tool_choice\":\"required\",\"logit_bias\":$BIAS}")
check "Kimi K2 with its markers as control tokens: 5 emitted, kept, the call read ($(body "$r" | jq -c '[.choices[0].finish_reason, .choices[0].message.tool_calls[0].id]'))" \
    test "$(body "$r" | jq -r '[.choices[0].finish_reason, .choices[0].message.tool_calls[0].function.name, ([.choices[0].logprobs.content[] | select(.bytes == [])] | length)] | map(tostring) | join(",")')" = "tool_calls,get_weather,5"
r=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":60,\"seed\":1,\"logprobs\":true,\"grammar\":\"root ::= \\\"<|tool_call_begin|>\\\" [a-z]{2}\",\"logit_bias\":$BIAS}")
ct=$(body "$r" | jq -r .choices[0].message.content)
check "a plain grammar spelling a control token's text: the text ($ct), never the token" \
    test "$(grep -cxE '<[|]tool_call_begin[|]>[a-z]{2}' <<< "$ct")/$(body "$r" | jq '[.choices[0].logprobs.content[] | select(.bytes == [])] | length')" = 1/0
kill "$SPID"; wait "$SPID" 2> /dev/null
finish
