#!/usr/bin/env bash
# cgroup_ds4.sh - a DeepSeek-V4-shaped model ten times its budget, inside a real limit.
#   tests/cli/cgroup_ds4.sh BUILD_DIR
# Makes a DeepSeek-V4-shaped model of ~700 MiB (sliding-window, ratio-4 with
# the indexer and ratio-128 compressed attention layers, hyper-connections,
# hash routing on the first layers, 64 MXFP4 experts, q8_0 elsewhere), then
# computes the logits of 300 tokens (past the sliding window and the first
# ratio-128 block) with `deltafin logits --mem 64M` inside a cgroup v1 memory
# limit of 64 MiB + 256 MiB: the run must complete, never hit the limit
# (failcnt 0), and give logits bit-identical to the unbudgeted run's (the
# window caches, the compressed caches, the compressor states, the indexer
# keys and the streamed MXFP4 experts are all in the budget). Skipped where
# cgroups are unavailable or under the sanitizers.
set -u
B=${1:-build}
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
cgroup_setup cgroup-ds4
"$B/mkmodel" -o "$T/ds4.gguf" --preset deepseek4-tiny --type q8_0 --expert-type mxfp4 --n-embd 512 --experts 64 \
    --experts-used 8 --n-ff-exp 1024 --ds4-layers SCHCSCHCSCHCSC 2>/dev/null || { echo "mkmodel failed"; exit 1; }
cgroup_tenfold "$T/ds4.gguf" 300
finish
