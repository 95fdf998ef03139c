//! A file after reading and chunking: what every phase of a build after the parse holds of
//! it (a leaf of `build`, so its phases in other files need not import `build.rs`).

use super::shed::Shed;
use crate::chunk::{self, FileExtract};
use crate::graph;
use crate::walk::Candidate;

/// A file after reading and chunking.
pub(super) struct Parsed {
    pub(super) cand: Candidate,
    pub(super) hash: [u8; 32],
    pub(super) extract: FileExtract,
    /// What graph resolution reads of its chunks' declarations, taken before their text is
    /// dropped.
    pub(super) decls: graph::Declarations,
    /// Its calls (`extract.calls` is left empty) until the graph is resolved.
    pub(super) calls: chunk::PackedCalls,
    /// Estimated bytes the file holds while its segment is built (`Budget::file_cost`).
    pub(super) cost: u64,
    /// Its chunk texts were dropped after parsing (`shed_texts`); they are read again when
    /// its segment is written.
    pub(super) shed: Option<Shed>,
}
