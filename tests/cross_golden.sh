#!/bin/sh
# ninja cross-golden (issue 14): the golden store regenerates bit for bit
# on another ISA. Cross-compiles kvrun (the golden generator: the reference
# kernels plus the MPFR exact families) for aarch64 with Debian's
# aarch64-linux-gnu-gcc against the arm64 multiarch libraries
# (tests/configs.sh aarch64 -> build-aarch64/), runs `kvrun --regen-golden`
# under qemu-aarch64 into a scratch store and diffs it against the
# committed golden/: any difference fails.
#
#   sh tests/cross_golden.sh            the whole suite, from an empty store
#   sh tests/cross_golden.sh FILE...    a slice: those case files, over a
#                                       copy of golden/ (a partial run does
#                                       not prune, so the untouched entries
#                                       stay equal and the regenerated ones
#                                       must match)
# Needs (Debian 12, `dpkg --add-architecture arm64` first):
#   gcc-aarch64-linux-gnu qemu-user libmpfr-dev:arm64 libgmp-dev:arm64
#   libxxhash-dev:arm64 libjansson-dev:arm64
# Plugins are not loaded (KV_BACKEND_PATH empty): goldens come from the
# CPU reference and the exact generator only.
set -u
out=build-aarch64/cross-golden
for tool in aarch64-linux-gnu-gcc qemu-aarch64; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "cross_golden: $tool not found; install gcc-aarch64-linux-gnu qemu-user and the arm64 -dev libraries (see this script)" >&2
        exit 1
    fi
done
start=$(date +%s)
mkdir -p build-aarch64
if ! sh tests/configs.sh aarch64 build-aarch64/kvrun >"$out.build.log" 2>&1; then
    echo "cross_golden: the aarch64 build failed (see $out.build.log)" >&2
    tail -20 "$out.build.log" >&2
    exit 1
fi
built=$(date +%s)
rm -rf "$out" && mkdir -p "$out"
if [ $# -eq 0 ]; then
    set -- cases/
    mkdir -p "$out/store"
    what="the whole suite (cases/), from an empty store"
else
    cp -r golden "$out/store" || exit 1
    what="the slice $*"
fi
KV_BACKEND_PATH= qemu-aarch64 build-aarch64/kvrun "$@" --regen-golden --golden-dir="$out/store" \
    --report-dir="$out/report" >"$out/log" 2>&1
rc=$?
end=$(date +%s)
# The verdict is the store: the run also executes every other check of
# every case, and under qemu's noisy clock the tuner may pick a different
# (1-ulp different) matmul variant for the fast and the slow path of one
# fastpath case, which says nothing about the goldens. Those failures are
# listed; a golden problem, a crash or a store that was not written fails.
if [ $rc -ne 0 ]; then
    if [ ! -f "$out/store/MANIFEST" ] || grep -q 'check=golden\|^CRASH\|^ERROR' "$out/log"; then
        echo "cross_golden: the aarch64 regeneration failed (exit $rc, see $out/log)"
        tail -20 "$out/log"
        exit 1
    fi
    echo "cross_golden: note: checks other than golden failed in the aarch64 run (see $out/log):"
    grep -A2 '^FAIL' "$out/log" | head -12
fi
if ! diff -r golden "$out/store" >"$out/diff" 2>&1; then
    echo "cross_golden: the aarch64 regeneration of $what differs from the committed golden/:"
    head -20 "$out/diff"
    exit 1
fi
files=$(find "$out/store" -name '*.npy' | wc -l)
entries=$(grep -vc '^#' "$out/store/MANIFEST")
echo "cross_golden: aarch64 (qemu) regenerated $what: $entries manifest lines, $files .npy files, 0 differences" \
    "(build $((built - start)) s, regeneration $((end - built)) s)"
