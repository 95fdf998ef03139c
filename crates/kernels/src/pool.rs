//! Masked mean pooling + L2 normalisation of a last hidden state: the reference for the GPU
//! kernel ([`crate::gpu::pool_normalize`]).
//!
//! `x` is `[rows, tokens, hidden]` row-major, `mask` `[rows, tokens]` (1 for a real token, 0
//! for padding). Row `r` of the output is the mean of its unmasked token vectors (zero when it
//! has none), divided by its L2 norm (left as is when the norm is below 1e-12).

/// Panics unless `x` is `rows × tokens × hidden` and `mask` `rows × tokens`.
pub(crate) fn assert_shapes(x: &[f32], mask: &[f32], rows: usize, tokens: usize, hidden: usize) {
    assert_eq!(
        x.len(),
        rows * tokens * hidden,
        "x is rows × tokens × hidden"
    );
    assert_eq!(mask.len(), rows * tokens, "mask is rows × tokens");
}

/// The reference implementation, on the CPU.
pub fn pool_normalize_cpu(
    x: &[f32],
    mask: &[f32],
    rows: usize,
    tokens: usize,
    hidden: usize,
) -> Vec<f32> {
    assert_shapes(x, mask, rows, tokens, hidden);
    let mut out = vec![0f32; rows * hidden];
    for r in 0..rows {
        let o = &mut out[r * hidden..(r + 1) * hidden];
        let mut count = 0f32;
        for t in 0..tokens {
            let m = mask[r * tokens + t];
            count += m;
            let row = &x[(r * tokens + t) * hidden..(r * tokens + t + 1) * hidden];
            for (a, v) in o.iter_mut().zip(row) {
                *a += v * m;
            }
        }
        let denom = count.max(1.0);
        o.iter_mut().for_each(|v| *v /= denom);
        let norm = o.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-12);
        o.iter_mut().for_each(|v| *v /= norm);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_only_unmasked_tokens_and_normalises() {
        // 2 rows, 3 tokens, 2 hidden; row 1 has no tokens.
        let x = [
            1.0, 0.0, 3.0, 4.0, 100.0, 100.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0,
        ];
        let mask = [1.0, 1.0, 0.0, 0.0, 0.0, 0.0];
        let out = pool_normalize_cpu(&x, &mask, 2, 3, 2);
        // Row 0: mean (2, 2) → (1/√2, 1/√2); the padded (100, 100) is ignored.
        let s = 1.0 / 2f32.sqrt();
        assert!(
            (out[0] - s).abs() < 1e-6 && (out[1] - s).abs() < 1e-6,
            "{out:?}"
        );
        assert_eq!(&out[2..], &[0.0, 0.0]);
    }
}
