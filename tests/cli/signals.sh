#!/usr/bin/env bash
# signals.sh - a run ended from outside ends cleanly and says so.
#   tests/cli/signals.sh BUILD_DIR
# SIGINT/SIGTERM: the run stops, reports and saves the learned hot set, exit
# 128 + signal (hardening issue item 12). A model file truncated under a
# mapped run (item 8), or overwritten in place (item 9), ends it with a
# message and exit 1, never a silent SIGBUS or garbage with exit 0.
set -u
B=${1:-build}
D="$B/deltafin"
T=$(mktemp -d /tmp/deltafin-sig-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
# the exit status of PID, killing it if it runs on for more than 30 s
wait_exit() {
    timeout 30 tail --pid="$1" -f /dev/null || kill -9 "$1" 2>/dev/null
    wait "$1"
}
# wait until FILE has more than N bytes (the run is generating), at most 30 s
wait_output() {
    for _ in $(seq 300); do [ "$(stat -c %s "$1" 2>/dev/null || echo 0)" -gt "$2" ] && return 0; sleep 0.1; done
    return 1
}
"$B/mkmodel" -o "$T/moe.gguf" --preset qwen3moe-tiny --type q8_0 2>/dev/null || { echo "mkmodel failed"; exit 1; }
"$B/mkmodel" -o "$T/dense.gguf" --arch llama --type q8_0 2>/dev/null || { echo "mkmodel failed"; exit 1; }
long=(-p hi -n 100000 -c 100000 --ignore-eos --temp 0.8 --seed 1)

# SIGINT and SIGTERM: report, save the hot set, exit 128 + signal
for sig in INT TERM; do
    rm -f "$T/moe.gguf.hot"
    "$D" run -m "$T/moe.gguf" "${long[@]}" --mem 256M > "$T/out" 2> "$T/err" & pid=$!; pids+=("$pid")
    wait_output "$T/out" 64
    kill -"$sig" "$pid"
    wait_exit "$pid"; rc=$?
    want=$((128 + $(kill -l "$sig")))
    check "SIG$sig: exit $want" test "$rc" -eq "$want"
    check "SIG$sig: says it stopped" grep -q "stopped by SIG$sig" "$T/err"
    check "SIG$sig: still reports the run" grep -q "generation:.*tokens/s" "$T/err"
    check "SIG$sig: the learned hot set is saved" grep -q "^deltafin-hot 1" "$T/moe.gguf.hot"
done

# a mapped model (--mmap: small ones are read in by default) truncated during
# the run: a message and exit 1 (not a bare SIGBUS)
cp "$T/dense.gguf" "$T/d1.gguf"
"$D" run -m "$T/d1.gguf" --mmap "${long[@]}" > "$T/out" 2> "$T/err" & pid=$!; pids+=("$pid")
wait_output "$T/out" 64
truncate -s 4096 "$T/d1.gguf"
wait_exit "$pid"; rc=$?
check "model truncated under a mapped run: exit 1" test "$rc" -eq 1
check "model truncated under a mapped run: says so" grep -q "truncated" "$T/err"

# a model overwritten in place during the run: an error, not token 0 forever with exit 0
cp "$T/dense.gguf" "$T/d2.gguf"
size=$(stat -c %s "$T/d2.gguf")
"$D" run -m "$T/d2.gguf" "${long[@]}" > "$T/out" 2> "$T/err" & pid=$!; pids+=("$pid")
wait_output "$T/out" 64
dd if=/dev/zero of="$T/d2.gguf" bs=4096 seek=1 count=$(( (size - 4096) / 4096 )) conv=notrunc status=none
wait_exit "$pid"; rc=$?
check "model overwritten under a run: exit 1" test "$rc" -eq 1
check "model overwritten under a run: says so" grep -qE "modified|non-finite" "$T/err"
# a prompt read from an idle pipe (issue 31 item 11): the first SIGTERM ends the run at once, exit 143 (it was
# swallowed: SA_RESTART resumed the read, and `timeout` never ended it); a FIFO named as -f is refused at once
mkfifo "$T/idle"
exec 3<> "$T/idle" # held open: no end of file, no data
t0=$(date +%s.%N)
timeout -s TERM --preserve-status -k 10 1 "$D" run -m "$T/dense.gguf" -f - -n 2 < "$T/idle" > /dev/null 2>&1; rc=$?
dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')
exec 3>&-
check "run -f - on an idle pipe: SIGTERM ends it (exit $rc, 143 wanted)" test "$rc" -eq 143
check "... within a second of the signal (${dt}s in all)" awk -v d="$dt" 'BEGIN{exit !(d < 3)}'
e=$(timeout -k 5 10 "$D" run -m "$T/dense.gguf" -f "$T/idle" -n 2 2>&1 >/dev/null; echo "rc=$?")
check "run -f FIFO: refused at once (exit 1)" contains "$e" "rc=1"
check "... saying what it is" contains "$e" "FIFO"
finish
