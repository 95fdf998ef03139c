//! Memory write and search benchmarks against the real engine (`engine::Engine`, real model,
//! real WAL with fsync on this machine's disk).
//!
//! 1. Write acknowledgement latency: `add_memories` with one memory per call, CPU embedding
//!    included, p50/p99, and the part that is not embedding (WAL append + fsync + publish).
//! 2. Write throughput: batches of 32 per call, and 4 concurrent single-memory writers.
//! 3. Search latency (query vector given, one thread) with 10k and 100k memories in the delta,
//!    then after flushing them into a segment; the fill uses precomputed vectors
//!    (`Engine::put_memories`; embedding 100k texts on 2 CPU cores would take most of an hour).
//! 4. Flush time for those deltas, and the time of a merging flush.
//! 5. The memory graph at those sizes, in the delta and flushed: SIMILAR links of a new memory
//!    (`similar_for`, part of every write), building the derived graph (first graph call after
//!    a write), and the graph tools on the cached graph.
//!
//! Run: `cargo run --release -p cix-benches --bin memory -- [--sizes 10000,100000]`

use std::time::{Duration, Instant};

use clap::Parser;
use code::search::{Mode, SearchOptions};
use engine::tools::memory::args::AddMemoriesArgs;
use engine::tools::memory::input::MemoryInput;
use format::memory::MemoryRecord;
use memory::search::{Boosts, MemFilter};

#[derive(Parser)]
struct Args {
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    sizes: Vec<usize>,
    /// Single-memory writes timed for the latency figure.
    #[arg(long, default_value_t = 200)]
    writes: usize,
    /// Timed searches per configuration.
    #[arg(long, default_value_t = 300)]
    queries: usize,
    #[arg(long)]
    model: Option<std::path::PathBuf>,
}

const WORDS: &[&str] = &[
    "upload",
    "retry",
    "backoff",
    "timeout",
    "config",
    "parser",
    "token",
    "cache",
    "index",
    "segment",
    "query",
    "vector",
    "latency",
    "deploy",
    "migration",
    "schema",
    "database",
    "index",
    "auth",
    "session",
    "cookie",
    "header",
    "route",
    "handler",
    "queue",
    "worker",
    "thread",
    "lock",
    "mutex",
    "channel",
    "stream",
    "buffer",
    "encoding",
    "utf8",
    "json",
    "yaml",
    "toml",
    "build",
    "release",
    "ci",
    "pipeline",
    "test",
    "flaky",
    "benchmark",
    "profile",
    "memory",
    "leak",
    "allocation",
    "error",
    "panic",
    "logging",
    "metrics",
    "trace",
    "span",
    "user",
    "customer",
    "invoice",
    "payment",
    "refund",
    "email",
    "template",
    "render",
    "layout",
    "css",
    "button",
    "modal",
    "form",
    "validation",
    "api",
    "endpoint",
    "version",
    "deprecated",
    "feature",
    "flag",
    "rollout",
    "experiment",
    "decision",
    "convention",
    "naming",
    "snake_case",
    "camelCase",
    "review",
    "owner",
    "team",
    "oncall",
    "incident",
    "postmortem",
    "alert",
];

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn gauss(&mut self) -> f32 {
        let u1 = ((self.next() >> 11) as f64 / (1u64 << 53) as f64).max(1e-300);
        let u2 = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        ((-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()) as f32
    }
}

fn sentence(r: &mut Rng) -> String {
    let n = 8 + r.below(20);
    (0..n)
        .map(|_| WORDS[r.below(WORDS.len())])
        .collect::<Vec<_>>()
        .join(" ")
}

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3
}

fn record(r: &mut Rng, now: i64) -> MemoryRecord {
    MemoryRecord {
        id: memory::new_id(),
        text: sentence(r),
        category: ["decision", "convention", "bug", "note"][r.below(4)].into(),
        scope: "project".into(),
        entity: WORDS[r.below(20)].into(),
        // 1-3 tags from small vocabularies, so tag pairs (co-occurrence, PMI) exist.
        tags: {
            let mut t = vec![format!("area={}", WORDS[r.below(10)])];
            if r.below(3) > 0 {
                t.push(format!(
                    "kind={}",
                    ["bug", "decision", "howto", "perf"][r.below(4)]
                ));
            }
            if r.below(2) > 0 {
                t.push(["flaky", "security", "todo"][r.below(3)].to_string());
            }
            t.sort();
            t
        },
        source: "agent".into(),
        evidence: vec![],
        code_refs: vec![],
        created_at: now - r.below(90 * 86_400_000) as i64,
        updated_at: now,
        state: "active".into(),
        similar: vec![],
    }
}

/// Unit vectors clustered around 500 centres (like real embeddings).
fn vectors(r: &mut Rng, centres: &[Vec<f32>], n: usize, dim: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n * dim);
    for _ in 0..n {
        let c = &centres[r.below(centres.len())];
        let mut v: Vec<f32> = c.iter().map(|x| x + 0.08 * r.gauss()).collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        out.extend(v);
    }
    out
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let model = kernels::resolve_model_dir(a.model.clone());
    let enc = kernels::Encoder::load(&model, kernels::DeviceChoice::Cpu)?;
    let dim = enc.dim();
    let model_id = enc.model_id().to_string();
    drop(enc);
    let tmp = tempfile::tempdir_in(".")?;
    let new_index = |name: &str| -> anyhow::Result<std::path::PathBuf> {
        let d = tmp.path().join(name);
        std::fs::create_dir_all(&d)?;
        format::IndexManifest::empty(&model_id, dim as u32).commit(&d)?;
        Ok(d)
    };
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    println!("## Memory benchmarks\n");

    // 1. Acknowledgement latency.
    let dir = new_index("writes")?;
    let e = std::sync::Arc::new(engine::Engine::open(&dir, &model)?);
    e.set_flush_at(usize::MAX);
    let mut total = Vec::new();
    let mut embed = Vec::new();
    let mut similar = Vec::new();
    for i in 0..a.writes + 10 {
        let args = AddMemoriesArgs {
            auto_link: false,
            memories: vec![MemoryInput {
                text: sentence(&mut r),
                category: Some("note".into()),
                scope: None,
                entity: Some("bench".into()),
                tags: Some(vec!["kind=bench".into()]),
                source: None,
                evidence: None,
                code_refs: None,
                session: None,
                time: None,
            }],
            debug: true,
        };
        let t = Instant::now();
        let ans = e.add_memories(&args).map_err(|e| anyhow::anyhow!("{e}"))?;
        let d = t.elapsed();
        if i >= 10 {
            total.push(d);
            let d = ans.debug.expect("debug");
            embed.push(Duration::from_secs_f64(d.embed_ms / 1e3));
            similar.push(Duration::from_secs_f64(d.graph_ms / 1e3));
        }
    }
    let rest: Vec<Duration> = total
        .iter()
        .zip(&embed)
        .map(|(t, e)| t.saturating_sub(*e))
        .collect();
    let mut rest = rest;
    println!(
        "add_memories, 1 memory per call ({} calls, 8-27 word texts): acknowledged (fsynced, visible) p50 {:.2} ms, p99 {:.2} ms; of which embedding p50 {:.2} ms; SIMILAR links p50 {:.3} ms; the rest (SIMILAR + WAL append + fsync + publish) p50 {:.3} ms, p99 {:.3} ms",
        total.len(),
        pct(&mut total, 0.5),
        pct(&mut total, 0.99),
        pct(&mut embed, 0.5),
        pct(&mut similar, 0.5),
        pct(&mut rest, 0.5),
        pct(&mut rest, 0.99)
    );

    // 2. Throughput.
    let batches = 10;
    let t = Instant::now();
    for _ in 0..batches {
        let args = AddMemoriesArgs {
            auto_link: false,
            memories: (0..32)
                .map(|_| MemoryInput {
                    text: sentence(&mut r),
                    category: None,
                    scope: None,
                    entity: None,
                    tags: None,
                    source: None,
                    evidence: None,
                    code_refs: None,
                    session: None,
                    time: None,
                })
                .collect(),
            debug: false,
        };
        e.add_memories(&args).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let batched = (batches * 32) as f64 / t.elapsed().as_secs_f64();
    let per_thread = 40;
    let t = Instant::now();
    std::thread::scope(|s| {
        for w in 0..4u64 {
            let e = e.clone();
            s.spawn(move || {
                let mut r = Rng(0x1234_5678 + w);
                for _ in 0..per_thread {
                    let args = AddMemoriesArgs {
                        auto_link: false,
                        memories: vec![MemoryInput {
                            text: sentence(&mut r),
                            category: None,
                            scope: None,
                            entity: None,
                            tags: None,
                            source: None,
                            evidence: None,
                            code_refs: None,
                            session: None,
                            time: None,
                        }],
                        debug: false,
                    };
                    e.add_memories(&args).expect("write");
                }
            });
        }
    });
    let concurrent = (4 * per_thread) as f64 / t.elapsed().as_secs_f64();
    println!(
        "throughput: {batched:.0} memories/s in batches of 32 per call; {concurrent:.0} memories/s from 4 concurrent single-memory writers (2 cores; embedding dominates)"
    );
    drop(e);

    // 3 + 4. Search in the delta vs after flush, and flush time.
    let centres: Vec<Vec<f32>> = (0..500)
        .map(|_| {
            let mut v: Vec<f32> = (0..dim).map(|_| r.gauss()).collect();
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= n);
            v
        })
        .collect();
    let now = memory::now_ms();
    let mut graph_lines = Vec::new();
    println!("\n| memories | where | vector p50 ms | BM25 p50 ms | hybrid p50 ms | hybrid p99 ms |\n|---:|---|---:|---:|---:|---:|");
    for &n in &a.sizes {
        let dir = new_index(&format!("n{n}"))?;
        let e = engine::Engine::open(&dir, &model)?;
        e.set_flush_at(usize::MAX);
        let t = Instant::now();
        for chunk in 0..n.div_ceil(1000) {
            let m = 1000.min(n - chunk * 1000);
            let recs: Vec<MemoryRecord> = (0..m).map(|_| record(&mut r, now)).collect();
            let v = vectors(&mut r, &centres, m, dim);
            e.put_memories(recs, &v)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        let fill = t.elapsed();
        let qv = vectors(&mut r, &centres, a.queries, dim);
        let qt: Vec<String> = (0..a.queries)
            .map(|_| {
                (0..2 + r.below(3))
                    .map(|_| WORDS[r.below(WORDS.len())])
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let run = |where_: &str| -> anyhow::Result<()> {
            let snap = e.snapshot();
            let f = MemFilter::default();
            let b = Boosts {
                entity: None,
                category: None,
                tags: vec![],
                half_life_days: 30.0,
                recency_weight: 0.1,
                now_ms: now,
                when: None,
                sessions: memory::search::NO_SESSION_CONTEXT,
            };
            let mut res = Vec::new();
            for mode in [Mode::Vector, Mode::Lexical, Mode::Hybrid] {
                let o = SearchOptions {
                    mode,
                    ..SearchOptions::default()
                };
                let mut ds = Vec::new();
                for i in 0..a.queries {
                    let t = Instant::now();
                    let h = memory::search::search(
                        &snap.memory,
                        &qt[i],
                        Some(&qv[i * dim..(i + 1) * dim]),
                        &f,
                        &b,
                        &o,
                    )?;
                    ds.push(t.elapsed());
                    std::hint::black_box(h);
                }
                res.push((pct(&mut ds, 0.5), pct(&mut ds, 0.99)));
            }
            println!(
                "| {n} | {where_} | {:.3} | {:.3} | {:.3} | {:.3} |",
                res[0].0, res[1].0, res[2].0, res[2].1
            );
            Ok(())
        };
        run("delta (in memory, exact)")?;
        graph_lines.push(graph_bench(&e, &qv, dim, n, "delta", &mut r)?);
        let t = Instant::now();
        let rep = e
            .flush_memories()
            .map_err(anyhow::Error::msg)?
            .expect("something to flush");
        let flush = t.elapsed();
        run("flushed segment")?;
        graph_lines.push(graph_bench(&e, &qv, dim, n, "flushed", &mut r)?);
        eprintln!(
            "  {n}: fill through the write path (precomputed vectors) {:.1}s; flush {:.2}s ({} memories, segment {})",
            fill.as_secs_f64(),
            flush.as_secs_f64(),
            rep.memories,
            rep.segment.as_deref().unwrap_or("-")
        );
        println!(
            "\nflush of {n} memories into a segment: {:.2} s (BM25 + rkyv + {} + fsync)\n",
            flush.as_secs_f64(),
            if n >= format::vectors::IVF_THRESHOLD {
                "IVF train/add"
            } else {
                "flat vectors"
            }
        );
    }

    println!("\n| memories | where | SIMILAR links of a new memory p50 / p99 ms | graph build ms | aggregate(tag) ms | tag PMI ms | entity network ms | related ms | subgraph(entity, depth 2, 50 nodes) ms | entity path ms |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for l in graph_lines {
        println!("{l}");
    }

    // Merging flush: MERGE_AT segments of 1,000, then one more flush merges them.
    let dir = new_index("merge")?;
    let e = engine::Engine::open(&dir, &model)?;
    e.set_flush_at(usize::MAX);
    let per = 1000;
    for _ in 0..memory::store::MERGE_AT {
        let recs: Vec<MemoryRecord> = (0..per).map(|_| record(&mut r, now)).collect();
        let v = vectors(&mut r, &centres, per, dim);
        e.put_memories(recs, &v)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        e.flush_memories().map_err(anyhow::Error::msg)?;
    }
    let recs: Vec<MemoryRecord> = (0..per).map(|_| record(&mut r, now)).collect();
    let v = vectors(&mut r, &centres, per, dim);
    e.put_memories(recs, &v)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let t = Instant::now();
    let rep = e
        .flush_memories()
        .map_err(anyhow::Error::msg)?
        .expect("flush");
    println!(
        "merging flush: {} delta memories + {} merged from {} segments into one segment in {:.2} s",
        rep.memories,
        rep.merged,
        memory::store::MERGE_AT,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Section 5 for one engine state: a table row.
fn graph_bench(
    e: &engine::Engine,
    qv: &[f32],
    dim: usize,
    n: usize,
    where_: &str,
    r: &mut Rng,
) -> anyhow::Result<String> {
    use engine::tools::graph::*;
    let snap = e.snapshot();
    let mut sims = Vec::new();
    for i in 0..100.min(qv.len() / dim) {
        let id = vec![memory::new_id()];
        let t = Instant::now();
        std::hint::black_box(memory::similar::similar_for(
            &snap.memory,
            &id,
            &qv[i * dim..(i + 1) * dim],
            dim,
            format::vectors::DEFAULT_NPROBE,
        ));
        sims.push(t.elapsed());
    }
    let t = Instant::now();
    let g = memory::graph::MemGraph::build(
        &snap.memory.index,
        &snap.memory.mem,
        &snap.memory.delta,
        &MemFilter::default(),
    );
    let build = t.elapsed().as_secs_f64() * 1e3;
    drop(g);
    // Warm the snapshot's cached graph, then time each tool (median of 5 calls).
    snap.memory.mem_graph(&MemFilter::default());
    let time = |f: &mut dyn FnMut() -> anyhow::Result<()>| -> anyhow::Result<f64> {
        let mut v = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            f()?;
            v.push(t.elapsed());
        }
        Ok(pct(&mut v, 0.5))
    };
    let err = |e: engine::ToolError| anyhow::anyhow!("{e}");
    let filters = |group_by: &str| GraphAggregateArgs {
        group_by: group_by.into(),
        limit: None,
        debug: false,
        category: None,
        scope: None,
        entity: None,
        source: None,
        tags: None,
        tags_mode: None,
        created_after: None,
        created_before: None,
        state: None,
    };
    let agg = time(&mut || e.graph_aggregate(&filters("tag")).map(drop).map_err(err))?;
    let pmi = time(&mut || {
        e.graph_tag_cooccurrence(&GraphTagCooccurrenceArgs {
            with_tag: None,
            min_count: None,
            limit: None,
            debug: false,
            category: None,
            scope: None,
            entity: None,
            source: None,
            tags: None,
            tags_mode: None,
            created_after: None,
            created_before: None,
            state: None,
        })
        .map(drop)
        .map_err(err)
    })?;
    let net = time(&mut || {
        e.graph_entity_network(&GraphEntityNetworkArgs {
            center: None,
            min_count: None,
            limit: None,
            debug: false,
            category: None,
            scope: None,
            entity: None,
            source: None,
            tags: None,
            tags_mode: None,
            created_after: None,
            created_before: None,
            state: None,
        })
        .map(drop)
        .map_err(err)
    })?;
    let g = snap.memory.mem_graph(&MemFilter::default());
    let some_id = g.nodes[r.below(g.nodes.len())].id.clone();
    let related = time(&mut || {
        e.graph_related_memories(&GraphRelatedArgs {
            id: some_id.clone(),
            limit: None,
            max_chars: None,
            debug: false,
        })
        .map(drop)
        .map_err(err)
    })?;
    let sub = time(&mut || {
        e.graph_subgraph(&GraphSubgraphArgs {
            node: format!("entity:{}", WORDS[0]),
            depth: Some(2),
            limit: None,
            edge_types: None,
            debug: false,
        })
        .map(drop)
        .map_err(err)
    })?;
    let path = time(&mut || {
        e.graph_path_between_entities(&GraphPathArgs {
            from: WORDS[1].into(),
            to: WORDS[19].into(),
            max_hops: None,
            debug: false,
        })
        .map(drop)
        .map_err(err)
    })?;
    Ok(format!(
        "| {n} | {where_} | {:.3} / {:.3} | {build:.1} | {agg:.2} | {pmi:.2} | {net:.2} | {related:.2} | {sub:.2} | {path:.2} |",
        pct(&mut sims, 0.5),
        pct(&mut sims, 0.99)
    ))
}
