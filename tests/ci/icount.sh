#!/bin/sh
# Instruction counts per call (kvrun --mode=perf --perf-metric=
# instructions, docs/performance.md): deterministic costs where time is
# too noisy. On a machine without a hardware instruction counter (this
# VM) kvrun counts under callgrind itself. Two counted runs of the same
# tree give identical counts and no regression; the generated kernel of
# tests/plugins/gen_add.c made 2x slower (KV_TEST_GEN=v2-slow: it computes
# everything twice) is a perf regression by count, with no statistics;
# a time run and a counted run are not compared (the metric named); a
# source that cannot count is an error saying why, never a timed run.
# One small op, 3 counted calls per variant: callgrind runs the counted
# calls about 50 times slower, the rest of kvrun about 5 times.
. tests/ci/lib.sh
GEN=$(dirname "$KVRUN")/tests/gen-plugin/libgen_add.so
KV_BACKEND_PATH=$GEN:$KV_BACKEND_PATH
export KV_BACKEND_PATH
P="--mode=perf --op=add.Tensor --dtype=f32 --shape=4096 --perf-reps=3"
counts() { # the gen variant's samples_instructions of a perf.jsonl
    sed -n 's/.*"variant":"gen".*"samples_instructions":\[\([0-9,]*\)\].*/\1/p' "$1"
}

expect 0 "instructions per call" "counted run 1" -- $KVRUN $P --perf-metric=instructions --report-dir="$T/c1"
cp "$T/out" "$T/c1.out"
src=$(sed -n 's/.*"counter":"\([a-z]*\)".*/\1/p' "$T/c1/perf.jsonl" | sort -u)
case $src in
hardware | callgrind) ok "perf.jsonl names the source that counted: $src" ;;
*) bad "perf.jsonl: no single counter named ('$src')" ;;
esac
expect 0 "counted by $src" "the run's header names it too" -- cat "$T/c1.out"
expect 0 " 0 regressions" "counted run 2, compared: no regression" -- \
    $KVRUN $P --perf-metric=instructions --report-dir="$T/c2" --compare="$T/c1"
a=$(counts "$T/c1/perf.jsonl") b=$(counts "$T/c2/perf.jsonl")
[ -n "$a" ] && [ "$a" = "$b" ] && ok "the same tree counts the same, call for call ($a)" ||
    bad "counts differ between two runs of one tree: '$a' vs '$b'"
expect 0 "0 with another count" "compare.md: no pair changed" -- cat "$T/c2/compare.md"

expect 1 "1 perf" "v2-slow (2x the work) is a perf regression by count" -- \
    env KV_TEST_GEN=v2-slow $KVRUN $P --perf-metric=instructions --report-dir="$T/c3" --compare="$T/c1"
expect 0 '| **perf-regression** | add.Tensor(dtype=f32,shape=[4096]) | CPU | gen |' "compare.md names the pair" -- \
    cat "$T/c3/compare.md"
n_old=$(counts "$T/c1/perf.jsonl" | cut -d, -f1) n_new=$(counts "$T/c3/perf.jsonl" | cut -d, -f1)
grep -q "| gen | $n_old | $n_new | +" "$T/c3/compare.md" && [ "$n_new" -gt $((n_old * 3 / 2)) ] &&
    ok "instructions per call old -> new in compare.md: $n_old -> $n_new" ||
    bad "compare.md does not show $n_old -> $n_new (more than 1.5x)"
expect 0 '"p":null' "compare.jsonl: the count's pair has no p-value" -- grep '"variant":"gen"' "$T/c3/compare.jsonl"
expect 0 "0 perf" "under a threshold above the change it is not one" -- \
    $KVRUN --compare "$T/c1" "$T/c3" --perf-threshold=1.5 --report-dir="$T/c3b"

# A time run against a counted one: not comparable, the metric named.
expect 0 "" "a timed run" -- $KVRUN $P --report-dir="$T/t1"
expect 2 "metric: 'time' -> 'instructions'" "time vs instructions: a fingerprint mismatch" -- \
    $KVRUN --compare "$T/t1" "$T/c1"
sed "s/\"counter\":\"$src\"/\"counter\":\"other\"/" "$T/c1/perf.jsonl" >"$T/o.jsonl"
mkdir -p "$T/o" && mv "$T/o.jsonl" "$T/o/perf.jsonl"
expect 2 "counter: 'other' -> '$src'" "counts of two sources: a fingerprint mismatch" -- $KVRUN --compare "$T/o" "$T/c1"

# Sources that cannot count: an error with the reason, exit 2, no run.
Q="--mode=perf --op=neg --shape=8 --perf-reps=1 --report-dir=$T/e"
expect 2 "valgrind is not on PATH" "callgrind without valgrind" -- \
    env PATH=/nonexistent $KVRUN $Q --perf-metric=instructions:callgrind
if [ "$src" = callgrind ]; then
    expect 2 "perf_event_open" "the hardware counter where it cannot open: why" -- \
        $KVRUN $Q --perf-metric=instructions:hardware
else
    expect 0 "counted by hardware" "the hardware counter where it opens" -- $KVRUN $Q --perf-metric=instructions:hardware
fi
expect 2 "does not run under Valgrind" "the callgrind variable by hand" -- \
    env KV_PERF_CALLGRIND_OUT="$T/x" $KVRUN $Q --perf-metric=instructions
expect 2 "KV_PERF_CALLGRIND_OUT is empty" "the variable empty" -- \
    env KV_PERF_CALLGRIND_OUT= $KVRUN $Q --perf-metric=instructions
expect 2 "--perf-metric=cycles: expected time, instructions" "an unknown metric" -- $KVRUN $Q --perf-metric=cycles
expect 2 "--perf-metric needs --mode=perf" "the metric without perf mode" -- $KVRUN --op=neg --perf-metric=instructions
[ -e "$T/e/perf.jsonl" ] && bad "a refused run wrote perf.jsonl" || ok "no refused run wrote a report"
finish
