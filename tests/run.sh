#!/usr/bin/env bash
# run.sh - run every test program of a build directory and summarise.
#
#   tests/run.sh BUILD_DIR
#
# Each build/test_* is a cmocka program; tests/cli/*.sh are shell tests of the
# command-line tools (they get the build directory as $1); on x86-64 the
# kernel-selecting ones run again under every lower ISA tier (NAME@avx2). The last line is
# "N passed, N failed"; the exit status is non-zero if anything failed.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-build}
cd "$ROOT"
# DELTAFIN_EXEC runs the test programs through an emulator (make test-cross);
# DELTAFIN_MKMODEL_BUILD names a native build whose mkmodel makes the test models.
export DELTAFIN_BUILD="${DELTAFIN_MKMODEL_BUILD:-$BUILD}"
EXEC=${DELTAFIN_EXEC:-}
export DELTAFIN_SHARED=${DELTAFIN_SHARED:-$ROOT/../shared}
pass=0; failn=0; failed=()
run() { # NAME CMD...
    local name=$1; shift
    local t0=$(date +%s.%N)
    local log="$BUILD/log-${name//\//_}.txt"
    if "$@" > "$log" 2>&1; then
        pass=$((pass + 1)); status=ok
    else
        failn=$((failn + 1)); failed+=("$name"); status=FAILED
    fi
    printf '%-28s %-6s %6.1fs\n' "$name" "$status" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')"
    [ "$status" = ok ] || sed 's/^/    /' "$log" | tail -40
}
for t in "$BUILD"/test_*; do
    [ -x "$t" ] || continue
    run "$(basename "$t")" $EXEC "$t"
done
# The AMX table on the software tile model, any machine (DELTAFIN_AMX=model):
# its selection, and every gemm check of test_matmul against it (natively
# only: under an emulator test_matmul on the model takes many minutes).
for t in test_amx test_matmul; do
    [ -n "$EXEC" ] && [ "$t" = test_matmul ] && continue
    [ -x "$BUILD/$t" ] && run "$t-amx-model" env DELTAFIN_AMX=model $EXEC "$BUILD/$t"
done
# Under qemu-aarch64 the CPU is qemu's newest, with the dotprod extension (sdot); the
# kernel tests run again on an ARMv8.0 core without it (kern_neon.c's other half).
if [[ "$EXEC" == qemu-aarch64* ]]; then
    for t in test_quant test_matmul; do
        [ -x "$BUILD/$t" ] && run "$t@armv8.0" $EXEC -cpu cortex-a72 "$BUILD/$t"
    done
fi
[ -z "$EXEC" ] || { echo; echo "$pass passed, $failn failed"; [ "$failn" -eq 0 ]; exit; } # CLI tests: native only
for t in tests/cli/*.sh; do
    [ -f "$t" ] || continue
    run "cli/$(basename "$t" .sh)" bash "$t" "$BUILD"
done
# Every lower x86 tier, whatever the machine: the tests that select kernels
# again with the table capped (DELTAFIN_ISA makes the process behave as on a
# CPU without the tiers above: quant.c init_tables), so the path an AVX2-only
# laptop runs is tested on an AVX-512 machine, and an AVX-512 machine's on
# an AMX one. The AMX table on the tile model is built on the capped base,
# as on such a CPU (amx.sh, test_amx).
caps=()
if [ "$(uname -m)" = x86_64 ]; then
    grep -qw avx512f /proc/cpuinfo && grep -qw avx512_vnni /proc/cpuinfo && caps+=(avx2)
    grep -qw amx_int8 /proc/cpuinfo && grep -qw avx512_vnni /proc/cpuinfo && caps+=(avx512)
fi
for cap in "${caps[@]}"; do
    for t in test_matmul test_quant test_stream test_decode test_amx; do
        [ -x "$BUILD/$t" ] && run "$t@$cap" env DELTAFIN_ISA=$cap "$BUILD/$t"
    done
    run "test_amx-amx-model@$cap" env DELTAFIN_ISA=$cap DELTAFIN_AMX=model "$BUILD/test_amx"
    run "test_matmul-amx-model@$cap" env DELTAFIN_ISA=$cap DELTAFIN_AMX=model "$BUILD/test_matmul"
    for t in amx pack; do run "cli/$t@$cap" env DELTAFIN_ISA=$cap bash "tests/cli/$t.sh" "$BUILD"; done
done
# One token through the packed K-quants on AVX-512: the 512-bit tiles or the AVX2
# table's (kern_avx512.c kq_one_256 picks by vendor), both, whatever the machine.
if grep -qw avx512_vnni /proc/cpuinfo 2>/dev/null; then
    for w in 512 256; do run "test_matmul-kq-one-$w" env DELTAFIN_KQ_ONE=$w "$BUILD/test_matmul"; done
fi
echo
[ ${#failed[@]} -eq 0 ] || echo "failed: ${failed[*]}"
echo "$pass passed, $failn failed"
[ "$failn" -eq 0 ]
