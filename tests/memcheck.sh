#!/bin/sh
# `ninja memcheck`: Valgrind memcheck over every unit test and a slice of
# the case suite, on the normal build (-O2 -g). Any memcheck error — an
# invalid read or write, a use of uninitialized memory, a bad free, a
# definite, indirect or possible leak — fails the program it happened in.
#
# The suite slice: every KV_MEMCHECK_SHARD-th case (shard 1/24 by default,
# spread over every case file) in this process (--isolate=none), so
# Valgrind sees the cases themselves rather than a parent waiting on forked
# workers. ASan runs every other case (tests/sanitize.sh); what only
# Valgrind sees is a read of uninitialized memory, and a slice meets the
# same code paths. The fuzz corpora replay under it too.
#
# What fails the run: a memcheck error (Valgrind exits 99) or a program
# killed by a signal. A test or case that merely FAILS under Valgrind is
# reported but does not: Valgrind's emulation of some floating-point
# instructions is not bit-exact (it converts i64 -> f32 through a double,
# rounding twice, which test_ref_elementwise's once-rounded conversion
# test sees; libm paths such as erf behind gelu can move by an ulp), and
# pass or fail is `ninja test`'s job on the real CPU.
#
# tests/memcheck.supp holds the suppressions, each with its reason (today
# two: a test that leaks on purpose, and the same with the CPU cache on).
set -eu
# Memcheck must see every block come and go (a cached, recycled block hides
# a use after free and moves a leak onto its first owner's stack), so the
# caching CPU allocator is off here (README, KV_CACHING_ALLOCATOR), but
# for one suite slice that runs with it on (below).
export KV_CACHING_ALLOCATOR=0
# The OpenCL plugin (kernels/opencl) stays out of this run: PoCL JITs its
# kernels with LLVM and runs them on its own thread pool, which this
# instrumentation cannot see into (and would slow many times over); its
# rows are ninja test's. Every other plugin of build/backends still loads.
KV_BACKEND_PATH=$(ls build/backends/*.so | grep -v '/libkv_opencl\.so$' | paste -sd: -)
export KV_BACKEND_PATH
shard=${KV_MEMCHECK_SHARD:-1/24}
vg="valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible
    --errors-for-leak-kinds=definite,indirect,possible --suppressions=tests/memcheck.supp
    --child-silent-after-fork=yes --trace-children=no"

# The programs run KV_MEMCHECK_JOBS at a time (default: the CPUs online,
# at most 4): Valgrind runs a program on one core, 10-50x slower than
# native, and this step was the longest of `ninja check`. Each program's
# output goes to its own log, printed in list order at the end, so the log
# reads as if they had run one after the other.
. tests/pool.sh
jobs=${KV_MEMCHECK_JOBS:-$(pool_jobs)} || exit 2
case $jobs in '' | *[!0-9]* | 0) echo "memcheck: KV_MEMCHECK_JOBS='$jobs': expected a whole number, 1 or more" >&2; exit 2 ;; esac
logs=build/memcheck-logs
rm -rf "$logs"
mkdir -p "$logs"

# The list: NAME<TAB>COMMAND, one program per line.
list=$logs/list
: >"$list"
missing=""
# Every line is one command (tests/pool.sh splits it into words): the
# allocator setting, Valgrind, the program.
vg="env KV_CACHING_ALLOCATOR=0 $(echo $vg)" # one line
printf '%s\t%s\n' "kvrun-suite-$shard" \
    "$vg build/kvrun cases/ --shard=$shard --isolate=none --report-dir=build/memcheck-report" >>"$list"
# And a smaller slice of other cases with the cache on (issue 22 item 6):
# its size classes, block reuse and trimming are what users run, and only
# a unit test reached them under Valgrind before. A name ending in
# "-cache-on" runs with KV_CACHING_ALLOCATOR=1.
printf '%s\t%s\n' "kvrun-suite-2_96-cache-on" \
    "$(echo "$vg" | sed 's/KV_CACHING_ALLOCATOR=0/KV_CACHING_ALLOCATOR=1/') build/kvrun cases/ --shard=2/96 --isolate=none --report-dir=build/memcheck-report-cache" >>"$list"
# The long unit tests first (tests/pool.sh), after the suite slices.
names=""
for src in tests/test_*.c; do names="$names $(basename "$src" .c)"; done
# shellcheck disable=SC2086 # names are words
for name in $(pool_order $names); do
    if [ -x "build/tests/$name" ]; then
        printf '%s\t%s\n' "$name" "$vg build/tests/$name" >>"$list"
    elif [ -f "tests/$name.c" ]; then
        echo "memcheck: build/tests/$name was not built" >&2
        missing="$missing $name"
    fi
done
for h in build/fuzz/replay_*; do
    [ -x "$h" ] || continue
    printf '%s\t%s\n' "${h##*/}" "$vg $h tests/fuzz/${h##*/replay_}/" >>"$list"
done

pool_run "$list" "$logs" "$jobs"

errors="$missing"
failed=""
count=0
while IFS='	' read -r name cmd; do
    count=$((count + 1))
    echo "=== ${cmd#env KV_CACHING_ALLOCATOR=? }"
    f=$(pool_log "$logs" "$name")
    cat "$f.log" 2>/dev/null || true
    rc=$(cat "$f.rc" 2>/dev/null || echo 128) # no exit code: it never finished
    if [ "$rc" -eq 99 ] || [ "$rc" -ge 128 ]; then
        errors="$errors $name"
    elif [ "$rc" -ne 0 ]; then
        failed="$failed $name"
    fi
done <"$list"

if [ -n "$failed" ]; then echo "memcheck: failed under Valgrind, no memory error (not counted):$failed"; fi
if [ -n "$errors" ]; then
    echo "memcheck: FAILED: memory errors or crashes in:$errors ($count programs)" >&2
    exit 1
fi
echo "memcheck: no memory errors in $count programs"
