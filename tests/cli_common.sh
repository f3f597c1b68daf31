# cli_common.sh - helpers sourced by the shell tests in tests/cli/ (not a test itself).
#   check DESCRIPTION COND...   run COND, print "ok"/"FAIL" and count failures
#   contains TEXT NEEDLE, lacks TEXT NEEDLE
#   finish                      the summary line tests/run.sh reads; the exit status
#   serve_start LOG ARGS...     `$D serve --port 0 ARGS` in the background (pid in SPID, added to PIDS);
#                               sets PORT from its log, or fails the test (needs D, PIDS, SLOW)
#   npm_pkg DIR SPEC NAME       the npm package SPEC (or packages: "a@1 b@2") in DIR/node_modules/NAME (installed
#                               there once, from the registry); status 0 when it is there, else 1 saying the checks
#                               were skipped
#   serve_test_setup TAG        the start of a server test: S (stories260K), T (a temporary folder), PIDS (killed,
#                               with T removed, on exit), SLOW; exits 0 saying SKIPPED without the model, jq or curl
#   post PATH JSON, body R, code R   a POST to $U (body, then the status on the last line) and its two parts
#   cgroup_setup TAG            skip (exit 0, saying why) unless a cgroup v1 memory limit can be set;
#                               then T (a temporary folder) and CG (a cgroup path, not yet made), removed on exit
#   cgroup_tenfold MODEL NTOK   (after cgroup_setup) `logits --mem 64M` of NTOK tokens on MODEL inside a cgroup of
#                               64 MiB + 256 MiB: checks it completes, the model is ten times the budget, the
#                               cgroup never hit its limit, and the logits equal the unbudgeted run's
fails=0
check() {
    local what=$1; shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
contains() { grep -qF -- "$2" <<< "$1"; }
lacks() { ! grep -qF -- "$2" <<< "$1"; }
finish() {
    echo "$((fails == 0 ? 1 : 0)) passed, $((fails > 0 ? 1 : 0)) failed"
    [ "$fails" -eq 0 ]
}
serve_start() {
    local log=$1; shift
    "$D" serve --port 0 "$@" > "$log" 2>&1 &
    SPID=$!
    PIDS+=($SPID)
    for _ in $(seq 1 $((100 * SLOW))); do
        PORT=$(sed -n 's/.*http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log")
        [ -n "$PORT" ] && return 0
        sleep 0.1
    done
    echo "server did not start:"; cat "$log"; exit 1
}
serve_test_setup() {
    S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
    T=$(mktemp -d "/tmp/deltafin-$1-XXXXXX")
    PIDS=()
    trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"' EXIT
    [ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
    command -v jq > /dev/null && command -v curl > /dev/null || { echo "SKIPPED: jq or curl not found"; exit 0; }
    SLOW=1
    [ -n "${DELTAFIN_SANITIZED:-}" ] && SLOW=4
    return 0
}
post() { curl -s -w '\n%{http_code}' "$U$1" -H 'Content-Type: application/json' -d "$2"; }
body() { sed '$d' <<< "$1"; }
code() { tail -n 1 <<< "$1"; }
npm_pkg() {
    local dir=$1 spec=$2 name=$3
    if [ ! -d "$dir/node_modules/$name" ] && command -v npm > /dev/null; then
        mkdir -p "$dir"
        # shellcheck disable=SC2086 # SPEC may name several packages, installed together
        npm install --silent --no-save --no-audit --no-fund --prefix "$dir" $spec > "$dir/npm.log" 2>&1 ||
            rm -rf "${dir:?}/node_modules/$name"
    fi
    [ -d "$dir/node_modules/$name" ] && command -v node > /dev/null && return 0
    echo "SKIPPED ($name): npm could not install $spec, or node is missing (registry unreachable?)"
    return 1
}
CGROOT=/sys/fs/cgroup/memory
cgroup_setup() { # ASan's shadow memory is not part of Deltafin's budget
    if [ -n "${DELTAFIN_SANITIZED:-}" ]; then echo "SKIPPED: sanitizer build"; exit 0; fi
    if [ ! -w "$CGROOT" ]; then echo "SKIPPED: $CGROOT is not writable (cgroup v1 memory controller needed)"; exit 0; fi
    T=$(mktemp -d "/tmp/deltafin-$1-XXXXXX")
    CG="$CGROOT/deltafin-$1-$$"
    trap '[ -d "$CG" ] && rmdir "$CG" 2>/dev/null; rm -rf "$T"' EXIT
}
cgroup_tenfold() {
    local model=$1 ntok=$2 size limit toks rc peak failcnt
    size=$(stat -c %s "$model")
    mkdir "$CG" || { echo "cannot create $CG"; exit 1; }
    limit=$(( (64 + 256) * 1024 * 1024 ))
    echo "$limit" > "$CG/memory.limit_in_bytes"
    toks=$(seq 1 "$ntok" | awk "{ printf \"%d \", (NR * 7919) % 300 + 5 }")
    "$B/deltafin" logits -m "$model" --tokens "$toks" --out "$T/free.f32" --hot none > /dev/null 2>&1
    ( echo "$BASHPID" > "$CG/cgroup.procs" && exec "$B/deltafin" logits -m "$model" --tokens "$toks" --mem 64M \
        --out "$T/capped.f32" --hot none > /dev/null 2> "$T/err.txt" )
    rc=$?
    peak=$(cat "$CG/memory.max_usage_in_bytes")
    failcnt=$(cat "$CG/memory.failcnt")
    echo "model $((size >> 20)) MiB, budget 64 MiB, cgroup limit $((limit >> 20)) MiB: exit $rc, cgroup peak $((peak >> 20)) MiB, failcnt $failcnt"
    check "the budgeted run completes" test "$rc" -eq 0
    check "the model is ten times the budget" test "$size" -gt $((640 << 20))
    check "the cgroup never hit its limit" test "$failcnt" -eq 0
    check "peak within the limit" test "$peak" -le "$limit"
    check "both runs wrote their logits" test -s "$T/free.f32" -a -s "$T/capped.f32"
    check "logits bit-identical to the unbudgeted run" cmp -s "$T/free.f32" "$T/capped.f32"
    [ "$rc" -eq 0 ] || cat "$T/err.txt"
}
