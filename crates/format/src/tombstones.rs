//! Tombstones: which chunks of an immutable segment are deleted, one file per generation.
//!
//! `tomb-<segment id>-g<generation>.del` at the index root: the 64-byte header (component
//! `Tombstones`) followed by a portable roaring bitmap of chunk ordinals. A new generation is a
//! new file; the manifest names the current one, and the segment itself is never rewritten.

use std::path::Path;

use roaring::RoaringBitmap;

use crate::header::{self, Component};
use crate::{corrupt, io_err, write_synced, Result};

pub fn file_name(segment_id: &str, generation: u64) -> String {
    format!("tomb-{segment_id}-g{generation}.del")
}

/// Serialises `bits` framed with a header; returns the bytes written.
pub fn write(path: &Path, model_id: &str, bits: &RoaringBitmap) -> Result<Vec<u8>> {
    let mut payload = Vec::with_capacity(bits.serialized_size());
    bits.serialize_into(&mut payload).map_err(io_err(path))?;
    let bytes = header::frame(Component::Tombstones, 0, model_id, &payload);
    write_synced(path, &bytes)?;
    Ok(bytes)
}

/// Reads and validates a tombstone file against its recorded hash and the segment's size.
pub fn read(
    path: &Path,
    model_id: &str,
    blake3_hex: &str,
    chunk_count: u32,
) -> Result<RoaringBitmap> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    if crate::blake3_hex(&bytes) != blake3_hex {
        return Err(corrupt(path, "checksum does not match the MANIFEST"));
    }
    let payload = header::check(path, &bytes, Component::Tombstones, None, model_id)?;
    let bits = RoaringBitmap::deserialize_from(payload)
        .map_err(|e| corrupt(path, format!("bad bitmap: {e}")))?;
    if bits.max().is_some_and(|m| m >= chunk_count) {
        return Err(corrupt(
            path,
            "tombstone names a chunk past the end of its segment",
        ));
    }
    Ok(bits)
}
