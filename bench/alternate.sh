#!/usr/bin/env bash
# alternate.sh - decode and prompt speed of two builds of deltafin on the same models, run after run in
# turn (old, new, old, new, ...), so that a change's cost shows against the machine's drift. Prints one
# JSON line per run (deltafin bench --json) and the medians. ALT_P and ALT_N set the prompt's and the
# generation's tokens (128 and 32 unless set; compare.sh's are 512 and 128).
#   bench/alternate.sh OLD_DELTAFIN NEW_DELTAFIN [REPS] MODEL...
# e.g. git worktree add /tmp/old COMMIT && make -C /tmp/old -j2 all &&
#      bench/alternate.sh /tmp/old/build/deltafin build/deltafin 3 bench/results/models/kimi-k3-2b-mxfp4.gguf
set -u
[ $# -ge 3 ] || { sed -n 2,8p "$0" >&2; exit 2; }
P=${ALT_P:-128} N=${ALT_N:-32}
OLD=$1 NEW=$2; shift 2
REPS=3
case $1 in [0-9]*) REPS=$1; shift ;; esac
for M in "$@"; do
    for rep in $(seq "$REPS"); do
        for which in old new; do
            B=$OLD; [ $which = new ] && B=$NEW
            echo "$(basename "$M") $which $rep $("$B" bench -m "$M" -p "$P" -n "$N" -r 1 -t 2 --json 2> /dev/null | tail -1)"
        done
    done
done | tee /dev/stderr | awk '
    { split($0, a, "\"pp_tps\":"); split(a[2], p, ","); split($0, b, "\"tg_tps\":"); split(b[2], g, ",")
      k = $1 " " $2; n[k]++; pp[k, n[k]] = p[1]; tg[k, n[k]] = g[1] }
    function median(arr, k, c,   i, j, t, v) { for (i = 1; i <= c; i++) v[i] = arr[k, i]
        for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
        return v[int((c + 1) / 2)] }
    END { for (k in n) printf "%s: median prompt %.1f tokens/s, decode %.2f tokens/s (%d runs)\n", k, median(pp, k, n[k]),
          median(tg, k, n[k]), n[k] }' | sort
