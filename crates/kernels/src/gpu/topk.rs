//! The exact top-k kernels ([`top_k_inner_product`]; reference
//! [`crate::topk::top_k_inner_product_cpu`]): [`TopKKernel::Staged`], the default, and
//! [`TopKKernel::RowWise`], the first one, kept as the benchmark's peer. Tested in the parent
//! module's tests, on lavapipe in CI.

use cubecl::prelude::*;

use crate::topk::TopKKernel;

/// Units per cube of the top-k kernel, one base row each per tile.
pub const TOPK_UNITS: usize = 128;
/// Queries per cube of the top-k kernel: each base row a cube reads is scored against this many
/// queries (the row is read from memory once per group instead of once per query).
pub const TOPK_QUERIES: usize = 16;
/// Tiles of [`TOPK_UNITS`] rows per cube: a cube scans `TOPK_UNITS * TOPK_TILES` rows, so a
/// million rows make ~120 row blocks per query group; the host merges the blocks' k-lists
/// (queries × blocks × k entries read back).
pub const TOPK_TILES: usize = 64;

/// Inserts `(sc, row)` into the sorted k-list `best_s` / `best_i` (best first) when it beats
/// the last entry; an equal score stays below the entries already there. Both kernels' fold.
#[cube]
fn push_best(
    best_s: &mut Array<f32>,
    best_i: &mut Array<u32>,
    sc: f32,
    row: u32,
    #[comptime] k: usize,
) {
    if sc > best_s[k - 1] {
        let mut placed = false;
        for jj in 0..k - 1 {
            let j = k - 1 - jj;
            if !placed {
                if best_s[j - 1] < sc {
                    best_s[j] = best_s[j - 1];
                    best_i[j] = best_i[j - 1];
                } else {
                    best_s[j] = sc;
                    best_i[j] = row;
                    placed = true;
                }
            }
        }
        if !placed {
            best_s[0] = sc;
            best_i[0] = row;
        }
    }
}

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
                if rr < rows {
                    push_best(&mut best_s, &mut best_i, sc, rr as u32, k);
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
                    if rr < rows {
                        push_best(&mut best_s, &mut best_i, sc, rr as u32, k);
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
