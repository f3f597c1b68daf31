#!/usr/bin/env bash
# outpaths.sh - every option that names a file Deltafin writes, against what
# must never be written (docs/files.md; issue 31 item 1).
#   tests/cli/outpaths.sh BUILD_DIR
# For each output option - run --prompt-cache, --hot, --trace-experts,
# logits --out and --trace-ties, chat's /save, submit and jobs --db, serve --prompt-cache-dir,
# mkmodel -o - the target is, in turn, a text file of the user's (the prompt
# itself as --prompt-cache; not for --out, whose raw floats have no format to
# recognise), a regular file of another user (as root), a
# symbolic link to a file, a FIFO and a device node. After the command each
# must be exactly as it was (type, bytes, link target), the link's target
# too, and no temporary file may be left beside it; no command may hang.
set -u
B=${1:-build}
D="$B/deltafin"
case "$D" in /*) ;; *) D="$PWD/$D" ;; esac
S=${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf
TMPL=tests/data/jinja/templates/Qwen-Qwen2.5-7B-Instruct.jinja
SLOW=1; [ -n "${DELTAFIN_SANITIZED:-}" ] && SLOW=4
T=$(mktemp -d /tmp/deltafin-outpaths-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
"$B/mkmodel" -o "$T/moe.gguf" --preset qwen3moe-tiny --type q8_0 2>/dev/null || { echo "mkmodel failed"; exit 1; }
echo "Once upon a time" > "$T/prompt.txt"

kinds=(text link fifo dev)
[ "$(id -u)" -eq 0 ] && kinds+=(theirs)
mknod "$T/probe-dev" c 1 3 2>/dev/null && rm -f "$T/probe-dev" || kinds=("${kinds[@]/dev}")

# make TARGET of KIND; state TARGET prints what must not change
make_target() {
    local t=$1 kind=$2
    rm -rf "$t" "$T/victim"
    case $kind in
    text) echo "Once upon a time, a file of the user's" > "$t" ;;
    theirs) printf 'DFSNAP01 GGUF deltafin-hot 1 DFTR {\n\t"messages": another user' > "$t"; chown 65534:65534 "$t" ;;
    link) echo "the link's target" > "$T/victim"; ln -s "$T/victim" "$t" ;;
    fifo) mkfifo "$t" ;;
    dev) mknod "$t" c 1 3 ;;
    esac
}
state() {
    local t=$1
    stat -c '%F %U %s %Y' "$t" 2>&1
    [ -L "$t" ] && readlink "$t"
    [ -f "$t" ] && [ ! -L "$t" ] && md5sum < "$t"
    [ -f "$T/victim" ] && md5sum < "$T/victim"
}

# walk NAME CMD... : CMD has @ where the target's path goes
walk() {
    local name=$1; shift
    for kind in "${kinds[@]}"; do
        [ -n "$kind" ] && [ "$kind" != "${skip:-}" ] || continue
        local t="$T/target-$kind"
        make_target "$t" "$kind"
        local before; before=$(state "$t")
        local args=() a
        for a in "$@"; do args+=("${a//@/$t}"); done
        timeout -k 5 $((60 * SLOW)) "${args[@]}" < /dev/null > "$T/out" 2> "$T/err"
        local rc=$?
        check "$name, a $kind there: left exactly as it was" test "$before" = "$(state "$t")"
        check "$name, a $kind there: no hang" test "$rc" -ne 124 -a "$rc" -ne 137
        check "$name, a $kind there: no temporary file left" test -z "$(ls "$T" | grep "^target-$kind\.tmp")"
    done
}

walk "run --prompt-cache" "$D" run -m "$S" -p "Once upon a time" -n 2 --temp 0 --prompt-cache @
walk "run -f P --prompt-cache P" "$D" run -m "$S" -f @ -n 2 --temp 0 --prompt-cache @
walk "run --hot" "$D" run -m "$T/moe.gguf" --mem 64M -p hi -n 2 --temp 0 --hot @
walk "run --trace-experts" "$D" run -m "$T/moe.gguf" -p hi -n 2 --temp 0 --trace-experts @
walk "logits --trace-ties" "$D" logits -m "$T/moe.gguf" -p hi --trace-ties @ --tie-margin 1
# raw floats have no format to recognise: a regular file of the user's is replaced, as `>` would (checked below)
skip=text walk "logits --out" "$D" logits -m "$S" -p hi --out @
walk "chat /save" bash -c "printf 'hi\n/save %s\n' \"\$1\" | \"\$0\" chat -m \"\$2\" --chat-template-file \"\$3\" -n 4 --temp 0" \
    "$D" @ "$S" "$TMPL"
walk "submit --db" "$D" submit --db @ -m "$S" -p hi
walk "jobs --db" "$D" jobs --db @
walk "serve --prompt-cache-dir" "$D" serve -m "$S" --port 0 --prompt-cache-dir @
walk "mkmodel -o" "$B/mkmodel" -o @ --preset small --type q8_0

# every writer of a named path goes through df_out (src/base/outfile.c): nothing else in the program's sources
# opens a file for writing (the disk probe's own scratch file, a unique O_EXCL name it removes, aside; the job
# database is SQLite's, checked by jobs/queue.c's check_db_path; hub/hub.c writes only below the Hub's cache, under
# names it makes itself: its two writers, checked by tests/cli/pull.sh, docs/files.md "The Hub's cache")
w=$(grep -rnE 'fopen\([^)]*"[wa]|O_CREAT|mkostemp|mkstemp|creat\(|O_WRONLY|O_RDWR' src server jobs tools hub cli --include=*.c |
    grep -v '^src/base/outfile.c:' | grep -v '^src/base/sysprobe.c:[0-9]*: *int fd = mkostemp(path, O_CLOEXEC);' |
    grep -v '^hub/hub.c:[0-9]*: *fd = openat(blobs, part, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);' |
    grep -v '^hub/hub.c:[0-9]*: *const int fd = openat(refs, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);')
check "every writer of a named path goes through df_out_open" test -z "$w"
[ -z "$w" ] || echo "$w"

# the refusals say why
e=$("$D" run -m "$S" -p "Once upon a time" -n 2 --prompt-cache "$T/prompt.txt" 2>&1 >/dev/null)
check "a text file as --prompt-cache: the run says it was not saved" contains "$e" "not saved"
check "... and why" contains "$e" "left alone"
check "... and the file is the user's text still" test "$(cat "$T/prompt.txt")" = "Once upon a time"
mkfifo "$T/fifo2"; e=$(timeout $((20 * SLOW)) "$D" logits -m "$S" -p hi --out "$T/fifo2" 2>&1 >/dev/null; echo "rc=$?")
check "--out FIFO: refused at once, exit 1" contains "$e" "rc=1"
check "... saying what it is" contains "$e" "not a regular file"

# what is ours is replaced: a prompt cache twice, the trace, logits
"$D" run -m "$S" -p "Once upon a time there" -n 2 --temp 0 --prompt-cache "$T/pc" >/dev/null 2>&1
"$D" run -m "$S" -p "Once upon a time there was" -n 2 --temp 0 --prompt-cache "$T/pc" > /dev/null 2> "$T/err"
check "a prompt cache of ours is reused and replaced" grep -q "prompt cache: [1-9][0-9]* of" "$T/err"
"$D" logits -m "$S" -p hi --out "$T/l.f32" >/dev/null 2>&1; n1=$(stat -c %s "$T/l.f32")
"$D" logits -m "$S" -p "hi there, how are you" --out "$T/l.f32" >/dev/null 2>&1; n2=$(stat -c %s "$T/l.f32")
check "logits --out: a file of ours is replaced (longer prompt, more logits)" test "$n2" -gt "$n1"
"$D" logits -m "$T/moe.gguf" -p hi --trace-ties "$T/ties" --tie-margin 1 >/dev/null 2>&1
"$D" logits -m "$T/moe.gguf" -p "hi there" --trace-ties "$T/ties" --tie-margin 1 >/dev/null 2>&1
check "logits --trace-ties: a trace of ours is replaced, a line per choice (margin 1: every one)" \
    test "$(grep -c '^position [0-9]* layer [0-9]* router margin ' "$T/ties")" -gt "$(grep -c '^position 0 ' "$T/ties")"
finish
