#!/bin/sh
# --resume rebuilds from whole cases only (docs/run-integrity.md): a
# results.jsonl whose last line is cut, whose last case is cut at a line's
# end, or which holds a case twice, resumes to exactly the rows and totals
# of the uninterrupted run. The damaged folders are made from a finished
# one (meta.json set back to "in progress", as a killed run leaves it).
. tests/ci/lib.sh
S=""
for k in 1 2 3 4 5 6; do S="$S${S:+,}${k}x$k:${k}x$k"; done
RUN="$KVRUN --op=mul.Tensor --dtype=f32 --shape=$S --fill=exact --jobs=1"
rows() { python3 -c "
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    print(r['case_id'], r['check'], r['backend'], r['status'])
" "$1" | sort; }

$RUN --report-dir="$T/full" >"$T/full.out" 2>&1 || bad "the uninterrupted run failed"
rows "$T/full/results.jsonl" >"$T/full.rows"
tail -1 "$T/full.out" >"$T/full.tail"
nrows=$(grep -c . "$T/full/results.jsonl")
per=$((nrows / 6))
[ "$per" -ge 3 ] && [ $((per * 6)) -eq "$nrows" ] && ok "the uninterrupted run: $nrows rows, $per per case" ||
    bad "the uninterrupted run has $nrows rows, not 6 equal groups"

# damaged NAME: a copy of the finished folder, marked in progress, whose
# results.jsonl is what stdin gives.
damaged() {
    cp -r "$T/full" "$T/$1"
    sed 's/"complete":true/"complete":false/' "$T/full/meta.json" >"$T/$1/meta.json"
    cat >"$T/$1/results.jsonl"
}
# resumed NAME WHAT NEEDLE: --resume there ends with the uninterrupted
# rows and totals; NEEDLE (may be empty) is on the console.
resumed() {
    $RUN --resume --report-dir="$T/$1" >"$T/$1.out" 2>&1
    rc=$?
    [ "$rc" = 0 ] && ok "$2: --resume exits 0" || bad "$2: --resume exits $rc"
    if [ -n "$3" ]; then
        grep -qF -- "$3" "$T/$1.out" && ok "$2: the console says '$3'" || bad "$2: '$3' not on the console"
    fi
    rows "$T/$1/results.jsonl" >"$T/$1.rows"
    cmp -s "$T/$1.rows" "$T/full.rows" && ok "$2: exactly the uninterrupted run's $nrows rows" ||
        bad "$2: $(grep -c . "$T/$1.rows") rows, not the uninterrupted run's $nrows"
    tail -1 "$T/$1.out" | cmp -s - "$T/full.tail" && ok "$2: the same totals: $(tail -1 "$T/full.tail")" ||
        bad "$2: totals $(tail -1 "$T/$1.out")"
    grep -q '"complete":true' "$T/$1/meta.json" && ok "$2: meta.json says complete" || bad "$2: meta.json not complete"
}

# Two whole cases, half the third, and its next line cut in the middle.
{ head -n $((2 * per + per / 2)) "$T/full/results.jsonl"; sed -n "$((2 * per + per / 2 + 1))p" "$T/full/results.jsonl" |
    head -c 40; } | damaged torn
resumed torn "a torn last line" "ended in a cut line: the last case in it runs again"
grep -q "^kvrun: --resume: 2 of 6 cases finished before; running the other 4" "$T/torn.out" &&
    ok "a torn last line: the cut case runs again" || bad "a torn last line: $(grep 'finished before' "$T/torn.out")"

# The same cut at a line's end: nothing shows it but a short group.
head -n $((2 * per + per / 2)) "$T/full/results.jsonl" | damaged short
resumed short "a case cut at a line's end" ""

# Case 2's rows, then again (all but one): which group is whole cannot be
# told, so the case runs again.
{ head -n $((3 * per)) "$T/full/results.jsonl"; sed -n "$((per + 1)),$((2 * per - 1))p" "$T/full/results.jsonl"; } |
    damaged dup
resumed dup "a case found twice" "1 case found more than once"
finish
