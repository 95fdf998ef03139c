//! Symbol headers: a short text per symbol, `path ▸ owner ▸ signature ▸ first doc sentence`,
//! embedded (and indexed for BM25) separately from the symbol's body.
//!
//! A sentence encoder reads at most its token cap, and a long body dilutes what the symbol is
//! *for* with how it does it; a question ("python how to merge two dicts") matches the header's
//! few words better. Search scores a symbol by the best of its header and its body chunks:
//! a header chunk (kind `header`, parent = its symbol, no symbol id) collapses into its symbol
//! like a body part, and results show the symbol, never the header (see `code::rank`).
//!
//! Measured on the per-style harness (`benches/src/bin/styles.rs`): see README (search).

use super::types::{Chunk, ChunkKind, SymbolTag};

/// Symbols whose text has at most this many lines get no header (their whole text is about as
/// short as a header).
pub const HEADER_MIN_LINES: usize = 4;

/// Most lines of a signature.
const MAX_SIGNATURE_LINES: usize = 6;

/// Longest doc sentence kept, in bytes.
const MAX_DOC: usize = 240;

/// Kinds that get a header.
fn has_header(kind: ChunkKind) -> bool {
    matches!(
        kind,
        ChunkKind::Function
            | ChunkKind::Method
            | ChunkKind::Class
            | ChunkKind::Struct
            | ChunkKind::Enum
            | ChunkKind::Trait
            | ChunkKind::Interface
    )
}

/// A comment line's text without its marker, or `None` when `line` is not a comment.
fn comment_text(line: &str) -> Option<&str> {
    let t = line.trim();
    for m in ["///", "//!", "//", "/**", "/*", "*/", "* ", "#"] {
        if let Some(rest) = t.strip_prefix(m) {
            if m == "#" && (rest.starts_with('[') || rest.starts_with('!')) {
                // Rust attributes and shebangs are not comments.
                return None;
            }
            return Some(rest.trim_end_matches("*/").trim());
        }
    }
    (t == "*").then_some("")
}

/// The first sentence of a paragraph of doc text.
fn first_sentence(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let end = flat
        .char_indices()
        .find(|&(i, c)| c == '.' && flat[i + 1..].starts_with(' '))
        .map_or(flat.len(), |(i, _)| i + 1);
    let mut s = flat[..end].to_string();
    if s.len() > MAX_DOC {
        let mut cut = MAX_DOC;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// (header text, lines of the signature counted from the chunk's first line) of a symbol's
/// text, or `None` when no signature is found.
pub fn header_text(path: &str, qualified: &str, text: &str) -> Option<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    // Leading doc comments (Rust, JS, Java, Go, C) and attributes / decorators.
    let mut doc = String::new();
    while i < lines.len() {
        let l = lines[i].trim();
        if let Some(c) = comment_text(l) {
            if !c.is_empty() && !c.starts_with('@') {
                doc.push_str(c);
                doc.push(' ');
            } else if !doc.is_empty() && c.is_empty() {
                // A blank comment line ends the first paragraph.
                doc.push('\n');
            }
            i += 1;
        } else if l.starts_with('@') || l.starts_with("#[") || l.is_empty() {
            i += 1;
        } else {
            break;
        }
    }
    let doc = doc.split('\n').next().unwrap_or("").to_string();
    let start = i;
    let mut sig: Vec<&str> = Vec::new();
    while i < lines.len() && sig.len() < MAX_SIGNATURE_LINES {
        let l = lines[i].trim();
        sig.push(l);
        i += 1;
        if l.ends_with(':') || l.ends_with('{') || l.ends_with(';') || l.contains(" => {") {
            break;
        }
    }
    if sig.is_empty() {
        return None;
    }
    let sig_lines = i;
    // A Python docstring right after the signature.
    let mut doc = first_sentence(&doc);
    if doc.is_empty() {
        let rest = lines[i.min(lines.len())..].join("\n");
        let r = rest.trim_start();
        for q in ["\"\"\"", "'''", "r\"\"\"", "r'''"] {
            if let Some(body) = r.strip_prefix(q) {
                let close = q.trim_start_matches('r');
                let body = body.split(close).next().unwrap_or("");
                doc = first_sentence(body.split("\n\n").next().unwrap_or(""));
                break;
            }
        }
    }
    let signature = sig.join(" ");
    let signature = signature
        .trim_end_matches('{')
        .trim_end_matches(':')
        .trim_end();
    let owner = qualified
        .rfind(['#', '.', '/'])
        .map(|p| &qualified[..p])
        .unwrap_or("");
    let mut parts: Vec<&str> = vec![path];
    if !owner.is_empty() {
        parts.push(owner);
    }
    parts.push(signature);
    if !doc.is_empty() {
        parts.push(&doc);
    }
    let _ = start;
    Some((parts.join(" ▸ "), sig_lines.max(1)))
}

/// The header chunks of a file's symbols (`chunks` in their final order; `line_end(line)`
/// gives the byte offset where a 1-based line ends). Each has its symbol as parent.
pub fn headers(path: &str, chunks: &[Chunk], line_end: impl Fn(u32) -> u32) -> Vec<Chunk> {
    let mut out = Vec::new();
    for (i, c) in chunks.iter().enumerate() {
        if !has_header(c.kind) || c.text.lines().count() <= HEADER_MIN_LINES {
            continue;
        }
        let Some((text, sig_lines)) = header_text(path, &c.qualified, &c.text) else {
            continue;
        };
        let end_line = (c.start_line + sig_lines as u32 - 1).min(c.end_line);
        out.push(Chunk {
            kind: ChunkKind::Header,
            name: c.name.clone(),
            qualified: c.qualified.clone(),
            symbol: SymbolTag::NONE,
            start_line: c.start_line,
            end_line,
            start_byte: c.start_byte,
            end_byte: line_end(end_line).clamp(c.start_byte, c.end_byte),
            text,
            parent: Some(i),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_docstring_after_the_signature() {
        let t = "def merge(a, b,\n          c=None):\n    \"\"\"Merge two dicts. Later wins.\n\n    More.\n    \"\"\"\n    return {**a, **b}\n";
        let (h, n) = header_text("pkg/util.py", "merge", t).unwrap();
        assert_eq!(
            h,
            "pkg/util.py ▸ def merge(a, b, c=None) ▸ Merge two dicts."
        );
        assert_eq!(n, 2);
    }

    #[test]
    fn rust_doc_comments_before_the_signature() {
        let t = "/// Picks the closest word.\n///\n/// Long text.\n#[inline]\npub fn closest(w: &str) -> String {\n    w.into()\n}\n";
        let (h, n) = header_text("src/lib.rs", "Dict#closest", t).unwrap();
        assert_eq!(
            h,
            "src/lib.rs ▸ Dict ▸ pub fn closest(w: &str) -> String ▸ Picks the closest word."
        );
        assert_eq!(n, 5);
    }

    #[test]
    fn jsdoc_and_no_doc() {
        let t = "/**\n * Parses a header line.\n * @param s the line\n */\nfunction parse(s) {\n  return s;\n}\n";
        let (h, _) = header_text("lib/p.js", "parse", t).unwrap();
        assert_eq!(h, "lib/p.js ▸ function parse(s) ▸ Parses a header line.");
        let (h, _) = header_text("a.go", "", "func F() {\n}\n").unwrap();
        assert_eq!(h, "a.go ▸ func F()");
    }
}
