//! Host kernels used when the model runs on the CPU (flex) backend, where "host" memory is
//! the device memory: a fused bias + exact-GELU pass that is vectorised and multi-threaded
//! (flex's own `gelu` is a scalar, single-threaded `libm::erff` loop), and a padding-aware
//! attention that reads Q/K/V in place from the fused projection and skips padded positions.

use rayon::prelude::*;

/// erf for f32 via the rational approximation used by Eigen/XLA (odd P(x²)·x over even
/// Q(x²) on x clamped to [-4, 4]); max abs error ~4e-7, branch-free so it vectorises.
#[inline(always)]
fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10f32;
    p = p * x2 + 2.770_681_4e-8;
    p = p * x2 - 2.101_024e-6;
    p = p * x2 - 5.692_506_4e-5;
    p = p * x2 - 7.349_906e-4;
    p = p * x2 - 2.954_6e-3;
    p = p * x2 - 1.609_603_3e-2;
    let mut q = -1.456_607_2e-5f32;
    q = q * x2 - 2.133_740_6e-4;
    q = q * x2 - 1.682_827e-3;
    q = q * x2 - 7.373_329e-3;
    q = q * x2 - 1.426_474e-2;
    x * p / q
}

/// `row[j] = gelu(row[j] + bias[j])` with exact (erf) GELU.
#[inline(always)]
fn bias_gelu_row(row: &mut [f32], bias: &[f32]) {
    for (v, &b) in row.iter_mut().zip(bias) {
        let x = *v + b;
        *v = 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2));
    }
}

/// `row[j] = gelu_tanh(row[j] + bias[j])` (tanh approximation).
#[inline(always)]
fn bias_gelu_tanh_row(row: &mut [f32], bias: &[f32]) {
    const K: f32 = 0.797_884_6; // sqrt(2/pi)
    for (v, &b) in row.iter_mut().zip(bias) {
        let x = *v + b;
        *v = 0.5 * x * (1.0 + (K * (x + 0.044_715 * x * x * x)).tanh());
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn bias_gelu_row_avx2(row: &mut [f32], bias: &[f32]) {
    bias_gelu_row(row, bias)
}

fn bias_gelu_row_dispatch(row: &mut [f32], bias: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the required CPU features were detected at runtime.
        unsafe { bias_gelu_row_avx2(row, bias) };
        return;
    }
    bias_gelu_row(row, bias)
}

/// Applies `gelu(x + bias)` in place to a row-major `[rows, bias.len()]` matrix, in parallel.
pub(crate) fn bias_gelu(data: &mut [f32], bias: &[f32], tanh_approx: bool) {
    let cols = bias.len().max(1);
    // ~64 KiB of work per task keeps scheduling overhead negligible.
    let rows_per_task = (16 * 1024 / cols).max(1);
    data.par_chunks_mut(rows_per_task * cols).for_each(|chunk| {
        for row in chunk.chunks_mut(cols) {
            if tanh_approx {
                bias_gelu_tanh_row(row, bias);
            } else {
                bias_gelu_row_dispatch(row, bias);
            }
        }
    });
}

/// e^x for f32 (Cephes `expf` polynomial, ~1 ulp), branch-free and integer-conversion-free
/// so softmax rows vectorise.
#[inline(always)]
fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // 1.5 * 2^23: adding it rounds to the nearest integer, which then sits in the low
    // mantissa bits of the sum.
    const ROUND: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 0.166_666_65;
    p = p * r + 0.5;
    let e = p * r * r + r + 1.0;
    // 2^n from the exponent bits; n is in [-126, 127] after the clamp.
    let n_bits = t.to_bits().wrapping_sub(ROUND.to_bits());
    e * f32::from_bits(n_bits.wrapping_add(127) << 23)
}

/// Lane-parallel reduction so the compiler can vectorise it (float adds are not
/// reassociated otherwise).
#[inline(always)]
fn reduce(x: &[f32], init: f32, op: impl Fn(f32, f32) -> f32) -> f32 {
    const LANES: usize = 16;
    let mut acc = [init; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            acc[i] = op(acc[i], c[i]);
        }
    }
    let mut r = tail.iter().fold(init, |a, &b| op(a, b));
    for a in acc {
        r = op(r, a);
    }
    r
}

/// In-place softmax of one row.
#[inline(always)]
fn softmax_row(row: &mut [f32]) {
    let max = reduce(row, f32::NEG_INFINITY, |a, b| if b > a { b } else { a });
    for v in row.iter_mut() {
        *v = exp(*v - max);
    }
    let inv = 1.0 / reduce(row, 0.0, |a, b| a + b);
    for v in row.iter_mut() {
        *v *= inv;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_rows_avx2(scores: &mut [f32], cols: usize) {
    for row in scores.chunks_exact_mut(cols) {
        softmax_row(row)
    }
}

fn softmax_rows(scores: &mut [f32], cols: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the required CPU features were detected at runtime.
        unsafe { softmax_rows_avx2(scores, cols) };
        return;
    }
    for row in scores.chunks_exact_mut(cols) {
        softmax_row(row)
    }
}

/// Multi-head self-attention over a padded batch, computed straight from the fused
/// projection output.
///
/// `qkv` is `[batch * seq, 3 * heads * head_dim]` row-major with Q, K, V side by side (each
/// head-major). Sequence `b` has `lengths[b]` real tokens at the start of its `seq` rows;
/// padded keys are excluded (as an additive `-inf` mask would) and padded query rows are
/// skipped. Returns the context `[batch * seq, heads * head_dim]`; padded rows are zero.
pub(crate) fn attention(
    qkv: &[f32],
    lengths: &[usize],
    seq: usize,
    heads: usize,
    head_dim: usize,
) -> Vec<f32> {
    let h = heads * head_dim;
    let row = 3 * h;
    let scale = 1.0 / (head_dim as f32).sqrt();
    assert!(
        qkv.len() >= lengths.len() * seq * row,
        "qkv buffer too small"
    );
    assert!(
        lengths.iter().all(|&l| l <= seq),
        "length exceeds padded seq"
    );

    let tasks: Vec<(usize, usize)> = (0..lengths.len())
        .flat_map(|b| (0..heads).map(move |hd| (b, hd)))
        .filter(|&(b, _)| lengths[b] > 0)
        .collect();
    let head_outputs: Vec<Vec<f32>> = tasks
        .par_iter()
        .map(|&(b, hd)| {
            let len = lengths[b];
            let base = b * seq * row;
            let q = &qkv[base + hd * head_dim..];
            let k = &qkv[base + h + hd * head_dim..];
            let v = &qkv[base + 2 * h + hd * head_dim..];
            let mut scores = vec![0.0f32; len * len];
            let mut out = vec![0.0f32; len * head_dim];
            // SAFETY: every access stays within `qkv`: the last element read is row
            // `b*seq + len - 1`, column `2h + hd*head_dim + head_dim - 1` < `3h` (checked
            // above), and `scores`/`out` are sized exactly `len*len` and `len*head_dim`.
            unsafe {
                // scores[i, j] = scale * sum_d Q[i, d] K[j, d]
                gemm::gemm(
                    len,
                    len,
                    head_dim,
                    scores.as_mut_ptr(),
                    1,
                    len as isize,
                    false,
                    q.as_ptr(),
                    1,
                    row as isize,
                    k.as_ptr(),
                    row as isize,
                    1,
                    0.0,
                    scale,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
            softmax_rows(&mut scores, len);
            // SAFETY: as above; V is read over the same rows/columns pattern as K.
            unsafe {
                // out[i, d] = sum_j P[i, j] V[j, d]
                gemm::gemm(
                    len,
                    head_dim,
                    len,
                    out.as_mut_ptr(),
                    1,
                    head_dim as isize,
                    false,
                    scores.as_ptr(),
                    1,
                    len as isize,
                    v.as_ptr(),
                    1,
                    row as isize,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
            out
        })
        .collect();

    let mut ctx = vec![0.0f32; lengths.len() * seq * h];
    for (&(b, hd), out) in tasks.iter().zip(&head_outputs) {
        for (i, src) in out.chunks_exact(head_dim).enumerate() {
            let start = (b * seq + i) * h + hd * head_dim;
            ctx[start..start + head_dim].copy_from_slice(src);
        }
    }
    ctx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_matches_libm_closely() {
        let mut max_err = 0.0f32;
        for i in -60_000..=60_000 {
            let x = i as f32 * 1e-4;
            let err = (erf(x) - libm_erf(x)).abs();
            max_err = max_err.max(err);
        }
        assert!(max_err < 1e-6, "max erf error {max_err}");
        assert_eq!(erf(100.0), erf(4.0));
        assert!(erf(f32::NEG_INFINITY) < -0.99999);
    }

    // Reference erf in f64 (Abramowitz-Stegun is not precise enough; use a series/CF).
    fn libm_erf(x: f32) -> f32 {
        let x = x as f64;
        if x.abs() < 3.0 {
            // Maclaurin series, converges well for |x| < 3.
            let mut sum = x;
            let mut term = x;
            let x2 = x * x;
            for n in 1..200 {
                term *= -x2 / n as f64;
                sum += term / (2 * n + 1) as f64;
            }
            (sum * 2.0 / std::f64::consts::PI.sqrt()) as f32
        } else {
            // Continued fraction for erfc.
            let mut f = 0.0f64;
            for k in (1..60).rev() {
                f = (k as f64 / 2.0) / (x.abs() + f);
            }
            let erfc = (-x * x).exp() / (std::f64::consts::PI.sqrt() * (x.abs() + f));
            (x.signum() * (1.0 - erfc)) as f32
        }
    }

    #[test]
    fn exp_is_accurate() {
        for i in -8700..=880 {
            let x = i as f32 * 0.01;
            let want = (x as f64).exp();
            let got = exp(x) as f64;
            assert!(
                ((got - want) / want).abs() < 2e-7,
                "exp({x}) = {got}, want {want}"
            );
        }
        assert!(exp(-1000.0) < 1e-37);
    }

    /// Straightforward attention with an explicit key mask, for comparison.
    fn naive_attention(
        qkv: &[f32],
        lengths: &[usize],
        seq: usize,
        heads: usize,
        dh: usize,
    ) -> Vec<f32> {
        let h = heads * dh;
        let mut ctx = vec![0.0f32; lengths.len() * seq * h];
        for (b, &len) in lengths.iter().enumerate() {
            for hd in 0..heads {
                for i in 0..len {
                    let qi = &qkv[(b * seq + i) * 3 * h + hd * dh..][..dh];
                    let mut w: Vec<f64> = (0..len)
                        .map(|j| {
                            let kj = &qkv[(b * seq + j) * 3 * h + h + hd * dh..][..dh];
                            qi.iter().zip(kj).map(|(a, c)| (a * c) as f64).sum::<f64>()
                                / (dh as f64).sqrt()
                        })
                        .collect();
                    let m = w.iter().copied().fold(f64::MIN, f64::max);
                    let s: f64 = w
                        .iter_mut()
                        .map(|x| {
                            *x = (*x - m).exp();
                            *x
                        })
                        .sum();
                    for d in 0..dh {
                        let mut acc = 0.0f64;
                        for (j, wj) in w.iter().enumerate() {
                            acc += wj / s * qkv[(b * seq + j) * 3 * h + 2 * h + hd * dh + d] as f64;
                        }
                        ctx[(b * seq + i) * h + hd * dh + d] = acc as f32;
                    }
                }
            }
        }
        ctx
    }

    #[test]
    fn attention_matches_naive_with_padding() {
        let (heads, dh, seq) = (3, 4, 7);
        let lengths = [7, 2, 5, 1];
        let n = lengths.len() * seq * 3 * heads * dh;
        let qkv: Vec<f32> = (0..n)
            .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 2.0)
            .collect();
        let got = attention(&qkv, &lengths, seq, heads, dh);
        let want = naive_attention(&qkv, &lengths, seq, heads, dh);
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() < 1e-5, "ctx[{i}] = {g}, want {w}");
        }
    }

    #[test]
    fn bias_gelu_values() {
        let bias = [0.0f32, 1.0, -1.0];
        let mut data = vec![0.0f32, 0.0, 0.0, 1.0, 1.0, 1.0];
        bias_gelu(&mut data, &bias, false);
        let gelu = |x: f64| 0.5 * x * (1.0 + libm_erf((x / 2f64.sqrt()) as f32) as f64);
        let want = [0.0, 1.0, -1.0, 1.0, 2.0, 0.0].map(gelu);
        for (g, w) in data.iter().zip(want) {
            assert!((*g as f64 - w).abs() < 1e-6, "{g} vs {w}");
        }
    }
}
