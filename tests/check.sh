#!/bin/sh
# Everything CI gates on, in one command (`ninja check`): Valgrind memcheck,
# the ASan+LSan+UBSan build, the ThreadSanitizer concurrency tests, the fuzz
# smoke run, the coverage gate (>= 90% of src/ lines), the golden store
# regenerated bit for bit on aarch64 under qemu (ninja cross-golden, ~2-4
# min), and last the unit tests plus the whole case suite, so the log
# ends with the test runner's own summary. Stops at the first failing step.
set -e
# Each step says how long it took, so a CI log shows where the time goes.
t0=$(date +%s)
step() {
    name=$1
    shift
    echo "=== check: $name"
    s=$(date +%s)
    "$@"
    e=$(date +%s)
    echo "=== check: $name took $((e - s)) s (total $((e - t0)) s)"
}
step memcheck sh tests/memcheck.sh
step asan+ubsan sh tests/sanitize.sh asan
step tsan sh tests/sanitize.sh tsan
step fuzz-smoke sh tests/fuzz/run.sh smoke
step coverage sh tests/coverage.sh
step cross-golden sh tests/cross_golden.sh
# Last, so the log ends with the test runner's own summary.
echo "=== check: unit tests and the case suite (from $(($(date +%s) - t0)) s)"
sh tests/run_tests.sh build/tests
