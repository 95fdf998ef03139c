//! The public types of the graph: edge kinds, the per-file input ([`FileFacts`]) and the
//! resolved edges between files and chunks.

use super::decl::Declarations;
use crate::chunk::{FileExtract, Language};

/// Kind of a graph edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EdgeKind {
    Contains,
    Imports,
    Calls,
}

impl EdgeKind {
    /// The kind as segments store it.
    pub fn record(self) -> format::records::EdgeKind {
        match self {
            EdgeKind::Contains => format::records::EdgeKind::Contains,
            EdgeKind::Imports => format::records::EdgeKind::Imports,
            EdgeKind::Calls => format::records::EdgeKind::Calls,
        }
    }

    /// `contains`, `imports`, `calls`.
    pub fn name(&self) -> &'static str {
        match self {
            EdgeKind::Contains => "contains",
            EdgeKind::Imports => "imports",
            EdgeKind::Calls => "calls",
        }
    }

    /// Inverse of [`EdgeKind::name`].
    pub fn from_name(s: &str) -> Option<EdgeKind> {
        match s {
            "contains" => Some(EdgeKind::Contains),
            "imports" => Some(EdgeKind::Imports),
            "calls" => Some(EdgeKind::Calls),
            _ => None,
        }
    }
}

/// One file of the build with its extracted facts.
#[derive(Debug, Clone, Copy)]
pub struct FileFacts<'a> {
    /// Repository-relative path with `/` separators.
    pub path: &'a str,
    pub language: Language,
    pub extract: &'a FileExtract,
    /// What its chunks' declarations state, read while their text was there
    /// ([`Declarations::of`]): resolution reads this, never a chunk's text.
    pub decls: &'a Declarations,
}

/// An end of an edge: a file (index into the `files` slice) or a chunk of a file. Indices
/// are `u32` (a build's whole tree of edges is held until its segments are written: 28 bytes
/// an edge instead of 56). A build of 2^32 files would need far more memory than their
/// facts' ~100 bytes each before it got here; the constructors check it in debug builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeRef {
    File(u32),
    Chunk { file: u32, chunk: u32 },
}

impl NodeRef {
    /// The file `file`.
    pub fn file(file: usize) -> NodeRef {
        debug_assert!(u32::try_from(file).is_ok());
        NodeRef::File(file as u32)
    }

    /// Chunk `chunk` of file `file`.
    pub fn chunk(file: usize, chunk: usize) -> NodeRef {
        debug_assert!(u32::try_from(file).is_ok() && u32::try_from(chunk).is_ok());
        NodeRef::Chunk {
            file: file as u32,
            chunk: chunk as u32,
        }
    }

    /// The file the node is or belongs to.
    pub fn file_index(self) -> usize {
        match self {
            NodeRef::File(f) | NodeRef::Chunk { file: f, .. } => f as usize,
        }
    }
}

/// A resolved edge. `resolved` is false for calls matched only by a globally unique name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResolvedEdge {
    pub kind: EdgeKind,
    pub src: NodeRef,
    pub dst: NodeRef,
    pub resolved: bool,
}
