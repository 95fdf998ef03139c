//! The `queryd` command: `queryd --index DIR` serves MCP over stdio (what MCP clients launch)
//! or, with `--http ADDR`, over streamable HTTP; `queryd search` is a one-shot hybrid query for
//! people and scripts; `queryd export` dumps memories, `queryd repair-wal` salvages a damaged
//! memory log. Logs go to stderr; on stdio, stdout carries only MCP messages.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};
use code::search::{Mode, SearchOptions};

#[derive(Parser)]
#[command(
    name = "queryd",
    version,
    about = "Query code search indexes built by `indexer build`"
)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    serve: ServeArgs,
}

/// Without a subcommand: serve MCP.
#[derive(clap::Args)]
struct ServeArgs {
    /// Index directory written by `indexer build --out` (serve MCP on stdio, or HTTP with --http).
    #[arg(long)]
    index: Option<PathBuf>,
    /// Model directory (default: $CIX_MODEL_DIR, else ./models/all-MiniLM-L6-v2).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Where queries and memories are embedded: cpu | auto | wgpu | cuda. auto picks a GPU when
    /// this binary was built with `--features wgpu` or `cuda` and one works, else the CPU; the
    /// choice is printed at start-up. f32 on every device. The CPU is the default: one query at
    /// a time was not faster on an H200 than on its host's CPU (README, "GPU builds").
    #[arg(long, default_value = "cpu")]
    device: kernels::DeviceChoice,
    /// Serve streamable HTTP on this address (`PORT` or `IP:PORT`; loopback unless
    /// --allow-remote) instead of stdio.
    #[arg(long, value_name = "ADDR")]
    http: Option<String>,
    /// Also accept this Host header on HTTP (`name` or `name:port`); repeatable.
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_host: Vec<String>,
    /// Also accept this Origin on HTTP (`scheme://host:port`); repeatable.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origin: Vec<String>,
    /// Allow binding HTTP to a non-loopback address (requires --token-file).
    #[arg(long)]
    allow_remote: bool,
    /// HTTP bearer token file (mode 0600, at least 16 characters): every request but /health
    /// must send `Authorization: Bearer <token>`. Required with --allow-remote.
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Largest accepted HTTP request body in bytes.
    #[arg(long, default_value_t = queryd::http::DEFAULT_MAX_BODY_BYTES)]
    max_body_bytes: usize,
    /// Most MCP sessions open at once over HTTP; an `initialize` beyond it gets 503 with
    /// Retry-After (no open session is evicted).
    #[arg(long, default_value_t = queryd::http::DEFAULT_MAX_SESSIONS, value_parser = at_least_one)]
    max_sessions: usize,
    /// Close an HTTP MCP session after this many seconds without traffic.
    #[arg(long, value_name = "SECS", default_value_t = queryd::http::DEFAULT_SESSION_IDLE_SECS, value_parser = secs)]
    session_idle_secs: f64,
    /// Close an HTTP connection whose request headers take longer than this (seconds).
    #[arg(long, value_name = "SECS", default_value_t = queryd::http::DEFAULT_HEADER_TIMEOUT_SECS, value_parser = secs)]
    header_timeout_secs: f64,
    /// Answer 408 when a request body takes longer than this to arrive (seconds).
    #[arg(long, value_name = "SECS", default_value_t = queryd::http::DEFAULT_BODY_TIMEOUT_SECS, value_parser = secs)]
    body_timeout_secs: f64,
    /// Most tool calls running at once (stdio and HTTP); a call beyond it is answered at once
    /// with a retryable "server busy" error (HTTP: 503 with Retry-After).
    #[arg(long, default_value_t = queryd::mcp::DEFAULT_MAX_CALLS, value_parser = at_least_one)]
    max_inflight_calls: usize,
    /// Longest accepted stdio message (one line) in bytes; longer ones are discarded and
    /// answered with an error.
    #[arg(long, default_value_t = queryd::stdio::DEFAULT_MAX_LINE_BYTES)]
    max_line_bytes: usize,
    /// Do not watch MANIFEST for new index generations.
    #[arg(long)]
    no_watch: bool,
    /// Follow an index pushed with `indexer push` (README "Share an index"): pull the newest
    /// generation of SRC into --index before serving (creating it), then poll SRC's `latest`
    /// pointer every --follow-every (a conditional GET) and pull in the background; each
    /// pulled generation is served like a local rebuild. Local memories are kept.
    #[arg(long, value_name = "SRC", conflicts_with = "no_watch")]
    follow: Option<String>,
    /// How often --follow polls, e.g. 30s, 5m.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = humantime::parse_duration)]
    follow_every: std::time::Duration,
    /// Flush live memory writes into a segment when this many are pending.
    #[arg(long, default_value_t = memory::DEFAULT_FLUSH_AT)]
    memory_flush_at: usize,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write every memory of an index (including writes still in its log) as JSONL, sorted by
    /// id: the dump format `indexer build --memories` reads.
    Export {
        /// Index directory.
        #[arg(long)]
        index: PathBuf,
        /// Output file (default: standard output).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Salvage a damaged memory log (a bad record followed by valid ones): keeps the original
    /// aside as memory.wal.corrupt-<ms>, writes a new log with every readable record, and
    /// reports what was kept and lost. Refuses while a queryd holds the log.
    RepairWal {
        /// Index directory.
        #[arg(value_name = "INDEX", required_unless_present = "index_flag")]
        index: Option<PathBuf>,
        /// Index directory (the same as INDEX).
        #[arg(long = "index", value_name = "DIR", conflicts_with = "index")]
        index_flag: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write the memories still only in the log (memory.wal) into a memory segment and empty
    /// the log, as a server does every --memory-flush-at writes and at shutdown. Refuses while
    /// a queryd holds the log (stopping it flushes).
    Flush {
        /// Index directory.
        #[arg(long)]
        index: PathBuf,
        /// Model directory (default: $CIX_MODEL_DIR, else ./models/all-MiniLM-L6-v2).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run one query and print ranked results.
    Search(SearchArgs),
    /// Re-check memories' code references and record which are stale (a git post-commit hook
    /// runs this with the files the commit changed; see scripts/git-post-commit).
    Staleness {
        /// Index directory.
        #[arg(long)]
        index: PathBuf,
        /// Model directory (default: $CIX_MODEL_DIR, else ./models/all-MiniLM-L6-v2).
        #[arg(long)]
        model: Option<PathBuf>,
        /// Only memories referencing these files (repo-relative or absolute); default: all.
        #[arg(long, num_args = 1..)]
        changed_files: Vec<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct SearchArgs {
    /// Index directory written by `indexer build --out`.
    #[arg(long)]
    index: PathBuf,
    /// The query: words, a sentence or an identifier.
    query: String,
    /// Model directory (default: $CIX_MODEL_DIR, else ./models/all-MiniLM-L6-v2).
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, default_value_t = 5, value_parser = at_least_one)]
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
    /// Only paths under this directory or file (`src/`), or matching this glob (`*.py`,
    /// `src/**/*.rs`); relative to the repository root, or absolute inside an indexed root.
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
    /// Where the query is embedded: cpu | auto | wgpu | cuda (as for the server).
    #[arg(long, default_value = "cpu")]
    device: kernels::DeviceChoice,
}

/// A count of at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(v) if v >= 1 => Ok(v),
        _ => Err(format!("`{s}` is not a whole number of at least 1")),
    }
}

/// A positive number of seconds (fractions allowed), at most a day.
fn secs(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 86_400.0 => Ok(v),
        _ => Err(format!(
            "`{s}` is not a number of seconds between 0 and 86400"
        )),
    }
}

fn main() -> ExitCode {
    // Before the index is opened: OpenBLAS's startup threads would spin beside it.
    format::vectors::single_threaded_blas();
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let Some(cmd) = cli.cmd else {
        return serve(cli.serve);
    };
    match cmd {
        Cmd::Export { index, out } => export(&index, out.as_deref()),
        Cmd::RepairWal {
            index,
            index_flag,
            json,
        } => repair_wal(&index.or(index_flag).expect("clap requires one"), json),
        Cmd::Flush { index, model, json } => flush_cmd(&index, model, json),
        Cmd::Search(a) => search_cmd(a),
        Cmd::Staleness {
            index,
            model,
            changed_files,
            json,
        } => staleness_cmd(&index, model, changed_files, json),
    }
}

fn flush_cmd(index: &Path, model: Option<PathBuf>, json: bool) -> anyhow::Result<()> {
    let model = kernels::resolve_model_dir(model);
    let e = engine::Engine::open(index, &model)
        .with_context(|| format!("opening {}", index.display()))?;
    if let Some(why) = e.memory_writes_disabled() {
        anyhow::bail!("cannot flush the memory log: {why}");
    }
    let r = e
        .flush_memories()
        .map_err(|err| anyhow::anyhow!("flush failed (the log keeps the writes): {err}"))?;
    if json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        match r {
            Some(r) => match &r.segment {
                Some(seg) => eprintln!(
                    "queryd: flushed {} memories into segment {seg} ({} merged from older segments, {} older copies tombstoned; generation {})",
                    r.memories, r.merged, r.tombstoned, r.generation
                ),
                None => eprintln!(
                    "queryd: flushed the log's deletions ({} copies tombstoned; generation {})",
                    r.tombstoned, r.generation
                ),
            },
            None => eprintln!("queryd: nothing to flush: every memory write is in a segment"),
        }
    }
    Ok(())
}

fn staleness_cmd(
    index: &Path,
    model: Option<PathBuf>,
    changed: Vec<String>,
    json: bool,
) -> anyhow::Result<()> {
    let model = kernels::resolve_model_dir(model);
    let e = engine::Engine::open(index, &model)
        .with_context(|| format!("opening {}", index.display()))?;
    if let Some(why) = e.memory_writes_disabled() {
        anyhow::bail!(
            "cannot record staleness: {why}. A running queryd checks references when memories \
             are read; ask it to record them with its check_staleness tool"
        );
    }
    let args = engine::tools::code_links::CheckStalenessArgs {
        ids: None,
        changed_files: (!changed.is_empty()).then_some(changed),
        debug: false,
    };
    let r = e
        .check_staleness(&args)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Err(err) = e.flush_memories() {
        eprintln!("queryd: flush after the check failed (the log keeps the writes): {err}");
    }
    if json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        eprintln!(
            "queryd: {} memories, {} code references checked: {} fresh, {} relocated, {} stale, {} unverified; {} memories updated",
            r.memories, r.checked, r.fresh, r.relocated, r.stale, r.unverified, r.updated
        );
    }
    if !r.errors.is_empty() {
        anyhow::bail!("{}", r.errors.join("; "));
    }
    Ok(())
}

fn export(index: &Path, out: Option<&Path>) -> anyhow::Result<()> {
    let ex = memory::store::export(index).map_err(|e| {
        let text = match &e {
            memory::store::ExportError::Format(f) => format::with_repair_hint(f),
            e => e.to_string(),
        };
        anyhow::anyhow!("exporting memories from {}: {text}", index.display())
    })?;
    let mems = &ex.memories;
    let mut buf = Vec::new();
    for m in mems {
        serde_json::to_writer(&mut buf, m)?;
        buf.push(b'\n');
    }
    match out {
        // Durably, whole or not at all: the repair hints say to export, then move the
        // memory log away, and a power cut between the two must not leave a cut export.
        Some(p) => format::fsio::write_durably(p, &buf)
            .with_context(|| format!("writing {}", p.display()))?,
        None => {
            use std::io::Write;
            std::io::stdout().write_all(&buf)?;
        }
    }
    if let Some(d) = ex.damage {
        anyhow::bail!(
            "the export is INCOMPLETE: it holds {} memories, but {} records of the memory log could not be read ({} damaged, {} of the batch the damage broke, {} valid ones after it, LSN {}-{}): {}",
            mems.len(),
            d.records_not_served(),
            d.damaged_records()
                .map_or("at least 1".to_string(), |n| n.to_string()),
            d.unreplayed_before,
            d.records_after,
            d.first_lsn_after,
            d.last_lsn_after,
            d.message(index)
        );
    }
    eprintln!("queryd: exported {} memories", mems.len());
    Ok(())
}

fn repair_wal(index: &Path, json: bool) -> anyhow::Result<()> {
    let r = memory::wal::repair(index).map_err(|e| {
        anyhow::anyhow!(
            "repairing the memory log of {}: {e}{}",
            index.display(),
            if matches!(e, memory::wal::WalError::Busy { .. }) {
                "; stop that server first"
            } else {
                ""
            }
        )
    })?;
    if json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!("{r}");
    }
    Ok(())
}

fn search_cmd(a: SearchArgs) -> anyhow::Result<()> {
    let SearchArgs {
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
        device,
    } = a;
    if query.trim().is_empty() {
        anyhow::bail!("the query is empty; pass some words or an identifier");
    }
    // The model loads on another thread while the index opens and its IVF maps open (the
    // longest steps of a one-shot search, so they overlap); errors keep their order: the
    // index's first.
    let t = Instant::now();
    let dir = kernels::resolve_model_dir(model);
    let (ix, loaded, open) = std::thread::scope(|s| {
        let loading = (mode != Mode::Lexical).then(|| {
            s.spawn(|| kernels::Encoder::load_with(&dir, device, kernels::Precision::F32))
        });
        let ix = format::Index::open_lenient(&index);
        let open = t.elapsed();
        if let Ok(ix) = &ix {
            if loading.is_some() {
                ix.open_vector_maps();
            }
        }
        let loaded = loading.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
        (ix, loaded, open)
    });
    let ix = ix.with_context(|| format!("opening the index at {}", index.display()))?;
    for d in &ix.damaged {
        eprintln!(
            "queryd: warning: code segment {} is damaged and left out of these results: {}",
            d.id, d.error
        );
    }
    let mut embed_time = std::time::Duration::ZERO;
    let qv = match loaded {
        None => None,
        Some(enc) => {
            let enc = enc.with_context(|| format!("loading the model from {}", dir.display()))?;
            if debug {
                eprintln!("encoder: {}", enc.device_description());
            }
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
        }
    };
    format::vectors::set_faiss_threads(1);
    // An absolute `--path` inside an indexed root is taken relative to it (as `search_code`
    // does), limited to its repository.
    let (path, repo) = match path.as_deref().map(str::trim).filter(|p| !p.is_empty()) {
        Some(p) => engine::tools::search::root_relative(&ix.manifest.roots, p, &None)
            .map_err(|e| anyhow::anyhow!("{e}"))?,
        None => (None, None),
    };
    let opts = SearchOptions {
        limit,
        mode,
        // As `search_code` takes them: `--lang Rust` is `rust`.
        language: engine::tools::search::filter_value(lang.as_deref(), true),
        kind: engine::tools::search::filter_value(kind.as_deref(), true),
        repo,
        path_glob: path.as_deref().map(code::search::path_glob).transpose()?,
        ..Default::default()
    };
    let (hits, tm) = code::search(&ix, &query, qv.as_deref(), &opts)?;
    if hits.is_empty() {
        if let Some(why) = engine::tools::search::unmatched_filter(&ix, &opts) {
            anyhow::bail!("{why}");
        }
    }
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

fn parse_addr(s: &str, allow_remote: bool) -> anyhow::Result<std::net::SocketAddr> {
    let addr: std::net::SocketAddr = match s.parse::<u16>() {
        Ok(port) => (std::net::Ipv4Addr::LOCALHOST, port).into(),
        Err(_) => s.parse().with_context(|| {
            format!("--http {s}: expected PORT or IP:PORT, e.g. 127.0.0.1:8765")
        })?,
    };
    if !addr.ip().is_loopback() && !allow_remote {
        anyhow::bail!(
            "--http {s} is not a loopback address; pass --allow-remote with --token-file PATH \
             (and --allow-host NAME for the names clients use) if you mean it"
        );
    }
    Ok(addr)
}

fn describe_pull(src: &str, r: &sync::PullReport) -> String {
    if r.up_to_date {
        format!("up to date with generation {} of {src}", r.generation)
    } else {
        let replaced: String = r
            .segments_replaced
            .iter()
            .map(|(aside, why)| {
                format!(
                    "; a damaged local copy ({why}) was downloaded again, the damaged one kept as {}",
                    aside.display()
                )
            })
            .collect();
        format!(
            "pulled generation {} of {src} (local generation {}): {} segment(s), {} bytes downloaded, {} already present{replaced}",
            r.generation, r.local_generation, r.segments_downloaded, r.bytes_downloaded, r.segments_present
        )
    }
}

fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let Some(index) = a.index else {
        anyhow::bail!(
            "pass --index DIR to serve an index over MCP (build one with `indexer build REPO --out DIR`), \
             or use `queryd search --index DIR \"query\"`; see --help"
        );
    };
    let addr = a
        .http
        .as_deref()
        .map(|s| parse_addr(s, a.allow_remote))
        .transpose()?;
    if a.allow_remote && a.token_file.is_none() {
        anyhow::bail!(
            "--allow-remote needs --token-file PATH: remote clients must authenticate with \
             `Authorization: Bearer <token>` (create one with `openssl rand -hex 32 > PATH && \
             chmod 600 PATH`)"
        );
    }
    if a.token_file.is_some() && addr.is_none() {
        anyhow::bail!("--token-file applies to --http only (stdio needs no authentication)");
    }
    let token = a
        .token_file
        .as_deref()
        .map(queryd::http::Token::from_file)
        .transpose()?;
    let mut follower = match &a.follow {
        Some(src) => {
            let remote = sync::Remote::open(src)?;
            let mut f = sync::Follower::new(remote, index.clone(), sync::PullOptions::default());
            match f.poll() {
                Ok(Some(r)) => eprintln!("queryd: {}", describe_pull(src, &r)),
                Ok(None) if index.join(format::manifest::MANIFEST).is_file() => {
                    eprintln!(
                        "queryd: {src} holds no index yet; serving the local one and following it"
                    )
                }
                Ok(None) => anyhow::bail!(
                    "--follow {src}: nothing has been pushed there yet and {} holds no index; \
                     push one first (`indexer push {src} --index DIR`)",
                    index.display()
                ),
                // A remote that cannot be reached does not stop a server with a local index.
                Err(e) if index.join(format::manifest::MANIFEST).is_file() => {
                    eprintln!("queryd: pulling {src} failed, serving the local index: {e}")
                }
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("pulling {src} into {}", index.display()))
                }
            }
            Some(f)
        }
        None => None,
    };
    let model = kernels::resolve_model_dir(a.model);
    let t = Instant::now();
    let engine = std::sync::Arc::new(
        engine::Engine::open_on(&index, &model, a.device)
            .with_context(|| format!("starting the server for {}", index.display()))?,
    );
    let snap = engine.snapshot();
    eprintln!(
        "queryd: index {} generation {} ({} live chunks, {} segments), model {} on {}, ready in {:.2?}",
        index.display(),
        snap.generation(),
        snap.code.index.live_chunks(),
        snap.code.index.segments.len(),
        engine.encoder().model_id(),
        engine.encoder().device_description(),
        t.elapsed()
    );
    if !snap.code.index.damaged.is_empty() {
        eprintln!(
            "queryd: serving DEGRADED: {} damaged code segment(s) left out (see index_status)",
            snap.code.index.damaged.len()
        );
    }
    drop(snap);
    if !a.no_watch {
        engine.spawn_watcher(engine::WATCH_INTERVAL);
    }
    if let (Some(mut f), Some(src)) = (follower.take(), a.follow.clone()) {
        let every = a.follow_every;
        std::thread::Builder::new()
            .name("queryd-follow".into())
            .spawn(move || loop {
                std::thread::sleep(every);
                match f.poll() {
                    Ok(Some(r)) if !r.up_to_date => {
                        eprintln!("queryd: {}", describe_pull(&src, &r))
                    }
                    Ok(_) => {}
                    Err(e) => eprintln!("queryd: following {src}: {e} (retrying in {every:?})"),
                }
            })
            .context("starting the follow thread")?;
    }
    if engine.memory_access() == memory::store::LogAccess::HeldElsewhere {
        // Another queryd writes the memories: follow its log (and its flushes).
        engine.spawn_log_tailer(engine::WATCH_INTERVAL);
    }
    engine.set_flush_at(a.memory_flush_at);
    engine.spawn_flusher();
    // Checksums every served segment once in the background, and again when its files change.
    engine.spawn_verifier(engine::integrity::VERIFY_INTERVAL);
    let server = queryd::mcp::Server::with_max_calls(
        engine.clone(),
        std::sync::Arc::new(queryd::metrics::Metrics::new()),
        a.max_inflight_calls,
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let served = rt.block_on(async move {
        match addr {
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("binding {addr}"))?;
                let bound = listener.local_addr()?;
                let mut cfg = queryd::http::HttpConfig::for_addr(bound, &a.allow_host, &a.allow_origin);
                cfg.max_body_bytes = a.max_body_bytes;
                cfg.max_sessions = a.max_sessions;
                cfg.session_idle = std::time::Duration::from_secs_f64(a.session_idle_secs);
                cfg.header_timeout = std::time::Duration::from_secs_f64(a.header_timeout_secs);
                cfg.body_timeout = std::time::Duration::from_secs_f64(a.body_timeout_secs);
                cfg.token = token;
                eprintln!("queryd: serving MCP on http://{bound}/mcp (also /health, /health/ready, /metrics, /status)");
                tokio::select! {
                    r = queryd::http::serve(listener, server, cfg) => r?,
                    _ = tokio::signal::ctrl_c() => eprintln!("queryd: interrupted, shutting down"),
                }
                Ok(())
            }
            None => {
                let (input, output) = rmcp::transport::stdio();
                tokio::select! {
                    r = queryd::stdio::serve(server, input, output, a.max_line_bytes) => r?,
                    _ = tokio::signal::ctrl_c() => eprintln!("queryd: interrupted, shutting down"),
                }
                Ok(())
            }
        }
    });
    // A read of stdin still pending cannot be cancelled; do not wait for it.
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    // Clean shutdown: pending memory writes go into a segment (they are safe in the log
    // either way).
    match engine.flush_memories() {
        Ok(Some(r)) => eprintln!("queryd: flushed {} memories on shutdown", r.memories),
        Ok(None) => {}
        Err(e) => eprintln!("queryd: flush on shutdown failed (the log keeps the writes): {e}"),
    }
    served
}
