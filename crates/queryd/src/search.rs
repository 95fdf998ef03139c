//! Hybrid search: per-segment vector and BM25 rankings, tombstones and filters applied before
//! ranking (roaring bitmaps), fused with weighted reciprocal rank fusion.

use std::time::{Duration, Instant};

use format::manifest::LiveSegment;
use format::Index;
use roaring::RoaringBitmap;
use serde::Serialize;

/// Which rankings to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Hybrid,
    Vector,
    Lexical,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "hybrid" => Ok(Mode::Hybrid),
            "vector" => Ok(Mode::Vector),
            "lexical" => Ok(Mode::Lexical),
            _ => Err(format!(
                "unknown mode `{s}`; expected hybrid, vector or lexical"
            )),
        }
    }
}

/// Options of a search.
#[derive(Debug, Clone)]
pub struct SearchOptions {
    pub limit: usize,
    pub mode: Mode,
    /// RRF constant.
    pub rrf_k: f32,
    pub nprobe: usize,
    /// Only chunks of files in this language (`rust`, `python`, …).
    pub language: Option<String>,
    /// Only chunks of this kind (`function`, `method`, …).
    pub kind: Option<String>,
    /// Only files whose path starts with this prefix.
    pub path_prefix: Option<String>,
    /// Only files whose repository-relative path matches this glob (see [`path_glob`]).
    pub path_glob: Option<globset::GlobMatcher>,
    /// Only files of this repository.
    pub repo: Option<String>,
    /// RRF weights of the (vector, lexical) lists; `None` routes by query shape
    /// ([`identifier_like`] queries lean lexical, sentences lean dense).
    pub weights: Option<(f32, f32)>,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            limit: 10,
            mode: Mode::Hybrid,
            rrf_k: 60.0,
            nprobe: format::vectors::DEFAULT_NPROBE,
            language: None,
            kind: None,
            path_prefix: None,
            path_glob: None,
            repo: None,
            weights: None,
        }
    }
}

/// One result.
#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    pub score: f32,
    pub path: String,
    pub repo: String,
    pub language: String,
    pub kind: String,
    pub name: String,
    pub symbol_id: String,
    pub start_line: u32,
    pub end_line: u32,
    /// 1-based ranks in the vector and BM25 lists, when present there.
    pub vector_rank: Option<usize>,
    pub lexical_rank: Option<usize>,
    pub text: String,
    #[serde(skip)]
    pub segment: usize,
    #[serde(skip)]
    pub chunk: u32,
}

/// Timings per phase.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Timings {
    pub filter: Duration,
    pub vector: Duration,
    pub bm25: Duration,
    pub fusion: Duration,
}

/// (segment ordinal, chunk ordinal).
type ChunkRef = (usize, u32);
/// (fused score, vector rank, lexical rank).
type Fused = (f32, Option<usize>, Option<usize>);

/// True when a query looks like an identifier (`parse_config`, `HttpServer`, `a::b`), which
/// BM25 matches exactly and a sentence encoder only approximates.
pub fn identifier_like(q: &str) -> bool {
    let q = q.trim();
    !q.is_empty()
        && !q.contains(char::is_whitespace)
        && (q.contains('_')
            || q.contains("::")
            || q.contains('.')
            || q.chars().skip(1).any(char::is_uppercase))
}

/// Compiles a path filter: a pattern without glob characters is a directory or file (`src/`,
/// `src/lib.rs`); a
/// pattern without `/` matches at any depth (`*.rs` is `**/*.rs`); `*` stays inside one
/// directory, `**` crosses directories.
pub fn path_glob(pattern: &str) -> Result<globset::GlobMatcher, String> {
    let p = pattern.trim();
    if p.is_empty() {
        return Err("the path filter is empty".into());
    }
    let has_meta = p.contains(['*', '?', '[', '{']);
    let full = if !has_meta {
        // A directory (everything under it) or a file.
        let d = globset::escape(p.trim_start_matches("./").trim_end_matches('/'));
        format!("{{{d},{d}/**}}")
    } else if !p.contains('/') {
        format!("**/{p}")
    } else {
        p.trim_start_matches("./").to_string()
    };
    globset::GlobBuilder::new(&full)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("invalid path glob `{pattern}`: {e}"))
}

fn allow_bitmap(ls: &LiveSegment, o: &SearchOptions) -> Option<RoaringBitmap> {
    if o.language.is_none()
        && o.kind.is_none()
        && o.path_prefix.is_none()
        && o.path_glob.is_none()
        && o.repo.is_none()
    {
        return None;
    }
    let t = ls.segment.table();
    let mut bits = RoaringBitmap::new();
    for (fi, f) in t.files.iter().enumerate() {
        if o.language
            .as_deref()
            .is_some_and(|l| f.language.as_str() != l)
            || o.path_prefix
                .as_deref()
                .is_some_and(|p| !f.path.as_str().starts_with(p))
            || o.path_glob
                .as_ref()
                .is_some_and(|g| !g.is_match(f.path.as_str()))
            || o.repo.as_deref().is_some_and(|r| f.repo.as_str() != r)
        {
            continue;
        }
        let first = f.first_chunk.to_native();
        for c in first..first + f.chunk_count.to_native() {
            if o.kind
                .as_deref()
                .is_none_or(|k| t.chunks[c as usize].kind.as_str() == k)
            {
                bits.insert(c);
            }
        }
        let _ = fi;
    }
    Some(bits)
}

/// Searches every live segment. `query_vec` is the embedded query (required unless the mode is
/// lexical).
pub fn search(
    index: &Index,
    query: &str,
    query_vec: Option<&[f32]>,
    o: &SearchOptions,
) -> Result<(Vec<Hit>, Timings), format::FormatError> {
    let mut tm = Timings::default();
    let depth = (o.limit * 4).max(50);
    let t = Instant::now();
    let allows: Vec<Option<RoaringBitmap>> = index
        .segments
        .iter()
        .map(|ls| allow_bitmap(ls, o))
        .collect();
    tm.filter = t.elapsed();

    let mut vec_list: Vec<(usize, u32, f32)> = Vec::new();
    if o.mode != Mode::Lexical {
        let t = Instant::now();
        if let Some(q) = query_vec {
            for (si, ls) in index.segments.iter().enumerate() {
                for (c, s) in ls.segment.search_vectors(
                    q,
                    depth,
                    o.nprobe,
                    allows[si].as_ref(),
                    Some(&ls.tombstones),
                )? {
                    vec_list.push((si, c, s));
                }
            }
        }
        vec_list.sort_by(|a, b| b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
        vec_list.truncate(depth);
        tm.vector = t.elapsed();
    }
    let mut lex_list: Vec<(usize, u32, f32)> = Vec::new();
    if o.mode != Mode::Vector {
        let t = Instant::now();
        for (si, ls) in index.segments.iter().enumerate() {
            for (c, s) in
                ls.segment
                    .search_bm25(query, depth, allows[si].as_ref(), Some(&ls.tombstones))
            {
                lex_list.push((si, c, s));
            }
        }
        lex_list.sort_by(|a, b| b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
        lex_list.truncate(depth);
        tm.bm25 = t.elapsed();
    }

    let t = Instant::now();
    // Identifier-like queries lean lexical, sentences lean dense.
    let (wv, wl) = o.weights.unwrap_or(if identifier_like(query) {
        (0.5, 1.0)
    } else {
        (1.0, 0.6)
    });
    let mut fused: std::collections::HashMap<ChunkRef, Fused> = std::collections::HashMap::new();
    for (r, (si, c, _)) in vec_list.iter().enumerate() {
        let e = fused.entry((*si, *c)).or_insert((0.0, None, None));
        e.0 += wv / (o.rrf_k + r as f32 + 1.0);
        e.1 = Some(r + 1);
    }
    for (r, (si, c, _)) in lex_list.iter().enumerate() {
        let e = fused.entry((*si, *c)).or_insert((0.0, None, None));
        e.0 += wl / (o.rrf_k + r as f32 + 1.0);
        e.2 = Some(r + 1);
    }
    let mut ranked: Vec<(ChunkRef, Fused)> = fused.into_iter().collect();
    ranked.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    ranked.truncate(o.limit);
    let hits = ranked
        .into_iter()
        .map(|((si, c), (score, vr, lr))| {
            let t = index.segments[si].segment.table();
            let ch = &t.chunks[c as usize];
            let f = &t.files[ch.file.to_native() as usize];
            Hit {
                score,
                path: f.path.to_string(),
                repo: f.repo.to_string(),
                language: f.language.to_string(),
                kind: ch.kind.to_string(),
                name: ch.name.to_string(),
                symbol_id: ch.symbol_id.to_string(),
                start_line: ch.start_line.to_native(),
                end_line: ch.end_line.to_native(),
                vector_rank: vr,
                lexical_rank: lr,
                text: ch.text.to_string(),
                segment: si,
                chunk: c,
            }
        })
        .collect();
    tm.fusion = t.elapsed();
    Ok((hits, tm))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_identifiers_to_lexical() {
        assert!(identifier_like("parse_config"));
        assert!(identifier_like("HttpServer"));
        assert!(identifier_like("fmt::Display"));
        assert!(!identifier_like("how are segments written"));
        assert!(!identifier_like("parse"));
        assert!("hybrid".parse::<Mode>().is_ok());
        assert!("nope".parse::<Mode>().is_err());
    }

    #[test]
    fn path_globs() {
        let g = path_glob("*.rs").unwrap();
        assert!(g.is_match("src/lib.rs") && g.is_match("lib.rs") && !g.is_match("src/lib.py"));
        let g = path_glob("src/*.rs").unwrap();
        assert!(g.is_match("src/lib.rs") && !g.is_match("src/a/lib.rs"));
        let g = path_glob("src/**/*.rs").unwrap();
        assert!(g.is_match("src/a/b/lib.rs") && g.is_match("src/lib.rs"));
        let g = path_glob("crates/queryd").unwrap();
        assert!(g.is_match("crates/queryd/src/x.rs") && !g.is_match("crates/format/x.rs"));
        assert!(!g.is_match("crates/queryd2/x.rs"));
        assert!(path_glob("src/").unwrap().is_match("src/lib.rs"));
        assert!(path_glob("src/lib.rs").unwrap().is_match("src/lib.rs"));
        let g = path_glob("web/{api,util}.*").unwrap();
        assert!(
            g.is_match("web/api.ts") && g.is_match("web/util.js") && !g.is_match("web/app.tsx")
        );
        assert!(path_glob("src/[").is_err());
        assert!(path_glob(" ").is_err());
    }
}
