#!/bin/sh
# Every environment variable kvrun reads follows the empty-is-an-error
# rule (README "Exit codes"): set but empty, kvrun exits 2 with a message
# naming the variable. The table is every "KV_..." name in the sources of
# libkv and kvrun (kvgen's are C identifiers it writes, not variables), so
# a variable added later is checked without editing this script. The one
# documented exception, KV_BACKEND_PATH= (no plugin), is checked as such.
. tests/ci/lib.sh
NEG="--op=neg --dtype=f32 --shape=4"
vars=$(grep -rhoE '"KV_[A-Z0-9_]+"' src kernels --include=*.c --include=*.h --exclude-dir=kvgen | tr -d '"' | sort -u)
n=$(echo "$vars" | grep -c .)
# 21 when this was written: fewer means the scan lost its sources.
[ "$n" -ge 21 ] && ok "$n variables in the table" || bad "only $n variables found in src/ and kernels/"
for v in $vars; do
    case $v in
    KV_BACKEND_PATH)
        expect 0 "== backends (plugin ABI" "$v= (empty): loads no plugin, as documented" -- env "$v=" $KVRUN $NEG --report-dir="$T/r"
        grep -q '"name":"sim"' "$T/r/meta.json" && bad "$v= (empty): a plugin was loaded" || ok "$v= (empty): no plugin in meta.json"
        ;;
    KV_SHARD_INDEX) expect 2 "$v=''" "$v= (empty) is an error naming it" -- env "$v=" KV_SHARD_TOTAL=2 $KVRUN $NEG --shard=auto --report-dir="$T/r" ;;
    KV_SHARD_TOTAL) expect 2 "$v=''" "$v= (empty) is an error naming it" -- env "$v=" KV_SHARD_INDEX=0 $KVRUN $NEG --shard=auto --report-dir="$T/r" ;;
    # A plugin's own variable: the plugin fails to load, naming it, which
    # is an ERROR row like every load failure (exit 1, not a usage error).
    KV_OPENCL_GENERATOR)
        expect 1 "KV_OPENCL_GENERATOR=''" "$v= (empty) fails the OpenCL plugin's load, naming it" -- \
            env "$v=" KV_BACKEND_PATH="$(dirname "$KVRUN")/backends/libkv_opencl.so" $KVRUN $NEG --report-dir="$T/r" ;;
    # Read by an instruction-counting perf run only (kvrun sets it for the
    # run it starts under callgrind; docs/performance.md).
    KV_PERF_CALLGRIND_OUT)
        expect 2 "$v is empty" "$v= (empty) is an error naming it" -- \
            env "$v=" $KVRUN --mode=perf --perf-metric=instructions $NEG --report-dir="$T/r" ;;
    *) expect 2 "$v" "$v= (empty) is an error naming it" -- env "$v=" $KVRUN $NEG --report-dir="$T/r" ;;
    esac
done
finish
