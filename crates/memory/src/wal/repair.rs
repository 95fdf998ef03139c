//! `queryd repair-wal`: salvage every readable record of a damaged memory log.
//!
//! The rule for a call (batch) the damage broke: its intact records are kept and the call is
//! reported as partially applied, with the LSNs that could not be read. Every record before
//! the last valid one belongs to an acknowledged call (appends are sequential and a torn tail
//! is cut before the next append), so dropping intact records would lose acknowledged writes
//! on top of the damaged ones; the all-or-nothing rule of replay exists for unacknowledged
//! calls, which only a torn tail holds. A last batch without its end (a torn tail) is not
//! kept, as at every open. The original log is kept aside (`memory.wal.corrupt-<ms>`, never
//! deleted) before the new one replaces it.

use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{holder_pid, sync_parent, WalError, WalOp, MAGIC, WAL_FILE};
use format::walhead::{self, WalHeader};
use format::walrec::{record_at, salvage, Found};

/// Records lost in one damaged stretch of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LostRange {
    /// Byte range of the damage.
    pub from_byte: u64,
    pub to_byte: u64,
    /// LSNs that could not be read (from the gap between the valid records around the
    /// damage); `first_lsn` is `None` when the damage is at the start of the log.
    pub first_lsn: Option<u64>,
    pub last_lsn: u64,
    /// Memory ids that appear in the damaged bytes (best effort: the JSON may be damaged).
    pub probable_ids: Vec<String>,
}

/// An intact record kept from a call the damage broke (or from the call right after the
/// damage, which may be the same one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeptRecord {
    pub lsn: u64,
    /// `put` or `delete`.
    pub op: &'static str,
    pub id: String,
}

/// What `repair` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RepairReport {
    pub path: PathBuf,
    /// Whether a new log was written (false: nothing to repair).
    pub repaired: bool,
    /// Where the original log is kept.
    pub kept_aside: Option<PathBuf>,
    pub records_kept: u64,
    /// LSN ranges of the records kept (a gap is a damaged stretch).
    pub kept_lsns: Vec<(u64, u64)>,
    /// Records that could not be read (known from LSN gaps; at least one per stretch when the
    /// damage is at the start of the log).
    pub records_lost: u64,
    pub lost: Vec<LostRange>,
    /// Bytes holding no valid record, the torn tail included.
    pub bytes_skipped: u64,
    /// Intact records around the damage that were kept: the call they belong to may be
    /// partially applied; check them.
    pub partially_applied: Vec<KeptRecord>,
    /// Records of an unfinished last batch (never acknowledged), not kept.
    pub torn_tail_records: u64,
    pub torn_tail_bytes: u64,
    /// The log's header was damaged: it was rewritten, and the records after it salvaged like
    /// any others.
    pub header_rewritten: bool,
    /// The model the rewritten header names (read from the damaged one, or a model no index
    /// has when it could not be read); `None` when it names none (an older log's bare magic).
    pub header_model: Option<String>,
}

fn kept(r: &Found) -> KeptRecord {
    let (op, id) = match &r.op {
        WalOp::Put { record, .. } => ("put", record.id.clone()),
        WalOp::Delete { id } => ("delete", id.clone()),
    };
    KeptRecord { lsn: r.lsn, op, id }
}

/// Memory ids that appear as `"id":"<uuid>"` in damaged bytes.
fn probable_ids(b: &[u8]) -> Vec<String> {
    const KEY: &[u8] = b"\"id\":\"";
    let mut out = Vec::new();
    // Seen ids (a damaged stretch can hold many: a lookup per id, not a scan of `out`).
    let mut seen = std::collections::HashSet::new();
    let mut i = 0;
    while let Some(p) = b[i..].windows(KEY.len()).position(|w| w == KEY) {
        let at = i + p + KEY.len();
        if let Some(id) = b.get(at..at + 36).and_then(|s| std::str::from_utf8(s).ok()) {
            if format::memory::is_uuid(id) && seen.insert(id) {
                out.push(id.to_string());
            }
        }
        i = at;
    }
    out
}

fn now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// Salvages `dir/memory.wal`: keeps the original aside, writes a new log with every valid
/// record (up to the last complete batch), fsyncs it and renames it into place. Refuses while
/// another process holds the log ([`WalError::Busy`]). A log without damage followed by valid
/// records is left alone (`repaired: false`; a torn tail is cut by the next open).
pub fn repair(dir: &Path) -> Result<RepairReport, WalError> {
    let path = dir.join(WAL_FILE);
    let io = |source| WalError::Io {
        path: path.clone(),
        source,
    };
    let mut report = RepairReport {
        path: path.clone(),
        ..RepairReport::default()
    };
    let mut file = match OpenOptions::new().read(true).write(true).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(io(e)),
    };
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(WalError::Busy {
                pid: holder_pid(dir),
                path,
            })
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
    }
    let mut b = Vec::new();
    file.read_to_end(&mut b).map_err(io)?;
    let original = b.clone();
    let (header, start) = match walhead::parse(&b) {
        WalHeader::Partial => return Ok(report),
        WalHeader::Complete { len, .. } => (b[..len].to_vec(), len),
        WalHeader::Bad { .. } => {
            // A damaged header hides every record after it from replay and export: salvage
            // them as after any damage (the original is kept aside below). A file of another
            // kind yields no record, and is kept aside all the same.
            if b.len() < MAGIC.len() {
                b = MAGIC.to_vec();
            } else {
                b[..MAGIC.len()].copy_from_slice(MAGIC);
            }
            report.header_rewritten = true;
            // Which model embedded the records must survive the repair, or another model's
            // vectors would be served as the index's. A second version's header whose length
            // lands on a record names it (read as well as the damage allows); one that cannot
            // be read gets a model no index has (its records are then kept out of search until
            // exported); the bare magic of an older log names none, as before.
            match walhead::declared_len(&original).filter(|&h| record_at(&b, h, 0).is_ok()) {
                Some(h) => {
                    let m = walhead::damaged_model(&original).expect("a declared length");
                    report.header_model = Some(m.to_string());
                    (walhead::encode(&m), h)
                }
                None if walhead::closer_to_v1(&original) => (MAGIC.to_vec(), MAGIC.len()),
                None => {
                    let m = walhead::unknown_model();
                    report.header_model = Some(m.to_string());
                    (walhead::encode(&m), MAGIC.len())
                }
            }
        }
    };
    let s = salvage(&b, start);
    // Records kept: up to the last end of a batch; after it, an unacknowledged torn tail.
    let keep = s.recs.iter().rposition(|r| r.last).map_or(0, |i| i + 1);
    let kept_end = keep.checked_sub(1).map_or(start, |i| s.recs[i].end);
    report.torn_tail_records = (s.recs.len() - keep) as u64;
    report.torn_tail_bytes = (b.len() - kept_end) as u64;
    report.bytes_skipped = s.skips.iter().map(|k| (k.end - k.start) as u64).sum();
    let interior: Vec<_> = s.skips.iter().filter(|k| k.end <= kept_end).collect();
    report.records_kept = keep as u64;
    for r in &s.recs[..keep] {
        match report.kept_lsns.last_mut() {
            Some((_, hi)) if *hi + 1 == r.lsn => *hi = r.lsn,
            _ => report.kept_lsns.push((r.lsn, r.lsn)),
        }
    }
    for k in &interior {
        let before = s.recs[..keep].iter().rposition(|r| r.end <= k.start);
        let after = s.recs[..keep]
            .iter()
            .position(|r| r.at >= k.end)
            .expect("a kept record follows an interior skip");
        let next = s.recs[after].lsn;
        let first = before.map(|i| s.recs[i].lsn + 1);
        report.records_lost += first.map_or(1, |f| next - f);
        report.lost.push(LostRange {
            from_byte: k.start as u64,
            to_byte: k.end as u64,
            first_lsn: first,
            last_lsn: next - 1,
            probable_ids: probable_ids(&b[k.start..k.end]),
        });
        // The intact part of the broken call: records since the last end of a batch before
        // the damage, and those after it up to the next end of a batch.
        let start = before.map_or(0, |i| {
            s.recs[..=i]
                .iter()
                .rposition(|r| r.last)
                .map_or(0, |j| j + 1)
        });
        for r in &s.recs[start..before.map_or(0, |i| i + 1)] {
            report.partially_applied.push(kept(r));
        }
        for r in &s.recs[after..keep] {
            report.partially_applied.push(kept(r));
            if r.last {
                break;
            }
        }
    }
    if interior.is_empty() && !report.header_rewritten {
        return Ok(report); // clean, or only a torn tail: nothing to repair
    }
    // The original, kept aside first (never overwritten, never deleted).
    let aside = path.with_extension(format!("wal.corrupt-{}", now_ms()));
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&aside)
        .map_err(io)?;
    f.write_all(&original).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    sync_parent(&aside).map_err(io)?;
    report.kept_aside = Some(aside);
    // The new log: the header and every kept record's bytes as they were.
    let tmp = path.with_extension("wal.repair-tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    let mut out = Vec::with_capacity(b.len());
    out.extend_from_slice(&header);
    for r in &s.recs[..keep] {
        out.extend_from_slice(&b[r.at..r.end]);
    }
    f.write_all(&out).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    std::fs::rename(&tmp, &path).map_err(io)?;
    // The new log is in place: say what was done even if making the rename durable fails.
    if let Err(e) = sync_parent(&path) {
        eprintln!(
            "repair-wal: the new log is in place, but fsyncing its directory failed ({e}); \
             a power cut now could bring the old log back"
        );
    }
    report.repaired = true;
    Ok(report)
}

impl std::fmt::Display for RepairReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.repaired {
            if self.torn_tail_bytes > 0 {
                return write!(
                    f,
                    "{}: no damage followed by valid records; only a torn tail of {} bytes ({} records of an unfinished call), which queryd cuts (and keeps aside) when it starts. Nothing to repair",
                    self.path.display(),
                    self.torn_tail_bytes,
                    self.torn_tail_records
                );
            }
            return write!(
                f,
                "{}: the log is intact; nothing to repair",
                self.path.display()
            );
        }
        let ranges = |v: &[(u64, u64)]| {
            v.iter()
                .map(|(a, b)| format!("{a}-{b}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        writeln!(f, "repaired {}", self.path.display())?;
        if self.header_rewritten {
            match &self.header_model {
                Some(m) => writeln!(
                    f,
                    "  its header was damaged: rewritten, naming model {m} as the damaged one did \
                     (a model other than the index's keeps the records out of search and \
                     memory writes refused until they are exported and ingested again)"
                )?,
                None => writeln!(f, "  its header was damaged: rewritten")?,
            }
        }
        if let Some(a) = &self.kept_aside {
            writeln!(f, "  original kept in {}", a.display())?;
        }
        writeln!(
            f,
            "  records kept: {} (LSN {})",
            self.records_kept,
            ranges(&self.kept_lsns)
        )?;
        writeln!(f, "  records lost: {}", self.records_lost)?;
        for l in &self.lost {
            writeln!(
                f,
                "    bytes {}-{}: LSN {}{}{}",
                l.from_byte,
                l.to_byte,
                l.first_lsn.map_or("?".to_string(), |x| x.to_string()),
                if l.first_lsn == Some(l.last_lsn) {
                    String::new()
                } else {
                    format!("-{}", l.last_lsn)
                },
                if l.probable_ids.is_empty() {
                    String::new()
                } else {
                    format!(" (probably memories {})", l.probable_ids.join(", "))
                }
            )?;
        }
        writeln!(f, "  bytes skipped: {}", self.bytes_skipped)?;
        if !self.partially_applied.is_empty() {
            writeln!(
                f,
                "  kept from the call(s) around the damage (possibly partially applied; check them):"
            )?;
            for r in &self.partially_applied {
                writeln!(f, "    LSN {} {} {}", r.lsn, r.op, r.id)?;
            }
        }
        if self.torn_tail_records > 0 {
            writeln!(
                f,
                "  not kept: {} records of an unfinished last call (never acknowledged)",
                self.torn_tail_records
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{header_len, put, rec, tm};
    use super::super::{read_only, Wal};
    use super::*;

    /// A damaged header hid every record (open and export refuse such a file): the repair
    /// rewrites it, keeps every record and the original aside; a file of another kind is
    /// kept aside and replaced by an empty log.
    #[test]
    fn a_damaged_header_is_rewritten_and_its_records_kept() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(WAL_FILE);
        let (mut w, _) = Wal::open(d.path(), 1, &tm()).unwrap();
        w.append(&[put(1)]).unwrap();
        w.append(&[put(2), put(3)]).unwrap();
        drop(w);
        let mut b = std::fs::read(&path).unwrap();
        b[0] ^= 0x20;
        std::fs::write(&path, &b).unwrap();
        assert!(matches!(
            Wal::open(d.path(), 1, &tm()),
            Err(WalError::BadMagic { .. })
        ));
        let r = repair(d.path()).unwrap();
        assert!(r.repaired && r.header_rewritten, "{r:?}");
        assert_eq!((r.records_kept, r.records_lost), (3, 0));
        assert!(r.to_string().contains("header was damaged"), "{r}");
        assert_eq!(std::fs::read(r.kept_aside.as_ref().unwrap()).unwrap(), b);
        // The model the damaged header named is kept: the records are served as its.
        assert_eq!(r.header_model, Some(tm().to_string()));
        let (_, rec) = Wal::open(d.path(), 1, &tm()).unwrap();
        assert_eq!(rec.ops.iter().map(|o| o.0).collect::<Vec<_>>(), [1, 2, 3]);
        assert_eq!(rec.model, Some(tm()));
        let good = std::fs::read(&path).unwrap();

        // A header whose model cannot be read (its two length copies disagree): the records
        // are kept under a model no index has, so they are not served as this one's.
        let mut b = good.clone();
        b[8] ^= 0x01;
        std::fs::write(&path, &b).unwrap();
        let r = repair(d.path()).unwrap();
        assert!(r.repaired && r.header_rewritten, "{r:?}");
        assert_eq!(r.records_kept, 3);
        assert_eq!(r.header_model, Some(walhead::unknown_model().to_string()));
        let (mut w, rec) = Wal::open(d.path(), 1, &tm()).unwrap();
        assert_eq!(rec.ops.len(), 3);
        assert!(rec.other_model(&tm()));
        assert!(w.append(&[put(4)]).is_err());
        drop(w);
        assert_eq!(read_only(d.path()).unwrap().ops.len(), 3);

        // The bare magic of an older log, damaged: the first version's again (no model).
        let mut old = MAGIC.to_vec();
        old.extend_from_slice(&good[header_len()..]);
        old[7] ^= 0x04;
        std::fs::write(&path, &old).unwrap();
        let r = repair(d.path()).unwrap();
        assert!(r.repaired && r.header_rewritten && r.header_model.is_none());
        assert_eq!((r.records_kept, r.records_lost), (3, 0));
        let (_, rec) = Wal::open(d.path(), 1, &tm()).unwrap();
        assert_eq!((rec.ops.len(), rec.model), (3, None));

        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join(WAL_FILE), b"not a log at all").unwrap();
        let r = repair(other.path()).unwrap();
        assert!(r.repaired && r.header_rewritten && r.records_kept == 0);
        assert_eq!(
            std::fs::read(r.kept_aside.as_ref().unwrap()).unwrap(),
            b"not a log at all"
        );
        let (_, rec) = Wal::open(other.path(), 1, &tm()).unwrap();
        assert!(rec.ops.is_empty());
    }

    #[test]
    fn salvages_every_readable_record_and_keeps_the_original() {
        let d = tempfile::tempdir().unwrap();
        let path = d.path().join(WAL_FILE);
        // Batches: [1] [2 3 4] [5] [6] [7] [8 9(unfinished: a torn tail)].
        let (mut w, _) = Wal::open(d.path(), 1, &tm()).unwrap();
        w.append(&[put(1)]).unwrap();
        w.append(&[put(2), put(3), WalOp::Delete { id: rec(1).id }])
            .unwrap();
        for i in 5..=7 {
            w.append(&[put(i)]).unwrap();
        }
        w.append(&[put(8), put(9)]).unwrap();
        drop(w);
        let mut b = std::fs::read(&path).unwrap();
        let at: Vec<usize> = salvage(&b, header_len())
            .recs
            .iter()
            .map(|r| r.at)
            .collect();
        b.truncate(at[8] + 20); // the last record half written
                                // Damage the middle record of the 3-record batch (LSN 3), in its vector.
        let end3 = at[3];
        b[end3 - 5] ^= 0x40;
        std::fs::write(&path, &b).unwrap();

        // Refused while a server holds the log.
        let (w, r) = Wal::open(d.path(), 1, &tm()).unwrap();
        assert!(r.damage.is_some());
        assert!(matches!(repair(d.path()), Err(WalError::Busy { .. })));
        drop(w);
        assert_eq!(std::fs::read(&path).unwrap(), b);

        let r = repair(d.path()).unwrap();
        assert!(r.repaired);
        assert_eq!(r.records_kept, 6); // 1 2 4 5 6 7 (8 is in the unfinished last batch)
        assert_eq!(r.kept_lsns, [(1, 2), (4, 7)]);
        assert_eq!(r.records_lost, 1);
        assert_eq!(r.lost.len(), 1);
        let lost = &r.lost[0];
        assert_eq!((lost.first_lsn, lost.last_lsn), (Some(3), 3));
        assert_eq!((lost.from_byte, lost.to_byte), (at[2] as u64, at[3] as u64));
        assert_eq!(lost.probable_ids, [rec(3).id]);
        assert_eq!(
            r.partially_applied
                .iter()
                .map(|k| (k.lsn, k.op))
                .collect::<Vec<_>>(),
            [(2, "put"), (4, "delete")]
        );
        assert_eq!(r.torn_tail_records, 1);
        assert_eq!(r.bytes_skipped, (at[3] - at[2] + 20) as u64);
        assert_eq!(r.torn_tail_bytes, (at[8] - at[7] + 20) as u64);
        // The original is kept byte for byte.
        let aside = r.kept_aside.clone().unwrap();
        assert_eq!(std::fs::read(&aside).unwrap(), b);
        let text = r.to_string();
        assert!(
            text.contains("records lost: 1") && text.contains(&rec(3).id),
            "{text}"
        );

        // The new log is clean and holds every kept record.
        let ro = read_only(d.path()).unwrap();
        assert!(ro.damage.is_none() && ro.cut_bytes == 0);
        let lsns: Vec<u64> = ro.ops.iter().map(|o| o.0).collect();
        assert_eq!(lsns, [1, 2, 4, 5, 6, 7]);
        assert_eq!(ro.ops[1].1, put(2));
        let (mut w, r2) = Wal::open(d.path(), 1, &tm()).unwrap();
        assert_eq!(r2.ops.len(), 6);
        assert_eq!(w.append(&[put(10)]).unwrap(), [8]);
        drop(w);

        // Nothing left to repair; the aside copy stays.
        let again = repair(d.path()).unwrap();
        assert!(!again.repaired && again.kept_aside.is_none());
        assert!(aside.exists());
    }
}
