#!/usr/bin/env bash
# cgroup_k3.sh - a Kimi-K3-shaped model ten times its budget, inside a real limit.
#   tests/cli/cgroup_k3.sh BUILD_DIR
# Makes a Kimi-K3-shaped model of ~700 MiB (KDA and NoPE MLA layers 3:1,
# residual attention, a latent MoE of 64 MXFP4 experts, q8_0 elsewhere), then
# computes the logits of 40 tokens with `deltafin logits --mem 64M` inside a
# cgroup v1 memory limit of 64 MiB + 256 MiB: the run must complete, never hit
# the limit (failcnt 0), and give logits bit-identical to the unbudgeted run's
# (the recurrent states, the MLA cache and the streamed MXFP4 experts are all
# in the budget). Skipped where cgroups are unavailable or under the sanitizers.
set -u
B=${1:-build}
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
cgroup_setup cgroup-k3
"$B/mkmodel" -o "$T/k3.gguf" --preset kimi-k3-tiny --type q8_0 --expert-type mxfp4 --n-embd 512 --n-head 8 \
    --n-head-kv 8 --experts 64 --experts-used 8 --n-ff-exp 1024 --latent 512 --schedule KKKMKKKMKKKMKK 2>/dev/null \
    || { echo "mkmodel failed"; exit 1; }
cgroup_tenfold "$T/k3.gguf" 40
finish
