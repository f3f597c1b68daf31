#!/usr/bin/env bash
# rooms.sh - each model family in its own room (issue 34): the generic owners of
# model state -- src/model/ (sessions, decoding, the layers' shared blocks),
# src/api/snapshot.c and the public header -- name no family and no field only
# one family has. A family's hyperparameters, tensors, memory and scratch are
# private to its file in src/arch/ (m->fam_hp, m->fam_tensors, df_layer.fam,
# the df_arch hooks of src/model/session.h: df_mem_decl, df_layout).
#   tests/cli/rooms.sh [BUILD_DIR | SOURCE_TREE]   (a source tree to check another; default this one)
#
# A family is named by its architecture (the arch table's .name strings: the
# test reads them) or a common spelling (deepseek, kimi, qwen, glm, minimax,
# gpt-oss, llama, mixtral, dsa, ds4); the reference projects llama.cpp and
# llama2.c are not families, nor are the public header's tool-call formats
# (DF_TOOLS_*: chat formats named after their vendors). Family-specific
# fields are those of FIELDS below. None may appear, in code or in a comment:
# what a family adds is explained in its own file (docs/design.md maps them).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ -n "${1:-}" ] && [ -d "$1/src/model" ]; then ROOT=$1; fi
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
cd "$ROOT"

FIELDS='comp_ratio|hc_mult|hc_iters|hc_eps|ds4_[a-z_]*|idx_n_head|idx_head_dim|idx_top_k|idx_full|n_layer_idx'
FIELDS+='|idx_rope_neox|idx_norm_eps|o_groups|o_lora|n_hash_layers|rope_base_comp|attn_res_block|n_expert_latent'
FIELDS+='|wkv|wo_a|wo_b|hc_attn_[a-z]*|hc_ffn_[a-z]*|comp_(wkv|wgate|ape|norm)|lid_[a-z]*|output_hc_[a-z]*' # ds4's tensors
FIELDS+='|attn_res_score|ffn_res_score|ffn_routed_[a-z]*|output_res_score' # kimi-k3's
FIELDS+='|gdn_k_interleave|ssm_alpha|ssm_ba|ssm_in|ssm_f_[ab]|ssm_g_[ab]' # qwen's and kimi's own
names=$(sed -n 's/^ *\.name = "\([^"]*\)",$/\1/p' src/arch/arch_*.c | sort -u | tr '\n' '|')
check "the architecture table's names are read (${names%|})" test "$(tr '|' '\n' <<< "${names%|}" | wc -l)" -ge 10
pattern="\\b(${names}deepseek|kimi|qwen|glm|minimax|gpt-oss|gptoss|llama|mixtral|dsa|ds4|dsv4)[a-z0-9._-]*\\b|\\b($FIELDS)\\b"

# lines FILE: the lines naming a family or a family's field
lines() { sed -E 's/llama2?\.c(pp)?//g; /DF_TOOLS_/d' "$1" | grep -inE "$pattern"; }
count() { lines "$1" | wc -l; }

named=""; total=0
for f in src/model/*.[ch] src/api/snapshot.c include/deltafin.h; do
    n=$(count "$f"); total=$((total + n))
    if [ "$n" -gt 0 ]; then named+=" $f: $(lines "$f" | head -3 | cut -c1-100 | tr '\n' ';')"; fi
done
check "no family named in the generic rooms ($total lines)${named:+:$named}" test "$total" -eq 0

# a self-test: a family name and a family's field are found, the reference projects and a tool format are not
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
printf '%s\n' '/* as llama.cpp does */' 'DF_TOOLS_KIMI_K3,' 'int x; /* deepseek4 streams */' 'h->comp_ratio[l];' \
    'int n_head;' '/* as in llama2.c */' 'L->ssm_alpha' > "$T/probe.c"
check "a self-test: 3 of the probe's 7 lines name a family" test "$(count "$T/probe.c")" -eq 3
mkdir -p "$T/tree/src/model" "$T/tree/src/api" "$T/tree/include" "$T/tree/src/arch"
cp src/arch/arch_*.c "$T/tree/src/arch/"
printf '%s\n' '/* kimi-k3: a residual score */' > "$T/tree/src/model/probe.h"
touch "$T/tree/src/api/snapshot.c" "$T/tree/include/deltafin.h"
check "a self-test: a tree whose src/model names a family fails" \
    bash -c "! bash '${BASH_SOURCE[0]}' '$T/tree' >/dev/null 2>&1"
finish
