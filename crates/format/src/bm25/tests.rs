use roaring::RoaringBitmap;

use super::search::{DENSE_SEEKS, LANES, MIN_WINDOW};
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

/// The postings of `texts` (text only, no path or names), archived.
/// A xorshift64 generator from `seed` (not 0).
fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}

fn archive_of(texts: &[String]) -> rkyv::util::AlignedVec {
    archive_as(texts, true)
}

/// [`archive_of`] with full blocks bit-packed (format 5) or as varints (format 4 and older).
fn archive_as(texts: &[String], packed: bool) -> rkyv::util::AlignedVec {
    rkyv::to_bytes::<rkyv::rancor::Error>(&build_for_tests(texts, packed)).unwrap()
}

/// With index-wide statistics, a one-document segment scores a document like the same
/// document in a large segment (same length): IDF no longer depends on segment size; and
/// MaxScore still equals exhaustive scoring.
#[test]
fn index_wide_idf_makes_segments_comparable() {
    let mk = archive_of;
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
    let mut rnd = xorshift(0x9E37_79B9_7F4A_7C15u64);
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
    for packed in [true, false] {
        maxscore_equals_exhaustive_on(&texts, &vocab, &pick, packed);
    }
    // Windows that scored some non-essential lists a list at a time and looked the others up,
    // and documents cleared between those lists, both happened (other tests may add to them).
    use std::sync::atomic::Ordering::Relaxed;
    assert!(super::search::SPLIT_WINDOWS.load(Relaxed) > 0);
    assert!(super::search::REPRUNED.load(Relaxed) > 0);
}

fn maxscore_equals_exhaustive_on(
    texts: &[String],
    vocab: &[String],
    pick: &dyn Fn(u64) -> usize,
    packed: bool,
) {
    let mut rnd = xorshift(0x2545_F491_4F6C_DD1Du64);
    let bytes = archive_as(texts, packed);
    let a = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&bytes).unwrap();
    validate(Path::new("p"), a, texts.len() as u32).unwrap();
    assert_eq!(a.packed(), packed);
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
                // Windows cut at every block end (1) and at a few blocks; non-essential
                // lists always looked up per document (0), always scored a list at a time
                // (∞), or as search decides.
                for w in [1, 200, MIN_WINDOW] {
                    for dense in [0.0, DENSE_SEEKS, f32::INFINITY] {
                        // Words checked all at once always, never, or as search decides.
                        for lanes in [0, 65, LANES] {
                            let f = f32::NEG_INFINITY;
                            let qt = a.query_terms(&query, None);
                            let got = a.maxscore(&qt, k, al, de, f, None, w, dense, lanes);
                            assert_eq!(
                                got, slow,
                                "query {query:?} k {k} window {w} dense {dense} lanes {lanes}"
                            );
                        }
                    }
                }
                checked += fast.len();
                // Scoring chosen documents gives the very scores search gave them.
                let mut ids: Vec<u32> = slow.iter().map(|h| h.0).collect();
                ids.sort_unstable();
                let scores = a.score_docs(&query, &ids, None);
                for (&d, &sc) in ids.iter().zip(&scores) {
                    let want = slow.iter().find(|h| h.0 == d).unwrap().1;
                    assert_eq!(sc.to_bits(), want.to_bits(), "query {query:?} doc {d}");
                }
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

/// With index-wide length normalisation, documents cut into segments of very different
/// average lengths score bit for bit as in one segment of them all, and MaxScore over the
/// scaled block maxima still returns exactly what exhaustive scoring returns.
#[test]
fn index_wide_length_scores_segments_like_one() {
    let mut rnd = xorshift(0x2545_F491_4F6C_DD1Du64);
    let vocab: Vec<String> = (0..60).map(|i| format!("v{i}")).collect();
    // Short documents first, long ones last: the three segments' averages differ widely.
    let mut texts: Vec<String> = (0..1500)
        .map(|d| {
            let len = 2 + (rnd() % (4 + d as u64 / 10)) as usize;
            (0..len)
                .map(|_| vocab[(rnd() % (1 + rnd() % 60)) as usize].as_str())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    texts.sort_by_key(|t| t.len());
    let mk = archive_of;
    let whole = mk(&texts);
    let parts: Vec<_> = [0..200, 200..900, 900..1500]
        .into_iter()
        .map(|r| (r.start as u32, mk(&texts[r])))
        .collect();
    let one = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&whole).unwrap();
    let segs: Vec<(u32, &ArchivedPostingsArchive)> = parts
        .iter()
        .map(|(off, b)| {
            (
                *off,
                rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(b).unwrap(),
            )
        })
        .collect();
    let mut checked = 0;
    for q in 0..200 {
        let query: Vec<&str> = (0..1 + q % 4)
            .map(|_| vocab[(rnd() % 60) as usize].as_str())
            .collect();
        let query = query.join(" ");
        let mut st = TermStats::index_wide();
        for (_, p) in &segs {
            st.add_segment(p, &query);
        }
        let mut merged: Vec<(u32, f32)> = Vec::new();
        for (off, p) in &segs {
            let fast = p.search_above_with(&query, 20, None, None, f32::NEG_INFINITY, Some(&st));
            let slow = p.search_exhaustive_with(&query, 20, None, None, Some(&st));
            assert_eq!(fast, slow, "query {query:?}");
            // In descending score order (not ascending ids): the cursors start again.
            let ids: Vec<u32> = slow.iter().map(|h| h.0).collect();
            let scores = p.score_docs(&query, &ids, Some(&st));
            let want: Vec<f32> = slow.iter().map(|h| h.1).collect();
            assert_eq!(scores, want, "query {query:?}");
            merged.extend(fast.into_iter().map(|(d, s)| (d + off, s)));
        }
        merged.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        merged.truncate(20);
        assert_eq!(
            merged,
            one.search(&query, 20, None, None),
            "query {query:?}"
        );
        checked += merged.len();
    }
    assert!(checked > 1000, "{checked}");
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
        let deep = validate_blocks(Path::new("p"), a, 300).is_ok();
        if validate(Path::new("p"), a, 300).is_ok() {
            // What the open-time check lets through is searched without a panic: a damaged
            // block reads as empty.
            for q in ["alpha", "beta gamma", "alpha beta gamma"] {
                let hits = a.search(q, 10, None, None);
                assert!(hits.iter().all(|h| h.0 < 300));
                if deep {
                    assert_eq!(hits, a.search_exhaustive(q, 10, None, None));
                }
            }
        }
        deep
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
    let mut p = good.clone();
    p.data.pop();
    assert!(!check(&p));
    // A packed block's widths: past 32 bits, or not matching its byte length.
    let mut p = good.clone();
    p.data[1] = 33;
    assert!(!check(&p));
    let mut p = good;
    p.data[1] += 1;
    assert!(!check(&p));
}

/// Tokenization in fixed ranges (`TOKENIZE_RANGE`) with lists appended range by range gives,
/// for every term, exactly the (document, tf) list and document lengths that per-document
/// counting ([`document_terms`]) gives, across range boundaries and on any thread count.
#[test]
fn ranged_build_equals_per_document_terms() {
    let n = TOKENIZE_RANGE * 2 + 37;
    let texts: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "fn handler_{}(req: Request) {{ parse_{} body_{} body_{} shared_term }}",
                i % 97,
                i % 5,
                i % 3,
                i % 3
            )
        })
        .collect();
    let names: Vec<String> = (0..n).map(|i| format!("Handler{}", i % 11)).collect();
    let fields: Vec<DocFields> = texts
        .iter()
        .zip(&names)
        .map(|(t, nm)| DocFields {
            text: t,
            path: "src/handlers/mod.rs",
            name: nm,
            qualified: nm,
        })
        .collect();
    let mut want: BTreeMap<String, Vec<(u32, u32)>> = BTreeMap::new();
    let mut want_lens = Vec::new();
    for (d, f) in fields.iter().enumerate() {
        let (terms, len) = document_terms(f);
        want_lens.push(len);
        for (t, tf) in terms {
            want.entry(t).or_default().push((d as u32, tf));
        }
    }
    for threads in [1, 3] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let p = pool.install(|| build(&fields));
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&p).unwrap();
        let a = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&bytes).unwrap();
        validate_blocks(Path::new("p"), a, n as u32).unwrap();
        assert_eq!(a.terms.len(), want.len());
        for (t, list) in &want {
            assert_eq!(&a.postings(t), list, "term {t}");
        }
        let lens: Vec<u32> = a.doc_lens.iter().map(|l| l.to_native()).collect();
        assert_eq!(lens, want_lens);
        assert_eq!(
            a.total_len.to_native(),
            want_lens.iter().map(|&l| u64::from(l)).sum::<u64>()
        );
    }
}

/// The block decoder's eight-at-a-time path (one-byte varints) and its one-varint path give
/// exactly the postings written: dense runs (gaps and tfs below 128) interleaved with sparse
/// stretches (gaps of hundreds) and tfs past 128, so runs break at every offset in a block.
#[test]
fn varint_runs_decode_exactly() {
    let n = 6000u32;
    let mut r = 0x9E37_79B9_7F4A_7C15u64;
    let mut texts = Vec::new();
    let mut want = Vec::new();
    for d in 0..n {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        let dense = (d / 700) % 2 == 0;
        let hit = if dense {
            !r.is_multiple_of(3)
        } else {
            r.is_multiple_of(200)
        };
        if hit {
            let tf = if r.is_multiple_of(11) {
                129 + (r % 70) as usize
            } else {
                1 + (r % 4) as usize
            };
            texts.push(vec!["zeta"; tf].join(" ") + " pad");
            want.push((d, tf as u32));
        } else {
            texts.push("pad".to_string());
        }
    }
    // Format 4's varint blocks (still read) and format 5's packed full blocks (widths from 0
    // in the dense runs to 8+ bits in the sparse stretches and the large tfs).
    for packed in [false, true] {
        let bytes = archive_as(&texts, packed);
        let a = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&bytes).unwrap();
        validate_blocks(Path::new("p"), a, n).unwrap();
        assert_eq!(a.packed(), packed);
        assert!(want.len() > BLOCK * 10);
        assert_eq!(a.postings("zeta"), want, "packed {packed}");
    }
}

/// Packed and varint postings of the same documents hold the same lists and maxima, and the
/// packed ones are no larger; the tag byte that marks them packed is checked at open.
#[test]
fn packed_postings_read_like_varint_ones() {
    let texts: Vec<String> = (0..5000)
        .map(|i| {
            format!(
                "fn f{}() {{ common_{} rare_{} {} }}",
                i % 13,
                i % 2,
                i / 700,
                "dense ".repeat(1 + i % 5)
            )
        })
        .collect();
    let (pb, vb) = (archive_as(&texts, true), archive_as(&texts, false));
    let p = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&pb).unwrap();
    let v = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&vb).unwrap();
    for a in [p, v] {
        validate_blocks(Path::new("p"), a, texts.len() as u32).unwrap();
    }
    assert_eq!(p.terms.len(), v.terms.len());
    for t in v.terms.iter() {
        assert_eq!(
            p.postings(t.as_str()),
            v.postings(t.as_str()),
            "{}",
            t.as_str()
        );
    }
    assert_eq!(p.block_max.as_slice(), v.block_max.as_slice());
    assert_eq!(p.block_last.as_slice(), v.block_last.as_slice());
    assert!(
        p.data.len() < v.data.len(),
        "{} vs {}",
        p.data.len(),
        v.data.len()
    );
    for q in ["dense common_1", "f3 rare_2", "common_0 dense f12"] {
        assert_eq!(p.search(q, 20, None, None), v.search(q, 20, None, None));
    }
    // Without its tag byte (or with the tag and the first block at 0) the data is refused.
    let good = build_for_tests(&texts, true);
    assert_eq!((good.data[0], good.block_offsets[0]), (PACKED, 1));
    let refused = |p: &PostingsArchive| {
        let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(p).unwrap();
        let a = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&bytes).unwrap();
        validate(Path::new("p"), a, texts.len() as u32).is_err()
    };
    let mut bad = good.clone();
    bad.data[0] = 0;
    assert!(refused(&bad));
    // The first block at 0 reads as varint postings (whose first byte may well be 1): the
    // open-time check lets it through, decoding the blocks does not.
    let mut bad = good.clone();
    bad.block_offsets[0] = 0;
    let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&bad).unwrap();
    let a = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&bytes).unwrap();
    assert!(validate_blocks(Path::new("p"), a, texts.len() as u32).is_err());
    assert!(!refused(&good));
}

/// Every single-byte change of the encoded blocks, packed (format 5) and varint (format 4):
/// the decoder never panics or reads out of bounds, a search returns only documents of the
/// archive, and when every block still decodes, MaxScore equals exhaustive scoring; most
/// changes are caught by decoding the blocks (`validate_blocks`).
#[test]
fn every_byte_change_of_the_blocks_is_caught_or_harmless() {
    let texts = block_fixture_texts();
    for packed in [true, false] {
        let good = build_for_tests(&texts, packed);
        let (mut caught, mut total) = (0usize, 0usize);
        for at in 0..good.data.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut p = good.clone();
                p.data[at] ^= flip;
                let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&p).unwrap();
                let a =
                    rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&bytes).unwrap();
                total += 1;
                if validate(Path::new("p"), a, 700).is_err() {
                    caught += 1;
                    continue;
                }
                let deep = validate_blocks(Path::new("p"), a, 700).is_ok();
                caught += usize::from(!deep);
                for q in ["alpha gamma", "beta_1 rare", "sparse alpha beta_0"] {
                    let hits = a.search(q, 10, None, None);
                    assert!(hits.iter().all(|h| h.0 < 700), "byte {at}");
                    if deep {
                        assert_eq!(hits, a.search_exhaustive(q, 10, None, None), "byte {at}");
                    }
                }
            }
        }
        // A change that still decodes moved a tf or a gap within its block's last id.
        assert!(
            caught * 2 > total,
            "packed {packed}: {caught} of {total} caught"
        );
    }
}

/// A query tokenized once and resolved per segment (what code search does) scores, seeds and
/// counts exactly as the same query given as a string to every call; ids resolved by one
/// segment's postings, handed to another's, are looked up again there, never read.
#[test]
fn resolved_terms_equal_string_queries() {
    let mut rnd = xorshift(0x9E37_79B9_7F4A_7C15u64);
    let vocab: Vec<String> = (0..80).map(|i| format!("w{i}")).collect();
    let texts = |n: usize, rnd: &mut dyn FnMut() -> u64| -> Vec<String> {
        (0..n)
            .map(|_| {
                let len = 2 + (rnd() % 30) as usize;
                (0..len)
                    .map(|_| vocab[(rnd() % (1 + rnd() % 80)) as usize].as_str())
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect()
    };
    // The second segment has a smaller vocabulary: some query terms are absent there, and
    // the same term has another id in each dictionary.
    let (ta, tb) = (texts(1200, &mut rnd), texts(700, &mut rnd));
    let tb: Vec<String> = tb
        .iter()
        .map(|t| {
            t.split(' ')
                .filter(|w| w.len() == 2)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let (ba, bb) = (archive_of(&ta), archive_of(&tb));
    let a = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&ba).unwrap();
    let b = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&bb).unwrap();
    let mut checked = 0;
    for q in 0..150 {
        // Repeated terms (query term frequency 2), and now and then a term no segment holds.
        let mut words: Vec<&str> = (0..1 + q % 5)
            .map(|_| vocab[(rnd() % 80) as usize].as_str())
            .collect();
        if q % 3 == 0 {
            words.push(words[0]);
        }
        if q % 7 == 0 {
            words.push("nowhere");
        }
        let query = words.join(" ");
        let terms = QueryTerms::new(&query);
        let ids = [a.resolve(&terms), b.resolve(&terms)];
        let (mut st, mut st_ids) = (TermStats::index_wide(), TermStats::index_wide());
        for (p, ids) in [a, b].into_iter().zip(&ids) {
            st.add_segment(p, &query);
            st_ids.add_resolved(p, ids);
        }
        assert_eq!(st, st_ids, "query {query:?}");
        for (p, ids) in [a, b].into_iter().zip(&ids) {
            for floor in [f32::NEG_INFINITY, 1.0] {
                for stats in [None, Some(&st)] {
                    let want = p.search_above_with(&query, 25, None, None, floor, stats);
                    let got = p.search_terms(ids, 25, None, None, floor, stats);
                    assert_eq!(got, want, "query {query:?}");
                    checked += got.len();
                }
            }
            let docs: Vec<u32> = (0..p.doc_count()).step_by(7).collect();
            assert_eq!(
                p.score_docs_terms(ids, &docs, Some(&st)),
                p.score_docs(&query, &docs, Some(&st))
            );
            for (i, t) in terms.terms().enumerate() {
                assert_eq!(p.postings_of(ids, i), p.postings(t), "term {t}");
            }
        }
        // The other segment's ids: the query is looked up again, never those ids read.
        for (p, own, other) in [(a, &ids[0], &ids[1]), (b, &ids[1], &ids[0])] {
            let f = f32::NEG_INFINITY;
            assert_eq!(
                p.search_terms(other, 25, None, None, f, Some(&st)),
                p.search_terms(own, 25, None, None, f, Some(&st))
            );
            assert_eq!(
                p.score_docs_terms(other, &[0, 1, 2], None),
                p.score_docs_terms(own, &[0, 1, 2], None)
            );
            assert!((0..terms.len()).all(|i| p.postings_of(other, i) == p.postings_of(own, i)));
            let (mut x, mut y) = (TermStats::default(), TermStats::default());
            x.add_resolved(p, other);
            y.add_resolved(p, own);
            assert_eq!(x, y);
        }
    }
    assert!(checked > 2000, "{checked}");
}

/// Lookups narrowed by the fences `validate` gathers find exactly what a search of the whole
/// dictionary finds: every term at its index, and nothing for absent terms next to present
/// ones (one byte changed, cut short, extended), including runs of terms that share their
/// first 8 bytes across several fences, terms shorter than 8 bytes and non-ASCII ones. Fences
/// of another dictionary are not used.
#[test]
fn fenced_lookups_equal_plain_ones() {
    let letters = |mut n: usize, width: usize| -> String {
        let mut s = vec![b'a'; width];
        for c in s.iter_mut().rev() {
            *c = b'a' + (n % 26) as u8;
            n /= 26;
        }
        String::from_utf8(s).unwrap()
    };
    let mut words: Vec<String> = Vec::new();
    // 300 terms with the prefix `abcdefghij` (about 19 fences with equal prefixes).
    words.extend((0..300).map(|i| format!("abcdefghij{}", letters(i, 2))));
    words.extend((0..200).map(|i| letters(i * 7, 3)));
    words.extend(
        [
            "a",
            "ab",
            "abc",
            "abcdefgh",
            "abcdefghi",
            "zzzzzzzzzz",
            "é",
            "naïve",
            "日本語",
        ]
        .map(String::from),
    );
    let texts: Vec<String> = words.chunks(5).map(|w| w.join(" ")).collect();
    let ba = archive_of(&texts);
    let p = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&ba).unwrap();
    let fences = validate(std::path::Path::new("postings"), p, p.doc_count()).unwrap();
    let nt = p.terms.len();
    assert!(
        nt > 500 && fences.prefixes.len() == nt.div_ceil(FENCE_STEP),
        "{nt}"
    );
    let dict: Vec<String> = p.terms.iter().map(|t| t.as_str().to_string()).collect();
    let mut probes: Vec<String> = vec![String::new(), "\u{10FFFF}".into(), "abcdefgh\0".into()];
    for t in &dict {
        let b = t.as_bytes();
        probes.push(t.clone());
        probes.push(format!("{t}a"));
        probes.push(format!("{t}\0"));
        probes.push(String::from_utf8_lossy(&b[..b.len() - 1]).into_owned());
        for delta in [1i16, -1] {
            let mut c = b.to_vec();
            let last = c.len() - 1;
            c[last] = (c[last] as i16 + delta).clamp(0, 255) as u8;
            probes.push(String::from_utf8_lossy(&c).into_owned());
        }
    }
    let mut found = 0;
    for q in &probes {
        let plain = p.term_id(q);
        assert_eq!(p.term_id_fenced(q, &fences), plain, "{q:?}");
        found += usize::from(plain.is_some());
    }
    assert!(found >= nt, "{found}");
    for (i, t) in dict.iter().enumerate() {
        assert_eq!(p.term_id_fenced(t, &fences), Some(i), "{t}");
    }
    // Resolving a query through the fences gives the ids of a plain resolve.
    let q = QueryTerms::new("abcdefghijab missing naïve zzzzzzzzzz abc");
    let (x, y) = (p.resolve_fenced(&q, &fences), p.resolve(&q));
    assert!((0..q.len()).all(|i| x.get(i) == y.get(i)));
    // Another dictionary's fences (another term count) are not used.
    let other = archive_of(&texts[..20]);
    let o = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&other).unwrap();
    let wrong = validate(std::path::Path::new("postings"), o, o.doc_count()).unwrap();
    for t in dict.iter().step_by(7) {
        assert_eq!(p.term_id_fenced(t, &wrong), p.term_id(t), "{t}");
    }
}

/// Merged postings equal the postings built from the merged documents' texts, field for field:
/// two parts whose documents interleave in the merged order, some dropped (a term whose every
/// document is dropped leaves the dictionary), dense terms over many full blocks, and the
/// fixture's wide gaps and frequencies. A damaged block fails the merge.
#[test]
fn merged_postings_equal_postings_built_from_the_merged_texts() {
    let mut next = xorshift(0x5eed);
    let words = ["alpha", "beta", "gamma", "delta", "only_in_dropped", "rare"];
    let mut texts_a: Vec<String> = block_fixture_texts();
    let mut texts_b: Vec<String> = Vec::new();
    for i in 0..900 {
        let n = 1 + next() % 12;
        let t: Vec<&str> = (0..n).map(|_| words[(next() % 4) as usize]).collect();
        let mut t = t.join(" ");
        if i % 97 == 0 {
            t.push_str(" rare");
        }
        texts_b.push(t);
    }
    texts_a[3].push_str(" only_in_dropped");
    // A keeps every document but 3 and each tenth; B drops each seventh. The merged order
    // interleaves them: A's kept documents at even positions while both last.
    let (na, nb) = (texts_a.len(), texts_b.len());
    let keep_a: Vec<bool> = (0..na).map(|i| i != 3 && i % 10 != 0).collect();
    let keep_b: Vec<bool> = (0..nb).map(|i| i % 7 != 0).collect();
    let (mut map_a, mut map_b) = (vec![u32::MAX; na], vec![u32::MAX; nb]);
    let mut merged: Vec<String> = Vec::new();
    let (mut ia, mut ib) = (0, 0);
    while ia < na || ib < nb {
        let take_a = ib >= nb || (ia < na && merged.len().is_multiple_of(2));
        let (keep, map, texts, i) = if take_a {
            (&keep_a, &mut map_a, &texts_a, &mut ia)
        } else {
            (&keep_b, &mut map_b, &texts_b, &mut ib)
        };
        if keep[*i] {
            map[*i] = merged.len() as u32;
            merged.push(texts[*i].clone());
        }
        *i += 1;
    }
    let (ba, bb) = (archive_of(&texts_a), archive_of(&texts_b));
    let a = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&ba).unwrap();
    let b = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&bb).unwrap();
    let path = Path::new("postings.rkyv");
    let part = |postings, map| MergePart {
        postings,
        map,
        path,
    };
    let parts = [part(a, &map_a), part(b, &map_b)];
    let got = merge(&parts, merged.len() as u32).unwrap();
    let want = build_for_tests(&merged, true);
    assert!(!got.terms.iter().any(|t| t == "only_in_dropped"));
    assert!(got.block_last.len() > 20, "several full blocks");
    assert_eq!(got, want);

    // A map that leaves a merged document without a part, or names one twice, is refused.
    assert!(merge(&parts, merged.len() as u32 + 1).is_err());
    let mut twice = map_b.clone();
    twice[1] = map_a[1];
    let bad = [part(a, &map_a), part(b, &twice)];
    assert!(merge(&bad, merged.len() as u32).is_err());

    // A damaged full block of A: its packed width byte past 32.
    let mut damaged = build_for_tests(&texts_a, true);
    let off = damaged.block_offsets[0] as usize;
    damaged.data[off] = 40;
    let bytes = rkyv::to_bytes::<rkyv::rancor::Error>(&damaged).unwrap();
    let d = rkyv::access::<ArchivedPostingsArchive, rkyv::rancor::Error>(&bytes).unwrap();
    let parts = [part(d, &map_a), part(b, &map_b)];
    let err = merge(&parts, merged.len() as u32).unwrap_err();
    assert!(err.to_string().contains("does not decode"), "{err}");
}

/// The batched score factors are bit for bit the per-posting ones (every kernel the CPU runs:
/// the AVX2 one where it has AVX2, and the portable one), over run lengths that are not
/// multiples of the lanes, the smallest and largest frequencies and lengths, and
/// frequencies and lengths at and past 2^31 (where a conversion through i32 would differ).
#[test]
fn batched_factors_equal_one_at_a_time() {
    type Kernel = fn(Params, f32, &[u32], &[u32], &mut [f32]);
    let mut rnd = xorshift(0xB10C_FAC7_0000_0001);
    for avg in [1.0f32, 3.7, 57.25, 4096.0] {
        let params = Params::with_avg(avg);
        for m in [0usize, 1, 3, 7, 8, 9, 31, 64, 127, 128] {
            let mut tfs: Vec<u32> = (0..m).map(|_| 1 + (rnd() % 40) as u32).collect();
            let mut dls: Vec<u32> = (0..m).map(|_| (rnd() % 5000) as u32).collect();
            if m > 4 {
                tfs[0] = u32::MAX;
                dls[1] = u32::MAX;
                tfs[2] = 1 << 31;
                dls[3] = (1 << 31) + 12345;
                dls[4] = 0;
            }
            let w = (rnd() % 1000) as f32 / 97.0;
            let want: Vec<u32> = tfs
                .iter()
                .zip(&dls)
                .map(|(&tf, &dl)| (w * params.factor(tf, dl)).to_bits())
                .collect();
            let kernels: [(&str, Kernel); 2] = [
                ("dispatched", Params::factors),
                ("portable", Params::factors_portable),
            ];
            for (name, kernel) in kernels {
                let mut out = vec![0f32; m];
                kernel(params, w, &tfs, &dls, &mut out);
                assert_eq!(
                    out.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                    want,
                    "m {m}, {name}"
                );
            }
        }
    }
}
