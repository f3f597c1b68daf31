#!/usr/bin/env bash
# optional_keys.sh - a metadata key llama.cpp reads as optional is optional here
# too, with llama.cpp's default (issue 32 item 1; the start of that list).
#   tests/cli/optional_keys.sh BUILD_DIR
# mkmodel --drop-key writes a model without the key. feed_forward_length:
# llama.cpp reads it with required = false (0 when absent), and a model
# whose every layer is MoE never uses it: deepseek4 files without it load
# and give the logits of the same model with it (f32, and MXFP4 experts).
# A dense model without it is refused with a message naming the key's
# meaning, not a crash. expert_feed_forward_length of qwen2moe/qwen3moe:
# llama.cpp's default is feed_forward_length / expert_used_count (found by
# tests/sweep.sh). The whole list is tests/sweep.sh's to find: it drops every
# key in turn and holds Deltafin to whatever llama.cpp still loads.
set -u
B=${1:-build}
D="$B/deltafin"
T=$(mktemp -d /tmp/deltafin-optional-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
P="Once upon a time there was a little robot who lived in a garden full of tall flowers"

for et in f32 mxfp4; do
    "$B/mkmodel" -o "$T/with.gguf" --preset deepseek4-tiny --type f32 --expert-type "$et" 2>/dev/null ||
        { echo "mkmodel failed"; exit 1; }
    "$B/mkmodel" -o "$T/without.gguf" --preset deepseek4-tiny --type f32 --expert-type "$et" \
        --drop-key feed_forward_length 2>/dev/null || { echo "mkmodel failed"; exit 1; }
    check "deepseek4 ($et experts): mkmodel left the key out" \
        test -z "$("$D" info -m "$T/without.gguf" 2>/dev/null | grep -w 'feed_forward_length')"
    e=$("$D" logits -m "$T/without.gguf" -p "$P" --out "$T/without.f32" 2>&1 >/dev/null); rc=$?
    check "deepseek4 ($et experts) without feed_forward_length: loads and runs ($e)" test "$rc" -eq 0
    "$D" logits -m "$T/with.gguf" -p "$P" --out "$T/with.f32" >/dev/null 2>&1
    check "... the logits of the same model with it" cmp -s "$T/with.f32" "$T/without.f32"
done
for a in qwen2moe qwen3moe; do
    "$B/mkmodel" -o "$T/with.gguf" --preset $a-tiny --n-ff 512 --experts-used 4 --n-ff-exp 128 2>/dev/null
    "$B/mkmodel" -o "$T/without.gguf" --preset $a-tiny --n-ff 512 --experts-used 4 --n-ff-exp 128 \
        --drop-key expert_feed_forward_length 2>/dev/null
    e=$("$D" logits -m "$T/without.gguf" -p "$P" --out "$T/without.f32" 2>&1 >/dev/null); rc=$?
    check "$a without expert_feed_forward_length: loads and runs ($e)" test "$rc" -eq 0
    "$D" logits -m "$T/with.gguf" -p "$P" --out "$T/with.f32" >/dev/null 2>&1
    check "... experts feed_forward_length / expert_used_count wide: the logits of the file with it" \
        cmp -s "$T/with.f32" "$T/without.f32"
done
"$B/mkmodel" -o "$T/dense.gguf" --preset tiny --drop-key feed_forward_length 2>/dev/null
e=$("$D" logits -m "$T/dense.gguf" -p hi 2>&1 >/dev/null); rc=$?
check "a dense llama without feed_forward_length: refused (rc $rc)" test "$rc" -eq 1
check "... saying what does not fit ($e)" contains "$e" "ffn"
finish
