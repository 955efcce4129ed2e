#!/bin/sh
# junit.xml as CI systems take it (docs/ci.md): valid against the Jenkins
# xUnit plugin's junit-10.xsd (tests/junit-10.xsd); a repro line only on
# testcases with something to reproduce; plugin paths under the working
# directory relative to it.
. tests/ci/lib.sh
# Not a skip: a missing xmllint must not turn this check green.
command -v xmllint >/dev/null 2>&1 || { bad "xmllint is missing (libxml2-utils)"; finish; }
XSD=tests/junit-10.xsd
# The schema must reject what we must not write, or the check proves nothing.
printf '<testsuites tests="1" skipped="0"><testsuite name="a" tests="1" failures="0" errors="0"/></testsuites>\n' \
    >"$T/bad.xml"
xmllint --noout --schema $XSD "$T/bad.xml" >/dev/null 2>&1 && bad "the schema takes <testsuites skipped=...>" ||
    ok "the schema rejects <testsuites skipped=...>"
cat >"$T/mix.case" <<'CASES'
--op=neg --dtype=u8,f32 --shape=4x5 --fill=exact
--op=neg --dtype=u8,i32 --shape=4x5 --fill=exact --expect=shape
--op=neg --dtype=f32 --shape=3x13 --fill=exact
CASES
# The CPU's error row only: SIM's path is a row of its own.
printf 'neg(dtype=i32,shape=[4,5],fill=exact,expect=shape) error cpu\n' >"$T/baseline.txt"
# The plugin named by its absolute path, as the default plugin folder is.
expect 1 "XFAIL 1" "a run with PASS, FAIL, ERROR, SKIP and XFAIL rows" -- \
    env KV_BACKEND_PATH="$PWD/$(dirname "$KVRUN")/backends/libkv_sim.so" \
    $KVRUN "$T/mix.case" --baseline="$T/baseline.txt" --report-dir="$T/r"
J="$T/r/junit.xml"
expect 0 "validates" "junit.xml validates against junit-10.xsd" -- xmllint --noout --schema $XSD "$J"
count() { xmllint --xpath "count($1)" "$J" 2>/dev/null; }
npass=$(count '//testcase[not(*)]')
nrepro=$(count '//testcase[system-out]')
nbad=$(count '//testcase[failure or error or skipped[@type="XFAIL"]]')
[ "$npass" -gt 0 ] && [ "$nbad" -ge 3 ] && [ "$nrepro" -eq "$nbad" ] &&
    ok "repro lines on the $nbad failing or XFAIL testcases only ($npass bare ones)" ||
    bad "repro lines on $nrepro testcases, $nbad failing or XFAIL, $npass bare"
grep -q "repro: $KVRUN --backend=$(dirname "$KVRUN")/backends/libkv_sim.so" "$J" && ! grep -qF "$PWD/" "$J" &&
    ok "the plugin's path in repro lines is relative to the working directory" ||
    bad "junit.xml holds an absolute path under $PWD"
# A case's passing, skipped and unsupported rows are one testcase (the
# failing ones each their own); the counts are of the testcases written.
nok=$(grep -c '"status":"\(PASS\|SKIP\|UNSUPPORTED\)"' "$T/r/results.jsonl")
ncases=$(sed 's/^{"case_id":"\([^"]*\)".*/\1/' "$T/r/results.jsonl" | sort -u | wc -l)
nfold=$(count '//testcase[not(failure) and not(error) and not(skipped[@type="XFAIL"])]')
[ "$nfold" -gt 0 ] && [ "$nfold" -lt "$nok" ] && [ "$nfold" -le "$((ncases + 3))" ] &&
    [ "$(count '//testcase[contains(@classname,"variants:CPU/")]')" -eq 0 ] &&
    ok "$nok passing, skipped or unsupported rows of $ncases cases are $nfold testcases" ||
    bad "folding: $nok rows of $ncases cases, $nfold testcases"
[ "$(count '//testcase')" -eq "$(xmllint --xpath 'string(/testsuites/@tests)' "$J")" ] &&
    [ "$(count '//testcase[skipped]')" -eq "$(xmllint --xpath 'sum(//testsuite/@skipped)' "$J")" ] &&
    ok "tests= and skipped= count the testcases written" || bad "the counts are not those of the testcases"
finish
