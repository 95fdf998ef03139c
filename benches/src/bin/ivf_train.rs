//! IVF building: FAISS's (k-means, SQ8 ranges, adds) against ours (the k-means on the GPU,
//! `kernels::gpu::kmeans` through `Encoder::train_ivf_centroids`, or on the CPU,
//! `format::ivf_write::train_centroids`; then `format::ivf_write::write_ivf_sq8`: the
//! indexer's paths) on the same vectors, and the recall both indexes reach.
//!
//! Vectors are synthetic unit vectors around random centres (deterministic). Both indexes are
//! `IVF{nlist},SQ8` over all vectors with the segment's rule for `nlist` and training sample.
//! Printed: the k-means time on each side (FAISS's is `write_ivf` minus `write_ivf_with` given
//! our centroids), the rest of the index on each side (and whether the two files built on our
//! centroids are the same bytes), the whole index build on each side, and
//! recall@10 of the IVF candidates against exact search at `--nprobe`, the exact top-10 computed
//! both by the GPU top-k kernel (on a GPU) and by the CPU scan (timed, and compared list by
//! list).
//!
//! Run: `cargo run --release -p cix-benches --features wgpu --bin ivf_train -- --device wgpu
//! [--n 1000000] [--dim 384] [--queries 200] [--nprobe 32] [--threads N]`; without a GPU
//! feature (or with `--device cpu`) it compares FAISS's k-means with the CPU build's.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Parser;
use format::ivf_write;
use format::vectors::{self, Ivf};
use kernels::topk::TopKKernel;

#[derive(Parser)]
struct Args {
    /// Number of vectors.
    #[arg(long, default_value_t = 1_000_000)]
    n: usize,
    #[arg(long, default_value_t = 384)]
    dim: usize,
    /// Random centres the vectors are drawn around.
    #[arg(long, default_value_t = 4096)]
    centres: usize,
    #[arg(long, default_value_t = 200)]
    queries: usize,
    #[arg(long, default_value_t = vectors::DEFAULT_NPROBE)]
    nprobe: usize,
    /// FAISS's OpenMP threads; default: all cores (ours run on rayon's pool, all cores; BLAS
    /// runs one thread per call either way).
    #[arg(long)]
    threads: Option<usize>,
    /// Where our k-means runs: wgpu | cuda (needs the matching cargo feature) | cpu | auto.
    #[arg(long, default_value = "auto")]
    device: kernels::DeviceChoice,
    /// Model directory (the encoder is loaded only to reach its GPU device).
    #[arg(long)]
    model: Option<PathBuf>,
    /// The device's memory bandwidth in GB/s, for the top-k kernel's floor (the time to read
    /// the base once); default an H200's 4,800 (an H100 SXM: 3,350).
    #[arg(long, default_value_t = 4800.0)]
    bandwidth_gbs: f64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let (n, dim) = (args.n, args.dim);
    if n < vectors::IVF_THRESHOLD || dim == 0 {
        bail!(
            "--n must be at least {} and --dim positive",
            vectors::IVF_THRESHOLD
        );
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |p| p.get()));
    vectors::set_faiss_threads(threads);
    let enc = kernels::Encoder::load_with(
        &kernels::resolve_model_dir(args.model),
        args.device,
        kernels::Precision::F32,
    )?;

    let t = Instant::now();
    let data = clustered(n, dim, args.centres.max(1));
    let sample = vectors::ivf_training_sample(&data, dim);
    let nlist = vectors::nlist_for(n);
    println!(
        "{n} × {dim} vectors around {} centres (made in {:.1}s); nlist {nlist}, training sample {} points; FAISS threads {threads}; encoder on: {}",
        args.centres,
        t.elapsed().as_secs_f64(),
        sample.len() / dim,
        enc.device_description()
    );

    let tmp = tempfile::tempdir()?;
    let faiss_path = tmp.path().join("faiss.ivf");
    let t = Instant::now();
    vectors::write_ivf(&faiss_path, &data, dim)?;
    let faiss_total = t.elapsed().as_secs_f64();

    let t = Instant::now();
    // Ours: the GPU k-means where the encoder has a GPU, else the CPU's (what a CPU build runs).
    let (centroids, ours) = match enc.train_ivf_centroids(&sample, dim, nlist) {
        Some(r) => (r.context("GPU k-means")?, "GPU"),
        None => (ivf_write::train_centroids(&sample, dim, nlist)?, "CPU"),
    };
    let gpu_kmeans = t.elapsed().as_secs_f64();
    // FAISS's SQ8 ranges and adds on our centroids: its k-means is its index minus this.
    let given = tmp.path().join("faiss-given.ivf");
    let t = Instant::now();
    vectors::write_ivf_with(&given, &data, dim, Some(&centroids))?;
    let faiss_rest = t.elapsed().as_secs_f64();
    let faiss_kmeans = (faiss_total - faiss_rest).max(0.0);
    // What a segment write runs: our SQ8 ranges, lists and codes (`format::ivf_write`).
    let gpu_path = tmp.path().join("ours.ivf");
    let t = Instant::now();
    ivf_write::write_ivf_sq8(&gpu_path, &data, dim, Some(&centroids), &|_| {})?;
    let rest = t.elapsed().as_secs_f64();
    let same = std::fs::read(&given)? == std::fs::read(&gpu_path)?;

    println!(
        "FAISS CPU: index {faiss_total:.3}s, of which k-means ≈ {faiss_kmeans:.3}s (index minus its SQ8 ranges and adds on our centroids, {faiss_rest:.3}s)"
    );
    println!(
        "{ours}:       k-means {gpu_kmeans:.3}s + SQ8 ranges, lists and codes {rest:.3}s = index {:.3}s; the file {} FAISS's on the same centroids",
        gpu_kmeans + rest,
        if same { "equals" } else { "differs from" }
    );
    println!(
        "k-means speed-up {:.2}×; SQ8 and lists {:.2}×; whole index {:.2}×",
        faiss_kmeans / gpu_kmeans.max(1e-9),
        faiss_rest / rest.max(1e-9),
        faiss_total / (gpu_kmeans + rest).max(1e-9)
    );

    let faiss_ivf = Ivf::load(&faiss_path, dim, n)?;
    let gpu_ivf = Ivf::load(&gpu_path, dim, n)?;
    let queries = perturbed_queries(&data, dim, args.queries);
    // Ground truth: exact top-10 on the GPU (the top-k kernel), checked against the CPU scan.
    // Each kernel twice: the first call compiles it; the second is the one reported. The
    // row-wise kernel (the first one) runs beside the staged one (the default) as its peer.
    // The time to read the base once at the device's memory bandwidth is the floor the
    // kernels are compared with (`--bandwidth-gbs`, default an H200's 4,800 GB/s).
    let stream_ms = (data.len() * 4) as f64 / (args.bandwidth_gbs * 1e9) * 1e3;
    let mut lists = Vec::new();
    let kernels: &[TopKKernel] = if ours == "GPU" {
        &[TopKKernel::Staged, TopKKernel::RowWise]
    } else {
        &[]
    };
    for &kernel in kernels {
        let mut runs = Vec::new();
        for _ in 0..2 {
            let t = Instant::now();
            let r = match enc.exact_top_k_with(&queries, &data, dim, 10, kernel) {
                Some(r) => r.context("GPU top-k")?,
                None => bail!("exact top-k needs the GPU encoder"),
            };
            runs.push((r, t.elapsed().as_secs_f64()));
        }
        let ((_, first), first_s) = &runs[0];
        let ((_, times), gpu_topk) = &runs[1];
        println!(
            "GPU top-k, {kernel:?} kernel ({} queries × {n}): first call {first_s:.3}s (upload {:.3}s, compile + kernel {:.3}s); \
             second {gpu_topk:.3}s = upload {:.3}s + kernel and read-back {:.2} ms + host merge {:.2} ms; \
             reading the base once at {} GB/s takes {stream_ms:.2} ms: kernel / stream {:.1}×",
            args.queries,
            first.upload_s,
            first.kernel_s,
            times.upload_s,
            times.kernel_s * 1e3,
            times.merge_s * 1e3,
            args.bandwidth_gbs,
            times.kernel_s * 1e3 / stream_ms
        );
        if let Some(((l, _), s)) = runs.pop() {
            lists.push((l, s));
        }
    }
    let gpu_truth = match &lists[..] {
        [(truth_gpu, gpu_topk), (peer, _)] => {
            let same = peer.iter().zip(truth_gpu).filter(|(a, b)| a == b).count();
            println!(
                "staged and row-wise kernels: identical lists (rows and scores) for {same}/{} queries",
                truth_gpu.len()
            );
            Some((truth_gpu, *gpu_topk))
        }
        [] => None,
        _ => bail!("a GPU top-k run is missing"),
    };
    let t = Instant::now();
    let truth: Vec<Vec<u32>> = queries
        .chunks_exact(dim)
        .map(|q| {
            vectors::exact_search(&data, dim, q, 10, None, None)
                .into_iter()
                .map(|(i, _)| i)
                .collect()
        })
        .collect();
    let cpu_topk = t.elapsed().as_secs_f64();
    if let Some((truth_gpu, gpu_topk)) = gpu_truth {
        let agree = truth
            .iter()
            .zip(truth_gpu)
            .filter(|(c, g)| c.iter().copied().eq(g.iter().map(|x| x.0)))
            .count();
        println!(
            "exact top-10 of {} queries over {n}: GPU kernel {gpu_topk:.3}s, CPU scan (1 thread) {cpu_topk:.3}s; identical lists for {agree}/{} queries",
            args.queries, args.queries
        );
    } else {
        println!(
            "exact top-10 of {} queries over {n}: CPU scan (1 thread) {cpu_topk:.3}s",
            args.queries
        );
    }
    let (mut hit_f, mut hit_g, mut total) = (0usize, 0usize, 0usize);
    for (q, exact) in queries.chunks_exact(dim).zip(&truth) {
        let f = faiss_ivf.candidates(q, 10, args.nprobe)?;
        let g = gpu_ivf.candidates(q, 10, args.nprobe)?;
        hit_f += exact.iter().filter(|i| f.contains(i)).count();
        hit_g += exact.iter().filter(|i| g.contains(i)).count();
        total += exact.len();
    }
    println!(
        "recall@10 at nprobe {} over {} queries: FAISS centroids {:.4}, {ours} centroids {:.4}",
        args.nprobe,
        args.queries,
        hit_f as f64 / total.max(1) as f64,
        hit_g as f64 / total.max(1) as f64
    );
    Ok(())
}

fn rng(mut seed: u64) -> impl FnMut() -> f32 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0
    }
}

fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
}

/// `n` unit vectors, each a random centre plus noise.
fn clustered(n: usize, dim: usize, centres: usize) -> Vec<f32> {
    let mut r = rng(0x9E37_79B9_7F4A_7C15);
    let c: Vec<f32> = (0..centres * dim).map(|_| r()).collect();
    let mut out = vec![0f32; n * dim];
    for (i, row) in out.chunks_exact_mut(dim).enumerate() {
        let k = (i * 7919) % centres;
        for (d, x) in row.iter_mut().enumerate() {
            *x = c[k * dim + d] + 0.35 * r();
        }
        normalise(row);
    }
    out
}

/// `q` queries: data rows at a stride, perturbed and renormalised.
fn perturbed_queries(data: &[f32], dim: usize, q: usize) -> Vec<f32> {
    let n = data.len() / dim;
    let mut r = rng(0x2545_F491_4F6C_DD1D);
    let mut out = Vec::with_capacity(q * dim);
    for j in 0..q {
        let row = (j * n / q.max(1) + 13) % n;
        let mut v: Vec<f32> = data[row * dim..(row + 1) * dim]
            .iter()
            .map(|x| x + 0.05 * r())
            .collect();
        normalise(&mut v);
        out.extend(v);
    }
    out
}
