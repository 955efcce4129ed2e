#!/bin/sh
# No damaged run reads green (docs/run-integrity.md): a results.jsonl that
# cannot be written (a full disk: /dev/full, then a file size limit that
# also stops the final reports), a golden store that cannot be saved, and
# a worker that cannot start each give a non-zero exit, an ERROR row in
# the reports, and a console that never ends "N passed, 0 failed".
. tests/ci/lib.sh
S=""
for k in 1 2 3 4 5 6; do S="$S${S:+,}${k}x$k:${k}x$k"; done
RUN="$KVRUN --op=mul.Tensor --dtype=f32 --shape=$S --fill=exact --jobs=1"
green() { tail -1 "$1" | grep -q '^[0-9]* passed, 0 failed'; }

# results.jsonl on a full device: the rows are held in memory and reach
# the reports, but the folder says incomplete, and an ERROR row says why.
mkdir -p "$T/full"
ln -s /dev/full "$T/full/results.jsonl"
$RUN --report-dir="$T/full" >"$T/full.out" 2>&1
rc=$?
[ "$rc" = 1 ] && ok "/dev/full: exit 1" || bad "/dev/full: exit $rc"
green "$T/full.out" && bad "/dev/full: the console ends green: $(tail -1 "$T/full.out")" ||
    ok "/dev/full: the console ends: $(tail -1 "$T/full.out")"
grep -q 'ERROR *run(report)' "$T/full.out" && grep -q 'could not take the rows of 6 of 6 cases' "$T/full.out" &&
    ok "/dev/full: an ERROR row names results.jsonl" || bad "/dev/full: no ERROR row for the lost writes"
grep -q '"complete":false' "$T/full/meta.json" && grep -q '"interrupted":"write error"' "$T/full/meta.json" &&
    ok "/dev/full: meta.json says incomplete (write error)" || bad "/dev/full: meta.json does not say incomplete"
grep -q 'INCOMPLETE: interrupted by write error' "$T/full.out" && ok "/dev/full: the console says INCOMPLETE" ||
    bad "/dev/full: no INCOMPLETE on the console"
grep -q 'errors="1"' "$T/full/junit.xml" && grep -q 'run(report)' "$T/full/junit.xml" &&
    ok "/dev/full: junit.xml has the ERROR" || bad "/dev/full: junit.xml lacks the ERROR"

# A file size limit (SIGXFSZ ignored: writes past it fail with EFBIG, as
# on a full disk) that results.jsonl and the final reports run into.
(
    trap '' XFSZ
    ulimit -f 12
    exec $RUN --report-dir="$T/fsz"
) >"$T/fsz.out" 2>&1
rc=$?
[ "$rc" = 1 ] && ok "ulimit -f: exit 1" || bad "ulimit -f: exit $rc"
green "$T/fsz.out" && bad "ulimit -f: the console ends green: $(tail -1 "$T/fsz.out")" ||
    ok "ulimit -f: the console ends: $(tail -1 "$T/fsz.out")"
grep -q '"complete":false' "$T/fsz/meta.json" && ok "ulimit -f: meta.json says incomplete" ||
    bad "ulimit -f: meta.json says complete"
grep -q '^[0-9]* passed, [1-9][0-9]* failed' "$T/fsz.out" && ok "ulimit -f: the counts have the ERROR row" ||
    bad "ulimit -f: the counts lack the ERROR row"

# --regen-golden whose save fails (the op's folder is a file; root ignores
# a read-only mode): an ERROR in every report.
NEG="--op=neg --dtype=f32"
$KVRUN $NEG --shape=4 --regen-golden --golden-dir="$T/g" --report-dir="$T/b" >/dev/null 2>&1 || bad "the first regeneration failed"
rm -rf "$T/g/neg"
echo "not a folder" >"$T/g/neg"
$KVRUN $NEG --shape=5 --regen-golden --golden-dir="$T/g" --report-dir="$T/gs" >"$T/gs.out" 2>&1
rc=$?
[ "$rc" = 1 ] && ok "a failed golden save: exit 1" || bad "a failed golden save: exit $rc"
grep -q 'ERROR *run(golden-save)' "$T/gs.out" && ok "a failed golden save: an ERROR row on the console" ||
    bad "a failed golden save: no ERROR row on the console"
green "$T/gs.out" && bad "a failed golden save: the console ends green" || ok "a failed golden save: $(tail -1 "$T/gs.out")"
grep -q '"ERROR":1' "$T/gs/meta.json" && ok "a failed golden save: meta.json counts the ERROR" ||
    bad "a failed golden save: meta.json has no ERROR"
grep -q 'errors="1"' "$T/gs/junit.xml" && ok "a failed golden save: junit.xml has the ERROR" ||
    bad "a failed golden save: junit.xml has no ERROR"

# A worker that cannot run its case (1 MiB of address space): an ERROR
# row of that case, not "the run selected no cases".
KV_WORKER_MEM=1 $KVRUN $NEG --shape=4 --report-dir="$T/wm" >"$T/wm.out" 2>&1
rc=$?
[ "$rc" = 1 ] && ok "KV_WORKER_MEM=1: exit 1" || bad "KV_WORKER_MEM=1: exit $rc"
grep -q 'ERROR *neg(dtype=f32,shape=\[4\])' "$T/wm.out" && grep -q 'no result for this case' "$T/wm.out" &&
    ok "KV_WORKER_MEM=1: an ERROR row of the case" || bad "KV_WORKER_MEM=1: no ERROR row of the case"
grep -q 'selected no cases' "$T/wm.out" && bad "KV_WORKER_MEM=1: 'selected no cases'" || ok "KV_WORKER_MEM=1: cases were selected"
# At least one: under load a replaced worker may add an ERROR row of its own.
grep -q 'errors="[1-9]' "$T/wm/junit.xml" && ok "KV_WORKER_MEM=1: junit.xml has the ERROR" ||
    bad "KV_WORKER_MEM=1: junit.xml has no ERROR"
finish
