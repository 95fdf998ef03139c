//! IVF coarse centroids trained by the embedder (the GPU k-means in production) reach the
//! segment's FAISS index unchanged, and a failing trainer fails the build without committing.
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
