#!/usr/bin/env python3
"""The row check of tests/test_partial.sh (issue 21): what a run of the
whole suite gave a partial backend, read from its results.jsonl.

    partial_rows.py RESULTS.jsonl NAME OP[,OP...]
    partial_rows.py --accel-only RESULTS.jsonl NAME

NAME is the plugin's backend name; OPs are the ops it has kernels for.
Fails (exit 1, one line per reason) when:
  - any row of the run is FAIL, ERROR, CRASH, TIMEOUT or XPASS;
  - a row filed under NAME that is not UNSUPPORTED or SKIP is for an op
    outside OPs (a row the plugin has no kernel for);
  - an op of OPs has no PASS row under NAME (the plugin's kernels never
    ran: a check that passes on an empty corpus proves nothing);
  - there are no accel rows (the run never used the accel device);
  - a row says the harness could not build, place or read back a case's
    tensors for want of an op on NAME's key ("cannot give it its lazy bits
    / grad", "cannot place it", "cannot slice the batch" ... "no kernel for
    key NAME"): inputs are built on the host and moved with the copy
    operations, so a plugin without the default fallback needs no op it
    did not register for them (docs/bringup.md). The one exception, a
    written input that requires grad, says "non-leaf" instead.
With --accel-only (a run of the device=accel cases with NAME as the accel
target, which files nothing under NAME) only the first and last apply.
Prints the counts it read, which the test's log shows."""
import collections
import json
import re
import sys

# What the runner says when it cannot build or read back a case's tensors
# (runner/exec/lazy_inputs.c, runner/check/check_lazy.c, check_program*.c).
HARNESS = re.compile(r"cannot (give it its lazy bits / grad|place it|place the inputs|slice the batch)")


def main(argv):
    accel_only = len(argv) == 4 and argv[1] == "--accel-only"
    if len(argv) != 4:
        print("usage: partial_rows.py RESULTS.jsonl NAME OP[,OP...] | --accel-only RESULTS.jsonl NAME",
              file=sys.stderr)
        return 2
    if accel_only:
        path, name, ops = argv[2], argv[3], set()
    else:
        path, name, ops = argv[1], argv[2], set(argv[3].split(","))
    bad_status = {"FAIL", "ERROR", "CRASH", "TIMEOUT", "XPASS"}
    counts = collections.Counter()
    own = collections.Counter()
    accel = collections.Counter()
    harness = collections.Counter()
    passed = set()
    problems = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                r = json.loads(line)
            except ValueError as e:
                problems.append(f"{path}:{n}: not a JSON row: {e}")
                continue
            st = r["status"]
            counts[st] += 1
            if st in bad_status:
                problems.append(f"{st} {r['case_id']} (check {r['check']}, backend {r['backend']}): {r['message']}")
            if st != "PASS" and f"no kernel for key {name} " in r["message"] and HARNESS.search(r["message"]):
                harness[st] += 1
                problems.append(f"{st} {r['case_id']} (check {r['check']}): the harness needed an op on {name}'s key: "
                                f"{r['message']}")
            if r["backend"] == "accel":
                accel[st] += 1
            if r["backend"] != name:
                continue
            own[st] += 1
            if st in ("UNSUPPORTED", "SKIP"):
                continue
            if r["op"] not in ops:
                problems.append(f"{st} row under {name} for {r['op']}, which it has no kernel for: "
                                f"{r['case_id']} (check {r['check']}): {r['message']}")
            elif st == "PASS":
                passed.add(r["op"])
    if accel_only and sum(own.values()) > 0:
        problems.append(f"{sum(own.values())} rows under {name} in a run of accel cases only")
    for op in sorted(ops - passed):
        problems.append(f"no PASS row under {name} for {op}: its kernel never ran")
    if sum(accel.values()) == 0:
        problems.append("no accel rows: the run did not use the accel device")

    def fmt(c):
        return " ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"

    print(f"partial_rows: {name}: {sum(counts.values())} rows ({fmt(counts)}); under {name}: {fmt(own)}; "
          f"accel: {fmt(accel)}; harness ops on {name}: {fmt(harness)}; ops with a PASS under {name}: {','.join(sorted(passed)) or 'none'}")
    for p in problems[:40]:
        print(f"partial_rows: {p}")
    if len(problems) > 40:
        print(f"partial_rows: ... and {len(problems) - 40} more")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
