#!/usr/bin/env bash
# options.sh - every command parses its options from the one table (cli/opts.c, issue 34 item 2).
#   tests/cli/options.sh BUILD_DIR
# For each option of each command, with a value the table accepts
# (build/test_opts --list), the program's parser for that command takes it:
# no "unknown option", no "takes no", no entry its parser forgot to store, no
# crash. Then the table's refusals and help as the program shows them, and the
# config file checking its values by the same entries.
set -u
B=${1:-build}
D="$(cd "$(dirname "$B/deltafin")" && pwd)/deltafin"
T=$(mktemp -d /tmp/deltafin-options-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
export HOME="$T/home" XDG_CONFIG_HOME="$T/xdg" XDG_DATA_HOME="$T/data"
unset DELTAFIN_MEM DELTAFIN_IO DELTAFIN_IO_THREADS DELTAFIN_THREADS DELTAFIN_DB DELTAFIN_REMOTE DELTAFIN_HOST \
      DELTAFIN_PORT DELTAFIN_API_KEY DELTAFIN_API_KEY_FILE
mkdir -p "$HOME"

"$B/test_opts" --list > "$T/list"
n=$(wc -l < "$T/list")
check "the table lists options for the commands ($n)" test "$n" -gt 150
bad=""
cd "$T" || exit 1
while read -r cmd flag value; do
    extra=()
    [ "$cmd" = worker ] && extra=(--drain) # a worker that would wait for jobs stops at an empty queue
    # no -m: every command that needs one stops after reading its options, before any work
    out=$(timeout 20 "$D" "$cmd" "$flag" ${value:+"$value"} "${extra[@]}" 2>&1 < /dev/null); rc=$?
    if grep -qE "unknown option|takes no|forgot" <<< "$out" || [ "$rc" -ge 124 ]; then
        bad+="$cmd $flag $value (rc $rc: $(head -c 200 <<< "$out")); "
    fi
done < "$T/list"
cd - > /dev/null || exit 1
check "every command's parser takes every option the table gives it${bad:+: $bad}" test -z "$bad"

# what the table refuses, the program refuses with status 2, naming the option and what it expects
S="$T/none.gguf"
err() { "$D" "$@" 2>&1 > /dev/null; echo "rc=$?"; }
e=$(err run -m "$S" -p hi --top-p 2);     check "run --top-p 2: expects [0, 1]" contains "$e" "--top-p expects a number in [0, 1], got '2'"
check "... exit 2" contains "$e" "rc=2"
e=$(err serve -m "$S" --port 70000);      check "serve --port 70000: the range" contains "$e" "--port expects an integer in [0, 65535]"
e=$(err submit -m "$S" -p x --priority 1.5); check "submit --priority 1.5: an integer" contains "$e" "--priority expects an integer"
check "... exit 2" contains "$e" "rc=2"
e=$(err chat -m "$S" --kv f8);            check "chat --kv f8: the choices" contains "$e" "--kv expects f16 or f32, got 'f8'"
e=$(err run -m "$S" -p hi --port 80);     check "an option of another command is named as such" \
    contains "$e" "run takes no --port (it is an option of serve)"
e=$(err worker --temp 1);                 check "worker --temp: an option of run, chat and submit" \
    contains "$e" "worker takes no --temp (it is an option of run chat submit)"
e=$(err run -m "$S" -p hi --ignore-eos=1); check "a flag given a value" contains "$e" "--ignore-eos takes no value"
e=$(err run -m "$S" -p hi --temp);        check "a missing value" contains "$e" "--temp needs a value"
e=$(err bench -m "$S" -p abc);            check "bench -p is the prompt's length" contains "$e" "-p expects an integer in [0, 1048576]"

# the help is the table's: each command lists its options, not the others'
h=$("$D" serve --help)
check "serve --help lists --prompt-cache-mem" contains "$h" "--prompt-cache-mem SIZE"
check "serve --help lists no --batch-file" lacks "$h" "  --batch-file"
h=$("$D" run --help)
check "run --help lists --spec's choices" contains "$h" "--spec off|lookup|draft|mtp"
check "run --help does not show a hidden choice (io_uring)" lacks "$h" "io_uring"
check "the help has no empty line" test "$( ("$D" --help; "$D" worker --help) | grep -c '^ *$')" -eq 0
long=$(for c in run plan serve chat submit worker; do "$D" $c --help; done | awk 'length($0) > 100' | head -3)
check "the help's lines are at most 100 columns${long:+: $long}" test -z "$long"

# the config file checks a key by its flag's entry: the same words
mkdir -p "$XDG_CONFIG_HOME/deltafin"
printf 'io = fast\n' > "$XDG_CONFIG_HOME/deltafin/config"
e=$(err config);                           check "config io = fast: the table's choices" \
    contains "$e" "io expects pread, uring or auto, got 'fast'"
printf 'port = 0x50\n' > "$XDG_CONFIG_HOME/deltafin/config"
e=$(err config);                           check "config port = 0x50: the table's range" \
    contains "$e" "port expects an integer in [0, 65535]"
printf 'threads = 3\n' > "$XDG_CONFIG_HOME/deltafin/config"
check "config threads: applied to a command the table gives --threads (serve)" \
    bash -c "'$D' serve --help > /dev/null && '$D' config | grep -q '^threads *= 3'"
finish
