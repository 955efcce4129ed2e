#!/bin/sh
# The CUDA plugin on a real GPU, in one prepared run (README "Backends"):
# builds the plugin (ninja cuda: nvcc, sm_90 plus PTX), then runs the whole
# suite twice: CUDA as one more backend (--require-backend=cuda, so a
# broken driver cannot go green on UNSUPPORTED rows) and CUDA as the accel
# target (fast path ON vs OFF under both gates, lazy, grad, memory on the
# device). Each run's console summary and reports land under OUT (default
# build/gpu-check; the device tool's $OUT when set), with nvidia-smi's view
# of the GPU. Exit status: the first failing step's.
#
#   sh tests/gpu_check.sh            build what is missing, then both runs
#
# Nothing here needs the network: the host libraries kvrun links
# (cmocka is not needed; jansson, xxhash, mpfr, gmp, dnnl) must already be
# on the machine, or build/ must be carried over from a machine that built
# it with the same libraries.
set -u
out=${OUT:-build/gpu-check}
mkdir -p "$out"
say() { echo "gpu_check: $*" | tee -a "$out/summary.txt"; }

command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >"$out/nvidia-smi.txt" 2>&1
for tool in ninja gcc /usr/local/cuda/bin/nvcc; do
    command -v "$tool" >/dev/null 2>&1 || { say "$tool not found: cannot build the CUDA plugin here"; exit 1; }
done
start=$(date +%s)
if ! ninja build/kvrun backends cuda >"$out/build.log" 2>&1; then
    say "the build failed (see $out/build.log)"
    tail -20 "$out/build.log"
    exit 1
fi
say "built in $(($(date +%s) - start)) s"

status=0
run() { # NAME ARGS...
    name=$1
    shift
    t0=$(date +%s)
    build/kvrun cases/ --require-backend=cuda "$@" --report-dir="$out/$name" >"$out/$name.log" 2>&1
    rc=$?
    say "$name: exit $rc in $(($(date +%s) - t0)) s: $(grep '^PASS ' "$out/$name.log")"
    grep '^== backends\|^== fast-path' "$out/$name.log" | tee -a "$out/summary.txt"
    [ $rc -eq 0 ] || { [ $status -eq 0 ] && status=$rc; grep -A3 '^FAIL\|^ERROR\|^CRASH\|^TIMEOUT' "$out/$name.log" | head -40; }
}
run cuda-backend --accel-target=sim
run cuda-accel --accel-target=cuda
exit $status
