#!/bin/sh
# The tolerance overrides are part of a run's fingerprint (docs/triage.md
# "Overrides in the fingerprint"): each file loaded (--tolerances=FILE and
# a plugin's PLUGIN.tolerances) by its name and content hash, so --merge
# refuses shards judged by different overrides, naming them, and
# --compare calls it a fingerprint mismatch; the same file under another
# folder is the same run.
. tests/ci/lib.sh
ZOO=$(dirname "$KVRUN")/tests/plugins/zoo/libzoo_alpha.so
KV_BACKEND_PATH=$ZOO
export KV_BACKEND_PATH
CASE="--op=add.Tensor --dtype=f32 --shape=4x5,3x4 --args=alpha=2 --fill=exact -q"
mkdir "$T/a" "$T/b"
printf 'add.*  f32  variants*  zoo_alpha  abs+8  the zoo kernel drops alpha: off by |other| <= 4 here\n' >"$T/a/tol.txt"
cp "$T/a/tol.txt" "$T/b/tol.txt"
printf 'add.*  f32  variants*  zoo_alpha  abs+16  the zoo kernel drops alpha: a wider slack\n' >"$T/wide.txt"
cp "$T/wide.txt" "$T/b/wide.txt"
expect 0 "PASS 9" "shard 1 with the override" -- $KVRUN $CASE --tolerances="$T/a/tol.txt" --shard=1/2 --report-dir="$T/s1"
expect 0 "" "shard 2 with the same file in another folder" -- \
    $KVRUN $CASE --tolerances="$T/b/tol.txt" --shard=2/2 --report-dir="$T/s2"
hash=$(jq -r '.fingerprint.options' "$T/s1/meta.json" | sed -n 's/.* tolerances=tol.txt#\([0-9a-f]*\).*/\1/p')
[ ${#hash} -eq 16 ] && ok "meta.json's fingerprint names the file and its hash ($hash)" ||
    bad "no tolerances=tol.txt#HASH in $(jq -r '.fingerprint.options' "$T/s1/meta.json")"
expect 0 "FAIL 0" "the same file's shards merge" -- $KVRUN --merge "$T/s1" "$T/s2" --report-dir="$T/m"
# Another slack: not one run.
expect 0 "" "shard 2 with another override file" -- \
    $KVRUN $CASE --tolerances="$T/wide.txt" --shard=2/2 --report-dir="$T/s3"
expect 2 "differ in the options: 'fastpath-gates=both golden=auto tolerances=tol.txt#$hash' vs 'fastpath-gates=both golden=auto tolerances=wide.txt#" \
    "--merge refuses shards with other overrides, naming them" -- $KVRUN --merge "$T/s1" "$T/s3" --report-dir="$T/m2"
# Same name, other content: refused too.
cp "$T/wide.txt" "$T/b/tol.txt"
expect 0 "" "shard 2 with tol.txt edited" -- $KVRUN $CASE --tolerances="$T/b/tol.txt" --shard=2/2 --report-dir="$T/s4"
expect 2 "tolerances=tol.txt#$hash' vs" "--merge refuses a file of the same name with other content" -- \
    $KVRUN --merge "$T/s1" "$T/s4" --report-dir="$T/m3"
# Without any override: refused as well.
expect 1 "" "a run without the override" -- $KVRUN $CASE --report-dir="$T/none"
expect 0 "" "the same run with it" -- $KVRUN $CASE --tolerances="$T/a/tol.txt" --report-dir="$T/with"
expect 0 "kvrun: compare: fingerprints differ:" "--compare names the overrides as a fingerprint mismatch" -- \
    $KVRUN --compare "$T/none" "$T/with"
grep -q "^options: '.*' -> '.* tolerances=tol.txt#$hash'" "$T/out" && ok "... in the options, with the file and its hash" ||
    bad "--compare does not name the file"
finish
