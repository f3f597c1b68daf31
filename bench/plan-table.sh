# plan-table.sh - sourced by bench/k3-plan.sh and bench/ds4-plan.sh: what
# `deltafin plan` says about one (shape-only) model at several budgets, on a
# laptop-class machine (--disk-gbps 5 --mem-gbps 400), the same with the dense
# weights requantized to q4_K at load, and measuring this machine.
#
#   plan_table MODEL CTX BUDGET...      (BUILD names the build directory)

# j JSON KEY: one value of plan's --json line
j() { sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p" <<< "$1"; }

plan_table() {
    local M=$1 ctx=$2 mem machine r desc extra
    shift 2
    printf "%-8s %-30s %10s %10s %12s %14s %14s %10s\n" budget machine resident_GiB slots hit_rate disk_GiB/token mem_GiB/token tokens/s
    for mem in "$@"; do
        for machine in laptop laptop-q4K here; do
            case $machine in
                laptop) extra=(--disk-gbps 5 --mem-gbps 400) ;;
                laptop-q4K) extra=(--disk-gbps 5 --mem-gbps 400 --resident-type q4_K) ;;
                *) extra=(--probe-seconds 3) ;;
            esac
            r=$("$BUILD/deltafin" plan -m "$M" --mem "$mem" -c "$ctx" --json "${extra[@]}" || true)
            if [ "$(j "$r" fits)" != true ]; then printf "%-8s %-30s does not fit (minimum %s bytes)\n" "$mem" "$machine" "$(j "$r" minimum)"; continue; fi
            desc=$([ "$machine" != here ] && echo "5 GB/s, 400 GB/s${extra[4]:+, dense ${extra[5]}}" || awk -v d="$(j "$r" disk_bytes_per_s)" -v m="$(j "$r" memory_bytes_per_s)" 'BEGIN { printf "this: %.1f GB/s, %.0f GB/s", d / 1e9, m / 1e9 }')
            awk -v b="$mem" -v ma="$desc" -v res="$(j "$r" resident_bytes)" -v s="$(j "$r" expert_slots)" -v h="$(j "$r" expected_hit_rate)" \
                -v d="$(j "$r" disk_bytes_per_token)" -v m="$(j "$r" memory_bytes_per_token)" -v t="$(j "$r" predicted_tokens_per_s)" \
                'BEGIN { printf "%-8s %-30s %10.1f %10d %11.1f%% %14.1f %14.1f %10.3f\n", b, ma, res / 2^30, s, 100 * h, d / 2^30, m / 2^30, t }'
        done
    done
}
