#!/usr/bin/env bash
# make-man.sh - the man page deltafin(1), made from the program's own help text,
# so the two never disagree (make install puts it in MANDIR/man1).
#
#   scripts/make-man.sh BUILD/deltafin VERSION > deltafin.1
set -euo pipefail
BIN=${1:?usage: make-man.sh DELTAFIN VERSION}
VER=${2:?usage: make-man.sh DELTAFIN VERSION}
# the help text goes to stderr with status 2; roff needs backslashes doubled and
# no line starting with a dot or an apostrophe
help=$("$BIN" --help 2>&1 || true)
[ -n "$help" ] || { echo "make-man.sh: $BIN printed no help" >&2; exit 1; }
cat << ROFF
.TH DELTAFIN 1 "" "deltafin $VER" "User Commands"
.SH NAME
deltafin \\- run GGUF language models larger than memory, out of core, under a memory budget
.SH SYNOPSIS
.B deltafin
.I COMMAND
[\\fIoptions\\fR]
.SH DESCRIPTION
Deltafin runs Mixture-of-Experts and dense models published as GGUF files on
machines with less memory than the model: what is used most stays resident,
the rest is read from disk as it is needed, within the budget given by
\\fB\\-\\-mem\\fR. The commands and their options:
.PP
.nf
ROFF
sed -e 's/\\/\\\\/g' -e "s/^\\([.']\\)/\\\\\\&\\1/" <<< "$help"
cat << 'ROFF'
.fi
.SH FILES
.TP
.I /usr/share/doc/deltafin
the documentation (README.md and docs/*.md; under PREFIX/share/doc/deltafin)
.SH SEE ALSO
The library is \fBlibdeltafin\fR: include/deltafin.h, pkg-config name \fBdeltafin\fR.
ROFF
