#!/usr/bin/env bash
# jobs_guard.sh - the job queue keeps what it is given, or says why not
# (issue 31 items 4, 6, 7, 8, 9, 15, 17).
#   tests/cli/jobs_guard.sh BUILD_DIR
# - --db names a file on disk of this user: '', :memory:, file: URIs,
#   a symbolic link, a folder, a FIFO and a device are refused in our words
#   (a job submitted there would vanish, or SQLite would write beside /dev);
#   a database the user may only read is listed read-only.
# - A job resumes on the model it began with: a model file replaced between
#   two runs fails the job, saying so, instead of mixing two models' text.
# - A run killed with SIGKILL without --mem is run again from its checkpoint
#   (a restart event) and completes; `requeue` puts a failed job back.
# - A damaged database is an error, not a job "done" with part of its text;
#   a database removed while a worker runs stops the worker with an error.
set -u
B=${1:-build}
D="$B/deltafin"
case "$D" in /*) ;; *) D="$PWD/$D" ;; esac
T=$(mktemp -d /tmp/deltafin-jobs-guard-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
SLOW=1; [ -n "${DELTAFIN_SANITIZED:-}" ] && SLOW=4
"$B/mkmodel" -o "$T/m.gguf" --preset qwen3moe-tiny --type q8_0 2>/dev/null || { echo "mkmodel failed"; exit 1; }
"$B/mkmodel" -o "$T/other.gguf" --preset qwen3moe-tiny --type q8_0 --seed 7 2>/dev/null || { echo "mkmodel failed"; exit 1; }
DB="$T/jobs.db"
j() { "$D" "$@" --db "$DB"; }
field() { j job "$1" --json | jq -r ".$2"; }

# ---- where the database may be ----
for bad in "" ":memory:" "file:x?mode=memory"; do
    e=$("$D" submit --db "$bad" -m "$T/m.gguf" -p hi 2>&1); rc=$?
    check "--db '$bad': refused (rc $rc)" test "$rc" -ne 0
    check "... with no job id printed" test -z "$(grep -x '[0-9][0-9]*' <<< "$e")"
done
check "... ':memory:' named as not a file on disk" contains "$("$D" jobs --db :memory: 2>&1)" "not a file on disk"
echo x > "$T/victim"; ln -s "$T/victim" "$T/link.db"; mkdir "$T/dir.db"; mkfifo "$T/fifo.db"
e=$("$D" jobs --db "$T/link.db" 2>&1);  check "--db a symlink: refused, in our words" contains "$e" "symbolic link"
e=$("$D" jobs --db "$T/dir.db" 2>&1);   check "--db a folder: refused, in our words" contains "$e" "folder"
e=$(timeout $((20 * SLOW)) "$D" jobs --db "$T/fifo.db" 2>&1); check "--db a FIFO: refused at once" contains "$e" "not a regular file"
e=$("$D" jobs --db /dev/null 2>&1); check "--db /dev/null: refused" contains "$e" "not a regular file"
check "... and no journal left in /dev" test ! -e /dev/null-wal -a ! -e /dev/null-journal
check "the symlink's target is untouched" test "$(cat "$T/victim")" = x

# ---- the model a job began with ----
id=$(j submit -m "$T/m.gguf" -p "Once upon a time" -n 20000 -c 32768 --temp 0 --ignore-eos)
"$D" worker --db "$DB" --commit-every 0.05 --no-checkpoints 2>"$T/w1.log" & wpid=$!; pids+=($wpid)
for _ in $(seq 1 $((200 * SLOW))); do [ "$(field "$id" n_done)" -ge 8 ] 2>/dev/null && break; sleep 0.05; done
kids=$(pgrep -P "$wpid"); kill -9 "$wpid" $kids; wait "$wpid" 2>/dev/null
for _ in $(seq 1 100); do [ -z "$kids" ] || ! kill -0 $kids 2>/dev/null && break; sleep 0.05; done
done_before=$(field "$id" n_done)
check "the first run committed tokens ($done_before) and was stopped before the end" test "$done_before" -gt 0 -a "$done_before" -lt 20000
cp "$T/other.gguf" "$T/m.gguf.new" && mv "$T/m.gguf.new" "$T/m.gguf" # another model in its place
j worker --drain 2>"$T/w2.log"
check "a replaced model: the job failed" test "$(field "$id" state)" = failed
check "... saying the model changed" contains "$(field "$id" error)" "changed since the job began"
check "... its committed text kept as it was" test "$(field "$id" n_done)" = "$done_before"

# ---- requeue: a failed job runs again, resuming after what it committed ----
"$B/mkmodel" -o "$T/m2.gguf" --preset qwen3moe-tiny --type q8_0 2>/dev/null
id2=$(j submit -m "$T/m2.gguf" -p "Once upon a time" -n 24 --temp 0 --ignore-eos)
j cancel "$id2" 2>/dev/null
e=$(j requeue "$id2" 2>&1); check "requeue a canceled job: said ($e)" contains "$e" "queued again"
check "... it is queued" test "$(field "$id2" state)" = queued
j worker --drain 2>/dev/null
check "... and completes" test "$(field "$id2" state)" = done
e=$(j requeue "$id2" 2>&1; echo "rc=$?"); check "requeue a done job: refused" contains "$e" "rc=1"
e=$(j requeue 99999 2>&1; echo "rc=$?"); check "requeue an unknown job: refused" contains "$e" "no job 99999"

# ---- SIGKILL of the run without --mem: run again from its checkpoint ----
"$D" run -m "$T/m2.gguf" -p "Once upon a time" -n 3000 -c 4096 --temp 0 --ignore-eos 2>/dev/null > "$T/ref.txt"
id3=$(j submit -m "$T/m2.gguf" -p "Once upon a time" -n 3000 -c 4096 --temp 0 --ignore-eos)
"$D" worker --db "$DB" --drain --commit-every 0.05 2>"$T/w3.log" & wpid=$!; pids+=($wpid)
child=
for _ in $(seq 1 $((200 * SLOW))); do
    child=$(pgrep -P "$wpid" | head -1)
    [ -n "$child" ] && [ "$(field "$id3" n_done)" -ge 8 ] 2>/dev/null && break
    sleep 0.05
done
[ -n "$child" ] && kill -9 "$child"
wait "$wpid"; wrc=$?
check "the run's process was killed once (pid ${child:-none})" test -n "$child"
check "... the worker went on and exited 0 ($wrc)" test "$wrc" = 0
check "... the job completed" test "$(field "$id3" state)" = done
check "... with a restart event" test "$(j job "$id3" --json | jq -r '[.events[] | select(.kind == "restart")] | length')" -ge 1
j job "$id3" > "$T/text3" 2>/dev/null
{ printf 'Once upon a time'; cat "$T/text3"; echo; } > "$T/want3"
check "... and the uninterrupted run's text" cmp -s "$T/want3" "$T/ref.txt"

# ---- a damaged database: an error, not a job "done" with part of its text ----
DB="$T/dmg.db"
id5=$(j submit -m "$T/m2.gguf" -p "Once upon a time" -n 3000 -c 4096 --temp 0 --ignore-eos)
j worker --drain 2>/dev/null; j jobs > /dev/null # the WAL folded back into the file
sz=$(stat -c %s "$DB")
dd if=/dev/urandom of="$DB" bs=4096 seek=$((sz / 4096 - 3)) count=2 conv=notrunc 2>/dev/null
e=$(j job "$id5" 2>&1 >/dev/null); rc=$?
check "job ID on a damaged database: exit 1 ($rc)" test "$rc" = 1
check "... saying the database is damaged" contains "$e" "malformed"
DB="$T/jobs.db"

# ---- the database removed while a worker runs ----
id4=$(j submit -m "$T/m2.gguf" -p "Once upon a time" -n 20000 --temp 0 --ignore-eos -c 32768)
"$D" worker --db "$DB" --drain --commit-every 0.05 2>"$T/w4.log" & wpid=$!; pids+=($wpid)
for _ in $(seq 1 $((200 * SLOW))); do [ "$(field "$id4" n_done)" -ge 8 ] 2>/dev/null && break; sleep 0.05; done
rm -f "$DB" "$DB-wal" "$DB-shm"
wait "$wpid"; wrc=$?
check "a database removed under the worker: it exits 1 ($wrc)" test "$wrc" = 1
check "... saying so" grep -q "was removed while it was in use" "$T/w4.log"
finish
