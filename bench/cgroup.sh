# cgroup.sh - sourced by the streaming benchmarks (stream.sh, pagecache.sh, plan-error.sh): a cgroup v1
# memory group of their own, optionally a blkio group that holds a disk to a steady speed, and the helpers
# they run things with. Needs root.
#   cgroup_make NAME    makes /sys/fs/cgroup/memory/deltafin-NAME-PID as $CG, removed when the script exits
#   disk_limit FILE MIBPS
#                       makes /sys/fs/cgroup/blkio/deltafin-PID as $BG: reads of the disk that holds FILE
#                       capped at MIBPS MiB/s (blk-throttle), for every command run by in_disk or in_cgroup.
#                       A shared or virtual disk's speed moves from minute to minute (bench/RESULTS.md: 1.0-4.0
#                       GB/s within an hour here); capped below its slowest, it reads the same all along.
#   in_cgroup CMD...    runs CMD inside the memory group (and the blkio group, if any)
#   in_disk CMD...      runs CMD inside the blkio group, if any (else as it is)
#   drop                the page cache dropped (no run starts warm)
#   j JSON KEY          the number KEY holds in a one-line JSON object
CG=""; BG=""
cgroup_remove() {
    [ -z "$CG" ] || rmdir "$CG" 2>/dev/null || true
    [ -z "$BG" ] || rmdir "$BG" 2>/dev/null || true
}
cgroup_make() {
    CG=/sys/fs/cgroup/memory/deltafin-$1-$$
    mkdir "$CG"
    trap cgroup_remove EXIT
}
disk_limit() {
    local dev part
    dev=$(stat -c '%Hd:%Ld' "$1")
    # blk-throttle rules name a whole disk: a partition's parent holds the queue
    part=/sys/dev/block/$dev
    [ -e "$part" ] || { echo "disk_limit: $1 is not on a block device ($dev: tmpfs, overlay?)" >&2; exit 1; }
    [ ! -e "$part/partition" ] || dev=$(cat "$part/../dev")
    [ -d /sys/fs/cgroup/blkio ] || { echo "disk_limit: no cgroup v1 blkio controller" >&2; exit 1; }
    BG=/sys/fs/cgroup/blkio/deltafin-$$
    mkdir "$BG"
    trap cgroup_remove EXIT
    echo "$dev $(($2 * 1024 * 1024))" > "$BG/blkio.throttle.read_bps_device"
}
in_cgroup() {
    ( echo "$BASHPID" > "$CG/cgroup.procs"; [ -z "$BG" ] || echo "$BASHPID" > "$BG/cgroup.procs"; exec "$@" )
}
in_disk() { ( [ -z "$BG" ] || echo "$BASHPID" > "$BG/cgroup.procs"; exec "$@" ); }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
j() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" <<< "$1"; }
