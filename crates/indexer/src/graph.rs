//! Cross-file resolution of the raw facts of [`crate::chunk::extract`] within one build:
//! CONTAINS (file → top symbols, type/module → members), IMPORTS (file → file) and CALLS
//! (chunk → chunk).
//!
//! Everything is driven by hash maps built once (name → symbols, path → file, module suffix →
//! files), so resolution costs O(total imports + total calls) map lookups.
//!
//! Call resolution, in order:
//! 1. a symbol with the callee's name in the same file (filtered by the qualifier: `self`/`this`
//!    → methods of the caller's type, `Type::`/`Type.` → members of that type, another
//!    expression → methods, none → free functions/types first) → `resolved = true`;
//! 2. such a symbol in a file this file imports (files whose import lists the callee first)
//!    → `resolved = true`;
//! 3. a unique such symbol anywhere in the build, else a unique one in the caller's directory
//!    → `resolved = false` (inferred).
//!
//! Ambiguity at any step yields no edge (precision first). Overloads (same qualified name in one
//! file) count as one candidate, the first one is used.
//!
//! Layout: this file holds [`resolve`]; the public types are in `types.rs`, `index.rs` builds
//! the lookup tables and resolves imports per language, `calls.rs` resolves calls (the order
//! above), and `paths.rs` is a leaf of repository-path helpers both use.

use std::collections::HashMap;

mod calls;
mod index;
mod paths;
mod types;

pub mod eval;

pub use types::{EdgeKind, FileFacts, NodeRef, ResolvedEdge};

use calls::{owner_of, resolve_call, CallCtx, Qual};
use index::Index;

/// Resolves CONTAINS, IMPORTS and CALLS edges across `files`. Output is sorted and deduplicated.
pub fn resolve(files: &[FileFacts]) -> Vec<ResolvedEdge> {
    let idx = Index::build(files);
    let mut edges: Vec<ResolvedEdge> = Vec::new();

    // CONTAINS.
    for (fi, f) in files.iter().enumerate() {
        let chunks = &f.extract.chunks;
        for (ci, c) in chunks.iter().enumerate() {
            if c.symbol_id.is_empty() || !c.kind.is_symbol() {
                continue;
            }
            let src = match c.parent {
                None => NodeRef::File(fi),
                Some(p) if p < chunks.len() && !chunks[p].symbol_id.is_empty() => {
                    NodeRef::Chunk { file: fi, chunk: p }
                }
                Some(_) => continue,
            };
            edges.push(ResolvedEdge {
                kind: EdgeKind::Contains,
                src,
                dst: NodeRef::Chunk {
                    file: fi,
                    chunk: ci,
                },
                resolved: true,
            });
        }
    }

    // IMPORTS: per file, the imported files and which of them each imported name points to.
    let mut imported: Vec<Vec<usize>> = Vec::with_capacity(files.len());
    let mut named: Vec<HashMap<&str, Vec<usize>>> = Vec::with_capacity(files.len());
    for (fi, f) in files.iter().enumerate() {
        let mut targets: Vec<usize> = Vec::new();
        let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
        for imp in &f.extract.imports {
            let mut found = idx.resolve_import(fi, f, &imp.module, &imp.names);
            found.retain(|&t| t != fi);
            found.sort_unstable();
            found.dedup();
            for &t in &found {
                for n in &imp.names {
                    by_name.entry(n.as_str()).or_default().push(t);
                }
            }
            targets.extend(found);
        }
        targets.sort_unstable();
        targets.dedup();
        for &t in &targets {
            edges.push(ResolvedEdge {
                kind: EdgeKind::Imports,
                src: NodeRef::File(fi),
                dst: NodeRef::File(t),
                resolved: true,
            });
        }
        imported.push(targets);
        named.push(by_name);
    }

    // CALLS.
    for (fi, f) in files.iter().enumerate() {
        let chunks = &f.extract.chunks;
        for call in &f.extract.calls {
            if call.from >= chunks.len() || call.callee.is_empty() {
                continue;
            }
            let caller_owner = owner_of(&chunks[call.from].qualified);
            let q = Qual::new(call.qualifier.as_deref());
            let ctx = CallCtx {
                files,
                caller_file: fi,
                caller_owner,
                q,
            };
            if let Some((dst, resolved)) =
                resolve_call(&idx, &ctx, &call.callee, &imported[fi], &named[fi])
            {
                edges.push(ResolvedEdge {
                    kind: EdgeKind::Calls,
                    src: NodeRef::Chunk {
                        file: fi,
                        chunk: call.from,
                    },
                    dst: NodeRef::Chunk {
                        file: dst.0,
                        chunk: dst.1,
                    },
                    resolved,
                });
            }
        }
    }

    edges.sort();
    edges.dedup_by(|later, kept| {
        let same = later.kind == kept.kind && later.src == kept.src && later.dst == kept.dst;
        if same {
            kept.resolved |= later.resolved;
        }
        same
    });
    edges
}

#[cfg(test)]
mod tests;
