//! The header of the memory log (`memory.wal`, written by the `memory` crate): which model
//! embedded the vectors its records hold.
//!
//! Two versions are read:
//! - `CIXWAL01`: the 8-byte magic alone. Logs written before the header named the model; which
//!   model embedded their records is unknown (it was `MANIFEST`'s when they were written).
//! - `CIXWAL02`: the magic, `[n: u16][!n: u16][dim: u32][model id: n bytes][check: u32]`,
//!   little endian, where `check` is the first four bytes of the blake3 of everything before
//!   it. The length is stored twice (the second time inverted) so that a damaged length is
//!   seen as damage, never taken for a header cut short.
//!
//! A new log, and every log emptied by a flush, is written with the second. The header is
//! written and fsynced before any record is appended, so a file shorter than its header holds
//! no record ([`WalHeader::Partial`]: a crash while it was written). Records start right after
//! the header.

use std::io::Read;
use std::path::Path;

/// The first version's magic: the whole header.
pub const MAGIC_V1: &[u8; 8] = b"CIXWAL01";
/// The second version's magic.
pub const MAGIC_V2: &[u8; 8] = b"CIXWAL02";
/// Bytes of a second-version header besides the model id.
const V2_FIXED: usize = 8 + 2 + 2 + 4 + 4;

/// The model a log's records were embedded with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogModel {
    pub id: String,
    pub dim: u32,
}

impl std::fmt::Display for LogModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` ({} dims)", self.id, self.dim)
    }
}

/// What the first bytes of a log say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalHeader {
    /// A complete header of `len` bytes; `model` is `None` for a first-version log.
    Complete { len: usize, model: Option<LogModel> },
    /// Empty, or the start of a header cut short (a crash while it was written): no record
    /// follows it, and the log may be written anew.
    Partial,
    /// Not a memory log's header, or a damaged one (`why`).
    Bad { why: String },
}

impl WalHeader {
    /// The model a complete header names.
    pub fn model(self) -> Option<LogModel> {
        match self {
            WalHeader::Complete { model, .. } => model,
            _ => None,
        }
    }
}

/// The header naming `model`. A model id too long to record (over 65,535 bytes) gets the
/// first version's header: the model is then unknown, as in logs written before it was kept.
pub fn encode(model: &LogModel) -> Vec<u8> {
    let Ok(n) = u16::try_from(model.id.len()) else {
        return MAGIC_V1.to_vec();
    };
    let mut h = Vec::with_capacity(V2_FIXED + model.id.len());
    h.extend_from_slice(MAGIC_V2);
    h.extend_from_slice(&n.to_le_bytes());
    h.extend_from_slice(&(!n).to_le_bytes());
    h.extend_from_slice(&model.dim.to_le_bytes());
    h.extend_from_slice(model.id.as_bytes());
    let check = check_of(&h);
    h.extend_from_slice(&check);
    h
}

fn check_of(bytes: &[u8]) -> [u8; 4] {
    let hash = blake3::hash(bytes);
    hash.as_bytes()[..4].try_into().expect("4 bytes")
}

/// Reads the header at the start of `b` (the log's bytes, or its first bytes: a complete
/// header is at most [`MAX_LEN`] bytes).
pub fn parse(b: &[u8]) -> WalHeader {
    let magic_len = MAGIC_V1.len();
    if b.len() < magic_len {
        return if MAGIC_V1.starts_with(b) || MAGIC_V2.starts_with(b) {
            WalHeader::Partial
        } else {
            bad("the file does not start as a memory log does")
        };
    }
    if b.starts_with(MAGIC_V1) {
        return WalHeader::Complete {
            len: magic_len,
            model: None,
        };
    }
    if !b.starts_with(MAGIC_V2) {
        return bad("the file does not start as a memory log does");
    }
    if b.len() < 12 {
        return WalHeader::Partial;
    }
    let Some(len) = declared_len(b) else {
        return bad("the memory log's header is damaged (its two copies of a length differ)");
    };
    let Some(h) = b.get(..len) else {
        return WalHeader::Partial;
    };
    if h[len - 4..] != check_of(&h[..len - 4]) {
        // A header whose write was cut, with nothing after it, is a crash while the log was
        // created or emptied; with records after it, damage.
        return if b.len() == len {
            WalHeader::Partial
        } else {
            bad("the memory log's header fails its checksum")
        };
    }
    let (dim, id) = fields(h);
    match std::str::from_utf8(id) {
        Ok(id) => WalHeader::Complete {
            len,
            model: Some(LogModel {
                id: id.to_string(),
                dim,
            }),
        },
        Err(_) => bad("the memory log's header names its model in invalid UTF-8"),
    }
}

/// The length a second-version header at the start of `b` would have by its two copies of the
/// model id's length, when they agree (whatever the rest of it says): where its records
/// would start once the header is damaged.
pub fn declared_len(b: &[u8]) -> Option<usize> {
    let lens = b.get(8..12)?;
    let n = u16::from_le_bytes([lens[0], lens[1]]);
    (!n == u16::from_le_bytes([lens[2], lens[3]])).then_some(V2_FIXED + n as usize)
}

/// The model a damaged second-version header at the start of `b` names, read as well as it can
/// be: its two length copies must agree (else `None`); the id is read with invalid UTF-8
/// replaced, so a damaged id names no real model. For `queryd repair-wal`, which must not
/// forget whose vectors the records hold.
pub fn damaged_model(b: &[u8]) -> Option<LogModel> {
    let h = b.get(..declared_len(b)?)?;
    let (dim, id) = fields(h);
    Some(LogModel {
        id: String::from_utf8_lossy(id).into_owned(),
        dim,
    })
}

/// The dimension and the model id bytes of the second-version header `h` (exactly its
/// [`declared_len`] bytes).
fn fields(h: &[u8]) -> (u32, &[u8]) {
    let dim = u32::from_le_bytes(h[12..16].try_into().expect("4 bytes"));
    (dim, &h[16..h.len() - 4])
}

/// The model a log whose damaged header cannot be read is said to hold ([`damaged_model`]
/// failed on a header closer to the second version than to the first): no real model, so
/// its records are kept out of search until they are exported and ingested again.
pub fn unknown_model() -> LogModel {
    LogModel {
        id: "unknown (the memory log's header was damaged)".into(),
        dim: 0,
    }
}

/// Whether the first 8 bytes of `b` are closer (in bits) to the first version's magic than to
/// the second's: a damaged header that was most likely the bare magic of an older log.
pub fn closer_to_v1(b: &[u8]) -> bool {
    let dist = |m: &[u8; 8]| -> u32 {
        m.iter()
            .zip(b.iter().chain(std::iter::repeat(&0)))
            .map(|(x, y)| (x ^ y).count_ones())
            .sum()
    };
    dist(MAGIC_V1) < dist(MAGIC_V2)
}

fn bad(why: &str) -> WalHeader {
    WalHeader::Bad {
        why: why.to_string(),
    }
}

/// The longest header [`parse`] may need to read.
pub const MAX_LEN: usize = V2_FIXED + u16::MAX as usize;

/// The header of the log at `path` and the file's length; `None` when there is no file (or
/// it cannot be read: callers treat that as holding records where it matters).
pub fn read(path: &Path) -> Option<(WalHeader, u64)> {
    let f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let mut b = Vec::new();
    // One byte past the longest header: whether anything follows it decides between a
    // header cut short and a damaged one.
    f.take(MAX_LEN as u64 + 1).read_to_end(&mut b).ok()?;
    Some((parse(&b), len))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> LogModel {
        LogModel {
            id: "all-MiniLM-L6-v2@28b4d67a82c978fd".into(),
            dim: 384,
        }
    }

    #[test]
    fn headers_round_trip_and_their_prefixes_are_partial() {
        let h = encode(&model());
        assert_eq!(
            parse(&h),
            WalHeader::Complete {
                len: h.len(),
                model: Some(model())
            }
        );
        let mut with_records = h.clone();
        with_records.extend_from_slice(b"records");
        assert_eq!(
            parse(&with_records),
            WalHeader::Complete {
                len: h.len(),
                model: Some(model())
            }
        );
        for cut in 0..h.len() {
            assert_eq!(parse(&h[..cut]), WalHeader::Partial, "{cut}");
        }
        assert_eq!(
            parse(b"CIXWAL01rest"),
            WalHeader::Complete {
                len: 8,
                model: None
            }
        );
        assert_eq!(parse(b"CIXW"), WalHeader::Partial);
        let long = LogModel {
            id: "m".repeat(70_000),
            dim: 3,
        };
        assert_eq!(encode(&long), MAGIC_V1.to_vec());
    }

    #[test]
    fn damaged_headers_are_refused() {
        let h = encode(&model());
        // Any flipped bit of a header that records follow is damage, never a header cut
        // short (which would let the log be written anew), the length included.
        for i in 0..h.len() * 8 {
            for records in [1, 64] {
                let mut b = h.clone();
                b[i / 8] ^= 1 << (i % 8);
                b.extend(std::iter::repeat_n(7u8, records));
                assert!(matches!(parse(&b), WalHeader::Bad { .. }), "bit {i}");
            }
        }
        // The same header with nothing after it: a cut write, written anew.
        let mut torn = h.clone();
        let last = torn.len() - 1;
        torn[last] ^= 1;
        assert_eq!(parse(&torn), WalHeader::Partial);
        assert!(matches!(parse(b"not a log"), WalHeader::Bad { .. }));
        assert!(matches!(parse(b"XY"), WalHeader::Bad { .. }));

        // What a repair reads back from a damaged header.
        let mut b = h.clone();
        b[0] ^= 0x40;
        assert_eq!(damaged_model(&b), Some(model()));
        assert!(!closer_to_v1(&b));
        b[9] ^= 0x01;
        assert_eq!(damaged_model(&b), None);
        let mut v1 = MAGIC_V1.to_vec();
        v1[3] ^= 0x01;
        assert!(closer_to_v1(&v1));
        assert!(!closer_to_v1(b"not a log"));
    }

    /// The longest header, damaged, with one byte after it, read from a file: damage, not
    /// a header cut short (the read goes one byte past the longest header).
    #[test]
    fn the_longest_header_is_read_with_what_follows() {
        let m = LogModel {
            id: "x".repeat(u16::MAX as usize),
            dim: 8,
        };
        let mut h = encode(&m);
        assert_eq!(h.len(), MAX_LEN);
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("memory.wal");
        std::fs::write(&p, &h).unwrap();
        assert_eq!(
            read(&p),
            Some((
                WalHeader::Complete {
                    len: MAX_LEN,
                    model: Some(m)
                },
                MAX_LEN as u64
            ))
        );
        h[20] ^= 0x01;
        h.push(1);
        std::fs::write(&p, &h).unwrap();
        assert!(matches!(read(&p), Some((WalHeader::Bad { .. }, _))));
    }
}
