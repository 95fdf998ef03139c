//! Chunk vectors: `vectors.f32` (raw, always present) and `ivf.faiss` (large segments only).
//!
//! `vectors.f32` is the 64-byte header followed by `n × dim` little-endian f32, row `i` being
//! chunk `i`'s L2-normalised embedding. It is memory-mapped and read in place: exact search for
//! small segments, re-ranking of IVF candidates, and vector reuse in incremental builds.
//!
//! `ivf.faiss` is a FAISS `IVF{nlist},SQ8` inner-product index in FAISS's own format, written
//! by [`crate::ivf_write`] (FAISS's own build, [`write_ivf_with`], is the peer of tests and
//! benchmarks; integrity through the segment manifest's blake3, checked before FAISS parses it).
//! SQ8 codes are a quarter of the raw vectors, so the segment stays within 1.5 × (vectors +
//! text); candidates are re-ranked exactly against the raw rows, which restores full precision.
//! Useful for: sub-millisecond search on 100k+ vectors. Not useful for: small segments, where a
//! scan of the mapped rows is as fast and exact.

use std::path::Path;

use faiss::index::{IndexImpl, NativeIndex};
use faiss::{Index as _, MetricType};
use roaring::RoaringBitmap;

use crate::{top_k, FormatError, Result};

/// Segments with at least this many vectors get an IVF index; smaller ones are scanned exactly.
pub const IVF_THRESHOLD: usize = 4096;
/// The least number of IVF lists probed per query by default ([`default_nprobe`] scales it up
/// for larger indexes; in a many-segment index, the equivalent share of all lists,
/// `ivf_map::plan_probes`). Recall@10 against exact search on real MiniLM code
/// embeddings (`benches/src/bin/corpus.rs`, 200 queries per style), identifier / doc-comment
/// queries: tokio (14,459 chunks, one IVF segment) 0.891 / 0.967 at 32, 0.952 / 0.987 at 64;
/// the Python 3.11 standard library subset (8,600 chunks, held out: measured only after 64 was
/// chosen on tokio) 0.894 / 0.975 at 32, 0.959 / 0.994 at 64. Identifier queries embed far
/// from every centroid, so their neighbours spread over more lists. 64 is the smallest power of
/// two that meets 0.95 for both styles on both. Synthetic clustered data at 1M reaches 0.996
/// already at 4, so it says nothing here.
pub const DEFAULT_NPROBE: usize = 64;

/// Probes per square root of the list count in [`default_nprobe`].
pub const NPROBE_PER_ROOT_LIST: f64 = 5.0;

/// The nprobe a search uses when it names none, for an index of `nlist` lists (one index of
/// all the vectors searched: [`nlist_for`] of their count): [`DEFAULT_NPROBE`], or
/// `⌈5·√nlist⌉` when that is more. A fixed nprobe scans a shrinking share of a growing index
/// (lists grow as √n), and recall falls with it: on 455,186 real code chunks (the `.py` files of
/// ten Python packages, 5 segments, the list count of one index 1,349) recall@10 at 64 was
/// 0.886 identifier / 0.927 doc-comment queries, at 128 0.938 / 0.955, at 192 0.962 / 0.971
/// (`benches/src/bin/corpus.rs`, built on an H200). The probes that reach 0.95 grew about as
/// √nlist between tokio (240 lists: ~64, 4.1·√240) and that index (~160, 4.4·√1349); 5 leaves
/// a margin. 1M vectors (2,000 lists) get 224 probes, 100k (632) 126, 14k (240) 78.
pub fn default_nprobe(nlist: usize) -> usize {
    let scaled = (NPROBE_PER_ROOT_LIST * (nlist as f64).sqrt()).ceil() as usize;
    DEFAULT_NPROBE.max(scaled)
}
pub const IVF_FILE: &str = "ivf.faiss";

extern "C" {
    // From the OpenMP runtime FAISS is linked against.
    fn omp_set_num_threads(n: std::os::raw::c_int);
}

/// Sets the OpenMP thread count FAISS uses. One thread for single queries: thread start-up
/// costs more than a sub-millisecond search.
pub fn set_faiss_threads(n: usize) {
    // SAFETY: omp_set_num_threads only stores an integer in the OpenMP runtime's ICVs.
    unsafe { omp_set_num_threads(n.clamp(1, 1024) as std::os::raw::c_int) }
}

/// Turns OpenBLAS's own threading off for this process (each BLAS call FAISS makes runs on the
/// thread that calls it), once; FAISS parallelises with OpenMP around its BLAS calls. Returns
/// whether an OpenBLAS was found (another BLAS is left as it is). Called before this module
/// hands FAISS anything ([`write_ivf_streamed`], [`Ivf::load`]).
///
/// Why: Debian's default OpenBLAS is the pthreads build, and FAISS calls it from OpenMP
/// threads while the build's rayon threads run beside them. On a 16-core H200 host
/// (2026-12-04) the `pipeline` bench crashed or hung whenever OpenBLAS ran 2 or 4 threads of
/// its own: under `taskset -c 0-3` (SIGSEGV, or glibc's `arena.c: attached_threads == 0`
/// abort), `taskset -c 0-1`, or `OMP_NUM_THREADS=4` without taskset (hung until killed),
/// while `OPENBLAS_NUM_THREADS=1` with the same cores and threads ran through; OpenBLAS's
/// documentation asks for one thread when the caller is itself multi-threaded. On the 2-core
/// VM one thread measured no slower. The call goes through `dlsym`, so a FAISS linked against
/// another BLAS builds and runs unchanged.
///
/// It also stops the pool of threads OpenBLAS starts when it is loaded, before `main` (one
/// per core but one; `blas_thread_shutdown_`, the routine OpenBLAS itself runs before a
/// `fork`). Until their first task each of them spins in `sched_yield` for 2^28 cycles (about
/// 0.1 s) and then sleeps, and at one thread per call none ever gets a task. Those first 0.1 s
/// are when `queryd` opens its index and answers its first query: on the 2-core VM, 6 of 20
/// fresh processes opened the 1M-chunk index in 81.7-84.1 ms instead of 41-45 (the rayon open
/// sharing a core with the spinner); with the pool stopped, 0 of 20 did. So the
/// binaries call this first thing in `main`, and it runs once.
pub fn single_threaded_blas() -> bool {
    static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FOUND.get_or_init(|| {
        // SAFETY: dlsym with RTLD_DEFAULT looks a symbol up among the loaded objects; the
        // symbol, where present, is OpenBLAS's `void openblas_set_num_threads(int)`, which
        // stores the thread count for later calls. `int blas_thread_shutdown_(void)` wakes
        // the pool's threads with an exit request and joins them; with one thread per call
        // set first, no BLAS call starts the pool again (OpenBLAS restarts it only for a
        // call it splits over threads).
        unsafe {
            let f = libc::dlsym(libc::RTLD_DEFAULT, c"openblas_set_num_threads".as_ptr());
            if f.is_null() {
                return false;
            }
            let set: extern "C" fn(std::os::raw::c_int) = std::mem::transmute(f);
            set(1);
            let stop = libc::dlsym(libc::RTLD_DEFAULT, c"blas_thread_shutdown_".as_ptr());
            if !stop.is_null() {
                let stop: extern "C" fn() -> std::os::raw::c_int = std::mem::transmute(stop);
                stop();
            }
            true
        }
    })
}

/// Number of IVF lists for `n` vectors: about 2·√n (training cost grows with the list count;
/// SQ8 codes keep the scan of the probed lists cheap), with at least 39 training points per list.
pub fn nlist_for(n: usize) -> usize {
    let by_sqrt = (2.0 * (n as f64).sqrt()).round() as usize;
    by_sqrt.min(n / 39).max(1)
}

/// Exact inner-product top-k over row-major `vectors`.
pub fn exact_search(
    vectors: &[f32],
    dim: usize,
    query: &[f32],
    k: usize,
    allow: Option<&RoaringBitmap>,
    deny: Option<&RoaringBitmap>,
) -> Vec<(u32, f32)> {
    if dim == 0 || query.len() != dim {
        return Vec::new();
    }
    let rows = vectors
        .chunks_exact(dim)
        .enumerate()
        .filter_map(|(i, row)| {
            let i = i as u32;
            if !crate::admitted(i, allow, deny) {
                return None;
            }
            Some((i, dot(row, query)))
        });
    top_k(rows, k)
}

#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent accumulators let the compiler vectorise without fast-math.
    let mut acc = [0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(8);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// The points IVF centroids are trained on for `n` vectors: an evenly strided sample of 40 per
/// list (FAISS wants at least 39), or all of them. The centroids are as good for routing and
/// training cost stops growing with the segment.
pub fn ivf_training_sample(vectors: &[f32], dim: usize) -> Vec<f32> {
    let n = vectors.len() / dim.max(1);
    let want = (40 * nlist_for(n)).min(n);
    if want < n {
        // Sized up front: a collect over `flat_map` cannot know the length, and growing a
        // vector of tens of MB by doubling copied it and faulted in fresh pages each time.
        let mut sample = Vec::with_capacity(want * dim);
        for i in 0..want {
            let row = i * n / want;
            sample.extend_from_slice(&vectors[row * dim..(row + 1) * dim]);
        }
        sample
    } else {
        vectors.to_vec()
    }
}

/// Trains and fills an IVF-SQ8 index and writes it to `path`. Training uses FAISS's fixed
/// k-means seed, so the output is deterministic for a given input.
pub fn write_ivf(path: &Path, vectors: &[f32], dim: usize) -> Result<()> {
    write_ivf_with(path, vectors, dim, None)
}

/// [`write_ivf`], optionally with coarse centroids trained elsewhere: `nlist_for(n) × dim`
/// floats, handed to FAISS's quantizer so FAISS skips its own k-means (it then trains only the
/// SQ8 ranges on the residuals of [`ivf_training_sample`]). FAISS's build, the peer of
/// [`crate::ivf_write::write_ivf_sq8`] (which writes the same bytes from the same centroids).
pub fn write_ivf_with(
    path: &Path,
    vectors: &[f32],
    dim: usize,
    centroids: Option<&[f32]>,
) -> Result<()> {
    write_ivf_streamed(path, vectors, dim, centroids, &|_| {})
}

/// Rows handed to FAISS per `add` by [`write_ivf_streamed`]: a multiple of the 4,096 rows
/// FAISS's coarse assignment multiplies at a time (`distance_compute_blas_query_bs`), so the
/// batches meet the same matrix products in the same blocks as one `add` of every row; the
/// IVF-SQ encoding after it (`IndexIVFScalarQuantizer::add_core`) takes the rows one by one,
/// appending each to its list in row order.
pub const ADD_BATCH: usize = 65_536;

/// Below this many rows FAISS's coarse assignment takes its non-BLAS path
/// (`distance_compute_blas_threshold`), whose rounding may differ from the matrix product
/// that one `add` of every row applies to the same rows: a last batch that short joins the
/// one before it.
const BLAS_ROWS: usize = 20;

/// The ranges of rows [`write_ivf_streamed`] adds, in order: [`ADD_BATCH`] rows each, the
/// last one longer by a remainder under [`BLAS_ROWS`].
pub fn add_batches(n: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= n {
            return None;
        }
        let mut end = (start + ADD_BATCH).min(n);
        if n - end < BLAS_ROWS {
            end = n;
        }
        let r = start..end;
        start = end;
        Some(r)
    })
}

/// [`write_ivf_with`], reading `vectors` in order: after the training sample is taken,
/// `consumed(0..n)`; then the rows are added to FAISS in [`add_batches`] (the same index as one
/// `add` of all of them, tested) and each batch is passed to `consumed` once FAISS has encoded
/// it (the segment writer, when FAISS built its IVF, dropped the pages of rows it had mapped
/// back from disk there).
pub fn write_ivf_streamed(
    path: &Path,
    vectors: &[f32],
    dim: usize,
    centroids: Option<&[f32]>,
    consumed: &dyn Fn(std::ops::Range<usize>),
) -> Result<()> {
    single_threaded_blas();
    let n = vectors.len() / dim;
    let nlist = nlist_for(n);
    let err = |e: faiss::error::Error| FormatError::Faiss {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let mut index = faiss::index_factory(
        dim as u32,
        format!("IVF{nlist},SQ8"),
        MetricType::InnerProduct,
    )
    .map_err(err)?;
    if let Some(c) = centroids {
        if c.len() != nlist * dim || c.iter().any(|v| !v.is_finite()) {
            return Err(FormatError::InvalidInput(format!(
                "IVF centroids: {} floats (non-finite values refused) for {nlist} lists of dimension {dim}",
                c.len()
            )));
        }
        let fail = |what: &str| FormatError::Faiss {
            path: path.to_path_buf(),
            detail: format!("setting trained centroids: {what}"),
        };
        // SAFETY: `index` is a live IVF index built by index_factory above; the quantizer
        // pointer it returns is owned by it and valid while it lives; `c` holds nlist × dim
        // floats (checked above), the count passed to add.
        unsafe {
            let ivf = faiss_sys::faiss_IndexIVF_cast(index.inner_ptr());
            if ivf.is_null() {
                return Err(fail("not an IVF index"));
            }
            let quantizer = faiss_sys::faiss_IndexIVF_quantizer(ivf);
            if quantizer.is_null() || faiss_sys::faiss_Index_ntotal(quantizer) != 0 {
                return Err(fail("quantizer missing or not empty"));
            }
            if faiss_sys::faiss_Index_add(quantizer, nlist as faiss_sys::idx_t, c.as_ptr()) != 0 {
                return Err(fail("adding centroids to the quantizer failed"));
            }
        }
    }
    index
        .train(&ivf_training_sample(vectors, dim))
        .map_err(err)?;
    consumed(0..n);
    for rows in add_batches(n) {
        index
            .add(&vectors[rows.start * dim..rows.end * dim])
            .map_err(err)?;
        consumed(rows);
    }
    faiss::write_index(&index, path.to_string_lossy().as_ref()).map_err(err)?;
    Ok(())
}

/// A loaded IVF index (FAISS keeps it in its own memory).
pub struct Ivf {
    index: faiss::index::scalar_quantizer::IVFScalarQuantizerIndexImpl<IndexImpl>,
}

impl std::fmt::Debug for Ivf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Ivf(nlist={})", self.index.nlist())
    }
}

impl Ivf {
    /// Loads `path`; the caller has checked its blake3 against the segment manifest.
    pub fn load(path: &Path, dim: usize, n: usize) -> Result<Ivf> {
        single_threaded_blas();
        let err = |detail: String| FormatError::Faiss {
            path: path.to_path_buf(),
            detail,
        };
        let index = faiss::read_index(path.to_string_lossy().as_ref())
            .map_err(|e| err(e.to_string()))?
            .into_ivf_scalar_quantizer()
            .map_err(|e| err(format!("not an IVF-SQ index: {e}")))?;
        if index.d() as usize != dim || index.ntotal() as usize != n {
            return Err(err(format!(
                "index holds {} vectors of dimension {}, the segment has {n} of dimension {dim}",
                index.ntotal(),
                index.d()
            )));
        }
        Ok(Ivf { index })
    }

    pub fn nlist(&self) -> usize {
        self.index.nlist() as usize
    }

    /// The coarse centroids (`nlist × dim`), read back from FAISS's quantizer.
    pub fn centroids(&self) -> Result<Vec<f32>> {
        let d = self.index.d() as usize;
        let nlist = self.nlist();
        let mut out = vec![0f32; nlist * d];
        // SAFETY: the index is a live IVF index; its quantizer is owned by it; each
        // reconstruct writes `d` floats into a slot of `out` (nlist × d floats).
        let code = unsafe {
            let quantizer = faiss_sys::faiss_IndexIVF_quantizer(self.index.inner_ptr() as *const _);
            if quantizer.is_null() {
                -1
            } else {
                let mut code = 0;
                for (i, row) in out.chunks_exact_mut(d).enumerate() {
                    code = faiss_sys::faiss_Index_reconstruct(
                        quantizer,
                        i as faiss_sys::idx_t,
                        row.as_mut_ptr(),
                    );
                    if code != 0 {
                        break;
                    }
                }
                code
            }
        };
        if code != 0 {
            return Err(FormatError::Faiss {
                path: IVF_FILE.into(),
                detail: format!("reading the coarse centroids failed with code {code}"),
            });
        }
        Ok(out)
    }

    /// Candidate ids for `query`, best first.
    pub fn candidates(&self, query: &[f32], k: usize, nprobe: usize) -> Result<Vec<u32>> {
        Ok(self
            .search(query, k, nprobe)?
            .into_iter()
            .map(|(c, _)| c)
            .collect())
    }

    /// FAISS's top-`k` (chunk, approximate score) for `query`, best first: the peer of
    /// [`crate::ivf_map::MappedIvf::search`] in tests and benchmarks.
    pub fn search(&self, query: &[f32], k: usize, nprobe: usize) -> Result<Vec<(u32, f32)>> {
        let mut params =
            faiss::search_params::SearchParametersIVF::new().map_err(|e| FormatError::Faiss {
                path: IVF_FILE.into(),
                detail: e.to_string(),
            })?;
        params.set_nprobe(nprobe.max(1));
        let params: faiss::search_params::SearchParameters = params.upcast();
        let mut distances = vec![0f32; k];
        let mut labels = vec![-1 as faiss_sys::idx_t; k];
        if query.len() != self.index.d() as usize {
            return Err(FormatError::InvalidInput("query dimension mismatch".into()));
        }
        // SAFETY: one query of `d` floats (checked above), output buffers of `k` entries each;
        // FAISS CPU search is const and safe to call from several threads at once (the Rust
        // wrapper only offers it through `&mut` because of its generic quantizer bound).
        let code = unsafe {
            faiss_sys::faiss_Index_search_with_params(
                self.index.inner_ptr(),
                1,
                query.as_ptr(),
                k as faiss_sys::idx_t,
                params.inner_ptr() as *const _,
                distances.as_mut_ptr(),
                labels.as_mut_ptr(),
            )
        };
        if code != 0 {
            return Err(FormatError::Faiss {
                path: IVF_FILE.into(),
                detail: format!("search failed with code {code}"),
            });
        }
        Ok(labels
            .into_iter()
            .zip(distances)
            .filter(|&(l, _)| l >= 0)
            .map(|(l, d)| (l as u32, d))
            .collect())
    }
}

/// Test data: `n` unit vectors, row `i` around centre `i % clusters` (centres and noise of
/// scale `noise` from an xorshift seeded with `seed`, which must not be 0). Public for the
/// crate's integration tests.
#[doc(hidden)]
pub fn clustered_for_tests(
    n: usize,
    dim: usize,
    clusters: usize,
    seed: u64,
    noise: f32,
) -> Vec<f32> {
    let mut seed = seed;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0
    };
    let centres: Vec<f32> = (0..clusters * dim).map(|_| rnd()).collect();
    let mut out = Vec::with_capacity(n * dim);
    for i in 0..n {
        let c = i % clusters;
        let mut v: Vec<f32> = (0..dim)
            .map(|d| centres[c * dim + d] + noise * rnd())
            .collect();
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter_mut().for_each(|x| *x /= norm);
        out.extend(v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where FAISS runs on OpenBLAS (Debian's, as here and in CI), OpenBLAS then reports one
    /// thread; where no OpenBLAS is loaded, nothing is claimed.
    #[test]
    fn blas_runs_one_thread_per_call() {
        let found = single_threaded_blas();
        // SAFETY: as in `single_threaded_blas`; `int openblas_get_num_threads(void)` only
        // reads the stored count.
        let get = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"openblas_get_num_threads".as_ptr()) };
        if get.is_null() {
            assert!(!found, "set found without get");
            return;
        }
        assert!(found);
        let get: extern "C" fn() -> std::os::raw::c_int = unsafe { std::mem::transmute(get) };
        assert_eq!(get(), 1);
        // A FAISS index trained after it still works (k-means goes through BLAS).
        let dim = 16;
        let v: Vec<f32> = (0..IVF_THRESHOLD * dim)
            .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
            .collect();
        let dir = tempfile::tempdir().unwrap();
        write_ivf(&dir.path().join(IVF_FILE), &v, dim).unwrap();
        assert_eq!(get(), 1);
    }

    /// The default nprobe grows as √nlist above the floor: the values its doc comment gives.
    #[test]
    fn default_nprobe_scales_with_the_root_of_the_list_count() {
        assert_eq!(default_nprobe(1), DEFAULT_NPROBE);
        assert_eq!(default_nprobe(163), DEFAULT_NPROBE);
        assert_eq!(default_nprobe(185), 69);
        assert_eq!(default_nprobe(nlist_for(14_459)), 78);
        assert_eq!(default_nprobe(nlist_for(100_000)), 126);
        assert_eq!(default_nprobe(1_349), 184);
        assert_eq!(default_nprobe(nlist_for(1_000_000)), 224);
    }

    /// Unit vectors around `clusters` random centres.
    fn clustered(n: usize, dim: usize, clusters: usize) -> Vec<f32> {
        clustered_for_tests(n, dim, clusters, 0x9E37_79B9_7F4A_7C15, 0.1)
    }

    /// Centroids handed to FAISS are the ones the written index routes by (FAISS did not
    /// re-train them), and search through them works.
    #[test]
    fn given_centroids_are_kept_by_faiss() {
        let (n, dim) = (5000, 16);
        let v = clustered(n, dim, 50);
        let nlist = nlist_for(n);
        let centroids = ivf_training_sample(&v, dim)[..nlist * dim].to_vec();
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join(IVF_FILE);
        write_ivf_with(&p, &v, dim, Some(&centroids)).unwrap();
        let ivf = Ivf::load(&p, dim, n).unwrap();
        assert_eq!(ivf.nlist(), nlist);
        assert_eq!(ivf.centroids().unwrap(), centroids);
        for row in [0usize, 777, 4999] {
            let q = &v[row * dim..(row + 1) * dim];
            let got = ivf.candidates(q, 10, nlist).unwrap();
            assert!(got.contains(&(row as u32)), "row {row} not found: {got:?}");
        }
        // Without centroids FAISS trains its own (different) ones.
        let p2 = tmp.path().join("faiss-trained");
        write_ivf(&p2, &v, dim).unwrap();
        let own = Ivf::load(&p2, dim, n).unwrap().centroids().unwrap();
        assert_eq!(own.len(), nlist * dim);
        assert_ne!(own, centroids);
    }

    /// Adding in batches writes the file one `add` of every row writes, here with a last
    /// batch too short for FAISS's matrix path on its own (it joins the one before), and
    /// `consumed` hears of the sample and then of every batch, in order.
    #[test]
    fn batched_adds_write_what_one_add_writes() {
        let dim = 8;
        let n = 2 * ADD_BATCH + 7;
        let v = clustered(n, dim, 64);
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join(IVF_FILE);
        let seen = std::cell::RefCell::new(Vec::new());
        write_ivf_streamed(&p, &v, dim, None, &|r| seen.borrow_mut().push(r)).unwrap();
        let mut index = faiss::index_factory(
            dim as u32,
            format!("IVF{},SQ8", nlist_for(n)),
            MetricType::InnerProduct,
        )
        .unwrap();
        index.train(&ivf_training_sample(&v, dim)).unwrap();
        index.add(&v).unwrap();
        let one = tmp.path().join("one-add");
        faiss::write_index(&index, one.to_str().unwrap()).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), std::fs::read(&one).unwrap());
        assert_eq!(seen.into_inner(), vec![0..n, 0..ADD_BATCH, ADD_BATCH..n]);
        assert_eq!(
            add_batches(ADD_BATCH + 20).collect::<Vec<_>>(),
            vec![0..ADD_BATCH, ADD_BATCH..ADD_BATCH + 20]
        );
        assert_eq!(add_batches(5).collect::<Vec<_>>(), vec![0..5]);
        assert_eq!(add_batches(0).count(), 0);
    }

    #[test]
    fn wrong_centroids_are_refused_before_writing() {
        let (n, dim) = (500, 8);
        let v = clustered(n, dim, 5);
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join(IVF_FILE);
        let short = vec![0.5f32; dim];
        let err = write_ivf_with(&p, &v, dim, Some(&short)).unwrap_err();
        assert!(matches!(err, FormatError::InvalidInput(_)), "{err}");
        let mut nan = vec![0.1f32; nlist_for(n) * dim];
        nan[3] = f32::NAN;
        assert!(write_ivf_with(&p, &v, dim, Some(&nan)).is_err());
        assert!(!p.exists());
    }
}
