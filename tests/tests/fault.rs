//! Fault injection, in the manner of SQLite's and redb's I/O error tests: a scripted workload
//! (fresh build; then memory writes, a flush that merges memory segments, an incremental build
//! as the `reindex` tool runs it, writes with a delete, another flush, writes left in the log,
//! export) is run once to count its durability-relevant file operations
//! ([`format::fsio`]), then once per operation N with the Nth failing: once (a transient
//! EIO/ENOSPC; a failed write leaves half its bytes) and from N on (the disk is gone, which is
//! also a crash at N for everything already written).
//!
//! After each injected failure the index is reopened as a restarted server would: `MANIFEST`
//! and every segment it names open and verify, the log replays, writes are enabled, every
//! acknowledged memory (a write that returned `Ok`) is present exactly once with its text,
//! every acknowledged delete stays deleted, an unacknowledged write is there whole or not at
//! all; then the workload continues (a write, a flush, an incremental build) and is checked
//! again. Runs and violations are counted and printed; any violation fails the test.
//!
//! CI runs a deterministic sample to stay within its time budget: the workload with every N
//! failing once and every 4th N sticky, the fresh build with every 4th N once and every 5th
//! sticky (strides not multiples of 3, the create/write/fsync rhythm of file writes, so every
//! kind is hit; counts printed). `CIX_FAULT_ALL=1` runs every N in both modes.
//! The library APIs are called in-process (what `queryd`'s engine and `indexer build` call),
//! with the real model for the builds.

use std::collections::{BTreeMap, BTreeSet};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use format::fsio::fault::{self, Mode};
use format::manifest::{manifest_mtime, DirLock};
use format::memory::MemoryRecord;
use format::Index;
use memory::store::{self, Writer};
use memory::wal::WalOp;
use memory::MemoryView;

const DIM: usize = 384;

/// What the workload knows about memories: acknowledged ones must be there, unacknowledged
/// ones may be (whole batches only).
#[derive(Clone, Default)]
struct Book {
    /// Acknowledged live memories: id → text.
    acked: BTreeMap<String, String>,
    /// Acknowledged deletes.
    deleted: BTreeSet<String>,
    /// Unacknowledged puts: id → (text, batch).
    maybe: BTreeMap<String, (String, u32)>,
    /// Ids whose unacknowledged delete may have happened.
    maybe_deleted: BTreeSet<String>,
    /// Puts per batch.
    batch_len: BTreeMap<u32, usize>,
    next_batch: u32,
}

/// One run's live state: the index directory, the repository, the open log and the view a
/// server would serve.
struct Run {
    dir: PathBuf,
    repo: PathBuf,
    writer: Option<Writer>,
    view: Option<MemoryView>,
    book: Book,
    /// Steps that returned an error (expected under injection).
    errors: Vec<String>,
}

fn vector(seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v: Vec<f32> = (0..DIM)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 2001) as f32 / 1000.0 - 1.0
        })
        .collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
    v.iter_mut().for_each(|x| *x /= n);
    v
}

fn record(text: String) -> MemoryRecord {
    let now = memory::now_ms();
    MemoryRecord {
        id: memory::new_id(),
        text,
        category: "note".into(),
        scope: "project".into(),
        entity: String::new(),
        tags: vec!["fault".into()],
        source: "agent".into(),
        evidence: vec![],
        code_refs: vec![],
        created_at: now,
        updated_at: now,
        state: "active".into(),
        similar: vec![],
    }
}

impl Run {
    /// Opens the index as a starting server does (recovery included).
    fn open(&mut self) -> Result<(), String> {
        self.writer = None;
        self.view = None;
        let index = Index::open(&self.dir).map_err(|e| format!("open: {e}"))?;
        let rec = store::recover(&self.dir, index, manifest_mtime(&self.dir));
        self.writer = Some(Writer {
            wal: rec.wal,
            flush_at: usize::MAX,
        });
        self.view = Some(MemoryView::new(Arc::new(rec.index), rec.delta));
        Ok(())
    }

    /// One tool call's writes: `puts` new memories and `deletes` ids, logged as one batch.
    fn write(&mut self, puts: usize, deletes: &[String]) -> Result<(), String> {
        let batch = self.book.next_batch;
        self.book.next_batch += 1;
        let mut ops = Vec::new();
        let mut ids = Vec::new();
        for j in 0..puts {
            let text = format!("fault batch {batch} part {j}");
            let r = record(text.clone());
            ids.push((r.id.clone(), text));
            ops.push(WalOp::Put {
                vector: vector(u64::from(batch) * 16 + j as u64),
                record: Box::new(r),
            });
        }
        for id in deletes {
            ops.push(WalOp::Delete { id: id.clone() });
        }
        self.book.batch_len.insert(batch, puts);
        let (Some(w), Some(view)) = (self.writer.as_mut(), self.view.as_ref()) else {
            return Err("not open".into());
        };
        let r = match w.wal.as_mut() {
            Err(e) => Err(format!("writes disabled: {e}")),
            Ok(wal) => wal.append(&ops).map_err(|e| format!("append: {e}")),
        };
        match r {
            Ok(lsns) => {
                self.view = Some(view.with_applied(lsns.into_iter().zip(&ops)));
                for (id, text) in ids {
                    self.book.acked.insert(id, text);
                }
                for id in deletes {
                    self.book.acked.remove(id);
                    self.book.deleted.insert(id.clone());
                }
                Ok(())
            }
            Err(e) => {
                for (id, text) in ids {
                    self.book.maybe.insert(id, (text, batch));
                }
                self.book.maybe_deleted.extend(deletes.iter().cloned());
                Err(e)
            }
        }
    }

    /// A flush as the engine runs it (directory lock, then the writer).
    fn flush(&mut self) -> Result<(), String> {
        let _lock = DirLock::acquire(&self.dir).map_err(|e| format!("lock: {e}"))?;
        let (Some(w), Some(view)) = (self.writer.as_mut(), self.view.as_ref()) else {
            return Err("not open".into());
        };
        let mut installed = None;
        let r = store::flush(&self.dir, view, w, Instant::now(), |ix, _, delta, _| {
            installed = Some(MemoryView::new(ix, delta));
        });
        if let Some(v) = installed {
            self.view = Some(v);
        }
        r.map(|_| ()).map_err(|e| format!("flush: {e}"))
    }

    /// Edits a source file and rebuilds incrementally (what the `reindex` tool runs).
    fn reindex(&mut self, tag: &str) -> Result<(), String> {
        let f = self.repo.join("src/util.rs");
        let mut s = std::fs::read_to_string(&f).unwrap();
        s.push_str(&format!("\npub fn fault_{tag}() -> u32 {{ 7 }}\n"));
        std::fs::write(&f, s).unwrap();
        build(&self.repo, &self.dir)
    }

    /// The export (`queryd export`).
    fn export(&self) -> Result<Vec<MemoryRecord>, String> {
        let x = store::export(&self.dir).map_err(|e| format!("export: {e}"))?;
        match x.damage {
            None => Ok(x.memories),
            Some(d) => Err(format!("export: the memory log is damaged: {d:?}")),
        }
    }

    /// Runs `step`, keeping its error (the workload goes on after a failed step).
    fn step(&mut self, name: &str, step: impl FnOnce(&mut Run) -> Result<(), String>) {
        if let Err(e) = step(self) {
            self.errors.push(format!("{name}: {e}"));
        }
    }
}

fn build(repo: &Path, out: &Path) -> Result<(), String> {
    let opts = indexer::build::BuildOptions::new(vec![repo.to_path_buf()], out.to_path_buf());
    indexer::build::build(
        &opts,
        cix_tests::encoder(),
        &indexer::progress::Progress::silent(),
    )
    .map(|_| ())
    .map_err(|e| format!("build: {e}"))
}

/// The scripted workload after the base state (an index with seven memory segments and a
/// batch left in the log): the first flush merges.
fn main_workload(r: &mut Run) {
    r.step("open", Run::open);
    r.step("write 1", |r| r.write(2, &[]));
    let victim = r
        .book
        .acked
        .keys()
        .next()
        .cloned()
        .into_iter()
        .collect::<Vec<_>>();
    r.step("write 2", |r| r.write(1, &victim));
    r.step("flush 1 (merge)", Run::flush);
    r.step("reindex", |r| r.reindex("a"));
    let victim = r
        .book
        .acked
        .keys()
        .last()
        .cloned()
        .into_iter()
        .collect::<Vec<_>>();
    r.step("write 3", |r| r.write(3, &victim));
    r.step("flush 2", Run::flush);
    r.step("write 4 (left in the log)", |r| r.write(2, &[]));
    r.step("export", |r| r.export().map(|_| ()));
}

/// The fresh-build workload: build, open, write, flush, export.
fn build_workload(r: &mut Run) {
    r.step("build", |r| build(&r.repo, &r.dir));
    r.step("open", Run::open);
    r.step("write 1", |r| r.write(2, &[]));
    r.step("flush 1", Run::flush);
    r.step("write 2", |r| r.write(1, &[]));
    r.step("export", |r| r.export().map(|_| ()));
}

/// What a restarted server must find. Returns the violations.
fn check(r: &mut Run, built: bool) -> Vec<String> {
    let mut v = Vec::new();
    r.writer = None; // releases the log, as a dying server does
    r.view = None;
    let index = match Index::open(&r.dir) {
        Ok(ix) => ix,
        Err(format::FormatError::NotAnIndex { .. }) if !built => return v,
        Err(e) => {
            v.push(format!("reopen: {e}"));
            return v;
        }
    };
    for ls in index.segments.iter().chain(&index.memory) {
        for p in ls.segment.verify() {
            v.push(format!("verify {}: {p}", ls.segment.id()));
        }
    }
    drop(index);
    if let Err(e) = r.open() {
        v.push(format!("restart: {e}"));
        return v;
    }
    if let Some(Err(e)) = r.writer.as_ref().map(|w| &w.wal) {
        v.push(format!("writes disabled after a restart: {e}"));
    }
    v.extend(check_export(r));
    v
}

/// Checks the export against the book (and makes unacknowledged writes that made it facts).
fn check_export(r: &mut Run) -> Vec<String> {
    let mut v = Vec::new();
    let recs = match r.export() {
        Ok(x) => x,
        Err(e) => return vec![e],
    };
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for m in &recs {
        if seen.insert(m.id.clone(), m.text.clone()).is_some() {
            v.push(format!("{} exported twice", m.id));
        }
    }
    let b = &mut r.book;
    for (id, text) in &b.acked {
        match seen.get(id) {
            Some(t) if t == text => {}
            Some(t) => v.push(format!("acknowledged {id} has text {t:?}, not {text:?}")),
            None if b.maybe_deleted.contains(id) => {}
            None => v.push(format!("acknowledged {id} ({text}) lost")),
        }
    }
    for id in &b.deleted {
        if seen.contains_key(id) {
            v.push(format!("deleted {id} came back"));
        }
    }
    let mut parts: BTreeMap<u32, usize> = BTreeMap::new();
    for (id, text) in &seen {
        if b.acked.contains_key(id) {
            continue;
        }
        match b.maybe.get(id) {
            Some((t, batch)) if t == text => *parts.entry(*batch).or_default() += 1,
            _ => v.push(format!("unknown memory {id} ({text})")),
        }
    }
    for (batch, n) in parts {
        if b.batch_len.get(&batch) != Some(&n) {
            v.push(format!("batch {batch} is half there ({n} records)"));
        }
    }
    // From here on, what is there is what was written.
    for (id, text) in &seen {
        if !b.acked.contains_key(id) {
            b.acked.insert(id.clone(), text.clone());
        }
    }
    b.acked.retain(|id, _| seen.contains_key(id));
    b.maybe.clear();
    b.maybe_deleted.clear();
    v
}

/// After the check: the workload goes on (write, flush, incremental build) and is checked
/// again.
fn continue_and_check(r: &mut Run, built: bool) -> Vec<String> {
    let mut v = Vec::new();
    if !built {
        if let Err(e) = build(&r.repo, &r.dir) {
            return vec![format!("continue: {e}")];
        }
        if let Err(e) = r.open() {
            return vec![format!("continue: {e}")];
        }
    }
    for (what, res) in [
        ("write", r.write(1, &[])),
        ("flush", r.flush()),
        ("reindex", r.reindex("b")),
        ("write", r.write(1, &[])),
    ] {
        if let Err(e) = res {
            v.push(format!("continue: {what}: {e}"));
        }
    }
    v.extend(check(r, true));
    v
}

/// A copy of `base` (its index and repository) in a fresh temporary directory.
fn copy_of(base: &Path) -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    cix_tests::copy_dir(base, t.path());
    t
}

struct Tally {
    runs: usize,
    fired: usize,
    violations: Vec<String>,
    by_kind: BTreeMap<String, usize>,
}

/// Counts the operations of `workload` on a copy of `base`, then runs it once per operation
/// and mode with that operation failing.
fn inject_all(
    name: &str,
    base: &Path,
    book: &Book,
    built: bool,
    workload: fn(&mut Run),
    strides: [usize; 2],
    t: &mut Tally,
) {
    let strides = if std::env::var_os("CIX_FAULT_ALL").is_some() {
        [1, 1]
    } else {
        strides
    };
    let fresh = |tmp: &tempfile::TempDir| Run {
        dir: tmp.path().join("index"),
        repo: tmp.path().join("polyglot"),
        writer: None,
        view: None,
        book: book.clone(),
        errors: Vec::new(),
    };
    let tmp = copy_of(base);
    let mut r = fresh(&tmp);
    fault::scope(Some(tmp.path()));
    fault::count(true);
    workload(&mut r);
    let ops = fault::seen();
    let log = fault::log();
    fault::reset();
    assert!(
        r.errors.is_empty(),
        "{name}: clean run failed: {:?}",
        r.errors
    );
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for s in &log {
        *kinds.entry(format!("{:?}", s.kind)).or_default() += 1;
    }
    eprintln!("fault suite: {name}: {ops} operations per run {kinds:?}");
    assert!(ops > 20, "{name}: the workload should do I/O through fsio");
    drop(r);
    for (mode, stride) in [Mode::Once, Mode::Sticky].into_iter().zip(strides) {
        for n in (1..=ops).step_by(stride) {
            let tmp = copy_of(base);
            let mut r = fresh(&tmp);
            fault::scope(Some(tmp.path()));
            fault::arm(None, n, mode);
            let res = std::panic::catch_unwind(AssertUnwindSafe(|| {
                workload(&mut r);
                let failed = fault::failed();
                fault::reset();
                let reached = built || !r.errors.iter().any(|e| e.starts_with("build"));
                let mut v = check(&mut r, reached);
                let open = built || r.writer.is_some();
                v.extend(continue_and_check(&mut r, open));
                (failed, v)
            }));
            fault::reset();
            t.runs += 1;
            let what = format!("{name} {mode:?} op {n}");
            match res {
                Ok((failed, v)) => {
                    if let Some(f) = &failed {
                        t.fired += 1;
                        *t.by_kind.entry(format!("{:?}", f.kind)).or_default() += 1;
                    }
                    let at = failed.map_or("nothing failed".to_string(), |f| {
                        format!(
                            "{:?} {}",
                            f.kind,
                            f.path.strip_prefix(tmp.path()).unwrap_or(&f.path).display()
                        )
                    });
                    for x in v {
                        let x = format!("{what} ({at}; errors {:?}): {x}", r.errors);
                        eprintln!("fault suite: VIOLATION {x}");
                        t.violations.push(x);
                    }
                }
                Err(p) => {
                    let msg = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    t.violations.push(format!("{what}: panic: {msg}"));
                }
            }
        }
    }
}

#[test]
fn every_failed_file_operation_keeps_acknowledged_memories() {
    let started = Instant::now();
    let mut t = Tally {
        runs: 0,
        fired: 0,
        violations: Vec::new(),
        by_kind: BTreeMap::new(),
    };

    // Phase 1: a fresh build (the repository only).
    let base1 = tempfile::tempdir().unwrap();
    cix_tests::fixture_copy(base1.path());
    inject_all(
        "fresh build",
        base1.path(),
        &Book::default(),
        false,
        build_workload,
        [4, 5],
        &mut t,
    );

    // Phase 2: an index with seven memory segments and a batch in the log.
    let base2 = tempfile::tempdir().unwrap();
    let repo = cix_tests::fixture_copy(base2.path());
    let mut r = Run {
        dir: base2.path().join("index"),
        repo,
        writer: None,
        view: None,
        book: Book::default(),
        errors: Vec::new(),
    };
    build(&r.repo, &r.dir).unwrap();
    r.open().unwrap();
    for _ in 0..store::MERGE_AT - 1 {
        r.write(2, &[]).unwrap();
        r.flush().unwrap();
    }
    r.write(2, &[]).unwrap();
    assert_eq!(
        Index::open(&r.dir).unwrap().memory.len(),
        store::MERGE_AT - 1
    );
    let book = r.book.clone();
    drop(r);
    inject_all(
        "workload",
        base2.path(),
        &book,
        true,
        main_workload,
        [1, 4],
        &mut t,
    );

    eprintln!(
        "fault suite: {} runs, {} failures injected {:?}, {} violations, {:.1} s",
        t.runs,
        t.fired,
        t.by_kind,
        t.violations.len(),
        started.elapsed().as_secs_f64()
    );
    for v in t.violations.iter().take(40) {
        eprintln!("  {v}");
    }
    assert!(t.violations.is_empty(), "{} violations", t.violations.len());
    assert_eq!(t.fired, t.runs, "every run should hit its armed operation");
}
