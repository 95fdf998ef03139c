//! The memory log under injected I/O failures (`format::fsio::fault`): sequences of failures
//! that a single-fault sweep (tests/tests/fault.rs) does not reach.

use format::fsio::fault::{self, Mode};
use format::fsio::OpKind;
use format::memory::MemoryRecord;
use memory::wal::{LogModel, Wal, WalOp};

fn tm() -> LogModel {
    LogModel {
        id: "test-model@0123456789abcdef".into(),
        dim: 3,
    }
}

/// The fault switch is process-wide: one test at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn put(i: u32) -> WalOp {
    WalOp::Put {
        record: Box::new(MemoryRecord {
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
        }),
        vector: vec![i as f32, 0.5],
    }
}

/// A truncation whose fsync fails, then a failed append: the cut-back of the failed append
/// must not grow the log back to its pre-truncation length (zeros in front of later
/// records, which recovery would cut, losing acknowledged writes).
#[test]
fn failed_truncate_sync_then_failed_append_loses_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tempfile::tempdir().unwrap();
    fault::scope(Some(d.path()));
    let (mut w, _) = Wal::open(d.path(), 1, &tm()).unwrap();
    for i in 0..20 {
        w.append(&[put(i)]).unwrap();
    }
    // The flush committed; truncating the log: its fsync fails.
    fault::arm(Some(OpKind::Sync), 1, Mode::Once);
    assert!(w.truncate().is_err());
    let a = w.append(&[put(100)]).unwrap();
    // The next write fails (and is cut back); the one after it is acknowledged.
    fault::arm(Some(OpKind::Write), 1, Mode::Once);
    assert!(w.append(&[put(101)]).is_err());
    let c = w.append(&[put(102)]).unwrap();
    fault::reset();
    drop(w);
    let (_, r) = Wal::open(d.path(), 1, &tm()).unwrap();
    let lsns: Vec<u64> = r.ops.iter().map(|o| o.0).collect();
    assert_eq!(r.cut_bytes, 0, "{:?}", r.cut_reason);
    assert_eq!(
        lsns,
        [a[0], c[0]],
        "acknowledged writes after the truncation"
    );
}

/// A failed append whose cut-back fails too poisons the log: it says so (`poisoned`, which a
/// server's status reports as writes disabled) and refuses appends until a restart.
#[test]
fn a_log_that_cannot_be_cut_back_says_it_is_poisoned() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tempfile::tempdir().unwrap();
    fault::scope(Some(d.path()));
    let (mut w, _) = Wal::open(d.path(), 1, &tm()).unwrap();
    w.append(&[put(1)]).unwrap();
    assert!(w.poisoned().is_none());
    fault::arm(None, 1, Mode::Sticky);
    assert!(w.append(&[put(2)]).is_err());
    fault::reset();
    let why = w.poisoned().expect("poisoned").to_string();
    assert!(why.contains("restart queryd"), "{why}");
    assert!(w.append(&[put(3)]).is_err());
}
