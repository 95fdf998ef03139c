//! `texts.bin`: every chunk's text, apart from the records of `chunks.rkyv` (format 4).
//!
//! | offset (in the payload) | size | field |
//! |---:|---:|---|
//! | 0 | 8 | chunk count `n` (u64 LE) |
//! | 8 | 8 × (n + 1) | end offsets: text `c` is `bytes[o[c]..o[c + 1]]`, `o[0] = 0` (u64 LE) |
//! | 8 × (n + 2) | `o[n]` | the texts, concatenated, UTF-8 |
//!
//! Why a file of its own: texts are most of a segment's bytes besides the vectors (about 1 KB
//! a chunk, a gigabyte at a million chunks). Kept inside the records (format 3), every text
//! lay between the names and ids that rkyv's validation reads at open, so opening an index
//! faulted in every page of text, and a search reads about ten texts. Here opening reads the
//! header and three numbers; a read checks its two offsets and its UTF-8
//! ([`MappedTexts::get`]); [`MappedTexts::check_all`] (`indexer verify`) checks every one.

use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::header::{self, Component, HEADER_LEN};
use crate::{corrupt, FormatError, Result};

/// The payload of `texts.bin` for `texts`, in chunk order.
pub fn encode<S: AsRef<str>>(texts: &[S]) -> Vec<u8> {
    let mut out = table(texts);
    out.reserve(texts.iter().map(|t| t.as_ref().len()).sum());
    for t in texts {
        out.extend_from_slice(t.as_ref().as_bytes());
    }
    out
}

/// The part of [`encode`]'s bytes before the texts: the count and the offsets. The segment
/// writer writes it and then the texts themselves, without joining them in memory.
pub fn table<S: AsRef<str>>(texts: &[S]) -> Vec<u8> {
    let n = texts.len();
    let mut out = Vec::with_capacity(8 * (n + 2));
    out.extend_from_slice(&(n as u64).to_le_bytes());
    let mut end = 0u64;
    out.extend_from_slice(&end.to_le_bytes());
    for t in texts {
        end += t.as_ref().len() as u64;
        out.extend_from_slice(&end.to_le_bytes());
    }
    out
}

/// `texts.bin`, mapped; see the module docs.
pub struct MappedTexts {
    map: Mmap,
    path: PathBuf,
    n: usize,
    /// Where the texts start in the map.
    base: usize,
}

impl std::fmt::Debug for MappedTexts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedTexts")
            .field("path", &self.path)
            .field("n", &self.n)
            .finish()
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

impl MappedTexts {
    /// The mapped file (for [`crate::populate`]).
    pub(crate) fn map(&self) -> &Mmap {
        &self.map
    }

    /// Checks the header (component, `dim`, `model_id`), the count against `chunks` and that
    /// the last offset ends the file; reads nothing else.
    pub fn open(path: &Path, map: Mmap, dim: u32, model_id: &str, chunks: u32) -> Result<Self> {
        header::check(path, &map, Component::Texts, Some(dim), model_id)?;
        let p = &map[HEADER_LEN..];
        if p.len() < 16 {
            return Err(corrupt(path, "truncated before the text offsets"));
        }
        let n = u64_at(p, 0);
        if n != chunks as u64 {
            return Err(corrupt(
                path,
                format!("{n} texts, the segment has {chunks} chunks"),
            ));
        }
        let n = n as usize;
        let base = 8 * (n + 2);
        if p.len() < base {
            return Err(corrupt(path, "truncated in the text offsets"));
        }
        let last = u64_at(p, 8 * (n + 1));
        if last != (p.len() - base) as u64 {
            return Err(corrupt(
                path,
                format!(
                    "the offsets end at byte {last} of the texts, which hold {}",
                    p.len() - base
                ),
            ));
        }
        Ok(MappedTexts {
            map,
            path: path.to_path_buf(),
            n,
            base: HEADER_LEN + base,
        })
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Text `c`: its offsets checked (in order, inside the file) and its UTF-8 checked.
    pub fn get(&self, c: u32) -> Result<&str> {
        let c = c as usize;
        if c >= self.n {
            return Err(FormatError::InvalidInput(format!(
                "text {c} is past the end of {} ({} texts)",
                self.path.display(),
                self.n
            )));
        }
        let (start, end) = (self.offset(c), self.offset(c + 1));
        let len = self.map.len() - self.base;
        if start > end || end > len as u64 {
            return Err(corrupt(
                &self.path,
                format!("chunk {c}: text offsets {start}..{end} are out of order or past {len}"),
            ));
        }
        let b = &self.map[self.base + start as usize..self.base + end as usize];
        crate::lazy_text::utf8(b).map_err(|e| corrupt(&self.path, format!("chunk {c}: {e}")))
    }

    /// The byte length of text `c`, unchecked (0 past the end or for offsets out of order).
    pub fn len_of(&self, c: u32) -> usize {
        let c = c as usize;
        if c >= self.n {
            return 0;
        }
        self.offset(c + 1).saturating_sub(self.offset(c)) as usize
    }

    fn offset(&self, i: usize) -> u64 {
        u64_at(&self.map, HEADER_LEN + 8 * (i + 1))
    }

    /// Every text read as [`MappedTexts::get`] would: the first failure and how many fail.
    pub fn check_all(&self) -> Result<()> {
        let mut bad = (0..self.n as u32).filter_map(|c| self.get(c).err());
        let Some(first) = bad.next() else {
            return Ok(());
        };
        let more = bad.count();
        Err(corrupt(
            &self.path,
            format!(
                "{} text(s) cannot be read; the first: {}",
                more + 1,
                match &first {
                    FormatError::Corrupt { detail, .. } => detail.clone(),
                    e => e.to_string(),
                }
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MODEL: &str = "test-model";

    fn write(dir: &Path, payload: &[u8]) -> PathBuf {
        let p = dir.join("texts.bin");
        std::fs::write(&p, header::frame(Component::Texts, 4, MODEL, payload)).unwrap();
        p
    }

    fn open(p: &Path, n: u32) -> Result<MappedTexts> {
        let f = std::fs::File::open(p).unwrap();
        // SAFETY: a test file nothing else writes while it is mapped.
        let map = unsafe { Mmap::map(&f) }.unwrap();
        MappedTexts::open(p, map, 4, MODEL, n)
    }

    #[test]
    fn round_trip_including_empty_texts() {
        let d = tempfile::tempdir().unwrap();
        let texts = ["fn a() {}", "", "héllo ✓", ""];
        let p = write(d.path(), &encode(&texts));
        let t = open(&p, 4).unwrap();
        for (c, want) in texts.iter().enumerate() {
            assert_eq!(t.get(c as u32).unwrap(), *want);
        }
        assert!(matches!(t.get(4), Err(FormatError::InvalidInput(_))));
        t.check_all().unwrap();
        let p = write(d.path(), &encode::<&str>(&[]));
        assert!(open(&p, 0).unwrap().is_empty());
    }

    #[test]
    fn damage_is_an_error_at_open_or_on_read_never_a_panic() {
        let d = tempfile::tempdir().unwrap();
        let good = encode(&["alpha", "beta", "gamma"]);
        // Wrong count, truncated offsets, last offset not the end: refused at open.
        assert!(open(&write(d.path(), &good), 2).is_err());
        assert!(open(&write(d.path(), &good[..20]), 3).is_err());
        assert!(open(&write(d.path(), &good[..good.len() - 1]), 3).is_err());
        // Offsets out of order: only that read fails, and `check_all` counts it.
        let mut b = good.clone();
        // The offsets are 0, 5, 9, 14; make them 0, 9, 2, 14: text 1 runs from 9 back to 2.
        b[16..24].copy_from_slice(&9u64.to_le_bytes());
        b[24..32].copy_from_slice(&2u64.to_le_bytes());
        let t = open(&write(d.path(), &b), 3).unwrap();
        assert!(t.get(0).is_ok());
        let e = t.get(1).unwrap_err().to_string();
        assert!(e.contains("chunk 1") && e.contains("out of order"), "{e}");
        let e = t.check_all().unwrap_err().to_string();
        assert!(e.contains("1 text(s) cannot be read"), "{e}");
        // Bytes that are not UTF-8: that read fails, saying where.
        let mut b = good.clone();
        let at = b.len() - 5 + 2; // "gamma", its third byte
        b[at] = 0xFF;
        let t = open(&write(d.path(), &b), 3).unwrap();
        assert_eq!(t.get(1).unwrap(), "beta");
        let e = t.get(2).unwrap_err().to_string();
        assert!(e.contains("not valid UTF-8 at byte 2"), "{e}");
        // Every single-byte change of the whole file: an error or a text, never a panic.
        let framed = header::frame(Component::Texts, 4, MODEL, &good);
        for i in 0..framed.len() {
            let mut b = framed.clone();
            b[i] ^= 0x5a;
            let p = d.path().join("texts.bin");
            std::fs::write(&p, &b).unwrap();
            if let Ok(t) = open(&p, 3) {
                for c in 0..4 {
                    let _ = (t.get(c), t.len_of(c));
                }
                let _ = t.check_all();
            }
        }
    }
}
