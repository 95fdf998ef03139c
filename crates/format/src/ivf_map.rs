//! The query side of `ivf.faiss`, read in place from a memory map: our own reader of FAISS's
//! `IndexIVFScalarQuantizer` serialisation (SQ8, inner product, flat coarse quantizer, array
//! inverted lists) and our own scan.
//!
//! `crate::ivf_write` writes the file in FAISS's layout; FAISS remains the peer the benchmarks
//! and tests compare against (`vectors::Ivf`), but loading an index into FAISS copies every code and
//! id into its heap (~400 MB and ~0.3 s at 1M vectors, after a checksum of the whole file). Here
//! opening parses the headers, records where the coarse centroids and each list's codes and
//! ids lie in the map and quantises the centroids to one byte per dimension for routing: under
//! a millisecond per 667 centroids of 384 dimensions, and the lists are paged in by the first
//! queries that touch them. The f32 centroids stay in the map (at whatever alignment FAISS's
//! header leaves them): [`MappedIvf::probes`] (FAISS's choice, with FAISS's scores) scores the
//! lists near a query's cut on them; the many-segment search ([`plan_probes`]) does not read
//! them at all.
//!
//! Layout read (FAISS 1.12 `index_write.cpp`; every count is bounds-checked against the file,
//! so a damaged file is an error, never a read out of bounds; ids are checked when scanned):
//!
//! ```text
//! "IwSq" | d:i32 ntotal:i64 _:i64 _:i64 trained:u8 metric:i32 | nlist:u64 nprobe:u64
//! quantizer: "IxFI" | header (as above) | n:u64 n×4 floats (centroids)
//! direct map: type:u8 | n:u64 n×i64 [| n:u64 n×(i64,i64) when type = 2]
//! SQ: qtype:i32 rangestat:i32 arg:f32 d:u64 code_size:u64 | n:u64 n×f32 (vmin[d], vdiff[d])
//! code_size:u64 by_residual:u8
//! "ilar" nlist:u64 code_size:u64 ("full" n:u64 n×u64 sizes | "sprs" n:u64 (list, size) pairs)
//! per non-empty list: size×code_size code bytes, then size×i64 ids
//! ```
//!
//! Scoring is FAISS's: a code `c` of list `l` decodes to `vmin + (c + 0.5)/255 · vdiff`
//! (+ centroid `l` when `by_residual`), so `q·x = q·centroid_l + Σ q_i·bias_i + Σ (q_i·scale_i)·c_i`
//! with `bias = vmin + 0.5·vdiff/255`, `scale = vdiff/255`: one fused multiply-add per byte
//! against a query rescaled once. Filters (allow / deny bitmaps) are applied inside the scan,
//! so a filtered search still returns `k` admitted candidates when the probed lists hold them.

use std::path::{Path, PathBuf};

use memmap2::Mmap;
use roaring::RoaringBitmap;

use crate::{corrupt, io_err, FormatError, Result};

/// FAISS `QT_8bit`: one byte per dimension, per-dimension range.
const QT_8BIT: i32 = 0;
const METRIC_INNER_PRODUCT: i32 = 0;

/// An IVF-SQ8 index read in place.
pub struct MappedIvf {
    map: Mmap,
    dim: usize,
    n: usize,
    by_residual: bool,
    /// Byte offset of the nlist × dim little-endian f32 centroids in the map (any alignment).
    centroids_at: usize,
    /// vdiff / 255 per dimension.
    scale: Vec<f32>,
    /// vmin + 0.5 · vdiff / 255 per dimension.
    bias: Vec<f32>,
    /// Per list: byte offset of its codes in the map (ids follow) and its length.
    lists: Vec<(usize, usize)>,
    /// The centroids as one byte per dimension (`c_i ≈ min + step · u_i`, per centroid), a
    /// quarter of their f32 bytes: what every query streams to choose its lists.
    route: Vec<u8>,
    /// Per list: (min, step) of `route`.
    route_scale: Vec<(f32, f32)>,
}

impl std::fmt::Debug for MappedIvf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MappedIvf(nlist={}, n={})", self.lists.len(), self.n)
    }
}

/// A bounds-checked little-endian reader over the mapped bytes.
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn take(&mut self, len: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(len)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                corrupt(
                    self.path,
                    format!(
                        "truncated: {what} needs {len} bytes at offset {}, the file has {}",
                        self.pos,
                        self.bytes.len()
                    ),
                )
            })?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    fn i32(&mut self, what: &str) -> Result<i32> {
        let b = self.take(4, what)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn i64(&mut self, what: &str) -> Result<i64> {
        Ok(self.u64(what)? as i64)
    }
    fn fourcc(&mut self, want: &[u8; 4]) -> Result<()> {
        let b = self.take(4, "a type tag")?;
        if b != want {
            return Err(corrupt(
                self.path,
                format!(
                    "expected the tag {:?} at offset {}, found {:?}",
                    String::from_utf8_lossy(want),
                    self.pos - 4,
                    String::from_utf8_lossy(b)
                ),
            ));
        }
        Ok(())
    }
    /// A count of `elem`-byte items that must fit in the rest of the file.
    fn count(&mut self, elem: usize, what: &str) -> Result<usize> {
        let n = self.u64(what)?;
        let left = (self.bytes.len() - self.pos) as u64;
        if n.checked_mul(elem as u64).is_none_or(|b| b > left) {
            return Err(corrupt(
                self.path,
                format!("{what}: {n} items of {elem} bytes do not fit in the file"),
            ));
        }
        Ok(n as usize)
    }
    fn f32s(&mut self, n: usize, what: &str) -> Result<Vec<f32>> {
        let b = self.take(n * 4, what)?;
        Ok(b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
    /// FAISS's index header; returns (d, ntotal, metric).
    fn index_header(&mut self) -> Result<(i32, i64, i32)> {
        let d = self.i32("dimension")?;
        let ntotal = self.i64("vector count")?;
        self.i64("reserved")?;
        self.i64("reserved")?;
        self.u8("trained flag")?;
        let metric = self.i32("metric")?;
        if metric > 1 {
            self.take(4, "metric argument")?;
        }
        Ok((d, ntotal, metric))
    }
}

impl MappedIvf {
    /// The mapped file (for [`crate::populate`]).
    pub(crate) fn map(&self) -> &Mmap {
        &self.map
    }

    /// Maps `path` and parses it; `dim` and `n` are the segment's (the file must agree).
    pub fn open(path: &Path, dim: usize, n: usize) -> Result<MappedIvf> {
        let f = std::fs::File::open(path).map_err(io_err(path))?;
        // SAFETY: segment files are immutable once written (content-addressed directories,
        // never modified in place; GC only unlinks, which keeps existing maps valid). Every
        // read below is bounds-checked, so even bytes changed under the map cannot make a
        // read go out of bounds.
        let map = unsafe { Mmap::map(&f) }.map_err(io_err(path))?;
        let parsed = parse(&map, path, dim, n)?;
        let nlist = parsed.lists.len();
        let (route, route_scale) = routing_codes(
            &map[parsed.centroids_at..parsed.centroids_at + nlist * dim * 4],
            dim,
        );
        Ok(MappedIvf {
            route,
            route_scale,
            map,
            dim,
            n,
            by_residual: parsed.by_residual,
            centroids_at: parsed.centroids_at,
            scale: parsed.scale,
            bias: parsed.bias,
            lists: parsed.lists,
        })
    }

    pub fn nlist(&self) -> usize {
        self.lists.len()
    }

    /// The coarse centroids (`nlist × dim`), copied out of the map.
    pub fn centroids(&self) -> Vec<f32> {
        le_f32s(self.centroid_bytes(0..self.nlist())).collect()
    }

    /// Centroid `l` (`dim` floats), copied out of the map; empty past the end.
    pub fn centroid(&self, l: usize) -> Vec<f32> {
        if l >= self.nlist() {
            return Vec::new();
        }
        le_f32s(self.centroid_bytes(l..l + 1)).collect()
    }

    /// The little-endian bytes of centroids `ls` (in bounds: checked by the caller).
    fn centroid_bytes(&self, ls: std::ops::Range<usize>) -> &[u8] {
        let row = self.dim * 4;
        &self.map[self.centroids_at + ls.start * row..self.centroids_at + ls.end * row]
    }

    /// Vectors in the index.
    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The ids of list `l` in stored order (FAISS's sequential ids: the segment's chunk
    /// numbers), as stored; callers check them against the chunk count.
    pub fn list_ids(&self, l: usize) -> impl Iterator<Item = u64> + '_ {
        let (at, len) = self.lists.get(l).copied().unwrap_or((0, 0));
        let ids = at + len * self.dim;
        self.map[ids..ids + len * 8].chunks_exact(8).map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            u64::from_le_bytes(b)
        })
    }

    /// Vectors held in list `l`.
    pub fn list_len(&self, l: usize) -> usize {
        self.lists.get(l).map_or(0, |x| x.1)
    }

    /// `query · centroid` for every list.
    pub fn coarse(&self, query: &[f32]) -> Vec<f32> {
        if query.len() != self.dim {
            return Vec::new();
        }
        (0..self.nlist())
            .map(|l| self.exact_score(query, l as u32))
            .collect()
    }

    /// `query · centroid` for every list from the one-byte centroids: for choosing lists
    /// (within [`MappedIvf::route_error`] of [`MappedIvf::coarse`], ~1e-3 for a unit query).
    pub fn route(&self, query: &[f32]) -> Vec<f32> {
        if query.len() != self.dim {
            return Vec::new();
        }
        let Some(rq) = route::RouteQuery::new(query) else {
            // All zeros, or not finite: the float path (whose scores are then 0 or not
            // finite anyway).
            let sum: f32 = query.iter().sum();
            return self
                .route
                .chunks_exact(self.dim)
                .zip(&self.route_scale)
                .map(|(u, &(min, step))| min * sum + step * dot_u8(query, u))
                .collect();
        };
        self.route
            .chunks_exact(self.dim)
            .zip(&self.route_scale)
            .map(|(u, &(min, step))| min * rq.sum + step * rq.dot(u))
            .collect()
    }

    /// [`MappedIvf::route`] as (score, `index`, list) candidates, the form list choosers
    /// take (`index`: this index's place among the ones planned together).
    fn route_candidates(&self, query: &[f32], index: usize) -> Vec<(f32, usize, u32)> {
        self.route(query)
            .into_iter()
            .enumerate()
            .map(|(l, s)| (s, index, l as u32))
            .collect()
    }

    /// How far [`MappedIvf::route`]'s score of list `l` can lie from the exact one for
    /// `query`: half a quantisation step per dimension, `step / 2 · Σ|q_i|`, plus `step` times
    /// what rounding the query to integers can move its sum by ([`route::RouteQuery::error`])
    /// (0 for a list past the end).
    pub fn route_error(&self, query: &[f32], l: u32) -> f32 {
        let li = l as usize;
        self.route_scale.get(li).map_or(0.0, |&(_, step)| {
            let rounding = route::RouteQuery::new(query).map_or(0.0, |rq| {
                rq.error(&self.route[li * self.dim..(li + 1) * self.dim])
            });
            step * (0.5 * query.iter().map(|x| x.abs()).sum::<f32>() + rounding)
        })
    }

    /// The `nprobe` lists nearest `query` by their one-byte scores, as (list, that score):
    /// what a search of the index plans ([`plan_probes`]). No f32 centroid is read; a list
    /// whose exact score lies within [`MappedIvf::route_error`] of the cut may be chosen in
    /// place of one FAISS would choose, and the scan offsets each list's estimates by that
    /// error at most (the candidates are re-ranked exactly on the raw rows afterwards).
    pub fn routed_probes(&self, query: &[f32], nprobe: usize) -> Vec<(u32, f32)> {
        let mut cands = self.route_candidates(query, 0);
        let keep = nprobe.clamp(1, cands.len().max(1));
        cut_best(&mut cands, keep);
        cands.into_iter().map(|(s, _, l)| (l, s)).collect()
    }

    /// The `nprobe` lists nearest `query` ([`select_exact`] over [`MappedIvf::route`]), as
    /// (list, exact query · centroid): the lists and scores FAISS's search uses.
    pub fn probes(&self, query: &[f32], nprobe: usize) -> Vec<(u32, f32)> {
        let cands = self.route_candidates(query, 0);
        let p = nprobe.clamp(1, cands.len().max(1));
        select_exact(&[Some(self)], query, cands, p)
            .into_iter()
            .map(|(s, _, l)| (l, s))
            .collect()
    }

    /// `query · centroid l`, exactly (0 for a list past the end).
    fn exact_score(&self, query: &[f32], l: u32) -> f32 {
        if l as usize >= self.nlist() || query.len() != self.dim {
            return 0.0;
        }
        dot_f32_le(query, self.centroid_bytes(l as usize..l as usize + 1))
    }

    /// The approximate top-`k` (chunk, score) over the `nprobe` nearest lists, best first.
    pub fn search(
        &self,
        query: &[f32],
        k: usize,
        nprobe: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
    ) -> Result<Vec<(u32, f32)>> {
        let probes = self.probes(query, nprobe);
        self.scan(query, &probes, k, allow, deny)
    }

    /// The approximate top-`k` (chunk, score) over the given lists, each with its
    /// `query · centroid` (from [`MappedIvf::coarse`]), best first. Ties keep the smaller id.
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

    /// [`MappedIvf::scan`] among the scores at or above `floor` (a caller merging several
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

    /// The scan of [`MappedIvf::scan_above`], its best `k` not yet sorted: `Segment`'s
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
                "query has dimension {}, the IVF index {}",
                query.len(),
                self.dim
            )));
        }
        if k == 0 {
            return Ok(Best::above(0, floor));
        }
        let q: Vec<f32> = query.iter().zip(&self.scale).map(|(a, s)| a * s).collect();
        let base = crate::vectors::dot(query, &self.bias);
        let d = self.dim;
        let mut best = Best::above(k, floor);
        for &(l, coarse) in lists {
            let Some(&(at, len)) = self.lists.get(l as usize) else {
                continue;
            };
            let offset = base + if self.by_residual { coarse } else { 0.0 };
            let codes = &self.map[at..at + len * d];
            let ids = &self.map[at + len * d..at + len * d + len * 8];
            for (code, id) in codes.chunks_exact(d).zip(ids.chunks_exact(8)) {
                let mut b = [0u8; 8];
                b.copy_from_slice(id);
                let id = u64::from_le_bytes(b);
                if id >= self.n as u64 {
                    // Parsed lists hold FAISS's sequential ids; anything else is damage the
                    // verifier reports (the file's checksum).
                    continue;
                }
                let id = id as u32;
                let s = offset + dot_u8(&q, code);
                if best.admits(s) && crate::admitted(id, allow, deny) {
                    best.push(s, id);
                }
            }
        }
        Ok(best)
    }
}

/// The nprobe [`plan_probes`] uses when it is given none, for the IVF indexes `ivfs` (`None`:
/// scanned exactly): [`crate::vectors::default_nprobe`] of one index's list count, or for
/// several of the list count one index of all their vectors would have.
pub fn default_nprobe(ivfs: &[Option<&MappedIvf>]) -> usize {
    let present: Vec<&MappedIvf> = ivfs.iter().flatten().copied().collect();
    match present[..] {
        [only] => crate::vectors::default_nprobe(only.nlist()),
        _ => crate::vectors::default_nprobe(crate::vectors::nlist_for(
            present.iter().map(|i| i.n).sum(),
        )),
    }
}

/// The lists to probe in each of several IVF indexes searched for one query (the segments of
/// an index): the `budget` lists with the highest `query · centroid` across all of them, where
/// `budget` is `nprobe` scaled by how many lists they hold together against the lists one
/// index of all their vectors would have (`vectors::nlist_for`). So an index cut into segments
/// scans the same share of its vectors as one segment at `nprobe` (per-segment `nprobe` would
/// scan about √segments times more), and the share goes where the query's nearest centroids
/// are. Every index gets at least its best list. One index alone gets its `nprobe` nearest
/// lists, as [`MappedIvf::routed_probes`]. `None` entries (segments scanned exactly) get no
/// lists. `nprobe: None` is [`crate::vectors::default_nprobe`] of the list count of one index
/// of all the vectors.
///
/// Lists are chosen and scored by their one-byte centroids ([`MappedIvf::route`]); the f32
/// centroids are not read. Rescoring the lists near the cut on them (`keep + keep/4 + 8`
/// rows of `dim` floats at scattered offsets: 1.3 MB per query at 1M chunks in 9 segments)
/// took up to a tenth of the vector search's time there, and the top 10 came out the same
/// (docs/measurements.md, "Search over many segments").
pub fn plan_probes(
    ivfs: &[Option<&MappedIvf>],
    query: &[f32],
    nprobe: Option<usize>,
) -> Vec<Vec<(u32, f32)>> {
    let present: Vec<usize> = (0..ivfs.len()).filter(|&i| ivfs[i].is_some()).collect();
    let mut plan: Vec<Vec<(u32, f32)>> = vec![Vec::new(); ivfs.len()];
    if let [only] = present[..] {
        if let Some(ivf) = ivfs[only] {
            let nprobe = nprobe.unwrap_or_else(|| crate::vectors::default_nprobe(ivf.nlist()));
            plan[only] = ivf.routed_probes(query, nprobe);
        }
        return plan;
    }
    let mut all: Vec<(f32, usize, u32)> = Vec::new();
    let (mut lists, mut vectors) = (0usize, 0usize);
    for &i in &present {
        let Some(ivf) = ivfs[i] else { continue };
        lists += ivf.nlist();
        vectors += ivf.n;
        let scores = ivf.route_candidates(query, i);
        // The segment's best list is probed whatever the budget.
        if let Some(&(s, _, l)) = scores.iter().min_by(|a, b| by_score(a, b)) {
            plan[i].push((l, s));
        }
        all.extend(scores);
    }
    if all.is_empty() {
        return plan;
    }
    let one = crate::vectors::nlist_for(vectors).max(1);
    // [`default_nprobe`] of these indexes, from the sums already taken.
    let nprobe = nprobe.unwrap_or_else(|| crate::vectors::default_nprobe(one));
    let budget = (nprobe.max(1) * lists).div_ceil(one).clamp(1, all.len());
    cut_best(&mut all, budget);
    for (s, i, l) in all {
        if plan[i].first().is_none_or(|p| p.0 != l) {
            plan[i].push((l, s));
        }
    }
    plan
}

/// Best first by score, ties by (segment, list).
fn by_score(a: &(f32, usize, u32), b: &(f32, usize, u32)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2)))
}

/// Keeps the best `n` of `v` by [`by_score`] (in no particular order).
fn cut_best(v: &mut Vec<(f32, usize, u32)>, n: usize) {
    if n == 0 {
        v.clear();
    } else if n < v.len() {
        v.select_nth_unstable_by(n - 1, by_score);
        v.truncate(n);
    }
}

/// The `keep` best of `cands` ((approximate score, index into `ivfs`, list)) by exact
/// `query · centroid`, with those scores: the best `keep + keep/4 + 8` by approximate score
/// are scored exactly and the best `keep` of them kept. A one-byte score is within ~1e-3 of
/// the exact one, so lists are chosen as exact scores would choose them unless a score lies
/// within that error of a list ranked past the margin.
fn select_exact(
    ivfs: &[Option<&MappedIvf>],
    query: &[f32],
    mut cands: Vec<(f32, usize, u32)>,
    keep: usize,
) -> Vec<(f32, usize, u32)> {
    cut_best(&mut cands, keep + keep / 4 + 8);
    // The centroid `AHEAD` candidates on is asked for into L2 while this one is scored:
    // hundreds of rows of `dim` floats at scattered offsets (vector phase at 1M chunks 1.773
    // → 1.672 ms per query, at 100k 0.563 → 0.524).
    const AHEAD: usize = 4;
    for n in 0..cands.len() {
        if let Some(&(_, i, l)) = cands.get(n + AHEAD) {
            if let Some(Some(ivf)) = ivfs.get(i) {
                if (l as usize) < ivf.nlist() {
                    crate::prefetch_l2(ivf.centroid_bytes(l as usize..l as usize + 1));
                }
            }
        }
        let c = &mut cands[n];
        if let Some(Some(ivf)) = ivfs.get(c.1) {
            c.0 = ivf.exact_score(query, c.2);
        }
    }
    cut_best(&mut cands, keep);
    cands
}

/// Little-endian f32s from `bytes` (a multiple of 4 long).
fn le_f32s(bytes: &[u8]) -> impl Iterator<Item = f32> + '_ {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("chunks of 4")))
}

struct Parsed {
    by_residual: bool,
    /// Byte offset of the centroids.
    centroids_at: usize,
    scale: Vec<f32>,
    bias: Vec<f32>,
    lists: Vec<(usize, usize)>,
}

fn parse(bytes: &[u8], path: &Path, dim: usize, n: usize) -> Result<Parsed> {
    let mut r = Reader {
        bytes,
        pos: 0,
        path,
    };
    let unsupported = |what: String| FormatError::Faiss {
        path: PathBuf::from(path),
        detail: format!("unsupported IVF layout: {what}"),
    };
    r.fourcc(b"IwSq")?;
    let (d, ntotal, metric) = r.index_header()?;
    if d as i64 != dim as i64 || ntotal != n as i64 {
        return Err(FormatError::Faiss {
            path: path.to_path_buf(),
            detail: format!(
                "index holds {ntotal} vectors of dimension {d}, the segment has {n} of dimension {dim}"
            ),
        });
    }
    if metric != METRIC_INNER_PRODUCT {
        return Err(unsupported(format!("metric {metric}, not inner product")));
    }
    let nlist = r.u64("list count")? as usize;
    r.u64("default nprobe")?;
    if nlist == 0 || nlist > n.max(1) {
        return Err(corrupt(path, format!("{nlist} lists for {n} vectors")));
    }
    r.fourcc(b"IxFI")?;
    let (qd, qn, qmetric) = r.index_header()?;
    if qd as i64 != dim as i64 || qn != nlist as i64 || qmetric != METRIC_INNER_PRODUCT {
        return Err(corrupt(
            path,
            format!("coarse quantizer holds {qn} centroids of dimension {qd} (metric {qmetric}) for {nlist} lists"),
        ));
    }
    let floats = r.count(4, "centroids")?;
    if floats != nlist * dim {
        return Err(corrupt(
            path,
            format!("{floats} centroid floats for {nlist} lists of dimension {dim}"),
        ));
    }
    let centroids_at = r.pos;
    r.take(floats * 4, "centroids")?;
    let map_type = r.u8("direct map type")?;
    let m = r.count(8, "direct map")?;
    r.take(m * 8, "direct map")?;
    if map_type == 2 {
        let h = r.count(16, "direct map table")?;
        r.take(h * 16, "direct map table")?;
    }
    let qtype = r.i32("quantizer type")?;
    if qtype != QT_8BIT {
        return Err(unsupported(format!(
            "scalar quantizer type {qtype}, not SQ8"
        )));
    }
    r.i32("range statistic")?;
    r.take(4, "range argument")?;
    let sq_d = r.u64("quantizer dimension")?;
    let code_size = r.u64("code size")?;
    if sq_d != dim as u64 || code_size != dim as u64 {
        return Err(corrupt(
            path,
            format!("scalar quantizer of dimension {sq_d} with {code_size}-byte codes for dimension {dim}"),
        ));
    }
    let nt = r.count(4, "quantizer ranges")?;
    if nt != 2 * dim {
        return Err(corrupt(
            path,
            format!("{nt} quantizer range values for dimension {dim}"),
        ));
    }
    let trained = r.f32s(nt, "quantizer ranges")?;
    let (vmin, vdiff) = trained.split_at(dim);
    let scale: Vec<f32> = vdiff.iter().map(|v| v / 255.0).collect();
    let bias: Vec<f32> = vmin.iter().zip(&scale).map(|(m, s)| m + 0.5 * s).collect();
    if r.u64("code size")? != dim as u64 {
        return Err(corrupt(
            path,
            "index code size differs from the quantizer's",
        ));
    }
    let by_residual = r.u8("residual flag")? != 0;
    r.fourcc(b"ilar")?;
    if r.u64("list count")? != nlist as u64 || r.u64("code size")? != dim as u64 {
        return Err(corrupt(
            path,
            "inverted lists disagree with the index header",
        ));
    }
    let kind = r.take(4, "list table type")?;
    let mut sizes = vec![0usize; nlist];
    let table = r.count(8, "list sizes")?;
    let raw = r.take(table * 8, "list sizes")?;
    let vals: Vec<u64> = raw
        .chunks_exact(8)
        .map(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            u64::from_le_bytes(a)
        })
        .collect();
    match kind {
        b"full" => {
            if vals.len() != nlist {
                return Err(corrupt(
                    path,
                    format!("{} list sizes for {nlist} lists", vals.len()),
                ));
            }
            for (s, v) in sizes.iter_mut().zip(&vals) {
                *s = usize::try_from(*v).unwrap_or(usize::MAX);
            }
        }
        b"sprs" => {
            for pair in vals.chunks(2) {
                let [l, s] = pair else {
                    return Err(corrupt(path, "odd sparse list table"));
                };
                let slot = sizes
                    .get_mut(*l as usize)
                    .ok_or_else(|| corrupt(path, format!("list {l} of {nlist}")))?;
                *slot = usize::try_from(*s).unwrap_or(usize::MAX);
            }
        }
        other => {
            return Err(unsupported(format!(
                "list table type {:?}",
                String::from_utf8_lossy(other)
            )))
        }
    }
    let total: u128 = sizes.iter().map(|&s| s as u128).sum();
    if total != n as u128 {
        return Err(corrupt(
            path,
            format!("the lists hold {total} vectors, the segment {n}"),
        ));
    }
    let mut lists = Vec::with_capacity(nlist);
    for &len in &sizes {
        let at = r.pos;
        if len > 0 {
            r.take(len * dim, "list codes")?;
            r.take(len * 8, "list ids")?;
        }
        lists.push((at, len));
    }
    if r.pos != bytes.len() {
        return Err(corrupt(
            path,
            format!("{} bytes after the last list", bytes.len() - r.pos),
        ));
    }
    Ok(Parsed {
        by_residual,
        centroids_at,
        scale,
        bias,
        lists,
    })
}

/// The best `k` by score, ties by the smaller id: candidates above a floor go into a buffer of
/// 2k, cut back to the best k (a selection, not a sort) when it fills, which raises the floor.
/// Amortised O(1) per candidate; a binary heap popped on every insertion cost more than the
/// scan's arithmetic when `k` is a few hundred.
pub(crate) struct Best {
    k: usize,
    buf: Vec<(f32, u32)>,
    floor: f32,
}

fn better(a: &(f32, u32), b: &(f32, u32)) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.1.cmp(&b.1))
}

impl Best {
    /// The best `k`, keeping only scores at or above `floor` from the start
    /// (`f32::NEG_INFINITY`: all).
    pub(crate) fn above(k: usize, floor: f32) -> Best {
        Best {
            k,
            buf: Vec::with_capacity(2 * k),
            floor,
        }
    }
    /// The lowest score that may still enter ([`Best::admits`]).
    #[inline]
    pub(crate) fn floor(&self) -> f32 {
        self.floor
    }
    /// Whether `s` may enter (a score equal to the floor may, for the id tie-break).
    #[inline]
    pub(crate) fn admits(&self, s: f32) -> bool {
        s >= self.floor
    }
    pub(crate) fn push(&mut self, s: f32, id: u32) {
        self.buf.push((s, id));
        if self.buf.len() >= 2 * self.k {
            self.cut();
        }
    }
    fn cut(&mut self) {
        if self.buf.len() > self.k {
            self.buf.select_nth_unstable_by(self.k - 1, better);
            self.buf.truncate(self.k);
            // The worst kept entry: anything scoring below it cannot enter any more.
            self.floor = self.buf[self.k - 1].0;
        }
    }
    pub(crate) fn into_sorted(mut self) -> Vec<(u32, f32)> {
        self.cut();
        self.buf.sort_by(better);
        self.buf.into_iter().map(|(s, id)| (id, s)).collect()
    }
    /// The same best `k` as [`Best::into_sorted`], in no particular order (a caller that
    /// merges several segments' candidates selects from all of them: sorting each segment's
    /// hundreds of candidates first was about 3% of a hybrid query at 1M chunks).
    pub(crate) fn into_unordered(mut self) -> Vec<(u32, f32)> {
        self.cut();
        self.buf.into_iter().map(|(s, id)| (id, s)).collect()
    }
}

/// `Σ q_i · code_i` (codes as unsigned bytes).
#[inline]
pub fn dot_u8(q: &[f32], code: &[u8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked once, cached).
            return unsafe { simd::dot_u8_avx2(q, code) };
        }
    }
    dot_u8_scalar(q, code)
}

/// `Σ a_i · b_i` for routing (coarse scores): AVX2 + FMA where the CPU has them, else
/// `vectors::dot`. Exact scores always come from `vectors::dot`, whose summation order is fixed.
#[inline]
pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::cpu::avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked once, cached).
            return unsafe { simd::dot_f32_avx2(a, b) };
        }
    }
    crate::vectors::dot(a, b)
}

/// `Σ a_i · b_i` with `b` as little-endian f32 bytes at any alignment (`b.len() = 4 · a.len()`):
/// [`dot_f32`] on the centroids in the map.
#[inline]
pub fn dot_f32_le(a: &[f32], b: &[u8]) -> f32 {
    #[cfg(all(target_arch = "x86_64", target_endian = "little"))]
    {
        if crate::cpu::avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked once, cached); the kernel reads
            // `min(a.len(), b.len() / 4)` floats of each.
            return unsafe { simd::dot_f32_le_avx2(a, b) };
        }
    }
    dot_f32_le_scalar(a, b)
}

/// [`dot_f32_le`] without AVX2: `vectors::dot` (what `dot_f32` falls back to), its eight
/// lanes and its order of sums, over the floats decoded as they are read (no buffer per call).
pub fn dot_f32_le_scalar(a: &[f32], b: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    let ca = a.chunks_exact(8);
    let cb = b.chunks_exact(32);
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for ((acc, x), y) in acc.iter_mut().zip(x).zip(le_f32s(y)) {
            *acc += x * y;
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(le_f32s(rb)) {
        s += x * y;
    }
    s
}

pub fn dot_u8_scalar(q: &[f32], code: &[u8]) -> f32 {
    let mut acc = [0f32; 8];
    let cq = q.chunks_exact(8);
    let cc = code.chunks_exact(8);
    let (rq, rc) = (cq.remainder(), cc.remainder());
    for (x, c) in cq.zip(cc) {
        for j in 0..8 {
            acc[j] += x[j] * c[j] as f32;
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, c) in rq.iter().zip(rc) {
        s += x * *c as f32;
    }
    s
}

mod route;
#[cfg(target_arch = "x86_64")]
mod simd;

use route::routing_codes;
#[cfg(test)]
use route::{round_level, routing_codes_any};

#[cfg(test)]
mod tests;
