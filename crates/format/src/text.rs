//! The code-aware tokenizer shared by the BM25 writer and every query: the postings are only
//! meaningful with exactly this function, so it lives with the format.
//!
//! Identifiers are kept whole and also split at `_`, camelCase and letter/digit boundaries
//! (`parseHTTPRequest` → `parsehttprequest`, `parse`, `http`, `request`); everything is
//! lower-cased; punctuation (including `/`, `.`, `::`) separates tokens, so paths split into
//! their parts. Tokens shorter than 2 or longer than 64 bytes and a few English stop words are
//! dropped.

const STOP: &[&str] = &[
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "in", "is", "it", "of", "on",
    "or", "that", "the", "this", "to", "was", "with",
];

const MAX_TOKEN: usize = 64;

/// Calls `emit` for each token of `text`, in order (duplicates included).
pub fn for_each_token(text: &str, mut emit: impl FnMut(&str)) {
    let mut buf = String::new();
    for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
        if word.is_empty() {
            continue;
        }
        let parts = split_identifier(word);
        let whole = word.trim_matches('_');
        if parts.len() > 1 {
            push(&mut buf, whole, &mut emit);
        }
        for p in parts {
            push(&mut buf, p, &mut emit);
        }
    }
}

/// All tokens of `text` as owned strings.
pub fn tokenize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for_each_token(text, |t| out.push(t.to_string()));
    out
}

fn push(buf: &mut String, tok: &str, emit: &mut impl FnMut(&str)) {
    if tok.len() < 2 || tok.len() > MAX_TOKEN {
        return;
    }
    buf.clear();
    for c in tok.chars() {
        buf.extend(c.to_lowercase());
    }
    if STOP.contains(&buf.as_str()) {
        return;
    }
    emit(buf);
}

/// Splits an identifier at `_`, lower→upper, acronym→word (`HTTPServer` → `HTTP`, `Server`) and
/// letter↔digit boundaries.
fn split_identifier(word: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    for piece in word.split('_').filter(|p| !p.is_empty()) {
        let chars: Vec<(usize, char)> = piece.char_indices().collect();
        let mut start = 0;
        for i in 1..chars.len() {
            let (pos, c) = chars[i];
            let prev = chars[i - 1].1;
            let next = chars.get(i + 1).map(|x| x.1);
            let boundary = (prev.is_lowercase() && c.is_uppercase())
                || (prev.is_uppercase()
                    && c.is_uppercase()
                    && next.is_some_and(|n| n.is_lowercase()))
                || (prev.is_alphabetic() && c.is_ascii_digit())
                || (prev.is_ascii_digit() && c.is_alphabetic());
            if boundary {
                parts.push(&piece[start..pos]);
                start = pos;
            }
        }
        parts.push(&piece[start..]);
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_code_identifiers_and_keeps_whole() {
        assert_eq!(
            tokenize("parseHTTPRequest"),
            ["parsehttprequest", "parse", "http", "request"]
        );
        assert_eq!(tokenize("read_to_string"), ["read_to_string", "read", "string"]);
        assert_eq!(tokenize("src/foo/bar_baz.rs"), ["src", "foo", "bar_baz", "bar", "baz", "rs"]);
        assert_eq!(tokenize("the Vec2d of a"), ["vec2d", "vec"]);
        assert_eq!(tokenize("Größe übergeben"), ["größe", "übergeben"]);
        assert!(tokenize("  ;;; ").is_empty());
        assert!(tokenize(&"x".repeat(100)).is_empty());
    }
}
