//! cubecl kernels for the GPU backends (built with the `wgpu` or `cuda` feature), each with a
//! CPU reference and a test comparing the two (run on wgpu over Mesa's lavapipe in CI).
//!
//! - [`pool_normalize`]: fused masked mean pooling + L2 normalisation over the last hidden
//!   state, one cube per row: each unit pools a strided subset of the hidden dimensions and
//!   keeps its sum of squares in shared memory; one unit reduces them into the norm, and every
//!   unit scales its own outputs. One launch, one read back.
//! - [`top_k_inner_product`]: exact batched top-k by inner product (recall measurement, the
//!   memory delta on a GPU), one cube per (group of [`TOPK_QUERIES`] queries, block of
//!   [`TOPK_TILES`] × [`TOPK_UNITS`] rows): a tile's rows are scored one per unit against all
//!   the group's queries (staged in shared memory), so each row is read once per group, and one
//!   unit per query folds the tile's scores into its sorted top-k; the host merges the blocks'
//!   k-lists. Only k results per query and block are read back.
//! - [`kmeans`]: k-means for IVF centroids, every iteration on the device: the assignment
//!   (n × k × dim, the bulk of the cost) one unit per point, the centroid update one cube per
//!   centroid; the points go up once and only the final centroids come back.

use cubecl::ir::FloatKind;
use cubecl::prelude::*;

pub use crate::topk::TopKKernel;

/// Units per cube (rows are pooled by this many units; hidden sizes up to 4096 are fine).
pub const POOL_UNITS: usize = 128;

#[cube(launch)]
fn pool_normalize_kernel<F: Float>(
    x: &[F],
    mask: &[f32],
    out: &mut [f32],
    #[comptime] tokens: usize,
    #[comptime] hidden: usize,
    #[comptime] units: usize,
    #[comptime] steps: usize,
    #[define(F)] _dtype: ElemType,
) {
    let r = CUBE_POS_X as usize;
    let u = UNIT_POS_X as usize;
    let mut partial = Shared::<[f32]>::new_slice(units);
    let mut norm = Shared::<[f32]>::new_slice(1usize);
    let mut count = 0.0f32;
    for t in 0..tokens {
        count += mask[r * tokens + t];
    }
    let mut denom = 1.0f32;
    if count > 1.0f32 {
        denom = count;
    }
    let mut ss = 0.0f32;
    for k in 0..steps {
        let h = u + k * units;
        if h < hidden {
            let mut acc = 0.0f32;
            for t in 0..tokens {
                acc += f32::cast_from(x[(r * tokens + t) * hidden + h]) * mask[r * tokens + t];
            }
            let v = acc / denom;
            out[r * hidden + h] = v;
            ss += v * v;
        }
    }
    partial[u] = ss;
    sync_cube();
    if u == 0 {
        let mut s = 0.0f32;
        for i in 0..units {
            s += partial[i];
        }
        let mut n = s.sqrt();
        if n < 1e-12f32 {
            n = 1e-12f32;
        }
        norm[0] = n;
    }
    sync_cube();
    let n = norm[0];
    for k in 0..steps {
        let h = u + k * units;
        if h < hidden {
            out[r * hidden + h] /= n;
        }
    }
}

/// [`crate::pool::pool_normalize_cpu`] on the device of `client` (e.g.
/// `cubecl::Device::default().client()`).
pub fn pool_normalize(
    client: &cubecl::client::Client,
    x: &[f32],
    mask: &[f32],
    rows: usize,
    tokens: usize,
    hidden: usize,
) -> Vec<f32> {
    crate::pool::assert_shapes(x, mask, rows, tokens, hidden);
    if rows == 0 || hidden == 0 {
        return Vec::new();
    }
    let xh = client.create_from_slice(f32::as_bytes(x));
    let mh = client.create_from_slice(f32::as_bytes(mask));
    let oh = launch_pool_normalize(client, xh, mh, rows, tokens, hidden, F32);
    let bytes = client.read_one_unchecked(oh);
    f32::from_bytes(&bytes).to_vec()
}

const F32: ElemType = ElemType::Float(FloatKind::F32);

/// Launches the pooling kernel over device buffers (`x` of element type `elem`, `mask` f32);
/// returns the `rows × hidden` f32 output buffer.
fn launch_pool_normalize(
    client: &cubecl::client::Client,
    x: cubecl::server::Handle,
    mask: cubecl::server::Handle,
    rows: usize,
    tokens: usize,
    hidden: usize,
    elem: ElemType,
) -> cubecl::server::Handle {
    let out = client.empty(rows * hidden * core::mem::size_of::<f32>());
    pool_normalize_kernel::launch(
        client,
        CubeCount::Static(rows as u32, 1, 1),
        CubeDim::new_1d(POOL_UNITS as u32),
        unsafe { BufferArg::from_raw_parts(x, rows * tokens * hidden) },
        unsafe { BufferArg::from_raw_parts(mask, rows * tokens) },
        unsafe { BufferArg::from_raw_parts(out.clone(), rows * hidden) },
        tokens,
        hidden,
        POOL_UNITS,
        hidden.div_ceil(POOL_UNITS),
        elem,
    );
    out
}

/// The pooling kernel on a burn tensor that already lives on a cubecl device: `x` is the last
/// hidden state `[rows, tokens, hidden]` (f32, f16 or bf16), `mask` `[rows, tokens]` f32. The
/// result, `[rows, hidden]` f32 and L2-normalised, stays on the device (nothing is read back).
/// `None` when the tensors are not contiguous cubecl tensors of those types; the caller then
/// pools with burn ops.
pub(crate) fn pool_normalize_tensor(
    x: &burn::tensor::Tensor<3>,
    mask: &burn::tensor::Tensor<2>,
) -> Option<burn::tensor::Tensor<2>> {
    use burn::backend::{BackendTypes, Cube};
    use burn::tensor::{DType, Shape, Tensor};
    let [rows, tokens, hidden] = x.dims();
    if mask.dims() != [rows, tokens] || rows == 0 || tokens == 0 || hidden == 0 {
        return None;
    }
    let xt = x.clone().try_into_primitive::<Cube>().ok()?;
    let mt = mask.clone().try_into_primitive::<Cube>().ok()?;
    if !xt.is_contiguous() || !mt.is_contiguous() || mt.dtype != DType::F32 {
        return None;
    }
    let elem = match xt.dtype {
        DType::F32 => F32,
        DType::F16 => ElemType::Float(FloatKind::F16),
        DType::BF16 => ElemType::Float(FloatKind::BF16),
        _ => return None,
    };
    let client = xt.client.clone();
    let out = launch_pool_normalize(
        &client,
        xt.handle.clone(),
        mt.handle.clone(),
        rows,
        tokens,
        hidden,
        elem,
    );
    let pooled = <<Cube as BackendTypes>::FloatTensorPrimitive>::new_contiguous(
        client,
        xt.device.clone(),
        Shape::new([rows, hidden]),
        out,
        DType::F32,
    );
    Some(Tensor::from_primitive::<Cube>(pooled))
}

/// Units per cube of the top-k kernel, one base row each per tile.
pub const TOPK_UNITS: usize = 128;
/// Queries per cube of the top-k kernel: each base row a cube reads is scored against this many
/// queries (the row is read from memory once per group instead of once per query).
pub const TOPK_QUERIES: usize = 16;
/// Tiles of [`TOPK_UNITS`] rows per cube: a cube scans `TOPK_UNITS * TOPK_TILES` rows, so a
/// million rows make ~120 row blocks per query group; the host merges the blocks' k-lists
/// (queries × blocks × k entries read back).
pub const TOPK_TILES: usize = 64;

/// Exact top-k, one cube per (group of `qg` queries, block of `tiles * tile` base rows):
/// for each tile of `tile` rows, every unit scores its row against the group's queries, which
/// are staged through shared memory `chunk` dimensions at a time (sums in dimension order, as
/// the CPU reference); the scores go to shared memory and unit `q` (one per query) folds them,
/// in row order, into its own sorted top-k in registers, which it writes out at the end.
/// Barriers sit in uniform control flow (WGSL requires it).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn top_k_kernel(
    queries: &[f32],
    base: &[f32],
    out_idx: &mut [u32],
    out_score: &mut [f32],
    nq: u32,
    rows: u32,
    #[comptime] dim: usize,
    #[comptime] k: usize,
    #[comptime] qg: usize,
    #[comptime] tile: usize,
    #[comptime] tiles: usize,
    #[comptime] chunk: usize,
) {
    let q0 = CUBE_POS_X as usize * qg;
    let bi = CUBE_POS_Y as usize;
    let blocks = CUBE_COUNT_Y as usize;
    let u = UNIT_POS_X as usize;
    let nq = nq as usize;
    let rows = rows as usize;
    let first = bi * tiles * tile;
    // Tiles holding at least one row (the last block is partial); uniform across the cube.
    #[allow(clippy::manual_div_ceil)] // a runtime value in the kernel: no `div_ceil` there
    let mut ntiles = (rows - first + tile - 1) / tile;
    if ntiles > tiles {
        ntiles = tiles;
    }
    let mut sq = Shared::<[f32]>::new_slice(qg * chunk);
    let mut ss = Shared::<[f32]>::new_slice(qg * tile);
    let mut best_s = Array::<f32>::new(k);
    let mut best_i = Array::<u32>::new(k);
    for j in 0..k {
        best_s[j] = f32::new(-3.4e38f32); // WGSL has no infinity literal
        best_i[j] = u32::MAX;
    }
    for t in 0..ntiles {
        let row = first + t * tile + u;
        let mut acc = Array::<f32>::new(qg);
        #[unroll]
        for q in 0..qg {
            acc[q] = 0.0f32;
        }
        for c in 0..dim / chunk {
            sync_cube(); // the previous chunk's (or tile's) readers are done
            #[allow(clippy::manual_div_ceil)]
            let loads = (qg * chunk + tile - 1) / tile;
            for l in 0..loads {
                let p = l * tile + u;
                if p < qg * chunk {
                    let q = q0 + p / chunk;
                    let mut v = 0.0f32;
                    if q < nq {
                        v = queries[q * dim + c * chunk + p % chunk];
                    }
                    sq[p] = v;
                }
            }
            sync_cube();
            if row < rows {
                for d in 0..chunk {
                    let x = base[row * dim + c * chunk + d];
                    #[unroll]
                    for q in 0..qg {
                        acc[q] += sq[q * chunk + d] * x;
                    }
                }
            }
        }
        #[unroll]
        for q in 0..qg {
            ss[q * tile + u] = acc[q];
        }
        sync_cube();
        if u < qg {
            for r in 0..tile {
                let rr = first + t * tile + r;
                let sc = ss[u * tile + r];
                // Rows come in ascending order: an equal score never displaces an earlier row.
                if rr < rows && sc > best_s[k - 1] {
                    let mut placed = false;
                    for jj in 0..k - 1 {
                        let j = k - 1 - jj;
                        if !placed {
                            if best_s[j - 1] < sc {
                                best_s[j] = best_s[j - 1];
                                best_i[j] = best_i[j - 1];
                            } else {
                                best_s[j] = sc;
                                best_i[j] = rr as u32;
                                placed = true;
                            }
                        }
                    }
                    if !placed {
                        best_s[0] = sc;
                        best_i[0] = rr as u32;
                    }
                }
            }
        }
    }
    if u < qg && q0 + u < nq {
        for j in 0..k {
            let slot = ((q0 + u) * blocks + bi) * k + j;
            out_score[slot] = best_s[j];
            out_idx[slot] = best_i[j];
        }
    }
}

/// Base rows each unit of the staged top-k kernel scores (a register tile): every query value
/// read from shared memory feeds this many fused multiply-adds, and a tile is
/// `TOPK_UNITS * TOPK_ROWS_PER_UNIT` rows.
pub const TOPK_ROWS_PER_UNIT: usize = 4;

/// [`TopKKernel::Staged`]: one cube per (group of `qg` queries, block of `tiles * tile` rows),
/// `tile = units * per`. For each tile and each step of `chunk` dimensions, the cube copies
/// the group's queries and the tile's rows for those dimensions into shared memory (rows padded
/// to `pad = chunk + 1` floats, so that units reading a dimension of their rows hit different
/// banks), then unit `u` adds `chunk` products to the sums of its rows `u + j * units`
/// (j < `per`) for every query. After the last step, the sums go through the same buffer one
/// row slot (`units` rows) at a time, and unit `q` (one per query) folds them in row order into
/// its sorted top-k, as [`top_k_kernel`] does. `stage` is the shared buffer's length
/// (`max(tile * pad, qg * units)`); `steps = dim / chunk`; `qloads` and `bloads` are the loads
/// per unit of the query and row chunks. Barriers sit in uniform control flow.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn top_k_staged_kernel(
    queries: &[f32],
    base: &[f32],
    out_idx: &mut [u32],
    out_score: &mut [f32],
    nq: u32,
    rows: u32,
    #[comptime] dim: usize,
    #[comptime] k: usize,
    #[comptime] qg: usize,
    #[comptime] units: usize,
    #[comptime] per: usize,
    #[comptime] tile: usize,
    #[comptime] tiles: usize,
    #[comptime] chunk: usize,
    #[comptime] pad: usize,
    #[comptime] stage: usize,
    #[comptime] steps: usize,
    #[comptime] qloads: usize,
    #[comptime] bloads: usize,
    #[comptime] accs: usize,
) {
    let q0 = CUBE_POS_X as usize * qg;
    let bi = CUBE_POS_Y as usize;
    let blocks = CUBE_COUNT_Y as usize;
    let u = UNIT_POS_X as usize;
    let nq = nq as usize;
    let rows = rows as usize;
    let first = bi * tiles * tile;
    #[allow(clippy::manual_div_ceil)] // a runtime value in the kernel: no `div_ceil` there
    let mut ntiles = (rows - first + tile - 1) / tile;
    if ntiles > tiles {
        ntiles = tiles;
    }
    let mut sq = Shared::<[f32]>::new_slice(qg * chunk);
    let mut sm = Shared::<[f32]>::new_slice(stage);
    let mut best_s = Array::<f32>::new(k);
    let mut best_i = Array::<u32>::new(k);
    for j in 0..k {
        best_s[j] = f32::new(-3.4e38f32); // WGSL has no infinity literal
        best_i[j] = u32::MAX;
    }
    for t in 0..ntiles {
        let row0 = first + t * tile;
        let mut acc = Array::<f32>::new(accs);
        #[unroll]
        for a in 0..accs {
            acc[a] = 0.0f32;
        }
        for c in 0..steps {
            sync_cube(); // the previous step's (or tile's fold's) readers are done
            for l in 0..qloads {
                let p = l * units + u;
                if p < qg * chunk {
                    let q = q0 + p / chunk;
                    let mut v = 0.0f32;
                    if q < nq {
                        v = queries[q * dim + c * chunk + p % chunk];
                    }
                    sq[p] = v;
                }
            }
            for l in 0..bloads {
                // Neighbouring units, neighbouring floats of a row.
                let p = l * units + u;
                let r = p / chunk;
                let row = row0 + r;
                let mut v = 0.0f32;
                if row < rows {
                    v = base[row * dim + c * chunk + p % chunk];
                }
                sm[r * pad + p % chunk] = v;
            }
            sync_cube();
            for d in 0..chunk {
                let mut xs = Array::<f32>::new(per);
                #[unroll]
                for j in 0..per {
                    xs[j] = sm[(j * units + u) * pad + d];
                }
                #[unroll]
                for q in 0..qg {
                    let w = sq[q * chunk + d];
                    #[unroll]
                    for j in 0..per {
                        acc[j * qg + q] += w * xs[j];
                    }
                }
            }
        }
        #[unroll]
        for j in 0..per {
            sync_cube(); // the last step's (or the previous slot's) readers are done
            #[unroll]
            for q in 0..qg {
                sm[q * units + u] = acc[j * qg + q];
            }
            sync_cube();
            if u < qg {
                for r in 0..units {
                    let rr = row0 + j * units + r;
                    let sc = sm[u * units + r];
                    // Rows come in ascending order: an equal score never displaces an earlier row.
                    if rr < rows && sc > best_s[k - 1] {
                        let mut placed = false;
                        for jj in 0..k - 1 {
                            let i = k - 1 - jj;
                            if !placed {
                                if best_s[i - 1] < sc {
                                    best_s[i] = best_s[i - 1];
                                    best_i[i] = best_i[i - 1];
                                } else {
                                    best_s[i] = sc;
                                    best_i[i] = rr as u32;
                                    placed = true;
                                }
                            }
                        }
                        if !placed {
                            best_s[0] = sc;
                            best_i[0] = rr as u32;
                        }
                    }
                }
            }
        }
    }
    if u < qg && q0 + u < nq {
        for j in 0..k {
            let slot = ((q0 + u) * blocks + bi) * k + j;
            out_score[slot] = best_s[j];
            out_idx[slot] = best_i[j];
        }
    }
}

/// [`crate::topk::top_k_inner_product_cpu`] on the device of `client`; `k` at most
/// [`crate::topk::MAX_K`].
pub fn top_k_inner_product(
    client: &cubecl::client::Client,
    queries: &[f32],
    base: &[f32],
    dim: usize,
    k: usize,
) -> Vec<Vec<(u32, f32)>> {
    top_k_inner_product_timed(client, queries, base, dim, k).0
}

/// [`top_k_inner_product`], with where its time went.
pub fn top_k_inner_product_timed(
    client: &cubecl::client::Client,
    queries: &[f32],
    base: &[f32],
    dim: usize,
    k: usize,
) -> (Vec<Vec<(u32, f32)>>, crate::topk::TopKTimes) {
    top_k_inner_product_with(client, queries, base, dim, k, TopKKernel::Staged)
}

/// [`top_k_inner_product_timed`] with the given kernel (the benchmark runs both).
pub fn top_k_inner_product_with(
    client: &cubecl::client::Client,
    queries: &[f32],
    base: &[f32],
    dim: usize,
    k: usize,
    kernel: TopKKernel,
) -> (Vec<Vec<(u32, f32)>>, crate::topk::TopKTimes) {
    assert!(
        crate::topk::valid_input(queries, base, dim, k),
        "whole rows of dimension {dim} and k in 1..={}",
        crate::topk::MAX_K
    );
    let nq = queries.len() / dim;
    let n = base.len() / dim;
    let mut times = crate::topk::TopKTimes::default();
    if nq == 0 || n == 0 {
        return (vec![Vec::new(); nq], times);
    }
    // Both kernels scan `TOPK_UNITS * TOPK_TILES` rows per cube (the staged one in fewer,
    // taller tiles), so the host merges the same number of k-lists.
    let tile = match kernel {
        TopKKernel::Staged => TOPK_UNITS * TOPK_ROWS_PER_UNIT,
        TopKKernel::RowWise => TOPK_UNITS,
    };
    let tiles = TOPK_UNITS * TOPK_TILES / tile;
    let blocks = n.div_ceil(tile * tiles);
    let groups = nq.div_ceil(TOPK_QUERIES);
    // Dimensions staged per step: the largest of 64, 32, … that divides `dim` (the staged
    // kernel's row tile must fit WebGPU's 16 KiB of workgroup memory: at most 4).
    let widest = match kernel {
        TopKKernel::Staged => 4,
        TopKKernel::RowWise => 64,
    };
    let chunk = [64, 32, 16, 8, 4, 2, 1]
        .into_iter()
        .filter(|c| *c <= widest)
        .find(|c| dim.is_multiple_of(*c))
        .unwrap_or(1);
    let t = std::time::Instant::now();
    let qh = client.create_from_slice(f32::as_bytes(queries));
    let bh = client.create_from_slice(f32::as_bytes(base));
    // Only for the timing split: a failed sync shows again when the results are read.
    let _ = cubecl::future::block_on(client.sync());
    times.upload_s = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    let out = nq * blocks * k;
    let ih = client.empty(out * core::mem::size_of::<u32>());
    let sh = client.empty(out * core::mem::size_of::<f32>());
    match kernel {
        TopKKernel::Staged => {
            let (units, per, qg) = (TOPK_UNITS, TOPK_ROWS_PER_UNIT, TOPK_QUERIES);
            let pad = chunk + 1;
            top_k_staged_kernel::launch(
                client,
                CubeCount::Static(groups as u32, blocks as u32, 1),
                CubeDim::new_1d(units as u32),
                unsafe { BufferArg::from_raw_parts(qh, queries.len()) },
                unsafe { BufferArg::from_raw_parts(bh, base.len()) },
                unsafe { BufferArg::from_raw_parts(ih.clone(), out) },
                unsafe { BufferArg::from_raw_parts(sh.clone(), out) },
                nq as u32,
                n as u32,
                dim,
                k,
                qg,
                units,
                per,
                tile,
                tiles,
                chunk,
                pad,
                (tile * pad).max(qg * units),
                dim / chunk,
                (qg * chunk).div_ceil(units),
                tile * chunk / units,
                per * qg,
            );
        }
        TopKKernel::RowWise => top_k_kernel::launch(
            client,
            CubeCount::Static(groups as u32, blocks as u32, 1),
            CubeDim::new_1d(TOPK_UNITS as u32),
            unsafe { BufferArg::from_raw_parts(qh, queries.len()) },
            unsafe { BufferArg::from_raw_parts(bh, base.len()) },
            unsafe { BufferArg::from_raw_parts(ih.clone(), out) },
            unsafe { BufferArg::from_raw_parts(sh.clone(), out) },
            nq as u32,
            n as u32,
            dim,
            k,
            TOPK_QUERIES,
            TOPK_UNITS,
            tiles,
            chunk,
        ),
    }
    let idx = client.read_one_unchecked(ih);
    let sc = client.read_one_unchecked(sh);
    let idx = u32::from_bytes(&idx);
    let sc = f32::from_bytes(&sc);
    times.kernel_s = t.elapsed().as_secs_f64();
    let t = std::time::Instant::now();
    // Merge the blocks' lists per query (blocks × k entries): best score, then lower row.
    let lists = (0..nq)
        .map(|q| {
            let span = q * blocks * k..(q + 1) * blocks * k;
            let mut all: Vec<(u32, f32)> = idx[span.clone()]
                .iter()
                .copied()
                .zip(sc[span].iter().copied())
                .filter(|(i, _)| *i != u32::MAX)
                .collect();
            crate::topk::keep_best(&mut all, k);
            all
        })
        .collect();
    times.merge_s = t.elapsed().as_secs_f64();
    (lists, times)
}

#[cube(launch)]
fn assign_kernel(
    points: &[f32],
    centroids: &[f32],
    norms: &[f32],
    assign: &mut [u32],
    n: u32,
    k: u32,
    #[comptime] dim: usize,
    #[comptime] l2: bool,
) {
    let p = ABSOLUTE_POS;
    if p < n as usize {
        let mut best = f32::new(-3.4e38f32);
        let mut bi = 0u32;
        for c in 0..k as usize {
            let mut s = 0.0f32;
            for d in 0..dim {
                s += points[p * dim + d] * centroids[c * dim + d];
            }
            if l2 {
                s = 2.0f32 * s - norms[c];
            }
            if s > best {
                best = s;
                bi = c as u32;
            }
        }
        assign[p] = bi;
    }
}

#[cube(launch)]
fn centroid_norms_kernel(centroids: &[f32], norms: &mut [f32], k: u32, #[comptime] dim: usize) {
    let c = ABSOLUTE_POS;
    if c < k as usize {
        let mut s = 0.0f32;
        for d in 0..dim {
            let v = centroids[c * dim + d];
            s += v * v;
        }
        norms[c] = s;
    }
}

/// The update step, one cube per centroid: every unit walks the points in order and sums its
/// strided subset of the dimensions over the centroid's members (the same order as the CPU
/// reference, so results agree to rounding); the mean replaces the centroid unless it has no
/// members; with `spherical` the units reduce the norm in shared memory and normalise. The
/// barriers sit in uniform control flow (WGSL requires it): only the final write is guarded.
#[cube(launch)]
fn update_kernel(
    points: &[f32],
    assign: &[u32],
    centroids: &mut [f32],
    n: u32,
    #[comptime] dim: usize,
    #[comptime] units: usize,
    #[comptime] steps: usize,
    #[comptime] spherical: bool,
) {
    let c = CUBE_POS_X as usize;
    let u = UNIT_POS_X as usize;
    let mut partial = Shared::<[f32]>::new_slice(units);
    let mut total = Shared::<[f32]>::new_slice(1usize);
    let mut acc = Array::<f32>::new(steps);
    for s in 0..steps {
        acc[s] = 0.0f32;
    }
    let mut count = 0u32;
    for p in 0..n as usize {
        if assign[p] == c as u32 {
            count += 1;
            for s in 0..steps {
                let d = u + s * units;
                if d < dim {
                    acc[s] += points[p * dim + d];
                }
            }
        }
    }
    let mut denom = 1.0f32;
    if count > 0 {
        denom = f32::cast_from(count);
    }
    let mut ss = 0.0f32;
    for s in 0..steps {
        let v = acc[s] / denom;
        acc[s] = v;
        if u + s * units < dim {
            ss += v * v;
        }
    }
    partial[u] = ss;
    sync_cube();
    if u == 0 {
        let mut t = 0.0f32;
        for i in 0..units {
            t += partial[i];
        }
        let mut norm = t.sqrt();
        if norm < 1e-12f32 {
            norm = 1e-12f32;
        }
        total[0] = norm;
    }
    sync_cube();
    let mut scale = 1.0f32;
    if spherical {
        scale = total[0];
    }
    if count > 0 {
        for s in 0..steps {
            let d = u + s * units;
            if d < dim {
                centroids[c * dim + d] = acc[s] / scale;
            }
        }
    }
}

/// Units per cube of the update kernel (each sums `dim / UPDATE_UNITS` dimensions).
pub const UPDATE_UNITS: usize = 64;

/// [`crate::kmeans::kmeans_cpu`] entirely on the device of `client`: the points and the
/// initial centroids are uploaded once; every iteration runs the assignment kernel (one unit
/// per point), then the update kernel (one cube per centroid), with the centroid norms for L2
/// computed on the device too; only the final centroids are read back.
pub fn kmeans(
    client: &cubecl::client::Client,
    points: &[f32],
    dim: usize,
    k: usize,
    iters: usize,
    metric: crate::kmeans::Metric,
) -> Vec<f32> {
    let n = points.len() / dim;
    let init = crate::kmeans::init_centroids(points, dim, k);
    let ph = client.create_from_slice(f32::as_bytes(points));
    let ch = client.create_from_slice(f32::as_bytes(&init));
    let nh = client.empty(k * core::mem::size_of::<f32>());
    let ah = client.empty(n * core::mem::size_of::<u32>());
    let l2 = metric == crate::kmeans::Metric::L2;
    let units = 64usize;
    for _ in 0..iters {
        if l2 {
            centroid_norms_kernel::launch(
                client,
                CubeCount::Static(k.div_ceil(units) as u32, 1, 1),
                CubeDim::new_1d(units as u32),
                unsafe { BufferArg::from_raw_parts(ch.clone(), k * dim) },
                unsafe { BufferArg::from_raw_parts(nh.clone(), k) },
                k as u32,
                dim,
            );
        }
        assign_kernel::launch(
            client,
            CubeCount::Static(n.div_ceil(units) as u32, 1, 1),
            CubeDim::new_1d(units as u32),
            unsafe { BufferArg::from_raw_parts(ph.clone(), points.len()) },
            unsafe { BufferArg::from_raw_parts(ch.clone(), k * dim) },
            unsafe { BufferArg::from_raw_parts(nh.clone(), k) },
            unsafe { BufferArg::from_raw_parts(ah.clone(), n) },
            n as u32,
            k as u32,
            dim,
            l2,
        );
        update_kernel::launch(
            client,
            CubeCount::Static(k as u32, 1, 1),
            CubeDim::new_1d(UPDATE_UNITS as u32),
            unsafe { BufferArg::from_raw_parts(ph.clone(), points.len()) },
            unsafe { BufferArg::from_raw_parts(ah.clone(), n) },
            unsafe { BufferArg::from_raw_parts(ch.clone(), k * dim) },
            n as u32,
            dim,
            UPDATE_UNITS,
            dim.div_ceil(UPDATE_UNITS),
            !l2,
        );
    }
    let bytes = client.read_one_unchecked(ch);
    f32::from_bytes(&bytes).to_vec()
}

/// The cubecl client of the device `device` names (a GPU device of the encoder).
pub(crate) fn client_of(device: &burn::tensor::Device) -> Option<cubecl::client::Client> {
    use burn::backend::Cube;
    use burn::tensor::{Tensor, TensorData};
    let probe = Tensor::<1>::from_data(TensorData::new(vec![0f32], [1]), device);
    probe
        .try_into_primitive::<Cube>()
        .ok()
        .map(|t| t.client.clone())
}

#[cfg(all(test, any(feature = "wgpu", feature = "cuda")))]
mod tests {
    use super::*;

    /// Deterministic uniform values in [-1, 1) (xorshift).
    fn rng(mut seed: u64) -> impl FnMut() -> f32 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0
        }
    }

    /// The runtime the tests run on: `CIX_GPU_RUNTIME=cuda` or `wgpu` names one (a build with
    /// both features runs them once per runtime), else CUDA when this build has it and it
    /// works, then wgpu (cubecl's own default order).
    fn runtime() -> &'static str {
        match std::env::var("CIX_GPU_RUNTIME").as_deref() {
            Ok("cuda") => "cuda",
            Ok("wgpu") => "wgpu",
            _ if cfg!(feature = "cuda")
                && (cfg!(not(feature = "wgpu"))
                    || std::panic::catch_unwind(|| cubecl::Device::cuda(0).is_ok())
                        .unwrap_or(false)) =>
            {
                "cuda"
            }
            _ => "wgpu",
        }
    }

    /// The [`runtime`]'s client; `None` (the test reports itself skipped) when it has no
    /// device, unless `CIX_REQUIRE_WGPU=1` or `CIX_REQUIRE_CUDA=1`.
    fn client() -> Option<cubecl::client::Client> {
        // As the encoder does: never cubecl's default cache under the workspace's target/.
        crate::device::configure_gpu_cache();
        let device = std::panic::catch_unwind(|| match runtime() {
            "cuda" => cubecl::Device::cuda(0).map_err(|e| format!("{e:?}")),
            _ => cubecl::Device::wgpu(cubecl::device::WgpuDeviceKind::DefaultDevice)
                .map_err(|e| format!("{e:?}")),
        })
        .map_err(|_| "the runtime panicked while starting".to_string())
        .and_then(|d| d);
        let required = ["CIX_REQUIRE_WGPU", "CIX_REQUIRE_CUDA"]
            .iter()
            .any(|v| std::env::var(v).as_deref() == Ok("1"));
        match device.and_then(|d| {
            std::panic::catch_unwind(move || d.client())
                .map_err(|_| "the runtime panicked while starting".to_string())
        }) {
            Ok(c) => Some(c),
            Err(e) if !required => {
                eprintln!("SKIPPED: no GPU device ({e})");
                None
            }
            Err(e) => panic!("no GPU device ({e}) and CIX_REQUIRE_WGPU/CUDA=1"),
        }
    }

    /// The kernel equals the CPU reference on wgpu (lavapipe in CI): random hidden states,
    /// ragged masks, a row without tokens, hidden sizes below, at and above the unit count.
    #[test]
    fn pool_normalize_matches_cpu_reference() {
        let Some(client) = client() else { return };
        let mut rnd = rng(0x9E37_79B9_7F4A_7C15u64);
        for (rows, tokens, hidden) in [
            (32, 256, 384),
            (3, 5, 7),
            (4, 17, 128),
            (5, 33, 384),
            (2, 9, 300),
        ] {
            let x: Vec<f32> = (0..rows * tokens * hidden).map(|_| rnd()).collect();
            let mut mask = vec![0f32; rows * tokens];
            for r in 0..rows {
                let len = if r == 1 { 0 } else { 1 + r * 3 % tokens };
                for t in 0..len.min(tokens) {
                    mask[r * tokens + t] = 1.0;
                }
            }
            let want = crate::pool::pool_normalize_cpu(&x, &mask, rows, tokens, hidden);
            let got = pool_normalize(&client, &x, &mask, rows, tokens, hidden);
            assert_eq!(got.len(), want.len());
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                worst < 1e-5,
                "{rows}×{tokens}×{hidden}: max abs diff {worst}"
            );
        }
    }

    /// burn's device on the [`runtime`] (reached only after [`client`] found one).
    fn burn_device() -> burn::tensor::Device {
        #[cfg(feature = "cuda")]
        if runtime() == "cuda" {
            return burn::tensor::Device::cuda(0);
        }
        #[cfg(feature = "wgpu")]
        if runtime() == "wgpu" {
            return burn::tensor::Device::wgpu(burn::tensor::DeviceKind::DefaultDevice);
        }
        unreachable!("client() found no {} device", runtime())
    }

    /// The encoder's path: the kernel launched on burn's own cube tensors (no copy to or from
    /// the host besides the final read), for f32 and f16 hidden states.
    #[test]
    fn pool_normalize_runs_on_burn_tensors() {
        use burn::tensor::{DType, Tensor, TensorData};
        if client().is_none() {
            return;
        }
        let device = burn_device();
        let (rows, tokens, hidden) = (3, 5, 384);
        let x: Vec<f32> = (0..rows * tokens * hidden)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let mut mask = vec![0f32; rows * tokens];
        for (r, len) in [(0usize, 5usize), (1, 2), (2, 0)] {
            mask[r * tokens..r * tokens + len].fill(1.0);
        }
        let want = crate::pool::pool_normalize_cpu(&x, &mask, rows, tokens, hidden);
        let xt = Tensor::<3>::from_data(TensorData::new(x, [rows, tokens, hidden]), &device);
        let mt = Tensor::<2>::from_data(TensorData::new(mask, [rows, tokens]), &device);
        for (dtype, tol) in [(DType::F32, 1e-5f32), (DType::F16, 2e-3)] {
            if !device.supports_dtype(dtype) {
                continue;
            }
            let got = pool_normalize_tensor(&xt.clone().cast(dtype), &mt)
                .expect("cube tensors take the kernel path");
            let got = got.into_data().try_into_vec::<f32>().unwrap();
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < tol, "{dtype:?}: max abs diff {worst}");
        }
        // Shapes that do not fit are left to the caller (burn ops).
        assert!(pool_normalize_tensor(&xt, &mt.narrow(1, 0, 4)).is_none());
    }

    /// The top-k kernel returns the reference's rows (ties by index) with its scores, for
    /// fewer rows than k, duplicate rows (ties) and k from 1 to the maximum.
    #[test]
    fn top_k_matches_cpu_reference() {
        let Some(client) = client() else { return };
        let mut rnd = rng(0x2545_F491_4F6C_DD1Du64);
        for (nq, n, dim, k) in [
            (3, 8192, 384, 10),
            (2, 20000, 384, 32),
            (3, 5, 4, 10),
            (7, 1000, 16, 10),
            (4, 3000, 48, 32),
            (2, 257, 8, 1),
            // Several query groups (the last partial) over several row blocks (the last
            // partial), an odd dimension (staged one at a time).
            (37, 2 * TOPK_UNITS * TOPK_TILES + 300, 20, 10),
            (17, 700, 7, 5),
            // The staged kernel's cases: two dimensions per step, rows over three tiles (the
            // last partial), fewer queries than a group.
            (5, 2 * TOPK_UNITS * TOPK_ROWS_PER_UNIT + 77, 6, 7),
        ] {
            let q: Vec<f32> = (0..nq * dim).map(|_| rnd()).collect();
            let mut b: Vec<f32> = (0..n * dim).map(|_| rnd()).collect();
            if n > 10 {
                // An exact duplicate row: equal scores, ordered by row.
                let row: Vec<f32> = b[3 * dim..4 * dim].to_vec();
                b[9 * dim..10 * dim].copy_from_slice(&row);
            }
            let want = crate::topk::top_k_inner_product_cpu(&q, &b, dim, k);
            for kernel in [TopKKernel::Staged, TopKKernel::RowWise] {
                let (got, _) = top_k_inner_product_with(&client, &q, &b, dim, k, kernel);
                assert_eq!(got.len(), want.len());
                for (w, g) in want.iter().zip(&got) {
                    let wi: Vec<u32> = w.iter().map(|x| x.0).collect();
                    let gi: Vec<u32> = g.iter().map(|x| x.0).collect();
                    assert_eq!(gi, wi, "{kernel:?} {nq}×{n}×{dim} k={k}");
                    for (a, b) in w.iter().zip(g) {
                        assert!((a.1 - b.1).abs() < 1e-4, "{kernel:?} {a:?} {b:?}");
                    }
                }
            }
        }
    }

    /// k-means on the device ends where the CPU reference ends (same init, same updates), for
    /// both metrics: assignments identical, centroids within 1e-4; and an empty cluster (two
    /// identical initial centroids: ties go to the lower one) keeps its centroid on both.
    #[test]
    fn kmeans_matches_cpu_reference() {
        let Some(client) = client() else { return };
        let mut rnd = rng(0x1357_9BDF_2468_ACE0u64);
        let (n, dim, k) = (3000, 24, 40);
        // Clustered unit vectors.
        let centres: Vec<f32> = (0..k * dim).map(|_| rnd()).collect();
        let mut pts = Vec::with_capacity(n * dim);
        for i in 0..n {
            let c = (i * 7) % k;
            let mut v: Vec<f32> = (0..dim)
                .map(|d| centres[c * dim + d] + 0.2 * rnd())
                .collect();
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter_mut().for_each(|x| *x /= norm);
            pts.extend(v);
        }
        for m in [
            crate::kmeans::Metric::InnerProduct,
            crate::kmeans::Metric::L2,
        ] {
            let want = crate::kmeans::kmeans_cpu(&pts, dim, k, 6, m);
            let got = kmeans(&client, &pts, dim, k, 6, m);
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-4, "{m:?}: max centroid difference {worst}");
            assert_eq!(
                crate::kmeans::assign_cpu(&pts, &got, dim, m),
                crate::kmeans::assign_cpu(&pts, &want, dim, m)
            );
        }
        // Embedding-sized: 12,000 × 384 (buffers past 2^21 floats), 100 centroids, 2 rounds.
        let (n, dim, k) = (12_000, 384, 100);
        let big: Vec<f32> = (0..n * dim).map(|_| rnd()).collect();
        let want = crate::kmeans::kmeans_cpu(&big, dim, k, 2, crate::kmeans::Metric::InnerProduct);
        let got = kmeans(
            &client,
            &big,
            dim,
            k,
            2,
            crate::kmeans::Metric::InnerProduct,
        );
        let worst = got
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-3, "12000×384: max centroid difference {worst}");
        // Points 0 and 2 (the initial centroids for k = 2, n = 4) are equal: in the first
        // iteration centroid 1 gets no points and must stay where it started.
        let pts = [0.6f32, 0.8, 0.0, 1.0, 0.6, 0.8, 1.0, 0.0];
        for m in [
            crate::kmeans::Metric::InnerProduct,
            crate::kmeans::Metric::L2,
        ] {
            let want = crate::kmeans::kmeans_cpu(&pts, 2, 2, 1, m);
            let got = kmeans(&client, &pts, 2, 2, 1, m);
            assert_eq!(
                &want[2..],
                &[0.6, 0.8],
                "{m:?}: reference moved the empty centroid"
            );
            let worst = got
                .iter()
                .zip(&want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-6, "{m:?}: {got:?} vs {want:?}");
        }
    }
}
