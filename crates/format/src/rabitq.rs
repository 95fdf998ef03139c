//! `ivf.rbq`: one bit per dimension for every vector of an IVF segment (RaBitQ, Gao & Long,
//! SIGMOD 2024), scanned instead of the SQ8 codes of `ivf.faiss` to choose the candidates that
//! are re-ranked exactly.
//!
//! Why: at a million chunks the default probe budget scans about a ninth of the vectors, and
//! an SQ8 code is `dim` bytes (384), so a query streamed ~43 MB of codes: ~4 ms of memory
//! bandwidth on one core before any arithmetic. A code here is `dim` bits plus two floats and
//! the chunk id (60 bytes at 384 dimensions), and 32 codes are estimated at once by table
//! lookups in SIMD registers.
//!
//! Encoding a vector `o` of list `l` (centroid `c`): the residual `r = o − c` is rotated by a
//! fixed random orthogonal transform `P` (below), and the code keeps the signs `b` of `P·r`,
//! `f = ‖r‖² / ‖P·r‖₁` and `g = f · (2·|b| − dim)`. For a query `q` with `q' = P·q`,
//!
//! ```text
//! q·o = q·c + q·r ≈ q·c + f · Σ_i (2·b_i − 1) · q'_i
//! ```
//!
//! which is RaBitQ's unbiased estimator `‖r‖ · ⟨x̄, q'⟩ / ⟨x̄, P·r/‖r‖⟩` with
//! `x̄ = (2b − 1)/√dim`, folded into one factor. The query side is quantised to 4 bits per
//! dimension (`q'_i ≈ lo + Δ·k_i`), so the estimate is
//! `q·c + lo·g + f·Δ·(2·Σ_i b_i·k_i − Σ_i k_i)`, and `Σ b_i·k_i` is a sum of 16-entry table
//! lookups, one per group of 4 dimensions, done for 32 codes per shuffle instruction
//! (FAISS's "fast scan" layout). The estimate's error shrinks as `1/√dim` (RaBitQ's bound);
//! candidates are over-fetched and re-ranked exactly on the raw rows, as the SQ8 ones were.
//!
//! `P` is not stored: it is four rounds of (random signs, a normalised fast Walsh–Hadamard
//! transform over the first or last `2^⌊log₂ dim⌋` coordinates, a butterfly between the two
//! halves when `dim` is not a power of two), with the signs drawn from [`SEED`]. Every step
//! is orthogonal, costs `O(dim log dim)` and uses only additions, subtractions and
//! multiplications in a fixed order, so codes are the same on every machine.
//!
//! Payload (after the 64-byte component header; little-endian):
//!
//! ```text
//! dim:u32 groups:u32 nlist:u64 n:u64 seed:u64 | nlist × u64 list sizes
//! per list, in `ivf.faiss`'s list order and its order within the list, ⌈size/32⌉ blocks:
//!   groups × 16 bytes: group j's byte i = half-byte of code i | half-byte of code i+16 << 4
//!                      (bit t of a half-byte = dimension 4j + t)
//!   32 × f:f32 | 32 × g:f32 | 32 × chunk:u32 (u32::MAX in the padding after the last code)
//! ```
//!
//! `groups` is `2·⌈dim/8⌉` (dimensions past `dim` are zero). The list sizes must equal
//! `ivf.faiss`'s (checked when opened beside it); every chunk id is checked against the
//! segment's chunk count when scanned, and [`MappedRbq::check_ids`] (the verifier) checks that
//! each list names `ivf.faiss`'s chunks in its order, once each, followed by padding.

use std::path::{Path, PathBuf};

use memmap2::Mmap;
use rayon::prelude::*;
use roaring::RoaringBitmap;

use crate::header::{self, Component, HEADER_LEN};
use crate::ivf_map::{Best, MappedIvf};
use crate::{corrupt, io_err, FormatError, Result};

/// The least dimension that gets one-bit codes: the estimate's error grows as `1/√dim`, and
/// below this (test models, small embeddings) the SQ8 codes are scanned instead (at 32
/// dimensions recall@10 on uniform vectors fell to 0.67 against SQ8's 0.9+).
pub const MIN_DIM: usize = 128;

/// The largest dimension that gets one-bit codes: a code's table sum is at most 15 per
/// dimension and is kept in 16 bits.
pub const MAX_DIM: usize = 65_535 / 15;

/// Whether segments of dimension `dim` get one-bit codes.
pub fn applies(dim: usize) -> bool {
    (MIN_DIM..=MAX_DIM).contains(&dim)
}

/// The seed of the rotation's random signs.
pub const SEED: u64 = 0x5241_4269_7451_0001;
/// Rounds of the rotation.
const ROUNDS: usize = 4;
/// Bytes of the prelude before the list sizes.
const PRELUDE: usize = 32;
/// Query quantisation levels (4 bits).
const QUERY_BITS: u32 = 4;
/// Vectors per block: one lane of a 16-entry shuffle lookup per vector and half-byte.
pub const BLOCK: usize = 32;
/// Block slot of a padding vector.
const PAD: u32 = u32::MAX;

/// Groups of 4 dimensions (half-bytes of a code), rounded up to an even count so that one
/// 32-byte load covers two groups.
pub fn groups(dim: usize) -> usize {
    2 * dim.div_ceil(8)
}

/// Bytes of one block of [`BLOCK`] codes: the packed half-bytes, then 32 factors `f`, 32
/// factors `g` and 32 chunk ids.
fn block_bytes(dim: usize) -> usize {
    16 * groups(dim) + BLOCK * 12
}

/// The fixed random orthogonal transform of a dimension.
#[derive(Debug, Clone)]
pub struct Rotation {
    dim: usize,
    /// Largest power of two ≤ dim: the span of each Hadamard transform.
    span: usize,
    /// ROUNDS × dim signs (±1).
    signs: Vec<f32>,
}

impl Rotation {
    pub fn new(dim: usize, seed: u64) -> Rotation {
        let span = if dim == 0 {
            0
        } else {
            1usize << (usize::BITS - 1 - dim.leading_zeros())
        };
        let mut state = seed;
        let mut next = || {
            // splitmix64
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let signs = (0..ROUNDS * dim)
            .map(|_| if next() & 1 == 1 { -1.0 } else { 1.0 })
            .collect();
        Rotation { dim, span, signs }
    }

    /// `x ← P·x` in place (`x.len() == dim`).
    pub fn apply(&self, x: &mut [f32]) {
        let d = self.dim;
        if x.len() != d || d == 0 {
            return;
        }
        let norm = 1.0 / (self.span as f32).sqrt();
        let half = d / 2;
        let root_half = std::f32::consts::FRAC_1_SQRT_2;
        for r in 0..ROUNDS {
            for (v, s) in x.iter_mut().zip(&self.signs[r * d..(r + 1) * d]) {
                *v *= s;
            }
            let part = if r % 2 == 0 {
                &mut x[..self.span]
            } else {
                &mut x[d - self.span..]
            };
            fwht(part);
            for v in part.iter_mut() {
                *v *= norm;
            }
            // A power-of-two dimension is mixed by the transforms alone (the butterfly would
            // pair up coordinates a transform has just made equal in magnitude).
            // At dim = span + 1 the butterfly would pair exactly the coordinates of the
            // transform's last stage and undo it; the transforms over the first and last
            // `span` coordinates mix everything then.
            if half > 0 && self.span < d && 2 * half != self.span {
                let (a, b) = x.split_at_mut(half);
                for (u, w) in a.iter_mut().zip(&mut b[..half]) {
                    let (s, t) = (*u + *w, *u - *w);
                    *u = s * root_half;
                    *w = t * root_half;
                }
            }
        }
    }
}

/// Unnormalised fast Walsh–Hadamard transform (length a power of two).
fn fwht(x: &mut [f32]) {
    let n = x.len();
    let mut h = 1;
    while h < n {
        for block in x.chunks_exact_mut(2 * h) {
            let (a, b) = block.split_at_mut(h);
            for (u, w) in a.iter_mut().zip(b.iter_mut()) {
                let (s, t) = (*u + *w, *u - *w);
                *u = s;
                *w = t;
            }
        }
        h *= 2;
    }
}

/// One vector's code before packing: sign bits by dimension (dimension `i` is bit `i % 64`
/// of word `i / 64`), `f` and `g`.
struct Code<'a> {
    bits: &'a [u64],
    f: f32,
    g: f32,
}

impl Code<'_> {
    fn bit(&self, i: usize) -> bool {
        (self.bits[i / 64] >> (i % 64)) & 1 == 1
    }
}

/// Words of sign bits per code at `dim`.
fn words(dim: usize) -> usize {
    dim.div_ceil(64)
}

/// Encodes `vector` of the list with centroid `centroid`: its sign bits into `bits`
/// ([`words`]`(dim)` words, overwritten), and returns `(f, g)`.
fn encode_one(rot: &Rotation, vector: &[f32], centroid: &[f32], bits: &mut [u64]) -> (f32, f32) {
    let mut r: Vec<f32> = vector.iter().zip(centroid).map(|(o, c)| o - c).collect();
    let sq: f32 = crate::vectors::dot(&r, &r);
    rot.apply(&mut r);
    let l1: f32 = r.iter().map(|v| v.abs()).sum();
    bits.fill(0);
    let mut ones = 0usize;
    for (i, v) in r.iter().enumerate() {
        if *v > 0.0 {
            bits[i / 64] |= 1 << (i % 64);
            ones += 1;
        }
    }
    let f = if l1 > 0.0 { sq / l1 } else { 0.0 };
    (f, f * (2.0 * ones as f32 - r.len() as f32))
}

/// Appends one block of up to [`BLOCK`] codes (with their chunk ids) to `out`; missing slots
/// are padding (no bits, factors 0, id [`PAD`]).
fn pack_block(codes: &[(Code, u32)], dim: usize, out: &mut Vec<u8>) {
    let g = groups(dim);
    let nibble = |v: usize, grp: usize| -> u8 {
        let Some((c, _)) = codes.get(v) else { return 0 };
        (0..4).fold(0u8, |acc, t| {
            let i = 4 * grp + t;
            acc | (u8::from(i < dim && c.bit(i)) << t)
        })
    };
    for grp in 0..g {
        for j in 0..16 {
            out.push(nibble(j, grp) | (nibble(j + 16, grp) << 4));
        }
    }
    for v in 0..BLOCK {
        out.extend_from_slice(&codes.get(v).map_or(0.0, |c| c.0.f).to_le_bytes());
    }
    for v in 0..BLOCK {
        out.extend_from_slice(&codes.get(v).map_or(0.0, |c| c.0.g).to_le_bytes());
    }
    for v in 0..BLOCK {
        out.extend_from_slice(&codes.get(v).map_or(PAD, |c| c.1).to_le_bytes());
    }
}

/// Rows [`encode`] encodes between two calls of its `consumed`.
const ENCODE_PASS: usize = 16_384;

/// The payload of `ivf.rbq` for the segment whose `ivf.faiss` is `ivf` and whose rows are
/// `vectors`: every row's code (its residual to the centroid of the list that
/// holds it), computed in row order [`ENCODE_PASS`] rows at a time, each pass in parallel and
/// followed by `consumed(rows)` (the segment writer drops those rows' mapped pages there: read
/// by list, the rows of every list are spread over the whole file, which then stayed mapped
/// in full); then the lists' blocks, packed in parallel and concatenated in list order. The
/// bytes depend neither on the thread count nor on the passes. The codes are held packed
/// until then: 8 bytes per 64 dimensions, two floats and the list index per row. A vector
/// named by no list gets no code; one named twice (FAISS writes each id once) is an error.
pub fn encode(
    ivf: &MappedIvf,
    vectors: &[f32],
    dim: usize,
    consumed: &(dyn Fn(std::ops::Range<usize>) + Sync),
) -> Result<Vec<u8>> {
    let n = vectors.len() / dim.max(1);
    let nlist = ivf.nlist();
    let rot = Rotation::new(dim, SEED);
    // Which list holds each row.
    let mut list_of = vec![u32::MAX; n];
    for l in 0..nlist {
        for id in ivf.list_ids(l) {
            let row = usize::try_from(id).ok().filter(|&i| i < n).ok_or_else(|| {
                FormatError::InvalidInput(format!("IVF list {l} names vector {id} of {n}"))
            })?;
            if list_of[row] != u32::MAX {
                return Err(FormatError::InvalidInput(format!(
                    "IVF list {l} names vector {id}, which list {} names already",
                    list_of[row]
                )));
            }
            list_of[row] = l as u32;
        }
    }
    let centroids = ivf.centroids();
    let w = words(dim);
    let mut bits = vec![0u64; n * w];
    let mut factors = vec![(0f32, 0f32); n];
    let mut start = 0;
    while start < n {
        let end = (start + ENCODE_PASS).min(n);
        bits[start * w..end * w]
            .par_chunks_mut(w.max(1))
            .zip(factors[start..end].par_iter_mut())
            .enumerate()
            .for_each(|(i, (b, fg))| {
                let row = start + i;
                let l = list_of[row] as usize;
                if l < nlist {
                    let centroid = &centroids[l * dim..(l + 1) * dim];
                    *fg = encode_one(&rot, &vectors[row * dim..(row + 1) * dim], centroid, b);
                }
            });
        consumed(start..end);
        start = end;
    }
    let blocks: usize = (0..nlist).map(|l| ivf.list_len(l).div_ceil(BLOCK)).sum();
    let mut out = Vec::with_capacity(PRELUDE + 8 * nlist + blocks * block_bytes(dim));
    out.extend_from_slice(&(dim as u32).to_le_bytes());
    out.extend_from_slice(&(groups(dim) as u32).to_le_bytes());
    out.extend_from_slice(&(nlist as u64).to_le_bytes());
    out.extend_from_slice(&(n as u64).to_le_bytes());
    out.extend_from_slice(&SEED.to_le_bytes());
    for l in 0..nlist {
        out.extend_from_slice(&(ivf.list_len(l) as u64).to_le_bytes());
    }
    let lists: Vec<Vec<u8>> = (0..nlist)
        .into_par_iter()
        .with_max_len(1)
        .map(|l| {
            // Every id was checked above.
            let codes: Vec<(Code<'_>, u32)> = ivf
                .list_ids(l)
                .map(|id| {
                    let row = id as usize;
                    let (f, g) = factors[row];
                    let code = Code {
                        bits: &bits[row * w..(row + 1) * w],
                        f,
                        g,
                    };
                    (code, row as u32)
                })
                .collect();
            let mut part = Vec::with_capacity(codes.len().div_ceil(BLOCK) * block_bytes(dim));
            for block in codes.chunks(BLOCK) {
                pack_block(block, dim, &mut part);
            }
            part
        })
        .collect();
    for part in lists {
        out.extend_from_slice(&part);
    }
    Ok(out)
}

/// A query prepared for the scan: rotated, quantised to 4 bits per dimension
/// (`q'_i ≈ lo + delta · k_i`), and one 16-entry table per group of 4 dimensions whose entry
/// `p` is `Σ k_i` over the dimensions set in `p`.
#[derive(Debug, PartialEq)]
struct Prepared {
    /// groups × 16 entries (at most 60 each).
    luts: Vec<u8>,
    lo: f32,
    delta: f32,
    /// Σ k_i.
    level_sum: f32,
}

impl Prepared {
    fn new(rot: &Rotation, query: &[f32]) -> Prepared {
        let mut q = query.to_vec();
        rot.apply(&mut q);
        let lo = q.iter().copied().fold(f32::INFINITY, f32::min);
        let hi = q.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let top = ((1 << QUERY_BITS) - 1) as f32;
        let delta = if hi > lo { (hi - lo) / top } else { 0.0 };
        let levels: Vec<u8> = q
            .iter()
            .map(|v| {
                if delta > 0.0 {
                    (((v - lo) / delta) + 0.5).floor().clamp(0.0, top) as u8
                } else {
                    0
                }
            })
            .collect();
        let g = groups(q.len());
        let mut luts = vec![0u8; g * 16];
        for (grp, lut) in luts.chunks_exact_mut(16).enumerate() {
            // Entry `p` is entry `p` without its lowest set bit, plus that bit's level (the
            // same sums as adding each set bit's level: `Prepared::new` at 384 dimensions
            // 12.1 → 4.2 µs).
            for p in 1..16usize {
                let t = p.trailing_zeros() as usize;
                lut[p] = lut[p & (p - 1)] + levels.get(4 * grp + t).copied().unwrap_or(0);
            }
        }
        Prepared {
            luts,
            lo,
            delta,
            level_sum: levels.iter().map(|&k| k as f32).sum(),
        }
    }
}

thread_local! {
    /// The query the last scan on this thread prepared, and what it prepared.
    static LAST_PREPARED: std::cell::RefCell<Option<(Vec<f32>, std::rc::Rc<Prepared>)>> =
        const { std::cell::RefCell::new(None) };
}

/// [`Prepared::new`] for `query` under `rot`, reused from the last call on this thread when
/// that was for the same query (the same bits) at the same dimension. Every `ivf.rbq` is
/// rotated by the same transform of its dimension (the seed is [`SEED`], checked at open),
/// and a search scans its segments one after another with one query, so the rotation, the
/// quantisation and the tables are made once per query and thread instead of once per
/// segment (nine times per query at 1M chunks). The result is the same either way.
fn prepared(rot: &Rotation, query: &[f32]) -> std::rc::Rc<Prepared> {
    // The same length is the same dimension, and so the same rotation.
    let same = |last: &[f32]| {
        last.len() == query.len()
            && last
                .iter()
                .zip(query)
                .all(|(a, b)| a.to_bits() == b.to_bits())
    };
    LAST_PREPARED.with(|cell| {
        let mut cell = cell.borrow_mut();
        if let Some((last, p)) = cell.as_ref() {
            if same(last) {
                return p.clone();
            }
        }
        let p = std::rc::Rc::new(Prepared::new(rot, query));
        *cell = Some((query.to_vec(), p.clone()));
        p
    })
}

/// `Σ_i b_i · k_i` for the 32 codes of a block (`codes`: groups × 16 packed bytes), by table
/// lookups: the portable version, and the oracle of the AVX2 one.
pub(crate) fn block_sums_scalar(codes: &[u8], luts: &[u8], out: &mut [u16; BLOCK]) {
    *out = [0; BLOCK];
    for (bytes, lut) in codes.chunks_exact(16).zip(luts.chunks_exact(16)) {
        for j in 0..16 {
            out[j] += lut[(bytes[j] & 15) as usize] as u16;
            out[j + 16] += lut[(bytes[j] >> 4) as usize] as u16;
        }
    }
}

/// `ivf.rbq` read in place.
pub struct MappedRbq {
    map: Mmap,
    path: PathBuf,
    dim: usize,
    n: usize,
    rot: Rotation,
    /// Per list: byte offset of its first block and its number of (real) codes.
    lists: Vec<(usize, usize)>,
}

impl std::fmt::Debug for MappedRbq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MappedRbq(nlist={}, n={})", self.lists.len(), self.n)
    }
}

fn le_u32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn le_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_le_bytes(a)
}

impl MappedRbq {
    /// The mapped file (for [`crate::populate`]).
    pub(crate) fn map(&self) -> &Mmap {
        &self.map
    }

    /// Maps `path`, checks its header against the segment (`dim`, `model_id`) and its lists
    /// against `ivf` (same list count and sizes).
    pub fn open(path: &Path, dim: usize, model_id: &str, ivf: &MappedIvf) -> Result<MappedRbq> {
        let f = std::fs::File::open(path).map_err(io_err(path))?;
        // SAFETY: segment files are immutable once written (see `ivf_map`); every read below
        // is bounds-checked against the map's length.
        let map = unsafe { Mmap::map(&f) }.map_err(io_err(path))?;
        header::check(path, &map, Component::Rabitq, Some(dim as u32), model_id)?;
        let p = &map[HEADER_LEN..];
        if p.len() < PRELUDE {
            return Err(corrupt(path, "truncated before the list sizes"));
        }
        let (fdim, fgroups) = (le_u32(&p[0..]) as usize, le_u32(&p[4..]) as usize);
        let (nlist, n, seed) = (le_u64(&p[8..]), le_u64(&p[16..]), le_u64(&p[24..]));
        if fdim != dim || fgroups != groups(dim) || dim > MAX_DIM {
            return Err(corrupt(
                path,
                format!("codes of dimension {fdim} ({fgroups} groups), the segment has {dim}"),
            ));
        }
        if nlist != ivf.nlist() as u64 || n != ivf.len() as u64 {
            return Err(corrupt(
                path,
                format!(
                    "{nlist} lists of {n} codes, ivf.faiss has {} lists of {}",
                    ivf.nlist(),
                    ivf.len()
                ),
            ));
        }
        if seed != SEED {
            return Err(FormatError::Faiss {
                path: path.to_path_buf(),
                detail: format!("unsupported rotation seed {seed:#x}"),
            });
        }
        let nlist = nlist as usize;
        if p.len() < PRELUDE + 8 * nlist {
            return Err(corrupt(path, "truncated in the list sizes"));
        }
        let mut lists = Vec::with_capacity(nlist);
        let mut at = HEADER_LEN + PRELUDE + 8 * nlist;
        for l in 0..nlist {
            let len = le_u64(&p[PRELUDE + 8 * l..]);
            if len != ivf.list_len(l) as u64 {
                return Err(corrupt(
                    path,
                    format!(
                        "list {l} holds {len} codes, ivf.faiss's {}",
                        ivf.list_len(l)
                    ),
                ));
            }
            lists.push((at, len as usize));
            at += (len as usize).div_ceil(BLOCK) * block_bytes(dim);
        }
        if at != map.len() {
            return Err(corrupt(
                path,
                format!("{} bytes, the lists need {at}", map.len()),
            ));
        }
        Ok(MappedRbq {
            map,
            path: path.to_path_buf(),
            dim,
            n: n as usize,
            rot: Rotation::new(dim, SEED),
            lists,
        })
    }

    /// The blocks of list `l` (empty for a list past the end).
    fn blocks(&self, l: usize) -> std::slice::ChunksExact<'_, u8> {
        let bb = block_bytes(self.dim);
        let (at, len) = self.lists.get(l).copied().unwrap_or((0, 0));
        self.map[at..at + len.div_ceil(BLOCK) * bb].chunks_exact(bb)
    }

    /// Checks that every list holds its codes first and padding after, that they name the
    /// chunks of `ivf`'s list in its order (so each estimate adds the right centroid), and
    /// that they name every chunk exactly once (the verifier's check; queries only skip ids
    /// out of range).
    pub fn check_ids(&self, ivf: &MappedIvf) -> Result<()> {
        let ids_at = 16 * groups(self.dim) + 8 * BLOCK;
        let mut seen = vec![false; self.n];
        for (l, &(_, len)) in self.lists.iter().enumerate() {
            let mut expected = ivf.list_ids(l);
            for (b, block) in self.blocks(l).enumerate() {
                for v in 0..BLOCK {
                    let id = le_u32(&block[ids_at + 4 * v..]);
                    let ok = if b * BLOCK + v < len {
                        expected.next() == Some(u64::from(id))
                            && seen
                                .get_mut(id as usize)
                                .is_some_and(|s| !std::mem::replace(s, true))
                    } else {
                        id == PAD
                    };
                    if !ok {
                        return Err(corrupt(
                            &self.path,
                            format!(
                                "list {l} slot {}: chunk id {id} is out of place, out of \
                                 range, repeated or not ivf.faiss's",
                                b * BLOCK + v
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// The approximate top-`k` (chunk, estimated score) over the given lists, each with its
    /// `query · centroid`, best first; ties keep the smaller id. Filters apply inside the scan.
    pub fn scan(
        &self,
        query: &[f32],
        lists: &[(u32, f32)],
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
    ) -> Result<Vec<(u32, f32)>> {
        self.scan_above(query, lists, k, allow, deny, f32::NEG_INFINITY)
    }

    /// [`MappedRbq::scan`] among the estimates at or above `floor` (a caller merging several
    /// segments' candidates passes the `k`-th best found so far).
    pub fn scan_above(
        &self,
        query: &[f32],
        lists: &[(u32, f32)],
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
        floor: f32,
    ) -> Result<Vec<(u32, f32)>> {
        Ok(self
            .scan_best(query, lists, k, allow, deny, floor)?
            .into_sorted())
    }

    /// The scan of [`MappedRbq::scan_above`], its best `k` not yet sorted: `Segment`'s
    /// candidates take them in no particular order ([`Best::into_unordered`]).
    pub(crate) fn scan_best(
        &self,
        query: &[f32],
        lists: &[(u32, f32)],
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
        floor: f32,
    ) -> Result<Best> {
        if query.len() != self.dim {
            return Err(FormatError::InvalidInput(format!(
                "query has dimension {}, the codes {}",
                query.len(),
                self.dim
            )));
        }
        if k == 0 {
            return Ok(Best::above(0, floor));
        }
        let q = prepared(&self.rot, query);
        let q = &*q;
        let mut best = Best::above(k, floor);
        let bb = block_bytes(self.dim);
        let packed = 16 * groups(self.dim);
        // Every block to scan, in order, so that the one `AHEAD` blocks on (often in the
        // next list, elsewhere in the file) can be prefetched: lists are a few KB at random
        // offsets, too short for the hardware prefetcher to lock on.
        // Nearest lists first: their codes score highest, so the floor of the best `k`
        // rises early and later codes are rejected at one comparison.
        let mut order: Vec<(u32, f32)> = lists.to_vec();
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut todo: Vec<(usize, f32)> = Vec::new();
        for &(l, coarse) in &order {
            if let Some(&(at, len)) = self.lists.get(l as usize) {
                todo.extend((0..len.div_ceil(BLOCK)).map(|b| (at + b * bb, coarse)));
            }
        }
        // Into L2 (`prefetch_l2`): 30 lines a block asked into L1 filled its miss buffers and
        // the prefetches themselves stalled (27% of the scan's samples); four blocks ahead
        // into L2 the vector phase at 1M chunks took 27% less time (1.751 against 2.392 ms per
        // query, with the re-rank's rows below asked for the same way).
        const AHEAD: usize = 4;
        // The first line of every block first (scattered lists, a few pages each): their page
        // walks and first misses overlap (vector phase at 1M chunks 1.336 → 1.264 ms per
        // query, on top of the re-rank's rows asked for the same way).
        for &(at, _) in &todo {
            if let Some(first) = self.map.get(at..at + 1) {
                crate::prefetch_l2(first);
            }
        }
        let mut sums = [0u16; BLOCK];
        let mut scores = [0f32; BLOCK];
        for (i, &(at, coarse)) in todo.iter().enumerate() {
            if let Some(&(next, _)) = todo.get(i + AHEAD) {
                crate::prefetch_l2(&self.map[next..next + bb]);
            }
            let block = &self.map[at..at + bb];
            let (codes, tail) = block.split_at(packed);
            block_sums(codes, &q.luts, &mut sums);
            let (fs, rest) = tail.split_at(4 * BLOCK);
            let (gs, ids) = rest.split_at(4 * BLOCK);
            block_scores(coarse, q, fs, gs, &sums, &mut scores);
            // Which of the 32 may enter, found in one pass (the compiler vectorises it): most
            // codes of a query are below the floor once the first lists have been scanned.
            let mut may = admitted_mask(&scores, best.floor());
            while may != 0 {
                let v = may.trailing_zeros() as usize;
                may &= may - 1;
                let s = scores[v];
                // The floor rises as codes of this block enter.
                if !best.admits(s) {
                    continue;
                }
                let id = le_u32(&ids[4 * v..]);
                if (id as usize) < self.n && crate::admitted(id, allow, deny) {
                    best.push(s, id);
                }
            }
        }
        Ok(best)
    }
}

/// The estimates of a block's 32 codes (padding included: its factors are 0, so it scores
/// `coarse`), in a fixed order of operations (the compiler vectorises the fixed-size loops).
#[inline]
fn block_scores(
    coarse: f32,
    q: &Prepared,
    fs: &[u8],
    gs: &[u8],
    sums: &[u16; BLOCK],
    out: &mut [f32; BLOCK],
) {
    let mut f = [0f32; BLOCK];
    let mut g = [0f32; BLOCK];
    for v in 0..BLOCK {
        f[v] = f32::from_bits(le_u32(&fs[4 * v..]));
        g[v] = f32::from_bits(le_u32(&gs[4 * v..]));
    }
    for v in 0..BLOCK {
        out[v] = (coarse + q.lo * g[v]) + (f[v] * q.delta) * (2.0 * sums[v] as f32 - q.level_sum);
    }
}

/// Bit `v` set when `scores[v] >= floor` (the test of `Best::admits`; a NaN score is never
/// admitted).
#[inline]
fn admitted_mask(scores: &[f32; BLOCK], floor: f32) -> u32 {
    let mut mask = 0u32;
    for (v, &s) in scores.iter().enumerate() {
        mask |= u32::from(s >= floor) << v;
    }
    mask
}

/// [`block_sums_scalar`], with AVX-512 (BW) or AVX2 where the CPU has them.
#[inline]
fn block_sums(codes: &[u8], luts: &[u8], out: &mut [u16; BLOCK]) {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::avx512bw() && codes.len().is_multiple_of(32) && luts.len() == codes.len() {
            // SAFETY: AVX-512F and BW are present (checked once, cached); the lengths were
            // just checked.
            unsafe { simd::block_sums_avx512(codes, luts, out) };
            return;
        }
        if crate::cpu::avx2_fma() && codes.len().is_multiple_of(32) && luts.len() == codes.len() {
            // SAFETY: AVX2 is present (checked once, cached); the lengths were just checked.
            unsafe { simd::block_sums_avx2(codes, luts, out) };
            return;
        }
    }
    block_sums_scalar(codes, luts, out)
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    use super::BLOCK;

    /// [`block_sums_avx2`] four groups per step: a 64-byte load holds groups `4s` to `4s + 3`
    /// in its four 128-bit lanes (the shuffle looks up within each lane), so a 384-dimension
    /// block takes 24 steps instead of 48. A last half step (when the group count is not a
    /// multiple of four) loads its 32 bytes with the upper half zeroed: a zero table byte adds
    /// nothing. The four lanes hold the same 16 codes' sums over different groups and are
    /// added at the end; every sum is exact as in the AVX2 kernel (modulo 2^16, no code's sum
    /// above 65535).
    ///
    /// # Safety
    /// The CPU must support AVX-512F and AVX-512BW; `codes.len() == luts.len()`, a multiple
    /// of 32.
    #[target_feature(enable = "avx512f,avx512bw,avx2")]
    pub unsafe fn block_sums_avx512(codes: &[u8], luts: &[u8], out: &mut [u16; BLOCK]) {
        let low = _mm512_set1_epi8(0x0f);
        let (mut lo_all, mut lo_odd) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        let (mut hi_all, mut hi_odd) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        let full = codes.len() / 64;
        let half = codes.len() % 64 == 32;
        let mut step = |c: __m512i, t: __m512i| {
            let r_lo = _mm512_shuffle_epi8(t, _mm512_and_si512(c, low));
            let r_hi = _mm512_shuffle_epi8(t, _mm512_and_si512(_mm512_srli_epi16(c, 4), low));
            lo_all = _mm512_add_epi16(lo_all, r_lo);
            lo_odd = _mm512_add_epi16(lo_odd, _mm512_srli_epi16(r_lo, 8));
            hi_all = _mm512_add_epi16(hi_all, r_hi);
            hi_odd = _mm512_add_epi16(hi_odd, _mm512_srli_epi16(r_hi, 8));
        };
        for s in 0..full {
            // SAFETY: 64·s + 64 ≤ both lengths; unaligned loads.
            let c = _mm512_loadu_si512(codes.as_ptr().add(64 * s) as *const _);
            let t = _mm512_loadu_si512(luts.as_ptr().add(64 * s) as *const _);
            step(c, t);
        }
        if half {
            // SAFETY: the masked loads read the 32 bytes from 64·full, which both slices hold.
            let m: __mmask64 = 0xFFFF_FFFF;
            let c = _mm512_maskz_loadu_epi8(m, codes.as_ptr().add(64 * full) as *const i8);
            let t = _mm512_maskz_loadu_epi8(m, luts.as_ptr().add(64 * full) as *const i8);
            step(c, t);
        }
        let lo_even = _mm512_sub_epi16(lo_all, _mm512_slli_epi16(lo_odd, 8));
        let hi_even = _mm512_sub_epi16(hi_all, _mm512_slli_epi16(hi_odd, 8));
        // The four lanes: two 256-bit halves added, then the two lanes of that.
        let fold = |x: __m512i| {
            let y = _mm256_add_epi16(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64::<1>(x));
            _mm_add_epi16(_mm256_castsi256_si128(y), _mm256_extracti128_si256::<1>(y))
        };
        store_sums([lo_even, lo_odd, hi_even, hi_odd].map(fold), out);
    }

    /// Both kernels' epilogue: the folded 16-bit sums of the codes' low half-bytes (even and
    /// odd codes of 0..16) and high half-bytes (16..32), in code order into `out`.
    fn store_sums(folded: [__m128i; 4], out: &mut [u16; BLOCK]) {
        let mut lanes = [[0u16; 8]; 4];
        for (dst, x) in lanes.iter_mut().zip(folded) {
            // SAFETY: an unaligned 16-byte store into 8 u16s (SSE2, part of x86-64).
            unsafe { _mm_storeu_si128(dst.as_mut_ptr() as *mut __m128i, x) };
        }
        for t in 0..8 {
            out[2 * t] = lanes[0][t];
            out[2 * t + 1] = lanes[1][t];
            out[16 + 2 * t] = lanes[2][t];
            out[17 + 2 * t] = lanes[3][t];
        }
    }

    /// Two groups per step: a 32-byte load holds group `2s` in its low lane and `2s + 1` in
    /// its high lane, and so does the table register, so one shuffle looks up 16 codes' low
    /// half-bytes in both groups and another their high half-bytes. Sums are kept as 16-bit
    /// lanes: adding a shuffle result as u16 gives `even + 256·odd`, and the odd bytes are
    /// summed apart (`>> 8`), so `even = total − 256·odd` modulo 2^16 (FAISS's fast-scan
    /// accumulation), exact because no code's sum exceeds 15 · dim ≤ 65535 ([`super::MAX_DIM`]).
    ///
    /// # Safety
    /// The CPU must support AVX2; `codes.len() == luts.len()`, a multiple of 32.
    #[target_feature(enable = "avx2")]
    pub unsafe fn block_sums_avx2(codes: &[u8], luts: &[u8], out: &mut [u16; BLOCK]) {
        let low = _mm256_set1_epi8(0x0f);
        let (mut lo_all, mut lo_odd) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        let (mut hi_all, mut hi_odd) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        let steps = codes.len() / 32;
        for s in 0..steps {
            // SAFETY: 32·s + 32 ≤ both lengths; unaligned loads.
            let c = _mm256_loadu_si256(codes.as_ptr().add(32 * s) as *const __m256i);
            let t = _mm256_loadu_si256(luts.as_ptr().add(32 * s) as *const __m256i);
            let r_lo = _mm256_shuffle_epi8(t, _mm256_and_si256(c, low));
            let r_hi = _mm256_shuffle_epi8(t, _mm256_and_si256(_mm256_srli_epi16(c, 4), low));
            lo_all = _mm256_add_epi16(lo_all, r_lo);
            lo_odd = _mm256_add_epi16(lo_odd, _mm256_srli_epi16(r_lo, 8));
            hi_all = _mm256_add_epi16(hi_all, r_hi);
            hi_odd = _mm256_add_epi16(hi_odd, _mm256_srli_epi16(r_hi, 8));
        }
        let lo_even = _mm256_sub_epi16(lo_all, _mm256_slli_epi16(lo_odd, 8));
        let hi_even = _mm256_sub_epi16(hi_all, _mm256_slli_epi16(hi_odd, 8));
        // The two lanes hold the even and odd groups of the same 16 codes: add them.
        let fold =
            |x: __m256i| _mm_add_epi16(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
        store_sums([lo_even, lo_odd, hi_even, hi_odd].map(fold), out);
    }
}

#[cfg(test)]
mod tests;
