#!/usr/bin/env bash
# cgroup_jobs.sh - a job under memory pressure (docs/jobs.md, "Memory pressure"; issue 15 item 3).
#   tests/cli/cgroup_jobs.sh BUILD_DIR
# A worker runs a streamed MoE job inside a cgroup v1 memory limit:
#  1. the limit is lowered mid-run to just above the run's anonymous memory:
#     the run shrinks its expert cache (a "shrink" event), a limit below what
#     it held before is then accepted, and the job completes with the text of
#     an unconstrained run;
#  2. the limit is too small for the job's budget: the kernel kills the run,
#     the worker restarts it with a smaller budget ("memory-restart"), and it
#     completes with the same text.
# The monitor's rows (tokens/s, hit rate, disk, memory) are in the job.
# Skipped, saying why, where the cgroup v1 memory controller is not writable
# or under the sanitizers.
set -u
B=${1:-build}
D="$B/deltafin"
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
cgroup_setup jobs
wpid=
trap '[ -n "$wpid" ] && kill -9 "$wpid" 2>/dev/null; [ -d "$CG" ] && rmdir "$CG" 2>/dev/null; rm -rf "$T"' EXIT
"$B/mkmodel" -o "$T/m.gguf" --preset deepseek-v3-tiny --type q8_0 --n-embd 512 --experts 64 --n-ff-exp 512 \
    --n-layer 6 2>/dev/null || { echo "mkmodel failed"; exit 1; }
DB="$T/jobs.db"
j() { "$D" "$@" --db "$DB"; }
field() { j job "$1" --json | grep -o "\"$2\":[^,}]*" | head -1 | cut -d: -f2- | tr -d '"'; }
anon() { grep '^total_rss ' "$CG/memory.stat" | cut -d' ' -f2; }
ended() { # ID KIND WHAT: the worker ($wpid) ended cleanly; the job is done, with the reference's text and a KIND event
    wait "$wpid"; local rc=$?
    wpid=
    check "$3: the worker ends cleanly" test "$rc" -eq 0
    check "$3: the job completed" test "$(field "$1" state)" = done
    check "$3: with the reference's text" cmp -s "$T/ref.txt" <(j job "$1" 2>/dev/null)
    json=$(j job "$1" --json)
    check "$3: the job records the $2" contains "$json" "\"kind\":\"$2\""
}
args=(-m "$T/m.gguf" -p "Once upon a time" -n 1200 --temp 0 --ignore-eos -c 1280)
MEM=160M

# the reference: the same job, no cgroup
ref=$(j submit "${args[@]}" --mem "$MEM")
t0=$(date +%s.%N)
j worker --drain 2>/dev/null
echo "the reference job took $(echo "$(date +%s.%N) - $t0" | bc) s"
check "the reference job is done" test "$(field "$ref" state)" = done
j job "$ref" > "$T/ref.txt" 2>/dev/null

# 1. a limit lowered mid-run
mkdir "$CG" || { echo "cannot create $CG"; exit 1; }
echo $((2 << 30)) > "$CG/memory.limit_in_bytes"
id=$(j submit "${args[@]}" --mem "$MEM")
( echo "$BASHPID" > "$CG/cgroup.procs" && exec "$D" worker --drain --db "$DB" --monitor-every 0.5 ) 2> "$T/w1.log" &
wpid=$!
for _ in $(seq 600); do [ "$(field "$id" n_done)" -ge 10 ] 2>/dev/null && break; sleep 0.1; done
before=$(anon)
check "the run is running, its memory known" test "${before:-0}" -gt 0
limit=$(( before * 110 / 100 ))
echo "$limit" > "$CG/memory.limit_in_bytes" 2>/dev/null
check "the limit is lowered to 110% of the run's memory ($((before >> 20)) MiB)" \
    test "$(cat "$CG/memory.limit_in_bytes")" -le "$limit"
for _ in $(seq 100); do grep -q shrink "$T/w1.log" && break; sleep 0.1; done
sleep 0.5
after=$(anon)
check "the run gave memory back ($((before >> 20)) -> $((after >> 20)) MiB)" test "$after" -lt "$before"
lower=$(( (before + after) / 2 ))
echo "$lower" > "$CG/memory.limit_in_bytes" 2>/dev/null
check "a limit below what it held before is accepted" test "$(cat "$CG/memory.limit_in_bytes")" -le "$lower"
ended "$id" shrink "limit lowered"
check "and why" contains "$json" "of the cgroup's limit"
check "the monitor wrote rows" contains "$json" '"tokens_per_s":'
check "with the budget lowered" test "$(grep -o '"budget":[0-9]*' <<< "$json" | tail -1 | cut -d: -f2)" -lt $((160 << 20))
grep -h "shrink" "$T/w1.log" | head -2

# 2. a limit too small for the budget: killed, restarted smaller, completes
echo $((2 << 30)) > "$CG/memory.limit_in_bytes"
id2=$(j submit "${args[@]}" --mem "$MEM")
echo $(( before * 90 / 100 )) > "$CG/memory.limit_in_bytes"
( echo "$BASHPID" > "$CG/cgroup.procs" && exec "$D" worker --drain --db "$DB" ) 2> "$T/w2.log" &
wpid=$!
ended "$id2" memory-restart "OOM-killed"
check "and its smaller budget" test "$(field "$id2" mem)" -lt $((160 << 20))
grep -h "memory-restart\|shrink" "$T/w2.log" | head -3
finish
