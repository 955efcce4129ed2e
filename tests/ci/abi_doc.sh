#!/bin/sh
# docs/plugin-abi.md's two tables agree with each other and with
# tests/test_hostile.sh (issue 22: every promise of the plugin ABI has a
# test): every promise of "Promises and their checks" is a row of
# "Promises and their tests" with at least one test; every hostile:NAME
# cited there is a row of test_hostile.sh's table and every row of that
# table is cited; every tests/... path cited exists. Reads files only
# (no kvrun), so it costs nothing.
. tests/ci/lib.sh
DOC=${KV_ABI_DOC:-docs/plugin-abi.md}
HOSTILE=${KV_ABI_HOSTILE:-tests/test_hostile.sh}

# The first column of the table under the section whose title is $1.
promises() {
    awk -v want="## $1" '
        /^## / { on = ($0 == want); next }
        on && /^\| / && !/^\| promise \|/ && !/^\| --- \|/ {
            line = $0; sub(/^\| /, "", line); sub(/ \| .*$/, "", line); print line }' "$DOC"
}
# The whole table under "Promises and their tests".
tests_table() {
    awk '/^## / { on = ($0 == "## Promises and their tests"); next } on && /^\| /' "$DOC"
}
promises "Promises and their checks" >"$T/checks"
promises "Promises and their tests" >"$T/tests"
expect 0 "" "the checks table has promises" -- test -s "$T/checks"
expect 0 "" "the tests table has promises" -- test -s "$T/tests"
missing=$(grep -vxF -f "$T/tests" "$T/checks")
expect 0 "" "every promise of the checks table has a row in the tests table${missing:+ (missing: $missing)}" -- \
    test -z "$missing"
untested=$(tests_table | awk -F ' \\| ' '!/^\| (promise|---) / && ($2 == "" || $2 ~ /^(none|—) *\|?$/) { print $1 }')
expect 0 "" "every promise has a test${untested:+ (none for: $untested)}" -- test -z "$untested"

# The hostile rows: NAME is the third word of each `row MODE NAME ...`.
awk '$1 == "row" && ($2 == "required" || $2 == "pending") { print $3 }' "$HOSTILE" | sort -u >"$T/rows"
tests_table | grep -o 'hostile:[a-z0-9_:@-]*' | sed 's/^hostile://' | sort -u >"$T/cited"
expect 0 "" "test_hostile.sh has rows" -- test -s "$T/rows"
unknown=$(comm -13 "$T/rows" "$T/cited" | tr '\n' ' ')
expect 0 "" "every hostile row the doc cites exists${unknown:+ (not in $HOSTILE: $unknown)}" -- test -z "$unknown"
uncited=$(comm -23 "$T/rows" "$T/cited" | tr '\n' ' ')
expect 0 "" "every hostile row is under a promise in the doc${uncited:+ (not cited: $uncited)}" -- test -z "$uncited"
nopath=$(tests_table | grep -o 'tests/[A-Za-z0-9_./-]*\.\(c\|sh\)' | sort -u | while read -r f; do
    [ -f "$f" ] || printf '%s ' "$f"
done)
expect 0 "" "every test file the doc cites exists${nopath:+ (missing: $nopath)}" -- test -z "$nopath"
finish
