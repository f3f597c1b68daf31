#!/usr/bin/env bash
# serve_cache.sh - `deltafin serve`'s prefix caches (server/pcache.c): a
# prompt that starts like an earlier one restores the earlier state from
# memory, or after a restart from --prompt-cache-dir, and gives the same
# greedy text as a server without caches; damaged files are refused and
# ignored; files the server did not create are never touched.
#   tests/cli/serve_cache.sh BUILD_DIR
# The model: the tiny real stories260K, one slot (so its own KV cache holds
# the last request, and a reused prefix can only come from the caches).
set -u
B=${1:-build}
D="$B/deltafin"
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
T=$(mktemp -d /tmp/deltafin-pcache-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
SLOW=1; [ -n "${DELTAFIN_SANITIZED:-}" ] && SLOW=4

start() { # LOG ARGS...: a server in the background; sets PORT and U
    local log=$1; shift
    "$D" serve --port 0 -m "$S" --parallel 1 -c 512 "$@" > "$log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 1 $((100 * SLOW))); do
        PORT=$(sed -n 's/.*http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log")
        [ -n "$PORT" ] && U="http://127.0.0.1:$PORT" && return 0
        sleep 0.1
    done
    echo "server did not start:"; cat "$log"; exit 1
}
stop() { kill -INT "${PIDS[-1]}"; wait "${PIDS[-1]}"; unset 'PIDS[-1]'; }
ask() { # PROMPT: the whole JSON answer of a greedy completion
    curl -s -H "Content-Type: application/json" "$U/v1/completions" \
        -d "{\"prompt\":\"$1\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true}"
}
metric() { curl -s "$U/metrics" | awk -v k="deltafin_$1" '$1 == k {print $2}'; }

SYS="Once upon a time there was a little girl named Lily who lived in a small house near the big green forest with her mother and her father and her old dog Max who liked to run and play in the garden every day."
A="$SYS Lily said hello to the sun."
X="The big red ball rolled down the hill and the boy ran after it as fast as he could go."
C="$SYS One day Lily found a shiny stone."
ntok=$("$D" tokenize -m "$S" -p "$SYS" | wc -l)

# the reference: no caches at all
start "$T/ref.log" --prompt-cache-mem 0
want=$(ask "$C" | jq -r '.choices[0].text')
stop
check "the reference: 24 tokens of text" test -n "$want"

# memory: A is kept; X takes the slot; C restores A's state cut to the shared prefix
start "$T/a.log" --prompt-cache-dir "$T/pc"
ask "$A" > /dev/null; ask "$X" > /dev/null
r=$(ask "$C")
check "memory: the same greedy text as without caches" test "$(jq -r '.choices[0].text' <<< "$r")" = "$want"
cached=$(jq -r '.usage.prompt_tokens_details.cached_tokens' <<< "$r")
check "memory: usage says $cached prompt tokens cached (the system prompt: about $ntok)" test "$cached" -ge $((ntok - 2))
check "memory: one hit in /metrics" test "$(metric prefix_cache_hits_memory_total)" = 1
check "memory: tokens reused in /metrics" test "$(metric prefix_cache_tokens_reused_total)" = "$cached"
check "disk: three prompts written" test "$(metric prefix_cache_disk_entries)" = 3
check "disk: three files named dfpc-*.bin" test "$(ls "$T/pc" | grep -c '^dfpc-[0-9a-f]*\.bin$')" = 3
stop

# a file we did not create, with our naming, and a foreign file: left alone
printf 'not a cache' > "$T/pc/dfpc-0000000000000000.bin"; printf 'mine' > "$T/pc/notes.txt"
# restart: the memory tier is empty, the disk tier serves C
start "$T/b.log" --prompt-cache-dir "$T/pc"
r=$(ask "$C")
check "disk after a restart: the same greedy text" test "$(jq -r '.choices[0].text' <<< "$r")" = "$want"
check "disk after a restart: a disk hit" test "$(metric prefix_cache_hits_disk_total)" = 1
check "disk after a restart: all of C's prompt but its last token reused (C's own file)" \
    test "$(jq -r '.usage.prompt_tokens_details.cached_tokens' <<< "$r")" = $(($(jq -r '.usage.prompt_tokens' <<< "$r") - 1))
stop
check "a file with our name we did not write: untouched" test "$(cat "$T/pc/dfpc-0000000000000000.bin")" = "not a cache"
check "another file: untouched" test "$(cat "$T/pc/notes.txt")" = mine

# damage every cache file's last byte: refused with a message, ignored, the text unchanged
for f in "$T"/pc/dfpc-*.bin; do
    [ "$f" = "$T/pc/dfpc-0000000000000000.bin" ] && continue
    sz=$(stat -c %s "$f"); printf '\x5a' | dd of="$f" bs=1 seek=$((sz - 1)) conv=notrunc 2>/dev/null
done
start "$T/c.log" --prompt-cache-dir "$T/pc"
r=$(ask "$C")
check "damaged files: the same greedy text" test "$(jq -r '.choices[0].text' <<< "$r")" = "$want"
check "damaged files: no disk hit" test "$(metric prefix_cache_hits_disk_total)" = 0
check "damaged files: refused (counted)" test "$(metric prefix_cache_disk_errors_total)" -ge 1
stop
check "damaged files: a clear message in the log" grep -q "prompt cache refused and ignored: .*checksum" "$T/c.log"

# another model's folder: its files are not ours to use
"$B/mkmodel" -o "$T/other.gguf" --preset tiny --type f32 2>/dev/null || { echo "mkmodel failed"; exit 1; }
n_before=$(ls "$T/pc" | wc -l)
"$D" serve --port 0 -m "$T/other.gguf" --parallel 1 -c 512 --prompt-cache-dir "$T/pc" > "$T/d.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 $((100 * SLOW))); do grep -q 'http://' "$T/d.log" && break; sleep 0.1; done
PORT=$(sed -n 's/.*http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$T/d.log"); U="http://127.0.0.1:$PORT"
check "another model: none of the files indexed" test "$(metric prefix_cache_disk_entries)" = 0
stop
check "another model: no file removed" test "$(ls "$T/pc" | wc -l)" -ge "$n_before"

r=$("$D" serve -m "$S" --prompt-cache-mem lots 2>&1); check "a bad --prompt-cache-mem: usage error naming it" contains "$r" "--prompt-cache-mem expects a size"
finish
