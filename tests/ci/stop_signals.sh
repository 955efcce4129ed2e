#!/bin/sh
# Every way a run is stopped leaves reports that say so
# (docs/run-integrity.md): SIGHUP and a second SIGINT still write the
# incomplete reports, and a kill while a plugin is probed leaves neither
# the previous run's green reports nor the probe child behind.
. tests/ci/lib.sh
DIR=$(dirname "$KVRUN")
PLUGIN=$DIR/tests/flaky-plugin/libflaky_mul.so
HANG=$DIR/tests/env-fault/libenv_fault.so
for p in "$PLUGIN" "$HANG"; do [ -f "$p" ] || { bad "$p not built (ninja tests builds it)"; finish; }; done
S=""
for k in 1 2 3 4 5 6 7 8 9 10 11 12; do S="$S${S:+,}${k}x$k:${k}x$k"; done
RUN="$KVRUN --backend=$PLUGIN --op=mul.Tensor --dtype=f32 --shape=$S --fill=exact --jobs=1"

# Starts the slow run in $1 and waits until 2 cases are in.
start() {
    KV_TEST_FLAKY_SLEEP_MS=40 $RUN --report-dir="$1" >"$1.out" 2>&1 &
    pid=$!
    i=0
    while [ "$i" -lt 200 ]; do
        n=$(cat "$1/results.jsonl" 2>/dev/null | grep -c .)
        [ "${n:-0}" -ge 20 ] && return 0
        sleep 0.05
        i=$((i + 1))
    done
    return 1
}
# stopped DIR WHAT SIGNAL CODE: the run stopped by SIGNAL wrote every
# report marked incomplete and exited CODE.
stopped() {
    wait "$pid"
    rc=$?
    [ "$rc" = "$4" ] && ok "$2: exit $4" || bad "$2: exit $rc, expected $4"
    grep -q '"complete":false' "$1/meta.json" && grep -q "\"interrupted\":\"$3\"" "$1/meta.json" &&
        ok "$2: meta.json says incomplete, interrupted by $3" || bad "$2: meta.json not marked"
    grep -q 'INCOMPLETE' "$1/junit.xml" 2>/dev/null && ok "$2: junit.xml is written, marked incomplete" ||
        bad "$2: no junit.xml marked incomplete"
    grep -q "^== INCOMPLETE: interrupted by $3" "$1.out" && ok "$2: the console says INCOMPLETE" ||
        bad "$2: no INCOMPLETE on the console"
}

if start "$T/hup"; then
    kill -HUP "$pid"
    stopped "$T/hup" "SIGHUP" SIGHUP 129
else
    bad "SIGHUP: the run never got going"
    kill "$pid" 2>/dev/null
fi
# The second SIGINT lands while the first one's reports are written.
if start "$T/int2"; then
    kill -INT "$pid"
    sleep 0.01
    kill -INT "$pid" 2>/dev/null
    stopped "$T/int2" "a second SIGINT" SIGINT 130
else
    bad "a second SIGINT: the run never got going"
    kill "$pid" 2>/dev/null
fi

# A kill while a plugin's entry point hangs in the probe child: the old
# complete report is gone before probing starts, and the child dies with
# kvrun (PR_SET_PDEATHSIG).
NEG="--op=neg --dtype=f32 --shape=4"
$KVRUN $NEG --report-dir="$T/probe" >/dev/null 2>&1 || bad "the run before the probe failed"
grep -q '"complete":true' "$T/probe/meta.json" && [ -f "$T/probe/junit.xml" ] || bad "no complete report to start from"
KV_TEST_LOAD_FAULT=hang KV_BACKEND_PROBE_TIMEOUT=60 $KVRUN --backend="$HANG" $NEG --report-dir="$T/probe" >"$T/probe.out" 2>&1 &
pid=$!
child=""
i=0
while [ "$i" -lt 200 ] && [ -z "$child" ]; do
    child=$(pgrep -P "$pid" | head -1)
    [ -z "$child" ] && sleep 0.05
    i=$((i + 1))
done
if [ -n "$child" ]; then
    [ ! -e "$T/probe/meta.json" ] && [ ! -e "$T/probe/junit.xml" ] && [ ! -e "$T/probe/results.jsonl" ] &&
        ok "probing: the old complete report is gone" || bad "probing: the old green report is still there"
    kill -KILL "$pid"
    wait "$pid" 2>/dev/null
    i=0
    while [ "$i" -lt 40 ] && kill -0 "$child" 2>/dev/null; do
        sleep 0.05
        i=$((i + 1))
    done
    if kill -0 "$child" 2>/dev/null; then
        bad "probing: the probe child $child outlived kvrun"
        kill -KILL "$child"
    else
        ok "probing: the probe child died with kvrun"
    fi
else
    bad "probing: no probe child seen"
    kill -KILL "$pid" 2>/dev/null
fi
finish
