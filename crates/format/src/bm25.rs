//! BM25 postings: `postings.rkyv`, searched with block-max MaxScore.
//!
//! Layout (one rkyv root, [`PostingsArchive`]): a sorted term dictionary; per term its document
//! frequency, its blocks (CSR into the block arrays) and the largest score factor of any of its
//! postings; per block of [`BLOCK`] postings the last document id, the byte offset of its
//! encoding and the largest score factor inside it; the encoded blocks; per-document lengths.
//!
//! A block's document ids are stored as gaps: each id's distance to the previous one (the
//! first's to the previous block's last document + 1, or to 0), minus one for all but the
//! first; its term frequencies as frequency minus one. A full block ([`BLOCK`] postings) is
//! bit-packed: a byte with the gaps' bit width, a byte with the frequencies', then the gaps and
//! the frequencies each packed at their width, four lanes interleaved (`bm25/pack.rs`), decoded
//! four at a time. A term's last, partial block is LEB128 varints: the gaps, then the
//! frequencies. The data begins with the byte [`PACKED`] (the first block at offset 1); postings
//! written before packing (format 4 and older) begin their first block at offset 0 and encode
//! every block as varints, and still read. A posting costs about 1-2 bytes instead of 8.
//!
//! The *score factor* of a posting is the part of its BM25 score that does not depend on the
//! query: `tf·(k1+1) / (tf + k1·(1 − b + b·dl/avgdl))`; a term's score is `idf · qtf · factor`.
//! The maxima per term and per block are upper bounds that let [`ArchivedPostingsArchive::search`]
//! skip whole blocks and lists that cannot reach the current top `k` (MaxScore, Turtle & Flood
//! 1995, with block-max windows as in Lucene's `MaxScoreBulkScorer`: windows of 1,024 to 2,048
//! documents ending at a block end of an essential list, the essential lists scored a list at a
//! time into the window's buffers, the others read only for documents that may still enter the
//! top `k`). The results are exactly
//! those of exhaustive scoring ([`ArchivedPostingsArchive::search_exhaustive`]), scores bit for
//! bit: a test checks it.
//!
//! Useful for: exact identifier and keyword hits, which dense vectors miss. Not useful for:
//! paraphrases (that is the vector index's job).
//!
//! A document is a chunk; its terms are the tokens of its text, its path, and its symbol name
//! and qualified name repeated [`NAME_BOOST`] times so symbol names weigh more.
//!
//! Layout: this file holds the archive, the tokenizing of documents, [`validate`] and the
//! block decoder; `bm25/write.rs` the writers, [`build`] (from documents' fields) and [`merge`]
//! (a merged segment's postings from its parts', without tokenizing again), over one block
//! encoder; `bm25/search.rs` the query side (cursors, MaxScore, exhaustive scoring).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use rkyv::{Archive, Deserialize, Serialize};

use crate::{corrupt, text, Result};

mod pack;
mod search;
mod write;

pub use write::{build, build_for_tests, merge, MergePart};

/// The first byte of the data of postings whose full blocks are bit-packed (format 5).
pub const PACKED: u8 = 1;

/// BM25 parameters.
pub const K1: f32 = 1.2;
pub const B: f32 = 0.75;
/// How many times a chunk's symbol name counts.
pub const NAME_BOOST: usize = 3;
/// Postings per block: the unit of skipping and decoding.
pub const BLOCK: usize = pack::BLOCK;

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct PostingsArchive {
    /// Sorted, unique.
    #[rkyv(with = rkyv::with::Map<crate::short_str::ShortStr>)]
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

/// Every token [`build`] indexes for one document, in order: its text, its path, then its name
/// and qualified name `NAME_BOOST` times.
/// `names` is scratch space: the name's and qualified name's tokens are made once and
/// replayed.
fn for_each_doc_token(d: &DocFields<'_>, names: &mut NameTokens, mut emit: impl FnMut(&str)) {
    text::for_each_token(d.text, &mut emit);
    text::for_each_token(d.path, &mut emit);
    names.text.clear();
    names.ends.clear();
    let mut keep = |t: &str| {
        names.text.push_str(t);
        names.ends.push(names.text.len());
    };
    text::for_each_token(d.name, &mut keep);
    text::for_each_token(d.qualified, &mut keep);
    for _ in 0..NAME_BOOST {
        let mut at = 0;
        for &end in &names.ends {
            emit(&names.text[at..end]);
            at = end;
        }
    }
}

/// The tokens of a document's name and qualified name, in order: their text back to back and
/// where each ends.
#[derive(Default)]
struct NameTokens {
    text: String,
    ends: Vec<usize>,
}

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
    for_each_doc_token(d, &mut NameTokens::default(), &mut add);
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
        Params::with_avg(avg_len(total_len, n))
    }

    fn with_avg(avg: f32) -> Params {
        Params {
            base: K1 * (1.0 - B),
            norm: K1 * B / avg,
        }
    }

    #[inline(always)]
    fn factor(self, tf: u32, dl: u32) -> f32 {
        let tf = tf as f32;
        tf * (K1 + 1.0) / (tf + self.base + self.norm * dl as f32)
    }

    /// `out[j] = w * self.factor(tfs[j], dls[j])` for every `j`: the same operations in the
    /// same order as one posting at a time (no fused multiply-adds), so the same bits, but
    /// several lanes per instruction (the division was most of a posting's cost). On x86-64
    /// with AVX2 eight lanes, else what the baseline target vectorises (four with SSE2).
    #[inline]
    fn factors(self, w: f32, tfs: &[u32], dls: &[u32], out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if crate::cpu::avx2() {
            // SAFETY: the CPU has AVX2 (checked above).
            unsafe { self.factors_avx2(w, tfs, dls, out) };
            return;
        }
        self.factors_portable(w, tfs, dls, out);
    }

    #[inline(always)]
    fn factors_portable(self, w: f32, tfs: &[u32], dls: &[u32], out: &mut [f32]) {
        for ((o, &tf), &dl) in out.iter_mut().zip(tfs).zip(dls) {
            *o = w * self.factor(tf, dl);
        }
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn factors_avx2(self, w: f32, tfs: &[u32], dls: &[u32], out: &mut [f32]) {
        self.factors_portable(w, tfs, dls, out);
    }
}

/// The average document length of `n` documents of `total_len` tokens, at least 1.
fn avg_len(total_len: u64, n: u32) -> f32 {
    (total_len as f32 / n.max(1) as f32).max(1.0)
}

/// A query tokenized once ([`text::for_each_token`]): its distinct terms in term order, each
/// with how often the query holds it. A search over many segments makes one and resolves it
/// in each ([`ArchivedPostingsArchive::resolve`]) instead of tokenizing and looking terms up
/// again for every segment and every step (statistics, seed, search).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryTerms {
    terms: Vec<(String, u32)>,
}

impl QueryTerms {
    pub fn new(query: &str) -> QueryTerms {
        let mut counts: BTreeMap<String, u32> = BTreeMap::new();
        text::for_each_token(query, |t| match counts.get_mut(t) {
            Some(n) => *n += 1,
            None => {
                counts.insert(t.to_string(), 1);
            }
        });
        QueryTerms {
            terms: counts.into_iter().collect(),
        }
    }

    /// The distinct terms, in term order.
    pub fn terms(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|(t, _)| t.as_str())
    }

    pub fn len(&self) -> usize {
        self.terms.len()
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }
}

/// A [`QueryTerms`] resolved in one segment's postings ([`ArchivedPostingsArchive::resolve`]):
/// each term's dictionary id there, in the query's order (`None`: the segment lacks the term).
/// It borrows the query and the postings, so it cannot outlive either; handed to other
/// postings, they look the query up again instead of reading another dictionary's ids.
/// Terms per fence: [`TermFences`] keeps the prefix of every `FENCE_STEP`-th term.
pub const FENCE_STEP: usize = 16;

/// The first 8 bytes of every [`FENCE_STEP`]-th dictionary term (big-endian, zero-padded),
/// gathered by [`validate`] in the pass that checks the dictionary's order. A lookup
/// ([`ArchivedPostingsArchive::term_id_fenced`]) searches these few kilobytes, which stay in
/// cache, and then at most `FENCE_STEP` terms of the dictionary, instead of ~16 probes that
/// each read a term (and its bytes) from a different cache line of the mapped file: a query of
/// four terms over nine segments spent about 120 µs in lookups.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TermFences {
    prefixes: Vec<u64>,
    /// The dictionary's term count.
    terms: usize,
}

impl TermFences {
    /// The fences of `keys`, ascending byte strings (`Segment::populate` gathers the record
    /// table's name keys this way; the dictionary's are gathered by [`validate`]).
    pub(crate) fn of_sorted<'a>(keys: impl ExactSizeIterator<Item = &'a [u8]>) -> TermFences {
        let terms = keys.len();
        TermFences {
            prefixes: keys.step_by(FENCE_STEP).map(prefix8).collect(),
            terms,
        }
    }

    /// The place of `key` among the ascending keys these fences were gathered from (`get(i)`
    /// the `i`-th, `None` past the end), searched between its fences; `None` when it is not
    /// there. Callers check [`TermFences::fences`] first.
    pub(crate) fn find<'a>(
        &self,
        key: &[u8],
        get: impl Fn(usize) -> Option<&'a [u8]>,
    ) -> Option<usize> {
        let (mut lo, mut hi) = self.range(key);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match get(mid)?.cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    /// Whether these are fences of `count` keys.
    pub(crate) fn fences(&self, count: usize) -> bool {
        self.terms == count && self.prefixes.len() == count.div_ceil(FENCE_STEP)
    }

    /// The index range of terms that can equal a term with bytes `b`: prefixes are ordered as
    /// the terms are (zero padding keeps byte order), so a term whose prefix is below `b`'s
    /// is below `b`, and one whose prefix is above it is above it.
    fn range(&self, b: &[u8]) -> (usize, usize) {
        let p = prefix8(b);
        let below = self.prefixes.partition_point(|&x| x < p);
        let upto = self.prefixes.partition_point(|&x| x <= p);
        // Fence `below - 1` is under `b`, so are the terms before it; fence `upto` is over.
        let lo = if below == 0 {
            0
        } else {
            (below - 1) * FENCE_STEP + 1
        };
        let hi = (upto * FENCE_STEP).min(self.terms);
        (lo, hi.max(lo))
    }
}

/// The first 8 bytes of `b` as a big-endian number, zero-padded.
fn prefix8(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    let n = b.len().min(8);
    w[..n].copy_from_slice(&b[..n]);
    u64::from_be_bytes(w)
}

#[derive(Clone)]
pub struct TermIds<'a> {
    query: &'a QueryTerms,
    postings: &'a ArchivedPostingsArchive,
    ids: Vec<Option<usize>>,
}

impl std::fmt::Debug for TermIds<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TermIds")
            .field("query", self.query)
            .field("ids", &self.ids)
            .finish_non_exhaustive()
    }
}

impl TermIds<'_> {
    /// The query these ids resolve.
    pub fn query(&self) -> &QueryTerms {
        self.query
    }

    /// The id of the `i`-th term of the query, when the segment holds it.
    pub fn get(&self, i: usize) -> Option<usize> {
        self.ids.get(i).copied().flatten()
    }
}

/// Index-wide statistics for IDF: documents in all segments and, per query term, in how many
/// of them it occurs (tombstoned documents included, as in Lucene: they leave with merges).
/// With [`TermStats::index_wide_length`], the average document length is index-wide too
/// (summed over the segments added), so an index cut into several segments scores exactly like
/// one segment of the same documents; block maxima, stored with the segment's own average, are
/// scaled into bounds for it (`factor` at average `g` is at most `max(1, g / a)` times the
/// factor at average `a`), so MaxScore stays exact.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TermStats {
    pub n: u32,
    pub df: BTreeMap<String, u32>,
    /// Tokens of the segments added.
    pub total_len: u64,
    /// Documents of the segments added (`n` also counts [`TermStats::add_docs`]).
    pub len_docs: u32,
    /// Score with the index-wide average length (`total_len / len_docs`) instead of each
    /// segment's own.
    pub index_wide_length: bool,
}

impl TermStats {
    /// Statistics that also make the average document length index-wide.
    pub fn index_wide() -> TermStats {
        TermStats {
            index_wide_length: true,
            ..TermStats::default()
        }
    }

    /// The index-wide average length, when these statistics carry one.
    pub(crate) fn avg_len(&self) -> Option<f32> {
        (self.index_wide_length && self.len_docs > 0)
            .then(|| avg_len(self.total_len, self.len_docs))
    }

    /// Adds one segment's counts for the terms of `query`.
    pub fn add_segment(&mut self, p: &ArchivedPostingsArchive, query: &str) {
        let q = QueryTerms::new(query);
        self.add_resolved(p, &p.resolve(&q));
    }

    /// [`TermStats::add_segment`] for a query tokenized once and resolved in `p`
    /// ([`ArchivedPostingsArchive::resolve`]).
    pub fn add_resolved(&mut self, p: &ArchivedPostingsArchive, ids: &TermIds) {
        let ids = p.own(ids);
        self.n += p.doc_count();
        self.len_docs += p.doc_count();
        self.total_len += p.total_len.to_native();
        for (i, t) in ids.query.terms().enumerate() {
            let df = ids
                .get(i)
                .and_then(|id| p.term_df.get(id))
                .map_or(0, |df| df.to_native());
            match self.df.get_mut(t) {
                Some(n) => *n += df,
                None => {
                    self.df.insert(t.to_string(), df);
                }
            }
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

/// The next eight bytes of `buf` at `pos` as a little-endian word when at least eight values
/// remain (`left`) and all eight bytes are whole one-byte varints (high bits clear).
#[inline]
fn one_byte_run(buf: &[u8], pos: usize, left: usize) -> Option<u64> {
    if left < 8 {
        return None;
    }
    let w = u64::from_le_bytes(buf.get(pos..pos + 8)?.try_into().ok()?);
    (w & 0x8080_8080_8080_8080 == 0).then_some(w)
}

/// Documents per unit of parallel tokenization in [`build`]: fixed, so the units (and so the
/// output) do not depend on the thread count.
const TOKENIZE_RANGE: usize = 1024;

/// The postings of a contiguous range of documents: a range-local dictionary and, per local
/// term, its (document, tf) list in document order.
struct RangePostings {
    ids: FxMap<String, u32>,
    lists: Vec<Vec<(u32, u32)>>,
    doc_lens: Vec<u32>,
}

/// Tokenizes documents `first..first + docs.len()` into [`RangePostings`]. A term is allocated
/// once per range, not once per document: a token already seen in the range is looked up by
/// `&str`, and its frequency in the current document is the tail of its list.
fn range_postings(first: u32, docs: &[DocFields<'_>]) -> RangePostings {
    let mut r = RangePostings {
        ids: FxMap::default(),
        lists: Vec::new(),
        doc_lens: Vec::with_capacity(docs.len()),
    };
    let mut names = NameTokens::default();
    for (i, d) in docs.iter().enumerate() {
        let doc = first + i as u32;
        let mut len = 0u32;
        let mut add = |t: &str| {
            len += 1;
            let id = match r.ids.get(t) {
                Some(&id) => id,
                None => {
                    let id = r.lists.len() as u32;
                    r.ids.insert(t.to_string(), id);
                    r.lists.push(Vec::new());
                    id
                }
            };
            let list = &mut r.lists[id as usize];
            match list.last_mut() {
                Some((last, tf)) if *last == doc => *tf += 1,
                _ => list.push((doc, 1)),
            }
        };
        for_each_doc_token(d, &mut names, &mut add);
        r.doc_lens.push(len);
    }
    r
}

/// 700 documents whose terms fill several blocks at gap and frequency widths from 0 to 9 bits
/// (dense terms, one in five, and a term repeated 300 times in every 300th): the fixture of
/// the block tests and the fuzz seeds.
#[doc(hidden)]
pub fn block_fixture_texts() -> Vec<String> {
    (0..700)
        .map(|i| {
            format!(
                "alpha {} beta_{} {} {}",
                "gamma ".repeat(1 + i % 3),
                i % 2,
                if i % 5 == 0 { "rare" } else { "" },
                if i % 300 == 0 {
                    "sparse ".repeat(300)
                } else {
                    String::new()
                }
            )
        })
        .collect()
}

/// `p` archived: the bytes of `postings.rkyv` after its header.
#[doc(hidden)]
pub fn archive_bytes(p: &PostingsArchive) -> Vec<u8> {
    rkyv::to_bytes::<rkyv::rancor::Error>(p)
        .map(|b| b.to_vec())
        .unwrap_or_default()
}

/// `f` over the archive in `data` (the bytes of `postings.rkyv` after its header, copied to an
/// aligned buffer), when rkyv's validation accepts it: for fuzzing.
#[doc(hidden)]
pub fn with_archive<R>(data: &[u8], f: impl FnOnce(&ArchivedPostingsArchive) -> R) -> Option<R> {
    let mut bytes = rkyv::util::AlignedVec::<16>::new();
    bytes.extend_from_slice(data);
    rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&bytes)
        .ok()
        .map(f)
}

/// Structural checks beyond rkyv's, run at open without decoding a block (O(terms + blocks)):
/// array lengths, a sorted dictionary, block and byte ranges that cover everything, block last
/// ids ascending within each term and below `doc_count`, maxima finite and consistent. Block
/// contents are checked by [`ArchivedPostingsArchive::decode`] every time a block is decoded
/// (a block that fails reads as empty, so searching never indexes out of bounds), and all at
/// once by [`validate_blocks`] (`Segment::verify`). Decoding every block here cost about half
/// of opening a large index.
pub fn validate(path: &Path, p: &ArchivedPostingsArchive, doc_count: u32) -> Result<TermFences> {
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
    // Packed postings begin with their tag byte (see the module docs); older ones at once.
    let first = match p.data.first() {
        Some(&PACKED) if p.block_offsets[0] == 1 => 1,
        _ => 0,
    };
    if p.block_offsets[0] != first || p.block_offsets[nb].to_native() != p.data.len() as u64 {
        return bad("block offsets do not cover the data");
    }
    // Each term read once (a pair window reads each twice); every `FENCE_STEP`-th one's
    // prefix is kept for lookups (`TermFences`).
    let mut prev: Option<&[u8]> = None;
    let mut fences = Vec::with_capacity(nt.div_ceil(FENCE_STEP));
    for (i, t) in p.terms.iter().enumerate() {
        let b = t.as_bytes();
        if prev.is_some_and(|p| p >= b) {
            return bad("term dictionary is not sorted");
        }
        if i % FENCE_STEP == 0 {
            fences.push(prefix8(b));
        }
        prev = Some(b);
    }
    if p.block_offsets.windows(2).any(|w| w[0] > w[1]) {
        return bad("block offsets are not monotone");
    }
    for t in 0..nt {
        let (b0, b1) = (
            p.term_blocks[t].to_native() as usize,
            p.term_blocks[t + 1].to_native() as usize,
        );
        let df = p.term_df[t].to_native() as usize;
        if b1 < b0 || b1 > nb || df == 0 || b1 - b0 != df.div_ceil(BLOCK) {
            return bad("a term's block count does not match its document frequency");
        }
        let lasts = &p.block_last[b0..b1];
        if lasts.windows(2).any(|w| w[0] >= w[1]) || lasts[b1 - b0 - 1] >= doc_count {
            return bad("a term's block last ids are not ascending below the document count");
        }
        let mut tmax = 0f32;
        for m in &p.block_max[b0..b1] {
            let m = m.to_native();
            if !m.is_finite() || m < 0.0 {
                return bad("a block maximum is not a finite non-negative number");
            }
            tmax = tmax.max(m);
        }
        if p.term_max[t].to_native() != tmax {
            return bad("a term maximum disagrees with its blocks");
        }
    }
    Ok(TermFences {
        prefixes: fences,
        terms: nt,
    })
}

/// [`validate`], then every block decoded: within its byte range, into ascending document ids
/// that end at its recorded last id.
pub fn validate_blocks(path: &Path, p: &ArchivedPostingsArchive, doc_count: u32) -> Result<()> {
    validate(path, p, doc_count)?;
    let mut bufs = ([0u32; BLOCK], [0u32; BLOCK]);
    for t in 0..p.terms.len() {
        p.decode_term_checked(t, path, &mut bufs, |_, _| Ok(()))?;
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

    /// The scoring constants under `stats` and the factor by which this segment's stored
    /// maxima must be scaled to bound scores under them (see [`TermStats`]).
    fn params_under(&self, stats: Option<&TermStats>) -> (Params, f32) {
        match stats.and_then(TermStats::avg_len) {
            Some(g) => {
                let own = avg_len(self.total_len.to_native(), self.doc_count());
                (Params::with_avg(g), (g / own).max(1.0))
            }
            None => (self.params(), 1.0),
        }
    }

    /// Index of `term` (already tokenized) in the dictionary.
    pub fn term_id(&self, term: &str) -> Option<usize> {
        self.terms.binary_search_by(|t| t.as_str().cmp(term)).ok()
    }

    /// [`Self::term_id`], the range searched narrowed first by `fences` (this dictionary's,
    /// from [`validate`]): the same answer. Fences of another dictionary (another term count)
    /// are not used.
    pub fn term_id_fenced(&self, term: &str, fences: &TermFences) -> Option<usize> {
        if !fences.fences(self.terms.len()) {
            return self.term_id(term);
        }
        fences.find(term.as_bytes(), |i| self.terms.get(i).map(|t| t.as_bytes()))
    }

    /// Documents holding `term` (already tokenized); 0 when the dictionary lacks it.
    pub fn df(&self, term: &str) -> u32 {
        self.term_id(term)
            .map_or(0, |i| self.term_df[i].to_native())
    }

    /// Decodes term `t`'s blocks in order into `bufs`, handing each block's documents and
    /// term frequencies to `each`; a block that does not decode to its length of ascending
    /// document ids is a corruption error naming `path` (what [`validate_blocks`] checks and
    /// a merge reads its parts with). `t` must be a term of this dictionary.
    pub(crate) fn decode_term_checked(
        &self,
        t: usize,
        path: &Path,
        bufs: &mut ([u32; BLOCK], [u32; BLOCK]),
        mut each: impl FnMut(&[u32], &[u32]) -> Result<()>,
    ) -> Result<()> {
        let (b0, b1) = (
            self.term_blocks[t].to_native() as usize,
            self.term_blocks[t + 1].to_native() as usize,
        );
        let df = self.term_df[t].to_native() as usize;
        let (docs, tfs) = bufs;
        for b in b0..b1 {
            let n = self.block_len(b0, b, df);
            if self.decode(b0, b, n, docs, tfs) != Some(n) {
                return Err(corrupt(
                    path,
                    "postings: a block does not decode to ascending document ids",
                ));
            }
            each(&docs[..n], &tfs[..n])?;
        }
        Ok(())
    }

    /// Postings in block `b` of a term whose first block is `b0` and whose df is `df`.
    fn block_len(&self, b0: usize, b: usize, df: usize) -> usize {
        (df - (b - b0) * BLOCK).min(BLOCK)
    }

    /// Decodes block `b` (of a term whose first block is `b0`) holding `n` postings. Returns
    /// `Some(n)` when the block decodes within its byte range into ascending ids that end at
    /// its recorded last id, below the document count; `None` otherwise.
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
        // Each id after the first is the previous one + 1 + its gap. Summed in u64: an id past
        // u32::MAX is caught below instead of wrapping.
        let mut d = if b == b0 {
            0u64
        } else {
            u64::from(self.block_last[b - 1].to_native()) + 1
        };
        if n == BLOCK && self.packed() {
            return self.decode_packed(buf, b, d, docs, tfs);
        }
        let mut i = 0;
        while i < n {
            // Eight one-byte varints at once (gaps and tfs below 128: most postings of the
            // long lists that dominate query time).
            if let Some(w) = one_byte_run(buf, pos, n - i) {
                for (j, slot) in docs[i..i + 8].iter_mut().enumerate() {
                    d += (w >> (8 * j)) & 0x7f;
                    *slot = d as u32;
                    d += 1;
                }
                if d > u64::from(u32::MAX) + 1 {
                    return None;
                }
                pos += 8;
                i += 8;
                continue;
            }
            d += u64::from(get_varint(buf, &mut pos)?);
            docs[i] = u32::try_from(d).ok()?;
            d += 1;
            i += 1;
        }
        let mut i = 0;
        while i < n {
            if let Some(w) = one_byte_run(buf, pos, n - i) {
                for (j, slot) in tfs[i..i + 8].iter_mut().enumerate() {
                    *slot = ((w >> (8 * j)) & 0x7f) as u32 + 1;
                }
                pos += 8;
                i += 8;
                continue;
            }
            tfs[i] = get_varint(buf, &mut pos)?.checked_add(1)?;
            i += 1;
        }
        let ends_right = n > 0
            && docs[n - 1] == self.block_last.get(b)?.to_native()
            && docs[n - 1] < self.doc_count();
        (pos == buf.len() && ends_right).then_some(n)
    }

    /// Whether full blocks are bit-packed: the data begins with [`PACKED`] and the first block
    /// after it ([`validate`] allows no other start).
    #[inline]
    fn packed(&self) -> bool {
        self.block_offsets.first().is_some_and(|&o| o == 1)
    }

    /// [`Self::decode`] of a full, bit-packed block `b` (its bytes `buf`) whose first id is
    /// `d` plus its first gap.
    fn decode_packed(
        &self,
        buf: &[u8],
        b: usize,
        d: u64,
        docs: &mut [u32; BLOCK],
        tfs: &mut [u32; BLOCK],
    ) -> Option<usize> {
        let (&bg, &bt) = (buf.first()?, buf.get(1)?);
        let (bg, bt) = (u32::from(bg), u32::from(bt));
        if bg > 32 || bt > 32 || buf.len() != 2 + pack::packed_len(bg) + pack::packed_len(bt) {
            return None;
        }
        let split = 2 + pack::packed_len(bg);
        pack::unpack(&buf[2..split], bg, docs);
        pack::unpack(&buf[split..], bt, tfs);
        pack::gaps_to_docs(docs, d, bg)?;
        if bt == 32 && tfs.contains(&u32::MAX) {
            return None; // a frequency of 2^32
        }
        for tf in tfs.iter_mut() {
            *tf += 1;
        }
        let last = docs[BLOCK - 1];
        (last == self.block_last.get(b)?.to_native() && last < self.doc_count()).then_some(BLOCK)
    }
}

#[cfg(test)]
mod tests;
