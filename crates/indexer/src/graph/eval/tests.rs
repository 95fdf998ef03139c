use super::*;

const A: &str = "\
def helper():
    return 1


def other():
    return 2


def main():
    helper()
    return other


class C:
    def m(self):
        return helper()


main()
";

fn call(caller: &str, line: u32, callee_path: &str, callee_line: u32, callee: &str) -> TruthCall {
    TruthCall {
        caller_path: caller.to_string(),
        line,
        callee_path: callee_path.to_string(),
        callee_line,
        callee: callee.to_string(),
    }
}

fn truth(calls: Vec<TruthCall>) -> Truth {
    Truth {
        language: "python".to_string(),
        source: "hand".to_string(),
        root: "t".to_string(),
        calls,
        elsewhere: Vec::new(),
    }
}

fn run(calls: Vec<TruthCall>) -> Score {
    run_truth(truth(calls))
}

fn run_truth(t: Truth) -> Score {
    let files = vec![("pkg/a.py".to_string(), Language::Python)];
    let fxs = vec![extract(
        Language::Python,
        "eval",
        "pkg/a.py",
        A,
        &ChunkOptions::default(),
    )];
    compare(&files, &fxs, &t, EXAMPLES)
}

#[test]
fn perfect_truth_scores_one() {
    let s = run(vec![
        call("pkg/a.py", 10, "pkg/a.py", 1, "helper"),
        call("pkg/a.py", 16, "pkg/a.py", 1, "helper"),
    ]);
    assert_eq!(s.truth_calls, 2);
    assert_eq!((s.skipped, s.unmapped), (0, 0));
    assert_eq!(s.truth_pairs, 2);
    assert_eq!(s.tp_all, 2, "{s:?}");
    assert_eq!(s.recall_all, 1.0);
    assert_eq!(s.precision_all, 1.0);
    assert_eq!(s.cross_language_edges, 0);
    assert!(s.false_positives.is_empty() && s.false_negatives.is_empty());
}

#[test]
fn misses_wrong_pairs_and_skips_are_counted() {
    let s = run(vec![
        // Only one of our two edges is in the truth: the other is a false positive.
        call("pkg/a.py", 10, "pkg/a.py", 1, "helper"),
        // `other` is referenced, not called, at line 11: a miss no extractor sees.
        call("pkg/a.py", 11, "pkg/a.py", 5, "other"),
        // Top-level call: outside every symbol chunk.
        call("pkg/a.py", 19, "pkg/a.py", 9, "main"),
        // No chunk named `nope` holds line 1.
        call("pkg/a.py", 10, "pkg/a.py", 1, "nope"),
    ]);
    assert_eq!(s.truth_calls, 4);
    assert_eq!(s.skipped, 1);
    assert_eq!(s.unmapped, 1);
    assert_eq!(s.truth_pairs, 2);
    assert_eq!(s.tp_all, 1, "{s:?}");
    assert_eq!(s.recall_all, 0.5);
    assert_eq!(s.ours_exact + s.ours_likely, 2);
    assert_eq!(s.precision_all, 0.5);
    assert_eq!(s.false_negatives.len(), 1);
    assert!(
        s.false_negatives[0].contains("pkg/a.py:9 main -> pkg/a.py:5 other")
            && s.false_negatives[0].contains("not extracted"),
        "{:?}",
        s.false_negatives
    );
    assert_eq!(s.false_positives.len(), 1);
    assert!(
        s.false_positives[0].contains("C#m -> pkg/a.py:1 helper")
            && s.false_positives[0].contains("unverified"),
        "{:?}",
        s.false_positives
    );
    assert_eq!(s.unverified_exact + s.unverified_likely, 1);
    assert_eq!(s.precision_all_verified, 1.0);
    assert_eq!(s.unmapped_examples.len(), 1);
}

#[test]
fn a_wrong_pair_the_truth_resolved_elsewhere_is_contradicted() {
    let mut t = truth(vec![call("pkg/a.py", 10, "pkg/a.py", 1, "helper")]);
    // The truth's indexer resolved `helper()` in `C.m` to a library function.
    t.elsewhere
        .push(("pkg/a.py".to_string(), 16, "helper".to_string()));
    let s = run_truth(t);
    assert_eq!(s.unverified_exact + s.unverified_likely, 0, "{s:?}");
    assert_eq!(s.precision_all_verified, 0.5);
    assert!(s.false_positives[0].contains("contradicted"));
}

#[test]
fn score_reads_a_directory_and_truth_json() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("pkg/.hidden")).unwrap();
    std::fs::write(dir.path().join("pkg/a.py"), A).unwrap();
    std::fs::write(dir.path().join("pkg/.hidden/x.py"), "def x():\n    x()\n").unwrap();
    std::fs::write(dir.path().join("pkg/notes.md"), "# not code\n").unwrap();
    let json = r#"{"language": "python", "calls": [
        {"caller_path": "pkg/a.py", "line": 10, "callee_path": "pkg/a.py",
         "callee_line": 1, "callee": "helper"}]}"#;
    let t = Truth::from_json(Path::new("t.json"), json).unwrap();
    assert_eq!(t.source, "");
    let s = score(dir.path(), &t).unwrap();
    assert_eq!(s.files, 1);
    assert_eq!(s.tp_all, 1);
    assert_eq!(s.recall_all, 1.0);
    assert!(Truth::from_json(Path::new("bad.json"), "{\"calls\": 3}").is_err());
    assert!(score(&dir.path().join("missing"), &t).is_err());
}

#[test]
fn aggregate_is_a_micro_average() {
    let a = Score {
        truth_pairs: 10,
        ours_exact: 4,
        ours_likely: 4,
        tp_exact: 4,
        tp_all: 6,
        ..Score::default()
    };
    let b = Score {
        truth_pairs: 10,
        ours_exact: 2,
        tp_exact: 1,
        tp_all: 1,
        ..Score::default()
    };
    let s = Score::aggregate("python", &[&a, &b]);
    assert_eq!(s.tp_all, 7);
    assert_eq!(s.recall_all, 7.0 / 20.0);
    assert_eq!(s.precision_all, 7.0 / 10.0);
    assert_eq!(s.precision_exact, 5.0 / 6.0);
    assert_eq!(Score::aggregate("none", &[]).precision_all, 1.0);
}

#[test]
fn language_families() {
    assert_eq!(
        language_family(Language::Tsx),
        language_family(Language::JavaScript)
    );
    assert_eq!(language_family(Language::C), language_family(Language::Cpp));
    assert_ne!(
        language_family(Language::Python),
        language_family(Language::Rust)
    );
}
