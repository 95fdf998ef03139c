//! The memory write-ahead log: `memory.wal` in the index directory.
//!
//! Layout: an 8-byte magic, then records `[len: u32][crc32c(payload): u32][payload]`, little
//! endian. A payload is `[lsn: u64][op: u8][json_len: u32][json][dim: u32][dim × f32]`: op 1 puts
//! a record (the JSON [`MemoryRecord`]) with its vector, op 2 deletes the memory whose id is the
//! JSON string; bit 0x80 of op marks the last record of a batch (one tool call). Replay applies
//! whole batches only: a batch without its last record is a torn tail, so an unacknowledged
//! call is never half there. Sequence numbers (LSN) grow by one per record across truncations; `MANIFEST`'s
//! `memory_lsn` says which are already in memory segments.
//!
//! A write is acknowledged only after its records are appended and the file is fsynced. On
//! open, the log is read from the start; the first record that is incomplete or fails its
//! checksum ends the log (a torn tail from a crash mid-append): the file is cut there, so a
//! later append never follows garbage. Records before it are replayed; nothing after it is
//! applied, and the number of bytes cut is reported.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use format::fsio;
use format::memory::MemoryRecord;

pub const WAL_FILE: &str = "memory.wal";
const MAGIC: &[u8; 8] = b"CIXWAL01";
/// Largest payload accepted when reading (a corrupt length must not allocate gigabytes).
const MAX_PAYLOAD: usize = 64 << 20;

/// One logged operation.
#[derive(Debug, Clone, PartialEq)]
pub enum WalOp {
    Put {
        record: Box<MemoryRecord>,
        vector: Vec<f32>,
    },
    Delete {
        id: String,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("I/O error on the memory log {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} is not a memory log (bad magic); move it away to start a new one")]
    BadMagic { path: PathBuf },
    #[error("{path} is in use by another queryd; only one server may write memories to an index")]
    Busy { path: PathBuf },
}

/// What opening the log found.
#[derive(Debug, Default)]
pub struct Recovery {
    /// Valid records, in order.
    pub ops: Vec<(u64, WalOp)>,
    /// Bytes cut from the end (a torn or corrupt tail), 0 when the log was clean.
    pub cut_bytes: u64,
    /// Why the tail was cut.
    pub cut_reason: Option<String>,
}

/// The open log, positioned at its end.
pub struct Wal {
    path: PathBuf,
    file: File,
    len: u64,
    next_lsn: u64,
    /// Set when a failed append could not be cut back.
    poisoned: Option<String>,
}

const END_OF_BATCH: u8 = 0x80;

fn encode(lsn: u64, op: &WalOp, last: bool) -> Vec<u8> {
    let (kind, json, vector): (u8, Vec<u8>, &[f32]) = match op {
        WalOp::Put { record, vector } => (
            1,
            serde_json::to_vec(&**record).expect("a memory record serialises"),
            vector,
        ),
        WalOp::Delete { id } => (2, serde_json::to_vec(id).expect("a string serialises"), &[]),
    };
    let mut p = Vec::with_capacity(17 + json.len() + 4 * vector.len());
    p.extend_from_slice(&lsn.to_le_bytes());
    p.push(if last { kind | END_OF_BATCH } else { kind });
    p.extend_from_slice(&(json.len() as u32).to_le_bytes());
    p.extend_from_slice(&json);
    p.extend_from_slice(&(vector.len() as u32).to_le_bytes());
    for x in vector {
        p.extend_from_slice(&x.to_le_bytes());
    }
    let mut rec = Vec::with_capacity(8 + p.len());
    rec.extend_from_slice(&(p.len() as u32).to_le_bytes());
    rec.extend_from_slice(&crc32c::crc32c(&p).to_le_bytes());
    rec.extend_from_slice(&p);
    rec
}

fn decode(p: &[u8]) -> Option<(u64, WalOp, bool)> {
    let lsn = u64::from_le_bytes(p.get(0..8)?.try_into().ok()?);
    let last = *p.get(8)? & END_OF_BATCH != 0;
    let kind = *p.get(8)? & !END_OF_BATCH;
    let jl = u32::from_le_bytes(p.get(9..13)?.try_into().ok()?) as usize;
    let json = p.get(13..13usize.checked_add(jl)?)?;
    let at = 13 + jl;
    let dim = u32::from_le_bytes(p.get(at..at + 4)?.try_into().ok()?) as usize;
    let vb = p.get(at + 4..at + 4 + dim.checked_mul(4)?)?;
    if at + 4 + dim * 4 != p.len() {
        return None;
    }
    let op = match kind {
        1 => WalOp::Put {
            record: Box::new(serde_json::from_slice(json).ok()?),
            vector: vb
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                .collect(),
        },
        2 => WalOp::Delete {
            id: serde_json::from_slice(json).ok()?,
        },
        _ => return None,
    };
    Some((lsn, op, last))
}

/// Reads every valid record of the log bytes `b` (after the magic). Returns the records and
/// the offset where valid data ends, with the reason when that is not the end of `b`.
fn scan(b: &[u8]) -> (Vec<(u64, WalOp)>, usize, Option<String>) {
    let (mut ops, end, why, batch_start) = scan_records(b);
    // Records of a batch whose last record is missing were never acknowledged.
    if batch_start < end {
        while ops.last().is_some_and(|o| !o.2) {
            ops.pop();
        }
        let why = why.or_else(|| Some("incomplete batch".into()));
        return (
            ops.into_iter().map(|o| (o.0, o.1)).collect(),
            batch_start,
            why,
        );
    }
    (ops.into_iter().map(|o| (o.0, o.1)).collect(), end, why)
}

/// Every valid record, where valid data ends (with why, when it is not the end of `b`), and
/// where the last complete batch ends.
/// A scan: records (lsn, op, last of its batch), where valid data ends, why it ends there
/// (when not at the end), and where the last complete batch ends.
type Scan = (Vec<(u64, WalOp, bool)>, usize, Option<String>, usize);

fn scan_records(b: &[u8]) -> Scan {
    let mut ops = Vec::new();
    let mut at = MAGIC.len();
    let mut prev_lsn = 0u64;
    let mut batch_end = at;
    macro_rules! stop {
        ($why:expr) => {
            return (ops, at, Some($why.into()), batch_end)
        };
    }
    while at < b.len() {
        let Some(head) = b.get(at..at + 8) else {
            stop!("incomplete record header")
        };
        let len = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
        if len > MAX_PAYLOAD {
            stop!(format!("record length {len} is implausible"))
        }
        let Some(p) = b.get(at + 8..at + 8 + len) else {
            stop!("incomplete record")
        };
        if crc32c::crc32c(p) != crc {
            stop!("checksum mismatch")
        }
        let Some((lsn, op, last)) = decode(p) else {
            stop!("undecodable record")
        };
        if lsn <= prev_lsn && prev_lsn != 0 {
            stop!("sequence numbers go backwards")
        }
        prev_lsn = lsn;
        ops.push((lsn, op, last));
        at += 8 + len;
        if last {
            batch_end = at;
        }
    }
    (ops, at, None, batch_end)
}

impl Wal {
    /// Opens (or creates) `dir/memory.wal`, cuts a torn tail and returns the valid records.
    /// `min_next_lsn` is the smallest sequence number a new record may take (one past
    /// `MANIFEST`'s `memory_lsn`).
    pub fn open(dir: &Path, min_next_lsn: u64) -> Result<(Wal, Recovery), WalError> {
        let path = dir.join(WAL_FILE);
        let io = |source| WalError::Io {
            path: path.clone(),
            source,
        };
        let mut file = fsio::open(
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
            &path,
        )
        .map_err(io)?;
        // One writer per log, for the life of this handle (released when the file closes).
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Err(WalError::Busy { path }),
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        let mut b = Vec::new();
        file.read_to_end(&mut b).map_err(io)?;
        let mut rec = Recovery::default();
        if b.is_empty() || (b.len() < MAGIC.len() && MAGIC.starts_with(&b)) {
            // New, or a crash while writing the magic.
            fsio::set_len(&file, &path, 0).map_err(io)?;
            file.seek(SeekFrom::Start(0)).map_err(io)?;
            fsio::write_all(&mut file, &path, MAGIC).map_err(io)?;
            fsio::sync_all(&file, &path).map_err(io)?;
            sync_parent(&path);
            b = MAGIC.to_vec();
        } else if !b.starts_with(MAGIC) {
            return Err(WalError::BadMagic { path });
        }
        let (ops, end, why) = scan(&b);
        if end < b.len() {
            rec.cut_bytes = (b.len() - end) as u64;
            // Keep what is cut: a torn tail is garbage, but a flipped bit mid-log would
            // otherwise take acknowledged records after it along.
            let aside = path.with_extension(format!(
                "wal.cut-{}",
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis())
            ));
            fsio::write_file(&aside, &b[end..]).map_err(io)?;
            rec.cut_reason = Some(format!(
                "{}; the {} bytes cut are kept in {}",
                why.unwrap_or_else(|| "corrupt record".into()),
                b.len() - end,
                aside.display()
            ));
            fsio::set_len(&file, &path, end as u64).map_err(io)?;
            fsio::sync_all(&file, &path).map_err(io)?;
        }
        file.seek(SeekFrom::Start(end as u64)).map_err(io)?;
        let last = ops.last().map_or(0, |o| o.0);
        rec.ops = ops;
        Ok((
            Wal {
                path,
                file,
                len: end as u64,
                next_lsn: (last + 1).max(min_next_lsn).max(1),
                poisoned: None,
            },
            rec,
        ))
    }

    /// Appends `ops` and fsyncs: when this returns `Ok`, they survive a crash. Returns their
    /// sequence numbers. On error nothing is acknowledged and the log is cut back to where it
    /// was, so a failed append leaves no partial record behind.
    pub fn append(&mut self, ops: &[WalOp]) -> Result<Vec<u64>, WalError> {
        let mut buf = Vec::new();
        let mut lsns = Vec::with_capacity(ops.len());
        if let Some(why) = &self.poisoned {
            return Err(WalError::Io {
                path: self.path.clone(),
                source: std::io::Error::other(why.clone()),
            });
        }
        for (i, op) in ops.iter().enumerate() {
            let lsn = self.next_lsn + lsns.len() as u64;
            buf.extend_from_slice(&encode(lsn, op, i + 1 == ops.len()));
            lsns.push(lsn);
        }
        let io = |source| WalError::Io {
            path: self.path.clone(),
            source,
        };
        let r = fsio::write_all(&mut self.file, &self.path, &buf)
            .and_then(|_| fsio::sync_data(&self.file, &self.path));
        if let Err(e) = r {
            // Cut the partial append back; if even that fails, refuse further appends (they
            // would follow garbage) until a restart recovers the log.
            let cut = fsio::set_len(&self.file, &self.path, self.len)
                .and_then(|_| fsio::sync_data(&self.file, &self.path))
                .and_then(|_| self.file.seek(SeekFrom::Start(self.len)).map(|_| ()));
            if let Err(c) = cut {
                self.poisoned = Some(format!(
                    "the memory log could not be repaired after a failed write ({c}); restart queryd"
                ));
            }
            return Err(io(e));
        }
        self.len += buf.len() as u64;
        self.next_lsn += ops.len() as u64;
        Ok(lsns)
    }

    /// Drops every record (after they were flushed into a committed segment).
    pub fn truncate(&mut self) -> Result<(), WalError> {
        let io = |source| WalError::Io {
            path: self.path.clone(),
            source,
        };
        fsio::set_len(&self.file, &self.path, MAGIC.len() as u64).map_err(io)?;
        // The file is this long now, even if what follows fails: a later cut-back of a
        // failed append must not grow it again (zeros before the next records).
        self.len = MAGIC.len() as u64;
        self.file
            .seek(SeekFrom::Start(MAGIC.len() as u64))
            .map_err(io)?;
        fsio::sync_all(&self.file, &self.path).map_err(io)?;
        Ok(())
    }

    /// Makes the next sequence number at least `min` (after re-reading `MANIFEST`).
    pub fn ensure_next_lsn(&mut self, min: u64) {
        self.next_lsn = self.next_lsn.max(min);
    }

    /// Bytes in the log.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len <= MAGIC.len() as u64
    }

    /// Sequence number of the last appended record (0 when none ever was).
    pub fn last_lsn(&self) -> u64 {
        self.next_lsn - 1
    }
}

/// Reads the valid records of `dir/memory.wal` without modifying it (for `queryd export`).
pub fn read_only(dir: &Path) -> Result<Recovery, WalError> {
    let path = dir.join(WAL_FILE);
    let b = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Recovery::default()),
        Err(source) => return Err(WalError::Io { path, source }),
    };
    if b.len() < MAGIC.len() {
        return Ok(Recovery::default());
    }
    if !b.starts_with(MAGIC) {
        return Err(WalError::BadMagic { path });
    }
    let (ops, end, why) = scan(&b);
    Ok(Recovery {
        ops,
        cut_bytes: (b.len() - end) as u64,
        cut_reason: why,
    })
}

/// fsyncs the directory holding `path` (after creating a file in it). Best effort.
pub fn sync_parent(path: &std::path::Path) {
    if let Some(d) = path.parent() {
        let _ = fsio::sync_dir(d);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(i: u32) -> MemoryRecord {
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

    fn put(i: u32) -> WalOp {
        WalOp::Put {
            record: Box::new(rec(i)),
            vector: vec![i as f32, 0.5, -1.0],
        }
    }

    #[test]
    fn round_trip_torn_tail_and_bit_flips() {
        let d = tempfile::tempdir().unwrap();
        let (mut w, r) = Wal::open(d.path(), 1).unwrap();
        assert!(r.ops.is_empty() && w.is_empty());
        assert_eq!(w.append(&[put(1), put(2)]).unwrap(), [1, 2]);
        assert_eq!(w.append(&[WalOp::Delete { id: rec(1).id }]).unwrap(), [3]);
        drop(w);
        let (w, r) = Wal::open(d.path(), 1).unwrap();
        assert_eq!(r.ops.len(), 3);
        assert_eq!(r.ops[1], (2, put(2)));
        assert_eq!(r.cut_bytes, 0);
        assert_eq!(w.last_lsn(), 3);
        let full = std::fs::read(d.path().join(WAL_FILE)).unwrap();
        drop(w);

        // Every truncation point: only whole records survive, and the file is cut to them.
        for cut in MAGIC.len()..full.len() {
            std::fs::write(d.path().join(WAL_FILE), &full[..cut]).unwrap();
            let (mut w, r) = Wal::open(d.path(), 1).unwrap();
            for (i, (lsn, _)) in r.ops.iter().enumerate() {
                assert_eq!(*lsn, i as u64 + 1);
            }
            // The next append continues cleanly after the surviving records.
            let lsn = w.append(&[put(9)]).unwrap()[0];
            drop(w);
            let (_, r2) = Wal::open(d.path(), 1).unwrap();
            assert_eq!(r2.cut_bytes, 0, "cut at {cut}");
            assert_eq!(r2.ops.len(), r.ops.len() + 1);
            assert_eq!(r2.ops.last().unwrap().0, lsn);
        }

        // A flipped bit anywhere in a record: that record and the rest are not applied.
        for pos in (MAGIC.len()..full.len()).step_by(7) {
            let mut b = full.clone();
            b[pos] ^= 0x10;
            std::fs::write(d.path().join(WAL_FILE), &b).unwrap();
            let (_, r) = Wal::open(d.path(), 1).unwrap();
            assert!(r.ops.len() < 3, "flip at {pos} went unnoticed");
            assert!(r.cut_bytes > 0 && r.cut_reason.is_some());
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
            let len = u32::from_le_bytes(full[8..12].try_into().unwrap()) as usize;
            8 + 8 + len
        };
        std::fs::write(d.path().join(WAL_FILE), &full[..rec1_end]).unwrap();
        let (w, r) = Wal::open(d.path(), 1).unwrap();
        assert!(r.ops.is_empty(), "half a batch was replayed");
        assert!(r
            .cut_reason
            .as_deref()
            .unwrap()
            .starts_with("incomplete batch"));
        drop(w);
        assert_eq!(
            std::fs::metadata(d.path().join(WAL_FILE)).unwrap().len(),
            MAGIC.len() as u64
        );

        // LSNs continue after the manifest's memory_lsn once the log is truncated.
        std::fs::write(d.path().join(WAL_FILE), &full).unwrap();
        let (mut w, _) = Wal::open(d.path(), 1).unwrap();
        w.truncate().unwrap();
        drop(w);
        let (mut w, r) = Wal::open(d.path(), 4).unwrap();
        assert!(r.ops.is_empty());
        assert_eq!(w.append(&[put(5)]).unwrap(), [4]);
        // A second writer is refused while the first holds the log.
        assert!(matches!(Wal::open(d.path(), 1), Err(WalError::Busy { .. })));
        drop(w);
        std::fs::write(d.path().join(WAL_FILE), b"NOTAWAL!").unwrap();
        assert!(matches!(
            Wal::open(d.path(), 1),
            Err(WalError::BadMagic { .. })
        ));
    }
}
