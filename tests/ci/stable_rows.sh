#!/bin/sh
# Stable rows (README "Kernel variants and perf_dispatch"): no row's
# verdict may depend on which variant the tuner picks. Every check but
# `tune` runs in the tuner's untimed mode, so forcing any variant of the
# case's op (KV_PERFDISPATCH_FORCE, which stands for "the tuner picked
# this one", a compatible variant or not) must leave the set of rows
# (case, check, backend) and every row's status exactly as the unforced
# run has them. The cases (tests/ci/stable_rows/cases.case) are ops with
# several variants, on the cpu and on accel.
. tests/ci/lib.sh
CASES=tests/ci/stable_rows/cases.case
# "case check backend STATUS" per row, sorted: what must not move.
rows() {
    sed -n 's/^{"case_id":"\([^"]*\)","op":"[^"]*","check":"\([^"]*\)","backend":"\([^"]*\)",.*"status":"\([A-Z]*\)".*/\1 \2 \3 \4/p' \
        "$1/results.jsonl" | sort
}
expect 0 "" "the unforced run passes" -- $KVRUN $CASES --golden=live --report-dir="$T/base"
rows "$T/base" >"$T/base.rows"
n=$(wc -l <"$T/base.rows")
[ "$n" -gt 100 ] && ok "the unforced run has $n rows" || bad "the unforced run has only $n rows"
forced=0
for op in add.Tensor mul.Tensor exp gelu sum.dim_IntList mm addmm _softmax native_layer_norm; do
    # "mm: CPU[ref, blocked, avx2, avx512]" -> ref blocked avx2 avx512
    variants=$(KV_PERFDISPATCH_FORCE='?' $KVRUN 2>/dev/null | sed -n "s/^$op: //p" |
        sed 's/[A-Za-z0-9]*\[\([^]]*\)\]/\1/g; s/,/ /g' | tr ' ' '\n' | sort -u)
    [ -n "$variants" ] || bad "$op lists no variants"
    for v in $variants; do
        forced=$((forced + 1))
        KV_PERFDISPATCH_FORCE="$op:$v" $KVRUN $CASES --golden=live --report-dir="$T/f" >"$T/out" 2>&1
        rows "$T/f" >"$T/f.rows"
        if cmp -s "$T/base.rows" "$T/f.rows"; then
            ok "KV_PERFDISPATCH_FORCE=$op:$v: the same $n rows, the same verdicts"
        else
            bad "KV_PERFDISPATCH_FORCE=$op:$v changed rows or verdicts:"
            diff "$T/base.rows" "$T/f.rows" | head -5 | sed 's/^/     | /'
        fi
    done
done
[ "$forced" -ge 20 ] && ok "$forced forced runs" || bad "only $forced forced runs"
finish
