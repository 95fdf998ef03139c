//! Search latency and vector recall on large synthetic segments.
//!
//! The generator writes one segment of N chunks through `SegmentBuilder` (so BM25 postings and
//! the IVF-SQ8 index are built exactly as in production): vectors are either uniformly random
//! unit vectors (the worst case for IVF recall) or a mixture of Gaussians around 2,000 random
//! centres (closer to real embeddings, which cluster); chunk texts are drawn from a vocabulary
//! of identifiers harvested from real source files (the cargo registry cache), sampled with
//! their empirical, Zipf-like frequencies.
//!
//! Then, single-threaded (FAISS/OpenMP at one thread), in a fresh process: p50/p99 latency of
//! `queryd::search` for vector-only, BM25-only and hybrid with the query vector given, recall@10
//! of the vector index against `exact_search` at several nprobe values, build time, segment size
//! and the process RSS after opening the index and after the queries.
//!
//! Segments are cached under `.cache/latency/`. Run:
//! `cargo run --release -p cix-benches --bin latency -- [--sizes 100000,1000000] [--dists random,clustered]`

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use code::search::{search, Mode, SearchOptions, CANDIDATE_DEPTH};
use format::manifest::{IndexManifest, SegmentEntry};
use format::records::{ChunkRecord, FileRecord, NO_PARENT};
use format::segment::rerank_depth;
use format::vectors::{exact_search, set_faiss_threads, DEFAULT_NPROBE};
use format::{Index, SegmentBuilder};

const DIM: usize = 384;
const MODEL: &str = "synthetic-384";

#[derive(Parser, Clone)]
struct Args {
    /// Segment sizes (chunks).
    #[arg(long, value_delimiter = ',', default_value = "100000,1000000")]
    sizes: Vec<usize>,
    /// Vector distributions: random, clustered.
    #[arg(long, value_delimiter = ',', default_value = "random,clustered")]
    dists: Vec<String>,
    /// Timed queries per mode.
    #[arg(long, default_value_t = 1000)]
    queries: usize,
    /// Queries used for recall (exact search costs ~60 ms per query at 1M).
    #[arg(long, default_value_t = 300)]
    recall_queries: usize,
    #[arg(long, value_delimiter = ',', default_value = "4,8,16,32,64")]
    nprobes: Vec<usize>,
    /// Segments the N chunks are split into (one 1M-chunk segment with 120-token texts needed
    /// more than 20 GB to write).
    #[arg(long, default_value_t = 1)]
    segments: usize,
    /// Mean tokens per chunk text.
    #[arg(long, default_value_t = 120)]
    tokens: usize,
    /// Gaussian mixture centres for `clustered`.
    #[arg(long, default_value_t = 2000)]
    centres: usize,
    /// Noise scale of `clustered` (cosine to the centre ≈ 1/√(1+s²)).
    #[arg(long, default_value_t = 0.8)]
    spread: f32,
    #[arg(long, default_value = ".cache/latency")]
    cache: PathBuf,
    /// Internal: measure one cached index in this process.
    #[arg(long, hide = true)]
    measure: Option<PathBuf>,
    #[arg(long, hide = true)]
    dist: Option<String>,
    /// Internal, for profiling: with --measure, run only BM25 (k=50) on the first segment this
    /// many times over the query set.
    #[arg(long, hide = true)]
    bm25_rounds: Option<usize>,
    /// Internal, for profiling: with --measure, only the SQ8 against one-bit table.
    #[arg(long, hide = true)]
    codes_only: bool,
    /// With --measure: only open the index and run the first hybrid query (cold start), then
    /// print the open line and stop.
    #[arg(long, hide = true)]
    open_only: bool,
    /// With --open-only: open the IVF maps after opening the index, as queryd does beside
    /// its model load (`Index::open_vector_maps`), and time them apart from the first query.
    #[arg(long, hide = true)]
    premap: bool,
    /// With --measure: open the index this many times (each dropped before the next) and
    /// print the min / median / max of `Index::open` alone, then stop: for A/B runs of the
    /// open path with the pages already cached.
    #[arg(long, hide = true)]
    open_repeat: Option<usize>,
    /// With --measure: only the per-mode latency table (no recall, no exact scan, no
    /// per-segment breakdown), for quick comparisons and profiling.
    #[arg(long, hide = true)]
    modes_only: bool,
    /// With --measure, for profiling: print the N slowest BM25-only queries with each term's
    /// document frequency over the index.
    #[arg(long, hide = true)]
    slowest: Option<usize>,
    /// Write the built segments' texts and raw vectors around the page cache, as `indexer
    /// build --direct-io` does (the cache directory's name does not record it).
    #[arg(long)]
    direct_io: bool,
    /// With --measure: leave the index's pages to fault in as queries touch them, instead of
    /// populating them after the first query as queryd does (`Index::populate`).
    #[arg(long)]
    no_populate: bool,
    /// With --modes-only, for profiling: run only the modes whose row name starts with this
    /// (`vector`, `BM25`, `hybrid`).
    #[arg(long, hide = true)]
    only: Option<String>,
}

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: usize) -> usize {
        (self.unit() * n as f64) as usize % n.max(1)
    }
    fn gauss(&mut self) -> f32 {
        let u1 = self.unit().max(1e-300);
        let u2 = self.unit();
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
    fn unit_vec(&mut self, out: &mut [f32]) {
        for x in out.iter_mut() {
            *x = self.gauss();
        }
        normalise(out);
    }
}

fn normalise(v: &mut [f32]) {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= n);
}

/// Identifier vocabulary with empirical frequencies, from real Rust sources.
struct Vocab {
    words: Vec<String>,
    cum: Vec<f64>,
}

impl Vocab {
    fn harvest(max_bytes: usize) -> anyhow::Result<Vocab> {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        let mut files = Vec::new();
        collect(&home.join(".cargo/registry/src"), &mut files, 200_000);
        files.sort();
        // Spread the sample over many crates: every k-th file.
        let mut counts: HashMap<String, u64> = HashMap::new();
        let mut read = 0usize;
        let step = (files.len() / 4000).max(1);
        for p in files.iter().step_by(step) {
            let Ok(s) = std::fs::read_to_string(p) else {
                continue;
            };
            read += s.len();
            let mut cur = String::new();
            for ch in s.chars().chain(std::iter::once(' ')) {
                if ch.is_ascii_alphanumeric() || ch == '_' {
                    cur.push(ch);
                } else {
                    if cur.len() >= 2 && !cur.as_bytes()[0].is_ascii_digit() {
                        *counts.entry(std::mem::take(&mut cur)).or_default() += 1;
                    }
                    cur.clear();
                }
            }
            if read >= max_bytes {
                break;
            }
        }
        let mut v: Vec<(String, u64)> = counts.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v.truncate(60_000);
        anyhow::ensure!(v.len() > 1000, "too few identifiers harvested");
        let total: f64 = v.iter().map(|x| x.1 as f64).sum();
        let mut acc = 0.0;
        let mut cum = Vec::with_capacity(v.len());
        for (_, c) in &v {
            acc += *c as f64 / total;
            cum.push(acc);
        }
        eprintln!(
            "vocabulary: {} identifiers from {:.1} MB of Rust source (top: {})",
            v.len(),
            read as f64 / 1e6,
            v.iter()
                .take(8)
                .map(|x| x.0.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        );
        Ok(Vocab {
            words: v.into_iter().map(|x| x.0).collect(),
            cum,
        })
    }
    fn sample(&self, r: &mut Rng) -> &str {
        let u = r.unit();
        let i = self
            .cum
            .partition_point(|c| *c < u)
            .min(self.words.len() - 1);
        &self.words[i]
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>, cap: usize) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if out.len() >= cap {
            return;
        }
        let p = e.path();
        match e.file_type() {
            Ok(t) if t.is_dir() => collect(&p, out, cap),
            Ok(t) if t.is_file() && p.extension().is_some_and(|x| x == "rs") => out.push(p),
            _ => {}
        }
    }
}

/// Code-looking text of about `tokens` identifiers.
fn chunk_text(v: &Vocab, r: &mut Rng, tokens: usize) -> String {
    let n = tokens / 2 + r.below(tokens + 1);
    let mut s = String::with_capacity(n * 8);
    let mut on_line = 0;
    for i in 0..n {
        s.push_str(v.sample(r));
        on_line += 1;
        if on_line >= 4 + r.below(6) {
            s.push_str(if i % 3 == 0 { ");\n    " } else { ";\n    " });
            on_line = 0;
        } else {
            s.push_str(match r.below(5) {
                0 => "(",
                1 => ".",
                2 => ", ",
                3 => "::",
                _ => " ",
            });
        }
    }
    s
}

fn dir_size(d: &Path) -> u64 {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                n += dir_size(&p);
            } else if let Ok(m) = e.metadata() {
                n += m.len();
            }
        }
    }
    n
}

/// Vectors for `dist`; the same seed gives the same rows (queries use another seed).
fn gen_vectors(dist: &str, n: usize, args: &Args, seed: u64, centres_seed: u64) -> Vec<f32> {
    let mut r = Rng(seed);
    let mut out = vec![0f32; n * DIM];
    if dist == "random" {
        for row in out.chunks_exact_mut(DIM) {
            r.unit_vec(row);
        }
    } else {
        let mut cr = Rng(centres_seed);
        let mut centres = vec![0f32; args.centres * DIM];
        for c in centres.chunks_exact_mut(DIM) {
            cr.unit_vec(c);
        }
        let s = args.spread / (DIM as f32).sqrt();
        for row in out.chunks_exact_mut(DIM) {
            let c = r.below(args.centres);
            for (j, x) in row.iter_mut().enumerate() {
                *x = centres[c * DIM + j] + s * r.gauss();
            }
            normalise(row);
        }
    }
    out
}

fn build(dir: &Path, n: usize, dist: &str, vocab: &Vocab, args: &Args) -> anyhow::Result<()> {
    let nseg = args.segments.max(1);
    std::fs::create_dir_all(dir)?;
    let mut m = IndexManifest::empty(MODEL, DIM as u32);
    m.generation = 1;
    let (mut gen_s, mut write_s, mut text_bytes) = (0.0, 0.0, 0usize);
    let mut kinds = Vec::new();
    for si in 0..nseg {
        let (lo, hi) = (si * n / nseg, (si + 1) * n / nseg);
        let sn = hi - lo;
        let t = Instant::now();
        let mut r = Rng(0xC0DE ^ n as u64 ^ ((si as u64) << 40));
        let mut b = SegmentBuilder::default();
        let per_file = 25usize;
        let nfiles = sn.div_ceil(per_file);
        let mut paths: Vec<String> = (0..nfiles)
            .map(|i| {
                format!(
                    "src/{}/{}_{si}_{i:07}.rs",
                    vocab.sample(&mut r),
                    vocab.sample(&mut r)
                )
            })
            .collect();
        paths.sort();
        for (fi, path) in paths.iter().enumerate() {
            let first = (fi * per_file) as u32;
            let count = per_file.min(sn - fi * per_file) as u32;
            b.files.push(FileRecord {
                repo: "synthetic".into(),
                path: path.clone(),
                language: "rust".into(),
                content_hash: *blake3::hash(path.as_bytes()).as_bytes(),
                size: 0,
                first_chunk: first,
                chunk_count: count,
                imports: Vec::new(),
            });
            for c in 0..count {
                let name = vocab.sample(&mut r).to_string();
                let text = format!(
                    "fn {name}() {{\n    {}\n}}",
                    chunk_text(vocab, &mut r, args.tokens)
                );
                text_bytes += text.len();
                b.chunks.push(ChunkRecord {
                    file: fi as u32,
                    kind: "function".into(),
                    name: name.clone(),
                    qualified: name.clone(),
                    symbol_id: format!("rust synthetic {path}/{name}()."),
                    start_line: 1 + c * 10,
                    end_line: 10 + c * 10,
                    start_byte: 0,
                    end_byte: text.len() as u32,
                    parent: NO_PARENT,
                    content_hash: *blake3::hash(text.as_bytes()).as_bytes(),
                    text,
                });
            }
        }
        b.vectors = gen_vectors(
            dist,
            sn,
            args,
            0xBEEF ^ n as u64 ^ ((si as u64) << 40),
            0xCE17,
        );
        gen_s += t.elapsed().as_secs_f64();
        if args.direct_io {
            b.bulk_cache = format::fsio::PageCache::Bypass;
        }
        let t = Instant::now();
        let (id, meta) = b.write(dir, MODEL, DIM)?;
        write_s += t.elapsed().as_secs_f64();
        kinds.push(meta.vector_index.clone());
        m.segments.push(SegmentEntry {
            id,
            chunks: sn as u32,
            tombstones: None,
        });
        eprintln!(
            "  segment {si}: {sn} chunks, peak RSS so far {} MB",
            hwm_kib() / 1024
        );
    }
    m.commit(dir)?;
    let info = serde_json::json!({
        "chunks": n, "dist": dist, "generate_s": gen_s, "write_s": write_s,
        "text_bytes": text_bytes, "vector_index": kinds.join(" + "),
        "build_peak_rss_mb": hwm_kib() / 1024, "segments": nseg,
    });
    std::fs::write(
        dir.join("bench-build.json"),
        serde_json::to_vec_pretty(&info)?,
    )?;
    Ok(())
}

fn hwm_kib() -> u64 {
    status_kib("VmHWM:")
}

fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

fn status_kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1e3
}

/// Measures one cached index (run in a fresh process so RSS reflects only the open index).
fn measure(dir: &Path, dist: &str, args: &Args) -> anyhow::Result<()> {
    set_faiss_threads(1);
    if let Some(n) = args.open_repeat.filter(|&n| n > 0) {
        let mut ms = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            drop(Index::open(dir)?);
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ms.sort_by(f64::total_cmp);
        println!(
            "Index::open x{n}: min {:.1} ms, median {:.1} ms, max {:.1} ms",
            ms[0],
            ms[n / 2],
            ms[n - 1]
        );
        return Ok(());
    }
    let rss0 = rss_kib();
    let t = Instant::now();
    let index = Index::open(dir)?;
    let open_ms = t.elapsed().as_secs_f64() * 1e3;
    let rss_open = rss_kib();
    let n = index.live_chunks() as usize;
    let segs: Vec<&format::Segment> = index.segments.iter().map(|l| &*l.segment).collect();
    // An index kept by `pipeline --keep` (real code, stand-in vectors) has no build record.
    let info: serde_json::Value = match std::fs::read(dir.join("bench-build.json")) {
        Ok(b) => serde_json::from_slice(&b)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::json!({}),
        Err(e) => return Err(e.into()),
    };

    // Queries: vectors from the same distribution (new rows), texts of 2-4 words from chunks.
    let nq = args.queries;
    let qv = gen_vectors(dist, nq, args, 0x5EED ^ n as u64, 0xCE17);
    let mut r = Rng(0xFACE);
    let mut qtexts = Vec::with_capacity(nq);
    for _ in 0..nq {
        let s = segs[r.below(segs.len())];
        let c = r.below(s.table().chunks.len()) as u32;
        let toks = format::text::tokenize(s.chunk_text(c)?);
        let words: Vec<&String> = toks.iter().filter(|w| w.len() >= 3).collect();
        let k = 2 + r.below(3);
        let mut q = Vec::new();
        for _ in 0..k {
            if !words.is_empty() {
                q.push(words[r.below(words.len())].as_str());
            }
        }
        qtexts.push(q.join(" "));
    }

    if args.codes_only {
        let mapped: Vec<Option<&format::ivf_map::MappedIvf>> =
            segs.iter().map(|s| s.ivf_map()).collect::<Result<_, _>>()?;
        let nr = args.recall_queries.min(nq);
        let exact = exact_top10(&segs, &qv, nr);
        return codes_table(&segs, &mapped, &qv, nq, &exact, &args.nprobes);
    }
    if let Some(rounds) = args.bm25_rounds {
        let t = Instant::now();
        for _ in 0..rounds {
            for q in &qtexts {
                std::hint::black_box(segs[0].search_bm25(q, 50, None, None));
            }
        }
        println!(
            "BM25 only: {:.3} ms per query",
            t.elapsed().as_secs_f64() * 1e3 / (rounds * nq) as f64
        );
        return Ok(());
    }

    let mut premap_ms = None;
    if args.premap {
        let t = Instant::now();
        index.open_vector_maps();
        premap_ms = Some(t.elapsed().as_secs_f64() * 1e3);
    }
    // Cold first hybrid query (opens the mapped IVF: headers, centroids; lists paged in).
    let t0 = Instant::now();
    let o = SearchOptions {
        mode: Mode::Hybrid,
        ..SearchOptions::default()
    };
    let (_, tm0) = search(&index, &qtexts[0], Some(&qv[..DIM]), &o)?;
    let cold_ms = t0.elapsed().as_secs_f64() * 1e3;
    let rss_ivf = rss_kib();
    if args.open_only {
        eprintln!("first query phases: {tm0:?}");
        if let Some(ms) = premap_ms {
            println!(
                "open {open_ms:.1} ms, IVF maps {ms:.1} ms, then the first hybrid query {cold_ms:.1} ms"
            );
        }
        println!(
            "open {open_ms:.1} ms, open + first hybrid query {:.1} ms; RSS after open {:.0} MB, after the query {:.0} MB",
            open_ms + cold_ms,
            rss_open as f64 / 1024.0,
            rss_ivf as f64 / 1024.0
        );
        return Ok(());
    }

    println!(
        "\n### {n} chunks in {} segment(s), {dist} vectors\n\nbuild (peak RSS {} MB): generate {:.1}s, segment write (BM25 + rkyv + IVF train/add + fsync) {:.1}s; {}; segment {:.1} MB (raw vectors + text {:.1} MB, ratio {:.2})",
        segs.len(),
        info["build_peak_rss_mb"].as_u64().unwrap_or(0),
        info["generate_s"].as_f64().unwrap_or(0.0),
        info["write_s"].as_f64().unwrap_or(0.0),
        segs.iter().map(|s| s.meta().vector_index.clone()).collect::<Vec<_>>().join(" + "),
        dir_size(dir) as f64 / 1e6,
        (n * DIM * 4) as f64 / 1e6 + info["text_bytes"].as_f64().unwrap_or(0.0) / 1e6,
        dir_size(dir) as f64
            / ((n * DIM * 4) as f64 + info["text_bytes"].as_f64().unwrap_or(0.0)),
    );
    println!(
        "open {open_ms:.1} ms; RSS: process start {:.0} MB, after open {:.0} MB, after the first hybrid query (IVF mapped, open + first query {:.1} ms) {:.0} MB",
        rss0 as f64 / 1024.0,
        rss_open as f64 / 1024.0,
        open_ms + cold_ms,
        rss_ivf as f64 / 1024.0
    );

    // What queryd does beside its first queries (`Index::populate` on a background thread):
    // every page of the segments' files entered into the page tables, so the timed queries
    // do not pay a page fault for each row, record or text they touch first.
    if args.no_populate {
        println!("pages not populated (--no-populate): queries fault them in as they go");
    } else {
        let t = Instant::now();
        let bytes = index.populate();
        println!(
            "then populated {:.1} MB of maps in {:.1} ms (queryd: on a background thread), RSS {:.0} MB",
            bytes as f64 / 1e6,
            t.elapsed().as_secs_f64() * 1e3,
            rss_kib() as f64 / 1024.0
        );
    }

    // Latency per mode, code::search, limit 10, one thread.
    // One thread: segments searched in turn (rayon pool of 1), FAISS at one thread. The last
    // row runs the two rankings side by side on every core, and the segments in parallel
    // when there are several (`code::search::pairs_rankings`, `fans_out`).
    let cores = std::thread::available_parallelism().map_or(1, |x| x.get());
    let one = rayon::ThreadPoolBuilder::new().num_threads(1).build()?;
    let all = rayon::ThreadPoolBuilder::new().num_threads(cores).build()?;
    println!("\n| mode (code::search, limit 10, 1 thread) | p50 ms | p99 ms | mean ms | mean filter / vector / BM25 / fusion ms |\n|---|---:|---:|---:|---:|");
    let parallel_row = format!("hybrid, rankings and segments in parallel on {cores} threads");
    for (name, mode, pool) in [
        ("vector only (query vector given)", Mode::Vector, &one),
        ("BM25 only", Mode::Lexical, &one),
        ("hybrid (query vector given)", Mode::Hybrid, &one),
        (parallel_row.as_str(), Mode::Hybrid, &all),
    ] {
        if args
            .only
            .as_ref()
            .is_some_and(|p| !name.starts_with(p.as_str()))
        {
            continue;
        }
        let o = SearchOptions {
            mode,
            ..SearchOptions::default()
        };
        let search = |q: &str, v: Option<&[f32]>, o: &SearchOptions| {
            pool.install(|| search(&index, q, v, o))
        };
        for i in 0..20.min(nq) {
            search(&qtexts[i], Some(&qv[i * DIM..(i + 1) * DIM]), &o)?;
        }
        let mut ds = Vec::with_capacity(nq);
        // Mean ms per phase: filter, vector, BM25, fusion (fusion, name tier, collapse, hits).
        let mut phases = [0f64; 4];
        for i in 0..nq {
            let t = Instant::now();
            let (h, tm) = search(&qtexts[i], Some(&qv[i * DIM..(i + 1) * DIM]), &o)?;
            ds.push(t.elapsed());
            for (p, d) in phases
                .iter_mut()
                .zip([tm.filter, tm.vector, tm.bm25, tm.fusion])
            {
                *p += d.as_secs_f64() * 1e3 / nq as f64;
            }
            std::hint::black_box(h);
        }
        if let (Some(worst), Mode::Lexical) = (args.slowest, mode) {
            let mut idx: Vec<usize> = (0..nq).collect();
            idx.sort_by(|&a, &b| ds[b].cmp(&ds[a]));
            for &i in idx.iter().take(worst) {
                let terms: Vec<String> = format::text::tokenize(&qtexts[i])
                    .into_iter()
                    .map(|t| {
                        let df: u32 = segs.iter().map(|s| s.postings().df(&t)).sum();
                        format!("{t}:{df}")
                    })
                    .collect();
                eprintln!(
                    "slow {:.3} ms: {}",
                    ds[i].as_secs_f64() * 1e3,
                    terms.join(" ")
                );
            }
        }
        let mean = ds.iter().map(|d| d.as_secs_f64()).sum::<f64>() / ds.len() as f64 * 1e3;
        println!(
            "| {name} | {:.3} | {:.3} | {mean:.3} | {:.3} / {:.3} / {:.3} / {:.3} |",
            pct(&mut ds, 0.5),
            pct(&mut ds, 0.99),
            phases[0],
            phases[1],
            phases[2],
            phases[3]
        );
    }
    if args.modes_only {
        return Ok(());
    }
    let rss_q = rss_kib();

    // Where the vector time goes: FAISS candidate generation alone (first segment), the full
    // `Segment::search_vectors` (candidates + exact re-rank on the mapped rows), and BM25 alone
    // on the first segment.
    let s0 = segs[0];
    if let Some(ivf) = s0.ivf()? {
        let mut dc = Vec::new();
        let mut dsv = Vec::new();
        let mut db = Vec::new();
        let mut dx = Vec::new();
        // At the candidate depth search uses whatever the limit (it was (limit·4).max(50), 50
        // at limit 10).
        let mut dsv_deep = Vec::new();
        let mut db_deep = Vec::new();
        let mut same = 0usize;
        for i in 0..nq {
            let q = &qv[i * DIM..(i + 1) * DIM];
            let t = Instant::now();
            std::hint::black_box(ivf.candidates(q, 200, DEFAULT_NPROBE)?);
            dc.push(t.elapsed());
            let t = Instant::now();
            std::hint::black_box(s0.search_vectors(q, 50, DEFAULT_NPROBE, None, None)?);
            dsv.push(t.elapsed());
            let t = Instant::now();
            std::hint::black_box(s0.search_vectors(
                q,
                CANDIDATE_DEPTH,
                DEFAULT_NPROBE,
                None,
                None,
            )?);
            dsv_deep.push(t.elapsed());
            let t = Instant::now();
            let fast = s0.search_bm25(&qtexts[i], 50, None, None);
            db.push(t.elapsed());
            let t = Instant::now();
            std::hint::black_box(s0.search_bm25(&qtexts[i], CANDIDATE_DEPTH, None, None));
            db_deep.push(t.elapsed());
            // Peer: the same BM25 scoring every posting (no MaxScore skipping).
            let t = Instant::now();
            let slow = s0.postings().search_exhaustive(&qtexts[i], 50, None, None);
            dx.push(t.elapsed());
            same += usize::from(fast == slow);
        }
        println!(
            "\nphase breakdown on one segment of {} chunks ({}): FAISS candidates (200, nprobe {DEFAULT_NPROBE}) p50 {:.3} ms p99 {:.3} ms; Segment::search_vectors(k=50) p50 {:.3} ms p99 {:.3} ms; Segment::search_bm25(k=50) p50 {:.3} ms p99 {:.3} ms; exhaustive BM25 peer p50 {:.3} ms p99 {:.3} ms (MaxScore {:.1}x faster at p50, identical results on {same}/{nq} queries)",
            s0.meta().chunk_count,
            s0.meta().vector_index,
            pct(&mut dc, 0.5),
            pct(&mut dc, 0.99),
            pct(&mut dsv, 0.5),
            pct(&mut dsv, 0.99),
            pct(&mut db, 0.5),
            pct(&mut db, 0.99),
            pct(&mut dx, 0.5),
            pct(&mut dx, 0.99),
            pct(&mut dx, 0.5) / pct(&mut db, 0.5)
        );
        println!(
            "candidate depth {CANDIDATE_DEPTH} (code::search's, any limit ≤ {CANDIDATE_DEPTH}) against 50: Segment::search_vectors p50 {:.3} ms p99 {:.3} ms; Segment::search_bm25 p50 {:.3} ms p99 {:.3} ms",
            pct(&mut dsv_deep, 0.5),
            pct(&mut dsv_deep, 0.99),
            pct(&mut db_deep, 0.5),
            pct(&mut db_deep, 0.99),
        );
    }

    // Recall@10 vs exact, per nprobe; vector search latency per nprobe.
    let nr = args.recall_queries.min(nq);
    let t = Instant::now();
    let exact = exact_top10(&segs, &qv, nr);
    let exact_ms = t.elapsed().as_secs_f64() * 1e3 / nr as f64;
    println!(
        "\n| nprobe | recall@10 vs exact ({nr} queries) | vector-only code::search p50 ms | p99 ms |\n|---:|---:|---:|---:|"
    );
    // What a search that names no nprobe probes on this index.
    let default_np = code::search::default_nprobe(&index)?;
    let mut probes = args.nprobes.clone();
    if !probes.contains(&default_np) {
        probes.push(default_np);
    }
    probes.sort();
    for &np in &probes {
        let mut hit = 0usize;
        let mut ds = Vec::new();
        for i in 0..nq {
            let q = &qv[i * DIM..(i + 1) * DIM];
            let t = Instant::now();
            let o = SearchOptions {
                mode: Mode::Vector,
                nprobe: Some(np),
                ..SearchOptions::default()
            };
            let (res, _) = one.install(|| search(&index, "", Some(q), &o))?;
            ds.push(t.elapsed());
            if i < nr {
                hit += res
                    .iter()
                    .filter(|h| exact[i].contains(&(h.segment, h.chunk)))
                    .count();
            }
        }
        println!(
            "| {np}{} | {:.3} | {:.3} | {:.3} |",
            if np == default_np { " (default)" } else { "" },
            hit as f64 / (nr * 10) as f64,
            pct(&mut ds, 0.5),
            pct(&mut ds, 0.99)
        );
    }
    println!(
        "\nexact scan: {exact_ms:.1} ms per query; RSS after all queries {:.0} MB",
        rss_q.max(rss_kib()) as f64 / 1024.0
    );

    // The peer: raw FAISS on the same `ivf.faiss` files (loaded into its memory after a
    // checksum, as `Segment::ivf` does), nprobe per segment, top 10 per segment merged by its
    // approximate scores; beside it our mapped reader with the same per-segment lists
    // (`MappedIvf::search`, no re-rank) and with the lists planned across segments
    // (`plan_probes`), also without re-rank. Vector candidate generation only: no filters,
    // tombstones, re-ranking or fusion.
    let t = Instant::now();
    let faiss: Vec<&format::vectors::Ivf> = segs
        .iter()
        .filter_map(|s| s.ivf().transpose())
        .collect::<Result<_, _>>()?;
    let faiss_load_ms = t.elapsed().as_secs_f64() * 1e3;
    let mapped: Vec<Option<&format::ivf_map::MappedIvf>> =
        segs.iter().map(|s| s.ivf_map()).collect::<Result<_, _>>()?;
    if faiss.len() == segs.len() {
        println!(
            "\nraw FAISS beside the mapped reader (vector candidates only, top 10, 1 thread; FAISS load: checksum + read_index of {} file(s) {faiss_load_ms:.0} ms, RSS then {:.0} MB)\n\n| nprobe | FAISS recall@10 | FAISS p50 ms | p99 ms | mapped, same lists: recall@10 | p50 ms | p99 ms | mapped, planned lists: recall@10 | p50 ms | p99 ms |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            faiss.len(),
            rss_kib() as f64 / 1024.0
        );
        let merge = |lists: Vec<Vec<(u32, f32)>>| -> Vec<(usize, u32)> {
            let mut all: Vec<(usize, u32, f32)> = lists
                .into_iter()
                .enumerate()
                .flat_map(|(si, l)| l.into_iter().map(move |(c, s)| (si, c, s)))
                .collect();
            all.sort_by(|a, b| b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
            all.into_iter().take(10).map(|x| (x.0, x.1)).collect()
        };
        for &np in &probes {
            let (mut df, mut dm, mut dp) = (Vec::new(), Vec::new(), Vec::new());
            let (mut hf, mut hm, mut hp) = (0usize, 0usize, 0usize);
            for i in 0..nq {
                let q = &qv[i * DIM..(i + 1) * DIM];
                let t = Instant::now();
                let f = merge(
                    faiss
                        .iter()
                        .map(|x| x.search(q, 10, np))
                        .collect::<Result<_, _>>()?,
                );
                df.push(t.elapsed());
                let t = Instant::now();
                let m = merge(
                    mapped
                        .iter()
                        .flatten()
                        .map(|x| x.search(q, 10, np, None, None))
                        .collect::<Result<_, _>>()?,
                );
                dm.push(t.elapsed());
                let t = Instant::now();
                let plan = format::ivf_map::plan_probes(&mapped, q, Some(np));
                let p = merge(
                    mapped
                        .iter()
                        .zip(&plan)
                        .map(|(x, pl)| match x {
                            Some(x) => x.scan(q, pl, 10, None, None),
                            None => Ok(Vec::new()),
                        })
                        .collect::<Result<_, _>>()?,
                );
                dp.push(t.elapsed());
                if i < nr {
                    let hits =
                        |r: &[(usize, u32)]| r.iter().filter(|x| exact[i].contains(x)).count();
                    hf += hits(&f);
                    hm += hits(&m);
                    hp += hits(&p);
                }
            }
            let rc = |h: usize| h as f64 / (nr * 10) as f64;
            println!(
                "| {np} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                rc(hf),
                pct(&mut df, 0.5),
                pct(&mut df, 0.99),
                rc(hm),
                pct(&mut dm, 0.5),
                pct(&mut dm, 0.99),
                rc(hp),
                pct(&mut dp, 0.5),
                pct(&mut dp, 0.99),
            );
        }
    }
    codes_table(&segs, &mapped, &qv, nq, &exact, &probes)?;
    Ok(())
}

/// The exact top 10 (segment, chunk) over all segments for each of the first `nr` queries.
fn exact_top10(segs: &[&format::Segment], qv: &[f32], nr: usize) -> Vec<Vec<(usize, u32)>> {
    (0..nr)
        .map(|i| {
            let q = &qv[i * DIM..(i + 1) * DIM];
            let mut all: Vec<(usize, u32, f32)> = Vec::new();
            for (si, sg) in segs.iter().enumerate() {
                for (c, sc) in exact_search(sg.vectors(), DIM, q, 10, None, None) {
                    all.push((si, c, sc));
                }
            }
            all.sort_by(|a, b| b.2.total_cmp(&a.2));
            all.into_iter().take(10).map(|x| (x.0, x.1)).collect()
        })
        .collect()
}

/// Which codes choose the candidates: the same planned lists scanned through the SQ8 codes
/// of `ivf.faiss` and through the one-bit codes of `ivf.rbq`, each segment's best `fetch`
/// merged, the best `fetch` of the index re-ranked exactly on the raw rows (what
/// `code::search::vector_list` does), top 10 against exact search.
fn codes_table(
    segs: &[&format::Segment],
    mapped: &[Option<&format::ivf_map::MappedIvf>],
    qv: &[f32],
    nq: usize,
    exact: &[Vec<(usize, u32)>],
    probes: &[usize],
) -> anyhow::Result<()> {
    let rbq: Vec<Option<&format::rabitq::MappedRbq>> =
        segs.iter().map(|s| s.rbq()).collect::<Result<_, _>>()?;
    if rbq.iter().any(|r| r.is_none()) || mapped.iter().any(|m| m.is_none()) {
        println!(
            "
(no one-bit codes in every segment: SQ8 against one-bit not measured)"
        );
        return Ok(());
    }
    let nr = exact.len();
    println!(
        "
SQ8 against one-bit codes for the candidates (planned lists, 1 thread; candidates re-ranked exactly on the raw rows, top 10; {nr} queries for recall)\n\n| nprobe | codes | candidates re-ranked | recall@10 | p50 ms | p99 ms | mean lists / scan / re-rank ms |\n|---:|---|---:|---:|---:|---:|---:|"
    );
    for &np in probes {
        for (name, fetch) in [
            ("SQ8", rerank_depth(100)),
            ("one-bit", rerank_depth(100)),
            ("one-bit", rerank_depth(25)),
            ("one-bit", 2 * rerank_depth(100)),
        ] {
            let (mut ds, mut hit) = (Vec::new(), 0usize);
            // Mean ms: choosing the lists (centroid scores), scanning them, the exact re-rank.
            let mut phase = [0f64; 3];
            for i in 0..nq {
                let q = &qv[i * DIM..(i + 1) * DIM];
                let t = Instant::now();
                let plan = format::ivf_map::plan_probes(mapped, q, Some(np));
                phase[0] += t.elapsed().as_secs_f64();
                let mut all: Vec<(usize, u32, f32)> = Vec::new();
                for si in 0..segs.len() {
                    let c = if name == "SQ8" {
                        mapped[si].map(|m| m.scan(q, &plan[si], fetch, None, None))
                    } else {
                        rbq[si].map(|r| r.scan(q, &plan[si], fetch, None, None))
                    };
                    for (id, sc) in c.transpose()?.unwrap_or_default() {
                        all.push((si, id, sc));
                    }
                }
                all.sort_by(|a, b| b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
                all.truncate(fetch);
                phase[1] += t.elapsed().as_secs_f64();
                let mut top: Vec<(usize, u32, f32)> = all
                    .iter()
                    .filter_map(|&(si, c, _)| {
                        Some((si, c, format::vectors::dot(segs[si].vector(c)?, q)))
                    })
                    .collect();
                top.sort_by(|a, b| b.2.total_cmp(&a.2).then((a.0, a.1).cmp(&(b.0, b.1))));
                top.truncate(10);
                ds.push(t.elapsed());
                phase[2] += t.elapsed().as_secs_f64();
                if i < nr {
                    hit += top
                        .iter()
                        .filter(|x| exact[i].contains(&(x.0, x.1)))
                        .count();
                }
            }
            let ms = |x: f64| x * 1e3 / nq as f64;
            println!(
                "| {np} | {name} | {fetch} | {:.3} | {:.3} | {:.3} | {:.3} / {:.3} / {:.3} |",
                hit as f64 / (nr * 10) as f64,
                pct(&mut ds, 0.5),
                pct(&mut ds, 0.99),
                ms(phase[0]),
                ms(phase[1] - phase[0]),
                ms(phase[2] - phase[1]),
            );
        }
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    // As queryd does first: OpenBLAS's startup threads would spin beside the timed open.
    format::vectors::single_threaded_blas();
    let args = Args::parse();
    if let Some(d) = &args.measure {
        return measure(d, args.dist.as_deref().unwrap_or("random"), &args);
    }
    let mut vocab: Option<Vocab> = None;
    println!("## Search latency on synthetic segments\n");
    for &n in &args.sizes {
        for dist in &args.dists {
            anyhow::ensure!(
                dist == "random" || dist == "clustered",
                "unknown dist {dist}"
            );
            let tag = if dist == "clustered" {
                format!(
                    "n{n}-{dist}-c{}-s{}-t{}",
                    args.centres, args.spread, args.tokens
                )
            } else {
                format!("n{n}-{dist}-t{}", args.tokens)
            };
            let dir = args.cache.join(tag);
            if !dir.join("MANIFEST").exists() {
                if dir.exists() {
                    std::fs::remove_dir_all(&dir)?;
                }
                if vocab.is_none() {
                    vocab = Some(Vocab::harvest(40_000_000)?);
                }
                eprintln!("building {} ...", dir.display());
                set_faiss_threads(std::thread::available_parallelism().map_or(1, |x| x.get()));
                build(&dir, n, dist, vocab.as_ref().unwrap(), &args)?;
            }
            let exe = std::env::current_exe()?;
            let mut cmd = std::process::Command::new(exe);
            cmd.args(std::env::args().skip(1))
                .arg("--measure")
                .arg(&dir)
                .arg("--dist")
                .arg(dist);
            let st = cmd.status().context("measure process")?;
            anyhow::ensure!(st.success(), "measure failed for {}", dir.display());
        }
    }
    Ok(())
}
