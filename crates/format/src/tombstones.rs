//! Tombstones: which chunks (and which files without chunks) of an immutable segment are
//! deleted, one file per generation.
//!
//! `tomb-<segment id>-g<generation>.del` at the index root: the 64-byte header (component
//! `Tombstones`) followed by a portable roaring bitmap of chunk ordinals and, when any file
//! without chunks is deleted, a second one of those files' ordinals. A new generation is a new
//! file; the manifest names the current one, and the segment itself is never rewritten.
//!
//! Why files too: a file without chunks (an empty `__init__.py`) has no chunk to tombstone,
//! so before the second bitmap its record stayed live until its segment went. A file with
//! chunks is deleted by its chunks; it is never in the second bitmap. The second bitmap is
//! absent when empty, so such a file is byte for byte what it was before it existed, and a
//! reader that knows only the first bitmap reads the file as before (it stops after the first
//! bitmap) and serves those files as live, as it always did.

use std::path::Path;

use roaring::RoaringBitmap;

use crate::header::{self, Component};
use crate::{corrupt, io_err, write_synced, Result};

pub fn file_name(segment_id: &str, generation: u64) -> String {
    format!("tomb-{segment_id}-g{generation}.del")
}

/// What a tombstone file deletes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Deleted {
    /// Chunk ordinals.
    pub chunks: RoaringBitmap,
    /// Ordinals of files without chunks.
    pub files: RoaringBitmap,
}

/// Serialises `bits` (chunks) framed with a header; returns the bytes written.
pub fn write(path: &Path, model_id: &str, bits: &RoaringBitmap) -> Result<Vec<u8>> {
    write_with_files(path, model_id, bits, &RoaringBitmap::new())
}

/// [`write`], with the deleted files without chunks `files` after the chunks when there are
/// any.
pub fn write_with_files(
    path: &Path,
    model_id: &str,
    bits: &RoaringBitmap,
    files: &RoaringBitmap,
) -> Result<Vec<u8>> {
    let mut payload = Vec::with_capacity(bits.serialized_size() + files.serialized_size());
    bits.serialize_into(&mut payload).map_err(io_err(path))?;
    if !files.is_empty() {
        files.serialize_into(&mut payload).map_err(io_err(path))?;
    }
    let bytes = header::frame(Component::Tombstones, 0, model_id, &payload);
    write_synced(path, &bytes)?;
    Ok(bytes)
}

/// Reads and validates a tombstone file against its recorded hash and the segment's size;
/// the deleted chunks.
pub fn read(
    path: &Path,
    model_id: &str,
    blake3_hex: &str,
    chunk_count: u32,
) -> Result<RoaringBitmap> {
    Ok(read_parts(path, model_id, blake3_hex, chunk_count)?.chunks)
}

/// [`read`], with the deleted files without chunks, checked against the segment's
/// `file_count`.
pub fn read_with_files(
    path: &Path,
    model_id: &str,
    blake3_hex: &str,
    chunk_count: u32,
    file_count: u32,
) -> Result<Deleted> {
    let d = read_parts(path, model_id, blake3_hex, chunk_count)?;
    if d.files.max().is_some_and(|m| m >= file_count) {
        return Err(corrupt(
            path,
            "tombstone names a file past the end of its segment",
        ));
    }
    Ok(d)
}

fn read_parts(path: &Path, model_id: &str, blake3_hex: &str, chunk_count: u32) -> Result<Deleted> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    if crate::blake3_hex(&bytes) != blake3_hex {
        return Err(corrupt(path, "checksum does not match the MANIFEST"));
    }
    let payload = header::check(path, &bytes, Component::Tombstones, None, model_id)?;
    let mut rest = payload;
    let chunks = RoaringBitmap::deserialize_from(&mut rest)
        .map_err(|e| corrupt(path, format!("bad bitmap: {e}")))?;
    if chunks.max().is_some_and(|m| m >= chunk_count) {
        return Err(corrupt(
            path,
            "tombstone names a chunk past the end of its segment",
        ));
    }
    let files = if rest.is_empty() {
        RoaringBitmap::new()
    } else {
        let files = RoaringBitmap::deserialize_from(&mut rest)
            .map_err(|e| corrupt(path, format!("bad bitmap of files: {e}")))?;
        if !rest.is_empty() {
            return Err(corrupt(
                path,
                format!("{} bytes after the bitmap of files", rest.len()),
            ));
        }
        if files.is_empty() {
            // Never written: an empty second bitmap is left out.
            return Err(corrupt(path, "an empty bitmap of files"));
        }
        files
    };
    Ok(Deleted { chunks, files })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(chunks: &[u32], files: &[u32]) -> (Vec<u8>, Result<Deleted>) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.del");
        let c: RoaringBitmap = chunks.iter().copied().collect();
        let f: RoaringBitmap = files.iter().copied().collect();
        let bytes = write_with_files(&p, "m", &c, &f).unwrap();
        let got = read_with_files(&p, "m", &crate::blake3_hex(&bytes), 100, 10);
        (bytes, got)
    }

    #[test]
    fn files_without_chunks_ride_after_the_chunks() {
        let (bytes, got) = round(&[1, 5], &[2, 9]);
        let got = got.unwrap();
        assert_eq!(got.chunks.iter().collect::<Vec<_>>(), vec![1, 5]);
        assert_eq!(got.files.iter().collect::<Vec<_>>(), vec![2, 9]);
        // Without files the bytes are what `write` always wrote, and `read` of a file with
        // files gives its chunks (as a reader that knows only chunks reads it).
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.del");
        let old = write(&p, "m", &[1u32, 5].into_iter().collect()).unwrap();
        let (plain, _) = round(&[1, 5], &[]);
        assert_eq!(old, plain);
        assert!(bytes.len() > old.len());
        std::fs::write(&p, &bytes).unwrap();
        let chunks = read(&p, "m", &crate::blake3_hex(&bytes), 100).unwrap();
        assert_eq!(chunks.iter().collect::<Vec<_>>(), vec![1, 5]);
        // An index of the segment's files only.
        assert!(round(&[], &[10]).1.is_err());
        assert!(round(&[100], &[]).1.is_err());
        assert!(round(&[], &[0]).1.is_ok());
    }

    #[test]
    fn bytes_after_the_files_or_an_empty_files_bitmap_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.del");
        let chunks: RoaringBitmap = [3u32].into_iter().collect();
        let mut payload = Vec::new();
        chunks.serialize_into(&mut payload).unwrap();
        let mut with_empty = payload.clone();
        RoaringBitmap::new()
            .serialize_into(&mut with_empty)
            .unwrap();
        let mut trailing = payload.clone();
        [1u32]
            .into_iter()
            .collect::<RoaringBitmap>()
            .serialize_into(&mut trailing)
            .unwrap();
        trailing.push(0);
        let mut garbage = payload.clone();
        garbage.extend_from_slice(&[7, 7, 7]);
        for bad in [with_empty, trailing, garbage] {
            let bytes = header::frame(Component::Tombstones, 0, "m", &bad);
            std::fs::write(&p, &bytes).unwrap();
            let h = crate::blake3_hex(&bytes);
            assert!(read_with_files(&p, "m", &h, 10, 10).is_err());
            assert!(read(&p, "m", &h, 10).is_err());
        }
    }
}
