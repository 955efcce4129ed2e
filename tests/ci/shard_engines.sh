#!/bin/sh
# --shard=auto on Slurm job arrays and Bazel's test sharding protocol
# (docs/ci.md), with each engine's own variables: the shards of an array
# partition the unsharded selection; Bazel's status file is touched and
# its XML_OUTPUT_FILE gets the run's JUnit; bad or partial settings are
# named (exit 2).
. tests/ci/lib.sh
F=cases/backward.case
clean() { env -u CI_NODE_INDEX -u CI_NODE_TOTAL -u BUILDKITE_PARALLEL_JOB -u BUILDKITE_PARALLEL_JOB_COUNT \
    -u JOB_COMPLETION_INDEX -u KV_SHARD_INDEX -u KV_SHARD_TOTAL -u TEST_SHARD_INDEX -u TEST_TOTAL_SHARDS \
    -u TEST_SHARD_STATUS_FILE -u XML_OUTPUT_FILE -u SLURM_ARRAY_TASK_ID -u SLURM_ARRAY_TASK_MIN \
    -u SLURM_ARRAY_TASK_MAX -u SLURM_ARRAY_TASK_STEP -u SLURM_ARRAY_TASK_COUNT "$@"; }
clean $KVRUN $F --list >"$T/all" 2>/dev/null
# sbatch --array=3-9:2: tasks 3 5 7 9, MIN 3, MAX 9, STEP 2, COUNT 4.
: >"$T/slurm"
for id in 3 5 7 9; do
    k=$(((id - 3) / 2 + 1))
    expect 0 "shard $k/4 (Slurm job array: SLURM_ARRAY_TASK_ID=$id)" "Slurm --array=3-9:2, task $id is shard $k/4" -- \
        clean SLURM_ARRAY_TASK_ID=$id SLURM_ARRAY_TASK_MIN=3 SLURM_ARRAY_TASK_MAX=9 SLURM_ARRAY_TASK_STEP=2 \
        SLURM_ARRAY_TASK_COUNT=4 $KVRUN $F --shard=auto --list
    grep -v '^kvrun:' "$T/out" >>"$T/slurm"
done
[ -s "$T/all" ] && [ "$(sort "$T/slurm")" = "$(sort "$T/all")" ] &&
    ok "the 4 Slurm tasks partition the unsharded selection" || bad "the Slurm tasks do not partition the selection"
expect 0 "shard 1/2 (Slurm job array: SLURM_ARRAY_TASK_ID=0)" "Slurm --array=0-1 without _STEP and _MAX" -- \
    clean SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_TASK_MIN=0 SLURM_ARRAY_TASK_COUNT=2 $KVRUN $F --shard=auto --list
expect 2 "the Slurm array is not one range" "Slurm --array=1,4,9 is refused" -- \
    clean SLURM_ARRAY_TASK_ID=4 SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=9 SLURM_ARRAY_TASK_COUNT=3 \
    $KVRUN $F --shard=auto --list
expect 2 "SLURM_ARRAY_TASK_ID=4 is not 3 plus a multiple of SLURM_ARRAY_TASK_STEP=2" "a task ID off the step" -- \
    clean SLURM_ARRAY_TASK_ID=4 SLURM_ARRAY_TASK_MIN=3 SLURM_ARRAY_TASK_STEP=2 SLURM_ARRAY_TASK_COUNT=4 \
    $KVRUN $F --shard=auto --list
expect 2 "SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_MIN is not" "Slurm without _MIN" -- \
    clean SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_COUNT=2 $KVRUN $F --shard=auto --list
expect 2 "SLURM_ARRAY_TASK_COUNT=''" "an empty SLURM_ARRAY_TASK_COUNT" -- \
    clean SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_COUNT= $KVRUN $F --shard=auto --list
# Bazel: shard_count = 3, this is the second shard (0-based index 1).
expect 0 "shard 2/3 (Bazel: TEST_SHARD_INDEX=1)" "Bazel TEST_SHARD_INDEX=1 of TEST_TOTAL_SHARDS=3" -- \
    clean TEST_SHARD_INDEX=1 TEST_TOTAL_SHARDS=3 TEST_SHARD_STATUS_FILE="$T/status" XML_OUTPUT_FILE="$T/test.xml" \
    $KVRUN $F --shard=auto --report-dir="$T/b"
[ -f "$T/status" ] && ok "TEST_SHARD_STATUS_FILE is touched" || bad "TEST_SHARD_STATUS_FILE was not created"
cmp -s "$T/test.xml" "$T/b/junit.xml" && ok "XML_OUTPUT_FILE holds the run's junit.xml" ||
    bad "XML_OUTPUT_FILE is not the run's junit.xml"
expect 2 "TEST_SHARD_STATUS_FILE='$T/no/such/dir/status'" "a status file that cannot be touched" -- \
    clean TEST_SHARD_INDEX=0 TEST_TOTAL_SHARDS=3 TEST_SHARD_STATUS_FILE="$T/no/such/dir/status" \
    $KVRUN $F --shard=auto --list
expect 2 "TEST_SHARD_INDEX is set but TEST_TOTAL_SHARDS is not" "Bazel without the total" -- \
    clean TEST_SHARD_INDEX=0 $KVRUN $F --shard=auto --list
expect 2 "TEST_SHARD_INDEX=3 is outside 1..3 shards" "a Bazel index past the total" -- \
    clean TEST_SHARD_INDEX=3 TEST_TOTAL_SHARDS=3 $KVRUN $F --shard=auto --list
expect 2 "XML_OUTPUT_FILE is empty" "an empty XML_OUTPUT_FILE" -- \
    clean XML_OUTPUT_FILE= $KVRUN $F --filter='*' --report-dir="$T/b2"
finish
