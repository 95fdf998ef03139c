//! Damaged indexes: a code segment that fails to open is left out (memories and the healthy
//! segments are still served), bytes changed under the live maps never panic or leak invalid
//! UTF-8, and the verifier quarantines segments whose checksums fail (a corrupt
//! `vectors.f32` included, which the open-time checks do not read).

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use engine::tools::status::StatusArgs;
use serde_json::json;

use crate::common::{build_index, call, engine, indexed_fixture, list_all, search};

/// The code segment directories named by the index's MANIFEST, in order.
fn code_segments(index: &Path) -> Vec<(String, PathBuf)> {
    format::IndexManifest::read(index)
        .unwrap()
        .segments
        .iter()
        .map(|s| (s.id.clone(), index.join(format!("seg-{}", s.id))))
        .collect()
}

/// Overwrites bytes of `path` in place (same inode: live memory maps see the change).
fn patch(path: &Path, offset: usize, bytes: &[u8]) {
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.seek(SeekFrom::Start(offset as u64)).unwrap();
    f.write_all(bytes).unwrap();
    f.sync_all().unwrap();
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[test]
fn a_damaged_code_segment_is_left_out_and_the_rest_is_still_served() {
    let ix = indexed_fixture();
    {
        let e = engine(&ix.index);
        call(
            &e,
            "add_memories",
            json!({"memories": [{"text": "The dictionary normalises words before lookup.", "category": "fact"}]}),
        )
        .unwrap();
        e.flush_memories().unwrap();
        call(
            &e,
            "add_memories",
            json!({"memories": [{"text": "Zebra stripes are painted by the canvas helper.", "category": "fact"}]}),
        )
        .unwrap();
    }
    // A second code segment, holding only the new file.
    std::fs::write(
        ix.repo.join("src/zebra.rs"),
        "/// Paints zebra stripes onto a canvas.\npub fn zebra_stripe_painter(width: u32) -> u32 {\n    width * 2\n}\n",
    )
    .unwrap();
    build_index(&ix.repo, &ix.index);
    let segs = code_segments(&ix.index);
    assert_eq!(segs.len(), 2, "{segs:?}");
    // Damage the first one's graph (a copy, as a disk error would leave it).
    // In place (an engine's background populate may still hold the maps).
    let graph = segs[0].1.join("graph.rkyv");
    let bytes = std::fs::read(&graph).unwrap();
    let mid = bytes.len() / 2;
    let flipped: Vec<u8> = bytes[mid..mid + 16].iter().map(|b| b ^ 0xA5).collect();
    patch(&graph, mid, &flipped);

    // The server starts anyway and says what it left out.
    let e = engine(&ix.index);
    let st = e.index_status(&StatusArgs::default()).unwrap();
    assert_eq!(st.health, "degraded");
    assert_eq!(st.left_out.len(), 1, "{:?}", st.left_out);
    assert_eq!(st.left_out[0].id, segs[0].0);
    assert!(
        st.left_out[0].path.contains(&format!("seg-{}", segs[0].0)),
        "{:?}",
        st.left_out[0]
    );
    assert_eq!(st.segments.len(), 1);
    // The healthy segment and every memory are served.
    let r = e.search_code(&search("zebra stripes canvas")).unwrap();
    assert!(
        r.results
            .iter()
            .any(|h| h.symbol.path.ends_with("zebra.rs")),
        "{:?}",
        r.results
    );
    assert_eq!(list_all(&e).len(), 2);
    // Export does not need the code segments.
    assert_eq!(memory::store::export(&ix.index).unwrap().memories.len(), 2);
    // The indexer still refuses to build on it (strict open), naming the file.
    let strict = format::Index::open(&ix.index).unwrap_err().to_string();
    assert!(
        strict.contains("graph.rkyv") || strict.contains(&segs[0].0),
        "{strict}"
    );
}

#[test]
fn a_segment_changed_under_the_live_map_never_panics_and_is_quarantined() {
    let ix = indexed_fixture();
    let e = engine(&ix.index);
    let hits = e.search_code(&search("normalize a word")).unwrap();
    let id = hits.results[0].symbol.symbol_id.clone();
    let (seg_id, seg_dir) = code_segments(&ix.index).remove(0);
    assert!(e.verify_pass().is_empty(), "a fresh index verifies");

    // Graph: the call targets become node ids far past the last node (bytes of the edge
    // array, found through the archive the engine maps: the payload ends with the root).
    let graph = seg_dir.join("graph.rkyv");
    let len = std::fs::metadata(&graph).unwrap().len() as usize;
    let (at, n) = {
        let snap = e.snapshot();
        let g = snap.code.index.segments[0].segment.graph();
        let root = g as *const format::graph::ArchivedGraphArchive as usize;
        let payload_start =
            root + std::mem::size_of::<format::graph::ArchivedGraphArchive>() - (len - 64);
        let t = &g.kinds[format::records::EdgeKind::Calls as usize]
            .forward
            .targets;
        assert!(!t.is_empty(), "the fixture has calls");
        (64 + (t.as_ptr() as usize - payload_start), t.len())
    };
    patch(&graph, at, &0xFFFF_FFF0u32.to_le_bytes().repeat(n));
    // Text: a byte of the chunk text becomes invalid UTF-8.
    let chunks = seg_dir.join("texts.bin");
    let at = find(
        &std::fs::read(&chunks).unwrap(),
        b"strips surrounding punctuation",
    )
    .expect("the doc comment is stored in texts.bin");
    patch(&chunks, at, &[0xFF]);

    // Every graph and symbol tool answers (an answer or a tool error), never a panic, and
    // what reaches JSON is valid UTF-8.
    for (tool, args) in [
        ("find_callers", json!({"symbol": id})),
        ("find_callees", json!({"symbol": id})),
        ("impact_analysis", json!({"symbol": id})),
        ("explain_code", json!({"symbol": id})),
        ("get_symbol", json!({"symbol": id})),
        (
            "search_code",
            json!({"query": "strips surrounding punctuation"}),
        ),
    ] {
        let out = match call(&e, tool, args) {
            Ok(v) | Err(v) => v,
        };
        let text = serde_json::to_string(&out).unwrap();
        assert!(
            std::str::from_utf8(text.as_bytes()).is_ok(),
            "{tool} leaked invalid UTF-8"
        );
    }
    let st = e.index_status(&StatusArgs::default()).unwrap();
    assert!(
        st.problems
            .iter()
            .any(|p| p.kind == "text" || p.kind == "panic"),
        "the damaged text was reported: {:?}",
        st.problems
    );

    // The verifier catches the change and stops serving the segment.
    assert_eq!(e.verify_pass(), vec![seg_id.clone()]);
    let st = e.index_status(&StatusArgs::default()).unwrap();
    assert_eq!(st.health, "degraded");
    assert_eq!(st.left_out.len(), 1);
    assert_eq!(st.left_out[0].id, seg_id);
    assert!(
        st.left_out[0].error.contains("checksum"),
        "{:?}",
        st.left_out
    );
    assert!(st.segments.is_empty());
    assert!(e
        .search_code(&search("normalize a word"))
        .unwrap()
        .results
        .is_empty());
}

#[test]
fn a_corrupt_vectors_file_is_caught_by_the_verifier() {
    let ix = indexed_fixture();
    let (seg_id, seg_dir) = code_segments(&ix.index).remove(0);
    let vectors = seg_dir.join("vectors.f32");
    let mut bytes = std::fs::read(&vectors).unwrap();
    // NaN rows: what a bit flip in exponents looks like to vector search.
    let n = bytes.len();
    for b in &mut bytes[64..n.min(64 + 4096)] {
        *b = 0xFF;
    }
    std::fs::write(&vectors, &bytes).unwrap();
    // Open-time checks do not read vectors (sizes match): the server starts and serves.
    let e = engine(&ix.index);
    assert_eq!(e.index_status(&StatusArgs::default()).unwrap().health, "ok");
    // The first verifier pass quarantines the segment and says why.
    assert_eq!(e.verify_pass(), vec![seg_id.clone()]);
    let st = e.index_status(&StatusArgs::default()).unwrap();
    assert_eq!(st.health, "degraded");
    assert!(
        st.left_out[0].path.ends_with("vectors.f32"),
        "{:?}",
        st.left_out
    );
    // A second pass finds nothing new.
    assert!(e.verify_pass().is_empty());
}

/// A quarantined segment repaired on disk is served again without a restart, whichever way
/// it was repaired: the damaged directory moved aside and `indexer pull` (a fresh copy under
/// the same name) or `indexer build --rebuild` (the same content address written again after garbage
/// collection removed the damaged one). Before, the server kept the segment out (the
/// quarantine was by id) or, had the damage gone unnoticed, kept serving the old maps.
#[test]
fn a_repaired_segment_is_served_again_without_a_restart() {
    let ix = indexed_fixture();
    let (seg_id, seg_dir) = code_segments(&ix.index).remove(0);
    let pristine = ix.tmp.path().join("pristine");
    cix_tests::copy_dir(&seg_dir, &pristine);
    // In place: the server maps the file, and a rewrite (truncate, then write) under the map
    // is a SIGBUS for whoever touches a page in between (the background populate did, once).
    let damage = || {
        let vectors = seg_dir.join("vectors.f32");
        let n = std::fs::metadata(&vectors).unwrap().len() as usize;
        patch(&vectors, 64, &vec![0xFF; (n - 64).min(4096)]);
    };
    let served = |e: &engine::Engine| {
        let st = e.index_status(&StatusArgs::default()).unwrap();
        (st.health, st.left_out.len(), st.segments.len())
    };
    let e = engine(&ix.index);
    let before = e.search_code(&search("normalize a word")).unwrap().results;
    assert!(!before.is_empty());
    let ids = |r: &[engine::tools::search::CodeHit]| -> Vec<String> {
        r.iter().map(|h| h.symbol.symbol_id.clone()).collect()
    };

    for repair in ["pull", "rebuild"] {
        damage();
        assert_eq!(e.verify_pass(), vec![seg_id.clone()], "{repair}");
        assert_eq!(served(&e), ("degraded", 1, 0), "{repair}");
        match repair {
            // What the quarantine's message says for a pulled index: the damaged directory
            // moved aside, then `indexer pull`, which fetches the segment the index lacks
            // (here as `sync::pull` does it: the store's copy staged and renamed into place,
            // a new generation committed; sync_e2e runs the real pull).
            "pull" => {
                let aside = format::recover::move_aside(&seg_dir).unwrap();
                let staged = ix.tmp.path().join("staged");
                cix_tests::copy_dir(&pristine, &staged);
                std::fs::rename(&staged, &seg_dir).unwrap();
                let mut m = format::IndexManifest::read(&ix.index).unwrap();
                m.generation += 1;
                m.commit(&ix.index).unwrap();
                assert!(aside.join("vectors.f32").exists());
            }
            _ => cix_tests::rebuild_index(&ix.repo, &ix.index),
        }
        // The same content address: the repair wrote the same segment again.
        assert_eq!(code_segments(&ix.index)[0].0, seg_id, "{repair}");
        assert!(e.reload_if_changed().unwrap(), "{repair}");
        assert_eq!(served(&e), ("ok", 0, 1), "{repair}");
        // The new files verify, and search finds what it found before the damage.
        assert!(e.verify_pass().is_empty(), "{repair}");
        let after = e.search_code(&search("normalize a word")).unwrap().results;
        assert_eq!(ids(&after), ids(&before), "{repair}");
    }
}

/// A memory log whose last record was written whole but fails its checksum (a bit flip in an
/// acknowledged write, as far as anyone can tell) is cut as a torn tail is, and reported in
/// `index_status` (degraded), not only on stderr; a tail cut short by a crash is not.
#[test]
fn a_damaged_last_log_record_is_reported_not_only_cut() {
    let ix = indexed_fixture();
    {
        let e = engine(&ix.index);
        for text in ["The first fact to keep.", "The second fact to keep."] {
            call(
                &e,
                "add_memories",
                json!({"memories": [{"text": text, "category": "fact"}]}),
            )
            .unwrap();
        }
    }
    let wal = ix.index.join(memory::wal::WAL_FILE);
    let full = std::fs::read(&wal).unwrap();
    // Cut short (a crash mid-append): not reported.
    std::fs::write(&wal, &full[..full.len() - 7]).unwrap();
    let e = engine(&ix.index);
    let st = e.index_status(&StatusArgs::default()).unwrap();
    assert!(st.problems.is_empty(), "{:?}", st.problems);
    assert_eq!(list_all(&e).len(), 1);
    drop(e);
    // Whole, one bit flipped in its last bytes (the vector): cut and reported.
    let mut b = full.clone();
    let n = b.len();
    b[n - 3] ^= 0x10;
    std::fs::write(&wal, &b).unwrap();
    let e = engine(&ix.index);
    let st = e.index_status(&StatusArgs::default()).unwrap();
    assert_eq!(st.health, "degraded");
    let p = st
        .problems
        .iter()
        .find(|p| p.kind == "memory_log")
        .unwrap_or_else(|| panic!("{:?}", st.problems));
    assert!(p.detail.contains("acknowledged"), "{}", p.detail);
    assert_eq!(list_all(&e).len(), 1);
}

/// A second server, reading the log another one holds, that cannot read it says so in
/// `index_status` (degraded): the log's unflushed memories are not served there. Before, it
/// served without them and said `ok`.
#[test]
fn a_second_server_that_cannot_read_the_log_says_so() {
    let ix = indexed_fixture();
    let first = engine(&ix.index);
    call(
        &first,
        "add_memories",
        json!({"memories": [{"text": "An unflushed fact.", "category": "fact"}]}),
    )
    .unwrap();
    let second = engine(&ix.index);
    let st = second.index_status(&StatusArgs::default()).unwrap();
    assert!(st.memories.starts_with("read-only"), "{}", st.memories);
    assert!(st.problems.is_empty(), "{:?}", st.problems);
    assert_eq!(list_all(&second).len(), 1);
    drop(second);
    // The log's magic overwritten while the first server holds it.
    let wal = ix.index.join(memory::wal::WAL_FILE);
    patch(&wal, 0, b"XXXXXXXX");
    let second = engine(&ix.index);
    let st = second.index_status(&StatusArgs::default()).unwrap();
    assert_eq!(st.health, "degraded");
    let p = st
        .problems
        .iter()
        .find(|p| p.kind == "memory_log")
        .unwrap_or_else(|| panic!("{:?}", st.problems));
    assert!(p.detail.contains("not served here"), "{}", p.detail);
    // Readable again: the next read of the log clears it (it says what is true now).
    let magic = std::fs::read(&wal).unwrap();
    let good = {
        let mut b = magic.clone();
        b[..8].copy_from_slice(b"CIXWAL02");
        b
    };
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&wal, &good).unwrap();
    assert!(second.tail_memory_log().unwrap());
    let st = second.index_status(&StatusArgs::default()).unwrap();
    assert!(st.problems.is_empty(), "{:?}", st.problems);
    assert_eq!(st.health, "ok");
    assert_eq!(list_all(&second).len(), 1);
    drop(first);
}

/// A flush never writes the log's memories under a model they were not embedded with: when
/// MANIFEST names another model than the served one (an index pulled or rebuilt under the
/// server), the flush is refused, nothing is committed and the log keeps the memory, which a
/// server of the right model then serves.
#[test]
fn a_flush_under_another_model_is_refused_and_the_log_keeps_the_memory() {
    let ix = indexed_fixture();
    let manifest = format::IndexManifest::read(&ix.index).unwrap();
    let log = ix.index.join(format::manifest::MEMORY_WAL_FILE);
    {
        let e = engine(&ix.index);
        call(
            &e,
            "add_memories",
            json!({"memories": [{"text": "Releases are cut from the main branch on Fridays.", "category": "process"}]}),
        )
        .unwrap();
        let logged = std::fs::read(&log).unwrap();
        let mut other = manifest.clone();
        other.model_id = "another-model".into();
        other.generation += 1;
        other.commit(&ix.index).unwrap();
        match e.flush_memories() {
            Err(memory::store::FlushError::ModelChanged { now, .. }) => {
                assert_eq!(now, "another-model")
            }
            other => panic!("expected a refused flush, got {other:?}"),
        }
        let after = format::IndexManifest::read(&ix.index).unwrap();
        assert_eq!(after.generation, other.generation);
        assert!(after.memory_segments.is_empty() && after.memory_lsn == 0);
        assert_eq!(std::fs::read(&log).unwrap(), logged);
        // Further writes are refused (they could never be flushed here, and a server of the
        // other model would take their vectors for its own), and say why; the log is as it was.
        let err = call(
            &e,
            "add_memories",
            json!({"memories": [{"text": "Deploys need two approvals.", "category": "process"}]}),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("another-model"), "{err}");
        assert!(e
            .memory_writes_disabled()
            .unwrap()
            .contains("another-model"));
        assert_eq!(std::fs::read(&log).unwrap(), logged);
        // MANIFEST naming the served model again (seen by the watcher's reload) lifts it.
        manifest.commit(&ix.index).unwrap();
        let _ = e.reload_if_changed();
        assert_eq!(e.memory_writes_disabled(), None);
    }
    manifest.commit(&ix.index).unwrap();
    let e = engine(&ix.index);
    let texts: Vec<String> = list_all(&e)
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts, ["Releases are cut from the main branch on Fridays."]);
    e.flush_memories().unwrap();
}

/// Log records whose vectors do not fit the index (embedded with another model) are not
/// dropped: memory writes are disabled so that no flush truncates the log past them, the
/// index reports itself degraded with the way out, the other memories are served, and
/// `queryd export` still writes every one of them.
#[test]
fn log_records_of_another_dimension_stop_writes_and_are_kept() {
    let ix = indexed_fixture();
    {
        let e = engine(&ix.index);
        call(
            &e,
            "add_memories",
            json!({"memories": [{"text": "The cache is warmed at start-up.", "category": "fact"}]}),
        )
        .unwrap();
    }
    let m = format::manifest::IndexManifest::read(&ix.index).unwrap();
    let served = memory::wal::LogModel {
        id: m.model_id,
        dim: m.dim,
    };
    let (mut wal, rec) = memory::wal::Wal::open(&ix.index, 1, &served).unwrap();
    let mut record = match &rec.ops[..] {
        [(_, memory::wal::WalOp::Put { record, .. })] => record.clone(),
        other => panic!("expected one logged put, got {other:?}"),
    };
    record.id = "0193a000-0000-7000-8000-000000000001".into();
    record.text = "Written by a server of another model.".into();
    wal.append(&[memory::wal::WalOp::Put {
        record,
        vector: vec![0.125; 8],
    }])
    .unwrap();
    drop(wal);
    let log = ix.index.join(format::manifest::MEMORY_WAL_FILE);
    let logged = std::fs::read(&log).unwrap();

    let e = engine(&ix.index);
    assert_eq!(e.memory_access(), memory::store::LogAccess::Disabled);
    let why = e.memory_writes_disabled().unwrap();
    assert!(
        why.contains("another dimension") && why.contains("queryd export"),
        "{why}"
    );
    let status = call(&e, "index_status", json!({})).unwrap();
    assert_eq!(status["health"], "degraded", "{status}");
    let texts: Vec<String> = list_all(&e)
        .iter()
        .map(|m| m["text"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(texts, ["The cache is warmed at start-up."]);
    assert!(call(
        &e,
        "add_memories",
        json!({"memories": [{"text": "refused while the log is kept"}]}),
    )
    .is_err());
    assert!(e.flush_memories().is_err());
    drop(e);
    assert_eq!(std::fs::read(&log).unwrap(), logged);
    let exported = memory::store::export(&ix.index).unwrap();
    let mut ids: Vec<&str> = exported.memories.iter().map(|m| m.text.as_str()).collect();
    ids.sort();
    assert_eq!(
        ids,
        [
            "The cache is warmed at start-up.",
            "Written by a server of another model."
        ]
    );
}

/// A log whose header names another model keeps its records out of search even when that
/// model has the index's dimension (vectors of the same length that mean something else):
/// writes are disabled with the way out, the log is kept byte for byte, and `queryd export`
/// still writes every memory. Once the log is moved away, writes resume under a header that
/// names the index's model.
#[test]
fn a_log_of_another_model_of_the_same_dimension_is_kept_out_of_search() {
    let ix = indexed_fixture();
    {
        let e = engine(&ix.index);
        call(
            &e,
            "add_memories",
            json!({"memories": [{"text": "Deploys need two approvals.", "category": "fact"}]}),
        )
        .unwrap();
    }
    let m = format::manifest::IndexManifest::read(&ix.index).unwrap();
    let served = format::walhead::LogModel {
        id: m.model_id.clone(),
        dim: m.dim,
    };
    assert_eq!(
        format::manifest::memory_wal_model(&ix.index),
        Some(served.clone())
    );
    // The same records under a header naming another model of the same dimension.
    let log = ix.index.join(format::manifest::MEMORY_WAL_FILE);
    let b = std::fs::read(&log).unwrap();
    let hlen = format::walhead::encode(&served).len();
    let other = format::walhead::LogModel {
        id: "another-model@00000000deadbeef".into(),
        dim: m.dim,
    };
    let mut logged = format::walhead::encode(&other);
    logged.extend_from_slice(&b[hlen..]);
    std::fs::write(&log, &logged).unwrap();
    assert_eq!(format::manifest::memory_wal_model(&ix.index), Some(other));
    assert!(format::manifest::memory_wal_holds_records(&ix.index));

    let e = engine(&ix.index);
    assert_eq!(e.memory_access(), memory::store::LogAccess::Disabled);
    let why = e.memory_writes_disabled().unwrap();
    assert!(
        why.contains("another-model@00000000deadbeef") && why.contains("queryd export"),
        "{why}"
    );
    let status = call(&e, "index_status", json!({})).unwrap();
    assert_eq!(status["health"], "degraded", "{status}");
    assert!(
        list_all(&e).is_empty(),
        "a record of another model was served"
    );
    assert!(call(
        &e,
        "add_memories",
        json!({"memories": [{"text": "refused while the log is kept"}]}),
    )
    .is_err());
    // Nothing to flush (the delta is empty), and nothing cut from the log.
    assert!(!matches!(e.flush_memories(), Ok(Some(_))));
    drop(e);
    assert_eq!(std::fs::read(&log).unwrap(), logged);
    let exported = memory::store::export(&ix.index).unwrap();
    let texts: Vec<&str> = exported.memories.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["Deploys need two approvals."]);

    // Moved away (after the export): a new log names the index's model, writes work.
    std::fs::rename(&log, ix.index.join("memory.wal.other-model")).unwrap();
    let e = engine(&ix.index);
    assert!(e.memory_writes_disabled().is_none());
    call(
        &e,
        "add_memories",
        json!({"memories": [{"text": "Written under the index's model."}]}),
    )
    .unwrap();
    assert_eq!(format::manifest::memory_wal_model(&ix.index), Some(served));
}
