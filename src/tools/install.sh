#!/bin/sh
# `ninja install`: kvsuite into PREFIX (default /usr/local), under DESTDIR
# when it is set (a staging root for packagers: files land in
# $DESTDIR$PREFIX, and every path written into them names $PREFIX).
#
#   PREFIX/bin/kvrun, kvgen
#   PREFIX/include/kvsuite/kv/*.h        the public headers and kvgen's
#                                        (kv/ops.h, kv/op_ids.h)
#   PREFIX/lib/libkv.a, libkv.so         the library, static and shared
#   PREFIX/lib/kvsuite/backends/*.so     the plugins `ninja` built; an
#                                        installed kvrun loads them by default
#   PREFIX/lib/kvsuite/backends/*.tolerances  their tolerance overrides
#   PREFIX/lib/pkgconfig/kvsuite.pc      pkg-config for plugins (the recipe
#                                        of docs/bringup.md)
#   PREFIX/lib/pkgconfig/libkv.pc        pkg-config for programs using libkv
#   PREFIX/share/kvsuite/cases, golden   the suite and its store; an
#                                        installed kvrun finds the store
#   PREFIX/share/man/man1/kvrun.1
#   PREFIX/share/doc/kvsuite/            README.md and docs/
#
# The normal build compiles with -fPIC (build.ninja's cflags), so
# libkv.so is the whole of build/libkv.a. Run from the repository root
# after `ninja` (build.ninja's install edge depends on `all`).
set -eu
PREFIX=${PREFIX:-/usr/local}
DESTDIR=${DESTDIR:-}
case "$PREFIX" in
/*) ;;
*) echo "install: PREFIX must be an absolute path, got '$PREFIX'" >&2; exit 2 ;;
esac
case "$DESTDIR" in
'' | /*) ;;
*) echo "install: DESTDIR must be empty or an absolute path, got '$DESTDIR'" >&2; exit 2 ;;
esac
for f in build/kvrun build/kvgen build/libkv.a build/kvrun.1 build/gen/kv/ops.h; do
    [ -e "$f" ] || { echo "install: $f is missing: run ninja first" >&2; exit 1; }
done

root="$DESTDIR$PREFIX"
version=$(sed -n 's/^#define KV_VERSION_STRING "\(.*\)"$/\1/p' src/include/kv/kv.h)
libs=$(sed -n 's/^libs = //p' build.ninja)

gcc -shared -o build/libkv.so -Wl,-soname,libkv.so \
    -Wl,--whole-archive build/libkv.a -Wl,--no-whole-archive $libs

install -d "$root/bin" "$root/include/kvsuite/kv" "$root/lib/kvsuite/backends" "$root/lib/pkgconfig" \
    "$root/share/kvsuite" "$root/share/man/man1" "$root/share/doc/kvsuite"
install -m 755 build/kvrun build/kvgen "$root/bin/"
install -m 644 src/include/kv/*.h build/gen/kv/*.h "$root/include/kvsuite/kv/"
install -m 644 build/libkv.a "$root/lib/"
install -m 755 build/libkv.so "$root/lib/"
for so in build/backends/*.so; do
    [ -e "$so" ] && install -m 755 "$so" "$root/lib/kvsuite/backends/"
done
# A plugin's tolerance overrides, PLUGIN.tolerances beside PLUGIN.so,
# where kvrun looks for them when it loads the plugin.
for tol in build/backends/*.tolerances; do
    [ -e "$tol" ] && install -m 644 "$tol" "$root/lib/kvsuite/backends/"
done
install -m 644 build/kvrun.1 "$root/share/man/man1/"
rm -rf "$root/share/kvsuite/cases" "$root/share/kvsuite/golden" "$root/share/doc/kvsuite/docs"
cp -R cases golden "$root/share/kvsuite/"
cp -R README.md docs "$root/share/doc/kvsuite/"
[ -d examples ] && rm -rf "$root/share/doc/kvsuite/examples" && cp -R examples "$root/share/doc/kvsuite/"

# The plugin flags are build.ninja's own (plugin_cflags, plugin_ldflags,
# plugin_libs), as build/kvsuite.pc has them, with installed paths.
pc_cflags=$(sed -n 's/^Cflags: -I${prefix}\/src\/include -I${prefix}\/build\/gen //p' build/kvsuite.pc)
pc_libs=$(sed -n 's/^Libs: //p' build/kvsuite.pc)
cat >"$root/lib/pkgconfig/kvsuite.pc" <<PC
prefix=$PREFIX
includedir=\${prefix}/include/kvsuite
libdir=\${prefix}/lib
backendsdir=\${prefix}/lib/kvsuite/backends
Name: kvsuite
Description: the kvsuite backend plugin ABI (kv/backend.h); pkg-config --cflags --libs kvsuite builds a plugin
Version: $version
Cflags: -I\${includedir} $pc_cflags
Libs: $pc_libs
PC
cat >"$root/lib/pkgconfig/libkv.pc" <<PC
prefix=$PREFIX
includedir=\${prefix}/include/kvsuite
libdir=\${prefix}/lib
Name: libkv
Description: kvsuite's dispatcher and boxing runtime (kv/kv.h), for programs that call it
Version: $version
Cflags: -I\${includedir} -pthread
Libs: -L\${libdir} -lkv
Libs.private: $libs
PC
echo "install: kvsuite $version into $root"
