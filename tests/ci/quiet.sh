#!/bin/sh
# Green runs are quiet (docs/triage.md): the project's own case files
# select without a single warning (a duplicate case, ...), with the SIM
# plugin and with every built plugin (accel cases follow the target).
. tests/ci/lib.sh
# Every built plugin but CUDA where it cannot run: an unavailable backend
# says so on stderr, once, by design (CI builds it on machines without a
# GPU); the warnings this test is about come from the case files.
all=""
for so in "$(dirname "$KVRUN")"/backends/*.so; do
    case $so in */libkv_cuda.so) command -v nvidia-smi >/dev/null 2>&1 || continue ;; esac
    all="${all:+$all:}$so"
done
for plugins in "$KV_BACKEND_PATH" "$all"; do
    KV_BACKEND_PATH=$plugins $KVRUN cases/ --list >"$T/ids" 2>"$T/err"
    rc=$?
    if [ "$rc" -eq 0 ] && [ -s "$T/ids" ] && [ ! -s "$T/err" ]; then
        ok "cases/ selects $(wc -l <"$T/ids") cases, nothing on stderr (plugins: $plugins)"
    else
        bad "cases/ with plugins $plugins: exit $rc, stderr:"
        sed 's/^/     | /' "$T/err" | head -8
    fi
done
finish
