//! Tests of the memory log: records, torn tails and damage, the header, the holder.

use super::*;
use format::memory::MemoryRecord;

pub(super) fn rec(i: u32) -> MemoryRecord {
    MemoryRecord {
        id: format!("0190f3c4-8f7a-7b2e-9c1d-{i:012x}"),
        text: format!("memory number {i}"),
        category: "note".into(),
        scope: "project".into(),
        entity: String::new(),
        tags: vec![],
        source: "agent".into(),
        evidence: vec![],
        code_refs: vec![],
        created_at: 1,
        updated_at: 1,
        state: "active".into(),
        similar: vec![],
    }
}

/// The model the tests' logs are opened for.
pub(super) fn tm() -> LogModel {
    LogModel {
        id: "test-model@0123456789abcdef".into(),
        dim: 3,
    }
}

/// The header a log of [`tm`] starts with.
pub(super) fn header_len() -> usize {
    walhead::encode(&tm()).len()
}

pub(super) fn put(i: u32) -> WalOp {
    WalOp::Put {
        record: Box::new(rec(i)),
        vector: vec![i as f32, 0.5, -1.0],
    }
}

/// Bytes of the last `n` records of a log.
fn record_len(b: &[u8], n: usize) -> usize {
    let s = salvage(b, header_len());
    assert!(s.skips.is_empty());
    b.len() - s.recs[s.recs.len() - n].at
}

fn cut_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".cut-")
        })
        .count()
}

/// A log of `n` one-record batches (puts 1..=n); returns the bytes and each record's
/// offset.
fn log_of(dir: &Path, n: u32) -> (Vec<u8>, Vec<usize>) {
    let (mut w, _) = Wal::open(dir, 1, &tm()).unwrap();
    for i in 1..=n {
        w.append(&[put(i)]).unwrap();
    }
    drop(w);
    let b = std::fs::read(dir.join(WAL_FILE)).unwrap();
    let at = salvage(&b, header_len())
        .recs
        .iter()
        .map(|r| r.at)
        .collect();
    (b, at)
}

#[test]
fn torn_tail_is_cut_but_mid_log_damage_is_kept_and_reported() {
    let d = tempfile::tempdir().unwrap();
    let (full, at) = log_of(d.path(), 10);
    let path = d.path().join(WAL_FILE);

    // Torn tail: the last record half written. Cut, no damage.
    std::fs::write(&path, &full[..at[9] + 11]).unwrap();
    let (w, r) = Wal::open(d.path(), 1, &tm()).unwrap();
    assert_eq!(
        (r.ops.len(), r.cut_bytes, r.damage.is_none()),
        (9, 11, true)
    );
    assert!(!r.cut_suspect, "a record cut short is what a crash leaves");
    drop(w);
    // Garbage after the last record (a torn append of zeros): cut too.
    let mut b = full.clone();
    b.extend_from_slice(&[0u8; 64]);
    std::fs::write(&path, &b).unwrap();
    let (w, r) = Wal::open(d.path(), 1, &tm()).unwrap();
    assert_eq!(
        (r.ops.len(), r.cut_bytes, r.damage.is_none()),
        (10, 64, true)
    );
    assert!(!r.cut_suspect, "zeros are what a crash leaves");
    drop(w);
    assert_eq!(cut_files(d.path()), 2);

    // A bit flipped in the last record, written whole: cut (nothing valid follows), and
    // flagged, since it may have been acknowledged.
    let mut b = full.clone();
    b[at[9] + 40] ^= 0x04;
    std::fs::write(&path, &b).unwrap();
    let (w, r) = Wal::open(d.path(), 1, &tm()).unwrap();
    assert_eq!((r.ops.len(), r.damage.is_none()), (9, true));
    assert!(r.cut_bytes > 0 && r.cut_suspect, "{r:?}");
    drop(w);
    assert_eq!(cut_files(d.path()), 3);

    // One bit flipped in the middle record (5 of 10): the 4 before are served, nothing
    // is cut, the 5 after are counted, appends are refused.
    let mut b = full.clone();
    b[at[4] + 40] ^= 0x04;
    std::fs::write(&path, &b).unwrap();
    let (mut w, r) = Wal::open(d.path(), 1, &tm()).unwrap();
    let dmg = r.damage.clone().expect("mid-log damage");
    assert_eq!(r.ops.len(), 4);
    assert_eq!(r.cut_bytes, 0);
    assert_eq!(
        (dmg.bad_offset, dmg.resume_offset),
        (at[4] as u64, at[5] as u64)
    );
    assert_eq!(dmg.reason, "checksum mismatch");
    assert_eq!(
        (
            dmg.last_good_lsn,
            dmg.records_after,
            dmg.first_lsn_after,
            dmg.last_lsn_after
        ),
        (4, 5, 6, 10)
    );
    assert_eq!(
        (dmg.damaged_records(), dmg.records_not_served()),
        (Some(1), 6)
    );
    assert!(w.append(&[put(11)]).is_err(), "an append after damage");
    drop(w);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b,
        "the damaged log was modified"
    );
    assert_eq!(cut_files(d.path()), 3, "the damaged log was cut");
    // The read-only reader (export) sees the same.
    let ro = read_only(d.path()).unwrap();
    assert_eq!((ro.ops.len(), ro.damage), (4, Some(dmg)));

    // A flipped length field: the scan re-synchronises at the next record.
    let mut b = full.clone();
    b[at[2] + 2] ^= 0x01;
    std::fs::write(&path, &b).unwrap();
    let r = read_only(d.path()).unwrap();
    let dmg = r.damage.expect("damage");
    assert_eq!((r.ops.len(), dmg.resume_offset), (2, at[3] as u64));
    assert_eq!(dmg.records_after, 7);
}

#[test]
fn the_header_names_the_model_and_another_models_records_are_flagged() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join(WAL_FILE);
    // A log from before headers named the model: its records are the caller's; emptied
    // by a flush, it gets a header naming the model.
    let mut b = MAGIC.to_vec();
    b.extend(encode(1, &put(1), true));
    std::fs::write(&path, &b).unwrap();
    let (mut w, r) = Wal::open(d.path(), 1, &tm()).unwrap();
    assert_eq!((r.ops.len(), r.model.clone()), (1, None));
    assert!(!r.other_model(&tm()) && w.poisoned().is_none());
    assert_eq!(w.append(&[put(2)]).unwrap(), [2]);
    w.truncate().unwrap();
    assert!(w.is_empty());
    assert_eq!(w.append(&[put(3)]).unwrap(), [3]);
    drop(w);
    let (w, r) = Wal::open(d.path(), 1, &tm()).unwrap();
    assert_eq!((r.ops.len(), r.model), (1, Some(tm())));
    drop(w);
    assert!(std::fs::read(&path)
        .unwrap()
        .starts_with(&walhead::encode(&tm())));
    // A header cut short (a crash while it was written) is written again, and what was
    // there is kept beside the log all the same.
    let partial = walhead::encode(&tm())[..11].to_vec();
    std::fs::write(&path, &partial).unwrap();
    let (w, r) = Wal::open(d.path(), 1, &tm()).unwrap();
    assert_eq!((r.ops.len(), r.model.clone()), (0, Some(tm())));
    drop(w);
    assert_eq!(std::fs::read(&path).unwrap(), walhead::encode(&tm()));
    assert_eq!(cut_files(d.path()), 1);
    // An empty log of the first version gets the header when it is opened.
    std::fs::write(&path, MAGIC).unwrap();
    let (w, r) = Wal::open(d.path(), 1, &tm()).unwrap();
    assert_eq!(r.model, Some(tm()));
    drop(w);
    assert_eq!(std::fs::read(&path).unwrap(), walhead::encode(&tm()));

    // An empty log takes the model it is opened for; one that holds records keeps its
    // own, and another model's opener gets them flagged, appends refused, bytes kept.
    let other = LogModel {
        id: "other-model@fedcba9876543210".into(),
        dim: 3,
    };
    let (mut w, r) = Wal::open(d.path(), 1, &other).unwrap();
    assert_eq!(r.model, Some(other.clone()));
    w.append(&[put(4)]).unwrap();
    drop(w);
    let before = std::fs::read(&path).unwrap();
    let (mut w, r) = Wal::open(d.path(), 1, &tm()).unwrap();
    assert_eq!(r.model, Some(other.clone()));
    assert!(r.other_model(&tm()) && !r.other_model(&other));
    assert_eq!(r.ops, [(1, put(4))]);
    let why = w.append(&[put(5)]).unwrap_err().to_string();
    assert!(why.contains("other-model@fedcba9876543210"), "{why}");
    drop(w);
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(read_only(d.path()).unwrap().model, Some(other));
}

#[test]
fn the_holder_records_its_pid_and_a_second_opener_is_told() {
    let d = tempfile::tempdir().unwrap();
    let (w, _) = Wal::open(d.path(), 1, &tm()).unwrap();
    assert_eq!(holder_pid(d.path()), Some(std::process::id()));
    match Wal::open(d.path(), 1, &tm()) {
        Err(e @ WalError::Busy { pid: Some(_), .. }) => {
            assert!(e
                .to_string()
                .contains(&format!("(pid {})", std::process::id())))
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    drop(w);
    assert_eq!(holder_pid(d.path()), None);
}

#[test]
fn resync_skips_random_bytes_by_framing() {
    // Every record passes the framing check that re-synchronisation puts before the
    // checksum, at its own offset and with the LSN before it.
    let (b, ends) = {
        let mut b = MAGIC.to_vec();
        let mut ends = Vec::new();
        for i in 1..=40u32 {
            let op = if i % 3 == 0 {
                WalOp::Delete { id: rec(i).id }
            } else {
                put(i)
            };
            b.extend(encode(i as u64, &op, i % 2 == 0));
            ends.push(b.len());
        }
        (b, ends)
    };
    let mut at = MAGIC.len();
    for (i, &end) in ends.iter().enumerate() {
        assert!(
            framing_at(&b, at, i as u64),
            "record {} failed its framing",
            i + 1
        );
        assert!(
            !framing_at(&b, at, i as u64 + 1),
            "an LSN not above the last passed"
        );
        at = end;
    }
    // Random bytes between valid records: almost no offset passes the framing (so almost
    // none is checksummed), and salvage still finds every record on both sides.
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let garbage: Vec<u8> = (0..1 << 20)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 24) as u8
        })
        .collect();
    let passing = (0..garbage.len())
        .filter(|&o| framing_at(&garbage, o, 0))
        .count();
    assert!(
        passing < 64,
        "{passing} of {} random offsets passed",
        garbage.len()
    );
    let mut log = b[..ends[19]].to_vec();
    log.extend(&garbage);
    log.extend(&b[ends[19]..]);
    let s = salvage(&log, MAGIC.len());
    assert_eq!(s.recs.len(), 40);
    assert_eq!(s.skips.len(), 1);
    assert_eq!(s.skips[0].end - s.skips[0].start, garbage.len());
}

#[test]
fn round_trip_torn_tail_and_bit_flips() {
    let d = tempfile::tempdir().unwrap();
    let (mut w, r) = Wal::open(d.path(), 1, &tm()).unwrap();
    assert!(r.ops.is_empty() && w.is_empty());
    assert_eq!(w.append(&[put(1), put(2)]).unwrap(), [1, 2]);
    assert_eq!(w.append(&[WalOp::Delete { id: rec(1).id }]).unwrap(), [3]);
    drop(w);
    let (w, r) = Wal::open(d.path(), 1, &tm()).unwrap();
    assert_eq!(r.ops.len(), 3);
    assert_eq!(r.ops[1], (2, put(2)));
    assert_eq!(r.cut_bytes, 0);
    assert_eq!(w.last_lsn(), 3);
    let full = std::fs::read(d.path().join(WAL_FILE)).unwrap();
    drop(w);

    // Every truncation point: only whole records survive, and the file is cut to them.
    // Cuts inside the header are a crash while it was written: written anew, no record.
    for cut in 0..full.len() {
        std::fs::write(d.path().join(WAL_FILE), &full[..cut]).unwrap();
        let (mut w, r) = Wal::open(d.path(), 1, &tm()).unwrap();
        for (i, (lsn, _)) in r.ops.iter().enumerate() {
            assert_eq!(*lsn, i as u64 + 1);
        }
        // The next append continues cleanly after the surviving records.
        let lsn = w.append(&[put(9)]).unwrap()[0];
        drop(w);
        let (_, r2) = Wal::open(d.path(), 1, &tm()).unwrap();
        assert_eq!(r2.cut_bytes, 0, "cut at {cut}");
        assert_eq!(r2.ops.len(), r.ops.len() + 1);
        assert_eq!(r2.ops.last().unwrap().0, lsn);
    }

    // A flipped bit anywhere in a record: that record and the rest are not applied. In
    // the last record it is a torn tail (cut); before it, damage (nothing cut).
    let last_rec = full.len() - record_len(&full, 1);
    for pos in (header_len()..full.len()).step_by(7) {
        let mut b = full.clone();
        b[pos] ^= 0x10;
        std::fs::write(d.path().join(WAL_FILE), &b).unwrap();
        let (_, r) = Wal::open(d.path(), 1, &tm()).unwrap();
        assert!(r.ops.len() < 3, "flip at {pos} went unnoticed");
        if pos < last_rec {
            let dmg = r.damage.as_ref().expect("damage before the last record");
            assert_eq!((r.cut_bytes, dmg.last_lsn_after), (0, 3), "flip at {pos}");
            assert_eq!(std::fs::read(d.path().join(WAL_FILE)).unwrap(), b);
        } else {
            assert!(r.damage.is_none() && r.cut_bytes > 0 && r.cut_reason.is_some());
        }
        for (i, op) in r.ops.iter().enumerate() {
            assert_eq!(op, &(i as u64 + 1, [put(1), put(2)][i].clone()));
        }
    }

    // What was cut is kept beside the log.
    assert!(std::fs::read_dir(d.path()).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .contains("wal.cut-")));

    // A batch is all or nothing: cutting inside the first batch (records 1-2) keeps none.
    let rec1_end = {
        let h = header_len();
        let len = u32::from_le_bytes(full[h..h + 4].try_into().unwrap()) as usize;
        h + 8 + len
    };
    std::fs::write(d.path().join(WAL_FILE), &full[..rec1_end]).unwrap();
    let (w, r) = Wal::open(d.path(), 1, &tm()).unwrap();
    assert!(r.ops.is_empty(), "half a batch was replayed");
    assert!(r
        .cut_reason
        .as_deref()
        .unwrap()
        .starts_with("incomplete batch"));
    drop(w);
    assert_eq!(
        std::fs::metadata(d.path().join(WAL_FILE)).unwrap().len(),
        header_len() as u64
    );

    // LSNs continue after the manifest's memory_lsn once the log is truncated.
    std::fs::write(d.path().join(WAL_FILE), &full).unwrap();
    let (mut w, _) = Wal::open(d.path(), 1, &tm()).unwrap();
    w.truncate().unwrap();
    drop(w);
    let (mut w, r) = Wal::open(d.path(), 4, &tm()).unwrap();
    assert!(r.ops.is_empty());
    assert_eq!(w.append(&[put(5)]).unwrap(), [4]);
    // A second writer is refused while the first holds the log.
    assert!(matches!(
        Wal::open(d.path(), 1, &tm()),
        Err(WalError::Busy { .. })
    ));
    drop(w);
    std::fs::write(d.path().join(WAL_FILE), b"NOTAWAL!").unwrap();
    assert!(matches!(
        Wal::open(d.path(), 1, &tm()),
        Err(WalError::BadMagic { .. })
    ));
}
