//! Routing: the one-byte centroids a segment's IVF map makes when it opens
//! ([`routing_codes`]), and the scores of a query against them in integers: the query rounded
//! once to 16-bit integers, its dot products with the one-byte centroids summed exactly.
//!
//! A list's routing score is `min · Σq_i + step · Σ q_i·u_i` ([`super::MappedIvf::route`]).
//! Summed in f32 each of the 384 products costs a widening of its byte to a float and a fused
//! multiply-add; with the query as `q_i ≈ scale · w_i` (`|w_i| ≤ 32767`), `Σ w_i·u_i` is an
//! integer that `vpmaddwd` sums sixteen products per instruction, and exactly: the same value
//! on every CPU and in any order, so the AVX2 kernel and the scalar one agree bit for bit.
//! Rounding the query moves `Σ q_i·u_i` by at most `scale / 2 · Σ u_i`, which
//! [`super::MappedIvf::route_error`] adds to the centroids' own rounding (`step / 2 · Σ|q_i|`);
//! for a unit query of 384 dimensions that is about a fifth of it.

/// The largest magnitude of a weight: products of two such pairs with bytes stay within i32
/// (`2 · 255 · 32767`), and [`dot_u8_i16`]'s lanes are flushed to i64 long before they add up
/// to more.
const W_MAX: f32 = 32767.0;

/// A query prepared for routing.
#[derive(Debug, Clone)]
pub(super) struct RouteQuery {
    /// `round(q_i / scale)`.
    pub w: Vec<i16>,
    /// `max |q_i| / 32767`.
    pub scale: f32,
    /// `Σ q_i` (in f32, in order), for the centroids' offsets.
    pub sum: f32,
}

impl RouteQuery {
    /// `None` for a query without a finite, non-zero largest magnitude (all zeros, or an
    /// infinity or NaN in it): those take the float path.
    pub fn new(query: &[f32]) -> Option<RouteQuery> {
        let mut max = 0f32;
        for &x in query {
            if !x.is_finite() {
                return None;
            }
            max = max.max(x.abs());
        }
        if max == 0.0 || !max.is_normal() {
            return None;
        }
        let scale = max / W_MAX;
        let inv = 1.0 / scale as f64;
        let w = query
            .iter()
            .map(|&x| (x as f64 * inv).round().clamp(-W_MAX as f64, W_MAX as f64) as i16)
            .collect();
        Some(RouteQuery {
            w,
            scale,
            sum: query.iter().sum(),
        })
    }

    /// `Σ q_i · code_i` through the integer sum: `scale · Σ w_i · code_i`.
    #[inline]
    pub fn dot(&self, code: &[u8]) -> f32 {
        (dot_u8_i16(&self.w, code) as f64 * self.scale as f64) as f32
    }

    /// How far [`RouteQuery::dot`] can lie from `Σ q_i · code_i`: half of `scale` per unit of
    /// `Σ code_i` (the rounding of each `q_i`), with a margin for the float divisions.
    pub fn error(&self, code: &[u8]) -> f32 {
        let units: u64 = code.iter().map(|&u| u as u64).sum();
        (0.5 * 1.001 * self.scale as f64 * units as f64) as f32
    }
}

/// `Σ w_i · code_i`, exactly (AVX2 where the CPU has it, else scalar; the same integer).
#[inline]
pub(super) fn dot_u8_i16(w: &[i16], code: &[u8]) -> i64 {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::avx2_fma() {
            // SAFETY: the CPU supports AVX2 (checked once, cached).
            return unsafe { super::simd::dot_u8_i16_avx2(w, code) };
        }
    }
    dot_u8_i16_scalar(w, code)
}

/// [`dot_u8_i16`] without SIMD.
pub(super) fn dot_u8_i16_scalar(w: &[i16], code: &[u8]) -> i64 {
    w.iter().zip(code).map(|(&w, &u)| w as i64 * u as i64).sum()
}

/// One byte per dimension for each centroid (`c_i ≈ min + step · u_i`, `u_i` rounded), and
/// each centroid's (min, step), from the centroids' little-endian bytes in the map. Each
/// centroid is copied into a buffer, reduced to its least and greatest value (the same
/// values in any order, so lanes give the codes of a plain fold; only a zero minimum may come
/// out as the other zero, which changes no code) and quantised. On 667
/// centroids of 384 dimensions in memory (2-core VM) this takes about 0.2 ms with the AVX2
/// kernels and 0.5-0.7 ms compiled for the baseline (SSE2); it was most of the 1.3-1.5 ms a
/// segment's IVF map took to open when the centroids were first copied out as floats.
pub(super) fn routing_codes(centroids: &[u8], dim: usize) -> (Vec<u8>, Vec<(f32, f32)>) {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::avx2_fma() {
            // SAFETY: the CPU supports AVX2 (checked once, cached).
            return unsafe { routing_codes_avx2(centroids, dim) };
        }
    }
    routing_codes_any(centroids, dim)
}

/// [`routing_codes_any`] with the per-centroid reduction and quantisation in AVX2 lanes:
/// the same operations on each value (so the same codes; tested).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn routing_codes_avx2(centroids: &[u8], dim: usize) -> (Vec<u8>, Vec<(f32, f32)>) {
    routing_codes_with(
        centroids,
        dim,
        // SAFETY (both): the caller's CPU supports AVX2.
        |c| unsafe { super::simd::min_max_avx2(c) },
        |c, min, step, out| {
            let done = unsafe { super::simd::levels_avx2(c, min, step, out) };
            levels(&c[done..], min, step, &mut out[done..]);
        },
    )
}

pub(super) fn routing_codes_any(centroids: &[u8], dim: usize) -> (Vec<u8>, Vec<(f32, f32)>) {
    routing_codes_with(centroids, dim, min_max, levels)
}

/// `out_i = round_level((c_i − min) / step)`.
fn levels(c: &[f32], min: f32, step: f32, out: &mut [u8]) {
    for (u, &x) in out.iter_mut().zip(c) {
        *u = round_level((x - min) / step);
    }
}

/// The loop of [`routing_codes`] over the centroids, with the reduction (`min_max`) and the
/// quantisation of one centroid (`levels`, called when the step is positive).
#[inline(always)]
fn routing_codes_with(
    centroids: &[u8],
    dim: usize,
    min_max: impl Fn(&[f32]) -> (f32, f32),
    levels: impl Fn(&[f32], f32, f32, &mut [u8]),
) -> (Vec<u8>, Vec<(f32, f32)>) {
    let dim = dim.max(1);
    let mut codes = vec![0u8; centroids.len() / 4];
    let mut scales = Vec::with_capacity(centroids.len() / 4 / dim);
    let mut c = vec![0f32; dim];
    for (bytes, out) in centroids
        .chunks_exact(dim * 4)
        .zip(codes.chunks_exact_mut(dim))
    {
        decode_le(bytes, &mut c);
        let (min, max) = min_max(&c);
        let step = if max > min { (max - min) / 255.0 } else { 0.0 };
        if step > 0.0 {
            levels(&c, min, step, out);
        }
        scales.push((min, step));
    }
    (codes, scales)
}

/// `out` from its little-endian bytes (`bytes.len() = 4 · out.len()`, any alignment).
#[inline(always)]
fn decode_le(bytes: &[u8], out: &mut [f32]) {
    assert_eq!(bytes.len(), 4 * out.len(), "centroid bytes");
    #[cfg(target_endian = "little")]
    // SAFETY: `out` spans exactly `bytes.len()` bytes (asserted), the two cannot overlap (one
    // is borrowed mutably), every bit pattern is an f32, and on a little-endian target the
    // little-endian bytes are the floats' own representation.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr().cast::<u8>(), bytes.len());
    }
    #[cfg(not(target_endian = "little"))]
    for (x, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// The least and greatest of `c` (±∞ when empty; NaNs never win a comparison), in 8 lanes.
#[inline(always)]
fn min_max(c: &[f32]) -> (f32, f32) {
    let mut lo = [f32::INFINITY; 8];
    let mut hi = [f32::NEG_INFINITY; 8];
    let lanes = c.chunks_exact(8);
    let rest = lanes.remainder();
    for v in lanes {
        let v: &[f32; 8] = v.try_into().expect("chunks of 8");
        for ((l, h), &x) in lo.iter_mut().zip(hi.iter_mut()).zip(v) {
            *l = if x < *l { x } else { *l };
            *h = if x > *h { x } else { *h };
        }
    }
    let mut min = lo
        .into_iter()
        .fold(f32::INFINITY, |a, b| if b < a { b } else { a });
    let mut max = hi
        .into_iter()
        .fold(f32::NEG_INFINITY, |a, b| if b > a { b } else { a });
    for &x in rest {
        min = if x < min { x } else { min };
        max = if x > max { x } else { max };
    }
    (min, max)
}

/// `v.round().clamp(0.0, 255.0) as u8` for `v ≥ 0` (or NaN: 0), without `f32::round`: that is
/// a libm call on baseline x86-64 (no SSE4.1), which kept the loop over every centroid value
/// from vectorising (about 10 ms of a 1M-chunk index's first query). Rounds half away from
/// zero like `round`: `floor(v) + (v − floor(v) ≥ 0.5)`, where the difference is exact.
#[inline(always)]
pub(super) fn round_level(v: f32) -> u8 {
    let v = v.clamp(0.0, 255.0);
    let floor = v as i32;
    (floor + i32::from(v - floor as f32 >= 0.5)) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(s: &mut u64) -> u64 {
        *s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *s >> 33
    }

    /// The SIMD sum is the scalar one, to the unit: random data at every length around the
    /// kernel's 64-wide steps, the largest products everywhere, and lengths long enough for
    /// the lanes to be flushed (a lane left to add up unflushed overflows at these lengths).
    #[test]
    fn integer_dot_is_exact_on_every_path() {
        let mut s = 7u64;
        let n = 64 * 64 * 3 + 17;
        let w: Vec<i16> = (0..n).map(|_| (lcg(&mut s) % 65535) as i16).collect();
        let c: Vec<u8> = (0..n).map(|_| lcg(&mut s) as u8).collect();
        let exact = |w: &[i16], c: &[u8]| -> i64 {
            w.iter().zip(c).map(|(&a, &b)| a as i64 * b as i64).sum()
        };
        for len in (0..200).chain([383, 384, 385, 4095, 4096, 4097, n]) {
            assert_eq!(
                dot_u8_i16(&w[..len], &c[..len]),
                exact(&w[..len], &c[..len])
            );
            assert_eq!(
                dot_u8_i16_scalar(&w[..len], &c[..len]),
                exact(&w[..len], &c[..len])
            );
        }
        for sign in [32767i16, -32767] {
            let w = vec![sign; n];
            let c = vec![255u8; n];
            let want = sign as i64 * 255 * n as i64;
            assert_eq!(dot_u8_i16(&w, &c), want);
            assert_eq!(
                dot_u8_i16(&w[..4096 + 64], &c[..4096 + 64]),
                want / n as i64 * 4160
            );
        }
    }

    /// `dot` lies within `error` of `Σ q_i · code_i` (summed in f64), for unit queries, for
    /// queries with one large coordinate, and for tiny ones; all zeros and non-finite
    /// queries take the float path (`None`).
    #[test]
    fn rounded_queries_stay_within_their_error() {
        let mut s = 11u64;
        let dim = 384;
        let mut worst = 0f64;
        for t in 0..200 {
            let mut q: Vec<f32> = (0..dim)
                .map(|_| (lcg(&mut s) % 20001) as f32 / 10000.0 - 1.0)
                .collect();
            if t % 3 == 1 {
                q[t % dim] = 40.0;
            }
            let norm = q.iter().map(|x| x * x).sum::<f32>().sqrt();
            let scale = if t % 3 == 2 { 1e-20 } else { 1.0 / norm };
            q.iter_mut().for_each(|x| *x *= scale);
            let code: Vec<u8> = (0..dim).map(|_| lcg(&mut s) as u8).collect();
            let rq = RouteQuery::new(&q).unwrap();
            let exact: f64 = q
                .iter()
                .zip(&code)
                .map(|(&a, &b)| a as f64 * b as f64)
                .sum();
            let err = rq.error(&code) as f64;
            let off = (rq.dot(&code) as f64 - exact).abs();
            assert!(off <= err + exact.abs() * 1e-6, "{t}: {off} > {err}");
            worst = worst.max(off / err);
        }
        // The bound is not loose by orders of magnitude either.
        assert!(worst > 1e-3, "{worst}");
        assert!(RouteQuery::new(&[0.0; 8]).is_none());
        assert!(RouteQuery::new(&[1.0, f32::NAN]).is_none());
        assert!(RouteQuery::new(&[1.0, f32::INFINITY]).is_none());
    }
}
