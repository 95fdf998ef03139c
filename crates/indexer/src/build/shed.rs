//! Chunk text dropped after parsing to stay within the memory budget, and how it comes back
//! when its segment is written ([`super::reread`]).

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::chunk::{self, ChunkOptions, FileExtract, Language};
use crate::IndexerError;

/// The shed texts that the file's bytes cannot give back by slicing: composed texts (a header
/// line, a large type reduced to its header and members) and the prefixes of body parts (a
/// long function's part repeats its signature). They are written to an unnamed scratch file in
/// the index directory right after the parse and read back when their segment is written, so
/// a shed file is neither held in memory for them nor chunked again. Unnamed, it is gone when
/// the build ends, however it ends.
pub(super) struct Spill {
    file: File,
    /// Bytes reserved so far; each file's texts are written at an offset it reserves.
    end: AtomicU64,
    /// Bytes written (a failed write's reservation is left as a hole nothing points at).
    written: AtomicU64,
}

impl Spill {
    /// An empty spill file in `dir`.
    pub(super) fn create(dir: &Path) -> io::Result<Spill> {
        Ok(Spill {
            file: tempfile::tempfile_in(dir)?,
            end: AtomicU64::new(0),
            written: AtomicU64::new(0),
        })
    }

    /// Writes `bytes` after every earlier write (from any thread); returns where.
    fn put(&self, bytes: &[u8]) -> io::Result<u64> {
        let at = self.end.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.file.write_all_at(bytes, at)?;
        self.written
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(at)
    }

    /// The `len` bytes written at `at`.
    fn get(&self, at: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0; len];
        self.file.read_exact_at(&mut buf, at)?;
        Ok(buf)
    }

    /// Bytes written to it.
    pub(super) fn bytes(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }
}

/// The build's spill once the parse is over: `None` when no file needed one, or when it could
/// not be made (said once on `progress`: the files that needed it were chunked again).
pub(super) fn settled<'a>(
    slot: &'a std::sync::OnceLock<io::Result<Spill>>,
    dir: &Path,
    progress: &crate::progress::Progress,
) -> Option<&'a Spill> {
    match slot.get()? {
        Ok(sp) => Some(sp),
        Err(e) => {
            progress.line(&format!(
                "warning: no spill file could be made in {} ({e}); the files whose texts \
                 would have gone there are chunked again when written",
                dir.display()
            ));
            None
        }
    }
}

/// The first 8 bytes of the blake3 of `bytes`: what a file's spilled texts must hash to when
/// they are read back (and a facts cache entry, `facts.rs`).
pub(super) fn check(bytes: &[u8]) -> u64 {
    let h = blake3::hash(bytes);
    u64::from_le_bytes(h.as_bytes()[..8].try_into().unwrap_or_default())
}

/// One dropped text: its chunk, and how many bytes of it are in the spill (a prefix before
/// the chunk's byte range of the file, often none; with `composed`, the whole text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ShedText {
    chunk: u32,
    spilled: u32,
    composed: bool,
}

/// How the texts [`shed_texts`] dropped come back ([`super::reread`]): byte ranges sliced from
/// the file again, after what the spill holds of them. A file is chunked again only when there
/// is no spill to write to (it could not be created, or a write failed).
#[derive(Debug, Default)]
pub(super) struct Shed {
    /// The dropped texts, in chunk order.
    texts: Vec<ShedText>,
    /// Where the spilled parts of `texts` begin in the spill, one after another.
    spilled_at: u64,
    /// [`check`] of those bytes.
    check: u64,
    extract_again: bool,
    /// The file is written because its edges moved (`relink.rs`), not for a change of its
    /// own: the budget's counters leave it out.
    relinked: bool,
    /// Its facts came from the facts cache (`facts.rs`): it was never parsed in this build,
    /// and the budget's counters leave it out too.
    cached: bool,
}

impl Shed {
    /// Whether the file it belongs to is written because its edges moved.
    pub(super) fn relinked(&self) -> bool {
        self.relinked
    }

    /// Whether the file's facts came from the facts cache.
    pub(super) fn cached(&self) -> bool {
        self.cached
    }

    /// The same way back, for a file written because its edges moved.
    pub(super) fn relink(self) -> Shed {
        Shed {
            relinked: true,
            ..self
        }
    }
}

/// Drops the parsed text of every chunk of a file (graph resolution reads none:
/// [`crate::graph::Declarations`] holds what it needs of them), freeing its buffers.
pub(super) fn drop_texts(ex: &mut FileExtract) {
    for c in &mut ex.chunks {
        c.text = String::new();
    }
}

/// [`drop_texts`] for a file that will be written: `source` is the text it was chunked from,
/// and the result says how [`super::reread`] gets the dropped texts back. What `source` cannot
/// give back (composed texts, prefixes) goes to `spill` in one write; without a spill, or when
/// the write fails, the file is to be chunked again.
pub(super) fn shed_texts(ex: &mut FileExtract, source: &str, spill: Option<&Spill>) -> Shed {
    let mut texts = Vec::new();
    let mut bytes: Vec<u8> = Vec::new();
    for (i, c) in ex.chunks.iter().enumerate() {
        if c.text.is_empty() {
            continue;
        }
        let range = c.start_byte as usize..c.end_byte as usize;
        let prefix = (source.get(range))
            .filter(|tail| c.text.ends_with(*tail))
            .and_then(|tail| c.text.get(..c.text.len() - tail.len()));
        let kept = prefix.unwrap_or(&c.text);
        let (Ok(chunk), Ok(spilled)) = (u32::try_from(i), u32::try_from(kept.len())) else {
            return again(ex);
        };
        bytes.extend_from_slice(kept.as_bytes());
        texts.push(ShedText {
            chunk,
            spilled,
            composed: prefix.is_none(),
        });
    }
    let spilled_at = match spill {
        _ if bytes.is_empty() => 0,
        Some(sp) => match sp.put(&bytes) {
            Ok(at) => at,
            Err(_) => return again(ex),
        },
        None => return again(ex),
    };
    drop_texts(ex);
    texts.shrink_to_fit();
    Shed {
        texts,
        spilled_at,
        check: check(&bytes),
        extract_again: false,
        relinked: false,
        cached: false,
    }
}

/// For a file whose texts [`drop_texts`] already dropped and that is now to be written
/// (an unchanged file whose edges resolve differently, `relink.rs`): its texts come back by
/// chunking it again.
pub(super) fn chunk_again() -> Shed {
    Shed {
        extract_again: true,
        relinked: true,
        ..Shed::default()
    }
}

/// For a file whose facts came from the facts cache (`facts.rs`): it has no texts, and they
/// come back by chunking it again if it is written.
pub(super) fn from_cache() -> Shed {
    Shed {
        extract_again: true,
        cached: true,
        ..Shed::default()
    }
}

/// Every text dropped, to come back by chunking the file again.
fn again(ex: &mut FileExtract) -> Shed {
    drop_texts(ex);
    Shed {
        extract_again: true,
        ..Shed::default()
    }
}

/// Why [`restore_texts`] could not give the texts back.
#[derive(Debug)]
pub(super) enum Restore {
    /// A chunk's byte range is not in the bytes (the file changed).
    Changed,
    /// The spill could not be read, or did not hold text.
    Spill(io::Error),
}

impl Restore {
    /// The build's error: the file at `path` changed, or an I/O error on the spill in `out`.
    pub(super) fn into_error(self, path: &Path, out: &Path) -> IndexerError {
        match self {
            Restore::Changed => IndexerError::ChangedDuringBuild {
                path: path.to_path_buf(),
            },
            Restore::Spill(e) => IndexerError::Io {
                path: out.to_path_buf(),
                source: io::Error::new(
                    e.kind(),
                    format!("the build's spill file could not be read back: {e}"),
                ),
            },
        }
    }
}

/// Gives back the texts `shed` dropped from `extract`, from `source` (the file's bytes, hash
/// checked by the caller) and `spill`: prefixes and slices, or the file chunked again.
/// `Ok(true)` when it was chunked again.
pub(super) fn restore_texts(
    extract: &mut FileExtract,
    shed: Shed,
    source: &str,
    spill: Option<&Spill>,
    (lang, repo, path): (Language, &str, &str),
    opts: &ChunkOptions,
) -> Result<bool, Restore> {
    if shed.extract_again {
        *extract = chunk::extract(lang, repo, path, source, opts);
        return Ok(true);
    }
    let total: usize = shed.texts.iter().map(|t| t.spilled as usize).sum();
    let spilled = match spill {
        _ if total == 0 => String::new(),
        Some(sp) => {
            let bytes = sp.get(shed.spilled_at, total).map_err(Restore::Spill)?;
            if check(&bytes) != shed.check {
                let e = "spilled texts do not hash as they did when written";
                return Err(Restore::Spill(io::Error::new(
                    io::ErrorKind::InvalidData,
                    e,
                )));
            }
            String::from_utf8(bytes).map_err(|e| {
                Restore::Spill(io::Error::new(io::ErrorKind::InvalidData, e.utf8_error()))
            })?
        }
        None => {
            let e = io::Error::new(io::ErrorKind::NotFound, "no spill file holds the texts");
            return Err(Restore::Spill(e));
        }
    };
    let mut at = 0;
    for t in shed.texts {
        let end = at + t.spilled as usize;
        let kept = spilled.get(at..end).ok_or_else(|| {
            Restore::Spill(io::Error::new(
                io::ErrorKind::InvalidData,
                "spilled texts split inside a character",
            ))
        })?;
        at = end;
        let c = extract
            .chunks
            .get_mut(t.chunk as usize)
            .ok_or(Restore::Changed)?;
        c.text = if t.composed {
            kept.to_string()
        } else {
            // The same bytes give the same ranges.
            let tail =
                (source.get(c.start_byte as usize..c.end_byte as usize)).ok_or(Restore::Changed)?;
            let mut text = String::with_capacity(kept.len() + tail.len());
            text.push_str(kept);
            text.push_str(tail);
            text
        };
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A long function split into parts (each repeating the signature), its header, small
    /// items and leftovers; with `big_type`, also a struct too long to keep whole (reduced to
    /// its header and members, a composed text) and its impl.
    fn source(big_type: bool) -> String {
        let mut s = String::from("//! Module doc.\nuse std::fmt;\n\n");
        s.push_str("/// Adds things.\npub fn long_one(a: u32, b: u32) -> u32 {\n");
        for i in 0..200 {
            s.push_str(&format!("    let v{i} = a + b * {i};\n"));
        }
        s.push_str("    a\n}\n\n");
        if big_type {
            s.push_str("pub struct Big {\n");
            for i in 0..150 {
                s.push_str(&format!("    /// Field {i}.\n    pub field_{i}: u64,\n"));
            }
            s.push_str("}\n\nimpl Big {\n");
            for i in 0..60 {
                s.push_str(&format!(
                    "    pub fn get_{i}(&self) -> u64 {{\n        self.field_{i} + 1\n    }}\n"
                ));
            }
            s.push_str("}\n\n");
        }
        s.push_str("const X: u32 = 1;\nstatic Y: &str = \"é\";\n");
        s
    }

    fn texts(x: &FileExtract) -> Vec<String> {
        x.chunks.iter().map(|c| c.text.clone()).collect()
    }

    const AT: (Language, &str, &str) = (Language::Rust, "r", "src/lib.rs");

    fn spill() -> (tempfile::TempDir, Spill) {
        let dir = tempfile::tempdir().unwrap();
        let sp = Spill::create(dir.path()).unwrap();
        (dir, sp)
    }

    fn restore(ex: &mut FileExtract, shed: Shed, src: &str, sp: Option<&Spill>) -> bool {
        restore_texts(ex, shed, src, sp, AT, &ChunkOptions::default()).unwrap()
    }

    #[test]
    fn sliced_texts_come_back_byte_for_byte() {
        let src = source(false);
        let opts = ChunkOptions::default();
        let whole = chunk::extract(AT.0, AT.1, AT.2, &src, &opts);
        let (_dir, sp) = spill();
        // Something before it in the spill: offsets are not all zero.
        sp.put(b"other file").unwrap();
        let mut ex = whole.clone();
        let shed = shed_texts(&mut ex, &src, Some(&sp));
        assert!(!shed.extract_again, "{shed:?}");
        assert_eq!(shed.spilled_at, 10);
        assert!(
            shed.texts.iter().any(|t| !t.composed && t.spilled > 0),
            "no body part kept a prefix: {shed:?}"
        );
        assert!(shed.texts.iter().any(|t| t.spilled == 0));
        // The module's header line.
        assert!(shed.texts.iter().any(|t| t.composed), "{shed:?}");
        let spilled: u64 = shed.texts.iter().map(|t| u64::from(t.spilled)).sum();
        assert_eq!(sp.bytes(), 10 + spilled);
        assert!(ex.chunks.iter().all(|c| c.text.is_empty()));
        assert_eq!(shed.texts.len(), whole.chunks.len());
        assert!(!restore(&mut ex, shed, &src, Some(&sp)));
        assert_eq!(texts(&ex), texts(&whole));

        // No spill: the prefixes have nowhere to go, so the file is chunked again.
        let mut ex = whole.clone();
        let shed = shed_texts(&mut ex, &src, None);
        assert!(shed.extract_again && shed.texts.is_empty(), "{shed:?}");
        assert!(ex.chunks.iter().all(|c| c.text.is_empty()));
        assert!(restore(&mut ex, shed, &src, None));
        assert_eq!(texts(&ex), texts(&whole));

        // Bytes that no longer hold a range are refused, not guessed.
        let mut ex = whole.clone();
        let shed = shed_texts(&mut ex, &src, Some(&sp));
        let r = restore_texts(&mut ex, shed, &src[..10], Some(&sp), AT, &opts);
        assert!(matches!(r, Err(Restore::Changed)), "{r:?}");
    }

    #[test]
    fn composed_texts_come_back_from_the_spill_without_a_parse() {
        let src = source(true);
        let opts = ChunkOptions::default();
        let whole = chunk::extract(AT.0, AT.1, AT.2, &src, &opts);
        let (_dir, sp) = spill();
        let mut ex = whole.clone();
        let shed = shed_texts(&mut ex, &src, Some(&sp));
        assert!(!shed.extract_again, "{shed:?}");
        // The big type reduced to its header and members, longer than a line.
        assert!(
            shed.texts.iter().any(|t| t.composed && t.spilled > 512),
            "{shed:?}"
        );
        assert_ne!(texts(&ex), texts(&whole));
        assert!(!restore(&mut ex, shed, &src, Some(&sp)));
        assert_eq!(texts(&ex), texts(&whole));

        // Without a spill, by chunking again.
        let mut ex = whole.clone();
        let shed = shed_texts(&mut ex, &src, None);
        assert!(shed.extract_again, "{shed:?}");
        assert!(restore(&mut ex, shed, &src, None));
        assert_eq!(texts(&ex), texts(&whole));
    }

    #[test]
    fn files_shed_from_several_threads_each_get_their_own_texts() {
        let (_dir, sp) = spill();
        let opts = ChunkOptions::default();
        let sources: Vec<String> = (0..16)
            .map(|i| source(i % 2 == 0).replace("long_one", &format!("long_{i}")))
            .collect();
        let shed: Vec<(FileExtract, FileExtract, Shed)> = std::thread::scope(|scope| {
            let handles: Vec<_> = sources
                .iter()
                .map(|src| {
                    let sp = &sp;
                    let opts = &opts;
                    scope.spawn(move || {
                        let whole = chunk::extract(AT.0, AT.1, AT.2, src, opts);
                        let mut ex = whole.clone();
                        let shed = shed_texts(&mut ex, src, Some(sp));
                        (whole, ex, shed)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let spilled: u64 = (shed.iter())
            .flat_map(|(_, _, s)| &s.texts)
            .map(|t| u64::from(t.spilled))
            .sum();
        assert!(spilled > 0);
        assert_eq!(sp.bytes(), spilled);
        for ((whole, mut ex, shed), src) in shed.into_iter().zip(&sources) {
            assert!(!shed.extract_again);
            assert!(!restore(&mut ex, shed, src, Some(&sp)));
            assert_eq!(texts(&ex), texts(&whole));
        }
    }

    #[test]
    fn a_spill_that_cannot_be_written_has_the_file_chunked_again() {
        let src = source(true);
        let opts = ChunkOptions::default();
        let whole = chunk::extract(AT.0, AT.1, AT.2, &src, &opts);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("read-only");
        std::fs::write(&path, b"").unwrap();
        let sp = Spill {
            file: File::open(&path).unwrap(),
            end: AtomicU64::new(0),
            written: AtomicU64::new(0),
        };
        let mut ex = whole.clone();
        let shed = shed_texts(&mut ex, &src, Some(&sp));
        assert!(shed.extract_again && shed.texts.is_empty(), "{shed:?}");
        assert!(ex.chunks.iter().all(|c| c.text.is_empty()));
        assert_eq!(sp.bytes(), 0);
        assert!(restore(&mut ex, shed, &src, Some(&sp)));
        assert_eq!(texts(&ex), texts(&whole));
    }

    #[test]
    fn a_damaged_spill_is_an_error_not_a_text() {
        let src = source(true);
        let opts = ChunkOptions::default();
        let whole = chunk::extract(AT.0, AT.1, AT.2, &src, &opts);

        // Bytes that are not UTF-8 where the texts were.
        let (_dir, sp) = spill();
        let mut ex = whole.clone();
        let shed = shed_texts(&mut ex, &src, Some(&sp));
        sp.file.write_all_at(&[0xff; 4], shed.spilled_at).unwrap();
        let r = restore_texts(&mut ex, shed, &src, Some(&sp), AT, &opts);
        assert!(
            matches!(&r, Err(Restore::Spill(e)) if e.kind() == io::ErrorKind::InvalidData),
            "{r:?}"
        );

        // Other text, still UTF-8, where the texts were: the hash tells.
        let (_dir, sp) = spill();
        let mut ex = whole.clone();
        let shed = shed_texts(&mut ex, &src, Some(&sp));
        let was = sp.get(shed.spilled_at, 4).unwrap();
        assert!(was.is_ascii(), "{was:?}");
        sp.file.write_all_at(b"abcd", shed.spilled_at).unwrap();
        let r = restore_texts(&mut ex, shed, &src, Some(&sp), AT, &opts);
        assert!(
            matches!(&r, Err(Restore::Spill(e)) if e.kind() == io::ErrorKind::InvalidData),
            "{r:?}"
        );
        let e = r
            .unwrap_err()
            .into_error(Path::new("/src/lib.rs"), Path::new("/idx"));
        assert!(e.to_string().contains("spill file"), "{e}");

        // A spill cut short.
        let (_dir, sp) = spill();
        let mut ex = whole.clone();
        let shed = shed_texts(&mut ex, &src, Some(&sp));
        sp.file.set_len(sp.bytes() / 2).unwrap();
        let r = restore_texts(&mut ex, shed, &src, Some(&sp), AT, &opts);
        assert!(
            matches!(&r, Err(Restore::Spill(e)) if e.kind() == io::ErrorKind::UnexpectedEof),
            "{r:?}"
        );

        // The spill gone.
        let mut ex = whole.clone();
        let (_dir, sp) = spill();
        let shed = shed_texts(&mut ex, &src, Some(&sp));
        let r = restore_texts(&mut ex, shed, &src, None, AT, &opts);
        assert!(matches!(r, Err(Restore::Spill(_))), "{r:?}");
    }
}
