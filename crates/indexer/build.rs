//! Computes `CIX_EXTRACT_KEY`: a fingerprint of the code that turns a file's bytes into the
//! graph facts a build keeps for it (chunking, call and import extraction, declarations, the
//! walk's reading of a file, the facts cache's own code, the compiler's version and the
//! tree-sitter grammars' versions in `Cargo.lock`). A build
//! reuses the facts it cached for an unchanged file (`build/facts.rs`) only when the key it
//! was written under is this binary's: any change to that code, a comment included, makes
//! every file parse again once.

use std::path::{Path, PathBuf};

/// FNV-1a, 64 bits: stable across Rust versions, unlike `DefaultHasher`.
fn fnv(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Files hashed besides `src/chunk/`.
const HASHED: [&str; 4] = [
    "src/build/facts.rs",
    "src/graph/decl.rs",
    "src/graph/paths.rs",
    "src/walk.rs",
];

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let mut files = Vec::new();
    rust_files(&dir.join("src/chunk"), &mut files);
    for f in HASHED {
        files.push(dir.join(f));
    }
    files.sort();
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    fnv(&mut h, env!("CARGO_PKG_VERSION").as_bytes());
    // The compiler: its Unicode tables decide what `is_alphanumeric` and the like say.
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    if let Ok(out) = std::process::Command::new(rustc).arg("-V").output() {
        fnv(&mut h, &out.stdout);
    }
    for f in &files {
        let rel = f.strip_prefix(&dir).unwrap_or(f);
        fnv(&mut h, rel.to_string_lossy().as_bytes());
        fnv(&mut h, &std::fs::read(f).unwrap_or_default());
    }
    // The grammars: each `[[package]]` of `Cargo.lock` whose name starts with `tree-sitter`.
    let lock = dir.join("../../Cargo.lock");
    let text = std::fs::read_to_string(&lock).unwrap_or_default();
    for block in text.split("[[package]]") {
        if block.contains("name = \"tree-sitter") {
            fnv(&mut h, block.as_bytes());
        }
    }
    println!("cargo:rustc-env=CIX_EXTRACT_KEY={h:016x}");
    println!("cargo:rerun-if-changed=src/chunk");
    for f in HASHED.iter().chain(&["../../Cargo.lock"]) {
        println!("cargo:rerun-if-changed={f}");
    }
}
