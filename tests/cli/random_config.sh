#!/usr/bin/env bash
# random_config.sh - mkmodel --random-config SEED prints its draw as flags, and those flags
# rebuild the same file byte for byte, for every family (the promise tests/sweep.sh's
# failure messages rely on: a configuration can be rebuilt and shrunk by hand).
#   tests/cli/random_config.sh BUILD_DIR
set -u
B=${1:-build}
T=$(mktemp -d /tmp/deltafin-random-config-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
for p in tiny mixtral-tiny qwen2moe-tiny qwen3moe-tiny deepseek-v3-tiny deepseek32-tiny glm-dsa-tiny kimi-linear-tiny \
    kimi-k3-tiny glm4moe-tiny minimax-m2-tiny gpt-oss-tiny qwen35moe-tiny qwen3next-tiny deepseek4-tiny \
    granite-tiny granite-moe-tiny; do
    s=$((RANDOM % 1000))
    flags=$("$B/mkmodel" -o "$T/r.gguf" --preset "$p" --type f32 --random-config "$s" 2>&1 | sed -n "s/^mkmodel: --random-config $s: //p")
    # shellcheck disable=SC2086
    "$B/mkmodel" -o "$T/f.gguf" --preset "$p" --type f32 $flags > /dev/null 2>&1
    check "$p --random-config $s: its printed flags rebuild the same file" cmp -s "$T/r.gguf" "$T/f.gguf"
done
finish
