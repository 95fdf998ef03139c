//! BM25 postings: `postings.rkyv`.
//!
//! Layout (one rkyv root, [`PostingsArchive`]): a sorted term dictionary, CSR-style offsets into
//! parallel `docs`/`tfs` arrays (doc ids ascending within a term), and per-document lengths.
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

#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct PostingsArchive {
    pub terms: Vec<String>,
    pub offsets: Vec<u32>,
    pub docs: Vec<u32>,
    pub tfs: Vec<u32>,
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

/// Terms of one document with their frequencies, sorted by term, and the document length.
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
    let mut out = PostingsArchive {
        doc_lens,
        total_len,
        ..Default::default()
    };
    let total: usize = lists.iter().map(Vec::len).sum();
    out.docs.reserve(total);
    out.tfs.reserve(total);
    out.offsets.reserve(dict.len() + 1);
    out.offsets.push(0);
    for (term, id) in dict {
        for &(d, tf) in &lists[id as usize] {
            out.docs.push(d);
            out.tfs.push(tf);
        }
        out.offsets.push(out.docs.len() as u32);
        out.terms.push(term);
    }
    out
}

/// Structural checks beyond rkyv's: run once at open.
pub fn validate(path: &Path, p: &ArchivedPostingsArchive, doc_count: u32) -> Result<()> {
    if p.offsets.len() != p.terms.len() + 1 || p.offsets.first().map(|o| o.to_native()) != Some(0) {
        return Err(corrupt(
            path,
            "postings offsets do not match the term dictionary",
        ));
    }
    if p.docs.len() != p.tfs.len() || p.doc_lens.len() != doc_count as usize {
        return Err(corrupt(path, "postings arrays have inconsistent lengths"));
    }
    let mut prev = 0u32;
    for o in p.offsets.iter() {
        let o = o.to_native();
        if o < prev || o as usize > p.docs.len() {
            return Err(corrupt(path, "postings offsets are not monotone"));
        }
        prev = o;
    }
    if prev as usize != p.docs.len() {
        return Err(corrupt(path, "postings offsets do not cover the postings"));
    }
    if p.docs.iter().any(|d| d.to_native() >= doc_count) {
        return Err(corrupt(path, "a posting names a chunk that does not exist"));
    }
    if p.terms.windows(2).any(|w| w[0].as_str() >= w[1].as_str()) {
        return Err(corrupt(path, "term dictionary is not sorted"));
    }
    Ok(())
}

impl ArchivedPostingsArchive {
    /// Postings of `term` (already tokenized), as (doc ids, term frequencies).
    pub fn postings(&self, term: &str) -> Option<(&[rkyv::rend::u32_le], &[rkyv::rend::u32_le])> {
        let i = self.terms.binary_search_by(|t| t.as_str().cmp(term)).ok()?;
        let (a, b) = (
            self.offsets[i].to_native() as usize,
            self.offsets[i + 1].to_native() as usize,
        );
        Some((&self.docs[a..b], &self.tfs[a..b]))
    }

    /// Number of documents.
    pub fn doc_count(&self) -> u32 {
        self.doc_lens.len() as u32
    }

    /// BM25 top-`k` for a free-text query. `allow`, when given, restricts the candidates;
    /// `deny` removes candidates (tombstones). Returns (doc, score) by descending score, ties by
    /// ascending doc id.
    pub fn search(
        &self,
        query: &str,
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
    ) -> Vec<(u32, f32)> {
        let n = self.doc_count();
        if n == 0 || k == 0 {
            return Vec::new();
        }
        let mut qterms: BTreeMap<String, u32> = BTreeMap::new();
        text::for_each_token(query, |t| *qterms.entry(t.to_string()).or_insert(0) += 1);
        let avg = (self.total_len.to_native() as f32 / n as f32).max(1.0);
        // Dense accumulator (zeroed pages come lazily from the allocator) plus the list of
        // touched documents; filters run once per touched document, not once per posting.
        let mut acc = vec![0f32; n as usize];
        let mut touched: Vec<u32> = Vec::new();
        let norm = K1 / avg * B;
        let base = K1 * (1.0 - B);
        for (term, qtf) in &qterms {
            let Some((docs, tfs)) = self.postings(term) else {
                continue;
            };
            let df = docs.len() as f32;
            let idf = ((n as f32 - df + 0.5) / (df + 0.5) + 1.0).ln() * *qtf as f32;
            for (d, tf) in docs.iter().zip(tfs) {
                let d = d.to_native();
                let tf = tf.to_native() as f32;
                let dl = self.doc_lens[d as usize].to_native() as f32;
                let s = idf * tf * (K1 + 1.0) / (tf + base + norm * dl);
                let slot = &mut acc[d as usize];
                if *slot == 0.0 {
                    touched.push(d);
                }
                *slot += s;
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
}
