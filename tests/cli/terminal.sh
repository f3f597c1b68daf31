#!/usr/bin/env bash
# terminal.sh - what a person at a terminal sees (issue 37), in tmux (send-keys, capture-pane, pipe-pane).
#   tests/cli/terminal.sh BUILD_DIR
# run --progress with the text on the same terminal: a status drawn after every token
# (DELTAFIN_PROGRESS_EVERY=0) in the last row, and the screen still holds the generated text unbroken, at three
# widths (the text wraps at different places, also where the cursor waits to wrap); the prompt phase has its
# status too; afterwards the whole screen scrolls again (the region reset, the status row cleared). With the
# text redirected, the status is one rewritten stderr line and the file holds the text alone; with stderr
# a log, the status comes as lines. deltafin chat: a pasted text of three lines is one message; """ starts and
# ends a typed one of several lines; /set, /info, an unknown command said; Ctrl-C at the prompt clears the line
# and twice leaves (exit 0); the input history is kept and recalled with Up in the next chat; Ctrl-C during an
# answer stops it and the chat goes on.
set -u
B=${1:-build}
D="$(cd "$(dirname "$B")" && pwd)/$(basename "$B")/deltafin"
S=$(cd "$(dirname "${DELTAFIN_SHARED:-../shared}/models/stories260K.gguf")" 2> /dev/null && pwd)/stories260K.gguf
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
[ -f "$S" ] || { echo "SKIPPED: $S not found"; exit 0; }
command -v tmux > /dev/null || { echo "SKIPPED: tmux not found"; exit 0; }
T=$(mktemp -d /tmp/deltafin-terminal-XXXXXX)
# the server stays when its last session is killed: pane() kills one and makes the next, and a new-session that
# met the old server on its way out failed, leaving no server for the rest of the suite ("no server running")
echo "set -g exit-empty off" > "$T/tmux.conf"
X=(tmux -L "deltafin-test-$$" -f "$T/tmux.conf")
trap '"${X[@]}" kill-server 2> /dev/null; sleep 0.3; [ -n "${TERM_KEEP:-}" ] || rm -rf "$T"' EXIT
SLOW=1; [ -n "${DELTAFIN_SANITIZED:-}" ] && SLOW=4
ROWS=12

# a shell in a new pane WIDTH x ROWS whose raw output goes to $T/raw.N
n=0
pane() {
    n=$((n + 1))
    "${X[@]}" kill-session -t p 2> /dev/null
    "${X[@]}" new-session -d -s p -x "$1" -y $ROWS "env -i PATH=$PATH HOME=$T TERM=screen PS1='$ ' bash --norc --noprofile" ||
        { echo "tmux new-session failed"; return 1; }
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

# ---- deltafin chat at a terminal ----
# wait until the pane shows TEXT (a fixed string), at most 15 s
screen_has() {
    for _ in $(seq 1 $((150 * SLOW))); do
        "${X[@]}" capture-pane -t p -p -J -S - | grep -qF -- "$1" && return 0
        sleep 0.1
    done
    return 1
}
keys() { "${X[@]}" send-keys -t p "$@"; }
CH="$T/chat"
mkdir -p "$CH"
chat="${DELTAFIN_ISA:+DELTAFIN_ISA=$DELTAFIN_ISA }$D chat -m $S --chat-template chatml -n 16 --temp 0"
pane 120
keys "HOME=$CH $chat; echo CHAT-EXIT=\$?" Enter
check "chat: the start names the model, the context and the commands" screen_has "context 2048 tokens, no memory budget; /help"
# a pasted text of three lines is one message
"${X[@]}" set-buffer -b three "$(printf 'first line\nsecond line\nthird line')"
"${X[@]}" paste-buffer -p -b three -t p
check "a paste of three lines stands in the line as one mark" screen_has "> [pasted: 3 lines #1]"
keys Enter
screen_has "[turn 1:" > /dev/null
keys "/save $CH/s1.json" Enter
screen_has "[saved" > /dev/null
check "... and is sent as one message" test "$(jq -r '.messages[0].content' "$CH/s1.json" 2> /dev/null)" = \
    "$(printf 'first line\nsecond line\nthird line')"
check "... the only question (one turn, not three)" test "$(jq '.messages | length' "$CH/s1.json" 2> /dev/null)" = 2
# the mark typed again after a paste: the paste once, the typed copy as text (its room was counted for one)
"${X[@]}" paste-buffer -p -b three -t p
screen_has "> [pasted: 3 lines #1]" > /dev/null
keys " [pasted: 3 lines #1]" Enter
screen_has "[turn 2:" > /dev/null
keys "/save $CH/s1b.json" Enter
screen_has "[saved 4" > /dev/null
check "a paste mark typed twice: the text once, the copy kept as typed" \
    test "$(jq -r '.messages[2].content' "$CH/s1b.json" 2> /dev/null)" = \
    "$(printf 'first line\nsecond line\nthird line [pasted: 3 lines #1]')"
keys "/clear" Enter
screen_has "[conversation cleared]" > /dev/null
# """ ... """: a message of several lines, typed
keys '"""' Enter
screen_has "... " > /dev/null
keys "alpha" Enter "beta" Enter '"""' Enter
screen_has "[turn 3:" > /dev/null
keys "/save $CH/s2.json" Enter
screen_has "[saved 2" > /dev/null
check '""" ... """ typed: one message of two lines' test "$(jq -r '.messages[0].content' "$CH/s2.json" 2> /dev/null)" = \
    "$(printf 'alpha\nbeta')"
# commands
keys "/set temp 0.25" Enter
check "/set temp 0.25: said" screen_has "[temp = 0.25]"
keys "/set nothing 1" Enter
check "/set of an unknown setting: said" screen_has "/set nothing 1: unknown setting"
keys "/info" Enter
check "/info: the settings in effect and the last answer's speed" screen_has "sampling: temp 0.25"
keys "/frobnicate" Enter
check "an unknown command is said to be unknown" screen_has "unknown command /frobnicate"
# Ctrl-C at the prompt clears the line and stays; twice on an empty line leaves
keys "half a thought"
screen_has "> half a thought" > /dev/null
keys C-c
check "Ctrl-C at the prompt: the line is dropped, the chat stays" screen_has "(Ctrl-C again or Ctrl-D to leave"
keys "/set seed 4242" Enter
check "... the next line starts empty (a command again, not 'half a thought/set ...')" screen_has "[seed = 4242]"
keys C-c
screen_has "(Ctrl-C again" > /dev/null
keys C-c
check "Ctrl-C twice at an empty prompt: the chat ends, exit 0" screen_has "CHAT-EXIT=0"
check "the input history is kept" grep -q "alpha" "$CH/.local/share/deltafin/chat_history"
# the next chat recalls it with Up
keys "HOME=$CH $chat; echo CHAT2-EXIT=\$?" Enter
screen_has "/help for commands" > /dev/null
sleep 0.3
keys Up
sleep 0.3
check "a new chat: Up recalls the last line of the one before" \
    test "$("${X[@]}" capture-pane -t p -p | grep -v '^ *$' | tail -n 1)" = "> /set seed 4242"
keys C-u "/exit" Enter
screen_has "CHAT2-EXIT=" > /dev/null
# Ctrl-C during an answer stops it; the chat goes on
"$B/mkmodel" -o "$T/slow.gguf" --preset small --type q8_0 --ctx 4096 > /dev/null 2>&1
keys "HOME=$CH ${DELTAFIN_ISA:+DELTAFIN_ISA=$DELTAFIN_ISA }$D chat -m $T/slow.gguf --chat-template chatml -n 3500 -c 4096 --ignore-eos -t 1; echo CHAT3-EXIT=\$?" Enter
screen_has "/help for commands" > /dev/null
sz=$(stat -c %s "$T/raw.$n")
keys "go on" Enter
# Ctrl-C once the answer is being written (a fixed wait met the prompt still being read on a loaded machine)
for _ in $(seq 1 $((150 * SLOW))); do
    [ $(($(stat -c %s "$T/raw.$n") - sz)) -gt 400 ] && break
    sleep 0.1
done
keys C-c
check "Ctrl-C during an answer: it stops, marked [interrupted]" screen_has "[interrupted]"
check "... with its figures" screen_has "generated,"
keys "/exit" Enter
check "... and the chat went on to /exit (exit 0)" screen_has "CHAT3-EXIT=0"

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
