//! Call-graph precision/recall against ground truth (scip-python / scip-typescript, see
//! `scripts/callgraph/make_truth.sh`, or labelled fixtures).
//!
//! Each case is a directory (extracted and resolved like a build does) and a truth JSON in the
//! shared format; scoring is `indexer::graph::eval::score`. Prints a markdown table per case and
//! one per language (micro-averaged over its cases).
//!
//! Run:
//! `cargo run --release -p cix-benches --bin callgraph -- --dir tests/fixtures/callgraph`
//! `... -- --case /work/callgraph-truth/ts-rxjs=/work/callgraph-truth/ts-rxjs/truth.json`
//! `... -- --dir /work/callgraph-truth --json out.json --examples`

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Parser;
use indexer::graph::eval::{markdown_table, score_with, Score, Truth, EXAMPLES};
use serde::Serialize;

#[derive(Parser)]
struct Args {
    /// A case as `ROOT=TRUTH.json` (repeatable).
    #[arg(long = "case")]
    cases: Vec<String>,
    /// Every `DIR/*/truth.json`, with that subdirectory as the root (repeatable).
    #[arg(long = "dir")]
    dirs: Vec<PathBuf>,
    /// A manifest: one `ROOT=TRUTH.json` per line, relative to the manifest's directory.
    #[arg(long)]
    manifest: Option<PathBuf>,
    /// Writes every score (with examples) as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Prints the false positive / negative examples of each case.
    #[arg(long)]
    examples: bool,
    /// How many false positives / negatives to keep per case.
    #[arg(long, default_value_t = EXAMPLES)]
    max_examples: usize,
}

#[derive(Serialize)]
struct CaseOut {
    name: String,
    root: PathBuf,
    truth: PathBuf,
    truth_source: String,
    score: Score,
}

#[derive(Serialize)]
struct Out {
    cases: Vec<CaseOut>,
    languages: Vec<Score>,
}

fn parse_case(spec: &str, base: &Path) -> Result<(PathBuf, PathBuf)> {
    let Some((root, truth)) = spec.split_once('=') else {
        bail!("case `{spec}`: expected ROOT=TRUTH.json");
    };
    Ok((base.join(root.trim()), base.join(truth.trim())))
}

fn main() -> Result<()> {
    let args = Args::parse();
    let mut cases: Vec<(PathBuf, PathBuf)> = Vec::new();
    for c in &args.cases {
        cases.push(parse_case(c, Path::new(""))?);
    }
    for d in &args.dirs {
        let mut found: Vec<PathBuf> = std::fs::read_dir(d)
            .with_context(|| format!("reading {}", d.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("truth.json").is_file())
            .collect();
        found.sort();
        cases.extend(found.into_iter().map(|p| (p.clone(), p.join("truth.json"))));
    }
    if let Some(m) = &args.manifest {
        let text =
            std::fs::read_to_string(m).with_context(|| format!("reading {}", m.display()))?;
        let base = m.parent().unwrap_or(Path::new(""));
        for line in text.lines().map(str::trim) {
            if !line.is_empty() && !line.starts_with('#') {
                cases.push(parse_case(line, base)?);
            }
        }
    }
    if cases.is_empty() {
        bail!("no cases: pass --case ROOT=TRUTH.json, --dir DIR or --manifest FILE");
    }

    let mut out = Out {
        cases: Vec::new(),
        languages: Vec::new(),
    };
    for (root, truth_path) in cases {
        let truth = Truth::load(&truth_path)?;
        let t = std::time::Instant::now();
        let s = score_with(&root, &truth, args.max_examples)
            .with_context(|| format!("scoring {}", root.display()))?;
        eprintln!(
            "{}: {} files, {} truth calls, {:.1}s",
            root.display(),
            s.files,
            s.truth_calls,
            t.elapsed().as_secs_f64()
        );
        let name = root
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| root.display().to_string());
        out.cases.push(CaseOut {
            name,
            root,
            truth: truth_path,
            truth_source: truth.source,
            score: s,
        });
    }
    let mut by_lang: BTreeMap<&str, Vec<&Score>> = BTreeMap::new();
    for c in &out.cases {
        by_lang.entry(&c.score.language).or_default().push(&c.score);
    }
    let languages: Vec<Score> = by_lang
        .iter()
        .map(|(l, v)| Score::aggregate(l, v))
        .collect();

    println!("### Per case\n");
    let rows: Vec<(&str, &Score)> = out
        .cases
        .iter()
        .map(|c| (c.name.as_str(), &c.score))
        .collect();
    println!("{}", markdown_table(&rows));
    for c in &out.cases {
        println!("- {}: {}", c.name, c.truth_source);
    }
    println!("\n### Per language (micro-average over its cases)\n");
    let rows: Vec<(&str, &Score)> = languages.iter().map(|s| ("all", s)).collect();
    println!("{}", markdown_table(&rows));

    if args.examples {
        for c in &out.cases {
            println!(
                "\n### {}: false positives (first {})\n",
                c.name,
                c.score.false_positives.len()
            );
            for e in &c.score.false_positives {
                println!("- {e}");
            }
            println!(
                "\n### {}: false negatives (first {})\n",
                c.name,
                c.score.false_negatives.len()
            );
            for e in &c.score.false_negatives {
                println!("- {e}");
            }
            println!(
                "\n### {}: unmapped truth calls (first {} of {})\n",
                c.name,
                c.score.unmapped_examples.len(),
                c.score.unmapped
            );
            for e in &c.score.unmapped_examples {
                println!("- {e}");
            }
        }
    }
    out.languages = languages;
    if let Some(p) = &args.json {
        let text = serde_json::to_string_pretty(&out)?;
        std::fs::write(p, text + "\n").with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}
