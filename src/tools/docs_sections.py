#!/usr/bin/env python3
"""The generated sections of README.md and docs/*.md.

A figure that depends on the cases, the goldens or the machine is never
typed by hand into the docs: it sits between two markers,

    <!-- generated:NAME -->
    ...
    <!-- /generated:NAME -->

and this script writes it from a real run. `ninja docs` runs the suite
(both halves of `ninja run`) and rewrites every section; `ninja test` runs
`check` over the reports its own suite runs wrote and fails, naming each
stale section, when the text differs from what the run printed.

    docs_sections.py write  [--suite=DIR --accel=DIR --opencl=DIR]   (default: run them)
    docs_sections.py check   --suite=DIR --accel=DIR --opencl=DIR

(the report folders of `ninja run`'s three parts: the suite, oneDNN as the
accel target, OpenCL as the accel target)

Rows of the CUDA plugin are left out of every count: CI builds it where
nvcc exists and, without a GPU, it only adds UNSUPPORTED rows, so the
figures are those of every machine with or without nvcc.
"""
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KVRUN = os.path.join("build", "kvrun")
MARK = re.compile(r"(<!-- generated:([a-z0-9-]+)[^>]*-->\n)(.*?)(<!-- /generated:\2 -->)", re.S)
STATUSES = ["PASS", "FAIL", "ERROR", "UNSUPPORTED", "SKIP", "CRASH", "TIMEOUT", "XFAIL", "XPASS", "FLAKY"]
LEFT_OUT = {"cuda"}


def fail(msg):
    print("docs_sections: " + msg, file=sys.stderr)
    sys.exit(2)


def read_run(folder):
    """meta.json and per-status, per-backend counts of results.jsonl."""
    meta_path = os.path.join(folder, "meta.json")
    rows_path = os.path.join(folder, "results.jsonl.gz")  # --gzip-results
    if not os.path.isfile(rows_path):
        rows_path = os.path.join(folder, "results.jsonl")
    for p in (meta_path, rows_path):
        if not os.path.isfile(p):
            fail("%s: missing (is %s a finished kvrun report folder?)" % (p, folder))
    with open(meta_path) as f:
        meta = json.load(f)
    if not meta.get("complete"):
        fail("%s: the run is incomplete; figures come from whole runs only" % meta_path)
    status, backend = {}, {}
    n = 0
    opener = gzip.open if rows_path.endswith(".gz") else open
    with opener(rows_path, "rt") as f:
        for line in f:
            row = json.loads(line)
            b = row.get("backend", "")
            if b in LEFT_OUT:
                continue
            n += 1
            status[row["status"]] = status.get(row["status"], 0) + 1
            backend[b] = backend.get(b, 0) + 1
    if n == 0:
        fail("%s: no rows; a run that checked nothing proves nothing" % rows_path)
    return meta, status, backend, n


def run_figures(title, command, folder):
    meta, status, backend, n = read_run(folder)
    lines = ["%s (`%s`): %d cases, %d rows." % (title, command, meta["ncases"], n), ""]
    lines.append("| " + " | ".join(s for s in STATUSES if status.get(s)) + " |")
    lines.append("|" + "---|" * len([s for s in STATUSES if status.get(s)]))
    lines.append("| " + " | ".join(str(status[s]) for s in STATUSES if status.get(s)) + " |")
    lines.append("")
    lines.append("Rows per backend: " + ", ".join("%s %d" % (b, backend[b]) for b in sorted(backend)) + ".")
    rates = meta.get("fastpath_hit_rates") or {}
    for gate in ("seed", "exact"):
        r = rates.get(gate)
        if not r:
            continue
        lines.append(
            "Fast path, %s gate: fired in %d of %d accel cases; plain cases %d of %d, "
            "lazy-bit and mode cases %d of %d." % (gate, r["cases_hit"], r["cases"], r["plain_hit"], r["plain_cases"],
                                                    r["cases_hit"] - r["plain_hit"], r["cases"] - r["plain_cases"]))
    return lines


PARTS = (
    ("suite", "The suite", "build/kvrun cases/", []),
    ("accel", "oneDNN as the accel target", "build/kvrun cases/ --filter='*device=accel*' --accel-target=onednn",
     ["--filter=*device=accel*", "--require-backend=onednn", "--accel-target=onednn"]),
    ("opencl", "OpenCL as the accel target", "build/kvrun cases/ --filter='*device=accel*' --accel-target=opencl",
     ["--filter=*device=accel*", "--require-backend=opencl", "--accel-target=opencl"]),
)


def section_suite_figures(ctx):
    lines = []
    for name, title, command, _ in PARTS:
        if lines:
            lines.append("")
        lines += run_figures(title, command, ctx[name])
    return "\n".join(lines) + "\n"


def section_kvrun_help(ctx):
    with open(os.path.join(ROOT, "src", "tools", "kvrun_help.txt")) as f:
        return "```text\n" + f.read() + "```\n"


def section_counts(ctx):
    ops = 0
    with open(os.path.join(ROOT, "kernels", "ops.schema")) as f:
        for line in f:
            if line.strip() and not line.lstrip().startswith("#"):
                ops += 1
    with open(os.path.join(ROOT, "golden", "MANIFEST")) as f:
        golden = sum(1 for line in f if line.strip() and not line.startswith("#"))
    cases = [p for p in subprocess.run(["find", "cases", "-name", "*.case"], cwd=ROOT, capture_output=True,
                                       text=True).stdout.split() if p]
    return "%d ops in `kernels/ops.schema`, %d case files under `cases/`, %d entries in `golden/MANIFEST`.\n" % (
        ops, len(cases), golden)


def section_fail_example(ctx):
    """The console of a run with a deliberately wrong plugin (README's tour
    and the tutorial): what a FAIL looks like, from a real run."""
    plugin = os.path.join("build", "tests", "dump-plugin", "libwrong_neg.so")
    if not os.path.isfile(os.path.join(ROOT, plugin)):
        fail("%s not built (ninja tests builds it)" % plugin)
    with tempfile.TemporaryDirectory() as tmp:
        p = subprocess.run([KVRUN, "--backend=" + plugin, "--op=neg", "--dtype=f32", "--shape=4x5", "--fill=exact",
                            "--report-dir=" + tmp, "-q"], cwd=ROOT, capture_output=True, text=True,
                           env=dict({k: v for k, v in os.environ.items() if not k.startswith("KV_")}, NO_COLOR="1"))
    if p.returncode != 1:
        fail("the wrong-neg example exited %d, not 1:\n%s%s" % (p.returncode, p.stdout, p.stderr))
    out = p.stdout + p.stderr
    # Times change from run to run: the only thing masked.
    out = re.sub(r"\d+\.\d+ s\b", "<t> s", out)
    out = re.sub(r"--report-dir=\S+ ?", "", out)
    return "```text\n$ build/kvrun --backend=%s --op=neg --dtype=f32 --shape=4x5 --fill=exact\n%s```\n" % (plugin, out)


SECTIONS = {
    "suite-figures": section_suite_figures,
    "kvrun-help": section_kvrun_help,
    "counts": section_counts,
    "fail-example": section_fail_example,
}


def doc_files():
    files = [os.path.join(ROOT, "README.md")]
    docs = os.path.join(ROOT, "docs")
    files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    return files


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but '-' and
    '_' dropped, spaces to '-'."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def check_links():
    """Every relative link resolves (file and #anchor), and every page
    under docs/ is reachable from README.md. Returns the problems."""
    problems, anchors, links = [], {}, {}
    for path in doc_files():
        with open(path) as f:
            text = f.read()
        body = re.sub(r"```.*?```", "", text, flags=re.S)
        anchors[path] = {slug(h) for h in re.findall(r"^#+ (.*)$", body, re.M)}
        links[path] = re.findall(r"\]\(([^)\s]+)\)", body)
    reach, todo = set(), [os.path.join(ROOT, "README.md")]
    while todo:
        page = todo.pop()
        if page in reach:
            continue
        reach.add(page)
        for link in links.get(page, []):
            if re.match(r"[a-z]+:", link):
                continue
            target, _, anchor = link.partition("#")
            full = os.path.normpath(os.path.join(os.path.dirname(page), target)) if target else page
            where = "%s: link '%s'" % (os.path.relpath(page, ROOT), link)
            if not os.path.exists(full):
                problems.append(where + ": no such file")
                continue
            if anchor and full in anchors and anchor not in anchors[full]:
                problems.append(where + ": no such heading in " + os.path.relpath(full, ROOT))
            if full in anchors:
                todo.append(full)
    for page in anchors:
        if page not in reach:
            problems.append("%s: not reachable from README.md" % os.path.relpath(page, ROOT))
    return problems


def main():
    args = sys.argv[1:]
    if not args or args[0] not in ("write", "check"):
        fail("usage: docs_sections.py write|check [--suite=DIR --accel=DIR --opencl=DIR]")
    mode, ctx = args[0], {}
    for a in args[1:]:
        m = re.match(r"--(suite|accel|opencl)=(.+)$", a)
        if not m:
            fail("unknown argument '%s'" % a)
        ctx[m.group(1)] = m.group(2)
    os.chdir(ROOT)
    if any(name not in ctx for name, _, _, _ in PARTS):
        if mode == "check":
            fail("check needs --suite=DIR, --accel=DIR and --opencl=DIR (the report folders of ninja run's parts)")
        base = os.path.join("build", "docs-run")
        for name, _, _, extra in PARTS:
            ctx[name] = os.path.join(base, name)
            code = subprocess.run([KVRUN, "cases/", "-q", "--report-dir=" + ctx[name]] + extra,
                                  env={k: v for k, v in os.environ.items() if not k.startswith("KV_")}).returncode
            if code != 0:
                fail("kvrun cases/ %s exited %d: the docs describe a green run" % (" ".join(extra), code))
    cache, seen, stale = {}, set(), []
    for path in doc_files():
        with open(path) as f:
            text = f.read()

        def fill(m):
            name = m.group(2)
            if name not in SECTIONS:
                fail("%s: unknown generated section '%s' (known: %s)" % (path, name, ", ".join(sorted(SECTIONS))))
            seen.add(name)
            if name not in cache:
                cache[name] = SECTIONS[name](ctx)
            if m.group(3) != cache[name]:
                stale.append("%s: section '%s'" % (os.path.relpath(path, ROOT), name))
            return m.group(1) + cache[name] + m.group(4)

        new = MARK.sub(fill, text)
        if mode == "write" and new != text:
            with open(path, "w") as f:
                f.write(new)
    problems = check_links()
    if problems:
        print("docs_sections: broken or unreachable pages:\n  " + "\n  ".join(problems))
        sys.exit(1)
    missing = set(SECTIONS) - seen
    if missing:
        fail("no file holds the section(s) %s" % ", ".join(sorted(missing)))
    if mode == "check":
        if stale:
            print("docs_sections: stale (run `ninja docs` and commit):\n  " + "\n  ".join(stale))
            sys.exit(1)
        print("docs_sections: %d generated sections, all as the runs printed" % len(seen))
    else:
        print("docs_sections: %s" % ("rewrote " + ", ".join(stale) if stale else "every section was up to date"))


main()
