//! A real large-corpus benchmark, end to end through the binaries a user runs.
//!
//! 1. **Build** (skipped when the index exists, unless `--rebuild`): `indexer build CORPUS --out
//!    INDEX --json` with the real model; the report's phase times and the build process's peak
//!    RSS (its `VmHWM`, polled while it runs).
//! 2. **Queries**, fixed by the index (same index, same queries): identifier queries (names of
//!    functions and methods, every k-th of those with at least 5 characters) and natural-language
//!    queries (the first sentence of a doc comment: Rust `///`, Python docstrings, `/** */`
//!    blocks; 4 to 16 words), `--queries` of each style.
//! 3. **MCP latency**: a warm `queryd` on stdio (`benches/src/mcp_stdio.rs`), `search_code` with
//!    `limit` 10 for every query, twice: the first call embeds the query on the CPU, the second
//!    finds it in the query-vector cache (checked: `embed_cached`), so the two rows are the
//!    latency with and without query embedding, round trip as the client sees it.
//! 4. **Recall@10** of the vector search against exact search, per style: the queries embedded
//!    in this process, `code::search` in vector mode against an exact scan of every live row.
//!
//! Run: `cargo run --release -p cix-benches --bin corpus -- --corpus DIR [--index DIR]
//! [--queries 200] [--rebuild] [--memory-budget 1GiB]` (binaries from `target/release`, model
//! from `--model` or `$CIX_MODEL_DIR`).

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Parser;
use code::search::vector_list;
use format::vectors::exact_search;
use format::Index;
use serde_json::{json, Value};

#[path = "../mcp_stdio.rs"]
mod mcp_stdio;
use mcp_stdio::StdioClient;

#[derive(Parser)]
struct Args {
    /// Directory of source code to index.
    #[arg(long)]
    corpus: PathBuf,
    /// Index directory (default: .cache/corpus/<corpus directory name>).
    #[arg(long)]
    index: Option<PathBuf>,
    /// Build again even when the index exists.
    #[arg(long)]
    rebuild: bool,
    /// Model directory (default: $CIX_MODEL_DIR, else models/all-MiniLM-L6-v2).
    #[arg(long)]
    model: Option<PathBuf>,
    /// `indexer build --device`.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// `indexer build --memory-budget`.
    #[arg(long, default_value = "1GiB")]
    memory_budget: String,
    /// `indexer build --embed-group` (texts per embedding call; default: the indexer's, by
    /// device).
    #[arg(long)]
    embed_group: Option<u32>,
    /// Queries of each style.
    #[arg(long, default_value_t = 200)]
    queries: usize,
    /// nprobe values for the recall table (the default nprobe is always included).
    #[arg(long, value_delimiter = ',', default_value = "8,16,32,64,128")]
    nprobes: Vec<usize>,
    /// Directory holding the `indexer` and `queryd` binaries.
    #[arg(long, default_value = "target/release")]
    bin: PathBuf,
}

fn hwm_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Runs the build, returning its JSON report and peak RSS in MB.
fn build(a: &Args, index: &Path, model: &Path) -> anyhow::Result<(Value, f64)> {
    if index.exists() {
        std::fs::remove_dir_all(index)?;
    }
    let mut cmd = Command::new(a.bin.join("indexer"));
    cmd.arg("build");
    if let Some(g) = a.embed_group {
        cmd.arg("--embed-group").arg(g.to_string());
    }
    let mut child = cmd
        .arg(&a.corpus)
        .arg("--out")
        .arg(index)
        .arg("--model")
        .arg(model)
        .arg("--device")
        .arg(&a.device)
        .arg("--memory-budget")
        .arg(&a.memory_budget)
        .arg("--json")
        .arg("--quiet")
        .stdout(Stdio::piped())
        .spawn()
        .context("spawn indexer (build it: cargo build --release)")?;
    let pid = child.id();
    let mut peak = 0u64;
    let out = child.stdout.take().context("piped stdout")?;
    let reader = std::thread::spawn(move || -> std::io::Result<String> {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut BufReader::new(out), &mut s)?;
        Ok(s)
    });
    loop {
        if let Some(k) = hwm_kib(pid) {
            peak = peak.max(k);
        }
        if let Some(st) = child.try_wait()? {
            if !st.success() {
                bail!("indexer build failed: {st}");
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = reader.join().map_err(|_| anyhow::anyhow!("reader"))??;
    let report: Value = serde_json::from_str(text.trim()).context("indexer --json output")?;
    Ok((report, peak as f64 / 1024.0))
}

/// The first sentence of a doc comment in `text`, 4 to 16 words.
fn doc_sentence(text: &str) -> Option<String> {
    let mut doc = String::new();
    let mut in_py = false;
    for line in text.lines() {
        let t = line.trim();
        let piece = if let Some(r) = t.strip_prefix("///") {
            Some(r)
        } else if in_py {
            Some(t)
        } else if let Some(r) = t.strip_prefix("\"\"\"").or_else(|| t.strip_prefix("'''")) {
            in_py = true;
            Some(r)
        } else {
            t.strip_prefix("/**").or_else(|| t.strip_prefix("* "))
        };
        match piece {
            Some(p) => {
                let p = p.trim_end_matches("\"\"\"").trim_end_matches("*/").trim();
                if p.starts_with('@') || p.starts_with(':') || p.starts_with('#') {
                    break;
                }
                if !p.is_empty() {
                    doc.push_str(p);
                    doc.push(' ');
                }
                if p.contains('.') || (in_py && (t.ends_with("\"\"\"") && t.len() > 3)) {
                    break;
                }
            }
            None if !doc.is_empty() => break,
            None => {}
        }
    }
    let first = doc.split(". ").next()?.trim().trim_end_matches('.');
    let words = first.split_whitespace().count();
    let clean = first
        .chars()
        .all(|c| !c.is_control() && c != '`' && c != '[');
    ((4..=16).contains(&words) && clean).then(|| first.to_string())
}

/// (style, query) pairs: identifiers, then natural-language questions.
fn queries(index: &Index, per_style: usize) -> anyhow::Result<(Vec<String>, Vec<String>)> {
    let mut idents = Vec::new();
    let mut docs = Vec::new();
    for ls in &index.segments {
        let t = ls.segment.table();
        for (i, c) in t.chunks.iter().enumerate() {
            if ls.tombstones.contains(i as u32) || c.is_header() {
                continue;
            }
            let kind = c.kind.as_str();
            if kind != "function" && kind != "method" {
                continue;
            }
            if c.name.len() >= 5 {
                idents.push(c.name.to_string());
            }
            if let Some(s) = doc_sentence(ls.segment.chunk_text(i as u32)?) {
                docs.push(s);
            }
        }
    }
    let pick = |mut v: Vec<String>| {
        v.sort();
        v.dedup();
        let step = (v.len() / per_style.max(1)).max(1);
        v.into_iter()
            .step_by(step)
            .take(per_style)
            .collect::<Vec<_>>()
    };
    Ok((pick(idents), pick(docs)))
}

/// A warm queryd on `index` (its query-vector cache on, no file watcher).
fn start(queryd: &Path, index: &Path, model: &Path) -> anyhow::Result<StdioClient> {
    StdioClient::start(
        Command::new(queryd)
            .arg("--index")
            .arg(index)
            .arg("--model")
            .arg(model)
            .arg("--no-watch"),
        "corpus-bench",
    )
    .map_err(anyhow::Error::msg)
}

/// `search_code` for `q` (limit 10, with timings): round-trip time and the answer.
fn search_code(server: &mut StdioClient, q: &str) -> anyhow::Result<(Duration, Value)> {
    let t = Instant::now();
    let v = server
        .call(
            "search_code",
            json!({"query": q, "limit": 10, "debug": true}),
        )
        .map_err(|e| anyhow::anyhow!("search_code failed for {q:?}: {e}"))?;
    Ok((t.elapsed(), v))
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let model = a
        .model
        .clone()
        .or_else(|| std::env::var_os("CIX_MODEL_DIR").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("models/all-MiniLM-L6-v2"));
    let name = a
        .corpus
        .file_name()
        .map_or("corpus".into(), |n| n.to_string_lossy().to_string());
    let index = a
        .index
        .clone()
        .unwrap_or_else(|| PathBuf::from(".cache/corpus").join(&name));
    let cores = std::thread::available_parallelism().map_or(1, |x| x.get());
    println!("## Corpus benchmark: {}\n", a.corpus.display());
    if a.rebuild || !index.join("MANIFEST").exists() {
        let t = Instant::now();
        let (r, peak_mb) = build(&a, &index, &model)?;
        let secs = t.elapsed().as_secs_f64();
        let mb = r["source_bytes"].as_f64().unwrap_or(0.0) / 1e6;
        println!(
            "build ({cores} cores, --device {}, --memory-budget {}, --embed-group {}): {} files, {mb:.1} MB, {} chunks, {} tokens embedded ({:.0} tokens/s in the embed phase), {} segment(s), {secs:.1} s, peak RSS {peak_mb:.0} MB",
            a.device,
            a.memory_budget,
            a.embed_group
                .map_or_else(|| "default".to_string(), |g| g.to_string()),
            r["files_indexed"],
            r["chunks_written"],
            r["tokens_embedded"],
            r["tokens_embedded"].as_f64().unwrap_or(0.0)
                / r["seconds"]["embed"].as_f64().unwrap_or(f64::NAN),
            r["segment_ids"].as_array().map_or(0, |v| v.len()),
        );
        if let Some(p) = r["seconds"].as_object() {
            let phases: Vec<String> = p
                .iter()
                .map(|(k, v)| format!("{k} {:.1} s", v.as_f64().unwrap_or(0.0)))
                .collect();
            println!("phases: {}", phases.join(", "));
        }
    } else {
        println!(
            "index {} exists (pass --rebuild to build again)",
            index.display()
        );
    }

    let ix = Index::open(&index)?;
    let (idents, docs) = queries(&ix, a.queries)?;
    println!(
        "\nindex: {} live chunks in {} segment(s); queries: {} identifiers, {} doc-comment sentences",
        ix.live_chunks(),
        ix.segments.len(),
        idents.len(),
        docs.len()
    );

    // MCP latency through a warm server.
    let mut server = start(&a.bin.join("queryd"), &index, &model)?;
    search_code(&mut server, "warm up the server")?;
    println!("\n| style | queries | with query embedding p50 / p99 ms | without (cached vector) p50 / p99 ms | tool total, cached vector p50 / p99 ms | server search only p50 / p99 ms |\n|---|---:|---:|---:|---:|---:|");
    for (style, qs) in [("identifier", &idents), ("natural language", &docs)] {
        let (mut first, mut second, mut inner) = (Vec::new(), Vec::new(), Vec::new());
        // The tool's own time (`debug.total_ms`: embedding lookup, search, graph expansion,
        // snippets); the rest of a round trip is JSON and transport on both sides.
        let mut tool = Vec::new();
        for q in qs.iter() {
            let (d1, _) = search_code(&mut server, q)?;
            let (d2, v) = search_code(&mut server, q)?;
            if v["debug"]["embed_cached"] != json!(true) {
                bail!("the second call of {q:?} was not served from the query cache");
            }
            first.push(d1.as_secs_f64() * 1e3);
            second.push(d2.as_secs_f64() * 1e3);
            let dbg = &v["debug"];
            let s: f64 = ["filter_ms", "vector_ms", "bm25_ms", "fusion_ms"]
                .iter()
                .map(|k| dbg[*k].as_f64().unwrap_or(0.0))
                .sum();
            inner.push(s);
            tool.push(dbg["total_ms"].as_f64().unwrap_or(f64::NAN));
        }
        println!(
            "| {style} | {} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} | {:.2} / {:.2} |",
            qs.len(),
            pct(&mut first, 0.5),
            pct(&mut first, 0.99),
            pct(&mut second, 0.5),
            pct(&mut second, 0.99),
            pct(&mut tool, 0.5),
            pct(&mut tool, 0.99),
            pct(&mut inner, 0.5),
            pct(&mut inner, 0.99),
        );
    }
    server.kill();

    // Recall@10 of the vector search against an exact scan, per style and nprobe.
    let enc = kernels::Encoder::load(&model, kernels::DeviceChoice::Cpu)?;
    let dim = ix.manifest.dim as usize;
    let default_np = code::search::default_nprobe(&ix)?;
    let mut probes = a.nprobes.clone();
    probes.push(default_np);
    probes.sort();
    probes.dedup();
    let styles = [("identifier", &idents), ("natural language", &docs)];
    let mut per_style = Vec::new();
    for (_, qs) in styles {
        // The query vectors the server uses (`embed_query`: half-precision layer weights on
        // the CPU), one query at a time.
        let mut vecs = Vec::with_capacity(qs.len() * dim);
        for q in qs.iter() {
            vecs.extend(enc.embed_query(q)?);
        }
        let exact: Vec<Vec<(usize, u32)>> = vecs
            .chunks_exact(dim)
            .map(|q| {
                let mut all: Vec<(usize, u32, f32)> = Vec::new();
                for (si, ls) in ix.segments.iter().enumerate() {
                    let v = ls.segment.vectors();
                    for (c, s) in exact_search(v, dim, q, 10, None, Some(&ls.tombstones)) {
                        all.push((si, c, s));
                    }
                }
                all.sort_by(|x, y| y.2.total_cmp(&x.2).then((x.0, x.1).cmp(&(y.0, y.1))));
                all.into_iter().take(10).map(|x| (x.0, x.1)).collect()
            })
            .collect();
        per_style.push((vecs, exact));
    }
    println!("\n| nprobe | recall@10 vs exact, identifier | natural language |\n|---:|---:|---:|");
    for &np in &probes {
        let mut cells = Vec::new();
        for (vecs, exact) in &per_style {
            let (mut hit, mut total) = (0usize, 0usize);
            for (q, ex) in vecs.chunks_exact(dim).zip(exact) {
                let got = vector_list(&ix, q, 10, Some(np), &[])?;
                total += ex.len();
                hit += got.iter().filter(|h| ex.contains(&(h.0, h.1))).count();
            }
            cells.push(format!("{:.3}", hit as f64 / total.max(1) as f64));
        }
        let mark = if np == default_np { " (default)" } else { "" };
        println!("| {np}{mark} | {} | {} |", cells[0], cells[1]);
    }
    Ok(())
}
