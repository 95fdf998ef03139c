//! Hybrid search: per-segment vector and BM25 rankings, tombstones and filters applied before
//! ranking (roaring bitmaps), fused by linear combination of z-scored lists (default) or weighted
//! reciprocal rank fusion; see [`Fusion`].

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

/// A ranking mode name that is not `hybrid`, `vector` or `lexical`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode `{0}`; expected hybrid, vector or lexical")]
pub struct UnknownMode(pub String);

impl std::str::FromStr for Mode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Mode, UnknownMode> {
        match s {
            "hybrid" => Ok(Mode::Hybrid),
            "vector" => Ok(Mode::Vector),
            "lexical" => Ok(Mode::Lexical),
            _ => Err(UnknownMode(s.to_string())),
        }
    }
}

/// A path filter that cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobError {
    #[error("the path filter is empty")]
    Empty,
    #[error("invalid path glob `{pattern}`: {reason}")]
    Invalid { pattern: String, reason: String },
}

/// Options of a search.
#[derive(Debug, Clone)]
pub struct SearchOptions {
    pub limit: usize,
    pub mode: Mode,
    /// How the vector and lexical rankings are combined in hybrid mode.
    pub fusion: Fusion,
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
    /// Weights of the (vector, lexical) lists; `None` routes by query shape
    /// ([`identifier_like`] queries lean lexical, sentences weigh both equally). For linear
    /// fusion the vector share is `wv / (wv + wl)`.
    pub weights: Option<(f32, f32)>,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            limit: 10,
            mode: Mode::Hybrid,
            fusion: Fusion::default(),
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

/// Fusion of the vector and lexical rankings. Hit scores are in (0, 1) for linear fusion
/// (a logistic squash of the fused z-score) and small positive numbers for RRF.
///
/// Measured on the CodeSearchNet-style harness (`benches/src/bin/quality.rs`: 528 doc-comment
/// queries over 5,220 Rust/Python/JavaScript chunks): MRR@10 vector 0.477, BM25 0.463, RRF
/// (k = 60, routed weights) 0.499, linear fusion of z-scored lists (equal weights) 0.560. Linear
/// z-score is the default; RRF stays available.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Fusion {
    /// Each list's scores are z-normalised over its top `depth`; a chunk missing from a list
    /// gets that list's lowest normalised score; fused = w·z_vector + (1 − w)·z_lexical.
    #[default]
    LinearZScore,
    /// Weighted reciprocal rank fusion with constant `k`.
    Rrf { k: f32 },
}

impl Fusion {
    /// How this fusion combines the lists, in words (tool descriptions are checked against it).
    pub fn describe(&self) -> &'static str {
        match self {
            Fusion::LinearZScore => "a linear combination of z-scored lists",
            Fusion::Rrf { .. } => "weighted reciprocal rank fusion",
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
pub type ChunkRef = (usize, u32);
/// (fused score, vector rank, lexical rank).
pub type Fused = (f32, Option<usize>, Option<usize>);

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
pub fn path_glob(pattern: &str) -> Result<globset::GlobMatcher, GlobError> {
    let p = pattern.trim();
    if p.is_empty() {
        return Err(GlobError::Empty);
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
        .map_err(|e| GlobError::Invalid {
            pattern: pattern.to_string(),
            reason: e.to_string(),
        })
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

/// z-scores of a ranked list's scores, and the score a chunk missing from the list gets (the
/// lowest z-score). A list whose scores are all equal (one hit, or ties) gives every member 1
/// and missing chunks 0, so a lone exact match still outranks what the list did not find.
fn zscores(list: &[(usize, u32, f32)]) -> (Vec<f32>, f32) {
    if list.is_empty() {
        return (Vec::new(), 0.0);
    }
    let n = list.len() as f32;
    let mean = list.iter().map(|x| x.2).sum::<f32>() / n;
    let var = list.iter().map(|x| (x.2 - mean).powi(2)).sum::<f32>() / n;
    let sd = var.sqrt();
    if sd < 1e-6 * mean.abs().max(1e-6) {
        return (vec![1.0; list.len()], 0.0);
    }
    let z: Vec<f32> = list.iter().map(|x| (x.2 - mean) / sd).collect();
    let floor = z.iter().copied().fold(f32::MAX, f32::min);
    (z, floor)
}

/// Squashes a fused z-score into (0, 1): the order is unchanged, and scores stay positive so
/// callers can damp them (graph expansion scores neighbours as a fraction of their seed).
fn squash(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The global BM25 top `depth` over every segment, by descending score, ties by (segment,
/// chunk). Segments are searched in order, each only above the depth-th score found so far: a
/// later segment's hit with an equal score would rank after it, so the merged list is exactly
/// the global top `depth`, and later segments skip more.
fn lexical_list(
    index: &Index,
    query: &str,
    depth: usize,
    allows: &[Option<RoaringBitmap>],
) -> Vec<(usize, u32, f32)> {
    let mut list: Vec<(usize, u32, f32)> = Vec::new();
    // IDF from all segments: a small segment (a re-indexed file) must not score its terms as
    // if they were common.
    let mut stats = format::bm25::TermStats::default();
    for ls in &index.segments {
        stats.add_segment(ls.segment.postings(), query);
    }
    for (si, ls) in index.segments.iter().enumerate() {
        let floor = if list.len() >= depth {
            list[depth - 1].2
        } else {
            f32::NEG_INFINITY
        };
        for (c, s) in ls.segment.search_bm25_above(
            query,
            depth,
            allows[si].as_ref(),
            Some(&ls.tombstones),
            floor,
            Some(&stats),
        ) {
            list.push((si, c, s));
        }
        list.sort_by(|a, b| b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
        list.truncate(depth);
    }
    list
}

/// Fuses a vector and a lexical list (each by descending score, keyed by (segment, item)) as
/// `o.fusion` says, with `o.weights` or weights routed by query shape. Returns the best
/// `o.limit` keys with (fused score, vector rank, lexical rank), best first.
pub fn fuse(
    vec_list: &[(usize, u32, f32)],
    lex_list: &[(usize, u32, f32)],
    query: &str,
    o: &SearchOptions,
) -> Vec<(ChunkRef, Fused)> {
    // Identifier-like queries lean lexical; for sentences both lists weigh the same (the best
    // setting on the quality harness).
    let (wv, wl) = o.weights.unwrap_or(if identifier_like(query) {
        (0.5, 1.0)
    } else {
        (1.0, 1.0)
    });
    let mut fused: std::collections::HashMap<ChunkRef, Fused> = std::collections::HashMap::new();
    match o.fusion {
        Fusion::Rrf { k } => {
            for (r, (si, c, _)) in vec_list.iter().enumerate() {
                let e = fused.entry((*si, *c)).or_insert((0.0, None, None));
                e.0 += wv / (k + r as f32 + 1.0);
                e.1 = Some(r + 1);
            }
            for (r, (si, c, _)) in lex_list.iter().enumerate() {
                let e = fused.entry((*si, *c)).or_insert((0.0, None, None));
                e.0 += wl / (k + r as f32 + 1.0);
                e.2 = Some(r + 1);
            }
        }
        Fusion::LinearZScore => {
            let alpha = if wv + wl > 0.0 { wv / (wv + wl) } else { 0.5 };
            let (zv, fv) = zscores(vec_list);
            let (zl, fl) = zscores(lex_list);
            for (r, (si, c, _)) in vec_list.iter().enumerate() {
                let e = fused.entry((*si, *c)).or_insert((0.0, None, None));
                e.1 = Some(r + 1);
            }
            for (r, (si, c, _)) in lex_list.iter().enumerate() {
                let e = fused.entry((*si, *c)).or_insert((0.0, None, None));
                e.2 = Some(r + 1);
            }
            for e in fused.values_mut() {
                let v = match e.1 {
                    Some(r) => zv[r - 1],
                    None => fv,
                };
                let l = match e.2 {
                    Some(r) => zl[r - 1],
                    None => fl,
                };
                e.0 = squash(alpha * v + (1.0 - alpha) * l);
            }
        }
    }
    let mut ranked: Vec<(ChunkRef, Fused)> = fused.into_iter().collect();
    ranked.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    ranked.truncate(o.limit);
    ranked
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
        lex_list = lexical_list(index, query, depth, &allows);
        tm.bm25 = t.elapsed();
    }

    let t = Instant::now();
    let ranked = fuse(&vec_list, &lex_list, query, o);
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
    fn zscores_handle_degenerate_lists() {
        let (z, floor) = zscores(&[(0, 1, 3.0)]);
        assert_eq!((z, floor), (vec![1.0], 0.0));
        let (z, floor) = zscores(&[(0, 1, 2.0), (0, 2, 2.0)]);
        assert_eq!((z, floor), (vec![1.0, 1.0], 0.0));
        let (z, floor) = zscores(&[(0, 1, 3.0), (0, 2, 1.0)]);
        assert_eq!(z, vec![1.0, -1.0]);
        assert_eq!(floor, -1.0);
        assert!(zscores(&[]).0.is_empty());
        assert!(squash(2.0) > squash(1.0) && squash(-5.0) > 0.0 && squash(5.0) < 1.0);
    }

    /// The floor passed from segment to segment must not change the merged BM25 list.
    #[test]
    fn lexical_list_across_segments_equals_brute_force() {
        use format::manifest::{IndexManifest, SegmentEntry};
        use format::records::{ChunkRecord, FileRecord, NO_PARENT};
        const DIM: usize = 4;
        let dir = tempfile::tempdir().unwrap();
        let words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "tau"];
        let mut seed = 7u64;
        let mut rnd = move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        };
        let mut entries = Vec::new();
        for _ in 0..3 {
            let mut b = format::SegmentBuilder::default();
            for i in 0..400u32 {
                let len = 1 + rnd() % 12;
                // Skewed: low word indices are common.
                let text: Vec<&str> = (0..len)
                    .map(|_| words[(rnd() % 7).min(rnd() % 7)])
                    .collect();
                b.chunks.push(ChunkRecord {
                    file: 0,
                    kind: "function".into(),
                    name: String::new(),
                    qualified: String::new(),
                    symbol_id: String::new(),
                    start_line: i + 1,
                    end_line: i + 1,
                    start_byte: 0,
                    end_byte: 1,
                    parent: NO_PARENT,
                    content_hash: [0; 32],
                    text: text.join(" "),
                });
                b.vectors.extend([1.0, 0.0, 0.0, 0.0]);
            }
            b.files.push(FileRecord {
                repo: "r".into(),
                path: "a.rs".into(),
                language: "rust".into(),
                content_hash: [0; 32],
                size: 1,
                first_chunk: 0,
                chunk_count: 400,
                imports: vec![],
            });
            let (id, _) = b.write(dir.path(), "m", DIM).unwrap();
            entries.push(SegmentEntry {
                id,
                chunks: 400,
                tombstones: None,
            });
        }
        IndexManifest {
            format_version: format::FORMAT_VERSION,
            generation: 1,
            model_id: "m".into(),
            dim: DIM as u32,
            segments: entries,
            ..IndexManifest::empty("", 0)
        }
        .commit(dir.path())
        .unwrap();
        let index = Index::open(dir.path()).unwrap();
        let allows = vec![None, None, None];
        for q in [
            "alpha",
            "beta tau",
            "sigma omega alpha",
            "tau",
            "gamma delta",
        ] {
            // Brute force with the same index-wide IDF statistics.
            let mut st = format::bm25::TermStats::default();
            for ls in &index.segments {
                st.add_segment(ls.segment.postings(), q);
            }
            for depth in [1, 5, 50, 2000] {
                let mut all: Vec<(usize, u32, f32)> = Vec::new();
                for (si, ls) in index.segments.iter().enumerate() {
                    for (c, s) in ls.segment.postings().search_exhaustive_with(
                        q,
                        usize::MAX,
                        None,
                        None,
                        Some(&st),
                    ) {
                        all.push((si, c, s));
                    }
                }
                all.sort_by(|a, b| b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
                all.truncate(depth);
                assert_eq!(lexical_list(&index, q, depth, &allows), all, "{q} {depth}");
            }
        }
    }

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
