#!/bin/sh
# `ninja run`: the case suite three times: with the default accel target
# (REPORTS/), with the oneDNN plugin as the accel target
# (REPORTS/onednn-accel/: the fast-path, lazy and grad checks on a vendor
# library) and with the OpenCL plugin as the accel target
# (REPORTS/opencl-accel/: on kernels a driver builds at run time, in device
# memory). Every part always runs, so a red part never leaves a later
# part's folder holding an earlier green run; the exit status is the
# largest of the three (0 only when all pass).
#   sh src/tools/run_suite.sh [CASES [REPORTS]]   (default: cases/ reports)
# KVRUN names the kvrun to run (default build/kvrun).
KVRUN=${KVRUN:-build/kvrun}
cases=${1:-cases/}
reports=${2:-reports}
rc=0
for part in "" onednn opencl; do
    if [ -z "$part" ]; then
        $KVRUN "$cases" --report-dir="$reports"
    else
        $KVRUN "$cases" --require-backend=$part --accel-target=$part --report-dir="$reports/$part-accel"
    fi
    r=$?
    [ "$r" -gt "$rc" ] && rc=$r
done
exit "$rc"
