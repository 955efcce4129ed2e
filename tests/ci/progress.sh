#!/bin/sh
# Progress while cases run (README "Progress: -v, -q, KV_PROGRESS_SECONDS"):
# at a terminal (script(1) gives kvrun one) a live line redrawn in place;
# elsewhere plain lines every 10% and every KV_PROGRESS_SECONDS; -v a line
# per case; -q nothing; failures once, as they happen; the final summary
# the same in every mode.
. tests/ci/lib.sh
FILE=cases/binary.case
N=$($KVRUN $FILE --list | wc -l)
ESC=$(printf '\033')

# Not at a terminal: one plain line per 10% (the run is shorter than 30 s).
KV_PROGRESS_SECONDS=0 $KVRUN $FILE --report-dir="$T/p" >"$T/p.out" 2>"$T/p.err"
rc=$?
[ "$rc" = 0 ] && ok "plain: exit 0" || bad "plain: exit $rc"
[ "$(grep -c '^kvrun: progress: ' "$T/p.err")" = 10 ] && ok "plain: 10 progress lines (every 10%)" ||
    bad "plain: $(grep -c '^kvrun: progress: ' "$T/p.err") progress lines, expected 10"
grep -q "^kvrun: progress: $N/$N cases (100%), rows: PASS [0-9]* SKIP [0-9]*; .* elapsed, ETA " "$T/p.err" &&
    ok "plain: the last line says $N/$N, the rows per status, elapsed and ETA" || bad "plain: no $N/$N line"
grep -q "$ESC" "$T/p.err" && bad "plain: escape sequences in a non-terminal's output" ||
    ok "plain: no escape sequences"

# At a terminal: the live line, redrawn in place with \r and erase-line.
script -qc "$KVRUN $FILE --report-dir=$T/t" "$T/typescript" >"$T/t.out" 2>&1 </dev/null
grep -q "\[$N/$N 100%\] PASS [0-9]* SKIP [0-9]* | ETA " "$T/t.out" && ok "tty: the live line shows $N/$N, counts, ETA" ||
    bad "tty: no live line"
grep -q "$(printf '\r')\[[0-9]*/$N [0-9]*%\]" "$T/t.out" && grep -q "$ESC\[K" "$T/t.out" &&
    ok "tty: redrawn in place (carriage return, erase line)" || bad "tty: not redrawn in place"
grep -q '^kvrun: progress: ' "$T/t.out" && bad "tty: plain progress lines at a terminal" || ok "tty: no plain lines"
tr -d '\r' <"$T/t.out" | tail -2 >"$T/t.tail"
tail -2 "$T/p.out" >"$T/p.tail"
cmp -s "$T/t.tail" "$T/p.tail" && ok "tty: the summary's last two lines are the plain run's" ||
    bad "tty: the summary differs: $(cat "$T/t.tail")"

# -v: one line per case; -q: nothing but the summary.
expect 0 "" "-v runs" -- $KVRUN -v $FILE --report-dir="$T/v"
[ "$(grep -c "^\[[0-9]*/$N\] PASS " "$T/out")" = "$N" ] && ok "-v: one line per case ($N)" ||
    bad "-v: $(grep -c "^\[[0-9]*/$N\] PASS " "$T/out") case lines, expected $N"
$KVRUN -q $FILE --report-dir="$T/q" >"$T/q.out" 2>"$T/q.err"
[ ! -s "$T/q.err" ] && ok "-q: nothing on stderr" || bad "-q: stderr has $(head -1 "$T/q.err")"
sed 1d "$T/q.out" >"$T/q.body"
sed 1d "$T/p.out" >"$T/p.body"
cmp -s "$T/q.body" "$T/p.body" && ok "-q: the summary equals the default run's (but the timed header)" ||
    bad "-q: the summary differs"
expect 2 "exclude each other" "-q with -v exits 2" -- $KVRUN -q -v $FILE --report-dir="$T/b"

# Failures as they happen, once, in both modes.
PLUGIN=$(dirname "$KVRUN")/tests/flaky-plugin/libflaky_mul.so
LINE="FAIL    mul.Tensor(dtype=f32,shape=[4,5],fill=exact)  (check variants:flaky, backend flaky)"
mkdir -p "$T/fl"
FCASE="--op=mul.Tensor,add.Tensor --dtype=f32 --shape=4x5:4x5 --fill=exact"
KV_TEST_FLAKY_DIR="$T/fl" KV_TEST_FLAKY_FAILS=1000 $KVRUN --backend=$PLUGIN $FCASE --report-dir="$T/f" \
    >"$T/f.out" 2>"$T/f.err"
[ "$(grep -cF "$LINE" "$T/f.err")" = 1 ] && ok "plain: the failure is printed once as it happens" ||
    bad "plain: the failure line is not on stderr exactly once"
script -qc "KV_TEST_FLAKY_DIR=$T/fl KV_TEST_FLAKY_FAILS=1000 $KVRUN --backend=$PLUGIN $FCASE --report-dir=$T/f2" \
    "$T/typescript" >"$T/f2.out" 2>&1 </dev/null
[ "$(grep -cF "$LINE" "$T/f2.out")" = 1 ] && ok "tty: the failure is printed once as it happens" ||
    bad "tty: the failure line is not there exactly once"
[ "$(grep -c 'elements differ' "$T/f2.out")" = 1 ] && ok "tty: the failure's details only in the summary" ||
    bad "tty: the details are printed $(grep -c 'elements differ' "$T/f2.out") times"
KV_TEST_FLAKY_DIR="$T/fl" KV_TEST_FLAKY_FAILS=1000 $KVRUN -q --backend=$PLUGIN $FCASE --report-dir="$T/f3" \
    >"$T/f3.out" 2>"$T/f3.err"
grep -qF "$LINE" "$T/f3.err" && bad "-q: the failure line was printed" || ok "-q: no failure line while running"

# KV_PROGRESS_SECONDS: a plain line while a case hangs, with its time.
FAULTY=$(dirname "$KVRUN")/tests/faulty/libfaulty.so
if [ -f "$FAULTY" ]; then
    KV_TEST_FAULT=hang KV_PROGRESS_SECONDS=0.5 $KVRUN --backend=$FAULTY --op=add.Tensor --dtype=f32 --shape=4x5 \
        --timeout=3 --report-dir="$T/h" >"$T/h.out" 2>"$T/h.err"
    n=$(grep -c '^kvrun: progress: 0/1 cases (0%), rows: none yet; .*; slowest running: add.Tensor(dtype=f32,shape=\[4,5\]) ([0-9.]* s)$' "$T/h.err")
    [ "$n" -ge 2 ] && ok "KV_PROGRESS_SECONDS=0.5: $n lines during a 3 s hang, naming the case" ||
        bad "KV_PROGRESS_SECONDS=0.5: $n lines during the hang"
else
    bad "$FAULTY not built (ninja tests builds it)"
fi
for v in "" abc -1 1e9; do
    expect 2 "KV_PROGRESS_SECONDS=$v:" "KV_PROGRESS_SECONDS='$v' exits 2 naming it" -- \
        env KV_PROGRESS_SECONDS="$v" $KVRUN --op=neg --dtype=f32 --shape=4 --report-dir="$T/b"
done
expect 0 "" "KV_PROGRESS_SECONDS=0 (only the 10% lines) is accepted" -- \
    env KV_PROGRESS_SECONDS=0 $KVRUN --op=neg --dtype=f32 --shape=4 --report-dir="$T/b"
finish
