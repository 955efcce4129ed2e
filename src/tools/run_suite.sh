#!/bin/sh
# `ninja run`: the case suite twice, with the default accel target
# (REPORTS/) and with the oneDNN plugin as the accel target
# (REPORTS/onednn-accel/: the fast-path, lazy and grad checks on a vendor
# library). Both halves always run, so a red first half never leaves the
# second half's folder holding an earlier green run; the exit status is
# the larger of the two (0 only when both pass).
#   sh src/tools/run_suite.sh [CASES [REPORTS]]   (default: cases/ reports)
# KVRUN names the kvrun to run (default build/kvrun).
KVRUN=${KVRUN:-build/kvrun}
cases=${1:-cases/}
reports=${2:-reports}
rc1=0
rc2=0
$KVRUN "$cases" --report-dir="$reports" || rc1=$?
$KVRUN "$cases" --require-backend=onednn --accel-target=onednn --report-dir="$reports/onednn-accel" || rc2=$?
[ "$rc1" -ge "$rc2" ] && exit "$rc1"
exit "$rc2"
