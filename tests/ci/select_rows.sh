#!/bin/sh
# Selecting rows by backend and check (docs/triage.md "Selecting rows"):
# --only-backend=NAME[,NAME] and --only-check=GLOB[,GLOB] keep the rows of
# those backends and checks (the others are not run), alone or with
# --last-failed; an unknown backend or check exits 2 naming it; the
# selection is in the run's options and fingerprint.
. tests/ci/lib.sh
PLUGIN=$(dirname "$KVRUN")/tests/dump-plugin/libwrong_neg.so
[ -f "$PLUGIN" ] || { bad "$PLUGIN not built (ninja tests builds it)"; finish; }
RUN="$KVRUN --backend=$PLUGIN cases/unary.case --filter=neg(* -q"
# The whole rows first: other backends and checks are there.
expect 1 "FAIL" "neg over the wrong plugin fails" -- $RUN --report-dir="$T/all"
others=$(jq -r 'select(.backend != "wrongneg") | .check' "$T/all/results.jsonl" | wc -l)
[ "$others" -gt 0 ] && ok "without a selection: $others rows of other backends" || bad "no rows of other backends?"
expect 1 "PASS 2, FAIL 3, ERROR 0, UNSUPPORTED 34, SKIP 1" "only variants rows of wrongneg" -- \
    $RUN --only-backend=wrongneg --only-check='variants:*' --report-dir="$T/sel"
expect 0 "0" "every row is a variants:wrongneg row (or says nothing was selected)" -- \
    jq -s '[.[] | select((.check != "variants:wrongneg" or .backend != "wrongneg") and .check != "selection")] | length' \
    "$T/sel/results.jsonl"
expect 0 "no row of this case is selected by only-backend=wrongneg only-check=variants:*" \
    "a case with no selected row gets one SKIP row saying so" -- jq -r 'select(.check == "selection") | .message' \
    "$T/sel/results.jsonl"
expect 0 "only-backend=wrongneg only-check=variants:*" "the selection is in meta.json's fingerprint" -- \
    jq -r '.fingerprint.options' "$T/sel/meta.json"
# With --last-failed: the failed cases of the run before, their selected rows.
expect 1 "PASS 0, FAIL 3" "--last-failed with a selection reruns the 3 failing rows only" -- \
    $RUN --only-backend=wrongneg --only-check=variants:wrongneg --last-failed --report-dir="$T/sel"
expect 0 "3" "3 rows" -- jq -s 'length' "$T/sel/results.jsonl"
# Another backend: its rows only.
expect 0 "" "--only-backend=cpu keeps no wrongneg row" -- $RUN --only-backend=cpu --report-dir="$T/cpu"
expect 0 "0" "no wrongneg row" -- jq -s '[.[] | select(.backend == "wrongneg")] | length' "$T/cpu/results.jsonl"
# Mistakes: exit 2, the name and the choices.
expect 2 "--only-backend=npu: no such backend in this run (backends: cpu, accel, wrongneg)" "an unknown backend" -- \
    $RUN --only-backend=npu --report-dir="$T/x"
expect 2 "--only-check=varaints: no check 'varaints'" "an unknown check" -- $RUN --only-check=varaints --report-dir="$T/x"
expect 2 "--only-backend takes NAME[,NAME...]" "an empty name" -- $RUN --only-backend=cpu, --report-dir="$T/x"
# Shards that keep different rows are not one run.
expect 2 "differ in the options" "--merge refuses folders with different selections" -- \
    $KVRUN --merge "$T/all" "$T/cpu" --report-dir="$T/m"
finish
