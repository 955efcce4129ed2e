#!/bin/sh
# --dump of what failed (README "Dumps"): a backend with a wrong neg
# (tests/plugins/wrong_neg.c) fails its variants row; the dump holds its
# output, what it was compared against and a diff summary, and case.json
# says which file is which. Also: the console lists each mismatch once.
. tests/ci/lib.sh
PLUGIN=$(dirname "$KVRUN")/tests/dump-plugin/libwrong_neg.so
[ -f "$PLUGIN" ] || { bad "$PLUGIN not built (ninja tests builds it)"; finish; }
CASE="--op=neg --dtype=f32 --shape=4x5 --fill=exact"
expect 1 "check=variants:wrongneg" "the wrong kernel fails" -- \
    $KVRUN --backend=$PLUGIN $CASE --dump="$T/d" --report-dir="$T/r"
[ "$(grep -c 'at \[0,3\]: expected 3, got 4' "$T/out")" = 1 ] && ok "the mismatch is printed once" ||
    bad "the mismatch is not printed exactly once"
[ "$(grep -c 'elements differ' "$T/out")" = 1 ] && ok "the summary is printed once" || bad "the summary is not printed once"
D=$(dirname "$(find "$T/d" -name case.json)")
for f in input0.npy output0.npy expected.output0.npy variants_wrongneg.output0.npy variants_wrongneg.diff.txt; do
    [ -s "$D/$f" ] && ok "dump has $f" || bad "dump lacks $f"
done
expect 0 "at [0, 3]: expected 3, got 4" "the diff summary names the element" -- cat "$D/variants_wrongneg.diff.txt"
expect 0 "" "case.json lists the failure and its files" -- python3 -c "
import json, sys
d = json.load(open('$D/case.json'))
f = d['failures'][0]
assert f['check'] == 'variants:wrongneg' and f['backend'] == 'wrongneg' and f['status'] == 'FAIL', f
o = f['outputs'][0]
assert o['file'] == 'variants_wrongneg.output0.npy' and o['expected_file'] == 'expected.output0.npy', o
assert f['diff'] == 'variants_wrongneg.diff.txt', f
assert 'expected.output<i>.npy' in d['files'] and '<check>.output<i>.npy' in d['files'], d['files']
"
expect 0 "" "a passing case dumps no failure" -- sh -c "$KVRUN $CASE --dump=$T/d2 --report-dir=$T/r2 >/dev/null &&
    ! find $T/d2 -name '*.diff.txt' | grep -q ."
finish
