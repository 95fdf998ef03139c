//! Row-major little-endian `f32` files: the harnesses' caches of query and corpus vectors and
//! the peers' `--check` outputs. Included with `#[path]` by each harness that needs it; not
//! every harness uses both functions.

#![allow(dead_code)]

use std::path::Path;

use anyhow::Context;

/// Writes `v` as little-endian `f32`s.
pub fn write_f32(p: &Path, v: &[f32]) -> anyhow::Result<()> {
    let mut b = Vec::with_capacity(v.len() * 4);
    for x in v {
        b.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(p, b).with_context(|| format!("write {}", p.display()))
}

/// Reads a file of little-endian `f32`s (a trailing partial value is ignored).
pub fn read_f32(p: &Path) -> anyhow::Result<Vec<f32>> {
    let b = std::fs::read(p).with_context(|| format!("read {}", p.display()))?;
    Ok(b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}
