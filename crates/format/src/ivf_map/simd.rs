//! The AVX2 + FMA kernels of the mapped IVF: dot products for routing and exact centroid
//! scores, the SQ8 code dot product, and the routing codes' reduction and quantisation. Each
//! is called only after [`crate::cpu::avx2_fma`] says the CPU has the features.

use std::arch::x86_64::*;

/// The sum of all lanes of four accumulators (both kernels' epilogue).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
unsafe fn sum_lanes(a0: __m256, a1: __m256, a2: __m256, a3: __m256) -> f32 {
    let s = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), s);
    lanes.iter().sum()
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_f32_avx2(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: `b`'s floats viewed as their `4 · b.len()` bytes (any bit pattern is a valid
    // `u8`; the crate only builds for little-endian targets, so those bytes are the floats'
    // little-endian encoding): the same loads, products and sums in the same order.
    let bytes = std::slice::from_raw_parts(b.as_ptr().cast::<u8>(), std::mem::size_of_val(b));
    dot_f32_le_avx2(a, bytes)
}

/// The least and greatest of `c`, NaNs never winning a comparison: `min_ps(v, acc)`
/// keeps `acc` when `v` is NaN, as `if v < acc { v } else { acc }` does.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn min_max_avx2(c: &[f32]) -> (f32, f32) {
    let mut lo = _mm256_set1_ps(f32::INFINITY);
    let mut hi = _mm256_set1_ps(f32::NEG_INFINITY);
    let lanes = c.len() / 8;
    for k in 0..lanes {
        // SAFETY: 8k + 8 ≤ c.len(); unaligned load.
        let v = _mm256_loadu_ps(c.as_ptr().add(8 * k));
        lo = _mm256_min_ps(v, lo);
        hi = _mm256_max_ps(v, hi);
    }
    let (mut l, mut h) = ([0f32; 8], [0f32; 8]);
    _mm256_storeu_ps(l.as_mut_ptr(), lo);
    _mm256_storeu_ps(h.as_mut_ptr(), hi);
    let (mut min, mut max) = (f32::INFINITY, f32::NEG_INFINITY);
    for &x in l.iter().chain(&c[8 * lanes..]) {
        min = if x < min { x } else { min };
    }
    for &x in h.iter().chain(&c[8 * lanes..]) {
        max = if x > max { x } else { max };
    }
    (min, max)
}

/// `out_i = round_level((c_i − min) / step)` in 8 lanes: the quotient clamped to
/// [0, 255] (a NaN to 0, as the saturating cast of a NaN is), truncated, plus one when the
/// remainder is at least one half. Fills whole groups of 8 and returns how many values it
/// filled; the caller rounds the rest.
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn levels_avx2(c: &[f32], min: f32, step: f32, out: &mut [u8]) -> usize {
    let n = c.len().min(out.len());
    let (vmin, vstep) = (_mm256_set1_ps(min), _mm256_set1_ps(step));
    let (zero, top, half) = (
        _mm256_setzero_ps(),
        _mm256_set1_ps(255.0),
        _mm256_set1_ps(0.5),
    );
    let one = _mm256_set1_epi32(1);
    let lanes = n / 8;
    for k in 0..lanes {
        // SAFETY: 8k + 8 ≤ n; unaligned load.
        let v = _mm256_div_ps(
            _mm256_sub_ps(_mm256_loadu_ps(c.as_ptr().add(8 * k)), vmin),
            vstep,
        );
        // max_ps(v, 0) is 0 for a NaN v (the second operand wins).
        let v = _mm256_min_ps(_mm256_max_ps(v, zero), top);
        let floor = _mm256_cvttps_epi32(v);
        let up = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GE_OQ>(
            _mm256_sub_ps(v, _mm256_cvtepi32_ps(floor)),
            half,
        ));
        let level = _mm256_add_epi32(floor, _mm256_and_si256(up, one));
        let mut w = [0i32; 8];
        _mm256_storeu_si256(w.as_mut_ptr().cast(), level);
        for (o, &x) in out[8 * k..8 * k + 8].iter_mut().zip(&w) {
            *o = x as u8;
        }
    }
    8 * lanes
}

/// [`dot_f32_avx2`] with `b` as little-endian f32 bytes at any alignment (x86 is little
/// endian; the loads are unaligned).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_f32_le_avx2(a: &[f32], b: &[u8]) -> f32 {
    let n = a.len().min(b.len() / 4);
    let blocks = n / 32;
    let (mut a0, mut a1, mut a2, mut a3) = (
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
    );
    let (ap, bp) = (a.as_ptr(), b.as_ptr());
    let load_b = |i: usize| _mm256_loadu_ps(bp.add(4 * i) as *const f32);
    for k in 0..blocks {
        let i = k * 32;
        // SAFETY: i + 32 ≤ n: within `a` and within `b`'s 4·n bytes; unaligned loads.
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(ap.add(i)), load_b(i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(ap.add(i + 8)), load_b(i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(ap.add(i + 16)), load_b(i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(ap.add(i + 24)), load_b(i + 24), a3);
    }
    let mut total = sum_lanes(a0, a1, a2, a3);
    for i in blocks * 32..n {
        let c = &b[4 * i..4 * i + 4];
        total += a[i] * f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
    }
    total
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn dot_u8_avx2(q: &[f32], code: &[u8]) -> f32 {
    let n = q.len().min(code.len());
    let blocks = n / 32;
    let (mut a0, mut a1, mut a2, mut a3) = (
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
        _mm256_setzero_ps(),
    );
    let (qp, cp) = (q.as_ptr(), code.as_ptr());
    for b in 0..blocks {
        let i = b * 32;
        // SAFETY: i + 32 ≤ n ≤ both lengths; unaligned loads.
        let c = _mm256_loadu_si256(cp.add(i) as *const __m256i);
        let lo = _mm256_castsi256_si128(c);
        let hi = _mm256_extracti128_si256(c, 1);
        let c0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
        let c1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
        let c2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
        let c3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i)), c0, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i + 8)), c1, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i + 16)), c2, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(i + 24)), c3, a3);
    }
    let mut total = sum_lanes(a0, a1, a2, a3);
    for i in blocks * 32..n {
        total += q[i] * code[i] as f32;
    }
    total
}

/// `Σ w_i · code_i` exactly: each byte widened to 16 bits and multiplied with its weight,
/// pairs summed into 32-bit lanes (`vpmaddwd`, at most `2 · 255 · 32767` per pair), the lanes
/// flushed to a 64-bit total every 64 steps (before any could pass `i32::MAX`).
///
/// # Safety
/// The CPU must support AVX2.
#[target_feature(enable = "avx2")]
pub unsafe fn dot_u8_i16_avx2(w: &[i16], code: &[u8]) -> i64 {
    let n = w.len().min(code.len());
    let blocks = n / 64;
    let (wp, cp) = (w.as_ptr(), code.as_ptr());
    let zero = _mm256_setzero_si256();
    let (mut a0, mut a1, mut a2, mut a3) = (zero, zero, zero, zero);
    let mut total = 0i64;
    let flush = |a0: __m256i, a1: __m256i, a2: __m256i, a3: __m256i| -> i64 {
        let mut lanes = [0i32; 8];
        let mut t = 0i64;
        for a in [a0, a1, a2, a3] {
            _mm256_storeu_si256(lanes.as_mut_ptr().cast(), a);
            t += lanes.iter().map(|&x| x as i64).sum::<i64>();
        }
        t
    };
    for b in 0..blocks {
        let i = b * 64;
        // SAFETY: i + 64 ≤ n ≤ both lengths; unaligned loads of 16 bytes and 16 i16s.
        let term = |k: usize| {
            let c = _mm256_cvtepu8_epi16(_mm_loadu_si128(cp.add(i + k) as *const __m128i));
            let q = _mm256_loadu_si256(wp.add(i + k) as *const __m256i);
            _mm256_madd_epi16(c, q)
        };
        a0 = _mm256_add_epi32(a0, term(0));
        a1 = _mm256_add_epi32(a1, term(16));
        a2 = _mm256_add_epi32(a2, term(32));
        a3 = _mm256_add_epi32(a3, term(48));
        if b % 64 == 63 {
            total += flush(a0, a1, a2, a3);
            (a0, a1, a2, a3) = (zero, zero, zero, zero);
        }
    }
    total += flush(a0, a1, a2, a3);
    for i in blocks * 64..n {
        total += w[i] as i64 * code[i] as i64;
    }
    total
}
