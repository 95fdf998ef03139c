//! k-means for IVF coarse centroids: the reference for the GPU version
//! ([`crate::gpu::kmeans`]), and the shared centroid update.
//!
//! Deterministic: the initial centroids are `k` points taken at a fixed stride; each
//! iteration assigns every point to its best centroid (largest inner product, or smallest L2
//! distance: `2·x·c − ‖c‖²` largest), ties to the lower centroid, then moves each centroid to
//! the mean of its points (an empty cluster keeps its centroid); with the inner-product metric
//! centroids are L2-normalised (spherical k-means, for normalised embeddings).

/// Assignment metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    InnerProduct,
    L2,
}

/// The `k` starting centroids: points `0, n/k, 2n/k, …`.
pub fn init_centroids(points: &[f32], dim: usize, k: usize) -> Vec<f32> {
    let n = points.len() / dim;
    assert!(k >= 1 && k <= n, "k must be 1..=points");
    (0..k)
        .flat_map(|c| {
            let p = c * n / k;
            points[p * dim..(p + 1) * dim].iter().copied()
        })
        .collect()
}

/// Best centroid per point (the assignment step), on the CPU.
pub fn assign_cpu(points: &[f32], centroids: &[f32], dim: usize, metric: Metric) -> Vec<u32> {
    let norms: Vec<f32> = centroids
        .chunks(dim)
        .map(|c| c.iter().map(|v| v * v).sum())
        .collect();
    points
        .chunks(dim)
        .map(|x| {
            let mut best = f32::MIN;
            let mut bi = 0u32;
            for (ci, c) in centroids.chunks(dim).enumerate() {
                let dot: f32 = x.iter().zip(c).map(|(a, b)| a * b).sum();
                let s = match metric {
                    Metric::InnerProduct => dot,
                    Metric::L2 => 2.0 * dot - norms[ci],
                };
                if s > best {
                    best = s;
                    bi = ci as u32;
                }
            }
            bi
        })
        .collect()
}

/// The update step: each centroid to the mean of its points (kept when it has none),
/// normalised for the inner-product metric.
pub fn update(points: &[f32], assign: &[u32], centroids: &mut [f32], dim: usize, metric: Metric) {
    let k = centroids.len() / dim;
    let mut sums = vec![0f64; k * dim];
    let mut counts = vec![0u32; k];
    for (x, &a) in points.chunks(dim).zip(assign) {
        let a = a as usize;
        counts[a] += 1;
        for (s, v) in sums[a * dim..(a + 1) * dim].iter_mut().zip(x) {
            *s += f64::from(*v);
        }
    }
    for c in 0..k {
        if counts[c] == 0 {
            continue;
        }
        let cen = &mut centroids[c * dim..(c + 1) * dim];
        for (v, s) in cen.iter_mut().zip(&sums[c * dim..(c + 1) * dim]) {
            *v = (*s / f64::from(counts[c])) as f32;
        }
        if metric == Metric::InnerProduct {
            let n = cen.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
            cen.iter_mut().for_each(|v| *v /= n);
        }
    }
}

/// k-means on the CPU: `iters` assignment + update rounds from [`init_centroids`].
pub fn kmeans_cpu(points: &[f32], dim: usize, k: usize, iters: usize, metric: Metric) -> Vec<f32> {
    let mut c = init_centroids(points, dim, k);
    for _ in 0..iters {
        let a = assign_cpu(points, &c, dim, metric);
        update(points, &a, &mut c, dim, metric);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separates_obvious_clusters() {
        // Two tight groups on the x and y axes.
        let pts = [
            1.0, 0.01, 0.99, 0.0, 0.98, 0.02, 0.0, 1.0, 0.02, 0.99, 0.01, 0.98,
        ];
        for m in [Metric::InnerProduct, Metric::L2] {
            let c = kmeans_cpu(&pts, 2, 2, 5, m);
            let a = assign_cpu(&pts, &c, 2, m);
            assert_eq!(a[0], a[1]);
            assert_eq!(a[1], a[2]);
            assert_eq!(a[3], a[4]);
            assert_ne!(a[0], a[3], "{m:?}: {a:?}");
        }
    }
}
