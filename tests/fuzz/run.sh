#!/bin/sh
# Runs the libFuzzer harnesses (build-fuzz/, clang; tests/configs.sh fuzz):
#   tests/fuzz/run.sh smoke [RUNS]      each harness for RUNS inputs (default
#                                       10000): `ninja fuzz-smoke`, in CI
#   tests/fuzz/run.sh long [SECONDS]    each for SECONDS (default 300)
#   tests/fuzz/run.sh only NAME ARGS... one harness, libFuzzer flags as given
# Harnesses: grammar (case files), schema (op schemas), npy (.npy files),
# env (environment variable parsers). Each starts from its seed corpus
# tests/fuzz/NAME/ (read only; new inputs go to build-fuzz/corpus/NAME/)
# and a dictionary tests/fuzz/NAME.dict where there is one. A crash, a
# sanitizer report, a leak or a failed harness check stops that harness
# with its input in build-fuzz/artifacts/: once the bug is fixed, copy the
# input into tests/fuzz/NAME/ (crash-<what>) so the replay programs run it
# from then on. Exit non-zero when any harness failed.
set -eu
mode=${1:-smoke}
[ $# -gt 0 ] && shift
names="grammar schema npy env"

case "$mode" in
smoke) limit="-runs=${1:-10000}"; [ $# -gt 0 ] && shift ;;
long) limit="-max_total_time=${1:-300}"; [ $# -gt 0 ] && shift ;;
only) names=${1:?usage: run.sh only NAME [LIBFUZZER FLAGS...]}; shift; limit="" ;;
*) echo "usage: tests/fuzz/run.sh smoke [RUNS] | long [SECONDS] | only NAME [FLAGS...]" >&2; exit 2 ;;
esac

sh tests/configs.sh fuzz fuzzers
mkdir -p build-fuzz/artifacts
# The harnesses run side by side (tests/pool.sh): each is one process on
# one core, so one after another left the other cores idle.
. tests/pool.sh
logs=build-fuzz/logs
rm -rf "$logs" && mkdir -p "$logs"
: >"$logs/list"
for name in $names; do
    corpus="build-fuzz/corpus/$name"
    mkdir -p "$corpus"
    dict=""
    [ -f "tests/fuzz/$name.dict" ] && dict="-dict=tests/fuzz/$name.dict"
    # -max_len: case lines, schemas and headers are short; longer inputs
    # mostly cost time. -timeout: seconds per input before it is a hang.
    cmd="build-fuzz/fuzz/fuzz_$name $limit $dict -max_len=4096 -timeout=10 -rss_limit_mb=2048"
    cmd="$cmd -print_final_stats=1 -artifact_prefix=build-fuzz/artifacts/$name- $* $corpus tests/fuzz/$name"
    printf '%s\t%s\n' "fuzz_$name" "$cmd" >>"$logs/list"
done
pool_run "$logs/list" "$logs" "$(pool_jobs)"
failed=""
for name in $names; do
    log=$(pool_log "$logs" "fuzz_$name").log
    echo "=== fuzz_$name $limit $*"
    if [ "$(cat "$(pool_log "$logs" "fuzz_$name").rc" 2>/dev/null)" = 0 ]; then
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
        echo "fuzz_$name: ${execs:-?} inputs, no crash ($(ls "build-fuzz/corpus/$name" | wc -l) in its corpus)"
    else
        tail -40 "$log"
        echo "fuzz_$name: FAILED (full log: $log; input: build-fuzz/artifacts/$name-*)"
        failed="$failed $name"
    fi
done
if [ -n "$failed" ]; then
    echo "fuzz: FAILED:$failed" >&2
    exit 1
fi
echo "fuzz: every harness ran clean"
