#!/usr/bin/env bash
# models.sh - the models a user already has (issue 36 item 3, without download):
# `deltafin models` finds a model laid out as each of the four stores lays
# them out, and -m takes their names (src/api/stores.c).
#   tests/cli/models.sh BUILD_DIR
# Layouts made here under a temporary HOME: the Hugging Face hub cache
# (models--ORG--REPO/snapshots/REV/FILE, a link into blobs/; two quants and a
# split model), llama.cpp's cache (ORG_REPO_FILE.gguf), LM Studio
# (~/.lmstudio/models/PUB/REPO/FILE) and Ollama (a manifest whose model
# layer names blobs/sha256-HEX; a projector layer and a manifest that names
# a missing blob beside it). Checked: each is listed with its size, its
# architecture and "yes"; a text file named .gguf and a FIFO are not listed
# (nor opened: the FIFO would block); run -m NAME gives the text of run -m
# PATH; ollama:NAME means NAME:latest; hf:ORG/REPO:QUANT picks that quant and
# two matches are an error naming them; an unknown name exits 1 saying so;
# serve and submit take the names too.
set -u
B=${1:-build}
D="$(cd "$(dirname "$B")" && pwd)/$(basename "$B")/deltafin"
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
T=$(mktemp -d /tmp/deltafin-models-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
H="$T/home"
# Hugging Face: two quants of one repository, a split model in another
hub="$H/.cache/huggingface/hub"
mkdir -p "$hub/models--acme--tiny-GGUF/blobs" "$hub/models--acme--tiny-GGUF/snapshots/abc123"
cp "$S" "$hub/models--acme--tiny-GGUF/blobs/1111"
cp "$S" "$hub/models--acme--tiny-GGUF/blobs/2222"
ln -s ../../blobs/1111 "$hub/models--acme--tiny-GGUF/snapshots/abc123/tiny-Q4_K_M.gguf"
ln -s ../../blobs/2222 "$hub/models--acme--tiny-GGUF/snapshots/abc123/tiny-Q8_0.gguf"
mkdir -p "$hub/models--acme--big-GGUF/snapshots/r1/Q2_K"
cp "$S" "$hub/models--acme--big-GGUF/snapshots/r1/Q2_K/big-Q2_K-00001-of-00002.gguf"
cp "$S" "$hub/models--acme--big-GGUF/snapshots/r1/Q2_K/big-Q2_K-00002-of-00002.gguf"
# llama.cpp's cache, with a text file named .gguf and a FIFO beside it
mkdir -p "$H/.cache/llama.cpp"
cp "$S" "$H/.cache/llama.cpp/acme_tiny-GGUF_tiny-Q4_K_M.gguf"
echo "not a model" > "$H/.cache/llama.cpp/notes.gguf"
mkfifo "$H/.cache/llama.cpp/pipe.gguf"
# LM Studio
mkdir -p "$H/.lmstudio/models/acme/tiny-GGUF"
cp "$S" "$H/.lmstudio/models/acme/tiny-GGUF/tiny-Q4_K_M.gguf"
# Ollama: a model layer, a projector layer; a second tag whose blob is missing
o="$H/.ollama/models"
hex=$(sha256sum "$S" | cut -d' ' -f1)
mkdir -p "$o/blobs" "$o/manifests/registry.ollama.ai/library/tiny"
cp "$S" "$o/blobs/sha256-$hex"
cat > "$o/manifests/registry.ollama.ai/library/tiny/latest" << JSON
{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",
 "config":{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"sha256:$(printf '%064d' 1)","size":10},
 "layers":[{"mediaType":"application/vnd.ollama.image.projector","digest":"sha256:$(printf '%064d' 2)","size":5},
           {"mediaType":"application/vnd.ollama.image.model","digest":"sha256:$hex","size":$(stat -c %s "$S")},
           {"mediaType":"application/vnd.ollama.image.template","digest":"sha256:$(printf '%064d' 3)","size":7}]}
JSON
sed "s/$hex/$(printf '%064d' 9)/" "$o/manifests/registry.ollama.ai/library/tiny/latest" > \
    "$o/manifests/registry.ollama.ai/library/tiny/broken"

list=$(HOME="$H" timeout 20 "$D" models 2>&1); rc=$?
check "deltafin models: exit 0 (no FIFO blocks it)" test "$rc" -eq 0
for name in hf:acme/tiny-GGUF:tiny-Q4_K_M.gguf hf:acme/tiny-GGUF:tiny-Q8_0.gguf \
    llama.cpp:acme_tiny-GGUF_tiny-Q4_K_M.gguf lmstudio:acme/tiny-GGUF/tiny-Q4_K_M.gguf ollama:tiny:latest; do
    check "listed: $name, llama, runs" bash -c "grep -qE '^$name +[0-9.]+ [KMG]?i?B +llama +yes\$' <<< \"\$1\"" _ "$list"
done
check "a split model: listed once, by its first part" \
    test "$(grep -c 'hf:acme/big-GGUF:Q2_K/big-Q2_K-0000' <<< "$list")" = 1
one=$(HOME="$H" "$D" models --json | grep '"hf:acme/tiny-GGUF:tiny-Q8_0.gguf"' | sed 's/.*"bytes":\([0-9]*\).*/\1/')
two=$(HOME="$H" "$D" models --json | grep 'big-Q2_K-00001' | sed 's/.*"bytes":\([0-9]*\).*/\1/')
check "... with the size of both parts ($two = 2 x $one)" test "$two" = $((2 * one))
check "a text file named .gguf is not listed" bash -c "! grep -q notes <<< \"\$1\"" _ "$list"
check "a FIFO named .gguf is not listed" bash -c "! grep -q pipe <<< \"\$1\"" _ "$list"
check "an Ollama tag whose blob is missing is not listed" bash -c "! grep -q 'tiny:broken' <<< \"\$1\"" _ "$list"
check "--json: one object a line, every model" test "$(HOME="$H" "$D" models --json | grep -c '"runs":true')" = 6
mkdir -p "$H/.lmstudio/models/acme/odd-$(printf '\377')-name"
cp "$S" "$H/.lmstudio/models/acme/odd-$(printf '\377')-name/x.gguf"
if command -v jq > /dev/null; then
    check "--json is valid JSON when a path is not UTF-8" bash -c "HOME='$H' '$D' models --json | jq -e . > /dev/null"
fi

want=$("$D" run -m "$S" -p "Once upon a time" -n 16 --temp 0 2> /dev/null)
for name in ollama:tiny ollama:tiny:latest hf:acme/tiny-GGUF:Q8_0 hf:acme/tiny-GGUF:q4_k_m \
    lmstudio:acme/tiny-GGUF/tiny-Q4_K_M.gguf llama.cpp:acme_tiny-GGUF_tiny-Q4_K_M.gguf hf:acme/big-GGUF; do
    got=$(HOME="$H" "$D" run -m "$name" -p "Once upon a time" -n 16 --temp 0 2> /dev/null)
    check "run -m $name: the text of run -m PATH" test "$got" = "$want"
done
e=$(HOME="$H" "$D" run -m hf:acme/tiny-GGUF -p hi -n 1 2>&1); rc=$?
check "hf:ORG/REPO with two files: exit 1 ($rc)" test "$rc" -eq 1
check "... saying two match ($e)" contains "$e" "2 files match"
e=$(HOME="$H" "$D" run -m ollama:nothere -p hi -n 1 2>&1); rc=$?
check "an unknown name: exit 1, saying so ($e)" test "$rc" -eq 1 -a -n "$(grep -i 'no such model' <<< "$e")"
HOME="$H" "$D" submit -m ollama:tiny -p "Once upon a time" -n 4 --db "$T/q.db" > "$T/id" 2> "$T/err"
check "submit -m ollama:tiny queues a job of that file ($(cat "$T/err"))" \
    bash -c "HOME='$H' '$D' job \$(cat '$T/id') --db '$T/q.db' --json | grep -q 'sha256-$hex'"
e=$(HOME="$H" timeout 10 "$D" serve -m ollama:nothere --port 1 2>&1); rc=$?
check "serve -m of an unknown name: exit 1 before listening ($e)" test "$rc" -eq 1
finish
