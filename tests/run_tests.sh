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
for src in tests/test_*.c; do
    name=$(basename "$src" .c)
    bin="$dir/$name"
    count=$((count + 1))
    echo "=== $name"
    if [ ! -x "$bin" ]; then
        echo "run_tests: $bin was not built" >&2
        failed="$failed $name"
    elif ! "$bin"; then
        failed="$failed $name"
    fi
done
if [ "$count" -eq 0 ]; then
    echo "run_tests: no tests/test_*.c found" >&2
    exit 1
fi

# The layering check (README "Layers"), as one more program.
count=$((count + 1))
echo "=== layers"
sh tests/test_layers.sh || failed="$failed layers"

# The hostile plugins (tests/plugins/hostile/): each fault reported with
# its status, backend and op; rows not detected yet print PENDING.
count=$((count + 1))
echo "=== hostile plugins"
sh tests/test_hostile.sh || failed="$failed hostile"

# The bug zoo (tests/plugins/zoo/): each numerically wrong plugin caught
# by the suite, its FAIL row naming the property broken.
count=$((count + 1))
echo "=== bug zoo"
sh tests/test_zoo.sh || failed="$failed zoo"

# Bringing up a backend (README "Bringing up your backend"): a copy of
# kernels/sim built out of tree with build/kvsuite.pc, run as a backend.
count=$((count + 1))
echo "=== bring-up"
sh tests/test_bringup.sh || failed="$failed bringup"

# Partial backends (docs/bringup.md, issue 21): hello_backend, a four-op
# plugin and half SIM over the whole suite, as a backend and as the accel
# target, get exactly their own rows; declared support's rules.
count=$((count + 1))
echo "=== partial backends"
sh tests/test_partial.sh || failed="$failed partial"
count=$((count + 1))
echo "=== declared support"
sh tests/test_declared.sh || failed="$failed declared"

# The CLI script tests (exit codes, baselines, merges, shards, live
# references, dumps): each tests/ci/*.sh but lib.sh is one more program.
for script in tests/ci/*.sh; do
    [ "$(basename "$script")" = lib.sh ] && continue
    count=$((count + 1))
    echo "=== $script"
    sh "$script" || failed="$failed $(basename "$script" .sh)"
done

# The suite itself, as one more program: every case file against the
# committed golden store (reports go under build/, not into reports/).
count=$((count + 1))
echo "=== kvrun cases/"
if ! build/kvrun cases/ --report-dir="$dir/../suite-report"; then
    failed="$failed kvrun-suite"
fi
# The green suite's report.html stays small (issue 13: it was 12 MB); the
# full row list is results.jsonl's job.
count=$((count + 1))
echo "=== report.html size"
size=$(wc -c <"$dir/../suite-report/report.html")
echo "report.html: $size bytes (limit 1048576)"
[ "$size" -le 1048576 ] || failed="$failed report-html-size"
# The suite's junit.xml as CI systems take it (docs/ci.md): valid against
# the Jenkins xUnit plugin's junit-10.xsd, at most 10 MB (GitLab takes 30
# MB a file; it was 34 MB).
count=$((count + 1))
echo "=== junit.xml: junit-10.xsd and size"
size=$(wc -c <"$dir/../suite-report/junit.xml")
echo "junit.xml: $size bytes (limit 10000000)"
if [ "$size" -gt 10000000 ] || ! xmllint --noout --schema tests/junit-10.xsd "$dir/../suite-report/junit.xml"; then
    failed="$failed junit-xml"
fi

# The HTML reports in headless Chromium (tests/html_render.sh): the green
# suite's report.html, a failing run's (a plugin with a wrong kernel) and
# a perf.html: each within its size and render-time budget, with nothing
# on the browser's console. Chromium is one of .ci/install-deps.sh's
# packages, so CI gates on this.
count=$((count + 1))
echo "=== HTML reports in headless Chromium"
build/kvrun --backend=build/tests/dump-plugin/libwrong_neg.so cases/unary.case -q \
    --report-dir="$dir/../failing-report" >/dev/null 2>&1
fail_rc=$?
if [ "$fail_rc" -ne 1 ] ||
    ! build/kvrun --mode=perf --op=add.Tensor,exp --dtype=f32 --shape=65536 --perf-reps=3 \
        --report-dir="$dir/../perf-report" >/dev/null ||
    ! sh tests/html_render.sh "$dir/../suite-report/report.html" "$dir/../failing-report/report.html" \
        "$dir/../perf-report/perf.html"; then
    [ "$fail_rc" -eq 1 ] || echo "html: the failing run exited $fail_rc, not 1"
    failed="$failed html-render"
fi

# Every golden against an independent recomputation at 4096 bits, and the
# committed store against its regeneration (tests/golden_truth.sh).
count=$((count + 1))
echo "=== golden truth"
if ! sh tests/golden_truth.sh "$dir/../golden-truth"; then
    failed="$failed golden-truth"
fi

# The suite with the oneDNN plugin as the accel target: every check on a
# vendor library's kernels (README "The oneDNN backend").
count=$((count + 1))
echo "=== kvrun cases/ --accel-target=onednn"
if ! build/kvrun cases/ --require-backend=onednn --accel-target=onednn --report-dir="$dir/../suite-report-onednn"; then
    failed="$failed kvrun-onednn-accel"
fi

# The suite with the OpenCL plugin as the accel target: every check on
# kernels generated and built by a driver at run time, in device memory
# (kernels/opencl/README.md).
count=$((count + 1))
echo "=== kvrun cases/ --accel-target=opencl"
if ! build/kvrun cases/ --require-backend=opencl --accel-target=opencl --report-dir="$dir/../suite-report-opencl"; then
    failed="$failed kvrun-opencl-accel"
fi

# The docs' generated sections (README's figures, the kvrun option list,
# the failing-run example) against what the two suite runs above printed,
# and every link in README.md and docs/ (src/tools/docs_sections.py).
count=$((count + 1))
echo "=== docs: generated sections and links"
if ! python3 src/tools/docs_sections.py check --suite="$dir/../suite-report" --accel="$dir/../suite-report-onednn" \
    --opencl="$dir/../suite-report-opencl"; then
    failed="$failed docs"
fi

# The accel twins (cases/accel.case) again with the other checks under the
# seed gate and with the kill switch set; the fastpath check runs both
# gates every time (README "The accel device in the runner").
for setting in KV_REDISPATCH_GATE=seed KV_NO_REDISPATCH=1; do
    count=$((count + 1))
    echo "=== $setting kvrun cases/accel.case"
    if ! env "$setting" build/kvrun cases/accel.case --report-dir="$dir/../suite-report-${setting%%=*}"; then
        failed="$failed kvrun-accel-$setting"
    fi
done

if [ -n "$failed" ]; then
    echo "FAILED:$failed ($count test programs)"
    exit 1
fi
echo "all $count test programs passed"
