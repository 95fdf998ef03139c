//! The `queryd` command. Today: `queryd search`, a one-shot hybrid query for people and
//! scripts. The MCP server (stdio and HTTP) builds on the same library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};
use queryd::{Mode, SearchOptions};

#[derive(Parser)]
#[command(
    name = "queryd",
    version,
    about = "Query code search indexes built by `indexer build`"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run one query and print ranked results.
    Search {
        /// Index directory written by `indexer build --out`.
        #[arg(long)]
        index: PathBuf,
        /// The query: words, a sentence or an identifier.
        query: String,
        /// Model directory (default: $CIX_MODEL_DIR, else ./models/all-MiniLM-L6-v2).
        #[arg(long)]
        model: Option<PathBuf>,
        #[arg(long, default_value_t = 5)]
        limit: usize,
        /// hybrid | vector | lexical
        #[arg(long, default_value = "hybrid")]
        mode: Mode,
        /// Only this language (rust, python, typescript, tsx, javascript, go, java, c, cpp, markdown, …).
        #[arg(long)]
        lang: Option<String>,
        /// Only this chunk kind (function, method, struct, class, …).
        #[arg(long)]
        kind: Option<String>,
        /// Only paths starting with this prefix.
        #[arg(long)]
        path: Option<String>,
        /// Lines of each result's text to print.
        #[arg(long, default_value_t = 6)]
        lines: usize,
        /// Print results as JSON.
        #[arg(long)]
        json: bool,
        /// Print a per-phase timing breakdown on stderr.
        #[arg(long)]
        debug: bool,
    },
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<()> {
    let Cmd::Search {
        index,
        query,
        model,
        limit,
        mode,
        lang,
        kind,
        path,
        lines,
        json,
        debug,
    } = Cli::parse().cmd;
    if query.trim().is_empty() {
        anyhow::bail!("the query is empty; pass some words or an identifier");
    }
    let t = Instant::now();
    let ix = format::Index::open(&index)
        .with_context(|| format!("opening the index at {}", index.display()))?;
    let open = t.elapsed();
    let mut embed_time = std::time::Duration::ZERO;
    let qv = if mode == Mode::Lexical {
        None
    } else {
        let dir = model
            .or_else(|| std::env::var_os("CIX_MODEL_DIR").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("models/all-MiniLM-L6-v2"));
        let enc = kernels::Encoder::load(&dir, kernels::DeviceChoice::Cpu)
            .with_context(|| format!("loading the model from {}", dir.display()))?;
        if enc.model_id() != ix.manifest.model_id {
            anyhow::bail!(
                "the index was built with model `{}` but {} holds `{}`; pass the same --model",
                ix.manifest.model_id,
                dir.display(),
                enc.model_id()
            );
        }
        let t = Instant::now();
        let (v, _) = enc.embed(&[query.as_str()])?;
        embed_time = t.elapsed();
        Some(v)
    };
    format::vectors::set_faiss_threads(1);
    let opts = SearchOptions {
        limit,
        mode,
        language: lang,
        kind,
        path_prefix: path,
        ..Default::default()
    };
    let (hits, tm) = queryd::search(&ix, &query, qv.as_deref(), &opts)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&hits)?);
    } else if hits.is_empty() {
        println!(
            "no results for {query:?} in {} ({} live chunks)",
            index.display(),
            ix.live_chunks()
        );
    } else {
        for (i, h) in hits.iter().enumerate() {
            let sym = if h.name.is_empty() {
                String::new()
            } else {
                format!(" {}", h.name)
            };
            println!(
                "{}. {}:{}-{} [{}{}] score {:.4} (vector #{}, lexical #{})",
                i + 1,
                h.path,
                h.start_line,
                h.end_line,
                h.kind,
                sym,
                h.score,
                h.vector_rank.map_or("-".into(), |r| r.to_string()),
                h.lexical_rank.map_or("-".into(), |r| r.to_string()),
            );
            for l in h.text.lines().take(lines) {
                println!("    {l}");
            }
        }
    }
    if debug {
        eprintln!(
            "debug: open {open:.2?}, embed {embed_time:.2?}, filter {:.2?}, vector {:.2?}, bm25 {:.2?}, fusion {:.2?}",
            tm.filter, tm.vector, tm.bm25, tm.fusion
        );
    }
    Ok(())
}
