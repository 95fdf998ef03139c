//! CI-sized crash test at scale: 20 rounds of the `benches/src/bin/crash.rs` harness (start
//! the real `queryd`, stream memory writes, SIGKILL at a random moment, restart, check every
//! acknowledged memory is present exactly once). `CIX_CRASH_ROUNDS` changes the count.

#[path = "../../../benches/src/crash_harness.rs"]
mod crash_harness;

mod common;

#[test]
fn acknowledged_memories_survive_sigkill_rounds() {
    let ix = common::indexed_fixture();
    let rounds = std::env::var("CIX_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let cfg = crash_harness::Config {
        queryd: env!("CARGO_BIN_EXE_queryd").into(),
        index: ix.index.clone(),
        model: common::model_dir(),
        rounds,
        seed: 0x9E37_79B9_7F4A_7C15,
        max_kill_ms: 600,
        flush_at: 7,
        verbose: false,
    };
    let st = crash_harness::run(&cfg);
    eprintln!("{}", crash_harness::summary(&st));
    assert!(st.violations.is_empty(), "{:#?}", st.violations);
    assert_eq!(st.rounds, rounds);
    assert!(
        st.calls_acked > rounds,
        "too few writes acknowledged: {st:?}"
    );
    assert!(st.acked_checked > 0);
}
