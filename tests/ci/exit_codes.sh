#!/bin/sh
# One exit-code policy (README "Exit codes"): 0 nothing failed, 1 something
# failed, 2 a usage or configuration error. Every variable kvrun reads is
# checked for an empty and an unknown value (exit 2, the message names the
# variable); list parsers strip blanks alike; unreadable inputs are refused.
. tests/ci/lib.sh
R="--report-dir=$T/r"
CASE="--op=neg --dtype=u8 --shape=4x5 --fill=exact --device=cpu,accel"
expect 0 "" "a passing case line exits 0" -- $KVRUN $CASE $R
for var in KV_NO_DISPATCH_CACHE KV_REDISPATCH_GATE KV_ACCEL_TARGET KV_ACCEL_DISABLE KV_NO_REDISPATCH \
    KV_PERFDISPATCH_FORCE KV_PERFDISPATCH_LOG KV_PERFDISPATCH_RETUNE KV_PERFDISPATCH_WARMUP \
    KV_PERFDISPATCH_REPS KV_PERFDISPATCH_TUNE KV_PERFDISPATCH_RETUNE_MS KV_PERFDISPATCH_REWARMUP \
    KV_PERFDISPATCH_SAMPLE_NS KV_CPU_ISA KV_BACKEND_PROBE_TIMEOUT KV_EXACT_VERIFY KV_CACHING_ALLOCATOR; do
    expect 2 "$var" "$var= (empty) exits 2 naming it" -- env "$var=" $KVRUN $CASE $R
done
for pair in KV_NO_DISPATCH_CACHE=yes KV_REDISPATCH_GATE=fast KV_ACCEL_TARGET=nope KV_ACCEL_DISABLE=bogus \
    KV_PERFDISPATCH_FORCE=neg KV_PERFDISPATCH_LOG=2 KV_PERFDISPATCH_RETUNE=x KV_PERFDISPATCH_WARMUP=-1 \
    KV_PERFDISPATCH_REPS=0 KV_PERFDISPATCH_TUNE=2 KV_CPU_ISA=foo KV_BACKEND_PROBE_TIMEOUT=0 KV_EXACT_VERIFY=zz \
    KV_PERFDISPATCH_RETUNE=mm:x KV_CACHING_ALLOCATOR=no KV_CACHING_ALLOCATOR=2; do
    expect 2 "${pair%%=*}" "$pair (unknown value) exits 2 naming it" -- env "$pair" $KVRUN $CASE $R
done
expect 0 "" "KV_ACCEL_DISABLE='metadata, cat' strips blanks like the force map" -- \
    env "KV_ACCEL_DISABLE=metadata, cat" $KVRUN $CASE $R
expect 0 "" "KV_PERFDISPATCH_FORCE=' neg : ref ' strips blanks" -- \
    env "KV_PERFDISPATCH_FORCE= neg : ref " $KVRUN $CASE $R
expect 0 "" "KV_CPU_ISA=sse2 is accepted" -- env KV_CPU_ISA=sse2 $KVRUN $CASE $R
expect 0 "" "KV_CACHING_ALLOCATOR=0 is accepted" -- env KV_CACHING_ALLOCATOR=0 $KVRUN $CASE $R
expect 2 "did you mean --filter?" "--fitler is an unknown flag with a suggestion" -- $KVRUN cases/unary.case --fitler=x $R
expect 2 "unknown flag --bogus" "an unknown flag is a usage error" -- $KVRUN cases/unary.case --bogus $R
expect 2 "--jobs=0" "a bad flag value exits 2" -- $KVRUN cases/unary.case --jobs=0 $R
expect 2 "not a regular file" "--batch=/dev/zero is refused" -- $KVRUN --batch=/dev/zero $R
printf -- '--op=neg --dtype=u8\000 --shape=4x5\n' >"$T/nul.case"
expect 2 "a NUL byte at line 1, column 20" "a NUL byte in a case file is refused" -- $KVRUN "$T/nul.case" $R
head -c 17000000 /dev/zero | tr '\000' '#' >"$T/big.case"
expect 2 "more than the 16777216" "an oversized case file is refused" -- $KVRUN "$T/big.case" $R
printf 'x\000y\n' >"$T/nul.baseline"
expect 2 "NUL byte" "a NUL byte in a baseline is refused" -- $KVRUN $CASE --baseline="$T/nul.baseline" $R
expect 2 "not a regular file" "a baseline that is no regular file is refused" -- $KVRUN $CASE --baseline=/dev/zero $R
# 90,000 identical alternatives collapse to one case (the duplicate scan
# was quadratic: 17 s; its speed is no timed test's business, the
# per-script timings in run_tests.sh show it).
python3 -c "print('--op=neg --dtype=u8 --shape=4x5 --fill=exact --seed=' + ','.join(['0'] * 90000))" >"$T/many.case"
expect 0 "89999 duplicate cases" "90,000 identical alternatives collapse to one case" -- $KVRUN "$T/many.case" --list
# A check that does not apply to a case (threads on one that expects an
# error) gives a SKIP row saying so, not a case without rows, which the
# runner reports as a worker that could not run it (ERROR, exit 1).
expect 0 "SKIP 1, CRASH 0" "a check that does not apply is one SKIP row" -- \
    $KVRUN --op=add.Tensor --dtype=f32 --shape=3x4:5x4 --fill=exact --check=threads --expect=shape --report-dir="$T/skip"
expect 0 '"check":"threads","backend":"cpu","dtype":"f32","status":"SKIP","message":"no check of threads applies' \
    "... which says why" -- cat "$T/skip/results.jsonl"
finish
