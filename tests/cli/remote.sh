#!/usr/bin/env bash
# remote.sh - the remote fallback of the job queue (jobs/remote.c, docs/jobs.md
# "Local or remote").
#   tests/cli/remote.sh BUILD_DIR
# A `deltafin serve` on a loopback port is the remote. A worker whose job has
# a deadline the local plan cannot meet (the plan's speeds given tiny with
# --disk-gbps/--mem-gbps) sends it there: it completes with `deltafin run`'s
# greedy text, and the job records the choice and why. Through a small node
# proxy that cuts the first connection after a few hundred bytes of the
# stream, the job is resumed (a remote-retry event) and its text is still
# identical. An unreachable remote fails the job with a clear error. A job
# whose deadline the plan meets runs locally, and says so. Two servers: a job
# posted to one (running the queue with --worker) whose budget the plan says
# cannot hold the model goes to the other, and completes identically.
set -u
B=${1:-build}
D="$B/deltafin"
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
T=$(mktemp -d /tmp/deltafin-remote-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
command -v jq >/dev/null || { echo "SKIPPED: jq not found"; exit 0; }
command -v node >/dev/null || { echo "SKIPPED: node not found"; exit 0; }
SLOW=1; [ -n "${DELTAFIN_SANITIZED:-}" ] && SLOW=4

j() { "$D" "$@" --db "$T/jobs.db"; }
field() { j job "$1" --json | jq -r ".$2"; }
# a worker that believes this machine reads at 1 byte/s: no deadline can be met locally
wrc=0
slow_worker() { j worker --drain --commit-every 0 --disk-gbps 1e-9 --mem-gbps 1e-9 2>>"$T/worker.log" || wrc=$?; }

serve_start "$T/r.log" -m "$S" -c 256
RURL="http://127.0.0.1:$PORT"

P="Once upon a time"
N=48
run=$("$D" run -m "$S" -p "$P" -n $N --temp 0 -c 256 2>/dev/null)
want=${run#"$P"}
check "the reference text is not empty" test -n "$want"

# ---- the local plan cannot meet the deadline: the remote runs it ----
id=$(j submit -m "$S" -p "$P" -n $N --temp 0 -c 256 --deadline +1h --remote "$RURL")
slow_worker
check "job $id: done" test "$(field "$id" state)" = done
check "... placed on the remote" test "$(field "$id" place)" = remote
check "... records its remote" test "$(field "$id" remote)" = "$RURL"
check "... a 'remote' event says why (the plan's prediction)" \
    grep -q "after the deadline" <<< "$(j job "$id" --json | jq -r '.events[] | select(.kind == "remote") | .text')"
check "... its text is deltafin run's greedy text" test "$(field "$id" text)" = "$want"
check "deltafin job ID shows where it ran" grep -q "ran on $RURL" <<< "$(j job "$id" 2>&1 >/dev/null)"

# ---- a remote that drops the stream: resumed, nothing lost or doubled ----
cat > "$T/proxy.js" <<'JS'
// Forwards 127.0.0.1:0 to the port in argv[2]; the first connection's answer is cut after argv[3] bytes.
const net = require('net');
const [, , up, cut] = process.argv;
let conns = 0;
const srv = net.createServer((c) => {
  const first = conns++ === 0;
  let sent = 0;
  const u = net.connect(+up, '127.0.0.1');
  c.on('data', (d) => u.write(d));
  u.on('data', (d) => {
    if (!first) return c.write(d);
    const room = +cut - sent;
    if (room > 0) c.write(d.subarray(0, room));
    sent += d.length;
    if (sent >= +cut) { c.destroy(); u.destroy(); }
  });
  u.on('end', () => c.end());
  c.on('end', () => u.end());
  u.on('error', () => c.destroy());
  c.on('error', () => u.destroy());
});
srv.listen(0, '127.0.0.1', () => console.log('port ' + srv.address().port));
JS
node "$T/proxy.js" "$PORT" "${REMOTE_CUT:-700}" > "$T/proxy.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do PP=$(sed -n 's/^port //p' "$T/proxy.log"); [ -n "$PP" ] && break; sleep 0.1; done
check "the proxy listens" test -n "$PP"
id=$(j submit -m "$S" -p "$P" -n $N --temp 0 -c 256 --deadline +1h --remote "http://127.0.0.1:$PP/")
slow_worker
check "job $id (dropped once): done" test "$(field "$id" state)" = done
ev=$(j job "$id" --json | jq -r '.events[] | .kind')
check "... a remote-retry event" grep -qx remote-retry <<< "$ev"
check "... text committed before the drop" \
    grep -q "resuming from [1-9]" <<< "$(j job "$id" --json | jq -r '.events[] | select(.kind == "remote-retry") | .text')"
got=$(field "$id" text)
check "... its text is still deltafin run's greedy text" test "$got" = "$want"
[ "$got" = "$want" ] || { echo "want: [$want]"; echo "got:  [$got]"; j job "$id" --json | jq -c .events; }

# ---- an unreachable remote: a clear error in the job ----
id=$(j submit -m "$S" -p "$P" -n 8 --temp 0 -c 256 --deadline +1h --remote "http://127.0.0.1:1")
slow_worker
check "job $id (unreachable remote): failed" test "$(field "$id" state)" = failed
err=$(field "$id" error)
check "... the error names the remote and the failure ($err)" grep -q "remote failed 5 times.*127.0.0.1:1" <<< "$err"

# ---- a deadline the plan meets: local ----
id=$(j submit -m "$S" -p "$P" -n 8 --temp 0 -c 256 --deadline +1h --remote "http://127.0.0.1:1")
j worker --drain --disk-gbps 10 --mem-gbps 10 2>>"$T/worker.log" || wrc=$?
check "job $id (deadline met here): done locally" test "$(field "$id" state),$(field "$id" place)" = done,local
check "... a 'local' event with the prediction" \
    grep -q "before the deadline" <<< "$(j job "$id" --json | jq -r '.events[] | select(.kind == "local") | .text')"

check "every worker exited 0 ($wrc)" test "$wrc" = 0
check "no sanitizer report in the workers' log" lacks "$(cat "$T/worker.log")" "Sanitizer"

# ---- two servers: one runs the queue (--worker), the other is its remote ----
# A job posted to server A's /v1/jobs with a budget below the plan's minimum cannot
# run on A's machine: A's worker sends it to server B (A's operator's --remote: a
# client may not name one), and it completes identically.
serve_start "$T/a.log" -m "$S" -c 256 --jobs-db "$T/a.db" --worker --remote "$RURL"
AURL="http://127.0.0.1:$PORT"
id=$(curl -s "$AURL/v1/jobs" -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"$P\",\"max_tokens\":$N,\"temperature\":0,\"n_ctx\":256,\"mem\":\"64K\"}" | jq -r .id)
check "server A took the job ($id)" test -n "$id" -a "$id" != null
st=""
for _ in $(seq 1 $((300 * SLOW))); do
    st=$(curl -s "$AURL/v1/jobs/$id" | jq -r .state)
    [ "$st" = done ] || [ "$st" = failed ] && break
    sleep 0.1
done
check "... done through server A's worker ($st)" test "$st" = done
check "... placed on server B" test "$(curl -s "$AURL/v1/jobs/$id" | jq -r .place)" = remote
check "... why: the model does not fit the budget here" \
    grep -q "does not fit the budget" <<< "$(curl -s "$AURL/v1/jobs/$id" | jq -r '.events[] | select(.kind == "remote") | .text')"
check "... its text is deltafin run's greedy text" test "$(curl -s "$AURL/v1/jobs/$id" | jq -r .text)" = "$want"

# ---- the config file's default remote ----
printf 'remote = %s\n' "$RURL" > "$T/config"
id=$("$D" submit --config "$T/config" --db "$T/jobs.db" -m "$S" -p x -n 1)
check "the config file's remote is the job's" test "$(field "$id" remote)" = "$RURL"

finish
