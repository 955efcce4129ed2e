#!/bin/sh
# Runs every unit-test binary in the given folder that has a source file
# tests/<name>.c (so a binary left over from a removed test never runs),
# shows each one's CMocka output, and ends with one summary line. Exits
# non-zero if any binary failed (a test failure, a crash) or none ran.
# Last, it runs the whole case suite (build/kvrun cases/), and the accel
# part of it again under the seed gate and with the kill switch set.
dir=${1:?usage: run_tests.sh BUILD_TEST_DIR}
failed=""
count=0
# run NAME CMD...: one more test program; its time goes on its own line so
# a CI log shows where the minutes go.
run() {
    name=$1
    shift
    count=$((count + 1))
    echo "=== $name"
    t=$(date +%s)
    "$@" || failed="$failed $name"
    echo "=== $name: $(($(date +%s) - t)) s"
}
# The unit tests, several at a time (tests/units.sh: KV_TEST_JOBS), each
# one a program of the count below.
. tests/pool.sh
sh tests/units.sh "$dir"
units_rc=$?
units_failed=""
while IFS='	' read -r name _; do
    count=$((count + 1))
    [ "$(cat "$(pool_log "$dir/../units-logs" "$name").rc" 2>/dev/null)" = 0 ] || units_failed="$units_failed $name"
done <"$dir/../units-logs/list"
if [ "$count" -eq 0 ]; then
    echo "run_tests: no unit test ran" >&2
    exit 1
fi
# A program that was not built is in no list: units.sh's status says so.
[ "$units_rc" -eq 0 ] || [ -n "$units_failed" ] || units_failed=" units"
failed="$units_failed"

# The layering check (README "Layers"), as one more program.
run layers sh tests/test_layers.sh

# The hostile plugins (tests/plugins/hostile/): each fault reported with
# its status, backend and op; rows not detected yet print PENDING.
run hostile sh tests/test_hostile.sh

# The bug zoo (tests/plugins/zoo/): each numerically wrong plugin caught
# by the suite, its FAIL row naming the property broken.
run zoo sh tests/test_zoo.sh

# Bringing up a backend (README "Bringing up your backend"): a copy of
# kernels/sim built out of tree with build/kvsuite.pc, run as a backend.
run bringup sh tests/test_bringup.sh

# Partial backends (docs/bringup.md, issue 21): hello_backend, a four-op
# plugin and half SIM over the whole suite, as a backend and as the accel
# target, get exactly their own rows; declared support's rules.
run partial sh tests/test_partial.sh
run declared sh tests/test_declared.sh

# The CLI script tests (exit codes, baselines, merges, shards, live
# references, dumps): each tests/ci/*.sh but lib.sh is one more program.
for script in tests/ci/*.sh; do
    [ "$(basename "$script")" = lib.sh ] && continue
    run "$(basename "$script" .sh)" sh "$script"
done

# The suite itself, as one more program: every case file against the
# committed golden store (reports go under build/, not into reports/).
# Compressed, as `ninja run` writes it (src/tools/run_suite.sh).
run kvrun-suite build/kvrun cases/ --gzip-results --report-dir="$dir/../suite-report"
# The green suite's report.html stays small (issue 13: it was 12 MB); the
# full row list is results.jsonl's job.
report_html_size() {
    size=$(wc -c <"$dir/../suite-report/report.html")
    echo "report.html: $size bytes (limit 1048576)"
    [ "$size" -le 1048576 ]
}
run report-html-size report_html_size
# The suite's junit.xml as CI systems take it (docs/ci.md): valid against
# the Jenkins xUnit plugin's junit-10.xsd, at most 10 MB (GitLab takes 30
# MB a file; it was 34 MB).
junit_xml() {
    size=$(wc -c <"$dir/../suite-report/junit.xml")
    echo "junit.xml: $size bytes (limit 10000000)"
    [ "$size" -le 10000000 ] && xmllint --noout --schema tests/junit-10.xsd "$dir/../suite-report/junit.xml"
}
run junit-xml junit_xml

# The HTML reports in headless Chromium (tests/html_render.sh): the green
# suite's report.html, a failing run's (a plugin with a wrong kernel) and
# a perf.html: each within its size and render-time budget, with nothing
# on the browser's console. Chromium is one of .ci/install-deps.sh's
# packages, so CI gates on this.
html_render() {
    build/kvrun --backend=build/tests/dump-plugin/libwrong_neg.so cases/unary.case -q \
        --report-dir="$dir/../failing-report" >/dev/null 2>&1
    fail_rc=$?
    [ "$fail_rc" -eq 1 ] || { echo "html: the failing run exited $fail_rc, not 1"; return 1; }
    build/kvrun --mode=perf --op=add.Tensor,exp --dtype=f32 --shape=65536 --perf-reps=3 \
        --report-dir="$dir/../perf-report" >/dev/null &&
        sh tests/html_render.sh "$dir/../suite-report/report.html" "$dir/../failing-report/report.html" \
            "$dir/../perf-report/perf.html"
}
run html-render html_render

# Every golden against an independent recomputation at 4096 bits, and the
# committed store against its regeneration (tests/golden_truth.sh).
run golden-truth sh tests/golden_truth.sh "$dir/../golden-truth"

# The suite's accel cases with the oneDNN plugin as the accel target: every
# check on a vendor library's kernels (README "The oneDNN backend"). A cpu
# case does not touch the accel target: its rows would be kvrun-suite's,
# bit for bit (src/tools/run_suite.sh, as `ninja run` runs it).
run kvrun-onednn-accel build/kvrun cases/ --filter='*device=accel*' --require-backend=onednn --accel-target=onednn \
    --gzip-results --report-dir="$dir/../suite-report-onednn"

# The same accel cases with the OpenCL plugin as the accel target: every
# check on kernels generated and built by a driver at run time, in device
# memory (kernels/opencl/README.md).
run kvrun-opencl-accel build/kvrun cases/ --filter='*device=accel*' --require-backend=opencl --accel-target=opencl \
    --gzip-results --report-dir="$dir/../suite-report-opencl"

# What the three parts write in all (`ninja run` writes the same three
# folders): at most 30 MB, so that a CI job can keep them as artifacts
# (plain results.jsonl files made 64 MB; a whole ninja run once 165 MB).
reports_size() {
    kb=$(du -sk "$dir/../suite-report" "$dir/../suite-report-onednn" "$dir/../suite-report-opencl" |
        awk '{ s += $1 } END { print s }')
    echo "the three suite parts' reports: $kb KiB (limit 30000 KiB)"
    [ "$kb" -gt 0 ] && [ "$kb" -le 30000 ]
}
run reports-size reports_size

# The docs' generated sections (README's figures, the kvrun option list,
# the failing-run example) against what the two suite runs above printed,
# and every link in README.md and docs/ (src/tools/docs_sections.py).
run docs python3 src/tools/docs_sections.py check --suite="$dir/../suite-report" \
    --accel="$dir/../suite-report-onednn" --opencl="$dir/../suite-report-opencl"

# The accel twins (cases/accel.case) again with the other checks under the
# seed gate and with the kill switch set; the fastpath check runs both
# gates every time (README "The accel device in the runner").
for setting in KV_REDISPATCH_GATE=seed KV_NO_REDISPATCH=1; do
    run "kvrun-accel-${setting%%=*}" env "$setting" build/kvrun cases/accel.case \
        --report-dir="$dir/../suite-report-${setting%%=*}"
done

if [ -n "$failed" ]; then
    echo "FAILED:$failed ($count test programs)"
    exit 1
fi
echo "all $count test programs passed"
