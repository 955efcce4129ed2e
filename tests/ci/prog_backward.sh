#!/bin/sh
# `backward NAME` in a .prog needs a one-element NAME (docs/run-integrity.md):
# any other size is a FILE:LINE:COL error before anything runs (exit 2),
# not a run that goes green with a backward that never ran.
. tests/ci/lib.sh
prog() {
    cat >"$T/$1.prog" <<EOP
program $1
input x f32 [4,3]
h = mul.Tensor(x, x)
s = sum.dim_IntList(h, none)
output h
backward $2
EOP
}
prog bad h
expect 2 "$T/bad.prog:6:10: backward: 'h' holds 12 elements (shape [4,3]): backward needs a one-element value" \
    "backward of a [4,3] value is an error at its line and column" -- $KVRUN --program="$T/bad.prog" --report-dir="$T/r"
prog good s
expect 0 "" "backward of a one-element value is accepted" -- $KVRUN --program="$T/good.prog" --list
expect 0 "" "the committed programs still load" -- $KVRUN cases/programs.case --list
finish
