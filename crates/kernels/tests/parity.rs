//! Parity against the independent numpy reference (scripts/reference_embed.py).

use std::path::PathBuf;

use kernels::{DeviceChoice, Encoder, ModelError, Precision};

mod common;
use common::model_dir;

fn load_encoder() -> Encoder {
    let dir = model_dir();
    assert!(
        dir.join("model.safetensors").is_file(),
        "model not found at {}: run scripts/fetch-model.sh (or set CIX_MODEL_DIR)",
        dir.display()
    );
    Encoder::load(&dir, DeviceChoice::Cpu)
        .unwrap_or_else(|e| panic!("loading {}: {e}", dir.display()))
}

struct Fixture {
    text: String,
    vector: Vec<f32>,
}

fn fixtures() -> Vec<Fixture> {
    // The crate's path as compiled, else relative to the working directory (a test binary
    // carried to another machine runs from a copy of the crate: scripts/gpu-bench.sh).
    let mut path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parity.json");
    if !path.is_file() {
        path = PathBuf::from("tests/fixtures/parity.json");
    }
    let raw = std::fs::read_to_string(&path).expect("read parity.json");
    let json: serde_json::Value = serde_json::from_str(&raw).expect("parse parity.json");
    json.as_array()
        .expect("array")
        .iter()
        .map(|e| Fixture {
            text: e["text"].as_str().expect("text").to_string(),
            vector: e["vector"]
                .as_array()
                .expect("vector")
                .iter()
                .map(|v| v.as_f64().expect("float") as f32)
                .collect(),
        })
        .collect()
}

fn short(s: &str) -> String {
    s.chars().take(40).collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f32 = a.iter().map(|x| x * x).sum::<f32>().sqrt();
    let nb: f32 = b.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (na * nb)
}

#[test]
fn parity_with_numpy_reference() {
    let enc = load_encoder();
    let fx = fixtures();
    assert!(fx.len() >= 24);
    let dim = enc.dim();
    assert_eq!(dim, 384);
    assert_eq!(enc.max_tokens(), 256);
    assert!(enc.model_id().starts_with("all-MiniLM-L6-v2@"));
    assert_eq!(enc.model_id().len(), "all-MiniLM-L6-v2@".len() + 16);
    println!("model {} on {}", enc.model_id(), enc.device_description());

    let texts: Vec<&str> = fx.iter().map(|f| f.text.as_str()).collect();
    let (vecs, stats) = enc.embed(&texts).expect("embed");
    assert_eq!(vecs.len(), texts.len() * dim);
    assert_eq!(stats.texts, texts.len());
    assert!(stats.padded_tokens >= stats.tokens);
    assert!(stats.batches >= 1);
    let expected_tokens: usize = texts.iter().map(|t| enc.count_tokens(t)).sum();
    assert_eq!(stats.tokens, expected_tokens);
    assert!(texts.iter().filter(|t| enc.count_tokens(t) == 256).count() >= 3);
    assert_eq!(enc.count_tokens(""), 2);
    println!("{stats:?}");

    let mut min_cos = f32::MAX;
    let mut worst = "";
    for (i, f) in fx.iter().enumerate() {
        let row = &vecs[i * dim..(i + 1) * dim];
        let norm: f32 = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-4, "row {i} norm {norm}");
        // Order preserved: row i matches fixture i (and not merely some fixture).
        let c = cosine(row, &f.vector);
        if c < min_cos {
            min_cos = c;
            worst = &f.text;
        }
        assert!(c >= 0.999, "text {i} {:?}: cosine {c}", short(&f.text));
    }
    println!(
        "batched: min cosine {min_cos:.7} over {} texts (worst: {:?})",
        fx.len(),
        short(worst)
    );

    // One by one for a few (no padding, different batch composition).
    let mut min_single = f32::MAX;
    for i in [0, 3, 16, 18, fx.len() - 1] {
        let (v, s) = enc.embed(&[fx[i].text.as_str()]).expect("embed single");
        assert_eq!(s.batches, 1);
        assert_eq!(s.padded_tokens, s.tokens);
        let c = cosine(&v, &fx[i].vector);
        min_single = min_single.min(c);
        assert!(c >= 0.999, "single text {i}: cosine {c}");
        let batched = &vecs[i * dim..(i + 1) * dim];
        let cb = cosine(&v, batched);
        assert!(cb >= 0.9999, "single vs batched {i}: cosine {cb}");
    }
    println!("single: min cosine {min_single:.7}");
}

/// The backend-generic path (burn attention with a key mask, burn GELU) that GPU backends
/// run, checked on the CPU backend against the same reference.
#[test]
fn portable_kernels_parity() {
    let enc = load_encoder().with_portable_kernels();
    let fx = fixtures();
    let texts: Vec<&str> = fx.iter().map(|f| f.text.as_str()).collect();
    let (vecs, stats) = enc.embed(&texts).expect("embed");
    assert!(
        stats.padded_tokens > stats.tokens,
        "mask path not exercised"
    );
    let dim = enc.dim();
    let mut min_cos = f32::MAX;
    for (i, f) in fx.iter().enumerate() {
        let c = cosine(&vecs[i * dim..(i + 1) * dim], &f.vector);
        assert!(
            c >= 0.999,
            "portable: text {i} {:?}: cosine {c}",
            short(&f.text)
        );
        min_cos = min_cos.min(c);
    }
    println!("portable kernels: min cosine {min_cos:.7}");
}

/// Half precision needs a GPU: asking for it on the CPU is refused, not silently ignored.
#[test]
fn half_precision_on_cpu_is_refused() {
    let dir = model_dir();
    for half in [Precision::F16, Precision::Bf16] {
        match Encoder::load_with(&dir, DeviceChoice::Cpu, half) {
            Err(ModelError::UnsupportedPrecision(msg)) => {
                assert!(msg.contains("needs a GPU device"), "{msg}")
            }
            other => panic!("{half} on cpu: {:?}", other.map(|e| e.precision())),
        }
    }
    let enc = Encoder::load_with(&dir, DeviceChoice::Cpu, Precision::Auto).expect("auto");
    assert_eq!(enc.precision(), Precision::F32);
}

/// The pipelined path returns, group by group, exactly what one `embed` call per group does.
#[test]
fn pipelined_groups_match_single_calls() {
    let enc = load_encoder().with_portable_kernels();
    let texts: Vec<String> = (0..23)
        .map(|i| {
            format!(
                "fn item_{i}() -> usize {{ {i} * {} }}",
                "x + ".repeat(i % 7)
            )
        })
        .collect();
    let groups: Vec<Vec<&str>> = texts
        .chunks(5)
        .map(|g| g.iter().map(String::as_str).collect())
        .collect();
    let mut got: Vec<(Vec<f32>, usize)> = Vec::new();
    enc.embed_pipelined(groups.clone(), 2, |v, stats| {
        got.push((v, stats.texts));
        Ok::<(), ModelError>(())
    })
    .expect("pipelined");
    assert_eq!(got.len(), groups.len());
    for (g, (v, n)) in groups.iter().zip(&got) {
        assert_eq!(*n, g.len());
        let (want, _) = enc.embed(g).expect("embed");
        assert_eq!(v.len(), want.len());
        let worst = v
            .iter()
            .zip(&want)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-5, "{worst}");
    }
    // A sink error stops the pipeline and is returned.
    let mut calls = 0;
    let err = enc
        .embed_pipelined(groups, 1, |_, _| {
            calls += 1;
            Err(ModelError::Inference("sink full".into()))
        })
        .unwrap_err();
    assert_eq!(calls, 1);
    assert!(err.to_string().contains("sink full"));
}

#[test]
fn order_preserved_with_duplicates_and_small_batches() {
    let enc = load_encoder().with_batch_limits(64, 2);
    let texts = [
        "a much longer sentence about parsing configuration files in rust",
        "short",
        "",
        "short",
        "fn main() {}",
    ];
    let (v, stats) = enc.embed(&texts).expect("embed");
    let dim = enc.dim();
    assert!(stats.batches >= 3, "{stats:?}");
    assert!(stats.padded_tokens >= stats.tokens);
    let row = |i: usize| &v[i * dim..(i + 1) * dim];
    assert!(cosine(row(1), row(3)) > 0.99999);
    for (i, text) in texts.iter().enumerate() {
        let (single, _) = enc.embed(&[text]).expect("embed single");
        assert!(cosine(row(i), &single) > 0.9999, "row {i} out of order");
    }
    let (empty, s) = enc.embed(&[]).expect("empty");
    assert!(empty.is_empty());
    assert_eq!(s.batches, 0);
    // A plan's counts, without a forward pass, are what running it reports.
    let planned = enc.prepare(&texts).expect("prepare").stats();
    assert_eq!(planned, stats);
    assert_eq!(enc.prepare(&[]).expect("prepare").stats(), s);
}

/// The encoder on burn's wgpu backend (in CI: Mesa's lavapipe, a Vulkan CPU driver) matches
/// the reference. Without a usable adapter the test fails when `CIX_REQUIRE_WGPU=1` (what
/// `scripts/test.sh` sets after installing lavapipe) and is reported as skipped otherwise.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_parity_with_numpy_reference() {
    gpu_parity(DeviceChoice::Wgpu, "CIX_REQUIRE_WGPU");
}

/// The same on burn's CUDA backend (kernels compiled to CUDA C++ by NVRTC); skipped without a
/// CUDA device unless `CIX_REQUIRE_CUDA=1` (what `scripts/gpu-bench.sh run` sets).
#[cfg(feature = "cuda")]
#[test]
fn cuda_parity_with_numpy_reference() {
    gpu_parity(DeviceChoice::Cuda, "CIX_REQUIRE_CUDA");
}

/// Whether `var` is set to 1: then a missing device fails the test instead of skipping it.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn required(var: &str) -> bool {
    std::env::var(var).as_deref() == Ok("1")
}

/// An f32 encoder on `device`; `None` (the `test` reported as skipped) when the device is
/// missing and `require` is not set, a failure when it is.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn f32_encoder_or_skip(device: DeviceChoice, require: &str, test: &str) -> Option<Encoder> {
    match Encoder::load_with(&model_dir(), device, Precision::F32) {
        Ok(e) => Some(e),
        Err(e) if !required(require) => {
            eprintln!("SKIPPED {device} {test}: {e}");
            None
        }
        Err(e) => panic!("{device} f32 encoder: {e}"),
    }
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn gpu_parity(device: DeviceChoice, require: &str) {
    let Some(enc) = f32_encoder_or_skip(device, require, "parity") else {
        return;
    };
    eprintln!("{device} device: {}", enc.device_description());
    let fx = fixtures();
    let cos = cosines_vs_reference(&enc, &fx);
    for (i, (f, &c)) in fx.iter().zip(&cos).enumerate() {
        assert!(
            c >= 0.999,
            "{device}: text {i} {:?}: cosine {c}",
            short(&f.text)
        );
    }
    let min_cos = cos.iter().copied().fold(f32::MAX, f32::min);
    eprintln!("{device}: min cosine {min_cos:.7} over {} texts", fx.len());
}

/// The cosine of `enc`'s embedding of each fixture against its numpy reference vector.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn cosines_vs_reference(enc: &Encoder, fx: &[Fixture]) -> Vec<f32> {
    let texts: Vec<&str> = fx.iter().map(|f| f.text.as_str()).collect();
    let (vecs, _) = enc.embed(&texts).expect("embed");
    cosines_of(&vecs, enc.dim(), fx)
}

/// The cosine of each fixture's row of `vecs` (`dim` wide) against its numpy reference vector.
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn cosines_of(vecs: &[f32], dim: usize, fx: &[Fixture]) -> Vec<f32> {
    fx.iter()
        .enumerate()
        .map(|(i, f)| cosine(&vecs[i * dim..(i + 1) * dim], &f.vector))
        .collect()
}

/// Min of [`cosines_of`].
#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn min_cosine_of(vecs: &[f32], dim: usize, fx: &[Fixture]) -> f32 {
    cosines_of(vecs, dim, fx)
        .into_iter()
        .fold(f32::MAX, f32::min)
}

/// Half precision on wgpu: where the adapter supports the type, the encoder loads (it passed
/// its own parity check) and matches the numpy reference at cosine >= 0.999; where it does not,
/// an explicit request is refused with an actionable error and `auto` falls back to f32 and
/// says why. Either way `auto` never returns an encoder that fails parity.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_half_precision_parity_or_clear_refusal() {
    gpu_half_precision(DeviceChoice::Wgpu, "CIX_REQUIRE_WGPU");
}

/// The same on CUDA.
#[cfg(feature = "cuda")]
#[test]
fn cuda_half_precision_parity_or_clear_refusal() {
    gpu_half_precision(DeviceChoice::Cuda, "CIX_REQUIRE_CUDA");
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
fn gpu_half_precision(device: DeviceChoice, require: &str) {
    let Some(f32_enc) = f32_encoder_or_skip(device, require, "half precision") else {
        return;
    };
    let dir = model_dir();
    // Each encoder embeds the fixtures once (on lavapipe a pass costs tens of seconds).
    let fx = fixtures();
    let texts: Vec<&str> = fx.iter().map(|f| f.text.as_str()).collect();
    let dim = f32_enc.dim();
    let (b, _) = f32_enc.embed(&texts).expect("f32 embed");
    for half in [Precision::F16, Precision::Bf16] {
        match Encoder::load_with(&dir, device, half) {
            Ok(enc) => {
                assert_eq!(enc.precision(), half);
                let (a, _) = enc.embed(&texts).expect("half embed");
                let c = min_cosine_of(&a, dim, &fx);
                // Half precision really ran: the vectors differ from f32 ones, slightly.
                let diff = a
                    .iter()
                    .zip(&b)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0f32, f32::max);
                eprintln!(
                    "{device} {half}: {} ; min cosine vs numpy {c:.6}; max |{half} - f32| {diff:.2e}",
                    enc.device_description()
                );
                assert!(c >= kernels::HALF_PARITY_MIN_COSINE, "{half}: {c}");
                assert!(
                    diff > 0.0,
                    "{half} embeddings are bit-identical to f32 ones"
                );
            }
            Err(ModelError::UnsupportedPrecision(msg)) => {
                eprintln!("{device} {half} refused: {msg}");
                assert!(msg.contains("--precision f32 or auto"), "{msg}");
            }
            Err(e) => panic!("{device} {half}: unexpected error {e}"),
        }
    }
    let auto = Encoder::load_with(&dir, device, Precision::Auto).expect("auto");
    let desc = auto.device_description();
    eprintln!("{device} auto: {desc}");
    assert!(desc.contains("precision"), "{desc}");
    assert_ne!(auto.precision(), Precision::Auto);
    let c = min_cosine_of(&auto.embed(&texts).expect("auto embed").0, dim, &fx);
    assert!(
        c >= kernels::HALF_PARITY_MIN_COSINE,
        "auto ({}): {c}",
        auto.precision()
    );
}

/// The single-query path (half-precision layer weights on the CPU) stays within rounding of
/// the f32 path and of the numpy reference on every fixture text, also past the six rows of
/// one kernel pass and up to the token limit; with the host kernels off it is the f32 path.
#[test]
fn query_path_matches_f32_and_reference() {
    let enc = load_encoder();
    let fx = fixtures();
    let dim = enc.dim();
    let mut worst = 1f32;
    let long = "parse the configuration file and report every error ".repeat(60);
    let texts: Vec<&str> = fx
        .iter()
        .map(|f| f.text.as_str())
        .chain(["", "x", "a b c d e", long.as_str()])
        .collect();
    for (i, text) in texts.iter().enumerate() {
        let q = enc.embed_query(text).expect("embed_query");
        assert_eq!(q.len(), dim);
        let norm = q.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "{norm}");
        let (f, _) = enc.embed(&[text]).expect("embed");
        let c = cosine(&q, &f);
        assert!(c > 0.9999, "{:?}: cosine to f32 {c}", short(text));
        // Not the f32 vector itself: the half weights are what runs.
        assert_ne!(q, f, "{:?}", short(text));
        if let Some(r) = fx.get(i) {
            worst = worst.min(cosine(&q, &r.vector));
        }
    }
    assert!(worst > 0.9999, "min cosine to the numpy reference {worst}");
    let portable = load_encoder().with_portable_kernels();
    let (f, _) = portable.embed(&["fn main() {}"]).expect("embed");
    assert_eq!(portable.embed_query("fn main() {}").expect("query"), f);
}
