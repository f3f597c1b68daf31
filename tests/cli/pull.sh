#!/usr/bin/env bash
# pull.sh - models from the Hugging Face Hub (hub/hub.c; issue 36 item 3): `deltafin pull` and -hf against a
# local server that answers as the Hub's API, resolve and CDN endpoints do (tests/hub_server.js).
#   tests/cli/pull.sh BUILD_DIR
# Checked: a quant is picked by its tag (the default Q4_K_M without one; a projector left out; an unknown quant
# names those there are) over a paged file list; the file lands in the Hub's cache layout (blobs/SHA256, a
# relative link in snapshots/COMMIT, refs/main) with nothing left half-written; `models` and -m hf:... find it;
# `run -hf` gives `run -m PATH`'s text and downloads nothing the second time; a split model comes whole; a
# connection dropped part way is resumed with a range in the same run; a pull interrupted by SIGINT (exit 130)
# keeps its part and the next one resumes it; a wrong sha256 fails and leaves nothing; a file without LFS is
# checked by its git id; 401 without a token, with a wrong one; HF_TOKEN and the token file work, and the
# token never reaches the CDN (another host); unsafe paths from the Hub, a next page on another host and a link
# planted where the download goes are refused, its target untouched; HF_HUB_OFFLINE and a Hub that is down
# use the cache, saying so; two pulls of one file at once both end with it whole.
set -u
B=${1:-build}
D="$(cd "$(dirname "$B")" && pwd)/$(basename "$B")/deltafin"
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
T=$(mktemp -d /tmp/deltafin-pull-XXXXXX)
HPID=
cleanup() { [ -n "$HPID" ] && kill "$HPID" 2>/dev/null && wait "$HPID" 2>/dev/null; [ -n "${PULL_KEEP:-}" ] || rm -rf "$T"; }
trap cleanup EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
command -v node >/dev/null || { echo "SKIPPED: node not found"; exit 0; }
command -v jq >/dev/null || { echo "SKIPPED: jq not found"; exit 0; }
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# ---- the files the hub serves ----
F="$T/files"
mkdir -p "$F"
cp "$S" "$F/q8.gguf"
"$B/mkmodel" -o "$F/q4.gguf" --preset tiny --type q4_0 > /dev/null 2>&1 || cp "$S" "$F/q4.gguf"
part() { { printf 'GGUF'; head -c "$2" /dev/urandom; } > "$F/$1"; }
part proj.gguf 1000
part s1.gguf 300000; part s2.gguf 200000; part s3.gguf 100000
part drop.gguf 400000; part slow.gguf 1500000; part small.gguf 5000; part bad.gguf 20000; part priv.gguf 30000
echo "# a model card" > "$F/README.md"
cat > "$T/repos.json" << JSON
{"acme/tiny-GGUF": {"files": [
   {"path": "README.md", "src": "$F/README.md", "lfs": false},
   {"path": "mmproj-tiny-F16.gguf", "src": "$F/proj.gguf"},
   {"path": "tiny-Q4_K_M.gguf", "src": "$F/q4.gguf"},
   {"path": "tiny-Q8_0.gguf", "src": "$F/q8.gguf"}]},
 "acme/big-GGUF": {"files": [
   {"path": "Q2_K/big-Q2_K-00001-of-00003.gguf", "src": "$F/s1.gguf"},
   {"path": "Q2_K/big-Q2_K-00002-of-00003.gguf", "src": "$F/s2.gguf"},
   {"path": "Q2_K/big-Q2_K-00003-of-00003.gguf", "src": "$F/s3.gguf"}]},
 "acme/drop-GGUF": {"files": [{"path": "drop-Q4_0.gguf", "src": "$F/drop.gguf", "cut": 150000}]},
 "acme/slow-GGUF": {"files": [{"path": "slow-Q4_0.gguf", "src": "$F/slow.gguf", "slow": 65536}]},
 "acme/fresh-GGUF": {"files": [{"path": "fresh-Q4_0.gguf", "src": "$F/slow.gguf", "slow": 65536, "norange": true}]},
 "acme/small-GGUF": {"files": [{"path": "small.gguf", "src": "$F/small.gguf", "lfs": false}]},
 "acme/bad-GGUF": {"files": [{"path": "bad-Q4_0.gguf", "src": "$F/bad.gguf", "bad_sha": true}]},
 "acme/private-GGUF": {"private": true, "files": [{"path": "priv-Q4_0.gguf", "src": "$F/priv.gguf"}]},
 "acme/evil-GGUF": {"files": [{"path": "../../../../evil.gguf", "src": "$F/small.gguf"}]},
 "acme/far-GGUF": {"evil_link": true, "files": [
   {"path": "a-Q4_0.gguf", "src": "$F/small.gguf"}, {"path": "b-Q8_0.gguf", "src": "$F/small.gguf"},
   {"path": "c-Q6_K.gguf", "src": "$F/small.gguf"}]}}
JSON
# malformed file lists: each must fail with a message, never crash
GARBAGE=('not json' '{"a":1}' '[1,2,"x",null]' '[{"type":"file","path":"m.gguf"}]'
    '[{"type":"file","path":"m.gguf","size":-5,"lfs":{"oid":"'"$(printf '%064d' 0)"'","size":-5}}]'
    '[{"type":"file","path":"m.gguf","lfs":{"oid":"ABC","size":10}}]'
    '[{"type":"file","path":"m.gguf","lfs":{"oid":"'"$(printf '%064d' 0)"'","size":1e300}}]'
    '[{"type":"file","path":"m.gguf","lfs":{"oid":"'"$(printf '%064d' 0)"'","size":"10"}}]'
    '[{"type":"file","path":"a/\u0001/m.gguf","oid":"'"$(printf '%040d' 0)"'","size":3}]'
    '[{"type":"file","path":"/etc/m.gguf","oid":"'"$(printf '%040d' 0)"'","size":3}]'
    '[{"type":"file","path":"a//m.gguf","oid":"'"$(printf '%040d' 0)"'","size":3}]'
    '[{"type":"file","path":"m.gguf","lfs":{"oid":"'"$(printf '%064d' 0)"'","size":0.5}}]'
    '[{"type":"file","path":"m.gguf","oid":"'"$(printf '%040d' 0)"'","size":3}' '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]')
for i in "${!GARBAGE[@]}"; do
    jq --arg id "acme/garbage$i-GGUF" --arg raw "${GARBAGE[$i]}" \
        '.[$id] = {"raw_tree": $raw, "files": []}' "$T/repos.json" > "$T/repos.tmp" && mv "$T/repos.tmp" "$T/repos.json"
done
L="$T/requests.log"
: > "$L"
node "$ROOT/tests/hub_server.js" "$T/repos.json" "$T/port" "$L" 2> "$T/server.err" &
HPID=$!
for _ in $(seq 1 100); do [ -s "$T/port" ] && break; sleep 0.1; done
[ -s "$T/port" ] || { echo "the hub stand-in did not start:"; cat "$T/server.err"; exit 1; }
export HF_ENDPOINT="http://127.0.0.1:$(cat "$T/port")"
export HOME="$T/home"
unset HF_TOKEN HUGGING_FACE_HUB_TOKEN HF_TOKEN_PATH HF_HUB_OFFLINE HF_HUB_CACHE HF_HOME
HUB="$HOME/.cache/huggingface/hub"
sha() { sha256sum "$1" | cut -d' ' -f1; }
commit() { printf '%s' "$1" | sha1sum | cut -d' ' -f1; }
cdn_gets() { grep -c '"url":"/cdn/' "$L"; }
pull() { timeout 60 "$D" pull "$@" 2> "$T/err"; }

# ---- a quant by its tag, into the cache's layout ----
out=$(pull acme/tiny-GGUF:Q8_0); rc=$?
R="$HUB/models--acme--tiny-GGUF"
C=$(commit acme/tiny-GGUF)
check "pull acme/tiny-GGUF:Q8_0: exit 0 ($(tail -1 "$T/err"))" test "$rc" -eq 0
check "... prints the snapshot path" test "$out" = "$R/snapshots/$C/tiny-Q8_0.gguf"
check "... its bytes are the file's" cmp -s "$out" "$S"
check "... a relative link to blobs/SHA256" test "$(readlink "$out")" = "../../blobs/$(sha "$S")"
check "... blobs/SHA256 is a plain file" test -f "$R/blobs/$(sha "$S")" -a ! -L "$R/blobs/$(sha "$S")"
check "... refs/main holds the commit" test "$(cat "$R/refs/main")" = "$C"
check "... nothing half-written is left" test -z "$(ls "$R/blobs" | grep -v '^[0-9a-f]\{64\}$')"
check "... the file list was read in pages" grep -q 'cursor=2' "$L"
check "... and the projector was not downloaded" test "$(grep -c mmproj "$L")" -eq 0
models=$("$D" models 2>&1)
check "deltafin models lists hf:acme/tiny-GGUF:tiny-Q8_0.gguf" contains "$models" "hf:acme/tiny-GGUF:tiny-Q8_0.gguf"
P="Once upon a time"
want=$("$D" run -m "$S" -p "$P" -n 24 --temp 0 2> /dev/null)
got=$("$D" run -m hf:acme/tiny-GGUF:Q8_0 -p "$P" -n 24 --temp 0 2> /dev/null)
check "run -m hf:acme/tiny-GGUF:Q8_0 gives run -m PATH's text" test "$got" = "$want"
n0=$(cdn_gets)
got=$(timeout 60 "$D" run -hf acme/tiny-GGUF:Q8_0 -p "$P" -n 24 --temp 0 2> "$T/err")
check "run -hf acme/tiny-GGUF:Q8_0 gives the same text" test "$got" = "$want"
check "... downloading nothing: it is in the cache" test "$(cdn_gets)" -eq "$n0"
check "... and saying so" grep -q "all in the cache" "$T/err"
got=$(timeout 60 "$D" run --hf-repo=acme/tiny-GGUF -hff tiny-Q8_0.gguf -p "$P" -n 24 --temp 0 2> /dev/null)
check "run --hf-repo=REPO -hff FILE: the same text" test "$got" = "$want"
info=$(timeout 60 "$D" info -hf acme/tiny-GGUF:Q8_0 2>&1)
check "info -hf works too" contains "$info" "llama"
timeout 20 "$D" run -hf acme/tiny-GGUF:Q8_0 -m "$S" -p x > /dev/null 2> "$T/err"; rc=$?
check "-hf with -m: exit 2, saying so" test "$rc" -eq 2 -a -n "$(grep 'both name a model' "$T/err")"

# ---- pull's options, read from the option table (cli/opts.c) ----
out=$(pull acme/tiny-GGUF --file tiny-Q8_0.gguf --quiet); rc=$?
check "pull --file FILE --quiet: that file, exit 0" test "$rc" -eq 0 -a "$(basename "$out")" = tiny-Q8_0.gguf
check "... saying nothing on stderr" test ! -s "$T/err"
out=$(pull acme/tiny-GGUF -hff tiny-Q8_0.gguf -q); rc=$?
check "pull -hff FILE -q: the same" test "$rc" -eq 0 -a "$(basename "$out")" = tiny-Q8_0.gguf
pull acme/tiny-GGUF --revision nosuch > /dev/null; rc=$?
check "pull --revision REV: that revision, which the Hub has not: exit 1" \
    test "$rc" -eq 1 -a -n "$(grep "has no branch or tag 'nosuch'" "$T/err")"
out=$(pull acme/tiny-GGUF:Q8_0 --revision=main); rc=$?
check "pull --revision=main: exit 0" test "$rc" -eq 0 -a "$(basename "$out")" = tiny-Q8_0.gguf
pull acme/tiny-GGUF acme/other-GGUF > /dev/null; rc=$?
check "pull with two names: exit 2" test "$rc" -eq 2 -a -n "$(grep 'is a second' "$T/err")"
pull --quiet > /dev/null; rc=$?
check "pull without a name: exit 2, saying so" test "$rc" -eq 2 -a -n "$(grep 'pull needs a model' "$T/err")"
pull acme/tiny-GGUF --port 80 > /dev/null; rc=$?
check "pull --port: an option of serve, refused by name" test "$rc" -eq 2 -a -n "$(grep 'pull takes no --port' "$T/err")"

# ---- the default quant, an unknown one ----
out=$(pull acme/tiny-GGUF); rc=$?
check "pull acme/tiny-GGUF (no quant): the Q4_K_M" test "$rc" -eq 0 -a "$(basename "$out")" = tiny-Q4_K_M.gguf
check "... its bytes" cmp -s "$out" "$F/q4.gguf"
pull acme/tiny-GGUF:Q5_K_M > /dev/null; rc=$?
check "an unknown quant: exit 1 naming those there are" \
    test "$rc" -eq 1 -a -n "$(grep 'no model .Q5_K_M. (it has: Q4_K_M, Q8_0)' "$T/err")"
pull acme/nothing-GGUF > /dev/null; rc=$?
check "an unknown repository: exit 1, HTTP 404" test "$rc" -eq 1 -a -n "$(grep '404' "$T/err")"
pull 'acme/../etc' > /dev/null; rc=$?
check "a repository name with '..': exit 2" test "$rc" -eq 2

# ---- a split model ----
out=$(pull acme/big-GGUF:Q2_K); rc=$?
sn="$HUB/models--acme--big-GGUF/snapshots/$(commit acme/big-GGUF)/Q2_K"
check "pull a split model: exit 0, the first part's path" test "$rc" -eq 0 -a "$out" = "$sn/big-Q2_K-00001-of-00003.gguf"
for i in 1 2 3; do
    check "... part $i whole" cmp -s "$sn/big-Q2_K-0000$i-of-00003.gguf" "$F/s$i.gguf"
done
check "... links one folder deeper" test "$(readlink "$sn/big-Q2_K-00002-of-00003.gguf")" = "../../../blobs/$(sha "$F/s2.gguf")"

# ---- a dropped connection: resumed in the same run ----
out=$(pull acme/drop-GGUF); rc=$?
check "a connection dropped part way: exit 0" test "$rc" -eq 0
check "... the file whole" cmp -s "$out" "$F/drop.gguf"
check "... asked for the rest with a range" grep -q '"url":"/cdn/acme/drop-GGUF.*"range":"bytes=[1-9]' "$L"
check "... and said so" grep -q "resuming at byte" "$T/err"

# ---- interrupted: the next pull resumes ----
RS="$HUB/models--acme--slow-GGUF/blobs/$(sha "$F/slow.gguf")"
"$D" pull acme/slow-GGUF > /dev/null 2> "$T/err" &
pid=$!
for _ in $(seq 1 100); do [ -s "$RS.incomplete" ] && [ "$(stat -c %s "$RS.incomplete")" -gt 200000 ] && break; sleep 0.05; done
kill -INT "$pid"; wait "$pid"; rc=$?
have=$(stat -c %s "$RS.incomplete" 2> /dev/null || echo 0)
check "SIGINT during a download: exit 130 ($rc)" test "$rc" -eq 130
check "... says the part is kept" grep -q "the same command resumes" "$T/err"
check "... keeps the part ($have bytes), no file under the final name" test "$have" -gt 0 -a ! -e "$RS"
out=$(pull acme/slow-GGUF); rc=$?
check "the next pull: exit 0, the file whole" test "$rc" -eq 0 && cmp -s "$out" "$F/slow.gguf"
check "... resumed at the part's end (a range from byte $have)" grep -q "\"url\":\"/cdn/acme/slow-GGUF.*\"range\":\"bytes=$have-\"" "$L"
check "... saying so" grep -q "resuming the download at" "$T/err"
# a server that ignores the range: the part is started again, the file still whole
RF="$HUB/models--acme--fresh-GGUF/blobs/$(sha "$F/slow.gguf")"
mkdir -p "$(dirname "$RF")"
head -c 100000 /dev/zero > "$RF.incomplete"
out=$(pull acme/fresh-GGUF); rc=$?
check "a server that ignores ranges: exit 0, the file whole" test "$rc" -eq 0 && cmp -s "$out" "$F/slow.gguf"

# ---- two pulls of one file at once ----
rm -rf "$HUB/models--acme--slow-GGUF"
"$D" pull acme/slow-GGUF > "$T/o1" 2> "$T/e1" & p1=$!
"$D" pull acme/slow-GGUF > "$T/o2" 2> "$T/e2" & p2=$!
wait $p1; r1=$?; wait $p2; r2=$?
check "two pulls of one file at once: both exit 0" test "$r1" -eq 0 -a "$r2" -eq 0
check "... the file whole" cmp -s "$(cat "$T/o1")" "$F/slow.gguf"
check "... one waited for the other" grep -q "waiting" "$T/e1" "$T/e2"

# ---- checksums ----
RB="$HUB/models--acme--bad-GGUF"
pull acme/bad-GGUF > /dev/null; rc=$?
check "a wrong sha256: exit 1, checksum mismatch" test "$rc" -eq 1 -a -n "$(grep 'checksum mismatch' "$T/err")"
check "... nothing left in blobs/" test -z "$(ls -A "$RB/blobs")"
check "... no snapshot link" test -z "$(ls -A "$RB/snapshots/$(commit acme/bad-GGUF)")"
out=$(pull acme/small-GGUF); rc=$?
check "a file without LFS: checked by its git id, exit 0" test "$rc" -eq 0 && cmp -s "$out" "$F/small.gguf"

# ---- tokens ----
pull acme/private-GGUF > /dev/null; rc=$?
check "a private repository without a token: exit 1, asks for HF_TOKEN" \
    test "$rc" -eq 1 -a -n "$(grep 'HTTP 401: it needs a token: set HF_TOKEN' "$T/err")"
check "... the Hub's words without their control characters" test -z "$(grep -P '\x1b' "$T/err")"
HF_TOKEN=hf_wrong pull acme/private-GGUF > /dev/null; rc=$?
check "with a wrong token: exit 1, the token was refused" test "$rc" -eq 1 -a -n "$(grep 'token was refused' "$T/err")"
: > "$L"
out=$(HF_TOKEN=hf_test pull acme/private-GGUF); rc=$?
check "with HF_TOKEN: exit 0, the file whole" test "$rc" -eq 0 && cmp -s "$out" "$F/priv.gguf"
check "... the token went to the Hub's API" grep -q '"url":"/api/models/acme/private-GGUF/refs".*"auth":"good"' "$L"
check "... and never to the CDN ($(grep -c '"url":"/cdn/' "$L") requests there)" test -z "$(grep '"url":"/cdn/' "$L" | grep -v '"auth":"none"')" -a "$(grep -c '"url":"/cdn/' "$L")" -gt 0
rm -rf "$HUB/models--acme--private-GGUF"
mkdir -p "$HOME/.cache/huggingface" && echo hf_test > "$HOME/.cache/huggingface/token"
out=$(pull acme/private-GGUF); rc=$?
check "the token file huggingface_hub writes: exit 0" test "$rc" -eq 0 && cmp -s "$out" "$F/priv.gguf"
rm "$HOME/.cache/huggingface/token"

# ---- a hostile hub, a hostile cache ----
pull acme/evil-GGUF > /dev/null; rc=$?
check "a path with '..' from the Hub: exit 1, refused" test "$rc" -eq 1 -a -n "$(grep 'unsafe path' "$T/err")"
check "... nothing written outside the cache" test -z "$(find "$T" -name evil.gguf)"
pull acme/far-GGUF:Q6_K > /dev/null; rc=$?
check "a next page on another host: exit 1, refused" test "$rc" -eq 1 -a -n "$(grep 'another server' "$T/err")"
RP="$HUB/models--acme--drop-GGUF/blobs"
rm -rf "$HUB/models--acme--drop-GGUF"
mkdir -p "$RP"
echo "precious" > "$T/target"
ln -s "$T/target" "$RP/$(sha "$F/drop.gguf").incomplete"
pull acme/drop-GGUF > /dev/null; rc=$?
check "a link planted where the download goes: exit 1" test "$rc" -eq 1
check "... its target untouched" test "$(cat "$T/target")" = precious

bad=""
for i in "${!GARBAGE[@]}"; do
    timeout 30 "$D" pull "acme/garbage$i-GGUF" > /dev/null 2> "$T/err"; rc=$?
    [ "$rc" -eq 1 ] && grep -q "^deltafin: acme/garbage$i-GGUF" "$T/err" || bad="$bad $i(rc $rc: $(head -c 150 "$T/err"))"
done
check "${#GARBAGE[@]} malformed file lists: each exit 1 with a message naming the repository${bad:+ (not:$bad)}" test -z "$bad"

# ---- offline ----
out=$(HF_HUB_OFFLINE=1 pull acme/tiny-GGUF:Q8_0); rc=$?
check "HF_HUB_OFFLINE=1: exit 0, the cached file" test "$rc" -eq 0 && cmp -s "$out" "$S"
check "... saying so" grep -q "using the cached hf:acme/tiny-GGUF:Q8_0" "$T/err"
kill "$HPID"; wait "$HPID" 2> /dev/null; HPID=
got=$(timeout 60 "$D" run -hf acme/tiny-GGUF:Q8_0 -p "$P" -n 24 --temp 0 2> "$T/err")
check "the Hub down: run -hf uses the cache, the same text" test "$got" = "$want"
check "... saying the Hub cannot be reached" grep -q "cannot be reached" "$T/err"
timeout 60 "$D" run -hf acme/never-GGUF -p x > /dev/null 2> "$T/err"; rc=$?
check "the Hub down and no cached model: exit 1, saying both" \
    test "$rc" -eq 1 -a -n "$(grep 'cannot be reached.*the cache has no such model' "$T/err")"
finish
