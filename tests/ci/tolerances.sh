#!/bin/sh
# Tolerance overrides as data (docs/checks.md "Tolerance overrides"):
# --tolerances=FILE widens a BOUND row of the named backend, and only
# that; meta.json and the run header name the override and count its
# rows; a malformed line exits 2 naming FILE:LINE. The bug zoo's
# zoo_alpha drops add.Tensor's alpha: with alpha=2 its variants row is off
# by |other| (at most 4 on this fill), past gamma_2*(|a|+|alpha||b|).
. tests/ci/lib.sh
ZOO=$(dirname "$KVRUN")/tests/plugins/zoo/libzoo_alpha.so
KV_BACKEND_PATH=$ZOO
export KV_BACKEND_PATH
CASE="--op=add.Tensor --dtype=f32 --shape=4x5 --args=alpha=2 --fill=exact -q"
expect 1 "FAIL  add.Tensor(dtype=f32,shape=[4,5],args=alpha=2,fill=exact) variants:zoo_alpha" \
    "without an override the row fails" -- $KVRUN $CASE --report-dir="$T/r0"
# The slack: the largest error is |other| <= 4 on this fill; 8 covers it.
printf '# a comment\n\nadd.*  f32  variants*  zoo_alpha  abs+8  the zoo kernel drops alpha: off by |other| <= 4 here\n' \
    >"$T/ok.txt"
expect 0 "PASS 9, FAIL 0" "the override loosens that row" -- $KVRUN $CASE --tolerances="$T/ok.txt" --report-dir="$T/r1"
expect 0 "== tolerance overrides: $T/ok.txt: 1 override, 1 row widened" "the run header names the file" -- \
    $KVRUN $CASE --tolerances="$T/ok.txt" --report-dir="$T/r1"
expect 0 "with override $T/ok.txt:3 (zoo_alpha add.*): abs+8: the zoo kernel drops alpha" \
    "the row's message names the override and its reason" -- cat "$T/r1/results.jsonl"
expect 0 "1" "meta.json: the override, its reason, the rows it widened" -- \
    jq -e '.tolerance_overrides[0] | select(.source == "'"$T"'/ok.txt:3" and .rule == "abs+8" and
        (.reason | startswith("the zoo kernel")) and .backend == "zoo_alpha") | .rows' "$T/r1/meta.json"
# Too small a slack, another dtype, a check glob matching no row: still FAIL.
printf 'add.Tensor f32 variants* zoo_alpha abs+0.5 too small\n' >"$T/small.txt"
expect 1 "FAIL  add.Tensor" "a slack under the error widens too little" -- \
    $KVRUN $CASE --tolerances="$T/small.txt" --report-dir="$T/r2"
printf 'add.Tensor f64 variants* zoo_alpha abs+8 another dtype\nadd.Tensor f32 golden zoo_alpha abs+8 another check\n' \
    >"$T/other.txt"
expect 1 "FAIL  add.Tensor" "rows of another dtype or check leave it alone" -- \
    $KVRUN $CASE --tolerances="$T/other.txt" --report-dir="$T/r3"
# Malformed lines: exit 2 naming FILE:LINE, before any case runs.
printf '# ok\nadd.Tensor f32 variants* nosuch abs+8 r\n' >"$T/b1.txt"
expect 2 "$T/b1.txt:2: unknown backend 'nosuch' (the loaded plugins: zoo_alpha)" "an unknown backend" -- \
    $KVRUN $CASE --tolerances="$T/b1.txt" --report-dir="$T/r4"
printf 'add.Tensor f32 variants* zoo_alpha ulp+8 r\n' >"$T/b2.txt"
expect 2 "$T/b2.txt:1: bad rule 'ulp+8'" "a bad rule" -- \
    $KVRUN $CASE --tolerances="$T/b2.txt" --report-dir="$T/r4"
printf '\n\nadd.Tensor f32 variants* zoo_alpha abs+8\n' >"$T/b3.txt"
expect 2 "$T/b3.txt:3: no reason" "a missing reason" -- \
    $KVRUN $CASE --tolerances="$T/b3.txt" --report-dir="$T/r4"
expect 2 "cannot read '$T/none.txt'" "a missing file" -- \
    $KVRUN $CASE --tolerances="$T/none.txt" --report-dir="$T/r4"
expect 2 "--tolerances needs a value" "an empty value" -- $KVRUN $CASE --tolerances= --report-dir="$T/r4"
# A plugin's own file, PLUGIN.tolerances beside PLUGIN.so, loads with it.
mkdir "$T/pl"
cp "$ZOO" "$T/pl/libzoo_alpha.so"
cp "$T/ok.txt" "$T/pl/libzoo_alpha.tolerances"
expect 0 "== tolerance overrides: $T/pl/libzoo_alpha.tolerances: 1 override, 1 row widened" \
    "a plugin's own file loads with it" -- env KV_BACKEND_PATH="$T/pl/libzoo_alpha.so" $KVRUN $CASE --report-dir="$T/r5"
cp "$T/b1.txt" "$T/pl/libzoo_alpha.tolerances"
expect 2 "$T/pl/libzoo_alpha.tolerances:2: unknown backend 'nosuch' (the loaded plugins: zoo_alpha)" \
    "a plugin's file names only that plugin" -- env KV_BACKEND_PATH="$T/pl/libzoo_alpha.so" $KVRUN $CASE --report-dir="$T/r6"
finish
