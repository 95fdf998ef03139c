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

/// An end of an edge: a file (index into the `files` slice) or a chunk of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeRef {
    File(usize),
    Chunk { file: usize, chunk: usize },
}

/// A resolved edge. `resolved` is false for calls matched only by a globally unique name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResolvedEdge {
    pub kind: EdgeKind,
    pub src: NodeRef,
    pub dst: NodeRef,
    pub resolved: bool,
}
