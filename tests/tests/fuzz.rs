//! The fuzz targets of `fuzz/targets.rs` on stable, in CI: every seed of the checked-in corpus
//! (`fuzz/corpus/<target>/`), then a seeded mutation loop (bit flips, byte and integer
//! overwrites, truncation, insertion, splices), `CIX_FUZZ_ITERS` inputs per target (default
//! 400) from seed `CIX_FUZZ_SEED`. A panic is a failure; its input is saved under
//! `target/fuzz-crashes/`. Long runs: `cargo +nightly fuzz run <target>` in `fuzz/`.
//!
//! `write_seeds` (ignored; needs the model) regenerates `fuzz/template/` and the corpus from
//! the polyglot fixture.

#[path = "../../fuzz/targets.rs"]
mod targets;

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One mutation of `seed` (sometimes spliced with `other`).
fn mutate(r: &mut Rng, seed: &[u8], other: &[u8]) -> Vec<u8> {
    let mut d = seed.to_vec();
    for _ in 0..1 + r.below(4) {
        let len = d.len();
        match r.below(8) {
            0 if len > 0 => {
                let i = r.below(len);
                d[i] ^= 1 << r.below(8);
            }
            1 if len > 0 => {
                let i = r.below(len);
                d[i] = [0, 0xff, 0x7f, 0x80, 1][r.below(5)];
            }
            2 if len >= 4 => {
                let i = r.below(len - 3);
                let v: u32 = [0, u32::MAX, 0x7fff_ffff, 1, len as u32, 64][r.below(6)];
                d[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
            3 if len > 0 => d.truncate(r.below(len)),
            4 => {
                let i = r.below(len + 1);
                let n = 1 + r.below(16);
                let bytes: Vec<u8> = (0..n).map(|_| r.next() as u8).collect();
                d.splice(i..i, bytes);
            }
            5 if len > 8 => {
                let a = r.below(len);
                let b = (a + 1 + r.below(64)).min(len);
                d.drain(a..b);
            }
            6 if !other.is_empty() && len > 0 => {
                let a = r.below(len);
                let b = r.below(other.len());
                d.truncate(a);
                d.extend_from_slice(&other[b..]);
            }
            _ if len >= 8 => {
                let i = r.below(len - 7);
                let v: u64 = [0, u64::MAX, 1 << 40][r.below(3)];
                d[i..i + 8].copy_from_slice(&v.to_le_bytes());
            }
            _ => d.push(r.next() as u8),
        }
    }
    d
}

fn corpus(name: &str) -> Vec<Vec<u8>> {
    let d = targets::fuzz_dir().join("corpus").join(name);
    let mut v: Vec<_> = std::fs::read_dir(&d)
        .unwrap_or_else(|e| panic!("{}: {e} (run the ignored test write_seeds)", d.display()))
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

#[test]
fn decoders_never_panic_on_seeds_and_mutations() {
    let iters: usize = std::env::var("CIX_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let seed: u64 = std::env::var("CIX_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_cafe);
    let started = std::time::Instant::now();
    let crashes = cix_tests::workspace_root().join("target/fuzz-crashes");
    let mut failures = Vec::new();
    let mut total = 0;
    for (name, target) in targets::TARGETS {
        let seeds = corpus(name);
        assert!(!seeds.is_empty(), "no seeds for {name}");
        let mut r = Rng(seed ^ blake3::hash(name.as_bytes()).as_bytes()[0] as u64 | 1);
        let inputs = seeds.iter().cloned().chain((0..iters).map(|_| {
            let a = &seeds[r.below(seeds.len())];
            let b = &seeds[r.below(seeds.len())];
            mutate(&mut r, a, b)
        }));
        let t = std::time::Instant::now();
        let mut n = 0;
        for input in inputs {
            n += 1;
            let res = std::panic::catch_unwind(AssertUnwindSafe(|| target(&input)));
            if let Err(p) = res {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                std::fs::create_dir_all(&crashes).unwrap();
                let f = crashes.join(format!("{name}-{}", &blake3::hash(&input).to_hex()[..16]));
                std::fs::write(&f, &input).unwrap();
                failures.push(format!("{name}: {msg} (input saved in {})", f.display()));
            }
        }
        total += n;
        eprintln!(
            "fuzz: {name}: {n} inputs ({} seeds) in {:.2} s",
            seeds.len(),
            t.elapsed().as_secs_f64()
        );
    }
    eprintln!(
        "fuzz: {total} inputs, {} panics, {:.1} s",
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "panics:\n{}", failures.join("\n"));
}

/// Regenerates `fuzz/corpus/postings_blocks/` (no model needed; `write_seeds` calls it too).
#[test]
#[ignore = "writes into fuzz/; run by hand after a change of the postings encoding"]
fn write_postings_block_seeds() {
    let d = targets::fuzz_dir().join("corpus").join("postings_blocks");
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    for (name, bytes) in targets::postings_blocks::seeds() {
        std::fs::write(d.join(name), bytes).unwrap();
    }
}

/// Adds `fuzz/corpus/wal/log-v2-<i>`: each first-version seed `log-<i>` under the second
/// version's header (no model needed; `write_seeds` writes both).
#[test]
#[ignore = "writes into fuzz/; run by hand after a change of the memory log's header"]
fn write_wal_header_seeds() {
    let d = targets::fuzz_dir().join("corpus").join("wal");
    for i in 0.. {
        let Ok(b) = std::fs::read(d.join(format!("log-{i}"))) else {
            break;
        };
        let [v2, _] = targets::wal::seeds_of(&b);
        std::fs::write(d.join(format!("log-v2-{i}")), v2).unwrap();
    }
}

/// Regenerates `fuzz/template/{code,memory}/` and `fuzz/corpus/*/` from the polyglot fixture.
#[test]
#[ignore = "writes into fuzz/; run by hand after a format change"]
fn write_seeds() {
    use memory::wal::WalOp;
    let ix = cix_tests::indexed_fixture();
    // Memories: a flushed segment, then a log with records left in it.
    let index = format::Index::open(&ix.index).unwrap();
    let dim = index.manifest.dim as usize;
    let rec = memory::store::recover(&ix.index, index, None);
    let mut w = memory::store::Writer {
        wal: rec.wal,
        flush_at: usize::MAX,
    };
    let mut view = memory::MemoryView::new(Arc::new(rec.index), rec.delta);
    let mut wal_seeds = Vec::new();
    let mut ids = Vec::new();
    for (i, text) in [
        "the hash table in native/hash.c grows at 3/4 load",
        "server.go listens on port 8080; keep it in sync with config.toml",
        "geometry.py: area() assumes counter-clockwise polygons",
    ]
    .iter()
    .enumerate()
    {
        let now = memory::now_ms();
        let id = memory::new_id();
        ids.push(id.clone());
        let r = format::memory::MemoryRecord {
            id,
            text: text.to_string(),
            category: "note".into(),
            scope: "project".into(),
            entity: "polyglot".into(),
            tags: vec!["seed".into()],
            source: "agent".into(),
            evidence: vec![],
            code_refs: vec![],
            created_at: now,
            updated_at: now,
            state: "active".into(),
            similar: vec![],
        };
        let ops = vec![WalOp::Put {
            vector: cix_tests::embed_one(text),
            record: Box::new(r),
        }];
        let lsns = w.wal.as_mut().unwrap().append(&ops).unwrap();
        view = view.with_applied(lsns.into_iter().zip(&ops));
        wal_seeds.push(std::fs::read(ix.index.join(memory::wal::WAL_FILE)).unwrap());
        assert_eq!(view.delta.entries.len(), i + 1);
    }
    {
        let _l = format::manifest::DirLock::acquire(&ix.index).unwrap();
        let mut next = None;
        memory::store::flush(
            &ix.index,
            &view,
            &mut w,
            std::time::Instant::now(),
            |a, _, b, _| next = Some(memory::MemoryView::new(a, b)),
        )
        .unwrap()
        .unwrap();
        view = next.unwrap();
    }
    let ops = vec![WalOp::Delete { id: ids[0].clone() }];
    let lsns = w.wal.as_mut().unwrap().append(&ops).unwrap();
    view = view.with_applied(lsns.into_iter().zip(&ops));
    wal_seeds.push(std::fs::read(ix.index.join(memory::wal::WAL_FILE)).unwrap());
    {
        // Flushing the delete tombstones the memory segment.
        let _l = format::manifest::DirLock::acquire(&ix.index).unwrap();
        memory::store::flush(
            &ix.index,
            &view,
            &mut w,
            std::time::Instant::now(),
            |_, _, _, _| {},
        )
        .unwrap()
        .unwrap();
    }
    assert_eq!(dim, 384);
    drop(w);

    let fuzz = targets::fuzz_dir();
    let _ = std::fs::remove_dir_all(fuzz.join("template"));
    let _ = std::fs::remove_dir_all(fuzz.join("corpus"));
    let put = |target: &str, name: &str, bytes: &[u8]| {
        let d = fuzz.join("corpus").join(target);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), bytes).unwrap();
    };
    for (i, b) in wal_seeds.iter().enumerate() {
        let [v2, v1] = targets::wal::seeds_of(b);
        put("wal", &format!("log-{i}"), &v1);
        put("wal", &format!("log-v2-{i}"), &v2);
    }
    let m = format::IndexManifest::read(&ix.index).unwrap();
    put(
        "manifest",
        "MANIFEST",
        &std::fs::read(ix.index.join("MANIFEST")).unwrap(),
    );
    for (kind, e) in [("code", &m.segments[0]), ("memory", &m.memory_segments[0])] {
        let src = ix.index.join(format::segment::dir_name(&e.id));
        let dst = fuzz.join("template").join(kind);
        cix_tests::copy_dir(&src, &dst);
        for f in std::fs::read_dir(&src).unwrap() {
            let p = f.unwrap().path();
            let n = p.file_name().unwrap().to_string_lossy().to_string();
            let target = match n.as_str() {
                "segment.json" => "segment_json",
                "chunks.rkyv" => "chunks",
                "postings.rkyv" => "postings",
                "graph.rkyv" => "graph",
                "vectors.f32" => "vectors",
                "memories.rkyv" => "memories",
                "texts.bin" => "texts",
                _ => continue,
            };
            put(target, &format!("{kind}-{n}"), &std::fs::read(&p).unwrap());
        }
        if let Some(t) = &e.tombstones {
            put(
                "tombstones",
                &t.file,
                &std::fs::read(ix.index.join(&t.file)).unwrap(),
            );
        }
    }
    write_postings_block_seeds();
    // The format 3 template (`fuzz/compat/v3-code/`, kept) seeds the format 3 chunk decoder.
    put(
        "chunks_v3",
        "v3-code-chunks.rkyv",
        &std::fs::read(fuzz.join("compat/v3-code/chunks.rkyv")).unwrap(),
    );
    // A tombstone file that also deletes files without chunks (the fixture deletes none).
    let tomb_dir = tempfile::tempdir().unwrap();
    let tomb = tomb_dir.path().join("tomb-with-files.del");
    let bytes = format::tombstones::write_with_files(
        &tomb,
        &m.model_id,
        &[1u32, 2, 40].into_iter().collect(),
        &[0u32, 3].into_iter().collect(),
    )
    .unwrap();
    put("tombstones", "tomb-with-files.del", &bytes);
    // A ledger as a commit writes it (the fixture's index has none: nothing deleted or pulled).
    let ledger_dir = tempfile::tempdir().unwrap();
    let mut lm = format::IndexManifest::empty(&m.model_id, m.dim);
    lm.generation = 7;
    for (id, at) in [
        ("0190f3c4-8f7a-7b2e-9c1d-2a3b4c5d6e01", 1_700_000_000_123),
        ("0190f3c4-8f7a-7b2e-9c1d-2a3b4c5d6e02", 1_700_000_000_456),
    ] {
        lm.deleted_memories.insert(id.into(), at);
    }
    lm.pulled_memory_segments
        .push("ab12cd34ef56ab12cd34ef56".into());
    lm.pulled_from = Some(format::manifest::PulledFrom {
        store: "s3://bucket/idx".into(),
        generation: 9,
    });
    lm.commit(ledger_dir.path()).unwrap();
    let ledger = format::manifest::LEDGER_FILE;
    put(
        "ledger",
        ledger,
        &std::fs::read(ledger_dir.path().join(ledger)).unwrap(),
    );
    // The manifest target's index holds the templates: a manifest naming exactly them.
    let mut mm = m.clone();
    for list in [&mut mm.segments, &mut mm.memory_segments] {
        list.truncate(1);
        list[0].tombstones = None;
    }
    put(
        "manifest",
        "MANIFEST-templates",
        &serde_json::to_vec_pretty(&mm).unwrap(),
    );
    assert!(
        Path::new(&fuzz.join("corpus/tombstones")).exists(),
        "no tombstone seed"
    );
}
