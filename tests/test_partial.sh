#!/bin/sh
# Partial backends get exactly their own rows (`ninja test`, issue 21):
# the whole suite with plugins that have kernels for a few ops and decline
# the rest, as backends and as the accel target. Asserted from
# results.jsonl by tests/partial_rows.py: 0 FAIL/ERROR/CRASH/TIMEOUT,
# every row under a plugin that is not UNSUPPORTED is for one of its ops,
# and each of its ops has a PASS row (so the check cannot pass on a plugin
# that never ran).
#
# Plugins (each built out of tree by build.ninja's cc_pkgconfig rule but
# half SIM):
#   hello    examples/hello_backend: neg and add.Tensor in f32, the
#            bring-up guide's starting point (docs/bringup.md).
#   four     tests/plugins/four_ops.c: add.Tensor, mul.Tensor, relu and
#            sum.dim_IntList in f32, as a new user writes it.
#   halfsim  kernels/sim built with -DKV_SIM_HALF: SIM's kernels for every
#            other op only; its op list is what `kvrun --list-ops` says it
#            registered (about half of SIM's, which this test checks).
#   fournofb four_ops.c opted out of the default staged fallback
#            (no_default_fallback): the target runs its four ops and
#            nothing else, so any op the harness itself ran there to build
#            inputs (lazy bits, geometry, grad leaves) or read outputs
#            back would show as a row naming that op on its key, which
#            the row check refuses (docs/bringup.md, "What the harness
#            asks of a plugin").
#
# Cost: the CPU cases sweep every loaded backend, so one run of the whole
# suite with all three loaded (and halfsim the accel target) covers them
# as backends; hello and four are then the accel target in a run of the
# device=accel cases only (no CPU case reaches the accel target). About
# two suites' work instead of four.
#
# Usage: sh tests/test_partial.sh   (from the repository root, after
# `ninja tests`)
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

# run LABEL ACCEL-TARGET KVRUN-ARGS...: one run into $tmp/LABEL; 0 when it
# produced results with that accel target (exit 1 is "some row failed",
# which the row checks report in detail).
run() {
    label=$1 target=$2
    shift 2
    start=$(date +%s)
    build/kvrun "$@" --accel-target="$target" --report-dir="$tmp/$label" >"$tmp/$label.log" 2>&1
    rc=$?
    echo "partial: $label: kvrun exited $rc in $(($(date +%s) - start)) s"
    if [ "$rc" -gt 1 ] || [ ! -s "$tmp/$label/results.jsonl" ]; then
        tail -n 20 "$tmp/$label.log"
        echo "[  FAILED  ] partial: $label: kvrun exited $rc without results"
        failed=$((failed + 1))
        return 1
    fi
    if ! grep -q "\"accel_target\":\"$target\"" "$tmp/$label/meta.json"; then
        echo "[  FAILED  ] partial: $label: the run's accel target was not $target"
        failed=$((failed + 1))
        return 1
    fi
}

# rows WHAT ARGS...: the row check (tests/partial_rows.py ARGS).
rows() {
    what=$1
    shift
    echo "[ RUN      ] partial: $what"
    if python3 tests/partial_rows.py "$@"; then
        echo "[       OK ] partial: $what"
    else
        echo "[  FAILED  ] partial: $what"
        failed=$((failed + 1))
    fi
}

hello=build/examples/libhello.so hello_ops=neg,add.Tensor
four=build/tests/partial/libfour_ops.so four_ops=add.Tensor,mul.Tensor,relu,sum.dim_IntList
half=build/tests/partial/libhalfsim.so
fournofb=build/tests/partial/libfournofb.so
for lib in "$hello" "$four" "$half" "$fournofb"; do
    if [ ! -f "$lib" ]; then
        echo "[  FAILED  ] partial: $lib was not built (ninja all tests)"
        exit 1
    fi
done
# Half SIM's ops: those --list-ops shows a halfsim kernel for. SIM has a
# kernel for every op with a CPU kernel; half of them must be left.
half_ops=$(build/kvrun --backend="$half" --list-ops 2>/dev/null | awk -F'\t' '$2 ~ /(^|,)halfsim(,|$)/ { print $1 }' | paste -sd, -)
nhalf=$(printf '%s' "$half_ops" | tr ',' '\n' | grep -c .)
nref=$(build/kvrun --backend="$half" --list-ops 2>/dev/null | awk -F'\t' '$2 ~ /(^|,)CPU(,|$)/' | grep -c .)
echo "partial: halfsim has kernels for $nhalf of the $nref ops with a CPU kernel"
if [ "$nhalf" -lt 10 ] || [ $((2 * nhalf)) -gt $((nref + 1)) ]; then
    echo "[  FAILED  ] partial: halfsim: $nhalf ops with a kernel is not about half of $nref"
    failed=$((failed + 1))
fi

if run all halfsim --backend="$hello:$four:$half:$fournofb" cases/; then
    r=$tmp/all/results.jsonl
    rows "hello as a backend" "$r" hello "$hello_ops"
    rows "four as a backend" "$r" four "$four_ops"
    rows "fournofb as a backend (no fallback)" "$r" fournofb "$four_ops"
    rows "halfsim as a backend and the accel target" "$r" halfsim "$half_ops"
    # The check can fail: with its first op left out of the list, that
    # op's own PASS rows must be reported as rows it has no kernel for.
    if python3 tests/partial_rows.py "$r" four "${four_ops#*,}" >/dev/null; then
        echo "[  FAILED  ] partial: the row check passed with ${four_ops%%,*} left out of four's op list"
        failed=$((failed + 1))
    fi
fi
for p in hello four fournofb; do
    eval lib=\$$p
    if run "accel-$p" "$p" --backend="$lib" cases/ --filter=re:device=accel; then
        rows "$p as the accel target" --accel-only "$tmp/accel-$p/results.jsonl" "$p"
    fi
done

# The default fallback's opt-out (kv_backend_desc.no_default_fallback):
# without it, exp on accel over four runs staged and passes; over
# fournofb it is UNSUPPORTED (no kernel for its key).
if [ -s "$tmp/accel-four/results.jsonl" ] && [ -s "$tmp/accel-fournofb/results.jsonl" ]; then
    if ! grep '"op":"exp"' "$tmp/accel-four/results.jsonl" | grep -q '"status":"PASS"'; then
        echo "[  FAILED  ] partial: exp on accel over four (default fallback) has no PASS row"
        failed=$((failed + 1))
    fi
    if ! grep '"op":"exp"' "$tmp/accel-fournofb/results.jsonl" | grep '"status":"UNSUPPORTED"' | grep -q 'no kernel for key fournofb'; then
        echo "[  FAILED  ] partial: exp on accel over fournofb (opted out) is not UNSUPPORTED for want of a kernel"
        failed=$((failed + 1))
    fi
    # The lazy check of fournofb's own ops passes where the harness once
    # ran ops on it: a leaf that requires grad, and vmap's batch, sliced
    # on the host (select.int) to compare each sample.
    for id in 'mul.Tensor(dtype=f32,shape=[3,4],device=accel,mode=grad)' \
        'add.Tensor(dtype=f32,shape=[3,3],device=accel,mode=trace+vmap)'; do
        if ! grep -F "\"case_id\":\"$id\"" "$tmp/accel-fournofb/results.jsonl" | grep '"check":"lazy"' |
            grep -q '"status":"PASS"'; then
            echo "[  FAILED  ] partial: the lazy check of $id over fournofb did not pass"
            failed=$((failed + 1))
        fi
    done
fi

if [ "$failed" -ne 0 ]; then
    echo "test_partial: $failed failed"
    exit 1
fi
echo "test_partial: every partial backend got exactly its own rows"
