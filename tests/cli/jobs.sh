#!/usr/bin/env bash
# jobs.sh - the durable job queue (docs/jobs.md, issue 15).
#   tests/cli/jobs.sh BUILD_DIR
# submit/jobs/job/cancel and their errors; a worker killed with SIGKILL at
# random moments (>= 20 times) and restarted finishes a streamed MoE job with
# text byte-identical to an uninterrupted run, and no committed token is ever
# lost or changed (checked after every kill); 50 jobs submitted at once from
# several processes are all run, each exactly once, by several workers.
set -u
B=${1:-build}
D="$B/deltafin"
T=$(mktemp -d /tmp/deltafin-jobs-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
trap 'exit 1' INT TERM HUP # the workers hold inherited descriptors (the CPU lock's too): never leave one behind
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
"$B/mkmodel" -o "$T/moe.gguf" --preset qwen3moe-tiny --type q8_0 2>/dev/null || { echo "mkmodel failed"; exit 1; }
DB="$T/q/jobs.db"
j() { "$D" "$@" --db "$DB"; }
field() { # JOB FIELD: a number or string field of `job ID --json`
    j job "$1" --json | grep -o "\"$2\":[^,}]*" | head -1 | cut -d: -f2- | tr -d '"'
}

# ---- submit, jobs, job, cancel ----
id1=$(j submit -m "$T/moe.gguf" -p "Once upon a time" -n 24 --temp 0 --ignore-eos 2>"$T/err")
check "submit prints the id alone" grep -qx '[0-9][0-9]*' <<< "$id1"
check "the database's directory is private (0700)" test "$(stat -c %a "$T/q")" = 700
id2=$(j submit -m "$T/moe.gguf" -p "Cancel me" -n 8 --priority 5)
id3=$(j submit -m "$T/moe.gguf" -p "Late" -n 8 --deadline +1s)
id4=$(j submit -m "$T/moe.gguf" -p "Urgent" -n 8 --priority 9 --temp 0.7 --seed 3)
list=$(j jobs)
check "jobs lists every job as queued" test "$(grep -c ' queued ' <<< "$list")" -eq 4
check "jobs has the columns" contains "$list" "TOKENS/S"
check "cancel a queued job" j cancel "$id2"
check "its state is canceled" test "$(field "$id2" state)" = canceled
j cancel "$id2" 2>"$T/err"; rc=$?
check "cancel of an ended job: exit 1, says so" test "$rc" -eq 1 -a -n "$(grep 'already ended' "$T/err")"
j job 99999 >/dev/null 2>"$T/err"; rc=$?
check "an unknown job: exit 1" test "$rc" -eq 1
j submit -m "$T/moe.gguf" -n 3 >/dev/null 2>&1; rc=$?
check "submit without a prompt: usage error" test "$rc" -eq 2
j submit -m "$T/moe.gguf" -p x --deadline tomorrow >/dev/null 2>&1; rc=$?
check "a bad --deadline: usage error" test "$rc" -eq 2
j submit -m "$T/moe.gguf" -p x --deadline 1 >/dev/null 2>&1; rc=$?
check "a --deadline in the past: usage error" test "$rc" -eq 2
j submit -m "$T" -p x >/dev/null 2>&1; rc=$?
check "a folder as the model: exit 1" test "$rc" -eq 1
mkfifo "$T/fifo.gguf"; j submit -m "$T/fifo.gguf" -p x >/dev/null 2>&1; rc=$?
check "a FIFO as the model: exit 1 (never waited on)" test "$rc" -eq 1
echo '{"messages": {"role": "user"}}' > "$T/bad-chat.json"
j submit -m "$T/moe.gguf" --chat "$T/bad-chat.json" >/dev/null 2>"$T/err"; rc=$?
check "--chat whose messages are not a list: exit 1" test "$rc" -eq 1
echo '[{"role": "user", "content": "hi"}]' > "$T/chat.json"
j submit -m "$T/moe.gguf" --chat "$T/chat.json" >/dev/null 2>"$T/err"; rc=$?
check "--chat for a model without a template: exit 1, saying so" test "$rc" -eq 1 -a -n "$(grep 'no chat template' "$T/err")"
j submit -m "$T/none.gguf" -p x >/dev/null 2>&1; rc=$?
check "a missing model: exit 1" test "$rc" -eq 1
mkdir "$T/real"; ln -s "$T/real" "$T/link"
"$D" jobs --db "$T/link/jobs.db" >/dev/null 2>"$T/err"; rc=$?
check "a database directory that is a symbolic link is refused" test "$rc" -eq 1 -a ! -e "$T/real/jobs.db"
ln -s "$T/real/x.db" "$T/q/link.db"
"$D" jobs --db "$T/q/link.db" >/dev/null 2>&1; rc=$?
check "a database file that is a symbolic link is refused" test "$rc" -eq 1 -a ! -e "$T/real/x.db"

sleep 1.2 # the "Late" job's deadline passes
j worker --drain 2>"$T/worker.log"
check "worker --drain ends with exit 0" test $? -eq 0
check "the job ran to done" test "$(field "$id1" state)" = done
check "with all its tokens" test "$(field "$id1" n_done)" = 24
check "the canceled job never ran" test "$(field "$id2" runs)" = 0
check "a job past its deadline expired" test "$(field "$id3" state)" = expired
check "the higher priority ran first" test "$(field "$id4" started)" \< "$(field "$id1" started)"
# the job's text is what `run` prints after the prompt
j job "$id1" > "$T/text1" 2>/dev/null
"$D" run -m "$T/moe.gguf" -p "Once upon a time" -n 24 --temp 0 --ignore-eos > "$T/run1" 2>/dev/null
{ printf 'Once upon a time'; cat "$T/text1"; echo; } > "$T/want1"
check "the job's text is run's text (greedy)" cmp -s "$T/want1" "$T/run1"
j job "$id4" > "$T/text4" 2>/dev/null
"$D" run -m "$T/moe.gguf" -p "Urgent" -n 8 --temp 0.7 --seed 3 > "$T/run4" 2>/dev/null
{ printf 'Urgent'; cat "$T/text4"; echo; } > "$T/want4"
check "the job's text is run's text (seeded)" cmp -s "$T/want4" "$T/run4"
check "job --json has the text" contains "$(j job "$id1" --json)" "\"text\":\""
check "job --follow of an ended job prints its text" cmp -s <(j job "$id1" --follow 2>/dev/null) "$T/text1"
# --page-cache (docs/memory.md) travels with the job: the worker streams through the page cache, same text
pc=(-m "$T/moe.gguf" -p "The page" -n 16 --temp 0 --ignore-eos --mem 34M)
idp=$(j submit "${pc[@]}" --page-cache); idn=$(j submit "${pc[@]}")
check "submit --page-cache: the job says so" test "$(field "$idp" page_cache)" = true
check "a job without it says so too" test "$(field "$idn" page_cache)" = false
j worker --drain 2>/dev/null
check "the --page-cache job ran to done" test "$(field "$idp" state)" = done
"$D" run "${pc[@]}" --page-cache > "$T/runp" 2>/dev/null
{ printf 'The page'; j job "$idp" 2>/dev/null; echo; } > "$T/wantp"
check "its text is run --page-cache's text" cmp -s "$T/wantp" "$T/runp"
check "and the text of the same job without it" cmp -s <(j job "$idp" 2>/dev/null) <(j job "$idn" 2>/dev/null)

# ---- crash: SIGKILL at random moments, restart, nothing lost ----
# The MoE model streams its experts under a budget below its size. Two kinds
# of kill: at a random moment after the start (loading, replaying, or
# generating), and a random moment after the job has made progress (so the
# worker is committing: with --commit-every 0 it commits every token).
N=1000
args=(-m "$T/moe.gguf" -p "The dragon" -n $N -c 1024 --temp 0.9 --top-k 20 --seed 11 --repeat-penalty 1.1 --ignore-eos
      --mem 34M)
ref=$("$D" submit "${args[@]}" --db "$T/ref.db")
"$D" worker --drain --db "$T/ref.db" 2>/dev/null
"$D" job "$ref" --db "$T/ref.db" > "$T/ref.txt" 2>/dev/null
check "the reference job completed" test "$("$D" job "$ref" --db "$T/ref.db" --json | grep -c '"state":"done"')" -eq 1
# However fast the machine (or slow, under the sanitizers), at least 20
# kills: when a job ends before that, the same job is submitted again and
# the killing goes on (every one of them must end byte-identical).
kills=0; bad=0; cids=()
RANDOM=4242
while [ "$kills" -lt 20 ] && [ "${#cids[@]}" -lt 6 ]; do
    cid=$(j submit "${args[@]}"); cids+=("$cid")
    : > "$T/prev.txt"; prev_n=0
    for round in $(seq 200); do
        [ "$(field "$cid" state)" = done ] && break
        "$D" worker --commit-every 0 --db "$DB" 2>>"$T/crash.log" & pid=$!; pids+=("$pid") # the process itself, not a subshell
        if [ $((round % 3)) -eq 0 ]; then
            sleep "0.0$((RANDOM % 10))"
        else # wait for a new commit (at most 20 s), then a little more
            for _ in $(seq 400); do [ "$(field "$cid" n_done)" -gt "$prev_n" ] && break; sleep 0.05; done
            sleep "0.0$((RANDOM % 5))"
        fi
        kill -9 "$pid" 2>/dev/null && kills=$((kills + 1))
        wait "$pid" 2>/dev/null
        j job "$cid" > "$T/now.txt" 2>/dev/null
        n=$(field "$cid" n_done)
        # committed text only grows, and is always a prefix of the uninterrupted text
        if ! cmp -s -n "$(stat -c %s "$T/prev.txt")" "$T/prev.txt" "$T/now.txt" ||
           ! cmp -s -n "$(stat -c %s "$T/now.txt")" "$T/now.txt" "$T/ref.txt" || [ "$n" -lt "$prev_n" ]; then
            bad=$((bad + 1)); echo "after kill $kills: committed text changed or shrank ($prev_n -> $n tokens)"
        fi
        cp "$T/now.txt" "$T/prev.txt"; prev_n=$n
    done
    j worker --drain 2>>"$T/crash.log"
done
echo "crash test: $kills kills over ${#cids[@]} job(s), $(grep -c resumes "$T/crash.log") resumes, $N tokens each"
check "at least 20 kills" test "$kills" -ge 20
check "no committed token was lost or changed after any kill" test "$bad" -eq 0
done_n=0; same_n=0; resumed_n=0; ck_n=0
for cid in "${cids[@]}"; do
    [ "$(field "$cid" state)" = done ] && done_n=$((done_n + 1))
    j job "$cid" > "$T/final.txt" 2>/dev/null
    cmp -s "$T/final.txt" "$T/ref.txt" && same_n=$((same_n + 1))
    [ "$(field "$cid" runs)" -gt 1 ] && resumed_n=$((resumed_n + 1))
    [ "$(grep -c "job $cid resumes from its checkpoint" "$T/crash.log")" -ge 1 ] && ck_n=$((ck_n + 1))
done
check "every killed job completed ($done_n of ${#cids[@]})" test "$done_n" -eq "${#cids[@]}"
check "their texts are byte-identical to the uninterrupted run ($same_n of ${#cids[@]})" test "$same_n" -eq "${#cids[@]}"
check "they resumed after kills ($resumed_n of ${#cids[@]})" test "$resumed_n" -eq "${#cids[@]}"
check "some resumed from session checkpoints ($ck_n of ${#cids[@]})" test "$ck_n" -ge 1

# ---- a damaged checkpoint is detected, deleted, and the job recomputes ----
cid2=$(j submit "${args[@]}")
ck="$T/q/checkpoints/job-$cid2.snap"
run_until() { # run a worker until the job has more than N committed tokens and a checkpoint, then kill it
    "$D" worker --commit-every 0 --db "$DB" 2>>"$T/damage.log" & local pid=$!; pids+=("$pid")
    for _ in $(seq 400); do [ "$(field "$cid2" n_done)" -gt "$1" ] && [ -f "$ck" ] && break; sleep 0.05; done
    kill -9 "$pid"; wait "$pid" 2>/dev/null
}
run_until 40
check "a checkpoint was written" test -f "$ck"
printf '\xff\xfe\xfd' | dd of="$ck" bs=1 seek=$(( $(stat -c %s "$ck") / 2 )) conv=notrunc 2>/dev/null
run_until 120
check "a checkpoint with flipped bytes is discarded" grep -q "job $cid2: checkpoint discarded: .*checksum" "$T/damage.log"
truncate -s -100 "$ck"
j worker --drain 2>>"$T/damage.log"
check "a truncated checkpoint is discarded" grep -q "job $cid2: checkpoint discarded: .*truncated" "$T/damage.log"
j job "$cid2" > "$T/final2.txt" 2>/dev/null
check "the job still completes byte-identically" cmp -s "$T/final2.txt" "$T/ref.txt"
check "an ended job's checkpoint is removed" test ! -e "$ck"

# ---- concurrency: 50 jobs from 5 processes, 3 workers, each job run once ----
CDB="$T/c.db"
for p in 1 2 3 4 5; do
    ( for i in $(seq 10); do "$D" submit -m "$T/moe.gguf" -p "job $p $i" -n 3 --temp 0 --db "$CDB" || echo FAIL; done ) \
        > "$T/sub$p" 2>&1 &
    pids+=("$!")
done
wait
check "50 submits from 5 processes: 50 distinct ids" test "$(cat "$T"/sub? | grep -x '[0-9]*' | sort -u | wc -l)" -eq 50
for w in 1 2 3; do "$D" worker --drain --db "$CDB" 2> "$T/w$w.log" & pids+=("$!"); done
wait
# ---- why a job stopped; what submit refuses; --follow without a worker (issue 37) ----
WDB="$T/why/jobs.db"
w() { "$D" "$@" --db "$WDB"; }
w submit -m "$T/moe.gguf" -p "Once" -n 8 --mem 1K > /dev/null 2> "$T/err"; rc=$?
check "submit --mem 1K: refused at once (exit 1), naming the minimum" \
    test "$rc" -eq 1 -a -n "$(grep 'not submitted: --mem 1.0 KiB is below the .* this model needs' "$T/err")"
echo "not a model" > "$T/text.gguf"
w submit -m "$T/text.gguf" -p "Once" -n 8 > /dev/null 2> "$T/err"; rc=$?
check "submit of a file that is not a model: refused at once" test "$rc" -eq 1 -a -n "$(grep 'not submitted' "$T/err")"
check "... and neither is queued" test -z "$(w jobs 2> /dev/null | grep -v '^ *ID')"
full=$(w submit -m "$T/moe.gguf" -p "Once upon a time" -n 500 -c 32 --temp 0 --ignore-eos)
whole=$(w submit -m "$T/moe.gguf" -p "Once upon a time" -n 6 --temp 0 --ignore-eos)
timeout 20 "$D" job "$full" --follow --db "$WDB" > /dev/null 2> "$T/follow.err" &
fpid=$!
sleep 3
kill "$fpid" 2> /dev/null; wait "$fpid" 2> /dev/null
check "job --follow of a queued job with no worker says so" grep -q "is queued and no worker serves" "$T/follow.err"
w worker --drain > /dev/null 2>&1
list=$(w jobs)
check "jobs says why a job stopped early: the context filled" grep -q "^ *$full .*the context filled" <<< "$list"
check "... and when it ran to its end: all tokens" grep -q "^ *$whole .*all tokens" <<< "$list"
late=$(w submit -m "$T/moe.gguf" -p "Once upon a time" -n 40 --temp 0 --ignore-eos)
w worker > "$T/late-worker.log" 2>&1 &
wpid=$!
pids+=("$wpid")
w job "$late" --follow > "$T/late.out" 2> "$T/late.err"; rc=$?
kill "$wpid" 2> /dev/null; wait "$wpid" 2> /dev/null
check "job --follow with a worker running: exit 0, no word of a missing worker" \
    test "$rc" -eq 0 -a -z "$(grep 'no worker' "$T/late.err")"
check "... its figures at the end (tokens, tokens/s)" grep -q "^job $late: done, 40/40 tokens, .* tokens/s: all tokens" "$T/late.err"
check "... and the text alone on stdout" test -z "$(grep -a 'tokens/s' "$T/late.out")" -a -s "$T/late.out"

list=$("$D" jobs --db "$CDB")
check "all 50 done" test "$(grep -c ' done ' <<< "$list")" -eq 50
check "none ran twice (each started once)" test "$(cat "$T"/w?.log | grep -c ' starts ')" -eq 50
check "every job claimed once" test "$(for i in $(cat "$T"/sub? | grep -x '[0-9]*'); do "$D" job "$i" --json --db "$CDB"; done | grep -c '"runs":1,')" -eq 50
finish
