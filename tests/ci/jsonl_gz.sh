#!/bin/sh
# --gzip-results (docs/reports.md): the finished run's rows go to
# results.jsonl.gz and nowhere else; they read back as the plain file's
# rows (zcat | jq), and every kvrun that reads a run back takes them:
# --merge of compressed shards, --compare of a compressed and a plain run,
# --last-failed. A cut gzip file is an error naming it; a run clears the
# other kind an earlier run left.
. tests/ci/lib.sh
# A passing case, a failing one (a shape error is expected, the call
# succeeds) and one whose error check has a row per backend (cpu and SIM,
# lib.sh's accel target), so that a merge must tell rows apart by backend
# too.
cat >"$T/mix.case" <<'CASES'
--op=neg --dtype=f32 --shape=4x5 --fill=exact
--op=neg --dtype=u8 --shape=4x5 --fill=exact --expect=shape
--op=clamp --dtype=c64 --shape=4 --args=min=0 --expect=dtype
--op=exp --dtype=f32 --shape=4x5 --device=accel
CASES
expect 1 "FAIL 2," "a compressed run" -- $KVRUN "$T/mix.case" --gzip-results --report-dir="$T/gz"
expect 1 "FAIL 2," "the same run, plain" -- $KVRUN "$T/mix.case" --report-dir="$T/plain"
[ -f "$T/gz/results.jsonl.gz" ] && [ ! -e "$T/gz/results.jsonl" ] && [ ! -e "$T/plain/results.jsonl.gz" ] &&
    ok "results.jsonl.gz alone with --gzip-results, results.jsonl alone without" || { bad "which results file"; ls "$T/gz" "$T/plain"; }
rows() { jq -c 'del(.seconds)'; }
zcat "$T/gz/results.jsonl.gz" | rows >"$T/a" && rows <"$T/plain/results.jsonl" >"$T/b" && [ -s "$T/a" ] && cmp -s "$T/a" "$T/b" &&
    ok "zcat | jq reads the same $(wc -l <"$T/a") rows as the plain file" || bad "the compressed rows differ from the plain ones"
grep -q '"results_file":"results.jsonl.gz"' "$T/gz/meta.json" && grep -q '"results_file":"results.jsonl"' "$T/plain/meta.json" &&
    ok "meta.json names the results file" || bad "meta.json: results_file"
grep -q 'href="results.jsonl.gz"' "$T/gz/report.html" && ok "report.html links results.jsonl.gz" || bad "report.html's link"
expect 0 "0 regressions" "--compare of the plain run with the compressed one" -- \
    $KVRUN --compare "$T/plain" "$T/gz" --report-dir="$T/cmp"
grep -q '| changed bits (content hash) | 0 |' "$T/cmp/compare.md" && grep -q "| in both runs | $(wc -l <"$T/a") |" "$T/cmp/compare.md" &&
    ok "--compare: every row in both, 0 changed bits" || bad "--compare counts"
$KVRUN "$T/mix.case" --report-dir="$T/gz" --last-failed --list >"$T/lf" 2>&1
[ "$(cat "$T/lf")" = "neg(dtype=u8,shape=[4,5],fill=exact,expect=shape)" ] &&
    ok "--last-failed reads the failing case from results.jsonl.gz" || { bad "--last-failed from .gz"; sed 's/^/     | /' "$T/lf"; }
for k in 1 2; do $KVRUN "$T/mix.case" --gzip-results --shard=$k/2 --report-dir="$T/s$k" >/dev/null 2>&1; done
expect 1 "FAIL 2," "--merge of two compressed shards" -- $KVRUN --merge "$T/s1" "$T/s2" --report-dir="$T/m"
zcat "$T/m/results.jsonl.gz" | rows | sort >"$T/ms" && sort "$T/b" >"$T/bs" && cmp -s "$T/ms" "$T/bs" &&
    ok "the merge wrote results.jsonl.gz with the unsharded run's rows" || bad "the merged rows differ from the unsharded run's"
expect 1 "FAIL 2," "--merge --gzip-results of a plain folder" -- \
    $KVRUN --merge "$T/plain" --gzip-results --report-dir="$T/m2"
[ -f "$T/m2/results.jsonl.gz" ] && [ ! -e "$T/m2/results.jsonl" ] && ok "--merge --gzip-results writes results.jsonl.gz" ||
    bad "--merge --gzip-results"
# A cut file: the error names it and what is wrong.
mkdir "$T/cut" && cp "$T/gz/meta.json" "$T/cut/" &&
    head -c $(($(wc -c <"$T/gz/results.jsonl.gz") / 2)) "$T/gz/results.jsonl.gz" >"$T/cut/results.jsonl.gz"
expect 2 "$T/cut/results.jsonl.gz': the gzip stream ends inside line" "--compare with a cut results.jsonl.gz" -- \
    $KVRUN --compare "$T/cut" "$T/plain" --report-dir="$T/cmp2"
expect 2 "$T/cut/results.jsonl.gz': the gzip stream ends inside line" "--last-failed with a cut results.jsonl.gz" -- \
    $KVRUN "$T/mix.case" --report-dir="$T/cut" --last-failed
# One kind at a time in a folder: each run removes the other kind.
expect 1 "" "a plain run into the compressed run's folder" -- $KVRUN "$T/mix.case" --report-dir="$T/gz"
[ -f "$T/gz/results.jsonl" ] && [ ! -e "$T/gz/results.jsonl.gz" ] && ok "the earlier results.jsonl.gz is gone" ||
    bad "a stale results.jsonl.gz stayed"
expect 1 "" "a compressed run into the plain run's folder" -- $KVRUN "$T/mix.case" --gzip-results --report-dir="$T/plain"
[ -f "$T/plain/results.jsonl.gz" ] && [ ! -e "$T/plain/results.jsonl" ] && ok "the earlier results.jsonl is gone" ||
    bad "a stale results.jsonl stayed"
finish
