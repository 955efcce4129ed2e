#!/bin/sh
# Green runs are quiet (docs/triage.md): the project's own case files
# select without a single warning (a duplicate case, ...), with the SIM
# plugin and with every built plugin (accel cases follow the target).
. tests/ci/lib.sh
for plugins in "$KV_BACKEND_PATH" "$(dirname "$KVRUN")/backends"; do
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
