#!/bin/sh
# Declared support (`ninja test`, issue 21; docs/bringup.md): a plugin may
# declare the (op, dtype) pairs it supports (kv_backend_desc's `support`).
# "fourdecl" (tests/plugins/four_ops.c built with -DFOUR_OPS_DECLARE)
# declares relu, mul.Tensor and exp in f32: relu keeps it on contiguous
# inputs, mul.Tensor declines broadcasts and exp has no kernel.
#   1. a declared pair that declines is a FAIL "declared but declined",
#      filed under the plugin; an undeclared decline stays UNSUPPORTED;
#   2. matrix.md marks declared cells (ᵈ) next to the measured mark;
#   3. --require-support is an ERROR row per declared pair no row passed,
#      and for a plugin that declares nothing;
#   4. a plugin that declares nothing keeps today's behaviour (four: the
#      same selection exits 0; tests/test_partial.sh runs it on the suite);
#   5. a declaration naming no op is refused at load (fourbad).
. tests/ci/lib.sh
set -f # the filters below hold brackets: no pathname expansion
DECL=build/tests/partial/libfourdecl.so
FOUR=build/tests/partial/libfour_ops.so
# mul.Tensor's f32 cases include broadcasts it declines; add.Tensor's too,
# but add.Tensor is not declared.
SEL="cases/ --filter=re:^(mul|add)\.Tensor\(dtype=f32, --jobs=2"
expect 1 "declared but declined: fourdecl declares mul.Tensor in f32" \
    "a declared pair that declines is a FAIL under the plugin" -- $KVRUN --backend=$DECL $SEL --report-dir="$T/r1"
expect 0 "" "only declared pairs fail: no FAIL row for add.Tensor, which is not declared" -- \
    sh -c "! grep '\"status\":\"FAIL\"' '$T/r1/results.jsonl' | grep -v '\"op\":\"mul.Tensor\"' | grep -q ."
expect 0 "" "every FAIL is under fourdecl and says declared but declined" -- \
    sh -c "grep '\"status\":\"FAIL\"' '$T/r1/results.jsonl' | grep -v '\"backend\":\"fourdecl\".*declared but declined' | grep -c . | grep -qx 0"
expect 0 "| mul.Tensor | fourdecl |" "matrix.md has the plugin's row" -- cat "$T/r1/matrix.md"
expect 0 "" "matrix.md marks the declared cell, declared vs measured (✗ᵈ)" -- \
    sh -c "grep '^| mul.Tensor | fourdecl |' '$T/r1/matrix.md' | grep -q '✗ᵈ'"
expect 0 "" "an undeclared cell has no mark" -- \
    sh -c "! grep '^| add.Tensor | fourdecl |' '$T/r1/matrix.md' | grep -q 'ᵈ'"
# relu's contiguous f32 cases only: relu is proved, mul.Tensor and exp are
# not selected, so --require-support names both.
RELU="cases/ --filter=re:^relu\(dtype=f32,shape=\[[0-9,]*\],fill=special\) --jobs=2"
expect 0 "" "relu alone: the declared pair passes" -- $KVRUN --backend=$DECL $RELU --report-dir="$T/r2"
expect 1 "fourdecl declares exp in f32, but no row of this run passed for it" \
    "--require-support: a declared pair nothing proved is an ERROR" -- \
    $KVRUN --backend=$DECL $RELU --require-support --report-dir="$T/r3"
expect 0 "" "--require-support names mul.Tensor too, and not relu" -- \
    sh -c "grep -q 'declares mul.Tensor in f32, but no row' '$T/r3/results.jsonl' && ! grep -q 'declares relu in f32, but no row' '$T/r3/results.jsonl'"
expect 0 "" "matrix.md: the kept promise is ✓ᵈ" -- sh -c "grep '^| relu | fourdecl |' '$T/r2/matrix.md' | grep -q '✓ᵈ'"
expect 1 "four declares no supported (op, dtype) pairs" "--require-support with a plugin that declares nothing" -- \
    $KVRUN --backend=$FOUR $RELU --require-support --report-dir="$T/r4"
expect 0 "" "a plugin that declares nothing: its declines stay UNSUPPORTED (exit 0)" -- \
    $KVRUN --backend=$FOUR $SEL --report-dir="$T/r5"
expect 1 "support[0] declares 'no_such_op', which is no op" "a declaration naming no op: the plugin does not load" -- \
    $KVRUN --backend=build/tests/partial/libfourbad.so $RELU --report-dir="$T/r6"
finish
