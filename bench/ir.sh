#!/bin/sh
# Instructions per call of every path into add / add_ (bench/kvcalls.c),
# counted by Callgrind: (Ir of N calls - Ir of 0 calls) / N. Unlike
# kvbench's timings these repeat exactly, load or no load. The CPU variant
# is forced (avx2) so the tuner's pick cannot differ between runs.
#
#   sh bench/ir.sh [build/bench/kvcalls]
set -eu
bin=${1:-build/bench/kvcalls}
n=20000
export KV_PERFDISPATCH_FORCE=add_.Tensor:avx2,add.Tensor:avx2
ir() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" "$2" "$3" 2>&1 |
        sed -n 's/.*Collected : *\([0-9]*\).*/\1/p; s/.*I *refs: *\([0-9,]*\).*/\1/p' | tr -d , | tail -1
}
printf '%-34s %8s %8s %8s %8s   %s\n' "instructions per call" direct typed fast slow "fast/direct fast/slow"
for op in a i; do
    name=$([ "$op" = a ] && echo "add.Tensor (allocating)" || echo "add_.Tensor (in place)")
    set --
    for p in D T F S; do
        z=$(ir "$p" "$op" 0)
        c=$(ir "$p" "$op" "$n")
        set -- "$@" $(((c - z) / n))
    done
    awk -v n="$name" -v d="$1" -v t="$2" -v f="$3" -v s="$4" \
        'BEGIN { printf "%-34s %8d %8d %8d %8d   %.2f %.2f\n", n, d, t, f, s, f / d, f / s }'
done
