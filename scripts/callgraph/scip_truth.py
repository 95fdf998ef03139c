#!/usr/bin/env python3
"""Call-graph ground truth from a SCIP index (scip-python / scip-typescript), stdlib only.

Decodes the SCIP protobuf by hand and writes the shared truth JSON (see README, "Call-graph
quality"):

    {"language": ..., "source": ..., "root": ...,
     "calls": [{"caller_path", "line", "callee_path", "callee_line", "callee"}, ...]}

A call is a reference occurrence (no Definition role) of a symbol that is defined in the index
(it has a Definition occurrence, so it lives in the indexed project) and denotes a function,
method or class (descriptor suffix `().` or `#`; for TypeScript also a term `x.` whose definition
is `x = <arrow function | function expression>`), where the source text right after the
occurrence (skipping whitespace, for TypeScript a balanced `<...>` type-argument list and an
optional-call `?.`) is `(`. `new Foo(...)` and `Foo(...)` count as calls to the class (the
constructor symbol maps to its class); `super(...)` is left out. Symbols are compared without
their package fields, so a reference through a typeshed stub of a stdlib package (`email`,
`json`) matches the project's own definition. TypeScript overloads: the last definition (the
implementation) is the callee's line.

`elsewhere` lists call sites `[path, line, name]` that the indexer resolved to a library symbol
(defined outside the project: `list.append`, `Map.get`) although the name is also that of a
project callable: an edge from such a site is certainly wrong, whereas an edge from a site the
indexer did not resolve to a project callable (unresolved, a local, an alias) is unverified.

Usage:
    scip_truth.py --index index.scip --src-root DIR --language python \
        --source "scip-python 0.6.6 over ..." --root-name json [--include-prefix json/] \
        [--exclude-suffix .d.ts] --out truth.json
"""

import argparse
import json
import os
import re
import sys

# ---------------------------------------------------------------- protobuf wire format


def varint(buf, i):
    shift = 0
    out = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, i
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def fields(buf):
    """Yields (field number, wire type, value) for one message; value is int or bytes."""
    i = 0
    n = len(buf)
    while i < n:
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v = buf[i:i + 8]
            i += 8
        elif wt == 2:
            ln, i = varint(buf, i)
            v = buf[i:i + ln]
            i += ln
        elif wt == 5:
            v = buf[i:i + 4]
            i += 4
        else:
            raise ValueError("unsupported wire type %d" % wt)
        yield num, wt, v


def int32s(wt, v):
    """A repeated int32 field: packed (bytes) or one unpacked value."""
    if wt == 0:
        return [v]
    out = []
    i = 0
    while i < len(v):
        x, i = varint(v, i)
        if x >= 1 << 63:
            x -= 1 << 64
        out.append(x)
    return out


def parse_occurrence(buf):
    rng = []
    symbol = ""
    roles = 0
    for num, wt, v in fields(buf):
        if num == 1:
            rng.extend(int32s(wt, v))
        elif num == 2:
            symbol = v.decode("utf-8", "replace")
        elif num == 3:
            roles = v
    if len(rng) == 3:
        rng = [rng[0], rng[1], rng[0], rng[2]]
    if len(rng) != 4:
        return None
    return {"range": rng, "symbol": symbol, "roles": roles}


def parse_document(buf):
    doc = {"path": "", "occurrences": [], "language": ""}
    for num, wt, v in fields(buf):
        if num == 1:
            doc["path"] = v.decode("utf-8", "replace")
        elif num == 2:
            occ = parse_occurrence(v)
            if occ is not None:
                doc["occurrences"].append(occ)
        elif num == 4:
            doc["language"] = v.decode("utf-8", "replace")
    return doc


def parse_index(buf):
    docs = []
    for num, wt, v in fields(buf):
        if num == 2 and wt == 2:
            docs.append(parse_document(v))
    return docs


# ---------------------------------------------------------------- symbols and source text


CONSTRUCTOR = "#`<constructor>`()."


def symbol_key(sym):
    """A symbol without its package fields (scheme, manager, name, version), constructors as
    their class: scip-python names a module of a stdlib package (`json`, `email`) through the
    typeshed stub (`python-stdlib 3.11 ...`) at some references and through the project at the
    definition, with the same descriptors; `new Foo()` references `Foo#<constructor>().`."""
    if sym.startswith("local "):
        return None
    parts = sym.split(" ", 4)
    if len(parts) < 5:
        return None
    desc = parts[4]
    if desc.endswith(CONSTRUCTOR):
        desc = desc[: -len(CONSTRUCTOR)] + "#"
    return desc


def symbol_kind(sym):
    """'callable' (`().`), 'type' (`#`), 'term' (`.`) or None, from the last descriptor."""
    if not sym:
        return None
    if sym.endswith(")."):
        return "callable"
    if sym.endswith("#"):
        return "type"
    if sym.endswith("."):
        return "term"
    return None


def char_offset(line, ch, utf16):
    """Column `ch` (code units) of `line` as a Python string index."""
    if not utf16:
        return min(ch, len(line))
    units = 0
    for idx, c in enumerate(line):
        if units >= ch:
            return idx
        units += 2 if ord(c) > 0xFFFF else 1
    return len(line)


def text_after(lines, line_no, col):
    """The source text from (line_no, col) to the end of the file (lazily, few lines)."""
    chunk = lines[line_no][col:] if line_no < len(lines) else ""
    rest = lines[line_no + 1:line_no + 40]
    return chunk + "\n" + "\n".join(rest)


def is_call_after(text, ts):
    i = 0
    n = len(text)

    def skip_ws(i):
        while i < n and text[i] in " \t\r\n":
            i += 1
        return i

    i = skip_ws(i)
    if ts and i < n and text[i] == "<":
        depth = 0
        while i < n:
            c = text[i]
            if c == "<":
                depth += 1
            elif c == ">":
                if i > 0 and text[i - 1] == "=":  # `=>` inside a function type
                    pass
                else:
                    depth -= 1
                    if depth == 0:
                        i += 1
                        break
            elif c in ";{}" and depth > 0 and c != "{":
                return False
            i += 1
        else:
            return False
        i = skip_ws(i)
    if ts and text.startswith("?.", i):
        i = skip_ws(i + 2)
    return i < n and text[i] == "("


DEF_BEFORE = re.compile(r"(\bdef|\bclass|\bfunction\s*\*?)\s*$")
FUNC_VALUE = re.compile(r"\s*(:[^=;]*)?=\s*(async\s+)?(function\b|\(|<|[A-Za-z_$][\w$]*\s*=>)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--src-root", required=True, help="directory the index paths are relative to")
    ap.add_argument("--language", required=True)
    ap.add_argument("--source", required=True, help="how the truth was made (free text)")
    ap.add_argument("--root-name", default="")
    ap.add_argument("--include-prefix", action="append", default=[],
                    help="keep only documents under this path prefix (repeatable)")
    ap.add_argument("--exclude-suffix", action="append", default=[],
                    help="drop documents whose path ends so (repeatable), e.g. .d.ts")
    ap.add_argument("--utf16", action="store_true",
                    help="ranges count UTF-16 code units (scip-typescript)")
    ap.add_argument("--path-rename", action="append", default=[],
                    help="FROM=TO: document paths starting with FROM start with TO instead "
                         "(the package was renamed for indexing)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    with open(args.index, "rb") as f:
        docs = parse_index(f.read())
    ts = args.language in ("typescript", "tsx", "javascript")

    def keep(path):
        if args.include_prefix and not any(path.startswith(p) for p in args.include_prefix):
            return False
        return not any(path.endswith(s) for s in args.exclude_suffix)

    for d in docs:
        for rule in args.path_rename:
            old, _, new = rule.partition("=")
            if d["path"].startswith(old):
                d["path"] = new + d["path"][len(old):]
                break
    docs = [d for d in docs if keep(d["path"])]
    sources = {}
    for d in docs:
        try:
            with open(os.path.join(args.src_root, d["path"]), encoding="utf-8") as f:
                sources[d["path"]] = f.read().split("\n")
        except (OSError, UnicodeDecodeError) as e:
            print("skip %s: %s" % (d["path"], e), file=sys.stderr)

    # Definitions: symbol -> (path, 0-based line, name text).
    defs = {}
    for d in docs:
        lines = sources.get(d["path"])
        if lines is None:
            continue
        for o in d["occurrences"]:
            if not o["roles"] & 1:
                continue
            key = symbol_key(o["symbol"])
            kind = symbol_kind(key)
            if kind is None or (key in defs and not ts):
                continue
            if o["symbol"].endswith(CONSTRUCTOR):
                continue  # the class is the callee, defined at its own name
            sl, sc, el, ec = o["range"]
            if sl != el or sl >= len(lines):
                continue
            line = lines[sl]
            a = char_offset(line, sc, args.utf16)
            b = char_offset(line, ec, args.utf16)
            name = line[a:b]
            if not re.fullmatch(r"[A-Za-z_$][\w$]*", name):
                continue
            if kind == "term":
                if not ts or not FUNC_VALUE.match(text_after(lines, sl, b)):
                    continue
            # TypeScript overloads: one definition per signature, the implementation last.
            defs[key] = (d["path"], sl, name)

    names = {t[2] for t in defs.values()}
    # Every symbol defined in the project (any kind): a reference to one of them that is not a
    # callable (an alias `X = mod.X`, an attribute holding a function) may still reach a
    # project callable at run time, so it is not evidence against an edge.
    project = set()
    for d in docs:
        for o in d["occurrences"]:
            if o["roles"] & 1:
                project.add(symbol_key(o["symbol"]))
    calls = set()
    elsewhere = set()
    for d in docs:
        lines = sources.get(d["path"])
        if lines is None:
            continue
        for o in d["occurrences"]:
            if o["roles"] & 1:
                continue
            sl, sc, el, ec = o["range"]
            if sl >= len(lines) or el >= len(lines) or sl != el:
                continue
            line = lines[sl]
            text = line[char_offset(line, sc, args.utf16):char_offset(line, ec, args.utf16)]
            if text == "super":
                continue  # `super(...)`: the parent constructor, not a call site of a name
            if DEF_BEFORE.search(line[:char_offset(line, sc, args.utf16)]):
                continue  # `@p.setter` / `def p(...)`: a definition that scip-python references
            b = char_offset(lines[el], ec, args.utf16)
            if not is_call_after(text_after(lines, el, b), ts):
                continue
            target = defs.get(symbol_key(o["symbol"]))
            if target is not None:
                calls.add((d["path"], sl + 1, target[0], target[1] + 1, target[2]))
            elif text in names and not o["symbol"].startswith("local ") \
                    and symbol_key(o["symbol"]) not in project:
                # Resolved by the indexer to a library symbol (`list.append`, `Map.get`) under
                # the name of a project callable: an edge from here would be wrong.
                elsewhere.add((d["path"], sl + 1, text))

    # One call per line: small files and readable diffs.
    head = json.dumps({"language": args.language, "source": args.source,
                       "root": args.root_name})[:-1]
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(head + ',\n "calls": [\n')
        f.write(",\n".join(
            "  " + json.dumps({"caller_path": c[0], "line": c[1], "callee_path": c[2],
                               "callee_line": c[3], "callee": c[4]})
            for c in sorted(calls)))
        f.write('\n ],\n "elsewhere": [\n')
        f.write(",\n".join("  " + json.dumps(list(e)) for e in sorted(elsewhere)))
        f.write("\n ]}\n")
    print("%s: %d documents, %d defined callables/types, %d call sites, %d elsewhere"
          % (args.out, len(docs), len(defs), len(calls), len(elsewhere)), file=sys.stderr)


if __name__ == "__main__":
    main()
