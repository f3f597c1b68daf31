#!/usr/bin/env bash
# chat.sh - `deltafin chat` driven through a pipe (plain lines, no terminal).
#   tests/cli/chat.sh BUILD_DIR
# A model without a template is refused with a message naming
# --chat-template-file; with a template file the conversation carries over
# (the second turn reuses the first's KV cache), /save and /load round-trip,
# /clear forgets, greedy answers match the server's, and Ctrl-C (SIGINT)
# stops an answer, not the program.
set -u
B=${1:-build}
D="$B/deltafin"
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
TMPL=tests/data/jinja/templates/Qwen-Qwen2.5-7B-Instruct.jinja
T=$(mktemp -d /tmp/deltafin-chat-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }

e=$(echo hi | "$D" chat -m "$S" 2>&1 >/dev/null); rc=$?
check "no template: exit 1" test "$rc" -eq 1
check "no template: the message names --chat-template-file" contains "$e" "--chat-template-file"
e=$("$D" chat -m "$S" --frobnicate 2>&1); check "unknown option: exit 2 naming it" contains "$e" "unknown option '--frobnicate'"
e=$("$D" chat -m "$S" --mem 12X 2>&1); rc=$?
check "a bad --mem: exit 2" test "$rc" -eq 2
check "... naming the value" contains "$e" "got '12X'"
e=$(echo hi | "$D" chat -m "$S" --chat-template-file "$T/none.jinja" 2>&1); check "missing template file: named" contains "$e" "none.jinja"

C=(chat -m "$S" --chat-template-file "$TMPL" --temp 0 -n 24 -c 512)
printf 'Tell me a story.\nAnd then?\n/save %s\n' "$T/conv.json" | "$D" "${C[@]}" > "$T/out" 2> "$T/err"
check "two turns: exit 0" test $? -eq 0
r2=$(sed -n 's/.*\[turn 2: \([0-9]*\) prompt tokens, \([0-9]*\) reused.*/\2 \1/p' "$T/err")
check "turn 2 reuses the first turn's KV cache ($r2: reused, total)" test "${r2%% *}" -gt 20
check "/save: four messages" test "$(jq '.messages | length' "$T/conv.json")" = 4
check "/save: roles in order" test "$(jq -r '[.messages[].role] | join(",")' "$T/conv.json")" = "user,assistant,user,assistant"
check "/save: the answers are what stdout showed" test "$(jq -r '.messages[1].content, .messages[3].content' "$T/conv.json")" = "$(cat "$T/out")"
# /load continues the saved conversation as if it had never stopped
printf '/load %s\nAnd then?\n' "$T/conv.json" | "$D" "${C[@]}" > "$T/out2" 2> "$T/err2"
printf 'Tell me a story.\nAnd then?\nAnd then?\n/save %s\n' "$T/conv3.json" | "$D" "${C[@]}" > /dev/null 2>&1
check "/load: the next answer is the uninterrupted conversation's" test "$(cat "$T/out2")" = "$(jq -r '.messages[5].content' "$T/conv3.json")"
printf 'Tell me a story.\n/save %s\n/clear\nTell me a story.\n/save %s\n' "$T/c1.json" "$T/c2.json" | "$D" "${C[@]}" > /dev/null 2>&1
check "/clear: the conversation starts over (the same question, the same answer)" cmp -s "$T/c1.json" "$T/c2.json"
# gpt-oss's template: the answer is read as channels (what the conversation keeps is the final text); a model
# that writes none shows and keeps its text as it came
printf 'Tell me a story.\n/save %s\n' "$T/oss.json" | "$D" chat -m "$S" --temp 0 -n 24 -c 1024 \
    --chat-template-file tests/data/jinja/templates/openai-gpt-oss-120b.jinja > "$T/oss.out" 2> /dev/null
check "gpt-oss's template, a model without channels: the text shown is the text kept ($(head -c 40 "$T/oss.out"))" \
    test -s "$T/oss.out" -a "$(jq -r '.messages[1].content' "$T/oss.json")" = "$(cat "$T/oss.out")"
# Kimi K3's template opens its think section: the answer (forced by --grammar) shows the reasoning, then the
# response's text, which is all the conversation keeps (the section markers and wrappers are neither)
G3='root ::= [a-z ]{3,12} "<|close|>think<|sep|><|open|>response<|sep|>" [a-z]{2,6} "<|close|>response<|sep|><|close|>message<|sep|>"'
printf 'Hi\n/save %s\n' "$T/k3.json" | "$D" chat -m "$S" --temp 0 -n 100 -c 2048 --grammar "$G3" \
    --chat-template-file tests/data/jinja/templates/Kimi-K3.jinja > "$T/k3.out" 2> /dev/null
k3=$(jq -r '.messages[1].content' "$T/k3.json")
check "Kimi K3: the reasoning, then the response's text, which the conversation keeps ($(tr '\n' '|' < "$T/k3.out"))" \
    test "$(sed -n 2p "$T/k3.out")" = "$k3" -a "$(wc -l < "$T/k3.out")" -eq 2
check "... the reasoning as the grammar wrote it, the response's text without wrappers" \
    test "$(grep -cE '^[a-z ]{3,12}$' "$T/k3.out")" -ge 1 -a "$(grep -cE '^[a-z]{2,6}$' <<< "$k3")" = 1
e=$(printf 'Hi\n' | "$D" "${C[@]}" --grammar 'root ::= undefined' 2>&1 > /dev/null; echo "rc=$?")
check "--grammar that does not parse: said, exit 1 before any turn" contains "$e" "rc=1"
check "... naming the grammar" contains "$e" "the grammar"
printf '/load %s\n' "$T/none.json" | "$D" "${C[@]}" > /dev/null 2> "$T/err5"
check "/load of a missing file: said, not fatal" grep -q "none.json" "$T/err5"
check "/save onto the model is refused" contains "$(printf '/save %s\n' "$S" | "$D" "${C[@]}" 2>&1)" "is the model"

# greedy: the chat's first answer is the server's chat completion
"$D" serve -m "$S" --chat-template-file "$TMPL" --port 0 -c 512 > "$T/srv.log" 2>&1 &
SP=$!
for _ in $(seq 1 100); do PORT=$(sed -n 's/.*http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$T/srv.log"); [ -n "$PORT" ] && break; sleep 0.1; done
a=$(curl -s "http://127.0.0.1:$PORT/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":24,"temperature":0}' | jq -r '.choices[0].message.content')
kill "$SP"; wait "$SP" 2>/dev/null
check "greedy: chat's first answer = the server's" test "$a" = "$(jq -r '.messages[1].content' "$T/conv.json")"

# Ctrl-C stops the answer; the next line is still read
"$B/mkmodel" -o "$T/slow.gguf" --preset small --type q8_0 --ctx 4096 2>/dev/null || { echo "mkmodel failed"; exit 1; }
mkfifo "$T/in"
"$D" chat -m "$T/slow.gguf" --chat-template-file "$TMPL" --ignore-eos -n 3500 -c 4096 < "$T/in" > "$T/out6" 2> "$T/err6" &
CP=$!
exec 3> "$T/in"
echo "hello" >&3
sleep 1.5
kill -INT "$CP"
sleep 0.3
echo "/exit" >&3
exec 3>&-
wait "$CP"; rc=$?
check "SIGINT during an answer: the chat goes on and exits 0" test "$rc" -eq 0
check "SIGINT: the answer is marked interrupted" grep -q "\[interrupted\]" "$T/out6"
g=$(sed -n 's/.*\[turn 1: .* \([0-9]*\) generated, .*/\1/p' "$T/err6")
check "SIGINT: the answer stopped early ($g of 3500 tokens)" test "${g:-3500}" -lt 3500

# --chat-template NAME, --chat-template-kwargs, the template checked before the weights load (issue 37)
QT="$(dirname "${BASH_SOURCE[0]}")/../data/jinja/templates/Qwen-Qwen3-0.6B.jinja"
toks() { sed -n 's/.*\[turn 1: \([0-9]*\) prompt tokens.*/\1/p' <<< "$1"; }
a=$(echo hi | "$D" chat -m "$S" --chat-template-file "$QT" -n 2 2>&1)
b=$(echo hi | "$D" chat -m "$S" --chat-template-file "$QT" -n 2 --chat-template-kwargs '{"enable_thinking":false}' 2>&1)
check "--chat-template-kwargs reaches the template (enable_thinking false adds an empty think: $(toks "$a") -> $(toks "$b") tokens)" \
    test -n "$(toks "$a")" -a "$(toks "$b")" -gt "$(toks "$a")"
check "--chat-template chatml answers" grep -q "\[turn 1:" <<< "$(echo hi | "$D" chat -m "$S" --chat-template chatml -n 2 2>&1)"
echo hi | "$D" chat -m "$S" --chat-template nonesuch > /dev/null 2> "$T/err7"; rc=$?
check "--chat-template of an unknown name: exit 2 naming the built-in ones" test "$rc" -eq 2 -a -n "$(grep 'chatml, llama3' "$T/err7")"
echo hi | "$D" chat -m "$S" -sys "Be brief." \
    --chat-template-file "$(dirname "${BASH_SOURCE[0]}")/../data/jinja/templates/google-gemma-2-2b-it.jinja" > /dev/null 2> "$T/err8"
rc=$?
check "-sys with a template without a system role: exit 1 at once, saying so" \
    test "$rc" -eq 1 -a -n "$(grep 'cannot render a conversation with a system message.*System role not supported' "$T/err8")"
check "... before any turn" test -z "$(grep 'turn 1' "$T/err8")"
printf '/set temp 0\n/set seed 7\n/set bogus 1\n/info\n/nope\n' | "$D" chat -m "$S" --chat-template chatml > /dev/null 2> "$T/err9"
rc=$?
check "piped commands: /set said, /info the settings, unknown ones named; exit 1 for the failed ones" \
    test "$rc" -eq 1 -a -n "$(grep '\[temp = 0\]' "$T/err9")" -a -n "$(grep 'sampling: temp 0, .*seed 7' "$T/err9")" \
    -a -n "$(grep 'unknown command /nope' "$T/err9")" -a -n "$(grep '/set bogus 1: unknown setting' "$T/err9")"
finish
