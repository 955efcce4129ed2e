#!/bin/sh
# The bug zoo (`ninja test`; docs/diagnosis.md): each plugin of
# build/tests/plugins/zoo/ (tests/plugins/zoo/*.c) has one numerically
# wrong kernel. The default suite (cases/, filtered to the plugin's own
# ops for speed: rows of other ops are not the plugin's) must catch it:
# kvrun exits non-zero and results.jsonl has a FAIL row under the
# plugin's name whose message carries the expected diagnosis.
#
# Usage: sh tests/test_zoo.sh [PLUGIN-GLOB]   (from the repository root)
set -u
kvrun=${KVRUN:-build/kvrun}
plugins=$(dirname "$kvrun")/tests/plugins/zoo

# PLUGIN|FILTER|DIAGNOSIS (a fixed string the FAIL row's message must hold)
write_table() {
cat >"$T/table" <<'ROWS'
rtz|mul.Tensor(*|rounds toward zero (
half_away|add.Tensor(*|rounds half away from zero (
double_round|_to_copy(*|double rounding (
ftz|mul.Tensor(*|flushes subnormals (
daz|add.Tensor(*|treats subnormal inputs as zero (
tail4|add.Tensor(*|wrong only in the last numel % 4 elements
tail8|add.Tensor(*|wrong only in the last numel % 8 elements
tail16|add.Tensor(*|wrong only in the last numel % 16 elements
stride0|add.Tensor(*|nondeterministic: two identical calls gave different results: likely cause: wrong only for stride-0 inputs
transposed|add.Tensor(*|wrong only for transposed inputs
offset|add.Tensor(*|wrong only for storage-offset inputs
nan|maximum(*|NaN not propagated (
signed_zero|mul.Tensor(*|sign of zero wrong (
softmax_overflow|_softmax(*|overflows in an intermediate (
wrong_dtype|mul.Tensor(*|wrong dtype: compare: dtype differs
alpha|add.Tensor(*|ignores alpha (
alias_out|add.Tensor(*|shares storage with input 0, but the reference returns a new tensor
race|mul.Tensor(*|kernel of zoo_race is not thread-safe: called from 3 threads at once
alias_inplace|mm.out(*|wrong only where out aliases input
narrow_acc|sum.dim_IntList(*|accumulates in f16, not f32 (
one_pass_var|native_layer_norm(*|variance by E[x^2] - E[x]^2 (
chunk|mul.Tensor(*|wrong only every 4096 elements (16 of the 17 elements at 0 + j*4096 wrong
bcast_col|add.Tensor(*[4,1]*|output 0: 12 of 20 elements differ
pow_neg|pow.Tensor_Scalar(*|sign wrong (14 of 64: each the truth negated)
i32_sum|sum.dim_IntList(*|wraps to 32 bits (13 of 65
empty_mean|mean.dim(*|a number where the op over no elements is NaN (
ln_eps|native_layer_norm(*|10 of 36 elements differ (max abs err 1.16825e-05, max ulp 3213)
tanh_big|tanh(*|overflows in an intermediate (10 of 64
mm_ld|mm(*|11 of 12 elements differ (max abs err 38, max ulp 1.07794e+09 where the signs agree; 2 with the sign wrong)
ROWS
}

# One row: the run, then its verdict in $T/<plugin>.verdict.
one() {
    p=$1 filter=$2 want=$3
    dir="$T/$p"
    "$kvrun" -q --backend="$plugins/libzoo_$p.so" cases/ --filter="$filter" --report-dir="$dir" >"$dir.log" 2>&1
    rc=$?
    if [ "$rc" -eq 0 ]; then
        echo "FAIL $p: kvrun exited 0: the bug was not caught" >"$T/$p.verdict"
        return
    fi
    rows=$(jq -r --arg b "zoo_$p" --arg w "$want" \
        'select(.status == "FAIL" and .backend == $b and (.message | contains($w))) | .case_id + " (" + .check + ")"' \
        "$dir/results.jsonl" 2>/dev/null)
    if [ -z "$rows" ]; then
        echo "FAIL $p: no FAIL row of zoo_$p says '$want'; its FAIL rows:" >"$T/$p.verdict"
        jq -r --arg b "zoo_$p" 'select(.status == "FAIL" and .backend == $b) | "     | " + .case_id + ": " + .message[0:300]' \
            "$dir/results.jsonl" 2>/dev/null | head -5 >>"$T/$p.verdict"
        return
    fi
    # The same words in the run's other reports (failures.txt and the
    # console list only the first failures, the error check's first).
    for f in junit.xml report.html; do
        if ! grep -qF -- "$want" "$dir/$f" 2>/dev/null; then
            echo "FAIL $p: $f does not say '$want'" >"$T/$p.verdict"
            return
        fi
    done
    n=$(printf '%s\n' "$rows" | wc -l)
    msg=$(jq -r --arg b "zoo_$p" --arg w "$want" \
        'select(.status == "FAIL" and .backend == $b and (.message | contains($w))) | .message' "$dir/results.jsonl" |
        head -1 | grep -oF -- "$want" | head -1)
    { echo "ok   $p: $n row(s) say '$msg', first $(printf '%s\n' "$rows" | head -1)"; } >"$T/$p.verdict"
}

# `--one PLUGIN FILTER DIAGNOSIS`: one row, run by xargs below (T set).
if [ "${1:-}" = "--one" ]; then
    one "$2" "$3" "$4"
    exit 0
fi

only=${1:-*}
T=$(mktemp -d "${TMPDIR:-/tmp}/kv-zoo.XXXXXX")
trap 'rm -rf "$T"' EXIT
export T KVRUN="$kvrun"
write_table
count=0
while IFS='|' read -r p filter want; do
    case "$p" in $only) ;; *) continue ;; esac
    count=$((count + 1))
    printf '%s\0%s\0%s\0' "$p" "$filter" "$want"
done <"$T/table" >"$T/jobs"
if [ "$count" -eq 0 ]; then
    echo "test_zoo: no plugin matches '$only'" >&2
    exit 1
fi
# Two at a time: each run forks its own workers, the machine is small.
xargs -0 -n 3 -P 2 sh "$0" --one <"$T/jobs"
nfail=0
while IFS='|' read -r p filter want; do
    case "$p" in $only) ;; *) continue ;; esac
    if [ ! -f "$T/$p.verdict" ]; then
        echo "FAIL $p: no verdict (the run did not finish)"
        nfail=$((nfail + 1))
        continue
    fi
    cat "$T/$p.verdict"
    grep -q '^FAIL' "$T/$p.verdict" && nfail=$((nfail + 1))
done <"$T/table"
if [ "$nfail" -ne 0 ]; then
    echo "test_zoo: $nfail of $count plugins not caught with their diagnosis"
    exit 1
fi
echo "test_zoo: all $count plugins caught with their diagnosis"
