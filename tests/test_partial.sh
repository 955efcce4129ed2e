#!/bin/sh
# Partial backends get exactly their own rows (`ninja test`, issue 21):
# the whole suite with a plugin that has kernels for a few ops and
# declines the rest, loaded as a backend and made the accel target in one
# run (the CPU cases sweep it as a backend: variants:<name>, memory:<name>,
# error rows under <name>; the device=accel cases run on it). Asserted
# from results.jsonl by tests/partial_rows.py: 0 FAIL/ERROR/CRASH/TIMEOUT,
# every row under the plugin that is not UNSUPPORTED is for one of its
# ops, and each of its ops has a PASS row (so the check cannot pass on a
# plugin that never ran).
#
# Plugins (each built out of tree by build.ninja's cc_pkgconfig rule):
#   hello    examples/hello_backend: neg and add.Tensor in f32, the
#            bring-up guide's starting point (docs/bringup.md).
#   four     tests/plugins/four_ops.c: add.Tensor, mul.Tensor, relu and
#            sum.dim_IntList in f32, as a new user writes it.
#   halfsim  kernels/sim built with -DKV_SIM_HALF: SIM's kernels for every
#            other op only; its op list is what `kvrun --list-ops` says it
#            registered (about half of SIM's, which this test checks).
#
# Usage: sh tests/test_partial.sh   (from the repository root, after
# `ninja tests`)
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

# partial NAME LIB OPS: one run, then the row check.
partial() {
    name=$1 lib=$2 ops=$3
    echo "[ RUN      ] partial: $name"
    if [ ! -f "$lib" ]; then
        echo "[  FAILED  ] partial: $name: $lib was not built (ninja tests)"
        failed=$((failed + 1))
        return
    fi
    start=$(date +%s)
    # Exit 1 is "some row failed", which the row check reports in detail;
    # anything else (2: bad usage) is this test's own failure.
    build/kvrun --backend="$lib" --accel-target="$name" cases/ --report-dir="$tmp/$name" >"$tmp/$name.log" 2>&1
    rc=$?
    echo "partial: $name: kvrun exited $rc in $(($(date +%s) - start)) s"
    if [ "$rc" -gt 1 ] || [ ! -s "$tmp/$name/results.jsonl" ]; then
        tail -n 20 "$tmp/$name.log"
        echo "[  FAILED  ] partial: $name: kvrun exited $rc without results"
        failed=$((failed + 1))
        return
    fi
    if ! grep -q "\"accel_target\":\"$name\"" "$tmp/$name/meta.json"; then
        echo "[  FAILED  ] partial: $name: the run's accel target was not $name"
        failed=$((failed + 1))
        return
    fi
    if python3 tests/partial_rows.py "$tmp/$name/results.jsonl" "$name" "$ops"; then
        echo "[       OK ] partial: $name"
    else
        echo "[  FAILED  ] partial: $name"
        failed=$((failed + 1))
    fi
    # The check can fail: with its first op left out of the list, that
    # op's own PASS rows must be reported as rows it has no kernel for.
    if python3 tests/partial_rows.py "$tmp/$name/results.jsonl" "$name" "${ops#*,}" >/dev/null; then
        echo "[  FAILED  ] partial: $name: the row check passed with ${ops%%,*} left out of the op list"
        failed=$((failed + 1))
    fi
}

partial hello build/examples/libhello.so neg,add.Tensor
partial four build/tests/partial/libfour_ops.so add.Tensor,mul.Tensor,relu,sum.dim_IntList
# Half SIM's ops: those --list-ops shows a halfsim kernel for. SIM has a
# kernel for every op with a CPU reference; half of them must be left.
half=build/tests/partial/libhalfsim.so
ops=$(build/kvrun --backend="$half" --list-ops 2>/dev/null | awk -F'\t' '$2 ~ /(^|,)halfsim(,|$)/ { print $1 }' | paste -sd, -)
nhalf=$(printf '%s' "$ops" | tr ',' '\n' | grep -c .)
nref=$(build/kvrun --backend="$half" --list-ops 2>/dev/null | awk -F'\t' '$2 ~ /(^|,)CPU(,|$)/' | grep -c .)
echo "partial: halfsim has kernels for $nhalf of the $nref ops with a CPU kernel"
if [ "$nhalf" -lt 10 ] || [ $((2 * nhalf)) -gt $((nref + 1)) ]; then
    echo "[  FAILED  ] partial: halfsim: $nhalf ops with a kernel is not about half of $nref"
    failed=$((failed + 1))
else
    partial halfsim "$half" "$ops"
fi

if [ "$failed" -ne 0 ]; then
    echo "test_partial: $failed failed"
    exit 1
fi
echo "test_partial: every partial backend got exactly its own rows"
