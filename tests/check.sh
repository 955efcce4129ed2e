#!/bin/sh
# Everything CI gates on, in one command (`ninja check`): Valgrind memcheck,
# the ASan+LSan+UBSan build, the ThreadSanitizer concurrency tests, the fuzz
# smoke run, the coverage gate (>= 90% of src/ lines), the golden store
# regenerated bit for bit on aarch64 under qemu (ninja cross-golden), and
# last the unit tests plus the whole case suite, so the log ends with the
# test runner's own summary. Stops at the first failing step.
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
# cross-golden runs beside the other steps: its regeneration is one
# process under qemu, on one core, for minutes, and most steps below leave
# a core idle at times (single-threaded tests, gcovr, the fuzzers). Its
# output is printed, and its status counted, where it is joined.
cross_log=build-aarch64/cross-golden.check.log
mkdir -p build-aarch64
rm -f "$cross_log.rc"
# In its own process group (setsid), so a failing step can stop it whole.
setsid sh -c 's=$(date +%s); rc=0; sh tests/cross_golden.sh >"$1" 2>&1 || rc=$?
    echo "$rc $(($(date +%s) - s))" >"$1.rc"' cross-golden "$cross_log" &
cross_pid=$!
cross_join() {
    wait "$cross_pid" || true
    cat "$cross_log"
    read -r rc secs <"$cross_log.rc" || { rc=1 secs=?; }
    echo "=== check: cross-golden ran $secs s beside the steps above; the wait for it:"
    return "$rc"
}
# A failing step stops the run: the background one must not outlive it.
trap 'kill -- "-$cross_pid" 2>/dev/null || true' EXIT
step memcheck sh tests/memcheck.sh
step asan+ubsan sh tests/sanitize.sh asan
step tsan sh tests/sanitize.sh tsan
step fuzz-smoke sh tests/fuzz/run.sh smoke
step coverage sh tests/coverage.sh
step cross-golden-wait cross_join
trap - EXIT
# Last, so the log ends with the test runner's own summary.
echo "=== check: unit tests and the case suite (from $(($(date +%s) - t0)) s)"
sh tests/run_tests.sh build/tests
