//! Rollback protection for pulls: `MANIFEST`'s `pulled_from` holds the store and the store
//! generation the last pull installed; a pull of an older generation of that store is refused
//! ([`check`]), and a pull that moves no file still records its generation ([`record`]).

use std::path::Path;

use format::manifest::{DirLock, PulledFrom};
use format::IndexManifest;

use crate::layout::RemoteManifest;
use crate::{Result, SyncError};

/// Refuses `head` when it is older than the generation the last pull from `store` installed
/// into `dir` (whose MANIFEST is `local`), unless `allow_older`.
pub(crate) fn check(
    local: Option<&IndexManifest>,
    store: &str,
    head: &RemoteManifest,
    dir: &Path,
    allow_older: bool,
) -> Result<()> {
    match local.and_then(|l| l.pulled_from.as_ref()) {
        Some(p) if p.store == store && head.generation < p.generation && !allow_older => {
            Err(SyncError::Rollback {
                url: store.to_string(),
                dir: dir.to_path_buf(),
                found: head.generation,
                pulled: p.generation,
            })
        }
        _ => Ok(()),
    }
}

/// Records `head` as the floor of `dir`, already up to date with it (an older generation
/// installed with `allow_older` that holds the same segments, or an index pulled before the
/// floor was recorded): the new local generation when it committed one.
pub(crate) fn record(
    local: &IndexManifest,
    store: &str,
    head: &RemoteManifest,
    dir: &Path,
) -> Result<Option<u64>> {
    let floor = PulledFrom {
        store: store.to_string(),
        generation: head.generation,
    };
    if local.pulled_from.as_ref() == Some(&floor) {
        return Ok(None);
    }
    let _dir_lock = DirLock::acquire(dir)?;
    let mut m = IndexManifest::read(dir)?;
    if m.segments != head.index.segments {
        return Ok(None);
    }
    m.generation += 1;
    m.pulled_from = Some(floor);
    m.commit(dir)?;
    Ok(Some(m.generation))
}
