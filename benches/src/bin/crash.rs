//! Crash test at scale: R rounds of start `queryd` → write memories → SIGKILL at a random
//! moment → restart → check every acknowledged memory is present exactly once (see
//! `benches/src/crash_harness.rs`). Prints rounds, acknowledged writes checked, violations;
//! exits non-zero on a violation.
//!
//! Run: `cargo build --release -p cix-queryd -p cix-benches --bin crash &&
//! nice target/release/crash --rounds 1000` (default index: a fresh build of the polyglot
//! fixture in a temporary directory; `--index DIR` to use another, which it writes into).

#[path = "../crash_harness.rs"]
mod crash_harness;

use std::path::PathBuf;

use clap::Parser;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 100)]
    rounds: usize,
    /// Index to write into (default: a fresh index of tests/fixtures/polyglot).
    #[arg(long)]
    index: Option<PathBuf>,
    /// Model directory (default: $CIX_MODEL_DIR, else ./models/all-MiniLM-L6-v2).
    #[arg(long)]
    model: Option<PathBuf>,
    /// The queryd binary (default: beside this one).
    #[arg(long)]
    queryd: Option<PathBuf>,
    #[arg(long, default_value_t = 0x2545_F491_4F6C_DD1D)]
    seed: u64,
    /// Kill 0..this many milliseconds after the writes start.
    #[arg(long, default_value_t = 800)]
    max_kill_ms: u64,
    #[arg(long, default_value_t = 7)]
    flush_at: usize,
    #[arg(long)]
    verbose: bool,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let model = a.model.unwrap_or_else(|| {
        std::env::var_os("CIX_MODEL_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("models/all-MiniLM-L6-v2"))
    });
    let queryd = match a.queryd {
        Some(q) => q,
        None => std::env::current_exe()?
            .parent()
            .map(|d| d.join("queryd"))
            .ok_or_else(|| anyhow::anyhow!("no directory beside this binary"))?,
    };
    anyhow::ensure!(
        queryd.exists(),
        "{} does not exist: build it (cargo build --release -p cix-queryd) or pass --queryd",
        queryd.display()
    );
    let tmp = tempfile::tempdir()?;
    let index = match a.index {
        Some(i) => i,
        None => {
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
            let repo = root.join("tests/fixtures/polyglot");
            let out = tmp.path().join("index");
            let enc = kernels::Encoder::load(&model, kernels::DeviceChoice::Cpu)?;
            let opts = indexer::build::BuildOptions::new(vec![repo], out.clone());
            indexer::build::build(&opts, &enc, &indexer::progress::Progress::silent())?;
            out
        }
    };
    let cfg = crash_harness::Config {
        queryd,
        index,
        model,
        rounds: a.rounds,
        seed: a.seed,
        max_kill_ms: a.max_kill_ms,
        flush_at: a.flush_at,
        verbose: a.verbose,
    };
    let st = crash_harness::run(&cfg);
    println!("{}", crash_harness::summary(&st));
    for v in st.violations.iter().take(50) {
        println!("  {v}");
    }
    anyhow::ensure!(
        st.violations.is_empty(),
        "{} violations",
        st.violations.len()
    );
    Ok(())
}
