//! Fuzz targets: decoders of every file an index holds, each a `target(data: &[u8])` that
//! must never panic (errors are fine). Shared by the cargo-fuzz crate in this directory
//! (`fuzz_targets/*.rs`, nightly + libFuzzer, long local runs) and the stable test
//! `tests/tests/fuzz.rs` (the seed corpus in `fuzz/corpus/<target>/` plus a seeded mutation
//! loop, in CI); both include this file with `#[path]`.
//!
//! Segment files are fuzzed in place: the template segment in `fuzz/template/<kind>/` is
//! copied, the one file replaced by the input, `segment.json` rewritten with the new size and
//! hash (so the input reaches the decoders instead of stopping at the checksum), and the
//! segment opened, verified and read through its public accessors.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A fuzz target: must return (any result) for every input, never panic.
pub type Target = fn(&[u8]);

/// Every target by name (the corpus directory names).
pub const TARGETS: &[(&str, Target)] = &[
    ("wal", wal::target),
    ("manifest", manifest::target),
    ("ledger", ledger::target),
    ("tombstones", tombstones::target),
    ("segment_json", segment_json::target),
    ("chunks", chunks::target),
    ("postings", postings::target),
    ("graph", graph::target),
    ("vectors", vectors::target),
    ("memories", memories::target),
    ("texts", texts::target),
    ("chunks_v3", chunks_v3::target),
    ("postings_blocks", postings_blocks::target),
];

/// Model id and dimension of the template segments (from the code template).
fn model() -> (&'static str, u32) {
    let t = template("code");
    (t.model.as_str(), t.dim)
}

/// `fuzz/` (this file's directory).
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|p| p.join("fuzz/targets.rs").exists())
        .expect("the workspace holds fuzz/targets.rs")
        .join("fuzz")
}

/// A scratch directory for this process (one per target call site, reused).
fn scratch(name: &str) -> PathBuf {
    static ROOT: OnceLock<tempfile::TempDir> = OnceLock::new();
    let root = ROOT.get_or_init(|| tempfile::tempdir().expect("a temporary directory"));
    let d = root
        .path()
        .join(format!("{name}-{:?}", std::thread::current().id()));
    std::fs::create_dir_all(&d).expect("scratch dir");
    d
}

pub mod wal {
    /// The model the target opens logs for (the seeds with a second-version header name it).
    pub fn model() -> memory::wal::LogModel {
        memory::wal::LogModel {
            id: "fuzz-model@0000000000000000".into(),
            dim: 384,
        }
    }

    /// `log` (a log the fixture's server wrote) under the header of both versions: the
    /// second naming [`model`], the first naming none (logs written before headers did).
    pub fn seeds_of(log: &[u8]) -> [Vec<u8>; 2] {
        let len = match format::walhead::parse(log) {
            format::walhead::WalHeader::Complete { len, .. } => len,
            other => panic!("not a log: {other:?}"),
        };
        let with = |header: &[u8]| [header, &log[len..]].concat();
        [
            with(&format::walhead::encode(&model())),
            with(format::walhead::MAGIC_V1),
        ]
    }

    /// The memory log decoder, read-only (`queryd export`) and with recovery (a starting
    /// server: cuts the tail, keeps it aside, then appends after it).
    pub fn target(data: &[u8]) {
        let d = super::scratch("wal");
        let p = d.join(memory::wal::WAL_FILE);
        std::fs::write(&p, data).expect("write the log");
        let ro = memory::wal::read_only(&d);
        let model = model();
        if let Ok((mut w, rec)) = memory::wal::Wal::open(&d, 1, &model) {
            if let Ok(ro) = ro {
                assert_eq!(ro.ops.len(), rec.ops.len(), "export and recovery disagree");
            }
            // A damaged log (a bad record followed by valid ones), and one holding another
            // model's records, refuse appends; a clean or cut one takes them.
            let appended = w
                .append(&[memory::wal::WalOp::Delete { id: "x".into() }])
                .is_ok();
            assert_eq!(
                appended,
                rec.damage.is_none() && !rec.other_model(&model),
                "append vs damage and model"
            );
            drop(w);
            let (_, again) = memory::wal::Wal::open(&d, 1, &model).expect("reopen after an append");
            assert_eq!(again.model, rec.model, "the header changed");
            if appended {
                assert_eq!(again.cut_bytes, 0, "an append after recovery left garbage");
                assert_eq!(again.ops.len(), rec.ops.len() + 1);
            } else {
                assert_eq!(again.ops.len(), rec.ops.len());
                assert_eq!(again.damage.is_some(), rec.damage.is_some());
            }
        }
        for e in std::fs::read_dir(&d).expect("scratch").flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

pub mod manifest {
    use std::sync::OnceLock;

    /// `MANIFEST` parsing, then opening the index it describes (the template segments are in
    /// the directory, so a manifest naming them opens them).
    pub fn target(data: &[u8]) {
        static DIR: OnceLock<std::path::PathBuf> = OnceLock::new();
        let d = DIR.get_or_init(|| {
            let d = super::scratch("manifest");
            for kind in ["code", "memory"] {
                let t = super::template(kind);
                let s = d.join(format::segment::dir_name(&t.id));
                std::fs::create_dir_all(&s).unwrap();
                for (n, b) in &t.files {
                    std::fs::write(s.join(n), b).unwrap();
                }
            }
            d
        });
        std::fs::write(d.join(format::manifest::MANIFEST), data).unwrap();
        if format::IndexManifest::read(d).is_ok() {
            if let Ok(ix) = format::Index::open(d) {
                let _ = ix.live_chunks();
                let _ = ix.live_memories();
            }
        }
    }
}

pub mod ledger {
    /// `memory-ledger.json`, the copy of MANIFEST's memory-only fields that recovery reads.
    pub fn target(data: &[u8]) {
        let d = super::scratch("ledger");
        std::fs::write(d.join(format::manifest::LEDGER_FILE), data).unwrap();
        if let Ok(Some((l, _))) = format::manifest::read_ledger(&d) {
            let _ = l.is_empty();
        }
    }
}

pub mod tombstones {
    /// A tombstone file (its hash taken as recorded, so the bitmap decoder is reached).
    pub fn target(data: &[u8]) {
        let d = super::scratch("tombstones");
        let p = d.join("tomb-x-g1.del");
        std::fs::write(&p, data).unwrap();
        let h = format::blake3_hex(data);
        if let Ok(bits) = format::tombstones::read(&p, super::model().0, &h, 1000) {
            assert!(bits.max().is_none_or(|m| m < 1000));
        }
        if let Ok(d) = format::tombstones::read_with_files(&p, super::model().0, &h, 1000, 50) {
            assert!(d.chunks.max().is_none_or(|m| m < 1000));
            assert!(d.files.max().is_none_or(|m| m < 50));
        }
    }
}

pub mod segment_json {
    /// `segment.json` of the code template replaced by the input.
    pub fn target(data: &[u8]) {
        super::open_with("code", "segment.json", data);
    }
}

pub mod postings_blocks {
    /// A BM25 postings archive on its own (`PostingsArchive` bytes, no header), its document
    /// count taken from its own lengths: the structural check, then every block decoded
    /// (`validate_blocks`), then searches. The template segments hold fewer than 128 chunks,
    /// so no term there fills a block and only this target reaches the bit-packed decoder
    /// (format 5) with full blocks. When every block decodes, block-max MaxScore must return
    /// exactly what exhaustive scoring returns, and every hit is a document of the archive.
    pub fn target(data: &[u8]) {
        format::bm25::with_archive(data, check);
    }

    fn check(p: &format::bm25::ArchivedPostingsArchive) {
        use format::bm25::{validate, validate_blocks};
        let n = p.doc_count();
        let path = std::path::Path::new("postings.rkyv");
        if validate(path, p, n).is_err() {
            return;
        }
        let deep = validate_blocks(path, p, n).is_ok();
        let terms: Vec<String> = p.terms.iter().take(4).map(|t| t.to_string()).collect();
        for q in [terms.join(" "), terms.first().cloned().unwrap_or_default()] {
            let hits = p.search(&q, 10, None, None);
            assert!(hits.iter().all(|h| h.0 < n), "a hit past the documents");
            if deep {
                assert_eq!(hits, p.search_exhaustive(&q, 10, None, None), "{q}");
            }
        }
    }

    /// Seed inputs: the postings of `format::bm25::block_fixture_texts` (terms that fill
    /// several blocks at gap and frequency widths from 0 to 9 bits), packed and in format 4's
    /// varint blocks.
    pub fn seeds() -> Vec<(String, Vec<u8>)> {
        let texts = format::bm25::block_fixture_texts();
        [("packed", true), ("varint", false)]
            .into_iter()
            .map(|(name, packed)| {
                let a = format::bm25::build_for_tests(&texts, packed);
                (name.to_string(), format::bm25::archive_bytes(&a))
            })
            .collect()
    }
}

macro_rules! file_target {
    ($m:ident, $kind:literal, $file:literal) => {
        pub mod $m {
            #[doc = concat!("`", $file, "` of the ", $kind, " template replaced by the input.")]
            pub fn target(data: &[u8]) {
                super::open_with($kind, $file, data);
            }
        }
    };
}
file_target!(chunks, "code", "chunks.rkyv");
file_target!(postings, "code", "postings.rkyv");
file_target!(graph, "code", "graph.rkyv");
file_target!(vectors, "code", "vectors.f32");
file_target!(memories, "memory", "memories.rkyv");
file_target!(texts, "code", "texts.bin");
file_target!(chunks_v3, "v3-code", "chunks.rkyv");

/// A template segment, read from `fuzz/template/<kind>/`.
pub struct Template {
    pub id: String,
    pub files: Vec<(String, Vec<u8>)>,
    pub model: String,
    pub dim: u32,
}

/// The template segment `kind`: `code` or `memory` (`fuzz/template/<kind>/`, written by
/// `write_seeds`), or `v3-code` (`fuzz/compat/v3-code/`: a format 3 code segment, texts inside
/// the records, kept as that build wrote it).
pub fn template(kind: &str) -> &'static Template {
    static T: OnceLock<Vec<(String, Template)>> = OnceLock::new();
    let all = T.get_or_init(|| {
        ["code", "memory", "v3-code"]
            .iter()
            .map(|k| {
                let d = match *k {
                    "v3-code" => fuzz_dir().join("compat").join(k),
                    k => fuzz_dir().join("template").join(k),
                };
                let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&d)
                    .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
                    .map(|e| {
                        let p = e.unwrap().path();
                        let n = p.file_name().unwrap().to_string_lossy().to_string();
                        (n, std::fs::read(&p).unwrap())
                    })
                    .collect();
                files.sort();
                let json = &files.iter().find(|f| f.0 == "segment.json").unwrap().1;
                let meta: format::SegmentMeta = serde_json::from_slice(json).unwrap();
                let t = Template {
                    id: format::segment::segment_id(json),
                    model: meta.model_id.clone(),
                    dim: meta.dim,
                    files,
                };
                (k.to_string(), t)
            })
            .collect()
    });
    &all.iter().find(|t| t.0 == kind).expect("a template kind").1
}

/// Writes the `kind` template with `name` replaced by `data` (its size and hash fixed up in
/// `segment.json`), opens it and reads it through the public accessors.
pub fn open_with(kind: &str, name: &str, data: &[u8]) {
    let d = scratch("segment");
    let t = template(kind);
    let files = &t.files;
    let json = if name == "segment.json" {
        data.to_vec()
    } else {
        let orig = &files.iter().find(|f| f.0 == "segment.json").unwrap().1;
        let mut v: serde_json::Value = serde_json::from_slice(orig).unwrap();
        for f in v["files"].as_array_mut().unwrap() {
            if f["name"] == name {
                f["size"] = data.len().into();
                f["blake3"] = format::blake3_hex(data).into();
            }
        }
        serde_json::to_vec_pretty(&v).unwrap()
    };
    let id = format::segment::segment_id(&json);
    let s = d.join(format::segment::dir_name(&id));
    let _ = std::fs::remove_dir_all(&s);
    std::fs::create_dir_all(&s).unwrap();
    for (n, b) in files {
        let b = if n == name { data } else { b.as_slice() };
        if n != "segment.json" {
            std::fs::write(s.join(n), b).unwrap();
        }
    }
    std::fs::write(s.join("segment.json"), &json).unwrap();
    if let Ok(seg) = format::Segment::open(&d, &id, &t.model, t.dim) {
        exercise(&seg);
    }
    let _ = std::fs::remove_dir_all(&s);
}

/// Reads an opened segment the way searches do.
fn exercise(seg: &format::Segment) {
    let _ = seg.verify();
    let n = seg.meta().chunk_count;
    let t = seg.table();
    for i in 0..n.min(64) {
        let _ = seg.vector(i);
        let _ = (seg.chunk_text(i), seg.chunk_text_len(i));
        for k in format::records::EdgeKind::ALL {
            for dir in [format::graph::Direction::Out, format::graph::Direction::In] {
                let _ = seg.graph().neighbors(i, k, dir).count();
            }
            let _ = seg.graph().external_from(i, k).len();
        }
    }
    let _ = (seg.chunk_text(n), seg.chunk_text_len(n + 1));
    let _ = seg
        .graph()
        .neighbors(
            n + 5,
            format::records::EdgeKind::Calls,
            format::graph::Direction::Out,
        )
        .count();
    for (name, _) in t.names().take(16) {
        let _ = t.name_chunks(name).count();
        let _ = t.symbol_chunks(name).count();
    }
    let _ = t.files_with_path("src/lib.rs").count();
    for q in ["fn", "hash table", "memory fault", "zzz"] {
        let _ = seg.search_bm25(q, 10, None, None);
        let _ = seg.postings().search_exhaustive(q, 10, None, None);
    }
    let q = vec![0.5f32; seg.meta().dim as usize];
    let _ = seg.search_vectors(&q, 5, 4, None, None);
    if let Some(m) = seg.memories() {
        for r in m.memories.iter().take(16) {
            let _ = r.to_record();
        }
    }
}
