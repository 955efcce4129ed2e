#!/bin/sh
# Baselines you can trust (README "Baselines"): entries per (case, check,
# backend); failures.txt round-trips into a baseline; an entry matching
# nothing, a stale one, an unknown check and an unknown backend are each
# named; JUnit shows XFAIL as skipped with the reason, XPASS as a failure.
. tests/ci/lib.sh
# A case that fails on purpose: neg succeeds, the case expects a shape error.
BAD="--op=neg --dtype=u8 --shape=4x5 --fill=exact --expect=shape"
GOOD="--op=neg --dtype=u8 --shape=4x5 --fill=exact"
# Two failing rows: the error check's row under cpu and SIM's own (every
# plugin backend's path is a row of its own, issue 21).
expect 1 "2 failed" "the failing case fails" -- $KVRUN $BAD --report-dir="$T/r1"
expect 0 "neg(dtype=u8,shape=[4,5],fill=exact,expect=shape) error cpu" "failures.txt lists it in baseline format" \
    -- cat "$T/r1/failures.txt"
expect 0 "XFAIL 2" "failures.txt as the baseline: the run passes, XFAIL" -- \
    $KVRUN $BAD --baseline="$T/r1/failures.txt" --report-dir="$T/r2"
expect 0 '<skipped type="XFAIL" message="expected by baseline' "JUnit: XFAIL is skipped with the reason" -- \
    cat "$T/r2/junit.xml"
# The failing (error) row and the passing (memory, memory:SIM) rows are one case: an
# entry naming only the case excuses the failure and leaves the pass PASS.
echo 'neg(dtype=u8,shape=[4,5],fill=exact,expect=shape)' >"$T/case-only.txt"
expect 0 "PASS 2, FAIL 0, ERROR 0, UNSUPPORTED 0, SKIP 0, CRASH 0, TIMEOUT 0, XFAIL 2, XPASS 0" \
    "an entry naming only a case: its passing checks stay PASS" -- \
    $KVRUN $BAD --baseline="$T/case-only.txt" --report-dir="$T/r3"
# expect= is in the case ID: the passing twin is not matched by that entry.
printf 'neg(dtype=u8,shape=[4,5],fill=exact) golden cpu\n' >"$T/stale.txt"
expect 1 "entry 'neg(dtype=u8,shape=[4,5],fill=exact) golden cpu' is stale" "a stale entry is named, XPASS fails the run" -- \
    $KVRUN $GOOD --baseline="$T/stale.txt" --report-dir="$T/r4"
expect 0 '<failure type="XPASS"' "JUnit: XPASS is a failure" -- cat "$T/r4/junit.xml"
printf 'nope(dtype=f32) golden\n' >"$T/nothing.txt"
expect 0 "entry 'nope(dtype=f32) golden' matches no row" "an entry matching nothing is named (not fatal: shards)" -- \
    $KVRUN $GOOD --baseline="$T/nothing.txt" --report-dir="$T/r5"
printf 'neg(*) golde\n' >"$T/check.txt"
expect 2 "unknown check 'golde'" "an unknown check name exits 2" -- $KVRUN $GOOD --baseline="$T/check.txt" --report-dir="$T/r6"
printf 'neg(*) variants:* simm\n' >"$T/backend.txt"
expect 2 "unknown backend 'simm'" "an unknown backend name exits 2" -- $KVRUN $GOOD --baseline="$T/backend.txt" --report-dir="$T/r7"
expect 0 "" "a green run writes an empty failures.txt" -- test ! -s "$T/r5/failures.txt" -o "$(grep -vc '^#' "$T/r5/failures.txt")" = 0
# Cases differing only in check/tol/expect are distinct cases (IDs differ).
expect 0 "" "check/tol/expect are in the case ID" -- sh -c "$KVRUN --op=neg --dtype=f32 --shape=4 --tol=bitwise,ulp:1 --list | grep -c 'tol=' | grep -qx 2"
finish
