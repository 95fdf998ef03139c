//! One-bit code tests: the rotation is orthogonal, the estimates track the exact scores, the
//! candidates hold the exact top 10, filters apply inside the scan, the bytes do not depend on
//! the thread count, and damaged or mismatched files are errors.

use super::*;
use crate::vectors::{dot, write_ivf};

fn clustered(n: usize, dim: usize, clusters: usize, seed: u64, noise: f32) -> Vec<f32> {
    crate::vectors::clustered_for_tests(n, dim, clusters, seed | 1, noise)
}

/// An IVF file and its codes in `dir`, for `v`.
fn build(dir: &Path, v: &[f32], dim: usize) -> (MappedIvf, MappedRbq) {
    let n = v.len() / dim;
    let p = dir.join(crate::vectors::IVF_FILE);
    write_ivf(&p, v, dim).unwrap();
    let ivf = MappedIvf::open(&p, dim, n).unwrap();
    let payload = encode(&ivf, v, dim, &|_| {}).unwrap();
    let rp = dir.join(Component::Rabitq.file_name());
    std::fs::write(
        &rp,
        header::frame(Component::Rabitq, dim as u32, "m", &payload),
    )
    .unwrap();
    let rbq = MappedRbq::open(&rp, dim, "m", &ivf).unwrap();
    (ivf, rbq)
}

fn all_lists(ivf: &MappedIvf, q: &[f32]) -> Vec<(u32, f32)> {
    ivf.coarse(q)
        .into_iter()
        .enumerate()
        .map(|(l, s)| (l as u32, s))
        .collect()
}

#[test]
fn table_sums_fit_sixteen_bits_up_to_the_largest_dimension() {
    assert!(applies(384) && applies(MAX_DIM) && !applies(MAX_DIM + 1) && !applies(64));
    // 15 per dimension, padding dimensions at 0.
    assert!(15 * MAX_DIM <= u16::MAX as usize);
}

#[test]
fn rotation_is_orthogonal() {
    for dim in [1, 2, 7, 64, 100, 129, 257, 384, 768] {
        let rot = Rotation::new(dim, SEED);
        let a: Vec<f32> = (0..dim)
            .map(|i| ((i * 7 + 3) as f32 * 0.37).sin())
            .collect();
        let b: Vec<f32> = (0..dim)
            .map(|i| ((i * 5 + 1) as f32 * 0.11).cos())
            .collect();
        let (mut ra, mut rb) = (a.clone(), b.clone());
        rot.apply(&mut ra);
        rot.apply(&mut rb);
        let tol = 1e-4 * dim as f32;
        assert!((dot(&ra, &ra) - dot(&a, &a)).abs() < tol, "norm, dim {dim}");
        assert!(
            (dot(&ra, &rb) - dot(&a, &b)).abs() < tol,
            "inner product, dim {dim}"
        );
        if dim >= 64 {
            // It mixes: a basis vector spreads over many coordinates.
            let mut e = vec![0f32; dim];
            e[0] = 1.0;
            rot.apply(&mut e);
            let big = e
                .iter()
                .filter(|x| x.abs() > 0.5 / (dim as f32).sqrt())
                .count();
            assert!(big > dim / 2, "dim {dim}: {big} coordinates carry weight");
        }
    }
}

/// Estimates are close to the exact inner products, and the best 200 estimates (2.5%) hold
/// every exact top 10 when every list is scanned.
#[test]
fn estimates_track_exact_scores() {
    let (n, dim) = (8000, 384);
    // Queries: 40 more rows of the same mixture (not in the index).
    let all = clustered(n + 40, dim, 40, 11, 0.3);
    let (v, queries) = all.split_at(n * dim);
    let tmp = tempfile::tempdir().unwrap();
    let (ivf, rbq) = build(tmp.path(), v, dim);
    rbq.check_ids(&ivf).unwrap();
    let (mut err, mut cnt, mut found) = (0f64, 0usize, 0usize);
    for q in queries.chunks_exact(dim) {
        let est = rbq.scan(q, &all_lists(&ivf, q), n, None, None).unwrap();
        assert_eq!(est.len(), n);
        for &(c, s) in est.iter().step_by(37) {
            err += (s - dot(&v[c as usize * dim..(c as usize + 1) * dim], q)).abs() as f64;
            cnt += 1;
        }
        let exact = crate::vectors::exact_search(v, dim, q, 10, None, None);
        // A cluster's 200 members score within ~0.01 of each other: one-bit estimates cannot
        // order them, but the cluster as a whole must come first.
        let top: Vec<u32> = est.iter().take(200).map(|x| x.0).collect();
        found += exact.iter().filter(|(c, _)| top.contains(c)).count();
    }
    let mean = err / cnt as f64;
    assert!(mean < 0.015, "mean absolute error {mean}");
    assert_eq!(
        found, 400,
        "of the exact top 10s among the best 200 estimates"
    );
}

/// The AVX2 block sums equal the table lookups, for every half-byte pattern.
#[test]
fn block_sums_match_the_scalar_lookup() {
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut byte = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 24) as u8
    };
    // 136 and 392 dimensions: group counts that are not multiples of four (the AVX-512
    // kernel's half step).
    for dim in [128, 136, 384, 392, 768] {
        let g = groups(dim);
        let codes: Vec<u8> = (0..16 * g).map(|_| byte()).collect();
        let luts: Vec<u8> = (0..16 * g).map(|_| byte() % 61).collect();
        let (mut a, mut b) = ([0u16; BLOCK], [0u16; BLOCK]);
        block_sums_scalar(&codes, &luts, &mut a);
        block_sums(&codes, &luts, &mut b);
        assert_eq!(a, b, "dim {dim}");
        #[cfg(target_arch = "x86_64")]
        {
            // Each SIMD kernel the CPU has, whichever `block_sums` picked.
            if crate::cpu::avx2_fma() {
                let mut c = [0u16; BLOCK];
                // SAFETY: AVX2 checked; equal lengths, a multiple of 32.
                unsafe { simd::block_sums_avx2(&codes, &luts, &mut c) };
                assert_eq!(a, c, "AVX2, dim {dim}");
            }
            if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw")
            {
                let mut c = [0u16; BLOCK];
                // SAFETY: AVX-512F/BW checked; equal lengths, a multiple of 32.
                unsafe { simd::block_sums_avx512(&codes, &luts, &mut c) };
                assert_eq!(a, c, "AVX-512, dim {dim}");
            }
        }
    }
}

/// The largest sums (every table entry 60, every bit set) stay exact in both SIMD kernels:
/// 16-bit lanes that wrap in between give the same result modulo 2^16.
#[test]
fn block_sums_are_exact_at_the_largest_tables() {
    // 4,368: the largest multiple of 8 whose full sum (60 per group) fits 16 bits.
    for dim in [384, 392, 4368] {
        let g = groups(dim);
        let codes = vec![0xffu8; 16 * g];
        let luts = vec![60u8; 16 * g];
        let (mut a, mut b) = ([0u16; BLOCK], [0u16; BLOCK]);
        block_sums_scalar(&codes, &luts, &mut a);
        block_sums(&codes, &luts, &mut b);
        assert_eq!(a, b, "dim {dim}");
        assert_eq!(a[0] as usize, 60 * g, "dim {dim}");
        assert!(dim <= MAX_DIM);
    }
}

/// The table sums are `Σ b_i · k_i`: checked against a direct sum over a packed block.
#[test]
fn packed_blocks_sum_the_set_levels() {
    let dim = 130;
    let rot = Rotation::new(dim, SEED);
    let centroid = vec![0f32; dim];
    let w = words(dim);
    let mut bits = vec![0u64; 20 * w];
    let factors: Vec<(f32, f32)> = bits
        .chunks_mut(w)
        .enumerate()
        .map(|(i, b)| {
            let v: Vec<f32> = (0..dim)
                .map(|d| ((d as u32 * 7 + i as u32 * 13) as f32).sin())
                .collect();
            encode_one(&rot, &v, &centroid, b)
        })
        .collect();
    let codes: Vec<(Code, u32)> = factors
        .iter()
        .enumerate()
        .map(|(i, &(f, g))| {
            let code = Code {
                bits: &bits[i * w..(i + 1) * w],
                f,
                g,
            };
            (code, i as u32)
        })
        .collect();
    let mut block = Vec::new();
    pack_block(&codes, dim, &mut block);
    assert_eq!(block.len(), block_bytes(dim));
    let query: Vec<f32> = (0..dim).map(|d| (d as f32 * 0.3).cos()).collect();
    let q = Prepared::new(&rot, &query);
    let mut sums = [0u16; BLOCK];
    block_sums(&block[..16 * groups(dim)], &q.luts, &mut sums);
    let mut rq = query.clone();
    rot.apply(&mut rq);
    for (v, (c, _)) in codes.iter().enumerate() {
        let want: u32 = (0..dim)
            .filter(|&i| c.bit(i))
            .map(|i| level(&q, &rq, i))
            .sum();
        assert_eq!(sums[v] as u32, want, "code {v}");
    }
    // Padding slots sum to nothing.
    assert!(sums[20..].iter().all(|&s| s == 0));
}

/// The 4-bit level of rotated query coordinate `i`.
fn level(q: &Prepared, rotated: &[f32], i: usize) -> u32 {
    (((rotated[i] - q.lo) / q.delta) + 0.5)
        .floor()
        .clamp(0.0, 15.0) as u32
}

#[test]
fn filters_apply_inside_the_scan() {
    let (n, dim) = (5000, 64);
    let v = clustered(n, dim, 40, 3, 0.5);
    let tmp = tempfile::tempdir().unwrap();
    let (ivf, rbq) = build(tmp.path(), &v, dim);
    let q = &v[..dim];
    let allow: RoaringBitmap = (0..n as u32).step_by(5).collect();
    let deny: RoaringBitmap = (0..500).collect();
    let got = rbq
        .scan(q, &all_lists(&ivf, q), 10, Some(&allow), Some(&deny))
        .unwrap();
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(|(c, _)| c % 5 == 0 && *c >= 500));
    assert!(got.windows(2).all(|w| w[0].1 >= w[1].1));
}

/// Encoding row by row in passes writes what encoding list by list writes (each list's rows
/// encoded as they come, as the codes were first computed), and `consumed` hears of every
/// row once, in order.
#[test]
fn codes_in_row_passes_equal_codes_by_list() {
    let (n, dim) = (2 * ENCODE_PASS + 333, 130);
    let v = clustered(n, dim, 60, 11, 0.4);
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join(crate::vectors::IVF_FILE);
    write_ivf(&p, &v, dim).unwrap();
    let ivf = MappedIvf::open(&p, dim, n).unwrap();
    let seen = std::sync::Mutex::new(Vec::new());
    let got = encode(&ivf, &v, dim, &|r| seen.lock().unwrap().push(r)).unwrap();
    assert_eq!(
        seen.into_inner().unwrap(),
        vec![
            0..ENCODE_PASS,
            ENCODE_PASS..2 * ENCODE_PASS,
            2 * ENCODE_PASS..n
        ]
    );
    let rot = Rotation::new(dim, SEED);
    let mut want = got[..PRELUDE + 8 * ivf.nlist()].to_vec();
    for l in 0..ivf.nlist() {
        let centroid = ivf.centroid(l);
        let rows: Vec<(Vec<u64>, (f32, f32), u32)> = ivf
            .list_ids(l)
            .map(|id| {
                let row = id as usize;
                let mut b = vec![0u64; words(dim)];
                let fg = encode_one(&rot, &v[row * dim..(row + 1) * dim], &centroid, &mut b);
                (b, fg, row as u32)
            })
            .collect();
        let codes: Vec<(Code, u32)> = rows
            .iter()
            .map(|(b, (f, g), row)| {
                (
                    Code {
                        bits: b,
                        f: *f,
                        g: *g,
                    },
                    *row,
                )
            })
            .collect();
        for block in codes.chunks(BLOCK) {
            pack_block(block, dim, &mut want);
        }
    }
    assert_eq!(got.len(), want.len());
    assert!(got == want, "codes differ");
}

#[test]
fn codes_do_not_depend_on_threads() {
    let (n, dim) = (6000, 100);
    let v = clustered(n, dim, 30, 5, 0.5);
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join(crate::vectors::IVF_FILE);
    write_ivf(&p, &v, dim).unwrap();
    let ivf = MappedIvf::open(&p, dim, n).unwrap();
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let three = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    let a = one.install(|| encode(&ivf, &v, dim, &|_| {}).unwrap());
    let b = three.install(|| encode(&ivf, &v, dim, &|_| {}).unwrap());
    assert!(a == b);
    let blocks: usize = (0..ivf.nlist())
        .map(|l| ivf.list_len(l).div_ceil(BLOCK))
        .sum();
    assert_eq!(
        a.len(),
        PRELUDE + 8 * ivf.nlist() + blocks * block_bytes(dim)
    );
}

#[test]
fn damaged_or_mismatched_files_are_errors() {
    let (n, dim) = (5000, 64);
    let v = clustered(n, dim, 40, 9, 0.5);
    let tmp = tempfile::tempdir().unwrap();
    let (ivf, _) = build(tmp.path(), &v, dim);
    let rp = tmp.path().join(Component::Rabitq.file_name());
    let good = std::fs::read(&rp).unwrap();
    let write_open = |bytes: &[u8]| {
        std::fs::write(&rp, bytes).unwrap();
        MappedRbq::open(&rp, dim, "m", &ivf)
    };
    // Truncated.
    let e = write_open(&good[..good.len() - 3]).unwrap_err();
    assert!(matches!(e, FormatError::Corrupt { .. }), "{e}");
    // Another model.
    std::fs::write(&rp, &good).unwrap();
    assert!(MappedRbq::open(&rp, dim, "other", &ivf).is_err());
    // A list size that disagrees with ivf.faiss (moved from list 0 to list 1).
    let mut bad = good.clone();
    let at = HEADER_LEN + PRELUDE;
    let l0 = le_u64(&bad[at..]);
    let l1 = le_u64(&bad[at + 8..]);
    bad[at..at + 8].copy_from_slice(&(l0 - 1).to_le_bytes());
    bad[at + 8..at + 16].copy_from_slice(&(l1 + 1).to_le_bytes());
    let e = write_open(&bad).unwrap_err();
    assert!(e.to_string().contains("list 0"), "{e}");
    // A repeated chunk id: opens (sizes agree) but the verifier's check fails, and a scan
    // skips ids past the end.
    let mut bad = good.clone();
    // Ids of the first block of list 0 (which holds more than 3 codes).
    assert!(ivf.list_len(0) > 3);
    let block0 = HEADER_LEN + PRELUDE + 8 * ivf.nlist();
    let id_at = |v: usize| block0 + 16 * groups(dim) + 8 * BLOCK + 4 * v;
    let first = le_u32(&bad[id_at(0)..]);
    bad[id_at(1)..id_at(1) + 4].copy_from_slice(&first.to_le_bytes());
    bad[id_at(2)..id_at(2) + 4].copy_from_slice(&(n as u32 + 7).to_le_bytes());
    let r = write_open(&bad).unwrap();
    assert!(r.check_ids(&ivf).is_err());
    let q = &v[..dim];
    let got = r.scan(q, &all_lists(&ivf, q), n, None, None).unwrap();
    assert!(got.iter().all(|(c, _)| (*c as usize) < n));
    // Every chunk named once, but two codes of list 0 swapped: out of ivf.faiss's order
    // (each would be estimated against the wrong code), which the verifier reports.
    let mut bad = good.clone();
    let (a, b) = (le_u32(&bad[id_at(0)..]), le_u32(&bad[id_at(1)..]));
    bad[id_at(0)..id_at(0) + 4].copy_from_slice(&b.to_le_bytes());
    bad[id_at(1)..id_at(1) + 4].copy_from_slice(&a.to_le_bytes());
    let swapped = write_open(&bad).unwrap();
    let e = swapped.check_ids(&ivf).unwrap_err();
    assert!(e.to_string().contains("list 0 slot 0"), "{e}");
    // Wrong dimension of the query.
    assert!(r.scan(&q[..dim - 1], &[], 5, None, None).is_err());
}

/// A scan above a floor returns exactly the plain scan's candidates at or above it.
#[test]
fn scan_above_keeps_exactly_the_candidates_at_or_above_the_floor() {
    let (n, dim) = (3000, 128);
    let v = clustered(n, dim, 20, 7, 0.3);
    let tmp = tempfile::tempdir().unwrap();
    let (ivf, rbq) = build(tmp.path(), &v, dim);
    for q in v.chunks_exact(dim).step_by(701) {
        let lists = all_lists(&ivf, q);
        let all = rbq.scan(q, &lists, 300, None, None).unwrap();
        assert_eq!(all.len(), 300);
        for floor in [
            f32::NEG_INFINITY,
            all[0].1 + 1.0,
            all[10].1,
            all[150].1,
            all[299].1,
        ] {
            let want: Vec<(u32, f32)> = all.iter().copied().filter(|x| x.1 >= floor).collect();
            assert_eq!(
                rbq.scan_above(q, &lists, 300, None, None, floor).unwrap(),
                want
            );
            // The same candidates in no particular order.
            let mut any = rbq
                .scan_best(q, &lists, 300, None, None, floor)
                .unwrap()
                .into_unordered();
            any.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            assert_eq!(any, want);
        }
    }
}

/// The block mask admits exactly what `Best::admits` does: scores at or above the floor, a
/// NaN never, and every other score (minus infinity too) under a floor of minus infinity.
#[test]
fn admitted_mask_is_the_floor_test() {
    let mut scores = [0f32; BLOCK];
    for (v, s) in scores.iter_mut().enumerate() {
        *s = (v as f32 - 16.0) / 4.0;
    }
    scores[3] = f32::NAN;
    scores[7] = f32::INFINITY;
    scores[9] = f32::NEG_INFINITY;
    for floor in [
        f32::NEG_INFINITY,
        -4.0,
        -0.25,
        0.0,
        1.0,
        3.75,
        f32::INFINITY,
    ] {
        let mask = super::admitted_mask(&scores, floor);
        for (v, &s) in scores.iter().enumerate() {
            assert_eq!(mask >> v & 1 == 1, s >= floor, "score {s} floor {floor}");
        }
    }
    assert_eq!(
        super::admitted_mask(&scores, f32::NEG_INFINITY),
        !(1u32 << 3)
    );
}

/// A query prepared once is reused only for the same bits at the same dimension: a repeat
/// is reused; a one-ulp change, the other sign of a zero and another dimension are prepared
/// afresh; whatever comes back equals a fresh preparation.
#[test]
fn prepared_queries_are_reused_only_for_the_same_query() {
    let (r128, r256) = (Rotation::new(128, SEED), Rotation::new(256, SEED));
    let a: Vec<f32> = (0..128).map(|d| (d as f32 * 0.37).sin()).collect();
    let mut b = a.clone();
    b[77] = f32::from_bits(b[77].to_bits() + 1);
    let mut z = a.clone();
    z[5] = 0.0;
    let mut nz = z.clone();
    nz[5] = -0.0;
    let wide: Vec<f32> = (0..256).map(|d| (d as f32 * 0.11).cos()).collect();
    let fresh = |rot: &Rotation, q: &[f32]| {
        let before = prepared(rot, q);
        assert_eq!(*before, Prepared::new(rot, q));
        before
    };
    let pa = fresh(&r128, &a);
    assert!(
        std::rc::Rc::ptr_eq(&pa, &prepared(&r128, &a)),
        "a repeat is reused"
    );
    let pb = fresh(&r128, &b);
    assert!(!std::rc::Rc::ptr_eq(&pa, &pb), "one ulp apart");
    let pz = fresh(&r128, &z);
    let pnz = fresh(&r128, &nz);
    assert!(!std::rc::Rc::ptr_eq(&pz, &pnz), "0.0 and -0.0");
    let pw = fresh(&r256, &wide);
    assert!(!std::rc::Rc::ptr_eq(&pnz, &pw));
    let again = fresh(&r128, &a);
    assert!(!std::rc::Rc::ptr_eq(&pw, &again));
    assert!(std::rc::Rc::ptr_eq(&again, &prepared(&r128, &a)));
}
