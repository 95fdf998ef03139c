//! Code-linked memories in-process: references completed from symbols, URIs and paths, lookup
//! by line, staleness and relocation as the code changes, and links suggested from text.

use std::collections::HashSet;

use crate::common::{call, err_text, list_all, start};
use serde_json::{json, Value};

/// Code-linked memories over MCP (the PRD's acceptance criteria): references completed from a
/// symbol, a URI or path + lines (hash from the file), bad references refused (lines, paths
/// outside the roots, missing files and symbols); after edits: a block shifted by an insertion
/// above is relocated and fresh, an edit inside a block makes it stale with a reason, an edit
/// elsewhere leaves it fresh, a deleted file is stale `deleted`; confidence bounds, reverse
/// lookup by line, exclude_stale / min_confidence, check_staleness (idempotent), explain_code,
/// and `queryd staleness`.
#[test]
fn code_linked_memories_track_their_code() {
    let ix = crate::common::indexed_fixture();
    let c = start(&ix.index, None);
    let add = |m: Value| {
        let c = &c;
        call(c, "add_memories", json!({"memories": [m]}))
            .map(|v| v["ids"][0].as_str().unwrap().to_string())
    };
    let a = add(
        json!({"text": "levenshtein_distance is the classic two-row DP", "source": "user",
                       "code_refs": [{"symbol": "levenshtein_distance"}]}),
    )
    .unwrap();
    let b = add(
        json!({"text": "Dictionary::insert normalises words before counting",
                       "code_refs": [{"uri": "file:src/lib.rs#L20-L24"}]}),
    )
    .unwrap();
    let cc = add(json!({"text": "Circle.area uses math.pi",
                        "code_refs": [{"path": "pkg/geometry.py", "start_line": 12, "end_line": 14}]}))
    .unwrap();
    let d = add(json!({"text": "main.py is the entry point",
                       "code_refs": [{"path": "pkg/main.py", "start_line": 1, "end_line": 3}]}))
    .unwrap();
    let get = |id: &str| {
        let c = &c;
        let id = id.to_string();
        call(c, "get_memory", json!({"id": id})).unwrap()["memory"].clone()
    };
    let ma = get(&a);
    let r = &ma["code_refs"][0];
    assert_eq!(r["path"], "src/lib.rs", "{ma:#}");
    assert!(
        r["start_line"].as_u64().unwrap() <= 38 && r["end_line"] == 51,
        "{r:#}"
    );
    assert!(r["symbol_id"]
        .as_str()
        .unwrap()
        .contains("levenshtein_distance"));
    assert!(r["code_hash"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(r["code_hash"].as_str().unwrap().len(), 7 + 64);
    assert_eq!(
        (r["status"].as_str(), r["is_stale"].as_bool()),
        (Some("fresh"), Some(false))
    );
    assert!(
        ma["confidence"].as_f64().unwrap() >= 0.8,
        "new user memory: {ma:#}"
    );
    let a_start = r["start_line"].as_u64().unwrap();
    let mb = get(&b);
    assert_eq!(mb["code_refs"][0]["code_link"], "file:src/lib.rs#L20-L24");
    assert!(
        mb["code_refs"][0]["symbol_id"]
            .as_str()
            .unwrap()
            .contains("insert"),
        "{mb:#}"
    );

    // Bad references: nothing is added.
    for (r, expect) in [
        (
            json!({"path": "src/lib.rs", "start_line": 5, "end_line": 2}),
            "end ≥ start",
        ),
        (
            json!({"path": "src/lib.rs", "start_line": 0, "end_line": 2}),
            "1-based",
        ),
        (
            json!({"path": "../secret.rs", "start_line": 1, "end_line": 1}),
            "without `..`",
        ),
        (
            json!({"path": "/etc/passwd", "start_line": 1, "end_line": 1}),
            "without `..`",
        ),
        (
            json!({"path": "src/nope.rs", "start_line": 1, "end_line": 1}),
            "no such file",
        ),
        (
            json!({"path": "src/lib.rs", "start_line": 50, "end_line": 99}),
            "the file has",
        ),
        (
            json!({"symbol": "no_such_function_anywhere"}),
            "no indexed symbol",
        ),
        (json!({"uri": "src/lib.rs:10"}), "not a code link"),
        (json!({"path": "src/lib.rs"}), "needs `start_line`"),
    ] {
        let e = add(json!({"text": "x", "code_refs": [r.clone()]})).unwrap_err();
        assert!(err_text(e.clone()).contains(expect), "{r}: {e}");
    }
    assert_eq!(list_all(&c).len(), 4);

    // Reverse lookup by line.
    let m = call(
        &c,
        "memories_for_code",
        json!({"path": "src/lib.rs", "line": 45}),
    )
    .unwrap();
    let rel: Vec<(String, String)> = m["memories"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x["memory"]["id"].as_str().unwrap().into(),
                x["relation"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        rel,
        [(a.clone(), "direct".into()), (b.clone(), "related".into())],
        "{m:#}"
    );
    assert!(m["symbol_id"]
        .as_str()
        .unwrap()
        .contains("levenshtein_distance"));

    // Edits.
    let lib = ix.repo.join("src/lib.rs");
    let text = std::fs::read_to_string(&lib).unwrap();
    let text = text.replace(
        "        let key = util::normalize_word(word);",
        "        let key = util::normalize_word(word).to_lowercase();",
    );
    std::fs::write(&lib, format!("// one\n// two\n// three\n{text}")).unwrap();
    let geo = ix.repo.join("pkg/geometry.py");
    let g = std::fs::read_to_string(&geo).unwrap();
    std::fs::write(&geo, format!("{g}\n\ndef square(x):\n    return x * x\n")).unwrap();
    std::fs::remove_file(ix.repo.join("pkg/main.py")).unwrap();

    let ma = get(&a);
    let r = &ma["code_refs"][0];
    assert_eq!(r["status"], "relocated", "{ma:#}");
    assert_eq!(r["start_line"].as_u64().unwrap(), a_start + 3);
    assert_eq!(ma["is_stale"], false);
    let mb = get(&b);
    assert_eq!(mb["is_stale"], true, "{mb:#}");
    assert!(mb["code_refs"][0]["reason"]
        .as_str()
        .unwrap()
        .starts_with("changed"));
    assert!(mb["confidence"].as_f64().unwrap() <= 0.5);
    assert_eq!(get(&cc)["code_refs"][0]["status"], "fresh");
    let md = get(&d);
    assert_eq!(md["code_refs"][0]["reason"], "deleted", "{md:#}");
    assert_eq!(md["is_stale"], true);

    // Search: stale memories can be left out.
    let all_q = json!({"query": "levenshtein insert normalises Circle main entry point", "mode": "lexical", "limit": 10});
    let s = call(&c, "search_memory", all_q.clone()).unwrap();
    assert_eq!(s["results"].as_array().unwrap().len(), 4);
    let mut q = all_q.clone();
    q["exclude_stale"] = json!(true);
    let s = call(&c, "search_memory", q).unwrap();
    let ids: HashSet<&str> = s["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, HashSet::from([a.as_str(), cc.as_str()]), "{s:#}");
    let mut q = all_q.clone();
    q["min_confidence"] = json!(0.6);
    let s = call(&c, "search_memory", q).unwrap();
    assert!(s["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["confidence"].as_f64().unwrap() >= 0.6));

    // Persisted checks: counts, then idempotent.
    let r = call(&c, "check_staleness", json!({})).unwrap();
    assert_eq!(
        (
            r["memories"].as_u64(),
            r["relocated"].as_u64(),
            r["stale"].as_u64(),
            r["fresh"].as_u64()
        ),
        (Some(4), Some(1), Some(2), Some(1)),
        "{r:#}"
    );
    assert_eq!(r["updated"], 3, "{r:#}");
    let r = call(&c, "check_staleness", json!({})).unwrap();
    assert_eq!(
        (
            r["updated"].as_u64(),
            r["relocated"].as_u64(),
            r["fresh"].as_u64()
        ),
        (Some(0), Some(0), Some(2)),
        "{r:#}"
    );
    let md = get(&d);
    assert!(md["code_refs"][0]["stale_since"].is_string(), "{md:#}");
    let ma = get(&a);
    assert_eq!(ma["code_refs"][0]["status"], "fresh");
    assert_eq!(
        ma["code_refs"][0]["start_line"].as_u64().unwrap(),
        a_start + 3
    );
    let r = call(
        &c,
        "check_staleness",
        json!({"changed_files": ["pkg/geometry.py"]}),
    )
    .unwrap();
    assert_eq!(r["memories"], 1);
    let e = call(
        &c,
        "check_staleness",
        json!({"ids": ["00000000-0000-7000-8000-000000000000"]}),
    )
    .unwrap_err();
    assert!(err_text(e).contains("no memory"));

    // explain_code lists the memory linked to the symbol.
    let x = call(
        &c,
        "explain_code",
        json!({"symbol": "levenshtein_distance"}),
    )
    .unwrap();
    assert_eq!(x["memories"][0]["id"], a, "{x:#}");

    // A second engine on the same index cannot write while this one holds the log (what
    // `queryd staleness` reports); once it is gone, a new one records the re-check.
    let other = engine::Engine::open(&ix.index, &crate::common::model_dir()).unwrap();
    assert!(other.memory_writes_disabled().is_some());
    drop(other);
    c.flush_memories().unwrap();
    drop(c);
    std::fs::write(&geo, "# emptied\n").unwrap();
    let c = start(&ix.index, None);
    let r = call(
        &c,
        "check_staleness",
        json!({"changed_files": ["pkg/geometry.py"]}),
    )
    .unwrap();
    assert_eq!(
        (
            r["memories"].as_u64(),
            r["stale"].as_u64(),
            r["updated"].as_u64()
        ),
        (Some(1), Some(1), Some(1)),
        "{r:#}"
    );
}

/// Identifiers in a memory's text become suggested code links; `auto_link: true` attaches
/// them with reason `inferred_from_code_index`.
#[test]
fn code_links_are_suggested_from_text() {
    let ix = crate::common::indexed_fixture();
    let c = start(&ix.index, None);
    let text = "closest_match() ranks candidates by levenshtein_distance; words are cleaned in src/util.rs";
    let v = call(&c, "add_memories", json!({"memories": [{"text": text}]})).unwrap();
    let links = v["suggested_links"].as_array().unwrap();
    let matched: HashSet<&str> = links
        .iter()
        .map(|l| l["matched"].as_str().unwrap())
        .collect();
    assert_eq!(
        matched,
        HashSet::from(["closest_match", "levenshtein_distance", "src/util.rs"]),
        "{v:#}"
    );
    for l in links {
        assert_eq!(l["reason"], "inferred_from_code_index");
        assert_eq!(l["attached"], false);
        assert!(l["code_ref"]["code_hash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:"));
    }
    let unique = links
        .iter()
        .find(|l| l["matched"] == "closest_match")
        .unwrap();
    assert!((unique["confidence"].as_f64().unwrap() - 0.8).abs() < 1e-6);
    let m = call(&c, "get_memory", json!({"id": v["ids"][0]})).unwrap();
    assert!(
        m["memory"].get("code_refs").is_none(),
        "not attached: {m:#}"
    );
    let v = call(
        &c,
        "add_memories",
        json!({"memories": [{"text": text}], "auto_link": true}),
    )
    .unwrap();
    let m = call(&c, "get_memory", json!({"id": v["ids"][0]})).unwrap();
    let refs = m["memory"]["code_refs"].as_array().unwrap();
    assert_eq!(refs.len(), 3, "{m:#}");
    assert!(refs
        .iter()
        .all(|r| r["reason"] == "inferred_from_code_index" && r["status"] == "fresh"));
    // Plain prose suggests nothing.
    let v = call(
        &c,
        "add_memories",
        json!({"memories": [{"text": "We prefer small pull requests."}]}),
    )
    .unwrap();
    assert!(v.get("suggested_links").is_none(), "{v:#}");
    drop(c);
}

/// Code references never read a file the user's ignore files keep out of the index: a new
/// reference to one is refused and nothing is added (not even a hash of its lines, which would
/// let an agent test guesses at a secret). A hidden file the ignore files do not exclude (a
/// committed `.github/workflows/ci.yml`), and a file written after the build, are accepted.
#[test]
fn code_references_read_no_file_kept_out_of_the_index() {
    let ix = crate::common::indexed_fixture();
    let c = start(&ix.index, None);
    let root = format::IndexManifest::read(&ix.index).unwrap().roots[0]
        .path
        .clone();
    let root = std::path::Path::new(&root);
    let ignore = root.join(".gitignore");
    let mut rules = std::fs::read_to_string(&ignore).unwrap_or_default();
    rules.push_str("\nsecrets.py\n.env\nprivate/\n");
    std::fs::write(&ignore, rules).unwrap();
    std::fs::write(root.join("pkg/secrets.py"), "TOKEN = 'hunter2'\n").unwrap();
    std::fs::write(root.join(".env"), "TOKEN=hunter2\n").unwrap();
    std::fs::create_dir_all(root.join("private")).unwrap();
    std::fs::write(root.join("private/keys.py"), "KEY = 'x'\n").unwrap();
    std::fs::create_dir_all(root.join(".github/workflows")).unwrap();
    std::fs::write(root.join(".github/workflows/ci.yml"), "on: push\n").unwrap();
    std::fs::write(root.join("pkg/fresh.py"), "def fresh():\n    return 1\n").unwrap();
    let before = list_all(&c).len();
    for path in ["pkg/secrets.py", ".env", "private/keys.py"] {
        for r in [
            json!({"path": path, "start_line": 1, "end_line": 1}),
            json!({"uri": format!("file:{path}#L1")}),
        ] {
            let e = call(
                &c,
                "add_memories",
                json!({"memories": [{"text": "about a secret", "code_refs": [r.clone()]}]}),
            )
            .unwrap_err();
            assert!(err_text(e.clone()).contains("never reads"), "{r}: {e}");
        }
    }
    assert_eq!(list_all(&c).len(), before);
    for (path, end) in [("pkg/fresh.py", 2), (".github/workflows/ci.yml", 1)] {
        let v = call(
            &c,
            "add_memories",
            json!({"memories": [{"text": format!("about {path}"),
                                 "code_refs": [{"path": path, "start_line": 1, "end_line": end}]}]}),
        )
        .unwrap();
        assert!(v["ids"][0].is_string(), "{path}: {v}");
    }
}
