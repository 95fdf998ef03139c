//! Push and pull time, bytes and requests for one index: full push into an empty remote, full
//! pull into an empty directory, unchanged pull and push, then one changed file (a new
//! 12-chunk segment and a 12-chunk tombstone file on the first segment, what an incremental
//! `indexer build` writes for a changed file) pushed and pulled incrementally.
//!
//! The index is copied first (hard links: segments are immutable), so the input is not changed.
//! Default input: the 100k-chunk index the latency bench caches. Remote: `--remote URL`
//! (`s3://...` with the `AWS_*` variables, e.g. a moto server) or a fresh `file://` directory.
//! `cargo run --release -p cix-benches --bin sync -- [--index DIR] [--remote URL]`

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Parser;
use format::manifest::{DirLock, TombstoneRef};
use format::records::NO_PARENT;
use format::{ChunkInput, FileInput, IndexManifest, SegmentBuilder, SegmentEntry};

#[derive(Parser)]
struct Args {
    #[arg(
        long,
        default_value = ".cache/latency/n100000-clustered-c2000-s0.8-t120"
    )]
    index: PathBuf,
    /// Remote URL; default: a fresh file:// directory.
    #[arg(long)]
    remote: Option<String>,
}

fn copy_linked(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let (src, dst) = (e.path(), to.join(e.file_name()));
        let name = e.file_name().to_string_lossy().to_string();
        if e.file_type()?.is_dir() {
            if name.starts_with("seg-") {
                std::fs::create_dir_all(&dst)?;
                for f in std::fs::read_dir(&src)? {
                    let f = f?;
                    std::fs::hard_link(f.path(), dst.join(f.file_name()))?;
                }
            }
        } else if name == "MANIFEST" {
            std::fs::copy(&src, &dst)?;
        } else if name.starts_with("tomb-") {
            std::fs::hard_link(&src, &dst)?;
        }
    }
    Ok(())
}

/// One changed file: a new segment of 12 chunks, the first 12 chunks of the first segment
/// tombstoned, MANIFEST committed as the next generation.
fn change_one_file(dir: &Path) -> anyhow::Result<()> {
    let _lock = DirLock::acquire(dir)?;
    let mut m = IndexManifest::read(dir)?;
    let n = 12u32;
    let dim = m.dim as usize;
    let mut vectors = Vec::with_capacity(n as usize * dim);
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..n {
        let row: Vec<f32> = (0..dim)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect();
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        vectors.extend(row.iter().map(|x| x / norm));
    }
    let chunks = (0..n)
        .map(|i| ChunkInput {
            file: 0,
            kind: "function".into(),
            name: format!("changed_{i}"),
            qualified: format!("changed::changed_{i}"),
            symbol_id: String::new(),
            start_line: 1 + 10 * i,
            end_line: 9 + 10 * i,
            start_byte: 400 * i,
            end_byte: 400 * i + 399,
            parent: NO_PARENT,
            content_hash: *blake3::hash(format!("changed {i}").as_bytes()).as_bytes(),
            text: format!("fn changed_{i}() {{ let value = compute_changed({i}); value }}"),
        })
        .collect();
    let builder = SegmentBuilder {
        files: vec![FileInput {
            repo: "synthetic".into(),
            path: "src/changed.rs".into(),
            language: "rust".into(),
            content_hash: *blake3::hash(b"changed file").as_bytes(),
            size: 400 * u64::from(n),
            first_chunk: 0,
            chunk_count: n,
            imports: vec![],
        }],
        chunks,
        vectors,
        ..SegmentBuilder::default()
    };
    let (id, _) = builder.write(dir, &m.model_id, dim)?;
    let first = &mut m.segments[0];
    let bits: roaring::RoaringBitmap = (0..n).collect();
    let file = format::tombstones::file_name(&first.id, m.generation + 1);
    let bytes = format::tombstones::write(&dir.join(&file), &m.model_id, &bits)?;
    first.tombstones = Some(TombstoneRef {
        file,
        blake3: format::blake3_hex(&bytes),
        count: bits.len(),
    });
    m.segments.push(SegmentEntry {
        id,
        chunks: n,
        tombstones: None,
    });
    m.generation += 1;
    m.commit(dir)?;
    Ok(())
}

fn mib(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

fn show_push(what: &str, r: &sync::PushReport) {
    let q = r.requests;
    println!(
        "{what:<22} {:>8.3} s  up {:>9.2} MiB  segments up/reused {}/{}  files {}  requests: put {} get {} head {} delete {}",
        r.seconds, mib(q[5]), r.segments_uploaded, r.segments_reused, r.files_uploaded, q[2], q[0], q[1], q[3]
    );
}

fn show_pull(what: &str, r: &sync::PullReport) {
    let q = r.requests;
    println!(
        "{what:<22} {:>8.3} s  down {:>7.2} MiB ({} bytes)  segments down/present {}/{}  files {}  requests: get {} head {}",
        r.seconds, mib(q[6]), q[6], r.segments_downloaded, r.segments_present, r.files_downloaded, q[0], q[1]
    );
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let tmp = tempfile::tempdir_in(".")?;
    let index = tmp.path().join("index");
    copy_linked(&args.index, &index)
        .with_context(|| format!("copying {}", args.index.display()))?;
    let url = match args.remote {
        Some(url) => url,
        None => {
            std::fs::create_dir_all(tmp.path().join("remote"))?;
            format!(
                "file://{}",
                tmp.path().join("remote").canonicalize()?.display()
            )
        }
    };
    let m = IndexManifest::read(&index)?;
    let chunks: u64 = m.segments.iter().map(|s| u64::from(s.chunks)).sum();
    println!(
        "index {} ({} chunks, {} segments) -> {url}",
        args.index.display(),
        chunks,
        m.segments.len()
    );
    let remote = sync::Remote::open(&url)?;
    let push = |what: &str| -> anyhow::Result<()> {
        let r = sync::push(&index, &remote, &sync::PushOptions::default())?;
        show_push(what, &r);
        Ok(())
    };
    let pulled = tmp.path().join("pulled");
    let pull = |what: &str| -> anyhow::Result<()> {
        let r = sync::pull(&remote, &pulled, &sync::PullOptions::default())?;
        show_pull(what, &r);
        Ok(())
    };
    push("push (full)")?;
    pull("pull (full)")?;
    pull("pull (unchanged)")?;
    push("push (unchanged)")?;
    change_one_file(&index)?;
    push("push (one file)")?;
    pull("pull (one file)")?;
    let ix = format::Index::open(&pulled)?;
    println!(
        "pulled index opens: generation {}, {} live chunks",
        ix.manifest.generation,
        ix.live_chunks()
    );
    Ok(())
}
