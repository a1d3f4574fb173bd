#!/usr/bin/env python3
"""Checks the engine's size limits (docs/architecture.md, "Size limits").

A source file under libengine/ holds at most MAX_LINES lines, and a struct or class declared
there at most MAX_MEMBERS non-static data members. Past those a file or a struct is doing more
than one job, and a newcomer can no longer hold it in their head: split it by job instead of
raising the limit.

The member count reads C++ with a small scanner (comments and literals stripped, braces matched),
not a compiler: it counts each declarator of a data member (`int64_t a = 0, b = 0;` is two) at the
top level of a class body, and skips functions, static members, types, aliases and friends.

Usage: check_source_limits.py [REPO_ROOT]   (exit status 1 when a limit is exceeded)
"""

import os
import re
import sys

MAX_LINES = 600
MAX_MEMBERS = 20
SUFFIXES = (".h", ".cpp", ".cu", ".cuh")
CHECKED_DIRS = ("libengine",)

_CLASS_HEAD = re.compile(r"\b(struct|class)\s+([A-Za-z_]\w*(?:::\w+)*)\s*(?:final\s*)?(?::[^{;()]*)?\{")
_SKIPPED_STARTS = ("using ", "typedef ", "friend ", "static ", "static_assert", "template",
                   "enum ", "struct ", "class ", "union ", "constexpr static")


def strip_comments_and_literals(text):
    """Blanks comments, string and character literals, keeping the line structure."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(text, open_at):
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return len(text) - 1


def top_level_split(s, sep):
    """Splits at `sep` outside (), [], {} and <>."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(s):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth = max(0, depth - 1)
        elif c == sep and depth == 0:
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    return parts


def is_function(statement):
    """A declaration whose first top-level parenthesis comes before any initializer."""
    depth = 0
    for i, c in enumerate(statement):
        if c in "<[":
            depth += 1
        elif c in ">]":
            depth = max(0, depth - 1)
        elif depth == 0 and c in "={":
            return False
        elif depth == 0 and c == "(":
            return True
    return False


def body_statements(body):
    """The top-level statements of a class body: (text, ends_with_brace)."""
    statements, current, i = [], [], 0
    while i < len(body):
        c = body[i]
        if c == "{":
            close = matching_brace(body, i)
            text = "".join(current)
            current.append(body[i:close + 1])
            i = close + 1
            head = text.strip()
            # A function body, or a nested type's body: the statement ends at the brace (a nested
            # type's trailing declarator list is rare enough to ignore).
            if is_function(head) or re.match(r"(?:(?:public|private|protected)\s*:\s*)*(?:enum|struct|class|union|namespace)\b", head):
                statements.append(("".join(current), True))
                current = []
            continue
        if c == ";":
            statements.append(("".join(current), False))
            current = []
        else:
            current.append(c)
        i += 1
    return statements


def count_members(body):
    count = 0
    for statement, brace_ended in body_statements(body):
        s = re.sub(r"\s+", " ", statement).strip()
        s = re.sub(r"^(?:(?:public|private|protected)\s*:\s*)+", "", s)
        if not s or brace_ended or s.startswith(_SKIPPED_STARTS) or is_function(s):
            continue
        if re.match(r"(?:inline |constexpr |mutable )*static\b", s):
            continue
        if re.match(r"[A-Z_][A-Z0-9_]*\s*\(", s):  # a macro such as PSTAR_DISALLOW_COPY(X)
            continue
        count += len([d for d in top_level_split(s, ",") if d.strip()])
    return count


def check_file(path, rel):
    problems = []
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
    if lines > MAX_LINES:
        problems.append(f"{rel}: {lines} lines (limit {MAX_LINES}): split it by job")
    code = strip_comments_and_literals(text)
    for m in _CLASS_HEAD.finditer(code):
        if re.search(r"\benum\s+$", code[max(0, m.start() - 6):m.start()]):
            continue
        open_at = m.end() - 1
        body = code[open_at + 1:matching_brace(code, open_at)]
        members = count_members(body)
        if members > MAX_MEMBERS:
            line = code.count("\n", 0, m.start()) + 1
            problems.append(f"{rel}:{line}: {m.group(1)} {m.group(2)} has {members} data members "
                            f"(limit {MAX_MEMBERS}): group them into parts that own one job")
    return problems


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    problems, files = [], 0
    for top in CHECKED_DIRS:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith(SUFFIXES):
                    files += 1
                    path = os.path.join(dirpath, name)
                    problems += check_file(path, os.path.relpath(path, root))
    for p in problems:
        print(p)
    if files == 0:
        print(f"no sources found under {root}/{{{','.join(CHECKED_DIRS)}}}: wrong root?")
        return 1
    print(f"checked {files} files: {len(problems)} over the limits")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
