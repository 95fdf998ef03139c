//! What a pull refuses in a directory without `MANIFEST`: the leftovers of an index whose
//! `MANIFEST` was lost. A pull there commits a `MANIFEST` of its own and then collects
//! garbage, so a memory log, a memory segment the pulled generation does not name, or the
//! memory ledger (`format::manifest::LEDGER_FILE`) would be lost or ignored; `indexer build
//! --rebuild` recovers them first. A first pull stopped between moving its segments in and
//! its commit leaves only segments it listed in `.pull/INSTALLING` ([`mark_installing`]) and
//! no ledger (a commit writes it after `MANIFEST`), so its rerun goes on, whatever the store
//! holds by then.

use std::collections::HashSet;
use std::path::Path;

use crate::layout::RemoteManifest;
use crate::{Remote, Result, SyncError};

/// Refuses a pull of `head` (from `remote`) into `dir`, which has no `MANIFEST`, when `dir`
/// holds memory records in its log, a memory segment that is not one of `head`'s (nor listed
/// in the pull's `staging` directory), or a memory ledger: see the module doc.
pub(crate) fn refuse(
    dir: &Path,
    staging: &Path,
    remote: &Remote,
    head: &RemoteManifest,
) -> Result<()> {
    if format::manifest::memory_wal_holds_records(dir) {
        // Without a MANIFEST the memory segments on disk are not known either (a pull
        // would commit a MANIFEST without them, and garbage collection would delete them):
        // `--rebuild` recovers both first.
        if let Some(m) = format::manifest::memory_wal_model(dir) {
            return Err(SyncError::Mismatch(format!(
                "{}: the directory holds a memory log ({}) of memories embedded with model {m} \
             but no MANIFEST, and a pull would not keep the memory segments beside it; \
             recover the index first with that model (`indexer build <source paths> --out \
             {0} --rebuild`), then pull (generation {} of {} was built with {} ({} dims)), \
             or pull into a new directory",
                dir.display(),
                format::manifest::MEMORY_WAL_FILE,
                head.generation,
                remote.url(),
                head.index.model_id,
                head.index.dim,
            )));
        }
        // A log from before headers named the model: which model embedded its memories
        // was recorded only in a MANIFEST.
        return Err(SyncError::Mismatch(format!(
            "{}: the directory holds a memory log ({}) but no MANIFEST, so which model \
         embedded its memories is unknown; pulling would serve them under generation {}'s \
         model ({}). Save them first (`queryd export --index {0}`), or pull into a new \
         directory",
            dir.display(),
            format::manifest::MEMORY_WAL_FILE,
            head.generation,
            head.index.model_id,
        )));
    }
    let ledger = match format::manifest::read_ledger(dir) {
        Ok(None) => false,
        Ok(Some((l, _))) => !l.is_empty(),
        // Damaged or unreadable: what it recorded is unknown, so it counts.
        Err(_) => true,
    };
    let theirs: HashSet<&str> = head
        .index
        .memory_segments
        .iter()
        .map(|s| s.id.as_str())
        .collect();
    let installing = installing(staging);
    let stray: Vec<String> = format::recover::memory_segments_on_disk(dir)?
        .into_iter()
        .filter(|id| !theirs.contains(id.as_str()) && !installing.contains(id))
        .collect();
    if !ledger && stray.is_empty() {
        return Ok(());
    }
    let what = match (stray.len(), ledger) {
        (0, _) => format!(
            "the record of the memories deleted and pulled here ({})",
            format::manifest::LEDGER_FILE
        ),
        (n, false) => format!("{n} memory segment(s) that no MANIFEST names"),
        (n, true) => format!(
            "{n} memory segment(s) and the record of the memories deleted and pulled here ({})",
            format::manifest::LEDGER_FILE
        ),
    };
    Err(SyncError::Mismatch(format!(
        "{}: the directory has no MANIFEST but holds {what}; a pull would commit a MANIFEST \
         without them (memories lost, or deleted ones back). Recover the index first \
         (`indexer build <source paths> --out {0} --rebuild`), then pull; or pull into a new \
         directory",
        dir.display(),
    )))
}

/// The file in the staging directory listing the memory segments a pull into a directory
/// without `MANIFEST` is moving in (one id a line); the staging directory is emptied after
/// the commit.
const INSTALLING: &str = "INSTALLING";

/// Records, fsynced, that the memory segments `ids` are this pull's (see the module doc).
pub(crate) fn mark_installing(staging: &Path, ids: &[&str]) -> Result<()> {
    use std::io::Write;
    let p = staging.join(INSTALLING);
    let mut text = String::new();
    for id in ids {
        text.push_str(id);
        text.push('\n');
    }
    let mut f = std::fs::File::create(&p).map_err(crate::io_err(&p))?;
    f.write_all(text.as_bytes()).map_err(crate::io_err(&p))?;
    f.sync_all().map_err(crate::io_err(&p))?;
    format::fsio::sync_dir(staging).map_err(crate::io_err(staging))
}

/// The ids [`mark_installing`] recorded in `staging` (none when it did not, or the file is
/// not a regular file of at most 1 MiB).
fn installing(staging: &Path) -> HashSet<String> {
    let Ok(Some(bytes)) = format::fsio::read_regular_at_most(&staging.join(INSTALLING), 1 << 20)
    else {
        return HashSet::new();
    };
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(memory: &[&str]) -> RemoteManifest {
        let mut index = format::IndexManifest::empty("m", 4);
        index.memory_segments = memory
            .iter()
            .map(|id| format::SegmentEntry {
                id: id.to_string(),
                chunks: 1,
                tombstones: None,
            })
            .collect();
        RemoteManifest {
            remote_format: crate::REMOTE_FORMAT,
            generation: 3,
            created_unix_ms: 0,
            index,
        }
    }

    /// A directory without MANIFEST: empty or missing passes; a memory segment no generation
    /// names is refused unless a pull listed it as its own; a non-empty or damaged ledger is
    /// refused, an empty one passes.
    #[test]
    fn a_lost_manifests_leftovers_are_refused_and_a_stopped_pulls_own_are_not() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("index");
        let staging = dir.join(".pull");
        let remote = Remote::open(&format!("file://{}", d.path().join("store").display())).unwrap();
        assert!(
            refuse(&dir, &staging, &remote, &head(&[])).is_ok(),
            "a missing directory"
        );
        std::fs::create_dir_all(&dir).unwrap();
        assert!(
            refuse(&dir, &staging, &remote, &head(&[])).is_ok(),
            "an empty directory"
        );

        let rec = format::memory::record_for_tests(1, 1);
        let (id, _) = format::SegmentBuilder::for_memories(vec![rec], vec![1.0, 0.0, 0.0, 0.0])
            .write(&dir, "m", 4)
            .unwrap();
        let why = refuse(&dir, &staging, &remote, &head(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            why.contains("1 memory segment(s)") && why.contains("--rebuild"),
            "{why}"
        );
        // The generation names it (a rerun against the same head), or a stopped pull listed it.
        assert!(refuse(&dir, &staging, &remote, &head(&[&id])).is_ok());
        std::fs::create_dir_all(&staging).unwrap();
        mark_installing(&staging, &[&id]).unwrap();
        assert!(refuse(&dir, &staging, &remote, &head(&["ab12"])).is_ok());
        std::fs::remove_file(staging.join(INSTALLING)).unwrap();

        // Ledgers: an empty one passes, a non-empty or damaged one does not.
        let ledger = dir.join(format::manifest::LEDGER_FILE);
        let mut m = format::IndexManifest::empty("m", 4);
        m.pulled_memory_segments.push(id.clone());
        m.commit(&dir).unwrap();
        std::fs::remove_file(dir.join(format::manifest::MANIFEST)).unwrap();
        let why = refuse(&dir, &staging, &remote, &head(&[&id]))
            .unwrap_err()
            .to_string();
        assert!(why.contains(format::manifest::LEDGER_FILE), "{why}");
        std::fs::write(&ledger, b"{ damaged").unwrap();
        assert!(refuse(&dir, &staging, &remote, &head(&[&id])).is_err());
        m.pulled_memory_segments.clear();
        m.generation += 1;
        m.commit(&dir).unwrap();
        std::fs::remove_file(dir.join(format::manifest::MANIFEST)).unwrap();
        assert!(
            refuse(&dir, &staging, &remote, &head(&[&id])).is_ok(),
            "an emptied ledger"
        );
    }
}
