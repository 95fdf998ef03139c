//! The index directory and its `MANIFEST`, the single commit point.
//!
//! `MANIFEST` is JSON: format version, a generation counter, the model id and dimension, and the
//! live segments with their current tombstone file. It is replaced atomically: written to
//! `MANIFEST.tmp`, fsynced, renamed over `MANIFEST`, then the directory is fsynced. Readers that
//! opened the previous generation keep their memory maps; [`Index::collect_garbage`] only
//! unlinks what no manifest names.

use std::path::{Path, PathBuf};

use roaring::RoaringBitmap;
use serde::{Deserialize, Serialize};

use crate::segment::{dir_name, Segment};
use crate::{
    corrupt, io_err, sync_dir, tombstones, write_synced, FormatError, Result, FORMAT_VERSION,
};

pub const MANIFEST: &str = "MANIFEST";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TombstoneRef {
    pub file: String,
    pub blake3: String,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SegmentEntry {
    pub id: String,
    pub chunks: u32,
    pub tombstones: Option<TombstoneRef>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct IndexManifest {
    pub format_version: u32,
    pub generation: u64,
    pub model_id: String,
    pub dim: u32,
    pub segments: Vec<SegmentEntry>,
}

impl IndexManifest {
    pub fn empty(model_id: &str, dim: u32) -> IndexManifest {
        IndexManifest {
            format_version: FORMAT_VERSION,
            generation: 0,
            model_id: model_id.to_string(),
            dim,
            segments: Vec::new(),
        }
    }

    /// Reads `dir/MANIFEST`.
    pub fn read(dir: &Path) -> Result<IndexManifest> {
        let p = dir.join(MANIFEST);
        let bytes = match std::fs::read(&p) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(FormatError::NotAnIndex {
                    path: dir.to_path_buf(),
                })
            }
            Err(e) => return Err(FormatError::Io { path: p, source: e }),
        };
        let m: IndexManifest =
            serde_json::from_slice(&bytes).map_err(|e| corrupt(&p, format!("bad JSON: {e}")))?;
        if m.format_version != FORMAT_VERSION {
            return Err(FormatError::Version {
                path: p,
                found: m.format_version,
                expected: FORMAT_VERSION,
            });
        }
        for s in &m.segments {
            let ok_id = !s.id.is_empty() && s.id.bytes().all(|b| b.is_ascii_hexdigit());
            let ok_tomb = s.tombstones.as_ref().is_none_or(|t| {
                !t.file.contains('/') && !t.file.contains("..") && t.file.starts_with("tomb-")
            });
            if !ok_id || !ok_tomb {
                return Err(corrupt(&p, format!("bad segment entry {s:?}")));
            }
        }
        Ok(m)
    }

    /// Atomically replaces `dir/MANIFEST` with `self`.
    pub fn commit(&self, dir: &Path) -> Result<()> {
        let tmp = dir.join("MANIFEST.tmp");
        let json = serde_json::to_vec_pretty(self)
            .map_err(|e| FormatError::InvalidInput(e.to_string()))?;
        write_synced(&tmp, &json)?;
        let dest = dir.join(MANIFEST);
        std::fs::rename(&tmp, &dest).map_err(io_err(&dest))?;
        sync_dir(dir)
    }
}

/// A segment of an open index with its current tombstones.
#[derive(Debug)]
pub struct LiveSegment {
    pub segment: Segment,
    pub tombstones: RoaringBitmap,
}

/// An open index: the manifest and its validated segments.
#[derive(Debug)]
pub struct Index {
    pub dir: PathBuf,
    pub manifest: IndexManifest,
    pub segments: Vec<LiveSegment>,
}

impl Index {
    /// Opens and validates every segment named by `dir/MANIFEST`.
    pub fn open(dir: &Path) -> Result<Index> {
        let manifest = IndexManifest::read(dir)?;
        let mut segments = Vec::with_capacity(manifest.segments.len());
        for e in &manifest.segments {
            let segment = Segment::open(dir, &e.id, &manifest.model_id, manifest.dim)?;
            if segment.meta().chunk_count != e.chunks {
                return Err(corrupt(
                    &dir.join(MANIFEST),
                    format!(
                        "segment {} has {} chunks, MANIFEST says {}",
                        e.id,
                        segment.meta().chunk_count,
                        e.chunks
                    ),
                ));
            }
            let tombstones = match &e.tombstones {
                Some(t) => {
                    tombstones::read(&dir.join(&t.file), &manifest.model_id, &t.blake3, e.chunks)?
                }
                None => RoaringBitmap::new(),
            };
            segments.push(LiveSegment {
                segment,
                tombstones,
            });
        }
        Ok(Index {
            dir: dir.to_path_buf(),
            manifest,
            segments,
        })
    }

    /// Live (not tombstoned) chunk count.
    pub fn live_chunks(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| u64::from(s.segment.meta().chunk_count) - s.tombstones.len())
            .sum()
    }

    /// Removes segment directories, tombstone files and temporaries that the current MANIFEST
    /// does not name. Open memory maps stay valid (unlink semantics). Returns what was removed.
    pub fn collect_garbage(dir: &Path) -> Result<Vec<PathBuf>> {
        let m = IndexManifest::read(dir)?;
        let mut keep: Vec<String> = m.segments.iter().map(|s| dir_name(&s.id)).collect();
        keep.extend(
            m.segments
                .iter()
                .filter_map(|s| s.tombstones.as_ref().map(|t| t.file.clone())),
        );
        let mut removed = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(io_err(dir))? {
            let entry = entry.map_err(io_err(dir))?;
            let name = entry.file_name().to_string_lossy().to_string();
            let ours = name.starts_with("seg-")
                || name.starts_with("tomb-")
                || name.starts_with(".tmp-seg-");
            if !ours || keep.contains(&name) {
                continue;
            }
            let p = entry.path();
            let r = if p.is_dir() {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            r.map_err(io_err(&p))?;
            removed.push(p);
        }
        Ok(removed)
    }
}
