//! Non-embedding indexing throughput: walk + read + tree-sitter chunking + graph resolution +
//! BM25 + segment write, in MB of source per second, with a stand-in embedder that hashes each
//! text into a pseudo-random unit vector (so the vector files and IVF training are realistic in
//! size without running the model).
//!
//! Each run reports its phase times and the process's peak RSS over the run (VmHWM, reset
//! before each run through `/proc/self/clear_refs`), under `--memory-budget` (default 1GiB).
//! `--synthetic N` first writes a synthetic Python repository of about N chunks (50 functions
//! per file, calls between them) and indexes it: the 1M-chunk bounded-memory check.
//!
//! Run: `cargo run --release -p cix-benches --bin pipeline -- <paths…> [--runs 3]
//! [--memory-budget 1GiB]` or `… --bin pipeline -- --synthetic 1000000 --runs 1`

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use engine::tools::calls::whole_word_lines;
use indexer::build::{self, BuildOptions, EmbedError, Embedder, HashEmbedder};
use indexer::progress::Progress;

#[derive(Parser)]
struct Args {
    /// Directories to index.
    #[arg(required_unless_present = "synthetic")]
    paths: Vec<PathBuf>,
    /// Write a synthetic repository of about this many chunks and index it (with `paths`).
    #[arg(long)]
    synthetic: Option<usize>,
    /// Memory budget of the build (`indexer build --memory-budget`).
    #[arg(long, default_value = "1GiB", value_parser = build::parse_budget)]
    memory_budget: u64,
    /// Write the texts and raw vectors around the page cache (`indexer build --direct-io`).
    #[arg(long)]
    direct_io: bool,
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Skip the peer (tree-sitter alone on the same files) before the runs.
    #[arg(long)]
    no_peer: bool,
    /// Vector dimension of the stand-in embedder.
    #[arg(long, default_value_t = 384)]
    dim: usize,
    /// Stand in for a GPU encoder as the CPU sees one: after hashing, each group of texts
    /// waits (sleeps, no CPU) as long as a device at this many tokens per second would take
    /// (tokens estimated as bytes / `--bytes-per-token`), and the IVF coarse centroids come
    /// "from the device" (the training sample's first rows, after a wait of
    /// `--device-kmeans-ms` per segment) so the segment writer runs no k-means: the CPU side of a
    /// GPU build.
    #[arg(long)]
    device_rate: Option<f64>,
    #[arg(long, default_value_t = 4.2)]
    bytes_per_token: f64,
    #[arg(long, default_value_t = 100)]
    device_kmeans_ms: u64,
    /// After each run, an incremental build of the same index with one new file added (a
    /// root of its own holding one Rust and one Python function): what a re-index after a
    /// small change costs on this tree, the comparison of every unchanged file's edges with
    /// the stored ones (`relink`) included. Then that file edited four times, unchanged
    /// files' facts read from the facts cache and (the peer) parsed, alternating.
    #[arg(long)]
    incremental: bool,
    /// After each run, on its index: the chunks the callers' text scan reads for this many
    /// function names (every k-th live function's), found through the postings
    /// (`CodeView::live_chunks_with_word`) against the peer, every live chunk's text, in the
    /// same process; the two must find the same whole-word occurrences (checked). One core.
    #[arg(long)]
    word_scan: Option<usize>,
    /// Keep the last run's index in this directory (it must not exist), for `latency
    /// --measure DIR`: search latency over real code text (the vectors are the stand-in's).
    #[arg(long)]
    keep: Option<PathBuf>,
}

#[global_allocator]
static GLOBAL: indexer::alloc::MiMalloc = indexer::alloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    // As `indexer` does: mimalloc for Rust's heap and tree-sitter's, no transparent huge pages,
    // freed pages returned promptly.
    let args = Args::parse();
    indexer::alloc::set_up_process();
    let hash = HashEmbedder { dim: args.dim };
    let device = args.device_rate.map(|rate| DeviceStandIn {
        hash: HashEmbedder { dim: args.dim },
        rate,
        bytes_per_token: args.bytes_per_token,
        kmeans: std::time::Duration::from_millis(args.device_kmeans_ms),
    });
    let emb: &dyn Embedder = match &device {
        Some(d) => {
            println!(
                "stand-in device: {} tokens/s at {} bytes per token, {} ms per segment's centroids",
                d.rate, d.bytes_per_token, args.device_kmeans_ms
            );
            d
        }
        None => &hash,
    };
    rayon::ThreadPoolBuilder::new().build_global().ok();
    println!(
        "threads: {}; memory budget {} bytes{}",
        rayon::current_num_threads(),
        args.memory_budget,
        if args.direct_io {
            "; texts and vectors written around the page cache"
        } else {
            ""
        }
    );
    let synthetic_dir = tempfile::tempdir().context("temp dir")?;
    let mut paths = args.paths.clone();
    if let Some(n) = args.synthetic {
        let t = Instant::now();
        let root = synthetic_dir.path().join("synthetic");
        let bytes = write_synthetic(&root, n)?;
        println!(
            "synthetic repository: {} functions, {bytes} bytes, written in {:.1}s",
            n,
            t.elapsed().as_secs_f64()
        );
        paths.push(root);
    }
    if !args.no_peer {
        tree_sitter_alone(&paths)?;
    }
    for run in 0..args.runs {
        let dir = tempfile::tempdir().context("temp dir")?;
        let mut opts = BuildOptions::new(paths.clone(), dir.path().join("index"));
        opts.memory_budget = args.memory_budget;
        if args.direct_io {
            opts.bulk_cache = format::fsio::PageCache::Bypass;
        }
        let base_rss = reset_peak_rss();
        let t = Instant::now();
        let r = build::build(&opts, emb, &Progress::silent())?;
        let peak = peak_rss();
        let total = t.elapsed().as_secs_f64();
        let mb = r.source_bytes as f64 / 1e6;
        let embed = r.time_of("embed").as_secs_f64();
        println!(
            "run {run}: {} files, {:.2} MB, {} chunks, {} edges; total {:.3}s = {:.1} MB/s; without stand-in embedding {:.3}s = {:.1} MB/s; [{}]",
            r.files_indexed,
            mb,
            r.chunks_written,
            r.edges.values().sum::<usize>(),
            total,
            mb / total,
            total - embed,
            mb / (total - embed),
            phases(&r)
        );
        println!(
            "  peak RSS {} MB (before the run {} MB); {} segments; {} files read again ({} chunked again, {:.1} MB spilled); {} calls held until resolved, {:.1} MB packed",
            peak / 1_000_000,
            base_rss / 1_000_000,
            r.segment_ids.len(),
            r.files_reread,
            r.files_rechunked,
            r.spilled_bytes as f64 / 1e6,
            r.calls_held,
            r.calls_held_bytes as f64 / 1e6
        );
        println!("  segments {}", r.segment_ids.join(","));
        let ins = indexer::inspect::inspect(&dir.path().join("index"))?;
        println!(
            "  segment size {} bytes; raw f32 vectors + text {} bytes; ratio {:.3}; vector index {}",
            ins.total_bytes,
            ins.raw_vector_and_text_bytes,
            ins.total_bytes as f64 / ins.raw_vector_and_text_bytes.max(1) as f64,
            ins.segments.iter().map(|s| s.vector_index.as_str()).collect::<Vec<_>>().join(",")
        );
        if args.incremental {
            let edit = tempfile::tempdir().context("temp dir")?;
            std::fs::write(
                edit.path().join("edit.rs"),
                "/// Added by the bench.\npub fn bench_edit() -> u32 {\n    7\n}\n",
            )?;
            std::fs::write(
                edit.path().join("edit.py"),
                "def bench_edit_py():\n    return 7\n",
            )?;
            let mut roots = paths.clone();
            roots.push(edit.path().to_path_buf());
            let mut inc = BuildOptions::new(roots, dir.path().join("index"));
            inc.memory_budget = args.memory_budget;
            let (r, secs, tail) = timed_build(&inc, emb)?;
            println!(
                "  incremental, one file added: {secs}; {} changed, {} unchanged, {} relinked; {} chunks written; {tail}",
                r.files_changed,
                r.files_unchanged,
                r.files_relinked,
                r.chunks_written,
            );
            // Then one file edited, twice each way, alternating: unchanged files' facts read
            // from the facts cache (the default), against every file parsed (the peer).
            for (k, reuse) in [false, true, false, true].into_iter().enumerate() {
                std::fs::write(
                    edit.path().join("edit.rs"),
                    format!(
                        "/// Edited by the bench.\npub fn bench_edit() -> u32 {{\n    {k}\n}}\n"
                    ),
                )?;
                inc.reuse_facts = reuse;
                let (r, secs, tail) = timed_build(&inc, emb)?;
                println!(
                    "  incremental, one file edited, {}: {secs}; {} changed, {} from the cache, {} relinked; cache written {}; {tail}",
                    if reuse { "facts cache" } else { "every file parsed" },
                    r.files_changed,
                    r.files_cached,
                    r.files_relinked,
                    r.facts_written.map_or("no".to_string(), |(n, b)| format!("{n} entries, {b} bytes")),
                );
            }
            // A cascade: a second Rust function, or type, of the name that the most files'
            // calls were resolved through by name alone (which makes each of those calls
            // ambiguous, so every such unchanged file is relinked), then removed again.
            if let Some((kind, name, files)) = most_called_by_name(&dir.path().join("index"))? {
                let decoy = if kind == "type" {
                    format!("pub struct {name};\n")
                } else {
                    format!("pub fn {name}() {{}}\n")
                };
                let base = "/// Edited by the bench.\npub fn bench_edit() -> u32 {\n    9\n}\n";
                inc.reuse_facts = true;
                for (step, text) in [
                    ("added", format!("{base}{decoy}")),
                    ("removed", base.to_string()),
                ] {
                    std::fs::write(edit.path().join("edit.rs"), text)?;
                    let (r, secs, tail) = timed_build(&inc, emb)?;
                    println!(
                        "  incremental, cascade: a second {kind} `{name}` (whose definitions {files} files call by name alone) {step}: {secs}; {} changed, {} relinked; {} chunks written, {} embedded; {tail}",
                        r.files_changed,
                        r.files_relinked,
                        r.chunks_written,
                        r.chunks_embedded,
                    );
                }
            }
        }
        if let Some(n) = args.word_scan {
            word_scan(&dir.path().join("index"), n)?;
        }
        if let Some(keep) = args.keep.as_ref().filter(|_| run + 1 == args.runs) {
            anyhow::ensure!(!keep.exists(), "{} exists", keep.display());
            copy_dir(&dir.path().join("index"), keep)?;
            println!("  index kept in {}", keep.display());
        }
    }
    Ok(())
}

/// `--word-scan`: per name, the function and method chunks holding it as a whole word, found
/// by reading every such live chunk's text (the peer: what the callers' text stage did) and
/// through the postings; p50 / p99 / mean of each and the ratio, on this thread alone.
fn word_scan(index: &std::path::Path, n: usize) -> anyhow::Result<()> {
    let v = code::view::CodeView::open(index)?;
    let functions: Vec<_> = v
        .live_chunks()
        .filter(|&c| matches!(v.chunk(c).kind.as_str(), "function" | "method"))
        .collect();
    let step = (functions.len() / n.max(1)).max(1);
    // Sampled through the index, each name once, in the order sampled.
    let mut seen = std::collections::HashSet::new();
    let names: Vec<String> = functions
        .iter()
        .step_by(step)
        .map(|&c| v.chunk(c).name.to_string())
        .filter(|s| !s.is_empty() && seen.insert(s.clone()))
        .take(n)
        .collect();
    if names.is_empty() {
        println!("  word scan: no function names in the index");
        return Ok(());
    }
    // What the callers' text stage reads: function and method chunks only.
    let callable = |c| matches!(v.chunk(c).kind.as_str(), "function" | "method");
    // Warm: every text read once, so both sides read from memory.
    let mut warm = 0usize;
    for c in v.live_chunks() {
        warm += v.text(c)?.len();
    }
    let (mut scan_ms, mut post_ms) = (Vec::new(), Vec::new());
    let (mut found, mut candidates) = (0usize, 0usize);
    for name in &names {
        let t = Instant::now();
        let mut a = Vec::new();
        for c in v.live_chunks().filter(|&c| callable(c)) {
            let text = v.text(c)?;
            if text.contains(name.as_str()) && !whole_word_lines(text, name).is_empty() {
                a.push(c);
            }
        }
        scan_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let t = Instant::now();
        let shortlist = v.live_chunks_with_word(name);
        let mut b = Vec::new();
        for &c in shortlist.iter().filter(|&&c| callable(c)) {
            let text = v.text(c)?;
            if text.contains(name.as_str()) && !whole_word_lines(text, name).is_empty() {
                b.push(c);
            }
        }
        post_ms.push(t.elapsed().as_secs_f64() * 1e3);
        anyhow::ensure!(
            a == b,
            "`{name}`: the postings found other chunks than the scan"
        );
        found += a.len();
        candidates += shortlist.len();
    }
    let stats = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
        (q(0.5), q(0.99), v.iter().sum::<f64>() / v.len() as f64)
    };
    let ((s50, s99, sm), (p50, p99, pm)) = (stats(&mut scan_ms), stats(&mut post_ms));
    println!(
        "  word scan over {} live chunks ({:.1} MB of text; {} functions and methods), {} names: every function's text p50 {s50:.3} ms, p99 {s99:.3} ms, mean {sm:.3} ms; through the postings p50 {p50:.3} ms, p99 {p99:.3} ms, mean {pm:.3} ms ({:.0}x at the mean); {} chunks hold the names, {} listed by the postings; the same chunks for every name",
        v.live_chunks().count(),
        warm as f64 / 1e6,
        functions.len(),
        names.len(),
        sm / pm,
        found,
        candidates
    );
    Ok(())
}

/// A build's phase times, summed per phase in the order they first ran.
/// One build of `opts`, timed: its report, its wall time (`1.234s`) and what every line about
/// an incremental build ends with (`peak RSS N MB (before M MB); [phases]`).
fn timed_build(
    opts: &BuildOptions,
    emb: &dyn Embedder,
) -> anyhow::Result<(build::BuildReport, String, String)> {
    let base_rss = reset_peak_rss();
    let t = Instant::now();
    let r = build::build(opts, emb, &Progress::silent())?;
    let (total, peak) = (t.elapsed().as_secs_f64(), peak_rss());
    let tail = format!(
        "peak RSS {} MB (before {} MB); [{}]",
        peak / 1_000_000,
        base_rss / 1_000_000,
        phases(&r)
    );
    Ok((r, format!("{total:.3}s"), tail))
}

fn phases(r: &build::BuildReport) -> String {
    (r.phase_times().iter())
        .map(|(k, d)| format!("{k} {:.3}s", d.as_secs_f64()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Of the live Rust functions and the types of live Rust methods, the one ("function" or
/// "type", name) whose definitions the most files call through edges resolved by name alone
/// (without [`EDGE_RESOLVED`]), with that file count: the name whose second definition (a
/// function of that name, or a struct of that name) makes a cascade edit as large as this tree
/// allows.
fn most_called_by_name(index: &std::path::Path) -> anyhow::Result<Option<(String, String, usize)>> {
    use std::collections::{HashMap, HashSet};

    use format::graph::Direction;
    use format::records::{EdgeKind, EDGE_RESOLVED};

    let ix = format::Index::open(index)?;
    let is_ident = |s: &str| {
        s.chars()
            .next()
            .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
            && s.chars().all(|c| c == '_' || c.is_ascii_alphanumeric())
    };
    // The targets: live Rust functions and methods, by segment and chunk, and by symbol id
    // (edges into another segment name their target by symbol id).
    let mut targets: Vec<Vec<(u32, (&str, &str))>> = Vec::new();
    let mut by_symbol: HashMap<&str, (&str, &str)> = HashMap::new();
    for s in &ix.segments {
        let t = s.segment.table();
        let mut here = Vec::new();
        for (c, r) in t.chunks.iter().enumerate() {
            // A method's calls found by name go through its type's name (`Type::m()` with the
            // type unique in the family); a function's through its own name (unique among the
            // family's free functions). The key is what a second definition would clash with.
            let key = match r.kind.as_str() {
                "function" => ("function", r.name.as_str()),
                "method" => {
                    let q = r.qualified.as_str();
                    let owner = q.rsplit_once("::").map_or("", |(o, _)| o);
                    let owner = owner.rsplit("::").next().unwrap_or("");
                    ("type", owner.split('<').next().unwrap_or(""))
                }
                _ => continue,
            };
            if s.tombstones.contains(c as u32)
                || !is_ident(key.1)
                || t.files
                    .get(r.file.to_native() as usize)
                    .map(|f| f.language.as_str())
                    != Some("rust")
            {
                continue;
            }
            here.push((c as u32, key));
            if !r.symbol_id.as_str().is_empty() {
                by_symbol.insert(r.symbol_id.as_str(), key);
            }
        }
        targets.push(here);
    }
    let mut callers: HashMap<(&str, &str), HashSet<(usize, u32)>> = HashMap::new();
    for (si, s) in ix.segments.iter().enumerate() {
        let t = s.segment.table();
        let n = t.chunks.len() as u32;
        // The file of a live source node (a chunk, or a file node after the chunks).
        let file_of = |src: u32| {
            if src < n {
                (!s.tombstones.contains(src)).then(|| t.chunks[src as usize].file.to_native())
            } else {
                Some(src - n)
            }
        };
        let g = s.segment.graph();
        for &(c, key) in &targets[si] {
            for (src, flags) in g.neighbors(c, EdgeKind::Calls, Direction::In) {
                if flags & EDGE_RESOLVED == 0 {
                    if let Some(f) = file_of(src) {
                        callers.entry(key).or_default().insert((si, f));
                    }
                }
            }
        }
        for e in g.external.iter() {
            if e.kind != EdgeKind::Calls as u8 || e.flags & EDGE_RESOLVED != 0 {
                continue;
            }
            if let (Some(&key), Some(f)) =
                (by_symbol.get(e.dst.as_str()), file_of(e.src.to_native()))
            {
                callers.entry(key).or_default().insert((si, f));
            }
        }
    }
    Ok(callers
        .into_iter()
        .map(|((kind, name), files)| (files.len(), kind, name))
        .max()
        .map(|(files, kind, name)| (kind.to_string(), name.to_string(), files)))
}

/// Copies the index directory `from` to `to` (files and subdirectories; the build leaves no
/// links in it).
fn copy_dir(from: &std::path::Path, to: &std::path::Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("creating {}", to.display()))?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else {
            std::fs::copy(e.path(), &dest)
                .with_context(|| format!("copying {}", e.path().display()))?;
        }
    }
    Ok(())
}

/// The peer in the same run: every candidate file read and parsed by tree-sitter alone (no
/// chunking, graph, BM25 or writing), in parallel on the same pool. Tree-sitter's parse is the
/// floor of the build's parse phase, so this is the ceiling of the pipeline's MB/s here.
fn tree_sitter_alone(paths: &[PathBuf]) -> anyhow::Result<()> {
    use rayon::prelude::*;
    let opts = BuildOptions::new(paths.to_vec(), PathBuf::new());
    let mut cands = Vec::new();
    for root in paths {
        let repo = indexer::walk::repo_name(root);
        let w = indexer::walk::walk(root, &repo, opts.max_file_bytes, opts.symlinks, opts.rules);
        cands.extend(w.candidates);
    }
    let texts: Vec<_> = cands
        .par_iter()
        .filter_map(|c| {
            indexer::walk::read_source(c)
                .ok()
                .map(|(t, _)| (c.language, t))
        })
        .collect();
    let bytes: usize = texts.iter().map(|(_, t)| t.len()).sum();
    let t = Instant::now();
    let parsed = texts
        .par_iter()
        .filter(|(lang, text)| indexer::chunk::parse_only(*lang, text))
        .count();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "tree-sitter alone: {parsed} of {} files, {:.2} MB parsed in {secs:.3}s = {:.1} MB/s",
        texts.len(),
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / secs
    );
    Ok(())
}

/// A `/proc/self/status` field in bytes (0 where there is none).
fn status_kb(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
        * 1024
}

/// Resets the peak RSS to the current RSS (Linux `clear_refs` 5); returns the current RSS.
fn reset_peak_rss() -> u64 {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    status_kb("VmRSS:")
}

fn peak_rss() -> u64 {
    status_kb("VmHWM:")
}

/// Writes about `n` Python functions, 50 per file in directories of 100 files: each has a
/// docstring and body drawn from a fixed vocabulary and calls a function of the same file and
/// one of another file it imports (so the graph has CALLS and IMPORTS edges). Deterministic.
/// Returns the bytes written.
fn write_synthetic(root: &std::path::Path, n: usize) -> anyhow::Result<u64> {
    use std::fmt::Write as _;
    const WORDS: [&str; 32] = [
        "parse", "index", "token", "buffer", "record", "segment", "vector", "cache", "query",
        "merge", "score", "graph", "node", "edge", "budget", "commit", "stream", "batch", "window",
        "limit", "retry", "lock", "flush", "encode", "decode", "filter", "rank", "chunk", "path",
        "span", "hash", "table",
    ];
    const PER_FILE: usize = 50;
    let files = n.div_ceil(PER_FILE);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut bytes = 0u64;
    for f in 0..files {
        let dir = root.join(format!("pkg{:04}", f / 100));
        if f % 100 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        let other = (f * 7919 + 13) % files;
        let mut src = String::new();
        writeln!(src, "\"\"\"Synthetic module {f}.\"\"\"")?;
        writeln!(
            src,
            "from pkg{:04}.mod{other:06} import f{other}_0\n",
            other / 100
        )?;
        let count = PER_FILE.min(n - f * PER_FILE);
        for i in 0..count {
            let w = |r: u64| WORDS[(r % WORDS.len() as u64) as usize];
            let (a, b, c, d) = (w(next()), w(next()), w(next()), w(next()));
            let callee = if i == 0 {
                format!("f{other}_0")
            } else {
                format!("f{f}_{}", next() as usize % i)
            };
            writeln!(
                src,
                "def f{f}_{i}({a}_value, {b}_limit=None):\n    \"\"\"{a} the {b} of each {c} before the {d} step.\"\"\"\n    total = {callee}({a}_value) + {}\n    if {b}_limit is not None and total > {b}_limit:\n        return {c}_{d}(total)\n    return total\n",
                next() % 1000
            )?;
        }
        let p = dir.join(format!("mod{f:06}.py"));
        std::fs::write(&p, &src)?;
        bytes += src.len() as u64;
    }
    Ok(bytes)
}

/// [`HashEmbedder`] plus the wall time a GPU encoder would take (`--device-rate`).
struct DeviceStandIn {
    hash: HashEmbedder,
    rate: f64,
    bytes_per_token: f64,
    kmeans: std::time::Duration,
}

impl Embedder for DeviceStandIn {
    fn model_id(&self) -> &str {
        self.hash.model_id()
    }
    fn dim(&self) -> usize {
        self.hash.dim
    }
    fn on_device(&self) -> bool {
        true
    }
    fn embed(&self, texts: &[&str]) -> Result<(Vec<f32>, usize), EmbedError> {
        let (v, _) = self.hash.embed(texts)?;
        let bytes: usize = texts.iter().map(|t| t.len()).sum();
        let tokens = (bytes as f64 / self.bytes_per_token).ceil();
        std::thread::sleep(std::time::Duration::from_secs_f64(tokens / self.rate));
        Ok((v, tokens as usize))
    }
    fn ivf_centroids(
        &self,
        sample: &[f32],
        dim: usize,
        k: usize,
    ) -> Option<Result<Vec<f32>, EmbedError>> {
        std::thread::sleep(self.kmeans);
        sample.get(..k * dim).map(|c| Ok(c.to_vec()))
    }
}
