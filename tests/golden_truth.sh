#!/bin/sh
# The golden store is the truth (issue 14): regenerates every golden into a
# scratch copy of golden/ with KV_EXACT_VERIFY=4096, so every floating
# element the exact generator computes is evaluated again at 4096 bits
# (the generator stops at 128-512) and its distance to that truth measured
# in ulps of its dtype (src/runner/golden/exact_verify.c); then the scratch
# store must equal the committed one byte for byte. Prints the counts per
# dtype; fails on any element farther than 0.5 ulp or any difference.
# Ops whose goldens are the reference's exact-in-double values (copies,
# views, selections; README "The golden store") are covered by the diff
# only.
set -u
out=${1:-build/golden-truth}
rm -rf "$out" && mkdir -p "$out" && cp -r golden "$out/store" || exit 1
KV_EXACT_VERIFY=4096 build/kvrun cases/ --regen-golden --golden-dir="$out/store" >"$out/log" 2>&1
rc=$?
sed -n '/^golden truth: every/,/^==/p' "$out/log" | grep -v '^=='
if [ $rc -ne 0 ]; then
    echo "golden_truth: the regeneration failed (see $out/log)"
    exit 1
fi
bad=$(sed -n 's/.* checked, *\([0-9][0-9]*\) farther than 0.5 ulp.*/\1/p' "$out/log" | awk '{s += $1} END {print s + 0}')
if [ "$bad" -ne 0 ]; then
    echo "golden_truth: $bad golden elements are farther than 0.5 ulp from the truth"
    exit 1
fi
if ! diff -r golden "$out/store" >"$out/diff" 2>&1; then
    echo "golden_truth: the committed golden store differs from its regeneration:"
    head -20 "$out/diff"
    exit 1
fi
echo "golden_truth: 0 elements farther than 0.5 ulp; the committed store equals its regeneration"
