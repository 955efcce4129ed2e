#!/bin/sh
# `ninja run`: the whole case suite with the default accel target
# (REPORTS/), then its accel cases (device=accel in the ID) again with the
# oneDNN plugin as the accel target (REPORTS/onednn-accel/: the fast-path,
# lazy and grad checks on a vendor library) and with the OpenCL plugin as
# the accel target (REPORTS/opencl-accel/: on kernels a driver builds at run
# time, in device memory). A cpu case does not touch the accel target, so
# its rows in the two later parts were the first part's, bit for bit: they
# run once. Every part always runs, so a red part never leaves a later
# part's folder holding an earlier green run; the exit status is the
# largest of the three (0 only when all pass). The rows go compressed
# (--gzip-results: zcat REPORTS/results.jsonl.gz | jq ...), so the three
# folders stay a CI artifact's size.
#   sh src/tools/run_suite.sh [CASES [REPORTS]]   (default: cases/ reports)
# KVRUN names the kvrun to run (default build/kvrun).
KVRUN=${KVRUN:-build/kvrun}
cases=${1:-cases/}
reports=${2:-reports}
rc=0
for part in "" onednn opencl; do
    if [ -z "$part" ]; then
        $KVRUN "$cases" --gzip-results --report-dir="$reports"
    else
        $KVRUN "$cases" --filter='*device=accel*' --require-backend=$part --accel-target=$part \
            --gzip-results --report-dir="$reports/$part-accel"
    fi
    r=$?
    [ "$r" -gt "$rc" ] && rc=$r
done
exit "$rc"
