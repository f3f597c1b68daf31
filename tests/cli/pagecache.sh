#!/usr/bin/env bash
# pagecache.sh - --page-cache (issue 39 item 2): under --mem, what streams stays in the kernel's page cache, a
# second tier of cache that the budget does not count and the kernel takes back when it needs the room.
#   tests/cli/pagecache.sh BUILD_DIR
# A 52 MiB MoE model under a 40 MiB budget (a third of its experts cached). Its file lives beside the build (a
# tmpfs would keep every page whatever the mode), its pages dropped before each run (dd iflag=nocache). Checked:
# the text is the same with and without; without, the reads leave nothing of the experts behind (the page cache
# ends holding less than the part of the file that is not experts, plus readahead); with it, what was read stays
# (three quarters at least of the bytes read, or of the file when the run read more than it); the run's report
# says where its reads came from; plan predicts the second tier from the memory free now. In a cgroup v1 memory
# limit that counts the page cache and cannot hold the model (56 MiB: the budget + 16 MiB), the run completes
# with the same text: the kernel takes the page cache back (failcnt counts those reclaims), and the process's
# own peak (RSS) stays within the budget + 32 MiB.
set -u
B=${1:-build}
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
D="$B/deltafin"
command -v fincore > /dev/null || { echo "SKIPPED: fincore (util-linux) not found"; exit 0; }
W=$(mktemp -d "$B/.pagecache-XXXXXX")
trap 'rm -rf "$W"' EXIT
M="$W/moe.gguf"
"$B/mkmodel" -o "$M" --preset qwen3moe-tiny --type q8_0 --experts 64 --n-ff-exp 512 --n-embd 256 2> /dev/null ||
    { echo "mkmodel failed"; exit 1; }
MiB=$((1024 * 1024))
cached() { fincore --bytes --noheadings --output RES "$M" | tr -d ' '; }
drop() { dd if="$M" iflag=nocache count=0 status=none; }
RUN=(run -m "$M" --mem 40M -p "Once upon a time" -n 48 --temp 0 --hot none)
drop
"$D" "${RUN[@]}" > "$W/plain.out" 2> "$W/plain.err" || { echo "run failed:"; tail -3 "$W/plain.err"; exit 1; }
c_plain=$(cached)
drop
"$D" "${RUN[@]}" --page-cache > "$W/pc.out" 2> "$W/pc.err" || { echo "run --page-cache failed:"; tail -3 "$W/pc.err"; exit 1; }
c_pc=$(cached)
read_mib=$(sed -n 's/^io: \([0-9.]*\) MiB read.*/\1/p' "$W/pc.err")
experts=$(( $(stat -c %s "$M") - 8 * MiB )) # the file less its dense part and metadata (< 8 MiB)
echo "page cache after the run: $((c_plain / 1024)) KiB without --page-cache, $((c_pc / 1024)) KiB with it; read ${read_mib} MiB"
check "the same text with --page-cache" cmp -s "$W/plain.out" "$W/pc.out"
check "without it, the experts read are not kept (page cache $((c_plain / MiB)) MiB < file less experts + 4 MiB)" \
    test "$c_plain" -lt $(( $(stat -c %s "$M") - experts + 4 * MiB ))
check "with it, what was read stays (page cache $((c_pc / MiB)) MiB of the $read_mib MiB read)" \
    awk -v c="$c_pc" -v r="$read_mib" -v f="$(stat -c %s "$M")" 'BEGIN { r *= 1048576; exit !(c >= 0.75 * (r < f ? r : f)) }'
check "the report says the reads went through the page cache" grep -q "read through the page cache" "$W/pc.err"
check "... and without it, from disk" grep -q "MiB read from disk" "$W/plain.err"
p=$("$D" plan -m "$M" --mem 40M --probe-seconds 0.3 2>&1)
check "plan predicts the second tier from the memory free now" contains "$p" "predicted with --page-cache:"
j=$("$D" plan -m "$M" --mem 40M --probe-seconds 0.3 --json 2> /dev/null)
# (faster than without only where the disk binds: a copy costs memory time; test_api checks the arithmetic)
check "plan --json: the page cache's room, hit rate and tokens/s" \
    test "$(jq '.page_cache_room_bytes > 0 and .page_cache_hit_rate > 0 and .page_cache_tokens_per_s > 0' <<< "$j")" = true
check "--page-cache is a flag of serve and chat too" \
    test "$("$D" serve --help 2>&1 | grep -c -- --page-cache)" -ge 1 -a "$("$D" chat --help 2>&1 | grep -c -- --page-cache)" -ge 1

# in a cgroup that counts the page cache and cannot hold the model: the kernel takes the page cache back
if [ -z "${DELTAFIN_SANITIZED:-}" ] && [ -w "$CGROOT" ]; then
    CG="$CGROOT/deltafin-pagecache-$$"
    trap '[ -d "$CG" ] && rmdir "$CG" 2>/dev/null; rm -rf "$W"' EXIT
    mkdir "$CG" && echo $((56 * MiB)) > "$CG/memory.limit_in_bytes"
    drop
    ( echo "$BASHPID" > "$CG/cgroup.procs" && exec "$D" "${RUN[@]}" --page-cache > "$W/cg.out" 2> "$W/cg.err" )
    rc=$?
    failcnt=$(cat "$CG/memory.failcnt")
    rmdir "$CG"
    rss=$(sed -n 's/^peak memory: \([0-9.]*\) MiB (RSS).*/\1/p' "$W/cg.err")
    echo "cgroup of 56 MiB: exit $rc, failcnt $failcnt (reclaims of the page cache), peak RSS $rss MiB"
    check "in a cgroup of budget + 16 MiB, --page-cache completes with the same text" \
        test "$rc" -eq 0 -a "$(md5sum < "$W/cg.out")" = "$(md5sum < "$W/plain.out")"
    check "... its own peak (RSS) within the budget + 32 MiB" awk -v r="$rss" 'BEGIN { exit !(r > 0 && r <= 72) }'
else
    echo "cgroup part skipped: sanitizer build, or $CGROOT not writable"
fi
finish
