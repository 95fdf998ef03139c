//! Long file: one harness for every query style (its corpora, its metrics, the bootstrap and
//! the report) so the numbers of one run are comparable.
//!
//! Retrieval quality per query style, the way agents send them, for each ranking mode
//! (vector only, lexical only, the default hybrid):
//!
//! - `docstring`: the CodeSearchNet-style set of `quality` (a function's doc comment is the
//!   query, the function without it the target; Rust, Python, JavaScript). Reads `quality`'s
//!   cached index (run `quality` first).
//! - `web`: short web-search questions ("python how to merge two dicts without overwriting")
//!   written by hand for functions of the CPython 3.11 standard library
//!   (`benches/data/webq/*.jsonl`, each `{q, path, line, name, also?}`; written from reading
//!   the code, not from the docstring's words), over an index of the whole standard library
//!   minus tests, IDLE, lib2to3, tkinter, distutils.
//! - `identifier`: a function's or method's name (`raw_decode`, `JSONDecoder.raw_decode`),
//!   for names unique in that index; `path`: a file's path (`json/decoder.py`), any chunk of the
//!   file counts.
//! - `memory`: a synthetic multi-session conversation set (`benches/src/convmem_lite.rs`): every
//!   turn is a memory (tags `session=…`, time = its session's date), questions are asked
//!   through the engine's `search_memory` tool with the conversation as entity filter and the
//!   question's date as `as_of`.
//!
//! Metrics per style and mode: MRR@10 (first relevant), R@1, R@5, R@10 (share of the relevant
//! items in the top k; an item is a target or one evidence turn; alternatives of one item count
//! once). Each query is in the tune half or the held-out half by a hash of its text; the
//! held-out half is never used to choose parameters (`--split`). The default is compared with
//! the best single mode by a paired bootstrap (95% interval of the difference of the means).
//!
//! Run: `cargo run --release -p cix-benches --bin styles` (after `quality` has built its cache).

#[path = "../convmem_lite.rs"]
mod convmem;
#[path = "../convmem.rs"]
mod convmem_b;
#[path = "../convmem_types.rs"]
mod convmem_types;
#[path = "../f32file.rs"]
mod f32file;

use f32file::{read_f32, write_f32};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Parser;
use code::search::{search, Mode, SearchOptions};
use format::Index;
use serde::Deserialize;
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// Model directory (default: $CIX_MODEL_DIR, else ./models/all-MiniLM-L6-v2).
    #[arg(long)]
    model: Option<PathBuf>,
    /// This harness's cache (indexes, query vectors).
    #[arg(long, default_value = ".cache/styles")]
    cache: PathBuf,
    /// `quality`'s cache directory (its one subdirectory holds the docstring set).
    #[arg(long, default_value = ".cache/quality")]
    quality_cache: PathBuf,
    /// The standard library to index for the web / identifier / path styles.
    #[arg(long, default_value = "/usr/lib/python3.11")]
    stdlib: PathBuf,
    /// Hand-written web questions.
    #[arg(long, default_value = "benches/data/webq")]
    webq: PathBuf,
    /// Conversations of the memory set.
    #[arg(long, default_value_t = 40)]
    conversations: usize,
    #[arg(long, default_value = "convmem-v1")]
    memory_seed: String,
    /// Which synthetic memory set: `a` (`convmem_lite.rs`, whose tune half chose the memory
    /// parameters) or `b` (`convmem.rs`, written separately and never used to choose anything:
    /// a second held-out set).
    #[arg(long, default_value = "a")]
    memory_set: String,
    /// Which queries count: all, tune (the half parameters may be chosen on) or holdout.
    #[arg(long, default_value = "all")]
    split: String,
    /// Only these styles (comma-separated).
    #[arg(long)]
    styles: Option<String>,
    /// Bootstrap resamples.
    #[arg(long, default_value_t = 2000)]
    bootstrap: usize,
    /// Extra hybrid configurations to report: `v,l` weight pairs (comma-separated pairs
    /// joined by `;`), applied as fixed weights.
    #[arg(long)]
    weights: Option<String>,
    /// Write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write one JSON line per query (style, half, the fusion's signals, reciprocal rank per
    /// configuration) here, for studying the fusion.
    #[arg(long)]
    dump: Option<PathBuf>,
    /// Experiment: also embed a header per symbol (path ▸ owner ▸ signature ▸ first doc
    /// sentence) of the standard-library index and report the vector ranking that scores a
    /// symbol by the best of its header and its body (and hybrid with fixed shares).
    #[arg(long)]
    header_sim: bool,
    /// Levers off, to measure each on its own: no query expansion (`--no-expand`); the fusion
    /// of before issue 15 (vector share ½ for every sentence, `--old-fusion`); the
    /// standard-library index under another name (`--stdlib-index index-noheader`, built
    /// without header chunks).
    #[arg(long)]
    no_expand: bool,
    #[arg(long)]
    old_fusion: bool,
    #[arg(long, default_value = "index")]
    stdlib_index: String,
    /// Override the adaptive fusion's peak gain (`Adapt::peak_gain`; code styles only: the
    /// memory set goes through the tool, which uses the defaults).
    #[arg(long)]
    peak_gain: Option<f32>,
    /// Memory set: also report each memory lever on its own (library path).
    #[arg(long)]
    levers: bool,
    /// Session weights `session,neighbour` for the lever rows.
    #[arg(long)]
    session: Option<String>,
    /// IVF lists probed by the code styles (default: the search's own,
    /// `code::search::default_nprobe` of the index), e.g. to compare with an older table.
    #[arg(long)]
    nprobe: Option<usize>,
}

/// One query: its text, the relevant items (each a set of equivalent keys), its half.
struct Query {
    style: &'static str,
    text: String,
    items: Vec<HashSet<u64>>,
    half: usize,
    /// Memory set: the conversation and the question's date.
    conversation: String,
    date: String,
}

fn key(seg: usize, chunk: u32) -> u64 {
    ((seg as u64) << 32) | chunk as u64
}

fn half_of(style: &str, text: &str) -> usize {
    (blake3::hash(format!("{style}\u{0}{text}").as_bytes()).as_bytes()[0] & 1) as usize
}

/// Per-query metrics of one (style, configuration).
#[derive(Default, Clone)]
struct Scores {
    rr: Vec<f64>,
    r1: Vec<f64>,
    r5: Vec<f64>,
    r10: Vec<f64>,
}

impl Scores {
    fn add(&mut self, ranked: &[HashSet<u64>], items: &[HashSet<u64>]) {
        // `ranked[i]`: the keys result i stands for.
        let hit = |k: usize| {
            items
                .iter()
                .filter(|it| ranked.iter().take(k).any(|r| !r.is_disjoint(it)))
                .count() as f64
                / items.len().max(1) as f64
        };
        let first = ranked
            .iter()
            .take(10)
            .position(|r| items.iter().any(|it| !r.is_disjoint(it)));
        self.rr.push(first.map_or(0.0, |p| 1.0 / (p + 1) as f64));
        self.r1.push(hit(1));
        self.r5.push(hit(5));
        self.r10.push(hit(10));
    }
    fn mean(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len().max(1) as f64
    }
}

/// Paired bootstrap of mean(a) − mean(b): (difference, 2.5th, 97.5th percentile).
fn bootstrap(a: &[f64], b: &[f64], n: usize, seed: u64) -> (f64, f64, f64) {
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let m = Scores::mean(&d);
    if d.is_empty() || n == 0 {
        return (m, m, m);
    }
    let mut s = seed | 1;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut means: Vec<f64> = (0..n)
        .map(|_| {
            let mut t = 0.0;
            for _ in 0..d.len() {
                t += d[(next() % d.len() as u64) as usize];
            }
            t / d.len() as f64
        })
        .collect();
    means.sort_by(f64::total_cmp);
    let at = |p: f64| means[((p * n as f64) as usize).min(n - 1)];
    (m, at(0.025), at(0.975))
}

/// Query vectors for `texts`, cached under `dir` by a hash of the texts and the model.
fn query_vectors(
    enc: &kernels::Encoder,
    dir: &Path,
    name: &str,
    texts: &[&str],
) -> anyhow::Result<Vec<f32>> {
    let h = format::blake3_hex(format!("{}|{}", enc.model_id(), texts.join("\n")).as_bytes());
    let p = dir.join(format!("{name}-{}.f32", &h[..16]));
    if let Ok(v) = read_f32(&p) {
        if v.len() == texts.len() * enc.dim() {
            return Ok(v);
        }
    }
    let t = Instant::now();
    let (v, _) = enc.embed(texts)?;
    eprintln!(
        "embedded {} {name} queries in {:.1}s",
        texts.len(),
        t.elapsed().as_secs_f64()
    );
    std::fs::create_dir_all(dir)?;
    write_f32(&p, &v)?;
    Ok(v)
}

#[derive(Deserialize)]
struct QualityPair {
    query: String,
    targets: Vec<u32>,
}

/// The docstring set: `quality`'s cached index, pairs and query vectors.
fn docstring_set(args: &Args) -> anyhow::Result<(Index, Vec<Query>, Vec<f32>)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&args.quality_cache)
        .with_context(|| {
            format!(
                "{}: run `quality` first (it builds the docstring set)",
                args.quality_cache.display()
            )
        })?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("pairs.json").exists())
        .collect();
    dirs.sort();
    let Some(dir) = dirs.first() else {
        bail!(
            "no cached `quality` set under {}",
            args.quality_cache.display()
        );
    };
    let pairs: Vec<QualityPair> = serde_json::from_slice(&std::fs::read(dir.join("pairs.json"))?)?;
    let qv = read_f32(&dir.join("queries.f32"))?;
    let index = Index::open(&dir.join("index"))?;
    let qs = pairs
        .into_iter()
        .map(|p| Query {
            style: "docstring",
            half: half_of("docstring", &p.query),
            items: vec![p.targets.iter().map(|&c| key(0, c)).collect()],
            text: p.query,
            conversation: String::new(),
            date: String::new(),
        })
        .collect();
    Ok((index, qs, qv))
}

#[derive(Deserialize)]
struct WebQ {
    q: String,
    path: String,
    line: u32,
    name: String,
    #[serde(default)]
    also: Vec<WebAlt>,
}

#[derive(Deserialize)]
struct WebAlt {
    path: String,
    line: u32,
}

/// The chunks of the symbol defined at `line` of `path` (a function or method whose chunk
/// range holds the line; the innermost one, with its body parts), as keys.
fn symbol_at(index: &Index, path: &str, line: u32, name: Option<&str>) -> HashSet<u64> {
    let mut out = HashSet::new();
    for (si, ls) in index.segments.iter().enumerate() {
        let t = ls.segment.table();
        for f in t.files.iter() {
            if f.path.as_str() != path {
                continue;
            }
            let first = f.first_chunk.to_native();
            let n = f.chunk_count.to_native();
            let best = (first..first + n)
                .filter(|&c| {
                    let ch = &t.chunks[c as usize];
                    !ch.symbol_id.is_empty()
                        && ch.start_line.to_native() <= line
                        && line <= ch.end_line.to_native()
                        && name.is_none_or(|nm| ch.name.as_str() == nm)
                })
                .min_by_key(|&c| {
                    let ch = &t.chunks[c as usize];
                    ch.end_line.to_native() - ch.start_line.to_native()
                });
            if let Some(b) = best {
                let sym = t.chunks[b as usize].symbol_id.as_str();
                for c in first..first + n {
                    if t.chunks[c as usize].symbol_id.as_str() == sym {
                        out.insert(key(si, c));
                    }
                }
            }
        }
    }
    out
}

/// The standard-library index (built once with the product's indexer) and the web,
/// identifier and path queries over it.
fn stdlib_sets(
    args: &Args,
    enc: &kernels::Encoder,
) -> anyhow::Result<(Index, Vec<Query>, Vec<f32>)> {
    let dir = args.cache.join("stdlib");
    let idx = dir.join(&args.stdlib_index);
    if !idx.join("MANIFEST").exists() {
        bail!(
            "{} is missing: copy {} (minus test/, idlelib/, lib2to3/, tkinter/, turtledemo/, \
             distutils/, pydoc_data/, ensurepip/) to {}/src/python3.11 and run \
             `indexer build {}/src/python3.11 --out {} --repo python3.11`",
            idx.display(),
            args.stdlib.display(),
            dir.display(),
            dir.display(),
            idx.display()
        );
    }
    let index = Index::open(&idx)?;
    let mut qs = Vec::new();
    // Web questions.
    let mut files: Vec<PathBuf> = std::fs::read_dir(&args.webq)
        .with_context(|| args.webq.display().to_string())?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    let mut missing = 0usize;
    for f in &files {
        for (i, line) in std::fs::read_to_string(f)?.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let w: WebQ =
                serde_json::from_str(line).with_context(|| format!("{}:{}", f.display(), i + 1))?;
            let simple = w.name.rsplit('.').next().unwrap_or(&w.name);
            let main = symbol_at(&index, &w.path, w.line, Some(simple));
            if main.is_empty() {
                missing += 1;
                continue;
            }
            let mut item = main;
            for a in &w.also {
                item.extend(symbol_at(&index, &a.path, a.line, None));
            }
            qs.push(Query {
                style: "web",
                half: half_of("web", &w.q),
                text: w.q,
                items: vec![item],
                conversation: String::new(),
                date: String::new(),
            });
        }
    }
    if missing > 0 {
        eprintln!("web: {missing} questions name no function of the index (left out)");
    }
    // Identifier and path queries, sampled deterministically from the index.
    let t = index.segments[0].segment.table();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for ch in t.chunks.iter() {
        if !ch.symbol_id.is_empty() && ch.parent.to_native() == format::records::NO_PARENT {
            *by_name.entry(ch.name.to_string()).or_default() += 1;
        }
    }
    let mut cands: Vec<(String, u32)> = Vec::new();
    for (c, ch) in t.chunks.iter().enumerate() {
        let kind = ch.kind.as_str();
        let name = ch.name.as_str();
        if (kind == "function" || kind == "method")
            && name.len() >= 6
            && !name.starts_with("__")
            && by_name.get(name) == Some(&1)
        {
            // Half of the methods are asked as `Owner.method` (by a hash of the name, so the
            // set does not depend on chunk order).
            let qualified_form = blake3::hash(name.as_bytes()).as_bytes()[0] & 1 == 0;
            let q = if kind == "method" && qualified_form && !ch.qualified.is_empty() {
                let dotted = ch.qualified.as_str().replace(['#', '/'], ".");
                let parts: Vec<&str> = dotted.rsplit('.').take(2).collect();
                parts.into_iter().rev().collect::<Vec<_>>().join(".")
            } else {
                name.to_string()
            };
            cands.push((q, c as u32));
        }
    }
    cands.sort_by_key(|(q, _)| {
        blake3::hash(format!("ident|{q}").as_bytes())
            .to_hex()
            .to_string()
    });
    for (q, c) in cands.into_iter().take(200) {
        let ch = &t.chunks[c as usize];
        let f = &t.files[ch.file.to_native() as usize];
        let item = symbol_at(
            &index,
            f.path.as_str(),
            ch.start_line.to_native(),
            Some(&ch.name),
        );
        qs.push(Query {
            style: "identifier",
            half: half_of("identifier", &q),
            text: q,
            items: vec![item],
            conversation: String::new(),
            date: String::new(),
        });
    }
    let mut paths: Vec<(String, HashSet<u64>)> = t
        .files
        .iter()
        .filter(|f| f.chunk_count.to_native() >= 3 && f.path.as_str().contains('/'))
        .map(|f| {
            let first = f.first_chunk.to_native();
            (
                f.path.to_string(),
                (first..first + f.chunk_count.to_native())
                    .map(|c| key(0, c))
                    .collect(),
            )
        })
        .collect();
    paths.sort_by_key(|(p, _)| {
        blake3::hash(format!("path|{p}").as_bytes())
            .to_hex()
            .to_string()
    });
    for (p, item) in paths.into_iter().take(100) {
        qs.push(Query {
            style: "path",
            half: half_of("path", &p),
            text: p,
            items: vec![item],
            conversation: String::new(),
            date: String::new(),
        });
    }
    let texts: Vec<&str> = qs.iter().map(|q| q.text.as_str()).collect();
    let qv = query_vectors(enc, &dir, "queries", &texts)?;
    Ok((index, qs, qv))
}

/// A deterministic lower-case UUID for a turn id.
fn uuid_of(s: &str) -> String {
    let h = blake3::hash(s.as_bytes()).to_hex().to_string();
    format!(
        "{}-{}-7{}-8{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// An engine over the memory set, its questions, and memory id → item key.
type MemorySet = (Arc<engine::Engine>, Vec<Query>, HashMap<String, u64>);

/// The memory set: a memory index with one memory per turn, and an engine over it.
fn memory_set(args: &Args, enc: &kernels::Encoder) -> anyhow::Result<MemorySet> {
    let ds = match args.memory_set.as_str() {
        "a" => {
            let ds = convmem::generate(&args.memory_seed, args.conversations);
            println!("memory set a: {}\n", convmem::stats(&ds));
            ds
        }
        "b" => {
            let b = convmem_b::generate(&args.memory_seed, args.conversations);
            println!("memory set b: {}\n", convmem_b::stats(&b));
            b
        }
        other => bail!("--memory-set must be a or b, not `{other}`"),
    };
    let h = format::blake3_hex(serde_json::to_string(&ds)?.as_bytes());
    let dir = args.cache.join(format!(
        "memory-{}-{}-{}",
        args.memory_set,
        args.conversations,
        &h[..12]
    ));
    let idx = dir.join("index");
    let mut ids: HashMap<String, u64> = HashMap::new();
    let mut lines = String::new();
    let mut n = 0u64;
    for c in &ds.conversations {
        for s in &c.sessions {
            let day = memory::time::parse_utc(&s.date)
                .with_context(|| format!("session date {}", s.date))?;
            for (ti, t) in s.turns.iter().enumerate() {
                n += 1;
                ids.insert(uuid_of(&t.id), n);
                let at = day + 9 * 3_600_000 + ti as i64 * 60_000;
                lines.push_str(&serde_json::to_string(&json!({
                    "id": uuid_of(&t.id),
                    "text": format!("{}: {}", t.speaker, t.text),
                    "category": "conversation",
                    "scope": "user",
                    "entity": c.id,
                    "tags": [format!("session={}", s.id)],
                    "source": if t.speaker == "user" { "user" } else { "agent" },
                    "created_at": at,
                    "updated_at": at,
                }))?);
                lines.push('\n');
            }
        }
    }
    if !idx.join("MANIFEST").exists() {
        std::fs::create_dir_all(&dir)?;
        let dump = dir.join("memories.jsonl");
        std::fs::write(&dump, &lines)?;
        let t = Instant::now();
        let r = indexer::memories::ingest(&dump, &idx, enc)?;
        eprintln!(
            "memory set: {} memories ingested in {:.1}s",
            r.read,
            t.elapsed().as_secs_f64()
        );
    }
    let engine = Arc::new(engine::Engine::open(
        &idx,
        &kernels::resolve_model_dir(args.model.clone()),
    )?);
    let mut qs = Vec::new();
    let turn_key: HashMap<&str, u64> = ds
        .conversations
        .iter()
        .flat_map(|c| c.sessions.iter())
        .flat_map(|s| s.turns.iter())
        .map(|t| (t.id.as_str(), ids[&uuid_of(&t.id)]))
        .collect();
    for q in &ds.questions {
        let items: Vec<HashSet<u64>> = q
            .evidence
            .iter()
            .map(|e| turn_key.get(e.as_str()).map(|&k| HashSet::from([k])))
            .collect::<Option<Vec<_>>>()
            .with_context(|| format!("question {} names an unknown turn", q.id))?;
        qs.push(Query {
            style: style_of_kind(&q.kind),
            half: half_of("memory", &q.text),
            text: q.text.clone(),
            items,
            conversation: q.conversation.clone(),
            date: q.date.clone(),
        });
    }
    Ok((engine, qs, ids))
}

/// A symbol's header: path ▸ owner ▸ signature ▸ first doc sentence.
fn header_text(path: &str, qualified: &str, text: &str) -> String {
    let mut lines = text.lines().skip_while(|l| l.trim_start().starts_with('@'));
    let mut sig = String::new();
    for l in lines.by_ref().take(4) {
        sig.push_str(l.trim());
        sig.push(' ');
        let t = l.trim_end();
        if t.ends_with(':') || t.ends_with('{') {
            break;
        }
    }
    let rest: String = lines.take(12).collect::<Vec<_>>().join("\n");
    let r = rest.trim_start();
    let mut doc = String::new();
    for q in ["\"\"\"", "'''", "r\"\"\""] {
        if let Some(body) = r.strip_prefix(q) {
            let body = body.split(q.trim_start_matches('r')).next().unwrap_or("");
            let para = body.split("\n\n").next().unwrap_or("");
            let flat = para.split_whitespace().collect::<Vec<_>>().join(" ");
            doc = match flat.find(". ") {
                Some(i) => flat[..=i].to_string(),
                None => flat,
            };
            break;
        }
    }
    let owner = qualified.rsplit_once('.').map(|(o, _)| o).unwrap_or("");
    format!("{path} ▸ {owner} ▸ {} ▸ {doc}", sig.trim())
}

/// The header experiment over the standard-library queries (see `--header-sim`).
fn header_sim(
    enc: &kernels::Encoder,
    dir: &Path,
    index: &Index,
    qs: &[Query],
    qv: &[f32],
    keep: &dyn Fn(&Query) -> bool,
) -> anyhow::Result<()> {
    let dim = enc.dim();
    let seg = &index.segments[0].segment;
    let t = seg.table();
    let heads: Vec<u32> = (0..t.chunks.len() as u32)
        .filter(|&c| {
            let ch = &t.chunks[c as usize];
            matches!(ch.kind.as_str(), "function" | "method" | "class")
        })
        .collect();
    let texts: Vec<String> = heads
        .iter()
        .map(|&c| {
            let ch = &t.chunks[c as usize];
            let f = &t.files[ch.file.to_native() as usize];
            Ok(header_text(
                f.path.as_str(),
                ch.qualified.as_str(),
                seg.chunk_text(c)?,
            ))
        })
        .collect::<anyhow::Result<_>>()?;
    for x in texts.iter().take(3) {
        eprintln!("header: {x}");
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let hv = query_vectors(enc, dir, "headers", &refs)?;
    let head_pos: HashMap<u32, usize> = heads.iter().enumerate().map(|(j, &c)| (c, j)).collect();
    let mut rows: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for (i, q) in qs.iter().enumerate() {
        if !keep(q) || q.style == "docstring" {
            continue;
        }
        let v = &qv[i * dim..(i + 1) * dim];
        let body = seg.search_vectors(v, 100, format::vectors::DEFAULT_NPROBE, None, None)?;
        let mut best: HashMap<u32, f32> = body.iter().map(|&(c, s)| (c, s)).collect();
        let mut hs: Vec<(u32, f32)> = heads
            .iter()
            .enumerate()
            .map(|(j, &c)| (c, format::vectors::dot(&hv[j * dim..(j + 1) * dim], v)))
            .collect();
        hs.sort_by(|a, b| b.1.total_cmp(&a.1));
        hs.truncate(100);
        let header_only: Vec<(usize, u32, f32)> = hs.iter().map(|&(c, s)| (0, c, s)).collect();
        for &(c, s) in &hs {
            let e = best.entry(c).or_insert(s);
            *e = e.max(s);
        }
        let mut mx: Vec<(usize, u32, f32)> = best.into_iter().map(|(c, s)| (0, c, s)).collect();
        mx.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.1.cmp(&b.1)));
        mx.truncate(100);
        let bl: Vec<(usize, u32, f32)> = body.iter().map(|&(c, s)| (0, c, s)).collect();
        // Mean of header and body vectors (one vector per chunk, normalised).
        let bodyv = seg.vectors();
        let mut mean: Vec<(usize, u32, f32)> = (0..t.chunks.len() as u32)
            .map(|c| {
                let b = &bodyv[c as usize * dim..(c as usize + 1) * dim];
                let s = match head_pos.get(&c) {
                    Some(&j) => {
                        let h = &hv[j * dim..(j + 1) * dim];
                        let m: Vec<f32> = b.iter().zip(h).map(|(x, y)| x + y).collect();
                        let n = m.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-9);
                        format::vectors::dot(&m, v) / n
                    }
                    None => format::vectors::dot(b, v),
                };
                (0, c, s)
            })
            .collect();
        mean.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.1.cmp(&b.1)));
        mean.truncate(100);
        let lex: Vec<(usize, u32, f32)> = seg
            .search_bm25(&q.text, 100, None, None)
            .into_iter()
            .map(|(c, s)| (0, c, s))
            .collect();
        let rr = |l: &[(usize, u32, f32)]| -> f64 {
            l.iter()
                .take(10)
                .position(|&(s, c, _)| q.items.iter().any(|it| it.contains(&key(s, c))))
                .map_or(0.0, |p| 1.0 / (p + 1) as f64)
        };
        let mut put = |name: &str, x: f64| {
            rows.entry((q.style.to_string(), name.to_string()))
                .or_default()
                .push(x)
        };
        put("vector body", rr(&bl));
        put("vector header only", rr(&header_only));
        put("vector max(body, header)", rr(&mx));
        put("vector mean(body, header)", rr(&mean));
        for a in [0.5f32, 0.6, 0.7, 0.8] {
            for (nm, vl) in [("body", &bl), ("max", &mx), ("mean", &mean)] {
                let o = SearchOptions {
                    weights: Some((a, 1.0 - a)),
                    limit: 10,
                    ..SearchOptions::default()
                };
                let (f, _) = code::search::fuse(vl, &lex, &q.text, &o);
                let l: Vec<(usize, u32, f32)> =
                    f.into_iter().map(|((s, c), x)| (s, c, x.0)).collect();
                put(&format!("fused α={a} {nm}"), rr(&l));
            }
        }
    }
    println!("\n### Header experiment (MRR@10, no name tier or collapse)\n\n| style | ranking | n | MRR@10 |\n|---|---|---:|---:|");
    for ((s, n), v) in &rows {
        println!("| {s} | {n} | {} | {:.3} |", v.len(), Scores::mean(v));
    }
    Ok(())
}

fn style_of_kind(kind: &str) -> &'static str {
    match kind {
        "single" => "memory/single",
        "multi" => "memory/multi",
        "temporal" => "memory/temporal",
        "update" => "memory/update",
        _ => "memory/other",
    }
}

/// A configuration: a label and the search options it sets.
#[derive(Clone)]
struct Config {
    label: String,
    mode: Mode,
    weights: Option<(f32, f32)>,
    expand: bool,
    adapt: code::search::Adapt,
    nprobe: Option<usize>,
}

fn configs(args: &Args) -> anyhow::Result<Vec<Config>> {
    let mut adapt = code::search::Adapt::default();
    if args.old_fusion {
        adapt.code_search = adapt.code_prose;
        adapt.code_peak_gain = 0.0;
    }
    if let Some(g) = args.peak_gain {
        adapt.code_peak_gain = g;
    }
    let base = Config {
        label: String::new(),
        mode: Mode::Hybrid,
        weights: None,
        expand: !args.no_expand,
        adapt,
        nprobe: args.nprobe,
    };
    let mut out = vec![
        Config {
            label: "vector".into(),
            mode: Mode::Vector,
            ..base.clone()
        },
        Config {
            label: "lexical".into(),
            mode: Mode::Lexical,
            ..base.clone()
        },
        Config {
            label: "hybrid (default)".into(),
            ..base.clone()
        },
    ];
    if let Some(w) = &args.weights {
        for pair in w.split(';').filter(|s| !s.trim().is_empty()) {
            let (v, l) = pair
                .split_once(',')
                .with_context(|| format!("weights `{pair}`: expected v,l"))?;
            let (v, l): (f32, f32) = (v.trim().parse()?, l.trim().parse()?);
            out.push(Config {
                label: format!("hybrid w=({v}, {l})"),
                weights: Some((v, l)),
                ..base.clone()
            });
        }
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn run_code(
    index: &Index,
    qs: &[Query],
    qv: &[f32],
    dim: usize,
    cfgs: &[Config],
    out: &mut BTreeMap<(String, String), Scores>,
    keep: &dyn Fn(&Query) -> bool,
    dump: &mut Vec<serde_json::Value>,
    decision_us: &mut Vec<f64>,
) -> anyhow::Result<()> {
    match cfgs.first().and_then(|c| c.nprobe) {
        Some(n) => println!("code index: nprobe {n} (--nprobe)"),
        None => println!(
            "code index: nprobe {} (the search's default for it)",
            code::search::default_nprobe(index)?
        ),
    }
    for (i, q) in qs.iter().enumerate() {
        if !keep(q) {
            continue;
        }
        let v = &qv[i * dim..(i + 1) * dim];
        let mut rrs = serde_json::Map::new();
        let mut sig = serde_json::Value::Null;
        for c in cfgs {
            let o = SearchOptions {
                mode: c.mode,
                weights: c.weights,
                limit: 10,
                expand: c.expand,
                adapt: c.adapt,
                nprobe: c.nprobe,
                ..SearchOptions::default()
            };
            let (hits, tm) = search(index, &q.text, Some(v), &o)?;
            if c.mode == Mode::Hybrid && c.weights.is_none() {
                if let Some(ch) = &tm.choice {
                    sig = json!({"signals": ch.signals, "alpha": ch.alpha_vector});
                }
            }
            let t: Vec<HashSet<u64>> = hits
                .iter()
                .map(|h| {
                    // A collapsed result stands for every chunk of its symbol.
                    let tab = index.segments[h.segment].segment.table();
                    let mut s = HashSet::from([key(h.segment, h.chunk)]);
                    if !h.symbol_id.is_empty() {
                        let f = &tab.files[tab.chunks[h.chunk as usize].file.to_native() as usize];
                        let first = f.first_chunk.to_native();
                        for c in first..first + f.chunk_count.to_native() {
                            if tab.chunks[c as usize].symbol_id.as_str() == h.symbol_id {
                                s.insert(key(h.segment, c));
                            }
                        }
                    }
                    s
                })
                .collect();
            let sc = out
                .entry((q.style.to_string(), c.label.clone()))
                .or_default();
            sc.add(&t, &q.items);
            rrs.insert(c.label.clone(), json!(sc.rr.last()));
        }
        dump.push(json!({"style": q.style, "half": q.half, "q": q.text, "fusion": sig, "rr": rrs}));
        // The fusion decision alone (signals + choice) on this query's two candidate lists.
        let seg = &index.segments[0].segment;
        let vl: Vec<(usize, u32, f32)> = seg
            .search_vectors(v, 100, format::vectors::DEFAULT_NPROBE, None, None)?
            .into_iter()
            .map(|(c, x)| (0, c, x))
            .collect();
        let ll: Vec<(usize, u32, f32)> = seg
            .search_bm25(&q.text, 100, None, None)
            .into_iter()
            .map(|(c, x)| (0, c, x))
            .collect();
        let t = Instant::now();
        let sg = code::search::signals(&vl, &ll, &q.text);
        let ch = code::search::choose_alpha(
            &sg,
            code::search::Corpus::Code,
            &code::search::Adapt::default(),
        );
        let us = t.elapsed().as_secs_f64() * 1e6;
        std::hint::black_box(ch);
        decision_us.push(us);
    }
    Ok(())
}

/// The memory levers one at a time, through `memory::search::search` (the tool's library call,
/// without its confidence re-ranking): (label, session weights, relative dates on, peak gain).
fn memory_levers(
    engine: &Arc<engine::Engine>,
    qs: &[Query],
    ids: &HashMap<String, u64>,
    out: &mut BTreeMap<(String, String), Scores>,
    keep: &dyn Fn(&Query) -> bool,
    session: Option<memory::search::SessionWeights>,
) -> anyhow::Result<()> {
    use memory::search::{Boosts, MemFilter, MemKey, SessionWeights, SESSION_WEIGHTS};
    let off = memory::search::NO_SESSION_CONTEXT;
    let sessw = session.unwrap_or(SESSION_WEIGHTS);
    let levers: [(&str, SessionWeights, bool, f32); 6] = [
        (
            "lever: none (fusion ½, no session, no dates)",
            off,
            false,
            0.0,
        ),
        ("lever: peak-adaptive fusion only", off, false, 0.15),
        ("lever: session context only", sessw, false, 0.0),
        ("lever: relative dates only", off, true, 0.0),
        ("lever: all defaults (library)", off, true, 0.15),
        ("lever: all + session context", sessw, true, 0.15),
    ];
    let snap = engine.snapshot();
    for q in qs {
        if !keep(q) {
            continue;
        }
        let (qv, _) = engine
            .embed_query(&q.text)
            .map_err(|e| anyhow::anyhow!("embed: {e}"))?;
        let now = memory::time::parse_utc(&q.date).context("question date")?;
        for (label, sw, dates, gain) in levers {
            let f = MemFilter {
                entity: Some(q.conversation.clone()),
                ..MemFilter::default()
            };
            let b = Boosts {
                entity: None,
                category: None,
                tags: vec![],
                half_life_days: memory::search::DEFAULT_HALF_LIFE_DAYS,
                recency_weight: memory::search::DEFAULT_RECENCY_WEIGHT,
                now_ms: now,
                when: if dates {
                    memory::when::window(&q.text, now).map(|w| (w.start, w.end))
                } else {
                    None
                },
                sessions: sw,
            };
            let adapt = code::search::Adapt {
                memory_peak_gain: gain,
                ..Default::default()
            };
            let o = SearchOptions {
                limit: 10,
                adapt,
                ..SearchOptions::default()
            };
            let (hits, _) = memory::search::search(&snap.memory, &q.text, Some(&qv), &f, &b, &o)?;
            let t: Vec<HashSet<u64>> = hits
                .iter()
                .filter_map(|h| {
                    let id = match &h.key {
                        MemKey::Delta(e) => e.record.id.clone(),
                        MemKey::Segment(si, c) => snap.memory.index.memory[*si]
                            .segment
                            .memories()?
                            .memories
                            .get(*c as usize)?
                            .id
                            .to_string(),
                    };
                    ids.get(&id).map(|&k| HashSet::from([k]))
                })
                .collect();
            out.entry(("memory (all)".to_string(), label.to_string()))
                .or_default()
                .add(&t, &q.items);
            out.entry((q.style.to_string(), label.to_string()))
                .or_default()
                .add(&t, &q.items);
        }
    }
    Ok(())
}

fn run_memory(
    engine: &Arc<engine::Engine>,
    qs: &[Query],
    ids: &HashMap<String, u64>,
    cfgs: &[Config],
    out: &mut BTreeMap<(String, String), Scores>,
    keep: &dyn Fn(&Query) -> bool,
    dump: &mut Vec<serde_json::Value>,
) -> anyhow::Result<()> {
    for q in qs {
        if !keep(q) {
            continue;
        }
        let mut rrs = serde_json::Map::new();
        let mut fusion = serde_json::Value::Null;
        for c in cfgs {
            let mut a = json!({
                "query": q.text,
                "limit": 10,
                "mode": match c.mode { Mode::Vector => "vector", Mode::Lexical => "lexical", Mode::Hybrid => "hybrid" },
                "entity": q.conversation,
                "as_of": q.date,
                "relation_detail": "none",
                "debug": true,
            });
            if let Some((v, l)) = c.weights {
                a["weights"] = json!([v, l]);
            }
            let ans = engine::catalog::call(engine, "search_memory", a)
                .map_err(|e| anyhow::anyhow!("search_memory: {e}"))?;
            let t: Vec<HashSet<u64>> = ans["results"]
                .as_array()
                .map(|r| {
                    r.iter()
                        .filter_map(|m| m["id"].as_str().and_then(|id| ids.get(id)))
                        .map(|&k| HashSet::from([k]))
                        .collect()
                })
                .unwrap_or_default();
            out.entry((q.style.to_string(), c.label.clone()))
                .or_default()
                .add(&t, &q.items);
            // Every memory style also counts in the `memory` total.
            out.entry(("memory (all)".to_string(), c.label.clone()))
                .or_default()
                .add(&t, &q.items);
            let sc = out
                .entry((q.style.to_string(), c.label.clone()))
                .or_default();
            rrs.insert(
                c.label.clone(),
                json!({"rr": sc.rr.last(), "r5": sc.r5.last(), "r10": sc.r10.last()}),
            );
            if c.mode == Mode::Hybrid && c.weights.is_none() {
                fusion = ans["debug"]["fusion"].clone();
            }
        }
        dump.push(
            json!({"style": q.style, "half": q.half, "q": q.text, "fusion": fusion, "rr": rrs}),
        );
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    format::vectors::set_faiss_threads(1);
    let mdir = kernels::resolve_model_dir(args.model.clone());
    let enc = kernels::Encoder::load(&mdir, kernels::DeviceChoice::Cpu)
        .with_context(|| format!("load model {}", mdir.display()))?;
    let dim = enc.dim();
    let want = |s: &str| {
        args.styles.as_deref().is_none_or(|w| {
            let s = s.split('/').next().unwrap_or(s);
            w.split(',').any(|x| x.trim() == s)
        })
    };
    let split = args.split.clone();
    let keep = move |q: &Query| match split.as_str() {
        "tune" => q.half == 0,
        "holdout" => q.half == 1,
        _ => true,
    };
    if !["all", "tune", "holdout"].contains(&args.split.as_str()) {
        bail!("--split must be all, tune or holdout");
    }
    let cfgs = configs(&args)?;
    let mut scores: BTreeMap<(String, String), Scores> = BTreeMap::new();
    let mut dump: Vec<serde_json::Value> = Vec::new();
    let mut decision_us: Vec<f64> = Vec::new();
    let t0 = Instant::now();
    if want("docstring") {
        let (index, qs, qv) = docstring_set(&args)?;
        run_code(
            &index,
            &qs,
            &qv,
            dim,
            &cfgs,
            &mut scores,
            &keep,
            &mut dump,
            &mut decision_us,
        )?;
    }
    if want("web") || want("identifier") || want("path") {
        let (index, qs, qv) = stdlib_sets(&args, &enc)?;
        let keep_wanted = |q: &Query| want(q.style) && keep(q);
        run_code(
            &index,
            &qs,
            &qv,
            dim,
            &cfgs,
            &mut scores,
            &keep_wanted,
            &mut dump,
            &mut decision_us,
        )?;
        if args.header_sim {
            header_sim(
                &enc,
                &args.cache.join("stdlib"),
                &index,
                &qs,
                &qv,
                &keep_wanted,
            )?;
        }
    }
    if want("memory") {
        let (engine, qs, ids) = memory_set(&args, &enc)?;
        run_memory(&engine, &qs, &ids, &cfgs, &mut scores, &keep, &mut dump)?;
        if args.levers {
            let sw = match &args.session {
                Some(x) => {
                    let (a, b) = x.split_once(',').context("--session s,n")?;
                    Some(memory::search::SessionWeights {
                        session: a.trim().parse()?,
                        neighbour: b.trim().parse()?,
                    })
                }
                None => None,
            };
            memory_levers(&engine, &qs, &ids, &mut scores, &keep, sw)?;
        }
    }
    eprintln!("evaluated in {:.1}s", t0.elapsed().as_secs_f64());
    if !decision_us.is_empty() {
        decision_us.sort_by(f64::total_cmp);
        let at = |p: f64| {
            decision_us[((p * decision_us.len() as f64) as usize).min(decision_us.len() - 1)]
        };
        println!(
            "fusion decision (signals + choice, lists of 100): p50 {:.1} µs, p99 {:.1} µs over {} code queries\n",
            at(0.5),
            at(0.99),
            decision_us.len()
        );
    }
    if let Some(p) = &args.dump {
        let lines: Vec<String> = dump.iter().map(|v| v.to_string()).collect();
        std::fs::write(p, lines.join("\n") + "\n")?;
    }
    report(&args, &cfgs, &scores)
}

fn report(
    args: &Args,
    cfgs: &[Config],
    scores: &BTreeMap<(String, String), Scores>,
) -> anyhow::Result<()> {
    let styles: Vec<String> = scores
        .keys()
        .map(|(s, _)| s.clone())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    println!(
        "## Retrieval quality per query style (split: {})\n\n| style | n | configuration | MRR@10 | R@1 | R@5 | R@10 |\n|---|---:|---|---:|---:|---:|---:|",
        args.split
    );
    let mut js = Vec::new();
    let mut labels: Vec<String> = cfgs.iter().map(|c| c.label.clone()).collect();
    for (_, l) in scores.keys() {
        if !labels.contains(l) {
            labels.push(l.clone());
        }
    }
    for s in &styles {
        for label in &labels {
            let Some(sc) = scores.get(&(s.clone(), label.clone())) else {
                continue;
            };
            let m = |v: &[f64]| Scores::mean(v);
            println!(
                "| {s} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
                sc.rr.len(),
                label,
                m(&sc.rr),
                m(&sc.r1),
                m(&sc.r5),
                m(&sc.r10)
            );
            js.push(json!({"style": s, "config": label, "n": sc.rr.len(),
                "mrr10": m(&sc.rr), "r1": m(&sc.r1), "r5": m(&sc.r5), "r10": m(&sc.r10)}));
        }
    }
    println!(
        "\n### Default hybrid against the best single mode (paired bootstrap, {} resamples, 95% interval)\n\n| style | best single (MRR@10) | Δ MRR@10 [95%] | Δ R@10 [95%] | verdict |\n|---|---|---|---|---|",
        args.bootstrap
    );
    for s in &styles {
        let get = |l: &str| scores.get(&(s.clone(), l.to_string()));
        let (Some(v), Some(l), Some(h)) = (get("vector"), get("lexical"), get("hybrid (default)"))
        else {
            continue;
        };
        let (bn, b) = if Scores::mean(&v.rr) >= Scores::mean(&l.rr) {
            ("vector", v)
        } else {
            ("lexical", l)
        };
        let seed = u64::from_le_bytes(blake3::hash(s.as_bytes()).as_bytes()[..8].try_into()?);
        let (d, lo, hi) = bootstrap(&h.rr, &b.rr, args.bootstrap, seed);
        let (d10, lo10, hi10) = bootstrap(&h.r10, &b.r10, args.bootstrap, seed ^ 1);
        let verdict = if lo > 0.0 {
            "default wins"
        } else if hi < 0.0 {
            "default loses"
        } else if d >= 0.0 {
            "default ≥ (within the interval)"
        } else {
            "default < (within the interval)"
        };
        println!(
            "| {s} | {bn} ({:.3}) | {d:+.3} [{lo:+.3}, {hi:+.3}] | {d10:+.3} [{lo10:+.3}, {hi10:+.3}] | {verdict} |",
            Scores::mean(&b.rr)
        );
    }
    if let Some(p) = &args.json {
        std::fs::write(
            p,
            serde_json::to_vec_pretty(&json!({"split": args.split, "rows": js}))?,
        )?;
    }
    Ok(())
}
