//! Embedding throughput on real code chunks: chunks/s, tokens/s and the padding fraction of the
//! burn encoder, and (with `--peer`) the same inputs through the float32 numpy peer
//! (`benches/reference_throughput.py`), printed side by side with the ratio.
//!
//! Run: `cargo run --release -p cix-benches --bin embed -- PATH [--chunks 1000] [--runs 3] [--peer]
//! [--device cpu|wgpu|cuda]` (GPU backends: add `--features wgpu` / `--features cuda`).

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Parser;
use indexer::build::embed_text;
use indexer::chunk::{self, ChunkOptions};
use indexer::walk;

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
    /// auto | cpu | wgpu | cuda (GPU backends need this harness built with `--features wgpu`
    /// or `--features cuda`).
    #[arg(long, default_value = "cpu")]
    device: kernels::DeviceChoice,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let model = kernels::resolve_model_dir(args.model);
    let repo = walk::repo_name(&args.path);
    let w = walk::walk(&args.path, &repo, walk::DEFAULT_MAX_FILE_BYTES);
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
    // A deterministic, evenly spread sample.
    let n = args.chunks.min(texts.len());
    let sample: Vec<String> = (0..n).map(|i| texts[i * texts.len() / n].clone()).collect();
    let refs: Vec<&str> = sample.iter().map(String::as_str).collect();
    let enc = kernels::Encoder::load(&model, args.device)?;
    println!(
        "encoder: {} on {}; {} chunks sampled from {} in {}",
        enc.model_id(),
        enc.device_description(),
        n,
        texts.len(),
        args.path.display()
    );
    enc.embed(&refs[..8.min(n)])?; // warm-up
    let mut burn_rates = Vec::new();
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
        last = v;
    }
    if args.peer {
        let dir = tempfile::tempdir()?;
        let texts_path = dir.path().join("texts.json");
        std::fs::write(&texts_path, serde_json::to_vec(&sample)?)?;
        let check = dir.path().join("peer.f32");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reference_throughput.py");
        let out = Command::new("python3")
            .arg(&script)
            .arg(&texts_path)
            .arg("--model")
            .arg(&model)
            .arg("--runs")
            .arg(args.runs.to_string())
            .arg("--check")
            .arg(&check)
            .output()
            .context("running python3 (needs numpy, scipy, safetensors, tokenizers)")?;
        if !out.status.success() {
            bail!("peer failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let mut peer_rates = Vec::new();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let j: serde_json::Value = serde_json::from_str(line)?;
            let tps = j["tokens_per_s"].as_f64().unwrap_or(0.0);
            println!(
                "numpy run: {:.1} chunks/s, {:.0} tokens/s, padding {:.3}",
                j["chunks_per_s"].as_f64().unwrap_or(0.0),
                tps,
                j["padding"].as_f64().unwrap_or(0.0)
            );
            peer_rates.push(tps);
        }
        let peer: Vec<f32> = std::fs::read(&check)?
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let d = enc.dim();
        let min_cos = last
            .chunks_exact(d)
            .zip(peer.chunks_exact(d))
            .map(|(a, b)| a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>())
            .fold(f32::INFINITY, f32::min);
        let med = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        let (b, p) = (med(&mut burn_rates), med(&mut peer_rates));
        println!("median tokens/s: burn {b:.0}, numpy {p:.0}; ratio burn/numpy {:.2}; min cosine burn vs numpy {min_cos:.5}", b / p);
    }
    Ok(())
}
