#!/bin/sh
# `ninja memcheck`: Valgrind memcheck over every unit test and a slice of
# the case suite, on the normal build (-O2 -g). Any memcheck error — an
# invalid read or write, a use of uninitialized memory, a bad free, a
# definite, indirect or possible leak — fails the program it happened in.
#
# The suite slice: every KV_MEMCHECK_SHARD-th case (shard 1/12 by default,
# about 300 cases spread over every case file) in this process
# (--isolate=none), so Valgrind sees the cases themselves rather than a
# parent waiting on forked workers. The fuzz corpora replay under it too.
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
shard=${KV_MEMCHECK_SHARD:-1/12}
vg="valgrind -q --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible
    --errors-for-leak-kinds=definite,indirect,possible --suppressions=tests/memcheck.supp
    --child-silent-after-fork=yes --trace-children=no"

# The programs run KV_MEMCHECK_JOBS at a time (default: the CPUs online,
# at most 4): Valgrind runs a program on one core, 10-50x slower than
# native, and this step was the longest of `ninja check`. Each program's
# output goes to its own log, printed in list order at the end, so the log
# reads as if they had run one after the other.
jobs=${KV_MEMCHECK_JOBS:-$(nproc 2>/dev/null || echo 1)}
case $jobs in '' | *[!0-9]*) echo "memcheck: KV_MEMCHECK_JOBS='$jobs': expected a whole number" >&2; exit 2 ;; esac
[ "$jobs" -ge 1 ] || jobs=1
[ -n "${KV_MEMCHECK_JOBS:-}" ] || [ "$jobs" -le 4 ] || jobs=4
logs=build/memcheck-logs
rm -rf "$logs"
mkdir -p "$logs"

# The list: NAME<TAB>COMMAND, one program per line.
list=$logs/list
: >"$list"
missing=""
# The longest programs under Valgrind start first (measured in CI: with
# test_programs last in name order, its 2-5 minutes ran alone at the end
# while the other worker sat idle). A name here that no longer exists is
# skipped; a new long program only runs later than it could.
long_first="kvrun-suite test_programs test_checks test_fastpath_check test_dtype test_cpu_variants"
printf '%s\t%s\n' "kvrun-suite-$shard" \
    "build/kvrun cases/ --shard=$shard --isolate=none --report-dir=build/memcheck-report" >>"$list"
# And a smaller slice of other cases with the cache on (issue 22 item 6):
# its size classes, block reuse and trimming are what users run, and only
# a unit test reached them under Valgrind before. A name ending in
# "-cache-on" runs with KV_CACHING_ALLOCATOR=1 (see worker below).
printf '%s\t%s\n' "kvrun-suite-2_48-cache-on" \
    "build/kvrun cases/ --shard=2/48 --isolate=none --report-dir=build/memcheck-report-cache" >>"$list"
names=""
for src in tests/test_*.c; do
    name=$(basename "$src" .c)
    case " $long_first " in *" $name "*) ;; *) names="$names $name" ;; esac
done
for name in $long_first $names; do
    [ "$name" = kvrun-suite ] && continue
    if [ -x "build/tests/$name" ]; then
        printf '%s\t%s\n' "$name" "build/tests/$name" >>"$list"
    elif [ -f "tests/$name.c" ]; then
        echo "memcheck: build/tests/$name was not built" >&2
        missing="$missing $name"
    fi
done
for h in build/fuzz/replay_*; do
    [ -x "$h" ] || continue
    printf '%s\t%s\n' "${h##*/}" "$h tests/fuzz/${h##*/replay_}/" >>"$list"
done

# A worker takes the next program nobody has claimed (mkdir is atomic) and
# records Valgrind's exit code beside its log.
worker() {
    while IFS='	' read -r name cmd; do
        f=$logs/$(echo "$name" | tr / _)
        mkdir "$f.claim" 2>/dev/null || continue
        rc=0
        cache=0
        case $name in *-cache-on) cache=1 ;; esac
        # shellcheck disable=SC2086 # $vg and $cmd are command lines
        KV_CACHING_ALLOCATOR=$cache $vg $cmd >"$f.log" 2>&1 || rc=$?
        echo "$rc" >"$f.rc"
    done <"$list"
}
w=0
while [ "$w" -lt "$jobs" ]; do
    worker &
    w=$((w + 1))
done
wait

errors="$missing"
failed=""
count=0
while IFS='	' read -r name cmd; do
    count=$((count + 1))
    echo "=== valgrind $cmd"
    f=$logs/$(echo "$name" | tr / _)
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
