//! The postings writers: [`build`] (documents tokenized) and [`merge`] (the postings of a
//! merged segment made from its parts' postings instead of from its texts), over one block
//! encoder ([`Encoder`]). Every document of a merge keeps its fields (text, path, names), so
//! its terms and their frequencies are the ones it had; decoding the parts' lists, renumbering
//! their documents and encoding them again gives the archive [`build`] would give, byte for
//! byte (a test checks it), without tokenizing a single text or holding every (term,
//! document) pair of the segment at once.

use std::path::Path;

use super::{
    range_postings, ArchivedPostingsArchive, DocFields, FxMap, Params, PostingsArchive,
    RangePostings, BLOCK, PACKED, TOKENIZE_RANGE,
};
use crate::{corrupt, FormatError, Result};

/// Builds the postings for documents `0..docs.len()`. Tokenization runs in parallel over
/// fixed ranges of documents; the ranges' lists are appended in document order, so the output
/// does not depend on thread timing (and is the same as one range's).
pub fn build(docs: &[DocFields<'_>]) -> PostingsArchive {
    build_as(docs, true)
}

/// The postings of documents that are just `texts`, with full blocks bit-packed or as format
/// 4's varints: fixtures for tests and fuzz seeds.
#[doc(hidden)]
pub fn build_for_tests(texts: &[String], packed: bool) -> PostingsArchive {
    let fields: Vec<DocFields> = texts
        .iter()
        .map(|t| DocFields {
            text: t,
            path: "",
            name: "",
            qualified: "",
        })
        .collect();
    build_as(&fields, packed)
}

/// [`build`], with full blocks bit-packed or (`packed` false: the encoding of format 4 and
/// older, which readers still decode) as varints.
pub(crate) fn build_as(docs: &[DocFields<'_>], packed: bool) -> PostingsArchive {
    use rayon::prelude::*;
    let ranges: Vec<RangePostings> = docs
        .par_chunks(TOKENIZE_RANGE)
        // One range per job, so no thread is left with a long run of ranges at the end.
        .with_max_len(1)
        .enumerate()
        .map(|(k, part)| range_postings((k * TOKENIZE_RANGE) as u32, part))
        .collect();
    let mut ids: FxMap<String, u32> = FxMap::default();
    let mut lists: Vec<Vec<(u32, u32)>> = Vec::new();
    let mut doc_lens = Vec::with_capacity(docs.len());
    for r in ranges {
        doc_lens.extend_from_slice(&r.doc_lens);
        let mut range_lists = r.lists;
        for (term, lid) in r.ids {
            let part = std::mem::take(&mut range_lists[lid as usize]);
            match ids.get(term.as_str()) {
                // Ranges arrive in document order, so each list stays sorted.
                Some(&id) => lists[id as usize].extend_from_slice(&part),
                None => {
                    ids.insert(term, lists.len() as u32);
                    lists.push(part);
                }
            }
        }
    }
    let mut dict: Vec<(String, u32)> = ids.into_iter().collect();
    dict.sort_unstable();
    let mut enc = Encoder::new(doc_lens, packed);
    for (term, id) in dict {
        let list = std::mem::take(&mut lists[id as usize]);
        enc.push(term, &list);
    }
    enc.finish()
}

/// Encodes term lists, in term order, into a [`PostingsArchive`]: blocks of [`BLOCK`]
/// postings (full ones bit-packed when `packed`), each with its last document and its largest
/// score factor under the segment's average document length.
pub(super) struct Encoder {
    out: PostingsArchive,
    params: Params,
    packed: bool,
    gaps: Vec<u32>,
    tfs: Vec<u32>,
    doc_lens: Vec<u32>,
}

impl Encoder {
    /// An encoder for documents of lengths `doc_lens`.
    pub(super) fn new(doc_lens: Vec<u32>, packed: bool) -> Encoder {
        let total_len: u64 = doc_lens.iter().map(|&l| u64::from(l)).sum();
        let params = Params::new(total_len, doc_lens.len() as u32);
        let mut out = PostingsArchive {
            total_len,
            ..Default::default()
        };
        out.term_blocks.push(0);
        if packed {
            out.data.push(PACKED);
        }
        out.block_offsets.push(out.data.len() as u64);
        Encoder {
            out,
            params,
            packed,
            gaps: Vec::with_capacity(BLOCK),
            tfs: Vec::with_capacity(BLOCK),
            doc_lens,
        }
    }

    /// Appends `term`, which sorts after every term pushed before, with its (document, term
    /// frequency) postings, ascending by document, none empty.
    pub(super) fn push(&mut self, term: String, list: &[(u32, u32)]) {
        let out = &mut self.out;
        let mut term_max = 0f32;
        let mut prev_end = 0u32; // previous block's last document + 1
        for block in list.chunks(BLOCK) {
            let mut bmax = 0f32;
            let mut prev = None;
            self.gaps.clear();
            self.tfs.clear();
            for &(d, tf) in block {
                self.gaps.push(match prev {
                    None => d - prev_end,
                    Some(p) => d - p - 1,
                });
                self.tfs.push(tf - 1);
                prev = Some(d);
                bmax = bmax.max(self.params.factor(tf, self.doc_lens[d as usize]));
            }
            if self.packed && block.len() == BLOCK {
                let (bg, bt) = (
                    super::pack::width(&self.gaps),
                    super::pack::width(&self.tfs),
                );
                out.data.extend_from_slice(&[bg as u8, bt as u8]);
                super::pack::pack(&self.gaps, bg, &mut out.data);
                super::pack::pack(&self.tfs, bt, &mut out.data);
            } else {
                for &g in self.gaps.iter().chain(&self.tfs) {
                    super::put_varint(&mut out.data, g);
                }
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

    pub(super) fn finish(mut self) -> PostingsArchive {
        self.out.doc_lens = self.doc_lens;
        self.out
    }
}

/// One part of a [`merge`]: its postings and where its documents go.
pub struct MergePart<'a> {
    pub postings: &'a ArchivedPostingsArchive,
    /// `map[old]`: the document's id in the merged segment, `u32::MAX` if it is dropped. The
    /// kept documents of a part keep their order.
    pub map: &'a [u32],
    /// The part's `postings.rkyv`, named when one of its blocks does not decode.
    pub path: &'a Path,
}

/// The postings of `docs` merged documents from their parts' postings: each term's lists
/// decoded part by part, their documents renumbered (dropped ones left out) and joined, the
/// document lengths copied, and all encoded as [`build`] encodes. Every block is
/// checked as it decodes: a damaged part fails the merge (nothing is dropped silently).
pub fn merge(parts: &[MergePart<'_>], docs: u32) -> Result<PostingsArchive> {
    let bad = |m: String| Err(FormatError::InvalidInput(m));
    let mut doc_lens = vec![u32::MAX; docs as usize];
    for p in parts {
        let lens = &p.postings.doc_lens;
        if p.map.len() != lens.len() {
            return bad(format!(
                "a map of {} documents for postings of {}",
                p.map.len(),
                lens.len()
            ));
        }
        for (old, &new) in p.map.iter().enumerate() {
            if new == u32::MAX {
                continue;
            }
            match doc_lens.get_mut(new as usize) {
                Some(l) if *l == u32::MAX => *l = lens[old].to_native(),
                _ => return bad(format!("merged document {new} is out of range or twice")),
            }
        }
    }
    if let Some(missing) = doc_lens.iter().position(|&l| l == u32::MAX) {
        return bad(format!("merged document {missing} has no part"));
    }
    let mut enc = Encoder::new(doc_lens, true);
    let mut next = vec![0usize; parts.len()];
    let mut list: Vec<(u32, u32)> = Vec::new();
    let mut scratch = ([0u32; BLOCK], [0u32; BLOCK]);
    loop {
        // The smallest term not merged yet (the dictionaries are sorted: checked at open).
        let mut term: Option<&str> = None;
        for (p, &i) in parts.iter().zip(&next) {
            if let Some(t) = p.postings.terms.get(i) {
                let t: &str = t;
                if term.is_none_or(|m| t < m) {
                    term = Some(t);
                }
            }
        }
        let Some(term) = term else { break };
        list.clear();
        for (p, i) in parts.iter().zip(next.iter_mut()) {
            if p.postings.terms.get(*i).is_some_and(|t| &**t == term) {
                decode_into(p, *i, &mut list, &mut scratch)?;
                *i += 1;
            }
        }
        if list.is_empty() {
            continue; // every document of the term was dropped
        }
        // Parts interleave in the new order; within a part the order is kept.
        list.sort_unstable_by_key(|&(d, _)| d);
        enc.push(term.to_string(), &list);
    }
    Ok(enc.finish())
}

/// Term `t`'s postings of part `p`, renumbered, appended to `list`.
fn decode_into(
    p: &MergePart<'_>,
    t: usize,
    list: &mut Vec<(u32, u32)>,
    bufs: &mut ([u32; BLOCK], [u32; BLOCK]),
) -> Result<()> {
    p.postings
        .decode_term_checked(t, p.path, bufs, |docs, tfs| {
            for (&d, &tf) in docs.iter().zip(tfs) {
                match p.map.get(d as usize) {
                    Some(&u32::MAX) => {}
                    Some(&new) => list.push((new, tf)),
                    None => return Err(corrupt(p.path, "postings: a document past the end")),
                }
            }
            Ok(())
        })
}
