//! The `indexer` binary end to end: build the polyglot fixture with the real model, inspect,
//! verify, corrupt, and the error paths a user meets first (missing input, missing model).
//!
//! The model must be present (`scripts/fetch-model.sh`, or `CIX_MODEL_DIR`); these tests fail
//! without it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cix_tests::{copy_dir, workspace_root};

/// The model directory; fails the test when the model is missing.
fn model_dir() -> PathBuf {
    let dir = cix_tests::model_dir();
    assert!(
        dir.join("model.safetensors").is_file(),
        "the embedding model is missing at {}: run scripts/fetch-model.sh (or set CIX_MODEL_DIR)",
        dir.display()
    );
    dir
}

/// Runs the binary in `cwd` with the model taken from the environment.
fn indexer(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_indexer"))
        .args(args)
        .current_dir(cwd)
        .env("CIX_MODEL_DIR", model_dir())
        .output()
        .expect("run the indexer binary")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn describe(args: &[&str], o: &Output) -> String {
    let (out, err) = text(o);
    format!(
        "indexer {}: {}\n--- stdout\n{out}\n--- stderr\n{err}",
        args.join(" "),
        o.status
    )
}

/// The only `seg-*` directory of an index.
fn segment_dir(index: &Path) -> PathBuf {
    let segs: Vec<PathBuf> = std::fs::read_dir(index)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("seg-"))
        })
        .collect();
    assert_eq!(segs.len(), 1, "segments in {}: {segs:?}", index.display());
    segs.into_iter().next().unwrap()
}

#[test]
fn build_inspect_verify_then_detect_a_truncated_graph() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("polyglot");
    copy_dir(&workspace_root().join("tests/fixtures/polyglot"), &repo);
    let index = tmp.path().join("index");
    let (repo_s, index_s) = (repo.to_str().unwrap(), index.to_str().unwrap());

    let args = ["build", repo_s, "--out", index_s, "--quiet"];
    let o = indexer(tmp.path(), &args);
    assert!(o.status.success(), "{}", describe(&args, &o));
    let (out, _) = text(&o);
    let summary = out.lines().next().unwrap_or("");
    assert!(
        summary.starts_with("indexed 15 files (15 changed, 0 unchanged, 0 deleted)"),
        "{}",
        describe(&args, &o)
    );
    assert!(
        out.contains("wrote segment seg-"),
        "{}",
        describe(&args, &o)
    );

    let args = ["inspect", index_s];
    let o = indexer(tmp.path(), &args);
    assert!(o.status.success(), "{}", describe(&args, &o));
    let (out, _) = text(&o);
    assert!(
        out.contains("chunks by language:"),
        "{}",
        describe(&args, &o)
    );
    for lang in [
        "rust",
        "python",
        "typescript",
        "tsx",
        "javascript",
        "go",
        "java",
        "c",
        "cpp",
        "markdown",
        "toml",
    ] {
        assert!(
            out.lines()
                .any(|l| l.split_whitespace().next() == Some(lang)),
            "{lang} missing from {}",
            describe(&args, &o)
        );
    }
    let args = ["inspect", index_s, "--json"];
    let o = indexer(tmp.path(), &args);
    assert!(o.status.success(), "{}", describe(&args, &o));
    assert!(text(&o).0.contains("\"chunks_by_language\""));

    let args = ["verify", index_s];
    let o = indexer(tmp.path(), &args);
    assert!(o.status.success(), "{}", describe(&args, &o));
    assert!(text(&o).0.starts_with("ok: "), "{}", describe(&args, &o));

    // Building again over an unchanged tree writes nothing.
    let args = ["build", repo_s, "--out", index_s, "--quiet"];
    let o = indexer(tmp.path(), &args);
    assert!(o.status.success(), "{}", describe(&args, &o));
    assert!(
        text(&o).0.contains("is up to date"),
        "{}",
        describe(&args, &o)
    );

    // Truncate graph.rkyv: verify fails and names the file; so does the next build.
    let graph = segment_dir(&index).join("graph.rkyv");
    let len = std::fs::metadata(&graph).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&graph)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let args = ["verify", index_s];
    let o = indexer(tmp.path(), &args);
    assert!(!o.status.success(), "{}", describe(&args, &o));
    let (out, err) = text(&o);
    assert!(
        out.contains("graph.rkyv") || err.contains("graph.rkyv"),
        "{}",
        describe(&args, &o)
    );
    let args = ["build", repo_s, "--out", index_s, "--quiet"];
    let o = indexer(tmp.path(), &args);
    assert!(!o.status.success(), "{}", describe(&args, &o));
    let (_, err) = text(&o);
    assert!(err.contains("graph.rkyv"), "{}", describe(&args, &o));
    assert!(err.contains("indexer verify"), "{}", describe(&args, &o));
}

#[test]
fn build_errors_are_clear() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("index");
    let out_s = out.to_str().unwrap();

    // A missing input.
    let args = ["build", "/nonexistent/cix-input", "--out", out_s, "--quiet"];
    let o = indexer(tmp.path(), &args);
    assert!(!o.status.success(), "{}", describe(&args, &o));
    let (_, err) = text(&o);
    assert!(
        err.contains("/nonexistent/cix-input") && err.contains("does not exist"),
        "{}",
        describe(&args, &o)
    );
    assert!(!out.join("MANIFEST").exists());

    // A missing model.
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("a.py"), "def a():\n    return 1\n").unwrap();
    let args = [
        "build",
        repo.to_str().unwrap(),
        "--out",
        out_s,
        "--model",
        "/nonexistent/cix-model",
    ];
    let o = indexer(tmp.path(), &args);
    assert!(!o.status.success(), "{}", describe(&args, &o));
    let (_, err) = text(&o);
    assert!(err.contains("fetch-model.sh"), "{}", describe(&args, &o));
    assert!(
        err.contains("/nonexistent/cix-model"),
        "{}",
        describe(&args, &o)
    );
    assert!(!out.join("MANIFEST").exists());

    // An embedding group of no texts is refused before anything runs; one of 1 builds.
    let repo_s = repo.to_str().unwrap();
    let listing = |d: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .map(|rd| {
                rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let before = listing(&out);
    let args = ["build", repo_s, "--out", out_s, "--embed-group", "0"];
    let o = indexer(tmp.path(), &args);
    assert!(!o.status.success(), "{}", describe(&args, &o));
    assert!(text(&o).1.contains("1..=65536"), "{}", describe(&args, &o));
    assert_eq!(listing(&out), before, "{}", describe(&args, &o));
    let args = [
        "build",
        repo_s,
        "--out",
        out_s,
        "--embed-group",
        "1",
        "--quiet",
    ];
    let o = indexer(tmp.path(), &args);
    assert!(o.status.success(), "{}", describe(&args, &o));
    assert!(out.join("MANIFEST").exists());
    std::fs::remove_dir_all(&out).unwrap();

    // Not an index.
    let args = ["verify", repo.to_str().unwrap()];
    let o = indexer(tmp.path(), &args);
    assert!(!o.status.success(), "{}", describe(&args, &o));
    assert!(
        text(&o).0.contains("not an index directory"),
        "{}",
        describe(&args, &o)
    );
}

/// `push`, `pull` and `gc-remote` through the binary over a `file://` store: JSON summaries,
/// an unchanged push commits nothing, a pull from an empty store or a bad URL exits 2 naming
/// the problem and creates nothing.
#[test]
fn push_pull_and_gc_remote_through_the_binary() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = cix_tests::fixture_copy(tmp.path());
    let index = tmp.path().join("index");
    let store = format!("file://{}", tmp.path().join("store").display());
    let root = workspace_root();
    let args = [
        "build",
        repo.to_str().unwrap(),
        "--out",
        index.to_str().unwrap(),
        "--quiet",
    ];
    let o = indexer(&root, &args);
    assert!(o.status.success(), "{}", describe(&args, &o));

    let json = |args: &[&str]| -> serde_json::Value {
        let o = indexer(&root, args);
        assert!(o.status.success(), "{}", describe(args, &o));
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let push = ["push", &store, "--index", index.to_str().unwrap(), "--json"];
    let first = json(&push);
    assert_eq!(
        (first["generation"].as_u64(), first["committed"].as_bool()),
        (Some(1), Some(true))
    );
    let again = json(&push);
    assert_eq!(
        (again["generation"].as_u64(), again["committed"].as_bool()),
        (Some(1), Some(false))
    );
    let pulled = tmp.path().join("pulled");
    let pull = ["pull", &store, "--out", pulled.to_str().unwrap(), "--json"];
    let p = json(&pull);
    assert_eq!(p["generation"].as_u64(), Some(1));
    assert!(p["bytes_downloaded"].as_u64().unwrap() > 0);
    let verify = ["verify", pulled.to_str().unwrap()];
    let o = indexer(&root, &verify);
    assert!(o.status.success(), "{}", describe(&verify, &o));
    assert_eq!(json(&pull)["up_to_date"].as_bool(), Some(true));
    let gc = [
        "gc-remote",
        &store,
        "--keep",
        "1",
        "--grace",
        "0s",
        "--json",
    ];
    assert_eq!(json(&gc)["kept_generations"], serde_json::json!([1]));

    let empty = format!("file://{}", tmp.path().join("empty").display());
    let nowhere = tmp.path().join("nowhere");
    for (src, says) in [
        (empty.as_str(), "no index has been pushed there"),
        ("ftp://host/x", "unsupported scheme"),
    ] {
        let args = ["pull", src, "--out", nowhere.to_str().unwrap()];
        let o = indexer(&root, &args);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{}", describe(&args, &o));
        assert!(err.contains(says), "{}", describe(&args, &o));
        assert!(
            !nowhere.exists(),
            "a failed pull created {}",
            nowhere.display()
        );
    }
}

/// The MANIFEST's code segment ids.
fn segment_ids(index: &Path) -> Vec<String> {
    let m = format::IndexManifest::read(index).unwrap();
    m.segments.iter().map(|e| e.id.clone()).collect()
}

/// `indexer merge --max-segments` that the memory budget cannot reach changes nothing, says
/// which budget would, exits with 1; with that budget it merges.
#[test]
fn merge_held_back_by_the_budget_names_the_budget_that_allows_it() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = tmp.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    std::fs::write(repo.join("a.py"), "def a():\n    return 1\n").unwrap();
    let index = tmp.path().join("index");
    let (repo_s, index_s) = (repo.to_str().unwrap(), index.to_str().unwrap());
    let build = ["build", repo_s, "--out", index_s, "--quiet"];
    let o = indexer(tmp.path(), &build);
    assert!(o.status.success(), "{}", describe(&build, &o));
    // A second build with a new file adds a second segment.
    std::fs::write(repo.join("b.py"), "def b():\n    return a()\n").unwrap();
    let o = indexer(tmp.path(), &build);
    assert!(o.status.success(), "{}", describe(&build, &o));
    let before = segment_ids(&index);
    assert_eq!(before.len(), 2, "{before:?}");

    let merge_to_one = |budget: &str| {
        let args = [
            "merge",
            index_s,
            "--max-segments",
            "1",
            "--memory-budget",
            budget,
        ];
        let o = indexer(tmp.path(), &args);
        let said = describe(&args, &o);
        (o, said)
    };
    let (o, said) = merge_to_one("1KiB");
    assert_eq!(o.status.code(), Some(1), "{said}");
    let (out, err) = text(&o);
    assert!(out.contains("2 code segments before, 2 after"), "{out}");
    assert!(
        err.contains("not merged: 2 code segments are more than --max-segments 1,"),
        "{said}"
    );
    assert_eq!(segment_ids(&index), before, "nothing merged");
    // The budget it names, taken as written.
    let named = err
        .split("--memory-budget ")
        .nth(1)
        .and_then(|r| r.split('`').next())
        .unwrap_or_else(|| panic!("{said}"))
        .to_string();
    assert!(named.ends_with("MiB"), "{named}");
    let (o, said) = merge_to_one(&named);
    assert!(o.status.success(), "{said}");
    assert!(!text(&o).1.contains("not merged"), "{said}");
    assert_eq!(segment_ids(&index).len(), 1, "{said}");
}
