//! The allocator of indexing processes: mimalloc, for Rust's heap (`#[global_allocator]` in the
//! binaries) and for tree-sitter's C heap ([`use_mimalloc_for_tree_sitter`]).
//!
//! Parsing allocates and frees a parse stack and a syntax tree per file from every rayon
//! thread; with glibc's malloc that was 13% of `target/release/pipeline`'s samples (arena
//! locks, `malloc_consolidate`, `_int_free`), and its page trimming showed up as kernel time.
//!
//! Transparent huge pages are turned off for the whole indexing process
//! ([`disable_transparent_huge_pages`]): mimalloc asks for them on its arenas, and each page
//! it purges and touches again is then a 2 MiB fault, zeroed in full. On the pipeline bench
//! (62 MB of Rust/C, 2 cores) that was 12.5% of the samples (`clear_page_erms`), system time
//! 3.6 s against 1.6 s without, wall time 11% longer, peak RSS 60 MB higher; the embedding
//! (burn on the CPU) ran at the same speed either way.
//!
//! A tree-sitter object must be freed by the allocator that made it, so the switch is allowed
//! only before the first parser exists: [`crate::chunk`] fixes the allocator (to whatever it is
//! then) before it creates a parser, through the same [`OnceLock`], so the two cannot race.

use std::ffi::c_void;
use std::sync::OnceLock;

pub use mimalloc::MiMalloc;

/// Which allocator tree-sitter uses for the rest of the process: `true` once switched to
/// mimalloc, `false` once the first parser was made with the C library's.
static TREE_SITTER_MIMALLOC: OnceLock<bool> = OnceLock::new();

unsafe extern "C" fn ts_malloc(size: usize) -> *mut c_void {
    // SAFETY: plain C allocation; a null return is handled by tree-sitter (it aborts).
    unsafe { libmimalloc_sys::mi_malloc(size) }
}

unsafe extern "C" fn ts_calloc(n: usize, size: usize) -> *mut c_void {
    let Some(bytes) = n.checked_mul(size) else {
        return std::ptr::null_mut();
    };
    // SAFETY: mi_zalloc returns `bytes` zeroed bytes or null, as calloc does.
    unsafe { libmimalloc_sys::mi_zalloc(bytes) }
}

unsafe extern "C" fn ts_realloc(p: *mut c_void, size: usize) -> *mut c_void {
    // SAFETY: `p` is null or came from this module's functions (the switch happens before any
    // tree-sitter allocation, see the module docs).
    unsafe { libmimalloc_sys::mi_realloc(p, size) }
}

unsafe extern "C" fn ts_free(p: *mut c_void) {
    // SAFETY: as for `ts_realloc`.
    unsafe { libmimalloc_sys::mi_free(p) }
}

/// Routes tree-sitter's allocations to mimalloc. Call it at the start of `main`, before any
/// parse; returns `false` (and changes nothing) if a parser was already created in this
/// process, whose objects the C library's allocator must keep freeing.
pub fn use_mimalloc_for_tree_sitter() -> bool {
    *TREE_SITTER_MIMALLOC.get_or_init(|| {
        // SAFETY: no tree-sitter object exists yet (the OnceLock is set by the first parser's
        // creation otherwise), so every later allocation and free goes through one allocator.
        unsafe {
            tree_sitter::set_allocator(
                Some(ts_malloc),
                Some(ts_calloc),
                Some(ts_realloc),
                Some(ts_free),
            );
        }
        true
    })
}

/// Gives the memory freed so far back to the system, on every thread of rayon's pool and this
/// one. mimalloc returns a page when its owner thread next allocates or frees, after a short
/// delay; a block freed by another thread waits for its owner to collect it. After a build,
/// the tree's facts (allocated by the parse's pool threads, freed here at once) stayed
/// resident for a while, and the merge after the build, mapping segments, peaked on top of
/// them. Harmless where mimalloc is not the allocator (it finds nothing to return).
pub fn return_freed() {
    // SAFETY: mi_collect only frees pages no block lives in, of the calling thread's heaps.
    rayon::broadcast(|_| unsafe { libmimalloc_sys::mi_collect(true) });
    unsafe { libmimalloc_sys::mi_collect(true) };
}

/// mimalloc's `mi_option_purge_delay` (the same index in its v2 and v3 option enums; the
/// `libmimalloc-sys` bindings name only the options around it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long, in milliseconds, mimalloc keeps a page no block lives in before giving it back
/// ([`purge_promptly`]): mimalloc v2's default.
pub const PURGE_DELAY_MS: i64 = 10;

/// Has mimalloc give freed pages back to the system after [`PURGE_DELAY_MS`] instead of its
/// default of a second, unless `MIMALLOC_PURGE_DELAY` says otherwise; returns the delay in
/// force. A build frees memory in waves (each file's syntax tree, each segment's builder,
/// the graph's tables), and the next wave allocated while the last one's pages were still
/// held: on the whole cargo registry at `--memory-budget 256MiB`, peak RSS 635 / 638 MB with
/// the default against 576 / 580 MB (two interleaved rounds each; see
/// docs/measurements.md, "Bounded builds and merges").
pub fn purge_promptly() -> i64 {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mi_option_set stores one integer in mimalloc's option table; any value is
        // valid for the purge delay (negative: never purge).
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS as _) };
    }
    purge_delay()
}

/// Keeps the pages freed in this process while it lives (mimalloc's purge delay set to
/// [`KEEP_DELAY_MS`]), then puts back the delay it found and returns what was freed
/// ([`return_freed`]: a forced collect purges what was scheduled, however long its delay; a
/// negative delay would schedule nothing, so the pages would stay after the hold).
/// Held while the encoder runs on the CPU: each forward pass allocates and frees tens of MB of
/// activations per layer, and with the prompt purge of [`purge_promptly`] every one of those
/// pages went back to the system and was faulted in and zeroed again on the next pass (no
/// transparent huge pages either): CPU embedding ran at 4,448-4,934 tokens/s with the purge
/// and 6,558-7,713 without it (`target/release/embed`, tokio's first 1,024 chunks, 2-core VM,
/// 2026-12-06; docs/measurements.md "CPU embedding"). The encoder's working set is the same
/// batch after batch, so keeping its pages raises the peak by nothing it did not already
/// touch. Holders may nest or overlap (a counter); the last one out restores the delay. Where
/// `MIMALLOC_PURGE_DELAY` is set, that choice stands and a hold changes nothing.
pub struct KeepFreedPages(bool);

/// The purge delay while a [`KeepFreedPages`] is held: an hour, longer than any batch.
pub const KEEP_DELAY_MS: i64 = 3_600_000;

/// Holders of [`KeepFreedPages`] and the purge delay to restore when the last one goes.
static KEEP: std::sync::Mutex<(usize, i64)> = std::sync::Mutex::new((0, PURGE_DELAY_MS));

impl KeepFreedPages {
    pub fn new() -> KeepFreedPages {
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return KeepFreedPages(false);
        }
        let mut k = KEEP.lock().unwrap_or_else(|e| e.into_inner());
        if k.0 == 0 {
            k.1 = purge_delay();
            // SAFETY: as in `purge_promptly`: one integer of mimalloc's option table.
            unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, KEEP_DELAY_MS as _) };
        }
        k.0 += 1;
        KeepFreedPages(true)
    }
}

impl Default for KeepFreedPages {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for KeepFreedPages {
    fn drop(&mut self) {
        if !self.0 {
            return;
        }
        let last = {
            let mut k = KEEP.lock().unwrap_or_else(|e| e.into_inner());
            k.0 -= 1;
            if k.0 == 0 {
                // SAFETY: as above.
                unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, k.1 as _) };
            }
            k.0 == 0
        };
        if last {
            return_freed();
        }
    }
}

/// The purge delay mimalloc uses now, in milliseconds (negative: never).
pub fn purge_delay() -> i64 {
    // SAFETY: reads one integer of mimalloc's option table.
    unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) as i64 }
}

/// Turns transparent huge pages off for this process (`prctl(PR_SET_THP_DISABLE)`: every
/// mapping, those made before included, is then faulted in 4 KiB pages; see the module docs
/// for why). Returns whether the kernel accepted it; elsewhere than Linux it does nothing.
pub fn disable_transparent_huge_pages() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: PR_SET_THP_DISABLE takes one integer argument (the flag) and zeros for the
        // rest; it changes only how the kernel backs this process's anonymous memory.
        unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// What an indexing process's `main` does first, before any parse or large allocation:
/// tree-sitter on mimalloc ([`use_mimalloc_for_tree_sitter`]), transparent huge pages off
/// ([`disable_transparent_huge_pages`]), freed pages returned after [`PURGE_DELAY_MS`]
/// ([`purge_promptly`]) and OpenBLAS at one thread with its startup pool stopped
/// ([`format::vectors::single_threaded_blas`]). The `indexer` binary and the `pipeline` and
/// `embed` benches call it, so the benches measure the process set-up a build runs with.
pub fn set_up_process() {
    format::vectors::single_threaded_blas();
    use_mimalloc_for_tree_sitter();
    disable_transparent_huge_pages();
    purge_promptly();
}

/// Called before a parser is created: from then on tree-sitter's allocator cannot change.
pub(crate) fn fix_tree_sitter_allocator() {
    TREE_SITTER_MIMALLOC.get_or_init(|| false);
}

#[cfg(test)]
mod tests {
    /// The tests that read or set mimalloc's purge delay, one at a time (it is per process).
    static PURGE_OPTION: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn freed_pages_are_kept_while_held_and_the_delay_comes_back() {
        let _one = PURGE_OPTION.lock().unwrap_or_else(|e| e.into_inner());
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
            return; // the user's choice stands (KeepFreedPages::new)
        }
        let before = super::purge_delay();
        let keep = super::KEEP_DELAY_MS;
        {
            let _a = super::KeepFreedPages::new();
            assert_eq!(super::purge_delay(), keep);
            {
                let _b = super::KeepFreedPages::new();
                assert_eq!(super::purge_delay(), keep);
            }
            // The inner one going leaves the outer one's hold in place.
            assert_eq!(super::purge_delay(), keep);
        }
        assert_eq!(super::purge_delay(), before);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn huge_pages_off_is_seen_by_the_kernel() {
        // Runs in its own test thread; the flag is per process, and nothing in the tests
        // depends on huge pages.
        assert!(super::disable_transparent_huge_pages());
        // SAFETY: PR_GET_THP_DISABLE takes no argument and returns the flag.
        let flag = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        assert_eq!(flag, 1);
    }

    #[test]
    fn purge_delay_is_the_option_mimalloc_reads() {
        let _one = PURGE_OPTION.lock().unwrap_or_else(|e| e.into_inner());
        // The index is mimalloc's own: its default (1000 ms in v3, 10 in v2) is what an
        // option of another meaning would hardly hold, and setting it changes what it reads.
        let before = super::purge_delay();
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert!(before == 1000 || before == 10, "purge delay {before}");
            assert_eq!(super::purge_promptly(), super::PURGE_DELAY_MS);
        } else {
            assert_eq!(super::purge_promptly(), before);
        }
    }

    #[test]
    fn switch_is_refused_after_the_first_parser() {
        // This test process's parsers (other tests may run first) use the C library's
        // allocator unless the switch came first; either way, after a parse the answer is fixed
        // and a second call agrees with it.
        let before = super::TREE_SITTER_MIMALLOC.get().copied();
        super::fix_tree_sitter_allocator();
        let now = super::use_mimalloc_for_tree_sitter();
        assert_eq!(now, before.unwrap_or(false));
        assert_eq!(super::use_mimalloc_for_tree_sitter(), now);
    }
}
