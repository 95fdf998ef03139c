//! Parity against the independent numpy reference (scripts/reference_embed.py).

use std::path::PathBuf;

use kernels::{DeviceChoice, Encoder};

fn model_dir() -> PathBuf {
    std::env::var_os("CIX_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../models/all-MiniLM-L6-v2")
        })
}

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
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parity.json");
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
}

/// The encoder on burn's wgpu backend (in CI: Mesa's lavapipe, a Vulkan CPU driver) matches
/// the reference. Without a usable adapter the test fails when `CIX_REQUIRE_WGPU=1` (what
/// `scripts/test.sh` sets after installing lavapipe) and is reported as skipped otherwise.
#[cfg(feature = "wgpu")]
#[test]
fn wgpu_parity_with_numpy_reference() {
    let dir = model_dir();
    let enc = match Encoder::load(&dir, DeviceChoice::Wgpu) {
        Ok(e) => e,
        Err(e) if std::env::var("CIX_REQUIRE_WGPU").as_deref() != Ok("1") => {
            eprintln!("SKIPPED wgpu parity: {e}");
            return;
        }
        Err(e) => panic!("wgpu encoder: {e}"),
    };
    eprintln!("wgpu device: {}", enc.device_description());
    let fx = fixtures();
    let texts: Vec<&str> = fx.iter().map(|f| f.text.as_str()).collect();
    let (vecs, _) = enc.embed(&texts).expect("embed on wgpu");
    let dim = enc.dim();
    let mut min_cos = f32::MAX;
    for (i, f) in fx.iter().enumerate() {
        let c = cosine(&vecs[i * dim..(i + 1) * dim], &f.vector);
        assert!(
            c >= 0.999,
            "wgpu: text {i} {:?}: cosine {c}",
            short(&f.text)
        );
        min_cos = min_cos.min(c);
    }
    eprintln!("wgpu: min cosine {min_cos:.7} over {} texts", fx.len());
}
