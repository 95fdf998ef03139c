//! The memory write-ahead log: `memory.wal` in the index directory.
//!
//! Layout: a header naming the model whose vectors the records hold ([`format::walhead`]; logs
//! written before it did start with the 8-byte magic alone), then records
//! ([`format::walrec`]: framed, checksummed, each an LSN and a put or a delete, the last of a
//! batch marked). Replay applies whole batches only: a batch without its last record is a torn
//! tail, so an unacknowledged call is never half there. Sequence numbers (LSN) grow by one per
//! record across truncations; `MANIFEST`'s `memory_lsn` says which are already in memory
//! segments.
//!
//! A write is acknowledged only after its records are appended and the file is fsynced. On
//! open, the log is read from the start. The first record that is incomplete or fails its
//! checksum is one of two things:
//! - a torn tail (a crash mid-append): nothing valid follows it. The file is cut there (the
//!   bytes cut are kept beside it in `memory.wal.cut-<ms>`), so a later append never follows
//!   garbage; the records before it are replayed and the bytes cut are reported.
//! - damage ([`Damage`]): a valid record (length, crc32c, decodable, higher LSN) starts
//!   somewhere after it. A crash cannot write valid records after garbage (appends are
//!   sequential and a torn tail is cut before the next one), so this is corruption of
//!   acknowledged data: nothing is cut, the valid prefix (whole batches) is replayed, appends
//!   are refused, and [`repair`] salvages every readable record into a new log.
//!
//! Records embedded with another model than the one the log is opened for (its header says
//! so) are returned but flagged ([`Recovery::model`], [`Wal::poisoned`]): their vectors mean
//! nothing to this model, so the caller does not serve them and appends are refused.
//!
//! The process holding the log records its pid in `memory.wal.pid` ([`holder_pid`]), so a
//! second server can say who holds it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use format::fsio;
pub use format::walhead::LogModel;
use format::walhead::{self, WalHeader};
pub use format::walrec::WalOp;
use format::walrec::{encode, framing_at, salvage};
use serde::Serialize;

mod repair;
pub use repair::{repair, KeptRecord, LostRange, RepairReport};

pub const WAL_FILE: &str = format::manifest::MEMORY_WAL_FILE;
/// Beside the log: the pid of the process holding it.
pub const PID_FILE: &str = "memory.wal.pid";
/// The first version's header, all of it: where records start when a damaged header is
/// replaced ([`repair`]), and the shortest header there is.
const MAGIC: &[u8; 8] = walhead::MAGIC_V1;

#[derive(Debug, thiserror::Error)]
pub enum WalError {
    #[error("I/O error on the memory log {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} does not start as a memory log does (its header is damaged, or it is another \
         file): its records are neither replayed nor exported, and memory writes are \
         disabled; stop queryd and run `queryd repair-wal --index <index dir>`, which keeps \
         the file aside and salvages every record it can read"
    )]
    BadMagic { path: PathBuf },
    #[error("{path} is in use by another queryd{}; only one server may write memories to an index", .pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    Busy { path: PathBuf, pid: Option<u32> },
}

/// A damaged record followed by valid ones (not a torn tail: see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Damage {
    /// Why the first bad record is bad (checksum mismatch, implausible length, ...).
    pub reason: String,
    /// Byte offset of the first bad record.
    pub bad_offset: u64,
    /// Byte offset of the first valid record after it.
    pub resume_offset: u64,
    /// Bytes that hold no valid record, between the first and the last valid record after the
    /// damage (more than one damaged region counts too).
    pub bytes_skipped: u64,
    /// LSN of the last record replayed (the valid prefix, whole batches); 0 when none.
    pub last_good_lsn: u64,
    /// Intact records of the batch the damage broke, before it: not replayed (whole batches
    /// only) until the log is repaired.
    pub unreplayed_before: u64,
    /// Valid records after the damage: not replayed until the log is repaired.
    pub records_after: u64,
    /// LSN range of those records.
    pub first_lsn_after: u64,
    pub last_lsn_after: u64,
}

impl Damage {
    /// Records in the damaged stretch itself, from the LSN gap around it (`None` when the
    /// damage is at the start of the log and the gap is unknown).
    pub fn damaged_records(&self) -> Option<u64> {
        let before = self.last_good_lsn + self.unreplayed_before;
        (before > 0).then(|| self.first_lsn_after.saturating_sub(before + 1))
    }

    /// Records of the log that are not served: the damaged ones, the intact ones of the batch
    /// it broke, and every one after it (at least one damaged record when the gap is unknown).
    pub fn records_not_served(&self) -> u64 {
        self.damaged_records().unwrap_or(1) + self.unreplayed_before + self.records_after
    }

    /// The message of [`Display`](std::fmt::Display), with the repair command for the index
    /// at `dir`.
    pub fn message(&self, dir: &Path) -> String {
        self.to_string()
            .replace("--index DIR", &format!("--index {}", dir.display()))
    }
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the memory log is damaged at byte {} ({}) and {} valid records follow it (LSN {}-{}, from byte {}); they are not served, nor are {} intact records of the batch it broke (only LSNs up to {} are). This is corruption, not a crash: nothing was cut. Stop every queryd on this index and run `queryd repair-wal --index DIR`: it keeps the damaged log aside and writes a new one with every readable record",
            self.bad_offset,
            self.reason,
            self.records_after,
            self.first_lsn_after,
            self.last_lsn_after,
            self.resume_offset,
            self.unreplayed_before,
            self.last_good_lsn
        )
    }
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
    /// The cut tail held a record written whole (its length, sequence number and layout
    /// add up, every byte there) that fails its checksum: a write torn by a crash rarely
    /// leaves that (it leaves a record cut short, or zeros), a bit flipped in an
    /// acknowledged record does. Its bytes are kept all the same.
    pub cut_suspect: bool,
    /// A damaged record followed by valid ones: nothing was cut, `ops` is the valid prefix.
    pub damage: Option<Damage>,
    /// The model the log's header names (for a new or emptied log, the one it was opened
    /// for); `None` for a log written before headers named it.
    pub model: Option<LogModel>,
}

impl Recovery {
    /// Whether the log's records were embedded with another model than `model` (by what its
    /// header says; a log that does not say is taken to be `model`'s).
    pub fn other_model(&self, model: &LogModel) -> bool {
        self.model.as_ref().is_some_and(|m| m != model)
    }
}

/// The open log, positioned at its end.
pub struct Wal {
    path: PathBuf,
    file: File,
    /// The header at the start of the file, as it is there.
    header: Vec<u8>,
    /// The model this log was opened for: the one an emptied log's header is written for.
    model: LogModel,
    len: u64,
    next_lsn: u64,
    /// Set when a failed append could not be cut back.
    poisoned: Option<String>,
}

/// What reading a log found: the records to replay (whole batches of the valid prefix), where
/// they end, why that is not the end of the bytes (when it is not), and damage.
struct Scanned {
    ops: Vec<(u64, WalOp)>,
    end: usize,
    why: Option<String>,
    damage: Option<Damage>,
    /// The first bad record was written whole (its framing adds up, every byte present) and
    /// fails its checksum: see [`Recovery::cut_suspect`].
    bad_whole: bool,
}

fn scan(b: &[u8], start: usize) -> Scanned {
    let s = salvage(b, start);
    let first_skip = s.skips.first();
    // The valid prefix: records before the first bad one.
    let n_pre = s
        .recs
        .iter()
        .take_while(|r| first_skip.is_none_or(|k| r.at < k.start))
        .count();
    // Records of a batch whose last record is missing are not replayed.
    let whole = s.recs[..n_pre]
        .iter()
        .rposition(|r| r.last)
        .map_or(0, |i| i + 1);
    let end = if whole == 0 {
        start
    } else {
        s.recs[whole - 1].end
    };
    let damage = first_skip.filter(|k| k.end < b.len()).map(|k| {
        let after = &s.recs[n_pre..];
        let last_after = after.last().expect("a valid record ends the skip");
        Damage {
            reason: k.why.clone(),
            bad_offset: k.start as u64,
            resume_offset: k.end as u64,
            bytes_skipped: s
                .skips
                .iter()
                .filter(|x| x.end <= last_after.at)
                .map(|x| (x.end - x.start) as u64)
                .sum(),
            last_good_lsn: whole.checked_sub(1).map_or(0, |i| s.recs[i].lsn),
            unreplayed_before: (n_pre - whole) as u64,
            records_after: after.len() as u64,
            first_lsn_after: after[0].lsn,
            last_lsn_after: last_after.lsn,
        }
    });
    let why = (end < b.len())
        .then(|| first_skip.map_or_else(|| "incomplete batch".to_string(), |k| k.why.clone()));
    let bad_whole = first_skip.is_some_and(|k| {
        let prev = s.recs[..n_pre].last().map_or(0, |r| r.lsn);
        framing_at(b, k.start, prev)
    });
    let ops = s
        .recs
        .into_iter()
        .take(whole)
        .map(|r| (r.lsn, r.op))
        .collect();
    Scanned {
        ops,
        end,
        why,
        damage,
        bad_whole,
    }
}

impl Wal {
    /// Opens (or creates) `dir/memory.wal` for records embedded with `model`, cuts a torn tail
    /// and returns the valid records. `min_next_lsn` is the smallest sequence number a new
    /// record may take (one past `MANIFEST`'s `memory_lsn`).
    ///
    /// A new log, or one that holds no record, gets a header naming `model`. A log whose
    /// header names another model keeps its records untouched: they are returned (with
    /// [`Recovery::model`] saying whose they are) and appends are refused.
    pub fn open(
        dir: &Path,
        min_next_lsn: u64,
        model: &LogModel,
    ) -> Result<(Wal, Recovery), WalError> {
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
            Err(std::fs::TryLockError::WouldBlock) => {
                let pid = holder_pid(dir);
                return Err(WalError::Busy { path, pid });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
        }
        record_holder(dir);
        let mut b = Vec::new();
        file.read_to_end(&mut b).map_err(io)?;
        let mut rec = Recovery::default();
        let fresh = walhead::encode(model);
        let (header_len, log_model) = match walhead::parse(&b) {
            // New, or a crash while its header was written (no record follows one).
            WalHeader::Partial => {
                // Kept aside all the same (a header cut short holds no record, unless damage
                // made its two length copies agree on a longer one).
                if !b.is_empty() {
                    keep_cut(&path, &b).map_err(io)?;
                }
                write_header(&mut file, &path, &fresh).map_err(io)?;
                sync_parent(&path).map_err(io)?;
                b = fresh.clone();
                (fresh.len(), walhead::parse(&fresh).model())
            }
            WalHeader::Bad { .. } => return Err(WalError::BadMagic { path }),
            WalHeader::Complete { len, model } => (len, model),
        };
        rec.model = log_model;
        let Scanned {
            ops,
            end,
            why,
            damage,
            bad_whole,
        } = scan(&b, header_len);
        if let Some(d) = damage {
            // Corruption of acknowledged records: cut nothing, append nothing (an append
            // would follow the damage); the valid prefix is served until a repair.
            let last = ops.last().map_or(0, |o| o.0);
            let msg = format!("{}: {d}", path.display());
            rec.ops = ops;
            rec.damage = Some(d);
            return Ok((
                Wal {
                    path,
                    file,
                    header: b[..header_len].to_vec(),
                    model: model.clone(),
                    len: b.len() as u64,
                    next_lsn: (last + 1).max(min_next_lsn).max(1),
                    poisoned: Some(msg),
                },
                rec,
            ));
        }
        if end < b.len() {
            rec.cut_bytes = (b.len() - end) as u64;
            rec.cut_suspect = bad_whole;
            // Keep what is cut: a torn tail is garbage, but a flipped bit mid-log would
            // otherwise take acknowledged records after it along.
            let aside = keep_cut(&path, &b[end..]).map_err(io)?;
            rec.cut_reason = Some(format!(
                "{}; the {} bytes cut are kept in {}",
                why.unwrap_or_else(|| "corrupt record".into()),
                b.len() - end,
                aside.display()
            ));
            fsio::set_len(&file, &path, end as u64).map_err(io)?;
            fsio::sync_all(&file, &path).map_err(io)?;
        }
        let mut header = b[..header_len].to_vec();
        let mut end = end;
        let mut poisoned = None;
        if end == header_len && header != fresh {
            // No record: the header is written for this model (a log from before headers
            // named it, or one another model emptied). A crash midway leaves a header cut
            // short, which the next open writes again.
            write_header(&mut file, &path, &fresh).map_err(io)?;
            header = fresh;
            end = header.len();
            rec.model = Some(model.clone());
        } else if rec.other_model(model) {
            poisoned = Some(format!(
                "{}: its records were embedded with model {}, not {model}; nothing is appended \
                 to it",
                path.display(),
                rec.model.as_ref().expect("another model")
            ));
        }
        file.seek(SeekFrom::Start(end as u64)).map_err(io)?;
        let last = ops.last().map_or(0, |o| o.0);
        rec.ops = ops;
        Ok((
            Wal {
                path,
                file,
                header,
                model: model.clone(),
                len: end as u64,
                next_lsn: (last + 1).max(min_next_lsn).max(1),
                poisoned,
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

    /// Why appends are refused, when a failed write could not be cut back (until a restart
    /// recovers the log).
    pub fn poisoned(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    /// Drops every record (after they were flushed into a committed segment). A header that
    /// does not name the log's model (a log from before headers named it) is written anew.
    pub fn truncate(&mut self) -> Result<(), WalError> {
        let io = |source| WalError::Io {
            path: self.path.clone(),
            source,
        };
        let fresh = walhead::encode(&self.model);
        if self.header != fresh {
            // The file is empty or a header cut short until this succeeds: nothing may be
            // appended after a failure (a restart writes the header again).
            self.len = 0;
            if let Err(e) = write_header(&mut self.file, &self.path, &fresh) {
                self.poisoned = Some(format!(
                    "the memory log's header could not be written after a flush ({e}); restart \
                     queryd"
                ));
                return Err(io(e));
            }
            self.header = fresh;
            self.len = self.header.len() as u64;
            return Ok(());
        }
        let hlen = self.header.len() as u64;
        fsio::set_len(&self.file, &self.path, hlen).map_err(io)?;
        // The file is this long now, even if what follows fails: a later cut-back of a
        // failed append must not grow it again (zeros before the next records).
        self.len = hlen;
        self.file.seek(SeekFrom::Start(hlen)).map_err(io)?;
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
        self.len <= self.header.len() as u64
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
    let (header_len, model) = match walhead::parse(&b) {
        WalHeader::Partial => return Ok(Recovery::default()),
        WalHeader::Bad { .. } => return Err(WalError::BadMagic { path }),
        WalHeader::Complete { len, model } => (len, model),
    };
    let Scanned {
        ops,
        end,
        why,
        damage,
        ..
    } = scan(&b, header_len);
    Ok(Recovery {
        model,
        ops,
        cut_bytes: if damage.is_some() {
            0
        } else {
            (b.len() - end) as u64
        },
        cut_reason: why,
        // Only the log's holder cuts (and says whether the cut looks like damage).
        cut_suspect: false,
        damage,
    })
}

/// Writes `bytes` cut from the log at `path` beside it (`memory.wal.cut-<ms>`, never over an
/// earlier cut: `-1`, `-2`, … then), durably before the log is cut: a power cut between the
/// two must not lose both copies.
fn keep_cut(path: &Path, bytes: &[u8]) -> std::io::Result<PathBuf> {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let mut aside = path.with_extension(format!("wal.cut-{ms}"));
    let mut n = 0u32;
    while aside.exists() {
        n += 1;
        aside = path.with_extension(format!("wal.cut-{ms}-{n}"));
    }
    let mut f = fsio::create(&aside)?;
    fsio::write_all(&mut f, &aside, bytes)?;
    fsio::sync_all(&f, &aside)?;
    drop(f);
    if let Some(d) = aside.parent() {
        fsio::sync_dir(d)?;
    }
    Ok(aside)
}

/// Writes `header` as the whole of the log `file` (which holds no record) and fsyncs it.
fn write_header(file: &mut File, path: &Path, header: &[u8]) -> std::io::Result<()> {
    fsio::set_len(file, path, 0)?;
    file.seek(SeekFrom::Start(0))?;
    fsio::write_all(file, path, header)?;
    fsio::sync_all(file, path)
}

/// The pid recorded by the process holding `dir`'s log, if any (see [`PID_FILE`]).
pub fn holder_pid(dir: &Path) -> Option<u32> {
    std::fs::read_to_string(dir.join(PID_FILE))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Records this process as the holder of `dir`'s log. Best effort: a read-only directory only
/// loses the pid in a second server's status.
fn record_holder(dir: &Path) {
    let _ = std::fs::write(dir.join(PID_FILE), format!("{}\n", std::process::id()));
}

impl Drop for Wal {
    fn drop(&mut self) {
        // The lock goes with the file; so does the record of who held it.
        if let Some(dir) = self.path.parent() {
            if holder_pid(dir) == Some(std::process::id()) {
                let _ = std::fs::remove_file(dir.join(PID_FILE));
            }
        }
    }
}

/// fsyncs the directory holding `path` (after creating or renaming a file in it): until then
/// a power cut may lose the file's name, and every write acknowledged through it.
pub fn sync_parent(path: &std::path::Path) -> std::io::Result<()> {
    match path.parent() {
        Some(d) => fsio::sync_dir(d),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
