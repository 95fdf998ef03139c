//! Staleness detection on a scripted edit history of a real repository.
//!
//! 1. Copies a repository (default: this workspace's `crates/`), indexes it (vectors from a
//!    stand-in embedder: staleness needs no embeddings) and opens the real engine.
//! 2. Links ≥ 200 memories to random functions, methods and types (references completed by
//!    symbol id through the code index, as `add_memories` does).
//! 3. Edits the copy, one scenario per file: an edit inside one referenced block; lines
//!    inserted at the top (every block moves); a referenced block cut and pasted at the end
//!    (a pure move); an edit outside every referenced block; deletion of the file; untouched.
//! 4. Ground truth per reference, computed independently of the checker: "changed" when its
//!    original lines (trailing whitespace aside) no longer occur in order anywhere in the new
//!    file (or the file is gone), "unchanged" otherwise.
//! 5. Runs `check_staleness` and compares: detection rate (changed → stale), false stale rate
//!    on pure moves (unchanged → stale), and the check cost per memory with unchanged files
//!    (warm cache: `stat` + block hash) and cold (first read).
//!
//! Run: `cargo run --release -p cix-benches --bin staleness -- [--repo DIR] [--memories 300]`

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Parser;
use engine::tools::code_links::CheckStalenessArgs;
use engine::tools::memory::input::CodeRefInput;
use format::memory::{CodeRef, MemoryRecord};
use memory::coderefs::{check_ref, RefStatus};

#[derive(Parser)]
struct Args {
    /// Repository to copy (default: this workspace's `crates/`).
    #[arg(long)]
    repo: Option<PathBuf>,
    #[arg(long, default_value_t = 300)]
    memories: usize,
    #[arg(long)]
    model: Option<PathBuf>,
}

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
}

/// Embeds nothing: constant unit vectors under the real model's id.
struct Stand {
    id: String,
    dim: usize,
}
impl indexer::build::Embedder for Stand {
    fn model_id(&self) -> &str {
        &self.id
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<(Vec<f32>, usize), indexer::build::EmbedError> {
        let mut v = vec![0f32; texts.len() * self.dim];
        for i in 0..texts.len() {
            v[i * self.dim] = 1.0;
        }
        Ok((v, 0))
    }
}

fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let p = e.path();
        let name = e.file_name();
        if name == "target" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if p.is_dir() {
            copy_dir(&p, &to.join(&name))?;
        } else {
            std::fs::copy(&p, to.join(&name))?;
        }
    }
    Ok(())
}

fn norm_lines(text: &str) -> Vec<String> {
    text.lines().map(|l| l.trim_end().to_string()).collect()
}

/// Whether `block` occurs as consecutive lines of `lines`.
fn occurs(lines: &[String], block: &[String]) -> bool {
    !block.is_empty() && lines.windows(block.len()).any(|w| w == block)
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let model = kernels::resolve_model_dir(a.model.clone());
    let enc = kernels::Encoder::load(&model, kernels::DeviceChoice::Cpu)?;
    let stand = Stand {
        id: enc.model_id().to_string(),
        dim: enc.dim(),
    };
    drop(enc);
    let src = a.repo.clone().unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap()
            .join("crates")
    });
    let tmp = tempfile::tempdir_in(".")?;
    let repo = tmp.path().join("repo");
    copy_dir(&src, &repo)?;
    let index = tmp.path().join("index");
    let opts = indexer::build::BuildOptions::new(vec![repo.clone()], index.clone());
    let t = Instant::now();
    let rep = indexer::build::build(&opts, &stand, &indexer::progress::Progress::silent())?;
    println!(
        "## Staleness on a scripted edit history\n\nrepository: copy of {} ({} files, {} chunks indexed in {:.1} s)",
        src.display(),
        rep.files_indexed,
        rep.chunks_written,
        t.elapsed().as_secs_f64()
    );
    let e = engine::Engine::open(&index, &model)?;
    e.set_flush_at(usize::MAX);

    // 2. Memories linked to random symbols of at least 3 lines.
    let snap = e.snapshot();
    let mut cands: Vec<String> = snap
        .code
        .live_chunks()
        .filter(|&n| {
            let c = snap.code.chunk(n);
            !c.symbol_id.is_empty()
                && c.end_line.to_native() >= c.start_line.to_native() + 2
                && matches!(
                    c.kind.as_str(),
                    "function" | "method" | "struct" | "enum" | "impl" | "trait"
                )
        })
        .map(|n| snap.code.chunk(n).symbol_id.to_string())
        .collect();
    cands.sort();
    cands.dedup();
    let mut r = Rng(0x005E_ED0F_C0DE);
    let now = memory::now_ms();
    let ctx = e.ref_ctx(&snap);
    let mut recs = Vec::new();
    let mut used = std::collections::HashSet::new();
    while recs.len() < a.memories && used.len() < cands.len() {
        let sid = &cands[r.below(cands.len())];
        if !used.insert(sid.clone()) {
            continue;
        }
        let Ok(cr) = (CodeRefInput {
            symbol_id: Some(sid.clone()),
            ..Default::default()
        })
        .complete(&ctx, now) else {
            continue;
        };
        recs.push(MemoryRecord {
            id: memory::new_id(),
            text: format!("note about {sid}"),
            category: "note".into(),
            scope: "project".into(),
            entity: String::new(),
            tags: vec![],
            source: "agent".into(),
            evidence: vec![],
            code_refs: vec![cr],
            created_at: now,
            updated_at: now,
            state: "active".into(),
            similar: vec![],
        });
    }

    let n = recs.len();
    let vecs = {
        let mut v = vec![0f32; n * stand.dim];
        for i in 0..n {
            v[i * stand.dim] = 1.0;
        }
        v
    };
    let refs: Vec<CodeRef> = recs.iter().map(|m| m.code_refs[0].clone()).collect();
    e.put_memories(recs, &vecs)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    // Original blocks, for the ground truth.
    let original: Vec<Vec<String>> = refs
        .iter()
        .map(|cr| {
            let t = std::fs::read_to_string(repo.join(&cr.path)).unwrap_or_default();
            norm_lines(&t)[cr.start_line as usize - 1..cr.end_line as usize].to_vec()
        })
        .collect();

    // Check cost with unchanged files: cold (first read), then warm.
    let snap = e.snapshot();
    let ctx = e.ref_ctx(&snap);
    e.clear_file_cache();
    let t = Instant::now();
    let cold: Vec<RefStatus> = refs.iter().map(|cr| check_ref(&ctx, cr)).collect();
    let cold_us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
    assert!(
        cold.iter().all(|s| *s == RefStatus::Fresh),
        "all fresh before edits"
    );
    let mut warm = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        for cr in &refs {
            std::hint::black_box(check_ref(&ctx, cr));
        }
        warm.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    warm.sort_by(f64::total_cmp);

    // 3. Edits: one scenario per referenced file.
    let mut by_file: HashMap<String, Vec<usize>> = HashMap::new();
    for (i, cr) in refs.iter().enumerate() {
        by_file.entry(cr.path.clone()).or_default().push(i);
    }
    let mut files: Vec<String> = by_file.keys().cloned().collect();
    files.sort();
    let mut scen_count: HashMap<&str, usize> = HashMap::new();
    for f in &files {
        let p = repo.join(f);
        let text = std::fs::read_to_string(&p)?;
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        let ids = &by_file[f];
        let scenario = [
            "edit_inside",
            "shift",
            "move_block",
            "edit_outside",
            "delete",
            "none",
        ][r.below(6)];
        *scen_count.entry(scenario).or_default() += 1;
        match scenario {
            "edit_inside" => {
                let cr = &refs[ids[r.below(ids.len())]];
                let l = cr.start_line as usize - 1
                    + r.below((cr.end_line - cr.start_line + 1) as usize);
                lines[l].push_str(" /* edited */");
            }
            "shift" => {
                for k in 0..1 + r.below(5) {
                    lines.insert(0, format!("// inserted line {k}"));
                }
            }
            "move_block" => {
                // The referenced block with the fewest overlaps, cut and appended.
                let cr = &refs[ids[r.below(ids.len())]];
                let (s, e2) = (cr.start_line as usize - 1, cr.end_line as usize);
                let block: Vec<String> = lines.drain(s..e2).collect();
                lines.push(String::new());
                lines.extend(block);
            }
            "edit_outside" => {
                let covered = |l: usize| {
                    ids.iter().any(|&i| {
                        let cr = &refs[i];
                        (cr.start_line as usize..=cr.end_line as usize).contains(&(l + 1))
                    })
                };
                if let Some(l) = (0..lines.len()).find(|&l| !covered(l)) {
                    lines[l].push_str(" // touched");
                }
            }
            "delete" => {
                std::fs::remove_file(&p)?;
                continue;
            }
            _ => continue,
        }
        std::fs::write(&p, lines.join("\n") + "\n")?;
    }

    // 4. Ground truth.
    let truth: Vec<bool> = refs
        .iter()
        .zip(&original)
        .map(
            |(cr, block)| match std::fs::read_to_string(repo.join(&cr.path)) {
                Err(_) => true,
                Ok(t) => !occurs(&norm_lines(&t), block),
            },
        )
        .collect();

    // 5. The check, persisted.
    let t = Instant::now();
    let rep = e
        .check_staleness(&CheckStalenessArgs {
            ids: None,
            changed_files: None,
            debug: false,
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let check_ms = t.elapsed().as_secs_f64() * 1e3;
    let snap = e.snapshot();
    let ctx = e.ref_ctx(&snap);
    let (mut changed, mut detected, mut unchanged, mut false_stale, mut moved, mut relocated_ok) =
        (0, 0, 0, 0, 0, 0);
    for (cr, &ch) in refs.iter().zip(&truth) {
        let st = check_ref(&ctx, cr);
        if ch {
            changed += 1;
            detected += usize::from(st.is_stale());
        } else {
            unchanged += 1;
            false_stale += usize::from(st.is_stale());
            if st != RefStatus::Fresh {
                moved += 1;
                relocated_ok += usize::from(matches!(st, RefStatus::Relocated { .. }));
            }
        }
    }
    let mut sc: Vec<_> = scen_count.into_iter().collect();
    sc.sort();
    println!(
        "{n} memories with one code reference each, over {} files; scenarios per file: {}",
        files.len(),
        sc.iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "ground truth: {changed} references changed (edited inside, or file deleted), {unchanged} unchanged, of which {moved} moved"
    );
    println!(
        "detection rate: {detected}/{changed} = {:.1}% of changed references marked stale",
        100.0 * detected as f64 / changed.max(1) as f64
    );
    println!(
        "false stale rate: {false_stale}/{unchanged} = {:.1}% of unchanged references marked stale; moved blocks relocated: {relocated_ok}/{moved}",
        100.0 * false_stale as f64 / unchanged.max(1) as f64
    );
    println!(
        "check_staleness over all {n} memories after the edits: {check_ms:.1} ms ({} fresh, {} relocated, {} stale; {} memories written back)",
        rep.fresh, rep.relocated, rep.stale, rep.updated
    );
    println!(
        "check cost per memory with unchanged files: warm cache (stat + block hash) p50 {:.1} µs (best {:.1} µs of 5 rounds), cold (first read) {:.1} µs",
        warm[2], warm[0], cold_us
    );
    Ok(())
}
