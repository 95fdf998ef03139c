//! A build cut into several segments, with an encoder on a device, writes each on a thread of
//! its own while the next is embedded. What must hold whatever fails where: the segments are the same as without the
//! overlap (same ids from the same input), a failure while a segment is being written or while
//! the next is being embedded fails the build with its cause, commits nothing, leaves no staging
//! or temporary directory behind, and leaves an existing index as it was.

use std::sync::atomic::{AtomicUsize, Ordering};

use indexer::build::{build, BuildOptions, EmbedError, Embedder, HashEmbedder};
use indexer::progress::Progress;

/// Hash vectors; optionally fails its `fail_embed_at`-th embed call (counted from 1), or hands
/// the writer of its `bad_centroids_at`-th IVF segment centroids of the wrong size (which
/// the segment writer refuses, on its own thread).
struct Flaky {
    hash: HashEmbedder,
    fail_embed_at: Option<usize>,
    bad_centroids_at: Option<usize>,
    embeds: AtomicUsize,
    trainings: AtomicUsize,
    /// Embed calls made before the first IVF training: the first segment's.
    first_segment_embeds: AtomicUsize,
    /// Reported as running on a device: the build overlaps its writes (else it joins each).
    device: bool,
}

impl Flaky {
    fn new(fail_embed_at: Option<usize>, bad_centroids_at: Option<usize>) -> Flaky {
        Flaky {
            hash: HashEmbedder { dim: 32 },
            fail_embed_at,
            bad_centroids_at,
            embeds: AtomicUsize::new(0),
            trainings: AtomicUsize::new(0),
            first_segment_embeds: AtomicUsize::new(0),
            device: true,
        }
    }
}

impl Embedder for Flaky {
    fn model_id(&self) -> &str {
        self.hash.model_id()
    }
    fn dim(&self) -> usize {
        self.hash.dim
    }
    fn on_device(&self) -> bool {
        self.device
    }
    fn embed(&self, texts: &[&str]) -> Result<(Vec<f32>, usize), EmbedError> {
        let n = self.embeds.fetch_add(1, Ordering::SeqCst) + 1;
        if Some(n) == self.fail_embed_at {
            return Err(EmbedError::Other(format!("device lost at embed call {n}")));
        }
        self.hash.embed(texts)
    }
    fn ivf_centroids(
        &self,
        sample: &[f32],
        dim: usize,
        k: usize,
    ) -> Option<Result<Vec<f32>, EmbedError>> {
        let n = self.trainings.fetch_add(1, Ordering::SeqCst) + 1;
        if n == 1 {
            let e = self.embeds.load(Ordering::SeqCst);
            self.first_segment_embeds.store(e, Ordering::SeqCst);
        }
        let rows = if Some(n) == self.bad_centroids_at {
            k - 1
        } else {
            k
        };
        Some(Ok(sample[..rows * dim].to_vec()))
    }
}

/// `files × per_file` one-line functions (one chunk each), `tag` in every body.
fn repo(dir: &std::path::Path, files: usize, per_file: usize, tag: &str) {
    std::fs::create_dir_all(dir).unwrap();
    for f in 0..files {
        let body: String = (0..per_file)
            .map(|i| format!("pub fn f{f}_{i}(x: u64) -> u64 {{ x * {i} + {f} + {tag} }}\n"))
            .collect();
        std::fs::write(dir.join(format!("m{f:02}.rs")), body).unwrap();
    }
}

fn opts(src: &std::path::Path, out: &std::path::Path) -> BuildOptions {
    let mut o = BuildOptions::new(vec![src.to_path_buf()], out.to_path_buf());
    // Segments of ~5,000 chunks: every one gets an IVF index (and so asks for centroids).
    o.memory_budget = 10 << 20;
    // Several embed calls per segment (the failure points below count them), on a device too.
    o.embed_group = Some(256);
    o
}

/// Without `embed_group`, a build embeds in the embedder's own groups: 4,096 texts on a device,
/// 256 on the CPU (each segment's new texts cut into such groups), with the same segments.
#[test]
fn the_default_group_follows_the_device() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    repo(&src, 20, 1000, "1");
    let mut calls = Vec::new();
    let mut ids = Vec::new();
    for device in [true, false] {
        let out = tmp.path().join(format!("device-{device}"));
        let mut o = opts(&src, &out);
        o.embed_group = None;
        let e = Flaky {
            device,
            ..Flaky::new(None, None)
        };
        build(&o, &e, &Progress::silent()).unwrap();
        let ix = format::Index::open(&out).unwrap();
        let group = if device {
            indexer::build::DEVICE_EMBED_GROUP
        } else {
            indexer::build::CPU_EMBED_GROUP
        };
        let want: usize = ix
            .manifest
            .segments
            .iter()
            .map(|s| (s.chunks as usize).div_ceil(group))
            .sum();
        assert!(ix.manifest.segments.len() >= 3);
        assert_eq!(e.embeds.load(Ordering::SeqCst), want, "device {device}");
        calls.push(want);
        ids.push(segment_ids(&out).1);
    }
    assert!(calls[0] < calls[1], "{calls:?}");
    assert_eq!(ids[0], ids[1], "the grouping changes no hash vector");
}

/// Names in the index directory that a build leaves only while it runs.
fn leftovers(out: &std::path::Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(out) else {
        return Vec::new();
    };
    rd.filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(format::staging::STAGING_PREFIX) || n.starts_with(".tmp-seg-"))
        .collect()
}

fn segment_ids(out: &std::path::Path) -> (u64, Vec<String>) {
    let ix = format::Index::open(out).unwrap();
    let ids = ix.manifest.segments.iter().map(|s| s.id.clone()).collect();
    (ix.manifest.generation, ids)
}

#[test]
fn failures_around_an_overlapped_write_commit_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    // 20 files of 1,000 chunks: 4 segments of 5,000, each with an IVF index.
    repo(&src, 20, 1000, "1");

    // The reference: every segment written, and written the same way twice.
    let good = tmp.path().join("good");
    let report = build(
        &opts(&src, &good),
        &Flaky::new(None, None),
        &Progress::silent(),
    )
    .unwrap();
    let (_, ids) = segment_ids(&good);
    assert!(ids.len() >= 3, "want several segments, got {}", ids.len());
    assert_eq!(report.segment_ids, ids);
    let count = |r: &indexer::build::BuildReport, phase: &str| {
        r.timings.iter().filter(|t| t.0 == phase).count()
    };
    assert_eq!(count(&report, "write-segment"), ids.len());
    // Each write ran on the writer thread and was waited for.
    assert_eq!(count(&report, "write-wait"), ids.len());
    // The same segments with each write joined at once (a CPU encoder).
    let again = tmp.path().join("again");
    let cpu = Flaky {
        device: false,
        ..Flaky::new(None, None)
    };
    let report = build(&opts(&src, &again), &cpu, &Progress::silent()).unwrap();
    assert_eq!(segment_ids(&again).1, ids, "same input, same segments");
    assert_eq!(report.segment_ids, ids);
    assert_eq!(count(&report, "write-segment"), ids.len());
    assert_eq!(
        count(&report, "write-wait"),
        0,
        "written in turn, never waited for"
    );

    // Embedding fails while a segment is being written: the error is the cause, nothing is
    // committed, nothing is left behind.
    let calls = Flaky::new(None, None);
    build(
        &opts(&src, &tmp.path().join("count")),
        &calls,
        &Progress::silent(),
    )
    .unwrap();
    let total = calls.embeds.load(Ordering::SeqCst);
    let first = calls.first_segment_embeds.load(Ordering::SeqCst);
    let trained = calls.trainings.load(Ordering::SeqCst);
    assert_eq!(trained, ids.len(), "every segment has an IVF index");
    assert!(0 < first && first < total, "{first} of {total}");
    // The second segment's first and second calls (the first segment's write in flight) and
    // the last call.
    for at in [first + 1, first + 2, total] {
        let out = tmp.path().join(format!("embed-fails-{at}"));
        let err = build(
            &opts(&src, &out),
            &Flaky::new(Some(at), None),
            &Progress::silent(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("device lost at embed call {at}")),
            "{err}"
        );
        assert!(
            format::Index::open(&out).is_err(),
            "a failed build committed"
        );
        assert_eq!(leftovers(&out), Vec::<String>::new());
    }

    // The writer of the `at`-th segment fails on its thread (centroids of the wrong size) while
    // the next segment is prepared, or as the last one (joined after the loop).
    for at in [1, 2, trained] {
        let out = tmp.path().join(format!("write-fails-{at}"));
        let err = build(
            &opts(&src, &out),
            &Flaky::new(None, Some(at)),
            &Progress::silent(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("IVF centroids"), "{err}");
        assert!(
            format::Index::open(&out).is_err(),
            "a failed build committed"
        );
        assert_eq!(leftovers(&out), Vec::<String>::new());
    }

    // An incremental build over an existing index that fails mid-way leaves it as it was.
    let before = segment_ids(&good);
    repo(&src, 20, 1000, "2");
    for flaky in [Flaky::new(Some(first + 1), None), Flaky::new(None, Some(1))] {
        assert!(build(&opts(&src, &good), &flaky, &Progress::silent()).is_err());
        assert_eq!(segment_ids(&good), before);
        assert_eq!(leftovers(&good), Vec::<String>::new());
    }
    // And then succeeds over it.
    build(
        &opts(&src, &good),
        &Flaky::new(None, None),
        &Progress::silent(),
    )
    .unwrap();
    let (generation, now) = segment_ids(&good);
    assert!(generation > before.0);
    assert_ne!(now, before.1);
    assert_eq!(leftovers(&good), Vec::<String>::new());
}
