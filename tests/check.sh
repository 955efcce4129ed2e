#!/bin/sh
# Everything CI gates on, in one command (`ninja check`): Valgrind memcheck,
# the ASan+LSan+UBSan build, the ThreadSanitizer concurrency tests, the fuzz
# smoke run, the coverage gate (>= 90% of src/ lines), the golden store
# regenerated bit for bit on aarch64 under qemu (ninja cross-golden, ~2-4
# min), and last the unit tests plus the whole case suite, so the log
# ends with the test runner's own summary. Stops at the first failing step.
set -e
echo "=== check: memcheck";   sh tests/memcheck.sh
echo "=== check: asan+ubsan"; sh tests/sanitize.sh asan
echo "=== check: tsan";       sh tests/sanitize.sh tsan
echo "=== check: fuzz-smoke"; sh tests/fuzz/run.sh smoke
echo "=== check: coverage";   sh tests/coverage.sh
echo "=== check: cross-golden"; sh tests/cross_golden.sh
echo "=== check: unit tests and the case suite"
sh tests/run_tests.sh build/tests
