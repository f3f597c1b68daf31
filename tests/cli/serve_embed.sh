#!/usr/bin/env bash
# serve_embed.sh - /v1/embeddings and /slots (issue 40 item 5): the vectors are llama.cpp's.
#   tests/cli/serve_embed.sh BUILD_DIR
# For stories260K (a real llama) and a random qwen3moe (mkmodel --random-config), each pooling (--pooling mean,
# last, cls) gives, for a prompt of token ids, the vector llama.cpp gives for the same ids with the same pooling
# type, L2-normalised as llama-server does (llama_ref embed, ref/llama_ref.c): largest difference under 1e-5, with
# the KV cache in f32 on both sides. A prompt longer than a step's batch (several chunks: 700 tokens, n_batch 512)
# too. Then: a string is tokenized as the prompt of a completion is (its vector is that of its ids); a list gives
# one vector per input in order (equal inputs, equal vectors); the official openai client's embeddings.create
# (base64 by default, and floats) decodes to the same vectors; an embedding asked while another slot generates
# is the same, and /slots shows that slot busy generating; what cannot be done is a 400 naming the field
# (dimensions other than the model's, a field OpenAI does not know, an empty string, an id outside the
# vocabulary, a prompt longer than the context) and an architecture whose last hidden state is not one row
# (deepseek4) a 501, never a vector of something else.
set -u
B=${1:-build}
D="$B/deltafin"
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
serve_test_setup embed
REF="$(dirname "${BASH_SOURCE[0]}")/../../scripts/llama-ref.sh"
# largest |a - b| of two JSON arrays of numbers
maxdiff() { jq -n --argjson a "$1" --argjson b "$2" '[range($a | length)] | map(($a[.] - $b[.]) | fabs) | max'; }
# llama.cpp's embedding of the ids "$2" with pooling $3 in model $1, as a JSON array
ref_embed() {
    "$REF" -m "$1" embed --tokens "$2" --pooling "$3" --out "$T/ref.f32" > /dev/null 2> "$T/ref.err" || { cat "$T/ref.err"; return 1; }
    od -An -v -tf4 -w4 "$T/ref.f32" | jq -s -c .
}

"$B/mkmodel" -o "$T/moe.gguf" --preset qwen3moe-tiny --random-config 7 --type f32 2> /dev/null ||
    { echo "mkmodel failed"; exit 1; }
ids_short=$(seq 1 23 | awk '{ printf "%s%d", (NR > 1 ? " " : ""), (NR * 37) % 250 + 3 }')
ids_long=$(seq 1 700 | awk '{ printf "%s%d", (NR > 1 ? " " : ""), (NR * 7919) % 250 + 3 }')
have_ref=0
"$REF" -m "$S" embed --tokens "1 2" --pooling mean > /dev/null 2>&1 && have_ref=1
[ $have_ref = 1 ] || echo "SKIPPED (the llama.cpp comparison): scripts/llama-ref.sh could not run llama_ref embed"
for model in "$S" "$T/moe.gguf"; do
    for pool in mean last cls; do
        serve_start "$T/s.log" -m "$model" -c 1024 --kv f32 --pooling "$pool" --parallel 1
        U="http://127.0.0.1:$PORT"
        for ids in "$ids_short" "$ids_long"; do
            n=$(wc -w <<< "$ids")
            got=$(body "$(post /v1/embeddings "{\"input\":[${ids// /,}]}")" | jq -c '.data[0].embedding')
            if [ $have_ref = 1 ]; then
                want=$(ref_embed "$model" "$ids" "$pool")
                d=$(maxdiff "$got" "$want" 2> /dev/null)
                check "$(basename "$model") --pooling $pool, $n tokens: llama.cpp's vector (largest difference ${d:-none})" \
                    awk -v d="${d:-1}" 'BEGIN { exit !(d < 1e-5) }'
            else
                check "$(basename "$model") --pooling $pool, $n tokens: a unit vector" \
                    test "$(jq '(map(. * .) | add | sqrt - 1) | fabs < 1e-4' <<< "$got")" = true
            fi
        done
        kill "$SPID"; wait "$SPID" 2> /dev/null
    done
done

serve_start "$T/s2.log" -m "$S" -c 2048 --parallel 2
U="http://127.0.0.1:$PORT"
P="Once upon a time, there was a girl"
ids=$(body "$(post /tokenize "{\"content\":\"$P\",\"add_special\":true}")" | jq -c .tokens)
a=$(body "$(post /v1/embeddings "{\"input\":\"$P\"}")" | jq -c '.data[0].embedding')
b=$(body "$(post /v1/embeddings "{\"input\":$ids}")" | jq -c '.data[0].embedding')
check "a string: the vector of its prompt's ids (BOS and all)" test -n "$a" -a "$a" = "$b"
r=$(body "$(post /v1/embeddings "{\"input\":[\"$P\",\"The dog ran\",\"$P\"],\"model\":\"text-embedding-3-small\"}")")
check "a list: one vector per input, in order, equal inputs equal" \
    test "$(jq -c '[.data[].index], (.data[0].embedding == .data[2].embedding), (.data[0].embedding != .data[1].embedding), (.usage.prompt_tokens > 0)' <<< "$r" | tr '\n' ' ')" = "[0,1,2] true true true "
check "... the first is the one asked alone" test "$(jq -c '.data[0].embedding' <<< "$r")" = "$a"
if npm_pkg .cache/npm-openai openai@6 openai; then
    node --input-type=module - .cache/npm-openai "$U/v1" "$a" "$P" <<'EOF'
import { createRequire } from 'node:module';
import path from 'node:path';
const [dir, baseURL, want, text] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(dir), 'node_modules', 'x.js'));
const OpenAI = require('openai');
const client = new OpenAI({ baseURL, apiKey: 'none' });
const w = JSON.parse(want);
const close = v => v.length === w.length && v.every((x, i) => Math.abs(x - w[i]) < 1e-6);
let fails = 0;
const check = (what, ok) => { console.log(`${ok ? 'ok  ' : 'FAIL'} ${what}`); if (!ok) fails++; };
const b64 = await client.embeddings.create({ model: 'any', input: text });
check('openai embeddings.create (base64, the client\'s default): the same vector', close(b64.data[0].embedding));
const fl = await client.embeddings.create({ model: 'any', input: [text, text], encoding_format: 'float' });
check('... as floats, two inputs', fl.data.length === 2 && close(fl.data[1].embedding) && fl.usage.prompt_tokens > 0);
process.exit(fails);
EOF
    check "the openai client: every check" test $? -eq 0
fi
# an embedding while the other slot generates (2,000 tokens: long enough, ~0.5 s here, to be seen busy); /slots shows it
curl -s "$U/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Once","max_tokens":2000,"ignore_eos":true,"stream":true}' > /dev/null &
GEN=$!
busy=""
for _ in $(seq 1 $((100 * SLOW))); do
    busy=$(curl -s "$U/slots" | jq -c '[.[] | select(.is_processing and .task == "generation" and .next_token.n_decoded > 0)] | length')
    [ "$busy" = 1 ] && break
    sleep 0.05
done
check "/slots: a slot busy generating, with its progress" test "$busy" = 1
c=$(body "$(post /v1/embeddings "{\"input\":\"$P\"}")" | jq -c '.data[0].embedding')
check "an embedding while the other slot generates: the same vector" test "$c" = "$a"
wait "$GEN"
check "/slots: both idle at the end, the context named" \
    test "$(curl -s "$U/slots" | jq -c '[.[] | .is_processing, .n_ctx]')" = "[false,2048,false,2048]"
r=$(post /v1/embeddings "{\"input\":\"$P\",\"dimensions\":32}")
check "dimensions other than the model's: 400 naming it" test "$(code "$r")/$(body "$r" | jq -r .error.param)" = 400/dimensions
r=$(post /v1/embeddings "{\"input\":\"$P\",\"pooling\":\"max\"}")
check "a field OpenAI does not know: 400 naming it" test "$(code "$r")/$(body "$r" | jq -r .error.param)" = 400/pooling
r=$(post /v1/embeddings '{"input":["a",""]}')
check "an empty string: 400" test "$(code "$r")/$(body "$r" | jq -r .error.param)" = 400/input
r=$(post /v1/embeddings '{"input":[1,2,999999]}')
check "an id outside the vocabulary: 400" test "$(code "$r")/$(body "$r" | jq -r .error.param)" = 400/input
r=$(post /v1/embeddings "{\"input\":[$(seq 1 2100 | awk '{ printf "%s5", (NR > 1 ? "," : "") }')]}")
check "a prompt longer than the context: 400" test "$(code "$r")/$(body "$r" | jq -r .error.param)" = 400/input
kill "$SPID"; wait "$SPID" 2> /dev/null

"$B/mkmodel" -o "$T/ds4.gguf" --preset deepseek4-tiny 2> /dev/null || { echo "mkmodel failed"; exit 1; }
serve_start "$T/s3.log" -m "$T/ds4.gguf" -c 128 --parallel 1
U="http://127.0.0.1:$PORT"
r=$(post /v1/embeddings '{"input":[1,2,3]}')
check "deepseek4 (its last hidden state is several streams): 501 saying so" \
    test "$(code "$r")" = 501 -a -n "$(body "$r" | jq -r .error.message | grep -i 'embedding failed')"
r=$(post /v1/completions '{"prompt":[1,2,3],"max_tokens":3}')
check "... and the slot generates afterwards" test "$(body "$r" | jq .usage.completion_tokens)" = 3
kill "$SPID"; wait "$SPID" 2> /dev/null
finish
