//! Crash rounds against the real `queryd` binary (shared by `benches/src/bin/crash.rs` and
//! the CI test `crates/queryd/tests/crash_rounds.rs`, which include this file with `#[path]`).
//!
//! Each round: start `queryd` on the index (MCP over stdio through `mcp_stdio.rs`: JSON-RPC
//! spoken by hand: no client library), check what the previous rounds left (`queryd export`,
//! after the server recovered its log), then stream `add_memories` calls (1-3 memories each,
//! now and then a `delete_memories` of an acknowledged one) and SIGKILL the server at a random
//! moment. A write is acknowledged when its response arrived. The check: every acknowledged
//! memory is present exactly once with its text, every acknowledged delete stays deleted, and
//! anything else present is a whole unacknowledged call that was in flight.
//! Only `std` and `serde_json`.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub struct Config {
    pub queryd: PathBuf,
    pub index: PathBuf,
    pub model: PathBuf,
    pub rounds: usize,
    pub seed: u64,
    /// The kill comes 0..max_kill_ms after the writes start.
    pub max_kill_ms: u64,
    /// `--memory-flush-at` (small, so kills land during and around flushes).
    pub flush_at: usize,
    /// Print a line per round.
    pub verbose: bool,
}

#[derive(Debug, Default)]
pub struct Stats {
    pub rounds: usize,
    /// Calls sent / acknowledged.
    pub calls_sent: usize,
    pub calls_acked: usize,
    /// Acknowledged memories checked, summed over the checks.
    pub acked_checked: usize,
    /// Unacknowledged calls whose records survived whole.
    pub unacked_survived: usize,
    pub violations: Vec<String>,
    pub seconds: f64,
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

#[path = "mcp_stdio.rs"]
mod mcp_stdio;
use mcp_stdio::StdioClient as Server;

/// A queryd on the harness's index, MCP handshake done.
fn start(c: &Config) -> Result<Server, String> {
    Server::start(
        Command::new(&c.queryd)
            .arg("--index")
            .arg(&c.index)
            .arg("--model")
            .arg(&c.model)
            .arg("--no-watch")
            .arg("--memory-flush-at")
            .arg(c.flush_at.to_string()),
        "crash-harness",
    )
}

/// Every memory of the index, by id → texts (more than one when exported twice).
fn export(c: &Config) -> Result<BTreeMap<String, Vec<String>>, String> {
    let o = Command::new(&c.queryd)
        .arg("export")
        .arg("--index")
        .arg(&c.index)
        .output()
        .map_err(|e| format!("spawn export: {e}"))?;
    if !o.status.success() {
        return Err(format!(
            "export failed: {}",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    let mut m: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("export line: {e}"))?;
        m.entry(v["id"].as_str().unwrap_or("").to_string())
            .or_default()
            .push(v["text"].as_str().unwrap_or("").to_string());
    }
    Ok(m)
}

#[derive(Default)]
struct Book {
    acked: BTreeMap<String, String>,
    deleted: BTreeSet<String>,
    /// Texts of unacknowledged calls: text → call key.
    maybe: BTreeMap<String, String>,
    maybe_deleted: BTreeSet<String>,
    call_len: BTreeMap<String, usize>,
}

/// Checks the index against the book; adopts whole unacknowledged calls that survived.
fn check(c: &Config, b: &mut Book, round: usize, st: &mut Stats) {
    let present = match export(c) {
        Ok(p) => p,
        Err(e) => {
            st.violations.push(format!("round {round}: {e}"));
            return;
        }
    };
    let mut v = Vec::new();
    for (id, texts) in &present {
        if texts.len() > 1 {
            v.push(format!("{id} present {} times", texts.len()));
        }
    }
    st.acked_checked += b.acked.len();
    for (id, text) in &b.acked {
        match present.get(id) {
            Some(t) if t[0] == *text => {}
            Some(t) => v.push(format!("acknowledged {id}: text {:?}, not {text:?}", t[0])),
            None if b.maybe_deleted.contains(id) => {}
            None => v.push(format!("acknowledged {id} ({text}) lost")),
        }
    }
    for id in &b.deleted {
        if present.contains_key(id) {
            v.push(format!("deleted {id} came back"));
        }
    }
    let mut parts: BTreeMap<String, usize> = BTreeMap::new();
    for (id, t) in &present {
        if b.acked.contains_key(id) {
            continue;
        }
        match b.maybe.get(&t[0]) {
            Some(call) => *parts.entry(call.clone()).or_default() += 1,
            None => v.push(format!("unknown memory {id} ({})", t[0])),
        }
    }
    for (call, n) in parts {
        if b.call_len.get(&call) != Some(&n) {
            v.push(format!("{call} is half there ({n} records)"));
        } else {
            st.unacked_survived += 1;
        }
    }
    for (id, t) in &present {
        b.acked.entry(id.clone()).or_insert_with(|| t[0].clone());
    }
    b.acked.retain(|id, _| present.contains_key(id));
    b.maybe.clear();
    b.maybe_deleted.clear();
    for x in v {
        st.violations.push(format!("round {round}: {x}"));
    }
}

/// Runs the rounds (plus a final restart and check).
pub fn run(c: &Config) -> Stats {
    let t = Instant::now();
    let mut st = Stats::default();
    let mut b = Book::default();
    let mut rng = Rng(c.seed | 1);
    for round in 0..=c.rounds {
        let mut s = match start(c) {
            Ok(s) => s,
            Err(e) => {
                st.violations.push(format!("round {round}: start: {e}"));
                return st;
            }
        };
        check(c, &mut b, round, &mut st);
        if round == c.rounds {
            s.kill();
            break;
        }
        let pid = s.child.id();
        let delay = Duration::from_millis(rng.below(c.max_kill_ms + 1));
        let killer = std::thread::spawn(move || {
            std::thread::sleep(delay);
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        });
        let deadline = Instant::now() + delay + Duration::from_secs(30);
        let mut w = 0;
        while Instant::now() < deadline {
            let key = format!("r{round} w{w}");
            w += 1;
            st.calls_sent += 1;
            if w % 5 == 0 && !b.acked.is_empty() {
                let victim = b
                    .acked
                    .keys()
                    .nth(rng.below(b.acked.len() as u64) as usize)
                    .cloned()
                    .unwrap();
                match s.call("delete_memories", json!({"ids": [victim]})) {
                    Ok(_) => {
                        st.calls_acked += 1;
                        b.acked.remove(&victim);
                        b.deleted.insert(victim);
                    }
                    Err(_) => {
                        b.maybe_deleted.insert(victim);
                        break;
                    }
                }
                continue;
            }
            let n = 1 + rng.below(3) as usize;
            let texts: Vec<String> = (0..n)
                .map(|j| format!("crash {key} part {j} token{}", rng.below(1_000_000)))
                .collect();
            b.call_len.insert(key.clone(), n);
            let mems: Vec<Value> = texts.iter().map(|t| json!({"text": t})).collect();
            match s.call("add_memories", json!({"memories": mems})) {
                Ok(v) => {
                    st.calls_acked += 1;
                    let ids = v["ids"].as_array().cloned().unwrap_or_default();
                    if ids.len() != n {
                        st.violations
                            .push(format!("round {round}: {key}: {} ids for {n}", ids.len()));
                    }
                    for (id, t) in ids.iter().zip(texts) {
                        b.acked.insert(id.as_str().unwrap_or("").to_string(), t);
                    }
                }
                Err(_) => {
                    for t in texts {
                        b.maybe.insert(t, key.clone());
                    }
                    break;
                }
            }
        }
        let _ = killer.join();
        s.kill();
        st.rounds += 1;
        if c.verbose {
            eprintln!(
                "round {round}: killed after {} ms, {} calls; {} acknowledged memories so far, {} violations",
                delay.as_millis(),
                w,
                b.acked.len(),
                st.violations.len()
            );
        }
    }
    st.seconds = t.elapsed().as_secs_f64();
    st
}

/// The summary line.
pub fn summary(st: &Stats) -> String {
    format!(
        "crash rounds: {} rounds, {} calls sent, {} acknowledged, {} acknowledged memories checked, {} unacknowledged calls survived whole, {} violations, {:.1} s",
        st.rounds,
        st.calls_sent,
        st.calls_acked,
        st.acked_checked,
        st.unacked_survived,
        st.violations.len(),
        st.seconds
    )
}
