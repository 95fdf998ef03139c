//! BM25 postings: `postings.rkyv`, searched with block-max MaxScore.
//!
//! Layout (one rkyv root, [`PostingsArchive`]): a sorted term dictionary; per term its document
//! frequency, its blocks (CSR into the block arrays) and the largest score factor of any of its
//! postings; per block of [`BLOCK`] postings the last document id, the byte offset of its
//! encoding and the largest score factor inside it; the encoded blocks; per-document lengths.
//!
//! A block is encoded as LEB128 varints: the gap of each document id to the previous one (the
//! first relative to the previous block's last document + 1, or 0), minus one for all but the
//! first; then each term frequency minus one. A posting costs about 2-3 bytes instead of 8.
//!
//! The *score factor* of a posting is the part of its BM25 score that does not depend on the
//! query: `tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))`; a term's score is `idf · qtf · factor`.
//! The maxima per term and per block are upper bounds that let [`ArchivedPostingsArchive::search`]
//! skip whole blocks and lists that cannot reach the current top `k` (MaxScore, Turtle & Flood
//! 1995, with block-max windows as in Lucene's `MaxScoreBulkScorer`). The results are exactly
//! those of exhaustive scoring ([`ArchivedPostingsArchive::search_exhaustive`]), scores bit for
//! bit: a test checks it.
//!
//! Useful for: exact identifier and keyword hits, which dense vectors miss. Not useful for:
//! paraphrases (that is the vector index's job).
//!
//! A document is a chunk; its terms are the tokens of its text, its path, and its symbol name
//! and qualified name repeated [`NAME_BOOST`] times so symbol names weigh more.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rkyv::{Archive, Deserialize, Serialize};
use roaring::RoaringBitmap;

use crate::{corrupt, text, Result};

/// BM25 parameters.
pub const K1: f32 = 1.2;
pub const B: f32 = 0.75;
/// How many times a chunk's symbol name counts.
pub const NAME_BOOST: usize = 3;
/// Postings per block: the unit of skipping and decoding.
pub const BLOCK: usize = 128;

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct PostingsArchive {
    /// Sorted, unique.
    pub terms: Vec<String>,
    /// Documents containing each term.
    pub term_df: Vec<u32>,
    /// Term `t`'s blocks are `term_blocks[t]..term_blocks[t + 1]` (`terms.len() + 1` entries).
    pub term_blocks: Vec<u32>,
    /// Largest score factor of each term's postings.
    pub term_max: Vec<f32>,
    /// Last document id of each block.
    pub block_last: Vec<u32>,
    /// Largest score factor inside each block.
    pub block_max: Vec<f32>,
    /// Byte offset of each block in `data`, then `data.len()` (`blocks + 1` entries).
    pub block_offsets: Vec<u64>,
    /// The encoded blocks.
    pub data: Vec<u8>,
    pub doc_lens: Vec<u32>,
    pub total_len: u64,
}

/// The fields of a chunk that feed its BM25 document.
pub struct DocFields<'a> {
    pub text: &'a str,
    pub path: &'a str,
    pub name: &'a str,
    pub qualified: &'a str,
}

/// FxHash (rustc's hasher): much faster than SipHash for the many short term strings here;
/// the maps are internal to the writer, so HashDoS resistance does not matter.
#[derive(Default, Clone, Copy)]
struct FxHasher(u64);

impl std::hash::Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
            self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(K);
        }
        for &b in chunks.remainder() {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(K);
        }
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<FxHasher>>;

/// Terms of one document with their frequencies, and the document length.
fn doc_terms(d: &DocFields<'_>) -> (Vec<(String, u32)>, u32) {
    let mut counts: FxMap<String, u32> = FxMap::default();
    let mut len = 0u32;
    let mut add = |t: &str| {
        len += 1;
        match counts.get_mut(t) {
            Some(c) => *c += 1,
            None => {
                counts.insert(t.to_string(), 1);
            }
        }
    };
    text::for_each_token(d.text, &mut add);
    text::for_each_token(d.path, &mut add);
    for _ in 0..NAME_BOOST {
        text::for_each_token(d.name, &mut add);
        text::for_each_token(d.qualified, &mut add);
    }
    (counts.into_iter().collect(), len)
}

/// The terms of a document with their frequencies, sorted by term, and its length: exactly
/// what [`build`] indexes for it (for in-memory indexes that must score like segments).
pub fn document_terms(d: &DocFields<'_>) -> (Vec<(String, u32)>, u32) {
    let (mut t, len) = doc_terms(d);
    t.sort_unstable();
    (t, len)
}

/// BM25 score of one term in one document, as [`ArchivedPostingsArchive::search`] computes it:
/// `idf(n, df) · qtf · factor(tf, dl)` with `avgdl = total_len / n`.
pub fn term_score(n: u32, df: u32, qtf: u32, tf: u32, dl: u32, total_len: u64) -> f32 {
    term_score_with(n, df, qtf, tf, dl, total_len, n)
}

/// [`term_score`] with IDF from `(n, df)` (index-wide, see [`TermStats`]) and the average
/// length from the `local_n` documents of `total_len` tokens the document belongs to, as
/// [`ArchivedPostingsArchive::search_above_with`] computes it.
pub fn term_score_with(
    n: u32,
    df: u32,
    qtf: u32,
    tf: u32,
    dl: u32,
    total_len: u64,
    local_n: u32,
) -> f32 {
    weight(n, df, qtf) * Params::new(total_len, local_n).factor(tf, dl)
}

/// The per-segment constants of the score factor. Computed the same way when writing (block
/// maxima) and when searching (scores), so the maxima are exact bounds.
#[derive(Clone, Copy)]
struct Params {
    base: f32,
    norm: f32,
}

impl Params {
    fn new(total_len: u64, n: u32) -> Params {
        let avg = (total_len as f32 / n.max(1) as f32).max(1.0);
        Params {
            base: K1 * (1.0 - B),
            norm: K1 * B / avg,
        }
    }

    #[inline]
    fn factor(self, tf: u32, dl: u32) -> f32 {
        let tf = tf as f32;
        tf * (K1 + 1.0) / (tf + self.base + self.norm * dl as f32)
    }
}

/// Index-wide statistics for IDF: documents in all segments and, per query term, in how many
/// of them it occurs (tombstoned documents included, as in Lucene: they leave with merges).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TermStats {
    pub n: u32,
    pub df: BTreeMap<String, u32>,
}

impl TermStats {
    /// Adds one segment's counts for the terms of `query`.
    pub fn add_segment(&mut self, p: &ArchivedPostingsArchive, query: &str) {
        self.n += p.doc_count();
        let mut terms = std::collections::BTreeSet::new();
        text::for_each_token(query, |t| {
            terms.insert(t.to_string());
        });
        for t in terms {
            let df = p.term_id(&t).map_or(0, |i| p.term_df[i].to_native());
            *self.df.entry(t).or_insert(0) += df;
        }
    }

    /// Adds documents that are not in a segment (the memory delta): `n` of them, `df(term)`
    /// holding each term.
    pub fn add_docs(&mut self, n: u32, query: &str, df: impl Fn(&str) -> u32) {
        self.n += n;
        let mut terms = std::collections::BTreeSet::new();
        text::for_each_token(query, |t| {
            terms.insert(t.to_string());
        });
        for t in terms {
            let d = df(&t);
            *self.df.entry(t).or_insert(0) += d;
        }
    }

    /// (n, df) of `term`, when it was gathered.
    pub fn get(&self, term: &str) -> Option<(u32, u32)> {
        self.df.get(term).map(|&df| (self.n, df))
    }
}

/// Query-side weight of a term: `idf · qtf`.
fn weight(n: u32, df: u32, qtf: u32) -> f32 {
    let (n, df) = (n as f32, df as f32);
    ((n - df + 0.5) / (df + 0.5) + 1.0).ln() * qtf as f32
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u32> {
    let mut v = 0u32;
    for shift in [0u32, 7, 14, 21, 28] {
        let b = *buf.get(*pos)?;
        *pos += 1;
        if shift == 28 && b > 0x0f {
            return None;
        }
        v |= u32::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// Builds the postings for documents `0..docs.len()`. Tokenization runs in parallel; the
/// dictionary is merged in document order, so the output does not depend on thread timing.
pub fn build(docs: &[DocFields<'_>]) -> PostingsArchive {
    use rayon::prelude::*;
    let per_doc: Vec<(Vec<(String, u32)>, u32)> = docs.par_iter().map(doc_terms).collect();
    let mut ids: FxMap<String, u32> = FxMap::default();
    let mut lists: Vec<Vec<(u32, u32)>> = Vec::new();
    let mut doc_lens = Vec::with_capacity(docs.len());
    let mut total_len = 0u64;
    for (doc, (terms, len)) in per_doc.into_iter().enumerate() {
        doc_lens.push(len);
        total_len += u64::from(len);
        for (term, tf) in terms {
            let id = match ids.get(&term) {
                Some(&id) => id,
                None => {
                    let id = lists.len() as u32;
                    ids.insert(term, id);
                    lists.push(Vec::new());
                    id
                }
            };
            // Documents arrive in ascending order, so each list is already sorted.
            lists[id as usize].push((doc as u32, tf));
        }
    }
    let mut dict: Vec<(String, u32)> = ids.into_iter().collect();
    dict.sort_unstable();
    let params = Params::new(total_len, doc_lens.len() as u32);
    let mut out = PostingsArchive {
        total_len,
        ..Default::default()
    };
    out.term_blocks.push(0);
    out.block_offsets.push(0);
    for (term, id) in dict {
        let list = std::mem::take(&mut lists[id as usize]);
        let mut term_max = 0f32;
        let mut prev_end = 0u32; // previous block's last document + 1
        for block in list.chunks(BLOCK) {
            let mut bmax = 0f32;
            let mut prev = None;
            for &(d, tf) in block {
                put_varint(
                    &mut out.data,
                    match prev {
                        None => d - prev_end,
                        Some(p) => d - p - 1,
                    },
                );
                prev = Some(d);
                bmax = bmax.max(params.factor(tf, doc_lens[d as usize]));
            }
            for &(_, tf) in block {
                put_varint(&mut out.data, tf - 1);
            }
            let last = block[block.len() - 1].0;
            prev_end = last + 1;
            out.block_last.push(last);
            out.block_max.push(bmax);
            out.block_offsets.push(out.data.len() as u64);
            term_max = term_max.max(bmax);
        }
        out.terms.push(term);
        out.term_df.push(list.len() as u32);
        out.term_max.push(term_max);
        out.term_blocks.push(out.block_last.len() as u32);
    }
    out.doc_lens = doc_lens;
    out
}

/// Structural checks beyond rkyv's, run once at open: every block decodes, within its byte
/// range, into ascending document ids that end at its recorded last id; maxima are finite and
/// consistent. After this, searching cannot index out of bounds.
pub fn validate(path: &Path, p: &ArchivedPostingsArchive, doc_count: u32) -> Result<()> {
    let bad = |what: &str| Err(corrupt(path, format!("postings: {what}")));
    let nt = p.terms.len();
    let nb = p.block_last.len();
    if p.term_df.len() != nt
        || p.term_max.len() != nt
        || p.term_blocks.len() != nt + 1
        || p.block_max.len() != nb
        || p.block_offsets.len() != nb + 1
        || p.doc_lens.len() != doc_count as usize
    {
        return bad("array lengths are inconsistent");
    }
    if p.term_blocks[0] != 0 || p.term_blocks[nt].to_native() as usize != nb {
        return bad("term blocks do not cover the blocks");
    }
    if p.block_offsets[0] != 0 || p.block_offsets[nb].to_native() != p.data.len() as u64 {
        return bad("block offsets do not cover the data");
    }
    if p.terms.windows(2).any(|w| w[0].as_str() >= w[1].as_str()) {
        return bad("term dictionary is not sorted");
    }
    let mut docs = [0u32; BLOCK];
    let mut tfs = [0u32; BLOCK];
    for t in 0..nt {
        let (b0, b1) = (
            p.term_blocks[t].to_native() as usize,
            p.term_blocks[t + 1].to_native() as usize,
        );
        let df = p.term_df[t].to_native() as usize;
        if b1 < b0 || b1 > nb || df == 0 || b1 - b0 != df.div_ceil(BLOCK) {
            return bad("a term's block count does not match its document frequency");
        }
        let mut tmax = 0f32;
        for b in b0..b1 {
            let n = p.block_len(b0, b, df);
            if p.block_offsets[b] > p.block_offsets[b + 1] {
                return bad("block offsets are not monotone");
            }
            if p.decode(b0, b, n, &mut docs, &mut tfs) != Some(n)
                || docs[..n].windows(2).any(|w| w[0] >= w[1])
                || docs[n - 1] != p.block_last[b]
                || docs[n - 1] >= doc_count
            {
                return bad("a block does not decode to ascending document ids");
            }
            let m = p.block_max[b].to_native();
            if !m.is_finite() || m < 0.0 {
                return bad("a block maximum is not a finite non-negative number");
            }
            tmax = tmax.max(m);
        }
        if p.term_max[t].to_native() != tmax {
            return bad("a term maximum disagrees with its blocks");
        }
    }
    Ok(())
}

impl ArchivedPostingsArchive {
    /// Number of documents.
    pub fn doc_count(&self) -> u32 {
        self.doc_lens.len() as u32
    }

    fn params(&self) -> Params {
        Params::new(self.total_len.to_native(), self.doc_count())
    }

    /// Index of `term` (already tokenized) in the dictionary.
    pub fn term_id(&self, term: &str) -> Option<usize> {
        self.terms.binary_search_by(|t| t.as_str().cmp(term)).ok()
    }

    /// Postings in block `b` of a term whose first block is `b0` and whose df is `df`.
    fn block_len(&self, b0: usize, b: usize, df: usize) -> usize {
        (df - (b - b0) * BLOCK).min(BLOCK)
    }

    /// Decodes block `b` (of a term whose first block is `b0`) holding `n` postings. Returns
    /// `Some(n)` when the block decodes within its byte range, `None` otherwise.
    fn decode(
        &self,
        b0: usize,
        b: usize,
        n: usize,
        docs: &mut [u32; BLOCK],
        tfs: &mut [u32; BLOCK],
    ) -> Option<usize> {
        let (s, e) = (
            self.block_offsets[b].to_native() as usize,
            self.block_offsets[b + 1].to_native() as usize,
        );
        let buf = self.data.get(s..e)?;
        let mut pos = 0usize;
        let mut d = if b == b0 {
            0u32
        } else {
            self.block_last[b - 1].to_native().checked_add(1)?
        };
        for (i, slot) in docs.iter_mut().enumerate().take(n) {
            let gap = get_varint(buf, &mut pos)?;
            d = d.checked_add(gap)?;
            *slot = d;
            if i + 1 < n {
                d = d.checked_add(1)?;
            }
        }
        for slot in tfs.iter_mut().take(n) {
            *slot = get_varint(buf, &mut pos)?.checked_add(1)?;
        }
        (pos == buf.len()).then_some(n)
    }

    /// (document, term frequency) pairs of `term`, in document order.
    pub fn postings(&self, term: &str) -> Vec<(u32, u32)> {
        let Some(t) = self.term_id(term) else {
            return Vec::new();
        };
        let mut c = Cursor::new(self, t, 0, 0.0);
        let mut out = Vec::with_capacity(self.term_df[t].to_native() as usize);
        while c.doc != NO_DOC {
            out.push((c.doc, c.tfs[c.pos]));
            c.next();
        }
        out
    }

    /// Query terms present in the dictionary, in term order, with their weights: from this
    /// segment's statistics, or from `stats` (index-wide) when given.
    fn query_terms(&self, query: &str, stats: Option<&TermStats>) -> Vec<(usize, f32)> {
        let mut qterms: BTreeMap<String, u32> = BTreeMap::new();
        text::for_each_token(query, |t| *qterms.entry(t.to_string()).or_insert(0) += 1);
        qterms
            .iter()
            .filter_map(|(term, &qtf)| {
                let t = self.term_id(term)?;
                let local = (self.doc_count(), self.term_df[t].to_native());
                let (n, df) = stats.map_or(local, |s| s.get(term).unwrap_or(local));
                Some((t, weight(n, df, qtf)))
            })
            .collect()
    }

    /// BM25 top-`k` for a free-text query, by block-max MaxScore. `allow`, when given,
    /// restricts the candidates; `deny` removes candidates (tombstones). Returns (doc, score)
    /// by descending score, ties by ascending doc id: exactly [`Self::search_exhaustive`].
    pub fn search(
        &self,
        query: &str,
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
    ) -> Vec<(u32, f32)> {
        self.search_above(query, k, allow, deny, f32::NEG_INFINITY)
    }

    /// [`Self::search`] restricted to scores strictly above `floor`. A caller merging several
    /// segments passes the k-th best score found so far, so later segments skip more.
    pub fn search_above(
        &self,
        query: &str,
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
        floor: f32,
    ) -> Vec<(u32, f32)> {
        self.search_above_with(query, k, allow, deny, floor, None)
    }

    /// [`Self::search_above`] with index-wide IDF statistics (`stats`), so that scores of
    /// several segments are comparable: a small new segment does not give its rare-looking
    /// terms a low IDF. Length normalisation stays per segment (its average length is part
    /// of the stored block maxima).
    pub fn search_above_with(
        &self,
        query: &str,
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
        floor: f32,
        stats: Option<&TermStats>,
    ) -> Vec<(u32, f32)> {
        if self.doc_count() == 0 || k == 0 {
            return Vec::new();
        }
        let params = self.params();
        let qt = self.query_terms(query, stats);
        let mut cursors: Vec<Cursor> = qt
            .iter()
            .enumerate()
            .map(|(qi, &(t, w))| Cursor::new(self, t, qi, w))
            .collect();
        let mut heap = TopK::new(k, floor);
        let mut contrib = vec![0f32; qt.len()];
        // Cursor indices by ascending window maximum, and the prefix sums of those maxima.
        let mut order: Vec<usize> = Vec::with_capacity(cursors.len());
        let mut wmax: Vec<f32> = vec![0.0; cursors.len()];
        let mut prefix: Vec<f32> = Vec::with_capacity(cursors.len());
        let mut start = 0u32;
        loop {
            // Window: from `start` to the nearest block end of any list.
            let mut end = NO_DOC;
            for c in cursors.iter_mut() {
                c.shallow(start);
                if let Some(last) = c.block_last() {
                    end = end.min(last);
                }
            }
            if end == NO_DOC {
                break;
            }
            order.clear();
            for (i, c) in cursors.iter().enumerate() {
                wmax[i] = c.block_max();
                if !c.exhausted() {
                    order.push(i);
                }
            }
            order.sort_by(|&a, &b| wmax[a].total_cmp(&wmax[b]));
            prefix.clear();
            let mut sum = 0f32;
            for &i in &order {
                sum += wmax[i];
                prefix.push(sum);
            }
            // Lists whose maxima together cannot beat the k-th score are non-essential: they
            // only add to documents that an essential list brings.
            let theta = heap.threshold();
            let m = prefix.iter().take_while(|&&s| bound(s) <= theta).count();
            if m < order.len() {
                let (non_essential, essential) = order.split_at(m);
                let mut d = NO_DOC;
                for &i in essential {
                    d = d.min(cursors[i].seek(start));
                }
                while d <= end {
                    if crate::admitted(d, allow, deny) {
                        let dl = self.doc_lens[d as usize].to_native();
                        let mut s = 0f32;
                        for &i in essential {
                            let c = &cursors[i];
                            if c.doc == d {
                                let x = c.w * params.factor(c.tfs[c.pos], dl);
                                contrib[c.qi] = x;
                                s += x;
                            }
                        }
                        let theta = heap.threshold();
                        let mut alive = true;
                        for (j, &i) in non_essential.iter().enumerate().rev() {
                            if bound(s + prefix[j]) <= theta {
                                alive = false;
                                break;
                            }
                            let c = &mut cursors[i];
                            if c.seek(d) == d {
                                let x = c.w * params.factor(c.tfs[c.pos], dl);
                                contrib[c.qi] = x;
                                s += x;
                            }
                        }
                        if alive {
                            // Sum in query-term order, as exhaustive scoring does.
                            let score = contrib.iter().fold(0f32, |a, &x| a + x);
                            heap.offer(d, score);
                        }
                        contrib.iter_mut().for_each(|x| *x = 0.0);
                    }
                    let mut next = NO_DOC;
                    for &i in essential {
                        let c = &mut cursors[i];
                        if c.doc == d {
                            c.next();
                        }
                        next = next.min(c.doc);
                    }
                    d = next;
                }
            }
            match end.checked_add(1) {
                Some(s) => start = s,
                None => break,
            }
        }
        heap.into_sorted()
    }

    /// BM25 top-`k` scoring every posting of every query term: the reference that
    /// [`Self::search`] must equal, and the peer the latency benchmark compares it with.
    pub fn search_exhaustive(
        &self,
        query: &str,
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
    ) -> Vec<(u32, f32)> {
        self.search_exhaustive_with(query, k, allow, deny, None)
    }

    /// [`Self::search_exhaustive`] with index-wide IDF statistics.
    pub fn search_exhaustive_with(
        &self,
        query: &str,
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
        stats: Option<&TermStats>,
    ) -> Vec<(u32, f32)> {
        let n = self.doc_count();
        if n == 0 || k == 0 {
            return Vec::new();
        }
        let params = self.params();
        let mut acc = vec![0f32; n as usize];
        let mut touched: Vec<u32> = Vec::new();
        for (qi, (t, w)) in self.query_terms(query, stats).into_iter().enumerate() {
            let mut c = Cursor::new(self, t, qi, w);
            while c.doc != NO_DOC {
                let d = c.doc;
                let x = w * params.factor(c.tfs[c.pos], self.doc_lens[d as usize].to_native());
                // Every contribution is positive, so 0 means "not seen yet".
                if acc[d as usize] == 0.0 {
                    touched.push(d);
                }
                acc[d as usize] += x;
                c.next();
            }
        }
        crate::top_k(
            touched
                .into_iter()
                .filter(|&d| crate::admitted(d, allow, deny))
                .map(|d| (d, acc[d as usize])),
            k,
        )
    }
}

/// No (more) documents.
const NO_DOC: u32 = u32::MAX;

/// An upper bound made safe against the rounding of summing maxima in another order than the
/// scores are summed in.
#[inline]
fn bound(x: f32) -> f32 {
    x * (1.0 + 1e-5)
}

/// A position in one term's postings: the current block decoded, `doc` its current document.
struct Cursor<'a> {
    p: &'a ArchivedPostingsArchive,
    /// Index of the term in the query (the order scores are summed in).
    qi: usize,
    /// idf · qtf.
    w: f32,
    b0: usize,
    b1: usize,
    df: usize,
    /// Block the cursor is at; may run ahead of `decoded` after [`Cursor::shallow`].
    block: usize,
    decoded: usize,
    n: usize,
    pos: usize,
    doc: u32,
    docs: [u32; BLOCK],
    tfs: [u32; BLOCK],
}

impl<'a> Cursor<'a> {
    fn new(p: &'a ArchivedPostingsArchive, t: usize, qi: usize, w: f32) -> Cursor<'a> {
        let b0 = p.term_blocks[t].to_native() as usize;
        let mut c = Cursor {
            p,
            qi,
            w,
            b0,
            b1: p.term_blocks[t + 1].to_native() as usize,
            df: p.term_df[t].to_native() as usize,
            block: b0,
            decoded: usize::MAX,
            n: 0,
            pos: 0,
            doc: NO_DOC,
            docs: [0; BLOCK],
            tfs: [0; BLOCK],
        };
        c.load(b0);
        c
    }

    fn exhausted(&self) -> bool {
        self.block >= self.b1
    }

    /// Decodes block `b` and positions at its first posting (or exhausts the cursor).
    fn load(&mut self, b: usize) {
        self.block = b;
        if b >= self.b1 {
            self.doc = NO_DOC;
            return;
        }
        let n = self.p.block_len(self.b0, b, self.df);
        // Validated at open; a failure here would mean the mapping changed under us.
        self.n = self
            .p
            .decode(self.b0, b, n, &mut self.docs, &mut self.tfs)
            .unwrap_or(0);
        self.decoded = b;
        self.pos = 0;
        self.doc = if self.n == 0 { NO_DOC } else { self.docs[0] };
        if self.n == 0 {
            self.block = self.b1;
        }
    }

    /// Moves to the first block that may hold a document ≥ `target`, without decoding it.
    fn shallow(&mut self, target: u32) {
        if self.exhausted() || self.p.block_last[self.block].to_native() >= target {
            return;
        }
        let lasts = &self.p.block_last[self.block..self.b1];
        self.block += lasts.partition_point(|l| l.to_native() < target);
    }

    fn block_last(&self) -> Option<u32> {
        (!self.exhausted()).then(|| self.p.block_last[self.block].to_native())
    }

    /// Weighted maximum of the current block (0 once exhausted).
    fn block_max(&self) -> f32 {
        if self.exhausted() {
            0.0
        } else {
            self.w * self.p.block_max[self.block].to_native()
        }
    }

    /// Advances to the first document ≥ `target` and returns it ([`NO_DOC`] when none).
    fn seek(&mut self, target: u32) -> u32 {
        if self.doc != NO_DOC && self.doc >= target && self.decoded == self.block {
            return self.doc;
        }
        self.shallow(target);
        loop {
            if self.exhausted() {
                self.doc = NO_DOC;
                return NO_DOC;
            }
            if self.decoded != self.block {
                self.load(self.block);
                continue;
            }
            while self.pos < self.n && self.docs[self.pos] < target {
                self.pos += 1;
            }
            if self.pos < self.n {
                self.doc = self.docs[self.pos];
                return self.doc;
            }
            self.block += 1;
        }
    }

    /// Moves to the next posting.
    fn next(&mut self) {
        self.pos += 1;
        if self.pos < self.n {
            self.doc = self.docs[self.pos];
        } else {
            self.load(self.decoded + 1);
        }
    }
}

/// The best `k` (doc, score) seen, documents arriving in ascending order.
struct TopK {
    k: usize,
    floor: f32,
    heap: std::collections::BinaryHeap<Worst>,
}

/// Heap entry ordered so the worst kept hit (lowest score, then highest doc) is on top.
#[derive(PartialEq)]
struct Worst(f32, u32);

impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Worst {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.0.total_cmp(&self.0).then(self.1.cmp(&o.1))
    }
}

impl TopK {
    fn new(k: usize, floor: f32) -> TopK {
        TopK {
            k,
            floor: floor.max(-1.0),
            heap: std::collections::BinaryHeap::with_capacity(k + 1),
        }
    }

    /// The score a new (higher-numbered) document must exceed to enter: the floor (at least
    /// −1, below every BM25 score) until `k` are held.
    fn threshold(&self) -> f32 {
        if self.heap.len() < self.k {
            self.floor
        } else {
            self.heap.peek().map_or(self.floor, |w| w.0.max(self.floor))
        }
    }

    fn offer(&mut self, doc: u32, score: f32) {
        if score > self.threshold() {
            self.heap.push(Worst(score, doc));
            if self.heap.len() > self.k {
                self.heap.pop();
            }
        }
    }

    fn into_sorted(self) -> Vec<(u32, f32)> {
        let mut v: Vec<(u32, f32)> = self.heap.into_iter().map(|w| (w.1, w.0)).collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs() -> Vec<(&'static str, &'static str)> {
        vec![
            ("fn parse_config(path: &Path) -> Config", "parse_config"),
            ("fn render_html(page: Page) -> String", "render_html"),
            ("struct Config { path: PathBuf }", "Config"),
        ]
    }

    #[test]
    fn finds_identifier_parts_and_ranks_names_higher() {
        let d = docs();
        let fields: Vec<DocFields> = d
            .iter()
            .map(|(t, n)| DocFields {
                text: t,
                path: "src/lib.rs",
                name: n,
                qualified: n,
            })
            .collect();
        let p = build(&fields);
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&p).unwrap();
        let a = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&bytes).unwrap();
        validate(Path::new("p"), a, 3).unwrap();
        let hits = a.search("parse config", 10, None, None);
        assert_eq!(hits[0].0, 0);
        let hits = a.search("config", 10, None, None);
        assert_eq!(hits.len(), 2);
        let hits = a.search("html", 10, None, None);
        assert_eq!(hits.iter().map(|h| h.0).collect::<Vec<_>>(), [1]);
        let deny: RoaringBitmap = [1u32].into_iter().collect();
        assert!(a.search("html", 10, None, Some(&deny)).is_empty());
        let allow: RoaringBitmap = [2u32].into_iter().collect();
        assert_eq!(a.search("config", 10, Some(&allow), None)[0].0, 2);
        assert!(a.search("nothing here zzz", 10, None, None).is_empty());
        assert!(validate(Path::new("p"), a, 2).is_err());
    }

    /// With index-wide statistics, a one-document segment scores a document like the same
    /// document in a large segment (same length): IDF no longer depends on segment size; and
    /// MaxScore still equals exhaustive scoring.
    #[test]
    fn index_wide_idf_makes_segments_comparable() {
        let mk = |texts: &[String]| {
            let fields: Vec<DocFields> = texts
                .iter()
                .map(|t| DocFields {
                    text: t,
                    path: "",
                    name: "",
                    qualified: "",
                })
                .collect();
            rkyv::to_bytes::<rkyv::rancor::Error>(&build(&fields)).unwrap()
        };
        let big: Vec<String> = (0..200)
            .map(|i| {
                if i == 7 {
                    "invoice total sum".to_string()
                } else {
                    format!("{} other thing", ["alpha", "beta", "gamma", "delta"][i % 4])
                }
            })
            .collect();
        let small = vec!["invoice total sum".to_string()];
        let (bb, sb) = (mk(&big), mk(&small));
        let a = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&bb).unwrap();
        let b = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&sb).unwrap();
        let q = "invoice total invoice";
        // Per-segment IDF: the lone document of the small segment scores far lower.
        let (la, lb) = (
            a.search(q, 1, None, None)[0].1,
            b.search(q, 1, None, None)[0].1,
        );
        assert!(lb < la / 2.0, "{la} {lb}");
        let mut st = TermStats::default();
        st.add_segment(a, q);
        st.add_segment(b, q);
        assert_eq!(st.n, 201);
        assert_eq!(st.get("invoice"), Some((201, 2)));
        let ga = a.search_above_with(q, 1, None, None, f32::NEG_INFINITY, Some(&st));
        let gb = b.search_above_with(q, 1, None, None, f32::NEG_INFINITY, Some(&st));
        assert_eq!(ga[0].0, 7);
        // Same text, both at their segment's average length: the same score.
        assert!((ga[0].1 - gb[0].1).abs() < 1e-5 * ga[0].1, "{ga:?} {gb:?}");
        assert_eq!(
            a.search_above_with(q, 5, None, None, f32::NEG_INFINITY, Some(&st)),
            a.search_exhaustive_with(q, 5, None, None, Some(&st))
        );
    }

    /// Block-max MaxScore must return exactly what scoring every posting returns, scores bit
    /// for bit, for common and rare terms, filters, tombstones, ties and every k.
    #[test]
    fn maxscore_equals_exhaustive() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        // Zipf-like vocabulary: word i drawn with probability ~ 1/(i+1).
        let vocab: Vec<String> = (0..400).map(|i| format!("w{i}")).collect();
        let harmonic: Vec<f64> = (0..vocab.len())
            .scan(0.0, |acc, i| {
                *acc += 1.0 / (i as f64 + 1.0);
                Some(*acc)
            })
            .collect();
        let pick = |r: u64| {
            let x = (r % 1_000_000) as f64 / 1e6 * harmonic[harmonic.len() - 1];
            harmonic.partition_point(|&h| h < x).min(vocab.len() - 1)
        };
        let mut texts: Vec<String> = Vec::new();
        for d in 0..3000 {
            // Some exact duplicates, so ties at the k-th score happen.
            if d % 97 == 5 {
                let prev: String = texts[d - 3].clone();
                texts.push(prev);
                continue;
            }
            let len = 3 + (rnd() % 60) as usize;
            let t: Vec<&str> = (0..len).map(|_| vocab[pick(rnd())].as_str()).collect();
            texts.push(t.join(" "));
        }
        let fields: Vec<DocFields> = texts
            .iter()
            .map(|t| DocFields {
                text: t,
                path: "",
                name: "",
                qualified: "",
            })
            .collect();
        let p = build(&fields);
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&p).unwrap();
        let a = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&bytes).unwrap();
        validate(Path::new("p"), a, texts.len() as u32).unwrap();
        let deny: RoaringBitmap = (0..3000u32).filter(|d| d % 7 == 3).collect();
        let allow: RoaringBitmap = (0..3000u32).filter(|d| d % 3 != 0).collect();
        let mut checked = 0;
        for q in 0..300 {
            let nterms = 1 + (rnd() % 5) as usize;
            let query: Vec<&str> = (0..nterms)
                .map(|_| vocab[pick(rnd())].as_str())
                .chain((q % 10 == 0).then_some("absent"))
                .collect();
            let query = query.join(" ");
            for k in [1, 10, 50, 5000] {
                for (al, de) in [(None, None), (Some(&allow), Some(&deny))] {
                    let fast = a.search(&query, k, al, de);
                    let slow = a.search_exhaustive(&query, k, al, de);
                    assert_eq!(fast, slow, "query {query:?} k {k}");
                    checked += fast.len();
                    // With a floor: exactly the hits strictly above it.
                    if let Some(&(_, f)) = slow.get(slow.len() / 2) {
                        let above: Vec<_> = slow.iter().copied().filter(|h| h.1 > f).collect();
                        let got = a.search_above(&query, k, al, de, f);
                        assert_eq!(got, above, "query {query:?} k {k} floor {f}");
                    }
                }
            }
        }
        assert!(checked > 10_000);
        // Postings round-trip through the block encoding.
        let w0 = a.postings("w0");
        assert_eq!(
            w0.len(),
            a.term_df[a.term_id("w0").unwrap()].to_native() as usize
        );
        assert!(w0.windows(2).all(|w| w[0].0 < w[1].0) && w0.len() > BLOCK * 3);
        assert!(a.postings("absent").is_empty());
    }

    #[test]
    fn corrupt_blocks_are_refused() {
        let fields: Vec<DocFields> = (0..300)
            .map(|_| DocFields {
                text: "alpha beta gamma",
                path: "",
                name: "",
                qualified: "",
            })
            .collect();
        let good = build(&fields);
        let check = |p: &PostingsArchive| {
            let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(p).unwrap();
            let a = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&bytes).unwrap();
            validate(Path::new("p"), a, 300).is_ok()
        };
        assert!(check(&good));
        let mut p = good.clone();
        p.data[3] ^= 0x40;
        assert!(!check(&p));
        let mut p = good.clone();
        p.block_last[1] += 1;
        assert!(!check(&p));
        let mut p = good.clone();
        p.block_max[0] = f32::NAN;
        assert!(!check(&p));
        let mut p = good.clone();
        p.term_df[0] += BLOCK as u32;
        assert!(!check(&p));
        let mut p = good;
        p.data.pop();
        assert!(!check(&p));
    }
}
