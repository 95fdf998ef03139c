//! The text side of the caller/callee cascade: identifiers and their words, whole-word and
//! call-site lines in a chunk's text (lines that are comments as a whole are not read).

/// Splits an identifier into lower-case words: `closest_match` → `closest match`,
/// `HttpServer.serveHTTP` → `http server serve http`.
pub fn identifier_words(ident: &str) -> String {
    let mut words = Vec::new();
    for part in ident.split(|c: char| !c.is_alphanumeric()) {
        if part.is_empty() {
            continue;
        }
        let toks = format::text::tokenize(part);
        if toks.len() > 1 {
            words.extend(toks.into_iter().skip(1));
        } else {
            words.extend(toks);
        }
    }
    words.join(" ")
}

/// The identifier to look for in text: the last component of a name or symbol id.
pub fn simple_name(symbol: &str) -> String {
    let s = symbol
        .trim()
        .trim_end_matches("().")
        .trim_end_matches(['.', '#', '(', ')', '/']);
    s.rsplit(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
        .find(|p| !p.is_empty())
        .unwrap_or("")
        .to_string()
}

/// Whether `line` of a file in `language` is no code as a whole, so a name followed by `(` in
/// it is no call: a comment (`#` in Python; `//`, `///`, `/*` and a block comment's ` * `
/// lines elsewhere), a Python doctest line (`>>>`), a Rust attribute (`#[`, `#!`) or a C/C++
/// preprocessor line. `#` starts no comment in JavaScript and TypeScript (`#private`
/// members), nor does a `*` without a space after it (`*p = f(x);` in C). Comments after code
/// on the same line are not told apart.
fn comment_line(line: &str, language: &str) -> bool {
    let t = line.trim_start();
    match language {
        "python" => t.starts_with('#') || t.starts_with(">>>"),
        _ => {
            t.starts_with("//")
                || t.starts_with("/*")
                || t.starts_with("* ")
                || t == "*"
                || t.starts_with("*/")
                || match language {
                    "rust" => t.starts_with("#[") || t.starts_with("#!"),
                    "c" | "cpp" => t.starts_with('#'),
                    _ => false,
                }
        }
    }
}

/// Positions where `ident` occurs as a whole word in `text`.
pub fn whole_word_lines(text: &str, ident: &str) -> Vec<(u32, String)> {
    let is_id = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    lines_where(
        text,
        ident,
        |_| true,
        |after| !after.chars().next().is_some_and(is_id),
    )
}

/// Lines (offset, trimmed text, first 200 characters) of `text` that `keep` accepts and where
/// `ident` occurs not preceded by an identifier character and followed by text `after`
/// accepts.
fn lines_where(
    text: &str,
    ident: &str,
    keep: impl Fn(&str) -> bool,
    after: impl Fn(&str) -> bool,
) -> Vec<(u32, String)> {
    let is_id = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    let mut out = Vec::new();
    if ident.is_empty() {
        return out;
    }
    for (i, line) in text.lines().enumerate() {
        if !line.contains(ident) || !keep(line) {
            continue;
        }
        let mut from = 0;
        while let Some(p) = line[from..].find(ident) {
            let a = from + p;
            let b = a + ident.len();
            if !line[..a].chars().next_back().is_some_and(is_id) && after(&line[b..]) {
                out.push((i as u32, line.trim().chars().take(200).collect()));
                break;
            }
            from = b;
        }
    }
    out
}

/// Identifiers directly followed by `(` in `text` (call sites), in order, without duplicates.
/// Lines of a `language` file that are no code as a whole ([`comment_line`]) are skipped.
pub fn called_identifiers(text: &str, language: &str) -> Vec<String> {
    let is_id = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    let mut out: Vec<String> = Vec::new();
    for line in text.lines().filter(|l| !comment_line(l, language)) {
        let chars: Vec<(usize, char)> = line.char_indices().collect();
        let mut i = 0;
        while i < chars.len() {
            if is_id(chars[i].1) && !chars[i].1.is_ascii_digit() {
                let start = chars[i].0;
                let mut j = i;
                while j < chars.len() && is_id(chars[j].1) {
                    j += 1;
                }
                let end = chars.get(j).map_or(line.len(), |c| c.0);
                let mut k = j;
                while k < chars.len() && chars[k].1 == ' ' {
                    k += 1;
                }
                if chars.get(k).is_some_and(|c| c.1 == '(') {
                    let w = &line[start..end];
                    if !KEYWORDS.contains(&w) && !out.iter().any(|o| o == w) {
                        out.push(w.to_string());
                    }
                }
                i = j;
            } else {
                i += 1;
            }
        }
    }
    out
}

const KEYWORDS: &[&str] = &[
    "if", "for", "while", "match", "return", "switch", "catch", "fn", "def", "function", "sizeof",
    "typeof", "new", "super", "self", "this", "print", "println", "assert", "Some", "Ok", "Err",
    "elif", "and", "or", "not", "in", "func", "else", "with", "await", "async", "lambda", "vec",
];

/// Whether a line defines `ident` rather than calling it.
pub(super) fn defines(line: &str, ident: &str) -> bool {
    [
        "fn ",
        "def ",
        "function ",
        "func ",
        "class ",
        "struct ",
        "void ",
        "async ",
    ]
    .iter()
    .any(|kw| line.contains(&format!("{kw}{ident}")))
}

/// Lines (offset, trimmed text) where `ident` is called: the whole word followed by `(`
/// (optionally `::<…>` or spaces), on a line that does not define it.
pub fn call_lines(text: &str, ident: &str, language: &str) -> Vec<(u32, String)> {
    lines_where(
        text,
        ident,
        |line| !defines(line, ident) && !comment_line(line, language),
        |after| {
            let rest = after.trim_start();
            let rest = rest.strip_prefix("::").map_or(rest, |r| {
                // Turbofish: skip a balanced `<…>`.
                let mut depth = 0;
                let mut end = r.len();
                for (k, ch) in r.char_indices() {
                    match ch {
                        '<' => depth += 1,
                        '>' => {
                            depth -= 1;
                            if depth == 0 {
                                end = k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                &r[end.min(r.len())..]
            });
            rest.starts_with('(')
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_split_into_words() {
        assert_eq!(identifier_words("closest_match"), "closest match");
        assert_eq!(identifier_words("HttpServer"), "http server");
        assert_eq!(identifier_words("Server.serveHTTP"), "server serve http");
        assert_eq!(
            simple_name("rust polyglot src/lib.rs/Dictionary#suggest()."),
            "suggest"
        );
        assert_eq!(simple_name("Dictionary::suggest"), "suggest");
        assert_eq!(simple_name("closest_match"), "closest_match");
    }

    #[test]
    fn text_stage_matches_whole_words_only() {
        let text = "fn a() {\n    let x = closest_match(w, c);\n    closest_matches();\n}\n";
        assert_eq!(
            whole_word_lines(text, "closest_match"),
            vec![(1, "let x = closest_match(w, c);".to_string())]
        );
        assert!(whole_word_lines("my_closest_match()", "closest_match").is_empty());
        assert!(whole_word_lines("", "x").is_empty());
    }

    /// A call in a doc example, a commented-out line or an attribute is no call site; a call
    /// on a line of code is, a comment after it notwithstanding; `#` and `*` lines per
    /// language.
    #[test]
    fn calls_in_comment_lines_are_not_call_sites() {
        let text = "fn enter(&self) {\n    /// let v = span.in_scope(|| 1);\n    // in_scope(old)\n    \
                    /* in_scope(x) */\n    #[in_scope(y)]\n    let r = self.in_scope(f); // in_scope(z)\n}\n";
        assert_eq!(
            call_lines(text, "in_scope", "rust"),
            vec![(5, "let r = self.in_scope(f); // in_scope(z)".to_string())]
        );
        assert!(call_lines("/// in_scope(a)\n//! in_scope(b)\n", "in_scope", "rust").is_empty());
        assert!(call_lines("# in_scope(b)\n>>> in_scope(c)\n", "in_scope", "python").is_empty());
        // A JavaScript private member and a C dereference are code.
        assert_eq!(
            call_lines("#h(x) { return go(x); }", "go", "javascript").len(),
            1
        );
        assert_eq!(call_lines("*p = go(x);\n * go(doc)\n", "go", "c").len(), 1);
        assert_eq!(call_lines("#define G go(x)\n", "go", "c").len(), 0);
        assert_eq!(
            called_identifiers(
                "fn f() {\n    /// doc_call(x)\n    real_call(y);\n}",
                "rust"
            ),
            vec!["f", "real_call"]
        );
    }

    #[test]
    fn callee_stage_finds_call_sites() {
        let text = "def total(shapes):\n    if x:\n        return sum(s.area() for s in shapes)\n";
        assert_eq!(
            called_identifiers(text, "python"),
            vec!["total", "sum", "area"]
        );
    }
}
