#!/bin/sh
# The bring-up test (`ninja test`, issue 11 item 8): README "Bringing up
# your backend", step by step, as a user would type it. A copy of
# kernels/sim becomes a new backend "npu" in a folder outside the tree,
# built with build/kvsuite.pc and nothing else, loaded with --backend=,
# and then made the accel target by its name.
#
# Steps are `required` (fail this test) or `pending` (print "PENDING:
# <step>: <what is missing>" and pass): a step waiting for a feature that
# is being built elsewhere. Once it lands, `pending` -> `required` is the
# whole change (the test says "NOW HOLDS" when a pending step passes).
#
# Usage: sh tests/test_bringup.sh   (from the repository root, after `ninja`)
set -u
repo=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The slice: add and mm in f32 from the suite's own case files, on the
# CPU (every backend's variants) and on accel: about a second.
slice="cases/ --filter=re:^(add\.Tensor|mm)\(dtype=f32, --jobs=2 --timeout=20"

failed=0
required=0
pending=0
holds=0
# step MODE NAME WHAT-IS-MISSING (empty: the step holds)
step() {
    if [ "$1" = required ]; then
        required=$((required + 1))
        echo "[ RUN      ] bringup: $2"
        if [ -z "$3" ]; then
            echo "[       OK ] bringup: $2"
        else
            echo "[  FAILED  ] bringup: $2: $3"
            failed=$((failed + 1))
        fi
    else
        pending=$((pending + 1))
        if [ -z "$3" ]; then
            echo "NOW HOLDS: $2: flip it to required in tests/test_bringup.sh"
            holds=$((holds + 1))
        else
            echo "PENDING: $2: $3"
        fi
    fi
}

# Whether FILE has a line matching every ERE given (case-insensitive).
has_row() { # FILE ERE...
    f=$1
    shift
    [ -s "$f" ] || return 1
    for re in "$@"; do
        grep -Ei -- "$re" "$f" >"$tmp/rows.next" || return 1
        f="$tmp/rows.$#"
        mv "$tmp/rows.next" "$f"
    done
}
bad_rows() { # FILE: rows that failed, errored, crashed or timed out
    grep -Ec '"status":"(FAIL|ERROR|CRASH|TIMEOUT|XPASS)"' "$1" 2>/dev/null
}

# ---- 1. copy kernels/sim under a new name ----
# Name "npu" and a version string in its descriptor, any free plugin slot
# instead of SIM's, and its own header by a path relative to its folder
# (in the tree it is found through -Ikernels).
npu="$tmp/npu"
cp -R kernels/sim "$npu"
(cd "$npu" &&
    sed -i -e 's/sizeof desc->name, "sim")/sizeof desc->name, "npu")/' \
        -e 's/sizeof desc->version, ".*")/sizeof desc->version, "npu 0.1")/' \
        -e 's/desc->device_type = KV_DEVICE_SIM;/desc->device_type = KV_BACKEND_SLOT_ANY;/' sim_plugin.c &&
    sed -i 's|#include "sim/sim.h"|#include "sim.h"|' ./*.c)
miss=""
grep -q '"npu"' "$npu/sim_plugin.c" || miss="$miss; the name was not renamed (kernels/sim/sim_plugin.c changed?)"
grep -q 'KV_BACKEND_SLOT_ANY;' "$npu/sim_plugin.c" || miss="$miss; the device type was not changed"
grep -q '"npu 0.1"' "$npu/sim_plugin.c" || miss="$miss; the version was not changed"
grep -q '"sim/sim.h"' "$npu"/*.c && miss="$miss; an include of sim/sim.h is left"
step required copy "${miss#; }"

# ---- 2. build it with kvsuite.pc ----
miss=""
lib="$npu/libkv_npu.so"
if ! command -v pkg-config >/dev/null 2>&1; then
    miss="pkg-config is not installed (sh .ci/install-deps.sh installs it)"
elif [ ! -s build/kvsuite.pc ]; then
    miss="build/kvsuite.pc is missing (run ninja)"
else
    # -ffp-contract=off because SIM computes like the references (no FMA).
    # shellcheck disable=SC2046 # pkg-config's output is meant to split
    if ! (cd "$npu" && PKG_CONFIG_PATH="$repo/build" gcc -O2 -ffp-contract=off -Wall -Wextra -Werror \
        -o libkv_npu.so ./*.c $(PKG_CONFIG_PATH="$repo/build" pkg-config --cflags --libs kvsuite)) >"$tmp/cc.out" 2>&1; then
        miss="gcc failed: $(head -5 "$tmp/cc.out")"
    else
        # -fvisibility=hidden: the entry point is the only symbol it exports
        exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDB]$/ { print $3 }' | tr '\n' ' ')
        [ "$exported" = "kv_backend_entry " ] || miss="it exports '$exported', expected only kv_backend_entry"
    fi
fi
step required build "$miss"
if [ ! -s "$lib" ]; then
    echo "[  FAILED  ] bringup: nothing to run"
    exit 1
fi

# ---- 3. run the slice with it as a backend ----
# It loads under its own name, and its kernels pass against the goldens.
# shellcheck disable=SC2086 # $slice is meant to split into options
timeout -k 2 120 build/kvrun --backend="$lib" $slice --report-dir="$tmp/r1" >"$tmp/r1.out" 2>&1
rc=$?
miss=""
[ "$rc" = 0 ] || miss="$miss; exit $rc"
grep -q '"name":"npu","version":"npu 0.1","path":"[^"]*libkv_npu\.so","state":"loaded"' "$tmp/r1/meta.json" 2>/dev/null ||
    miss="$miss; meta.json does not list npu as loaded: $(grep -o '"backends":\[[^]]*\]' "$tmp/r1/meta.json" 2>/dev/null)"
has_row "$tmp/r1/results.jsonl" '"check":"variants:npu"' '"backend":"npu"' '"status":"PASS"' ||
    miss="$miss; no PASS row of variants:npu"
n=$(bad_rows "$tmp/r1/results.jsonl")
[ "${n:-0}" = 0 ] || miss="$miss; $n rows failed"
[ -z "$miss" ] || sed 's/^/    /' "$tmp/r1.out" | tail -15
step required backend "${miss#; }"

# ---- 4. the same slice with it as the accel target, by name ----
# Under both spellings: kvrun --accel-target=npu and KV_ACCEL_TARGET=npu.
accel() { # NAME KVRUN-PREFIX...
    name=$1
    shift
    # shellcheck disable=SC2086
    timeout -k 2 120 "$@" --backend="$lib" $slice --report-dir="$tmp/$name" >"$tmp/$name.out" 2>&1
    rc=$?
    miss=""
    [ "$rc" = 0 ] || miss="$miss; exit $rc ($(grep -v '^==' "$tmp/$name.out" | head -1))"
    grep -q '"accel_target":"npu"' "$tmp/$name/meta.json" 2>/dev/null ||
        miss="$miss; meta.json does not say the accel target is npu ($(grep -o '"accel_target":"[^"]*"' \
            "$tmp/$name/meta.json" 2>/dev/null))"
    has_row "$tmp/$name/results.jsonl" '"check":"fastpath:exact"' '"status":"PASS"' ||
        miss="$miss; no PASS row of the fastpath check"
    n=$(bad_rows "$tmp/$name/results.jsonl")
    [ "${n:-0}" = 0 ] || miss="$miss; $n rows failed"
    [ -z "$miss" ] || sed 's/^/    /' "$tmp/$name.out" | tail -15
    step required "$name" "${miss#; }"
}
accel accel-target-flag build/kvrun --accel-target=npu
accel accel-target-env env KV_ACCEL_TARGET=npu build/kvrun

summary="$required required, $pending pending ($holds of them hold now)"
if [ $failed -ne 0 ]; then
    echo "[  FAILED  ] bringup: $failed of $summary"
    exit 1
fi
echo "[  PASSED  ] bringup: $summary"
