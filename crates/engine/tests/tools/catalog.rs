//! The tool catalog is the only list of tools: the README lists exactly its tools, every tool
//! has a schema and a description, and descriptions say what the code does (checked against
//! the constants and defaults they describe).

use std::collections::BTreeSet;

use engine::catalog::{self, CATALOG};
use serde_json::Value;

fn readme() -> String {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Tool names the README's tool list declares: between the `tools:begin` / `tools:end`
/// markers, every bullet that starts with backticked names (`- `a` / `b` …`).
fn readme_tools(text: &str) -> Vec<String> {
    let start = text
        .find("<!-- tools:begin")
        .expect("README has a tools:begin marker");
    let end = text
        .find("<!-- tools:end -->")
        .expect("README has a tools:end marker");
    let mut out = Vec::new();
    for line in text[start..end].lines() {
        let Some(mut rest) = line.strip_prefix("- `") else {
            continue;
        };
        while let Some(close) = rest.find('`') {
            out.push(rest[..close].to_string());
            match rest[close + 1..].strip_prefix(" / `") {
                Some(more) => rest = more,
                None => break,
            }
        }
    }
    out
}

#[test]
fn readme_lists_exactly_the_catalog() {
    let listed = readme_tools(&readme());
    let mut seen = BTreeSet::new();
    for t in &listed {
        assert!(seen.insert(t.clone()), "the README lists `{t}` twice");
    }
    let catalog: BTreeSet<String> = catalog::names().map(str::to_string).collect();
    let unknown: Vec<_> = seen.difference(&catalog).collect();
    let missing: Vec<_> = catalog.difference(&seen).collect();
    assert!(
        unknown.is_empty() && missing.is_empty(),
        "README tool list vs catalog: listed but not tools {unknown:?}; tools not listed {missing:?}"
    );
}

#[test]
fn readme_parser_reads_bullets_between_markers() {
    let text = "- `outside`\n<!-- tools:begin -->\nTools:\n- `a` `{}`: x\n- `b` / `c` `{}`\n  - `not_a_bullet_start`\n`d` and `e` take\n<!-- tools:end -->\n- `after`";
    assert_eq!(readme_tools(text), ["a", "b", "c"]);
}

#[test]
fn every_tool_has_an_object_schema_and_a_description() {
    let mut names = BTreeSet::new();
    for t in &CATALOG {
        assert!(names.insert(t.name), "{} is in the catalog twice", t.name);
        let s = t.input_schema();
        assert_eq!(s.get("type"), Some(&Value::from("object")), "{}", t.name);
        let d = t.description();
        assert!(d.len() > 40, "{}: description {d:?}", t.name);
        assert!(
            !d.contains('\n'),
            "{}: a description is one paragraph",
            t.name
        );
        assert!(catalog::find(t.name).is_some());
    }
    assert!(catalog::find("no_such_tool").is_none());
}

#[test]
fn descriptions_match_behaviour() {
    let desc = |n: &str| catalog::find(n).unwrap().description();
    // search_code names the fusion that is the default.
    let fusion = code::search::SearchOptions::default().fusion.describe();
    assert!(
        desc("search_code").contains(&format!("fused by {fusion} (the default")),
        "search_code's description must name the default fusion ({fusion}): {}",
        desc("search_code")
    );
    // SIMILAR links: k and the cosine floor.
    let similar = format!(
        "the {} nearest memories with cosine >= {}",
        format::memory::SIMILAR_K,
        format::memory::SIMILAR_MIN
    );
    assert!(desc("graph_similar_memories").contains(&similar));
    // Batch limits, as the argument docs state them.
    let batch = format!("at most {}", engine::tools::memory::input::MAX_BATCH);
    for (tool, field) in [("add_memories", "memories"), ("delete_memories", "ids")] {
        let s = catalog::find(tool).unwrap().input_schema();
        let d = s["properties"][field]["description"]
            .as_str()
            .unwrap_or_default();
        assert!(
            d.contains(&batch),
            "{tool}.{field}: {d:?} should say {batch:?}"
        );
    }
}
