#!/bin/sh
# results.jsonl stays compact (docs/reports.md): the repro line only on
# rows with something to reproduce, the difference fields only on rows
# that found one; what is left out reads back as before (--merge of the
# folder gives the same counts).
. tests/ci/lib.sh
ZOO=$(dirname "$KVRUN")/tests/plugins/zoo/libzoo_alpha.so
CASE="--op=add.Tensor --dtype=f32 --shape=4x5 --args=alpha=2 --fill=exact -q"
expect 1 "PASS 8, FAIL 1" "the zoo's alpha bug fails one row" -- \
    env KV_BACKEND_PATH="$ZOO" $KVRUN $CASE --report-dir="$T/r"
J="$T/r/results.jsonl"
expect 0 "0" "no PASS, SKIP or UNSUPPORTED row carries a repro line" -- \
    jq -s '[.[] | select(.status == "PASS" or .status == "SKIP" or .status == "UNSUPPORTED") | select(has("repro"))] | length' "$J"
expect 0 "--op=add.Tensor" "the FAIL row carries its repro line" -- jq -r 'select(.status == "FAIL") | .repro' "$J"
expect 0 "19" "the FAIL row carries its difference fields" -- jq -r 'select(.status == "FAIL") | .mismatched' "$J"
expect 0 "0" "rows that found no difference leave them out" -- \
    jq -s '[.[] | select(.status == "PASS") | select(has("mismatches") or has("mismatched") or has("max_ulps"))] | length' "$J"
expect 1 "PASS 8, FAIL 1" "the compact rows read back: a merge of the folder counts the same" -- \
    $KVRUN --merge "$T/r" --report-dir="$T/m"
finish
