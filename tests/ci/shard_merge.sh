#!/bin/sh
# Shards on CI engines and merges that refuse mixing (README "Sharding on
# CI"): four shards of one file, each told its place the way its engine
# does (GitLab, Buildkite, a Kubernetes Indexed Job, KV_SHARD_INDEX as for
# a GitHub Actions matrix), merged, must give the unsharded run's totals;
# a shard of another case set, or of a run with other gates or another
# environment, is refused with the difference named.
. tests/ci/lib.sh
F=cases/backward.case
clean() { env -u CI_NODE_INDEX -u CI_NODE_TOTAL -u BUILDKITE_PARALLEL_JOB -u BUILDKITE_PARALLEL_JOB_COUNT \
    -u JOB_COMPLETION_INDEX -u KV_SHARD_INDEX -u KV_SHARD_TOTAL "$@"; }
expect 0 "" "the unsharded run" -- clean $KVRUN $F --report-dir="$T/all"
expect 0 "shard 1/4 (GitLab CI: CI_NODE_INDEX=1)" "GitLab: CI_NODE_INDEX=1 CI_NODE_TOTAL=4" -- \
    clean CI_NODE_INDEX=1 CI_NODE_TOTAL=4 $KVRUN $F --shard=auto --report-dir="$T/s1"
expect 0 "shard 2/4 (Buildkite: BUILDKITE_PARALLEL_JOB=1)" "Buildkite: BUILDKITE_PARALLEL_JOB=1 of 4" -- \
    clean BUILDKITE_PARALLEL_JOB=1 BUILDKITE_PARALLEL_JOB_COUNT=4 $KVRUN $F --shard=auto --report-dir="$T/s2"
expect 0 "shard 3/4 (Kubernetes Indexed Job: JOB_COMPLETION_INDEX=2)" "Kubernetes: JOB_COMPLETION_INDEX=2, --shard=auto/4" -- \
    clean JOB_COMPLETION_INDEX=2 $KVRUN $F --shard=auto/4 --report-dir="$T/s3"
expect 0 "shard 4/4 (KV_SHARD_INDEX: KV_SHARD_INDEX=4)" "GitHub matrix: KV_SHARD_INDEX=4 KV_SHARD_TOTAL=4" -- \
    clean KV_SHARD_INDEX=4 KV_SHARD_TOTAL=4 $KVRUN $F --shard=auto --report-dir="$T/s4"
expect 0 "merged from 4 report folders" "the four shards merge" -- \
    $KVRUN --merge "$T/s1" "$T/s2" "$T/s3" "$T/s4" --report-dir="$T/merged"
a=$(grep -c . "$T/all/results.jsonl")
m=$(grep -c . "$T/merged/results.jsonl")
[ "$a" = "$m" ] && ok "merged rows = unsharded rows ($m)" || bad "merged $m rows, unsharded $a"
# Errors: each names the variable.
expect 2 "no shard index in the environment" "--shard=auto with no engine" -- clean $KVRUN $F --shard=auto --list
expect 2 "give --shard=auto/N or KV_SHARD_TOTAL" "JOB_COMPLETION_INDEX without a total" -- \
    clean JOB_COMPLETION_INDEX=0 $KVRUN $F --shard=auto --list
expect 2 "CI_NODE_INDEX='': expected a whole number" "an empty engine variable" -- \
    clean CI_NODE_INDEX= CI_NODE_TOTAL=4 $KVRUN $F --shard=auto --list
expect 2 "CI_NODE_INDEX=5 is outside 1..4" "an index past the total" -- \
    clean CI_NODE_INDEX=5 CI_NODE_TOTAL=4 $KVRUN $F --shard=auto --list
expect 2 "KV_SHARD_TOTAL='x'" "a bad KV_SHARD_TOTAL" -- clean KV_SHARD_INDEX=1 KV_SHARD_TOTAL=x $KVRUN $F --shard=auto --list
expect 2 "but CI_NODE_TOTAL=4" "auto/N disagreeing with the engine" -- \
    clean CI_NODE_INDEX=1 CI_NODE_TOTAL=4 $KVRUN $F --shard=auto/3 --list
# Merges that refuse mixing.
expect 0 "" "shard 2/4 of another case set" -- $KVRUN cases/matmul.case --shard=2/4 --report-dir="$T/x2"
expect 2 "they differ in the case set" "a shard of another case set is refused" -- \
    $KVRUN --merge "$T/s1" "$T/x2" "$T/s3" "$T/s4" --report-dir="$T/m2"
expect 0 "" "shard 2/4 with --gate=seed" -- $KVRUN $F --shard=2/4 --gate=seed --report-dir="$T/g2"
expect 2 "they differ in the options: 'fastpath-gates=both golden=auto' vs 'fastpath-gates=seed golden=auto'" "a shard with other gates is refused" -- \
    $KVRUN --merge "$T/s1" "$T/g2" "$T/s3" "$T/s4" --report-dir="$T/m3"
expect 0 "" "shard 2/4 with KV_CPU_ISA=sse2" -- env KV_CPU_ISA=sse2 $KVRUN $F --shard=2/4 --report-dir="$T/e2"
expect 2 "they differ in the environment" "a shard with another environment is refused" -- \
    $KVRUN --merge "$T/s1" "$T/e2" "$T/s3" "$T/s4" --report-dir="$T/m4"
# Only the backend set differs (one more plugin, unavailable): refused, by
# that field (issue 22 item 6: the backends comparison has its own test).
SIMSO=$(dirname "$KVRUN")/backends/libkv_sim.so
expect 0 "" "shard 2/4 with one more backend" -- \
    $KVRUN $F --shard=2/4 --backend="$(dirname "$KVRUN")/tests/plugins/libunavailable.so" --backend="$SIMSO" --report-dir="$T/b2"
expect 2 "they differ in the backends:" "a shard run with another backend set is refused" -- \
    $KVRUN --merge "$T/s1" "$T/b2" "$T/s3" "$T/s4" --report-dir="$T/m5"
expect 0 '"fingerprint"' "meta.json holds the fingerprint" -- cat "$T/s1/meta.json"
# A plugin that loaded unavailable has its load row in every shard: the
# merge keeps one.
U=$(dirname "$KVRUN")/tests/plugins/libunavailable.so
expect 0 "" "shard 1/2 with an unavailable plugin" -- $KVRUN cases/matmul.case --backend="$U" --shard=1/2 --report-dir="$T/u1"
expect 0 "" "shard 2/2 with an unavailable plugin" -- $KVRUN cases/matmul.case --backend="$U" --shard=2/2 --report-dir="$T/u2"
expect 0 "merged from 2 report folders" "the shards' identical load rows merge into one" -- \
    $KVRUN --merge "$T/u1" "$T/u2" --report-dir="$T/um"
expect 0 "1" "one load row after the merge" -- sh -c "grep -c '\"check\":\"load\"' '$T/um/results.jsonl'"
finish
