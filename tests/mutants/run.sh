#!/bin/sh
# `ninja mutants`: the mutation self-test. Each tests/mutants/*.patch puts
# back one known kind of redispatch bug (its first lines say which). For
# each, in a scratch copy of the tree: apply it, build, run the whole case
# suite (build/kvrun cases/) and every unit test, and expect a failure.
# A mutant is KILLED when the suite or a unit test fails; it SURVIVED when
# both pass, which means the tests cannot see that bug. The table says
# which of the two caught each one.
#
# The unmutated copy must build and pass first (else every mutant would
# look killed). A patch that no longer applies, or a mutant that does not
# build, fails the run too: update the patch (keep it small, with enough
# context to find its place as the code moves).
#
#   tests/mutants/run.sh [PATCH...]   (default: every tests/mutants/*.patch)
# KV_MUTANT_DIR names the scratch folder (default: a new one under /tmp,
# removed at the end). The main tree is never modified (the table and the
# log go to reports/mutants/); its build/ is copied in, when there is one,
# so only what a patch touches recompiles.
# A patch whose header has lines "Script: tests/ci/NAME.sh" is also run
# against those scripts (column "scripts"): the mechanisms kvrun's own
# runs exercise (--resume, write errors, merges, probing) are seen there,
# not by the case suite or a unit test.
# Exit 0 only when every mutant was killed.
set -eu
root=$(pwd)
if [ $# -gt 0 ]; then patches="$*"; else patches=$(ls tests/mutants/*.patch); fi
scratch=${KV_MUTANT_DIR:-}
if [ -z "$scratch" ]; then
    scratch=$(mktemp -d /tmp/kv_mutants.XXXXXX)
    trap 'rm -rf "$scratch"' EXIT
fi
start=$(date +%s)
out="$root/reports/mutants"
mkdir -p "$out"

# Tracked files and untracked ones git does not ignore: the tree as it is.
git ls-files -z -c -o --exclude-standard | tar --null -T - --ignore-failed-read -cf - | tar -xf - -C "$scratch"
[ -d build ] && cp -a build "$scratch/"
cd "$scratch"
log="$out/mutants.log"
: >"$log"

build() { ninja -j"${KV_JOBS:-2}" everything >>"$log" 2>&1; }
suite() { build/kvrun cases/ --report-dir=build/mutant-report >>"$log" 2>&1; }
units() { sh tests/units.sh build/tests >>"$log" 2>&1; }
scripts() {
    rc=0
    for sc in $(sed -n 's/^Script: //p' "$1"); do sh "$sc" >>"$log" 2>&1 || rc=1; done
    return $rc
}

echo "mutants: baseline (the unmutated tree must build and pass) in $scratch"
if ! build || ! suite || ! units; then
    tail -30 "$log"
    echo "mutants: the unmutated tree does not pass; nothing to learn (log: $log)" >&2
    trap - EXIT
    exit 2
fi

row() { printf '%-34s %-8s %-8s %-8s %s\n' "$@" | tee -a "$out/table.txt"; }
: >"$out/table.txt"
row mutant suite units scripts verdict
total=0
killed=0
bad=""
for p in $patches; do
    case "$p" in /*) ;; *) p="$root/$p" ;; esac
    name=$(basename "$p" .patch)
    total=$((total + 1))
    echo "==== $name" >>"$log"
    if ! patch -p1 --forward --silent --no-backup-if-mismatch <"$p" >>"$log" 2>&1; then
        row "$name" - - - "DOES NOT APPLY"
        bad="$bad $name"
        continue
    fi
    s=- u=- c=- verdict=
    if ! build; then
        verdict="DOES NOT BUILD"
        bad="$bad $name"
    else
        if suite; then s=pass; else s=FAIL; fi
        if units; then u=pass; else u=FAIL; fi
        if grep -q '^Script: ' "$p"; then if scripts "$p"; then c=pass; else c=FAIL; fi; fi
        if [ $s = FAIL ] || [ $u = FAIL ] || [ $c = FAIL ]; then
            verdict=killed
            killed=$((killed + 1))
        else
            verdict=SURVIVED
            bad="$bad $name"
        fi
    fi
    row "$name" $s $u $c "$verdict"
    patch -p1 -R --silent --no-backup-if-mismatch <"$p" >>"$log" 2>&1
done
build || true

echo "mutants: $killed killed / $total total in $(($(date +%s) - start)) s" | tee -a "$out/table.txt"
if [ -n "$bad" ]; then
    echo "mutants: FAILED:$bad" >&2
    exit 1
fi
