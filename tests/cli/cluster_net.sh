#!/usr/bin/env bash
# cluster_net.sh - the ranks of a cluster as separate machines: each in its own
# network namespace, joined by veth links to a bridge that the test makes,
# talking TCP over those interfaces only (Open MPI's tcp transport, no shared
# memory), each in its own cgroup v1 memory limit of its budget + 256 MiB.
#   tests/cli/cluster_net.sh BUILD_DIR
# mpirun stays outside; it starts each rank through a launch agent that
# enters the rank's namespace (with its own host name) and cgroup. Checks:
# the greedy text of 2 and 4 ranks equals one process's for a streamed MoE
# model about seven times the budget (expert parallel; split by layers over
# 2) and for deepseek4-tiny; the bytes the ranks report as sent went over the
# veth links; no rank's cgroup hit its limit. Needs root, ip and unshare;
# the cgroup half needs a writable cgroup v1 memory controller and an
# unsanitized build (ASan's shadow memory is not Deltafin's).
set -u
B=${1:-build}
D=$(cd "$B" && pwd)/deltafin
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$ROOT/tests/cli_common.sh"
skip() { echo "SKIPPED: $1"; exit 0; }
if ! command -v mpirun > /dev/null || [ ! -f "$B/libdeltafin-mpi.so" ]; then
    [ -n "${CI:-}" ] && { echo "FAIL mpirun or $B/libdeltafin-mpi.so missing"; exit 1; }
    skip "Open MPI is not installed (scripts/install-deps.sh)"
fi
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip > /dev/null && command -v unshare > /dev/null || skip "ip or unshare missing"
CGOK=1
[ -n "${DELTAFIN_SANITIZED:-}" ] && CGOK=0
[ -w /sys/fs/cgroup/memory ] || CGOK=0
T=$(mktemp -d /tmp/deltafin-clnet-XXXXXX)
TAG=$$
BR=dfb$TAG
NS=()
cleanup() {
    for n in "${NS[@]}"; do ip netns pids "$n" 2> /dev/null | xargs -r kill -9 2> /dev/null; ip netns del "$n" 2> /dev/null; done
    ip link del "$BR" 2> /dev/null
    for c in /sys/fs/cgroup/memory/deltafin-clnet-$TAG-*; do [ -d "$c" ] && rmdir "$c" 2> /dev/null; done
    rm -rf "$T"
}
trap cleanup EXIT
# the processes mpirun starts only (the single-process runs here keep LeakSanitizer)
NOLEAK=(env "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0")

# ---- four "machines": namespaces at 10.199.0.2-5/24 on one bridge (10.199.0.1), nothing else routed ----
ip link add "$BR" type bridge || skip "cannot make a bridge here"
ip addr add 10.199.0.1/24 dev "$BR" && ip link set "$BR" up
for i in 1 2 3 4; do
    n=dfn$TAG-$i
    ip netns add "$n" || skip "cannot make a network namespace here"
    NS+=("$n")
    ip link add "dfv$TAG$i" type veth peer name "dfp$TAG$i"
    ip link set "dfp$TAG$i" netns "$n"
    ip link set "dfv$TAG$i" master "$BR" && ip link set "dfv$TAG$i" up
    ip netns exec "$n" ip addr add "10.199.0.$((i + 1))/24" dev "dfp$TAG$i"
    ip netns exec "$n" ip link set "dfp$TAG$i" up
    ip netns exec "$n" ip link set lo up
done
# the launch agent mpirun runs as "AGENT [options] HOST COMMAND...": into HOST's cgroup, namespace and host name
cat > "$T/agent" << AGENT
#!/bin/bash
while [[ "\$1" == -* ]]; do shift; done
host=\$1; shift
if [ $CGOK = 1 ]; then
    cg=/sys/fs/cgroup/memory/deltafin-clnet-$TAG-\$host
    mkdir -p "\$cg" && cat "$T/limit" > "\$cg/memory.limit_in_bytes" && echo \$\$ > "\$cg/cgroup.procs"
fi
exec ip netns exec "\$host" unshare --uts sh -c "hostname \$host; exec \$*"
AGENT
chmod +x "$T/agent"
hosts() { local h=(); for i in $(seq 1 "$1"); do h+=("${NS[$((i - 1))]}"); done; (IFS=,; echo "${h[*]}"); }
mpi() { # RANKS ARGS...: one rank a namespace, TCP over the bridge only
    local np=$1; shift
    "${NOLEAK[@]}" timeout 300 mpirun --allow-run-as-root --quiet --host "$(hosts "$np")" -np "$np" --mca plm_rsh_agent "$T/agent" \
        --mca oob_tcp_if_include 10.199.0.0/24 --mca btl_tcp_if_include 10.199.0.0/24 --mca btl tcp,self "$D" "$@"
}
veth_bytes() { local s=0; for i in 1 2 3 4; do s=$((s + $(cat "/sys/class/net/dfv$TAG$i/statistics/rx_bytes"))); done; echo $s; }
cg_check() { # LABEL: every rank's cgroup stayed under its limit; then they go
    [ $CGOK = 1 ] || return 0
    for c in /sys/fs/cgroup/memory/deltafin-clnet-$TAG-*; do
        [ -d "$c" ] || continue
        local peak fc
        peak=$(cat "$c/memory.max_usage_in_bytes"); fc=$(cat "$c/memory.failcnt")
        echo "$1: ${c##*-$TAG-}: cgroup peak $((peak >> 20)) MiB of $(($(cat "$T/limit") >> 20)) MiB, failcnt $fc"
        check "$1: ${c##*-$TAG-} never hit its cgroup limit" test "$fc" -eq 0
        rmdir "$c" 2> /dev/null
    done
}

"$B/mkmodel" -o "$T/big.gguf" --preset qwen3moe-tiny --type q8_0 --experts 64 --n-ff-exp 512 --n-embd 512 --n-layer 8 \
    --seed 5 > /dev/null 2>&1
"$B/mkmodel" -o "$T/ds4.gguf" --preset deepseek4-tiny --type q8_0 > /dev/null 2>&1
echo $(( (60 + 256) << 20 )) > "$T/limit"
Q=(run -m "$T/big.gguf" --mem 60M -c 256 -p "Once upon a time there was" -n 24 --temp 0 --hot none -t 1)
"$D" "${Q[@]}" > "$T/big.1" 2> /dev/null
for np in 2 4; do
    before=$(veth_bytes)
    mpi $np "${Q[@]}" > "$T/big.$np" 2> "$T/big.e$np"
    rc=$?
    after=$(veth_bytes)
    sent=$(sed -n 's/^cluster: network: rank 0 sent \([0-9.]*\) MiB and received \([0-9.]*\) MiB per token.*/\1 \2/p' "$T/big.e$np")
    echo "$np ranks: exit $rc; veth links carried $(( (after - before) >> 10 )) KiB; rank 0 reports $sent MiB per token out/in"
    check "--mem over $np namespaces: exit 0" test "$rc" -eq 0
    check "--mem over $np namespaces: the single process's text" cmp -s "$T/big.1" "$T/big.$np"
    check "--mem over $np namespaces: every rank reports" test "$(grep -c '^cluster: rank' "$T/big.e$np")" -eq $np
    check "--mem over $np namespaces: the rows went over the veth links (> 100 KiB)" test $((after - before)) -gt 102400
    cg_check "--mem over $np namespaces"
done
# split by layers: the hidden state over the links, each stage in its cgroup of its budget + 256 MiB
before=$(veth_bytes)
mpi 2 "${Q[@]}" --split layers > "$T/bigL.2" 2> "$T/bigL.e2"
rc=$?
after=$(veth_bytes)
check "--split layers --mem over 2 namespaces: exit 0" test "$rc" -eq 0
check "--split layers --mem over 2 namespaces: the single process's text" cmp -s "$T/big.1" "$T/bigL.2"
check "--split layers --mem over 2 namespaces: the carry went over the veth links (> 40 KiB)" \
    test $((after - before)) -gt 40960
cg_check "--split layers --mem over 2 namespaces"
echo $(( 512 << 20 )) > "$T/limit"
"$D" run -m "$T/ds4.gguf" -p "the cat sat on the mat" -n 16 --temp 0 -t 1 > "$T/ds4.1" 2> /dev/null
mpi 2 run -m "$T/ds4.gguf" -p "the cat sat on the mat" -n 16 --temp 0 -t 1 > "$T/ds4.2" 2> "$T/ds4.e2"
check "deepseek4 over 2 namespaces: exit 0" test $? -eq 0
check "deepseek4 over 2 namespaces: the single process's text" cmp -s "$T/ds4.1" "$T/ds4.2"
cg_check "deepseek4 over 2 namespaces"
finish
