//! Segments written ahead of their commit: a build that cuts several segments (the indexer's
//! `--memory-budget`) writes each one as soon as it is complete, into a staging directory
//! `.build-<pid>-<n>/` inside the index directory, without holding the directory lock (queryd
//! keeps flushing memories meanwhile). At commit, under the lock, [`Staging::publish`] renames
//! every staged segment into place just before the MANIFEST swap.
//!
//! Garbage collection ([`crate::Index::collect_garbage`]) leaves a staging directory alone while
//! its builder lives: the builder holds an exclusive lock on `.build-*/LOCK` for as long as the
//! [`Staging`] exists, and the collector removes only staging directories whose lock it can
//! take (their builder crashed or was killed) or that never got a lock file and are older than
//! [`ABANDONED_AFTER`].

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::segment::{dir_name, unique, SegmentBuilder, SegmentMeta};
use crate::{io_err, Result};

/// Prefix of staging directory names.
pub const STAGING_PREFIX: &str = ".build-";

/// A staging directory without a lock file (a builder killed between creating the directory
/// and its lock) is removed once it is this old.
pub const ABANDONED_AFTER: Duration = Duration::from_secs(600);

/// Segments written but not yet committed. Dropping it removes what was not published.
#[derive(Debug)]
pub struct Staging {
    dir: PathBuf,
    lock: Option<File>,
    /// Staged segment ids, in the order they were written.
    ids: Vec<String>,
}

impl Staging {
    /// Creates a fresh staging directory in `index_dir` and locks it.
    pub fn create(index_dir: &Path) -> Result<Staging> {
        let dir = index_dir.join(format!(
            "{STAGING_PREFIX}{}-{}",
            std::process::id(),
            unique()
        ));
        crate::fsio::create_dir_all(&dir).map_err(io_err(&dir))?;
        let mut staging = Staging {
            dir,
            lock: None,
            ids: Vec::new(),
        };
        let p = staging.dir.join("LOCK");
        let f = crate::fsio::create(&p).map_err(io_err(&p))?;
        f.lock().map_err(io_err(&p))?;
        staging.lock = Some(f);
        Ok(staging)
    }

    /// The staging directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Segments staged so far, in write order.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Writes `builder` as a segment into the staging directory ([`SegmentBuilder::write`]).
    pub fn write(
        &mut self,
        builder: SegmentBuilder,
        model_id: &str,
        dim: usize,
    ) -> Result<(String, SegmentMeta)> {
        self.write_with(|dir| builder.write(dir, model_id, dim))
    }

    /// Writes a segment by `write` (given the staging directory to write it into, e.g. a
    /// merge's [`crate::merge::Merged::write`]) and stages it as [`Self::write`] does.
    pub fn write_with(
        &mut self,
        write: impl FnOnce(&Path) -> Result<(String, SegmentMeta)>,
    ) -> Result<(String, SegmentMeta)> {
        let (id, meta) = write(&self.dir)?;
        if !self.ids.contains(&id) {
            self.ids.push(id.clone());
        }
        Ok((id, meta))
    }

    /// Moves every staged segment into `index_dir` (a segment already there, with the same
    /// content address, is kept and the staged copy dropped), makes the renames durable and
    /// removes the staging directory. The caller holds the index directory's lock and commits
    /// a MANIFEST naming the segments next; until then the collector may remove them again.
    pub fn publish(mut self, index_dir: &Path) -> Result<Vec<String>> {
        for id in &self.ids {
            let from = self.dir.join(dir_name(id));
            let to = index_dir.join(dir_name(id));
            if to.exists() {
                std::fs::remove_dir_all(&from).map_err(io_err(&from))?;
            } else {
                crate::fsio::rename(&from, &to).map_err(io_err(&to))?;
            }
        }
        crate::fsio::sync_dir(index_dir).map_err(io_err(index_dir))?;
        self.remove();
        Ok(std::mem::take(&mut self.ids))
    }

    fn remove(&mut self) {
        drop(self.lock.take());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Whether the staging directory `dir` was left behind by a builder that is gone: its lock
/// can be taken, or it has no lock file and is older than [`ABANDONED_AFTER`].
pub fn abandoned(dir: &Path) -> bool {
    let p = dir.join("LOCK");
    match std::fs::OpenOptions::new().write(true).open(&p) {
        Ok(f) => f.try_lock().is_ok(),
        Err(_) => std::fs::metadata(dir)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= ABANDONED_AFTER),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{ChunkInput, FileInput};
    use crate::{Index, IndexManifest};

    fn one_chunk(text: &str) -> SegmentBuilder {
        SegmentBuilder {
            files: vec![FileInput {
                repo: "r".into(),
                path: format!("{text}.rs"),
                language: "rust".into(),
                content_hash: [1; 32],
                size: 4,
                first_chunk: 0,
                chunk_count: 1,
                imports: vec![],
            }],
            chunks: vec![ChunkInput {
                file: 0,
                kind: "function".into(),
                name: text.into(),
                qualified: text.into(),
                symbol_id: String::new(),
                start_line: 1,
                end_line: 1,
                start_byte: 0,
                end_byte: 4,
                parent: crate::records::NO_PARENT,
                content_hash: [2; 32],
                text: text.into(),
            }],
            vectors: vec![1.0, 0.0],
            ..SegmentBuilder::default()
        }
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn staged_segments_survive_collection_until_published() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path();
        IndexManifest::empty("m", 2).commit(out).unwrap();
        let mut st = Staging::create(out).unwrap();
        let (a, _) = st.write(one_chunk("alpha"), "m", 2).unwrap();
        let (b, _) = st.write(one_chunk("beta"), "m", 2).unwrap();
        assert_ne!(a, b);
        // A collection while the builder lives keeps the staged segments.
        Index::collect_garbage(out).unwrap();
        assert!(st.dir().join(dir_name(&a)).is_dir());
        assert!(!abandoned(st.dir()));
        let staged = st.dir().to_path_buf();
        let ids = st.publish(out).unwrap();
        assert_eq!(ids, vec![a.clone(), b.clone()]);
        assert!(!staged.exists());
        let mut m = IndexManifest::read(out).unwrap();
        for id in [&a, &b] {
            m.segments.push(crate::SegmentEntry {
                id: id.clone(),
                chunks: 1,
                tombstones: None,
            });
        }
        m.generation += 1;
        m.commit(out).unwrap();
        let ix = Index::open(out).unwrap();
        assert_eq!(ix.segments.len(), 2);
    }

    #[test]
    fn a_dropped_or_abandoned_staging_directory_goes_away() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path();
        IndexManifest::empty("m", 2).commit(out).unwrap();
        {
            let mut st = Staging::create(out).unwrap();
            st.write(one_chunk("alpha"), "m", 2).unwrap();
        }
        assert!(!names(out).iter().any(|n| n.starts_with(STAGING_PREFIX)));
        // A builder killed mid-build leaves its directory with an unlocked lock file (the
        // kernel drops a dead process's locks): the collector removes it.
        let dead = out.join(format!("{STAGING_PREFIX}999998-0"));
        std::fs::create_dir(&dead).unwrap();
        File::create(dead.join("LOCK")).unwrap();
        std::fs::create_dir(dead.join("seg-0123")).unwrap();
        assert!(abandoned(&dead));
        // A fresh directory without a lock file is left alone (its builder may be starting).
        let young = out.join(format!("{STAGING_PREFIX}999999-0"));
        std::fs::create_dir(&young).unwrap();
        Index::collect_garbage(out).unwrap();
        assert!(young.exists());
        let left: Vec<String> = names(out)
            .into_iter()
            .filter(|n| n.starts_with(STAGING_PREFIX))
            .collect();
        assert_eq!(left, vec![format!("{STAGING_PREFIX}999999-0")]);
        assert!(!dead.exists());
    }
}
