//! `single_threaded_blas` stops the thread pool OpenBLAS starts when it is loaded. A test
//! binary of its own: it counts this process's threads, and no other test may start or stop
//! one meanwhile.

/// Threads of this process (`/proc/self/task`).
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(0)
}

/// OpenBLAS's thread count for a call (its pool holds one fewer), or `None` when the BLAS
/// FAISS was linked against is not OpenBLAS.
fn openblas_threads() -> Option<i32> {
    // SAFETY: looks a symbol up among the loaded objects; where present it is OpenBLAS's
    // `int openblas_get_num_threads(void)`, which reads a counter.
    unsafe {
        let f = libc::dlsym(libc::RTLD_DEFAULT, c"openblas_get_num_threads".as_ptr());
        if f.is_null() {
            return None;
        }
        let get: extern "C" fn() -> std::os::raw::c_int = std::mem::transmute(f);
        Some(get())
    }
}

#[cfg(target_os = "linux")]
#[test]
fn the_openblas_pool_is_stopped_and_blas_still_computes() {
    // FAISS's own OpenMP regions on one thread, so that they start no threads either.
    format::vectors::set_faiss_threads(1);
    let before = threads();
    let per_call = openblas_threads();
    // The pool holds one thread fewer than a call uses (none when OpenBLAS was set to one
    // thread already, e.g. by OPENBLAS_NUM_THREADS=1).
    let pool = per_call.map_or(0, |n| (n.max(1) - 1) as usize);
    let found = format::vectors::single_threaded_blas();
    // A joined thread can stay listed for a moment while the kernel reaps it.
    let t = std::time::Instant::now();
    while threads() != before - pool && t.elapsed() < std::time::Duration::from_secs(2) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let after = threads();
    assert_eq!(found, per_call.is_some());
    if let Some(n) = per_call {
        // All of the pool's threads are gone.
        assert_eq!(
            before - after,
            pool,
            "{before} → {after} threads, OpenBLAS at {n}"
        );
        assert_eq!(openblas_threads(), Some(1));
    }
    // A second call changes nothing, and FAISS's BLAS still works: an IVF index trained (its
    // k-means is BLAS matrix products) and searched on one thread per call returns each
    // vector as its own nearest neighbour.
    assert_eq!(format::vectors::single_threaded_blas(), found);
    assert_eq!(threads(), after);
    let dim = 16;
    let n = 2000;
    let v = format::vectors::clustered_for_tests(n, dim, 40, 0x2545_F491_4F6C_DD1D, 0.3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format::vectors::IVF_FILE);
    format::vectors::write_ivf(&path, &v, dim).unwrap();
    let ivf = format::vectors::Ivf::load(&path, dim, n).unwrap();
    let nlist = format::vectors::nlist_for(n);
    for i in [0usize, 7, 1999] {
        let hits = ivf.search(&v[i * dim..(i + 1) * dim], 1, nlist).unwrap();
        assert_eq!(hits[0].0, i as u32);
    }
    assert_eq!(threads(), after, "no BLAS call started the pool again");
}
