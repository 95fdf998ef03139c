//! Golden tests: what an MCP client sees, pinned to files under `tests/golden/`.
//!
//! `tools/list` (names, order and input schemas) and a scripted session over every tool family
//! (answers, tool errors, protocol errors) against the polyglot fixture are compared with the
//! checked-in JSON. They were recorded before queryd was split into engine crates, so a
//! refactor that changes a name, a schema, an answer's shape or an error text fails here.
//!
//! Volatile parts are normalised before the comparison: timings (`debug`, `*_ms`), clock
//! times, memory ids (numbered by first appearance), the temporary directory, and floats
//! (rounded to 3 decimals). Tool descriptions are not pinned here (they come from the tool
//! catalog's doc comments and are checked against behaviour in the engine crate).
//!
//! To re-record after an intended change: `CIX_UPDATE_GOLDEN=1 cargo test --release -p
//! cix-queryd --test golden`, then review the diff.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use rmcp::{RoleClient, ServiceExt};
use serde_json::{json, Map, Value};

const BIN: &str = env!("CARGO_BIN_EXE_queryd");

type Client = RunningService<RoleClient, ()>;

fn golden_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// Compares `actual` with the golden file (or writes it under `CIX_UPDATE_GOLDEN=1`).
fn check_golden(name: &str, actual: &Value) {
    let path = golden_path(name);
    let text = serde_json::to_string_pretty(actual).unwrap() + "\n";
    if std::env::var_os("CIX_UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; record it with CIX_UPDATE_GOLDEN=1",
            path.display()
        )
    });
    if want != text {
        let got = path.with_extension("actual.json");
        std::fs::write(&got, &text).unwrap();
        let first = want
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(text.lines().count()));
        panic!(
            "{} differs from the golden file at line {} (actual written to {}):\n  want: {}\n  got:  {}",
            name,
            first + 1,
            got.display(),
            want.lines().nth(first).unwrap_or("<end>"),
            text.lines().nth(first).unwrap_or("<end>")
        );
    }
}

/// Replaces the volatile parts of an answer (see the module doc).
struct Normaliser {
    tmp: String,
    ids: HashMap<String, String>,
}

const MASKED_KEYS: &[&str] = &[
    "debug",
    "created_at",
    "updated_at",
    "last_checked",
    "checked_at",
    "verified_at",
    "loaded_at",
    "started",
    "started_at",
    "finished_at",
    "at_unix",
    "uptime_s",
    "code_age_s",
    "ms",
    "elapsed_ms",
    "manifest_mtime",
    "git_head",
    "commit",
    "index_bytes",
    "bytes",
    "size_bytes",
    "rss_bytes",
    "reloads",
    "cache_hits",
    "cache_misses",
    "cache_entries",
];

fn is_memory_id(s: &str) -> bool {
    // uuid v7 text: 8-4-4-4-12 hex digits.
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && [8, 4, 4, 4, 12]
            .iter()
            .zip(&parts)
            .all(|(n, p)| p.len() == *n && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// Replaces RFC 3339 times (`2026-11-23T12:18:07.274Z`) by `<time>`.
fn mask_times(s: &str) -> String {
    const SHAPE: &[u8] = b"dddd-dd-ddTdd:dd:dd.dddZ";
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        let hit = b.len() >= i + SHAPE.len()
            && SHAPE.iter().zip(&b[i..]).all(|(p, c)| match p {
                b'd' => c.is_ascii_digit(),
                p => p == c,
            });
        if hit {
            out.push_str("<time>");
            i += SHAPE.len();
        } else {
            let ch = s[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

impl Normaliser {
    fn string(&mut self, s: &str) -> String {
        let mut s = mask_times(&s.replace(&self.tmp, "<TMP>"));
        // Memory ids anywhere in a string (messages name them).
        let mut out = String::new();
        let mut rest = s.as_str();
        while rest.len() >= 36 {
            let Some(pos) = rest.char_indices().map(|(i, _)| i).find(|&i| {
                rest.len() >= i + 36
                    && rest.is_char_boundary(i + 36)
                    && is_memory_id(&rest[i..i + 36])
            }) else {
                break;
            };
            out.push_str(&rest[..pos]);
            let id = &rest[pos..pos + 36];
            if id == "00000000-0000-7000-8000-000000000000" {
                out.push_str(id);
            } else {
                let n = self.ids.len() + 1;
                let tag = self
                    .ids
                    .entry(id.to_string())
                    .or_insert_with(|| format!("<mem{n}>"))
                    .clone();
                out.push_str(&tag);
            }
            rest = &rest[pos + 36..];
        }
        out.push_str(rest);
        s = out;
        s
    }

    fn value(&mut self, v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut out = Map::new();
                for (k, x) in m {
                    // A segment's id is the hash of its files, vectors included, whose last
                    // bits depend on the CPU's SIMD path: masked like a time.
                    let segment_id = k == "id" && m.contains_key("vector_index");
                    let masked = MASKED_KEYS.contains(&k.as_str())
                        || segment_id
                        || k.ends_with("_ms")
                        || k.ends_with("_unix");
                    let y = if masked && !x.is_null() {
                        json!("<masked>")
                    } else {
                        self.value(x)
                    };
                    out.insert(k.clone(), y);
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(|x| self.value(x)).collect()),
            Value::String(s) => Value::String(self.string(s)),
            Value::Number(n) if n.is_f64() => {
                let f = n.as_f64().unwrap();
                json!((f * 1000.0).round() / 1000.0)
            }
            other => other.clone(),
        }
    }
}

async fn start(index: &Path) -> Client {
    let transport = TokioChildProcess::new(tokio::process::Command::new(BIN).configure(|c| {
        c.arg("--index")
            .arg(index)
            .arg("--model")
            .arg(common::model_dir())
            .arg("--no-watch");
    }))
    .expect("spawn queryd");
    ().serve(transport).await.expect("MCP handshake over stdio")
}

/// One call as the golden file records it: the answer, the tool error, or the protocol error.
async fn call(c: &Client, name: &str, a: &Value) -> Value {
    let r = c
        .call_tool(
            CallToolRequestParams::new(name.to_string())
                .with_arguments(a.as_object().expect("object").clone()),
        )
        .await;
    match r {
        Err(e) => json!({ "protocol_error": e.to_string() }),
        Ok(r) => {
            let v = r.structured_content.clone().unwrap_or(Value::Null);
            if r.is_error == Some(true) {
                json!({ "tool_error": v })
            } else {
                json!({ "answer": v })
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_and_answers_match_the_golden_files() {
    let ix = common::indexed_fixture();
    let c = start(&ix.index).await;
    let mut norm = Normaliser {
        tmp: ix.tmp.path().to_string_lossy().into_owned(),
        ids: HashMap::new(),
    };

    // tools/list: order, names and input schemas (property names, types, required fields,
    // enums, defaults). Descriptions are documentation, not contract: they are not pinned here
    // (the engine crate checks them against behaviour), so they can be corrected.
    let tools = c.list_all_tools().await.expect("tools/list");
    let listed: Vec<Value> = tools
        .iter()
        .map(|t| {
            let mut schema = Value::Object((*t.input_schema).clone());
            strip_descriptions(&mut schema);
            json!({ "name": t.name, "input_schema": schema })
        })
        .collect();
    check_golden("tools_list.json", &Value::Array(listed));

    // A scripted session. Ids returned by earlier calls are referred to as "$mem1", "$mem2"...
    // (in the order add_memories returned them).
    let script: Vec<(&str, Value)> = vec![
        // Code search and lookups.
        (
            "search_code",
            json!({"query": "edit distance between two strings", "limit": 3}),
        ),
        (
            "search_code",
            json!({"query": "ServeHTTP", "mode": "lexical", "limit": 2}),
        ),
        (
            "search_code",
            json!({"query": "area of a shape", "mode": "vector", "lang": "python", "limit": 2}),
        ),
        (
            "search_code",
            json!({"query": "area of a shape", "mode": "vector", "language": "python", "limit": 2}),
        ),
        (
            "search_code",
            json!({"query": "hash", "path": "native/**", "kind": "function", "limit": 3, "snippet_lines": 2}),
        ),
        ("search_code", json!({"query": "  "})),
        ("search_code", json!({"query": "y".repeat(9000)})),
        ("search_code", json!({"query": "x", "mode": "psychic"})),
        ("search_code", json!({"query": "x", "path": "[unclosed"})),
        ("search_code", json!({"query": 5})),
        ("search_code", json!({"query": "x", "bogus": 1})),
        ("get_symbol", json!({"symbol": "closest_match"})),
        ("get_symbol", json!({"symbol": "Dictionary::suggest"})),
        ("get_symbol", json!({"symbol": "levenshtein_distanse"})),
        ("get_symbol", json!({})),
        ("find_callers", json!({"symbol": "levenshtein_distance"})),
        ("find_callees", json!({"symbol": "closest_match"})),
        ("find_callers", json!({"symbol": "area"})),
        (
            "find_callers",
            json!({"symbol": "no_such_function_anywhere"}),
        ),
        (
            "impact_analysis",
            json!({"symbol": "levenshtein_distance", "depth": 2}),
        ),
        (
            "impact_analysis",
            json!({"symbol": "levenshtein_distance", "depth": 99}),
        ),
        ("explain_code", json!({"symbol": "Dictionary::suggest"})),
        (
            "find_duplicates",
            json!({"symbol": "Circle.area", "threshold": 0.3}),
        ),
        (
            "find_duplicates",
            json!({"code": "fn add(a: i32, b: i32) -> i32 { a + b }", "limit": 2}),
        ),
        ("index_status", json!({})),
        ("job_status", json!({"job_id": 12345})),
        ("reindex", json!({"paths": ["/etc/passwd"]})),
        ("reindex", json!({"paths": ["../outside.rs"]})),
        ("no_such_tool", json!({})),
        // Memories.
        (
            "add_memories",
            json!({"memories": [
                {"text": "The upload service retries failed chunk uploads three times with exponential backoff",
                 "category": "decision", "entity": "uploads", "tags": ["area=io", "retry"],
                 "evidence": ["PR-42"],
                 "code_refs": [{"path": "src/lib.rs", "start_line": 10, "end_line": 20}]},
                {"text": "Use snake_case for all JSON field names in the public API",
                 "category": "convention", "scope": "team", "tags": ["area=api"], "source": "user"},
                {"text": "levenshtein_distance is the edit distance used by closest_match for suggestions",
                 "entity": "dictionary", "code_refs": [{"symbol": "levenshtein_distance"}]},
                {"text": "The billing service calls the uploads API to store invoices as PDF files",
                 "entity": "billing", "tags": ["area=io", "pdf"]}
            ]}),
        ),
        ("get_memory", json!({"id": "$mem1"})),
        (
            "get_memory",
            json!({"id": "$mem3", "relation_detail": "full"}),
        ),
        ("list_memories", json!({"limit": 10})),
        (
            "list_memories",
            json!({"tags": ["area=io"], "tags_mode": "all"}),
        ),
        (
            "search_memory",
            json!({"query": "how often do we retry uploads", "limit": 3}),
        ),
        (
            "search_memory",
            json!({"query": "snake_case", "mode": "lexical"}),
        ),
        (
            "search_memory",
            json!({"query": "retry uploads", "tags": ["area=api"]}),
        ),
        (
            "search_memory",
            json!({"query": "billing invoices PDF", "relation_detail": "standard"}),
        ),
        (
            "update_memory",
            json!({"id": "$mem2", "text": "Public API JSON fields use camelCase since v2"}),
        ),
        ("update_memory", json!({"id": "$mem2", "state": "gone"})),
        (
            "memories_for_code",
            json!({"path": "src/lib.rs", "line": 12}),
        ),
        (
            "memories_for_code",
            json!({"path": "../../etc/passwd", "line": 1}),
        ),
        ("check_staleness", json!({})),
        ("graph_related_memories", json!({"id": "$mem1"})),
        ("graph_similar_memories", json!({"id": "$mem1"})),
        (
            "graph_subgraph",
            json!({"node": "entity:uploads", "depth": 2}),
        ),
        ("graph_subgraph", json!({"node": "entity:nobody"})),
        ("graph_aggregate", json!({"group_by": "tag"})),
        ("graph_aggregate", json!({"group_by": "colour"})),
        ("graph_tag_cooccurrence", json!({"min_count": 1})),
        ("graph_entity_network", json!({"center": "billing"})),
        (
            "graph_path_between_entities",
            json!({"from": "billing", "to": "uploads"}),
        ),
        (
            "graph_path_between_entities",
            json!({"from": "billin", "to": "uploads"}),
        ),
        ("explain_code", json!({"symbol": "levenshtein_distance"})),
        ("delete_memories", json!({"ids": ["$mem4"]})),
        (
            "delete_memories",
            json!({"ids": ["$mem1", "00000000-0000-7000-8000-000000000000"]}),
        ),
        ("get_memory", json!({"id": "$mem4"})),
        ("get_memory", json!({"id": "nope"})),
        ("add_memories", json!({"memories": []})),
        ("add_memories", json!({"memories": [{"text": "  "}]})),
        (
            "add_memories",
            json!({"memories": [{"text": "ok", "scope": "galaxy"}]}),
        ),
        (
            "add_memories",
            json!({"memories": [{"text": "ok", "code_refs": [{"path": "a.rs", "start_line": 5, "end_line": 2}]}]}),
        ),
        (
            "add_memories",
            json!({"memories": [{"text": "ok", "code_refs": [{"path": "/etc/passwd", "start_line": 1, "end_line": 2}]}]}),
        ),
        ("list_memories", json!({"tags_mode": "some"})),
        (
            "search_memory",
            json!({"query": "x", "created_before": "tomorrow"}),
        ),
        (
            "search_memory",
            json!({"query": "x", "weights": {"vector": -1.0}}),
        ),
        (
            "search_memory",
            json!({"query": "x", "weights": [-1.0, 1.0]}),
        ),
        ("search_code", json!({"query": "x", "weights": [0.0, 0.0]})),
    ];

    let mut ids: Vec<String> = Vec::new();
    let mut session = Vec::new();
    for (name, args) in script {
        let mut a = args.clone();
        substitute(&mut a, &ids);
        let r = call(&c, name, &a).await;
        if name == "add_memories" {
            if let Some(new) = r["answer"]["ids"].as_array() {
                ids.extend(new.iter().map(|x| x.as_str().unwrap().to_string()));
            }
        }
        // Record the arguments as written in the script (with "$memN"), the result normalised.
        let args = if a.to_string().len() > 400 {
            json!("<long arguments>")
        } else {
            args
        };
        session.push(json!({ "tool": name, "args": args, "result": norm.value(&r) }));
    }
    check_golden("session.json", &Value::Array(session));
    c.cancel().await.expect("close the session");
}

/// Removes every `description` key (schema documentation) from a JSON schema.
fn strip_descriptions(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("description");
            m.values_mut().for_each(strip_descriptions);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_descriptions),
        _ => {}
    }
}

/// Replaces "$memN" strings by the N-th id returned so far.
fn substitute(v: &mut Value, ids: &[String]) {
    match v {
        Value::String(s) => {
            if let Some(n) = s.strip_prefix("$mem").and_then(|n| n.parse::<usize>().ok()) {
                *s = ids
                    .get(n - 1)
                    .cloned()
                    .unwrap_or_else(|| panic!("no memory ${n} yet"));
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| substitute(x, ids)),
        Value::Object(m) => m.values_mut().for_each(|x| substitute(x, ids)),
        _ => {}
    }
}
