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
//! - [`attention`]: the encoder's multi-head self-attention in one kernel (flash-style online
//!   softmax over keys staged in shared memory, Q/K/V read in place, no score matrix, no
//!   mask): see [`attention`](mod@attention).
//! - [`layers`]: the element-wise tails after the matmuls, bias + GELU and bias + residual +
//!   LayerNorm, one kernel each.

use cubecl::ir::FloatKind;
use cubecl::prelude::*;

pub mod attention;
pub mod layers;
mod topk;

pub use crate::topk::TopKKernel;
pub use attention::{attention, ATTN_KEYS, ATTN_MAX_HEAD_DIM, ATTN_QUERIES};
pub use topk::{
    top_k_inner_product, top_k_inner_product_timed, top_k_inner_product_with, TOPK_QUERIES,
    TOPK_ROWS_PER_UNIT, TOPK_TILES, TOPK_UNITS,
};

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

/// The cubecl element type of a float storage type the kernels take (f32, f16, bf16).
fn elem_of(dtype: burn::tensor::DType) -> Option<ElemType> {
    use burn::tensor::DType;
    match dtype {
        DType::F32 => Some(F32),
        DType::F16 => Some(ElemType::Float(FloatKind::F16)),
        DType::BF16 => Some(ElemType::Float(FloatKind::BF16)),
        _ => None,
    }
}

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
    let elem = elem_of(xt.dtype)?;
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

    /// The largest absolute difference between two equally long slices.
    fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
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
            let worst = max_abs_diff(&got, &want);
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
            let worst = max_abs_diff(&got, &want);
            assert!(worst < tol, "{dtype:?}: max abs diff {worst}");
        }
        // Shapes that do not fit are left to the caller (burn ops).
        assert!(pool_normalize_tensor(&xt, &mt.narrow(1, 0, 4)).is_none());
    }

    /// The fused attention equals the host kernel (itself tested against a naive softmax):
    /// ragged lengths (a full row, one of a single token, one of none), sequences over one key
    /// tile and one query block and shorter than either, head sizes of MiniLM (32) and BERT-base
    /// (64) and odd ones; padded rows are zero on both.
    #[test]
    fn attention_matches_cpu_reference() {
        let Some(client) = client() else { return };
        let mut rnd = rng(0x6A09_E667_F3BC_C908u64);
        for (lengths, seq, heads, dh) in [
            (vec![7usize, 2, 5, 1], 7usize, 3usize, 4usize),
            (vec![130, 64, 1, 0, 97], 130, 12, 32),
            (vec![256, 200], 256, 2, 64),
            (vec![33, 31, 32], 33, 5, 3),
            (vec![5], 5, 1, 128),
        ] {
            let n = lengths.len() * seq * 3 * heads * dh;
            // Large logits too: the online softmax must rescale, not overflow.
            let qkv: Vec<f32> = (0..n).map(|_| rnd() * 4.0).collect();
            let want = crate::cpu::attention(&qkv, &lengths, seq, heads, dh);
            let got = attention(&client, &qkv, &lengths, seq, heads, dh);
            assert_eq!(got.len(), want.len());
            let worst = max_abs_diff(&got, &want);
            assert!(
                worst < 1e-4,
                "{lengths:?} seq {seq}, {heads}×{dh}: max abs diff {worst}"
            );
        }
    }

    /// The encoder's path: the kernel on burn's cube tensors, f32 and f16, against the host
    /// kernel; shapes it cannot take are left to burn's attention.
    #[test]
    fn attention_runs_on_burn_tensors() {
        use burn::tensor::{DType, Tensor, TensorData};
        if client().is_none() {
            return;
        }
        let device = burn_device();
        let (lengths, seq, heads, dh) = (vec![9usize, 3, 0], 9usize, 12usize, 32usize);
        let n = lengths.len() * seq * 3 * heads * dh;
        let qkv: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0)
            .collect();
        let want = crate::cpu::attention(&qkv, &lengths, seq, heads, dh);
        let t = Tensor::<2>::from_data(
            TensorData::new(qkv, [lengths.len() * seq, 3 * heads * dh]),
            &device,
        );
        for (dtype, tol) in [(DType::F32, 1e-5f32), (DType::F16, 5e-3)] {
            if !device.supports_dtype(dtype) {
                continue;
            }
            let got = attention::attention_tensor(&t.clone().cast(dtype), &lengths, seq, heads, dh)
                .expect("cube tensors take the kernel path");
            assert_eq!(got.dims(), [lengths.len() * seq, heads * dh]);
            let got = got
                .cast(DType::F32)
                .into_data()
                .try_into_vec::<f32>()
                .unwrap();
            let worst = max_abs_diff(&got, &want);
            assert!(worst < tol, "{dtype:?}: max abs diff {worst}");
        }
        // A length past seq, a head too wide, a shape that does not match: burn's path.
        assert!(attention::attention_tensor(&t, &[10, 3, 0], seq, heads, dh).is_none());
        assert!(attention::attention_tensor(&t, &lengths, seq, 2, 192).is_none());
        assert!(attention::attention_tensor(&t, &lengths, seq, heads, 16).is_none());
    }

    /// burn's flash attention with our fixed strategy (one unit per row), on the encoder's
    /// tensors and key mask (built as `Bert::forward_device` builds them), f32 and f16, against
    /// the host kernel on the real rows; tensors of burn's flex backend are declined.
    #[test]
    fn flash_attention_matches_cpu_reference() {
        use burn::tensor::{Bool, DType, Int, Tensor, TensorData};
        if client().is_none() {
            return;
        }
        let device = burn_device();
        let (lengths, seq, heads, dh) = (vec![9usize, 3, 1, 7], 9usize, 12usize, 32usize);
        let b = lengths.len();
        let n = b * seq * 3 * heads * dh;
        let mut rnd = rng(0x3C6E_F372_FE94_F82Bu64);
        let qkv: Vec<f32> = (0..n).map(|_| rnd() * 2.0).collect();
        let want = crate::cpu::attention(&qkv, &lengths, seq, heads, dh);
        let t = Tensor::<2>::from_data(TensorData::new(qkv, [b * seq, 3 * heads * dh]), &device);
        let t = t.reshape([b, seq, 3, heads, dh]).permute([2, 0, 3, 1, 4]);
        let lens: Vec<i64> = lengths.iter().map(|&l| l as i64).collect();
        let lens = Tensor::<1, Int>::from_data(TensorData::new(lens, [b]), &device)
            .reshape([b, 1])
            .expand([b, seq]);
        let pos = Tensor::<1, Int>::arange(0..seq as i64, &device)
            .reshape([1, seq])
            .expand([b, seq]);
        let mask: Tensor<4, Bool> = pos
            .lower(lens)
            .bool_not()
            .reshape([b, 1, 1, seq])
            .expand([b, 1, seq, seq]);
        for (dtype, tol) in [(DType::F32, 1e-4f32), (DType::F16, 1e-2)] {
            if !device.supports_dtype(dtype) {
                continue;
            }
            let part = |i| t.clone().narrow(0, i, 1).squeeze_dim::<4>(0).cast(dtype);
            let (q, k, v) = (part(0), part(1), part(2));
            let got = attention::flash_tensor(&q, &k, &v, Some(&mask))
                .unwrap_or_else(|e| panic!("flash attention failed: {e}"))
                .expect("cube tensors take the kernel path");
            let got = got
                .swap_dims(1, 2)
                .reshape([b * seq, heads * dh])
                .cast(DType::F32)
                .into_data()
                .try_into_vec::<f32>()
                .unwrap();
            // Padded query rows are not compared: burn fills them, the host kernel zeroes them.
            let h = heads * dh;
            let mut worst = 0f32;
            for (bi, &len) in lengths.iter().enumerate() {
                let rows = (bi * seq * h)..((bi * seq + len) * h);
                worst = worst.max(max_abs_diff(&got[rows.clone()], &want[rows]));
            }
            assert!(worst < tol, "{dtype:?}: max abs diff {worst}");
        }
        // burn's flex backend (the portable kernels): declined, not an error.
        let flex = burn::tensor::Device::flex();
        let x = Tensor::<4>::zeros([1, 1, 2, 4], &flex);
        assert!(matches!(
            attention::flash_tensor(&x, &x, &x, None),
            Ok(None)
        ));
    }

    /// The fused element-wise tails against host references, f32 and f16: bias + GELU (both
    /// forms, against the host kernel `cpu::bias_gelu`) and bias + residual + LayerNorm
    /// (against an f64 computation), for MiniLM's widths and odd ones below and above the
    /// kernel's unit count; shapes they cannot take are left to burn's ops.
    #[test]
    fn fused_layers_match_host_references() {
        use burn::tensor::{DType, Tensor, TensorData};
        if client().is_none() {
            return;
        }
        let device = burn_device();
        let mut rnd = rng(0xBB67_AE85_84CA_A73Bu64);
        let up1 =
            |v: &[f32]| Tensor::<1>::from_data(TensorData::new(v.to_vec(), [v.len()]), &device);
        let up2 = |v: &[f32], r: usize, c: usize| {
            Tensor::<2>::from_data(TensorData::new(v.to_vec(), [r, c]), &device)
        };
        let read = |t: Tensor<2>| {
            t.cast(DType::F32)
                .into_data()
                .try_into_vec::<f32>()
                .unwrap()
        };
        for (rows, cols) in [(37usize, 1536usize), (5, 384), (3, 7), (2, 300), (1, 1000)] {
            let y: Vec<f32> = (0..rows * cols).map(|_| rnd() * 3.0).collect();
            let res: Vec<f32> = (0..rows * cols).map(|_| rnd() * 3.0 + 1.0).collect();
            let bias: Vec<f32> = (0..cols).map(|_| rnd()).collect();
            let gamma: Vec<f32> = (0..cols).map(|_| 1.0 + rnd() * 0.5).collect();
            let beta: Vec<f32> = (0..cols).map(|_| rnd() * 0.1).collect();
            let eps = 1e-12f64;
            let mut norm_want = vec![0f32; rows * cols];
            for r in 0..rows {
                let v: Vec<f64> = (0..cols)
                    .map(|c| (y[r * cols + c] + bias[c] + res[r * cols + c]) as f64)
                    .collect();
                let mean = v.iter().sum::<f64>() / cols as f64;
                let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / cols as f64;
                for c in 0..cols {
                    norm_want[r * cols + c] = ((v[c] - mean) / (var + eps).sqrt() * gamma[c] as f64
                        + beta[c] as f64) as f32;
                }
            }
            for (dtype, tol_gelu, tol_norm) in
                [(DType::F32, 1e-5f32, 1e-4f32), (DType::F16, 2e-2, 2e-2)]
            {
                if !device.supports_dtype(dtype) {
                    continue;
                }
                let cast2 = |v: &[f32]| up2(v, rows, cols).cast(dtype);
                let cast1 = |v: &[f32]| up1(v).cast(dtype);
                for tanh in [false, true] {
                    let mut want = y.clone();
                    crate::cpu::bias_gelu(&mut want, &bias, tanh);
                    let got = layers::bias_gelu_tensor(&cast2(&y), &cast1(&bias), tanh)
                        .expect("cube tensors take the kernel path");
                    let w = max_abs_diff(&read(got), &want);
                    assert!(
                        w < tol_gelu * 4.0,
                        "gelu {rows}×{cols} {dtype:?} tanh {tanh}: {w}"
                    );
                }
                let got = layers::bias_residual_norm_tensor(
                    &cast2(&y),
                    &cast1(&bias),
                    &cast2(&res),
                    &cast1(&gamma),
                    &cast1(&beta),
                    eps,
                )
                .expect("cube tensors take the kernel path");
                let w = max_abs_diff(&read(got), &norm_want);
                assert!(w < tol_norm, "norm {rows}×{cols} {dtype:?}: {w}");
            }
        }
        // Mismatched shapes and mixed types: burn's ops.
        let y = up2(&[1.0; 12], 3, 4);
        assert!(layers::bias_gelu_tensor(&y, &up1(&[0.0; 3]), false).is_none());
        assert!(layers::bias_residual_norm_tensor(
            &y,
            &up1(&[0.0; 4]),
            &up2(&[1.0; 8], 2, 4),
            &up1(&[1.0; 4]),
            &up1(&[0.0; 4]),
            1e-5
        )
        .is_none());
        if device.supports_dtype(DType::F16) {
            assert!(
                layers::bias_gelu_tensor(&y.cast(DType::F16), &up1(&[0.0; 4]), false).is_none()
            );
        }
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
            let worst = max_abs_diff(&got, &want);
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
        let worst = max_abs_diff(&got, &want);
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
            let worst = max_abs_diff(&got, &want);
            assert!(worst < 1e-6, "{m:?}: {got:?} vs {want:?}");
        }
    }
}
