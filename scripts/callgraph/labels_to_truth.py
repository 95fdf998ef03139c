#!/usr/bin/env python3
"""Turn hand-written call labels of a fixture into its truth.json (the shared format).

Usage:
    scripts/callgraph/labels_to_truth.py FIXTURE_DIR [--check]

FIXTURE_DIR/labels.txt holds the header and, for vendored code that we do not edit, the labels:

    language: rust
    source: hand-labelled ...
    root: strsim-0.11.1
    src/lib.rs:85 generic_hamming
    src/lib.rs:582 get=src/lib.rs:465       # self.map is a GrowingHashmapChar
    src/lib.rs:388 !get                      # HashMap::get (std): not a call into the fixture

Source files may also carry labels inline, in a trailing comment:

    let p = Parser::new(); // @calls new@parser -- free text after ` -- ` is a note
    fn new() -> Self {     // @def parser
    s.len()                // @calls !len
    fmt_text(w)            // @calls format@text -- through `use crate::text::format as fmt_text`

A label is a list of tokens (comma or space separated):
    NAME             the call goes to the only definition of NAME in the fixture
    NAME@LABEL       ... to the definition line marked `@def LABEL`
    NAME=PATH:LINE   ... to the definition at PATH:LINE
    !NAME            the `NAME(` on this line is NOT a call of a function defined in the fixture
                     (std method of the same name, a trap for name-only resolution)

Completeness: every `NAME(` / `NAME::<` in code (comments and literals blanked) where NAME is a
function defined in the fixture must carry a label on its line, positive or `!`; otherwise the
script fails. So the truth lists every call site, and every look-alike is a deliberate decision.
With --check the truth.json on disk must equal the generated one. Python 3 stdlib only.
"""

import json
import os
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_truth import (  # noqa: E402
    aliases,
    call_pattern,
    code_lines,
    rust_like_definition_at,
    source_files,
)
DEF_NAME = {
    # fns, and tuple structs (their constructor `Name(..)` is a call of the struct's fn item)
    "rust": re.compile(
        r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)|\bstruct\s+([A-Za-z_][A-Za-z0-9_]*)\s*(?:<[^>]*>)?\s*\("
    ),
    "go": re.compile(r"\bfunc\s+(?:\([^)]*\)\s*)?([A-Za-z_][A-Za-z0-9_]*)"),
    "python": re.compile(r"\bdef\s+([A-Za-z_][A-Za-z0-9_]*)"),
}
MARKER = re.compile(r"(?://|#)\s*(@(?:calls|def)\b.*)$")
TOKEN = re.compile(r"^(!?)([A-Za-z_][A-Za-z0-9_]*)(?:@([\w:.-]+)|=([^:\s]+):(\d+))?$")


class LabelError(Exception):
    pass


def parse_tokens(text, where):
    out = []
    for tok in re.split(r"[,\s]+", text.strip()):
        if not tok:
            continue
        m = TOKEN.match(tok)
        if not m:
            raise LabelError(f"{where}: bad label token {tok!r}")
        neg, name, label, path, line = m.groups()
        if neg and (label or path):
            raise LabelError(f"{where}: `!{name}` takes no target")
        out.append((bool(neg), name, label, (path, int(line)) if path else None))
    return out


def build(base):
    labels_path = os.path.join(base, "labels.txt")
    header = {}
    labels = {}  # (path, line) -> [tokens]
    with open(labels_path, encoding="utf-8") as f:
        for no, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            m = re.match(r"^(language|source|root):\s*(.*)$", raw.strip())
            if m:
                header[m.group(1)] = m.group(2).strip()
                continue
            m = re.match(r"^(\S+):(\d+)\s+(.+)$", line)
            if not m:
                raise LabelError(f"labels.txt:{no}: cannot parse {raw.strip()!r}")
            key = (m.group(1), int(m.group(2)))
            labels.setdefault(key, []).extend(parse_tokens(m.group(3), f"labels.txt:{no}"))
    language = header.get("language")
    if language not in DEF_NAME:
        raise LabelError(f"labels.txt: language {language!r} not supported here")

    files = source_files(base, language)
    raw_lines, code = {}, {}
    for p in files:
        with open(os.path.join(base, p), encoding="utf-8") as f:
            raw_lines[p] = f.read().split("\n")
        code[p] = code_lines(os.path.join(base, p), language)

    # Definitions (code only) and @def labels (raw comments).
    defs = {}  # name -> [(path, line)]
    def_labels = {}  # label -> (path, line)
    spec_lines = set()  # (path, line, name) of Go interface method specs
    for p in files:
        in_iface = False
        for i, text in enumerate(code[p], 1):
            for m in DEF_NAME[language].finditer(text):
                name = next(g for g in m.groups() if g)
                defs.setdefault(name, []).append((p, i))
            if language != "go":
                continue
            # Go interface method specs (`Apply(cents int) int` inside `interface { .. }`) are
            # the targets of calls through an interface value.
            if in_iface:
                if re.match(r"^\s*\}", text):
                    in_iface = False
                else:
                    m = re.match(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(", text)
                    if m:
                        defs.setdefault(m.group(1), []).append((p, i))
                        spec_lines.add((p, i, m.group(1)))
            elif re.search(r"\binterface\s*\{\s*$", text):
                in_iface = True
        for i, text in enumerate(raw_lines[p], 1):
            m = MARKER.search(text)
            if not m:
                continue
            for part in re.split(r"(?=@(?:calls|def)\b)", m.group(1)):
                part = part.split(" -- ", 1)[0].strip()
                if part.startswith("@def"):
                    label = part[len("@def"):].strip()
                    if not re.fullmatch(r"[\w:.-]+", label):
                        raise LabelError(f"{p}:{i}: bad @def label {label!r}")
                    if label in def_labels:
                        raise LabelError(f"{p}:{i}: @def {label} defined twice")
                    def_labels[label] = (p, i)
                elif part.startswith("@calls"):
                    toks = parse_tokens(part[len("@calls"):], f"{p}:{i}")
                    labels.setdefault((p, i), []).extend(toks)

    alias_map = aliases(base, language, lambda rel: code[rel])
    project_names = set(defs)
    calls, negatives = [], 0
    problems = []
    for (p, i), toks in sorted(labels.items()):
        if p not in code:
            problems.append(f"{p}:{i}: labelled file is not a {language} source of the fixture")
            continue
        if not 1 <= i <= len(code[p]):
            problems.append(f"{p}:{i}: line out of range")
            continue
        for neg, name, label, target in toks:
            if neg:
                negatives += 1
                continue
            if label:
                if label not in def_labels:
                    problems.append(f"{p}:{i}: unknown @def label {label!r}")
                    continue
                tp, tl = def_labels[label]
            elif target:
                tp, tl = target
            else:
                cands = defs.get(name, [])
                if len(cands) != 1:
                    problems.append(f"{p}:{i}: `{name}` has {len(cands)} definitions "
                                    f"{cands}; say which (NAME@LABEL or NAME=PATH:LINE)")
                    continue
                tp, tl = cands[0]
            if (tp, tl) not in defs.get(name, []):
                problems.append(f"{p}:{i}: {tp}:{tl} holds no definition of `{name}`")
                continue
            calls.append({"caller_path": p, "line": i, "callee_path": tp, "callee_line": tl,
                          "callee": name})

    # Completeness: every look-alike call of a fixture function is labelled one way or the other.
    for p in files:
        for i, text in enumerate(code[p], 1):
            here = {name for _, name, _, _ in labels.get((p, i), [])}
            for name in here:
                pattern = call_pattern(name, language, alias_map.get(name, ()))
                hits = [m for m in pattern.finditer(text)
                        if not rust_like_definition_at(text, m.start(), language)]
                if not hits:
                    problems.append(f"{p}:{i}: labelled `{name}` but no `{name}(` in code there")
            if "(" not in text:
                continue
            for name in project_names - here:
                if (p, i, name) in spec_lines:
                    continue
                pattern = call_pattern(name, language, alias_map.get(name, ()))
                for m in pattern.finditer(text):
                    if not rust_like_definition_at(text, m.start(), language):
                        problems.append(f"{p}:{i}: unlabelled `{name}(`: {text.strip()!r}")
                        break
    if problems:
        raise LabelError("\n".join(problems))

    calls.sort(key=lambda e: (e["caller_path"], e["line"], e["callee"], e["callee_path"],
                              e["callee_line"]))
    truth = {"language": language, "source": header.get("source", ""),
             "root": header.get("root", os.path.basename(base)), "calls": calls}
    return truth, negatives


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    check = "--check" in argv[1:]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    base = os.path.abspath(args[0])
    try:
        truth, negatives = build(base)
    except (LabelError, OSError) as e:
        print(e, file=sys.stderr)
        return 1
    text = json.dumps(truth, indent=1, ensure_ascii=False) + "\n"
    out = os.path.join(base, "truth.json")
    if check:
        try:
            with open(out, encoding="utf-8") as f:
                same = f.read() == text
        except OSError:
            same = False
        if not same:
            print(f"{out} is stale: rerun scripts/callgraph/labels_to_truth.py {args[0]}",
                  file=sys.stderr)
            return 1
    else:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    print(f"{os.path.basename(base)}: {len(truth['calls'])} call sites, "
          f"{negatives} look-alikes labelled as not calls")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
