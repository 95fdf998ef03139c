//! Exact top-k by inner product: the reference for the GPU kernel
//! ([`crate::gpu::top_k_inner_product`]).

/// The largest k the GPU kernel takes: its merge buffers (units × k scores and rows) must fit
/// WebGPU's 16 KiB of workgroup memory with room to spare.
pub const MAX_K: usize = 32;

/// Which exact top-k kernel runs (`gpu::top_k_inner_product_with`). Both sum every inner product
/// in dimension order, as the CPU reference does, and return the same lists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TopKKernel {
    #[default]
    /// The base tile is staged through shared memory a few dimensions at a time, read so that
    /// neighbouring units load neighbouring floats of a row (coalesced), and each unit scores
    /// `gpu::TOPK_ROWS_PER_UNIT` rows against the group's queries from registers. The default.
    Staged,
    /// Each unit reads its own row straight from global memory (neighbouring units a row apart:
    /// one memory transaction per unit and load) and scores it alone: the first kernel, kept as
    /// the peer the benchmark compares with.
    RowWise,
}

/// Where the time of one GPU top-k call went (wall clock on the host).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TopKTimes {
    /// Copying the queries and the base to the device, until the device has them.
    pub upload_s: f64,
    /// The kernel and reading its k-lists back (includes compiling the kernel on first use).
    pub kernel_s: f64,
    /// Merging the blocks' k-lists on the host.
    pub merge_s: f64,
}

/// Whether `queries` and `base` are whole rows of `dim` and `k` is within 1..=[`MAX_K`].
pub fn valid_input(queries: &[f32], base: &[f32], dim: usize, k: usize) -> bool {
    dim > 0
        && queries.len().is_multiple_of(dim)
        && base.len().is_multiple_of(dim)
        && (1..=MAX_K).contains(&k)
}

/// Keeps the best `k` of `(row, score)` pairs, best first: higher score, then lower row.
pub(crate) fn keep_best(v: &mut Vec<(u32, f32)>, k: usize) {
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v.truncate(k);
}

/// For each of the `queries.len() / dim` queries, the `k` rows of `base` (`base.len() / dim`
/// rows) with the largest inner product, best first, ties by lower row index.
pub fn top_k_inner_product_cpu(
    queries: &[f32],
    base: &[f32],
    dim: usize,
    k: usize,
) -> Vec<Vec<(u32, f32)>> {
    assert!(dim > 0 && queries.len().is_multiple_of(dim) && base.len().is_multiple_of(dim));
    queries
        .chunks(dim)
        .map(|q| {
            let mut s: Vec<(u32, f32)> = base
                .chunks(dim)
                .enumerate()
                .map(|(i, row)| (i as u32, row.iter().zip(q).map(|(a, b)| a * b).sum()))
                .collect();
            keep_best(&mut s, k);
            s
        })
        .collect()
}
