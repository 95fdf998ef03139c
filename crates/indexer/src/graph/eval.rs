//! Long file: the truth format, the score and its report belong together (one harness).
//! Call-graph quality against ground truth (scip-python / scip-typescript or labelled
//! fixtures): the truth format ([`Truth`]), and [`score`], which extracts and resolves a
//! directory exactly like a build does and compares its CALLS edges with the truth.
//!
//! Mapping (both sides in chunks, so the comparison is about resolution, not chunking): the
//! caller of a truth call is the innermost symbol chunk whose line range holds the call line (a
//! body part of a long function stands for its symbol); call sites outside any symbol chunk are
//! `skipped`. The callee is the innermost symbol chunk of `callee_path` that holds
//! `callee_line` and is named `callee`; calls whose callee has no such chunk are `unmapped`.
//! Precision and recall are over distinct (caller chunk, callee chunk) pairs, once for `exact`
//! edges (resolved through scope/imports) and once for exact + `likely` (unique name).
//!
//! A wrong pair is `contradicted` when the truth's indexer resolved at least as many call sites
//! of that name in the caller as we extracted (to other project callables, or to library symbols
//! listed in [`Truth::elsewhere`]), else `unverified` (no evidence: dynamic receivers). Plain
//! precision counts both as wrong; `precision_*_verified` leaves the unverified out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::chunk::{extract, ChunkKind, ChunkOptions, FileExtract, Language};
use crate::graph::{resolve, Declarations, EdgeKind, FileFacts, NodeRef};

/// How many false positives / negatives [`score`] lists.
pub const EXAMPLES: usize = 30;

/// Errors of [`score`] and [`Truth::load`].
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("bad truth file {path}: {message}")]
    BadTruth { path: PathBuf, message: String },
}

/// Ground truth for one indexed directory (the shared JSON format).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Truth {
    /// `rust`, `python`, `typescript`, …
    pub language: String,
    /// How the truth was made (tool, version, package).
    #[serde(default)]
    pub source: String,
    /// Informational name of the indexed directory.
    #[serde(default)]
    pub root: String,
    pub calls: Vec<TruthCall>,
    /// Call sites `(path, line, name)` the truth's indexer resolved to a library symbol that
    /// shares its name with a project callable: an edge from there is certainly wrong.
    #[serde(default)]
    pub elsewhere: Vec<(String, u32, String)>,
}

/// One call site: paths relative to the indexed directory, `/`-separated, lines 1-based.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TruthCall {
    pub caller_path: String,
    /// Line of the callee's name token at the call site.
    pub line: u32,
    pub callee_path: String,
    /// Line of the callee definition's name token.
    pub callee_line: u32,
    /// Simple name of the callee.
    pub callee: String,
}

impl Truth {
    /// Parses the shared JSON format; `path` only names the file in errors.
    pub fn from_json(path: &Path, text: &str) -> Result<Truth, EvalError> {
        serde_json::from_str(text).map_err(|e| EvalError::BadTruth {
            path: path.to_path_buf(),
            message: e.to_string(),
        })
    }

    /// Reads and parses a truth file.
    pub fn load(path: &Path) -> Result<Truth, EvalError> {
        let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Truth::from_json(path, &text)
    }
}

/// The comparison of one directory's CALLS edges with its truth. Ratios with an empty
/// denominator are 1.0 (nothing claimed / nothing to find).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Score {
    pub language: String,
    /// Code files extracted.
    pub files: usize,
    /// Call sites in the truth.
    pub truth_calls: usize,
    /// Truth call sites outside any symbol chunk (left out on both sides).
    pub skipped: usize,
    /// Truth call sites whose callee has no symbol chunk of that name at `callee_line`.
    pub unmapped: usize,
    /// Distinct (caller, callee) chunk pairs of the truth.
    pub truth_pairs: usize,
    /// Our distinct CALLS pairs resolved through scope/imports.
    pub ours_exact: usize,
    /// Our distinct CALLS pairs matched by a unique name only.
    pub ours_likely: usize,
    /// Exact pairs that are in the truth.
    pub tp_exact: usize,
    /// Exact + likely pairs that are in the truth.
    pub tp_all: usize,
    pub precision_exact: f64,
    pub recall_exact: f64,
    pub precision_all: f64,
    pub recall_all: f64,
    /// Exact pairs not in the truth where the truth's indexer resolved none of our call sites
    /// (no evidence either way: dynamic receivers, aliases, locals).
    pub unverified_exact: usize,
    /// The same for likely pairs.
    pub unverified_likely: usize,
    /// Precision with unverified pairs left out: a lower bound is `precision_exact`.
    pub precision_exact_verified: f64,
    pub precision_all_verified: f64,
    /// CALLS edges whose ends are in files of different language families (must be 0).
    pub cross_language_edges: usize,
    /// Our pairs into JS `#private` methods, left out when the truth names no `#private`
    /// callee (scip-typescript 0.4.0 emits no references for them, so they cannot be checked).
    #[serde(default)]
    pub unscored_private: usize,
    /// The first wrong pairs (up to [`EXAMPLES`] from [`score`]): `caller path:line name -> callee path:line name`.
    pub false_positives: Vec<String>,
    /// The first missed pairs, with the call line and what our extractor saw there.
    pub false_negatives: Vec<String>,
    /// The first unmapped truth calls (callee with no chunk of that name at its line).
    pub unmapped_examples: Vec<String>,
}

fn ratio(num: usize, den: usize) -> f64 {
    if den == 0 {
        1.0
    } else {
        num as f64 / den as f64
    }
}

impl Score {
    /// Recomputes the four ratios from the counts.
    pub fn finish(&mut self) {
        self.precision_exact = ratio(self.tp_exact, self.ours_exact);
        self.recall_exact = ratio(self.tp_exact, self.truth_pairs);
        self.precision_all = ratio(self.tp_all, self.ours_exact + self.ours_likely);
        self.recall_all = ratio(self.tp_all, self.truth_pairs);
        self.precision_exact_verified =
            ratio(self.tp_exact, self.ours_exact - self.unverified_exact);
        self.precision_all_verified = ratio(
            self.tp_all,
            self.ours_exact + self.ours_likely - self.unverified_exact - self.unverified_likely,
        );
    }

    /// Sums the counts of `scores` (micro-average) under `language`; examples are not kept.
    pub fn aggregate(language: &str, scores: &[&Score]) -> Score {
        let mut s = Score {
            language: language.to_string(),
            ..Score::default()
        };
        for x in scores {
            s.files += x.files;
            s.truth_calls += x.truth_calls;
            s.skipped += x.skipped;
            s.unmapped += x.unmapped;
            s.truth_pairs += x.truth_pairs;
            s.ours_exact += x.ours_exact;
            s.ours_likely += x.ours_likely;
            s.tp_exact += x.tp_exact;
            s.tp_all += x.tp_all;
            s.unverified_exact += x.unverified_exact;
            s.unverified_likely += x.unverified_likely;
            s.cross_language_edges += x.cross_language_edges;
            s.unscored_private += x.unscored_private;
        }
        s.finish();
        s
    }
}

/// A ratio as text, truncated (never rounded up) to three decimals.
pub fn fmt_ratio(x: f64) -> String {
    format!("{:.3}", ((x * 1000.0) + 1e-9).floor() / 1000.0)
}

/// A markdown table with one row per `(name, score)`. `P verified` leaves out wrong pairs on
/// which the truth has no evidence (see [`Score::unverified_exact`]).
pub fn markdown_table(rows: &[(&str, &Score)]) -> String {
    let mut t = String::from(
        "| case | lang | files | truth calls | skipped | unmapped | truth pairs | ours exact \
         | ours likely | P exact | R exact | P exact+likely | R exact+likely | unverified \
         | P verified (exact+likely) | cross-lang |\n\
         |---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n",
    );
    for (name, s) in rows {
        t.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} \
             | {} |\n",
            s.language,
            s.files,
            s.truth_calls,
            s.skipped,
            s.unmapped,
            s.truth_pairs,
            s.ours_exact,
            s.ours_likely,
            fmt_ratio(s.precision_exact),
            fmt_ratio(s.recall_exact),
            fmt_ratio(s.precision_all),
            fmt_ratio(s.recall_all),
            s.unverified_exact + s.unverified_likely,
            fmt_ratio(s.precision_all_verified),
            s.cross_language_edges,
        ));
    }
    t
}

/// Languages whose files may call each other: TS/TSX/JS are one family, C/C++ one.
pub fn language_family(l: Language) -> &'static str {
    match l {
        Language::TypeScript | Language::Tsx | Language::JavaScript => "js",
        Language::C | Language::Cpp => "c",
        other => other.name(),
    }
}

/// The code files under `root` (relative `/` path, language), sorted; hidden directories,
/// `node_modules` and `target` are left out, links are not followed.
fn code_files(root: &Path) -> Result<Vec<(String, Language)>, EvalError> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let io = |source| EvalError::Io {
            path: dir.clone(),
            source,
        };
        for entry in std::fs::read_dir(&dir).map_err(io)? {
            let entry = entry.map_err(io)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let ty = entry.file_type().map_err(io)?;
            let path = entry.path();
            if ty.is_dir() {
                if !name.starts_with('.') && name != "node_modules" && name != "target" {
                    stack.push(path);
                }
            } else if ty.is_file() {
                // Cargo.toml too: the build reads crate names from it.
                let Some(lang) =
                    Language::from_path(&path).filter(|l| l.is_code() || name == "Cargo.toml")
                else {
                    continue;
                };
                let Ok(rel) = path.strip_prefix(root) else {
                    continue;
                };
                let rel: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                out.push((rel.join("/"), lang));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The symbol chunk that stands for line `line` of `fx`: the innermost symbol chunk holding it,
/// or the symbol of the innermost body part holding it, whichever is smaller.
fn chunk_at(fx: &FileExtract, line: u32, name: Option<&str>) -> Option<usize> {
    let mut best: Option<(u32, usize)> = None;
    for (i, c) in fx.chunks.iter().enumerate() {
        if line < c.start_line || line > c.end_line {
            continue;
        }
        let sym = if c.kind == ChunkKind::BodyPart {
            match c.parent {
                Some(p) if p < fx.chunks.len() => p,
                _ => continue,
            }
        } else {
            i
        };
        let s = &fx.chunks[sym];
        if !s.kind.is_symbol() || !s.symbol.is_some() {
            continue;
        }
        // JS `#private` names: the truth's indexer names them without the `#`.
        if name.is_some_and(|n| s.name.trim_start_matches('#') != n.trim_start_matches('#')) {
            continue;
        }
        let span = c.end_line.saturating_sub(c.start_line);
        if best.is_none_or(|(b, _)| span < b) {
            best = Some((span, sym));
        }
    }
    best.map(|(_, i)| i)
}

type Pair = ((usize, usize), (usize, usize));

/// Extracts and resolves every code file under `root` and compares the CALLS edges with `truth`
/// (lists up to [`EXAMPLES`] false positives and negatives).
pub fn score(root: &Path, truth: &Truth) -> Result<Score, EvalError> {
    score_with(root, truth, EXAMPLES)
}

/// [`score`] listing up to `max_examples` false positives and negatives.
pub fn score_with(root: &Path, truth: &Truth, max_examples: usize) -> Result<Score, EvalError> {
    let files = code_files(root)?;
    let mut fxs: Vec<FileExtract> = Vec::with_capacity(files.len());
    for (rel, lang) in &files {
        let path = root.join(rel);
        let bytes = std::fs::read(&path).map_err(|source| EvalError::Io { path, source })?;
        let text = String::from_utf8_lossy(&bytes);
        fxs.push(extract(*lang, "eval", rel, &text, &ChunkOptions::default()));
    }
    Ok(compare(&files, &fxs, truth, max_examples))
}

/// [`score`] over already extracted files (`files[i]` is `(path, language)` of `fxs[i]`).
pub fn compare(
    files: &[(String, Language)],
    fxs: &[FileExtract],
    truth: &Truth,
    max_examples: usize,
) -> Score {
    let decls: Vec<Declarations> = (files.iter().zip(fxs))
        .map(|((p, l), e)| Declarations::of(p, *l, e))
        .collect();
    let facts: Vec<FileFacts> = (files.iter().zip(fxs).zip(&decls))
        .map(|(((p, l), e), d)| FileFacts {
            path: p,
            language: *l,
            extract: e,
            decls: d,
        })
        .collect();
    let edges = resolve(&facts);
    let by_path: HashMap<&str, usize> = files
        .iter()
        .enumerate()
        .map(|(i, (p, _))| (p.as_str(), i))
        .collect();

    let mut s = Score {
        language: truth.language.clone(),
        files: files.len(),
        truth_calls: truth.calls.len(),
        ..Score::default()
    };
    // Truth pairs, each with its first call line.
    let mut want: BTreeMap<Pair, (u32, &str)> = BTreeMap::new();
    for c in &truth.calls {
        let caller = by_path
            .get(c.caller_path.as_str())
            .and_then(|&f| chunk_at(&fxs[f], c.line, None).map(|k| (f, k)));
        let Some(caller) = caller else {
            s.skipped += 1;
            continue;
        };
        let callee = by_path
            .get(c.callee_path.as_str())
            .and_then(|&f| chunk_at(&fxs[f], c.callee_line, Some(&c.callee)).map(|k| (f, k)));
        let Some(callee) = callee else {
            s.unmapped += 1;
            if s.unmapped_examples.len() < max_examples {
                s.unmapped_examples.push(format!(
                    "{}:{} -> {}:{} {} (no chunk of that name holds the line)",
                    c.caller_path, c.line, c.callee_path, c.callee_line, c.callee
                ));
            }
            continue;
        };
        want.entry((caller, callee))
            .or_insert((c.line, c.callee.as_str()));
    }
    s.truth_pairs = want.len();

    // Evidence per (caller chunk, called name): the lines the truth's indexer resolved.
    let mut evidence: HashMap<((usize, usize), &str), BTreeSet<u32>> = HashMap::new();
    let sites = truth
        .calls
        .iter()
        .map(|c| (c.caller_path.as_str(), c.line, c.callee.as_str()))
        .chain(
            truth
                .elsewhere
                .iter()
                .map(|(p, l, n)| (p.as_str(), *l, n.as_str())),
        );
    for (path, line, callee) in sites {
        if let Some(&f) = by_path.get(path) {
            if let Some(k) = chunk_at(&fxs[f], line, None) {
                evidence.entry(((f, k), callee)).or_default().insert(line);
            }
        }
    }
    // A wrong pair is contradicted when the truth resolved at least as many call sites of that
    // name in the caller as we extracted (none of them to our callee).
    let contradicted = |pair: &Pair| {
        let callee = fxs[pair.1 .0].chunks[pair.1 .1].name.as_str();
        let ours: BTreeSet<u32> = fxs[pair.0 .0]
            .calls
            .iter()
            .filter(|c| c.from == pair.0 .1 && c.callee == callee)
            .map(|c| c.line)
            .collect();
        let seen = evidence.get(&(pair.0, callee)).map_or(0, |e| e.len());
        !ours.is_empty() && seen >= ours.len()
    };

    let truth_has_private = truth.calls.iter().any(|c| c.callee.starts_with('#'));
    let mut ours: BTreeMap<Pair, bool> = BTreeMap::new();
    for e in edges.iter().filter(|e| e.kind == EdgeKind::Calls) {
        let (
            NodeRef::Chunk {
                file: sf,
                chunk: sc,
            },
            NodeRef::Chunk {
                file: df,
                chunk: dc,
            },
        ) = (e.src, e.dst)
        else {
            continue;
        };
        let (sf, sc, df, dc) = (sf as usize, sc as usize, df as usize, dc as usize);
        if language_family(files[sf].1) != language_family(files[df].1) {
            s.cross_language_edges += 1;
        }
        if !truth_has_private
            && language_family(files[df].1) == "js"
            && fxs[df].chunks[dc].name.starts_with('#')
        {
            s.unscored_private += 1;
            continue;
        }
        *ours.entry(((sf, sc), (df, dc))).or_insert(false) |= e.resolved;
    }
    for (pair, exact) in &ours {
        let hit = want.contains_key(pair);
        let unverified = !hit && !contradicted(pair);
        if *exact {
            s.ours_exact += 1;
            s.tp_exact += usize::from(hit);
            s.unverified_exact += usize::from(unverified);
        } else {
            s.ours_likely += 1;
            s.unverified_likely += usize::from(unverified);
        }
        s.tp_all += usize::from(hit);
    }
    s.finish();

    let name = |(f, k): (usize, usize)| {
        let c = &fxs[f].chunks[k];
        let q = if c.qualified.is_empty() {
            &c.name
        } else {
            &c.qualified
        };
        format!("{}:{} {}", files[f].0, c.start_line, q)
    };
    for (pair, exact) in &ours {
        if s.false_positives.len() >= max_examples {
            break;
        }
        if want.contains_key(pair) {
            continue;
        }
        let callee = &fxs[pair.1 .0].chunks[pair.1 .1].name;
        let sites: BTreeSet<String> = fxs[pair.0 .0]
            .calls
            .iter()
            .filter(|c| c.from == pair.0 .1 && c.callee == *callee)
            .map(|c| call_text(c.qualifier.as_deref(), &c.callee, c.line))
            .collect();
        s.false_positives.push(format!(
            "{} -> {} [{}, {}; call {}]",
            name(pair.0),
            name(pair.1),
            if *exact { "exact" } else { "likely" },
            if contradicted(pair) {
                "contradicted"
            } else {
                "unverified"
            },
            sites.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    for (pair, (line, callee)) in &want {
        if s.false_negatives.len() >= max_examples {
            break;
        }
        if ours.contains_key(pair) {
            continue;
        }
        s.false_negatives.push(format!(
            "{} -> {} [line {line}: {}]",
            name(pair.0),
            name(pair.1),
            miss_reason(fxs, &ours, pair.0, callee, &name)
        ));
    }
    s
}

fn call_text(qualifier: Option<&str>, callee: &str, line: u32) -> String {
    match qualifier {
        Some(q) => format!("`{q}.{callee}` at {line}"),
        None => format!("`{callee}` at {line}"),
    }
}

/// What our side did with a missed call: nothing extracted, extracted but unresolved, or
/// resolved to other chunks.
fn miss_reason(
    fxs: &[FileExtract],
    ours: &BTreeMap<Pair, bool>,
    caller: (usize, usize),
    callee: &str,
    name: &dyn Fn((usize, usize)) -> String,
) -> String {
    let sites: Vec<String> = fxs[caller.0]
        .calls
        .iter()
        .filter(|c| c.from == caller.1 && c.callee == callee)
        .map(|c| call_text(c.qualifier.as_deref(), &c.callee, c.line))
        .collect();
    if sites.is_empty() {
        return "not extracted".to_string();
    }
    let elsewhere: Vec<String> = ours
        .keys()
        .filter(|(src, dst)| *src == caller && fxs[dst.0].chunks[dst.1].name == callee)
        .map(|(_, dst)| name(*dst))
        .collect();
    if elsewhere.is_empty() {
        format!("unresolved {}", sites.join(", "))
    } else {
        format!("{} resolved to {}", sites.join(", "), elsewhere.join(", "))
    }
}

#[cfg(test)]
mod tests;
