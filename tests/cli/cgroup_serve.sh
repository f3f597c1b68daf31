#!/usr/bin/env bash
# cgroup_serve.sh - a server's requests keep its memory budget (issue 31 item 12).
#   tests/cli/cgroup_serve.sh BUILD_DIR
# `serve --mem 64M --jobs` runs inside a cgroup v1 memory limit of the budget
# + 256 MiB while 16 clients send maximum-size bodies (16 MiB less a little)
# at once, four kinds in turn: a completion whose prompt is a 16 MiB string,
# one whose prompt is 8 million token ids, a chat of 150,000 messages with
# four stop strings of 4 MB and n = 16, and a job of a 16 MiB prompt. Each
# gets a 4xx or a 503 (never an answer after tokenizing 16 MiB for a
# 256-token context; a job may be queued: the queue keeps it on disk, and its
# worker judges it), the cgroup's limit is never hit, and the server then
# answers a normal request. Without the request pool and the parse gate the
# server took 3.4-4.6 GiB for such a flood.
set -u
B=${1:-build}
D="$B/deltafin"
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
command -v node >/dev/null || { echo "SKIPPED: node not found"; exit 0; }
command -v curl >/dev/null || { echo "SKIPPED: curl not found"; exit 0; }
cgroup_setup serve
MiB=$((1 << 20))
"$B/mkmodel" -o "$T/moe.gguf" --preset qwen3moe-tiny --type q8_0 2>/dev/null || { echo "mkmodel failed"; exit 1; }
SP=""
trap '[ -n "$SP" ] && kill -9 "$SP" 2>/dev/null; [ -d "$CG" ] && rmdir "$CG" 2>/dev/null; rm -rf "$T"' EXIT

node - "$T" <<'EOF'
const fs = require('fs'), T = process.argv[2], N = 16 * 1024 * 1024 - 4096;
const big = 'a'.repeat(N - 200);
fs.writeFileSync(T + '/text.json', JSON.stringify({prompt: big, max_tokens: 4}));
let s = '{"max_tokens":4,"prompt":[' + '1,'.repeat((N - 100) / 2 - 1) + '1]}';
fs.writeFileSync(T + '/ids.json', s);
const stop = 'z'.repeat(4 * 1000 * 1000);
const msgs = []; let len = 4 * stop.length + 200;
while (len < N - 100) { msgs.push({role: 'user', content: 'hi'}); len += 32; }
fs.writeFileSync(T + '/chat.json', JSON.stringify({messages: msgs, n: 16, stop: [stop, stop, stop, stop], max_tokens: 4}));
fs.writeFileSync(T + '/job.json', JSON.stringify({prompt: big, max_tokens: 4}));
EOF

budget=$((64 * MiB)); limit=$((budget + 256 * MiB))
mkdir "$CG" || { echo "cannot create $CG"; exit 1; }
echo "$limit" > "$CG/memory.limit_in_bytes"
( echo "$BASHPID" > "$CG/cgroup.procs" &&
    exec "$D" serve --port 0 -m "$T/moe.gguf" -c 256 --mem 64M --jobs-db "$T/jobs.db" > "$T/serve.log" 2>&1 ) &
SP=$!
port=""
for _ in $(seq 1 100); do
    port=$(sed -n 's/.*http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$T/serve.log" 2>/dev/null)
    [ -n "$port" ] && break
    sleep 0.1
done
U="http://127.0.0.1:$port"
cs=()
kinds=(text ids chat job)
for i in $(seq 0 15); do
    k=${kinds[$((i % 4))]}
    url=/v1/completions; [ "$k" = chat ] && url=/v1/chat/completions; [ "$k" = job ] && url=/v1/jobs
    curl -s -m 120 -o "$T/r.$i" -w '%{http_code}\n' -H "Content-Type: application/json" --data-binary "@$T/$k.json" \
        "$U$url" > "$T/code.$i" &
    cs+=($!)
done
wait "${cs[@]}"
codes=$(for i in $(seq 0 15); do cat "$T/code.$i"; done | tr '\n' ' ')
echo "answers: $codes"
bad=0; for i in $(seq 0 15); do case "$(cat "$T/code.$i"),${kinds[$((i % 4))]}" in 400,*|413,*|503,*|200,job) ;; *) bad=$((bad + 1)); echo "request $i (${kinds[$((i % 4))]}): $(cat "$T/code.$i") $(head -c 300 "$T/r.$i")" ;; esac; done
check "16 maximum-size requests at once: each a 400, 413 or 503, or a job queued ($codes)" test "$bad" = 0
check "the server is alive" kill -0 "$SP"
r=$(curl -s -m 30 -H "Content-Type: application/json" "$U/v1/completions" -d '{"prompt":"tale","max_tokens":8,"temperature":0}')
check "... and then answers a normal request" contains "$r" '"completion_tokens":8'
failcnt=$(cat "$CG/memory.failcnt"); peak=$(cat "$CG/memory.max_usage_in_bytes")
kill -INT "$SP"; wait "$SP"; rc=$?; SP=""
rmdir "$CG"
echo "serve --mem 64M under a flood: cgroup peak $((peak / MiB)) MiB of $((limit / MiB)), failcnt $failcnt, exit $rc"
check "the cgroup's limit was never hit (failcnt $failcnt)" test "$failcnt" -eq 0
check "the server stops cleanly" test "$rc" -eq 0
finish
