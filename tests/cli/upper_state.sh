#!/usr/bin/env bash
# upper_state.sh - no function in the engine uses a ymm/zmm16-31 register
# after its last vzeroupper (x86-64 only; needs objdump).
#   tests/cli/upper_state.sh BUILD_DIR
# Why: the q4_K tile once ended in a fold that GCC placed after its own
# vzeroupper, reading the upper half of ymm21; the scalar SSE code the caller
# ran next (the gated delta rule's SiLU and expf) became ~30% slower on an
# Intel Xeon, and Qwen3.5-shaped generation fell from 31.5 to 21.5 tokens/s
# (bench/RESULTS.md, 2026-12-02). The scan reads the disassembly: per
# function, a use of register 16-31 after a vzeroupper and before the next
# ret is a finding. A small assembled pair (one bad, one good) checks first
# that the scan finds what it should and nothing else.
set -uo pipefail
B=${1:-build}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
. tests/cli_common.sh
[ "$(uname -m)" = x86_64 ] || { echo "SKIPPED: not x86-64"; exit 0; }
command -v objdump >/dev/null || { echo "SKIPPED: objdump not found"; exit 0; }
T=$(mktemp -d /tmp/deltafin-upper-XXXXXX)
trap 'rm -rf "$T"' EXIT

# functions (by name) that touch registers 16-31 after their last vzeroupper
scan() {
    objdump -d --no-show-raw-insn "$1" | awk '
        /^[0-9a-f]+ <.*>:$/ { fn = $2; dirty = 0; seen = 0 }
        /vzeroupper/ { dirty = 0; seen = 1; next }
        seen && /[yz]mm(1[6-9]|2[0-9]|3[01])/ { dirty = 1 }
        /\tret/ { if (dirty) print fn; dirty = 0 }' | sort -u
}

cat > "$T/pair.s" <<'ASM'
    .text
    .globl bad_fold
bad_fold:
    vzeroupper
    vextractf32x4 $1, %ymm21, %xmm1
    ret
    .globl good_fold
good_fold:
    vextractf32x4 $1, %ymm21, %xmm1
    vzeroupper
    ret
ASM
cc -c "$T/pair.s" -o "$T/pair.o" 2>/dev/null || { echo "SKIPPED: cannot assemble AVX-512"; exit 0; }
check "the scan finds the bad pair member, not the good one" test "$(scan "$T/pair.o" | tr '\n' ' ')" = "<bad_fold>: "
found=$(scan "$B/deltafin")
check "no function uses ymm/zmm16-31 after its last vzeroupper${found:+ (found: $(echo $found))}" test -z "$found"
finish
