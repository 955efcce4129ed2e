#!/bin/sh
# `ninja coverage`: the gcov build (build-cov/, tests/configs.sh), every
# unit test, every tests/ci script, every third case of the default suite
# and a regeneration of its goldens, then gcovr: HTML and Cobertura
# XML under reports/coverage/, and line and branch coverage of src/ and of
# kernels/ on the console.
#
# The build's programs have _exit() wrapped (tests/cov_exit.c) so the
# runner's forked workers count. kvgen ran during the build, before the
# counts were cleared; it runs once more here, into a scratch folder that
# must come out identical to the build's (generation is deterministic).
#
# Exit status: non-zero when a test or the suite failed (the reports are
# written anyway) or when line coverage of src/ is below KV_COV_MIN percent
# (default 90, the target).
set -eu
min=${KV_COV_MIN:-90}
out=reports/coverage
bdir=build-cov

sh tests/configs.sh cov everything
# The OpenCL plugin (kernels/opencl) stays out of this run: PoCL JITs its
# kernels with LLVM and runs them on its own thread pool, which this
# instrumentation cannot see into (and would slow many times over); its
# rows are ninja test's. Every other plugin of $bdir/backends still loads.
KV_BACKEND_PATH=$(ls "$bdir"/backends/*.so | grep -v '/libkv_opencl\.so$' | paste -sd: -)
export KV_BACKEND_PATH
find "$bdir" -name '*.gcda' -delete

status=0
echo "=== $bdir/kvgen"
rm -rf "$bdir/gen-again"
"$bdir/kvgen" --schema kernels/ops.schema --accel kernels/accel.conf --out "$bdir/gen-again" &&
    diff -r -x kvrun_help.c "$bdir/gen" "$bdir/gen-again" || status=1 # kvrun_help.c is help_to_c.sh's, not kvgen's
KVRUN=$bdir/kvrun sh tests/units.sh "$bdir/tests" || status=1
# Every third case of the suite (interleaved over every case file, so every
# op and check is in it): measured on this build, the whole suite added 0.4
# points of src/ lines to what the tests and scripts below reach, the
# third 0.2 of them, at a third of the time.
echo "=== $bdir/kvrun cases/ --shard=1/3"
"$bdir/kvrun" cases/ --shard=1/3 --report-dir="$bdir/suite-report" || status=1
# The oneDNN accel target over the accel twins of the ops its kernels
# and its tolerance overrides cover (matmul, norms, softmax, sum): the
# accel paths onto a second plugin. The whole suite against it is ninja
# test's; at -O0 it cost minutes.
echo "=== $bdir/kvrun cases/accel.case --accel-target=onednn (its ops)"
"$bdir/kvrun" cases/accel.case --accel-target=onednn \
    --filter='re:^(mm|bmm|addmm|_softmax|native_layer_norm|sum\.dim_IntList)\(' \
    --report-dir="$bdir/suite-report-onednn" >/dev/null || status=1
# kvrun as CI drives it (exit codes, baselines, shards, merges, dumps) and
# against each hostile plugin: the runner's error paths count too.
# The scripts pin their own backends (tests/ci/lib.sh: SIM of the same
# build unless KV_BACKEND_PATH is set), so the suite's list must not leak
# into them: their row counts assume SIM alone.
unset KV_BACKEND_PATH
# Two or more at a time (tests/pool.sh), the longest first: each script is
# mostly one kvrun after another.
. tests/pool.sh
jobs=$(pool_jobs)
logs=$bdir/ci-logs
rm -rf "$logs" && mkdir -p "$logs"
: >"$logs/list"
long="tests/ci/shard_merge.sh tests/ci/progress.sh tests/ci/accuracy_report.sh"
for script in $long tests/ci/*.sh; do
    case $(basename "$script") in
    # lib.sh is not a test; install.sh installs the normal build (build/),
    # not this one; generated_kernels.sh drives the OpenCL plugin, which
    # this build leaves out (above); textbook.sh and stable_rows.sh rerun
    # the suite's own paths with another plugin or a forced variant, tens
    # of times over, for minutes at -O0. ninja test runs all four.
    lib.sh | install.sh | generated_kernels.sh | textbook.sh | stable_rows.sh) continue ;;
    esac
    grep -q "	env KVRUN=$bdir/kvrun sh $script\$" "$logs/list" ||
        printf '%s\t%s\n' "$(basename "$script" .sh)" "env KVRUN=$bdir/kvrun sh $script" >>"$logs/list"
done
pool_run "$logs/list" "$logs" "$jobs"
while IFS='	' read -r name cmd; do
    f=$(pool_log "$logs" "$name")
    echo "=== ${cmd#env } ($(cat "$f.secs" 2>/dev/null || echo '?') s)"
    [ "$(cat "$f.rc" 2>/dev/null)" = 0 ] || { status=1; tail -20 "$f.log"; }
done <"$logs/list"
# The hostile plugins alone: their load probes and hang detectors have
# timeouts of a few seconds, which -O0 code beside another script can miss.
echo "=== KVRUN=$bdir/kvrun sh tests/test_hostile.sh"
KVRUN=$bdir/kvrun sh tests/test_hostile.sh >"$logs/test_hostile.log" 2>&1 || { status=1; tail -20 "$logs/test_hostile.log"; }
# The exact golden generator runs only when goldens are recorded: every
# third case of the suite regenerated into a scratch copy of the store (it
# must come out equal to golden/: -O0 code computing what -O2 code
# computed; every op has cases in each third, and the whole store at -O0
# took minutes, which tests/golden_truth.sh and tests/cross_golden.sh
# already spend at -O2 and on aarch64), and one file again with the
# recomputation check on at a low precision, so its code counts too.
echo "=== $bdir/kvrun cases/ --regen-golden --shard=1/3"
rm -rf "$bdir/golden-regen" && mkdir -p "$bdir/golden-regen" && cp -r golden "$bdir/golden-regen/store"
"$bdir/kvrun" cases/ --regen-golden --shard=1/3 --golden-dir="$bdir/golden-regen/store" \
    --report-dir="$bdir/golden-regen/report" >"$bdir/golden-regen/log" 2>&1 || status=1
diff -r golden "$bdir/golden-regen/store" >/dev/null || { echo "coverage: the regenerated store differs from golden/"; status=1; }
KV_EXACT_VERIFY=512 "$bdir/kvrun" cases/unary.case cases/norm.case --regen-golden \
    --golden-dir="$bdir/golden-regen/store" --report-dir="$bdir/golden-regen/report" >/dev/null 2>&1 || status=1

rm -rf "$out"
mkdir -p "$out"
# One pass over the gcov data into a tracefile, then one filtered report
# per question (gcovr re-reads the tracefile, not the .gcda files).
gcovr -j "$jobs" -r . --object-directory "$bdir" -f 'src/' -f 'kernels/' \
    --exclude-unreachable-branches --json "$bdir/coverage.json" >/dev/null
gcovr -a "$bdir/coverage.json" --html-details "$out/index.html" --cobertura "$out/coverage.xml" >/dev/null
summary() {
    # "lines: 93.1% (12345 out of 13260)" and the same for branches.
    gcovr -a "$bdir/coverage.json" -f "$1" --print-summary -o /dev/null | sed -n 's/^\(lines\|branches\): /\1 /p'
}
src_counts=""
for part in src/ kernels/; do
    s=$(summary "$part")
    echo "$s" | sed "s#^#coverage $part #"
    [ "$part" = src/ ] && src_counts=$(echo "$s" | sed -n 's/^lines .*(\([0-9]*\) out of \([0-9]*\)).*/\1 \2/p')
done
echo "coverage: reports in $out/index.html and $out/coverage.xml"

# The target is checked on the counts, not on gcovr's rounded percentage.
if ! echo "$src_counts" | awk -v m="$min" 'NF == 2 && $2 > 0 { ok = 100 * $1 >= m * $2 } END { exit !ok }'; then
    echo "coverage: line coverage of src/ ($src_counts lines) is below the target of $min%" >&2
    status=1
fi
exit $status
