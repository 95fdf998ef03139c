//! The archived record types of a segment (rkyv) and the plain inputs the writer takes.
//!
//! `chunks.rkyv` holds one [`ChunkTable`]: the files of the segment (sorted by path) and their
//! chunks (grouped by file, in file order). Chunk ordinals are the segment-local ids used by the
//! postings, the graph and the vectors. Graph node ids are chunk ordinals first, then
//! `chunk_count + file ordinal` for file nodes.

use rkyv::{Archive, Deserialize, Serialize};

/// Marker for "no parent chunk".
pub const NO_PARENT: u32 = u32::MAX;

/// One indexed file.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct FileRecord {
    pub repo: String,
    /// Repository-relative path with `/` separators.
    pub path: String,
    pub language: String,
    /// blake3 of the file's bytes.
    pub content_hash: [u8; 32],
    pub size: u64,
    pub first_chunk: u32,
    pub chunk_count: u32,
    /// Imports of the file as written (resolved ones also appear as IMPORTS edges).
    pub imports: Vec<String>,
}

/// One chunk: a symbol, a piece of a long body, a top-level window or a text window.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ChunkRecord {
    pub file: u32,
    pub kind: String,
    pub name: String,
    pub qualified: String,
    /// SCIP-like id, empty for chunks that are not symbols.
    pub symbol_id: String,
    pub start_line: u32,
    pub end_line: u32,
    pub start_byte: u32,
    pub end_byte: u32,
    /// Chunk ordinal of the enclosing symbol, or [`NO_PARENT`].
    pub parent: u32,
    /// blake3 of exactly the text that was embedded; the key for reusing vectors.
    pub content_hash: [u8; 32],
    pub text: String,
}

/// The root of `chunks.rkyv`.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct ChunkTable {
    pub files: Vec<FileRecord>,
    pub chunks: Vec<ChunkRecord>,
}

/// A file as the writer takes it.
pub type FileInput = FileRecord;
/// A chunk as the writer takes it.
pub type ChunkInput = ChunkRecord;

/// The edge types of the code graph. The discriminant is the index into the graph's CSR list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EdgeKind {
    Contains = 0,
    Imports = 1,
    Calls = 2,
}

impl EdgeKind {
    pub const ALL: [EdgeKind; 3] = [EdgeKind::Contains, EdgeKind::Imports, EdgeKind::Calls];

    pub fn name(self) -> &'static str {
        match self {
            EdgeKind::Contains => "contains",
            EdgeKind::Imports => "imports",
            EdgeKind::Calls => "calls",
        }
    }

    pub fn from_name(s: &str) -> Option<EdgeKind> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// Edge flag bit: the target was resolved through the file's own symbols or its imports (set),
/// or inferred from a globally unique name (clear).
pub const EDGE_RESOLVED: u8 = 1;

/// An edge between two nodes of the same segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct EdgeInput {
    pub kind: EdgeKind,
    pub src: u32,
    pub dst: u32,
    pub resolved: bool,
}

/// An edge from a node of this segment to a symbol (or file path) that lives in another
/// segment (incremental builds); resolved by symbol id at read time.
#[derive(Archive, Serialize, Deserialize, Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ExternalEdge {
    pub kind: u8,
    pub src: u32,
    /// A symbol id, or `file:<path>` for a file node.
    pub dst: String,
    pub flags: u8,
}
