//! Query embedding latency on CPU: `Encoder::embed` of one short query (5–15 tokens) per call,
//! the very first call of the process (cold) and then p50/p99 over distinct queries, against a
//! `HashMap` cache lookup of an already embedded query (what the server's LRU costs on a hit).
//!
//! Run: `cargo run --release -p cix-benches --bin query_embed -- [--queries 300]`

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 300)]
    queries: usize,
    /// Model directory (default: $CIX_MODEL_DIR, else ./models/all-MiniLM-L6-v2).
    #[arg(long)]
    model: Option<PathBuf>,
}

const WORDS: &[&str] = &[
    "parse",
    "config",
    "file",
    "http",
    "request",
    "handler",
    "retry",
    "timeout",
    "segment",
    "index",
    "vector",
    "search",
    "open",
    "database",
    "connection",
    "pool",
    "error",
    "message",
    "token",
    "cache",
    "evict",
    "least",
    "recently",
    "used",
    "entry",
    "write",
    "ahead",
    "log",
    "flush",
    "disk",
    "read",
    "bytes",
    "utf8",
    "decode",
    "encode",
    "json",
    "schema",
    "validate",
    "user",
    "session",
    "login",
    "password",
    "hash",
    "where",
    "is",
    "the",
    "how",
    "does",
    "find",
    "callers",
    "of",
    "function",
    "that",
    "returns",
    "a",
    "list",
    "sorted",
    "by",
    "date",
    "thread",
    "spawn",
    "worker",
    "queue",
    "channel",
    "send",
    "receive",
    "graph",
    "edge",
    "node",
    "rank",
];

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let model = kernels::resolve_model_dir(args.model);
    let t = Instant::now();
    let enc = kernels::Encoder::load(&model, kernels::DeviceChoice::Cpu)
        .with_context(|| format!("load {}", model.display()))?;
    let load_ms = t.elapsed().as_secs_f64() * 1e3;
    // Deterministic distinct queries of 4-12 words (5-15 tokens with [CLS]/[SEP]).
    let mut s = 0x1234_5678_u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut queries = Vec::new();
    let mut seen = std::collections::HashSet::new();
    while queries.len() < args.queries + 1 {
        let n = 4 + (next() % 9) as usize;
        let q: Vec<&str> = (0..n)
            .map(|_| WORDS[(next() % WORDS.len() as u64) as usize])
            .collect();
        let q = q.join(" ");
        let toks = enc.count_tokens(&q);
        if (5..=15).contains(&toks) && seen.insert(q.clone()) {
            queries.push(q);
        }
    }
    let t = Instant::now();
    let (v0, _) = enc.embed(&[queries[0].as_str()])?;
    let cold_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut cache: HashMap<String, Vec<f32>> = HashMap::new();
    cache.insert(queries[0].clone(), v0);
    let mut ds = Vec::new();
    let mut tokens = 0usize;
    for q in &queries[1..] {
        let t = Instant::now();
        let (v, _) = enc.embed(&[q.as_str()])?;
        ds.push(t.elapsed());
        tokens += enc.count_tokens(q);
        cache.insert(q.clone(), v);
    }
    let mean_tokens = tokens as f64 / ds.len() as f64;
    let (p50, p99) = (pct(&mut ds, 0.5), pct(&mut ds, 0.99));
    // Cache hits: lookup + clone of the vector (what a server returns).
    let mut hs = Vec::new();
    for round in 0..10 {
        for q in &queries[1..] {
            let key = q.clone();
            let t = Instant::now();
            let v = cache.get(&key).cloned();
            let d = t.elapsed();
            if round > 0 {
                hs.push(d);
            }
            std::hint::black_box(v);
        }
    }
    println!(
        "## Query embedding latency (CPU, {})\n",
        enc.device_description()
    );
    println!(
        "model load {load_ms:.0} ms; {} distinct queries, mean {mean_tokens:.1} tokens\n",
        ds.len()
    );
    println!("| what | p50 | p99 |\n|---|---:|---:|");
    println!("| first embed call of the process (cold, 1 sample) | {cold_ms:.2} ms | |");
    println!("| embed, warm, one query per call | {p50:.2} ms | {p99:.2} ms |");
    println!(
        "| HashMap cache hit (lookup + clone of 384 f32) | {:.2} µs | {:.2} µs |",
        pct(&mut hs, 0.5) * 1e3,
        pct(&mut hs, 0.99) * 1e3
    );
    Ok(())
}
