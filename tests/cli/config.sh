#!/usr/bin/env bash
# config.sh - the config file and DELTAFIN_* variables (docs/config.md, issue 15 item 5).
#   tests/cli/config.sh BUILD_DIR
# `deltafin config` names each setting's source (default, FILE:LINE, env,
# flag); a flag overrides the environment, which overrides the file; the
# file's settings reach the commands (a job's budget and database, run's
# budget); unknown keys, repeated keys, bad values and bad lines are usage
# errors that name the line; a missing --config file is an error, a missing
# default one is not.
set -u
B=${1:-build}
D="$B/deltafin"
T=$(mktemp -d /tmp/deltafin-config-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
export HOME="$T/home" XDG_CONFIG_HOME="$T/xdg" XDG_DATA_HOME="$T/data"
unset DELTAFIN_MEM DELTAFIN_IO DELTAFIN_IO_THREADS DELTAFIN_THREADS DELTAFIN_DB DELTAFIN_REMOTE DELTAFIN_HOST \
      DELTAFIN_PORT DELTAFIN_API_KEY
mkdir -p "$HOME" "$XDG_CONFIG_HOME/deltafin"
"$B/mkmodel" -o "$T/moe.gguf" --preset qwen3moe-tiny --type q8_0 2>/dev/null || { echo "mkmodel failed"; exit 1; }
field() { "$D" job "$1" --json "${@:2}" | grep -o "\"mem\":[0-9]*" | cut -d: -f2; }

out=$("$D" config)
check "no config file: every setting is a default" test "$(grep -c '# default' <<< "$out")" -eq 9
check "it says the default file was not found" contains "$out" "$XDG_CONFIG_HOME/deltafin/config (not found)"
check "the default database follows XDG_DATA_HOME" contains "$out" "$XDG_DATA_HOME/deltafin/jobs.db"

cat > "$XDG_CONFIG_HOME/deltafin/config" <<EOF
# set once
mem = 64M      # the budget
io = pread
threads = 2
db = ~/q/jobs.db
api-key = "s3cret # not a comment"
EOF
chmod 600 "$XDG_CONFIG_HOME/deltafin/config"
out=$("$D" config)
check "a file setting names its file and line" contains "$out" "# file $XDG_CONFIG_HOME/deltafin/config:2"
check "its value, without the comment" grep -q '^mem *= 64M *#' <<< "$out"
check "~/ is the home folder" contains "$out" "$HOME/q/jobs.db"
check "the api key is not shown" lacks "$out" "s3cret"
out=$(DELTAFIN_MEM=128M "$D" config)
check "the environment overrides the file" grep -q '^mem *= 128M *# env DELTAFIN_MEM' <<< "$out"
out=$(DELTAFIN_MEM=128M "$D" config --mem 256M -t 4)
check "a flag overrides the environment" grep -q '^mem *= 256M *# flag' <<< "$out"
check "a short flag too" grep -q '^threads *= 4 *# flag' <<< "$out"

# the settings reach the commands
id=$("$D" submit -m "$T/moe.gguf" -p "Hello" -n 2)
check "submit uses the file's database" test -f "$HOME/q/jobs.db"
check "and the file's budget" test "$(field "$id")" = $((64 << 20))
id=$("$D" submit -m "$T/moe.gguf" -p "Hello" -n 2 --mem 48M)
check "a flag overrides the file's budget" test "$(field "$id")" = $((48 << 20))
check "jobs reads the same database" test "$("$D" jobs | grep -c queued)" -eq 2
check "the CLI's own --db still wins" test "$("$D" jobs --db "$T/other.db" | grep -c queued)" -eq 0
out=$("$D" run -m "$T/moe.gguf" -p "Hi" -n 1 --temp 0 2>&1)
check "run plans under the file's budget" contains "$out" "plan: budget 64.0 MiB"
out=$("$D" run -m "$T/moe.gguf" -p "Hi" -n 1 --temp 0 --mem 48M 2>&1)
check "run's --mem wins" contains "$out" "plan: budget 48.0 MiB"
out=$("$D" tokenize -m "$T/moe.gguf" -p "Hi" 2>&1)
check "a command the budget does not apply to is not given it" test $? -eq 0

# --config FILE, and mistakes
printf 'mem = 40M\n' > "$T/other"
out=$("$D" config --config "$T/other")
check "--config FILE replaces the default file" grep -q "^mem *= 40M *# file $T/other:1" <<< "$out"
check "--config=FILE too" contains "$("$D" config --config="$T/other")" "$T/other:1"
out=$("$D" run -m "$T/moe.gguf" -p --config -n 1 --temp 0 --config "$T/other" 2>&1)
check "a prompt that reads --config is a prompt" contains "$out" "plan: budget 40.0 MiB"
bad() { # DESCRIPTION FILE-TEXT EXPECTED-MESSAGE
    printf "$2" > "$T/bad"
    err=$("$D" run --config "$T/bad" -m "$T/moe.gguf" -p x 2>&1 >/dev/null); rc=$?
    check "$1: exit 2 naming the line" test "$rc" -eq 2
    check "$1: says '$3'" contains "$err" "$T/bad:$3"
}
bad "an unknown key" 'mem = 1G\n\nmemory = 2G\n' "3: unknown key 'memory'"
bad "a bad size" '# c\nmem = 12X\n' "2: mem expects a size"
bad "a bad engine" 'io = fast\n' "1: io expects pread, uring or auto, got 'fast'"
bad "a thread count out of range" 'threads = 0\n' "1: threads expects an integer in [1, 512]"
bad "a repeated key" 'mem = 1G\nmem = 2G\n' "2: mem is already set on line 1"
bad "a line without =" 'mem 1G\n' "1: expected 'key = value'"
bad "an empty value" 'mem =\n' "1: mem expects a value"
bad "a relative database path" 'db = jobs.db\n' "1: db expects an absolute path"
bad "an unclosed quote" 'host = "x\n' "1: a quoted value must end"
err=$(DELTAFIN_PORT=http "$D" config 2>&1); rc=$?
check "a bad environment value: exit 2, names the variable" test "$rc" -eq 2 -a -n "$(grep DELTAFIN_PORT <<< "$err")"
"$D" config --config "$T/none" >/dev/null 2>&1; rc=$?
check "a missing --config file: exit 1" test "$rc" -eq 1
"$D" config --bogus 1 >/dev/null 2>&1; rc=$?
check "config with an unknown option: exit 2" test "$rc" -eq 2
chmod 644 "$XDG_CONFIG_HOME/deltafin/config"
err=$("$D" config 2>&1 >/dev/null)
check "an api key others can read is warned about" contains "$err" "chmod 600"

# a default config another user's HOME holds (setpriv or sudo keep HOME): a warning, not a failure
if [ "$(id -u)" -eq 0 ] && setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
    chmod 700 "$XDG_CONFIG_HOME"; chmod 755 "$T" "$B" 2>/dev/null
    err=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$D" info -m "$T/moe.gguf" 2>&1 >/dev/null); rc=$?
    check "an unreadable default config: the command still runs" test "$rc" -eq 0
    check "... and says the file was ignored" contains "$err" "ignored"
else
    echo "skip unreadable default config (cannot drop root here)"
fi
finish
