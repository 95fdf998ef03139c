//! Long file: the search pipeline (filters, both rankings, fusion, name tier, collapse) stays
//! in one place with the tests of its invariants.
//!
//! Hybrid search: per-segment vector and BM25 rankings, tombstones and filters applied before
//! ranking (roaring bitmaps), fused by linear combination of z-scored lists (default) or weighted
//! reciprocal rank fusion; see [`Fusion`].
//!
//! Invariants: each ranking contributes its top [`CANDIDATE_DEPTH`] candidates whatever the
//! `limit` (BM25 its top [`NORM_DEPTH`] in hybrid linear fusion: [`lexical_depth`]), the name
//! tier and the collapse ([`crate::rank`]) run over every candidate, and only then is the list
//! cut to `limit` — so the first k results are the same for every limit ≥ k (up to
//! [`CANDIDATE_DEPTH`]).

use std::time::{Duration, Instant};

use format::manifest::LiveSegment;
use format::Index;
use roaring::RoaringBitmap;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use crate::rank;

/// An index with at least this many live chunks runs a hybrid search's two rankings side by
/// side on rayon's pool when the pool has more than one thread ("when cores are free",
/// [`pairs_rankings`]), and with two or more segments also searches its segments in parallel
/// ([`fans_out`]); below it the fan-out costs more than it saves. The results are the same
/// either way (tested).
pub const PARALLEL_MIN_CHUNKS: u64 = 50_000;

/// Whether `index`'s segments are searched in parallel (see [`PARALLEL_MIN_CHUNKS`]).
pub fn fans_out(index: &Index) -> bool {
    index.segments.len() > 1 && pairs_rankings(index)
}

/// Whether a hybrid search over `index` runs its two rankings (vector and BM25) side by side
/// on rayon's pool: the pool has more than one thread and the index at least
/// [`PARALLEL_MIN_CHUNKS`] live chunks, in one segment or in several (then each ranking also
/// fans out over the segments, [`fans_out`]). The results are the same either way (tested).
pub fn pairs_rankings(index: &Index) -> bool {
    rayon::current_num_threads() > 1 && index.live_chunks() >= PARALLEL_MIN_CHUNKS
}

/// `f` over `0..n`, on rayon's pool when `parallel`, results in index order.
fn per_segment<T: Send>(n: usize, parallel: bool, f: impl Fn(usize) -> T + Sync + Send) -> Vec<T> {
    use rayon::prelude::*;
    if parallel {
        (0..n).into_par_iter().map(f).collect()
    } else {
        (0..n).map(f).collect()
    }
}

/// Candidates taken from each ranking (vector, BM25) before fusion. It does not depend on
/// `limit` (up to this many results), so asking for more results only appends to the list.
/// Measured on the quality harness: see README (search).
pub const CANDIDATE_DEPTH: usize = 100;

/// The candidate depth of a search returning `limit` results: [`CANDIDATE_DEPTH`], or
/// `limit` when more results than that are asked for.
pub fn candidate_depth(limit: usize) -> usize {
    limit.max(CANDIDATE_DEPTH)
}

/// The depth of the lexical list in a search returning `o.limit` results from an index where
/// the query names `named` chunks (the name tier's, [`crate::rank::name_matches`]).
///
/// Hybrid linear fusion gives every chunk below a list's first [`NORM_DEPTH`] the z-score of a
/// chunk missing from it, so the lexical ranks past that head change no fused score: they only
/// bring chunks that both lists rank below their heads (the ties at the bottom of the fused
/// list, ordered by their unclamped z-scores) and order such ties among themselves. There,
/// with at most one named chunk and at most [`CANDIDATE_DEPTH`] results asked for, the
/// lexical list stops at [`NORM_DEPTH`]: every chunk above those ties keeps its score and
/// place (tested), and BM25 skips more (on the 1M-chunk bench, see docs/measurements.md,
/// "Search over many segments"). Lexical mode, reciprocal rank fusion (which counts every
/// rank), larger limits and queries naming several chunks (whose order among themselves the
/// ties can decide) keep [`candidate_depth`].
pub fn lexical_depth(o: &SearchOptions, named: usize) -> usize {
    let depth = candidate_depth(o.limit);
    if o.mode == Mode::Hybrid
        && o.fusion == Fusion::LinearZScore
        && named <= 1
        && o.limit <= CANDIDATE_DEPTH
    {
        NORM_DEPTH
    } else {
        depth
    }
}

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
    /// IVF lists probed; `None`: [`format::vectors::default_nprobe`] of the index's size.
    pub nprobe: Option<usize>,
    /// Only chunks of files in this language (`rust`, `python`, …).
    pub language: Option<String>,
    /// Only chunks of this kind (`function`, `method`, …).
    pub kind: Option<String>,
    /// Only files whose path starts with this prefix.
    pub path_prefix: Option<String>,
    /// Only files whose repository-relative path matches this glob (see [`path_glob`]).
    pub path_glob: Option<PathFilter>,
    /// Only files of this repository.
    pub repo: Option<String>,
    /// Weights of the (vector, lexical) lists; `None` lets the fusion choose per query from
    /// what it sees ([`choose_alpha`]). For linear fusion the vector share is `wv / (wv + wl)`.
    pub weights: Option<(f32, f32)>,
    /// What is searched (code or memories): the adaptive fusion's starting point differs.
    pub corpus: Corpus,
    /// The adaptive fusion's parameters.
    pub adapt: Adapt,
    /// Look for the other forms of a natural-language query's words ([`expand_query`]).
    pub expand: bool,
}

/// What a search runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Corpus {
    #[default]
    Code,
    Memory,
}

/// Parameters of the adaptive fusion ([`choose_alpha`]): the vector share per query shape and
/// corpus. The defaults were chosen on the tune half of the per-style harness
/// (`benches/src/bin/styles.rs`); see README (search).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adapt {
    /// Identifier-like queries (`parse_config`, `a::b`), any corpus.
    pub identifier: f32,
    /// Search-style queries ([`Shape::Search`]) over code and over memories.
    pub code_search: f32,
    pub memory_search: f32,
    /// Prose ([`Shape::Prose`]) over code and over memories.
    pub code_prose: f32,
    pub memory_prose: f32,
    /// For sentences: the share grows by the corpus's peak gain per unit by which the vector
    /// list's best result stands out more than the lexical list's (peak z-scores,
    /// [`Signals`]), up to `max`. It never shrinks: a strong lexical peak keeps the shape's
    /// share. Over code the gain measured nothing (0.611 → 0.608 docstring, 0.473 → 0.471
    /// web MRR@10 on the tune half at 0.15), so it is 0 there.
    pub code_peak_gain: f32,
    pub memory_peak_gain: f32,
    pub max: f32,
}

impl Default for Adapt {
    fn default() -> Self {
        Adapt {
            identifier: 1.0 / 3.0,
            code_search: 0.7,
            memory_search: 0.5,
            code_prose: 0.5,
            memory_prose: 0.5,
            code_peak_gain: 0.0,
            memory_peak_gain: 0.15,
            max: 0.8,
        }
    }
}

/// The shape of a query, read from its text alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// One token that looks like code ([`identifier_like`]).
    Identifier,
    /// Typed like a web search: a question ("how to …", "what …", "…?"), or all lower case
    /// without a closing period ("python merge two dicts"). Its words are the asker's, not
    /// the code's, so the lexical list is the weaker one.
    Search,
    /// A sentence written like documentation ("Returns the first …."): it shares the code's
    /// vocabulary, and both lists count the same.
    Prose,
}

const QUESTION_WORDS: &[&str] = &[
    "how", "what", "why", "which", "where", "when", "who", "can", "does", "do", "is", "are",
    "should",
];

/// The shape of `q` (see [`Shape`]).
pub fn shape(q: &str) -> Shape {
    let q = q.trim();
    if identifier_like(q) {
        return Shape::Identifier;
    }
    let lower = q.to_lowercase();
    let first = lower.split_whitespace().next().unwrap_or("");
    let question = q.ends_with('?')
        || QUESTION_WORDS.contains(&first)
        || lower.contains("how to ")
        || lower.contains("how do ");
    let typed = !q.chars().any(char::is_uppercase) && !q.ends_with('.');
    if question || typed {
        Shape::Search
    } else {
        Shape::Prose
    }
}

/// What the fusion saw of one query and its two lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Signals {
    /// The query's shape.
    pub shape: Option<Shape>,
    /// How far each list's best score stands above its head: the first score's z-score over
    /// the first [`NORM_DEPTH`] (0 for an empty or flat list).
    pub peak_vector: f32,
    pub peak_lexical: f32,
    /// Members the two top-10 lists share, over 10.
    pub overlap: f32,
}

/// The vector share chosen for one query, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FusionChoice {
    pub alpha_vector: f32,
    pub reason: String,
    pub signals: Signals,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            limit: 10,
            mode: Mode::Hybrid,
            fusion: Fusion::default(),
            nprobe: None,
            language: None,
            kind: None,
            path_prefix: None,
            path_glob: None,
            repo: None,
            weights: None,
            corpus: Corpus::Code,
            adapt: Adapt::default(),
            expand: true,
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
    /// Each list's scores are z-normalised with the statistics of its top [`NORM_DEPTH`]; a
    /// chunk missing from a list, or below that top, gets the lowest of them; fused =
    /// w·z_vector + (1 − w)·z_lexical.
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

/// One result. When several chunks collapsed into it (body parts of one symbol), the fields
/// are those of its best-ranked chunk except the lines, which cover them all.
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

/// Timings per phase. In a hybrid search that fans out ([`fans_out`]) the vector and BM25
/// phases run side by side, so their times overlap.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Timings {
    pub filter: Duration,
    pub vector: Duration,
    pub bm25: Duration,
    pub fusion: Duration,
    /// The weights hybrid fusion chose (None in single-list modes and for RRF).
    pub choice: Option<FusionChoice>,
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

/// Whether `s` holds a character [`path_glob`] reads as glob syntax (else it is a literal
/// directory or file).
pub fn has_glob_meta(s: &str) -> bool {
    s.contains(['*', '?', '[', '{'])
}

/// A compiled path filter ([`path_glob`]): matches a repository-relative path.
#[derive(Debug, Clone)]
pub struct PathFilter {
    set: globset::GlobSet,
}

impl PathFilter {
    pub fn is_match(&self, path: &str) -> bool {
        self.set.is_match(path)
    }
}

/// Compiles a path filter: a pattern without glob characters is a directory or file (`src/`,
/// `src/lib.rs`); a pattern without `/` matches at any depth (`*.rs` is `**/*.rs`); `*` stays
/// inside one directory, `**` crosses directories; a trailing `/` means what lies under it. A
/// component with a class or a group (`[slug]`, `{a,b}`) is also read as the literal name,
/// since real trees have such names (Next.js routes: `app/[slug]/*.tsx` matches
/// `app/[slug]/page.tsx` as well as `app/s/page.tsx`; a glob alone would never match the
/// directory it names). Up to [`LITERAL_MIX`] such components are read each way in every
/// combination; past that, or when a class or group spans a `/`, the whole pattern as a glob
/// or as a literal path.
pub fn path_glob(pattern: &str) -> Result<PathFilter, GlobError> {
    let p = pattern.trim();
    if p.is_empty() {
        return Err(GlobError::Empty);
    }
    let invalid = |e: globset::Error| GlobError::Invalid {
        pattern: pattern.to_string(),
        reason: e.to_string(),
    };
    let glob = |g: &str| {
        globset::GlobBuilder::new(g)
            .literal_separator(true)
            .build()
            .map_err(invalid)
    };
    let body = p.trim_start_matches("./").trim_end_matches('/');
    let dir = p.ends_with('/');
    let parts: Vec<&str> = body.split('/').collect();
    // Components also read as names: those with a class or a group (`[slug]`, `{a,b}`), each
    // whole (a group or class holding `/` spans components: then none is, and the pattern is
    // read as a glob and as a literal path only). `*` and `?` stay globs.
    let balanced = |c: &str| {
        c.matches('[').count() == c.matches(']').count()
            && c.matches('{').count() == c.matches('}').count()
    };
    let mixed: Vec<usize> = if parts.iter().all(|c| balanced(c)) {
        (0..parts.len())
            .filter(|&i| parts[i].contains(['[', '{']))
            .collect()
    } else {
        Vec::new()
    };
    let any_depth = has_glob_meta(p) && !p.contains('/');
    let mut set = globset::GlobSetBuilder::new();
    // The pattern with the components in `literal` read as names: in the all-literal reading
    // (`whole`) every glob character is escaped; in the mixed ones only the classes' and
    // groups' brackets, so `pages/[id].*` still matches `pages/[id].tsx`.
    let variant = |literal: &dyn Fn(usize) -> bool, whole: bool| {
        let v = (0..parts.len())
            .map(|i| match (literal(i) && parts[i] != "**", whole) {
                (true, true) => globset::escape(parts[i]),
                (true, false) => parts[i]
                    .chars()
                    .map(|c| match c {
                        '[' | ']' | '{' | '}' => format!("[{c}]"),
                        c => c.to_string(),
                    })
                    .collect(),
                (false, _) => parts[i].to_string(),
            })
            .collect::<Vec<_>>()
            .join("/");
        if any_depth {
            format!("**/{v}")
        } else {
            v
        }
    };
    // Every component literal: a directory (everything under it) or a file of this name.
    let all = variant(&|_| true, true);
    set.add(glob(&all)?).add(glob(&format!("{all}/**"))?);
    // A pattern ending in `/` is a directory in every reading: what lies under it.
    let mut add = |g: String| -> Result<(), GlobError> {
        if dir {
            set.add(glob(&format!("{g}/**"))?);
        }
        set.add(glob(&g)?);
        Ok(())
    };
    if has_glob_meta(p) {
        add(variant(&|_| false, false))?;
        if (1..=LITERAL_MIX).contains(&mixed.len()) {
            // Mask 0 is the glob as written; the all-ones mask escapes every class and group
            // but leaves `*` and `?` globs.
            for mask in 1..(1u32 << mixed.len()) {
                let lit = |i: usize| {
                    mixed
                        .iter()
                        .position(|&m| m == i)
                        .is_some_and(|b| mask & (1 << b) != 0)
                };
                add(variant(&lit, false))?;
            }
        }
    }
    Ok(PathFilter {
        set: set.build().map_err(invalid)?,
    })
}

/// How many components with a class or a group [`path_glob`] also reads literally, in every
/// combination (2^n globs).
pub const LITERAL_MIX: usize = 4;

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
            // A header or a body part has its symbol's kind (as results name them).
            let ch = &t.chunks[c as usize];
            let kind = t.chunks[ch.symbol_chunk(c) as usize].kind.as_str();
            if o.kind.as_deref().is_none_or(|k| kind == k) {
                bits.insert(c);
            }
        }
        let _ = fi;
    }
    Some(bits)
}

/// Scores of each ranked list are z-normalised with the mean and standard deviation of its
/// first `NORM_DEPTH` scores (a constant: normalising over all [`CANDIDATE_DEPTH`] candidates
/// measured lower MRR@10 on the quality harness, 0.560 against 0.570), and a candidate below
/// them counts as the lowest of them, like a chunk the list did not find; its own z-score only
/// orders chunks that tie after that (see [`fuse`]).
pub const NORM_DEPTH: usize = 50;

/// A ranked list's normalised scores.
#[derive(Debug, PartialEq)]
struct Normed {
    /// Per member: the z-score, clamped below at `floor`.
    z: Vec<f32>,
    /// Per member: the z-score, unclamped (tie-breaks).
    raw: Vec<f32>,
    /// A chunk missing from the list: the lowest z-score of the first [`NORM_DEPTH`].
    floor: f32,
    /// A chunk missing from the list, for tie-breaks: the lowest z-score of all.
    raw_floor: f32,
}

/// z-scores of a ranked list's scores (by descending score) with the statistics of its first
/// [`NORM_DEPTH`]. When those scores are all equal (one hit, or ties) every member with that
/// score gets 1 and missing chunks (and lower members) 0, so a lone exact match still outranks
/// what the list did not find.
fn zscores(list: &[(usize, u32, f32)]) -> Normed {
    if list.is_empty() {
        return Normed {
            z: Vec::new(),
            raw: Vec::new(),
            floor: 0.0,
            raw_floor: 0.0,
        };
    }
    let head = &list[..list.len().min(NORM_DEPTH)];
    let n = head.len() as f32;
    let mean = head.iter().map(|x| x.2).sum::<f32>() / n;
    let var = head.iter().map(|x| (x.2 - mean).powi(2)).sum::<f32>() / n;
    let sd = var.sqrt();
    let tol = 1e-6 * mean.abs().max(1e-6);
    if sd < tol {
        let z: Vec<f32> = list
            .iter()
            .map(|x| if (x.2 - mean).abs() <= tol { 1.0 } else { 0.0 })
            .collect();
        return Normed {
            raw: z.clone(),
            z,
            floor: 0.0,
            raw_floor: 0.0,
        };
    }
    let raw: Vec<f32> = list.iter().map(|x| (x.2 - mean) / sd).collect();
    let floor = raw[..head.len()].iter().copied().fold(f32::MAX, f32::min);
    let raw_floor = raw.iter().copied().fold(f32::MAX, f32::min);
    Normed {
        z: raw.iter().map(|&x| x.max(floor)).collect(),
        raw,
        floor,
        raw_floor,
    }
}

/// Squashes a fused z-score into (0, 1): the order is unchanged, and scores stay positive so
/// callers can damp them (graph expansion scores neighbours as a fraction of their seed).
fn squash(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// The lexical side of a natural-language query: without its question words
/// ([`format::text::question_terms`]: "how do I …"), and with, after its words, the other
/// forms of them ([`format::text::variants`]: singulars, `-ing`/`-ed` stems) that the index
/// holds and the query does not (`df` gives a term's document frequency): "merging two dicts"
/// also looks for `merge` and `dict`. Identifier-like queries are returned unchanged (their
/// tokens are exact).
pub fn expand_query(query: &str, df: impl Fn(&str) -> u32) -> String {
    if identifier_like(query) {
        return query.to_string();
    }
    let query = format::text::question_terms(query);
    let mut have: Vec<String> = Vec::new();
    format::text::for_each_token(&query, |t| {
        if !have.iter().any(|h| h == t) {
            have.push(t.to_string());
        }
    });
    let mut extra: Vec<String> = Vec::new();
    for t in &have {
        for v in format::text::variants(t) {
            if !have.contains(&v) && !extra.contains(&v) && df(&v) > 0 {
                extra.push(v);
            }
        }
    }
    if extra.is_empty() {
        return query;
    }
    format!("{query} {}", extra.join(" "))
}

/// [`expand_query`] against every live segment of `index`.
fn expand_in(index: &Index, query: &str) -> String {
    expand_query(query, |t| {
        index
            .segments
            .iter()
            .map(|ls| ls.segment.postings().df(t))
            .sum()
    })
}

/// The global BM25 top `depth` over every segment, by descending score, ties by (segment,
/// chunk). Segments are searched in order, each only above the depth-th score found so far: a
/// later segment's hit with an equal score would rank after it, so the merged list is exactly
/// the global top `depth`, and later segments skip more.
/// The nprobe a search that names none uses on `index` (no filters):
/// [`format::ivf_map::default_nprobe`] of its segments' IVF indexes.
pub fn default_nprobe(index: &Index) -> Result<usize, format::FormatError> {
    let ivfs = index
        .segments
        .iter()
        .map(|ls| ls.segment.probe_plan(None))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(format::ivf_map::default_nprobe(&ivfs))
}

/// The vector ranking of `search`: the top `depth` (segment, chunk, exact score) by inner
/// product with `q`, best first (ties by key), under the per-segment allow-lists `allows` and
/// the tombstones. IVF lists are chosen across segments (`format::ivf_map::plan_probes`: an
/// index cut into several segments scans the share of its vectors one segment would); the
/// approximate candidates of every segment are merged and only the best
/// `rerank_depth(depth)` of the whole index (twice that when a segment scans one-bit codes)
/// are re-ranked exactly on the raw rows (that many per segment was most of a many-segment
/// search). On one thread each segment keeps only candidates at or above the best so far
/// (`Segment::vector_candidates_above`); the merged candidates are the same.
pub fn vector_list(
    index: &Index,
    q: &[f32],
    depth: usize,
    nprobe: Option<usize>,
    allows: &[Option<RoaringBitmap>],
) -> Result<Vec<(usize, u32, f32)>, format::FormatError> {
    let allow = |si: usize| allows.get(si).and_then(|a| a.as_ref());
    // The first search of an index opens every segment's IVF map (its centroids parsed and
    // quantised): on all cores when it fans out.
    let first = index.segments.iter().any(|ls| !ls.segment.ivf_opened());
    let ivfs = per_segment(index.segments.len(), first && fans_out(index), |si| {
        index.segments[si].segment.probe_plan(allow(si))
    })
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    let plan = format::ivf_map::plan_probes(&ivfs, q, nprobe);
    // The deepest any segment asks for (one-bit codes ask for more than SQ8 ones).
    // (Segments scanned exactly, `None` in `ivfs`, re-rank nothing.)
    let mut fetch = format::segment::rerank_depth(depth);
    for (ls, ivf) in index.segments.iter().zip(&ivfs) {
        if ivf.is_some() {
            fetch = fetch.max(ls.segment.rerank_depth(depth)?);
        }
    }
    let mut approx: Vec<(usize, u32, f32)> = Vec::new();
    if fans_out(index) {
        let lists = per_segment(index.segments.len(), true, |si| {
            let ls = &index.segments[si];
            ls.segment
                .vector_candidates(q, fetch, &plan[si], allow(si), Some(&ls.tombstones))
        });
        for (si, hits) in lists.into_iter().enumerate() {
            approx.extend(hits?.into_iter().map(|(c, s)| (si, c, s)));
        }
    } else {
        // One segment after another, each keeping only estimates at or above the `fetch`-th
        // best of those before it: such a candidate cannot be among the best `fetch` below,
        // and later segments push and select fewer. The merged best `fetch` are the same.
        let mut floor = f32::NEG_INFINITY;
        let mut scores: Vec<f32> = Vec::new();
        for (si, ls) in index.segments.iter().enumerate() {
            let hits = ls.segment.vector_candidates_above(
                q,
                fetch,
                &plan[si],
                allow(si),
                Some(&ls.tombstones),
                floor,
            )?;
            scores.extend(hits.iter().map(|h| h.1));
            approx.extend(hits.into_iter().map(|(c, s)| (si, c, s)));
            if fetch > 0 && scores.len() >= fetch {
                let (_, nth, _) = scores.select_nth_unstable_by(fetch - 1, |a, b| b.total_cmp(a));
                floor = *nth;
                scores.truncate(fetch);
            }
        }
    }
    // The best `fetch` (a selection: the order is total, so the same set as a sort's prefix),
    // then in row order for the re-rank.
    if fetch == 0 {
        approx.clear();
    } else if approx.len() > fetch {
        approx.select_nth_unstable_by(fetch - 1, |a, b| {
            b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1)))
        });
        approx.truncate(fetch);
    }
    approx.sort_unstable_by_key(|&(si, c, _)| (si, c));
    let mut list: Vec<(usize, u32, f32)> = Vec::with_capacity(approx.len());
    for group in approx.chunk_by(|a, b| a.0 == b.0) {
        let si = group[0].0;
        let cands: Vec<(u32, f32)> = group.iter().map(|&(_, c, s)| (c, s)).collect();
        for (c, s) in index.segments[si].segment.rerank(q, &cands) {
            list.push((si, c, s));
        }
    }
    // The best `depth` by a total order (score, then key): selected, then only they sorted.
    let order = |a: &(usize, u32, f32), b: &(usize, u32, f32)| {
        b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1)))
    };
    if depth == 0 {
        list.clear();
    } else if list.len() > depth {
        list.select_nth_unstable_by(depth - 1, order);
        list.truncate(depth);
    }
    list.sort_by(order);
    Ok(list)
}

fn lexical_list(
    index: &Index,
    query: &str,
    depth: usize,
    allows: &[Option<RoaringBitmap>],
) -> Vec<(usize, u32, f32)> {
    let mut list: Vec<(usize, u32, f32)> = Vec::new();
    // IDF and the average length from all segments: a small segment (a re-indexed file) must
    // not score its terms as if they were common, and an index cut into segments scores like
    // one segment.
    // The query is tokenized once and its terms looked up once in each segment's dictionary;
    // statistics, seed and search all take those ids.
    let q = format::bm25::QueryTerms::new(query);
    let ids: Vec<format::bm25::TermIds> = index
        .segments
        .iter()
        .map(|ls| ls.segment.resolve_terms(&q))
        .collect();
    let mut stats = format::bm25::TermStats::index_wide();
    for (ls, ids) in index.segments.iter().zip(&ids) {
        stats.add_resolved(ls.segment.postings(), ids);
    }
    let n = index.segments.len();
    let seed = seed_floor(index, &ids, depth, allows, &stats);
    // In parallel, the segments are dealt into one group per thread; each group is searched in
    // turn with its own floor (a floor shared by all segments saved more than a second core
    // gave when every segment was its own task). The merged top `depth` is the same as one
    // pass: a floor only drops hits that cannot enter the group's top `depth`, and a hit that
    // only ties it ranks below it by key.
    let groups = if fans_out(index) {
        rayon::current_num_threads().min(n)
    } else {
        1
    };
    let lists = per_segment(groups, groups > 1, |g| {
        let mut part: Vec<(usize, u32, f32)> = Vec::new();
        for si in (g..n).step_by(groups) {
            let ls = &index.segments[si];
            let floor = if part.len() >= depth {
                part[depth - 1].2.max(seed)
            } else {
                seed
            };
            for (c, s) in ls.segment.search_bm25_terms(
                &ids[si],
                depth,
                allows[si].as_ref(),
                Some(&ls.tombstones),
                floor,
                Some(&stats),
            ) {
                part.push((si, c, s));
            }
            part.sort_by(|a, b| b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
            part.truncate(depth);
        }
        part
    });
    for part in lists {
        list.extend(part);
    }
    list.sort_by(|a, b| b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
    list.truncate(depth);
    list
}

/// How many postings, per result of the candidate depth, the rarest query terms may hold for
/// [`seed_floor`] to score their documents first.
const SEED_POSTINGS_PER_DEPTH: usize = 8;

/// A floor for every segment's BM25 search, found before any is searched: the documents of the
/// query's rarest terms (together at least `depth` postings and at most
/// [`SEED_POSTINGS_PER_DEPTH`] × `depth`), scored exactly (`score_docs`: the scores search
/// gives); when `depth` of them are admitted, the `depth`-th best score `f` is reached by at
/// least `depth` documents, so the global top `depth` all score at least `f` and a search of
/// scores strictly above the float just below `f` finds every one of them. A query of a rare
/// identifier and its common parts otherwise searched its first segments with the threshold of
/// documents that hold only the parts (every list essential), and later segments only after
/// the rare documents of the first had raised it. `NEG_INFINITY` when no terms qualify.
fn seed_floor(
    index: &Index,
    ids: &[format::bm25::TermIds],
    depth: usize,
    allows: &[Option<RoaringBitmap>],
    stats: &format::bm25::TermStats,
) -> f32 {
    if depth == 0 {
        return f32::NEG_INFINITY;
    }
    // The index-wide document frequencies `stats` gathered for the query's terms, with each
    // term's position in the query (its ids in every segment).
    let Some(q) = ids.first().map(|i| i.query()) else {
        return f32::NEG_INFINITY;
    };
    let mut terms: Vec<(u64, usize)> = q
        .terms()
        .enumerate()
        .map(|(i, t)| (stats.get(t).map_or(0, |(_, df)| u64::from(df)), i))
        .collect();
    terms.sort();
    let cap = (SEED_POSTINGS_PER_DEPTH * depth) as u64;
    let mut total = 0u64;
    let mut chosen: Vec<usize> = Vec::new();
    for &(df, i) in terms.iter().filter(|(df, _)| *df > 0) {
        if total >= depth as u64 {
            break;
        }
        total += df;
        chosen.push(i);
    }
    if total < depth as u64 || total > cap {
        return f32::NEG_INFINITY;
    }
    let mut scores: Vec<f32> = Vec::with_capacity(total as usize);
    for (si, ls) in index.segments.iter().enumerate() {
        let p = ls.segment.postings();
        let allow = allows.get(si).and_then(|a| a.as_ref());
        let Some(ids) = ids.get(si) else { continue };
        let mut docs: Vec<u32> = chosen
            .iter()
            .flat_map(|&i| p.postings_of(ids, i))
            .map(|(d, _)| d)
            .filter(|&d| format::admitted(d, allow, Some(&ls.tombstones)))
            .collect();
        docs.sort_unstable();
        docs.dedup();
        scores.extend(p.score_docs_terms(ids, &docs, Some(stats)));
    }
    if scores.len() < depth {
        return f32::NEG_INFINITY;
    }
    let (_, &mut f, _) = scores.select_nth_unstable_by(depth - 1, |a, b| b.total_cmp(a));
    if f > 0.0 && f.is_finite() {
        f.next_down()
    } else {
        f32::NEG_INFINITY
    }
}

/// Fuses a vector and a lexical list (each by descending score, keyed by (segment, item)) as
/// `o.fusion` says, with `o.weights` or weights chosen per query ([`choose_alpha`]). Returns
/// the best `o.limit` keys with (fused score, vector rank, lexical rank), best first, and the
/// choice made.
pub fn fuse(
    vec_list: &[(usize, u32, f32)],
    lex_list: &[(usize, u32, f32)],
    query: &str,
    o: &SearchOptions,
) -> (Vec<(ChunkRef, Fused)>, Option<FusionChoice>) {
    let (mut ranked, choice) = fuse_all(vec_list, lex_list, query, o, &[]);
    ranked.truncate(o.limit);
    (ranked, choice)
}

/// The signals of a query and its two lists (each by descending score).
pub fn signals(
    vec_list: &[(usize, u32, f32)],
    lex_list: &[(usize, u32, f32)],
    query: &str,
) -> Signals {
    signals_of(
        vec_list,
        lex_list,
        &zscores(vec_list),
        &zscores(lex_list),
        query,
    )
}

/// [`signals`] from lists already z-normalised (`nv`, `nl`), as fusion has them.
fn signals_of(
    vec_list: &[(usize, u32, f32)],
    lex_list: &[(usize, u32, f32)],
    nv: &Normed,
    nl: &Normed,
    query: &str,
) -> Signals {
    let peak = |n: &Normed| n.raw.first().copied().unwrap_or(0.0);
    let top = |l: &[(usize, u32, f32)]| -> Vec<ChunkRef> {
        l.iter().take(10).map(|&(s, c, _)| (s, c)).collect()
    };
    let (tv, tl) = (top(vec_list), top(lex_list));
    let shared = tv.iter().filter(|k| tl.contains(k)).count();
    Signals {
        shape: Some(shape(query)),
        peak_vector: peak(nv),
        peak_lexical: peak(nl),
        overlap: shared as f32 / 10.0,
    }
}

/// The vector share of linear fusion for a query: by its shape and the corpus (see [`Adapt`]).
/// The list signals (peaks, overlap) are reported with the choice, for `debug`.
pub fn choose_alpha(sg: &Signals, corpus: Corpus, a: &Adapt) -> FusionChoice {
    let sh = sg.shape.unwrap_or(Shape::Prose);
    let (base, why) = match (sh, corpus) {
        (Shape::Identifier, _) => (a.identifier, "identifier-like query: leans lexical"),
        (Shape::Search, Corpus::Code) => (
            a.code_search,
            "search-style query over code (the asker's words, not the code's): leans vector",
        ),
        (Shape::Search, Corpus::Memory) => (a.memory_search, "search-style query over memories"),
        (Shape::Prose, Corpus::Code) => (
            a.code_prose,
            "prose query over code (the code's own vocabulary): both lists",
        ),
        (Shape::Prose, Corpus::Memory) => (a.memory_prose, "prose query over memories"),
    };
    let lift = sg.peak_vector - sg.peak_lexical;
    let gain = match corpus {
        Corpus::Code => a.code_peak_gain,
        Corpus::Memory => a.memory_peak_gain,
    };
    let alpha = if sh == Shape::Identifier || lift <= 0.0 || base >= a.max || gain <= 0.0 {
        base
    } else {
        (base + gain * lift).min(a.max)
    };
    let how = if alpha > base {
        format!(
            "; the vector list's best stands out more (peak z {:.2} vs lexical {:.2}): {base:.2} → {alpha:.2}",
            sg.peak_vector, sg.peak_lexical
        )
    } else {
        String::new()
    };
    FusionChoice {
        alpha_vector: alpha,
        reason: format!(
            "{why}; vector share {alpha:.2}{how} (vector peak z {:.2}, lexical peak z {:.2}, top-10 overlap {:.1})",
            sg.peak_vector, sg.peak_lexical, sg.overlap
        ),
        signals: *sg,
    }
}

/// [`fuse`] over every candidate, best first, without the cut to `o.limit`. `extra` keys join
/// the candidates as if missing from both lists (the lowest score of each).
fn fuse_all(
    vec_list: &[(usize, u32, f32)],
    lex_list: &[(usize, u32, f32)],
    query: &str,
    o: &SearchOptions,
    extra: &[ChunkRef],
) -> (Vec<(ChunkRef, Fused)>, Option<FusionChoice>) {
    let mut choice = None;
    let mut fused: FxHashMap<ChunkRef, FusedTie> = FxHashMap::default();
    for k in extra {
        fused.entry(*k).or_insert((0.0, None, None, 0.0));
    }
    // Per entry of `fused`, the tie-break of linear fusion (0 for RRF): kept beside the score
    // so that the sort below reads it in place (looked up in a map by every comparison, the
    // sort was most of the fusion: ~50 µs for 200 candidates).
    let mut ties = false;
    match o.fusion {
        Fusion::Rrf { k } => {
            // Identifier-like queries lean lexical.
            let (wv, wl) = o.weights.unwrap_or(if identifier_like(query) {
                (0.5, 1.0)
            } else {
                (1.0, 1.0)
            });
            for (r, (si, c, _)) in vec_list.iter().enumerate() {
                let e = fused.entry((*si, *c)).or_insert((0.0, None, None, 0.0));
                e.0 += wv / (k + r as f32 + 1.0);
                e.1 = Some(r + 1);
            }
            for (r, (si, c, _)) in lex_list.iter().enumerate() {
                let e = fused.entry((*si, *c)).or_insert((0.0, None, None, 0.0));
                e.0 += wl / (k + r as f32 + 1.0);
                e.2 = Some(r + 1);
            }
        }
        Fusion::LinearZScore => {
            let nv = zscores(vec_list);
            let nl = zscores(lex_list);
            let alpha = match o.weights {
                Some((wv, wl)) => {
                    if wv + wl > 0.0 {
                        wv / (wv + wl)
                    } else {
                        0.5
                    }
                }
                None => {
                    let sg = signals_of(vec_list, lex_list, &nv, &nl, query);
                    let c = choose_alpha(&sg, o.corpus, &o.adapt);
                    let a = c.alpha_vector;
                    choice = Some(c);
                    a
                }
            };
            for (r, (si, c, _)) in vec_list.iter().enumerate() {
                let e = fused.entry((*si, *c)).or_insert((0.0, None, None, 0.0));
                e.1 = Some(r + 1);
            }
            for (r, (si, c, _)) in lex_list.iter().enumerate() {
                let e = fused.entry((*si, *c)).or_insert((0.0, None, None, 0.0));
                e.2 = Some(r + 1);
            }
            for e in fused.values_mut() {
                let (v, rv) = match e.1 {
                    Some(r) => (nv.z[r - 1], nv.raw[r - 1]),
                    None => (nv.floor, nv.raw_floor),
                };
                let (l, rl) = match e.2 {
                    Some(r) => (nl.z[r - 1], nl.raw[r - 1]),
                    None => (nl.floor, nl.raw_floor),
                };
                e.0 = squash(alpha * v + (1.0 - alpha) * l);
                e.3 = alpha * rv + (1.0 - alpha) * rl;
            }
            ties = true;
        }
    }
    // By fused score; chunks that tie (below the normalised heads of both lists) by their
    // unclamped z-scores, then by key.
    let mut ranked: Vec<(ChunkRef, FusedTie)> = fused.into_iter().collect();
    let tb = |e: &FusedTie| if ties { e.3 } else { 0.0 };
    ranked.sort_by(|a, b| {
        b.1 .0
            .total_cmp(&a.1 .0)
            .then(tb(&b.1).total_cmp(&tb(&a.1)))
            .then(a.0.cmp(&b.0))
    });
    let ranked = ranked
        .into_iter()
        .map(|(k, (s, rv, rl, _))| (k, (s, rv, rl)))
        .collect();
    (ranked, choice)
}

/// [`Fused`] and the tie-break [`fuse_all`] sorts by.
type FusedTie = (f32, Option<usize>, Option<usize>, f32);

/// Searches every live segment. `query_vec` is the embedded query (required unless the mode is
/// lexical).
pub fn search(
    index: &Index,
    query: &str,
    query_vec: Option<&[f32]>,
    o: &SearchOptions,
) -> Result<(Vec<Hit>, Timings), format::FormatError> {
    let mut tm = Timings::default();
    let depth = candidate_depth(o.limit);
    let t = Instant::now();
    let allows: Vec<Option<RoaringBitmap>> = index
        .segments
        .iter()
        .map(|ls| allow_bitmap(ls, o))
        .collect();
    tm.filter = t.elapsed();

    // The chunks the query names (hybrid and lexical modes), before the rankings: how deep the
    // lexical list must go depends on them (see [`lexical_depth`]).
    // (Timed with the fusion phase, where this lookup ran before.)
    let t = Instant::now();
    let found = if o.mode == Mode::Vector {
        Vec::new()
    } else {
        rank::name_matches(index, query, &allows)
    };
    let lex_depth = lexical_depth(o, found.len());
    let names_time = t.elapsed();

    type Ranked = Vec<(usize, u32, f32)>;
    let vector = || -> Result<(Ranked, Duration), format::FormatError> {
        let t = Instant::now();
        let list = match query_vec {
            Some(q) if o.mode != Mode::Lexical => vector_list(index, q, depth, o.nprobe, &allows)?,
            _ => Vec::new(),
        };
        Ok((list, t.elapsed()))
    };
    let lexical = || -> (Ranked, Duration) {
        if o.mode == Mode::Vector {
            return (Vec::new(), Duration::ZERO);
        }
        let t = Instant::now();
        let q = if o.expand {
            expand_in(index, query)
        } else {
            query.to_string()
        };
        (lexical_list(index, &q, lex_depth, &allows), t.elapsed())
    };
    // With cores to spare, the two rankings run side by side (each also fans out over the
    // segments when there are several): one ranking per thread wastes less than splitting
    // each over the segments, and a large index in one segment has nothing else to split.
    let (vec_res, (lex_list, bm25_time)) = if o.mode == Mode::Hybrid && pairs_rankings(index) {
        rayon::join(vector, lexical)
    } else {
        let v = vector();
        (v, lexical())
    };
    let (vec_list, vector_time) = vec_res?;
    tm.vector = vector_time;
    tm.bm25 = bm25_time;

    let t = Instant::now();
    // The exact-name tier (hybrid and lexical modes): chunks the query names rank above the
    // rest, even when neither list found them (at most CANDIDATE_DEPTH of those, the first by
    // (segment, chunk), so a common name costs a bounded amount).
    let named: Vec<ChunkRef> = {
        let listed: FxHashSet<ChunkRef> = if found.is_empty() {
            Default::default()
        } else {
            vec_list
                .iter()
                .chain(&lex_list)
                .map(|&(si, c, _)| (si, c))
                .collect()
        };
        let mut unlisted = 0usize;
        found
            .into_iter()
            .filter(|k| {
                listed.contains(k) || {
                    unlisted += 1;
                    unlisted <= CANDIDATE_DEPTH
                }
            })
            .collect()
    };
    let (mut ranked, choice) = if o.mode == Mode::Hybrid {
        fuse_all(&vec_list, &lex_list, query, o, &named)
    } else {
        // One list: fusing it with an empty one keeps its order (no weights to choose).
        let (r, _) = fuse_all(&vec_list, &lex_list, query, o, &named);
        (r, None)
    };
    tm.choice = choice;
    if !named.is_empty() {
        let is_named = |k: &ChunkRef| named.binary_search(k).is_ok();
        let best_other = ranked
            .iter()
            .filter(|(k, _)| !is_named(k))
            .map(|(_, f)| f.0)
            .fold(0.0f32, f32::max);
        let bounded = o.fusion == Fusion::LinearZScore;
        for (k, f) in ranked.iter_mut() {
            if is_named(k) {
                f.0 = rank::lift(f.0, best_other, bounded);
            }
        }
        // Stable: within each tier the fused order (ties included) stays.
        ranked.sort_by_key(|(k, _)| !is_named(k));
    }
    // Duplicates and pieces of one symbol collapse over every candidate, then the cut.
    let keys: Vec<ChunkRef> = ranked.iter().map(|r| r.0).collect();
    let groups = rank::collapse(index, &keys, o.limit);

    let hits = groups
        .into_iter()
        .map(|g| {
            let (si, c) = rank::shown(index, g.node);
            let (score, vr, lr) = ranked[g.rank].1;
            let seg = &index.segments[si].segment;
            let t = seg.table();
            let ch = &t.chunks[c as usize];
            let f = &t.files[ch.file.to_native() as usize];
            // A body part is named by its symbol (kind, name, id); its text is the part's.
            let sym = &t.chunks[ch.symbol_chunk(c) as usize];
            Ok(Hit {
                score,
                path: f.path.to_string(),
                repo: f.repo.to_string(),
                language: f.language.to_string(),
                kind: sym.kind.to_string(),
                name: sym.name.to_string(),
                symbol_id: sym.symbol_id.to_string(),
                start_line: g.start_line,
                end_line: g.end_line,
                vector_rank: vr,
                lexical_rank: lr,
                text: seg.chunk_text(c)?.to_string(),
                segment: si,
                chunk: c,
            })
        })
        .collect::<Result<_, format::FormatError>>()?;
    tm.fusion = t.elapsed() + names_time;
    Ok((hits, tm))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded linear congruential generator for test data.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) as usize
        }
    }

    /// An index in `dir` of three segments of `per` chunks of one file each: texts of 1 to
    /// `max_len` words, skewed towards the first of `words` (the smaller of two draws), and
    /// each chunk's vector from `vector`, all drawn in order from one generator seeded `seed`.
    fn skewed_index(
        dir: &std::path::Path,
        dim: usize,
        per: u32,
        words: &[&str],
        max_len: usize,
        seed: u64,
        vector: impl FnMut(&mut Lcg) -> Vec<f32>,
    ) -> Index {
        skewed_segments(dir, 3, dim, per, words, max_len, seed, vector)
    }

    /// A unit vector of `dim` uniform draws from `rnd`.
    fn unit_vector(rnd: &mut Lcg, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..dim)
            .map(|_| (rnd.next() % 1000) as f32 - 500.0)
            .collect();
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
        v.iter_mut().for_each(|x| *x /= n);
        v
    }

    /// A rayon pool of `n` threads.
    fn pool_of(n: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    }

    /// [`skewed_index`] with `segments` segments.
    #[allow(clippy::too_many_arguments)]
    fn skewed_segments(
        dir: &std::path::Path,
        segments: usize,
        dim: usize,
        per: u32,
        words: &[&str],
        max_len: usize,
        seed: u64,
        mut vector: impl FnMut(&mut Lcg) -> Vec<f32>,
    ) -> Index {
        use format::manifest::{IndexManifest, SegmentEntry};
        use format::records::{ChunkRecord, FileRecord, NO_PARENT};
        let mut rnd = Lcg(seed);
        let mut entries = Vec::new();
        for _ in 0..segments {
            let mut b = format::SegmentBuilder::default();
            for i in 0..per {
                let len = 1 + rnd.next() % max_len;
                let text: Vec<&str> = (0..len)
                    .map(|_| words[(rnd.next() % words.len()).min(rnd.next() % words.len())])
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
                b.vectors.extend(vector(&mut rnd));
            }
            b.files.push(FileRecord {
                repo: "r".into(),
                path: "a.rs".into(),
                language: "rust".into(),
                content_hash: [0; 32],
                size: 1,
                first_chunk: 0,
                chunk_count: per,
                imports: vec![],
            });
            let (id, _) = b.write(dir, "m", dim).unwrap();
            entries.push(SegmentEntry {
                id,
                chunks: per,
                tombstones: None,
            });
        }
        IndexManifest {
            format_version: format::FORMAT_VERSION,
            generation: 1,
            model_id: "m".into(),
            dim: dim as u32,
            segments: entries,
            ..IndexManifest::empty("", 0)
        }
        .commit(dir)
        .unwrap();
        Index::open(dir).unwrap()
    }

    #[test]
    fn zscores_handle_degenerate_lists() {
        let n = zscores(&[(0, 1, 3.0)]);
        assert_eq!((n.z, n.floor), (vec![1.0], 0.0));
        let n = zscores(&[(0, 1, 2.0), (0, 2, 2.0)]);
        assert_eq!((n.z, n.floor), (vec![1.0, 1.0], 0.0));
        let n = zscores(&[(0, 1, 3.0), (0, 2, 1.0)]);
        assert_eq!(n.z, vec![1.0, -1.0]);
        assert_eq!(n.floor, -1.0);
        assert!(zscores(&[]).z.is_empty());
        assert!(squash(2.0) > squash(1.0) && squash(-5.0) > 0.0 && squash(5.0) < 1.0);
    }

    /// Statistics come from the first NORM_DEPTH scores; deeper members are clamped to the
    /// floor (the score of a missing chunk) and keep their own z-score for tie-breaks.
    #[test]
    fn zscores_normalise_over_the_head() {
        let list: Vec<(usize, u32, f32)> = (0..120u32).map(|i| (0, i, 200.0 - i as f32)).collect();
        let n = zscores(&list);
        let head = zscores(&list[..NORM_DEPTH]);
        assert_eq!(n.z[..NORM_DEPTH], head.z[..]);
        assert_eq!(n.floor, head.floor);
        assert!(n.z[NORM_DEPTH..].iter().all(|&z| z == n.floor));
        assert!(n.raw[NORM_DEPTH] < n.floor && n.raw_floor == n.raw[119]);
    }

    /// Hybrid linear fusion with the lexical list cut to its normalised head
    /// ([`lexical_depth`]) keeps every chunk that fuses above the ties of chunks missing from
    /// both heads: the same chunks, scores, vector ranks and order (a lexical rank past the
    /// head is no longer reported), and the ties stay below them.
    #[test]
    fn the_lexical_head_fixes_every_score_above_the_ties() {
        let dir = tempfile::tempdir().unwrap();
        let words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "tau"];
        let mut rnd = Lcg(3);
        let mut unit = move |_: &mut Lcg| {
            let v: Vec<f32> = (0..4)
                .map(|_| (rnd.next() % 2001) as f32 - 1000.0)
                .collect();
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
            v.into_iter().map(|x| x / n).collect::<Vec<f32>>()
        };
        let index = skewed_index(dir.path(), 4, 400, &words, 12, 5, &mut unit);
        let allows = vec![None, None, None];
        let (mut checked, mut deep, mut tied, mut shrunk) = (0, 0, 0, 0);
        let mut qr = Lcg(9);
        for qi in 0..60 {
            let q: Vec<&str> = (0..1 + qi % 3).map(|_| words[qr.next() % 7]).collect();
            let q = q.join(" ");
            let qv = unit(&mut qr);
            let vec_list = vector_list(&index, &qv, CANDIDATE_DEPTH, None, &allows).unwrap();
            let full = lexical_list(&index, &q, CANDIDATE_DEPTH, &allows);
            let head = lexical_list(&index, &q, NORM_DEPTH, &allows);
            assert_eq!(head[..], full[..NORM_DEPTH.min(full.len())], "{q}");
            for fusion_weights in [None, Some((0.3, 0.7))] {
                let o = SearchOptions {
                    weights: fusion_weights,
                    ..SearchOptions::default()
                };
                assert_eq!(lexical_depth(&o, 0), NORM_DEPTH);
                let (a, ca) = fuse_all(&vec_list, &full, &q, &o, &[]);
                let (b, cb) = fuse_all(&vec_list, &head, &q, &o, &[]);
                assert_eq!(ca.map(|c| c.alpha_vector), cb.map(|c| c.alpha_vector));
                // The score of a chunk missing from both lists: the lowest any chunk gets.
                let (miss, _) = fuse_all(&vec_list, &full, &q, &o, &[(9, 0)]);
                let tie = miss.iter().find(|e| e.0 == (9, 0)).unwrap().1 .0;
                let above = a.iter().take_while(|e| e.1 .0 > tie).count();
                assert!(a.iter().chain(&b).all(|e| e.1 .0 >= tie), "{q}");
                assert_eq!(b.iter().take_while(|e| e.1 .0 > tie).count(), above, "{q}");
                // The same chunks, scores and vector ranks in the same order; a lexical rank
                // past the head is not reported.
                let in_head = |r: Option<usize>| r.filter(|&r| r <= NORM_DEPTH);
                for (x, y) in a[..above].iter().zip(&b[..above]) {
                    assert_eq!((x.0, x.1 .0, x.1 .1), (y.0, y.1 .0, y.1 .1), "{q}");
                    assert_eq!(in_head(x.1 .2), y.1 .2, "{q}");
                    deep += usize::from(x.1 .2 > Some(NORM_DEPTH));
                }
                assert!(above > 0, "{q}");
                checked += 1;
                tied += a.len() - above;
                shrunk += a.len() - b.len();
            }
        }
        // The cases happen: ties below, chunks that only the deeper lexical list brought, and
        // vector-head chunks that BM25 ranks past its head.
        assert!(
            checked == 120 && tied > 0 && shrunk > 0 && deep > 0,
            "{tied} {shrunk} {deep}"
        );
        // What a search asks for: the head in hybrid linear fusion, the candidate depth in
        // lexical mode, for reciprocal rank fusion, for more results, or when the query names
        // several chunks.
        let o = |mode, fusion, limit| SearchOptions {
            mode,
            fusion,
            limit,
            ..SearchOptions::default()
        };
        let (h, l, rrf) = (Mode::Hybrid, Mode::Lexical, Fusion::Rrf { k: 60.0 });
        let lin = Fusion::LinearZScore;
        assert_eq!(lexical_depth(&o(h, lin, 10), 1), NORM_DEPTH);
        assert_eq!(lexical_depth(&o(h, lin, CANDIDATE_DEPTH), 0), NORM_DEPTH);
        assert_eq!(lexical_depth(&o(h, lin, 10), 2), CANDIDATE_DEPTH);
        assert_eq!(lexical_depth(&o(l, lin, 10), 0), CANDIDATE_DEPTH);
        assert_eq!(lexical_depth(&o(h, rrf, 10), 0), CANDIDATE_DEPTH);
        assert_eq!(lexical_depth(&o(h, lin, 500), 0), 500);
        let qv = unit(&mut qr);
        let ranks = |mode| {
            let (hits, _) = search(&index, "alpha", Some(&qv), &o(mode, lin, 100)).unwrap();
            hits.iter().filter_map(|h| h.lexical_rank).max().unwrap()
        };
        assert!(ranks(h) <= NORM_DEPTH && ranks(l) > NORM_DEPTH);
    }

    /// The floor passed from segment to segment must not change the merged BM25 list.
    #[test]
    fn lexical_list_across_segments_equals_brute_force() {
        let dir = tempfile::tempdir().unwrap();
        let words = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "tau"];
        let index = skewed_index(dir.path(), 4, 400, &words, 12, 7, |_| {
            vec![1.0, 0.0, 0.0, 0.0]
        });
        // Unfiltered, and with allow-lists (a path filter): the seed only counts admitted
        // documents, or it could rise above the filtered list's depth-th score.
        let even: RoaringBitmap = (0..400u32).filter(|c| c % 2 == 0).collect();
        let head: RoaringBitmap = (0..150u32).collect();
        let mut seeded = 0;
        for allows in [vec![None, None, None], vec![Some(even), None, Some(head)]] {
            for q in [
                "alpha",
                "beta tau",
                "sigma omega alpha",
                "tau",
                "gamma delta",
                "tau sigma",
                "omega tau alpha beta",
            ] {
                // Brute force with the same index-wide IDF statistics.
                let mut st = format::bm25::TermStats::index_wide();
                for ls in &index.segments {
                    st.add_segment(ls.segment.postings(), q);
                }
                for depth in [1, 5, 20, 50, 100, 2000] {
                    let mut all: Vec<(usize, u32, f32)> = Vec::new();
                    for (si, ls) in index.segments.iter().enumerate() {
                        for (c, s) in ls.segment.postings().search_exhaustive_with(
                            q,
                            usize::MAX,
                            allows[si].as_ref(),
                            None,
                            Some(&st),
                        ) {
                            all.push((si, c, s));
                        }
                    }
                    all.sort_by(|a, b| b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
                    all.truncate(depth);
                    // The seed floor is below the depth-th score: strictly above it still
                    // finds every hit of the list.
                    let terms = format::bm25::QueryTerms::new(q);
                    let ids: Vec<_> = index
                        .segments
                        .iter()
                        .map(|ls| ls.segment.postings().resolve(&terms))
                        .collect();
                    let seed = seed_floor(&index, &ids, depth, &allows, &st);
                    if seed.is_finite() {
                        seeded += 1;
                        assert!(all.len() == depth && seed < all[depth - 1].2, "{q} {depth}");
                    }
                    assert_eq!(lexical_list(&index, q, depth, &allows), all, "{q} {depth}");
                }
            }
        }
        // Some of these searches started from a seed floor.
        assert!(seeded >= 6, "{seeded}");
    }

    /// A large many-segment index searched on a pool of several threads (segments in
    /// parallel) answers exactly as on one thread (segments in turn, BM25 floors shared).
    #[test]
    fn parallel_segment_search_equals_sequential() {
        const DIM: usize = 8;
        let dir = tempfile::tempdir().unwrap();
        let words = [
            "alpha", "beta", "gamma", "delta", "omega", "sigma", "tau", "rho",
        ];
        let index = skewed_index(dir.path(), DIM, 20_000, &words, 10, 11, |rnd| {
            unit_vector(rnd, DIM)
        });
        assert!(index
            .segments
            .iter()
            .all(|ls| ls.segment.meta().vector_index.starts_with("ivf")));
        let (one, many) = (pool_of(1), pool_of(3));
        assert!(!one.install(|| fans_out(&index)));
        assert!(many.install(|| fans_out(&index)));
        type Key = (usize, u32, u32, Option<usize>, Option<usize>);
        let key = |hits: &[Hit]| -> Vec<Key> {
            hits.iter()
                .map(|h| {
                    (
                        h.segment,
                        h.chunk,
                        h.score.to_bits(),
                        h.vector_rank,
                        h.lexical_rank,
                    )
                })
                .collect()
        };
        for (qi, q) in ["alpha", "beta tau", "sigma omega rho", "gamma delta alpha"]
            .into_iter()
            .enumerate()
        {
            let qv: Vec<f32> = (0..DIM).map(|d| ((qi * 7 + d) % 5) as f32 - 2.0).collect();
            for mode in [Mode::Hybrid, Mode::Vector, Mode::Lexical] {
                let o = SearchOptions {
                    mode,
                    limit: 50,
                    ..SearchOptions::default()
                };
                let a = one.install(|| search(&index, q, Some(&qv), &o)).unwrap().0;
                let b = many.install(|| search(&index, q, Some(&qv), &o)).unwrap().0;
                assert_eq!(a.len(), 50);
                assert_eq!(key(&a), key(&b), "{q} {mode:?}");
            }
        }
    }

    /// A large index in one segment, on a pool of several threads, takes the side-by-side
    /// path ([`pairs_rankings`] without [`fans_out`]) and answers exactly as on one thread.
    #[test]
    fn one_segment_rankings_side_by_side_equal_sequential() {
        const DIM: usize = 8;
        let dir = tempfile::tempdir().unwrap();
        let words = ["alpha", "beta", "gamma", "delta", "omega", "sigma"];
        let per = PARALLEL_MIN_CHUNKS as u32;
        let index = skewed_segments(dir.path(), 1, DIM, per, &words, 8, 13, |rnd| {
            unit_vector(rnd, DIM)
        });
        assert_eq!(index.segments.len(), 1);
        let (one, two) = (pool_of(1), pool_of(2));
        assert!(!one.install(|| pairs_rankings(&index)));
        assert!(two.install(|| pairs_rankings(&index) && !fans_out(&index)));
        for (qi, q) in ["alpha", "beta sigma", "gamma delta omega"]
            .into_iter()
            .enumerate()
        {
            let qv: Vec<f32> = (0..DIM).map(|d| ((qi * 3 + d) % 7) as f32 - 3.0).collect();
            let o = SearchOptions {
                limit: 50,
                ..SearchOptions::default()
            };
            let (a, _) = one.install(|| search(&index, q, Some(&qv), &o)).unwrap();
            let (b, _) = two.install(|| search(&index, q, Some(&qv), &o)).unwrap();
            assert_eq!(a.len(), 50);
            let key = |hits: &[Hit]| -> Vec<(u32, u32, Option<usize>, Option<usize>)> {
                hits.iter()
                    .map(|h| (h.chunk, h.score.to_bits(), h.vector_rank, h.lexical_rank))
                    .collect()
            };
            assert_eq!(key(&a), key(&b), "{q}");
            // Both rankings ran and placed hits.
            assert!(a.iter().any(|h| h.vector_rank.is_some()));
            assert!(a.iter().any(|h| h.lexical_rank.is_some()));
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
    fn query_shapes_choose_the_vector_share() {
        assert_eq!(shape("parse_config"), Shape::Identifier);
        assert_eq!(shape("python merge two dicts"), Shape::Search);
        assert_eq!(shape("How do I merge two dicts?"), Shape::Search);
        assert_eq!(shape("What does the parser return"), Shape::Search);
        assert_eq!(shape("Returns the merged mapping."), Shape::Prose);
        assert_eq!(shape("Merge two dicts, later keys win"), Shape::Prose);
        let a = Adapt::default();
        let sg = |q: &str, pv: f32, pl: f32| Signals {
            shape: Some(shape(q)),
            peak_vector: pv,
            peak_lexical: pl,
            overlap: 0.0,
        };
        let c = |q: &str, pv, pl, corpus| choose_alpha(&sg(q, pv, pl), corpus, &a).alpha_vector;
        assert_eq!(c("parse_config", 3.0, 1.0, Corpus::Code), a.identifier);
        assert_eq!(
            c("python merge dicts", 3.0, 1.0, Corpus::Code),
            a.code_search
        );
        assert_eq!(c("Merges two dicts.", 3.0, 1.0, Corpus::Code), a.code_prose);
        // Memories: the share grows with the vector list's lead, up to the bound, never down.
        let m = |pv, pl| c("what is my dog called?", pv, pl, Corpus::Memory);
        assert_eq!(m(1.0, 3.0), a.memory_search);
        assert!((m(2.0, 1.0) - (a.memory_search + a.memory_peak_gain)).abs() < 1e-6);
        assert_eq!(m(9.0, 0.0), a.max);
        let ch = choose_alpha(&sg("python merge dicts", 2.0, 1.0), Corpus::Code, &a);
        assert!(
            ch.reason.contains("search-style") && ch.reason.contains("0.70"),
            "{}",
            ch.reason
        );
    }

    #[test]
    fn natural_language_queries_find_other_word_forms() {
        let vocab = ["dict", "merge", "overwrite", "python"];
        let df = |t: &str| u32::from(vocab.contains(&t));
        assert_eq!(
            expand_query("python merging two dicts without overwriting", df),
            "python merging two dicts without overwriting merge dict overwrite"
        );
        // Forms already in the query, or absent from the index, are not added.
        assert_eq!(expand_query("merge dicts dict", df), "merge dicts dict");
        assert_eq!(expand_query("walking cats", df), "walking cats");
        // Identifiers are exact.
        assert_eq!(expand_query("merged_dicts", df), "merged_dicts");
        // No question words.
        assert_eq!(
            expand_query("How do I merge dicts?", df),
            "I merge dicts? dict"
        );
    }

    #[test]
    fn path_globs() {
        let g = path_glob("*.rs").unwrap();
        assert!(g.is_match("src/lib.rs") && g.is_match("lib.rs") && !g.is_match("src/lib.py"));
        let g = path_glob("src/*.rs").unwrap();
        assert!(g.is_match("src/lib.rs") && !g.is_match("src/a/lib.rs"));
        let g = path_glob("src/**/*.rs").unwrap();
        assert!(g.is_match("src/a/b/lib.rs") && g.is_match("src/lib.rs"));
        let g = path_glob("src/**").unwrap();
        assert!(g.is_match("src/a/b/lib.rs") && !g.is_match("lib/a.rs"));
        assert!(path_glob("**").unwrap().is_match("a/b.rs"));
        // Two components read each way, in every combination.
        let g = path_glob("app/[a]/[b]/x.ts").unwrap();
        for m in [
            "app/[a]/[b]/x.ts",
            "app/a/[b]/x.ts",
            "app/[a]/b/x.ts",
            "app/a/b/x.ts",
        ] {
            assert!(g.is_match(m), "{m}");
        }
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
        // A name with glob characters is also itself: a Next.js route directory.
        let g = path_glob("app/[slug]").unwrap();
        assert!(g.is_match("app/[slug]/page.tsx") && g.is_match("app/[slug]"));
        assert!(g.is_match("app/s") && !g.is_match("app/[slug]x/page.tsx"));
        let g = path_glob("app/[slug]/*.tsx").unwrap();
        assert!(g.is_match("app/[slug]/page.tsx") && g.is_match("app/g/page.tsx"));
        assert!(!g.is_match("app/[slug]/a/page.tsx"));
        // A trailing `/` is a directory in every reading.
        let g = path_glob("app/[slug]/").unwrap();
        assert!(g.is_match("app/[slug]/page.tsx") && g.is_match("app/s/page.tsx"));
        // `*` components stay globs and do not use up the classes' combinations.
        let g = path_glob("*/*/*/app/[slug]/*.tsx").unwrap();
        assert!(g.is_match("a/b/c/app/[slug]/page.tsx") && g.is_match("a/b/c/app/g/x.tsx"));
        // A group holding `/` is read as written (and as a literal path), not cut in two.
        let g = path_glob("{src,tests/unit}/**/*.rs").unwrap();
        assert!(
            g.is_match("src/a/b.rs") && g.is_match("tests/unit/x.rs") && !g.is_match("tests/x.rs")
        );
        assert!(path_glob("{a/b,c}/*.rs").unwrap().is_match("a/b/x.rs"));
        // The mixed readings keep `*` and `?` globs.
        let g = path_glob("pages/[id].*").unwrap();
        assert!(g.is_match("pages/[id].tsx") && g.is_match("pages/i.js"));
        let g = path_glob("[id].tsx").unwrap();
        assert!(
            g.is_match("[id].tsx") && g.is_match("pages/[id].tsx") && g.is_match("pages/d.tsx")
        );
        assert!(!path_glob("src").unwrap().is_match("a/src/x.rs"));
        // The literal reading stays anchored and exact.
        let g = path_glob("./*.py").unwrap();
        assert!(g.is_match("a.py") && !g.is_match("x/a.py"));
        assert!(!path_glob("src/*").unwrap().is_match("srcx/a"));
    }

    /// One-file segments from (kind, name, start, end, parent, text, vector) rows, committed as
    /// one index.
    type Row<'a> = (&'a str, &'a str, u32, u32, u32, String, [f32; 4]);

    fn index_of(dir: &std::path::Path, segments: &[Vec<Row>]) -> Index {
        index_at(dir, segments, |si| format!("f{si}.rs"))
    }

    /// [`index_of`] with segment `si`'s one file at `path(si)`.
    fn index_at(
        dir: &std::path::Path,
        segments: &[Vec<Row>],
        path: impl Fn(usize) -> String,
    ) -> Index {
        use format::manifest::{IndexManifest, SegmentEntry};
        use format::records::{ChunkRecord, FileRecord};
        let mut entries = Vec::new();
        for (si, rows) in segments.iter().enumerate() {
            let mut b = format::SegmentBuilder::default();
            for (kind, name, start, end, parent, text, v) in rows {
                b.chunks.push(ChunkRecord {
                    file: 0,
                    kind: (*kind).into(),
                    name: (*name).into(),
                    qualified: (*name).into(),
                    symbol_id: String::new(),
                    start_line: *start,
                    end_line: *end,
                    start_byte: 0,
                    end_byte: 1,
                    parent: *parent,
                    content_hash: [0; 32],
                    text: text.clone(),
                });
                b.vectors.extend(v);
            }
            b.files.push(FileRecord {
                repo: "r".into(),
                path: path(si),
                language: "rust".into(),
                content_hash: [0; 32],
                size: 1,
                first_chunk: 0,
                chunk_count: rows.len() as u32,
                imports: vec![],
            });
            let (id, _) = b.write(dir, "m", 4).unwrap();
            entries.push(SegmentEntry {
                id,
                chunks: rows.len() as u32,
                tombstones: None,
            });
        }
        IndexManifest {
            format_version: format::FORMAT_VERSION,
            generation: 1,
            model_id: "m".into(),
            dim: 4,
            segments: entries,
            ..IndexManifest::empty("", 0)
        }
        .commit(dir)
        .unwrap();
        Index::open(dir).unwrap()
    }

    /// A deterministic pseudo-random source.
    fn rng(mut seed: u64) -> impl FnMut() -> usize {
        move || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize
        }
    }

    fn unit(v: [f32; 4]) -> [f32; 4] {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
        v.map(|x| x / n)
    }

    /// The first k results at limit k equal the first k at a larger limit, in every mode and
    /// fusion, with filters, across segments.
    #[test]
    fn top_k_is_a_prefix_of_every_larger_limit() {
        use format::records::NO_PARENT;
        let dir = tempfile::tempdir().unwrap();
        let words = [
            "alpha", "beta", "gamma", "delta", "omega", "sigma", "tau", "parse", "render",
        ];
        let mut r = rng(11);
        let mut segs = Vec::new();
        for _ in 0..3 {
            let mut rows: Vec<Row> = Vec::new();
            for i in 0..300u32 {
                let len = 1 + r() % 10;
                let text: Vec<&str> = (0..len).map(|_| words[(r() % 9).min(r() % 9)]).collect();
                let v = unit([0, 1, 2, 3].map(|_| (r() % 2001) as f32 / 1000.0 - 1.0));
                let name = words[r() % 9];
                let kind = if i % 3 == 0 { "method" } else { "function" };
                rows.push((
                    kind,
                    name,
                    i * 3 + 1,
                    i * 3 + 2,
                    NO_PARENT,
                    text.join(" "),
                    v,
                ));
            }
            segs.push(rows);
        }
        let index = index_of(dir.path(), &segs);
        let mut r = rng(5);
        for qi in 0..40 {
            let q: Vec<&str> = (0..1 + qi % 3).map(|_| words[r() % 9]).collect();
            let q = q.join(" ");
            let qv = unit([0, 1, 2, 3].map(|_| (r() % 2001) as f32 / 1000.0 - 1.0));
            for mode in [Mode::Hybrid, Mode::Vector, Mode::Lexical] {
                for fusion in [Fusion::LinearZScore, Fusion::Rrf { k: 60.0 }] {
                    for kind in [None, Some("method".to_string())] {
                        let o = |limit| SearchOptions {
                            limit,
                            mode,
                            fusion,
                            kind: kind.clone(),
                            ..SearchOptions::default()
                        };
                        let key = |h: &Hit| (h.segment, h.chunk, h.start_line, h.score.to_bits());
                        let all: Vec<_> = search(&index, &q, Some(&qv), &o(CANDIDATE_DEPTH))
                            .unwrap()
                            .0
                            .iter()
                            .map(key)
                            .collect();
                        for k in [1, 5, 10, 50] {
                            let top: Vec<_> = search(&index, &q, Some(&qv), &o(k))
                                .unwrap()
                                .0
                                .iter()
                                .map(key)
                                .collect();
                            assert_eq!(
                                top[..],
                                all[..k.min(all.len())],
                                "{q:?} {mode:?} {fusion:?} {kind:?} limit {k}"
                            );
                        }
                        if mode != Mode::Lexical {
                            assert_eq!(all.len(), CANDIDATE_DEPTH, "{q:?} {mode:?}");
                        }
                    }
                }
            }
        }
        assert!(candidate_depth(5) == CANDIDATE_DEPTH && candidate_depth(500) == 500);
    }

    /// Duplicated ranges collapse to one result; the head and touching body parts of one
    /// symbol collapse to one result over their lines; a distant body part stays apart; the
    /// limit still fills.
    #[test]
    fn duplicates_and_body_parts_collapse_before_the_cut() {
        use format::records::NO_PARENT;
        let dir = tempfile::tempdir().unwrap();
        let v = [1.0, 0.0, 0.0, 0.0];
        let mut rows: Vec<Row> = vec![
            (
                "function",
                "render",
                1,
                10,
                NO_PARENT,
                "fn render widget head".into(),
                v,
            ),
            (
                "body_part",
                "render",
                11,
                20,
                0,
                "render widget widget".into(),
                v,
            ),
            (
                "body_part",
                "render",
                22,
                30,
                0,
                "render widget part".into(),
                v,
            ),
            (
                "body_part",
                "render",
                100,
                110,
                0,
                "render widget far".into(),
                v,
            ),
            (
                "function",
                "paint",
                40,
                50,
                NO_PARENT,
                "fn paint widget".into(),
                v,
            ),
            (
                "top_level",
                "",
                40,
                50,
                NO_PARENT,
                "paint widget again".into(),
                v,
            ),
        ];
        for i in 0..10u32 {
            rows.push((
                "function",
                "helper",
                200 + 10 * i,
                205 + 10 * i,
                NO_PARENT,
                format!("fn helper{i} widget"),
                v,
            ));
        }
        let index = index_of(dir.path(), &[rows]);
        for mode in [Mode::Lexical, Mode::Hybrid] {
            let o = |limit| SearchOptions {
                limit,
                mode,
                ..SearchOptions::default()
            };
            let (hits, _) = search(&index, "widget", Some(&v), &o(100)).unwrap();
            let ranges: Vec<(u32, u32)> = hits.iter().map(|h| (h.start_line, h.end_line)).collect();
            // 16 chunks: 3 merged into one, 1 duplicate dropped.
            assert_eq!(hits.len(), 13, "{mode:?} {ranges:?}");
            assert!(ranges.contains(&(1, 30)), "{mode:?} {ranges:?}");
            assert!(ranges.contains(&(100, 110)), "{mode:?} {ranges:?}");
            // A body part standing alone is named by its symbol: its kind and name (and id),
            // the part's own text.
            let far = hits
                .iter()
                .find(|h| (h.start_line, h.end_line) == (100, 110));
            let far = far.unwrap();
            assert_eq!(
                (far.kind.as_str(), far.name.as_str()),
                ("function", "render")
            );
            assert_eq!(far.text, "render widget far");
            assert!(hits.iter().all(|h| h.kind != "body_part"), "{mode:?}");
            assert_eq!(ranges.iter().filter(|r| **r == (40, 50)).count(), 1);
            let mut uniq = ranges.clone();
            uniq.sort();
            uniq.dedup();
            assert_eq!(uniq.len(), ranges.len(), "{mode:?} {ranges:?}");
            // The cut comes after the collapse: `limit` results when there are enough.
            let (top, _) = search(&index, "widget", Some(&v), &o(12)).unwrap();
            assert_eq!(top.len(), 12);
        }
    }

    /// Collapsing into the first `limit` groups gives the first `limit` groups of the whole
    /// collapse, whatever the order of the candidates: duplicates within a segment and across
    /// two segments holding the same path, headers standing for their symbol, body parts
    /// merging near and far, for every limit.
    #[test]
    fn collapse_to_a_limit_keeps_the_groups_of_the_whole() {
        use format::records::NO_PARENT;
        let v = [1.0, 0.0, 0.0, 0.0];
        let rows = |shift: u32| -> Vec<Row> {
            let mut r: Vec<Row> = vec![
                ("function", "render", 1, 10, NO_PARENT, "a".into(), v),
                ("header", "render", 1, 2, 0, "b".into(), v),
                ("body_part", "render", 11, 20, 0, "c".into(), v),
                ("body_part", "render", 22, 30, 0, "d".into(), v),
                ("body_part", "render", 100, 110, 0, "e".into(), v),
                ("body_part", "render", 111, 115, 0, "f".into(), v),
                ("function", "paint", 40, 50, NO_PARENT, "g".into(), v),
                ("top_level", "", 40, 50, NO_PARENT, "h".into(), v),
            ];
            for i in 0..6u32 {
                let at = 200 + 10 * i + shift;
                r.push(("function", "helper", at, at + 5, NO_PARENT, "i".into(), v));
            }
            r
        };
        let dir = tempfile::tempdir().unwrap();
        // Segments 0 and 1 hold the same path (lines partly the same), segment 2 another.
        let index = index_at(dir.path(), &[rows(0), rows(5), rows(0)], |si| {
            if si < 2 {
                "same.rs".into()
            } else {
                "other.rs".into()
            }
        });
        let mut nodes: Vec<(usize, u32)> = Vec::new();
        for (si, ls) in index.segments.iter().enumerate() {
            nodes.extend((0..ls.segment.table().chunks.len() as u32).map(|c| (si, c)));
        }
        let mut next = rng(99);
        let mut merged = 0;
        for round in 0..300 {
            let mut ranked = nodes.clone();
            for i in (1..ranked.len()).rev() {
                ranked.swap(i, next() % (i + 1));
            }
            ranked.truncate(ranked.len() - round % 7);
            let whole = rank::collapse(&index, &ranked, usize::MAX);
            merged += whole
                .iter()
                .filter(|g| g.end_line - g.start_line > 10)
                .count();
            for limit in 0..=whole.len() + 1 {
                let want = &whole[..limit.min(whole.len())];
                assert_eq!(
                    rank::collapse(&index, &ranked, limit),
                    want,
                    "{round} {limit}"
                );
            }
        }
        assert!(merged > 0);
    }

    /// A chunk the query names ranks first though BM25 prefers its callers, and even when
    /// neither list holds it; vector mode has no name tier.
    #[test]
    fn the_named_chunk_ranks_first() {
        use format::records::NO_PARENT;
        let dir = tempfile::tempdir().unwrap();
        let (near, far) = ([1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]);
        let mut rows: Vec<Row> = vec![(
            "function",
            "levenshtein",
            1,
            40,
            NO_PARENT,
            "pub fn levenshtein(a: &str, b: &str) -> usize { let mut cache = vec![0; n]; \
             for (i, x) in a.chars().enumerate() { for (j, y) in b.chars().enumerate() {} } }"
                .into(),
            far,
        )];
        for i in 0..30u32 {
            rows.push((
                "function",
                "test_it",
                50 + 5 * i,
                53 + 5 * i,
                NO_PARENT,
                format!("fn levenshtein_case{i}() {{ levenshtein(a, b); levenshtein(b, a) }}"),
                near,
            ));
        }
        rows.push((
            "function",
            "closestMatch",
            500,
            510,
            NO_PARENT,
            "fn pick() {}".into(),
            far,
        ));
        let index = index_of(dir.path(), &[rows]);
        for mode in [Mode::Hybrid, Mode::Lexical] {
            for fusion in [Fusion::LinearZScore, Fusion::Rrf { k: 60.0 }] {
                let o = SearchOptions {
                    mode,
                    fusion,
                    ..SearchOptions::default()
                };
                for (q, want) in [
                    ("levenshtein", "levenshtein"),
                    ("LEVENSHTEIN", "levenshtein"),
                    ("closest match", "closestMatch"),
                    ("closest_match", "closestMatch"),
                ] {
                    let (hits, _) = search(&index, q, Some(&near), &o).unwrap();
                    assert_eq!(hits[0].name, want, "{q} {mode:?} {fusion:?}");
                    assert!(hits.windows(2).all(|w| w[0].score >= w[1].score));
                    if fusion == Fusion::LinearZScore {
                        assert!(hits[0].score < 1.0);
                    }
                }
            }
        }
        let o = SearchOptions {
            mode: Mode::Vector,
            ..SearchOptions::default()
        };
        let (hits, _) = search(&index, "levenshtein", Some(&near), &o).unwrap();
        assert_ne!(hits[0].name, "levenshtein");
    }

    /// A name shared by more chunks than the candidate depth (BM25 finds `CANDIDATE_DEPTH` of them, the tier
    /// adds at most as many more): every limit gives a prefix of the same list.
    #[test]
    fn a_common_name_keeps_the_prefix() {
        use format::records::NO_PARENT;
        let dir = tempfile::tempdir().unwrap();
        let rows: Vec<Row> = (0..500u32)
            .map(|i| {
                let v = [1.0, 0.0, 0.0, 0.0];
                (
                    "function",
                    "widget",
                    i * 2 + 1,
                    i * 2 + 1,
                    NO_PARENT,
                    "foo".into(),
                    v,
                )
            })
            .collect();
        let index = index_of(dir.path(), &[rows]);
        let o = |limit| SearchOptions {
            limit,
            mode: Mode::Lexical,
            ..SearchOptions::default()
        };
        let (all, _) = search(&index, "widget", None, &o(CANDIDATE_DEPTH)).unwrap();
        assert_eq!(all.len(), CANDIDATE_DEPTH);
        let (top, _) = search(&index, "widget", None, &o(50)).unwrap();
        assert_eq!(top.len(), 50);
        assert!(top.iter().zip(&all).all(|(a, b)| a.chunk == b.chunk));
        assert!(top.iter().all(|h| h.name == "widget"));
    }
}
