#!/usr/bin/env bash
# pressure_fake.sh - the worker's memory supervision on cgroup v2 readings,
# and the stability monitor's collapse flag (docs/jobs.md, "Memory pressure").
#   tests/cli/pressure_fake.sh BUILD_DIR
# This machine has cgroup v1, so the v2 paths are fed fake readings: a folder
# of memory.max, memory.current, memory.stat, memory.events and
# memory.pressure that DELTAFIN_CGROUP_DIR names (jobs/pressure.c). A worker
# runs a streamed MoE job under --mem. The test first freezes the run (SIGSTOP,
# 3 s): the monitor's next row is flagged collapse, with a collapse event, and
# none before it was. Then it writes, one at a time:
#  1. a new memory.events "high" count  -> a shrink event naming memory.high
#  2. PSI "some avg10=42.00"            -> a shrink event naming PSI
#  3. memory.stat anon at 90% of max    -> a shrink event naming anonymous memory
# The job completes
# with the text of a run without pressure (shrinking changes reads, not
# results).
set -u
B=${1:-build}
D="$B/deltafin"
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
command -v jq >/dev/null || { echo "SKIPPED: jq not found"; exit 0; }
T=$(mktemp -d /tmp/deltafin-pressure-fake-XXXXXX)
wpid=
trap '[ -n "$wpid" ] && kill -9 "$wpid" 2>/dev/null; rm -rf "$T"' EXIT
SLOW=1; [ -n "${DELTAFIN_SANITIZED:-}" ] && SLOW=4
"${DELTAFIN_MKMODEL_BUILD:-$B}/mkmodel" -o "$T/m.gguf" --preset deepseek-v3-tiny --type q8_0 --n-embd 512 \
    --experts 64 --n-ff-exp 512 --n-layer 6 2>/dev/null || { echo "mkmodel failed"; exit 1; }
DB="$T/jobs.db"
j() { "$D" "$@" --db "$DB"; }
# count ID [JQ-OPTIONS] JQ-FILTER: the filter on the job's JSON (how many events/rows match, a field)
count() { local id=$1; shift; j job "$id" --json | jq "$@"; }
# wait_for ID JQ-FILTER: until count > 0 (or a timeout); 0 if seen
wait_for() {
    for _ in $(seq $((150 * SLOW))); do [ "$(count "$1" "$2")" -gt 0 ] 2>/dev/null && return 0; sleep 0.1; done
    return 1
}
shrinks() { echo "[.events[] | select(.kind == \"shrink\" and (.text | contains(\"$1\")))] | length"; }
args=(-m "$T/m.gguf" -p "Once upon a time" -n 1600 --temp 0 --ignore-eos -c 1700 --mem 160M)

# the reference: the same job, no pressure
ref=$(j submit "${args[@]}")
j worker --drain 2>/dev/null
check "the reference job is done" test "$(count "$ref" -r .state)" = done
j job "$ref" > "$T/ref.txt" 2>/dev/null

# the fake cgroup v2: 1 GiB limit, quiet
CG="$T/cg"
mkdir "$CG"
echo $((1 << 30)) > "$CG/memory.max"
echo $((200 << 20)) > "$CG/memory.current"
stat_anon() { printf 'anon %s\nfile 1000\n' "$1" > "$CG/memory.stat"; }
events() { printf 'low 0\nhigh %s\nmax 0\noom 0\noom_kill 0\n' "$1" > "$CG/memory.events"; }
psi() { printf 'some avg10=%s avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n' "$1" > "$CG/memory.pressure"; }
stat_anon $((100 << 20)); events 0; psi 0.00

id=$(j submit "${args[@]}")
DELTAFIN_CGROUP_DIR="$CG" "$D" worker --drain --db "$DB" --monitor-every 0.5 2> "$T/w.log" &
wpid=$!
for _ in $(seq $((300 * SLOW))); do [ "$(count "$id" .n_done)" -ge 10 ] 2>/dev/null && break; sleep 0.1; done
check "the job is running" test "$(count "$id" -r .state)" = running
check "quiet readings: no shrink yet" test "$(count "$id" '[.events[] | select(.kind == "shrink")] | length')" = 0

# the stability monitor, at the full budget (each shrink below slows the run,
# three of them about 3x, too near the collapse line to test against): freeze
# the run, its next row collapses
for _ in $(seq $((100 * SLOW))); do [ "$(count "$id" '.stats | length')" -ge 3 ] 2>/dev/null && break; sleep 0.1; done
check "no collapse before the freeze" test "$(count "$id" '[.stats[] | select(.collapse == 1)] | length')" = 0
rpid=$(pgrep -P "$wpid" | head -n1)
check "the run is a child of the worker ($rpid)" test -n "$rpid"
kill -STOP "$rpid"; sleep 3; kill -CONT "$rpid"
wait_for "$id" '[.stats[] | select(.collapse == 1)] | length'
check "after the freeze a monitor row is flagged collapse" test $? -eq 0
wait_for "$id" '[.events[] | select(.kind == "collapse")] | length'
check "... with a collapse event" test $? -eq 0

# the pressure readings, one at a time

events 1
wait_for "$id" "$(shrinks memory.high)"
check "v2 memory.events high rose: the cache shrinks (memory.high)" test $? -eq 0
psi 42.00
wait_for "$id" "$(shrinks PSI)"
check "v2 PSI some avg10 42%: the cache shrinks (PSI)" test $? -eq 0
psi 0.00
stat_anon $(((1 << 30) / 10 * 9))
wait_for "$id" "$(shrinks 'anonymous memory')"
check "v2 anon at 90% of memory.max: the cache shrinks (anonymous memory)" test $? -eq 0
stat_anon $((100 << 20))
check "the shrinks are recorded with the budget they left" \
    contains "$(count "$id" -r '.events[] | select(.kind == "shrink") | .text')" "budget 160.0 MiB ->"


wait "$wpid"; rc=$?
wpid=
check "the worker ends cleanly" test "$rc" -eq 0
check "the job completed" test "$(count "$id" -r .state)" = done
check "with the reference's text" cmp -s "$T/ref.txt" <(j job "$id" 2>/dev/null)
finish
