//! The records of the memory log (`memory.wal`, written by the `memory` crate; its header is
//! [`crate::walhead`]): how one is encoded, and how every valid record is found in a log's
//! bytes, damaged or not. The log's writer, replay and repair live in the `memory` crate; the
//! indexer reads the records too (an ingest of a dump refuses ids the log holds writes for
//! that are not yet in a memory segment).
//!
//! A record is `[len: u32][crc32c(payload): u32][payload]`, little endian. A payload is
//! `[lsn: u64][op: u8][json_len: u32][json][dim: u32][dim × f32]`: op 1 puts a record (the JSON
//! [`MemoryRecord`]) with its vector, op 2 deletes the memory whose id is the JSON string; bit
//! [`END_OF_BATCH`] of op marks the last record of a batch (one tool call).

use crate::memory::MemoryRecord;

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

/// Largest payload accepted when reading (a corrupt length must not allocate gigabytes).
pub const MAX_PAYLOAD: usize = 64 << 20;

/// Bit 0x80 of a record's op: the last record of its batch.
pub const END_OF_BATCH: u8 = 0x80;

/// The bytes of one record: LSN `lsn`, `op`, `last` when it ends its batch.
pub fn encode(lsn: u64, op: &WalOp, last: bool) -> Vec<u8> {
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

/// A valid record found in the log bytes: `b[at..end]`.
#[derive(Debug)]
pub struct Found {
    pub at: usize,
    pub end: usize,
    pub lsn: u64,
    pub op: WalOp,
    /// Last record of its batch.
    pub last: bool,
}

/// Bytes `[start, end)` that hold no valid record, and why the record at `start` is bad.
#[derive(Debug)]
pub struct Skip {
    pub start: usize,
    pub end: usize,
    pub why: String,
}

/// Every valid record of a log, and the damaged stretches between them.
#[derive(Debug, Default)]
pub struct Salvage {
    pub recs: Vec<Found>,
    pub skips: Vec<Skip>,
}

/// The smallest payload: LSN, op, JSON length, dim.
pub const MIN_PAYLOAD: usize = 8 + 1 + 4 + 4;

/// The valid record at `at`, if one starts there with an LSN above `prev_lsn`.
pub fn record_at(b: &[u8], at: usize, prev_lsn: u64) -> Result<Found, String> {
    let head = b
        .get(at..at.saturating_add(8))
        .ok_or("incomplete record header")?;
    let len = u32::from_le_bytes(head[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
    if !(MIN_PAYLOAD..=MAX_PAYLOAD).contains(&len) {
        return Err(format!("record length {len} is implausible"));
    }
    let end = at + 8 + len;
    let p = b.get(at + 8..end).ok_or("incomplete record")?;
    if crc32c::crc32c(p) != crc {
        return Err("checksum mismatch".into());
    }
    let (lsn, op, last) = decode(p).ok_or("undecodable record")?;
    if lsn == 0 || lsn <= prev_lsn {
        return Err("sequence numbers go backwards".into());
    }
    Ok(Found {
        at,
        end,
        lsn,
        op,
        last,
    })
}

/// Whether a record with an LSN above `prev_lsn` could start at `at`, from its framing alone:
/// a plausible length that fits in `b`, and a payload laid out as [`decode`] reads it (LSN,
/// op, JSON length, dimension adding up to the length). A few bytes are read, no checksum is
/// computed: re-synchronising after damage tries every offset, and a checksum over each
/// plausible-looking length (one offset in about sixty of random bytes, each up to
/// [`MAX_PAYLOAD`]) made that quadratic in the damaged bytes. Every record [`record_at`]
/// accepts passes.
pub fn framing_at(b: &[u8], at: usize, prev_lsn: u64) -> bool {
    let u32_at = |o: usize| -> Option<usize> {
        Some(u32::from_le_bytes(b.get(o..o.checked_add(4)?)?.try_into().ok()?) as usize)
    };
    let check = || -> Option<bool> {
        let len = u32_at(at)?;
        if !(MIN_PAYLOAD..=MAX_PAYLOAD).contains(&len) || b.len() < at.checked_add(8 + len)? {
            return Some(false);
        }
        let p = at + 8;
        let lsn = u64::from_le_bytes(b.get(p..p + 8)?.try_into().ok()?);
        let kind = b[p + 8] & !END_OF_BATCH;
        let jl = u32_at(p + 9)?;
        let dim_at = 13usize.checked_add(jl)?;
        if lsn <= prev_lsn || !(kind == 1 || kind == 2) || dim_at + 4 > len {
            return Some(false);
        }
        let dim = u32_at(p + dim_at)?;
        Some(dim.checked_mul(4).and_then(|v| v.checked_add(dim_at + 4)) == Some(len))
    };
    check().unwrap_or(false)
}

/// Reads every valid record of the log bytes `b`, from `start` (the end of its header). After a bad
/// record it re-synchronises at the next offset where a valid record with a higher LSN
/// starts (offsets whose framing cannot be a record are passed over without a checksum:
/// [`framing_at`]); the bytes in between are a [`Skip`] (the last one, running to the end,
/// is a torn tail).
pub fn salvage(b: &[u8], start: usize) -> Salvage {
    let mut s = Salvage::default();
    let mut at = start;
    let mut prev = 0;
    while at < b.len() {
        match record_at(b, at, prev) {
            Ok(f) => {
                prev = f.lsn;
                at = f.end;
                s.recs.push(f);
            }
            Err(why) => {
                let next = (at + 1..b.len())
                    .find(|&o| framing_at(b, o, prev) && record_at(b, o, prev).is_ok())
                    .unwrap_or(b.len());
                s.skips.push(Skip {
                    start: at,
                    end: next,
                    why,
                });
                at = next;
            }
        }
    }
    s
}
