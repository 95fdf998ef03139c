//! The `indexer` command: `build`, `merge`, `inspect`, `verify`, `push`, `pull`, `gc-remote`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};
use indexer::build::{self, BuildOptions, BuildReport};
use indexer::progress::Progress;
use kernels::{DeviceChoice, Precision};

#[derive(Parser)]
#[command(
    name = "indexer",
    version,
    about = "Build, inspect and verify code search indexes"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Index repositories (or single files) into an index directory; incremental over an
    /// existing index.
    Build {
        /// Directories or files to index.
        #[arg(required_unless_present = "memories")]
        paths: Vec<PathBuf>,
        /// A memory dump (JSONL, the format `queryd export` writes) to ingest into the index.
        #[arg(long, value_name = "FILE.jsonl")]
        memories: Option<PathBuf>,
        /// Index directory (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Model directory (config.json, model.safetensors, tokenizer.json). Default:
        /// $CIX_MODEL_DIR, else ./models/all-MiniLM-L6-v2.
        #[arg(long)]
        model: Option<PathBuf>,
        /// Where to run the encoder.
        #[arg(long, default_value = "auto")]
        device: DeviceChoice,
        /// Float precision on a GPU: auto (f16 when the device supports it and it passes the
        /// parity check against f32), f32, f16, bf16. The CPU always computes in f32.
        #[arg(long, default_value = "auto")]
        precision: Precision,
        /// Repository name recorded in chunk records and symbol ids (default: directory name).
        #[arg(long)]
        repo: Option<String>,
        /// Skip files larger than this many bytes.
        #[arg(long, default_value_t = indexer::walk::DEFAULT_MAX_FILE_BYTES)]
        max_file_bytes: u64,
        /// Also follow symlinks that lead outside the indexed directories (by default such
        /// links are skipped and counted as `outside root`: the index never reads outside its
        /// roots unless asked).
        #[arg(long)]
        follow_external_symlinks: bool,
        /// Also index what `.gitignore` / `.ignore` files and git's excludes leave out (a
        /// virtualenv, vendored code, build output). Recorded in MANIFEST, so server-side
        /// re-indexing of the root walks it the same way.
        #[arg(long)]
        no_ignore: bool,
        /// Also index hidden files and directories (names starting with `.`); `.git` stays
        /// out. Recorded like --no-ignore.
        #[arg(long)]
        hidden: bool,
        /// Memory the build may hold besides the model and the tree-wide graph facts (chunk
        /// records, symbol names and ids, calls, imports): parsed text beyond a quarter of it
        /// is read again when written, and the changed files are cut into several segments so that each stays
        /// under half of it while it is embedded and written (with a GPU encoder one segment is
        /// written while the next is embedded: two such halves). At least 1MiB.
        #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = build::parse_budget)]
        memory_budget: u64,
        /// Write the segments' texts and raw vectors around the page cache (O_DIRECT, where
        /// the filesystem takes it), for a build whose output is uploaded (CI) or larger than
        /// memory: the build spends less time copying into the cache, and a server that opens
        /// the index right after reads those files from disk (slower first queries).
        #[arg(long)]
        direct_io: bool,
        /// Texts per embedding call (default: 256 on the CPU, 4096 on a GPU). The encoder sorts
        /// by length and batches within a call and, on a GPU, reads each call's vectors back
        /// before the next call's batches run; larger groups mean fewer waits and less padding,
        /// at the cost of progress granularity.
        #[arg(long, value_name = "N",
              value_parser = clap::value_parser!(u32).range(1..=65_536))]
        embed_group: Option<u32>,
        /// Build the code from scratch: the code segments of --out are dropped and re-indexed;
        /// memories (memory segments, memory.wal) are kept. Also repairs an index whose MANIFEST
        /// is damaged (moved aside as MANIFEST.bak-<time>; the memories are recovered from their
        /// segments).
        #[arg(long)]
        rebuild: bool,
        /// No progress output; the summary is still printed.
        #[arg(long, short)]
        quiet: bool,
        /// Print the summary as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Merge code segments (tiered policy: crowded size tiers, segments mostly deleted, and
    /// down to --max-segments), copying records and vectors without re-embedding.
    Merge {
        dir: PathBuf,
        /// A merge holds at most half of this in memory.
        #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = build::parse_budget)]
        memory_budget: u64,
        /// Merge the smallest segments until at most this many code segments are left (as far
        /// as the budget allows: if it does not, the command says what budget would and exits
        /// with 1).
        #[arg(long)]
        max_segments: Option<usize>,
        #[arg(long, short)]
        quiet: bool,
    },
    /// Show what an index holds: counts per language, kind and edge type, sizes.
    Inspect {
        dir: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Check every file of an index against its checksums and structure; exits 1 on any problem.
    Verify { dir: PathBuf },
    /// Upload the index's segments that DEST lacks and commit a new generation there (see
    /// README "Share an index"). DEST: s3://bucket/prefix (AWS_* variables, incl.
    /// AWS_ENDPOINT_URL, AWS_ALLOW_HTTP), gs://bucket/prefix, az://container/prefix,
    /// file:///path.
    Push {
        dest: String,
        /// The index directory.
        #[arg(long, default_value = "index")]
        index: PathBuf,
        /// Also push memory segments (never the memory write-ahead log).
        #[arg(long)]
        with_memories: bool,
        /// Uploads in flight at once.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        #[arg(long)]
        json: bool,
    },
    /// Fetch the newest generation of SRC into an index directory: only missing segments,
    /// every file verified (size, blake3, structure) before MANIFEST is swapped; local memories
    /// are kept. SRC: as for push, or http(s)://host/prefix.
    Pull {
        src: String,
        /// The index directory (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Downloads in flight at once.
        #[arg(long, default_value_t = 8)]
        concurrency: usize,
        /// Install SRC's newest generation even if it is older than the one the last pull
        /// from SRC installed (a store rolled back on purpose); refused by default.
        #[arg(long)]
        allow_older: bool,
        #[arg(long)]
        json: bool,
    },
    /// Remove from DEST the manifests beyond the newest --keep and the segments and tombstone
    /// files no kept manifest names, once older than --grace (seals first).
    GcRemote {
        dest: String,
        /// Generations kept (at least 1).
        #[arg(long, default_value_t = 3)]
        keep: usize,
        /// Unnamed objects younger than this stay (pushes in progress upload segments before
        /// their manifest): e.g. 30m, 1h, 2days.
        #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
        grace: std::time::Duration,
        /// Report what would be removed; remove nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
}

#[global_allocator]
static GLOBAL: indexer::alloc::MiMalloc = indexer::alloc::MiMalloc;

fn main() -> ExitCode {
    indexer::alloc::set_up_process();
    match run() {
        Ok(code) => code,
        Err(e) => {
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Build {
            paths,
            memories,
            out,
            model,
            device,
            precision,
            repo,
            max_file_bytes,
            follow_external_symlinks,
            no_ignore,
            hidden,
            memory_budget,
            direct_io,
            embed_group,
            rebuild,
            quiet,
            json,
        } => {
            let progress = Progress::auto(quiet);
            let model = kernels::resolve_model_dir(model);
            let t = Instant::now();
            let encoder = kernels::Encoder::load_with(&model, device, precision)
                .with_context(|| format!("loading the model from {}", model.display()))?;
            progress.line(&format!(
                "model {} ({}-d) on {} loaded in {:.2?}",
                encoder.model_id(),
                encoder.dim(),
                encoder.device_description(),
                t.elapsed()
            ));
            if let (true, Some(dump)) = (rebuild, &memories) {
                // The dump is checked before the rebuild commits anything: a refusal after
                // it would leave an index without its code.
                indexer::memories::precheck_dump(
                    dump,
                    &out,
                    encoder.model_id(),
                    encoder.dim(),
                    true,
                )?;
            }
            if rebuild {
                let r = indexer::rebuild::prepare_rebuild(
                    &out,
                    encoder.model_id(),
                    encoder.dim() as u32,
                )?;
                eprintln!("{r}");
            }
            // With --rebuild the index holds no code until the build below: an ingest
            // refused now (a write to one of its ids logged during the embedding) must not
            // leave it so. The build runs, then the refusal is returned.
            let mut refused = None;
            let ingested = match &memories {
                Some(dump) => match indexer::memories::ingest(dump, &out, &encoder) {
                    Ok(r) => Some((dump, r)),
                    Err(e) if rebuild && !paths.is_empty() => {
                        eprintln!("error: {e}\nthe code is rebuilt all the same");
                        refused = Some(e);
                        None
                    }
                    Err(e) => return Err(e.into()),
                },
                None => None,
            };
            if let Some((dump, r)) = ingested {
                let line = format!(
                    "memories: {} read from {}, {} replaced, embedded in {:.2}s ({} tokens), SIMILAR edges in {:.2}s; generation {}",
                    r.read,
                    dump.display(),
                    r.replaced,
                    r.embed_secs,
                    r.tokens,
                    r.similar_secs,
                    r.generation
                );
                if json && paths.is_empty() {
                    println!(
                        "{}",
                        serde_json::json!({"memories_read": r.read, "memories_replaced": r.replaced,
                            "segment": r.segment_id, "generation": r.generation})
                    );
                } else {
                    eprintln!("{line}");
                }
                if paths.is_empty() {
                    return Ok(ExitCode::SUCCESS);
                }
            }
            let mut opts = BuildOptions::new(paths, out.clone());
            opts.repo = repo;
            opts.max_file_bytes = max_file_bytes;
            if follow_external_symlinks {
                opts.symlinks = indexer::walk::Symlinks::FollowExternal;
            }
            opts.rules = indexer::walk::Rules { no_ignore, hidden };
            opts.memory_budget = memory_budget;
            if direct_io {
                opts.bulk_cache = format::fsio::PageCache::Bypass;
            }
            opts.embed_group = embed_group.map(|g| g as usize);
            // From scratch: every file is parsed (the facts cache is written, not read).
            opts.reuse_facts = !rebuild;
            let t = Instant::now();
            let report = build::build(&opts, &encoder, &progress)?;
            let total = t.elapsed();
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report_json(&report, total))?
                );
            } else {
                print_summary(&report, &out, total);
            }
            if let Some(e) = refused {
                return Err(e.into());
            }
            Ok(if report.errors.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Cmd::Merge {
            dir,
            memory_budget,
            max_segments,
            quiet,
        } => {
            let policy = indexer::merge::MergePolicy {
                budget: memory_budget,
                max_segments,
                deletes: true,
            };
            let r = indexer::merge::merge(&dir, &policy, &Progress::auto(quiet))?;
            for m in &r.merges {
                println!(
                    "merged ({}) {} segments into {}: {} chunks, {} tombstoned chunks dropped",
                    m.why,
                    m.from.len(),
                    m.into
                        .as_deref()
                        .map_or("nothing".to_string(), |id| format!("seg-{id}")),
                    m.chunks,
                    m.dropped_chunks
                );
            }
            println!(
                "{}: {} code segments before, {} after, generation {} ({:.2?})",
                dir.display(),
                r.segments_before,
                r.segments_after,
                r.generation,
                r.elapsed
            );
            if let Some(h) = &r.held_back {
                eprintln!("not merged: {}", h.describe(&policy));
                // A --max-segments asked for and not reached is a failure; a merge the policy
                // would like is advice.
                if h.why == "max-segments" {
                    return Ok(ExitCode::from(1));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Inspect { dir, json } => {
            let r = indexer::inspect::inspect(&dir)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!("{r}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Push {
            dest,
            index,
            with_memories,
            concurrency,
            json,
        } => run_push(&dest, &index, with_memories, concurrency, json),
        Cmd::Pull {
            src,
            out,
            concurrency,
            allow_older,
            json,
        } => run_pull(&src, &out, concurrency, allow_older, json),
        Cmd::GcRemote {
            dest,
            keep,
            grace,
            dry_run,
            json,
        } => run_gc_remote(
            &dest,
            &sync::GcOptions {
                keep,
                grace,
                dry_run,
            },
            json,
        ),
        Cmd::Verify { dir } => {
            let problems = indexer::inspect::verify(&dir);
            if problems.is_empty() {
                println!("ok: {} verified", dir.display());
                Ok(ExitCode::SUCCESS)
            } else {
                for p in &problems {
                    println!("problem: {p}");
                }
                println!("{} problem(s) found in {}", problems.len(), dir.display());
                Ok(ExitCode::from(1))
            }
        }
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

fn requests_json(r: [u64; 7]) -> serde_json::Value {
    serde_json::json!({
        "get": r[0], "head": r[1], "put": r[2], "delete": r[3], "list": r[4],
        "bytes_up": r[5], "bytes_down": r[6],
    })
}

fn run_push(
    dest: &str,
    index: &Path,
    with_memories: bool,
    concurrency: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let remote = sync::Remote::open(dest)?;
    let opts = sync::PushOptions {
        with_memories,
        concurrency,
        ..sync::PushOptions::default()
    };
    let r = sync::push(index, &remote, &opts)
        .with_context(|| format!("pushing {} to {dest}", index.display()))?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "generation": r.generation, "committed": r.committed,
                "segments_uploaded": r.segments_uploaded, "segments_reused": r.segments_reused,
                "files_uploaded": r.files_uploaded, "bytes_uploaded": r.bytes_uploaded,
                "requests": requests_json(r.requests), "seconds": r.seconds,
            })
        );
    } else if r.committed {
        println!(
            "pushed generation {} to {dest}: {} segment(s) uploaded ({} files, {:.1} MiB), {} already there, {:.2} s",
            r.generation, r.segments_uploaded, r.files_uploaded, mib(r.bytes_uploaded), r.segments_reused, r.seconds
        );
    } else {
        println!(
            "{dest} already holds this index as generation {}; nothing uploaded ({:.2} s)",
            r.generation, r.seconds
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn run_pull(
    src: &str,
    out: &Path,
    concurrency: usize,
    allow_older: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let remote = sync::Remote::open(src)?;
    let opts = sync::PullOptions {
        concurrency,
        allow_older,
        ..sync::PullOptions::default()
    };
    let r = sync::pull(&remote, out, &opts)
        .with_context(|| format!("pulling {src} into {}", out.display()))?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "generation": r.generation, "local_generation": r.local_generation,
                "up_to_date": r.up_to_date, "segments_downloaded": r.segments_downloaded,
                "segments_present": r.segments_present, "files_downloaded": r.files_downloaded,
                "files_resumed": r.files_resumed, "bytes_downloaded": r.bytes_downloaded,
                "memory_segments_added": r.memory_segments_added,
                "memories_deleted_here": r.memories_deleted_here,
                "memories_refused": r.memories_refused,
                "memories_refused_why": r.memories_refused_why,
                "segments_replaced": r.segments_replaced.iter().map(|(aside, why)| serde_json::json!({
                    "kept_aside": aside.display().to_string(), "why": why,
                })).collect::<Vec<_>>(),
                "requests": requests_json(r.requests), "seconds": r.seconds,
            })
        );
    } else if r.up_to_date {
        println!(
            "{} is up to date with generation {} of {src} ({:.2} s)",
            out.display(),
            r.generation,
            r.seconds
        );
    } else {
        println!(
            "pulled generation {} of {src} into {} (local generation {}): {} segment(s) downloaded ({} files, {:.1} MiB{}), {} already present, {:.2} s",
            r.generation,
            out.display(),
            r.local_generation,
            r.segments_downloaded,
            r.files_downloaded,
            mib(r.bytes_downloaded),
            if r.files_resumed > 0 { format!(", {} resumed", r.files_resumed) } else { String::new() },
            r.segments_present,
            r.seconds
        );
    }
    if !json {
        if r.memories_refused > 0 {
            eprintln!(
                "warning: pull: {} memories of the pulled memory segments were left out: a memory \
                 tool would refuse to store them (first: {})",
                r.memories_refused,
                r.memories_refused_why.as_deref().unwrap_or("?")
            );
        }
        if r.memories_deleted_here > 0 {
            eprintln!(
                "pull: {} memories of the pulled memory segments were deleted here after their \
                 last update: left out",
                r.memories_deleted_here
            );
        }
        for (aside, why) in &r.segments_replaced {
            eprintln!(
                "pull: the local copy of a segment was damaged ({why}): downloaded again, the \
                 damaged copy kept as {}",
                aside.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn run_gc_remote(dest: &str, opts: &sync::GcOptions, json: bool) -> anyhow::Result<ExitCode> {
    let remote = sync::Remote::open(dest)?;
    let r = sync::gc_remote(&remote, opts).with_context(|| format!("collecting {dest}"))?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "dry_run": opts.dry_run, "kept_generations": r.kept_generations,
                "manifests_removed": r.manifests_removed, "segments_removed": r.segments_removed,
                "tombstones_removed": r.tombstones_removed, "objects_removed": r.objects_removed,
                "bytes_removed": r.bytes_removed, "segments_too_young": r.segments_too_young,
            })
        );
    } else {
        println!(
            "{}{dest}: kept generations {:?}; {} manifest(s), {} segment(s), {} tombstone file(s) removed ({} objects, {:.1} MiB); {} unnamed segment(s) younger than the grace period left",
            if opts.dry_run { "dry run, nothing removed: " } else { "" },
            r.kept_generations,
            r.manifests_removed,
            r.segments_removed,
            r.tombstones_removed,
            r.objects_removed,
            mib(r.bytes_removed),
            r.segments_too_young
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn report_json(r: &BuildReport, total: std::time::Duration) -> serde_json::Value {
    serde_json::json!({
        "files_seen": r.files_seen,
        "files_indexed": r.files_indexed,
        "files_changed": r.files_changed,
        "files_unchanged": r.files_unchanged,
        "files_deleted": r.files_deleted,
        "files_relinked": r.files_relinked,
        "files_cached": r.files_cached,
        "facts_written": r.facts_written,
        "source_bytes": r.source_bytes,
        "skipped": r.skipped,
        "errors": r.errors,
        "warnings": r.warnings,
        "outside_root": r.outside_root,
        "parse_error_files": r.parse_error_files,
        "chunks_written": r.chunks_written,
        "chunks_embedded": r.chunks_embedded,
        "chunks_reused": r.chunks_reused,
        "tokens_embedded": r.tokens_embedded,
        "chunks_tombstoned": r.chunks_tombstoned,
        "edges": r.edges,
        "segment_id": r.segment_id,
        "segment_ids": r.segment_ids,
        "files_reread": r.files_reread,
        "files_rechunked": r.files_rechunked,
        "spilled_bytes": r.spilled_bytes,
        "calls_held": r.calls_held,
        "calls_held_bytes": r.calls_held_bytes,
        "generation": r.generation,
        "live_chunks": r.live_chunks,
        "seconds": r.phase_times().iter().map(|(k, d)| (k.to_string(), d.as_secs_f64())).collect::<std::collections::BTreeMap<_, _>>(),
        "total_seconds": total.as_secs_f64(),
    })
}

fn print_summary(r: &BuildReport, out: &Path, total: std::time::Duration) {
    println!(
        "indexed {} files ({} changed, {} unchanged, {} deleted), {:.1} MB of source",
        r.files_indexed,
        r.files_changed,
        r.files_unchanged,
        r.files_deleted,
        r.source_bytes as f64 / 1e6
    );
    if r.files_cached > 0 {
        println!(
            "{} files not parsed: their chunks, calls and imports came from the facts cache \
             (same bytes as when last parsed)",
            r.files_cached
        );
    }
    if r.files_relinked > 0 {
        println!(
            "{} unchanged files written again: their calls or imports resolve differently now \
             (vectors reused)",
            r.files_relinked
        );
    }
    if !r.skipped.is_empty() {
        let parts: Vec<String> = r.skipped.iter().map(|(k, v)| format!("{v} {k}")).collect();
        println!("skipped: {}", parts.join(", "));
    }
    if r.parse_error_files > 0 {
        println!(
            "{} files had syntax errors (chunked best-effort)",
            r.parse_error_files
        );
    }
    println!(
        "chunks: {} written, {} embedded ({} tokens), {} vectors reused; {} tombstoned",
        r.chunks_written,
        r.chunks_embedded,
        r.tokens_embedded,
        r.chunks_reused,
        r.chunks_tombstoned
    );
    let edges: Vec<String> = r.edges.iter().map(|(k, v)| format!("{v} {k}")).collect();
    if !edges.is_empty() {
        println!("edges: {}", edges.join(", "));
    }
    let phases: Vec<String> = r
        .phase_times()
        .iter()
        .map(|(k, d)| format!("{k} {:.2?}", d))
        .collect();
    println!("time: {:.2?} total ({})", total, phases.join(", "));
    if r.files_reread > 0 {
        println!(
            "memory budget: {} files read again when written ({} of them chunked again; {:.1} MB \
             of their texts spilled to disk)",
            r.files_reread,
            r.files_rechunked,
            r.spilled_bytes as f64 / 1e6
        );
    }
    match &r.segment_id {
        Some(_) if r.segment_ids.len() > 1 => println!(
            "wrote {} segments (seg-{} .. seg-{}, cut by --memory-budget); {} at generation {} \
             holds {} live chunks",
            r.segment_ids.len(),
            r.segment_ids[0],
            r.segment_ids[r.segment_ids.len() - 1],
            out.display(),
            r.generation,
            r.live_chunks
        ),
        Some(id) => println!(
            "wrote segment seg-{id}; {} at generation {} holds {} live chunks",
            out.display(),
            r.generation,
            r.live_chunks
        ),
        None => println!(
            "{} is up to date (generation {}, {} live chunks)",
            out.display(),
            r.generation,
            r.live_chunks
        ),
    }
    for w in &r.warnings {
        eprintln!("warning: skipped {w}");
    }
    for n in &r.notes {
        eprintln!("note: {n}");
    }
    for w in &r.outside_root {
        eprintln!("warning: outside root, skipped {w}");
    }
    for e in &r.errors {
        eprintln!("error: {e}");
    }
}
