#!/bin/sh
# --retry and FLAKY (README "Flakes: --retry and FLAKY"): a backend whose
# mul is wrong for its first two calls (tests/plugins/flaky_mul.c, the
# count in a file, so it holds across forked workers) fails without
# retries, is FLAKY with --retry (the run passes; every report shows it),
# fails the run under --flaky=fail, and a kernel that never recovers stays
# FAIL. Bad values of the flags exit 2 naming the flag.
. tests/ci/lib.sh
PLUGIN=$(dirname "$KVRUN")/tests/flaky-plugin/libflaky_mul.so
[ -f "$PLUGIN" ] || { bad "$PLUGIN not built (ninja tests builds it)"; finish; }
CASE="--op=mul.Tensor --dtype=f32 --shape=4x5:4x5 --fill=exact"
export KV_TEST_FLAKY_DIR="$T/flaky"
mkdir -p "$KV_TEST_FLAKY_DIR"
fresh() { rm -f "$KV_TEST_FLAKY_DIR/calls"; }

fresh
expect 1 "8 passed, 1 failed, 1 skipped" "without --retry the flake is a FAIL" -- \
    $KVRUN --backend=$PLUGIN $CASE --report-dir="$T/r0"

fresh
expect 0 "8 passed, 0 failed, 1 skipped, 1 flaky" "--retry=2: the case is FLAKY and the run passes" -- \
    $KVRUN --backend=$PLUGIN $CASE --retry=2 --report-dir="$T/r1"
grep -qF "PASS 8, FAIL 0, ERROR 0, UNSUPPORTED 0, SKIP 1, CRASH 0, TIMEOUT 0, XFAIL 0, XPASS 0, FLAKY 1" "$T/out" &&
    ok "the counts line shows FLAKY 1" || bad "the counts line lacks FLAKY 1"
grep -qF "FAIL on the first attempt, then passed on retry 1 of 2" "$T/out" &&
    ok "the flaky row says how it failed first" || bad "the flaky row does not say how it failed"
grep -qF "1 failing case run again: 1 flaky" "$T/out" && ok "stderr counts the retried cases" ||
    bad "no retry summary on stderr"
R="$T/r1"
[ "$(grep -c '"status":"FLAKY"' "$R/results.jsonl")" = 1 ] && ok "results.jsonl: one FLAKY row" ||
    bad "results.jsonl: not one FLAKY row"
grep -q '<flakyFailure type="FLAKY"' "$R/junit.xml" && grep -q 'failures="0" errors="0"' "$R/junit.xml" &&
    ok "junit.xml: a passing testcase with <flakyFailure> (Surefire's convention)" || bad "junit.xml: no flakyFailure"
grep -q 'id="flaky"' "$R/report.html" && grep -q 'st-FLAKY' "$R/report.html" &&
    ok "report.html: a Flaky section and a FLAKY count" || bad "report.html lacks the flake"
grep -q '| mul.Tensor | flaky | ~ |' "$R/matrix.md" && ok "matrix.md: the flaky cell is ~" || bad "matrix.md: no ~ cell"
grep -q '^# FLAKY, passed on a retry: mul.Tensor' "$R/failures.txt" && ok "failures.txt: the flake, commented out" ||
    bad "failures.txt lacks the flake"
grep -q '"flaky":"pass"' "$R/meta.json" && ok "meta.json: flaky pass" || bad "meta.json lacks \"flaky\""
expect 0 "1 flaky" "a merge keeps the FLAKY row and passes" -- $KVRUN --merge "$R" --report-dir="$T/m1"

fresh
expect 1 "1 flaky" "--flaky=fail: the flake fails the run" -- \
    $KVRUN --backend=$PLUGIN $CASE --retry=1 --flaky=fail --report-dir="$T/r2"
grep -q '<failure type="FLAKY"' "$T/r2/junit.xml" && ok "junit.xml under --flaky=fail: <failure type=\"FLAKY\">" ||
    bad "junit.xml under --flaky=fail: no failure"
expect 1 "1 flaky" "a merge of a --flaky=fail run fails too" -- $KVRUN --merge "$T/r2" --report-dir="$T/m2"

fresh
expect 1 "failed again on all 3 retries" "a kernel that never recovers stays FAIL" -- \
    env KV_TEST_FLAKY_FAILS=1000 $KVRUN --backend=$PLUGIN $CASE --retry=3 --report-dir="$T/r3"
grep -q '^FLAKY \|, FLAKY [0-9]' "$T/out" && bad "a case failing every attempt was called FLAKY" || ok "no FLAKY for a steady failure"

fresh
expect 0 "9 passed, 0 failed, 1 skipped" "a kernel that is always right passes with --retry" -- \
    env KV_TEST_FLAKY_FAILS=0 $KVRUN --backend=$PLUGIN $CASE --retry=2 --report-dir="$T/r4"
grep -q 'run again' "$T/out" && bad "a passing run ran cases again" || ok "a passing run runs nothing again"

expect 2 "--retry=x" "--retry=x exits 2 naming the flag" -- $KVRUN $CASE --retry=x --report-dir="$T/b"
expect 2 "--retry=-1" "--retry=-1 exits 2" -- $KVRUN $CASE --retry=-1 --report-dir="$T/b"
expect 2 "--retry=101" "--retry=101 exits 2" -- $KVRUN $CASE --retry=101 --report-dir="$T/b"
expect 2 "--retry needs a value" "--retry= exits 2" -- $KVRUN $CASE --retry= --report-dir="$T/b"
expect 2 "--flaky=maybe" "--flaky=maybe exits 2 naming the flag" -- $KVRUN $CASE --flaky=maybe --report-dir="$T/b"
expect 2 "--retry=1 does not apply to --regen-golden" "--retry with --regen-golden exits 2" -- \
    $KVRUN $CASE --retry=1 --regen-golden --golden-dir="$T/g" --report-dir="$T/b"
expect 2 "--retry does not apply to --mode=perf" "--retry with --mode=perf exits 2" -- \
    $KVRUN --mode=perf $CASE --retry=1 --report-dir="$T/b"
finish
