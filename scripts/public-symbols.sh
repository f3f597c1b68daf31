#!/usr/bin/env bash
# public-symbols.sh - the functions the public header declares, one name a line
# (sorted): the only global symbols libdeltafin.a keeps (the Makefile hands
# this list to objcopy --keep-global-symbols; tests/cli/symbols.sh checks the
# archive against it).
#
#   scripts/public-symbols.sh [HEADER]     (default include/deltafin.h; $CC preprocesses)
#
# The preprocessor drops the header's comments (whose usage example names
# functions too); a declared function is then a df_ name followed by "(".
# Types (df_plan, df_model_params) are never followed by "(", and a pointer
# to a function would read "(*df_name)(" : not matched either.
set -euo pipefail
HEADER=${1:-include/deltafin.h}
${CC:-cc} -E -P -x c "$HEADER" | grep -oE '\bdf_[A-Za-z0-9_]+[[:space:]]*\(' | sed -E 's/[[:space:]]*\($//' | sort -u
