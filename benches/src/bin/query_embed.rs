//! Query embedding latency on CPU: `Encoder::embed_query` of one short query (5–15 tokens) per
//! call (what the server runs: half-precision layer weights on the CPU), the very first call of
//! the process (cold: it also packs those weights) and then p50/p99 over distinct queries,
//! beside its peer in the same run, `Encoder::embed` of the same query (the f32 path documents
//! take; the two alternate query by query), with the ratio and the least cosine between their
//! vectors; and a `HashMap` cache lookup of an already embedded query (what the server's LRU
//! costs on a hit).
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
    /// Only `embed_query`, without its f32 peer between the calls (whose 42 MB of weights
    /// then do not pass through the caches between two queries, as in a server).
    #[arg(long)]
    no_peer: bool,
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
    // What queryd does after loading the model.
    let t = Instant::now();
    enc.prepare_query_path()?;
    let prepare_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let v0 = enc.embed_query(queries[0].as_str())?;
    let cold_ms = t.elapsed().as_secs_f64() * 1e3;
    let mut cache: HashMap<String, Vec<f32>> = HashMap::new();
    cache.insert(queries[0].clone(), v0);
    let mut ds = Vec::new();
    let mut fs = Vec::new();
    let mut tokens = 0usize;
    let mut min_cos = 1f32;
    for (i, q) in queries[1..].iter().enumerate() {
        // Alternate which runs first, so neither always finds the other's data in cache.
        let mut query = || -> anyhow::Result<Vec<f32>> {
            let t = Instant::now();
            let v = enc.embed_query(q)?;
            ds.push(t.elapsed());
            Ok(v)
        };
        let mut full = || -> anyhow::Result<Vec<f32>> {
            let t = Instant::now();
            let (v, _) = enc.embed(&[q.as_str()])?;
            fs.push(t.elapsed());
            Ok(v)
        };
        let (v, f) = if args.no_peer {
            let v = query()?;
            (v.clone(), v)
        } else if i % 2 == 0 {
            let v = query()?;
            (v, full()?)
        } else {
            let f = full()?;
            (query()?, f)
        };
        min_cos = min_cos.min(v.iter().zip(&f).map(|(a, b)| a * b).sum());
        tokens += enc.count_tokens(q);
        cache.insert(q.clone(), v);
    }
    if fs.is_empty() {
        fs.push(Duration::ZERO);
    }
    let (f50, f99) = (pct(&mut fs, 0.5), pct(&mut fs, 0.99));
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
    println!(
        "| half-precision weights made (`prepare_query_path`, queryd: at start; 1 sample) | {prepare_ms:.2} ms | |"
    );
    println!("| first embed_query call of the process (cold, 1 sample) | {cold_ms:.2} ms | |");
    println!("| embed_query, warm, one query per call | {p50:.2} ms | {p99:.2} ms |");
    println!("| peer: embed (f32 weights), the same queries | {f50:.2} ms | {f99:.2} ms |");
    println!(
        "\nembed / embed_query: p50 {:.2}×, p99 {:.2}×; least cosine between their vectors {min_cos:.6}\n",
        f50 / p50,
        f99 / p99
    );
    println!("| what | p50 | p99 |\n|---|---:|---:|");
    println!(
        "| HashMap cache hit (lookup + clone of 384 f32) | {:.2} µs | {:.2} µs |",
        pct(&mut hs, 0.5) * 1e3,
        pct(&mut hs, 0.99) * 1e3
    );
    Ok(())
}
