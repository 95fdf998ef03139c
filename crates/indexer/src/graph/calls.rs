//! Call resolution: same file, then imported files, then a unique symbol in the whole build
//! or the caller's directory, each step filtered by the call's qualifier (see the order in
//! the parent module's doc).

use std::collections::HashMap;

use super::index::{Index, Sym};
use super::paths::{dir_name, dir_of, stem_of};
use super::FileFacts;

/// Global candidate lists longer than this are not scanned (the name is too common).
const MAX_GLOBAL_CANDIDATES: usize = 512;

/// Qualifier categories of a call.
pub(super) enum Qual<'a> {
    None,
    /// `self`, `this`, `Self`, `cls`, `super`.
    SelfLike,
    /// Anything else; holds its last path segment (`os.path` → `path`, `a::Foo` → `Foo`).
    Other(&'a str),
}

impl<'a> Qual<'a> {
    pub(super) fn new(q: Option<&'a str>) -> Self {
        match q {
            None => Qual::None,
            Some(q) => {
                let q = q.trim();
                if q.is_empty() {
                    return Qual::None;
                }
                if matches!(
                    q,
                    "self" | "this" | "Self" | "cls" | "super" | "this.constructor"
                ) {
                    return Qual::SelfLike;
                }
                let last = q
                    .rsplit(['.', ':', '>', '/'])
                    .find(|s| !s.is_empty())
                    .unwrap_or(q);
                Qual::Other(last)
            }
        }
    }
}

pub(super) struct CallCtx<'a, 'f> {
    pub(super) files: &'f [FileFacts<'a>],
    pub(super) caller_file: usize,
    pub(super) caller_owner: &'f str,
    pub(super) q: Qual<'f>,
}

/// Owner type/module of a qualified name: `a/Foo#bar` → `Foo`, `m/f` → `m`, `f` → ``.
pub(super) fn owner_of(qualified: &str) -> &str {
    let path = match qualified.rsplit_once('#') {
        Some((p, _)) => p,
        None => match qualified.rsplit_once('/') {
            Some((p, _)) => p,
            None => "",
        },
    };
    path.rsplit('/').next().unwrap_or("")
}

fn is_method(qualified: &str) -> bool {
    qualified.contains('#')
}

pub(super) fn resolve_call(
    idx: &Index,
    ctx: &CallCtx,
    callee: &str,
    imported: &[usize],
    named: &HashMap<&str, Vec<usize>>,
) -> Option<(Sym, bool)> {
    // 1. Same file.
    if let Some(local) = idx.per_file[ctx.caller_file].get(callee) {
        let cands: Vec<Sym> = local.iter().map(|&c| (ctx.caller_file, c)).collect();
        let picked = filter(ctx, &cands, Step::SameFile);
        if !picked.is_empty() {
            return unique(ctx.files, &picked).map(|s| (s, true));
        }
    }
    // 2. Imported files (those whose import names the callee first).
    if !imported.is_empty() {
        let mut tiers: Vec<&[usize]> = Vec::new();
        if let Some(t) = named.get(callee) {
            tiers.push(t);
        }
        tiers.push(imported);
        for tier in tiers {
            let mut cands = Vec::new();
            for &t in tier {
                if let Some(list) = idx.per_file[t].get(callee) {
                    cands.extend(list.iter().map(|&c| (t, c)));
                }
            }
            let picked = filter(ctx, &cands, Step::Imported);
            if !picked.is_empty() {
                return unique(ctx.files, &picked).map(|s| (s, true));
            }
        }
    }
    // 3. Global, then same directory.
    let all = idx.global.get(callee)?;
    if all.len() <= MAX_GLOBAL_CANDIDATES {
        let cands: Vec<Sym> = all
            .iter()
            .copied()
            .filter(|s| s.0 != ctx.caller_file)
            .collect();
        let picked = filter(ctx, &cands, Step::Global);
        if picked.len() == 1 {
            return Some((picked[0], false));
        }
        if picked.is_empty() {
            return None;
        }
    }
    let dir = dir_of(ctx.files[ctx.caller_file].path);
    let local = idx.by_dir.get(&(dir, callee))?;
    let cands: Vec<Sym> = local
        .iter()
        .copied()
        .filter(|s| s.0 != ctx.caller_file)
        .collect();
    let picked = filter(ctx, &cands, Step::Global);
    if picked.len() == 1 {
        return Some((picked[0], false));
    }
    None
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Step {
    SameFile,
    Imported,
    Global,
}

/// Keeps the candidates compatible with the call's qualifier.
fn filter(ctx: &CallCtx, cands: &[Sym], step: Step) -> Vec<Sym> {
    let q = |s: &Sym| ctx.files[s.0].extract.chunks[s.1].qualified.as_str();
    match ctx.q {
        Qual::None => {
            let free: Vec<Sym> = cands.iter().copied().filter(|s| !is_method(q(s))).collect();
            if !free.is_empty() || step != Step::SameFile {
                return free;
            }
            // Implicit `this` (Java, C++): methods of the caller's own type.
            cands
                .iter()
                .copied()
                .filter(|s| !ctx.caller_owner.is_empty() && owner_of(q(s)) == ctx.caller_owner)
                .collect()
        }
        Qual::SelfLike => {
            let own: Vec<Sym> = cands
                .iter()
                .copied()
                .filter(|s| is_method(q(s)) && owner_of(q(s)) == ctx.caller_owner)
                .collect();
            if !own.is_empty() || step == Step::SameFile {
                return own;
            }
            // Inherited methods.
            cands.iter().copied().filter(|s| is_method(q(s))).collect()
        }
        Qual::Other(last) => {
            let typed: Vec<Sym> = cands
                .iter()
                .copied()
                .filter(|s| owner_of(q(s)) == last)
                .collect();
            if !typed.is_empty() {
                return typed;
            }
            // A capitalised qualifier names a type (`HashMap::new`, `Math.max`): a type we did
            // not find owns none of these candidates, so only module-like matches remain.
            let type_like = last.chars().next().is_some_and(char::is_uppercase);
            cands
                .iter()
                .copied()
                .filter(|s| {
                    if is_method(q(s)) {
                        return !type_like;
                    }
                    // `module.func()` / `pkg.Func()`: a free function of a file named like the
                    // qualifier (or in a directory named like it).
                    step != Step::SameFile && {
                        let p = ctx.files[s.0].path;
                        stem_of(p) == last || dir_name(p) == last
                    }
                })
                .collect()
        }
    }
}

/// The single candidate, treating overloads (same file and qualified name) as one.
fn unique(files: &[FileFacts], cands: &[Sym]) -> Option<Sym> {
    let first = *cands.first()?;
    let fq = &files[first.0].extract.chunks[first.1].qualified;
    let all_same = cands
        .iter()
        .all(|s| s.0 == first.0 && &files[s.0].extract.chunks[s.1].qualified == fq);
    if all_same {
        cands.iter().copied().min()
    } else {
        None
    }
}
