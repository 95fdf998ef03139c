//! What every tool shares: input limits and checks, [`ToolError`] (the only error type that
//! reaches the protocol layer), the `debug` timing breakdown, and how symbols and snippets are
//! shown.

use code::{CodeView, NodeRef};
use schemars::JsonSchema;
use serde::Serialize;

/// Longest accepted query or code text, in bytes.
pub const MAX_QUERY_BYTES: usize = 8 * 1024;
/// Most results any tool returns.
pub const MAX_LIMIT: usize = 100;

/// A `limit` argument: `default` when absent, at most `max`; 0 is refused (it used to become
/// 1 silently).
pub fn limit_arg(v: Option<usize>, default: usize, max: usize) -> ToolResult<usize> {
    match v {
        Some(0) => Err(ToolError::InvalidInput(format!(
            "`limit` must be at least 1; omit it for the default ({default}), at most {max}"
        ))),
        v => Ok(v.unwrap_or(default).min(max)),
    }
}

/// Why a tool could not answer. `InvalidInput` and `NotFound` are the caller's to fix.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolError {
    InvalidInput(String),
    NotFound {
        message: String,
        suggestions: Vec<String>,
    },
    Internal(String),
    /// An index file found damaged while answering (a chunk text that is not UTF-8): the
    /// engine reports it in `index_status` and re-verifies the index.
    Damaged(String),
}

/// Longest error text an agent reads; longer ones (an echoed 100 KB argument) are cut.
pub const MAX_ERROR_BYTES: usize = 2048;

/// `m`, cut to [`MAX_ERROR_BYTES`] on a character boundary with a note of what was cut.
pub(crate) fn bounded(m: &str) -> std::borrow::Cow<'_, str> {
    if m.len() <= MAX_ERROR_BYTES {
        return m.into();
    }
    let mut end = MAX_ERROR_BYTES - 64;
    while !m.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} more bytes cut)", &m[..end], m.len() - end).into()
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ToolError::InvalidInput(m) | ToolError::Internal(m) | ToolError::Damaged(m) => {
                f.write_str(&bounded(m))
            }
            ToolError::NotFound {
                message,
                suggestions,
            } => {
                f.write_str(&bounded(message))?;
                if !suggestions.is_empty() {
                    write!(f, "; did you mean: {}?", suggestions.join(", "))?;
                }
                Ok(())
            }
        }
    }
}

impl ToolError {
    /// The answer an agent reads for this error: `{"error": text}`, plus `suggestions` for
    /// [`ToolError::NotFound`].
    pub fn body(&self) -> serde_json::Value {
        let mut body = serde_json::json!({ "error": self.to_string() });
        if let ToolError::NotFound { suggestions, .. } = self {
            body["suggestions"] = serde_json::json!(suggestions);
        }
        body
    }

    /// The outcome label of metrics: `invalid_input`, `not_found` or `error`.
    pub fn outcome(&self) -> &'static str {
        match self {
            ToolError::InvalidInput(_) => "invalid_input",
            ToolError::NotFound { .. } => "not_found",
            ToolError::Internal(_) | ToolError::Damaged(_) => "error",
        }
    }
}

pub type ToolResult<T> = Result<T, ToolError>;

/// A format error met while answering: a damaged file (a chunk text that is not UTF-8) is
/// [`ToolError::Damaged`], naming the file; anything else is internal.
impl From<format::FormatError> for ToolError {
    fn from(e: format::FormatError) -> ToolError {
        match e {
            format::FormatError::Corrupt { .. } => ToolError::Damaged(format!(
                "{e}; the index is being verified again and a segment whose checksum fails is left out (`index_status` lists it); `indexer verify` checks it by hand"
            )),
            e => ToolError::Internal(e.to_string()),
        }
    }
}

pub(crate) fn check_text(what: &str, q: &str) -> ToolResult<()> {
    if q.trim().is_empty() {
        return Err(ToolError::InvalidInput(format!(
            "`{what}` is empty; pass some words, an identifier or code"
        )));
    }
    if q.len() > MAX_QUERY_BYTES {
        return Err(ToolError::InvalidInput(format!(
            "`{what}` is {} bytes; the limit is {MAX_QUERY_BYTES} bytes: shorten it to the part that matters",
            q.len()
        )));
    }
    Ok(())
}

pub(crate) fn check_symbol(s: &str) -> ToolResult<()> {
    if s.trim().is_empty() {
        return Err(ToolError::InvalidInput(
            "`symbol` is empty; pass a symbol id (from search_code) or a name like `parse_config` or `Server::run`".into(),
        ));
    }
    if s.len() > 1024 {
        return Err(ToolError::InvalidInput(format!(
            "`symbol` is {} bytes; a symbol id or name is at most 1024 bytes",
            s.len()
        )));
    }
    Ok(())
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// `weights` of a hybrid search: two finite non-negative numbers, not both 0.
pub(crate) fn check_weights(w: Option<(f32, f32)>) -> ToolResult<()> {
    if w.is_some_and(|(v, l)| {
        !(v.is_finite() && l.is_finite() && v >= 0.0 && l >= 0.0 && v + l > 0.0)
    }) {
        return Err(ToolError::InvalidInput(
            "`weights` must be two non-negative numbers [vector, lexical], not both 0".into(),
        ));
    }
    Ok(())
}

pub(crate) fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

/// Time per phase in milliseconds (only with `debug: true`).
#[derive(Debug, Default, Clone, Serialize, JsonSchema)]
pub struct Debug {
    /// Query embedding (0 when cached or not needed).
    #[serde(skip_serializing_if = "is_zero")]
    pub embed_ms: f64,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub embed_cached: bool,
    /// Filter bitmaps.
    #[serde(skip_serializing_if = "is_zero")]
    pub filter_ms: f64,
    /// Vector search over all segments.
    #[serde(skip_serializing_if = "is_zero")]
    pub vector_ms: f64,
    /// BM25 over all segments.
    #[serde(skip_serializing_if = "is_zero")]
    pub bm25_ms: f64,
    /// Graph walks (expansion, callers/callees, impact).
    #[serde(skip_serializing_if = "is_zero")]
    pub graph_ms: f64,
    /// Rank fusion.
    #[serde(skip_serializing_if = "is_zero")]
    pub fusion_ms: f64,
    /// Building the answer (snippets, records).
    #[serde(skip_serializing_if = "is_zero")]
    pub format_ms: f64,
    /// Other work (text scans, symbol lookup).
    #[serde(skip_serializing_if = "is_zero")]
    pub other_ms: f64,
    pub total_ms: f64,
    /// Index generation that answered.
    pub generation: u64,
    /// How the vector and lexical lists were weighed, and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fusion: Option<String>,
    /// The relative date read in the query and the window it boosted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_window: Option<String>,
}

/// A symbol or chunk, as tools name it.
#[derive(Debug, Clone, Serialize, JsonSchema, PartialEq)]
pub struct SymbolRef {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub qualified: String,
    pub kind: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub symbol_id: String,
    pub path: String,
    pub language: String,
    pub start_line: u32,
    pub end_line: u32,
}

/// A body part's own lines: its text past the signature and the elision line the chunker puts
/// before them (a comment token and ` …` alone on the line: `// …`, `# …`); the whole text
/// when there is none.
pub(crate) fn part_body(text: &str) -> &str {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        at += line.len();
        let marker = line.trim().strip_suffix(" …").is_some_and(|token| {
            !token.is_empty() && token.len() <= 3 && !token.chars().any(char::is_alphanumeric)
        });
        if marker {
            return &text[at..];
        }
    }
    text
}

/// How tools name node `n`: a chunk by its symbol (a body part or a header by the symbol it is
/// a piece of: kind, name and id an agent can pass on) with the chunk's own lines; a file by
/// its path.
pub(crate) fn symbol_ref(s: &CodeView, n: NodeRef) -> SymbolRef {
    let f = s.file(n);
    if s.is_chunk(n) {
        let c = s.chunk(n);
        let sym = s.chunk((n.0, c.symbol_chunk(n.1)));
        SymbolRef {
            name: sym.name.to_string(),
            // Only when it says more than the name.
            qualified: if sym.qualified == sym.name {
                String::new()
            } else {
                sym.qualified.to_string()
            },
            kind: sym.kind.to_string(),
            symbol_id: sym.symbol_id.to_string(),
            path: f.path.to_string(),
            language: f.language.to_string(),
            start_line: c.start_line.to_native(),
            end_line: c.end_line.to_native(),
        }
    } else {
        let t = f.chunk_count.to_native();
        // The file's last line that any chunk covers.
        let first = f.first_chunk.to_native();
        let end = (first..first + t)
            .map(|c| s.chunk((n.0, c)).end_line.to_native())
            .max()
            .unwrap_or(0);
        SymbolRef {
            name: f.path.rsplit('/').next().unwrap_or("").to_string(),
            qualified: String::new(),
            kind: "file".into(),
            symbol_id: String::new(),
            path: f.path.to_string(),
            language: f.language.to_string(),
            start_line: 1,
            end_line: end,
        }
    }
}

pub(crate) fn label(r: &SymbolRef) -> String {
    if !r.qualified.is_empty() {
        r.qualified.clone()
    } else if !r.name.is_empty() {
        r.name.clone()
    } else {
        format!("{}:{}", r.path, r.start_line)
    }
}

/// The first `lines` lines of `text`, at most `max_chars` characters; (snippet, truncated).
pub fn snippet(text: &str, lines: usize, max_chars: usize) -> (String, bool) {
    let mut out = String::new();
    let mut truncated = false;
    for (i, l) in text.lines().enumerate() {
        if i >= lines {
            truncated = true;
            break;
        }
        if i > 0 {
            out.push('\n');
        }
        out.push_str(l);
    }
    if out.chars().count() > max_chars {
        out = out.chars().take(max_chars).collect();
        truncated = true;
    }
    (out, truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_are_bounded() {
        assert_eq!(snippet("a\nb\nc", 2, 100), ("a\nb".to_string(), true));
        assert_eq!(snippet("abcdef", 5, 3), ("abc".to_string(), true));
        assert_eq!(snippet("ab", 5, 3), ("ab".to_string(), false));
    }

    #[test]
    fn input_limits() {
        assert!(check_text("query", "  ").is_err());
        assert!(check_text("query", &"x".repeat(MAX_QUERY_BYTES + 1)).is_err());
        assert!(check_text("query", "ok").is_ok());
        assert!(check_symbol("").is_err());
        let e = ToolError::NotFound {
            message: "no symbol `x`".into(),
            suggestions: vec!["y".into()],
        };
        assert_eq!(e.to_string(), "no symbol `x`; did you mean: y?");
    }
}
