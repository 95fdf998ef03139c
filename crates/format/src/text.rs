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
///
/// Words are runs of alphanumeric characters and `_`. An all-ASCII word (nearly every word of
/// code) is split byte by byte ([`split_ascii`]); any other goes through the `char` path
/// ([`split_identifier`]). Both give the same parts for ASCII input (a test checks it).
pub fn for_each_token(text: &str, mut emit: impl FnMut(&str)) {
    let mut buf = String::new();
    let mut parts: Vec<(usize, usize)> = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        let mut ascii = true;
        // The word: ASCII bytes are classified directly, other characters decoded.
        while i < bytes.len() {
            let b = bytes[i];
            if b < 0x80 {
                if b.is_ascii_alphanumeric() || b == b'_' {
                    i += 1;
                    continue;
                }
                break;
            }
            let c = text[i..].chars().next().unwrap_or(' ');
            if !c.is_alphanumeric() {
                break;
            }
            ascii = false;
            i += c.len_utf8();
        }
        if i > start {
            let word = &text[start..i];
            parts.clear();
            if ascii {
                split_ascii(word.as_bytes(), &mut parts);
            } else {
                split_identifier(word, &mut parts);
            }
            if parts.len() > 1 {
                push(&mut buf, word.trim_matches('_'), &mut emit);
            }
            for &(a, b) in &parts {
                push(&mut buf, &word[a..b], &mut emit);
            }
        }
        // The separator after it (one character).
        if i < bytes.len() {
            i += if bytes[i] < 0x80 {
                1
            } else {
                text[i..].chars().next().map_or(1, char::len_utf8)
            };
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
    if tok.is_ascii() {
        buf.push_str(tok);
        buf.make_ascii_lowercase();
    } else {
        for c in tok.chars() {
            buf.extend(c.to_lowercase());
        }
    }
    if buf.len() <= 4 && STOP.contains(&buf.as_str()) {
        return;
    }
    emit(buf);
}

/// Words of a natural-language question that say nothing about what is asked for ("how do I
/// …", "what does my …"): [`question_terms`] drops them from the lexical side of a sentence
/// query. Short, on purpose: words a program could be about (`get`, `use`, `file`) stay.
pub const QUESTION_WORDS: &[&str] = &[
    "how", "what", "which", "why", "when", "where", "who", "whom", "whose", "do", "does", "did",
    "can", "could", "should", "would", "me", "my", "we", "our", "you", "your",
];

/// `query` without its [`QUESTION_WORDS`] (compared lower-cased, punctuation around a word
/// ignored), or unchanged when nothing else would remain.
pub fn question_terms(query: &str) -> String {
    let keep: Vec<&str> = query
        .split_whitespace()
        .filter(|w| {
            let bare = w
                .trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase();
            !QUESTION_WORDS.contains(&bare.as_str())
        })
        .collect();
    if keep.is_empty() || keep.len() == query.split_whitespace().count() {
        return query.to_string();
    }
    keep.join(" ")
}

/// Other forms of an English word a code base may spell it with: the singular of a plural
/// (`dicts` → `dict`, `matches` → `match`, `libraries` → `library`) and the stem of an `-ing` /
/// `-ed` form (`merging` → `merge`, `merg`; `parsed` → `parse`, `pars`; `stopped` → `stop`).
/// A light suffix stripper, not a stemmer: queries keep only the forms the index holds
/// (see `code::search::expand_query`), so a wrong form costs nothing.
pub fn variants(word: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let w = word;
    if !w.is_ascii() || w.len() < 4 || !w.bytes().all(|b| b.is_ascii_lowercase()) {
        return out;
    }
    let mut push = |s: String| {
        if s.len() >= 2 && s != w && !out.contains(&s) {
            out.push(s);
        }
    };
    let undouble = |stem: &str| -> Option<String> {
        let b = stem.as_bytes();
        (b.len() >= 3 && b[b.len() - 1] == b[b.len() - 2] && !b"aeiouls".contains(&b[b.len() - 1]))
            .then(|| stem[..stem.len() - 1].to_string())
    };
    if let Some(stem) = w.strip_suffix("ies").filter(|s| s.len() >= 2) {
        push(format!("{stem}y"));
    }
    if let Some(stem) = w.strip_suffix("es").filter(|s| s.len() >= 3) {
        push(stem.to_string());
    }
    if !w.ends_with("ss") && !w.ends_with("us") && !w.ends_with("is") {
        if let Some(stem) = w.strip_suffix('s').filter(|s| s.len() >= 3) {
            push(stem.to_string());
        }
    }
    for suffix in ["ing", "ed"] {
        if let Some(stem) = w.strip_suffix(suffix).filter(|s| s.len() >= 3) {
            if suffix == "ed" {
                if let Some(y) = stem.strip_suffix('i') {
                    push(format!("{y}y"));
                }
            }
            push(format!("{stem}e"));
            push(stem.to_string());
            if let Some(u) = undouble(stem) {
                push(u);
            }
        }
    }
    out
}

/// [`split_identifier`] for a word of ASCII letters, digits and `_` (what [`for_each_token`]
/// passes it), a byte at a time.
fn split_ascii(word: &[u8], out: &mut Vec<(usize, usize)>) {
    let class = |b: u8| match b {
        b'_' => Class::Underscore,
        b'0'..=b'9' => Class::Digit,
        b'A'..=b'Z' => Class::Upper,
        b'a'..=b'z' => Class::Lower,
        _ => Class::Other,
    };
    split_classes(word.iter().map(|&b| class(b)).enumerate(), word.len(), out);
}

/// Splits an identifier at `_`, lower→upper, acronym→word (`HTTPServer` → `HTTP`, `Server`) and
/// letter↔digit boundaries; pushes byte ranges of the parts into `out`.
fn split_identifier(word: &str, out: &mut Vec<(usize, usize)>) {
    let class = |c: char| {
        if c == '_' {
            Class::Underscore
        } else if c.is_ascii_digit() {
            Class::Digit
        } else if c.is_uppercase() {
            Class::Upper
        } else if c.is_lowercase() {
            Class::Lower
        } else {
            Class::Other
        }
    };
    split_classes(
        word.char_indices().map(|(pos, c)| (pos, class(c))),
        word.len(),
        out,
    );
}

/// What [`split_classes`] needs to know of a character.
#[derive(Clone, Copy, PartialEq)]
enum Class {
    Lower,
    Upper,
    Digit,
    Underscore,
    Other,
}

/// The splitting of [`split_identifier`] over the (byte offset, class) of each character of a
/// word of `len` bytes.
fn split_classes(
    classes: impl Iterator<Item = (usize, Class)>,
    len: usize,
    out: &mut Vec<(usize, usize)>,
) {
    let alpha = |x: Class| matches!(x, Class::Lower | Class::Upper | Class::Other);
    let mut start = None::<usize>;
    // The class of the previous character (none at the start and after `_`).
    let mut prev: Option<Class> = None;
    let mut iter = classes.peekable();
    while let Some((pos, cl)) = iter.next() {
        if cl == Class::Underscore {
            if let Some(s) = start.take() {
                out.push((s, pos));
            }
            prev = None;
            continue;
        }
        if let (Some(s), Some(p)) = (start, prev) {
            let next_lower = iter.peek().is_some_and(|&(_, n)| n == Class::Lower);
            let boundary = (p == Class::Lower && cl == Class::Upper)
                || (p == Class::Upper && cl == Class::Upper && next_lower)
                || (alpha(p) && cl == Class::Digit)
                || (p == Class::Digit && alpha(cl));
            if boundary {
                out.push((s, pos));
                start = Some(pos);
            }
        }
        if start.is_none() {
            start = Some(pos);
        }
        prev = Some(cl);
    }
    if let Some(s) = start {
        out.push((s, len));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tokenizer as it was before the ASCII path: `str::split` and `split_identifier` on
    /// every word. The fast path must give exactly its tokens.
    fn reference_tokens(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut buf = String::new();
        let mut parts = Vec::new();
        let mut emit = |t: &str| out.push(t.to_string());
        for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if word.is_empty() {
                continue;
            }
            parts.clear();
            split_identifier(word, &mut parts);
            if parts.len() > 1 {
                push(&mut buf, word.trim_matches('_'), &mut emit);
            }
            for &(a, b) in &parts {
                push(&mut buf, &word[a..b], &mut emit);
            }
        }
        out
    }

    #[test]
    fn ascii_path_equals_char_path() {
        // Random strings over an alphabet with every class boundary: letters of both cases,
        // digits, `_`, punctuation, whitespace, and non-ASCII letters, digits, marks and
        // separators (`ß`, `É`, `٣`, `\u{301}`, `\u{a0}`, `—`, `中`).
        let alphabet: Vec<char> = "aZbYcX09_ _./:-(){}\n\tßÉ٣\u{301}\u{a0}—中HTTPsRv"
            .chars()
            .collect();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 40) as usize;
            let text: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            assert_eq!(tokenize(&text), reference_tokens(&text), "{text:?}");
        }
        for text in [
            "parseHTTPRequest",
            "__init__ self.x_1y2Z",
            "HTTPServer2Go _A_ a__b",
            "x\u{301}y ÉtéX",
        ] {
            assert_eq!(tokenize(text), reference_tokens(text), "{text:?}");
        }
    }

    #[test]
    fn splits_code_identifiers_and_keeps_whole() {
        assert_eq!(
            tokenize("parseHTTPRequest"),
            ["parsehttprequest", "parse", "http", "request"]
        );
        assert_eq!(
            tokenize("read_to_string"),
            ["read_to_string", "read", "string"]
        );
        assert_eq!(
            tokenize("src/foo/bar_baz.rs"),
            ["src", "foo", "bar_baz", "bar", "baz", "rs"]
        );
        assert_eq!(tokenize("the Vec2d of a"), ["vec2d", "vec"]);
        assert_eq!(tokenize("Größe übergeben"), ["größe", "übergeben"]);
        assert!(tokenize("  ;;; ").is_empty());
        assert!(tokenize(&"x".repeat(100)).is_empty());
    }

    #[test]
    fn variants_of_english_words() {
        let v = |w: &str| variants(w);
        assert!(v("dicts").contains(&"dict".to_string()));
        assert!(v("matches").contains(&"match".to_string()));
        assert!(v("libraries").contains(&"library".to_string()));
        assert!(v("merging").contains(&"merge".to_string()));
        assert!(v("parsed").contains(&"parse".to_string()));
        assert!(v("stopped").contains(&"stop".to_string()));
        assert!(v("copied").contains(&"copy".to_string()));
        assert!(v("class").is_empty());
        assert!(v("status").is_empty());
        assert!(v("parseHTTP").is_empty());
        assert!(v("abc").is_empty());
    }

    #[test]
    fn question_words_leave_the_subject() {
        assert_eq!(
            question_terms("How do I merge two dicts in Python?"),
            "I merge two dicts in Python?"
        );
        assert_eq!(question_terms("what does my"), "what does my");
        assert_eq!(question_terms("parse_args"), "parse_args");
    }
}
