#!/usr/bin/env bash
# terminal.sh - what a person at a terminal sees (issue 37), in tmux (send-keys, capture-pane, pipe-pane).
#   tests/cli/terminal.sh BUILD_DIR
# run --progress with the text on the same terminal: a status drawn after every token
# (DELTAFIN_PROGRESS_EVERY=0) in the last row, and the screen still holds the generated text unbroken, at three
# widths (the text wraps at different places, also where the cursor waits to wrap); the prompt phase has its
# status too; afterwards the whole screen scrolls again (the region reset, the status row cleared). With the
# text redirected, the status is one rewritten stderr line and the file holds the text alone; with stderr
# a log, the status comes as lines.
set -u
B=${1:-build}
D="$(cd "$(dirname "$B")" && pwd)/$(basename "$B")/deltafin"
S=$(cd "$(dirname "${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf")" 2> /dev/null && pwd)/stories260K.gguf
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
command -v tmux > /dev/null || { echo "SKIPPED: tmux not found"; exit 0; }
T=$(mktemp -d /tmp/deltafin-terminal-XXXXXX)
X=(tmux -L "deltafin-test-$$" -f /dev/null)
trap '"${X[@]}" kill-server 2> /dev/null; [ -n "${TERM_KEEP:-}" ] || rm -rf "$T"' EXIT
SLOW=1; [ -n "${DELTAFIN_SANITIZED:-}" ] && SLOW=4
ROWS=12

# a shell in a new pane WIDTH x ROWS whose raw output goes to $T/raw.N
n=0
pane() {
    n=$((n + 1))
    "${X[@]}" kill-session -t p 2> /dev/null
    "${X[@]}" new-session -d -s p -x "$1" -y $ROWS "env -i PATH=$PATH HOME=$T TERM=screen PS1='$ ' bash --norc --noprofile"
    "${X[@]}" pipe-pane -t p -o "cat >> $T/raw.$n"
}
# type a command line, wait for the marker it prints at its end
type_wait() {
    "${X[@]}" send-keys -t p "$1; echo DONE-MARK-$n" Enter
    for _ in $(seq 1 $((150 * SLOW))); do
        "${X[@]}" capture-pane -t p -p -J -S - | grep -q "^DONE-MARK-$n" && return 0
        sleep 0.1
    done
    echo "timed out: $1"
    return 1
}
P="Once upon a time"
N=300
"$D" run -m "$S" -p "$P" -n $N --temp 0 -t 1 2> /dev/null > "$T/ref.txt"
run="DELTAFIN_PROGRESS_EVERY=0 ${DELTAFIN_ISA:+DELTAFIN_ISA=$DELTAFIN_ISA }$D run -m $S -p '$P' -n $N --temp 0 -t 1 --progress"

for W in 100 57 80; do
    pane "$W"
    type_wait "$run"
    "${X[@]}" capture-pane -t p -p -J -S - > "$T/screen.$n"
    drawn=$(grep -ao "\[generated [0-9]*/$N" "$T/raw.$n" | wc -l)
    check "$W columns: a status after every token ($drawn drawn)" test "$drawn" -gt $((N / 2))
    check "... in the last row" grep -aq $'\e\['"$ROWS"$';1H\e\[2K\e\[7m\[generated' "$T/raw.$n"
    check "... the prompt phase has its status" grep -aq '\[prompt 0/5 tokens' "$T/raw.$n"
    check "... the screen holds the text unbroken" python3 -c '
import sys
ref = open(sys.argv[1]).read().rstrip("\n")
sys.exit(0 if ref in open(sys.argv[2]).read() else 1)' "$T/ref.txt" "$T/screen.$n"
done
# after the run the whole screen scrolls again: 20 lines, the last of them right above the prompt in the last row
type_wait "seq 101 120"
"${X[@]}" capture-pane -t p -p > "$T/after"
check "afterwards the scroll region is reset (the prompt in the last row, 120 above it)" \
    test "$(sed -n "$((ROWS - 1))p" "$T/after")" = "DONE-MARK-$n" -a "$(sed -n "$((ROWS - 2))p" "$T/after")" = 120
check "... and the status row is cleared" test -z "$(grep -a 'tokens/s\]' "$T/after")"

# the text redirected: the status is a stderr line of its own, the file the text alone
pane 100
type_wait "$run > $T/out.txt"
check "text redirected: the file holds the text alone" cmp -s "$T/out.txt" "$T/ref.txt"
check "... the status is one stderr line rewritten with \\r" grep -aq $'\r\[generated [0-9]*/'"$N" "$T/raw.$n"
# stderr a log: lines
DELTAFIN_PROGRESS_EVERY=0 "$D" run -m "$S" -p "$P" -n 40 --temp 0 --progress > /dev/null 2> "$T/log"
check "stderr a log: status lines ($(grep -c '^\[generated' "$T/log"))" test "$(grep -c '^\[generated' "$T/log")" -ge 30
check "... without escape sequences" test -z "$(grep -aP '\e|\r' "$T/log")"
finish
