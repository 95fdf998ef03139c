//! Memory sessions and time through the tools: `session` and `time` on `add_memories`,
//! `as_of` and relative dates on `search_memory`, session context, the fusion's explanation.

use crate::common::{call, err_text, start};
use serde_json::json;

#[test]
fn sessions_times_and_relative_dates() {
    let ix = crate::common::indexed_fixture();
    let c = start(&ix.index, None);
    let add = |text: &str, session: &str, time: &str| {
        let v = call(
            &c,
            "add_memories",
            json!({"memories": [{"text": text, "session": session, "time": time, "scope": "user"}]}),
        )
        .unwrap();
        v["ids"][0].as_str().unwrap().to_string()
    };
    let may = add(
        "we tried the new ramen place downtown, the broth was amazing",
        "chat-1",
        "2025-05-14",
    );
    let _may_next = add(
        "yes, Tuesday works for the follow-up visit",
        "chat-1",
        "2025-05-14T10:05:00Z",
    );
    let june = add(
        "we tried the new ramen place by the station, the broth was too salty",
        "chat-2",
        "2025-06-20",
    );
    // Stored: the session as a tag, the time as created_at.
    let m = call(&c, "get_memory", json!({"id": may})).unwrap();
    let rec = &m["memory"];
    assert!(
        rec["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == "session=chat-1"),
        "{rec}"
    );
    assert!(
        rec["created_at"]
            .as_str()
            .unwrap()
            .starts_with("2025-05-14"),
        "{rec}"
    );

    // "last May", asked in March 2026: the May memory is boosted above the June one.
    let q = json!({"query": "which ramen place did we try last May?", "as_of": "2026-03-01",
                   "half_life_days": 0, "debug": true});
    let v = call(&c, "search_memory", q).unwrap();
    let ids: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.first().copied(), Some(may.as_str()), "{v}");
    assert!(ids.contains(&june.as_str()), "a boost, not a filter: {v}");
    let window = v["debug"]["time_window"].as_str().unwrap_or_default();
    assert!(
        window.contains("last may") && window.contains("2025-05-01"),
        "{v}"
    );
    let fusion = v["debug"]["fusion"].as_str().unwrap_or_default();
    assert!(fusion.contains("vector share"), "{v}");

    // Session context on request: the turn that only says "Tuesday works" rises with the
    // ramen turn of its session.
    let plain = call(
        &c,
        "search_memory",
        json!({"query": "ramen place downtown", "as_of": "2026-03-01", "half_life_days": 0}),
    )
    .unwrap();
    let with = call(
        &c,
        "search_memory",
        json!({"query": "ramen place downtown", "as_of": "2026-03-01", "half_life_days": 0,
               "session_context": true}),
    )
    .unwrap();
    let score_of = |v: &serde_json::Value, id: &str| {
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .and_then(|r| r["score"].as_f64())
    };
    let a = score_of(&plain, &_may_next).expect("every memory is a candidate");
    let b = score_of(&with, &_may_next).expect("every memory is a candidate");
    assert!(b > a, "session context lifts a session-mate: {a} → {b}");
    assert_eq!(with["results"][0]["id"], may.as_str(), "{with}");

    // Without a date in the question nothing is boosted.
    let v = call(
        &c,
        "search_memory",
        json!({"query": "ramen broth", "as_of": "2026-03-01", "debug": true}),
    )
    .unwrap();
    assert!(v["debug"]["time_window"].is_null(), "{v}");

    // Lexical search finds other forms of a question's words ("hiking" → "hike"), and its
    // question words ("how", "did") find nothing by themselves.
    let hike = add(
        "I went on a long hike near the lake",
        "chat-4",
        "2025-07-02",
    );
    let v = call(
        &c,
        "search_memory",
        json!({"query": "how did the hiking go?", "mode": "lexical", "as_of": "2026-03-01"}),
    )
    .unwrap();
    assert_eq!(v["results"][0]["id"], hike.as_str(), "{v}");
    assert_eq!(v["results"].as_array().unwrap().len(), 1, "{v}");

    // A planned event may lie in the future.
    let planned = add("dentist appointment for the crown", "chat-3", "2030-01-15");
    let m = call(&c, "get_memory", json!({"id": planned})).unwrap();
    assert!(m["memory"]["created_at"]
        .as_str()
        .unwrap()
        .starts_with("2030-01-15"));

    // Bad input changes nothing and says what to fix.
    let e = call(
        &c,
        "add_memories",
        json!({"memories": [{"text": "x", "time": "last tuesday"}]}),
    )
    .unwrap_err();
    assert!(err_text(e).contains("`time`"));
    let e = call(
        &c,
        "add_memories",
        json!({"memories": [{"text": "x", "session": "  "}]}),
    )
    .unwrap_err();
    assert!(err_text(e).contains("`session`"));
    let e = call(
        &c,
        "search_memory",
        json!({"query": "ramen", "as_of": "soon"}),
    )
    .unwrap_err();
    assert!(err_text(e).contains("`as_of`"));
}
