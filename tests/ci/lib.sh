# Shared helpers of the CI-grade script tests (tests/ci/*.sh, run by
# tests/run_tests.sh). KVRUN may name another build's kvrun.
KVRUN=${KVRUN:-build/kvrun}
# The scripts count rows: the backends are pinned to SIM (from the same
# build as KVRUN) so that another built plugin (oneDNN) cannot change them.
KV_BACKEND_PATH=${KV_BACKEND_PATH-$(dirname "$KVRUN")/backends/libkv_sim.so}
export KV_BACKEND_PATH
T=$(mktemp -d "${TMPDIR:-/tmp}/kv-ci.XXXXXX")
trap 'rm -rf "$T"' EXIT
nfail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; nfail=$((nfail + 1)); }
# expect RC NEEDLE DESCRIPTION -- CMD...: runs CMD, checks its exit code
# and that NEEDLE (may be empty) is in its stdout+stderr.
expect() {
    want=$1 needle=$2 what=$3
    shift 4
    "$@" >"$T/out" 2>&1
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        bad "$what: exit $rc, expected $want"
        sed 's/^/     | /' "$T/out" | tail -5
    elif [ -n "$needle" ] && ! grep -qF -- "$needle" "$T/out"; then
        bad "$what: '$needle' not in the output"
        sed 's/^/     | /' "$T/out" | tail -5
    else
        ok "$what"
    fi
}
finish() {
    if [ "$nfail" -ne 0 ]; then
        echo "$(basename "$0"): $nfail failed"
        exit 1
    fi
    echo "$(basename "$0"): all passed"
}
