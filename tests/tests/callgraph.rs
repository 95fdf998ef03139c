//! Call-graph quality on the vendored ground-truth subset (`tests/fixtures/callgraph/*/`, made
//! by `scripts/callgraph/make_truth.sh fixtures` with scip-python / scip-typescript): every
//! case's CALLS edges are scored with `indexer::graph::eval::score` (root = the case
//! directory), the table is printed, and the targets of issue #14 are asserted: no edge joins two
//! language families (also on the polyglot fixture), precision (exact + likely) ≥ 0.95 and
//! recall (exact + likely) ≥ 0.85 per case.

use indexer::graph::eval::{markdown_table, score, Score, Truth};

const MIN_PRECISION: f64 = 0.95;
const MIN_RECALL: f64 = 0.85;

#[test]
fn callgraph_matches_scip_truth() {
    let dir = cix_tests::fixture("callgraph");
    let mut roots: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("truth.json").is_file())
        .collect();
    roots.sort();
    assert!(
        roots.len() >= 2,
        "expected the vendored cases under {}, found {roots:?}",
        dir.display()
    );
    let mut scores: Vec<(String, Score)> = Vec::new();
    for root in &roots {
        let truth = Truth::load(&root.join("truth.json")).expect("truth.json");
        assert!(!truth.calls.is_empty(), "{}: empty truth", root.display());
        let s = score(root, &truth).expect("score");
        let name = root
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        scores.push((name, s));
    }
    let rows: Vec<(&str, &Score)> = scores.iter().map(|(n, s)| (n.as_str(), s)).collect();
    println!("{}", markdown_table(&rows));
    for (name, s) in &scores {
        println!("{name}: false positives {:#?}", s.false_positives);
        println!("{name}: false negatives {:#?}", s.false_negatives);
    }

    let mut failures = Vec::new();
    for (name, s) in &scores {
        if s.cross_language_edges != 0 {
            failures.push(format!(
                "{name}: {} cross-language edges",
                s.cross_language_edges
            ));
        }
        if s.precision_all < MIN_PRECISION {
            failures.push(format!(
                "{name}: precision {:.4} < {MIN_PRECISION}",
                s.precision_all
            ));
        }
        if s.recall_all < MIN_RECALL {
            failures.push(format!("{name}: recall {:.4} < {MIN_RECALL}", s.recall_all));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The polyglot fixture mixes Rust, Python, TS/TSX/JS, Go, Java and C/C++ with shared names:
/// no CALLS edge may join two language families.
#[test]
fn no_call_edge_joins_two_languages() {
    let root = cix_tests::fixture("polyglot");
    let truth = Truth {
        language: "mixed".to_string(),
        source: "none: only the cross-language count is checked".to_string(),
        root: "polyglot".to_string(),
        calls: Vec::new(),
        elsewhere: Vec::new(),
    };
    let s = score(&root, &truth).expect("score");
    assert!(s.files >= 10, "{s:?}");
    assert!(
        s.ours_exact + s.ours_likely > 0,
        "no call edges at all: {s:?}"
    );
    assert_eq!(
        s.cross_language_edges, 0,
        "cross-language edges: {:#?}",
        s.false_positives
    );
}
