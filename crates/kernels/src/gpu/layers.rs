//! The encoder's element-wise tails as one kernel each on a GPU, after a matmul without bias:
//!
//! - [`bias_gelu_tensor`]: `GELU(y + b)` (erf or tanh form), for the feed-forward input.
//! - [`bias_residual_norm_tensor`]: `LayerNorm(y + b + residual)` with γ and β, for both
//!   sub-layer outputs: one cube per row, the row's mean and variance reduced in shared memory
//!   (two passes over values held in registers, as burn's composite computes them).
//!
//! burn's cubecl backends run these as separate kernels without the `fusion` feature (which
//! the workspace leaves off): the bias add, the residual add and nine for a LayerNorm (means,
//! centring, variance, square root, division, γ, β), each a pass over the activations and a
//! launch. Arithmetic is f32 whatever the storage type. [`fused`] says which of this module's
//! and [`attention`](mod@super::attention)'s kernels the encoder uses.

use burn::tensor::Tensor;
use cubecl::prelude::*;

use super::elem_of;

/// Units per cube of the row kernels (a row of `hidden` values is spread over them).
pub const NORM_UNITS: usize = 128;
const _: () = assert!(NORM_UNITS.is_power_of_two()); // the reduction halves it
/// Units per cube of the element-wise kernel.
const ELEMENT_UNITS: usize = 256;
/// Largest cube count along one axis that every backend takes.
const MAX_CUBES: usize = 65_535;

/// The encoder's fused GPU kernels, each of which can be turned on or off (to measure it
/// against burn's ops): `CIX_FUSED` is a comma list of `norm`, `gelu`, `flash-unit` and
/// `attention`, or `none`; read once per process (a name it does not know is reported on
/// stderr and ignored). The default is `norm,gelu,flash-unit`, chosen on lavapipe (a CPU:
/// each was faster there than burn's ops, and parity held) until `scripts/gpu-bench.sh run
/// fused` times them on a GPU. With both attention kernels named, `attention` wins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fused {
    /// Our attention kernel ([`super::attention`](mod@super::attention)).
    Attention,
    /// bias + residual + LayerNorm.
    Norm,
    /// bias + GELU.
    Gelu,
    /// burn's flash attention, one unit per row (cubek's `FlashUnit`).
    FlashUnit,
}

const FUSED_NAMES: [&str; 4] = ["attention", "norm", "gelu", "flash-unit"];

/// Whether the encoder uses the fused kernel `k` (see [`Fused`]).
pub fn fused(k: Fused) -> bool {
    static ON: std::sync::OnceLock<[bool; 4]> = std::sync::OnceLock::new();
    let on = ON.get_or_init(|| {
        let (on, unknown) = parse_fused(std::env::var("CIX_FUSED").ok().as_deref());
        if !unknown.is_empty() {
            eprintln!(
                "CIX_FUSED: ignoring {} (known: {}, or none)",
                unknown.join(", "),
                FUSED_NAMES.join(", ")
            );
        }
        on
    });
    on[k as usize]
}

/// The kernels `v` turns on, and the names in it that are not kernels.
fn parse_fused(v: Option<&str>) -> ([bool; 4], Vec<String>) {
    let v = v.unwrap_or("").trim().to_ascii_lowercase();
    if v.is_empty() {
        return ([false, true, true, true], Vec::new());
    }
    let mut on = [false; 4];
    let mut unknown = Vec::new();
    for name in v.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        match FUSED_NAMES.iter().position(|&k| k == name) {
            Some(i) => on[i] = true,
            None if name == "none" => {}
            None => unknown.push(name.to_string()),
        }
    }
    (on, unknown)
}

#[cube(launch)]
fn bias_gelu_kernel<F: Float>(
    y: &[F],
    bias: &[F],
    out: &mut [F],
    n: u32,
    #[comptime] cols: usize,
    #[comptime] tanh: bool,
    #[comptime] per: usize,
    #[define(F)] _dtype: ElemType,
) {
    let n = n as usize;
    let stride = CUBE_COUNT_X as usize * CUBE_DIM_X as usize;
    for k in 0..per {
        let i = ABSOLUTE_POS + k * stride;
        if i < n {
            let v = f32::cast_from(y[i]) + f32::cast_from(bias[i % cols]);
            // `tanh` is known when the kernel is compiled: one branch is generated.
            let g = if tanh {
                let inner = 0.797_884_6f32 * (v + 0.044_715f32 * v * v * v);
                0.5f32 * v * (1.0f32 + inner.tanh())
            } else {
                0.5f32 * v * (1.0f32 + Erf::erf(v * 0.707_106_77f32))
            };
            out[i] = F::cast_from(g);
        }
    }
}

/// The sum of every unit's `value` (`units` of them, a power of two, `levels` its log2),
/// returned to every unit: a tree over `partial` in shared memory. Every unit of the cube
/// calls it (it holds barriers); `partial` can be reused when it returns.
#[cube]
fn block_sum(
    partial: &mut Shared<[f32]>,
    value: f32,
    #[comptime] units: usize,
    #[comptime] levels: usize,
) -> f32 {
    let u = UNIT_POS_X as usize;
    partial[u] = value;
    sync_cube();
    #[unroll]
    for lvl in 0..levels {
        let half = units >> (lvl + 1);
        if u < half {
            partial[u] += partial[u + half];
        }
        sync_cube();
    }
    let sum = partial[0];
    sync_cube(); // every unit has read the sum before the slots are written again
    sum
}

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn bias_residual_norm_kernel<F: Float>(
    y: &[F],
    bias: &[F],
    residual: &[F],
    gamma: &[F],
    beta: &[F],
    out: &mut [F],
    eps: f32,
    #[comptime] cols: usize,
    #[comptime] units: usize,
    #[comptime] per: usize,
    #[comptime] levels: usize,
    #[define(F)] _dtype: ElemType,
) {
    let r = CUBE_POS_X as usize;
    let u = UNIT_POS_X as usize;
    let mut partial = Shared::<[f32]>::new_slice(units);
    let mut v = Array::<f32>::new(per);
    let mut s = 0.0f32;
    #[unroll]
    for k in 0..per {
        let c = u + k * units;
        let mut x = 0.0f32;
        if c < cols {
            x = f32::cast_from(y[r * cols + c])
                + f32::cast_from(bias[c])
                + f32::cast_from(residual[r * cols + c]);
        }
        v[k] = x;
        s += x;
    }
    let mean = block_sum(&mut partial, s, units, levels) / f32::cast_from(cols as u32);
    let mut ss = 0.0f32;
    #[unroll]
    for k in 0..per {
        if u + k * units < cols {
            let d = v[k] - mean;
            ss += d * d;
        }
    }
    let var = block_sum(&mut partial, ss, units, levels) / f32::cast_from(cols as u32);
    let inv = 1.0f32 / (var + eps).sqrt();
    #[unroll]
    for k in 0..per {
        let c = u + k * units;
        if c < cols {
            let g = f32::cast_from(gamma[c]);
            let b = f32::cast_from(beta[c]);
            out[r * cols + c] = F::cast_from((v[k] - mean) * inv * g + b);
        }
    }
}

type Prim = <burn::backend::Cube as burn::backend::BackendTypes>::FloatTensorPrimitive;

/// The cube primitives of `ts`, if all are contiguous float tensors of one type on one device.
fn primitives<const N: usize>(ts: [&Tensor<2>; N], ones: &[&Tensor<1>]) -> Option<Vec<Prim>> {
    use burn::backend::Cube;
    let mut out = Vec::with_capacity(N + ones.len());
    for t in ts {
        out.push(t.clone().try_into_primitive::<Cube>().ok()?);
    }
    for t in ones {
        out.push((*t).clone().try_into_primitive::<Cube>().ok()?);
    }
    let first = out.first()?;
    let same = out
        .iter()
        .all(|p| p.is_contiguous() && p.dtype == first.dtype && p.device == first.device);
    (same && elem_of(first.dtype).is_some()).then_some(out)
}

/// `out`, a buffer of `like`'s type and device, as a `shape` tensor.
pub(super) fn wrap(like: &Prim, shape: [usize; 2], out: cubecl::server::Handle) -> Tensor<2> {
    use burn::backend::Cube;
    let p = Prim::new_contiguous(
        like.client.clone(),
        like.device.clone(),
        burn::tensor::Shape::new(shape),
        out,
        like.dtype,
    );
    Tensor::from_primitive::<Cube>(p)
}

/// `GELU(y + bias)` (the tanh form with `tanh`), `y` `[rows, cols]` and `bias` `[cols]` of one
/// float type on a cubecl device; the result, of that type, stays there. `None` when the
/// tensors do not fit; the caller then uses burn's ops.
pub(crate) fn bias_gelu_tensor(y: &Tensor<2>, bias: &Tensor<1>, tanh: bool) -> Option<Tensor<2>> {
    let [rows, cols] = y.dims();
    if bias.dims() != [cols] || rows == 0 || cols == 0 {
        return None;
    }
    let n = rows.checked_mul(cols).filter(|&n| n <= u32::MAX as usize)?;
    let p = primitives([y], &[bias])?;
    let elem = elem_of(p[0].dtype)?;
    let client = p[0].client.clone();
    let out = client.empty(n * elem.size());
    let cubes = n.div_ceil(ELEMENT_UNITS).min(MAX_CUBES);
    bias_gelu_kernel::launch(
        &client,
        CubeCount::Static(cubes as u32, 1, 1),
        CubeDim::new_1d(ELEMENT_UNITS as u32),
        unsafe { BufferArg::from_raw_parts(p[0].handle.clone(), n) },
        unsafe { BufferArg::from_raw_parts(p[1].handle.clone(), cols) },
        unsafe { BufferArg::from_raw_parts(out.clone(), n) },
        n as u32,
        cols,
        tanh,
        n.div_ceil(cubes * ELEMENT_UNITS),
        elem,
    );
    Some(wrap(&p[0], [rows, cols], out))
}

/// `LayerNorm(y + bias + residual) · γ + β` over the last dimension (ε `eps`), `y` and
/// `residual` `[rows, cols]`, the rest `[cols]`, of one float type on a cubecl device; the
/// result stays there. `None` when the tensors do not fit.
pub(crate) fn bias_residual_norm_tensor(
    y: &Tensor<2>,
    bias: &Tensor<1>,
    residual: &Tensor<2>,
    gamma: &Tensor<1>,
    beta: &Tensor<1>,
    eps: f64,
) -> Option<Tensor<2>> {
    let [rows, cols] = y.dims();
    if residual.dims() != [rows, cols]
        || [bias, gamma, beta].iter().any(|t| t.dims() != [cols])
        || rows == 0
        || rows > MAX_CUBES
        || cols == 0
        || cols > 64 * NORM_UNITS
    {
        return None;
    }
    let p = primitives([y, residual], &[bias, gamma, beta])?;
    let elem = elem_of(p[0].dtype)?;
    let client = p[0].client.clone();
    let out = client.empty(rows * cols * elem.size());
    bias_residual_norm_kernel::launch(
        &client,
        CubeCount::Static(rows as u32, 1, 1),
        CubeDim::new_1d(NORM_UNITS as u32),
        unsafe { BufferArg::from_raw_parts(p[0].handle.clone(), rows * cols) },
        unsafe { BufferArg::from_raw_parts(p[2].handle.clone(), cols) },
        unsafe { BufferArg::from_raw_parts(p[1].handle.clone(), rows * cols) },
        unsafe { BufferArg::from_raw_parts(p[3].handle.clone(), cols) },
        unsafe { BufferArg::from_raw_parts(p[4].handle.clone(), cols) },
        unsafe { BufferArg::from_raw_parts(out.clone(), rows * cols) },
        eps as f32,
        cols,
        NORM_UNITS,
        cols.div_ceil(NORM_UNITS),
        NORM_UNITS.trailing_zeros() as usize,
        elem,
    );
    Some(wrap(&p[0], [rows, cols], out))
}

#[cfg(test)]
mod tests {
    use super::parse_fused;

    #[test]
    fn fused_switch() {
        let default = ([false, true, true, true], Vec::<String>::new());
        assert_eq!(parse_fused(None), default);
        assert_eq!(parse_fused(Some(" ")), default);
        assert_eq!(parse_fused(Some("none")).0, [false; 4]);
        assert_eq!(
            parse_fused(Some("Attention, gelu")).0,
            [true, false, true, false]
        );
        assert_eq!(
            parse_fused(Some("norm,flash-unit")).0,
            [false, true, false, true]
        );
        // Unknown names are returned (and reported by `fused`), never taken for a kernel.
        let (on, unknown) = parse_fused(Some("norm,flash_unit,all"));
        assert_eq!(on, [false, true, false, false]);
        assert_eq!(unknown, ["flash_unit", "all"]);
    }
}
