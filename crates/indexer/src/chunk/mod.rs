//! Source file → chunks, symbols and raw graph facts, with tree-sitter for code and line
//! windows for everything else. Pure functions: no I/O, no embedding, no cross-file resolution
//! (that is `crate::graph`).
//!
//! Layout: this file holds [`extract`] and re-exports; the shared types are in `types.rs`, the
//! [`Spec`] interface in `spec.rs` (both leaves, so the other files never import this one). The
//! language-independent chunking engine (symbol tree → chunks, long-body splitting, top-level
//! leftovers) and the call/import walk are in `builder.rs`, fed by `parse.rs` (grammar choice,
//! per-thread parsers) and `defs.rs` (the symbol tree a [`Spec`] finds); `packed.rs` packs a
//! file's calls for a build to hold until its graph is resolved, and `stored.rs` a file's
//! whole extract, texts aside, for a build's facts cache; `text.rs` cuts line windows;
//! `lines.rs` (line offsets and cuts) and `syntax.rs` (node text, name normalisation) are leaf
//! helpers. Each language family has a small [`Spec`] implementation in its own file
//! that says which tree-sitter nodes are symbols, imports and calls.
//!
//! Call filtering: Rust macros are not calls (they are `macro_invocation` nodes); a short list of
//! builtins per language (`print`/`len`/`isinstance`… in Python, `append`/`make`/`len`… and
//! conversions in Go, `Some`/`Ok`/`Err` in Rust, `require`/`super`/`import()` in JS/TS) is
//! dropped because such names would only ever resolve to unrelated user symbols.

mod builder;
mod c;
mod defs;
mod go;
pub mod header;
mod java;
mod js;
mod lines;
mod packed;
mod parse;
mod python;
mod rust;
mod spec;
pub(crate) mod stored;
mod syntax;
mod text;
mod types;

pub(crate) use lines::{floor_boundary, trim_end, LineIndex};
pub(crate) use packed::{put_str, put_varint, Reader};
pub use packed::{CallRef, PackedCalls, PackedIter};
pub(crate) use spec::{Class, Def, Spec};
pub(crate) use syntax::{
    base_type_name, compact, field_text, item_type, loop_item, named_kids, node_text, split_top,
};
pub use types::{
    Call, Chunk, ChunkKind, ChunkOptions, CompactString, FileExtract, Import, Language, SymbolTag,
    CALLBACK_PARAM, MODULE_ALIAS, RETURNED_BY,
};

/// Files larger than this are not parsed (line windows only).
const MAX_PARSE_BYTES: usize = 8 << 20;

/// Cuts one file into chunks and extracts its imports and calls. Never panics and never fails:
/// syntax errors give best-effort chunks plus `had_parse_errors`; the worst case is line windows.
pub fn extract(
    lang: Language,
    repo: &str,
    rel_path: &str,
    source: &str,
    opts: &ChunkOptions,
) -> FileExtract {
    let opts = opts.sane();
    if source.trim().is_empty() {
        return FileExtract::default();
    }
    if lang.is_code() && source.len() <= MAX_PARSE_BYTES {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            builder::extract_code(lang, repo, rel_path, source, &opts)
        }));
        if let Ok(Some(fx)) = run {
            return fx;
        }
        let mut fx = FileExtract {
            chunks: text::windows(Language::Text, source, &opts),
            had_parse_errors: true,
            ..FileExtract::default()
        };
        fx.chunks.sort_by_key(|c| c.start_byte);
        return fx;
    }
    FileExtract {
        chunks: text::windows(lang, source, &opts),
        ..FileExtract::default()
    }
}

/// Tree-sitter's parse of `source` alone, the tree dropped: what [`extract`] cannot go below
/// (the peer of `target/release/pipeline`'s chunking). `false` where `lang` has no grammar or
/// the file would not be parsed.
pub fn parse_only(lang: Language, source: &str) -> bool {
    lang.is_code() && source.len() <= MAX_PARSE_BYTES && parse::parse(lang, source).is_some()
}

#[cfg(test)]
mod tests;
