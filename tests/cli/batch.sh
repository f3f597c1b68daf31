#!/usr/bin/env bash
# batch.sh - `deltafin run --batch-file`: many prompts decoded together, one
# pass over the weights per step.
#   tests/cli/batch.sh BUILD_DIR
# Each prompt's greedy completion is the one `run -p` gives it alone (the
# real stories260K model, and a synthetic MoE model in memory and streamed
# under --mem), printed in the file's order whatever --parallel is (fewer
# slots than prompts: finished sequences hand their slot to the next
# prompt); the report shows the steps, the expert union per step and the
# bytes read per generated token; bad input gets a clear error.
set -euo pipefail
B=${1:-build}
D="$B/deltafin"
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
T=$(mktemp -d /tmp/deltafin-batch-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"

printf 'Once upon a time\nThe little dog\r\n\nLily and Tom went to the park\nOne day\n' > "$T/p.txt"
prompts=("Once upon a time" "The little dog" "Lily and Tom went to the park" "One day")

# The expected output: each prompt alone through run -p, under the header batch prints.
expect() { # MODEL ARGS...
    local m=$1; shift
    local i=0
    for p in "${prompts[@]}"; do
        i=$((i + 1))
        echo "=== prompt $i of ${#prompts[@]} ==="
        "$D" run -m "$m" -p "$p" "$@" 2>/dev/null
    done
}

expect "$S" -n 24 --temp 0 -t 2 > "$T/want"
"$D" run -m "$S" --batch-file "$T/p.txt" -n 24 --temp 0 -t 2 > "$T/got" 2> "$T/err"
check "stories260K: 4 prompts together, each as alone" cmp -s "$T/want" "$T/got"
check "the report counts the prompts" grep -q "prompts: *4 (4 decoded together at most)" "$T/err"
check "the report counts steps and their sequences" grep -q "^steps: .* passes over the weights" "$T/err"
check "a dense model's report has no expert line (issue 37)" test -z "$(grep 'experts read' "$T/err")"
"$D" run -m "$S" --batch-file "$T/p.txt" -n 24 --temp 0 -t 2 --parallel 2 > "$T/got2" 2> "$T/err2"
check "--parallel 2: slots reused, same completions in order" cmp -s "$T/want" "$T/got2"
check "--parallel 2 is reported" grep -q "prompts: *4 (2 decoded together at most)" "$T/err2"

# a mixture of experts, in memory and streamed under a budget
"$B/mkmodel" -o "$T/moe.gguf" --preset deepseek-v3-tiny --type q8_0 2>/dev/null || { echo "mkmodel failed"; exit 1; }
expect "$T/moe.gguf" -n 12 --temp 0 -t 2 -c 128 > "$T/want-moe"
"$D" run -m "$T/moe.gguf" --batch-file "$T/p.txt" -n 12 --temp 0 -t 2 -c 128 > "$T/got-moe" 2> "$T/err-moe"
check "deepseek-v3 (MLA + MoE): batched completions as alone" cmp -s "$T/want-moe" "$T/got-moe"
check "the report gives the expert union per step" grep -q "^steps: expert union .* experts a step (.* per MoE layer)" \
    "$T/err-moe"
check "... and the expert bytes per generated token" grep -q "MiB of experts read per generated token" "$T/err-moe"
minimum() { # the plan's minimum budget for $1 sessions
    "$D" plan -m "$T/moe.gguf" --mem 1G -c 128 --disk-gbps 1 --mem-gbps 10 --parallel "$1" --json 2>/dev/null |
        sed -n 's/.*"minimum":\([0-9]*\).*/\1/p'
}
one=$(minimum 1)
min=$(minimum 4)
check "plan --parallel 4 counts four sessions ($one -> $min bytes)" test -n "$min" -a "$min" -gt "$one"
budget=$(( (min >> 20) + 1 ))M # experts stream
expect "$T/moe.gguf" -n 12 --temp 0 -t 2 -c 128 --mem "$budget" > "$T/want-mem"
"$D" run -m "$T/moe.gguf" --batch-file "$T/p.txt" -n 12 --temp 0 -t 2 -c 128 --mem "$budget" > "$T/got-mem" \
    2> "$T/err-mem"
check "--mem $budget: batched completions as alone" cmp -s "$T/want-mem" "$T/got-mem"
check "--mem: the report gives disk bytes per generated token" grep -q "MiB from disk" "$T/err-mem"
check "--mem: the io report follows" grep -q "^io: expert cache hit rate" "$T/err-mem"
check "run -p reports its steps too" sh -c "'$D' run -m '$T/moe.gguf' -p 'One day' -n 8 -c 128 2>&1 >/dev/null |
    grep -q '^steps: expert union'"

# bad input
: > "$T/empty.txt"
err=$("$D" run -m "$S" --batch-file "$T/empty.txt" 2>&1 >/dev/null || true)
check "an empty batch file is refused" contains "$err" "the batch file holds no prompt"
err=$("$D" run -m "$S" --batch-file "$T/p.txt" -p "x" 2>&1 >/dev/null || true)
check "--batch-file with -p is refused" contains "$err" "no -p or -f beside it"
err=$("$D" run -m "$S" --batch-file "$T/nope.txt" 2>&1 >/dev/null || true)
check "a missing batch file is named" contains "$err" "nope.txt"
err=$("$D" logits -m "$S" --batch-file "$T/p.txt" 2>&1 >/dev/null || true)
check "--batch-file belongs to run" contains "$err" "logits takes no --batch-file (it is an option of run)"
err=$("$D" run -m "$S" --batch-file "$T/p.txt" --parallel 0 2>&1 >/dev/null || true)
check "--parallel 0 is refused" contains "$err" "--parallel"
finish
