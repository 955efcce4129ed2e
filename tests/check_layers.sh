#!/bin/sh
# The layering check: data and calls flow down, nothing below includes
# anything above it (README, "Layers"). Reads every `#include "..."` of
# src/ and kernels/ (the public headers under src/include/kv included) and
# fails, naming the file, the line and the include, when a file includes a
# higher layer or a peer on its own level. A folder or public header the
# table below does not know is an error too, so a new one has to be placed.
#
# The order is written here once, lowest first. A layer may include any
# layer with a smaller rank; layers that share a rank are peers and may
# not include each other.
#
#   rank layer      what
#   1    core       src/core: dtypes, keys, tensors, storage, .npy, RNG
#   2    dispatch   src/dispatch: registry, schema, stack, TLS, call
#   3    tune       src/tune: perf_dispatch variant sets and the tuner
#   4    ref        kernels/ref: the golden CPU reference kernels
#   5    cpu        kernels/cpu: optimized CPU variants
#   6    modes      src/modes: lazy bits, autograd, autocast, functionalize, trace, vmap
#   7    boxing     src/boxing: the accel device
#   8    backend    src/backend: the plugin ABI, loader, device copies
#   9    gradcheck  src/gradcheck: finite differences on any device
#   10   sim cuda onednn opencl   kernels/<plugin>: backend plugins (peers)
#   11   runner     src/runner: the case runner
#   12   runtime    src/runtime: the composition root (kv_init) and the typed API
#   13   tools      src/tools: kvrun, kvgen
#
# Usage: sh tests/check_layers.sh [ROOT]   (ROOT defaults to .)
set -eu
root=${1:-.}
cd "$root"

files=$(find src kernels -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)

# One line per include: FILE LINE TARGET
for f in $files; do
    awk -v f="$f" '/^[ \t]*#[ \t]*include[ \t]*"/ {
        t = $0; sub(/^[^"]*"/, "", t); sub(/".*$/, "", t); print f, FNR, t }' "$f"
done | awk '
BEGIN {
    n = split("core:1 dispatch:2 tune:3 ref:4 cpu:5 modes:6 boxing:7 backend:8 gradcheck:9 " \
              "sim:10 cuda:10 onednn:10 opencl:10 runner:11 runtime:12 tools:13", pairs, " ")
    for (i = 1; i <= n; i++) { split(pairs[i], kv, ":"); rank[kv[1]] = kv[2] }
    # Who owns each public header.
    m = split("status:core dtype:core scalar:core device:core keys:core tensor:core npy:core rng:core generator:core " \
              "dispatch:dispatch schema:dispatch stack:dispatch tls:dispatch ops:dispatch op_ids:dispatch " \
              "tune:tune autocast:modes autograd:modes functionalize:modes lazy:modes trace:modes vmap:modes " \
              "accel:boxing backend:backend gradcheck:gradcheck init:runtime kv:runtime", hs, " ")
    for (i = 1; i <= m; i++) { split(hs[i], kv, ":"); owner[kv[1]] = kv[2] }
    bad = 0
}
function header_layer(name,    b) {
    b = name; sub(/\.h$/, "", b)
    return (b in owner) ? owner[b] : ""
}
# The layer of a file, from its path.
function file_layer(path,    p, parts) {
    split(path, parts, "/")
    if (parts[1] == "src" && parts[2] == "include") return header_layer(parts[4])
    return parts[2]
}
# The layer of an include as written in `from`.
function include_layer(from, target,    parts, k) {
    k = split(target, parts, "/")
    if (k == 1) return file_layer(from)           # same folder
    if (parts[1] == "kv") return header_layer(parts[2])
    return parts[1]
}
{
    from = $1; line = $2; target = $3
    fl = file_layer(from)
    if (!(fl in rank)) {
        if (!(fl in unknown_file)) printf "%s: no layer for this file (folder or header \"%s\"): place it in tests/check_layers.sh\n", from, fl
        unknown_file[fl] = 1; bad = 1; next
    }
    tl = include_layer(from, target)
    if (tl == "") { printf "%s:%s: #include \"%s\": no layer owns this public header: place it in tests/check_layers.sh\n", from, line, target; bad = 1; next }
    if (!(tl in rank)) { next }                    # not one of ours (a system or toolkit header in quotes)
    if (tl == fl) next
    count[fl " -> " tl]++
    if (rank[tl] > rank[fl]) {
        printf "%s:%s: #include \"%s\": %s (layer %d) may not include %s (layer %d): nothing below calls up\n", from, line, target, fl, rank[fl], tl, rank[tl]
        bad = 1
    } else if (rank[tl] == rank[fl]) {
        printf "%s:%s: #include \"%s\": %s and %s are peers (layer %d) and may not include each other\n", from, line, target, fl, tl, rank[fl]
        bad = 1
    }
}
END {
    if (ENVIRON["KV_LAYERS_VERBOSE"] != "") for (e in count) printf "  %-24s %d\n", e, count[e] | "sort"
    close("sort")
    if (bad) { print "layering check: FAILED (see README, Layers)"; exit 1 }
    print "layering check: passed"
}'
