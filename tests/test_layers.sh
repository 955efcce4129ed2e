#!/bin/sh
# The layering test (`ninja test`): tests/check_layers.sh on the tree, then
# on scratch copies with one violation injected each, which it must refuse
# naming the file and the include; so the check itself can fail.
set -u
status=0
echo "[ RUN      ] layers: the tree"
if sh tests/check_layers.sh; then echo "[       OK ] layers: the tree"; else echo "[  FAILED  ] layers: the tree"; status=1; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
inject() { # NAME FILE INCLUDE EXPECTED-TEXT
    rm -rf "$tmp/t" && mkdir -p "$tmp/t" && cp -R src kernels "$tmp/t/"
    printf '#include "%s"\n' "$3" >>"$tmp/t/$2"
    echo "[ RUN      ] layers: refuses $1"
    if out=$(sh tests/check_layers.sh "$tmp/t" 2>&1); then
        echo "$out"; echo "[  FAILED  ] layers: $1 was accepted"; status=1
    elif ! echo "$out" | grep -q "^$2:[0-9]*: #include \"$3\": $4"; then
        echo "$out"; echo "[  FAILED  ] layers: $1: the message does not name $2 and $3"; status=1
    else
        echo "[       OK ] layers: refuses $1"
    fi
}
inject "the dispatcher including a mode" src/dispatch/registry.c modes/modes.h "dispatch (layer 2) may not include modes"
inject "core including the dispatcher" src/core/tensor.c kv/dispatch.h "core (layer 1) may not include dispatch"
inject "a reference kernel including the runner" kernels/ref/ref_binary.c runner/runner.h "ref (layer 4) may not include runner"
inject "one plugin including another" kernels/sim/sim_plugin.c cuda/cuda_api.h "sim and cuda are peers"
echo "[ RUN      ] layers: refuses an unplaced folder"
rm -rf "$tmp/t" && mkdir -p "$tmp/t" && cp -R src kernels "$tmp/t/" && mkdir "$tmp/t/src/newthing"
printf '#include "kv/tensor.h"\n' >"$tmp/t/src/newthing/x.c"
if sh tests/check_layers.sh "$tmp/t" >"$tmp/out" 2>&1 || ! grep -q 'src/newthing/x.c: no layer' "$tmp/out"; then
    cat "$tmp/out"; echo "[  FAILED  ] layers: an unplaced folder"; status=1
else
    echo "[       OK ] layers: refuses an unplaced folder"
fi
[ $status -eq 0 ] && echo "[  PASSED  ] layers: 6 tests" || echo "[  FAILED  ] layers"
exit $status
