#!/bin/sh
# A red run readable at a glance (docs/triage.md): the console ends with a
# short summary, the failing rows grouped by (op, check, backend) with
# their layouts and dtypes folded, then one line per failing row up to a
# limit; at most 40 lines from its header to the end. Colour only at a
# terminal and never under NO_COLOR.
. tests/ci/lib.sh
# The CPU alone: a plugin's path is its own error row (docs/bringup.md),
# which would double every count below.
KV_BACKEND_PATH=
export KV_BACKEND_PATH
# 9 failing cases of one group: the call succeeds, a shape error is expected.
expect 1 "== short summary: 9 problems in 1 group (op, check, backend):" "9 failures, one group" -- \
    $KVRUN --op=neg --dtype=f32,f64,i32 --shape=4x5 --layout=t,s,b --fill=exact --expect=shape --report-dir="$T/r1"
grep -q "^FAIL  neg error on cpu: 9 cases; layouts t s b; dtypes f32 f64 i32$" "$T/out" &&
    ok "the group line folds 3 layouts and 3 dtypes" || { bad "no folded group line"; grep -A3 "short summary" "$T/out" | sed 's/^/     | /'; }
n=$(sed -n '/^== failed cases:$/,/^PASS [0-9]/p' "$T/out" | grep -c '^FAIL  neg(')
[ "$n" -eq 9 ] && ok "then the 9 failing cases, one line each" || bad "$n case lines under '== failed cases:', expected 9"
# Many groups: 20 ops x 2 dtypes; the summary stays within 40 lines.
cat >"$T/many.case" <<'CASES'
--op=abs,cos,exp,gelu,log,neg,relu,rsqrt,sigmoid,silu,sin,sqrt,tanh --dtype=f32,f64 --shape=4x5 --fill=real --expect=shape
--op=add.Tensor,sub.Tensor,mul.Tensor,maximum,minimum,eq.Tensor,lt.Tensor --dtype=f32,f64 --shape=4x5:4x5 --fill=real --expect=shape
CASES
expect 1 "... and 5 more groups (10 problems): report.html lists every group" "20 groups: 15 shown, 5 counted" -- \
    $KVRUN "$T/many.case" --golden=live --report-dir="$T/r2"
lines=$(sed -n '/^== short summary/,$p' "$T/out" | wc -l)
[ "$lines" -le 40 ] && [ "$lines" -gt 30 ] && ok "40 failures in 20 groups: a summary of $lines lines (<= 40)" ||
    bad "the summary of 40 failures is $lines lines"
grep -q "^== failed cases (the first 15 of 40; failures.txt lists all):$" "$T/out" &&
    ok "the first 15 of 40 failing rows, the rest in failures.txt" || bad "no case limit line"
grep -q "$(printf '\033')" "$T/out" && bad "colour in a pipe" || ok "no colour in a pipe"
# A plugin as the accel target: its rows are on backend "accel" (the
# slot), and both the problem block and the summary name the plugin.
ZOO=$(dirname "$KVRUN")/tests/plugins/zoo/libzoo_bcast_col.so
$KVRUN --backend="$ZOO" --accel-target=zoo_bcast_col --op=add.Tensor --dtype=f32 --shape=4x5:4x1 --fill=exact \
    --device=accel --check=variants --report-dir="$T/r4" >"$T/acc" 2>&1
grep -q "check=variants:Accel backend=accel (the accel target: zoo_bcast_col) dtype=f32" "$T/acc" &&
    grep -q "^FAIL  add.Tensor variants:Accel (the accel target: zoo_bcast_col): 1 case" "$T/acc" &&
    ok "a failing accel-target row names the plugin, in its block and in the summary" ||
    { bad "the accel target's plugin is not named"; grep -v cuda "$T/acc" | tail -8 | sed 's/^/     | /'; }
# At a terminal (script(1) gives one): colour, unless NO_COLOR is set.
if command -v script >/dev/null 2>&1; then
    script -qec "$KVRUN --op=neg --dtype=f32 --shape=4x5 --fill=exact --expect=shape --report-dir=$T/r3 -q" /dev/null \
        >"$T/tty" 2>&1
    grep -q "$(printf '\033')\[1;31mFAIL" "$T/tty" && ok "colour at a terminal" || bad "no colour at a terminal"
    NO_COLOR=1 script -qec "$KVRUN --op=neg --dtype=f32 --shape=4x5 --fill=exact --expect=shape --report-dir=$T/r3 -q" \
        /dev/null >"$T/tty" 2>&1
    grep -q "$(printf '\033')\[1;31m" "$T/tty" && bad "colour under NO_COLOR=1" || ok "NO_COLOR=1: no colour"
else
    bad "script(1) is missing (util-linux): the terminal case cannot be checked"
fi
finish
