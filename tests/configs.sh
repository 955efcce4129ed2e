#!/bin/sh
# Instrumented builds beside the normal one: `tests/configs.sh CONFIG
# [NINJA TARGET...]` writes build-CONFIG/build.ninja and runs ninja on it.
#
# The generated file is build.ninja itself with two mechanical changes, so
# every edge anyone adds to build.ninja is in every config without a second
# list to keep in step:
#   - every path under build/ moves to build-CONFIG/ (objects, generated
#     headers, tools, tests, plugins, ninja's own log: `builddir`);
#   - before the first rule, the config's compiler and flags are bound on
#     top of the defaults (`cflags = $cflags ...`: later flags win, so -O0
#     beats the -O2 above it). The link rule passes $cflags to the driver,
#     which is how the sanitizer and gcov runtimes get linked. Warnings
#     stay on but are not errors here: -O0/-O1 and instrumentation change
#     which diagnostics gcc emits, and the normal build enforces them.
# Backend plugins link with -z defs (no undefined symbols); instrumented
# code calls into its runtime, which the executable (sanitizers) or the
# plugin's own link (gcov) provides, so these configs link plugins with
# the instrumentation flags instead.
#
# Configs:
#   cov   gcc --coverage -O0, and tests/cov_exit.c wrapped around _exit()
#         so forked workers write their counts too  (tests/coverage.sh)
#   asan  gcc AddressSanitizer + UndefinedBehaviorSanitizer (tests/sanitize.sh)
#   tsan  gcc ThreadSanitizer                     (tests/sanitize.sh)
#   fuzz  clang libFuzzer instrumentation + ASan + UBSan (tests/fuzz/run.sh)
#   aarch64  Debian's aarch64-linux-gnu-gcc against the arm64 multiarch
#         libraries; build-time tools (kvgen) run under qemu-aarch64
#         (tests/cross_golden.sh)
# The normal build/ is never touched. KV_JOBS sets ninja's -j (default 2).
set -eu
cfg=${1:?usage: tests/configs.sh cov|asan|tsan|fuzz [NINJA TARGET...]}
shift

san_common="-fno-omit-frame-pointer -fno-sanitize-recover=all -Wno-error"
exit_hook=no
run_tool=""
case "$cfg" in
cov)  cc=gcc;   extra="-O0 --coverage -Wno-error"; exit_hook=yes ;;
# -O2 as the normal build: the suite ran 1.5 times faster than at -O1
# (cases/programs.case in process: 49 s against 72 s), and the frame
# pointer kept above keeps the reports' stacks whole.
asan) cc=gcc;   extra="-O2 -fsanitize=address,undefined $san_common" ;;
tsan) cc=gcc;   extra="-O1 -fsanitize=thread -fno-omit-frame-pointer -Wno-error" ;;
# glibc defines C11's CMPLX only for gcc (it tests __GNUC__ >= 4.7, and
# clang says 4.2); clang has the builtin it expands to.
fuzz) cc=clang; extra="-O1 -fsanitize=fuzzer-no-link,address,undefined $san_common"
      extra="$extra '-DCMPLX(x,y)=__builtin_complex((double)(x),(double)(y))'" ;;
# A cross build for another ISA; kvgen is built for aarch64 too and run by
# qemu. -ffp-contract=off everywhere: FMA is baseline on aarch64, and gcc
# would fuse a*b+c in the optimized CPU variants (never in x86-64's
# baseline), so variants the tuner may swap would stop agreeing bit for
# bit (the fastpath check's addmm grad case caught it).
aarch64) cc=aarch64-linux-gnu-gcc; extra="-ffp-contract=off -Wno-error"; run_tool="qemu-aarch64 " ;;
# Position-independent objects for libkv.so (src/tools/install.sh); the
# normal flags otherwise.
*) echo "tests/configs.sh: unknown config '$cfg' (cov, asan, tsan, fuzz, aarch64)" >&2; exit 2 ;;
esac

dir="build-$cfg"
mkdir -p "$dir"
tmp="$dir/build.ninja.tmp"
# `build/` starting a path: at the start of a line, after a blank, `|`,
# `=` or `:`, or glued to -I.
sed -E \
    -e "s#^  command = build/kvgen#  command = ${run_tool}build/kvgen#" \
    -e "s#^builddir = build\$#builddir = $dir#" \
    -e "s#(^|[[:space:]|=:]|-I)build/#\\1$dir/#g" \
    -e 's#-shared -Wl,-z,defs#-shared $cflags#' \
    build.ninja |
awk -v cfg="$cfg" -v cc="$cc" -v extra="$extra" -v hook="$exit_hook" '
    !done && /^rule / {
        print "# ---- config " cfg " (written by tests/configs.sh; edit build.ninja) ----"
        print "cc = " cc
        print "cflags = $cflags " extra
        if (hook == "yes") print "libs = $libs build-" cfg "/obj/cov_exit.o -Wl,--wrap=_exit"
        print ""
        done = 1
    }
    { print }
    END {
        if (hook == "yes") {
            print ""
            print "# ---- config " cfg ": linked into every program (tests/configs.sh) ----"
            print "build build-" cfg "/obj/cov_exit.o: cc tests/cov_exit.c"
        }
    }
' >"$tmp"
# Rewriting an unchanged file would make ninja re-read it for nothing.
if cmp -s "$tmp" "$dir/build.ninja"; then rm -f "$tmp"; else mv "$tmp" "$dir/build.ninja"; fi

# Every program links the exit hook, which no edge lists as an input.
[ "$exit_hook" = yes ] && ninja -f "$dir/build.ninja" "$dir/obj/cov_exit.o" >/dev/null
exec ninja -f "$dir/build.ninja" -j"${KV_JOBS:-2}" "$@"
