#!/bin/sh
# Interrupted runs and --resume (README "Interrupted runs and --resume"):
# SIGINT, SIGTERM and SIGKILL mid-run, then --resume, end with the same
# totals and rows as an uninterrupted run. The cases are slowed down by a
# backend whose mul sleeps (tests/plugins/flaky_mul.c, never wrong here),
# so the run can be caught half-way.
. tests/ci/lib.sh
PLUGIN=$(dirname "$KVRUN")/tests/flaky-plugin/libflaky_mul.so
[ -f "$PLUGIN" ] || { bad "$PLUGIN not built (ninja tests builds it)"; finish; }
S=""
for k in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16; do S="$S${S:+,}${k}x$k:${k}x$k"; done
RUN="$KVRUN --backend=$PLUGIN --op=mul.Tensor --dtype=f32 --shape=$S --fill=exact --jobs=1"

# The reference: uninterrupted, fast.
$RUN --report-dir="$T/full" >"$T/full.out" 2>&1 || bad "the uninterrupted run failed"
tail -2 "$T/full.out" >"$T/full.tail"
rows() { python3 -c "
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r['case_id'], r['check'], r['backend'], r['status'])
" "$1" | sort; }
rows "$T/full/results.jsonl" >"$T/full.rows"

# Starts the slow run in the background and waits until 3 cases are in
# its results.jsonl (rows are appended as cases finish).
start() {
    KV_TEST_FLAKY_SLEEP_MS=40 $RUN --report-dir="$1" >"$1.out" 2>&1 &
    pid=$!
    i=0
    while [ "$i" -lt 200 ]; do
        n=$(cat "$1/results.jsonl" 2>/dev/null | grep -c .)
        [ "${n:-0}" -ge 30 ] && return 0
        sleep 0.05
        i=$((i + 1))
    done
    return 1
}

# Checks that --resume in $1 completes with the uninterrupted totals.
resume() {
    $RUN --resume --report-dir="$1" >"$1.resume" 2>&1
    rc=$?
    [ "$rc" = 0 ] && ok "$2: --resume exits 0" || bad "$2: --resume exits $rc"
    grep -q "^kvrun: --resume: [1-9][0-9]* of 16 cases finished before; running the other [1-9]" "$1.resume" &&
        ok "$2: --resume ran only the rest" || bad "$2: --resume did not say what it reran"
    tail -2 "$1.resume" >"$1.tail"
    cmp -s "$1.tail" "$T/full.tail" && ok "$2: --resume ends with the uninterrupted totals: $(tail -1 "$1.tail")" ||
        bad "$2: totals differ: $(tail -1 "$1.tail") vs $(tail -1 "$T/full.tail")"
    rows "$1/results.jsonl" >"$1.rows"
    cmp -s "$1.rows" "$T/full.rows" && ok "$2: the same rows (case, check, backend, status)" ||
        bad "$2: the rows differ from the uninterrupted run's"
    grep -q '"complete":true' "$1/meta.json" && ok "$2: meta.json says complete" || bad "$2: meta.json not complete"
}

# SIGINT: stops, writes every report marked incomplete, exits 130.
# An old complete report in the folder must not survive the new run.
mkdir -p "$T/int" "$T/kill"
echo '<testsuites tests="1" failures="0"/>' >"$T/int/junit.xml"
cp "$T/int/junit.xml" "$T/kill/junit.xml"
if start "$T/int"; then
    kill -INT "$pid"
    wait "$pid"
    rc=$?
    [ "$rc" = 130 ] && ok "SIGINT: exit 130" || bad "SIGINT: exit $rc"
    grep -q '"complete":false' "$T/int/meta.json" && grep -q '"interrupted":"SIGINT"' "$T/int/meta.json" &&
        ok "SIGINT: meta.json says incomplete, interrupted by SIGINT" || bad "SIGINT: meta.json not marked"
    for f in junit.xml report.html matrix.md failures.txt; do
        grep -q 'INCOMPLETE' "$T/int/$f" && ok "SIGINT: $f is marked incomplete" || bad "SIGINT: $f not marked"
    done
    grep -q '^== INCOMPLETE: interrupted by SIGINT after [0-9]* of 16 cases' "$T/int.out" &&
        ok "SIGINT: the console says INCOMPLETE" || bad "SIGINT: no INCOMPLETE on the console"
    n=$(grep -c . "$T/int/results.jsonl")
    [ "$n" -lt "$(grep -c . "$T/full/results.jsonl")" ] && ok "SIGINT: $n rows of the finished cases" ||
        bad "SIGINT: the run was not cut ($n rows)"
    expect 2 "holds an incomplete run" "--merge refuses the incomplete folder" -- $KVRUN --merge "$T/int" --report-dir="$T/m"
    resume "$T/int" "SIGINT"
else
    bad "SIGINT: the run never got 3 cases in (or finished too fast)"
    kill "$pid" 2>/dev/null
fi

# SIGTERM: the same, exit 143.
if start "$T/term"; then
    kill -TERM "$pid"
    wait "$pid"
    rc=$?
    [ "$rc" = 143 ] && ok "SIGTERM: exit 143" || bad "SIGTERM: exit $rc"
    grep -q '"interrupted":"SIGTERM"' "$T/term/meta.json" && ok "SIGTERM: meta.json names it" ||
        bad "SIGTERM: meta.json does not name it"
    resume "$T/term" "SIGTERM"
else
    bad "SIGTERM: the run never got 3 cases in"
    kill "$pid" 2>/dev/null
fi

# SIGKILL: no reports are written, but meta.json says in progress and
# results.jsonl is valid up to its last line.
if start "$T/kill"; then
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null
    grep -q '"complete":false' "$T/kill/meta.json" && ok "SIGKILL: meta.json still says in progress" ||
        bad "SIGKILL: meta.json not marked"
    [ ! -e "$T/kill/junit.xml" ] && ok "SIGKILL: no old junit.xml left to pass for this run" || bad "SIGKILL: junit.xml"
    python3 -c "
import json, sys
for l in open(sys.argv[1]):
    json.loads(l)
" "$T/kill/results.jsonl" && ok "SIGKILL: results.jsonl is valid JSON lines" || bad "SIGKILL: results.jsonl is broken"
    sleep 0.3
    pgrep -f "report-dir=$T/kill" >/dev/null && bad "SIGKILL: workers outlived kvrun" || ok "SIGKILL: no worker left"
    resume "$T/kill" "SIGKILL"
else
    bad "SIGKILL: the run never got 3 cases in"
    kill "$pid" 2>/dev/null
fi

expect 2 "holds a complete run: nothing to resume" "--resume of a complete run exits 2" -- \
    $RUN --resume --report-dir="$T/full"
expect 2 "no run to resume there" "--resume without a run exits 2" -- $RUN --resume --report-dir="$T/none"
if start "$T/other"; then
    kill -INT "$pid"
    wait "$pid"
    expect 2 "is another run: it differs in the cases" "--resume of another case set exits 2 naming the field" -- \
        $KVRUN --backend=$PLUGIN --op=mul.Tensor --dtype=f32 --shape=4x4:4x4 --fill=exact --resume --report-dir="$T/other"
else
    bad "the run to resume differently never got going"
    kill "$pid" 2>/dev/null
fi
expect 2 "--resume does not apply to --regen-golden" "--resume with --regen-golden exits 2" -- \
    $RUN --resume --regen-golden --golden-dir="$T/g" --report-dir="$T/b"

# A --regen-golden killed between writing a file and renaming it leaves
# .NAME.tmp.PID behind: a normal run names it, the next regeneration
# removes it; a live writer's temp file is left alone.
NEG="--op=neg --dtype=f32 --shape=4"
$KVRUN $NEG --regen-golden --golden-dir="$T/g" --report-dir="$T/b" >/dev/null 2>&1 || bad "the small regeneration failed"
dead=$(sh -c 'echo $$')
touch "$T/g/.MANIFEST.tmp.$dead" "$T/g/neg/.f32.npy.tmp.$dead" "$T/g/.MANIFEST.tmp.$$"
expect 0 "2 temp files left by an interrupted --regen-golden" "a normal run names the stale temp files" -- \
    $KVRUN $NEG --golden-dir="$T/g" --report-dir="$T/b"
expect 0 "removed 2 temp files left by an interrupted --regen-golden" "--regen-golden removes them" -- \
    $KVRUN $NEG --regen-golden --golden-dir="$T/g" --report-dir="$T/b"
[ ! -e "$T/g/.MANIFEST.tmp.$dead" ] && [ ! -e "$T/g/neg/.f32.npy.tmp.$dead" ] && [ -e "$T/g/.MANIFEST.tmp.$$" ] &&
    ok "the dead writer's temp files are gone, a live one's stays" || bad "the temp files were not handled"
finish
