//! The encoder's batches on the CPU: every layer in f32 on the host, its matmuls run by
//! `gemm` (the crate burn's flex backend itself calls) straight into buffers that the next
//! layer reuses, with the bias and the residual written into the output before the product is
//! added to it.
//!
//! Through burn's ops, each matmul's output was a new tensor that flex zeroes and then copies
//! into an allocation of its own alignment (`FlexTensor::empty`: `vec![0u8; n]`, then
//! `Bytes::from_bytes_vec`), and the bias, the residual and the norm were passes of their own:
//! memset, memcpy and those passes were about 14% of CPU embedding's samples
//! (docs/measurements.md, "CPU embedding"). The attention and the bias + GELU are the host
//! kernels of [`crate::cpu`]; the norm is [`crate::small::layer_norm`], rows in parallel.

use rayon::prelude::*;

use crate::{cpu, small};

/// `x @ w + b` in f32 on the host, `w` stored `[i, o]` row-major.
pub(crate) struct HostLinear {
    pub(crate) w: Vec<f32>,
    pub(crate) b: Vec<f32>,
    pub(crate) i: usize,
    pub(crate) o: usize,
}

/// What [`HostLinear::forward_into`] writes into its output before the product is added.
enum Start<'a> {
    /// The bias.
    Bias,
    /// The bias plus this `rows × o` residual.
    BiasPlus(&'a [f32]),
    /// Zeros (the bias is added by the next pass, fused with the activation).
    Zero,
}

impl HostLinear {
    /// `out = start + x @ w`, `x` being `rows × i` row-major; `out` becomes `rows × o`.
    fn forward_into(&self, x: &[f32], rows: usize, start: Start<'_>, out: &mut Vec<f32>) {
        let (i, o) = (self.i, self.o);
        assert_eq!(x.len(), rows * i, "input of {rows} rows of {i}");
        assert_eq!(self.w.len(), i * o, "weight of {i} × {o}");
        assert_eq!(self.b.len(), o, "bias of {o}");
        out.clear();
        match start {
            Start::Bias => (0..rows).for_each(|_| out.extend_from_slice(&self.b)),
            Start::BiasPlus(r) => {
                assert_eq!(r.len(), rows * o, "residual of {rows} rows of {o}");
                for row in r.chunks_exact(o) {
                    out.extend(row.iter().zip(&self.b).map(|(r, b)| r + b));
                }
            }
            Start::Zero => out.resize(rows * o, 0.0),
        }
        if rows == 0 || i == 0 || o == 0 {
            return;
        }
        // SAFETY: `out` is `rows × o`, `x` is `rows × i` and `w` is `i × o`, all row-major with
        // exactly those lengths (asserted above), so every index gemm forms is in bounds.
        unsafe {
            // out[r, c] = 1 · out[r, c] + 1 · Σ_k x[r, k] w[k, c]
            gemm::gemm(
                rows,
                o,
                i,
                out.as_mut_ptr(),
                1,
                o as isize,
                true,
                x.as_ptr(),
                1,
                i as isize,
                self.w.as_ptr(),
                1,
                o as isize,
                1.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::Rayon(0),
            );
        }
    }
}

/// One post-LN transformer block's weights on the host (Q, K and V fused into one `[h, 3h]`
/// linear).
pub(crate) struct HostLayer {
    pub(crate) qkv: HostLinear,
    pub(crate) attn_out: HostLinear,
    pub(crate) attn_norm: (Vec<f32>, Vec<f32>),
    pub(crate) ffn_in: HostLinear,
    pub(crate) ffn_out: HostLinear,
    pub(crate) ffn_norm: (Vec<f32>, Vec<f32>),
}

/// Rows handed to one task of the parallel layer norm.
const NORM_ROWS: usize = 64;

fn layer_norm_rows(x: &mut [f32], (gamma, beta): &(Vec<f32>, Vec<f32>), eps: f32) {
    let h = gamma.len().max(1);
    x.par_chunks_mut(h * NORM_ROWS)
        .for_each(|rows| small::layer_norm(rows, gamma, beta, eps));
}

/// The shape of one padded batch and the model's constants.
pub(crate) struct Shape<'a> {
    /// Real token counts, one per sequence, each at most `seq`.
    pub(crate) lengths: &'a [usize],
    /// Padded length of every sequence.
    pub(crate) seq: usize,
    pub(crate) heads: usize,
    pub(crate) eps: f32,
    pub(crate) gelu_tanh: bool,
}

/// The transformer over one padded batch: `x` is the embeddings' output,
/// `[lengths.len() * seq, h]` row-major; returns the last hidden state, same shape. Padded
/// rows are computed like the others (no real row reads them: the attention skips them).
pub(crate) fn encode(layers: &[HostLayer], mut x: Vec<f32>, s: &Shape<'_>) -> Vec<f32> {
    let rows = s.lengths.len() * s.seq;
    let Some(h) = layers.first().map(|l| l.qkv.i) else {
        return x;
    };
    assert_eq!(x.len(), rows * h, "embeddings of {rows} rows of {h}");
    let (mut qkv, mut next, mut inner) = (Vec::new(), Vec::new(), Vec::new());
    for l in layers {
        l.qkv.forward_into(&x, rows, Start::Bias, &mut qkv);
        let ctx = cpu::attention(&qkv, s.lengths, s.seq, s.heads, h / s.heads.max(1));
        l.attn_out
            .forward_into(&ctx, rows, Start::BiasPlus(&x), &mut next);
        layer_norm_rows(&mut next, &l.attn_norm, s.eps);
        std::mem::swap(&mut x, &mut next);
        l.ffn_in.forward_into(&x, rows, Start::Zero, &mut inner);
        cpu::bias_gelu(&mut inner, &l.ffn_in.b, s.gelu_tanh);
        l.ffn_out
            .forward_into(&inner, rows, Start::BiasPlus(&x), &mut next);
        layer_norm_rows(&mut next, &l.ffn_norm, s.eps);
        std::mem::swap(&mut x, &mut next);
    }
    x
}

/// Mean of each sequence's real rows of `x` (`[lengths.len() * seq, h]`): `[lengths.len(), h]`.
pub(crate) fn mean_pool(x: &[f32], lengths: &[usize], seq: usize, h: usize) -> Vec<f32> {
    let mut out = vec![0f32; lengths.len() * h];
    for ((b, &len), v) in lengths.iter().enumerate().zip(out.chunks_exact_mut(h)) {
        let start = b * seq * h;
        for row in x[start..start + len.min(seq) * h].chunks_exact(h) {
            v.iter_mut().zip(row).for_each(|(v, r)| *v += r);
        }
        let inv = 1.0 / len.max(1) as f32;
        v.iter_mut().for_each(|v| *v *= inv);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::small::test_values as data;

    /// Every start against a plain f64 product, at row counts around gemm's blocks and at
    /// zero rows.
    #[test]
    fn a_linear_adds_its_product_to_what_it_starts_from() {
        let (i, o) = (37, 29);
        let lin = HostLinear {
            w: data(i * o, 1),
            b: data(o, 2),
            i,
            o,
        };
        for rows in [0, 1, 5, 48, 97] {
            let x = data(rows * i, 3);
            let r = data(rows * o, 4);
            for (name, start) in [("bias", 0), ("bias+residual", 1), ("zero", 2)] {
                let mut out = vec![9.0; 3];
                let s = match start {
                    0 => Start::Bias,
                    1 => Start::BiasPlus(&r),
                    _ => Start::Zero,
                };
                lin.forward_into(&x, rows, s, &mut out);
                assert_eq!(out.len(), rows * o);
                for row in 0..rows {
                    for c in 0..o {
                        let mut want: f64 = (0..i)
                            .map(|k| f64::from(x[row * i + k]) * f64::from(lin.w[k * o + c]))
                            .sum();
                        if start < 2 {
                            want += f64::from(lin.b[c]);
                        }
                        if start == 1 {
                            want += f64::from(r[row * o + c]);
                        }
                        let got = f64::from(out[row * o + c]);
                        assert!(
                            (got - want).abs() < 1e-5,
                            "{name} [{row}, {c}]: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn pooling_averages_the_real_rows_only() {
        let (seq, h) = (3, 2);
        let x = vec![
            1.0, 2.0, 3.0, 4.0, 100.0, 100.0, // sequence 0: two real rows, one padded
            5.0, 6.0, 7.0, 8.0, 9.0, 10.0, // sequence 1: three real rows
        ];
        assert_eq!(mean_pool(&x, &[2, 3], seq, h), vec![2.0, 3.0, 7.0, 8.0]);
    }
}
