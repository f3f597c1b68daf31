#!/usr/bin/env bash
# serve_slow.sh - slow clients cannot lock the others out (issue 31 item 10).
#   tests/cli/serve_slow.sh BUILD_DIR
# 2,000 connections opened from one loopback address (127.0.0.2) that send
# nothing, and one that trickles a byte a second, while a normal client on
# 127.0.0.1 asks /v1/models and a completion: each answered within a second
# (the idle ones beyond --max-conn-per-ip are refused, the rest wait on
# their own threads, until the server's idle timeout closes them). Node opens
# the sockets (no extra package). Before the per-address limit, the 2,000
# took every one of the server's 1,024 connections and the client was refused.
set -u
B=${1:-build}
D="$B/deltafin"
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
T=$(mktemp -d /tmp/deltafin-serve-slow-XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
command -v node >/dev/null || { echo "SKIPPED: node not found"; exit 0; }
SLOW=1; [ -n "${DELTAFIN_SANITIZED:-}" ] && SLOW=4

serve_start "$T/s.log" -m "$S" -c 128
cat > "$T/slow.js" <<'EOF'
const net = require('net'), http = require('http');
const port = +process.argv[2], n = +process.argv[3], limit = +process.argv[4];
const socks = [];
let opened = 0, failed = 0, done = 0;
function timed(path, body) {
  return new Promise((res) => {
    const t0 = Date.now();
    const req = http.request({host: '127.0.0.1', port, path, method: body ? 'POST' : 'GET', localAddress: '127.0.0.1',
                              headers: {'Content-Type': 'application/json'}}, (r) => {
      r.resume();
      r.on('end', () => res({status: r.statusCode, ms: Date.now() - t0}));
    });
    req.on('error', (e) => res({status: 0, ms: Date.now() - t0, err: e.message}));
    req.setTimeout(limit, () => req.destroy(new Error('timeout')));
    if (body) req.write(body);
    req.end();
  });
}
async function main() {
  await new Promise((resolve) => {
    for (let i = 0; i < n; i++) {
      const s = net.connect({host: '127.0.0.1', port, localAddress: '127.0.0.2'});
      s.on('connect', () => { opened++; if (++done === n) resolve(); });
      s.on('error', () => { failed++; if (++done === n) resolve(); });
      s.on('close', () => {});
      socks.push(s);
    }
  });
  // one trickling client: a byte of a request line every second
  const tr = net.connect({host: '127.0.0.1', port, localAddress: '127.0.0.2'});
  tr.on('error', () => {});
  const line = 'GET /v1/models HTTP/1.1\r\n';
  let k = 0;
  const iv = setInterval(() => { if (k < line.length) tr.write(line[k++]); }, 1000);
  await new Promise((r) => setTimeout(r, 500));
  const a = await timed('/v1/models');
  const b = await timed('/v1/completions', JSON.stringify({prompt: 'Once', max_tokens: 4, temperature: 0}));
  console.log(JSON.stringify({opened, failed, models: a, completion: b}));
  clearInterval(iv);
  for (const s of socks) s.destroy();
  tr.destroy();
}
main();
EOF
r=$(timeout $((60 * SLOW)) node "$T/slow.js" "$PORT" 2000 $((1000 * SLOW)))
echo "$r"
check "2000 idle connections were attempted ($r)" test -n "$r"
check "a normal client's /v1/models: 200" test "$(jq -r .models.status <<< "$r")" = 200
check "... within a second ($(jq -r .models.ms <<< "$r") ms)" test "$(jq -r .models.ms <<< "$r")" -lt $((1000 * SLOW))
check "a normal client's completion: 200" test "$(jq -r .completion.status <<< "$r")" = 200
check "... within a second ($(jq -r .completion.ms <<< "$r") ms)" test "$(jq -r .completion.ms <<< "$r")" -lt $((1000 * SLOW))
check "the server is still up" kill -0 "$SPID"
finish
