//! The single-query path on the CPU: the encoder's linear layers over a few rows (one query of
//! ~10 tokens) with half-precision weights.
//!
//! Why: for one short query the f32 matmuls stream every weight of the model once per call
//! (42.5 MB for MiniLM-L6's six layers) to use it for a dozen rows, so a query's embedding
//! was bound by memory bandwidth (8.7 ms p50 on the 2-core VM, 60% of it in gemm's
//! micro-kernel). Here the weights are kept a second time as IEEE half floats (21 MB, which an
//! L3 of 32 MB holds between queries), converted to f32 in registers (`vcvtph2ps`) and
//! accumulated in f32 with fused multiply-adds. The half copy is made on first use.
//!
//! Only queries take this path ([`crate::Encoder::embed_query`]): document and memory vectors,
//! which are stored, keep the f32 weights, so the same input gives the same segment bytes
//! whatever the batch sizes. A query's vector differs from the f32 one by the rounding of
//! the weights (cosine ≥ 0.9999 to the f32 vector on the parity texts, tested).
//!
//! Layout of a packed `[in, out]` weight: `out` in blocks of 8 columns (the last padded with
//! zeros), each block `in × 8` half floats, row `k` of the block holding `W[k, 8·b .. 8·b + 8]`.
//! The kernels ([`Kernel`]: scalar, AVX2 a block at a time, AVX-512 two blocks at a time)
//! perform the same fused multiply-adds in the same order (over `k`, then the bias), so their
//! results are equal bit for bit (tested), and a query's vector does not depend on the CPU's
//! vector width.

use rayon::prelude::*;

/// Columns per block: one AVX2 register of f32.
const COLS: usize = 8;
/// Rows per pass of the AVX2 kernel (13 accumulators, 1 weight, 1 broadcast: 15 of 16
/// registers), so that a query of up to 11 words and its two special tokens is one pass and
/// each weight is converted once.
const ROWS: usize = 13;
/// Column blocks per parallel task (128 columns).
const BLOCKS_PER_TASK: usize = 16;

/// An `[in, out]` weight in half precision ([module docs](self)) with its f32 bias.
pub(crate) struct Packed {
    in_dim: usize,
    out_dim: usize,
    w: Vec<u16>,
    bias: Vec<f32>,
}

impl Packed {
    /// Packs `w` (`[in_dim, out_dim]` row-major, f32) rounded to the nearest half float.
    pub(crate) fn new(w: &[f32], in_dim: usize, out_dim: usize, bias: Vec<f32>) -> Packed {
        assert_eq!(w.len(), in_dim * out_dim, "weight shape");
        assert_eq!(bias.len(), out_dim, "bias shape");
        let blocks = out_dim.div_ceil(COLS);
        let mut p = vec![0u16; blocks * in_dim * COLS];
        for (b, block) in p.chunks_exact_mut(in_dim * COLS).enumerate() {
            for (k, row) in block.chunks_exact_mut(COLS).enumerate() {
                for (j, dst) in row.iter_mut().enumerate() {
                    let o = b * COLS + j;
                    if o < out_dim {
                        *dst = half::f16::from_f32(w[k * out_dim + o]).to_bits();
                    }
                }
            }
        }
        Packed {
            in_dim,
            out_dim,
            w: p,
            bias,
        }
    }

    pub(crate) fn out_dim(&self) -> usize {
        self.out_dim
    }

    /// `x @ W + bias` for `x` of `rows × in_dim` (row-major); `rows × out_dim` out.
    pub(crate) fn forward(&self, x: &[f32], rows: usize) -> Vec<f32> {
        self.forward_with(x, rows, true, Kernel::best())
    }

    /// [`Self::forward`] without the bias (the caller fuses it with the activation).
    pub(crate) fn forward_no_bias(&self, x: &[f32], rows: usize) -> Vec<f32> {
        self.forward_with(x, rows, false, Kernel::best())
    }

    /// Block `b`'s bias, when asked for (zeros past `out_dim`).
    fn block_bias(&self, b: usize, bias: bool) -> Option<[f32; COLS]> {
        bias.then(|| {
            let mut v = [0f32; COLS];
            for (j, d) in v.iter_mut().enumerate() {
                *d = self.bias.get(b * COLS + j).copied().unwrap_or(0.0);
            }
            v
        })
    }

    fn forward_with(&self, x: &[f32], rows: usize, bias: bool, kernel: Kernel) -> Vec<f32> {
        assert_eq!(x.len(), rows * self.in_dim, "input shape");
        let blocks = self.out_dim.div_ceil(COLS);
        let stride = self.in_dim * COLS;
        // Per column block, its `rows × 8` results; then laid out row-major.
        let mut tiles = vec![0f32; blocks * rows * COLS];
        // AVX-512 takes two blocks at a time (16 columns, one register); a last odd block
        // goes through AVX2.
        let group = if kernel == Kernel::Avx512 { 2 } else { 1 };
        tiles
            .par_chunks_mut(group * rows * COLS)
            .with_min_len(BLOCKS_PER_TASK / group)
            .enumerate()
            .for_each(|(g, tiles)| {
                let b = g * group;
                if group == 2 && tiles.len() == 2 * rows * COLS {
                    let w = &self.w[b * stride..(b + 2) * stride];
                    let biases = [self.block_bias(b, bias), self.block_bias(b + 1, bias)];
                    block_pair(x, rows, self.in_dim, w, &biases, tiles);
                } else {
                    let w = &self.w[b * stride..(b + 1) * stride];
                    let kernel = kernel.min(Kernel::Avx2);
                    let bias = self.block_bias(b, bias);
                    block(x, rows, self.in_dim, w, bias.as_ref(), tiles, kernel);
                }
            });
        let mut out = vec![0f32; rows * self.out_dim];
        for (b, tile) in tiles.chunks_exact(rows * COLS).enumerate() {
            let cols = COLS.min(self.out_dim - b * COLS);
            for r in 0..rows {
                out[r * self.out_dim + b * COLS..][..cols]
                    .copy_from_slice(&tile[r * COLS..r * COLS + cols]);
            }
        }
        out
    }
}

/// Which kernel multiplies: all perform the same fused multiply-adds in the same order, so
/// their results are equal bit for bit (tested); they differ in how many columns one
/// instruction takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kernel {
    /// The tests' oracle (each weight converted in software).
    Scalar,
    /// 8 columns per instruction (AVX2 + FMA + F16C).
    Avx2,
    /// 16 columns per instruction (AVX-512F): two blocks at a time, row `k` of each in one
    /// register. On a 2-core Intel Xeon VM (AVX-512, AMX) a query's embedding took p50
    /// 3.62-4.06 ms against 4.58-5.33 ms with AVX2 (`query_embed --no-peer`, three
    /// interleaved pairs of 300 queries); the kernel still waits on its weights' loads.
    Avx512,
}

impl Kernel {
    /// The widest kernel this CPU runs (only called where [`kernel_available`] holds; the
    /// scalar kernel otherwise).
    fn best() -> Kernel {
        if !kernel_available() {
            return Kernel::Scalar;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            return Kernel::Avx512;
        }
        Kernel::Avx2
    }

    /// Every kernel this CPU runs, narrowest first.
    #[cfg(test)]
    fn available() -> Vec<Kernel> {
        [Kernel::Scalar, Kernel::Avx2, Kernel::Avx512]
            .into_iter()
            .filter(|&k| k <= Kernel::best())
            .collect()
    }
}

/// Whether the AVX2 + FMA + F16C kernel can run here (elsewhere queries take the f32 path:
/// the scalar kernel, the tests' oracle, converts each weight in software).
pub(crate) fn kernel_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("f16c")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

// `by_rows!` has an arm for every row count up to `ROWS`.
const _: () = assert!(ROWS == 13);

/// Calls the kernel `$f::<N>` for `N = $n` rows (1 to [`ROWS`]; more is capped at `ROWS`, which
/// the callers never pass): the row count is a const parameter so that the accumulators stay
/// in registers.
macro_rules! by_rows {
    ($n:expr, $f:ident($($a:expr),*)) => {
        match $n {
            1 => $f::<1>($($a),*),
            2 => $f::<2>($($a),*),
            3 => $f::<3>($($a),*),
            4 => $f::<4>($($a),*),
            5 => $f::<5>($($a),*),
            6 => $f::<6>($($a),*),
            7 => $f::<7>($($a),*),
            8 => $f::<8>($($a),*),
            9 => $f::<9>($($a),*),
            10 => $f::<10>($($a),*),
            11 => $f::<11>($($a),*),
            12 => $f::<12>($($a),*),
            _ => $f::<{ ROWS }>($($a),*),
        }
    };
}

/// One column block: `tile[r·8 + j] = Σ_k x[r, k] · w[k, j] (+ bias[j])`, rows in passes of
/// [`ROWS`].
fn block(
    x: &[f32],
    rows: usize,
    in_dim: usize,
    w: &[u16],
    bias: Option<&[f32; COLS]>,
    tile: &mut [f32],
    kernel: Kernel,
) {
    for r0 in (0..rows).step_by(ROWS) {
        let n = ROWS.min(rows - r0);
        let xs = &x[r0 * in_dim..(r0 + n) * in_dim];
        let out = &mut tile[r0 * COLS..(r0 + n) * COLS];
        if !(kernel >= Kernel::Avx2 && pass_simd(xs, n, in_dim, w, bias, out)) {
            pass_scalar(xs, n, in_dim, w, bias, out);
        }
    }
}

/// Two adjacent column blocks at once through [`pass_avx512`] (only called once AVX-512F was
/// detected): `w` holds both blocks' weights, `tiles` both blocks' `rows × 8` results.
fn block_pair(
    x: &[f32],
    rows: usize,
    in_dim: usize,
    w: &[u16],
    bias: &[Option<[f32; COLS]>; 2],
    tiles: &mut [f32],
) {
    let (w0, w1) = w.split_at(in_dim * COLS);
    let (t0, t1) = tiles.split_at_mut(rows * COLS);
    for r0 in (0..rows).step_by(ROWS) {
        let n = ROWS.min(rows - r0);
        let xs = &x[r0 * in_dim..(r0 + n) * in_dim];
        let o0 = &mut t0[r0 * COLS..(r0 + n) * COLS];
        let o1 = &mut t1[r0 * COLS..(r0 + n) * COLS];
        if !pass_pair_simd(xs, n, in_dim, [w0, w1], bias, [o0, o1]) {
            pass_scalar(xs, n, in_dim, w0, bias[0].as_ref(), o0);
            pass_scalar(xs, n, in_dim, w1, bias[1].as_ref(), o1);
        }
    }
}

/// One pass of `n` rows over two blocks through [`pass_avx512`]; `false` (nothing done) off
/// x86-64.
#[cfg(target_arch = "x86_64")]
fn pass_pair_simd(
    xs: &[f32],
    n: usize,
    in_dim: usize,
    w: [&[u16]; 2],
    bias: &[Option<[f32; COLS]>; 2],
    out: [&mut [f32]; 2],
) -> bool {
    // SAFETY: the caller detected AVX-512F (and AVX2, FMA, F16C); `xs` holds `n × in_dim`
    // values, each `w` `in_dim × 8` and each `out` `n × 8` (checked by the kernel's asserts).
    unsafe { by_rows!(n, pass_avx512(xs, in_dim, w, bias, out)) }
    true
}

#[cfg(not(target_arch = "x86_64"))]
fn pass_pair_simd(
    _: &[f32],
    _: usize,
    _: usize,
    _: [&[u16]; 2],
    _: &[Option<[f32; COLS]>; 2],
    _: [&mut [f32]; 2],
) -> bool {
    false
}

/// One pass of `n` rows through [`pass_avx2`]; `false` (nothing done) off x86-64. Only called
/// once the features were detected ([`kernel_available`]).
#[cfg(target_arch = "x86_64")]
fn pass_simd(
    xs: &[f32],
    n: usize,
    in_dim: usize,
    w: &[u16],
    bias: Option<&[f32; COLS]>,
    out: &mut [f32],
) -> bool {
    // SAFETY: the caller detected the features; `xs` holds `n × in_dim` values, `w`
    // `in_dim × 8` and `out` `n × 8` (checked by the kernel's asserts).
    unsafe { by_rows!(n, pass_avx2(xs, in_dim, w, bias, out)) }
    true
}

#[cfg(not(target_arch = "x86_64"))]
fn pass_simd(
    _: &[f32],
    _: usize,
    _: usize,
    _: &[u16],
    _: Option<&[f32; COLS]>,
    _: &mut [f32],
) -> bool {
    false
}

/// The scalar kernel: the same fused multiply-adds as [`pass_avx2`], in the same order.
fn pass_scalar(
    xs: &[f32],
    n: usize,
    in_dim: usize,
    w: &[u16],
    bias: Option<&[f32; COLS]>,
    out: &mut [f32],
) {
    for r in 0..n {
        let mut acc = [0f32; COLS];
        for k in 0..in_dim {
            let a = xs[r * in_dim + k];
            for (j, s) in acc.iter_mut().enumerate() {
                let wk = half::f16::from_bits(w[k * COLS + j]).to_f32();
                *s = a.mul_add(wk, *s);
            }
        }
        if let Some(b) = bias {
            for (s, b) in acc.iter_mut().zip(b) {
                *s += b;
            }
        }
        out[r * COLS..(r + 1) * COLS].copy_from_slice(&acc);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn pass_avx2<const N: usize>(
    xs: &[f32],
    in_dim: usize,
    w: &[u16],
    bias: Option<&[f32; COLS]>,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    assert!(xs.len() >= N * in_dim && w.len() >= in_dim * COLS && out.len() >= N * COLS);
    let mut acc = [_mm256_setzero_ps(); N];
    let wp = w.as_ptr();
    let xp = xs.as_ptr();
    for k in 0..in_dim {
        // SAFETY: `k < in_dim`, so the 8 half floats of row `k` and `x[r, k]` for `r < N`
        // are within the slices (asserted above).
        let wk = unsafe { _mm256_cvtph_ps(_mm_loadu_si128(wp.add(k * COLS) as *const __m128i)) };
        for (r, a) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let x = _mm256_set1_ps(unsafe { *xp.add(r * in_dim + k) });
            *a = _mm256_fmadd_ps(x, wk, *a);
        }
    }
    if let Some(b) = bias {
        // SAFETY: `b` holds 8 floats.
        let b = unsafe { _mm256_loadu_ps(b.as_ptr()) };
        for a in acc.iter_mut() {
            *a = _mm256_add_ps(*a, b);
        }
    }
    let op = out.as_mut_ptr();
    for (r, a) in acc.iter().enumerate() {
        // SAFETY: `out` holds `N × 8` floats (asserted above).
        unsafe { _mm256_storeu_ps(op.add(r * COLS), *a) };
    }
}

/// [`pass_avx2`] over two blocks at once: row `k` of each block (8 half floats each) fills
/// one 16-wide register, so each fused multiply-add takes 16 columns. Per column the same
/// operations in the same order as [`pass_scalar`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn pass_avx512<const N: usize>(
    xs: &[f32],
    in_dim: usize,
    w: [&[u16]; 2],
    bias: &[Option<[f32; COLS]>; 2],
    out: [&mut [f32]; 2],
) {
    use std::arch::x86_64::*;
    let [o0, o1] = out;
    assert!(xs.len() >= N * in_dim && o0.len() >= N * COLS && o1.len() >= N * COLS);
    assert!(w[0].len() >= in_dim * COLS && w[1].len() >= in_dim * COLS);
    let mut acc = [_mm512_setzero_ps(); N];
    let (w0, w1) = (w[0].as_ptr(), w[1].as_ptr());
    let xp = xs.as_ptr();
    for k in 0..in_dim {
        // SAFETY: `k < in_dim`, so row `k` of both blocks and `x[r, k]` for `r < N` are
        // within the slices (asserted above).
        let wk = unsafe {
            let lo = _mm_loadu_si128(w0.add(k * COLS) as *const __m128i);
            let hi = _mm_loadu_si128(w1.add(k * COLS) as *const __m128i);
            _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi))
        };
        for (r, a) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let x = _mm512_set1_ps(unsafe { *xp.add(r * in_dim + k) });
            *a = _mm512_fmadd_ps(x, wk, *a);
        }
    }
    if bias[0].is_some() || bias[1].is_some() {
        let (b0, b1) = (
            bias[0].unwrap_or([0.0; COLS]),
            bias[1].unwrap_or([0.0; COLS]),
        );
        let mut both = [0f32; 2 * COLS];
        both[..COLS].copy_from_slice(&b0);
        both[COLS..].copy_from_slice(&b1);
        // SAFETY: `both` holds 16 floats.
        let b = unsafe { _mm512_loadu_ps(both.as_ptr()) };
        for a in acc.iter_mut() {
            *a = _mm512_add_ps(*a, b);
        }
    }
    for (r, a) in acc.iter().enumerate() {
        let mut both = [0f32; 2 * COLS];
        // SAFETY: `both` holds 16 floats.
        unsafe { _mm512_storeu_ps(both.as_mut_ptr(), *a) };
        o0[r * COLS..(r + 1) * COLS].copy_from_slice(&both[..COLS]);
        o1[r * COLS..(r + 1) * COLS].copy_from_slice(&both[COLS..]);
    }
}

/// Layer normalisation of each `h`-wide row of `x` in place: `(x − mean) / √(var + eps) · γ + β`
/// (biased variance, as BERT's).
pub(crate) fn layer_norm(x: &mut [f32], gamma: &[f32], beta: &[f32], eps: f32) {
    let h = gamma.len();
    for row in x.chunks_exact_mut(h) {
        let mean = row.iter().sum::<f32>() / h as f32;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / h as f32;
        let inv = 1.0 / (var + eps).sqrt();
        for ((v, g), b) in row.iter_mut().zip(gamma).zip(beta) {
            *v = (*v - mean) * inv * g + b;
        }
    }
}

/// `n` deterministic values in [-0.5, 0.5) from `seed` (a linear congruential generator): the
/// inputs of this crate's host-kernel tests.
#[cfg(test)]
pub(crate) fn test_values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against a plain f64 product of the half-rounded weights, for every row count up to
    /// two passes and widths that leave a partial last block; the AVX2 kernel equals the
    /// scalar one bit for bit.
    #[test]
    fn matches_reference_and_paths_agree() {
        for &(in_dim, out_dim) in &[(384, 1152), (37, 21), (1536, 384), (8, 16), (64, 40)] {
            let w = test_values(in_dim * out_dim, 7);
            let bias = test_values(out_dim, 9);
            let p = Packed::new(&w, in_dim, out_dim, bias.clone());
            for rows in [1, 2, 5, 6, 7, 12, 13, 14, 27] {
                let x = test_values(rows * in_dim, rows as u64);
                let got = p.forward_with(&x, rows, true, Kernel::Scalar);
                for r in 0..rows {
                    for o in 0..out_dim {
                        let mut want = 0f64;
                        for k in 0..in_dim {
                            let wk = half::f16::from_f32(w[k * out_dim + o]).to_f32();
                            want += x[r * in_dim + k] as f64 * wk as f64;
                        }
                        want += bias[o] as f64;
                        let g = got[r * out_dim + o] as f64;
                        assert!(
                            (g - want).abs() < 1e-4,
                            "{in_dim}x{out_dim} r{r} o{o}: {g} vs {want}"
                        );
                    }
                }
                let plain = p.forward_with(&x, rows, false, Kernel::Scalar);
                for k in Kernel::available() {
                    assert_eq!(
                        p.forward_with(&x, rows, true, k),
                        got,
                        "{k:?} {in_dim}x{out_dim} {rows}"
                    );
                    assert_eq!(p.forward_with(&x, rows, false, k), plain, "{k:?}");
                }
            }
        }
    }

    #[test]
    fn layer_norm_normalises_rows() {
        let mut x = test_values(3 * 8, 3);
        let g = vec![1.0f32; 8];
        let b = vec![0.0f32; 8];
        layer_norm(&mut x, &g, &b, 1e-12);
        for row in x.chunks_exact(8) {
            let mean = row.iter().sum::<f32>() / 8.0;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / 8.0;
            assert!(
                mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-4,
                "{mean} {var}"
            );
        }
    }
}
