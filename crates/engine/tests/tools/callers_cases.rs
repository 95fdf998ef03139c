//! The call-graph cases of issue 14, on a repository holding CPython's `json` package and the
//! Rust crates `strsim` and `itoa` (vendored under `tests/fixtures/callgraph/`), indexed with
//! the real model: no caller ever crosses languages, Rust callers in `mod tests`, `tests/` and
//! path-qualified calls in `benches/` are found and exact, and `stage: "graph"` means exact.

use std::path::Path;

use engine::tools::calls::{Confidence, ImpactArgs, Stage};

use crate::common::{callees, callers, engine};
use cix_tests::{build_index, copy_dir, fixture};

/// `repo/{json,strsim,itoa}` and its index, under `tmp`.
fn json_strsim_itoa(tmp: &Path) -> std::path::PathBuf {
    let repo = tmp.join("repo");
    copy_dir(&fixture("callgraph/python-json/json"), &repo.join("json"));
    copy_dir(&fixture("callgraph/rust-strsim"), &repo.join("strsim"));
    copy_dir(&fixture("callgraph/rust-itoa"), &repo.join("itoa"));
    let index = tmp.join("index");
    build_index(&repo, &index);
    index
}

#[test]
fn callers_stay_in_their_language_and_find_rust_tests_and_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let e = engine(&json_strsim_itoa(tmp.path()));

    // 1. Rust's `Buffer::format` has no Python callers (Python's `str.format` is another
    //    method), and Python code calls no Rust.
    let c = e.find_callers(&callers("Buffer::format")).unwrap();
    assert!(
        c.results.iter().all(|r| r.symbol.language == "rust"),
        "{c:#?}"
    );
    let i = e
        .impact_analysis(&ImpactArgs {
            symbol: "Buffer::format".into(),
            ..Default::default()
        })
        .unwrap();
    assert!(
        i.affected.iter().all(|a| a.symbol.language == "rust"),
        "{i:#?}"
    );
    let c = e
        .find_callees(&callees("py_encode_basestring_ascii"))
        .unwrap();
    assert!(
        c.results.iter().all(|r| r.symbol.language == "python"),
        "{c:#?}"
    );

    // 2. `levenshtein`'s callers: the unit tests in `mod tests`, `tests/lib.rs`, and the
    //    path-qualified `strsim::levenshtein(..)` in `benches/benches.rs`, all exact.
    let c = e.find_callers(&callers("levenshtein")).unwrap();
    let exact: Vec<(String, String)> = c
        .results
        .iter()
        .filter(|r| r.confidence == Confidence::Exact)
        .map(|r| (r.symbol.path.clone(), r.symbol.qualified.clone()))
        .collect();
    assert!(exact.len() >= 10, "{c:#?}");
    for path in [
        "strsim/src/lib.rs",
        "strsim/tests/lib.rs",
        "strsim/benches/benches.rs",
    ] {
        assert!(exact.iter().any(|(p, _)| p == path), "{path}: {c:#?}");
    }
    assert!(
        exact.iter().any(|(_, q)| q.starts_with("tests/")),
        "a caller inside `mod tests`: {c:#?}"
    );

    // 3. `stage: "graph"` means every result is exact.
    for s in [
        "levenshtein",
        "Buffer::format",
        "JSONDecoder.raw_decode",
        "dumps",
    ] {
        let c = e.find_callers(&callers(s)).unwrap();
        if c.stage == Stage::Graph {
            assert!(
                c.results.iter().all(|r| r.confidence == Confidence::Exact),
                "{s}: {c:#?}"
            );
        }
    }
}
