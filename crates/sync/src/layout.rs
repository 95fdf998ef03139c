//! Key names and the remote manifest.

use format::IndexManifest;
use serde::{Deserialize, Serialize};

/// Version of the remote layout (keys and [`RemoteManifest`]).
pub const REMOTE_FORMAT: u32 = 1;

pub(crate) const LATEST: &str = "latest";

pub(crate) fn manifest_key(generation: u64) -> String {
    format!("manifests/{generation:020}.json")
}

/// The generation of a `manifests/` key's file name, if it is one.
pub(crate) fn manifest_generation(name: &str) -> Option<u64> {
    let g = name.strip_suffix(".json")?;
    (g.len() == 20 && g.bytes().all(|b| b.is_ascii_digit()))
        .then(|| g.parse().ok())
        .flatten()
}

pub(crate) fn segment_key(id: &str, file: &str) -> String {
    format!("segments/seg-{id}/{file}")
}

pub(crate) fn tombstone_key(blake3: &str) -> String {
    format!("tombstones/{blake3}.del")
}

/// The local file name of a pulled tombstone file: named by content, so it never collides with
/// a local generation's `tomb-<id>-g<gen>.del`.
pub(crate) fn tombstone_file(segment_id: &str, blake3: &str) -> String {
    format!("tomb-{segment_id}-b{}.del", &blake3[..16.min(blake3.len())])
}

/// `latest`: where readers start looking; they probe forward from it, so a pusher that died
/// between its commit and this hint loses nothing.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Latest {
    pub generation: u64,
}

/// `manifests/<generation>.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct RemoteManifest {
    /// [`REMOTE_FORMAT`].
    pub remote_format: u32,
    pub generation: u64,
    /// Milliseconds since the Unix epoch when the push committed.
    pub created_unix_ms: u64,
    /// The pushed index: code segments (and memory segments when pushed with memories) with
    /// their tombstones (named by content, `tombstones/<blake3>.del`), the model, the roots it
    /// was built from; `generation` is the remote generation and `memory_lsn` 0.
    pub index: IndexManifest,
}

impl RemoteManifest {
    /// Every segment the manifest names, code then memory.
    pub fn segment_ids(&self) -> impl Iterator<Item = &str> {
        self.index
            .segments
            .iter()
            .chain(&self.index.memory_segments)
            .map(|s| s.id.as_str())
    }

    /// Whether `other` holds the same content (segments, tombstones, model); generation, time
    /// and roots aside.
    pub fn same_content(&self, other: &IndexManifest) -> bool {
        self.index.model_id == other.model_id
            && self.index.dim == other.dim
            && self.index.segments == other.segments
            && self.index.memory_segments == other.memory_segments
    }

    /// Parses and checks a manifest read from `key`.
    pub(crate) fn parse(key: &str, bytes: &[u8]) -> crate::Result<RemoteManifest> {
        let corrupt = |reason: String| crate::SyncError::Corrupt {
            key: key.to_string(),
            reason,
        };
        let m: RemoteManifest =
            serde_json::from_slice(bytes).map_err(|e| corrupt(format!("not a manifest: {e}")))?;
        if m.remote_format != REMOTE_FORMAT {
            return Err(corrupt(format!(
                "remote layout version {} (this build reads {REMOTE_FORMAT})",
                m.remote_format
            )));
        }
        if !format::reads_version(m.index.format_version) {
            return Err(corrupt(format!(
                "segment format version {} (this build reads {} to {})",
                m.index.format_version,
                format::MIN_READ_VERSION,
                format::FORMAT_VERSION
            )));
        }
        let mut ids = std::collections::HashSet::new();
        for s in m.index.segments.iter().chain(&m.index.memory_segments) {
            // An id listed twice (twice as code, or as code and as memory) would be committed
            // as the remote says and leave an index that does not open.
            if !ids.insert(s.id.as_str()) {
                return Err(corrupt(format!("segment {} is listed twice", s.id)));
            }
            let ok_id = s.id.len() == 24 && s.id.bytes().all(|b| b.is_ascii_hexdigit());
            let ok_tomb = s.tombstones.as_ref().is_none_or(|t| {
                t.blake3.len() == 64
                    && t.blake3.bytes().all(|b| b.is_ascii_hexdigit())
                    && t.file == tombstone_file(&s.id, &t.blake3)
            });
            if !ok_id || !ok_tomb {
                return Err(corrupt(format!("bad segment entry {s:?}")));
            }
        }
        Ok(m)
    }
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_keys_sort_by_generation_and_parse_back() {
        assert_eq!(manifest_key(7), "manifests/00000000000000000007.json");
        assert!(manifest_key(9) < manifest_key(10));
        assert_eq!(manifest_generation("00000000000000000010.json"), Some(10));
        assert_eq!(manifest_generation("10.json"), None);
        assert_eq!(manifest_generation("0000000000000000001x.json"), None);
    }

    #[test]
    fn parse_refuses_foreign_names() {
        let mut index = IndexManifest::empty("m", 4);
        index.segments.push(format::SegmentEntry {
            id: "a".repeat(24),
            chunks: 1,
            tombstones: Some(format::manifest::TombstoneRef {
                file: "../../etc/passwd".into(),
                blake3: "b".repeat(64),
                count: 1,
            }),
        });
        let m = RemoteManifest {
            remote_format: REMOTE_FORMAT,
            generation: 1,
            created_unix_ms: 0,
            index,
        };
        let bytes = serde_json::to_vec(&m).unwrap();
        let e = RemoteManifest::parse("k", &bytes).unwrap_err().to_string();
        assert!(e.contains("bad segment entry"), "{e}");
        let mut ok = m.clone();
        ok.index.segments[0].tombstones.as_mut().unwrap().file =
            tombstone_file(&"a".repeat(24), &"b".repeat(64));
        RemoteManifest::parse("k", &serde_json::to_vec(&ok).unwrap()).unwrap();
        // One id listed twice: as code twice, or as code and as memory.
        for memory in [false, true] {
            let mut twice = ok.clone();
            let again = twice.index.segments[0].clone();
            if memory {
                twice.index.memory_segments.push(again);
            } else {
                twice.index.segments.push(again);
            }
            let e = RemoteManifest::parse("k", &serde_json::to_vec(&twice).unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains("listed twice"), "{e}");
        }
    }
}
