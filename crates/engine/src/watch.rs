//! The MANIFEST watcher: polls for a new index generation, swaps it in, and re-checks the
//! memories linked to code after an `indexer build` changed it.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::engine::Engine;
use crate::tools::code_links::CheckStalenessArgs;

impl Engine {
    /// Starts a thread that calls [`reload_if_changed`](Self::reload_if_changed) every
    /// `interval` until the engine is dropped.
    pub fn spawn_watcher(self: &Arc<Self>, interval: Duration) -> std::thread::JoinHandle<()> {
        let weak: Weak<Engine> = Arc::downgrade(self);
        std::thread::Builder::new()
            .name("queryd-watch".into())
            .spawn(move || loop {
                std::thread::sleep(interval);
                let Some(e) = weak.upgrade() else { return };
                if let Ok(true) = e.reload_if_changed() {
                    eprintln!(
                        "queryd: now serving index generation {}",
                        e.snapshot().generation()
                    );
                    // An `indexer build` changed code: re-check memories linked to it.
                    if e.memory_writes_disabled().is_none() {
                        let args = CheckStalenessArgs {
                            ids: None,
                            changed_files: None,
                            debug: false,
                        };
                        if let Ok(r) = e.check_staleness(&args) {
                            if r.updated > 0 {
                                eprintln!(
                                    "queryd: code references re-checked: {} stale, {} relocated, {} memories updated",
                                    r.stale, r.relocated, r.updated
                                );
                            }
                        }
                    }
                }
            })
            .expect("spawn the MANIFEST watcher")
    }
}
