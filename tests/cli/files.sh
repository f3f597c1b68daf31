#!/usr/bin/env bash
# files.sh - the file-safety rule (docs/files.md) for the hot-expert file.
#   tests/cli/files.sh BUILD_DIR
# Deltafin never writes to the model file or through a path it did not
# create itself, refuses the model (or a link to it) as the hot file, never
# blocks on a FIFO, and says on stderr when it cannot save the hot file.
# Each check names the defect it guards against (the hardening issue's items).
set -u
B=${1:-build}
D="$B/deltafin"
case "$D" in /*) ;; *) D="$PWD/$D" ;; esac
T=$(mktemp -d /tmp/deltafin-files-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
"$B/mkmodel" -o "$T/m.gguf" --preset qwen3moe-tiny --type q8_0 2>/dev/null || { echo "mkmodel failed"; exit 1; }
cp "$T/m.gguf" "$T/orig.gguf"
args=(-p hi -n 4 --temp 0 --mem 64M)
same_model() { cmp -s "$T/m.gguf" "$T/orig.gguf"; }

# 1. the hot file named as the model itself, or as a link to it, is refused
e=$("$D" run -m "$T/m.gguf" "${args[@]}" --hot "$T/m.gguf" 2>&1 >/dev/null); rc=$?
check "--hot MODEL: refused (exit 1)" test "$rc" -eq 1
check "--hot MODEL: says why" contains "$e" "is the model file itself"
check "--hot MODEL: the model is intact" same_model
ln "$T/m.gguf" "$T/hard.hot"
e=$("$D" run -m "$T/m.gguf" "${args[@]}" --hot "$T/hard.hot" 2>&1 >/dev/null); rc=$?
check "--hot HARDLINK-TO-MODEL: refused" test "$rc" -eq 1
check "--hot HARDLINK-TO-MODEL: the model is intact" same_model
ln -s m.gguf "$T/m.gguf.hot"
e=$("$D" run -m "$T/m.gguf" "${args[@]}" 2>&1 >/dev/null); rc=$?
check "MODEL.hot -> MODEL: the run goes on" test "$rc" -eq 0
check "MODEL.hot -> MODEL: a warning" contains "$e" "is the model file itself"
check "MODEL.hot -> MODEL: the model is intact" same_model
rm -f "$T/m.gguf.hot"

# (siblings) user-named outputs are never the model either
e=$("$D" logits -m "$T/m.gguf" --tokens "1 2 3" --out "$T/m.gguf" 2>&1 >/dev/null); rc=$?
check "logits --out MODEL: refused" test "$rc" -eq 1
e=$("$D" run -m "$T/m.gguf" -p hi -n 4 --trace-experts "$T/hard.hot" 2>&1 >/dev/null); rc=$?
check "--trace-experts LINK-TO-MODEL: refused" test "$rc" -eq 1
check "--trace-experts LINK-TO-MODEL: says why" contains "$e" "is the model file itself"
check "outputs named as the model: the model is intact" same_model

# 1. a model path of 4095 bytes: MODEL.hot (4099) is not cut back to the model's name
p=$T
while :; do rem=$((4095 - ${#p} - 8)); [ "$rem" -le 250 ] && break; p="$p/$(head -c 200 /dev/zero | tr '\0' d)"; done
p="$p/$(head -c "$rem" /dev/zero | tr '\0' e)"
mkdir -p "$p" && cp "$T/orig.gguf" "$p/m.gguf"
check "the long model path is 4095 bytes" test "${#p}" -eq $((4095 - 7))
e=$("$D" run -m "$p/m.gguf" "${args[@]}" 2>&1 >/dev/null); rc=$?
check "4095-byte model path: the run completes" test "$rc" -eq 0
check "4095-byte model path: the model is intact" cmp -s "$p/m.gguf" "$T/orig.gguf"
check "4095-byte model path: says the hot file is not used" contains "$e" "File name too long"
e=$("$D" run -m "$p/m.gguf" "${args[@]}" --hot "$p/m.gguf" 2>&1 >/dev/null); rc=$?
check "4095-byte model path as --hot: refused, and the message still says why" contains "$e" "is the model file itself"
check "4095-byte model path as --hot: the model is intact" cmp -s "$p/m.gguf" "$T/orig.gguf"

# 2. a symlink planted at the old temporary name (MODEL.hot.tmp) or at the hot name is never written through
echo "victim" > "$T/victim"
ln -s victim "$T/m.gguf.hot.tmp"
"$D" run -m "$T/m.gguf" "${args[@]}" >/dev/null 2>&1; rc=$?
check "planted MODEL.hot.tmp symlink: run ok" test "$rc" -eq 0
check "planted MODEL.hot.tmp symlink: its target is intact" test "$(cat "$T/victim")" = victim
check "the hot file was saved (a regular file)" test -f "$T/m.gguf.hot" -a ! -L "$T/m.gguf.hot"
rm -f "$T/m.gguf.hot" "$T/m.gguf.hot.tmp"
ln -s victim "$T/m.gguf.hot"
"$D" run -m "$T/m.gguf" "${args[@]}" >/dev/null 2>&1
check "symlink at MODEL.hot: its target is intact" test "$(cat "$T/victim")" = victim
check "symlink at MODEL.hot: left as it was (never written through or over)" test -L "$T/m.gguf.hot"
check "the model is intact after saving" same_model
rm -f "$T/m.gguf.hot"

# 4. a FIFO as the hot file never blocks
mkfifo "$T/m.gguf.hot"
e=$(timeout 20 "$D" run -m "$T/m.gguf" "${args[@]}" 2>&1 >/dev/null); rc=$?
check "FIFO at MODEL.hot: the run completes (no hang)" test "$rc" -eq 0
check "FIFO at MODEL.hot: a warning" contains "$e" "not a regular file"
rm -f "$T/m.gguf.hot"
mkfifo "$T/fifo"
e=$(timeout 20 "$D" run -m "$T/m.gguf" "${args[@]}" --hot "$T/fifo" 2>&1 >/dev/null); rc=$?
check "--hot FIFO: refused at once (exit 1, no hang)" test "$rc" -eq 1
check "--hot FIFO: says why" contains "$e" "not a regular file"

# 12. an explicitly named hot file that cannot be written is an error, not skipped silently
e=$("$D" run -m "$T/m.gguf" "${args[@]}" --hot /proc/deltafin-no-such/x.hot 2>&1 >/dev/null); rc=$?
check "--hot UNWRITABLE: refused (exit 1)" test "$rc" -eq 1
check "--hot UNWRITABLE: says why" contains "$e" "cannot write the hot file"

# the default hot file beside a model in a folder the user cannot write: said on stderr
mkdir "$T/ro" && cp "$T/orig.gguf" "$T/ro/m.gguf" && chmod 755 "$T" "$T/ro" && chmod 644 "$T/ro/m.gguf"
if [ "$(id -u)" -eq 0 ]; then
    as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    "${as_user[@]}" true 2>/dev/null || as_user=()
else
    chmod 555 "$T/ro"; as_user=(env)
fi
if [ ${#as_user[@]} -gt 0 ]; then
    e=$("${as_user[@]}" "$D" run -m "$T/ro/m.gguf" "${args[@]}" 2>&1 >/dev/null); rc=$?
    check "read-only folder: the run completes" test "$rc" -eq 0
    check "read-only folder: says the hot set will not be saved" contains "$e" "will not be saved"
else
    echo "skip read-only folder (cannot drop root here)"
fi
chmod 755 "$T/ro"

# 12. concurrent runs do not share a temporary name, and leave none behind
"$D" run -m "$T/m.gguf" "${args[@]}" -n 16 >/dev/null 2>"$T/a.err" & pa=$!
"$D" run -m "$T/m.gguf" "${args[@]}" -n 16 >/dev/null 2>"$T/b.err" & pb=$!
wait "$pa"; ra=$?; wait "$pb"; rb=$?
check "two concurrent runs both complete" test "$ra" -eq 0 -a "$rb" -eq 0
[ "$ra" -eq 0 ] && [ "$rb" -eq 0 ] || { echo "run a: exit $ra"; tail -5 "$T/a.err"; echo "run b: exit $rb"; tail -5 "$T/b.err"; }
check "no temporary hot files are left" test -z "$(find "$T" -maxdepth 1 -name '*.tmp*' ! -name m.gguf.hot.tmp)"
check "the hot file is well formed" grep -q "^deltafin-hot 1" "$T/m.gguf.hot"
check "the model is intact at the end" same_model
finish
