//! Embedding throughput on real code chunks: chunks/s, tokens/s and the padding fraction of the
//! burn encoder, and the same inputs through two peers, each printed side by side with the ratio
//! of the medians and the minimum cosine between the two runtimes' vectors:
//!
//! - `--peer`: the float32 numpy forward pass (`benches/reference_throughput.py`; needs numpy,
//!   scipy, safetensors, tokenizers).
//! - sentence-transformers on PyTorch (`benches/st_throughput.py`): the same model directory,
//!   loaded offline, on CUDA in fp16 when torch sees a GPU and our encoder runs on one (cuda or
//!   wgpu), else on the CPU in fp32. Run automatically when `python3 -c "import torch,
//!   sentence_transformers"` works (else one line says why it was skipped); `--st-peer` makes a
//!   missing torch / sentence-transformers an error, `--no-st-peer` skips it.
//!
//! - `--query-latency N`: the query path, one text per call as queryd embeds a search: N of the
//!   hand-written web-search questions (`benches/data/webq`) embedded one at a time on `--device`
//!   and on the CPU in the same run, p50/p99 milliseconds of each and their ratio.
//!
//! Run: `cargo run --release -p cix-benches --bin embed -- PATH [--chunks 1000] [--runs 3] [--peer]
//! [--st-peer | --no-st-peer] [--device cpu|wgpu|cuda] [--query-latency N]` (GPU backends: add
//! `--features wgpu` / `--features cuda`). `python3` is whichever is first on `PATH`.

#[path = "../f32file.rs"]
mod f32file;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Parser;
use indexer::build::embed_text;
use indexer::chunk::{self, ChunkOptions};
use indexer::walk;

use f32file::read_f32;

#[derive(Parser)]
struct Args {
    /// Directory whose chunks are embedded.
    path: PathBuf,
    #[arg(long, default_value_t = 1000)]
    chunks: usize,
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Model directory (default: $CIX_MODEL_DIR, else ./models/all-MiniLM-L6-v2).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Also run the numpy float32 peer on the same texts.
    #[arg(long)]
    peer: bool,
    /// Run the sentence-transformers (PyTorch) peer, failing when python3 lacks torch or
    /// sentence_transformers (without this flag it runs when they import, else is skipped).
    #[arg(long, conflicts_with = "no_st_peer")]
    st_peer: bool,
    /// Never run the sentence-transformers peer.
    #[arg(long)]
    no_st_peer: bool,
    /// auto | cpu | wgpu | cuda (GPU backends need this harness built with `--features wgpu`
    /// or `--features cuda`).
    #[arg(long, default_value = "cpu")]
    device: kernels::DeviceChoice,
    /// auto | f32 | f16 | bf16: the encoder's precision on a GPU (auto: f16 when it passes the
    /// load-time parity check against f32); the CPU computes in f32.
    #[arg(long, default_value = "auto")]
    precision: kernels::Precision,
    /// Batch sizes the sentence-transformers peer runs at (comma-separated); the ratio is taken
    /// against the fastest (its best batch size).
    #[arg(long, value_delimiter = ',', default_value = "64")]
    st_batches: Vec<usize>,
    /// Also time N single-query embeddings (web-search questions) on `--device` and on the CPU.
    #[arg(long, default_value_t = 0)]
    query_latency: usize,
    /// Embed the first `--chunks` chunks in walk order (a build's order) in groups of this many
    /// texts, as `indexer build` does (`--embed-group`; by default 256 on the CPU, 4096 on a GPU), once in chunk order
    /// (what the build does) and once longest first (the candidate order, [`longest_first`]),
    /// instead of one call over an evenly spread sample; prints tokens/s, padding and forward
    /// passes of each, and how far the two orders' vectors of one text differ.
    #[arg(long)]
    group: Option<usize>,
    /// With `--group`: tokenise and plan the batches only (no forward pass), and print the
    /// padding and forward passes of both orders: what packing sequences instead of padding
    /// them could save.
    #[arg(long)]
    plan_only: bool,
}

#[global_allocator]
static GLOBAL: indexer::alloc::MiMalloc = indexer::alloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // As `indexer` does: mimalloc, no transparent huge pages, freed pages returned promptly
    // (the encoder runs in that process) except while the encoder runs on the CPU
    // (`KeepFreedPages`, held below as `indexer`'s embedder holds it).
    indexer::alloc::set_up_process();
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    // Decided before the burn runs, so that a missing torch fails `--st-peer` at once.
    let st = if args.no_st_peer {
        false
    } else {
        match torch_available() {
            Ok(()) => true,
            Err(why) if args.st_peer => bail!(
                "--st-peer: python3 cannot import torch and sentence_transformers ({why}); \
                 install them with `python3 -m pip install torch sentence-transformers`"
            ),
            Err(why) => {
                println!(
                    "sentence-transformers peer skipped: python3 cannot import torch and \
                     sentence_transformers ({why}); `python3 -m pip install torch \
                     sentence-transformers` enables it"
                );
                false
            }
        }
    };
    let model = kernels::resolve_model_dir(args.model);
    let repo = walk::repo_name(&args.path);
    let w = walk::walk(
        &args.path,
        &repo,
        walk::DEFAULT_MAX_FILE_BYTES,
        walk::Symlinks::Confined,
        walk::Rules::default(),
    );
    let mut texts = Vec::new();
    for c in &w.candidates {
        let Ok((src, _)) = walk::read_source(c) else {
            continue;
        };
        if !c.language.is_code() {
            continue;
        }
        let fx = chunk::extract(
            c.language,
            &repo,
            &c.rel_path,
            &src,
            &ChunkOptions::default(),
        );
        for ch in fx.chunks {
            texts.push(embed_text(
                &c.rel_path,
                ch.kind.name(),
                &ch.qualified,
                &ch.text,
            ));
        }
    }
    if texts.is_empty() {
        bail!("no code chunks under {}", args.path.display());
    }
    let n = args.chunks.min(texts.len());
    let enc = kernels::Encoder::load_with(&model, args.device, args.precision)?;
    if let Some(group) = args.group {
        if args.plan_only {
            return plan_only(&enc, &texts[..n], group.max(1));
        }
        return grouped(&enc, &texts[..n], group.max(1), args.runs);
    }
    // A deterministic, evenly spread sample.
    let sample: Vec<String> = (0..n).map(|i| texts[i * texts.len() / n].clone()).collect();
    let refs: Vec<&str> = sample.iter().map(String::as_str).collect();
    println!(
        "encoder: {} on {}; {} chunks sampled from {} in {}",
        enc.model_id(),
        enc.device_description(),
        n,
        texts.len(),
        args.path.display()
    );
    let _keep = (!enc.on_device()).then(indexer::alloc::KeepFreedPages::new);
    enc.embed(&refs[..8.min(n)])?; // warm-up
    let mut burn_rates = Vec::new();
    let mut burn_tokens = 0;
    let mut last = Vec::new();
    for run in 0..args.runs {
        let t = Instant::now();
        let (v, s) = enc.embed(&refs)?;
        let secs = t.elapsed().as_secs_f64();
        let padding = 1.0 - s.tokens as f64 / s.padded_tokens.max(1) as f64;
        println!(
            "burn  run {run}: {:.1} chunks/s, {:.0} tokens/s, padding {:.3}, {} tokens, {:.2}s",
            n as f64 / secs,
            s.tokens as f64 / secs,
            padding,
            s.tokens,
            secs
        );
        burn_rates.push(s.tokens as f64 / secs);
        burn_tokens = s.tokens;
        last = v;
    }
    let dir = tempfile::tempdir()?;
    let texts_path = dir.path().join("texts.json");
    std::fs::write(&texts_path, serde_json::to_vec(&sample)?)?;
    let burn_median = median(&mut burn_rates);
    if args.peer {
        let check = dir.path().join("numpy.f32");
        let runs = run_peer(
            "reference_throughput.py",
            &texts_path,
            &model,
            args.runs,
            &check,
            &[],
            "needs numpy, scipy, safetensors, tokenizers",
        )?;
        let mut rates = Vec::new();
        for j in &runs {
            println!(
                "numpy run: {:.1} chunks/s, {:.0} tokens/s, padding {:.3}",
                num(j, "chunks_per_s"),
                num(j, "tokens_per_s"),
                num(j, "padding")
            );
            rates.push(num(j, "tokens_per_s"));
        }
        let min_cos = min_cosine(&last, &read_f32(&check)?, enc.dim())?;
        let p = median(&mut rates);
        println!("median tokens/s: burn {burn_median:.0}, numpy {p:.0}; ratio burn/numpy {:.2}; min cosine burn vs numpy {min_cos:.5}", burn_median / p);
    }
    if st {
        // Our CPU runs against torch on the CPU; a GPU run against torch on CUDA when it has one.
        let on_cpu = match args.device {
            kernels::DeviceChoice::Cpu => true,
            kernels::DeviceChoice::Auto => enc.device_description().starts_with("cpu"),
            kernels::DeviceChoice::Wgpu | kernels::DeviceChoice::Cuda => false,
        };
        let mut best: Option<(f64, usize, String, String)> = None;
        for &batch in &args.st_batches {
            let check = dir.path().join(format!("st-{batch}.f32"));
            let batch_arg = batch.to_string();
            let runs = run_peer(
                "st_throughput.py",
                &texts_path,
                &model,
                args.runs,
                &check,
                &[
                    "--device",
                    if on_cpu { "cpu" } else { "auto" },
                    "--dtype",
                    "auto",
                    "--batch-size",
                    &batch_arg,
                ],
                "needs torch and sentence-transformers",
            )?;
            let mut rates = Vec::new();
            let (mut device, mut dtype, mut tokens) = (String::new(), String::new(), 0);
            for (i, j) in runs.iter().enumerate() {
                device = j["device"].as_str().unwrap_or("?").to_string();
                dtype = j["dtype"].as_str().unwrap_or("?").to_string();
                tokens = j["tokens"].as_u64().unwrap_or(0);
                println!(
                    "st    batch {batch} run {i}: {:.1} chunks/s, {:.0} tokens/s, padding {:.3}, {tokens} tokens, {:.2}s ({device}, {dtype})",
                    num(j, "chunks_per_s"),
                    num(j, "tokens_per_s"),
                    num(j, "padding"),
                    num(j, "secs")
                );
                rates.push(num(j, "tokens_per_s"));
            }
            if tokens != burn_tokens as u64 {
                println!("note: token counts differ (burn {burn_tokens}, sentence-transformers {tokens}); the ratio compares tokens/s");
            }
            let min_cos = min_cosine(&last, &read_f32(&check)?, enc.dim())?;
            let p = median(&mut rates);
            println!(
                "median tokens/s: burn {burn_median:.0} ({}), sentence-transformers batch {batch} {p:.0} ({device}, {dtype}); \
                 ratio burn/sentence-transformers {:.2}; min cosine burn vs sentence-transformers {min_cos:.5}",
                enc.precision(),
                burn_median / p
            );
            if best.as_ref().is_none_or(|b| p > b.0) {
                best = Some((p, batch, device, dtype));
            }
        }
        if let (Some((p, batch, device, dtype)), true) = (best, args.st_batches.len() > 1) {
            println!(
                "sentence-transformers at its best batch size ({batch}, {device}, {dtype}): {p:.0} tokens/s; \
                 ratio burn ({}) / best {:.2}",
                enc.precision(),
                burn_median / p
            );
        }
    }
    if args.query_latency > 0 {
        query_latency(&enc, &model, args.query_latency)?;
    }
    Ok(())
}

/// The candidate order for a build's embedding groups: longest text first (bytes; ties in
/// chunk order), so that each group holds texts of about one length and the encoder, which
/// sorts and pads only within a group, pads less and runs fuller batches.
fn longest_first(texts: &[String]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..texts.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(texts[i].len()), i));
    order
}

/// [`grouped`]'s batches planned but not run: padding and forward passes per order.
fn plan_only(enc: &kernels::Encoder, texts: &[String], group: usize) -> anyhow::Result<()> {
    let chunk_order: Vec<usize> = (0..texts.len()).collect();
    for (name, order) in [
        ("chunk order", chunk_order),
        ("longest first", longest_first(texts)),
    ] {
        let (mut tokens, mut padded, mut batches) = (0usize, 0usize, 0usize);
        for g in order.chunks(group) {
            let refs: Vec<&str> = g.iter().map(|&i| texts[i].as_str()).collect();
            let s = enc.prepare(&refs)?.stats();
            tokens += s.tokens;
            padded += s.padded_tokens;
            batches += s.batches;
        }
        println!(
            "{name:<13}: {} chunks in groups of {group}, {tokens} tokens, {padded} padded tokens, padding {:.4}, {batches} forward passes",
            texts.len(),
            1.0 - tokens as f64 / padded.max(1) as f64,
        );
    }
    Ok(())
}

/// `texts` (a build's chunks, in its order) embedded in groups of `group` the way `indexer
/// build` embeds a segment (`Encoder::embed_pipelined`), in chunk order and [`longest_first`],
/// `runs` times each, interleaved; and the smallest cosine between the two orders' vectors of
/// one text (batching changes them only by rounding).
fn grouped(
    enc: &kernels::Encoder,
    texts: &[String],
    group: usize,
    runs: usize,
) -> anyhow::Result<()> {
    let chunk_order: Vec<usize> = (0..texts.len()).collect();
    let build_order = longest_first(texts);
    println!(
        "encoder: {} on {}; the first {} chunks in walk order, groups of {group}",
        enc.model_id(),
        enc.device_description(),
        texts.len()
    );
    let _keep = (!enc.on_device()).then(indexer::alloc::KeepFreedPages::new);
    enc.embed(&[texts[0].as_str()])?; // warm-up
    let dim = enc.dim();
    let mut rows: [Vec<f32>; 2] = [Vec::new(), Vec::new()];
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for run in 0..runs {
        for (k, (name, order)) in [
            ("chunk order", &chunk_order),
            ("longest first", &build_order),
        ]
        .into_iter()
        .enumerate()
        {
            let groups: Vec<Vec<&str>> = order
                .chunks(group)
                .map(|g| g.iter().map(|&i| texts[i].as_str()).collect())
                .collect();
            let mut out = vec![0f32; texts.len() * dim];
            let (mut tokens, mut padded, mut batches, mut next) = (0usize, 0usize, 0usize, 0usize);
            let t = Instant::now();
            enc.embed_pipelined(groups, 2, |v, s| -> Result<(), kernels::ModelError> {
                let ids = &order[next * group..(next * group + s.texts)];
                for (j, &i) in ids.iter().enumerate() {
                    out[i * dim..(i + 1) * dim].copy_from_slice(&v[j * dim..(j + 1) * dim]);
                }
                next += 1;
                tokens += s.tokens;
                padded += s.padded_tokens;
                batches += s.batches;
                Ok(())
            })?;
            let secs = t.elapsed().as_secs_f64();
            println!(
                "{name:<13} run {run}: {:.1} chunks/s, {:.0} tokens/s, padding {:.3}, {batches} forward passes, {tokens} tokens, {secs:.2}s",
                texts.len() as f64 / secs,
                tokens as f64 / secs,
                1.0 - tokens as f64 / padded.max(1) as f64,
            );
            rates[k].push(tokens as f64 / secs);
            rows[k] = out;
        }
    }
    let min_cos = min_cosine(&rows[0], &rows[1], dim)?;
    let (a, b) = (median(&mut rates[0]), median(&mut rates[1]));
    println!(
        "median tokens/s: chunk order {a:.0}, longest first {b:.0}; ratio {:.2}; min cosine between the orders' vectors {min_cos:.6}",
        b / a
    );
    Ok(())
}

/// Times `n` single-text embeddings as queryd makes them (`Encoder::embed_query`, one query per
/// search: on the CPU the half-precision query path, on a GPU the batch path) on `enc`'s device
/// and, in the same run, on a CPU encoder: p50/p99 ms of each and the ratio of the p50s.
fn query_latency(enc: &kernels::Encoder, model: &Path, n: usize) -> anyhow::Result<()> {
    let mut queries = Vec::new();
    for part in 1..=3 {
        let path = bench_file(&format!("data/webq/part-{part}.jsonl"));
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading the web-search questions {}", path.display()))?;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let j: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("{}: not a JSON line: {line}", path.display()))?;
            if let Some(q) = j["q"].as_str() {
                queries.push(q.to_string());
            }
        }
    }
    if queries.is_empty() {
        bail!("no web-search questions found under benches/data/webq");
    }
    let queries: Vec<&str> = (0..n)
        .map(|i| queries[i % queries.len()].as_str())
        .collect();
    let time = |e: &kernels::Encoder| -> anyhow::Result<(f64, f64)> {
        for q in queries.iter().take(10) {
            e.embed_query(q)?; // warm-up: kernel compilation, allocator pools, half weights
        }
        let mut ms = Vec::with_capacity(queries.len());
        for q in &queries {
            let t = Instant::now();
            e.embed_query(q)?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        ms.sort_by(|a, b| a.total_cmp(b));
        let p99 = ms[((ms.len() * 99).div_ceil(100)).saturating_sub(1)];
        Ok((median(&mut ms), p99))
    };
    let (p50, p99) = time(enc)?;
    let cpu = kernels::Encoder::load(model, kernels::DeviceChoice::Cpu)?;
    let (c50, c99) = time(&cpu)?;
    println!(
        "query embedding, {n} questions one at a time: {} p50 {p50:.3} ms p99 {p99:.3} ms; \
         cpu p50 {c50:.3} ms p99 {c99:.3} ms; cpu/device p50 ratio {:.2}",
        enc.device_description(),
        c50 / p50
    );
    Ok(())
}

/// A file of this crate (`benches/…`): where it was built, else under `./benches` (a harness
/// carried to another machine runs from a checkout at another path).
fn bench_file(rel: &str) -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel);
    if built.exists() {
        built
    } else {
        PathBuf::from("benches").join(rel)
    }
}

/// Median of `v` (the upper one for an even count); `v` is sorted in place.
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A number field of a peer's JSON line (0 when absent).
fn num(j: &serde_json::Value, key: &str) -> f64 {
    j[key].as_f64().unwrap_or(0.0)
}

/// Runs `benches/<script> TEXTS --model DIR --runs N --check CHECK [extra…]` with python3 and
/// returns its JSON lines (one per run). Its stderr lines starting with `<script stem>:` are
/// passed on; all of stderr is shown when it fails.
fn run_peer(
    script: &str,
    texts: &Path,
    model: &Path,
    runs: usize,
    check: &Path,
    extra: &[&str],
    needs: &str,
) -> anyhow::Result<Vec<serde_json::Value>> {
    let path = bench_file(script);
    let out = Command::new("python3")
        .arg(&path)
        .arg(texts)
        .arg("--model")
        .arg(model)
        .arg("--runs")
        .arg(runs.to_string())
        .arg("--check")
        .arg(check)
        .args(extra)
        .output()
        .with_context(|| format!("running python3 {} ({needs})", path.display()))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        bail!("{script} failed ({}; {needs}):\n{stderr}", out.status);
    }
    let stem = script.trim_end_matches(".py");
    for line in stderr.lines().filter(|l| l.starts_with(stem)) {
        println!("{line}");
    }
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .with_context(|| format!("{script} printed a non-JSON line: {l}"))
        })
        .collect::<anyhow::Result<_>>()?;
    if lines.len() != runs {
        bail!(
            "{script} printed {} result lines for {runs} runs",
            lines.len()
        );
    }
    Ok(lines)
}

/// `Ok` when `python3 -c "import torch, sentence_transformers"` succeeds, else why not (the
/// last line python printed, or why python3 could not run).
fn torch_available() -> Result<(), String> {
    match Command::new("python3")
        .args(["-c", "import torch, sentence_transformers"])
        .output()
    {
        Err(e) => Err(format!("python3 did not run: {e}")),
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr)
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("no message")
            .trim()
            .to_string()),
    }
}

/// The smallest cosine between corresponding rows of two sets of normalised `dim`-vectors.
fn min_cosine(ours: &[f32], theirs: &[f32], dim: usize) -> anyhow::Result<f32> {
    if ours.len() != theirs.len() || ours.is_empty() {
        bail!(
            "vector counts differ: ours {} x {dim}, the peer's {} floats",
            ours.len() / dim,
            theirs.len()
        );
    }
    Ok(ours
        .chunks_exact(dim)
        .zip(theirs.chunks_exact(dim))
        .map(|(a, b)| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>())
        .fold(f32::INFINITY, f32::min))
}
