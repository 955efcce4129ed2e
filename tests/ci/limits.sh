#!/bin/sh
# --deadline and --max-failures (README "Limits: --deadline,
# --max-failures"): the run ends early, every case it did not finish is one
# row "not run" (ERROR past a deadline, SKIP past the failure limit), the
# reports are complete. Cases are slowed, or made to fail, by
# tests/plugins/flaky_mul.c.
. tests/ci/lib.sh
PLUGIN=$(dirname "$KVRUN")/tests/flaky-plugin/libflaky_mul.so
[ -f "$PLUGIN" ] || { bad "$PLUGIN not built (ninja tests builds it)"; finish; }
S=""
for k in 1 2 3 4 5 6 7 8 9 10 11 12; do S="$S${S:+,}${k}x$k:${k}x$k"; done
RUN="$KVRUN --backend=$PLUGIN --op=mul.Tensor --dtype=f32 --shape=$S --fill=exact --jobs=1"

expect 0 "96 passed, 0 failed, 24 skipped" "a deadline that is not reached changes nothing" -- \
    $RUN --deadline=600 --report-dir="$T/d0"

# 12 cases of about 0.2 s each: a 0.7 s deadline leaves most unrun.
expect 1 "--deadline reached:" "--deadline=0.7: the run ends early and fails" -- \
    env KV_TEST_FLAKY_SLEEP_MS=50 $RUN --deadline=0.7 --report-dir="$T/d1"
n=$(grep -c '"message":"not run: the run'"'"'s --deadline of 0.7 s had passed"' "$T/d1/results.jsonl")
[ "$n" -ge 1 ] && [ "$n" -le 12 ] && ok "--deadline: $n cases are ERROR rows 'not run'" ||
    bad "--deadline: $n not-run rows"
ran=$(grep -c '"check":"variants:flaky"' "$T/d1/results.jsonl")
[ $((ran + n)) = 12 ] && ok "--deadline: every case is either run ($ran) or not run ($n)" ||
    bad "--deadline: $ran run + $n not run is not 12"
grep -q '"complete":true' "$T/d1/meta.json" && ok "--deadline: the reports are complete (nothing to resume)" ||
    bad "--deadline: meta.json not complete"

mkdir -p "$T/fl"
expect 1 "14 passed, 2 failed, 14 skipped" "--max-failures=2: stops after 2 failing rows, the rest SKIP" -- \
    env KV_TEST_FLAKY_DIR="$T/fl" KV_TEST_FLAKY_FAILS=100000 $RUN --max-failures=2 --report-dir="$T/m1"
grep -qF -- "--max-failures reached: 10 of 12 cases not run (SKIP rows)" "$T/out" &&
    ok "--max-failures: says how many cases were not run" || bad "--max-failures: no summary line"
[ "$(grep -c '"message":"not run: --max-failures=2 failing rows reached"' "$T/m1/results.jsonl")" = 10 ] &&
    ok "--max-failures: 10 SKIP rows 'not run'" || bad "--max-failures: not 10 not-run rows"

for a in --deadline=0 --deadline=x --deadline=-1 --max-failures=0 --max-failures=x; do
    expect 2 "$a:" "$a exits 2 naming the flag" -- $RUN $a --report-dir="$T/b"
done
expect 2 "--deadline does not apply to --mode=perf" "--deadline with --mode=perf exits 2" -- \
    $KVRUN --mode=perf --op=neg --dtype=f32 --shape=4 --deadline=5 --report-dir="$T/b"
finish
