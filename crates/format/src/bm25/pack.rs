//! Bit-packed posting blocks: a full block's [`BLOCK`] values at one bit width, four lanes
//! interleaved (value `4·s + j` is the `s`-th value of lane `j`), so that decoding works on four
//! values at once with the same shifts (the layout of tantivy's `BitPacker4x`): SSE2 intrinsics
//! on x86_64 (part of its baseline, [`sse2`]), one lane at a time elsewhere.
//!
//! A packed block of `BLOCK` values at width `b` (0 to 32) is `16·b` bytes: `b` little-endian
//! `u32` words per lane, word `w` of lane `j` at index `4·w + j`. Lane `j`'s words hold its 32
//! values back to back from the lowest bit up, a value that crosses a word boundary continuing
//! at bit 0 of the next word.

/// Values in a packed block (the postings block size, `bm25::BLOCK`, is defined as this).
pub(super) const BLOCK: usize = 128;

/// Values per lane.
const STEPS: usize = BLOCK / 4;

/// Bits needed for the largest of `values` (0 when all are 0).
pub(super) fn width(values: &[u32]) -> u32 {
    32 - values.iter().fold(0, |a, &v| a | v).leading_zeros()
}

/// Appends `values` (exactly [`BLOCK`], each below `2^b`) packed at width `b` to `out`.
pub(super) fn pack(values: &[u32], b: u32, out: &mut Vec<u8>) {
    debug_assert!(values.len() == BLOCK && b <= 32);
    if b == 0 {
        return; // every value is 0: nothing to store
    }
    // At most 4 lanes × 32 words.
    let mut words = [0u32; 4 * 32];
    let words = &mut words[..4 * b as usize];
    for (i, &v) in values.iter().enumerate() {
        debug_assert!(b == 32 || v >> b == 0);
        let (s, j) = (i / 4, i % 4);
        let bit = s * b as usize;
        let (w, off) = (bit / 32, (bit % 32) as u32);
        words[4 * w + j] |= v << off;
        if off + b > 32 {
            words[4 * (w + 1) + j] |= v >> (32 - off);
        }
    }
    for w in words.iter() {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

/// Bytes of a block packed at width `b`.
pub(super) fn packed_len(b: u32) -> usize {
    16 * b as usize
}

/// Unpacks [`BLOCK`] values of width `b` from `bytes` (exactly [`packed_len`]`(b)` of them)
/// into `out`: four at a time with SSE2 on x86_64 (part of its baseline), else
/// [`unpack_scalar`].
pub(super) fn unpack(bytes: &[u8], b: u32, out: &mut [u32; BLOCK]) {
    assert!(
        b <= 32 && bytes.len() == packed_len(b),
        "packed block length"
    );
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of x86_64; `bytes` holds exactly `b` 16-byte words (asserted).
    unsafe {
        sse2::unpack(bytes, b, out)
    }
    #[cfg(not(target_arch = "x86_64"))]
    unpack_scalar(bytes, b, out)
}

/// [`unpack`] one lane at a time (the reference the SSE2 path is tested against).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
pub(super) fn unpack_scalar(bytes: &[u8], b: u32, out: &mut [u32; BLOCK]) {
    if b == 0 {
        out.fill(0);
        return;
    }
    let mask = if b == 32 { u32::MAX } else { (1u32 << b) - 1 };
    let word = |w: usize, j: usize| {
        let at = 4 * (4 * w + j);
        u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
    };
    for j in 0..4 {
        let (mut w, mut bit) = (0usize, 0u32);
        for s in 0..STEPS {
            let mut v = word(w, j) >> bit;
            bit += b;
            if bit >= 32 {
                bit -= 32;
                w += 1;
                if bit > 0 {
                    // The value continues in the next word: its low `b - bit` bits came from
                    // this one, the rest are the next word's lowest `bit` bits.
                    v |= word(w, j) << (b - bit);
                }
            }
            out[4 * s + j] = v & mask;
        }
    }
}

/// Document ids from the gaps of a full block, in place: id `i` is `base + i + Σ_{k≤i} gap_k`
/// (each id the previous one + 1 + its gap, the first `base` + its gap). `None` when an id
/// would pass `u32::MAX`.
pub(super) fn gaps_to_docs(gaps: &mut [u32; BLOCK], base: u64, width: u32) -> Option<()> {
    // No id can pass u32::MAX when even gaps all at the width's maximum would keep the last
    // one (at most `most - 1`) below it.
    let most = base + ((BLOCK as u64) << width.min(32));
    if most <= u64::from(u32::MAX) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE2 is part of x86_64.
        unsafe {
            sse2::prefix(gaps, base as u32);
        }
        #[cfg(not(target_arch = "x86_64"))]
        prefix_scalar(gaps, base as u32);
        return Some(());
    }
    let mut d = base;
    for slot in gaps.iter_mut() {
        d += u64::from(*slot);
        *slot = u32::try_from(d).ok()?;
        d += 1;
    }
    Some(())
}

/// [`gaps_to_docs`]'s sum, one id at a time, without overflow checks (the caller has ruled
/// overflow out).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
pub(super) fn prefix_scalar(gaps: &mut [u32; BLOCK], base: u32) {
    let mut d = base;
    for slot in gaps.iter_mut() {
        d = d.wrapping_add(*slot);
        *slot = d;
        d = d.wrapping_add(1);
    }
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use std::arch::x86_64::*;

    use super::{BLOCK, STEPS};

    /// [`super::unpack`]: lane `j` of each 128-bit word is lane `j` of the layout. One
    /// function per width ([`unpack_width`]), so that the compiler knows where each step's
    /// word boundaries fall (which steps load a word, which carry bits over) and can unroll
    /// the 32 steps.
    ///
    /// # Safety
    /// `bytes` holds exactly `b` 16-byte words, `b <= 32`.
    pub(super) unsafe fn unpack(bytes: &[u8], b: u32, out: &mut [u32; BLOCK]) {
        macro_rules! by_width {
            ($($w:literal)*) => {
                match b {
                    $($w => unpack_width::<$w>(bytes, out),)*
                    _ => out.fill(0),
                }
            };
        }
        by_width!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32)
    }

    /// [`unpack`] at width `B` (1 to 32).
    ///
    /// # Safety
    /// `bytes` holds exactly `B` 16-byte words.
    #[inline(always)]
    unsafe fn unpack_width<const B: u32>(bytes: &[u8], out: &mut [u32; BLOCK]) {
        let words = bytes.as_ptr().cast::<__m128i>();
        let dst = out.as_mut_ptr().cast::<__m128i>();
        let mask = _mm_set1_epi32(if B == 32 {
            -1
        } else {
            ((1u32 << B) - 1) as i32
        });
        let mut w = 0usize;
        let mut cur = _mm_loadu_si128(words);
        let mut bit = 0u32;
        for s in 0..STEPS {
            let mut v = _mm_srl_epi32(cur, _mm_cvtsi32_si128(bit as i32));
            bit += B;
            if bit >= 32 {
                bit -= 32;
                w += 1;
                if w < B as usize {
                    let next = _mm_loadu_si128(words.add(w));
                    if bit > 0 {
                        let high = _mm_sll_epi32(next, _mm_cvtsi32_si128((B - bit) as i32));
                        v = _mm_or_si128(v, high);
                    }
                    cur = next;
                }
            }
            _mm_storeu_si128(dst.add(s), _mm_and_si128(v, mask));
        }
    }

    /// [`super::prefix_scalar`] four ids at a time: gap + 1, an inclusive scan inside the
    /// register, plus the previous register's last id.
    ///
    /// # Safety
    /// SSE2 only (part of x86_64).
    pub(super) unsafe fn prefix(gaps: &mut [u32; BLOCK], base: u32) {
        let p = gaps.as_mut_ptr().cast::<__m128i>();
        let one = _mm_set1_epi32(1);
        // The id before the first: base - 1 (wrapping: the first id is base + its gap).
        let mut carry = _mm_set1_epi32(base.wrapping_sub(1) as i32);
        for s in 0..BLOCK / 4 {
            let mut x = _mm_add_epi32(_mm_loadu_si128(p.add(s)), one);
            x = _mm_add_epi32(x, _mm_slli_si128(x, 4));
            x = _mm_add_epi32(x, _mm_slli_si128(x, 8));
            x = _mm_add_epi32(x, carry);
            _mm_storeu_si128(p.add(s), x);
            carry = _mm_shuffle_epi32(x, 0xFF);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorshift(seed: &mut u64) -> u64 {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    }

    #[test]
    fn every_width_round_trips() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for b in 0..=32u32 {
            for round in 0..20 {
                let values: Vec<u32> = (0..BLOCK)
                    .map(|i| {
                        let r = xorshift(&mut seed) as u32;
                        let v = match round {
                            0 => u32::MAX, // every bit set
                            1 => 0,
                            2 => i as u32,
                            _ => r,
                        };
                        if b == 32 {
                            v
                        } else {
                            v & ((1u32 << b) - 1)
                        }
                    })
                    .collect();
                let mut bytes = Vec::new();
                pack(&values, b, &mut bytes);
                assert_eq!(bytes.len(), packed_len(b));
                let mut out = [7u32; BLOCK];
                unpack(&bytes, b, &mut out);
                assert_eq!(
                    out.as_slice(),
                    values.as_slice(),
                    "width {b}, round {round}"
                );
                let mut out = [7u32; BLOCK];
                unpack_scalar(&bytes, b, &mut out);
                assert_eq!(out.as_slice(), values.as_slice(), "scalar, width {b}");
                assert!(width(&values) <= b);
            }
        }
    }

    /// The ids from gaps: the vector sum and the scalar one agree, from any base; a block
    /// whose ids would pass `u32::MAX` is refused.
    #[test]
    fn gaps_become_ascending_ids() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for width in [0u32, 1, 3, 7, 12, 20] {
            for base in [0u64, 1, 5_000, (1 << 24) + 3] {
                let gaps: Vec<u32> = (0..BLOCK)
                    .map(|_| {
                        let r = xorshift(&mut seed) as u32;
                        if width == 0 {
                            0
                        } else {
                            r & ((1u32 << width) - 1)
                        }
                    })
                    .collect();
                let mut want = Vec::new();
                let mut d = base;
                for &g in &gaps {
                    d += u64::from(g);
                    want.push(d as u32);
                    d += 1;
                }
                let mut got: [u32; BLOCK] = gaps.clone().try_into().unwrap();
                gaps_to_docs(&mut got, base, width).unwrap();
                assert_eq!(got.as_slice(), want.as_slice(), "width {width} base {base}");
                let mut got: [u32; BLOCK] = gaps.try_into().unwrap();
                prefix_scalar(&mut got, base as u32);
                assert_eq!(got.as_slice(), want.as_slice(), "scalar");
            }
        }
        // The fast path's limit: gaps at the width's maximum from the largest base it takes
        // end at u32::MAX - 1, summed as the checked loop sums them.
        let width = 10;
        let base = u64::from(u32::MAX) - (BLOCK as u64) * (1 << width);
        let mut g = [(1u32 << width) - 1; BLOCK];
        gaps_to_docs(&mut g, base, width).unwrap();
        assert_eq!(u64::from(g[BLOCK - 1]), u64::from(u32::MAX) - 1);
        assert!(g.windows(2).all(|w| w[1] == w[0] + (1 << width)));
        // The last id lands exactly on u32::MAX: accepted; one more: refused.
        let mut gaps = [0u32; BLOCK];
        gaps[BLOCK - 1] = 1000;
        let base = u64::from(u32::MAX) - 1000 - (BLOCK as u64 - 1);
        let mut g = gaps;
        gaps_to_docs(&mut g, base, 10).unwrap();
        assert_eq!(g[BLOCK - 1], u32::MAX);
        let mut g = gaps;
        assert!(gaps_to_docs(&mut g, base + 1, 10).is_none());
    }

    #[test]
    fn width_is_the_bits_of_the_largest_value() {
        assert_eq!(width(&[0, 0]), 0);
        assert_eq!(width(&[1, 0]), 1);
        assert_eq!(width(&[3, 4]), 3);
        assert_eq!(width(&[u32::MAX]), 32);
        assert_eq!(width(&[]), 0);
    }

    /// The layout is fixed (it is on disk): value `4·s + j` at bit `s·b` of lane `j`.
    #[test]
    fn layout_interleaves_four_lanes() {
        let values: Vec<u32> = (0..BLOCK as u32).collect();
        let mut bytes = Vec::new();
        pack(&values, 8, &mut bytes);
        // Word 0 of lane 0 holds values 0, 4, 8, 12; of lane 1 values 1, 5, 9, 13.
        assert_eq!(&bytes[0..4], &[0, 4, 8, 12]);
        assert_eq!(&bytes[4..8], &[1, 5, 9, 13]);
        assert_eq!(&bytes[16..20], &[16, 20, 24, 28]);
    }
}
