//! Exact top-k by inner product: the reference for the GPU kernel
//! ([`crate::gpu::top_k_inner_product`]).

/// For each of the `queries.len() / dim` queries, the `k` rows of `base` (`base.len() / dim`
/// rows) with the largest inner product, best first, ties by lower row index.
pub fn top_k_inner_product_cpu(
    queries: &[f32],
    base: &[f32],
    dim: usize,
    k: usize,
) -> Vec<Vec<(u32, f32)>> {
    assert!(dim > 0 && queries.len().is_multiple_of(dim) && base.len().is_multiple_of(dim));
    let n = base.len() / dim;
    queries
        .chunks(dim)
        .map(|q| {
            let mut s: Vec<(u32, f32)> = base
                .chunks(dim)
                .enumerate()
                .map(|(i, row)| (i as u32, row.iter().zip(q).map(|(a, b)| a * b).sum()))
                .collect();
            s.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            s.truncate(k.min(n));
            s
        })
        .collect()
}
