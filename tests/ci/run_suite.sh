#!/bin/sh
# No stale, no clobbered reports (docs/triage.md): `ninja run`'s second
# half runs and writes even when the first fails, and the exit status
# covers both; every run clears its report folder first; a case line
# writes to reports/repro/, not over the full run's reports; run from
# another folder, kvrun finds the golden store next to it or says it can't.
. tests/ci/lib.sh
RUN=src/tools/run_suite.sh
# The exit status of all three parts, with a stand-in kvrun failing on purpose.
printf '#!/bin/sh\ncase "$*" in *onednn-accel*) exit "$SECOND";; *opencl-accel*) exit "$THIRD";; *) exit "$FIRST";; esac\n' >"$T/fake"
chmod +x "$T/fake"
for set in "0 0 0 0" "1 0 0 1" "0 1 0 1" "0 0 1 1" "2 1 0 2" "1 2 1 2" "0 1 2 2"; do
    set -- $set
    FIRST=$1 SECOND=$2 THIRD=$3 KVRUN="$T/fake" sh $RUN cases/ "$T/unused" >/dev/null 2>&1
    rc=$?
    [ "$rc" -eq "$4" ] && ok "parts exit $1, $2, $3: ninja run exits $4" ||
        bad "parts exit $1, $2, $3: ninja run exits $rc, expected $4"
done
# Both halves with the real kvrun: an earlier green run in the second
# half's folder is replaced after a red first half.
# Each with an accel twin: the later parts run the accel cases only.
cat >"$T/good.case" <<'CASES'
--op=neg --dtype=f32 --shape=4x5 --fill=exact
--op=neg --dtype=f32 --shape=4x5 --fill=exact --device=accel
CASES
cat >"$T/bad.case" <<'CASES'
--op=neg --dtype=f32 --shape=4x5 --fill=exact --expect=shape
--op=neg --dtype=f32 --shape=4x5 --fill=exact --expect=shape --device=accel
CASES
PLUGINS=$(dirname "$KVRUN")/backends
expect 0 "" "a green run into reports/onednn-accel" -- \
    env KV_BACKEND_PATH="$PLUGINS" sh $RUN "$T/good.case" "$T/rep"
expect 1 "" "a red suite: ninja run exits 1" -- env KV_BACKEND_PATH="$PLUGINS" sh $RUN "$T/bad.case" "$T/rep"
# ninja run writes the rows compressed (--gzip-results).
rows() { zcat "$1/results.jsonl.gz"; }
rows "$T/rep" | grep -q '"status":"FAIL"' && rows "$T/rep/onednn-accel" | grep -q '"status":"FAIL"' &&
    rows "$T/rep/opencl-accel" | grep -q '"status":"FAIL"' &&
    grep -q 'expect=shape' "$T/rep/onednn-accel/failures.txt" &&
    ok "every part wrote the red run's reports (no green report left)" ||
    bad "a folder still holds the green run's reports"
# The accel parts run the accel twin alone: a cpu case never reaches the
# accel target, so its rows would repeat the first part's.
rows "$T/rep" | grep -q '"case_id":"neg(dtype=f32,shape=\[4,5\],fill=exact,expect=shape)"' &&
    ! rows "$T/rep/onednn-accel" | grep -q '"case_id":"neg(dtype=f32,shape=\[4,5\],fill=exact,expect=shape)"' &&
    rows "$T/rep/onednn-accel" | grep -q '"case_id":"[^"]*device=accel[,)]' &&
    ok "the accel parts run the accel cases only" || bad "the accel parts ran a cpu case (or no accel case)"
# A run clears what an earlier run left: accuracy.md of an accuracy run.
echo stale >"$T/rep/accuracy.md"
echo mine >"$T/rep/notes.txt"
expect 0 "" "a run into a folder holding an earlier accuracy.md" -- $KVRUN "$T/good.case" --report-dir="$T/rep"
[ ! -e "$T/rep/accuracy.md" ] && [ -f "$T/rep/notes.txt" ] &&
    ok "the earlier run's accuracy.md is gone, the user's file stays" || bad "the folder was not cleared as it should"
# A case line: reports/repro/ under the working directory, not reports/.
mkdir -p "$T/cwd/reports"
echo full >"$T/cwd/reports/report.html"
(cd "$T/cwd" && "$OLDPWD/$KVRUN" --backend="$OLDPWD/$(dirname "$KVRUN")/backends/libkv_sim.so" \
    --op=neg --dtype=f32 --shape=4x5 --fill=exact >"$T/out" 2>&1)
[ "$(cat "$T/cwd/reports/report.html")" = full ] && [ -f "$T/cwd/reports/repro/report.html" ] &&
    ok "a case line writes reports/repro/, the full run's report.html stays" || bad "a case line replaced reports/"
# ... and, run outside the checkout, it found the golden store next to kvrun.
grep -q "using the golden store next to this kvrun" "$T/out" &&
    grep -q '"check":"golden","backend":"cpu","dtype":"f32","status":"PASS"' "$T/cwd/reports/repro/results.jsonl" &&
    ok "outside the checkout: the golden store next to kvrun, no live fallback" ||
    { bad "outside the checkout: no golden store found"; sed 's/^/     | /' "$T/out" | tail -5; }
# A kvrun with no store next to it says so.
mkdir -p "$T/lone/bin"
cp "$KVRUN" "$T/lone/bin/kvrun"
(cd "$T/lone" && bin/kvrun --backend="$OLDPWD/$(dirname "$KVRUN")/backends/libkv_sim.so" \
    --op=neg --dtype=f32 --shape=4x5 --fill=exact >"$T/out" 2>&1)
grep -q "warning: no golden store: neither ./golden/MANIFEST nor" "$T/out" &&
    ok "no golden store anywhere: said, with what it means" || bad "no golden store: not said"
finish
