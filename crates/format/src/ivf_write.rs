//! Writing `ivf.faiss` ourselves: the coarse centroids (spherical k-means), the SQ8 ranges and
//! every row's list and code, computed with `gemm` on rayon's pool, then serialised in FAISS's
//! `IndexIVFScalarQuantizer` layout (the one [`crate::ivf_map`] reads, and FAISS reads too).
//!
//! FAISS built the file before (`vectors::write_ivf_with`, kept as the peer of the tests and
//! benchmarks). Its k-means and coarse assignment are matrix products through BLAS, which it
//! runs single-threaded here (`vectors::single_threaded_blas`), beside the segment's other
//! components on the other cores; on a VM whose CPU model OpenBLAS does not know it falls back
//! to its SSE3 (`Prescott`) kernels. That was most of a large segment's write and of a merge.
//!
//! What is FAISS's, to the bit, given the same centroids and the same list for every row: the
//! SQ8 ranges (`RS_minmax` over the residuals of the training sample: per dimension the least
//! value and the span), each code (`(int)(255 · clamp((r − vmin) / vdiff, 0, 1))` of the
//! residual `r = x − centroid`), the order of each list (rows in order) and every header field.
//! A test writes both files from the same centroids and compares them byte for byte. Two
//! differences: a row's list is the centroid of largest inner product, ties to the lower, and
//! FAISS sums the products in another order, so a row whose two best centroids tie to rounding
//! may land in the other; and FAISS trains the ranges on a random 100,000 of the sample where
//! it is larger (above 1,562,500 rows), these on all of it.
//!
//! A row's products, and so its list, depend on `gemm`'s kernels for the CPU (AVX-512, AVX2,
//! their blocking by cache size), not on the thread count: a segment's `ivf.faiss`, like its
//! vectors, is the same on every run of a machine, and may differ by a rounding between CPUs
//! (as FAISS's did through OpenBLAS).
//!
//! The k-means ([`train_centroids`]) is the one the GPU runs (`kernels::gpu::kmeans`):
//! [`KMEANS_ITERS`] rounds of assignment and mean from `k` points at a fixed stride of the
//! sample, centroids normalised, an empty cluster keeping its centroid. FAISS's (the same
//! rounds, spherical, for an IVF) starts from a random sample and splits the largest cluster
//! into an empty one; recall measured the same (docs/measurements.md, "The IVF built without
//! FAISS").
//!
//! A vector that is not finite is refused: it would score NaN against every centroid.

use std::io::Write;
use std::path::Path;

use rayon::prelude::*;

use crate::{io_err, FormatError, Result};

/// Rounds of the coarse k-means (as FAISS's IVF training and the GPU k-means).
pub const KMEANS_ITERS: usize = 10;

/// Rows per task of [`assign`]: one product of this many rows against every centroid
/// (`BLOCK × k` scores: 2.9 MiB at the 1,881 lists of an 884k-row segment).
const BLOCK: usize = 384;

/// Rows encoded between two calls of a writer's `consumed` (as FAISS's batched adds).
const ENCODE_BATCH: usize = 65_536;

/// FAISS's serialisation constants (`index_write.cpp`).
const QT_8BIT: i32 = 0;
const RS_MINMAX: i32 = 0;
const METRIC_INNER_PRODUCT: i32 = 0;
/// The two unused `idx_t` fields of every index header.
const HEADER_DUMMY: i64 = 1 << 20;
/// `IndexIVF::nprobe`'s default, which FAISS writes.
const NPROBE: u64 = 1;

/// `scores` = `block` (`rows × dim`) times the transpose of `centroids` (`k × dim`), one
/// single-threaded product (`rows × k`, row-major).
fn scores_of(block: &[f32], centroids: &[f32], dim: usize, scores: &mut Vec<f32>) {
    let rows = block.len() / dim;
    let k = centroids.len() / dim;
    scores.clear();
    scores.resize(rows * k, 0.0);
    if rows == 0 || k == 0 {
        return;
    }
    // SAFETY: `scores` is `rows × k` row-major (resized above); `block` holds `rows × dim`
    // floats row-major; `centroids` is read as the `dim × k` matrix whose element (r, c) is
    // `centroids[c·dim + r]` (column stride `dim`, row stride 1) over its `k × dim` floats.
    // Every index gemm forms is in bounds.
    unsafe {
        // scores[i, c] = Σ_r block[i, r] · centroids[c, r]
        gemm::gemm(
            rows,
            k,
            dim,
            scores.as_mut_ptr(),
            1,
            k as isize,
            false,
            block.as_ptr(),
            1,
            dim as isize,
            centroids.as_ptr(),
            dim as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// The centroid of largest score in `row`, ties (and NaN) to the lower one.
fn best(row: &[f32]) -> u32 {
    let (mut top, mut at) = (f32::MIN, 0u32);
    for (c, &s) in row.iter().enumerate() {
        if s > top {
            top = s;
            at = c as u32;
        }
    }
    at
}

/// Each row's centroid of largest inner product (ties to the lower): the rows in blocks of
/// [`BLOCK`], the blocks in parallel, each one product of its own, so the answer does not
/// depend on the number of threads.
pub fn assign(points: &[f32], centroids: &[f32], dim: usize) -> Vec<u32> {
    if dim == 0 {
        return Vec::new();
    }
    let n = points.len() / dim;
    let mut out = vec![0u32; n];
    if centroids.len() < dim {
        return out;
    }
    let k = centroids.len() / dim;
    out.par_chunks_mut(BLOCK)
        .zip(points[..n * dim].par_chunks(BLOCK * dim))
        .for_each_init(Vec::new, |scores: &mut Vec<f32>, (o, block)| {
            scores_of(block, centroids, dim, scores);
            for (a, row) in o.iter_mut().zip(scores.chunks_exact(k)) {
                *a = best(row);
            }
        });
    out
}

/// `k` coarse centroids for an inner-product IVF from `sample` (`n × dim`, unit rows):
/// spherical k-means, [`KMEANS_ITERS`] rounds from the points `0, n/k, 2n/k, …`; each round
/// assigns every point ([`assign`]) and moves each centroid to the normalised mean of its
/// points (a centroid without points stays). The same result every run for a given input and
/// CPU, whatever the thread count. `k` must be `1..=n`.
pub fn train_centroids(sample: &[f32], dim: usize, k: usize) -> Result<Vec<f32>> {
    let n = sample.len() / dim.max(1);
    if dim == 0 || k == 0 || k > n {
        return Err(FormatError::InvalidInput(format!(
            "k-means: {n} points of dimension {dim} cannot train {k} centroids"
        )));
    }
    let mut c: Vec<f32> = (0..k)
        .flat_map(|i| {
            let p = i * n / k;
            sample[p * dim..(p + 1) * dim].iter().copied()
        })
        .collect();
    let mut sums = vec![0f64; k * dim];
    let mut counts = vec![0u32; k];
    for _ in 0..KMEANS_ITERS {
        let a = assign(sample, &c, dim);
        sums.iter_mut().for_each(|s| *s = 0.0);
        counts.iter_mut().for_each(|x| *x = 0);
        for (x, &l) in sample.chunks_exact(dim).zip(&a) {
            let l = l as usize;
            counts[l] += 1;
            for (s, v) in sums[l * dim..(l + 1) * dim].iter_mut().zip(x) {
                *s += f64::from(*v);
            }
        }
        for l in 0..k {
            if counts[l] == 0 {
                continue;
            }
            let cen = &mut c[l * dim..(l + 1) * dim];
            for (v, s) in cen.iter_mut().zip(&sums[l * dim..(l + 1) * dim]) {
                *v = (*s / f64::from(counts[l])) as f32;
            }
            let norm = cen.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            cen.iter_mut().for_each(|v| *v /= norm);
        }
    }
    Ok(c)
}

/// FAISS's `QT_8bit` ranges: per dimension the least value and the span (`vmin`, `vdiff`).
struct Sq8 {
    vmin: Vec<f32>,
    vdiff: Vec<f32>,
}

impl Sq8 {
    /// `RS_minmax` (argument 0) over the residuals of `sample` against its centroids, as
    /// FAISS's `train_NonUniform`: the first row's values, then each row's smaller / larger.
    fn train(sample: &[f32], centroids: &[f32], dim: usize) -> Sq8 {
        let lists = assign(sample, centroids, dim);
        let mut vmin = vec![f32::INFINITY; dim];
        let mut vmax = vec![f32::NEG_INFINITY; dim];
        for (i, (x, &l)) in sample.chunks_exact(dim).zip(&lists).enumerate() {
            let c = &centroids[l as usize * dim..(l as usize + 1) * dim];
            for j in 0..dim {
                let r = x[j] - c[j];
                if i == 0 {
                    (vmin[j], vmax[j]) = (r, r);
                    continue;
                }
                if r < vmin[j] {
                    vmin[j] = r;
                }
                if r > vmax[j] {
                    vmax[j] = r;
                }
            }
        }
        // FAISS widens each range by (vmax − vmin) · rangestat_arg, here 0, then stores the span.
        let vdiff = vmax.iter().zip(&vmin).map(|(hi, lo)| hi - lo).collect();
        Sq8 { vmin, vdiff }
    }

    /// The code of `x`'s residual against `c`, into `code` (`dim` bytes).
    fn encode(&self, x: &[f32], c: &[f32], code: &mut [u8]) {
        for j in 0..code.len() {
            let mut xi = 0f32;
            if self.vdiff[j] != 0.0 {
                xi = (((x[j] - c[j]) - self.vmin[j]) / self.vdiff[j]).clamp(0.0, 1.0);
            }
            code[j] = (255.0 * xi) as i32 as u8;
        }
    }
}

/// Builds the IVF-SQ8 index of `vectors` (`n × dim`, row `i` gets id `i`) and writes it to
/// `path` in FAISS's layout: `centroids` (`nlist_for(n) × dim`, finite) when trained elsewhere
/// (the GPU), else [`train_centroids`] on `sample` (the segment's training sample,
/// `vectors::ivf_training_sample`), which also trains the SQ8 ranges. `consumed` hears of
/// `0..n` once the sample is read and of each batch of rows once encoded (the segment writer
/// drops mapped rows' pages there). The caller syncs the file.
pub fn write_ivf_sq8(
    path: &Path,
    vectors: &[f32],
    dim: usize,
    centroids: Option<&[f32]>,
    consumed: &(dyn Fn(std::ops::Range<usize>) + Sync),
) -> Result<()> {
    let n = vectors.len() / dim.max(1);
    let nlist = crate::vectors::nlist_for(n);
    if dim == 0 || n == 0 || vectors.len() != n * dim || n > u32::MAX as usize {
        return Err(FormatError::InvalidInput(format!(
            "an IVF index of {} floats in rows of dimension {dim}",
            vectors.len()
        )));
    }
    let sample = crate::vectors::ivf_training_sample(vectors, dim);
    let centroids = match centroids {
        Some(c) => {
            if c.len() != nlist * dim || c.iter().any(|v| !v.is_finite()) {
                return Err(FormatError::InvalidInput(format!(
                    "IVF centroids: {} floats (non-finite values refused) for {nlist} lists of dimension {dim}",
                    c.len()
                )));
            }
            c.to_vec()
        }
        None => train_centroids(&sample, dim, nlist)?,
    };
    let sq = Sq8::train(&sample, &centroids, dim);
    drop(sample);
    consumed(0..n);

    // Every row's list and code, in row order.
    let mut lists = vec![0u32; n];
    let mut codes = vec![0u8; n * dim];
    let mut at = 0;
    while at < n {
        let end = (at + ENCODE_BATCH).min(n);
        lists[at..end]
            .par_chunks_mut(BLOCK)
            .zip(codes[at * dim..end * dim].par_chunks_mut(BLOCK * dim))
            .zip(vectors[at * dim..end * dim].par_chunks(BLOCK * dim))
            .enumerate()
            .try_for_each_init(
                Vec::new,
                |scores: &mut Vec<f32>, (b, ((l, code), block))| {
                    // A row that is not finite would be scored NaN against every list (and land
                    // in the first); it is refused, the file unwritten.
                    if let Some(i) = block.iter().position(|v| !v.is_finite()) {
                        return Err(at + b * BLOCK + i / dim);
                    }
                    scores_of(block, &centroids, dim, scores);
                    for (i, row) in scores.chunks_exact(nlist).enumerate() {
                        let list = best(row);
                        l[i] = list;
                        let c = &centroids[list as usize * dim..(list as usize + 1) * dim];
                        sq.encode(
                            &block[i * dim..(i + 1) * dim],
                            c,
                            &mut code[i * dim..(i + 1) * dim],
                        );
                    }
                    Ok(())
                },
            )
            .map_err(|row| {
                FormatError::InvalidInput(format!(
                    "vector {row} holds a value that is not a finite number"
                ))
            })?;
        consumed(at..end);
        at = end;
    }

    // Each list's rows in order (a counting sort).
    let mut start = vec![0usize; nlist + 1];
    for &l in &lists {
        start[l as usize + 1] += 1;
    }
    for l in 0..nlist {
        start[l + 1] += start[l];
    }
    let mut rows = vec![0u32; n];
    let mut next = start.clone();
    for (r, &l) in lists.iter().enumerate() {
        rows[next[l as usize]] = r as u32;
        next[l as usize] += 1;
    }
    drop(lists);

    let file = std::fs::File::create(path).map_err(io_err(path))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
    let mut put = |b: &[u8]| w.write_all(b);
    let header = |put: &mut dyn FnMut(&[u8]) -> std::io::Result<()>, ntotal: i64| {
        put(&(dim as i32).to_le_bytes())?;
        put(&ntotal.to_le_bytes())?;
        put(&HEADER_DUMMY.to_le_bytes())?;
        put(&HEADER_DUMMY.to_le_bytes())?;
        put(&[1u8])?; // is_trained
        put(&METRIC_INNER_PRODUCT.to_le_bytes())
    };
    let u64s =
        |put: &mut dyn FnMut(&[u8]) -> std::io::Result<()>, v: &[u64]| -> std::io::Result<()> {
            put(&(v.len() as u64).to_le_bytes())?;
            for x in v {
                put(&x.to_le_bytes())?;
            }
            Ok(())
        };
    let floats =
        |put: &mut dyn FnMut(&[u8]) -> std::io::Result<()>, v: &[f32]| -> std::io::Result<()> {
            for x in v {
                put(&x.to_le_bytes())?;
            }
            Ok(())
        };
    let mut body = || -> std::io::Result<()> {
        put(b"IwSq")?;
        header(&mut put, n as i64)?;
        put(&(nlist as u64).to_le_bytes())?;
        put(&NPROBE.to_le_bytes())?;
        // The coarse quantizer: a flat inner-product index holding the centroids.
        put(b"IxFI")?;
        header(&mut put, nlist as i64)?;
        put(&((nlist * dim) as u64).to_le_bytes())?;
        floats(&mut put, &centroids)?;
        // No direct map.
        put(&[0u8])?;
        put(&0u64.to_le_bytes())?;
        // The scalar quantizer.
        put(&QT_8BIT.to_le_bytes())?;
        put(&RS_MINMAX.to_le_bytes())?;
        put(&0f32.to_le_bytes())?;
        put(&(dim as u64).to_le_bytes())?;
        put(&(dim as u64).to_le_bytes())?;
        put(&((2 * dim) as u64).to_le_bytes())?;
        floats(&mut put, &sq.vmin)?;
        floats(&mut put, &sq.vdiff)?;
        put(&(dim as u64).to_le_bytes())?; // code_size
        put(&[1u8])?; // by_residual
                      // The inverted lists: sizes (all of them, or the non-empty ones with their numbers
                      // when at most half are non-empty), then each non-empty list's codes and ids.
        put(b"ilar")?;
        put(&(nlist as u64).to_le_bytes())?;
        put(&(dim as u64).to_le_bytes())?;
        let sizes: Vec<u64> = start.windows(2).map(|s| (s[1] - s[0]) as u64).collect();
        let non_empty = sizes.iter().filter(|&&s| s > 0).count();
        if non_empty > nlist / 2 {
            put(b"full")?;
            u64s(&mut put, &sizes)?;
        } else {
            put(b"sprs")?;
            let pairs: Vec<u64> = (0..nlist)
                .filter(|&l| sizes[l] > 0)
                .flat_map(|l| [l as u64, sizes[l]])
                .collect();
            u64s(&mut put, &pairs)?;
        }
        for l in 0..nlist {
            let members = &rows[start[l]..start[l + 1]];
            for &r in members {
                put(&codes[r as usize * dim..(r as usize + 1) * dim])?;
            }
            for &r in members {
                put(&i64::from(r).to_le_bytes())?;
            }
        }
        Ok(())
    };
    body().map_err(io_err(path))?;
    w.flush().map_err(io_err(path))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vectors::{clustered_for_tests, ivf_training_sample, nlist_for, Ivf};

    /// The best and second-best score of each point (the margin a rounding can flip), and the
    /// best centroid, in f64 summed in order.
    fn reference(points: &[f32], centroids: &[f32], dim: usize) -> Vec<(u32, f64)> {
        points
            .chunks(dim)
            .map(|x| {
                let mut s: Vec<(f64, u32)> = centroids
                    .chunks(dim)
                    .enumerate()
                    .map(|(c, cen)| {
                        let dot: f64 = x.iter().zip(cen).map(|(a, b)| f64::from(a * b)).sum();
                        (dot, c as u32)
                    })
                    .collect();
                s.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                (s[0].1, s[0].0 - s.get(1).map_or(f64::MIN, |t| t.0))
            })
            .collect()
    }

    #[test]
    fn assignment_is_the_best_inner_product() {
        // Rows around the block size, centroid counts around gemm's register widths.
        for (n, dim, k) in [(1, 3, 1), (383, 17, 5), (385, 64, 33), (1000, 384, 61)] {
            let pts = clustered_for_tests(n, dim, 9, n as u64 + 1, 0.3);
            let cen = clustered_for_tests(k, dim, k, 7, 0.0);
            let got = assign(&pts, &cen, dim);
            let want = reference(&pts, &cen, dim);
            let mut compared = 0;
            for (i, (&g, &(w, gap))) in got.iter().zip(&want).enumerate() {
                // Only a near-tie may go either way.
                if gap > 1e-4 {
                    assert_eq!(g, w, "{n}×{dim}, k {k}, row {i}");
                    compared += 1;
                }
            }
            assert!(compared * 10 >= n * 9, "{compared} of {n} compared");
        }
        // Ties go to the lower centroid.
        let cen = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0];
        assert_eq!(assign(&[1.0, 0.0], &cen, 2), vec![0]);
        assert!(assign(&[], &cen, 2).is_empty());
    }

    /// The k-means of the module doc against a plain one (f32 scores summed in order), and the
    /// same centroids every run.
    #[test]
    fn kmeans_moves_centroids_to_their_points_means() {
        let (n, dim, k) = (2000, 48, 20);
        let pts = clustered_for_tests(n, dim, 20, 3, 0.3);
        let mut want: Vec<f32> = (0..k)
            .flat_map(|i| pts[i * n / k * dim..(i * n / k + 1) * dim].to_vec())
            .collect();
        for _ in 0..KMEANS_ITERS {
            let a: Vec<u32> = reference(&pts, &want, dim).iter().map(|r| r.0).collect();
            let mut sums = vec![0f64; k * dim];
            let mut counts = vec![0u32; k];
            for (x, &l) in pts.chunks(dim).zip(&a) {
                counts[l as usize] += 1;
                for j in 0..dim {
                    sums[l as usize * dim + j] += f64::from(x[j]);
                }
            }
            for l in 0..k {
                if counts[l] > 0 {
                    let c: Vec<f64> = (0..dim)
                        .map(|j| sums[l * dim + j] / f64::from(counts[l]))
                        .collect();
                    let norm = c.iter().map(|v| v * v).sum::<f64>().sqrt();
                    for j in 0..dim {
                        want[l * dim + j] = (c[j] / norm) as f32;
                    }
                }
            }
        }
        let got = train_centroids(&pts, dim, k).unwrap();
        let worst = want
            .iter()
            .zip(&got)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-4, "centroids differ by {worst}");
        assert_eq!(got, train_centroids(&pts, dim, k).unwrap());
        assert!(train_centroids(&pts, dim, n + 1).is_err());
        assert!(train_centroids(&pts, 0, 1).is_err());
    }

    /// Rows near `nlist_for(n)` well-separated centres, and those centres (normalised means):
    /// every row's best centroid wins by a wide margin, so FAISS and we assign alike.
    fn separated(n: usize, dim: usize) -> (Vec<f32>, Vec<f32>) {
        let nlist = nlist_for(n);
        let v = clustered_for_tests(n, dim, nlist, 0x5EED, 0.05);
        let c = cluster_means(&v, dim, nlist);
        (v, c)
    }

    /// The normalised mean of each cluster of `clustered_for_tests` (row `i` is in cluster
    /// `i % clusters`), `clusters × dim`.
    fn cluster_means(v: &[f32], dim: usize, clusters: usize) -> Vec<f32> {
        let mut c = vec![0f32; clusters * dim];
        for (i, row) in v.chunks(dim).enumerate() {
            for j in 0..dim {
                c[(i % clusters) * dim + j] += row[j];
            }
        }
        for cen in c.chunks_mut(dim) {
            let norm = cen.iter().map(|x| x * x).sum::<f32>().sqrt();
            cen.iter_mut().for_each(|x| *x /= norm);
        }
        c
    }

    /// Given the same centroids, the file is FAISS's to the byte: header, quantizer, SQ8
    /// ranges, list order, codes and ids; with more rows than one batch and dense and sparse
    /// list tables.
    #[test]
    fn the_file_is_faiss_s_own_given_the_same_centroids() {
        for (n, dim) in [(5000, 16), (ENCODE_BATCH + 4100, 8)] {
            let (v, c) = separated(n, dim);
            let tmp = tempfile::tempdir().unwrap();
            let ours = tmp.path().join("ours");
            let seen = std::sync::Mutex::new(Vec::new());
            write_ivf_sq8(&ours, &v, dim, Some(&c), &|r| seen.lock().unwrap().push(r)).unwrap();
            let theirs = tmp.path().join("faiss");
            crate::vectors::write_ivf_with(&theirs, &v, dim, Some(&c)).unwrap();
            let (a, b) = (
                std::fs::read(&ours).unwrap(),
                std::fs::read(&theirs).unwrap(),
            );
            assert_eq!(a.len(), b.len(), "{n} rows");
            assert!(
                a == b,
                "{n} rows: first difference at byte {:?}",
                a.iter().zip(&b).position(|(x, y)| x != y)
            );
            let mut want: Vec<_> = std::iter::once(0..n).collect();
            let mut at = 0;
            while at < n {
                want.push(at..(at + ENCODE_BATCH).min(n));
                at += ENCODE_BATCH;
            }
            assert_eq!(seen.into_inner().unwrap(), want);
        }
        // A sparse list table: most lists empty (every row near one of two centres, the other
        // centroids opposite the first: each row's best wins by about 2).
        let (n, dim) = (5000, 16);
        let nlist = nlist_for(n);
        let v2 = clustered_for_tests(n, dim, 2, 0xFACE, 0.05);
        let mut c = cluster_means(&v2, dim, 2);
        let opposite: Vec<f32> = c[..dim].iter().map(|x| -x).collect();
        for _ in 2..nlist {
            c.extend_from_slice(&opposite);
        }
        let margins = reference(&v2, &c, dim);
        assert!(
            margins.iter().all(|m| m.1 > 0.5 && m.0 < 2),
            "not separated"
        );
        let tmp = tempfile::tempdir().unwrap();
        let (ours, theirs) = (tmp.path().join("ours"), tmp.path().join("faiss"));
        write_ivf_sq8(&ours, &v2, dim, Some(&c), &|_| {}).unwrap();
        crate::vectors::write_ivf_with(&theirs, &v2, dim, Some(&c)).unwrap();
        let a = std::fs::read(&ours).unwrap();
        assert!(a.windows(4).any(|w| w == b"sprs"), "not a sparse table");
        assert!(a == std::fs::read(&theirs).unwrap(), "sparse table differs");
    }

    /// The file does not depend on the number of threads.
    #[test]
    fn one_thread_or_four_write_the_same_file() {
        let (n, dim) = (9000, 24);
        let v = clustered_for_tests(n, dim, 30, 5, 0.3);
        let tmp = tempfile::tempdir().unwrap();
        let mut files = Vec::new();
        for threads in [1, 4] {
            let p = tmp.path().join(format!("t{threads}"));
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| write_ivf_sq8(&p, &v, dim, None, &|_| {}))
                .unwrap();
            files.push(std::fs::read(&p).unwrap());
        }
        assert!(files[0] == files[1]);
    }

    /// Without centroids the file holds ours (trained on the sample), FAISS reads it, and a
    /// row is found in its own list.
    #[test]
    fn faiss_reads_an_index_trained_here() {
        let (n, dim) = (6000, 16);
        let v = clustered_for_tests(n, dim, 40, 11, 0.2);
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("ivf");
        write_ivf_sq8(&p, &v, dim, None, &|_| {}).unwrap();
        let ivf = Ivf::load(&p, dim, n).unwrap();
        let nlist = nlist_for(n);
        assert_eq!(ivf.nlist(), nlist);
        let want = train_centroids(&ivf_training_sample(&v, dim), dim, nlist).unwrap();
        assert_eq!(ivf.centroids().unwrap(), want);
        for row in [0usize, 1234, n - 1] {
            let q = &v[row * dim..(row + 1) * dim];
            let got = ivf.candidates(q, 10, 8).unwrap();
            assert!(got.contains(&(row as u32)), "row {row}: {got:?}");
        }
        let mapped = crate::ivf_map::MappedIvf::open(&p, dim, n).unwrap();
        assert_eq!(mapped.nlist(), nlist);
    }

    #[test]
    fn bad_input_writes_nothing() {
        let (n, dim) = (500, 8);
        let v = clustered_for_tests(n, dim, 5, 1, 0.1);
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("ivf");
        let short = vec![0.5f32; dim];
        let err = write_ivf_sq8(&p, &v, dim, Some(&short), &|_| {}).unwrap_err();
        assert!(matches!(err, FormatError::InvalidInput(_)), "{err}");
        let mut nan = vec![0.1f32; nlist_for(n) * dim];
        nan[3] = f32::NAN;
        assert!(write_ivf_sq8(&p, &v, dim, Some(&nan), &|_| {}).is_err());
        assert!(write_ivf_sq8(&p, &[], dim, None, &|_| {}).is_err());
        assert!(write_ivf_sq8(&p, &v[..v.len() - 1], dim, None, &|_| {}).is_err());
        let mut inf = v.clone();
        inf[dim * 321 + 2] = f32::INFINITY;
        let err = write_ivf_sq8(&p, &inf, dim, None, &|_| {}).unwrap_err();
        assert!(err.to_string().contains("vector 321"), "{err}");
        assert!(!p.exists());
        assert!(assign(&v, &v[..dim], 0).is_empty());
    }
}
