#!/bin/sh
# `ninja install` (src/tools/install.sh) into a scratch prefix, then use
# the installed copy the way someone without the source tree would:
#   - build examples/hello_backend from a copy outside the checkout with
#     `pkg-config --cflags --libs kvsuite` alone (PKG_CONFIG_PATH naming
#     the installed lib/pkgconfig; no path into the source tree);
#   - run the installed kvrun from another folder, without flags but the
#     plugin: it must find the installed goldens (golden rows PASS against
#     the store, not live) and the installed plugins (sim, onednn);
#   - link a program against the installed shared libkv (libkv.pc) and run it;
#   - the installed man page renders and lists every option of --help;
#   - DESTDIR stages under its root and the files name PREFIX.
. tests/ci/lib.sh
unset KV_BACKEND_PATH
P="$T/prefix"
SRC=$(pwd)

expect 0 "install: kvsuite" "ninja install's script installs into PREFIX" -- \
    env PREFIX="$P" DESTDIR= sh src/tools/install.sh
for f in bin/kvrun bin/kvgen lib/libkv.a lib/libkv.so include/kvsuite/kv/backend.h include/kvsuite/kv/ops.h \
    lib/pkgconfig/kvsuite.pc lib/pkgconfig/libkv.pc share/man/man1/kvrun.1 share/kvsuite/golden/MANIFEST \
    lib/kvsuite/backends/libkv_sim.so lib/kvsuite/backends/libkv_onednn.tolerances share/doc/kvsuite/README.md; do
    [ -e "$P/$f" ] && ok "installed $f" || bad "$f not installed"
done
grep -q "$SRC" "$P/lib/pkgconfig/kvsuite.pc" && bad "kvsuite.pc names the source tree" || ok "kvsuite.pc names no source path"

# The example plugin, built from a copy with pkg-config alone.
mkdir -p "$T/hello" "$T/elsewhere"
cp examples/hello_backend/*.c "$T/hello/"
flags=$(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --cflags --libs kvsuite)
case "$flags" in *"$SRC"*) bad "pkg-config's flags name the source tree: $flags" ;; *) ok "pkg-config's flags: $flags" ;; esac
expect 0 "" "hello_backend builds against the installed headers" -- \
    sh -c "cd '$T/hello' && gcc -O2 -Wall -Wextra -Werror -o libhello.so *.c $flags"

# The installed kvrun, from another folder, finds its goldens and plugins.
expect 0 "sim (loaded" "the installed kvrun, run from elsewhere without flags, loads the installed plugins" -- \
    sh -c "cd '$T/elsewhere' && '$P/bin/kvrun' '$P/share/kvsuite/cases/binary.case' --report-dir=r"
n_golden=$(grep '"check":"golden"' "$T/elsewhere/r/results.jsonl" | grep -c '"status":"PASS","message":"bitwise equal to the golden')
[ "$n_golden" -gt 0 ] && ok "golden rows compare against the installed store ($n_golden PASS)" ||
    bad "no golden row compared against the installed store"
[ -d "$T/elsewhere/golden" ] && bad "a golden/ folder appeared in the working directory" || ok "nothing written beside the run but its reports"
expect 0 "hello" "the installed kvrun runs the example plugin" -- \
    sh -c "cd '$T/elsewhere' && '$P/bin/kvrun' --backend='$T/hello/libhello.so' '$P/share/kvsuite/cases/unary.case' --report-dir=r2"

# A program linked against the installed shared library.
cat >"$T/use.c" <<'C'
#include <stdio.h>
#include "kv/kv.h"
int main(void) {
    int64_t sizes[2] = { 2, 3 };
    kv_tensor *a = kv_ones((kv_int_list){ sizes, 2 }, NULL, NULL, NULL, NULL);
    kv_tensor *b = a ? kv_add(a, a, kv_scalar_int(1)) : NULL;
    if (!b) { fprintf(stderr, "%s\n", kv_last_error_message()); return 1; }
    printf("numel %lld\n", (long long)kv_tensor_numel(b));
    kv_tensor_release(b);
    kv_tensor_release(a);
    return 0;
}
C
libkv=$(PKG_CONFIG_PATH="$P/lib/pkgconfig" pkg-config --cflags --libs libkv)
expect 0 "" "a program links against the installed libkv.so" -- sh -c "gcc -o '$T/use' '$T/use.c' $libkv"
expect 0 "numel 6" "and runs with it" -- env LD_LIBRARY_PATH="$P/lib" "$T/use"
LD_LIBRARY_PATH="$P/lib" ldd "$T/use" | grep -q "$P/lib/libkv.so" && ok "it is the shared library that runs" || bad "the program is not linked to libkv.so"

# The man page: every option of --help is in it.
if command -v man >/dev/null 2>&1; then
    MANWIDTH=200 man -l "$P/share/man/man1/kvrun.1" >"$T/man.txt" 2>/dev/null
    missing=""
    for opt in $("$P/bin/kvrun" --help | sed -n 's/^  \(-[-a-z]*\).*/\1/p' | sed 's/[=[].*//'); do
        grep -qF -- "$opt" "$T/man.txt" || missing="$missing $opt"
    done
    [ -z "$missing" ] && ok "the man page lists every option of --help" || bad "the man page lacks:$missing"
else
    bad "man is not installed (.ci/install-deps.sh installs man-db)"
fi

# DESTDIR: files under the stage, paths naming PREFIX.
expect 0 "" "DESTDIR stages the install" -- env PREFIX=/opt/kvsuite DESTDIR="$T/stage" sh src/tools/install.sh
[ -x "$T/stage/opt/kvsuite/bin/kvrun" ] && ok "staged under DESTDIR/PREFIX" || bad "nothing under DESTDIR/PREFIX"
grep -qx "prefix=/opt/kvsuite" "$T/stage/opt/kvsuite/lib/pkgconfig/kvsuite.pc" && ok "the staged kvsuite.pc names PREFIX" ||
    bad "the staged kvsuite.pc does not name PREFIX"
expect 2 "PREFIX must be an absolute path" "a relative PREFIX is refused" -- env PREFIX=rel sh src/tools/install.sh
finish
