//! Retrieval quality, CodeSearchNet construction: a function's doc comment (first paragraph,
//! markup removed) is the query; the function, with its doc comment stripped from the indexed
//! text, is the target. The corpus is every chunk of the sampled files (targets and
//! distractors), with the doc comments of all functions stripped the same way (from the source,
//! before chunking, so embedded text, BM25 text, class chunks and body parts agree). Sources are
//! third-party code found on this machine: Rust crates in the cargo registry, Python packages
//! in site-packages, JavaScript in global node_modules (npm, corepack).
//!
//! Reports MRR@10 and recall@10 per language and overall for vector-only, lexical-only, the
//! default hybrid (query routing), a sweep of RRF weights and k, and score-normalised linear
//! fusion (implemented here over the raw vector and BM25 lists).
//!
//! The pair set is deterministic (sorted files ordered by a seeded hash); the built index, the
//! pairs and the query vectors are cached under `.cache/quality/<key>/`.
//!
//! Run: `cargo run --release -p cix-benches --bin quality -- [--pairs-per-lang 250]`

#[path = "../f32file.rs"]
mod f32file;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Parser;
use code::search::{search, Mode, SearchOptions};
use format::manifest::{IndexManifest, SegmentEntry};
use format::records::{ChunkRecord, FileRecord, NO_PARENT};
use format::{Index, SegmentBuilder};
use indexer::build::embed_text;
use indexer::chunk::{self, ChunkKind, ChunkOptions, Language};
use serde_json::json;

use f32file::{read_f32, write_f32};

#[derive(Parser)]
struct Args {
    /// Query/target pairs per language (before de-duplication).
    #[arg(long, default_value_t = 250)]
    pairs_per_lang: usize,
    /// Most targets taken from one file.
    #[arg(long, default_value_t = 3)]
    per_file: usize,
    /// Files with more chunks than this are skipped (keeps the corpus varied).
    #[arg(long, default_value_t = 80)]
    max_file_chunks: usize,
    #[arg(long, default_value = "cix-quality-v1")]
    seed: String,
    /// Model directory (default: $CIX_MODEL_DIR, else ./models/all-MiniLM-L6-v2).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Cache directory.
    #[arg(long, default_value = ".cache/quality")]
    cache: PathBuf,
    /// Rebuild even if a cached index exists.
    #[arg(long)]
    rebuild: bool,
    /// Print this many example pairs.
    #[arg(long, default_value_t = 0)]
    examples: usize,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
enum Lang {
    Rust,
    Python,
    JavaScript,
}

impl Lang {
    const ALL: [Lang; 3] = [Lang::Rust, Lang::Python, Lang::JavaScript];
    fn name(self) -> &'static str {
        match self {
            Lang::Rust => "rust",
            Lang::Python => "python",
            Lang::JavaScript => "javascript",
        }
    }
    fn language(self) -> Language {
        match self {
            Lang::Rust => Language::Rust,
            Lang::Python => Language::Python,
            Lang::JavaScript => Language::JavaScript,
        }
    }
}

/// A source root: (repo label, directory, language).
struct Root {
    repo: String,
    dir: PathBuf,
    lang: Lang,
}

fn roots() -> anyhow::Result<Vec<Root>> {
    let mut out = Vec::new();
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    // Rust: the newest version of every crate in the registry cache.
    let reg = home.join(".cargo/registry/src");
    let mut crates: BTreeMap<String, (Vec<u64>, PathBuf)> = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir(&reg) {
        let mut idx: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        idx.sort();
        for d in idx {
            let mut ents: Vec<PathBuf> =
                std::fs::read_dir(&d)?.flatten().map(|e| e.path()).collect();
            ents.sort();
            for p in ents {
                let name = p.file_name().unwrap().to_string_lossy().to_string();
                let Some(pos) = name
                    .char_indices()
                    .filter(|(i, c)| {
                        *c == '-' && name[i + 1..].starts_with(|x: char| x.is_ascii_digit())
                    })
                    .map(|(i, _)| i)
                    .next_back()
                else {
                    continue;
                };
                let (cr, ver) = (&name[..pos], &name[pos + 1..]);
                let v: Vec<u64> = ver
                    .split(|c: char| !c.is_ascii_digit())
                    .filter_map(|x| x.parse().ok())
                    .collect();
                let e = crates
                    .entry(cr.to_string())
                    .or_insert((v.clone(), p.clone()));
                if v > e.0 {
                    *e = (v, p);
                }
            }
        }
    }
    for (name, (_, p)) in crates {
        out.push(Root {
            repo: format!("crates/{name}"),
            dir: p,
            lang: Lang::Rust,
        });
    }
    // Python: site-packages.
    let sp = std::process::Command::new("python3")
        .args([
            "-c",
            "import site; print('\\n'.join(site.getsitepackages()))",
        ])
        .output();
    if let Ok(o) = sp {
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            let d = PathBuf::from(line.trim());
            if d.is_dir() {
                out.push(Root {
                    repo: "site-packages".into(),
                    dir: d,
                    lang: Lang::Python,
                });
            }
        }
    }
    // JavaScript: global node_modules.
    for d in ["/usr/lib/node_modules", "/usr/local/lib/node_modules"] {
        let d = PathBuf::from(d);
        if d.is_dir() {
            out.push(Root {
                repo: "node_modules".into(),
                dir: d,
                lang: Lang::JavaScript,
            });
        }
    }
    Ok(out)
}

fn walk_files(dir: &Path, lang: Lang, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut ents: Vec<_> = rd.flatten().collect();
    ents.sort_by_key(|e| e.file_name());
    for e in ents {
        let p = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            if name.starts_with('.')
                || name == "__pycache__"
                || name.ends_with(".dist-info")
                || name == "target"
                || (lang == Lang::JavaScript && (name == "dist" || name == "umd"))
            {
                continue;
            }
            walk_files(&p, lang, out);
        } else if ft.is_file() {
            let ok = match lang {
                Lang::Rust => name.ends_with(".rs"),
                Lang::Python => name.ends_with(".py"),
                Lang::JavaScript => {
                    (name.ends_with(".js") || name.ends_with(".mjs") || name.ends_with(".cjs"))
                        && !name.ends_with(".min.js")
                }
            };
            if ok {
                out.push(p);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Doc comments: find, strip, clean.

/// Byte ranges of `src` to delete (the doc comment) and the raw doc text.
struct Doc {
    spans: Vec<(usize, usize)>,
    raw: String,
    /// For Python: the position where `pass` must be inserted if the body becomes empty.
    py_body_empty: bool,
}

fn line_end(src: &str, i: usize) -> usize {
    src[i..].find('\n').map_or(src.len(), |j| i + j + 1)
}

fn rust_doc(src: &str, start: usize, end: usize) -> Option<Doc> {
    let mut i = start;
    let mut spans = Vec::new();
    let mut raw = String::new();
    while i < end {
        let le = line_end(src, i);
        let line = src[i..le].trim();
        if let Some(rest) = line.strip_prefix("///") {
            if rest.starts_with('/') {
                break;
            }
            spans.push((i, le));
            raw.push_str(rest.strip_prefix(' ').unwrap_or(rest));
            raw.push('\n');
        } else if line.is_empty() || line.starts_with("#[") || line.starts_with("//") {
            // attributes and plain comments stay
        } else {
            break;
        }
        i = le;
    }
    (!spans.is_empty()).then_some(Doc {
        spans,
        raw,
        py_body_empty: false,
    })
}

fn js_doc(src: &str, start: usize, end: usize) -> Option<Doc> {
    let mut i = start;
    let mut found: Option<(usize, usize)> = None;
    loop {
        while i < end && src.as_bytes()[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= end {
            break;
        }
        let rest = &src[i..end];
        if rest.starts_with("/**") && !rest.starts_with("/**/") {
            let close = rest.find("*/")? + 2;
            found = Some((i, i + close));
            i += close;
        } else if rest.starts_with("//") {
            i = line_end(src, i);
        } else if rest.starts_with("/*") {
            i += rest.find("*/")? + 2;
        } else {
            break;
        }
    }
    let (a, b) = found?;
    let body = &src[a + 3..b - 2];
    let raw: String = body
        .lines()
        .map(|l| {
            let t = l.trim();
            t.strip_prefix('*').unwrap_or(t).trim().to_string()
        })
        .collect::<Vec<_>>()
        .join("\n");
    // Delete whole lines when the comment stands alone on them.
    let ls = src[..a].rfind('\n').map_or(0, |j| j + 1);
    let a2 = if src[ls..a].trim().is_empty() { ls } else { a };
    let le = line_end(src, b);
    let b2 = if src[b..le].trim().is_empty() { le } else { b };
    Some(Doc {
        spans: vec![(a2, b2)],
        raw,
        py_body_empty: false,
    })
}

/// Skips a Python string literal starting at `i` (a quote); returns the index after it.
fn skip_py_string(b: &[u8], i: usize) -> usize {
    let q = b[i];
    if b[i..].starts_with(&[q, q, q]) {
        let mut j = i + 3;
        while j + 2 < b.len() + 2 && j < b.len() {
            if b[j] == b'\\' {
                j += 2;
                continue;
            }
            if b[j..].starts_with(&[q, q, q]) {
                return j + 3;
            }
            j += 1;
        }
        b.len()
    } else {
        let mut j = i + 1;
        while j < b.len() && b[j] != q && b[j] != b'\n' {
            if b[j] == b'\\' {
                j += 1;
            }
            j += 1;
        }
        (j + 1).min(b.len())
    }
}

fn py_doc(src: &str, start: usize, end: usize) -> Option<Doc> {
    let b = src.as_bytes();
    // The `def` keyword (after decorators).
    let mut i = start;
    loop {
        let le = line_end(src, i).min(end);
        let t = src[i..le].trim_start();
        if t.starts_with("def ") || t.starts_with("async def ") {
            i += src[i..le].find("def ")?;
            break;
        }
        if le >= end {
            return None;
        }
        i = le;
    }
    // The colon closing the signature.
    let mut depth = 0i32;
    while i < end {
        match b[i] {
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth -= 1,
            b'"' | b'\'' => {
                i = skip_py_string(b, i);
                continue;
            }
            b'#' => {
                i = line_end(src, i);
                continue;
            }
            b':' if depth == 0 => break,
            _ => {}
        }
        i += 1;
    }
    if i >= end {
        return None;
    }
    let sig_end = i + 1;
    let mut j = sig_end;
    while j < end && (b[j] == b' ' || b[j] == b'\t') {
        j += 1;
    }
    if j < end && b[j] != b'\n' && b[j] != b'\r' {
        return None; // one-line def
    }
    while j < end && b[j].is_ascii_whitespace() {
        j += 1;
    }
    let mut k = j;
    while k < end && matches!(b[k], b'r' | b'R' | b'u' | b'U') {
        k += 1;
    }
    if k >= end || !(b[k] == b'"' || b[k] == b'\'') {
        return None;
    }
    let send = skip_py_string(b, k);
    if send > end {
        return None;
    }
    let q = b[k];
    let open = if b[k..].starts_with(&[q, q, q]) { 3 } else { 1 };
    if send < k + 2 * open {
        return None;
    }
    let inner = &src[k + open..send - open];
    // Whole lines.
    let ls = src[..j].rfind('\n').map_or(0, |x| x + 1);
    let le = line_end(src, send).min(end);
    if !src[send..le].trim().is_empty() {
        return None;
    }
    let rest = &src[le..end];
    let body_empty = rest.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#')
    });
    Some(Doc {
        spans: vec![(ls, le)],
        raw: textwrap_dedent(inner),
        py_body_empty: body_empty,
    })
}

fn textwrap_dedent(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let indent = lines
        .iter()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                l.trim().to_string()
            } else if l.len() >= indent {
                l[indent..].trim_end().to_string()
            } else {
                l.trim().to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// First paragraph of a doc comment, markup removed; `None` when shorter than 4 words or not
/// prose.
fn clean_query(raw: &str, lang: Lang) -> Option<String> {
    let mut para: Vec<String> = Vec::new();
    for l in raw.lines() {
        let t = l.trim();
        if t.is_empty() {
            if para.is_empty() {
                continue;
            }
            break;
        }
        let stop = t.starts_with('@')
            || t.starts_with("```")
            || t.starts_with('#')
            || t.starts_with(">>>")
            || t.starts_with(":param")
            || t.starts_with(":return")
            || t.starts_with(":raises")
            || t.starts_with(":type")
            || t.starts_with(":rtype")
            || t.starts_with("..")
            || t.starts_with("---")
            || t.starts_with("===")
            || (lang == Lang::Python
                && matches!(
                    t,
                    "Args:"
                        | "Arguments:"
                        | "Parameters"
                        | "Returns"
                        | "Returns:"
                        | "Raises:"
                        | "Example:"
                        | "Examples:"
                        | "Yields:"
                        | "Note:"
                ));
        if stop {
            break;
        }
        para.push(t.to_string());
    }
    let mut s = para.join(" ");
    // {@link X} / {@code X} → X
    while let Some(a) = s.find("{@") {
        let Some(b) = s[a..].find('}') else { break };
        let inner = s[a + 2..a + b].to_string();
        let inner = inner.split_once(' ').map_or("", |x| x.1).trim().to_string();
        s.replace_range(a..a + b + 1, &inner);
    }
    // [text](url) and [text][ref] → text
    let mut out = String::new();
    let mut rest = s.as_str();
    while let Some(a) = rest.find('[') {
        out.push_str(&rest[..a]);
        let after = &rest[a + 1..];
        let Some(b) = after.find(']') else {
            out.push_str(after);
            rest = "";
            break;
        };
        out.push_str(&after[..b]);
        let tail = &after[b + 1..];
        if tail.starts_with('(') {
            rest = tail.find(')').map_or("", |c| &tail[c + 1..]);
        } else if tail.starts_with('[') {
            rest = tail.find(']').map_or("", |c| &tail[c + 1..]);
        } else {
            rest = tail;
        }
    }
    out.push_str(rest);
    // :func:`x` → x (Sphinx roles), then strip markup characters.
    let mut s = String::new();
    for w in out.split_whitespace() {
        let w = if w.starts_with(':') && w.contains(":`") {
            &w[w.find(":`").unwrap() + 1..]
        } else {
            w
        };
        if !s.is_empty() {
            s.push(' ');
        }
        s.push_str(w);
    }
    let s: String = s
        .chars()
        .filter(|c| !matches!(c, '`' | '*' | '<' | '>' | '|'))
        .collect();
    let s = s.replace("::", " ");
    let words: Vec<&str> = s.split_whitespace().collect();
    let prose = words
        .iter()
        .filter(|w| w.chars().filter(|c| c.is_alphabetic()).count() >= 2)
        .count();
    if prose < 4 {
        return None;
    }
    let lower = s.to_lowercase();
    for bad in [
        "todo",
        "fixme",
        "xxx",
        "deprecated",
        "copyright",
        "safety",
        "eslint",
        "istanbul",
        "jshint",
        "noqa",
        "type:",
        "pylint",
        "http://",
        "https://",
        "license",
    ] {
        if lower.starts_with(bad) || lower.contains(&format!(" {bad}")) && bad.contains(':') {
            return None;
        }
    }
    if lower.contains("http://") || lower.contains("https://") {
        return None;
    }
    // Long paragraphs: the first sentence, if it has enough words; cap at 48 words.
    let mut q = words.join(" ");
    if words.len() > 30 {
        if let Some(p) = q.find(". ") {
            let first = &q[..p + 1];
            if first.split_whitespace().count() >= 4 {
                q = first.to_string();
            }
        }
    }
    let ws: Vec<&str> = q.split_whitespace().take(48).collect();
    Some(ws.join(" "))
}

// ---------------------------------------------------------------------------------------------
// Pair construction.

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug)]
struct Pair {
    lang: String,
    query: String,
    repo: String,
    path: String,
    symbol_id: String,
    /// Chunk ordinals of the target (its first chunk and its body parts).
    targets: Vec<u32>,
}

struct FileOut {
    repo: String,
    path: String,
    lang: Lang,
    hash: [u8; 32],
    size: u64,
    chunks: Vec<chunk::Chunk>,
    /// What the chunks' symbol ids start with (`FileExtract::id_prefix`).
    id_prefix: String,
    imports: Vec<String>,
    /// (query, index into chunks of the target)
    pairs: Vec<(String, usize)>,
}

fn seeded(seed: &str, s: &str) -> [u8; 32] {
    *blake3::hash(format!("{seed}\0{s}").as_bytes()).as_bytes()
}

fn process_file(root: &Root, path: &Path, args: &Args, opts: &ChunkOptions) -> Option<FileOut> {
    let src = std::fs::read_to_string(path).ok()?;
    if src.len() < 400 || src.len() > 120_000 {
        return None;
    }
    let lines = src.lines().count().max(1);
    if src.len() / lines > 160 {
        return None; // minified or generated
    }
    let rel = path
        .strip_prefix(&root.dir)
        .ok()?
        .to_string_lossy()
        .to_string();
    let lang = root.lang.language();
    let fx = chunk::extract(lang, &root.repo, &rel, &src, opts);
    if fx.chunks.is_empty() || fx.chunks.len() > args.max_file_chunks {
        return None;
    }
    // Find the doc comment of every function/method; strip them all from the source.
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut docs: Vec<(String, String, bool)> = Vec::new(); // (symbol_id, raw, body_empty)
    let mut seen_spans = HashSet::new();
    for c in &fx.chunks {
        if !matches!(c.kind, ChunkKind::Function | ChunkKind::Method) || c.name.is_empty() {
            continue;
        }
        let (s, e) = (c.start_byte as usize, (c.end_byte as usize).min(src.len()));
        if s >= e || !src.is_char_boundary(s) || !src.is_char_boundary(e) {
            continue;
        }
        let d = match root.lang {
            Lang::Rust => rust_doc(&src, s, e),
            Lang::Python => py_doc(&src, s, e),
            Lang::JavaScript => js_doc(&src, s, e),
        };
        if let Some(d) = d {
            let mut fresh = false;
            for sp in &d.spans {
                if seen_spans.insert(*sp) {
                    spans.push(*sp);
                    fresh = true;
                }
            }
            if fresh {
                docs.push((fx.symbol_id(c), d.raw, d.py_body_empty));
            }
        }
    }
    spans.sort();
    // Drop overlapping spans (nested symbols).
    let mut merged: Vec<(usize, usize)> = Vec::new();
    for (a, b) in spans {
        if merged.last().is_some_and(|&(_, pb)| a < pb) {
            continue;
        }
        merged.push((a, b));
    }
    let mut stripped = String::with_capacity(src.len());
    let mut at = 0;
    for (a, b) in &merged {
        stripped.push_str(&src[at..*a]);
        if root.lang == Lang::Python {
            // Keep the body syntactically non-empty: a docstring-only body becomes `pass`.
            let ind: String = src[*a..*b]
                .chars()
                .take_while(|c| *c == ' ' || *c == '\t')
                .collect();
            let next_nonblank = src[*b..]
                .lines()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.len() - l.trim_start().len());
            if next_nonblank.is_none_or(|n| n < ind.len()) {
                stripped.push_str(&ind);
                stripped.push_str("pass\n");
            }
        }
        at = *b;
    }
    stripped.push_str(&src[at..]);
    let fx2 = chunk::extract(lang, &root.repo, &rel, &stripped, opts);
    if fx2.chunks.is_empty() {
        return None;
    }
    let mut by_id: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, c) in fx2.chunks.iter().enumerate() {
        if c.symbol.is_some() {
            by_id.entry(fx2.symbol_id(c)).or_default().push(i);
        }
    }
    let mut pairs = Vec::new();
    for (sid, raw, body_empty) in docs {
        if body_empty {
            continue;
        }
        let Some(q) = clean_query(&raw, root.lang) else {
            continue;
        };
        let Some(ix) = by_id.get(sid.as_str()) else {
            continue;
        };
        if ix.len() != 1 {
            continue;
        }
        let t = &fx2.chunks[ix[0]];
        if !matches!(t.kind, ChunkKind::Function | ChunkKind::Method) {
            continue;
        }
        // A body worth finding: at least 3 non-blank lines after stripping.
        if t.text.lines().filter(|l| !l.trim().is_empty()).count() < 3 {
            continue;
        }
        pairs.push((q, ix[0]));
    }
    pairs.sort_by_key(|(q, i)| seeded(&args.seed, &format!("{rel}\0{q}\0{i}")));
    pairs.truncate(args.per_file);
    let meta = std::fs::metadata(path).ok()?;
    Some(FileOut {
        repo: root.repo.clone(),
        path: rel,
        lang: root.lang,
        hash: *blake3::hash(stripped.as_bytes()).as_bytes(),
        size: meta.len(),
        imports: fx2.imports.iter().map(|i| i.module.to_string()).collect(),
        chunks: fx2.chunks,
        id_prefix: fx2.id_prefix,
        pairs,
    })
}

fn model_dir(args: &Args) -> PathBuf {
    kernels::resolve_model_dir(args.model.clone())
}

/// Builds the pair set and the index into `dir`; returns the pairs.
fn build(args: &Args, dir: &Path, enc: &kernels::Encoder) -> anyhow::Result<Vec<Pair>> {
    let t0 = Instant::now();
    let opts = ChunkOptions::default();
    let roots = roots()?;
    let mut files: Vec<FileOut> = Vec::new();
    let mut seen_content: HashSet<[u8; 32]> = HashSet::new();
    for lang in Lang::ALL {
        let mut cands: Vec<(usize, PathBuf)> = Vec::new();
        for (ri, r) in roots.iter().enumerate() {
            if r.lang != lang {
                continue;
            }
            let mut v = Vec::new();
            walk_files(&r.dir, lang, &mut v);
            cands.extend(v.into_iter().map(|p| (ri, p)));
        }
        let n_cands = cands.len();
        cands.sort_by_key(|(_, p)| seeded(&args.seed, &p.to_string_lossy()));
        let mut got = 0usize;
        let mut nfiles = 0usize;
        let mut nchunks = 0usize;
        let mut repos = HashSet::new();
        for (ri, p) in cands {
            if got >= args.pairs_per_lang {
                break;
            }
            let Some(f) = process_file(&roots[ri], &p, args, &opts) else {
                continue;
            };
            if f.pairs.is_empty() || !seen_content.insert(f.hash) {
                continue;
            }
            got += f.pairs.len();
            nfiles += 1;
            nchunks += f.chunks.len();
            repos.insert(if lang == Lang::Rust {
                f.repo.clone()
            } else {
                f.path.split('/').next().unwrap_or("").to_string()
            });
            files.push(f);
        }
        eprintln!(
            "{}: {n_cands} candidate files, {nfiles} sampled from {} packages, {nchunks} chunks, {got} raw pairs",
            lang.name(),
            repos.len()
        );
    }
    files.sort_by(|a, b| (&a.repo, &a.path).cmp(&(&b.repo, &b.path)));
    files.dedup_by(|a, b| a.repo == b.repo && a.path == b.path);

    // Records, embedding texts, pairs.
    let mut builder = SegmentBuilder::default();
    let mut texts: Vec<String> = Vec::new();
    let mut raw_pairs: Vec<Pair> = Vec::new();
    for (fi, f) in files.iter().enumerate() {
        let first = builder.chunks.len() as u32;
        builder.files.push(FileRecord {
            repo: f.repo.clone(),
            path: f.path.clone(),
            language: f.lang.language().name().to_string(),
            content_hash: f.hash,
            size: f.size,
            first_chunk: first,
            chunk_count: f.chunks.len() as u32,
            imports: f.imports.clone(),
        });
        for c in &f.chunks {
            let et = embed_text(&f.path, c.kind.name(), &c.qualified, &c.text);
            builder.chunks.push(ChunkRecord {
                file: fi as u32,
                kind: c.kind.name().to_string(),
                name: c.name.to_string(),
                qualified: c.qualified.to_string(),
                symbol_id: c.symbol_id(&f.id_prefix),
                start_line: c.start_line.max(1),
                end_line: c.end_line.max(c.start_line.max(1)),
                start_byte: c.start_byte,
                end_byte: c.end_byte.max(c.start_byte),
                parent: c.parent.map_or(NO_PARENT, |p| first + p as u32),
                content_hash: *blake3::hash(et.as_bytes()).as_bytes(),
                text: c.text.clone(),
            });
            texts.push(et);
        }
        for (q, ti) in &f.pairs {
            let mut targets = vec![first + *ti as u32];
            for (j, c) in f.chunks.iter().enumerate() {
                if c.kind == ChunkKind::BodyPart && c.parent == Some(*ti) {
                    targets.push(first + j as u32);
                }
            }
            raw_pairs.push(Pair {
                lang: f.lang.name().to_string(),
                query: q.clone(),
                repo: f.repo.clone(),
                path: f.path.clone(),
                symbol_id: f.chunks[*ti].symbol_id(&f.id_prefix),
                targets,
            });
        }
    }
    // Ambiguity: drop queries that occur more than once and targets whose text is not unique.
    let mut qcount: HashMap<String, usize> = HashMap::new();
    for p in &raw_pairs {
        *qcount.entry(p.query.to_lowercase()).or_default() += 1;
    }
    let mut tcount: HashMap<&str, usize> = HashMap::new();
    for c in &builder.chunks {
        *tcount.entry(c.text.as_str()).or_default() += 1;
    }
    let pairs: Vec<Pair> = raw_pairs
        .iter()
        .filter(|p| {
            qcount[&p.query.to_lowercase()] == 1
                && tcount[builder.chunks[p.targets[0] as usize].text.as_str()] == 1
        })
        .cloned()
        .collect();
    eprintln!(
        "{} files, {} chunks, {} pairs ({} dropped as ambiguous); selection {:.1}s",
        builder.files.len(),
        builder.chunks.len(),
        pairs.len(),
        raw_pairs.len() - pairs.len(),
        t0.elapsed().as_secs_f64()
    );

    // Embed.
    let t = Instant::now();
    let mut vectors: Vec<f32> = Vec::with_capacity(texts.len() * enc.dim());
    for (gi, group) in texts.chunks(256).enumerate() {
        let refs: Vec<&str> = group.iter().map(|s| s.as_str()).collect();
        let (v, _) = enc.embed(&refs)?;
        vectors.extend(v);
        let done = (gi * 256 + group.len()) as f64;
        eprintln!(
            "  embedded {}/{} ({:.1} chunks/s)",
            done,
            texts.len(),
            done / t.elapsed().as_secs_f64()
        );
    }
    builder.vectors = vectors;
    let n = builder.chunks.len() as u32;
    std::fs::create_dir_all(dir)?;
    let (id, _) = builder.write(dir, enc.model_id(), enc.dim())?;
    let mut m = IndexManifest::empty(enc.model_id(), enc.dim() as u32);
    m.generation = 1;
    m.segments.push(SegmentEntry {
        id,
        chunks: n,
        tombstones: None,
    });
    m.commit(dir)?;
    eprintln!(
        "embedding + segment write {:.1}s",
        t.elapsed().as_secs_f64()
    );
    Ok(pairs)
}

// ---------------------------------------------------------------------------------------------
// Evaluation.

#[derive(Default, Clone)]
struct Acc {
    n: usize,
    mrr: f64,
    r10: f64,
}

impl Acc {
    fn add(&mut self, rank: Option<usize>) {
        self.n += 1;
        if let Some(r) = rank.filter(|r| *r <= 10) {
            self.mrr += 1.0 / r as f64;
            self.r10 += 1.0;
        }
    }
    fn mrr(&self) -> f64 {
        self.mrr / self.n.max(1) as f64
    }
    fn r10(&self) -> f64 {
        self.r10 / self.n.max(1) as f64
    }
}

/// One evaluated configuration: accumulators per language and overall.
struct Row {
    name: String,
    per: BTreeMap<String, Acc>,
    all: Acc,
    /// Split halves of the pair set (by a hash of the query), for tune-on-one-half checks.
    halves: [Acc; 2],
}

impl Row {
    fn new(name: String) -> Row {
        Row {
            name,
            per: BTreeMap::new(),
            all: Acc::default(),
            halves: [Acc::default(), Acc::default()],
        }
    }
    fn add(&mut self, lang: &str, half: usize, rank: Option<usize>) {
        self.per.entry(lang.to_string()).or_default().add(rank);
        self.all.add(rank);
        self.halves[half].add(rank);
    }
    /// Macro average over languages (each language weighs the same).
    fn macro_mrr(&self) -> f64 {
        self.per.values().map(Acc::mrr).sum::<f64>() / self.per.len().max(1) as f64
    }
}

fn rank_of(list: &[u32], targets: &[u32]) -> Option<usize> {
    list.iter().position(|c| targets.contains(c)).map(|p| p + 1)
}

/// Weighted RRF over two ranked lists, as `queryd::search` fuses them (same tie-break).
fn rrf(v: &[(u32, f32)], l: &[(u32, f32)], wv: f32, wl: f32, k: f32, n: usize) -> Vec<u32> {
    let mut all: HashMap<u32, f32> = HashMap::new();
    for (r, (c, _)) in v.iter().enumerate() {
        *all.entry(*c).or_default() += wv / (k + r as f32 + 1.0);
    }
    for (r, (c, _)) in l.iter().enumerate() {
        *all.entry(*c).or_default() += wl / (k + r as f32 + 1.0);
    }
    let mut r: Vec<(u32, f32)> = all.into_iter().collect();
    r.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    r.into_iter().take(n).map(|x| x.0).collect()
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Norm {
    MinMax,
    ZScore,
}

/// Score-normalised linear fusion of two scored lists; a chunk missing from a list gets that
/// list's lowest normalised score.
fn linear(v: &[(u32, f32)], l: &[(u32, f32)], alpha: f32, norm: Norm, k: usize) -> Vec<u32> {
    let normed = |xs: &[(u32, f32)]| -> (HashMap<u32, f32>, f32) {
        if xs.is_empty() {
            return (HashMap::new(), 0.0);
        }
        let (a, b) = match norm {
            Norm::MinMax => {
                let mx = xs.iter().map(|x| x.1).fold(f32::MIN, f32::max);
                let mn = xs.iter().map(|x| x.1).fold(f32::MAX, f32::min);
                (mn, (mx - mn).max(1e-9))
            }
            Norm::ZScore => {
                let n = xs.len() as f32;
                let mean = xs.iter().map(|x| x.1).sum::<f32>() / n;
                let var = xs.iter().map(|x| (x.1 - mean).powi(2)).sum::<f32>() / n;
                (mean, var.sqrt().max(1e-9))
            }
        };
        let m: HashMap<u32, f32> = xs.iter().map(|(c, s)| (*c, (s - a) / b)).collect();
        let floor = m.values().copied().fold(f32::MAX, f32::min);
        (m, floor)
    };
    let ((nv, fv), (nl, fl)) = (normed(v), normed(l));
    let mut ids: Vec<u32> = nv.keys().chain(nl.keys()).copied().collect();
    ids.sort_unstable();
    ids.dedup();
    let mut r: Vec<(u32, f32)> = ids
        .into_iter()
        .map(|c| {
            let sv = nv.get(&c).copied().unwrap_or(fv);
            let sl = nl.get(&c).copied().unwrap_or(fl);
            (c, alpha * sv + (1.0 - alpha) * sl)
        })
        .collect();
    r.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    r.into_iter().take(k).map(|x| x.0).collect()
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    format::vectors::set_faiss_threads(1);
    let mdir = model_dir(&args);
    let enc = kernels::Encoder::load(&mdir, kernels::DeviceChoice::Cpu)
        .with_context(|| format!("load model {}", mdir.display()))?;
    let key = format::blake3_hex(
        format!(
            "v1|{}|{}|{}|{}|{}",
            args.seed,
            args.pairs_per_lang,
            args.per_file,
            args.max_file_chunks,
            enc.model_id()
        )
        .as_bytes(),
    )[..16]
        .to_string();
    let dir = args.cache.join(key);
    let idx_dir = dir.join("index");
    let pairs_p = dir.join("pairs.json");
    let qv_p = dir.join("queries.f32");
    let cached =
        !args.rebuild && pairs_p.exists() && qv_p.exists() && idx_dir.join("MANIFEST").exists();
    let (pairs, qvecs) = if cached {
        eprintln!("using cached index {}", dir.display());
        let pairs: Vec<Pair> = serde_json::from_slice(&std::fs::read(&pairs_p)?)?;
        (pairs, read_f32(&qv_p)?)
    } else {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        let pairs = build(&args, &idx_dir, &enc)?;
        let t = Instant::now();
        let qs: Vec<&str> = pairs.iter().map(|p| p.query.as_str()).collect();
        let (qv, _) = enc.embed(&qs)?;
        eprintln!(
            "embedded {} queries in {:.1}s",
            qs.len(),
            t.elapsed().as_secs_f64()
        );
        write_f32(&qv_p, &qv)?;
        std::fs::write(&pairs_p, serde_json::to_vec_pretty(&pairs)?)?;
        (pairs, qv)
    };
    let dim = enc.dim();
    if qvecs.len() != pairs.len() * dim {
        bail!("cached query vectors do not match the pairs; rerun with --rebuild");
    }
    let index = Index::open(&idx_dir)?;
    let seg = &index.segments[0].segment;
    let total_chunks = seg.meta().chunk_count;

    // Inputs summary.
    let mut per_lang: BTreeMap<&str, (usize, HashSet<&str>)> = BTreeMap::new();
    for p in &pairs {
        let e = per_lang.entry(p.lang.as_str()).or_default();
        e.0 += 1;
        e.1.insert(p.repo.as_str());
    }
    let t = seg.table();
    let mut chunks_by_lang: BTreeMap<String, usize> = BTreeMap::new();
    for f in t.files.iter() {
        *chunks_by_lang.entry(f.language.to_string()).or_default() +=
            f.chunk_count.to_native() as usize;
    }
    println!(
        "## Retrieval quality (CodeSearchNet construction)\n\nindex: {} files, {} chunks ({}), vector index {}; {} pairs ({}); model {}\n",
        t.files.len(),
        total_chunks,
        chunks_by_lang
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        seg.meta().vector_index,
        pairs.len(),
        per_lang
            .iter()
            .map(|(k, v)| format!("{k} {}", v.0))
            .collect::<Vec<_>>()
            .join(", "),
        enc.model_id()
    );
    for p in pairs.iter().take(args.examples) {
        let c = &t.chunks[p.targets[0] as usize];
        println!(
            "example [{}] {}:{}\n  query: {}\n  target:\n{}\n",
            p.lang,
            p.path,
            c.name,
            p.query,
            seg.chunk_text(p.targets[0])?
                .lines()
                .take(8)
                .map(|l| format!("    {l}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }

    // Configurations. `SearchOptions.weights` is not applied by `queryd::search` at the time of
    // writing, so weighted RRF is computed here over the same lists (depth 50, as queryd uses
    // for limit 10 before the candidate depth became 200; still its NORM_DEPTH) and checked
    // against queryd's default output.
    let depth = 50usize;
    let ks = [1.0f32, 5.0, 10.0, 20.0, 30.0, 60.0, 100.0];
    let wls = [0.0f32, 0.25, 0.5, 0.6, 0.75, 1.0, 1.5, 2.0, 4.0];
    let alphas = [0.2f32, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9];
    let mut vec_row = Row::new("vector only".into());
    let mut lex_row = Row::new("lexical only (BM25)".into());
    let mut def_row = Row::new("hybrid, queryd default (SearchOptions::default())".into());
    let mut rrf_rows: Vec<(f32, f32, Row)> = Vec::new();
    for &k in &ks {
        for &wl in &wls {
            rrf_rows.push((k, wl, Row::new(format!("RRF k={k} w=(1, {wl})"))));
        }
    }
    let mut lin_rows: Vec<(f32, Norm, Row)> = Vec::new();
    for norm in [Norm::MinMax, Norm::ZScore] {
        for &a in &alphas {
            let nn = if norm == Norm::MinMax {
                "min-max"
            } else {
                "z-score"
            };
            lin_rows.push((a, norm, Row::new(format!("linear {nn} α_vec={a}"))));
        }
    }
    let mut routed_lexical = 0usize;
    let mut agree = 0usize;
    let mut agree_lin = 0usize;
    let te = Instant::now();
    for (i, p) in pairs.iter().enumerate() {
        let qv = &qvecs[i * dim..(i + 1) * dim];
        let routed = code::search::identifier_like(&p.query);
        let half = (blake3::hash(p.query.as_bytes()).as_bytes()[0] & 1) as usize;
        if routed {
            routed_lexical += 1;
        }
        let run = |mode: Mode| -> anyhow::Result<Vec<u32>> {
            let o = SearchOptions {
                mode,
                limit: 10,
                ..SearchOptions::default()
            };
            let (hits, _) = search(&index, &p.query, Some(qv), &o)?;
            Ok(hits.iter().map(|h| h.chunk).collect())
        };
        vec_row.add(&p.lang, half, rank_of(&run(Mode::Vector)?, &p.targets));
        lex_row.add(&p.lang, half, rank_of(&run(Mode::Lexical)?, &p.targets));
        let def = run(Mode::Hybrid)?;
        def_row.add(&p.lang, half, rank_of(&def, &p.targets));
        let vl = seg.search_vectors(qv, depth, format::vectors::DEFAULT_NPROBE, None, None)?;
        let ll = seg.search_bm25(&p.query, depth, None, None);
        let (dwv, dwl) = if routed { (0.5, 1.0) } else { (1.0, 0.6) };
        if rrf(&vl, &ll, dwv, dwl, 60.0, 10) == def {
            agree += 1;
        }
        let a = if routed { 1.0 / 3.0 } else { 0.5 };
        if linear(&vl, &ll, a, Norm::ZScore, 10) == def {
            agree_lin += 1;
        }
        for (k, wl, row) in rrf_rows.iter_mut() {
            row.add(
                &p.lang,
                half,
                rank_of(&rrf(&vl, &ll, 1.0, *wl, *k, 10), &p.targets),
            );
        }
        for (a, norm, row) in lin_rows.iter_mut() {
            row.add(
                &p.lang,
                half,
                rank_of(&linear(&vl, &ll, *a, *norm, 10), &p.targets),
            );
        }
    }
    let eval_s = te.elapsed().as_secs_f64();
    let langs: Vec<String> = vec_row.per.keys().cloned().collect();

    let header = |title: &str| {
        let mut h = format!("| {title} |");
        let mut sep = "|---|".to_string();
        for l in &langs {
            h.push_str(&format!(" {l} MRR@10 | {l} R@10 |"));
            sep.push_str("---:|---:|");
        }
        h.push_str(" all MRR@10 | all R@10 | macro MRR@10 |");
        sep.push_str("---:|---:|---:|");
        println!("{h}\n{sep}");
    };
    let line = |r: &Row| {
        let mut s = format!("| {} |", r.name);
        for l in &langs {
            let a = r.per.get(l).cloned().unwrap_or_default();
            s.push_str(&format!(" {:.3} | {:.3} |", a.mrr(), a.r10()));
        }
        s.push_str(&format!(
            " {:.3} | {:.3} | {:.3} |",
            r.all.mrr(),
            r.all.r10(),
            r.macro_mrr()
        ));
        println!("{s}");
    };
    println!(
        "{} queries evaluated in {:.1}s ({} configurations); {} of them routed lexical by `identifier_like`; queryd's default top-10 equals the in-bench RRF (k=60, routed weights (1, 0.6)) for {} and the in-bench linear z-score (α_vec=0.5) for {} of {} queries\n",
        pairs.len(),
        eval_s,
        3 + rrf_rows.len() + lin_rows.len(),
        routed_lexical,
        agree,
        agree_lin,
        pairs.len()
    );
    println!("### Main modes\n");
    header("mode");
    for r in [&vec_row, &lex_row, &def_row] {
        line(r);
    }
    // Best of the sweep by overall MRR.
    let mut sweep: Vec<&Row> = rrf_rows.iter().map(|x| &x.2).collect();
    sweep.extend(lin_rows.iter().map(|x| &x.2));
    sweep.sort_by(|a, b| b.all.mrr().total_cmp(&a.all.mrr()));
    println!("\n### Sweep, top 12 by overall MRR@10\n");
    header("configuration");
    for r in sweep.iter().take(12) {
        line(r);
    }
    println!("\n### Linear fusion (scores normalised over the top-{depth} of each list)\n");
    header("configuration");
    for (_, _, r) in &lin_rows {
        line(r);
    }
    println!(
        "\n### RRF sweep, overall MRR@10 (rows: k; columns: lexical weight, vector weight 1)\n"
    );
    let mut h = "| k |".to_string();
    let mut sep = "|---:|".to_string();
    for wl in &wls {
        h.push_str(&format!(" {wl} |"));
        sep.push_str("---:|");
    }
    println!("{h}\n{sep}");
    for &k in &ks {
        let mut s = format!("| {k} |");
        for &wl in &wls {
            let r = &rrf_rows.iter().find(|x| x.0 == k && x.1 == wl).unwrap().2;
            s.push_str(&format!(" {:.3} |", r.all.mrr()));
        }
        println!("{s}");
    }
    // Tune on one half, evaluate on the other.
    println!("\n### Split-half check (tune on one half of the pairs, evaluate on the other)\n");
    println!("| tuned on | best configuration there | its MRR@10 on the other half | vector only there | lexical only there | default hybrid there |\n|---|---|---:|---:|---:|---:|");
    for h in 0..2 {
        let o = 1 - h;
        let best = sweep
            .iter()
            .max_by(|a, b| a.halves[h].mrr().total_cmp(&b.halves[h].mrr()))
            .unwrap();
        println!(
            "| half {h} ({} pairs) | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
            best.halves[h].n,
            best.name,
            best.halves[o].mrr(),
            vec_row.halves[o].mrr(),
            lex_row.halves[o].mrr(),
            def_row.halves[o].mrr()
        );
    }
    println!(
        "\n(vector only {:.3}, lexical only {:.3}, default hybrid {:.3})",
        vec_row.all.mrr(),
        lex_row.all.mrr(),
        def_row.all.mrr()
    );

    // IVF recall on real embeddings (this index's vectors, the pair queries as queries).
    println!(
        "\n### Vector index recall@10 vs exact on these real embeddings ({} chunks, {}, {} queries)\n",
        total_chunks,
        seg.meta().vector_index,
        pairs.len()
    );
    println!("| nprobe | recall@10 |\n|---:|---:|");
    for np in [1usize, 2, 4, 8, 16, 32, 64] {
        let mut hit = 0usize;
        for i in 0..pairs.len() {
            let qv = &qvecs[i * dim..(i + 1) * dim];
            let ex = format::vectors::exact_search(seg.vectors(), dim, qv, 10, None, None);
            let got = seg.search_vectors(qv, 10, np, None, None)?;
            hit += got.iter().filter(|g| ex.iter().any(|e| e.0 == g.0)).count();
        }
        println!("| {np} | {:.3} |", hit as f64 / (pairs.len() * 10) as f64);
    }

    if let Some(j) = &args.json {
        let dump = |r: &Row| {
            json!({
                "name": r.name,
                "all": {"n": r.all.n, "mrr10": r.all.mrr(), "recall10": r.all.r10()},
                "per_language": r.per.iter().map(|(l, a)| (l.clone(), json!({"n": a.n, "mrr10": a.mrr(), "recall10": a.r10()}))).collect::<serde_json::Map<_, _>>(),
            })
        };
        let mut all_rows = vec![dump(&vec_row), dump(&lex_row), dump(&def_row)];
        all_rows.extend(rrf_rows.iter().map(|x| dump(&x.2)));
        all_rows.extend(lin_rows.iter().map(|x| dump(&x.2)));
        std::fs::write(
            j,
            serde_json::to_vec_pretty(
                &json!({"pairs": pairs.len(), "chunks": total_chunks, "rows": all_rows}),
            )?,
        )?;
    }
    Ok(())
}
