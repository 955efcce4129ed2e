#!/bin/sh
# kvsuite's build and test dependencies, all Debian 12 packages, in one
# list: the README's set-up command and CI (.ci/run) both run this script.
# Installs only what is missing; as root directly, otherwise through sudo.
#
#   ninja-build gcc          the build
#   libcmocka-dev            unit tests
#   libxxhash-dev            golden hashes
#   libjansson-dev           JSON reports and merges
#   zlib1g-dev               results.jsonl.gz (--gzip-results) and its readers
#   libxml2-utils            xmllint, which checks the JUnit report
#   valgrind                 ninja memcheck
#   clang libclang-rt-14-dev sanitizers, libFuzzer
#   gcovr                    ninja coverage (part of ninja check)
#   libdnnl-dev              the oneDNN backend plugin (kernels/onednn)
#   ocl-icd-opencl-dev pocl-opencl-icd
#                            the OpenCL backend plugin (kernels/opencl): the
#                            headers and ICD loader, and PoCL's CPU device
#   libmpfr-dev              correctly rounded goldens
#   pkg-config               build/kvsuite.pc, the out-of-tree plugin recipe
#   python3                  the docs' generated sections (ninja docs, the
#                            check in ninja test) and a few CI scripts
#   man-db                   the kvrun(1) page, rendered by tests/ci/install.sh
#   jq                       reading results.jsonl in the plugin tests
#                            (tests/test_zoo.sh)
#   chromium                 the HTML reports rendered headless in ninja test
#                            (tests/html_render.sh: size, render time, no
#                            console errors)
#   gnuplot-nox              the plots of report.html and perf.html (SVG,
#                            inline); without it the reports say so in
#                            place of each plot
#   gcc-aarch64-linux-gnu qemu-user libmpfr-dev:arm64 libgmp-dev:arm64
#   libxxhash-dev:arm64 libjansson-dev:arm64
#   zlib1g-dev:arm64
#                            ninja cross-golden (part of ninja check): the
#                            golden generator cross-built for aarch64 and
#                            run under qemu; needs the arm64 architecture
#                            (dpkg --add-architecture arm64, done below)
set -eu
pkgs="ninja-build gcc libcmocka-dev libxxhash-dev libjansson-dev zlib1g-dev libxml2-utils valgrind clang libclang-rt-14-dev gcovr libdnnl-dev libmpfr-dev pkg-config gnuplot-nox python3 man-db jq chromium"
pkgs="$pkgs ocl-icd-opencl-dev pocl-opencl-icd"
pkgs="$pkgs gcc-aarch64-linux-gnu qemu-user libmpfr-dev:arm64 libgmp-dev:arm64 libxxhash-dev:arm64 libjansson-dev:arm64 zlib1g-dev:arm64"

missing=""
native=$(dpkg --print-architecture)
for p in $pkgs; do
    # With arm64 added, a name installed for both architectures is
    # ambiguous to dpkg -s: ask again for the native one.
    dpkg -s "$p" >/dev/null 2>&1 || dpkg -s "$p:$native" >/dev/null 2>&1 || missing="$missing $p"
done
if [ -z "$missing" ]; then
    echo "install-deps: every package is installed"
    exit 0
fi
if [ "$(id -u)" -eq 0 ]; then
    as_root=""
elif command -v sudo >/dev/null 2>&1; then
    as_root="sudo"
else
    echo "install-deps: not root and no sudo; as root, run: apt-get install -y$missing" >&2
    exit 1
fi
echo "install-deps: installing$missing"
# The :arm64 packages need the architecture known to dpkg first.
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $as_root dpkg --add-architecture arm64
fi
$as_root apt-get update
# shellcheck disable=SC2086 # the list is meant to split into words
$as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y $missing
