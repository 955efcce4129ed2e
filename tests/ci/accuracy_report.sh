#!/bin/sh
# The accuracy report end to end (issue 23 item 3; README "Accuracy"): a
# run with accuracy rows writes accuracy.md and accuracy.jsonl from the
# rows results.jsonl carries (ulp_max, ulp_hist), per (op, dtype, backend,
# variant); a generated variant with a tail bug (tests/plugins/gen_add.c)
# shows its error there, the correct variants none.
. tests/ci/lib.sh
GEN=$(dirname "$KVRUN")/tests/gen-plugin/libgen_add.so
expect 0 "" "kvrun cases/accuracy/slice.case" -- $KVRUN cases/accuracy/slice.case --report-dir="$T/a1"
expect 0 "| op | dtype |" "accuracy.md has its table" -- cat "$T/a1/accuracy.md"
expect 0 "| exp | f32 |" "accuracy.md has exp f32" -- cat "$T/a1/accuracy.md"
expect 0 '"op":"exp","dtype":"f32","variant":"CPU/ref"' "accuracy.jsonl has exp f32 CPU/ref" -- \
    cat "$T/a1/accuracy.jsonl"
expect 0 "" "accuracy.jsonl: every line measured elements" -- \
    sh -c "! grep -v '\"elements\":[1-9]' '$T/a1/accuracy.jsonl' | grep -q ."
expect 0 '"ulp_hist":[[' "results.jsonl carries the histograms" -- cat "$T/a1/results.jsonl"
CASE="--op=add.Tensor --dtype=f32 --shape=37 --args=alpha=3 --fill=real --check=accuracy"
expect 0 "" "gen v2-tail, accuracy check (measured, add.Tensor has no ulp rule to fail)" -- env KV_BACKEND_PATH="$GEN" KV_TEST_GEN=v2-tail $KVRUN $CASE --report-dir="$T/a2"
expect 0 '"variant":"CPU/gen","cases":1,"failed":0,"elements":37,"max_ulp":' "the buggy variant is measured" -- \
    cat "$T/a2/accuracy.jsonl"
expect 0 "" "its error is not 0, the reference's is" -- sh -c \
    "grep '\"variant\":\"CPU/gen\"' '$T/a2/accuracy.jsonl' | grep -vq '\"max_ulp\":0.0,' &&
     grep '\"variant\":\"CPU/ref\"' '$T/a2/accuracy.jsonl' | grep -q '\"max_ulp\":0.0,.*\"not_correctly_rounded\":0.0'"
finish
