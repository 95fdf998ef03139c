//! Embeds realistic code chunks (functions from Rust sources in ~/.cargo/registry) and prints
//! chunks/s and tokens/s.
//!
//! Usage: `cargo run --release -p cix-kernels --example throughput [N] [MODEL_DIR] [DEVICE]`
//! (`CIX_DUMP_TEXTS=FILE` also writes the sampled texts as a JSON list).

use std::path::{Path, PathBuf};
use std::time::Instant;

use kernels::{DeviceChoice, Encoder};

fn collect_rust_files(dir: &Path, out: &mut Vec<PathBuf>, limit: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if out.len() >= limit {
            return;
        }
        if p.is_dir() {
            collect_rust_files(&p, out, limit);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Splits a Rust file into chunks starting at `fn` / `pub fn` lines, each <= 1500 chars.
fn function_chunks(src: &str) -> Vec<String> {
    let mut chunks = Vec::new();
    let mut current = String::new();
    for line in src.lines() {
        let t = line.trim_start();
        if (t.starts_with("fn ") || t.starts_with("pub fn ") || t.starts_with("pub(crate) fn "))
            && !current.is_empty()
        {
            chunks.push(std::mem::take(&mut current));
        }
        if current.len() + line.len() < 1500 {
            current.push_str(line);
            current.push('\n');
        }
    }
    if !current.is_empty() {
        chunks.push(current);
    }
    chunks
        .into_iter()
        .filter(|c| c.trim_start().contains("fn ") && c.len() > 80)
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(512);
    let model = args.get(2).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2")
    });
    let device: DeviceChoice = args
        .get(3)
        .map(|s| s.parse().expect("device"))
        .unwrap_or(DeviceChoice::Cpu);

    let home = std::env::var("HOME").unwrap_or_default();
    let registry = PathBuf::from(home).join(".cargo/registry/src");
    let mut files = Vec::new();
    collect_rust_files(&registry, &mut files, 4000);
    let mut texts = Vec::new();
    for f in &files {
        if let Ok(src) = std::fs::read_to_string(f) {
            texts.extend(function_chunks(&src));
        }
        if texts.len() >= n * 4 {
            break;
        }
    }
    // Spread the sample over many crates rather than the first few files.
    let step = (texts.len() / n.max(1)).max(1);
    let texts: Vec<String> = texts.into_iter().step_by(step).take(n).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    // CIX_DUMP_TEXTS=FILE writes the sample as JSON, e.g. for benches/reference_throughput.py.
    if let Some(path) = std::env::var_os("CIX_DUMP_TEXTS") {
        let json = serde_json::to_string(&refs).expect("serialize texts");
        std::fs::write(&path, json).expect("write CIX_DUMP_TEXTS");
    }

    let t0 = Instant::now();
    let enc = Encoder::load(&model, device).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "loaded {} on {} in {:.2}s",
        enc.model_id(),
        enc.device_description(),
        t0.elapsed().as_secs_f64()
    );
    // Warm-up on a few texts.
    enc.embed(&refs[..refs.len().min(8)]).expect("warm-up");

    let t = Instant::now();
    let (vecs, stats) = enc.embed(&refs).expect("embed");
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(vecs.len(), refs.len() * enc.dim());
    println!(
        "{} chunks, {} tokens ({} padded, {} batches, mean {:.0} tok/chunk) in {:.2}s: {:.1} chunks/s, {:.0} tokens/s",
        stats.texts,
        stats.tokens,
        stats.padded_tokens,
        stats.batches,
        stats.tokens as f64 / stats.texts.max(1) as f64,
        secs,
        stats.texts as f64 / secs,
        stats.tokens as f64 / secs
    );
}
