# cgroup.sh - sourced by the streaming benchmarks (stream.sh, pagecache.sh, plan-error.sh): a cgroup v1
# memory group of their own, and the helpers they run things with. Needs root.
#   cgroup_make NAME    makes /sys/fs/cgroup/memory/deltafin-NAME-PID as $CG, removed when the script exits
#   in_cgroup CMD...    runs CMD inside it
#   drop                the page cache dropped (no run starts warm)
#   j JSON KEY          the number KEY holds in a one-line JSON object
cgroup_make() {
    CG=/sys/fs/cgroup/memory/deltafin-$1-$$
    mkdir "$CG"
    trap 'rmdir "$CG" 2>/dev/null || true' EXIT
}
in_cgroup() { ( echo "$BASHPID" > "$CG/cgroup.procs"; exec "$@" ); }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
j() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" <<< "$1"; }
