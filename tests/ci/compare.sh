#!/bin/sh
# Comparing runs (docs/compare.md): two runs of the same tree have no
# regression; a doctored second run names each transition (regression,
# support regression, fix, changed bits, accuracy drift); the identity
# policy fails changed bits; runs that are not comparable exit 2 with the
# reason; a generated kernel's tail bug (tests/plugins/gen_add.c) is a
# regression of its rows; perf samples doubled are a perf regression,
# identical ones are not.
. tests/ci/lib.sh
GEN=$(dirname "$KVRUN")/tests/gen-plugin/libgen_add.so
KV_BACKEND_PATH=$GEN:$KV_BACKEND_PATH
export KV_BACKEND_PATH
CASES="--op=add.Tensor --dtype=f32,f16,f64 --shape=37 --args=alpha=2"
expect 0 "" "run 1" -- $KVRUN $CASES --report-dir="$T/r1"
expect 0 "== compare with $T/r1:" "run 2 with --compare=OLD" -- $KVRUN $CASES --compare="$T/r1" --report-dir="$T/r2"
expect 0 " 0 regressions" "same tree: no regression" -- $KVRUN --compare "$T/r1" "$T/r2"
expect 0 '"regressions":0' "compare.jsonl's summary" -- cat "$T/r2/compare.jsonl"
expect 0 'failures="0"' "compare.junit.xml: no failure" -- cat "$T/r2/compare.junit.xml"
expect 0 '<section id="compare">' "report.html has the section" -- cat "$T/r2/report.html"
expect 0 "" "results.jsonl carries per-output facts" -- grep -q '"outs":\[\["[0-9a-f]\{16\}",37,' "$T/r2/results.jsonl"

# Doctored: the 1st variants row PASS->FAIL, the 2nd PASS->UNSUPPORTED, the
# 3rd other bits, the 4th worse accuracy (and other bits); the old run's 5th
# variants row FAIL, so it is a fix.
cp -r "$T/r2" "$T/r3"
cp -r "$T/r1" "$T/r0"
awk '/"check":"variants:/ && /"status":"PASS"/ && /"outs":/ { n++
        if (n == 1) sub(/"status":"PASS"/, "\"status\":\"FAIL\"")
        if (n == 2) sub(/"status":"PASS"/, "\"status\":\"UNSUPPORTED\"")
        if (n == 3) sub(/"outs":\[\["[0-9a-f]*"/, "\"outs\":[[\"00000000000000ff\"")
        if (n == 4) sub(/"outs":\[\["[0-9a-f]*",37,[^]]*\]/, "\"outs\":[[\"00000000000000fe\",37,3.0,2.0,5]")
     } { print }' "$T/r2/results.jsonl" >"$T/r3/results.jsonl"
awk '/"check":"variants:/ && /"status":"PASS"/ && /"outs":/ { n++
        if (n == 5) sub(/"status":"PASS"/, "\"status\":\"FAIL\"") } { print }' "$T/r1/results.jsonl" >"$T/r0/results.jsonl"
expect 1 "2 regressions (1 failing, 1 support, 0 identity, 0 perf), 1 fix" "doctored run: exit 1, each counted" -- \
    $KVRUN --compare "$T/r0" "$T/r3"
for kind in '"kind":"regression"' '"kind":"support-regression"' '"kind":"fix"' '"kind":"bits-changed"' \
    '"kind":"accuracy-drift"'; do
    expect 0 "$kind" "compare.jsonl names $kind" -- cat "$T/r3/compare.jsonl"
done
expect 0 '| **regression** |' "compare.md lists the regression" -- cat "$T/r3/compare.md"
expect 0 'failures="2"' "compare.junit.xml: each regression a failure" -- cat "$T/r3/compare.junit.xml"
# The identity policy: the same changed bits now fail.
expect 1 "4 regressions (1 failing, 1 support, 2 identity, 0 perf)" "--require-identical=* fails changed bits" -- \
    $KVRUN --compare "$T/r0" "$T/r3" --require-identical='*' --report-dir="$T/c1"
expect 0 '"kind":"identity-regression"' "compare.jsonl names it" -- cat "$T/c1/compare.jsonl"
expect 2 "'|' at byte 3 is not allowed" "a bad --require-identical list" -- \
    $KVRUN --compare "$T/r0" "$T/r3" --require-identical='cpu|sim'
expect 2 "needs two report folders" "--compare with one folder" -- $KVRUN --compare "$T/r0"
expect 2 "--require-identical needs --compare=OLD" "a policy without --compare" -- $KVRUN $CASES --require-identical=cpu
expect 2 "--compare=OLD needs a run, not --list" "--compare=OLD with --list" -- $KVRUN $CASES --list --compare="$T/r0"

# Not comparable: exit 2, the reason named; a differing version is named only.
cp -r "$T/r2" "$T/r4"
sed 's/"seed":0,/"seed":7,/' "$T/r2/meta.json" >"$T/r4/meta.json"
expect 2 "the seeds differ (old 0, new 7)" "other seed: not comparable" -- $KVRUN --compare "$T/r1" "$T/r4"
sed 's/"version":"[^"]*"/"version":"9.9.9"/' "$T/r2/meta.json" >"$T/r4/meta.json"
expect 0 "version: '" "another version: named, still compared" -- $KVRUN --compare "$T/r1" "$T/r4"
expect 2 "is not a readable kvsuite report" "a folder without a report" -- $KVRUN --compare "$T/r1" "$T/nothing"

# A generated kernel's new version with a tail bug (alpha dropped on the
# numel % 4 tail): its rows regress.
expect 1 "regression" "gen v2-tail vs v1" -- env KV_TEST_GEN=v2-tail $KVRUN $CASES --compare="$T/r1" --report-dir="$T/r5"
expect 0 '"check":"variants:CPU/gen","backend":"cpu","old":"PASS","new":"FAIL"' "the variant's row is named" -- \
    cat "$T/r5/compare.jsonl"
expect 0 "gen(loaded gen_add v1)" "the backends fingerprint names the versions" -- cat "$T/r5/compare.md"
# ...and only its own rows: the generated kernel is a guest at the CPU key,
# so the CPU's own rows (variants:CPU, memory) still run the CPU's kernels.
if grep '"status":"FAIL"' "$T/r5/results.jsonl" | grep -v '"check":"variants:CPU/gen"' | grep -q .; then
    bad "a row other than variants:CPU/gen failed with the guest's bug"
    grep '"status":"FAIL"' "$T/r5/results.jsonl" | grep -v '"check":"variants:CPU/gen"' | cut -c1-200 | head -3
else
    ok "the guest's bug fails only variants:CPU/gen"
fi
expect 1 '"kind":"support-regression","case_id":"add.Tensor(dtype=f32' "gen v2-drop-f32: a support regression" -- \
    sh -c "KV_TEST_GEN=v2-drop-f32 $KVRUN $CASES --compare='$T/r1' --report-dir='$T/r6' >/dev/null; \
        rc=\$?; cat '$T/r6/compare.jsonl'; exit \$rc"

# Perf: every repetition is kept; identical samples are no regression,
# the gen variant's samples doubled are one (doctored: a timing on this
# shared machine is too noisy for a test that must not flake).
expect 0 "" "perf run" -- $KVRUN --mode=perf --op=add.Tensor --dtype=f32 --shape=4096 --perf-reps=9 --report-dir="$T/p1"
expect 0 "" "perf.jsonl keeps every repetition" -- grep -q '"variant":"gen".*"samples_ns":\[[0-9]*,[0-9]*,' "$T/p1/perf.jsonl"
mkdir -p "$T/p2" "$T/p3"
cp "$T/p1/perf.jsonl" "$T/p2/perf.jsonl"
awk '/"variant":"gen"/ { pre = $0; sub(/"samples_ns":\[.*/, "", pre); s = $0; sub(/.*"samples_ns":\[/, "", s)
        sub(/\].*/, "", s); n = split(s, v, ","); out = ""
        for (i = 1; i <= n; i++) out = out (i > 1 ? "," : "") (2 * v[i])
        print pre "\"samples_ns\":[" out "]}"; next } { print }' "$T/p1/perf.jsonl" >"$T/p3/perf.jsonl"
expect 0 "0 perf" "perf: identical samples, no regression" -- $KVRUN --compare "$T/p1" "$T/p2"
expect 1 "1 perf" "perf: the gen variant 2x slower is a regression" -- $KVRUN --compare "$T/p1" "$T/p3"
expect 0 '| **perf-regression** | add.Tensor(dtype=f32,shape=[4096]) | CPU | gen |' "compare.md names it" -- \
    cat "$T/p3/compare.md"
expect 0 "0 perf" "perf: under a 150% threshold it is not" -- $KVRUN --compare "$T/p1" "$T/p3" --perf-threshold=1.5
expect 2 "--perf-threshold=x" "a bad --perf-threshold" -- $KVRUN --compare "$T/p1" "$T/p3" --perf-threshold=x
finish
