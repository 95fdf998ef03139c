#!/usr/bin/env python3
"""Verify call-graph ground-truth files (the shared truth.json format).

Usage:
    scripts/callgraph/check_truth.py [TRUTH.json ...]

Without arguments every tests/fixtures/callgraph/*/truth.json is checked. Paths in a truth
file are relative to the directory holding it (the directory that gets indexed).

For every entry in "calls" the checker requires:
  - caller_path / callee_path: relative, '/'-separated, inside the fixture dir, existing files;
  - line / callee_line: 1-based and inside the file;
  - the call line holds the callee's name token (or an alias of it from a
    `use path::name as alias;` / `from m import name as alias` in the fixture) followed by `(`
    (or `::<` in Rust), in code: comments and string/char literals are blanked first, so a name
    in a comment or a string does not count, and the match must not be the callee's own
    definition;
  - callee_line holds a definition of `callee` (Rust: `fn|struct|enum|trait|union NAME`,
    Go: `func NAME` / `func (recv) NAME` / `type NAME` / an interface method spec,
    Python: `def|class NAME`, ...);
  - no entry is listed twice.
Exit status 0 when every file is clean, 1 otherwise. Python 3 standard library only.
"""

import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LANGUAGES = {"rust", "python", "typescript", "javascript", "go", "java", "c", "cpp"}
C_LIKE = LANGUAGES - {"python"}


def _blank(ch):
    return "\n" if ch == "\n" else " "


def blank_c_like(text, language):
    """Comments and the contents of string/char literals replaced by spaces (newlines kept,
    so line numbers and columns stay put)."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif c == "/" and nxt == "*":
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j) and language == "rust":
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            for k in range(i, j):
                out[k] = _blank(text[k])
            i = j
        elif language == "rust" and c == "r" and re.match(r'r#*"', text[i:]) and (
            i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
        ):
            m = re.match(r'r(#*)"', text[i:])
            close = '"' + m.group(1)
            start = i + len(m.group(0))
            j = text.find(close, start)
            j = n if j < 0 else j + len(close)
            for k in range(start, max(start, j - len(close))):
                out[k] = _blank(text[k])
            i = j
        elif c == '"' or (c == "`" and language in ("go", "typescript", "javascript")):
            j = i + 1
            while j < n and text[j] != c:
                if text[j] == "\\" and not (c == "`" and language == "go"):
                    j += 1
                j += 1
            for k in range(i + 1, min(j, n)):
                out[k] = _blank(text[k])
            i = j + 1
        elif c == "'":
            if language == "rust":
                # char literal ('x', '\n', '\u{..}') or a lifetime ('a).
                if nxt == "\\":
                    j = text.find("'", i + 2)
                    j = n if j < 0 else j
                elif i + 2 < n and text[i + 2] == "'":
                    j = i + 2
                else:
                    i += 1
                    continue
            else:
                j = i + 1
                while j < n and text[j] != "'" and text[j] != "\n":
                    if text[j] == "\\":
                        j += 1
                    j += 1
            for k in range(i + 1, min(j, n)):
                out[k] = _blank(text[k])
            i = j + 1
        else:
            i += 1
    return "".join(out)


def blank_python(text):
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "#":
            j = text.find("\n", i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = " "
            i = j
        elif c in "'\"":
            q = text[i : i + 3] if text[i : i + 3] in ("'''", '"""') else c
            j = i + len(q)
            while j < n and not text.startswith(q, j):
                if text[j] == "\\":
                    j += 1
                elif text[j] == "\n" and len(q) == 1:
                    break
                j += 1
            for k in range(i + len(q), min(j, n)):
                out[k] = _blank(text[k])
            i = j + len(q)
        else:
            i += 1
    return "".join(out)


def code_lines(path, language):
    """The file's lines with comments and literal contents blanked."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    blanked = blank_python(text) if language == "python" else blank_c_like(text, language)
    return blanked.split("\n")


EXTENSIONS = {
    "rust": (".rs",), "go": (".go",), "python": (".py", ".pyi"), "typescript": (".ts", ".tsx"),
    "javascript": (".js", ".jsx", ".mjs", ".cjs"), "java": (".java",), "c": (".c", ".h"),
    "cpp": (".cc", ".cpp", ".cxx", ".hpp", ".hh", ".h"),
}
ALIAS = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s+as\s+([A-Za-z_][A-Za-z0-9_]*)\b")


def source_files(base, language):
    """The fixture's source files of `language`, relative '/' paths, sorted."""
    files = []
    for d, dirs, names in os.walk(base):
        dirs[:] = sorted(x for x in dirs if x not in ("target", ".git", "node_modules"))
        for n in sorted(names):
            if n.endswith(EXTENSIONS[language]):
                files.append(os.path.relpath(os.path.join(d, n), base).replace(os.sep, "/"))
    return files


def aliases(base, language, lines_of):
    """name -> {alias}: `use a::name as alias;` (Rust), `from m import name as alias` (Python).
    A call written through an alias names the alias, not the callee."""
    out = {}
    if language not in ("rust", "python"):
        return out
    for rel in source_files(base, language):
        for text in lines_of(rel):
            for m in ALIAS.finditer(text):
                out.setdefault(m.group(1), set()).add(m.group(2))
    return out


def call_pattern(name, language, alias_names=()):
    after = r"\s*(?:\(|::<)" if language == "rust" else r"\s*\("
    names = "|".join(re.escape(n) for n in sorted({name, *alias_names}))
    return re.compile(r"(?<![A-Za-z0-9_$])(?:" + names + ")" + after)


def definition_pattern(name, language):
    n = re.escape(name) + r"(?![A-Za-z0-9_$])"
    if language == "rust":
        return re.compile(r"\b(?:fn|struct|enum|trait|union)\s+" + n)
    if language == "go":
        # func, method, type, or a method spec inside an interface (`Apply(cents int) int`).
        return re.compile(
            r"\bfunc\s+(?:\([^)]*\)\s*)?" + n + r"|\btype\s+" + n + r"|^\s*" + n + r"\s*\("
        )
    if language == "python":
        return re.compile(r"\b(?:def|class)\s+" + n)
    if language in ("typescript", "javascript"):
        return re.compile(
            r"\bfunction\s*\*?\s*" + n + r"|\bclass\s+" + n + r"|(?<![.\w$])" + n
            + r"\s*(?:[(<]|[:=]\s*(?:async\s+)?(?:function\b|\(|[A-Za-z_$][\w$]*\s*=>))"
        )
    # java, c, cpp: a name followed by a parameter list, or a type declaration.
    return re.compile(
        r"\b(?:class|struct|interface|enum|record)\s+" + n + r"|(?<![.\w])" + n + r"\s*\("
    )


def rust_like_definition_at(line, start, language):
    """Whether the match at `start` is itself a definition (`fn name(`, `struct Name(`)."""
    before = line[:start].rstrip()
    if language == "rust":
        return re.search(r"\b(?:fn|struct)$", before) is not None
    if language == "go":
        return before.endswith("func") or re.search(r"\bfunc\s*\([^)]*\)$", before) is not None
    if language == "python":
        return before.endswith("def")
    return before.endswith("function")


def check_file(truth_path):
    problems = []
    base = os.path.dirname(os.path.abspath(truth_path))
    try:
        with open(truth_path, encoding="utf-8") as f:
            truth = json.load(f)
    except (OSError, ValueError) as e:
        return [f"{truth_path}: unreadable: {e}"], 0
    language = truth.get("language")
    if language not in LANGUAGES:
        return [f"{truth_path}: language {language!r} is not one of {sorted(LANGUAGES)}"], 0
    for key in ("source", "root"):
        if not isinstance(truth.get(key), str):
            problems.append(f"{truth_path}: missing string field {key!r}")
    calls = truth.get("calls")
    if not isinstance(calls, list):
        return problems + [f"{truth_path}: `calls` is not a list"], 0
    cache = {}

    def lines_of(rel):
        if rel not in cache:
            cache[rel] = code_lines(os.path.join(base, rel), language)
        return cache[rel]

    alias_map = aliases(base, language, lines_of)
    seen = set()
    for idx, e in enumerate(calls):
        where = f"{truth_path}: calls[{idx}]"
        fields = {"caller_path": str, "line": int, "callee_path": str, "callee_line": int,
                  "callee": str}
        bad = [k for k, t in fields.items() if not isinstance(e.get(k), t) or
               isinstance(e.get(k), bool)]
        if bad:
            problems.append(f"{where}: bad or missing fields {bad}: {e}")
            continue
        where += f" {e['caller_path']}:{e['line']} -> {e['callee']} @ " \
                 f"{e['callee_path']}:{e['callee_line']}"
        key = (e["caller_path"], e["line"], e["callee_path"], e["callee_line"], e["callee"])
        if key in seen:
            problems.append(f"{where}: duplicate entry")
        seen.add(key)
        ok = True
        for p in (e["caller_path"], e["callee_path"]):
            norm = os.path.normpath(p).replace(os.sep, "/")
            if p.startswith("/") or "\\" in p or norm != p or norm.startswith(".."):
                problems.append(f"{where}: path {p!r} is not a clean relative '/' path")
                ok = False
            elif not os.path.isfile(os.path.join(base, p)):
                problems.append(f"{where}: {p} does not exist")
                ok = False
        if not ok:
            continue
        name = e["callee"]
        caller = lines_of(e["caller_path"])
        if not 1 <= e["line"] <= len(caller):
            problems.append(f"{where}: line out of range (1..{len(caller)})")
        else:
            text = caller[e["line"] - 1]
            pattern = call_pattern(name, language, alias_map.get(name, ()))
            hits = [m for m in pattern.finditer(text)
                    if not rust_like_definition_at(text, m.start(), language)]
            if not hits:
                problems.append(f"{where}: no call of `{name}(` in code on that line: "
                                f"{text.strip()!r}")
        callee = lines_of(e["callee_path"])
        if not 1 <= e["callee_line"] <= len(callee):
            problems.append(f"{where}: callee_line out of range (1..{len(callee)})")
        elif not definition_pattern(name, language).search(callee[e["callee_line"] - 1]):
            problems.append(f"{where}: no definition of `{name}` on the callee line: "
                            f"{callee[e['callee_line'] - 1].strip()!r}")
    return problems, len(calls)


def main(argv):
    default = os.path.join(ROOT, "tests", "fixtures", "callgraph", "*", "truth.json")
    files = argv[1:] or sorted(glob.glob(default))
    if not files:
        print("no truth files found", file=sys.stderr)
        return 1
    total_problems = 0
    for path in files:
        problems, count = check_file(path)
        for p in problems:
            print(p)
        total_problems += len(problems)
        status = "ok" if not problems else f"{len(problems)} problem(s)"
        print(f"{os.path.relpath(path, ROOT)}: {count} call sites, {status}")
    return 1 if total_problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
