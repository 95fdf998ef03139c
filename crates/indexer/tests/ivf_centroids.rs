//! IVF coarse centroids trained by the embedder (the GPU k-means in production) reach the
//! segment's FAISS index unchanged, and a failing trainer fails the build without committing;
//! without one (a CPU encoder), builds and merges train them with `format::ivf_write`'s k-means.
//!
//! The embedder is a stand-in (hash vectors, CPU k-means from `kernels::kmeans`): what is tested
//! is the indexer's plumbing; the GPU k-means itself is tested against the same CPU reference in
//! `crates/kernels` on wgpu.

use std::sync::Mutex;

use indexer::build::{build, BuildOptions, EmbedError, Embedder, HashEmbedder};
use indexer::progress::Progress;

struct Trainer {
    hash: HashEmbedder,
    fail: bool,
    trained: Mutex<Option<Vec<f32>>>,
}

impl Embedder for Trainer {
    fn model_id(&self) -> &str {
        self.hash.model_id()
    }
    fn dim(&self) -> usize {
        self.hash.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<(Vec<f32>, usize), EmbedError> {
        self.hash.embed(texts)
    }
    fn ivf_centroids(
        &self,
        sample: &[f32],
        dim: usize,
        k: usize,
    ) -> Option<Result<Vec<f32>, EmbedError>> {
        if self.fail {
            return Some(Err(EmbedError::Other("device lost during k-means".into())));
        }
        let c =
            kernels::kmeans::kmeans_cpu(sample, dim, k, 3, kernels::kmeans::Metric::InnerProduct);
        *self.trained.lock().unwrap() = Some(c.clone());
        Some(Ok(c))
    }
}

/// A repository with `files × per_file` one-line functions (one chunk each).
fn repo(dir: &std::path::Path, files: usize, per_file: usize) {
    for f in 0..files {
        let body: String = (0..per_file)
            .map(|i| format!("pub fn f{f}_{i}(x: u64) -> u64 {{ x * {i} + {f} }}\n"))
            .collect();
        std::fs::write(dir.join(format!("m{f}.rs")), body).unwrap();
    }
}

#[test]
fn embedder_trained_centroids_reach_the_ivf_index() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    repo(&src, 5, 900);
    let out = tmp.path().join("index");

    // A trainer that fails: the build fails and nothing is committed.
    let failing = Trainer {
        hash: HashEmbedder { dim: 32 },
        fail: true,
        trained: Mutex::new(None),
    };
    let opts = BuildOptions::new(vec![src.clone()], out.clone());
    let err = build(&opts, &failing, &Progress::auto(true)).unwrap_err();
    assert!(err.to_string().contains("device lost"), "{err}");
    assert!(
        format::Index::open(&out).is_err(),
        "a failed build committed"
    );

    let emb = Trainer {
        hash: HashEmbedder { dim: 32 },
        fail: false,
        trained: Mutex::new(None),
    };
    let report = build(&opts, &emb, &Progress::auto(true)).unwrap();
    assert!(
        report.chunks_written >= format::vectors::IVF_THRESHOLD,
        "{}",
        report.chunks_written
    );
    assert!(report
        .timings
        .iter()
        .any(|(p, _)| *p == "ivf-centroids-gpu"));
    let trained = emb
        .trained
        .lock()
        .unwrap()
        .clone()
        .expect("trainer was asked");

    let ix = format::Index::open(&out).unwrap();
    let seg = &ix.segments[0].segment;
    assert!(
        seg.meta().vector_index.ends_with(",centroids=external"),
        "{}",
        seg.meta().vector_index
    );
    let ivf = seg.ivf().unwrap().expect("an IVF index");
    assert_eq!(ivf.centroids().unwrap(), trained);
}

/// The centroids a CPU build or merge of `seg` trains: the k-means of `format::ivf_write` on
/// its vectors' training sample.
fn cpu_centroids_of(seg: &format::Segment) -> Vec<f32> {
    let dim = seg.meta().dim as usize;
    let sample = format::vectors::ivf_training_sample(seg.vectors(), dim);
    let nlist = format::vectors::nlist_for(seg.meta().chunk_count as usize);
    format::ivf_write::train_centroids(&sample, dim, nlist).unwrap()
}

#[test]
fn cpu_builds_and_merges_train_the_centroids_without_faiss() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    repo(&src, 5, 900);
    let emb = HashEmbedder { dim: 32 };

    // One segment: its IVF's centroids are `ivf_write`'s k-means', not FAISS's.
    let out = tmp.path().join("one");
    let opts = BuildOptions::new(vec![src.clone()], out.clone());
    build(&opts, &emb, &Progress::auto(true)).unwrap();
    let ix = format::Index::open(&out).unwrap();
    assert_eq!(ix.segments.len(), 1);
    let seg = &ix.segments[0].segment;
    assert_eq!(
        seg.meta().vector_index,
        format!("ivf{},sq8", format::vectors::nlist_for(4500))
    );
    let ivf = seg.ivf().unwrap().expect("an IVF index");
    assert_eq!(ivf.centroids().unwrap(), cpu_centroids_of(seg));

    // Segments cut small (flat), then merged into one that gets an IVF: the merge trains its
    // centroids the same way, from the merged rows (borrowed from the parts).
    let out = tmp.path().join("cut");
    let mut opts = BuildOptions::new(vec![src], out.clone());
    opts.memory_budget = indexer::build::MIN_MEMORY_BUDGET;
    build(&opts, &emb, &Progress::auto(true)).unwrap();
    let before = format::Index::open(&out).unwrap().segments.len();
    assert!(before > 1, "{before} segments");
    let policy = indexer::merge::MergePolicy {
        budget: 1 << 30,
        max_segments: Some(1),
        deletes: false,
    };
    let done = indexer::merge::merge(&out, &policy, &Progress::auto(true)).unwrap();
    assert!(!done.merges.is_empty());
    let ix = format::Index::open(&out).unwrap();
    assert_eq!(ix.segments.len(), 1);
    let seg = &ix.segments[0].segment;
    assert_eq!(seg.meta().chunk_count, 4500);
    assert_eq!(
        seg.meta().vector_index,
        format!("ivf{},sq8", format::vectors::nlist_for(4500))
    );
    let ivf = seg.ivf().unwrap().expect("an IVF index");
    assert_eq!(ivf.centroids().unwrap(), cpu_centroids_of(seg));
}
