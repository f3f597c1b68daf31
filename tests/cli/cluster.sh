#!/usr/bin/env bash
# cluster.sh - one model over several processes started by mpirun (docs/cluster.md).
#   tests/cli/cluster.sh BUILD_DIR
# Greedy text from `mpirun -np 2` and `-np 4` equals the single process's for
# every architecture preset (a dense one runs on rank 0 alone), and the
# logits of a prompt are bit-identical; under --mem the experts stream on
# every rank, each reading only its share: rank 0 reads at most 0.55x the
# bytes per token of a single process with the same budget, and the report
# names every rank. Refused before any weight is read, with the rank and the
# reason: another model file on a rank, more ranks than experts, a rank whose
# budget cannot hold its share; the plugin missing. A rank killed with kill -9
# mid-generation stops the job within seconds, naming the rank; so does rank 0.
# Split by layers (--split layers): every preset's text over 2 ranks and up to 4, a prompt's logits over 3
# bit for bit, several prompts in one pass, a budgeted run where each rank reads only its layers; what it
# cannot do yet (speculation), and more ranks than layers, refused.
# Ranks here share this machine and its disk (the network namespaces of
# tests/cli/cluster_net.sh make them talk TCP over real interfaces).
set -u
B=${1:-build}
D="$B/deltafin"
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
if ! command -v mpirun > /dev/null || [ ! -f "$B/libdeltafin-mpi.so" ]; then
    if [ -n "${CI:-}" ]; then echo "FAIL mpirun or $B/libdeltafin-mpi.so missing (scripts/install-deps.sh installs Open MPI)"; exit 1; fi
    echo "SKIPPED: Open MPI is not installed (scripts/install-deps.sh)"; exit 0
fi
T=$(mktemp -d /tmp/deltafin-cluster-XXXXXX)
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"' EXIT
# Open MPI's own allocations outlive MPI_Finalize (its components are unloaded): not ours to count
# the processes mpirun starts only (the single-process runs here keep LeakSanitizer)
NOLEAK=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")
MPI=("${NOLEAK[@]}" timeout 300 mpirun --allow-run-as-root --oversubscribe --quiet)
mk() { "$B/mkmodel" -o "$T/$1.gguf" "${@:2}" > /dev/null 2>&1 || { echo "mkmodel $1 failed"; exit 1; }; }
P="the cat sat on the mat and the dog sat on the log"
run() { "$D" run -p "$P" -n 16 --temp 0 --hot none -t 1 "$@"; }

# ---- every preset: the same text alone, over 2 and over 4 ranks ----
for pre in tiny mixtral-tiny qwen2moe-tiny qwen3moe-tiny deepseek-v3-tiny deepseek-v2-tiny deepseek-v2-lite-tiny \
    kimi-linear-tiny kimi-k3-tiny glm4moe-tiny minimax-m2-tiny gpt-oss-tiny qwen35moe-tiny qwen3next-tiny \
    deepseek32-tiny glm-dsa-tiny deepseek4-tiny granite-tiny granite-moe-tiny; do
    extra=()
    case $pre in gpt-oss-tiny) extra=(--expert-type mxfp4) ;; qwen3moe-tiny | glm4moe-tiny) extra=(--expert-type q4_K) ;; esac
    mk "$pre" --preset "$pre" --type q8_0 "${extra[@]}"
    run -m "$T/$pre.gguf" > "$T/$pre.1" 2> "$T/$pre.e1"
    for np in 2 4; do
        "${MPI[@]}" -np $np "$D" run -m "$T/$pre.gguf" -p "$P" -n 16 --temp 0 --hot none -t 1 > "$T/$pre.$np" 2> "$T/$pre.e$np"
        rc=$?
        check "$pre: $np ranks: exit 0${rc:+ (got $rc)}" test "$rc" -eq 0
        check "$pre: $np ranks: the single process's text" cmp -s "$T/$pre.1" "$T/$pre.$np"
    done
done
check "the texts are not empty" test -s "$T/deepseek4-tiny.1"
# a prompt's logits, every row: bit for bit
mk lg --preset deepseek-v3-tiny --type q8_0 --expert-type q4_K --seed 9
"$D" logits -m "$T/lg.gguf" -p "$P" --out "$T/lg1.f32" > /dev/null 2>&1
"${MPI[@]}" -np 3 "$D" logits -m "$T/lg.gguf" -p "$P" --out "$T/lg3.f32" > /dev/null 2>&1
check "logits over 3 ranks are bit-identical to one process's" cmp -s "$T/lg1.f32" "$T/lg3.f32"
check "... and written" test -s "$T/lg3.f32"

# ---- under a budget: each rank streams its own share ----
mk big --preset qwen3moe-tiny --type q8_0 --experts 64 --n-ff-exp 512 --n-embd 512 --n-layer 8 --seed 5
Q=(-m "$T/big.gguf" --mem 60M -c 256 -p "Once upon a time there was" -n 24 --temp 0 --hot none -t 1)
"$D" run "${Q[@]}" > "$T/big.1" 2> "$T/big.e1"
"${MPI[@]}" -np 2 "$D" run "${Q[@]}" > "$T/big.2" 2> "$T/big.e2"
check "--mem, 2 ranks: exit 0" test $? -eq 0
check "--mem, 2 ranks: the single process's text" cmp -s "$T/big.1" "$T/big.2"
one=$(sed -n 's/^io: .* read from disk, \([0-9.]*\) MiB per token.*/\1/p' "$T/big.e1")
r0=$(sed -n 's/^cluster: rank 0: .*read (\([0-9.]*\) MiB per token.*/\1/p' "$T/big.e2")
r1=$(sed -n 's/^cluster: rank 1: .*read (\([0-9.]*\) MiB per token.*/\1/p' "$T/big.e2")
echo "bytes per token: one process $one MiB; 2 ranks: rank 0 $r0, rank 1 $r1 MiB"
check "--mem: the report names every rank" test -n "$r0" -a -n "$r1"
check "--mem: rank 0 reads at most 0.55x a single process's bytes per token" \
    awk -v a="$r0" -v b="$one" 'BEGIN { exit !(b > 0 && a <= 0.55 * b) }'
check "--mem: rank 1 reads its own share" awk -v a="$r1" 'BEGIN { exit !(a > 0) }'
check "--mem: the network line" grep -q "^cluster: network: rank 0 sent" "$T/big.e2"
# shares by the ranks' caches: with a context of 1024, rank 0's session leaves it fewer slots than rank 1
# (which keeps no context), so it owns fewer experts; the deal plan --ranks predicts is the run's, and the
# shares add up to the model's experts
own() { sed -n "s/^cluster: rank $1: \([0-9]*\) experts, \([0-9]*\) cache slots.*/\1 \2/p" "$2"; }
"${MPI[@]}" -np 2 "$D" run "${Q[@]/256/1024}" > "$T/big.2c" 2> "$T/big.e2c"
check "--mem -c 1024, 2 ranks: the single process's text" cmp -s "$T/big.1" "$T/big.2c"
read -r e0 s0 <<< "$(own 0 "$T/big.e2c")"; read -r e1 s1 <<< "$(own 1 "$T/big.e2c")"
pr=$("$D" plan -m "$T/big.gguf" --mem 60M -c 1024 --disk-gbps 2 --mem-gbps 20 --json --hot none --ranks 2 2> /dev/null)
echo "2 ranks at 60M: rank 0 $e0 experts in $s0 slots, rank 1 $e1 in $s1; plan: $(jq -c '[.rank0_experts, .rank_experts]' <<< "$pr")"
check "--mem -c 1024: fewer slots on rank 0 (${s0:-?} < ${s1:-?}), fewer experts (${e0:-?} < ${e1:-?})" \
    test "${s0:-0}" -lt "${s1:-0}" -a "${e0:-0}" -lt "${e1:-0}"
check "--mem -c 1024: the shares add up to the model's 512 experts" test $((e0 + e1)) = 512
check "--mem -c 1024: plan --ranks 2 deals them as the run did" \
    test "$(jq '"\(.rank0_experts) \(.rank_experts)"' -r <<< "$pr")" = "$e0 $e1"
# a rank with a larger budget of its own (Open MPI's MPMD syntax) gets a larger share
read -r g0 _ <<< "$(own 0 "$T/big.e2")"; read -r g1 _ <<< "$(own 1 "$T/big.e2")"
"${MPI[@]}" -np 1 "$D" run "${Q[@]}" : -np 1 "$D" run "${Q[@]/60M/90M}" > "$T/big.2b" 2> "$T/big.e2b"
check "--mem 60M and 90M: the single process's text" cmp -s "$T/big.1" "$T/big.2b"
read -r f0 _ <<< "$(own 0 "$T/big.e2b")"; read -r f1 _ <<< "$(own 1 "$T/big.e2b")"
check "--mem 60M and 90M: rank 1's larger cache owns more (${f1:-?} > ${g1:-?} experts at 60M each; rank 0 ${f0:-?})" \
    test "${f1:-0}" -gt "${g1:-0}" -a $((f0 + f1)) = 512

# ---- plan --ranks: what each rank holds, reads and sends, and the tokens/s ----
pj() { "$D" plan -m "$T/big.gguf" --mem 60M -c 256 --disk-gbps 2 --mem-gbps 20 --json "$@" 2> /dev/null; }
j1=$(pj); j2=$(pj --ranks 2 --net-gbps 1000 --net-latency-us 0); j4=$(pj --ranks 4 --net-gbps 1000 --net-latency-us 0)
total=$(jq .experts_total <<< "$j1")
check "plan --ranks 4: all the ranks' experts are the model's $total" test "$(jq .experts_all <<< "$j4")" = "$total"
c4=$(pj --ranks 4 -c 1024)
check "plan --ranks 4 -c 1024: rank 0 owns fewer than the others, all of them the model's $total" \
    jq -e --argjson t "$total" '.rank0_experts < .rank_experts and .experts_all == $t' <<< "$c4"
check "plan --ranks: with their own disks and a fast network, 2 ranks beat one machine" \
    jq -e '.cluster_tokens_per_s > .predicted_tokens_per_s' <<< "$j2"
check "plan --ranks: ... and 4 beat 2" test "$(jq -n --argjson a "$j2" --argjson b "$j4" '$b.cluster_tokens_per_s > $a.cluster_tokens_per_s')" = true
slow=$(pj --ranks 4 --net-gbps 0.01 --net-latency-us 5000)
check "plan --ranks: a slow network costs what it carries" \
    jq -e --argjson f "$j4" '.cluster_tokens_per_s < $f.cluster_tokens_per_s and .net_seconds_per_token > 0.1' <<< "$slow"
check "plan --ranks: disk, compute and messages add up (a step waits for its slowest rank)" \
    jq -e '(1 / (.cluster_disk_seconds_per_token + .cluster_memory_seconds_per_token + .net_seconds_per_token)) as $t |
           ($t - .cluster_tokens_per_s | fabs) < 0.001 * $t + 0.01' <<< "$slow"
# on one machine the ranks' experts compute as many at a time as its cores allow: -t 1 a rank, nproc at once;
# -t nproc, one at a time (rank 0's dense part alone either way)
m1=$(pj --ranks 4 --one-machine -t 1 | jq .cluster_memory_seconds_per_token)
mn=$(pj --ranks 4 --one-machine -t "$(nproc)" | jq .cluster_memory_seconds_per_token)
check "plan --ranks --one-machine: compute with a thread a rank ($m1 s) at most with all cores a rank ($mn s)" \
    awk -v a="$m1" -v b="$mn" -v c="$(nproc)" 'BEGIN { exit !(a > 0 && (c > 1 ? a < b : a == b)) }'
txt=$("$D" plan -m "$T/big.gguf" --mem 60M -c 256 --disk-gbps 2 --mem-gbps 20 --ranks 2 --one-machine 2>&1)
check "plan --ranks: says what rank 0 and the others hold" bash -c 'grep -q "^cluster: rank 0: the dense part" <<< "$1" &&
    grep -q "^cluster: each other rank: " <<< "$1" && grep -q "^predicted: .* tokens/s on this machine as 2 ranks" <<< "$1"' _ "$txt"
out=$("$D" plan -m "$T/big.gguf" --mem 60M --ranks 65 --disk-gbps 2 --mem-gbps 20 2>&1)
check "plan --ranks beyond the experts: refused" contains "$out" "65 ranks, but the model has 64 experts per layer"
out=$("$D" plan -m "$T/tiny.gguf" --mem 60M --ranks 2 --disk-gbps 2 --mem-gbps 20 2>&1)
check "plan --ranks of a dense model: refused" contains "$out" "has no routed experts"

# ---- refused before any weight is read ----
mk other --preset qwen3moe-tiny --type q8_0 --experts 64 --n-ff-exp 512 --n-embd 512 --n-layer 8 --seed 6
"${MPI[@]}" -np 1 "$D" run "${Q[@]}" : -np 1 "$D" run -m "$T/other.gguf" --mem 60M > /dev/null 2> "$T/mix.e"
rc=$?
check "another model on rank 1: refused" test "$rc" -ne 0
check "... naming the rank and the reason" grep -q "rank 1 of 2: .*other.gguf is not the same model as rank 0's" "$T/mix.e"
"${MPI[@]}" -np 1 "$D" run "${Q[@]}" : -np 1 "$D" run -m "$T/big.gguf" --mem 20M > /dev/null 2> "$T/mem.e"
rc=$?
check "a rank whose budget cannot hold its share: refused" test "$rc" -ne 0
check "... naming the rank and its minimum" grep -q "rank 1 of 2: a budget of 20.0 MiB cannot run this model: the minimum is" "$T/mem.e"
mk four --preset qwen3moe-tiny --type q8_0 --experts 4 --experts-used 2
"${MPI[@]}" -np 5 "$D" run -m "$T/four.gguf" -p hi -n 2 > /dev/null 2> "$T/five.e"
rc=$?
check "more ranks than experts: refused" test "$rc" -ne 0
check "... saying how many can share them" grep -q "5 ranks, but the model has 4 experts per layer: at most 4 ranks" "$T/five.e"
DELTAFIN_MPI_PLUGIN=$T/none.so "${MPI[@]}" -x DELTAFIN_MPI_PLUGIN -np 2 "$D" run -m "$T/four.gguf" -p hi -n 2 \
    > /dev/null 2> "$T/plug.e"
rc=$?
check "no MPI plugin: refused" test "$rc" -ne 0
check "... saying what to do" grep -q "the MPI plugin cannot be loaded" "$T/plug.e"

# ---- --split layers: each rank a contiguous range of layers, the hidden state from rank to rank ----
# every preset over 2 ranks, and over as many as its layers allow up to 4: the single process's text
layers_of() { "$D" info -m "$1" 2> /dev/null | awk '$1 == "block_count" { b = $2 } $1 == "nextn_predict_layers" { x = $2 }
                                                 END { print b - x }'; }
for pre in tiny mixtral-tiny qwen2moe-tiny qwen3moe-tiny deepseek-v3-tiny deepseek-v2-tiny deepseek-v2-lite-tiny \
    kimi-linear-tiny kimi-k3-tiny glm4moe-tiny minimax-m2-tiny gpt-oss-tiny qwen35moe-tiny qwen3next-tiny \
    deepseek32-tiny glm-dsa-tiny deepseek4-tiny granite-tiny granite-moe-tiny; do
    nl=$(layers_of "$T/$pre.gguf")
    for np in $(printf '%s\n' 2 $(( ${nl:-2} < 4 ? ${nl:-2} : 4 )) | sort -u); do
        "${MPI[@]}" -np $np "$D" run -m "$T/$pre.gguf" -p "$P" -n 16 --temp 0 --hot none -t 1 --split layers \
            > "$T/$pre.L$np" 2> "$T/$pre.Le$np"
        rc=$?
        check "$pre: --split layers, $np ranks: exit 0${rc:+ (got $rc)}" test "$rc" -eq 0
        check "$pre: --split layers, $np ranks: the single process's text" cmp -s "$T/$pre.1" "$T/$pre.L$np"
    done
done
"${MPI[@]}" -np 3 "$D" logits -m "$T/lg.gguf" -p "$P" --split layers --out "$T/lgL.f32" > /dev/null 2>&1
check "--split layers: logits over 3 ranks are bit-identical to one process's" cmp -s "$T/lg1.f32" "$T/lgL.f32"
# a long prompt runs in chunks that overlap on the stages (pipe.c): every row's logits as one process's, for every
# family's carry (the residual; DeepSeek V4's streams; Kimi's banked blocks), in as many chunks as 3 ranks take
# (DELTAFIN_PIPE_CHUNKS=6: these MoE presets' prompts are too short to be cut by default) and whole
P3="$P and then the bird flew over all of them quickly, and the cat ran after it to the end of the long garden"
mk dense4 --preset granite-tiny --n-layer 4 --type q8_0
for pre in deepseek-v2-lite-tiny qwen35moe-tiny deepseek4-tiny kimi-k3-tiny dense4; do
    "$D" logits -m "$T/$pre.gguf" -p "$P3" --out "$T/$pre.lg1" > /dev/null 2>&1
    DELTAFIN_PIPE_CHUNKS=6 "${MPI[@]}" -x DELTAFIN_PIPE_CHUNKS -np 3 "$D" logits -m "$T/$pre.gguf" -p "$P3" --split layers \
        --out "$T/$pre.lg3" > /dev/null 2>&1
    DELTAFIN_PIPE_CHUNKS=0 "${MPI[@]}" -x DELTAFIN_PIPE_CHUNKS -np 3 "$D" logits -m "$T/$pre.gguf" -p "$P3" --split layers \
        --out "$T/$pre.lg0" > /dev/null 2>&1
    check "$pre: a prompt in chunks over 3 stages: every row's logits bit-identical (and whole: too)" \
        sh -c "cmp -s '$T/$pre.lg1' '$T/$pre.lg3' && cmp -s '$T/$pre.lg1' '$T/$pre.lg0' && test -s '$T/$pre.lg1'"
done
# a dense model's prompt is cut by default: more messages than whole
msgs() { sed -n 's/^cluster: network: .* \([0-9.]*\) messages per token$/\1/p' "$1"; }
"${MPI[@]}" -np 2 "$D" run -m "$T/dense4.gguf" --mem 100M -c 256 -p "$P3" -n 2 --temp 0 --hot none -t 1 \
    --split layers > /dev/null 2> "$T/ch.e"
DELTAFIN_PIPE_CHUNKS=0 "${MPI[@]}" -x DELTAFIN_PIPE_CHUNKS -np 2 "$D" run -m "$T/dense4.gguf" --mem 100M -c 256 \
    -p "$P3" -n 2 --temp 0 --hot none -t 1 --split layers > /dev/null 2> "$T/ch0.e"
check "... the chunks were run: more messages a token ($(msgs "$T/ch.e")) than whole ($(msgs "$T/ch0.e"))" \
    awk -v a="$(msgs "$T/ch.e")" -v b="$(msgs "$T/ch0.e")" 'BEGIN { exit !(a > b && b > 0) }'
# several sequences in one pass (each run of rows against its own session's mirror on every rank)
printf '%s\n' "Once upon a time" "The old man and the sea" "A cat" "In the beginning there was" > "$T/prompts.txt"
"$D" run -m "$T/deepseek-v2-lite-tiny.gguf" --batch-file "$T/prompts.txt" -n 12 --temp 0 --hot none -t 1 --parallel 3 \
    > "$T/bat.1" 2> /dev/null
"${MPI[@]}" -np 3 "$D" run -m "$T/deepseek-v2-lite-tiny.gguf" --batch-file "$T/prompts.txt" -n 12 --temp 0 --hot none \
    -t 1 --parallel 3 --split layers > "$T/bat.3" 2> "$T/bat.e3"
check "--split layers: 4 prompts 3 at a time over 3 ranks, each as alone" cmp -s "$T/bat.1" "$T/bat.3"
check "... and not empty" test -s "$T/bat.3"
# under a budget: every rank streams its own layers only
"${MPI[@]}" -np 2 "$D" run "${Q[@]}" --split layers > "$T/bigL.2" 2> "$T/bigL.e2"
check "--split layers --mem, 2 ranks: the single process's text" cmp -s "$T/big.1" "$T/bigL.2"
l0=$(sed -n 's/^cluster: rank 0: .*read (\([0-9.]*\) MiB per token.*/\1/p' "$T/bigL.e2")
l1=$(sed -n 's/^cluster: rank 1: .*read (\([0-9.]*\) MiB per token.*/\1/p' "$T/bigL.e2")
echo "--split layers, bytes per token: one process $one MiB; rank 0 $l0, rank 1 $l1 MiB"
check "--split layers --mem: each rank reads less than one process (its layers only)" \
    awk -v a="$l0" -v b="$l1" -v c="$one" 'BEGIN { exit !(a > 0 && b > 0 && a < c && b < c) }'
# each rank's sessions keep only its own layers' memory: a context whose KV cache one process's budget cannot
# hold alongside the weights runs over 2 ranks with the same budget each, and says the same
K=(-m "$T/big.gguf" -c 8192 -p "Once upon a time" -n 8 --temp 0 --hot none -t 1)
"$D" run "${K[@]}" --mem 400M > "$T/kv.1" 2> /dev/null
"$D" run "${K[@]}" --mem 90M > /dev/null 2> "$T/kv.e1"
check "-c 8192 --mem 90M, one process: refused (the KV cache of 8 layers does not fit)" \
    grep -q "a budget of 90.0 MiB cannot run this model" "$T/kv.e1"
"${MPI[@]}" -np 2 "$D" run "${K[@]}" --mem 90M --split layers > "$T/kv.2" 2> "$T/kv.e2"
check "-c 8192 --mem 90M --split layers, 2 ranks: runs (each keeps 4 layers' KV cache)" test -s "$T/kv.2"
check "... and says what one process says" cmp -s "$T/kv.1" "$T/kv.2"
# serve and chat over a pipeline: three requests at once (one pass of three sessions' rows, in chunks), each
# answered as one process answers it, then a long prompt twice (the second from the server's prompt cache: a
# session's memory saved and loaded over the ranks); chat's turns the same
LONG="Once upon a time there was a little cat who lived in a big house by the sea, and every day the cat went down"
serve_texts() { # OUT [MPI -np N]: completions from a server on deepseek-v2-lite-tiny
    local out=$1 log="$T/srv.$1.log" port=""
    shift
    "$@" "$D" serve --port 0 -m "$T/deepseek-v2-lite-tiny.gguf" -t 1 --parallel 3 -c 256 --split layers > "$log" 2>&1 &
    local sp=$!
    PIDS+=($sp)
    for _ in $(seq 1 200); do
        port=$(sed -n 's/.*http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log")
        [ -n "$port" ] && break
        sleep 0.1
    done
    local cs=()
    for i in 1 2 3; do
        curl -s -m 60 "http://127.0.0.1:$port/v1/completions" -d "{\"prompt\":\"the cat $i sat on $LONG\",\"max_tokens\":16,\"temperature\":0}" > "$T/$out.$i" &
        cs+=($!)
    done
    wait "${cs[@]}"
    for i in 4 5; do
        curl -s -m 60 "http://127.0.0.1:$port/v1/completions" -d "{\"prompt\":\"$LONG\",\"max_tokens\":16,\"temperature\":0}" > "$T/$out.$i"
    done
    for i in 1 2 3 4 5; do # the text only (the ids and timings differ)
        node -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).choices[0].text)' \
            "$T/$out.$i" > "$T/$out.$i.t" 2> /dev/null
    done
    kill -TERM $sp 2> /dev/null
    wait $sp 2> /dev/null
}
serve_texts srv1
serve_texts srv2 env DELTAFIN_PIPE_CHUNKS=4 "${MPI[@]}" -x DELTAFIN_PIPE_CHUNKS -np 2 # prompts' passes in chunks
for i in 1 2 3; do
    check "serve --split layers, 2 ranks, request $i of 3 at once: one process's text" cmp -s "$T/srv1.$i.t" "$T/srv2.$i.t"
done
check "... not empty" test -s "$T/srv2.1.t"
cached=$(node -e 'process.stdout.write(String(JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")).usage.prompt_tokens_details.cached_tokens))' "$T/srv2.5" 2> /dev/null)
check "serve --split layers: a prompt again comes from the prompt cache (${cached:-?} tokens)" test "${cached:-0}" -gt 16
check "... with one process's text, both times" \
    sh -c "cmp -s '$T/srv1.4.t' '$T/srv2.4.t' && cmp -s '$T/srv1.4.t' '$T/srv2.5.t' && test -s '$T/srv2.5.t'"
# run --prompt-cache over a pipeline: the file one process writes, byte for byte, and either loads the other's
for pre in qwen35moe-tiny deepseek4-tiny kimi-k3-tiny deepseek-v2-lite-tiny; do
    PC=(-m "$T/$pre.gguf" -n 8 --temp 0 --hot none -t 1)
    "$D" run "${PC[@]}" -p "$P" --prompt-cache "$T/$pre.pc1" > /dev/null 2>&1
    "${MPI[@]}" -np 2 "$D" run "${PC[@]}" -p "$P" --prompt-cache "$T/$pre.pc2" --split layers > /dev/null 2>&1
    check "$pre: --prompt-cache over 2 stages: the file one process writes" cmp -s "$T/$pre.pc1" "$T/$pre.pc2"
    "$D" run "${PC[@]}" -p "$P and" > "$T/$pre.pcA" 2> /dev/null
    "${MPI[@]}" -np 3 "$D" run "${PC[@]}" -p "$P and" --prompt-cache "$T/$pre.pc1" --split layers > "$T/$pre.pcB" \
        2> "$T/$pre.pcBe"
    check "$pre: 3 stages load it (one process's), and say one process's text" \
        sh -c "grep -q 'prompt cache: [1-9][0-9]* of' '$T/$pre.pcBe' && cmp -s '$T/$pre.pcA' '$T/$pre.pcB'"
done
printf 'Tell me a story.\nAnd another.\n' | "$D" chat -m "$T/deepseek-v2-lite-tiny.gguf" --chat-template chatml --temp 0 -n 16 -t 1 \
    > "$T/chat.1" 2> /dev/null
printf 'Tell me a story.\nAnd another.\n' | "${MPI[@]}" -np 2 "$D" chat -m "$T/deepseek-v2-lite-tiny.gguf" --chat-template chatml --temp 0 -n 16 \
    -t 1 --split layers > "$T/chat.2" 2> "$T/chat.e2"
check "chat --split layers, 2 ranks, two turns: one process's answers" cmp -s "$T/chat.1" "$T/chat.2"
check "... not empty" test -s "$T/chat.2"
# what it cannot do yet is refused, never garbage; more ranks than layers is refused before any weight is read
"${MPI[@]}" -np 2 "$D" run "${Q[@]}" --split layers --spec lookup > /dev/null 2> "$T/specL.e"
check "--split layers --spec: refused" grep -q "speculative decoding: not with --split layers yet" "$T/specL.e"
# plan --ranks --split layers: the stages the run had, and a fit where one process does not
pl=(-m "$T/big.gguf" -c 8192 --mem 90M --hot none --disk-gbps 2 --mem-gbps 20 -t 1)
"$D" plan "${pl[@]}" > /dev/null 2>&1
check "plan -c 8192 --mem 90M, one process: does not fit (exit 1)" test $? -eq 1
pj=$("$D" plan "${pl[@]}" --ranks 2 --split layers --json 2> /dev/null)
check "plan --ranks 2 --split layers: fits (exit 0)" test $? -eq 0
stages=$(printf '%s' "$pj" | node -e 'const d = JSON.parse(require("fs").readFileSync(0, "utf8"));
    process.stdout.write(d.stages.map(s => `${s.layer_lo}-${s.layer_hi - 1}`).join(" ") + " " + (d.cluster_tokens_per_s > 0))')
ran=$(sed -n 's/^cluster: rank [0-9]: layers \([0-9]*-[0-9]*\),.*/\1/p' "$T/kv.e2" | tr '\n' ' ')
check "plan --ranks 2 --split layers: the run's stages ($ran), and a speed ($stages)" test "$stages" = "${ran}true"
out=$("$D" plan "${pl[@]}" --ranks 2 --split layers 2>&1)
check "... said: each rank's layers and its memory of a session" contains "$out" "rank 1: layers 4-7 (4 of 8): "
check "... and what the stages taking turns means" contains "$out" "the stages take turns"
out=$("$D" plan "${pl[@]}" --ranks 9 --split layers 2>&1)
check "plan --ranks 9 --split layers for 8 layers: refused" contains "$out" "9 ranks, but the model has 8 layers"
"${MPI[@]}" -np 3 "$D" run -m "$T/tiny.gguf" -p hi -n 2 --split layers > /dev/null 2> "$T/manyL.e"
check "--split layers, 3 ranks for 2 layers: refused" grep -q "3 ranks, but the model has 2 layers" "$T/manyL.e"

# ---- a rank killed mid-generation stops the job, naming it ----
kill_rank() { # RANK [FLAGS]: kill -9 it once the job is generating; prints the seconds the job took to end after
    # (without --quiet: mpirun's report of the dead rank is the message checked)
    "${NOLEAK[@]}" timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 "$D" run -m "$T/big.gguf" --mem 100M -c 2048 -p "Once" -n 100000 --ignore-eos --temp 0 \
        --hot none -t 1 "${@:2}" > "$T/kill.o" 2> "$T/kill.e" &
    local job=$! victim="" t0
    PIDS+=($job)
    for _ in $(seq 1 300); do [ -s "$T/kill.o" ] && break; sleep 0.1; done
    for p in $(pgrep -f "deltafin run -m $T/big.gguf --mem 100M"); do
        grep -qa "OMPI_COMM_WORLD_RANK=$1" "/proc/$p/environ" 2> /dev/null && victim=$p
    done
    [ -n "$victim" ] || { echo "no rank $1 found"; return; }
    kill -9 "$victim"
    t0=$(date +%s%N)
    for _ in $(seq 1 600); do kill -0 "$job" 2> /dev/null || break; sleep 0.05; done
    echo $(( ($(date +%s%N) - t0) / 1000000000 ))
    wait "$job" 2> /dev/null
}
for r in 1 0; do
    secs=$(kill_rank $r)
    echo "rank $r killed: the job ended after ${secs}s"
    check "rank $r killed: the job ends within 10 s" test -n "$secs" -a "${secs:-99}" -le 10 2> /dev/null
    check "rank $r killed: it had generated" test -s "$T/kill.o"
    check "rank $r killed: the message names rank $r" grep -q "process rank $r .*signal 9" "$T/kill.e"
    check "rank $r killed: no process left" test -z "$(pgrep -f "deltafin run -m $T/big.gguf --mem 100M")"
done
secs=$(kill_rank 1 --split layers)
echo "--split layers, rank 1 killed: the job ended after ${secs}s"
check "--split layers, rank 1 killed: the job ends within 10 s" test -n "$secs" -a "${secs:-99}" -le 10 2> /dev/null
check "--split layers, rank 1 killed: it had generated, and the message names rank 1" \
    bash -c 'test -s "$1" && grep -q "process rank 1 .*signal 9" "$2"' _ "$T/kill.o" "$T/kill.e"
check "--split layers, rank 1 killed: no process left" test -z "$(pgrep -f "deltafin run -m $T/big.gguf --mem 100M")"
# ---- a durable job: a rank killed mid-job, the cluster started again, the same text ----
# sharing experts, and over a pipeline (its checkpoints hold every stage's memory of the session)
jf() { "$D" job "$2" --db "$1" --json | grep -o "\"$3\":[^,}]*" | head -1 | cut -d: -f2- | tr -d '"'; }
JA=(-m "$T/big.gguf" -p "The dragon" -n 300 -c 512 --temp 0.9 --top-k 20 --seed 11 --ignore-eos --mem 100M)
ref=$("$D" submit "${JA[@]}" --db "$T/ref.db")
"$D" worker --drain --db "$T/ref.db" 2> /dev/null
"$D" job "$ref" --db "$T/ref.db" > "$T/ref.txt" 2> /dev/null
job_resumes() { # NAME [WORKER FLAGS]
    local name=$1 DB=$T/$1.db
    shift
    local jid
    jid=$("$D" submit "${JA[@]}" --db "$DB")
    "${NOLEAK[@]}" timeout 300 mpirun --allow-run-as-root --oversubscribe --quiet -np 2 "$D" worker --commit-every 0 \
        --db "$DB" "$@" > /dev/null 2> "$T/$name.e1" &
    local job=$!
    PIDS+=($job)
    for _ in $(seq 1 400); do [ "$(jf "$DB" "$jid" n_done)" -gt 20 ] 2> /dev/null && break; sleep 0.05; done
    local r0="" p
    for p in $(pgrep -f "deltafin worker --commit-every 0 --db $DB"); do
        grep -qa "OMPI_COMM_WORLD_RANK=0" "/proc/$p/environ" 2> /dev/null && r0=$p
        grep -qa "OMPI_COMM_WORLD_RANK=1" "/proc/$p/environ" 2> /dev/null && kill -9 "$p"
    done
    wait "$job" 2> /dev/null
    # mpirun may end before its rank 0 is gone; a job whose owner still lives is not an orphan yet
    for _ in $(seq 1 200); do [ -n "$r0" ] && [ -e "/proc/$r0" ] || break; sleep 0.05; done
    local mid
    mid=$(jf "$DB" "$jid" n_done)
    "$D" job "$jid" --db "$DB" > "$T/$name.mid" 2> /dev/null
    check "$name: killed mid-way (after $mid of 300 tokens)" test "$(jf "$DB" "$jid" state)" != done -a "${mid:-0}" -gt 0
    check "$name: what it committed is the uninterrupted text's start" \
        cmp -s -n "$(stat -c %s "$T/$name.mid")" "$T/$name.mid" "$T/ref.txt"
    "${NOLEAK[@]}" timeout 300 mpirun --allow-run-as-root --oversubscribe --quiet -np 2 "$D" worker --drain --db "$DB" \
        "$@" > /dev/null 2> "$T/$name.e2"
    check "$name: the cluster started again finishes it ($(jf "$DB" "$jid" state); $(tail -c 300 "$T/$name.e2"))" \
        test "$(jf "$DB" "$jid" state)" = done
    "$D" job "$jid" --db "$DB" > "$T/$name.final" 2> /dev/null
    check "$name: byte-identical to the uninterrupted run ($(stat -c %s "$T/$name.final") bytes)" \
        cmp -s "$T/$name.final" "$T/ref.txt"
    check "$name: it ran twice" test "$(jf "$DB" "$jid" runs)" -ge 2
}
job_resumes job
job_resumes job-layers --split layers
check "job-layers (--split layers): resumed from a checkpoint of both stages' memory" \
    grep -q "resumes from its checkpoint at position" "$T/job-layers.e2"
finish
