#!/usr/bin/env python3
"""Every relative link in README.md and docs/*.md names a file of the repository.

    doc_links.py ROOT              checks ROOT/README.md and ROOT/docs/*.md
    doc_links.py ROOT FILE...      checks the named files (paths relative to ROOT)
    doc_links.py --selftest        a tree with good and broken links: the broken ones,
                                   and only they, must be reported

A link is Markdown's [text](target), ![alt](target) or a reference definition
"[name]: target", outside code (fenced blocks, indented blocks, `spans`). Targets with
a scheme (https:, mailto:) and in-page anchors (#...) are not checked; "#anchor" and a
"title" are cut off the rest. A target must exist inside ROOT: one that leaves the
repository (../shared/...) is reported too, since a clone does not have it.
Reports "FILE:LINE:COL: error: ..." for each, and exits 1 when there is any.
"""
import os
import re
import sys
import tempfile

INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
CODESPAN = re.compile(r"(`+)(.+?)\1")


def links(text):
    """(line, col, target) of every link outside code, 1-based."""
    fence = None
    prev_blank = True
    in_indented = False
    for n, line in enumerate(text.split("\n"), 1):
        stripped = line.lstrip()
        m = re.match(r"(```+|~~~+)", stripped)
        if fence:
            if m and stripped.startswith(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        # an indented code block starts after a blank line and runs while indented
        if line.startswith("    ") and (prev_blank or in_indented):
            in_indented = True
            continue
        in_indented = False
        prev_blank = not line.strip()
        # code spans: blank them out, keeping columns
        plain = CODESPAN.sub(lambda s: " " * len(s.group(0)), line)
        for m in INLINE.finditer(plain):
            yield n, m.start(1) + 1, m.group(1)
        m = REFDEF.match(plain)
        if m:
            yield n, m.start(1) + 1, m.group(1)


def check(root, names):
    root = os.path.realpath(root)
    errors, count = [], 0
    for name in names:
        path = os.path.join(root, name)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for line, col, target in links(text):
            target = target.strip("<>")
            if SCHEME.match(target) or target.startswith("#"):
                continue
            count += 1
            rel = target.split("#", 1)[0]
            resolved = os.path.realpath(os.path.join(os.path.dirname(path), rel))
            where = f"{name}:{line}:{col}"
            if resolved != root and not resolved.startswith(root + os.sep):
                errors.append(f"{where}: error: link '{target}' leaves the repository ({resolved})")
            elif not os.path.exists(resolved):
                errors.append(f"{where}: error: link '{target}' names no file ({os.path.relpath(resolved, root)})")
    return errors, count


def default_names(root):
    docs = sorted(n for n in os.listdir(os.path.join(root, "docs")) if n.endswith(".md"))
    return ["README.md"] + ["docs/" + n for n in docs]


def selftest():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        files = {
            "README.md": "[ok](docs/a.md) ![pic](docs/p.svg) [web](https://example.org)\n"
                         "[anchor](#top) [ok2](docs/a.md#sec)\n"
                         "[gone](docs/missing.md)\n"
                         "\n"
                         "    [in code](nowhere.md)\n"
                         "\n"
                         "`[span](nowhere.md)`\n"
                         "```\n[fenced](nowhere.md)\n```\n"
                         "[out](../outside.md)\n",
            "docs/a.md": "[back](../README.md) [title](a.md \"A\")\n[ref]: b.md\n",
            "docs/p.svg": "<svg/>",
        }
        for name, text in files.items():
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(text)
        errors, count = check(root, default_names(root))
        want = ["README.md:3:8: error: link 'docs/missing.md' names no file (docs/missing.md)",
                "docs/a.md:2:8: error: link 'b.md' names no file (docs/b.md)"]
        got = [e for e in errors if "leaves the repository" not in e]
        outside = [e for e in errors if "leaves the repository" in e]
        ok = got == want and len(outside) == 1 and outside[0].startswith("README.md:11:7:") and count == 8
        print("\n".join(errors))
        print(f"selftest: {count} links, {len(errors)} reported: {'ok' if ok else 'FAIL'}")
        return 0 if ok else 1


def main(argv):
    if argv[1:] == ["--selftest"]:
        return selftest()
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    root = argv[1]
    names = argv[2:] or default_names(root)
    errors, count = check(root, names)
    for e in errors:
        print(e)
    print(f"{count} relative links in {len(names)} files, {len(errors)} broken")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
