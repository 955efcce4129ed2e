#!/bin/sh
# Rerun and select (docs/triage.md): --last-failed reruns the previous
# run's FAIL, ERROR, CRASH and TIMEOUT cases from its report folder,
# --failed-first puts them first, --filter-out leaves cases out after
# --filter, an empty selection says why, an unknown op gets a did-you-mean.
. tests/ci/lib.sh
# The CPU alone: a plugin's path is its own error row (docs/bringup.md),
# which would double every count below.
KV_BACKEND_PATH=
export KV_BACKEND_PATH
# Two passing cases, two failing ones (the call succeeds, a shape error is
# expected) and one ERROR (no golden entry for that shape).
cat >"$T/mix.case" <<'CASES'
--op=neg --dtype=u8,f32 --shape=4x5 --fill=exact
--op=neg --dtype=u8,i32 --shape=4x5 --fill=exact --expect=shape
--op=neg --dtype=f32 --shape=3x13 --fill=exact
CASES
FAILED="neg(dtype=u8,shape=[4,5],fill=exact,expect=shape)
neg(dtype=i32,shape=[4,5],fill=exact,expect=shape)
neg(dtype=f32,shape=[3,13],fill=exact)"
expect 2 "cannot read the previous run's '$T/r/results.jsonl'" "--last-failed with no previous run" -- \
    $KVRUN "$T/mix.case" --report-dir="$T/r" --last-failed
ids() { sed 's/^{"case_id":"\([^"]*\)".*/\1/' "$1" | uniq; }
expect 1 "FAIL 2, ERROR 1," "the first run: 2 FAIL, 1 ERROR" -- $KVRUN "$T/mix.case" --report-dir="$T/r"
$KVRUN "$T/mix.case" --report-dir="$T/r" --last-failed --list >"$T/lf" 2>&1
[ "$(cat "$T/lf")" = "$FAILED" ] && ok "--last-failed selects the FAIL and ERROR cases" ||
    { bad "--last-failed selects the FAIL and ERROR cases"; sed 's/^/     | /' "$T/lf"; }
$KVRUN "$T/mix.case" --report-dir="$T/r" --failed-first --list >"$T/ff" 2>&1
[ "$(head -3 "$T/ff")" = "$FAILED" ] && [ "$(wc -l <"$T/ff")" -eq 5 ] &&
    [ "$(sed -n 4p "$T/ff")" = "neg(dtype=u8,shape=[4,5],fill=exact)" ] &&
    ok "--failed-first: the 3 failed cases, then the 2 others in file order" ||
    { bad "--failed-first order"; sed 's/^/     | /' "$T/ff"; }
expect 1 "FAIL 2, ERROR 1," "--last-failed fails as before" -- $KVRUN "$T/mix.case" --report-dir="$T/r" --last-failed
[ "$(ids "$T/r/results.jsonl")" = "$FAILED" ] && ok "--last-failed ran those 3 cases, no other" ||
    { bad "--last-failed ran other cases"; ids "$T/r/results.jsonl" | sed 's/^/     | /'; }
expect 2 "--last-failed does not apply to --resume" "--last-failed with --resume is refused" -- \
    $KVRUN "$T/mix.case" --report-dir="$T/r" --last-failed --resume
# A green run in the folder: nothing failed, and the run says so.
expect 0 "" "a green run" -- $KVRUN "$T/mix.case" --filter='neg(dtype=u8,shape=[4,5],fill=exact)' --report-dir="$T/r"
expect 2 "hint: --last-failed: the previous run in $T/r/ had 0 failed cases" "--last-failed after a green run" -- \
    $KVRUN "$T/mix.case" --report-dir="$T/r" --last-failed
# --filter-out after --filter.
n=$($KVRUN "$T/mix.case" --filter='neg(*' --filter-out='*expect=*' --filter-out='*f32*' --list 2>&1 | wc -l)
[ "$n" -eq 1 ] && ok "--filter-out twice after --filter leaves 1 of 5" || bad "--filter-out: $n cases, expected 1"
expect 2 "--filter: empty pattern" "an empty --filter-out pattern" -- $KVRUN "$T/mix.case" --filter-out=re: --list
# The hints.
expect 2 "--filter='neg(*' selects 5 cases" "a filter without a wildcard gets the wider glob" -- \
    $KVRUN "$T/mix.case" --filter=neg --list
expect 2 "unknown op 'ad.Tensor' (did you mean add.Tensor?)" "an unknown op gets a did-you-mean" -- \
    $KVRUN --op=ad.Tensor --dtype=f32 --shape=4 --list
expect 2 "unknown op 'nonsense_op'" "no suggestion when nothing is near" -- \
    $KVRUN --op=nonsense_op --dtype=f32 --shape=4 --list
grep -q "did you mean" "$T/out" && bad "'nonsense_op' got a suggestion" || ok "'nonsense_op' got no suggestion"
finish
