//! One generation of what the engine serves: the code view and the memory view of one index
//! (they share the same `Arc<Index>`), immutable once built. The engine swaps whole snapshots
//! behind one `ArcSwap`; a request loads one and keeps it to the end.

use std::sync::Arc;
use std::time::SystemTime;

use code::CodeView;
use format::Index;
use memory::{Delta, MemoryView};

pub struct Snapshot {
    pub code: CodeView,
    pub memory: MemoryView,
    pub loaded_at: SystemTime,
    pub manifest_mtime: Option<SystemTime>,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("dir", &self.code.index.dir)
            .field("generation", &self.code.index.manifest.generation)
            .finish()
    }
}

impl Snapshot {
    /// An index with a delta of live memory writes on top.
    pub fn new(index: Arc<Index>, manifest_mtime: Option<SystemTime>, delta: Delta) -> Snapshot {
        Snapshot {
            code: CodeView::new(Arc::clone(&index)),
            memory: MemoryView::new(index, delta),
            loaded_at: SystemTime::now(),
            manifest_mtime,
        }
    }

    pub fn generation(&self) -> u64 {
        self.code.generation()
    }
}
