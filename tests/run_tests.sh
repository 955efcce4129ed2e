#!/bin/sh
# Runs every unit-test binary given on the command line, shows each one's
# CMocka output, and ends with one summary line. Exits non-zero if any
# binary failed (a test failure, a crash, or a missing binary).
failed=""
count=0
for t in "$@"; do
    count=$((count + 1))
    echo "=== $t"
    if ! "$t"; then
        failed="$failed $t"
    fi
done
if [ "$count" -eq 0 ]; then
    echo "run_tests: no test binaries given" >&2
    exit 1
fi
if [ -n "$failed" ]; then
    echo "FAILED test binaries:$failed"
    exit 1
fi
echo "all $count test binaries passed"
