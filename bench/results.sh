# results.sh - sourced by the benchmarks: results_add TITLE THREADS REPORT appends REPORT to bench/RESULTS.md
# under "## DATE — TITLE", with the commit, the CPU and the threads it ran with (every result says where it came
# from: a figure without its machine cannot be compared).
results_add() {
    {
        echo
        echo "## $(date -u +%F) — $1"
        echo
        echo "Commit $(git rev-parse --short HEAD), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $2 threads."
        echo
        echo '```'
        echo "$3"
        echo '```'
    } >> bench/RESULTS.md
}
