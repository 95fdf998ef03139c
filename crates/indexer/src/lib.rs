//! The indexer library: walk repositories, cut files into chunks with tree-sitter, resolve the
//! code graph, embed chunks and write immutable segments through the `format` crate.
//!
//! Entry points: [`build::build`] (the `indexer build` command), [`merge::merge`] (`indexer
//! merge`, and the merges after a build), [`inspect::inspect`] and [`inspect::verify`]. The binary in `main.rs` is a thin clap layer over these.

pub mod alloc;
pub mod build;
pub mod chunk;
pub mod graph;
pub mod inspect;
pub mod memories;
pub mod merge;
pub mod progress;
pub mod rebuild;
pub mod walk;

use std::path::PathBuf;

/// Errors of the indexer library. One bad file never becomes an error here: it is counted in
/// the build report and the build carries on.
#[derive(Debug, thiserror::Error)]
pub enum IndexerError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0} does not exist; pass existing files or directories to index")]
    MissingRoot(PathBuf),
    /// Not a source (so not named `source`): the text includes the cause once; `{:#}` chains
    /// would repeat it.
    #[error(
        "the existing index at {path} cannot be used: {cause}\n{}",
        existing_hint(path, cause)
    )]
    ExistingIndex {
        path: PathBuf,
        cause: format::FormatError,
    },
    /// `--rebuild` refused to go on (it would have lost memories); nothing was changed.
    #[error("{0}")]
    RebuildRefused(String),
    #[error(
        "the index at {path} was built with model `{index_model}`, this build uses `{model}`; \
         pass --rebuild to re-embed everything with the new model"
    )]
    ModelChanged {
        path: PathBuf,
        index_model: String,
        model: String,
    },
    /// Not `#[from]`/`#[source]`: the text already includes the cause, and error chains
    /// printed with `{:#}` would repeat it.
    #[error("embedding failed: {0}")]
    Embed(crate::build::EmbedError),
    #[error(
        "the index at {0} changed while this build ran (another `indexer build`?); nothing was \
         committed, run the build again"
    )]
    ConcurrentBuild(PathBuf),
    #[error(
        "{path} changed while this build ran (its text was read again to write its segment under \
         --memory-budget and no longer matches what was parsed); nothing was committed, run the \
         build again"
    )]
    ChangedDuringBuild { path: PathBuf },
    #[error(
        "--memory-budget {budget} bytes is below the minimum of {min} bytes (1 MiB); pass a \
         larger budget such as 1GiB"
    )]
    BudgetTooSmall { budget: u64, min: u64 },
    #[error("memory dump {path}: {message}; nothing was written")]
    Dump { path: PathBuf, message: String },
    #[error(transparent)]
    Format(format::FormatError),
}

/// The repair for an index that cannot be opened, and where to see every problem.
fn existing_hint(path: &std::path::Path, e: &format::FormatError) -> String {
    let verify = format!("`indexer verify {}` lists every problem", path.display());
    match format::repair_hint(e) {
        h if h.is_empty() => format!("hint: {verify}"),
        h => format!("{h}; {verify}"),
    }
}

impl From<crate::build::EmbedError> for IndexerError {
    fn from(e: crate::build::EmbedError) -> Self {
        IndexerError::Embed(e)
    }
}
