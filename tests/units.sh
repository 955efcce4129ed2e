#!/bin/sh
# `tests/units.sh DIR`: runs every unit-test program DIR/test_* that has a
# source tests/test_*.c, KV_TEST_JOBS at a time (default: the online CPUs,
# at most 4; tests/pool.sh), shows each one's CMocka output in source
# order with its seconds, and ends with one summary line. Exits non-zero
# if any failed or none ran. It is run_tests.sh's first part, and what
# the instrumented builds run (tests/coverage.sh, sanitize.sh), which run
# the suite their own way.
dir=${1:?usage: units.sh DIR}
. tests/pool.sh
jobs=$(pool_jobs) || exit 2
logs=$dir/../units-logs
rm -rf "$logs" && mkdir -p "$logs" || exit 1
list=$logs/list
: >"$list"
failed=""
count=0
names=""
for src in tests/test_*.c; do names="$names $(basename "$src" .c)"; done
# shellcheck disable=SC2086 # names are words
for name in $(pool_order $names); do
    count=$((count + 1))
    if [ -x "$dir/$name" ]; then
        printf '%s\t%s\n' "$name" "$dir/$name" >>"$list"
    else
        echo "units: $dir/$name was not built" >&2
        failed="$failed $name"
    fi
done
if [ "$count" -eq 0 ]; then
    echo "units: no tests/test_*.c found" >&2
    exit 1
fi
pool_run "$list" "$logs" "$jobs"
while IFS='	' read -r name cmd; do
    f=$(pool_log "$logs" "$name")
    echo "=== $name"
    cat "$f.log"
    rc=$(cat "$f.rc" 2>/dev/null || echo "none")
    echo "=== $name: $(cat "$f.secs" 2>/dev/null || echo '?') s"
    [ "$rc" = 0 ] || failed="$failed $name"
done <"$list"
if [ -n "$failed" ]; then
    echo "units: FAILED:$failed ($count test programs in $dir)"
    exit 1
fi
echo "units: all $count test programs in $dir passed ($jobs at a time)"
