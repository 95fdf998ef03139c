//! The 64-byte header in front of every binary segment file we write ourselves.
//!
//! | offset | size | field |
//! |-------:|-----:|-------|
//! | 0      | 8    | magic `CIXSEG\0\0` |
//! | 8      | 4    | format version (u32 LE) |
//! | 12     | 4    | component tag (u32 LE, see [`Component`]) |
//! | 16     | 8    | payload length in bytes (u64 LE) |
//! | 24     | 4    | vector dimension (u32 LE; 0 where meaningless) |
//! | 28     | 4    | reserved, zero |
//! | 32     | 16   | first 16 bytes of blake3(model id) |
//! | 48     | 16   | reserved, zero |
//!
//! The payload starts at offset 64, which keeps rkyv archives 16-byte aligned inside a
//! page-aligned memory map. Checks run in a fixed order: size, magic, version, component,
//! payload length; then the component's own validation.

use std::path::Path;

use crate::{corrupt, FormatError, Result, FORMAT_VERSION};

pub const MAGIC: [u8; 8] = *b"CIXSEG\0\0";
pub const HEADER_LEN: usize = 64;

/// The kinds of file a segment holds, with their file names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    Chunks = 1,
    Postings = 2,
    Graph = 3,
    Vectors = 4,
    Tombstones = 5,
    Memories = 6,
    /// `ivf.rbq`: one-bit codes of the IVF lists ([`crate::rabitq`]).
    Rabitq = 7,
    /// `texts.bin`: the chunk texts ([`crate::texts`], format 4).
    Texts = 8,
}

impl Component {
    pub fn file_name(self) -> &'static str {
        match self {
            Component::Chunks => "chunks.rkyv",
            Component::Postings => "postings.rkyv",
            Component::Graph => "graph.rkyv",
            Component::Vectors => "vectors.f32",
            Component::Tombstones => "tombstones.del",
            Component::Memories => "memories.rkyv",
            Component::Rabitq => "ivf.rbq",
            Component::Texts => "texts.bin",
        }
    }
}

/// Identity of the model a file's vectors (or a segment's) belong to.
pub fn model_tag(model_id: &str) -> [u8; 16] {
    let h = blake3::hash(model_id.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&h.as_bytes()[..16]);
    out
}

/// The header of a file whose payload is `payload_len` bytes.
pub fn header(
    component: Component,
    dim: u32,
    model_id: &str,
    payload_len: u64,
) -> [u8; HEADER_LEN] {
    let mut out = [0u8; HEADER_LEN];
    out[..8].copy_from_slice(&MAGIC);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&(component as u32).to_le_bytes());
    out[16..24].copy_from_slice(&payload_len.to_le_bytes());
    out[24..28].copy_from_slice(&dim.to_le_bytes());
    // 28..32 reserved, zero.
    out[32..48].copy_from_slice(&model_tag(model_id));
    // 48..64 reserved, zero.
    out
}

/// Builds header + payload in one buffer.
pub fn frame(component: Component, dim: u32, model_id: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(&header(component, dim, model_id, payload.len() as u64));
    out.extend_from_slice(payload);
    out
}

/// Checks a framed file and returns its payload.
pub fn check<'a>(
    path: &Path,
    bytes: &'a [u8],
    component: Component,
    dim: Option<u32>,
    model_id: &str,
) -> Result<&'a [u8]> {
    if bytes.len() < HEADER_LEN {
        return Err(corrupt(
            path,
            format!(
                "file is {} bytes, shorter than its 64-byte header",
                bytes.len()
            ),
        ));
    }
    if bytes[0..8] != MAGIC {
        return Err(corrupt(path, "bad magic (not a segment file)"));
    }
    let version = u32_at(bytes, 8);
    if !crate::reads_version(version) {
        return Err(FormatError::Version {
            path: path.to_path_buf(),
            found: version,
            expected: FORMAT_VERSION,
        });
    }
    let tag = u32_at(bytes, 12);
    if tag != component as u32 {
        return Err(corrupt(
            path,
            format!(
                "component tag {tag}, expected {} ({component:?})",
                component as u32
            ),
        ));
    }
    let len = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let actual = (bytes.len() - HEADER_LEN) as u64;
    if len != actual {
        return Err(corrupt(
            path,
            format!("header says {len} payload bytes, file has {actual} (truncated or extended)"),
        ));
    }
    if let Some(d) = dim {
        let found = u32_at(bytes, 24);
        if found != d {
            return Err(FormatError::Mismatch {
                path: path.to_path_buf(),
                detail: format!("vector dimension {found}, the index expects {d}"),
            });
        }
    }
    if bytes[32..48] != model_tag(model_id) {
        return Err(FormatError::Mismatch {
            path: path.to_path_buf(),
            detail: format!(
                "written for a different model than `{model_id}`; rebuild the index with the same --model"
            ),
        });
    }
    Ok(&bytes[HEADER_LEN..])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_round_trip_and_each_check() {
        let p = Path::new("x");
        let f = frame(Component::Graph, 384, "m", b"hello");
        assert_eq!(
            check(p, &f, Component::Graph, Some(384), "m").unwrap(),
            b"hello"
        );
        assert!(check(p, &f[..10], Component::Graph, None, "m").is_err());
        assert!(check(p, &f[..f.len() - 1], Component::Graph, None, "m").is_err());
        assert!(check(p, &f, Component::Chunks, None, "m").is_err());
        assert!(check(p, &f, Component::Graph, Some(3), "m").is_err());
        assert!(check(p, &f, Component::Graph, None, "other").is_err());
        let mut bad = f.clone();
        bad[0] ^= 1;
        assert!(check(p, &bad, Component::Graph, None, "m").is_err());
        let mut v = f.clone();
        v[8] = 9;
        assert!(matches!(
            check(p, &v, Component::Graph, None, "m"),
            Err(FormatError::Version { .. })
        ));
    }
}
