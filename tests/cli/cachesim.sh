#!/usr/bin/env bash
# cachesim.sh - the cache simulator (tools/cachesim.c) against answers worked
# out by hand, on a real trace, and on bad input.
#   tests/cli/cachesim.sh BUILD_DIR
set -euo pipefail
B=${1:-build}
T=$(mktemp -d /tmp/deltafin-cachesim-XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "${BASH_SOURCE[0]}")/../cli_common.sh"
byte() { printf "\\$(printf '%03o' "$1")"; }
le16() { byte $(($1 & 255)); byte $((($1 >> 8) & 255)); }
le32() { le16 $(($1 & 65535)); le16 $((($1 >> 16) & 65535)); }
record() { # POS LAYER EXPERT (K = 1, weight 1.0f)
    le32 "$1"; le16 "$2"; le16 1; le32 "$3"; printf '\x00\x00\x80\x3f'
}
field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p" <<< "$2"; }

# Two layers of 4 experts, one used per token, 6 generated tokens: layer 0
# asks for A B C A B C (experts 0 1 2 0 1 2), layer 1 always for X (3).
# With 3 slots, by hand:
#   LRU:    X hits 5 times; every A/B/C misses (each is evicted just
#           before it comes back)                                  5/12
#   Belady: X 5 hits, plus A at token 3 and C at token 5 (it evicts the
#           expert needed furthest ahead)                          7/12
#   static: X, and two of A/B/C, all the time                     10/12
#   freq:   counts decay, so the A/B/C expert seen longest ago is
#           always the one evicted: like LRU here                  5/12
{
    printf 'DFTR'; le32 1; le32 2; le32 4; le32 1
    seq=(0 1 2 0 1 2)
    for p in 0 1 2 3 4 5; do record "$p" 0 "${seq[$p]}"; record "$p" 1 3; done
} > "$T/abc.bin"
out=$("$B/cachesim" "$T/abc.bin" --slots 3 --json)
echo "    $out"
check "12 requests in 6 steps" test "$(field requests "$out")/$(field steps "$out")" = "12/6"
check "LRU 5/12" test "$(field lru "$out")" = 0.4167
check "Belady 7/12" test "$(field belady "$out")" = 0.5833
check "best static 10/12" test "$(field static "$out")" = 0.8333
check "freq 5/12" test "$(field freq "$out")" = 0.4167
# started empty, the static set {X, A, B} loads each once: 5 + 1 + 1 hits
check "best static started empty 7/12" test "$(field static_cold "$out")" = 0.5833
# holding what it computes, a static set cannot fill all 3 slots: A/B/C need a slot when they come.
# {X} kept + 2 slots for A/B/C (period 3, LRU): 5; {X, C} kept + 1 slot for A/B: 5 + C's 2nd use = 6;
# {X, C, B} kept, so A takes one of them each time it comes: 6 again; none kept: LRU's 5
check "best static holding what it computes 6/12" test "$(field static_held "$out")" = 0.5000
# consecutive requests of a layer: layer 0 never repeats (0 x 5), layer 1 always (1 x 5)
check "overlap 5/10" test "$(field overlap "$out")" = 0.5000

# Where a layer is decides between near counts: three layers of two experts, P/Q/R (0) used at step 0,
# P'/Q'/R' (1) at step 1, P/Q/R again at step 2; 4 slots. At step 1 layer 1 must evict one of P, Q, R
# (all used once, a step ago) or P' (used now): ws_next_use evicts Q (its layer is furthest off), then at
# layer 2 R, so P is still there at step 2: 1 hit in 9. Counts alone tie and go least recently used:
# P goes first, and nothing hits (0 of 9).
{
    printf 'DFTR'; le32 1; le32 3; le32 2; le32 1
    for e in 0 1 0; do record 0 0 "$e"; record 0 1 "$e"; record 0 2 "$e"; done
} > "$T/near.bin"
out=$("$B/cachesim" "$T/near.bin" --slots 4 --json)
echo "    $out"
check "freq 1/9: the expert whose layer is next is kept" test "$(field freq "$out")" = 0.1111

# A prompt batch: tokens 0..2 of one forward pass name experts 0, 0, 1 in
# layer 0 (then layer 1): one request, expert 0 counted once.
{
    printf 'DFTR'; le32 1; le32 2; le32 4; le32 1
    record 0 0 0; record 1 0 0; record 2 0 1; record 0 1 3; record 1 1 3; record 2 1 3
    record 3 0 0; record 3 1 3
} > "$T/batch.bin"
out=$("$B/cachesim" "$T/batch.bin" --slots 4 --json)
check "a batch is one request per layer" test "$(field requests "$out")/$(field steps "$out")" = "4/2"
check "a batch's repeated expert counts once (2 hits of 5)" test "$(field lru "$out")" = 0.4000

# Version 2 (what Deltafin writes) adds each record's routing margin; --near-ties lists the small ones
record2() { # POS LAYER EXPERT MARGIN-AS-4-BYTES (K = 1, weight 1.0f)
    le32 "$1"; le16 "$2"; le16 1; printf "$4"; le32 "$3"; printf '\x00\x00\x80\x3f'
}
{
    printf 'DFTR'; le32 2; le32 2; le32 4; le32 1
    record2 0 0 1 '\x00\x00\x00\x3f'      # 0.5
    record2 0 1 2 '\xcc\xbc\x0c\x32'      # about 8.2e-9: a tie
    record2 1 0 3 '\x00\x00\x80\x7f'      # +inf: nothing was left to choose
} > "$T/v2.bin"
out=$("$B/cachesim" "$T/v2.bin" --slots 2 --json)
check "a version-2 trace is read: 3 requests" test "$(field requests "$out")" = 3
out=$("$B/cachesim" "$T/v2.bin" --near-ties 1e-6)
echo "    near ties: $out"
check "--near-ties lists the one tie, no other" test "$(wc -l <<< "$out")/$(cut -d' ' -f1-4 <<< "$out")" = \
    "1/position 0 layer 1"
if "$B/cachesim" "$T/abc.bin" --near-ties 1e-6 2> "$T/err"; then r=0; else r=$?; fi
check "a version-1 trace has no margins to list" test "$r" = 1

# A real trace: Belady is an upper bound of every demand policy
"$B/mkmodel" -o "$T/m.gguf" --preset qwen3moe-tiny --n-layer 4 --experts 32 --experts-used 4 --router-skew 0.6 \
    --router-corr 0.5 2>/dev/null
"$B/deltafin" run -m "$T/m.gguf" -p "Once upon a time" -n 40 --temp 0.8 --seed 1 --ignore-eos \
    --trace-experts "$T/real.bin" > /dev/null 2>&1
out=$("$B/cachesim" "$T/real.bin" --slots 24 --json)
echo "    $out"
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b + 1e-9) }'; }
check "LRU <= Belady" le "$(field lru "$out")" "$(field belady "$out")"
check "Deltafin's trace lists its margins (none negative)" \
    bash -c "\"$B/cachesim\" \"$T/real.bin\" --near-ties 1e30 | awk '\$6 < 0 { exit 1 } END { exit NR < 40 }'"
ov0=$(field overlap "$out")

# mkmodel --topics: generation stays on a subject, so consecutive tokens route more alike
"$B/mkmodel" -o "$T/t.gguf" --preset qwen3moe-tiny --n-layer 4 --experts 32 --experts-used 4 --router-skew 0.6 \
    --router-corr 0.5 --topics 8 2>/dev/null
"$B/deltafin" run -m "$T/t.gguf" -p "Once upon a time" -n 40 --temp 0.8 --seed 1 --ignore-eos \
    --trace-experts "$T/topics.bin" > /dev/null 2>&1
ov1=$(field overlap "$("$B/cachesim" "$T/topics.bin" --slots 24 --json)")
echo "    overlap of consecutive tokens' experts: $ov0 without topics, $ov1 with 8"
check "--topics makes consecutive tokens route alike" awk -v a="$ov0" -v b="$ov1" 'BEGIN { exit !(b > a + 0.1) }'
check "--topics is checked" bash -c "! \"$B/mkmodel\" -o \"$T/x.gguf\" --topics 0 2>/dev/null"
check "freq <= Belady" le "$(field freq "$out")" "$(field belady "$out")"
check "old LFU <= Belady" le "$(field lfu "$out")" "$(field belady "$out")"
check "hit rates are rates" le "$(field static "$out")" 1
check "static holding what it computes <= Belady" le "$(field static_held "$out")" "$(field belady "$out")"

# The store keeps to the policy cachesim calls freq: under a budget whose cache holds fewer experts than one
# token's step names (14 slots, 6 layers x 4), its hit rate on the run's own routing is freq's, not LRU's (the
# victim once preferred the experts later layers were about to use over those earlier layers had just used:
# 9% where freq hits 25%). Its guesses may add a little; they must not take much away.
"$B/mkmodel" -o "$T/s.gguf" --preset qwen3moe-tiny --n-layer 6 --experts 32 --experts-used 4 --router-skew 0.6 \
    --router-corr 0.5 2>/dev/null
"$B/deltafin" run -m "$T/s.gguf" --mem 40M -c 256 -p "Once upon a time" -n 64 --temp 0 --ignore-eos --hot none \
    --trace-experts "$T/store.bin" > /dev/null 2> "$T/store.err"
slots=$(sed -n 's/^plan: expert cache \([0-9]*\) slots.*/\1/p' "$T/store.err")
hits=$(sed -n 's/^io: expert cache hit rate [0-9.]*% (\([0-9]*\) of \([0-9]*\)).*/\1 \2/p' "$T/store.err")
freq=$(field freq "$("$B/cachesim" "$T/store.bin" --slots "${slots:-0}" --json)")
echo "    the store (hits, lookups): $hits with $slots slots; cachesim's freq on its trace: $freq"
check "a step names more experts than the cache holds" test "${slots:-99}" -lt 24
check "the store hits at least 0.85 x its policy's replay" \
    awk -v h="${hits:-0 1}" -v f="${freq:-1}" 'BEGIN { split(h, a, " "); exit !(f > 0.1 && a[1] >= 0.85 * f * a[2]) }'

# bad input: clear errors, exit 1
printf 'this is not a routing trace at all' > "$T/bad.bin"
if "$B/cachesim" "$T/bad.bin" --slots 3 2> "$T/err"; then r=0; else r=$?; fi
check "garbage is refused with exit 1" test "$r" = 1
check "... and says why" grep -q "not a version-1 or 2 routing trace" "$T/err"
head -c 30 "$T/abc.bin" > "$T/cut.bin"
if "$B/cachesim" "$T/cut.bin" --slots 3 2> "$T/err"; then r=0; else r=$?; fi
check "a truncated trace is refused" test "$r" = 1
if "$B/cachesim" "$T/abc.bin" 2> "$T/err"; then r=0; else r=$?; fi
check "missing --slots is a usage error" test "$r" = 1
finish
