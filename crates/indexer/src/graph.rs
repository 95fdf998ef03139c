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
//! Resolution never reads chunk text: what it needs of the declarations (stated return types,
//! bases, callback parameter types, a `Cargo.toml`'s package name) is taken per file while the
//! text is there ([`Declarations::of`], `decl.rs`), so a build can drop every parsed text first.
//!
//! Layout: this file holds [`resolve`]; the public types are in `types.rs`, `decl.rs` reads
//! declarations (and holds `split_method`, `callable_target`), `index.rs` builds the lookup
//! tables and resolves imports per language, `calls.rs` resolves calls (the order above), and
//! `paths.rs` is a leaf of repository-path helpers.

mod calls;
mod decl;
mod index;
mod paths;
mod types;

pub mod eval;

pub use decl::Declarations;
pub use types::{EdgeKind, FileFacts, NodeRef, ResolvedEdge};

use calls::{resolve_call, CallCtx, Confidence, Scope};
use index::Index;

use crate::chunk::{Call, CallRef, Language, PackedCalls, MODULE_ALIAS};
use rayon::prelude::*;

/// Whether `path` is the file of a module named `name` (`b.rs`, `b/mod.rs`, `b.py`,
/// `b/__init__.py`, `b.ts`, `b/index.ts`).
fn is_module_file(path: &str, name: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    let stem = file.split('.').next().unwrap_or(file);
    if stem == name {
        return true;
    }
    let dir = path.rsplit('/').nth(1).unwrap_or("");
    matches!(stem, "mod" | "__init__" | "index") && dir == name
}

/// Resolves CONTAINS, IMPORTS and CALLS edges across `files`. Output is sorted and deduplicated.
pub fn resolve(files: &[FileFacts]) -> Vec<ResolvedEdge> {
    let calls = files
        .iter()
        .map(|f| FileCalls::Borrowed(&f.extract.calls))
        .collect();
    resolve_with(files, calls)
}

/// [`resolve`] with each file's calls handed over packed instead of read from its facts
/// (`calls[i]` are file `i`'s; its `extract.calls` are not read): a build holds the calls of
/// the whole tree from the parse to here, packed (on the cargo registry, 1.6M calls, 141 MB
/// as values), and each file's are freed as soon as that file is resolved. The same edges
/// as [`resolve`] over the same calls.
///
/// # Panics
/// If `calls` does not hold one list per file (a caller's bug, not bad input).
pub fn resolve_packed_calls(files: &[FileFacts], calls: Vec<PackedCalls>) -> Vec<ResolvedEdge> {
    resolve_with(files, calls.into_iter().map(FileCalls::Packed).collect())
}

/// One file's calls, as [`resolve`] or [`resolve_packed_calls`] was given them.
enum FileCalls<'a> {
    Borrowed(&'a [Call]),
    Packed(PackedCalls),
}

fn resolve_with(files: &[FileFacts], calls: Vec<FileCalls<'_>>) -> Vec<ResolvedEdge> {
    assert_eq!(calls.len(), files.len(), "one call list per file");
    let idx = Index::build(files);
    let mut edges: Vec<ResolvedEdge> = Vec::new();

    // CONTAINS.
    for (fi, f) in files.iter().enumerate() {
        let chunks = &f.extract.chunks;
        for (ci, c) in chunks.iter().enumerate() {
            if !c.symbol.is_some() || !c.kind.is_symbol() {
                continue;
            }
            let src = match c.parent {
                None => NodeRef::file(fi),
                Some(p) if p < chunks.len() && chunks[p].symbol.is_some() => NodeRef::chunk(fi, p),
                Some(_) => continue,
            };
            edges.push(ResolvedEdge {
                kind: EdgeKind::Contains,
                src,
                dst: NodeRef::chunk(fi, ci),
                resolved: true,
            });
        }
    }

    // IMPORTS, and what each file sees through them (each imported name resolved on its own,
    // so `use a::{b, f}` links `b` to `a/b.rs` and `f` to `a.rs`).
    // Each file's scope and import targets are found on their own (in parallel, in file
    // order), as are its calls below; the edges are sorted at the end.
    let per_file: Vec<(Scope, Vec<usize>)> = (files.par_iter().enumerate())
        .map(|(fi, f)| file_scope(&idx, fi, f))
        .collect();
    let mut scopes: Vec<Scope> = Vec::with_capacity(files.len());
    for (fi, (sc, targets)) in per_file.into_iter().enumerate() {
        for &t in &targets {
            edges.push(ResolvedEdge {
                kind: EdgeKind::Imports,
                src: NodeRef::file(fi),
                dst: NodeRef::file(t),
                resolved: true,
            });
        }
        scopes.push(sc);
    }

    // CALLS. Each file's packed calls are dropped once resolved.
    let calls: Vec<Vec<ResolvedEdge>> = (calls.into_par_iter().enumerate())
        .map(|(fi, calls)| match calls {
            FileCalls::Borrowed(c) => {
                file_calls(&idx, files, &scopes, fi, c.iter().map(Call::view))
            }
            FileCalls::Packed(p) => file_calls(&idx, files, &scopes, fi, p.iter()),
        })
        .collect();
    // Sized once (growing by doubling while 800k edges of 56 bytes came in left up to twice
    // that reserved), and sorted in place: equal edges are equal in every field, so an
    // unstable sort gives the same order as a stable one.
    edges.reserve_exact(calls.iter().map(Vec::len).sum());
    edges.extend(calls.into_iter().flatten());

    edges.sort_unstable();
    edges.dedup_by(|later, kept| {
        let same = later.kind == kept.kind && later.src == kept.src && later.dst == kept.dst;
        if same {
            kept.resolved |= later.resolved;
        }
        same
    });
    edges
}

/// What file `fi` sees through its imports, and the files it imports.
fn file_scope<'a>(idx: &Index<'a>, fi: usize, f: &FileFacts<'a>) -> (Scope<'a>, Vec<usize>) {
    let mut targets: Vec<usize> = Vec::new();
    let mut sc = Scope::default();
    for imp in &f.extract.imports {
        let mut whole = idx.resolve_import(fi, f, &imp.module, &[]);
        whole.retain(|&t| t != fi);
        for n in &imp.names {
            let mut found = idx.resolve_import(fi, f, &imp.module, std::slice::from_ref(n));
            found.retain(|&t| t != fi);
            let local = imp
                .aliases
                .iter()
                .find(|(_, orig)| orig == n)
                .map_or(n.as_str(), |(l, _)| l.as_str());
            for &t in &found {
                // `use crate::graph;` / `from pkg import mod` bind a module; a file named
                // like the item it defines (`arrRemove.ts`) is also searched for the item.
                if f.language != Language::TypeScript
                    && f.language != Language::Tsx
                    && f.language != Language::JavaScript
                    && is_module_file(idx.path_of(t), n)
                {
                    sc.modules.entry(local).or_default().push(t);
                }
                sc.named.entry(local).or_default().push((t, n.as_str()));
            }
            targets.extend(found);
        }
        for (local, orig) in &imp.aliases {
            if orig == MODULE_ALIAS {
                sc.modules
                    .entry(local.as_str())
                    .or_default()
                    .extend(whole.iter().copied());
            }
        }
        let module_alias = imp.aliases.iter().any(|(_, o)| o == MODULE_ALIAS);
        if imp.names.is_empty() && !module_alias {
            match f.language {
                // `mod foo;` / `extern crate foo;` bind a module name; `use a::b::*` (a
                // path) makes its items visible. Elsewhere a whole-module import without
                // names is a glob: `from x import *`, `#include`, JS `export * from` (a
                // barrel's re-exports; a bare `import "x"` defines nothing callers use).
                Language::Rust
                    if !imp.module.contains("::")
                        && !matches!(imp.module.as_str(), "super" | "self" | "crate") =>
                {
                    sc.modules
                        .entry(imp.module.as_str())
                        .or_default()
                        .extend(whole.iter().copied());
                }
                _ => sc.globs.extend(whole.iter().copied()),
            }
        }
        targets.extend(whole);
    }
    sc.globs.sort_unstable();
    sc.globs.dedup();
    for v in sc.modules.values_mut() {
        v.sort_unstable();
        v.dedup();
    }
    for v in sc.named.values_mut() {
        v.sort_unstable();
        v.dedup();
    }
    targets.sort_unstable();
    targets.dedup();
    (sc, targets)
}

/// The resolved calls made from file `fi`'s chunks.
fn file_calls<'a, 'c>(
    idx: &Index<'a>,
    files: &[FileFacts<'a>],
    scopes: &[Scope<'a>],
    fi: usize,
    calls: impl Iterator<Item = CallRef<'c>>,
) -> Vec<ResolvedEdge> {
    let mut edges = Vec::new();
    let chunks = &files[fi].extract.chunks;
    for call in calls {
        if call.from >= chunks.len() || call.callee.is_empty() {
            continue;
        }
        let ctx = CallCtx {
            files,
            scopes,
            caller_file: fi,
            caller: &chunks[call.from].qualified,
        };
        let hit = resolve_call(idx, &ctx, call.callee, call.qualifier, call.receiver);
        if let Some((dst, confidence)) = hit {
            edges.push(ResolvedEdge {
                kind: EdgeKind::Calls,
                src: NodeRef::chunk(fi, call.from),
                dst: NodeRef::chunk(dst.0, dst.1),
                resolved: confidence == Confidence::Exact,
            });
        }
    }
    edges
}

#[cfg(test)]
mod tests;
