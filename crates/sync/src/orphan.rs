//! What a pull refuses in a directory without `MANIFEST`: the leftovers of an index whose
//! `MANIFEST` was lost. A pull there commits a `MANIFEST` of its own and then collects
//! garbage, so a memory log, a memory segment the pulled generation does not name, or the
//! memory ledger (`format::manifest::LEDGER_FILE`) would be lost or ignored; `indexer build
//! --rebuild` recovers them first. A killed first pull leaves only the pulled generation's
//! own segments (and no ledger: a commit writes it after `MANIFEST`), so its rerun goes on.

use std::collections::HashSet;
use std::path::Path;

use crate::layout::RemoteManifest;
use crate::{Remote, Result, SyncError};

/// Refuses a pull of `head` (from `remote`) into `dir`, which has no `MANIFEST`, when `dir`
/// holds memory records in its log, a memory segment that is not one of `head`'s, or a
/// memory ledger: see the module doc.
pub(crate) fn refuse(dir: &Path, remote: &Remote, head: &RemoteManifest) -> Result<()> {
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
    let stray: Vec<String> = format::recover::memory_segments_on_disk(dir)?
        .into_iter()
        .filter(|id| !theirs.contains(id.as_str()))
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
