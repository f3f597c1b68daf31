#!/usr/bin/env bash
# rooms.sh - each model family in its own room (issue 34): the generic owners of
# model state -- src/model/ (sessions, decoding, the layers' shared blocks),
# src/api/snapshot.c and the public header -- name no family and no field only
# one family has. A family's memory and scratch are declared through its
# df_arch hooks (src/model/session.h: df_mem_decl, df_layout) and live in
# src/arch/.
#   tests/cli/rooms.sh [BUILD_DIR | SOURCE_TREE]   (a source tree to check another; default this one)
#
# A family is named by its architecture (the arch table's .name strings: the
# test reads them) or a common spelling (deepseek, kimi, qwen, glm, minimax,
# gpt-oss, llama, mixtral, dsa, ds4); "llama.cpp", the reference project, is
# not a family, nor are the public header's tool-call formats (DF_TOOLS_*:
# chat formats named after their vendors). Family-specific fields are those
# of FIELDS below.
#
# KNOWN is today's count per file. It is not allowed, only known: a file may
# not exceed its count, a file not listed must have none, and a count above
# what the file has fails too (lower it), so the list only shrinks.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ -n "${1:-}" ] && [ -d "$1/src/model" ]; then ROOT=$1; fi
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
cd "$ROOT"

FIELDS='comp_ratio|hc_mult|hc_iters|hc_eps|ds4_[a-z_]*|idx_n_head|idx_head_dim|idx_top_k|idx_full|n_layer_idx'
FIELDS+='|idx_rope_neox|idx_norm_eps|o_groups|o_lora|n_hash_layers|rope_base_comp|attn_res_block|n_expert_latent'
FIELDS+='|wkv|wo_a|wo_b|hc_attn_[a-z]*|hc_ffn_[a-z]*|comp_(wkv|wgate|ape|norm)|lid_[a-z]*|output_hc_[a-z]*' # ds4's tensors
FIELDS+='|attn_res_score|ffn_res_score|ffn_routed_[a-z]*|output_res_score' # kimi-k3's
KNOWN='
src/model/model.h 33
src/model/moe.c 8
include/deltafin.h 7
src/model/mtp.c 2
src/model/moe.h 2
src/model/layer.h 2
src/model/layer.c 2
src/model/describe.c 1
'
names=$(sed -n 's/^ *\.name = "\([^"]*\)",$/\1/p' src/arch/arch_*.c | sort -u | tr '\n' '|')
check "the architecture table's names are read (${names%|})" test "$(tr '|' '\n' <<< "${names%|}" | wc -l)" -ge 10
pattern="\\b(${names}deepseek|kimi|qwen|glm|minimax|gpt-oss|gptoss|llama|mixtral|dsa|ds4|dsv4)[a-z0-9._-]*\\b|\\b($FIELDS)\\b"

# count FILE: lines naming a family or a family's field
count() { sed -E 's/llama\.cpp//g; /DF_TOOLS_/d' "$1" | grep -ciE "$pattern"; }

over=""; stale=""; total=0
for f in src/model/*.[ch] src/api/snapshot.c include/deltafin.h; do
    n=$(count "$f"); total=$((total + n))
    k=$(awk -v f="$f" '$1 == f { print $2 }' <<< "$KNOWN"); k=${k:-0}
    if [ "$n" -gt "$k" ]; then over+=" $f: $n (known $k): $(sed -E 's/llama\.cpp//g; /DF_TOOLS_/d' "$f" | grep -inE "$pattern" | head -3 | cut -c1-100 | tr '\n' ';')"; fi
    if [ "$n" -lt "$k" ]; then stale+=" $f: $n (known $k)"; fi
done
check "no family named in the generic rooms beyond the known ($total lines in all)${over:+:$over}" test -z "$over"
check "every known count is still real (lower KNOWN when a file gets cleaner)${stale:+:$stale}" test -z "$stale"
check "session.c, session.h and snapshot.c name no family at all" \
    test "$(( $(count src/model/session.c) + $(count src/model/session.h) + $(count src/api/snapshot.c) ))" -eq 0

# a self-test: a family name and a family's field are found, the reference project and a tool format are not
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
printf '%s\n' '/* as llama.cpp does */' 'DF_TOOLS_KIMI_K3,' 'int x; /* deepseek4 streams */' 'h->comp_ratio[l];' \
    'int n_head;' > "$T/probe.c"
check "a self-test: 2 of the probe's 5 lines name a family" test "$(count "$T/probe.c")" -eq 2
finish
