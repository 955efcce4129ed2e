#!/bin/sh
# Live references (README "Live references"): a command-line case whose
# golden key is not in the store is compared against the reference kernel
# run live and reported as such; --golden=store restores ERROR; a case
# read from a file stays strict (the suite's own run), unless --golden=live.
. tests/ci/lib.sh
NEW="--op=mm --dtype=f32 --shape=7x9:9x3"
expect 0 "== live reference: 1 case had no stored golden and was compared against the reference kernel run live (e.g. mm(dtype=f32,shape=[7,9]:[9,3]))" \
    "a new shape on the command line passes against the live reference" -- $KVRUN $NEW --report-dir="$T/r1"
expect 0 "vs the reference kernel run live: no stored golden (live reference)" "the variants rows say so" -- \
    cat "$T/r1/results.jsonl"
expect 1 "golden missing" "--golden=store: the same case is ERROR" -- $KVRUN $NEW --golden=store --report-dir="$T/r2"
echo "$NEW" >"$T/new.case"
# A case from a file that runs no golden check (cases/sizes.case's large
# sizes) has none stored: its rows say that, not that the store is broken.
echo "$NEW --check=variants" >"$T/nogolden.case"
expect 0 "vs the reference kernel run live: the case runs no golden check, so none is stored" \
    "a file case without a golden check: the rows say why there is no golden" -- \
    sh -c "$KVRUN '$T/nogolden.case' --report-dir='$T/r5' >/dev/null 2>&1; cat '$T/r5/results.jsonl'"
expect 1 "golden missing" "the same case from a file stays strict (as the suite does)" -- \
    $KVRUN "$T/new.case" --report-dir="$T/r3"
expect 0 "live reference" "--golden=live makes a file's case live too" -- \
    $KVRUN "$T/new.case" --golden=live --report-dir="$T/r4"
expect 0 "bitwise equal to the golden" "a stored case is still checked against the store" -- sh -c "$KVRUN --op=neg --dtype=u8 --shape=4x5 --fill=exact --report-dir=$T/r5 >/dev/null; cat $T/r5/results.jsonl"
expect 2 "--golden=maybe: expected auto, store or live" "a bad --golden= exits 2" -- $KVRUN $NEW --golden=maybe
finish
