//! Non-embedding indexing throughput: walk + read + tree-sitter chunking + graph resolution +
//! BM25 + segment write, in MB of source per second, with a stand-in embedder that hashes each
//! text into a pseudo-random unit vector (so the vector files and IVF training are realistic in
//! size without running the model).
//!
//! Run: `cargo run --release -p cix-benches --bin pipeline -- <paths…> [--runs 3]`

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Parser;
use indexer::build::{self, BuildOptions, HashEmbedder};
use indexer::progress::Progress;

#[derive(Parser)]
struct Args {
    /// Directories to index.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Vector dimension of the stand-in embedder.
    #[arg(long, default_value_t = 384)]
    dim: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let emb = HashEmbedder { dim: args.dim };
    rayon::ThreadPoolBuilder::new().build_global().ok();
    println!("threads: {}", rayon::current_num_threads());
    for run in 0..args.runs {
        let dir = tempfile::tempdir().context("temp dir")?;
        let opts = BuildOptions::new(args.paths.clone(), dir.path().join("index"));
        let t = Instant::now();
        let r = build::build(&opts, &emb, &Progress::silent())?;
        let total = t.elapsed().as_secs_f64();
        let mb = r.source_bytes as f64 / 1e6;
        let embed = r.time_of("embed").as_secs_f64();
        let phases: Vec<String> = r
            .timings
            .iter()
            .map(|(k, d)| format!("{k} {:.3}s", d.as_secs_f64()))
            .collect();
        println!(
            "run {run}: {} files, {:.2} MB, {} chunks, {} edges; total {:.3}s; without stand-in embedding {:.3}s = {:.1} MB/s; [{}]",
            r.files_indexed,
            mb,
            r.chunks_written,
            r.edges.values().sum::<usize>(),
            total,
            total - embed,
            mb / (total - embed),
            phases.join(", ")
        );
        let ins = indexer::inspect::inspect(&dir.path().join("index"))?;
        println!(
            "  segment size {} bytes; raw f32 vectors + text {} bytes; ratio {:.3}; vector index {}",
            ins.total_bytes,
            ins.raw_vector_and_text_bytes,
            ins.total_bytes as f64 / ins.raw_vector_and_text_bytes.max(1) as f64,
            ins.segments.iter().map(|s| s.vector_index.as_str()).collect::<Vec<_>>().join(",")
        );
    }
    Ok(())
}
