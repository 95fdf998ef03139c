//! The GPU kernel cache (`CIX_GPU_CACHE`, `device::configure_gpu_cache`) across processes: two
//! new processes embed the same texts on a GPU over one fresh cache directory. Both must say
//! where the cache is and give the same vectors; on CUDA the first must leave its compiled
//! kernels there. In CI this runs on wgpu over Mesa's lavapipe, where this build caches nothing
//! (cubecl caches SPIR-V, not the WGSL this build compiles), so there it checks the plumbing
//! only; `CIX_GPU_RUNTIME=cuda` runs it on CUDA (`scripts/gpu-bench.sh run tests`). That a
//! second process reuses the kernels is measured, not asserted: `scripts/gpu-bench.sh run
//! cache` times a new process's first batch over an empty and over a filled cache.
#![cfg(any(feature = "wgpu", feature = "cuda"))]

use std::path::Path;
use std::process::Command;

use kernels::{DeviceChoice, Encoder, Precision};

const TEXTS: [&str; 3] = [
    "fn main() { println!(\"hello\"); }",
    "how do I open a memory-mapped file read-only",
    "def parse(path):\n    return open(path).read().split()",
];

mod common;
use common::model_dir;

fn device() -> DeviceChoice {
    match std::env::var("CIX_GPU_RUNTIME").as_deref() {
        Ok("cuda") => DeviceChoice::Cuda,
        Ok("wgpu") => DeviceChoice::Wgpu,
        _ if cfg!(feature = "wgpu") => DeviceChoice::Wgpu,
        _ => DeviceChoice::Cuda,
    }
}

/// Run only as the child of [`a_second_process_starts_from_the_cache`]: loads the encoder on
/// the GPU (its cache from `CIX_GPU_CACHE`, set by the parent), embeds [`TEXTS`] and prints the
/// device description and the vectors as one JSON line.
#[test]
#[ignore = "the child process of a_second_process_starts_from_the_cache"]
fn child_embeds_on_the_gpu() {
    let enc = match Encoder::load_with(&model_dir(), device(), Precision::F32) {
        Ok(e) => e,
        Err(e) => {
            println!("CHILD-SKIP {e}");
            return;
        }
    };
    let (v, _) = enc.embed(&TEXTS).expect("embed");
    let line = serde_json::json!({ "device": enc.device_description(), "vectors": v });
    println!("CHILD {line}");
}

/// Runs [`child_embeds_on_the_gpu`] in a new process with `CIX_GPU_CACHE=cache`: `None` when
/// it found no GPU, else (device description, vectors).
fn child(cache: &Path) -> Option<(String, Vec<f32>)> {
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "child_embeds_on_the_gpu",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env("CIX_GPU_CACHE", cache)
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(why) = stdout.lines().find_map(|l| l.strip_prefix("CHILD-SKIP ")) {
        let required = ["CIX_REQUIRE_WGPU", "CIX_REQUIRE_CUDA"]
            .iter()
            .any(|v| std::env::var(v).as_deref() == Ok("1"));
        assert!(!required, "no GPU device ({why}) and CIX_REQUIRE_*=1");
        eprintln!("SKIPPED: no GPU device ({why})");
        return None;
    }
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("CHILD "))
        .unwrap_or_else(|| panic!("no result line in the child's output:\n{stdout}"));
    let json: serde_json::Value = serde_json::from_str(line).expect("child JSON");
    let vectors = json["vectors"]
        .as_array()
        .expect("vectors")
        .iter()
        .map(|x| x.as_f64().expect("number") as f32)
        .collect();
    Some((
        json["device"].as_str().expect("device").to_string(),
        vectors,
    ))
}

/// Files under `dir`, recursively.
fn files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|it| {
            it.flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => files(&e.path()),
                    _ => 1,
                })
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn a_second_process_starts_from_the_cache() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("kernel cache");
    let Some((first_device, first)) = child(&cache) else {
        return;
    };
    let said = format!("kernel cache {}", cache.display());
    assert!(
        first_device.contains(&said),
        "the device description names the cache: {first_device}"
    );
    let filled = files(&cache);
    if first_device.starts_with("cuda") {
        assert!(
            filled > 0,
            "the first process left no compiled kernel in {}",
            cache.display()
        );
    }
    let (second_device, second) = child(&cache).expect("the GPU went away");
    assert!(second_device.contains(&said), "{second_device}");
    assert_eq!(first.len(), second.len());
    let worst = first
        .iter()
        .zip(&second)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(
        worst < 1e-6,
        "the cached kernels compute the same vectors (max abs diff {worst})"
    );
    eprintln!(
        "kernel cache {}: {filled} files after the first process, {} after the second; {first_device}",
        cache.display(),
        files(&cache)
    );
}
