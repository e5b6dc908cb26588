#!/usr/bin/env python3
"""No product file over 600 lines, no C function over 120 (issue 13), no file header
over 15 (issue 27).

    source_limits.py ROOT             checks the product sources under ROOT against
                                      the allowlist beside this script (allowed.txt)
    source_limits.py ROOT --list      prints every file and function over a limit,
                                      in allowed.txt's format (to see the sizes)
    source_limits.py --selftest       a small tree with each kind of breach: each,
                                      and only they, must be reported

Product sources: the C, CUDA C, flex and bison files (.c .h .cu .cuh .y .l .def) under
frontend/ ir/ passes/ codegen/ contract/ kernels/ runtime/ tools/ and bench/. tests/
is not product code (its golden data and drivers may be as long as they need), nor
are scripts/ (shell) and models/ (model text).

A file's header is the comment it opens with (its first line starts "/*"), counted
from that line to the line that closes it: what the file owns, why, its invariants.
Contracts belong on the declarations they describe, history in docs/ or the log.

A file's size is its number of lines (wc -l). A function is a brace block at the top
level of the file (an extern "C" { ... } block is looked through) whose head, the code
since the previous top-level ';', '}' or preprocessor line, ends with ')' and has no
'=' outside parentheses: that excludes struct, enum and initializer braces. Comments,
strings, character constants and preprocessor lines (with their continuations) are
blanked first, so a '{' inside them does not count. Its size is counted from the line
of its opening '{' to the line of its matching '}', both included; it is reported at
the line of its head's first token. Bison and flex files are held to the file limit
only: their rule actions are brace blocks that are not C functions.

allowed.txt is the one list of known exceptions, each with the size it had when
listed. The check fails (exit 1), printing "FILE:LINE: error: ..." for each, when
  - a file or function is over its limit and not listed;
  - a listed one grew past its recorded size;
  - a listed one is now within its limit, or no longer exists (the entry is stale:
    delete it, so the list only ever shrinks).
A listed one that shrank but is still over the limit passes, with a note to lower
its entry.
"""
import os
import re
import sys
import tempfile

FILE_LIMIT = 600
FUNCTION_LIMIT = 120
HEADER_LIMIT = 15
FOLDERS = ["frontend", "ir", "passes", "codegen", "contract", "kernels", "runtime", "tools", "bench"]
SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".y", ".l", ".def")
GRAMMAR_EXT = (".y", ".l")
ALLOWED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "allowed.txt")


def blank_noncode(text):
    """text with comments, string and character literals and preprocessor lines
    replaced by spaces (newlines kept, so line numbers hold)."""
    out = []
    i, n = 0, len(text)
    line_start = True  # only whitespace since the last newline
    while i < n:
        c = text[i]
        if c == "\n":
            out.append(c)
            line_start = True
            i += 1
            continue
        if line_start and c == "#":
            # a preprocessor line, with its backslash continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        if c in " \t\r\f\v":
            out.append(c)
            i += 1
            continue
        line_start = False
        two = text[i:i + 2]
        if two == "//":
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if two == "/*":
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else " ")
            i = j
            continue
        out.append(c)
        i += 1
    return "".join(out)


def head_is_function(head):
    """True when the code before a top-level '{' is a function's header."""
    h = head.strip()
    if not h.endswith(")"):
        return False
    depth = 0
    for ch in h:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "=" and depth == 0:
            return False
    return True


def function_name(head):
    """The identifier before the last top-level parenthesised group of a header."""
    h = head.rstrip()
    depth, k = 0, len(h) - 1
    while k >= 0:
        if h[k] == ")":
            depth += 1
        elif h[k] == "(":
            depth -= 1
            if depth == 0:
                break
        k -= 1
    m = re.search(r"([A-Za-z_]\w*)\s*$", h[:max(k, 0)])
    return m.group(1) if m else "?"


def functions(text):
    """(name, head_line, lines) for every top-level function body in C text."""
    code = blank_noncode(text)
    found = []
    stack = []          # per open brace: 'skip' (extern "C"), 'fn', or 'other'
    head_start = 0      # offset where the current top-level head begins
    open_at = None      # (name, head_line, brace_line) of the function being read
    line = 1
    for i, ch in enumerate(code):
        if ch == "\n":
            line += 1
            continue
        if ch not in "{};":
            continue
        depth = sum(1 for k in stack if k != "skip")
        if ch == "{":
            if depth == 0:
                head = code[head_start:i]
                if re.search(r"\bextern\s*\"\s*\"\s*$", head):
                    stack.append("skip")
                    head_start = i + 1
                    continue
                if head_is_function(head):
                    stripped = head.lstrip()
                    first = head_start + (len(head) - len(stripped))
                    head_line = code.count("\n", 0, first) + 1
                    open_at = (function_name(head), head_line, line)
                    stack.append("fn")
                    continue
            stack.append("other")
        elif ch == "}":
            if not stack:
                continue  # unbalanced (a brace split across #if branches): ignore
            kind = stack.pop()
            if kind == "fn" and depth == 1:
                name, head_line, brace_line = open_at
                found.append((name, head_line, line - brace_line + 1))
            if depth <= 1:
                head_start = i + 1
        elif depth == 0:  # ';'
            head_start = i + 1
    return found


def line_count(text):
    return text.count("\n") + (0 if text.endswith("\n") or not text else 1)


def product_files(root):
    names = []
    for folder in FOLDERS:
        base = os.path.join(root, folder)
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            for f in sorted(filenames):
                if f.endswith(SOURCE_EXT):
                    names.append(os.path.relpath(os.path.join(dirpath, f), root))
    return sorted(names)


def header_lines(text):
    """Lines of the comment a file opens with (0: it opens with code)."""
    if not text.startswith("/*"):
        return 0
    end = text.find("*/")
    return text.count("\n", 0, end if end >= 0 else len(text)) + 1


def measure(root):
    """{key: (line, size)} of every product file ('file', PATH), its header ('header',
    PATH) and function ('function', PATH, NAME); of two functions with one name (#if
    branches) the longer."""
    sizes = {}
    for rel in product_files(root):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            text = f.read()
        sizes[("file", rel)] = (FILE_LIMIT + 1, line_count(text))
        sizes[("header", rel)] = (HEADER_LIMIT + 1, header_lines(text))
        if rel.endswith(GRAMMAR_EXT):
            continue
        for name, head_line, lines in functions(text):
            key = ("function", rel, name)
            if lines > sizes.get(key, (0, 0))[1]:
                sizes[key] = (head_line, lines)
    return sizes


def limit_of(key):
    return {"file": FILE_LIMIT, "header": HEADER_LIMIT}.get(key[0], FUNCTION_LIMIT)


def over_limit(sizes):
    return {k: v for k, v in sizes.items() if v[1] > limit_of(k)}


def read_allowed(path, shown):
    """{key: (recorded size, allowed.txt line)}; entries are 'PATH SIZE' for a file,
    'PATH (header) SIZE' for its header, 'PATH NAME SIZE' for a function, then an
    optional '# why'."""
    allowed, errors = {}, []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].split()
            if not line:
                continue
            where = f"{shown}:{n}"
            if len(line) not in (2, 3) or not line[-1].isdigit():
                errors.append(f"{where}: error: expected 'PATH SIZE' or 'PATH FUNCTION SIZE'")
                continue
            key = (("file", line[0]) if len(line) == 2 else ("header", line[0]) if line[1] == "(header)"
                   else ("function", line[0], line[1]))
            if key in allowed:
                errors.append(f"{where}: error: {' '.join(key[1:])} is listed twice")
            allowed[key] = (int(line[-1]), n)
    return allowed, errors


def describe(key):
    if key[0] == "function":
        return f"function {key[2]}"
    return f"file {key[1]}" if key[0] == "file" else f"the header of {key[1]}"


def check(root, allowed_path):
    sizes = measure(root)
    over = over_limit(sizes)
    listed = os.path.relpath(allowed_path, root)
    allowed, errors = read_allowed(allowed_path, listed)
    notes = []
    for key, (line, size) in sorted(over.items()):
        limit = limit_of(key)
        where = f"{key[1]}:{line}"
        if key not in allowed:
            errors.append(f"{where}: error: {describe(key)} has {size} lines (limit {limit}); " +
                          ("say what the file owns, why and its invariants; contracts go on the declarations, "
                           "history to docs/" if key[0] == "header" else "split it by concern"))
            continue
        recorded, _ = allowed[key]
        if size > recorded:
            errors.append(f"{where}: error: {describe(key)} grew from {recorded} to {size} lines "
                          f"(limit {limit}; listed in {listed}); " +
                          ("shorten it instead" if key[0] == "header" else "split it instead"))
        elif size < recorded:
            notes.append(f"{where}: note: {describe(key)} shrank from {recorded} to {size} lines: "
                         f"lower its entry in {listed}")
    for key, (recorded, n) in sorted(allowed.items(), key=lambda kv: kv[1][1]):
        if key in over:
            continue
        what = f"function {key[2]} in {key[1]}" if key[0] == "function" else key[1] if key[0] == "file" else \
            f"the header of {key[1]}"
        if key in sizes:
            state = f"is within its limit now ({sizes[key][1]} lines, limit {limit_of(key)})"
        else:
            state = "no longer exists"
        errors.append(f"{listed}:{n}: error: stale entry: {what} {state}; delete the entry")
    return errors, notes, sizes


def listing(sizes):
    out = []
    for key, (_, size) in sorted(over_limit(sizes).items()):
        out.append(f"{key[1]} {key[2]} {size}" if key[0] == "function" else f"{key[1]} {size}" if key[0] == "file"
                   else f"{key[1]} (header) {size}")
    return out


def selftest():
    body = lambda n: "".join(f"  x += {k};\n" for k in range(n - 2))  # n lines with braces
    files = {
        # 121-line function (unlisted): reported; the 120-line one beside it is not
        "passes/a.c": "/* a { in a comment */\n#define M(x) { x }\n"
                      "static int ok(int x) {\n" + body(120) + "}\n"
                      "static const char *s = \"{\";\n"
                      "static int too_long(int x,\n                    int y) {\n" + body(121) + "}\n"
                      "struct S {\n  int a;\n};\n",
        # a listed function that grew, and one that shrank but is still over
        "codegen/b.cuh": "extern \"C\" {\n__global__ void grew(float *p) {\n" + body(130) + "}\n"
                         "__global__ void shrank(float *p) {\n" + body(125) + "}\n} /* extern \"C\" */\n",
        # a 601-line file, unlisted
        "kernels/big.h": "\n" * 601,
        # a listed file now within its limit (stale)
        "runtime/small.c": "int f(void) {\n  return 0;\n}\n",
        # grammar actions are not functions
        "frontend/g.y": "%%\nrule: A {\n" + body(200) + "}\n;\n",
        # tests/ is not product code
        "tests/t.c": "int t(void) {\n" + body(300) + "}\n",
        # a 16-line header (unlisted), and a listed one that grew
        "ir/h.h": "/*" + "\n" * 15 + "*/\nint h;\n",
        "ir/g.h": "/*" + "\n" * 17 + "*/\n",
    }
    allowed = ("# why\n"
               "codegen/b.cuh grew 129\n"
               "codegen/b.cuh shrank 130\n"
               "runtime/small.c 700   # stale: within its limit\n"
               "runtime/gone.c 800\n"
               "passes/a.c ok 125\n"
               "ir/g.h (header) 17\n")
    with tempfile.TemporaryDirectory() as root:
        for name, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(name)), exist_ok=True)
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(text)
        path = os.path.join(root, "allowed.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.write(allowed)
        errors, notes, _ = check(root, path)
        listed = "allowed.txt"
        want = [
            "kernels/big.h:601: error: file kernels/big.h has 601 lines (limit 600); split it by concern",
            "codegen/b.cuh:2: error: function grew grew from 129 to 130 lines (limit 120; "
            "listed in allowed.txt); split it instead",
            "passes/a.c:124: error: function too_long has 121 lines (limit 120); split it by concern",
            "ir/g.h:16: error: the header of ir/g.h grew from 17 to 18 lines (limit 15; listed in allowed.txt); "
            "shorten it instead",
            "ir/h.h:16: error: the header of ir/h.h has 16 lines (limit 15); say what the file owns, why and its "
            "invariants; contracts go on the declarations, history to docs/",
            "allowed.txt:4: error: stale entry: runtime/small.c is within its limit now "
            "(3 lines, limit 600); delete the entry",
            "allowed.txt:5: error: stale entry: runtime/gone.c no longer exists; delete the entry",
            "allowed.txt:6: error: stale entry: function ok in passes/a.c is within its limit now "
            "(120 lines, limit 120); delete the entry",
        ]
        want_notes = ["codegen/b.cuh:132: note: function shrank shrank from 130 to 125 lines: "
                      "lower its entry in allowed.txt"]
        print("\n".join(errors + notes))
        ok = errors == want and notes == want_notes
        if not ok:
            print("selftest: expected:\n" + "\n".join(want + want_notes))
        print(f"selftest: {len(errors)} errors, {len(notes)} notes: {'ok' if ok else 'FAIL'}")
        return 0 if ok else 1


def main(argv):
    if argv[1:] == ["--selftest"]:
        return selftest()
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] != "--list"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    root = argv[1]
    if len(argv) == 3:
        print("\n".join(listing(measure(root))))
        return 0
    errors, notes, sizes = check(root, ALLOWED)
    for line in errors + notes:
        print(line)
    files = sum(1 for k in sizes if k[0] == "file")
    print(f"{files} product files, {len(sizes) - files} functions, "
          f"{len(over_limit(sizes))} over a limit (all listed in {os.path.relpath(ALLOWED, root)}), "
          f"{len(errors)} errors" if not errors else
          f"{files} product files, {len(sizes) - files} functions: {len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
