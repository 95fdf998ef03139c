//! The query side of the BM25 postings: [`ArchivedPostingsArchive::search`] and its variants
//! by block-max MaxScore, the exhaustive reference scorer, and the per-term [`Cursor`] and
//! top-`k` heap they run on.

use roaring::RoaringBitmap;

use super::{
    weight, ArchivedPostingsArchive, Params, QueryTerms, TermFences, TermIds, TermStats, BLOCK,
};

impl ArchivedPostingsArchive {
    /// (document, term frequency) pairs of `term`, in document order.
    pub fn postings(&self, term: &str) -> Vec<(u32, u32)> {
        self.term_id(term)
            .map_or_else(Vec::new, |t| self.postings_id(t))
    }

    /// The dictionary ids of `q`'s terms in this segment (`None`: the term is absent): looked
    /// up once per query and segment, and handed to [`Self::search_terms`],
    /// [`Self::score_docs_terms`], [`Self::postings_of`] and [`TermStats::add_resolved`].
    pub fn resolve<'a>(&'a self, q: &'a QueryTerms) -> TermIds<'a> {
        self.resolve_by(q, |t| self.term_id(t))
    }

    /// [`Self::resolve`] through this dictionary's fences ([`super::validate`]): the same ids.
    pub fn resolve_fenced<'a>(&'a self, q: &'a QueryTerms, fences: &TermFences) -> TermIds<'a> {
        self.resolve_by(q, |t| self.term_id_fenced(t, fences))
    }

    /// `q`'s terms with the ids `id` finds for them in this dictionary.
    fn resolve_by<'a>(
        &'a self,
        q: &'a QueryTerms,
        id: impl Fn(&str) -> Option<usize>,
    ) -> TermIds<'a> {
        TermIds {
            query: q,
            postings: self,
            ids: q.terms.iter().map(|(t, _)| id(t)).collect(),
        }
    }

    /// `ids` when these postings resolved them; otherwise their query resolved here (ids of
    /// another dictionary are never read).
    pub(super) fn own<'s>(&'s self, ids: &'s TermIds<'s>) -> std::borrow::Cow<'s, TermIds<'s>> {
        if std::ptr::eq(ids.postings, self) {
            std::borrow::Cow::Borrowed(ids)
        } else {
            std::borrow::Cow::Owned(self.resolve(ids.query))
        }
    }

    /// Query terms present in the dictionary, in term order, with their weights: from this
    /// segment's statistics, or from `stats` (index-wide) when given.
    pub(super) fn query_terms(&self, query: &str, stats: Option<&TermStats>) -> Vec<(usize, f32)> {
        let q = QueryTerms::new(query);
        self.weights(&self.resolve(&q), stats)
    }

    /// [`Self::query_terms`] of terms resolved by [`Self::resolve`] (looked up again when
    /// `ids` were resolved by other postings).
    fn weights(&self, ids: &TermIds, stats: Option<&TermStats>) -> Vec<(usize, f32)> {
        let ids = self.own(ids);
        ids.query
            .terms
            .iter()
            .zip(&ids.ids)
            .filter_map(|((term, qtf), &t)| {
                let t = t.filter(|&t| t < self.terms.len())?;
                let local = (self.doc_count(), self.term_df[t].to_native());
                let (n, df) = stats.map_or(local, |s| s.get(term).unwrap_or(local));
                Some((t, weight(n, df, *qtf)))
            })
            .collect()
    }

    /// (document, term frequency) pairs of the `i`-th term of a query resolved here
    /// ([`Self::resolve`]; looked up again when `ids` were resolved by other postings), in
    /// document order; none when the segment lacks the term.
    pub fn postings_of(&self, ids: &TermIds, i: usize) -> Vec<(u32, u32)> {
        self.own(ids)
            .get(i)
            .map_or_else(Vec::new, |t| self.postings_id(t))
    }

    /// The documents of dictionary term `t` ([`Self::term_id`]), ascending, every block
    /// checked as it is decoded; `None` for an id past the dictionary or a block that does
    /// not decode (damaged postings: the caller must not take a short list for the term's).
    pub fn docs_of_term(&self, t: usize) -> Option<Vec<u32>> {
        if t >= self.terms.len() {
            return None;
        }
        let mut out = Vec::with_capacity(self.term_df.get(t)?.to_native() as usize);
        let mut bufs = ([0u32; super::BLOCK], [0u32; super::BLOCK]);
        let checked = self.decode_term_checked(t, std::path::Path::new(""), &mut bufs, |d, _| {
            out.extend_from_slice(d);
            Ok(())
        });
        checked.ok().map(|()| out)
    }

    fn postings_id(&self, t: usize) -> Vec<(u32, u32)> {
        if t >= self.terms.len() {
            return Vec::new();
        }
        let mut c = Cursor::new(self, t, 0, 0.0, 1.0);
        let mut out = Vec::with_capacity(self.term_df[t].to_native() as usize);
        while c.doc != NO_DOC {
            out.push((c.doc, c.tfs[c.pos]));
            c.next();
        }
        out
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
    /// terms a low IDF. Length normalisation is per segment unless `stats` is
    /// [`TermStats::index_wide`]: then the average length is the index's too, and the stored
    /// block maxima (computed with the segment's own average) are scaled into bounds.
    pub fn search_above_with(
        &self,
        query: &str,
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
        floor: f32,
        stats: Option<&TermStats>,
    ) -> Vec<(u32, f32)> {
        let q = QueryTerms::new(query);
        self.search_terms(&self.resolve(&q), k, allow, deny, floor, stats)
    }

    /// [`Self::search_above_with`] for a query tokenized once ([`QueryTerms`]) and resolved
    /// in this segment ([`Self::resolve`]): what a search over many segments calls, so that
    /// neither is done again per segment and step. The same results.
    pub fn search_terms(
        &self,
        ids: &TermIds,
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
        floor: f32,
        stats: Option<&TermStats>,
    ) -> Vec<(u32, f32)> {
        let qt = self.weights(ids, stats);
        self.maxscore(
            &qt,
            k,
            allow,
            deny,
            floor,
            stats,
            MIN_WINDOW,
            DENSE_SEEKS,
            LANES,
        )
    }

    /// Block-max MaxScore in windows of at least `min_window` documents (see [`MIN_WINDOW`]),
    /// a non-essential list scored a list at a time where it holds at most `dense_seeks`
    /// postings per document still passing (see [`DENSE_SEEKS`]), and the documents of a
    /// 64-document word of the window checked all at once when it holds at least `lanes`
    /// of them (see [`LANES`]).
    ///
    /// Never inlined: inlined into its callers (then `search_terms` and `search_above_with`;
    /// now only the first calls it) it ran slower (1M BM25-only p99 9.3-9.9 ms against 6.8-7.5
    /// in interleaved runs of the same code, 2026-11-28).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    pub(super) fn maxscore(
        &self,
        qt: &[(usize, f32)],
        k: usize,
        allow: Option<&RoaringBitmap>,
        deny: Option<&RoaringBitmap>,
        floor: f32,
        stats: Option<&TermStats>,
        min_window: u32,
        dense_seeks: f32,
        lanes: u32,
    ) -> Vec<(u32, f32)> {
        if self.doc_count() == 0 || k == 0 {
            return Vec::new();
        }
        let (params, scale) = self.params_under(stats);
        let mut cursors: Vec<Cursor> = qt
            .iter()
            .enumerate()
            .map(|(qi, &(t, w))| Cursor::new(self, t, qi, w, scale))
            .collect();
        let mut heap = TopK::new(k, floor);
        let mut contrib = vec![0f32; qt.len()];
        // Per essential list, and per non-essential list scored a list at a time, its
        // contributions to each document of the window (0: absent); and which documents of
        // the window any essential list holds and may still pass. Both are all zero between
        // windows.
        let mut acc: Vec<f32> = Vec::new();
        let mut bits = [0u64; BULK_USIZE / 64];
        let filtered = allow.is_some() || deny.is_some_and(|d| !d.is_empty());
        // Cursor indices by ascending window maximum, and the prefix sums of those maxima.
        let mut order: Vec<usize> = Vec::with_capacity(cursors.len());
        let mut wmax: Vec<f32> = vec![0.0; cursors.len()];
        let mut prefix: Vec<f32> = Vec::with_capacity(cursors.len());
        // The lists whose blocks end the windows: the previous window's essential ones (at
        // first all). A list that is not essential does not cut windows: a term in nearly
        // every document would otherwise end a window every block (~128 documents), and the
        // per-window work (bounds, partition) cost more than the documents scored.
        let mut lead: Vec<usize> = (0..cursors.len()).collect();
        // The rows of the window's buffers in query-term order (the order scores are summed
        // in), for documents completed a word at a time.
        let mut by_term: Vec<usize> = Vec::with_capacity(cursors.len());
        let mut start = 0u32;
        loop {
            for c in cursors.iter_mut() {
                c.shallow(start);
            }
            let nearest = |ids: &mut dyn Iterator<Item = usize>| {
                ids.filter_map(|i| cursors[i].block_last()).min()
            };
            let Some(end) =
                nearest(&mut lead.iter().copied()).or_else(|| nearest(&mut (0..cursors.len())))
            else {
                break;
            };
            let end = end
                .max(start.saturating_add(min_window.max(1) - 1))
                .min(start.saturating_add(BULK - 1));
            // The next window's document lengths, into L2 while this one is scored: every
            // posting scored reads its document's length, and at 1M chunks that load was the
            // hottest instruction of this function (BM25-only 2.349 → 2.129 ms per query).
            let next = (end as usize + 1).min(self.doc_lens.len());
            let upto = (end as usize + 1 + BULK_USIZE).min(self.doc_lens.len());
            crate::prefetch_l2(&self.doc_lens[next..upto]);
            order.clear();
            for (i, c) in cursors.iter().enumerate() {
                wmax[i] = c.window_max(end);
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
            let (non_essential, essential) = order.split_at(m);
            lead.clear();
            // With no essential list, the one of the highest maximum ends the next window.
            lead.extend_from_slice(if essential.is_empty() {
                &order[order.len().saturating_sub(1)..]
            } else {
                essential
            });
            if !essential.is_empty() {
                let ne_max = m.checked_sub(1).map_or(0.0, |j| prefix[j]);
                // Essential lists are scored a list at a time into the window's buffers (their
                // postings in tight loops), then each document they bring is checked against
                // the threshold and, if it may enter, completed from the non-essential lists.
                let rows = essential.len();
                if acc.len() < rows * ROW {
                    acc.resize(rows * ROW, 0.0);
                }
                for (j, &i) in essential.iter().enumerate() {
                    let row = &mut acc[j * ROW..j * ROW + BULK_USIZE];
                    self.score_window(&mut cursors[i], params, start, end, row, Some(&mut bits));
                }
                let words = ((end - start) as usize >> 6) + 1;
                // The documents the essential lists bring that may enter under the threshold
                // now (it only rises, so the others never can); the rest are cleared.
                let theta0 = heap.threshold();
                let mut passing = 0usize;
                for (wi, slot) in bits[..words].iter_mut().enumerate() {
                    let mut word = *slot;
                    if !filtered && word.count_ones() >= lanes {
                        let keep = word & above(&lane_sums(&acc, 0..rows, wi << 6), ne_max, theta0);
                        clear_lanes(&mut acc, rows, wi << 6, word & !keep);
                        *slot = keep;
                        passing += keep.count_ones() as usize;
                        continue;
                    }
                    while word != 0 {
                        let off = (wi << 6) + word.trailing_zeros() as usize;
                        word &= word - 1;
                        let mut s = 0f32;
                        for j in 0..rows {
                            s += acc[j * ROW + off];
                        }
                        if bound(s + ne_max) > theta0
                            && (!filtered || crate::admitted(start + off as u32, allow, deny))
                        {
                            passing += 1;
                        } else {
                            *slot &= !(1u64 << (off & 63));
                            for j in 0..rows {
                                acc[j * ROW + off] = 0.0;
                            }
                        }
                    }
                }
                // Completing a document costs a seek in each non-essential list not yet
                // scored. Taking them from the highest maximum down, a list that holds not
                // many more postings in the window than the documents still passing would
                // seek in it is scored a list at a time too, like the essential ones, and the
                // documents that can no longer pass with the lists left are cleared; the
                // lists after the first that does not qualify are looked up per document.
                let nne = non_essential.len();
                let span = (end - start + 1) as f32 / self.doc_count() as f32;
                // Lists scored a list at a time: `non_essential[nne - dn..]`, the k-th from
                // the top in row `rows + k`.
                let mut dn = 0usize;
                while dn < nne && passing > 0 {
                    let i = non_essential[nne - 1 - dn];
                    if cursors[i].df as f32 * span > dense_seeks * passing as f32 {
                        break;
                    }
                    let r = rows + dn;
                    if acc.len() < (r + 1) * ROW {
                        acc.resize((r + 1) * ROW, 0.0);
                    }
                    let row = &mut acc[r * ROW..r * ROW + BULK_USIZE];
                    self.score_window(&mut cursors[i], params, start, end, row, None);
                    dn += 1;
                    let rest = (nne - dn).checked_sub(1).map_or(0.0, |j| prefix[j]);
                    passing = 0;
                    for (wi, slot) in bits[..words].iter_mut().enumerate() {
                        let mut word = *slot;
                        if word.count_ones() >= lanes {
                            let sums = lane_sums(&acc, 0..rows + dn, wi << 6);
                            let keep = word & above(&sums, rest, theta0);
                            #[cfg(test)]
                            REPRUNED.fetch_add(
                                (word & !keep).count_ones() as usize,
                                std::sync::atomic::Ordering::Relaxed,
                            );
                            clear_lanes(&mut acc, rows, wi << 6, word & !keep);
                            *slot = keep;
                            passing += keep.count_ones() as usize;
                            continue;
                        }
                        while word != 0 {
                            let off = (wi << 6) + word.trailing_zeros() as usize;
                            word &= word - 1;
                            let mut s = 0f32;
                            for j in 0..rows + dn {
                                s += acc[j * ROW + off];
                            }
                            if bound(s + rest) > theta0 {
                                passing += 1;
                            } else {
                                #[cfg(test)]
                                REPRUNED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                *slot &= !(1u64 << (off & 63));
                                for j in 0..rows {
                                    acc[j * ROW + off] = 0.0;
                                }
                            }
                        }
                    }
                }
                #[cfg(test)]
                if dn > 0 && dn < nne {
                    SPLIT_WINDOWS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                let seeks = &non_essential[..nne - dn];
                let rest = seeks.len().checked_sub(1).map_or(0.0, |j| prefix[j]);
                if seeks.is_empty() {
                    by_term.clear();
                    by_term.extend(0..rows + dn);
                    let qi = |r: usize| {
                        let i = if r < rows {
                            essential[r]
                        } else {
                            non_essential[nne - 1 - (r - rows)]
                        };
                        cursors[i].qi
                    };
                    by_term.sort_unstable_by_key(|&r| qi(r));
                }
                for (wi, slot) in bits[..words].iter_mut().enumerate() {
                    let mut word = std::mem::take(slot);
                    if seeks.is_empty() && word.count_ones() >= lanes {
                        // Every list is in the buffers: each document's exact score is its
                        // rows summed in query-term order, and the ones above the threshold
                        // now are offered in document order (the heap checks each against
                        // the threshold it has then, which only rises).
                        let base = wi << 6;
                        let scores = lane_sums(&acc, by_term.iter().copied(), base);
                        let mut offer = word & above(&scores, 0.0, heap.threshold());
                        while offer != 0 {
                            let l = offer.trailing_zeros() as usize;
                            offer &= offer - 1;
                            heap.offer(start + (base + l) as u32, scores[l]);
                        }
                        for j in 0..rows {
                            acc[j * ROW + base..j * ROW + base + 64].fill(0.0);
                        }
                        continue;
                    }
                    while word != 0 {
                        let off = (wi << 6) + word.trailing_zeros() as usize;
                        word &= word - 1;
                        let d = start + off as u32;
                        let mut s = 0f32;
                        for j in 0..rows + dn {
                            s += acc[j * ROW + off];
                        }
                        let theta = heap.threshold();
                        if bound(s + rest) > theta {
                            for (j, &i) in essential.iter().enumerate() {
                                contrib[cursors[i].qi] = acc[j * ROW + off];
                            }
                            for k in 0..dn {
                                let i = non_essential[nne - 1 - k];
                                contrib[cursors[i].qi] = acc[(rows + k) * ROW + off];
                            }
                            // A document under the threshold after its last seek is offered
                            // with its exact score and refused; the bound only saves seeks.
                            let mut alive = true;
                            if !seeks.is_empty() {
                                let dl = self.doc_lens[d as usize].to_native();
                                for (j, &i) in seeks.iter().enumerate().rev() {
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
                            }
                            if alive {
                                // Sum in query-term order, as exhaustive scoring does.
                                let score = contrib.iter().fold(0f32, |a, &x| a + x);
                                heap.offer(d, score);
                            }
                            contrib.iter_mut().for_each(|x| *x = 0.0);
                        }
                        for j in 0..rows {
                            acc[j * ROW + off] = 0.0;
                        }
                    }
                }
                if dn > 0 {
                    let width = (end - start) as usize + 1;
                    for j in rows..rows + dn {
                        acc[j * ROW..j * ROW + width].fill(0.0);
                    }
                }
            }
            match end.checked_add(1) {
                Some(s) => start = s,
                None => break,
            }
        }
        heap.into_sorted()
    }

    /// Scores the postings of `c` with ids in `start..=end` into `row` (at id − `start`),
    /// setting each one's bit in `bits` when given, and leaves `c` at its first posting past
    /// `end`. A decoded block's run of such postings is scored in one batch
    /// ([`Params::factors`]: the same bits as one at a time).
    #[inline]
    fn score_window(
        &self,
        c: &mut Cursor,
        params: Params,
        start: u32,
        end: u32,
        row: &mut [f32],
        mut bits: Option<&mut [u64; BULK_USIZE / 64]>,
    ) {
        let mut dls = [0u32; BLOCK];
        let mut xs = [0f32; BLOCK];
        let mut d = c.seek(start);
        while d <= end {
            // The cursor is in a decoded block (`seek` and `load` leave it so while `d` is a
            // document): its postings from `pos` up to the first past `end`.
            let (p, n) = (c.pos, c.n);
            let docs = &c.docs[p..n];
            let m = if docs[docs.len() - 1] <= end {
                docs.len()
            } else {
                docs.partition_point(|&x| x <= end)
            };
            let docs = &docs[..m];
            for (l, &x) in dls.iter_mut().zip(docs) {
                *l = self.doc_lens[x as usize].to_native();
            }
            params.factors(c.w, &c.tfs[p..p + m], &dls[..m], &mut xs[..m]);
            match bits.as_deref_mut() {
                Some(bits) => {
                    for (&x, &s) in docs.iter().zip(&xs[..m]) {
                        let off = (x - start) as usize;
                        row[off] = s;
                        bits[off >> 6] |= 1u64 << (off & 63);
                    }
                }
                None => {
                    for (&x, &s) in docs.iter().zip(&xs[..m]) {
                        row[(x - start) as usize] = s;
                    }
                }
            }
            c.pos = p + m;
            if c.pos < n {
                c.doc = c.docs[c.pos];
            } else {
                c.load(c.decoded + 1);
            }
            d = c.doc;
        }
    }

    /// The BM25 scores of `docs` for `query` under `stats` (0 for an id past the end): bit for
    /// bit the scores [`Self::search_above_with`] and [`Self::search_exhaustive_with`] give
    /// them (contributions summed in query-term order). Over ascending ids each term's cursor
    /// only moves forward, skipping whole blocks between the documents, so a few hundred
    /// documents cost at most a block decode per term and document; an id below the one
    /// before starts the cursors again.
    pub fn score_docs(&self, query: &str, docs: &[u32], stats: Option<&TermStats>) -> Vec<f32> {
        let q = QueryTerms::new(query);
        self.score_docs_terms(&self.resolve(&q), docs, stats)
    }

    /// [`Self::score_docs`] for a query tokenized once and resolved in this segment (see
    /// [`Self::search_terms`]).
    pub fn score_docs_terms(
        &self,
        ids: &TermIds,
        docs: &[u32],
        stats: Option<&TermStats>,
    ) -> Vec<f32> {
        let n = self.doc_count();
        if n == 0 {
            return vec![0.0; docs.len()];
        }
        let (params, scale) = self.params_under(stats);
        let qt = self.weights(ids, stats);
        let start = || -> Vec<Cursor> {
            qt.iter()
                .enumerate()
                .map(|(qi, &(t, w))| Cursor::new(self, t, qi, w, scale))
                .collect()
        };
        let mut cursors = start();
        let mut out = Vec::with_capacity(docs.len());
        let mut last = None;
        for &d in docs {
            if d >= n {
                out.push(0.0);
                continue;
            }
            if last.is_some_and(|l| d < l) {
                cursors = start();
            }
            last = Some(d);
            let dl = self.doc_lens[d as usize].to_native();
            let mut score = 0f32;
            for c in cursors.iter_mut() {
                if c.seek(d) == d {
                    score += c.w * params.factor(c.tfs[c.pos], dl);
                }
            }
            out.push(score);
        }
        out
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
        let (params, _) = self.params_under(stats);
        let mut acc = vec![0f32; n as usize];
        let mut touched: Vec<u32> = Vec::new();
        for (qi, (t, w)) in self.query_terms(query, stats).into_iter().enumerate() {
            let mut c = Cursor::new(self, t, qi, w, 1.0);
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

/// Test counters: windows that scored some non-essential lists a list at a time and looked
/// the others up, and documents cleared after a list scored a list at a time.
#[cfg(test)]
pub(super) static SPLIT_WINDOWS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);
#[cfg(test)]
pub(super) static REPRUNED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// No (more) documents.
const NO_DOC: u32 = u32::MAX;

/// A 64-document word of a MaxScore window holding at least this many documents is checked
/// (and, when every list is in the buffers, completed) all at once, its documents' sums
/// computed in vector registers, instead of one document at a time. The same results: each
/// lane adds the same numbers in the same order. Common-term queries fill most words (at 1M
/// chunks BM25-only p99 6.927 → 6.094 ms, mean 2.055 → 2.020 ms per query; 8 and 32 here
/// measured within the noise of 16); a word of a few documents is checked one at a time.
pub(super) const LANES: u32 = 16;

/// Per lane `l` of the word at `base`: the sum of `acc[r * ROW + base + l]` over `rows` in
/// the order given, from 0 (as the per-document loops sum).
#[inline]
fn lane_sums(acc: &[f32], rows: impl IntoIterator<Item = usize>, base: usize) -> [f32; 64] {
    let mut s = [0f32; 64];
    for r in rows {
        let row = &acc[r * ROW + base..r * ROW + base + 64];
        for (x, &y) in s.iter_mut().zip(row) {
            *x += y;
        }
    }
    s
}

/// The lanes whose `bound(sum + add)` is above `theta`: the per-document test, 64 at once.
#[inline]
fn above(sums: &[f32; 64], add: f32, theta: f32) -> u64 {
    let mut m = 0u64;
    for (q, quad) in sums.chunks_exact(4).enumerate() {
        let mut bits = 0u64;
        for (l, &x) in quad.iter().enumerate() {
            bits |= u64::from(bound(x + add) > theta) << l;
        }
        m |= bits << (4 * q);
    }
    m
}

/// Zeroes the first `rows` rows' entries of the documents `gone` of the word at `base`.
#[inline]
fn clear_lanes(acc: &mut [f32], rows: usize, base: usize, mut gone: u64) {
    while gone != 0 {
        let off = base + gone.trailing_zeros() as usize;
        gone &= gone - 1;
        for j in 0..rows {
            acc[j * ROW + off] = 0.0;
        }
    }
}

/// The fewest documents a MaxScore window spans (Lucene's `MaxScoreBulkScorer` scores inner
/// windows of 4,096). Windows end at a block end of an essential list, or here when that is
/// sooner: short windows bound more tightly but cost a partition each.
pub(super) const MIN_WINDOW: u32 = 1024;

/// A window scores a non-essential list a list at a time (from the highest maximum down, until
/// one does not qualify) when its estimated postings in the window are at most this many per
/// document still passing, each of which would otherwise seek in it.
pub(super) const DENSE_SEEKS: f32 = 2.0;

/// The most documents a window spans: the width of its scoring buffers.
const BULK: u32 = 2048;
const BULK_USIZE: usize = BULK as usize;

/// The stride of the scoring buffers' rows: a window's width and one cache line more. At
/// exactly 2,048 floats (8 KiB) the rows' entries for one document fell into the same L1 sets,
/// and summing a document over many essential lists missed the cache on every row.
const ROW: usize = BULK_USIZE + 16;

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
    /// `w` times the scale of the stored maxima ([`TermStats`]): multiplies block maxima.
    wb: f32,
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
    fn new(p: &'a ArchivedPostingsArchive, t: usize, qi: usize, w: f32, scale: f32) -> Cursor<'a> {
        let b0 = p.term_blocks[t].to_native() as usize;
        let mut c = Cursor {
            p,
            qi,
            w,
            wb: w * scale,
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

    /// Weighted maximum over the blocks from the current one to the first that ends at or
    /// after `end` (0 once exhausted): a bound on every posting up to `end`.
    fn window_max(&self, end: u32) -> f32 {
        let mut m = 0f32;
        for b in self.block..self.b1 {
            m = m.max(self.p.block_max[b].to_native());
            if self.p.block_last[b].to_native() >= end {
                break;
            }
        }
        self.wb * m
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
            // Ids ascend: a galloping search over the rest of the block. A seek from the
            // non-essential lists moves one or two postings when the essential lists are as
            // dense as they are (checked first), and often tens when they are sparse.
            self.pos += gallop(&self.docs[self.pos..self.n], target);
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

/// The number of leading ids of `docs` (ascending) below `target`: probes at 1, 2, 4, …
/// then a binary search between the last two probes, so a target a few postings on costs a
/// few comparisons instead of a whole binary search's dependent steps.
#[inline]
fn gallop(docs: &[u32], target: u32) -> usize {
    let mut lo = 0;
    let mut step = 1;
    while lo < docs.len() && docs[lo] < target {
        let next = lo + step;
        if next >= docs.len() || docs[next] >= target {
            let hi = next.min(docs.len());
            return lo + 1 + docs[lo + 1..hi].partition_point(|&d| d < target);
        }
        lo = next;
        step *= 2;
    }
    lo
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
    use super::gallop;

    /// The galloping search finds exactly what a binary search finds, at every target and
    /// every length, with gaps of 1 (dense lists) and larger.
    #[test]
    fn gallop_equals_partition_point() {
        for gap in [1u32, 2, 7] {
            for len in 0..=130usize {
                let docs: Vec<u32> = (0..len as u32).map(|i| 5 + i * gap).collect();
                for target in 0..(10 + len as u32 * gap) {
                    let want = docs.partition_point(|&d| d < target);
                    assert_eq!(
                        gallop(&docs, target),
                        want,
                        "gap {gap} len {len} target {target}"
                    );
                }
            }
        }
    }
}
