#!/bin/sh
# The generated-kernel workflow (docs/generated-kernels.md) on a real
# runtime-compiled backend: the OpenCL plugin generates its kernels per
# (op, dtype, vector width) and the driver builds them at run time;
# KV_OPENCL_GENERATOR picks the generator's version. Version 1 is run and
# kept; each version 2 plants one regression, and `--compare` must name
# exactly it, with the right transition:
#   v2-tail8     a tail bug at vector width 8        -> regression (PASS -> FAIL) on /vec8
#   v2-rounding  f16 stores truncate                 -> regression on the f16 rows
#   v2-drop-f16  no f16 kernels any more             -> support-regression (PASS -> SKIP)
#   v2-slow-wg   work-groups of one work-item        -> perf-regression (perf mode)
#   v2-drift     other bits, within the tolerance    -> accuracy-drift, exit 0
. tests/ci/lib.sh
OCL=$(dirname "$KVRUN")/backends/libkv_opencl.so
[ -f "$OCL" ] || { bad "$OCL not built (ninja builds it)"; finish; }
unset KV_BACKEND_PATH
# The generator's own cases: the vector tail (13 and 4099 are 5 and 3 past
# a multiple of 8) with alpha != 1, and f16 results that round. Not in the
# golden store: the reference runs live.
cat >"$T/gen.case" <<'CASES'
--op=add.Tensor --dtype=f32 --shape=13,4099 --args=alpha=2.5 --fill=real
--op=mul.Tensor --dtype=f16 --shape=64x64 --fill=real
CASES
run() { # run VERSION DIR [ARGS...]
    g=$1 d=$2
    shift 2
    env KV_OPENCL_GENERATOR="$g" $KVRUN --backend="$OCL" "$T/gen.case" --golden=live -q --report-dir="$T/$d" "$@"
}
kinds() { # the (kind, check) pairs compare.jsonl names, one per line
    sed -n 's/.*"kind":"\([a-z-]*\)","case_id":"\([^"]*\)","check":"\([^"]*\)".*/\1 \3 \2/p' "$T/$1/compare.jsonl" | sort -u
}
expect 0 "" "v1 passes and is kept" -- run v1 v1
expect 0 "0 regressions" "v1 again: nothing changed" -- run v1 v1b --compare="$T/v1"

expect 1 "regression" "v2-tail8 regresses" -- run v2-tail8 tail --compare="$T/v1"
kinds tail >"$T/k"
grep -q "^regression variants:opencl/vec8 add.Tensor(dtype=f32,shape=\[13\]" "$T/k" &&
    ! grep -v "add.Tensor(dtype=f32" "$T/k" | grep -q . && ! grep -q "opencl/vec[14] " "$T/k" &&
    ok "v2-tail8: PASS -> FAIL on the width-8 kernel's add rows, nothing else" ||
    { bad "v2-tail8: not named as a vec8 regression alone"; sed 's/^/     | /' "$T/k"; }

expect 1 "regression" "v2-rounding regresses" -- run v2-rounding rounding --compare="$T/v1"
kinds rounding >"$T/k"
grep -q "^regression variants:opencl/vec8 mul.Tensor(dtype=f16" "$T/k" && ! grep -q "dtype=f32" "$T/k" &&
    ok "v2-rounding: PASS -> FAIL on the f16 rows only" || { bad "v2-rounding: not named on f16"; sed 's/^/     | /' "$T/k"; }

expect 1 "3 support" "v2-drop-f16 is a support regression (one per width)" -- run v2-drop-f16 drop --compare="$T/v1"
kinds drop >"$T/k"
grep -q "^support-regression variants:opencl/vec8 mul.Tensor(dtype=f16" "$T/k" && ! grep -q "^regression" "$T/k" &&
    ok "v2-drop-f16: PASS -> SKIP on the f16 kernels' rows, no failure" ||
    { bad "v2-drop-f16: not a support regression"; sed 's/^/     | /' "$T/k"; }

expect 0 "0 regressions" "v2-drift passes" -- run v2-drift drift --compare="$T/v1"
kinds drift >"$T/k"
grep -q "^accuracy-drift variants:opencl/vec8 add.Tensor" "$T/k" && ! grep -q "regression" "$T/k" &&
    ok "v2-drift: accuracy drift on add, not a failure" || { bad "v2-drift: not drift"; sed 's/^/     | /' "$T/k"; }
expect 1 "identity" "v2-drift under --require-identical=opencl is a regression" -- \
    $KVRUN --compare "$T/v1" "$T/drift" --require-identical=opencl --report-dir="$T/drift-id"

# Speed: perf mode keeps every repetition; the work-group that makes each
# kernel several times slower is a significant regression over a 50%
# threshold (far above this machine's noise between identical runs).
perf() {
    env KV_OPENCL_GENERATOR="$1" $KVRUN --mode=perf --backend="$OCL" --op=neg --dtype=f32 --shape=262144 \
        --perf-reps=7 --report-dir="$T/$2"
}
expect 0 "" "perf mode, v1" -- perf v1 p1
expect 0 "" "perf mode, v2-slow-wg" -- perf v2-slow-wg p2
expect 1 "perf)" "v2-slow-wg: the comparison exits 1" -- \
    $KVRUN --compare "$T/p1" "$T/p2" --perf-threshold=0.5 --report-dir="$T/pc"
grep -q '^| \*\*perf-regression\*\* | neg(dtype=f32,shape=\[262144\]) | opencl | vec8 ' "$T/pc/compare.md" &&
    ok "v2-slow-wg: a perf regression of the OpenCL kernels" || { bad "v2-slow-wg: no perf regression named"; grep perf "$T/pc/compare.md" | head -5 | sed 's/^/     | /'; }
finish
