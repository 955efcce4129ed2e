#!/bin/sh
# `tests/units.sh DIR [WRAPPER...]`: runs every unit-test program DIR/test_*
# that has a source tests/test_*.c, each under WRAPPER when one is given
# (valgrind ...), and ends with one summary line. Exits non-zero if any
# failed or none ran. It is run_tests.sh without the case suite, for the
# instrumented builds (tests/coverage.sh, memcheck.sh, sanitize.sh), which
# run the suite their own way.
dir=${1:?usage: units.sh DIR [WRAPPER...]}
shift
failed=""
count=0
for src in tests/test_*.c; do
    name=$(basename "$src" .c)
    bin="$dir/$name"
    count=$((count + 1))
    echo "=== $name"
    if [ ! -x "$bin" ]; then
        echo "units: $bin was not built" >&2
        failed="$failed $name"
    elif ! "$@" "$bin"; then
        failed="$failed $name"
    fi
done
if [ "$count" -eq 0 ]; then
    echo "units: no tests/test_*.c found" >&2
    exit 1
fi
if [ -n "$failed" ]; then
    echo "units: FAILED:$failed ($count test programs in $dir)"
    exit 1
fi
echo "units: all $count test programs in $dir passed"
