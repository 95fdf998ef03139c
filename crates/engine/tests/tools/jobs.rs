//! `reindex` and `job_status` in-process: a background re-index job updates the served index
//! (paths and whole roots), memories survive it, and queries keep working meanwhile.

use std::time::Duration;

use crate::common::{call, err_text, start};
use serde_json::{json, Value};

/// `reindex` and `job_status` over MCP: a new file becomes searchable, a path-limited job
/// leaves other changed files alone, a whole-root job picks them up and drops deleted files,
/// memories written meanwhile stay, and bad paths are refused.
#[test]
fn reindex_jobs_update_the_served_index() {
    let ix = crate::common::indexed_fixture();
    let c = start(&ix.index, None);
    let names = |v: &Value| -> Vec<String> {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["name"].as_str().map(str::to_string))
            .collect()
    };
    let q = json!({"query": "compute_invoice_total", "mode": "lexical"});
    let before = call(&c, "search_code", q.clone()).unwrap();
    assert!(!names(&before).contains(&"compute_invoice_total".to_string()));
    let m = call(
        &c,
        "add_memories",
        json!({"memories": [{"text": "Invoices are summed in pkg/billing.py"}]}),
    )
    .unwrap();
    let mem_id = m["ids"][0].as_str().unwrap().to_string();

    // A new file, re-indexed by path; a change elsewhere stays out of that job.
    std::fs::write(
        ix.repo.join("pkg/billing.py"),
        "def compute_invoice_total(lines):\n    \"\"\"Sums invoice lines.\"\"\"\n    return sum(l.amount for l in lines)\n",
    )
    .unwrap();
    let g = ix.repo.join("pkg/geometry.py");
    let text = std::fs::read_to_string(&g).unwrap();
    std::fs::write(
        &g,
        format!("{text}\n\ndef hexagon_area(side):\n    return 2.598 * side * side\n"),
    )
    .unwrap();
    let j = call(
        &c,
        "reindex",
        json!({"paths": ["pkg/billing.py"], "wait": true}),
    )
    .unwrap();
    assert_eq!(j["state"], "done", "{j:#}");
    assert_eq!(j["files_changed"], 1);
    assert!(j["chunks_embedded"].as_u64().unwrap() >= 1);
    assert_eq!(j["paths"], json!(["polyglot/pkg/billing.py"]));
    let after = call(&c, "search_code", q.clone()).unwrap();
    assert_eq!(names(&after)[0], "compute_invoice_total", "{after:#}");
    let hex = json!({"query": "hexagon_area", "mode": "lexical"});
    let h = call(&c, "search_code", hex.clone()).unwrap();
    assert!(!names(&h).contains(&"hexagon_area".to_string()));

    // The whole root, in the background: poll job_status; queries work meanwhile.
    std::fs::remove_file(ix.repo.join("pkg/billing.py")).unwrap();
    let j = call(&c, "reindex", json!({})).unwrap();
    let id = j["job_id"].as_u64().unwrap();
    let mut last = Value::Null;
    for _ in 0..600 {
        call(&c, "search_code", json!({"query": "circle area"})).unwrap();
        last = call(&c, "job_status", json!({"job_id": id})).unwrap()["jobs"][0].clone();
        if last["state"] == "done" || last["state"] == "failed" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(last["state"], "done", "{last:#}");
    assert_eq!(last["files_changed"], 1, "{last:#}");
    assert_eq!(last["files_deleted"], 1, "{last:#}");
    let h = call(&c, "search_code", hex).unwrap();
    assert_eq!(names(&h)[0], "hexagon_area", "{h:#}");
    let gone = call(&c, "search_code", q).unwrap();
    assert!(!names(&gone).contains(&"compute_invoice_total".to_string()));
    // Nothing changed since: a no-op job, asked with `debug` as every tool can be.
    let j = call(&c, "reindex", json!({"wait": true, "debug": true})).unwrap();
    assert_eq!(
        (j["state"].as_str(), j["files_changed"].as_u64()),
        (Some("done"), Some(0))
    );
    let (queued, total) = (&j["debug"]["other_ms"], &j["debug"]["total_ms"]);
    assert!(total.as_f64().unwrap() >= queued.as_f64().unwrap(), "{j:#}");
    assert!(
        j["debug"]["generation"].as_u64() >= j["generation"].as_u64(),
        "{j:#}"
    );
    let all = call(&c, "job_status", json!({})).unwrap();
    assert_eq!(all["jobs"].as_array().unwrap().len(), 3);
    assert!(all["jobs"][0]["job_id"].as_u64() > all["jobs"][1]["job_id"].as_u64());
    // The call's timing is the answer's, not the job's: the table keeps none.
    assert!(all.get("debug").is_none() && all["jobs"][0].get("debug").is_none());
    let d = call(&c, "job_status", json!({"debug": true})).unwrap();
    assert!(d["debug"]["total_ms"].as_f64().is_some(), "{d:#}");
    // Without `wait`: the queued job and the call's timing; the table still keeps none.
    let j = call(&c, "reindex", json!({"debug": true})).unwrap();
    assert!(j["debug"]["total_ms"].as_f64().is_some(), "{j:#}");
    let id = j["job_id"].as_u64().unwrap();
    let mut last = Value::Null;
    for _ in 0..600 {
        last = call(&c, "job_status", json!({"job_id": id})).unwrap();
        if last["jobs"][0]["state"] == "done" || last["jobs"][0]["state"] == "failed" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(last["jobs"][0]["state"], "done", "{last:#}");
    assert!(last.get("debug").is_none() && last["jobs"][0].get("debug").is_none());
    // The memory written before is still there.
    call(&c, "get_memory", json!({"id": mem_id})).unwrap();

    // Bad input.
    for (a, expect) in [
        (json!({"paths": ["../elsewhere"]}), "inside its root"),
        (
            json!({"paths": ["/etc/passwd"]}),
            "not inside an indexed root",
        ),
        (json!({"paths": [""]}), "empty path"),
    ] {
        let e = call(&c, "reindex", a.clone()).expect_err("bad path");
        assert!(err_text(e.clone()).contains(expect), "{a}: {e}");
    }
    let e = call(&c, "job_status", json!({"job_id": 999})).unwrap_err();
    assert!(err_text(e).contains("no job 999"));
    drop(c);
}

/// `reindex` never reads outside the recorded roots: a file link and a directory link to an
/// outside place are skipped and named in the job's `outside_root`, their text stays out of the
/// index, and a `paths` entry resolving outside is refused with a clear error.
#[cfg(unix)]
#[test]
fn reindex_skips_symlinks_leading_outside_the_root() {
    let ix = crate::common::indexed_fixture();
    let c = start(&ix.index, None);
    let outside = ix.tmp.path().join("outside");
    std::fs::create_dir_all(outside.join("lib")).unwrap();
    std::fs::write(
        outside.join("secret.py"),
        "def zorblaxquint_secret():\n    return 'xyzzy'\n",
    )
    .unwrap();
    std::fs::write(
        outside.join("lib/vendored.py"),
        "def quibbleflarn_vendored():\n    return 1\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(outside.join("secret.py"), ix.repo.join("leak.py")).unwrap();
    std::os::unix::fs::symlink(outside.join("lib"), ix.repo.join("vendor")).unwrap();

    let j = call(&c, "reindex", json!({"wait": true})).unwrap();
    assert_eq!(j["state"], "done", "{j:#}");
    let outside_root: Vec<String> = j["outside_root"]
        .as_array()
        .unwrap_or_else(|| panic!("no outside_root in {j:#}"))
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(outside_root.len(), 2, "{j:#}");
    assert!(outside_root[0].contains("leak.py") && outside_root[0].contains("outside the root"));
    assert!(outside_root[1].contains("vendor"));
    for word in ["zorblaxquint_secret", "quibbleflarn_vendored"] {
        let r = call(&c, "search_code", json!({"query": word, "mode": "lexical"})).unwrap();
        let text = r["results"].to_string();
        assert!(!text.contains(word), "{word} was indexed: {r:#}");
    }
    for p in ["leak.py", "vendor/vendored.py"] {
        let e = call(&c, "reindex", json!({"paths": [p], "wait": true})).expect_err(p);
        assert!(err_text(e.clone()).contains("outside the root"), "{p}: {e}");
    }
    drop(c);
}

/// A job says what it left out and what named nothing: a file that is not UTF-8 (its edit is
/// not indexed) is listed with its reason and counted by reason; a path that names no file on
/// disk and nothing indexed gets a note. A deleted file's path needs none (its chunks go).
#[test]
fn reindex_tells_what_it_left_out_and_what_named_nothing() {
    let ix = crate::common::indexed_fixture();
    let c = start(&ix.index, None);
    std::fs::write(
        ix.repo.join("pkg/latin1.py"),
        b"def caf\xe9():\n    return 1\n",
    )
    .unwrap();
    let j = call(
        &c,
        "reindex",
        json!({"paths": ["pkg/latin1.py", "pkg/nowhere.py"], "wait": true}),
    )
    .unwrap();
    assert_eq!(j["state"], "done", "{j:#}");
    assert_eq!(j["files_changed"], 0, "{j:#}");
    let warnings = j["warnings"].to_string();
    assert!(
        warnings.contains("latin1.py") && warnings.contains("UTF-8"),
        "{j:#}"
    );
    assert_eq!(j["skipped"]["invalid UTF-8"], 1, "{j:#}");
    let notes = j["notes"].to_string();
    assert!(
        notes.contains("pkg/nowhere.py") && notes.contains("names no file"),
        "{j:#}"
    );
    assert!(!notes.contains("latin1.py"), "{j:#}");
    // A deleted file that the index holds is a target like any other: no note.
    std::fs::remove_file(ix.repo.join("pkg/geometry.py")).unwrap();
    let j = call(
        &c,
        "reindex",
        json!({"paths": ["pkg/geometry.py"], "wait": true}),
    )
    .unwrap();
    assert_eq!(j["files_deleted"], 1, "{j:#}");
    // The file that is not UTF-8 lies outside this job's path: not its warning.
    assert!(j.get("warnings").is_none(), "{j:#}");
    assert!(
        j.get("notes")
            .is_none_or(|n| !n.to_string().contains("names no file")),
        "{j:#}"
    );
    drop(c);
}

/// A root built with `--no-ignore` keeps its ignored files through a whole-root `reindex`:
/// the rules are recorded in MANIFEST and the server walks the root with them.
#[test]
fn reindex_walks_a_root_with_the_rules_it_was_built_with() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = cix_tests::fixture_copy(tmp.path());
    std::fs::create_dir_all(repo.join("vendor")).unwrap();
    std::fs::write(repo.join(".gitignore"), "vendor/\n").unwrap();
    std::fs::write(
        repo.join("vendor/quux.py"),
        "def frobnicate_vendored_quux():\n    return 1\n",
    )
    .unwrap();
    let index = tmp.path().join("index");
    let mut opts = indexer::build::BuildOptions::new(vec![repo.clone()], index.clone());
    opts.rules.no_ignore = true;
    indexer::build::build(
        &opts,
        cix_tests::encoder(),
        &indexer::progress::Progress::silent(),
    )
    .unwrap();
    let manifest = std::fs::read_to_string(index.join("MANIFEST")).unwrap();
    assert!(manifest.contains("\"no_ignore\": true"), "{manifest}");
    let c = start(&index, None);
    let q = json!({"query": "frobnicate_vendored_quux", "mode": "lexical"});
    let found = |c: &std::sync::Arc<engine::Engine>| {
        let r = call(c, "search_code", q.clone()).unwrap();
        r["results"][0]["name"] == "frobnicate_vendored_quux"
    };
    assert!(found(&c));
    let j = call(&c, "reindex", json!({"wait": true})).unwrap();
    assert_eq!(j["state"], "done", "{j:#}");
    assert_eq!(j["files_deleted"], 0, "{j:#}");
    c.reload_if_changed().unwrap();
    assert!(found(&c), "the ignored file left the index on reindex");
}

/// `reindex` builds every recorded root at once, each walked with its own recorded rules, so
/// calls resolve across repositories: a whole job links a call into the other repository that
/// the one-root builds could not, a path job in one repository relinks the unchanged caller in
/// the other when the definition it calls appears, a root built with `--no-ignore` keeps its
/// ignored file, and a recorded root that is gone is left out with a note (by path jobs in the
/// other root and by whole jobs), its files and the edges into them kept.
#[test]
fn reindex_builds_every_root_at_once() {
    use code::view::CodeView;
    use format::records::EdgeKind;

    let tmp = tempfile::tempdir().unwrap();
    let app = tmp.path().join("src/app");
    let lib = tmp.path().join("src/lib");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(
        app.join("uses.py"),
        "def uses():\n    return only_there() + late_def()\n",
    )
    .unwrap();
    std::fs::write(lib.join("ext.py"), "def only_there():\n    return 1\n").unwrap();
    std::fs::write(lib.join(".gitignore"), "ignored.py\n").unwrap();
    std::fs::write(
        lib.join("ignored.py"),
        "def frob_ignored_helper():\n    return 3\n",
    )
    .unwrap();
    let index = tmp.path().join("index");
    let build_one = |root: &std::path::Path, no_ignore: bool| {
        let mut opts = indexer::build::BuildOptions::new(vec![root.to_path_buf()], index.clone());
        opts.rules.no_ignore = no_ignore;
        indexer::build::build(
            &opts,
            cix_tests::encoder(),
            &indexer::progress::Progress::silent(),
        )
        .unwrap()
    };
    // One root at a time, as two `indexer build` runs: the first cannot see `only_there`.
    build_one(&app, false);
    let r = build_one(&lib, true);
    assert_eq!(r.files_relinked, 0, "{r:?}");
    let calls = |name: &str| {
        let v = CodeView::open(&index).unwrap();
        let uses = v.resolve("uses");
        assert_eq!(uses.len(), 1);
        v.out_edges(uses[0], EdgeKind::Calls)
            .iter()
            .any(|&(t, _)| v.is_chunk(t) && v.chunk(t).name.as_str() == name)
    };
    assert!(!calls("only_there") && !calls("late_def"));

    let c = start(&index, None);
    let j = call(&c, "reindex", json!({"wait": true})).unwrap();
    assert_eq!(j["state"], "done", "{j:#}");
    assert_eq!(
        (
            &j["files_changed"],
            &j["files_deleted"],
            &j["files_relinked"]
        ),
        (&json!(0), &json!(0), &json!(1)),
        "{j:#}"
    );
    // Every file's parse came from the facts cache: `lib`'s build kept `app`'s entries (a
    // repository it did not walk that MANIFEST records).
    assert_eq!(j["files_cached"], j["files_seen"], "{j:#}");
    assert!(j.get("notes").is_none(), "{j:#}");
    assert!(calls("only_there") && !calls("late_def"));
    let q = json!({"query": "frob_ignored_helper", "mode": "lexical"});
    let r = call(&c, "search_code", q.clone()).unwrap();
    assert_eq!(r["results"][0]["name"], "frob_ignored_helper", "{r:#}");

    // A path job in `lib` adds the definition `uses` (in `app`, unchanged) calls.
    std::fs::write(lib.join("late.py"), "def late_def():\n    return 2\n").unwrap();
    let late = lib.join("late.py").to_string_lossy().into_owned();
    let j = call(&c, "reindex", json!({"paths": [late], "wait": true})).unwrap();
    assert_eq!(j["state"], "done", "{j:#}");
    assert_eq!(
        (
            &j["files_changed"],
            &j["files_deleted"],
            &j["files_relinked"]
        ),
        (&json!(1), &json!(0), &json!(1)),
        "{j:#}"
    );
    assert_eq!(j["paths"], json!(["lib/late.py"]), "{j:#}");
    assert!(calls("only_there") && calls("late_def"));

    // A file deleted from the second root, named by its relative path (in no root on disk):
    // the job is that root's, and the file goes.
    std::fs::write(lib.join("gone.py"), "def gone_soon():\n    return 4\n").unwrap();
    let gone = lib.join("gone.py").to_string_lossy().into_owned();
    let j = call(&c, "reindex", json!({"paths": [gone], "wait": true})).unwrap();
    assert_eq!(j["files_changed"], 1, "{j:#}");
    std::fs::remove_file(lib.join("gone.py")).unwrap();
    let j = call(&c, "reindex", json!({"paths": ["gone.py"], "wait": true})).unwrap();
    assert_eq!(
        (&j["files_deleted"], &j["paths"]),
        (&json!(1), &json!(["lib/gone.py"])),
        "{j:#}"
    );
    assert!(
        j.get("notes")
            .is_none_or(|n| !n.to_string().contains("names no file")),
        "{j:#}"
    );

    // `lib` goes; a job on `app` leaves it out, says so, and keeps what the index holds of it.
    std::fs::rename(&lib, tmp.path().join("lib-moved")).unwrap();
    std::fs::write(app.join("more.py"), "def more():\n    return uses()\n").unwrap();
    let j = call(&c, "reindex", json!({"paths": ["more.py"], "wait": true})).unwrap();
    assert_eq!(j["state"], "done", "{j:#}");
    assert_eq!(
        (
            &j["files_changed"],
            &j["files_deleted"],
            &j["files_relinked"]
        ),
        (&json!(1), &json!(0), &json!(0)),
        "{j:#}"
    );
    let notes = j["notes"].to_string();
    assert!(notes.contains("not a directory here any more"), "{j:#}");
    assert!(notes.contains("not compared"), "{j:#}");
    assert!(calls("only_there") && calls("late_def"));
    let r = call(&c, "search_code", q.clone()).unwrap();
    assert_eq!(r["results"][0]["name"], "frob_ignored_helper", "{r:#}");
    // A whole job re-indexes the roots still here; targeting the gone root is refused.
    std::fs::remove_file(app.join("more.py")).unwrap();
    let j = call(&c, "reindex", json!({"wait": true})).unwrap();
    assert_eq!(j["state"], "done", "{j:#}");
    assert_eq!(j["files_deleted"], 1, "{j:#}");
    // The file that is not UTF-8 lies outside this job's path: not its warning.
    assert!(j.get("warnings").is_none(), "{j:#}");
    assert!(
        j["notes"]
            .to_string()
            .contains("not a directory here any more"),
        "{j:#}"
    );
    let r = call(&c, "search_code", q).unwrap();
    assert_eq!(r["results"][0]["name"], "frob_ignored_helper", "{r:#}");
    let e = err_text(call(&c, "reindex", json!({"paths": [late]})).unwrap_err());
    assert!(
        e.contains("not a directory") || e.contains("not inside"),
        "{e}"
    );
}
