#!/usr/bin/env python3
"""tests/docs/source_tests.py SRC_DIR — docs/development.md's "Where each folder is
tested" table against the tree: every source folder (a folder of C, CUDA or header
files outside tests/, bench/, build*/) has a row, every folder of tests/ is named in
some row, and every folder a row names exists. Prints each breach as FILE:LINE: error;
exit 1 if any. --selftest: the checker on a made-up tree reports each kind once."""
import os
import re
import sys
import tempfile

SKIP = ("tests", "bench", "build", ".git", "docs", "scripts", "models")
CODE = (".c", ".h", ".cuh", ".cu")


def source_folders(root):
    out = set()
    for d, subs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        top = rel.split(os.sep)[0]
        if rel == "." or top in SKIP or top.startswith("build") or top.startswith("."):
            if rel != ".":
                subs[:] = []
            continue
        if any(f.endswith(CODE) for f in files):
            out.add(rel.replace(os.sep, "/") + "/")
    return out


def test_folders(root):
    t = os.path.join(root, "tests")
    return {"tests/" + n for n in os.listdir(t) if os.path.isdir(os.path.join(t, n))}


def check(root):
    doc = os.path.join(root, "docs", "development.md")
    lines = open(doc, encoding="utf-8").read().split("\n")
    errs, rows, named, start = [], {}, set(), None
    for i, line in enumerate(lines, 1):
        if line.startswith("## Where each folder is tested"):
            start = i
        elif start and line.startswith("## "):
            break
        elif start:
            m = re.match(r"\|\s*([^|]+?)\s*\|\s*([^|]+?)\s*\|\s*$", line)
            if m and m.group(1) not in ("source", "---"):
                tests = [t.strip() for t in m.group(2).split(",")]
                rows[m.group(1)] = i
                for t in tests:
                    named.add(t)
                    if not os.path.isdir(os.path.join(root, t)):
                        errs.append("%s:%d: error: %s names %s, which does not exist" % (doc, i, m.group(1), t))
                if m.group(1) != "the whole tree" and not os.path.isdir(os.path.join(root, m.group(1))):
                    errs.append("%s:%d: error: a row for %s, which does not exist" % (doc, i, m.group(1)))
    if start is None:
        return ["%s:1: error: no \"## Where each folder is tested\" section" % doc]
    for s in sorted(source_folders(root) - set(rows)):
        errs.append("%s:%d: error: the source folder %s has no row: say which tests/ folders test it" % (doc, start, s))
    for t in sorted(test_folders(root) - named):
        errs.append("%s:%d: error: %s is in no row: say which source folder it tests" % (doc, start, t))
    return errs


def selftest():
    with tempfile.TemporaryDirectory() as root:
        for d in ("a", "b/c", "tests/ta", "tests/tb", "docs"):
            os.makedirs(os.path.join(root, d))
        for f in ("a/x.c", "b/c/y.h"):
            open(os.path.join(root, f), "w").close()
        open(os.path.join(root, "docs/development.md"), "w").write(
            "## Where each folder is tested\n\n| source | tests |\n|---|---|\n| a/ | tests/ta, tests/gone |\n"
            "| z/ | tests/ta |\n\n## Next\n")
        errs = check(root)
        want = ["names tests/gone", "a row for z/", "b/c/ has no row", "tests/tb is in no row"]
        ok = len(errs) == len(want) and all(any(w in e for e in errs) for w in want)
        print("\n".join(errs))
        print("selftest %s" % ("passed" if ok else "FAILED"))
        return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--selftest"]:
        sys.exit(selftest())
    errs = check(sys.argv[1])
    print("\n".join(errs) if errs else "every source folder and every test folder is in the table")
    sys.exit(1 if errs else 0)
