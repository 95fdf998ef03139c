//! The query side of [`Segment`]: vector search (IVF planning, one-bit or SQ8 candidates,
//! exact re-rank on the raw rows) and BM25. Split from `segment.rs`, which holds the writer,
//! opening and validation.

use roaring::RoaringBitmap;

use super::{rerank_depth, rerank_depth_one_bit, Segment};
use crate::ivf_map::MappedIvf;
use crate::{vectors, FormatError, Result};

impl Segment {
    /// Vector top-`k` by inner product. Small or heavily filtered candidate sets are scanned
    /// exactly; otherwise IVF candidates (over-fetched) are re-ranked exactly on the raw rows.
    pub fn search_vectors(
        &self,
        query: &[f32],
        k: usize,
        nprobe: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
    ) -> Result<Vec<(u32, f32)>> {
        match self.probe_plan(allow)? {
            Some(ivf) => self.search_vectors_in(query, k, &ivf.probes(query, nprobe), allow, deny),
            // Exact scores already: no re-rank.
            None => self.vector_candidates(query, k, &[], allow, deny),
        }
    }

    /// The IVF index a vector search under `allow` goes through, or `None` when it scans the
    /// rows exactly (a flat segment, or an allow-list smaller than an IVF segment can be).
    pub fn probe_plan(&self, allow: Option<&RoaringBitmap>) -> Result<Option<&MappedIvf>> {
        if allow.is_some_and(|a| a.len() < vectors::IVF_THRESHOLD as u64) {
            return Ok(None);
        }
        self.ivf_map()
    }

    /// Vector top-`k` through the IVF lists `probes` ((list, query · centroid), chosen by the
    /// caller, e.g. across segments): SQ8 candidates, filtered inside the scan and
    /// over-fetched ([`rerank_depth`]), re-ranked exactly on the raw rows. A flat segment is
    /// scanned exactly.
    pub fn search_vectors_in(
        &self,
        query: &[f32],
        k: usize,
        probes: &[(u32, f32)],
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
    ) -> Result<Vec<(u32, f32)>> {
        let cands = self.vector_candidates(query, self.rerank_depth(k)?, probes, allow, deny)?;
        Ok(crate::top_k(self.rerank(query, &cands).into_iter(), k))
    }

    /// How many approximate candidates a top-`k` search re-ranks exactly here:
    /// [`rerank_depth_one_bit`] when the scan goes through one-bit codes, else
    /// [`rerank_depth`].
    pub fn rerank_depth(&self, k: usize) -> Result<usize> {
        Ok(if self.rbq()?.is_some() {
            rerank_depth_one_bit(k)
        } else {
            rerank_depth(k)
        })
    }

    /// The best `fetch` (chunk, score) candidates for `query`: approximate scores through the
    /// IVF lists `probes` (the one-bit codes of `ivf.rbq`, or the SQ8 codes of a segment
    /// without them; filters applied inside the scan), in no particular order, or exact
    /// scores from a scan of the rows for a flat segment or a small allow-list, best first.
    /// Callers that search several segments merge these, select the best of all and re-rank
    /// only those ([`Segment::rerank`]): each segment's own sort was wasted work.
    pub fn vector_candidates(
        &self,
        query: &[f32],
        fetch: usize,
        probes: &[(u32, f32)],
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
    ) -> Result<Vec<(u32, f32)>> {
        self.vector_candidates_above(query, fetch, probes, allow, deny, f32::NEG_INFINITY)
    }

    /// [`Segment::vector_candidates`] among the approximate scores at or above `floor`: a
    /// caller that merges several segments' candidates passes the `fetch`-th best found so
    /// far, so later segments keep fewer. A candidate below it cannot be among the best
    /// `fetch` of the merge; one equal to it is kept (ties are decided by the merge). Exact
    /// scans (a flat segment, a small allow-list) ignore it.
    pub fn vector_candidates_above(
        &self,
        query: &[f32],
        fetch: usize,
        probes: &[(u32, f32)],
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
        floor: f32,
    ) -> Result<Vec<(u32, f32)>> {
        let d = self.meta.dim as usize;
        if query.len() != d {
            return Err(FormatError::InvalidInput(format!(
                "query has dimension {}, the segment {d}",
                query.len()
            )));
        }
        match self.probe_plan(allow)? {
            Some(ivf) => match self.rbq()? {
                Some(codes) => Ok(codes
                    .scan_best(query, probes, fetch, allow, deny, floor)?
                    .into_unordered()),
                None => Ok(ivf
                    .scan_best(query, probes, fetch, allow, deny, floor)?
                    .into_unordered()),
            },
            None => Ok(vectors::exact_search(
                self.vectors(),
                d,
                query,
                fetch,
                allow,
                deny,
            )),
        }
    }

    /// Exact inner products of `query` with the rows of `candidates` (chunk ids; scores
    /// ignored), in the same order; ids beyond the segment are dropped.
    pub fn rerank(&self, query: &[f32], candidates: &[(u32, f32)]) -> Vec<(u32, f32)> {
        // The row `AHEAD` candidates on is asked for while this one is scored: hundreds of
        // rows at scattered offsets, which the hardware prefetcher cannot foresee. Into L1,
        // whole rows (24 lines each at 384 dimensions) issued more requests than the core
        // tracks and the prefetch instructions stalled, so only a row's first two lines were
        // asked for (docs/measurements.md, "Search over many segments"); into L2
        // (`prefetch_l2`) the whole row goes ahead without stalling: vector phase at 1M
        // chunks 1.786 → 1.751 ms per query on top of the one-bit scan's prefetches into L2.
        // Before that, the first line of every row, into L2: the rows lie on as many pages as
        // there are candidates (a 1.5 GB file at 1M chunks), and asked for up front their
        // misses (and, likely, their page walks) overlap instead of each waiting for the row
        // before: vector phase at 1M chunks 1.453 → 1.336 ms per query (1.264 with the scan's
        // blocks asked for the same way).
        self.will_need_rows(candidates);
        for &(i, _) in candidates {
            if let Some(first) = self.vector(i).and_then(|row| row.get(..1)) {
                crate::prefetch_l2(first);
            }
        }
        const AHEAD: usize = 8;
        let mut out = Vec::with_capacity(candidates.len());
        for (n, &(i, _)) in candidates.iter().enumerate() {
            if let Some(row) = candidates.get(n + AHEAD).and_then(|c| self.vector(c.0)) {
                crate::prefetch_l2(row);
            }
            if let Some(row) = self.vector(i) {
                out.push((i, vectors::dot(row, query)));
            }
        }
        out
    }

    /// BM25 top-`k`.
    pub fn search_bm25(
        &self,
        query: &str,
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
    ) -> Vec<(u32, f32)> {
        self.postings().search(query, k, allow, deny)
    }

    /// BM25 top-`k` among scores strictly above `floor` (see
    /// [`ArchivedPostingsArchive::search_above`]).
    /// With `stats`, IDF comes from index-wide counts ([`crate::bm25::TermStats`]).
    pub fn search_bm25_above(
        &self,
        query: &str,
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
        floor: f32,
        stats: Option<&crate::bm25::TermStats>,
    ) -> Vec<(u32, f32)> {
        self.postings()
            .search_above_with(query, k, allow, deny, floor, stats)
    }

    /// [`Segment::search_bm25_above`] for a query tokenized once and resolved in this
    /// segment's postings ([`crate::bm25::ArchivedPostingsArchive::search_terms`]).
    pub fn search_bm25_terms(
        &self,
        ids: &crate::bm25::TermIds,
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
        floor: f32,
        stats: Option<&crate::bm25::TermStats>,
    ) -> Vec<(u32, f32)> {
        self.postings()
            .search_terms(ids, k, allow, deny, floor, stats)
    }
}
