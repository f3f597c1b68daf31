#!/usr/bin/env bash
# pack.sh - packed weights (src/types/pack.h) end to end (tests/cli/pack.sh BUILD_DIR).
# The store packs resident q8_0, MXFP4, q4_K, q5_K and q6_K matrices at load where the
# kernel table has packed gemms (AVX-512, AVX2 and NEON: all five). Packing must change no result: for
# models of every shape the packer meets - dense q8_0, MoE q4_K (expert
# slices packed one by one), gpt-oss (MXFP4 experts beside q8_0), DeepSeek
# (MLA's per-head matrices, which are read by rows: the store hands them
# back unpacked), the same under --mem (streamed layers and experts stay in
# the file's layout, resident ones are packed) and with the AMX table on the
# software tile model (its packed gemms) - the logits of a prompt of several
# token tiles are byte for byte those with DELTAFIN_PACK=0. Where the table
# is AVX-512's or AVX2's (run.sh runs this again capped at AVX2) the run must
# report packed weights (else the comparison would prove nothing); with
# DELTAFIN_PACK=0 it reports none. Also: the rule that
# decides whether the CLI reads a model in (and so packs it) or maps it,
# against a fake cgroup's limit and anonymous memory.
set -euo pipefail
B=${1:-build}
D="$B/deltafin"
T=$(mktemp -d /tmp/deltafin-pack-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"

P="Once upon a time there was a little robot who lived in a garden full of tall flowers and singing birds, and every day"
mk() { "$B/mkmodel" -o "$T/$1.gguf" "${@:2}" 2>/dev/null || { echo "mkmodel $1 failed"; exit 1; }; }
mk dense --preset small --type q8_0
mk moe --preset qwen3moe-tiny --type q4_K
mk oss --preset gpt-oss-tiny --type q8_0 --expert-type mxfp4
mk ds --preset deepseek-v3-tiny --type q4_K
mk q6 --preset qwen3moe-tiny --type q6_K
mk q5 --preset small --type q5_K
# rows past the last group of 16 (feed-forward 4104 = 256 groups + 8; experts 264 = 16 + 8 each), and
# matrices larger than the store's 1 MiB staging buffer (read and packed in several pieces, on two threads)
mk odd --preset small --type q8_0 --n-ff 4104
mk oddmoe --preset qwen3moe-tiny --type q4_K --n-ff-exp 264

same() { # NAME [ENV...] -- [ARGS...]: logits packed == not packed
    local name=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" DELTAFIN_PACK=0 "$D" logits -m "$T/$name.gguf" -p "$P" "$@" --out "$T/a.f32" > /dev/null 2>&1
    env "${envs[@]}" "$D" logits -m "$T/$name.gguf" -p "$P" "$@" --out "$T/b.f32" > /dev/null 2>&1
    test -s "$T/a.f32" && cmp -s "$T/a.f32" "$T/b.f32"
}
check "dense q8_0: logits packed == file layout" same dense --
check "qwen3moe q4_K: logits packed == file layout" same moe --
check "qwen3moe q6_K: logits packed == file layout" same q6 --
check "dense q5_K: logits packed == file layout" same q5 --
check "dense q8_0, rows past the last group, 1 thread: packed at load == file layout" same odd -- -t 1
check "dense q8_0, rows past the last group, 2 threads: packed at load == file layout" same odd -- -t 2
check "qwen3moe q4_K, 264-row experts, 2 threads: packed at load == file layout" same oddmoe -- -t 2
check "gpt-oss q8_0 + mxfp4: logits packed == file layout" same oss --
check "deepseek q4_K (MLA rows read unpacked): logits packed == file layout" same ds --
check "deepseek under --mem 24M: logits packed == file layout" same ds -- --mem 24M
check "qwen3moe, AMX table on the tile model: packed == file layout" same moe DELTAFIN_AMX=model --
check "dense q8_0, AMX table on the tile model: packed == file layout" same dense DELTAFIN_AMX=model --

e=$("$D" run -m "$T/dense.gguf" -p hi -n 1 2>&1 >/dev/null)
packs() { contains "$1" "isa: amx" || contains "$1" "isa: avx512" || contains "$1" "isa: avx2"; } # tables that pack
if packs "$e"; then
    check "AMX, AVX-512 or AVX2: the run reports packed weights" contains "$e" "packed weights:"
    check "AMX, AVX-512 or AVX2: a q8_0 model is packed" lacks "$e" "packed weights: 0.0 MiB"
    e=$("$D" run -m "$T/oss.gguf" -p hi -n 1 2>&1 >/dev/null)
    check "... and gpt-oss's MXFP4 experts beside q8_0" lacks "$e" "packed weights: 0.0 MiB"
    e=$("$D" run -m "$T/q6.gguf" -p hi -n 1 2>&1 >/dev/null)
    check "... and a q6_K model" lacks "$e" "packed weights: 0.0 MiB"
else
    echo "ok   (no AVX2 here: nothing is packed; the comparisons above ran the file layout twice)"
fi
# The CLI's default reads a model in (and packs it) only where it fits twice in the memory left: a fake
# cgroup v1 (DELTAFIN_CGROUP_DIR) whose limit is just under twice the file maps it, one of 4 times reads it in.
size=$(stat -c %s "$T/dense.gguf")
mkdir "$T/cg"
echo "total_rss 0" > "$T/cg/memory.stat"
echo $((2 * size - 4096)) > "$T/cg/memory.limit_in_bytes"
e=$(DELTAFIN_CGROUP_DIR="$T/cg" "$D" run -m "$T/dense.gguf" -p hi -n 1 2>&1 >/dev/null)
check "a cgroup limit under twice the model: mapped, nothing packed" contains "$e" "packed weights: 0.0 MiB"
echo $((4 * size)) > "$T/cg/memory.limit_in_bytes"
echo "total_rss $((2 * size + 8192))" > "$T/cg/memory.stat"
e=$(DELTAFIN_CGROUP_DIR="$T/cg" "$D" run -m "$T/dense.gguf" -p hi -n 1 2>&1 >/dev/null)
check "... the same with half of a larger limit taken by anonymous memory: mapped" contains "$e" "packed weights: 0.0 MiB"
echo "total_rss 0" > "$T/cg/memory.stat"
e=$(DELTAFIN_CGROUP_DIR="$T/cg" "$D" run -m "$T/dense.gguf" -p hi -n 1 2>&1 >/dev/null)
if packs "$e"; then
    check "... and a limit of 4 times the model: read in and packed" lacks "$e" "packed weights: 0.0 MiB"
fi
e=$(DELTAFIN_PACK=0 "$D" run -m "$T/dense.gguf" -p hi -n 1 2>&1 >/dev/null)
check "DELTAFIN_PACK=0: nothing packed" contains "$e" "packed weights: 0.0 MiB"
finish
